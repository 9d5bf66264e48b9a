//! # asymlink-py: thin Python bindings of the simulator and the live box
//!
//! This crate only converts: Python arguments into [`asymlink_sim`] and
//! [`asymlink_live::cli`] calls, results into
//! plain Python objects (dicts of 1-D numpy arrays), and errors into exceptions
//! (all of that in [`error`]). Everything else lives in the pure-Python package
//! `asymlink`, which wraps this private module `asymlink._native`.

mod error;

use asymlink_core::time::Instant;
use asymlink_sim::{ColumnData, Results, RunOptions};
use numpy::IntoPyArray;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::path::PathBuf;
use std::sync::Mutex;

/// A simulation built from a TOML scenario, advanced in steps.
///
/// The engine is `Send` but not `Sync` (it owns trait objects); the mutex makes the Python
/// object shareable as pyo3 requires. Calls never contend: Python serialises them.
#[pyclass(module = "asymlink._native")]
struct Simulation {
    inner: Mutex<asymlink_sim::Simulation>,
}

impl Simulation {
    fn sim(&self) -> std::sync::MutexGuard<'_, asymlink_sim::Simulation> {
        // A panic inside the engine poisons the lock; the state is still readable.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[pymethods]
impl Simulation {
    /// Parse, validate and build. Raises `ScenarioError` naming `origin` and the key.
    /// Trace files are relative to `origin`'s directory (the working directory when
    /// `origin` is `<string>`).
    #[new]
    #[pyo3(signature = (toml_text, origin, out_dir=None, seed=None, threads=1))]
    fn py_new(
        py: Python<'_>,
        toml_text: &str,
        origin: &str,
        out_dir: Option<PathBuf>,
        seed: Option<u64>,
        threads: usize,
    ) -> PyResult<Self> {
        let opts = RunOptions {
            out_dir,
            seed,
            threads,
        };
        let base = (!origin.starts_with('<'))
            .then(|| std::path::Path::new(origin).parent())
            .flatten();
        asymlink_sim::Simulation::from_toml_in(toml_text, base, opts)
            .map(|inner| Simulation {
                inner: Mutex::new(inner),
            })
            .map_err(|e| error::scenario_error(py, origin, &e))
    }

    /// Current simulated time in seconds.
    #[getter]
    fn now(&self) -> f64 {
        self.sim().now().as_secs_f64()
    }

    /// End of the run in seconds.
    #[getter]
    fn end(&self) -> f64 {
        self.sim().end().as_secs_f64()
    }

    /// The monitors' sampling interval in seconds.
    #[getter]
    fn monitor_interval(&self) -> f64 {
        self.sim().monitor_plan().0.as_secs_f64()
    }

    /// Which time series are recorded: (flows, queues, links).
    #[getter]
    fn monitors(&self) -> (bool, bool, bool) {
        let [f, q, l] = self.sim().monitor_plan().1;
        (f, q, l)
    }

    /// Whether the run reached its end.
    #[getter]
    fn finished(&self) -> bool {
        self.sim().is_finished()
    }

    /// Process events up to and including `t_seconds` (capped at the end), without the GIL.
    fn run_until(&mut self, py: Python<'_>, t_seconds: f64) -> PyResult<()> {
        let t = seconds_to_instant(t_seconds)?;
        py.detach(|| self.sim().run_until(t));
        Ok(())
    }

    /// Run to the end, without the GIL.
    fn run(&mut self, py: Python<'_>) {
        py.detach(|| self.sim().run());
    }

    /// Results so far: `{"meta": {...}, "tables": {name: {column: ndarray | list[str]}}}`.
    fn results<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let r = self.sim().results();
        results_to_dict(py, r)
    }
}

fn seconds_to_instant(t: f64) -> PyResult<Instant> {
    if !(t.is_finite() && t >= 0.0) {
        return Err(PyValueError::new_err(format!(
            "time must be a finite number of seconds >= 0, got {t}"
        )));
    }
    // Saturating float-to-int cast: times beyond 584 years become Instant::MAX.
    Ok(Instant::from_nanos((t * 1e9).round() as u64))
}

