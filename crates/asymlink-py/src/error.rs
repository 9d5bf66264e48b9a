//! Conversion of Rust errors into Python exceptions: the only place where that happens.
//!
//! A scenario the engine refuses raises `asymlink.validate.ScenarioError`, a Python class
//! deriving from `asymlink.validate.ConfigError`, so one `except ConfigError` catches
//! every configuration mistake, whether Python or the engine found it.

use asymlink_core::config::ConfigError;
use pyo3::prelude::*;

/// The Python `ScenarioError` for the error `e` in `origin`: the message reads
/// `origin: key: msg` (one line), with attributes `origin`, `key` (`e.path`), `msg` and
/// `line` (the line the message names, if any).
pub fn scenario_error(py: Python<'_>, origin: &str, e: &ConfigError) -> PyErr {
    build_scenario_error(py, origin, e).unwrap_or_else(|failure| failure)
}

fn build_scenario_error(py: Python<'_>, origin: &str, e: &ConfigError) -> PyResult<PyErr> {
    let exc = scenario_error_type(py)?.call1((origin, &e.path, &e.msg))?;
    Ok(PyErr::from_value(exc))
}

/// The `ScenarioError` class, imported from `asymlink.validate` (an import error, not a
/// panic, if that fails).
pub fn scenario_error_type(py: Python<'_>) -> PyResult<Bound<'_, PyAny>> {
    py.import("asymlink.validate")?.getattr("ScenarioError")
}
