"""Results as DataFrames, their Parquet and CSV round trips, and the analysis helpers."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

import asymlink
from asymlink import Results, Scenario
from asymlink.analysis import flow_totals, queue_totals, throughput
from asymlink.results import TABLE_COLUMNS


def _assert_same(a: Results, b: Results) -> None:
    assert a.meta == b.meta
    assert a.table_names == b.table_names
    for name in a.table_names:
        pd.testing.assert_frame_equal(a.table(name), b.table(name))


@pytest.mark.parametrize("fmt", ["parquet", "csv"])
def test_round_trip(results: Results, tmp_path: Path, fmt: str) -> None:
    getattr(results, f"to_{fmt}")(tmp_path)
    assert (tmp_path / "meta.json").is_file()
    assert sorted(p.name for p in tmp_path.glob(f"*.{fmt}")) == sorted(
        f"{n}.{fmt}" for n in results.table_names
    )
    _assert_same(results, Results.load(tmp_path))


def test_csv_keeps_text_that_looks_missing(results: Results, tmp_path: Path) -> None:
    loaded = Results.load(results.to_csv(tmp_path))
    assert list(loaded.events["where"]) == ["access.up", "", "NaN"]
    assert loaded.flows["srtt_ms"].isna().sum() == results.flows["srtt_ms"].isna().sum() > 0


def test_meta_json_is_plain_json(results: Results, tmp_path: Path) -> None:
    results.to_parquet(tmp_path)
    manifest = json.loads((tmp_path / "meta.json").read_text())
    assert manifest["meta"]["trace_hash"] == 2**63 + 5
    assert manifest["format"] == "parquet"
    assert manifest["tables"]["flows"]["flow"] == "str"
    assert manifest["tables"]["flows"]["retransmits"] == "int64"


def test_absent_tables_are_empty_with_their_columns(results: Results) -> None:
    assert results.measurements.empty
    assert tuple(results.measurements.columns) == TABLE_COLUMNS["measurements"]
    assert list(results.queue_summary.columns) == ["queue"]
    assert results.table("no_such_table").empty


def test_load_of_a_directory_without_meta_fails_clearly(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a results directory"):
        Results.load(tmp_path)


def test_run_returns_results_and_writes_them(
    scenario: Scenario, scenario_file: Path, tmp_path: Path
) -> None:
    res = asymlink.run(scenario, seed=11, out_dir=tmp_path / "captures", progress=True)
    assert res.meta["scenario"] == "tiny"
    assert list(res.flows.columns) == list(TABLE_COLUMNS["flows"])
    _assert_same(res, Results.load(res.to_parquet(tmp_path / "out")))
    assert asymlink.run(scenario_file).meta["scenario"] == "tiny"


def test_throughput_differentiates_delivered_bytes(results: Results) -> None:
    tp = throughput(results.flows, interval=1.0)
    down = tp[tp["flow"] == "down"]
    assert list(down["t"]) == [1.0, 2.0, 3.0, 4.0]
    np.testing.assert_allclose(down["throughput_bps"], 1e6)
    np.testing.assert_allclose(tp[tp["flow"] == "up"]["throughput_bps"], 1e5)


def test_throughput_interval_must_be_positive(results: Results) -> None:
    with pytest.raises(ValueError, match="interval"):
        throughput(results.flows, interval=0)


def test_throughput_of_no_flows_is_empty() -> None:
    assert throughput(Results({}, {}).flows).empty


def test_totals(results: Results) -> None:
    flows = flow_totals(results)
    assert list(flows["flow"]) == ["down", "up"]
    assert list(flows["delivered_bytes"]) == [500_000, 50_000]
    np.testing.assert_allclose(flows["throughput_bps"], [1e6, 1e5])
    queues = queue_totals(results)
    assert queues.to_dict("records") == [{"queue": "access.up", "drops": 3, "filtered": 14}]
