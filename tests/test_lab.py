"""The namespace lab: scenario files, `asymlink lab up|run|down`, metrics and tables.

Validation tests run anywhere; the rest need root and network namespaces and are skipped
with the reason where that is not possible.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pandas as pd
import pytest
from click.testing import CliRunner

from asymlink.cli import cli
from asymlink.lab import Lab, LabError, LabScenario, bench, run_scenario
from asymlink.lab.bench import (
    NotMeasured,
    goodput_gbps,
    one_client_per_worker,
    sample_interval,
    scenario_path,
    shipped_scenarios,
    subscriber_worker,
    tail_parts,
)
from asymlink.lab.box import box_config
from asymlink.lab.netns import client_addr
from asymlink.lab.scenario import HOST_PRIORITY, TRAFFIC, traffic_argv

ROOT = Path(__file__).resolve().parents[1]


def _short(name: str, **over: object) -> LabScenario:
    sc = LabScenario.from_file(scenario_path(name))
    for k, v in over.items():
        setattr(sc, k, v)
    return sc


# --- scenario files (no privileges needed) ------------------------------------------------


def test_shipped_scenarios_parse() -> None:
    names = [n for n, _ in shipped_scenarios()]
    assert {"quick", "adsl-problem", "adsl-fix", "ackfilter-off", "ackfilter-on"} <= set(names)
    for n in names:
        sc = LabScenario.from_file(scenario_path(n))
        assert sc.flows and sc.duration > 0


@pytest.mark.parametrize(("doc", "needle"), [
    ({"bogus": 1}, "bogus"),
    ({"duration": "10"}, "duration"),
    ({"flows": [{"from": "client", "to": "client"}]}, "flows[0]"),
    ({"flows": [{"from": "client", "to": "server", "start": "5s", "stop": "1s"}]}, "flows[0]"),
    ({"flows": [{"from": "client", "to": "server", "rate": "8mbps"}]}, "flows[0].rate"),
    ({"flows": [{"from": "client", "to": "server", "cc": "BBR v1"}]}, "flows[0].cc"),
    ({"probes": [{"kind": "traceroute", "from": "client", "to": "server"}]}, "probes[0].kind"),
    ({"box": {"interfaces": {"a": "x"}}}, "box.interfaces"),
    ({"forwarding": "magic"}, "forwarding"),
    ({"hosts": {"realtime_priority": 100}}, "hosts.realtime_priority"),
    ({"hosts": {"realtime_priority": True}}, "hosts.realtime_priority"),
    ({"hosts": {"nice": 5}}, "hosts"),
])
def test_scenario_errors_name_the_key(doc: dict, needle: str) -> None:
    with pytest.raises(LabError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        LabScenario.from_dict(doc)


def test_the_lab_box_runs_under_sched_fifo_unless_the_scenario_says(tmp_path: Path) -> None:
    lab = cast(Lab, SimpleNamespace(dir=tmp_path))  # box_config reads only `dir`
    body = {"seed": 1, "emulation": {"to_a": {"rate": "8Mbit"}}}
    assert box_config(lab, body, None)["process"] == {"realtime_priority": 20}
    assert box_config(lab, body, None, role="access")["process"] == {"realtime_priority": 20}
    own = box_config(lab, {**body, "process": {"realtime_priority": 5, "cpu": 1}}, None)
    assert own["process"] == {"realtime_priority": 5, "cpu": 1}
    off = box_config(lab, {**body, "process": {"realtime_priority": 0}}, None)
    assert off["process"] == {}
    assert body == {"seed": 1, "emulation": {"to_a": {"rate": "8Mbit"}}}, "left as it was"


def test_the_lab_hosts_run_under_sched_fifo_unless_the_scenario_says() -> None:
    """The hosts' traffic tools run under SCHED_FIFO below the box (`HOST_PRIORITY`): a
    tool the machine's other work preempts while it owns its socket leaves the segments
    that arrive meanwhile in the socket's backlog, and the receiver then acknowledges them
    back to back (docs/tcp.md, "The fixed bottleneck's queue")."""
    assert 0 < HOST_PRIORITY < box_config(
        cast(Lab, SimpleNamespace(dir=Path("/x"))), {}, None)["process"]["realtime_priority"]
    flows = {"flows": [{"from": "server", "to": "client"}]}
    sc = LabScenario.from_dict(flows)
    assert sc.host_priority == HOST_PRIORITY
    argv = traffic_argv(["sink", "--port", "5001"], "", sc.host_priority)
    assert argv[:3] == ["chrt", "-f", str(HOST_PRIORITY)] and argv[-3:] == [
        "cubic", "--port", "5001"]
    off = LabScenario.from_dict({**flows, "hosts": {"realtime_priority": 0}})
    assert off.host_priority == 0
    assert traffic_argv(["sink"], "bbr", 0)[1:] == [TRAFFIC, "sink", "--cc", "bbr"]


def test_unknown_shipped_name() -> None:
    with pytest.raises(LabError, match="quick"):
        scenario_path("no-such-scenario")


def test_bench_puts_one_client_on_each_worker() -> None:
    # The same hash as the box's fanout program (asymlink_live::sys::subscriber_hash,
    # whose test checks the same values): 4777 and 7034.
    assert subscriber_worker("198.18.0.1", 65536) == 4777
    assert subscriber_worker("198.18.0.14", 65536) == 7034
    for n in (1, 2, 3):
        roles = one_client_per_worker(n)
        assert len(set(roles)) == n
        addrs = [client_addr(1 if r == "client" else int(r[6:])) for r in roles]
        assert [subscriber_worker(a, n) for a in addrs] == list(range(n))


def test_bench_goodput_needs_samples_across_the_window() -> None:
    # 1 s transfers (the docs' root commands): the window after the 0.5 s warm-up is cut
    # into 20 samples, not two (a loaded receiver then missed one and the run failed).
    assert sample_interval(1.0) == pytest.approx(0.025)
    assert sample_interval(5.0) == pytest.approx(0.225)
    assert sample_interval(30.0) == 0.25
    # 125 MB/s between 10.6 and 10.9 s: 1 Gbit/s; the samples outside [10.5, 11.0] are
    # not counted.
    samples = [(10.0, 0), (10.6, 100_000_000), (10.75, 118_750_000),
               (10.9, 137_500_000), (11.2, 999_999_999)]
    assert goodput_gbps(samples, 10.5, 11.0) == pytest.approx(1.0)
    # One sample in the window, or two only 0.1 s of 0.5 s apart: no goodput, and why.
    with pytest.raises(NotMeasured, match=r"sampled 1 time\(s\) over 0.00 s of the 0.50 s"):
        goodput_gbps([(10.0, 0), (10.7, 5), (11.2, 9)], 10.5, 11.0)
    with pytest.raises(NotMeasured, match="over 0.10 s"):
        goodput_gbps([(10.6, 0), (10.7, 5)], 10.5, 11.0)


def test_bench_tail_parts_are_the_mean_of_the_slow_bands() -> None:
    def band(count: int, total: int, wakeup: int, prev_tx: int) -> dict[str, object]:
        return {"count": count, "total_ns": total, "off_cpu_ns": count * 1000,
                "send_frames": count * 8,
                "parts_ns": {"wakeup": wakeup, "prev_tx": prev_tx}}
    bd = {"bands_us": {"0-25": band(1000, 15_000_000, 5_000_000, 10_000_000),
                       "100-200": band(3, 450_000, 150_000, 300_000),
                       "200-500": band(1, 250_000, 50_000, 200_000),
                       "1000-": band(0, 0, 0, 0)}}
    t = tail_parts(bd)
    assert t is not None
    assert t["frames"] == 4
    assert t["mean_us"] == pytest.approx(175.0)
    assert t["parts_us"] == {"wakeup": pytest.approx(50.0), "prev_tx": pytest.approx(125.0)}
    assert t["off_cpu_us"] == pytest.approx(1.0)
    assert tail_parts(bd, from_us=1000) is None
    assert tail_parts(None) is None


def test_bench_runs_a_starved_transfer_again_then_reports_it_not_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[int] = []

    def starved_twice(lab: object, seconds: float, roles: list[str], rate_bps: float,
                      port: int) -> list[float]:
        calls.append(port)
        if len(calls) < 3:
            raise NotMeasured("the receiver sampled 1 time(s)")
        return [1.5 for _ in roles]

    monkeypatch.setattr(bench, "_transfers_once", starved_twice)
    assert bench.transfers(None, 1.0, ["client", "client4"]) == [1.5, 1.5]  # type: ignore[arg-type]
    assert len(calls) == 3

    def always_starved(*args: object) -> list[float]:
        raise NotMeasured("the receiver sampled 1 time(s)")

    monkeypatch.setattr(bench, "_transfers_once", always_starved)
    skipped: dict[str, str] = {}
    got = bench._measured(skipped, "kernel_gbps", lambda: bench.transfer(None, 1.0))  # type: ignore[arg-type]
    assert got is None
    assert skipped == {"kernel_gbps": "the receiver sampled 1 time(s), in each of 3 attempts"}
    assert bench._measured(skipped, "box_gbps", lambda: 2.0) == 2.0
    assert "box_gbps" not in skipped


# --- real labs -----------------------------------------------------------------------------


def test_lab_up_and_down_leave_nothing(live_ok: None) -> None:
    runner = CliRunner()
    res = runner.invoke(cli, ["lab", "up", "--name", "al-tupd"])
    assert res.exit_code == 0, res.output
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    try:
        assert "al-tupd-c" in out and "al-tupd-r" in out and "al-tupd-s" in out
        assert "al-tupd" in runner.invoke(cli, ["lab", "list"]).output
        res = runner.invoke(cli, ["lab", "up", "--name", "al-tupd"])
        assert res.exit_code == 2 and "already exists" in res.output
    finally:
        res = runner.invoke(cli, ["lab", "down", "al-tupd"])
    assert res.exit_code == 0, res.output
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "al-tupd" not in out
    assert "al-tupd" not in Lab.names()


def test_lab_run_writes_tables_metrics_and_pcaps(live_ok: None, tmp_path: Path) -> None:
    sc = _short("quick", duration=3.0)
    for f in sc.flows:
        f.stop = 3.0
    for p in sc.probes:
        p.stop = 3.0
    m = run_scenario(sc, tmp_path)
    assert set(m["throughput_mbps"]) == {"download", "upload"}
    # Emulated 50 Mbit/s down, 20 Mbit/s up, shared with the other direction's ACKs.
    assert 5 < m["throughput_mbps"]["download"] <= 50.5
    assert 2 < m["throughput_mbps"]["upload"] <= 20.5
    assert m["ping_rtt_ms"]["ping"]["count"] >= 5
    assert m["echo_latency_ms"]["typing"]["p50"] >= 10.0, "two 5 ms propagation delays"
    # Every traffic tool ran under SCHED_FIFO at the lab's hosts' priority.
    assert m["host_priority"] == {"download.send": HOST_PRIORITY, "download.sink": HOST_PRIORITY,
                                  "upload.send": HOST_PRIORITY, "upload.sink": HOST_PRIORITY,
                                  "ping": HOST_PRIORITY, "typing": HOST_PRIORITY}
    assert json.loads((tmp_path / "metrics.json").read_text()) == m
    flows = pd.read_csv(tmp_path / "flows.csv")
    assert {"cwnd_bytes", "srtt_ms", "bytes_delivered"} <= set(flows.columns)
    assert flows["bytes_delivered"].max() > 0
    meas = pd.read_csv(tmp_path / "measurements.csv")
    assert set(meas["metric"]) == {"echo_latency_s", "ping_rtt_s"}
    queues = pd.read_csv(tmp_path / "queues.csv")
    assert set(queues["queue"]) >= {"box.to_a", "box.to_b"}
    assert (tmp_path / "to_a.pcap").stat().st_size > 1000
    assert "under SCHED_FIFO priority 20" in (tmp_path / "box.log").read_text()
    stats = json.loads((tmp_path / "box_stats.json").read_text())
    for d in stats["directions"].values():
        assert d["received"] == d["sent"] + sum(d["discarded"].values()) + d["held"]
    assert Lab.names() == [] or all(not n.startswith("al-") or n != "quick" for n in Lab.names())


def test_lab_kernel_baseline_and_cli(live_ok: None, tmp_path: Path) -> None:
    scen = tmp_path / "kernel.toml"
    scen.write_text('name = "kernel"\nduration = "2s"\nforwarding = "kernel"\n'
                    '[[flows]]\nname = "bulk"\nfrom = "client"\nto = "server"\n'
                    '[[probes]]\nname = "ping"\nkind = "ping"\nfrom = "client"\nto = "server"\n')
    res = CliRunner().invoke(cli, ["lab", "run", str(scen), "--out", str(tmp_path / "out")])
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert m["forwarding"] == "kernel" and m["throughput_mbps"]["bulk"] > 50
    assert "box" not in m


def test_adsl_problem_and_fix_order(live_ok: None, tmp_path: Path) -> None:
    """The ADSL problem and its fix with real Linux TCP (shortened): once the upload fills
    the modem's buffer, typed echoes wait behind it; with the box shaping the uplink below
    the line rate and ACKs first, they do not, and the download keeps its rate. (The
    comparison with the simulator is tests/test_parity.py.)"""
    results = {}
    for name in ("adsl-problem", "adsl-fix"):
        sc = _short(name, duration=9.0, windows={"contended": (5.0, 9.0)})
        for f in sc.flows:
            f.stop = 9.0
            if f.name == "upload":
                f.start = 3.0
        for p in sc.probes:
            p.stop = 9.0
        results[name] = run_scenario(sc, tmp_path / name)
    prob, fix = results["adsl-problem"], results["adsl-fix"]
    echo_p = prob["echo_latency_ms_in"]["contended"]["typing"]["p50"]
    echo_f = fix["echo_latency_ms_in"]["contended"]["typing"]["p50"]
    assert echo_p > 2 * echo_f, (echo_p, echo_f)
    down_p = prob["throughput_mbps_in"]["contended"]["download"]
    down_f = fix["throughput_mbps_in"]["contended"]["download"]
    assert down_f >= 0.95 * down_p, (down_p, down_f)
    assert fix["throughput_mbps_in"]["contended"]["upload"] > 0.05


def test_traffic_without_a_report_writes_nothing(tmp_path: Path) -> None:
    """The traffic helpers' report is optional: without one nothing is written (it used
    to be os.devnull, and the atomic rename then replaced /dev/null with a file as root)."""
    from asymlink.lab import traffic

    args = traffic.parser().parse_args(["sink", "--port", "5001", "--seconds", "1"])
    assert args.report is None
    traffic._write(None, {"kind": "sink"})
    traffic._write(str(tmp_path / "r.json"), {"kind": "sink"})
    # Every report records the scheduling the tool ran under (this test's: the ordinary).
    assert json.loads((tmp_path / "r.json").read_text()) == {"kind": "sink",
                                                             "sched_priority": 0}
