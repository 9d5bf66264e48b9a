//! ACK delay control ("Fast TCP", Wu, Shi, Zhang, Cheng & Ma): shape the ACKs of the
//! reverse direction when the forward direction is congested.
//!
//! # Principles
//!
//! A TCP sender is clocked by ACKs. A router next to a long-delay or slow link sees the
//! forward queue fill long before the sender does; by spacing the ACKs it sends back to
//! the sender, it slows the sender within the short loop router → sender → router
//! instead of waiting for a loss. The shaper is the discipline of the *reverse* direction
//! of a middlebox; the runtime feeds it the forward queue's state after every operation
//! ([`Qdisc::handle_observation`]); it never reaches into another object.
//!
//! * **Congestion detection.** The forward direction is congested while its backlog is at
//!   or above `threshold` (bytes or packets). With `release` set, congestion ends only
//!   when the backlog falls below `release` (hysteresis). `threshold = "auto"` takes a
//!   third of the forward queue's capacity (see *Self-tuning*).
//! * **ACK identification.** Pure ACKs (ACK set, no payload, no SYN/FIN/RST —
//!   [`Headers::is_pure_ack`](crate::wire::Headers::is_pure_ack)) go to the ACK queue.
//!   Everything else — data (including data carrying a piggybacked ACK), SYN/FIN/RST,
//!   non-TCP, unparsed packets — goes to the data queue and is never held: it waits only
//!   behind packets that arrived before it and may leave, as in a FIFO. The paper's
//!   alternative, clearing the ACK bit of data segments and generating separate ACKs,
//!   is not done: a TCP segment without ACK is legal only on a SYN (RFC 9293 §3.10.7.4:
//!   "if the ACK bit is off, drop the segment and return"), so receivers would discard
//!   the data; and a synthesized ACK would have to invent sequence number, window,
//!   timestamps and SACK blocks. See `docs/ack-delay.md`.
//! * **Leak.** ACKs leave one at a time, spaced by the leak interval: `rate` — one ACK per
//!   forward packet service time (the paper's "normal rate equal to the service rate of
//!   the data packet in the forward buffer"), `congested` (default 1/2) of that rate
//!   under congestion; `interval` — one ACK per `interval`, one per
//!   `congested_intervals × interval` under congestion (the paper's router test). There
//!   is no burst credit: after an idle period the next ACK leaves at once and the spacing
//!   restarts from it. The spacing in force is re-evaluated whenever the congestion
//!   state changes, so a change takes effect on the ACK already waiting.
//! * **Aggregate or per connection.** One FIFO ACK queue (the paper's choice), or one per
//!   connection (hashed into `buckets`) served round robin under the same leak, so that
//!   connections share the ACK rate equally.
//! * **Delay bound.** No ACK is held longer than `max_delay`: one that reaches it leaves
//!   at once, outside the leak schedule (it does not use up a leak slot, so the bound
//!   holds even when ACKs arrive faster than they leak), and `acks_forced` counts it.
//!   Delayed ACKs accumulate and may time out the sender, the paper warns; the default
//!   (200 ms) stays well below the 1 s minimum RTO of RFC 6298.
//!
//! Complete generality is not a goal: the shaper does not follow senders' windows (the
//! paper rejects that as impractical), does not filter ACKs (that is `ack_filter`), and
//! does not give data priority over ACKs.
//!
//! # Self-tuning (the paper's future work)
//!
//! * `leak = { kind = "rate" }` without `rate`/`packet`: the normal spacing is the
//!   *measured* service time of one forward packet (the gap between back-to-back dequeues
//!   of the forward queue) times the measured forward segments per ACK (from the ACKs'
//!   acknowledgment numbers, so that receivers acknowledging every second segment are
//!   paced at the right rate).
//! * `threshold = "auto"`: derived from the forward buffer `C` and the measured
//!   overshoot. The paper sizes the threshold so that "the buffer capacity minus the fixed
//!   threshold is large enough to accommodate the packets remaining at the links in the
//!   loop from Router 1 to Source and return to Router 1": after congestion is detected,
//!   data already triggered by released ACKs keeps arriving for one control loop `L`, in
//!   slow start at twice the forward service rate `r`, so the backlog overshoots the
//!   threshold by about `r·L`. The shaper measures that overshoot (the highest backlog
//!   above the threshold during a congestion episode, `O`, learnt when the episode ends)
//!   and sets `T = C − max(2·O, C/8)`, never below `C/3`; before the first episode
//!   `T = C/2`. The `C/8` floor keeps headroom for bursts the measurement has not seen
//!   (an episode can end after one dequeue, before any overshoot shows; back-to-back
//!   segments arrive in pairs in slow start). The learnt overshoot only grows. The aim is no loss with the least
//!   holding of ACKs: the excess window the forward buffer can hold stays there, and only
//!   what would overflow it is parked as delayed ACKs (whose delay the sender sees as a
//!   longer RTT, and which may time it out). The paper's fixed thresholds aim lower, at a
//!   short forward queue.

