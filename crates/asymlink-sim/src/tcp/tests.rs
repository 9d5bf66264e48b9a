//! Two endpoints over a scripted pipe (a quinn-style `Pair`): handshake, transfer, loss
//! recovery and timers on explicit time.

use super::*;
use asymlink_core::time::{Duration, Instant};
use asymlink_core::units::Rate;
use core::net::{IpAddr, Ipv4Addr};
use std::collections::VecDeque;
use std::sync::Arc;

struct Pipe {
    delay: Duration,
    rate: Rate,
    busy_until: Instant,
    q: VecDeque<(Instant, Headers)>,
    /// Arrival time of the last packet sent without extra delay.
    fifo_at: Instant,
}

impl Pipe {
    /// Send `h`; with `extra` delay it arrives that much later than it would, after
    /// packets sent behind it (reordering).
    fn send(&mut self, now: Instant, h: Headers, extra: Duration) {
        let start = now.max(self.busy_until);
        let done = start + self.rate.tx_time(h.ip_len() as u64);
        self.busy_until = done;
        let at = if extra.is_zero() {
            // A FIFO pipe: when the delay shrinks, a packet still arrives after the one
            // before.
            let at = self.fifo_at.max(done + self.delay);
            self.fifo_at = at;
            at
        } else {
            done + self.delay + extra
        };
        let pos = self.q.partition_point(|e| e.0 <= at);
        self.q.insert(pos, (at, h));
    }
}

/// Decides whether the n-th data segment sent by the client (0-based) is dropped.
type DropRule = Box<dyn FnMut(usize, &Headers) -> bool>;

/// Client (index 0) and server (index 1) joined by two pipes.
struct Pair {
    now: Instant,
    c: [Option<Connection>; 2],
    pipes: [Pipe; 2],
    events: [Vec<ConnEvent>; 2],
    /// Return true to drop the n-th data segment sent by the client (0-based).
    drop: DropRule,
    /// Return true to mark the n-th data segment CE (if it is ECN-capable).
    mark: Box<dyn FnMut(usize) -> bool>,
    /// Extra delay for the n-th data segment sent by the client (reordering).
    late: Box<dyn FnMut(usize) -> Duration>,
    data_sent: usize,
    dropped: usize,
    log: Vec<(Instant, usize, Headers)>,
    /// Segments as they arrive: (time, receiving end, segment).
    rx_log: Vec<(Instant, usize, Headers)>,
    server_cfg: Option<TcpConfig>,
    /// Timer calls (`on_timer`) per end.
    timer_calls: [usize; 2],
}

fn addr(i: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, i))
}

impl Pair {
    fn new(cfg: &TcpConfig, rate: Rate, delay: Duration) -> Pair {
        let pipe = || Pipe {
            delay,
            rate,
            busy_until: Instant::ZERO,
            q: VecDeque::new(),
            fifo_at: Instant::ZERO,
        };
        let mut p = Pair {
            now: Instant::ZERO,
            c: [None, None],
            pipes: [pipe(), pipe()],
            events: [Vec::new(), Vec::new()],
            drop: Box::new(|_, _| false),
            mark: Box::new(|_| false),
            late: Box::new(|_| Duration::ZERO),
            data_sent: 0,
            dropped: 0,
            log: Vec::new(),
            rx_log: Vec::new(),
            server_cfg: None,
            timer_calls: [0, 0],
        };
        let mut out = Vec::new();
        let mut ev = Vec::new();
        let mut io = ConnIo {
            out: &mut out,
            events: &mut ev,
            conditioner: None,
            rwnd: None,
        };
        p.c[0] = Some(Connection::connect(
            Instant::ZERO,
            0,
            &Arc::new(cfg.clone()),
            (addr(1), 40000),
            (addr(2), 80),
            1_000,
            &mut io,
        ));
        p.deliver_out(0, out);
        p.server_cfg = Some(cfg.clone());
        p
    }

    fn deliver_out(&mut self, from: usize, out: Vec<Headers>) {
        for mut h in out {
            self.log.push((self.now, from, h));
            let mut extra = Duration::ZERO;
            if from == 0 && h.payload_len > 0 {
                let n = self.data_sent;
                self.data_sent += 1;
                if (self.drop)(n, &h) {
                    self.dropped += 1;
                    continue;
                }
                if h.ip.ecn.is_ect() && (self.mark)(n) {
                    h.ip.ecn = asymlink_core::wire::Ecn::Ce;
                }
                extra = (self.late)(n);
            }
            self.pipes[from].send(self.now, h, extra);
        }
    }

    fn with<F: FnOnce(&mut Connection, Instant, &mut ConnIo<'_>)>(&mut self, i: usize, f: F) {
        let mut out = Vec::new();
        let mut ev = Vec::new();
        {
            let mut io = ConnIo {
                out: &mut out,
                events: &mut ev,
                conditioner: None,
                rwnd: None,
            };
            let now = self.now;
            f(self.c[i].as_mut().expect("connection exists"), now, &mut io);
        }
        self.events[i].extend(ev);
        self.deliver_out(i, out);
    }

    /// Run until `until` or until nothing is pending.
    fn run(&mut self, until: Instant) {
        loop {
            let mut next: Option<(Instant, u8, usize)> = None;
            for d in 0..2 {
                if let Some((t, _)) = self.pipes[d].q.front() {
                    if next.is_none_or(|n| *t < n.0) {
                        next = Some((*t, 0, d));
                    }
                }
                if let Some(c) = &self.c[d] {
                    if let Some(t) = c.poll_at() {
                        if next.is_none_or(|n| t < n.0) {
                            next = Some((t, 1, d));
                        }
                    }
                }
            }
            let Some((t, kind, d)) = next else { break };
            if t > until {
                break;
            }
            self.now = t;
            if kind == 0 {
                let (_, h) = self.pipes[d].q.pop_front().unwrap();
                let to = 1 - d;
                self.rx_log.push((self.now, to, h));
                if self.c[to].is_none() {
                    let mut out = Vec::new();
                    let mut ev = Vec::new();
                    let mut io = ConnIo {
                        out: &mut out,
                        events: &mut ev,
                        conditioner: None,
                        rwnd: None,
                    };
                    let cfg = Arc::new(self.server_cfg.clone().unwrap());
                    self.c[to] = Connection::accept(
                        self.now,
                        1,
                        &cfg,
                        (addr(2), 80),
                        &h,
                        7_000_000,
                        &mut io,
                    );
                    self.events[to].extend(ev);
                    self.deliver_out(to, out);
                } else {
                    self.with(to, |c, now, io| c.on_segment(now, &h, io));
                }
            } else {
                self.timer_calls[d] += 1;
                self.with(d, |c, now, io| c.on_timer(now, io));
            }
        }
        self.now = self.now.max(until.min(self.now));
    }

    fn delivered(&self) -> u64 {
        self.c[1]
            .as_ref()
            .map(|c| c.stats().bytes_delivered)
            .unwrap_or(0)
    }
}

fn paper() -> TcpConfig {
    TcpConfig::profile("paper").unwrap()
}

#[test]
fn handshake_and_bulk_transfer() {
    for profile in ["paper", "rfc", "linux"] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(10));
        p.run(Instant::from_millis(100));
        assert_eq!(
            p.c[0].as_ref().unwrap().state(),
            State::Established,
            "{profile}"
        );
        assert_eq!(
            p.c[1].as_ref().unwrap().state(),
            State::Established,
            "{profile}"
        );
        let (sack, ts, _) = p.c[0].as_ref().unwrap().negotiated();
        assert_eq!(sack, cfg.sack);
        assert_eq!(ts, cfg.timestamps);
        p.with(0, |c, now, io| {
            c.write(now, 1_000_000, io);
            c.close(now, io);
        });
        p.run(Instant::from_secs(30));
        assert_eq!(p.delivered(), 1_000_000, "{profile}");
        assert!(p.events[1].contains(&ConnEvent::PeerClosed), "{profile}");
        assert_eq!(p.c[0].as_ref().unwrap().stats().retransmits, 0, "{profile}");
        // the server closes too; both end closed
        p.with(1, |c, now, io| c.close(now, io));
        p.run(Instant::from_secs(60));
        assert_eq!(p.c[1].as_ref().unwrap().state(), State::Closed, "{profile}");
        assert_eq!(p.c[0].as_ref().unwrap().state(), State::Closed, "{profile}");
    }
}

#[test]
fn fast_retransmit_recovers_a_single_loss_without_timeout() {
    for profile in ["paper", "rfc", "linux"] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = Box::new(|n, _| n == 30);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 500_000, io));
        p.run(Instant::from_secs(20));
        assert_eq!(p.dropped, 1);
        assert_eq!(p.delivered(), 500_000, "{profile}");
        let s = *p.c[0].as_ref().unwrap().stats();
        assert_eq!(s.fast_retransmits, 1, "{profile}: {s:?}");
        assert_eq!(s.timeouts, 0, "{profile}: {s:?}");
        assert_eq!(s.retransmits, 1, "{profile}: {s:?}");
    }
}

#[test]
fn newreno_recovers_multiple_losses_in_one_window() {
    let cfg = paper();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 40 || n == 43 || n == 47);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 300_000, io));
    p.run(Instant::from_secs(30));
    assert_eq!(p.delivered(), 300_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(s.fast_retransmits, 1, "one recovery episode: {s:?}");
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.retransmits, 3, "{s:?}");
}

#[test]
fn sack_recovers_multiple_losses_in_about_one_rtt() {
    let cfg = TcpConfig::profile("rfc").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 40 || n == 43 || n == 47);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 300_000, io));
    p.run(Instant::from_secs(30));
    assert_eq!(p.delivered(), 300_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(s.fast_retransmits, 1, "{s:?}");
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.retransmits, 3, "{s:?}");
}

#[test]
fn rto_fires_when_the_tail_is_lost() {
    let cfg = paper();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    // Lose the last segment of a 10-segment write: no dupacks can follow.
    p.drop = Box::new(|n, _| n == 9);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 10_000, io));
    p.run(Instant::from_secs(10));
    assert_eq!(p.delivered(), 10_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(s.timeouts, 1, "{s:?}");
    assert_eq!(s.fast_retransmits, 0, "{s:?}");
    // The retransmission happened one RTO (>= 1 s minimum) after the original.
    let sends: Vec<Instant> = p
        .log
        .iter()
        .filter(|(_, from, h)| *from == 0 && h.payload_len > 0)
        .map(|(t, _, _)| *t)
        .collect();
    let gap = *sends.last().unwrap() - sends[sends.len() - 2];
    assert!(gap >= Duration::from_secs(1), "{gap:?}");
}

#[test]
fn delayed_ack_every_second_segment_and_timer() {
    let mut cfg = TcpConfig::profile("rfc").unwrap();
    cfg.delayed_ack = 2;
    let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(5));
    p.run(Instant::from_millis(50));
    let acks_before = p.c[1].as_ref().unwrap().stats().acks_sent;
    // Three segments: one ACK after the second, one by the 200 ms timer for the third.
    p.with(0, |c, now, io| c.write(now, 3 * 1460, io));
    p.run(Instant::from_millis(120));
    assert_eq!(p.c[1].as_ref().unwrap().stats().acks_sent - acks_before, 1);
    p.run(Instant::from_millis(400));
    assert_eq!(p.c[1].as_ref().unwrap().stats().acks_sent - acks_before, 2);
}

#[test]
fn window_scaling_and_receive_window_limit() {
    let mut cfg = paper();
    cfg.rcvbuf = 20_000;
    cfg.initial_window = 100;
    let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(50));
    p.run(Instant::from_millis(200));
    assert_eq!(p.c[0].as_ref().unwrap().wscales(), (0, 0));
    p.with(0, |c, now, io| c.write(now, 200_000, io));
    p.run(Instant::from_millis(260));
    // Never more than the 20 kB window in flight.
    assert!(p.c[0].as_ref().unwrap().inflight() <= 20_000);
    let mut big = paper();
    big.rcvbuf = 1_000_000;
    let p = Pair::new(&big, Rate::mbps(100), Duration::from_millis(5));
    let _ = p;
}

