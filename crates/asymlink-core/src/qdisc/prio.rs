//! Strict priority over bands, each band its own discipline.
//!
//! # Principles
//!
//! Band 0 is served whenever it has a packet that may leave; lower bands only when every
//! higher band is empty or waiting (a shaped higher band does not block a lower one: the
//! scheduler is work-conserving). Packets choose a band by the class a classifier gave
//! them; unclassified packets and classes not listed go to the default band. Starvation of
//! low bands is the intended behaviour ("ACK priority alone starves interactive traffic",
//! as the ADSL paper observes) — use HTB when bands need guarantees.

use super::{
    Backlog, ConfigError, Dequeued, Drops, PeerObservation, Qdisc, QdiscConfig, QdiscStats,
};
use crate::packet::{ClassId, Pkt};
use crate::qdisc::BuildCtx;
use crate::time::{earliest, Instant};
use serde::Deserialize;

/// One band.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrioBand {
    /// Classes (by name) that go to this band.
    #[serde(default)]
    pub classes: Vec<String>,
    /// The band's discipline (default: a 1000-packet FIFO).
    #[serde(default)]
    pub queue: Option<Box<QdiscConfig>>,
}

/// Priority scheduler parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrioConfig {
    /// Bands, highest priority first.
    pub bands: Vec<PrioBand>,
    /// Band for unclassified packets and unlisted classes (default: the last band).
    #[serde(default)]
    pub default: Option<usize>,
}

/// A strict-priority scheduler.
pub struct Prio<P> {
    bands: Vec<Box<dyn Qdisc<P>>>,
    names: Vec<String>,
    band_of_class: Vec<u8>,
    default: usize,
    stats: QdiscStats,
}

impl<P: Pkt + Send + 'static> Prio<P> {
    /// Build from configuration; class names are resolved through `ctx`.
    pub fn new(cfg: &PrioConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        if cfg.bands.is_empty() || cfg.bands.len() > 64 {
            return Err(ConfigError::new(
                "prio.bands",
                "needs between 1 and 64 bands",
            ));
        }
        let default = cfg.default.unwrap_or(cfg.bands.len() - 1);
        if default >= cfg.bands.len() {
            return Err(ConfigError::new(
                "prio.default",
                format!("band {default} does not exist ({} bands)", cfg.bands.len()),
            ));
        }
        let mut band_of_class = vec![default as u8; ctx.classes.len()];
        let mut bands = Vec::new();
        let mut names = Vec::new();
        for (i, b) in cfg.bands.iter().enumerate() {
            for c in &b.classes {
                let id = ctx.class_id(c, "prio.bands.classes")?;
                band_of_class[id.0 as usize] = i as u8;
            }
            let q = match &b.queue {
                Some(q) => q.build(ctx)?,
                None => QdiscConfig::default().build(ctx)?,
            };
            bands.push(q);
            names.push(format!("band{i}"));
        }
        Ok(Prio {
            bands,
            names,
            band_of_class,
            default,
            stats: QdiscStats::default(),
        })
    }

    fn band(&self, c: ClassId) -> usize {
        self.band_of_class
            .get(c.0 as usize)
            .map(|&b| b as usize)
            .unwrap_or(self.default)
    }
}

impl<P: Pkt + Send + 'static> Qdisc<P> for Prio<P> {
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let b = self.band(pkt.class());
        let mark = drops.len();
        self.bands[b].enqueue(now, pkt, drops);
        self.stats.absorb(drops, mark, len);
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        let mut wait: Option<Instant> = None;
        for band in self.bands.iter_mut() {
            let mark = drops.len();
            let r = band.dequeue(now, drops);
            for d in drops.since(mark) {
                self.stats.on_remove(d.verdict, d.pkt.ip_len());
            }
            match r {
                Dequeued::Packet(p) => {
                    self.stats.on_dequeue(p.ip_len());
                    return Dequeued::Packet(p);
                }
                Dequeued::NotBefore(t) => wait = earliest(wait, Some(t)),
                Dequeued::Empty => {}
            }
        }
        match wait {
            Some(t) => Dequeued::NotBefore(t),
            None => Dequeued::Empty,
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        self.bands
            .iter()
            .fold(None, |a, b| earliest(a, b.poll_at()))
    }

    fn handle_timeout(&mut self, now: Instant, drops: &mut Drops<P>) {
        for band in self.bands.iter_mut() {
            let mark = drops.len();
            band.handle_timeout(now, drops);
            for d in drops.since(mark) {
                self.stats.on_remove(d.verdict, d.pkt.ip_len());
            }
        }
    }

    fn handle_observation(&mut self, now: Instant, obs: &PeerObservation) {
        for band in self.bands.iter_mut() {
            band.handle_observation(now, obs);
        }
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn child_stats(&self) -> Vec<(String, QdiscStats)> {
        self.names
            .iter()
            .zip(&self.bands)
            .map(|(n, b)| (n.clone(), b.stats().clone()))
            .collect()
    }

    fn wants_idle_dequeue(&self) -> bool {
        self.bands.iter().any(|b| b.wants_idle_dequeue())
    }

    fn flow_entries(&self) -> u64 {
        self.bands.iter().map(|b| b.flow_entries()).sum()
    }

    fn kind(&self) -> &'static str {
        "prio"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::testutil::*;

    #[test]
    fn high_band_first_and_default() {
        let ctx = BuildCtx::with_classes(&["ack", "bulk"]);
        let cfg: PrioConfig =
            toml::from_str("bands = [{ classes = [\"ack\"] }, { classes = [] }]").unwrap();
        let mut q: Prio<_> = Prio::new(&cfg, &ctx).unwrap();
        let mut d = Drops::new();
        q.enqueue(ms(0), classed(1, 1500, 1), &mut d); // bulk -> default band 1
        q.enqueue(ms(0), data(2, 1500), &mut d); // unclassified -> band 1
        q.enqueue(ms(0), classed(3, 40, 0), &mut d); // ack -> band 0
        let order: Vec<u32> = drain(&mut q, ms(1)).iter().map(tag).collect();
        assert_eq!(order, vec![3, 1, 2]);
        check(&q);
    }

    #[test]
    fn unknown_class_is_an_error() {
        let ctx = BuildCtx::with_classes(&["ack"]);
        let cfg: PrioConfig = toml::from_str("bands = [{ classes = [\"akc\"] }]").unwrap();
        let e = Prio::<crate::packet::HeaderPacket>::new(&cfg, &ctx)
            .err()
            .unwrap();
        assert!(e.to_string().contains("akc"), "{e}");
    }
}
