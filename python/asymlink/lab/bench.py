"""`asymlink bench live`: forwarding speed of the live box, measured in a namespace lab.

One run measures, with real Linux TCP (one bulk flow client → server, offloads off,
MTU 1500):

* `kernel_gbps` — through a Linux bridge in the router namespace (kernel forwarding);
* `box_gbps` — through the box, unshaped (a 1000-packet FIFO each way, no emulation);
* `box_shaped_gbps` — through the box with ACK filtering and the five-class shaper (HTB)
  whose root is set to 1 Gbit/s, each direction (`SHAPED` below); the goodput, and
  `box_shaped_ip_gbps` the IP rate the shaper counts;
* `added_latency_p50_us` / `added_latency_p99_us` — time from the kernel's receive
  timestamp on the box's ingress socket to the return of the send call, for every packet
  of a transfer paced (`SO_MAX_PACING_RATE`) at half of `box_gbps`.

The box keys are measured for each `[process] io` mode asked for (`by_io`), against the
same kernel run; the top-level ones are those of the first mode.

With worker counts (`--workers 1,2`), `subscribers` adds one bulk transfer from each of
several client hosts at once (hosts the box's fanout puts on different workers), through
the kernel and through the unshaped box with each worker count and `io` mode.

Each goodput is taken from the receiver's samples over the window after a 0.5 s warm-up
(`goodput_gbps`); a transfer whose receiver, starved on a loaded machine, sampled too
little of it is run again, and after `ATTEMPTS` its point is None with the reason in
`not_measured` — the rest of the run stands.

The sender and receiver are Python processes (`traffic.py`), so on a slow machine they
can be the bottleneck of the kernel path; `sender_cpu_limited` says whether the kernel
number is close to what the same sender reaches over loopback in one namespace.
"""

from __future__ import annotations

import ipaddress
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from asymlink.lab.box import start_box
from asymlink.lab.netns import MAX_CLIENTS, TCP_CC, Lab, LabError, client_addr
from asymlink.lab.scenario import TRAFFIC

#: The forwarding thread runs under SCHED_FIFO (see docs/performance.md: on this shared
#: 2-core machine an ordinary-priority box waits behind compilers and traffic generators).
PROCESS = {"realtime_priority": 20, "horizon": "50us"}
UNSHAPED: dict[str, Any] = {"seed": 1, "process": PROCESS}
#: The five-class shaper (docs/adsl.md's tree, scaled to a 1 Gbit/s root): the paper's
#: classes from the classifier's `five_class` preset, ACKs first through a classic ACK
#: filter, interactive next, the bulk classes borrowing up to the root's rate. The
#: benchmark's transfer (port 5201) is `default`; its ACKs cross the `ack` class of the
#: other direction.
FIVE_CLASS_HTB: dict[str, Any] = {
    "kind": "htb", "default": "default", "classes": [
        {"name": "root", "rate": "1Gbit"},
        {"name": "ack", "parent": "root", "rate": "880Mbit", "ceil": "1Gbit", "prio": 0,
         "queue": {"kind": "ack_filter", "policy": "classic", "limit": "1000p"}},
        {"name": "interactive", "parent": "root", "rate": "36Mbit", "ceil": "200Mbit",
         "prio": 0, "queue": {"kind": "fifo", "limit": "100p"}},
        {"name": "bulk", "parent": "root", "rate": "84Mbit", "ceil": "1Gbit"},
        {"name": "good", "parent": "bulk", "rate": "42Mbit", "ceil": "800Mbit", "prio": 3,
         "queue": {"kind": "fifo", "limit": "1000p"}},
        {"name": "default", "parent": "bulk", "rate": "30Mbit", "ceil": "1Gbit", "prio": 5,
         "queue": {"kind": "fifo", "limit": "1000p"}},
        {"name": "bad", "parent": "bulk", "rate": "12Mbit", "ceil": "1Gbit", "prio": 7,
         "queue": {"kind": "fifo", "limit": "1000p"}},
    ]}
SHAPED: dict[str, Any] = {
    "seed": 1,
    "process": PROCESS,
    "to_b": {"classifier": {"preset": "five_class"}, "qdisc": FIVE_CLASS_HTB},
    "to_a": {"classifier": {"preset": "five_class"}, "qdisc": FIVE_CLASS_HTB},
}


def scenario_path(name_or_path: str) -> Path:
    """A lab scenario file: a path, or the name of a shipped one."""
    p = Path(name_or_path)
    if p.exists():
        return p
    shipped = Path(str(files("asymlink.lab").joinpath("scenarios", f"{name_or_path}.toml")))
    if shipped.exists():
        return shipped
    names = ", ".join(n for n, _ in shipped_scenarios())
    raise LabError(f"no scenario file or shipped lab scenario '{name_or_path}' ({names})")


