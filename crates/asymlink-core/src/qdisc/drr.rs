//! Deficit round robin across flows or classes (Shreedhar & Varghese, 1995).
//!
//! # Principles
//!
//! Each active queue gets `quantum` bytes of credit per round; a queue sends while its
//! credit covers its head packet. With packets of one size (ACKs) and a quantum of one
//! packet it is plain round robin — the per-connection service the ACK-filtering paper
//! recommends. Queues are chosen by flow (a stable hash of the 5-tuple into `buckets`
//! queues, as SFQ/fq do, so memory is bounded whatever the number of flows) or by the
//! class a classifier assigned. When the shared limit is reached, the arriving packet is
//! dropped (`drop = "tail"`) or the longest queue loses its oldest packet
//! (`drop = "longest"`, longest-queue-drop).

use super::{Backlog, ConfigError, Dequeued, DropReason, Drops, Qdisc, QdiscStats, Stage, Verdict};
use crate::packet::Pkt;
use crate::qdisc::BuildCtx;
use crate::time::Instant;
use crate::units::{Bytes, Limit};
use serde::Deserialize;
use std::collections::VecDeque;

/// How packets are assigned to queues.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrrKey {
    /// By 5-tuple (hashed into `buckets`).
    #[default]
    Flow,
    /// By assigned class (unclassified packets share one queue).
    Class,
}

/// What to drop when the shared limit is reached.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DrrDrop {
    /// The arriving packet.
    #[default]
    Tail,
    /// The oldest packet of the longest queue.
    Longest,
}

/// DRR parameters.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DrrConfig {
    /// Credit per round (default 1514 bytes).
    #[serde(default = "default_quantum")]
    pub quantum: Bytes,
    /// Shared capacity of all queues.
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// Queue selection.
    #[serde(default)]
    pub by: DrrKey,
    /// Number of flow queues (for `by = "flow"`).
    #[serde(default = "default_buckets")]
    pub buckets: u32,
    /// Drop policy at the limit.
    #[serde(default)]
    pub drop: DrrDrop,
}

fn default_quantum() -> Bytes {
    Bytes(1514)
}
fn default_limit() -> Limit {
    Limit::Packets(1000)
}
fn default_buckets() -> u32 {
    1024
}

struct SubQueue<P> {
    q: VecDeque<P>,
    bytes: u64,
    deficit: i64,
    active: bool,
}

/// A DRR scheduler.
pub struct Drr<P> {
    cfg: DrrConfig,
    queues: Vec<SubQueue<P>>,
    active: VecDeque<u32>,
    stats: QdiscStats,
}

impl<P: Pkt + Send> Drr<P> {
    /// Build from configuration.
    pub fn new(cfg: &DrrConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        if cfg.quantum.0 == 0 {
            return Err(ConfigError::new("drr.quantum", "must be positive"));
        }
        let n = match cfg.by {
            DrrKey::Flow => {
                if cfg.buckets == 0 || cfg.buckets > 1 << 20 {
                    return Err(ConfigError::new("drr.buckets", "must be in 1..=1048576"));
                }
                cfg.buckets as usize
            }
            DrrKey::Class => ctx.classes.len() + 1,
        };
        Ok(Drr {
            cfg: *cfg,
            queues: (0..n)
                .map(|_| SubQueue {
                    q: VecDeque::new(),
                    bytes: 0,
                    deficit: 0,
                    active: false,
                })
                .collect(),
            active: VecDeque::new(),
            stats: QdiscStats::default(),
        })
    }

    fn queue_of(&self, p: &P) -> usize {
        match self.cfg.by {
            DrrKey::Flow => match p.headers() {
                Some(h) => (h.flow_key().stable_hash() % self.queues.len() as u64) as usize,
                None => 0,
            },
            DrrKey::Class => {
                let c = p.class();
                if c.is_some() && (c.0 as usize) < self.queues.len() - 1 {
                    c.0 as usize
                } else {
                    self.queues.len() - 1
                }
            }
        }
    }
}

