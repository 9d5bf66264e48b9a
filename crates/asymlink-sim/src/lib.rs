//! # asymlink-sim: a deterministic discrete-event simulator for TCP over asymmetric links
//!
//! This file is the public API the Python front end binds to: build a [`Simulation`] from
//! a TOML scenario, advance it, and read its [`Results`].

pub mod apps;
pub mod bench;
pub mod conditioner;
mod engine;
mod parallel;
pub use asymlink_core::hist;
pub mod monitor;
pub mod packet;
pub mod pcap;
pub mod queue;
pub mod results;
pub mod rwnd;
pub mod scenario;
mod summary;
pub mod tcp;
mod topology;

pub use asymlink_core::config::ConfigError;
pub use results::{Column, ColumnData, Results, Table};

use asymlink_core::time::Instant;
use std::path::PathBuf;

/// Options of a run that are not part of the scenario.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Where pcap captures are written (captures are refused without it).
    pub out_dir: Option<PathBuf>,
    /// Override the scenario's seed.
    pub seed: Option<u64>,
    /// Threads to run on (0 or 1: one): the nodes are divided between as many worlds,
    /// which exchange packets at the links between them (see `docs/performance.md`,
    /// "Two cores"). A run is deterministic for a seed and a number of threads.
    pub threads: usize,
}

/// A simulation built from a scenario, advanced in steps.
pub struct Simulation {
    engine: Engine,
    wall: std::time::Duration,
}

/// One world, or the worlds of a partitioned run (behind a lock: building their results
/// lends world 0 the others' parts).
enum Engine {
    One(Box<engine::World>),
    Many(std::sync::Mutex<parallel::Worlds>),
}

impl Simulation {
    /// Parse and validate a TOML scenario and build the simulation. The error names the
    /// key and its line (`links[1].to_a.rate: must be positive (line 14)`).
    pub fn from_toml(src: &str, opts: RunOptions) -> Result<Simulation, ConfigError> {
        Simulation::from_toml_in(src, None, opts)
    }

    /// As [`Simulation::from_toml`] for text read from a file in directory `base`: the
    /// scenario's trace files are relative to it (`None`: to the working directory).
    pub fn from_toml_in(
        src: &str,
        base: Option<&std::path::Path>,
        opts: RunOptions,
    ) -> Result<Simulation, ConfigError> {
        let spec = scenario::Spec::parse_in(src, base)?;
        Simulation::from_spec(spec, opts).map_err(|e| e.with_line(src))
    }

    /// Build from an already validated scenario.
    pub fn from_spec(spec: scenario::Spec, opts: RunOptions) -> Result<Simulation, ConfigError> {
        if opts.threads > parallel::MAX_THREADS {
            return Err(ConfigError::new(
                "threads",
                format!(
                    "at most {} threads, got {}",
                    parallel::MAX_THREADS,
                    opts.threads
                ),
            ));
        }
        let plan = (opts.threads > 1).then(|| parallel::plan(&spec, opts.threads));
        let engine = match plan {
            Some(plan) if plan.worlds > 1 => Engine::Many(std::sync::Mutex::new(
                parallel::Worlds::build(spec, &opts, plan)?,
            )),
            _ => Engine::One(Box::new(engine::World::build(spec, &opts)?)),
        };
        Ok(Simulation {
            engine,
            wall: std::time::Duration::ZERO,
        })
    }

    /// `f` of world 0 (the only one, or the one with the hosts).
    fn with_world<R>(&self, f: impl FnOnce(&engine::World) -> R) -> R {
        match &self.engine {
            Engine::One(w) => f(w),
            Engine::Many(m) => f(&m.lock().unwrap_or_else(|p| p.into_inner()).worlds[0]),
        }
    }

    fn world0_mut(&mut self) -> &mut engine::World {
        match &mut self.engine {
            Engine::One(w) => w,
            Engine::Many(m) => &mut m.get_mut().unwrap_or_else(|p| p.into_inner()).worlds[0],
        }
    }

    /// Current simulated time.
    pub fn now(&self) -> Instant {
        self.with_world(|w| w.now)
    }

