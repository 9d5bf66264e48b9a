"""Aggregate figures of a sweep: a metric's mean across seeds with its confidence
interval, against a swept parameter, one line (or set of markers) per value of another.

Numeric parameters are placed on a numeric axis; anything else (labels, tables, strings
with units) on evenly spaced categories in the order of the spec.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter, NullLocator

from asymlink.sweep.spec import Parameter, Plot, SweepSpec
from asymlink.sweep.stats import mean_ci


def _log_axis(axis: Any, set_scale: Any) -> None:
    """A log scale labelled 1, 2, 5, 10, 20, ... in plain numbers."""
    set_scale("log")
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))
    axis.set_minor_formatter(NullFormatter())


def sweep_figures(spec: SweepSpec, data: pd.DataFrame, out_dir: Path) -> list[Path]:
    """Draw every `[[plots]]` of `spec` from `data` (the sweep's dataset) into
    `out_dir`; returns the PNG paths."""
    written = []
    ok = data[data["error"] == ""]
    for plot in spec.plots:
        written.append(draw(spec, plot, ok, out_dir / plot.file))
    return written


def _order(param: Parameter, values: pd.Series) -> list[Any]:
    """The distinct values of a parameter column: spec order for a grid, sorted for
    numbers."""
    present = list(dict.fromkeys(values.tolist()))
    if param.numeric:
        return sorted(present)
    if param.settings:
        order = [str(s.column) for s in param.settings]
        return sorted(present, key=lambda v: order.index(str(v)) if str(v) in order else 1e9)
    return present


def draw(spec: SweepSpec, plot: Plot, data: pd.DataFrame, path: Path) -> Path:
    """One figure: mean of `plot.y` across seeds, error bars or a band for the
    confidence interval, against `plot.x`, by `plot.hue`."""
    from asymlink.plot import new_axes, save

    params = {p.key: p for p in spec.parameters}
    for key, value in plot.where:
        data = data[data[key].astype(str) == str(value)]
    xp = params[plot.x]
    ax = new_axes()
    groups: list[tuple[str | None, pd.DataFrame]]
    if plot.hue:
        hp = params[plot.hue]
        groups = [(f"{h:g}" if isinstance(h, float) else str(h), data[data[plot.hue] == h])
                  for h in _order(hp, data[plot.hue])]
    else:
        groups = [(None, data)]
    categories = None if xp.numeric else [str(v) for v in _order(xp, data[plot.x])]
    for label, rows in groups:
        xs, means, halves = [], [], []
        # one point per configuration (for a line plot, one per x value)
        keys = [plot.x] if plot.kind == "line" else ["config"]
        for _, g in rows.groupby(keys, sort=False):
            mean, half, _n = mean_ci(g[plot.y].to_numpy(dtype=float), plot.ci)
            x = g[plot.x].iloc[0]
            xs.append(float(x) if categories is None else categories.index(str(x)))
            means.append(mean)
            halves.append(0.0 if np.isnan(half) else half)
        order = np.argsort(xs, kind="stable")
        x_arr = np.asarray(xs, dtype=float)[order]
        m_arr = np.asarray(means, dtype=float)[order]
        h_arr = np.asarray(halves, dtype=float)[order]
        if plot.kind == "line":
            (line,) = ax.plot(x_arr, m_arr, marker="o", markersize=4, label=label)
            ax.fill_between(x_arr, m_arr - h_arr, m_arr + h_arr, color=line.get_color(),
                            alpha=0.2, linewidth=0)
        else:
            ax.errorbar(x_arr, m_arr, yerr=h_arr, fmt="o", markersize=4, capsize=2,
                        label=label)
    if categories is not None:
        ax.set_xticks(range(len(categories)), categories,
                      rotation=30 if max(map(len, categories), default=0) > 8 else 0)
    ax.set_xlabel(plot.xlabel or (f"{plot.x} ({xp.unit})" if xp.unit else plot.x))
    ax.set_ylabel(plot.ylabel or plot.y)
    seeds = len(spec.seeds)
    what = "one seed" if seeds == 1 else f"mean of {seeds} seeds, {plot.ci:.0%} CI"
    ax.set_title(plot.title or f"{spec.name}: {plot.y} ({what})")
    if categories is None:
        if plot.logx:
            _log_axis(ax.xaxis, ax.set_xscale)
        ticks = sorted({float(v) for v in data[plot.x]})
        if 1 < len(ticks) <= 12:
            ax.set_xticks(ticks, [f"{t:g}" for t in ticks])
            ax.xaxis.set_minor_locator(NullLocator())
    if plot.logy:
        _log_axis(ax.yaxis, ax.set_yscale)
    if plot.hue:
        hue_unit = params[plot.hue].unit
        ax.legend(title=f"{plot.hue} ({hue_unit})" if hue_unit else plot.hue, fontsize="small")
    ax.grid(alpha=0.3)
    return save(ax.figure, path)
