"""The four ADSL reproductions: their files check, their orderings hold on --quick, and
the arms of each entry differ only where they should."""

from __future__ import annotations

from pathlib import Path

import pytest

from asymlink import repro
from asymlink.repro import adsl

ENTRIES = ["adsl-problem", "adsl-linksharing", "adsl-ackfifo", "adsl-atm"]


def test_registered() -> None:
    ids = [e.id for e in repro.entries()]
    for e in ENTRIES:
        assert e in ids


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_files_check(entry_id: str) -> None:
    repro.get(entry_id).check()


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_orderings_hold_on_quick(entry_id: str, tmp_path: Path) -> None:
    repro.assert_expectations(entry_id, tmp_path)


def _mix_scenarios() -> dict[str, dict]:
    out = {}
    for entry in (adsl.LINKSHARING, adsl.ACKFIFO, adsl.ATM):
        for name in entry.scenario_names():
            if not name.startswith("cells"):
                out[f"{entry.id}/{name}"] = entry.scenario(name, quick=False).data
    return out


def test_arms_share_topology_traffic_and_tcp() -> None:
    scenarios = _mix_scenarios()
    assert len(scenarios) == 11
    ref = next(iter(scenarios.values()))
    for name, data in scenarios.items():
        for key in ("nodes", "links", "flows", "tcp", "duration", "seed"):
            assert data[key] == ref[key], f"{name}: {key} differs"
        assert data["middleboxes"][0]["to_b"]["classifier"] == ref["middleboxes"][0]["to_b"][
            "classifier"
        ]


def test_problem_arms_differ_only_by_the_upload() -> None:
    e = adsl.PROBLEM
    alone = e.scenario("alone", quick=False).data
    up = e.scenario("with_upload", quick=False).data
    assert [f["name"] for f in up["flows"]] == ["down", "up", "ping"]
    assert [f for f in up["flows"] if f["name"] != "up"] == alone["flows"]
    assert up["links"] == alone["links"]


def test_ack_shares_arithmetic() -> None:
    """The ACK share of a line from a queue_summary row (synthetic numbers)."""
    import pandas as pd

    from asymlink.results import Results

    row = {"queue": "q", "tx_pure_ack_wire_bytes": 110 * 1000, "tx_pure_ack_bytes": 52 * 1000,
           "tx_wire_bytes": 110 * 1000 * 2}
    res = Results({"duration_s": 10.0}, {"queue_summary": pd.DataFrame([row])})
    s = adsl.ack_shares(res, "q", 512_000.0, 27)
    cells = 110 * 1000 * 26 / 27
    assert s["uplink"] == pytest.approx(cells / 640_000)
    assert s["overhead"] == pytest.approx((cells - 52_000) / 640_000)
    assert s["use"] == pytest.approx(2 * cells / 640_000)


def test_paper_values_are_drawn_as_reference_lines() -> None:
    from asymlink.plot import new_axes
    from asymlink.repro.adsl import PROBLEM
    from asymlink.repro.base import draw_paper_values

    ax = new_axes()
    assert draw_paper_values(ax, PROBLEM.paper_data, "down_mbps") == 2
    assert sorted(line.get_ydata()[0] for line in ax.lines) == [0.25, 7.0]
    assert sorted(t.get_text() for t in ax.texts) == [
        "paper: alone 7 Mbit/s", "paper: with_upload 0.25 Mbit/s"]