fn results_to_dict(py: Python<'_>, r: Results) -> PyResult<Bound<'_, PyDict>> {
    let meta = PyDict::new(py);
    meta.set_item("scenario", r.scenario)?;
    meta.set_item("seed", r.seed)?;
    meta.set_item("duration_s", r.duration_s)?;
    meta.set_item("wall_s", r.wall_s)?;
    meta.set_item("events", r.events)?;
    meta.set_item("packet_hops", r.packet_hops)?;
    meta.set_item("trace_hash", r.trace_hash)?;
    meta.set_item("threads", r.threads)?;
    meta.set_item("late_handovers", r.late_handovers)?;
    let tables = PyDict::new(py);
    for table in r.tables {
        let columns = PyDict::new(py);
        for column in table.columns {
            match column.data {
                ColumnData::F64(v) => columns.set_item(column.name, v.into_pyarray(py))?,
                ColumnData::I64(v) => columns.set_item(column.name, v.into_pyarray(py))?,
                ColumnData::Str(v) => columns.set_item(column.name, v)?,
            }
        }
        tables.set_item(table.name, columns)?;
    }
    let out = PyDict::new(py);
    out.set_item("meta", meta)?;
    out.set_item("tables", tables)?;
    Ok(out)
}

/// Run the simulator benchmark (`asymlink_sim::bench`): a dumbbell of `flows` long-lived
/// flows, each on its own access link, over a bottleneck with a one-BDP drop-tail buffer.
/// Returns a dict of the measured figures. Runs without the GIL.
#[pyfunction]
#[allow(clippy::too_many_arguments)] // keyword arguments on the Python side
#[pyo3(signature = (flows, duration_s, bottleneck_bps, access_bps=1_000_000_000, rtt_s=0.02, profile="rfc", cc=None))]
fn bench_sim<'py>(
    py: Python<'py>,
    flows: u32,
    duration_s: f64,
    bottleneck_bps: u64,
    access_bps: u64,
    rtt_s: f64,
    profile: &str,
    cc: Option<&str>,
) -> PyResult<Bound<'py, PyDict>> {
    // NaN is not positive either.
    let positive = |x: f64| x.is_finite() && x > 0.0;
    if flows == 0
        || !positive(duration_s)
        || bottleneck_bps == 0
        || access_bps == 0
        || !positive(rtt_s)
    {
        return Err(PyValueError::new_err(
            "flows, duration, rates and RTT must all be positive",
        ));
    }
    let spec = asymlink_sim::bench::BenchSpec {
        flows,
        bottleneck_bps,
        access_bps,
        rtt_s,
        duration_s,
        profile: profile.to_string(),
        cc: cc.map(str::to_string),
    };
    let r = py
        .detach(|| asymlink_sim::bench::run(&spec))
        .map_err(|e| error::scenario_error(py, "bench", &e))?;
    let d = PyDict::new(py);
    d.set_item("flows", r.flows)?;
    d.set_item("sim_s", r.sim_s)?;
    d.set_item("wall_s", r.wall_s)?;
    d.set_item("setup_s", r.setup_s)?;
    d.set_item("packet_hops", r.packet_hops)?;
    d.set_item("events", r.events)?;
    d.set_item("packet_hops_per_sec", r.packet_hops_per_sec)?;
    d.set_item("events_per_sec", r.events_per_sec)?;
    d.set_item("ns_per_hop", r.ns_per_hop)?;
    d.set_item("bottleneck_utilization", r.goodput_fraction)?;
    d.set_item("trace_hash", format!("{:016x}", r.trace_hash))?;
    Ok(d)
}

/// Run the live middlebox command (`asymlink-box` with `argv`, program name excluded) in
/// this process and return its exit status. Releases the GIL for the whole run: the box
/// blocks SIGINT/SIGTERM/SIGHUP in the calling thread and reads them from a signalfd, so
/// they stop or reload the box instead of raising KeyboardInterrupt.
#[pyfunction]
fn box_main(py: Python<'_>, argv: Vec<String>) -> u8 {
    py.detach(|| asymlink_live::cli::main(&argv))
}

/// Validate a live box configuration file without touching any device: `None` when
/// valid, else the one-line error.
#[pyfunction]
fn box_check(path: PathBuf) -> Option<String> {
    asymlink_live::cli::check(&path)
}

/// The byte range `(start, end)` of the value at the dotted key path `key`
/// (`links.1.to_a.rate`) in the TOML text `src`, or `None` when that value is not written
/// there (or the text does not parse). Used to apply `--set` overrides to the original
/// text, so that comments and line numbers stay those of the file.
#[pyfunction]
fn value_span(src: &str, key: &str) -> Option<(usize, usize)> {
    match asymlink_core::config::span_of_key(src, key)? {
        (span, true) => Some((span.start, span.end)),
        (_, false) => None,
    }
}

/// A rate as configuration files write it (`512kbit`, `1.5Mbit/s`, `10Kibit`) in bit/s,
/// parsed by the core exactly as scenario files are. Raises `ValueError` with the core's
/// message.
#[pyfunction]
fn parse_rate(text: &str) -> PyResult<u64> {
    text.parse::<asymlink_core::units::Rate>()
        .map(|r| r.0)
        .map_err(|e| PyValueError::new_err(e.msg))
}

/// A size (`1500B`, `64KB`, `64KiB`, `1.5MB`) in bytes, parsed by the core.
#[pyfunction]
fn parse_size(text: &str) -> PyResult<u64> {
    text.parse::<asymlink_core::units::Bytes>()
        .map(|b| b.0)
        .map_err(|e| PyValueError::new_err(e.msg))
}

/// A duration (`200ms`, `1.5s`, `10us`, `2min`) in integer nanoseconds, parsed by the core.
#[pyfunction]
fn parse_duration(text: &str) -> PyResult<u64> {
    asymlink_core::units::parse_duration(text)
        .map(asymlink_core::time::dur_ns)
        .map_err(|e| PyValueError::new_err(e.msg))
}

/// The private native module behind the `asymlink` package.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<Simulation>()?;
    m.add_function(wrap_pyfunction!(bench_sim, m)?)?;
    m.add_function(wrap_pyfunction!(box_main, m)?)?;
    m.add_function(wrap_pyfunction!(box_check, m)?)?;
    m.add("ScenarioError", error::scenario_error_type(m.py())?)?;
    m.add_function(wrap_pyfunction!(value_span, m)?)?;
    m.add_function(wrap_pyfunction!(parse_rate, m)?)?;
    m.add_function(wrap_pyfunction!(parse_size, m)?)?;
    m.add_function(wrap_pyfunction!(parse_duration, m)?)?;
    Ok(())
}
