"""The ACK-filtering reproductions: generated files up to date, entries valid, metric keys
as the issue names them, and the paper's orderings on `--quick`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asymlink import repro
from asymlink.repro import ackfilter_gen
from asymlink.repro.base import lookup

IDS = ("ackfilter-threshold", "ackfilter-delayed", "ackfilter-multi")


def test_generated_scenarios_are_up_to_date() -> None:
    stale = ackfilter_gen.stale()
    assert not stale, (
        "regenerate with `python -m asymlink.repro.ackfilter_gen`: "
        + ", ".join(str(p) for p in stale)
    )


@pytest.mark.parametrize("entry_id", IDS)
def test_entry_files_are_valid(entry_id: str) -> None:
    entry = repro.get(entry_id)
    entry.check()  # paper.toml parses; every scenario validates, full and quick
    assert entry.paper_data.expectations


def test_multi_arms_build() -> None:
    """Every arm × buffer of the multi entry is a valid queue for the engine."""
    entry = repro.get("ackfilter-multi")
    sc = entry.scenario("n03", quick=True)
    arms, buffers = sc.get("meta.arms"), sc.get("meta.buffers")
    assert set(arms) == {"none", "classic", "delayed", "perflow_fifo", "perflow_rr",
                         "conservative"}
    for arm in arms.values():
        for limit in buffers.values():
            sc.with_overrides({"links.0.to_a.queue": {**arm, "limit": limit}}).validate()


def _metrics(out: Path) -> dict:
    return json.loads((out / "metrics.json").read_text())


def test_threshold_orderings_and_keys(tmp_path: Path) -> None:
    repro.assert_expectations("ackfilter-threshold", tmp_path)
    m = _metrics(tmp_path)
    assert isinstance(m["delta_o"], float)
    assert set(m["acked_bytes_at_10s"]) >= {"none", "1", "3", "30", "100", "500", "delayed"}
    # Figures like the paper's 4-6.
    for fig in ("fig4-window", "fig5-rate", "fig6-acked"):
        assert (tmp_path / "figures" / f"{fig}.png").stat().st_size > 10_000
    # δ_o = μ_r·T/(d+1) from measured quantities: 312.5 ACK/s, ≈ 0.204 s, d ≈ 1.
    assert m["eq1"]["mu_r_acks_per_s"] == pytest.approx(312.5, rel=0.01)
    assert m["eq1"]["T_s"] == pytest.approx(0.204, abs=0.002)
    assert m["delta_o"] == pytest.approx(31.7, abs=0.5)


def test_delayed_orderings_and_keys(tmp_path: Path) -> None:
    repro.assert_expectations("ackfilter-delayed", tmp_path)
    m = _metrics(tmp_path)
    for key in ("acked_bytes_at_10s.delayed", "acked_bytes_at_10s.delta_o",
                "delayed_vs_delta_o", "filter_start_gap_s", "estimated_delta",
                "max_reverse_queue.delayed", "mean_reverse_queue_after_5s.delta_o"):
        assert lookup(m, tuple(key.split("."))) is not None, key
    # Static δ = δ_o holds about δ_o ACKs once filtering runs (figure 8).
    assert m["mean_reverse_queue_after_5s"]["delta_o"] == pytest.approx(31, abs=1.5)
    summary = (tmp_path / "summary.md").read_text()
    assert "delayed_vs_delta_o" in summary and "Differences from the paper" in summary


#: Orderings of the paper that our model does not reproduce on the paper's own metric,
#: explained in the entry's notes (mean over *completed* files favours the unfiltered
#: arm, which completes half as many). The test insists they still fail, so a model change
#: that fixes them is noticed and the notes updated.
KNOWN_MULTI_MISMATCHES = {
    "mean_file_throughput_bps.small.perflow_rr.10",
    "mean_file_throughput_bps.small.perflow_rr.20",
}


def test_multi_orderings_and_keys(tmp_path: Path) -> None:
    checks = repro.check_expectations("ackfilter-multi", tmp_path)
    failed = {c.metric for c in checks if not c.ok}
    wrong = [f"{c.metric} {c.paper}: {c.measured}" for c in checks
             if not c.ok and c.metric not in KNOWN_MULTI_MISMATCHES]
    assert not wrong, "\n".join(wrong)
    assert failed == KNOWN_MULTI_MISMATCHES
    # The mismatches are against `none` only; RR stays ahead of every filtering arm.
    for c in checks:
        if c.metric in KNOWN_MULTI_MISMATCHES and not c.ok:
            assert c.paper.endswith(".none." + c.metric.rsplit(".", 1)[1])
    m = _metrics(tmp_path)
    mft = m["mean_file_throughput_bps"]
    for buf in ("large", "small"):
        for alg in ("none", "classic", "delayed", "perflow_fifo", "perflow_rr",
                    "conservative"):
            assert set(mft[buf][alg]) == {"1", "2", "5", "10", "20"}, (buf, alg)
            assert all(v > 0 for v in mft[buf][alg].values())
    for fig in ("fig11-large-buffer", "fig12-small-buffer"):
        assert (tmp_path / "figures" / f"{fig}.png").exists()


@pytest.mark.parametrize(
    ("queue", "needle"),
    [
        ({"kind": "ack_filter", "policy": "threshold", "delta": 0}, "delta: must be at least 1"),
        ({"kind": "ack_filter", "policy": "classic", "delat": 3}, "delat"),
        ({"kind": "ack_filter", "policy": "classic", "delta": 3}, "not used by policy"),
    ],
)
def test_bad_filter_configuration_names_the_key(queue: dict, needle: str) -> None:
    from asymlink import ScenarioError

    sc = repro.get("ackfilter-threshold").scenario("none", quick=True)
    with pytest.raises(ScenarioError) as e:
        sc.with_overrides({"links.1.to_a.queue": {**queue, "limit": "10p"}}).validate()
    assert needle in str(e.value)
    assert "links[1].to_a" in str(e.value)


def test_the_delta_sweep_peaks_below_delta_o_only_by_its_head_start() -> None:
    """What examples/sweeps/ackfilter-delta.toml explains: δ = 18 leads δ = 30 at 10 s by
    under 1 %, gained while the window grows; later both deliver at the same rate."""
    import numpy as np

    from asymlink import repro
    from asymlink.runner import run
    from asymlink.scenario import Scenario

    base = Scenario.from_file(repro.get("ackfilter-threshold").scenario_dir / "delta-30.toml")
    acked = {}
    for delta in (18, 30):
        r = run(base.with_overrides({"links.1.to_a.queue.delta": delta, "duration": "20s"}))
        f = r.flows[r.flows["flow"] == "transfer"].sort_values("t")
        acked[delta] = np.interp([10.0, 20.0], f["t"], f["bytes_acked"])
    lead = acked[18] - acked[30]
    assert 0 < lead[0] < 0.01 * acked[30][0]
    assert abs(lead[1] - lead[0]) <= 2000  # same rate 10-20 s: only the head start differs
