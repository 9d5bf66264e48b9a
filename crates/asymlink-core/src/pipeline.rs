//! The middlebox pipeline: per direction, classify → rewrite → discipline.
//!
//! A [`Middlebox`] sits between two sides, `a` and `b`. Packets travelling to side `b`
//! pass the rewriters (which see both directions, e.g. to learn the window scale from a
//! handshake and rewrite the ACKs of the other direction), then the classifier of the
//! `to_b` direction, then its discipline; the runtime drains the discipline whenever the
//! link toward `b` can take a packet. Both directions are owned by one object so that
//! mechanisms coupling them (ACK delay control watches the forward backlog) receive the
//! other direction's state explicitly, as a [`PeerObservation`], after every operation.
//!
//! The simulator builds one per middlebox node; the live box builds one per pair of
//! interfaces. Both use [`MiddleboxConfig`], the same TOML vocabulary:
//!
//! ```toml
//! [to_b]                       # toward side b (e.g. the uplink)
//! classifier = { default = "bulk", rules = [{ class = "ack", match = { pure_ack = true } }] }
//! qdisc = { kind = "prio", bands = [{ classes = ["ack"] }, { classes = ["bulk"] }] }
//! [to_a]
//! qdisc = { kind = "fifo", limit = "100p" }
//! ```

use crate::classify::{Classifier, ClassifierConfig};
use crate::packet::Pkt;
use crate::qdisc::htb::Htb;
use crate::qdisc::BuildCtx;
use crate::qdisc::{
    Backlog, ConfigError, Dequeued, DropReason, Drops, PeerObservation, Qdisc, QdiscConfig,
    QdiscStats, Verdict,
};
use crate::time::{earliest, Instant};
use crate::units::{Limit, Rate};
use core::marker::PhantomData;
use serde::Deserialize;

/// A direction through a middlebox, written `"to_b"` or `"to_a"`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Dir {
    /// Travelling from side a to side b.
    ToB = 0,
    /// Travelling from side b to side a.
    ToA = 1,
}

impl Dir {
    /// The opposite direction.
    pub fn reverse(self) -> Dir {
        match self {
            Dir::ToB => Dir::ToA,
            Dir::ToA => Dir::ToB,
        }
    }
    /// 0 for `ToB`, 1 for `ToA`.
    pub fn index(self) -> usize {
        self as usize
    }
    /// The configuration key of the direction.
    pub fn name(self) -> &'static str {
        match self {
            Dir::ToB => "to_b",
            Dir::ToA => "to_a",
        }
    }
}

/// What a rewriter decides about a packet.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Action {
    /// Continue (possibly modified).
    Pass,
    /// Drop it, counted with this reason.
    Drop(DropReason),
}

/// A per-packet transform that does not queue (advertised-window rewriting, DSCP
/// marking). It sees packets of both directions before they are queued.
pub trait Rewriter<P: Pkt>: Send {
    /// Inspect and possibly modify a packet travelling in `dir`.
    fn on_packet(&mut self, now: Instant, dir: Dir, pkt: &mut P) -> Action;
    /// Earliest instant at which [`Rewriter::handle_timeout`] must run (state expiry).
    fn poll_at(&self) -> Option<Instant> {
        None
    }
    /// Advance timers.
    fn handle_timeout(&mut self, _now: Instant) {}
    /// Named counters for stats.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// Short name.
    fn kind(&self) -> &'static str;
}

/// Configuration of one direction's egress.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EgressConfig {
    /// Classifier (none: packets stay unclassified).
    #[serde(default)]
    pub classifier: Option<ClassifierConfig>,
    /// Discipline (default: a 1000-packet FIFO).
    #[serde(default)]
    pub qdisc: Option<QdiscConfig>,
}

/// Where an egress keeps its discipline: boxed (`Box<dyn Qdisc<P>>`, a link's own egress,
/// where the egress's size counts), or [`InPlace`] (a middlebox's: HTB in place).
pub trait QdiscHolder<P: Pkt>: Send + Sized {
    /// Build `cfg` ([`QdiscConfig::build`]).
    fn build(cfg: &QdiscConfig, ctx: &BuildCtx) -> Result<Self, ConfigError>;
    /// Hold a discipline built elsewhere.
    fn hold(q: Box<dyn Qdisc<P>>) -> Self;
    /// The discipline.
    fn get(&self) -> &dyn Qdisc<P>;
    /// The discipline, mutably.
    fn get_mut(&mut self) -> &mut dyn Qdisc<P>;
    /// [`Qdisc::enqueue`].
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.get_mut().enqueue(now, pkt, drops)
    }
    /// [`Qdisc::dequeue`].
    #[inline]
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        self.get_mut().dequeue(now, drops)
    }
}

