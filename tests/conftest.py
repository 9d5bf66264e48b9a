"""Shared fixtures. Everything here passes against the simulator stub: nothing asserts
simulation numbers."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asymlink import Results, Scenario, examples

SCENARIO_TOML = """\
# A small scenario for the tests.
name = "tiny"
duration = "2s"
seed = 7

[[nodes]]
name = "server"
[[nodes]]
name = "isp"
kind = "router"
[[nodes]]
name = "client"

[[links]]
name = "core"
a = "server"
b = "isp"
rate = "100Mbit"
delay = "1ms"

[[links]]
name = "access"
a = "isp"
b = "client"
rate = "8Mbit"
delay = "20ms"
to_a = { rate = "512kbit" }

[[flows]]
name = "down"
from = "server"
to = "client"
tcp = { profile = "rfc", mss = "1460B" }
app = { kind = "bulk" }

[[flows]]
name = "up"
from = "client"
to = "server"
tcp = { profile = "rfc", mss = "1460B" }
app = { kind = "bulk" }
"""


@pytest.fixture
def scenario_toml() -> str:
    return SCENARIO_TOML


@pytest.fixture
def scenario() -> Scenario:
    return Scenario.from_toml(SCENARIO_TOML, origin="tiny.toml")


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "tiny.toml"
    path.write_text(SCENARIO_TOML)
    return path


@pytest.fixture
def showcase() -> Scenario:
    return examples.load("showcase")


def synthetic_results() -> Results:
    """Results shaped like the engine's: two flows sampled every 0.5 s for 4 s, one
    queue, one link, a few string-valued events (with an empty string), a NaN."""
    t = np.arange(0.5, 4.01, 0.5)
    n = len(t)
    flows = {
        "t": np.concatenate([t, t]),
        "flow": ["down"] * n + ["up"] * n,
        "cwnd_bytes": np.linspace(1460, 20000, 2 * n),
        "srtt_ms": np.concatenate([np.full(n, 40.0), np.full(n, np.nan)]),
        # 125 000 B/s for "down" = 1 Mbit/s; 12 500 B/s for "up" = 100 kbit/s
        "bytes_delivered": np.concatenate([t * 125_000, t * 12_500]).astype(np.int64),
        "retransmits": np.zeros(2 * n, dtype=np.int64),
    }
    queues = {
        "t": t,
        "queue": ["access.up"] * n,
        "packets": np.arange(n, dtype=np.int64),
        "bytes": np.arange(n, dtype=np.int64) * 1500,
        "drops": np.minimum(np.arange(n), 3).astype(np.int64),
        "filtered": np.arange(n, dtype=np.int64) * 2,
        "dequeued": np.arange(n, dtype=np.int64) * 10,
    }
    links = {"t": t, "link": ["access.down"] * n, "utilization": np.full(n, 0.5),
             "tx_bytes": (t * 1e5).astype(np.int64)}
    events = {"t": np.array([0.1, 0.2, 0.3]), "kind": ["drop", "rto", "drop"],
              "where": ["access.up", "", "NaN"], "flow": ["up", "down", ""],
              "detail": ["overflow", "", "a|b"]}
    native = {
        "meta": {"scenario": "synthetic", "seed": 3, "duration_s": 4.0, "wall_s": 0.25,
                 "events": 1234, "packet_hops": 5678, "trace_hash": 2**63 + 5},
        "tables": {"flows": flows, "queues": queues, "links": links, "events": events},
    }
    return Results.from_native(native)  # type: ignore[arg-type]


@pytest.fixture
def results() -> Results:
    return synthetic_results()


@pytest.fixture(scope="module")
def live_ok() -> None:
    """Skip unless labs can run here (root, network namespaces, the tools)."""
    from asymlink.lab import can_run_labs

    reason = can_run_labs()
    if reason:
        pytest.skip(f"lab tests need root and network namespaces: {reason}")


#: Modules that build namespace labs or run the box on real packets. Under pytest-xdist
#: (`-n 2 --dist loadgroup`, as scripts/test.sh runs) they share one worker and so run one
#: at a time, while the simulator tests run on the other; so does every other test that
#: asks for `live_ok` (see `_is_lab`).
LAB_MODULES = {"test_lab", "test_lab_mechanisms", "test_live", "test_parity", "test_package",
               "test_lab_clients"}


def _is_lab(item: pytest.Item) -> bool:
    """A lab test: in one of LAB_MODULES, using the `live_ok` fixture (every test that
    builds namespaces asks for it), or marked `xdist_group("lab")` itself."""
    module = getattr(item, "module", None)
    if module is not None and module.__name__.rsplit(".", 1)[-1] in LAB_MODULES:
        return True
    if "live_ok" in getattr(item, "fixturenames", ()):
        return True
    return any(m.args[:1] == ("lab",) for m in item.iter_markers("xdist_group"))


@pytest.hookimpl(tryfirst=True)   # before xdist reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _is_lab(item):
            item.add_marker(pytest.mark.xdist_group("lab"))


_UNGROUPED = pytest.StashKey[str]()


@pytest.hookimpl(trylast=True)   # after xdist has named the groups
def pytest_collection_finish(session: pytest.Session) -> None:
    """Under `--dist loadgroup` xdist suffixes each grouped test id with `@lab`. When a
    pytest/xdist pairing stops doing that, two labs run at once and fail at random; the
    lab tests then fail at once, saying why (see `pytest_runtest_setup`)."""
    if not getattr(session.config.option, "loadgroup", False):
        return
    ungrouped = [i.nodeid for i in session.items if _is_lab(i) and not i.nodeid.endswith("@lab")]
    if ungrouped:
        session.config.stash[_UNGROUPED] = (
            f"pytest-xdist did not group the lab tests ({ungrouped[0]} has no '@lab'), so "
            "labs would run side by side: this pytest/pytest-xdist pair breaks --dist "
            "loadgroup (see the pin in pyproject.toml)")


def pytest_runtest_setup(item: pytest.Item) -> None:
    problem = item.config.stash.get(_UNGROUPED, None)
    if problem is not None and _is_lab(item):
        pytest.fail(problem, pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """With ASYMLINK_NO_SKIPS=1 (set by scripts/test.sh when it runs as root with every
    tool installed) a skipped test is a failure: nothing may silently not run."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("ASYMLINK_NO_SKIPS") == "1":
        report.outcome = "failed"
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else report.longrepr
        report.longrepr = f"skipped although ASYMLINK_NO_SKIPS=1: {reason}"


