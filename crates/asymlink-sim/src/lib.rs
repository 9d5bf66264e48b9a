//! # asymlink-sim: a deterministic discrete-event simulator for TCP over asymmetric links
//!
//! (Under construction: the engine lands in the following commits. This file fixes the
//! public API the Python front end binds to.)

pub mod packet;
pub mod results;
pub mod tcp;

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

/// A scenario error: what is wrong, where (file and key path).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ScenarioError {
    /// The file (or "<string>").
    pub origin: String,
    /// The key path, e.g. `links[2].rate` (may be empty).
    pub key: String,
    /// What is wrong.
    pub msg: String,
}

impl std::fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.key.is_empty() {
            write!(f, "{}: {}", self.origin, self.msg)
        } else {
            write!(f, "{}: {}: {}", self.origin, self.key, self.msg)
        }
    }
}

impl std::error::Error for ScenarioError {}

/// A simulation built from a scenario, advanced in steps.
pub struct Simulation {
    name: String,
    now: Instant,
    end: Instant,
}

impl Simulation {
    /// Parse and validate a TOML scenario and build the simulation. `origin` names the
    /// source in error messages.
    pub fn from_toml(src: &str, origin: &str, _opts: RunOptions) -> Result<Simulation, ScenarioError> {
        let v: toml::Table = toml::from_str(src).map_err(|e| ScenarioError {
            origin: origin.to_string(),
            key: String::new(),
            msg: e.to_string(),
        })?;
        let name = v.get("name").and_then(|n| n.as_str()).unwrap_or("scenario").to_string();
        Ok(Simulation {
            name,
            now: Instant::ZERO,
            end: Instant::from_secs(1),
        })
    }

    /// Current simulated time.
    pub fn now(&self) -> Instant {
        self.now
    }

    /// The end of the run.
    pub fn end(&self) -> Instant {
        self.end
    }

    /// Whether the run reached its end.
    pub fn is_finished(&self) -> bool {
        self.now >= self.end
    }

    /// Process events up to and including `t` (capped at the end).
    pub fn run_until(&mut self, t: Instant) {
        self.now = t.min(self.end);
    }

    /// Run to the end.
    pub fn run(&mut self) {
        self.run_until(self.end);
    }

    /// Results so far.
    pub fn results(&self) -> Results {
        Results {
            scenario: self.name.clone(),
            ..Results::default()
        }
    }
}
