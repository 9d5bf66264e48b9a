"""The reproduction framework: catalog entries, their paper data, checks and reports.

An entry is a directory of checked-in scenario files (`scenarios/<id>/*.toml`, each
runnable on its own with `asymlink run`) plus `paper.toml` beside them, and a Python
`run(out_dir, quick) -> metrics` that runs the scenarios and computes metrics from the
simulation's output only. `reproduce` writes `metrics.json`, the entry's figures and
`summary.md`, where every match or mismatch is computed from `paper.toml`:

```toml
notes = "Free text for summary.md: model differences, readings chosen, metric keys."

[quick]                      # overrides applied under --quick: to every scenario,
overrides = { "monitor.interval" = "1s" }
[quick.scenarios]            # and to single scenarios
long = { duration = "20s" }

[[fixed]]                    # a parameter the paper leaves open, fixed before any run
key = "links.access.to_a.queue.limit"   # a scenario key; array elements by name
reason = "the paper does not give the modem's uplink buffer"
scenarios = ["off", "on"]    # optional: default all scenarios

[[expect]]                   # an expected ordering: metric RELATION (than | value)
metric = "acked_bytes_at_10s.30"
relation = ">"               # one of > >= < <=
than = "acked_bytes_at_10s.1"

[[paper]]                    # a value the paper reports
metric = "throughput_kbps.on"
value = 18.91
tolerance = 0.2              # relative (0.2 = ±20 %), or tolerance_abs = 2.0
unit = "kbit/s"              # optional
```

Metric names are dotted paths into the metrics dict (`a.b.30` is `m["a"]["b"]["30"]`) or,
when a key contains a dot, a list of keys (`["delta", "0.5"]`).
"""

from __future__ import annotations

import json
import math
import numbers
import operator
import os
import re
import time
import tomllib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any, Literal, TypeAlias

from asymlink.report import TextTable, fmt_number
from asymlink.results import Results
from asymlink.runner import run as run_scenario_file
from asymlink.scenario import Scenario
from asymlink.validate import ConfigError, ScenarioError, number, only

MetricValue: TypeAlias = "int | float | dict[str, MetricValue]"
Metrics: TypeAlias = dict[str, MetricValue]
MetricPath: TypeAlias = tuple[str, ...]

PAPER_FILE = "paper.toml"
RELATIONS: dict[str, Callable[[float, float], bool]] = {
    ">": operator.gt,
    ">=": operator.ge,
    "<": operator.lt,
    "<=": operator.le,
}


#: `paper.toml` is malformed; the message names the file and the item.
PaperDataError = ConfigError


# --- paper data -------------------------------------------------------------------------


@dataclass(frozen=True)
class Expectation:
    """`metric relation than` (another metric) or `metric relation value`."""

    metric: MetricPath
    relation: str
    than: MetricPath | None = None
    value: float | None = None


@dataclass(frozen=True)
class PaperValue:
    """A value the paper reports, matched within a relative or absolute tolerance."""

    metric: MetricPath
    value: float
    tolerance: float
    relative: bool
    unit: str = ""


@dataclass(frozen=True)
class FixedParameter:
    """A scenario key the paper leaves open, with the reason for its value; `scenarios`
    None means every scenario of the entry."""

    key: str
    reason: str
    scenarios: tuple[str, ...] | None = None


