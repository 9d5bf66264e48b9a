//! The configuration vocabulary of disciplines, shared by the simulator's scenario files
//! and the live box's config: `{ kind = "fifo", limit = "100p" }` and so on.

use super::cobalt::CobaltVars;
use super::codel::CodelVars;
use super::AqmKind;
use super::{
    AckFifo, AckFifoConfig, AckFilter, AckFilterConfig, AckShaper, AckShaperConfig, Aggregate,
    AggregateConfig, Codel, CodelConfig, Drr, DrrConfig, Ered, EredConfig, Fifo, FifoConfig,
    FqCodel, FqCodelConfig, Hfsc, HfscConfig, HostFqCodel, HostFqCodelConfig, Htb, HtbConfig, Prio,
    PrioConfig, Qdisc, Tbf, TbfConfig,
};
use crate::config::ConfigError;
use crate::packet::{ClassId, Pkt};
use crate::units::{Limit, Rate};
use serde::Deserialize;

pub use super::fifo::DropSide;

/// A discipline and its parameters, tagged by `kind`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum QdiscConfig {
    /// [`Fifo`].
    Fifo(FifoConfig),
    /// [`Prio`].
    Prio(PrioConfig),
    /// [`Drr`].
    Drr(DrrConfig),
    /// [`Tbf`].
    Tbf(TbfConfig),
    /// [`AckFilter`].
    AckFilter(AckFilterConfig),
    /// [`Htb`].
    Htb(HtbConfig),
    /// [`Hfsc`].
    Hfsc(HfscConfig),
    /// [`AckFifo`]: the ack class's queue of the ADSL middlebox.
    AckFifo(AckFifoConfig),
    /// [`AckShaper`] (the reverse direction of a middlebox).
    AckShaper(AckShaperConfig),
    /// [`Ered`]: RED with a lower drop probability for marked packets.
    Ered(EredConfig),
    /// [`Aggregate`]: aggregate rate control with per-connection queues.
    Aggregate(AggregateConfig),
    /// [`Codel`]: controlled-delay AQM (RFC 8289).
    Codel(CodelConfig),
    /// `FqCodel`: flow queueing (RFC 8290) with CoDel, or COBALT (`aqm`), per queue.
    FqCodel(FqCodelConfig),
    /// `HostFqCodel`: fair between hosts, then between each host's flows, CoDel (or
    /// COBALT) per flow.
    HostFqCodel(HostFqCodelConfig),
}

impl Default for QdiscConfig {
    fn default() -> Self {
        QdiscConfig::Fifo(FifoConfig::default())
    }
}

/// What building a discipline may need from its surroundings.
#[derive(Clone, Debug, Default)]
pub struct BuildCtx {
    /// Class names; a class's index is its [`ClassId`].
    pub classes: Vec<String>,
    /// Seed for disciplines that draw random numbers (RED).
    pub seed: u64,
    /// Rate of the link the discipline feeds, if known.
    pub link_rate: Option<Rate>,
}

impl BuildCtx {
    /// A context with these class names and no link information.
    pub fn with_classes(names: &[&str]) -> BuildCtx {
        BuildCtx {
            classes: names.iter().map(|s| s.to_string()).collect(),
            ..BuildCtx::default()
        }
    }
    /// Resolve a class name; the error names `key`.
    pub fn class_id(&self, name: &str, key: &str) -> Result<ClassId, ConfigError> {
        self.classes
            .iter()
            .position(|c| c == name)
            .map(|i| ClassId(i as u16))
            .ok_or_else(|| {
                ConfigError::new(
                    key,
                    format!(
                        "unknown class '{name}' (classes defined by the classifier: {})",
                        if self.classes.is_empty() {
                            "none".to_string()
                        } else {
                            self.classes.join(", ")
                        }
                    ),
                )
            })
    }
}

