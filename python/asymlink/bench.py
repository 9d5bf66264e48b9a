"""Simulator benchmark behind `asymlink bench sim`.

The benchmark itself is in Rust (`asymlink_sim::bench`): a dumbbell of long-lived flows,
each sender on its own 1 Gbit/s access link, a bottleneck with a one-BDP drop-tail buffer,
20 ms RTT, 1500-byte packets, monitors off. `packet_hops` counts every transmission of a
data or ACK packet on every link. `trace_hash` (16 hex digits) hashes every packet-hop's
time, link and header fields: equal configurations give equal hashes, so
the figures of two builds can be compared knowing they simulated the same packets.

Each configuration runs in a fresh Python process so that `peak_rss_mb` is the peak
resident memory of that configuration alone (the interpreter and libraries included,
about 60-80 MB; `baseline_rss_mb` reports the same process before the run).
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

STANDARD = {"flows": 100, "duration_s": 60.0, "bottleneck_bps": 100_000_000}
SCALING_FLOWS = (10, 100, 1000, 10000)
SCALING_MIN_HOPS = 10_000_000


def scaling_point(flows: int, min_hops: int = SCALING_MIN_HOPS) -> dict[str, Any]:
    """The scaling series keeps the per-flow regime fixed: `flows` flows over a
    `flows` x 10 Mbit/s bottleneck, run long enough for at least `min_hops` packet-hops
    (each flow makes about 3 700 hops per simulated second)."""
    duration = max(5.0, float(-(-min_hops // (3_700 * flows))))
    return {"flows": flows, "duration_s": duration, "bottleneck_bps": 10_000_000 * flows}


def _run_here(flows: int, duration_s: float, bottleneck_bps: int, cc: str = "") -> dict[str, Any]:
    import resource

    from asymlink import _native

    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = dict(_native.bench_sim(flows, duration_s, bottleneck_bps, cc=cc or None))
    result["cc"] = cc or "new_reno"
    result["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result["baseline_rss_mb"] = base
    return result


def run_sim(flows: int, duration_s: float, bottleneck_bps: int, cc: str = "") -> dict[str, Any]:
    """Run one configuration in a fresh process and return its figures. `cc` replaces the
    flows' congestion control (NewReno, the `rfc` profile's): `bbr` is the paced BBR
    dumbbell."""
    code = (
        "import json, sys; from asymlink.bench import _run_here; "
        f"print(json.dumps(_run_here({int(flows)}, {float(duration_s)!r}, {int(bottleneck_bps)}, "
        f"{cc!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    return dict(json.loads(out.stdout.strip().splitlines()[-1]))


def run_scaling(points: tuple[int, ...] = SCALING_FLOWS) -> list[dict[str, Any]]:
    """The scaling series; adds `cost_ratio_vs_first` (ns per hop relative to the first
    point)."""
    rows = [run_sim(**scaling_point(n)) for n in points]
    base = rows[0]["ns_per_hop"]
    for r in rows:
        r["cost_ratio_vs_first"] = r["ns_per_hop"] / base
    return rows
