"""Sweep specs: parsing, the checks that run before anything runs, expansion into points,
metric extraction and the statistics across seeds. Running sweeps: test_sweep_run.py."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from asymlink.sweep import SweepSpec, SweepSpecError, aggregate, mean_ci, t_quantile
from asymlink.sweep.spec import Metric, format_number, point_key
from asymlink.sweep.stats import aggregate_values, extract

ENGINE = "test-engine"

HEAD = """\
base = "tiny.toml"
seeds = [1, 2]
"""

METRIC = """
[[metrics]]
name = "down"
table = "flow_summary"
column = "goodput_bps"
where = { flow = "down" }
"""


@pytest.fixture
def spec_dir(tmp_path: Path, scenario_toml: str) -> Path:
    (tmp_path / "tiny.toml").write_text(scenario_toml)
    return tmp_path


def load(spec_dir: Path, text: str) -> SweepSpec:
    path = spec_dir / "sweep.toml"
    path.write_text(text)
    return SweepSpec.from_file(path)


def plan(spec_dir: Path, text: str) -> list[Any]:
    return load(spec_dir, text).plan(ENGINE)


# --- expansion ---------------------------------------------------------------------------


def test_grid_crossed_with_seeds_in_order(spec_dir: Path) -> None:
    points = plan(spec_dir, HEAD + """
[grid]
"links.1.to_a.rate" = ["256kbit", "512kbit", "1Mbit"]
[grid."links.1.to_a.queue"]
values = [{ kind = "fifo", limit = "10p" }, { kind = "fifo", limit = "50p" }]
labels = ["short", "long"]
""" + METRIC)
    assert len(points) == 3 * 2 * 2
    assert [(p.config, p.seed) for p in points[:4]] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    first = points[0]
    assert first.params == {"links.1.to_a.rate": "256kbit", "links.1.to_a.queue": "short"}
    assert first.scenario.get("links.1.to_a.queue") == {"kind": "fifo", "limit": "10p"}
    assert first.scenario.get("seed") == 1 and points[1].scenario.get("seed") == 2
    assert points[2].params["links.1.to_a.queue"] == "long"
    assert len({p.key for p in points}) == len(points)


def test_units_ranges_and_zip(spec_dir: Path) -> None:
    spec = load(spec_dir, HEAD + """
overrides = { "links.1.to_a.queue" = { kind = "fifo", limit = "100p" } }
[grid]
"links.1.delay" = { values = [5, 12.5], unit = "ms" }
[grid."links.1.to_a.queue.limit"]
min = 10
max = 1000
count = 3
log = true
integer = true
unit = "p"
[[zip]]
"links.0.rate" = ["10Mbit", "100Mbit"]
"links.0.delay" = ["1ms", "2ms"]
""")
    points = spec.plan(ENGINE)
    assert len(spec.configurations) == 3 * 2 * 2
    limits = sorted({p.scenario.get("links.1.to_a.queue.limit") for p in points})
    assert limits == ["1000p", "100p", "10p"]
    assert {p.params["links.1.to_a.queue.limit"] for p in points} == {10, 100, 1000}
    assert {p.scenario.get("links.1.delay") for p in points} == {"5ms", "12.5ms"}
    pairs = {(p.scenario.get("links.0.rate"), p.scenario.get("links.0.delay")) for p in points}
    assert pairs == {("10Mbit", "1ms"), ("100Mbit", "2ms")}
    assert [p.numeric for p in spec.parameters] == [True, True, False, False]


def test_random_samples_are_reproducible(spec_dir: Path) -> None:
    text = HEAD + """
[random]
samples = 20
seed = {seed}
[random.params]
"links.1.delay" = {{ min = 1, max = 100, unit = "ms", log = true, digits = 3 }}
"links.1.to_a.rate" = {{ min = 100, max = 900, integer = true, unit = "kbit" }}
"flows.0.tcp.profile" = {{ choices = ["rfc", "linux"] }}
"""
    a = plan(spec_dir, text.format(seed=7))
    b = plan(spec_dir, text.format(seed=7))
    c = plan(spec_dir, text.format(seed=8))
    assert len(a) == 40
    assert [p.key for p in a] == [p.key for p in b]
    assert [p.key for p in a] != [p.key for p in c]
    delays = [p.params["links.1.delay"] for p in a]
    assert all(1 <= d <= 100 for d in delays) and len(set(delays)) > 10
    for p in a:   # the column is the number the scenario got
        assert p.scenario.get("links.1.delay") == f"{format_number(p.params['links.1.delay'], 3)}ms"
        assert isinstance(p.params["links.1.to_a.rate"], int)
    assert {p.params["flows.0.tcp.profile"] for p in a} == {"rfc", "linux"}


def test_grid_and_random_cross(spec_dir: Path) -> None:
    spec = load(spec_dir, HEAD + """
