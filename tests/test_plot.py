"""Standard figures and the run summary."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from matplotlib.cbook import STEP_LOOKUP_MAP

from asymlink import Results
from asymlink.analysis import throughput
from asymlink.plot import (
    new_axes,
    plot_cwnd,
    plot_throughput,
    plot_utilization,
    save,
    standard_figures,
)
from asymlink.report import run_summary_markdown

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def test_standard_figures_are_pngs(results: Results, tmp_path: Path) -> None:
    written = standard_figures(results, tmp_path / "figs", interval=0.5)
    assert [p.name for p in written] == [
        "cwnd.png", "throughput.png", "queues.png", "utilization.png"
    ]
    for path in written:
        assert path.read_bytes().startswith(PNG_MAGIC)


def test_no_figures_without_time_series(tmp_path: Path) -> None:
    assert standard_figures(Results({"scenario": "x"}, {}), tmp_path) == []


def test_plot_functions_compose_on_given_axes(results: Results, tmp_path: Path) -> None:
    ax = new_axes()
    assert plot_cwnd(results, ax) is ax
    assert len(ax.lines) == 2
    assert save(ax.figure, tmp_path / "a" / "b.png").read_bytes().startswith(PNG_MAGIC)


def test_run_summary_lists_flows_and_queues(results: Results) -> None:
    md = run_summary_markdown(results)
    assert md.startswith("# synthetic\n")
    assert "| down | 0.5 MB | 1 Mbit/s |" in md
    assert "| access.up | 3 | 14 |" in md


def _late_start_results() -> Results:
    """One flow that starts at exactly 10 s and then delivers 1 Mbit/s, sampled every
    0.1 s, and a link busy only in (10 s, 11 s]."""
    t = np.round(np.arange(0.1, 15.001, 0.1), 6)
    delivered = (np.clip(t - 10.0, 0.0, None) * 125_000).astype(np.int64)
    busy = ((t > 10.0) & (t <= 11.0)).astype(float)
    native = {
        "meta": {"scenario": "late", "duration_s": 15.0},
        "tables": {
            "flows": {"t": t, "flow": ["upload"] * len(t), "bytes_delivered": delivered,
                      "cwnd_bytes": np.full(len(t), 1460)},
            "links": {"t": t, "link": ["up"] * len(t), "utilization": busy,
                      "tx_bytes": np.zeros(len(t), dtype=np.int64)},
        },
    }
    return Results.from_native(native)  # type: ignore[arg-type]


def _drawn_from(line: Any) -> float:
    """The first x at which a drawn line (after its drawstyle) is above zero."""
    x, y = STEP_LOOKUP_MAP[line.get_drawstyle()](*np.asarray(line.get_xydata()).T)
    return float(x[np.argmax(y > 0)])


def test_throughput_bins_are_labelled_with_their_end() -> None:
    tp = throughput(_late_start_results().flows, interval=1.0).set_index("t")
    assert tp.loc[10.0, "throughput_bps"] == 0.0  # the bin (9 s, 10 s]
    assert tp.loc[11.0, "throughput_bps"] == pytest.approx(1e6)  # the bin (10 s, 11 s]


def test_a_flow_starting_at_10s_is_drawn_from_10s() -> None:
    res = _late_start_results()
    ax = plot_throughput(res, interval=1.0)
    assert _drawn_from(ax.lines[0]) == pytest.approx(10.0)
    ax = plot_utilization(res)
    assert _drawn_from(ax.lines[0]) == pytest.approx(10.0)


def test_showcase_summary_leads_with_the_headline(tmp_path: Path) -> None:
    from asymlink import examples
    from asymlink.runner import run

    md = run_summary_markdown(run(examples.load("showcase"), progress=False))
    sections = md.split("\n## ")
    assert sections[1].startswith("Headline")
    head = sections[1].splitlines()
    assert head[2] == "| time | flows | goodput (mean RTT) | line:to_a queue delay |"
    alone, both = head[4], head[5]
    assert alone.startswith("| 0–10 s | download alone | download ")
    assert both.startswith("| 10–30 s | download + upload | download ")
    rate = [float(row.split("download ")[2].split(" Mbit/s")[0]) for row in (alone, both)]
    assert rate[0] > 2 * rate[1]  # the collapse the showcase is about
    delay = [float(row.split("|")[-2].split(" ms")[0]) for row in (alone, both)]
    assert delay[1] > delay[0] + 50


def test_headline_of_a_flow_starting_late() -> None:
    from asymlink.report import headline_table

    table = headline_table(_late_start_results())
    assert table is not None
    assert [r[:3] for r in table.rows] == [["10–15 s", "upload alone", "upload 1 Mbit/s"]]


def test_showcase_figures_mark_the_upload_and_keep_cwnd_readable(tmp_path: Path) -> None:
    from asymlink import examples
    from asymlink.runner import run

    res = run(examples.load("showcase"), progress=False)
    # ssthresh is absent (NaN) while unbounded, never the engine's 4.6e18
    ss = res.flows["ssthresh_bytes"]
    assert ss.isna().any() and ss.dropna().max() < 1e12
    assert np.isnan(ss[res.flows["t"] == res.flows["t"].min()]).all()
    ax = plot_cwnd(res)
    peaks = res.flows.groupby("flow")["cwnd_bytes"].max()
    # The download's window (64 KiB) bounds its cwnd: comparable peaks, a linear axis.
    assert peaks["download"] < 200_000 and peaks.max() / peaks.min() < 10
    assert ax.get_yscale() == "linear"
    # A flow whose cwnd dwarfs the other's moves the axis to a log scale.
    res.flows.loc[res.flows["flow"] == "download", "cwnd_bytes"] *= 100
    assert plot_cwnd(res).get_yscale() == "log"
    for ax in (plot_cwnd(res), plot_throughput(res)):
        marks = [t.get_text() for t in ax.texts]
        assert marks == ["upload starts"]
        assert ax.title.get_text() and "(" in ax.get_ylabel()  # a title and a unit


def test_the_first_interval_is_drawn_too(results: Results) -> None:
    ax = plot_throughput(results, interval=1.0)  # "down" sends from t = 0
    x, _ = STEP_LOOKUP_MAP[ax.lines[0].get_drawstyle()](*np.asarray(ax.lines[0].get_xydata()).T)
    assert x.min() == 0.0
