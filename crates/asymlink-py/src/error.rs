//! Conversion of Rust errors into Python exceptions: the only place where that happens.

use asymlink_core::config::ConfigError;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pyo3::create_exception!(
    asymlink._native,
    ScenarioError,
    PyValueError,
    "A scenario is invalid. Attributes: `origin` (file or \"<string>\"), `key` (the key \
     path, e.g. `links[2].rate`; may be empty) and `msg` (what is wrong)."
);

/// The Python `ScenarioError` for the error `e` in `origin`: the message reads
/// `origin: key: msg` (one line), with attributes `origin`, `key` (`e.path`) and `msg`.
pub fn scenario_error(py: Python<'_>, origin: &str, e: &ConfigError) -> PyErr {
    build_scenario_error(py, origin, e).unwrap_or_else(|failure| failure)
}

fn build_scenario_error(py: Python<'_>, origin: &str, e: &ConfigError) -> PyResult<PyErr> {
    let exc = py
        .get_type::<ScenarioError>()
        .call1((format!("{origin}: {e}"),))?;
    exc.setattr("origin", origin)?;
    exc.setattr("key", &e.path)?;
    exc.setattr("msg", &e.msg)?;
    Ok(PyErr::from_value(exc))
}

/// Build (not raise) a `ScenarioError`, so that errors the Python layer detects (e.g. an
/// override path that does not exist) look exactly like the engine's.
#[pyfunction]
#[pyo3(name = "scenario_error")]
pub fn py_scenario_error(py: Python<'_>, origin: String, key: String, msg: String) -> Py<PyAny> {
    scenario_error(py, &origin, &ConfigError::new(key, msg))
        .into_value(py)
        .into_any()
}
