//! The datapath of one box: frames in, frames out, no I/O.
//!
//! [`Engine`] composes, per direction,
//!
//! ```text
//! parse ─► (malformed policy) ─► core Middlebox: rewriters ─► classifier ─► discipline
//!       ─► core Link (modem buffer, serialiser, loss, delay) ─► frames to send
//! ```
//!
//! It follows the core's sans-IO contract: [`Engine::handle_frame`] feeds a received
//! frame, [`Engine::poll_transmit`] takes the frames due at `now`, [`Engine::poll_at`]
//! says when to call back and [`Engine::handle_timeout`] runs the disciplines' timers.
//! The event loop ([`crate::runtime`]) owns the devices and the clock.
//!
//! Every frame that enters leaves exactly once — sent, or discarded with a reason — and
//! the counters obey `received = sent + discarded + held` per direction
//! ([`Engine::check_conservation`]; tests assert it).

use crate::breakdown::Stamps;
use crate::config::{BoxConfig, MalformedPolicy};
use crate::packet::{LinkType, LivePacket, Pool, Unparsed};
use crate::stats::Histogram;
use asymlink_core::config::ConfigError;
use asymlink_core::hist;
use asymlink_core::link::{loss_seed, Feed, Link, LinkConfig};
use asymlink_core::pipeline::{Dir, Middlebox};
use asymlink_core::qdisc::{Dequeued, DropReason, Drops, FilterReason, QdiscStats, Verdict};
use asymlink_core::rand::{derive_seed, Rng};
use asymlink_core::subscribers::SubscriberBox;
use asymlink_core::time::{earliest, Instant};
use serde_json::{json, Map, Value};

/// Why the box discarded a frame: a core verdict (a discipline's, a link's, a
/// rewriter's, or [`DropReason::Malformed`] from the box's own parser) or one of the
/// box's own reasons.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum DiscardReason {
    /// Dropped or filtered for a core reason.
    Verdict(Verdict),
    /// The device refused the frame (e.g. larger than its MTU, or out of buffers).
    TxError,
    /// Still queued when the box stopped.
    Shutdown,
    /// Held by a discipline that would not release it during a reload (a discipline bug).
    ReloadStranded,
}

impl DiscardReason {
    /// The box's own reasons, after the core verdicts in counter order.
    const OWN: [DiscardReason; 3] = [
        DiscardReason::TxError,
        DiscardReason::Shutdown,
        DiscardReason::ReloadStranded,
    ];
    /// Number of reasons.
    pub const COUNT: usize = Verdict::COUNT + Self::OWN.len();

    /// Every reason, in counter order.
    pub fn all() -> impl Iterator<Item = DiscardReason> {
        Verdict::all().map(DiscardReason::Verdict).chain(Self::OWN)
    }

    /// A stable snake_case name (JSON keys, Prometheus `reason` labels).
    pub const fn name(self) -> &'static str {
        match self {
            DiscardReason::Verdict(v) => v.name(),
            DiscardReason::TxError => "tx_error",
            DiscardReason::Shutdown => "shutdown",
            DiscardReason::ReloadStranded => "reload_stranded",
        }
    }

    /// A dense index in `0..COUNT`.
    pub const fn index(self) -> usize {
        match self {
            DiscardReason::Verdict(v) => v.index(),
            DiscardReason::TxError => Verdict::COUNT,
            DiscardReason::Shutdown => Verdict::COUNT + 1,
            DiscardReason::ReloadStranded => Verdict::COUNT + 2,
        }
    }
}

impl From<Verdict> for DiscardReason {
    fn from(v: Verdict) -> Self {
        DiscardReason::Verdict(v)
    }
}

impl From<DropReason> for DiscardReason {
    fn from(r: DropReason) -> Self {
        DiscardReason::Verdict(Verdict::Dropped(r))
    }
}

impl From<FilterReason> for DiscardReason {
    fn from(r: FilterReason) -> Self {
        DiscardReason::Verdict(Verdict::Filtered(r))
    }
}