@dataclass(frozen=True)
class PaperData:
    """The contents of an entry's `paper.toml`."""

    expectations: tuple[Expectation, ...] = ()
    paper_values: tuple[PaperValue, ...] = ()
    fixed: tuple[FixedParameter, ...] = ()
    quick_overrides: Mapping[str, Any] = field(default_factory=dict)
    quick_scenario_overrides: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    notes: str = ""

    def overrides(self, scenario: str, quick: bool) -> dict[str, Any]:
        """The overrides for `scenario`: none for a full run."""
        if not quick:
            return {}
        return {**self.quick_overrides, **self.quick_scenario_overrides.get(scenario, {})}

    @classmethod
    def load(cls, source: Traversable | Path) -> PaperData:
        """Read and check a `paper.toml`. Raises `PaperDataError`."""
        try:
            doc = tomllib.loads(source.read_text(encoding="utf-8"))
        except tomllib.TOMLDecodeError as e:
            raise PaperDataError(str(source), f"{e}") from None
        return cls.parse(doc, str(source))

    @classmethod
    def parse(cls, doc: Mapping[str, Any], origin: str = "<paper data>") -> PaperData:
        """Check and convert a parsed `paper.toml`. Raises `PaperDataError`."""
        only(doc, {"notes", "quick", "fixed", "expect", "paper"}, origin)
        quick = doc.get("quick", {})
        only(quick, {"overrides", "scenarios"}, f"{origin}: quick")
        return cls(
            expectations=tuple(
                _expectation(item, f"{origin}: expect[{i}]")
                for i, item in enumerate(doc.get("expect", []))
            ),
            paper_values=tuple(
                _paper_value(item, f"{origin}: paper[{i}]")
                for i, item in enumerate(doc.get("paper", []))
            ),
            fixed=tuple(
                _fixed(item, f"{origin}: fixed[{i}]") for i, item in enumerate(doc.get("fixed", []))
            ),
            quick_overrides=dict(quick.get("overrides", {})),
            quick_scenario_overrides={k: dict(v) for k, v in quick.get("scenarios", {}).items()},
            notes=str(doc.get("notes", "")).strip(),
        )


def _metric_path(value: Any, where: str) -> MetricPath:
    if isinstance(value, str) and value:
        return tuple(value.split("."))
    if isinstance(value, list) and value and all(isinstance(k, str) for k in value):
        return tuple(value)
    raise PaperDataError(where, f"a metric is a dotted string or a list of keys, got {value!r}")


def _number(item: Mapping[str, Any], key: str, where: str) -> float:
    return number(item.get(key), f"{where}.{key}")


def _expectation(item: Mapping[str, Any], where: str) -> Expectation:
    only(item, {"metric", "relation", "than", "value"}, where)
    relation = item.get("relation")
    if relation not in RELATIONS:
        raise PaperDataError(
            where, f"relation must be one of {' '.join(RELATIONS)}, got {relation!r}"
        )
    if ("than" in item) == ("value" in item):
        raise PaperDataError(where, "give exactly one of 'than' (a metric) and 'value'")
    metric = _metric_path(item.get("metric"), where)
    if "than" in item:
        return Expectation(metric, relation, than=_metric_path(item["than"], where))
    return Expectation(metric, relation, value=_number(item, "value", where))


def _paper_value(item: Mapping[str, Any], where: str) -> PaperValue:
    only(item, {"metric", "value", "tolerance", "tolerance_abs", "unit"}, where)
    if ("tolerance" in item) == ("tolerance_abs" in item):
        raise PaperDataError(where, "give exactly one of 'tolerance' and 'tolerance_abs'")
    relative = "tolerance" in item
    tolerance = _number(item, "tolerance" if relative else "tolerance_abs", where)
    if tolerance < 0:
        raise PaperDataError(where, f"the tolerance must be >= 0, got {tolerance}")
    return PaperValue(
        metric=_metric_path(item.get("metric"), where),
        value=_number(item, "value", where),
        tolerance=tolerance,
        relative=relative,
        unit=str(item.get("unit", "")),
    )


def _fixed(item: Mapping[str, Any], where: str) -> FixedParameter:
    only(item, {"key", "reason", "scenarios"}, where)
    key, reason = item.get("key"), item.get("reason")
    if not (isinstance(key, str) and key and isinstance(reason, str) and reason.strip()):
        raise PaperDataError(where, "'key' and a non-empty 'reason' are required")
    scenarios = item.get("scenarios")
    if scenarios is not None and not (
        isinstance(scenarios, list) and scenarios and all(isinstance(n, str) for n in scenarios)
    ):
        raise PaperDataError(where, "'scenarios' must be a non-empty list of scenario names")
    return FixedParameter(key, reason.strip(), None if scenarios is None else tuple(scenarios))


# --- metrics and checks -----------------------------------------------------------------


