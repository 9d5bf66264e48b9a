//! Hierarchical token bucket: a class tree with guaranteed rates, ceilings, priorities and
//! borrowing (Devera's HTB, as in Linux `sch_htb`).
//!
//! # Principles
//!
//! Every class has two token buckets kept in nanoseconds of transmission credit (integer,
//! as `sch_htb` does): `tokens` at its `rate` (at most `burst`) and `ctokens` at its `ceil`
//! (at most `cburst`). From them follows its explicit **mode** ([`ClassMode`]):
//!
//! * `CanSend` — `tokens ≥ 0` and `ctokens ≥ 0`: within its guaranteed rate;
//! * `MayBorrow` — `tokens < 0 ≤ ctokens`: over its rate, under its ceiling: it may send
//!   only by borrowing from an ancestor that is `CanSend`;
//! * `CantSend` — `ctokens < 0`: at its ceiling; neither it nor its descendants pass.
//!
//! Only leaves hold packets (each in its own child discipline). A backlogged leaf can send
//! when some class on its path to the root — itself or an ancestor, the **lender** — is
//! `CanSend` and every class below the lender is `MayBorrow`. Dequeue serves, as Linux
//! does, the lowest *level* first (a leaf within its own rate is level 0; lenders higher in
//! the tree come later) and, within a level, the highest priority (`prio` 0 first); leaves
//! of the same level and priority share by deficit round robin with their `quantum`. So
//! guaranteed rates always come first, and spare capacity goes to the highest priority
//! that may borrow it. Sending a packet charges its **wire size** (the configured
//! [`LinkLayer`]: ATM cells, PTM, overhead, mpu) to `ctokens` of every class on the path
//! and to `tokens` of the lender and the classes above it (borrowers keep their negative
//! rate tokens).
//!
//! The tree is small (a handful of classes on an access link), so dequeue scans the
//! backlogged leaves instead of keeping Linux's per-level red-black trees. Deliberately not
//! modelled: the hysteresis option, the direct queue for unclassified packets (they go to
//! `default`, or are dropped as [`DropReason::Unclassified`] when there is none), and
//! HTB's own rate estimators.
//!
//! # Worked example (the ADSL paper's tree)
//!
//! ```toml
//! qdisc = { kind = "htb", default = "default", linklayer = "llc_snap_routed", classes = [
//!   { name = "root",        rate = "432kbit" },
//!   { name = "ack",         parent = "root",  rate = "380kbit",  prio = 0 },
//!   { name = "interactive", parent = "root",  rate = "15.6kbit", ceil = "86kbit",  prio = 0 },
//!   { name = "bulk",        parent = "root",  rate = "36.4kbit", ceil = "432kbit" },
//!   { name = "good",        parent = "bulk",  rate = "18.2kbit", ceil = "346kbit", prio = 3 },
//!   { name = "default",     parent = "bulk",  rate = "13kbit",   ceil = "432kbit", prio = 5 },
//!   { name = "bad",         parent = "bulk",  rate = "5.2kbit",  ceil = "432kbit", prio = 7 },
//! ] }
//! ```
//!
//! A 40-byte ACK costs 2 ATM cells = 106 wire bytes: at the ack class's 380 kbit/s that is
//! `106 × 8 / 380 000 s` = 2.23 ms of `tokens`, so the class sends at most 448 ACKs/s within
//! its rate; the same ACK charged as 40 IP bytes would cost 0.84 ms and let 1 187 ACKs/s
//! through — 2.65 times what the line can carry.

use super::leaf::Leaf;
use super::tree::{self, ClassSpec, Limits, Tree, TreeClass};
use super::{
    Backlog, BuildCtx, ConfigError, Dequeued, DropReason, Drops, PeerObservation, Qdisc,
    QdiscConfig, QdiscStats, Verdict,
};
use crate::overhead::{LinkLayer, LinkLayerConfig};
use crate::packet::Pkt;
use crate::time::{earliest, Duration, Instant};
use crate::units::{Bytes, Rate};
use serde::Deserialize;

/// Deepest tree (as Linux's `TC_HTB_MAXDEPTH`).
pub const MAX_DEPTH: usize = 8;
/// Number of priorities (0 = highest).
pub const PRIOS: u8 = 8;
/// Most classes in a tree (a class index fits a byte; dequeue keeps a bit per class).
const MAX_CLASSES: usize = 64;
/// No leaf served yet at a (level, prio).
const NO_LEAF: u8 = u8::MAX;
/// How far a class's buckets may go negative (Linux's `mbuffer`): 60 s of credit.
const MBUFFER_NS: i64 = 60_000_000_000;

/// The explicit mode of a class (Linux `enum htb_cmode`).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum ClassMode {
    /// At its ceiling: neither it nor its descendants may send.
    CantSend,
    /// Over its rate but under its ceiling: may send by borrowing from an ancestor.
    MayBorrow,
    /// Within its rate: may send, and lend to its descendants.
    CanSend,
}

/// One class of the tree.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HtbClassConfig {
    /// Unique name. A leaf's name is also the classifier class it takes, unless `classes`
    /// says otherwise.
    pub name: String,
    /// The parent class (none: a root).
    #[serde(default)]
    pub parent: Option<String>,
    /// Guaranteed rate.
    pub rate: Rate,
    /// Ceiling (default: `rate`, no borrowing).
    #[serde(default)]
    pub ceil: Option<Rate>,
    /// Bucket depth at `rate` (default: 1 ms at `rate` + 1600 bytes, as tc computes it).
    #[serde(default)]
    pub burst: Option<Bytes>,
    /// Bucket depth at `ceil` (default: 1 ms at `ceil` + 1600 bytes).
    #[serde(default)]
    pub cburst: Option<Bytes>,
    /// Priority, 0 (highest) to 7 (default 0).
    #[serde(default)]
    pub prio: u8,
    /// Deficit round-robin quantum among leaves of one level and priority (default:
    /// `rate / r2q` in bytes per second, clamped to 1000..=200000 as Linux does).
    #[serde(default)]
    pub quantum: Option<Bytes>,
    /// Classifier classes this leaf takes (default: its own name).
    #[serde(default)]
    pub classes: Option<Vec<String>>,
    /// The leaf's discipline (default: a 1000-packet FIFO). Leaves only.
    #[serde(default)]
    pub queue: Option<Box<QdiscConfig>>,
}

impl TreeClass for HtbClassConfig {
    fn spec(&self) -> ClassSpec<'_> {
        let (parent, queue) = (self.parent.as_deref(), self.queue.as_deref());
        ClassSpec::new(&self.name, parent, self.classes.as_deref(), queue)
    }
}

/// HTB parameters.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HtbConfig {
    /// The classes, parents before or after children (any order).
    pub classes: Vec<HtbClassConfig>,
    /// The leaf for unclassified packets and classes no leaf takes (none: such packets
    /// are dropped as `unclassified`).
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
    /// Rate-to-quantum divisor for default quanta (tc's `r2q`, default 10).
    #[serde(default = "default_r2q")]
    pub r2q: u32,
    /// Ingress shaping: the tree sits after the line it shapes, so a packet its leaves
    /// discard has already crossed the line and is charged like a sent one (CAKE's
    /// `ingress`). Default false.
    #[serde(default)]
    pub ingress: bool,
}

fn default_r2q() -> u32 {
    10
}

/// Counters of one class beyond its discipline's.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HtbClassCounters {
    /// Packets sent through this class (leaf: its own; inner: its subtree's).
    pub packets: u64,
    /// IP bytes sent through this class.
    pub bytes: u64,
    /// Wire bytes charged (after the link layer).
    pub wire_bytes: u64,
    /// Packets this class sent while borrowing (it was below the lender).
    pub borrowed: u64,
    /// Packets this class lent for (it was the lender of a descendant).
    pub lent: u64,
}

/// A class's state: what dequeue and the charge read and write per packet (its name is
/// kept apart, in [`Htb::names`]; indices fit a byte, the tree has at most 64 classes).
/// Laid out in that order (`repr(C)`, each class on its own cache lines): what the search
/// for a lender reads first (tokens, the last refill, the bucket depths, the round robin's
/// deficit: one line), then the costs and the counters the charge writes, the leaf's
/// discipline last.
#[repr(C, align(64))]
struct Class<P> {
    parent: Option<u8>,
    /// The level it serves at as a lender ([`Htb::level`]).
    level: u8,
    prio: u8,
    tokens: i64,
    ctokens: i64,
    t_c: Instant,
    buffer_ns: i64,
    cbuffer_ns: i64,
    quantum: i64,
    deficit: i64,
    /// The costs of a wire length at `rate` and at `ceil` (one cost serves both when the
    /// two rates are equal).
    rate: TxCost,
    ceil: TxCost,
    counters: HtbClassCounters,
    /// The leaf's discipline, in place (leaves only).
    leaf: Option<Leaf<P>>,
}

impl<P> Class<P> {
    /// Tokens and ctokens as of `now` (without committing the refill).
    fn toks_at(&self, now: Instant) -> (i64, i64) {
        let d = elapsed(self.t_c, now);
        (
            self.tokens.saturating_add(d).min(self.buffer_ns),
            self.ctokens.saturating_add(d).min(self.cbuffer_ns),
        )
    }

    fn mode_at(&self, now: Instant) -> ClassMode {
        let (t, c) = self.toks_at(now);
        if c < 0 {
            ClassMode::CantSend
        } else if t >= 0 {
            ClassMode::CanSend
        } else {
            ClassMode::MayBorrow
        }
    }
}

/// [`Rate::tx_nanos`] at one rate as a signed cost (saturating at `i64::MAX`), without a
/// division: the rate's reciprocal is taken once, when the class is built, and a multiply
/// and one correction step give the exact quotient (division by an invariant integer).
/// Every cost is bit-identical to the division's; a property test compares them.
#[derive(Clone, Copy, Debug)]
struct TxCost {
    /// Bits per second (`> 0` for the fast path).
    rate: u64,
    /// `⌊(2⁶⁴ − 1) / rate⌋`.
    inv: u64,
    /// Lengths below this take the fast path: those whose bit-nanoseconds fit 64 bits
    /// (none when the rate is 0).
    fast_below: u64,
}

impl TxCost {
    /// Bit-nanoseconds per byte.
    const NS_BITS: u64 = 8_000_000_000;

    fn new(r: Rate) -> Self {
        match r.0 {
            0 => TxCost {
                rate: 0,
                inv: 0,
                fast_below: 0,
            },
            rate => TxCost {
                rate,
                inv: u64::MAX / rate,
                fast_below: u64::MAX / Self::NS_BITS + 1,
            },
        }
    }

