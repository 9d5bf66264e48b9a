//! The ack class's queue of the ADSL middlebox: a short FIFO of pure ACKs that, when full,
//! either drops the arriving ACK (the paper's "ack FIFO limited to 5") or makes room by
//! removing the lowest-sequence ACK of a connection (the policy the paper planned).
//!
//! # Principles
//!
//! Brouer & Hansen (2004, §III-C) slowed the ack class to 190 kbit/s and limited its FIFO
//! to 5 packets: ~40 % of the ACKs were dropped, and the downstream recovered part of what
//! the slower class cost, "as the FIFO drop scheme results in dropping acks of higher
//! sequence numbers. We are currently working on implementing a better ack drop policy,
//! that can drop acks of the lowest sequence numbers on a per connection basis."
//!
//! * `drop = "tail"`: a full queue drops the arriving ACK ([`DropReason::QueueFull`]).
//! * `drop = "lowest_seq"`: a full queue first looks at the arriving ACK's connection: of
//!   its queued ACKs that the arriving one supersedes, the one with the lowest
//!   acknowledgment number is removed ([`FilterReason::AckLowestSeq`]) and the arriving
//!   ACK joins the tail. If that connection has none, the connection with the most queued
//!   ACKs loses its lowest-sequence ACK that its own newest queued ACK supersedes. Only
//!   when no ACK may be removed is the arriving one dropped (a drop like any other).
//!
//! Which ACKs may go is decided by the shared ACK safety rules of [`crate::ack`] (the same
//! as the ACK filter's): never a duplicate ACK or one that may be, never SYN/FIN/RST or
//! data, never an ECN transition, a window update, SACK or timestamp information the newer
//! ACK does not carry, and only from the run of a connection's newest ACKs after the last
//! one that must stay (the "suffix"), so a connection's ACKs stay in order.
//!
//! The duplicate test needs each connection's previous ACK: the queue keeps an
//! [`AckState`] per connection for the segments it sees, at most `max_connections` of
//! them; a new connection beyond that evicts the least recently seen one (a flood of new
//! flows cannot grow the table, nor lock later connections out of the policy). An evicted
//! connection that comes back starts a fresh history, whose first ACK counts as a
//! possible duplicate and is never removed — eviction costs filtering, never safety. In the five-class middlebox it sees the
//! pure ACKs only — a connection's data segments go to other classes — which is enough:
//! an ACK equal to the previous *data* segment's acknowledgment is judged against the
//! previous pure ACK, and is removed only in favour of a strictly newer cumulative ACK,
//! after which the sender has no duplicate count for it to contribute to.
//!
//! # Worked example
//!
//! Limit 5, one connection, ACKs 1..5 queued (each acknowledging two more segments). ACK 6
//! arrives: with `tail` it is dropped, and the sender next hears of ACK 1; with
//! `lowest_seq` ACK 1 is removed (6 supersedes it) and the queue holds 2..6.

use crate::ack::{removable_suffix, AckMeta, AckState};
use crate::packet::Pkt;
use crate::qdisc::{
    Backlog, ConfigError, Dequeued, DropReason, Drops, FilterReason, Qdisc, QdiscStats, Stage,
    Verdict,
};
use crate::time::Instant;
use crate::units::Limit;
use crate::wire::FlowKey;
use serde::Deserialize;
use std::collections::{BTreeMap, VecDeque};

/// What a full ack queue does.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckFifoDrop {
    /// Drop the arriving ACK.
    #[default]
    Tail,
    /// Remove a connection's lowest-sequence ACK that a newer one supersedes.
    LowestSeq,
}

/// Parameters of the ack class's queue.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckFifoConfig {
    /// Capacity in packets (`"5p"`) or bytes.
    pub limit: Limit,
    /// What a full queue does (default `tail`).
    #[serde(default)]
    pub drop: AckFifoDrop,
    /// Most connections whose ACK history is kept (default 1024).
    #[serde(default = "default_max_connections")]
    pub max_connections: u32,
}

fn default_max_connections() -> u32 {
    1024
}

struct Item<P> {
    pkt: P,
    key: Option<FlowKey>,
    meta: Option<AckMeta>,
}