def plain_metrics(metrics: Mapping[Any, Any], _path: MetricPath = ()) -> Metrics:
    """`metrics` as plain JSON: string keys, finite int/float leaves (numpy scalars
    converted). Raises `TypeError`/`ValueError` naming the offending path."""
    out: Metrics = {}
    for key, value in metrics.items():
        where = ".".join((*_path, str(key)))
        if not isinstance(key, str):
            raise TypeError(f"metrics: key {where!r} must be a string, not {type(key).__name__}")
        if isinstance(value, Mapping):
            out[key] = plain_metrics(value, (*_path, key))
        elif isinstance(value, numbers.Integral) and not isinstance(value, bool):
            out[key] = int(value)
        elif isinstance(value, numbers.Real) and not isinstance(value, bool):
            if not math.isfinite(float(value)):
                raise ValueError(f"metrics: {where} is {value}, not a finite number")
            out[key] = float(value)
        else:
            raise TypeError(f"metrics: {where} must be a number or a dict, got {value!r}")
    return out


def lookup(metrics: Metrics, path: MetricPath) -> float | None:
    """The number at `path`, or None when absent (or not a number)."""
    node: MetricValue = metrics
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return None if isinstance(node, dict) else float(node)


Status = Literal["yes", "NO", "missing"]


@dataclass(frozen=True)
class Check:
    """One row of the results table: `metric | paper | measured | match?`."""

    kind: Literal["expect", "paper"]
    metric: str
    paper: str
    measured: str
    status: Status

    @property
    def ok(self) -> bool:
        """Whether the measured data matches."""
        return self.status == "yes"


def _label(path: MetricPath) -> str:
    return ".".join(path) if all("." not in k for k in path) else repr(list(path))


# Units read from a metric's name (its first key): suffix -> (unit, scale). Names with
# `bytes` or `_bps` get an SI prefix chosen by the value.
_UNIT_SUFFIXES = (("_mbps", "Mbit/s", 1.0), ("_kbps", "kbit/s", 1.0), ("_kBps", "kB/s", 1.0),
                  ("_ms", "ms", 1.0), ("_s", "s", 1.0))
_SI = ((1e9, "G"), (1e6, "M"), (1e3, "k"))


def fmt_metric(x: float | None, path: MetricPath, digits: int = 4) -> str:
    """A metric's value with the unit its name states (`acked_bytes_at_10s` → "9.177 MB",
    `throughput_kbps` → "18.91 kbit/s", `mean_file_throughput_bps` → "41.2 kbit/s");
    a plain number when the name states none (indices, ratios, counts)."""
    if x is None or math.isnan(x) or not path:
        return fmt_number(x, digits=digits)
    name = re.sub(r"_at_[0-9.]+m?s$", "", path[0])
    if "bytes" in name or name.endswith("_bps"):
        bits = name.endswith("_bps")
        mult, prefix = next(((m, p) for m, p in _SI if abs(x) >= m), (1.0, ""))
        unit = f"{prefix}bit/s" if bits else f"{prefix.upper()}B"
        return fmt_number(x / mult, unit, digits=digits)
    for suffix, unit, scale in _UNIT_SUFFIXES:
        if name.endswith(suffix):
            return fmt_number(x, unit, scale, digits=digits)
    return fmt_number(x, digits=digits)


def draw_paper_values(ax: Any, paper: PaperData, metric: str, scale: float = 1.0,
                      unit: str | None = None) -> int:
    """A dashed horizontal reference line, labelled "paper: <arm> <value>", for each value
    the paper reports under `metric` (a dotted prefix of its path: `rtt_ms` or
    `forward_drops.single`), × `scale` to match the axis; with `unit` (the axis's) the label
    gives the scaled value in it. Returns how many were drawn."""
    prefix = tuple(metric.split("."))
    drawn = 0
    for p in paper.paper_values:
        if p.metric[: len(prefix)] != prefix:
            continue
        y = p.value * scale
        ax.axhline(y, color="black", linestyle="--", linewidth=0.8, alpha=0.7)
        arm = ".".join(p.metric[len(prefix):])
        shown = f"{y:.4g} {unit}" if unit else fmt_number(p.value, p.unit, digits=4)
        ax.annotate(f"paper: {arm + ' ' if arm else ''}{shown}",
                    (0.0, y), xycoords=("axes fraction", "data"), xytext=(4, 2),
                    textcoords="offset points", fontsize="small")
        drawn += 1
    return drawn