    /// Nanoseconds to send `bytes` at the rate, rounded up, as `i64` (saturating).
    #[inline]
    fn nanos(self, bytes: u64) -> i64 {
        if bytes >= self.fast_below {
            return Self::slow(self.rate, bytes);
        }
        // n < 2⁶⁴ and inv·rate ∈ (2⁶⁴ − 1 − rate, 2⁶⁴ − 1], so n·inv/2⁶⁴ lies in
        // (n/rate − 1, n/rate): the estimate is the quotient or one below it.
        let n = bytes * Self::NS_BITS;
        let mut q = ((u128::from(n) * u128::from(self.inv)) >> 64) as u64;
        let mut r = n - q * self.rate;
        if r >= self.rate {
            q += 1;
            r -= self.rate;
        }
        // Rounded up: at most n, so no overflow; saturated as the division's path is.
        i64::try_from(q + u64::from(r != 0)).unwrap_or(i64::MAX)
    }

    #[cold]
    fn slow(rate: u64, bytes: u64) -> i64 {
        i64::try_from(Rate(rate).tx_nanos(bytes)).unwrap_or(i64::MAX)
    }
}

#[inline]
fn elapsed(from: Instant, to: Instant) -> i64 {
    to.0.saturating_sub(from.0).min(MBUFFER_NS as u64) as i64
}

/// A hierarchical token bucket scheduler. Laid out (`repr(C)`) with what every packet reads
/// first (the classes, the classifier classes' leaves, the backlogged leaves, the flags, the
/// link layer, the per-packet counters, the round robin) and the names last.
#[repr(C)]
pub struct Htb<P> {
    classes: Vec<Class<P>>,
    /// Leaf index for each classifier class id (`None`: not taken by any leaf).
    leaf_of_class: Vec<Option<usize>>,
    default: Option<usize>,
    /// The leaves that hold packets (bit i: class i), so that dequeue visits only them.
    backlogged: u64,
    ingress: bool,
    /// Whether some leaf has timers, watches the other direction, wants to see the link
    /// go idle, or reads headers (the leaves are fixed when the tree is built).
    timed: bool,
    observes: bool,
    idle: bool,
    reads: bool,
    ll: LinkLayer,
    stats: QdiscStats,
    /// Round-robin position per (level, prio): the leaf served last (`NO_LEAF`: none yet).
    rr: [[u8; PRIOS as usize]; MAX_DEPTH + 1],
    /// The classes' names, in configuration order.
    names: Vec<String>,
}

