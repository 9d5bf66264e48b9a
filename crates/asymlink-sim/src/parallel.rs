//! A partitioned run: the scenario's nodes divided between worlds, one per thread, each
//! processing its own nodes' events, with packets handed over where a link crosses from
//! one world to another.
//!
//! A packet that starts on a link between two worlds arrives no sooner than the shortest
//! propagation delay of such a link (the lookahead) later, so a world may process its
//! events up to a lookahead past the other worlds' clocks without waiting on them; it
//! hands its crossing packets over as it goes ([`Worlds::run_steps`]). Each world is a
//! whole [`World`] built from the same scenario; its link directions that leave one of
//! its nodes for another world's export their packets ([`Link::set_export`]), and it
//! delivers the packets handed to it as events of their arrival times.
//!
//! How the nodes divide ([`plan`]): every host with its applications in world 0 (a flow's
//! application holds both of its ends), nodes joined by a link without delay (or with
//! jitter) always together, and the routers filled into the worlds in the scenario's
//! order, those next to world 0's nodes first, by an estimate of their work, until each
//! world holds its share.
//!
//! A run is deterministic for a seed and a number of threads, whatever the threads'
//! timing: each world orders its own events as one world does, and the packets handed to
//! it join its queue at fixed points ([`Worlds::run_steps`]). But events of different
//! worlds at one instant are not ordered against each other as one world orders them, so
//! the trace is not the one-world run's.
//!
//! [`Link::set_export`]: asymlink_core::link::Link::set_export

use crate::engine::{ConnAddrsLabel, World};
use crate::packet::SimPacket;
use crate::scenario::Spec;
use asymlink_core::config::ConfigError;
use asymlink_core::time::{Duration, Instant};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// The most threads a run may ask for (each world is a whole copy of the scenario's
/// links and nodes).
pub(crate) const MAX_THREADS: usize = 64;

/// A packet handed from one world to another.
pub(crate) struct Handover {
    /// Its arrival at the far end of its link direction.
    pub at: Instant,
    /// The link direction it was sent on.
    pub dir: u32,
    pub pkt: SimPacket,
    /// Its connection's addresses and label, with the first packet of the connection this
    /// world hands to that world (the receiver has no connections of its own to read
    /// them from).
    pub addrs: Option<Box<ConnAddrsLabel>>,
}

/// A world's part of a partitioned run: what it hands over and was handed.
pub(crate) struct Part {
    /// Per node: its world.
    pub node_world: Vec<u32>,
    /// Per world: the packets handed to it in this step.
    pub out: Vec<Vec<Handover>>,
    /// Per world: a bit per connection whose addresses were handed to it.
    pub told: Vec<Vec<u64>>,
    /// The labels of other worlds' connections (`u32::MAX`: not known), by `ConnId`.
    pub labels: Vec<u32>,
    /// Per world: the packets it handed to this one, by the step of their arrival
    /// (`buckets[v][i]`: step `first_step[v] + i`), each step's in the order sent.
    pub buckets: Vec<std::collections::VecDeque<Vec<Handover>>>,
    pub first_step: Vec<u64>,
    /// Emptied buckets, for reuse.
    pub spare: Vec<Vec<Handover>>,
    /// Packets handed to this world, waiting for their arrival events (`Ev::Remote`).
    pub inbox: Vec<Option<(u32, SimPacket)>>,
    pub inbox_free: Vec<u32>,
    /// A lookahead past the start of the step being processed: a packet handed over
    /// arrives at or after it (the other worlds may have processed everything before).
    pub horizon: Instant,
    /// Packets handed over that arrive before the horizon (see [`Worlds::late`]).
    pub late: u64,
    /// The exported packets of a link direction, on their way to `out`.
    pub scratch: Vec<(Instant, SimPacket)>,
}

/// How the nodes divide between the worlds.
pub(crate) struct Plan {
    /// Per node: its world.
    pub node_world: Vec<u32>,
    /// Number of worlds.
    pub worlds: usize,
    /// The shortest propagation delay of a link direction between two worlds.
    pub lookahead: Duration,
}