#[test]
fn ecn_echo_reduces_once_and_sets_cwr() {
    let mut cfg = TcpConfig::profile("rfc").unwrap();
    cfg.ecn = true;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    // Mark two segments of the same window: one reduction only (RFC 3168 §6.1.2).
    p.mark = Box::new(|n| n == 30 || n == 32);
    p.run(Instant::from_millis(100));
    assert!(p.c[0].as_ref().unwrap().negotiated().2, "ECN negotiated");
    p.with(0, |c, now, io| c.write(now, 400_000, io));
    p.run(Instant::from_secs(20));
    assert_eq!(p.delivered(), 400_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(s.ecn_reductions, 1, "{s:?}");
    assert_eq!(s.retransmits, 0, "ECN reacts without loss");
    let echoes = p
        .log
        .iter()
        .filter(|(_, from, h)| {
            *from == 1
                && h.tcp_repr()
                    .unwrap()
                    .flags
                    .contains(asymlink_core::wire::TcpFlags::ECE)
        })
        .count();
    assert!(echoes >= 1);
    // (The SYN's ECE+CWR is negotiation, not counted.)
    let cwr = p
        .log
        .iter()
        .filter(|(_, from, h)| {
            *from == 0
                && h.payload_len > 0
                && h.tcp_repr()
                    .unwrap()
                    .flags
                    .contains(asymlink_core::wire::TcpFlags::CWR)
        })
        .count();
    assert_eq!(cwr, 1, "one CWR after the reduction");
    // Retransmissions and pure ACKs are not ECN-capable; new data is ECT(0).
    assert!(p
        .log
        .iter()
        .filter(|(_, from, h)| *from == 0 && h.payload_len > 0)
        .all(|(_, _, h)| h.ip.ecn.is_ect()));
    assert!(p
        .log
        .iter()
        .filter(|(_, from, h)| *from == 1 && h.payload_len == 0)
        .all(|(_, _, h)| !h.ip.ecn.is_ect()));
}

#[test]
fn pacing_spreads_a_window_over_the_rtt() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.pacing = true;
    let mut p = Pair::new(&cfg, Rate::mbps(1000), Duration::from_millis(50));
    p.run(Instant::from_millis(300));
    p.with(0, |c, now, io| c.write(now, 2_000_000, io));
    p.run(Instant::from_secs(2));
    // Without pacing, a 1 Gbit/s sender puts each window on the wire back to back
    // (12 us apart); paced, consecutive bursts (segments sent at one instant) are spread
    // over the RTT.
    let mut sends: Vec<Instant> = p
        .log
        .iter()
        .filter(|(_, f, h)| *f == 0 && h.payload_len > 0)
        .map(|(t, _, _)| *t)
        .collect();
    sends.dedup();
    let gaps: Vec<Duration> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    let spread = gaps
        .iter()
        .filter(|g| **g > Duration::from_micros(100))
        .count();
    assert!(
        spread * 2 > gaps.len(),
        "{spread} of {} gaps above 100 us",
        gaps.len()
    );
    assert_eq!(p.delivered(), 2_000_000);
}

/// ACKs that are only late (the reverse path's delay jumps from 20 ms to 1 s mid-transfer)
/// make the sender time out. With `rto_undo` (the `linux` profile) the first late ACK
/// echoes a timestamp older than the retransmission: the timeout is undone — cwnd and
/// ssthresh back, one retransmission per timeout, no go-back-N. Without it, the sender
/// slow-starts from one segment and resends what was already delivered.
#[test]
fn spurious_timeout_is_undone_with_timestamps() {
    let run = |undo: bool| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.rto_undo = undo;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 3_000_000, io));
        p.run(Instant::from_millis(600));
        let cwnd_before = p.c[0].as_ref().unwrap().cwnd();
        p.pipes[1].delay = Duration::from_secs(1);
        p.run(Instant::from_millis(700));
        p.pipes[1].delay = Duration::from_millis(20);
        p.run(Instant::from_secs(60));
        assert_eq!(p.delivered(), 3_000_000, "undo={undo}");
        let c = p.c[0].as_ref().unwrap();
        (*c.stats(), cwnd_before, c.cwnd())
    };
    let (s, before, after) = run(true);
    assert!(s.timeouts >= 1, "{s:?}");
    assert!(s.spurious_timeouts >= 1, "{s:?}");
    assert!(
        s.retransmits <= s.timeouts,
        "one retransmission per timeout: {s:?}"
    );
    assert!(after >= before, "cwnd restored: {before} -> {after}");
    let (s0, _, _) = run(false);
    assert!(s0.timeouts >= 1, "{s0:?}");
    assert_eq!(s0.spurious_timeouts, 0, "{s0:?}");
    assert!(
        s0.retransmits > s.retransmits + 5,
        "go-back-N without undo: {s0:?} vs {s:?}"
    );
}

/// A drop rule for the client's data segments: drop the originals numbered in `first`, the
/// first retransmission if `drop_first_retx`, and the first new segment sent after the
/// first retransmission if `drop_after_retx`.
fn drop_rule(
    first: std::ops::RangeInclusive<usize>,
    drop_first_retx: bool,
    drop_after_retx: bool,
) -> DropRule {
    let mut highest: Option<u32> = None;
    let mut retx_seen = false;
    let mut after_dropped = false;
    Box::new(move |n, h| {
        let seq = h.tcp_repr().unwrap().seq.0;
        if highest.is_some_and(|m| seq <= m) {
            let first_retx = !retx_seen;
            retx_seen = true;
            return first_retx && drop_first_retx;
        }
        highest = Some(seq);
        if first.contains(&n) {
            return true;
        }
        if retx_seen && drop_after_retx && !after_dropped {
            after_dropped = true;
            return true;
        }
        false
    })
}

/// NewReno: a loss, then the first new segment sent in the recovery is lost too. The ACK
/// that ends the first recovery lands exactly on `recover`; the duplicate ACKs that follow
/// announce the second loss, which must get its own fast retransmit (RFC 6582 §3.2), not a
/// timeout.
#[test]
fn a_loss_just_after_recover_gets_a_fast_retransmit() {
    let cfg = paper();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = drop_rule(30..=30, false, true);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 400_000, io));
    p.run(Instant::from_secs(30));
    assert_eq!(p.dropped, 2);
    assert_eq!(p.delivered(), 400_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(s.timeouts, 0, "{s:?}");
    assert_eq!(s.fast_retransmits, 2, "{s:?}");
    assert_eq!(s.retransmits, 2, "{s:?}");
}

/// After a timeout without SACK the sender goes back and resends segments the receiver
/// already holds; their duplicate ACKs arrive once the cumulative ACK has reached
/// `recover` and must not start a fast retransmit (the false fast retransmit RFC 6582 §3.2
/// guards against).
#[test]
fn go_back_n_duplicates_after_a_timeout_do_not_fast_retransmit() {
    let cfg = paper();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    // Seven consecutive losses, and the fast retransmission of the first: a timeout. The
    // go-back-N bursts after it overshoot the last hole by several segments.
    p.drop = drop_rule(30..=36, true, false);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 400_000, io));
    p.run(Instant::from_secs(30));
    assert_eq!(p.delivered(), 400_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(s.timeouts, 1, "{s:?}");
    assert_eq!(
        s.fast_retransmits, 1,
        "only the one before the timeout: {s:?}"
    );
    // The receiver did see duplicates: more was resent than was lost.
    assert!(s.retransmits > 8, "{s:?}");
}

/// Karn's rule keeps the backed-off RTO until a valid RTT sample: the ACK of a
/// retransmitted segment (no timestamps) gives none, so the backoff stays; the next ACK of
/// new data gives one and collapses the RTO again (RFC 6298 §5).
#[test]
fn backoff_is_kept_until_a_valid_rtt_sample() {
    let cfg = paper();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 9);
    p.run(Instant::from_millis(100));
    let base = p.c[0].as_ref().unwrap().rto();
    assert_eq!(base, Duration::from_secs(1), "the 1 s minimum");
    p.with(0, |c, now, io| c.write(now, 10_000, io));
    p.run(Instant::from_secs(10));
    assert_eq!(p.delivered(), 10_000);
    let c = p.c[0].as_ref().unwrap();
    assert_eq!(c.stats().timeouts, 1);
    assert_eq!(c.rto(), 2 * base, "no sample from the retransmission's ACK");
    p.with(0, |c, now, io| c.write(now, 1_000, io));
    p.run(Instant::from_secs(20));
    assert_eq!(p.delivered(), 11_000);
    assert_eq!(p.c[0].as_ref().unwrap().rto(), base, "a clean sample");
}

/// ECN and a loss in the same window: segment 30 is lost and segment 33 (sent before the
/// loss is detected) is marked CE. The fast retransmit reduces the window once; the sender
/// must then set CWR on its next new segment (RFC 3168 §6.1.2: after a reduction "for any
/// reason"), so the receiver stops echoing ECE and no second reduction follows recovery.
#[test]
fn a_loss_reduction_sends_cwr_and_is_not_followed_by_an_ecn_one() {
    for profile in ["paper", "rfc", "linux"] {
        let mut cfg = TcpConfig::profile(profile).unwrap();
        cfg.ecn = true;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = Box::new(|n, _| n == 30);
        p.mark = Box::new(|n| n == 33);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 400_000, io));
        p.run(Instant::from_secs(20));
        assert_eq!(p.delivered(), 400_000, "{profile}");
        let s = *p.c[0].as_ref().unwrap().stats();
        assert_eq!(s.fast_retransmits, 1, "{profile}: {s:?}");
        assert_eq!(s.timeouts, 0, "{profile}: {s:?}");
        assert_eq!(s.ecn_reductions, 0, "{profile}: one reduction only: {s:?}");
        let cwr = p
            .log
            .iter()
            .filter(|(_, from, h)| {
                *from == 0
                    && h.payload_len > 0
                    && h.tcp_repr()
                        .unwrap()
                        .flags
                        .contains(asymlink_core::wire::TcpFlags::CWR)
            })
            .count();
        assert_eq!(cwr, 1, "{profile}: CWR after the loss reduction");
    }
}

/// Restart after idle: a connection that sent 300 KB, then sat idle for 5 s (far longer
/// than the RTO), writes again. `rfc` resumes with at most its initial window (RFC 5681
/// §4.1), `linux` too after 5 s (Linux halves cwnd per idle RTO, down to the initial
/// window), and `paper` (ns-2's one-way agents) at its old window, as one line-rate burst.
#[test]
fn data_after_idle_restarts_from_the_initial_window() {
    for (profile, iw) in [("paper", None), ("rfc", Some(3)), ("linux", Some(10))] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 300_000, io));
        p.run(Instant::from_secs(5));
        assert_eq!(p.delivered(), 300_000, "{profile}");
        let before = p.c[0].as_ref().unwrap().cwnd();
        p.now = Instant::from_secs(10);
        p.with(0, |c, now, io| c.write(now, 300_000, io));
        let mss = p.c[0].as_ref().unwrap().mss() as u64;
        let burst = p
            .log
            .iter()
            .filter(|(t, from, h)| *t == p.now && *from == 0 && h.payload_len > 0)
            .count() as u64;
        match iw {
            Some(iw) => {
                assert_eq!(burst, iw, "{profile}: cwnd {before} before the idle period");
                assert_eq!(p.c[0].as_ref().unwrap().cwnd(), iw * mss, "{profile}");
            }
            None => assert!(
                burst * mss >= before.min(300_000) - mss,
                "{profile}: {burst}"
            ),
        }
        p.run(Instant::from_secs(20));
        assert_eq!(p.delivered(), 600_000, "{profile}");
    }
}

/// Limited transmit with SACK (RFC 3042 with RFC 6675's pipe): each duplicate ACK before
/// the fast retransmission lets one new segment out — the SACK it carries takes one
/// segment out of the pipe. Counting the duplicate ACKs on top of that sent two per
/// duplicate ACK. (`rfc` acknowledges pairs, and the first SACK is a duplicate ACK: two
/// duplicates, two new segments. `linux` acknowledges its first 22 segments one by one,
/// then pairs, each ending on a pushed segment (the sender's GSO packets are pairs), so
/// the lost 31st segment is the first of a pair: two duplicates, two new segments.)
#[test]
fn sack_limited_transmit_sends_one_segment_per_duplicate_ack() {
    for (profile, dups) in [("rfc", 2), ("linux", 2)] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = Box::new(|n, _| n == 30);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 300_000, io));
        p.run(Instant::from_secs(20));
        assert_eq!(p.delivered(), 300_000, "{profile}");
        // The fast retransmission: the first data segment not above everything sent before.
        let mut highest = 0u32;
        let mut sends = Vec::new();
        let mut retx_at = None;
        for (t, from, h) in &p.log {
            if *from != 0 || h.payload_len == 0 {
                continue;
            }
            let seq = h.tcp_repr().unwrap().seq.0.wrapping_sub(1_000);
            if seq < highest {
                retx_at = Some(*t);
                break;
            }
            highest = seq;
            sends.push(*t);
        }
        let retx_at = retx_at.expect("a fast retransmission");
        // The duplicate ACKs the client received before it: same cumulative ACK as the
        // ACK before, with a SACK block.
        let mut last_ack = None;
        let mut dup_at = Vec::new();
        for (t, to, h) in &p.rx_log {
            if *to != 0 || h.payload_len > 0 || *t >= retx_at {
                continue;
            }
            let tr = h.tcp_repr().unwrap();
            if last_ack == Some(tr.ack.0) && !tr.opts.sack.is_empty() {
                dup_at.push(*t);
            }
            last_ack = Some(tr.ack.0);
        }
        assert_eq!(
            dup_at.len(),
            dups,
            "{profile}: duplicate ACKs before the retransmission"
        );
        let new_between = sends.iter().filter(|t| **t >= dup_at[0]).count();
        assert_eq!(
            new_between, dups,
            "{profile}: new segments between the first duplicate ACK and the fast retransmit"
        );
    }
}

