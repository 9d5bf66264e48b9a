//! Flow queueing with CoDel: FQ-CoDel (RFC 8290) and host-then-flow fair queueing.
//!
//! # Principles
//!
//! **FQ-CoDel.** Packets are hashed by 5-tuple — with a perturbation drawn from the
//! discipline's seed, so flows cannot aim at one another's queue — into `flows` queues, each
//! with its own CoDel state. A deficit round robin with a byte `quantum` serves the queues
//! from two lists: a queue that becomes active joins the *new* list with a full quantum,
//! and the new list is always served first; a queue that uses up its quantum, or empties
//! while others wait, moves to the *old* list. So a flow that sends less than its share —
//! a ping, a DNS lookup, a TCP handshake — has its packets sent almost at once, while the
//! bulk flows share the rest byte-fairly and CoDel keeps each of their queues short. When
//! the whole discipline holds more than `limit` packets or `memory_limit` bytes, the queue
//! with the most bytes (the *fattest* flow) loses its head packet (`longest_queue`), so an
//! unresponsive flow pays for its own overload.
//!
//! **Host-then-flow** (`host_fq_codel`, CAKE's "dual-srchost/dual-dsthost" isolation): the
//! same scheduler on two levels. Packets are first grouped by host — the source address
//! (`hosts = "src"`, traffic toward the line), the destination (`"dst"`, traffic from it)
//! or the address pair (`"pair"`) — and hosts share the link by DRR with new/old lists;
//! each host's share is then divided among its own flows by FQ-CoDel. A host with eight
//! bulk flows gets the same rate as a host with one. Flow and host queues are found in
//! 8-way set-associative tables (as CAKE does), so two flows collide only when eight
//! flows of the same set are active at once; a flow that finds no way free shares a queue
//! of its own host if one is in the set, else is dropped as `state_full`.
//!
//! **Memory.** A bucket holds state only while its queue is on a list: a table costs one
//! queue per bucket in use, given back when the queue empties and leaves the lists and
//! reused by the next bucket; a bucket's queue is found by reading the queues' owners
//! while there are at most 32, and through an index of a 16-bit entry per bucket (made
//! when the 33rd queue is) beyond that. What a
//! bucket must remember between its busy spells stays: CoDel's state while a new dropping
//! episode would resume from it (up to 16 intervals after its last drop), and the ACK
//! history of its connection with the ACK filter. So a discipline serving a few flows
//! costs a few kilobytes, and schedules exactly as a table of every bucket would.
//!
//! CoDel on every queue is [`codel`](super::codel)'s, with its low-rate target: a leaf of
//! an HTB or HFSC class takes the class's rate. Deliberately not modelled: Linux's batch
//! drops, `ce_threshold`, and CAKE's diffserv tins.
//!
//! **ACK filtering in the flow queues** (`ack_filter = true`, CAKE's `ack-filter`): when a
//! pure ACK joins its flow queue, the ACKs of the same connection queued just before it
//! that it supersedes are removed (`ack_superseded`), by the rules of [`crate::ack`]:
//! never a duplicate ACK, SACK or ECN information the newer one lacks, a window update,
//! a signed segment. A connection's ACKs then wait their fair-queueing turn behind the
//! other flows (an upload) as one ACK that grows, instead of a train. Only a contiguous
//! run of the connection's ACKs directly before the new one is removed, newest first, and
//! the scan stops at the first packet that stays (or at the newest ACK whose duplicate
//! status history decided), so the connection's packets keep their order.

use super::cobalt::CobaltVars;
use super::codel::{CodelCounters, CodelCtx, CodelParams, CodelVars, StampedQueue};
use super::{
    Backlog, BuildCtx, ConfigError, Dequeued, DropReason, Drops, FilterReason, Qdisc, QdiscStats,
    Stage, Verdict,
};
use crate::ack::{removable_suffix, AckMeta, AckState};
use crate::packet::Pkt;
use crate::rand::{splitmix64, Rng};
use crate::time::{Duration, Instant};
use crate::units::{Bytes, Limit, Rate, Span};
use crate::wire::FlowKey;
use core::net::{IpAddr, Ipv4Addr};
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};

/// Ways of a set in the host-then-flow tables.
const WAYS: usize = 8;

/// FQ-CoDel parameters.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FqCodelConfig {
    /// Packets the whole discipline may hold (default 10240p, as Linux).
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// IP bytes the whole discipline may hold (default 32MB).
    #[serde(default = "default_memory")]
    pub memory_limit: Bytes,
    /// Number of flow queues (default 1024).
    #[serde(default = "default_flows")]
    pub flows: u32,
    /// DRR credit per round (default 1514B).
    #[serde(default = "default_quantum")]
    pub quantum: Bytes,
    /// CoDel target (default 5ms).
    #[serde(default = "default_target")]
    pub target: Span,
    /// CoDel interval (default 100ms).
    #[serde(default = "default_interval")]
    pub interval: Span,
    /// Mark ECN-capable packets instead of dropping them (default true, as Linux).
    #[serde(default = "yes")]
    pub ecn: bool,
    /// Largest packet (CoDel's one-MTU exemption and low-rate target; default 1500B).
    #[serde(default = "default_mtu")]
    pub mtu: Bytes,
    /// Rate for CoDel's low-rate target (default: the link's or class's).
    #[serde(default)]
    pub rate: Option<Rate>,
    /// Remove queued pure ACKs a newer ACK of the same connection supersedes (default
    /// false).
    #[serde(default)]
    pub ack_filter: bool,
    /// The AQM of each flow queue (default `codel`).
    #[serde(default)]
    pub aqm: AqmKind,
}

/// The AQM on every flow queue of `fq_codel` and `host_fq_codel`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AqmKind {
    /// CoDel as RFC 8289 has it.
    #[default]
    Codel,
    /// COBALT (CAKE's): CoDel whose count decays instead of restarting, plus BLUE for
    /// flows that overflow the discipline.
    Cobalt,
}

/// Which address makes a packet's host.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HostKey {
    /// The source address (hosts sending toward the line).
    #[default]
    Src,
    /// The destination address (hosts receiving from the line).
    Dst,
    /// The (source, destination) pair.
    Pair,
}

/// Host-then-flow fair queueing parameters.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostFqCodelConfig {
    /// What a host is.
    #[serde(default)]
    pub hosts: HostKey,
    /// Number of host queues (multiple of 8; default 1024).
    #[serde(default = "default_flows")]
    pub host_buckets: u32,
    /// DRR credit per round between hosts (default: `quantum`).
    #[serde(default)]
    pub host_quantum: Option<Bytes>,
    /// Packets the whole discipline may hold (default 10240p).
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// Bytes the whole discipline may hold (default 32MB).
    #[serde(default = "default_memory")]
    pub memory_limit: Bytes,
    /// Number of flow queues, shared by all hosts (multiple of 8; default 1024).
    #[serde(default = "default_flows")]
    pub flows: u32,
    /// DRR credit per round between a host's flows (default 1514B).
    #[serde(default = "default_quantum")]
    pub quantum: Bytes,
    /// CoDel target (default 5ms).
    #[serde(default = "default_target")]
    pub target: Span,
    /// CoDel interval (default 100ms).
    #[serde(default = "default_interval")]
    pub interval: Span,
    /// Mark ECN-capable packets instead of dropping them (default true).
    #[serde(default = "yes")]
    pub ecn: bool,
    /// Largest packet (default 1500B).
    #[serde(default = "default_mtu")]
    pub mtu: Bytes,
    /// Rate for CoDel's low-rate target (default: the link's or class's).
    #[serde(default)]
    pub rate: Option<Rate>,
    /// Remove queued pure ACKs a newer ACK of the same connection supersedes (default
    /// false).
    #[serde(default)]
    pub ack_filter: bool,
    /// The AQM of each flow queue (default `codel`).
    #[serde(default)]
    pub aqm: AqmKind,
}

fn default_limit() -> Limit {
    Limit::Packets(10_240)
}
fn default_memory() -> Bytes {
    Bytes(32_000_000)
}
fn default_flows() -> u32 {
    1024
}
fn default_quantum() -> Bytes {
    Bytes(1514)
}
fn default_target() -> Span {
    Span(Duration::from_millis(5))
}
fn default_interval() -> Span {
    Span(Duration::from_millis(100))
}
fn default_mtu() -> Bytes {
    Bytes(1500)
}
fn yes() -> bool {
    true
}

/// The AQM state of one flow queue: RFC 8289 CoDel ([`CodelVars`]) or COBALT
/// ([`CobaltVars`]). The disciplines are generic over it, so each runs its own code
/// without a branch per packet.
pub(crate) trait FlowAqm: Copy + Default + core::fmt::Debug + Send + 'static {
    /// Whether BLUE's counters apply.
    const BLUE: bool;
    /// Take the next packet of `q` at `now` (see [`CodelVars::dequeue`]).
    fn dequeue<P: Pkt>(
        &mut self,
        p: &CodelParams,
        now: Instant,
        q: &mut StampedQueue<P>,
        cx: &mut CodelCtx<'_, P>,
        rng: &mut Rng,
    ) -> Option<P>;
    /// The queue lost its head to the discipline's overflow at `now`.
    fn on_overflow(&mut self, p: &CodelParams, now: u64, c: &mut CodelCounters);
    /// A state kept while its bucket was out of use comes back into use at `now`.
    fn resume(&mut self, p: &CodelParams, now: u64);
    /// Whether a state whose queue ran empty must be kept for its bucket at `now` (else
    /// a fresh state acts the same).
    fn matters(&self, p: &CodelParams, now: u64) -> bool;
}

impl FlowAqm for CodelVars {
    const BLUE: bool = false;
    fn dequeue<P: Pkt>(
        &mut self,
        p: &CodelParams,
        now: Instant,
        q: &mut StampedQueue<P>,
        cx: &mut CodelCtx<'_, P>,
        _rng: &mut Rng,
    ) -> Option<P> {
        CodelVars::dequeue(self, p, now, q, cx)
    }
    fn on_overflow(&mut self, _: &CodelParams, _: u64, _: &mut CodelCounters) {}
    fn resume(&mut self, _: &CodelParams, _: u64) {}
    fn matters(&self, p: &CodelParams, now: u64) -> bool {
        //= https://www.rfc-editor.org/rfc/rfc8289#section-5.4
        //# if (delta > 1 && now - drop_next < 16 * INTERVAL) {
        //#     count_ = delta;
        // The dequeue that found the queue empty cleared `first_above_time`, so the next
        // one cannot drop: the state is read again only when a dropping episode starts,
        // and then only as above. Any other state acts as a new one.
        self.count.wrapping_sub(self.lastcount) > 1
            && (now as i128 - self.drop_next as i128) < 16 * p.interval as i128
    }
}

impl FlowAqm for CobaltVars {
    const BLUE: bool = true;
    fn dequeue<P: Pkt>(
        &mut self,
        p: &CodelParams,
        now: Instant,
        q: &mut StampedQueue<P>,
        cx: &mut CodelCtx<'_, P>,
        rng: &mut Rng,
    ) -> Option<P> {
        CobaltVars::dequeue(self, p, now, q, cx, rng)
    }
    fn on_overflow(&mut self, p: &CodelParams, now: u64, c: &mut CodelCounters) {
        CobaltVars::on_overflow(self, p, now, c);
    }
    fn resume(&mut self, p: &CodelParams, now: u64) {
        CobaltVars::resume(self, p, now);
    }
    fn matters(&self, p: &CodelParams, now: u64) -> bool {
        CobaltVars::matters(self, p, now)
    }
}