//! # Worked example (the paper's satellite case)
//!
//! 30 Mbit/s forward, MSS 536 (576-byte packets), threshold 50 KB: a forward packet takes
//! 576·8/30e6 = 153.6 µs, so ACKs normally leave at most every 153.6 µs (6510 ACKs/s) and
//! every 307.2 µs (3255 ACKs/s) while more than 50 KB wait in the forward queue. In slow
//! start each ACK releases two segments, so the halved ACK rate makes the sender send at
//! exactly the forward rate and the queue stops growing near 50 KB.

mod config;
mod tune;

pub use config::{AckShaperConfig, Fraction, LeakConfig, Threshold};

use super::{
    Backlog, ConfigError, Dequeued, DropReason, Drops, PeerObservation, Qdisc, QdiscStats, Verdict,
};
use crate::packet::Pkt;
use crate::time::{Duration, Instant};
use crate::units::Limit;
use config::{Base, Params};
use std::collections::VecDeque;
use tune::{ServiceEstimator, PPA_ONE};

/// Counters of the shaper beyond [`QdiscStats`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckShaperCounters {
    /// Pure ACKs offered.
    pub acks_received: u64,
    /// Other packets offered.
    pub data_received: u64,
    /// ACKs released by the leak schedule.
    pub acks_leaked: u64,
    /// ACKs released because they reached `max_delay` (delay-bound hits).
    pub acks_forced: u64,
    /// Times the forward direction became congested.
    pub congestion_onsets: u64,
    /// Total time spent congested (ns).
    pub congested_ns: u64,
    /// Longest time an ACK was held (ns).
    pub max_hold_ns: u64,
    /// Sum of the times ACKs were held (ns), for a mean with `acks_leaked + acks_forced`.
    pub total_hold_ns: u64,
}

/// What the shaper currently applies (for tests, stats and docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tuning {
    /// Whether the forward direction is considered congested.
    pub congested: bool,
    /// Congestion begins at this forward backlog (`None`: `auto` before the forward
    /// capacity is known — never congested then).
    pub threshold: Option<Limit>,
    /// Congestion ends below this forward backlog.
    pub release: Option<Limit>,
    /// ACK spacing without congestion (zero: not yet measured, ACKs pass).
    pub spacing: Duration,
    /// ACK spacing under congestion.
    pub congested_spacing: Duration,
    /// Measured service time of one forward packet.
    pub service_time: Option<Duration>,
    /// Measured forward packets per ACK × 256.
    pub packets_per_ack_x256: Option<u64>,
}

struct Held<P> {
    pkt: P,
    at: Instant,
    seq: u64,
}

/// The ACK shaper. See the [module documentation](self).
pub struct AckShaper<P> {
    p: Params,
    data: VecDeque<Held<P>>,
    /// ACK queues: one (aggregate) or one per bucket.
    acks: Vec<VecDeque<Held<P>>>,
    /// Non-empty ACK queues in round-robin order.
    active: VecDeque<u32>,
    stats: QdiscStats,
    ack_stats: QdiscStats,
    data_stats: QdiscStats,
    congested: bool,
    /// When the leak last released an ACK.
    last_leak: Option<Instant>,
    /// The latest `now` seen (time never goes back).
    now: Instant,
    seq: u64,
    peer_capacity: Option<Limit>,
    /// Highest forward backlog above the threshold during a completed congestion episode
    /// (threshold's unit), and the number of completed episodes.
    overshoot: u64,
    episodes: u64,
    /// Highest backlog above the threshold in the current episode.
    episode_over: u64,
    est: ServiceEstimator,
    counters: AckShaperCounters,
}

