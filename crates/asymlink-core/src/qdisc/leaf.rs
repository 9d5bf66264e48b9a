//! A class's discipline held in place: line mode's leaves (FQ-CoDel and host FQ-CoDel with
//! CoDel) stored in the parent's class vector itself, any other discipline boxed.
//!
//! A classful parent asks its leaves for their backlogs on every dequeue and forwards
//! every packet to one; a leaf held in place is reached without a virtual call and without
//! following a pointer to a separate heap object.

use super::codel::CodelVars;
use super::{
    AqmKind, Backlog, BuildCtx, ConfigError, Dequeued, Drops, FqCodel, HostFqCodel,
    PeerObservation, Qdisc, QdiscConfig, QdiscStats,
};
use crate::packet::Pkt;
use crate::time::Instant;

/// A leaf's discipline. The two line-mode kinds are large (a few hundred bytes), the boxed
/// one a pointer: keeping the large ones in place is the point.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Leaf<P> {
    /// `fq_codel` with CoDel.
    Fq(FqCodel<P, CodelVars>),
    /// `host_fq_codel` with CoDel.
    Host(HostFqCodel<P, CodelVars>),
    /// Any other discipline.
    Other(Box<dyn Qdisc<P>>),
}

/// `$e` with `$q` bound to the leaf's discipline, whichever kind it is.
macro_rules! each {
    ($leaf:expr, $q:ident => $e:expr) => {
        match $leaf {
            Leaf::Fq($q) => $e,
            Leaf::Host($q) => $e,
            Leaf::Other($q) => $e,
        }
    };
}

impl<P: Pkt + Send + 'static> Leaf<P> {
    /// Build `cfg` as [`QdiscConfig::build`] does, in place when it is a line-mode kind.
    pub(crate) fn build(cfg: &QdiscConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        Ok(match cfg {
            QdiscConfig::FqCodel(c) if c.aqm == AqmKind::Codel => {
                Leaf::Fq(FqCodel::<P, CodelVars>::new(c, ctx)?)
            }
            QdiscConfig::HostFqCodel(c) if c.aqm == AqmKind::Codel => {
                Leaf::Host(HostFqCodel::<P, CodelVars>::new(c, ctx)?)
            }
            _ => Leaf::Other(cfg.build(ctx)?),
        })
    }

    /// Whether the discipline is held in place (not boxed).
    #[cfg(test)]
    pub(crate) fn in_place(&self) -> bool {
        !matches!(self, Leaf::Other(_))
    }
}

impl<P: Pkt + Send + 'static> Qdisc<P> for Leaf<P> {
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        each!(self, q => q.enqueue(now, pkt, drops))
    }
    #[inline]
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        each!(self, q => q.dequeue(now, drops))
    }
    fn poll_at(&self) -> Option<Instant> {
        each!(self, q => q.poll_at())
    }
    fn handle_timeout(&mut self, now: Instant, drops: &mut Drops<P>) {
        each!(self, q => q.handle_timeout(now, drops))
    }
    fn handle_observation(&mut self, now: Instant, obs: &PeerObservation) {
        each!(self, q => q.handle_observation(now, obs))
    }
    #[inline]
    fn backlog(&self) -> Backlog {
        each!(self, q => q.backlog())
    }
    fn stats(&self) -> &QdiscStats {
        each!(self, q => q.stats())
    }
    fn child_stats(&self) -> Vec<(String, QdiscStats)> {
        each!(self, q => q.child_stats())
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        each!(self, q => q.counters())
    }
    fn wants_idle_dequeue(&self) -> bool {
        each!(self, q => q.wants_idle_dequeue())
    }
    fn has_timers(&self) -> bool {
        each!(self, q => q.has_timers())
    }
    fn observes_peer(&self) -> bool {
        each!(self, q => q.observes_peer())
    }
    fn reads_headers(&self) -> bool {
        each!(self, q => q.reads_headers())
    }
    fn flow_entries(&self) -> u64 {
        each!(self, q => q.flow_entries())
    }
    fn kind(&self) -> &'static str {
        each!(self, q => q.kind())
    }
    fn drain(&mut self, out: &mut Vec<P>) -> u32 {
        each!(self, q => q.drain(out))
    }
}
