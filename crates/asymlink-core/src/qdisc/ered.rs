//! ERED: RED with a lower drop probability for marked (in-profile) packets.
//!
//! # Principles
//!
//! A single FIFO at a backbone router that only looks at packet marks (Feng, Kandlur, Saha
//! & Shin, "Understanding TCP Dynamics in an Integrated Services Internet", NOSSDAV 1997;
//! used by the aggregate rate control paper, §3.2 and §4.1: "a marked packet has a 1.5
//! times lower drop probability"). RED (Floyd & Jacobson 1993) keeps an exponentially
//! weighted average of the queue length, `avg ← avg + w_q·(q − avg)`, decayed over idle
//! periods as if `idle / s` small packets had gone by; below `min_th` nothing is dropped
//! early, between the thresholds a packet is dropped with
//! `p_b = max_p·(avg − min_th)/(max_th − min_th)`, spread out by the count of packets since
//! the last drop (ns-2's `wait_` form `p_b / (2 − count·p_b)`, or the original
//! `p_b / (1 − count·p_b)`), and above `max_th` every packet is dropped (`gentle`: the
//! probability rises from `max_p` to 1 between `max_th` and `2·max_th`). ERED divides the
//! probability of a marked packet — a DSCP in `marked_dscp`, by default any non-zero
//! DSCP — by `marked_factor` (1.5) in every region. A full buffer drops whatever arrives.
//!
//! All arithmetic is fixed point: the average in 1/2²⁰ packets (or bytes), probabilities in
//! 1/2³² — `max_p` and `marked_factor` are converted once, at build time. Random draws come
//! from the seeded stream the runtime hands in.
//!
//! Worked example (the defaults, ns-2's RED): `min_th = 5p`, `max_th = 15p`, `max_p = 0.1`,
//! `w_q = 2⁻⁹`. With `avg = 10` packets, `p_b = 0.1·5/10 = 0.05`; a marked packet has 0.033;
//! with `wait`, the first ~20 packets after a drop are safe and the probability then climbs.
//!
//! Complete generality is not a goal: no ECN marking, one FIFO (no per-class thresholds),
//! and the idle decay uses one typical packet time (`mean_packet` at the link rate).

use super::{Backlog, ConfigError, Dequeued, DropReason, Drops, Qdisc, QdiscStats, Verdict};
use crate::packet::Pkt;
use crate::rand::Rng;
use crate::time::{dur_ns, Instant};
use crate::units::{Bytes, Limit, Rate};
use serde::Deserialize;
use std::collections::VecDeque;

/// Fractional bits of the average queue.
const AVG_FRAC: u32 = 20;
/// Probability one.
const P_ONE: u64 = 1 << 32;

/// ERED parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EredConfig {
    /// Buffer: packets (`"50p"`) or bytes; the thresholds use the same unit.
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// Below this average nothing is dropped early.
    #[serde(default = "default_min")]
    pub min_th: Limit,
    /// Above this average every unmarked packet is dropped (`gentle`: up to twice it).
    #[serde(default = "default_max")]
    pub max_th: Limit,
    /// Drop probability at `max_th`.
    #[serde(default = "default_max_p")]
    pub max_p: f64,
    /// The averaging weight is 2^-`weight_log` (9: 0.00195, ns-2's 0.002).
    #[serde(default = "default_wlog")]
    pub weight_log: u8,
    /// Spread drops out with ns-2's `wait_` rule (p_b / (2 − count·p_b)).
    #[serde(default = "yes")]
    pub wait: bool,
    /// Ramp from `max_p` to 1 between `max_th` and `2·max_th` instead of dropping all.
    #[serde(default)]
    pub gentle: bool,
    /// A marked packet is this many times less likely to be dropped.
    #[serde(default = "default_factor")]
    pub marked_factor: f64,
    /// DSCPs that count as marked (absent: any non-zero DSCP).
    #[serde(default)]
    pub marked_dscp: Option<Vec<u8>>,
    /// The typical packet size for the idle-time decay of the average.
    #[serde(default = "default_mean_packet")]
    pub mean_packet: Bytes,
}

fn default_limit() -> Limit {
    Limit::Packets(50)
}
fn default_min() -> Limit {
    Limit::Packets(5)
}
fn default_max() -> Limit {
    Limit::Packets(15)
}
fn default_max_p() -> f64 {
    0.1
}
fn default_wlog() -> u8 {
    9
}
fn yes() -> bool {
    true
}
fn default_factor() -> f64 {
    1.5
}
fn default_mean_packet() -> Bytes {
    Bytes(500)
}