impl<P: Pkt> AckShaper<P> {
    /// Build from configuration.
    pub fn new(cfg: &AckShaperConfig) -> Result<Self, ConfigError> {
        let p = Params::new(cfg)?;
        Ok(AckShaper {
            acks: (0..p.buckets).map(|_| VecDeque::new()).collect(),
            p,
            data: VecDeque::new(),
            active: VecDeque::new(),
            stats: QdiscStats::default(),
            ack_stats: QdiscStats::default(),
            data_stats: QdiscStats::default(),
            congested: false,
            last_leak: None,
            now: Instant::ZERO,
            seq: 0,
            peer_capacity: None,
            overshoot: 0,
            episodes: 0,
            episode_over: 0,
            est: ServiceEstimator::default(),
            counters: AckShaperCounters::default(),
        })
    }

    /// The shaper's own counters.
    pub fn counters(&self) -> &AckShaperCounters {
        &self.counters
    }

    /// What the shaper applies now.
    pub fn tuning(&self) -> Tuning {
        let levels = self.levels();
        Tuning {
            congested: self.congested,
            threshold: levels.map(|l| l.0),
            release: levels.map(|l| l.1),
            spacing: Duration::from_nanos(self.normal_spacing()),
            congested_spacing: Duration::from_nanos(self.slow(self.normal_spacing())),
            service_time: self.est.service_ns().map(Duration::from_nanos),
            packets_per_ack_x256: self.est.packets_per_ack(),
        }
    }

    /// Whether the forward direction is considered congested.
    pub fn is_congested(&self) -> bool {
        self.congested
    }

    /// Counters of the ACK queue alone.
    pub fn ack_stats(&self) -> &QdiscStats {
        &self.ack_stats
    }

    /// Counters of the data queue alone.
    pub fn data_stats(&self) -> &QdiscStats {
        &self.data_stats
    }

    fn advance(&mut self, now: Instant) -> Instant {
        let now = now.max(self.now);
        if self.congested {
            self.counters.congested_ns += now.saturating_since(self.now).as_nanos() as u64;
        }
        self.now = now;
        now
    }

    /// (threshold, release) in force.
    fn levels(&self) -> Option<(Limit, Limit)> {
        match self.p.threshold {
            Threshold::Fixed(t) => Some((t, self.p.release.unwrap_or(t))),
            Threshold::Auto => {
                let auto = |c: u64| {
                    if self.episodes == 0 {
                        c / 2
                    } else {
                        c.saturating_sub((2 * self.overshoot).max(c / 8)).max(c / 3)
                    }
                    .max(1)
                };
                let t = match self.peer_capacity? {
                    Limit::Bytes(b) => Limit::Bytes(auto(b)),
                    Limit::Packets(n) => Limit::Packets(auto(n as u64) as u32),
                };
                Some((t, t))
            }
        }
    }

    fn update_congestion(&mut self, b: Backlog) {
        let level = |l: Limit| match l {
            Limit::Bytes(x) => (b.bytes, x),
            Limit::Packets(n) => (b.packets as u64, n as u64),
        };
        let Some((on, off)) = self.levels() else {
            self.congested = false;
            return;
        };
        let (now_on, thr_on) = level(on);
        if !self.congested && now_on >= thr_on {
            self.congested = true;
            self.counters.congestion_onsets += 1;
            self.episode_over = 0;
        } else if self.congested && level(off).0 < level(off).1 {
            self.congested = false;
            // The threshold in force is the one the episode started with: learn now.
            self.overshoot = self.overshoot.max(self.episode_over);
            self.episodes += 1;
        }
        if self.congested {
            self.episode_over = self.episode_over.max(now_on.saturating_sub(thr_on));
        }
    }

    fn normal_spacing(&self) -> u64 {
        match self.p.base {
            Base::Fixed(ns) => ns,
            Base::Measured { packets_per_ack } => {
                let Some(svc) = self.est.service_ns() else {
                    return 0;
                };
                let ppa = match packets_per_ack {
                    Some(k) => k as u64 * PPA_ONE,
                    None => self.est.packets_per_ack().unwrap_or(PPA_ONE),
                };
                u64::try_from(svc as u128 * ppa as u128 / PPA_ONE as u128).unwrap_or(u64::MAX)
            }
        }
    }

    fn slow(&self, ns: u64) -> u64 {
        u64::try_from(ns as u128 * self.p.slow_num as u128 / self.p.slow_den as u128)
            .unwrap_or(u64::MAX)
    }

    fn spacing(&self) -> u64 {
        let n = self.normal_spacing();
        if self.congested {
            self.slow(n)
        } else {
            n
        }
    }

