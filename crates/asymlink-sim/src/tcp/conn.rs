//! The TCP connection state machine.
//!
//! Sequence numbers are handled as 64-bit offsets from each side's initial sequence number
//! (the SYN is offset 0, the first data byte offset 1); they are converted to and from
//! 32-bit wire values only at the edges, so nothing inside wraps.

use super::bbr::{AckCtx, Bbr, BbrInfo};
use super::cc::{AckSample, Cc, HyStartExit};
use super::config::{
    CcAlgo, CwndValidation, DelackMode, GrowBy, IdleRestart, NagleRule, TcpConfig, TimeoutMode,
};
use super::pacing::{Pacer, MIN_TSO_SEGS};
use super::rate::{RateSample, RateSampler};
use super::recv::{RcvAutotune, RcvBufOpts, Receiver};
use super::rtt::RttEstimator;
use super::scoreboard::{self, Delivery, Rack, RackLoss, Scoreboard, SentSeg};
use super::{Admit, ConnIo};
use crate::packet::ConnId;
use asymlink_core::time::{earliest, Duration, Instant};
use asymlink_core::wire::{
    Ecn, Headers, IpRepr, SackBlock, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Timestamp, Transport,
};
use core::net::IpAddr;
use std::sync::Arc;

/// Connection states (RFC 9293 §3.3.2; LISTEN lives in the host).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum State {
    /// SYN sent, waiting for SYN-ACK.
    SynSent,
    /// SYN received, SYN-ACK sent.
    SynRcvd,
    /// Data transfer.
    Established,
    /// Our FIN sent, not yet acknowledged.
    FinWait1,
    /// Our FIN acknowledged, waiting for the peer's.
    FinWait2,
    /// Peer's FIN received, ours not yet sent.
    CloseWait,
    /// Both FINs sent, ours not yet acknowledged (simultaneous close).
    Closing,
    /// Peer's FIN received, our FIN sent, waiting for its ACK.
    LastAck,
    /// Both FINs done; lingering to re-acknowledge a retransmitted FIN.
    TimeWait,
    /// Done.
    Closed,
}

/// Congestion state of the sender (named after Linux's `tcp_ca_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaState {
    /// Normal.
    Open,
    /// Duplicate ACKs seen, below the threshold.
    Disorder,
    /// Fast recovery.
    Recovery,
    /// After a retransmission timeout, until the recovery point is acknowledged.
    Loss,
}

/// What happened, for the application.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConnEvent {
    /// Handshake completed.
    Established,
    /// This many new bytes were delivered in order to the application.
    Delivered(u64),
    /// This many bytes the application wrote were acknowledged by the peer.
    Acked(u64),
    /// The peer closed its direction (FIN received in order).
    PeerClosed,
    /// Both directions closed.
    Closed,
    /// The connection failed (handshake gave up, or reset).
    Reset,
    /// A fast retransmit started a recovery.
    FastRetransmit,
    /// A retransmission timeout fired.
    Timeout,
    /// A tail-loss probe was sent (`TcpConfig::tlp`).
    LossProbe,
}

impl ConnEvent {
    /// Every kind's [`ConnEvent::bit`].
    pub const ALL: u16 = (1 << 9) - 1;

    /// The event's kind as one bit (its data aside), for sets of kinds (`App::wants`).
    #[inline]
    pub fn bit(&self) -> u16 {
        1 << match self {
            ConnEvent::Established => 0,
            ConnEvent::Delivered(_) => 1,
            ConnEvent::Acked(_) => 2,
            ConnEvent::PeerClosed => 3,
            ConnEvent::Closed => 4,
            ConnEvent::Reset => 5,
            ConnEvent::FastRetransmit => 6,
            ConnEvent::Timeout => 7,
            ConnEvent::LossProbe => 8,
        }
    }
}

/// Counters of one connection.
///
/// `repr(C)`: those every segment adds to are the last, in the connection's hot lines.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct ConnStats {
    /// Payload bytes retransmitted.
    pub bytes_retransmitted: u64,
    /// Segments retransmitted.
    pub retransmits: u64,
    /// Retransmission timeouts.
    pub timeouts: u64,
    /// Timeouts found spurious and undone (`TcpConfig::rto_undo`).
    pub spurious_timeouts: u64,
    /// Fast retransmits (recovery episodes entered by duplicate ACKs or SACK).
    pub fast_retransmits: u64,
    /// ECN echoes acted upon.
    pub ecn_reductions: u64,
    /// Zero-window probes sent (persist timer).
    pub window_probes: u64,
    /// Tail-loss probes sent (`TcpConfig::tlp`; Linux's TCPLossProbes).
    pub loss_probes: u64,
    /// Losses a tail-loss probe repaired, each answered by a cwnd reduction (Linux's
    /// TCPLossProbeRecovery).
    pub loss_probe_recoveries: u64,
    /// Slow starts ended by HyStart's ACK-train detector.
    pub hystart_train_exits: u64,
    /// Slow starts ended by HyStart's delay detector.
    pub hystart_delay_exits: u64,
    /// ACKs carrying a D-SACK block (`TcpConfig::dsack`; Linux's TCPDSACKRecv).
    pub dsacks_received: u64,
    /// Fast recoveries undone because every retransmission of them was reported as a
    /// duplicate (Linux's TCPDSACKUndo and TCPFullUndo).
    pub dsack_undos: u64,
    /// Segments dropped at the source by a policing conditioner.
    pub policed: u64,
    /// Segments transmitted (all kinds).
    pub segments_sent: u64,
    /// Payload bytes transmitted, retransmissions included.
    pub bytes_sent: u64,
    /// Pure ACKs transmitted.
    pub acks_sent: u64,
    /// Segments received.
    pub segments_received: u64,
    /// Payload bytes delivered in order to the application.
    pub bytes_delivered: u64,
    /// Payload bytes the peer acknowledged.
    pub bytes_acked: u64,
}

/// What undoing a fast recovery found spurious by D-SACKs needs (Linux `tcp_init_undo`).
#[derive(Clone, Copy, Debug)]
struct DsackUndo {
    /// SND.UNA when the recovery began (`undo_marker`).
    marker: u64,
    /// Retransmissions of the recovery not yet reported as duplicates (`undo_retrans`;
    /// -1 before the first).
    retrans: i64,
    prior_cwnd: u64,
    prior_ssthresh: u64,
}

/// Linux's `TCP_RACK_RECOVERY_THRESH`: recoveries a widened reordering window lasts.
const REO_WND_PERSIST: u32 = 16;
/// Linux `ICSK_ACK_PUSHED` and `ICSK_ACK_PUSHED2` (`Connection::ack_pushed`).
/// Linux's `MAX_TCP_HEADER` (room reserved for headers in each sent buffer).
const MAX_TCP_HEADER: u64 = 256;
/// `SKB_DATA_ALIGN(sizeof(struct skb_shared_info))`.
const SKB_SHINFO: u64 = 320;
/// `SKB_DATA_ALIGN(sizeof(struct sk_buff))`.
const SKB_STRUCT: u64 = 256;
/// The memory an `sk_buff` of the send queue takes beside its payload (`truesize` of a
/// small head: header room, shared info and the struct): 832 bytes.
const SKB_OVERHEAD: u64 = MAX_TCP_HEADER + SKB_SHINFO + SKB_STRUCT;
/// The largest `size_goal` (`sk_gso_max_size`: 64 KiB less `MAX_TCP_HEADER` + 1).
const GSO_GOAL_MAX: u64 = 65_536 - MAX_TCP_HEADER - 1;
const ACK_PUSHED: u8 = 1;
const ACK_PUSHED2: u8 = 2;

/// Proportional rate reduction state (RFC 6937 §3, Linux `prior_cwnd`, `prr_delivered`,
/// `prr_out`), in segments.
#[derive(Clone, Copy, Debug)]
struct Prr {
    /// cwnd when the recovery began.
    prior_cwnd: u64,
    /// Segments delivered (SACKed or acknowledged) during the recovery.
    delivered: u64,
    /// Segments sent during the recovery.
    out: u64,
}

/// Slack added to the RACK reordering timer (Linux `TCP_TIMEOUT_MIN_US`).
const REO_SLACK: Duration = Duration::from_millis(2);
/// Tail-loss probe timeout when more than one segment is outstanding: 2·SRTT plus Linux's
/// `TCP_TIMEOUT_MIN_US`.
const TLP_SLACK: Duration = Duration::from_millis(2);
/// Tail-loss probe timeout without an RTT sample (Linux `TCP_TIMEOUT_INIT`).
const TLP_INITIAL: Duration = Duration::from_secs(1);

/// One end of a TCP connection.
///
/// The fields are laid out by how often a segment reads them (`repr(C)` keeps the order;
/// each connection starts a cache line): with thousands of connections the state of the
/// one a segment arrives for is rarely in the caches, and every cache line it touches is a
/// miss. The fields read on every segment at either end come first, then those of the
/// receiver's data path, then the sender's ACK path; what recovery, RACK, D-SACK, Linux's
/// writer and the handshake use comes last. The configuration is shared (a pointer) and
/// the timers take eight bytes each. A test checks how many lines each path spans.
#[repr(C, align(64))]
pub struct Connection {
    // The counters (the fields every segment adds to are their last) and the
    // configuration (the fields read on every segment are its first).
    stats: ConnStats,
    /// The configuration, shared by the connections of equal configurations (the world
    /// gives its flows' equal configurations one allocation): its lines stay in the caches
    /// however many connections there are.
    cfg: Arc<TcpConfig>,
    // Read or written on every segment, at either end (send side: offsets from iss;
    // receive side: offsets from irs).
    snd_una: u64,
    snd_max: u64,
    snd_wnd: u64,
    snd_wl1: u64,
    snd_wl2: u64,
    max_snd_wnd: u64,
    app_end: u64,
    /// Linux's sender: how far the writer has copied into the send buffer (`write_seq`).
    write_seq: u64,
    rcv: Receiver,
    rcv_edge: u64,
    last_ack_sent: u64,
    unread: u64,
    fin_off: Option<u64>,
    /// The peer's FIN received beyond a hole: its offset, taken once RCV.NXT reaches it.
    peer_fin_at: Option<u64>,
    /// A duplicate to report in the next ACK's first SACK block (RFC 2883).
    dsack_block: Option<(u64, u64)>,
    rto_at: Deadline,
    /// RACK reordering timer and tail-loss probe timer (at most one armed; Linux keeps
    /// them in the retransmission timer's slot, the RTO stays armed here behind them).
    reo_at: Deadline,
    tlp_at: Deadline,
    delack_at: Deadline,
    persist_at: Deadline,
    wake_at: Deadline,
    linger_at: Deadline,
    id: ConnId,
    mss: u32,
    iss: u32,
    irs: u32,
    ack_pending: u32,
    quickack_left: u32,
    ts_recent: u32,
    dupacks: u32,
    /// Probes sent since the peer's window closed: the persist timer's backoff.
    persist_backoff: u32,
    ip_ident: u16,
    local: (IpAddr, u16),
    remote: (IpAddr, u16),
    state: State,
    ca_state: CaState,
    sack_ok: bool,
    ts_ok: bool,
    ecn_ok: bool,
    /// `cfg` asks for pacing (see [`Connection::paced`]); the configuration never
    /// changes, so this is decided once.
    paced: bool,
    snd_wscale: u8,
    rcv_wscale: u8,
    fin_queued: bool,
    /// Linux's sender (`delack_mode = "linux"`): the writer copies into a send buffer of
    /// `sk_sndbuf` bytes of memory (0: not set up yet; `u64::MAX`: unlimited), waits when
    /// it is full (`writer_waiting`); `tail_skb` is where the last buffer it filled starts;
    /// `tx_skbs` the ends of the packets sent (each a buffer of its own) not yet
    /// acknowledged, for the memory they take.
    linux_writer: bool,
    writer_waiting: bool,
    ack_now: bool,
    /// Whether the application reads what arrives; if not, it stays in the receive buffer
    /// (`unread` bytes) and the advertised window shrinks, down to zero.
    reading: bool,
    peer_fin: bool,
    /// Linux's `icsk_ack.pending` push bits: a full-sized segment with PSH or a short
    /// segment arrived since the last ACK (`PUSHED`), a second short one (`PUSHED2`).
    ack_pushed: u8,
    /// Linux's ping-pong (interactive) mode: data was sent within `ato` of data received.
    pingpong: bool,
    /// Congestion-window validation (Linux `tcp_cwnd_validate`): whether the flow was
    /// cwnd-limited in the current window, its largest flight (`snd_max - snd_una`) in
    /// that window, and where the window ends.
    cwnd_limited: bool,
    /// The retransmission timer fired and no ACK of new data came since (Linux's
    /// `icsk_retransmits` is not zero).
    rto_unanswered: bool,
    ece_pending: bool,
    cwr_pending: bool,
    // The receiver's data path with Linux's delayed-ACK engine and autotuning.
    /// Linux's delayed-ACK engine (`DelackMode::Linux`): the ACK timeout `ato` (zero
    /// before the first data), when data last arrived in order (`lrcvtime`), the
    /// receiver's segment size estimate `rcv_mss` and the last short segment's size.
    ato: Duration,
    lrcvtime: Instant,
    rcv_mss: u64,
    last_seg_size: u64,
    /// Receive-buffer autotuning (`TcpConfig::rcv_autotune`).
    autotune: Option<RcvAutotune>,
    // The sender's ACK path (the congestion control last: its first fields are its hot
    // ones).
    /// Congestion-window validation (see `cwnd_limited`): the largest flight in the
    /// current window, and where the window ends.
    max_flight: u64,
    cwnd_usage_seq: u64,
    recover: u64,
    /// When data (new or retransmitted) was last sent (Linux's `lsndtime`).
    last_data_sent: Option<Instant>,
    rtt: RttEstimator,
    /// PRR during a fast recovery (`TcpConfig::prr`).
    prr: Option<Prr>,
    /// The open tail-loss-probe episode: SND.NXT when the probe was sent, and whether the
    /// probe was a retransmission (RFC 8985 TLP.end_seq, TLP.is_retrans).
    tlp_high_seq: Option<u64>,
    /// Pacing (`Connection::paced`): the next departure time and the rate.
    pacer: Pacer,
    sb: Scoreboard,
    cc: Cc,
    // Recovery, RACK, D-SACK, Linux's writer, the handshake: rarely or never read on the
    // common path.
    /// RACK (`TcpConfig::rack`): the latest delivery, and the deliveries of the current ACK.
    rack: Rack,
    deliveries: Vec<Delivery>,
    /// RFC 6675 RescueRxt: the `recover` of the recovery that made the last rescue
    /// retransmission.
    rescue_rxt: Option<u64>,
    ecn_recover: u64,
    /// Spurious-timeout undo (`TcpConfig::rto_undo`): cwnd and ssthresh before the
    /// timeout and the timestamp of its first retransmission.
    undo: Option<(u64, u64, u32)>,
    /// D-SACK undo of the current fast recovery (`TcpConfig::dsack`, Linux `undo_marker`,
    /// `undo_retrans`, `prior_cwnd`, `prior_ssthresh`).
    dsack_undo: Option<DsackUndo>,
    /// `delivered` when RACK's reordering window last widened (see `reo_wnd_steps`).
    reo_wnd_delivered: u64,
    /// Segments reported as duplicates so far (Linux `dsack_dups`): D-SACKs beyond the
    /// retransmissions sent are ignored.
    dsack_dups: u64,
    /// End of the last short (less than one MSS) data segment sent (Linux's `snd_sml`).
    snd_sml: u64,
    /// Linux's sender: where it last marked PSH (`pushed_seq`), and the marks not yet sent.
    pushed_seq: u64,
    push_marks: std::collections::VecDeque<u64>,
    /// Linux's sender: the send buffer's memory, where its last buffer starts and the ends
    /// of its packets in flight (see `linux_writer`).
    sk_sndbuf: u64,
    /// Linux's sender: the application's bytes per `send()` (0: one call takes a whole
    /// write) and where the current call ends (`u64::MAX`: with the write).
    write_size: u64,
    call_end: u64,
    tail_skb: u64,
    tx_skbs: std::collections::VecDeque<u64>,
    /// BBR (`cc = "bbr"`): its model and the delivery-rate samples it feeds on.
    bbr: Option<Box<(Bbr, RateSampler)>>,
    /// RACK's reordering window in units of min RTT / 4, widened on D-SACKs after
    /// reordering, and for how many more recoveries a widened window persists; `delivered`
    /// when it last widened (Linux `reo_wnd_steps`, `reo_wnd_persist`, `last_delivered`).
    reo_wnd_steps: u32,
    reo_wnd_persist: u32,
    syn_tries: u32,
    peer_ws: bool,
    /// `recover` was set by a timeout (not by a fast retransmit).
    recover_after_rto: bool,
    tlp_retrans: bool,
    dsack_seen: bool,
}

/// A timer's deadline, or none: `u64::MAX` ns, the end of time, which no timer is ever
/// set to (every deadline is a bounded interval after the current time). Eight bytes
/// where an `Option<Instant>` takes sixteen, and the earliest of several is their minimum.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Deadline(u64);

impl Deadline {
    const NONE: Deadline = Deadline(u64::MAX);

    #[inline(always)]
    fn at(t: Instant) -> Deadline {
        debug_assert!(t.0 != u64::MAX, "a deadline at the end of time");
        Deadline(t.0)
    }

    #[inline(always)]
    fn get(self) -> Option<Instant> {
        self.is_some().then_some(Instant(self.0))
    }

    #[inline(always)]
    fn is_some(self) -> bool {
        self != Deadline::NONE
    }

    #[inline(always)]
    fn is_none(self) -> bool {
        self == Deadline::NONE
    }

    /// Set and at or before `now` (which is before the end of time).
    #[inline(always)]
    fn is_due(self, now: Instant) -> bool {
        debug_assert!(now.0 != u64::MAX);
        self.0 <= now.0
    }
}

impl From<Option<Instant>> for Deadline {
    #[inline(always)]
    fn from(t: Option<Instant>) -> Deadline {
        t.map_or(Deadline::NONE, Deadline::at)
    }
}

/// [`Connection::autotune`] to change: `autotune` read only when `on` (the configuration's
/// `rcv_autotune`).
#[inline(always)]
fn tuned(on: bool, autotune: &mut Option<RcvAutotune>) -> Option<&mut RcvAutotune> {
    debug_assert_eq!(autotune.is_some(), on);
    if on {
        autotune.as_mut()
    } else {
        None
    }
}

fn seq_of(base: u32, off: u64) -> SeqNumber {
    SeqNumber(base.wrapping_add(off as u32))
}

/// Unwrap a 32-bit wire value near a known 64-bit offset.
fn unwrap(base: u32, near: u64, v: SeqNumber) -> u64 {
    let d = v.diff(seq_of(base, near)) as i64;
    (near as i64 + d).max(0) as u64
}

