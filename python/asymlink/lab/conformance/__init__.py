"""Conformance of the simulator's `linux` profile with real Linux, case by case.

The catalog (`cases.toml` beside this file) holds small downloads with scripted losses.
Each case runs in two variants — SACK and timestamps on (`sack-ts`), then both off
(`plain`) — through the simulator (`run_sim`, always available) and through real Linux
in the lab (`run_lab`, root: namespaces, the box applying the same drops in its link
emulation). Both give a `Trace`: the packets each end sent (the simulator's capture at
its link, the lab's AF_PACKET capture on each host), the data sender's counters (the
simulator's flow summary; the lab server's `nstat` counters) and its cwnd/ssthresh at the
end (the simulator's flow series; the lab server's TCP_INFO). `sender_events` turns the
packets into the same record for both: the segments retransmitted, in order, with their
times from its first data segment, and the SYN/SYN-ACK transmissions. `compare` says whether the
two agree and, if not, in what.
"""

from __future__ import annotations

import json
import math
import struct
import subprocess
import sys
import time
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from asymlink.lab.netns import Lab

CATALOG = Path(__file__).with_name("cases.toml")
PEER = str(Path(__file__).with_name("peer.py"))
PORT = 5001
FLOW = "download"
#: (name, SACK, timestamps)
VARIANTS: tuple[tuple[str, bool, bool], ...] = (("sack-ts", True, True),
                                                 ("plain", False, False))
#: Counters compared: the simulator's flow-summary column and the Linux MIB counters
#: (TcpExt, summed) that count the same thing.
COUNTERS: dict[str, tuple[str, tuple[str, ...]]] = {
    "recoveries": ("fast_retransmits", ("TCPSackRecovery", "TCPRenoRecovery")),
    "timeouts": ("timeouts", ("TCPTimeouts",)),
    "loss_probes": ("loss_probes", ("TCPLossProbes",)),
}
#: Linux counters reported beside the compared ones.
LINUX_EXTRA = ("TCPFastRetrans", "TCPSlowStartRetrans", "TCPLostRetransmit", "TCPSynRetrans",
               "TCPSpuriousRTOs", "TCPLossProbeRecovery", "TCPLossUndo", "TCPDSACKRecv",
               "TCPSACKReorder", "TCPRenoReorder", "TCPTSReorder")


def mss_of(timestamps: bool) -> int:
    """Payload bytes per segment on a 1500-byte MTU: 1448 with timestamps, 1460 without."""
    return 1448 if timestamps else 1460


@dataclass
class Case:
    """One catalog entry."""

    name: str
    about: str
    down: dict[str, Any]
    up: dict[str, Any]
    writes: list[int]
    idle: float = 0.0
    window_segments: int = 0
    drop_down: list[Any] = field(default_factory=list)
    drop_up: list[Any] = field(default_factory=list)

    @property
    def rtt(self) -> float:
        """The path's round-trip propagation delay, seconds."""
        return _seconds(self.down.get("delay", "0s")) + _seconds(self.up.get("delay", "0s"))

    def drops(self, direction: str, mss: int, sim: bool) -> list[Any]:
        """The drop rules of `direction` (`down` / `up`) in the link vocabulary: `segment`
        becomes the segment's relative sequence number, matched by flow name in the
        simulator and by port in the box."""
        out: list[Any] = []
        for r in self.drop_down if direction == "down" else self.drop_up:
            if isinstance(r, str):
                out.append(r)
                continue
            rule: dict[str, Any] = {"seq": 1 + (int(r["segment"]) - 1) * mss,
                                    "tx": int(r.get("tx", 1))}
            rule.update({"flow": FLOW} if sim else {"port": PORT})
            out.append(rule)
        return out


def _seconds(v: Any) -> float:
    from asymlink import validate

    return float(validate.seconds(v, "delay"))


def load_catalog(path: Path = CATALOG) -> list[Case]:
    """The cases of the catalog file."""
    doc = tomllib.loads(Path(path).read_text())
    d = doc.get("defaults", {})
    cases = []
    for c in doc["cases"]:
        writes = c.get("writes", [c.get("segments", d.get("segments", 100))])
        cases.append(Case(
            name=c["name"], about=c.get("about", ""),
            down={**d.get("down", {}), **c.get("down", {})},
            up={**d.get("up", {}), **c.get("up", {})},
            writes=[int(w) for w in writes],
            idle=_seconds(c["idle"]) if "idle" in c else 0.0,
            window_segments=int(c.get("window_segments", 0)),
            drop_down=list(c.get("drop_down", [])), drop_up=list(c.get("drop_up", []))))
    return cases


