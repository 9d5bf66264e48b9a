"""Many bulk TCP transfers from one process: the load of `asymlink bench live --subscribers`.

Run as a script inside a namespace (`ip netns exec NS python bulk.py CMD ...`), like
`traffic.py`; it imports nothing outside the standard library. One process carries all
the connections of its side, non-blocking under one `epoll`, so a thousand transfers cost
two processes, not two thousand.

Commands:
* `serve`   — listen on `--port`, accept connections for the whole run and, with
              `--mode send`, send as fast as TCP allows on each (a download to the
              connecting host), or with `--mode recv` count what arrives (an upload).
* `connect` — open one connection from each source address listed in `--sources` (one
              per line) to `--to`, retrying refused or failed attempts, and receive
              (`--mode recv`, a download) or send (`--mode send`, an upload).

The receiving side samples every connection's `tcpi_bytes_received` (`TCP_INFO`) every
`--interval`, each sample with its own time, so a rate does not depend on when this
process got to read the socket. The loop runs at most once every `--tick` (20 ms): each
round reads or writes every ready socket once, which keeps the system calls per second
near connections / tick whatever the packet rate. Both sides stop sending at `--stop`
seconds after `--t0` and write a JSON report: per connection, keyed by the address at the
connecting end (the subscriber), the samples `[[t, bytes], ...]` on the receiving side and
the bytes sent on the sending side.
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import select
import signal
import socket
import struct
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TCP_INFO = 11
#: Offset of `tcpi_bytes_received` (u64) in `struct tcp_info` (linux/tcp.h, Linux >= 4.1).
BYTES_RECEIVED_AT = 128
CHUNK = 1 << 16
#: Reads or writes per ready socket and round at most (a fast connection on a slow loop).
PER_ROUND = 8


@dataclass
class Flow:
    """One connection: its socket, the subscriber's address, and what it carried."""

    sock: socket.socket
    addr: str
    connected: bool = False
    sent: int = 0
    received: int = 0
    samples: list[tuple[float, int]] = field(default_factory=list)


def bytes_received(sock: socket.socket) -> int:
    raw = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, BYTES_RECEIVED_AT + 8)
    if len(raw) < BYTES_RECEIVED_AT + 8:
        return 0
    return int(struct.unpack_from("Q", raw, BYTES_RECEIVED_AT)[0])


def tcp_socket(cc: str) -> socket.socket:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if cc:
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_CONGESTION, cc.encode())
    return s


_stop = False


def _on_term(signum: int, frame: object) -> None:
    global _stop
    _stop = True


def _write(path: str | None, report: dict[str, Any]) -> None:
    if path is None:
        return
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        json.dump(report, f)
    os.replace(tmp, path)


class Loop:
    """The shared event loop: connections by file descriptor, sampling, the round tick."""

    def __init__(self, a: argparse.Namespace) -> None:
        self.a = a
        self.ep = select.epoll()
        self.flows: dict[int, Flow] = {}
        self.data = memoryview(b"\x5a" * CHUNK)
        self.buf = bytearray(CHUNK)
        self.errors: dict[str, int] = {}
        self.sending = a.mode == "send"

    def now(self) -> float:
        return time.monotonic() - float(self.a.t0)

    def established(self, fl: Flow) -> None:
        fl.connected = True
        fl.sock.setblocking(False)
        self.ep.register(fl.sock.fileno(), select.EPOLLOUT if self.sending else select.EPOLLIN)

    def drop(self, fd: int) -> Flow:
        """Close one connection; a sender's with a reset, so that no data it still holds
        keeps crossing the lines after the run."""
        fl = self.flows.pop(fd)
        with contextlib.suppress(OSError):
            self.ep.unregister(fd)
        if self.sending:
            with contextlib.suppress(OSError):
                fl.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        fl.sock.close()
        return fl

    def serve_flow(self, fd: int, ev: int) -> None:
        """Write to (or read from) one ready connection."""
        fl = self.flows[fd]
        for _ in range(PER_ROUND):
            try:
                if self.sending:
                    n = fl.sock.send(self.data)
                    fl.sent += n
                    if n < CHUNK:
                        return
                else:
                    n = fl.sock.recv_into(self.buf)
                    if n == 0:
                        self.ep.unregister(fd)
                        return
                    fl.received += n
                    if n < CHUNK:
                        return
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:
                name = errno.errorcode.get(e.errno or 0, str(e))
                self.errors[name] = self.errors.get(name, 0) + 1
                self.ep.unregister(fd)
                return

    def sample(self) -> None:
        for fl in self.flows.values():
            if fl.connected and not self.sending:
                with contextlib.suppress(OSError):
                    fl.samples.append((self.now(), bytes_received(fl.sock)))

    def report(self, kind: str, extra: dict[str, Any]) -> dict[str, Any]:
        flows = [fl for fl in self.flows.values() if fl.connected]
        out: dict[str, Any] = {"kind": kind, "mode": self.a.mode, "connected": len(flows),
                               "errors": self.errors, **extra}
        if self.sending:
            out["sent"] = {fl.addr: fl.sent for fl in flows}
        else:
            out["flows"] = {fl.addr: fl.samples for fl in flows}
        return out

    def run(self, on_event: Callable[[int, int], None],
            on_round: Callable[[], None] | None = None) -> None:
        """Rounds until `--stop` (sending and sampling) and then, for a receiver, one last
        sample. `on_event(fd, ev)` handles what is not a connection."""
        a = self.a
        end = a.t0 + a.stop
        next_sample = time.monotonic()
        while not _stop:
            start = time.monotonic()
            if start >= end:
                break
            if start >= next_sample:
                self.sample()
                next_sample += a.interval
                if next_sample < start:
                    next_sample = start + a.interval
            if on_round is not None:
                on_round()
            wait = max(0.0, min(next_sample, end) - time.monotonic())
            try:
                events = self.ep.poll(wait, max(1, len(self.flows) + 1))
            except InterruptedError:
                continue
            for fd, ev in events:
                if fd in self.flows and self.flows[fd].connected:
                    self.serve_flow(fd, ev)
                else:
                    on_event(fd, ev)
            # One round per tick: what becomes ready meanwhile is served together.
            rest = start + a.tick - time.monotonic()
            if rest > 0:
                time.sleep(rest)
        self.sample()


