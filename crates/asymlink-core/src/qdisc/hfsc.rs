//! Hierarchical fair service curve scheduler (Stoica, Zhang & Ng, 2000), the discipline the
//! ADSL paper wanted "because of the ability to decouple delay and bandwidth allocation".
//!
//! # Principles
//!
//! Each class may have three **service curves**, each two-piece linear — slope `m1` for
//! the first `d`, then slope `m2` (tc-hfsc's `m1 d m2`, or `umax dmax rate`):
//!
//! * **real-time** (`rt`, leaves only) — a guarantee: the class receives at least its curve
//!   of service from the start of each backlogged period. A concave curve (`m1 > m2`)
//!   grants a short delay to small bursts without raising the long-term rate `m2`: that is
//!   the decoupling of delay from bandwidth.
//! * **link-share** (`ls`) — how the capacity left over by real-time service is shared
//!   among siblings, in proportion to their curves.
//! * **upper-limit** (`ul`) — a ceiling on link-share service: a class (and its subtree)
//!   is not served by link-sharing ahead of its upper-limit curve. Put `ul` on the top
//!   class to shape the whole tree to the access line's rate.
//!
//! Real-time service comes first: among leaves whose *eligible* time has come (the
//! eligible curve is the real-time curve, or for a concave one its `m2` part alone), the
//! one with the earliest *deadline* (when the curve says the head packet must have been
//! sent) is served. Otherwise link-sharing walks from the root to a leaf, at each level
//! choosing the child with the smallest *virtual time* whose *fit time* (upper limit) has
//! come. Every packet is charged its **wire size** ([`LinkLayer`]: ATM cells, PTM, overhead,
//! mpu) in every curve, which is what the paper could not do with Linux in 2004.
//!
//! Curves are kept at run time as in the paper's algorithm (the runtime curve of each
//! class is the minimum of the curves started at each backlogged period); all arithmetic is
//! integer: times in nanoseconds, service in bytes, slopes in bit/s, products in 128 bits.
//! Not modelled: Linux's `myfadj` correction of the fit time and its red-black trees (the
//! tree of an access link is a handful of classes; the scheduler scans it).
//!
//! A leaf holds packets in its own child discipline; the scheduler takes the head packet
//! of each leaf into a one-packet slot (it needs the head's length for the deadline, and
//! the trait has no peek), where it still counts as queued in this discipline.
//!
//! # Worked example
//!
//! ```toml
//! qdisc = { kind = "hfsc", default = "bulk", linklayer = "llc_snap_routed", classes = [
//!   { name = "top",         ls = { m2 = "480kbit" }, ul = { m2 = "480kbit" } },
//!   { name = "interactive", parent = "top", rt = { m1 = "400kbit", d = "10ms", m2 = "32kbit" },
//!                            ls = { m2 = "32kbit" } },
//!   { name = "bulk",        parent = "top", ls = { m2 = "448kbit" } },
//! ] }
//! ```
//!
//! A 100-byte interactive packet (3 cells = 159 wire bytes) arriving when its class is
//! idle has its deadline `159 × 8 / 400 000` = 3.2 ms away: it overtakes the bulk class's
//! queue at once, although the class is guaranteed only 32 kbit/s in the long run. With a
//! linear 32 kbit/s curve the deadline would be 40 ms away.

use super::tree::{self, ClassSpec, Limits, Tree, TreeClass};
use super::{
    Backlog, BuildCtx, ConfigError, Dequeued, DropReason, Drops, PeerObservation, Qdisc,
    QdiscConfig, QdiscStats, Verdict,
};
use crate::overhead::{LinkLayer, LinkLayerConfig};
use crate::packet::Pkt;
use crate::time::{dur_ns, earliest, Instant};
use crate::units::{Bytes, Rate, Span};
use serde::Deserialize;

/// A service curve as written: `{ m1 = "...", d = "...", m2 = "..." }`, `{ m2 = "..." }`
/// (or `rate`), or tc's `{ umax = "1500B", dmax = "10ms", rate = "..." }`.
#[derive(Clone, Copy, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurveConfig {
    /// Slope of the first segment.
    #[serde(default)]
    pub m1: Option<Rate>,
    /// Length of the first segment.
    #[serde(default)]
    pub d: Option<Span>,
    /// Slope of the second segment (the long-term rate).
    #[serde(default)]
    pub m2: Option<Rate>,
    /// Alias of `m2`.
    #[serde(default)]
    pub rate: Option<Rate>,
    /// tc form: the largest burst that must leave within `dmax`.
    #[serde(default)]
    pub umax: Option<Bytes>,
    /// tc form: the delay bound for `umax`.
    #[serde(default)]
    pub dmax: Option<Span>,
}

/// A two-piece linear service curve: slope `m1` (bit/s) for `d` ns, then `m2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServiceCurve {
    /// First slope, bit/s.
    pub m1: u64,
    /// Length of the first segment, ns.
    pub d: u64,
    /// Second slope, bit/s.
    pub m2: u64,
}

