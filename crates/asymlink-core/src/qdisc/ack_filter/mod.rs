//! ACK filtering for the queue in front of a slow link (Barakat & Altman, "On ACK
//! filtering on a slow reverse channel"), with the paper's policies, drop policies for
//! small buffers and a CAKE-like conservative baseline.
//!
//! # Principles
//!
//! TCP ACKs are cumulative: when a newer ACK of a connection arrives, older queued ones
//! usually carry nothing the newer one does not. Removing them ("filtering") shortens the
//! queue of a slow reverse channel and the round-trip time, but each removed ACK is one
//! window increment less for a sender in slow start. The policies differ in *when* they
//! filter:
//!
//! * `none` — never (a plain FIFO, or round robin);
//! * `classic` — always: a new ACK erases the queued ACKs of its connection (one ACK per
//!   connection);
//! * `threshold` — when δ ACKs of the connection are queued, the most recently received
//!   one is erased and the new ACK takes its place (§2.3); δ_o = μ_r·T/(d+1) (eq. (1)) is
//!   the value that absorbs slow-start bursts until the channel is full;
//! * `delayed` — classic filtering while the channel's measured utilization (TSW rate at
//!   the output against the channel rate, or how often the channel is busy when its rate
//!   is unknown) is at or above a threshold (90 %), none below (§3);
//! * `perflow` — the same per connection: a connection is filtered while its own output
//!   rate is at or above the threshold times the channel rate divided by the number of
//!   active connections; FIFO or round-robin service (§4.1);
//! * `conservative` — modelled after the default mode of Linux CAKE's ACK filter: each
//!   arriving ACK removes at most the oldest removable ACK of its connection, and only
//!   when two are queued; the new ACK joins the tail.
//!
//! Filtering never loses information the sender needs: which ACKs may go is decided by
//! [`crate::ack`] (no data, SYN/FIN/RST/URG, duplicate ACKs, ECN transitions, window
//! updates, uncovered SACK or timestamps), and only the newest ACKs of a connection after
//! the last one kept may be removed, so a connection's ACKs stay in order. Filtered ACKs
//! count as [`FilterReason::AckSuperseded`] (or [`FilterReason::AckThreshold`] for the
//! static threshold). When the buffer is still full after filtering, the drop policy
//! picks a victim — the arriving packet (drop-tail), the oldest packet of the longest
//! per-connection queue, or the oldest packet of the connection with the highest output
//! rate — counted as drops. Filtering is only applied when the new packet is admitted,
//! so an ACK is never filtered in favour of one that is then dropped.
//!
//! State is bounded: one entry per connection, at most `max_connections`; when the table
//! is full, the entry idle the longest (nothing queued since, or last seen while idle) is
//! evicted, taken from a FIFO of idle entries without scanning the table, and when every
//! entry has packets queued, new connections share one unfiltered bucket. A connection with packets in the
//! shared bucket keeps sending there until they have left, so it never has packets in
//! two places at once and is never reordered, whatever the service. Removed packets leave tombstones
//! that are compacted away, so memory follows the buffer limit, not the traffic volume.
//! No arrival scans the table: per-connection filtering's active count frees the entries
//! whose quiet instant (when their decaying rate falls below the free threshold, fixed
//! while they are idle) has passed, from a heap; the δ estimate counts the connections
//! with packets queued as they change; the longest queue comes from an index of queue
//! lengths; the highest rate is looked for among the connections with packets queued.
//!
//! What it deliberately does not do: it does not look into the other direction, does not
//! delay or pace ACKs (that is ACK delay control), and does not rewrite packets.
//!
//! # Worked example
//!
//! A 100 kbit/s channel carries 40-byte ACKs at μ_r = 100 000 / 320 = 312.5 ACK/s. With
//! T = 200 ms and an ACK per segment (d = 1), eq. (1) gives δ_o = 312.5 × 0.2 / 2 = 31.25,
//! so `{ policy = "threshold", delta = "auto", rtt = "200ms", ack_every = 1 }` runs with
//! δ = 31. Delayed filtering with the default 90 % starts filtering when the TSW rate of
//! departures reaches 90 kbit/s.

mod channel;
mod config;

pub use config::{
    delta_o, AckDropPolicy, AckFilterConfig, AckPolicy, Delta, DeltaRule, Measure, Params,
    Placement, Service,
};

use super::{
    Backlog, ConfigError, Dequeued, DropReason, Drops, FilterReason, Qdisc, QdiscStats, Stage,
    Verdict,
};
use crate::ack::{may_remove, AckMeta, AckState, Keep};
use crate::estimator::Tsw;
use crate::packet::Pkt;
use crate::time::Instant;
use crate::units::{Limit, Rate};
use crate::wire::FlowKey;
use channel::Channel;
use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap, HashMap, VecDeque};

/// Index of the shared bucket: packets without a connection entry (not parsed, or the
/// table is full). Never filtered.
const SHARED: u32 = 0;

struct Item<P> {
    pkt: P,
    conn: u32,
    len: u32,
    meta: Option<AckMeta>,
    /// The flow of a packet in the shared bucket (to keep its later packets there).
    shared_key: Option<FlowKey>,
}

