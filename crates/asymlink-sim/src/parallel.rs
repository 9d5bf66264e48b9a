//! A partitioned run: the scenario's nodes divided between worlds, one per thread, each
//! processing its own nodes' events, with packets handed over where a link crosses from
//! one world to another.
//!
//! The worlds advance in windows no longer than the shortest propagation delay of a link
//! between two of them (the lookahead): a packet whose transmission starts in a window
//! arrives in a later one, so a world can process a window without waiting on the
//! others, and hands its crossing packets over at the window's end. Each world is a
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
//! A run is deterministic for a seed and a number of threads: the worlds' events are
//! ordered as in one world, but events of different worlds at the same instant are not
//! ordered against each other, so the trace is not the one-world run's.
//!
//! [`Link::set_export`]: asymlink_core::link::Link::set_export

use crate::engine::{ConnAddrsLabel, World};
use crate::packet::SimPacket;
use crate::scenario::Spec;
use asymlink_core::config::ConfigError;
use asymlink_core::time::{Duration, Instant};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

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
    /// Per world: the packets handed to it in this window.
    pub out: Vec<Vec<Handover>>,
    /// Per world: a bit per connection whose addresses were handed to it.
    pub told: Vec<Vec<u64>>,
    /// The labels of other worlds' connections (`u32::MAX`: not known), by `ConnId`.
    pub labels: Vec<u32>,
    /// Packets handed to this world, waiting for their arrival events (`Ev::Remote`).
    pub inbox: Vec<Option<(u32, SimPacket)>>,
    pub inbox_free: Vec<u32>,
    /// The end of the window being processed: a packet handed over arrives at or after it.
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

/// An estimate of a node's share of the work, in units of a host's: a router's grows
/// with its links and the middleboxes at it (measured on the access network: a home
/// router with its box and two links costs about two hosts, the DSLAM's and the core's
/// links about 0.4 of a host each).
fn weight(spec: &Spec, node: usize, degree: &[u32]) -> f64 {
    if matches!(spec.nodes[node].kind, crate::scenario::NodeKind::Host) {
        return 1.0;
    }
    let boxes = spec.middleboxes.iter().filter(|m| m.node == node).count();
    0.4 * degree[node] as f64 + 1.2 * boxes as f64
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
    let roots: Vec<usize> = (0..n).map(|i| find(&mut parent, i)).collect();
    let mut comp_weight = vec![0.0f64; n];
    let mut has_host = vec![false; n];
    for i in 0..n {
        comp_weight[roots[i]] += weight(spec, i, &degree);
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

/// A barrier for threads that each have a core: they spin, and yield when kept waiting.
struct SpinBarrier {
    n: usize,
    count: AtomicUsize,
    generation: AtomicUsize,
}

impl SpinBarrier {
    fn new(n: usize) -> SpinBarrier {
        SpinBarrier {
            n,
            count: AtomicUsize::new(0),
            generation: AtomicUsize::new(0),
        }
    }

    fn wait(&self) {
        let g = self.generation.load(Ordering::Acquire);
        if self.count.fetch_add(1, Ordering::AcqRel) + 1 == self.n {
            self.count.store(0, Ordering::Relaxed);
            self.generation.fetch_add(1, Ordering::Release);
            return;
        }
        let mut spins = 0u32;
        while self.generation.load(Ordering::Acquire) == g {
            if spins < 2_000 {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    }
}

/// The packets in transit between the worlds: `[from][to][window parity]`. A world
/// writes a window's packets into the window's parity and takes what it was handed in the
/// previous window's parity as its next window starts: the writer of a parity next writes
/// it two windows on, after a barrier its readers pass only once they took it.
struct Channels {
    n: usize,
    slots: Vec<Mutex<Vec<Handover>>>,
}

impl Channels {
    fn new(n: usize) -> Channels {
        Channels {
            n,
            slots: (0..n * n * 2).map(|_| Mutex::new(Vec::new())).collect(),
        }
    }

    fn slot(&self, from: usize, to: usize, parity: usize) -> &Mutex<Vec<Handover>> {
        &self.slots[(from * self.n + to) * 2 + parity]
    }
}

/// The worlds of a partitioned run.
pub(crate) struct Worlds {
    pub worlds: Vec<World>,
    /// Per link direction and middlebox: the world that runs it.
    pub dir_world: Vec<u32>,
    pub mb_world: Vec<u32>,
    lookahead: u64,
    /// Every world has processed its events before this instant and taken what it was
    /// handed before it, but for the last window's packets (in `parity ^ 1`).
    at: u64,
    parity: usize,
    /// The next sampling instant of the monitors (none past the end).
    next_sample: Option<u64>,
    channels: Channels,
    /// Per world: wall time processing its windows, and waiting for the others.
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
        let mut worlds = Vec::with_capacity(plan.worlds);
        for me in 0..plan.worlds as u32 {
            let mut w = World::build_part(spec.clone(), opts, Some(me))?;
            w.partition(me, plan.worlds, &plan.node_world, &dir_world);
            worlds.push(w);
        }
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
            at: 0,
            parity: 0,
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
            self.run_windows(stop);
        }
        for w in &mut self.worlds {
            w.run_until(Instant::from_nanos(limit));
        }
    }

    /// Run windows from `self.at` until `stop` (exclusive), one thread per world.
    fn run_windows(&mut self, stop: u64) {
        let start = self.at;
        let parity = self.parity;
        let lookahead = self.lookahead;
        let n = self.worlds.len();
        let barrier = SpinBarrier::new(n);
        let channels = &self.channels;
        let barrier = &barrier;
        // Every world runs the same windows: the count of windows tells the parity.
        let step = move |me: usize, w: &mut World| {
            let mut at = start;
            let mut parity = parity;
            let mut busy = std::time::Duration::ZERO;
            let mut waited = std::time::Duration::ZERO;
            while at < stop {
                let t0 = std::time::Instant::now();
                let end = stop.min(at.saturating_add(lookahead));
                for from in 0..n {
                    if from != me {
                        let mut got = channels
                            .slot(from, me, parity ^ 1)
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        w.take_handovers(&mut got, Instant::from_nanos(at));
                    }
                }
                w.set_horizon(Instant::from_nanos(end));
                w.run_until(Instant::from_nanos(end - 1));
                for (to, out) in w.outboxes().iter_mut().enumerate() {
                    if to != me && !out.is_empty() {
                        let mut slot = channels
                            .slot(me, to, parity)
                            .lock()
                            .unwrap_or_else(|p| p.into_inner());
                        slot.append(out);
                    }
                }
                let t1 = std::time::Instant::now();
                barrier.wait();
                busy += t1 - t0;
                waited += t1.elapsed();
                at = end;
                parity ^= 1;
            }
            (parity, busy, waited)
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
                times.push(h.join().expect("a world's thread"));
            }
            times
        });
        for (b, (parity, busy, waited)) in self.busy.iter_mut().zip(times) {
            self.parity = parity;
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

    /// Handovers that arrived before the receiving world's window had ended (none in a
    /// correct run: a transmission that starts in a window arrives after it).
    pub fn late(&self) -> u64 {
        self.worlds.iter().map(|w| w.late_handovers()).sum()
    }
}
