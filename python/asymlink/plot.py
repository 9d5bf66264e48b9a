"""Standard figures of a run, written as PNG with matplotlib's Agg canvas.

Each `plot_*` function draws onto a given Axes (so reproductions can compose figures) or
onto a new Figure, and returns the Axes. Nothing here touches pyplot's global state.
`standard_figures` writes the set `asymlink run` produces.
"""

from __future__ import annotations

from collections.abc import Callable
from os import PathLike
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure, SubFigure

from asymlink.analysis import INTERVAL_DRAWSTYLE, SAMPLE_DRAWSTYLE, flow_starts, throughput
from asymlink.results import Results

DPI = 120
FIGSIZE = (8.0, 4.5)


def new_axes() -> Axes:
    """Axes on a new Figure (Agg canvas); save with `save(ax.figure, path)`."""
    return Figure(figsize=FIGSIZE, layout="constrained").add_subplot()


def save(fig: Figure | SubFigure, path: str | PathLike[str]) -> Path:
    """Write `fig` (a subfigure: its whole figure) as PNG, creating parent directories;
    returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    root = fig if isinstance(fig, Figure) else fig.figure
    root.savefig(p, dpi=DPI, format="png")
    return p


#: At most this many lines in one figure; `plot_series` keeps those of largest mean.
MAX_SERIES = 12


def plot_series(
    table: pd.DataFrame, key: str, column: str, ax: Axes, *, scale: float = 1.0,
    per_interval: bool = False,
) -> Axes:
    """One line per value of `key` (the `MAX_SERIES` of largest mean `column` when there
    are more): `column` × `scale` against `t`. `per_interval`: the
    values describe the interval that ends at `t` (throughput, utilization) and are drawn
    over it; otherwise they are samples held until the next one."""
    style = INTERVAL_DRAWSTYLE if per_interval else SAMPLE_DRAWSTYLE
    legend = key
    means = table.groupby(key)[column].mean()
    if len(means) > MAX_SERIES:
        # An access network's thousands of links: draw the busiest, say so in the legend.
        keep = means.sort_values(ascending=False, kind="stable").index[:MAX_SERIES]
        table = table[table[key].isin(keep)]
        legend = f"{key} ({MAX_SERIES} of {len(means)}, largest mean)"
    for name, rows in table.groupby(key, sort=True):
        rows = rows.sort_values("t")
        t, y = rows["t"].to_numpy(dtype=float), rows[column].to_numpy(dtype=float) * scale
        if per_interval and len(t) > 1:
            # the first value covers the interval before its label: give it a start
            t, y = np.concatenate([[t[0] - (t[1] - t[0])], t]), np.concatenate([[y[0]], y])
        ax.plot(t, y, label=str(name), drawstyle=style)
    ax.set_xlabel("time (s)")
    if table[key].nunique() > 1:
        ax.legend(title=legend, fontsize="small")
    ax.grid(alpha=0.3)
    return ax


# A log scale when one flow's largest window exceeds another's by this factor.
CWND_LOG_RATIO = 10.0


def mark_flow_starts(results: Results, ax: Axes) -> Axes:
    """A dotted vertical line, labelled "<flow> starts", where each flow that does not
    start at 0 begins sending (the events a user looks for: an upload starting)."""
    for flow, t in flow_starts(results.flows).items():
        if t > 0:
            ax.axvline(t, color="grey", linestyle=":", linewidth=1.0)
            ax.annotate(f"{flow} starts", (t, 1.0), xycoords=("data", "axes fraction"),
                        xytext=(3, -3), textcoords="offset points", va="top",
                        fontsize="small", color="grey")
    return ax


def plot_cwnd(results: Results, ax: Axes | None = None) -> Axes:
    """Congestion window (KB) of each flow against time; on a log scale when one flow's
    window dwarfs another's (so both stay readable)."""
    ax = ax or new_axes()
    plot_series(results.flows, "flow", "cwnd_bytes", ax, scale=1e-3)
    peaks = results.flows.groupby("flow")["cwnd_bytes"].max()
    if len(peaks) > 1 and peaks.min() > 0 and peaks.max() / peaks.min() > CWND_LOG_RATIO:
        ax.set_yscale("log")
        ax.set_ylabel("cwnd (KB, log scale)")
    else:
        ax.set_ylabel("cwnd (KB)")
    ax.set_title(f"{results.meta.get('scenario', '')}: congestion window")
    return mark_flow_starts(results, ax)


def plot_throughput(results: Results, interval: float = 1.0, ax: Axes | None = None) -> Axes:
    """Delivered throughput (Mbit/s) of each flow over `interval`-second bins."""
    ax = ax or new_axes()
    plot_series(throughput(results.flows, interval), "flow", "throughput_bps", ax, scale=1e-6,
                per_interval=True)
    ax.set_ylabel(f"throughput (Mbit/s, {interval:g} s bins)")
    ax.set_title(f"{results.meta.get('scenario', '')}: throughput")
    return mark_flow_starts(results, ax)


def plot_queues(results: Results, ax: Axes | None = None) -> Axes:
    """Occupancy (packets) of each queue against time."""
    ax = ax or new_axes()
    plot_series(results.queues, "queue", "packets", ax)
    ax.set_ylabel("queue (packets)")
    ax.set_title(f"{results.meta.get('scenario', '')}: queue occupancy")
    return mark_flow_starts(results, ax)


def plot_utilization(results: Results, ax: Axes | None = None) -> Axes:
    """Utilization (%) of each link direction against time."""
    ax = ax or new_axes()
    plot_series(results.links, "link", "utilization", ax, scale=100.0, per_interval=True)
    ax.set_ylabel("utilization (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{results.meta.get('scenario', '')}: link utilization")
    return mark_flow_starts(results, ax)


def standard_figures(
    results: Results, out_dir: str | PathLike[str], interval: float = 1.0
) -> list[Path]:
    """Write `cwnd.png`, `throughput.png`, `queues.png`, `utilization.png` into `out_dir`,
    each only if its table has rows. Returns the files written."""
    out = Path(out_dir)
    figures: list[tuple[str, pd.DataFrame, Callable[[Axes], Axes]]] = [
        ("cwnd.png", results.flows, lambda ax: plot_cwnd(results, ax)),
        ("throughput.png", results.flows, lambda ax: plot_throughput(results, interval, ax)),
        ("queues.png", results.queues, lambda ax: plot_queues(results, ax)),
        ("utilization.png", results.links, lambda ax: plot_utilization(results, ax)),
    ]
    written = []
    for name, table, draw in figures:
        if table.empty:
            continue
        ax = draw(new_axes())
        written.append(save(ax.figure, out / name))
    return written