impl<P: Pkt + Send + 'static> QdiscHolder<P> for Box<dyn Qdisc<P>> {
    fn build(cfg: &QdiscConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        cfg.build(ctx)
    }
    fn hold(q: Box<dyn Qdisc<P>>) -> Self {
        q
    }
    #[inline]
    fn get(&self) -> &dyn Qdisc<P> {
        &**self
    }
    #[inline]
    fn get_mut(&mut self) -> &mut dyn Qdisc<P> {
        &mut **self
    }
}

/// A middlebox's discipline: HTB (line mode's, the common case) held in place, reached
/// without a virtual call or a pointer to a separate object; any other kind boxed.
#[allow(clippy::large_enum_variant)]
pub enum InPlace<P> {
    /// `htb`.
    Htb(Htb<P>),
    /// Any other discipline.
    Other(Box<dyn Qdisc<P>>),
}

impl<P: Pkt + Send + 'static> QdiscHolder<P> for InPlace<P> {
    fn build(cfg: &QdiscConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        Ok(match cfg {
            QdiscConfig::Htb(c) => InPlace::Htb(Htb::new(c, ctx)?),
            _ => InPlace::Other(cfg.build(ctx)?),
        })
    }
    fn hold(q: Box<dyn Qdisc<P>>) -> Self {
        InPlace::Other(q)
    }
    #[inline]
    fn get(&self) -> &dyn Qdisc<P> {
        match self {
            InPlace::Htb(q) => q,
            InPlace::Other(q) => &**q,
        }
    }
    #[inline]
    fn get_mut(&mut self) -> &mut dyn Qdisc<P> {
        match self {
            InPlace::Htb(q) => q,
            InPlace::Other(q) => &mut **q,
        }
    }
    #[inline]
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        match self {
            InPlace::Htb(q) => q.enqueue(now, pkt, drops),
            InPlace::Other(q) => q.enqueue(now, pkt, drops),
        }
    }
    #[inline]
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        match self {
            InPlace::Htb(q) => q.dequeue(now, drops),
            InPlace::Other(q) => q.dequeue(now, drops),
        }
    }
}

/// A classifier in front of a discipline: one direction's egress. `Q` holds the
/// discipline: boxed by default, [`InPlace`] in a [`Middlebox`]. Laid out (`repr(C)`) in
/// the order a packet reads it: the classifier, then the discipline.
#[repr(C)]
pub struct Egress<P, Q = Box<dyn Qdisc<P>>> {
    /// Boxed: most egresses have none, and an egress's size counts where thousands of
    /// link directions are simulated.
    classifier: Option<Box<Classifier>>,
    qdisc: Q,
    rate: Option<Rate>,
    capacity: Option<Limit>,
    /// The discipline's [`Qdisc::has_timers`], [`Qdisc::observes_peer`] and
    /// [`Qdisc::wants_idle_dequeue`], asked once (each is fixed when it is built).
    timed: bool,
    observes: bool,
    idle: bool,
    _pkt: PhantomData<fn(P) -> P>,
}