impl CurveConfig {
    /// The curve, or what is wrong with it (relative to `key`).
    pub fn curve(&self, key: &str) -> Result<ServiceCurve, ConfigError> {
        let m2 = match (self.m2, self.rate) {
            (Some(m), None) | (None, Some(m)) => m.0,
            (Some(_), Some(_)) => return Err(ConfigError::new(key, "give m2 or rate, not both")),
            (None, None) => return Err(ConfigError::new(key, "needs m2 (or rate)")),
        };
        let tc_form = self.umax.is_some() || self.dmax.is_some();
        let two_piece = self.m1.is_some() || self.d.is_some();
        if tc_form && two_piece {
            return Err(ConfigError::new(
                key,
                "give either m1/d/m2 or umax/dmax/rate",
            ));
        }
        if tc_form {
            let (Some(umax), Some(dmax)) = (self.umax, self.dmax) else {
                return Err(ConfigError::new(key, "umax and dmax go together"));
            };
            let dmax_ns = dur_ns(dmax.0);
            if dmax_ns == 0 || m2 == 0 {
                return Err(ConfigError::new(key, "dmax and rate must be positive"));
            }
            // tc-hfsc: the first slope delivers umax within dmax if that is steeper than
            // the rate; otherwise the curve is flat until dmax - umax/rate.
            let m1 = (umax.0 as u128 * 8 * 1_000_000_000 / dmax_ns as u128) as u64;
            return Ok(if m1 > m2 {
                ServiceCurve { m1, d: dmax_ns, m2 }
            } else {
                let t = Rate(m2).tx_nanos(umax.0);
                ServiceCurve {
                    m1: 0,
                    d: dmax_ns.saturating_sub(t),
                    m2,
                }
            });
        }
        match (self.m1, self.d) {
            (None, None) => Ok(ServiceCurve { m1: m2, d: 0, m2 }),
            (Some(m1), Some(d)) => Ok(ServiceCurve {
                m1: m1.0,
                d: dur_ns(d.0),
                m2,
            }),
            _ => Err(ConfigError::new(key, "m1 and d go together")),
        }
    }
}

/// One class of the tree.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HfscClassConfig {
    /// Unique name; a leaf's name is also the classifier class it takes, unless `classes`
    /// says otherwise.
    pub name: String,
    /// Parent class (none: a child of the implicit root).
    #[serde(default)]
    pub parent: Option<String>,
    /// Real-time curve (leaves only).
    #[serde(default)]
    pub rt: Option<CurveConfig>,
    /// Link-share curve.
    #[serde(default)]
    pub ls: Option<CurveConfig>,
    /// Upper-limit curve.
    #[serde(default)]
    pub ul: Option<CurveConfig>,
    /// Shorthand for the same `rt` and `ls` (tc's `sc`).
    #[serde(default)]
    pub sc: Option<CurveConfig>,
    /// Classifier classes this leaf takes (default: its own name).
    #[serde(default)]
    pub classes: Option<Vec<String>>,
    /// The leaf's discipline (default: a 1000-packet FIFO). Leaves only.
    #[serde(default)]
    pub queue: Option<Box<QdiscConfig>>,
}

impl TreeClass for HfscClassConfig {
    fn spec(&self) -> ClassSpec<'_> {
        let (parent, queue) = (self.parent.as_deref(), self.queue.as_deref());
        ClassSpec::new(&self.name, parent, self.classes.as_deref(), queue)
    }
}

/// HFSC parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HfscConfig {
    /// The classes (any order).
    pub classes: Vec<HfscClassConfig>,
    /// The leaf for unclassified packets and classes no leaf takes (none: dropped as
    /// `unclassified`).
    #[serde(default)]
    pub default: Option<String>,
    /// How packets are charged: `"atm"`, a preset (`"llc_snap_routed"`) or a table.
    #[serde(default)]
    pub linklayer: LinkLayerConfig,
    /// Per-packet overhead bytes (tc's `overhead`; overrides the link layer's).
    #[serde(default)]
    pub overhead: Option<i32>,
    /// Minimum packet unit (tc's `mpu`; overrides the link layer's).
    #[serde(default)]
    pub mpu: Option<u32>,
}

const INF: u64 = u64::MAX;

/// Bytes served in `x` ns at `m` bit/s (rounded down).
#[inline]
fn seg_x2y(x: u64, m: u64) -> u64 {
    u64::try_from(x as u128 * m as u128 / 8_000_000_000).unwrap_or(INF)
}

/// Nanoseconds to serve `y` bytes at `m` bit/s (rounded up; infinite at slope 0).
#[inline]
fn seg_y2x(y: u64, m: u64) -> u64 {
    if y == 0 {
        0
    } else if m == 0 {
        INF
    } else {
        u64::try_from((y as u128 * 8_000_000_000).div_ceil(m as u128)).unwrap_or(INF)
    }
}