/// The `recover` rule in every profile: segment 30 is lost, then the first new segment sent
/// during its recovery. The ACK that ends the first recovery lands exactly on `recover`;
/// the loss above it must get a second fast retransmit (RFC 6675 §5.1, RFC 6582 §3.2), not
/// a timeout.
#[test]
fn a_loss_just_after_recover_gets_a_fast_retransmit_in_every_profile() {
    for profile in ["paper", "rfc", "linux"] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = drop_rule(30..=30, false, true);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 400_000, io));
        p.run(Instant::from_secs(30));
        assert_eq!(p.dropped, 2, "{profile}");
        assert_eq!(p.delivered(), 400_000, "{profile}");
        let s = *p.c[0].as_ref().unwrap().stats();
        assert_eq!(s.timeouts, 0, "{profile}: {s:?}");
        assert_eq!(s.fast_retransmits, 2, "{profile}: {s:?}");
        assert_eq!(s.retransmits, 2, "{profile}: {s:?}");
    }
}

/// SACK and a timeout: segments 30 and 34 are lost and so are their first
/// retransmissions, so the recovery ends in a timeout with two holes below data the
/// receiver SACKed. After it the scoreboard still holds the SACKs: the sender resends the
/// two holes only, never a SACKed segment (no go-back-N), and the receiver sees no
/// duplicate data.
///
/// With RACK (`linux`) the lost retransmissions are found without the timeout: a segment
/// sent after each was delivered.
#[test]
fn after_a_timeout_with_sack_only_the_holes_are_resent() {
    for (profile, rack, timeouts) in [("rfc", false, 1), ("linux", false, 1), ("linux", true, 0)] {
        let mut cfg = TcpConfig::profile(profile).unwrap();
        cfg.rack = rack;
        cfg.tlp = rack;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        let mut lost = std::collections::BTreeMap::new();
        p.drop = Box::new(move |n, h| {
            let seq = h.tcp_repr().unwrap().seq.0;
            if n == 30 || n == 34 {
                lost.insert(seq, 1);
                return true;
            }
            match lost.get_mut(&seq) {
                Some(k) if *k < 2 => {
                    *k += 1;
                    true
                }
                _ => false,
            }
        });
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 400_000, io));
        p.run(Instant::from_secs(30));
        assert_eq!(p.dropped, 4, "{profile}");
        assert_eq!(p.delivered(), 400_000, "{profile}");
        let s = *p.c[0].as_ref().unwrap().stats();
        assert_eq!(s.timeouts, timeouts, "{profile}: {s:?}");
        assert_eq!(s.retransmits, 4, "{profile}: the holes only: {s:?}");
        let mut seen = std::collections::BTreeMap::new();
        for (_, to, h) in &p.rx_log {
            if *to == 1 && h.payload_len > 0 {
                *seen.entry(h.tcp_repr().unwrap().seq.0).or_insert(0) += 1;
            }
        }
        let dup = seen.values().filter(|&&k| k > 1).count();
        assert_eq!(dup, 0, "{profile}: segments that arrived twice: {s:?}");
    }
}

/// An Eifel undo resets the timeout's recovery state. The ACK path's delay jumps from
/// 20 ms to 1 s while a segment sent just before it is lost: the sender times out, the
/// first late ACK shows the timeout was spurious (undone), and the SACKs above the lost
/// segment must then start a fast retransmit. Kept, the timeout's `recover` would block
/// the fast retransmit and its loss scan would skip the segment: a second, real timeout.
#[test]
fn a_loss_found_after_an_eifel_undo_gets_a_fast_retransmit() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    let arm = std::rc::Rc::new(std::cell::Cell::new(false));
    let armed = arm.clone();
    p.drop = Box::new(move |_, _| armed.replace(false));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 2_000_000, io));
    p.run(Instant::from_millis(300));
    // The next new segment is lost; the ACKs of what follows it are 600 ms late.
    arm.set(true);
    p.pipes[1].delay = Duration::from_millis(600);
    p.run(Instant::from_millis(320));
    p.pipes[1].delay = Duration::from_millis(20);
    p.run(Instant::from_secs(30));
    assert_eq!(p.dropped, 1);
    assert_eq!(p.delivered(), 2_000_000);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert!(s.spurious_timeouts >= 1, "{s:?}");
    assert_eq!(s.timeouts, s.spurious_timeouts, "no real timeout: {s:?}");
    assert_eq!(s.fast_retransmits, 1, "{s:?}");
}

/// Rescue retransmission (RFC 6675 NextSeg rule 4): a 30-segment write loses segment 20
/// and its last segment. SACKs above segment 20 start a recovery; nothing SACKs the tail,
/// so no DupThresh rule marks it lost. `rfc` resends it once the pipe has room and no new
/// data is left (the rescue), so both losses are repaired in the one recovery; `linux` has
/// no rescue, but RACK marks the tail lost once the retransmission of segment 20, sent
/// after it, is delivered: also one recovery, no timeout.
#[test]
fn a_lost_tail_in_sack_recovery_gets_the_rescue_retransmission() {
    for (profile, timeouts) in [("rfc", 0), ("linux", 0)] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mss = cfg.mss as u64;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = Box::new(|n, _| n == 20 || n == 29);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 30 * mss, io));
        p.run(Instant::from_secs(30));
        assert_eq!(p.dropped, 2, "{profile}");
        assert_eq!(p.delivered(), 30 * mss, "{profile}");
        let s = *p.c[0].as_ref().unwrap().stats();
        assert_eq!(s.fast_retransmits, 1, "{profile}: {s:?}");
        assert_eq!(s.timeouts, timeouts, "{profile}: {s:?}");
        assert_eq!(s.retransmits, 2, "{profile}: {s:?}");
    }
}

/// Data segments the client sent at `t`.
fn sent_at(p: &Pair, t: Instant) -> Vec<u32> {
    p.log
        .iter()
        .filter(|(at, from, h)| *at == t && *from == 0 && h.payload_len > 0)
        .map(|(_, _, h)| h.payload_len)
        .collect()
}

/// Nagle per profile. A write of one MSS and a bit: `rfc` (RFC 896) holds the short tail
/// until the full segment is acknowledged; `linux` (Minshall's variant) sends it at once,
/// no short segment being unacknowledged. Two short writes: both hold the second while the
/// first is unacknowledged. A short write that ends with the FIN: `linux` never holds the
/// FIN (`tcp_nagle_test`), `rfc` does.
#[test]
fn nagle_rfc896_and_minshall() {
    for (profile, minshall) in [("rfc", false), ("linux", true)] {
        let cfg = TcpConfig::profile(profile).unwrap();
        let mss = cfg.mss;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(500));
        let t = p.now;
        p.with(0, |c, now, io| c.write(now, mss as u64 + 100, io));
        let expect = if minshall { vec![mss, 100] } else { vec![mss] };
        assert_eq!(sent_at(&p, t), expect, "{profile}: one MSS and a bit");
        p.run(Instant::from_secs(2));
        assert_eq!(p.delivered(), mss as u64 + 100, "{profile}");
        // Two short writes back to back: the second waits for the first's ACK.
        let t = p.now;
        p.with(0, |c, now, io| {
            c.write(now, 100, io);
            c.write(now, 100, io);
        });
        assert_eq!(sent_at(&p, t), vec![100], "{profile}: two short writes");
        p.run(Instant::from_secs(4));
        assert_eq!(p.delivered(), mss as u64 + 300, "{profile}");
        // A short segment outstanding, then a short write and the close.
        let t = p.now;
        p.with(0, |c, now, io| {
            c.write(now, 100, io);
            c.write(now, 100, io);
            c.close(now, io);
        });
        let expect = if minshall { vec![100, 100] } else { vec![100] };
        assert_eq!(sent_at(&p, t), expect, "{profile}: the FIN");
        p.run(Instant::from_secs(6));
        assert_eq!(p.delivered(), mss as u64 + 500, "{profile}");
    }
}

/// Zero window and the persist timer, each profile. The server's application stops
/// reading: its 20 kB buffer fills and it advertises a zero window. The client, with data
/// waiting and nothing in flight, probes through the persist timer — segments without data
/// at SND.UNA - 1, each answered with the window — backing off exponentially. No probe is
/// a retransmission: no timeout, no retransmission, cwnd kept. When the application reads
/// again, the window update restarts the transfer.
#[test]
fn zero_window_is_probed_by_the_persist_timer_with_backoff() {
    for profile in ["paper", "rfc", "linux"] {
        let mut cfg = TcpConfig::profile(profile).unwrap();
        cfg.rcvbuf = 20_000;
        cfg.rcv_autotune = false;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(1, |c, _, _| c.pause_reading());
        p.with(0, |c, now, io| c.write(now, 100_000, io));
        p.run(Instant::from_secs(20));
        let server = p.c[1].as_ref().unwrap();
        assert_eq!(p.delivered(), 0, "{profile}: nothing read");
        assert_eq!(
            server.unread_bytes(),
            20_000,
            "{profile}: the buffer is full"
        );
        let last_window = p
            .log
            .iter()
            .rev()
            .find(|(_, from, _)| *from == 1)
            .map(|(_, _, h)| h.tcp_repr().unwrap().window)
            .unwrap();
        assert_eq!(last_window, 0, "{profile}: a zero window");
        let client = p.c[0].as_ref().unwrap();
        let s = *client.stats();
        assert_eq!((s.timeouts, s.retransmits), (0, 0), "{profile}: {s:?}");
        let cwnd = client.cwnd();
        // The probes: no data, one below SND.UNA; each gap twice the previous.
        let probes: Vec<Instant> = p
            .log
            .iter()
            .filter(|(_, from, h)| *from == 0 && h.payload_len == 0)
            .filter(|(_, _, h)| h.tcp_repr().unwrap().seq.0 == 1_000 + 20_000)
            .map(|(t, _, _)| *t)
            .collect();
        assert_eq!(s.window_probes, probes.len() as u64, "{profile}");
        assert!(probes.len() >= 3, "{profile}: {probes:?}");
        let rto = client.rto();
        for (i, w) in probes.windows(2).enumerate() {
            assert_eq!(
                w[1] - w[0],
                rto * (2 << i),
                "{profile}: probe {i}: {probes:?}"
            );
        }
        // Reading again: everything arrives, driven by the window updates.
        p.with(1, |c, now, io| c.resume_reading(now, io));
        p.run(Instant::from_secs(40));
        assert_eq!(p.delivered(), 100_000, "{profile}");
        let c = p.c[0].as_ref().unwrap();
        assert_eq!(c.stats().timeouts, 0, "{profile}");
        assert!(c.cwnd() >= cwnd, "{profile}: cwnd kept");
    }
}

/// A FIN that arrives while a hole is open (it rides on the write's last segment, sent
/// during a recovery) is taken once the hole fills, as Linux keeps it with the
/// out-of-order segment: the sender gets the FIN acknowledged with the data, no timeout.
#[test]
fn an_out_of_order_fin_is_taken_when_the_hole_fills() {
    for profile in ["paper", "rfc", "linux"] {
        // `paper` models senders without SACK.
        for sack in [false, true]
            .into_iter()
            .filter(|&s| !s || profile != "paper")
        {
            let mut cfg = TcpConfig::profile(profile).unwrap();
            cfg.sack = sack;
            let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
            p.drop = Box::new(|n, _| (18..=20).contains(&n));
            p.run(Instant::from_millis(100));
            p.with(0, |c, now, io| {
                c.write(now, 40_000, io);
                c.close(now, io);
            });
            p.run(Instant::from_secs(10));
            assert_eq!(p.delivered(), 40_000, "{profile} sack={sack}");
            let s = *p.c[0].as_ref().unwrap().stats();
            assert_eq!(s.timeouts, 0, "{profile} sack={sack}: {s:?}");
            let fins = p
                .log
                .iter()
                .filter(|(_, from, h)| {
                    *from == 0
                        && h.tcp_repr()
                            .unwrap()
                            .flags
                            .contains(asymlink_core::wire::TcpFlags::FIN)
                })
                .count();
            assert_eq!(fins, 1, "{profile} sack={sack}: the FIN sent once: {s:?}");
            if profile == "linux" {
                // The FIN's segment SACKed with its FIN: RACK does not resend it.
                assert_eq!(s.retransmits, 3, "{profile} sack={sack}: {s:?}");
            }
            assert!(
                p.events[1]
                    .iter()
                    .any(|e| matches!(e, ConnEvent::PeerClosed)),
                "{profile} sack={sack}: the FIN was taken"
            );
        }
    }
}

