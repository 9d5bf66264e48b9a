"""Trace-driven links from Python: relative trace files, the shipped traces, errors, and
the generator reproducing the shipped files."""

from __future__ import annotations

import importlib.util
from importlib.resources import files
from pathlib import Path

import numpy as np
import pytest

from asymlink import Scenario, ScenarioError

REPO = Path(__file__).resolve().parent.parent

SCENARIO = """
duration = "1s"
[[nodes]]
name = "s"
[[nodes]]
name = "c"
[[links]]
a = "s"
b = "c"
rate = "10Mbit"
to_b = {{ trace = "{trace}" }}
[[flows]]
name = "f"
from = "s"
to = "c"
app = {{ kind = "cbr", rate = "20Mbit", size = "1500B" }}
"""


def _run(sc: Scenario) -> dict[str, np.ndarray]:
    sim = sc.simulation()
    sim.run()
    tables = sim.results()["tables"]
    q = tables["queue_summary"]
    i = list(q["queue"]).index("s-c:to_b")
    return {k: v[i] for k, v in q.items() if k != "queue"}


def test_a_trace_file_is_found_beside_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    # Two opportunities every 2 ms: 1000 packets of 1500 bytes a second.
    (tmp_path / "traces" / "up.trace").write_text("1\n2\n")
    path = tmp_path / "sc.toml"
    path.write_text(SCENARIO.format(trace="traces/up.trace"))
    sc = Scenario.from_file(path)
    sc.validate()
    row = _run(sc)
    assert row["tx_packets"] == 1000
    assert row["rate_bps"] == 12_000_000


def test_trace_errors_name_the_key_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "up.trace").write_text("1\n2\nlater\n")
    path = tmp_path / "sc.toml"
    path.write_text(SCENARIO.format(trace="up.trace"))
    with pytest.raises(ScenarioError) as info:
        Scenario.from_file(path).validate()
    assert info.value.key == "links[0].to_b.trace"
    assert "up.trace' line 3: 'later'" in info.value.msg
    with pytest.raises(ScenarioError) as info:
        Scenario.from_toml(SCENARIO.format(trace="builtin:lte")).validate()
    assert "no builtin trace 'lte'; builtins are cellular, leo, dsl" in info.value.msg


@pytest.mark.parametrize("name", ["cellular", "leo", "dsl"])
def test_shipped_traces_are_in_the_package_and_built_in(name: str) -> None:
    packaged = files("asymlink") / "traces" / f"{name}.trace"
    lines = packaged.read_text().split()
    assert lines[-1] == "60000"
    row = _run(Scenario.from_toml(SCENARIO.format(trace=f"builtin:{name}")))
    # The built-in copy is the packaged file: its mean rate is the file's.
    assert row["rate_bps"] == len(lines) * 1500 * 8 * 1000 // 60000


def test_the_generator_reproduces_the_shipped_traces() -> None:
    spec = importlib.util.spec_from_file_location("gen_traces", REPO / "scripts" / "gen_traces.py")
    assert spec is not None and spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for k, (name, (make, _)) in enumerate(gen.GENERATORS.items()):
        rng = np.random.default_rng([gen.SEED, k])
        text = "".join(f"{t}\n" for t in gen.opportunities(make(rng)))
        assert text == (files("asymlink") / "traces" / f"{name}.trace").read_text(), name
