//! One direction of a link: the modem buffer, the serialiser, random loss and the delay
//! line, and the logic that asks the discipline for packets. The simulator's links and the
//! live box's emulated links are this one type, driven by two runtimes.
//!
//! ```text
//!  discipline (`queue`) ──► modem buffer (`modem_buffer`, drop-tail) ──► serialiser
//!     (`rate`, `packet_rate`, `linklayer`) ──► random and scripted loss (`loss`, `drop`)
//!     ──► delay line (`delay`)
//! ```
//!
//! * **Without a modem buffer** the discipline *is* the link's queue: it is asked for a
//!   packet only when the serialiser is idle, so whatever queues, queues where the
//!   discipline can manage it.
//! * **With a modem buffer** the discipline is drained as fast as it releases packets into
//!   a drop-tail FIFO of that size (counted as `modem_buffer_full` drops when full): the
//!   buffer of a modem after the router that feeds it. A discipline that does not shape
//!   below the line rate leaves the queue here (the ADSL problem); one that does keeps it
//!   in the discipline.
//! * The serialiser charges `linklayer.wire_len(ip_len)` bytes at `rate` (ATM cells, PTM,
//!   Ethernet: [`LinkLayer`]) in integer nanoseconds; a packet-clocked direction
//!   (`packet_rate`) holds it `1/packet_rate` per packet, the longer of the two when both
//!   are set. A transmission starts at `max(serialiser free, packet available)`: a driver
//!   that calls late (a real clock) catches up without exceeding the rate, and an idle
//!   link banks no credit.
//! * A trace-driven direction (`trace`, see [`crate::trace`]) has no serialiser rate: it
//!   serves packets in 1500-byte delivery opportunities at the times a mahimahi trace
//!   gives, and asks the discipline for a packet only when an opportunity can take it.
//! * Loss is drawn per packet from the link's own seeded [`Rng`] as its transmission
//!   starts; a lost packet still occupies the serialiser (it was sent, then corrupted) and
//!   goes to the caller's [`Drops`] as `link_loss`. Scripted loss (`drop`, see
//!   [`crate::script`]) drops chosen packets at the same point, also as `link_loss`.
//! * Propagation is a FIFO delay line: only its head is a deadline. With `jitter` (see
//!   [`crate::jitter`]) each packet's delay gets an extra draw from the same stream, and
//!   a packet never arrives before the one ahead of it.
//!
//! # Driving a link (sans-IO)
//!
//! [`Link::pull`] asks a [`Feed`] (the discipline, or a middlebox direction) for packets
//! while the link takes them, remembering a "not before t" answer; [`Link::poll_at`] says
//! when the link next needs a call (the serialiser frees up with packets waiting, the
//! discipline's "not before", the head of the delay line); [`Link::pop_arrival`] and
//! [`Link::poll`] hand over the packets whose propagation has ended. A discipline that
//! watches the link go idle ([`Qdisc::wants_idle_dequeue`](crate::qdisc::Qdisc)) is asked
//! once more when the serialiser frees up after a transmission, even with nothing queued.

use crate::classify::ClassifierConfig;
use crate::config::ConfigError;
use crate::jitter::{Jitter, JitterLine};
use crate::overhead::{LinkLayer, LinkLayerConfig};
use crate::packet::Pkt;
use crate::pipeline::EgressConfig;
use crate::qdisc::{
    Dequeued, DropReason, DropSide, Drops, FifoConfig, QdiscConfig, QdiscStats, Stage, Verdict,
};
use crate::rand::{derive_seed, Rng};
use crate::script::{DropRule, Script};
use crate::time::{dur_ns, earliest, Instant};
use crate::trace::{TraceLine, TraceSpec};
use crate::units::{Limit, Rate, Span};
use serde::Deserialize;
use std::collections::VecDeque;

/// One direction of a link, as scenario files (`[[links]]`, link-wide and per direction
/// `to_a` / `to_b`) and the live box (`[emulation.to_a]`, `[emulation.to_b]`) write it.
/// Every field is optional.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkConfig {
    /// Serialisation rate of the link-layer bytes (absent: no time per bit).
    #[serde(default)]
    pub rate: Option<Rate>,
    /// Packets per second: each packet holds the serialiser `1/packet_rate` whatever its
    /// size (a packet-clocked router); with `rate` too, the longer of the two.
    #[serde(default)]
    pub packet_rate: Option<u32>,
    /// A delivery schedule in mahimahi's format instead of `rate` (see
    /// [`crate::trace`]): a file relative to the configuration file, or `builtin:NAME`.
    /// Loaded by the driver ([`TraceSpec::load`]) before the link is built.
    #[serde(default)]
    pub trace: Option<TraceSpec>,
    /// One-way propagation delay.
    #[serde(default)]
    pub delay: Option<Span>,
    /// Extra delay per packet, drawn from the link's random stream, without reordering
    /// (see [`crate::jitter`]).
    #[serde(default)]
    pub jitter: Option<Jitter>,
    /// Random loss probability per packet, in [0, 1].
    #[serde(default)]
    pub loss: Option<f64>,
    /// Scripted loss: chosen packets to drop (see [`crate::script`]).
    #[serde(default)]
    pub drop: Option<Vec<DropRule>>,
    /// How IP packets are charged on the wire (default: raw IP bytes).
    #[serde(default)]
    pub linklayer: Option<LinkLayerConfig>,
    /// The drop-tail buffer between the discipline and the line (absent: none, the
    /// discipline feeds the line).
    #[serde(default)]
    pub modem_buffer: Option<Limit>,
    /// The queue discipline feeding the link (simulator links; the box configures its
    /// disciplines in `[to_a]` / `[to_b]`).
    #[serde(default)]
    pub queue: Option<QdiscConfig>,
    /// The classifier in front of the discipline (simulator links, as `queue`).
    #[serde(default)]
    pub classifier: Option<ClassifierConfig>,
}

impl LinkConfig {
    /// This configuration with every unset field taken from `base` (a per-direction
    /// table over the link-wide one). A `trace` here replaces the base's `rate` and
    /// `packet_rate`, and a `rate` or `packet_rate` here replaces the base's `trace`.
    pub fn or(&self, base: &LinkConfig) -> LinkConfig {
        let own_trace = self.trace.is_some();
        let own_rate = self.rate.is_some() || self.packet_rate.is_some();
        LinkConfig {
            rate: self.rate.or(base.rate.filter(|_| !own_trace)),
            packet_rate: self.packet_rate.or(base.packet_rate.filter(|_| !own_trace)),
            trace: self
                .trace
                .clone()
                .or_else(|| base.trace.clone().filter(|_| !own_rate)),
            delay: self.delay.or(base.delay),
            jitter: self.jitter.or(base.jitter),
            loss: self.loss.or(base.loss),
            drop: self.drop.clone().or_else(|| base.drop.clone()),
            linklayer: self.linklayer.or(base.linklayer),
            modem_buffer: self.modem_buffer.or(base.modem_buffer),
            queue: self.queue.clone().or_else(|| base.queue.clone()),
            classifier: self.classifier.clone().or_else(|| base.classifier.clone()),
        }
    }

    /// Check the values of the line (rates, loss, buffer).
    /// Errors name the key within the link's table.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let e = |key: &str, msg: &str| Err(ConfigError::new(key, msg));
        if let Some(p) = self.loss {
            if !(0.0..=1.0).contains(&p) {
                return e("loss", "must be a probability in [0, 1]");
            }
        }
        if let Some(d) = &self.drop {
            crate::script::validate(d)?;
        }
        if let Some(j) = &self.jitter {
            j.validate()?;
        }
        if self.rate.is_some_and(|r| r.0 == 0) {
            return e("rate", "must be positive");
        }
        if self.trace.is_some() && (self.rate.is_some() || self.packet_rate.is_some()) {
            let other = if self.rate.is_some() {
                "rate"
            } else {
                "packet_rate"
            };
            return Err(ConfigError::new(
                "trace",
                format!(
                    "give either 'trace' or '{other}', not both (a trace sets the \
                     link's capacity)"
                ),
            ));
        }
        if self.packet_rate == Some(0) {
            return e("packet_rate", "must be a positive number of packets/s");
        }
        if matches!(
            self.modem_buffer,
            Some(Limit::Packets(0)) | Some(Limit::Bytes(0))
        ) {
            return e("modem_buffer", "must be positive");
        }
        Ok(())
    }

    /// The rate disciplines and mechanisms see as the link's: `rate`, or a loaded
    /// trace's mean rate.
    pub fn nominal_rate(&self) -> Option<Rate> {
        self.rate.or_else(|| {
            self.trace
                .as_ref()
                .and_then(|t| t.trace.as_ref())
                .map(|t| t.mean_rate())
        })
    }

    /// The classifier and discipline feeding the link.
    pub fn egress(&self) -> EgressConfig {
        EgressConfig {
            classifier: self.classifier.clone(),
            qdisc: self.queue.clone(),
        }
    }

    /// Whether the line does nothing (no rate, delay, loss or buffer): a plain wire.
    pub fn is_plain_wire(&self) -> bool {
        self.rate.is_none()
            && self.packet_rate.is_none()
            && self.trace.is_none()
            && self.delay.is_none_or(|d| d.0.is_zero())
            && self.jitter.is_none_or(|j| j.is_zero())
            && self.loss.is_none_or(|p| p == 0.0)
            && self.modem_buffer.is_none()
            && self.drop.as_ref().is_none_or(|d| d.is_empty())
    }
}

/// The seed of the loss stream of direction `dir` (`"to_a"` / `"to_b"`) of link `link`,
/// derived from a run's master seed. Both runtimes draw a link's losses from this stream
/// (the box names its two links after its sides, `a` and `b`).
pub fn loss_seed(master: u64, link: &str, dir: &str) -> u64 {
    derive_seed(master, &format!("loss:{link}:{dir}"))
}

/// Where a link takes its packets from: a discipline, or one direction of a middlebox.
pub trait Feed<P> {
    /// The next packet to send at `now` (see [`Dequeued`]); discards go to `drops`.
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P>;
    /// When `p` became available to the feed (at most `now`). A driver whose calls come
    /// exactly when something happens (the simulator) keeps the default, `now`; one that
    /// may call late (a real clock) returns the packet's arrival so the serialiser
    /// catches up.
    fn available_since(&self, _p: &P, now: Instant) -> Instant {
        now
    }
    /// Whether the feed holds no packet (`None`: it does not say). A trace-driven line
    /// gives up the opportunities before a [`Link::pull`] while its feed is empty; a
    /// driver that may call late says when a packet is waiting, so that the line keeps
    /// the opportunity that packet can use instead of skipping past it at every late
    /// call. The default (the feed is taken as empty until it hands over a packet) suits
    /// a driver that calls exactly when something happens.
    fn is_empty(&self) -> Option<bool> {
        None
    }
}

/// A transmission that started, for drivers that trace or capture them.
#[derive(Debug)]
pub struct Tx<'a, P> {
    /// When the serialisation started.
    pub start: Instant,
    /// How long it holds the serialiser, ns.
    pub tx_ns: u64,
    /// Bytes charged on the wire (after the link layer).
    pub wire_len: u32,
    /// Whether it is lost (it still occupied the serialiser).
    pub lost: bool,
    /// The packet.
    pub pkt: &'a P,
}