/// Frames discarded, by [`DiscardReason`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Discarded([u64; DiscardReason::COUNT]);

impl Default for Discarded {
    fn default() -> Self {
        Discarded([0; DiscardReason::COUNT])
    }
}

impl Discarded {
    /// Count `n` frames discarded for `why`.
    #[inline]
    pub fn add(&mut self, why: impl Into<DiscardReason>, n: u64) {
        self.0[why.into().index()] += n;
    }
    /// Frames discarded for `why`.
    pub fn get(&self, why: impl Into<DiscardReason>) -> u64 {
        self.0[why.into().index()]
    }
    /// The reasons with a nonzero count, in counter order.
    pub fn iter(&self) -> impl Iterator<Item = (DiscardReason, u64)> + '_ {
        DiscardReason::all()
            .map(|r| (r, self.0[r.index()]))
            .filter(|&(_, n)| n > 0)
    }
    /// Total discarded.
    pub fn total(&self) -> u64 {
        self.0.iter().sum()
    }
    /// Whether nothing was discarded.
    pub fn is_empty(&self) -> bool {
        self.total() == 0
    }
}

/// Counters of one direction.
#[derive(Clone, Debug, Default)]
pub struct DirCounters {
    /// Frames received.
    pub received: u64,
    /// Bytes received (whole frames).
    pub received_bytes: u64,
    /// Frames not parsed, by kind ([`Unparsed`] order).
    pub unparsed: [u64; Unparsed::ALL.len()],
    /// IP fragments seen (forwarded as opaque packets).
    pub fragments: u64,
    /// Frames sent.
    pub sent: u64,
    /// Bytes sent (whole frames).
    pub sent_bytes: u64,
    /// Frames discarded, by reason (disciplines' reasons and the box's own).
    pub discarded: Discarded,
}

impl DirCounters {
    /// Total discarded.
    pub fn discarded_total(&self) -> u64 {
        self.discarded.total()
    }
}

/// Sojourn times of one direction: from the box reading a frame (its offer to the
/// discipline) to the start of its transmission on the direction's link (after the
/// emulated modem buffer, if any) — what the simulator's `queue_summary` reports for a
/// link direction, measured with the same histogram ([`hist::Histogram`]).
#[derive(Clone, Debug, Default)]
pub struct Sojourn {
    /// Distribution (percentiles to 1.6 %).
    pub hist: hist::Histogram,
    /// Sum, ns.
    pub sum_ns: u128,
    /// Maximum, ns.
    pub max_ns: u64,
}

impl Sojourn {
    /// Count one sojourn time.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.hist.record(ns);
        self.sum_ns += u128::from(ns);
        self.max_ns = self.max_ns.max(ns);
    }

    /// Add `other`'s sojourn times (another worker's) to these.
    pub fn merge(&mut self, other: &Sojourn) {
        self.hist.merge(&other.hist);
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// JSON summary in milliseconds: count, mean, p50, p90, p99, max (`null` when empty).
    pub fn to_json(&self) -> Value {
        let n = self.hist.len();
        let ms = |ns: u64| if n > 0 { Some(ns as f64 / 1e6) } else { None };
        json!({
            "count": n,
            "sum_ms": self.sum_ns as f64 / 1e6,
            "mean": if n > 0 { Some(self.sum_ns as f64 / n as f64 / 1e6) } else { None },
            "p50": ms(self.hist.quantile(0.5)),
            "p90": ms(self.hist.quantile(0.9)),
            "p99": ms(self.hist.quantile(0.99)),
            "max": ms(self.max_ns),
        })
    }
}

