"""The lab's own traffic tool: real Linux TCP (and ICMP) between network namespaces.

Run as a script inside a namespace (`ip netns exec NS python traffic.py CMD ...`); it
imports nothing outside the standard library, so it starts fast and needs no installed
package. Every command is bounded in time and writes a JSON report.

Commands:
* `sink`    — accept TCP connections, count bytes received; sample `bytes_delivered` every
              `--interval` (the simulator's `flows.bytes_delivered`).
* `send`    — connect and send as fast as TCP allows (optionally paced with
              `SO_MAX_PACING_RATE`); sample the kernel's `TCP_INFO` every `--interval`: cwnd,
              ssthresh, srtt, rto, bytes in flight, sent, acked, retransmits, pacing rate
              (the simulator's `flows` columns); with BBR also `TCP_CC_INFO` (bandwidth,
              min RTT, pacing and cwnd gain), and every `--cc-every` the gains alone,
              recording each change of them, of the bandwidth or of the min RTT (BBR's phase
              changes) as a `phases` row.
* `echo-server` / `echo-client` — typed-echo probes: one byte every `--every` (not
              waiting for the previous echo), echoed back; the time to the echo is
              `echo_latency_s`, recorded when the echo arrives (as the simulator's telnet
              app).
* `ping`    — ICMP echo over a raw socket (root in the namespace): `ping_rtt_s`; `--bind`
              chooses the source address.

Every report records the process's SCHED_FIFO priority (`sched_priority`, 0 under the
ordinary scheduler). Times in reports are seconds since `--t0` (a `time.monotonic()`
value shared by every process of a run; namespaces share the monotonic clock).
"""

from __future__ import annotations

import argparse
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from typing import Any

TCP_INFO = 11
TCP_CC_INFO = 26
#: `struct tcp_bbr_info` (linux/inet_diag.h): bw (bytes/s, two u32 halves), min RTT (µs),
#: pacing gain and cwnd gain (× 256).
BBR_INFO_LEN = 20
TCP_WINDOW_CLAMP = 10
SO_MAX_PACING_RATE = 47
CHUNK = 1 << 16


def _now(t0: float) -> float:
    return time.monotonic() - t0


def sched_priority() -> int:
    """This process's SCHED_FIFO priority (0 under any other policy), as every report
    records it: the lab runs the tools under SCHED_FIFO (`chrt`)."""
    if os.sched_getscheduler(0) != os.SCHED_FIFO:
        return 0
    return int(os.sched_getparam(0).sched_priority)


def _write(path: str | None, report: dict[str, Any]) -> None:
    """Write `report` atomically to `path` (a temporary file renamed over it); nothing
    without a path. Never rename over a device: as root, replacing /dev/null with a
    regular file breaks every program on the machine."""
    if path is None:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump({**report, "sched_priority": sched_priority()}, f)
    os.replace(tmp, path)


def tcp_info(sock: socket.socket) -> dict[str, float]:
    """The fields of `struct tcp_info` (linux/tcp.h) the flow table needs."""
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 232)
    u32 = struct.unpack_from("24I", raw, 8)
    mss = u32[2] or 1
    out = {
        "cwnd_bytes": float(u32[18] * mss),
        # 0x7fffffff is the kernel's "infinite" (slow start never left).
        "ssthresh_bytes": float(u32[17] * mss) if u32[17] < 0x7FFFFFFF else float("nan"),
        "srtt_ms": u32[15] / 1000.0,
        "rto_ms": u32[0] / 1000.0,
        "inflight_bytes": float(u32[4] * mss),
        "retransmits": float(u32[23]),
    }
    # tcpi_delivery_rate_app_limited: whether the last delivery-rate sample was
    # app-limited (bit 0 of the eighth byte).
    out["app_limited"] = float(raw[7] & 1)
    if len(raw) >= 112:
        # tcpi_pacing_rate (bytes/s; ~0 when the socket does not pace).
        rate = struct.unpack_from("Q", raw, 104)[0]
        out["pacing_rate_bps"] = float(rate * 8) if rate < (1 << 63) else float("nan")
    if len(raw) >= 216:
        out["bytes_acked"] = float(struct.unpack_from("Q", raw, 120)[0])
        out["bytes_sent"] = float(struct.unpack_from("Q", raw, 200)[0])
    return out