impl<P: Pkt + Send + 'static, Q: QdiscHolder<P>> Egress<P, Q> {
    /// Build from configuration. `link_rate` is the rate of the link it feeds, if known.
    pub fn new(
        cfg: &EgressConfig,
        link_rate: Option<Rate>,
        seed: u64,
    ) -> Result<Egress<P, Q>, ConfigError> {
        let classifier = cfg
            .classifier
            .as_ref()
            .map(|c| Classifier::new(c).map(Box::new))
            .transpose()
            .map_err(|e| e.within("classifier"))?;
        let ctx = BuildCtx {
            classes: classifier
                .as_ref()
                .map(|c| c.class_names().to_vec())
                .unwrap_or_default(),
            seed,
            link_rate,
        };
        let qcfg = cfg.qdisc.clone().unwrap_or_default();
        let qdisc = Q::build(&qcfg, &ctx)?;
        Ok(Egress {
            classifier,
            timed: qdisc.get().has_timers(),
            observes: qdisc.get().observes_peer(),
            idle: qdisc.get().wants_idle_dequeue(),
            qdisc,
            rate: link_rate,
            capacity: qcfg.capacity(),
            _pkt: PhantomData,
        })
    }

    /// An egress around an existing discipline, without classifier.
    pub fn from_qdisc(qdisc: Box<dyn Qdisc<P>>, link_rate: Option<Rate>) -> Egress<P, Q> {
        Egress {
            classifier: None,
            timed: qdisc.has_timers(),
            observes: qdisc.observes_peer(),
            idle: qdisc.wants_idle_dequeue(),
            qdisc: Q::hold(qdisc),
            rate: link_rate,
            capacity: None,
            _pkt: PhantomData,
        }
    }

    /// Classify (if configured) and offer to the discipline.
    #[inline(always)]
    pub fn enqueue(&mut self, now: Instant, mut pkt: P, drops: &mut Drops<P>) {
        if let Some(c) = &mut self.classifier {
            c.classify(now, &mut pkt);
        }
        self.qdisc.enqueue(now, pkt, drops);
    }

    /// The next packet for the link.
    #[inline]
    pub fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        self.qdisc.dequeue(now, drops)
    }

    /// The discipline.
    pub fn qdisc(&self) -> &dyn Qdisc<P> {
        self.qdisc.get()
    }

    /// The discipline, mutably.
    pub fn qdisc_mut(&mut self) -> &mut dyn Qdisc<P> {
        self.qdisc.get_mut()
    }

    /// Whether the classifier ([`Classifier::reads_headers`]) or the discipline
    /// ([`Qdisc::reads_headers`]) may read or rewrite a packet's headers beyond what the
    /// packet answers without them.
    pub fn reads_headers(&self) -> bool {
        self.classifier.as_ref().is_some_and(|c| c.reads_headers()) || self.qdisc().reads_headers()
    }

    /// The classifier, if any.
    pub fn classifier(&self) -> Option<&Classifier> {
        self.classifier.as_deref()
    }

    /// Whether the discipline watches the opposite direction ([`Qdisc::observes_peer`]).
    #[inline]
    pub fn observes_peer(&self) -> bool {
        self.observes
    }

    /// Whether the discipline must be asked when the link goes idle
    /// ([`Qdisc::wants_idle_dequeue`]).
    #[inline]
    pub fn wants_idle_dequeue(&self) -> bool {
        self.idle
    }

    /// What this egress tells the opposite direction.
    pub fn observation(&self) -> PeerObservation {
        let st = self.qdisc().stats();
        PeerObservation {
            backlog: self.qdisc().backlog(),
            service_rate: self.rate,
            capacity_bytes: match self.capacity {
                Some(Limit::Bytes(b)) => Some(b),
                _ => None,
            },
            capacity_packets: match self.capacity {
                Some(Limit::Packets(p)) => Some(p),
                _ => None,
            },
            dequeued_packets: st.dequeued,
            dequeued_bytes: st.dequeued_bytes,
        }
    }

    /// Set the capacity in bytes reported to the other direction (for self-tuning
    /// mechanisms). By default an egress reports its discipline's configured limit.
    pub fn set_capacity_bytes(&mut self, c: Option<u64>) {
        self.capacity = c.map(Limit::Bytes);
    }

    /// Set the capacity reported to the other direction, in bytes or packets.
    pub fn set_capacity(&mut self, c: Option<Limit>) {
        self.capacity = c;
    }
}

impl<P: Pkt + Send + 'static> Egress<P> {
    /// The same egress as a middlebox holds it (a boxed discipline stays boxed).
    fn in_place(self) -> Egress<P, InPlace<P>> {
        Egress {
            classifier: self.classifier,
            qdisc: InPlace::Other(self.qdisc),
            rate: self.rate,
            capacity: self.capacity,
            timed: self.timed,
            observes: self.observes,
            idle: self.idle,
            _pkt: PhantomData,
        }
    }
}

