"""Standard figures and the run summary."""

from __future__ import annotations

from pathlib import Path

from asymlink import Results
from asymlink.plot import new_axes, plot_cwnd, save, standard_figures
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