impl<P: Pkt + Send + 'static> Htb<P> {
    /// Build and validate; classifier class names are resolved through `ctx`.
    pub fn new(cfg: &HtbConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        if cfg.r2q == 0 {
            return Err(ConfigError::new("htb.r2q", "must be positive"));
        }
        let specs = tree::specs(&cfg.classes);
        let tree = Tree::new(&specs, &Limits::new("htb", MAX_CLASSES, Some(MAX_DEPTH)))?;
        let n = specs.len();
        let key = |i: usize, f: &str| format!("htb.classes[{i}].{f}");
        let mut classes = Vec::with_capacity(n);
        for (i, c) in cfg.classes.iter().enumerate() {
            if c.rate.0 == 0 {
                return Err(ConfigError::new(key(i, "rate"), "must be positive"));
            }
            let ceil = c.ceil.unwrap_or(c.rate);
            if ceil < c.rate {
                return Err(ConfigError::new(
                    key(i, "ceil"),
                    format!(
                        "ceil {ceil} is below rate {} of class '{}' (ceil >= rate)",
                        c.rate, c.name
                    ),
                ));
            }
            if c.prio >= PRIOS {
                return Err(ConfigError::new(
                    key(i, "prio"),
                    format!("must be 0..={}", PRIOS - 1),
                ));
            }
            let default_burst = |r: Rate| r.bytes_in(Duration::from_millis(1)) + 1600;
            let burst = c
                .burst
                .map(|b| b.0)
                .unwrap_or_else(|| default_burst(c.rate));
            let cburst = c.cburst.map(|b| b.0).unwrap_or_else(|| default_burst(ceil));
            let to_ns = |r: Rate, b: u64| i64::try_from(r.tx_nanos(b)).unwrap_or(i64::MAX);
            let quantum = match c.quantum {
                Some(q) if q.0 == 0 => {
                    return Err(ConfigError::new(key(i, "quantum"), "must be positive"))
                }
                Some(q) => q.0 as i64,
                None => (c.rate.0 / 8 / cfg.r2q as u64).clamp(1000, 200_000) as i64,
            };
            // The leaf's discipline sees the class's guaranteed rate as its link rate.
            let leaf = match tree.is_leaf(i) {
                true => Some(tree.leaf_queue(i, &specs[i], Some(c.rate), ctx, Leaf::build)?),
                false => None,
            };
            let (buffer_ns, cbuffer_ns) = (to_ns(c.rate, burst), to_ns(ceil, cburst));
            classes.push(Class {
                parent: tree.parent[i].map(|p| p as u8),
                level: match tree.is_leaf(i) {
                    true => 0,
                    false => (MAX_DEPTH - tree.depth[i]) as u8,
                },
                rate: TxCost::new(c.rate),
                ceil: TxCost::new(ceil),
                buffer_ns,
                cbuffer_ns,
                tokens: buffer_ns,
                ctokens: cbuffer_ns,
                t_c: Instant::ZERO,
                prio: c.prio,
                quantum,
                deficit: quantum,
                leaf,
                counters: HtbClassCounters::default(),
            });
        }
        let leaf_of_class = tree.leaf_of_class(&specs, ctx)?;
        let default = tree.default_leaf(cfg.default.as_deref())?;
        let ll = cfg.linklayer.with_overrides(cfg.overhead, cfg.mpu).build();
        let any = |f: fn(&Leaf<P>) -> bool| {
            classes
                .iter()
                .any(|c: &Class<P>| c.leaf.as_ref().is_some_and(f))
        };
        let (timed, observes, idle, reads) = (
            any(|q| q.has_timers()),
            any(|q| q.observes_peer()),
            any(|q| q.wants_idle_dequeue()),
            any(|q| q.reads_headers()),
        );
        Ok(Htb {
            classes,
            names: cfg.classes.iter().map(|c| c.name.clone()).collect(),
            leaf_of_class,
            default,
            ll,
            ingress: cfg.ingress,
            rr: [[NO_LEAF; PRIOS as usize]; MAX_DEPTH + 1],
            backlogged: 0,
            stats: QdiscStats::default(),
            timed,
            observes,
            idle,
            reads,
        })
    }

    fn index(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|c| c == name)
    }

    /// The mode of class `name` at `now` (`None`: no such class).
    pub fn class_mode(&self, name: &str, now: Instant) -> Option<ClassMode> {
        self.index(name).map(|i| self.classes[i].mode_at(now))
    }

    /// Rate tokens and ceil tokens (nanoseconds of credit) of class `name` at `now`.
    pub fn class_tokens(&self, name: &str, now: Instant) -> Option<(i64, i64)> {
        self.index(name).map(|i| self.classes[i].toks_at(now))
    }

    /// Counters of class `name`.
    pub fn class_counters(&self, name: &str) -> Option<HtbClassCounters> {
        self.index(name).map(|i| self.classes[i].counters)
    }

    /// The link layer packets are charged with.
    pub fn linklayer(&self) -> LinkLayer {
        self.ll
    }

    /// The class names, in configuration order.
    pub fn class_names(&self) -> impl Iterator<Item = &str> {
        self.names.iter().map(String::as_str)
    }

    /// The level a lender serves at: 0 for a leaf within its own rate; for an inner class
    /// the higher in the tree, the later (Linux numbers inner levels from the top).
    fn level(&self, c: usize) -> usize {
        usize::from(self.classes[c].level)
    }

    /// The lender of a backlogged leaf at `now`, or how long until one may exist (ns).
    fn lender(&self, leaf: usize, now: Instant) -> Result<usize, i64> {
        let mut ceil_wait = 0i64; // the longest ceil wait below the current class
        let mut best = i64::MAX;
        let mut c = Some(leaf);
        while let Some(i) = c {
            let (t, ct) = self.classes[i].toks_at(now);
            ceil_wait = ceil_wait.max(-ct);
            if ceil_wait == 0 && t >= 0 {
                return Ok(i);
            }
            best = best.min(ceil_wait.max(-t));
            c = self.classes[i].parent.map(usize::from);
        }
        Err(best.max(1))
    }

    fn refill(&mut self, i: usize, now: Instant) {
        let c = &mut self.classes[i];
        let (t, ct) = c.toks_at(now);
        c.tokens = t;
        c.ctokens = ct;
        c.t_c = c.t_c.max(now);
    }

    /// Charge a packet of `wire` wire bytes sent by `leaf` through `lender` (Linux
    /// `htb_charge_class`).
    fn charge(&mut self, leaf: usize, lender: usize, ip_len: u32, wire: u64, now: Instant) {
        let lender_level = self.level(lender);
        let mut c = Some(leaf);
        while let Some(i) = c {
            self.refill(i, now);
            let level = self.level(i);
            let cl = &mut self.classes[i];
            let ccost = cl.ceil.nanos(wire);
            if level >= lender_level {
                let cost = if cl.rate.rate == cl.ceil.rate {
                    ccost
                } else {
                    cl.rate.nanos(wire)
                };
                cl.tokens = cl.tokens.saturating_sub(cost).max(-MBUFFER_NS);
                if i == lender && i != leaf {
                    cl.counters.lent += 1;
                }
            } else {
                cl.counters.borrowed += 1;
            }
            cl.ctokens = cl.ctokens.saturating_sub(ccost).max(-MBUFFER_NS);
            cl.counters.packets += 1;
            cl.counters.bytes += ip_len as u64;
            cl.counters.wire_bytes += wire;
            c = cl.parent.map(usize::from);
        }
    }

    /// Ingress: charge the discards `leaf` just made (from `mark` on) to its tokens and
    /// those of its ancestors, as if sent; nothing counts them as sent.
    #[inline]
    fn charge_discards(&mut self, leaf: usize, drops: &Drops<P>, mark: usize, now: Instant) {
        if self.ingress && drops.len() > mark {
            self.charge_discards_ingress(leaf, drops, mark, now);
        }
    }

    fn charge_discards_ingress(
        &mut self,
        leaf: usize,
        drops: &Drops<P>,
        mark: usize,
        now: Instant,
    ) {
        for d in drops.since(mark) {
            let wire = self.ll.wire_len(d.pkt.ip_len()) as u64;
            let mut c = Some(leaf);
            while let Some(i) = c {
                self.refill(i, now);
                let cl = &mut self.classes[i];
                cl.tokens = cl
                    .tokens
                    .saturating_sub(cl.rate.nanos(wire))
                    .max(-MBUFFER_NS);
                cl.ctokens = cl
                    .ctokens
                    .saturating_sub(cl.ceil.nanos(wire))
                    .max(-MBUFFER_NS);
                c = cl.parent.map(usize::from);
            }
        }
    }

    /// Note whether leaf `i` holds packets after a call into it.
    #[inline]
    fn note_backlog(&mut self, i: usize) {
        let q = self.classes[i].leaf.as_ref().expect("leaf");
        if q.backlog().packets > 0 {
            self.backlogged |= 1 << i;
        } else {
            self.backlogged &= !(1 << i);
        }
    }

    /// Whether the noted backlogged leaves are those that hold packets.
    fn backlogged_noted(&self) -> bool {
        self.classes.iter().enumerate().all(|(i, c)| {
            let held = c.leaf.as_ref().is_some_and(|q| q.backlog().packets > 0);
            held == (self.backlogged & (1 << i) != 0)
        })
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
}