/// Counters of one link direction: those every packet changes first (`repr(C)`, 56
/// bytes), then those of losses and the modem buffer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[repr(C)]
pub struct LinkStats {
    /// Packets handed over by the discipline.
    pub offered: u64,
    /// Transmissions started: packets and IP bytes.
    pub sent: u64,
    /// IP bytes of the transmissions started.
    pub sent_bytes: u64,
    /// Wire bytes charged by the serialiser (after the link layer).
    pub wire_bytes: u64,
    /// Time the serialiser was busy, ns (trace-driven: the wire bytes' time at the
    /// trace's mean rate, so that `busy_ns` over the run's length is the share of the
    /// trace's capacity used).
    pub busy_ns: u64,
    /// Packets that finished propagation.
    pub delivered: u64,
    /// IP bytes delivered.
    pub delivered_bytes: u64,
    /// Packets lost on the line (random and scripted loss).
    pub lost: u64,
    /// Of those, packets the `drop` script chose.
    pub scripted: u64,
    /// Packets dropped because the modem buffer was full.
    pub modem_dropped: u64,
    /// Highest modem-buffer occupancy in packets.
    pub max_modem_packets: u32,
}

/// Ask the processor to bring the cache line that holds `*r` (its first byte) into its
/// caches: a hint that changes no value (nothing on other architectures than x86-64).
#[inline(always)]
fn prefetch<T>(r: &T) {
    prefetch_ptr((r as *const T).cast::<u8>());
}

