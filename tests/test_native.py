"""The bindings crate: the Simulation class, the results dict and the error class."""

from __future__ import annotations

import subprocess
import sys

import pytest

from asymlink import _native
from asymlink._native import ScenarioError, Simulation


def test_version_is_the_crate_version() -> None:
    assert _native.__version__.count(".") == 2


def test_scenario_error_is_a_value_error_with_fields() -> None:
    with pytest.raises(ValueError) as info:
        Simulation("x = [", "bad.toml")
    err = info.value
    assert isinstance(err, ScenarioError)
    assert err.origin == "bad.toml"
    assert err.key == ""
    assert err.msg
    assert str(err) == f"bad.toml: {err.msg}"


def test_scenario_error_helper_formats_like_the_engine() -> None:
    err = _native.scenario_error("a.toml", "links[2].rate", "bare number")
    assert isinstance(err, ScenarioError)
    assert (err.origin, err.key, err.msg) == ("a.toml", "links[2].rate", "bare number")
    assert str(err) == "a.toml: links[2].rate: bare number"
    assert str(_native.scenario_error("a.toml", "", "empty")) == "a.toml: empty"


def test_simulation_steps_to_the_end(scenario_toml: str) -> None:
    sim = Simulation(scenario_toml, "tiny.toml", seed=5)
    assert sim.now == 0.0
    assert sim.end > 0.0
    assert not sim.finished
    sim.run_until(sim.end / 2)
    assert 0.0 < sim.now <= sim.end
    sim.run()
    assert sim.finished
    assert sim.now == sim.end


def test_run_until_past_the_end_is_capped(scenario_toml: str) -> None:
    sim = Simulation(scenario_toml, "tiny.toml")
    sim.run_until(1e12)
    assert sim.now == sim.end


@pytest.mark.parametrize("t", [-1.0, float("nan"), float("inf")])
def test_run_until_rejects_bad_times(scenario_toml: str, t: float) -> None:
    sim = Simulation(scenario_toml, "tiny.toml")
    with pytest.raises(ValueError, match="finite number of seconds"):
        sim.run_until(t)


def test_results_dict_shape(scenario_toml: str) -> None:
    sim = Simulation(scenario_toml, "tiny.toml", out_dir=None, seed=None)
    sim.run()
    res = sim.results()
    assert set(res) == {"meta", "tables"}
    assert set(res["meta"]) == {
        "scenario", "seed", "duration_s", "wall_s", "events", "packet_hops", "trace_hash"
    }
    assert res["meta"]["scenario"] == "tiny"
    assert isinstance(res["tables"], dict)


def test_negative_seed_is_refused(scenario_toml: str) -> None:
    with pytest.raises(OverflowError):
        Simulation(scenario_toml, "tiny.toml", seed=-1)


def test_stubs_match_the_native_module() -> None:
    stubtest = pytest.importorskip("mypy.stubtest")
    proc = subprocess.run(
        [sys.executable, "-m", stubtest.__name__, "asymlink._native"],
        capture_output=True, text=True, check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