impl Connection {
    fn blank(
        id: ConnId,
        cfg: &Arc<TcpConfig>,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
        iss: u32,
    ) -> Self {
        let mss = cfg.mss;
        Connection {
            id,
            cfg: Arc::clone(cfg),
            paced: cfg.pacing || cfg.max_pacing_rate.is_some() || cfg.cc == CcAlgo::Bbr,
            state: State::Closed,
            local,
            remote,
            ip_ident: (iss >> 16) as u16,
            mss,
            sack_ok: false,
            ts_ok: false,
            ecn_ok: false,
            snd_wscale: 0,
            rcv_wscale: 0,
            peer_ws: false,
            iss,
            irs: 0,
            snd_una: 0,
            snd_max: 0,
            app_end: 1,
            fin_queued: false,
            fin_off: None,
            snd_wnd: 0,
            snd_wl1: 0,
            snd_wl2: 0,
            max_snd_wnd: 0,
            snd_sml: 0,
            write_seq: 1,
            pushed_seq: 1,
            push_marks: Default::default(),
            linux_writer: cfg.delack_mode == DelackMode::Linux,
            sk_sndbuf: 0,
            writer_waiting: false,
            write_size: 0,
            call_end: u64::MAX,
            tail_skb: 1,
            tx_skbs: Default::default(),
            sb: Scoreboard::default(),
            cc: Cc::new(cfg, mss),
            rtt: RttEstimator::new(cfg.rto_initial, cfg.rto_min, cfg.rto_max, cfg.rto_floor),
            ca_state: CaState::Open,
            dupacks: 0,
            recover: 0,
            recover_after_rto: false,
            rto_unanswered: false,
            rescue_rxt: None,
            ecn_recover: 0,
            cwr_pending: false,
            undo: None,
            cwnd_limited: false,
            max_flight: 0,
            cwnd_usage_seq: 0,
            last_data_sent: None,
            rack: Rack::default(),
            deliveries: Vec::new(),
            prr: None,
            tlp_high_seq: None,
            tlp_retrans: false,
            dsack_undo: None,
            reo_wnd_steps: 1,
            reo_wnd_persist: 0,
            reo_wnd_delivered: 0,
            dsack_seen: false,
            dsack_dups: 0,
            rcv: Receiver::new(0),
            dsack_block: None,
            rcv_edge: 0,
            ack_pending: 0,
            ack_now: false,
            quickack_left: cfg.quickack,
            ece_pending: false,
            autotune: cfg.rcv_autotune.then(|| {
                RcvAutotune::with_opts(
                    cfg.rmem,
                    cfg.mss,
                    RcvBufOpts {
                        so_rcvbuf: cfg.so_rcvbuf,
                        window_clamp: cfg.window_clamp,
                        truesize: cfg.skb_truesize,
                    },
                )
            }),
            ato: Duration::ZERO,
            lrcvtime: Instant::ZERO,
            rcv_mss: (cfg.mss as u64).min(536),
            last_seg_size: 0,
            ack_pushed: 0,
            pingpong: false,
            ts_recent: 0,
            last_ack_sent: 0,
            peer_fin: false,
            peer_fin_at: None,
            rto_at: Deadline::NONE,
            reo_at: Deadline::NONE,
            tlp_at: Deadline::NONE,
            delack_at: Deadline::NONE,
            persist_at: Deadline::NONE,
            persist_backoff: 0,
            reading: true,
            unread: 0,
            wake_at: Deadline::NONE,
            linger_at: Deadline::NONE,
            bbr: None,
            pacer: Pacer::new(cfg.max_pacing_rate.map(|r| r.bits_per_sec() / 8)),
            syn_tries: 0,
            stats: ConnStats::default(),
        }
    }

    /// Open a connection actively: emits the SYN.
    pub fn connect(
        now: Instant,
        id: ConnId,
        cfg: &Arc<TcpConfig>,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
        iss: u32,
        io: &mut ConnIo<'_>,
    ) -> Connection {
        let mut c = Connection::blank(id, cfg, local, remote, iss);
        c.state = State::SynSent;
        c.rcv_wscale = if cfg.window_scaling {
            cfg.wscale_shift()
        } else {
            0
        };
        c.send_syn(now, io);
        c
    }

    /// Accept a connection from a received SYN: emits the SYN-ACK. Returns `None` if the
    /// segment is not a plain SYN.
    pub fn accept(
        now: Instant,
        id: ConnId,
        cfg: &Arc<TcpConfig>,
        local: (IpAddr, u16),
        syn: &Headers,
        iss: u32,
        io: &mut ConnIo<'_>,
    ) -> Option<Connection> {
        let t = syn.tcp_repr()?;
        if !t.flags.contains(TcpFlags::SYN) || t.flags.intersects(TcpFlags::ACK | TcpFlags::RST) {
            return None;
        }
        let mut c = Connection::blank(id, cfg, local, (syn.ip.src, t.src_port), iss);
        c.state = State::SynRcvd;
        c.irs = t.seq.0;
        c.rcv = Receiver::new(1);
        c.negotiate(t, true);
        c.snd_wnd = t.window as u64; // never scaled in a SYN
        c.max_snd_wnd = c.snd_wnd;
        c.ecn_ok = cfg.ecn && t.flags.contains(TcpFlags::ECE | TcpFlags::CWR);
        if let Some(ts) = t.opts.timestamp {
            c.ts_recent = ts.val;
        }
        c.send_syn(now, io);
        Some(c)
    }

    /// Apply the peer's SYN options.
    fn negotiate(&mut self, t: &TcpRepr, we_offer_later: bool) {
        let peer_mss = t.opts.mss.map(u32::from).unwrap_or(536);
        self.mss = self.cfg.mss.min(peer_mss).max(64);
        self.sack_ok = self.cfg.sack && t.opts.sack_permitted;
        self.ts_ok = self.cfg.timestamps && t.opts.timestamp.is_some();
        self.peer_ws = t.opts.wscale.is_some();
        match (self.cfg.window_scaling, t.opts.wscale) {
            (true, Some(ws)) => {
                self.snd_wscale = ws.min(14);
                if we_offer_later {
                    self.rcv_wscale = self.cfg.wscale_shift();
                }
            }
            _ => {
                self.snd_wscale = 0;
                self.rcv_wscale = 0;
            }
        }
        self.cc = Cc::new(&self.cfg, self.mss);
        self.quickack_left = match self.cfg.delack_mode {
            DelackMode::Fixed => self.cfg.quickack,
            // Linux enters quick-ACK mode at the first data (`tcp_event_data_recv`).
            DelackMode::Linux => 0,
        };
        self.rcv_mss = (self.mss as u64).min(536);
        self.sb
            .track_deliveries(self.rack_on() || self.cfg.cc == CcAlgo::Bbr);
    }

    /// BBR's model exists (it is made at the first ACK): asked of the shared configuration
    /// first, so that a connection of another congestion control does not read the line
    /// of `bbr` on every send.
    #[inline(always)]
    fn bbr_on(&self) -> bool {
        self.cfg.cc == CcAlgo::Bbr && self.bbr.is_some()
    }

    /// RACK loss detection in use: configured, and SACK negotiated (Linux runs RACK only
    /// with SACK).
    fn rack_on(&self) -> bool {
        self.cfg.rack && self.sack_ok
    }

    fn send_syn(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        let mut opts = TcpOptions {
            mss: Some(self.cfg.mss.min(65_535) as u16),
            ..TcpOptions::default()
        };
        let syn_ack = self.state == State::SynRcvd;
        //= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
        //# A TCP MAY send the Window Scale option in a <SYN,ACK> segment only if
        //# it has received a Window Scale option in the initial <SYN> segment.
        if self.cfg.window_scaling && (!syn_ack || self.peer_ws) {
            opts.wscale = Some(self.rcv_wscale);
        }
        if self.cfg.sack && (!syn_ack || self.sack_ok) {
            opts.sack_permitted = true;
        }
        if self.cfg.timestamps && (!syn_ack || self.ts_ok) {
            opts.timestamp = Some(Timestamp {
                val: ts_clock(now),
                ecr: if syn_ack { self.ts_recent } else { 0 },
            });
        }
        let mut flags = TcpFlags::SYN;
        if syn_ack {
            flags = flags | TcpFlags::ACK;
            if self.ecn_ok {
                flags = flags | TcpFlags::ECE;
            }
        } else if self.cfg.ecn {
            flags = flags | TcpFlags::ECE | TcpFlags::CWR;
        }
        let tcp = TcpRepr {
            src_port: self.local.1,
            dst_port: self.remote.1,
            seq: seq_of(self.iss, 0),
            ack: if syn_ack {
                seq_of(self.irs, self.rcv.rcv_nxt())
            } else {
                SeqNumber(0)
            },
            flags,
            window: self.syn_window().min(65_535) as u16,
            urgent: 0,
            opts,
        };
        if self.snd_max == 0 {
            self.snd_max = 1;
            self.sb.push(SentSeg::new(0, 1, now, scoreboard::SYN));
        }
        if syn_ack {
            self.rcv_edge = self.rcv.rcv_nxt() + tcp.window as u64;
            self.last_ack_sent = self.rcv.rcv_nxt();
        }
        self.push_out(now, tcp, 0, Ecn::NotEct, io);
        self.rto_at = Deadline::at(now + self.rtt.rto());
    }

    // ---------------------------------------------------------------- accessors

    /// Whether a delivery showed the path reordering (RACK's scoreboard, Linux
    /// `reord_seen`): a segment never retransmitted delivered below one SACKed before it.
    pub fn reordering_seen(&self) -> bool {
        self.sb.reord_seen()
    }

