"""Running a scenario to completion, with an optional progress bar."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from os import PathLike
from pathlib import Path

from asymlink.results import Results
from asymlink.scenario import Scenario

#: The run advances in this many steps, so a progress bar can follow it.
STEPS = 100


def run(
    scenario: Scenario | str | PathLike[str],
    *,
    seed: int | None = None,
    out_dir: str | PathLike[str] | None = None,
    progress: bool = False,
) -> Results:
    """Run `scenario` (a Scenario or the path of a TOML file) to its end.

    `seed` overrides the scenario's seed; `out_dir` is where the engine writes pcap
    captures (it refuses captures without one); `progress` shows a rich progress bar on
    stderr. Raises `ScenarioError` for an invalid scenario, `OSError` for an unreadable
    file.
    """
    if not isinstance(scenario, Scenario):
        scenario = Scenario.from_file(Path(scenario))
    sim = scenario.simulation(seed=seed, out_dir=out_dir)
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
