"""`asymlink bench live`: forwarding speed of the live box, measured in a namespace lab.

One run measures, with real Linux TCP (one bulk flow client → server, offloads off,
MTU 1500):

* `kernel_gbps` — through a Linux bridge in the router namespace (kernel forwarding);
* `box_gbps` — through the box, unshaped (a 1000-packet FIFO each way, no emulation);
* `box_shaped_gbps` — through the box with ACK filtering and the five-class shaper (HTB)
  whose root is set to 1 Gbit/s, each direction (`SHAPED` below); the goodput, and
  `box_shaped_ip_gbps` the IP rate the shaper counts;
* `added_latency_p50_us` / `added_latency_p99_us` — time from the kernel's receive
  timestamp on the box's ingress socket to the start of the send call that hands the
  frame to the egress device, for every packet of a transfer paced
  (`SO_MAX_PACING_RATE`) at half of `box_gbps`; the box runs with its latency breakdown
  on (`[stats] latency_breakdown`), and `latency_tail_parts_us` says where the time of
  the frames of 100 µs or more went.

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
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from importlib.resources import files
from pathlib import Path
from typing import Any

from asymlink.lab.box import start_box
from asymlink.lab.netns import MAX_CLIENTS, TCP_CC, Lab, LabError, client_addr
from asymlink.lab.netns import run as run_cmd
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


#: The box's `[process] io` modes a run can measure ([live.md](live.md), I/O modes).
IO_MODES = ("socket", "mmap", "xdp")
#: `--io` names for several modes: `both` (the two packet-socket modes) and `all`.
IO_GROUPS = {"both": ("socket", "mmap"), "all": IO_MODES}
#: Suffixes of an `--io` mode and the `[process]` keys they add: `+tx` a sender thread
#: per interface (`mmap+tx`), `+poll` 50 µs of busy polling (`mmap+tx+poll`).
IO_SUFFIXES: dict[str, dict[str, Any]] = {"tx": {"tx_thread": True},
                                          "poll": {"busy_poll": "50us"}}
#: The modes that can send from a sender thread.
TX_MODES = ("socket", "mmap")
#: The address family of AF_XDP sockets (`AF_XDP` in linux/socket.h).
AF_XDP = 44
#: Attempts at starting an `io = "xdp"` box, half a second apart: the kernel frees the
#: socket map of the box before (which held receive queue 0) a moment after that box exits.
XDP_START_ATTEMPTS = 3


def io_process(io: str) -> dict[str, Any]:
    """The `[process]` keys of an `--io` mode: `io`, and those of its suffixes."""
    base, *flags = io.split("+")
    keys: dict[str, Any] = {"io": base}
    for f in flags:
        keys.update(IO_SUFFIXES[f])
    return keys


def _check_io_mode(m: str) -> None:
    base, *flags = m.split("+")
    if base not in IO_MODES or any(f not in IO_SUFFIXES for f in flags) \
            or len(set(flags)) != len(flags):
        raise LabError(f"io: unknown mode '{m}' (one of {', '.join(IO_MODES)}, each with "
                       f"'+tx' for a sender thread and/or '+poll' for busy polling, a "
                       f"comma-separated list of them, 'both' or 'all')")
    if "tx" in flags and base not in TX_MODES:
        raise LabError(f"io: '{m}': a sender thread needs one of {', '.join(TX_MODES)}")


def parse_io_modes(text: str) -> tuple[str, ...]:
    """`--io`: one mode (`socket`, `mmap`, `xdp`), a comma-separated list of them
    (`socket,xdp`), `both` (socket and mmap) or `all`; `LabError` naming what is wrong."""
    text = text.strip()
    if text in IO_GROUPS:
        return IO_GROUPS[text]
    modes = tuple(m.strip() for m in text.split(","))
    for m in modes:
        _check_io_mode(m)
        if modes.count(m) > 1:
            raise LabError(f"io: '{m}' given twice")
    return modes


def xdp_unavailable() -> str | None:
    """Why the box's `io = "xdp"` cannot run on this machine (None: AF_XDP sockets open)."""
    try:
        s = socket.socket(AF_XDP, socket.SOCK_RAW, 0)
    except OSError as e:
        return f"AF_XDP sockets are not available here ({e.strerror or e})"
    s.close()
    return None


