//! Queue disciplines: the [`Qdisc`] trait, its accounting, and the basic disciplines.
//!
//! # Contract
//!
//! A discipline is a passive state machine driven by its runtime (the simulator's link, the
//! live box's device loop):
//!
//! * [`Qdisc::enqueue`] offers a packet at `now`. It never blocks. Anything the discipline
//!   discards — the offered packet, or packets already queued that it evicts (a superseded
//!   ACK, a head drop) — goes to the caller's [`Drops`] sink with a [`Verdict`]; the
//!   runtime decides what discarding means (the simulator records it, the live box frees
//!   the buffer and counts it).
//! * [`Qdisc::dequeue`] asks for the next packet the link may send at `now`; the answer is
//!   a packet, "nothing before `t`" ([`Dequeued::NotBefore`], a shaper waiting for tokens)
//!   or [`Dequeued::Empty`]. There is no peek: callers use [`Qdisc::backlog`] and
//!   [`Qdisc::poll_at`].
//!   Runtimes call it whenever the link can take a packet and the discipline holds
//!   something; a discipline that must also see the link go idle says so with
//!   [`Qdisc::wants_idle_dequeue`] and then gets a call each time the transmitter frees up.
//! * [`Qdisc::poll_at`] is the earliest instant at which the answer of `dequeue` or the
//!   discipline's internal state may change without a new packet (shaper tokens, ACK leak
//!   timers); the runtime calls [`Qdisc::handle_timeout`] then.
//! * Disciplines that depend on the other direction (ACK delay control watches the forward
//!   queue) receive it through [`Qdisc::handle_observation`]; they never reach into
//!   another object.
//!
//! `now` must not decrease between calls; a decrease is treated as no time passing.
//!
//! # Conservation
//!
//! Every packet that enters leaves exactly once: dequeued, dropped (with a
//! [`DropReason`]) or filtered (with a [`FilterReason`]). [`QdiscStats`] keeps the ns-3
//! identities
//!
//! * `received == enqueued + rejected` (rejected = discarded at offer time), and
//! * `backlog == enqueued - dequeued - removed` (removed = discarded after queueing),
//!
//! and [`QdiscStats::check`] asserts them (tests call it after every step; debug builds
//! assert after every call of the basic disciplines).

mod ack_fifo;
pub mod ack_filter;
mod ack_shaper;
mod aggregate;
mod cobalt;
mod codel;
mod config;
mod drr;
mod ered;
mod fifo;
mod fq_codel;
pub mod hfsc;
pub mod htb;
mod leaf;
mod prio;
mod tbf;
mod tree;

pub use crate::config::ConfigError;
pub use ack_fifo::{AckFifo, AckFifoConfig, AckFifoDrop};
pub use ack_filter::{AckFilter, AckFilterConfig};
pub use ack_shaper::{
    AckShaper, AckShaperConfig, AckShaperCounters, Fraction, LeakConfig, Threshold, Tuning,
};
pub use aggregate::{Aggregate, AggregateConfig, AggregateCounters};
pub use codel::{Codel, CodelConfig, CodelCounters};
pub use config::{BuildCtx, DropSide, QdiscConfig};
pub use drr::{Drr, DrrConfig};
pub use ered::{Ered, EredConfig, EredCounters};
pub use fifo::{Fifo, FifoConfig};
pub use fq_codel::{AqmKind, FqCodelConfig, HostFqCodelConfig, HostKey};
pub(crate) use fq_codel::{FqCodel, HostFqCodel};
pub use hfsc::{Hfsc, HfscConfig};
pub use htb::{ClassMode, Htb, HtbConfig};
pub use prio::{Prio, PrioConfig};
pub use tbf::{Tbf, TbfConfig};

use crate::packet::Pkt;
use crate::time::Instant;
use crate::units::Rate;
use core::fmt;

/// Why a packet was dropped: it was lost to the flow.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum DropReason {
    /// Tail drop: the queue was full when the packet arrived.
    QueueFull,
    /// Head drop: the oldest packet was dropped to make room.
    HeadDrop,
    /// Active queue management (RED/ERED early drop).
    Aqm,
    /// Policer: out of profile.
    Policed,
    /// The longest per-flow queue lost its oldest packet to make room (ACK-filter drop
    /// policy "longest queue drop").
    LongestQueue,
    /// The flow with the highest measured rate lost its oldest packet to make room.
    HighestRate,
    /// Held longer than a discipline's delay bound.
    DelayBound,
    /// No class matched and the discipline has no default.
    Unclassified,
    /// The packet could not be parsed and the configuration says to drop such packets.
    Malformed,
    /// Larger than the discipline can ever send (e.g. beyond a token bucket's depth).
    TooBig,
    /// Random loss on a link (simulator links, live link emulation).
    LinkLoss,
    /// Per-flow state was full and the policy drops rather than evicts.
    StateFull,
    /// A link's modem buffer (the drop-tail FIFO between a discipline and the line) was
    /// full ([`crate::link`]).
    ModemBufferFull,
}