struct Slot<P> {
    seq: u64,
    item: Option<Item<P>>,
}

struct Conn {
    key: Option<FlowKey>,
    live: bool,
    /// Sequence numbers of its queued packets, oldest first.
    queued: VecDeque<u64>,
    bytes: u64,
    /// Output rate.
    tsw: Tsw,
    acks: AckState,
    last_seen: Instant,
    in_rr: bool,
    /// Generation of its current record in the idle FIFO (0: none).
    idle_gen: u64,
    /// Its position in `AckFilter::busy` while it has packets queued.
    busy_pos: u32,
}

impl Conn {
    fn new(key: Option<FlowKey>, p: &Params, now: Instant) -> Conn {
        Conn {
            key,
            live: true,
            queued: VecDeque::new(),
            bytes: 0,
            tsw: Tsw::new(p.window),
            acks: AckState::new(),
            last_seen: now,
            in_rr: false,
            idle_gen: 0,
            busy_pos: u32::MAX,
        }
    }
}

/// What filtering decided for an arriving packet.
struct Decision {
    /// Sequence numbers to filter (newest first).
    remove: Vec<u64>,
    reason: FilterReason,
    /// Whether filtering was active (for delayed filtering's drop rule).
    active: bool,
}

/// The ACK-filtering queue discipline. See the [module documentation](self).
pub struct AckFilter<P> {
    p: Params,
    slots: VecDeque<Slot<P>>,
    next_seq: u64,
    tombstones: usize,
    conns: Vec<Conn>,
    free: Vec<u32>,
    index: HashMap<FlowKey, u32>,
    /// Flows with packets in the shared bucket, and how many: their later packets join
    /// them there (an entry of their own could be served first and reorder the flow).
    in_shared: HashMap<FlowKey, u32>,
    tracked: u32,
    rr: VecDeque<u32>,
    /// Idle entries (live, nothing queued, not in the round) in the order they became
    /// idle or were last touched while idle, as `(entry, generation)`; records whose
    /// generation is not the entry's current one, or whose entry is no longer idle, are
    /// skipped lazily. The eviction victim is the first valid record: amortised O(1).
    idle: VecDeque<(u32, u64)>,
    idle_gen: u64,
    /// Per-connection filtering only: idle entries by the first instant their output
    /// rate is below the free threshold, as `(instant, entry, generation)` (validated like
    /// `idle`). The entries past their instant are the ones the active count frees.
    quiet: BinaryHeap<Reverse<(u64, u32, u64)>>,
    /// Entries (the shared bucket included) with packets queued, in no particular order.
    busy: Vec<u32>,
    /// When the drop policy may pick the longest queue: the entries in `busy` by
    /// `(packets queued, Reverse(entry))`, so the last is the longest queue with the
    /// lowest index.
    by_len: Option<BTreeSet<(usize, Reverse<u32>)>>,
    /// Output rate of the whole queue.
    agg: Tsw,
    channel: Channel,
    keeps: [u64; Keep::ALL.len()],
    untracked: u64,
    evicted: u64,
    stats: QdiscStats,
    /// Entries freed by the active count (for the tests of it).
    #[cfg(test)]
    freed: u64,
}

impl<P: Pkt + Send> AckFilter<P> {
    /// Build from configuration; `link_rate` is the rate of the link the queue feeds, if
    /// known (the default channel rate).
    pub fn new(cfg: &AckFilterConfig, link_rate: Option<Rate>) -> Result<Self, ConfigError> {
        let p = cfg.params(link_rate)?;
        Ok(AckFilter {
            slots: VecDeque::new(),
            next_seq: 0,
            tombstones: 0,
            conns: vec![Conn::new(None, &p, Instant::ZERO)],
            free: Vec::new(),
            index: HashMap::new(),
            in_shared: HashMap::new(),
            tracked: 0,
            rr: VecDeque::new(),
            idle: VecDeque::new(),
            idle_gen: 0,
            quiet: BinaryHeap::new(),
            busy: Vec::new(),
            by_len: matches!(p.drop, None | Some(AckDropPolicy::LongestQueue)).then(BTreeSet::new),
            agg: Tsw::new(p.window),
            channel: Channel::new(p.window),
            keeps: [0; Keep::ALL.len()],
            untracked: 0,
            evicted: 0,
            stats: QdiscStats::default(),
            #[cfg(test)]
            freed: 0,
            p,
        })
    }

    /// The resolved parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    /// The δ in effect: configured, from eq. (1), or estimated (`None` before the estimate
    /// exists, and for policies without δ).
    pub fn delta(&self) -> Option<u32> {
        match self.p.delta {
            DeltaRule::None => None,
            DeltaRule::Fixed(d) => Some(d),
            DeltaRule::Estimate => self.channel.estimate(),
        }
    }

