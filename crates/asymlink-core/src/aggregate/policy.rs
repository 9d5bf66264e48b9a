//! One policy's aggregate: its member connections, its tokens and its service order.

use super::bucket::{fill, units, water_fill, whole_bytes, Bucket, LogicalView};
use super::config::{ActionConfig, DepthShare, Order, PolicyConfig, SchemeConfig, Triggers};
use super::filter::Filter;
use super::{ConnKey, Decision};
use crate::time::{dur_ns, Duration, Instant};
use crate::units::Rate;

/// Counters of one aggregate. Packets and bytes are IP packets and IP bytes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AggregateStats {
    /// Connections that joined.
    pub joined: u64,
    /// Connections that left.
    pub left: u64,
    /// Largest membership seen.
    pub max_members: u32,
    /// Packets sent in profile (paid with tokens).
    pub in_profile_packets: u64,
    /// Bytes sent in profile.
    pub in_profile_bytes: u64,
    /// Packets sent out of profile (police and mark).
    pub out_profile_packets: u64,
    /// Bytes sent out of profile.
    pub out_profile_bytes: u64,
    /// Packets dropped (police and drop, or larger than L_m).
    pub dropped_packets: u64,
    /// Bytes dropped.
    pub dropped_bytes: u64,
    /// Packets larger than L_m (included in `dropped_*`, or sent out of profile when
    /// policing with marks).
    pub oversize_packets: u64,
    /// Times a sender was told to wait (shaping).
    pub waits: u64,
    /// Tokens that overflowed the aggregate (every bucket full), bytes.
    pub tokens_lost_bytes: u64,
}

/// One connection of the aggregate.
#[derive(Clone, Debug)]
pub struct Member {
    /// The runtime's key.
    pub key: ConnKey,
    /// The smallest RTT estimate seen.
    pub rtt: Option<Duration>,
    /// Its own (partitioned) or logical bucket; unused by the common scheme.
    pub bucket: Bucket,
    /// Waiting for tokens since this sequence number (FCFS order); `None`: not waiting.
    pub waiting: Option<u64>,
    /// Size of the packet it waits to send.
    pub waiting_len: u32,
    /// Sequence number of its last token assignment (LRU order; 0: never).
    pub served: u64,
    /// Last time it asked to send.
    pub asked_at: Option<Instant>,
    /// Last time it was woken to retry.
    pub woken_at: Option<Instant>,
}

/// The token-sharing scheme, resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Per-connection buckets.
    Partitioned(DepthShare),
    /// One bucket, an order.
    Common(Order),
    /// Logical partitions of a common bucket.
    Logical(DepthShare),
}

/// One policy's aggregate state. See the module documentation of [`super`].
#[derive(Clone, Debug)]
pub struct Aggregate {
    /// Name.
    pub name: String,
    /// Filter.
    pub filter: Filter,
    rate: Rate,
    depth: u128,
    max_packet: u32,
    action: ActionConfig,
    scheme: Scheme,
    default_rtt: Option<Duration>,
    members: Vec<Member>,
    common: Bucket,
    peak: Option<Bucket>,
    last: Instant,
    seq: u64,
    stats: AggregateStats,
    lost_units: u128,
}

impl Aggregate {
    /// Build from a (validated) policy configuration.
    pub fn new(cfg: &PolicyConfig, index: usize) -> Aggregate {
        let depth = units(cfg.profile.depth.0);
        let max_packet = cfg.profile.max_packet.0 as u32;
        Aggregate {
            name: cfg.name.clone().unwrap_or_else(|| format!("policy{index}")),
            filter: cfg.filter,
            rate: cfg.profile.rate,
            depth,
            max_packet,
            action: cfg.action,
            scheme: match cfg.scheme {
                SchemeConfig::Partitioned { depth } => Scheme::Partitioned(depth),
                SchemeConfig::Common { order } => Scheme::Common(order),
                SchemeConfig::Logical { depth } => Scheme::Logical(depth),
            },
            default_rtt: cfg.default_rtt.map(|s| s.0),
            members: Vec::new(),
            common: Bucket::full(cfg.profile.rate, depth),
            peak: cfg
                .profile
                .peak
                .map(|r| Bucket::full(r, units(max_packet as u64))),
            last: Instant::ZERO,
            seq: 0,
            stats: AggregateStats::default(),
            lost_units: 0,
        }
    }

