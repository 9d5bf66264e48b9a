"""The receiver-based reproductions (`receiver-telnet`, `receiver-web`, `receiver-loss`):
entry data, and the paper's orderings on `--quick` (each entry runs in a few seconds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from asymlink import repro
from asymlink.scenario import Scenario

ENTRIES = ("receiver-telnet", "receiver-web", "receiver-loss")


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_entry_data_is_consistent(entry_id: str) -> None:
    entry = repro.get(entry_id)
    entry.check()  # paper.toml parses, every scenario validates, fixed keys exist
    for name in entry.scenario_names():
        text = (entry.scenario_dir / f"{name}.toml").read_text()
        assert text.startswith("# Receiver-based access-link management"), name
        assert "==" in text.split("\nname =")[0], f"{name}: ASCII topology in the header"


@pytest.mark.parametrize("entry_id", ENTRIES)
def test_arms_differ_only_in_the_policy(entry_id: str) -> None:
    """The default and managed arms are the same scenario but for the policy (the
    reproduction contract: open parameters identical across arms)."""
    entry = repro.get(entry_id)
    stems = {"receiver-telnet": ["classic-", "distant-"]}.get(entry_id, [""])
    for stem in stems:
        default = entry.scenario(f"{stem}default", quick=False).data
        managed = entry.scenario(f"{stem}managed", quick=False).data
        policy = managed["nodes"][0 if entry_id != "receiver-loss" else 2].pop("rwnd_policy")
        assert policy["link_rate"]
        for d in (default, managed):
            d.pop("name")
            d.pop("description")
        assert default == managed


def test_box_arm_is_the_default_receiver_plus_the_rewriter() -> None:
    entry = repro.get("receiver-telnet")
    box = entry.scenario("classic-box", quick=False).data
    managed = entry.scenario("classic-managed", quick=False).data
    (mb,) = box["middleboxes"]
    (rewriter,) = mb["rewrite"]
    assert rewriter["kind"] == "rwnd" and rewriter["receivers"] == "b"
    assert rewriter["policy"] == managed["nodes"][0]["rwnd_policy"]
    assert "rwnd_policy" not in box["nodes"][0]


def test_telnet_quick_orderings_and_metric_keys(tmp_path: Path) -> None:
    repro.assert_expectations("receiver-telnet", tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    for key in ("telnet_latency_s", "ftp_throughput_kBps"):
        assert set(metrics[key]) == {"default", "managed", "box"}
    for key in ("distant_telnet_latency_s", "distant_ftp_throughput_kBps"):
        assert set(metrics[key]) == {"default", "managed"}
    # The managed queue holds about QLength_Delay (0.4 s of modem time); the default one
    # the 16 KiB window (about 4 s), whichever arm enforces the policy.
    delay = metrics["modem_queue_delay_s"]
    assert delay["default"] > 3.0
    assert delay["managed"] < 0.6 and delay["box"] < 0.7
    assert (tmp_path / "summary.md").read_text().count("| yes") >= 10


def test_web_quick_orderings(tmp_path: Path) -> None:
    repro.assert_expectations("receiver-web", tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert set(metrics["page_time_s"]) == {"default", "managed"}
    # the paper's factor is 121/40 = 3.0
    assert metrics["page_time_s"]["default"] / metrics["page_time_s"]["managed"] > 2.0


def test_loss_quick_orderings(tmp_path: Path) -> None:
    repro.assert_expectations("receiver-loss", tmp_path)
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics["queue_drops"]["managed"] == 0
    assert metrics["queue_drops"]["default"] > 0
    assert metrics["retransmits"]["managed"] == 0


def test_scenario_files_run_on_their_own(tmp_path: Path) -> None:
    """Every scenario is a plain `asymlink run` file (here through the Python API)."""
    from asymlink.runner import run

    entry = repro.get("receiver-loss")
    text = (entry.scenario_dir / "managed.toml").read_text()
    results = run(Scenario.from_toml(text, origin="managed.toml"), out_dir=tmp_path)
    qs = results.queue_summary
    assert int(qs.loc[qs["queue"] == "line:to_b", "dropped"].iloc[0]) == 0