    /// The channel's utilization as the policy measures it at `now`, in parts per million:
    /// the TSW rate of departures over the channel rate, or the busy fraction with
    /// `measure = "presence"` (or when the rate is unknown).
    pub fn utilization_ppm(&self, now: Instant) -> u64 {
        match (self.p.measure, self.p.channel) {
            (Measure::Rate, Some(c)) => {
                let r = self.agg.rate_at(now).0 as u128;
                ((r * 1_000_000 / c.0 as u128) as u64).min(1_000_000)
            }
            _ => self.channel.presence_ppm(now),
        }
    }

    /// How many times a filtering scan stopped at an ACK it had to keep, by reason.
    pub fn kept_for(&self, k: Keep) -> u64 {
        self.keeps[k as usize]
    }

    /// Packets that went to the shared unfiltered bucket because the connection table was
    /// full of busy entries.
    pub fn untracked(&self) -> u64 {
        self.untracked
    }

    /// Idle connection entries evicted to make room.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Connections currently tracked.
    pub fn connections(&self) -> usize {
        self.tracked as usize
    }

    /// Queue slots held, live packets plus tombstones of removed ones (bounded by twice
    /// the backlog plus a constant: memory follows the buffer, not the traffic).
    pub fn slots_held(&self) -> usize {
        self.slots.len()
    }

    /// Packets queued per connection entry, for tests: (flow, packets), in table order.
    pub fn queue_lengths(&self) -> Vec<(Option<FlowKey>, usize)> {
        self.conns
            .iter()
            .filter(|c| c.live && !c.queued.is_empty())
            .map(|c| (c.key, c.queued.len()))
            .collect()
    }

    // ---------------------------------------------------------------- slots

    fn slot_index(&self, seq: u64) -> Option<usize> {
        let i = self.slots.partition_point(|s| s.seq < seq);
        (i < self.slots.len() && self.slots[i].seq == seq).then_some(i)
    }

    fn meta_of(&self, seq: u64) -> Option<&AckMeta> {
        let i = self.slot_index(seq)?;
        self.slots[i].item.as_ref()?.meta.as_ref()
    }

    /// Take the queued packet `seq` out (leaving a tombstone) and unlink it from its
    /// connection. Does not count it.
    fn take(&mut self, seq: u64) -> Item<P> {
        let i = self.slot_index(seq).expect("queued packet has a slot");
        let item = self.slots[i].item.take().expect("slot is live");
        self.tombstones += 1;
        self.queue_changing(item.conn);
        let c = &mut self.conns[item.conn as usize];
        // Service takes the oldest, filtering the newest: both ends are O(1).
        if c.queued.front() == Some(&seq) {
            c.queued.pop_front();
        } else if c.queued.back() == Some(&seq) {
            c.queued.pop_back();
        } else if let Some(pos) = c.queued.iter().position(|&s| s == seq) {
            c.queued.remove(pos);
        }
        c.bytes -= item.len as u64;
        self.queue_changed(item.conn);
        self.note_idle(item.conn);
        if let Some(k) = item.shared_key {
            if let Some(n) = self.in_shared.get_mut(&k) {
                *n -= 1;
                if *n == 0 {
                    self.in_shared.remove(&k);
                }
            }
        }
        item
    }

    fn put(&mut self, seq: u64, item: Item<P>) {
        let conn = item.conn;
        if let Some(k) = item.shared_key {
            *self.in_shared.entry(k).or_insert(0) += 1;
        }
        let i = self.slots.partition_point(|s| s.seq < seq);
        if i < self.slots.len() && self.slots[i].seq == seq {
            debug_assert!(self.slots[i].item.is_none());
            self.slots[i].item = Some(item);
            self.tombstones -= 1;
        } else {
            self.slots.insert(
                i,
                Slot {
                    seq,
                    item: Some(item),
                },
            );
        }
        self.queue_changing(conn);
        let c = &mut self.conns[conn as usize];
        // Placement keeps a connection's packets in order: an in-place seq is the oldest
        // erased one, newer than everything the connection keeps.
        debug_assert!(c.queued.back().is_none_or(|&b| b < seq));
        c.queued.push_back(seq);
        self.queue_changed(conn);
    }

    /// Before entry `c`'s queue changes length: leave the length index.
    fn queue_changing(&mut self, c: u32) {
        let len = self.conns[c as usize].queued.len();
        if let Some(by_len) = self.by_len.as_mut() {
            if len > 0 {
                by_len.remove(&(len, Reverse(c)));
            }
        }
    }

    /// After entry `c`'s queue changed length: update the busy list and the length index.
    fn queue_changed(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        let len = conn.queued.len();
        let listed = conn.busy_pos != u32::MAX;
        if len > 0 && !listed {
            conn.busy_pos = self.busy.len() as u32;
            self.busy.push(c);
        } else if len == 0 && listed {
            let pos = conn.busy_pos as usize;
            conn.busy_pos = u32::MAX;
            self.busy.swap_remove(pos);
            if let Some(&moved) = self.busy.get(pos) {
                self.conns[moved as usize].busy_pos = pos as u32;
            }
        }
        if let Some(by_len) = self.by_len.as_mut() {
            if len > 0 {
                by_len.insert((len, Reverse(c)));
            }
        }
    }