impl DropReason {
    /// All reasons, in counter order.
    pub const ALL: [DropReason; 13] = [
        DropReason::QueueFull,
        DropReason::HeadDrop,
        DropReason::Aqm,
        DropReason::Policed,
        DropReason::LongestQueue,
        DropReason::HighestRate,
        DropReason::DelayBound,
        DropReason::Unclassified,
        DropReason::Malformed,
        DropReason::TooBig,
        DropReason::LinkLoss,
        DropReason::StateFull,
        DropReason::ModemBufferFull,
    ];
    /// A stable snake_case name (used in tables, JSON and Prometheus labels).
    pub const fn name(self) -> &'static str {
        match self {
            DropReason::QueueFull => "queue_full",
            DropReason::HeadDrop => "head_drop",
            DropReason::Aqm => "aqm",
            DropReason::Policed => "policed",
            DropReason::LongestQueue => "longest_queue",
            DropReason::HighestRate => "highest_rate",
            DropReason::DelayBound => "delay_bound",
            DropReason::Unclassified => "unclassified",
            DropReason::Malformed => "malformed",
            DropReason::TooBig => "too_big",
            DropReason::LinkLoss => "link_loss",
            DropReason::StateFull => "state_full",
            DropReason::ModemBufferFull => "modem_buffer_full",
        }
    }
}

/// Why a packet was filtered: removed because another packet carries its information
/// (never a loss of information the sender needs).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, PartialOrd, Ord)]
#[repr(u8)]
pub enum FilterReason {
    /// A queued ACK was superseded by a newer cumulative ACK of the same connection.
    AckSuperseded,
    /// An ACK was removed to keep a connection within its ACK threshold δ.
    AckThreshold,
    /// The lowest-sequence ACK of a connection was removed (per-connection ACK limit).
    AckLowestSeq,
}

impl FilterReason {
    /// All reasons, in counter order.
    pub const ALL: [FilterReason; 3] = [
        FilterReason::AckSuperseded,
        FilterReason::AckThreshold,
        FilterReason::AckLowestSeq,
    ];
    /// A stable snake_case name.
    pub const fn name(self) -> &'static str {
        match self {
            FilterReason::AckSuperseded => "ack_superseded",
            FilterReason::AckThreshold => "ack_threshold",
            FilterReason::AckLowestSeq => "ack_lowest_seq",
        }
    }
}

/// How a packet left a discipline other than by being sent.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Verdict {
    /// Lost.
    Dropped(DropReason),
    /// Superseded; its information lives on in another packet.
    Filtered(FilterReason),
}

impl Verdict {
    /// Number of verdicts: every drop reason, then every filter reason.
    pub const COUNT: usize = DropReason::ALL.len() + FilterReason::ALL.len();
    /// A stable name: the reason's name.
    pub const fn name(self) -> &'static str {
        match self {
            Verdict::Dropped(r) => r.name(),
            Verdict::Filtered(r) => r.name(),
        }
    }
    /// A dense index in `0..COUNT` (drop reasons first, in [`DropReason::ALL`] order, then
    /// filter reasons), for counters kept in arrays.
    pub const fn index(self) -> usize {
        match self {
            Verdict::Dropped(r) => r as usize,
            Verdict::Filtered(r) => DropReason::ALL.len() + r as usize,
        }
    }
    /// Every verdict, in [`Verdict::index`] order.
    pub fn all() -> impl Iterator<Item = Verdict> {
        DropReason::ALL
            .into_iter()
            .map(Verdict::Dropped)
            .chain(FilterReason::ALL.into_iter().map(Verdict::Filtered))
    }
}

/// Whether a discarded packet had been queued.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Stage {
    /// Discarded when offered; it never entered the queue.
    Rejected,
    /// Discarded after having been queued.
    Removed,
}

/// One discarded packet.
#[derive(Debug)]
pub struct Discard<P> {
    /// The packet.
    pub pkt: P,
    /// Why.
    pub verdict: Verdict,
    /// Whether it had been queued.
    pub stage: Stage,
}

/// The caller's sink for discarded packets. The caller drains it after each call.
#[derive(Debug)]
pub struct Drops<P> {
    items: Vec<Discard<P>>,
}