class BoxDidNotStart(LabError):
    """A box in an experimental `io` mode that would not start on this machine."""


def _start_box_io(lab: Lab, body: dict[str, Any], io: str) -> Any:
    """`start_box`; in `xdp` mode a start that fails is tried again (`XDP_START_ATTEMPTS`),
    then `BoxDidNotStart` with the box's last words."""
    if io_process(io)["io"] != "xdp":
        return start_box(lab, body)
    err = ""
    for _ in range(XDP_START_ATTEMPTS):
        try:
            return start_box(lab, body)
        except LabError as e:
            err = " ".join(str(e).split())[-400:]
            time.sleep(0.5)
    raise BoxDidNotStart(f'the box did not start with io = "xdp": {err}')


def _with_io(body: dict[str, Any], io: str) -> dict[str, Any]:
    return {**body, "process": {**body["process"], **io_process(io)}}


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
                 not_measured: dict[str, str],
                 latency_rate_bps: float | None = None) -> dict[str, Any]:
    """Unshaped, shaped and half-load latency through the box in one `io` mode; a point
    without a goodput is None, its reason in `not_measured` (keyed `<io>.<key>`). A mode
    that cannot run here (`xdp` without AF_XDP, or a box that would not start in it) has
    every key None and its reason under `not_measured[io]`."""
    why = xdp_unavailable() if io_process(io)["io"] == "xdp" else None
    if why is None:
        try:
            return _measure_box_in(lab, seconds, io, kernel, not_measured, latency_rate_bps)
        except BoxDidNotStart as e:
            why = str(e)
    not_measured[io] = why
    return {k: None for k in BOX_KEYS} | {"box_vs_kernel": float("nan")}


#: The keys `_measure_box` gives for each `io` mode.
BOX_KEYS = ("box_gbps", "box_shaped_gbps", "box_shaped_ip_gbps", "box_vs_kernel",
            "shaped_acks_classified", "shaped_acks_filtered", "added_latency_p50_us",
            "added_latency_p99_us", "added_latency_max_us", "latency_samples",
            "latency_load_gbps", "latency_tail_parts_us", "latency_breakdown")


def _measure_box_in(lab: Lab, seconds: float, io: str, kernel: float | None,
                    not_measured: dict[str, str],
                    latency_rate_bps: float | None = None) -> dict[str, Any]:
    box = _start_box_io(lab, _with_io(UNSHAPED, io), io)
    try:
        unshaped = _measured(not_measured, f"{io}.box_gbps", lambda: transfer(lab, seconds))
    finally:
        box.stop()
    box = _start_box_io(lab, _with_io(SHAPED, io), io)
    try:
        shaped = _measured(not_measured, f"{io}.box_shaped_gbps",
                           lambda: transfer(lab, seconds))
    finally:
        shaped_final = box.stop()
    # Half of the unshaped rate (of the kernel's when the box's was not measured).
    half = (unshaped if unshaped is not None else kernel or 2.0) / 2 * 1e9
    if latency_rate_bps is not None:
        half = latency_rate_bps
    box = _start_box_io(lab, {**_with_io(UNSHAPED, io), "stats": {"latency_breakdown": True}},
                        io)
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
        "latency_tail_parts_us": tail_parts(final.get("latency_breakdown")),
        "latency_breakdown": final.get("latency_breakdown"),
    }