    /// When the leak may release the next ACK (`None`: at once).
    fn leak_time(&self) -> Option<Instant> {
        self.last_leak
            .map(|t| Instant(t.0.saturating_add(self.spacing())))
    }

    /// The bucket holding the oldest queued ACK.
    fn oldest(&self) -> Option<u32> {
        self.active
            .iter()
            .copied()
            .min_by_key(|&b| self.acks[b as usize].front().map_or(u64::MAX, |h| h.seq))
    }

    fn deadline(&self, b: u32) -> Instant {
        let at = self.acks[b as usize].front().map_or(Instant::MAX, |h| h.at);
        Instant(at.0.saturating_add(self.p.max_delay_ns))
    }

    /// The ACK that may leave at `now`: (bucket, released by the delay bound).
    fn eligible_ack(&self, now: Instant) -> Option<(u32, bool)> {
        let oldest = self.oldest()?;
        let overdue = self.deadline(oldest) <= now;
        if self.leak_time().is_none_or(|t| now >= t) {
            // A leak slot: serve an overdue ACK first, else the round-robin head.
            let b = if overdue {
                oldest
            } else {
                *self.active.front().expect("oldest exists")
            };
            Some((b, false))
        } else if overdue {
            Some((oldest, true))
        } else {
            None
        }
    }

    /// When an ACK may next leave (leak slot or delay bound), if any is queued.
    fn next_ack_time(&self) -> Option<Instant> {
        let oldest = self.oldest()?;
        let leak = self.leak_time().unwrap_or(Instant::ZERO);
        Some(leak.min(self.deadline(oldest)))
    }

    fn release_ack(&mut self, b: u32, forced: bool, now: Instant) -> P {
        let q = &mut self.acks[b as usize];
        let h = q.pop_front().expect("eligible ACK exists");
        let emptied = q.is_empty();
        if emptied {
            if let Some(pos) = self.active.iter().position(|&x| x == b) {
                self.active.remove(pos);
            }
        } else if !forced && self.active.front() == Some(&b) {
            self.active.rotate_left(1);
        }
        let hold = now.saturating_since(h.at).as_nanos() as u64;
        let c = &mut self.counters;
        c.max_hold_ns = c.max_hold_ns.max(hold);
        c.total_hold_ns += hold;
        if forced {
            c.acks_forced += 1;
        } else {
            c.acks_leaked += 1;
            self.last_leak = Some(now);
        }
        let len = h.pkt.ip_len();
        self.ack_stats.on_dequeue(len);
        self.stats.on_dequeue(len);
        h.pkt
    }

    fn bucket_of(&self, pkt: &P) -> u32 {
        if self.acks.len() == 1 {
            return 0;
        }
        pkt.headers().map_or(0, |h| {
            (h.flow_key().stable_hash() % self.acks.len() as u64) as u32
        })
    }

    #[inline]
    fn debug_check(&self) {
        debug_assert_eq!(self.stats.check(self.stats.backlog), Ok(()));
        debug_assert_eq!(
            self.ack_stats.backlog.packets + self.data_stats.backlog.packets,
            self.stats.backlog.packets
        );
        debug_assert_eq!(self.data.len(), self.data_stats.backlog.packets as usize);
        debug_assert_eq!(self.ack_stats.check(self.ack_stats.backlog), Ok(()));
        debug_assert_eq!(self.data_stats.check(self.data_stats.backlog), Ok(()));
    }
}