/// A runtime service curve: the curve anchored at (`x` ns, `y` bytes), slope `m1` for `dx`
/// ns (`dy` bytes), then `m2`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Rtsc {
    /// Anchor time, ns.
    x: u64,
    /// Anchor service, bytes.
    y: u64,
    /// First slope, bit/s.
    m1: u64,
    /// Length of the first segment, ns, and the bytes it covers.
    dx: u64,
    dy: u64,
    /// Second slope, bit/s.
    m2: u64,
}

impl Rtsc {
    fn new(sc: ServiceCurve, x: u64, y: u64) -> Rtsc {
        Rtsc {
            x,
            y,
            m1: sc.m1,
            dx: sc.d,
            dy: seg_x2y(sc.d, sc.m1),
            m2: sc.m2,
        }
    }

    /// Service (bytes) by time `x`.
    fn x2y(&self, x: u64) -> u64 {
        if x <= self.x {
            self.y
        } else if x <= self.x.saturating_add(self.dx) {
            self.y.saturating_add(seg_x2y(x - self.x, self.m1))
        } else {
            self.y
                .saturating_add(self.dy)
                .saturating_add(seg_x2y(x - self.x - self.dx, self.m2))
        }
    }

    /// The time by which `y` bytes have been served.
    fn y2x(&self, y: u64) -> u64 {
        if y < self.y {
            self.x
        } else if y <= self.y.saturating_add(self.dy) {
            if self.dy == 0 {
                self.x.saturating_add(self.dx)
            } else {
                self.x.saturating_add(seg_y2x(y - self.y, self.m1))
            }
        } else {
            self.x
                .saturating_add(self.dx)
                .saturating_add(seg_y2x(y - self.y - self.dy, self.m2))
        }
    }

    /// Become the minimum of this curve and `sc` started at (`x`, `y`): the update at the
    /// start of a backlogged period (the paper's eq. for the deadline curve).
    fn min_with(&mut self, sc: ServiceCurve, x: u64, y: u64) {
        if sc.m1 <= sc.m2 {
            // Convex (or linear): the curves cross at most once, at the anchor.
            if self.x2y(x) < y {
                return; // the current curve is below: keep it
            }
            *self = Rtsc::new(sc, x, y);
            return;
        }
        // Concave.
        let y1 = self.x2y(x);
        if y1 <= y {
            return; // the current curve is below the new one everywhere
        }
        let new = Rtsc::new(sc, x, y);
        if self.x2y(x.saturating_add(new.dx)) >= y.saturating_add(new.dy) {
            *self = new; // the new curve is below everywhere
            return;
        }
        // They cross during the new curve's first segment: follow the new curve's
        // steep part only until it meets the current curve's second segment.
        let mut dx = u64::try_from((y1 - y) as u128 * 8_000_000_000 / (sc.m1 - sc.m2) as u128)
            .unwrap_or(INF);
        let cur_end = self.x.saturating_add(self.dx);
        if cur_end > x {
            dx = dx.saturating_add(cur_end - x);
        }
        *self = Rtsc {
            x,
            y,
            m1: sc.m1,
            dx,
            dy: seg_x2y(dx, sc.m1),
            m2: sc.m2,
        };
    }
}

/// Counters of one class.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HfscClassCounters {
    /// Packets sent through this class (inner: its subtree's).
    pub packets: u64,
    /// Wire bytes sent through this class (all service: the curves' `total`).
    pub wire_bytes: u64,
    /// Wire bytes a leaf sent by real-time service (the curves' `cumul`).
    pub rt_wire_bytes: u64,
}

struct Leaf<P> {
    q: Box<dyn Qdisc<P>>,
    /// The head packet, taken out of `q` (still queued as far as HFSC is concerned).
    head: Option<P>,
    /// When `q` said it would have a packet (a shaping child discipline).
    wait: Option<Instant>,
}

/// One class of the hierarchy. The field names follow the HFSC paper (Stoica, Zhang & Ng,
/// SIGCOMM 1997) and the BSD/Linux implementations, so the three can be read side by side.
struct Class<P> {
    name: String,
    /// Index of the parent class (the root is its own parent).
    parent: usize,
    children: Vec<usize>,
    /// Real-time, link-sharing and upper-limit service curves (absent: not configured).
    rsc: Option<ServiceCurve>,
    fsc: Option<ServiceCurve>,
    usc: Option<ServiceCurve>,
    /// The queue of a leaf class; `None` for interior classes.
    leaf: Option<Leaf<P>>,
    // --- real time
    /// Wire bytes served by the real-time criterion.
    cumul: u64,
    /// The deadline curve and the eligible curve (derived from `rsc`).
    deadline: Rtsc,
    eligible: Rtsc,
    /// Eligible time and deadline of the head packet, ns.
    e: u64,
    d: u64,
    /// Whether the class is in the real-time (eligible) list.
    rt_active: bool,
    // --- link sharing
    /// Wire bytes served in total (both criteria).
    total: u64,
    /// The virtual curve (derived from `fsc`) mapping service to virtual time.
    virt: Rtsc,
    /// Virtual time of the class, and the adjustment that keeps siblings' virtual times
    /// close when a class becomes active again.
    vt: u64,
    vtadj: u64,
    /// Number of active descendants (leaves with backlog below this class).
    nactive: u32,
    /// Backlog periods: this class's, and its parent's when this one started.
    vtperiod: u64,
    parentperiod: u64,
    /// Smallest virtual time among the active children, and the offset that carries the
    /// children's virtual times across the parent's backlog periods.
    cvtmin: u64,
    cvtoff: u64,
    // --- upper limit
    /// The upper-limit curve (derived from `usc`).
    ulimit: Rtsc,
    /// The class's own fit time (when `usc` next allows it to send), ns.
    myf: u64,
    /// Smallest fit time among the active children, ns.
    cfmin: u64,
    /// Fit time: the later of `myf` and `cfmin`, ns.
    f: u64,
    counters: HfscClassCounters,
}

