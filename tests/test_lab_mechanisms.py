"""Every mechanism live: aggregate shaping and advertised-window
rewriting run by the box on real packets, with real Linux TCP in the namespace
lab.

The scenario checks run anywhere; the lab tests need root and network namespaces and are
skipped, saying why, where they are missing. Each lab run is bounded (≤ 20 s of traffic;
the window test runs two arms).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pandas as pd

from asymlink.lab import LabScenario, run_scenario
from asymlink.lab.bench import scenario_path

ROOT = Path(__file__).resolve().parents[1]

# 1448-byte segments (timestamps on) in 1500-byte IP packets.
GOODPUT_PER_IP = 1448 / 1500


def jain(x: list[float]) -> float:
    return sum(x) ** 2 / (len(x) * sum(v * v for v in x))


def _policy(sc: LabScenario) -> dict[str, Any]:
    (p,) = sc.box["to_a"]["qdisc"]["policies"]
    return p


def _mbit(rate: str) -> float:
    assert rate.endswith("Mbit"), rate
    return float(rate[:-4])


# --- scenario files (no privileges needed) ------------------------------------------------


def test_scenarios_configure_the_mechanisms() -> None:
    agg = LabScenario.from_file(scenario_path("aggregate-shape"))
    assert agg.box["to_a"]["qdisc"]["kind"] == "aggregate"
    assert _policy(agg)["filter"]["src"] == "198.18.0.2"  # the lab's server
    assert len(agg.flows) == 3 and all(f.sender == "server" for f in agg.flows)
    rw = LabScenario.from_file(scenario_path("rwnd-rewrite"))
    (r,) = rw.box["rewrite"]
    assert r["kind"] == "rwnd" and r["receivers"] == "a"  # side a is the client
    assert agg.duration <= 30 and rw.duration <= 30


# --- real labs -----------------------------------------------------------------------------


def test_aggregate_shaping_live(live_ok: None, tmp_path: Path) -> None:
    """Three Linux downloads shaped by the box as one aggregate: together at r_m (±10 %),
    equal shares (Jain ≥ 0.9)."""
    sc = LabScenario.from_file(scenario_path("aggregate-shape"))
    m = run_scenario(sc, tmp_path)
    rm = _mbit(_policy(sc)["profile"]["rate"])
    goodput = [m["throughput_mbps_in"]["steady"][f.name] for f in sc.flows]
    ip_rate = sum(goodput) / GOODPUT_PER_IP
    stats = json.loads((tmp_path / "box_stats.json").read_text())
    q = stats["directions"]["to_a"]["qdisc"]
    print(f"aggregate: goodput {goodput} Mbit/s, IP {ip_rate:.3f} of r_m {rm}, "
          f"Jain {jain(goodput):.4f}, counters {q.get('counters')}")
    assert abs(ip_rate - rm) <= 0.1 * rm, (ip_rate, rm)
    assert jain(goodput) >= 0.9, goodput
    assert q["counters"]["conns_opened"] >= 3
    assert q["counters"]["waits"] > 0, "the shaper held packets"
    # The unshaped direction (uploads' ACKs) passed through untouched.
    assert stats["directions"]["to_b"]["sent"] > 0


def _queue_delay_ms(out: Path, rate_bps: float) -> dict[str, float]:
    """Queueing delay at the emulated access link toward the client, from its sampled
    backlog (1500-byte packets at the link rate)."""
    qs = pd.read_csv(out / "queues.csv")
    pk = qs[qs["queue"] == "link.to_a"]["packets"]
    per = 1500 * 8 / rate_bps * 1e3
    return {"mean": float(pk.mean()) * per, "max": float(pk.max()) * per}


def test_window_rewriting_live(live_ok: None, tmp_path: Path) -> None:
    """A Linux download over a 2 Mbit/s access link with a 300-packet buffer: unmanaged,
    the client's large receive buffer lets the server fill it (seconds of queueing); with
    the box rewriting the client's advertised window, the queue stays near the 100 ms
    budget and the download keeps the link busy."""
    sc = LabScenario.from_file(scenario_path("rwnd-rewrite"))
    (policy,) = sc.box["rewrite"]
    budget_ms = float(policy["policy"]["qlength_delay"].removesuffix("ms"))
    rate = _mbit(sc.box["emulation"]["to_a"]["rate"]) * 1e6
    unmanaged = copy.deepcopy(sc)
    unmanaged.name = "rwnd-unmanaged"
    del unmanaged.box["rewrite"]
    res = {}
    for arm, s in (("managed", sc), ("unmanaged", unmanaged)):
        out = tmp_path / arm
        m = run_scenario(s, out)
        stats = json.loads((out / "box_stats.json").read_text())
        rws = stats["directions"]["to_b"]["rewriters"]
        res[arm] = {
            "goodput": m["throughput_mbps_in"]["steady"]["download"],
            "ping_p50": m["ping_rtt_ms"]["ping"]["p50"],
            "ping_p90": m["ping_rtt_ms"]["ping"]["p90"],
            "echo_p50": m["echo_latency_ms"]["typing"]["p50"],
            "queue": _queue_delay_ms(out, rate),
            "max_queue_packets": stats["directions"]["to_a"]["link"]["max_modem_packets"],
            "rewriters": rws,
        }
    print(f"rwnd: {json.dumps(res, indent=1)}")
    man, un = res["managed"], res["unmanaged"]
    (rw,) = man["rewriters"]
    assert rw["kind"] == "rwnd" and rw["rewritten"] > 100, rw
    assert un["rewriters"] == []
    # Unmanaged: the queue grows far beyond the budget.
    assert un["queue"]["mean"] > 3 * budget_ms, un
    # Managed: bounded near the budget (the policy's window is the BDP plus the budget's
    # worth of link time; slack for Linux's segment rounding and the sampling).
    assert man["queue"]["mean"] <= 2 * budget_ms, man
    assert man["ping_p50"] < un["ping_p50"] / 2, (man, un)
    assert man["echo_p50"] < un["echo_p50"] / 2, (man, un)
    # ... without starving the link.
    assert man["goodput"] >= 0.85 * rate / 1e6 * GOODPUT_PER_IP, man