def tail_parts(breakdown: dict[str, Any] | None, from_us: int = 100) -> dict[str, Any] | None:
    """Where the added latency of the frames of at least `from_us` went: their number and,
    per part of the box's latency breakdown (docs/live.md, Stats), the mean in µs; None
    without a breakdown or such frames."""
    if not breakdown:
        return None
    bands = [b for k, b in breakdown["bands_us"].items() if int(k.split("-")[0]) >= from_us]
    n = sum(b["count"] for b in bands)
    if not n:
        return None
    parts: dict[str, float] = {}
    for b in bands:
        for k, v in b["parts_ns"].items():
            parts[k] = parts.get(k, 0.0) + v
    return {"frames": n, "mean_us": sum(b["total_ns"] for b in bands) / n / 1e3,
            "parts_us": {k: v / n / 1e3 for k, v in parts.items()},
            "off_cpu_us": sum(b["off_cpu_ns"] for b in bands) / n / 1e3}


def _measure_workers(lab: Lab, seconds: float, io: str, roles: list[str], workers: int,
                     kernel: float | None, not_measured: dict[str, str]) -> dict[str, Any]:
    """The unshaped box with `workers` workers, one bulk transfer per client in `roles`
    at once. `xdp` runs one worker: other counts, and a mode that cannot run here, are
    None with the reason in `not_measured`."""
    key = f"subscribers.{io}.{workers}"
    why = xdp_unavailable() if io_process(io)["io"] == "xdp" else None
    if io_process(io)["io"] == "xdp" and workers > 1:
        why = 'io = "xdp" runs one worker'
    final: dict[str, Any] = {}
    each: list[float] | None = None
    if why is None:
        body = {**UNSHAPED, "process": {**PROCESS, **io_process(io), "workers": workers}}
        try:
            box = _start_box_io(lab, body, io)
        except BoxDidNotStart as e:
            why = str(e)
        else:
            try:
                each = transfers(lab, seconds, roles)
            except NotMeasured as e:
                not_measured[key] = str(e)
            finally:
                final = box.stop()
    if why is not None:
        not_measured[key] = why
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
              workers: tuple[int, ...] = (),
              latency_rate_bps: float | None = None) -> dict[str, Any]:
    """Run the benchmark in a fresh lab (removed afterwards). `io` lists the box's
    `[process] io` modes to measure, one after the other against the same kernel run;
    the top-level box keys are those of the first, `by_io` has each. With `workers`
    (e.g. (1, 2)), also: one transfer from each of as many client hosts as the largest
    count, chosen so that the box's fanout puts one on each worker, all at once, through
    the kernel and through the box with each worker count and `io` mode (`subscribers`)."""
    parse_io_modes(",".join(io))
    lab = Lab.up()
    subs: dict[str, Any] = {}
    skipped: dict[str, str] = {}
    try:
        lab.set_forwarding("kernel")
        kernel = _measured(skipped, "kernel_gbps", lambda: transfer(lab, seconds))
        lab.set_forwarding("box")
        by_io = {m: _measure_box(lab, seconds, m, kernel, skipped, latency_rate_bps)
                 for m in io}
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


# --- subscriber lines ---------------------------------------------------------------------

#: The subscribers' addresses: 198.18.64.1, 198.18.64.2, ... (inside the lab's benchmarking
#: range, outside its /24), all on the client namespace's one interface; the server
#: reaches them through the client's own address.
SUBSCRIBER_NET = ipaddress.IPv4Network("198.18.64.0/18")
#: Most subscriber lines a run configures (the /18 holds 16 382 addresses, one of them
#: for the idle subscriber that pings).
MAX_SUBSCRIBER_LINES = 16000
#: Each line's transfer runs this long before its measured window: N connections set up at
#: once (a SYN lost to a full backlog is sent again after 1 s) and slow start.
LINES_WARMUP_S = 2.0
#: The idle subscriber's ping: one echo request every 20 ms.
PING_EVERY_S = 0.02
LINES_PORT = 5400
BULK = str(Path(__file__).with_name("bulk.py"))
#: The load generators and the ping run SCHED_FIFO at this priority, above the box's
#: (`PROCESS`): they sleep between rounds and take a few percent of a core, but a
#: receiver that samples late or a ping timed late measures itself, not the lines —
#: with a thousand lines the box's workers alone can keep both cores of this machine busy.
LOAD_PRIORITY = 30
RT = ["chrt", "-f", str(LOAD_PRIORITY)]
#: A full-sized segment: 1448 bytes of payload (MSS with timestamps) in a 1500-byte IP
#: packet. The lines' shapers count IP bytes.
PAYLOAD_PER_IP = 1448 / 1500


