"""`today-ack-mechanisms`: its scenarios are generated and check, each run is a checked-in
file with the sender, seed and starts overridden, the paired interval is computed as
documented, and its orderings hold on --quick."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from asymlink import repro
from asymlink.repro import today_mechanisms as tm


def test_files_check_and_are_generated() -> None:
    tm.TODAY.check()
    stale = tm.stale()
    assert not stale, ("regenerate with `python -m asymlink.repro.today_mechanisms_gen "
                       f"--write`: {stale}")
    assert tm.TODAY.scenario_names() == sorted(tm.scenario_names())


@pytest.mark.parametrize(("cc", "seed", "quick"), [("bbr", 3, True), ("cubic", 7, False)])
def test_run_is_the_checked_in_file_with_overrides(cc: str, seed: int, quick: bool) -> None:
    for name in ("cellular-ackdelay", "fixed-line"):
        link, arm = name.split("-")
        ran = tm.TODAY.scenario(name, quick=False).with_overrides(
            tm.run_overrides(cc, seed, quick)).data
        want = tm.sim_doc(link, arm, cc, seed, quick)
        for key in ("links", "middleboxes", "flows", "duration", "seed", "tcp", "nodes"):
            assert ran[key] == want[key], (name, key)
        # A sensitivity run: the same with 30-packet line queues.
        ran = tm.TODAY.scenario(name, quick=False).with_overrides(
            tm.run_overrides(cc, seed, quick, link, arm, 30)).data
        assert ran["middleboxes"] == tm.sim_doc(link, arm, cc, seed, quick, 30)["middleboxes"]
        assert ran["middleboxes"] != want["middleboxes"] or arm == "line"


def test_arms_differ_only_in_the_box() -> None:
    """Within a link, every arm has the same line, flows and TCP; the baseline has plain
    FIFOs; starts vary with the seed only."""
    for link in tm.LINKS:
        docs = {a: tm.sim_doc(link, a) for a in tm.ARMS}
        for arm, d in docs.items():
            for key in ("links", "flows", "tcp", "duration", "seed", "nodes"):
                assert d[key] == docs["none"][key], (link, arm, key)
        mb = docs["none"]["middleboxes"][0]
        assert mb["to_a"]["qdisc"] == mb["to_b"]["qdisc"] == {"kind": "fifo", "limit": "100p"}
    assert tm.starts(2) == tm.starts(2) != tm.starts(3)


def test_paired_interval_and_verdict() -> None:
    # diffs 1..5: mean 3, sd sqrt(2.5), t(0.975, 4) = 2.776
    mean, half = tm.paired_ci([1.0, 2.0, 3.0, 4.0, 5.0])
    assert mean == 3.0 and math.isclose(half, 2.776 * math.sqrt(2.5) / math.sqrt(5))
    assert tm.significant(mean, half)
    mean, half = tm.paired_ci([-1.0, 1.0, -2.0, 2.0, 0.5])
    assert not tm.significant(mean, half)
    up, down = (2.0, 0.5), (-2.0, 0.5)
    none = (0.0, 1.0)
    assert tm.verdict({"down_mbps": up, "echo_p90_ms": none}) == tm.HELPS
    assert tm.verdict({"down_mbps": none, "echo_p90_ms": up}) == tm.HURTS
    assert tm.verdict({"down_mbps": up, "echo_p90_ms": up}) == tm.MIXED
    assert tm.verdict({"down_mbps": down, "jain": none}) == tm.HURTS
    assert tm.verdict({"down_mbps": none, "jain": none}) == tm.NEUTRAL
    assert tm.jain([1.0, 1.0]) == 1.0 and tm.jain([1.0, 0.0]) == 0.5


def test_orderings_hold_on_quick(tmp_path: Path) -> None:
    """The quick run: 180 simulator runs of 10 s, about 11 s of CPU."""
    repro.assert_expectations(tm.ID, tmp_path)
    assert (tmp_path / "figures" / "verdicts.png").is_file()
    assert "| cellular | bbr | ackfilter |" in (tmp_path / "verdicts.md").read_text()


def test_lab_summary_and_figure_from_runs(tmp_path: Path) -> None:
    """The lab half's summary has metrics.json's keys for its cases, and with
    `lab_metrics.json` beside the entry's metrics the figures add the lab beside the
    simulator (synthetic runs: the lab itself needs root, see docs/traces.md)."""
    seeds = range(1, 4)
    per_run = {}
    for (link, cc, arm) in tm.LAB_CASES + [(c[0], c[1], "none") for c in tm.LAB_CASES]:
        for s in seeds:
            gain = {"none": 0.0, "ackfilter": -1.0, "line": 2.0}[arm]
            per_run[(link, cc, arm, s)] = {"down_mbps": 4.0 + gain + 0.01 * s,
                                           "up_mbps": 0.4, "echo_p90_ms": 500.0 - 100 * gain,
                                           "jain": 0.9}
    lab = tm.lab_summary(per_run, tm.LAB_CASES) | {"duration_s": 10.0}
    assert lab["seeds"] == 3
    assert lab["verdict"] == {"fixed_cubic_ackfilter": tm.HURTS, "fixed_cubic_line": tm.HELPS}
    assert math.isclose(lab["diff"]["down_mbps"]["fixed_cubic_line"], 2.0)
    assert lab["ci"]["up_mbps"]["fixed_cubic_line"] == 0.0
    (tmp_path / "lab_metrics.json").write_text(json.dumps(lab))
    sim = tm.summarise({(lk, cc, arm, s): per_run.get((lk, cc, arm, s), per_run[
        ("fixed", "cubic", "none", s)]) for lk in tm.LINKS for cc in tm.CCS for arm in tm.ARMS
        for s in seeds})
    paths = tm._figures(tmp_path, sim)
    assert [p.name for p in paths] == ["verdicts.png", "lab.png"]
    assert "| fixed | cubic | line | helps | down +2" in tm.verdict_table(lab, tm.LAB_CASES)
