"""The `asymlink` command: outputs, exit codes and one-line error messages."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from asymlink import Results, __version__
from asymlink.cli import cli, parse_set


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def assert_user_error(code: int, stderr: str, fragment: str) -> None:
    assert code == 2
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith("Error: ")
    assert fragment in lines[0]
    assert "Traceback" not in stderr


def test_version() -> None:
    code, out, _ = invoke("--version")
    assert code == 0
    assert __version__ in out


def test_examples_lists_showcase() -> None:
    code, out, _ = invoke("examples")
    assert code == 0
    assert "showcase" in out


def test_run_scenario_writes_tables_summary(scenario_file: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    code, stdout, _ = invoke("run", str(scenario_file), "--out", str(out), "--seed", "3",
                             "--set", "duration=1s", "--set", "flows.0.tcp.mss=536B",
                             "--no-progress")
    assert code == 0, stdout
    assert (out / "summary.md").read_text().startswith("# tiny\n")
    assert Results.load(out).meta["scenario"] == "tiny"
    assert json.loads((out / "meta.json").read_text())["format"] == "parquet"


def test_run_example_as_csv(tmp_path: Path) -> None:
    code, _, _ = invoke("run", "--example", "showcase", "--out", str(tmp_path), "--csv")
    assert code == 0
    assert json.loads((tmp_path / "meta.json").read_text())["format"] == "csv"


def test_run_missing_file(tmp_path: Path) -> None:
    code, _, err = invoke("run", str(tmp_path / "absent.toml"), "--out", str(tmp_path))
    assert_user_error(code, err, "absent.toml: No such file or directory")


def test_run_invalid_scenario(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("rate = [\n")
    code, _, err = invoke("run", str(bad), "--out", str(tmp_path / "o"))
    assert_user_error(code, err, str(bad))


@pytest.mark.parametrize(
    ("assignment", "fragment"),
    [("nokey", "--set expects KEY=VALUE"), ("=3", "--set expects KEY=VALUE"),
     ("links.9.rate=1Mbit", "links.9: index out of range")],
)
def test_run_bad_set(scenario_file: Path, tmp_path: Path, assignment: str, fragment: str) -> None:
    code, _, err = invoke("run", str(scenario_file), "--out", str(tmp_path), "--set", assignment)
    assert_user_error(code, err, fragment)


@pytest.mark.parametrize(
    ("args", "fragment"),
    [([], "no scenario: give a SCENARIO file or --example NAME"),
     (["SCENARIO", "--example", "showcase"], "either a SCENARIO file or --example NAME, not both")],
)
def test_run_needs_exactly_one_source(scenario_file: Path, tmp_path: Path, args: list[str],
                                      fragment: str) -> None:
    args = [str(scenario_file) if a == "SCENARIO" else a for a in args]
    code, _, err = invoke("run", *args, "--out", str(tmp_path))
    assert_user_error(code, err, fragment)


@pytest.mark.parametrize(
    ("assignment", "message", "written"),
    [("duration=-30s",
      "duration: duration '-30s' is negative; it must be positive, e.g. '200ms'", "duration = "),
     ("links.1.to_a.rate=-5Mbit", "links[1].to_a.rate: rate '-5Mbit' is negative",
      "to_a = { rate = "),
     ("links.1.to_a.rate=0kbit", "links[1].to_a.rate: must be positive", "to_a = { rate = ")],
)
def test_bad_values_name_the_key_and_the_line_of_the_shipped_example(
    tmp_path: Path, assignment: str, message: str, written: str
) -> None:
    from asymlink import examples

    lines = examples.load("showcase").to_toml().splitlines()
    line = next(i for i, text in enumerate(lines, 1) if text.startswith(written))
    code, _, err = invoke("run", "--example", "showcase", "--out", str(tmp_path), "--set",
                          assignment)
    assert_user_error(code, err, f"example:showcase: {message}")
    assert err.strip().endswith(f"(line {line})")
    assert "unknown unit" not in err


def test_a_binary_scenario_file_is_one_line_everywhere(scenario_file: Path,
                                                       tmp_path: Path) -> None:
    from asymlink import Scenario, ScenarioError

    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"name = 'x'\n\xff\xfe\x00\x01")
    expected = f"{binary}: not a UTF-8 text file (byte 0xff at line 2)"
    with pytest.raises(ScenarioError, match="not a UTF-8 text file"):
        Scenario.from_file(binary)
    code, _, err = invoke("run", str(binary), "--out", str(tmp_path / "o"))
    assert_user_error(code, err, expected)
    code, _, err = invoke("sweep", str(binary), "--check")
    assert_user_error(code, err, expected)
    code, out, err = invoke("validate", str(binary), str(scenario_file))
    assert code == 2
    assert expected in err and "Traceback" not in err
    assert f"ok: {scenario_file}" in out  # the files after it are still checked


def test_run_unknown_example(tmp_path: Path) -> None:
    code, _, err = invoke("run", "--example", "nope", "--out", str(tmp_path))
    assert_user_error(code, err, "no example named 'nope' (available: dslam, showcase)")


def test_parse_set_reads_toml_values_else_strings() -> None:
    assert parse_set(["a=3", "b=true", "c=1.5", 'd="x y"', "e=1Mbit", "f.g=[1, 2]", "h=a=b",
                      "i=1\nj=2"]) == {
        "a": 3, "b": True, "c": 1.5, "d": "x y", "e": "1Mbit", "f.g": [1, 2], "h": "a=b",
        "i": "1\nj=2",
    }


def test_validate(scenario_file: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("x = [")
    code, out, err = invoke("validate", str(scenario_file), str(bad), str(tmp_path / "no.toml"))
    assert code == 2
    assert f"ok: {scenario_file}" in out
    assert len(err.strip().splitlines()) == 2
    assert "Traceback" not in err
    assert invoke("validate", str(scenario_file))[0] == 0


def test_plot_results_dir(results: Results, tmp_path: Path) -> None:
    results.to_parquet(tmp_path / "r")
    code, out, _ = invoke("plot", str(tmp_path / "r"), "--out", str(tmp_path / "figs"))
    assert code == 0
    assert len(list((tmp_path / "figs").glob("*.png"))) == 4
    assert "cwnd.png" in out


def test_plot_of_a_non_results_dir(tmp_path: Path) -> None:
    code, _, err = invoke("plot", str(tmp_path))
    assert_user_error(code, err, "not a run's results directory")


def test_plot_of_a_reproduction_dir_says_where_the_runs_are(results: Results,
                                                            tmp_path: Path) -> None:
    (tmp_path / "metrics.json").write_text("{}")
    results.to_parquet(tmp_path / "runs" / "arm-a")
    results.to_parquet(tmp_path / "runs" / "arm-b")
    code, _, err = invoke("plot", str(tmp_path))
    assert_user_error(code, err, f"{tmp_path} is a reproduction holding 2 runs; each run's "
                                 f"results are in {tmp_path / 'runs'}/<scenario>")


def test_bench_sim_json() -> None:
    code, out, _ = invoke("bench", "sim", "--json", "--flows", "3", "--duration", "1",
                          "--bottleneck", "10000000")
    assert code == 0
    result = json.loads(out)
    assert result["flows"] == 3
    assert {"packet_hops_per_sec", "events_per_sec", "wall_s", "peak_rss_mb"} <= set(result)
    assert result["peak_rss_mb"] > 0
    # 3 flows for 1 s over 10 Mbit/s: about 830 data packets on each of 3 links.
    assert result["packet_hops"] > 2000
    # The run's trace hash: 16 hex digits, the same for the same configuration, another
    # for another one.
    assert len(result["trace_hash"]) == 16 and int(result["trace_hash"], 16) >= 0
    _, again, _ = invoke("bench", "sim", "--json", "--flows", "3", "--duration", "1",
                         "--bottleneck", "10000000")
    assert json.loads(again)["trace_hash"] == result["trace_hash"]
    _, other, _ = invoke("bench", "sim", "--json", "--flows", "2", "--duration", "1",
                         "--bottleneck", "10000000")
    assert json.loads(other)["trace_hash"] != result["trace_hash"]


def test_bench_sim_table() -> None:
    code, out, _ = invoke("bench", "sim", "--flows", "1", "--duration", "0.5",
                          "--bottleneck", "10000000")
    assert code == 0
    assert "packet_hops_per_sec" in out


def test_reproduce_list_hides_internal_entries() -> None:
    code, out, _ = invoke("reproduce", "--list")
    assert code == 0
    assert "_selftest" not in out


def test_piped_tables_are_not_cut_at_80_columns() -> None:
    code, out, _ = invoke("reproduce", "--list")
    assert code == 0
    assert "ack-delay-control-satellite" in out and "…" not in out
    assert max(map(len, out.splitlines())) > 80


def test_reproduce_list_takes_no_id() -> None:
    code, _, err = invoke("reproduce", "--list", "extra")
    assert_user_error(code, err, "--list takes no ID (got extra)")


def test_reproduce_internal_entry_by_id(tmp_path: Path) -> None:
    code, out, _ = invoke("reproduce", "_selftest", "--quick", "--out", str(tmp_path))
    assert code == 0, out
    assert "3 of 3 checks match" in out
    assert (tmp_path / "summary.md").is_file()
    assert (tmp_path / "metrics.json").is_file()


def test_reproduce_unknown_id(tmp_path: Path) -> None:
    code, _, err = invoke("reproduce", "nope", "--out", str(tmp_path))
    assert_user_error(code, err, "no reproduction 'nope'")


def test_reproduce_needs_out() -> None:
    code, _, err = invoke("reproduce", "_selftest")
    assert_user_error(code, err, "--out DIR")


@pytest.fixture(scope="module")
def installed() -> str:
    exe = Path(sys.executable).with_name("asymlink")
    if not exe.is_file():
        pytest.skip(f"no {exe}: install the package (pip install -e .)")
    return str(exe)


def test_installed_command_version(installed: str) -> None:
    proc = subprocess.run([installed, "--version"], capture_output=True, text=True, check=False)
    assert proc.returncode == 0
    assert __version__ in proc.stdout


def test_installed_command_user_error(installed: str, tmp_path: Path) -> None:
    proc = subprocess.run([installed, "run", str(tmp_path / "x.toml"), "--out", str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert_user_error(proc.returncode, proc.stderr, "x.toml: No such file or directory")


def test_a_run_too_long_for_memory_is_refused_up_front(tmp_path: Path) -> None:
    code, _, err = invoke("run", "--example", "showcase", "--out", str(tmp_path / "o"),
                          "--set", "duration=100000h")
    assert_user_error(code, err, "example:showcase: duration: this run would hold about 27.5 TB"
                                 " of time series in memory (3,600,000,001 samples of 14 rows")
    assert "--set monitor.interval=" in err and "monitor.queues=false" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("app", [
    'app = { kind = "web", main = "1KB", object_count = 20, object_size = "1KB", parallel = 4, '
    'pages = 2, think = "100ms" }',
    'app = { kind = "web", main = "1KB", object_count = 20, object_size = "1KB", parallel = 4, '
    'pages = 2, think = "100ms", persistent = true }',
    'app = { kind = "file_transfers", size = "1KB", gap = "1ms", count = 100 }',
    'app = { kind = "file_transfers", size = "2KB", '
    'gap = { dist = "exponential", mean = "20ms" } }',
])
def test_memory_estimate_counts_the_connections_an_app_opens(scenario_toml: str, app: str) -> None:
    # The peak number of flow rows per sample, measured, against the estimate's.
    from asymlink import Scenario, run
    from asymlink.runner import connections_at_once, estimate_memory

    src = scenario_toml.replace('app = { kind = "bulk" }', app, 1).replace(
        'duration = "2s"', 'duration = "6s"') + '\n[monitor]\ninterval = "10ms"\n'
    sc = Scenario.from_toml(src)
    flows = run(sc).flows
    peak = int(flows[flows["flow"] != "up"].groupby("t").size().max())
    estimated = connections_at_once(sc.data["flows"][0])
    assert peak > 1 or "persistent" in app   # the connections do multiply
    assert estimated >= peak
    rows_t0 = estimate_memory(Scenario.from_toml(scenario_toml),
                              Scenario.from_toml(scenario_toml).simulation())["rows"]
    assert estimate_memory(sc, sc.simulation())["rows"] >= rows_t0 - 1 + peak


def test_memory_estimate_scales_with_samples() -> None:
    from asymlink import examples
    from asymlink.runner import estimate_memory

    short = examples.load("showcase").with_overrides({"duration": "60s"})
    coarse = short.with_overrides({"monitor.interval": "1s"})
    a, b = estimate_memory(short, short.simulation()), estimate_memory(coarse, coarse.simulation())
    assert (a["samples"], a["rows"], b["samples"]) == (601, 14, 61)
    assert a["bytes"] == pytest.approx(b["bytes"] * 601 / 61)
