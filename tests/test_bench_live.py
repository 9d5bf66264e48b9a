"""`asymlink bench live --io`: the box's I/O modes a run measures, and the modes that
cannot run on a machine (AF_XDP unavailable, a box that does not start) reported as not
measured instead of ending the run. No privileges needed: nothing here builds a lab."""

from __future__ import annotations

import math
from typing import Any

import pytest
from click.testing import CliRunner

from asymlink.cli import cli
from asymlink.lab import LabError, bench
from asymlink.lab.bench import BOX_KEYS, IO_MODES, parse_io_modes


@pytest.mark.parametrize(("text", "modes"), [
    ("socket", ("socket",)),
    ("xdp", ("xdp",)),
    ("both", ("socket", "mmap")),
    ("all", ("socket", "mmap", "xdp")),
    ("socket,xdp", ("socket", "xdp")),
    (" mmap , socket ", ("mmap", "socket")),
])
def test_io_modes_are_one_a_list_or_a_group(text: str, modes: tuple[str, ...]) -> None:
    assert parse_io_modes(text) == modes
    assert set(modes) <= set(IO_MODES)


def test_a_mode_with_a_sender_thread() -> None:
    assert parse_io_modes("mmap,mmap+tx") == ("mmap", "mmap+tx")
    assert bench.io_process("mmap+tx") == {"io": "mmap", "tx_thread": True}
    assert bench.io_process("socket") == {"io": "socket"}
    body = bench._with_io(bench.UNSHAPED, "socket+tx")
    assert body["process"]["io"] == "socket" and body["process"]["tx_thread"] is True
    assert body["process"]["realtime_priority"] == bench.PROCESS["realtime_priority"]
    with pytest.raises(LabError, match="'xdp\\+tx': a sender thread needs one of"):
        parse_io_modes("xdp+tx")
    with pytest.raises(LabError, match="'mmap\\+tx' given twice"):
        parse_io_modes("mmap+tx,mmap+tx")
    assert bench.io_process("mmap+tx+poll") == {"io": "mmap", "tx_thread": True,
                                                 "busy_poll": "50us"}
    assert bench.io_process("socket+poll") == {"io": "socket", "busy_poll": "50us"}
    for bad in ("mmap+fast", "mmap+tx+tx", "tun+tx"):
        with pytest.raises(LabError, match=f"unknown mode '{bad.replace('+', '.')}'"):
            parse_io_modes(bad)


@pytest.mark.parametrize(("text", "says"), [
    ("tun", "unknown mode 'tun'"),
    ("socket,,xdp", "unknown mode ''"),
    ("socket,socket", "'socket' given twice"),
    ("both,xdp", "unknown mode 'both'"),
])
def test_bad_io_modes_are_named(text: str, says: str) -> None:
    with pytest.raises(LabError, match=says):
        parse_io_modes(text)


def test_io_options_are_checked_before_any_lab() -> None:
    r = CliRunner().invoke(cli, ["bench", "live", "--latency-rate", "fast"])
    assert r.exit_code != 0 and "--latency-rate" in r.output, r.output
    r = CliRunner().invoke(cli, ["bench", "live", "--io", "socket,tun"])
    assert r.exit_code != 0 and "--io: io: unknown mode 'tun'" in r.output, r.output
    r = CliRunner().invoke(cli, ["bench", "live", "--subscribers", "4", "--io", "socket,xdp"])
    assert r.exit_code != 0 and "one mode" in r.output, r.output
    # The subscriber-lines box has two workers unless told: xdp runs one.
    r = CliRunner().invoke(cli, ["bench", "live", "--subscribers", "4", "--io", "xdp"])
    assert r.exit_code != 0 and "--workers 1" in r.output, r.output


def test_xdp_is_not_measured_where_af_xdp_is_unavailable(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Without AF_XDP the mode's keys are None, the reason is under `not_measured.xdp`,
    and no box is started (the lab is never touched)."""
    monkeypatch.setattr(bench, "xdp_unavailable",
                        lambda: "AF_XDP sockets are not available here (Address family "
                                "not supported by protocol)")

    def no_box(*_: Any, **__: Any) -> Any:
        raise AssertionError("no box may start")

    monkeypatch.setattr(bench, "start_box", no_box)
    skipped: dict[str, str] = {}
    got = bench._measure_box(None, 1.0, "xdp", 2.0, skipped)  # type: ignore[arg-type]
    assert set(got) == set(BOX_KEYS)
    assert got["box_gbps"] is None and got["added_latency_p99_us"] is None
    assert math.isnan(got["box_vs_kernel"])
    assert skipped == {"xdp": "AF_XDP sockets are not available here (Address family not "
                              "supported by protocol)"}
    w = bench._measure_workers(None, 1.0, "xdp", ["client"], 1, 2.0,  # type: ignore[arg-type]
                               skipped)
    assert w["gbps"] is None and w["per_worker_received"] == []
    assert skipped["subscribers.xdp.1"].startswith("AF_XDP sockets are not available")


def test_xdp_runs_one_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bench, "xdp_unavailable", lambda: None)
    skipped: dict[str, str] = {}
    w = bench._measure_workers(None, 1.0, "xdp", ["client", "client2"], 2,  # type: ignore[arg-type]
                               2.0, skipped)
    assert w["gbps"] is None
    assert skipped == {"subscribers.xdp.2": 'io = "xdp" runs one worker'}


def test_an_xdp_box_that_does_not_start_is_tried_again_then_not_measured(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """AF_XDP sockets open but the box cannot bind or attach (a driver, a kernel without
    BPF): three attempts, then the box's own words under `not_measured.xdp`."""
    monkeypatch.setattr(bench, "xdp_unavailable", lambda: None)
    monkeypatch.setattr(bench.time, "sleep", lambda _s: None)
    starts: list[str] = []

    def failing(_lab: Any, body: dict[str, Any], **_: Any) -> Any:
        starts.append(body["process"]["io"])
        raise LabError("the box exited at start (1): asymlink-box: interfaces.a:\n"
                       "bind(AF_XDP, ifindex 7, queue 0, copy): Operation not supported")

    monkeypatch.setattr(bench, "start_box", failing)
    skipped: dict[str, str] = {}
    got = bench._measure_box(None, 1.0, "xdp", 2.0, skipped)  # type: ignore[arg-type]
    assert starts == ["xdp"] * bench.XDP_START_ATTEMPTS
    assert got["box_gbps"] is None
    assert skipped["xdp"].startswith('the box did not start with io = "xdp": ')
    assert skipped["xdp"].endswith("queue 0, copy): Operation not supported"), skipped
    # Another mode's failure to start is an error of the run, not a skipped point.
    with pytest.raises(LabError, match="exited at start"):
        bench._measure_box(None, 1.0, "mmap", 2.0, {})  # type: ignore[arg-type]