def draw_paper_marks(ax: Any, paper: PaperData, metric: str, positions: Mapping[str, float],
                     scale: float = 1.0) -> int:
    """On a bar chart: a black bar-wide mark at the paper's value on each bar whose arm
    the paper reports (`metric.<arm>`; `positions` maps an arm to its bar's x), × `scale`.
    Returns how many were drawn; the first is labelled "paper" for the legend."""
    marks = [(positions[p.metric[1]], p.value * scale) for p in paper.paper_values
             if len(p.metric) == 2 and p.metric[0] == metric and p.metric[1] in positions]
    if marks:
        ax.plot(*zip(*marks, strict=True), linestyle="none", marker="_", markersize=14,
                markeredgewidth=2, color="black", label="paper")
    return len(marks)


def check_expectation(e: Expectation, metrics: Metrics) -> Check:
    """Evaluate an expected ordering on the measured metrics. The measured column gives
    both sides with the unit the metric's name states."""
    a = lookup(metrics, e.metric)
    if e.than is not None:
        b, reference = lookup(metrics, e.than), _label(e.than)
    else:
        b, reference = e.value, fmt_metric(e.value, e.metric, digits=6)
    if a is None or b is None:
        status: Status = "missing"
        measured = f"{fmt_metric(a, e.metric)} vs {fmt_metric(b, e.metric)}"
    else:
        status = "yes" if RELATIONS[e.relation](a, b) else "NO"
        measured = f"{fmt_metric(a, e.metric)} vs {fmt_metric(b, e.metric)}"
    return Check("expect", _label(e.metric), f"{e.relation} {reference}", measured, status)


def check_paper_value(p: PaperValue, metrics: Metrics) -> Check:
    """Compare a measured metric with the paper's value within its tolerance."""
    measured = lookup(metrics, p.metric)
    allowed = p.tolerance * abs(p.value) if p.relative else p.tolerance
    tol = f"{p.tolerance * 100:g} %" if p.relative else fmt_number(p.tolerance, p.unit, digits=4)
    paper = f"{fmt_number(p.value, p.unit, digits=6)} ± {tol}"
    if measured is None:
        return Check("paper", _label(p.metric), paper, "n/a", "missing")
    status: Status = "yes" if abs(measured - p.value) <= allowed else "NO"
    return Check("paper", _label(p.metric), paper, fmt_number(measured, p.unit, digits=4), status)


def evaluate(paper: PaperData, metrics: Metrics) -> list[Check]:
    """Every check of `paper` against `metrics`: expectations first, then paper values."""
    return [check_expectation(e, metrics) for e in paper.expectations] + [
        check_paper_value(p, metrics) for p in paper.paper_values
    ]


# --- entries and the registry -----------------------------------------------------------

RunFn: TypeAlias = Callable[[Path, bool], Mapping[str, Any]]
FiguresFn: TypeAlias = Callable[[Path, Metrics], Sequence[Path]]

_ID = re.compile(r"_?[a-z0-9]+(-[a-z0-9]+)*")