    /// The end of the run.
    pub fn end(&self) -> Instant {
        self.with_world(|w| w.end)
    }

    /// The monitors' sampling interval, and which time series are recorded
    /// (flows, queues, links): what makes the results grow with the duration.
    pub fn monitor_plan(&self) -> (core::time::Duration, [bool; 3]) {
        self.with_world(|w| {
            let m = &w.monitor;
            (m.interval, [m.flows_on(), m.queues_on(), m.links_on()])
        })
    }

    /// Whether the run reached its end.
    pub fn is_finished(&self) -> bool {
        self.with_world(|w| w.now >= w.end)
    }

    /// Threads the run uses (the worlds its nodes are divided between).
    pub fn threads(&self) -> usize {
        match &self.engine {
            Engine::One(_) => 1,
            Engine::Many(m) => m.lock().unwrap_or_else(|p| p.into_inner()).worlds.len(),
        }
    }

    /// Per thread of a partitioned run: the wall time it spent processing its world's
    /// steps and waiting for the other worlds, in seconds (empty for one thread).
    pub fn thread_times(&self) -> Vec<(f64, f64)> {
        match &self.engine {
            Engine::One(_) => Vec::new(),
            Engine::Many(m) => m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .busy
                .iter()
                .map(|(b, w)| (b.as_secs_f64(), w.as_secs_f64()))
                .collect(),
        }
    }

    /// Process events up to and including `t` (capped at the end).
    pub fn run_until(&mut self, t: Instant) {
        let start = std::time::Instant::now();
        match &mut self.engine {
            Engine::One(w) => w.run_until(t),
            Engine::Many(m) => m.get_mut().unwrap_or_else(|p| p.into_inner()).run_until(t),
        }
        self.wall += start.elapsed();
    }

    /// Run to the end.
    pub fn run(&mut self) {
        let end = self.end();
        self.run_until(end);
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.sum_worlds(|w| w.events)
    }

    /// Packet transmissions so far.
    pub fn packet_hops(&self) -> u64 {
        self.sum_worlds(|w| w.packet_hops)
    }

    /// The sum of `f` over the worlds.
    fn sum_worlds(&self, f: impl Fn(&engine::World) -> u64) -> u64 {
        match &self.engine {
            Engine::One(w) => f(w),
            Engine::Many(m) => {
                let m = m.lock().unwrap_or_else(|p| p.into_inner());
                m.worlds.iter().map(f).sum()
            }
        }
    }

    /// Install a traffic conditioner on host `host` (by node name): its TCP connections
    /// ask it before every transmission. Call before running.
    pub fn set_conditioner(
        &mut self,
        host: &str,
        c: Box<dyn tcp::Conditioner>,
    ) -> Result<(), String> {
        let w = self.world0_mut();
        let h = w.host_by_name(host)?;
        w.hosts[h].conditioner = Some(c);
        Ok(())
    }

    /// Install a receive-window policy on host `host`: its connections advertise at most
    /// what the policy allows (never below one MSS). Call before running.
    pub fn set_rwnd_policy(
        &mut self,
        host: &str,
        p: Box<dyn tcp::RwndPolicy>,
    ) -> Result<(), String> {
        let w = self.world0_mut();
        let h = w.host_by_name(host)?;
        w.hosts[h].rwnd = Some(p);
        Ok(())
    }

    /// Check the conservation identities of every discipline (see
    /// `asymlink_core::qdisc::QdiscStats::check`). Returns the first violation.
    pub fn check_conservation(&self) -> Result<(), String> {
        match &self.engine {
            Engine::One(w) => w.check_conservation(),
            Engine::Many(m) => m
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .with_merged(|w| w.check_conservation()),
        }
    }

    /// Results so far.
    pub fn results(&self) -> Results {
        let wall = self.wall.as_secs_f64();
        match &self.engine {
            Engine::One(w) => summary::results(w, wall),
            Engine::Many(m) => {
                let mut m = m.lock().unwrap_or_else(|p| p.into_inner());
                let mut r = m.with_merged(|w| summary::results(w, wall));
                r.threads = m.worlds.len() as u32;
                r.late_handovers = m.late();
                r
            }
        }
    }
}