/// An estimate of a node's share of the work: a host (its TCP and applications) 1.4, a
/// router 0.4 per link and 1.2 per middlebox at it (from the access network's event
/// loop timed by node, then the host's weight chosen among 1.0, 1.4 and 1.7 by the
/// two-thread run's wall time: see docs/performance.md, "Two cores").
fn weight(spec: &Spec, node: usize, degree: &[u32], boxes: &[u32]) -> f64 {
    if matches!(spec.nodes[node].kind, crate::scenario::NodeKind::Host) {
        return 1.4;
    }
    0.4 * degree[node] as f64 + 1.2 * boxes[node] as f64
}

fn find(parent: &mut [usize], mut x: usize) -> usize {
    while parent[x] != x {
        parent[x] = parent[parent[x]];
        x = parent[x];
    }
    x
}

/// Divide the scenario's nodes between at most `threads` worlds (see the module
/// documentation). Fewer worlds when there is not enough to divide: one when every
/// node is joined to a host by links without delay.
pub(crate) fn plan(spec: &Spec, threads: usize) -> Plan {
    let n = spec.nodes.len();
    let mut parent: Vec<usize> = (0..n).collect();
    let mut degree = vec![0u32; n];
    let delay = |l: &crate::scenario::ResolvedLink| {
        let d = |c: &asymlink_core::link::LinkConfig| c.delay.map_or(Duration::ZERO, |s| s.0);
        d(&l.to_b).min(d(&l.to_a))
    };
    for l in &spec.links {
        degree[l.a] += 1;
        degree[l.b] += 1;
        // A link between two worlds needs a delay (the worlds' lookahead), and no jitter
        // (a jittered packet is held behind the one ahead of it, on the line).
        if delay(l).is_zero() || l.to_b.jitter.is_some() || l.to_a.jitter.is_some() {
            let (x, y) = (find(&mut parent, l.a), find(&mut parent, l.b));
            parent[x] = y;
        }
    }
    // (A middlebox feeds the directions leaving its node: its node's world runs them.)
    let mut boxes = vec![0u32; n];
    for m in &spec.middleboxes {
        boxes[m.node] += 1;
    }
    let roots: Vec<usize> = (0..n).map(|i| find(&mut parent, i)).collect();
    let mut comp_weight = vec![0.0f64; n];
    let mut has_host = vec![false; n];
    for i in 0..n {
        comp_weight[roots[i]] += weight(spec, i, &degree, &boxes);
        has_host[roots[i]] |= matches!(spec.nodes[i].kind, crate::scenario::NodeKind::Host);
    }
    let total: f64 = comp_weight.iter().sum();
    let mut world_of_comp = vec![u32::MAX; n];
    let mut load = vec![0.0f64; threads.max(1)];
    for i in 0..n {
        if has_host[roots[i]] {
            world_of_comp[roots[i]] = 0;
        }
    }
    load[0] = (0..n)
        .filter(|&i| roots[i] == i && has_host[i])
        .map(|i| comp_weight[i])
        .sum();
    // The other components in the scenario's order, those linked to world 0's first.
    let mut next_to_0 = vec![false; n];
    for l in &spec.links {
        for (x, y) in [(l.a, l.b), (l.b, l.a)] {
            if has_host[roots[x]] && !has_host[roots[y]] {
                next_to_0[roots[y]] = true;
            }
        }
    }
    let mut order: Vec<usize> = (0..n).filter(|&i| roots[i] == i && !has_host[i]).collect();
    order.sort_by_key(|&c| !next_to_0[c]);
    let share = total / threads.max(1) as f64;
    let mut w = 0usize;
    for c in order {
        while w + 1 < load.len() && load[w] + comp_weight[c] / 2.0 > share {
            w += 1;
        }
        world_of_comp[c] = w as u32;
        load[w] += comp_weight[c];
    }
    // Number the worlds in use densely (world 0 always: it holds the hosts).
    let mut used: Vec<u32> = world_of_comp
        .iter()
        .filter(|&&x| x != u32::MAX)
        .copied()
        .collect();
    used.sort_unstable();
    used.dedup();
    let node_world: Vec<u32> = (0..n)
        .map(|i| {
            let x = world_of_comp[roots[i]];
            used.iter().position(|&u| u == x).unwrap_or(0) as u32
        })
        .collect();
    let worlds = node_world
        .iter()
        .map(|&x| x as usize + 1)
        .max()
        .unwrap_or(1);
    let mut lookahead = Duration::MAX;
    for l in &spec.links {
        if node_world[l.a] != node_world[l.b] {
            lookahead = lookahead.min(delay(l));
        }
    }
    Plan {
        node_world,
        worlds,
        lookahead,
    }
}