def subscriber_addrs(n: int) -> list[str]:
    """The first `n` subscriber addresses."""
    base = int(SUBSCRIBER_NET.network_address)
    return [str(ipaddress.IPv4Address(base + k)) for k in range(1, n + 1)]


def subscriber_line(rate_bps: float) -> dict[str, Any]:
    """A subscriber's line as an operator selling a plan of `rate_bps` each way writes it
    (`[[subscribers]]`, docs/live.md): line mode at the provider's end, shaped at the plan
    rate itself (`*_fraction = 1.0`: no DSL line behind it to move the queue away from) in
    IP bytes — per subscriber an HTB with a flow-queueing leaf, what LibreQoS builds per
    subscriber with HTB and CAKE or fq_codel."""
    rate = f"{int(rate_bps)}bit"
    return {"down": rate, "up": rate, "down_fraction": 1.0, "up_fraction": 1.0}


#: The subscriber-lines box's clock runs this far ahead ([live.md](live.md), Time): many
#: slow lines have a departure every few microseconds between them, each line only one
#: every 12 ms (1500 bytes at 1 Mbit/s); a 1 ms horizon lets a wake-up send what is due
#: within the next millisecond together, and lets no line burst by more than 1 ms of its
#: rate (125 bytes at 1 Mbit/s).
LINES_HORIZON = "1ms"


def subscriber_box(addrs: list[str], rate_bps: float, workers: int,
                   io: str = "socket") -> dict[str, Any]:
    """The box of the subscriber-lines run: one `[[subscribers]]` entry per address, each
    its own line at `rate_bps`, `workers` workers, `[process] io` mode `io`."""
    line = subscriber_line(rate_bps)
    return {"seed": 1,
            "process": {**PROCESS, "horizon": LINES_HORIZON, "workers": workers, "io": io},
            "subscribers": [{"prefix": a, "line": dict(line)} for a in addrs]}


def add_subscriber_addresses(lab: Lab, addrs: list[str]) -> None:
    """Give the client namespace's interface every address of `addrs` (one `ip -batch`),
    and the server a route to them through the client."""
    batch = lab.dir / "subscribers.ip"
    batch.write_text("".join(f"address add {a}/32 dev eth0\n" for a in addrs))
    run_cmd(["ip", "-n", lab.client, "-batch", str(batch)], timeout=120)
    lab.ip(lab.server, "route", "add", str(SUBSCRIBER_NET), "via", lab.addr("client"))


def quantiles(values: list[float], qs: tuple[float, ...]) -> list[float]:
    """Nearest-rank quantiles of `values` (not empty)."""
    s = sorted(values)
    return [s[min(len(s) - 1, max(0, int(round(q * (len(s) - 1)))))] for q in qs]


def line_rates(flows: dict[str, list[tuple[float, int]]], addrs: list[str], lo: float,
               hi: float) -> tuple[dict[str, float], dict[str, str]]:
    """Each subscriber's IP rate in Mbit/s over `[lo, hi]` from the receiver's samples
    (goodput / `PAYLOAD_PER_IP`), and the reason for each subscriber without one (no
    connection, too few samples in the window)."""
    rates: dict[str, float] = {}
    missing: dict[str, str] = {}
    for a in addrs:
        samples = flows.get(a)
        if not samples:
            missing[a] = "no connection"
            continue
        try:
            rates[a] = goodput_gbps(samples, lo, hi) * 1e3 / PAYLOAD_PER_IP
        except NotMeasured as e:
            missing[a] = str(e)
    return rates, missing