    /// The scheme.
    pub fn scheme(&self) -> Scheme {
        self.scheme
    }

    /// Counters.
    pub fn stats(&self) -> AggregateStats {
        let mut s = self.stats.clone();
        s.tokens_lost_bytes = whole_bytes(self.lost_units);
        s
    }

    /// The members, in join order.
    pub fn members(&self) -> &[Member] {
        &self.members
    }

    /// The common bucket (meaningful for the common scheme).
    pub fn common_bucket(&self) -> &Bucket {
        &self.common
    }

    /// Tokens held by the whole aggregate (units): the common bucket, or the sum of the
    /// partitions.
    pub fn tokens_held(&self) -> u128 {
        match self.scheme {
            Scheme::Common(_) => self.common.level,
            Scheme::Logical(_) if self.members.is_empty() => self.common.level,
            _ => self.members.iter().map(|m| m.bucket.level).sum(),
        }
    }

    /// The aggregate depth B (units).
    pub fn depth(&self) -> u128 {
        self.depth
    }

    /// The logical buckets as the paper's excess formula sees them.
    pub fn logical_views(&self) -> Vec<LogicalView> {
        self.members
            .iter()
            .map(|m| LogicalView {
                level: m.bucket.level,
                depth: m.bucket.depth,
                rate_bps: m.bucket.rate_bps() as u128,
                last_empty: m.bucket.last_empty,
            })
            .collect()
    }

    /// Index of the member `key`.
    pub fn find(&self, key: ConnKey) -> Option<usize> {
        self.members.iter().position(|m| m.key == key)
    }

    fn next_seq(&mut self) -> u64 {
        self.seq += 1;
        self.seq
    }

    /// Bring every bucket to `now`.
    pub fn advance(&mut self, now: Instant) {
        if now <= self.last {
            return;
        }
        let dt = dur_ns(now - self.last);
        self.last = now;
        if let Some(p) = self.peak.as_mut() {
            let add = p.accrue(dt);
            fill(p, add);
        }
        match self.scheme {
            Scheme::Common(_) => {
                let add = self.common.accrue(dt);
                self.lost_units += fill(&mut self.common, add);
            }
            Scheme::Partitioned(_) => {
                for m in self.members.iter_mut() {
                    let add = m.bucket.accrue(dt);
                    self.lost_units += fill(&mut m.bucket, add);
                }
            }
            Scheme::Logical(_) if self.members.is_empty() => {
                // No partitions: the (idle) aggregate bucket fills towards B.
                let add = self.common.accrue(dt);
                self.lost_units += fill(&mut self.common, add);
            }
            Scheme::Logical(_) => {
                let mut excess = 0u128;
                for m in self.members.iter_mut() {
                    let add = m.bucket.accrue(dt);
                    excess += fill(&mut m.bucket, add);
                }
                self.share(excess);
            }
        }
    }

    /// §4.2.3: tokens a full logical bucket cannot hold go, in equal shares, to the
    /// buckets that are not full; what nobody can hold overflows the aggregate.
    fn share(&mut self, excess: u128) {
        if excess == 0 {
            return;
        }
        let mut refs: Vec<&mut Bucket> = self.members.iter_mut().map(|m| &mut m.bucket).collect();
        self.lost_units += water_fill(&mut refs, excess);
    }