/// The packets in transit between the worlds, `[from][to]`, in the order sent, and each
/// world's clock: it has processed its events before that instant and put here every
/// packet they handed over.
struct Channels {
    n: usize,
    slots: Vec<Padded<Mutex<Vec<Handover>>>>,
    clocks: Vec<Padded<AtomicU64>>,
    /// A world's thread panicked: the others stop waiting for its clock.
    failed: AtomicBool,
}

/// Raises [`Channels::failed`] if its world's thread unwinds.
struct FailGuard<'a>(&'a AtomicBool);

impl Drop for FailGuard<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.store(true, Ordering::Release);
        }
    }
}

/// A value alone in its cache lines (two: the pair a prefetcher fetches together), so
/// that one thread's writes do not take another's line away.
#[repr(align(128))]
struct Padded<T>(T);

impl Channels {
    fn new(n: usize) -> Channels {
        Channels {
            n,
            slots: (0..n * n).map(|_| Padded(Mutex::new(Vec::new()))).collect(),
            clocks: (0..n).map(|_| Padded(AtomicU64::new(0))).collect(),
            failed: AtomicBool::new(false),
        }
    }

    fn slot(&self, from: usize, to: usize) -> &Mutex<Vec<Handover>> {
        &self.slots[from * self.n + to].0
    }
}

/// Steps per lookahead: a world processes a step once every other world is at most a
/// lookahead behind the step's end, so it may run up to this many steps ahead of the
/// slowest, which smooths out the steps' uneven work.
const STEPS_PER_LOOKAHEAD: u64 = 2;

/// The worlds of a partitioned run.
pub(crate) struct Worlds {
    pub worlds: Vec<World>,
    /// Per link direction and middlebox: the world that runs it.
    pub dir_world: Vec<u32>,
    pub mb_world: Vec<u32>,
    lookahead: u64,
    /// The length of a step (a fraction of the lookahead).
    step: u64,
    /// Every world has processed its events before this instant.
    at: u64,
    /// The next sampling instant of the monitors (none past the end).
    next_sample: Option<u64>,
    channels: Channels,
    /// Per world: wall time processing its steps, and waiting for the others.
    pub busy: Vec<(std::time::Duration, std::time::Duration)>,
}

