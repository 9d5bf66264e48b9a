"""Sweep specs: parsing, checking and expanding them into points.

A spec is a TOML file (format in `docs/sweeps.md`). Everything in it is checked before
anything runs: unknown keys, bad values, scenario paths that do not exist, points whose
scenario the engine refuses, metrics naming tables, columns or rows that are not there,
plots naming parameters or metrics that are not there. Errors are `SweepSpecError`,
whose message starts with the spec file and the item (`sweep.toml: grid."links.9.rate":
...`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
import random as _random
import re
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from difflib import get_close_matches
from functools import cached_property
from os import PathLike
from pathlib import Path
from typing import Any, Literal

import tomli_w

from asymlink.scenario import Scenario, read_text_file
from asymlink.validate import ConfigError, ScenarioError
from asymlink.validate import boolean as _bool
from asymlink.validate import integer as _int
from asymlink.validate import is_number as _is_number
from asymlink.validate import number as _number
from asymlink.validate import only as _only
from asymlink.validate import string as _string
from asymlink.validate import table as _table

#: Tables a metric can read: the run's tables plus `meta` (events, packet_hops, ...).
TABLES = ("flows", "queues", "links", "events", "measurements", "flow_summary",
          "queue_summary", "meta")
#: Columns of `meta` a metric can read.
META_COLUMNS = ("duration_s", "events", "packet_hops")
#: Aggregations of a metric over the rows it selects (plus `pNN`, a percentile).
AGGREGATIONS = ("mean", "median", "sum", "min", "max", "first", "last", "count", "std")
_PERCENTILE = re.compile(r"p(\d{1,2}(\.\d+)?|100)")
#: Dataset columns the sweep itself writes; metric names must differ from them.
RESERVED_COLUMNS = ("point", "config", "seed", "key", "trace_hash", "events", "packet_hops",
                    "sim_wall_s", "error")
_METRIC_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_DEFAULT_DIGITS = 4
_LINE_SUFFIX = re.compile(r" \(line \d+\)$")


#: A sweep spec is invalid; the message names the spec file and the item.
SweepSpecError = ConfigError


# --- the parts of a spec ---------------------------------------------------------------


@dataclass(frozen=True)
class Setting:
    """One value of one swept key: what goes into the scenario and what goes into the
    dataset's column (a number without its unit, a label, or the value itself)."""

    key: str
    value: Any
    column: Any


@dataclass(frozen=True)
class Parameter:
    """A swept scenario key: its settings (grid) or how to draw them (random)."""

    key: str
    source: Literal["grid", "random"]
    unit: str = ""
    settings: tuple[Setting, ...] = ()          # grid: the values, in order
    low: float = 0.0                             # random ranges
    high: float = 0.0
    log: bool = False
    integer: bool = False
    digits: int = _DEFAULT_DIGITS
    choices: tuple[Any, ...] = ()               # random choices

    @property
    def numeric(self) -> bool:
        """Whether the dataset column holds numbers."""
        if self.source == "random" and not self.choices:
            return True
        values = [s.column for s in self.settings] or list(self.choices)
        return all(_is_number(v) for v in values)

    def draw(self, u: float) -> Setting:
        """The setting for a uniform draw `u` in [0, 1) (random parameters)."""
        if self.choices:
            value = self.choices[min(int(u * len(self.choices)), len(self.choices) - 1)]
            return Setting(self.key, value, _column_value(value))
        if self.log:
            x = math.exp(math.log(self.low) + u * (math.log(self.high) - math.log(self.low)))
        else:
            x = self.low + u * (self.high - self.low)
        return _numeric_setting(self.key, x, self.unit, self.integer, self.digits)


