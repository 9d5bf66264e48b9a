"""Derived quantities computed from a run's tables (all from the simulation's output).

The flow counters (`bytes_delivered`, ...) and the queue counters (`drops`, `filtered`,
...) are cumulative since the start of the run.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from asymlink.results import Results


def throughput(
    flows: pd.DataFrame, interval: float = 1.0, column: str = "bytes_delivered"
) -> pd.DataFrame:
    """Throughput per flow in bit/s: the cumulative byte counter `column`, interpolated
    linearly at multiples of `interval` seconds (zero at t = 0) and differentiated.

    Returns columns `t` (end of each interval), `flow`, `throughput_bps`.
    """
    if not interval > 0:
        raise ValueError(f"interval must be > 0 seconds, got {interval}")
    parts = []
    for flow, rows in flows.groupby("flow", sort=True):
        rows = rows.sort_values("t")
        t = rows["t"].to_numpy(dtype=float)
        counter = rows[column].to_numpy(dtype=float)
        edges = np.arange(0.0, t[-1] + interval * 1e-9, interval)
        if len(edges) < 2:
            continue
        at_edges = np.interp(edges, t, counter, left=0.0)
        parts.append(
            pd.DataFrame(
                {"t": edges[1:], "flow": flow, "throughput_bps": np.diff(at_edges) * 8 / interval}
            )
        )
    if not parts:
        return pd.DataFrame(columns=["t", "flow", "throughput_bps"])
    return pd.concat(parts, ignore_index=True)


def flow_totals(results: Results) -> pd.DataFrame:
    """Per flow: `delivered_bytes` (last sample) and `throughput_bps`, its mean over the
    whole run (NaN when the run has no duration)."""
    last = _last_per(results.flows, "flow", ["bytes_delivered"])
    duration = float(results.meta.get("duration_s", 0.0))
    mean = last["bytes_delivered"] * 8 / duration if duration > 0 else np.nan
    return pd.DataFrame(
        {"flow": last["flow"], "delivered_bytes": last["bytes_delivered"], "throughput_bps": mean}
    )


def queue_totals(results: Results) -> pd.DataFrame:
    """Per queue: `drops` and `filtered` at the end of the run (last sample)."""
    return _last_per(results.queues, "queue", ["drops", "filtered"])


def _last_per(table: pd.DataFrame, key: str, columns: list[str]) -> pd.DataFrame:
    """The last row (by `t`) of each `key`, restricted to `key` and `columns`."""
    ordered = table.sort_values("t", kind="stable")
    return ordered.groupby(key, sort=True).tail(1).sort_values(key)[[key, *columns]].reset_index(
        drop=True
    )


def jain_index(values: Sequence[float] | np.ndarray | pd.Series) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2) of non-negative allocations such as
    per-flow throughputs: 1 when all are equal, 1/n when one flow takes everything. NaN
    for an empty input or when every value is zero; `ValueError` for a negative value."""
    x = np.asarray(values, dtype=float)
    if x.size == 0 or not np.any(x):
        return float("nan")
    if np.any(x < 0):
        raise ValueError("Jain's index is defined for non-negative values")
    return float(x.sum() ** 2 / (x.size * (x**2).sum()))