/// A side of a middlebox, written `"a"` or `"b"`.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Side {
    /// Side a.
    A,
    /// Side b.
    B,
}

impl Side {
    /// The direction toward this side.
    pub fn toward(self) -> Dir {
        match self {
            Side::A => Dir::ToA,
            Side::B => Dir::ToB,
        }
    }
}

/// Rewriter configuration, tagged by `kind`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum RewriterConfig {
    /// Set the DSCP of every packet travelling in `dir` (both if absent).
    SetDscp {
        /// The code point (0..=63).
        dscp: u8,
        /// Only this direction (`"to_a"` or `"to_b"`).
        #[serde(default)]
        dir: Option<Dir>,
    },
    /// Advertised-window rewriting for the receivers on side `receivers` (`"a"` or
    /// `"b"`) with the receiver-based policy (see [`crate::rwnd`]).
    Rwnd {
        /// The side the receivers are on.
        receivers: Side,
        /// The policy's parameters.
        #[serde(default)]
        policy: Box<crate::rwnd::RwndConfig>,
    },
}

/// A middlebox configuration: rewriters plus one egress per direction.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiddleboxConfig {
    /// Rewriters, applied in order to packets of both directions.
    #[serde(default)]
    pub rewrite: Vec<RewriterConfig>,
    /// Egress toward side b.
    #[serde(default)]
    pub to_b: EgressConfig,
    /// Egress toward side a.
    #[serde(default)]
    pub to_a: EgressConfig,
}

struct SetDscp {
    dscp: u8,
    dir: Option<Dir>,
    marked: u64,
}

impl<P: Pkt> Rewriter<P> for SetDscp {
    fn on_packet(&mut self, _now: Instant, dir: Dir, pkt: &mut P) -> Action {
        if self.dir.is_none_or(|d| d == dir) {
            if let Some(ecn) = pkt.headers().map(|h| h.ip.ecn) {
                if pkt.set_dscp_ecn(self.dscp, ecn) {
                    self.marked += 1;
                }
            }
        }
        Action::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("marked", self.marked)]
    }
    fn kind(&self) -> &'static str {
        "set_dscp"
    }
}

impl RewriterConfig {
    /// Build the rewriter.
    pub fn build<P: Pkt + 'static>(&self) -> Result<Box<dyn Rewriter<P>>, ConfigError> {
        match self {
            RewriterConfig::SetDscp { dscp, dir } => {
                if *dscp > 63 {
                    return Err(ConfigError::new("rewrite.dscp", "must be 0..=63"));
                }
                Ok(Box::new(SetDscp {
                    dscp: *dscp,
                    dir: *dir,
                    marked: 0,
                }))
            }
            RewriterConfig::Rwnd { receivers, policy } => {
                let r = crate::rwnd::WindowRewriter::new(policy, receivers.toward())
                    .map_err(|e| e.within("rewrite.policy"))?;
                Ok(Box::new(r))
            }
        }
    }
}

/// Counters of the middlebox itself (its disciplines keep their own).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MiddleboxStats {
    /// Packets received, per direction.
    pub received: [u64; 2],
    /// Packets dropped by rewriters, per direction.
    pub rewrite_drops: [u64; 2],
    /// Packets handed out, per direction.
    pub sent: [u64; 2],
}

/// Two egresses plus rewriters: the sans-IO middlebox.
///
/// Laid out (`repr(C)`) with what every call reads first: the rewriters, the counters, and
/// both directions' [`Qdisc::has_timers`], [`Egress::observes_peer`] and
/// [`Egress::wants_idle_dequeue`] (copied from the egresses when the middlebox is made),
/// so that a call in one direction reads nothing of the other direction's egress unless
/// its discipline watches the direction called.
#[repr(C)]
pub struct Middlebox<P> {
    rewriters: Vec<Box<dyn Rewriter<P>>>,
    stats: MiddleboxStats,
    /// Per direction (indexed by [`Dir::index`]): the egress's flags.
    timed: [bool; 2],
    observes: [bool; 2],
    idle: [bool; 2],
    dirs: [Egress<P, InPlace<P>>; 2],
}