    /// Drop leading tombstones and compact when they outnumber live packets.
    fn tidy(&mut self) {
        while self.slots.front().is_some_and(|s| s.item.is_none()) {
            self.slots.pop_front();
            self.tombstones -= 1;
        }
        if self.tombstones > 64 && self.tombstones > self.slots.len() / 2 {
            self.slots.retain(|s| s.item.is_some());
            self.tombstones = 0;
        }
    }

    // ---------------------------------------------------------------- connections

    /// The connection entry of `pkt` (created or evicting if needed) and its metadata.
    fn admit_conn(&mut self, now: Instant, pkt: &P) -> (u32, Option<AckMeta>) {
        let Some(h) = pkt.headers() else {
            return (SHARED, None);
        };
        let key = h.flow_key();
        let c = match self.index.get(&key) {
            Some(&c) => c,
            // Earlier packets of the flow wait in the shared bucket: join them, so that the
            // flow stays in order whatever the service (round robin would serve a new
            // entry of its own before the shared bucket's turn).
            None if self.in_shared.contains_key(&key) => {
                self.untracked += 1;
                return (SHARED, None);
            }
            None => match self.new_conn(now, key) {
                Some(c) => c,
                None => {
                    self.untracked += 1;
                    return (SHARED, None);
                }
            },
        };
        let conn = &mut self.conns[c as usize];
        conn.last_seen = now;
        (c, conn.acks.observe(h))
    }

    fn new_conn(&mut self, now: Instant, key: FlowKey) -> Option<u32> {
        if self.tracked >= self.p.max_conns {
            // Evict the entry idle the longest (no scan: the first valid idle record).
            let victim = loop {
                let (c, gen) = self.idle.pop_front()?;
                if self.conns[c as usize].idle_gen == gen && self.is_idle(c) {
                    break c;
                }
            };
            self.release(victim);
            self.evicted += 1;
        }
        let conn = Conn::new(Some(key), &self.p, now);
        let c = match self.free.pop() {
            Some(c) => {
                self.conns[c as usize] = conn;
                c
            }
            None => {
                self.conns.push(conn);
                self.conns.len() as u32 - 1
            }
        };
        self.index.insert(key, c);
        self.tracked += 1;
        self.note_idle(c);
        Some(c)
    }

    /// Whether entry `c` could be evicted: tracked, nothing queued, not in the round.
    fn is_idle(&self, c: u32) -> bool {
        let conn = &self.conns[c as usize];
        c != SHARED && conn.live && conn.queued.is_empty() && !conn.in_rr
    }

    /// Record that entry `c` is idle now (if it is): it goes to the back of the idle
    /// FIFO. Called wherever an entry may become idle or is touched while idle.
    fn note_idle(&mut self, c: u32) {
        if !self.is_idle(c) {
            return;
        }
        self.idle_gen += 1;
        self.conns[c as usize].idle_gen = self.idle_gen;
        self.idle.push_back((c, self.idle_gen));
        // Compact the stale records away when they dominate (amortised O(1)).
        if self.idle.len() > 2 * self.conns.len() + 64 {
            let conns = &self.conns;
            self.idle.retain(|&(c, g)| {
                let conn = &conns[c as usize];
                conn.idle_gen == g && conn.live && conn.queued.is_empty() && !conn.in_rr
            });
        }
        if self.p.policy == AckPolicy::Perflow {
            // The output rate only changes when a packet leaves, so while the entry stays
            // idle the instant it becomes quiet is fixed.
            let quiet_at = match self.conns[c as usize].tsw.above_until(self.free_floor()) {
                None => 0,
                Some(t) if t.0 == u64::MAX => return,
                Some(t) => t.0 + 1,
            };
            self.quiet.push(Reverse((quiet_at, c, self.idle_gen)));
            if self.quiet.len() > 2 * self.conns.len() + 64 {
                let conns = &self.conns;
                self.quiet.retain(|&Reverse((_, c, g))| {
                    let conn = &conns[c as usize];
                    conn.idle_gen == g && conn.live && conn.queued.is_empty() && !conn.in_rr
                });
            }
        }
    }

    fn release(&mut self, c: u32) {
        let conn = &mut self.conns[c as usize];
        debug_assert!(conn.queued.is_empty() && !conn.in_rr);
        if let Some(k) = conn.key.take() {
            self.index.remove(&k);
        }
        conn.live = false;
        self.free.push(c);
        self.tracked -= 1;
    }

    /// The free threshold of per-connection filtering: a fraction of the channel rate.
    fn free_floor(&self) -> Rate {
        let r = self
            .p
            .channel
            .map(|r| r.0 as u128 * self.p.free_ppm as u128 / 1_000_000)
            .unwrap_or(0);
        Rate(u64::try_from(r).unwrap_or(u64::MAX))
    }

    /// Whether entry `c` counts as active at `now`: packets queued, in the round, or an
    /// output rate at or above the free threshold.
    fn is_active(&self, now: Instant, c: u32) -> bool {
        let conn = &self.conns[c as usize];
        !conn.queued.is_empty() || conn.in_rr || conn.tsw.rate_at(now) >= self.free_floor()
    }

