"""Running a scenario to completion, with an optional progress bar."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path

from asymlink import _native
from asymlink.results import Results
from asymlink.scenario import Scenario
from asymlink.validate import ScenarioError

#: The run advances in this many steps, so a progress bar can follow it.
STEPS = 100

#: Bytes one sampled row of a time series costs at its peak, per numeric column and for its
#: name (a string): the engine's columns, their numpy copies and the pandas table together.
#: Measured on the showcase (1 140 s more at 100 ms: +71 MB, 6.2 kB per sample of 14 rows);
#: this model gives 7.5 kB, erring high.
ROW_BYTES_PER_COLUMN = 24
ROW_BYTES_PER_NAME = 240


def estimate_memory(scenario: Scenario, sim: _native.Simulation) -> dict[str, float]:
    """What the run's time series will hold at the end: `samples` (per series), `rows` per
    sample, `bytes` in all. Rows per sample are counted at t = 0 (flows: at least one per
    `[[flows]]` entry); a scenario whose connections multiply (file transfers, web) may
    take more."""
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
            n = max(n, len(scenario.data.get("flows", [])))
        rows += n
        per_sample += n * (ROW_BYTES_PER_COLUMN * (len(columns) - 1) + ROW_BYTES_PER_NAME)
    return {"samples": samples, "rows": rows, "bytes": samples * per_sample,
            "interval": interval}


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
) -> Results:
    """Run `scenario` (a Scenario or the path of a TOML file) to its end.

    `seed` overrides the scenario's seed; `out_dir` is where the engine writes pcap
    captures (it refuses captures without one); `progress` shows a rich progress bar on
    stderr. Raises `ScenarioError` for an invalid scenario, `OSError` for an unreadable
    file, and `ScenarioError` (key `duration`) before running when the time series would
    need more than `memory_limit` bytes (default: 80 % of the memory available now), see
    `estimate_memory`.
    """
    if not isinstance(scenario, Scenario):
        scenario = Scenario.from_file(Path(scenario))
    sim = scenario.simulation(seed=seed, out_dir=out_dir)
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