/// One flow queue (while it is on a new or old list).
#[derive(Debug)]
struct Flow<P, A> {
    q: StampedQueue<P>,
    vars: A,
    deficit: i64,
    /// Full hash of the flow using it (host-then-flow's set lookup).
    tag: u64,
    /// Host bucket of the flow using it (host-then-flow).
    host: u32,
    /// Whether packets of other flows of the same host share it (host-then-flow, when
    /// their set was full); cleared when it is taken afresh.
    guests: bool,
}

impl<P, A: FlowAqm> Flow<P, A> {
    fn new() -> Self {
        Flow {
            q: StampedQueue::default(),
            vars: A::default(),
            deficit: 0,
            tag: 0,
            host: 0,
            guests: false,
        }
    }
}

/// `owner` of a slot no bucket uses.
const FREE: u32 = u32::MAX;

/// Which buckets of a table are in use, and where their state is. `owner[slot]` is the
/// bucket a slot belongs to. A bucket takes a slot when it joins the new/old lists and
/// gives it back when it leaves them; given-back slots are reused, newest first, before
/// new ones are made. So a table holds as many slots as buckets were in use at once — a
/// few for a home line, not one per bucket — and a reused slot keeps its queue's
/// capacity. While there are at most [`SCAN`] slots a bucket's slot is found by reading
/// `owner` (a cache line or two); beyond that through `index[bucket]`, which names a slot
/// that belongs to the bucket only if the slot says so (a stale index entry needs no
/// clearing). With at most 65 536 buckets a slot number fits 16 bits.
#[derive(Debug, Default)]
#[repr(C)]
struct SlotIndex {
    /// Buckets of the table; 0 until the first packet.
    n: u32,
    /// Empty while there are at most [`SCAN`] slots.
    index: Vec<u16>,
    owner: Vec<u32>,
    /// Only when a bucket takes or gives back a slot: last.
    free: Vec<u16>,
}

/// Slots found by reading them all: the index of a table up to this many slots is not
/// made (a few kB a table, and a cache miss a lookup, for a home line's few flows).
const SCAN: usize = 32;

impl SlotIndex {
    fn with_buckets(n: u32) -> Self {
        SlotIndex {
            n,
            ..SlotIndex::default()
        }
    }

    /// The slot of `bucket`, if the bucket is in use.
    #[inline]
    fn get(&self, bucket: usize) -> Option<usize> {
        if self.index.is_empty() {
            return self.owner.iter().position(|&b| b as usize == bucket);
        }
        let s = usize::from(*self.index.get(bucket)?);
        (self.owner.get(s) == Some(&(bucket as u32))).then_some(s)
    }

    /// Give `bucket` (not in use) a slot: a given-back one (`Ok`, its state to be reset),
    /// or a new one at the end (`Err`, its state to be pushed).
    fn take(&mut self, bucket: usize) -> Result<usize, usize> {
        debug_assert!(self.get(bucket).is_none());
        match self.free.pop() {
            Some(s) => {
                self.owner[usize::from(s)] = bucket as u32;
                if !self.index.is_empty() {
                    self.index[bucket] = s;
                }
                Ok(usize::from(s))
            }
            None => {
                let s = self.owner.len();
                self.owner.push(bucket as u32);
                if !self.index.is_empty() {
                    self.index[bucket] = s as u16;
                } else if self.owner.len() > SCAN {
                    self.index = vec![0; self.n as usize];
                    for (s, &b) in self.owner.iter().enumerate() {
                        if b != FREE {
                            self.index[b as usize] = s as u16;
                        }
                    }
                }
                Err(s)
            }
        }
    }

    fn release(&mut self, slot: usize) {
        self.owner[slot] = FREE;
        self.free.push(slot as u16);
    }

    /// The slots in use with their buckets.
    fn in_use(&self) -> impl Iterator<Item = (usize, u32)> + '_ {
        self.owner
            .iter()
            .enumerate()
            .filter(|&(_, &b)| b != FREE)
            .map(|(s, &b)| (s, b))
    }

    /// Buckets in use.
    fn used(&self) -> usize {
        self.owner.len() - self.free.len()
    }
}

/// The flow queues of a discipline, held for the buckets in use only, with what a bucket
/// must remember between its busy spells so that it schedules exactly as a table of all
/// `n` buckets would: CoDel's state while it still matters, and the ACK history.
///
/// Laid out (`repr(C)`) with what a lookup reads first, the idle buckets' states last.
#[derive(Debug)]
#[repr(C)]
struct FlowTable<P, A> {
    slots: SlotIndex,
    flows: Vec<Flow<P, A>>,
    /// With the ACK filter, each slot's ACK history (else empty).
    acks: Vec<FlowAcks>,
    n: u32,
    ack_filter: bool,
    /// Size of `idle_vars` at which states too old to matter are pruned.
    prune_at: usize,
    /// ACK histories of buckets out of use (with the ACK filter): a connection that comes
    /// back to its bucket continues from its history.
    idle_acks: BTreeMap<u32, FlowAcks>,
    /// AQM states of buckets out of use that still matter (CoDel: a new dropping episode
    /// would resume from them; COBALT: count not yet decayed, or BLUE's `p` above 0).
    idle_vars: BTreeMap<u32, A>,
}

impl<P, A: FlowAqm> FlowTable<P, A> {
    fn new(n: u32, ack_filter: bool) -> Self {
        FlowTable {
            n,
            slots: SlotIndex::default(),
            flows: Vec::new(),
            acks: Vec::new(),
            ack_filter,
            idle_acks: BTreeMap::new(),
            idle_vars: BTreeMap::new(),
            prune_at: 16,
        }
    }

    /// The index, made on the first packet (an unused discipline costs only its struct).
    fn allocate(&mut self) {
        if self.slots.n == 0 {
            self.slots = SlotIndex::with_buckets(self.n);
        }
    }

    fn get(&self, bucket: usize) -> Option<usize> {
        self.slots.get(bucket)
    }

    /// Put `bucket` (not in use) in use at `now` with `deficit`; returns its slot.
    fn activate(&mut self, bucket: usize, deficit: i64, p: &CodelParams, now: u64) -> usize {
        let s = match self.slots.take(bucket) {
            Ok(s) => s,
            Err(s) => {
                self.flows.push(Flow::new());
                if self.ack_filter {
                    self.acks.push(FlowAcks::default());
                }
                s
            }
        };
        let b = bucket as u32;
        let f = &mut self.flows[s];
        f.vars = match self.idle_vars.remove(&b) {
            Some(mut v) => {
                v.resume(p, now);
                v
            }
            None => A::default(),
        };
        f.deficit = deficit;
        f.guests = false;
        if self.ack_filter {
            self.acks[s] = self.idle_acks.remove(&b).unwrap_or_default();
        }
        s
    }

    /// Take slot `s`, whose queue ran empty at `now` and left the lists, out of use.
    fn release(&mut self, s: usize, now: u64, p: &CodelParams) {
        let bucket = self.slots.owner[s];
        let v = self.flows[s].vars;
        debug_assert!(self.flows[s].q.q.is_empty());
        if v.matters(p, now) {
            if self.idle_vars.len() >= self.prune_at {
                self.idle_vars.retain(|_, v| v.matters(p, now));
                self.prune_at = (2 * self.idle_vars.len()).max(16);
            }
            self.idle_vars.insert(bucket, v);
        }
        if self.ack_filter {
            let mut a = core::mem::take(&mut self.acks[s]);
            if a.conn.is_some() {
                // No packet of the queue is pinned now: the same as "none ever was".
                a.since_pin = usize::MAX;
                self.idle_acks.insert(bucket, a);
            }
        }
        self.slots.release(s);
    }

    /// Flows in use.
    fn used(&self) -> usize {
        self.slots.used()
    }
}

/// What a flow queue knows to filter its ACKs: the connection whose ACK history it keeps
/// (a flow queue normally holds one connection; on a hash collision the history follows
/// the newest packet's connection, which only makes filtering rarer), and how many of the
/// newest queued packets came after the newest packet that must stay whatever follows it
/// (an ACK that history marks as a possible duplicate, or any packet that is not a
/// removable ACK). `usize::MAX`: no such packet is queued.
#[derive(Debug)]
struct FlowAcks {
    conn: Option<ConnKey>,
    state: AckState,
    since_pin: usize,
}

impl Default for FlowAcks {
    fn default() -> Self {
        FlowAcks {
            conn: None,
            state: AckState::new(),
            since_pin: usize::MAX,
        }
    }
}

/// The connection of a packet, for the ACK filter: its flow ([`Pkt::flow_ids`]) if the
/// packet names it, else its headers' 5-tuple (`None` without headers).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ConnKey {
    Flow(u64),
    Tuple(FlowKey),
}

#[inline]
fn conn_key<P: Pkt>(pkt: &P) -> Option<ConnKey> {
    match pkt.flow_ids() {
        Some(ids) => Some(ConnKey::Flow(ids.flow)),
        None => pkt.headers().map(|h| ConnKey::Tuple(h.flow_key())),
    }
}

/// Filter a flow queue's ACKs for the packet just pushed at its tail: remove the
/// contiguous run of the same connection's ACKs directly before it that it supersedes,
/// recorded in `stats` and `drops`.
fn filter_acks<P: Pkt, A>(
    flow: &mut Flow<P, A>,
    acks: &mut FlowAcks,
    stats: &mut QdiscStats,
    drops: &mut Drops<P>,
) {
    let len = flow.q.q.len();
    let Some(newest) = flow.q.q.back() else {
        return;
    };
    let Some(key) = conn_key(&newest.pkt) else {
        acks.since_pin = 0;
        return;
    };
    if acks.conn != Some(key) {
        acks.conn = Some(key);
        acks.state = AckState::new();
    }
    let Some(newer) = newest.pkt.ack_seg().map(|s| acks.state.observe_seg(&s)) else {
        acks.since_pin = 0;
        return;
    };
    // Packets older than the newest pinned one are out of reach: the scan would stop there.
    let reach = acks.since_pin.min(len - 1);
    acks.since_pin = match newer.removable {
        Ok(()) => acks.since_pin.saturating_add(1),
        Err(_) => 0,
    };
    if !newer.has_ack {
        return;
    }
    let wscale = acks.state.wscale();
    // The same connection's ACKs directly before the new one, newest first; a packet of
    // another connection, or without TCP, ends the run.
    let queued = flow.q.q.iter().rev().skip(1).take(reach).map(|s| {
        Some(&s.pkt)
            .filter(|p| conn_key(*p) == Some(key))
            .and_then(|p| p.ack_seg())
            .map(|a| AckMeta { wscale, ..a.meta() })
    });
    let (n, _) = removable_suffix(queued, &newer);
    if n == 0 {
        return;
    }
    let v = Verdict::Filtered(FilterReason::AckSuperseded);
    for s in flow.q.q.drain(len - 1 - n..len - 1) {
        let l = s.pkt.ip_len();
        flow.q.bytes -= u64::from(l);
        stats.on_remove(v, l);
        drops.push(s.pkt, v, Stage::Removed);
    }
    if acks.since_pin != usize::MAX {
        acks.since_pin -= n;
    }
}