impl<P: Pkt + Send> Qdisc<P> for Drr<P> {
    fn enqueue(&mut self, _now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let b = self.stats.backlog;
        if !self.cfg.limit.admits(b.packets, b.bytes, len) {
            match self.cfg.drop {
                DrrDrop::Tail => {
                    self.stats
                        .on_reject(Verdict::Dropped(DropReason::QueueFull));
                    drops.reject(pkt, DropReason::QueueFull);
                    return;
                }
                DrrDrop::Longest => {
                    let target = self.queue_of(&pkt);
                    let longest = self
                        .active
                        .iter()
                        .copied()
                        .max_by_key(|&i| (self.queues[i as usize].bytes, u32::MAX - i))
                        .map(|i| i as usize);
                    // The arriving packet's own queue counts as if it were already in it.
                    match longest {
                        Some(l)
                            if self.queues[l].bytes >= self.queues[target].bytes + len as u64 =>
                        {
                            let sq = &mut self.queues[l];
                            let old = sq.q.pop_front().expect("active queue is non-empty");
                            sq.bytes -= old.ip_len() as u64;
                            let v = Verdict::Dropped(DropReason::LongestQueue);
                            self.stats.on_remove(v, old.ip_len());
                            drops.push(old, v, Stage::Removed);
                            // an emptied queue stays in the active list until its turn
                        }
                        _ => {
                            self.stats
                                .on_reject(Verdict::Dropped(DropReason::LongestQueue));
                            drops.reject(pkt, DropReason::LongestQueue);
                            return;
                        }
                    }
                }
            }
        }
        let i = self.queue_of(&pkt);
        let sq = &mut self.queues[i];
        sq.q.push_back(pkt);
        sq.bytes += len as u64;
        if !sq.active {
            sq.active = true;
            sq.deficit = 0;
            self.active.push_back(i as u32);
        }
        self.stats.on_enqueue(len);
    }

    fn dequeue(&mut self, _now: Instant, _drops: &mut Drops<P>) -> Dequeued<P> {
        let quantum = self.cfg.quantum.0 as i64;
        // Each pass either sends, removes an empty queue, or adds a quantum; a head packet
        // larger than the quantum needs several rounds, all taken here.
        while let Some(&i) = self.active.front() {
            let sq = &mut self.queues[i as usize];
            let Some(head) = sq.q.front() else {
                sq.active = false;
                sq.deficit = 0;
                self.active.pop_front();
                continue;
            };
            let len = head.ip_len() as i64;
            if sq.deficit >= len {
                sq.deficit -= len;
                let p = sq.q.pop_front().expect("head exists");
                sq.bytes -= len as u64;
                if sq.q.is_empty() {
                    sq.active = false;
                    sq.deficit = 0;
                    self.active.pop_front();
                }
                self.stats.on_dequeue(len as u32);
                return Dequeued::Packet(p);
            }
            sq.deficit += quantum;
            self.active.rotate_left(1);
        }
        Dequeued::Empty
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn kind(&self) -> &'static str {
        "drr"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::testutil::*;

    fn drr(toml_src: &str) -> Drr<crate::packet::HeaderPacket> {
        let cfg: DrrConfig = toml::from_str(toml_src).unwrap();
        Drr::new(&cfg, &BuildCtx::with_classes(&[])).unwrap()
    }

    #[test]
    fn round_robin_between_flows() {
        let mut q = drr("quantum = \"40B\"");
        let mut d = Drops::new();
        // flow 0 has 3 ACKs queued before flow 1's two.
        for i in 0..3 {
            q.enqueue(ms(0), data_flow(i, 40, 0), &mut d);
        }
        for i in 10..12 {
            q.enqueue(ms(0), data_flow(i, 40, 1), &mut d);
        }
        let order: Vec<u32> = drain(&mut q, ms(1)).iter().map(tag).collect();
        assert_eq!(order, vec![0, 10, 1, 11, 2]);
        check(&q);
    }

    #[test]
    fn byte_fairness_with_unequal_sizes() {
        let mut q = drr("quantum = \"1500B\"");
        let mut d = Drops::new();
        for i in 0..4 {
            q.enqueue(ms(0), data_flow(i, 1500, 0), &mut d);
        }
        for i in 10..50 {
            q.enqueue(ms(0), data_flow(i, 150, 1), &mut d);
        }
        let out = drain(&mut q, ms(1));
        // In the first 2 rounds each flow sends 1500 bytes per round.
        let first: Vec<u32> = out.iter().take(22).map(tag).collect();
        assert_eq!(first.iter().filter(|&&t| t < 10).count(), 2, "{first:?}");
        check(&q);
    }

    #[test]
    fn longest_queue_drop() {
        let mut q = drr("quantum = \"40B\"\nlimit = \"3p\"\ndrop = \"longest\"");
        let mut d = Drops::new();
        for i in 0..3 {
            q.enqueue(ms(0), data_flow(i, 40, 0), &mut d);
        }
        q.enqueue(ms(0), data_flow(10, 40, 1), &mut d);
        assert_eq!(d.len(), 1);
        assert_eq!(tag(&d.since(0)[0].pkt), 0, "oldest of the longest queue");
        check(&q);
        let order: Vec<u32> = drain(&mut q, ms(1)).iter().map(tag).collect();
        assert_eq!(order, vec![1, 10, 2]);
    }
}