/// ERED's own counters (beyond [`QdiscStats`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EredCounters {
    /// Marked packets offered.
    pub marked_arrivals: u64,
    /// Unmarked packets offered.
    pub unmarked_arrivals: u64,
    /// Early (probabilistic) drops of marked packets.
    pub marked_early: u64,
    /// Early drops of unmarked packets.
    pub unmarked_early: u64,
    /// Drops above the upper threshold (marked or not).
    pub forced: u64,
    /// Drops because the buffer was full.
    pub overflow: u64,
}

/// An ERED queue.
#[derive(Debug)]
pub struct Ered<P> {
    limit: Limit,
    bytes: bool,
    min_fp: u128,
    max_fp: u128,
    max_p: u64,
    wlog: u32,
    wait: bool,
    gentle: bool,
    /// `marked_factor` × 2^16.
    factor: u64,
    marked: Option<Vec<u8>>,
    /// Nanoseconds of one typical packet at the link rate (0: no idle decay).
    pkt_ns: u64,
    avg: u128,
    count: i64,
    idle_since: Option<Instant>,
    rng: Rng,
    q: VecDeque<P>,
    stats: QdiscStats,
    counters: EredCounters,
}

fn limit_value(l: Limit) -> (bool, u64) {
    match l {
        Limit::Packets(p) => (false, p as u64),
        Limit::Bytes(b) => (true, b),
    }
}

impl<P: Pkt> Ered<P> {
    /// Build; `seed` feeds the drop decisions, `link_rate` the idle decay.
    pub fn new(cfg: &EredConfig, seed: u64, link_rate: Option<Rate>) -> Result<Self, ConfigError> {
        let err = |k: &str, m: &str| Err(ConfigError::new(format!("ered.{k}"), m));
        let (bytes, limit) = limit_value(cfg.limit);
        let (b_min, min) = limit_value(cfg.min_th);
        let (b_max, max) = limit_value(cfg.max_th);
        if limit == 0 {
            return err("limit", "must be positive");
        }
        if b_min != bytes || b_max != bytes {
            return err(
                "min_th",
                "the thresholds must use the unit of the limit (packets or bytes)",
            );
        }
        if min >= max {
            return err("max_th", "must be above min_th");
        }
        if max > limit {
            return err("max_th", "must not exceed the limit");
        }
        if !(cfg.max_p > 0.0 && cfg.max_p <= 1.0) {
            return err("max_p", "must be in (0, 1]");
        }
        if !(1..=20).contains(&cfg.weight_log) {
            return err("weight_log", "must be 1..=20");
        }
        if !(cfg.marked_factor >= 1.0 && cfg.marked_factor <= 1000.0) {
            return err("marked_factor", "must be in [1, 1000]");
        }
        if cfg
            .marked_dscp
            .as_ref()
            .is_some_and(|v| v.iter().any(|&d| d > 63))
        {
            return err("marked_dscp", "a DSCP is 0..=63");
        }
        if cfg.mean_packet.0 == 0 {
            return err("mean_packet", "must be positive");
        }
        Ok(Ered {
            limit: cfg.limit,
            bytes,
            min_fp: (min as u128) << AVG_FRAC,
            max_fp: (max as u128) << AVG_FRAC,
            max_p: (cfg.max_p * P_ONE as f64).round() as u64,
            wlog: cfg.weight_log as u32,
            wait: cfg.wait,
            gentle: cfg.gentle,
            factor: (cfg.marked_factor * 65_536.0).round() as u64,
            marked: cfg.marked_dscp.clone(),
            pkt_ns: link_rate.map_or(0, |r| r.tx_nanos(cfg.mean_packet.0)),
            avg: 0,
            count: -1,
            idle_since: Some(Instant::ZERO),
            rng: Rng::new(seed),
            q: VecDeque::new(),
            stats: QdiscStats::default(),
            counters: EredCounters::default(),
        })
    }

    /// ERED's counters.
    pub fn ered_counters(&self) -> EredCounters {
        self.counters
    }

    /// The average queue (packets or bytes, rounded down).
    pub fn avg(&self) -> u64 {
        (self.avg >> AVG_FRAC) as u64
    }

    fn is_marked(&self, pkt: &P) -> bool {
        let Some(dscp) = pkt.headers().map(|h| h.ip.dscp) else {
            return false;
        };
        match &self.marked {
            Some(list) => list.contains(&dscp),
            None => dscp != 0,
        }
    }