    /// Connection id.
    pub fn id(&self) -> ConnId {
        self.id
    }
    /// State.
    pub fn state(&self) -> State {
        self.state
    }
    /// Congestion state.
    pub fn ca_state(&self) -> CaState {
        self.ca_state
    }
    /// Local address and port.
    pub fn local(&self) -> (IpAddr, u16) {
        self.local
    }
    /// Remote address and port.
    pub fn remote(&self) -> (IpAddr, u16) {
        self.remote
    }
    /// Counters.
    pub fn stats(&self) -> &ConnStats {
        &self.stats
    }
    /// Congestion window (bytes).
    pub fn cwnd(&self) -> u64 {
        self.cc.cwnd
    }
    /// Slow-start threshold (bytes).
    pub fn ssthresh(&self) -> u64 {
        self.cc.ssthresh
    }
    /// The delayed-ACK timeout of Linux's ACK engine (`ato`; zero before the first data)
    /// and the quick ACKs left.
    pub fn delack_state(&self) -> (Duration, u32) {
        (self.ato, self.quickack_left)
    }
    /// Receive buffer memory and the window it holds, with autotuning.
    pub fn rcvbuf_autotuned(&self) -> Option<(u64, u64)> {
        self.autotune
            .as_ref()
            .map(|a| (a.rcvbuf(), a.window_clamp()))
    }
    /// With BBR: whether the flow is marked app-limited (Linux `tp->app_limited`).
    pub fn app_limited(&self) -> bool {
        self.bbr.as_ref().is_some_and(|b| b.1.app_limited())
    }
    /// Linux's sender: the send buffer's size in bytes of memory (`sk_sndbuf`;
    /// `u64::MAX`: unlimited; 0 before the connection is set up).
    pub fn sndbuf(&self) -> u64 {
        self.sk_sndbuf
    }
    /// Smoothed RTT.
    pub fn srtt(&self) -> Option<Duration> {
        self.rtt.srtt()
    }
    /// Minimum RTT seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.rtt.min_rtt()
    }
    /// Current RTO.
    pub fn rto(&self) -> Duration {
        self.rtt.rto()
    }
    /// Bytes in flight (RFC 6675 pipe).
    pub fn inflight(&self) -> u64 {
        self.sb.pipe(self.snd_max - self.snd_una)
    }
    /// The peer's advertised window (bytes, scaled).
    pub fn snd_wnd(&self) -> u64 {
        self.snd_wnd
    }
    /// Effective MSS.
    pub fn mss(&self) -> u32 {
        self.mss
    }
    /// Whether SACK, timestamps and ECN were negotiated.
    pub fn negotiated(&self) -> (bool, bool, bool) {
        (self.sack_ok, self.ts_ok, self.ecn_ok)
    }
    /// Window scale shifts (ours, the peer's).
    pub fn wscales(&self) -> (u8, u8) {
        (self.rcv_wscale, self.snd_wscale)
    }
    /// Bytes the application wrote that are not yet acknowledged.
    pub fn unacked_app_bytes(&self) -> u64 {
        self.app_end.saturating_sub(self.snd_una.max(1))
    }
    /// Linux's sender: bytes the writer copied into the send buffer and not yet sent
    /// (`tcpi_notsent_bytes`); other senders: what was written and not yet sent.
    pub fn notsent_bytes(&self) -> u64 {
        self.data_end().saturating_sub(self.snd_max.max(1))
    }
    /// The configuration.
    pub fn config(&self) -> &TcpConfig {
        &self.cfg
    }

    /// The earliest deadline of any timer.
    #[inline]
    pub fn poll_at(&self) -> Option<Instant> {
        // Without a branch per timer (the engine asks after every call): "none" is the
        // end of time (see `Deadline`).
        let t = [
            self.rto_at,
            self.delack_at,
            self.reo_at,
            self.tlp_at,
            self.persist_at,
            self.wake_at,
            self.linger_at,
        ]
        .into_iter()
        .fold(Deadline::NONE, Deadline::min);
        t.get()
    }

    // ---------------------------------------------------------------- application API

    /// The application writes `n` more bytes (`u64::MAX / 4` or more: an endless source).
    pub fn write(&mut self, now: Instant, n: u64, io: &mut ConnIo<'_>) {
        if self.fin_queued || matches!(self.state, State::Closed | State::TimeWait) {
            return;
        }
        self.check_app_limited();
        self.app_end = self.app_end.saturating_add(n).min(u64::MAX / 2);
        if self.linux_writer {
            // A new `send()`: it copies what the buffer takes, whatever it waited for.
            self.writer_waiting = false;
            self.new_call();
            self.fill_sndbuf();
        }
        self.try_send(now, io);
    }

    /// The application hands Linux's sender what it writes in `send()` calls of at most
    /// `n` bytes each (0: one call per [`Connection::write`]), as a non-blocking writer
    /// driven by `select()` does: a call copies what the buffer takes and pushes it
    /// (`tcp_push`); the next call comes at once if the socket is writable — the buffer has
    /// half as much room as the queue takes (`sk_stream_is_writeable`) — else when it
    /// becomes so; each call checks whether BBR is app-limited. Other senders ignore it.
    pub fn set_write_size(&mut self, n: u64) {
        self.write_size = n;
    }

    /// A new `send()` call of the application starts where the writer is.
    fn new_call(&mut self) {
        if self.write_size > 0 {
            self.call_end = self.write_seq.saturating_add(self.write_size);
        }
    }

    /// Linux `tcp_rate_check_app_limited`, at each `send()` (with BBR): less than a segment
    /// unsent, room in cwnd, no lost segment waiting: what follows is app-limited.
    fn check_app_limited(&mut self) {
        if !self.bbr_on() {
            return;
        }
        let unsent = self.data_end().saturating_sub(self.snd_max);
        if unsent < self.mss as u64
            && self.inflight() < self.cc.cwnd
            && self.sb.lost_bytes() <= self.sb.retx_out_bytes()
        {
            let mark = self.sb.delivered_segs() + self.segs(self.inflight());
            if let Some(b) = self.bbr.as_mut() {
                b.1.set_app_limited(mark);
            }
        }
    }

    /// The application closes its direction: a FIN follows the written data.
    pub fn close(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if self.fin_queued {
            return;
        }
        self.fin_queued = true;
        match self.state {
            State::SynSent | State::SynRcvd | State::Established | State::CloseWait => {
                self.try_send(now, io)
            }
            _ => {}
        }
    }

    /// The application stops reading: data that arrives in order stays in the receive
    /// buffer (no `Delivered` event) and the advertised window shrinks, down to zero.
    pub fn pause_reading(&mut self) {
        self.reading = false;
    }

    /// The application reads again, everything buffered at once (`Delivered`), and the
    /// window that opens is announced with an immediate ACK (the window update).
    pub fn resume_reading(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        self.reading = true;
        if self.unread == 0 {
            return;
        }
        let n = std::mem::take(&mut self.unread);
        self.stats.bytes_delivered += n;
        io.events.push(ConnEvent::Delivered(n));
        self.on_app_read(now);
        if !matches!(self.state, State::Closed | State::SynSent | State::SynRcvd) {
            self.ack_now = true;
            self.flush_ack(now, io);
        }
        self.app_clamps_window();
    }

    /// Bytes received in order that the application has not read.
    pub fn unread_bytes(&self) -> u64 {
        self.unread
    }

    /// Stop writing: data not yet sent is forgotten and a FIN follows what was sent.
    pub fn stop_writing(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        self.app_end = self.app_end.min(self.snd_max.max(1));
        self.write_seq = self.write_seq.min(self.app_end);
        self.close(now, io);
    }

    // ---------------------------------------------------------------- input

    /// A segment for this connection arrived.
    pub fn on_segment(&mut self, now: Instant, h: &Headers, io: &mut ConnIo<'_>) {
        let Transport::Tcp(t) = &h.transport else {
            return;
        };
        self.stats.segments_received += 1;
        let read_before = self.stats.bytes_delivered;
        self.on_segment_inner(now, h, t, io);
        if self.stats.bytes_delivered != read_before {
            self.app_clamps_window();
        }
    }

    /// An application that holds its window with `TCP_WINDOW_CLAMP` sets it again after
    /// each read (`window_clamp`). It reads once the kernel has handled the segment, so
    /// after the segment's ACK.
    fn app_clamps_window(&mut self) {
        let rcv_wnd = self.rcv_edge.saturating_sub(self.last_ack_sent);
        if let (Some(c), Some(a)) = (
            self.cfg.window_clamp,
            tuned(self.cfg.rcv_autotune, &mut self.autotune),
        ) {
            a.set_window_clamp(c, rcv_wnd);
        }
    }

    fn on_segment_inner(&mut self, now: Instant, h: &Headers, t: &TcpRepr, io: &mut ConnIo<'_>) {
        if self.state == State::Established && prediction::on() && self.predicted(now, h, t, io) {
            return;
        }
        if t.flags.contains(TcpFlags::RST) {
            if self.state != State::Closed {
                self.enter_closed(now, io, true);
            }
            return;
        }
        match self.state {
            State::Closed => return,
            State::SynSent => {
                if !self.on_syn_ack(now, t, io) {
                    return;
                }
            }
            State::SynRcvd => {
                if t.flags.contains(TcpFlags::SYN) {
                    // Our SYN-ACK was lost: the peer retransmitted its SYN.
                    self.send_syn(now, io);
                    return;
                }
                if !t.flags.contains(TcpFlags::ACK) || unwrap(self.iss, 0, t.ack) != 1 {
                    return;
                }
                self.snd_una = 1;
                let acked = self.sb.ack_to(1, 0);
                self.update_rtt(now, &acked, t);
                self.rto_at = Deadline::NONE;
                self.state = State::Established;
                self.snd_wnd = (t.window as u64) << self.snd_wscale;
                self.snd_wl1 = 1;
                self.snd_wl2 = 1;
                self.max_snd_wnd = self.max_snd_wnd.max(self.snd_wnd);
                self.start_autotune(now);
                io.events.push(ConnEvent::Established);
            }
            _ => {
                if t.flags.contains(TcpFlags::SYN) {
                    // A retransmitted SYN-ACK after we established: re-acknowledge.
                    self.ack_now = true;
                    self.flush_ack(now, io);
                    return;
                }
            }
        }
        self.take_ts_recent(t);
        if t.flags.contains(TcpFlags::ACK) {
            self.on_ack(now, h, t, io);
        }
        if matches!(self.state, State::Closed) {
            return;
        }
        self.on_data(now, h, t, io);
        self.try_send(now, io);
        self.flush_ack(now, io);
    }

    #[inline(always)]
    fn take_ts_recent(&mut self, t: &TcpRepr) {
        if let Some(ts) = t.opts.timestamp.filter(|_| self.ts_ok) {
            let seg_off = unwrap(self.irs, self.rcv.rcv_nxt(), t.seq);
            //= https://www.rfc-editor.org/rfc/rfc7323#section-4.3
            //# If SEG.TSval >= TS.Recent and SEG.SEQ <= Last.ACK.sent
            //# then SEG.TSval is copied to TS.Recent
            if seg_off <= self.last_ack_sent && SeqNumber(ts.val) >= SeqNumber(self.ts_recent) {
                self.ts_recent = ts.val;
            }
        }
    }

    /// Header prediction (RFC 9293 §3.10.7.4's common case; Linux `tcp_rcv_established`'s
    /// fast path): in the established state, a segment with only ACK (and PSH) set, no
    /// SACK blocks, the window unchanged and the expected sequence number is either
    ///
    /// * in-order data at a receiver with nothing outstanding, that acknowledges nothing
    ///   new, with no hole in its sequence space, or
    /// * a pure ACK that advances SND.UNA at a sender in the open state without RACK or
    ///   BBR.
    ///
    /// Such a segment is handled here with the general path's steps that can have an
    /// effect on it, in the same order, and none of its tests for what cannot apply;
    /// returns false (having changed nothing) for any other segment. The outcome is the
    /// general path's: a test runs both on the same segments and compares everything
    /// each end sends and reports.
    #[inline(always)]
    fn predicted(&mut self, now: Instant, h: &Headers, t: &TcpRepr, io: &mut ConnIo<'_>) -> bool {
        if t.flags.0 & !TcpFlags::PSH.0 != TcpFlags::ACK.0
            || !t.opts.sack.is_empty()
            || t.seq != seq_of(self.irs, self.rcv.rcv_nxt())
            || (t.window as u64) << self.snd_wscale != self.snd_wnd
            || self.ca_state != CaState::Open
            || self.rack_on()
        {
            return false;
        }
        let len = h.payload_len as u64;
        if len > 0 {
            if t.ack != seq_of(self.iss, self.snd_una)
                || self.snd_una != self.snd_max
                || self.paced
                || self.rcv.has_gap()
                || self.peer_fin_at.is_some()
                || (self.ecn_ok && h.ip.ecn == Ecn::Ce)
            {
                return false;
            }
            self.take_ts_recent(t);
            self.predicted_data(now, t, len, io);
        } else {
            let ack = unwrap(self.iss, self.snd_una, t.ack);
            if ack <= self.snd_una || ack > self.snd_max || self.cfg.cc == CcAlgo::Bbr {
                return false;
            }
            self.take_ts_recent(t);
            self.predicted_ack(now, t, ack, io);
        }
        prediction::count();
        self.try_send(now, io);
        self.flush_ack(now, io);
        true
    }

    /// [`Connection::predicted`]'s in-order data: `on_ack` only updates the send window's
    /// bookkeeping (nothing outstanding, nothing acknowledged), `on_data` takes the data.
    /// Both bodies stay out of line: inlined, they made `on_segment` larger and its
    /// instruction-cache misses at 10 000 flows more frequent, for no instruction saved.
    #[inline(never)]
    fn predicted_data(&mut self, now: Instant, t: &TcpRepr, len: u64, io: &mut ConnIo<'_>) {
        // The window is unchanged (a condition of the prediction).
        self.take_window(self.rcv.rcv_nxt(), self.snd_una, self.snd_wnd);
        if let Some(p) = io.rwnd.as_deref_mut() {
            p.on_data(now, self.id, len as u32);
        }
        let linux_acks = self.cfg.delack_mode == DelackMode::Linux;
        if linux_acks {
            self.measure_rcv_mss(len, t.flags.contains(TcpFlags::PSH));
        }
        self.measure_rcv_rtt_ts(now, t, len);
        let a = self.rcv.on_data_in_order(len);
        self.on_data_arrival(now, len, &a);
        if !self.reading {
            self.unread += len;
        } else {
            self.stats.bytes_delivered += len;
            io.events.push(ConnEvent::Delivered(len));
            self.on_app_read(now);
        }
        self.in_order_ack_decision(now, linux_acks, len);
    }

    /// [`Connection::predicted`]'s pure ACK of new data: `on_ack` in the open state
    /// without SACK blocks, D-SACK, ECE, RACK or BBR.
    #[inline(never)]
    fn predicted_ack(&mut self, now: Instant, t: &TcpRepr, ack: u64, io: &mut ConnIo<'_>) {
        self.take_window(self.rcv.rcv_nxt(), ack, self.snd_wnd);
        let sacked_before = self.sb.sacked_bytes();
        let prior_fack = self.sb.fack();
        let (acked, grow) = self.take_new_ack(now, t, ack, prior_fack, sacked_before);
        let data_acked = data_bytes_between(self.snd_una, ack, self.fin_off);
        self.snd_una = ack;
        self.stats.bytes_acked += data_acked;
        if data_acked > 0 {
            io.events.push(ConnEvent::Acked(data_acked));
        }
        if self.may_raise_cwnd() {
            self.cc.on_ack(now, grow, self.rtt.srtt());
        }
        self.after_new_ack(now, acked.fin, io);
        self.update_pacing_rate();
    }

    /// The send window from a segment at `seg_off` acknowledging `ack` and offering `wnd`
    /// bytes, if it is newer than the one that set the window last.
    #[inline(always)]
    fn take_window(&mut self, seg_off: u64, ack: u64, wnd: u64) {
        //= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
        //# If SND.WL1 < SEG.SEQ or (SND.WL1 = SEG.SEQ and SND.WL2 =< SEG.ACK), set
        //# SND.WND <- SEG.WND, set SND.WL1 <- SEG.SEQ, and set SND.WL2 <- SEG.ACK.
        if self.snd_wl1 < seg_off || (self.snd_wl1 == seg_off && self.snd_wl2 <= ack) {
            self.snd_wnd = wnd;
            self.snd_wl1 = seg_off;
            self.snd_wl2 = ack;
            self.max_snd_wnd = self.max_snd_wnd.max(wnd);
        }
    }

    /// An ACK of new data up to `ack`: the scoreboard drops what it covers, the RTT and
    /// HyStart take their samples; returns what was acknowledged and the bytes it grows
    /// the window by.
    #[inline(always)]
    fn take_new_ack(
        &mut self,
        now: Instant,
        t: &TcpRepr,
        ack: u64,
        prior_fack: u64,
        sacked_before: u64,
    ) -> (scoreboard::Acked, u64) {
        self.rto_unanswered = false;
        let newest_sent = if self.cfg.hystart {
            self.newest_clean_sent(ack)
        } else {
            None
        };
        let acked = self.sb.ack_to(ack, prior_fack);
        let grow = self.growth_bytes(acked.bytes, sacked_before);
        self.update_rtt(now, &acked, t);
        self.hystart_sample(now, &acked, newest_sent, t, ack);
        (acked, grow)
    }

    /// After an ACK of new data: the duplicate count starts again, an acknowledged FIN
    /// is taken, and the retransmission timer restarts while data is outstanding.
    #[inline(always)]
    fn after_new_ack(&mut self, now: Instant, fin_acked: bool, io: &mut ConnIo<'_>) {
        self.dupacks = 0;
        if fin_acked {
            self.on_fin_acked(now, io);
        }
        self.rto_at = if self.snd_una < self.snd_max {
            Deadline::at(now + self.rtt.rto())
        } else {
            Deadline::NONE
        };
    }

    fn on_syn_ack(&mut self, now: Instant, t: &TcpRepr, io: &mut ConnIo<'_>) -> bool {
        if !t.flags.contains(TcpFlags::SYN | TcpFlags::ACK) || unwrap(self.iss, 0, t.ack) != 1 {
            return false;
        }
        self.irs = t.seq.0;
        self.rcv = Receiver::new(1);
        self.negotiate(t, false);
        self.ecn_ok = self.cfg.ecn && t.flags.contains(TcpFlags::ECE);
        if let Some(ts) = t.opts.timestamp {
            self.ts_recent = ts.val;
        }
        let acked = self.sb.ack_to(1, 0);
        self.update_rtt(now, &acked, t);
        self.snd_una = 1;
        self.snd_wnd = t.window as u64; // SYN-ACK windows are not scaled
        self.snd_wl1 = 0;
        self.snd_wl2 = 1;
        self.max_snd_wnd = self.snd_wnd;
        self.rto_at = Deadline::NONE;
        self.state = State::Established;
        self.ack_now = true;
        self.start_autotune(now);
        io.events.push(ConnEvent::Established);
        true
    }

    /// The window a SYN or SYN-ACK offers.
    fn syn_window(&self) -> u64 {
        match self.autotune() {
            Some(a) => a.initial_window(),
            None => self.cfg.rcvbuf,
        }
    }

    /// Established: autotuning's first measurement starts (`tcp_init_buffer_space`).
    fn start_autotune(&mut self, now: Instant) {
        let read = self.stats.bytes_delivered;
        if let Some(a) = tuned(self.cfg.rcv_autotune, &mut self.autotune) {
            a.start(now, self.mss, read, self.rcv_wscale);
        }
    }

    /// Receive-buffer autotuning, read only when the shared configuration asks for it
    /// (`autotune` is set exactly then): a connection without it does not touch the line.
    #[inline(always)]
    fn autotune(&self) -> Option<&RcvAutotune> {
        debug_assert_eq!(self.autotune.is_some(), self.cfg.rcv_autotune);
        if self.cfg.rcv_autotune {
            self.autotune.as_ref()
        } else {
            None
        }
    }

    fn flight(&self) -> u64 {
        self.snd_max - self.snd_una
    }

    fn on_ack(&mut self, now: Instant, h: &Headers, t: &TcpRepr, io: &mut ConnIo<'_>) {
        let ack = unwrap(self.iss, self.snd_una, t.ack);
        if ack > self.snd_max {
            // Acknowledges data never sent: ignore (RFC 9293 says ACK and drop).
            self.ack_now = true;
            return;
        }
        let seg_off = unwrap(self.irs, self.rcv.rcv_nxt(), t.seq);
        // The window of a SYN-ACK is not scaled (RFC 7323, section 2.2).
        let wnd = if t.flags.contains(TcpFlags::SYN) {
            t.window as u64
        } else {
            (t.window as u64) << self.snd_wscale
        };
        let window_changed = wnd != self.snd_wnd;
        self.take_window(seg_off, ack, wnd);
        if ack == self.snd_una
            && self.snd_una == self.snd_max
            && t.opts.sack.is_empty()
            && self.ca_state == CaState::Open
            && !t.flags.contains(TcpFlags::ECE)
            && !self.paced
            && !self.rack_on()
        {
            // Nothing outstanding and nothing newly acknowledged (a receiver's ACK field):
            // no SACK, loss, congestion-window, ECN or pacing state can change below.
            return;
        }
        let rack = self.rack_on();
        let delivered_before = self.sb.delivered_segs();
        let (prior_in_flight, lost_before) = (self.inflight(), self.sb.lost_marks());
        let sacked_before = self.sb.sacked_bytes();
        let mut new_sack = false;
        let dsack = self.dsack_of(t, ack);
        let prior_fack = self.sb.fack();
        if self.sack_ok && !t.opts.sack.is_empty() {
            let mut blocks = [(0u64, 0u64); 4];
            let mut n = 0;
            let skip = dsack.is_some() as usize;
            for b in t.opts.sack.iter().skip(skip).take(blocks.len()) {
                let l = unwrap(self.iss, self.snd_una, b.left).max(self.snd_una);
                let r = unwrap(self.iss, self.snd_una, b.right).min(self.snd_max);
                blocks[n] = (l, r);
                n += 1;
            }
            if rack {
                // Linux sorts the blocks (`tcp_sacktag_write_queue`): the order decides
                // which delivery RACK takes its RTT from, and what counts as reordering.
                blocks[..n].sort_unstable();
            }
            for &(l, r) in &blocks[..n] {
                new_sack |= self.sb.sack(l, r) > 0;
            }
        }
        if let Some(d) = dsack {
            self.on_dsack(d);
        }
        // What this ACK grows the window by (`grow_by`), if it advances SND.UNA.
        let mut grow = 0;
        let una_advanced = ack > self.snd_una;
        // ECE on a SYN-ACK is ECN negotiation, not an echo (RFC 3168 §6.1.1).
        let ece =
            self.ecn_ok && t.flags.contains(TcpFlags::ECE) && !t.flags.contains(TcpFlags::SYN);

        if ack > self.snd_una {
            let (acked, g) = self.take_new_ack(now, t, ack, prior_fack, sacked_before);
            grow = g;
            if self.ca_state == CaState::Loss {
                self.maybe_undo_timeout(t, ack);
            }
            let data_acked = data_bytes_between(self.snd_una, ack, self.fin_off);
            self.snd_una = ack;
            self.stats.bytes_acked += data_acked;
            if data_acked > 0 {
                io.events.push(ConnEvent::Acked(data_acked));
            }
            match self.ca_state {
                CaState::Recovery => {
                    if ack >= self.recover || self.cfg.cc == CcAlgo::Reno && !self.sack_ok {
                        // Linux `tcp_try_undo_recovery` (its D-SACK half; the undo record
                        // stays for D-SACKs that come after).
                        if !self.try_undo_dsack() {
                            self.reo_wnd_persist = self.reo_wnd_persist.saturating_sub(1);
                            self.exit_recovery();
                        }
                    } else if !self.sack_ok {
                        //= https://www.rfc-editor.org/rfc/rfc6582#section-3.2
                        //# If this ACK does *not* acknowledge all of the data up to and
                        //# including recover, then this is a partial ACK.  In this case,
                        //# retransmit the first unacknowledged segment.  Deflate the
                        //# congestion window by the amount of new data acknowledged by
                        //# the Cumulative Acknowledgment field.  If the partial ACK
                        //# acknowledges at least one SMSS of new data, then add back
                        //# SMSS bytes to the congestion window.
                        self.sb.mark_head_lost();
                        self.cc.cwnd = self.cc.cwnd.saturating_sub(acked.bytes);
                        if acked.bytes >= self.mss as u64 {
                            self.cc.cwnd += self.mss as u64;
                        }
                        self.cc.cwnd = self.cc.cwnd.max(self.mss as u64);
                        self.retransmit_head(now, io);
                    }
                }
                CaState::Loss => {
                    if ack >= self.recover {
                        self.ca_state = CaState::Open;
                        self.undo = None;
                    }
                    if !rack && self.may_raise_cwnd() {
                        self.cc.on_ack(now, grow, self.rtt.srtt());
                    }
                }
                CaState::Open | CaState::Disorder => {
                    self.ca_state = CaState::Open;
                    if !rack && self.may_raise_cwnd() {
                        self.cc.on_ack(now, grow, self.rtt.srtt());
                    }
                }
            }
            // With RACK the window grows after loss detection, as Linux's
            // `tcp_cong_control` follows `tcp_fastretrans_alert`.
            self.after_new_ack(now, acked.fin, io);
        } else if ack == self.snd_una
            && h.payload_len == 0
            && !t.flags.intersects(TcpFlags::SYN | TcpFlags::FIN)
            && self.snd_max > self.snd_una
            && (!window_changed || new_sack)
        {
            //= https://www.rfc-editor.org/rfc/rfc5681#section-2
            //# DUPLICATE ACKNOWLEDGMENT: An acknowledgment is considered a
            //# "duplicate" in the following algorithms when (a) the receiver of
            //# the ACK has outstanding data, (b) the incoming acknowledgment
            //# carries no data, (c) the SYN and FIN bits are both off, (d) the
            //# acknowledgment number is equal to the greatest acknowledgment
            //# received on the given connection (TCP.UNA from [RFC793]) and (e)
            //# the advertised window in the incoming acknowledgment equals the
            //# advertised window in the last incoming acknowledgment.
            self.dupacks += 1;
            match self.ca_state {
                CaState::Open | CaState::Disorder => {
                    self.ca_state = CaState::Disorder;
                    // With RACK, duplicate ACKs are not counted: only a loss RACK marks
                    // starts a recovery (Linux `tcp_time_to_recover`: `lost_out != 0`).
                    if !rack && self.dupacks >= self.cfg.dupthresh {
                        self.maybe_enter_recovery(now, io);
                    }
                }
                CaState::Recovery if !self.sack_ok => {
                    // Reno/NewReno window inflation.
                    self.cc.cwnd += self.mss as u64;
                }
                _ => {}
            }
        }
        if dsack.is_some() && self.ca_state != CaState::Loss && self.try_undo_dsack() {
            // Linux `tcp_try_undo_dsack` (in a recovery, then `tcp_try_to_open`; or after
            // it, in the open state).
            self.reo_wnd_persist = (self.reo_wnd_persist + 1).min(REO_WND_PERSIST);
        }
        if rack {
            self.rack_update_reo_wnd(delivered_before);
            let pure_dup = !una_advanced && h.payload_len == 0 && !new_sack && !window_changed;
            self.rack_on_ack(now, ack, grow, una_advanced, pure_dup, delivered_before, io);
        } else if self.sack_ok {
            if matches!(self.ca_state, CaState::Open | CaState::Disorder)
                && new_sack
                && self.sb.head_is_lost(self.cfg.dupthresh, self.mss as u64)
            {
                self.maybe_enter_recovery(now, io);
            }
            let mut newly_lost = false;
            if matches!(self.ca_state, CaState::Recovery | CaState::Loss) {
                newly_lost = self.sb.mark_lost(self.cfg.dupthresh, self.mss as u64) > 0;
            }
            if self.ca_state == CaState::Recovery && self.prr.is_some() {
                let delivered = self.sb.delivered_segs() - delivered_before;
                self.prr_update(delivered, newly_lost, una_advanced);
            }
        }
        //= https://www.rfc-editor.org/rfc/rfc3168#section-6.1.2
        //# If the sender receives an ECN-Echo (ECE) ACK
        //# packet (that is, an ACK packet with the ECN-Echo flag set in the TCP
        //# header), then the sender knows that congestion was encountered in the
        //# network on the path from the sender to the receiver.  The indication
        //# of congestion should be treated just as a congestion loss in non-
        //# ECN-Capable TCP.
        if ece
            && ack > self.ecn_recover
            && matches!(self.ca_state, CaState::Open | CaState::Disorder)
        {
            self.cc.on_congestion(self.flight());
            self.ecn_recover = self.snd_max;
            self.cwr_pending = true;
            self.stats.ecn_reductions += 1;
        }
        if self.cfg.cc == CcAlgo::Bbr {
            self.bbr_on_ack(now, rack, prior_in_flight, delivered_before, lost_before);
        }
        self.update_pacing_rate();
    }

    // ---------------------------------------------------------------- BBR

    fn segs(&self, bytes: u64) -> u64 {
        bytes.div_ceil(self.mss as u64)
    }

    /// BBR's view of the connection now.
    fn bbr_ctx(&self, now: Instant, delivered_time: Instant) -> AckCtx {
        AckCtx {
            now,
            delivered: self.sb.delivered_segs(),
            delivered_time,
            lost: self.sb.lost_marks(),
            in_flight: self.segs(self.inflight()),
            ca_state: self.ca_state,
            cwnd: self.cc.cwnd / self.mss as u64,
            srtt: self.rtt.srtt(),
            edt: self.pacer.next_departure(),
        }
    }

    /// Every ACK with BBR (Linux `tcp_cong_control` → `bbr_main`): the delivery-rate
    /// sample from what the ACK delivered (`tcp_rate_skb_delivered`, `tcp_rate_gen`), then
    /// BBR sets cwnd and the pacing rate. BBR is created at the first ACK (Linux
    /// `bbr_init` once the handshake is done), with the RTT the handshake measured.
    fn bbr_on_ack(
        &mut self,
        now: Instant,
        rack: bool,
        prior_in_flight: u64,
        delivered_before: u64,
        lost_before: u64,
    ) {
        if !rack {
            let mut d = std::mem::take(&mut self.deliveries);
            self.sb.take_deliveries(&mut d);
            self.deliveries = d;
        }
        let mss = self.mss as u64;
        if self.bbr.is_none() {
            let b = Bbr::new(
                now,
                mss,
                self.cc.cwnd / mss,
                self.rtt.min_rtt(),
                self.rtt.srtt(),
                self.cfg.max_pacing_rate.map(|r| r.bits_per_sec() / 8),
                ((self.iss as u64) << 32) | self.irs as u64,
            );
            self.bbr = Some(Box::new((b, RateSampler::default())));
            self.deliveries.clear();
            if let Some(b) = &self.bbr {
                self.pacer.set_rate(b.0.pacing_rate());
            }
            return;
        }
        let delivered = self.sb.delivered_segs();
        let mut rs = RateSample {
            acked_sacked: delivered - delivered_before,
            losses: self.sb.lost_marks() - lost_before,
            prior_in_flight: prior_in_flight.div_ceil(mss),
            ..RateSample::default()
        };
        let min_rtt = self.rtt.min_rtt();
        let Some(b) = self.bbr.as_mut() else {
            return;
        };
        for d in &self.deliveries {
            b.1.on_delivered(d, now, &mut rs);
        }
        b.1.finish(now, delivered, min_rtt, &mut rs);
        let dt = b.1.delivered_time();
        let ctx = self.bbr_ctx(now, dt);
        let Some(b) = self.bbr.as_mut() else {
            return;
        };
        let out = b.0.on_ack(&rs, &ctx);
        if out.mark_app_limited {
            b.1.set_app_limited(delivered + ctx.in_flight);
        }
        self.cc.cwnd = out.cwnd.max(1) * mss;
        if let Some(s) = b.0.ssthresh {
            self.cc.ssthresh = s * mss;
        }
        self.pacer.set_rate(out.pacing_rate);
    }

    /// A data transmission (new or again) left: the delivery-rate record (Linux
    /// `tcp_rate_skb_sent`; `nothing_out`: no segment was outstanding), and BBR's restart
    /// from idle (`CA_EVENT_TX_START`; `idle`: nothing was in flight).
    fn bbr_on_sent(&mut self, now: Instant, order: u64, idle: bool, nothing_out: bool) {
        let delivered = self.sb.delivered_segs();
        let (cwnd, srtt) = (self.cc.cwnd / self.mss as u64, self.rtt.srtt());
        let Some(b) = self.bbr.as_mut() else {
            return;
        };
        if idle && b.1.app_limited() {
            if let Some(w) = b.0.on_tx_start(now, cwnd, srtt) {
                self.cc.cwnd = w * self.mss as u64;
            }
            self.pacer.set_rate(b.0.pacing_rate());
        }
        b.1.on_sent(order, now, nothing_out, delivered);
    }

    /// BBR's state (`cc = "bbr"`), as Linux's `TCP_CC_INFO` shows it and more.
    pub fn bbr_info(&self) -> Option<BbrInfo> {
        self.bbr.as_ref().map(|b| b.0.info())
    }

    /// Take the RTT sample an ACK of new data gives, as Linux's `tcp_ack_update_rtt`: from
    /// the oldest segment it acknowledges if none of them was retransmitted (Karn's rule),
    /// else from the echoed timestamp. A valid sample also clears the timer backoff, and only
    /// a valid sample does. Returns whether a sample was taken.
    //= https://www.rfc-editor.org/rfc/rfc6298#section-3
    //# RTT samples MUST NOT be made using segments that were
    //# retransmitted (and thus for which it is ambiguous whether the reply
    //# was for the first instance of the packet or a later instance).  The
    //# only case when TCP can safely take RTT samples from retransmitted
    //# segments is when the TCP timestamp option [JBB92] is employed
    //= https://www.rfc-editor.org/rfc/rfc7323#section-4.1
    //# A TSecr value received in a segment is used to update the averaged RTT
    //# measurement only if the segment acknowledges some new data
    fn update_rtt(&mut self, now: Instant, acked: &scoreboard::Acked, t: &TcpRepr) -> bool {
        let sample = Scoreboard::karn_sample(acked, now).or_else(|| {
            let ts = t.opts.timestamp.filter(|ts| self.ts_ok && ts.ecr != 0)?;
            let ms = ts_clock(now).wrapping_sub(ts.ecr);
            (ms < 60_000).then(|| Duration::from_millis(ms.max(1) as u64))
        });
        let Some(r) = sample else {
            return false;
        };
        self.rtt.sample(r);
        //= https://www.rfc-editor.org/rfc/rfc6298#section-5
        //# Note that after retransmitting, once a new RTT measurement is obtained
        //# (which can only happen when new data has been sent and acknowledged), the
        //# computations outlined in Section 2 are performed, including the computation
        //# of RTO, which may result in "collapsing" RTO back down after it has been
        //# subject to exponential back off (rule 5.5).
        // Only then: an ACK without a valid sample keeps the backed-off RTO (Linux's
        // `tcp_ack_update_rtt` clears `icsk_backoff` the same way).
        self.rtt.reset_backoff();
        true
    }

    /// Send time of the most recently sent segment below `ack` that was neither
    /// retransmitted nor SACKed before (Linux's `last_ackt`, the start of `ca_rtt_us`).
    fn newest_clean_sent(&self, ack: u64) -> Option<Instant> {
        let mut t = None;
        for i in 0..self.sb.len() {
            let s = self.sb.get(i);
            if s.end > ack {
                break;
            }
            if s.flags() & (scoreboard::SACKED | scoreboard::RETRANS) == 0 {
                t = Some(s.sent_at);
            }
        }
        t
    }

    /// Feed HyStart the ACK's RTT sample, as Linux's `cubictcp_acked` gets `ca_rtt_us`:
    /// from the most recently sent segment acknowledged, none if a retransmission is
    /// among them, else from the echoed timestamp.
    fn hystart_sample(
        &mut self,
        now: Instant,
        acked: &scoreboard::Acked,
        newest_sent: Option<Instant>,
        t: &TcpRepr,
        ack: u64,
    ) {
        if !self.cfg.hystart {
            return;
        }
        let rtt = newest_sent
            .filter(|_| !acked.any_retransmitted)
            .map(|s| now - s)
            .or_else(|| {
                let ts = t.opts.timestamp.filter(|ts| self.ts_ok && ts.ecr != 0)?;
                let ms = ts_clock(now).wrapping_sub(ts.ecr);
                (ms < 60_000).then(|| Duration::from_millis(ms.max(1) as u64))
            });
        let Some(rtt) = rtt else {
            return;
        };
        let sample = AckSample {
            rtt,
            snd_una: ack,
            snd_nxt: self.snd_max,
            srtt: self.rtt.srtt(),
            paced: self.paced(),
        };
        match self.cc.on_rtt_sample(now, sample) {
            Some(HyStartExit::AckTrain) => self.stats.hystart_train_exits += 1,
            Some(HyStartExit::Delay) => self.stats.hystart_delay_exits += 1,
            None => {}
        }
    }

    /// What an ACK that acknowledged `acked` new bytes grows the window by (`grow_by`):
    /// those bytes, or what it newly delivered — `acked` plus the change in SACKed bytes
    /// since `sacked_before` (bytes SACKed earlier and acknowledged now leave the SACKed
    /// count and cancel out; bytes newly SACKed above SND.UNA add).
    fn growth_bytes(&self, acked: u64, sacked_before: u64) -> u64 {
        match self.cfg.grow_by {
            GrowBy::Acked => acked,
            // Linux `tcp_ack`: `tcp_cong_control(sk, ack, delivered, ...)` with
            // `delivered = tp->delivered - prior_delivered`.
            GrowBy::Delivered => (acked + self.sb.sacked_bytes()).saturating_sub(sacked_before),
        }
    }

    /// Whether an ACK of new data may grow the congestion window (`cwnd_validation`).
    //= https://www.rfc-editor.org/rfc/rfc9438#section-4.6
    //# Cubic doesn't increase cwnd when it's limited by the sending application
    //# or rwnd.
    fn may_raise_cwnd(&self) -> bool {
        match self.cfg.cwnd_validation {
            CwndValidation::Off => true,
            //= https://www.rfc-editor.org/rfc/rfc7661#section-4.3
            //# The cwnd is considered validated when pipeACK >= NCWND
            // (NCWND: half the cwnd; the window's largest flight stands in for pipeACK.)
            CwndValidation::Rfc7661 => self.cwnd_limited || 2 * self.max_flight >= self.cc.cwnd,
            // Linux `tcp_is_cwnd_limited`: in slow start, let cwnd reach twice what was
            // in flight.
            CwndValidation::Linux => {
                self.cwnd_limited || (self.cc.in_slow_start() && self.cc.cwnd < 2 * self.max_flight)
            }
        }
    }

    /// After a transmission attempt: remember whether the cwnd held data back in the
    /// current window, or else the largest flight of it (Linux `tcp_cwnd_validate`). A new
    /// window starts once everything sent when the last one started is acknowledged.
    fn note_cwnd_use(&mut self, sent: bool) {
        let limited = self.cwnd_blocks_sending();
        if !(sent || limited) {
            return;
        }
        let flight = self.flight();
        if self.snd_una >= self.cwnd_usage_seq
            || limited
            || (!self.cwnd_limited && flight > self.max_flight)
        {
            self.cwnd_limited = limited;
            self.max_flight = flight;
            self.cwnd_usage_seq = self.snd_max;
        }
    }

    /// Whether the congestion window (not the peer's window, the application, Nagle or a
    /// conditioner) is what keeps the next segment from being sent.
    fn cwnd_blocks_sending(&self) -> bool {
        let inflight = self.inflight();
        if inflight >= self.cc.cwnd {
            return true;
        }
        let data_end = self.data_end();
        if self.snd_max >= data_end {
            return false;
        }
        let avail = data_end - self.snd_max;
        let wnd_room = (self.snd_una + self.snd_wnd).saturating_sub(self.snd_max);
        let want = (self.mss as u64).min(avail).min(wnd_room);
        want > 0 && self.cc.cwnd - inflight < want
    }

    /// Eifel detection (RFC 3522), as Linux does it after a timeout: the first ACK that
    /// advances `snd_una` in the Loss state echoes a timestamp older than the timeout's
    /// first retransmission, so it acknowledges an original transmission — the timeout
    /// was spurious (the ACKs were only late). Restore cwnd and ssthresh, forget the
    /// loss marks (no go-back-N), and leave the Loss state. The timeout's recovery point
    /// goes with it: a loss found from here on (`ack` is the ACK's cumulative point) starts
    /// a fast retransmit, as Linux leaves its Loss state for Open, where no recovery point
    /// holds back the next recovery.
    fn maybe_undo_timeout(&mut self, t: &TcpRepr, ack: u64) {
        let Some((cwnd, ssthresh, retx_ts)) = self.undo.take() else {
            return;
        };
        let Some(ts) = t.opts.timestamp.filter(|ts| self.ts_ok && ts.ecr != 0) else {
            return;
        };
        if (ts.ecr.wrapping_sub(retx_ts) as i32) < 0 {
            if self.bbr.is_some() {
                // Linux `bbr_undo_cwnd`: cwnd stays as BBR set it.
                let dt = self
                    .bbr
                    .as_ref()
                    .map_or(Instant::ZERO, |b| b.1.delivered_time());
                let ctx = self.bbr_ctx(Instant::ZERO, dt);
                if let Some(b) = self.bbr.as_mut() {
                    b.0.on_undo(&ctx);
                }
            } else {
                self.cc.cwnd = self.cc.cwnd.max(cwnd);
            }
            self.cc.ssthresh = self.cc.ssthresh.max(ssthresh);
            self.sb.unmark_lost();
            self.ca_state = CaState::Open;
            self.recover = ack;
            self.recover_after_rto = false;
            self.stats.spurious_timeouts += 1;
        }
    }

    /// Whether duplicate ACKs at the current `snd_una` may start a fast retransmit, given the
    /// recovery point `recover` (one past the highest byte sent when the last recovery or
    /// timeout began).
    fn may_enter_recovery(&self) -> bool {
        if self.recover <= 1 || self.cfg.cc == CcAlgo::Reno {
            return true;
        }
        if self.recover_after_rto && !self.sack_ok {
            //= https://www.rfc-editor.org/rfc/rfc6582#section-3.2
            //# the TCP sender SHOULD invoke Fast Retransmit and Fast Recovery
            //# only if the Cumulative Acknowledgment field covers more than "recover"
            // After a timeout the sender went back and resent data the receiver may already
            // hold: duplicate ACKs at exactly `recover` can be answers to those duplicates.
            self.snd_una > self.recover
        } else {
            //= https://www.rfc-editor.org/rfc/rfc6675#section-5.1
            //# a new recovery phase (as described in Section 5) MUST NOT be initiated
            //# until HighACK is greater than or equal to the new value of RecoveryPoint.
            // (HighACK is the highest byte acknowledged, snd_una - 1; RecoveryPoint the
            // highest byte sent, recover - 1.) After a fast recovery without SACK the same
            // holds: the ACK reaching `recover` ended the episode, and duplicate ACKs at it
            // announce the loss of data sent during the recovery.
            self.snd_una >= self.recover
        }
    }

    fn maybe_enter_recovery(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if !self.may_enter_recovery() {
            return;
        }
        self.recover_after_rto = false;
        let flight = self.flight();
        let prior_cwnd = self.cc.cwnd;
        self.init_dsack_undo(prior_cwnd, self.cc.ssthresh);
        self.cc.on_congestion(flight);
        self.recover = self.snd_max;
        self.ca_state = CaState::Recovery;
        self.stats.fast_retransmits += 1;
        self.cwnd_reduced_by_loss();
        io.events.push(ConnEvent::FastRetransmit);
        if self.cfg.prr && self.sack_ok && self.cfg.cc != CcAlgo::Bbr {
            self.start_prr(prior_cwnd);
        }
        self.sb.mark_head_lost();
        if self.sack_ok {
            self.sb.mark_lost(self.cfg.dupthresh, self.mss as u64);
        } else if self.cfg.cc != CcAlgo::Bbr {
            //= https://www.rfc-editor.org/rfc/rfc5681#section-3.2
            //# 4.  The lost segment starting at SND.UNA MUST be retransmitted and
            //#     cwnd set to ssthresh plus 3*SMSS.
            self.cc.cwnd = self.cc.ssthresh + self.cfg.dupthresh as u64 * self.mss as u64;
        }
        self.retransmit_head(now, io);
    }

    // ---------------------------------------------------------------- RACK-TLP and PRR

    /// The rest of an ACK with RACK (Linux `tcp_ack` from `tcp_process_tlp_ack` on): the
    /// tail-loss-probe episode, RACK's loss scan, entering a recovery once a loss is
    /// marked, the window (PRR in a recovery, growth by `grow` bytes otherwise) and the
    /// probe timer.
    #[allow(clippy::too_many_arguments)]
    fn rack_on_ack(
        &mut self,
        now: Instant,
        ack: u64,
        grow: u64,
        una_advanced: bool,
        pure_dup: bool,
        delivered_before: u64,
        io: &mut ConnIo<'_>,
    ) {
        self.process_tlp_ack(ack, pure_dup);
        let mut d = std::mem::take(&mut self.deliveries);
        self.sb.take_deliveries(&mut d);
        let min_rtt = self.rtt.min_rtt();
        for x in &d {
            self.rack.advance(x, now, min_rtt);
        }
        self.deliveries = d;
        let mut loss = RackLoss::default();
        let mut reo_armed = false;
        if self.rack.advanced && self.snd_una < self.snd_max {
            self.rack.advanced = false;
            loss = self.rack_detect(now);
            if let Some(w) = loss.wait {
                // Linux arms the reordering timer in the retransmission timer's slot, in
                // place of a pending probe, at most one RTO away.
                self.reo_at = Deadline::at(now + (w + REO_SLACK).min(self.rtt.rto()));
                self.tlp_at = Deadline::NONE;
                reo_armed = true;
            }
        }
        match self.ca_state {
            // After a timeout, a retransmission found lost again starts a fast recovery
            // (Linux `tcp_fastretrans_alert`: FLAG_LOST_RETRANS in the Loss state).
            CaState::Loss if loss.lost_retrans => self.rack_enter_recovery(now, io),
            //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
            //# If a segment is marked lost, the sender MUST enter loss recovery
            CaState::Open | CaState::Disorder if self.sb.lost_bytes() > 0 => {
                self.rack_enter_recovery(now, io)
            }
            _ => {}
        }
        if self.ca_state == CaState::Recovery {
            if self.prr.is_some() {
                let delivered = self.sb.delivered_segs() - delivered_before;
                self.prr_update(delivered, loss.newly_lost > 0, una_advanced);
            }
        } else if grow > 0 && self.may_raise_cwnd() {
            self.cc.on_ack(now, grow, self.rtt.srtt());
        }
        if una_advanced && !reo_armed {
            // Linux `tcp_set_xmit_timer`: an ACK of new data arms the probe timer, or the
            // RTO (already restarted above), in place of the reordering timer.
            self.reo_at = Deadline::NONE;
            self.schedule_tlp(now, true);
        }
    }

    /// RACK's reordering window (Linux `tcp_rack_reo_wnd`): none while no reordering was
    /// seen and the sender is in a recovery or DupThresh (`dupthresh`) segments are SACKed,
    /// else min RTT / 4 times the steps D-SACKs added (`rack_update_reo_wnd`), at most
    /// SRTT.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
    //# the RACK reordering window SHOULD be set to zero if no reordering has been
    //# observed on the connection so far, and either (a) three or more segments have
    //# been delivered [...] or (b) the sender is already in fast recovery
    fn rack_reo_wnd(&self) -> Duration {
        if !self.sb.reord_seen()
            && (matches!(self.ca_state, CaState::Recovery | CaState::Loss)
                || self.sb.sacked_segs() >= self.cfg.dupthresh as u64)
        {
            return Duration::ZERO;
        }
        let Some(srtt) = self.rtt.srtt() else {
            return Duration::ZERO;
        };
        self.rtt
            .min_rtt()
            .map_or(srtt, |m| (m / 4 * self.reo_wnd_steps).min(srtt))
    }

    /// The D-SACK block of an ACK, if it carries one (RFC 2883 §4: a first block below the
    /// cumulative ACK, or inside the second block), as Linux's `tcp_check_dsack`: not one
    /// reporting more duplicates than were retransmitted.
    fn dsack_of(&mut self, t: &TcpRepr, ack: u64) -> Option<(u64, u64)> {
        if !(self.cfg.dsack && self.sack_ok) {
            return None;
        }
        let mut it = t.opts.sack.iter();
        let b0 = it.next()?;
        let (l0, r0) = (
            unwrap(self.iss, self.snd_una, b0.left),
            unwrap(self.iss, self.snd_una, b0.right),
        );
        let inside_next = it.next().is_some_and(|b1| {
            let l1 = unwrap(self.iss, self.snd_una, b1.left);
            let r1 = unwrap(self.iss, self.snd_una, b1.right);
            l0 >= l1 && r0 <= r1
        });
        if l0 >= r0 || !(l0 < ack || inside_next) || r0 - l0 > self.max_snd_wnd.max(1) {
            return None;
        }
        self.dsack_dups += (r0 - l0).div_ceil(self.mss as u64);
        (self.dsack_dups <= self.stats.retransmits).then_some((l0, r0))
    }

    /// A D-SACK arrived (Linux `tcp_dsack_seen`, `tcp_check_dsack`): after reordering, and
    /// unless it reports the tail-loss probe, it widens RACK's reordering window; one
    /// below the cumulative ACK reports a retransmission of the recovery as needless.
    fn on_dsack(&mut self, (l, r): (u64, u64)) {
        self.stats.dsacks_received += 1;
        let probe = self.tlp_high_seq == Some(r);
        if self.sb.reord_seen() && !probe {
            self.dsack_seen = true;
        }
        let segs = (r - l).div_ceil(self.mss as u64) as i64;
        if let Some(u) = self.dsack_undo.as_mut() {
            if u.retrans > 0 && r <= self.snd_una && r > u.marker {
                u.retrans = (u.retrans - segs).max(0);
            }
        }
    }

    /// Undo the fast recovery if every retransmission of it was reported as a duplicate
    /// (Linux `tcp_try_undo_dsack`, `tcp_undo_cwnd_reduction`): the losses were not real.
    fn try_undo_dsack(&mut self) -> bool {
        let Some(u) = self.dsack_undo.filter(|u| u.retrans == 0) else {
            return false;
        };
        self.dsack_undo = None;
        self.cc.cwnd = self.cc.cwnd.max(u.prior_cwnd);
        self.cc.ssthresh = self.cc.ssthresh.max(u.prior_ssthresh);
        self.prr = None;
        self.ca_state = CaState::Open;
        self.stats.dsack_undos += 1;
        true
    }

    /// Start the D-SACK undo record of a fast recovery (Linux `tcp_init_undo`, with
    /// `prior_ssthresh` = `tcp_current_ssthresh`).
    fn init_dsack_undo(&mut self, prior_cwnd: u64, prior_ssthresh: u64) {
        self.dsack_undo = (self.cfg.dsack && self.sack_ok).then_some(DsackUndo {
            marker: self.snd_una,
            retrans: -1,
            prior_cwnd,
            prior_ssthresh: prior_ssthresh.max(prior_cwnd / 2 + prior_cwnd / 4),
        });
    }

    /// RACK's reordering window after D-SACKs (Linux `tcp_rack_update_reo_wnd`): one step
    /// wider per round trip with a D-SACK, kept for `REO_WND_PERSIST` recoveries, back to
    /// one step after that.
    fn rack_update_reo_wnd(&mut self, delivered_before: u64) {
        if !self.cfg.dsack || delivered_before == 0 {
            return;
        }
        let newest = self.deliveries.iter().map(|d| d.order).max();
        if self.dsack_seen && newest.is_some_and(|o| o < self.reo_wnd_delivered) {
            // Sent before the last widening: less than a round trip ago.
            self.dsack_seen = false;
        }
        if self.dsack_seen {
            self.reo_wnd_steps = (self.reo_wnd_steps + 1).min(255);
            self.dsack_seen = false;
            self.reo_wnd_delivered = self.sb.tx_count();
            self.reo_wnd_persist = REO_WND_PERSIST;
        } else if self.reo_wnd_persist == 0 {
            self.reo_wnd_steps = 1;
        }
    }

    fn rack_detect(&mut self, now: Instant) -> RackLoss {
        let reo_wnd = self.rack_reo_wnd();
        self.sb.rack_detect_loss(&self.rack, now, reo_wnd)
    }

    /// Enter a fast recovery on a loss RACK marked (Linux `tcp_enter_recovery`): ssthresh
    /// from the congestion controller, then PRR (or cwnd = ssthresh and the first lost
    /// segment resent at once, without PRR). No `recover` check: Linux has none once SACK
    /// is in use, and leaves the Loss state this way when a retransmission is lost again.
    fn rack_enter_recovery(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        self.recover_after_rto = false;
        self.undo = None;
        let prior_cwnd = self.cc.cwnd;
        self.init_dsack_undo(prior_cwnd, self.cc.ssthresh);
        self.cc.on_congestion(self.flight());
        self.recover = self.snd_max;
        self.ca_state = CaState::Recovery;
        self.stats.fast_retransmits += 1;
        self.cwnd_reduced_by_loss();
        io.events.push(ConnEvent::FastRetransmit);
        self.tlp_at = Deadline::NONE;
        self.tlp_high_seq = None;
        if self.cfg.cc == CcAlgo::Bbr {
            // BBR's packet conservation sets cwnd at this ACK; the output path sends.
        } else if self.cfg.prr {
            self.start_prr(prior_cwnd);
        } else {
            self.retransmit_head(now, io);
        }
    }

    /// The reordering timer fired (Linux `tcp_rack_reo_timeout`): mark what has waited out
    /// its reordering window, and recover it.
    fn on_reo(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if !self.rack_on() || self.snd_una >= self.snd_max || !self.can_send_data() {
            return;
        }
        let loss = self.rack_detect(now);
        if loss.newly_lost == 0 {
            return;
        }
        if self.ca_state != CaState::Recovery {
            self.rack_enter_recovery(now, io);
            if self.prr.is_some() {
                self.prr_update(1, true, false);
            }
        }
        self.try_send(now, io);
    }

    fn start_prr(&mut self, prior_cwnd: u64) {
        self.prr = Some(Prr {
            prior_cwnd: (prior_cwnd / self.mss as u64).max(1),
            delivered: 0,
            out: 0,
        });
        // PRR starts from the window the recovery found, not from ssthresh.
        self.cc.cwnd = prior_cwnd;
    }

    /// PRR on an ACK that delivered `delivered` segments (Linux `tcp_cwnd_reduction`):
    /// while the pipe exceeds ssthresh, send ssthresh/prior_cwnd of what is delivered
    /// (rounded up); below it, PRR-SSRB: what was delivered and not yet sent again, at
    /// least what this ACK delivered, one more if the ACK advanced SND.UNA and found no
    /// new loss, never beyond ssthresh. At least one segment (the fast retransmit) once
    /// the recovery begins. cwnd = pipe + that, in whole segments.
    //= https://www.rfc-editor.org/rfc/rfc6937#section-3.1
    //# if (pipe > ssthresh) {
    //#    // Proportional Rate Reduction
    //#    sndcnt = CEIL(prr_delivered * ssthresh / RecoverFS) - prr_out
    //# } else {
    //#    // Two versions of the Reduction Bound
    //#    if (conservative) {    // PRR-CRB
    //#      limit = prr_delivered - prr_out
    //#    } else {               // PRR-SSRB
    //#      limit = MAX(prr_delivered - prr_out, DeliveredData) + MSS
    //#    }
    //#    // Attempt to catch up, as permitted by limit
    //#    sndcnt = MIN(ssthresh - pipe, limit)
    //# }
    fn prr_update(&mut self, delivered: u64, newly_lost: bool, una_advanced: bool) {
        let Some(mut p) = self.prr else {
            return;
        };
        if delivered == 0 {
            return;
        }
        let mss = self.mss as u64;
        let pipe = self.inflight().div_ceil(mss) as i64;
        let ssthresh = (self.cc.ssthresh / mss) as i64;
        p.delivered += delivered;
        let (prr_delivered, prr_out) = (p.delivered as i64, p.out as i64);
        let prior = p.prior_cwnd as i64;
        let mut sndcnt = if pipe > ssthresh {
            (ssthresh * prr_delivered + prior - 1) / prior - prr_out
        } else {
            let mut n = (prr_delivered - prr_out).max(delivered as i64);
            if una_advanced && !newly_lost {
                n += 1;
            }
            n.min(ssthresh - pipe)
        };
        sndcnt = sndcnt.max(if p.out > 0 { 0 } else { 1 });
        self.prr = Some(p);
        self.cc.cwnd = (pipe + sndcnt).max(0) as u64 * mss;
    }

    /// The sender is "open" for a tail-loss probe (Linux's Open state): nothing SACKed,
    /// lost or being retransmitted, and the first outstanding segment never resent.
    fn tlp_open(&self) -> bool {
        matches!(self.ca_state, CaState::Open | CaState::Disorder)
            && self.sb.sacked_bytes() == 0
            && self.sb.lost_bytes() == 0
            && self.sb.retx_out_bytes() == 0
            && !self.sb.head_retransmitted()
    }

    /// Arm the tail-loss probe timer if a probe may be sent (Linux
    /// `tcp_schedule_loss_probe`); otherwise leave the RTO alone in charge. The probe
    /// timeout is 2·SRTT, plus the minimum RTO when one segment is outstanding (the
    /// receiver may be holding its ACK back) or 2 ms otherwise, 1 s before any RTT sample;
    /// never later than the RTO (a full one if the ACK just restarted it, else what is left
    /// of the running one).
    //= https://www.rfc-editor.org/rfc/rfc8985#section-7.2
    //# If FlightSize is equal to one segment, add WCDelAckT to PTO
    fn schedule_tlp(&mut self, now: Instant, rto_restarted: bool) {
        let may_probe = self.cfg.tlp
            && self.sack_ok
            && self.snd_una < self.snd_max
            && self.tlp_open()
            && self.can_send_data();
        if !may_probe {
            self.tlp_at = Deadline::NONE;
            return;
        }
        let pto = match self.rtt.srtt() {
            Some(srtt) => {
                let extra = if self.sb.len() == 1 {
                    self.cfg.rto_min
                } else {
                    TLP_SLACK
                };
                2 * srtt + extra
            }
            None => TLP_INITIAL,
        };
        let cap = if rto_restarted {
            Some(self.rtt.rto())
        } else {
            self.rto_at.get().filter(|&t| t > now).map(|t| t - now)
        };
        self.tlp_at = Deadline::at(now + cap.map_or(pto, |c| pto.min(c)));
        self.reo_at = Deadline::NONE;
    }

    /// The probe timer fired (Linux `tcp_send_loss_probe`): send one new segment if the
    /// peer's window takes it (whatever cwnd says), else the last segment again; at most
    /// one probe per episode. The RTO restarts from the probe.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-7.3
    //# If such a segment is not available, then the sender SHOULD retransmit
    //# the highest-sequence segment sent so far
    fn on_tlp(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if !self.can_send_data() || self.snd_una >= self.snd_max || self.tlp_high_seq.is_some() {
            return;
        }
        let (sent, retrans) = if let Some((start, len, fin)) = self.tlp_new_segment() {
            (self.transmit_new(now, start, len, fin, io), false)
        } else {
            match self.sb.last() {
                Some(i) if self.sb.get(i).flags() & (scoreboard::SACKED | scoreboard::SYN) == 0 => {
                    (self.retransmit(now, i, io), true)
                }
                _ => (false, false),
            }
        };
        if !sent {
            return;
        }
        self.tlp_high_seq = Some(self.snd_max);
        self.tlp_retrans = retrans;
        self.stats.loss_probes += 1;
        io.events.push(ConnEvent::LossProbe);
        self.rto_at = Deadline::at(now + self.rtt.rto());
    }

    /// One new segment for a probe: up to one MSS of data waiting, if all of it fits in
    /// the peer's window (Linux `tcp_snd_wnd_test`); cwnd and Nagle do not hold it.
    fn tlp_new_segment(&self) -> Option<(u64, u64, bool)> {
        let data_end = self.data_end();
        if self.snd_max >= data_end {
            return None;
        }
        let len = (self.mss as u64).min(data_end - self.snd_max);
        if self.snd_max + len > self.snd_una + self.snd_wnd {
            return None;
        }
        let fin = self.fin_queued && self.snd_max + len == self.app_end && data_end == self.app_end;
        Some((self.snd_max, len, fin))
    }

    /// The end of a probe episode (RFC 8985 §7.4, Linux `tcp_process_tlp_ack`), once the
    /// ACK reaches what was sent when the probe went out: a probe of new data ends it; an
    /// ACK beyond it after a retransmitted probe means the probe repaired a loss, answered
    /// by one cwnd reduction (ssthresh from the congestion controller, cwnd = ssthresh); a
    /// plain duplicate ACK (a D-SACK of the probe is one) means original and probe both
    /// arrived.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-7.4.2
    //# the sender MUST invoke a congestion control response
    fn process_tlp_ack(&mut self, ack: u64, pure_dup: bool) {
        let Some(high) = self.tlp_high_seq else {
            return;
        };
        if ack < high {
            return;
        }
        if !self.tlp_retrans {
            self.tlp_high_seq = None;
        } else if ack > high {
            self.tlp_high_seq = None;
            self.cc.on_congestion(self.flight());
            self.cwnd_reduced_by_loss();
            self.stats.loss_probe_recoveries += 1;
        } else if pure_dup {
            self.tlp_high_seq = None;
        }
    }

    /// A loss reduced the window (fast retransmit or timeout). With ECN, tell the receiver
    /// so it stops echoing, and take no ECN reduction for data sent before this one.
    //= https://www.rfc-editor.org/rfc/rfc3168#section-6.1.2
    //# When an ECN-Capable TCP sender reduces its congestion window for any reason
    //# (because of a retransmit timeout, a Fast Retransmit, or in response to an ECN
    //# Notification), the TCP sender sets the CWR flag in the TCP header of the first
    //# new data packet sent after the window reduction.
    fn cwnd_reduced_by_loss(&mut self) {
        if self.ecn_ok {
            self.cwr_pending = true;
            self.ecn_recover = self.ecn_recover.max(self.snd_max);
        }
    }

    fn exit_recovery(&mut self) {
        self.ca_state = CaState::Open;
        self.prr = None;
        if self.cfg.cc == CcAlgo::Bbr {
            // BBR restores its own cwnd (Linux `tcp_end_cwnd_reduction` leaves it alone).
        } else if !self.sack_ok && self.cfg.cc != CcAlgo::Cubic {
            //= https://www.rfc-editor.org/rfc/rfc6582#section-3.2
            //# Set cwnd to either (1) min (ssthresh, max(FlightSize, SMSS) + SMSS)
            //# or (2) ssthresh
            let f = self.flight().max(self.mss as u64) + self.mss as u64;
            self.cc.cwnd = self.cc.ssthresh.min(f);
        } else {
            self.cc.cwnd = self.cc.ssthresh;
        }
    }

    fn on_data(&mut self, now: Instant, h: &Headers, t: &TcpRepr, io: &mut ConnIo<'_>) {
        if matches!(self.state, State::SynSent | State::SynRcvd) {
            return;
        }
        let fin = t.flags.contains(TcpFlags::FIN);
        let len = h.payload_len as u64;
        if len == 0 && !fin {
            //= https://www.rfc-editor.org/rfc/rfc9293#section-3.10.7.4
            //# If an incoming segment is not acceptable, an acknowledgment should be
            //# sent in reply (unless the RST bit is set, if so drop the segment and
            //# return)
            // A segment below RCV.NXT: a zero-window probe (Linux sends SND.UNA - 1). The
            // reply carries the current window.
            if unwrap(self.irs, self.rcv.rcv_nxt(), t.seq) < self.rcv.rcv_nxt() {
                self.ack_now = true;
            }
            return;
        }
        let linux_acks = self.cfg.delack_mode == DelackMode::Linux;
        if self.ecn_ok {
            if h.ip.ecn == Ecn::Ce && !self.ece_pending {
                self.ece_pending = true;
                self.ack_now = true;
                if linux_acks {
                    // Linux `tcp_ecn_check_ce`: the sender may have a very low cwnd.
                    self.enter_quickack_mode(2);
                }
            }
            if t.flags.contains(TcpFlags::CWR) && len > 0 {
                self.ece_pending = h.ip.ecn == Ecn::Ce;
            }
        }
        let start = unwrap(self.irs, self.rcv.rcv_nxt(), t.seq);
        let end = start + len;
        if let Some(p) = io.rwnd.as_deref_mut() {
            if len > 0 {
                p.on_data(now, self.id, len as u32);
            }
        }
        if len > 0 && linux_acks {
            self.measure_rcv_mss(len, t.flags.contains(TcpFlags::PSH));
        }
        if len > 0 {
            self.measure_rcv_rtt_ts(now, t, len);
        }
        let a = if len > 0 {
            self.rcv.on_data(start, end)
        } else {
            Default::default()
        };
        if len > 0 {
            self.on_data_arrival(now, len, &a);
        }
        if self.cfg.dsack && self.sack_ok {
            //= https://www.rfc-editor.org/rfc/rfc2883#section-4
            //# If the D-SACK block reports a duplicate contiguous sequence from a
            //# (possibly larger) block of data in the receiver's data queue above
            //# the cumulative acknowledgement, then the second SACK block in that
            //# SACK option should specify that (possibly larger) block of data.
            if let Some(r) = a.dup_range {
                self.dsack_block = Some(r);
            }
        }
        if a.delivered > 0 && !self.reading {
            self.unread += a.delivered;
        } else if a.delivered > 0 {
            self.stats.bytes_delivered += a.delivered;
            io.events.push(ConnEvent::Delivered(a.delivered));
            self.on_app_read(now);
        }
        // A FIN beyond a hole is kept with its segment (as Linux keeps it in the
        // out-of-order queue) and taken once the data before it has arrived.
        if fin && !self.peer_fin && self.rcv.rcv_nxt() < end {
            self.peer_fin_at = Some(end);
        }
        let fin_now =
            (fin && self.rcv.rcv_nxt() == end) || self.peer_fin_at == Some(self.rcv.rcv_nxt());
        if fin_now && !self.peer_fin {
            self.peer_fin_at = None;
            self.rcv.advance_control();
            self.peer_fin = true;
            self.ack_now = true;
            io.events.push(ConnEvent::PeerClosed);
            self.state = match self.state {
                State::Established => State::CloseWait,
                State::FinWait1 => State::Closing,
                State::FinWait2 => {
                    self.enter_time_wait(now);
                    State::TimeWait
                }
                s => s,
            };
        } else if fin && self.peer_fin {
            self.ack_now = true; // retransmitted FIN
        }
        if a.out_of_order || a.filled_gap || a.duplicate {
            //= https://www.rfc-editor.org/rfc/rfc5681#section-4.2
            //# A TCP receiver SHOULD send an immediate duplicate ACK when an out-
            //# of-order segment arrives. [...] A TCP receiver SHOULD send an
            //# immediate ACK when the incoming segment fills in all or part of a
            //# gap in the sequence space.
            self.ack_now = true;
        } else if len > 0 {
            self.in_order_ack_decision(now, linux_acks, a.delivered);
        }
    }

    /// Whether data that arrived in order (`delivered` bytes of it new) is acknowledged
    /// now or later.
    #[inline(always)]
    fn in_order_ack_decision(&mut self, now: Instant, linux_acks: bool, delivered: u64) {
        if linux_acks {
            self.linux_ack_check(now);
            if delivered > 0 && self.reading {
                // The application reads at once, after the ACK decision (as Linux's reader
                // runs after the softirq that queued the data).
                self.cleanup_rbuf_ack();
            }
        } else if self.quickack_left > 0 {
            self.quickack_left -= 1;
            self.ack_now = true;
        } else {
            self.ack_pending += 1;
            if self.ack_pending >= self.cfg.delayed_ack {
                self.ack_now = true;
            } else if self.delack_at.is_none() {
                self.delack_at = Deadline::at(now + self.cfg.delack_timeout);
            }
        }
    }

    /// Linux `tcp_measure_rcv_mss`: the receiver's estimate of the sender's segment size,
    /// the largest segment seen (at most our MSS), or a smaller size seen twice running
    /// in segments that are not short pushed tails. A full-sized segment with PSH (the
    /// end of a write) and any other short segment mark the ACK "pushed": the
    /// application's read sends it (`cleanup_rbuf_ack`).
    fn measure_rcv_mss(&mut self, len: u64, psh: bool) {
        let lss = std::mem::take(&mut self.last_seg_size);
        if len >= self.rcv_mss {
            if len != self.rcv_mss {
                // A new segment size: Linux re-estimates the buffer's payload ratio.
                let rcv_wnd = self.rcv_edge.saturating_sub(self.last_ack_sent);
                if let Some(a) = tuned(self.cfg.rcv_autotune, &mut self.autotune) {
                    a.measure_ratio(len, rcv_wnd);
                }
            }
            self.rcv_mss = len.min(self.mss as u64);
            if psh {
                self.ack_pushed |= ACK_PUSHED;
            }
            return;
        }
        if len >= 536 || (len >= 88 && !psh) {
            self.last_seg_size = len;
            if len == lss {
                self.rcv_mss = len;
                return;
            }
        }
        if self.ack_pushed & ACK_PUSHED != 0 {
            self.ack_pushed |= ACK_PUSHED2;
        }
        self.ack_pushed |= ACK_PUSHED;
    }

    /// Linux `tcp_cleanup_rbuf` after the application read everything in order: a delayed
    /// ACK goes out at once if the read emptied the buffer (nothing held out of order
    /// either) and two short segments, or one pushed segment outside ping-pong mode,
    /// arrived since the last ACK.
    fn cleanup_rbuf_ack(&mut self) {
        if self.ack_now || self.ack_pending == 0 || self.unread > 0 || self.rcv.ooo_bytes() > 0 {
            return;
        }
        if self.ack_pushed & ACK_PUSHED2 != 0
            || (self.ack_pushed & ACK_PUSHED != 0 && !self.pingpong)
        {
            self.ack_now = true;
        }
    }

    /// The receiver's RTT from the echoed timestamp (`tcp_rcv_rtt_measure_ts`).
    fn measure_rcv_rtt_ts(&mut self, now: Instant, t: &TcpRepr, len: u64) {
        let Some(ts) = t.opts.timestamp.filter(|ts| self.ts_ok && ts.ecr != 0) else {
            return;
        };
        let queue_empty = self.unread == 0;
        if let Some(a) = tuned(self.cfg.rcv_autotune, &mut self.autotune) {
            let full = len >= self.rcv_mss;
            let ms = ts_clock(now).wrapping_sub(ts.ecr);
            if ms < 60_000 {
                a.measure_ts(ts.ecr, Duration::from_millis(ms as u64), full, queue_empty);
            }
        }
    }

    /// What a data segment does to the receiver's window and ACK timing: Linux
    /// `tcp_event_data_recv` for data in order (the per-window RTT measurement, the ato
    /// update, quick-ACK re-entry after a long silence, `tcp_grow_window`),
    /// `tcp_data_queue_ofo` for data out of order (window and buffer growth), quick-ACK
    /// mode for a duplicate (`tcp_data_queue`'s `out_of_window` path).
    fn on_data_arrival(&mut self, now: Instant, len: u64, a: &super::recv::Arrival) {
        let linux_acks = self.cfg.delack_mode == DelackMode::Linux;
        let queued = self.rcv.ooo_bytes() + self.unread;
        let rcv_wnd = self.rcv_edge.saturating_sub(self.last_ack_sent);
        let mut grew = false;
        if let Some(at) = tuned(self.cfg.rcv_autotune, &mut self.autotune) {
            if a.delivered > 0 {
                at.measure_window(now, self.rcv.rcv_nxt(), rcv_wnd);
                // The segment is in the buffer until the application reads it.
                grew = at.grow_window(len, queued + a.delivered);
            } else if a.out_of_order && !a.duplicate {
                grew = self.sack_ok && at.grow_window(len, queued);
                at.on_out_of_order(self.rcv.ooo_span());
            }
        }
        if !linux_acks {
            return;
        }
        if a.delivered > 0 {
            let ato_min = self.cfg.delack_timeout;
            let rto = self.rtt.rto();
            if self.ato.is_zero() {
                // The first data: start the delayed-ACK engine in quick-ACK mode.
                self.incr_quickack(self.cfg.quickack);
                self.ato = ato_min;
            } else {
                let m = now - self.lrcvtime;
                if m <= ato_min / 2 {
                    self.ato = self.ato / 2 + ato_min / 2;
                } else if m < self.ato {
                    self.ato = (self.ato / 2 + m).min(rto);
                } else if m > rto {
                    // The sender was silent for longer than an RTO: ACK quickly again.
                    self.incr_quickack(self.cfg.quickack);
                }
            }
            self.lrcvtime = now;
        } else if a.duplicate && !a.out_of_order {
            // Data the receiver already holds: a spurious retransmission.
            self.enter_quickack_mode(self.cfg.quickack);
        }
        if grew {
            // `tcp_grow_window` sets the low bit of the quick-ACK count (`quick |= 1`):
            // from an even count that is one more quick ACK, so while the window grows
            // with every segment the count does not run down.
            self.quickack_left |= 1;
        }
    }

    /// Linux `tcp_incr_quickack`: quick-ACK mode for up to `max` ACKs, fewer if the
    /// window holds fewer than twice as many segments.
    fn incr_quickack(&mut self, max: u32) {
        let rcv_wnd = self.rcv_edge.saturating_sub(self.last_ack_sent);
        let mut quick = (rcv_wnd / (2 * self.rcv_mss.max(1))).min(u32::MAX as u64) as u32;
        if quick == 0 {
            quick = 2;
        }
        self.quickack_left = self.quickack_left.max(quick.min(max));
    }

    /// Linux `tcp_enter_quickack_mode`.
    fn enter_quickack_mode(&mut self, max: u32) {
        self.incr_quickack(max);
        self.ato = self.cfg.delack_timeout;
    }

    /// Linux `__tcp_ack_snd_check` for data in order: ACK now when more than one full
    /// segment is unacknowledged and the window to offer is not smaller than the last,
    /// or in quick-ACK mode; otherwise arm the delayed-ACK timer.
    //= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.3
    //# an ACK SHOULD be generated for at least every second full-sized segment
    fn linux_ack_check(&mut self, now: Instant) {
        self.ack_pending += 1;
        let unacked = self.rcv.rcv_nxt() - self.last_ack_sent;
        let last_wnd = self.rcv_edge.saturating_sub(self.last_ack_sent);
        // Both as advertised: rounded up to the window scale.
        let unit = 1u64 << self.rcv_wscale;
        // Linux computes the window only when more than one segment is unacknowledged,
        // and computing it may end quick-ACK mode (`__tcp_select_window`).
        let mut more_than_one = false;
        if unacked > self.rcv_mss {
            self.select_window_ends_quickack();
            let wnd = self.free_window().div_ceil(unit) * unit;
            more_than_one = wnd >= last_wnd;
        }
        // `tcp_in_quickack_mode`: not in ping-pong mode.
        if more_than_one || (self.quickack_left > 0 && !self.pingpong) {
            self.ack_now = true;
        } else {
            self.send_delayed_ack(now);
        }
    }

    /// Linux `tcp_send_delayed_ack`: wait `ato`, bounded by the smoothed RTT (at least
    /// `delack_timeout`) and 200 ms; keep an earlier deadline; if that one is less than
    /// ato/4 away, ACK now.
    fn send_delayed_ack(&mut self, now: Instant) {
        let ato_min = self.cfg.delack_timeout;
        let mut ato = self.ato.max(ato_min);
        if ato > ato_min {
            let mut max_ato = Duration::from_millis(500);
            if let Some(srtt) = self.rtt.srtt() {
                max_ato = max_ato.min(srtt.max(ato_min));
            }
            ato = ato.min(max_ato);
        }
        ato = ato.min(Duration::from_millis(200));
        let mut timeout = now + ato;
        if let Some(t) = self.delack_at.get() {
            if t <= now + ato / 4 {
                self.ack_now = true;
                return;
            }
            timeout = timeout.min(t);
        }
        self.delack_at = Deadline::at(timeout);
    }

    /// Linux `__tcp_select_window` leaves quick-ACK mode when less than half of the
    /// buffer's window is free (data held out of order or unread).
    fn select_window_ends_quickack(&mut self) {
        if self.cfg.delack_mode != DelackMode::Linux {
            return;
        }
        let queued = self.rcv.ooo_bytes() + self.unread;
        let (full, free) = match self.autotune() {
            Some(a) => (a.full_window(), a.free_space(queued)),
            None => (self.cfg.rcvbuf, self.cfg.rcvbuf.saturating_sub(queued)),
        };
        if free < full / 2 {
            self.quickack_left = 0;
        }
    }

    /// The window the receive buffer allows now (before any receive-window policy).
    fn free_window(&self) -> u64 {
        let queued = self.rcv.ooo_bytes() + self.unread;
        match self.autotune() {
            Some(a) => a.window(queued),
            None => self.cfg.rcvbuf.saturating_sub(queued),
        }
    }

    /// The application read what arrived: autotuning measures it (`tcp_rcv_space_adjust`)
    /// and, with Linux's ACK engine, a read that doubles a nearly used-up window sends a
    /// window update at once (`tcp_cleanup_rbuf`).
    fn on_app_read(&mut self, now: Instant) {
        let (read, unread, span) = (self.stats.bytes_delivered, self.unread, self.rcv.ooo_span());
        if let Some(a) = tuned(self.cfg.rcv_autotune, &mut self.autotune) {
            a.on_read(now, read, unread, span);
        }
        if self.cfg.delack_mode == DelackMode::Linux && !self.ack_now && !self.peer_fin {
            let left = self.rcv_edge.saturating_sub(self.rcv.rcv_nxt());
            let clamp = match self.autotune() {
                Some(a) => a.window_clamp(),
                None => self.cfg.rcvbuf,
            };
            if 2 * left <= clamp {
                let new = self.free_window();
                if new > 0 && new >= 2 * left {
                    self.ack_now = true;
                }
            }
        }
    }

    fn flush_ack(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if self.ack_now && !matches!(self.state, State::SynSent | State::SynRcvd | State::Closed) {
            self.send_pure_ack(now, io);
        }
    }

    // ---------------------------------------------------------------- timers

    /// Run the timers due at `now`.
    pub fn on_timer(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if self.linger_at.is_due(now) {
            self.linger_at = Deadline::NONE;
            self.enter_closed(now, io, false);
            return;
        }
        if self.delack_at.is_due(now) {
            self.delack_at = Deadline::NONE;
            if self.ack_pending > 0 {
                if self.cfg.delack_mode == DelackMode::Linux && self.pingpong {
                    // Linux `tcp_delack_timer_handler`: the delayed ACK was missed in
                    // ping-pong mode: leave it and deflate ato.
                    self.pingpong = false;
                    self.ato = self.cfg.delack_timeout;
                } else if self.cfg.delack_mode == DelackMode::Linux {
                    // Linux `tcp_delack_timer_handler`: the delayed ACK was missed, so
                    // inflate ato (at most the RTO).
                    self.ato = (self.ato * 2).min(self.rtt.rto());
                }
                self.send_pure_ack(now, io);
            }
        }
        if self.reo_at.is_due(now) {
            self.reo_at = Deadline::NONE;
            self.on_reo(now, io);
        }
        if self.tlp_at.is_due(now) {
            self.tlp_at = Deadline::NONE;
            self.on_tlp(now, io);
        }
        if self.rto_at.is_due(now) {
            self.rto_at = Deadline::NONE;
            self.on_rto(now, io);
        }
        if self.persist_at.is_due(now) {
            self.persist_at = Deadline::NONE;
            self.send_probe(now, io);
        }
        if self.wake_at.is_due(now) {
            self.wake_at = Deadline::NONE;
            self.try_send(now, io);
        }
    }

    /// Try to send again (a conditioner's shaping timer woke the host).
    pub fn wake(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        self.try_send(now, io);
    }

    fn on_rto(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        match self.state {
            State::SynSent | State::SynRcvd => {
                self.syn_tries += 1;
                if self.syn_tries > self.cfg.syn_retries {
                    self.enter_closed(now, io, true);
                    return;
                }
                self.rtt.back_off();
                self.stats.timeouts += 1;
                self.stats.retransmits += 1;
                self.sb.mark_all_lost();
                self.sb.retransmitted(0, now);
                self.send_syn(now, io);
                return;
            }
            State::Closed | State::TimeWait => return,
            _ => {}
        }
        if self.snd_una >= self.snd_max {
            return;
        }
        self.stats.timeouts += 1;
        io.events.push(ConnEvent::Timeout);
        self.reo_at = Deadline::NONE;
        self.tlp_at = Deadline::NONE;
        self.tlp_high_seq = None;
        self.prr = None;
        self.dsack_undo = None;
        //= https://www.rfc-editor.org/rfc/rfc5681#section-3.1
        //# When a TCP sender detects segment loss using the retransmission timer
        //# and the given segment has not yet been resent by way of the
        //# retransmission timer, the value of ssthresh MUST be set to no more
        //# than the value given in equation (4).
        let cwnd_before = self.cc.cwnd / self.mss as u64;
        let reduce = match self.cfg.timeout_mode {
            TimeoutMode::Rfc => self.ca_state != CaState::Loss,
            // Linux `tcp_enter_loss`: "reduce ssthresh if it has not yet been made inside
            // this window" — not when a recovery's reduction stands (its point not yet
            // acknowledged), nor again at a timeout with no ACK of new data since the last.
            TimeoutMode::Linux => {
                matches!(self.ca_state, CaState::Open | CaState::Disorder)
                    || self.snd_una >= self.recover
                    || (self.ca_state == CaState::Loss && !self.rto_unanswered)
            }
        };
        if reduce {
            if self.cfg.rto_undo && self.ts_ok {
                self.undo = Some((self.cc.cwnd, self.cc.ssthresh, ts_clock(now)));
            }
            self.cc.on_timeout(self.flight());
        } else {
            self.cc.cwnd = self.mss as u64;
        }
        self.rto_unanswered = true;
        if self.bbr.is_some() {
            let dt = self.bbr.as_ref().map_or(now, |b| b.1.delivered_time());
            let ctx = self.bbr_ctx(now, dt);
            if let Some(b) = self.bbr.as_mut() {
                b.0.on_timeout(cwnd_before, &ctx);
            }
        }
        self.ca_state = CaState::Loss;
        self.recover = self.snd_max;
        self.recover_after_rto = true;
        self.cwnd_reduced_by_loss();
        self.dupacks = 0;
        self.sb.mark_all_lost();
        //= https://www.rfc-editor.org/rfc/rfc6298#section-5
        //# (5.5) The host MUST set RTO <- RTO * 2 ("back off the timer").
        self.rtt.back_off();
        self.retransmit_head(now, io);
        self.try_send(now, io);
    }

    /// The persist timer fired: data waits, nothing is in flight, and the peer's window
    /// still has no room for the next segment. If the window has some room (less than
    /// sender SWS avoidance sends), send what fits (RFC 9293's SWS override timeout;
    /// Linux's `tcp_write_wakeup`). If it is zero, send a zero-window probe, as Linux's
    /// `tcp_send_probe0` / `tcp_xmit_probe_skb`: a segment without data at SND.UNA - 1,
    /// which the receiver answers with an ACK carrying its window. The probe is not data:
    /// it is not in the scoreboard, arms no retransmission timer and never reduces cwnd.
    /// The next probe follows after RTO·2^n (n probes so far), at most `rto_max`.
    //= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.1
    //# The transmitting host SHOULD send the first zero-window probe when a
    //# zero window has existed for the retransmission timeout period (SHLD-29)
    //# (Section 3.8.1), and SHOULD increase exponentially the interval between
    //# successive probes (SHLD-30).
    fn send_probe(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if !self.window_closed() {
            self.try_send(now, io);
            return;
        }
        let room = (self.snd_una + self.snd_wnd).saturating_sub(self.snd_max);
        if room > 0 {
            let len = room
                .min(self.mss as u64)
                .min(self.data_end() - self.snd_max);
            let fin = self.fin_queued
                && self.snd_max + len == self.app_end
                && self.data_end() == self.app_end;
            self.transmit_new(now, self.snd_max, len, fin, io);
            self.arm_persist(now);
            return;
        }
        let tcp = self.base_header(now, self.snd_una - 1);
        self.stats.window_probes += 1;
        self.push_out(now, tcp, 0, Ecn::NotEct, io);
        self.persist_backoff = (self.persist_backoff + 1).min(16);
        self.persist_at = Deadline::at(now + self.persist_interval());
    }

    /// The persist timer's interval: the RTO doubled per probe sent, at most `rto_max`.
    fn persist_interval(&self) -> Duration {
        let d = self.rtt.rto().saturating_mul(1u32 << self.persist_backoff);
        d.min(self.cfg.rto_max)
    }

    /// Data waits, nothing is in flight, and the peer's window has no room for the next
    /// segment (none, or less than sender SWS avoidance lets out).
    fn window_closed(&self) -> bool {
        // The cheapest test first: while data is in flight the window is not closed.
        self.snd_una == self.snd_max
            && self.can_send_data()
            && self.data_end() > self.snd_max
            && self.snd_una + self.snd_wnd < self.data_end()
            && self.next_new_segment(self.new_data_limit()).is_none()
    }

    // ---------------------------------------------------------------- output

    fn data_end(&self) -> u64 {
        if self.linux_writer {
            // Only what the writer copied into the send buffer can be sent.
            return self.write_seq;
        }
        match self.cfg.sndbuf {
            Some(b) => self.app_end.min(self.snd_una.max(1) + b),
            None => self.app_end,
        }
    }

    fn can_send_data(&self) -> bool {
        matches!(
            self.state,
            State::Established
                | State::CloseWait
                | State::FinWait1
                | State::Closing
                | State::LastAck
        )
    }

    fn try_send(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if !self.can_send_data() {
            return;
        }
        if self.nothing_to_send() {
            // What the loop below concludes then (a receiver, after each segment): nothing
            // is sent, the burst is over, the window is not closed.
            self.pacer.end_burst();
            self.persist_at = Deadline::NONE;
            self.persist_backoff = 0;
            return;
        }
        self.maybe_restart_after_idle(now);
        let sent_before = self.stats.segments_sent + self.stats.policed;
        let mut sent_new = false;
        loop {
            sent_new |= self.send_loop(now, io);
            // Linux `tcp_data_snd_check`: once what was queued went out, a writer waiting
            // for buffer space may wake (`tcp_check_space`), and what it copies goes out
            // at once.
            if !(self.linux_writer && self.write_seq < self.app_end && self.fill_sndbuf()) {
                break;
            }
        }
        if sent_new && self.cfg.tlp {
            // Linux `tcp_write_xmit`: new data (re)arms the probe timer.
            self.schedule_tlp(now, false);
        }
        self.note_cwnd_use(self.stats.segments_sent + self.stats.policed > sent_before);
        self.arm_persist(now);
    }

    /// What the windows, the pacer and the conditioner let out now; whether new data left.
    /// Linux's sender sends new data as GSO packets (`tcp_write_xmit`: at most
    /// `tcp_tso_autosize` segments and half the cwnd each), and `__tcp_transmit_skb` marks
    /// PSH on every packet of more than one segment (its last segment carries it).
    #[inline(always)]
    fn send_loop(&mut self, now: Instant, io: &mut ConnIo<'_>) -> bool {
        let mut sent_new = false;
        let paced = self.paced();
        let burst = if paced { self.burst_segs() } else { 0 };
        let gso_max = if self.linux_writer {
            self.gso_segs(paced, burst)
        } else {
            u64::MAX
        };
        // The GSO packet being built: its segments so far and where its last one is in
        // `io.out`.
        let mut gso = (0u64, 0usize);
        // How far new data may go (`new_data_limit`), worked out once: sending new data
        // moves the flight and the next segment by the same amount, so the limit holds
        // until a retransmission adds to the pipe (or BBR resets its window on a send).
        let mut limit = None;
        loop {
            if paced {
                if let Some(t) = self.pacer.check(now, burst) {
                    self.wake_at = Deadline::from(earliest(self.wake_at.get(), Some(t)));
                    break;
                }
            }
            if let Some(i) = self.sb.next_retransmit_mut() {
                let s = *self.sb.get(i);
                let ok = match (self.ca_state, self.sack_ok) {
                    (CaState::Recovery, false) => true,
                    _ => self.inflight() + s.len() <= self.cc.cwnd,
                };
                if !ok {
                    break;
                }
                if gso.0 > 0 {
                    self.end_gso(&mut gso, io);
                }
                if !self.retransmit(now, i, io) {
                    break;
                }
                limit = None;
                continue;
            }
            let lim = match limit {
                Some(l) => l,
                None => self.new_data_limit(),
            };
            limit = (!self.bbr_on()).then_some(lim);
            // Room for a short segment at the end of the GSO packet being built: at
            // least one segment already in it, fewer than it may carry (see
            // `next_segment_cut`).
            let cut = (self.linux_writer && gso.0 >= 1 && gso.0 < gso_max)
                .then(|| (gso_max - gso.0) * self.mss as u64);
            let Some((start, len, fin)) = self.next_segment_cut(lim, cut) else {
                if let Some(i) = self.last_resort_retransmit() {
                    if gso.0 > 0 {
                        self.end_gso(&mut gso, io);
                    }
                    if !self.retransmit(now, i, io) {
                        break;
                    }
                    limit = None;
                    continue;
                }
                break;
            };
            let out_before = io.out.len();
            if !self.transmit_new(now, start, len, fin, io) {
                break;
            }
            sent_new = true;
            if self.linux_writer {
                if len > 0 && io.out.len() > out_before {
                    if gso.0 > 0 {
                        // The segment before is no longer the packet's last, and GSO keeps
                        // PSH on the last alone (`tcp_gso_segment`; `tso_fragment` moves a
                        // buffer's PSH to its second part): a push mark inside a packet
                        // goes to the packet's end.
                        if let Some(t) = io.out.get_mut(gso.1).and_then(|h| h.tcp_repr_mut()) {
                            t.flags = TcpFlags(t.flags.0 & !TcpFlags::PSH.0);
                        }
                    }
                    gso = (gso.0 + 1, out_before);
                }
                if len == 0 || gso.0 >= gso_max {
                    self.end_gso(&mut gso, io);
                }
            }
        }
        if gso.0 > 0 {
            self.end_gso(&mut gso, io);
        }
        self.pacer.end_burst();
        sent_new
    }

    /// The GSO packet being built is complete: PSH on its last segment if it has more than
    /// one (`__tcp_transmit_skb`); it takes a buffer of its own in the send queue.
    #[cold]
    fn end_gso(&mut self, gso: &mut (u64, usize), io: &mut ConnIo<'_>) {
        if gso.0 == 0 {
            return;
        }
        if gso.0 > 1 {
            if let Some(t) = io.out.get_mut(gso.1).and_then(|h| h.tcp_repr_mut()) {
                t.flags = t.flags | TcpFlags::PSH;
            }
        }
        if self.sk_sndbuf != u64::MAX {
            self.tx_skbs.push_back(self.snd_max);
        }
        *gso = (0, 0);
    }

    /// Segments one GSO packet may carry (Linux `tcp_write_xmit`): `tcp_tso_autosize` at
    /// the pacing rate — the pacer's burst, or, unpaced, at the rate Linux computes
    /// anyway (`tcp_update_pacing_rate`) — and at most half the cwnd (`tcp_cwnd_test`).
    fn gso_segs(&self, paced: bool, burst: u64) -> u64 {
        let mss = self.mss as u64;
        let cwnd = self.cc.cwnd / mss;
        let half = (cwnd / 2).max(1);
        let auto = if paced {
            burst
        } else {
            let rate = super::pacing::cwnd_rate(
                mss,
                cwnd,
                self.flight().div_ceil(mss),
                self.cc.ssthresh / mss,
                self.rtt.srtt(),
            );
            super::pacing::tso_autosize(rate, mss, self.rtt.min_rtt(), MIN_TSO_SEGS)
        };
        auto.min(half)
    }

    /// Nothing is outstanding or waiting to be sent (no data, no FIN), the sender does
    /// not pace, and the congestion window is open: [`Connection::try_send`] can only
    /// find nothing to send, without the congestion window holding it back.
    fn nothing_to_send(&self) -> bool {
        if self.paced || self.snd_una != self.snd_max || !self.sb.is_empty() {
            return false;
        }
        if self.linux_writer && self.write_seq < self.app_end {
            // The writer has more to copy (it waits for the connection or for space).
            return false;
        }
        let data_end = self.data_end();
        let fin_pending = self.fin_queued && self.fin_off.is_none() && data_end == self.app_end;
        data_end <= self.snd_max
            && !fin_pending
            && self.ca_state != CaState::Recovery
            && self.inflight() < self.cc.cwnd
    }

    /// RFC 6675 NextSeg rules (3) and (4) (`rescue_retransmit`), in SACK recovery once no
    /// lost segment waits and no new data can be sent but the pipe leaves room: a segment
    /// below the highest SACK not yet SACKed, else, once per recovery, the highest segment
    /// not SACKed. Returns the scoreboard index to retransmit.
    //= https://www.rfc-editor.org/rfc/rfc6675#section-4
    //# If the conditions for rules (1), (2), and (3) fail, but there exists
    //# outstanding unSACKed data, we provide the opportunity for a single
    //# "rescue" retransmission per entry into loss recovery.
    fn last_resort_retransmit(&mut self) -> Option<usize> {
        if !(self.cfg.rescue_retransmit && self.sack_ok && self.ca_state == CaState::Recovery) {
            return None;
        }
        let room = self.cc.cwnd.saturating_sub(self.inflight());
        let fits = |s: &SentSeg| s.len() <= room && s.flags() & scoreboard::SYN == 0;
        if let Some(i) = self.sb.next_below_high_sacked() {
            return fits(self.sb.get(i)).then_some(i);
        }
        //# If HighACK is greater than RescueRxt (or RescueRxt is undefined), then
        //# one segment of upto SMSS octets that MUST include the highest
        //# outstanding unSACKed sequence number SHOULD be returned, and RescueRxt
        //# set to RecoveryPoint.
        if self.rescue_rxt.is_some_and(|r| self.snd_una <= r) {
            return None;
        }
        let i = self.sb.last_unsacked()?;
        if !fits(self.sb.get(i)) {
            return None;
        }
        self.rescue_rxt = Some(self.recover);
        Some(i)
    }

    /// Restart after idle (`idle_restart`): nothing is outstanding, data waits, and no data
    /// was sent for longer than the RTO.
    fn maybe_restart_after_idle(&mut self, now: Instant) {
        let linux = match self.cfg.idle_restart {
            IdleRestart::Off => return,
            IdleRestart::Rfc5681 => false,
            IdleRestart::Linux => true,
        };
        if self.snd_una < self.snd_max || self.data_end() <= self.snd_max {
            return;
        }
        let Some(last) = self.last_data_sent else {
            return;
        };
        let (idle, rto) = (now - last, self.rtt.rto());
        if idle <= rto {
            return;
        }
        let iw = self.cfg.initial_window as u64 * self.mss as u64;
        self.cc.restart_after_idle(linux, idle, rto, iw);
        // Once per idle period, even if nothing can be sent yet.
        self.last_data_sent = Some(now);
    }

    /// How far new data may go now: the end of the data (within the send buffer), of the
    /// peer's window, and of the room the congestion window leaves.
    fn new_data_limit(&self) -> u64 {
        let flight = match (self.ca_state, self.sack_ok) {
            (CaState::Recovery, false) => self.flight(),
            _ => self.inflight(),
        };
        let mut cwnd = self.cc.cwnd;
        if self.cfg.limited_transmit
            && !self.sack_ok
            && self.ca_state == CaState::Disorder
            && self.dupacks <= 2
        {
            //= https://www.rfc-editor.org/rfc/rfc3042#section-2
            //# the sender can only send two segments beyond the congestion window
            // With SACK the pipe already leaves out each SACKed segment, which is what lets
            // one new segment out per duplicate ACK; adding the duplicate ACKs again
            // would send two per duplicate ACK.
            cwnd += self.dupacks as u64 * self.mss as u64;
        }
        let cwnd_end = self.snd_max + cwnd.saturating_sub(flight);
        self.data_end()
            .min(self.snd_una + self.snd_wnd)
            .min(cwnd_end)
    }

    /// The next new segment allowed by `limit` ([`Connection::new_data_limit`]), Nagle and
    /// SWS avoidance.
    fn next_new_segment(&self, limit: u64) -> Option<(u64, u64, bool)> {
        self.next_segment_cut(limit, None)
    }

    /// [`Connection::next_new_segment`] for the next segment of a GSO packet being built
    /// (`cut`: Some(bytes it may still carry)). Linux cuts a GSO packet whose first segment
    /// fits the peer's window at the window's edge, not at a segment boundary
    /// (`tcp_mss_split_point`): its last segment is short and fills the window. Nagle
    /// (Minshall's rule) holds that short segment back only when the packet is the last
    /// one queued (`tcp_nagle_check` with `TCP_NAGLE_PUSH` for the others); sender SWS
    /// avoidance plays no part.
    fn next_segment_cut(&self, limit: u64, cut: Option<u64>) -> Option<(u64, u64, bool)> {
        let mss = self.mss as u64;
        if self.snd_max + mss <= limit {
            // A full segment fits every window (the common case: no Nagle, no SWS test).
            let fin = self.fin_queued
                && self.snd_max + mss == self.app_end
                && self.data_end() == self.app_end;
            return Some((self.snd_max, mss, fin));
        }
        let data_end = self.data_end();
        let fin_pending = self.fin_queued && self.fin_off.is_none() && data_end == self.app_end;
        if self.snd_max >= data_end {
            return fin_pending.then_some((self.snd_max, 0, true));
        }
        let avail = data_end - self.snd_max;
        let len = mss.min(limit.saturating_sub(self.snd_max));
        if len == 0 {
            return None;
        }
        if len < mss {
            //= https://www.rfc-editor.org/rfc/rfc9293#section-3.8.6.2.1
            //# Send data [...] if a maximum-sized segment can be sent [...] or if the data
            //# is pushed and all queued data can be sent now, or if at least a fraction
            //# Fs of the maximum window can be sent now
            let all_queued = len == avail;
            let fin = self.fin_queued && self.snd_max + len == self.app_end;
            let nagle_ok = !self.cfg.nagle
                || self.snd_max == self.snd_una
                || match self.cfg.nagle_rule {
                    NagleRule::Rfc896 => false,
                    // Linux `tcp_nagle_check`: hold it only while an earlier short segment
                    // is unacknowledged (`tcp_minshall_check`); `tcp_nagle_test` never
                    // holds the segment carrying the FIN.
                    NagleRule::Minshall => fin || self.snd_sml <= self.snd_una,
                };
            let fs = self.max_snd_wnd > 0 && len >= self.max_snd_wnd / 2;
            // The packet is cut at the peer's window with data queued behind its edge;
            // the packet is the last queued when what is unsent ends within its reach.
            let at_edge = cut.is_some_and(|room| {
                limit == self.snd_una + self.snd_wnd && !all_queued && (avail > room || nagle_ok)
            });
            if !((all_queued && nagle_ok) || fs || at_edge) {
                return None;
            }
        }
        let fin = self.fin_queued && self.snd_max + len == self.app_end && data_end == self.app_end;
        Some((self.snd_max, len, fin))
    }

    fn arm_persist(&mut self, now: Instant) {
        if self.window_closed() {
            if self.persist_at.is_none() {
                self.persist_at = Deadline::at(now + self.persist_interval());
            }
        } else {
            // The window opened (or data is in flight): the backoff starts over.
            self.persist_at = Deadline::NONE;
            self.persist_backoff = 0;
        }
    }

    /// Ask the conditioner; returns Some(dscp override) to go, None to stop.
    /// `tcp` and `payload`: the segment (its length is worked out only for a conditioner).
    fn admit(
        &mut self,
        now: Instant,
        tcp: &TcpRepr,
        payload: u64,
        io: &mut ConnIo<'_>,
    ) -> Option<Result<Option<u8>, ()>> {
        match io.conditioner.as_deref_mut() {
            None => Some(Ok(None)),
            Some(c) => match c.admit(now, self.id, ip_len_for(&self.local.0, tcp, payload)) {
                Admit::Send => Some(Ok(None)),
                Admit::Mark(d) => Some(Ok(Some(d))),
                Admit::Drop => Some(Err(())),
                Admit::Wait(t) => {
                    // Until the end of time: until the conditioner wakes the host's
                    // connections (no deadline of the connection's own).
                    let t = (t != Instant::MAX).then_some(t);
                    self.wake_at = Deadline::from(earliest(self.wake_at.get(), t));
                    None
                }
            },
        }
    }

    /// Whether new data ending at `end` carries PSH: the end of what the application
    /// wrote; with Linux's sender also where `tcp_sendmsg` marked it as the writer copied
    /// (see [`Connection::fill_sndbuf`]).
    fn push_due(&mut self, end: u64) -> bool {
        let mut push = end >= self.app_end;
        if self.linux_writer {
            while self.push_marks.front().is_some_and(|&m| m <= end) {
                self.push_marks.pop_front();
                push = true;
            }
        }
        push
    }

    /// Linux `tcp_sendmsg_locked` copying what the application wrote into the send buffer,
    /// one buffer (`sk_buff`) of `size_goal` bytes at a time: a new one only while the
    /// queue's memory is below `sk_sndbuf` (else the writer waits), the last one filled
    /// up even beyond it. PSH is marked on a full buffer that takes what was copied since
    /// the last mark past half the largest window the peer offered (`forced_push`), and on
    /// the last one copied (`tcp_push`: the write ends, or the writer waits for space); a
    /// write that goes on filling an unsent buffer takes its mark away. Nothing is copied
    /// before the peer offered a window. A waiting writer wakes once the buffer has half as
    /// much room as the queue takes (`sk_stream_write_space`: a third free), after the
    /// buffer grew if the sender is not cwnd-limited (`tcp_new_space`); it wakes as a new
    /// `send()` (an event-driven writer), so BBR checks whether it is app-limited. With a
    /// write size ([`Connection::set_write_size`]) a call ends once it copied that much,
    /// and the next comes when the socket is writable (the same third free). Returns
    /// whether anything was copied.
    fn fill_sndbuf(&mut self) -> bool {
        if self.max_snd_wnd == 0 || self.write_seq >= self.app_end {
            return false;
        }
        if self.sk_sndbuf == 0 {
            // `tcp_init_buffer_space`.
            self.sk_sndbuf = match self.cfg.sndbuf {
                Some(b) => b,
                None if self.cfg.snd_autotune => {
                    self.sk_sndbuf = self.cfg.wmem[1];
                    self.sndbuf_expand();
                    self.sk_sndbuf
                }
                None => u64::MAX,
            };
        }
        while self.tx_skbs.front().is_some_and(|&e| e <= self.snd_una) {
            self.tx_skbs.pop_front();
        }
        if self.writer_waiting {
            if self.cfg.snd_autotune && self.cfg.sndbuf.is_none() && self.inflight() < self.cc.cwnd
            {
                self.sndbuf_expand();
            }
            if !self.writable() {
                return false;
            }
            self.writer_waiting = false;
            self.check_app_limited();
            self.new_call();
        } else if self.write_seq >= self.call_end {
            // The last `send()` copied all it was given: `select()` finds the socket
            // writable, and the next call comes, or the writer waits for it.
            if !self.writable() {
                self.writer_waiting = true;
                return false;
            }
            self.check_app_limited();
            self.new_call();
        }
        let from = self.write_seq;
        let end = self.app_end.min(self.call_end);
        if self.sk_sndbuf == u64::MAX {
            // An unlimited buffer takes the whole call at once.
            self.write_seq = end;
        }
        let goal = self.size_goal();
        while self.write_seq < end {
            let unsent_tail = self.write_seq - self.tail_skb.max(self.snd_max).min(self.write_seq);
            let room = if unsent_tail > 0 && unsent_tail < goal {
                goal - unsent_tail
            } else {
                if self.sndbuf_queued() >= self.sk_sndbuf {
                    self.writer_waiting = true;
                    break;
                }
                self.tail_skb = self.write_seq;
                goal
            };
            if self.write_seq == from
                && unsent_tail > 0
                && self.push_marks.back() == Some(&self.write_seq)
            {
                // `if (!copied) tcp_flags &= ~TCPHDR_PSH`: the buffer goes on.
                self.push_marks.pop_back();
            }
            self.write_seq += room.min(end - self.write_seq);
            let full = self.write_seq - self.tail_skb.max(self.snd_max) >= goal;
            if full && self.write_seq > self.pushed_seq + self.max_snd_wnd / 2 {
                self.push_marks.push_back(self.write_seq);
                self.pushed_seq = self.write_seq;
            }
        }
        if self.write_seq == from {
            return false;
        }
        if self.push_marks.back() != Some(&self.write_seq) {
            self.push_marks.push_back(self.write_seq);
        }
        self.pushed_seq = self.write_seq;
        true
    }

    /// Linux `sk_stream_is_writeable`: the buffer has at least half as much room as the
    /// queue takes (`sk_stream_wspace >= sk_stream_min_wspace`: a third of it free).
    fn writable(&self) -> bool {
        let queued = self.sndbuf_queued();
        self.sk_sndbuf.saturating_sub(queued) >= queued / 2
    }

    /// Linux `tcp_xmit_size_goal`: half the largest window offered, at most a GSO packet,
    /// in whole segments.
    fn size_goal(&self) -> u64 {
        let mss = self.mss as u64;
        let half = if self.max_snd_wnd >= 512 {
            self.max_snd_wnd / 2
        } else {
            self.max_snd_wnd
        };
        (half.min(GSO_GOAL_MAX) / mss * mss).max(mss)
    }

    /// The send queue's memory (`sk_wmem_queued`): its bytes, and an `sk_buff` for each
    /// packet sent and not yet acknowledged and for each buffer of unsent data.
    fn sndbuf_queued(&self) -> u64 {
        let bytes = self.write_seq.saturating_sub(self.snd_una.max(1));
        let unsent = self.write_seq.saturating_sub(self.snd_max.max(1));
        let skbs = self.tx_skbs.len() as u64 + unsent.div_ceil(self.size_goal());
        bytes + SKB_OVERHEAD * skbs
    }

    /// Linux `tcp_sndbuf_expand`: room for twice (BBR: three times) max(10, cwnd,
    /// reordering + 1) packets, each a power-of-two buffer for the MSS and its headers plus
    /// its `sk_buff` (2304 bytes for a 1460-byte MSS), at most `wmem[2]`; never shrinks.
    fn sndbuf_expand(&mut self) {
        let mss_clamp = self.mss as u64 + if self.ts_ok { 12 } else { 0 };
        let per_mss = (mss_clamp + MAX_TCP_HEADER + SKB_SHINFO).next_power_of_two() + SKB_STRUCT;
        let segs = (self.cc.cwnd / self.mss as u64)
            .max(10)
            .max(self.cfg.dupthresh as u64 + 1);
        let factor = if self.bbr.is_some() { 3 } else { 2 };
        let mem = (factor * segs * per_mss).min(self.cfg.wmem[2]);
        self.sk_sndbuf = self.sk_sndbuf.max(mem);
    }

    fn transmit_new(
        &mut self,
        now: Instant,
        start: u64,
        len: u64,
        fin: bool,
        io: &mut ConnIo<'_>,
    ) -> bool {
        let mut tcp = self.base_header(now, start);
        if fin {
            tcp.flags = tcp.flags | TcpFlags::FIN;
        }
        if len > 0 && self.push_due(start + len) {
            tcp.flags = tcp.flags | TcpFlags::PSH;
        }
        if self.cwr_pending && len > 0 {
            tcp.flags = tcp.flags | TcpFlags::CWR;
        }
        let verdict = match self.admit(now, &tcp, len, io) {
            None => return false,
            Some(v) => v,
        };
        if tcp.flags.contains(TcpFlags::CWR) {
            self.cwr_pending = false;
        }
        let end = start + len + fin as u64;
        let (idle, nothing_out) = (self.inflight() == 0, self.snd_max == self.snd_una);
        self.sb.push(SentSeg::new(
            start,
            end,
            now,
            if fin { scoreboard::FIN } else { 0 },
        ));
        self.snd_max = end;
        if self.bbr_on() {
            let order = self.sb.get(self.sb.len() - 1).order();
            self.bbr_on_sent(now, order, idle, nothing_out);
        }
        if fin {
            self.fin_off = Some(start + len);
            self.state = match self.state {
                State::Established | State::SynRcvd => State::FinWait1,
                State::CloseWait => State::LastAck,
                s => s,
            };
        }
        if self.rto_at.is_none() {
            self.rto_at = Deadline::at(now + self.rtt.rto());
        }
        self.stats.bytes_sent += len;
        if len > 0 {
            self.last_data_sent = Some(now);
            if len < self.mss as u64 {
                self.snd_sml = start + len;
            }
        }
        let ecn = if self.ecn_ok && len > 0 {
            Ecn::Ect0
        } else {
            Ecn::NotEct
        };
        self.count_prr_out();
        match verdict {
            Ok(dscp) => {
                self.push_out_marked(now, tcp, len as u32, ecn, dscp, io);
                self.note_sent(now, len);
            }
            Err(()) => {
                self.stats.policed += 1;
                self.note_sent(now, len);
            }
        }
        true
    }

    fn retransmit_head(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        if let Some(i) = self.sb.next_retransmit() {
            self.retransmit(now, i, io);
        }
    }

    fn retransmit(&mut self, now: Instant, i: usize, io: &mut ConnIo<'_>) -> bool {
        let s = *self.sb.get(i);
        if s.flags() & scoreboard::SYN != 0 {
            self.sb.retransmitted(i, now);
            self.send_syn(now, io);
            return true;
        }
        let fin = s.flags() & scoreboard::FIN != 0;
        let len = s.len() - fin as u64;
        let mut tcp = self.base_header(now, s.start);
        if fin {
            tcp.flags = tcp.flags | TcpFlags::FIN;
        }
        let verdict = match self.admit(now, &tcp, len, io) {
            None => return false,
            Some(v) => v,
        };
        self.sb.retransmitted(i, now);
        if let Some(b) = self.bbr.as_mut() {
            b.1.forget(s.order());
            let order = self.sb.get(i).order();
            self.bbr_on_sent(now, order, false, false);
        }
        self.count_prr_out();
        self.stats.retransmits += 1;
        if let Some(u) = self.dsack_undo.as_mut() {
            u.retrans = u.retrans.max(0) + 1;
        }
        self.stats.bytes_retransmitted += len;
        self.stats.bytes_sent += len;
        if len > 0 {
            self.last_data_sent = Some(now);
        }
        if self.rto_at.is_none() {
            self.rto_at = Deadline::at(now + self.rtt.rto());
        }
        if let Ok(dscp) = verdict {
            // RFC 3168 §6.1.5: retransmissions are not ECN-capable.
            self.push_out_marked(now, tcp, len as u32, Ecn::NotEct, dscp, io);
        } else {
            self.stats.policed += 1;
        }
        self.note_sent(now, len);
        true
    }

    /// A segment left during a recovery: PRR's `prr_out`.
    fn count_prr_out(&mut self) {
        if self.ca_state == CaState::Recovery {
            if let Some(p) = self.prr.as_mut() {
                p.out += 1;
            }
        }
    }

    fn note_sent(&mut self, now: Instant, len: u64) {
        if len > 0 && self.paced() {
            self.pacer.on_sent(now, len);
        }
    }

    /// Whether this sender paces: `pacing` (Linux with the `fq` qdisc), or Linux's
    /// internal pacing, which `max_pacing_rate` (`SO_MAX_PACING_RATE`) turns on.
    pub fn paced(&self) -> bool {
        self.paced
    }

    /// The pacing rate, bytes per second (`None`: not paced, or no rate yet).
    pub fn pacing_rate(&self) -> Option<u64> {
        self.paced().then(|| self.pacer.rate()).flatten()
    }

    /// Segments one paced burst may carry (Linux `tcp_tso_autosize`).
    fn burst_segs(&self) -> u64 {
        let min_segs = self
            .bbr
            .as_ref()
            .map_or(MIN_TSO_SEGS, |b| b.0.min_tso_segs());
        self.pacer
            .burst_segs(self.mss as u64, self.rtt.min_rtt(), min_segs)
    }

    /// Linux `tcp_update_pacing_rate`, after each ACK (`tcp_cong_control`).
    fn update_pacing_rate(&mut self) {
        if !self.paced() || self.cfg.cc == CcAlgo::Bbr {
            return;
        }
        let mss = self.mss as u64;
        let cwnd = self.cc.cwnd / mss;
        let out = self.flight().div_ceil(mss);
        let ssthresh = self.cc.ssthresh / mss;
        self.pacer
            .update_from_cwnd(mss, cwnd, out, ssthresh, self.rtt.srtt());
    }

    fn send_pure_ack(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        let tcp = self.base_header(now, self.snd_max);
        self.stats.acks_sent += 1;
        self.push_out(now, tcp, 0, Ecn::NotEct, io);
    }

    /// The advertised window field for the current state.
    fn window_field(&mut self, now: Instant, io: &mut ConnIo<'_>) -> u16 {
        let rcv_nxt = self.rcv.rcv_nxt();
        self.select_window_ends_quickack();
        let free = self.free_window();
        let mut wnd = free;
        if let Some(p) = io.rwnd.as_deref_mut() {
            wnd = wnd.min(p.window(now, self.id, free, self.mss).max(self.mss as u64));
        }
        // The right edge never moves left (RFC 9293 §3.8.6.2.2 discourages shrinking).
        let edge = (rcv_nxt + wnd).max(self.rcv_edge);
        let wnd = edge - rcv_nxt;
        let shift = self.rcv_wscale as u32;
        // Round up so the advertised edge does not fall below `edge` when scaled.
        let field = wnd.div_ceil(1u64 << shift).min(65_535);
        self.rcv_edge = rcv_nxt + (field << shift);
        field as u16
    }

    fn base_header(&mut self, now: Instant, seq_off: u64) -> TcpRepr {
        let mut flags = TcpFlags::ACK;
        if self.ece_pending {
            flags = flags | TcpFlags::ECE;
        }
        let mut opts = TcpOptions::default();
        if self.ts_ok {
            opts.timestamp = Some(Timestamp {
                val: ts_clock(now),
                ecr: self.ts_recent,
            });
        }
        let dsack = self.dsack_block.take().filter(|_| self.sack_ok);
        if let Some((l, r)) = dsack {
            //= https://www.rfc-editor.org/rfc/rfc2883#section-4
            //# If the data packet is a duplicate, then the first block
            //# of the SACK option should be a D-SACK block
            opts.sack.push(SackBlock {
                left: seq_of(self.irs, l),
                right: seq_of(self.irs, r),
            });
        }
        if self.sack_ok && self.rcv.has_gap() {
            let max = if self.ts_ok { 3 } else { 4 } - dsack.is_some() as usize;
            for (l, mut r) in self.rcv.sack_blocks(max) {
                // A FIN held beyond the hole counts in its block, as in Linux's
                // out-of-order queue (the sender's segment ends after the FIN).
                if self.peer_fin_at == Some(r) {
                    r += 1;
                }
                opts.sack.push(SackBlock {
                    left: seq_of(self.irs, l),
                    right: seq_of(self.irs, r),
                });
            }
        }
        TcpRepr {
            src_port: self.local.1,
            dst_port: self.remote.1,
            seq: seq_of(self.iss, seq_off),
            ack: seq_of(self.irs, self.rcv.rcv_nxt()),
            flags,
            window: 0,
            urgent: 0,
            opts,
        }
    }

    fn push_out(
        &mut self,
        now: Instant,
        tcp: TcpRepr,
        payload: u32,
        ecn: Ecn,
        io: &mut ConnIo<'_>,
    ) {
        self.push_out_marked(now, tcp, payload, ecn, None, io)
    }

    fn push_out_marked(
        &mut self,
        now: Instant,
        mut tcp: TcpRepr,
        payload: u32,
        ecn: Ecn,
        dscp: Option<u8>,
        io: &mut ConnIo<'_>,
    ) {
        if !tcp.flags.contains(TcpFlags::SYN) {
            // The window is computed last, when the segment is final.
            tcp.window = self.window_field(now, io);
            if self.cfg.delack_mode == DelackMode::Linux && self.quickack_left > 0 {
                // Linux `tcp_dec_quickack_mode`: one quick ACK used if it acknowledges
                // new data; leaving quick-ACK mode deflates ato.
                if self.ack_pending > 0 {
                    self.quickack_left -= 1;
                    if self.quickack_left == 0 {
                        self.ato = self.cfg.delack_timeout;
                    }
                }
            }
            if self.cfg.delack_mode == DelackMode::Linux {
                // `inet_csk_clear_xmit_timer(ICSK_TIME_DACK)` clears the push bits;
                // `tcp_event_data_sent`: data sent within ato of data received is a reply
                // (ping-pong mode, Linux's threshold of 1).
                self.ack_pushed = 0;
                if payload > 0 && !self.ato.is_zero() && now - self.lrcvtime < self.ato {
                    self.pingpong = true;
                }
            }
            // Any segment carrying ACK acknowledges everything received so far.
            self.ack_pending = 0;
            self.ack_now = false;
            self.delack_at = Deadline::NONE;
            self.last_ack_sent = self.rcv.rcv_nxt();
        }
        self.ip_ident = self.ip_ident.wrapping_add(1);
        let mut ip = IpRepr::new(self.local.0, self.remote.0);
        ip.ident = self.ip_ident;
        ip.ecn = ecn;
        if let Some(d) = dscp {
            ip.dscp = d;
        }
        if let Some(p) = io.rwnd.as_deref_mut() {
            p.on_send(now, self.id, payload);
        }
        self.stats.segments_sent += 1;
        io.out.push(Headers::tcp(ip, tcp, payload));
    }

    fn on_fin_acked(&mut self, now: Instant, io: &mut ConnIo<'_>) {
        match self.state {
            State::FinWait1 => self.state = State::FinWait2,
            State::Closing => {
                self.enter_time_wait(now);
                self.state = State::TimeWait;
            }
            State::LastAck => self.enter_closed(now, io, false),
            _ => {}
        }
    }

    fn enter_time_wait(&mut self, now: Instant) {
        // Linger long enough to re-acknowledge a retransmitted FIN (not 2 MSL: the
        // simulator never reuses a port pair).
        let linger = self.rtt.rto().max(Duration::from_secs(1)).saturating_mul(2);
        self.linger_at = Deadline::at(now + linger);
        self.rto_at = Deadline::NONE;
        self.reo_at = Deadline::NONE;
        self.tlp_at = Deadline::NONE;
        self.persist_at = Deadline::NONE;
        self.wake_at = Deadline::NONE;
    }

    fn enter_closed(&mut self, _now: Instant, io: &mut ConnIo<'_>, reset: bool) {
        self.state = State::Closed;
        self.rto_at = Deadline::NONE;
        self.reo_at = Deadline::NONE;
        self.tlp_at = Deadline::NONE;
        self.delack_at = Deadline::NONE;
        self.persist_at = Deadline::NONE;
        self.wake_at = Deadline::NONE;
        self.linger_at = Deadline::NONE;
        io.events.push(if reset {
            ConnEvent::Reset
        } else {
            ConnEvent::Closed
        });
    }
}