/// The datapath.
pub struct Engine {
    /// The top-level pipeline and the subscribers' trees.
    mb: SubscriberBox<LivePacket>,
    links: [Link<LivePacket>; 2],
    drops: Drops<LivePacket>,
    pool: Pool,
    lt: LinkType,
    malformed: MalformedPolicy,
    /// Each subscriber's counters in the snapshot (`stats.subscriber_lines`).
    subscriber_lines: bool,
    seed: u64,
    generation: u64,
    counters: [DirCounters; 2],
    /// Discipline counters accumulated over previous configurations (before reloads).
    retired: [Vec<QdiscStats>; 2],
    latency: Histogram,
    sojourn: [Sojourn; 2],
    reloads: u64,
}

impl Engine {
    /// Build from a validated configuration. `seed` is the master seed: the pipeline and
    /// the links derive their streams from it as the simulator does for a middlebox
    /// between two links named `a` and `b` (its first middlebox, `mb:0`; the link toward
    /// side b is `b`, toward side a is `a`).
    pub fn new(cfg: &BoxConfig, lt: LinkType, seed: u64) -> Result<Engine, ConfigError> {
        let top = Middlebox::new(&cfg.middlebox(), cfg.rates(), pipeline_seed(seed, 0))?;
        let mb = cfg.subscribers.build(top, seed);
        let none = LinkConfig::default();
        let links = [Dir::ToB, Dir::ToA].map(|d| {
            let idle = mb.wants_idle_dequeue(d);
            let side = if d == Dir::ToB { "b" } else { "a" };
            let rng = Rng::new(loss_seed(seed, side, d.name()));
            Link::new(cfg.emulation(d).unwrap_or(&none), rng, idle)
        });
        Ok(Engine {
            mb,
            links,
            drops: Drops::new(),
            pool: Pool::new(4096),
            lt,
            malformed: cfg.malformed,
            subscriber_lines: cfg.stats.subscriber_lines,
            seed,
            generation: 0,
            counters: Default::default(),
            retired: Default::default(),
            latency: Histogram::default(),
            sojourn: Default::default(),
            reloads: 0,
        })
    }

    /// The pool buffers are taken from and returned to.
    pub fn pool(&mut self) -> &mut Pool {
        &mut self.pool
    }

    /// Return a sent frame's buffer (counts it as sent).
    #[inline]
    pub fn on_sent(&mut self, pkt: LivePacket) {
        let c = &mut self.counters[pkt.dir.index()];
        c.sent += 1;
        c.sent_bytes += pkt.frame().len() as u64;
        self.pool.put(pkt.into_buf());
    }

    /// A frame the device refused: counted and freed.
    pub fn on_send_failed(&mut self, pkt: LivePacket) {
        self.discard(pkt, DiscardReason::TxError);
    }

    /// A frame that was due but not sent when the box stopped: counted discarded at
    /// shutdown and freed.
    pub fn on_unsent_at_exit(&mut self, pkt: LivePacket) {
        self.discard(pkt, DiscardReason::Shutdown);
    }

    /// Record an added-latency sample (receive → send), in nanoseconds.
    #[inline]
    pub fn record_latency(&mut self, ns: u64) {
        self.latency.record(ns);
    }

    /// The added-latency histogram.
    pub fn latency(&mut self) -> &mut Histogram {
        &mut self.latency
    }

    fn discard(&mut self, pkt: LivePacket, why: impl Into<DiscardReason>) {
        self.counters[pkt.dir.index()].discarded.add(why, 1);
        self.pool.put(pkt.into_buf());
    }

    fn absorb_drops(&mut self) {
        if self.drops.is_empty() {
            return;
        }
        let mut drops = std::mem::take(&mut self.drops);
        for d in drops.drain() {
            self.discard(d.pkt, d.verdict);
        }
        self.drops = drops;
    }

    /// A frame arrived at `now` travelling in `dir` (received on side a: `ToB`).
    /// `rx_unix_ns` is the kernel's receive timestamp (0 if unknown).
    pub fn handle_frame(&mut self, now: Instant, dir: Dir, buf: Vec<u8>, rx_unix_ns: u64) {
        self.handle_stamped(now, dir, buf, rx_unix_ns, Stamps::default());
    }