    /// `avg ← avg·(1 − w)^m` for an idle period worth `m` packets.
    fn decay(&mut self, now: Instant) {
        let Some(since) = self.idle_since.take() else {
            return;
        };
        if self.pkt_ns == 0 {
            return;
        }
        let mut m = dur_ns(now - since) / self.pkt_ns;
        // (1 − 2^-wlog) in 1/2^32, raised to m by squaring.
        let mut base: u128 = (P_ONE - (P_ONE >> self.wlog)) as u128;
        let mut acc: u128 = P_ONE as u128;
        while m > 0 && acc > 0 {
            if m & 1 == 1 {
                acc = (acc * base) >> 32;
            }
            base = (base * base) >> 32;
            m >>= 1;
        }
        self.avg = (self.avg * acc) >> 32;
    }

    /// The drop probability (1/2^32) of an arriving packet under the current average.
    fn probability(&mut self, marked: bool) -> u64 {
        let avg = self.avg;
        let p = if avg < self.min_fp {
            self.count = -1;
            return 0;
        } else if avg < self.max_fp {
            self.count += 1;
            let pb =
                (self.max_p as u128 * (avg - self.min_fp) / (self.max_fp - self.min_fp)) as u64;
            let cp = self.count.max(0) as u128 * pb as u128;
            let one = P_ONE as u128;
            if self.wait {
                if cp < one {
                    0
                } else if cp < 2 * one {
                    (pb as u128 * one / (2 * one - cp)) as u64
                } else {
                    P_ONE
                }
            } else if cp < one {
                (pb as u128 * one / (one - cp)) as u64
            } else {
                P_ONE
            }
        } else if self.gentle && avg < 2 * self.max_fp {
            self.count += 1;
            let over = (avg - self.max_fp) * (P_ONE - self.max_p) as u128 / self.max_fp;
            self.max_p + over as u64
        } else {
            self.count = 0;
            P_ONE
        };
        if marked {
            (p as u128 * 65_536 / self.factor as u128) as u64
        } else {
            p
        }
    }
}