def bbr_info(sock: socket.socket) -> dict[str, float] | None:
    """BBR's `TCP_CC_INFO` (`struct tcp_bbr_info`), or None when the socket's congestion
    control reports none (CUBIC reports nothing)."""
    try:
        raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_CC_INFO, BBR_INFO_LEN)
    except OSError:
        return None
    if len(raw) < BBR_INFO_LEN:
        return None
    lo, hi, min_rtt_us, pacing_gain, cwnd_gain = struct.unpack_from("5I", raw)
    return {"bbr_bw_bps": float(((hi << 32) | lo) * 8),
            "bbr_min_rtt_ms": min_rtt_us / 1000.0,
            "bbr_pacing_gain": pacing_gain / 256.0,
            "bbr_cwnd_gain": cwnd_gain / 256.0}


def tcp_socket(a: argparse.Namespace, family: int) -> socket.socket:
    """A TCP socket with congestion control `--cc` (default: the namespace's). Per socket,
    because a network namespace other than the host's may only default to the host's
    *allowed* algorithms; root may still pick any available one per socket. Connections
    accepted on a listening socket inherit its algorithm."""
    s = socket.socket(family, socket.SOCK_STREAM)
    if a.cc:
        try:
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, a.cc.encode())
        except OSError as e:
            s.close()
            raise SystemExit(f"traffic.py: congestion control '{a.cc}': {e.strerror} "
                             "(see /proc/sys/net/ipv4/tcp_available_congestion_control)") from None
    return s


def congestion_control(s: socket.socket) -> str:
    return s.getsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, 16).split(b"\0")[0].decode()


_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def sink(a: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, _on_term)
    srv = tcp_socket(a, socket.AF_INET6 if ":" in a.bind else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if a.rcvbuf:
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, a.rcvbuf)
    if a.window:
        # A fixed receive window (what the simulator's `rcvbuf` is): a buffer large enough
        # for it (Linux doubles SO_RCVBUF and advertises about half to two thirds of the
        # buffer), which also turns receive-buffer autotuning off — autotuning would
        # raise the window clamp with the buffer — and the clamp itself. Accepted
        # connections inherit both.
        if not a.rcvbuf:
            srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 2 * a.window)
        srv.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, a.window)
    srv.bind((a.bind, a.port))
    srv.listen(16)
    srv.setblocking(False)
    deadline = time.monotonic() + a.seconds
    conns: dict[socket.socket, int] = {}
    total = 0
    samples: list[tuple[float, int]] = []
    next_sample = time.monotonic()
    buf = bytearray(CHUNK * 4)
    open(a.ready, "w").close() if a.ready else None
    while time.monotonic() < deadline and not _stop:
        now = time.monotonic()
        if now >= next_sample:
            samples.append((_now(a.t0), total))
            next_sample = now + a.interval
        timeout = max(0.0, min(next_sample, deadline) - time.monotonic())
        try:
            r, _, _ = select.select([srv, *conns], [], [], timeout)
        except InterruptedError:
            continue
        for s in r:
            if s is srv:
                try:
                    c, _ = srv.accept()
                except BlockingIOError:
                    continue
                c.setblocking(False)
                if a.window:
                    # Also on the connection itself: a clamp set on a listening socket
                    # does not reach the connections it accepts on every kernel.
                    c.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, a.window)
                conns[c] = 0
                continue
            try:
                n = s.recv_into(buf)
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                n = 0
            if n == 0:
                s.close()
                conns.pop(s, None)
                continue
            if a.window:
                # Re-assert the clamp: Linux (6.x) resets a connection's window clamp to
                # its whole buffer whenever it re-estimates the buffer's payload ratio
                # (`scaling_ratio`, on a change of the received segment size), even with
                # the buffer locked; the window would then open to 2-4 times `--window`.
                s.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, a.window)
            total += n
    samples.append((_now(a.t0), total))
    _write(a.report, {"kind": "sink", "bytes": total, "samples": samples})