impl Worlds {
    /// Build the worlds of `plan` (more than one) from `spec`.
    pub fn build(spec: Spec, opts: &crate::RunOptions, plan: Plan) -> Result<Worlds, ConfigError> {
        if !spec.monitor.capture.is_empty() {
            return Err(ConfigError::new(
                "monitor.capture",
                "captures are written by one thread: run with threads = 1",
            ));
        }
        // Link `i`'s direction `2i` leaves its end `a`, `2i + 1` its end `b`.
        let dir_world: Vec<u32> = spec
            .links
            .iter()
            .flat_map(|l| [plan.node_world[l.a], plan.node_world[l.b]])
            .collect();
        // Each world built on its own thread.
        let built: Vec<Result<World, ConfigError>> = std::thread::scope(|s| {
            let builds: Vec<_> = (0..plan.worlds as u32)
                .map(|me| {
                    let (spec, plan, dir_world) = (spec.clone(), &plan, &dir_world);
                    s.spawn(move || {
                        let mut w = World::build_part(spec, opts, Some(me))?;
                        w.partition(me, plan.worlds, &plan.node_world, dir_world);
                        Ok(w)
                    })
                })
                .collect();
            builds
                .into_iter()
                .map(|b| b.join().expect("building a world"))
                .collect()
        });
        let worlds = built
            .into_iter()
            .collect::<Result<Vec<World>, ConfigError>>()?;
        let w0 = &worlds[0];
        let mb_world: Vec<u32> = w0
            .mbs
            .iter()
            .map(|m| dir_world[m.dirs[0] as usize])
            .collect();
        for (m, mb) in w0.mbs.iter().enumerate() {
            debug_assert!(mb
                .dirs
                .iter()
                .all(|&d| dir_world[d as usize] == mb_world[m]));
        }
        Ok(Worlds {
            dir_world,
            mb_world,
            lookahead: plan.lookahead.as_nanos().max(1) as u64,
            step: (plan.lookahead.as_nanos() as u64 / STEPS_PER_LOOKAHEAD).max(1),
            at: 0,
            next_sample: Some(0),
            channels: Channels::new(plan.worlds),
            busy: vec![Default::default(); plan.worlds],
            worlds,
        })
    }

    /// The end of the run.
    pub fn end(&self) -> Instant {
        self.worlds[0].end
    }

    /// Process events up to `t` (inclusive, capped at the end).
    pub fn run_until(&mut self, t: Instant) {
        let end = self.end().as_nanos();
        let limit = t.as_nanos().min(end);
        loop {
            if self.next_sample == Some(self.at) {
                self.sample();
                let next = self.at + self.worlds[0].monitor.interval.as_nanos() as u64;
                self.next_sample = (next <= end && next > self.at).then_some(next);
            }
            if self.at > limit {
                break;
            }
            let stop = self
                .next_sample
                .unwrap_or(u64::MAX)
                .min(limit.saturating_add(1));
            self.run_steps(stop);
        }
        for w in &mut self.worlds {
            w.run_until(Instant::from_nanos(limit));
        }
    }

    /// Run from `self.at` until `stop` (exclusive), one thread per world. Each world
    /// advances in steps of a fixed grid (cut at `stop`); before a step it waits until
    /// every other world's clock is at most a lookahead behind the step's end (nothing
    /// the others will still send arrives in it), takes what they handed it, puts the
    /// packets that arrive in the step on its queue (in the order of the worlds, each in
    /// the order sent: the same whatever the threads' timing), processes the step, hands
    /// its own packets over and sets its clock to the step's end.
    fn run_steps(&mut self, stop: u64) {
        let start = self.at;
        let lookahead = self.lookahead;
        let step_len = self.step;
        let n = self.worlds.len();
        let channels = &self.channels;
        let step = move |me: usize, w: &mut World| {
            let _guard = FailGuard(&channels.failed);
            let mut at = start;
            let mut busy = std::time::Duration::ZERO;
            let mut waited = std::time::Duration::ZERO;
            while at < stop {
                let end = stop.min((at / step_len + 1) * step_len);
                let t0 = std::time::Instant::now();
                for (v, clock) in channels.clocks.iter().enumerate() {
                    let mut spins = 0u32;
                    while v != me && clock.0.load(Ordering::Acquire).saturating_add(lookahead) < end
                    {
                        if channels.failed.load(Ordering::Acquire) {
                            // Another world's thread panicked: its panic is the run's.
                            return (busy, waited);
                        }
                        if spins < 4_000 {
                            spins += 1;
                            std::hint::spin_loop();
                        } else {
                            std::thread::yield_now();
                        }
                    }
                }
                let t1 = std::time::Instant::now();
                waited += t1 - t0;
                for v in 0..n {
                    if v != me {
                        let mut got = channels
                            .slot(v, me)
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        w.receive(v, &mut got, step_len);
                    }
                }
                w.arrivals_before(Instant::from_nanos(at), Instant::from_nanos(end), step_len);
                w.set_horizon(Instant::from_nanos(at.saturating_add(lookahead)));
                w.run_until(Instant::from_nanos(end - 1));
                for (to, out) in w.outboxes().iter_mut().enumerate() {
                    if to != me && !out.is_empty() {
                        let mut slot = channels
                            .slot(me, to)
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        slot.append(out);
                    }
                }
                channels.clocks[me].0.store(end, Ordering::Release);
                busy += t1.elapsed();
                at = end;
            }
            (busy, waited)
        };
        let (first, rest) = self.worlds.split_at_mut(1);
        let times = std::thread::scope(|s| {
            let others: Vec<_> = rest
                .iter_mut()
                .enumerate()
                .map(|(i, w)| s.spawn(move || step(i + 1, w)))
                .collect();
            let mut times = vec![step(0, &mut first[0])];
            for h in others {
                match h.join() {
                    Ok(t) => times.push(t),
                    Err(panic) => std::panic::resume_unwind(panic),
                }
            }
            times
        });
        for (b, (busy, waited)) in self.busy.iter_mut().zip(times) {
            b.0 += busy;
            b.1 += waited;
        }
        self.at = stop;
    }