    /// Active connections for per-connection filtering: those with packets queued or an
    /// output rate at or above the free threshold (always counting `c`); entries below it
    /// with nothing queued are freed (in table order). Amortised O(log n): the inactive
    /// entries are the idle ones whose quiet instant has passed, popped from `quiet`.
    fn active_conns(&mut self, now: Instant, c: u32) -> u64 {
        #[cfg(test)]
        let oracle = self.active_conns_scan(now, c);
        let mut freed = Vec::new();
        while let Some(&Reverse((at, i, gen))) = self.quiet.peek() {
            if at > now.0 {
                break;
            }
            self.quiet.pop();
            if self.conns[i as usize].idle_gen == gen && self.is_idle(i) {
                freed.push((i, gen));
            }
        }
        freed.sort_unstable();
        if let Some(pos) = freed.iter().position(|&(i, _)| i == c) {
            // Counted, not freed (it may be freed by a later count).
            let (i, gen) = freed.remove(pos);
            self.quiet.push(Reverse((now.0, i, gen)));
        }
        for &(i, _) in &freed {
            self.release(i);
        }
        #[cfg(test)]
        {
            self.freed += freed.len() as u64;
        }
        // What is left tracked is active (or `c`); the shared bucket is never freed.
        let shared = c == SHARED || self.is_active(now, SHARED);
        let n = (self.tracked as u64 + shared as u64).max(1);
        #[cfg(test)]
        {
            let freed: Vec<u32> = freed.iter().map(|&(i, _)| i).collect();
            assert_eq!((n, freed), oracle, "active connections against the scan");
        }
        n
    }

    /// The table scan `active_conns` replaces (test oracle): the count and the entries it
    /// frees, without freeing them.
    #[cfg(test)]
    fn active_conns_scan(&self, now: Instant, c: u32) -> (u64, Vec<u32>) {
        let mut n = 0;
        let mut freed = Vec::new();
        for (i, conn) in self.conns.iter().enumerate() {
            if !conn.live {
                continue;
            }
            let i = i as u32;
            if self.is_active(now, i) || i == c {
                n += 1;
            } else if i != SHARED {
                freed.push(i);
            }
        }
        (n.max(1), freed)
    }

    // ---------------------------------------------------------------- filtering

    /// The newest removable packets of connection `c` in favour of `newer`, newest first,
    /// at most `max`. Counts the reason when the scan stops at a packet it must keep.
    fn removable(&mut self, c: u32, newer: &AckMeta, max: usize) -> Vec<u64> {
        let mut out = Vec::new();
        let conn = &self.conns[c as usize];
        for &seq in conn.queued.iter().rev() {
            if out.len() == max {
                break;
            }
            let verdict = match self.meta_of(seq) {
                Some(q) => may_remove(q, newer),
                None => Err(Keep::NotAck),
            };
            match verdict {
                Ok(()) => out.push(seq),
                Err(k) => {
                    self.keeps[k as usize] += 1;
                    break;
                }
            }
        }
        out
    }

    fn decide(&mut self, now: Instant, c: u32, meta: Option<&AckMeta>) -> Decision {
        let none = |active| Decision {
            remove: Vec::new(),
            reason: FilterReason::AckSuperseded,
            active,
        };
        // Feed the δ estimator on every arrival.
        if self.p.delta == DeltaRule::Estimate {
            let per_conn = self.per_conn_backlog();
            self.channel.estimate_delta(now, per_conn);
        }
        // Delayed filtering's drop rule depends on whether it is filtering now.
        let delayed_active =
            self.p.policy == AckPolicy::Delayed && self.utilization_ppm(now) >= self.p.util_ppm;
        let Some(meta) = meta.filter(|m| m.has_ack) else {
            return none(delayed_active);
        };
        if c == SHARED || self.conns[c as usize].queued.is_empty() {
            return none(delayed_active);
        }
        let meta = *meta;
        let all = usize::MAX;
        match self.p.policy {
            AckPolicy::None => none(false),
            AckPolicy::Classic => Decision {
                remove: self.removable(c, &meta, all),
                reason: FilterReason::AckSuperseded,
                active: true,
            },
            AckPolicy::Threshold => match self.delta() {
                Some(d) if self.conns[c as usize].queued.len() >= d as usize => Decision {
                    remove: self.removable(c, &meta, 1),
                    reason: FilterReason::AckThreshold,
                    active: true,
                },
                _ => none(false),
            },
            AckPolicy::Delayed => {
                if delayed_active {
                    Decision {
                        remove: self.removable(c, &meta, all),
                        reason: FilterReason::AckSuperseded,
                        active: true,
                    }
                } else {
                    none(false)
                }
            }
            AckPolicy::Perflow => {
                let n = self.active_conns(now, c) as u128;
                let rate = self.conns[c as usize].tsw.rate_at(now).0 as u128;
                let chan = self.p.channel.map(|r| r.0 as u128).unwrap_or(0);
                if rate * n * 1_000_000 >= self.p.util_ppm as u128 * chan {
                    Decision {
                        remove: self.removable(c, &meta, all),
                        reason: FilterReason::AckSuperseded,
                        active: true,
                    }
                } else {
                    none(false)
                }
            }
            AckPolicy::Conservative => {
                let mut r = self.removable(c, &meta, all);
                if r.len() >= 2 {
                    let oldest = *r.last().expect("two");
                    r.clear();
                    r.push(oldest);
                } else {
                    r.clear();
                }
                Decision {
                    remove: r,
                    reason: FilterReason::AckSuperseded,
                    active: true,
                }
            }
        }
    }

