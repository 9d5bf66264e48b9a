//! Conversion of Rust errors into Python exceptions: the only place where that happens.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

pyo3::create_exception!(
    asymlink._native,
    ScenarioError,
    PyValueError,
    "A scenario is invalid. Attributes: `origin` (file or \"<string>\"), `key` (the key \
     path, e.g. `links[2].rate`; may be empty) and `msg` (what is wrong)."
);

/// The Python `ScenarioError` for `e`: message as `e` displays, plus `origin`, `key`, `msg`.
pub fn scenario_error(py: Python<'_>, e: &asymlink_sim::ScenarioError) -> PyErr {
    build_scenario_error(py, e).unwrap_or_else(|failure| failure)
}

fn build_scenario_error(py: Python<'_>, e: &asymlink_sim::ScenarioError) -> PyResult<PyErr> {
    let exc = py.get_type::<ScenarioError>().call1((e.to_string(),))?;
    exc.setattr("origin", &e.origin)?;
    exc.setattr("key", &e.key)?;
    exc.setattr("msg", &e.msg)?;
    Ok(PyErr::from_value(exc))
}

/// Build (not raise) a `ScenarioError`, so that errors the Python layer detects (e.g. an
/// override path that does not exist) look exactly like the engine's.
#[pyfunction]
#[pyo3(name = "scenario_error")]
pub fn py_scenario_error(py: Python<'_>, origin: String, key: String, msg: String) -> Py<PyAny> {
    let e = asymlink_sim::ScenarioError { origin, key, msg };
    scenario_error(py, &e).into_value(py).into_any()
}