impl<P> Default for Drops<P> {
    fn default() -> Self {
        Drops { items: Vec::new() }
    }
}

impl<P> Drops<P> {
    /// An empty sink.
    pub fn new() -> Self {
        Self::default()
    }
    /// Record a discarded packet.
    pub fn push(&mut self, pkt: P, verdict: Verdict, stage: Stage) {
        self.items.push(Discard {
            pkt,
            verdict,
            stage,
        });
    }
    /// Record a drop of the offered packet.
    pub fn reject(&mut self, pkt: P, reason: DropReason) {
        self.push(pkt, Verdict::Dropped(reason), Stage::Rejected);
    }
    /// Number of records.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// Records from index `from` on (to inspect what one call added).
    pub fn since(&self, from: usize) -> &[Discard<P>] {
        &self.items[from.min(self.items.len())..]
    }
    /// Take all records.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Discard<P>> {
        self.items.drain(..)
    }
}

/// Result of asking a discipline for its next packet at `now`.
#[derive(Debug, PartialEq, Eq)]
pub enum Dequeued<P> {
    /// Send this packet.
    Packet(P),
    /// Work is queued but nothing may leave before this instant.
    NotBefore(Instant),
    /// Nothing is queued.
    Empty,
}

impl<P> Dequeued<P> {
    /// The packet, if any.
    pub fn packet(self) -> Option<P> {
        match self {
            Dequeued::Packet(p) => Some(p),
            _ => None,
        }
    }
}

/// How much a discipline holds.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub struct Backlog {
    /// Packets queued.
    pub packets: u32,
    /// Bytes queued (IP length).
    pub bytes: u64,
}

impl Backlog {
    /// Add a packet of `len` bytes.
    #[inline]
    pub fn add(&mut self, len: u32) {
        self.packets += 1;
        self.bytes += len as u64;
    }
    /// Remove a packet of `len` bytes.
    #[inline]
    pub fn sub(&mut self, len: u32) {
        debug_assert!(
            self.packets > 0 && self.bytes >= len as u64,
            "backlog underflow"
        );
        self.packets = self.packets.saturating_sub(1);
        self.bytes = self.bytes.saturating_sub(len as u64);
    }
}

/// What the runtime tells a discipline about the queue of the opposite direction of the
/// same node (ACK delay control uses it to detect forward congestion).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct PeerObservation {
    /// The other direction's backlog.
    pub backlog: Backlog,
    /// The other direction's service (link) rate, if known.
    pub service_rate: Option<Rate>,
    /// The other direction's capacity in bytes, if known (for self-tuning).
    pub capacity_bytes: Option<u64>,
    /// The other direction's capacity in packets, if its limit is in packets.
    pub capacity_packets: Option<u32>,
    /// Packets the other direction has handed to its link so far (cumulative; for
    /// measuring its service rate).
    pub dequeued_packets: u64,
    /// Bytes the other direction has handed to its link so far (cumulative).
    pub dequeued_bytes: u64,
}

/// Counters of one discipline. All fields count packets except the `*_bytes` ones.
///
/// Laid out in this order: what every packet updates (offered, queued, sent, the backlog
/// and its high-water marks) in the first 64 bytes, the discards after them.
#[derive(Clone, PartialEq, Eq, Default)]
#[repr(C)]
pub struct QdiscStats {
    /// Packets offered.
    pub received: u64,
    /// Packets accepted into the queue.
    pub enqueued: u64,
    /// Packets handed to the link.
    pub dequeued: u64,
    /// Bytes handed to the link.
    pub dequeued_bytes: u64,
    /// Packets currently queued.
    pub backlog: Backlog,
    /// Highest byte backlog seen.
    pub max_backlog_bytes: u64,
    /// Highest packet backlog seen.
    pub max_backlog_packets: u32,
    /// Discarded when offered.
    pub rejected: u64,
    /// Discarded after queueing.
    pub removed: u64,
    /// Drops by reason (indexed by `DropReason as usize`).
    pub dropped: [u64; DropReason::ALL.len()],
    /// Filters by reason (indexed by `FilterReason as usize`).
    pub filtered: [u64; FilterReason::ALL.len()],
}

impl fmt::Debug for QdiscStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("QdiscStats");
        d.field("received", &self.received)
            .field("enqueued", &self.enqueued)
            .field("dequeued", &self.dequeued)
            .field("rejected", &self.rejected)
            .field("removed", &self.removed)
            .field("backlog", &self.backlog);
        for r in DropReason::ALL {
            if self.dropped[r as usize] > 0 {
                d.field(r.name(), &self.dropped[r as usize]);
            }
        }
        for r in FilterReason::ALL {
            if self.filtered[r as usize] > 0 {
                d.field(r.name(), &self.filtered[r as usize]);
            }
        }
        d.finish()
    }
}

