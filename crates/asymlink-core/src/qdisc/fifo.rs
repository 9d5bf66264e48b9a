//! FIFO with a packet or byte limit, dropping at the tail or at the head.
//!
//! # Principles
//!
//! The plain buffer of a router port or a modem. With `drop = "tail"` an arriving packet
//! that does not fit is dropped (drop-tail, the common case); with `drop = "head"` the
//! oldest packets are dropped until it fits (lower delay of the signal to the sender, as
//! in Linux `pfifo_head_drop`). A packet larger than a byte limit on its own is dropped as
//! [`DropReason::TooBig`].

use super::{Backlog, Dequeued, DropReason, Drops, Qdisc, QdiscStats, Stage, Verdict};
use crate::packet::Pkt;
use crate::time::Instant;
use crate::units::Limit;
use serde::Deserialize;
use std::collections::VecDeque;

/// Which end of a full FIFO loses a packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DropSide {
    /// Drop the arriving packet.
    #[default]
    Tail,
    /// Drop the oldest queued packets.
    Head,
}

/// FIFO parameters.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FifoConfig {
    /// Capacity in packets (`"100p"`) or bytes (`"64KB"`).
    pub limit: Limit,
    /// Which end loses a packet when full.
    #[serde(default)]
    pub drop: DropSide,
}

impl Default for FifoConfig {
    fn default() -> Self {
        FifoConfig {
            limit: Limit::Packets(1000),
            drop: DropSide::Tail,
        }
    }
}

/// Packets of room a FIFO keeps however empty it gets.
const KEEP: usize = 16;

/// A FIFO queue. Its memory follows its backlog: when it drains, and fewer packets were
/// queued in the busy period that ends than a quarter of its allocation, it keeps room
/// for twice that many (at least [`KEEP`]), so a burst does not keep its memory for the
/// rest of the run. A queue whose busy periods stay alike keeps its allocation (what it
/// keeps is twice what one needed), so there is no shrinking and growing back and forth.
#[derive(Debug)]
pub struct Fifo<P> {
    cfg: FifoConfig,
    q: VecDeque<P>,
    stats: QdiscStats,
    /// `stats.enqueued` when the queue last drained with more than [`KEEP`] packets of
    /// room: packets queued since then bound the backlog of the busy period from above.
    drained_mark: u64,
}

impl<P: Pkt> Fifo<P> {
    /// A FIFO with the given parameters.
    pub fn new(cfg: FifoConfig) -> Self {
        Fifo {
            cfg,
            q: VecDeque::new(),
            stats: QdiscStats::default(),
            drained_mark: 0,
        }
    }

    /// The parameters.
    pub fn config(&self) -> &FifoConfig {
        &self.cfg
    }

    /// Queued packets, oldest first.
    pub fn iter(&self) -> impl Iterator<Item = &P> {
        self.q.iter()
    }

    /// Packets of room allocated (at least the backlog).
    pub fn capacity(&self) -> usize {
        self.q.capacity()
    }

    /// The queue is about to drain with more than [`KEEP`] packets of room: give back
    /// what its last busy period did not need. Out of line (rare), so that `dequeue`
    /// stays small.
    #[cold]
    #[inline(never)]
    fn drained(&mut self) {
        let busy = self.stats.enqueued - self.drained_mark;
        self.drained_mark = self.stats.enqueued;
        if busy.saturating_mul(4) < self.q.capacity() as u64 {
            self.q.shrink_to((busy as usize * 2).max(KEEP));
        }
    }
}

impl<P: Pkt + Send> Qdisc<P> for Fifo<P> {
    fn has_timers(&self) -> bool {
        false
    }
    fn observes_peer(&self) -> bool {
        false
    }
    fn reads_headers(&self) -> bool {
        false
    }
    fn enqueue(&mut self, _now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let b = self.stats.backlog;
        if self.cfg.limit.admits(b.packets, b.bytes, len) {
            self.q.push_back(pkt);
            self.stats.on_enqueue(len);
            return;
        }
        match self.cfg.drop {
            DropSide::Tail => {
                self.stats
                    .on_reject(Verdict::Dropped(DropReason::QueueFull));
                drops.reject(pkt, DropReason::QueueFull);
            }
            DropSide::Head => {
                if let Limit::Bytes(max) = self.cfg.limit {
                    if len as u64 > max {
                        self.stats.on_reject(Verdict::Dropped(DropReason::TooBig));
                        drops.reject(pkt, DropReason::TooBig);
                        return;
                    }
                }
                loop {
                    let b = self.stats.backlog;
                    if self.cfg.limit.admits(b.packets, b.bytes, len) {
                        break;
                    }
                    let Some(old) = self.q.pop_front() else { break };
                    let v = Verdict::Dropped(DropReason::HeadDrop);
                    self.stats.on_remove(v, old.ip_len());
                    drops.push(old, v, Stage::Removed);
                }
                self.q.push_back(pkt);
                self.stats.on_enqueue(len);
            }
        }
        debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
    }