/// Data segments the client sent: (time, offset from the ISS).
fn data_sends(p: &Pair) -> Vec<(Instant, u64)> {
    p.log
        .iter()
        .filter(|(_, from, h)| *from == 0 && h.payload_len > 0)
        .map(|(t, _, h)| (*t, h.tcp_repr().unwrap().seq.0.wrapping_sub(1_000) as u64))
        .collect()
}

/// ACKs the client received: (time, cumulative ACK offset, number of SACK blocks).
fn acks_in(p: &Pair) -> Vec<(Instant, u64, usize)> {
    p.rx_log
        .iter()
        .filter(|(_, to, h)| *to == 0 && h.payload_len == 0)
        .map(|(t, _, h)| {
            let tr = h.tcp_repr().unwrap();
            (*t, tr.ack.0.wrapping_sub(1_000) as u64, tr.opts.sack.len())
        })
        .collect()
}

/// RACK with fewer than DupThresh segments SACKed: a 3-segment write loses its first
/// segment. The two SACKs do not make it lost at once; RACK waits a reordering window
/// (min RTT / 4) from the last one, then the reordering timer (+2 ms) marks it lost and
/// starts the recovery — long before any timeout.
#[test]
fn rack_marks_a_segment_lost_after_the_reordering_window() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mss = cfg.mss as u64;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 0);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 3 * mss, io));
    p.run(Instant::from_secs(5));
    assert_eq!(p.delivered(), 3 * mss);
    let c = p.c[0].as_ref().unwrap();
    let s = *c.stats();
    assert_eq!(
        (s.fast_retransmits, s.timeouts, s.retransmits),
        (1, 0, 1),
        "{s:?}"
    );
    let last_sack = acks_in(&p)
        .iter()
        .filter(|a| a.1 == 1 && a.2 > 0)
        .map(|a| a.0)
        .max()
        .expect("SACKs");
    let retx = data_sends(&p).iter().filter(|d| d.1 == 1).nth(1).unwrap().0;
    // min RTT: the handshake's sample (nothing later is shorter).
    let reo_wnd = c.min_rtt().unwrap() / 4;
    assert_eq!(retx, last_sack + reo_wnd + Duration::from_millis(2));
}

/// With DupThresh (3) segments SACKed and no reordering seen, RACK's reordering window is
/// zero: the segment is lost at the third SACK, as the RFC 6675 rule would have it.
#[test]
fn rack_without_reordering_marks_the_loss_at_the_third_sack() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mss = cfg.mss as u64;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 0);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 8 * mss, io));
    p.run(Instant::from_secs(5));
    let sacks: Vec<Instant> = acks_in(&p)
        .iter()
        .filter(|a| a.1 == 1 && a.2 > 0)
        .map(|a| a.0)
        .collect();
    let retx = data_sends(&p).iter().filter(|d| d.1 == 1).nth(1).unwrap().0;
    assert_eq!(retx, sacks[2]);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(
        (s.fast_retransmits, s.timeouts, s.loss_probes),
        (1, 0, 0),
        "{s:?}"
    );
}

/// A FIFO path never reorders, so RACK never sees reordering there, whichever segment is
/// lost. With delayed ACKs the segment before a loss is often acknowledged only by the
/// ACK that also brings the first SACK (the receiver answers the out-of-order segment at
/// once); that segment was never a hole. Linux compares it with the highest SACKed
/// sequence from before the ACK (`prior_fack` in `tcp_clean_rtx_queue`), not with the one
/// the same ACK just raised.
#[test]
fn rack_sees_no_reordering_on_a_fifo_path() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mss = cfg.mss as u64;
    let mut ack_and_first_sack = 0;
    for lost in 20..40 {
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = Box::new(move |n, _| n == lost);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 60 * mss, io));
        p.run(Instant::from_secs(5));
        assert_eq!(p.delivered(), 60 * mss);
        let acks = acks_in(&p);
        // The first ACK with a SACK block also advanced the cumulative ACK.
        let first = acks.iter().position(|a| a.2 > 0).expect("a SACK");
        if acks[first].1 > acks[first - 1].1 {
            ack_and_first_sack += 1;
        }
        let c = p.c[0].as_ref().unwrap();
        assert!(!c.reordering_seen(), "segment {lost} lost: {:?}", c.stats());
        assert_eq!(c.stats().retransmits, 1, "segment {lost} lost");
    }
    // The case that matters happened (with Linux's ACK engine, for about half the
    // positions).
    assert!(ack_and_first_sack > 0);
}

/// PRR's sending pattern for one loss (RFC 6937 §4's example, with Linux's accounting):
/// a window of 20 segments, the first lost, NewReno. The first two SACKs each let one new
/// segment out (the pipe has room: limited transmit); the third marks the loss (RACK,
/// DupThresh segments SACKed), the recovery starts with ssthresh = FlightSize / 2 = 11
/// and brings the retransmission; from then on each SACK of one segment lets
/// ⌈11·prr_delivered / 20⌉ − prr_out segments out: 11 for every 20 delivered, spread over
/// the RTT instead of nothing for its first half (RFC 6675's cwnd = ssthresh at entry).
#[test]
fn prr_sends_one_segment_per_two_delivered_after_a_single_loss() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.cc = CcAlgo::NewReno;
    cfg.initial_window = 20;
    let mss = cfg.mss as u64;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 0);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 200 * mss, io));
    p.run(Instant::from_secs(5));
    assert_eq!(p.delivered(), 200 * mss);
    let sends = data_sends(&p);
    // The SACKs of the 19 segments after the loss (the first 19 ACKs at offset 1).
    let sacks: Vec<Instant> = acks_in(&p)
        .iter()
        .filter(|a| a.1 == 1 && a.2 > 0)
        .take(19)
        .map(|a| a.0)
        .collect();
    let pattern: Vec<&str> = sacks
        .iter()
        .map(|t| {
            let at: Vec<u64> = sends.iter().filter(|d| d.0 == *t).map(|d| d.1).collect();
            match at.as_slice() {
                [] => ".",
                [1] => "R",
                [_] => "N",
                _ => "?",
            }
        })
        .collect();
    assert_eq!(
        pattern.join(""),
        "NNRN.N.N.N.NN.N.N..",
        "prior cwnd 20, ssthresh 11"
    );
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(
        (s.fast_retransmits, s.timeouts, s.retransmits),
        (1, 0, 1),
        "{s:?}"
    );
}

/// The ACK that ends a recovery: a 20-segment window loses its first segment (RACK marks
/// it lost with 22 segments in flight, ssthresh 11), the SACKs after it drive PRR, and the
/// ACK of the retransmission covers all 22, ends the recovery at cwnd = ssthresh and then
/// grows the window. Linux grows it by what that ACK newly delivered (`tcp_cong_control`'s
/// `acked_sacked`): the one retransmitted segment, 1/11 of a segment in congestion
/// avoidance. Counting the whole cumulative acknowledgment (`grow_by = "acked"`, RFC 5681)
/// adds the 21 segments SACKed during the recovery too: two segments at once.
#[test]
fn the_ack_ending_a_recovery_grows_cwnd_by_what_it_newly_delivered() {
    let run = |grow_by: GrowBy, until: Option<Instant>| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.cc = CcAlgo::NewReno;
        cfg.initial_window = 20;
        cfg.grow_by = grow_by;
        let mss = cfg.mss as u64;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = Box::new(|n, _| n == 0);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 200 * mss, io));
        p.run(until.unwrap_or(Instant::from_secs(5)));
        p
    };
    let mss = cfg_mss();
    // The arrival of the ACK that covers the first window (offset 1 is the first byte).
    let full = run(GrowBy::Delivered, None);
    assert_eq!(full.delivered(), 200 * mss);
    let exit_at = acks_in(&full)
        .iter()
        .find(|a| a.1 > 20 * mss)
        .expect("the first window is acknowledged")
        .0;
    let window_after_exit = |grow_by| {
        let p = run(grow_by, Some(exit_at));
        let c = p.c[0].as_ref().unwrap();
        assert_eq!(c.ca_state(), CaState::Open);
        assert_eq!(c.stats().fast_retransmits, 1);
        assert_eq!(c.ssthresh(), 11 * mss, "half the 22 segments in flight");
        c.cwnd() - c.ssthresh()
    };
    // Reno byte counting: acked·MSS/cwnd bytes.
    assert_eq!(window_after_exit(GrowBy::Delivered), mss / 11);
    assert_eq!(window_after_exit(GrowBy::Acked), 22 * mss / 11);
}

/// Tail-loss probe: a 10-segment write loses its last two segments. The ACK of the eighth
/// leaves two outstanding and arms the probe for 2·SRTT + 2 ms; the probe resends the last
/// segment, its SACK lets RACK mark the ninth lost, and a fast recovery repairs it — no
/// timeout.
#[test]
fn a_tail_loss_is_found_by_the_loss_probe_without_a_timeout() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mss = cfg.mss as u64;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    let mut seen = std::collections::BTreeSet::new();
    p.drop = Box::new(move |n, h| seen.insert(h.tcp_repr().unwrap().seq.0) && (n == 8 || n == 9));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 10 * mss, io));
    p.run(Instant::from_millis(200));
    let srtt = p.c[0].as_ref().unwrap().srtt().unwrap();
    let last_ack = acks_in(&p).last().unwrap().0;
    p.run(Instant::from_secs(5));
    assert_eq!(p.delivered(), 10 * mss);
    let s = *p.c[0].as_ref().unwrap().stats();
    assert_eq!(
        (s.loss_probes, s.fast_retransmits, s.timeouts, s.retransmits),
        (1, 1, 0, 2),
        "{s:?}"
    );
    let probe = data_sends(&p)[10];
    assert_eq!(
        probe,
        (last_ack + 2 * srtt + Duration::from_millis(2), 1 + 9 * mss)
    );
    assert!(p.events[0].contains(&ConnEvent::LossProbe));
}

/// A single lost tail segment: the probe (with one segment outstanding, 2·SRTT plus the
/// minimum RTO for a delayed ACK, capped by the RTO) repairs it, and the probe's ACK ends
/// exactly at what was sent, so the episode stays open (RFC 8985 §7.4.2) and cwnd is kept.
/// The next write's ACK goes beyond it: the probe repaired a loss, and cwnd is reduced
/// once then.
#[test]
fn a_probe_that_repairs_the_tail_reduces_cwnd_once_later_data_is_acknowledged() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mss = cfg.mss as u64;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 9);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 10 * mss, io));
    p.run(Instant::from_millis(200));
    let (srtt, rto) = {
        let c = p.c[0].as_ref().unwrap();
        (c.srtt().unwrap(), c.rto())
    };
    let last_ack = acks_in(&p).last().unwrap().0;
    p.run(Instant::from_secs(2));
    assert_eq!(p.delivered(), 10 * mss);
    let probe = data_sends(&p)[10];
    let pto = (2 * srtt + cfg.rto_min).min(rto);
    assert_eq!(probe, (last_ack + pto, 1 + 9 * mss));
    let (cwnd, s) = {
        let c = p.c[0].as_ref().unwrap();
        (c.cwnd(), *c.stats())
    };
    assert_eq!(
        (s.loss_probes, s.timeouts, s.retransmits),
        (1, 0, 1),
        "{s:?}"
    );
    assert_eq!(s.loss_probe_recoveries, 0, "episode still open: {s:?}");
    p.with(0, |c, now, io| c.write(now, 2 * mss, io));
    p.run(Instant::from_secs(4));
    let c = p.c[0].as_ref().unwrap();
    assert_eq!(c.stats().loss_probe_recoveries, 1);
    assert_eq!(
        c.ssthresh(),
        (cwnd as f64 * 0.7) as u64,
        "CUBIC's β from the cwnd then"
    );
}