impl QdiscStats {
    /// A packet was offered.
    #[inline]
    pub fn on_receive(&mut self) {
        self.received += 1;
    }
    /// The offered packet was queued.
    #[inline]
    pub fn on_enqueue(&mut self, len: u32) {
        self.enqueued += 1;
        self.backlog.add(len);
        self.max_backlog_packets = self.max_backlog_packets.max(self.backlog.packets);
        self.max_backlog_bytes = self.max_backlog_bytes.max(self.backlog.bytes);
    }
    /// A queued packet went to the link.
    #[inline]
    pub fn on_dequeue(&mut self, len: u32) {
        self.dequeued += 1;
        self.dequeued_bytes += len as u64;
        self.backlog.sub(len);
    }
    fn count(&mut self, v: Verdict) {
        match v {
            Verdict::Dropped(r) => self.dropped[r as usize] += 1,
            Verdict::Filtered(r) => self.filtered[r as usize] += 1,
        }
    }
    /// The offered packet was discarded.
    #[inline]
    pub fn on_reject(&mut self, v: Verdict) {
        self.rejected += 1;
        self.count(v);
    }
    /// A queued packet of `len` bytes was discarded.
    #[inline]
    pub fn on_remove(&mut self, v: Verdict, len: u32) {
        self.removed += 1;
        self.backlog.sub(len);
        self.count(v);
    }
    /// Account for what a child discipline's call added to `drops` (records from index
    /// `from`), for a parent that forwards offers to children. Returns true if the offered
    /// packet was rejected. Call `on_receive` first; this calls `on_enqueue` when the offered
    /// packet was accepted (its length is `len`).
    pub fn absorb<P: Pkt>(&mut self, drops: &Drops<P>, from: usize, len: u32) -> bool {
        let mut rejected = false;
        for d in drops.since(from) {
            match d.stage {
                Stage::Rejected => {
                    rejected = true;
                    self.on_reject(d.verdict)
                }
                Stage::Removed => self.on_remove(d.verdict, d.pkt.ip_len()),
            }
        }
        if !rejected {
            self.on_enqueue(len);
        }
        rejected
    }
    /// Total drops.
    pub fn drops(&self) -> u64 {
        self.dropped.iter().sum()
    }
    /// Total filtered.
    pub fn filters(&self) -> u64 {
        self.filtered.iter().sum()
    }
    /// Drops for one reason.
    pub fn dropped_for(&self, r: DropReason) -> u64 {
        self.dropped[r as usize]
    }
    /// Filters for one reason.
    pub fn filtered_for(&self, r: FilterReason) -> u64 {
        self.filtered[r as usize]
    }
    /// Check the conservation identities against the discipline's real backlog.
    /// Returns a description of the first violation.
    pub fn check(&self, actual: Backlog) -> Result<(), String> {
        if self.received != self.enqueued + self.rejected {
            return Err(format!(
                "received {} != enqueued {} + rejected {}",
                self.received, self.enqueued, self.rejected
            ));
        }
        let expect = self.enqueued as i128 - self.dequeued as i128 - self.removed as i128;
        if expect != self.backlog.packets as i128 || expect != actual.packets as i128 {
            return Err(format!(
                "backlog: enqueued {} - dequeued {} - removed {} = {expect}, counted {}, actual {}",
                self.enqueued, self.dequeued, self.removed, self.backlog.packets, actual.packets
            ));
        }
        if self.backlog.bytes != actual.bytes {
            return Err(format!(
                "byte backlog counted {} != actual {}",
                self.backlog.bytes, actual.bytes
            ));
        }
        if self.drops() + self.filters() != self.rejected + self.removed {
            return Err(format!(
                "reasons {} + {} != rejected {} + removed {}",
                self.drops(),
                self.filters(),
                self.rejected,
                self.removed
            ));
        }
        Ok(())
    }
}