    /// Backlog divided by the connections that have packets queued (at least 1).
    fn per_conn_backlog(&self) -> u32 {
        let busy = self.busy.len().max(1) as u32;
        #[cfg(test)]
        assert_eq!(
            busy,
            self.conns
                .iter()
                .filter(|c| c.live && !c.queued.is_empty())
                .count()
                .max(1) as u32,
            "connections with packets queued against the scan"
        );
        self.stats.backlog.packets.div_ceil(busy)
    }

    // ---------------------------------------------------------------- dropping

    /// Choose the connection that loses its oldest packet, given the arriving packet's
    /// connection `c` and the packets about to be filtered (all of `c`). `None`: drop the
    /// arrival. The longest queue (ties: the lower entry index) comes from the length
    /// index in O(log n); the highest rate is looked for among the connections with
    /// packets queued (at most the buffer's packet count, whatever the table size).
    fn victim(&self, now: Instant, rule: AckDropPolicy, c: u32, filtered: &[u64]) -> Option<u32> {
        debug_assert!(filtered
            .iter()
            .all(|s| self.conns[c as usize].queued.contains(s)));
        let kept_c = self.conns[c as usize].queued.len() - filtered.len();
        // The arriving packet counts in its own queue.
        let mut best = (0u128, kept_c + 1, c);
        let better = |cand: (u128, usize, u32), best: (u128, usize, u32)| {
            (cand.0, cand.1, Reverse(cand.2)) > (best.0, best.1, Reverse(best.2))
        };
        match rule {
            AckDropPolicy::HighestRate => {
                best.0 = self.conns[c as usize].tsw.rate_at(now).0 as u128;
                for &i in &self.busy {
                    if i != c {
                        let conn = &self.conns[i as usize];
                        let cand = (conn.tsw.rate_at(now).0 as u128, conn.queued.len(), i);
                        if better(cand, best) {
                            best = cand;
                        }
                    }
                }
            }
            _ => {
                best.0 = best.1 as u128;
                let by_len = self.by_len.as_ref().expect("length index kept");
                if let Some(&(len, Reverse(i))) =
                    by_len.iter().rev().find(|&&(_, Reverse(i))| i != c)
                {
                    if better((len as u128, len, i), best) {
                        best = (len as u128, len, i);
                    }
                }
            }
        }
        let v = best.2;
        let v = (v != c || kept_c > 0).then_some(v);
        #[cfg(test)]
        assert_eq!(
            v,
            self.victim_scan(now, rule, c, filtered),
            "victim against the scan"
        );
        v
    }

    /// The table scan `victim` replaces (test oracle).
    #[cfg(test)]
    fn victim_scan(
        &self,
        now: Instant,
        rule: AckDropPolicy,
        c: u32,
        filtered: &[u64],
    ) -> Option<u32> {
        let kept = |i: usize| {
            let conn = &self.conns[i];
            conn.queued.iter().filter(|s| !filtered.contains(s)).count()
        };
        let mut best: Option<(u128, usize, u32)> = None;
        for (i, conn) in self.conns.iter().enumerate() {
            if !conn.live {
                continue;
            }
            let mut len = kept(i);
            if i as u32 == c {
                len += 1; // the arriving packet counts in its own queue
            }
            if len == 0 {
                continue;
            }
            let key = match rule {
                AckDropPolicy::HighestRate => conn.tsw.rate_at(now).0 as u128,
                _ => len as u128,
            };
            // Ties: the longer queue, then the lower index (deterministic).
            let cand = (key, len, i as u32);
            if best.is_none_or(|b| (cand.0, cand.1) > (b.0, b.1)) {
                best = Some(cand);
            }
        }
        let v = best?.2;
        (kept(v as usize) > 0).then_some(v)
    }

    fn fits(&self, filtered_pkts: u32, filtered_bytes: u64, len: u32) -> bool {
        let b = self.stats.backlog;
        self.p
            .limit
            .admits(b.packets - filtered_pkts, b.bytes - filtered_bytes, len)
    }

    fn check(&self) {
        debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
    }
}