    /// [`Engine::handle_frame`] for a frame with its latency stamps
    /// ([`crate::breakdown`]).
    pub fn handle_stamped(
        &mut self,
        now: Instant,
        dir: Dir,
        buf: Vec<u8>,
        rx_unix_ns: u64,
        stamps: Stamps,
    ) {
        let mut pkt = LivePacket::new(buf, self.lt, now, rx_unix_ns);
        pkt.dir = dir;
        pkt.stamps = stamps;
        let c = &mut self.counters[dir.index()];
        c.received += 1;
        c.received_bytes += pkt.frame().len() as u64;
        if let Some(u) = pkt.unparsed() {
            c.unparsed[u as usize] += 1;
            if u == Unparsed::Runt || (u.is_malformed() && self.malformed == MalformedPolicy::Drop)
            {
                // A runt cannot be sent on the other side's link at all.
                self.discard(pkt, DropReason::Malformed);
                return;
            }
        } else if pkt.is_fragment() {
            c.fragments += 1;
        }
        self.mb.handle_packet(now, dir, pkt, &mut self.drops);
        self.absorb_drops();
    }

    /// Move every frame due at `now` in `dir` to `out`: the link pulls from the discipline
    /// while it takes packets, then hands over what has arrived.
    pub fn poll_transmit(&mut self, now: Instant, dir: Dir, out: &mut Vec<LivePacket>) {
        let link = &mut self.links[dir.index()];
        let mut feed = BoxFeed {
            mb: &mut self.mb,
            dir,
        };
        let sojourn = &mut self.sojourn[dir.index()];
        link.pull(now, &mut feed, &mut self.drops, &mut |tx| {
            sojourn.record(
                tx.start
                    .as_nanos()
                    .saturating_sub(tx.pkt.arrived.as_nanos()),
            );
        });
        link.poll(now, out);
        self.absorb_drops();
    }

