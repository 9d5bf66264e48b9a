"""The reproduction framework: paper.toml parsing, match logic on synthetic metrics,
metrics validation, reports and the registry."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asymlink import repro
from asymlink.repro import (
    Entry,
    Expectation,
    PaperData,
    PaperDataError,
    PaperValue,
    evaluate,
    plain_metrics,
)
from asymlink.repro.base import check_expectation, check_paper_value, lookup
from asymlink.validate import ConfigError

METRICS: dict[str, Any] = {
    "acked_bytes_at_10s": {"1": 1.0e6, "30": 3.2e6, "500": 2.0e6},
    "delta": {"0.5": 7},
    "throughput_kbps": {"on": 18.0, "off": 12.7},
}


def parse(doc: str) -> PaperData:
    import tomllib

    return PaperData.parse(tomllib.loads(doc), "test paper.toml")


def test_lookup() -> None:
    assert lookup(METRICS, ("acked_bytes_at_10s", "30")) == 3.2e6
    assert lookup(METRICS, ("delta", "0.5")) == 7.0
    assert lookup(METRICS, ("acked_bytes_at_10s",)) is None
    assert lookup(METRICS, ("nope", "1")) is None


@pytest.mark.parametrize(
    ("relation", "than", "status"),
    [(">", "1", "yes"), (">", "500", "yes"), ("<", "500", "NO"), (">=", "30", "yes"),
     ("<=", "1", "NO"), (">", "7", "missing")],
)
def test_ordering_between_metrics(relation: str, than: str, status: str) -> None:
    e = Expectation(("acked_bytes_at_10s", "30"), relation, than=("acked_bytes_at_10s", than))
    check = check_expectation(e, METRICS)
    assert check.status == status
    assert check.ok == (status == "yes")
    assert check.metric == "acked_bytes_at_10s.30"
    assert check.paper == f"{relation} acked_bytes_at_10s.{than}"


def test_ordering_against_a_value_and_dotted_keys() -> None:
    check = check_expectation(Expectation(("delta", "0.5"), "<", value=10), METRICS)
    assert check.ok
    assert check.metric == "['delta', '0.5']"


@pytest.mark.parametrize(
    ("pv", "status"),
    [
        (PaperValue(("throughput_kbps", "on"), 18.91, 0.05, relative=True), "yes"),
        (PaperValue(("throughput_kbps", "on"), 18.91, 0.04, relative=True), "NO"),
        (PaperValue(("throughput_kbps", "off"), 12.70, 0.0, relative=False), "yes"),
        (PaperValue(("throughput_kbps", "off"), 12.0, 0.7, relative=False), "yes"),
        (PaperValue(("throughput_kbps", "off"), 12.0, 0.69, relative=False), "NO"),
        (PaperValue(("throughput_kbps", "x"), 1.0, 1.0, relative=False), "missing"),
    ],
)
def test_paper_values_within_tolerance(pv: PaperValue, status: str) -> None:
    assert check_paper_value(pv, METRICS).status == status


def test_paper_toml_drives_the_verdicts() -> None:
    paper = parse(
        """
        notes = "  reading chosen  "
        [quick]
        overrides = { duration = "5s" }
        scenarios = { on = { "links.0.rate" = "1Mbit" } }
        [[fixed]]
        key = "links.0.buffer"
        reason = "not given by the paper"
        [[expect]]
        metric = "acked_bytes_at_10s.30"
        relation = ">"
        than = "acked_bytes_at_10s.1"
        [[expect]]
        metric = ["delta", "0.5"]
        relation = ">="
        value = 8
        [[paper]]
        metric = "throughput_kbps.on"
        value = 18.91
        tolerance = 0.2
        unit = "kbit/s"
        """
    )
    assert paper.notes == "reading chosen"
    assert paper.overrides("on", quick=True) == {"duration": "5s", "links.0.rate": "1Mbit"}
    assert paper.overrides("off", quick=True) == {"duration": "5s"}
    assert paper.overrides("on", quick=False) == {}
    checks = evaluate(paper, METRICS)
    assert [(c.kind, c.status) for c in checks] == [
        ("expect", "yes"), ("expect", "NO"), ("paper", "yes")
    ]
    assert checks[2].paper == "18.91 kbit/s ± 20 %"
    assert checks[2].measured == "18 kbit/s"


def test_comparison_rows_carry_the_units_of_their_metric() -> None:
    from asymlink.repro.base import Expectation, check_expectation, fmt_metric

    metrics = {"acked_bytes_at_10s": {"delta_3": 9.177e6, "none": 2.68e6}}
    c = check_expectation(Expectation(("acked_bytes_at_10s", "delta_3"), ">",
                                      than=("acked_bytes_at_10s", "none")), metrics)
    assert (c.metric, c.paper, c.measured, c.status) == (
        "acked_bytes_at_10s.delta_3", "> acked_bytes_at_10s.none", "9.177 MB vs 2.68 MB", "yes")
    assert fmt_metric(41_200.0, ("mean_file_throughput_bps", "large")) == "41.2 kbit/s"
    assert fmt_metric(52.2, ("rtt_ms",)) == "52.2 ms"
    assert fmt_metric(0.95, ("fairness_index", "fcfs")) == "0.95"


@pytest.mark.parametrize(
    ("doc", "fragment"),
    [
        ('[[expect]]\nmetric = "a"\nrelation = "!="\nvalue = 1', "relation must be one of"),
        ('[[expect]]\nmetric = "a"\nrelation = ">"', "exactly one of 'than'"),
        ('[[expect]]\nmetric = "a"\nrelation = ">"\nvalue = 1\nthan = "b"', "exactly one of"),
        ('[[expect]]\nmetric = ""\nrelation = ">"\nvalue = 1', "dotted string or a list"),
        ('[[paper]]\nmetric = "a"\nvalue = 1', "exactly one of 'tolerance'"),
        ('[[paper]]\nmetric = "a"\nvalue = 1\ntolerance = -1', "must be >= 0"),
        ('[[paper]]\nmetric = "a"\nvalue = "1"\ntolerance = 1',
         "paper[0].value: expected a finite number"),
        ('[[paper]]\nmetric = "a"\nvalue = 1\ntolerence = 1', "unknown key 'tolerence'"),
        ('[[fixed]]\nkey = "a"\nreason = " "', "non-empty 'reason'"),
        ('[[fixed]]\nkey = "a"\nreason = "r"\nscenarios = "on"', "non-empty list of scenario"),
        ("[extra]", "unknown key 'extra'"),
    ],
)
def test_malformed_paper_data_is_named(doc: str, fragment: str) -> None:
    with pytest.raises(PaperDataError) as info:
        parse(doc)
    assert fragment in str(info.value)
    assert str(info.value).startswith("test paper.toml")


def test_plain_metrics_converts_numpy_and_checks() -> None:
    plain = plain_metrics({"a": np.float64(1.5), "b": {"2": np.int64(3)}, "c": 4})
    assert plain == {"a": 1.5, "b": {"2": 3}, "c": 4}
    assert type(plain["a"]) is float and type(plain["b"]["2"]) is int  # type: ignore[index]
    json.dumps(plain, allow_nan=False)


@pytest.mark.parametrize(
    ("metrics", "error", "fragment"),
    [
        ({"a": {1: 2.0}}, TypeError, "key 'a.1' must be a string"),
        ({"a": math.nan}, ValueError, "a is nan"),
        ({"a": {"b": math.inf}}, ValueError, "a.b is inf"),
        ({"a": True}, TypeError, "must be a number"),
        ({"a": "1"}, TypeError, "must be a number"),
        ({"a": [1]}, TypeError, "must be a number"),
    ],
)
def test_plain_metrics_rejects(metrics: dict[Any, Any], error: type, fragment: str) -> None:
    with pytest.raises(error, match=fragment.replace(".", r"\.")):
        plain_metrics(metrics)


def test_registry_hides_internal_entries_and_checks_ids() -> None:
    assert "_selftest" not in [e.id for e in repro.entries()]
    assert "_selftest" in [e.id for e in repro.entries(include_internal=True)]
    with pytest.raises(ValueError, match="already registered"):
        repro.register(repro.get("_selftest"))
    with pytest.raises(ValueError, match="lowercase"):
        repro.register(Entry(id="Bad_Id", paper="p", title="t", run=lambda d, q: {}))
    with pytest.raises(KeyError, match="no reproduction 'nope'"):
        repro.get("nope")


@pytest.mark.parametrize("entry", repro.entries(include_internal=True), ids=lambda e: e.id)
def test_registered_entries_are_well_formed(entry: Entry) -> None:
    entry.check()


@pytest.mark.parametrize(("key", "fragment"), [
    ("links.1.to_a.rate", "fixed[0].key: 'links.1.to_a.rate' addresses links[1] by position; "
                          "write it by name: 'links.access.to_a.rate'"),
    ("links.access.to_a.rat", "fixed[0].key: 'links.access.to_a.rat' is not in scenario "
                              "'long': links.access.to_a.rat: no such key"),
    ("flows.upp.start", "fixed[0].key: 'flows.upp.start' is not in scenario 'long': "
                        "flows.upp: expected an array index or a name"),
])
def test_fixed_keys_go_by_name_and_must_exist(key: str, fragment: str) -> None:
    entry = Entry(id="_selftest", paper="p", title="t", run=lambda d, q: {})
    entry.__dict__["paper_data"] = PaperData.parse(
        {"fixed": [{"key": key, "reason": "r"}]}, "_selftest/paper.toml")
    with pytest.raises(ConfigError) as info:
        entry.check()
    assert str(info.value).startswith(f"_selftest/paper.toml: {fragment}")


def test_selftest_reproduces_and_reports(tmp_path: Path) -> None:
    report = repro.reproduce("_selftest", tmp_path, quick=True)
    assert report.ok
    metrics = json.loads((tmp_path / "metrics.json").read_text())
    assert metrics == report.metrics
    assert metrics["runs"] == 2
    summary = (tmp_path / "summary.md").read_text()
    assert "| metric | paper | measured | match? |" in summary
    assert "| runs | 2 ± 0 | 2 | yes |" in summary
    assert "| links.access.to_a.rate | 512kbit | all | slow enough" in summary
    assert "| duration | 2s | long |" in summary  # the quick value, as run
    assert "![events](figures/events.png)" in summary
    assert (tmp_path / "figures" / "events.png").is_file()
    assert (tmp_path / "runs" / "long" / "meta.json").is_file()


def test_expectation_helpers(tmp_path: Path) -> None:
    checks = repro.check_expectations("_selftest", tmp_path)
    assert checks and all(c.kind == "expect" and c.ok for c in checks)
    repro.assert_expectations("_selftest", tmp_path / "again")


def test_summary_states_mismatches_from_the_data(tmp_path: Path) -> None:
    selftest = repro.get("_selftest")
    entry = Entry(id="_selftest", paper="p", title="t", run=lambda d, q: {"runs": 3})
    report = repro.reproduce(entry, tmp_path, quick=True)
    assert not report.ok
    assert "| runs | 2 ± 0 | 3 | NO |" in (tmp_path / "summary.md").read_text()
    assert "- checks matching: 1 of 3" in (tmp_path / "summary.md").read_text()
    assert repro.get("_selftest") is selftest