def shipped_scenarios() -> list[tuple[str, str]]:
    """(name, description) of the shipped lab scenarios."""
    import tomllib

    d = Path(str(files("asymlink.lab").joinpath("scenarios")))
    out = []
    for p in sorted(d.glob("*.toml")):
        out.append((p.stem, str(tomllib.loads(p.read_text()).get("description", ""))))
    return out


#: The first part of each transfer left out of its goodput (slow start).
WARMUP_S = 0.5
#: How many receiver samples a measurement window is cut into (at most every 0.25 s).
SAMPLES_PER_WINDOW = 20
#: A goodput needs two samples in the window at least this fraction of it apart.
MIN_SPAN = 0.5
#: Attempts at a transfer whose receiver sampled too little of the window.
ATTEMPTS = 3


class NotMeasured(LabError):
    """A transfer whose receiver sampled too little of its window to give a goodput (a
    receiver not scheduled for most of the window on a loaded machine)."""


def sample_interval(seconds: float) -> float:
    """The receiver's sampling interval for a transfer of `seconds`: the window after the
    warm-up cut into `SAMPLES_PER_WINDOW`, at most 0.25 s."""
    return min(0.25, max(seconds - WARMUP_S, 0.01) / SAMPLES_PER_WINDOW)


def goodput_gbps(samples: list[tuple[float, int]], lo: float, hi: float) -> float:
    """Goodput in Gbit/s over `[lo, hi]` from a receiver's (time, cumulative bytes)
    samples: between the first and the last sample in the window. `NotMeasured` when
    fewer than two samples fall in it or they are less than `MIN_SPAN` of it apart."""
    pts = [(t, b) for t, b in samples if lo <= t <= hi]
    span = pts[-1][0] - pts[0][0] if pts else 0.0
    if len(pts) < 2 or span < MIN_SPAN * (hi - lo):
        raise NotMeasured(
            f"the receiver sampled {len(pts)} time(s) over {span:.2f} s of the "
            f"{hi - lo:.2f} s window (needs 2 samples {MIN_SPAN * (hi - lo):.2f} s apart)")
    (ta, ba), (tb, bb) = pts[0], pts[-1]
    return float((bb - ba) * 8 / (tb - ta) / 1e9)


def transfer(lab: Lab, seconds: float, rate_bps: float = 0.0, port: int = 5201) -> float:
    """One bulk TCP transfer client → server; returns the receiver's goodput in Gbit/s
    over the sending interval (the first 0.5 s excluded: slow start)."""
    return transfers(lab, seconds, ["client"], rate_bps, port)[0]


def transfers(lab: Lab, seconds: float, roles: list[str], rate_bps: float = 0.0,
              port: int = 5201) -> list[float]:
    """One bulk TCP transfer from each client host in `roles` to the server, all at once
    (ports `port`, `port` + 1, ...); returns each receiver's goodput in Gbit/s over the
    sending interval (the first 0.5 s excluded: slow start). A run whose receivers
    sampled too little of it (`goodput_gbps`) is run again, up to `ATTEMPTS` times in
    all; then `NotMeasured`."""
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return _transfers_once(lab, seconds, roles, rate_bps, port)
        except NotMeasured as e:
            if attempt == ATTEMPTS:
                raise NotMeasured(f"{e}, in each of {ATTEMPTS} attempts") from None
    raise AssertionError("unreachable")


def _transfers_once(lab: Lab, seconds: float, roles: list[str], rate_bps: float,
                    port: int) -> list[float]:
    work = lab.dir
    interval = sample_interval(seconds)
    sinks = []
    for k in range(len(roles)):
        p = port + k
        ready = work / f"sink{p}.ready"
        ready.unlink(missing_ok=True)
        report = work / f"sink{p}.json"
        sink = lab.spawn("server", [sys.executable, TRAFFIC, "sink", "--port", str(p),
                                    "--seconds", str(seconds + 4), "--interval",
                                    repr(interval), "--ready", str(ready), "--report",
                                    str(report), "--t0", "0"])
        sinks.append((sink, ready, report))
    deadline = time.monotonic() + 10
    for _, ready, _ in sinks:
        while not ready.exists():
            if time.monotonic() > deadline:
                raise LabError("the sink did not start")
            time.sleep(0.02)
    t0 = time.monotonic() + 0.2
    senders = []
    for k, role in enumerate(roles):
        args = ["send", "--to", lab.addr("server"), "--port", str(port + k), "--stop",
                str(seconds), "--t0", repr(t0), "--cc", TCP_CC]
        if rate_bps:
            args += ["--rate", str(rate_bps)]
        senders.append(lab.spawn(role, [sys.executable, TRAFFIC, *args]))
    for send in senders:
        send.wait(timeout=seconds + 20)
    reports = []
    for sink, _, report in sinks:
        sink.wait(timeout=seconds + 20)
        reports.append(json.loads(report.read_text())["samples"])
    return [goodput_gbps(s, t0 + WARMUP_S, t0 + seconds) for s in reports]