@dataclass(frozen=True)
class Entry:
    """A catalog entry. `run(out_dir, quick)` returns the metrics; `figures(out_dir,
    metrics)` (optional) writes PNGs and returns their paths. Internal entries (ids
    starting with `_`) are hidden from listings."""

    id: str
    paper: str
    title: str
    run: RunFn
    figures: FiguresFn | None = None

    @property
    def internal(self) -> bool:
        """Whether the entry is internal (not part of the catalog)."""
        return self.id.startswith("_")

    @property
    def scenario_dir(self) -> Traversable:
        """The packaged directory of the entry's scenario files and `paper.toml`."""
        return files("asymlink.repro").joinpath("scenarios", self.id)

    def scenario_names(self) -> list[str]:
        """The entry's scenario files, without `.toml`, sorted."""
        return sorted(
            f.name.removesuffix(".toml")
            for f in self.scenario_dir.iterdir()
            if f.name.endswith(".toml") and f.name != PAPER_FILE
        )

    @cached_property
    def paper_data(self) -> PaperData:
        """The entry's `paper.toml` (read once)."""
        return PaperData.load(self.scenario_dir.joinpath(PAPER_FILE))

    def scenario(self, name: str, quick: bool) -> Scenario:
        """A scenario file of the entry, with its `[quick]` overrides when `quick`."""
        f = self.scenario_dir.joinpath(f"{name}.toml")
        scenario = Scenario.from_toml(f.read_text(encoding="utf-8"), origin=f"{self.id}/{f.name}")
        overrides = self.paper_data.overrides(name, quick)
        return scenario.with_overrides(overrides) if overrides else scenario

    def check(self) -> None:
        """Check the entry's data without running it: `paper.toml` parses, it names only
        existing scenarios, every scenario (full and quick) passes the engine's
        validation, and every fixed parameter exists where it is listed (named by key,
        see `fixed_value`). Raises `PaperDataError` or `ScenarioError`."""
        paper, names = self.paper_data, self.scenario_names()
        if not names:
            raise PaperDataError(self.id, f"no scenario files in {self.scenario_dir}")
        listed = set(paper.quick_scenario_overrides).union(
            *(p.scenarios or () for p in paper.fixed)
        )
        unknown = sorted(listed - set(names))
        if unknown:
            raise PaperDataError(self.id, f"{PAPER_FILE} names unknown scenarios: {unknown}")
        for quick in (False, True):
            for name in names:
                self.scenario(name, quick).validate()
        for i, p in enumerate(paper.fixed):
            for name in p.scenarios or names:
                self.fixed_value(i, name, self.scenario(name, quick=False))

    def fixed_value(self, index: int, name: str, scenario: Scenario) -> Any:
        """The value `scenario` (the entry's scenario `name`) gives the fixed parameter
        `paper.fixed[index]`. Its key must exist there and name the elements of arrays of
        named tables by their name (`links.access.rate`, not `links.1.rate`); otherwise
        `PaperDataError` naming the item of `paper.toml`, the key and the scenario."""
        key = self.paper_data.fixed[index].key
        where = f"{self.id}/{PAPER_FILE}: fixed[{index}].key"
        try:
            value = scenario.get(key)
        except ScenarioError as e:
            raise PaperDataError(
                where, f"{key!r} is not in scenario {name!r}: {e.key}: {e.msg}") from None
        parts = key.split(".")
        node: Any = scenario.data
        for depth, part in enumerate(parts):
            if isinstance(node, list):
                names = [t.get("name") if isinstance(t, dict) else None for t in node]
                i = names.index(part) if part in names else int(part)
                label = names[i]
                if part.isdigit() and isinstance(label, str):
                    named = ".".join([*parts[:depth], label, *parts[depth + 1:]])
                    raise PaperDataError(
                        where, f"{key!r} addresses {'.'.join(parts[:depth])}[{part}] by "
                        f"position; write it by name: {named!r}")
                node = node[i]
            else:
                node = node[part]
        return value

    def run_scenario(
        self,
        name: str,
        out_dir: Path,
        quick: bool,
        overrides: Mapping[str, Any] | None = None,
        label: str | None = None,
    ) -> Results:
        """Run one scenario (plus `overrides`, e.g. a point of a sensitivity sweep) and
        keep its tables in `out_dir/runs/<label or name>` (Parquet)."""
        scenario = self.scenario(name, quick)
        if overrides:
            scenario = scenario.with_overrides(overrides)
        run_dir = out_dir / "runs" / (label or name)
        results = run_scenario_file(scenario, out_dir=run_dir)
        results.to_parquet(run_dir)
        return results


_REGISTRY: dict[str, Entry] = {}


def register(entry: Entry) -> Entry:
    """Add `entry` to the catalog; returns it. Raises `ValueError` for a bad or taken id."""
    if not _ID.fullmatch(entry.id):
        raise ValueError(f"entry id {entry.id!r} must be lowercase words joined by '-'")
    if entry.id in _REGISTRY:
        raise ValueError(f"entry id {entry.id!r} is already registered")
    _REGISTRY[entry.id] = entry
    return entry


def entries(include_internal: bool = False) -> list[Entry]:
    """The registered entries, sorted by id."""
    return sorted(
        (e for e in _REGISTRY.values() if include_internal or not e.internal), key=lambda e: e.id
    )