def summarize_lines(rates: dict[str, float], n: int, rate_bps: float) -> dict[str, Any]:
    """Aggregate and per-subscriber accuracy of `rates` (IP Mbit/s by subscriber) against
    `n` lines of `rate_bps`."""
    want = rate_bps / 1e6
    vals = list(rates.values())
    total = sum(vals)
    out: dict[str, Any] = {
        "configured_sum_mbps": n * want,
        "aggregate_ip_mbps": total,
        "aggregate_goodput_mbps": total * PAYLOAD_PER_IP,
        "aggregate_vs_configured": total / (n * want) if n else float("nan"),
        "measured": len(vals),
        "within_5pct": sum(1 for v in vals if abs(v - want) <= 0.05 * want),
    }
    if vals:
        lo, med, hi = quantiles(vals, (0.0, 0.5, 1.0))
        out["per_subscriber_ip_mbps"] = {"min": lo, "median": med, "max": hi}
    return out


def _proc_status_kb(pid: int, key: str) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return None


def _cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of process `pid`, all its threads."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _machine_cpu() -> dict[str, float]:
    """The machine's CPU time so far by kind (user, system, softirq, idle, ...), in
    seconds summed over all CPUs (/proc/stat)."""
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:1 + len(names)]
    tck = os.sysconf("SC_CLK_TCK")
    return {k: int(v) / tck for k, v in zip(names, fields, strict=True)}


def _ping_stats(report: Path) -> dict[str, Any]:
    """p50 / p99 / max of a ping report's round-trip times, in ms."""
    if not report.exists():
        return {"count": 0}
    doc = json.loads(report.read_text())
    rtts = [r * 1e3 for _, r in doc["samples"]]
    out: dict[str, Any] = {"count": len(rtts), "sent": doc.get("sent")}
    if rtts:
        out["p50"], out["p99"], out["max"] = quantiles(rtts, (0.5, 0.99, 1.0))
    return out


def _ping(lab: Lab, src: str, t0: float, start: float, stop: float,
          report: Path) -> Any:
    return lab.spawn("client", [*RT, sys.executable, TRAFFIC, "ping", "--to", lab.addr("server"),
                                "--bind", src, "--t0", repr(t0), "--start", repr(start),
                                "--stop", repr(stop), "--every", repr(PING_EVERY_S),
                                "--timeout", "1", "--report", str(report)])


