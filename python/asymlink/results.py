"""Results of a run as pandas DataFrames, saved as Parquet or CSV and loaded back.

A results directory holds one file per table (`flows.parquet` or `flows.csv`, ...) and
`meta.json`: `{"meta": {...run meta...}, "format": "parquet" | "csv",
"tables": {table: {column: "float64" | "int64" | "str"}}}`. The column types make the CSV
round trip exact.
"""

from __future__ import annotations

import json
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from asymlink._native import NativeResults

Format = Literal["parquet", "csv"]

META_FILE = "meta.json"

#: The columns of each table, as documented in `crates/asymlink-sim/src/results.rs`; used
#: for the empty DataFrame of a table a run did not produce. The summary tables' counter
#: columns depend on the scenario, so only their key column is listed.
TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "flows": (
        "t", "flow", "cwnd_bytes", "ssthresh_bytes", "srtt_ms", "rto_ms", "inflight_bytes",
        "bytes_sent", "bytes_acked", "bytes_delivered", "retransmits", "timeouts",
    ),
    "queues": ("t", "queue", "packets", "bytes", "drops", "filtered", "dequeued", "sojourn_ms"),
    "links": ("t", "link", "utilization", "tx_bytes"),
    "events": ("t", "kind", "where", "flow", "detail"),
    "measurements": ("t", "flow", "metric", "value"),
    "flow_summary": ("flow",),
    "queue_summary": ("queue",),
    "qdisc_counters": ("queue", "counter", "value"),
    "subscriber_summary": ("middlebox", "subscriber"),
}


UNBOUNDED_SSTHRESH = float(2**62)
"""The engine reports an unbounded ssthresh as i64::MAX / 2 (≈ 4.6e18); at or above this
it is shown as NaN."""


class Results:
    """Everything a run produced: `meta` (scenario, seed, duration_s, wall_s, events,
    packet_hops, trace_hash) and named tables."""

    def __init__(self, meta: dict[str, Any], tables: dict[str, pd.DataFrame]) -> None:
        self.meta = meta
        self._tables = tables

    @classmethod
    def from_native(cls, native: NativeResults) -> Results:
        """From the dict the native `Simulation.results()` returns. `ssthresh_bytes` is
        NaN while it is unbounded (before the first loss), not the engine's 4.6e18."""
        tables = {name: pd.DataFrame(columns) for name, columns in native["tables"].items()}
        flows = tables.get("flows")
        if flows is not None and "ssthresh_bytes" in flows.columns:
            ss = flows["ssthresh_bytes"].astype("float64")
            flows["ssthresh_bytes"] = ss.where(ss < UNBOUNDED_SSTHRESH)
        return cls(dict(native["meta"]), tables)

    @property
    def table_names(self) -> list[str]:
        """The tables the run produced."""
        return list(self._tables)

    def table(self, name: str) -> pd.DataFrame:
        """A table by name; an empty DataFrame (with the documented columns, if any) when
        the run did not produce it."""
        if name in self._tables:
            return self._tables[name]
        return pd.DataFrame(columns=list(TABLE_COLUMNS.get(name, ())))

    @property
    def flows(self) -> pd.DataFrame:
        """Per-flow time series."""
        return self.table("flows")

    @property
    def queues(self) -> pd.DataFrame:
        """Per-queue time series."""
        return self.table("queues")

    @property
    def links(self) -> pd.DataFrame:
        """Per link direction time series."""
        return self.table("links")

    @property
    def events(self) -> pd.DataFrame:
        """Discrete events."""
        return self.table("events")

    @property
    def measurements(self) -> pd.DataFrame:
        """Application measurements (echo latency, page times, ...)."""
        return self.table("measurements")

    @property
    def flow_summary(self) -> pd.DataFrame:
        """One row per flow."""
        return self.table("flow_summary")

    @property
    def queue_summary(self) -> pd.DataFrame:
        """One row per queue, counters by reason."""
        return self.table("queue_summary")

    @property
    def qdisc_counters(self) -> pd.DataFrame:
        """Discipline-specific counters: queue, counter, value."""
        return self.table("qdisc_counters")

    def to_parquet(self, directory: str | PathLike[str]) -> Path:
        """Write `<table>.parquet` per table and `meta.json`; returns the directory."""
        return self._save(Path(directory), "parquet")

    def to_csv(self, directory: str | PathLike[str]) -> Path:
        """Write `<table>.csv` per table and `meta.json`; returns the directory."""
        return self._save(Path(directory), "csv")

    def _save(self, directory: Path, fmt: Format) -> Path:
        directory.mkdir(parents=True, exist_ok=True)
        for name, df in self._tables.items():
            path = directory / f"{name}.{fmt}"
            if fmt == "parquet":
                df.to_parquet(path, index=False)
            else:
                df.to_csv(path, index=False)
        manifest = {
            "meta": self.meta,
            "format": fmt,
            "tables": {name: _column_types(df) for name, df in self._tables.items()},
        }
        (directory / META_FILE).write_text(json.dumps(manifest, indent=2) + "\n")
        return directory

    @classmethod
    def load(cls, directory: str | PathLike[str]) -> Results:
        """Read a directory written by `to_parquet` or `to_csv`. Raises
        `FileNotFoundError` when it holds no `meta.json`."""
        d = Path(directory)
        meta_path = d / META_FILE
        if not meta_path.is_file():
            raise FileNotFoundError(2, f"not a results directory (no {META_FILE})", str(d))
        manifest = json.loads(meta_path.read_text())
        fmt: Format = manifest["format"]
        tables = {
            name: _read_table(d / f"{name}.{fmt}", fmt, types)
            for name, types in manifest["tables"].items()
        }
        return cls(manifest["meta"], tables)

    def __repr__(self) -> str:
        return f"Results(scenario={self.meta.get('scenario')!r}, tables={self.table_names})"


def _column_types(df: pd.DataFrame) -> dict[str, str]:
    def kind(series: pd.Series) -> str:
        if pd.api.types.is_integer_dtype(series.dtype):
            return "int64"
        if pd.api.types.is_float_dtype(series.dtype):
            return "float64"
        return "str"

    return {str(col): kind(df[col]) for col in df.columns}


def _read_table(path: Path, fmt: Format, types: dict[str, str]) -> pd.DataFrame:
    if fmt == "parquet":
        return pd.read_parquet(path)
    # Only float columns can hold missing values (written as empty fields); a string
    # column keeps "" and "NaN" as text.
    return pd.read_csv(
        path,
        dtype={col: (str if t == "str" else np.dtype(t)) for col, t in types.items()},
        keep_default_na=False,
        na_values={col: [""] for col, t in types.items() if t == "float64"},
    )