/// A 4 Mbit/s path, 40 ms RTT (BDP 20 kB, 14 segments), a queue that never drops: the
/// `linux` profile leaves slow start by HyStart's delay detector once the queue adds
/// more than 5 ms (clamp(40/8, 4, 16) ms) — before any loss. ACKs are 3 ms apart on
/// this link, never an ACK train. Without HyStart slow start goes on until the receive
/// window stops it.
#[test]
fn hystart_leaves_slow_start_on_a_delay_increase_before_loss() {
    let run = |hystart: bool| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.hystart = hystart;
        let mut p = Pair::new(&cfg, Rate::mbps(4), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 2_000_000, io));
        let mut exit = None;
        while p.now < Instant::from_secs(10) && exit.is_none() {
            let t = p.now + Duration::from_millis(1);
            p.run(t);
            p.now = t;
            let c = p.c[0].as_ref().unwrap();
            if c.cwnd() >= c.ssthresh() {
                exit = Some((p.now, c.cwnd(), c.stats().hystart_delay_exits));
            }
        }
        p.run(Instant::from_secs(10));
        let s = *p.c[0].as_ref().unwrap().stats();
        (exit, s, p.c[0].as_ref().unwrap().ssthresh())
    };
    let (exit, s, ssthresh) = run(true);
    let (at, cwnd, delay_exits) = exit.expect("HyStart ended slow start");
    assert_eq!(delay_exits, 1, "{s:?}");
    assert_eq!(s.hystart_train_exits, 0, "{s:?}");
    assert_eq!(s.retransmits, 0, "no loss: {s:?}");
    // ssthresh = cwnd at the exit (the ACK that ended slow start grew cwnd a little).
    assert!(
        ssthresh <= cwnd && cwnd - ssthresh < 1448,
        "{ssthresh} {cwnd}"
    );
    // The earliest 8 RTTs of a round pass 5 ms of queueing once a standing queue
    // remains between rounds: cwnd above 2 BDP (28 segments), exit within that round.
    assert!(
        (28 * 1448..=64 * 1448).contains(&cwnd),
        "cwnd {cwnd} at {at:?}"
    );
    assert!(at < Instant::from_millis(500), "{at:?}");
    let (exit, s, ssthresh) = run(false);
    assert_eq!(exit, None, "no HyStart: still in slow start");
    assert_eq!(s.hystart_delay_exits + s.hystart_train_exits, 0);
    assert!(ssthresh > 1_000_000_000, "{ssthresh}");
}

/// Receive-buffer autotuning (`linux`): the first window is half the default buffer in
/// whole segments (65 160 bytes); it grows each RTT as the application reads, and stops
/// at half of `rmem[2]`. An application that does not read gets no growth.
#[test]
fn the_autotuned_window_grows_per_rtt_with_reads_and_is_capped() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.rmem = [4096, 131_072, 1 << 20];
    let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 30_000_000, io));
    let windows = |p: &Pair, from: Instant, to: Instant| -> Vec<u64> {
        p.log
            .iter()
            .filter(|(t, f, _)| *f == 1 && *t >= from && *t < to)
            .filter_map(|(_, _, h)| h.tcp_repr().map(|t| (t.window as u64) << 5))
            .collect()
    };
    let mut maxes = Vec::new();
    for rtt in 0..12u64 {
        let from = Instant::from_millis(100 + 40 * rtt);
        p.run(from + Duration::from_millis(40));
        maxes.push(
            windows(&p, from, from + Duration::from_millis(40))
                .into_iter()
                .max(),
        );
    }
    let syn_ack = p.log.iter().find(|(_, f, _)| *f == 1).unwrap().2;
    assert_eq!(syn_ack.tcp_repr().unwrap().window, 65_160);
    let maxes: Vec<u64> = maxes.into_iter().flatten().collect();
    // Non-decreasing, several distinct steps. In the first RTT the window grows to what
    // the default buffer holds at the payload ratio of 1448 bytes in 2304 of memory
    // (160/256 of 128 KiB, less the segment in the buffer, rounded up to the window
    // scale's 32 bytes); it ends at that of 1 MiB
    // (655 360, less the segment in the buffer: the sender fills the window to its edge,
    // 452 full segments and one of 864 bytes, and the short one is what the buffer holds).
    assert!(maxes.windows(2).all(|w| w[0] <= w[1]), "{maxes:?}");
    assert_eq!(maxes[0], 80_480, "{maxes:?}"); // 81 920 − 1448, rounded up to 32
    let steps = maxes.windows(2).filter(|w| w[1] > w[0]).count();
    assert!(steps >= 3, "{maxes:?}");
    assert_eq!(*maxes.last().unwrap(), 654_496, "{maxes:?}");
    let (buf, clamp) = p.c[1].as_ref().unwrap().rcvbuf_autotuned().unwrap();
    assert_eq!((buf, clamp), (1 << 20, 655_360));
    assert_eq!(p.c[1].as_ref().unwrap().wscales().0, 5, "wscale for 1 MiB");

    // Not reading: the buffer keeps its default size.
    let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(1, |c, _, _| c.pause_reading());
    p.with(0, |c, now, io| c.write(now, 30_000_000, io));
    p.run(Instant::from_secs(1));
    let (buf, _) = p.c[1].as_ref().unwrap().rcvbuf_autotuned().unwrap();
    assert_eq!(buf, 131_072);
}

/// Linux's delayed-ACK timer (`linux`): lone segments 400 ms apart (less than the RTO,
/// more than ato) are each acknowledged when the timer fires, and every firing doubles
/// ato: 40, 80, 160 ms, then 200 ms (the cap; ato itself goes on growing up to the RTO).
/// Segments 10 ms apart pull ato back toward 40 ms (ato/2 + 20 ms each), and data after a
/// silence longer than the RTO is acknowledged at once (quick-ACK re-entry).
#[test]
fn the_linux_delayed_ack_timer_follows_ato() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.rcv_autotune = false; // no window growth: isolate the timer
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(150));
    p.run(Instant::from_millis(400));
    // 16 segments at once: quick-ACK mode acknowledges each.
    p.with(0, |c, now, io| c.write(now, 16 * 1448, io));
    p.run(Instant::from_millis(1200));
    let acks = |p: &Pair| p.c[1].as_ref().unwrap().stats().acks_sent;
    assert_eq!(acks(&p), 16);
    assert_eq!(
        p.c[1].as_ref().unwrap().delack_state(),
        (Duration::from_millis(40), 0)
    );
    let mut delays = Vec::new();
    let mut t = Instant::from_millis(1200);
    for _ in 0..5 {
        p.run(t);
        p.now = t;
        // Unread: a pushed segment that is read is acknowledged at once.
        p.with(1, |c, _, _| c.pause_reading());
        p.with(0, |c, now, io| c.write(now, 1448, io));
        p.run(t + Duration::from_millis(399));
        let arrival = p
            .rx_log
            .iter()
            .rev()
            .find(|(_, to, h)| *to == 1 && h.payload_len > 0)
            .unwrap()
            .0;
        let ack = p.log.iter().rev().find(|(_, f, _)| *f == 1).unwrap().0;
        delays.push((ack - arrival).as_millis());
        p.with(1, |c, now, io| c.resume_reading(now, io));
        t += Duration::from_millis(400);
    }
    assert_eq!(delays, vec![40, 80, 160, 200, 200]);
    let (ato, _) = p.c[1].as_ref().unwrap().delack_state();
    assert!(ato >= Duration::from_millis(320), "{ato:?}");
    // Ten segments 10 ms apart: ato/2 + 20 ms each time.
    let before = ato;
    for _ in 0..10 {
        p.run(t);
        p.now = t;
        p.with(0, |c, now, io| c.write(now, 1448, io));
        t += Duration::from_millis(10);
    }
    // All arrived (the tenth completes a pair: acknowledged at once, no timer).
    p.run(t + Duration::from_millis(155));
    let (ato, _) = p.c[1].as_ref().unwrap().delack_state();
    assert!(ato < Duration::from_millis(45) && ato < before, "{ato:?}");
    // Two seconds of silence (more than the RTO), then one segment: acknowledged at once.
    let t = t + Duration::from_secs(2);
    p.run(t);
    p.now = t;
    let a0 = acks(&p);
    p.with(0, |c, now, io| c.write(now, 1448, io));
    p.run(t + Duration::from_millis(160));
    assert_eq!(
        acks(&p),
        a0 + 1,
        "quick ACK after a silence longer than the RTO"
    );
    assert!(p.c[1].as_ref().unwrap().delack_state().1 > 0);
}

/// The data segments (numbered from 1 in order of arrival at the receiver) that the
/// receiver acknowledged at once: an ACK for exactly that segment's end, sent at its
/// arrival.
fn acked_at_once(p: &Pair) -> Vec<usize> {
    let arrivals = p
        .rx_log
        .iter()
        .filter(|(_, to, h)| *to == 1 && h.payload_len > 0);
    arrivals
        .enumerate()
        .filter(|(_, (t, _, h))| {
            let end = h.tcp_repr().unwrap().seq.0.wrapping_add(h.payload_len);
            p.log.iter().any(|(at, from, a)| {
                *from == 1 && at == t && a.payload_len == 0 && a.tcp_repr().unwrap().ack.0 == end
            })
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Linux's quick-ACK count at the first data (`linux`, autotuned buffer): 16 (the window
/// of 65 160 bytes holds more than twice 16 segments). The first segment re-estimates
/// the buffer's payload ratio (1448 bytes in 2304 of memory), which lifts the clamp to
/// 81 920 bytes, and the first six segments grow the window threshold toward it; growth
/// sets the low bit of the count (`tcp_grow_window`: `quick |= 1`): 22 quick ACKs,
/// segments 1 to 22, as Linux sent in the lab (`bbr-fixed`, a capture at the receiver).
/// Then every second segment (more than one segment unacknowledged, window not
/// shrinking; each also pushed: the sender's GSO packets are pairs) is acknowledged at
/// once, up to segment 32. By then autotuning has grown the buffer (one receiver RTT of
/// reads), the threshold grows again with every segment, and with the count at zero
/// each growth is one quick ACK: segments 33 to 40. (With the growth counted as "at
/// least one quick ACK" the count was 16.)
#[test]
fn linux_window_growth_adds_a_quick_ack_to_an_even_count() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 40 * 1448, io));
    p.run(Instant::from_secs(2));
    assert_eq!(p.delivered(), 40 * 1448);
    let expected: Vec<usize> = (1..=22)
        .chain((24..=32).step_by(2))
        .chain(33..=40)
        .collect();
    assert_eq!(acked_at_once(&p), expected);
}

/// The lab's receiver (`SO_RCVBUF` 128 KiB, `TCP_WINDOW_CLAMP` 64 KiB set again after
/// every read), ACK by ACK as Linux 6.18 sent them in the lab (`bbr-ackfilter-off`,
/// captured at the box): the first segment re-estimates the payload ratio, which resets
/// the clamp to the buffer's 163 840 bytes, so it grows the window (68 056 offered) and
/// sets the quick-ACK count's low bit; the application's read clamps it back to 65 536,
/// and the right edge does not move back (66 608 offered), then 65 536 throughout.
/// Segments 1 to 18 are acknowledged one by one (16 + the growth, then the 18th, the
/// second of a pushed pair), then pairs: as Linux in the lab, whose sender's GSO packets
/// are pairs (before the sender marked PSH per GSO packet the simulator acknowledged
/// 1 to 17, then 19, 21, ...).
#[test]
fn a_clamped_linux_receiver_offers_the_windows_linux_offers() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.so_rcvbuf = Some(131_072);
    cfg.window_clamp = Some(65_536);
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 40 * 1448, io));
    p.run(Instant::from_secs(2));
    assert_eq!(p.delivered(), 40 * 1448);
    let syn_ack = p.log.iter().find(|(_, f, _)| *f == 1).unwrap().2;
    let tr = syn_ack.tcp_repr().unwrap();
    assert_eq!((tr.window, tr.opts.wscale), (65_160, Some(1)));
    let offered: Vec<u64> = p
        .log
        .iter()
        .filter(|(_, f, _)| *f == 1)
        .skip(1) // the SYN-ACK
        .map(|(_, _, h)| (h.tcp_repr().unwrap().window as u64) << 1)
        .take(5)
        .collect();
    assert_eq!(offered, [68_056, 66_608, 65_536, 65_536, 65_536]);
    let expected: Vec<usize> = (1..=18).chain((20..=38).step_by(2)).collect();
    assert_eq!(acked_at_once(&p)[..expected.len()], expected[..]);
    let (buf, clamp) = p.c[1].as_ref().unwrap().rcvbuf_autotuned().unwrap();
    assert_eq!((buf, clamp), (262_144, 65_536), "no autotuning");
}