/// The ack class's queue.
pub struct AckFifo<P> {
    cfg: AckFifoConfig,
    q: VecDeque<Item<P>>,
    /// Per connection: its ACK history and when it was last seen (a tick of `clock`).
    history: BTreeMap<FlowKey, (AckState, u64)>,
    /// The connections by last-seen tick, least recent first (for eviction).
    lru: BTreeMap<u64, FlowKey>,
    clock: u64,
    evicted: u64,
    stats: QdiscStats,
}

impl<P: Pkt> AckFifo<P> {
    /// Build from configuration.
    pub fn new(cfg: &AckFifoConfig) -> Result<Self, ConfigError> {
        if matches!(cfg.limit, Limit::Packets(0) | Limit::Bytes(0)) {
            return Err(ConfigError::new("ack_fifo.limit", "must be positive"));
        }
        if cfg.max_connections == 0 {
            return Err(ConfigError::new(
                "ack_fifo.max_connections",
                "must be positive",
            ));
        }
        Ok(AckFifo {
            cfg: *cfg,
            q: VecDeque::new(),
            history: BTreeMap::new(),
            lru: BTreeMap::new(),
            clock: 0,
            evicted: 0,
            stats: QdiscStats::default(),
        })
    }

    /// The metadata of an arriving segment, with its connection's history.
    fn observe(&mut self, p: &P) -> (Option<FlowKey>, Option<AckMeta>) {
        let Some(h) = p.headers() else {
            return (None, None);
        };
        h.tcp_repr()
            .map(|_| {
                let key = h.flow_key();
                self.clock += 1;
                let tick = self.clock;
                if let Some((_, seen)) = self.history.get(&key) {
                    self.lru.remove(seen);
                } else if self.history.len() >= self.cfg.max_connections as usize {
                    if let Some((_, old)) = self.lru.pop_first() {
                        self.history.remove(&old);
                        self.evicted += 1;
                    }
                }
                self.lru.insert(tick, key);
                let (st, seen) = self.history.entry(key).or_default();
                *seen = tick;
                (Some(key), st.observe(h))
            })
            .unwrap_or((None, None))
    }

    /// Connections whose ACK history is kept.
    pub fn connections(&self) -> usize {
        self.history.len()
    }

    /// Histories evicted to make room for new connections.
    pub fn evicted(&self) -> u64 {
        self.evicted
    }

    /// Index of the lowest-sequence ACK of connection `key` that `newer` supersedes, among
    /// the connection's queued ACKs before position `before`: only the removable suffix
    /// (the newest ACKs after the last one that must stay) is eligible.
    fn lowest_removable(&self, key: FlowKey, newer: &AckMeta, before: usize) -> Option<usize> {
        let idx: Vec<usize> = (0..before)
            .rev()
            .filter(|&i| self.q[i].key == Some(key))
            .collect(); // newest first
        let (n, _) = removable_suffix(idx.iter().map(|&i| self.q[i].meta.as_ref()), newer);
        // The lowest acknowledgment number is the farthest behind the superseding ACK
        // (modular distance); the older one on ties.
        idx[..n].iter().copied().max_by_key(|&i| {
            let a = self.q[i]
                .meta
                .as_ref()
                .expect("removable ACKs have metadata")
                .ack;
            (newer.ack.diff(a), usize::MAX - i)
        })
    }

    /// The ACK to remove to make room for an arrival of connection `key` with `meta`.
    fn victim(&self, key: Option<FlowKey>, meta: Option<&AckMeta>) -> Option<usize> {
        if let (Some(k), Some(m)) = (key, meta) {
            if let Some(i) = self.lowest_removable(k, m, self.q.len()) {
                return Some(i);
            }
        }
        // Another connection: the one with the most queued ACKs, in favour of its own
        // newest queued ACK.
        let mut counts: BTreeMap<FlowKey, (usize, usize)> = BTreeMap::new(); // (count, newest)
        for (i, it) in self.q.iter().enumerate() {
            if let Some(k) = it.key {
                let e = counts.entry(k).or_insert((0, i));
                e.0 += 1;
                e.1 = i;
            }
        }
        let mut order: Vec<(FlowKey, usize, usize)> = counts
            .into_iter()
            .map(|(k, (n, newest))| (k, n, newest))
            .collect();
        order.sort_by_key(|&(_, n, newest)| (usize::MAX - n, newest));
        for (k, n, newest) in order {
            if n < 2 || Some(k) == key {
                continue;
            }
            let Some(m) = self.q[newest].meta.as_ref() else {
                continue;
            };
            if let Some(i) = self.lowest_removable(k, m, newest) {
                return Some(i);
            }
        }
        None
    }
}