/// Data bytes (excluding SYN and FIN) between two offsets.
fn data_bytes_between(from: u64, to: u64, fin_off: Option<u64>) -> u64 {
    let lo = from.max(1);
    let mut hi = to;
    if let Some(f) = fin_off {
        hi = hi.min(f);
    }
    hi.saturating_sub(lo)
}

/// The timestamp clock: milliseconds (RFC 7323 recommends 1 ms to 1 s per tick).
fn ts_clock(now: Instant) -> u32 {
    ((now.as_nanos() / 1_000_000) as u32).wrapping_add(1)
}

fn ip_len_for(src: &IpAddr, tcp: &TcpRepr, payload: u64) -> u32 {
    let ip = if src.is_ipv4() { 20 } else { 40 };
    (ip + tcp.header_len() as u64 + payload) as u32
}

/// Header prediction ([`Connection::predicted`]) on or off: always on, except that a test
/// may switch it off on its thread to compare the fast path with the general one, and
/// count the segments it took.
pub(crate) mod prediction {
    #[cfg(test)]
    thread_local! {
        pub(crate) static OFF: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
        pub(crate) static TAKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    #[inline(always)]
    pub(super) fn on() -> bool {
        #[cfg(test)]
        {
            !OFF.with(|c| c.get())
        }
        #[cfg(not(test))]
        {
            true
        }
    }

    #[inline(always)]
    pub(super) fn count() {
        #[cfg(test)]
        TAKEN.with(|c| c.set(c.get() + 1));
    }
}

#[cfg(test)]
mod layout {
    use super::Connection;
    use std::collections::BTreeSet;
    use std::mem::{offset_of, size_of};