/// The new and old lists of a DRR level.
#[derive(Debug, Default)]
struct Lists {
    new: VecDeque<u32>,
    old: VecDeque<u32>,
}

impl Lists {
    /// The next queue to look at, and whether it is on the new list.
    fn front(&self) -> Option<(u32, bool)> {
        match self.new.front() {
            Some(&i) => Some((i, true)),
            None => self.old.front().map(|&i| (i, false)),
        }
    }
    fn pop(&mut self, from_new: bool) {
        if from_new {
            self.new.pop_front();
        } else {
            self.old.pop_front();
        }
    }
}

/// Mix a hash with the perturbation (splitmix64's finaliser).
fn perturbed(h: u64, perturb: u64) -> u64 {
    let mut s = h ^ perturb;
    splitmix64(&mut s)
}

/// The flow tag of a packet: its [`Pkt::flow_ids`] if it has them (the simulator's
/// packets), else its 5-tuple's hash (0 if it has no headers), mixed with `perturb`.
#[inline]
fn flow_hash<P: Pkt>(pkt: &P, perturb: u64) -> u64 {
    if let Some(ids) = pkt.flow_ids() {
        return perturbed(ids.flow, perturb);
    }
    pkt.headers()
        .map_or(0, |h| perturbed(h.flow_key().stable_hash(), perturb))
}

const NONE_ADDR: IpAddr = IpAddr::V4(Ipv4Addr::UNSPECIFIED);

/// The host tag of a packet, as [`flow_hash`]: from its [`Pkt::flow_ids`] if it has
/// them, else from its headers' addresses.
#[inline]
fn host_hash<P: Pkt>(pkt: &P, key: HostKey, perturb: u64) -> u64 {
    if let Some(ids) = pkt.flow_ids() {
        let k = match key {
            HostKey::Src => ids.src,
            HostKey::Dst => ids.dst,
            HostKey::Pair => {
                let mut s = ids.src;
                splitmix64(&mut s) ^ ids.dst
            }
        };
        return perturbed(k, perturb.rotate_left(29));
    }
    pkt.headers().map_or(0, |h| {
        let (src, dst) = match key {
            HostKey::Src => (h.ip.src, NONE_ADDR),
            HostKey::Dst => (NONE_ADDR, h.ip.dst),
            HostKey::Pair => (h.ip.src, h.ip.dst),
        };
        let k = FlowKey {
            src,
            dst,
            src_port: 0,
            dst_port: 0,
            proto: 0,
        };
        perturbed(k.stable_hash(), perturb.rotate_left(29))
    })
}

//= https://www.rfc-editor.org/rfc/rfc8290#section-4.2
//# First, the scheduler selects which queue to dequeue a packet from.
//# [...] If the list of new queues is not empty, the scheduler picks the
//# queue at the head of that list; otherwise it picks the head of the
//# old queues list.  [...] If the selected queue has a negative deficit, it
//# is given an extra quantum of credit and moved to the end of the list of
//# old queues [...] If the queue is empty, it is removed from the list of
//# new queues and added to the end of the list of old queues [...] if the
//# list of old queues is not empty; otherwise it is removed from the list
/// One DRR level over flow queues: the next packet of the flows on `lists` (slots of
/// `table`), or `None` when they all ran empty (both lists are then empty). A queue that
/// leaves the lists gives its slot back.
fn fq_dequeue<P: Pkt, A: FlowAqm>(
    lists: &mut Lists,
    table: &mut FlowTable<P, A>,
    quantum: i64,
    p: &CodelParams,
    now: Instant,
    cx: &mut CodelCtx<'_, P>,
    rng: &mut Rng,
) -> Option<P> {
    while let Some((i, from_new)) = lists.front() {
        let f = &mut table.flows[i as usize];
        if f.deficit <= 0 {
            f.deficit += quantum;
            lists.pop(from_new);
            lists.old.push_back(i);
            continue;
        }
        if let Some(pkt) = f.vars.dequeue(p, now, &mut f.q, cx, rng) {
            f.deficit -= pkt.ip_len() as i64;
            return Some(pkt);
        }
        lists.pop(from_new);
        if from_new && !lists.old.is_empty() {
            lists.old.push_back(i);
        } else {
            table.release(i as usize, now.as_nanos(), p);
        }
    }
    None
}

/// The discipline's limits and what an overflow tells the flow's AQM.
struct Overflow<'a> {
    limit: Limit,
    memory: u64,
    params: &'a CodelParams,
    now: u64,
}

impl Overflow<'_> {
    #[inline(always)]
    fn new(limit: Limit, memory: u64, params: &CodelParams, now: Instant) -> Overflow<'_> {
        Overflow {
            limit,
            memory,
            params,
            now: now.as_nanos(),
        }
    }
}

/// Whether a backlog `b` is over the discipline's limits (packets or bytes, and memory).
#[inline]
fn over_limits(limit: Limit, memory: u64, b: Backlog) -> bool {
    limit.exceeded_by(b.packets, b.bytes) || b.bytes > memory
}

/// Queue `pkt` (of `len` bytes) in flow slot `s` of `table`, filter that flow's ACKs,
/// then keep the limits `o` (both disciplines' enqueue ends so; inlined into each, as
/// its own code).
#[inline(always)]
#[allow(
    clippy::too_many_arguments,
    reason = "the disciplines' fields, borrowed apart"
)]
fn queue_in_slot<P: Pkt, A: FlowAqm>(
    table: &mut FlowTable<P, A>,
    s: usize,
    now: Instant,
    pkt: P,
    len: u32,
    o: Overflow<'_>,
    stats: &mut QdiscStats,
    counters: &mut CodelCounters,
    drops: &mut Drops<P>,
) {
    table.flows[s].q.push(now, pkt);
    stats.on_enqueue(len);
    if let Some(acks) = table.acks.get_mut(s) {
        filter_acks(&mut table.flows[s], acks, stats, drops);
    }
    if over_limits(o.limit, o.memory, stats.backlog) {
        drop_from_fattest(table, o, stats, counters, drops);
    }
    debug_assert_eq!(stats.check(stats.backlog), Ok(()));
}

/// Drop head packets of the fattest flows while the discipline is over its limits; each
/// such flow's AQM hears of it.
#[inline(never)]
fn drop_from_fattest<P: Pkt, A: FlowAqm>(
    table: &mut FlowTable<P, A>,
    o: Overflow<'_>,
    stats: &mut QdiscStats,
    counters: &mut CodelCounters,
    drops: &mut Drops<P>,
) {
    let Overflow {
        limit,
        memory,
        params,
        now,
    } = o;
    loop {
        if !over_limits(limit, memory, stats.backlog) {
            return;
        }
        // Linux's fq_codel_drop() scans every bucket the same way (only buckets in use
        // can hold bytes); of equally fat ones the last bucket loses.
        let flows = &table.flows;
        let Some((fat, _)) = table
            .slots
            .in_use()
            .filter(|&(s, _)| flows[s].q.bytes > 0)
            .max_by_key(|&(s, b)| (flows[s].q.bytes, b))
        else {
            return;
        };
        let f = &mut table.flows[fat];
        let s = f.q.pop().expect("a fattest flow holds a packet");
        f.vars.on_overflow(params, now, counters);
        let v = Verdict::Dropped(DropReason::LongestQueue);
        stats.on_remove(v, s.pkt.ip_len());
        drops.push(s.pkt, v, Stage::Removed);
    }
}

fn check_common(
    kind: &str,
    limit: Limit,
    memory: Bytes,
    flows: u32,
    quantum: Bytes,
) -> Result<(), ConfigError> {
    let e = |k: &str, m: &str| Err(ConfigError::new(format!("{kind}.{k}"), m));
    if matches!(limit, Limit::Packets(0) | Limit::Bytes(0)) {
        return e("limit", "must be positive");
    }
    if memory.0 == 0 {
        return e("memory_limit", "must be positive");
    }
    if flows == 0 || flows > 65_536 {
        return e("flows", "must be in 1..=65536");
    }
    if quantum.0 == 0 || quantum.0 > 1 << 20 {
        return e("quantum", "must be in 1B..=1MiB");
    }
    Ok(())
}

/// An FQ-CoDel discipline, with RFC 8289 CoDel ([`CodelVars`], the default) or COBALT
/// ([`CobaltVars`]) on each flow queue.
///
/// Laid out (`repr(C)`) in the order a packet's enqueue and dequeue read it, so that they
/// touch few cache lines: the hash and the limits, the flow table, the lists, the
/// per-packet counters; COBALT's generator last.
#[derive(Debug)]
#[repr(C)]
pub struct FqCodel<P, A = CodelVars> {
    perturb: u64,
    n_flows: u32,
    limit: Limit,
    memory: u64,
    quantum: i64,
    params: CodelParams,
    /// The flow queues of the buckets in use, `n_flows` buckets.
    table: FlowTable<P, A>,
    lists: Lists,
    stats: QdiscStats,
    counters: CodelCounters,
    new_flow_count: u64,
    /// BLUE's draws (COBALT only), from the discipline's seed.
    rng: Rng,
}

impl<P: Pkt, A: FlowAqm> FqCodel<P, A> {
    /// Build; the hash perturbation comes from `ctx.seed`, the low-rate target from
    /// `cfg.rate` or `ctx.link_rate`.
    pub fn new(cfg: &FqCodelConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        check_common(
            "fq_codel",
            cfg.limit,
            cfg.memory_limit,
            cfg.flows,
            cfg.quantum,
        )?;
        let params = CodelParams::new(
            cfg.target.0,
            cfg.interval.0,
            cfg.mtu.0,
            cfg.ecn,
            cfg.rate.or(ctx.link_rate),
            "fq_codel",
        )?;
        let mut s = ctx.seed ^ 0x6671_5f63_6f64_656c;
        let perturb = splitmix64(&mut s);
        Ok(FqCodel {
            limit: cfg.limit,
            memory: cfg.memory_limit.0,
            quantum: cfg.quantum.0 as i64,
            perturb,
            params,
            rng: Rng::new(splitmix64(&mut s)),
            table: FlowTable::new(cfg.flows, cfg.ack_filter),
            n_flows: cfg.flows,
            lists: Lists::default(),
            stats: QdiscStats::default(),
            counters: CodelCounters::default(),
            new_flow_count: 0,
        })
    }

    /// The queue a packet goes to.
    pub fn bucket_of(&self, pkt: &P) -> usize {
        (flow_hash(pkt, self.perturb) % u64::from(self.n_flows)) as usize
    }

    /// CoDel's counters summed over the queues (the `counters` of [`Qdisc`] list them).
    #[cfg(test)]
    pub fn codel_counters(&self) -> CodelCounters {
        self.counters
    }
}