impl QdiscConfig {
    /// Build the discipline.
    pub fn build<P: Pkt + Send + 'static>(
        &self,
        ctx: &BuildCtx,
    ) -> Result<Box<dyn Qdisc<P>>, ConfigError> {
        Ok(match self {
            QdiscConfig::Fifo(c) => {
                if matches!(
                    c.limit,
                    crate::units::Limit::Packets(0) | crate::units::Limit::Bytes(0)
                ) {
                    return Err(ConfigError::new("fifo.limit", "must be positive"));
                }
                Box::new(Fifo::new(*c))
            }
            QdiscConfig::Prio(c) => Box::new(Prio::new(c, ctx)?),
            QdiscConfig::Drr(c) => Box::new(Drr::new(c, ctx)?),
            QdiscConfig::Tbf(c) => Box::new(Tbf::new(c)?),
            QdiscConfig::AckFilter(c) => Box::new(AckFilter::new(c, ctx.link_rate)?),
            QdiscConfig::Htb(c) => Box::new(Htb::new(c, ctx)?),
            QdiscConfig::Hfsc(c) => Box::new(Hfsc::new(c, ctx)?),
            QdiscConfig::AckFifo(c) => Box::new(AckFifo::new(c)?),
            QdiscConfig::AckShaper(c) => Box::new(AckShaper::new(c)?),
            QdiscConfig::Ered(c) => Box::new(Ered::new(c, ctx.seed, ctx.link_rate)?),
            QdiscConfig::Aggregate(c) => Box::new(Aggregate::new(c)?),
            QdiscConfig::Codel(c) => Box::new(Codel::new(c, ctx)?),
            QdiscConfig::FqCodel(c) => match c.aqm {
                AqmKind::Codel => Box::new(FqCodel::<P, CodelVars>::new(c, ctx)?),
                AqmKind::Cobalt => Box::new(FqCodel::<P, CobaltVars>::new(c, ctx)?),
            },
            QdiscConfig::HostFqCodel(c) => match c.aqm {
                AqmKind::Codel => Box::new(HostFqCodel::<P, CodelVars>::new(c, ctx)?),
                AqmKind::Cobalt => Box::new(HostFqCodel::<P, CobaltVars>::new(c, ctx)?),
            },
        })
    }

    /// The capacity the discipline enforces as a whole, if it has one (reported to the
    /// opposite direction of a middlebox for self-tuning).
    pub fn capacity(&self) -> Option<Limit> {
        match self {
            QdiscConfig::Fifo(c) => Some(c.limit),
            QdiscConfig::Drr(c) => Some(c.limit),
            QdiscConfig::Tbf(c) => Some(c.limit),
            QdiscConfig::AckFilter(c) => Some(c.limit),
            QdiscConfig::AckFifo(c) => Some(c.limit),
            QdiscConfig::Ered(c) => Some(c.limit),
            QdiscConfig::Aggregate(c) => Some(c.limit),
            QdiscConfig::Codel(c) => Some(c.limit),
            QdiscConfig::FqCodel(c) => Some(c.limit),
            QdiscConfig::HostFqCodel(c) => Some(c.limit),
            // Classful and shaping disciplines bound their leaves, not the whole.
            QdiscConfig::Prio(_)
            | QdiscConfig::Htb(_)
            | QdiscConfig::Hfsc(_)
            | QdiscConfig::AckShaper(_) => None,
        }
    }

    /// The disciplines configured directly inside this one (prio bands, HTB and HFSC
    /// leaves).
    pub fn children(&self) -> Vec<&QdiscConfig> {
        match self {
            QdiscConfig::Prio(c) => c.bands.iter().filter_map(|b| b.queue.as_deref()).collect(),
            QdiscConfig::Htb(c) => c
                .classes
                .iter()
                .filter_map(|b| b.queue.as_deref())
                .collect(),
            QdiscConfig::Hfsc(c) => c
                .classes
                .iter()
                .filter_map(|b| b.queue.as_deref())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether the discipline (or one inside it, at any depth) watches the opposite
    /// direction, so that it only makes sense in a middlebox.
    pub fn needs_peer(&self) -> bool {
        matches!(self, QdiscConfig::AckShaper(_)) || self.children().iter().any(|q| q.needs_peer())
    }

    /// Whether the discipline (or one inside it, at any depth) needs the opposite
    /// direction's capacity (an ACK shaper with `threshold = "auto"`).
    pub fn needs_peer_capacity(&self) -> bool {
        match self {
            QdiscConfig::AckShaper(c) => c.needs_peer_capacity(),
            _ => self.children().iter().any(|q| q.needs_peer_capacity()),
        }
    }

    /// The discipline kind's name.
    pub fn kind(&self) -> &'static str {
        match self {
            QdiscConfig::Fifo(_) => "fifo",
            QdiscConfig::Prio(_) => "prio",
            QdiscConfig::Drr(_) => "drr",
            QdiscConfig::Tbf(_) => "tbf",
            QdiscConfig::AckFilter(_) => "ack_filter",
            QdiscConfig::Htb(_) => "htb",
            QdiscConfig::Hfsc(_) => "hfsc",
            QdiscConfig::AckFifo(_) => "ack_fifo",
            QdiscConfig::AckShaper(_) => "ack_shaper",
            QdiscConfig::Ered(_) => "ered",
            QdiscConfig::Aggregate(_) => "aggregate",
            QdiscConfig::Codel(_) => "codel",
            QdiscConfig::FqCodel(_) => "fq_codel",
            QdiscConfig::HostFqCodel(_) => "host_fq_codel",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;

    #[test]
    fn parses_and_builds_each_kind() {
        for src in [
            "kind = \"fifo\"\nlimit = \"10p\"",
            "kind = \"fifo\"\nlimit = \"64KB\"\ndrop = \"head\"",
            "kind = \"drr\"\nquantum = \"40B\"",
            "kind = \"tbf\"\nrate = \"1Mbit\"",
            "kind = \"prio\"\nbands = [{}, {}]",
            "kind = \"ack_filter\"\npolicy = \"classic\"",
            "kind = \"htb\"\nclasses = [{ name = \"a\", rate = \"1Mbit\" }]",
            "kind = \"hfsc\"\nclasses = [{ name = \"a\", ls = { m2 = \"1Mbit\" } }]",
            "kind = \"ack_fifo\"\nlimit = \"5p\"\ndrop = \"lowest_seq\"",
            "kind = \"ack_shaper\"\nthreshold = \"50KB\"\nleak = { kind = \"rate\" }",
            "kind = \"ered\"\nmarked_factor = 2.0",
            "kind = \"codel\"\ntarget = \"5ms\"\necn = true",
            "kind = \"fq_codel\"\nflows = 64\nquantum = \"300B\"",
            "kind = \"host_fq_codel\"\nhosts = \"pair\"\nflows = 64",
            "kind = \"aggregate\"\n[[policies]]\nprofile = { depth = \"3KB\", rate = \"1Mbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"common\" }",
        ] {
            let c: QdiscConfig = toml::from_str(src).unwrap();
            let q = c.build::<HeaderPacket>(&BuildCtx::default()).unwrap();
            assert_eq!(q.kind(), c.kind());
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let e = toml::from_str::<QdiscConfig>("kind = \"fifo\"\nlimt = \"10p\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("limt"), "{e}");
        let e = toml::from_str::<QdiscConfig>("kind = \"fofi\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("fofi"), "{e}");
        let e = toml::from_str::<QdiscConfig>("kind = \"fifo\"\nlimit = 10")
            .unwrap_err()
            .to_string();
        assert!(e.contains("no unit"), "{e}");
        let c: QdiscConfig = toml::from_str("kind = \"fifo\"\nlimit = \"0p\"").unwrap();
        assert!(c.build::<HeaderPacket>(&BuildCtx::default()).is_err());
    }

    #[test]
    fn a_shaper_inside_any_classful_discipline_is_found() {
        let shaper = "{ kind = \"ack_shaper\", threshold = \"auto\", leak = { kind = \"rate\" } }";
        for src in [
            format!("kind = \"prio\"\nbands = [{{}}, {{ queue = {shaper} }}]"),
            format!(
                "kind = \"htb\"\nclasses = [{{ name = \"a\", rate = \"1Mbit\" }}, \
                 {{ name = \"b\", parent = \"a\", rate = \"1Mbit\", queue = {shaper} }}]"
            ),
            format!(
                "kind = \"hfsc\"\nclasses = [{{ name = \"a\", ls = {{ m2 = \"1Mbit\" }}, \
                 queue = {{ kind = \"prio\", bands = [{{ queue = {shaper} }}] }} }}]"
            ),
        ] {
            let c: QdiscConfig = toml::from_str(&src).unwrap();
            assert!(c.needs_peer(), "{src}");
            assert!(c.needs_peer_capacity(), "{src}");
        }
        let c: QdiscConfig =
            toml::from_str("kind = \"htb\"\nclasses = [{ name = \"a\", rate = \"1Mbit\" }]")
                .unwrap();
        assert!(!c.needs_peer() && !c.needs_peer_capacity());
    }
}
