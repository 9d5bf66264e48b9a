"""Lab scenarios: what runs through the box, and the tables and metrics it produces.

A lab scenario is a TOML file:

```toml
name = "adsl-problem"
duration = "20s"
interval = "100ms"            # sampling interval of the time series
forwarding = "box"            # or "kernel" (a Linux bridge instead of the box: baseline)
router_commands = []          # with "kernel": ip/tc commands run in the router namespace
                              # before the run ({a}/{b}: its client/server-side interfaces),
                              # e.g. "tc qdisc add dev {b} root handle 1: htb default 1"

[box]                         # the box configuration without [interfaces]: the same
seed = 1                      # vocabulary as a simulator [[middleboxes]] entry plus
[box.to_b]                    # [emulation.*]; side a is the client, side b the server
qdisc = { kind = "fifo", limit = "30p" }
[box.emulation.to_b]
rate = "512kbit"
modem_buffer = "30p"

[access.to_b]                 # optional: an emulated access line between the router and
rate = "512kbit"              # the server (its own namespace and box, emulation only):
delay = "5ms"                 # to_b the uplink, to_a the downlink; keys as in the box's
linklayer = { encap = "llc_snap_routed" }   # [emulation.*]: rate, delay, linklayer,
modem_buffer = "50p"          # loss, drop, modem_buffer, trace (a file relative to
                              # this one, or builtin:NAME)
[access.to_a]
rate = "8Mbit"
modem_buffer = "50p"

[hosts]                       # optional: how the hosts' traffic tools run
realtime_priority = 10        # SCHED_FIFO priority (default 10, below the box's 20);
                              # 0: the ordinary scheduler

[[flows]]                     # a bulk TCP transfer (real Linux TCP)
name = "download"
from = "server"               # sender: client | server | client2 ... client8 (further
                              # client hosts behind the box, see `clients`)
to = "client"
start = "0s"                  # default 0
stop = "20s"                  # default: duration
rate = "10Mbit"               # optional pacing (SO_MAX_PACING_RATE)
cc = "bbr"                    # optional: the sender's congestion control (TCP_CONGESTION);
                              # default cubic
window = "64KiB"              # optional: a fixed receive window (TCP_WINDOW_CLAMP on a locked
                              # buffer); default: Linux receive-buffer autotuning
port = 80                     # optional listening port (default: 5001, 5002, ... in order)

[[probes]]
name = "typing"
kind = "echo"                 # typed-echo probe (echo_latency_s) or "ping" (ping_rtt_s)
from = "client"
to = "server"
every = "200ms"

[windows]                     # optional: metrics per time window as well
alone = ["1s", "10s"]         # throughput_mbps_in.alone.<flow>, echo_latency_ms_in...
contended = ["11s", "20s"]
```

A flow or probe may name further client hosts, `client2` ... `client8` (addresses
198.18.0.12 ...), each its own namespace bridged with `client` onto the box's side a;
`clients = N` (top level) builds N hosts whatever the flows name (default: the highest
named). `metrics.json` then also holds each client host's goodput summed over its flows,
`host_throughput_mbps` (and `host_throughput_mbps_in` per window).

`run_scenario` writes the simulator's tables (`flows`, `queues`, `measurements`,
`flow_summary`, `queue_summary`: the same columns; what a real stack does not expose is
NaN), `metrics.json`, the box's final stats (`box_stats.json`), its log, and with
`capture = true` one pcap per direction.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import shlex
import subprocess
import sys
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pandas as pd

from asymlink import validate
from asymlink.lab.box import start_box
from asymlink.lab.netns import MAX_CLIENTS, TCP_CC, Lab, LabError, client_index
from asymlink.validate import ConfigError

TRAFFIC = str(Path(__file__).with_name("traffic.py"))
#: The SCHED_FIFO priority the hosts' traffic tools (senders, sinks, probes) run at unless a
#: scenario's `[hosts] realtime_priority` says otherwise (0: the ordinary scheduler): below
#: the box's (`box.PROCESS`), so the box's line still preempts them. A TCP socket's owner
#: holds its lock while it reads or writes; segments and ACKs that arrive meanwhile wait in
#: the socket's backlog until the owner releases it. An owner preempted by the machine's
#: other work (a loaded machine's ordinary scheduler makes it wait milliseconds) releases
#: them late and together: the receiver then sends their ACKs back to back, which a BBR
#: sender takes for delivery faster than the line (docs/tcp.md, "The fixed bottleneck's
#: queue"). The tools sleep between events and take a few percent of a core.
HOST_PRIORITY = 10
ROLES = ("client", "server", *(f"client{k}" for k in range(2, MAX_CLIENTS + 1)))

T = TypeVar("T")


class LabScenarioError(ConfigError, LabError):
    """A lab scenario is invalid; the message names the key (`flows[0].rate: ...`)."""


def seconds(v: Any, key: str) -> float:
    """A duration as written in scenario files (`200ms`, `1.5s`, `2min`)."""
    return _checked(validate.seconds, v, key)


def bits_per_second(v: Any, key: str) -> float:
    """A rate as written in scenario files (`512kbit`, `8Mbit`, `1.5Mbit/s`)."""
    return float(_checked(validate.rate, v, key))


def size_bytes(v: Any, key: str) -> int:
    """A size as written in scenario files (`34752B`, `64KiB`, `1MB`)."""
    return _checked(validate.size, v, key)


def _checked(parse: Callable[[Any, str], T], v: Any, key: str) -> T:
    try:
        return parse(v, key)
    except ConfigError as e:
        raise LabScenarioError(e.path, e.msg) from None


@dataclass
class Flow:
    name: str
    sender: str
    receiver: str
    start: float
    stop: float
    rate: float
    port: int
    window: int = 0
    cc: str = ""


@dataclass
class Probe:
    name: str
    kind: str
    sender: str
    receiver: str
    start: float
    stop: float
    every: float
    port: int


@dataclass
class LabScenario:
    """A parsed, validated lab scenario."""

    name: str
    duration: float
    interval: float
    forwarding: str
    box: dict[str, Any]
    access: dict[str, dict[str, Any]] = field(default_factory=dict)
    router_commands: list[list[str]] = field(default_factory=list)
    flows: list[Flow] = field(default_factory=list)
    probes: list[Probe] = field(default_factory=list)
    capture: bool = False
    description: str = ""
    windows: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: Client hosts behind the box (`client`, `client2`, ...).
    clients: int = 1
    #: The hosts' traffic tools' SCHED_FIFO priority (`[hosts] realtime_priority`; 0: the
    #: ordinary scheduler).
    host_priority: int = HOST_PRIORITY

    @classmethod
    def from_file(cls, path: Path) -> LabScenario:
        try:
            doc = tomllib.loads(Path(path).read_text())
        except tomllib.TOMLDecodeError as e:
            raise LabScenarioError(str(path), f"{e}") from None
        _resolve_traces(doc, Path(path).resolve().parent)
        return cls.from_dict(doc, str(path))

    @classmethod
    def from_dict(cls, doc: dict[str, Any], origin: str = "scenario") -> LabScenario:
        known = {"name", "description", "duration", "interval", "forwarding", "box", "access",
                 "router_commands", "flows", "probes", "capture", "windows", "clients",
                 "hosts"}
        extra = set(doc) - known
        if extra:
            raise LabScenarioError(
                origin, f"unknown key(s) {sorted(extra)} (known: {sorted(known)})")
        duration = seconds(doc.get("duration", "10s"), "duration")
        if not 0 < duration <= 600:
            raise LabScenarioError("duration", "must be between 0 and 10 minutes")
        fwd = doc.get("forwarding", "box")
        if fwd not in ("box", "kernel"):
            raise LabScenarioError("forwarding", "must be 'box' or 'kernel'")
        sc = cls(
            name=str(doc.get("name", Path(origin).stem)),
            description=str(doc.get("description", "")),
            duration=duration,
            interval=seconds(doc.get("interval", "100ms"), "interval"),
            forwarding=fwd,
            box=dict(doc.get("box", {})),
            access=access_line(doc.get("access", {})),
            capture=bool(doc.get("capture", False)),
        )
        hosts = doc.get("hosts", {})
        if not isinstance(hosts, dict):
            raise LabScenarioError("hosts", "must be a table")
        _only(hosts, {"realtime_priority"}, "hosts")
        prio = hosts.get("realtime_priority", HOST_PRIORITY)
        if not isinstance(prio, int) or isinstance(prio, bool) or not 0 <= prio <= 99:
            raise LabScenarioError("hosts.realtime_priority", "must be an integer 0-99")
        sc.host_priority = prio
        cmds = doc.get("router_commands", [])
        if cmds and fwd != "kernel":
            raise LabScenarioError("router_commands", 'needs forwarding = "kernel"')
        if not isinstance(cmds, list):
            raise LabScenarioError("router_commands", "must be a list of strings")
        for i, c in enumerate(cmds):
            argv = shlex.split(c) if isinstance(c, str) else []
            if not argv or argv[0] not in ("ip", "tc"):
                raise LabScenarioError(f"router_commands[{i}]",
                                       "must be an `ip ...` or `tc ...` command line")
            sc.router_commands.append(argv)
        for wname, w in dict(doc.get("windows", {})).items():
            key = f"windows.{wname}"
            if not isinstance(w, list) or len(w) != 2:
                raise LabScenarioError(key, "must be [start, end]")
            a, b = seconds(w[0], key), seconds(w[1], key)
            if not 0 <= a < b <= duration:
                raise LabScenarioError(key, "needs 0 <= start < end <= duration")
            sc.windows[str(wname)] = (a, b)
        if "interfaces" in sc.box:
            raise LabScenarioError("box.interfaces",
                                   "set by the lab (a = client side, b = server side)")
        port = 5001
        for i, f in enumerate(doc.get("flows", [])):
            key = f"flows[{i}]"
            _only(f, {"name", "from", "to", "start", "stop", "rate", "app", "port", "window",
                      "cc"}, key)
            s, r = _roles(f, key)
            start = seconds(f.get("start", "0s"), f"{key}.start")
            stop = seconds(f["stop"], f"{key}.stop") if "stop" in f else duration
            if not 0 <= start < stop <= duration:
                raise LabScenarioError(key, "needs 0 <= start < stop <= duration")
            rate = bits_per_second(f["rate"], f"{key}.rate") if "rate" in f else 0.0
            window = size_bytes(f["window"], f"{key}.window") if "window" in f else 0
            if window and not 2048 <= window <= 1 << 30:
                raise LabScenarioError(f"{key}.window", "must be between 2048 B and 1 GiB")
            cc = f.get("cc", "")
            if not isinstance(cc, str) or (cc and not re.fullmatch(r"[a-z0-9_]{1,15}", cc)):
                raise LabScenarioError(f"{key}.cc", "a congestion control name, e.g. 'bbr'")
            sc.flows.append(Flow(str(f.get("name", f"flow{i}")), s, r, start, stop, rate,
                                 _port(f, port, key), window, cc))
            port += 1
        for i, p in enumerate(doc.get("probes", [])):
            key = f"probes[{i}]"
            _only(p, {"name", "kind", "from", "to", "start", "stop", "every", "port"}, key)
            kind = p.get("kind", "echo")
            if kind not in ("echo", "ping"):
                raise LabScenarioError(f"{key}.kind", "'echo' or 'ping'")
            s, r = _roles(p, key)
            start = seconds(p.get("start", "0s"), f"{key}.start")
            stop = seconds(p["stop"], f"{key}.stop") if "stop" in p else duration
            if not 0 <= start < stop <= duration:
                raise LabScenarioError(key, "needs 0 <= start < stop <= duration")
            sc.probes.append(Probe(str(p.get("name", f"{kind}{i}")), kind, s, r, start, stop,
                                   seconds(p.get("every", "200ms"), f"{key}.every"),
                                   _port(p, port, key)))
            port += 1
        names = [f.name for f in sc.flows] + [p.name for p in sc.probes]
        if len(set(names)) != len(names):
            raise LabScenarioError(origin, "flow and probe names must be unique")
        ends = [(f.sender, f.receiver) for f in sc.flows]
        ends += [(p.sender, p.receiver) for p in sc.probes]
        used = max([client_index(s) or client_index(r) for s, r in ends], default=1)
        clients = doc.get("clients", used)
        if (not isinstance(clients, int) or isinstance(clients, bool)
                or not 1 <= clients <= MAX_CLIENTS):
            raise LabScenarioError("clients", f"must be an integer 1-{MAX_CLIENTS}")
        if clients < used:
            raise LabScenarioError("clients", f"the flows name client{used}")
        sc.clients = clients
        ports = [(f.receiver, f.port) for f in sc.flows]
        ports += [(p.receiver, p.port) for p in sc.probes if p.kind == "echo"]
        if len(set(ports)) != len(ports):
            raise LabScenarioError(
                origin, "two flows or probes listen on the same port of one host")
        return sc


#: The keys of an `[access.to_b]` / `[access.to_a]` table: the link vocabulary of the
#: box's `[emulation.*]` (and of a simulator link direction).
ACCESS_KEYS = ("rate", "trace", "delay", "linklayer", "loss", "drop", "modem_buffer")


def _resolve_traces(doc: dict[str, Any], base: Path) -> None:
    """Make the `trace` files of `[box.emulation.*]` and `[access.*]` absolute, relative
    to the scenario file's directory `base` (the box reads a configuration the lab writes
    elsewhere); `builtin:NAME` and absolute paths are kept."""
    box = doc.get("box")
    tables = [box.get("emulation") if isinstance(box, dict) else None, doc.get("access")]
    for t in tables:
        if not isinstance(t, dict):
            continue
        for d in t.values():
            tr = d.get("trace") if isinstance(d, dict) else None
            if isinstance(tr, str) and not tr.startswith("builtin:") and tr.strip():
                d["trace"] = str(base / Path(tr).expanduser())


def access_line(doc: Any) -> dict[str, dict[str, Any]]:
    """A scenario's `[access]` table, checked: `to_b` (uplink) and `to_a` (downlink), each
    with the keys of `ACCESS_KEYS`. Units and ranges are checked by the box's own parser
    (the access line runs as the `[emulation]` of a box), errors keyed `access.to_b.rate`."""
    if not doc:
        return {}
    if not isinstance(doc, dict):
        raise LabScenarioError("access", "must be a table with to_b and/or to_a")
    for d in set(doc) - {"to_a", "to_b"}:
        raise LabScenarioError(f"access.{d}", "unknown direction (to_b: uplink, to_a: downlink)")
    out: dict[str, dict[str, Any]] = {}
    for d, v in doc.items():
        key = f"access.{d}"
        if not isinstance(v, dict):
            raise LabScenarioError(key, "must be a table")
        extra = set(v) - set(ACCESS_KEYS)
        if extra:
            raise LabScenarioError(f"{key}.{sorted(extra)[0]}",
                                   f"unknown key (known: {', '.join(ACCESS_KEYS)})")
        if "rate" in v:
            bits_per_second(v["rate"], f"{key}.rate")
        if "delay" in v:
            seconds(v["delay"], f"{key}.delay")
        out[d] = dict(v)
    _check_access_box(out)
    return out


def _check_access_box(emulation: dict[str, dict[str, Any]]) -> None:
    """Check the access line with the box's parser (no device touched)."""
    import tempfile

    import tomli_w

    from asymlink.live import check_config

    cfg = {"interfaces": {"kind": "packet", "a": "xa", "b": "xb"}, "emulation": emulation}
    with tempfile.NamedTemporaryFile("w", suffix=".toml", delete=False) as f:
        f.write(tomli_w.dumps(cfg))
    try:
        err = check_config(Path(f.name))
    finally:
        Path(f.name).unlink()
    if err:
        # "invalid configuration FILE: emulation.to_b.rate: MSG (line N)"
        found = re.search(r"emulation\.(to_[ab][\w.\[\]]*): (.*?)(?: \(line \d+\))?$", err)
        if found:
            raise LabScenarioError(f"access.{found[1]}", found[2])
        raise LabScenarioError("access", err.replace(f.name, "the access line"))