/// A queue discipline. See the [module documentation](self) for the contract.
pub trait Qdisc<P: Pkt>: Send {
    /// Offer `pkt` at `now`. Discarded packets go to `drops`.
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>);
    /// The next packet that may be sent at `now`.
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P>;
    /// The earliest instant at which [`Qdisc::handle_timeout`] must be called, if any.
    /// Returns `None` when only a new packet can change the state.
    fn poll_at(&self) -> Option<Instant> {
        None
    }
    /// Advance internal timers to `now` (expire held packets, refill tokens). Packets it
    /// discards go to `drops`. The default does nothing.
    fn handle_timeout(&mut self, _now: Instant, _drops: &mut Drops<P>) {}
    /// Receive the state of the opposite direction's queue. The default ignores it.
    fn handle_observation(&mut self, _now: Instant, _obs: &PeerObservation) {}
    /// What is queued.
    fn backlog(&self) -> Backlog;
    /// Counters.
    fn stats(&self) -> &QdiscStats;
    /// Counters of inner disciplines, labelled (class names, bands). Empty by default.
    fn child_stats(&self) -> Vec<(String, QdiscStats)> {
        Vec::new()
    }
    /// Discipline-specific counters beyond [`QdiscStats`], as (name, value) pairs (e.g. the
    /// ACK shaper's delay-bound hits). Empty by default.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Whether the discipline must be asked for a packet when the link becomes free even
    /// if it holds nothing (to observe the link going idle, as the ACK filter's channel
    /// estimators do). Runtimes always call `dequeue` when the link can take a packet
    /// while the discipline has a backlog; when this returns true they also call it once
    /// each time the transmitter frees up with nothing queued. Default: false.
    fn wants_idle_dequeue(&self) -> bool {
        false
    }
    /// Whether [`Qdisc::poll_at`] can ever name an instant: false for a discipline that
    /// changes only when it is offered or asked for a packet, so that parents and runtimes
    /// need not ask it. Fixed when the discipline is built. Default: true.
    fn has_timers(&self) -> bool {
        true
    }
    /// Whether [`Qdisc::handle_observation`] can change anything: false for a discipline
    /// that ignores the opposite direction, so that the pipeline need not build the
    /// observation nor ask the discipline again after the other direction changed. Fixed
    /// when the discipline is built. Default: true.
    fn observes_peer(&self) -> bool {
        true
    }
    /// Whether the discipline may read or rewrite a packet's headers beyond what the
    /// packet answers without them: its length and class, [`Pkt::flow_ids`],
    /// [`Pkt::fields`], [`Pkt::ack_seg`] and [`Pkt::set_dscp_ecn`]. A runtime whose packets keep their
    /// headers in a form that must be unpacked first (and answer those) unpacks them
    /// before a discipline that does. Default: true.
    fn reads_headers(&self) -> bool {
        true
    }
    /// Entries of per-flow state held — connection tables, ACK histories — by this
    /// discipline and its children together: what grows with the number of flows seen
    /// rather than with the backlog. Every such table has a configured bound and evicts
    /// beyond it; runtimes report this number so a flood of new flows can be watched.
    /// Default 0 (no per-flow state).
    fn flow_entries(&self) -> u64 {
        0
    }
    /// A short name of the discipline kind ("fifo", "htb", ...).
    fn kind(&self) -> &'static str;
    /// Empty the discipline for good (at shutdown, or when a new configuration replaces
    /// it): append every packet it holds to `out`, in the order it would serve them, and
    /// return how many it still holds afterwards (only a discipline bug leaves any).
    ///
    /// The discipline runs in a private future (from 2^62 ns on, far beyond any real
    /// `now`) where time jumps forward whenever it answers "not before t", so shapers
    /// release what they hold burst by burst and timers fire. What it discards on the way
    /// (a delay bound that expired in that future) is an artefact of the drain, not a
    /// decision about the packet: it goes to `out` as well. The counters see ordinary
    /// dequeues and discards. Afterwards the discipline has seen that future: do not
    /// drive it at real times again.
    fn drain(&mut self, out: &mut Vec<P>) -> u32 {
        let mut t = Instant(1 << 62);
        let step = core::time::Duration::from_secs(1000);
        let mut drops = Drops::new();
        let budget = 4 * self.backlog().packets as u64 + 1000;
        for _ in 0..budget {
            if self.poll_at().is_some_and(|p| p <= t) {
                self.handle_timeout(t, &mut drops);
            }
            match self.dequeue(t, &mut drops) {
                Dequeued::Packet(p) => out.push(p),
                Dequeued::NotBefore(nt) => t = nt.max(t + step),
                Dequeued::Empty => break,
            }
            out.extend(drops.drain().map(|d| d.pkt));
        }
        out.extend(drops.drain().map(|d| d.pkt));
        self.backlog().packets
    }
}

#[cfg(test)]
pub(crate) mod testutil;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdict_indices_are_dense_and_distinct() {
        let idx: Vec<usize> = Verdict::all().map(Verdict::index).collect();
        assert_eq!(idx, (0..Verdict::COUNT).collect::<Vec<_>>());
        assert_eq!(
            Verdict::Filtered(FilterReason::AckSuperseded).index(),
            DropReason::ALL.len()
        );
    }
}