def serve(a: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, _on_term)
    loop = Loop(a)
    srv = tcp_socket(a.cc)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((a.bind, a.port))
    srv.listen(a.backlog)
    srv.setblocking(False)
    loop.ep.register(srv.fileno(), select.EPOLLIN)
    if a.ready:
        open(a.ready, "w").close()

    def on_event(fd: int, ev: int) -> None:
        if fd != srv.fileno():
            return
        while True:
            try:
                c, peer = srv.accept()
            except (BlockingIOError, InterruptedError):
                return
            fl = Flow(c, peer[0])
            loop.flows[c.fileno()] = fl
            loop.established(fl)

    loop.run(on_event)
    _write(a.report, loop.report("serve", {}))
    srv.close()
    for fd in list(loop.flows):
        loop.drop(fd)


def connect(a: argparse.Namespace) -> None:
    signal.signal(signal.SIGTERM, _on_term)
    loop = Loop(a)
    with open(a.sources) as f:
        sources = [line.strip() for line in f if line.strip()]
    pending: dict[int, Flow] = {}
    retry: list[tuple[float, str]] = [(0.0, s) for s in sources]
    attempts = 0

    def start(src: str) -> None:
        nonlocal attempts
        attempts += 1
        s = tcp_socket(a.cc)
        s.setblocking(False)
        s.bind((src, 0))
        err = s.connect_ex((a.to, a.port))
        if err not in (0, errno.EINPROGRESS):
            s.close()
            retry.append((time.monotonic() + 0.2, src))
            return
        fl = Flow(s, src)
        loop.flows[s.fileno()] = fl
        pending[s.fileno()] = fl
        loop.ep.register(s.fileno(), select.EPOLLOUT)

    def on_round() -> None:
        now = time.monotonic()
        due = [r for r in retry if r[0] <= now]
        if due:
            retry[:] = [r for r in retry if r[0] > now]
            for _, src in due:
                start(src)

    def on_event(fd: int, ev: int) -> None:
        fl = pending.pop(fd, None)
        if fl is None:
            return
        err = fl.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        loop.ep.unregister(fd)
        if err == 0:
            loop.established(fl)
            return
        name = errno.errorcode.get(err, str(err))
        loop.errors[name] = loop.errors.get(name, 0) + 1
        loop.flows.pop(fd, None)
        fl.sock.close()
        retry.append((time.monotonic() + 0.2, fl.addr))

    time.sleep(max(0.0, a.t0 - time.monotonic()))
    loop.run(on_event, on_round)
    _write(a.report, loop.report("connect", {"sources": len(sources), "attempts": attempts}))
    for fd in list(loop.flows):
        loop.drop(fd)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="bulk.py", description=(__doc__ or "").splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--port", type=int, required=True)
        sp.add_argument("--mode", choices=["send", "recv"], required=True)
        sp.add_argument("--t0", type=float, required=True, help="time origin (monotonic)")
        sp.add_argument("--stop", type=float, required=True, help="seconds after t0")
        sp.add_argument("--interval", type=float, default=0.25, help="sampling, s")
        sp.add_argument("--tick", type=float, default=0.02, help="shortest round, s")
        sp.add_argument("--cc", default="", help="TCP congestion control (e.g. cubic)")
        sp.add_argument("--report", default=None)

    sp = sub.add_parser("serve")
    common(sp)
    sp.add_argument("--bind", default="0.0.0.0")
    sp.add_argument("--backlog", type=int, default=4096)
    sp.add_argument("--ready", default=None)
    sp.set_defaults(fn=serve)
    sp = sub.add_parser("connect")
    common(sp)
    sp.add_argument("--to", required=True)
    sp.add_argument("--sources", required=True, help="file: one source address a line")
    sp.set_defaults(fn=connect)
    return p


def main(argv: list[str] | None = None) -> None:
    p = parser()
    a = p.parse_args(argv)
    if a.stop > 3600:
        p.error("runs are bounded to one hour")
    a.fn(a)


if __name__ == "__main__":
    main(sys.argv[1:])