impl<P: Pkt + Send> Qdisc<P> for AckFilter<P> {
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        if let Limit::Bytes(max) = self.p.limit {
            if len as u64 > max {
                self.stats.on_reject(Verdict::Dropped(DropReason::TooBig));
                drops.reject(pkt, DropReason::TooBig);
                return;
            }
        }
        let (c, meta) = self.admit_conn(now, &pkt);
        let d = self.decide(now, c, meta.as_ref());
        let (mut fp, mut fb) = (0u32, 0u64);
        for &s in &d.remove {
            fp += 1;
            fb += self.slots[self.slot_index(s).expect("queued")]
                .item
                .as_ref()
                .expect("live")
                .len as u64;
        }
        // Admission: the drop policy makes room if filtering did not.
        let rule = self.p.drop.unwrap_or(if d.active {
            AckDropPolicy::Tail
        } else {
            AckDropPolicy::LongestQueue
        });
        let reason = match rule {
            AckDropPolicy::Tail => DropReason::QueueFull,
            AckDropPolicy::LongestQueue => DropReason::LongestQueue,
            AckDropPolicy::HighestRate => DropReason::HighestRate,
        };
        while !self.fits(fp, fb, len) {
            let victim = match rule {
                AckDropPolicy::Tail => None,
                _ => self.victim(now, rule, c, &d.remove),
            };
            let Some(v) = victim else {
                self.stats.on_reject(Verdict::Dropped(reason));
                drops.reject(pkt, reason);
                self.note_idle(c);
                self.tidy();
                self.check();
                return;
            };
            let seq = *self.conns[v as usize]
                .queued
                .iter()
                .find(|s| !d.remove.contains(s))
                .expect("victim has a kept packet");
            let old = self.take(seq);
            let v = Verdict::Dropped(reason);
            self.stats.on_remove(v, old.len);
            drops.push(old.pkt, v, Stage::Removed);
        }
        // Filtering.
        let mut place = None;
        for &s in &d.remove {
            let old = self.take(s);
            let v = Verdict::Filtered(d.reason);
            self.stats.on_remove(v, old.len);
            drops.push(old.pkt, v, Stage::Removed);
            place = Some(s); // `remove` is newest first: ends at the oldest erased
        }
        let seq = match (place, self.p.placement) {
            (Some(s), Placement::Replace) => s,
            _ => {
                self.next_seq += 1;
                self.next_seq
            }
        };
        self.conns[c as usize].bytes += len as u64;
        let shared_key = if c == SHARED {
            pkt.headers().map(|h| h.flow_key())
        } else {
            None
        };
        self.put(
            seq,
            Item {
                pkt,
                conn: c,
                len,
                meta,
                shared_key,
            },
        );
        let conn = &mut self.conns[c as usize];
        if self.p.service == Service::RoundRobin && !conn.in_rr {
            conn.in_rr = true;
            self.rr.push_back(c);
        }
        self.stats.on_enqueue(len);
        self.tidy();
        self.check();
    }

    fn dequeue(&mut self, now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        let seq = match self.p.service {
            Service::Fifo => self.slots.iter().find(|s| s.item.is_some()).map(|s| s.seq),
            Service::RoundRobin => loop {
                let Some(c) = self.rr.pop_front() else {
                    break None;
                };
                let conn = &mut self.conns[c as usize];
                match conn.queued.front() {
                    Some(&s) => {
                        if conn.queued.len() > 1 {
                            self.rr.push_back(c);
                        } else {
                            conn.in_rr = false;
                        }
                        break Some(s);
                    }
                    None => {
                        conn.in_rr = false;
                        self.note_idle(c);
                    }
                }
            },
        };
        let Some(seq) = seq else {
            self.channel.on_dequeue_call(now, false);
            return Dequeued::Empty;
        };
        // The connection's output rate first: `take` may record it as idle, with the
        // instant its rate falls below the free threshold.
        let (conn, len) = {
            let i = self.slot_index(seq).expect("queued packet has a slot");
            let item = self.slots[i].item.as_ref().expect("slot is live");
            (item.conn, item.len)
        };
        self.conns[conn as usize].tsw.update(now, len);
        let item = self.take(seq);
        self.stats.on_dequeue(item.len);
        self.agg.update(now, item.len);
        self.channel.on_dequeue_call(now, true);
        self.tidy();
        self.check();
        Dequeued::Packet(item.pkt)
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn wants_idle_dequeue(&self) -> bool {
        true
    }

    fn flow_entries(&self) -> u64 {
        self.tracked as u64
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("connections", self.tracked as u64),
            ("evicted", self.evicted),
            ("untracked", self.untracked),
        ]
    }

    fn kind(&self) -> &'static str {
        "ack_filter"
    }
}

#[cfg(test)]
mod tests {
    //! Random traffic through every policy, service and drop rule with a small table and
    //! buffer. In test builds the active count, the per-connection backlog and the drop
    //! victim assert on every call that they agree with the table scans they replace
    //! (`active_conns_scan`, `victim_scan`), so these runs compare the two choices on
    //! every decision; they also check that no flow is reordered.
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::rand::Rng;
    use crate::time::Duration;
    use crate::wire::{Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr};
    use core::net::{IpAddr, Ipv4Addr};
    use proptest::prelude::*;

