//! Token bucket filter: a FIFO released at `rate` with bursts of up to `burst` bytes.
//!
//! # Principles
//!
//! Tokens are kept as nanoseconds of transmission credit at `rate` (as Linux `sch_tbf`
//! does), so all arithmetic is integer: a packet costs `rate.tx_nanos(wire_len)`, where
//! `wire_len` comes from the configured [`LinkLayer`] (set `linklayer` to charge ATM cells
//! instead of IP bytes). The bucket holds at most the credit for `burst` bytes. When the
//! head packet's cost exceeds the credit, `dequeue` answers "not before" the instant the
//! credit will suffice. A packet that could never be sent (wire size above `burst`) is
//! dropped as [`DropReason::TooBig`] on arrival instead of blocking the queue forever.

use super::{Backlog, ConfigError, Dequeued, DropReason, Drops, Qdisc, QdiscStats, Verdict};
use crate::overhead::{LinkLayer, LinkLayerConfig};
use crate::packet::Pkt;
use crate::time::{dur_ns, Instant};
use crate::units::{Bytes, Limit, Rate};
use serde::Deserialize;
use std::collections::VecDeque;

/// TBF parameters.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TbfConfig {
    /// Long-term rate.
    pub rate: Rate,
    /// Bucket depth (default: 10 ms at `rate`, at least 3000 bytes).
    #[serde(default)]
    pub burst: Option<Bytes>,
    /// Queue capacity.
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// How packets are charged.
    #[serde(default)]
    pub linklayer: LinkLayerConfig,
}

fn default_limit() -> Limit {
    Limit::Packets(1000)
}

/// A token bucket filter.
#[derive(Debug)]
pub struct Tbf<P> {
    rate: Rate,
    burst_ns: u64,
    burst_bytes: u64,
    limit: Limit,
    ll: LinkLayer,
    tokens_ns: u64,
    last: Instant,
    q: VecDeque<P>,
    stats: QdiscStats,
}

impl<P: Pkt> Tbf<P> {
    /// Build from configuration.
    pub fn new(cfg: &TbfConfig) -> Result<Self, ConfigError> {
        if cfg.rate.0 == 0 {
            return Err(ConfigError::new("tbf.rate", "must be positive"));
        }
        let burst = cfg.burst.map(|b| b.0).unwrap_or_else(|| {
            cfg.rate
                .bytes_in(crate::time::Duration::from_millis(10))
                .max(3000)
        });
        let burst_ns = cfg.rate.tx_nanos(burst);
        Ok(Tbf {
            rate: cfg.rate,
            burst_ns,
            burst_bytes: burst,
            limit: cfg.limit,
            ll: cfg.linklayer.build(),
            tokens_ns: burst_ns,
            last: Instant::ZERO,
            q: VecDeque::new(),
            stats: QdiscStats::default(),
        })
    }

    fn refill(&mut self, now: Instant) {
        if now > self.last {
            let add = dur_ns(now - self.last);
            self.tokens_ns = self.tokens_ns.saturating_add(add).min(self.burst_ns);
            self.last = now;
        }
    }

    /// The configured rate.
    pub fn rate(&self) -> Rate {
        self.rate
    }
}

impl<P: Pkt + Send> Qdisc<P> for Tbf<P> {
    fn observes_peer(&self) -> bool {
        false
    }
    fn reads_headers(&self) -> bool {
        false
    }
    fn enqueue(&mut self, _now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        if self.ll.wire_len(len) as u64 > self.burst_bytes {
            self.stats.on_reject(Verdict::Dropped(DropReason::TooBig));
            drops.reject(pkt, DropReason::TooBig);
            return;
        }
        let b = self.stats.backlog;
        if !self.limit.admits(b.packets, b.bytes, len) {
            self.stats
                .on_reject(Verdict::Dropped(DropReason::QueueFull));
            drops.reject(pkt, DropReason::QueueFull);
            return;
        }
        self.q.push_back(pkt);
        self.stats.on_enqueue(len);
    }

    fn dequeue(&mut self, now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        self.refill(now);
        let Some(head) = self.q.front() else {
            return Dequeued::Empty;
        };
        let len = head.ip_len();
        let cost = self.rate.tx_nanos(self.ll.wire_len(len) as u64);
        if self.tokens_ns >= cost {
            self.tokens_ns -= cost;
            let p = self.q.pop_front().expect("head exists");
            self.stats.on_dequeue(len);
            Dequeued::Packet(p)
        } else {
            Dequeued::NotBefore(Instant(self.last.0 + (cost - self.tokens_ns)))
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        None
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn kind(&self) -> &'static str {
        "tbf"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::testutil::*;

    #[test]
    fn releases_at_rate_after_burst() {
        // 1 Mbit/s, burst 3000 B: two 1500 B packets go at once, then one per 12 ms.
        let cfg: TbfConfig = toml::from_str("rate = \"1Mbit\"\nburst = \"3000B\"").unwrap();
        let mut q = Tbf::new(&cfg).unwrap();
        let mut d = Drops::new();
        for i in 0..4 {
            q.enqueue(ms(0), data(i, 1500), &mut d);
        }
        assert_eq!(drain(&mut q, ms(0)).len(), 2);
        assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(12)));
        assert_eq!(q.dequeue(ms(11), &mut d), Dequeued::NotBefore(ms(12)));
        assert!(matches!(q.dequeue(ms(12), &mut d), Dequeued::Packet(_)));
        assert_eq!(q.dequeue(ms(12), &mut d), Dequeued::NotBefore(ms(24)));
        check(&q);
    }

    #[test]
    fn drain_takes_everything_in_service_order() {
        // Two packets within the burst, three waiting for tokens: a drain takes all five,
        // in order, and leaves the counters balanced.
        let cfg: TbfConfig = toml::from_str("rate = \"1Mbit\"\nburst = \"3000B\"").unwrap();
        let mut q = Tbf::new(&cfg).unwrap();
        let mut d = Drops::new();
        for i in 0..5 {
            q.enqueue(ms(0), data(i, 1500), &mut d);
        }
        let mut out = Vec::new();
        assert_eq!(q.drain(&mut out), 0);
        assert_eq!(out.iter().map(tag).collect::<Vec<_>>(), [0, 1, 2, 3, 4]);
        assert_eq!(q.backlog(), Backlog::default());
        assert_eq!(q.stats().dequeued, 5);
        check(&q);
    }

    #[test]
    fn charges_atm_cells() {
        // 40-byte ACKs over LLC/SNAP cost 106 wire bytes: at 848 kbit/s, 1 ms each.
        let cfg: TbfConfig = toml::from_str(
            "rate = \"848kbit\"\nburst = \"106B\"\nlinklayer = { encap = \"llc_snap_routed\" }",
        )
        .unwrap();
        let mut q = Tbf::new(&cfg).unwrap();
        let mut d = Drops::new();
        for i in 0..3 {
            q.enqueue(ms(0), data(i, 40), &mut d);
        }
        assert!(matches!(q.dequeue(ms(0), &mut d), Dequeued::Packet(_)));
        assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(1)));
        q.enqueue(ms(0), data(9, 1500), &mut d);
        assert_eq!(d.since(0)[0].verdict, Verdict::Dropped(DropReason::TooBig));
        check(&q);
    }
}