impl<P: Pkt + Send> Qdisc<P> for Ered<P> {
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let marked = self.is_marked(&pkt);
        if marked {
            self.counters.marked_arrivals += 1;
        } else {
            self.counters.unmarked_arrivals += 1;
        }
        // The average, from the instantaneous queue this packet finds. An idle queue stays
        // idle until a packet is admitted: a packet dropped on arrival must not end the
        // idle period (the average would then never decay again and every later arrival
        // would be dropped).
        self.decay(now);
        if self.q.is_empty() {
            self.idle_since = Some(now);
        }
        let b = self.stats.backlog;
        let q = if self.bytes {
            b.bytes
        } else {
            b.packets as u64
        };
        let q_fp = (q as u128) << AVG_FRAC;
        self.avg = self.avg - (self.avg >> self.wlog) + (q_fp >> self.wlog);
        if !self.limit.admits(b.packets, b.bytes, len) {
            self.counters.overflow += 1;
            self.stats
                .on_reject(Verdict::Dropped(DropReason::QueueFull));
            drops.reject(pkt, DropReason::QueueFull);
            return;
        }
        let p = self.probability(marked);
        if p > 0 && (self.rng.next_u64() >> 32) < p {
            let forced = self.avg >= self.max_fp && !(self.gentle && self.avg < 2 * self.max_fp);
            if forced {
                self.counters.forced += 1;
            } else if marked {
                self.counters.marked_early += 1;
            } else {
                self.counters.unmarked_early += 1;
            }
            self.count = 0;
            self.stats.on_reject(Verdict::Dropped(DropReason::Aqm));
            drops.reject(pkt, DropReason::Aqm);
            return;
        }
        self.idle_since = None;
        self.q.push_back(pkt);
        self.stats.on_enqueue(len);
    }

    fn dequeue(&mut self, now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        match self.q.pop_front() {
            Some(p) => {
                self.stats.on_dequeue(p.ip_len());
                if self.q.is_empty() {
                    self.idle_since = Some(now);
                }
                Dequeued::Packet(p)
            }
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
        let c = self.counters;
        vec![
            ("marked_arrivals", c.marked_arrivals),
            ("unmarked_arrivals", c.unmarked_arrivals),
            ("marked_early_drops", c.marked_early),
            ("unmarked_early_drops", c.unmarked_early),
            ("forced_drops", c.forced),
            ("overflow_drops", c.overflow),
        ]
    }

    fn kind(&self) -> &'static str {
        "ered"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;

    fn ered(src: &str) -> Ered<HeaderPacket> {
        let cfg: EredConfig = toml::from_str(src).unwrap();
        Ered::new(&cfg, 7, Some(Rate::mbps(1))).unwrap()
    }

    fn marked(tag: u32) -> HeaderPacket {
        let mut p = data(tag, 1000);
        p.set_dscp_ecn(10, crate::wire::Ecn::NotEct);
        p
    }

    #[test]
    fn below_min_th_nothing_is_dropped() {
        let mut q = ered("");
        let mut d = Drops::new();
        for i in 0..40 {
            q.enqueue(ms(0), data(i, 1000), &mut d);
        }
        // With w = 2^-9 the average of 40 arrivals stays below 5 packets.
        assert!(d.is_empty());
        assert!(q.avg() < 5, "{}", q.avg());
        check(&q);
        // Overflow beyond the limit drops whatever arrives.
        for i in 0..20 {
            q.enqueue(ms(0), marked(100 + i), &mut d);
        }
        assert_eq!(q.backlog().packets, 50);
        assert_eq!(q.ered_counters().overflow, 10);
        check(&q);
    }

    #[test]
    fn marked_packets_are_dropped_less_often() {
        // Hold the queue at 10 packets (avg -> 10: p_b = 0.05) and offer both kinds.
        let mut q = ered("limit = \"1000p\"\nweight_log = 1\nwait = false");
        let mut d = Drops::new();
        let (mut m_drop, mut u_drop, n) = (0u32, 0u32, 20_000u32);
        for i in 0..10 {
            q.enqueue(ms(0), data(i, 1000), &mut d);
        }
        for i in 0..n {
            for mark in [true, false] {
                let before = d.len();
                q.enqueue(ms(0), if mark { marked(i) } else { data(i, 1000) }, &mut d);
                if d.len() > before {
                    if mark {
                        m_drop += 1
                    } else {
                        u_drop += 1
                    }
                } else {
                    q.dequeue(ms(0), &mut d);
                }
            }
        }
        let ratio = u_drop as f64 / m_drop as f64;
        assert!(
            (1.3..1.7).contains(&ratio),
            "unmarked {u_drop} vs marked {m_drop}: {ratio}"
        );
        let c = q.ered_counters();
        assert_eq!(
            (c.marked_early, c.unmarked_early),
            (m_drop as u64, u_drop as u64)
        );
        check(&q);
    }

    #[test]
    fn the_average_decays_over_idle_time() {
        let mut q = ered("limit = \"100p\"\nweight_log = 2");
        let mut d = Drops::new();
        for i in 0..30 {
            q.enqueue(ms(0), data(i, 1000), &mut d);
        }
        let high = q.avg();
        assert!(high > 15, "{high}");
        drain(&mut q, ms(0));
        // 1 Mbit/s, 500-byte typical packet: 4 ms each; 40 ms idle = 10 packet times:
        // avg * (3/4)^10 = avg * 0.056.
        q.enqueue(ms(40), data(99, 1000), &mut d);
        assert!(q.avg() <= high / 10, "{} vs {high}", q.avg());
        check(&q);
    }

    #[test]
    fn drops_on_an_empty_queue_do_not_stop_the_idle_decay() {
        // Drive the average above max_th (no gentle region: every arrival is dropped
        // there), empty the queue, then offer a packet every second: each is dropped while
        // the average is high, but the idle time keeps decaying it (250 packet times per
        // second at 1 Mbit/s: x 0.61) and a later one is admitted.
        let mut q = ered("limit = \"1000p\"\ngentle = false");
        let mut d = Drops::new();
        for i in 0..1000 {
            q.enqueue(ms(0), data(i, 1000), &mut d);
        }
        let high = q.avg();
        assert!(high > 15, "{high}");
        drain(&mut q, ms(0));
        let before = q.stats().enqueued;
        let mut admitted = None;
        for k in 0..20u64 {
            q.enqueue(ms(1000 * k), data(2000 + k as u32, 1000), &mut d);
            if q.stats().enqueued > before {
                admitted = Some(k);
                break;
            }
        }
        assert!(
            matches!(admitted, Some(k) if k >= 1),
            "{admitted:?}, avg {}",
            q.avg()
        );
        check(&q);
    }

    #[test]
    fn bad_parameters_are_named() {
        for (src, key) in [
            ("min_th = \"20p\"", "ered.max_th"),
            ("min_th = \"5KB\"", "ered.min_th"),
            ("max_p = 1.5", "ered.max_p"),
            ("marked_factor = 0.5", "ered.marked_factor"),
            ("max_th = \"60p\"", "ered.max_th"),
        ] {
            let cfg: EredConfig = toml::from_str(src).unwrap();
            let e = Ered::<HeaderPacket>::new(&cfg, 1, None).unwrap_err();
            assert_eq!(e.path, key, "{src}");
        }
    }
}