    /// A segment of flow `flow`, tagged with its per-flow arrival number in the sequence
    /// field (which the filter never reads).
    fn seg(flow: u16, tag: u32, ack: u32, payload: u32) -> HeaderPacket {
        HeaderPacket::new(Headers::tcp(
            IpRepr::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ),
            TcpRepr {
                src_port: 80,
                dst_port: 1000 + flow,
                seq: SeqNumber(tag),
                ack: SeqNumber(ack),
                flags: TcpFlags::ACK,
                window: 1000,
                urgent: 0,
                opts: TcpOptions::default(),
            },
            payload,
        ))
    }

    struct Run {
        /// Connections freed by the active count, drops by each victim rule.
        freed: u64,
        longest: u64,
        highest: u64,
    }

    fn run(cfg: AckFilterConfig, seed: u64, steps: usize) -> Run {
        let link = Some(Rate::kbps(200));
        let mut q: AckFilter<HeaderPacket> = AckFilter::new(&cfg, link).expect("valid");
        let mut d = Drops::new();
        let mut rng = Rng::new(seed);
        let flows = 2 + rng.below(10) as u16;
        let mut acked = vec![0u32; flows as usize];
        let mut sent = vec![0u32; flows as usize];
        let mut last_out: Vec<Option<u32>> = vec![None; flows as usize];
        let mut now = Instant::ZERO;
        for _ in 0..steps {
            now += Duration::from_micros(rng.below(4000));
            // Bursty flows: a few are hot at a time.
            let f = (rng.below(flows as u64 / 2 + 1) + rng.below(flows as u64 / 2 + 1))
                .min(flows as u64 - 1) as usize;
            let payload = if rng.bernoulli(0.15) { 500 } else { 0 };
            if !rng.bernoulli(0.2) {
                acked[f] += 1 + rng.below(3) as u32;
            }
            sent[f] += 1;
            q.enqueue(now, seg(f as u16, sent[f], acked[f], payload), &mut d);
            for _ in 0..rng.below(3) {
                if let Dequeued::Packet(p) = q.dequeue(now, &mut d) {
                    let t = p.hdr.tcp_repr().expect("tcp");
                    let f = (t.dst_port - 1000) as usize;
                    assert!(
                        last_out[f].is_none_or(|l| l < t.seq.0),
                        "flow {f} reordered"
                    );
                    last_out[f] = Some(t.seq.0);
                }
            }
            d.drain().for_each(drop);
        }
        let s = q.stats();
        Run {
            freed: q.freed,
            longest: s.dropped_for(DropReason::LongestQueue),
            highest: s.dropped_for(DropReason::HighestRate),
        }
    }

    fn policy() -> impl Strategy<Value = AckPolicy> {
        prop_oneof![
            Just(AckPolicy::None),
            Just(AckPolicy::Classic),
            Just(AckPolicy::Threshold),
            Just(AckPolicy::Delayed),
            Just(AckPolicy::Perflow),
            Just(AckPolicy::Conservative),
        ]
    }

    fn drop_rule() -> impl Strategy<Value = Option<AckDropPolicy>> {
        prop_oneof![
            Just(None),
            Just(Some(AckDropPolicy::Tail)),
            Just(Some(AckDropPolicy::LongestQueue)),
            Just(Some(AckDropPolicy::HighestRate)),
        ]
    }

    fn config() -> impl Strategy<Value = AckFilterConfig> {
        (
            policy(),
            drop_rule(),
            any::<bool>(),
            2u32..10,
            2u32..16,
            1u64..100,
            0u32..50,
            any::<bool>(),
        )
            .prop_map(|(pol, drop, rr, conns, limit, window_ms, free, estimate)| {
                let mut c = AckFilterConfig::new(pol)
                    .with_max_connections(conns)
                    .with_limit(Limit::Packets(limit))
                    .with_window(Duration::from_millis(window_ms))
                    .with_service(if rr {
                        Service::RoundRobin
                    } else {
                        Service::Fifo
                    });
                if let Some(d) = drop {
                    c = c.with_drop(d);
                }
                if pol == AckPolicy::Perflow {
                    c = c.with_free_below(free as f64 / 100.0);
                }
                if pol == AckPolicy::Threshold {
                    c = c.with_delta(if estimate {
                        Delta::Auto
                    } else {
                        Delta::Fixed(2)
                    });
                }
                c
            })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn counts_and_victims_match_the_table_scans(cfg in config(), seed in any::<u64>()) {
            run(cfg, seed, 600);
        }
    }

    /// The random runs reach what they are meant to compare: entries freed by the active
    /// count, and victims chosen by both rules.
    #[test]
    fn the_random_runs_free_entries_and_choose_victims() {
        let mut total = Run {
            freed: 0,
            longest: 0,
            highest: 0,
        };
        for seed in 0..20 {
            for drop in [AckDropPolicy::LongestQueue, AckDropPolicy::HighestRate] {
                let cfg = AckFilterConfig::new(AckPolicy::Perflow)
                    .with_max_connections(6)
                    .with_limit(Limit::Packets(6))
                    .with_window(Duration::from_millis(20))
                    .with_free_below(0.05)
                    .with_drop(drop);
                let r = run(cfg, seed, 600);
                total.freed += r.freed;
                total.longest += r.longest;
                total.highest += r.highest;
            }
        }
        assert!(total.freed > 100, "freed {}", total.freed);
        assert!(total.longest > 100, "longest-queue drops {}", total.longest);
        assert!(total.highest > 100, "highest-rate drops {}", total.highest);
    }
}
