"""`_selftest`: an internal entry that exercises the framework end to end (scenario files,
quick overrides, runs, metrics.json, a figure, summary.md). It reproduces no paper and is
hidden from `asymlink reproduce --list`; its checks hold for any working engine."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from asymlink.repro.base import Entry, Metrics, register

SCENARIOS = ("long", "short")


def _run(out_dir: Path, quick: bool) -> dict[str, Any]:
    metas = {name: ENTRY.run_scenario(name, out_dir, quick).meta for name in SCENARIOS}
    return {
        "runs": len(metas),
        "events": {name: meta["events"] for name, meta in metas.items()},
        "duration_s": {name: meta["duration_s"] for name, meta in metas.items()},
    }


def _figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from asymlink.plot import new_axes, save

    events = metrics["events"]
    assert isinstance(events, dict)
    ax = new_axes()
    ax.bar(list(events), [float(v) for v in events.values()])  # type: ignore[arg-type]
    ax.set(xlabel="scenario", ylabel="events processed", title="Self-test: events per run")
    return [save(ax.figure, out_dir / "figures" / "events.png")]


ENTRY = register(
    Entry(
        id="_selftest",
        paper="(none: internal framework self-test)",
        title="framework self-test",
        run=_run,
        figures=_figures,
    )
)