# --- packets and events -------------------------------------------------------------------

SYN, ACK, FIN, RST = 0x02, 0x10, 0x01, 0x04


@dataclass
class Packet:
    """A TCP packet one end sent: `src` is `server` or `client`."""

    t: float
    src: str
    seq: int
    ack: int
    flags: int
    payload: int


@dataclass
class Trace:
    """What one run of one case and variant produced."""

    packets: list[Packet]
    counters: dict[str, float]
    cwnd: float | None
    ssthresh: float | None
    mss: int
    extra: dict[str, Any] = field(default_factory=dict)


def sender_events(tr: Trace) -> dict[str, Any]:
    """The sender's story from its packets: times are seconds from the server's first data
    segment (the first SYN if it sent none), so that what delays the lab's first packets
    (the box and the hosts resolving their neighbours: up to 20 ms) does not count.

    `retx`: [(t, segment)] of every data segment the server sent again (its sequence
    number below the highest it had sent), the segment numbered from 1 in MSS units;
    `syn_tx` / `synack_tx`: transmissions of the client's SYN and the server's SYN-ACK;
    `data_tx`: data segments the server sent; `end`: when it sent its last data segment."""
    pk = sorted(tr.packets, key=lambda p: p.t)
    syns = [p for p in pk if p.flags & SYN]
    if not syns:
        return {"retx": [], "syn_tx": 0, "synack_tx": 0, "data_tx": 0, "end": None}
    t0 = next((p.t for p in pk if p.src == "server" and p.payload > 0), syns[0].t)
    isn = next((p.seq for p in pk if p.src == "server" and p.flags & SYN), None)
    high = 0
    retx = []
    data = 0
    end = None
    for p in pk:
        if p.src != "server" or p.payload == 0 or isn is None:
            continue
        rel = (p.seq - isn) % (1 << 32)
        data += 1
        end = round(p.t - t0, 4)
        if rel < high:
            retx.append((round(p.t - t0, 4), (rel - 1) // tr.mss + 1))
        high = max(high, rel + p.payload)
    return {
        "retx": retx,
        "syn_tx": sum(1 for p in syns if p.src == "client" and not p.flags & ACK),
        "synack_tx": sum(1 for p in syns if p.src == "server"),
        "data_tx": data,
        "end": end,
    }


@dataclass
class Verdict:
    """The comparison of one case and variant."""

    case: str
    variant: str
    agree: bool
    differences: list[str]
    sim: dict[str, Any]
    lab: dict[str, Any]


def summary(tr: Trace) -> dict[str, Any]:
    """The compared record of a trace: its events, counters and final window (segments)."""
    ev = sender_events(tr)
    ev["counters"] = {k: tr.counters.get(k) for k in COUNTERS}
    ev["cwnd"] = tr.cwnd
    ev["ssthresh"] = tr.ssthresh
    ev["extra"] = tr.extra
    return ev


def compare(case: Case, variant: str, sim: Trace, lab: Trace) -> Verdict:
    """Agree when the same segments are retransmitted in the same order, each within one
    RTT of the other's, with as many SYN/SYN-ACK transmissions, the same numbers of
    recoveries, timeouts and loss probes, and ssthresh after recovery within 20 % (or
    one segment)."""
    s, lb = summary(sim), summary(lab)
    diffs = []
    sseg = [g for _, g in s["retx"]]
    lseg = [g for _, g in lb["retx"]]
    if sseg != lseg:
        diffs.append(f"retransmitted segments: sim {sseg}, Linux {lseg}")
    else:
        late = [(g, ts, tl) for (ts, g), (tl, _) in zip(s["retx"], lb["retx"], strict=True)
                if abs(ts - tl) > case.rtt]
        if late:
            g, ts, tl = late[0]
            diffs.append(f"segment {g} retransmitted at {ts:.3f} s (sim) and {tl:.3f} s "
                         f"(Linux), more than one RTT apart")
    for k in ("syn_tx", "synack_tx"):
        if s[k] != lb[k]:
            diffs.append(f"{k}: sim {s[k]}, Linux {lb[k]}")
    for k in COUNTERS:
        a, b = s["counters"].get(k), lb["counters"].get(k)
        if a is not None and b is not None and a != b:
            diffs.append(f"{k}: sim {a:g}, Linux {b:g}")
    a, b = s["ssthresh"], lb["ssthresh"]
    if (a is None) != (b is None):
        diffs.append(f"ssthresh after: sim {_fmt(a)}, Linux {_fmt(b)}")
    elif a is not None and b is not None and abs(a - b) > max(1.0, 0.2 * b):
        diffs.append(f"ssthresh after: sim {a:g}, Linux {b:g} segments")
    return Verdict(case.name, variant, not diffs, diffs, s, lb)


def _fmt(v: float | None) -> str:
    return "unset" if v is None else f"{v:g}"


# --- the simulator ------------------------------------------------------------------------


def sim_scenario(case: Case, sack: bool, timestamps: bool) -> dict[str, Any]:
    """The case as a simulator scenario: client (a) -- line -- server (b), the download
    from server to client on port 5001, the `linux` profile, both directions captured."""
    mss = mss_of(timestamps)
    tcp: dict[str, Any] = {"profile": "linux", "sack": sack, "timestamps": timestamps,
                           "mss": f"{mss}B"}
    if case.window_segments:
        tcp["rcvbuf"] = f"{case.window_segments * mss}B"
    app: dict[str, Any] = {"kind": "bulk", "bytes": f"{case.writes[0] * mss}B",
                           "open": "receiver"}
    if len(case.writes) > 1:
        app["then"] = f"{sum(case.writes[1:]) * mss}B"
        app["idle"] = f"{case.idle}s"
    link: dict[str, Any] = {"name": "line", "a": "client", "b": "server",
                            "to_a": dict(case.down), "to_b": dict(case.up)}
    for d, key in (("down", "to_a"), ("up", "to_b")):
        drops = case.drops(d, mss, sim=True)
        if drops:
            link[key]["drop"] = drops
    return {
        "name": f"conformance-{case.name}",
        "duration": "30s",
        "nodes": [{"name": "client"}, {"name": "server"}],
        "links": [link],
        "flows": [{"name": FLOW, "from": "server", "to": "client", "port": PORT,
                   "tcp": tcp, "app": app}],
        "monitor": {"interval": "10ms", "queues": False, "links": False,
                    "capture": [{"link": "line", "file": "line.pcap", "snaplen": 80}]},
    }


def read_pcap(path: Path) -> Iterator[tuple[float, bytes, int]]:
    """(time, IP packet, IP total length) of a classic pcap file with raw IP (the
    simulator's) or Ethernet frames."""
    b = Path(path).read_bytes()
    magic = struct.unpack_from("<I", b, 0)[0]
    nano = magic == 0xA1B23C4D
    link = struct.unpack_from("<I", b, 20)[0]
    off = 24
    while off + 16 <= len(b):
        sec, frac, incl, _ = struct.unpack_from("<IIII", b, off)
        data = b[off + 16: off + 16 + incl]
        off += 16 + incl
        if link == 1:
            if struct.unpack_from("!H", data, 12)[0] != 0x0800:
                continue
            data = data[14:]
        yield sec + frac * (1e-9 if nano else 1e-6), data, struct.unpack_from("!H", data, 2)[0]


def parse_ip(t: float, ip: bytes, total: int, server: str) -> Packet | None:
    """A TCP packet from an IPv4 header and what follows (None if not TCP)."""
    if ip[0] >> 4 != 4 or ip[9] != 6:
        return None
    ihl = (ip[0] & 0x0F) * 4
    src = ".".join(str(x) for x in ip[12:16])
    _, _, seq, ack, off_flags = struct.unpack_from("!HHIIH", ip, ihl)
    doff = (off_flags >> 12) * 4
    return Packet(t, "server" if src == server else "client", seq, ack, off_flags & 0x1FF,
                  total - ihl - doff)


def run_sim(case: Case, sack: bool, timestamps: bool, work: Path) -> Trace:
    """Run the case in the simulator (`work` holds its capture)."""
    from asymlink.runner import run
    from asymlink.scenario import Scenario

    work.mkdir(parents=True, exist_ok=True)
    sc = Scenario.from_dict(sim_scenario(case, sack, timestamps))
    res = run(sc, out_dir=work)
    fs = res.table("flow_summary")
    row = fs[fs["flow"] == FLOW].iloc[0]
    counters = {k: float(row[col]) if col in row else math.nan
                for k, (col, _) in COUNTERS.items()}
    if "loss_probes" not in row:
        # Tail-loss probes as events, if the model records them; none otherwise.
        ev = res.table("events")
        counters["loss_probes"] = float(ev["kind"].isin(["loss_probe", "tlp"]).sum()
                                        if len(ev) else 0)
    flows = res.table("flows")
    f = flows[flows["flow"] == FLOW]
    mss = mss_of(timestamps)
    cwnd = ssthresh = None
    if len(f):
        last = f.iloc[-1]
        cwnd = round(float(last["cwnd_bytes"]) / mss, 1)
        ss = float(last["ssthresh_bytes"])
        ssthresh = None if math.isnan(ss) else round(ss / mss, 1)
    server_addr = _sim_addr(res, "server")
    packets = [p for t, ip, n in read_pcap(work / "line.pcap")
               if (p := parse_ip(t, ip, n, server_addr)) is not None]
    return Trace(packets, counters, cwnd, ssthresh, mss)


def _sim_addr(res: Any, node: str) -> str:
    # Hosts are numbered 10.0.0.1, 10.0.0.2, ... in scenario order (client, server).
    return {"client": "10.0.0.1", "server": "10.0.0.2"}[node]


# --- the lab ------------------------------------------------------------------------------


def _netstat(lab: Lab, role: str) -> dict[str, int]:
    """The namespace's TcpExt and Tcp counters (what `nstat` reads)."""
    out: dict[str, int] = {}
    for f in ("/proc/net/netstat", "/proc/net/snmp"):
        r = subprocess.run(lab.exec_argv(role, ["cat", f]), capture_output=True, text=True,
                           timeout=10, check=True)
        lines = r.stdout.splitlines()
        for names, vals in zip(lines[::2], lines[1::2], strict=False):
            prefix, keys = names.split(":", 1)
            for k, v in zip(keys.split(), vals.split(":", 1)[1].split(), strict=False):
                if prefix in ("TcpExt", "Tcp"):
                    out[k] = int(v)
    return out


def _peer(lab: Lab, role: str, args: list[str]) -> subprocess.Popen[bytes]:
    return lab.spawn(role, [sys.executable, PEER, *args], stdout=subprocess.DEVNULL,
                     stderr=subprocess.PIPE)


def _wait_files(paths: list[Path], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not all(p.exists() for p in paths):
        if time.monotonic() > deadline:
            raise RuntimeError(f"lab peers did not start: {[str(p) for p in paths]}")
        time.sleep(0.01)


def run_lab(case: Case, sack: bool, timestamps: bool, lab: Lab, work: Path) -> Trace:
    """Run the case through real Linux in `lab`: both hosts with SACK and timestamps as
    asked, the box emulating the path with the case's drops, captures on both hosts."""
    from asymlink.lab.box import start_box
    from asymlink.lab.netns import LabError

    work.mkdir(parents=True, exist_ok=True)
    mss = mss_of(timestamps)
    for role in ("client", "server"):
        lab.sysctl(lab.ns(role), "net.ipv4.tcp_sack", str(int(sack)))
        lab.sysctl(lab.ns(role), "net.ipv4.tcp_timestamps", str(int(timestamps)))
    emulation: dict[str, Any] = {"to_a": dict(case.down), "to_b": dict(case.up)}
    for d, key in (("down", "to_a"), ("up", "to_b")):
        drops = case.drops(d, mss, sim=False)
        if drops:
            emulation[key]["drop"] = drops
    box = start_box(lab, {"seed": 1, "emulation": emulation})
    procs: list[subprocess.Popen[bytes]] = []
    try:
        before = {r: _netstat(lab, r) for r in ("client", "server")}
        caps = {}
        ready = []
        for role in ("client", "server"):
            caps[role] = work / f"{role}.jsonl"
            rd = work / f"{role}.capture.ready"
            ready.append(rd)
            procs.append(_peer(lab, role, ["capture", "--port", str(PORT), "--out",
                                           str(caps[role]), "--pcap", str(work / f"{role}.pcap"),
                                           "--ready", str(rd)]))
        srv_ready = work / "server.ready"
        report = work / "server.json"
        args = ["server", "--port", str(PORT), "--mss", str(mss), "--ready", str(srv_ready),
                "--report", str(report), "--idle", str(case.idle)]
        for w in case.writes:
            args += ["--writes", str(w)]
        server = _peer(lab, "server", args)
        procs.append(server)
        _wait_files([*ready, srv_ready], 10)
        client = _peer(lab, "client", ["client", "--to", lab.addr("server"), "--port",
                                       str(PORT), "--window",
                                       str(case.window_segments * mss)])
        procs.append(client)
        for p in (client, server):
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                raise LabError(f"conformance case {case.name}: the transfer did not end "
                               "within 20 s") from None
            if p.returncode != 0:
                err = p.stderr.read().decode(errors="replace") if p.stderr else ""
                raise LabError(f"conformance case {case.name}: peer failed: {err[-500:]}")
        time.sleep(0.05)
        for p in procs[:2]:
            p.terminate()
        for p in procs[:2]:
            p.wait(timeout=5)
        after = {r: _netstat(lab, r) for r in ("client", "server")}
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        final = box.stop()
        (work / "box_stats.json").write_text(json.dumps(final, indent=2) + "\n")
    delta = {k: after["server"].get(k, 0) - before["server"].get(k, 0)
             for k in after["server"]}
    counters = {k: float(sum(delta.get(n, 0) for n in names))
                for k, (_, names) in COUNTERS.items()}
    rep = json.loads(report.read_text())
    info = rep["tcp_info"]
    packets = []
    for role, path in caps.items():
        for line in path.read_text().splitlines():
            t, sport, _, seq, ack, flags, payload = json.loads(line)
            src = "server" if sport == PORT else "client"
            if src == role:
                packets.append(Packet(t, src, seq, ack, flags, payload))
    ssthresh = info["snd_ssthresh"]
    extra = {"linux": {k: delta.get(k, 0) for k in LINUX_EXTRA if delta.get(k, 0)},
             "client_timeouts": after["client"].get("TCPTimeouts", 0)
             - before["client"].get("TCPTimeouts", 0),
             "maxseg": rep["maxseg"], "cc": rep["cc"]}
    return Trace(packets, counters, float(info["snd_cwnd"]),
                 None if ssthresh >= 0x7FFFFFFF else float(ssthresh), mss, extra)


# --- the report ---------------------------------------------------------------------------


def markdown(verdicts: list[Verdict], sim_only: bool = False) -> str:
    """The report: one row per case and variant."""
    lines = ["# Conformance: the simulator's `linux` profile against Linux", ""]
    if sim_only:
        lines += ["Simulator only (no lab run).", ""]
    lines += ["| case | variant | verdict | retransmitted (sim) | retransmitted (Linux) | "
              "recoveries / timeouts / probes (sim · Linux) | ssthresh after (sim · Linux) "
              "| differences |", "|---|---|---|---|---|---|---|---|"]
    for v in verdicts:
        def retx(e: dict[str, Any]) -> str:
            return ", ".join(f"{g}@{t:.3f}" for t, g in e["retx"]) or "none"

        def cnt(e: dict[str, Any]) -> str:
            c = e["counters"]
            return " / ".join(_fmt(c.get(k)) for k in COUNTERS)

        lab = v.lab if v.lab else None
        lines.append(
            f"| {v.case} | {v.variant} | "
            f"{'agree' if v.agree else 'differ' if lab else '—'} | {retx(v.sim)} | "
            f"{retx(lab) if lab else '—'} | {cnt(v.sim)} · {cnt(lab) if lab else '—'} | "
            f"{_fmt(v.sim['ssthresh'])} · {_fmt(lab['ssthresh']) if lab else '—'} | "
            f"{'; '.join(v.differences)} |")
    return "\n".join(lines) + "\n"


def run_conformance(out: Path, lab: Lab | None = None, cases: list[str] | None = None,
                    ) -> list[Verdict]:
    """Run the catalog (or the named `cases`) in the simulator and, with `lab`, in the
    lab; write `conformance.md` and `conformance.json` to `out`."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    catalog = load_catalog()
    if cases:
        unknown = set(cases) - {c.name for c in catalog}
        if unknown:
            raise ValueError(f"unknown conformance case(s): {', '.join(sorted(unknown))}")
        catalog = [c for c in catalog if c.name in cases]
    verdicts = []
    for variant, sack, ts in VARIANTS:
        for c in catalog:
            work = out / c.name / variant
            sim = run_sim(c, sack, ts, work / "sim")
            if lab is None:
                s = summary(sim)
                verdicts.append(Verdict(c.name, variant, False, [], s, {}))
                continue
            real = run_lab(c, sack, ts, lab, work / "lab")
            verdicts.append(compare(c, variant, sim, real))
    (out / "conformance.md").write_text(markdown(verdicts, sim_only=lab is None))
    (out / "conformance.json").write_text(json.dumps(
        [{"case": v.case, "variant": v.variant, "agree": v.agree,
          "differences": v.differences, "sim": v.sim, "lab": v.lab} for v in verdicts],
        indent=2) + "\n")
    return verdicts