impl<P: Pkt + Send, A: FlowAqm> Qdisc<P> for FqCodel<P, A> {
    fn has_timers(&self) -> bool {
        false
    }
    /// Flows and hosts come from [`Pkt::flow_ids`] when the packet has them, and the ACK
    /// filter reads [`Pkt::ack_seg`].
    fn reads_headers(&self) -> bool {
        false
    }
    fn observes_peer(&self) -> bool {
        false
    }
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        self.table.allocate();
        let i = self.bucket_of(&pkt);
        let s = match self.table.get(i) {
            Some(s) => s,
            None => {
                let s = self
                    .table
                    .activate(i, self.quantum, &self.params, now.as_nanos());
                self.lists.new.push_back(s as u32);
                self.new_flow_count += 1;
                s
            }
        };
        let o = Overflow::new(self.limit, self.memory, &self.params, now);
        let (stats, counters) = (&mut self.stats, &mut self.counters);
        queue_in_slot(&mut self.table, s, now, pkt, len, o, stats, counters, drops);
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        let mut cx = CodelCtx {
            stats: &mut self.stats,
            counters: &mut self.counters,
            drops,
        };
        let r = fq_dequeue(
            &mut self.lists,
            &mut self.table,
            self.quantum,
            &self.params,
            now,
            &mut cx,
            &mut self.rng,
        );
        debug_assert_eq!(self.stats.check(self.stats.backlog), Ok(()));
        match r {
            Some(p) => Dequeued::Packet(p),
            None => Dequeued::Empty,
        }
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.counters.pairs();
        v.push(("new_flows", self.new_flow_count));
        if A::BLUE {
            v.extend(self.counters.blue_pairs());
        }
        v
    }

    fn kind(&self) -> &'static str {
        "fq_codel"
    }
}

/// One host (while it is on a list): its share of the link and its own flow lists.
#[derive(Debug, Default)]
struct Host {
    tag: u64,
    deficit: i64,
    lists: Lists,
}

/// Host-then-flow fair queueing with CoDel (or COBALT, see [`FqCodel`]) on every flow
/// queue.
///
/// Laid out (`repr(C)`) in the order a packet's enqueue and dequeue read it, so that they
/// touch few cache lines: the last packet's ways, the hashes and the limits, the host and
/// flow tables, the host lists, the per-packet counters; COBALT's generator last.
#[derive(Debug)]
#[repr(C)]
pub struct HostFqCodel<P, A = CodelVars> {
    /// Where the last packet offered went, checked before use: packets mostly come in
    /// runs of one flow, whose ways then need no search.
    last: Option<LastWays>,
    key: HostKey,
    n_hosts: u32,
    perturb: u64,
    limit: Limit,
    memory: u64,
    quantum: i64,
    host_quantum: i64,
    params: CodelParams,
    /// The host buckets in use (`n_hosts` buckets) and their slots' hosts.
    host_slots: SlotIndex,
    hosts: Vec<Host>,
    /// The flow queues of the flow buckets in use (`flows` buckets).
    flows: FlowTable<P, A>,
    host_lists: Lists,
    stats: QdiscStats,
    counters: CodelCounters,
    new_flow_count: u64,
    new_host_count: u64,
    /// BLUE's draws (COBALT only), from the discipline's seed.
    rng: Rng,
}

/// The host and flow ways (tags, buckets, slots) a packet was queued in. A tag is in use
/// in at most one way of its set (a way takes a tag only when the search found none), so
/// while both slots still hold these buckets and tags, a search for the same tags would
/// find exactly these ways.
#[derive(Clone, Copy, Debug)]
struct LastWays {
    htag: u64,
    ftag: u64,
    h: u32,
    hs: u32,
    f: u32,
    s: u32,
}

/// Find a way in the set of `tag` (tables of `n`, a multiple of [`WAYS`], buckets whose
/// slots `slots` holds): one already used by `tag` (`Ok` with its slot), else the first
/// free one (`Ok` without a slot), else `Err` with the set's first way. `tag_of(slot)` is
/// the tag a slot in use holds.
fn set_lookup(
    n: usize,
    tag: u64,
    slots: &SlotIndex,
    tag_of: impl Fn(usize) -> u64,
) -> Result<(usize, Option<usize>), usize> {
    let set = (tag % (n / WAYS) as u64) as usize * WAYS;
    // Bit i: way `set + i` is in use.
    let mut taken = 0u32;
    if slots.index.is_empty() {
        for (s, &b) in slots.owner.iter().enumerate() {
            let i = (b as usize).wrapping_sub(set);
            if i < WAYS {
                if tag_of(s) == tag {
                    return Ok((set + i, Some(s)));
                }
                taken |= 1 << i;
            }
        }
    } else {
        for i in 0..WAYS {
            if let Some(s) = slots.get(set + i) {
                if tag_of(s) == tag {
                    return Ok((set + i, Some(s)));
                }
                taken |= 1 << i;
            }
        }
    }
    match (!taken).trailing_zeros() as usize {
        i if i < WAYS => Ok((set + i, None)),
        _ => Err(set),
    }
}

impl<P: Pkt, A: FlowAqm> HostFqCodel<P, A> {
    /// Build; see [`FqCodel::new`].
    pub fn new(cfg: &HostFqCodelConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        let kind = "host_fq_codel";
        check_common(kind, cfg.limit, cfg.memory_limit, cfg.flows, cfg.quantum)?;
        for (k, n) in [("flows", cfg.flows), ("host_buckets", cfg.host_buckets)] {
            if n == 0 || n % WAYS as u32 != 0 || n > 65_536 {
                return Err(ConfigError::new(
                    format!("{kind}.{k}"),
                    "must be a multiple of 8 in 8..=65536",
                ));
            }
        }
        let host_quantum = cfg.host_quantum.unwrap_or(cfg.quantum);
        if host_quantum.0 == 0 || host_quantum.0 > 1 << 20 {
            return Err(ConfigError::new(
                format!("{kind}.host_quantum"),
                "must be in 1B..=1MiB",
            ));
        }
        let params = CodelParams::new(
            cfg.target.0,
            cfg.interval.0,
            cfg.mtu.0,
            cfg.ecn,
            cfg.rate.or(ctx.link_rate),
            kind,
        )?;
        let mut s = ctx.seed ^ 0x686f_7374_5f66_7121;
        let perturb = splitmix64(&mut s);
        Ok(HostFqCodel {
            key: cfg.hosts,
            limit: cfg.limit,
            memory: cfg.memory_limit.0,
            quantum: cfg.quantum.0 as i64,
            host_quantum: host_quantum.0 as i64,
            perturb,
            params,
            rng: Rng::new(splitmix64(&mut s)),
            flows: FlowTable::new(cfg.flows, cfg.ack_filter),
            host_slots: SlotIndex::default(),
            hosts: Vec::new(),
            n_hosts: cfg.host_buckets,
            host_lists: Lists::default(),
            last: None,
            stats: QdiscStats::default(),
            counters: CodelCounters::default(),
            new_flow_count: 0,
            new_host_count: 0,
        })
    }

    /// Hosts currently on the schedule.
    pub fn active_hosts(&self) -> usize {
        self.host_slots.used()
    }

    /// Whether the ways of `l` still hold host tag `htag` and flow tag `ftag`.
    #[inline]
    fn same_ways(&self, l: &LastWays, htag: u64, ftag: u64) -> bool {
        let (hs, s) = (l.hs as usize, l.s as usize);
        l.htag == htag
            && l.ftag == ftag
            && self.host_slots.owner.get(hs) == Some(&l.h)
            && self.hosts[hs].tag == htag
            && self.flows.slots.owner.get(s) == Some(&l.f)
            && self.flows.flows[s].tag == ftag
    }

    /// Queue `pkt` (of `len` bytes) in flow slot `s`, then filter its flow's ACKs and
    /// keep the limits.
    #[inline]
    fn queue(&mut self, now: Instant, pkt: P, len: u32, s: usize, drops: &mut Drops<P>) {
        let o = Overflow::new(self.limit, self.memory, &self.params, now);
        let (stats, counters) = (&mut self.stats, &mut self.counters);
        queue_in_slot(&mut self.flows, s, now, pkt, len, o, stats, counters, drops);
    }
}