/// [`prefetch`] of the line at `p`, which need not point to anything (a prefetch never
/// faults).
#[inline(always)]
#[allow(unsafe_code, reason = "the prefetch intrinsic; it cannot fault")]
fn prefetch_ptr(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch reads nothing the program sees and cannot fault, whatever the
    // address.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// How many entries ahead in a ring the line prefetches what it will read or write: the
/// arrival after next, the packet queued after the next, the transmission after next.
/// A long ring (a bottleneck's queue and delay line) is far larger than the caches and
/// each entry is touched once per lap, so every such access is otherwise a trip to
/// memory; the next entry's is overlapped with the work in between. (Measured: two
/// entries ahead beat one, four, eight and sixteen.)
const PREFETCH_AHEAD: usize = 2;

/// Packets of room a delay line keeps however empty it gets.
const WIRE_KEEP: usize = 16;

/// A delay line gives memory back at most once in this time (ns): the flight of a window
/// comes and goes once per round trip, and memory given back between two flights is
/// only allocated again (and the line copied) for the next.
const WIRE_SHRINK_GAP_NS: u64 = 100_000_000;

/// How a packet waits on a delay line together with its arrival time: an entry of the
/// line. [`Paired`] keeps the two side by side; a packet type with a field it does not
/// need while it propagates can keep the arrival time there, so that an entry is the
/// packet alone (the simulator's packets: one cache line per entry).
pub trait OnWire: Sized {
    /// An entry of the delay line.
    type Entry;
    /// The entry of `self`, arriving at `at`.
    fn to_wire(self, at: Instant) -> Self::Entry;
    /// The arrival time of an entry.
    fn arrival(e: &Self::Entry) -> Instant;
    /// The packet of an entry, as it was handed to [`OnWire::to_wire`] (a field used to
    /// keep the arrival time may hold anything).
    fn off_wire(e: Self::Entry) -> Self;
    /// The entry of a packet that waits in the link's own FIFO ([`Link::own_fifo`]): the
    /// packet as it is, its arrival time set when it goes onto the line
    /// ([`OnWire::depart`]).
    fn waiting(self) -> Self::Entry;
    /// The packet of an entry that waits ([`OnWire::waiting`]).
    fn pkt(e: &Self::Entry) -> &Self;
    /// A waiting entry goes onto the line, arriving at `at` (as [`OnWire::to_wire`], in
    /// place).
    fn depart(e: &mut Self::Entry, at: Instant);
}

/// A delay line's entry that keeps the arrival time beside the packet (implement
/// [`OnWire`] with `type Entry = Paired<Self>` and the helpers below).
#[derive(Debug)]
pub struct Paired<P> {
    at: Instant,
    pkt: P,
}

impl<P> Paired<P> {
    /// `pkt`, arriving at `at`.
    #[inline]
    pub fn new(pkt: P, at: Instant) -> Paired<P> {
        Paired { at, pkt }
    }
    /// The arrival time.
    #[inline]
    pub fn at(&self) -> Instant {
        self.at
    }
    /// The packet.
    #[inline]
    pub fn into_pkt(self) -> P {
        self.pkt
    }
    /// The packet, borrowed.
    #[inline]
    pub fn pkt(&self) -> &P {
        &self.pkt
    }
    /// Set the arrival time.
    #[inline]
    pub fn set_at(&mut self, at: Instant) {
        self.at = at;
    }
}

impl OnWire for crate::packet::HeaderPacket {
    type Entry = Paired<Self>;
    #[inline]
    fn to_wire(self, at: Instant) -> Paired<Self> {
        Paired::new(self, at)
    }
    #[inline]
    fn arrival(e: &Paired<Self>) -> Instant {
        e.at()
    }
    #[inline]
    fn off_wire(e: Paired<Self>) -> Self {
        e.into_pkt()
    }
    #[inline]
    fn waiting(self) -> Paired<Self> {
        Paired::new(self, Instant::ZERO)
    }
    #[inline]
    fn pkt(e: &Paired<Self>) -> &Self {
        e.pkt()
    }
    #[inline]
    fn depart(e: &mut Paired<Self>, at: Instant) {
        e.set_at(at);
    }
}

/// A drop-tail FIFO that is a link's own discipline, its packets waiting in the delay
/// line's ring ([`Link::own_fifo`]). The limit and the counters a packet changes come
/// first (`QdiscStats`' first 64 bytes): the discard counters after them are cold.
#[derive(Debug)]
#[repr(C)]
struct OwnFifo {
    limit: Limit,
    stats: QdiscStats,
}

/// Bytes of [`QdiscStats`] a packet through a link's own FIFO reads or writes: its
/// per-packet counters, up to the discard counters (touched only by discards).
const QDISC_STATS_HOT: usize = core::mem::offset_of!(QdiscStats, rejected);

/// One direction of a link (see the module documentation).
///
/// The fields are in the order a packet goes through them (`repr(C)`), those it reads or
/// writes first, the configuration it needs only when the packet length changes (rate,
/// link layer), the random stream and the modem buffer's byte count last: where tens of
/// thousands of link directions are simulated, none of a direction's state is cached
/// when its next packet comes, and every cache line its packet touches is a trip to
/// memory ([`Link::hot_len`]).
#[derive(Debug)]
#[repr(C)]
pub struct Link<P: OnWire> {
    /// The delay line: packets with their arrival times, in order; with the link's own
    /// FIFO, followed by the `queued` packets waiting for the serialiser.
    wire: VecDeque<P::Entry>,
    /// Entries at the tail of `wire` that wait for the serialiser (the link's own FIFO).
    queued: usize,
    stats: LinkStats,
    /// The serialiser is busy until then (trace-driven: the time of the current
    /// opportunity, when the line can next start a packet).
    free_at: Instant,
    modem: Option<Limit>,
    /// The discipline's last "not before" answer (or the instant it answered "empty").
    ready: Option<Instant>,
    /// The discipline answered `Empty` and has not been asked since.
    feed_empty: bool,
    /// The discipline wants a `dequeue` each time the serialiser frees up.
    idle_dequeue: bool,
    /// A packet went onto the serialiser since the discipline last answered `Empty`.
    idle_pending: bool,
    /// Its packets are taken off the line as they start ([`Link::set_export`]).
    export: bool,
    /// The last packet length serialised at the rate (not trace-driven), with its wire
    /// length and transmission time: successive packets of a direction mostly have one
    /// length (`u64::MAX`: none yet).
    memo_wire: u32,
    memo_len: u64,
    memo_ns: u64,
    delay_ns: u64,
    loss: f64,
    /// The delay jitter, if any; boxed as `script` is.
    jitter: Option<Box<JitterLine>>,
    /// Boxed: rarely configured, and a link direction's size counts where thousands are
    /// simulated.
    script: Option<Box<Script>>,
    /// The trace-driven line, if any (then `rate` and `packet_ns` are unused and
    /// `free_at` is the time of its current opportunity); boxed as `script` is.
    trace: Option<Box<TraceLine>>,
    /// The modem buffer: (packet, when it became available to the serialiser).
    buffer: VecDeque<(P, Instant)>,
    /// The link's own FIFO, if the discipline is one kept in the delay line's ring (its
    /// limit and per-packet counters are the last fields a packet touches).
    own: Option<OwnFifo>,
    // Read only when a packet's length changes, with loss or jitter, with a modem
    // buffer, or now and then.
    rate: Option<Rate>,
    packet_ns: u64,
    ll: LinkLayer,
    rng: Rng,
    buffer_bytes: u64,
    /// Trace-driven: when the last packet's last byte went.
    last_end: Instant,
    /// The delay line may give memory back from then on (ns).
    wire_shrink_at: u64,
}

impl<P: OnWire> Link<P> {
    /// Bytes at the start of a link direction that hold every field a packet through it
    /// reads or writes when its line is a plain serialiser and delay (with or without its
    /// own FIFO); the configuration read when the packet length changes, the random
    /// stream, the modem buffer's byte count and the discard counters come after.
    pub fn hot_len() -> usize {
        core::mem::offset_of!(Self, own) + core::mem::offset_of!(OwnFifo, stats) + QDISC_STATS_HOT
    }
}

impl<P: Pkt + OnWire> Link<P> {
    /// A link direction drawing its losses from `rng`; `idle_dequeue` as the feeding
    /// discipline's `wants_idle_dequeue`.
    pub fn new(cfg: &LinkConfig, rng: Rng, idle_dequeue: bool) -> Link<P> {
        let mut l = Link {
            rate: None,
            packet_ns: 0,
            trace: None,
            delay_ns: 0,
            loss: 0.0,
            jitter: None,
            script: None,
            ll: LinkLayer::RAW,
            memo_len: u64::MAX,
            memo_wire: 0,
            memo_ns: 0,
            modem: None,
            rng,
            buffer: VecDeque::new(),
            buffer_bytes: 0,
            free_at: Instant::ZERO,
            last_end: Instant::ZERO,
            wire: VecDeque::new(),
            queued: 0,
            own: None,
            wire_shrink_at: 0,
            ready: None,
            // Nothing was queued before the start.
            feed_empty: true,
            idle_dequeue,
            idle_pending: false,
            export: false,
            stats: LinkStats::default(),
        };
        l.reconfigure(cfg, idle_dequeue);
        l.idle_pending = false;
        l
    }

    /// Whether the feeding discipline watches the link go idle (set when the feed
    /// changes).
    pub fn set_idle_dequeue(&mut self, on: bool) {
        self.idle_dequeue = on;
    }

    /// Take new parameters, keeping buffered and in-flight packets; the random stream
    /// continues, and so do the script's counts unless its rules changed.
    pub fn reconfigure(&mut self, cfg: &LinkConfig, idle_dequeue: bool) {
        self.rate = cfg.rate.filter(|r| r.0 > 0);
        self.packet_ns = cfg
            .packet_rate
            .map_or(0, |r| 1_000_000_000u64.div_ceil(r.max(1) as u64));
        let trace = cfg.trace.as_ref().map(|t| {
            t.trace
                .clone()
                .expect("the driver loads a link's trace before building it")
        });
        match (trace, &mut self.trace) {
            (None, t) => {
                if t.take().is_some() {
                    // Back to a rate: the line is free when the last packet went.
                    self.free_at = self.last_end;
                }
            }
            (Some(new), Some(cur)) if *cur.trace == *new => {}
            (Some(new), t) => {
                let line = TraceLine::new(new, self.free_at);
                self.free_at = line.next_time();
                *t = Some(Box::new(line));
            }
        }
        self.delay_ns = cfg.delay.map_or(0, |s| dur_ns(s.0));
        self.loss = cfg.loss.unwrap_or(0.0);
        let jitter = cfg.jitter.filter(|j| !j.is_zero());
        if self.jitter.as_ref().map(|j| *j.dist()) != jitter {
            // (Arrivals go on after the last packet already on the wire.)
            self.jitter = jitter.map(|j| Box::new(JitterLine::new(j)));
        }
        let rules = cfg.drop.as_deref().unwrap_or(&[]);
        if self.script.as_ref().map_or(&[][..], |s| s.rules()) != rules {
            self.script = Script::new(rules).map(Box::new);
        }
        self.ll = cfg.linklayer.map_or(LinkLayer::RAW, |l| l.build());
        self.memo_len = u64::MAX;
        self.modem = cfg.modem_buffer;
        self.ready = None;
        self.idle_dequeue = idle_dequeue;
        self.idle_pending = idle_dequeue;
    }

    /// The serialisation rate, if any (`None` for a trace-driven line).
    pub fn rate(&self) -> Option<Rate> {
        self.rate
    }

    /// The rate disciplines and mechanisms see as the link's: the serialisation rate, or
    /// a trace's mean rate.
    pub fn nominal_rate(&self) -> Option<Rate> {
        self.rate
            .or_else(|| self.trace.as_ref().map(|t| t.trace.mean_rate()))
    }

    /// Whether a drop script reads the headers of the packets it transmits.
    pub fn has_script(&self) -> bool {
        self.script.is_some()
    }

    /// Whether a modem buffer sits between the discipline and the serialiser.
    pub fn has_modem_buffer(&self) -> bool {
        self.modem.is_some()
    }

    /// Whether the discipline may be asked for a packet at `now`: always with a modem
    /// buffer (it absorbs or drops), otherwise only when the serialiser is idle.
    #[inline]
    pub fn wants_packet(&self, now: Instant) -> bool {
        self.modem.is_some() || self.free_at <= now
    }

    /// When the serialiser is next idle.
    pub fn free_at(&self) -> Instant {
        self.free_at
    }

    /// Start what the modem buffer holds while the serialiser is idle, then ask `feed`
    /// for packets while the link takes them. Returns the feed's "not before" answer if it
    /// gave one. Lost and modem-buffer-dropped packets go to `drops`; `on_tx` sees every
    /// transmission that starts.
    pub fn pull<F: Feed<P>>(
        &mut self,
        now: Instant,
        feed: &mut F,
        drops: &mut Drops<P>,
        on_tx: &mut impl FnMut(&Tx<'_, P>),
    ) -> Option<Instant> {
        if self.own.is_some() {
            self.pull_own(now, drops, on_tx);
            return None;
        }
        if self.feed_empty && self.buffer.is_empty() {
            if let Some(tr) = &mut self.trace {
                // The discipline held nothing until `now`: the opportunities before
                // went unused.
                tr.skip_to(now);
                self.free_at = tr.next_time();
            }
            if feed.is_empty() == Some(false) {
                // A packet waits from `now` on: later calls keep its opportunity.
                self.feed_empty = false;
            }
        }
        if !self.buffer.is_empty() {
            self.start_buffered(now, drops, on_tx);
        }
        while self.wants_packet(now) {
            match feed.dequeue(now, drops) {
                Dequeued::Packet(p) => {
                    self.feed_empty = false;
                    let since = feed.available_since(&p, now);
                    let ready = self.ready.take().map_or(since, |t| t.max(since));
                    self.offer(now, ready, p, drops, on_tx);
                    self.idle_pending = self.idle_dequeue;
                }
                Dequeued::NotBefore(t) => {
                    self.feed_empty = false;
                    self.ready = Some(t);
                    if self.modem.is_none() {
                        if let Some(tr) = &mut self.trace {
                            // The line is next asked at an opportunity from `t` on.
                            tr.skip_to(t);
                            self.free_at = tr.next_time();
                        }
                    }
                    return Some(t);
                }
                Dequeued::Empty => {
                    // Nothing was available at `now`: the next packet cannot start
                    // earlier.
                    self.feed_empty = true;
                    self.ready = Some(now);
                    self.idle_pending = false;
                    return None;
                }
            }
        }
        None
    }

    /// A packet from the discipline at `now`, available since `ready`: into the modem
    /// buffer (dropped when full) or onto the serialiser.
    fn offer(
        &mut self,
        now: Instant,
        ready: Instant,
        pkt: P,
        drops: &mut Drops<P>,
        on_tx: &mut impl FnMut(&Tx<'_, P>),
    ) {
        self.stats.offered += 1;
        let ready = ready.min(now);
        let Some(limit) = self.modem else {
            self.transmit(ready, pkt, drops, on_tx);
            return;
        };
        let len = pkt.ip_len();
        if !limit.admits(self.buffer.len() as u32, self.buffer_bytes, len) {
            self.stats.modem_dropped += 1;
            drops.push(
                pkt,
                Verdict::Dropped(DropReason::ModemBufferFull),
                Stage::Rejected,
            );
            return;
        }
        self.buffer_bytes += len as u64;
        self.buffer.push_back((pkt, ready));
        self.stats.max_modem_packets = self.stats.max_modem_packets.max(self.buffer.len() as u32);
        // The serialiser takes the head at once if idle: a modem holds `modem_buffer`
        // packets besides the one on the line.
        self.start_buffered(now, drops, on_tx);
    }

    /// Move packets from the modem buffer onto the serialiser while it is idle at `now`.
    fn start_buffered(
        &mut self,
        now: Instant,
        drops: &mut Drops<P>,
        on_tx: &mut impl FnMut(&Tx<'_, P>),
    ) {
        while self.free_at <= now {
            if let (Some(tr), Some((_, ready))) = (&mut self.trace, self.buffer.front()) {
                // The head waits in the buffer for the first opportunity it can use.
                let start = tr.start_for(*ready);
                if start > now {
                    tr.skip_to(*ready);
                    self.free_at = tr.next_time();
                    break;
                }
            }
            let Some((pkt, ready)) = self.buffer.pop_front() else {
                break;
            };
            self.buffer_bytes -= pkt.ip_len() as u64;
            self.transmit(ready, pkt, drops, on_tx);
        }
    }

    /// Serialise `pkt`, available since `ready`; then lose it or put it on the delay line.
    fn transmit(
        &mut self,
        ready: Instant,
        pkt: P,
        drops: &mut Drops<P>,
        on_tx: &mut impl FnMut(&Tx<'_, P>),
    ) {
        let (start, end, wire_len) = self.charge(ready, pkt.ip_len());
        let lost = Self::loses(
            &mut self.rng,
            self.loss,
            &mut self.script,
            &mut self.stats,
            &pkt,
        );
        on_tx(&Tx {
            start,
            tx_ns: end.0 - start.0,
            wire_len,
            lost,
            pkt: &pkt,
        });
        if lost {
            self.stats.lost += 1;
            drops.push(pkt, Verdict::Dropped(DropReason::LinkLoss), Stage::Rejected);
            return;
        }
        let at = self.arrival(end, self.wire.len() - self.queued);
        self.wire.push_back(pkt.to_wire(at));
    }

    /// When a packet whose transmission ends at `end` arrives: after the delay, and with
    /// jitter a draw more, never before the packet ahead of it — the delay line's entry
    /// before index `ahead` (none if `ahead` is 0).
    #[inline(always)]
    fn arrival(&mut self, end: Instant, ahead: usize) -> Instant {
        let at = Instant(end.0.saturating_add(self.delay_ns));
        if self.jitter.is_none() {
            return at;
        }
        self.jittered(at, ahead)
    }

    /// The jittered part of [`Link::arrival`], out of line: a line without jitter pays
    /// one test per packet.
    #[inline(never)]
    fn jittered(&mut self, at: Instant, ahead: usize) -> Instant {
        let prev = ahead.checked_sub(1).map(|i| P::arrival(&self.wire[i]));
        match &self.jitter {
            Some(j) => j.arrival(at, prev, &mut self.rng),
            None => at,
        }
    }

    /// Whether the line loses `pkt` as it goes onto the wire: at random (`loss`) or by its
    /// drop script (counted as `scripted`).
    #[inline]
    fn loses(
        rng: &mut Rng,
        loss: f64,
        script: &mut Option<Box<Script>>,
        stats: &mut LinkStats,
        pkt: &P,
    ) -> bool {
        let random = loss > 0.0 && rng.bernoulli(loss);
        let scripted = script.as_mut().is_some_and(|s| s.on_transmit(pkt));
        if scripted {
            stats.scripted += 1;
        }
        random || scripted
    }

    /// Charge the serialiser `len` IP bytes, available since `ready`: the transmission's
    /// start, end and wire length (the counters of transmissions follow).
    #[inline]
    fn charge(&mut self, ready: Instant, len: u32) -> (Instant, Instant, u32) {
        let (wire_len, start, end, busy_ns) = if let Some(tr) = &mut self.trace {
            let wire_len = self.ll.wire_len(len);
            tr.skip_to(ready);
            let start = tr.next_time();
            let end = tr.serve(wire_len);
            self.free_at = tr.next_time();
            self.last_end = end;
            let busy = tr.trace.mean_rate().tx_nanos(wire_len as u64);
            (wire_len, start, end, busy)
        } else {
            if u64::from(len) != self.memo_len {
                self.serialise(len);
            }
            let (wire_len, tx_ns) = (self.memo_wire, self.memo_ns);
            let start = self.free_at.max(ready);
            let end = Instant(start.0.saturating_add(tx_ns));
            self.free_at = end;
            (wire_len, start, end, tx_ns)
        };
        let s = &mut self.stats;
        s.sent += 1;
        s.sent_bytes += len as u64;
        s.wire_bytes += wire_len as u64;
        s.busy_ns += busy_ns;
        (start, end, wire_len)
    }

    /// Make the link's discipline its own drop-tail FIFO of `cfg`, whose packets wait in
    /// the delay line's ring: a packet is written once, as it is queued, and stays where
    /// it is until it arrives (its transmission sets its arrival time in place), instead
    /// of being moved from the discipline's queue onto the line. Packets are then offered
    /// with [`Link::enqueue`], and [`Link::pull`] does not ask its feed. Taken only by a
    /// line that is a plain serialiser and delay (no modem buffer, trace, loss, jitter or
    /// drop script) and holds no packet, with a drop-tail FIFO; returns whether it was
    /// taken.
    pub fn own_fifo(&mut self, cfg: &FifoConfig) -> bool {
        let fits = cfg.drop == DropSide::Tail
            && self.modem.is_none()
            && self.trace.is_none()
            && self.loss == 0.0
            && self.jitter.is_none()
            && self.script.is_none()
            && !self.idle_dequeue
            && self.wire.is_empty()
            && self.buffer.is_empty();
        if fits {
            self.own = Some(OwnFifo {
                limit: cfg.limit,
                stats: QdiscStats::default(),
            });
        }
        fits
    }

    /// The counters of the link's own FIFO ([`Link::own_fifo`]), if it has one.
    pub fn own_stats(&self) -> Option<&QdiscStats> {
        self.own.as_ref().map(|o| &o.stats)
    }

    /// Offer `pkt` to the link's own FIFO (dropped as `queue_full` when it does not fit).
    /// The link must have one ([`Link::own_fifo`]).
    #[inline]
    pub fn enqueue(&mut self, pkt: P, drops: &mut Drops<P>) {
        let own = self.own.as_mut().expect("a link with its own FIFO");
        let st = &mut own.stats;
        st.on_receive();
        let len = pkt.ip_len();
        if own.limit.admits(st.backlog.packets, st.backlog.bytes, len) {
            self.wire.push_back(pkt.waiting());
            self.queued += 1;
            // The slot a later packet goes to (past the end of the buffer when the ring
            // wraps there, or beyond its capacity: a hint, which may miss).
            if let Some(e) = self.wire.back() {
                prefetch_ptr((e as *const P::Entry).wrapping_add(PREFETCH_AHEAD).cast());
            }
            st.on_enqueue(len);
        } else {
            st.on_reject(Verdict::Dropped(DropReason::QueueFull));
            drops.reject(pkt, DropReason::QueueFull);
        }
    }

    /// [`Link::pull`] from the link's own FIFO: start its packets while the serialiser is
    /// idle, each where it waits (the same steps as a FIFO feed's).
    fn pull_own(&mut self, now: Instant, drops: &mut Drops<P>, on_tx: &mut impl FnMut(&Tx<'_, P>)) {
        while self.free_at <= now {
            if self.queued == 0 {
                self.feed_empty = true;
                self.ready = Some(now);
                self.idle_pending = false;
                return;
            }
            self.feed_empty = false;
            // A waiting packet is available now: the line's last answer is spent.
            self.ready = None;
            let ready = now;
            let i = self.wire.len() - self.queued;
            if self.queued > PREFETCH_AHEAD {
                prefetch(&self.wire[i + PREFETCH_AHEAD]);
            }
            self.queued -= 1;
            let len = P::pkt(&self.wire[i]).ip_len();
            if let Some(o) = self.own.as_mut() {
                o.stats.on_dequeue(len);
            }
            self.stats.offered += 1;
            let (start, end, wire_len) = self.charge(ready, len);
            let pkt = P::pkt(&self.wire[i]);
            let lost = Self::loses(
                &mut self.rng,
                self.loss,
                &mut self.script,
                &mut self.stats,
                pkt,
            );
            on_tx(&Tx {
                start,
                tx_ns: end.0 - start.0,
                wire_len,
                lost,
                pkt,
            });
            if lost {
                // (Only after a reconfiguration: a lossy line does not take its own FIFO.)
                self.stats.lost += 1;
                let e = self.wire.remove(i).expect("the entry just sent");
                drops.push(
                    P::off_wire(e),
                    Verdict::Dropped(DropReason::LinkLoss),
                    Stage::Rejected,
                );
            } else {
                // (Jitter only after a reconfiguration: a jittered line does not take its
                // own FIFO.)
                let at = self.arrival(end, i);
                P::depart(&mut self.wire[i], at);
            }
            self.idle_pending = self.idle_dequeue;
        }
    }

    /// The wire length and transmission time at the rate of a packet of IP length `len`,
    /// kept for the packets of the same length that follow.
    #[inline(never)]
    fn serialise(&mut self, len: u32) {
        let wire_len = self.ll.wire_len(len);
        let bit_ns = self.rate.map_or(0, |r| r.tx_nanos(wire_len as u64));
        self.memo_len = u64::from(len);
        self.memo_wire = wire_len;
        self.memo_ns = bit_ns.max(self.packet_ns);
    }

    /// Have the packets that start transmission taken off the line at once, with their
    /// arrival times, by [`Link::take_exported`] (they count as delivered then), for an
    /// engine that runs the link's far end apart from its near end (a partitioned
    /// simulation) to deliver. Set before the first packet.
    pub fn set_export(&mut self, on: bool) {
        self.export = on;
    }

    /// Whether the line's packets are taken off as they start ([`Link::set_export`]).
    #[inline]
    pub fn exports(&self) -> bool {
        self.export
    }

    /// Move every packet on the delay line, with its arrival time, to `out`, in order
    /// (an exporting line's, after each [`Link::pull`]: its delay line holds only the
    /// packets that started since).
    pub fn take_exported(&mut self, out: &mut Vec<(Instant, P)>) {
        while self.wire.len() > self.queued {
            let Some(e) = self.wire.pop_front() else {
                break;
            };
            let at = P::arrival(&e);
            let p = P::off_wire(e);
            self.stats.delivered += 1;
            self.stats.delivered_bytes += p.ip_len() as u64;
            out.push((at, p));
        }
    }

    /// When the head of the delay line arrives.
    pub fn next_arrival(&self) -> Option<Instant> {
        if self.wire.len() > self.queued {
            self.wire.front().map(P::arrival)
        } else {
            None
        }
    }

    /// Take the head of the delay line if it has arrived by `now`.
    #[inline]
    pub fn pop_arrival(&mut self, now: Instant) -> Option<P> {
        if self.wire.len() == self.queued || self.wire.front().is_none_or(|e| P::arrival(e) > now) {
            return None;
        }
        // (A waiting packet's slot if the line holds fewer: read at its transmission.)
        if let Some(e) = self.wire.get(PREFETCH_AHEAD) {
            prefetch(e);
        }
        let p = P::off_wire(self.wire.pop_front()?);
        self.stats.delivered += 1;
        self.stats.delivered_bytes += p.ip_len() as u64;
        // Give back most of the delay line's memory once it holds a quarter of its
        // largest burst (amortised constant), at most once in 100 ms: a burst must not
        // keep its memory for the rest of the run when thousands of links are simulated.
        if self.wire.capacity() > WIRE_KEEP
            && self.wire.len() * 4 < self.wire.capacity()
            && now.0 >= self.wire_shrink_at
        {
            self.shrink_wire(now);
        }
        Some(p)
    }

    /// The rare part of [`Link::pop_arrival`], out of line so that the common path stays
    /// small enough to inline.
    #[cold]
    #[inline(never)]
    fn shrink_wire(&mut self, now: Instant) {
        let len = self.wire.len();
        self.wire.shrink_to((len * 2).max(WIRE_KEEP));
        self.wire_shrink_at = now.0.saturating_add(WIRE_SHRINK_GAP_NS);
    }

    /// Move every packet whose propagation has ended by `now` to `out`, in order.
    pub fn poll(&mut self, now: Instant, out: &mut Vec<P>) {
        while let Some(p) = self.pop_arrival(now) {
            out.push(p);
        }
    }

    /// When the sending side next needs a [`Link::pull`], given the feed's backlog in
    /// packets: the serialiser frees up with packets waiting in the modem buffer or the
    /// discipline (or with a discipline that watches the link go idle), or the
    /// discipline's "not before" instant. `None`: only a new packet changes anything.
    pub fn pull_at(&self, backlog: u32) -> Option<Instant> {
        let mut t = (!self.buffer.is_empty()).then_some(self.free_at);
        if self.idle_pending && backlog == 0 {
            t = earliest(t, Some(self.free_at));
        }
        if backlog > 0 {
            let mut when = self.ready.unwrap_or(Instant::ZERO);
            if self.modem.is_none() {
                when = when.max(self.free_at);
            }
            t = earliest(t, Some(when));
        }
        t
    }

    /// When the link next needs a call: [`Link::pull_at`] or the next arrival.
    pub fn poll_at(&self, backlog: u32) -> Option<Instant> {
        earliest(self.pull_at(backlog), self.next_arrival())
    }

    /// When the serialiser frees up, if a [`Link::pull`] is needed then (the modem buffer
    /// holds packets, the discipline has a backlog waiting for the line, or it watches
    /// the link go idle); `None` if the serialiser is idle at `now`.
    pub fn busy_wake(&self, now: Instant, backlog: u32) -> Option<Instant> {
        if self.free_at <= now {
            return None;
        }
        let want =
            !self.buffer.is_empty() || self.idle_pending || (self.modem.is_none() && backlog > 0);
        want.then_some(self.free_at)
    }

    /// Whether a [`Link::pull`] at `now` would take nothing and ask its feed nothing new,
    /// provided the feed has not changed since the last pull and no call is due at `now`
    /// (a "not before" instant or the serialiser freeing up): the line is a plain
    /// serialiser (no modem buffer, trace or own FIFO) whose feed does not watch it go
    /// idle, and it is busy, or idle with the feed's last answer standing ("nothing
    /// before" a later instant, or nothing).
    #[inline]
    pub fn settled(&self, now: Instant) -> bool {
        self.modem.is_none()
            && self.trace.is_none()
            && self.own.is_none()
            && !self.idle_dequeue
            && (self.free_at > now || self.feed_empty || self.ready.is_none_or(|t| t > now))
    }

    /// Packets in the modem buffer and on the delay line.
    pub fn backlog(&self) -> (u32, u32) {
        (
            self.buffer.len() as u32,
            (self.wire.len() - self.queued) as u32,
        )
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Remove every packet held (modem buffer, delay line).
    pub fn drain_all(&mut self) -> Vec<P> {
        let mut v: Vec<P> = self.buffer.drain(..).map(|(p, _)| p).collect();
        v.extend(self.wire.drain(..).map(P::off_wire));
        self.buffer_bytes = 0;
        self.queued = 0;
        if let Some(o) = self.own.as_mut() {
            o.stats.backlog = Default::default();
        }
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::time::Duration;
    use crate::wire::{Headers, IpRepr, Transport, UdpRepr};
    use core::net::{IpAddr, Ipv4Addr};

    fn pkt(ip_len: u32) -> HeaderPacket {
        let a = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1));
        let b = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
        HeaderPacket::new(Headers {
            ip: IpRepr::new(a, b),
            transport: Transport::Udp(UdpRepr {
                src_port: 1,
                dst_port: 2,
            }),
            payload_len: ip_len - 28,
        })
    }

    /// A FIFO feed with an optional "not before" gate.
    struct Queue {
        q: VecDeque<HeaderPacket>,
        gate: Instant,
        asked: u32,
    }

    impl Queue {
        fn of(lens: &[u32]) -> Queue {
            Queue {
                q: lens.iter().map(|&l| pkt(l)).collect(),
                gate: Instant::ZERO,
                asked: 0,
            }
        }
    }

    impl Feed<HeaderPacket> for Queue {
        fn dequeue(&mut self, now: Instant, _: &mut Drops<HeaderPacket>) -> Dequeued<HeaderPacket> {
            self.asked += 1;
            if self.q.is_empty() {
                Dequeued::Empty
            } else if now < self.gate {
                Dequeued::NotBefore(self.gate)
            } else {
                Dequeued::Packet(self.q.pop_front().unwrap())
            }
        }
        /// Every packet was there from the start (a driver that may call late).
        fn available_since(&self, _: &HeaderPacket, _: Instant) -> Instant {
            Instant::ZERO
        }
    }

    /// Each field's byte range in a link direction.
    macro_rules! spans {
        ($($($f:ident).+),* $(,)?) => {{
            type L = Link<HeaderPacket>;
            vec![$((
                stringify!($($f).+),
                core::mem::offset_of!(L, $($f).+),
                size_of_field(|l: &L| &l.$($f).+),
            )),*]
        }};
    }

    fn size_of_field<T, U>(_: impl Fn(&T) -> &U) -> usize {
        core::mem::size_of::<U>()
    }

    /// What a packet reads or writes of a plain line (serialiser and delay) as it is
    /// offered, goes onto the line and arrives, without and with its own FIFO.
    fn a_packets_fields() -> Vec<(&'static str, usize, usize)> {
        let own = core::mem::offset_of!(Link<HeaderPacket>, own);
        let stats = own + core::mem::offset_of!(OwnFifo, stats);
        let mut v = spans![
            wire,
            queued,
            stats.offered,
            stats.sent,
            stats.sent_bytes,
            stats.wire_bytes,
            stats.busy_ns,
            stats.delivered,
            stats.delivered_bytes,
            free_at,
            modem,
            ready,
            feed_empty,
            idle_dequeue,
            idle_pending,
            memo_wire,
            memo_len,
            memo_ns,
            delay_ns,
            loss,
            jitter,
            script,
            trace,
            buffer,
        ];
        v.push(("own.limit", own, core::mem::size_of::<Limit>()));
        // The FIFO's counters of offers, enqueues, dequeues and the backlog with its
        // high-water marks (`QdiscStats` is `repr(C)`, those first).
        v.push(("own.stats", stats, QDISC_STATS_HOT));
        v
    }

    /// The fields a packet through a plain line touches are the first
    /// [`Link::hot_len`] bytes, in six cache lines (five and a half: the line starts
    /// where the simulator's link direction puts it); the rest of a link direction is
    /// not read.
    #[test]
    fn a_packet_touches_the_first_cache_lines_only() {
        let hot = Link::<HeaderPacket>::hot_len();
        let fields = a_packets_fields();
        for &(name, o, n) in &fields {
            assert!(o + n <= hot, "{name} at {o}..{} beyond {hot}", o + n);
        }
        let bytes: usize = fields.iter().map(|f| f.2).sum();
        assert!(
            hot <= bytes + 40,
            "{hot} bytes hold {bytes} of a packet's fields"
        );
        assert_eq!(hot.div_ceil(64), 6, "{hot}");
        assert!(core::mem::size_of::<Link<HeaderPacket>>() > hot + 200);
    }

    fn cfg(toml_src: &str) -> LinkConfig {
        toml::from_str(toml_src).unwrap()
    }

    /// Drive `link` from `feed` as a runtime would: call at every instant the link asks
    /// for, collect (arrival time, ip_len) of what is delivered.
    fn drive(link: &mut Link<HeaderPacket>, feed: &mut Queue) -> Vec<(u64, u32)> {
        let mut out = Vec::new();
        let mut drops = Drops::new();
        let mut now = Instant::ZERO;
        for _ in 0..10_000 {
            link.pull(now, feed, &mut drops, &mut |_| {});
            while let Some(p) = link.pop_arrival(now) {
                out.push((now.as_nanos(), p.ip_len()));
            }
            match link.poll_at(feed.q.len() as u32) {
                Some(t) => now = t.max(now),
                None => break,
            }
        }
        out
    }

    /// Send `n` packets of 125 bytes from `start` and take every arrival; returns the
    /// delay line's capacity after each arrival and the time of the last.
    fn burst(l: &mut Link<HeaderPacket>, start: Instant, n: usize) -> (Vec<usize>, Instant) {
        let mut q = Queue::of(&vec![125; n]);
        let (mut drops, mut now, mut caps) = (Drops::new(), start, Vec::new());
        loop {
            l.pull(now, &mut q, &mut drops, &mut |_| {});
            while l.pop_arrival(now).is_some() {
                caps.push(l.wire.capacity());
            }
            match l.poll_at(q.q.len() as u32) {
                Some(t) => now = t.max(now),
                None => return (caps, now),
            }
        }
    }

    #[test]
    fn delay_line_gives_memory_back_at_most_once_in_a_while() {
        // 1 us per packet, 10 ms of propagation: a burst of 200 is on the line at once.
        let mut l = Link::new(
            &cfg("rate = \"1Gbit\"\ndelay = \"10ms\""),
            Rng::new(1),
            false,
        );
        let (caps, end) = burst(&mut l, Instant::ZERO, 200);
        let peak = caps[0];
        assert!(peak >= 200);
        // Given back once, when a quarter of it was left; not again for a while.
        let after = *caps.last().unwrap();
        assert!(after < peak && after > WIRE_KEEP, "{peak} -> {after}");
        let first = caps.iter().position(|&c| c < peak).unwrap();
        assert!(caps[first..].iter().all(|&c| c == after), "{caps:?}");
        // The next flight, a round trip later, finds the memory there.
        let (caps2, end2) = burst(&mut l, end + Duration::from_millis(10), 40);
        assert!(caps2.iter().all(|&c| c == after), "{caps2:?}");
        // Later the line gives it back again.
        let later = end2 + Duration::from_nanos(WIRE_SHRINK_GAP_NS);
        let (caps3, _) = burst(&mut l, later, 1);
        assert_eq!(caps3, vec![WIRE_KEEP]);
    }

    #[test]
    fn serialiser_and_delay_line() {
        // 1500 bytes at 1 Mbit/s: 12 ms each, then 20 ms of propagation.
        let mut l = Link::new(
            &cfg("rate = \"1Mbit\"\ndelay = \"20ms\""),
            Rng::new(1),
            false,
        );
        let got = drive(&mut l, &mut Queue::of(&[1500, 1500, 1500]));
        assert_eq!(
            got,
            vec![(32_000_000, 1500), (44_000_000, 1500), (56_000_000, 1500)]
        );
        assert_eq!(l.stats().busy_ns, 36_000_000);
        assert_eq!(l.stats().delivered, 3);
    }

    #[test]
    fn a_new_rate_framing_or_packet_clock_times_the_next_packet_of_the_same_length() {
        // 1500 bytes: 12 ms at 1 Mbit/s, then 6 ms at 2 Mbit/s; with ATM framing
        // (LLC/SNAP: 32 cells, 1696 bytes) 6.784 ms; at 10 packets/s 100 ms.
        let mut l = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), false);
        let mut out = Vec::new();
        let mut send = |l: &mut Link<HeaderPacket>, at: u64| {
            let now = Instant(at);
            l.pull(now, &mut Queue::of(&[1500]), &mut Drops::new(), &mut |tx| {
                out.push((tx.start.as_nanos(), tx.tx_ns, tx.wire_len))
            });
        };
        send(&mut l, 0);
        send(&mut l, 12_000_000);
        l.reconfigure(&cfg("rate = \"2Mbit\""), false);
        send(&mut l, 24_000_000);
        let atm = "rate = \"2Mbit\"\nlinklayer = { encap = \"llc_snap_routed\" }";
        l.reconfigure(&cfg(atm), false);
        send(&mut l, 30_000_000);
        l.reconfigure(&cfg("rate = \"2Mbit\"\npacket_rate = 10"), false);
        send(&mut l, 40_000_000);
        assert_eq!(
            out,
            vec![
                (0, 12_000_000, 1500),
                (12_000_000, 12_000_000, 1500),
                (24_000_000, 6_000_000, 1500),
                (30_000_000, 6_784_000, 1696),
                (36_784_000, 100_000_000, 1500),
            ]
        );
    }

    #[test]
    fn atm_cells_and_packet_clock() {
        // A 40-byte packet over LLC/SNAP is 2 cells = 106 bytes: 1 ms at 848 kbit/s.
        let mut l = Link::new(
            &cfg("rate = \"848kbit\"\nlinklayer = { encap = \"llc_snap_routed\" }"),
            Rng::new(1),
            false,
        );
        let got = drive(&mut l, &mut Queue::of(&[40, 40]));
        assert_eq!(got, vec![(1_000_000, 40), (2_000_000, 40)]);
        assert_eq!(l.stats().wire_bytes, 212);
        // 10 packets/s: 100 ms each whatever the size; the bit time only if longer.
        let mut l = Link::new(
            &cfg("packet_rate = 10\nrate = \"1Mbit\""),
            Rng::new(1),
            false,
        );
        let got = drive(&mut l, &mut Queue::of(&[40, 1500]));
        assert_eq!(got, vec![(100_000_000, 40), (200_000_000, 1500)]);
    }

    #[test]
    fn without_modem_buffer_the_discipline_is_asked_only_when_idle() {
        let mut l = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), false);
        let mut q = Queue::of(&[1500, 1500, 1500]);
        let mut drops = Drops::new();
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(
            q.q.len(),
            2,
            "one packet on the line, two left in the discipline"
        );
        assert_eq!(q.asked, 1);
        assert_eq!(l.pull_at(2), Some(Instant::from_millis(12)));
        assert_eq!(
            l.busy_wake(Instant::ZERO, 2),
            Some(Instant::from_millis(12))
        );
        // Called early: nothing is asked.
        l.pull(Instant::from_millis(5), &mut q, &mut drops, &mut |_| {});
        assert_eq!(q.asked, 1);
    }

    #[test]
    fn modem_buffer_absorbs_then_drops_tail() {
        // modem_buffer = 3p: one packet on the line plus three waiting; the rest dropped.
        let mut l = Link::new(
            &cfg("rate = \"1Mbit\"\nmodem_buffer = \"3p\""),
            Rng::new(1),
            false,
        );
        let mut q = Queue::of(&[1500; 10]);
        let mut drops = Drops::new();
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert!(q.q.is_empty(), "the discipline is drained at once");
        assert_eq!(l.backlog(), (3, 1));
        assert_eq!(drops.len(), 6);
        assert!(drops
            .drain()
            .all(|d| d.verdict == Verdict::Dropped(DropReason::ModemBufferFull)));
        assert_eq!(l.stats().modem_dropped, 6);
        assert_eq!(l.stats().max_modem_packets, 3);
        assert_eq!(l.pull_at(0), Some(Instant::from_millis(12)));
        let got = drive(&mut l, &mut q);
        let times: Vec<u64> = got.iter().map(|g| g.0 / 1_000_000).collect();
        assert_eq!(times, vec![12, 24, 36, 48]);
    }

    #[test]
    fn not_before_is_remembered_and_late_calls_catch_up() {
        let mut l = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), false);
        let mut q = Queue::of(&[1500, 1500]);
        q.gate = Instant::from_millis(10);
        let mut drops = Drops::new();
        assert_eq!(
            l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {}),
            Some(Instant::from_millis(10))
        );
        assert_eq!(l.pull_at(2), Some(Instant::from_millis(10)));
        // The driver wakes 3 ms late: the packet still starts at 10 ms.
        let mut starts = Vec::new();
        l.pull(Instant::from_millis(13), &mut q, &mut drops, &mut |tx| {
            starts.push(tx.start)
        });
        assert_eq!(starts, vec![Instant::from_millis(10)]);
        assert_eq!(l.free_at(), Instant::from_millis(22));
    }

    #[test]
    fn idle_watchers_are_asked_when_the_line_frees_up() {
        let mut l = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), true);
        let mut q = Queue::of(&[1500]);
        let mut drops = Drops::new();
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(
            l.busy_wake(Instant::ZERO, 0),
            Some(Instant::from_millis(12))
        );
        assert_eq!(l.pull_at(0), Some(Instant::from_millis(12)));
        l.pull(Instant::from_millis(12), &mut q, &mut drops, &mut |_| {});
        assert_eq!(q.asked, 2, "asked again, answered empty");
        assert_eq!(l.pull_at(0), None);
        // A link without the watcher sleeps after its last packet.
        let mut l = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), false);
        l.pull(
            Instant::ZERO,
            &mut Queue::of(&[1500]),
            &mut drops,
            &mut |_| {},
        );
        assert_eq!(l.busy_wake(Instant::ZERO, 0), None);
    }

    #[test]
    fn a_settled_line_asks_its_unchanged_feed_nothing_new() {
        let (ms, mut drops) = (Instant::from_millis, Drops::new());
        // 1500 bytes at 1 Mbit/s: 12 ms on the line.
        let mut l = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), false);
        let mut q = Queue::of(&[1500, 1500]);
        l.pull(ms(0), &mut q, &mut drops, &mut |_| {});
        assert!(l.settled(ms(5)), "busy: a pull takes nothing");
        // Free at 12 ms (the call then is the caller's to make).
        q.gate = ms(20);
        assert_eq!(
            l.pull(ms(12), &mut q, &mut drops, &mut |_| {}),
            Some(ms(20))
        );
        let asked = q.asked;
        assert!(l.settled(ms(15)), "\"not before 20 ms\" stands");
        l.pull(ms(15), &mut q, &mut drops, &mut |_| {});
        assert_eq!(q.asked, asked + 1, "asked again, the same answer");
        assert!(!l.settled(ms(20)), "the feed's instant has come");
        l.pull(ms(20), &mut q, &mut drops, &mut |_| {});
        // The last packet went at 20 ms: free at 32 ms with nothing queued.
        assert!(l.settled(ms(32)));
        assert_eq!(l.pull(ms(32), &mut q, &mut drops, &mut |_| {}), None);
        assert!(l.settled(ms(40)), "the feed answered empty");
        // A line whose feed watches it go idle, a modem buffer or a trace never is.
        let mut l: Link<HeaderPacket> = Link::new(&cfg("rate = \"1Mbit\""), Rng::new(1), true);
        assert!(!l.settled(ms(0)));
        l.set_idle_dequeue(false);
        assert!(l.settled(ms(0)));
        let l: Link<HeaderPacket> = Link::new(
            &cfg("rate = \"1Mbit\"\nmodem_buffer = \"4p\""),
            Rng::new(1),
            false,
        );
        assert!(!l.settled(ms(0)));
    }

    #[test]
    fn loss_is_seeded_occupies_the_line_and_is_counted() {
        let run = |seed| {
            let mut l = Link::new(&cfg("rate = \"1Mbit\"\nloss = 0.3"), Rng::new(seed), false);
            let mut q = Queue::of(&[125; 1000]);
            let got = drive(&mut l, &mut q);
            (
                got.iter().map(|g| g.0).collect::<Vec<_>>(),
                l.stats().clone(),
            )
        };
        let (a, sa) = run(7);
        assert_eq!(a, run(7).0, "same seed, same losses");
        assert_ne!(a, run(8).0);
        assert_eq!(sa.lost + sa.delivered, 1000);
        assert!(
            (250..350).contains(&sa.lost),
            "{} lost of 1000 at 30 %",
            sa.lost
        );
        assert_eq!(
            sa.busy_ns,
            1000 * 1_000_000,
            "lost packets still took the line"
        );
    }

    #[test]
    fn scripted_drops_take_the_line_and_leave_random_loss_alone() {
        let mut l = Link::new(
            &cfg("rate = \"1Mbit\"\ndrop = [\"packet:2\", \"packet:4\"]"),
            Rng::new(1),
            false,
        );
        let mut drops = Drops::new();
        let mut q = Queue::of(&[125, 250, 375, 500, 625]);
        let mut got = Vec::new();
        let mut now = Instant::ZERO;
        while let Some(t) = {
            l.pull(now, &mut q, &mut drops, &mut |_| {});
            while let Some(p) = l.pop_arrival(now) {
                got.push((now.as_nanos() / 1000, p.ip_len()));
            }
            l.poll_at(q.q.len() as u32)
        } {
            now = t.max(now);
        }
        // The 2nd and 4th are lost, after holding the line 2 ms and 4 ms.
        assert_eq!(got, vec![(1000, 125), (6000, 375), (15000, 625)]);
        assert_eq!((l.stats().lost, l.stats().scripted), (2, 2));
        assert!(drops
            .drain()
            .all(|d| d.verdict == Verdict::Dropped(DropReason::LinkLoss)));
        // With random loss too, the random draws are the same with or without a script.
        let lost_at = |src: &str| {
            let mut l = Link::new(&cfg(src), Rng::new(3), false);
            let mut lost = Vec::new();
            let mut q = Queue::of(
                &(1..=200)
                    .collect::<Vec<u32>>()
                    .iter()
                    .map(|i| 28 + i)
                    .collect::<Vec<_>>(),
            );
            let mut drops = Drops::new();
            l.pull(Instant::ZERO, &mut q, &mut drops, &mut |tx| {
                if tx.lost {
                    lost.push(tx.pkt.ip_len() - 28);
                }
            });
            lost
        };
        let plain = lost_at("loss = 0.1\nmodem_buffer = \"1000p\"");
        let mut scripted = lost_at("loss = 0.1\nmodem_buffer = \"1000p\"\ndrop = [\"packet:7\"]");
        assert!(!plain.contains(&7));
        assert!(scripted.contains(&7));
        scripted.retain(|&i| i != 7);
        assert_eq!(plain, scripted);
        // Reconfiguring with the same rules keeps the counts; new rules start afresh.
        let mut l = Link::<HeaderPacket>::new(&cfg("drop = [\"packet:1\"]"), Rng::new(1), false);
        let mut q = Queue::of(&[100, 100]);
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(l.stats().scripted, 1);
        l.reconfigure(&cfg("drop = [\"packet:1\"]"), false);
        let mut q = Queue::of(&[100]);
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(l.stats().scripted, 1);
        l.reconfigure(&cfg("drop = [\"packet:1\"]\nrate = \"1Gbit\""), false);
        l.reconfigure(&cfg("drop = [\"packet:2\"]"), false);
        let mut q = Queue::of(&[100, 100]);
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(l.stats().scripted, 2);
    }

    #[test]
    fn config_merges_and_validates() {
        let base =
            cfg("rate = \"10Mbit\"\ndelay = \"5ms\"\nqueue = { kind = \"fifo\", limit = \"10p\" }");
        let dir = cfg("rate = \"100kbit\"\nmodem_buffer = \"20p\"");
        let m = dir.or(&base);
        assert_eq!(m.rate, Some(Rate::kbps(100)));
        assert_eq!(m.delay, base.delay);
        assert_eq!(m.modem_buffer, Some(Limit::Packets(20)));
        assert!(m.egress().qdisc.is_some());
        for (src, key) in [
            ("loss = 1.5", "loss"),
            ("loss = -0.1", "loss"),
            ("rate = \"0bit\"", "rate"),
            ("packet_rate = 0", "packet_rate"),
            ("modem_buffer = \"0p\"", "modem_buffer"),
            ("drop = [{ seq = 1, tx = 0 }]", "drop[0].tx"),
        ] {
            assert_eq!(cfg(src).validate().unwrap_err().path, key, "{src}");
        }
        assert!(cfg("loss = 1.0").validate().is_ok());
        assert!(toml::from_str::<LinkConfig>("queue_limit = 3").is_err());
        assert!(LinkConfig::default().is_plain_wire());
        assert!(!cfg("loss = 0.1").is_plain_wire());
        assert!(!cfg("drop = [\"ack:3\"]").is_plain_wire());
        assert_eq!(
            cfg("drop = [\"ack:3\"]")
                .or(&cfg("drop = [\"data:1\"]"))
                .drop,
            cfg("drop = [\"ack:3\"]").drop
        );
    }

    /// 300 packets of 100..400 bytes (each its own length) through a 10 Mbit/s, 5 ms line
    /// of `extra` seeded with `seed`: (arrival ns, length) in delivery order.
    fn jittered(extra: &str, seed: u64) -> Vec<(u64, u32)> {
        let c = cfg(&format!("rate = \"10Mbit\"\ndelay = \"5ms\"\n{extra}"));
        c.validate().unwrap();
        let mut l = Link::new(&c, Rng::new(seed), false);
        let lens: Vec<u32> = (100..400).collect();
        drive(&mut l, &mut Queue::of(&lens))
    }

    #[test]
    fn jitter_delays_each_packet_without_reordering() {
        let plain = jittered("", 1);
        for j in [
            "jitter = \"2ms\"",
            "jitter = { dist = \"exponential\", mean = \"0.5ms\" }",
            "jitter = { dist = \"pareto\", shape = 1.2, min = \"20us\" }",
        ] {
            let got = jittered(j, 1);
            // Every packet, in the order sent (no reordering), none earlier than without
            // jitter; the draws are up to 2 ms (uniform), and the packets sent back to
            // back (0.08-0.32 ms apart) often arrive bunched behind a later draw.
            assert_eq!(got.len(), plain.len(), "{j}");
            let lens: Vec<u32> = got.iter().map(|g| g.1).collect();
            assert_eq!(lens, (100..400).collect::<Vec<_>>(), "{j}");
            assert!(got.windows(2).all(|w| w[0].0 <= w[1].0), "{j}");
            assert!(got.iter().zip(&plain).all(|(g, p)| g.0 >= p.0), "{j}");
            let later = got.iter().zip(&plain).filter(|(g, p)| g.0 > p.0).count();
            assert!(later > 250, "{j}: {later}");
            if j == "jitter = \"2ms\"" {
                assert!(got.iter().zip(&plain).all(|(g, p)| g.0 < p.0 + 2_000_000));
                let bunched = got.windows(2).filter(|w| w[0].0 == w[1].0).count();
                assert!(bunched > 100, "{bunched}");
            }
        }
    }

    #[test]
    fn jitter_is_deterministic_and_zero_jitter_changes_nothing() {
        let j = "jitter = { dist = \"exponential\", mean = \"0.5ms\" }";
        assert_eq!(jittered(j, 7), jittered(j, 7));
        assert_ne!(jittered(j, 7), jittered(j, 8));
        // No draw is taken without jitter, so a lossy line loses the same packets.
        for extra in ["", "loss = 0.2"] {
            let plain = jittered(extra, 3);
            for zero in [
                "jitter = \"0ms\"",
                "jitter = { dist = \"exponential\", mean = \"0s\" }",
            ] {
                assert_eq!(
                    jittered(&format!("{extra}\n{zero}"), 3),
                    plain,
                    "{extra} {zero}"
                );
            }
        }
        // The link-wide key applies unless a direction sets its own.
        let base = cfg("jitter = \"1ms\"");
        assert_eq!(cfg("").or(&base).jitter, base.jitter);
        assert_eq!(
            cfg("jitter = \"2ms\"").or(&base).jitter,
            cfg("jitter = \"2ms\"").jitter
        );
        assert!(!cfg("jitter = \"1ms\"").is_plain_wire());
        assert!(cfg("jitter = \"0ms\"").is_plain_wire());
        let bad = cfg("jitter = { dist = \"uniform\", min = \"2ms\", max = \"1ms\" }");
        assert_eq!(bad.validate().unwrap_err().path, "jitter.max");
    }

    #[test]
    fn jitter_added_later_keeps_the_packets_in_flight_ahead() {
        // 20 packets on a 5 ms line, then jitter arrives: the first packet sent after it
        // does not overtake those already on the wire.
        let mut l = Link::new(
            &cfg("rate = \"100Mbit\"\ndelay = \"5ms\""),
            Rng::new(1),
            false,
        );
        let mut drops = Drops::new();
        let mut feed = Queue::of(&[1000; 20]);
        l.pull(Instant::ZERO, &mut feed, &mut drops, &mut |_| {});
        let mut now = Instant::ZERO;
        while let Some(t) = l.pull_at(feed.q.len() as u32) {
            now = t;
            l.pull(now, &mut feed, &mut drops, &mut |_| {});
        }
        let last_plain = l.wire.back().map(HeaderPacket::arrival).unwrap();
        l.reconfigure(
            &cfg("rate = \"100Mbit\"\ndelay = \"0ms\"\njitter = \"1us\""),
            false,
        );
        let mut feed = Queue::of(&[1000]);
        l.pull(now, &mut feed, &mut drops, &mut |_| {});
        let t = l.wire.back().map(HeaderPacket::arrival).unwrap();
        assert!(
            t >= last_plain && t.0 < last_plain.0 + 1_000 + 80_000,
            "{t:?} {last_plain:?}"
        );
    }

    /// A link direction from TOML with `trace = "t"` standing for the schedule `sched`
    /// (one time per line).
    fn traced(sched: &str, extra: &str) -> Link<HeaderPacket> {
        let mut c = cfg(&format!("trace = \"t\"\n{extra}"));
        let text = sched.to_string();
        c.trace
            .as_mut()
            .unwrap()
            .load(None, &mut |_| Ok(text.clone()))
            .unwrap();
        c.validate().unwrap();
        Link::new(&c, Rng::new(1), false)
    }

    fn ms_of(got: &[(u64, u32)]) -> Vec<f64> {
        got.iter().map(|g| g.0 as f64 / 1e6).collect()
    }

    #[test]
    fn trace_delivers_mtu_packets_at_the_trace_times_and_loops() {
        // Opportunities at 1, 2, 2, 4 ms, then every 4 ms again; 10 ms of propagation.
        let mut l = traced("1\n2\n2\n4\n", "delay = \"10ms\"");
        let got = drive(&mut l, &mut Queue::of(&[1500; 10]));
        assert_eq!(
            ms_of(&got),
            vec![11.0, 12.0, 12.0, 14.0, 15.0, 16.0, 16.0, 18.0, 19.0, 20.0]
        );
        assert_eq!(l.stats().delivered, 10);
        assert_eq!(l.nominal_rate(), Some(Rate(12_000_000)));
        assert_eq!(l.rate(), None);
    }

    #[test]
    fn trace_small_packets_share_an_opportunity() {
        // 40 ACKs of 40 bytes: 37 fit in the 1500 bytes of the first opportunity, the
        // 38th takes its last 20 bytes and 20 of the next, then two more fit there.
        let mut l = traced("1\n2\n3\n", "");
        let got = drive(&mut l, &mut Queue::of(&[40; 40]));
        let at = ms_of(&got);
        assert_eq!(at.iter().filter(|&&t| t == 1.0).count(), 37);
        assert_eq!(at[37..], [2.0, 2.0, 2.0]);
        // 1000-byte packets: the second spans two opportunities (500 + 500 bytes), the
        // third uses the rest of the second.
        let mut l = traced("1\n2\n3\n", "");
        let got = drive(&mut l, &mut Queue::of(&[1000, 1000, 1000, 1000]));
        assert_eq!(ms_of(&got), vec![1.0, 2.0, 2.0, 3.0]);
        assert_eq!(l.stats().sent_bytes, 4000);
    }

    #[test]
    fn trace_outage_keeps_packets_in_the_discipline() {
        // One opportunity at 1 ms, an outage to 1000 ms, then the trace repeats.
        let mut l = traced("1\n1000\n", "");
        let mut q = Queue::of(&[1500, 1500, 1500]);
        let mut drops = Drops::new();
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(
            q.asked, 0,
            "no opportunity at 0: the discipline is not asked"
        );
        assert_eq!(l.pull_at(3), Some(Instant::from_millis(1)));
        l.pull(Instant::from_millis(1), &mut q, &mut drops, &mut |_| {});
        assert_eq!((q.q.len(), q.asked), (2, 1), "one packet out, two wait");
        assert_eq!(l.pull_at(2), Some(Instant::from_millis(1000)));
        assert_eq!(
            l.busy_wake(Instant::from_millis(1), 2),
            Some(Instant::from_millis(1000))
        );
        l.pull(Instant::from_millis(500), &mut q, &mut drops, &mut |_| {});
        assert_eq!(q.q.len(), 2, "still in the outage");
        let got = drive(&mut l, &mut q);
        assert_eq!(ms_of(&got), vec![1.0, 1000.0, 1001.0]);
    }

    #[test]
    fn trace_idle_link_banks_nothing() {
        // Opportunities every 10 ms. A 100-byte packet at 0 goes at 10 ms; its 1400
        // unused bytes are not there for a packet arriving at 15 ms, which waits for 20.
        let mut l = traced("10\n20\n", "");
        let mut q = Queue::of(&[100]);
        let got = drive(&mut l, &mut q);
        assert_eq!(ms_of(&got), vec![10.0]);
        let mut drops = Drops::new();
        // The discipline answered empty at 10 ms; a packet arrives at 15 ms.
        q.q.push_back(pkt(100));
        l.pull(Instant::from_millis(15), &mut q, &mut drops, &mut |_| {});
        assert_eq!(q.q.len(), 1, "not taken before its opportunity");
        let got = drive(&mut l, &mut q);
        assert_eq!(ms_of(&got), vec![20.0]);
        // A packet available at the very time of an opportunity takes it.
        let mut l = traced("10\n20\n", "");
        let mut q = Queue::of(&[]);
        l.pull(Instant::from_millis(3), &mut q, &mut drops, &mut |_| {});
        q.q.push_back(pkt(1500));
        let mut starts = Vec::new();
        l.pull(Instant::from_millis(10), &mut q, &mut drops, &mut |tx| {
            starts.push(tx.start)
        });
        assert_eq!(starts, vec![Instant::from_millis(10)]);
    }

    #[test]
    fn trace_with_modem_buffer_and_linklayer() {
        // A modem buffer of 2 packets in front of a line with one opportunity per ms:
        // the discipline is drained at once, two wait in the modem, the rest dropped.
        let mut l = traced("1\n", "modem_buffer = \"2p\"");
        let mut q = Queue::of(&[1500; 5]);
        let mut drops = Drops::new();
        l.pull(Instant::ZERO, &mut q, &mut drops, &mut |_| {});
        assert_eq!(
            l.backlog(),
            (2, 0),
            "no opportunity at 0: all wait in the modem"
        );
        assert_eq!(drops.len(), 3);
        let got = drive(&mut l, &mut q);
        assert_eq!(ms_of(&got), vec![1.0, 2.0]);
        // The trace charges link-layer bytes: a 40-byte ACK over LLC/SNAP is 106 bytes,
        // 14 to an opportunity.
        let mut l = traced("1\n2\n", "linklayer = { encap = \"llc_snap_routed\" }");
        let got = drive(&mut l, &mut Queue::of(&[40; 15]));
        assert_eq!(ms_of(&got)[13..], [1.0, 2.0]);
    }

    #[test]
    fn trace_config_rules() {
        let e = cfg("trace = \"x\"\nrate = \"1Mbit\"")
            .validate()
            .unwrap_err();
        assert_eq!(e.path, "trace");
        assert!(e.msg.contains("either 'trace' or 'rate'"), "{}", e.msg);
        let e = cfg("trace = \"x\"\npacket_rate = 10")
            .validate()
            .unwrap_err();
        assert!(e.msg.contains("'packet_rate'"), "{}", e.msg);
        assert!(toml::from_str::<LinkConfig>("trace = \"\"").is_err());
        // A direction's own trace replaces the link-wide rate, and the other way round.
        let m = cfg("trace = \"x\"").or(&cfg("rate = \"1Mbit\"\ndelay = \"5ms\""));
        assert!(m.rate.is_none() && m.trace.is_some() && m.delay.is_some());
        assert!(m.validate().is_ok());
        let m = cfg("rate = \"2Mbit\"").or(&cfg("trace = \"x\""));
        assert!(m.trace.is_none());
        assert_eq!(m.rate, Some(Rate::mbps(2)));
        assert!(!cfg("trace = \"x\"").is_plain_wire());
        // Loading: files relative to the base directory; errors name the file and line.
        let mut t: LinkConfig = cfg("trace = \"dir/up.trace\"");
        let mut seen = None;
        let e = t
            .trace
            .as_mut()
            .unwrap()
            .load(Some(std::path::Path::new("/etc/x")), &mut |p| {
                seen = Some(p.to_path_buf());
                Ok("1\n2\nbad\n".into())
            })
            .unwrap_err();
        assert_eq!(seen.unwrap(), std::path::Path::new("/etc/x/dir/up.trace"));
        assert!(
            e.msg.contains("/etc/x/dir/up.trace") && e.msg.contains("line 3"),
            "{}",
            e.msg
        );
        let e = t
            .trace
            .as_mut()
            .unwrap()
            .load(None, &mut |_| {
                Err(std::io::Error::new(std::io::ErrorKind::NotFound, "gone"))
            })
            .unwrap_err();
        assert!(e.msg.contains("cannot read 'dir/up.trace'"), "{}", e.msg);
        let mut b = cfg("trace = \"builtin:nope\"");
        let e = b
            .trace
            .as_mut()
            .unwrap()
            .load(None, &mut |_| unreachable!())
            .unwrap_err();
        assert!(e.msg.contains("no builtin trace 'nope'"), "{}", e.msg);
    }

    #[test]
    fn trace_reconfigure_keeps_the_place_and_switches_back_to_a_rate() {
        let mut l = traced("1\n2\n3\n4\n", "");
        let mut q = Queue::of(&[1500, 1500]);
        let mut drops = Drops::new();
        l.pull(Instant::from_millis(1), &mut q, &mut drops, &mut |_| {});
        assert_eq!(l.free_at(), Instant::from_millis(2));
        // Back to a 1 Mbit/s rate: free from the last packet's end (1 ms), 12 ms each.
        l.reconfigure(&cfg("rate = \"1Mbit\""), false);
        let got = drive(&mut l, &mut q);
        assert_eq!(ms_of(&got), vec![1.0, 13.0]);
    }

    /// A [`crate::qdisc::Fifo`] as a link's feed.
    struct FifoFeed(crate::qdisc::Fifo<HeaderPacket>);

    impl Feed<HeaderPacket> for FifoFeed {
        fn dequeue(&mut self, now: Instant, d: &mut Drops<HeaderPacket>) -> Dequeued<HeaderPacket> {
            crate::qdisc::Qdisc::dequeue(&mut self.0, now, d)
        }
    }

    #[test]
    fn own_fifo_delivers_as_a_fifo_feed_does() {
        use crate::qdisc::Qdisc;
        // Bursts offered faster than the line sends (10 Mbit/s, 1 ms of flight): a queue
        // builds, overflows its 20 packets and drains; packets of varying sizes.
        let line = "rate = \"10Mbit\"\ndelay = \"1ms\"";
        let fifo = FifoConfig {
            limit: Limit::Packets(20),
            drop: DropSide::Tail,
        };
        let offers: Vec<(u64, u32)> = (0..400u64)
            .map(|i| {
                (
                    (i / 50) * 20_000_000 + (i % 50) * 100_000,
                    100 + (i * 37 % 1400) as u32,
                )
            })
            .collect();
        // (arrival ns, ip_len) of each delivery, (start ns, tx ns) of each transmission,
        // the counters and the drops' lengths.
        type Run = (
            Vec<(u64, u32)>,
            Vec<(u64, u64)>,
            LinkStats,
            QdiscStats,
            Vec<u32>,
        );
        let run = |own: bool| -> Run {
            let mut l = Link::<HeaderPacket>::new(&cfg(line), Rng::new(1), false);
            assert_eq!(l.own_fifo(&fifo), own || l.own_stats().is_some());
            if !own {
                l.own = None;
            }
            let mut feed = FifoFeed(crate::qdisc::Fifo::new(fifo));
            let (mut got, mut txs, mut dropped) = (Vec::new(), Vec::new(), Vec::new());
            let mut drops = Drops::new();
            let mut next = 0;
            let mut now = Instant::ZERO;
            loop {
                while next < offers.len() && offers[next].0 <= now.as_nanos() {
                    let p = pkt(offers[next].1);
                    if own {
                        l.enqueue(p, &mut drops);
                    } else {
                        feed.0.enqueue(now, p, &mut drops);
                    }
                    next += 1;
                }
                l.pull(now, &mut feed, &mut drops, &mut |tx| {
                    txs.push((tx.start.as_nanos(), tx.tx_ns))
                });
                while let Some(p) = l.pop_arrival(now) {
                    got.push((now.as_nanos(), p.ip_len()));
                }
                dropped.extend(drops.drain().map(|d| d.pkt.ip_len()));
                let backlog = l
                    .own_stats()
                    .map_or(feed.0.backlog().packets, |s| s.backlog.packets);
                let offer = offers.get(next).map(|o| Instant(o.0));
                match earliest(l.poll_at(backlog), offer) {
                    Some(t) => now = t.max(now),
                    None => break,
                }
            }
            let qs = l
                .own_stats()
                .cloned()
                .unwrap_or_else(|| feed.0.stats().clone());
            (got, txs, l.stats().clone(), qs, dropped)
        };
        let (a, b) = (run(false), run(true));
        assert_eq!(a.2.delivered + a.4.len() as u64, 400);
        assert!(
            a.4.len() > 50,
            "the queue overflowed: {} dropped",
            a.4.len()
        );
        assert_eq!(a.3.max_backlog_packets, 20);
        assert_eq!(a.0, b.0, "arrivals");
        assert_eq!(a.1, b.1, "transmissions");
        assert_eq!(a.2, b.2, "link counters");
        assert_eq!(a.3, b.3, "queue counters");
        assert_eq!(a.4, b.4, "drops");
        assert_eq!(b.3.backlog, Default::default());
        // Only a plain serialiser and delay takes its own FIFO, with a drop-tail FIFO.
        for (src, drop, takes) in [
            (line, DropSide::Tail, true),
            (line, DropSide::Head, false),
            ("rate = \"1Mbit\"\nloss = 0.1", DropSide::Tail, false),
            (
                "rate = \"1Mbit\"\nmodem_buffer = \"5p\"",
                DropSide::Tail,
                false,
            ),
            ("drop = [\"packet:2\"]", DropSide::Tail, false),
            ("jitter = \"1ms\"", DropSide::Tail, false),
            ("jitter = \"0ms\"", DropSide::Tail, true),
        ] {
            let mut l = Link::<HeaderPacket>::new(&cfg(src), Rng::new(1), false);
            let c = FifoConfig { drop, ..fifo };
            assert_eq!(l.own_fifo(&c), takes, "{src} {drop:?}");
            assert_eq!(l.own_stats().is_some(), takes);
        }
    }

    #[test]
    fn own_fifo_keeps_packets_in_order_across_the_ring() {
        // Packets queued behind packets in flight: the line's backlog counts only those in
        // flight, the queue's those waiting; the ring wraps many times.
        let mut l = Link::<HeaderPacket>::new(
            &cfg("rate = \"8Mbit\"\ndelay = \"10ms\""),
            Rng::new(1),
            false,
        );
        assert!(l.own_fifo(&FifoConfig::default()));
        let mut drops = Drops::new();
        let mut feed = Queue::of(&[]);
        let mut got = Vec::new();
        // 700 to 999 bytes, each less than 1 ms on the line and started on the next call
        // (one a ms): 3 offered every 2 ms for 200 ms.
        for ms in 0..400u64 {
            let now = Instant::from_millis(ms);
            if ms % 2 == 0 && ms < 200 {
                for k in 0..3 {
                    l.enqueue(pkt(700 + (ms as u32 / 2) * 3 + k), &mut drops);
                }
            }
            l.pull(now, &mut feed, &mut drops, &mut |_| {});
            while let Some(p) = l.pop_arrival(now) {
                got.push((ms, p.ip_len()));
            }
            if ms == 150 {
                let q = l.own_stats().unwrap().backlog.packets;
                // 228 offered by 150 ms, 151 sent (those sent from 140 ms on are in
                // flight), 77 waiting.
                assert_eq!((l.backlog().1, q), (11, 77));
            }
        }
        assert_eq!(feed.asked, 0, "the feed is not asked");
        assert!(drops.is_empty());
        assert_eq!(got.len(), 300);
        let lens: Vec<u32> = got.iter().map(|g| g.1).collect();
        assert_eq!(lens, (700..1000).collect::<Vec<_>>());
        // One per ms from 11 ms (the first sent at 0, 1 ms on the line, 10 ms of flight).
        assert_eq!(got[0].0, 11);
        assert_eq!(got[299].0, 310);
        assert_eq!(l.backlog(), (0, 0));
    }

    #[test]
    fn an_exporting_line_hands_over_what_it_would_deliver() {
        // The same packets through two lines, one exporting: the exported packets, with
        // their arrival times, are the other's deliveries; waiting ones stay queued.
        let line = || {
            let mut l = Link::<HeaderPacket>::new(
                &cfg("rate = \"8Mbit\"\ndelay = \"10ms\""),
                Rng::new(1),
                false,
            );
            assert!(l.own_fifo(&FifoConfig::default()));
            l
        };
        let (mut plain, mut export) = (line(), line());
        export.set_export(true);
        assert!(export.exports() && !plain.exports());
        let mut drops = Drops::new();
        let mut feed = Queue::of(&[]);
        let (mut delivered, mut exported) = (Vec::new(), Vec::new());
        for ms in 0..100u64 {
            let now = Instant::from_millis(ms);
            if ms < 30 {
                for l in [&mut plain, &mut export] {
                    l.enqueue(pkt(1000 + ms as u32), &mut drops);
                    l.enqueue(pkt(500 + ms as u32), &mut drops);
                }
            }
            for l in [&mut plain, &mut export] {
                l.pull(now, &mut feed, &mut drops, &mut |_| {});
            }
            let mut out = Vec::new();
            export.take_exported(&mut out);
            exported.extend(out.into_iter().map(|(t, p)| (t, p.ip_len())));
            assert_eq!(export.next_arrival(), None, "nothing propagates on it");
            while let Some(p) = plain.pop_arrival(now) {
                delivered.push(p.ip_len());
            }
            if ms == 20 {
                // 1 500 bytes per 2 ms at 8 Mbit/s: both lines hold the same waiting
                // packets.
                let waiting = |l: &Link<HeaderPacket>| l.own_stats().unwrap().backlog.packets;
                assert_eq!(waiting(&plain), waiting(&export));
                assert!(waiting(&export) > 0);
            }
        }
        assert_eq!(exported.len(), 60);
        assert_eq!(exported.iter().map(|e| e.1).collect::<Vec<_>>(), delivered);
        assert!(exported.windows(2).all(|w| w[0].0 <= w[1].0));
        // The first: 1 000 bytes from 0 (1 ms at 8 Mbit/s) and 10 ms of flight.
        assert_eq!(exported[0].0, Instant::from_micros(11_000));
        assert_eq!(export.stats().delivered, 60);
        assert_eq!(export.stats(), plain.stats());
    }

    #[test]
    fn loss_seeds_differ_per_link_and_direction() {
        assert_eq!(loss_seed(1, "a", "to_a"), loss_seed(1, "a", "to_a"));
        assert_ne!(loss_seed(1, "a", "to_a"), loss_seed(1, "a", "to_b"));
        assert_ne!(loss_seed(1, "a", "to_a"), loss_seed(1, "b", "to_a"));
        assert_ne!(loss_seed(1, "a", "to_a"), loss_seed(2, "a", "to_a"));
    }
}
