"""The lab side of a conformance case: a download server, its client and a capture of
what a host sends. Standard library only; run inside a lab namespace.

    peer.py capture --dev eth0 --port 5001 --out FILE [--pcap FILE] --ready FILE
    peer.py server --port 5001 --mss 1448 --writes 100 [--writes 60 --idle 2]
                   --ready FILE --report FILE
    peer.py client --to 198.18.0.2 --port 5001 [--window BYTES]

`capture` records every TCP packet of the port that the host sends (AF_PACKET, outgoing
frames of `--dev`) as JSON lines `[t, sport, dport, seq, ack, flags, payload_len]`, kernel
timestamps in seconds, until SIGTERM (and with `--pcap` the frames, cut at 128 bytes).
`server` accepts one connection, writes `writes` full segments of `mss` bytes (waiting
until everything is acknowledged and then `idle` seconds between writes), waits for the
last byte to be acknowledged, and reports the sender's TCP_INFO (cwnd, ssthresh, ...)
before closing. `client` connects and reads to the end, its receive window clamped to
`window` bytes if given.
"""

from __future__ import annotations

import argparse
import array
import fcntl
import json
import signal
import socket
import struct
import sys
import time
from pathlib import Path
from typing import Any

ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
SO_TIMESTAMPNS = 35
TCP_CONGESTION = 13
TCP_WINDOW_CLAMP = 10
TCP_INFO = 11
SIOCOUTQ = 0x5411
#: TCP_INFO: 8 bytes of u8 fields, then u32 fields in this order.
INFO_FIELDS = ("rto", "ato", "snd_mss", "rcv_mss", "unacked", "sacked", "lost", "retrans",
               "fackets", "last_data_sent", "last_ack_sent", "last_data_recv",
               "last_ack_recv", "pmtu", "rcv_ssthresh", "rtt", "rttvar", "snd_ssthresh",
               "snd_cwnd", "advmss", "reordering", "rcv_rtt", "rcv_space", "total_retrans")


def tcp_info(s: socket.socket) -> dict[str, int]:
    raw = s.getsockopt(socket.IPPROTO_TCP, TCP_INFO, 8 + 4 * len(INFO_FIELDS))
    vals = struct.unpack_from(f"=8B{len(INFO_FIELDS)}I", raw)
    info = dict(zip(INFO_FIELDS, vals[8:], strict=True))
    info["ca_state"] = vals[1]
    return info


def capture(args: argparse.Namespace) -> int:
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    s.bind((args.dev, 0))
    s.settimeout(0.2)
    stop = False

    def on_term(*_: Any) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    out = open(args.out, "w")  # noqa: SIM115 - closed below, after the loop
    pcap = open(args.pcap, "wb") if args.pcap else None  # noqa: SIM115 - as `out`
    if pcap:
        # Classic pcap, nanosecond timestamps, Ethernet, the first 128 bytes of a frame.
        pcap.write(struct.pack("<IHHiIII", 0xA1B23C4D, 2, 4, 0, 0, 128, 1))
    Path(args.ready).write_text("1")
    while not stop:
        try:
            data, anc, _, addr = s.recvmsg(256, socket.CMSG_SPACE(16))
        except TimeoutError:
            continue
        except InterruptedError:
            continue
        if addr[2] != PACKET_OUTGOING or len(data) < 14 + 20 + 20:
            continue
        if struct.unpack_from("!H", data, 12)[0] != 0x0800:
            continue
        ip = data[14:]
        ihl = (ip[0] & 0x0F) * 4
        if ip[9] != 6:
            continue
        total = struct.unpack_from("!H", ip, 2)[0]
        tcp = ip[ihl:]
        sport, dport, seq, ack, off_flags = struct.unpack_from("!HHIIH", tcp, 0)
        if args.port not in (sport, dport):
            continue
        doff = (off_flags >> 12) * 4
        t = time.time()
        for level, kind, value in anc:
            if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                sec, nsec = struct.unpack("=qq", value[:16])
                t = sec + nsec * 1e-9
        out.write(json.dumps([t, sport, dport, seq, ack, off_flags & 0x1FF,
                              total - ihl - doff]) + "\n")
        if pcap:
            cap = data[:128]
            ns = round(t * 1e9)
            pcap.write(struct.pack("<IIII", ns // 10**9, ns % 10**9, len(cap), len(data)))
            pcap.write(cap)
    out.close()
    if pcap:
        pcap.close()
    return 0


def _unsent(s: socket.socket) -> int:
    buf = array.array("i", [0])
    fcntl.ioctl(s.fileno(), SIOCOUTQ, buf)
    return buf[0]


def _wait_acked(s: socket.socket, deadline: float) -> None:
    while _unsent(s) > 0 and time.monotonic() < deadline:
        time.sleep(0.002)


def server(args: argparse.Namespace) -> int:
    ls = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.setsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, args.cc.encode())
    ls.bind(("0.0.0.0", args.port))
    ls.listen(1)
    ls.settimeout(args.seconds)
    Path(args.ready).write_text("1")
    conn, _ = ls.accept()
    deadline = time.monotonic() + args.seconds
    report: dict[str, Any] = {"maxseg": conn.getsockopt(socket.IPPROTO_TCP,
                                                        socket.TCP_MAXSEG)}
    for i, n in enumerate(args.writes):
        if i:
            _wait_acked(conn, deadline)
            time.sleep(args.idle)
        conn.sendall(b"\0" * (n * args.mss))
    _wait_acked(conn, deadline)
    report["acked"] = _unsent(conn) == 0
    report["tcp_info"] = tcp_info(conn)
    report["cc"] = conn.getsockopt(socket.IPPROTO_TCP, TCP_CONGESTION, 16).split(b"\0")[0]
    report["cc"] = report["cc"].decode()
    conn.close()
    Path(args.report).write_text(json.dumps(report))
    return 0


def client(args: argparse.Namespace) -> int:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    if args.window:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 * args.window)
        s.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, args.window)
    s.settimeout(args.seconds)
    s.connect((args.to, args.port))
    while True:
        b = s.recv(1 << 16)
        if not b:
            break
        if args.window:
            # Linux 6.x resets the clamp when it re-estimates the buffer's payload ratio.
            s.setsockopt(socket.IPPROTO_TCP, TCP_WINDOW_CLAMP, args.window)
    s.close()
    return 0


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(prog="peer.py")
    sub = p.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("capture")
    c.add_argument("--dev", default="eth0")
    c.add_argument("--port", type=int, required=True)
    c.add_argument("--out", required=True)
    c.add_argument("--pcap", default="")
    c.add_argument("--ready", required=True)
    s = sub.add_parser("server")
    s.add_argument("--port", type=int, required=True)
    s.add_argument("--mss", type=int, required=True)
    s.add_argument("--writes", type=int, action="append", required=True)
    s.add_argument("--idle", type=float, default=0.0)
    s.add_argument("--cc", default="cubic")
    s.add_argument("--seconds", type=float, default=20)
    s.add_argument("--ready", required=True)
    s.add_argument("--report", required=True)
    k = sub.add_parser("client")
    k.add_argument("--to", required=True)
    k.add_argument("--port", type=int, required=True)
    k.add_argument("--window", type=int, default=0)
    k.add_argument("--seconds", type=float, default=20)
    a = p.parse_args(argv)
    return {"capture": capture, "server": server, "client": client}[a.cmd](a)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
