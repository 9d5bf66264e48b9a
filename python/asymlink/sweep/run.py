"""Running a sweep: points to an Executor, results to a per-point cache and a dataset.

Any `concurrent.futures.Executor` runs the points: a `ProcessPoolExecutor` locally, or
`distributed.Client(address).get_executor()` on a Dask cluster. A point is a pure
function of its scenario text and seed, so every executor gives the same numbers (the
`trace_hash` column proves it). The client alone writes the cache: one JSON file per
finished point, named by the point's key (a hash of its canonical scenario TOML, seed and
engine fingerprint), written as soon as the point returns. A sweep that is interrupted,
killed or extended runs only the points whose files are missing.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Executor, Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import pandas as pd

from asymlink.report import plural
from asymlink.sweep.spec import Metric, Point, SweepSpec

CACHE_DIR = "cache"
RESULTS_FILE = "results.parquet"
AGGREGATE_FILE = "aggregate.parquet"
SWEEP_FILE = "sweep.json"
SPEC_COPY = "spec.toml"
SUMMARY_FILE = "summary.md"
FIGURES_DIR = "figures"


class SweepError(RuntimeError):
    """The sweep could not run (e.g. the workers' engine differs from the client's)."""


@lru_cache(maxsize=1)
def engine_fingerprint() -> str:
    """`VERSION+HASH`: the package version and a hash of the native module's file, so a
    rebuilt engine never reuses results cached by another build."""
    from asymlink import _native

    h = hashlib.sha256()
    with open(_native.__file__, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return f"{_native.__version__}+{h.hexdigest()[:12]}"


# --- one point (runs on a worker) ---------------------------------------------------------


@dataclass(frozen=True)
class PointTask:
    """What a worker needs to run one point: plain data, cheap to pickle."""

    key: str
    toml: str
    origin: str
    metrics: tuple[Metric, ...]
    keep_dir: str | None = None


def run_point(task: PointTask) -> dict[str, Any]:
    """Run one point and extract its metrics. Never raises: a failure is returned as
    `error` (the traceback's last line), so one bad point does not stop a sweep."""
    from asymlink.results import Results
    from asymlink.scenario import Scenario
    from asymlink.sweep.stats import extract

    record: dict[str, Any] = {"key": task.key, "engine": engine_fingerprint()}
    try:
        sim = Scenario.from_toml(task.toml, origin=task.origin).simulation()
        sim.run()
        native = sim.results()
        meta = native["meta"]
        needed = {m.table for m in task.metrics} if not task.keep_dir else set(native["tables"])
        tables = {name: pd.DataFrame(columns) for name, columns in native["tables"].items()
                  if name in needed}
        record.update(
            trace_hash=f"{int(meta['trace_hash']):016x}",
            events=int(meta["events"]),
            packet_hops=int(meta["packet_hops"]),
            sim_wall_s=float(meta["wall_s"]),
            metrics={m.fingerprint: _json_number(extract(m, tables, meta))
                     for m in task.metrics},
            error="",
        )
        if task.keep_dir:
            Results(dict(meta), tables).to_parquet(Path(task.keep_dir) / task.key)
    except Exception as e:  # noqa: BLE001 - reported per point
        last = traceback.format_exception_only(type(e), e)[-1].strip()
        record.update(error=last or type(e).__name__)
    return record


def _json_number(x: float) -> float | None:
    return None if math.isnan(x) else x


# --- the cache -------------------------------------------------------------------------------


class Cache:
    """One JSON file per finished point: `<dir>/<key>.json` with the run's facts and its
    metric values by metric fingerprint (so renaming a metric keeps them, and adding one
    reruns the points, which then must reproduce their trace hash)."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def path(self, key: str) -> Path:
        """The file of point `key`."""
        return self.directory / f"{key}.json"

    def load(self, key: str) -> dict[str, Any] | None:
        """The record of `key`, or None (absent or unreadable: a half-written file of a
        killed sweep is ignored and the point runs again)."""
        try:
            record = json.loads(self.path(key).read_text())
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) and record.get("key") == key else None

    def store(self, record: Mapping[str, Any]) -> None:
        """Write `record` atomically (a temporary file renamed into place)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        final = self.path(record["key"])
        tmp = final.with_suffix(f".tmp{os.getpid()}")
        tmp.write_text(json.dumps(record, sort_keys=True) + "\n")
        os.replace(tmp, final)


# --- executors ------------------------------------------------------------------------------


@contextlib.contextmanager
def make_executor(scheduler: str | None, workers: int | None) -> Iterator[tuple[Executor, str]]:
    """A `ProcessPoolExecutor` with `workers` processes (default: one per core), or the
    executor of a Dask client connected to `scheduler` (an address such as
    `tcp://10.0.0.5:8786`). Yields (executor, description)."""
    if scheduler is None:
        n = workers or os.cpu_count() or 1
        with ProcessPoolExecutor(n) as ex:
            yield ex, f"{n} local process{'es' if n != 1 else ''}"
        return
    try:
        from distributed import Client
    except ImportError:
        raise SweepError("--scheduler needs Dask distributed: pip install 'asymlink[cluster]'"
                         ) from None
    try:
        # the connect timeout is dask's distributed.comm.timeouts.connect
        client = Client(scheduler)  # type: ignore[no-untyped-call]
    except (OSError, TimeoutError) as e:
        raise SweepError(f"cannot reach the Dask scheduler at {scheduler}: {e}") from None
    try:
        try:
            client.wait_for_workers(1, timeout=60)
        except TimeoutError:
            raise SweepError(f"the Dask scheduler at {scheduler} has no workers") from None
        n = len(client.scheduler_info(n_workers=-1)["workers"])
        executor = client.get_executor()  # type: ignore[no-untyped-call]
        yield executor, f"Dask at {scheduler} ({n} worker{'s' if n != 1 else ''})"
    finally:
        client.close()  # type: ignore[no-untyped-call]


# --- the sweep ----------------------------------------------------------------------------------


@dataclass
class SweepResult:
    """What `run_sweep` produced."""

    spec: SweepSpec
    out_dir: Path
    data: pd.DataFrame
    aggregate: pd.DataFrame
    points: int
    cached: int
    ran: int
    failed: int
    wall_s: float
    executor: str
    figures: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def configurations(self) -> int:
        """Number of configurations (points / seeds)."""
        return len(self.spec.configurations)


ProgressFn = Callable[[int, int, int], None]   # (done, cached, failed)


def run_sweep(
    spec: SweepSpec,
    out_dir: str | os.PathLike[str],
    *,
    executor: Executor | None = None,
    scheduler: str | None = None,
    workers: int | None = None,
    fresh: bool = False,
    keep_runs: bool = False,
    cache_dir: str | os.PathLike[str] | None = None,
    progress: bool = False,
    plan: Sequence[Point] | None = None,
) -> SweepResult:
    """Run every point of `spec` not already cached, then write into `out_dir`:
    `results.parquet` (one row per point: parameters, seed, metrics, trace_hash, ...),
    `aggregate.parquet` (one row per configuration: mean and confidence interval of each
    metric across seeds), `figures/`, `summary.md`, `sweep.json` and a copy of the spec.

    `executor` (any `concurrent.futures.Executor`) wins over `scheduler` (a Dask address)
    and `workers` (local processes). `fresh` ignores the cache (and rewrites it);
    `keep_runs` also keeps each point's tables in `out_dir/runs/<key>/`; `cache_dir`
    defaults to `out_dir/cache`. `plan` is `spec.plan(engine_fingerprint())` when the
    caller already has it. Raises `SweepSpecError` before anything runs for a bad spec,
    `SweepError` for an unusable executor or a worker with another engine."""
    start = time.perf_counter()
    out = Path(out_dir)
    engine = engine_fingerprint()
    points = list(plan) if plan is not None else spec.plan(engine)
    cache = Cache(Path(cache_dir) if cache_dir is not None else out / CACHE_DIR)
    keep_dir = str((out / "runs").resolve()) if keep_runs else None
    fps = [m.fingerprint for m in spec.metrics]

    records: dict[str, dict[str, Any]] = {}
    todo: list[Point] = []
    for p in points:
        rec = None if fresh else cache.load(p.key)
        if rec is not None and not rec.get("error") and all(fp in rec["metrics"] for fp in fps):
            records[p.key] = rec
        else:
            todo.append(p)
    cached = len(records)
    failed = 0
    description = "cache only"
    out.mkdir(parents=True, exist_ok=True)
    (out / SPEC_COPY).write_text(spec.text)

    if todo:
        ctx = (contextlib.nullcontext((executor, type(executor).__name__))
               if executor is not None else make_executor(scheduler, workers))
        with ctx as (ex, description):
            futures: dict[Future[dict[str, Any]], Point] = {}
            try:
                # Submit everything before the progress bar starts its thread: a local
                # pool forks its workers at the first submit.
                for p in todo:
                    task = PointTask(p.key, p.scenario.to_toml(), p.scenario.origin,
                                     spec.metrics, keep_dir)
                    futures[ex.submit(run_point, task)] = p
                with _progress_bar(progress, spec.name, len(points), cached) as advance:
                    for fut in as_completed(futures):
                        rec = fut.result()
                        if rec["engine"] != engine:
                            raise SweepError(
                                f"a worker runs engine {rec['engine']}, this client "
                                f"{engine}: install the same asymlink build everywhere")
                        p = futures[fut]
                        if rec["error"]:
                            failed += 1
                        else:
                            _merge_cached(cache.load(p.key), rec, p)
                            cache.store(rec)
                        records[p.key] = rec
                        advance(len(records), cached, failed)
            except BaseException:
                for f in futures:
                    f.cancel()
                raise

    data = build_dataset(spec, points, records)
    from asymlink.sweep.stats import aggregate

    agg = aggregate(data, [p.key for p in spec.parameters], [m.name for m in spec.metrics],
                    spec.ci)
    data.to_parquet(out / RESULTS_FILE, index=False)
    agg.to_parquet(out / AGGREGATE_FILE, index=False)
    warnings = _empty_metric_warnings(spec, data)
    from asymlink.sweep.plots import sweep_figures

    figures = sweep_figures(spec, data, out / FIGURES_DIR)
    result = SweepResult(spec, out, data, agg, len(points), cached, len(todo), failed,
                         time.perf_counter() - start, description, figures, warnings)
    (out / SUMMARY_FILE).write_text(summary_markdown(result))
    (out / SWEEP_FILE).write_text(json.dumps(_sweep_json(result, engine), indent=2) + "\n")
    return result


def _merge_cached(old: dict[str, Any] | None, new: dict[str, Any], point: Point) -> None:
    """Keep the metric values an older record of the same point has (computed by other
    metric definitions), after checking the rerun reproduced its trace."""
    if old is None or old.get("error"):
        return
    if old.get("trace_hash") != new["trace_hash"]:
        raise SweepError(f"point {point.index} ({point.describe()}) did not reproduce its "
                         f"cached trace hash ({old.get('trace_hash')} then {new['trace_hash']})")
    new["metrics"] = {**old.get("metrics", {}), **new["metrics"]}


def build_dataset(spec: SweepSpec, points: Sequence[Point],
                  records: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    """One row per point, in point order: `point`, `config`, the parameters, `seed`,
    the metrics, `trace_hash`, `events`, `packet_hops`, `sim_wall_s`, `key`, `error`."""
    rows = []
    for p in points:
        rec = records[p.key]
        row: dict[str, Any] = {"point": p.index, "config": p.config, **p.params, "seed": p.seed}
        values = rec.get("metrics", {})
        for m in spec.metrics:
            v = values.get(m.fingerprint)
            row[m.name] = math.nan if v is None else float(v)
        row.update(trace_hash=rec.get("trace_hash", ""), events=rec.get("events", -1),
                   packet_hops=rec.get("packet_hops", -1),
                   sim_wall_s=rec.get("sim_wall_s", math.nan), key=p.key,
                   error=rec.get("error", ""))
        rows.append(row)
    columns = ["point", "config", *(p.key for p in spec.parameters), "seed",
               *(m.name for m in spec.metrics), "trace_hash", "events", "packet_hops",
               "sim_wall_s", "key", "error"]
    df = pd.DataFrame(rows, columns=columns)
    for param in spec.parameters:
        if param.numeric:
            df[param.key] = pd.to_numeric(df[param.key])
        else:
            df[param.key] = df[param.key].map(str)
    for col in ("point", "config", "seed", "events", "packet_hops"):
        df[col] = df[col].astype("uint64" if col == "seed" else "int64")
    for m in spec.metrics:
        df[m.name] = df[m.name].astype(float)
    return df


def _empty_metric_warnings(spec: SweepSpec, data: pd.DataFrame) -> list[str]:
    ok = data[data["error"] == ""]
    return [f"metric {m.name} has no value in any point: check its table, column and where"
            for m in spec.metrics if len(ok) and ok[m.name].isna().all()]


def _sweep_json(result: SweepResult, engine: str) -> dict[str, Any]:
    spec = result.spec
    return {
        "name": spec.name,
        "description": spec.description,
        "spec": spec.origin,
        "base": spec.base_label,
        "engine": engine,
        "points": result.points,
        "configurations": result.configurations,
        "seeds": list(spec.seeds),
        "parameters": [{"key": p.key, "source": p.source, "unit": p.unit}
                       for p in spec.parameters],
        "metrics": [{"name": m.name, "table": m.table, "column": m.column, "agg": m.agg,
                     "where": {k: list(v) for k, v in m.where}, "t_min": m.t_min,
                     "t_max": m.t_max, "scale": m.scale} for m in spec.metrics],
        "ci": spec.ci,
        "cached": result.cached,
        "ran": result.ran,
        "failed": result.failed,
        "wall_s": round(result.wall_s, 3),
        "executor": result.executor,
        "figures": [str(f.relative_to(result.out_dir)) for f in result.figures],
        "warnings": result.warnings,
    }


def summary_markdown(result: SweepResult) -> str:
    """`summary.md`: facts, then one row per configuration with each metric's mean and
    confidence interval across seeds (the first 200 configurations)."""
    from asymlink.report import TextTable, fmt_number

    spec = result.spec
    limit = 200
    params = [p.key for p in spec.parameters]
    rows = []
    agg = result.aggregate.head(limit)
    for i in range(len(agg)):
        r = {c: agg[c].iloc[i] for c in agg.columns}
        cells = [_cell(r[p], spec.parameters[j].unit) for j, p in enumerate(params)]
        cells.append(str(r["seeds"]))
        for m in spec.metrics:
            mean, lo, hi = r[f"{m.name}_mean"], r[f"{m.name}_ci_low"], r[f"{m.name}_ci_high"]
            ci = "" if math.isnan(hi) else f" ± {fmt_number((hi - lo) / 2, digits=2)}"
            cells.append(f"{fmt_number(mean, digits=4)}{ci}")
        rows.append(cells)
    table = TextTable(f"Mean across seeds (± half-width of the {spec.ci:.0%} t-interval)",
                      [*params, "seeds", *(m.name for m in spec.metrics)], rows)
    lines = [
        f"# Sweep: {spec.name}",
        "",
        *([spec.description, ""] if spec.description else []),
        f"- base scenario: {spec.base_label}",
        f"- points: {result.points} ({plural(result.configurations, 'configuration')} × "
        f"{plural(len(spec.seeds), 'seed')})",
        f"- cached: {result.cached}, run: {result.ran}, failed: {result.failed}",
        f"- executor: {result.executor}; wall clock {result.wall_s:.1f} s",
        f"- data: `{RESULTS_FILE}` (one row per point), `{AGGREGATE_FILE}` (one row per "
        "configuration)",
        "",
        table.markdown(),
    ]
    if len(result.aggregate) > limit:
        lines += [f"({len(result.aggregate) - limit} more configurations in "
                  f"`{AGGREGATE_FILE}`)", ""]
    if result.failed:
        failed = result.data[result.data["error"] != ""]
        lines += ["## Failed points", ""]
        lines += [f"- point {r.point} (seed {r.seed}): {r.error}" for r in failed.itertuples()]
        lines.append("")
    if result.warnings:
        lines += ["## Warnings", "", *(f"- {w}" for w in result.warnings), ""]
    if result.figures:
        lines += ["## Figures", ""]
        lines += [f"![{f.stem}]({f.relative_to(result.out_dir)})" for f in result.figures]
        lines.append("")
    return "\n".join(lines)


def _cell(value: Any, unit: str) -> str:
    text = f"{value:g}" if isinstance(value, float) else str(value)
    return f"{text} {unit}" if unit else text


@contextlib.contextmanager
def _progress_bar(enabled: bool, name: str, total: int,
                  cached: int) -> Iterator[ProgressFn]:
    if not enabled:
        yield lambda done, c, f: None
        return
    from rich.console import Console
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
        TimeRemainingColumn,
    )

    columns = (
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("points ({task.fields[cached]} cached, {task.fields[failed]} failed)"),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    )
    with Progress(*columns, console=Console(stderr=True)) as bar:
        task = bar.add_task(name, total=total, completed=cached, cached=cached, failed=0)
        yield lambda done, c, f: bar.update(task, completed=done, cached=c, failed=f)
