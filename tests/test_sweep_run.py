"""Running sweeps: a 300-point sweep of a tiny scenario on local processes and on a Dask
LocalCluster gives identical results; an interrupted (SIGINT) and a killed (SIGKILL)
sweep resume from the cache; the cache survives renamed metrics and reruns for new ones;
the `asymlink sweep` command's outputs and errors."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from asymlink.cli import cli
from asymlink.sweep import (
    Cache,
    PointTask,
    SweepSpec,
    engine_fingerprint,
    run_point,
    run_sweep,
)

# 10 rates × 10 buffers × 3 seeds = 300 points; 2 % loss makes the seeds matter.
SPEC = """\
name = "tiny-grid"
base = "tiny.toml"
seeds = [1, 2, 3]

[overrides]
duration = "{duration}"
"links.1.loss" = 0.02
"links.1.to_a.queue" = {{ kind = "fifo", limit = "100p" }}

[grid."links.1.to_a.rate"]
min = 128
max = 1024
count = 10
log = true
integer = true
unit = "kbit"

[grid."links.1.to_a.queue.limit"]
values = [2, 3, 4, 6, 8, 12, 16, 24, 32, 64]
unit = "p"

[[metrics]]
name = "down_bps"
table = "flow_summary"
column = "goodput_bps"
where = {{ flow = "down" }}

[[metrics]]
name = "up_drops"
table = "queue_summary"
column = "dropped"
where = {{ queue = "access:to_a" }}

[[metrics]]
name = "max_cwnd"
table = "flows"
column = "cwnd_bytes"
agg = "max"
where = {{ flow = "down" }}