def _port(d: dict[str, Any], default: int, key: str) -> int:
    """The listening port of a flow or probe: `port` (e.g. 22 to be classed interactive,
    80 good, 6881 bad by the five-class preset), else the next free one from 5001."""
    v = d.get("port", default)
    if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v <= 65535:
        raise LabScenarioError(f"{key}.port", "must be an integer 1-65535")
    return v


def _only(d: dict[str, Any], keys: set[str], where: str) -> None:
    extra = set(d) - keys
    if extra:
        raise LabScenarioError(where, f"unknown key(s) {sorted(extra)}")
    app = d.get("app", "bulk")
    if app not in ("bulk", {"kind": "bulk"}):
        raise LabScenarioError(f"{where}.app", "the lab runs bulk transfers only")


def _roles(d: dict[str, Any], key: str) -> tuple[str, str]:
    s, r = d.get("from"), d.get("to")
    if s not in ROLES or r not in ROLES or (s == "server") == (r == "server"):
        raise LabScenarioError(key, "from/to must be the server and a client host "
                               f"(client, client2 ... client{MAX_CLIENTS}), one each")
    return str(s), str(r)


# --- running ------------------------------------------------------------------------------


def traffic_argv(args: list[str], cc: str = "", priority: int = HOST_PRIORITY) -> list[str]:
    """The command line of the traffic tool (`args[0]` its command): every TCP socket it
    opens uses `cc`, by default `TCP_CC`; under SCHED_FIFO at `priority` (`chrt`), or the
    ordinary scheduler with 0."""
    rt = ["chrt", "-f", str(priority)] if priority else []
    return [*rt, sys.executable, TRAFFIC, args[0], "--cc", cc or TCP_CC, *args[1:]]