impl<P: Pkt + Send + 'static> Qdisc<P> for Htb<P> {
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
            .enqueue(now, pkt, drops);
        self.note_backlog(l);
        if drops.len() == mark {
            self.stats.on_enqueue(len);
        } else {
            self.stats.absorb(drops, mark, len);
        }
        self.charge_discards(l, drops, mark, now);
        debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
        debug_assert!(self.backlogged_noted());
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        let n = self.classes.len();
        let mut wait: Option<Instant> = None;
        let mut skip: u64 = 0; // leaves whose discipline had nothing to give (bit set)
        loop {
            // One pass over the backlogged leaves: the best (level, prio) of those with a
            // lender and, among that key's leaves, the first in round-robin order after
            // the one served last (its rank: how far after the key's start position).
            let mut best: Option<((usize, u8), usize, usize, usize)> = None;
            let mut any = false;
            let mut todo = self.backlogged & !skip;
            while todo != 0 {
                let i = todo.trailing_zeros() as usize;
                todo &= todo - 1;
                let c = &self.classes[i];
                any = true;
                match self.lender(i, now) {
                    Ok(lender) => {
                        let k = (self.level(lender), c.prio);
                        let last = self.rr[k.0][k.1 as usize];
                        let start = if last == NO_LEAF {
                            0
                        } else {
                            usize::from(last)
                        };
                        let rank = if i >= start { i - start } else { i + n - start };
                        if best.is_none_or(|(bk, br, _, _)| k < bk || (k == bk && rank < br)) {
                            best = Some((k, rank, i, lender));
                        }
                    }
                    Err(w) => wait = earliest(wait, Some(Instant(now.0.saturating_add(w as u64)))),
                }
            }
            let Some(((level, prio), _, leaf, lender)) = best else {
                return match wait {
                    Some(t) => Dequeued::NotBefore(t),
                    None if any || self.stats.backlog.packets > 0 => {
                        // Leaves are backlogged but their disciplines gave nothing and named
                        // no time: ask again at the earliest child deadline.
                        match self.poll_at() {
                            Some(t) => Dequeued::NotBefore(t.max(now)),
                            None => Dequeued::Empty,
                        }
                    }
                    None => Dequeued::Empty,
                };
            };
            let mark = drops.len();
            let r = self.classes[leaf]
                .leaf
                .as_mut()
                .expect("leaf")
                .dequeue(now, drops);
            self.note_backlog(leaf);
            for d in drops.since(mark) {
                self.stats.on_remove(d.verdict, d.pkt.ip_len());
            }
            self.charge_discards(leaf, drops, mark, now);
            match r {
                Dequeued::Packet(p) => {
                    let len = p.ip_len();
                    let wire = self.ll.wire_len(len);
                    self.charge(leaf, lender, len, wire as u64, now);
                    let c = &mut self.classes[leaf];
                    c.deficit -= wire as i64;
                    if c.deficit < 0 {
                        c.deficit += c.quantum;
                        self.rr[level][prio as usize] = ((leaf + 1) % n) as u8;
                    } else {
                        self.rr[level][prio as usize] = leaf as u8;
                    }
                    self.stats.on_dequeue(len);
                    debug_assert_eq!(self.stats.check(self.backlog()), Ok(()));
                    debug_assert!(self.backlogged_noted());
                    return Dequeued::Packet(p);
                }
                Dequeued::NotBefore(t) => {
                    wait = earliest(wait, Some(t));
                    skip |= 1 << leaf;
                }
                Dequeued::Empty => skip |= 1 << leaf,
            }
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        if !self.timed {
            return None;
        }
        self.classes
            .iter()
            .filter_map(|c| c.leaf.as_ref())
            .fold(None, |a, q| earliest(a, q.poll_at()))
    }

    fn has_timers(&self) -> bool {
        self.timed
    }

    fn observes_peer(&self) -> bool {
        self.observes
    }

    fn reads_headers(&self) -> bool {
        self.reads
    }

    fn handle_timeout(&mut self, now: Instant, drops: &mut Drops<P>) {
        for i in 0..self.classes.len() {
            let Some(q) = self.classes[i].leaf.as_mut() else {
                continue;
            };
            let mark = drops.len();
            q.handle_timeout(now, drops);
            self.note_backlog(i);
            for d in drops.since(mark) {
                self.stats.on_remove(d.verdict, d.pkt.ip_len());
            }
            self.charge_discards(i, drops, mark, now);
        }
    }

    fn handle_observation(&mut self, now: Instant, obs: &PeerObservation) {
        if !self.observes {
            return;
        }
        for c in self.classes.iter_mut() {
            if let Some(q) = c.leaf.as_mut() {
                q.handle_observation(now, obs);
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
            .zip(&self.names)
            .filter_map(|(c, name)| c.leaf.as_ref().map(|q| (name.clone(), q.stats().clone())))
            .collect()
    }

    fn wants_idle_dequeue(&self) -> bool {
        self.idle
    }

    fn flow_entries(&self) -> u64 {
        self.classes
            .iter()
            .filter_map(|c| c.leaf.as_ref())
            .map(|q| q.flow_entries())
            .sum()
    }

    fn kind(&self) -> &'static str {
        "htb"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;

    fn htb(src: &str, classes: &[&str]) -> Htb<HeaderPacket> {
        let cfg: HtbConfig = toml::from_str(src).unwrap();
        Htb::new(&cfg, &BuildCtx::with_classes(classes)).unwrap()
    }

    fn err(src: &str, classes: &[&str]) -> String {
        let cfg: HtbConfig = toml::from_str(src).unwrap();
        match Htb::<HeaderPacket>::new(&cfg, &BuildCtx::with_classes(classes)) {
            Ok(_) => panic!("accepted: {src}"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_tree_has_timers_watches_the_peer_or_wants_idle_calls_as_its_leaves_do() {
        let tree = |a: &str, b: &str| {
            let src = format!(
                "classes = [{{ name = \"root\", rate = \"2Mbit\" }}, \
                 {{ name = \"a\", parent = \"root\", rate = \"1Mbit\", queue = {{ {a} }} }}, \
                 {{ name = \"b\", parent = \"root\", rate = \"1Mbit\", queue = {{ {b} }} }}]"
            );
            let q = htb(&src, &["a", "b"]);
            (q.has_timers(), q.observes_peer(), q.wants_idle_dequeue())
        };
        let fq = "kind = \"fq_codel\"";
        let host = "kind = \"host_fq_codel\"";
        assert_eq!(tree(fq, host), (false, false, false));
        assert_eq!(
            tree("kind = \"fifo\", limit = \"10p\"", "kind = \"codel\""),
            (false, false, false)
        );
        // A shaper leaf has timers; the ACK shaper also watches the other direction.
        assert_eq!(
            tree(fq, "kind = \"tbf\", rate = \"1Mbit\""),
            (true, false, false)
        );
        let shaper = "kind = \"ack_shaper\", threshold = \"50KB\", leak = { kind = \"rate\" }";
        assert_eq!(tree(shaper, fq), (true, true, false));
        assert_eq!(
            tree(fq, "kind = \"ack_filter\", policy = \"classic\""),
            (true, true, true)
        );
        // Without timers the tree names none.
        assert_eq!(
            htb(
                &format!("classes = [{{ name = \"a\", rate = \"1Mbit\", queue = {{ {fq} }} }}]"),
                &["a"]
            )
            .poll_at(),
            None
        );
    }

    /// Line mode's tree toward the line: interactive FQ-CoDel and bulk host FQ-CoDel.
    const LINE_TREE: &str = "classes = [{ name = \"line\", rate = \"1Mbit\" }, \
        { name = \"interactive\", parent = \"line\", rate = \"100kbit\", ceil = \"1Mbit\", \
          queue = { kind = \"fq_codel\" } }, \
        { name = \"bulk\", parent = \"line\", rate = \"900kbit\", ceil = \"1Mbit\", prio = 1, \
          queue = { kind = \"host_fq_codel\", ack_filter = true } }]";

    #[test]
    fn line_mode_leaves_are_held_in_place_and_others_boxed() {
        let q = htb(LINE_TREE, &["interactive", "bulk"]);
        let in_place: Vec<_> = q
            .classes
            .iter()
            .map(|c| c.leaf.as_ref().map(|l| l.in_place()))
            .collect();
        assert_eq!(in_place, [None, Some(true), Some(true)]);
        let q = htb(
            "classes = [{ name = \"a\", rate = \"1Mbit\", queue = { kind = \"fq_codel\", aqm = \"cobalt\" } }, \
             { name = \"b\", rate = \"1Mbit\", queue = { kind = \"codel\" } }, \
             { name = \"c\", rate = \"1Mbit\" }]",
            &["a", "b", "c"],
        );
        let in_place: Vec<_> = q
            .classes
            .iter()
            .map(|c| c.leaf.as_ref().map(|l| l.in_place()))
            .collect();
        assert_eq!(in_place, [Some(false); 3]);
    }

    /// The division the costs replace.
    fn divided(rate: u64, bytes: u64) -> i64 {
        i64::try_from(Rate(rate).tx_nanos(bytes)).unwrap_or(i64::MAX)
    }

    #[test]
    fn tx_costs_equal_the_division_at_the_extremes() {
        let edge = u64::MAX / TxCost::NS_BITS;
        let rates = [
            0,
            1,
            2,
            3,
            7,
            8,
            1000,
            7_999,
            486_400,
            7_600_000,
            8_000_000_000,
            8_000_000_001,
            (1 << 32) - 1,
            1 << 32,
            (1 << 63) - 1,
            1 << 63,
            u64::MAX / 3,
            u64::MAX - 1,
            u64::MAX,
        ];
        let lengths = [
            0,
            1,
            40,
            53,
            1500,
            1696,
            u64::from(u32::MAX),
            edge - 1,
            edge,
            edge + 1,
            u64::MAX / 8,
            u64::MAX,
        ];
        for rate in rates {
            let c = TxCost::new(Rate(rate));
            for bytes in lengths {
                assert_eq!(
                    c.nanos(bytes),
                    divided(rate, bytes),
                    "{bytes} B at {rate} bit/s"
                );
            }
        }
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(20_000))]
        /// Rates and wire lengths of every magnitude; and rates that divide the
        /// bit-nanoseconds exactly or miss by one (remainders 0, 1 and rate − 1, where the
        /// correction step and the rounding up decide).
        #[test]
        fn tx_costs_equal_the_division(
            rate in proptest::prelude::any::<u64>(),
            shift in 0u32..64,
            bytes in proptest::prelude::any::<u64>(),
            bshift in 0u32..64,
            c in 1u64..1_000_000,
            t in 1u64..2_000_000,
            f in proptest::sample::select(vec![1u64, 2, 5, 8, 64, 125, 1000, 8192, 1_953_125, 8_000_000_000]),
        ) {
            let (rate, bytes) = (rate >> shift, bytes >> bshift);
            let cases = [
                (rate, bytes),
                (rate, bytes % 70_000),
                (rate, u64::MAX / TxCost::NS_BITS - bytes % 4),
                (rate % 100_000_000_000, bytes % 70_000),
                (c * f, c * t),
                (c * f + 1, c * t),
                (c * f - 1, c * t),
            ];
            for (rate, bytes) in cases {
                let got = TxCost::new(Rate(rate)).nanos(bytes);
                proptest::prop_assert_eq!(got, divided(rate, bytes), "{} B at {} bit/s", bytes, rate);
            }
        }
    }

    /// A small deterministic mix of flows, lengths and classes for driving two trees alike.
    fn mixed(i: u32) -> HeaderPacket {
        let h = (i.wrapping_mul(2_654_435_761) >> 7) as u16;
        let len = [40, 52, 576, 1500][usize::from(h % 4)];
        let mut p = data_flow(i, len, h % 5);
        p.set_class(crate::packet::ClassId(u16::from(len > 100)));
        p
    }

    #[test]
    fn leaves_in_place_serve_exactly_as_boxed_ones() {
        let mut inline = htb(LINE_TREE, &["interactive", "bulk"]);
        let mut boxed = htb(LINE_TREE, &["interactive", "bulk"]);
        let cfg: HtbConfig = toml::from_str(LINE_TREE).unwrap();
        for (c, cc) in boxed.classes.iter_mut().zip(&cfg.classes) {
            if let Some(q) = cc.queue.as_deref().filter(|_| c.leaf.is_some()) {
                let ctx = BuildCtx {
                    link_rate: Some(cc.rate),
                    ..BuildCtx::with_classes(&["interactive", "bulk"])
                };
                c.leaf = Some(Leaf::Other(q.build(&ctx).unwrap()));
            }
        }
        let (mut da, mut db) = (Drops::new(), Drops::new());
        let mut sent = 0;
        for i in 0..4000u32 {
            let now = Instant::from_micros(u64::from(i) * 700);
            for _ in 0..(i % 3) {
                inline.enqueue(now, mixed(i), &mut da);
                boxed.enqueue(now, mixed(i), &mut db);
            }
            let (a, b) = (inline.dequeue(now, &mut da), boxed.dequeue(now, &mut db));
            match (&a, &b) {
                (Dequeued::Packet(x), Dequeued::Packet(y)) => {
                    assert_eq!((tag(x), x.ip_len()), (tag(y), y.ip_len()));
                    sent += 1;
                }
                _ => assert_eq!(a, b, "at step {i}"),
            }
            assert!(inline.backlogged_noted(), "at step {i}");
        }
        assert!(sent > 1000, "{sent}");
        let tags = |d: &mut Drops<HeaderPacket>| {
            d.drain()
                .map(|x| (tag(&x.pkt), x.verdict))
                .collect::<Vec<_>>()
        };
        let dropped = tags(&mut da);
        assert!(!dropped.is_empty());
        assert_eq!(dropped, tags(&mut db));
        assert_eq!(inline.stats(), boxed.stats());
        assert_eq!(inline.child_stats(), boxed.child_stats());
        check(&inline);
    }

    #[test]
    fn the_backlogged_leaves_are_noted_through_timeouts_and_drops() {
        // A shaper leaf (timers, a small limit) beside a FIFO that overflows.
        let mut q = htb(
            "classes = [{ name = \"r\", rate = \"2Mbit\" }, \
             { name = \"a\", parent = \"r\", rate = \"1Mbit\", ceil = \"2Mbit\", \
               queue = { kind = \"tbf\", rate = \"300kbit\", limit = \"6KB\" } }, \
             { name = \"b\", parent = \"r\", rate = \"1Mbit\", \
               queue = { kind = \"fifo\", limit = \"4p\" } }]",
            &["a", "b"],
        );
        let mut d = Drops::new();
        let mut states = std::collections::BTreeSet::new();
        // Both leaves offered, then only a, then only b, then nothing until both drain.
        for i in 0..8000u32 {
            let now = Instant::from_micros(u64::from(i) * 900);
            if q.poll_at().is_some_and(|t| t <= now) {
                q.handle_timeout(now, &mut d);
            }
            for k in 0..(i % 4) {
                let class = match i / 1000 {
                    0 => (i + k) % 2,
                    1 => 0,
                    2 => 1,
                    _ => continue,
                };
                q.enqueue(now, classed(i, 1500, class as u16), &mut d);
            }
            q.dequeue(now, &mut d);
            assert!(q.backlogged_noted(), "at step {i}");
            states.insert(q.backlogged);
            check(&q);
        }
        // Each leaf was seen empty and holding packets, alone and beside the other.
        assert_eq!(states.len(), 4, "{states:?}");
        assert_eq!(q.backlogged, 0);
        assert!(d.len() > 100);
    }

    #[test]
    fn single_class_releases_at_its_rate() {
        // 1 Mbit/s, burst 1500 B: the first 1500-byte packet goes at once (full bucket),
        // the second too (tokens >= 0 until the bucket is empty), then one per 12 ms.
        let mut q = htb(
            "classes = [{ name = \"a\", rate = \"1Mbit\", burst = \"1500B\", cburst = \"1500B\" }]",
            &["a"],
        );
        let mut d = Drops::new();
        for i in 0..5 {
            q.enqueue(ms(0), classed(i, 1500, 0), &mut d);
        }
        // HTB sends while tokens >= 0 and lets them go negative: the full bucket (12 ms)
        // pays for one packet, leaving 0, which still allows a second.
        assert_eq!(q.dequeue(ms(0), &mut d).packet().map(|p| tag(&p)), Some(0));
        assert_eq!(q.class_tokens("a", ms(0)), Some((0, 0)));
        assert_eq!(q.class_mode("a", ms(0)), Some(ClassMode::CanSend));
        assert_eq!(drain(&mut q, ms(0)).len(), 1);
        assert_eq!(q.class_tokens("a", ms(0)), Some((-12_000_000, -12_000_000)));
        assert_eq!(q.class_mode("a", ms(0)), Some(ClassMode::CantSend));
        assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(12)));
        assert_eq!(q.dequeue(ms(11), &mut d), Dequeued::NotBefore(ms(12)));
        assert_eq!(drain(&mut q, ms(12)).len(), 1);
        assert_eq!(q.dequeue(ms(12), &mut d), Dequeued::NotBefore(ms(24)));
        check(&q);
    }

    #[test]
    fn ingress_charges_discards_as_sent() {
        // 1 Mbit/s, bucket 1500 B (12 ms); the leaf holds 2 packets, so 3 of 5 are dropped
        // at offer. Egress: the 2 queued go at 0 and 0 (the bucket may go to -12 ms).
        // Ingress: the 3 drops already crossed the line and cost 36 ms of tokens first.
        for (ingress, first) in [(false, Some(0)), (true, None)] {
            let mut q = htb(
                &format!(
                    "ingress = {ingress}\nclasses = [{{ name = \"a\", rate = \"1Mbit\", \
                     burst = \"1500B\", cburst = \"1500B\", \
                     queue = {{ kind = \"fifo\", limit = \"2p\" }} }}]"
                ),
                &["a"],
            );
            let mut d = Drops::new();
            for i in 0..5 {
                q.enqueue(ms(0), classed(i, 1500, 0), &mut d);
            }
            assert_eq!(d.len(), 3);
            assert_eq!(q.dequeue(ms(0), &mut d).packet().map(|p| tag(&p)), first);
            if ingress {
                assert_eq!(q.class_tokens("a", ms(0)), Some((-24_000_000, -24_000_000)));
                assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(24)));
                assert_eq!(q.class_counters("a").map(|c| c.packets), Some(0));
            }
            check(&q);
        }
    }

    #[test]
    fn errors_name_the_problem() {
        let e = err(
            "classes = [{ name = \"a\", rate = \"2Mbit\", ceil = \"1Mbit\" }]",
            &[],
        );
        assert!(e.contains("ceil") && e.contains("below rate"), "{e}");
        let e = err(
            "classes = [{ name = \"a\", parent = \"nope\", rate = \"1Mbit\" }]",
            &[],
        );
        assert!(e.contains("unknown parent") && e.contains("nope"), "{e}");
        let e = err(
            "classes = [{ name = \"a\", parent = \"b\", rate = \"1Mbit\" }, \
             { name = \"b\", parent = \"a\", rate = \"1Mbit\" }]",
            &[],
        );
        assert!(e.contains("cycle"), "{e}");
        let e = err(
            "classes = [{ name = \"a\", rate = \"1Mbit\" }, { name = \"a\", rate = \"1Mbit\" }]",
            &[],
        );
        assert!(e.contains("duplicate"), "{e}");
        let e = err(
            "default = \"r\"\nclasses = [{ name = \"r\", rate = \"1Mbit\" }, \
             { name = \"a\", parent = \"r\", rate = \"1Mbit\" }]",
            &[],
        );
        assert!(e.contains("default must be a leaf"), "{e}");
        let e = err(
            "classes = [{ name = \"r\", rate = \"1Mbit\", queue = { kind = \"fifo\", limit = \"5p\" } }, \
             { name = \"a\", parent = \"r\", rate = \"1Mbit\" }]",
            &[],
        );
        assert!(e.contains("only leaves hold a queue"), "{e}");
        let e = err(
            "classes = [{ name = \"a\", rate = \"1Mbit\", prio = 8 }]",
            &[],
        );
        assert!(e.contains("prio"), "{e}");
        let e = err(
            "classes = [{ name = \"a\", rate = \"1Mbit\", classes = [\"zz\"] }]",
            &["x"],
        );
        assert!(e.contains("zz"), "{e}");
        let e = err("classes = [{ name = \"a\", rate = \"0bit\" }]", &[]);
        assert!(e.contains("positive"), "{e}");
        let e = err(
            "classes = [{ name = \"a\", rate = \"1Mbit\", classes = [\"x\"] }, \
             { name = \"b\", rate = \"1Mbit\", classes = [\"x\"] }]",
            &["x"],
        );
        assert!(e.contains("taken by both"), "{e}");
    }

    #[test]
    fn unclassified_goes_to_default_or_is_dropped() {
        let mut q = htb("classes = [{ name = \"a\", rate = \"1Mbit\" }]", &["a"]);
        let mut d = Drops::new();
        q.enqueue(ms(0), data(1, 100), &mut d);
        assert_eq!(
            d.since(0)[0].verdict,
            Verdict::Dropped(DropReason::Unclassified)
        );
        let mut q = htb(
            "default = \"a\"\nclasses = [{ name = \"a\", rate = \"1Mbit\" }]",
            &["a"],
        );
        q.enqueue(ms(0), data(1, 100), &mut d);
        assert_eq!(drain(&mut q, ms(0)).len(), 1);
        check(&q);
    }
}