[grid]
"links.1.to_a.rate" = ["256kbit", "512kbit"]
[random]
samples = 3
[random.params]
"links.1.delay" = { min = 1, max = 10, unit = "ms" }
""")
    configs = spec.configurations
    assert len(configs) == 6
    # the same samples under each grid value
    assert [c[1] for c in configs[:3]] == [c[1] for c in configs[3:]]


def test_seeds_only_and_seed_forms(spec_dir: Path) -> None:
    spec = load(spec_dir, 'base = "tiny.toml"\nseeds = { count = 4, start = 10 }\n')
    assert spec.seeds == (10, 11, 12, 13)
    assert len(spec.plan(ENGINE)) == 4


def test_point_key_depends_on_scenario_seed_and_engine(spec_dir: Path) -> None:
    points = load(spec_dir, HEAD).points(ENGINE)
    assert points[0].key != points[1].key
    assert point_key(points[0].scenario, 1, ENGINE) == points[0].key
    assert point_key(points[0].scenario, 1, "other") != points[0].key
    again = load(spec_dir, "# a comment changes nothing\n" + HEAD).points(ENGINE)
    assert [p.key for p in again] == [p.key for p in points]


def test_captures_are_dropped(spec_dir: Path, scenario_toml: str) -> None:
    capture = '\n[[monitor.capture]]\nlink = "access"\ndir = "to_a"\nfile = "up.pcap"\n'
    (spec_dir / "tiny.toml").write_text(scenario_toml + capture)
    point = load(spec_dir, HEAD).plan(ENGINE)[0]
    assert "capture" not in point.scenario.data.get("monitor", {})


def test_base_from_example_and_repro(spec_dir: Path) -> None:
    spec = load(spec_dir, 'base = "showcase"\n')
    assert spec.base_label == "example:showcase"
    spec = load(spec_dir, 'base = { repro = "adsl-problem", scenario = "alone", quick = true }\n')
    assert spec.base_label == "repro:adsl-problem/alone (quick)"
    spec.plan(ENGINE)


@pytest.mark.parametrize("path", sorted(Path("examples/sweeps").glob("*.toml")),
                         ids=lambda p: p.name)
def test_shipped_sweep_specs_check(path: Path) -> None:
    spec = SweepSpec.from_file(path)
    assert spec.plan(ENGINE)


# --- bad specs: clear errors before anything runs ----------------------------------------------

BAD = [
    ("", "base is required"),
    ('base = "nosuch"', "no example named 'nosuch'"),
    ('base = "absent.toml"', "absent.toml: no such scenario file"),
    ('base = { repro = "nosuch" }', "no reproduction 'nosuch'"),
    ('base = { repro = "adsl-problem", scenario = "x" }', "adsl-problem has no scenario 'x'"),
    ('base = "tiny.toml"\nseed = [1]', "unknown key 'seed' (did you mean 'seeds'?)"),
    ('base = "tiny.toml"\nseeds = []', "seeds: expected a non-empty list"),
    ('base = "tiny.toml"\nseeds = [1, 1]', "a seed is listed twice"),
    ('base = "tiny.toml"\nseeds = [-1]', "must be >= 0"),
    ('base = "tiny.toml"\n[grid]\n"links.9.rate" = ["1Mbit"]', "links.9: index out of range"),
    ('base = "tiny.toml"\n[grid]\n"nodes.0.name.x" = [1]', "nodes.0.name is a str"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = []', "empty list of values"),
    ('base = "tiny.toml"\n[grid]\nseed = [1, 2]', "use `seeds`"),
    ('base = "tiny.toml"\noverrides = { "links.1.rate" = "1Mbit" }\n'
     '[grid]\n"links.1.rate" = ["2Mbit"]',
     "both swept and in overrides"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = ["1Mbit"]\n[[zip]]\n"links.1.rate" = ["2Mbit"]',
     "links.1.rate is swept twice"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = { values = ["1"], unit = "Mbit" }',
     "with a unit, values are numbers"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = { values = [1], unit = "M bit" }',
     "a unit is letters"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = { min = 1, max = 2 }', "min, max and count"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = { min = 2, max = 1, count = 2 }',
     "min must be < max"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = { min = 1, max = 2, count = 5, integer = true }',
     "rounding makes values equal"),
    ('base = "tiny.toml"\n[grid]\n"links.1.delay" = '
     '{ min = 0, max = 2, count = 5, log = true, unit = "ms" }',
     "a log range needs min > 0"),
    ('base = "tiny.toml"\n[[zip]]\n"links.0.rate" = ["1Mbit"]\n"links.1.rate" = ["1Mbit", "2Mbit"]',
     "the lists must have equal lengths"),
    ('base = "tiny.toml"\n[random]\nsamples = 0\n[random.params]\n'
     '"links.1.rate" = { choices = [1] }',
     "random.samples: must be >= 1"),
    ('base = "tiny.toml"\n[random]\nsamples = 2', "name at least one key to sample"),
    ('base = "tiny.toml"\n[random]\nsamples = 2\n[random.params]\n"links.1.delay" = { min = 1 }',
     "give min and max"),
    ('base = "tiny.toml"\n[grid]\n"links.1.to_a.rat" = ["1Mbit"]',
     'unknown field `rat`, expected one of `rate`'),
    ('base = "tiny.toml"\n[grid]\n"links.1.to_a.rate" = ["1Mbit", "fast"]',
     "[1 point, e.g. point 1: links.1.to_a.rate='fast', seed=1]"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = [["a"]]', "the swept key \"links.1.rate\""),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "flow"\ncolumn = "x"',
     "no table 'flow' (did you mean 'flows'?)"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "flow_summary"\ncolumn = "goodput"',
     "flow_summary has no column 'goodput' (did you mean 'goodput_bps'?)"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "flow_summary"\ncolumn = "goodput_bps"'
     '\nwhere = { flow = "dwon" }', "no flow 'dwon' in the scenario (flows: down, up)"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "queues"\ncolumn = "packets"'
     '\nwhere = { queue = "access:up" }', "no queue 'access:up'"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "flows"\ncolumn = "cwnd_bytes"'
     '\nagg = "average"', "'average' is not one of mean"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "meta"\ncolumn = "nothing"',
     "meta has no column 'nothing'"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "seed"\ntable = "meta"\ncolumn = "events"',
     "'seed' is already a column"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "a b"\ntable = "meta"\ncolumn = "events"',
     "must be a word"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "meta"', "column is required"),
    ('base = "tiny.toml"\n[[metrics]]\nname = "m"\ntable = "flow_summary"\ncolumn = "goodput_bps"'
     '\nt_min = 1.0', "t_min/t_max need a time series"),
    ('base = "tiny.toml"\n[[plots]]\nx = "links.1.rate"\ny = "m"', "no metric 'm'"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = ["1Mbit"]\n[[metrics]]\nname = "m"\n'
     'table = "meta"\ncolumn = "events"\n[[plots]]\nx = "links.1.delay"\ny = "m"',
     "'links.1.delay' is not a swept key"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = ["1Mbit", "2Mbit"]\n"links.1.delay" = ["1ms", '
     '"2ms"]\n[[metrics]]\nname = "m"\ntable = "meta"\ncolumn = "events"\n[[plots]]\n'
     'x = "links.1.rate"\ny = "m"', "links.1.delay also vary; make one the hue"),
    ('base = "tiny.toml"\n[grid]\n"links.1.rate" = ["1Mbit"]\n[[metrics]]\nname = "m"\n'
     'table = "meta"\ncolumn = "events"\n[[plots]]\nx = "links.1.rate"\ny = "m"\nfile = "a.svg"',
     "a file name ending in .png"),
    ('base = "tiny.toml"\nci = 95', "a confidence level is between 0 and 1"),
    ('base = "tiny.toml"\n[grid\n', "Expected ']'"),
]


@pytest.mark.parametrize(("text", "fragment"), BAD, ids=[f for _, f in BAD])
def test_bad_specs_are_named_before_anything_runs(spec_dir: Path, text: str,
                                                  fragment: str) -> None:
    with pytest.raises(SweepSpecError) as info:
        plan(spec_dir, text)
    message = str(info.value)
    assert message.startswith(str(spec_dir / "sweep.toml")), message
    assert fragment in message


def test_plot_ambiguity_resolved_by_hue_or_where(spec_dir: Path) -> None:
    grid = HEAD + '[grid]\n"links.1.rate" = ["1Mbit", "2Mbit"]\n"links.1.delay" = ["1ms", "2ms"]\n'
    metric = '[[metrics]]\nname = "m"\ntable = "meta"\ncolumn = "events"\n'
    load(spec_dir, grid + metric + '[[plots]]\nx = "links.1.rate"\ny = "m"\n'
         'hue = "links.1.delay"\n')
    load(spec_dir, grid + metric + '[[plots]]\nx = "links.1.rate"\ny = "m"\n'
         'where = { "links.1.delay" = "2ms" }\n')
    with pytest.raises(SweepSpecError, match="is not one of its values"):
        load(spec_dir, grid + metric + '[[plots]]\nx = "links.1.rate"\ny = "m"\n'
             'where = { "links.1.delay" = "3ms" }\n')


# --- metrics and statistics ------------------------------------------------------------------


def test_format_number() -> None:
    assert format_number(1234.5678, 4) == "1235"
    assert format_number(0.000123456, 4) == "0.0001235"
    assert format_number(2.5, 4) == "2.5"
    assert format_number(1e6, 3) == "1000000"


@pytest.mark.parametrize(("df", "level", "q"), [(1, 0.95, 12.706), (2, 0.95, 4.303),
                                                (4, 0.95, 2.776), (9, 0.95, 2.262),
                                                (30, 0.95, 2.042), (3, 0.99, 5.841),
                                                (7, 0.90, 1.895), (500, 0.95, 1.965)])
def test_t_quantile_matches_tables(df: int, level: float, q: float) -> None:
    assert t_quantile(level, df) == pytest.approx(q, abs=1e-3)


def test_mean_ci() -> None:
    mean, half, n = mean_ci([1.0, 2.0, 3.0, 4.0, math.nan], 0.95)
    assert (mean, n) == (2.5, 4)
    assert half == pytest.approx(3.182446 * np.std([1, 2, 3, 4], ddof=1) / 2)
    assert math.isnan(mean_ci([5.0], 0.95)[1])
    assert mean_ci([], 0.95)[2] == 0


def test_aggregate_across_seeds() -> None:
    data = pd.DataFrame({"config": [0, 0, 0, 1, 1, 1], "p": [5, 5, 5, 7, 7, 7],
                         "seed": [1, 2, 3] * 2, "m": [1.0, 2.0, 3.0, 10.0, 10.0, math.nan],
                         "error": ["", "", "", "", "", ""]})
    agg = aggregate(data, ["p"], ["m"], 0.95)
    assert agg["p"].tolist() == [5, 7]
    assert agg["m_mean"].tolist() == [2.0, 10.0]
    assert agg["m_n"].tolist() == [3, 2]
    width = agg["m_ci_high"][0] - agg["m_ci_low"][0]
    assert width == pytest.approx(2 * 4.302653 / math.sqrt(3), rel=1e-5)
    assert agg["m_ci_low"][1] == agg["m_ci_high"][1] == 10.0


def test_extract(results: Any) -> None:
    tables = {name: results.table(name) for name in results.table_names}

    def m(**kw: Any) -> float:
        kw.setdefault("agg", "mean")
        where = tuple((k, tuple(v if isinstance(v, list) else [v]))
                      for k, v in kw.pop("where", {}).items())
        return extract(Metric(name="x", where=where, **kw), tables, results.meta)

    assert m(table="flows", column="cwnd_bytes", agg="count") == 16
    assert m(table="flows", column="bytes_delivered", agg="last", where={"flow": "down"}) == 500_000
    assert m(table="flows", column="bytes_delivered", agg="first", where={"flow": "up"}) == 6250
    assert m(table="flows", column="bytes_delivered", agg="max", where={"flow": ["down", "up"]},
             t_max=2.0) == 250_000
    assert m(table="flows", column="bytes_delivered", agg="min", where={"flow": "up"},
             t_min=2.0) == 25_000
    assert m(table="flows", column="srtt_ms", agg="mean") == 40.0   # NaN ignored
    assert m(table="queues", column="packets", agg="p50") == 3.5
    assert m(table="queues", column="drops", agg="sum") == 0 + 1 + 2 + 3 * 5
    assert math.isnan(m(table="flows", column="cwnd_bytes", where={"flow": "none"}))
    assert m(table="flows", column="cwnd_bytes", where={"flow": "none"}, agg="count") == 0
    assert m(table="meta", column="events") == 1234
    assert m(table="meta", column="events", scale=1e-3) == pytest.approx(1.234)
    assert m(table="flows", column="cwnd_bytes", agg="count", scale=2.0) == 16
    assert math.isnan(m(table="measurements", column="value"))


def test_aggregate_values() -> None:
    v = np.array([3.0, 1.0, math.nan, 2.0])
    assert aggregate_values(v, "median") == 2.0
    assert aggregate_values(v, "p100") == 3.0
    assert aggregate_values(v, "std") == 1.0
    assert aggregate_values(v, "count") == 4