    fn dequeue(&mut self, _now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        if self.q.len() == 1 && self.q.capacity() > KEEP {
            self.drained();
        }
        match self.q.pop_front() {
            Some(p) => {
                self.stats.on_dequeue(p.ip_len());
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

    fn kind(&self) -> &'static str {
        "fifo"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::testutil::*;

    #[test]
    fn memory_follows_the_backlog() {
        let mut q = Fifo::new(FifoConfig {
            limit: Limit::Packets(100_000),
            drop: DropSide::Tail,
        });
        let mut d = Drops::new();
        let mut burst = |q: &mut Fifo<crate::packet::HeaderPacket>, n: u32| {
            for i in 0..n {
                q.enqueue(ms(0), data(i, 100), &mut d);
            }
            for i in 0..n {
                assert_eq!(tag(&q.dequeue(ms(1), &mut d).packet().unwrap()), i);
            }
            assert_eq!(q.backlog().packets, 0);
        };
        // A burst keeps its room until a later busy period shows it is not needed.
        burst(&mut q, 10_000);
        let peak = q.capacity();
        assert!(peak >= 10_000);
        burst(&mut q, 10_000);
        assert_eq!(q.capacity(), peak);
        burst(&mut q, 100);
        assert!(q.capacity() < 1_000, "{} of {peak}", q.capacity());
        assert!(q.capacity() >= 200);
        burst(&mut q, 10);
        assert!(q.capacity() <= (2 * 10).max(KEEP), "{}", q.capacity());
        // Busy periods alike: the allocation stays as it is.
        burst(&mut q, 60);
        let cap = q.capacity();
        for _ in 0..50 {
            burst(&mut q, 60);
            assert_eq!(q.capacity(), cap);
        }
        // A steady backlog never drains: nothing changes either.
        for i in 0..200 {
            q.enqueue(ms(2), data(i, 100), &mut d);
        }
        let cap = q.capacity();
        for i in 200..20_000 {
            q.enqueue(ms(2), data(i, 100), &mut d);
            q.dequeue(ms(2), &mut d);
            assert_eq!(q.capacity(), cap);
        }
    }

    #[test]
    fn tail_drop_by_packets() {
        let mut q = Fifo::new(FifoConfig {
            limit: Limit::Packets(2),
            drop: DropSide::Tail,
        });
        let mut d = Drops::new();
        for i in 0..3 {
            q.enqueue(ms(0), data(i, 100), &mut d);
        }
        assert_eq!(d.len(), 1);
        assert_eq!(tag(&d.since(0)[0].pkt), 2);
        assert_eq!(q.stats().dropped_for(DropReason::QueueFull), 1);
        assert_eq!(tag(&q.dequeue(ms(1), &mut d).packet().unwrap()), 0);
        check(&q);
    }

    #[test]
    fn head_drop_by_bytes() {
        let mut q = Fifo::new(FifoConfig {
            limit: Limit::Bytes(1000),
            drop: DropSide::Head,
        });
        let mut d = Drops::new();
        q.enqueue(ms(0), data(0, 400), &mut d);
        q.enqueue(ms(0), data(1, 400), &mut d);
        q.enqueue(ms(0), data(2, 400), &mut d); // evicts 0
        assert_eq!(tag(&d.since(0)[0].pkt), 0);
        assert_eq!(d.since(0)[0].stage, Stage::Removed);
        assert_eq!(q.backlog().bytes, 800);
        q.enqueue(ms(0), data(3, 2000), &mut d); // too big on its own
        assert_eq!(d.since(1)[0].verdict, Verdict::Dropped(DropReason::TooBig));
        check(&q);
        let order: Vec<u32> = drain(&mut q, ms(1)).iter().map(tag).collect();
        assert_eq!(order, vec![1, 2]);
        check(&q);
    }
}