impl<P: Pkt + Send, A: FlowAqm> Qdisc<P> for HostFqCodel<P, A> {
    fn has_timers(&self) -> bool {
        false
    }
    /// Flows and hosts come from [`Pkt::flow_ids`] when the packet has them, and the ACK
    /// filter reads [`Pkt::ack_seg`].
    fn reads_headers(&self) -> bool {
        false
    }
    fn observes_peer(&self) -> bool {
        false
    }
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        if self.host_slots.n == 0 {
            self.flows.allocate();
            self.host_slots = SlotIndex::with_buckets(self.n_hosts);
        }
        let htag = host_hash(&pkt, self.key, self.perturb);
        let ftag = flow_hash(&pkt, self.perturb);
        if let Some(l) = self.last.filter(|l| self.same_ways(l, htag, ftag)) {
            debug_assert_eq!(
                set_lookup(self.n_hosts as usize, htag, &self.host_slots, |s| {
                    self.hosts[s].tag
                }),
                Ok((l.h as usize, Some(l.hs as usize)))
            );
            debug_assert_eq!(
                set_lookup(self.flows.n as usize, ftag, &self.flows.slots, |s| {
                    self.flows.flows[s].tag
                }),
                Ok((l.f as usize, Some(l.s as usize)))
            );
            self.queue(now, pkt, len, l.s as usize, drops);
            return;
        }
        // The host slot: its own, else a free way of its set.
        let (host_slots, hosts) = (&self.host_slots, &self.hosts);
        let (h, hs) = match set_lookup(self.n_hosts as usize, htag, host_slots, |s| hosts[s].tag) {
            Ok(h) => h,
            Err(_) => {
                self.stats
                    .on_reject(Verdict::Dropped(DropReason::StateFull));
                drops.reject(pkt, DropReason::StateFull);
                return;
            }
        };
        // The flow slot: its own, else the busy way of the same host where earlier packets
        // of the flow wait as guests (the set was full when they came; the flow's packets
        // must not overtake them), else a free way, else a busy way of the same host.
        let perturb = self.perturb;
        let t = &self.flows;
        let in_use = |i: usize| t.get(i).map(|s| &t.flows[s]);
        let guest_in = |set: usize| {
            (set..set + WAYS).find(|&i| {
                in_use(i).is_some_and(|w| {
                    w.guests
                        && w.host == h as u32
                        && w.q.q.iter().any(|s| flow_hash(&s.pkt, perturb) == ftag)
                })
            })
        };
        let (f, fs) = match set_lookup(self.flows.n as usize, ftag, &t.slots, |s| t.flows[s].tag) {
            Ok((f, Some(s))) => (f, Some(s)),
            Ok((free, None)) => match guest_in(free - free % WAYS) {
                Some(g) => (g, t.get(g)),
                None => (free, None),
            },
            Err(set) => match guest_in(set).or_else(|| {
                (set..set + WAYS).find(|&i| in_use(i).is_some_and(|w| w.host == h as u32))
            }) {
                Some(f) => (f, t.get(f)),
                None => {
                    self.stats
                        .on_reject(Verdict::Dropped(DropReason::StateFull));
                    drops.reject(pkt, DropReason::StateFull);
                    return;
                }
            },
        };
        if let Some(s) = fs {
            let w = &mut self.flows.flows[s];
            if w.tag != ftag {
                w.guests = true;
            }
        }
        let hs = match hs {
            Some(hs) => hs,
            None => {
                let hs = match self.host_slots.take(h) {
                    Ok(hs) => hs,
                    Err(hs) => {
                        self.hosts.push(Host::default());
                        hs
                    }
                };
                let host = &mut self.hosts[hs];
                host.tag = htag;
                host.deficit = self.host_quantum;
                self.host_lists.new.push_back(hs as u32);
                self.new_host_count += 1;
                hs
            }
        };
        let s = match fs {
            Some(s) => s,
            None => {
                let s = self
                    .flows
                    .activate(f, self.quantum, &self.params, now.as_nanos());
                let flow = &mut self.flows.flows[s];
                flow.tag = ftag;
                flow.host = h as u32;
                self.hosts[hs].lists.new.push_back(s as u32);
                self.new_flow_count += 1;
                s
            }
        };
        self.last = Some(LastWays {
            htag,
            ftag,
            h: h as u32,
            hs: hs as u32,
            f: f as u32,
            s: s as u32,
        });
        self.queue(now, pkt, len, s, drops);
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        let mut cx = CodelCtx {
            stats: &mut self.stats,
            counters: &mut self.counters,
            drops,
        };
        let mut out = None;
        // The host level: the same DRR with new/old lists, each host served by its own
        // flow-level DRR.
        while let Some((h, from_new)) = self.host_lists.front() {
            let host = &mut self.hosts[h as usize];
            if host.deficit <= 0 {
                host.deficit += self.host_quantum;
                self.host_lists.pop(from_new);
                self.host_lists.old.push_back(h);
                continue;
            }
            if let Some(pkt) = fq_dequeue(
                &mut host.lists,
                &mut self.flows,
                self.quantum,
                &self.params,
                now,
                &mut cx,
                &mut self.rng,
            ) {
                host.deficit -= pkt.ip_len() as i64;
                out = Some(pkt);
                break;
            }
            self.host_lists.pop(from_new);
            if from_new && !self.host_lists.old.is_empty() {
                self.host_lists.old.push_back(h);
            } else {
                self.host_slots.release(h as usize);
            }
        }
        debug_assert_eq!(self.stats.check(self.stats.backlog), Ok(()));
        match out {
            Some(p) => Dequeued::Packet(p),
            None => Dequeued::Empty,
        }
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.counters.pairs();
        v.push(("new_flows", self.new_flow_count));
        v.push(("new_hosts", self.new_host_count));
        if A::BLUE {
            v.extend(self.counters.blue_pairs());
        }
        v
    }

    fn flow_entries(&self) -> u64 {
        // Both tables are fixed in bucket count; report how many buckets are in use.
        (self.active_hosts() + self.flows.used()) as u64
    }

    fn kind(&self) -> &'static str {
        "host_fq_codel"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{FlowIds, HeaderPacket};
    use crate::qdisc::testutil::*;
    use crate::qdisc::QdiscConfig;
    use crate::wire::{Headers, IpRepr, Transport, UdpRepr};

    fn fq(src: &str) -> FqCodel<HeaderPacket> {
        let cfg: FqCodelConfig = toml::from_str(src).unwrap();
        FqCodel::new(&cfg, &BuildCtx::default()).unwrap()
    }

    fn hfq(src: &str) -> HostFqCodel<HeaderPacket> {
        let cfg: HostFqCodelConfig = toml::from_str(src).unwrap();
        HostFqCodel::new(&cfg, &BuildCtx::default()).unwrap()
    }

    /// A UDP packet of `ip_len` bytes from host 10.0.<host>.1 port `port` to 10.9.9.9:53,
    /// tagged `tag` in its IP identification.
    fn udp(tag: u16, ip_len: u32, host: u8, port: u16) -> HeaderPacket {
        let mut ip = IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, host, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 9, 9, 9)),
        );
        ip.ident = tag;
        HeaderPacket::new(Headers {
            ip,
            transport: Transport::Udp(UdpRepr {
                src_port: port,
                dst_port: 53,
            }),
            payload_len: ip_len - 28,
        })
    }

    /// The digests of `random_workloads_keep_their_schedule`, as computed when every
    /// bucket had its own table entry.
    const PINNED: [u64; 6] = [
        0x06e1_4b67_2edd_038a,
        0x0fa6_2edc_d285_b1df,
        0xef31_b5c7_18ed_230d,
        0xdd50_96ea_cd74_327b,
        0xaec2_e60b_e6a1_5af0,
        0x9503_d69e_4bdc_500b,
    ];

    fn utag(p: &HeaderPacket) -> u16 {
        p.hdr.ip.ident
    }

    /// RFC 8290 §1.3 / §4: a flow that sends less than its quantum per round is served
    /// from the new list ahead of a backlogged bulk flow.
    /// A pure ACK of connection `flow` acknowledging `ack`, tagged `tag`.
    fn pure_ack(tag: u32, ack: u32, flow: u16) -> HeaderPacket {
        let mut p = data_flow(tag, 40, flow);
        p.hdr.tcp_repr_mut().unwrap().ack = crate::wire::SeqNumber(ack);
        p
    }

    fn filtered(q: &dyn Qdisc<HeaderPacket>) -> u64 {
        q.stats().filtered_for(FilterReason::AckSuperseded)
    }

    /// A packet that names its flow and hosts ([`Pkt::flow_ids`]), as the simulator's do:
    /// the headers (the same for all) must not matter.
    struct Named(HeaderPacket, FlowIds);

    impl Pkt for Named {
        fn ip_len(&self) -> u32 {
            self.0.ip_len()
        }
        fn headers(&self) -> Option<&Headers> {
            self.0.headers()
        }
        fn class(&self) -> crate::packet::ClassId {
            self.0.class
        }
        fn set_class(&mut self, c: crate::packet::ClassId) {
            self.0.class = c;
        }
        fn set_tcp_window(&mut self, w: u16) -> bool {
            self.0.set_tcp_window(w)
        }
        fn set_dscp_ecn(&mut self, d: u8, e: crate::wire::Ecn) -> bool {
            self.0.set_dscp_ecn(d, e)
        }
        fn flow_ids(&self) -> Option<FlowIds> {
            Some(self.1)
        }
    }

    fn named(flow: u64, src: u64, dst: u64) -> Named {
        Named(udp(0, 100, 1, 1), FlowIds { flow, src, dst })
    }

    #[test]
    fn flows_named_by_the_packet_spread_over_the_buckets() {
        // 1 000 consecutive flow numbers (as connection ids come) over 1 024 buckets:
        // a random assignment fills 1024 × (1 − (1 − 1/1024)^1000) ≈ 638 buckets, with a
        // standard deviation of about 9; the headers, equal for all, play no part.
        let cfg: FqCodelConfig = toml::from_str("").unwrap();
        for seed in [0, 1, 2] {
            let ctx = BuildCtx {
                seed,
                ..BuildCtx::default()
            };
            let q: FqCodel<Named> = FqCodel::new(&cfg, &ctx).unwrap();
            let mut used = std::collections::HashSet::new();
            for f in 0..1000 {
                used.insert(q.bucket_of(&named(f, 0, 1)));
            }
            assert!(
                (600..=680).contains(&used.len()),
                "seed {seed}: {}",
                used.len()
            );
            // The same flow, whatever its hosts say, keeps its bucket; another seed moves it.
            assert_eq!(q.bucket_of(&named(7, 0, 1)), q.bucket_of(&named(7, 5, 6)));
        }
        let q0: FqCodel<Named> = FqCodel::new(&cfg, &BuildCtx::default()).unwrap();
        let ctx = BuildCtx {
            seed: 9,
            ..BuildCtx::default()
        };
        let q9: FqCodel<Named> = FqCodel::new(&cfg, &ctx).unwrap();
        assert!((0..100).any(|f| q0.bucket_of(&named(f, 0, 1)) != q9.bucket_of(&named(f, 0, 1))));
    }

    #[test]
    fn hosts_and_flows_named_by_the_packet_get_their_own_ways() {
        // 200 hosts with two flows each in 1 024 host and 1 024 flow buckets (sets of 8
        // ways): every host and every flow gets a way of its own, as CAKE's set-associative
        // hashing gives distinct 5-tuples when the sets are not full.
        let mut q: HostFqCodel<Named> = HostFqCodel::new(
            &toml::from_str("hosts = \"dst\"").unwrap(),
            &BuildCtx::default(),
        )
        .unwrap();
        let mut d = Drops::new();
        for h in 0..200u64 {
            for f in 0..2 {
                q.enqueue(ms(0), named(1000 + 2 * h + f, 77, h), &mut d);
            }
        }
        assert_eq!(d.len(), 0);
        assert_eq!(q.active_hosts(), 200);
        let c = q.counters();
        let get = |k: &str| c.iter().find(|(n, _)| *n == k).unwrap().1;
        assert_eq!((get("new_hosts"), get("new_flows")), (200, 400));
        // A flow's later packets join its queue; the source does not split a `dst` host.
        q.enqueue(ms(0), named(1000, 78, 0), &mut d);
        assert_eq!((q.active_hosts(), q.flows.used()), (200, 400));
        // Keyed by source, the 200 destinations are one host.
        let mut q: HostFqCodel<Named> = HostFqCodel::new(
            &toml::from_str("hosts = \"src\"").unwrap(),
            &BuildCtx::default(),
        )
        .unwrap();
        for h in 0..200u64 {
            q.enqueue(ms(0), named(h, 77, h), &mut d);
        }
        assert_eq!(q.active_hosts(), 1);
    }

    #[test]
    fn the_ack_filter_keeps_one_growing_ack_per_connection() {
        let mut q = hfq("ack_filter = true");
        let mut d = Drops::new();
        for (i, a) in [1000, 2000, 3000, 4000, 5000].into_iter().enumerate() {
            q.enqueue(ms(0), pure_ack(i as u32, a, 0), &mut d);
        }
        // The first ACK has no history (it may be a duplicate) and stays; each later one
        // supersedes the one before it.
        assert_eq!(
            drain(&mut q, ms(0)).iter().map(tag).collect::<Vec<_>>(),
            [0, 4]
        );
        assert_eq!(filtered(&q), 3);
        check(&q);
        // Off by default.
        let mut q = hfq("");
        for (i, a) in [1000, 2000, 3000].into_iter().enumerate() {
            q.enqueue(ms(0), pure_ack(i as u32, a, 0), &mut d);
        }
        assert_eq!(drain(&mut q, ms(0)).len(), 3);
    }

    /// A packet that answers [`Pkt::flow_ids`], [`Pkt::fields`] and [`Pkt::ack_seg`] but
    /// whose headers must not be read (as a simulator packet kept compact).
    struct Packed(HeaderPacket, u64);

    impl Pkt for Packed {
        fn ip_len(&self) -> u32 {
            self.0.ip_len()
        }
        fn headers(&self) -> Option<&Headers> {
            panic!("the headers are read")
        }
        fn class(&self) -> crate::packet::ClassId {
            self.0.class
        }
        fn set_class(&mut self, c: crate::packet::ClassId) {
            self.0.class = c;
        }
        fn set_tcp_window(&mut self, _: u16) -> bool {
            unreachable!()
        }
        fn set_dscp_ecn(&mut self, d: u8, e: crate::wire::Ecn) -> bool {
            self.0.set_dscp_ecn(d, e)
        }
        fn flow_ids(&self) -> Option<FlowIds> {
            Some(FlowIds {
                flow: self.1,
                src: 1,
                dst: 2,
            })
        }
        fn fields(&self) -> Option<crate::packet::Fields> {
            Some(crate::packet::Fields::of(&self.0.hdr))
        }
        fn ack_seg(&self) -> Option<crate::ack::AckSeg> {
            crate::ack::AckSeg::of(&self.0.hdr)
        }
    }

    #[test]
    fn the_ack_filter_reads_the_segment_not_the_headers() {
        let mut q: HostFqCodel<Packed> = HostFqCodel::new(
            &toml::from_str("ack_filter = true").unwrap(),
            &BuildCtx::default(),
        )
        .unwrap();
        assert!(!q.reads_headers());
        let mut d = Drops::new();
        // Two connections' ACKs, all with the same headers: each connection keeps its
        // first ACK (no history) and its newest.
        for (i, (a, conn)) in [
            (1000, 7),
            (2000, 7),
            (3000, 7),
            (1000, 8),
            (2000, 8),
            (4000, 7),
        ]
        .into_iter()
        .enumerate()
        {
            q.enqueue(ms(0), Packed(pure_ack(i as u32, a, 0), conn), &mut d);
        }
        let mut out = Vec::new();
        while let Dequeued::Packet(p) = q.dequeue(ms(0), &mut d) {
            out.push(tag(&p.0));
        }
        out.sort();
        assert_eq!(out, [0, 3, 4, 5]);
        assert_eq!(q.stats().filtered_for(FilterReason::AckSuperseded), 2);
    }

    #[test]
    fn the_ack_filter_never_removes_duplicates_or_crosses_data() {
        let mut q = fq("ack_filter = true");
        let mut d = Drops::new();
        // 1000, 2000, then three duplicates of 2000, a data segment of the same
        // connection, and newer ACKs: the duplicates and the data stay, in order.
        let mut seq = 0;
        let mut push = |q: &mut FqCodel<HeaderPacket>, p: HeaderPacket| {
            q.enqueue(ms(0), p, &mut d);
        };
        for a in [1000, 2000, 2000, 2000, 2000] {
            push(&mut q, pure_ack(seq, a, 0));
            seq += 1;
        }
        let mut data = data_flow(seq, 1000, 0);
        data.hdr.tcp_repr_mut().unwrap().ack = crate::wire::SeqNumber(2000);
        push(&mut q, data);
        seq += 1;
        for a in [3000, 4000] {
            push(&mut q, pure_ack(seq, a, 0));
            seq += 1;
        }
        let out: Vec<u32> = drain(&mut q, ms(0)).iter().map(tag).collect();
        // Only 3000 went (4000 supersedes it); 2000 after 1000 could go only if a newer
        // ACK had reached it, but the duplicates behind it stop every scan.
        assert_eq!(out, [0, 1, 2, 3, 4, 5, 7]);
        assert_eq!(filtered(&q), 1);
        check(&q);
    }

    #[test]
    fn the_ack_filter_leaves_other_connections_in_a_shared_queue_alone() {
        // One queue for everything: connection 0's ACKs around one of connection 1.
        let mut q = fq("flows = 1\nack_filter = true");
        let mut d = Drops::new();
        for (tag, ack, flow) in [
            (0, 1000, 0),
            (1, 2000, 0),
            (2, 500, 1),
            (3, 3000, 0),
            (4, 4000, 0),
        ] {
            q.enqueue(ms(0), pure_ack(tag, ack, flow), &mut d);
        }
        // Connection 1's ACK resets the history: 3000 is a possible duplicate, stays, and
        // 4000 cannot reach past it; nothing is removed and the order holds.
        let out: Vec<u32> = drain(&mut q, ms(0)).iter().map(tag).collect();
        assert_eq!(out, [0, 1, 2, 3, 4]);
        assert_eq!(filtered(&q), 0);
    }

    #[test]
    fn sparse_flow_boost() {
        let mut q = fq("");
        let mut d = Drops::new();
        for i in 0..40 {
            q.enqueue(ms(0), data_flow(i, 1500, 0), &mut d);
        }
        assert_eq!(tag(&q.dequeue(ms(0), &mut d).packet().unwrap()), 0);
        // A ping-sized packet of another flow arrives behind 39 bulk packets.
        q.enqueue(ms(1), data_flow(1000, 84, 1), &mut d);
        let order: Vec<u32> = (0..4)
            .map(|k| tag(&q.dequeue(ms(1 + k), &mut d).packet().unwrap()))
            .collect();
        // The bulk flow finishes its quantum (1514 B: one more packet), goes to the old
        // list, and the new flow is served next.
        assert_eq!(order, vec![1, 1000, 2, 3]);
        check(&q);
        // A second sparse packet after the first was served: boosted again.
        q.enqueue(ms(10), data_flow(1001, 84, 1), &mut d);
        assert_eq!(tag(&q.dequeue(ms(10), &mut d).packet().unwrap()), 1001);
        check(&q);
        // A flow that keeps a backlog is not: it waits its turn on the old list.
        q.enqueue(ms(11), data_flow(2000, 1500, 2), &mut d);
        q.enqueue(ms(11), data_flow(2001, 1500, 2), &mut d);
        let order: Vec<u32> = drain(&mut q, ms(11)).iter().map(tag).take(4).collect();
        assert_eq!(order, vec![2000, 2001, 4, 5], "{order:?}");
        assert!(d.is_empty());
    }

    #[test]
    fn byte_fair_between_flows() {
        let mut q = fq("");
        let mut d = Drops::new();
        for i in 0..200 {
            q.enqueue(ms(0), data_flow(i, 1500, 0), &mut d);
        }
        for i in 0..1000 {
            q.enqueue(ms(0), data_flow(10_000 + i, 300, 1), &mut d);
        }
        let mut bytes = [0u64; 2];
        for _ in 0..300 {
            let p = q.dequeue(ms(1), &mut d).packet().unwrap();
            bytes[(tag(&p) >= 10_000) as usize] += p.ip_len() as u64;
        }
        let diff = bytes[0].abs_diff(bytes[1]);
        assert!(diff <= 3000, "{bytes:?}");
        check(&q);
    }

    #[test]
    fn overflow_drops_from_the_fattest_flow() {
        let mut q = fq("limit = \"10p\"");
        let mut d = Drops::new();
        for i in 0..8 {
            q.enqueue(ms(0), data_flow(i, 1000, 0), &mut d);
        }
        for i in 100..102 {
            q.enqueue(ms(0), data_flow(i, 1000, 1), &mut d);
        }
        assert!(d.is_empty());
        // The 11th packet belongs to the small flow; the big one loses its head.
        q.enqueue(ms(0), data_flow(102, 1000, 1), &mut d);
        let got: Vec<(u32, Verdict)> = d.drain().map(|x| (tag(&x.pkt), x.verdict)).collect();
        assert_eq!(got, vec![(0, Verdict::Dropped(DropReason::LongestQueue))]);
        check(&q);
        // The memory limit works the same way on bytes.
        let mut q = fq("memory_limit = \"5000B\"");
        for i in 0..5 {
            q.enqueue(ms(0), data_flow(i, 1000, 0), &mut d);
        }
        q.enqueue(ms(0), data_flow(100, 500, 1), &mut d);
        assert_eq!(d.drain().map(|x| tag(&x.pkt)).collect::<Vec<_>>(), vec![0]);
        assert_eq!(q.backlog().bytes, 4500);
        check(&q);
    }

    #[test]
    fn codel_per_queue_spares_the_light_flow() {
        // A bulk flow keeps a standing queue; a light flow sends one packet per 20 ms.
        let mut q = fq("ecn = false");
        let mut d = Drops::new();
        let mut light_sojourn_max = 0u64;
        let mut sent_light = 0;
        let (mut bulk_tag, mut light_tag) = (0u32, 100_000u32);
        let mut stamps = std::collections::HashMap::new();
        // 10 Mbit/s link: one 1500-byte packet per 1.2 ms; bulk offers 2 per 1.2 ms.
        for step in 0..2000u64 {
            let now = Instant::from_micros(step * 1200);
            for _ in 0..2 {
                q.enqueue(now, data_flow(bulk_tag, 1500, 0), &mut d);
                bulk_tag += 1;
            }
            if step % 17 == 0 {
                stamps.insert(light_tag, now);
                q.enqueue(now, data_flow(light_tag, 100, 1), &mut d);
                light_tag += 1;
            }
            if let Some(p) = q.dequeue(now, &mut d).packet() {
                if let Some(t0) = stamps.get(&tag(&p)) {
                    light_sojourn_max = light_sojourn_max.max(now.as_nanos() - t0.as_nanos());
                    sent_light += 1;
                }
            }
        }
        let dropped: Vec<u32> = d.drain().map(|x| tag(&x.pkt)).collect();
        assert!(
            dropped.iter().all(|&t| t < 100_000),
            "light flow never dropped"
        );
        assert!(dropped.len() > 100, "the bulk flow is controlled");
        assert!(sent_light >= 115, "{sent_light}");
        assert!(light_sojourn_max <= 2_400_000, "{light_sojourn_max}");
        check(&q);
    }

    #[test]
    fn the_hash_is_perturbed_by_the_seed() {
        let cfg: FqCodelConfig = toml::from_str("").unwrap();
        let at = |seed: u64| {
            let q: FqCodel<HeaderPacket> = FqCodel::new(
                &cfg,
                &BuildCtx {
                    seed,
                    ..BuildCtx::default()
                },
            )
            .unwrap();
            (0..16)
                .map(|f| q.bucket_of(&data_flow(0, 100, f)))
                .collect::<Vec<_>>()
        };
        assert_eq!(at(1), at(1));
        assert_ne!(at(1), at(2));
    }

    /// One host with one flow and one with eight, all backlogged: equal host shares, and
    /// equal flow shares inside the busy host.
    #[test]
    fn host_fairness_one_vs_eight_flows() {
        let mut q = hfq("");
        let mut d = Drops::new();
        for round in 0..200u16 {
            q.enqueue(ms(0), udp(round, 1500, 1, 5000), &mut d);
            for f in 0..8 {
                q.enqueue(ms(0), udp(round, 1500, 2, 6000 + f), &mut d);
            }
        }
        let mut per_host = [0u64; 2];
        let mut per_flow = [0u64; 8];
        for _ in 0..200 {
            let p = q.dequeue(ms(1), &mut d).packet().unwrap();
            let h = p.hdr.ip.src == IpAddr::V4(Ipv4Addr::new(10, 0, 2, 1));
            per_host[h as usize] += p.ip_len() as u64;
            if let (true, Transport::Udp(u)) = (h, p.hdr.transport) {
                per_flow[(u.src_port - 6000) as usize] += 1;
            }
        }
        assert_eq!(per_host, [150_000, 150_000]);
        assert!(
            per_flow.iter().all(|&n| n.abs_diff(12) <= 1),
            "{per_flow:?}"
        );
        assert!(d.is_empty());
        assert_eq!(q.active_hosts(), 2);
        check(&q);
        // By destination, the two senders are one host (all to 10.9.9.9): flow fairness.
        let mut q = hfq("hosts = \"dst\"");
        for round in 0..50u16 {
            q.enqueue(ms(0), udp(round, 1500, 1, 5000), &mut d);
            for f in 0..8 {
                q.enqueue(ms(0), udp(round, 1500, 2, 6000 + f), &mut d);
            }
        }
        let from1 = (0..90)
            .filter(|_| {
                let p = q.dequeue(ms(1), &mut d).packet().unwrap();
                p.hdr.ip.src == IpAddr::V4(Ipv4Addr::new(10, 0, 1, 1))
            })
            .count();
        assert_eq!(from1, 10);
        assert_eq!(q.active_hosts(), 1);
        check(&q);
    }

    #[test]
    fn a_sparse_host_is_boosted() {
        let mut q = hfq("");
        let mut d = Drops::new();
        for i in 0..40 {
            q.enqueue(ms(0), udp(i, 1500, 1, 5000), &mut d);
        }
        q.dequeue(ms(0), &mut d);
        q.enqueue(ms(1), udp(999, 84, 3, 7), &mut d);
        let order: Vec<u16> = (0..3)
            .map(|_| utag(&q.dequeue(ms(1), &mut d).packet().unwrap()))
            .collect();
        assert_eq!(order, vec![1, 999, 2]);
        check(&q);
    }

    #[test]
    fn config_errors_name_the_key() {
        let e = |src: &str| {
            let c: QdiscConfig = toml::from_str(src).unwrap();
            match c.build::<HeaderPacket>(&BuildCtx::default()) {
                Err(e) => e.path,
                Ok(_) => panic!("{src} built"),
            }
        };
        assert_eq!(e("kind = \"fq_codel\"\nflows = 0"), "fq_codel.flows");
        assert_eq!(
            e("kind = \"fq_codel\"\nquantum = \"0B\""),
            "fq_codel.quantum"
        );
        assert_eq!(
            e("kind = \"host_fq_codel\"\nflows = 100"),
            "host_fq_codel.flows"
        );
        assert_eq!(
            e("kind = \"host_fq_codel\"\ninterval = \"1ms\""),
            "host_fq_codel.interval"
        );
        assert!(
            toml::from_str::<QdiscConfig>("kind = \"host_fq_codel\"\nhosts = \"mac\"").is_err()
        );
    }

    /// As an HTB leaf, CoDel takes the class rate for its low-rate target: at 50 kbit/s a
    /// 1500-byte packet takes 240 ms, so the target is 360 ms and a queue served at that
    /// pace is not dropped from in its first second (with the 5 ms default it would be
    /// from 480 ms on).
    #[test]
    fn an_htb_leaf_inherits_its_class_rate() {
        let trees = [
            "kind = \"htb\"\nclasses = [{ name = \"a\", rate = \"50kbit\", burst = \"1600B\", ",
            "kind = \"hfsc\"\nclasses = [{ name = \"a\", rt = { m2 = \"50kbit\" }, ",
        ];
        for (tree, kind) in trees
            .iter()
            .flat_map(|t| ["codel", "fq_codel", "host_fq_codel"].map(|k| (t, k)))
        {
            let src = format!("{tree}queue = {{ kind = \"{kind}\", ecn = false }} }}]");
            let c: QdiscConfig = toml::from_str(&src).unwrap();
            let mut q = c
                .build::<HeaderPacket>(&BuildCtx::with_classes(&["a"]))
                .unwrap();
            let mut d = Drops::new();
            for i in 0..10 {
                q.enqueue(ms(0), classed(i, 1500, 0), &mut d);
            }
            let (mut t, mut sent) = (0, 0);
            while t <= 1000 {
                match q.dequeue(ms(t), &mut d) {
                    Dequeued::NotBefore(at) => t = at.as_nanos().div_ceil(1_000_000),
                    Dequeued::Packet(_) => sent += 1,
                    Dequeued::Empty => break,
                }
            }
            // Served at the class rate: one packet per 240 ms (plus the bucket's burst).
            assert!((5..=6).contains(&sent), "{tree} {kind}: {sent}");
            assert!(d.is_empty(), "{tree} {kind}: {} dropped", d.len());
            check(q.as_ref());
        }
    }

    /// A small deterministic random stream for the workloads below.
    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            splitmix64(&mut self.0) % n
        }
    }

    /// A TCP segment of flow `flow` (host 10.0.<flow % hosts>.1, port 2000 + flow) of
    /// `ip_len` bytes acknowledging `ack`, tagged `tag` in its sequence number.
    fn seg(tag: u32, ip_len: u32, flow: u16, hosts: u16, ack: u32, ect: bool) -> HeaderPacket {
        let mut p = data_flow(tag, ip_len, 1000 + flow);
        p.hdr.ip.src = IpAddr::V4(Ipv4Addr::new(10, 0, (flow % hosts) as u8, 1));
        if ect {
            p.hdr.ip.ecn = crate::wire::Ecn::Ect0;
        }
        p.hdr.tcp_repr_mut().unwrap().ack = crate::wire::SeqNumber(ack);
        p
    }

    /// Run a random workload through `q` — bursts that build standing queues (CoDel
    /// drops and marks), quiet spells that empty them, more flows than buckets (collisions,
    /// full sets), pure ACKs (filtering), overflow (the fattest flow's drops) — and digest
    /// everything that came out: each packet with its dequeue step and ECN bits, each drop
    /// with its verdict, and the final counters.
    fn digest(q: &mut dyn Qdisc<HeaderPacket>, seed: u64, flows: u64, hosts: u16) -> u64 {
        let mut r = Rng(seed);
        let mut d = Drops::new();
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mix = |h: &mut u64, v: u64| *h = (*h ^ v).wrapping_mul(0x0100_0000_01b3);
        let mut acked = vec![0u32; flows as usize];
        for step in 0..12_000u64 {
            let now = Instant::from_micros(step * 500);
            let (arrivals, service) = match (step / 700) % 4 {
                0 => (r.below(5), 1 + r.below(2)),
                1 => (r.below(3), 1 + r.below(3)),
                2 => (u64::from(r.below(6) == 0), 2),
                _ => (r.below(4), u64::from(r.below(3) == 0)),
            };
            for _ in 0..arrivals {
                let f = (r.below(flows) * r.below(flows) / flows) as usize;
                let tag = step as u32 * 8 + r.below(8) as u32;
                let ect = r.below(4) == 0;
                let p = if r.below(3) == 0 {
                    // A pure ACK, now and then a duplicate.
                    if r.below(5) != 0 {
                        acked[f] += 1000;
                    }
                    seg(tag, 40, f as u16, hosts, acked[f], ect)
                } else {
                    seg(
                        tag,
                        41 + r.below(1460) as u32,
                        f as u16,
                        hosts,
                        acked[f],
                        ect,
                    )
                };
                q.enqueue(now, p, &mut d);
            }
            for _ in 0..service {
                match q.dequeue(now, &mut d) {
                    Dequeued::Packet(p) => {
                        mix(&mut h, u64::from(tag(&p)));
                        mix(&mut h, step);
                        mix(&mut h, p.hdr.ip.ecn as u64);
                    }
                    _ => break,
                }
            }
            for x in d.drain() {
                mix(&mut h, u64::from(tag(&x.pkt)) << 8);
                for b in format!("{:?}", x.verdict).bytes() {
                    mix(&mut h, u64::from(b));
                }
            }
            check(&*q);
        }
        for (_, v) in q.counters() {
            mix(&mut h, v);
        }
        mix(&mut h, q.flow_entries());
        h
    }

    /// The schedules of both disciplines, on small tables (collisions, full sets) and on
    /// the default ones, pinned by a digest of everything they emitted.
    #[test]
    fn random_workloads_keep_their_schedule() {
        let cases: [(&str, bool, u64, u16); 6] = [
            ("", false, 40, 6),
            ("flows = 16\nlimit = \"60p\"\nack_filter = true\ninterval = \"20ms\"", false, 48, 6),
            ("ack_filter = true\nmemory_limit = \"30000B\"", false, 300, 6),
            ("", true, 40, 6),
            (
                "flows = 16\nhost_buckets = 8\nlimit = \"60p\"\nack_filter = true\ninterval = \"20ms\"",
                true,
                48,
                11,
            ),
            ("hosts = \"pair\"\nflows = 64\nhost_buckets = 16\nack_filter = true", true, 300, 20),
        ];
        let got: Vec<u64> = cases
            .iter()
            .map(|&(src, host, flows, hosts)| {
                let mut q: Box<dyn Qdisc<HeaderPacket>> = match host {
                    false => Box::new(fq(src)),
                    true => Box::new(hfq(src)),
                };
                digest(q.as_mut(), 7, flows, hosts)
            })
            .collect();
        assert_eq!(got, PINNED, "{got:#x?}");
    }

    /// Flows that come and go one after another share one slot: a queue that empties
    /// gives its slot back and the next flow reuses it.
    #[test]
    fn an_emptied_queue_gives_its_slot_back() {
        let mut q = fq("");
        let mut d = Drops::new();
        for f in 0..200u16 {
            for i in 0..3 {
                q.enqueue(ms(u64::from(f)), data_flow(i, 1000, f), &mut d);
            }
            assert_eq!(q.table.used(), 1);
            assert_eq!(drain(&mut q, ms(u64::from(f))).len(), 3);
            assert_eq!(q.table.used(), 0);
        }
        assert_eq!(q.table.flows.len(), 1);
        assert_eq!(q.new_flow_count, 200);
        check(&q);
        // The same in the host-then-flow tables, hosts included.
        let mut q = hfq("");
        for f in 0..200u16 {
            q.enqueue(ms(0), udp(f, 1000, f as u8, 5000 + f), &mut d);
            assert_eq!(q.flow_entries(), 2);
            assert_eq!(drain(&mut q, ms(0)).len(), 1);
            assert_eq!(q.flow_entries(), 0);
        }
        assert_eq!((q.flows.flows.len(), q.hosts.len()), (1, 1));
        assert!(d.is_empty());
    }

    /// A table of a few flows finds them by reading its slots and holds no bucket index;
    /// past `SCAN` slots it makes the index, and every flow keeps its queue across the
    /// change.
    #[test]
    fn the_bucket_index_is_made_only_for_many_flows() {
        let mut q = fq("");
        let mut d = Drops::new();
        let mut buckets = std::collections::BTreeSet::new();
        let mut f = 0u16;
        while buckets.len() < SCAN {
            let p = data_flow(u32::from(f), 100, f);
            buckets.insert(q.bucket_of(&p));
            q.enqueue(ms(0), p, &mut d);
            f += 1;
        }
        assert_eq!(q.table.used(), SCAN);
        assert!(q.table.slots.index.is_empty());
        // A second packet of each flow so far joins its flow's queue, not a new one.
        for g in 0..f {
            q.enqueue(ms(0), data_flow(u32::from(g) + 1000, 100, g), &mut d);
        }
        assert_eq!(q.table.used(), SCAN);
        // One more flow: the index is made, and the earlier flows are still found.
        let mut g = f;
        while buckets.len() == SCAN {
            let p = data_flow(u32::from(g), 100, g);
            buckets.insert(q.bucket_of(&p));
            q.enqueue(ms(0), p, &mut d);
            g += 1;
        }
        assert_eq!(q.table.used(), SCAN + 1);
        assert_eq!(q.table.slots.index.len(), 1024);
        for h in 0..f {
            q.enqueue(ms(0), data_flow(u32::from(h) + 2000, 100, h), &mut d);
        }
        assert_eq!(q.table.used(), SCAN + 1);
        assert_eq!(
            drain(&mut q, ms(0)).len(),
            3 * usize::from(f) + usize::from(g - f)
        );
        assert!(d.is_empty());
        check(&q);
    }

    /// Every bucket in use at once, then none, then some again: as many slots as buckets
    /// at most, each packet out once, and the slots reused.
    #[test]
    fn every_bucket_in_use_at_once() {
        let mut q = fq("");
        let mut d = Drops::new();
        let mut seen = std::collections::HashSet::new();
        let mut sent = 0;
        for f in 0..u16::MAX - 1000 {
            let p = data_flow(u32::from(f), 100, f);
            seen.insert(q.bucket_of(&p));
            q.enqueue(ms(0), p, &mut d);
            sent += 1;
            if seen.len() == 1024 {
                break;
            }
        }
        assert_eq!(q.table.used(), 1024);
        assert_eq!(q.table.flows.len(), 1024);
        assert_eq!(drain(&mut q, ms(0)).len(), sent);
        assert_eq!(q.table.used(), 0);
        for f in 0..100 {
            q.enqueue(ms(1), data_flow(f, 100, f as u16), &mut d);
        }
        assert_eq!(q.table.flows.len(), 1024);
        assert_eq!(drain(&mut q, ms(1)).len(), 100);
        assert!(d.is_empty());
        check(&q);
        // 3000 flows of one host fill all 128 sets of 8 flow queues; the rest wait as
        // guests of their host's queues.
        let mut q = hfq("");
        for f in 0..3000u16 {
            q.enqueue(ms(0), udp(f, 100, 1, 10_000 + f), &mut d);
        }
        assert_eq!(q.flow_entries(), 1 + 1024);
        assert_eq!(q.flows.flows.len(), 1024);
        assert_eq!(drain(&mut q, ms(0)).len(), 3000);
        assert_eq!(q.flow_entries(), 0);
        assert!(d.is_empty());
        check(&q);
    }

    /// What a bucket remembers between busy spells: its connection's ACK history (the
    /// first ACK after the spell is known not to be a duplicate, so the next one may
    /// supersede it), and CoDel's state after a dropping episode.
    #[test]
    fn a_bucket_remembers_its_acks_and_codel_state() {
        let mut q = fq("ack_filter = true");
        let mut d = Drops::new();
        q.enqueue(ms(0), pure_ack(0, 1000, 0), &mut d);
        assert_eq!(drain(&mut q, ms(0)).len(), 1);
        assert_eq!((q.table.used(), q.table.idle_acks.len()), (0, 1));
        q.enqueue(ms(5), pure_ack(1, 2000, 0), &mut d);
        q.enqueue(ms(5), pure_ack(2, 3000, 0), &mut d);
        assert_eq!(
            drain(&mut q, ms(5)).iter().map(tag).collect::<Vec<_>>(),
            [2]
        );
        assert_eq!(filtered(&q), 1);
        // A bulk flow twice as fast as a 10 Mbit/s link for a second: CoDel drops, then
        // the flow stops and its queue empties.
        let mut q = fq("ecn = false");
        let b = q.bucket_of(&data_flow(0, 1500, 0)) as u32;
        for step in 0..800u64 {
            let now = Instant::from_micros(step * 1200);
            for k in 0..2 {
                q.enqueue(now, data_flow(step as u32 * 2 + k, 1500, 0), &mut d);
            }
            q.dequeue(now, &mut d);
        }
        assert!(q.codel_counters().aqm_drops > 2);
        drain(&mut q, ms(960));
        assert_eq!(q.table.used(), 0);
        let v = q.table.idle_vars[&b];
        assert!(v.count - v.lastcount > 1, "{v:?}");
        // It comes back: the state is its own again.
        q.enqueue(ms(1000), data_flow(9, 1500, 0), &mut d);
        assert_eq!(q.table.flows[q.table.get(b as usize).unwrap()].vars, v);
        assert!(q.table.idle_vars.is_empty());
        check(&q);
    }

    use crate::qdisc::cobalt::{P_DEC, P_INC};

    fn fq_cobalt(src: &str) -> FqCodel<HeaderPacket, CobaltVars> {
        let cfg: FqCodelConfig = toml::from_str(src).unwrap();
        assert_eq!(cfg.aqm, AqmKind::Cobalt);
        FqCodel::new(&cfg, &BuildCtx::default()).unwrap()
    }

    /// Two unresponsive flows (hosts 1 and 2) each sending one 1000-byte packet per 2 ms
    /// into a link that serves one per 2 ms (4 Mbit/s): each at twice its half share, so
    /// half of every flow's packets must go (250 a second each: a control-law count near
    /// 625). Returns the median and p90 sojourn time (ms) of the packets sent from 10 s to
    /// 30 s, and the drops; the conservation identities are checked at every step.
    fn two_x_share(q: &mut dyn Qdisc<HeaderPacket>) -> (f64, f64, u64) {
        let mut d = Drops::new();
        let mut soj = Vec::new();
        let mut dropped = 0u64;
        for tick in 0..15_000u64 {
            let now = ms(2 * tick);
            // Tag: the enqueue tick.
            q.enqueue(now, udp(tick as u16, 1000, 1, 9000), &mut d);
            q.enqueue(now, udp(tick as u16, 1000, 2, 9000), &mut d);
            if let Some(p) = q.dequeue(now, &mut d).packet() {
                if tick >= 5_000 {
                    soj.push((2 * (tick - u64::from(utag(&p)))) as f64);
                }
            }
            dropped += d.drain().count() as u64;
            check(&*q);
        }
        soj.sort_by(f64::total_cmp);
        (soj[soj.len() / 2], soj[soj.len() * 9 / 10], dropped)
    }

    /// Unresponsive flows at twice their share: RFC 8289 CoDel restarts each dropping
    /// episode from a short one's count and lets the queues rebuild (median sojourn far
    /// above target); COBALT's decaying count holds them near target.
    #[test]
    fn cobalt_holds_an_unresponsive_flow_at_twice_its_share_near_target() {
        let mut codel = fq("ecn = false");
        let (p50_codel, p90_codel, drops_codel) = two_x_share(&mut codel);
        let mut cobalt = fq_cobalt("ecn = false\naqm = \"cobalt\"");
        let (p50_cobalt, p90_cobalt, drops_cobalt) = two_x_share(&mut cobalt);
        eprintln!(
            "codel: {p50_codel} / {p90_codel} ms, {drops_codel} drops; \
             cobalt: {p50_cobalt} / {p90_cobalt} ms, {drops_cobalt} drops"
        );
        assert!(p50_cobalt <= 12.0, "{p50_cobalt}");
        assert!(p50_codel >= 40.0, "{p50_codel}");
        // Both drop half of what is offered over the run (30 000 packets), less what the
        // queues hold at the end.
        for n in [drops_codel, drops_cobalt] {
            assert!((14_000..=15_000).contains(&n), "{n}");
        }
        let c = cobalt.codel_counters();
        assert_eq!(c.blue_drops, 0, "no overflow: BLUE stays at 0");
        assert_eq!(c.aqm_drops, cobalt.stats().dropped_for(DropReason::Aqm));
        assert_eq!(c.aqm_drops, drops_cobalt);
    }

    /// BLUE in the discipline: a flow that overflows the buffer raises its own drop
    /// probability (not the other flow's), BLUE then drops from it, and `p` falls once
    /// the flood stops and its queue is found empty. Counters: BLUE's only with COBALT;
    /// every drop in `QdiscStats` is an AQM (CoDel part or BLUE) or overflow drop.
    #[test]
    fn blue_rises_on_overflow_and_falls_when_the_queue_empties() {
        let mut q = fq_cobalt("limit = \"20p\"\nflows = 64\naqm = \"cobalt\"");
        let mut d = Drops::new();
        let flood = udp(0, 1000, 2, 9000);
        let light = udp(0, 1000, 1, 5000);
        let (bf, bl) = (q.bucket_of(&flood), q.bucket_of(&light));
        assert_ne!(bf, bl);
        let p_of = |q: &FqCodel<HeaderPacket, CobaltVars>, b: usize| {
            q.table.get(b).map(|s| q.table.flows[s].vars.p_drop)
        };
        // 1 s of flooding at 4 packets per ms against 1 served; the light flow sends one
        // packet per 10 ms.
        for t in 0..1000u64 {
            for k in 0..4 {
                q.enqueue(ms(t), udp((t * 4 + k) as u16, 1000, 2, 9000), &mut d);
            }
            if t % 10 == 0 {
                q.enqueue(ms(t), udp(t as u16, 1000, 1, 5000), &mut d);
            }
            q.dequeue(ms(t), &mut d);
            check(&q);
        }
        let c = q.codel_counters();
        let p_end = p_of(&q, bf).unwrap();
        // At most one rise per target (5 ms) of overflow, all of them the flood's: p is
        // about 1000 / 6 × 1/256.
        assert!((150..=200).contains(&c.blue_raises), "{c:?}");
        assert_eq!(u64::from(p_end), c.blue_raises * u64::from(P_INC), "{c:?}");
        assert!(c.blue_drops > 0, "{c:?}");
        assert_eq!(
            p_of(&q, bl).unwrap_or(0),
            0,
            "the light flow never overflowed"
        );
        let st = q.stats();
        assert_eq!(
            st.dropped_for(DropReason::Aqm),
            c.aqm_drops + c.blue_drops,
            "{c:?}"
        );
        assert!(st.dropped_for(DropReason::LongestQueue) > 0);
        let names: Vec<&str> = q.counters().iter().map(|(n, _)| *n).collect();
        assert!(names.contains(&"blue_drops") && names.contains(&"blue_raises"));
        assert!(!fq("").counters().iter().any(|(n, _)| n.starts_with("blue")));
        // The flood stops; the queue drains and is found empty every ms: p falls by 1/4096
        // per 5 ms (BLUE state kept while the bucket is out of use).
        let t0 = 1000;
        for t in t0..t0 + 2000u64 {
            q.dequeue(ms(t), &mut d);
        }
        let p_after = q.table.idle_vars.get(&(bf as u32)).map_or(0, |v| {
            let mut v = *v;
            v.resume(&q.params, ms(t0 + 2000).as_nanos());
            v.p_drop
        });
        assert!(p_after < p_end - 300 * P_DEC, "{p_after}");
        assert!(p_after > p_end - 420 * P_DEC, "{p_after}");
        check(&q);
        assert_eq!(q.backlog().packets, 0);
    }

    /// The config key: default `codel` (no BLUE counters), `cobalt` for both disciplines,
    /// and an unknown value is one error naming the key.
    #[test]
    fn the_aqm_key() {
        for (src, blue) in [
            ("kind = \"fq_codel\"", false),
            ("kind = \"fq_codel\"\naqm = \"codel\"", false),
            ("kind = \"fq_codel\"\naqm = \"cobalt\"", true),
            ("kind = \"host_fq_codel\"\naqm = \"cobalt\"", true),
            ("kind = \"host_fq_codel\"", false),
        ] {
            let c: QdiscConfig = crate::config::from_toml(src).unwrap();
            let q = c.build::<HeaderPacket>(&BuildCtx::default()).unwrap();
            let has = q.counters().iter().any(|(n, _)| *n == "blue_drops");
            assert_eq!(has, blue, "{src}");
        }
        let src = "[queue]\nkind = \"fq_codel\"\naqm = \"blue\"\n";
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct Doc {
            queue: QdiscConfig,
        }
        let e = crate::config::from_toml::<Doc>(src).unwrap_err();
        assert_eq!(e.path, "queue.aqm", "{e}");
        assert!(!e.to_string().contains('\n'), "{e}");
        assert!(e.to_string().contains("cobalt"), "{e}");
    }
}
