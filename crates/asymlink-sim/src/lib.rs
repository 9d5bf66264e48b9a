//! # asymlink-sim: a deterministic discrete-event simulator for TCP over asymmetric links
//!
//! This file is the public API the Python front end binds to: build a [`Simulation`] from
//! a TOML scenario, advance it, and read its [`Results`].

pub mod apps;
pub mod bench;
pub mod conditioner;
mod engine;
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
}

/// A simulation built from a scenario, advanced in steps.
pub struct Simulation {
    world: engine::World,
    wall: std::time::Duration,
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
        let world = engine::World::build(spec, &opts)?;
        Ok(Simulation {
            world,
            wall: std::time::Duration::ZERO,
        })
    }

    /// Current simulated time.
    pub fn now(&self) -> Instant {
        self.world.now
    }

    /// The end of the run.
    pub fn end(&self) -> Instant {
        self.world.end
    }

    /// The monitors' sampling interval, and which time series are recorded
    /// (flows, queues, links): what makes the results grow with the duration.
    pub fn monitor_plan(&self) -> (core::time::Duration, [bool; 3]) {
        let m = &self.world.monitor;
        (m.interval, [m.flows_on(), m.queues_on(), m.links_on()])
    }

    /// Whether the run reached its end.
    pub fn is_finished(&self) -> bool {
        self.world.now >= self.world.end
    }

    /// Process events up to and including `t` (capped at the end).
    pub fn run_until(&mut self, t: Instant) {
        let start = std::time::Instant::now();
        self.world.run_until(t);
        self.wall += start.elapsed();
    }

    /// Run to the end.
    pub fn run(&mut self) {
        let end = self.world.end;
        self.run_until(end);
    }

    /// Events processed so far.
    pub fn events(&self) -> u64 {
        self.world.events
    }

    /// Packet transmissions so far.
    pub fn packet_hops(&self) -> u64 {
        self.world.packet_hops
    }

    /// Install a traffic conditioner on host `host` (by node name): its TCP connections
    /// ask it before every transmission. Call before running.
    pub fn set_conditioner(
        &mut self,
        host: &str,
        c: Box<dyn tcp::Conditioner>,
    ) -> Result<(), String> {
        let h = self.world.host_by_name(host)?;
        self.world.hosts[h].conditioner = Some(c);
        Ok(())
    }

    /// Install a receive-window policy on host `host`: its connections advertise at most
    /// what the policy allows (never below one MSS). Call before running.
    pub fn set_rwnd_policy(
        &mut self,
        host: &str,
        p: Box<dyn tcp::RwndPolicy>,
    ) -> Result<(), String> {
        let h = self.world.host_by_name(host)?;
        self.world.hosts[h].rwnd = Some(p);
        Ok(())
    }

    /// Check the conservation identities of every discipline (see
    /// `asymlink_core::qdisc::QdiscStats::check`). Returns the first violation.
    pub fn check_conservation(&self) -> Result<(), String> {
        self.world.check_conservation()
    }

    /// Results so far.
    pub fn results(&self) -> Results {
        summary::results(&self.world, self.wall.as_secs_f64())
    }
}