/// Linux leaves quick-ACK mode when less than half of the buffer's window is free
/// (`__tcp_select_window`, run for every segment sent): a receiver that does not read,
/// 64 KiB window. Twelve segments, each acknowledged at once (quick-ACK mode); after a
/// silence longer than the RTO, quick-ACK mode again (16: the 48 160-byte window offered
/// last holds 16 pairs of segments). Of fourteen more, the first eleven are acknowledged
/// at once; the ACK of the eleventh leaves 32 232 bytes of 65 536 free, which ends
/// quick-ACK mode, and the last three wait for the delayed-ACK timer (the window they
/// leave is smaller than the one offered, so a pair is no reason to ACK either).
#[test]
fn linux_quick_ack_mode_ends_when_half_the_buffer_is_held() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.rcv_autotune = false;
    cfg.rcvbuf = 65_536;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(1, |c, _, _| c.pause_reading());
    p.with(0, |c, now, io| c.write(now, 12 * 1448, io));
    p.run(Instant::from_millis(500));
    assert_eq!(acked_at_once(&p), (1..=12).collect::<Vec<_>>());
    let t = Instant::from_millis(3_000);
    p.run(t);
    p.now = t;
    p.with(0, |c, now, io| c.write(now, 14 * 1448, io));
    p.run(Instant::from_millis(4_000));
    assert_eq!(acked_at_once(&p), (1..=23).collect::<Vec<_>>());
    assert_eq!(p.c[1].as_ref().unwrap().delack_state().1, 0);
}

/// Out-of-order data with Linux's ACK engine: every out-of-order segment is
/// acknowledged at once (a duplicate ACK with SACK), and so is the segment that fills
/// the gap.
#[test]
fn linux_acks_out_of_order_data_and_the_gap_fill_at_once() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| n == 40);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 200 * 1448, io));
    p.run(Instant::from_secs(10));
    assert_eq!(p.delivered(), 200 * 1448);
    // Each segment that arrived while the hole was open got its own ACK.
    let seg = |h: &Headers| h.tcp_repr().unwrap().seq.0.wrapping_sub(1_001) as u64 / 1448;
    let arrivals: Vec<Instant> = p
        .rx_log
        .iter()
        .filter(|(_, to, h)| *to == 1 && h.payload_len > 0 && seg(h) > 40)
        .map(|(t, _, _)| *t)
        .collect();
    let fill = p
        .rx_log
        .iter()
        .find(|(_, to, h)| *to == 1 && h.payload_len > 0 && seg(h) == 40)
        .unwrap()
        .0;
    let ooo: Vec<Instant> = arrivals.into_iter().filter(|t| *t < fill).collect();
    assert!(ooo.len() >= 3, "{}", ooo.len());
    let acked_at = |t: Instant| {
        p.log
            .iter()
            .any(|(s, f, h)| *f == 1 && *s == t && h.payload_len == 0)
    };
    assert!(
        ooo.iter().all(|t| acked_at(*t)),
        "an ACK per out-of-order segment"
    );
    assert!(acked_at(fill), "the gap fill is acknowledged at once");
}

/// A drop rule by segment number (1-based, in MSS units from the first data byte) and
/// transmission (1-based): drop the `tx`-th transmission of each listed segment.
fn drop_tx(mss: u64, rules: Vec<(u64, u32)>) -> DropRule {
    let mut base: Option<u32> = None;
    let mut count = std::collections::HashMap::<u32, u32>::new();
    Box::new(move |_, h| {
        let seq = h.tcp_repr().unwrap().seq.0;
        let b = *base.get_or_insert(seq);
        let seg = seq.wrapping_sub(b) as u64 / mss + 1;
        let tx = count.entry(seq).or_insert(0);
        *tx += 1;
        rules.contains(&(seg, *tx))
    })
}

/// `linux` without SACK, one segment lost and its fast retransmission too: the timeout
/// interrupts the recovery, whose reduction stands (Linux `tcp_enter_loss`: no second
/// reduction before the recovery point is acknowledged). The RFC rule takes ssthresh again
/// from the window the recovery inflated.
#[test]
fn a_timeout_during_a_recovery_keeps_the_recovery_ssthresh_in_linux() {
    let run = |mode: TimeoutMode| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.sack = false;
        cfg.timestamps = false;
        cfg.timeout_mode = mode;
        let mss = cfg.mss as u64;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.drop = drop_tx(mss, vec![(30, 1), (30, 2)]);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 100 * mss, io));
        let mut at_recovery = None;
        let mut t = Instant::from_millis(100);
        while t < Instant::from_secs(5) {
            t += Duration::from_millis(1);
            p.run(t);
            let c = p.c[0].as_ref().unwrap();
            if at_recovery.is_none() && c.stats().fast_retransmits == 1 {
                at_recovery = Some(c.ssthresh());
            }
        }
        assert_eq!(p.delivered(), 100 * mss);
        let c = p.c[0].as_ref().unwrap();
        let s = *c.stats();
        assert_eq!((s.fast_retransmits, s.timeouts), (1, 1), "{s:?}");
        (at_recovery.unwrap(), c.ssthresh(), mss)
    };
    let (recovery, end, mss) = run(TimeoutMode::Linux);
    assert_eq!(end, recovery, "the recovery's ssthresh kept");
    assert_eq!(recovery / mss, 27, "0.7 × 39 segments");
    let (recovery, end, _) = run(TimeoutMode::Rfc);
    assert!(
        end > recovery,
        "RFC rule: from the inflated window ({end} > {recovery})"
    );
}

/// `linux` without SACK: the second flight (segments 11–20) is lost, and the second
/// transmission of segment 20. The first timeout reduces ssthresh; the window grows back
/// while 11–19 are acknowledged, and the second timeout reduces again, from that window
/// (Linux `tcp_enter_loss`: an ACK of new data since the last timeout clears
/// `icsk_retransmits`). The RFC rule keeps the first reduction.
#[test]
fn a_second_timeout_after_new_acks_reduces_again_in_linux() {
    let run = |mode: TimeoutMode| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.sack = false;
        cfg.timestamps = false;
        cfg.timeout_mode = mode;
        let mss = cfg.mss as u64;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        let mut rules: Vec<(u64, u32)> = (11..=20).map(|s| (s, 1)).collect();
        rules.push((20, 2));
        p.drop = drop_tx(mss, rules);
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 20 * mss, io));
        let (mut first, mut cwnd_before_second) = (None, 0);
        let mut t = Instant::from_millis(100);
        while t < Instant::from_secs(5) {
            t += Duration::from_millis(1);
            let cwnd = p.c[0].as_ref().unwrap().cwnd();
            p.run(t);
            let c = p.c[0].as_ref().unwrap();
            match c.stats().timeouts {
                1 if first.is_none() => first = Some(c.ssthresh()),
                2 if cwnd_before_second == 0 => cwnd_before_second = cwnd,
                _ => {}
            }
        }
        assert_eq!(p.delivered(), 20 * mss);
        let c = p.c[0].as_ref().unwrap();
        assert_eq!(c.stats().timeouts, 2, "{:?}", c.stats());
        (first.unwrap(), cwnd_before_second, c.ssthresh(), mss)
    };
    let (first, cwnd, end, mss) = run(TimeoutMode::Linux);
    assert_eq!(first / mss, 14, "0.7 × 20 segments");
    assert!(cwnd > 2 * mss && cwnd < 20 * mss, "cwnd grew back: {cwnd}");
    assert_eq!(end, (cwnd as f64 * 0.7) as u64, "reduced again from {cwnd}");
    let (first, _, end, _) = run(TimeoutMode::Rfc);
    assert_eq!(end, first, "RFC rule: the first reduction kept");
}

/// `linux`: the fifth segment of a write is delayed by 10 ms, so RACK (no reordering seen
/// yet, zero reordering window once three segments are SACKed) takes it for lost and
/// retransmits it. The original arrives first; the receiver reports the retransmission
/// as a duplicate in a D-SACK block (RFC 2883), and the sender, every retransmission of
/// the recovery reported so, undoes it: cwnd and ssthresh as before (Linux
/// `tcp_try_undo_dsack`). Without D-SACK the reduction stands.
#[test]
fn a_recovery_found_spurious_by_dsack_is_undone() {
    let run = |dsack: bool| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.dsack = dsack;
        let mss = cfg.mss as u64;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.late = Box::new(|n| Duration::from_millis(if n == 4 { 10 } else { 0 }));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 30 * mss, io));
        let mut before = None;
        let mut t = Instant::from_millis(100);
        while t < Instant::from_secs(3) {
            let c = p.c[0].as_ref().unwrap();
            if c.stats().fast_retransmits == 0 {
                before = Some((c.cwnd(), c.ssthresh()));
            }
            t += Duration::from_millis(1);
            p.run(t);
        }
        assert_eq!(p.delivered(), 30 * mss);
        // The receiver saw the retransmission as a duplicate: a D-SACK block for it.
        let dsack_sent = p.log.iter().any(|(_, from, h)| {
            let t = h.tcp_repr().unwrap();
            *from == 1
                && t.opts
                    .sack
                    .iter()
                    .next()
                    .is_some_and(|b| b.left.0 < t.ack.0 && b.right.0 - b.left.0 == mss as u32)
        });
        let c = p.c[0].as_ref().unwrap();
        (*c.stats(), before.unwrap(), c.ssthresh(), dsack_sent)
    };
    let (s, (_, ss_before), ss_end, dsack_sent) = run(true);
    assert!(dsack_sent);
    assert_eq!(
        (s.fast_retransmits, s.retransmits, s.timeouts),
        (1, 1, 0),
        "{s:?}"
    );
    assert_eq!((s.dsacks_received, s.dsack_undos), (1, 1), "{s:?}");
    assert!(ss_before > 1 << 40, "slow start before: {ss_before}");
    assert_eq!(ss_end, ss_before, "ssthresh restored");
    let (s, _, ss_end, dsack_sent) = run(false);
    assert!(!dsack_sent);
    assert_eq!(
        (s.fast_retransmits, s.dsacks_received, s.dsack_undos),
        (1, 0, 0),
        "{s:?}"
    );
    assert!(ss_end < 30 * cfg_mss(), "the reduction stands: {ss_end}");
}

fn cfg_mss() -> u64 {
    TcpConfig::profile("linux").unwrap().mss as u64
}

/// The delay from the last data segment's arrival at the receiver to the receiver's next
/// segment (`None`: nothing sent since).
fn ack_delay_of_last_data(p: &Pair) -> Option<Duration> {
    let arrival = p
        .rx_log
        .iter()
        .rev()
        .find(|(_, to, h)| *to == 1 && h.payload_len > 0)?
        .0;
    let ack = p.log.iter().find(|(t, f, _)| *f == 1 && *t >= arrival)?.0;
    Some(ack - arrival)
}

/// The data segments (numbered from 1 as sent) that carry PSH.
fn pushed_segments(p: &Pair) -> Vec<usize> {
    p.log
        .iter()
        .filter(|(_, f, h)| *f == 0 && h.payload_len > 0)
        .enumerate()
        .filter(|(_, (_, _, h))| {
            h.tcp_repr()
                .unwrap()
                .flags
                .contains(asymlink_core::wire::TcpFlags::PSH)
        })
        .map(|(i, _)| i + 1)
        .collect()
}

/// Linux's receiver (`tcp_measure_rcv_mss`, `tcp_cleanup_rbuf`): once quick-ACK mode is
/// over, a lone full-sized segment with PSH (the end of a write) is acknowledged as soon
/// as the application has read it, not after the delayed-ACK timer; one that stays
/// unread waits for the timer (40 ms). (100 ms path; the writes are 300 ms apart, less
/// than the RTO: no quick-ACK mode after a silence.)
#[test]
fn linux_acks_a_pushed_full_segment_when_the_application_reads_it() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.rcv_autotune = false;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(100));
    p.run(Instant::from_millis(300));
    p.with(0, |c, now, io| c.write(now, 16 * 1448, io));
    p.run(Instant::from_millis(600));
    assert_eq!(
        p.c[1].as_ref().unwrap().delack_state(),
        (Duration::from_millis(40), 0)
    );
    p.now = Instant::from_millis(600);
    p.with(0, |c, now, io| c.write(now, 1448, io));
    p.run(Instant::from_millis(900));
    assert_eq!(ack_delay_of_last_data(&p), Some(Duration::ZERO));
    p.with(1, |c, _, _| c.pause_reading());
    p.now = Instant::from_millis(900);
    p.with(0, |c, now, io| c.write(now, 1448, io));
    p.run(Instant::from_millis(1_200));
    assert_eq!(ack_delay_of_last_data(&p), Some(Duration::from_millis(40)));
}