    /// Recompute the partitions after a change of membership or RTTs: rates r_m/n, depths
    /// B/n or B·rtt_i/Σrtt (at least L_m). Tokens above a shrunk depth are shared
    /// (logical) or lost (partitioned).
    fn rebalance(&mut self) {
        let share = match self.scheme {
            Scheme::Common(_) => return,
            Scheme::Partitioned(s) | Scheme::Logical(s) => s,
        };
        let n = self.members.len() as u64;
        if n == 0 {
            return;
        }
        let weights: Vec<u128> = match share {
            DepthShare::Equal => vec![1; n as usize],
            DepthShare::Rtt => {
                let known: Vec<u128> = self
                    .members
                    .iter()
                    .filter_map(|m| m.rtt.map(|r| dur_ns(r) as u128))
                    .collect();
                let fallback = self.default_rtt.map(|r| dur_ns(r) as u128).or_else(|| {
                    (!known.is_empty()).then(|| known.iter().sum::<u128>() / known.len() as u128)
                });
                self.members
                    .iter()
                    .map(|m| {
                        m.rtt
                            .map(|r| dur_ns(r) as u128)
                            .or(fallback)
                            .unwrap_or(1)
                            .max(1)
                    })
                    .collect()
            }
        };
        let total: u128 = weights.iter().sum();
        let floor = units(self.max_packet as u64);
        let mut excess = 0u128;
        for (m, w) in self.members.iter_mut().zip(&weights) {
            m.bucket.set_rate(self.rate, 1, n);
            m.bucket.depth = (self.depth * w / total).max(floor);
            if m.bucket.level > m.bucket.depth {
                excess += m.bucket.level - m.bucket.depth;
                m.bucket.level = m.bucket.depth;
            }
        }
        match self.scheme {
            Scheme::Logical(_) => self.share(excess),
            _ => self.lost_units += excess,
        }
    }

    /// A connection joins at `now`. A partitioned connection starts with a full bucket (an
    /// independent rate controller); a logical partition starts with what the others give
    /// up to make room for it, so the aggregate never holds more than B.
    pub fn join(&mut self, now: Instant, key: ConnKey) {
        self.advance(now);
        if self.find(key).is_some() {
            return;
        }
        let mut bucket = Bucket::full(self.rate, 0);
        bucket.last_empty = now;
        if let (Scheme::Logical(_), true) = (self.scheme, self.members.is_empty()) {
            // The first partition inherits the aggregate bucket's tokens.
            bucket.level = std::mem::take(&mut self.common.level);
            bucket.depth = self.depth;
        }
        self.members.push(Member {
            key,
            rtt: None,
            bucket,
            waiting: None,
            waiting_len: 0,
            served: 0,
            asked_at: None,
            woken_at: None,
        });
        self.rebalance();
        if let Scheme::Partitioned(_) = self.scheme {
            let b = &mut self.members.last_mut().expect("just pushed").bucket;
            b.level = b.depth;
        }
        self.stats.joined += 1;
        self.stats.max_members = self.stats.max_members.max(self.members.len() as u32);
    }

    /// A connection leaves at `now`. Its logical tokens are shared with the others.
    pub fn leave(&mut self, now: Instant, key: ConnKey) {
        self.advance(now);
        let Some(i) = self.find(key) else { return };
        let m = self.members.remove(i);
        self.stats.left += 1;
        self.rebalance();
        match self.scheme {
            Scheme::Logical(_) if self.members.is_empty() => {
                // The last partition's tokens return to the aggregate bucket.
                self.common.level = m.bucket.level.min(self.depth);
                self.lost_units += m.bucket.level - self.common.level;
            }
            Scheme::Logical(_) => self.share(m.bucket.level),
            Scheme::Partitioned(_) => self.lost_units += m.bucket.level,
            Scheme::Common(_) => {}
        }
    }

    /// A new RTT estimate for `key`. Depths weighted by RTT follow each connection's
    /// smallest estimate (queueing delay inflates the others).
    pub fn set_rtt(&mut self, now: Instant, key: ConnKey, rtt: Duration) {
        let Some(i) = self.find(key) else { return };
        if self.members[i].rtt.is_some_and(|r| r <= rtt) || rtt.is_zero() {
            return;
        }
        self.advance(now);
        self.members[i].rtt = Some(rtt);
        if matches!(
            self.scheme,
            Scheme::Partitioned(DepthShare::Rtt) | Scheme::Logical(DepthShare::Rtt)
        ) {
            self.rebalance();
        }
    }

