"""The bindings crate: the Simulation class, the results dict and the error class."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from asymlink import _native
from asymlink._native import ScenarioError, Simulation
from asymlink.validate import ConfigError


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


def test_the_engine_raises_the_python_config_error_with_key_and_line(scenario_toml: str) -> None:
    src = scenario_toml.replace('to_a = { rate = "512kbit" }', 'to_a = { rate = "0kbit" }')
    line = src.splitlines().index('to_a = { rate = "0kbit" }') + 1
    with pytest.raises(ConfigError) as info:
        Simulation(src, "a.toml")
    err = info.value
    assert type(err) is ScenarioError is _native.ScenarioError
    assert (err.origin, err.key, err.path) == ("a.toml", "links[1].to_a.rate",
                                               "links[1].to_a.rate")
    assert err.line == line
    assert str(err) == f"a.toml: links[1].to_a.rate: {err.msg}"
    assert err.msg.startswith("must be positive") and err.msg.endswith(f"(line {line})")


def test_scenario_errors_survive_pickling_and_prefixing() -> None:
    err = ScenarioError("a.toml", "rate", "bare number (line 3)")
    back = pickle.loads(pickle.dumps(err))
    assert (type(back), str(back), back.origin, back.key, back.line) == (
        ScenarioError, "a.toml: rate: bare number (line 3)", "a.toml", "rate", 3)
    moved = err.within("links[2]")
    assert (type(moved), moved.origin, moved.key) == (ScenarioError, "a.toml", "links[2].rate")
    assert str(ScenarioError("a.toml", "", "empty")) == "a.toml: empty"
    assert ScenarioError("a.toml", "", "empty").line is None
    plain = pickle.loads(pickle.dumps(ConfigError("x", "bad")))
    assert (type(plain), plain.path, plain.msg) == (ConfigError, "x", "bad")


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
        "scenario", "seed", "duration_s", "wall_s", "events", "packet_hops", "trace_hash",
        "threads", "late_handovers",
    }
    assert res["meta"]["threads"] == 1 and res["meta"]["late_handovers"] == 0
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