def measure_lines(lab: Lab, n: int, rate_bps: float, seconds: float, workers: int,
                  direction: str, not_measured: dict[str, str],
                  io: str = "socket", saturate: int | None = None) -> dict[str, Any]:
    """`n` subscribers, each its own line at `rate_bps` through a box with `workers`
    workers, the first `saturate` of them (default: all) each saturating its line with
    one bulk TCP transfer (`direction` `down`: from the server to the subscriber; `up`:
    the other way), all at once, from `LINES_WARMUP_S` before the measured window of
    `seconds`; a subscriber more, idle, pings the server before and during the load. The
    lab's client namespace must carry `lines_client_addrs(n, saturate)`
    (`add_subscriber_addresses`)."""
    m = n if saturate is None else saturate
    addrs = subscriber_addrs(n + 1)
    loaded, idle = addrs[:m], addrs[n]
    sources = lab.dir / "sources.txt"
    sources.write_text("".join(a + "\n" for a in loaded))
    work = lab.dir
    t_start = time.monotonic()
    box = start_box(lab, subscriber_box(addrs, rate_bps, workers, io), timeout=60 + n / 100)
    # From writing and checking the configuration to the box forwarding.
    box_start_s = time.monotonic() - t_start
    pid = box.proc.pid
    out: dict[str, Any] = {"subscribers": n, "saturated": m, "box_start_s": box_start_s,
                           "workers": workers, "io": io,
                           "direction": direction,
                           "rate_mbps": rate_bps / 1e6, "line": subscriber_line(rate_bps),
                           "load_average_start": os.getloadavg()[0]}
    try:
        out["box_rss_start_kb"] = _proc_status_kb(pid, "VmRSS")
        # The idle box first: the ping's round trip without the load.
        t_idle = time.monotonic()
        _ping(lab, idle, t_idle, 0.0, 1.5, work / "ping-idle.json").wait(timeout=20)
        # The load: the server's side, then every subscriber's connection at once.
        ready = work / "bulk.ready"
        ready.unlink(missing_ok=True)
        sender_mode, receiver = ("send", "connect") if direction == "down" else ("recv", "serve")
        receiver_report = work / f"bulk-{receiver}.json"
        serve_report = work / "bulk-serve.json"
        connect_report = work / "bulk-connect.json"
        t0 = time.monotonic() + 0.5
        end = LINES_WARMUP_S + seconds
        common = ["--port", str(LINES_PORT), "--t0", repr(t0), "--stop", repr(end),
                  "--interval", repr(sample_interval(seconds + WARMUP_S)), "--cc", TCP_CC]
        server = lab.spawn("server", [*RT, sys.executable, BULK, "serve", *common, "--mode",
                                      sender_mode, "--ready", str(ready), "--report",
                                      str(serve_report)])
        deadline = time.monotonic() + 10
        while not ready.exists():
            if time.monotonic() > deadline or server.poll() is not None:
                raise LabError("the bulk server did not start")
            time.sleep(0.02)
        client = lab.spawn("client", [
            *RT, sys.executable, BULK, "connect", *common, "--mode",
            "recv" if direction == "down" else "send", "--to", lab.addr("server"),
            "--sources", str(sources), "--report", str(connect_report)])
        ping = _ping(lab, idle, t0, LINES_WARMUP_S, end, work / "ping-load.json")
        # The box's CPU time over the measured window, and its memory near its end.
        time.sleep(max(0.0, t0 + LINES_WARMUP_S - time.monotonic()))
        procs = {"box": pid, "server": server.pid, "client": client.pid}
        cpu0, w0 = {k: _cpu_seconds(p) for k, p in procs.items()}, time.monotonic()
        m0 = _machine_cpu()
        time.sleep(max(0.0, t0 + end - 0.3 - time.monotonic()))
        cpu1, w1 = {k: _cpu_seconds(p) for k, p in procs.items()}, time.monotonic()
        m1 = _machine_cpu()
        # The whole machine's CPUs over the window, by kind, in cores (other jobs too).
        out["machine_cpu_cores"] = {k: (m1[k] - m0[k]) / (w1 - w0) for k in m0}
        out["box_rss_loaded_kb"] = _proc_status_kb(pid, "VmRSS")
        stats = box.stats()
        # CPU time over the window (1.0: one core busy): the box's, and the load
        # generator's on each side (a side that takes a whole core limits the load).
        for k in procs:
            a, b = cpu0[k], cpu1[k]
            if a is not None and b is not None:
                out[f"{k}_cpu_cores"] = (b - a) / (w1 - w0)
        for proc in (client, server, ping):
            proc.wait(timeout=end + 30)
        out["load_average"] = os.getloadavg()[0]
        # Every tree still alive, now idle (the idle timeout is 60 s).
        out["box_rss_after_kb"] = _proc_status_kb(pid, "VmRSS")
        out["box_rss_peak_kb"] = _proc_status_kb(pid, "VmHWM")
        after = box.stats()
    finally:
        final = box.stop()
    subs = dict(after.get("subscribers", stats.get("subscribers", {})))
    out["box_subscribers"] = subs
    live = subs.get("live")
    rss0, rss1 = out.get("box_rss_start_kb"), out.get("box_rss_after_kb")
    out["memory_per_idle_subscriber_kb"] = ((rss1 - rss0) / live if live and rss0 is not None
                                            and rss1 is not None else None)
    out["per_worker_received"] = [w["received"]["to_b"] + w["received"]["to_a"]
                                  for w in final.get("workers", [])]
    out["rx_kernel_drops"] = sum(d.get("rx_kernel_drops", 0)
                                 for d in final.get("directions", {}).values())
    # Every direction's counters (all subscribers' traffic): what the lines dropped, why.
    out["box_directions"] = final.get("directions", {})
    conn = json.loads(connect_report.read_text()) if connect_report.exists() else {}
    out["connected"] = conn.get("connected")
    out["connect_errors"] = conn.get("errors")
    flows = (json.loads(receiver_report.read_text()).get("flows", {})
             if receiver_report.exists() else {})
    # The receiver's times are seconds since t0.
    rates, missing = line_rates(flows, loaded, LINES_WARMUP_S, end)
    out.update(summarize_lines(rates, m, rate_bps))
    if missing:
        first = next(iter(missing.items()))
        not_measured["subscriber_lines.per_subscriber"] = (
            f"{len(missing)} of {m} subscribers have no rate (e.g. {first[0]}: {first[1]})")
    out["per_subscriber_ip_mbps_all"] = {a: round(r, 4) for a, r in rates.items()}
    idle_ping, load_ping = (_ping_stats(work / "ping-idle.json"),
                            _ping_stats(work / "ping-load.json"))
    out["ping_idle_ms"], out["ping_loaded_ms"] = idle_ping, load_ping
    for q in ("p50", "p99"):
        if q in idle_ping and q in load_ping:
            out[f"added_latency_{q}_ms"] = load_ping[q] - idle_ping[q]
        else:
            not_measured[f"subscriber_lines.added_latency_{q}_ms"] = (
                f"the idle subscriber's ping got {idle_ping['count']} answers idle and "
                f"{load_ping['count']} under load")
    return out


