"""The generated access-network example: its shape, its determinism and a short run."""

from __future__ import annotations

import pytest

import asymlink
from asymlink import examples
from asymlink.examples.dslam import LINE_KINDS, dslam
from asymlink.report import busiest_links


def test_the_network_has_one_managed_line_per_subscriber() -> None:
    data = dslam(lines=50, seed=3, servers=4).data
    lines = [link for link in data["links"] if link["name"].startswith("line")]
    assert len(lines) == 50 and len(data["middleboxes"]) == 50
    kinds = {(link["to_a"]["rate"], link["to_b"]["rate"]) for link in lines}
    assert kinds <= {("8Mbit", "512kbit"), ("50Mbit", "10Mbit")} and len(kinds) == 2
    for mb, link in zip(data["middleboxes"], lines, strict=True):
        # Each home middlebox is configured by `line` with its own line's rates and framing.
        assert mb["b"] == link["name"] and mb["line"]["down"] == link["to_a"]["rate"]
        assert mb["line"]["linklayer"] == link["linklayer"]
    names = [f["name"] for f in data["flows"]]
    assert sum(n.startswith("web") for n in names) == 50
    assert sum(n.startswith("dl") for n in names) == 50
    assert 0 < sum(n.startswith("ul") for n in names) < 50
    assert {k[0] for k in LINE_KINDS} == {"adsl", "vdsl"}


def test_same_arguments_same_scenario() -> None:
    assert dslam(lines=30, seed=5).to_toml() == dslam(lines=30, seed=5).to_toml()
    assert dslam(lines=30, seed=5).to_toml() != dslam(lines=30, seed=6).to_toml()


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="lines"):
        dslam(lines=0)
    with pytest.raises(ValueError, match="load"):
        dslam(load=float("nan"))


def test_the_example_is_listed_and_described_without_generating_it() -> None:
    assert examples.GENERATED["dslam"] is dslam
    assert examples.describe("dslam").startswith("An access network generated in Python")
    assert any("backhaul" in line for line in examples.header("dslam"))


def test_a_small_network_runs_and_the_backhaul_carries_the_downloads() -> None:
    n = 20
    res = asymlink.run(dslam(lines=n, duration="3s", load=0.7 * n / 10_000, seed=2))
    res2 = asymlink.run(dslam(lines=n, duration="3s", load=0.7 * n / 10_000, seed=2))
    assert res.meta["trace_hash"] == res2.meta["trace_hash"]
    links = res.links.groupby("link")["tx_bytes"].sum()
    lines_down = sum(links[f"line{i}:to_a"] for i in range(n))
    # What the lines carry down crossed the backhaul first (the lines count their ATM and
    # PTM framing, and packets still queued at the end are on one side only).
    assert links["backhaul:to_b"] > 0
    assert lines_down == pytest.approx(links["backhaul:to_b"], rel=0.2)
    table = busiest_links(res)
    assert len(table.rows) == 13 and table.rows[-1][0].startswith("... ")


def test_two_threads_run_the_network_deterministically_and_like_one(tmp_path) -> None:
    n = 20
    sc = dslam(lines=n, duration="3s", load=0.7 * n / 10_000, seed=2)
    one = asymlink.run(sc)
    two = asymlink.run(sc, threads=2)
    again = asymlink.run(sc, threads=2)
    assert one.meta["threads"] == 1 and two.meta["threads"] == 2
    assert two.meta["late_handovers"] == 0
    assert two.meta["trace_hash"] == again.meta["trace_hash"] != one.meta["trace_hash"]
    # Its own trace, the same network: the backhaul carries what it carries on one thread.
    down = [r.links.groupby("link")["tx_bytes"].sum()["backhaul:to_b"] for r in (one, two)]
    assert down[1] == pytest.approx(down[0], rel=0.05)
    # The command line's --threads, and the summary saying so.
    from click.testing import CliRunner

    from asymlink.cli import cli
    path = tmp_path / "access.toml"
    path.write_text(dslam(lines=4, duration="1s", load=0.7 * 4 / 10_000, seed=2).to_toml())
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["run", str(path), "--out", str(out), "--threads", "2",
                                   "--no-progress", "--csv"])
    assert res.exit_code == 0, res.output
    assert "- threads: 2 (a partitioned run; packets handed over late: 0)" in (
        out / "summary.md").read_text()
