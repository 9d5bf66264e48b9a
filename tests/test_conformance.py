"""The conformance catalog: scripted-loss cases through the simulator's `linux` profile
(always, seconds) and through real Linux in the lab (root only; about two minutes).

The simulator half checks what holds whatever the loss-detection model: the scripted
drops happen, every lost segment is retransmitted, the handshake cases retransmit the
SYN or SYN-ACK. The lab half runs the whole comparison (`asymlink lab conformance`) and
checks that Linux saw the same losses; the agree/differ verdicts are the report's, listed
in docs/tcp.md.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from click.testing import CliRunner

from asymlink.cli import cli
from asymlink.lab.conformance import (
    VARIANTS,
    Case,
    Packet,
    Trace,
    compare,
    load_catalog,
    mss_of,
    run_sim,
    sender_events,
    sim_scenario,
)
from asymlink.scenario import Scenario

REQUIRED = {"single-loss", "burst-3", "lost-retransmission", "loss-at-recover",
            "slow-start-loss", "tail-loss", "lost-syn", "lost-syn-ack",
            "ack-loss-slow-reverse", "rto", "rwnd-limited", "idle-then-burst"}


def lost_segments(c: Case) -> list[int]:
    """Segments whose original transmission the case drops."""
    return [int(r["segment"]) for r in c.drop_down
            if isinstance(r, dict) and int(r.get("tx", 1)) == 1]


def test_the_catalog_has_every_case_and_translates() -> None:
    cases = load_catalog()
    assert {c.name for c in cases} >= REQUIRED
    for c in cases:
        for _, sack, ts in VARIANTS:
            doc = sim_scenario(c, sack, ts)
            Scenario.from_dict(doc, origin=c.name)  # validates, drop rules included
            mss = mss_of(ts)
            for r in doc["links"][0]["to_a"].get("drop", []):
                if isinstance(r, dict):
                    assert r["flow"] == "download" and (r["seq"] - 1) % mss == 0
    # In the box the same rule matches by port, at the same sequence number.
    c = next(c for c in cases if c.name == "single-loss")
    assert c.drops("down", 1460, sim=False) == [{"seq": 1 + 29 * 1460, "tx": 1, "port": 5001}]


@pytest.mark.parametrize("variant", [v[0] for v in VARIANTS])
def test_simulator_half(variant: str, tmp_path: Path) -> None:
    _, sack, ts = next(v for v in VARIANTS if v[0] == variant)
    for c in load_catalog():
        tr = run_sim(c, sack, ts, tmp_path / c.name)
        ev = sender_events(tr)
        retx = [g for _, g in ev["retx"]]
        total = sum(c.writes)
        # Every segment was sent, the lost ones again; as Linux, the sender may split a
        # segment in two at the receive window's edge: at least as many.
        assert ev["data_tx"] >= total + len(retx), (c.name, ev)
        for g in lost_segments(c):
            assert g in retx, (c.name, g, retx)
        if c.name == "lost-syn":
            assert ev["syn_tx"] == 2, ev
        elif c.name == "lost-syn-ack":
            assert ev["synack_tx"] >= 2, ev
        else:
            assert (ev["syn_tx"], ev["synack_tx"]) == (1, 1), (c.name, ev)
        if c.name == "tail-loss":
            # The tail is repaired by a probe with SACK (the flow summary's loss_probes),
            # by the RTO without.
            assert (tr.counters["loss_probes"], tr.counters["timeouts"]) == (
                (1, 0) if sack else (0, 1)), tr.counters
        if c.name == "ack-loss-slow-reverse":
            assert retx == [], "lost ACKs are covered by the next cumulative ACK"
        if c.name == "lost-retransmission":
            assert retx.count(30) >= 2, retx
        if c.name == "idle-then-burst":
            # The second burst starts after the 2 s idle period (times from the first
            # data segment).
            assert [t for t, g in ev["retx"] if g == 45][0] > 2.0, ev["retx"]


def test_events_and_comparison_from_explicit_packets() -> None:
    c = Case("x", "", {"delay": "20ms"}, {"delay": "20ms"}, [3])

    def trace(retx_at: float, probes: float) -> Trace:
        isn = 1000
        pk = [Packet(0.0, "client", 5, 0, 0x02, 0), Packet(0.04, "server", isn, 6, 0x12, 0)]
        pk += [Packet(0.1 + i * 0.001, "server", isn + 1 + i * 100, 6, 0x10, 100)
               for i in range(3)]
        pk.append(Packet(retx_at, "server", isn + 101, 6, 0x10, 100))
        return Trace(pk, {"recoveries": 1, "timeouts": 0, "loss_probes": probes}, 10.0, 7.0,
                     100)

    ev = sender_events(trace(0.2, 0))
    # Times from the first data segment (0.1 s).
    assert ev["retx"] == [(0.1, 2)] and ev["syn_tx"] == 1 and ev["synack_tx"] == 1
    assert ev["data_tx"] == 4
    assert compare(c, "v", trace(0.2, 0), trace(0.23, 0)).agree
    v = compare(c, "v", trace(0.2, 0), trace(0.3, 1))
    assert not v.agree
    assert v.differences == ["segment 2 retransmitted at 0.100 s (sim) and 0.200 s (Linux), "
                             "more than one RTT apart", "loss_probes: sim 0, Linux 1"]


def test_cli_runs_the_simulator_half(tmp_path: Path) -> None:
    r = CliRunner().invoke(cli, ["lab", "conformance", "--sim-only", "--out", str(tmp_path),
                                 "single-loss", "lost-syn"])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "conformance.json").read_text())
    assert [(x["case"], x["variant"]) for x in rows] == [
        ("single-loss", "sack-ts"), ("lost-syn", "sack-ts"),
        ("single-loss", "plain"), ("lost-syn", "plain")]
    assert "| single-loss | sack-ts |" in r.output
    bad = CliRunner().invoke(cli, ["lab", "conformance", "--sim-only", "--out",
                                   str(tmp_path), "nope"])
    assert bad.exit_code != 0 and "unknown conformance case nope" in bad.output


@pytest.mark.skipif(os.geteuid() != 0, reason="the lab half needs root (network namespaces)")
@pytest.mark.xdist_group("lab")   # one lab at a time, beside the other lab modules
def test_lab_half(tmp_path: Path) -> None:
    """The whole catalog through real Linux (both variants), compared with the
    simulator: Linux lost the scripted segments and repaired them."""
    r = CliRunner().invoke(cli, ["lab", "conformance", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    rows = json.loads((tmp_path / "conformance.json").read_text())
    cases = {c.name: c for c in load_catalog()}
    assert len(rows) == len(cases) * len(VARIANTS)
    for x in rows:
        c = cases[x["case"]]
        lab = x["lab"]
        assert lab["extra"]["cc"] == "cubic"
        assert lab["extra"]["maxseg"] == mss_of(x["variant"] == "sack-ts"), x
        retx = [g for _, g in lab["retx"]]
        for g in lost_segments(c):
            assert g in retx, (c.name, x["variant"], g, retx)
        # Linux may split a segment in two (at the window's edge): at least as many.
        assert lab["data_tx"] >= sum(c.writes) + len(retx), (c.name, lab)
        if c.name == "lost-syn":
            assert lab["syn_tx"] == 2, lab
        if c.name == "lost-syn-ack":
            assert lab["synack_tx"] >= 2, lab