def lines_client_addrs(n: int, saturate: int | None = None) -> list[str]:
    """The addresses the client namespace needs for `measure_lines`: the saturated
    subscribers' and the idle one's (the other configured subscribers send nothing)."""
    addrs = subscriber_addrs(n + 1)
    return addrs[:n if saturate is None else saturate] + [addrs[n]]


def run_lines_bench(n: int, rate_bps: float = 1e6, seconds: float = 5.0, workers: int = 2,
                    direction: str = "down", io: str = "socket",
                    saturate: int | None = None) -> dict[str, Any]:
    """`asymlink bench live --subscribers N [--saturate M]`: `measure_lines` in a fresh lab
    (removed afterwards), with the run's facts as the other sections have them."""
    if not 1 <= n <= MAX_SUBSCRIBER_LINES:
        raise LabError(f"subscribers: 1 to {MAX_SUBSCRIBER_LINES}, not {n}")
    if saturate is not None and not 1 <= saturate <= n:
        raise LabError(f"saturate: 1 to the {n} subscribers, not {saturate}")
    if direction not in ("down", "up"):
        raise LabError(f"direction: 'down' or 'up', not '{direction}'")
    if io not in IO_MODES:
        raise LabError(f"io: unknown mode '{io}' (one of {', '.join(IO_MODES)})")
    if io == "xdp":
        why = xdp_unavailable() or (None if workers == 1 else 'io = "xdp" runs one worker')
        if why is not None:
            raise LabError(f"io xdp: {why}")
    lab = Lab.up()
    skipped: dict[str, str] = {}
    try:
        add_subscriber_addresses(lab, lines_client_addrs(n, saturate))
        lines = measure_lines(lab, n, rate_bps, seconds, workers, direction, skipped, io,
                              saturate)
    finally:
        lab.down()
    return {"subscriber_lines": lines, "not_measured": skipped, "seconds": seconds,
            "warmup_s": LINES_WARMUP_S, "mtu": 1500, "cpus": os.cpu_count(),
            "kernel": platform.release(), "load_average": os.getloadavg()[0],
            "git": _git_rev()}
