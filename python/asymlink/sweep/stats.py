"""Metric extraction from a run's tables, and statistics across seeds.

No SciPy: the Student t quantile of a confidence interval comes from the closed-form
distribution function for integer degrees of freedom (Abramowitz & Stegun 26.7.3-4),
solved by Newton's method from a Cornish-Fisher start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from statistics import NormalDist
from typing import Any

import numpy as np
import pandas as pd

from asymlink.sweep.spec import Metric


def extract(metric: Metric, tables: Mapping[str, pd.DataFrame], meta: Mapping[str, Any]) -> float:
    """The value of `metric` for one run: NaN when it selects no rows (0 for `count`).
    Every aggregation but `count` is multiplied by the metric's `scale`."""
    value = _extract(metric, tables, meta)
    return value if metric.agg == "count" else value * metric.scale


def _extract(metric: Metric, tables: Mapping[str, pd.DataFrame], meta: Mapping[str, Any]) -> float:
    if metric.table == "meta":
        return float(meta[metric.column])
    df = tables.get(metric.table)
    if df is None or metric.column not in df.columns:
        return 0.0 if metric.agg == "count" else math.nan
    mask = np.ones(len(df), dtype=bool)
    for col, allowed in metric.where:
        if col not in df.columns:
            return 0.0 if metric.agg == "count" else math.nan
        mask &= df[col].astype(str).isin([str(v) for v in allowed]).to_numpy()
    if "t" in df.columns:
        t = df["t"].to_numpy(dtype=float)
        if metric.t_min is not None:
            mask &= t >= metric.t_min
        if metric.t_max is not None:
            mask &= t <= metric.t_max
    rows = df[mask]
    if metric.agg in ("first", "last") and "t" in rows.columns:
        rows = rows.sort_values("t", kind="stable")
    values = pd.to_numeric(rows[metric.column], errors="coerce").to_numpy(dtype=float)
    return aggregate_values(values, metric.agg)


def aggregate_values(values: np.ndarray, agg: str) -> float:
    """`agg` (see `spec.AGGREGATIONS`, or `pNN`) of `values`, ignoring NaN."""
    if agg == "count":
        return float(len(values))
    values = values[~np.isnan(values)]
    if len(values) == 0:
        return math.nan
    if agg == "first":
        return float(values[0])
    if agg == "last":
        return float(values[-1])
    if agg == "std":
        return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan
    if agg.startswith("p"):
        return float(np.percentile(values, float(agg[1:])))
    return float(getattr(np, agg)(values))


# --- confidence intervals ---------------------------------------------------------------


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` degrees of freedom (integer)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    s = math.sin(theta)
    if df % 2 == 1:
        total, term = 0.0, 1.0
        if df > 1:
            total = 1.0
            for k in range(3, df, 2):           # 2/3 c², 2·4/(3·5) c⁴, ...
                term *= (k - 1) / k * c2
                total += term
            total *= s * math.cos(theta)
        return 2 / math.pi * (theta + total)
    total, term = 1.0, 1.0
    for k in range(2, df - 1, 2):               # 1/2 c², 1·3/(2·4) c⁴, ...
        term *= (k - 1) / k * c2
        total += term
    return s * total


def _t_density(t: float, df: int) -> float:
    log_c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    return math.exp(log_c - (df + 1) / 2 * math.log1p(t * t / df))


def t_quantile(level: float, df: int) -> float:
    """The two-sided critical value: P(|T| <= q) = `level` (e.g. 0.95, df = 4: 2.776)."""
    if not 0 < level < 1 or df < 1:
        raise ValueError(f"need 0 < level < 1 and df >= 1, got {level}, {df}")
    p = (1 + level) / 2
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        return (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    z = NormalDist().inv_cdf(p)
    q = (z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
         + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3))
    for _ in range(50):
        step = (_t_two_sided(q, df) - level) / (2 * _t_density(q, df))
        q -= step
        if abs(step) < 1e-12 * max(1.0, q):
            break
    return q


def mean_ci(values: Sequence[float] | np.ndarray, level: float) -> tuple[float, float, int]:
    """Mean, half-width of the `level` t-interval, and n (NaN ignored). The half-width
    is NaN for fewer than two values."""
    arr = np.asarray(values, dtype=float)
    arr = arr[~np.isnan(arr)]
    n = len(arr)
    if n == 0:
        return math.nan, math.nan, 0
    mean = float(arr.mean())
    if n < 2:
        return mean, math.nan, 1
    half = t_quantile(level, n - 1) * float(arr.std(ddof=1)) / math.sqrt(n)
    return mean, half, n


def aggregate(data: pd.DataFrame, parameters: Sequence[str], metrics: Sequence[str],
              level: float) -> pd.DataFrame:
    """One row per configuration (`config` and the parameter columns): for each metric
    `<m>_mean`, `<m>_ci_low`, `<m>_ci_high` (t-interval at `level` across seeds) and
    `<m>_n` (seeds with a value). Failed points are left out."""
    ok = data[data["error"] == ""] if "error" in data.columns else data
    rows = []
    for config, group in ok.groupby("config", sort=True):
        row: dict[str, Any] = {"config": config}
        first = group.iloc[0]
        for p in parameters:
            row[p] = first[p]
        row["seeds"] = len(group)
        for m in metrics:
            mean, half, n = mean_ci(group[m].to_numpy(dtype=float), level)
            row[f"{m}_mean"] = mean
            row[f"{m}_ci_low"] = mean - half
            row[f"{m}_ci_high"] = mean + half
            row[f"{m}_n"] = n
        rows.append(row)
    columns = ["config", *parameters, "seeds",
               *(f"{m}_{s}" for m in metrics for s in ("mean", "ci_low", "ci_high", "n"))]
    return pd.DataFrame(rows, columns=columns)