    /// Run the disciplines' and rewriters' timers due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if self.mb.poll_at().is_some_and(|t| t <= now) {
            self.mb.handle_timeout(now, &mut self.drops);
            self.absorb_drops();
        }
    }

    /// The next instant at which something is due (`None`: only a new frame can change
    /// anything).
    pub fn poll_at(&self) -> Option<Instant> {
        let mut t = self.mb.poll_at();
        for d in [Dir::ToB, Dir::ToA] {
            t = earliest(t, self.links[d.index()].poll_at(self.mb.backlog(d).packets));
        }
        t
    }

    /// Apply a new configuration (SIGHUP) without losing queued packets: the new pipeline
    /// is built first (an error leaves everything as it was), then every packet held by
    /// the old disciplines is taken out and offered to the new pipeline in the order the
    /// old one would have served it, re-classified — new policies apply to connections
    /// already open. Emulated links keep their queues and in-flight packets and take the
    /// new parameters. Returns the number of packets moved.
    pub fn reload(&mut self, now: Instant, cfg: &BoxConfig) -> Result<usize, ConfigError> {
        let generation = self.generation + 1;
        let new = Middlebox::new(
            &cfg.middlebox(),
            cfg.rates(),
            pipeline_seed(self.seed, generation),
        )?;
        let r = self.mb.reconfigure(
            now,
            new,
            cfg.subscribers.table.clone(),
            cfg.subscribers.max_subscribers(),
            &mut self.drops,
        );
        self.mb.set_idle_timeout(cfg.subscribers.idle_timeout());
        for d in [Dir::ToB, Dir::ToA] {
            self.retired[d.index()].push(r.retired[d.index()].clone());
            self.counters[d.index()]
                .discarded
                .add(DiscardReason::ReloadStranded, r.stranded[d.index()].into());
        }
        let n = r.moved;
        self.absorb_drops();
        let none = LinkConfig::default();
        for d in [Dir::ToB, Dir::ToA] {
            let idle = self.mb.wants_idle_dequeue(d);
            self.links[d.index()].reconfigure(cfg.emulation(d).unwrap_or(&none), idle);
        }
        self.malformed = cfg.malformed;
        self.generation = generation;
        self.reloads += 1;
        Ok(n)
    }

    /// Discard everything still held (at exit), counted as `shutdown`. Returns how many.
    pub fn shutdown(&mut self) -> usize {
        let mut held = Vec::new();
        for d in [Dir::ToB, Dir::ToA] {
            let stranded = self.mb.drain(d, &mut held);
            self.counters[d.index()]
                .discarded
                .add(DiscardReason::Shutdown, stranded.into());
            held.extend(self.links[d.index()].drain_all());
        }
        let n = held.len();
        for p in held {
            self.discard(p, DiscardReason::Shutdown);
        }
        n
    }

    /// Frames held (disciplines, modem buffers, wires) per direction.
    pub fn held(&self, dir: Dir) -> u64 {
        let (q, w) = self.links[dir.index()].backlog();
        self.mb.backlog(dir).packets as u64 + q as u64 + w as u64
    }

    /// Check `received = sent + discarded + held` for both directions.
    pub fn check_conservation(&self) -> Result<(), String> {
        for d in [Dir::ToB, Dir::ToA] {
            let c = &self.counters[d.index()];
            let rhs = c.sent + c.discarded_total() + self.held(d);
            if c.received != rhs {
                return Err(format!(
                    "{}: received {} != sent {} + discarded {} + held {}",
                    d.name(),
                    c.received,
                    c.sent,
                    c.discarded_total(),
                    self.held(d)
                ));
            }
        }
        self.mb.check()
    }

    /// Counters of one direction.
    pub fn counters(&self, dir: Dir) -> &DirCounters {
        &self.counters[dir.index()]
    }

    /// The core middlebox of the top level (traffic of no subscriber).
    pub fn middlebox(&self) -> &Middlebox<LivePacket> {
        self.mb.top_level()
    }

    /// The top level and the subscribers' trees.
    pub fn subscribers(&self) -> &SubscriberBox<LivePacket> {
        &self.mb
    }

    /// Sojourn times of `dir` so far (over the box's life, reloads included).
    pub fn sojourn(&self, dir: Dir) -> &Sojourn {
        &self.sojourn[dir.index()]
    }

    /// Number of successful reloads.
    pub fn reloads(&self) -> u64 {
        self.reloads
    }

    /// The JSON snapshot of the datapath's counters.
    pub fn snapshot(&self) -> Value {
        let mut dirs = Map::new();
        for d in [Dir::ToB, Dir::ToA] {
            let i = d.index();
            let c = &self.counters[i];
            let eg = self.mb.top_level().egress(d);
            let mut classes = Map::new();
            if let Some(cl) = eg.classifier() {
                let counts = cl.counts();
                for (k, name) in cl.class_names().iter().enumerate() {
                    classes.insert(name.clone(), json!(counts.get(k).copied().unwrap_or(0)));
                }
                classes.insert(
                    "unclassified".into(),
                    json!(counts.last().copied().unwrap_or(0)),
                );
            }
            let p2p_hosts = eg.classifier().map(|c| c.p2p_hosts()).unwrap_or(0);
            let p2p_evicted = eg.classifier().map(|c| c.p2p_evicted()).unwrap_or(0);
            let q = eg.qdisc();
            let mut qd = qdisc_json(q.kind(), q.stats());
            // Per-flow state (connection tables, ACK histories, host table): bounded by
            // configuration; watched under floods of new flows.
            qd.insert("flow_entries".into(), json!(q.flow_entries()));
            let extra: Map<String, Value> = q
                .counters()
                .into_iter()
                .map(|(k, v)| (k.to_string(), json!(v)))
                .collect();
            if !extra.is_empty() {
                qd.insert("counters".into(), Value::Object(extra));
            }
            let children: Map<String, Value> = q
                .child_stats()
                .into_iter()
                .map(|(n, s)| (n, Value::Object(qdisc_json("child", &s))))
                .collect();
            if !children.is_empty() {
                qd.insert("children".into(), Value::Object(children));
            }
            let rewriters: Vec<Value> = self
                .mb
                .top_level()
                .rewriters()
                .iter()
                .map(|r| {
                    let mut m = Map::new();
                    m.insert("kind".into(), json!(r.kind()));
                    for (k, v) in r.counters() {
                        m.insert(k.into(), json!(v));
                    }
                    Value::Object(m)
                })
                .collect();
            let l = self.links[i].stats();
            let (lq, lw) = self.links[i].backlog();
            let unparsed: Map<String, Value> = Unparsed::ALL
                .iter()
                .map(|u| (u.name().to_string(), json!(c.unparsed[*u as usize])))
                .collect();
            let discarded: Map<String, Value> = c
                .discarded
                .iter()
                .map(|(k, v)| (k.name().to_string(), json!(v)))
                .collect();
            let retired: u64 = self.retired[i].iter().map(|s| s.dequeued).sum();
            dirs.insert(
                d.name().into(),
                json!({
                    "received": c.received,
                    "received_bytes": c.received_bytes,
                    "sent": c.sent,
                    "sent_bytes": c.sent_bytes,
                    "held": self.held(d),
                    "fragments": c.fragments,
                    "unparsed": unparsed,
                    "discarded": discarded,
                    "classes": classes,
                    "classifier_hosts": { "tracked": p2p_hosts, "evicted": p2p_evicted },
                    "qdisc": qd,
                    "qdisc_dequeued_before_reloads": retired,
                    "sojourn_ms": self.sojourn[i].to_json(),
                    "rewriters": rewriters,
                    "link": {
                        "offered": l.offered,
                        "sent": l.sent,
                        "busy_ns": l.busy_ns,
                        "delivered": l.delivered,
                        "delivered_bytes": l.delivered_bytes,
                        "wire_bytes": l.wire_bytes,
                        "lost": l.lost,
                        "modem_dropped": l.modem_dropped,
                        "max_modem_packets": l.max_modem_packets,
                        "modem_packets": lq,
                        "wire_packets": lw,
                    },
                }),
            );
        }
        let mut snap = json!({
            "seed": self.seed,
            "reloads": self.reloads,
            "directions": dirs,
            "latency_us": self.latency.to_json(),
        });
        if !self.mb.table().is_empty() {
            snap["subscribers"] = crate::stats::subscribers_json(&self.mb, self.subscriber_lines);
        }
        snap
    }
}