def get(entry_id: str) -> Entry:
    """The entry `entry_id`. Raises `KeyError` naming the catalog."""
    if entry_id not in _REGISTRY:
        known = ", ".join(e.id for e in entries()) or "none registered yet"
        raise KeyError(f"no reproduction {entry_id!r} (catalog: {known})")
    return _REGISTRY[entry_id]


# --- running an entry -------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    """What `reproduce` produced."""

    entry: Entry
    out_dir: Path
    quick: bool
    metrics: Metrics
    checks: list[Check]
    figures: list[Path]
    wall_s: float

    @property
    def ok(self) -> bool:
        """Whether every check matches."""
        return all(c.ok for c in self.checks)


def reproduce(entry: Entry | str, out_dir: Path, quick: bool = False) -> Report:
    """Run an entry and write `metrics.json`, its figures and `summary.md` in `out_dir`."""
    entry = get(entry) if isinstance(entry, str) else entry
    paper = entry.paper_data
    out_dir.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    metrics = plain_metrics(entry.run(out_dir, quick))
    figures = list(entry.figures(out_dir, metrics)) if entry.figures else []
    report = Report(entry, out_dir, quick, metrics, evaluate(paper, metrics), figures,
                    time.perf_counter() - start)
    (out_dir / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    (out_dir / "summary.md").write_text(summary_markdown(report, paper))
    return report


def fixed_parameters_table(entry: Entry, paper: PaperData, quick: bool) -> TextTable:
    """The fixed parameters with the values the scenario files give them."""
    names = entry.scenario_names()
    scenarios = {name: entry.scenario(name, quick) for name in names}
    rows = []
    for i, p in enumerate(paper.fixed):
        by_value: dict[str, list[str]] = {}
        for name in p.scenarios or names:
            by_value.setdefault(str(entry.fixed_value(i, name, scenarios[name])), []).append(name)
        for value, where in by_value.items():
            listed = "all" if p.scenarios is None and len(by_value) == 1 else ", ".join(where)
            rows.append([p.key, value, listed, p.reason])
    return TextTable("Parameters fixed before the runs",
                     ["parameter", "value", "scenarios", "reason"], rows)


def summary_markdown(report: Report, paper: PaperData) -> str:
    """`summary.md`: parameters with reasons, `metric | paper | measured | match?`,
    notes, figures and runtime."""
    entry, checks = report.entry, report.checks
    matched = sum(c.ok for c in checks)
    parts = [
        f"# {entry.id}: {entry.title}",
        "",
        f"- paper: {entry.paper}",
        f"- mode: {'quick' if report.quick else 'full'}",
        f"- runtime: {report.wall_s:.1f} s",
        f"- checks matching: {matched} of {len(checks)}",
        f"- scenarios: {', '.join(f'{n}.toml' for n in entry.scenario_names())}",
        "",
        fixed_parameters_table(entry, paper, report.quick).markdown(),
        TextTable("Results", ["metric", "paper", "measured", "match?"],
                  [[c.metric, c.paper, c.measured, c.status] for c in checks]).markdown(),
    ]
    if paper.notes:
        parts += ["## Notes", "", paper.notes, ""]
    if report.figures:
        parts += ["## Figures", ""]
        parts += [f"![{f.stem}]({os.path.relpath(f, report.out_dir)})" for f in report.figures]
        parts.append("")
    return "\n".join(parts)


def check_expectations(entry_id: str, out_dir: Path) -> list[Check]:
    """Run `entry_id` with `quick` and return its ordering checks (for CI tests)."""
    return [c for c in reproduce(entry_id, out_dir, quick=True).checks if c.kind == "expect"]


def assert_expectations(entry_id: str, out_dir: Path) -> None:
    """Like `check_expectations`, raising `AssertionError` listing every failed check."""
    failed = [c for c in check_expectations(entry_id, out_dir) if not c.ok]
    if failed:
        lines = [f"{c.metric} {c.paper}: measured {c.measured} ({c.status})" for c in failed]
        raise AssertionError(f"{entry_id}: ordering expectations failed:\n" + "\n".join(lines))