    /// Sample the monitors at `self.at`: world 0's records every series, reading each
    /// link direction from the world that runs it.
    fn sample(&mut self) {
        let now = Instant::from_nanos(self.at);
        let (first, rest) = self.worlds.split_at_mut(1);
        let w0 = &mut first[0];
        w0.now = now;
        w0.sample_flows();
        if w0.monitor.queues_on() || w0.monitor.links_on() {
            for (i, &o) in self.dir_world.iter().enumerate() {
                let (dirs, mbs) = if o == 0 {
                    (&w0.dirs, &w0.mbs)
                } else {
                    let w = &rest[o as usize - 1];
                    (&w.dirs, &w.mbs)
                };
                crate::engine::sample_dir(&mut w0.monitor, now, i, mbs, &dirs[i]);
            }
        }
    }

    /// Lend world 0 the link directions and middleboxes the other worlds run, their
    /// events and counters, call `f` on it, and give them back.
    pub fn with_merged<R>(&mut self, f: impl FnOnce(&World) -> R) -> R {
        self.swap_parts();
        let (first, rest) = self.worlds.split_at_mut(1);
        let w0 = &mut first[0];
        let kept = (w0.events, w0.packet_hops, w0.trace_hash, w0.unroutable);
        for w in rest.iter_mut() {
            w0.monitor.take_events(&mut w.monitor);
            w0.events += w.events;
            w0.packet_hops += w.packet_hops;
            w0.unroutable += w.unroutable;
            w0.trace_hash = crate::engine::hash_worlds(w0.trace_hash, w.trace_hash);
        }
        let r = f(w0);
        (w0.events, w0.packet_hops, w0.trace_hash, w0.unroutable) = kept;
        self.swap_parts();
        r
    }

    fn swap_parts(&mut self) {
        let (first, rest) = self.worlds.split_at_mut(1);
        let w0 = &mut first[0];
        for (i, &o) in self.dir_world.iter().enumerate() {
            if o != 0 {
                std::mem::swap(&mut w0.dirs[i], &mut rest[o as usize - 1].dirs[i]);
            }
        }
        for (i, &o) in self.mb_world.iter().enumerate() {
            if o != 0 {
                std::mem::swap(&mut w0.mbs[i], &mut rest[o as usize - 1].mbs[i]);
            }
        }
    }

    /// Packets handed over that arrive sooner than a lookahead after the start of the step
    /// their sender was processing (none in a correct run: a transmission that starts in
    /// a step arrives at least a lookahead later).
    pub fn late(&self) -> u64 {
        self.worlds.iter().map(|w| w.late_handovers()).sum()
    }
}