def send(a: argparse.Namespace) -> None:
    time.sleep(max(0.0, a.t0 + a.start - time.monotonic()))
    fam = socket.AF_INET6 if ":" in a.to else socket.AF_INET
    s = tcp_socket(a, fam)
    if a.sndbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, a.sndbuf)
    if a.rate:
        s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate // 8))
    deadline = a.t0 + a.stop
    connect_deadline = time.monotonic() + 10
    while True:
        try:
            s.settimeout(2.0)
            s.connect((a.to, a.port))
            break
        except OSError:
            if time.monotonic() > connect_deadline:
                raise
            time.sleep(0.1)
            s.close()
            s = tcp_socket(a, fam)
            if a.rate:
                s.setsockopt(socket.SOL_SOCKET, SO_MAX_PACING_RATE, int(a.rate // 8))
    s.setblocking(False)
    data = memoryview(b"\x5a" * CHUNK)
    sent = 0
    samples: list[dict[str, float]] = []
    # BBR's phase changes: a row whenever the gains (or the bandwidth or min-RTT estimate)
    # change, looked at every --cc-every.
    phases: list[dict[str, float]] = []
    gains: tuple[float, float, float, float] | None = None
    bbr = bbr_info(s) is not None
    next_sample = next_cc = time.monotonic()
    while True:
        now = time.monotonic()
        if now >= deadline:
            break
        if now >= next_sample:
            row = {"t": _now(a.t0), **tcp_info(s), **(bbr_info(s) or {})}
            samples.append(row)
            next_sample = now + a.interval
        if bbr and now >= next_cc:
            info = bbr_info(s)
            if info is not None:
                now_gains = (info["bbr_pacing_gain"], info["bbr_cwnd_gain"], info["bbr_bw_bps"],
                             info["bbr_min_rtt_ms"])
                if now_gains != gains:
                    gains = now_gains
                    phases.append({"t": _now(a.t0), **info, **tcp_info(s)})
            next_cc = now + a.cc_every
        wake = min(next_sample, next_cc) if bbr else next_sample
        timeout = max(0.0, min(wake, deadline) - time.monotonic())
        _, w, _ = select.select([], [s], [], timeout)
        if w:
            try:
                sent += s.send(data)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                break
    samples.append({"t": _now(a.t0), **tcp_info(s), **(bbr_info(s) or {})})
    cc = congestion_control(s)
    s.close()
    _write(a.report, {"kind": "send", "bytes": sent, "samples": samples, "cc": cc,
                      "phases": phases})


def echo_server(a: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, _on_term)
    srv = tcp_socket(a, socket.AF_INET6 if ":" in a.bind else socket.AF_INET)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((a.bind, a.port))
    srv.listen(4)
    srv.setblocking(False)
    deadline = time.monotonic() + a.seconds
    conns: list[socket.socket] = []
    open(a.ready, "w").close() if a.ready else None
    while time.monotonic() < deadline and not _stop:
        try:
            wait = min(0.2, max(0.0, deadline - time.monotonic()))
            r, _, _ = select.select([srv, *conns], [], [], wait)
        except InterruptedError:
            continue
        for s in r:
            if s is srv:
                c, _ = srv.accept()
                c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                conns.append(c)
                continue
            try:
                d = s.recv(4096)
            except OSError:
                d = b""
            if not d:
                s.close()
                conns.remove(s)
            else:
                s.sendall(d)


def echo_client(a: argparse.Namespace) -> None:
    """One keystroke every `--every`, whether or not the previous one was echoed (as the
    simulator's telnet app types); each echo's latency is recorded when it arrives, at
    its arrival time. Echoes still missing one second after `--stop` count as lost."""
    time.sleep(max(0.0, a.t0 + a.start - time.monotonic()))
    s = tcp_socket(a, socket.AF_INET6 if ":" in a.to else socket.AF_INET)
    s.settimeout(10)
    s.connect((a.to, a.port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.setblocking(False)
    deadline = a.t0 + a.stop
    out: list[tuple[float, float]] = []
    typed: list[float] = []
    echoed = 0
    next_key = time.monotonic()
    closed = False
    while not closed:
        now = time.monotonic()
        if now >= deadline + 1.0 or (now >= deadline and echoed == len(typed)):
            break
        if now >= next_key and now < deadline:
            try:
                if s.send(b"k") == 1:
                    typed.append(now)
            except (BlockingIOError, InterruptedError):
                pass
            except OSError:
                break
            next_key += a.every
            continue
        wake = next_key if next_key < deadline else deadline + 1.0
        r, _, _ = select.select([s], [], [], max(0.0, wake - time.monotonic()))
        if not r:
            continue
        try:
            d = s.recv(4096)
        except (BlockingIOError, InterruptedError):
            continue
        except OSError:
            d = b""
        if not d:
            closed = True
            break
        t = time.monotonic()
        for _ in range(len(d)):
            if echoed < len(typed):
                out.append((t - a.t0, t - typed[echoed]))
                echoed += 1
    s.close()
    _write(a.report, {"kind": "echo", "metric": "echo_latency_s", "samples": out,
                      "lost": len(typed) - echoed})


def _icmp_checksum(b: bytes) -> int:
    if len(b) % 2:
        b += b"\0"
    s: int = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return ~s & 0xFFFF


def ping(a: argparse.Namespace) -> None:
    time.sleep(max(0.0, a.t0 + a.start - time.monotonic()))
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    if a.bind:
        # The echo request's source address (a host with several, e.g. subscribers).
        s.bind((a.bind, 0))
    ident = os.getpid() & 0xFFFF
    deadline = a.t0 + a.stop
    out: list[tuple[float, float]] = []
    sent = 0
    seq = 0
    while time.monotonic() < deadline:
        seq = (seq + 1) & 0xFFFF
        payload = struct.pack("!d", time.monotonic()) + b"asymlink" * 4
        hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
        pkt = struct.pack("!BBHHH", 8, 0, _icmp_checksum(hdr + payload), ident, seq) + payload
        t_send = time.monotonic()
        s.sendto(pkt, (a.to, 0))
        sent += 1
        wait_until = t_send + a.timeout
        while time.monotonic() < wait_until:
            r, _, _ = select.select([s], [], [], max(0.0, wait_until - time.monotonic()))
            if not r:
                break
            data = s.recv(2048)
            ihl = (data[0] & 0x0F) * 4
            typ, _, _, rid, rseq = struct.unpack_from("!BBHHH", data, ihl)
            if typ == 0 and rid == ident and rseq == seq:
                out.append((_now(a.t0), time.monotonic() - t_send))
                break
        time.sleep(max(0.0, t_send + a.every - time.monotonic()))
    _write(a.report, {"kind": "ping", "metric": "ping_rtt_s", "samples": out, "sent": sent})


def parser() -> argparse.ArgumentParser:
    """The command line of the traffic helpers (`sink`, `send`, `echo-*`, `ping`)."""
    p = argparse.ArgumentParser(prog="traffic.py", description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--t0", type=float, default=None, help="shared time origin (monotonic)")
        sp.add_argument("--report", required=False, default=None)
        sp.add_argument("--interval", type=float, default=0.1)
        sp.add_argument("--cc", default="", help="TCP congestion control (e.g. cubic)")

    sp = sub.add_parser("sink")
    common(sp)
    sp.add_argument("--bind", default="0.0.0.0")
    sp.add_argument("--port", type=int, required=True)
    sp.add_argument("--seconds", type=float, required=True)
    sp.add_argument("--rcvbuf", type=int, default=0)
    sp.add_argument("--window", type=int, default=0, help="TCP_WINDOW_CLAMP, bytes")
    sp.add_argument("--ready", default=None)
    sp.set_defaults(fn=sink)
    for name, fn in (("send", send), ("echo-client", echo_client), ("ping", ping)):
        sp = sub.add_parser(name)
        common(sp)
        sp.add_argument("--to", required=True)
        sp.add_argument("--port", type=int, default=0)
        sp.add_argument("--start", type=float, default=0.0, help="seconds after t0")
        sp.add_argument("--stop", type=float, required=True, help="seconds after t0")
        sp.add_argument("--rate", type=float, default=0.0, help="pacing rate, bit/s")
        sp.add_argument("--sndbuf", type=int, default=0)
        sp.add_argument("--every", type=float, default=0.2)
        sp.add_argument("--timeout", type=float, default=2.0)
        sp.add_argument("--cc-every", type=float, default=0.002,
                        help="send: how often BBR's gains are looked at (phase changes), s")
        if name == "ping":
            sp.add_argument("--bind", default="", help="source address of the requests")
        sp.set_defaults(fn=fn)
    sp = sub.add_parser("echo-server")
    common(sp)
    sp.add_argument("--bind", default="0.0.0.0")
    sp.add_argument("--port", type=int, required=True)
    sp.add_argument("--seconds", type=float, required=True)
    sp.add_argument("--ready", default=None)
    sp.set_defaults(fn=echo_server)
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    a = p.parse_args(argv)
    if a.t0 is None:
        a.t0 = time.monotonic()
    if getattr(a, "seconds", 1) > 3600 or getattr(a, "stop", 1) > 3600:
        p.error("runs are bounded to one hour")
    a.fn(a)


if __name__ == "__main__":
    main(sys.argv[1:])