const ROOT: usize = 0;

/// The HFSC scheduler.
pub struct Hfsc<P> {
    /// Index 0 is the implicit root; configured classes follow in order.
    classes: Vec<Class<P>>,
    leaf_of_class: Vec<Option<usize>>,
    default: Option<usize>,
    ll: LinkLayer,
    stats: QdiscStats,
}

impl<P: Pkt + Send + 'static> Hfsc<P> {
    /// Build and validate; classifier class names are resolved through `ctx`.
    pub fn new(cfg: &HfscConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        let specs = tree::specs(&cfg.classes);
        let tree = Tree::new(&specs, &Limits::new("hfsc", 256, None))?;
        let key = |i: usize, f: &str| format!("hfsc.classes[{i}].{f}");
        // Configured class i is class i + 1 here; index 0 is the implicit root, parent of
        // the configured roots.
        let parent: Vec<usize> = std::iter::once(ROOT)
            .chain(tree.parent.iter().map(|p| p.map_or(ROOT, |p| p + 1)))
            .collect();
        let root_children: Vec<usize> = (0..specs.len())
            .filter(|&i| tree.parent[i].is_none())
            .map(|i| i + 1)
            .collect();
        let children: Vec<Vec<usize>> = std::iter::once(root_children)
            .chain(
                tree.children
                    .iter()
                    .map(|c| c.iter().map(|&k| k + 1).collect()),
            )
            .collect();
        let blank = |name: String, parent: usize, children: Vec<usize>| Class {
            name,
            parent,
            children,
            rsc: None,
            fsc: None,
            usc: None,
            leaf: None,
            cumul: 0,
            deadline: Rtsc::new(ServiceCurve { m1: 0, d: 0, m2: 0 }, 0, 0),
            eligible: Rtsc::new(ServiceCurve { m1: 0, d: 0, m2: 0 }, 0, 0),
            e: 0,
            d: 0,
            rt_active: false,
            total: 0,
            virt: Rtsc::new(ServiceCurve { m1: 0, d: 0, m2: 0 }, 0, 0),
            vt: 0,
            vtadj: 0,
            nactive: 0,
            vtperiod: 0,
            parentperiod: 0,
            cvtmin: 0,
            cvtoff: 0,
            ulimit: Rtsc::new(ServiceCurve { m1: 0, d: 0, m2: 0 }, 0, 0),
            myf: 0,
            cfmin: 0,
            f: 0,
            counters: HfscClassCounters::default(),
        };
        let mut classes = vec![blank("(root)".into(), ROOT, children[ROOT].clone())];
        for (i, c) in cfg.classes.iter().enumerate() {
            let is_leaf = children[i + 1].is_empty();
            let mut cl = blank(c.name.clone(), parent[i + 1], children[i + 1].clone());
            let curve = |v: &Option<CurveConfig>, f: &str| {
                v.as_ref().map(|x| x.curve(&key(i, f))).transpose()
            };
            let sc = curve(&c.sc, "sc")?;
            if sc.is_some() && (c.rt.is_some() || c.ls.is_some()) {
                return Err(ConfigError::new(
                    key(i, "sc"),
                    "sc sets both rt and ls: give sc, or rt and ls",
                ));
            }
            cl.rsc = curve(&c.rt, "rt")?.or(sc);
            cl.fsc = curve(&c.ls, "ls")?.or(sc);
            cl.usc = curve(&c.ul, "ul")?;
            for (s, f) in [(cl.rsc, "rt"), (cl.fsc, "ls"), (cl.usc, "ul")] {
                if s.is_some_and(|s| s.m2 == 0 && s.m1 == 0) {
                    return Err(ConfigError::new(key(i, f), "the curve is zero"));
                }
            }
            if cl.rsc.is_some() && !is_leaf {
                return Err(ConfigError::new(
                    key(i, "rt"),
                    format!("'{}' has children; real-time curves are for leaves", c.name),
                ));
            }
            if !is_leaf && cl.fsc.is_none() {
                return Err(ConfigError::new(
                    key(i, "ls"),
                    format!("'{}' has children and needs a link-share curve", c.name),
                ));
            }
            if is_leaf && cl.fsc.is_none() && cl.rsc.is_none() {
                return Err(ConfigError::new(
                    key(i, "rt"),
                    format!("leaf '{}' needs a real-time or link-share curve", c.name),
                ));
            }
            if cl.usc.is_some() && cl.fsc.is_none() {
                return Err(ConfigError::new(
                    key(i, "ul"),
                    "an upper limit bounds link-share service: give ls too",
                ));
            }
            if is_leaf {
                // The leaf's discipline sees the class's long-term rate as its link rate
                // (CoDel's low-rate target): the real-time m2, else the link-share m2.
                let rate = [cl.rsc, cl.fsc]
                    .into_iter()
                    .flatten()
                    .map(|s| s.m2)
                    .find(|&m2| m2 > 0)
                    .map(Rate)
                    .or(ctx.link_rate);
                let q = tree.leaf_queue(i, &specs[i], rate, ctx, |q, c| q.build(c))?;
                cl.leaf = Some(Leaf {
                    q,
                    head: None,
                    wait: None,
                });
            }
            if let Some(s) = cl.rsc {
                cl.deadline = Rtsc::new(s, 0, 0);
                cl.eligible = cl.deadline;
            }
            if let Some(s) = cl.fsc {
                cl.virt = Rtsc::new(s, 0, 0);
            }
            if let Some(s) = cl.usc {
                cl.ulimit = Rtsc::new(s, 0, 0);
            }
            classes.push(cl);
        }
        let leaf_of_class = tree
            .leaf_of_class(&specs, ctx)?
            .into_iter()
            .map(|l| l.map(|i| i + 1))
            .collect();
        let default = tree.default_leaf(cfg.default.as_deref())?.map(|i| i + 1);
        Ok(Hfsc {
            classes,
            leaf_of_class,
            default,
            ll: cfg.linklayer.with_overrides(cfg.overhead, cfg.mpu).build(),
            stats: QdiscStats::default(),
        })
    }

    /// The link layer packets are charged with.
    pub fn linklayer(&self) -> LinkLayer {
        self.ll
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.classes
            .iter()
            .skip(1)
            .position(|c| c.name == name)
            .map(|i| i + 1)
    }

    /// Counters of class `name`.
    pub fn class_counters(&self, name: &str) -> Option<HfscClassCounters> {
        self.index(name).map(|i| self.classes[i].counters)
    }

    /// Eligible time and deadline (ns) of a backlogged real-time leaf.
    pub fn class_deadline(&self, name: &str) -> Option<(u64, u64)> {
        self.index(name)
            .map(|i| &self.classes[i])
            .filter(|c| c.rt_active)
            .map(|c| (c.e, c.d))
    }

    fn leaf_for(&self, p: &P) -> Option<usize> {
        let c = p.class();
        if c.is_some() {
            if let Some(Some(l)) = self.leaf_of_class.get(c.0 as usize) {
                return Some(*l);
            }
        }
        self.default
    }

    fn wire(&self, p: &P) -> u64 {
        self.ll.wire_len(p.ip_len()) as u64
    }

    /// Take the next packet of leaf `l`'s discipline into its head slot if the slot is
    /// empty. Returns the new head's wire length.
    fn pull(&mut self, l: usize, now: Instant, drops: &mut Drops<P>) -> Option<u64> {
        let leaf = self.classes[l].leaf.as_mut().expect("leaf");
        if leaf.head.is_none() && leaf.q.backlog().packets > 0 {
            let mark = drops.len();
            leaf.wait = None;
            match leaf.q.dequeue(now, drops) {
                Dequeued::Packet(p) => leaf.head = Some(p),
                Dequeued::NotBefore(t) => leaf.wait = Some(t),
                Dequeued::Empty => {}
            }
            for d in drops.since(mark) {
                self.stats.on_remove(d.verdict, d.pkt.ip_len());
            }
        }
        let leaf = self.classes[l].leaf.as_ref().expect("leaf");
        leaf.head
            .as_ref()
            .map(|p| self.ll.wire_len(p.ip_len()) as u64)
    }

    /// A leaf got a head packet of `len` wire bytes after being empty.
    fn activate(&mut self, l: usize, len: u64, now: u64) {
        if let Some(rsc) = self.classes[l].rsc {
            let c = &mut self.classes[l];
            c.deadline.min_with(rsc, now, c.cumul);
            c.eligible = c.deadline;
            if rsc.m1 > rsc.m2 {
                // Concave: the eligible curve is the linear m2 part alone, so real-time
                // service never runs ahead of the long-term rate.
                c.eligible.dx = 0;
                c.eligible.dy = 0;
            }
            c.e = c.eligible.y2x(c.cumul);
            c.d = c.deadline.y2x(c.cumul.saturating_add(len));
            c.rt_active = true;
        }
        if self.classes[l].fsc.is_some() {
            self.init_vf(l, now);
        }
    }

    /// Link-sharing activation of leaf `l` and of the ancestors that become active with it.
    fn init_vf(&mut self, l: usize, now: u64) {
        let mut go_active = true;
        let mut c = l;
        while c != ROOT {
            let p = self.classes[c].parent;
            let was = self.classes[c].nactive;
            if go_active {
                self.classes[c].nactive += 1;
            }
            if go_active && was == 0 {
                // Start of a backlogged period of c: place its virtual time among the
                // active siblings (between the smallest served and the largest).
                let max_sibling = self.classes[p]
                    .children
                    .iter()
                    .filter(|&&s| {
                        s != c && self.classes[s].nactive > 0 && self.classes[s].fsc.is_some()
                    })
                    .map(|&s| self.classes[s].vt)
                    .max();
                match max_sibling {
                    Some(mut vt) => {
                        let cvtmin = self.classes[p].cvtmin;
                        if cvtmin != 0 {
                            vt = (cvtmin + vt) / 2;
                        }
                        let pp = self.classes[p].vtperiod;
                        let cl = &mut self.classes[c];
                        if pp != cl.parentperiod || vt > cl.vt {
                            cl.vt = vt;
                        }
                    }
                    None => {
                        // The first active child of a new backlogged period of p: start
                        // from the largest virtual time its children reached.
                        self.classes[c].vt = self.classes[p].cvtoff;
                        self.classes[p].cvtmin = 0;
                    }
                }
                let p_active = self.classes[p].nactive > 0;
                let pp = self.classes[p].vtperiod;
                let cl = &mut self.classes[c];
                let fsc = cl.fsc.expect("link-share class");
                cl.virt.min_with(fsc, cl.vt, cl.total);
                cl.vtadj = 0;
                cl.vtperiod += 1;
                cl.parentperiod = pp + if p_active { 0 } else { 1 };
                cl.f = 0;
                if let Some(usc) = cl.usc {
                    cl.ulimit.min_with(usc, now, cl.total);
                    cl.myf = cl.ulimit.y2x(cl.total);
                }
            } else {
                go_active = false;
            }
            let cl = &mut self.classes[c];
            cl.f = cl.myf.max(cl.cfmin);
            self.update_cfmin(p);
            c = p;
        }
    }

    fn update_cfmin(&mut self, p: usize) {
        let m = self.classes[p]
            .children
            .iter()
            .filter(|&&s| self.classes[s].nactive > 0 && self.classes[s].fsc.is_some())
            .map(|&s| self.classes[s].f)
            .min()
            .unwrap_or(0);
        self.classes[p].cfmin = m;
    }

    /// Account `len` wire bytes of service of leaf `l` up the tree; `go_passive` when the
    /// leaf has nothing left.
    fn update_vf(&mut self, l: usize, len: u64, go_passive: bool) {
        let mut go_passive = go_passive && self.classes[l].fsc.is_some();
        let mut c = l;
        while c != ROOT {
            let p = self.classes[c].parent;
            let cl = &mut self.classes[c];
            cl.total = cl.total.saturating_add(len);
            cl.counters.packets += 1;
            cl.counters.wire_bytes += len;
            if cl.fsc.is_none() || cl.nactive == 0 {
                c = p;
                continue;
            }
            if go_passive {
                cl.nactive -= 1;
                go_passive = cl.nactive == 0;
            }
            cl.vt = cl.virt.y2x(cl.total).saturating_add(cl.vtadj);
            let cvtmin = self.classes[p].cvtmin;
            let cl = &mut self.classes[c];
            if cl.vt < cvtmin {
                // Skipped in the past (not fit): do not let it catch up in a burst.
                cl.vtadj += cvtmin - cl.vt;
                cl.vt = cvtmin;
            }
            if go_passive {
                let vt = cl.vt;
                let pc = &mut self.classes[p];
                pc.cvtoff = pc.cvtoff.max(vt);
                self.update_cfmin(p);
                c = p;
                continue;
            }
            if cl.usc.is_some() {
                cl.myf = cl.ulimit.y2x(cl.total);
            }
            cl.f = cl.myf.max(cl.cfmin);
            self.update_cfmin(p);
            c = p;
        }
    }

    /// The leaf link-sharing would serve at `now`: from the root, the fit child with the
    /// smallest virtual time.
    fn ls_select(&mut self, now: u64) -> Option<usize> {
        if self.classes[ROOT].cfmin > now {
            return None;
        }
        let mut c = ROOT;
        while self.classes[c].leaf.is_none() {
            let best = self.classes[c]
                .children
                .iter()
                .copied()
                .filter(|&s| {
                    let x = &self.classes[s];
                    x.fsc.is_some() && x.nactive > 0 && x.f <= now
                })
                .min_by_key(|&s| (self.classes[s].vt, s))?;
            let vt = self.classes[best].vt;
            let pc = &mut self.classes[c];
            if pc.cvtmin < vt {
                pc.cvtmin = vt;
            }
            c = best;
        }
        Some(c)
    }

    /// The real-time leaf to serve at `now`: eligible, earliest deadline.
    fn rt_select(&self, now: u64) -> Option<usize> {
        self.classes
            .iter()
            .enumerate()
            .filter(|(_, c)| c.rt_active && c.e <= now)
            .min_by_key(|(i, c)| (c.d, *i))
            .map(|(i, _)| i)
    }

    /// Fill empty head slots; activate leaves that got a head.
    fn pull_all(&mut self, now: Instant, drops: &mut Drops<P>) {
        for l in 1..self.classes.len() {
            let Some(leaf) = &self.classes[l].leaf else {
                continue;
            };
            if leaf.head.is_some() || leaf.q.backlog().packets == 0 {
                continue;
            }
            if let Some(len) = self.pull(l, now, drops) {
                self.activate(l, len, now.0);
            }
        }
    }
}

