"""The HTML report of `asymlink reproduce all`: its pages and links, a failing entry, and a
real headless browser (Debian's chromium) loading every page: every image has to load
(naturalWidth > 0), every link has to resolve. CI builds the report of three quick
entries and of the whole catalog (`reproduce all --quick`, about 35 s);
ASYMLINK_REPORT_FULL=1 makes the latter the full runs (several minutes)."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from asymlink import repro
from asymlink.cli import cli
from asymlink.report_html import browser_check, find_chromium, notes_html
from asymlink.repro import Entry
from asymlink.repro.base import _REGISTRY

SUBSET = ["_selftest", "adsl-problem", "adsl-atm"]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


@pytest.fixture(scope="module")
def subset_report(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("report")
    code, stdout, stderr = invoke("reproduce", *SUBSET, "--quick", "--out", str(out))
    assert code == 0, stderr
    assert f"report: {out / 'index.html'}" in stdout
    return out


def pages(out: Path) -> list[Path]:
    return sorted(out.rglob("index.html"))


def test_index_lists_every_entry_with_relative_links(subset_report: Path) -> None:
    index = (subset_report / "index.html").read_text()
    for entry_id in SUBSET:
        assert f'<a href="{entry_id}/index.html">{entry_id}</a>' in index
    assert "mode: quick" in index and "total runtime:" in index
    data = json.loads((subset_report / "report.json").read_text())
    assert [e["id"] for e in data["entries"]] == SUBSET
    assert data["quick"] is True
    for e in data["entries"]:
        assert e["status"] in ("match", "mismatch") and e["wall_s"] > 0 and e["checks"]
        assert (subset_report / e["page"]).is_file()
        for f in e["figures"]:
            assert (subset_report / f).is_file()
    for page in pages(subset_report):
        text = page.read_text()
        assert not re.search(r'(src|href)="(https?:)?//', text), page
        assert "<style>" in text          # no stylesheet from elsewhere


def test_entry_page_puts_the_papers_numbers_beside_ours(subset_report: Path) -> None:
    page = (subset_report / "adsl-atm" / "index.html").read_text()
    report = json.loads((subset_report / "report.json").read_text())
    atm = next(e for e in report["entries"] if e["id"] == "adsl-atm")
    for check in atm["checks"]:
        assert f"<td>{check['metric']}</td>" in page
        assert f'<span class="{check["status"]}">{check["status"]}</span>' in page
    assert "The paper's numbers and ours" in page and "Expected orderings" in page
    assert "Parameters fixed before the runs" in page and '<h2 id="notes">' in page
    assert '<a href="../index.html">' in page
    assert '<a href="scenarios/paper.toml">paper.toml</a>' in page
    assert (subset_report / "adsl-atm" / "scenarios" / "paper.toml").is_file()
    assert "runtime:" in page and '<img src="figures/' in page


def test_notes_markdown() -> None:
    out = notes_html("First **bold** and `code` <x>.\n\n- one\n- two\n  continued")
    assert "<p>First <strong>bold</strong> and <code>code</code> &lt;x&gt;.</p>" in out
    assert "<ul><li>one</li><li>two continued</li></ul>" in out


def test_a_failing_entry_is_reported_and_the_rest_still_run(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(out_dir: Path, quick: bool) -> dict[str, Any]:
        raise RuntimeError("the engine exploded")

    broken = Entry(id="_selftest", paper="p", title="broken on purpose", run=boom)
    monkeypatch.setitem(_REGISTRY, "_selftest", broken)
    code, stdout, stderr = invoke("reproduce", "_selftest", "adsl-problem", "--quick",
                                  "--out", str(tmp_path))
    assert code == 1
    assert "Error: _selftest failed after" in stderr and "the engine exploded" in stderr
    assert "failed: _selftest" in stdout
    data = json.loads((tmp_path / "report.json").read_text())
    assert [e["status"] for e in data["entries"]] == ["error", "mismatch"]
    page = (tmp_path / "_selftest" / "index.html").read_text()
    assert "RuntimeError: the engine exploded" in page
    assert '<span class="error">error</span>' in (tmp_path / "index.html").read_text()


def test_figures_outside_the_entry_are_copied_in(tmp_path: Path) -> None:
    from asymlink.plot import new_axes, save
    from asymlink.report_html import outcome_of, write_report

    elsewhere = tmp_path / "elsewhere"

    def run(out_dir: Path, quick: bool) -> dict[str, Any]:
        return {"runs": 2, "events": {"long": 5, "short": 3}, "duration_s": {"x": 1.0}}

    def figures(out_dir: Path, metrics: Any) -> list[Path]:
        ax = new_axes()
        ax.plot([0, 1], [0, 1])
        return [save(ax.figure, elsewhere / "line.png")]

    entry = Entry(id="_selftest", paper="p", title="t", run=run, figures=figures)
    report_dir = tmp_path / "report"
    outcome = outcome_of(entry, report_dir / "_selftest", quick=True)
    write_report([outcome], report_dir, quick=True)
    assert (report_dir / "_selftest" / "figures" / "line.png").is_file()
    assert '<img src="figures/line.png"' in (report_dir / "_selftest" / "index.html").read_text()


def test_the_command_rejects_all_with_ids(tmp_path: Path) -> None:
    code, _, err = invoke("reproduce", "all", "adsl-atm", "--out", str(tmp_path))
    assert code == 2 and "give `all` alone" in err
    code, _, err = invoke("reproduce", "adsl-atm", "nosuch", "--out", str(tmp_path))
    assert code == 2 and "no reproduction 'nosuch'" in err


# --- in a real browser -----------------------------------------------------------------------


def chromium() -> str:
    binary = find_chromium()
    if binary is None:
        pytest.skip("no Chromium: the browser check of the report is skipped (scripts/test.sh "
                    "installs Debian's chromium when it runs as root with apt)")
    return binary


def test_report_passes_the_browser_check(subset_report: Path) -> None:
    result = browser_check(subset_report, chromium())
    assert result["problems"] == []
    assert result["pages"][0] == "/index.html"
    assert sorted(result["pages"]) == sorted(["/index.html", *(f"/{e}/index.html" for e in SUBSET)])
    assert result["requests"] > 10


def test_the_browser_check_finds_broken_images_and_links(subset_report: Path,
                                                         tmp_path: Path) -> None:
    import shutil

    broken = tmp_path / "broken"
    shutil.copytree(subset_report, broken)
    figure = sorted((broken / "adsl-atm" / "figures").glob("*.png"))[0]
    figure.unlink()
    (broken / "adsl-problem" / "metrics.json").unlink()
    page = broken / "_selftest" / "index.html"
    page.write_text(page.read_text().replace('href="#top"', 'href="#nowhere"'))
    problems = browser_check(broken, chromium())["problems"]
    joined = "\n".join(problems)
    assert f"/adsl-atm/index.html: image figures/{figure.name} did not load" in joined
    assert "/adsl-problem/index.html: link metrics.json -> HTTP 404" in joined
    assert "/_selftest/index.html: link #nowhere -> no #nowhere" in joined


def test_whole_catalog_report_in_the_browser(tmp_path: Path) -> None:
    binary = chromium()
    args = ["reproduce", "all", "--out", str(tmp_path)]
    if os.environ.get("ASYMLINK_REPORT_FULL") != "1":
        args.append("--quick")
    code, _, stderr = invoke(*args)
    assert code == 0, stderr
    # `all` is the catalog: the framework's self-test entry is not part of it.
    assert not (tmp_path / "_selftest").exists()
    result = browser_check(tmp_path, binary)
    assert result["problems"] == []
    assert len(result["pages"]) == len(repro.entries()) + 1