def subscriber_worker(addr: str, workers: int) -> int:
    """The worker the box's fanout program gives a subscriber's IPv4 address (the hash
    of `asymlink_live::sys::subscriber_hash`, modulo the number of workers)."""
    a = int(ipaddress.IPv4Address(addr))
    return (((a * 0x9E3779B1) & 0xFFFFFFFF) >> 16) % workers


def one_client_per_worker(workers: int) -> list[str]:
    """Client hosts (roles), one that the fanout puts on each of `workers` workers (the
    lowest-numbered such host of the lab's possible ones)."""
    roles: dict[int, str] = {}
    for k in range(1, MAX_CLIENTS + 1):
        w = subscriber_worker(client_addr(k), workers)
        roles.setdefault(w, "client" if k == 1 else f"client{k}")
    if len(roles) < workers:
        raise LabError(f"no {workers} client hosts of the lab fall on different workers")
    return [roles[w] for w in range(workers)]


def loopback_gbps(lab: Lab, seconds: float) -> float:
    """The traffic tool's own ceiling: the same transfer over loopback inside the server
    namespace (no forwarding at all)."""
    port = 5299
    ready = lab.dir / "lo.ready"
    report = lab.dir / "lo.json"
    sink = lab.spawn("server", [sys.executable, TRAFFIC, "sink", "--bind", "127.0.0.1",
                                "--port", str(port), "--seconds", str(seconds + 3),
                                "--interval", repr(sample_interval(seconds)), "--ready",
                                str(ready), "--report", str(report), "--t0", "0"])
    while not ready.exists():
        time.sleep(0.02)
    t0 = time.monotonic() + 0.2
    lab.spawn("server", [sys.executable, TRAFFIC, "send", "--to", "127.0.0.1", "--port",
                         str(port), "--stop", str(seconds), "--t0", repr(t0), "--cc",
                         TCP_CC]).wait(seconds + 20)
    sink.wait(seconds + 20)
    return goodput_gbps(json.loads(report.read_text())["samples"], t0 + WARMUP_S, t0 + seconds)


IO_MODES = ("socket", "mmap")


def _with_io(body: dict[str, Any], io: str) -> dict[str, Any]:
    return {**body, "process": {**body["process"], "io": io}}


def _measured(not_measured: dict[str, str], key: str,
              measure: Callable[[], float]) -> float | None:
    """`measure()`, or None with the reason under `not_measured[key]` when the transfer
    gave no goodput (`NotMeasured`): one point of a loaded run does not end the run."""
    try:
        return measure()
    except NotMeasured as e:
        not_measured[key] = str(e)
        return None


def _ratio(a: float | None, b: float | None) -> float:
    return a / b if a is not None and b else float("nan")


def _measure_box(lab: Lab, seconds: float, io: str, kernel: float | None,
                 not_measured: dict[str, str]) -> dict[str, Any]:
    """Unshaped, shaped and half-load latency through the box in one `io` mode; a point
    without a goodput is None, its reason in `not_measured` (keyed `<io>.<key>`)."""
    box = start_box(lab, _with_io(UNSHAPED, io))
    try:
        unshaped = _measured(not_measured, f"{io}.box_gbps", lambda: transfer(lab, seconds))
    finally:
        box.stop()
    box = start_box(lab, _with_io(SHAPED, io))
    try:
        shaped = _measured(not_measured, f"{io}.box_shaped_gbps",
                           lambda: transfer(lab, seconds))
    finally:
        shaped_final = box.stop()
    # Half of the unshaped rate (of the kernel's when the box's was not measured).
    half = (unshaped if unshaped is not None else kernel or 2.0) / 2 * 1e9
    box = start_box(lab, _with_io(UNSHAPED, io))
    try:
        load = _measured(not_measured, f"{io}.latency_load_gbps",
                         lambda: transfer(lab, seconds, rate_bps=half))
    finally:
        final = box.stop()
    lat = final.get("latency_us", {})
    return {
        "box_gbps": unshaped,
        "box_shaped_gbps": shaped,
        # The shaper counts IP bytes: a 1448-byte payload (MSS with timestamps) rides in a
        # 1500-byte IP packet, so the shaped IP rate is the goodput times 1500/1448.
        "box_shaped_ip_gbps": shaped * 1500 / 1448 if shaped is not None else None,
        "box_vs_kernel": _ratio(unshaped, kernel),
        # What the shaper's ACK filter did to the transfer's ACKs (direction to_a).
        "shaped_acks_classified": _dir(shaped_final, "to_a").get("classes", {}).get("ack"),
        "shaped_acks_filtered": _dir(shaped_final, "to_a").get("discarded", {})
        .get("ack_superseded", 0),
        "added_latency_p50_us": lat.get("p50"),
        "added_latency_p99_us": lat.get("p99"),
        "added_latency_max_us": lat.get("max"),
        "latency_samples": lat.get("count"),
        "latency_load_gbps": load,
    }


