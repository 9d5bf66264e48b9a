"""Per-host fairness through the box, in the lab (real Linux TCP; root).

    sudo .venv/bin/python scripts/fairness_lab.py [--runs N] [--only aqm|line] [OUT]

Two client hosts behind the box, host 1 with one bulk TCP flow and host 2 with eight
(Linux CUBIC at default settings); printed per run, with the load average when it
started and a mark (`.` met, `X` not) for "each host within 10 % of half the total":

* `aqm`: the AQM benchmark's uplink (`aqm-host_fq_codel`: 10 Mbit/s, 20 ms, 1000-packet
  buffer; a third host pings every 100 ms) under `host_fq_codel` and under `fq_codel`
  (per-flow fairness only, for comparison), each with RFC 8289 CoDel and with COBALT
  (`aqm = "cobalt"`) on its flow queues; goodput over 5-20 s, and the box's uplink
  sojourn times (whole run) and standing queue (5-20 s).
* `line`: line mode (`line = {...}` alone) on the lab's emulated access line
  (`today-line`'s `[access]` hop, 1000-packet modem and DSLAM buffers), the 8M/512k ATM
  line and a 24M/3M PTM line, the eight-plus-one flows once uploading and once
  downloading; goodput over 8-30 s (as `scripts/line_grid.py --fairness` measures it in
  the simulator).
"""

from __future__ import annotations

import copy
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from asymlink.lab import Lab, run_scenario
from asymlink.lab.bench import scenario_path
from asymlink.lab.scenario import LabScenario

LINES = [(8_000_000, 512_000, "atm"), (24_000_000, 3_000_000, "ptm")]
LINKLAYER = {"atm": {"encap": "llc_snap_routed"}, "ptm": {"framing": "ptm", "overhead": 30}}


def aqm_scenario(qdisc: str, aqm: str = "codel") -> LabScenario:
    sc = LabScenario.from_file(scenario_path("aqm-host_fq_codel"))
    sc.box = copy.deepcopy(sc.box)
    q = sc.box["to_b"]["qdisc"]
    if qdisc != "host_fq_codel":
        q.pop("hosts", None)
    q["kind"] = qdisc
    q["aqm"] = aqm
    sc.name = f"aqm-hosts-{qdisc}" + ("" if aqm == "codel" else f"-{aqm}")
    return sc


def line_scenario(down: int, up: int, framing: str, way: str) -> LabScenario:
    base = LabScenario.from_file(scenario_path("today-line"))
    ll = LINKLAYER[framing]
    flows: list[dict[str, Any]] = []
    for host, n in (("client", 1), ("client2", 8)):
        for k in range(n):
            ends = ("server", host) if way == "down" else (host, "server")
            flows.append({"name": f"{host}-{k}", "from": ends[0], "to": ends[1],
                          "port": 6000 + 10 * k + (1 if host == "client2" else 0)})
    doc: dict[str, Any] = {
        "name": f"line-fair-{down // 1000}k-{up // 1000}k-{framing}-{way}",
        "duration": "30s", "windows": {"steady": ["8s", "30s"]},
        "box": {**copy.deepcopy(base.box),
                "line": {"down": f"{down}bit", "up": f"{up}bit", "linklayer": ll}},
        "access": {d: {**base.access[d], "rate": f"{r}bit", "linklayer": ll}
                   for d, r in (("to_a", down), ("to_b", up))},
        "flows": flows,
    }
    return LabScenario.from_dict(doc)


def shares(m: dict[str, Any]) -> tuple[float, float, float]:
    h = m["host_throughput_mbps_in"]["steady"]
    h1, h2 = h["client"], h["client2"]
    return h1, h2, h1 / (h1 + h2)


def run(lab: Lab, sc: LabScenario, out: Path, i: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    m = run_scenario(sc, out / f"{sc.name}-{i}", lab)
    h1, h2, share = shares(m)
    row = {"scenario": sc.name, "run": i, "load1": load, "h1_mbps": h1, "h2_mbps": h2,
           "h1_share": share, "met": abs(share - 0.5) <= 0.05}
    ping = m.get("ping_rtt_ms_in", {}).get("steady", {}).get("ping")
    if ping:
        row["ping_p50_ms"], row["ping_p90_ms"] = ping["p50"], ping["p90"]
    extra = (f" ping p50/p90 {row['ping_p50_ms']:.1f}/{row['ping_p90_ms']:.1f} ms"
             if ping else "")
    soj = (m.get("box", {}).get("to_b") or {}).get("sojourn_ms") or {}
    standing = m.get("standing_sojourn_ms_in", {}).get("steady", {}).get("to_b")
    if soj.get("p50") is not None:
        row.update({f"sojourn_{k}_ms": soj[k] for k in ("p50", "p90", "p99")})
        row["standing_ms"] = standing
        extra += (f" sojourn p50/p90/p99 {soj['p50']:.1f}/{soj['p90']:.1f}/{soj['p99']:.1f}"
                  f" ms standing {standing if standing is None else round(standing, 1)} ms")
    print(f"{sc.name:<34} run {i} load {load:4.2f} {'.' if row['met'] else 'X'} "
          f"1 flow {h1:.3f} vs 8 flows {h2:.3f} Mbit/s (h1 {share:.1%}){extra}", flush=True)
    return row


def main(argv: list[str]) -> int:
    runs, only, rest = 2, "", []
    it = iter(argv[1:])
    for a in it:
        if a == "--runs":
            runs = int(next(it))
        elif a == "--only":
            only = next(it)
        else:
            rest.append(a)
    out = Path(rest[0]) if rest else Path(tempfile.mkdtemp(prefix="fairness-lab-"))
    scenarios = []
    if only in ("", "aqm"):
        scenarios += [aqm_scenario(q, a) for a in ("codel", "cobalt")
                      for q in ("host_fq_codel", "fq_codel")]
    if only in ("", "line"):
        scenarios += [line_scenario(*ln, way) for ln in LINES for way in ("up", "down")]
    lab = Lab.up()
    try:
        rows = [run(lab, sc, out, i) for sc in scenarios for i in range(1, runs + 1)]
    finally:
        lab.down()
    (out / "fairness.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"results in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