impl<P: Pkt + Send> Qdisc<P> for AckFifo<P> {
    fn enqueue(&mut self, _now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let (key, meta) = self.observe(&pkt);
        let admits = |s: &QdiscStats| {
            self.cfg
                .limit
                .admits(s.backlog.packets, s.backlog.bytes, len)
        };
        if !admits(&self.stats) {
            if let Limit::Bytes(max) = self.cfg.limit {
                if len as u64 > max {
                    self.stats.on_reject(Verdict::Dropped(DropReason::TooBig));
                    drops.reject(pkt, DropReason::TooBig);
                    return;
                }
            }
            let victim = match self.cfg.drop {
                AckFifoDrop::Tail => None,
                AckFifoDrop::LowestSeq => self.victim(key, meta.as_ref()),
            };
            let Some(i) = victim else {
                self.stats
                    .on_reject(Verdict::Dropped(DropReason::QueueFull));
                drops.reject(pkt, DropReason::QueueFull);
                return;
            };
            let old = self.q.remove(i).expect("victim index is queued");
            let v = Verdict::Filtered(FilterReason::AckLowestSeq);
            self.stats.on_remove(v, old.pkt.ip_len());
            drops.push(old.pkt, v, Stage::Removed);
            if !admits(&self.stats) {
                // A byte limit with a larger arrival: still no room.
                self.stats
                    .on_reject(Verdict::Dropped(DropReason::QueueFull));
                drops.reject(pkt, DropReason::QueueFull);
                return;
            }
        }
        self.q.push_back(Item { pkt, key, meta });
        self.stats.on_enqueue(len);
        debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
    }