def figure_problems(fig: Any) -> list[str]:
    """What a reproduction figure lacks: a title (the figure's or an axes'), and on every
    axes that shows data a y label, and an x label on at least one of them."""
    root = fig if hasattr(fig, "savefig") else fig.figure
    data_axes = [ax for ax in root.get_axes()
                 if ax.axison and (ax.lines or ax.patches or ax.collections)]
    problems = []
    titled = (root._suptitle is not None and root._suptitle.get_text()) or any(
        ax.get_title() for ax in root.get_axes())
    if not titled:
        problems.append("no title")
    problems += [f"axes {i} has no y label" for i, ax in enumerate(data_axes)
                 if not ax.get_ylabel()]
    if data_axes and not any(ax.get_xlabel() for ax in data_axes):
        problems.append("no x label")
    return problems


@pytest.fixture(autouse=True)
def _reproduction_figures_are_labelled(request: pytest.FixtureRequest,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """In the reproduction tests, every figure saved must have a title and axis labels."""
    if not request.module.__name__.rsplit(".", 1)[-1].startswith("test_repro"):
        return
    from asymlink import plot

    save = plot.save

    def checked(fig: Any, path: Any) -> Any:
        problems = figure_problems(fig)
        assert not problems, f"{path}: {', '.join(problems)}"
        return save(fig, path)

    monkeypatch.setattr(plot, "save", checked)