def _measure_workers(lab: Lab, seconds: float, io: str, roles: list[str], workers: int,
                     kernel: float | None, not_measured: dict[str, str]) -> dict[str, Any]:
    """The unshaped box with `workers` workers, one bulk transfer per client in `roles`
    at once."""
    body = {**UNSHAPED, "process": {**PROCESS, "io": io, "workers": workers}}
    box = start_box(lab, body)
    each: list[float] | None = None
    try:
        each = transfers(lab, seconds, roles)
    except NotMeasured as e:
        not_measured[f"subscribers.{io}.{workers}"] = str(e)
    finally:
        final = box.stop()
    total = sum(each) if each is not None else None
    return {
        "gbps": total,
        "per_client_gbps": each,
        "vs_kernel": _ratio(total, kernel),
        "per_worker_received": [w["received"]["to_b"] + w["received"]["to_a"]
                                for w in final.get("workers", [])],
        "load_average": os.getloadavg()[0],
    }


def run_bench(seconds: float = 5.0, io: tuple[str, ...] = ("socket",),
              workers: tuple[int, ...] = ()) -> dict[str, Any]:
    """Run the benchmark in a fresh lab (removed afterwards). `io` lists the box's
    `[process] io` modes to measure, one after the other against the same kernel run;
    the top-level box keys are those of the first, `by_io` has each. With `workers`
    (e.g. (1, 2)), also: one transfer from each of as many client hosts as the largest
    count, chosen so that the box's fanout puts one on each worker, all at once, through
    the kernel and through the box with each worker count and `io` mode (`subscribers`)."""
    for m in io:
        if m not in IO_MODES:
            raise LabError(f"io: unknown mode '{m}' (one of {', '.join(IO_MODES)})")
    lab = Lab.up()
    subs: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    try:
        lab.set_forwarding("kernel")
        kernel = _measured(skipped, "kernel_gbps", lambda: transfer(lab, seconds))
        lab.set_forwarding("box")
        by_io = {m: _measure_box(lab, seconds, m, kernel, skipped) for m in io}
        lo = _measured(skipped, "traffic_tool_loopback_gbps",
                       lambda: loopback_gbps(lab, min(seconds, 3.0)))
        if workers:
            roles = one_client_per_worker(max(workers))
            lab.set_clients(max(1 if r == "client" else int(r[6:]) for r in roles))
            lab.set_forwarding("kernel")
            k_each: list[float] | None = None
            try:
                k_each = transfers(lab, seconds, roles)
            except NotMeasured as e:
                skipped["subscribers.kernel_gbps"] = str(e)
            k_total = sum(k_each) if k_each is not None else None
            lab.set_forwarding("box")
            subs = {
                "clients": roles,
                "kernel_gbps": k_total,
                "kernel_per_client_gbps": k_each,
                "by_io": {m: {str(w): _measure_workers(lab, seconds, m, roles, w, k_total,
                                                       skipped)
                              for w in workers} for m in io},
            }
    finally:
        lab.down()
    out = {
        **by_io[io[0]],
        "kernel_gbps": kernel,
        # Points without a goodput (None above), each with the reason.
        "not_measured": skipped,
        "io": io[0],
        "by_io": by_io,
        "traffic_tool_loopback_gbps": lo,
        "seconds": seconds,
        "mtu": 1500,
        "cpus": os.cpu_count(),
        "kernel": platform.release(),
        "load_average": os.getloadavg()[0],
        "git": _git_rev(),
        "shaped_config": "five_class classifier + HTB (root 1 Gbit/s; ack class: classic "
                         "ACK filter), both directions",
    }
    if subs:
        out["subscribers"] = subs
    return out


def _dir(stats: dict[str, Any], d: str) -> dict[str, Any]:
    return dict(stats.get("directions", {}).get(d, {}))


def _git_rev() -> str:
    try:
        r = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                           text=True, cwd=Path(__file__).parent, timeout=5)
        return r.stdout.strip()
    except OSError:
        return ""