@dataclass(frozen=True)
class Metric:
    """A number extracted from each point's results: `agg` over the rows of `table`
    that match `where` (and lie in [t_min, t_max] for time series), of `column`, times
    `scale` (e.g. 1e-6 for bit/s to Mbit/s)."""

    name: str
    table: str
    column: str
    agg: str = "mean"
    where: tuple[tuple[str, tuple[Any, ...]], ...] = ()
    t_min: float | None = None
    t_max: float | None = None
    scale: float = 1.0

    @cached_property
    def fingerprint(self) -> str:
        """A hash of the definition without its name: the cache stores values by it."""
        doc = {"table": self.table, "column": self.column, "agg": self.agg,
               "where": [[k, list(v)] for k, v in self.where],
               "t_min": self.t_min, "t_max": self.t_max, "scale": self.scale}
        return hashlib.sha256(_canonical_json(doc).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class Plot:
    """An aggregate figure: metric `y` (mean across seeds, with a confidence interval)
    against parameter `x`, one line per value of parameter `hue`."""

    y: str
    x: str
    hue: str | None = None
    kind: Literal["line", "scatter"] = "line"
    ci: float = 0.95
    where: tuple[tuple[str, Any], ...] = ()
    file: str = ""
    title: str = ""
    xlabel: str = ""
    ylabel: str = ""
    logx: bool = False
    logy: bool = False


@dataclass(frozen=True)
class Point:
    """One run of the sweep: a configuration (its settings) and a seed."""

    index: int
    config: int
    seed: int
    settings: tuple[Setting, ...]
    scenario: Scenario
    key: str

    @property
    def params(self) -> dict[str, Any]:
        """The dataset's parameter columns of this point."""
        return {s.key: s.column for s in self.settings}

    def describe(self) -> str:
        """`key=value, ..., seed=N` for messages."""
        return ", ".join([*(f"{s.key}={_show(s)}" for s in self.settings),
                          f"seed={self.seed}"])


@dataclass(frozen=True)
class SweepSpec:
    """A parsed, checked sweep spec. `points(engine)` expands it."""

    origin: str
    text: str
    name: str
    description: str
    base: Scenario
    base_label: str
    overrides: Mapping[str, Any]
    seeds: tuple[int, ...]
    dimensions: tuple[tuple[tuple[Setting, ...], ...], ...]   # grid: per dimension, per value
    random_parameters: tuple[Parameter, ...]
    samples: int
    sampling_seed: int
    parameters: tuple[Parameter, ...]                           # every swept key, in order
    metrics: tuple[Metric, ...]
    plots: tuple[Plot, ...]
    ci: float = 0.95

    # --- loading --------------------------------------------------------------------

    @classmethod
    def from_file(cls, path: str | PathLike[str]) -> SweepSpec:
        """Read and check a spec file (not the points: see `plan`). Raises `OSError`
        or `SweepSpecError`."""
        p = Path(path)
        try:
            text = read_text_file(p)
        except ScenarioError as e:
            raise SweepSpecError(e.origin, f"{e.key}: {e.msg}" if e.key else e.msg) from None
        return cls.from_toml(text, origin=str(p), base_dir=p.parent)

    @classmethod
    def from_toml(cls, text: str, origin: str = "<sweep>",
                  base_dir: str | PathLike[str] = ".") -> SweepSpec:
        """Parse and check spec text; a base scenario file is relative to `base_dir`."""
        try:
            doc = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise SweepSpecError(origin, f"{e}") from None
        return _parse(doc, text, origin, Path(base_dir))

    # --- expansion ------------------------------------------------------------------

    @cached_property
    def configurations(self) -> list[tuple[Setting, ...]]:
        """Every configuration: each grid combination crossed with each random sample
        (the grid alone, the samples alone, or one empty configuration)."""
        grid = [tuple(itertools.chain.from_iterable(combo))
                for combo in itertools.product(*self.dimensions)]
        if not self.random_parameters:
            return grid
        rng = _random.Random(self.sampling_seed)
        samples = [tuple(p.draw(rng.random()) for p in self.random_parameters)
                   for _ in range(self.samples)]
        return [g + s for g in grid for s in samples]

    def points(self, engine: str) -> list[Point]:
        """Every point: configurations × seeds, in that order. `engine` (the engine's
        fingerprint) is part of each point's cache key. Raises `SweepSpecError` when a
        setting cannot be applied to the base scenario."""
        points: list[Point] = []
        base = self.base.with_overrides(self.overrides) if self.overrides else self.base
        for c, settings in enumerate(self.configurations):
            try:
                configured = base.with_overrides({s.key: s.value for s in settings})
            except ScenarioError as e:
                where = ", ".join(f"{s.key}={_show(s)}" for s in settings)
                raise SweepSpecError(self.origin, f"configuration {c} ({where}): {e}") from None
            for seed in self.seeds:
                scenario = _point_scenario(configured, seed, f"{self.origin}#{len(points)}")
                points.append(Point(len(points), c, seed, settings, scenario,
                                    point_key(scenario, seed, engine)))
        return points

    def check_points(self, points: Sequence[Point], limit: int = 5) -> None:
        """Have the engine validate every point's scenario; raises `SweepSpecError`
        listing each distinct refusal (up to `limit`) with how many points it hit and an
        example point."""
        failures: dict[str, list[Point]] = {}
        swept = {p.key for p in self.parameters}
        for p in points:
            try:
                p.scenario.validate()
            except ScenarioError as e:
                msg = _LINE_SUFFIX.sub("", e.msg)   # lines of generated TOML mean nothing
                key = re.sub(r"\[(\d+)\]", r".\1", e.key)
                message = msg if not e.key else f"{e.key}: {msg}"
                if key in swept:
                    message += f' (the swept key "{key}")'
                failures.setdefault(message, []).append(p)
        if failures:
            count = sum(len(v) for v in failures.values())
            lines = [f"{self.origin}: the engine refuses {count} of {len(points)} points:"]
            for message, hit in list(failures.items())[:limit]:
                which = (f"all {len(hit)} points" if len(hit) == len(points) else
                         f"{len(hit)} point{'s' if len(hit) != 1 else ''}, e.g. point "
                         f"{hit[0].index}: {hit[0].describe()}")
                lines.append(f"  {message} [{which}]")
            if len(failures) > limit:
                lines.append(f"  ... and {len(failures) - limit} other errors")
            raise SweepSpecError("", "\n".join(lines))

    def check_metrics(self, probe: Mapping[str, Any]) -> None:
        """Check the metrics against `probe`: a point's results at t = 0 (tables with
        their columns and the flows, queues and links that exist). Raises
        `SweepSpecError`."""
        for i, m in enumerate(self.metrics):
            _check_metric(m, probe, f"{self.origin}: metrics[{i}] ({m.name})")

    def plan(self, engine: str) -> list[Point]:
        """Expand and check everything: points, engine validation of each, metrics
        against the first point. Nothing is run but the first point's set-up."""
        points = self.points(engine)
        self.check_points(points)
        self.check_metrics(probe_tables(points[0].scenario))
        return points


# --- helpers shared with the runner ------------------------------------------------------


def point_key(scenario: Scenario, seed: int, engine: str) -> str:
    """The cache key of a point: a hash of its canonical scenario TOML, seed and engine."""
    h = hashlib.sha256()
    for part in (scenario.to_toml(), str(seed), engine):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()[:24]


def probe_tables(scenario: Scenario) -> dict[str, Any]:
    """The scenario's tables at t = 0 (built, not run): `{table: DataFrame}`."""
    from asymlink.results import Results

    sim = scenario.simulation()
    sim.run_until(0.0)
    results = Results.from_native(sim.results())
    return {name: results.table(name) for name in results.table_names}


def _point_scenario(configured: Scenario, seed: int, origin: str) -> Scenario:
    data = configured.data
    data["seed"] = seed
    monitor = data.get("monitor")
    if isinstance(monitor, dict):
        monitor.pop("capture", None)   # sweeps keep tables, not packet captures
    text = tomli_w.dumps(data)
    return Scenario(text, data, origin)


def _show(s: Setting) -> str:
    """A setting as the scenario gets it (the column for tables and arrays)."""
    return repr(s.value) if isinstance(s.value, str | int | float | bool) else str(s.column)


def _canonical_json(doc: Any) -> str:
    import json

    return json.dumps(doc, sort_keys=True, separators=(",", ":"), default=str)


def _column_value(value: Any) -> Any:
    """A value as a dataset cell: scalars as they are, tables and arrays as inline TOML."""
    if isinstance(value, str | int | float | bool):
        return value
    return tomli_w.dumps({"v": value}).removeprefix("v = ").strip()


def format_number(x: float, digits: int) -> str:
    """`x` rounded to `digits` significant digits, in positional notation (no
    exponent), without trailing zeros: 1234.5 → "1234" (4), 0.00012345 → "0.0001235"."""
    d = Decimal(format(x, f".{digits}g"))
    text = format(d, "f")
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return text


def _numeric_setting(key: str, x: float, unit: str, integer: bool, digits: int) -> Setting:
    if integer:
        n = int(math.floor(x + 0.5))
        return Setting(key, f"{n}{unit}" if unit else n, n)
    text = format_number(x, digits)
    number = float(text)
    return Setting(key, f"{text}{unit}" if unit else number, number)


# --- parsing -----------------------------------------------------------------------------

_TOP = {"name", "description", "base", "overrides", "seeds", "grid", "zip", "random",
        "metrics", "plots", "ci"}


def _parse(doc: Mapping[str, Any], text: str, origin: str, base_dir: Path) -> SweepSpec:
    _only(doc, _TOP, origin)
    name = _string(doc.get("name", Path(origin).stem), f"{origin}: name")
    description = _string(doc.get("description", ""), f"{origin}: description")
    if "base" not in doc:
        raise SweepSpecError(
            origin, "base is required: an example name (\"showcase\"), a scenario file "
            "(\"my.toml\", relative to the spec) or { repro = \"ID\", scenario = \"NAME\" }")
    base, base_label = _base(doc["base"], origin, base_dir)
    overrides = _table(doc.get("overrides", {}), f"{origin}: overrides")
    if "seed" in overrides:
        raise SweepSpecError(origin, "overrides.seed: the seeds come from `seeds`")
    if overrides:
        try:
            base.with_overrides(overrides)
        except ScenarioError as e:
            raise SweepSpecError(origin, f"overrides: {e}") from None
    seeds = _seeds(doc.get("seeds", [1]), f"{origin}: seeds")
    ci = _fraction(doc.get("ci", 0.95), f"{origin}: ci")

    dimensions: list[tuple[tuple[Setting, ...], ...]] = []
    parameters: list[Parameter] = []
    for key, item in _table(doc.get("grid", {}), f"{origin}: grid").items():
        p = _grid_parameter(key, item, f'{origin}: grid."{key}"')
        parameters.append(p)
        dimensions.append(tuple((s,) for s in p.settings))
    zips = doc.get("zip", [])
    if not isinstance(zips, list):
        raise SweepSpecError(origin, "zip: expected [[zip]] tables of equally long lists")
    for i, group in enumerate(zips):
        where = f"{origin}: zip[{i}]"
        group = _table(group, where)
        if not group:
            raise SweepSpecError(where, "empty")
        members = [_grid_parameter(k, v, f'{where}."{k}"') for k, v in group.items()]
        lengths = {len(p.settings) for p in members}
        if len(lengths) != 1:
            sizes = ", ".join(f"{p.key}: {len(p.settings)}" for p in members)
            raise SweepSpecError(where, f"the lists must have equal lengths ({sizes})")
        parameters.extend(members)
        dimensions.append(tuple(zip(*(p.settings for p in members), strict=True)))

    random_parameters: list[Parameter] = []
    samples, sampling_seed = 0, 0
    if "random" in doc:
        where = f"{origin}: random"
        rnd = _table(doc["random"], where)
        _only(rnd, {"samples", "seed", "params"}, where)
        samples = _int(rnd.get("samples"), f"{where}.samples", minimum=1)
        sampling_seed = _int(rnd.get("seed", 0), f"{where}.seed", minimum=0)
        params = _table(rnd.get("params", {}), f"{where}.params")
        if not params:
            raise SweepSpecError(f"{where}.params", "name at least one key to sample")
        for key, item in params.items():
            random_parameters.append(_random_parameter(key, item, f'{where}.params."{key}"'))
        parameters.extend(random_parameters)

    seen: dict[str, str] = {}
    configured = base.with_overrides(overrides) if overrides else base
    for p in parameters:
        _check_key(p.key, configured, origin)
        if p.key in seen:
            raise SweepSpecError(origin, f"{p.key} is swept twice")
        if p.key in overrides:
            raise SweepSpecError(origin, f"{p.key} is both swept and in overrides")
        seen[p.key] = p.source

    metrics = _metrics(doc.get("metrics", []), origin, {p.key for p in parameters})
    plots = _plots(doc.get("plots", []), origin, parameters, metrics, ci)
    spec = SweepSpec(
        origin=origin, text=text, name=name, description=description, base=base,
        base_label=base_label, overrides=overrides, seeds=seeds, dimensions=tuple(dimensions),
        random_parameters=tuple(random_parameters), samples=samples,
        sampling_seed=sampling_seed, parameters=tuple(parameters), metrics=metrics,
        plots=plots, ci=ci,
    )
    _check_plot_ambiguity(spec)
    return spec


def _fraction(value: Any, where: str) -> float:
    x = _number(value, where)
    if not 0 < x < 1:
        raise SweepSpecError(where, f"a confidence level is between 0 and 1, got {x}")
    return x


def _unit(value: Any, where: str) -> str:
    unit = _string(value, where)
    if unit and not re.fullmatch(r"[A-Za-z/]+", unit):
        raise SweepSpecError(where, f"a unit is letters such as \"ms\", \"kbit\", \"p\", "
                             f"got {unit!r}")
    return unit


def _base(value: Any, origin: str, base_dir: Path) -> tuple[Scenario, str]:
    from asymlink import examples

    where = f"{origin}: base"
    if isinstance(value, str):
        kind = "file" if value.endswith(".toml") or "/" in value else "example"
        value = {kind: value}
    table = _table(value, where)
    kinds = [k for k in ("file", "example", "repro") if k in table]
    if len(kinds) != 1:
        raise SweepSpecError(where, "give exactly one of file, example, repro")
    try:
        if kinds == ["file"]:
            _only(table, {"file"}, where)
            path = base_dir / _string(table["file"], f"{where}.file")
            if not path.is_file():
                raise SweepSpecError(where, f"{path}: no such scenario file")
            return Scenario.from_file(path), str(path)
        if kinds == ["example"]:
            _only(table, {"example"}, where)
            name = _string(table["example"], f"{where}.example")
            try:
                return examples.load(name), f"example:{name}"
            except KeyError as e:
                raise SweepSpecError(where, f"{e.args[0]}") from None
        _only(table, {"repro", "scenario", "quick"}, where)
        from asymlink import repro

        entry_id = _string(table["repro"], f"{where}.repro")
        try:
            entry = repro.get(entry_id)
        except KeyError as e:
            raise SweepSpecError(where, f"{e.args[0]}") from None
        names = entry.scenario_names()
        scenario = _string(table.get("scenario", ""), f"{where}.scenario")
        if scenario not in names:
            raise SweepSpecError(f"{where}.scenario", f"{entry_id} has no scenario {scenario!r} "
                                 f"(scenarios: {', '.join(names)})")
        quick = _bool(table.get("quick", False), f"{where}.quick")
        label = f"repro:{entry_id}/{scenario}{' (quick)' if quick else ''}"
        return entry.scenario(scenario, quick), label
    except ScenarioError as e:
        raise SweepSpecError(where, f"{e}") from None


def _seeds(value: Any, where: str) -> tuple[int, ...]:
    if isinstance(value, dict):
        _only(value, {"count", "start"}, where)
        count = _int(value.get("count"), f"{where}.count", minimum=1)
        start = _int(value.get("start", 1), f"{where}.start", minimum=0)
        return tuple(range(start, start + count))
    if not isinstance(value, list) or not value:
        raise SweepSpecError(where, "expected a non-empty list of seeds or "
                             "{ count = N, start = 1 }")
    seeds = tuple(_int(s, where, minimum=0) for s in value)
    if len(set(seeds)) != len(seeds):
        raise SweepSpecError(where, f"a seed is listed twice: {list(seeds)}")
    if any(s >= 2**64 for s in seeds):
        raise SweepSpecError(where, "seeds are 64-bit unsigned integers")
    return seeds


def _check_key(key: str, base: Scenario, origin: str) -> None:
    if key == "seed":
        raise SweepSpecError(origin, "seed cannot be swept as a key: use `seeds`")
    if key in RESERVED_COLUMNS:
        raise SweepSpecError(origin, f"{key!r} is a reserved column name")
    parent, _, _ = key.rpartition(".")
    try:
        if parent:
            container = base.get(parent)
            if not isinstance(container, dict | list):
                raise SweepSpecError(origin, f"{key}: {parent} is a {type(container).__name__}"
                                     ", not a table or array")
        base.with_overrides({key: base.get(key) if _exists(base, key) else 0})
    except ScenarioError as e:
        raise SweepSpecError(origin, f"{key}: not in the base scenario (add the table in "
                             f"overrides first): {e}") from None


def _exists(base: Scenario, key: str) -> bool:
    try:
        base.get(key)
    except ScenarioError:
        return False
    return True


_GRID_KEYS = {"values", "unit", "labels", "min", "max", "count", "log", "integer", "digits"}


def _grid_parameter(key: str, item: Any, where: str) -> Parameter:
    if isinstance(item, list):
        if not item:
            raise SweepSpecError(where, "empty list of values")
        return Parameter(key, "grid", settings=tuple(Setting(key, v, _column_value(v))
                                                     for v in item))
    table = _table(item, where)
    _only(table, _GRID_KEYS, where)
    unit = _unit(table.get("unit", ""), f"{where}.unit")
    if "values" in table:
        extra = set(table) - {"values", "unit", "labels"}
        if extra:
            raise SweepSpecError(where, f"{', '.join(sorted(extra))} go with min/max/count, "
                                 "not with values")
        values = table["values"]
        if not isinstance(values, list) or not values:
            raise SweepSpecError(f"{where}.values", "expected a non-empty list")
        labels = table.get("labels")
        if labels is not None and (not isinstance(labels, list) or len(labels) != len(values)
                                   or not all(isinstance(x, str | int | float) for x in labels)):
            raise SweepSpecError(f"{where}.labels", f"expected one label (string or number) "
                                 f"per value ({len(values)})")
        settings = []
        for i, v in enumerate(values):
            if unit:
                if not _is_number(v):
                    raise SweepSpecError(f"{where}.values[{i}]", f"with a unit, values are numbers,"
                                         f" got {v!r}")
                text = format_number(v, 15) if isinstance(v, float) else str(v)
                value: Any = f"{text}{unit}"
                column: Any = v
            else:
                value, column = v, _column_value(v)
            if labels is not None:
                column = labels[i]
            settings.append(Setting(key, value, column))
        return Parameter(key, "grid", unit=unit, settings=tuple(settings))
    for k in ("min", "max", "count"):
        if k not in table:
            raise SweepSpecError(where, "give values = [...], or min, max and count")
    low, high = _number(table["min"], f"{where}.min"), _number(table["max"], f"{where}.max")
    count = _int(table["count"], f"{where}.count", minimum=1)
    log = _bool(table.get("log", False), f"{where}.log")
    integer = _bool(table.get("integer", False), f"{where}.integer")
    digits = _int(table.get("digits", _DEFAULT_DIGITS), f"{where}.digits", minimum=1)
    _check_range(low, high, log, where)
    if count == 1:
        xs = [low]
    elif log:
        xs = [math.exp(math.log(low) + i * (math.log(high) - math.log(low)) / (count - 1))
              for i in range(count)]
    else:
        xs = [low + i * (high - low) / (count - 1) for i in range(count)]
    settings = [_numeric_setting(key, x, unit, integer, digits) for x in xs]
    columns = [s.column for s in settings]
    if len(set(columns)) != len(columns):
        raise SweepSpecError(where, f"rounding makes values equal ({columns}): use fewer "
                             "values, more digits, or integer = false")
    return Parameter(key, "grid", unit=unit, settings=tuple(settings), low=low, high=high,
                     log=log, integer=integer, digits=digits)


def _check_range(low: float, high: float, log: bool, where: str) -> None:
    if not low < high:
        raise SweepSpecError(where, f"min must be < max, got {low} and {high}")
    if log and low <= 0:
        raise SweepSpecError(where, f"a log range needs min > 0, got {low}")


def _random_parameter(key: str, item: Any, where: str) -> Parameter:
    table = _table(item, where)
    if "choices" in table:
        _only(table, {"choices"}, where)
        choices = table["choices"]
        if not isinstance(choices, list) or not choices:
            raise SweepSpecError(f"{where}.choices", "expected a non-empty list")
        return Parameter(key, "random", choices=tuple(choices))
    _only(table, {"min", "max", "unit", "log", "integer", "digits"}, where)
    if "min" not in table or "max" not in table:
        raise SweepSpecError(where, "give min and max (a range) or choices = [...]")
    low, high = _number(table["min"], f"{where}.min"), _number(table["max"], f"{where}.max")
    log = _bool(table.get("log", False), f"{where}.log")
    _check_range(low, high, log, where)
    return Parameter(
        key, "random", unit=_unit(table.get("unit", ""), f"{where}.unit"), low=low, high=high,
        log=log, integer=_bool(table.get("integer", False), f"{where}.integer"),
        digits=_int(table.get("digits", _DEFAULT_DIGITS), f"{where}.digits", minimum=1),
    )


def _metrics(value: Any, origin: str, parameter_keys: set[str]) -> tuple[Metric, ...]:
    if not isinstance(value, list):
        raise SweepSpecError(origin, "metrics: expected [[metrics]] tables")
    out: list[Metric] = []
    for i, item in enumerate(value):
        where = f"{origin}: metrics[{i}]"
        table = _table(item, where)
        _only(table, {"name", "table", "column", "agg", "where", "t_min", "t_max", "scale"},
              where)
        for k in ("name", "table", "column"):
            if k not in table:
                raise SweepSpecError(where, f"{k} is required")
        name = _string(table["name"], f"{where}.name")
        if not _METRIC_NAME.fullmatch(name):
            raise SweepSpecError(f"{where}.name", f"{name!r} must be a word (letters, digits, _)")
        if name in RESERVED_COLUMNS or name in parameter_keys:
            raise SweepSpecError(f"{where}.name", f"{name!r} is already a column of the dataset")
        if any(m.name == name for m in out):
            raise SweepSpecError(f"{where}.name", f"{name!r} is defined twice")
        tname = _string(table["table"], f"{where}.table")
        if tname not in TABLES:
            close = get_close_matches(tname, TABLES, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SweepSpecError(f"{where}.table", f"no table {tname!r}{hint}; tables: "
                                 f"{', '.join(TABLES)}")
        agg = _string(table.get("agg", "mean"), f"{where}.agg")
        if agg not in AGGREGATIONS and not _PERCENTILE.fullmatch(agg):
            raise SweepSpecError(f"{where}.agg", f"{agg!r} is not one of "
                                 f"{', '.join(AGGREGATIONS)} or pNN (a percentile, e.g. p90)")
        conditions = []
        for col, v in _table(table.get("where", {}), f"{where}.where").items():
            values = tuple(v) if isinstance(v, list) else (v,)
            if not values or not all(isinstance(x, str | int | float) for x in values):
                raise SweepSpecError(f"{where}.where.{col}", f"expected a value or a list of "
                                     f"values, got {v!r}")
            conditions.append((col, values))
        t_min = _number(table["t_min"], f"{where}.t_min") if "t_min" in table else None
        t_max = _number(table["t_max"], f"{where}.t_max") if "t_max" in table else None
        if tname == "meta" and (conditions or t_min is not None or t_max is not None):
            raise SweepSpecError(where, "meta has one row: no where, t_min or t_max")
        scale = _number(table.get("scale", 1.0), f"{where}.scale")
        out.append(Metric(name, tname, _string(table["column"], f"{where}.column"), agg,
                          tuple(conditions), t_min, t_max, scale))
    return tuple(out)


#: Key columns whose values must exist (the probe knows them at t = 0).
_KNOWN_ROWS = {"flow": ("flow_summary", "flow"), "queue": ("queue_summary", "queue"),
               "link": ("links", "link")}


def _check_metric(m: Metric, probe: Mapping[str, Any], where: str) -> None:
    if m.table == "meta":
        if m.column not in META_COLUMNS:
            raise SweepSpecError(where, f"meta has no column {m.column!r} "
                                 f"(columns: {', '.join(META_COLUMNS)})")
        return
    if m.table not in probe:
        raise SweepSpecError(where, f"the scenario produces no table {m.table!r} "
                             f"(tables: {', '.join(probe)})")
    columns = [str(c) for c in probe[m.table].columns]
    for col in [m.column, *(c for c, _ in m.where)]:
        if col not in columns:
            close = get_close_matches(col, columns, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise SweepSpecError(where, f"{m.table} has no column {col!r}{hint}; "
                                 f"columns: {', '.join(columns)}")
    if (m.t_min is not None or m.t_max is not None) and "t" not in columns:
        raise SweepSpecError(where, f"t_min/t_max need a time series; {m.table} has no t")
    for col, values in m.where:
        if col not in _KNOWN_ROWS:
            continue
        table, key = _KNOWN_ROWS[col]
        known = sorted({str(x) for x in probe.get(table, {}).get(key, [])}) if table in probe \
            else []
        for v in values:
            if known and str(v) not in known:
                raise SweepSpecError(where, f"where.{col}: no {col} {v!r} in the scenario "
                                     f"({col}s: {', '.join(known)})")


def _plots(value: Any, origin: str, parameters: Sequence[Parameter],
           metrics: Sequence[Metric], ci: float) -> tuple[Plot, ...]:
    if not isinstance(value, list):
        raise SweepSpecError(origin, "plots: expected [[plots]] tables")
    keys = [p.key for p in parameters]
    names = [m.name for m in metrics]
    out: list[Plot] = []
    files: set[str] = set()
    for i, item in enumerate(value):
        where = f"{origin}: plots[{i}]"
        table = _table(item, where)
        _only(table, {"y", "x", "hue", "kind", "ci", "where", "file", "title", "xlabel",
                      "ylabel", "logx", "logy"}, where)
        for k in ("x", "y"):
            if k not in table:
                raise SweepSpecError(where, f"{k} is required")
        y = _string(table["y"], f"{where}.y")
        if y not in names:
            raise SweepSpecError(f"{where}.y", f"no metric {y!r} (metrics: "
                                 f"{', '.join(names) or 'none defined'})")
        x = _string(table["x"], f"{where}.x")
        hue = None if "hue" not in table else _string(table["hue"], f"{where}.hue")
        for label, swept in (("x", x), ("hue", hue or "")):
            if swept and swept not in keys:
                raise SweepSpecError(f"{where}.{label}", f"{swept!r} is not a swept key (swept: "
                                     f"{', '.join(keys) or 'none'})")
        if hue is not None and hue == x:
            raise SweepSpecError(where, "x and hue are the same key")
        random_keys = {p.key for p in parameters if p.source == "random"}
        kind = _string(table.get("kind", "scatter" if random_keys else "line"), f"{where}.kind")
        if kind not in ("line", "scatter"):
            raise SweepSpecError(f"{where}.kind", f"'line' or 'scatter', got {kind!r}")
        conditions = []
        for k, v in _table(table.get("where", {}), f"{where}.where").items():
            if k not in keys:
                raise SweepSpecError(f"{where}.where", f"{k!r} is not a swept key")
            param = next(p for p in parameters if p.key == k)
            allowed = [s.column for s in param.settings]
            if param.source == "grid" and v not in allowed:
                raise SweepSpecError(f"{where}.where.\"{k}\"", f"{v!r} is not one of its values "
                                     f"{allowed}")
            conditions.append((k, v))
        file = _string(table.get("file", ""), f"{where}.file")
        if not file:
            file = _slug(f"{y}-vs-{x}" + (f"-by-{hue}" if hue else "")) + ".png"
        if "/" in file or not file.endswith(".png"):
            raise SweepSpecError(f"{where}.file", f"a file name ending in .png, got {file!r}")
        if file in files:
            file = file.removesuffix(".png") + f"-{i}.png"
        files.add(file)
        out.append(Plot(
            y=y, x=x, hue=hue, kind=kind,  # type: ignore[arg-type]
            ci=_fraction(table.get("ci", ci), f"{where}.ci"), where=tuple(conditions),
            file=file, title=_string(table.get("title", ""), f"{where}.title"),
            xlabel=_string(table.get("xlabel", ""), f"{where}.xlabel"),
            ylabel=_string(table.get("ylabel", ""), f"{where}.ylabel"),
            logx=_bool(table.get("logx", False), f"{where}.logx"),
            logy=_bool(table.get("logy", False), f"{where}.logy"),
        ))
    return tuple(out)


def _check_plot_ambiguity(spec: SweepSpec) -> None:
    """A line plot joins one mean per x value: every other swept grid key must be the
    hue or fixed by `where`, or the line would mix configurations."""
    for i, plot in enumerate(spec.plots):
        if plot.kind != "line":
            continue
        fixed = {plot.x, plot.hue, *(k for k, _ in plot.where)}
        loose = [p.key for p in spec.parameters
                 if p.key not in fixed and (p.source == "random" or len(p.settings) > 1)]
        if loose:
            raise SweepSpecError(
                spec.origin, f"plots[{i}]: {', '.join(loose)} also vary; make one the hue, "
                "fix them with where = { ... }, or use kind = \"scatter\"")


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_-]+", "_", text).strip("_") or "plot"