impl<P: Pkt + Send + 'static> Qdisc<P> for Hfsc<P> {
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let Some(l) = self.leaf_for(&pkt) else {
            self.stats
                .on_reject(Verdict::Dropped(DropReason::Unclassified));
            drops.reject(pkt, DropReason::Unclassified);
            return;
        };
        let mark = drops.len();
        self.classes[l]
            .leaf
            .as_mut()
            .expect("leaf")
            .q
            .enqueue(now, pkt, drops);
        self.stats.absorb(drops, mark, len);
        if self.classes[l].leaf.as_ref().expect("leaf").head.is_none() {
            if let Some(wl) = self.pull(l, now, drops) {
                self.activate(l, wl, now.0);
            }
        }
        debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        self.pull_all(now, drops);
        if self.stats.backlog.packets == 0 {
            return Dequeued::Empty;
        }
        let t = now.0;
        let (l, realtime) = match self.rt_select(t) {
            Some(l) => (l, true),
            None => match self.ls_select(t) {
                Some(l) => (l, false),
                None => {
                    // Nothing eligible or fit: the next eligible time, the next fit time,
                    // or a leaf discipline's own deadline.
                    let mut next = self
                        .classes
                        .iter()
                        .filter(|c| c.rt_active)
                        .map(|c| Instant(c.e))
                        .min();
                    if self.classes[ROOT]
                        .children
                        .iter()
                        .any(|&s| self.classes[s].nactive > 0)
                    {
                        next = earliest(next, Some(Instant(self.classes[ROOT].cfmin)));
                    }
                    next = earliest(next, self.poll_at());
                    for c in &self.classes {
                        if let Some(l) = c.leaf.as_ref().filter(|l| l.head.is_none()) {
                            next = earliest(next, l.wait);
                        }
                    }
                    return match next {
                        Some(x) => Dequeued::NotBefore(x.max(Instant(t + 1))),
                        None => Dequeued::Empty,
                    };
                }
            },
        };
        let p = self.classes[l]
            .leaf
            .as_mut()
            .expect("leaf")
            .head
            .take()
            .expect("selected leaves are backlogged");
        let len = self.wire(&p);
        let next = self.pull(l, now, drops);
        self.update_vf(l, len, next.is_none());
        let c = &mut self.classes[l];
        if realtime {
            c.cumul = c.cumul.saturating_add(len);
            c.counters.rt_wire_bytes += len;
        }
        match next {
            Some(nl) if c.rsc.is_some() => {
                if realtime {
                    c.e = c.eligible.y2x(c.cumul);
                }
                c.d = c.deadline.y2x(c.cumul.saturating_add(nl));
            }
            Some(_) => {}
            None => c.rt_active = false,
        }
        self.stats.on_dequeue(p.ip_len());
        debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
        Dequeued::Packet(p)
    }

    fn poll_at(&self) -> Option<Instant> {
        self.classes
            .iter()
            .filter_map(|c| c.leaf.as_ref())
            .fold(None, |a, l| earliest(a, l.q.poll_at()))
    }

    fn handle_timeout(&mut self, now: Instant, drops: &mut Drops<P>) {
        for c in self.classes.iter_mut() {
            let Some(leaf) = c.leaf.as_mut() else {
                continue;
            };
            let mark = drops.len();
            leaf.q.handle_timeout(now, drops);
            for d in drops.since(mark) {
                self.stats.on_remove(d.verdict, d.pkt.ip_len());
            }
        }
        self.pull_all(now, drops);
    }

    fn handle_observation(&mut self, now: Instant, obs: &PeerObservation) {
        for c in self.classes.iter_mut() {
            if let Some(leaf) = c.leaf.as_mut() {
                leaf.q.handle_observation(now, obs);
            }
        }
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn child_stats(&self) -> Vec<(String, QdiscStats)> {
        self.classes
            .iter()
            .filter_map(|c| {
                c.leaf
                    .as_ref()
                    .map(|l| (c.name.clone(), l.q.stats().clone()))
            })
            .collect()
    }

    fn wants_idle_dequeue(&self) -> bool {
        self.classes
            .iter()
            .any(|c| c.leaf.as_ref().is_some_and(|l| l.q.wants_idle_dequeue()))
    }

    fn flow_entries(&self) -> u64 {
        self.classes
            .iter()
            .filter_map(|c| c.leaf.as_ref())
            .map(|l| l.q.flow_entries())
            .sum()
    }

    fn kind(&self) -> &'static str {
        "hfsc"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SC: fn(u64, u64, u64) -> ServiceCurve = |m1, d, m2| ServiceCurve { m1, d, m2 };

    #[test]
    fn curve_arithmetic() {
        // 8 Mbit/s is one byte per microsecond.
        assert_eq!(seg_x2y(1_000, 8_000_000), 1);
        assert_eq!(seg_y2x(1, 8_000_000), 1_000);
        assert_eq!(seg_y2x(1, 3), 2_666_666_667);
        assert_eq!(seg_y2x(0, 0), 0);
        assert_eq!(seg_y2x(1, 0), INF);
        // Concave: 1 Mbit/s for 10 ms (1250 B), then 100 kbit/s.
        let r = Rtsc::new(SC(1_000_000, 10_000_000, 100_000), 1_000, 500);
        assert_eq!(r.x2y(1_000), 500);
        assert_eq!(r.x2y(11_000_000 + 1_000 - 1_000_000), 500 + 1_250);
        assert_eq!(r.x2y(1_000 + 10_000_000 + 80_000_000), 500 + 1_250 + 1_000);
        assert_eq!(r.y2x(500 + 1_250), 1_000 + 10_000_000);
        assert_eq!(r.y2x(500 + 1_250 + 1_000), 1_000 + 90_000_000);
        assert_eq!(r.y2x(100), 1_000);
        // Delay then rate (m1 = 0): nothing before d.
        let r = Rtsc::new(SC(0, 5_000_000, 8_000_000), 0, 0);
        assert_eq!(r.y2x(0), 5_000_000);
        assert_eq!(r.y2x(1), 5_001_000);
    }

    #[test]
    fn runtime_curve_minimum() {
        let sc = SC(1_000_000, 10_000_000, 100_000); // concave
                                                     // A fresh period long after the last: the new curve is below everywhere.
        let mut r = Rtsc::new(sc, 0, 0);
        r.min_with(sc, 1_000_000_000, 1_000);
        assert_eq!(r, Rtsc::new(sc, 1_000_000_000, 1_000));
        // A new period right away with no service: the old curve stays below.
        let mut r = Rtsc::new(sc, 0, 0);
        r.min_with(sc, 5_000_000, 625);
        assert_eq!(r, Rtsc::new(sc, 0, 0));
        // A new period 20 ms later having been served 1250 B: the old curve promised
        // 1250 + 1000 = 2250 B by 90 ms... at 20 ms it is at 1250 + 125 = 1375 > 1250, and
        // 10 ms later 1500 < 1250 + 1250: they cross. The new curve climbs at 1 Mbit/s
        // until it meets the old one's 100 kbit/s segment: (1375 - 1250) B / 900 kbit/s
        // = 1.11 ms.
        let mut r = Rtsc::new(sc, 0, 0);
        r.min_with(sc, 20_000_000, 1_250);
        assert_eq!((r.x, r.y), (20_000_000, 1_250));
        assert_eq!(r.dx, 1_111_111);
        assert_eq!(r.dy, 138);
        // Convex: keep the current curve when it is below at the anchor.
        let cv = SC(0, 10_000_000, 1_000_000);
        let mut r = Rtsc::new(cv, 0, 0);
        r.min_with(cv, 5_000_000, 10);
        assert_eq!(r, Rtsc::new(cv, 0, 0));
        r.min_with(cv, 50_000_000, 0);
        assert_eq!(r, Rtsc::new(cv, 50_000_000, 0));
    }

    #[test]
    fn tc_umax_dmax_form() {
        let c: CurveConfig =
            toml::from_str("umax = \"1500B\"\ndmax = \"10ms\"\nrate = \"100kbit\"").unwrap();
        assert_eq!(c.curve("x").unwrap(), SC(1_200_000, 10_000_000, 100_000));
        // umax/dmax below the rate: flat until dmax - umax/rate.
        let c: CurveConfig =
            toml::from_str("umax = \"100B\"\ndmax = \"10ms\"\nrate = \"1Mbit\"").unwrap();
        assert_eq!(c.curve("x").unwrap(), SC(0, 9_200_000, 1_000_000));
        for (src, needle) in [
            ("m1 = \"1Mbit\"", "m2"),
            ("m1 = \"1Mbit\"\nm2 = \"1Mbit\"", "m1 and d"),
            ("m2 = \"1Mbit\"\nrate = \"1Mbit\"", "not both"),
            ("umax = \"1B\"\nm2 = \"1Mbit\"", "umax and dmax"),
            (
                "umax = \"1B\"\ndmax = \"1ms\"\nd = \"1ms\"\nm1 = \"1Mbit\"\nm2 = \"1Mbit\"",
                "either",
            ),
        ] {
            let c: CurveConfig = toml::from_str(src).unwrap();
            let e = c.curve("x").unwrap_err().to_string();
            assert!(e.contains(needle), "{src}: {e}");
        }
    }
}
