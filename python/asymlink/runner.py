"""Running a scenario to completion, with an optional progress bar."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path
from typing import Any

from asymlink import _native
from asymlink.results import Results
from asymlink.scenario import Scenario
from asymlink.validate import ConfigError, ScenarioError, seconds

#: The run advances in this many steps, so a progress bar can follow it.
STEPS = 100

#: Bytes one sampled row of a time series costs at its peak, per numeric column and for its
#: name (a string): the engine's columns, their numpy copies and the pandas table together.
#: Measured on the showcase (1 140 s more at 100 ms: +71 MB, 6.2 kB per sample of 14 rows);
#: this model gives 7.5 kB, erring high.
ROW_BYTES_PER_COLUMN = 24
ROW_BYTES_PER_NAME = 240


#: A finished connection stays in the flows table while it lingers in TIME-WAIT, at least
#: 2 s in the simulator; a file transfer's cycle (transfer and gap) is counted as at least
#: `MIN_CYCLE_S`, so connections opened faster than that are taken to overlap.
LINGER_S = 2.0
MIN_CYCLE_S = 0.1


def estimate_memory(scenario: Scenario, sim: _native.Simulation) -> dict[str, float]:
    """What the run's time series will hold at the end: `samples` (per series), `rows` per
    sample, `bytes` in all. Rows per sample are counted at t = 0, and for flows at least
    the connections each `[[flows]]` entry may have open at once (`connections_at_once`:
    web pages and file transfers open many)."""
    interval = sim.monitor_interval
    samples = math.floor(sim.end / interval) + 1
    sim.run_until(0.0)
    tables = sim.results()["tables"]
    on = dict(zip(("flows", "queues", "links"), sim.monitors, strict=True))
    rows = 0.0
    per_sample = 0.0
    for name, enabled in on.items():
        columns = tables.get(name, {})
        if not enabled or not columns:
            continue
        n = len(next(iter(columns.values())))
        if name == "flows":
            flows = scenario.data.get("flows", [])
            n = max(n, sum(connections_at_once(f) for f in flows if isinstance(f, dict)))
        rows += n
        per_sample += n * (ROW_BYTES_PER_COLUMN * (len(columns) - 1) + ROW_BYTES_PER_NAME)
    return {"samples": samples, "rows": rows, "bytes": samples * per_sample,
            "interval": interval}


def connections_at_once(flow: dict[str, Any]) -> int:
    """An upper estimate of the connections a `[[flows]]` entry has in the flows table at
    one time (each is a row per sample until it has lingered closed): a web page's main
    object and every object on its own connection (two pages overlapping), or the
    persistent connections (`parallel`); a file transfer's connections that close within
    `LINGER_S` of each other; one for the other applications."""
    app = flow.get("app")
    if not isinstance(app, dict):
        return 1
    kind = app.get("kind")
    if kind == "web":
        pages = min(_int(app.get("pages"), 1), 2)
        if app.get("persistent") is True:
            return max(1, _int(app.get("parallel"), 4)) * pages
        objects = app.get("objects")
        count = len(objects) if isinstance(objects, list) else _int(app.get("object_count"), 0)
        return (1 + count) * pages
    if kind == "file_transfers":
        overlap = 1 + math.ceil(LINGER_S / max(_mean_seconds(app.get("gap")), MIN_CYCLE_S))
        files = _int(app.get("count"), 0)
        return min(overlap, files) if files > 0 else overlap
    return 1


def _int(value: Any, default: int) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else default


def _mean_seconds(dist: Any) -> float:
    """The mean of a duration or a duration distribution as scenarios write them; 0 when
    it cannot be read (the engine reports the error)."""
    try:
        if isinstance(dist, str):
            return seconds(dist, "gap")
        if isinstance(dist, dict):
            if "mean" in dist:
                return seconds(dist["mean"], "gap.mean")
            if "min" in dist and "max" in dist:
                return (seconds(dist["min"], "gap.min") + seconds(dist["max"], "gap.max")) / 2
            for key in ("min", "value"):
                if key in dist:
                    return seconds(dist[key], f"gap.{key}")
    except ConfigError:
        pass
    return 0.0


def available_memory() -> float:
    """Bytes of memory available now (Linux MemAvailable), or 8 GiB when unknown."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 8 * 2**30


def check_memory(scenario: Scenario, sim: _native.Simulation,
                 limit: float | None = None) -> None:
    """Refuse, before running, a run whose time series would not fit in memory."""
    limit = 0.8 * available_memory() if limit is None else limit
    est = estimate_memory(scenario, sim)
    if est["bytes"] <= limit:
        return
    fit = est["interval"] * est["bytes"] / limit
    raise ScenarioError(
        scenario.origin, "duration",
        f"this run would hold about {_size(est['bytes'])} of time series in memory "
        f"({est['samples']:,.0f} samples of {est['rows']:.0f} rows, one every "
        f"{est['interval']:g} s), more than the {_size(limit)} it may use; sample less "
        f"often (--set monitor.interval={_seconds(fit)}), record fewer series "
        "(--set monitor.queues=false, monitor.links=false, monitor.flows=false) or "
        "shorten the run")


def _size(b: float) -> str:
    for unit, m in (("TB", 1e12), ("GB", 1e9), ("MB", 1e6)):
        if b >= m:
            return f"{b / m:.3g} {unit}"
    return f"{b / 1e3:.3g} KB"


def _seconds(s: float) -> str:
    """A duration at least `s`, rounded up to a readable value with a unit."""
    for unit, m in (("h", 3600.0), ("min", 60.0), ("s", 1.0)):
        if s >= m:
            return f"{math.ceil(s / m)}{unit}"
    return f"{math.ceil(s * 1000)}ms"


def run(
    scenario: Scenario | str | PathLike[str],
    *,
    seed: int | None = None,
    out_dir: str | PathLike[str] | None = None,
    progress: bool = False,
    memory_limit: float | None = None,
    threads: int = 1,
) -> Results:
    """Run `scenario` (a Scenario or the path of a TOML file) to its end.

    `seed` overrides the scenario's seed; `out_dir` is where the engine writes pcap
    captures (it refuses captures without one); `progress` shows a rich progress bar on
    stderr. Raises `ScenarioError` for an invalid scenario, `OSError` for an unreadable
    file, and `ScenarioError` (key `duration`) before running when the time series would
    need more than `memory_limit` bytes (default: 80 % of the memory available now), see
    `estimate_memory`. `threads` > 1 divides the scenario's nodes between as many
    worlds run side by side (deterministic for a seed and a number of threads, but not
    the one-thread trace: see docs/performance.md, "Two cores").
    """
    if not isinstance(scenario, Scenario):
        scenario = Scenario.from_file(Path(scenario))
    sim = scenario.simulation(seed=seed, out_dir=out_dir, threads=threads)
    check_memory(scenario, sim, memory_limit)
    with _progress(progress, scenario.name, sim.end) as advance:
        for step in range(1, STEPS):
            sim.run_until(sim.end * step / STEPS)
            advance(sim.now)
        sim.run()
        advance(sim.now)
    return Results.from_native(sim.results())


@contextmanager
def _progress(enabled: bool, name: str, end: float) -> Iterator[Callable[[float], None]]:
    if not enabled:
        yield lambda _now: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TaskProgressColumn(),
        TextColumn("{task.completed:.1f}/{task.total:.1f} s simulated"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        task = bar.add_task(name, total=end)
        yield lambda now: bar.update(task, completed=now)