    fn size_of_field<T>(_: impl Fn(&Connection) -> &T) -> usize {
        size_of::<T>()
    }

    /// Each field's byte range in a connection.
    macro_rules! spans {
        ($($($f:ident).+),* $(,)?) => {
            vec![$((
                stringify!($($f).+),
                offset_of!(Connection, $($f).+),
                size_of_field(|c: &Connection| &c.$($f).+),
            )),*]
        };
    }

    /// What every segment reads or writes of a connection, at either end.
    fn common() -> Vec<(&'static str, usize, usize)> {
        spans![
            stats.policed,
            stats.segments_sent,
            stats.bytes_sent,
            stats.acks_sent,
            stats.segments_received,
            stats.bytes_delivered,
            stats.bytes_acked,
            cfg,
            snd_una,
            snd_max,
            snd_wnd,
            snd_wl1,
            snd_wl2,
            max_snd_wnd,
            app_end,
            write_seq,
            rcv,
            rcv_edge,
            last_ack_sent,
            unread,
            fin_off,
            peer_fin_at,
            dsack_block,
            rto_at,
            reo_at,
            tlp_at,
            delack_at,
            persist_at,
            wake_at,
            linger_at,
            id,
            mss,
            iss,
            irs,
            ack_pending,
            quickack_left,
            ts_recent,
            dupacks,
            persist_backoff,
            ip_ident,
            local,
            remote,
            state,
            ca_state,
            sack_ok,
            ts_ok,
            ecn_ok,
            paced,
            snd_wscale,
            rcv_wscale,
            fin_queued,
            linux_writer,
            writer_waiting,
            ack_now,
            reading,
            peer_fin,
            ack_pushed,
            pingpong,
            cwnd_limited,
            rto_unanswered,
            ece_pending,
            cwr_pending,
        ]
    }

    fn lines(spans: &[(&str, usize, usize)]) -> BTreeSet<usize> {
        spans
            .iter()
            .flat_map(|&(_, o, n)| o / 64..(o + n).div_ceil(64))
            .collect()
    }

    /// The fields a segment reads span few cache lines: the receiver's data path (with
    /// Linux's delayed-ACK engine and autotuning, and without: the `rfc` and `paper`
    /// profiles) and the sender's ACK path (with the congestion control's first 40 bytes:
    /// window, threshold, MSS, growth carry, kinds). The configuration is a pointer to one
    /// shared by many connections.
    #[test]
    fn a_segment_reads_few_cache_lines() {
        assert_eq!(std::mem::align_of::<Connection>(), 64);
        let plain_receiver = lines(&common());
        let mut receiver = common();
        receiver.extend(spans![ato, lrcvtime, rcv_mss, last_seg_size, autotune]);
        let mut sender = common();
        sender.extend(spans![
            max_flight,
            cwnd_usage_seq,
            recover,
            last_data_sent,
            rtt,
            prr,
            tlp_high_seq,
            pacer,
            sb,
        ]);
        sender.push(("cc", offset_of!(Connection, cc), 40));
        let (r, s) = (lines(&receiver), lines(&sender));
        assert_eq!(r.len(), 10, "receiver's lines {r:?}");
        assert_eq!(
            plain_receiver.len(),
            8,
            "plain receiver's lines {plain_receiver:?}"
        );
        assert_eq!(s.len(), 15, "sender's lines {s:?}");
        assert_eq!(std::mem::size_of::<Connection>(), 1_664);
    }
}