/// Short segments with Linux's receiver (100 ms path, writes 300 ms apart, less than the
/// RTO): outside ping-pong mode one is acknowledged when read; a reply sent within ato of
/// the data puts the receiver in ping-pong mode, where one short segment waits for the
/// delayed-ACK timer (whose expiry ends ping-pong mode) and two short segments before an
/// ACK are acknowledged at the second's read.
#[test]
fn linux_pushed_short_segments_and_ping_pong_mode() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.rcv_autotune = false;
    cfg.nagle = false;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(100));
    p.run(Instant::from_millis(300));
    p.with(0, |c, now, io| c.write(now, 16 * 1448, io));
    p.run(Instant::from_millis(600));
    assert_eq!(p.c[1].as_ref().unwrap().delack_state().1, 0);
    let send = |p: &mut Pair, t: Instant, n: u64| {
        p.run(t);
        p.now = t;
        p.with(0, |c, now, io| c.write(now, n, io));
    };
    let reply = |p: &mut Pair| {
        let arrival = p.rx_log.iter().rev().find(|(_, to, _)| *to == 1).unwrap().0;
        p.now = arrival + Duration::from_millis(1);
        p.with(1, |c, now, io| c.write(now, 100, io));
    };
    let mut t = Instant::from_millis(600);
    // Not in ping-pong mode: acknowledged at the read.
    send(&mut p, t, 100);
    p.run(t + Duration::from_millis(250));
    assert_eq!(ack_delay_of_last_data(&p), Some(Duration::ZERO));
    // One short segment in ping-pong mode (a reply 1 ms after the data): the timer ...
    t += Duration::from_millis(300);
    send(&mut p, t, 100);
    p.run(t + Duration::from_millis(101));
    reply(&mut p);
    t += Duration::from_millis(300);
    send(&mut p, t, 100);
    p.run(t + Duration::from_millis(250));
    assert_eq!(ack_delay_of_last_data(&p), Some(Duration::from_millis(40)));
    // ... whose expiry ended ping-pong mode: the next is acknowledged at the read.
    t += Duration::from_millis(300);
    send(&mut p, t, 100);
    p.run(t + Duration::from_millis(250));
    assert_eq!(ack_delay_of_last_data(&p), Some(Duration::ZERO));
    // Ping-pong mode again; two short segments 5 ms apart: the second is acknowledged
    // at its read, the first not.
    t += Duration::from_millis(300);
    send(&mut p, t, 100);
    p.run(t + Duration::from_millis(101));
    reply(&mut p);
    t += Duration::from_millis(300);
    send(&mut p, t, 100);
    send(&mut p, t + Duration::from_millis(5), 100);
    p.run(t + Duration::from_millis(250));
    let pure_acks: Vec<Instant> = p
        .log
        .iter()
        .filter(|(s, f, h)| *f == 1 && *s >= t && h.payload_len == 0)
        .map(|(s, _, _)| *s)
        .collect();
    assert_eq!(pure_acks.len(), 1, "{pure_acks:?}");
    assert_eq!(ack_delay_of_last_data(&p), Some(Duration::ZERO));
}

/// Linux's sender marks PSH on the last segment of every GSO packet of more than one
/// segment (`__tcp_transmit_skb`): after the handshake a 10 Mbit/s, 40 ms path's pacing
/// rate (2 × 10 × 1448 bytes per SRTT) gives packets of 2 segments (`tcp_tso_autosize`),
/// so every second segment is pushed, as Linux 6.18 does in the lab (before, the
/// simulator pushed segment 23 and the end of the write only). The `rfc` sender pushes
/// the end of the write only.
#[test]
fn linux_sender_marks_psh_on_each_gso_packet() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 40 * 1448, io));
    p.run(Instant::from_secs(2));
    assert_eq!(p.delivered(), 40 * 1448);
    assert_eq!(pushed_segments(&p), (2..=40).step_by(2).collect::<Vec<_>>());
    let mut p = Pair::new(
        &TcpConfig::profile("rfc").unwrap(),
        Rate::mbps(10),
        Duration::from_millis(20),
    );
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 40 * 1448, io));
    p.run(Instant::from_secs(2));
    assert_eq!(pushed_segments(&p), vec![40]);
}

/// On a short fast path (1 Gbit/s, 100 µs RTT) `tcp_tso_autosize` allows 64 KB, and a GSO
/// packet takes at most half the cwnd (`tcp_cwnd_test`): the initial window of 10 leaves
/// as two packets of 5, each pushed on its last segment (Linux 6.18 did the same between
/// two namespaces).
#[test]
fn linux_gso_packets_take_at_most_half_the_cwnd() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(1000), Duration::from_micros(50));
    p.run(Instant::from_millis(10));
    p.with(0, |c, now, io| c.write(now, 10 * 1448, io));
    p.run(Instant::from_secs(2));
    assert_eq!(p.delivered(), 10 * 1448);
    assert_eq!(pushed_segments(&p), vec![5, 10]);
}

/// Linux's send buffer (`linux` profile, `snd_autotune`): at the connection's start
/// twice max(10, cwnd) packets of 2304 bytes (46 080 bytes; BBR three times: 69 120, what
/// `ss -m` showed in the lab); `sndbuf` set by hand fixes it (`SOCK_SNDBUF_LOCK`).
#[test]
fn linux_send_buffer_starts_from_the_initial_window() {
    for (cc, expect) in [(CcAlgo::Cubic, 46_080), (CcAlgo::Bbr, 69_120)] {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.cc = cc;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, u64::MAX / 4, io));
        p.run(Instant::from_millis(101));
        assert_eq!(p.c[0].as_ref().unwrap().sndbuf(), expect, "{cc:?}");
    }
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.sndbuf = Some(300_000);
    cfg.snd_autotune = false;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, u64::MAX / 4, io));
    p.run(Instant::from_secs(3));
    assert_eq!(p.c[0].as_ref().unwrap().sndbuf(), 300_000);
}

/// The buffer grows when a writer waiting for space finds the sender not cwnd-limited
/// (`tcp_new_space`): an endless writer on a 100 Mbit/s, 40 ms path soon has more cwnd
/// than the initial 46 080 bytes hold, and the buffer follows the cwnd (2 × cwnd packets
/// of 2304 bytes); what is in flight is never more than the buffer holds. Without
/// autotuning (`snd_autotune = false`, no `sndbuf`) the buffer is unlimited.
#[test]
fn linux_send_buffer_grows_with_the_cwnd() {
    let cfg = TcpConfig::profile("linux").unwrap();
    let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, u64::MAX / 4, io));
    let mut t = Instant::from_millis(100);
    let mut max_flight_over_buf = 0.0f64;
    for _ in 0..100 {
        t += Duration::from_millis(10);
        p.run(t);
        let c = p.c[0].as_ref().unwrap();
        max_flight_over_buf = max_flight_over_buf.max(c.inflight() as f64 / c.sndbuf() as f64);
    }
    let c = p.c[0].as_ref().unwrap();
    assert!(c.sndbuf() > 400_000, "{}", c.sndbuf());
    assert!(
        c.sndbuf() >= 2 * (c.cwnd() / 1448) * 2304 / 2,
        "{} {}",
        c.sndbuf(),
        c.cwnd()
    );
    assert!(max_flight_over_buf < 1.0, "{max_flight_over_buf}");
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.snd_autotune = false;
    let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, u64::MAX / 4, io));
    p.run(Instant::from_millis(200));
    assert_eq!(p.c[0].as_ref().unwrap().sndbuf(), u64::MAX);
}

/// A BBR sender whose buffer holds less than its cwnd runs out of unsent data: the
/// writer, woken once a third of the buffer is free, finds nothing unsent and room in
/// cwnd, so what follows is app-limited (`tcp_rate_check_app_limited` at its `send()`).
/// Linux's autotuned buffer (69 120 bytes for BBR) ran out so in the lab's STARTUP on the
/// slow ACK path. A 30 000-byte buffer runs out every round trip; with 4 MB nothing is
/// app-limited after the connection's start.
#[test]
fn a_bbr_writer_that_runs_out_of_buffer_is_app_limited() {
    let app_limited_from = |sndbuf: Option<u64>| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.cc = CcAlgo::Bbr;
        if sndbuf.is_some() {
            cfg.sndbuf = sndbuf;
            cfg.snd_autotune = false;
        }
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, u64::MAX / 4, io));
        let mut marked: Vec<u64> = Vec::new();
        for ms in 101..=600u64 {
            p.run(Instant::from_millis(ms));
            if p.c[0].as_ref().unwrap().app_limited() {
                marked.push(ms);
            }
        }
        (marked, p.c[0].as_ref().unwrap().sndbuf())
    };
    let (marked, buf) = app_limited_from(Some(30_000));
    assert_eq!(buf, 30_000);
    let later = |m: &[u64]| m.iter().filter(|&&ms| ms > 120).count();
    assert!(later(&marked) > 100, "{marked:?}");
    // Every round trip (about 60 ms here): marked in each 100 ms from 150 ms on.
    for from in (150..600).step_by(100) {
        assert!(
            marked.iter().any(|&ms| ms >= from && ms < from + 100),
            "{from}: {marked:?}"
        );
    }
    let (marked, _) = app_limited_from(Some(4_000_000));
    assert_eq!(later(&marked), 0, "{marked:?}");
}

/// A writer limited by a small fixed buffer (4 packets' memory): it waits until the
/// buffer has half as much room as the queue takes, and each time it fills the buffer it
/// pushes what it copied last (`tcp_push` before it waits).
#[test]
fn a_linux_writer_pushes_what_it_copied_before_it_waits() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.sndbuf = Some(4 * 2304);
    cfg.snd_autotune = false;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 12 * 1448, io));
    p.run(Instant::from_secs(2));
    assert_eq!(p.delivered(), 12 * 1448);
    let pushed = pushed_segments(&p);
    assert!(pushed.contains(&12), "{pushed:?}");
}

mod paced;

/// A writer of 64 KiB `send()` calls (a non-blocking writer woken by `select()`), BBR
/// with Linux's autotuned buffer (69 120 bytes at first): the first call copies all it is
/// given, and the next comes only once the socket is writable (half as much room as the
/// queue takes), so the first call's 65 536 bytes are all the sender has until ACKs free
/// a third of the buffer, as in the lab; one endless write copies on until the buffer is
/// full (three buffers of half the window, 95 568 bytes). Smaller calls follow each other
/// while the socket stays writable.
#[test]
fn a_writer_of_64k_calls_waits_until_the_socket_is_writable() {
    let copied = |write_size: u64| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.cc = CcAlgo::Bbr;
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| {
            c.set_write_size(write_size);
            c.write(now, u64::MAX / 4, io)
        });
        // Before the first ACK of data (40 ms after the write, at the handshake's end).
        let written = p.now;
        p.run(written + Duration::from_millis(30));
        let c = p.c[0].as_ref().unwrap();
        assert_eq!(c.sndbuf(), 69_120);
        c.stats().bytes_sent + c.notsent_bytes()
    };
    assert_eq!(copied(65_536), 65_536);
    assert_eq!(copied(0), 3 * 31_856);
    assert_eq!(copied(16_384), 3 * 16_384);
}

/// BBR behind a writer of 64 KiB calls with Linux's autotuned buffer (69 120 bytes at
/// first), on the lab's slow ACK path (10 Mbit/s forward, ACKs over 100 kbit/s, a 64 KiB
/// window): in STARTUP the flow sends all the first call copied while the writer waits
/// for a third of the buffer, so the next call finds nothing unsent and room in cwnd and
/// marks the flow app-limited, as Linux's did in the lab at 0.16 s; one endless write
/// keeps ahead of the cwnd there.
#[test]
fn a_bbr_writer_of_64k_calls_is_app_limited_in_startup() {
    let marked = |write_size: u64| {
        let mut cfg = TcpConfig::profile("linux").unwrap();
        cfg.cc = CcAlgo::Bbr;
        cfg.so_rcvbuf = Some(128 << 10);
        cfg.window_clamp = Some(64 << 10);
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
        p.pipes[1].rate = Rate::kbps(100);
        p.run(Instant::from_millis(100));
        let written = p.now;
        p.with(0, |c, now, io| {
            c.set_write_size(write_size);
            c.write(now, u64::MAX / 4, io)
        });
        let mut marked = Vec::new();
        for ms in 1..=600u64 {
            p.run(written + Duration::from_millis(ms));
            if p.c[0].as_ref().unwrap().app_limited() {
                marked.push(ms);
            }
        }
        marked
    };
    // Both are app-limited at first (the first write finds nothing unsent), until the
    // first segments are delivered.
    let later = |m: &[u64]| m.iter().copied().filter(|&ms| ms > 60).collect::<Vec<_>>();
    let calls = later(&marked(65_536));
    assert!(
        calls.len() > 40 && calls.iter().all(|&ms| (100..250).contains(&ms)),
        "{calls:?}"
    );
    assert_eq!(later(&marked(0)), Vec::<u64>::new());
}