    fn dequeue(&mut self, _now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        match self.q.pop_front() {
            Some(it) => {
                self.stats.on_dequeue(it.pkt.ip_len());
                Dequeued::Packet(it.pkt)
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

    fn flow_entries(&self) -> u64 {
        self.history.len() as u64
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("connections", self.history.len() as u64),
            ("evicted", self.evicted),
        ]
    }

    fn kind(&self) -> &'static str {
        "ack_fifo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::{check, ms};
    use crate::wire::{Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr};
    use core::net::{IpAddr, Ipv4Addr};

    /// A pure ACK of connection `conn` acknowledging `ack`.
    fn ack(conn: u16, ack: u32) -> HeaderPacket {
        HeaderPacket::new(Headers::tcp(
            IpRepr::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
                IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
            ),
            TcpRepr {
                src_port: 40000 + conn,
                dst_port: 80,
                seq: SeqNumber(1),
                ack: SeqNumber(ack),
                flags: TcpFlags::ACK,
                window: 1000,
                urgent: 0,
                opts: TcpOptions::default(),
            },
            0,
        ))
    }

    fn q(drop: &str) -> AckFifo<HeaderPacket> {
        let cfg: AckFifoConfig =
            toml::from_str(&format!("limit = \"3p\"\ndrop = \"{drop}\"")).unwrap();
        AckFifo::new(&cfg).unwrap()
    }

    fn acks_in(q: &mut AckFifo<HeaderPacket>) -> Vec<(u16, u32)> {
        let mut d = Drops::new();
        let mut out = Vec::new();
        while let Dequeued::Packet(p) = q.dequeue(ms(1), &mut d) {
            let t = p.hdr.tcp_repr().unwrap();
            out.push((t.src_port - 40000, t.ack.0));
        }
        out
    }

    #[test]
    fn tail_drop_loses_the_newest_ack() {
        let mut f = q("tail");
        let mut d = Drops::new();
        for a in [1000, 2000, 3000, 4000] {
            f.enqueue(ms(0), ack(0, a), &mut d);
            check(&f);
        }
        assert_eq!(d.len(), 1);
        assert_eq!(
            d.since(0)[0].verdict,
            Verdict::Dropped(DropReason::QueueFull)
        );
        assert_eq!(acks_in(&mut f), vec![(0, 1000), (0, 2000), (0, 3000)]);
        check(&f);
    }

    #[test]
    fn lowest_seq_removes_the_oldest_superseded_ack() {
        let mut f = q("lowest_seq");
        let mut d = Drops::new();
        for a in [1000, 2000, 3000, 4000] {
            f.enqueue(ms(0), ack(0, a), &mut d);
            check(&f);
        }
        // The first ACK of a connection might be a duplicate (no history): it stays; the
        // lowest removable one is 2000.
        assert_eq!(d.len(), 1);
        assert_eq!(
            d.since(0)[0].verdict,
            Verdict::Filtered(FilterReason::AckLowestSeq)
        );
        assert_eq!(d.since(0)[0].stage, Stage::Removed);
        f.enqueue(ms(0), ack(0, 5000), &mut d); // removes 3000
        assert_eq!(acks_in(&mut f), vec![(0, 1000), (0, 4000), (0, 5000)]);
        assert_eq!(f.stats().filtered_for(FilterReason::AckLowestSeq), 2);
        check(&f);
    }

    #[test]
    fn duplicate_acks_are_never_removed() {
        let mut f = q("lowest_seq");
        let mut d = Drops::new();
        for a in [1000, 2000, 2000] {
            f.enqueue(ms(0), ack(0, a), &mut d);
        }
        // The newest queued ACK (a duplicate) must stay, so nothing older may go either:
        // the arrival is dropped.
        f.enqueue(ms(0), ack(0, 3000), &mut d);
        assert_eq!(
            d.since(0)[0].verdict,
            Verdict::Dropped(DropReason::QueueFull)
        );
        assert_eq!(acks_in(&mut f), vec![(0, 1000), (0, 2000), (0, 2000)]);
        check(&f);
    }

    #[test]
    fn another_connection_makes_room_from_its_own_acks() {
        let mut f = q("lowest_seq");
        let mut d = Drops::new();
        for a in [1000, 2000, 3000] {
            f.enqueue(ms(0), ack(0, a), &mut d);
        }
        // Connection 1 has nothing queued: connection 0 loses 2000, which its own newest
        // queued ACK (3000) supersedes.
        f.enqueue(ms(0), ack(1, 500), &mut d);
        assert_eq!(
            d.since(0)[0].verdict,
            Verdict::Filtered(FilterReason::AckLowestSeq)
        );
        assert_eq!(acks_in(&mut f), vec![(0, 1000), (0, 3000), (1, 500)]);
        check(&f);
    }

    #[test]
    fn a_flood_of_connections_evicts_the_least_recently_seen() {
        let cfg: AckFifoConfig =
            toml::from_str("limit = \"3p\"\ndrop = \"lowest_seq\"\nmax_connections = 4").unwrap();
        let mut f: AckFifo<HeaderPacket> = AckFifo::new(&cfg).unwrap();
        let mut d = Drops::new();
        // Connection 0 keeps talking while 1000 others pass once each.
        for c in 1..=1000u16 {
            f.enqueue(ms(0), ack(0, 1000 * c as u32), &mut d);
            f.enqueue(ms(0), ack(c, 1), &mut d);
            acks_in(&mut f);
            assert!(f.connections() <= 4);
            assert_eq!(f.flow_entries(), f.connections() as u64);
        }
        assert_eq!(f.evicted(), 1000 - 3);
        // Connection 0 kept its history throughout: its first ACK here is not "the first
        // of a connection" (which would have to stay), so when the queue is full it is
        // the lowest removable one.
        for a in [2_000_000, 2_001_000, 2_002_000, 2_003_000] {
            f.enqueue(ms(1), ack(0, a), &mut d);
        }
        assert_eq!(
            acks_in(&mut f),
            vec![(0, 2_001_000), (0, 2_002_000), (0, 2_003_000)]
        );
        check(&f);
    }

    #[test]
    fn bad_config() {
        for (src, needle) in [
            ("limit = \"0p\"", "positive"),
            ("limit = \"5p\"\ndrop = \"random\"", "random"),
        ] {
            let e = match toml::from_str::<AckFifoConfig>(src) {
                Err(e) => e.to_string(),
                Ok(c) => AckFifo::<HeaderPacket>::new(&c).err().unwrap().to_string(),
            };
            assert!(e.contains(needle), "{e}");
        }
    }
}