    /// Whether member `i` may send `cost` units now (its scheme's bucket and the peak
    /// bucket both hold them).
    fn conforms(&self, i: usize, cost: u128) -> bool {
        let own = match self.scheme {
            Scheme::Common(_) => self.common.level >= cost,
            _ => self.members[i].bucket.level >= cost,
        };
        own && self.peak.as_ref().is_none_or(|p| p.level >= cost)
    }

    /// Nanoseconds until member `i` may send `cost` units, counting only the token sources
    /// it is sure of (a logical partition may get shared tokens sooner).
    pub fn nanos_until(&self, i: usize, cost: u128) -> u64 {
        let own = match self.scheme {
            Scheme::Common(_) => self.common.nanos_until(cost),
            _ => self.members[i].bucket.nanos_until(cost),
        };
        own.max(self.peak.as_ref().map_or(0, |p| p.nanos_until(cost)))
    }

    fn take(&mut self, now: Instant, i: usize, cost: u128) {
        let floor = units(self.max_packet as u64);
        match self.scheme {
            Scheme::Common(_) => self.common.level -= cost,
            _ => {
                let b = &mut self.members[i].bucket;
                b.level -= cost;
                if b.level < floor {
                    b.last_empty = now;
                }
            }
        }
        if let Some(p) = self.peak.as_mut() {
            p.level = p.level.saturating_sub(cost);
        }
        let s = self.next_seq();
        let m = &mut self.members[i];
        m.served = s;
        m.waiting = None;
    }

    /// Whether a waiting member other than `i` comes before `i` in the service order.
    fn someone_ahead(&self, i: usize) -> bool {
        let me = &self.members[i];
        self.members.iter().enumerate().any(|(j, w)| {
            j != i
                && w.waiting.is_some()
                && match self.scheme {
                    Scheme::Common(Order::Sequential) => j < i,
                    Scheme::Common(Order::Fcfs) => w.waiting < Some(me.waiting.unwrap_or(u64::MAX)),
                    Scheme::Common(Order::Lru) => (w.served, j) < (me.served, i),
                    // Own buckets: nobody waits for anybody else's tokens.
                    _ => false,
                }
        })
    }

    /// The waiting members in service order.
    pub fn waiters(&self) -> Vec<usize> {
        let mut w: Vec<usize> = (0..self.members.len())
            .filter(|&i| self.members[i].waiting.is_some())
            .collect();
        match self.scheme {
            Scheme::Common(Order::Fcfs) => w.sort_by_key(|&i| self.members[i].waiting),
            Scheme::Common(Order::Lru) => w.sort_by_key(|&i| (self.members[i].served, i)),
            _ => {}
        }
        w
    }

    /// Whether some waiter could be served at `now` (after [`Aggregate::advance`]): for a
    /// common bucket the first in order, for own buckets any.
    pub fn waiter_ready(&self) -> bool {
        let w = self.waiters();
        match self.scheme {
            Scheme::Common(_) => w
                .first()
                .is_some_and(|&i| self.conforms(i, units(self.members[i].waiting_len as u64))),
            _ => w
                .iter()
                .any(|&i| self.conforms(i, units(self.members[i].waiting_len as u64))),
        }
    }

    /// When the first waiter could be served, by the token sources it is sure of (from
    /// the state at the last [`Aggregate::advance`]; may be in the past).
    pub fn next_ready(&self) -> Option<Instant> {
        let w = self.waiters();
        let at = |i: usize| {
            self.last.saturating_add(Duration::from_nanos(
                self.nanos_until(i, units(self.members[i].waiting_len as u64)),
            ))
        };
        match self.scheme {
            Scheme::Common(_) => w.first().map(|&i| at(i)),
            _ => w.iter().map(|&i| at(i)).min(),
        }
    }