[[plots]]
x = "links.1.to_a.queue.limit"
y = "down_bps"
hue = "links.1.to_a.rate"
logx = true
"""

IGNORE = ["sim_wall_s"]   # wall-clock time is the only thing that may differ


def write_spec(directory: Path, scenario_toml: str, duration: str = "1s",
               extra: str = "") -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "tiny.toml").write_text(scenario_toml)
    path = directory / "sweep.toml"
    path.write_text(SPEC.format(duration=duration) + extra)
    return path


@pytest.fixture(scope="module")
def local_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pd.DataFrame, float]:
    """The reference: the whole sweep on 2 local processes."""
    from conftest import SCENARIO_TOML

    d = tmp_path_factory.mktemp("local")
    spec = SweepSpec.from_file(write_spec(d, SCENARIO_TOML))
    start = time.perf_counter()
    result = run_sweep(spec, d / "out", workers=2)
    wall = time.perf_counter() - start
    assert (result.points, result.cached, result.ran, result.failed) == (300, 0, 300, 0)
    return d, result.data, wall


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=IGNORE), b.drop(columns=IGNORE))


def test_local_sweep_writes_the_dataset(local_run: tuple[Path, pd.DataFrame, float]) -> None:
    d, data, wall = local_run
    out = d / "out"
    print(f"local sweep: 300 points in {wall:.2f} s")
    assert len(data) == 300
    on_disk = pd.read_parquet(out / "results.parquet")
    pd.testing.assert_frame_equal(on_disk, data)
    assert list(data.columns[:5]) == ["point", "config", "links.1.to_a.rate",
                                      "links.1.to_a.queue.limit", "seed"]
    assert data["links.1.to_a.rate"].min() == 128 and data["links.1.to_a.rate"].max() == 1024
    assert (data["error"] == "").all()
    assert data["down_bps"].notna().all() and (data["max_cwnd"] > 0).all()
    # the seeds matter (random loss), so the confidence intervals are real
    assert data.groupby("config")["trace_hash"].nunique().min() == 3
    agg = pd.read_parquet(out / "aggregate.parquet")
    assert len(agg) == 100 and (agg["down_bps_n"] == 3).all()
    assert (agg["down_bps_ci_low"] <= agg["down_bps_mean"]).all()
    assert (out / "figures").is_dir() and len(list((out / "figures").glob("*.png"))) == 1
    summary = (out / "summary.md").read_text()
    assert "- points: 300 (100 configurations × 3 seeds)" in summary
    meta = json.loads((out / "sweep.json").read_text())
    assert meta["ran"] == 300 and meta["engine"] == engine_fingerprint()
    assert len(list((out / "cache").glob("*.json"))) == 300


def test_dask_local_cluster_gives_identical_results(
        local_run: tuple[Path, pd.DataFrame, float], tmp_path: Path) -> None:
    distributed = pytest.importorskip("distributed")
    d, reference, local_wall = local_run
    spec = SweepSpec.from_file(d / "sweep.toml")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        start = time.perf_counter()
        result = run_sweep(spec, tmp_path / "dask", scheduler=cluster.scheduler_address)
        wall = time.perf_counter() - start
    print(f"300 points: local {local_wall:.2f} s, Dask LocalCluster {wall:.2f} s")
    assert result.ran == 300 and result.failed == 0
    assert result.executor.startswith("Dask at tcp://") and "(2 workers)" in result.executor
    same(result.data, reference)


def test_cached_sweep_runs_nothing(local_run: tuple[Path, pd.DataFrame, float]) -> None:
    d, reference, _ = local_run
    result = run_sweep(SweepSpec.from_file(d / "sweep.toml"), d / "out", workers=2)
    assert (result.cached, result.ran) == (300, 0)
    same(result.data, reference)


def _cache_count(out: Path) -> int:
    return len(list((out / "cache").glob("*.json")))


def _start(spec: Path, out: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", "from asymlink.cli import main; main()", "sweep", str(spec),
         "--out", str(out),
         "--workers", "1", "--no-progress"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        # Ctrl-C must reach it even when the tests run as a background job, whose children
        # inherit SIGINT ignored (Python then installs no KeyboardInterrupt handler).
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))


def _wait_for_cache(proc: subprocess.Popen[str], out: Path, at_least: int) -> int:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        n = _cache_count(out) if (out / "cache").is_dir() else 0
        if n >= at_least:
            return n
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.01)
    raise AssertionError("the sweep made no progress")


def test_interrupted_and_killed_sweeps_resume(local_run: tuple[Path, pd.DataFrame, float],
                                              tmp_path: Path, scenario_toml: str) -> None:
    _, reference, _ = local_run
    spec = write_spec(tmp_path, scenario_toml)
    out = tmp_path / "out"
    # Ctrl-C: the command stops, says how far it got, and exits with 130.
    proc = _start(spec, out)
    _wait_for_cache(proc, out, 20)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "points are cached; run the same command again to continue" in err
    after_int = _cache_count(out)
    assert 20 <= after_int < 300
    # SIGKILL to the whole process group: nothing gets to clean up.
    proc = _start(spec, out)
    _wait_for_cache(proc, out, after_int + 20)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    after_kill = _cache_count(out)
    assert after_int + 20 <= after_kill < 300
    # The same command again finishes the rest, and the data is the uninterrupted run's.
    code, stdout, stderr = invoke("sweep", str(spec), "--out", str(out), "--workers", "2",
                                  "--no-progress")
    assert code == 0, stderr
    assert f"300 points (100 configurations × 3 seeds): {after_kill} cached, " \
           f"{300 - after_kill} run, 0 failed" in stdout
    same(pd.read_parquet(out / "results.parquet"), reference)


def test_cache_survives_renamed_metrics_and_reruns_for_new_ones(
        tmp_path: Path, scenario_toml: str) -> None:
    small = 'seeds = [1]\n'
    spec_path = write_spec(tmp_path, scenario_toml)
    text = spec_path.read_text().replace("seeds = [1, 2, 3]\n", small)
    text = text.replace("count = 10\n", "count = 2\n")
    spec_path.write_text(text)
    first = run_sweep(SweepSpec.from_file(spec_path), tmp_path / "out", workers=1)
    assert first.ran == 20
    spec_path.write_text(text.replace('name = "down_bps"', 'name = "download_bps"')
                         .replace('y = "down_bps"', 'y = "download_bps"'))
    renamed = run_sweep(SweepSpec.from_file(spec_path), tmp_path / "out", workers=1)
    assert (renamed.cached, renamed.ran) == (20, 0)
    assert renamed.data["download_bps"].tolist() == first.data["down_bps"].tolist()
    spec_path.write_text(text + '\n[[metrics]]\nname = "events_run"\ntable = "meta"\n'
                         'column = "events"\n')
    more = run_sweep(SweepSpec.from_file(spec_path), tmp_path / "out", workers=1)
    assert (more.cached, more.ran) == (0, 20)    # reruns; the trace hashes must agree
    assert (more.data["events_run"] == more.data["events"]).all()
    record = Cache(tmp_path / "out" / "cache").load(more.data["key"][0])
    assert record is not None and len(record["metrics"]) == 4
    fresh = run_sweep(SweepSpec.from_file(spec_path), tmp_path / "out", workers=1, fresh=True,
                      keep_runs=True)
    assert fresh.ran == 20
    assert (tmp_path / "out" / "runs" / fresh.data["key"][0] / "flows.parquet").is_file()


def test_run_point_reports_failures() -> None:
    record = run_point(PointTask("k", "duration = 5", "bad.toml", ()))
    assert record["key"] == "k" and "ScenarioError" in record["error"]
    assert "duration" in record["error"]


def test_any_executor(tmp_path: Path, scenario_toml: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    spec_path = write_spec(tmp_path, scenario_toml)
    spec_path.write_text(spec_path.read_text().replace("count = 10\n", "count = 2\n"))
    with ThreadPoolExecutor(2) as ex:
        result = run_sweep(SweepSpec.from_file(spec_path), tmp_path / "out", executor=ex)
    assert result.ran == 60 and result.executor == "ThreadPoolExecutor"


# --- the command ------------------------------------------------------------------------


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, list(args))
    return result.exit_code, result.stdout, result.stderr


def test_cli_check_runs_nothing(tmp_path: Path, scenario_toml: str) -> None:
    spec = write_spec(tmp_path, scenario_toml)
    code, out, _ = invoke("sweep", str(spec), "--check")
    assert code == 0
    assert f"ok: {spec}: 300 points (100 configurations × 3 seeds), 3 metrics, 1 plot" in out
    assert "configuration 0: links.1.to_a.rate='128kbit', links.1.to_a.queue.limit='2p'" in out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("edit", "fragment"),
    [(("seeds = [1, 2, 3]", "seeds = [1, 2, 3]\nsamples = 3"), "unknown key 'samples'"),
     (('flow = "down"', 'flow = "dow"'), "no flow 'dow' in the scenario (flows: down, up)"),
     (("values = [2, 3,", "values = [0, 3,"),
      "fifo.limit: must be positive [30 points, e.g. point 0: links.1.to_a.rate='128kbit', "
      "links.1.to_a.queue.limit='0p', seed=1]")],
)
def test_cli_bad_spec_exits_2_before_running(tmp_path: Path, scenario_toml: str,
                                             edit: tuple[str, str], fragment: str) -> None:
    spec = write_spec(tmp_path, scenario_toml)
    spec.write_text(spec.read_text().replace(*edit))
    code, _, err = invoke("sweep", str(spec), "--out", str(tmp_path / "out"))
    assert code == 2
    assert err.startswith(f"Error: {spec}: ")
    assert fragment in err
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_cli_missing_spec_and_out(tmp_path: Path) -> None:
    code, _, err = invoke("sweep", str(tmp_path / "absent.toml"), "--out", str(tmp_path))
    assert code == 2 and "absent.toml: No such file or directory" in err
    (tmp_path / "s.toml").write_text('base = "showcase"\n')
    code, _, err = invoke("sweep", str(tmp_path / "s.toml"))
    assert code == 2 and "give --out DIR" in err
    code, _, err = invoke("sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"),
                          "--workers", "2", "--scheduler", "tcp://127.0.0.1:9")
    assert code == 2 and "not both" in err


def test_cli_unreachable_scheduler(tmp_path: Path) -> None:
    pytest.importorskip("distributed")
    import dask

    (tmp_path / "s.toml").write_text('base = "showcase"\noverrides = { duration = "1s" }\n')
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code, _, err = invoke("sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"),
                              "--scheduler", "tcp://127.0.0.1:9", "--no-progress")
    assert code == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in err


def test_cli_reports_a_run(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(
        'base = "showcase"\nseeds = { count = 2 }\noverrides = { duration = "2s" }\n'
        '[[metrics]]\nname = "hops"\ntable = "meta"\ncolumn = "packet_hops"\n'
        '[[metrics]]\nname = "never"\ntable = "measurements"\ncolumn = "value"\n')
    code, out, err = invoke("sweep", str(tmp_path / "s.toml"), "--out", str(tmp_path / "o"),
                            "--workers", "1", "--no-progress")
    assert code == 0, err
    assert "2 points (1 configuration × 2 seeds): 0 cached, 2 run, 0 failed" in out
    assert "warning: metric never has no value in any point" in err
    data: Any = pd.read_parquet(tmp_path / "o" / "results.parquet")
    assert data["seed"].tolist() == [1, 2]
