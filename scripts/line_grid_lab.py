"""Line mode on a few lines of the grid, in the lab (real Linux TCP; root).

    sudo .venv/bin/python scripts/line_grid_lab.py [OUT]   # six lines, about 4 minutes

The lab scenario `today-line` (a download alone from 0 s, an upload as well from 12 s,
typed echoes every 200 ms; goodput over 1-12 s and 16-30 s) with its line and its `line`
key set to each point: the rates, the framing (ATM: RFC 2684 routed LLC/SNAP; PTM: 30
bytes of overhead, 64/65 coding) and both line buffers. The base RTT is the lab's (under
a millisecond). Printed per point, with a mark per goal (`.` met, `X` not):

* the download during the upload is at least 90 % of the download alone;
* the upload is at least 80 % of (the shaped uplink rate - the wire rate of the pure ACKs
  that crossed the uplink); the line counts packets, not kinds, so the ACKs over 16-30 s
  are the packets the line carried up then, less the upload's segments (its goodput over
  1448-byte segments) and the echoes (5 a second), each charged as a 52-byte ACK;
* the echo p90, alone and during both transfers, is at most one 1500-byte packet's time
  on the uplink + 20 ms.
"""

from __future__ import annotations

import csv
import json
import sys
import tempfile
from pathlib import Path

from asymlink.lab import Lab, run_scenario
from asymlink.lab.bench import scenario_path
from asymlink.lab.scenario import LabScenario

#: (downstream bit/s, upstream bit/s, framing, buffer packets)
POINTS = [
    (1_000_000, 125_000, "atm", 1000),
    (8_000_000, 400_000, "atm", 1000),
    (24_000_000, 3_000_000, "ptm", 50),
    (24_000_000, 1_200_000, "ptm", 1000),
    (100_000_000, 5_000_000, "atm", 50),
    (100_000_000, 12_500_000, "ptm", 1000),
]
LINKLAYER = {"atm": {"encap": "llc_snap_routed"}, "ptm": {"framing": "ptm", "overhead": 30}}


def scenario(down: int, up: int, framing: str, buf: int) -> LabScenario:
    sc = LabScenario.from_file(scenario_path("today-line"))
    ll = LINKLAYER[framing]
    sc.box["line"] = {"down": f"{down}bit", "up": f"{up}bit", "linklayer": ll}
    for d, rate in (("to_a", down), ("to_b", up)):
        sc.access[d].update(rate=f"{rate}bit", linklayer=ll, modem_buffer=f"{buf}p")
    sc.name = f"line-{down // 1000}k-{up // 1000}k-{framing}-{buf}p"
    return sc


def wire_bytes(ip_len: int, framing: str) -> float:
    if framing == "atm":
        return float(-(-(ip_len + 8 + 8) // 48) * 53)
    return (ip_len + 30) * 65 / 64


def acks_up_mbps(run: Path, upload_mbps: float, framing: str, lo: float = 16.0,
                 hi: float = 30.0) -> float:
    """The wire rate of the pure ACKs that crossed the uplink over [lo, hi] (see above)."""
    rows = [r for r in csv.DictReader((run / "queues.csv").open())
            if r["queue"] == "access.to_b"]
    def at(t: float) -> float:
        return float(min(rows, key=lambda r: abs(float(r["t"]) - t))["dequeued"])
    packets = at(hi) - at(lo)
    acks = max(0.0, packets - upload_mbps * 1e6 / 8 * (hi - lo) / 1448 - 5 * (hi - lo))
    return acks * wire_bytes(52, framing) * 8 / (hi - lo) / 1e6


def point(lab: Lab, out: Path, down: int, up: int, framing: str, buf: int) -> dict:
    sc = scenario(down, up, framing, buf)
    m = run_scenario(sc, out / sc.name, lab)
    tp, echo = m["throughput_mbps_in"], m["echo_latency_ms_in"]
    r = {
        "point": sc.name,
        "down_alone": tp["alone"]["download"],
        "down_both": tp["contended"]["download"],
        "upload": tp["contended"]["upload"],
        "echo_p90_alone": echo["alone"]["typing"]["p90"],
        "echo_p90_both": echo["contended"]["typing"]["p90"],
    }
    r["acks_up_mbps"] = acks_up_mbps(out / sc.name, r["upload"], framing)
    up_goal = 0.8 * (0.95 * up / 1e6 - r["acks_up_mbps"])
    echo_goal = wire_bytes(1500, framing) * 8 / up * 1e3 + 20
    r["goals"] = [r["down_both"] >= 0.9 * r["down_alone"], r["upload"] >= up_goal,
                  max(r["echo_p90_alone"], r["echo_p90_both"]) <= echo_goal]
    marks = "".join("." if ok else "X" for ok in r["goals"])
    print(f"{down / 1e6:>5g}M/{up / 1e6:g}M {framing} {buf:>4}p {marks} download alone "
          f"{r['down_alone']:.2f} with upload {r['down_both']:.2f} "
          f"({r['down_both'] / r['down_alone']:.0%}) upload {r['upload']:.3f} "
          f"(goal {up_goal:.3f}) echo p90 {r['echo_p90_alone']:.0f}/{r['echo_p90_both']:.0f} ms "
          f"(goal {echo_goal:.0f})", flush=True)
    return r


def main(argv: list[str]) -> int:
    out = Path(argv[1]) if len(argv) > 1 else Path(tempfile.mkdtemp(prefix="line-grid-lab-"))
    lab = Lab.up()
    try:
        rows = [point(lab, out, *p) for p in POINTS]
    finally:
        lab.down()
    (out / "grid.json").write_text(json.dumps(rows, indent=2) + "\n")
    print(f"tables and grid.json in {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