impl<P: Pkt + Send> Qdisc<P> for AckShaper<P> {
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        let now = self.advance(now);
        self.stats.on_receive();
        let len = pkt.ip_len();
        let is_ack = pkt.headers().is_some_and(|h| h.is_pure_ack());
        let (limit, sub) = if is_ack {
            self.counters.acks_received += 1;
            if let Some(h) = pkt.headers() {
                self.est.on_ack(h);
            }
            (self.p.ack_limit, &mut self.ack_stats)
        } else {
            self.counters.data_received += 1;
            (self.p.limit, &mut self.data_stats)
        };
        sub.on_receive();
        let b = sub.backlog;
        if !limit.admits(b.packets, b.bytes, len) {
            let v = Verdict::Dropped(DropReason::QueueFull);
            sub.on_reject(v);
            self.stats.on_reject(v);
            drops.reject(pkt, DropReason::QueueFull);
            self.debug_check();
            return;
        }
        sub.on_enqueue(len);
        self.stats.on_enqueue(len);
        self.seq += 1;
        if is_ack {
            let bucket = self.bucket_of(&pkt);
            let q = &mut self.acks[bucket as usize];
            if q.is_empty() {
                self.active.push_back(bucket);
            }
            q.push_back(Held {
                pkt,
                at: now,
                seq: self.seq,
            });
        } else {
            self.data.push_back(Held {
                pkt,
                at: now,
                seq: self.seq,
            });
        }
        self.debug_check();
    }

    fn dequeue(&mut self, now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        let now = self.advance(now);
        let ack = self.eligible_ack(now);
        let ack_first = match (ack, self.data.front()) {
            (Some((b, _)), Some(d)) => {
                self.acks[b as usize].front().map_or(u64::MAX, |h| h.seq) < d.seq
            }
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (None, None) => {
                return match self.next_ack_time() {
                    Some(t) => Dequeued::NotBefore(t.max(now)),
                    None => Dequeued::Empty,
                };
            }
        };
        let out = if ack_first {
            let (b, forced) = ack.expect("checked");
            self.release_ack(b, forced, now)
        } else {
            let h = self.data.pop_front().expect("checked");
            let len = h.pkt.ip_len();
            self.data_stats.on_dequeue(len);
            self.stats.on_dequeue(len);
            h.pkt
        };
        self.debug_check();
        Dequeued::Packet(out)
    }

    fn poll_at(&self) -> Option<Instant> {
        // Only future instants: an ACK that may leave already waits for the link, which
        // calls `dequeue` when it is free.
        self.next_ack_time().filter(|&t| t > self.now)
    }

    fn handle_timeout(&mut self, now: Instant, _drops: &mut Drops<P>) {
        self.advance(now);
    }

    fn handle_observation(&mut self, now: Instant, obs: &PeerObservation) {
        self.advance(now);
        self.peer_capacity = match (obs.capacity_bytes, obs.capacity_packets) {
            (Some(b), _) => Some(Limit::Bytes(b)),
            (None, Some(p)) => Some(Limit::Packets(p)),
            (None, None) => None,
        };
        self.est.observe(self.now, obs);
        self.update_congestion(obs.backlog);
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn child_stats(&self) -> Vec<(String, QdiscStats)> {
        vec![
            ("acks".to_string(), self.ack_stats.clone()),
            ("data".to_string(), self.data_stats.clone()),
        ]
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        vec![
            ("acks_received", c.acks_received),
            ("data_received", c.data_received),
            ("acks_leaked", c.acks_leaked),
            ("acks_forced", c.acks_forced),
            ("congestion_onsets", c.congestion_onsets),
            ("congested_ns", c.congested_ns),
            ("max_hold_ns", c.max_hold_ns),
            ("total_hold_ns", c.total_hold_ns),
        ]
    }

    fn kind(&self) -> &'static str {
        "ack_shaper"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;

    fn shaper(src: &str) -> AckShaper<HeaderPacket> {
        AckShaper::new(&toml::from_str(src).unwrap()).unwrap()
    }

    /// A pure ACK (40 bytes) of flow `flow`, tagged.
    fn ack(tag: u32, flow: u16) -> HeaderPacket {
        data_flow(tag, 40, flow)
    }

    #[test]
    fn data_is_never_held_and_overtakes_held_acks() {
        let mut q =
            shaper("threshold = \"2p\"\nleak = { kind = \"interval\", interval = \"100ms\" }");
        let mut d = Drops::new();
        q.enqueue(ms(0), ack(1, 0), &mut d);
        q.enqueue(ms(0), ack(2, 0), &mut d);
        q.enqueue(ms(1), data(3, 1500), &mut d);
        assert_eq!(tag(&q.dequeue(ms(1), &mut d).packet().unwrap()), 1);
        // ACK 2 must wait until 101 ms; the data packet does not wait behind it.
        assert_eq!(tag(&q.dequeue(ms(1), &mut d).packet().unwrap()), 3);
        assert_eq!(q.dequeue(ms(1), &mut d), Dequeued::NotBefore(ms(101)));
        assert_eq!(q.poll_at(), Some(ms(101)));
        assert_eq!(tag(&q.dequeue(ms(101), &mut d).packet().unwrap()), 2);
        assert_eq!(q.dequeue(ms(101), &mut d), Dequeued::Empty);
        assert_eq!(q.poll_at(), None);
        check(&q);
        assert_eq!(q.data_stats().dequeued, 1);
        assert_eq!(q.ack_stats().dequeued, 2);
    }
}
