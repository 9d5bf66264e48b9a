"""Derived quantities computed from a run's tables (all from the simulation's output).

The flow counters (`bytes_delivered`, ...) and the queue counters (`drops`, `filtered`,
...) are cumulative since the start of the run.

Time convention: every row of a table is a sample taken at its `t`. A value that
describes an interval (a throughput bin here; `utilization` and `sojourn_ms` in the
simulator's tables) is labelled with the END of the interval it covers, (t - interval, t].
Figures draw such values with `INTERVAL_DRAWSTYLE` ("steps-pre"), so each value spans the
interval it describes; instantaneous samples (cwnd, queue length) use "steps-post".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from asymlink.results import Results

INTERVAL_DRAWSTYLE = "steps-pre"
"""matplotlib drawstyle for end-labelled interval values: the value at t covers (t', t]."""
SAMPLE_DRAWSTYLE = "steps-post"
"""matplotlib drawstyle for instantaneous samples: held until the next sample."""


def throughput(
    flows: pd.DataFrame, interval: float = 1.0, column: str = "bytes_delivered"
) -> pd.DataFrame:
    """Throughput per flow in bit/s: the cumulative byte counter `column`, interpolated
    linearly at multiples of `interval` seconds (zero at t = 0) and differentiated.

    Returns columns `t` (the END of each bin: the row t = 11 is the bin (10 s, 11 s]),
    `flow`, `throughput_bps`. Draw it with `INTERVAL_DRAWSTYLE`.
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


def flow_starts(flows: pd.DataFrame) -> dict[str, float]:
    """When each flow started sending: the sample time just before its first sent byte
    (0 for a flow sending from the first sample). Flows that never sent are left out."""
    sent = "bytes_sent" if "bytes_sent" in flows.columns else "bytes_delivered"
    starts = {}
    for flow, rows in flows.sort_values("t").groupby("flow", sort=True):
        moving = np.flatnonzero(rows[sent].to_numpy(dtype=float) > 0)
        if len(moving):
            t = rows["t"].to_numpy(dtype=float)
            starts[str(flow)] = float(t[moving[0] - 1]) if moving[0] > 0 else 0.0
    return starts


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


def max_min_shares(
    capacity: float, limits: Sequence[float] | np.ndarray | pd.Series
) -> np.ndarray:
    """Max-min fair shares of `capacity` among flows that can each use at most
    `limits[i]` (e.g. their own access link; `inf` for none): water-filling, so that "if
    any connection uses an amount less than its fair (i.e., equal) share, the unused amount
    is shared equally among the remaining connections" (Mehra, Tewari & Kandlur §2.2,
    s_i = min(S, ŝ_i)). The shares sum to min(capacity, sum of limits). `ValueError` for a
    negative capacity or limit."""
    lim = np.asarray(limits, dtype=float)
    if capacity < 0 or np.any(lim < 0):
        raise ValueError("capacity and limits must be non-negative")
    shares = np.zeros(lim.size)
    left, open_ = float(capacity), np.ones(lim.size, dtype=bool)
    while open_.any() and left > 1e-12 * max(capacity, 1.0):
        fair = left / open_.sum()
        capped = open_ & (lim - shares <= fair)
        if not capped.any():
            shares[open_] += fair
            break
        left -= float((lim[capped] - shares[capped]).sum())
        shares[capped] = lim[capped]
        open_ &= ~capped
    return shares


def max_min_fairness_index(
    values: Sequence[float] | np.ndarray | pd.Series,
    shares: Sequence[float] | np.ndarray | pd.Series,
) -> float:
    """The max-min-modified fairness index (Mehra, Tewari & Kandlur §2.2):
    (sum R_i/s_i)^2 / (n * sum (R_i/s_i)^2), Jain's index of each throughput R_i taken
    relative to its max-min fair share s_i (see `max_min_shares`). Equal to
    `jain_index(values)` when the shares are equal. NaN for empty or all-zero input;
    `ValueError` for mismatched lengths, a negative value or a non-positive share."""
    x = np.asarray(values, dtype=float)
    s = np.asarray(shares, dtype=float)
    if x.shape != s.shape:
        raise ValueError(f"{x.size} values but {s.size} shares")
    if np.any(s <= 0):
        raise ValueError("max-min shares must be positive")
    return jain_index(x / s)