def _traffic(lab: Lab, role: str, args: list[str], cc: str = "",
             priority: int = HOST_PRIORITY) -> subprocess.Popen[bytes]:
    """Start the traffic tool in `role`'s namespace (`traffic_argv`)."""
    return lab.spawn(role, traffic_argv(args, cc, priority),
                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def _wait_for(paths: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise LabError(f"traffic servers did not start: {[str(p) for p in paths]}")
        time.sleep(0.02)


def run_scenario(sc: LabScenario, out: Path, lab: Lab | None = None) -> dict[str, Any]:
    """Run `sc` (in `lab`, or in a lab created and removed for the run) and write its
    results to `out`. Returns the metrics."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    own = lab is None
    lab = lab or Lab.up()
    try:
        return _run(sc, out, lab)
    finally:
        if own:
            lab.down()


def _run(sc: LabScenario, out: Path, lab: Lab) -> dict[str, Any]:
    work = lab.dir / f"run-{int(time.time() * 1000)}"
    work.mkdir()
    box = access = None
    lab.set_clients(sc.clients)
    lab.set_access(bool(sc.access))
    if sc.access:
        access = start_box(lab, {"seed": sc.box.get("seed", 1), "emulation": sc.access},
                           role="access")
    if sc.forwarding == "box":
        box = start_box(lab, sc.box, capture_dir=out if sc.capture else None)
    else:
        lab.set_forwarding("kernel")
    lab.clear_router_qdiscs()
    lab.router_commands(sc.router_commands)
    resolve_neighbours(lab, sc)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        servers = []
        slack = 3.0
        for f in sc.flows:
            ready = work / f"{f.name}.ready"
            servers.append(ready)
            procs.append(_traffic(lab, f.receiver, [
                "sink", "--port", str(f.port), "--seconds", str(sc.duration + slack + 2),
                "--interval", str(sc.interval), "--ready", str(ready),
                "--report", str(work / f"{f.name}.sink.json"), "--t0", "0",
                "--window", str(f.window)], priority=sc.host_priority))
        for p in sc.probes:
            if p.kind == "echo":
                ready = work / f"{p.name}.ready"
                servers.append(ready)
                procs.append(_traffic(lab, p.receiver, [
                    "echo-server", "--port", str(p.port), "--seconds",
                    str(sc.duration + slack + 2), "--ready", str(ready)],
                    priority=sc.host_priority))
        _wait_for(servers, 10)
        t0 = time.monotonic() + 0.5
        # The sinks sample on their own clock; give them the shared origin via their report
        # times (they started before t0; samples before t0 have negative t and are cut).
        clients = []
        for f in sc.flows:
            args = ["send", "--to", lab.addr(f.receiver), "--port", str(f.port),
                    "--start", str(f.start), "--stop", str(f.stop), "--t0", repr(t0),
                    "--interval", str(sc.interval), "--report", str(work / f"{f.name}.send.json")]
            if f.rate:
                args += ["--rate", str(f.rate)]
            clients.append(_traffic(lab, f.sender, args, f.cc, sc.host_priority))
        for p in sc.probes:
            cmd = "echo-client" if p.kind == "echo" else "ping"
            clients.append(_traffic(lab, p.sender, [
                cmd, "--to", lab.addr(p.receiver), "--port", str(p.port), "--start", str(p.start),
                "--stop", str(p.stop), "--every", str(p.every), "--t0", repr(t0),
                "--report", str(work / f"{p.name}.probe.json")], priority=sc.host_priority))
        procs += clients
        queue_rows: list[dict[str, Any]] = []
        sojourn_last: dict[str, tuple[float, int]] = {}
        end = t0 + sc.duration
        next_poll = t0
        while time.monotonic() < end + slack and any(c.poll() is None for c in clients):
            now = time.monotonic()
            if now >= next_poll and now <= end:
                if box is not None:
                    with contextlib.suppress(OSError):
                        queue_rows += _queue_rows(box.stats(), now - t0,
                                                  sojourn_last=sojourn_last)
                if access is not None:
                    with contextlib.suppress(OSError):
                        queue_rows += _queue_rows(access.stats(), now - t0, "access")
                next_poll += sc.interval
            time.sleep(min(0.02, max(0.0, next_poll - time.monotonic())))
        for c in clients:
            try:
                c.wait(timeout=max(0.1, end + slack - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.kill()
        servers_p = [proc for proc in procs if proc not in clients]
        for proc in servers_p:
            proc.terminate()
        for proc in servers_p:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
        errors = [c.stderr.read().decode(errors="replace") for c in clients
                  if c.returncode not in (0, None) and c.stderr is not None]
        if errors:
            raise LabError("traffic failed: " + " | ".join(e.strip()[-500:] for e in errors))
        final = box.stop() if box is not None else {}
        access_final = access.stop() if access is not None else {}
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for b in (box, access):
            if b is not None and b.proc.poll() is None:
                b.proc.kill()
                b.proc.wait()
        if sc.router_commands:
            qdiscs = run_cmd(["tc", "-s", "qdisc", "show"], lab, "router")
            (out / "router_qdiscs.txt").write_text(qdiscs)
            lab.clear_router_qdiscs()
    if access_final:
        (out / "access_stats.json").write_text(json.dumps(access_final, indent=2) + "\n")
    # The sinks' report times are absolute monotonic (t0 = 0): shift to the run's t0.
    return _collect(sc, out, work, t0, final, queue_rows, box.log if box else None)


def resolve_neighbours(lab: Lab, sc: LabScenario) -> None:
    """Enter each host's peers (the far ends of its flows and probes) in its neighbour
    cache before the run, as reachable (so they are probed again and follow a changed
    interface). Otherwise a connection's first packet waits for ARP, whose request and
    reply cross the emulated line: a round trip more in the handshake, which Linux takes
    as its first RTT sample (BBR starts its pacing rate and minimum RTT from it). The
    simulator has no ARP."""
    pairs = {(f.sender, f.receiver) for f in sc.flows} | {(p.sender, p.receiver)
                                                           for p in sc.probes}
    roles = {r for pair in pairs for r in pair}
    macs = {r: run_cmd(["cat", "/sys/class/net/eth0/address"], lab, r).strip() for r in roles}
    for a, b in pairs:
        for x, y in ((a, b), (b, a)):
            if macs[y]:
                run_cmd(["ip", "neigh", "replace", lab.addr(y), "lladdr", macs[y], "dev",
                         "eth0", "nud", "reachable"], lab, x)


def run_cmd(argv: list[str], lab: Lab, role: str) -> str:
    """The output of a command run in `role`'s namespace ("" if it fails)."""
    r = subprocess.run(lab.exec_argv(role, argv), capture_output=True, text=True, timeout=10)
    return r.stdout


def _stats_ms(vals: list[float]) -> dict[str, Any]:
    return {
        "count": len(vals),
        "p50": float(np.percentile(vals, 50)) * 1e3 if vals else None,
        "p90": float(np.percentile(vals, 90)) * 1e3 if vals else None,
        "mean": float(np.mean(vals)) * 1e3 if vals else None,
    }


def _queue_rows(stats: dict[str, Any], t: float, line: str = "",
                sojourn_last: dict[str, tuple[float, int]] | None = None
                ) -> list[dict[str, Any]]:
    """Queue rows of a box snapshot: its disciplines (`box.to_b`) and emulated links
    (`link.to_b`); with `line` (the access box), only its links, as `access.to_b`.
    A discipline's `sojourn_ms` is the mean sojourn time (box arrival to start of
    transmission) of the packets sent since the previous row, from the box's cumulative
    sum and count kept in `sojourn_last` (NaN when none was sent)."""
    rows = []
    for d, v in stats.get("directions", {}).items():
        if line:
            link = v["link"]
            rows.append({"t": t, "queue": f"{line}.{d}", "packets": link["modem_packets"],
                         "bytes": float("nan"), "drops": link["modem_dropped"] + link["lost"],
                         "filtered": 0, "dequeued": link["delivered"]})
            continue
        q = v["qdisc"]
        row = {"t": t, "queue": f"box.{d}", "packets": q["backlog_packets"],
               "bytes": q["backlog_bytes"], "drops": sum(q["dropped"].values()),
               "filtered": sum(q["filtered"].values()), "dequeued": q["dequeued"]}
        soj = v.get("sojourn_ms")
        if soj is not None and sojourn_last is not None:
            last_sum, last_n = sojourn_last.get(d, (0.0, 0))
            n = soj["count"] - last_n
            row["sojourn_ms"] = (soj["sum_ms"] - last_sum) / n if n > 0 else float("nan")
            sojourn_last[d] = (soj["sum_ms"], soj["count"])
        rows.append(row)
        link = v["link"]
        rows.append({"t": t, "queue": f"link.{d}", "packets": link["modem_packets"],
                     "bytes": float("nan"), "drops": link["modem_dropped"] + link["lost"],
                     "filtered": 0, "dequeued": link["delivered"]})
    return rows


def _delivered_between(t: np.ndarray, b: np.ndarray, lo: float, hi: float) -> float:
    if not len(t):
        return 0.0
    return float(np.interp(hi, t, b, left=0.0) - np.interp(lo, t, b, left=0.0))


def window_metrics(sc: LabScenario, delivered: dict[str, tuple[np.ndarray, np.ndarray]],
                   probes: dict[str, list[tuple[float, float]]]) -> dict[str, Any]:
    """The metrics of a run from its raw series — shared by the lab and the simulator
    mirror (`asymlink.lab.parity`), so both are computed the same way.

    `delivered[flow]` is (t, cumulative bytes delivered to the receiver) sampled over the
    run; `probes[probe]` is [(t, seconds)] of echo latencies or ping RTTs. Throughput is
    the bytes delivered between a flow's start and stop (or a window's ends, clipped to
    the flow's activity) over that time, in Mbit/s; latencies are p50/p90/mean in ms over
    the run and over each window."""
    m: dict[str, Any] = {"throughput_mbps": {}}
    for f in sc.flows:
        t, b = delivered[f.name]
        m["throughput_mbps"][f.name] = (_delivered_between(t, b, f.start, f.stop) * 8
                                        / (f.stop - f.start) / 1e6)
        for wname, (wa, wb) in sc.windows.items():
            lo, hi = max(wa, f.start), min(wb, f.stop)
            v = _delivered_between(t, b, lo, hi) * 8 / (hi - lo) / 1e6 if hi > lo else 0.0
            m.setdefault("throughput_mbps_in", {}).setdefault(wname, {})[f.name] = v
    hosts = sorted({f.sender if f.receiver == "server" else f.receiver for f in sc.flows})
    if len(hosts) > 1:
        def host_sum(tp: dict[str, float], h: str) -> float:
            return sum(v for f in sc.flows for k, v in tp.items()
                       if k == f.name and h in (f.sender, f.receiver))
        m["host_throughput_mbps"] = {h: host_sum(m["throughput_mbps"], h) for h in hosts}
        for wname in sc.windows:
            m.setdefault("host_throughput_mbps_in", {})[wname] = {
                h: host_sum(m["throughput_mbps_in"][wname], h) for h in hosts}
    for p in sc.probes:
        samples = probes[p.name]
        key = "echo_latency_ms" if p.kind == "echo" else "ping_rtt_ms"
        m.setdefault(key, {})[p.name] = _stats_ms([v for _, v in samples])
        for wname, (wa, wb) in sc.windows.items():
            wv = [v for t, v in samples if wa <= t <= wb]
            m.setdefault(f"{key}_in", {}).setdefault(wname, {})[p.name] = _stats_ms(wv)
    return m


#: The flow-series columns of a BBR sender (lab: `TCP_INFO` and `TCP_CC_INFO`; simulator:
#: the same from its model), beside the `flows` table's usual ones.
BBR_COLUMNS = ("pacing_rate_bps", "bbr_bw_bps", "bbr_min_rtt_ms", "bbr_pacing_gain",
               "bbr_cwnd_gain")
#: BBR's gains (Linux fixed point, × 256): STARTUP's 2/ln 2 and PROBE_RTT's cwnd gain 1.
HIGH_GAIN = 739 / 256
PROBE_RTT_CWND_GAIN = 1.0
#: How long after a lowered minimum RTT BBR's next PROBE_RTT comes at the latest: its
#: 10 s window, the 200 ms it lasts, and a round's slack.
PROBE_RTT_DUE_S = 10.5


def bbr_phase(pacing_gain: float, cwnd_gain: float) -> str:
    """BBR's mode inferred from its gains, as `TCP_CC_INFO` shows them: STARTUP
    (2.885 / 2.885), DRAIN (0.35 / 2.885), PROBE_RTT (cwnd gain 1), else PROBE_BW (pacing
    gain 1.25, 0.75 or 1, cwnd gain 2)."""
    if abs(cwnd_gain - PROBE_RTT_CWND_GAIN) < 1e-6:
        return "probe_rtt"
    if abs(cwnd_gain - HIGH_GAIN) < 1e-6:
        return "startup" if abs(pacing_gain - HIGH_GAIN) < 1e-6 else "drain"
    return "probe_bw"


def bbr_episodes(phases: list[tuple[float, float, float]],
                 min_rtt_ms: list[float] | None = None) -> dict[str, Any]:
    """BBR's path through its modes from (t, pacing gain, cwnd gain) rows, one per change
    of the gains (or denser): when STARTUP began (the first row with its gains: Linux
    shows them from the first ACK BBR takes; rows before it, gains 1 / 1 with no
    bandwidth yet, are not a mode), when it ended (None while it lasts), how long it took,
    and when each PROBE_RTT began. With the min-RTT estimate of each row, also when it
    was lowered after STARTUP outside PROBE_RTT (`min_rtt_lowered_s`): each such sample
    restarts the 10 s that lead to the next PROBE_RTT."""
    started: float | None = None
    exit_s: float | None = None
    probe_rtt_at: list[float] = []
    lowered: list[float] = []
    last = ""
    last_rtt = math.inf
    for i, (t, pg, cg) in enumerate(phases):
        mode = bbr_phase(pg, cg)
        rtt = min_rtt_ms[i] if min_rtt_ms is not None else math.inf
        if started is None:
            if mode != "startup":
                continue
            started = t
        if exit_s is None and last == "startup" and mode != "startup":
            exit_s = t
        if mode == "probe_rtt" and last != "probe_rtt":
            probe_rtt_at.append(t)
        if (exit_s is not None and rtt < last_rtt and mode != "probe_rtt"
                and last != "probe_rtt"):
            lowered.append(t)
        last, last_rtt = mode, rtt
    return {"started_s": started, "startup_exit_s": exit_s,
            "startup_s": None if started is None or exit_s is None else exit_s - started,
            "probe_rtts": len(probe_rtt_at), "probe_rtt_at_s": probe_rtt_at,
            "min_rtt_lowered_s": lowered}


def probe_rtt_postponed(ep: dict[str, Any], stop: float) -> list[float]:
    """The lowerings of the minimum RTT in `bbr_episodes`' `ep` that moved a PROBE_RTT
    due within the flow (ending at `stop`) past its end: BBR enters PROBE_RTT 10 s after
    the minimum was last set (STARTUP's first samples, a PROBE_RTT, a lower sample), so a
    lowering matters when the setting before it had a PROBE_RTT due before `stop` and
    the lowering moved it after. The PROBE_RTT count then says nothing of the model."""
    if ep.get("started_s") is None:
        return []
    sets = sorted([ep["started_s"], *ep["probe_rtt_at_s"]])
    out = []
    for low in ep.get("min_rtt_lowered_s", []):
        before = max((t for t in sets if t <= low), default=ep["started_s"])
        if before + PROBE_RTT_DUE_S <= stop < low + PROBE_RTT_DUE_S:
            out.append(low)
        sets.append(low)
        sets.sort()
    return out


def bbr_window_means(sc: LabScenario, series: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """Per window and BBR flow, the means of the sender's state from its series (`t`,
    `cwnd_bytes`, `srtt_ms` and `BBR_COLUMNS`): bandwidth estimate and pacing rate
    (Mbit/s), cwnd (bytes), SRTT and min RTT (ms); the same code for lab and simulator."""
    out: dict[str, Any] = {}
    for wname, (wa, wb) in sc.windows.items():
        for name, df in series.items():
            if "bbr_bw_bps" not in df.columns:
                continue
            w = df[(df["t"] >= wa) & (df["t"] <= wb)]
            if w["bbr_bw_bps"].isna().all():
                continue  # not sending in this window
            out.setdefault(wname, {})[name] = {
                "bw_mbps": float(w["bbr_bw_bps"].mean()) / 1e6,
                "pacing_mbps": float(w["pacing_rate_bps"].mean()) / 1e6,
                "cwnd_bytes": float(w["cwnd_bytes"].mean()),
                "srtt_ms": float(w["srtt_ms"].mean()),
                "min_rtt_ms": float(w["bbr_min_rtt_ms"].mean()),
            }
    return out


def _collect(sc: LabScenario, out: Path, work: Path, t0: float, final: dict[str, Any],
             queue_rows: list[dict[str, Any]], log: Path | None) -> dict[str, Any]:
    from asymlink.results import TABLE_COLUMNS, Results

    flow_rows = []
    summary = []
    delivered: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    tcp_cc: dict[str, str] = {}
    #: The SCHED_FIFO priority each traffic tool ran at (0: the ordinary scheduler).
    priority: dict[str, int] = {}
    bbr: dict[str, Any] = {}
    phase_rows: list[dict[str, Any]] = []
    for f in sc.flows:
        sink = json.loads((work / f"{f.name}.sink.json").read_text())
        send = json.loads((work / f"{f.name}.send.json").read_text())
        tcp_cc[f.name] = send.get("cc", "")
        priority[f"{f.name}.send"] = send.get("sched_priority", 0)
        priority[f"{f.name}.sink"] = sink.get("sched_priority", 0)
        st = np.array([s[0] - t0 for s in sink["samples"]])
        sb = np.array([s[1] for s in sink["samples"]], dtype=float)
        delivered[f.name] = (st, sb)
        for sample in send["samples"]:
            t = sample["t"]
            r: dict[str, Any] = {c: float("nan") for c in TABLE_COLUMNS["flows"]}
            r.update({k: v for k, v in sample.items() if k in r or k in BBR_COLUMNS})
            r["t"] = t
            r["flow"] = f.name
            r["bytes_delivered"] = float(np.interp(t, st, sb, left=0.0)) if len(st) else 0.0
            flow_rows.append(r)
        phases = send.get("phases", [])
        if phases:
            # BBR: its modes from the gains `TCP_CC_INFO` showed (looked at every 2 ms).
            bbr[f.name] = bbr_episodes([(p["t"], p["bbr_pacing_gain"], p["bbr_cwnd_gain"])
                                        for p in phases],
                                       [p["bbr_min_rtt_ms"] for p in phases])
            bbr[f.name]["min_rtt_ms"] = phases[-1]["bbr_min_rtt_ms"]
            bbr[f.name]["probe_rtt_postponed_s"] = probe_rtt_postponed(bbr[f.name], f.stop)
            phase_rows += [{"flow": f.name, "mode": bbr_phase(p["bbr_pacing_gain"],
                                                              p["bbr_cwnd_gain"]), **p}
                           for p in phases]
        last = send["samples"][-1] if send["samples"] else {}
        summary.append({"flow": f.name, "from": f.sender, "to": f.receiver,
                        "delivered_bytes": sink["bytes"],
                        "throughput_bps": _delivered_between(st, sb, f.start, f.stop) * 8
                        / (f.stop - f.start),
                        "retransmits": last.get("retransmits", float("nan")),
                        "min_srtt_ms": min((s.get("srtt_ms", math.inf) for s in send["samples"]),
                                           default=float("nan"))})
    meas = []
    probes: dict[str, list[tuple[float, float]]] = {}
    for p in sc.probes:
        rep = json.loads((work / f"{p.name}.probe.json").read_text())
        probes[p.name] = [(t, v) for t, v in rep["samples"]]
        priority[p.name] = rep.get("sched_priority", 0)
        for t, v in rep["samples"]:
            meas.append({"t": t, "flow": p.name, "metric": rep["metric"], "value": v})
    metrics: dict[str, Any] = {"scenario": sc.name, "forwarding": sc.forwarding,
                               "duration_s": sc.duration, "tcp_congestion_control": tcp_cc,
                               "host_priority": priority}
    metrics.update(window_metrics(sc, delivered, probes))
    if bbr:
        metrics["bbr"] = bbr
        flows_df = pd.DataFrame(flow_rows)
        metrics["bbr_in"] = bbr_window_means(
            sc, {n: flows_df[flows_df["flow"] == n] for n in bbr})
    metrics["delivered_bytes"] = {r["flow"]: r["delivered_bytes"] for r in summary}
    flow_cols = list(TABLE_COLUMNS["flows"]) + (list(BBR_COLUMNS) if bbr else [])
    tables = {
        "flows": pd.DataFrame(flow_rows, columns=flow_cols),
        "queues": pd.DataFrame(queue_rows, columns=list(TABLE_COLUMNS["queues"])),
        "measurements": pd.DataFrame(meas, columns=list(TABLE_COLUMNS["measurements"])),
        "flow_summary": pd.DataFrame(summary),
    }
    qs = []
    for d, v in final.get("directions", {}).items():
        qrow: dict[str, Any] = {"queue": f"box.{d}", "received": v["received"],
                                "sent": v["sent"]}
        soj = v.get("sojourn_ms", {})
        for k in ("mean", "max", "p50", "p90", "p99"):
            if soj.get(k) is not None:
                qrow[f"{k}_sojourn_ms"] = soj[k]
        qrow.update({f"discarded_{k}": n for k, n in v["discarded"].items()})
        qrow.update({f"unparsed_{k}": n for k, n in v["unparsed"].items()})
        qs.append(qrow)
    if qs:
        tables["queue_summary"] = pd.DataFrame(qs).fillna(0)
        metrics["box"] = {d: {"received": v["received"], "sent": v["sent"],
                              "discarded": v["discarded"], "classes": v["classes"],
                              "sojourn_ms": v.get("sojourn_ms")}
                          for d, v in final["directions"].items()}
        # The standing queue delay of each window: the median of the discipline's
        # per-interval mean sojourn times (as the simulator's AQM benchmark reports it).
        for wname, (wa, wb) in sc.windows.items():
            for d in final["directions"]:
                vals = [r["sojourn_ms"] for r in queue_rows
                        if r["queue"] == f"box.{d}" and wa <= r["t"] <= wb
                        and not math.isnan(r.get("sojourn_ms", math.nan))]
                metrics.setdefault("standing_sojourn_ms_in", {}).setdefault(wname, {})[d] = (
                    float(np.median(vals)) if vals else None)
        metrics["box"]["added_latency_us"] = final.get("latency_us", {})
    meta = {"scenario": sc.name, "duration_s": sc.duration, "source": "lab",
            "forwarding": sc.forwarding, "seed": final.get("seed"),
            "tcp_congestion_control": tcp_cc}
    if phase_rows:
        # One row per change of a BBR sender's gains: its mode changes.
        tables["bbr_phases"] = pd.DataFrame(phase_rows)
    Results(meta, tables).to_csv(out)
    (out / "metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
    if final:
        (out / "box_stats.json").write_text(json.dumps(final, indent=2) + "\n")
    if log is not None and log.exists():
        (out / "box.log").write_text(log.read_text())
    return metrics