/// A small deterministic generator for the randomised tests below (splitmix64).
struct Mix(u64);

impl Mix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn chance(&mut self, per_mille: u64) -> bool {
        self.below(1000) < per_mille
    }
}

/// Everything both ends sent, received and reported in one randomised exchange, and
/// how many segments header prediction took.
type Outcome = (Vec<String>, u64);

/// One randomised exchange (configuration, path, losses, CE marks, reordering, writes in
/// both directions, a receiver that stops reading for a while, close) from `seed`, with
/// header prediction on or off.
fn exchange(seed: u64, predict: bool) -> Outcome {
    super::conn::prediction::OFF.with(|c| c.set(!predict));
    super::conn::prediction::TAKEN.with(|c| c.set(0));
    let mut r = Mix(seed);
    let mut cfg = TcpConfig::profile(["paper", "rfc", "linux"][r.below(3) as usize]).unwrap();
    cfg.sack = r.chance(700);
    cfg.timestamps = r.chance(500);
    cfg.ecn = r.chance(400);
    cfg.dsack = r.chance(500);
    cfg.rack = cfg.sack && r.chance(300);
    cfg.tlp = r.chance(300);
    cfg.hystart = r.chance(400);
    cfg.rcv_autotune = r.chance(400);
    cfg.cc = [CcAlgo::Reno, CcAlgo::NewReno, CcAlgo::Cubic, CcAlgo::Bbr][r.below(4) as usize];
    cfg.pacing = r.chance(300);
    cfg.delack_mode = if r.chance(500) {
        DelackMode::Linux
    } else {
        DelackMode::Fixed
    };
    cfg.grow_by = if r.chance(500) {
        GrowBy::Delivered
    } else {
        GrowBy::Acked
    };
    let rate = Rate::mbps(1 + r.below(40));
    let delay = Duration::from_micros(500 + r.below(30_000));
    let mut p = Pair::new(&cfg, rate, delay);
    let (loss, ce, late) = (
        r.below(4) * r.below(10),
        r.below(3) * r.below(30),
        r.below(3) * r.below(20),
    );
    let mut pr = Mix(r.next());
    p.drop = Box::new(move |_, _| pr.chance(loss));
    let mut pm = Mix(r.next());
    p.mark = Box::new(move |_| pm.chance(ce));
    let mut pl = Mix(r.next());
    p.late = Box::new(move |_| {
        if pl.chance(late) {
            Duration::from_micros(pl.below(20_000))
        } else {
            Duration::ZERO
        }
    });
    p.run(Instant::from_millis(100));
    let up = 1 + r.below(400_000);
    let down = if r.chance(300) { r.below(200_000) } else { 0 };
    p.with(0, |c, now, io| c.write(now, up, io));
    if down > 0 {
        p.with(1, |c, now, io| c.write(now, down, io));
    }
    let pause = r.chance(300).then(|| 200 + r.below(2_000));
    if let Some(ms) = pause {
        p.run(Instant::from_millis(ms));
        p.with(1, |c, _, _| c.pause_reading());
        p.run(Instant::from_millis(ms + 300 + r.below(1_000)));
        p.with(1, |c, now, io| c.resume_reading(now, io));
    }
    p.run(Instant::from_secs(8));
    p.with(0, |c, now, io| c.close(now, io));
    p.with(1, |c, now, io| c.close(now, io));
    p.run(Instant::from_secs(30));
    let mut seen: Vec<String> = p
        .log
        .iter()
        .chain(&p.rx_log)
        .map(|(t, i, h)| format!("{t:?} {i} {h:?}"))
        .collect();
    for i in 0..2 {
        seen.push(format!("{:?}", p.events[i]));
        seen.push(format!("{}", p.timer_calls[i]));
        if let Some(c) = &p.c[i] {
            seen.push(format!(
                "{:?} {:?} {:?} {} {} {:?} {:?} {} {:?} {:?} {:?} {}",
                c.state(),
                c.ca_state(),
                c.stats(),
                c.cwnd(),
                c.ssthresh(),
                c.srtt(),
                c.rto(),
                c.snd_wnd(),
                c.delack_state(),
                c.rcvbuf_autotuned(),
                c.poll_at(),
                c.unread_bytes(),
            ));
        }
    }
    let taken = super::conn::prediction::TAKEN.with(|c| c.get());
    super::conn::prediction::OFF.with(|c| c.set(false));
    (seen, taken)
}

/// Header prediction changes nothing: on random exchanges, everything sent, received and
/// reported is the same with the fast path as with the general path alone.
#[test]
fn header_prediction_matches_the_general_path() {
    let (mut taken, mut segments) = (0, 0);
    for seed in 0..160 {
        let (fast, n) = exchange(seed, true);
        let (general, none) = exchange(seed, false);
        assert_eq!(none, 0);
        assert_eq!(fast.len(), general.len(), "seed {seed}");
        for (i, (a, b)) in fast.iter().zip(&general).enumerate() {
            assert_eq!(a, b, "seed {seed}, entry {i}");
        }
        taken += n;
        segments += fast.len() as u64;
    }
    // The fast path took part of the segments (about half of what is logged are
    // arrivals; RACK, BBR, losses and CE marks send many to the general path).
    assert!(taken * 20 > segments, "{taken} of {segments}");
}

/// A bulk transfer without loss takes the fast path at nearly every arrival (all but
/// the handshake and the close) where RACK is off, and never with RACK (the paper and
/// rfc profiles against linux).
#[test]
fn header_prediction_takes_a_clean_bulk_transfer() {
    for (profile, share) in [("paper", 99.0), ("rfc", 99.0), ("linux", 0.0)] {
        let cfg = TcpConfig::profile(profile).unwrap();
        super::conn::prediction::TAKEN.with(|c| c.set(0));
        let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(10));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| c.write(now, 3_000_000, io));
        p.run(Instant::from_secs(30));
        assert_eq!(p.delivered(), 3_000_000);
        let taken = super::conn::prediction::TAKEN.with(|c| c.get()) as f64;
        let pct = 100.0 * taken / p.rx_log.len() as f64;
        assert!(
            pct >= share && (share > 0.0 || taken == 0.0),
            "{profile}: {pct}%"
        );
    }
}

/// A Linux sender held by a 64 KiB receive window (not a whole number of segments: 45 of
/// 1448 bytes and 376 over) fills the window to its edge: the GSO packet that reaches the
/// edge ends in a short segment (`tcp_mss_split_point`), about once per round trip, so
/// 65 536 bytes, 46 segments, are in flight, as in the lab's captures; a sender that
/// stopped at segment boundaries would keep 45 (65 160 bytes). BBR, CUBIC paced as over
/// `fq`, and unpaced CUBIC; BBR's delivery-rate samples count the short segment as one.
/// The `rfc` sender stops at segment boundaries.
#[test]
fn a_linux_sender_fills_a_receive_window_to_its_edge() {
    for (cc, pacing, fills) in [
        (CcAlgo::Bbr, false, true),
        (CcAlgo::Cubic, true, true),
        (CcAlgo::Cubic, false, true),
        (CcAlgo::NewReno, false, false),
    ] {
        let mut cfg = if fills {
            TcpConfig::profile("linux").unwrap()
        } else {
            let mut c = TcpConfig::profile("rfc").unwrap();
            c.rcvbuf = 65_536;
            c.mss = 1448;
            c
        };
        cfg.cc = cc;
        cfg.pacing = pacing;
        if fills {
            cfg.so_rcvbuf = Some(131_072);
            cfg.window_clamp = Some(65_536);
        }
        let mut p = Pair::new(&cfg, Rate::mbps(100), Duration::from_millis(20));
        p.run(Instant::from_millis(100));
        p.with(0, |c, now, io| {
            c.set_write_size(65_536);
            c.write(now, u64::MAX / 4, io)
        });
        let mut max_flight = 0;
        for ms in 1..=2000u64 {
            p.run(Instant::from_millis(100 + ms));
            let c = p.c[0].as_ref().unwrap();
            max_flight = max_flight.max(c.inflight());
        }
        let short: Vec<u64> = p
            .log
            .iter()
            .filter(|(_, f, h)| *f == 0 && h.payload_len > 0 && h.payload_len < 1448)
            .map(|(_, _, h)| h.payload_len as u64)
            .collect();
        if !fills {
            assert_eq!((max_flight, short.len()), (65_160, 0), "{cc:?}");
            continue;
        }
        assert_eq!(max_flight, 65_536, "{cc:?} {pacing}");
        assert!(
            short.len() >= 10 && short.iter().all(|&l| l == 376),
            "{cc:?} {short:?}"
        );
        if let Some(b) = p.c[0].as_ref().unwrap().bbr_info() {
            // 46 segments a round trip (45 if it stopped at segment boundaries).
            let segs = b.bw as f64 * b.min_rtt.unwrap().as_secs_f64() / 1448.0;
            assert!(segs > 45.5, "{segs}");
        }
    }
}

/// Linux's unpaced CUBIC sender on the lab's slow ACK path (10 Mbit/s forward, 20 ms each
/// way, ACKs over 100 kbit/s; a 64 KiB window; a writer of 64 KiB `send()` calls), as
/// Linux 6.18 sent in the lab (`ackfilter-off`): GSO packets of two segments, each pushed
/// on its last, and at the window's edge a full segment and a short one (376 bytes) that
/// fills the window; the receiver acknowledges every packet whole, and no ACK covers a
/// single full segment after the quick ACKs of the start. PSH goes only on a packet's
/// last segment (GSO clears it on the others, `tcp_gso_segment`), so where the writer
/// pushed (the end of a `send()`, `forced_push`) no segment is pushed alone. Before, the
/// sender stopped at segment boundaries, sending a lone segment at the window's edge, and
/// pushed the writer's marks inside packets; each lone pushed segment was acknowledged
/// alone at its read (`tcp_cleanup_rbuf`), the single segment that ACK let out shifted
/// the receiver's pairs, and that went on each round trip (about 20 one-segment ACKs a
/// second).
#[test]
fn linux_unpaced_sender_keeps_its_packets_whole_on_a_slow_ack_path() {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.so_rcvbuf = Some(131_072);
    cfg.window_clamp = Some(65_536);
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.pipes[1].rate = Rate::kbps(100);
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| {
        c.set_write_size(65_536);
        c.write(now, u64::MAX / 4, io)
    });
    p.run(Instant::from_secs(6));
    let from = Instant::from_secs(1);
    // Segments per push from 1 s on (the first run starts wherever the window does).
    let mut runs = std::collections::BTreeMap::new();
    let mut n = 0;
    let mut short = 0;
    for (t, _, h) in p
        .log
        .iter()
        .filter(|(_, f, h)| *f == 0 && h.payload_len > 0)
    {
        if *t < from {
            continue;
        }
        n += 1;
        if (h.payload_len as u64) < 1448 {
            short += 1;
            assert_eq!(h.payload_len, 376);
        }
        if h.tcp_repr()
            .unwrap()
            .flags
            .contains(asymlink_core::wire::TcpFlags::PSH)
        {
            *runs.entry(n).or_insert(0) += 1;
            n = 0;
        }
    }
    let pairs = runs.get(&2).copied().unwrap_or(0);
    assert!(pairs > 1_000, "{runs:?}");
    assert!(runs.keys().skip(1).all(|&k| k == 2), "{runs:?}");
    assert!(runs.get(&1).copied().unwrap_or(0) <= 1, "{runs:?}");
    // About one short segment a round trip (about 100 ms here).
    assert!((35..=60).contains(&short), "{short}");
    let acks: Vec<u64> = acks_in(&p)
        .iter()
        .filter(|a| a.0 >= from)
        .map(|a| a.1)
        .collect();
    let single = acks.windows(2).filter(|w| w[1] - w[0] == 1448).count();
    assert_eq!(single, 0, "{} ACKs", acks.len());
}