    /// Whether anyone waits.
    pub fn has_waiters(&self) -> bool {
        self.members.iter().any(|m| m.waiting.is_some())
    }

    /// Stop waiting on behalf of member `i` (it no longer wants to send).
    pub fn cancel_wait(&mut self, i: usize) {
        self.members[i].waiting = None;
    }

    /// Mark member `i` as woken at `now` (a retry opportunity).
    pub fn mark_woken(&mut self, i: usize, now: Instant) {
        self.members[i].woken_at = Some(now);
    }

    /// Member `i` asks to send a packet of `len` IP bytes at `now`. `service` is when the
    /// controller will next serve waiters (returned in `Decision::Wait`). Returns the
    /// decision and whether a waiter ahead of it could be served right away (the
    /// controller then serves the waiters in order).
    pub fn admit(
        &mut self,
        now: Instant,
        i: usize,
        len: u32,
        triggers: Triggers,
        service: impl FnOnce(&Aggregate, usize) -> Instant,
    ) -> (Decision, bool) {
        self.advance(now);
        self.members[i].asked_at = Some(now);
        let cost = units(len as u64);
        if len > self.max_packet {
            self.stats.oversize_packets += 1;
            return match self.action {
                ActionConfig::PoliceMark { out_dscp, .. } => {
                    self.stats.out_profile_packets += 1;
                    self.stats.out_profile_bytes += len as u64;
                    (mark_or_send(Some(out_dscp)), false)
                }
                _ => {
                    self.stats.dropped_packets += 1;
                    self.stats.dropped_bytes += len as u64;
                    (Decision::Drop, false)
                }
            };
        }
        let conforms = self.conforms(i, cost);
        match self.action {
            ActionConfig::Shape { dscp } => {
                let queue_jump = triggers == Triggers::Aggregate && self.someone_ahead(i);
                if conforms && !queue_jump {
                    self.take(now, i, cost);
                    self.stats.in_profile_packets += 1;
                    self.stats.in_profile_bytes += len as u64;
                    return (mark_or_send(dscp), false);
                }
                if self.members[i].waiting.is_none() {
                    let s = self.next_seq();
                    self.members[i].waiting = Some(s);
                }
                self.members[i].waiting_len = len;
                if let Scheme::Partitioned(_) | Scheme::Logical(_) = self.scheme {
                    if !conforms {
                        self.members[i].bucket.last_empty = now;
                    }
                }
                self.stats.waits += 1;
                let ahead_ready = queue_jump && self.waiter_ready();
                (Decision::Wait(service(self, i)), ahead_ready)
            }
            ActionConfig::PoliceMark { dscp, out_dscp } => {
                if conforms {
                    self.take(now, i, cost);
                    self.stats.in_profile_packets += 1;
                    self.stats.in_profile_bytes += len as u64;
                    (Decision::Mark(dscp), false)
                } else {
                    self.stats.out_profile_packets += 1;
                    self.stats.out_profile_bytes += len as u64;
                    (mark_or_send(Some(out_dscp)), false)
                }
            }
            ActionConfig::PoliceDrop { dscp } => {
                if conforms {
                    self.take(now, i, cost);
                    self.stats.in_profile_packets += 1;
                    self.stats.in_profile_bytes += len as u64;
                    (mark_or_send(dscp), false)
                } else {
                    self.stats.dropped_packets += 1;
                    self.stats.dropped_bytes += len as u64;
                    (Decision::Drop, false)
                }
            }
        }
    }

    /// Whether this policy shapes (senders may wait).
    pub fn shapes(&self) -> bool {
        matches!(self.action, ActionConfig::Shape { .. })
    }
}

fn mark_or_send(dscp: Option<u8>) -> Decision {
    match dscp {
        Some(d) => Decision::Mark(d),
        None => Decision::Send,
    }
}
