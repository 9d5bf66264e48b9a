"""Simulator benchmark behind `asymlink bench sim`.

# BENCH HOOK: `run_sim` is the one function the CLI calls. Once the engine exposes
# `asymlink_sim::bench::run(&BenchSpec) -> BenchResult`, bind it in
# `crates/asymlink-py/src/lib.rs` and call it from here, keeping the keys of the returned
# dict. Until then it times a run of the shipped `showcase` example with its first flow
# replicated `flows` times.
"""

from __future__ import annotations

import copy
import resource
from typing import Any

from asymlink import examples
from asymlink.runner import run
from asymlink.scenario import Scenario


def bench_scenario(flows: int, duration: float) -> Scenario:
    """The showcase example, `duration` seconds long, with its first flow copied `flows`
    times (named `<name>-<i>`)."""
    if flows < 1:
        raise ValueError(f"flows must be >= 1, got {flows}")
    if not duration > 0:
        raise ValueError(f"duration must be > 0 seconds, got {duration}")
    data = examples.load("showcase").data
    template = data["flows"][0]
    data["flows"] = [
        {**copy.deepcopy(template), "name": f"{template.get('name', 'flow')}-{i}"}
        for i in range(flows)
    ]
    data["duration"] = f"{duration:g}s"
    data["name"] = f"bench-{flows}-flows"
    return Scenario.from_dict(data, origin="bench")


def run_sim(flows: int = 10, duration: float = 10.0) -> dict[str, Any]:
    """Benchmark the simulator; returns `packet_hops_per_sec`, `events_per_sec`, `wall_s`,
    `peak_rss_mb` (peak resident memory of this process), `flows`, `duration_s`,
    `packet_hops`, `events`. The rates are None when the run took no measurable time."""
    meta = run(bench_scenario(flows, duration)).meta
    wall = float(meta["wall_s"])
    return {
        "flows": flows,
        "duration_s": float(meta["duration_s"]),
        "wall_s": wall,
        "events": int(meta["events"]),
        "packet_hops": int(meta["packet_hops"]),
        "events_per_sec": meta["events"] / wall if wall > 0 else None,
        "packet_hops_per_sec": meta["packet_hops"] / wall if wall > 0 else None,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }
