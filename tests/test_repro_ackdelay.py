"""The ACK-delay reproductions: entry data, Jain's index, and the paper's orderings on
`--quick` (each entry runs its scenarios in a few seconds)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from asymlink import repro
from asymlink.analysis import jain_index
from asymlink.scenario import Scenario

ENTRIES = ("ackdelay-satellite", "ackdelay-router")


def test_jain_index() -> None:
    assert jain_index([1.0, 1.0, 1.0, 1.0]) == pytest.approx(1.0)
    assert jain_index([5.0, 0.0, 0.0, 0.0]) == pytest.approx(0.25)
    # Table 3 of the paper, without and with Fast TCP
    assert jain_index([30.81, 22.93, 27.03, 30.37]) == pytest.approx(0.9872, abs=1e-4)
    assert jain_index([34.32, 36.51, 35.33, 34.95]) == pytest.approx(0.9995, abs=1e-4)
    assert math.isnan(jain_index([]))
    assert math.isnan(jain_index([0.0, 0.0]))
    with pytest.raises(ValueError):
        jain_index([1.0, -1.0])


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_entry_data_is_consistent(entry_id: str) -> None:
    entry = repro.get(entry_id)
    entry.check()  # paper.toml parses, every scenario validates, fixed keys exist
    for name in entry.scenario_names():
        text = (entry.scenario_dir / f"{name}.toml").read_text()
        assert text.startswith("# ACK delay control"), f"{name}: topology header first"
        assert "===" in text.split("\nname =")[0], f"{name}: ASCII topology in the header"


def test_scenarios_differ_only_in_the_arm() -> None:
    """The off and on arms of a case are identical except for the reverse discipline."""
    entry = repro.get("ackdelay-router")
    for stem in ("single", "multi", "single-link", "multi-link"):
        off = entry.scenario(f"{stem}-off", quick=False).data
        on = entry.scenario(f"{stem}-on", quick=False).data
        for d in (off, on):
            d.pop("name"), d.pop("description")
            d["middleboxes"][0]["to_a"].pop("qdisc")
        assert off == on, stem
    entry = repro.get("ackdelay-satellite")
    for buf in ("1mb", "250kb"):
        data = [entry.scenario(f"{buf}-{arm}", quick=False).data for arm in ("off", "on", "auto")]
        for d in data:
            d.pop("name"), d.pop("description")
            d["middleboxes"][0]["to_a"].pop("qdisc")
        assert data[0] == data[1] == data[2], buf


def test_scenario_runs_on_its_own() -> None:
    entry = repro.get("ackdelay-router")
    text = (entry.scenario_dir / "single-on.toml").read_text()
    Scenario.from_toml(text).validate()


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_orderings_hold_on_quick(entry_id: str, tmp_path: Path) -> None:
    repro.assert_expectations(entry_id, tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    summary = (tmp_path / "summary.md").read_text()
    assert "| metric | paper | measured | match? |" in summary
    if entry_id == "ackdelay-satellite":
        for key in ("max_forward_queue_bytes", "forward_drops", "delivered_bytes"):
            for buf in ("1MB", "250KB"):
                assert set(metrics[key][buf]) >= {"off", "on"}
        # the shaper holds the forward queue near the 50 KB threshold
        assert 50_000 <= metrics["max_forward_queue_bytes"]["250KB"]["on"] < 80_000
        assert metrics["forward_drops"]["250KB"]["off"] > 0
        assert (tmp_path / "figures" / "cwnd_queues_1mb.png").exists()
    else:
        for key in ("single", "multi_total"):
            assert set(metrics["throughput_kbps"][key]) >= {"off", "on"}
        assert set(metrics["fairness_index"]["multi"]) >= {"off", "on"}
        # Table 2: 12.70 -> 18.91 kbit/s; the model lands within the entry's 15 % of both
        # (with Karn's rule the unmanaged single connection has fewer spurious timeouts:
        # 14.4 kbit/s, +13.6 %)
        assert metrics["throughput_kbps"]["single"]["off"] == pytest.approx(12.70, rel=0.15)
        assert metrics["throughput_kbps"]["single"]["on"] == pytest.approx(18.91, rel=0.15)
        assert metrics["forward_drops"]["single"]["on"] == 0
        assert (tmp_path / "figures" / "router_single.png").exists()


def test_the_docs_example_configures_a_middlebox() -> None:
    """The first TOML block of docs/ack-delay.md, on the satellite topology, validates."""
    doc = (Path(__file__).parent.parent / "docs" / "ack-delay.md").read_text()
    example = doc.split("```toml\n", 1)[1].split("```", 1)[0]
    base = (repro.get("ackdelay-satellite").scenario_dir / "250kb-on.toml").read_text()
    head, _, tail = base.partition("[[middleboxes]]")
    flows = tail[tail.index("[[flows]]") :]
    Scenario.from_toml(head + example + "\n" + flows).validate()
    broken = example.replace('threshold = "50KB"', 'threshold = "50"')
    with pytest.raises(ValueError, match="threshold"):
        Scenario.from_toml(head + broken + "\n" + flows).validate()