impl<P: Pkt + Send + 'static> Middlebox<P> {
    /// Build from configuration. `rates` are the link rates toward b and toward a, if known.
    pub fn new(
        cfg: &MiddleboxConfig,
        rates: [Option<Rate>; 2],
        seed: u64,
    ) -> Result<Middlebox<P>, ConfigError> {
        let prefix = |d: Dir| move |e: ConfigError| e.within(d.name());
        let to_b = Egress::new(&cfg.to_b, rates[0], crate::rand::derive_seed(seed, "to_b"))
            .map_err(prefix(Dir::ToB))?;
        let to_a = Egress::new(&cfg.to_a, rates[1], crate::rand::derive_seed(seed, "to_a"))
            .map_err(prefix(Dir::ToA))?;
        let rewriters = cfg
            .rewrite
            .iter()
            .map(|r| r.build())
            .collect::<Result<Vec<_>, _>>()?;
        for (d, e) in [(Dir::ToB, &cfg.to_b), (Dir::ToA, &cfg.to_a)] {
            let needs = e.qdisc.as_ref().is_some_and(|q| q.needs_peer_capacity());
            let peer = [&to_b, &to_a][d.reverse().index()];
            if needs && peer.capacity.is_none() {
                return Err(ConfigError::new(
                    format!("{}.qdisc.threshold", d.name()),
                    format!(
                        "\"auto\" derives the threshold from the capacity of the {} queue, \
                         and its '{}' discipline has no overall limit; give a fixed threshold",
                        d.reverse().name(),
                        peer.qdisc().kind()
                    ),
                ));
            }
        }
        let mut mb = Middlebox::with(rewriters, [to_b, to_a]);
        // Each direction learns the other's (empty) state and capacity from the start.
        mb.observe(Instant::ZERO, Dir::ToB);
        mb.observe(Instant::ZERO, Dir::ToA);
        Ok(mb)
    }

    /// A middlebox from parts.
    pub fn from_parts(
        rewriters: Vec<Box<dyn Rewriter<P>>>,
        to_b: Egress<P>,
        to_a: Egress<P>,
    ) -> Self {
        Middlebox::with(rewriters, [to_b.in_place(), to_a.in_place()])
    }

    fn with(rewriters: Vec<Box<dyn Rewriter<P>>>, dirs: [Egress<P, InPlace<P>>; 2]) -> Self {
        Middlebox {
            rewriters,
            stats: MiddleboxStats::default(),
            timed: [dirs[0].timed, dirs[1].timed],
            observes: [dirs[0].observes, dirs[1].observes],
            idle: [dirs[0].idle, dirs[1].idle],
            dirs,
        }
    }

    fn observe(&mut self, now: Instant, changed: Dir) {
        if !self.observes[changed.reverse().index()] {
            return;
        }
        let obs = self.dirs[changed.index()].observation();
        self.dirs[changed.reverse().index()]
            .qdisc_mut()
            .handle_observation(now, &obs);
    }

    /// A packet arrived travelling in `dir`. Discarded packets go to `drops`.
    pub fn handle_packet(&mut self, now: Instant, dir: Dir, mut pkt: P, drops: &mut Drops<P>) {
        self.stats.received[dir.index()] += 1;
        for r in self.rewriters.iter_mut() {
            if let Action::Drop(reason) = r.on_packet(now, dir, &mut pkt) {
                self.stats.rewrite_drops[dir.index()] += 1;
                drops.push(pkt, Verdict::Dropped(reason), crate::qdisc::Stage::Rejected);
                return;
            }
        }
        self.dirs[dir.index()].enqueue(now, pkt, drops);
        self.observe(now, dir);
    }

    /// The next packet that may leave in `dir` at `now` (call when that link is free).
    pub fn poll_transmit(&mut self, now: Instant, dir: Dir, drops: &mut Drops<P>) -> Dequeued<P> {
        let r = self.dirs[dir.index()].dequeue(now, drops);
        if matches!(r, Dequeued::Packet(_)) {
            self.stats.sent[dir.index()] += 1;
        }
        self.observe(now, dir);
        r
    }

    /// Whether [`Middlebox::poll_at`] can ever name an instant: some rewriter, or a
    /// discipline with timers ([`Qdisc::has_timers`]). Fixed when the middlebox is built.
    #[inline]
    pub fn has_timers(&self) -> bool {
        !self.rewriters.is_empty() || self.timed[0] || self.timed[1]
    }

    /// Whether `dir`'s discipline watches the opposite direction
    /// ([`Egress::observes_peer`]).
    #[inline]
    pub fn observes_peer(&self, dir: Dir) -> bool {
        self.observes[dir.index()]
    }

    /// Whether `dir`'s discipline must be asked when its link goes idle
    /// ([`Egress::wants_idle_dequeue`]).
    #[inline]
    pub fn wants_idle_dequeue(&self, dir: Dir) -> bool {
        self.idle[dir.index()]
    }

    /// Earliest deadline of any rewriter or discipline.
    #[inline]
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.has_timers() {
            return None;
        }
        self.next_deadline()
    }

    fn next_deadline(&self) -> Option<Instant> {
        let mut t = self
            .rewriters
            .iter()
            .fold(None, |a, r| earliest(a, r.poll_at()));
        for d in &self.dirs {
            if d.timed {
                t = earliest(t, d.qdisc().poll_at());
            }
        }
        t
    }

    /// Run timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant, drops: &mut Drops<P>) {
        for r in self.rewriters.iter_mut() {
            if r.poll_at().is_some_and(|t| t <= now) {
                r.handle_timeout(now);
            }
        }
        for d in [Dir::ToB, Dir::ToA] {
            let e = &self.dirs[d.index()];
            if e.timed && e.qdisc().poll_at().is_some_and(|t| t <= now) {
                self.dirs[d.index()].qdisc_mut().handle_timeout(now, drops);
                self.observe(now, d);
            }
        }
    }

    /// Whether a packet travelling in `dir` may have its headers read or rewritten beyond
    /// what it answers without them ([`Egress::reads_headers`]; any rewriter does).
    pub fn reads_headers(&self, dir: Dir) -> bool {
        !self.rewriters.is_empty() || self.dirs[dir.index()].reads_headers()
    }

    /// One direction's egress.
    pub fn egress(&self, dir: Dir) -> &Egress<P, InPlace<P>> {
        &self.dirs[dir.index()]
    }

    /// One direction's egress, mutably.
    pub fn egress_mut(&mut self, dir: Dir) -> &mut Egress<P, InPlace<P>> {
        &mut self.dirs[dir.index()]
    }

    /// Backlog of one direction.
    pub fn backlog(&self, dir: Dir) -> Backlog {
        self.dirs[dir.index()].qdisc().backlog()
    }

    /// Discipline counters of one direction.
    pub fn qdisc_stats(&self, dir: Dir) -> &QdiscStats {
        self.dirs[dir.index()].qdisc().stats()
    }

    /// The middlebox's own counters.
    pub fn stats(&self) -> &MiddleboxStats {
        &self.stats
    }

    /// The rewriters.
    pub fn rewriters(&self) -> &[Box<dyn Rewriter<P>>] {
        &self.rewriters
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;

    #[test]
    fn a_middlebox_has_timers_if_a_rewriter_or_discipline_has() {
        let mb = |src: &str| -> Middlebox<HeaderPacket> {
            let cfg: MiddleboxConfig = toml::from_str(src).unwrap();
            Middlebox::new(&cfg, [None, None], 1).unwrap()
        };
        let fq = mb("[to_b]\nqdisc = { kind = \"fq_codel\" }\n[to_a]\nqdisc = { kind = \"fifo\", limit = \"10p\" }");
        assert!(!fq.has_timers());
        assert_eq!(fq.poll_at(), None);
        let tbf = mb("[to_a]\nqdisc = { kind = \"tbf\", rate = \"1Mbit\" }");
        assert!(tbf.has_timers());
        let rw = mb("rewrite = [{ kind = \"set_dscp\", dscp = 10, dir = \"to_b\" }]");
        assert!(rw.has_timers());
        assert_eq!(rw.poll_at(), None);
    }

    #[test]
    fn a_middlebox_answers_its_egresses_flags() {
        let mb = |src: &str| -> Middlebox<HeaderPacket> {
            let cfg: MiddleboxConfig = toml::from_str(src).unwrap();
            Middlebox::new(&cfg, [None, None], 1).unwrap()
        };
        let shaper = mb("[to_b]\nqdisc = { kind = \"tbf\", rate = \"1Mbit\" }\n\
             [to_a]\nqdisc = { kind = \"ack_shaper\", threshold = \"3KB\", \
             max_delay = \"50ms\", leak = { kind = \"interval\", interval = \"10ms\" } }");
        let fq = mb("[to_b]\nqdisc = { kind = \"fq_codel\" }");
        let parts: Middlebox<HeaderPacket> = Middlebox::from_parts(
            Vec::new(),
            Egress::from_qdisc(Box::new(crate::qdisc::Fifo::new(Default::default())), None),
            Egress::from_qdisc(Box::new(crate::qdisc::Fifo::new(Default::default())), None),
        );
        for m in [&shaper, &fq, &parts] {
            for d in [Dir::ToB, Dir::ToA] {
                let e = m.egress(d);
                assert_eq!(m.observes_peer(d), e.observes_peer(), "{}", d.name());
                assert_eq!(m.observes_peer(d), e.qdisc().observes_peer());
                assert_eq!(m.wants_idle_dequeue(d), e.wants_idle_dequeue());
                assert_eq!(m.wants_idle_dequeue(d), e.qdisc().wants_idle_dequeue());
            }
        }
        assert!(shaper.observes_peer(Dir::ToA));
        assert!(!shaper.observes_peer(Dir::ToB));
        assert!(shaper.has_timers() && !fq.has_timers() && !parts.has_timers());
    }

    /// Line mode's pipeline at home (HTB both ways, a classifier toward the line).
    fn line_config() -> MiddleboxConfig {
        let mut t: toml::Table =
            "line = { down = \"8Mbit\", up = \"512kbit\", linklayer = { encap = \"llc_snap_routed\" } }"
                .parse()
                .unwrap();
        crate::line::expand(&mut t).unwrap();
        toml::Value::Table(t).try_into().unwrap()
    }

    #[test]
    fn a_middlebox_holds_htb_in_place_and_other_disciplines_boxed() {
        let mb: Middlebox<HeaderPacket> = Middlebox::new(&line_config(), [None, None], 1).unwrap();
        for d in [Dir::ToB, Dir::ToA] {
            assert!(matches!(mb.egress(d).qdisc, InPlace::Htb(_)));
            assert_eq!(mb.egress(d).qdisc().kind(), "htb");
        }
        let cfg: MiddleboxConfig =
            toml::from_str("[to_a]\nqdisc = { kind = \"fifo\", limit = \"10p\" }").unwrap();
        let mb: Middlebox<HeaderPacket> = Middlebox::new(&cfg, [None, None], 1).unwrap();
        assert!(matches!(mb.egress(Dir::ToA).qdisc, InPlace::Other(_)));
    }

    #[test]
    fn htb_in_place_serves_exactly_as_boxed() {
        let cfg = line_config();
        let mut inline: Middlebox<HeaderPacket> = Middlebox::new(&cfg, [None, None], 1).unwrap();
        let boxed_egress = |d: Dir| {
            let e = [&cfg.to_b, &cfg.to_a][d.index()];
            Egress::<HeaderPacket>::new(e, None, crate::rand::derive_seed(1, d.name())).unwrap()
        };
        let mut boxed =
            Middlebox::from_parts(Vec::new(), boxed_egress(Dir::ToB), boxed_egress(Dir::ToA));
        boxed.observe(Instant::ZERO, Dir::ToB);
        boxed.observe(Instant::ZERO, Dir::ToA);
        for d in [Dir::ToB, Dir::ToA] {
            assert!(matches!(boxed.egress(d).qdisc, InPlace::Other(_)));
        }
        let (mut da, mut db) = (Drops::new(), Drops::new());
        let mut sent = 0;
        for i in 0..6000u32 {
            let now = Instant::from_micros(u64::from(i) * 300);
            let dir = if i % 5 == 0 { Dir::ToA } else { Dir::ToB };
            let len = [40, 52, 576, 1500][(i.wrapping_mul(2_654_435_761) >> 9) as usize % 4];
            for _ in 0..(i % 3) {
                inline.handle_packet(now, dir, data_flow(i, len, (i % 7) as u16), &mut da);
                boxed.handle_packet(now, dir, data_flow(i, len, (i % 7) as u16), &mut db);
            }
            for d in [Dir::ToB, Dir::ToA] {
                let (a, b) = (
                    inline.poll_transmit(now, d, &mut da),
                    boxed.poll_transmit(now, d, &mut db),
                );
                match (&a, &b) {
                    (Dequeued::Packet(x), Dequeued::Packet(y)) => {
                        assert_eq!((tag(x), x.ip_len()), (tag(y), y.ip_len()), "at step {i}");
                        sent += 1;
                    }
                    _ => assert_eq!(a, b, "at step {i}"),
                }
            }
        }
        assert!(sent > 1000, "{sent}");
        assert!(!da.is_empty());
        let tags = |d: &mut Drops<HeaderPacket>| {
            d.drain()
                .map(|x| (tag(&x.pkt), x.verdict))
                .collect::<Vec<_>>()
        };
        assert_eq!(tags(&mut da), tags(&mut db));
        for d in [Dir::ToB, Dir::ToA] {
            assert_eq!(inline.qdisc_stats(d), boxed.qdisc_stats(d));
            check(inline.egress(d).qdisc());
        }
    }

    #[test]
    fn classify_then_prioritise_per_direction() {
        let cfg: MiddleboxConfig = toml::from_str(
            r#"
            rewrite = [{ kind = "set_dscp", dscp = 10, dir = "to_b" }]
            [to_b]
            classifier = { default = "bulk", rules = [{ class = "ack", match = { pure_ack = true } }] }
            qdisc = { kind = "prio", bands = [{ classes = ["ack"] }, { classes = ["bulk"] }] }
            "#,
        )
        .unwrap();
        let mut mb: Middlebox<HeaderPacket> = Middlebox::new(&cfg, [None, None], 1).unwrap();
        let mut d = Drops::new();
        mb.handle_packet(ms(0), Dir::ToB, data(1, 1500), &mut d);
        mb.handle_packet(ms(0), Dir::ToB, data(2, 40), &mut d); // pure ACK (no payload)
        mb.handle_packet(ms(0), Dir::ToA, data(3, 1500), &mut d);
        let first = mb.poll_transmit(ms(1), Dir::ToB, &mut d).packet().unwrap();
        assert_eq!(tag(&first), 2, "ACK first");
        assert_eq!(first.hdr.ip.dscp, 10);
        let back = mb.poll_transmit(ms(1), Dir::ToA, &mut d).packet().unwrap();
        assert_eq!(back.hdr.ip.dscp, 0, "rewriter limited to to_b");
        assert_eq!(mb.stats().received, [2, 1]);
        check(mb.egress(Dir::ToB).qdisc());
    }

    #[test]
    fn rewriter_sides_and_directions_are_typed() {
        let c: MiddleboxConfig = crate::config::from_toml(
            "rewrite = [{ kind = \"set_dscp\", dscp = 46, dir = \"to_b\" }, \
             { kind = \"rwnd\", receivers = \"a\" }]",
        )
        .unwrap();
        assert!(matches!(
            c.rewrite[..],
            [
                RewriterConfig::SetDscp {
                    dir: Some(Dir::ToB),
                    ..
                },
                RewriterConfig::Rwnd {
                    receivers: Side::A,
                    ..
                }
            ]
        ));
        let e = crate::config::from_toml::<MiddleboxConfig>(
            "rewrite = [{ kind = \"rwnd\", receivers = \"c\" }]",
        )
        .unwrap_err();
        assert_eq!(e.path, "rewrite[0].receivers", "{e}");
        let e = crate::config::from_toml::<MiddleboxConfig>(
            "rewrite = [{ kind = \"set_dscp\", dscp = 1, dir = \"up\" }]",
        )
        .unwrap_err();
        assert_eq!(e.path, "rewrite[0].dir", "{e}");
    }

    #[test]
    fn errors_carry_the_direction() {
        let cfg: MiddleboxConfig = toml::from_str(
            "[to_a]\nqdisc = { kind = \"prio\", bands = [{ classes = [\"nope\"] }] }",
        )
        .unwrap();
        let e = Middlebox::<HeaderPacket>::new(&cfg, [None, None], 1)
            .err()
            .unwrap();
        assert!(e.path.starts_with("to_a."), "{e}");
    }
}