/// The seed of the pipeline of configuration `generation` (0 at start, one more per
/// reload); the first is the simulator's seed for its first middlebox.
fn pipeline_seed(master: u64, generation: u64) -> u64 {
    if generation == 0 {
        derive_seed(master, "mb:0")
    } else {
        derive_seed(master, &format!("mb:0:{generation}"))
    }
}

/// One direction of the middlebox as the link's feed.
struct BoxFeed<'a> {
    mb: &'a mut SubscriberBox<LivePacket>,
    dir: Dir,
}

impl Feed<LivePacket> for BoxFeed<'_> {
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<LivePacket>) -> Dequeued<LivePacket> {
        self.mb.poll_transmit(now, self.dir, drops)
    }
    /// The loop may wake late: a packet was available from when the box read it.
    fn available_since(&self, p: &LivePacket, _now: Instant) -> Instant {
        p.arrived
    }
    /// The loop wakes after a trace's opportunity, never at it: a waiting packet must
    /// keep the opportunity it was woken for.
    fn is_empty(&self) -> Option<bool> {
        Some(self.mb.backlog(self.dir).packets == 0)
    }
}

fn qdisc_json(kind: &str, s: &QdiscStats) -> Map<String, Value> {
    let dropped: Map<String, Value> = DropReason::ALL
        .iter()
        .filter(|r| s.dropped_for(**r) > 0)
        .map(|r| (r.name().to_string(), json!(s.dropped_for(*r))))
        .collect();
    let filtered: Map<String, Value> = FilterReason::ALL
        .iter()
        .filter(|r| s.filtered_for(**r) > 0)
        .map(|r| (r.name().to_string(), json!(s.filtered_for(*r))))
        .collect();
    let mut m = Map::new();
    m.insert("kind".into(), json!(kind));
    m.insert("received".into(), json!(s.received));
    m.insert("enqueued".into(), json!(s.enqueued));
    m.insert("dequeued".into(), json!(s.dequeued));
    m.insert("dequeued_bytes".into(), json!(s.dequeued_bytes));
    m.insert("rejected".into(), json!(s.rejected));
    m.insert("removed".into(), json!(s.removed));
    m.insert("backlog_packets".into(), json!(s.backlog.packets));
    m.insert("backlog_bytes".into(), json!(s.backlog.bytes));
    m.insert("max_backlog_packets".into(), json!(s.max_backlog_packets));
    m.insert("dropped".into(), Value::Object(dropped));
    m.insert("filtered".into(), Value::Object(filtered));
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discard_reasons_are_dense_with_distinct_names() {
        let all: Vec<DiscardReason> = DiscardReason::all().collect();
        assert_eq!(
            all.iter().map(|r| r.index()).collect::<Vec<_>>(),
            (0..DiscardReason::COUNT).collect::<Vec<_>>()
        );
        let names: std::collections::BTreeSet<&str> = all.iter().map(|r| r.name()).collect();
        assert_eq!(names.len(), DiscardReason::COUNT);
        assert_eq!(
            DiscardReason::from(DropReason::Malformed).name(),
            "malformed"
        );
        assert_eq!(DiscardReason::TxError.name(), "tx_error");
    }

    /// Each worker builds its engine from its own clone of the configuration: the
    /// subscriber entries are shared, not copied per worker, and a reload's new entries
    /// likewise.
    #[test]
    fn every_engine_shares_the_configured_subscribers() {
        let text = |rate: &str| {
            let mut t =
                String::from("[interfaces]\na = \"x0\"\nb = \"x1\"\n[process]\nworkers = 2\n");
            for k in 1..=50 {
                t += &format!(
                    "[[subscribers]]\nprefix = \"10.0.0.{k}\"\n\
                     line = {{ down = \"{rate}\", up = \"1Mbit\" }}\n"
                );
            }
            t
        };
        let cfg = BoxConfig::parse(&text("8Mbit")).unwrap();
        cfg.validate().unwrap();
        assert_eq!(cfg.subscribers.table.plans(), 1);
        let mut engines: Vec<Engine> = (0..2)
            .map(|k| Engine::new(&cfg.clone(), LinkType::Ethernet, k).unwrap())
            .collect();
        for e in &engines {
            assert!(e
                .subscribers()
                .table()
                .shares_entries_with(&cfg.subscribers.table));
        }
        let new = BoxConfig::parse(&text("16Mbit")).unwrap();
        for e in &mut engines {
            e.reload(Instant::ZERO, &new.clone()).unwrap();
            assert!(e
                .subscribers()
                .table()
                .shares_entries_with(&new.subscribers.table));
        }
    }

    #[test]
    fn discarded_counts_by_reason() {
        let mut d = Discarded::default();
        assert!(d.is_empty());
        d.add(DropReason::QueueFull, 2);
        d.add(FilterReason::AckSuperseded, 1);
        d.add(DiscardReason::Shutdown, 3);
        d.add(DiscardReason::ReloadStranded, 0);
        assert_eq!(d.get(DropReason::QueueFull), 2);
        assert_eq!(d.total(), 6);
        let seen: Vec<(&str, u64)> = d.iter().map(|(r, n)| (r.name(), n)).collect();
        assert_eq!(
            seen,
            [("queue_full", 2), ("ack_superseded", 1), ("shutdown", 3)]
        );
    }
}
