"""The live box (`asymlink-box`) on real devices.

Tests that need root and network namespaces build a lab (`asymlink.lab`) with unique
`al-` names and remove it afterwards; they are skipped, with the reason, where that is
not possible. The box binary is built on demand (`cargo build --release -p asymlink-live`).
"""

from __future__ import annotations

import json
import socket
import struct
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from prometheus_client.parser import text_string_to_metric_families

from asymlink.lab import Lab, can_run_labs, start_box
from asymlink.lab.bench import transfer
from asymlink.live import box_command

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def box_cmd() -> list[str]:
    """The box as the package runs it (the extension module, no separate binary)."""
    return box_command()


@pytest.fixture
def lab(box_cmd: list[str]):
    reason = can_run_labs()
    if reason:
        pytest.skip(f"live tests need root and network namespaces: {reason}")
    lab = Lab.up()
    try:
        yield lab
    finally:
        lab.down()


#: The box's `[process] io` modes: every test on real devices runs in each.
IO_MODES = ["socket", "mmap"]


def _io(io: str) -> dict:
    return {"process": {"io": io}}


def _wait_file(p: Path, timeout: float = 10, content: bool = False) -> None:
    """Wait until `p` exists (and, with `content`, is not empty: the box's ready file)."""
    deadline = time.monotonic() + timeout
    while not (p.exists() and (not content or p.read_text().strip())):
        assert time.monotonic() < deadline, f"{p} did not appear"
        time.sleep(0.02)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# --- configuration refused before any device is touched ----------------------------------


def test_bad_configuration_is_refused_with_the_key(box_cmd: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "box.toml"
    cfg.write_text('[interfaces]\na = "al-none0"\nb = "al-none1"\n'
                   '[to_b]\nqdisc = { kind = "prio", bands = [{ classes = ["nope"] }] }\n')
    r = subprocess.run([*box_cmd, "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2
    assert "to_b." in r.stderr and "nope" in r.stderr
    cfg.write_text('[interfaces]\na = "al-none0"\nb = "al-none1"\n[stats]\n'
                   'prometheus = "0.0.0.0:9464"\n')
    r = subprocess.run([*box_cmd, "--config", str(cfg)], capture_output=True, text=True)
    assert r.returncode == 2 and "stats.prometheus" in r.stderr and "loopback" in r.stderr


def test_check_and_missing_device(box_cmd: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "box.toml"
    cfg.write_text('[interfaces]\na = "al-none0"\nb = "al-none1"\n')
    r = subprocess.run([*box_cmd, "--config", str(cfg), "--check"], capture_output=True,
                       text=True)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([*box_cmd, "--config", str(cfg)], capture_output=True, text=True,
                       timeout=10)
    assert r.returncode == 1
    assert "al-none0" in r.stderr


def test_line_expands_into_both_directions(box_cmd: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "box.toml"
    cfg.write_text('line = { down = "8Mbit", up = "512kbit", linklayer = "llc_snap_routed" }\n'
                   '[interfaces]\na = "al-none0"\nb = "al-none1"\n')
    r = subprocess.run([*box_cmd, "--config", str(cfg), "--print-effective"],
                       capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    import tomllib

    eff = tomllib.loads(r.stdout)
    assert "line" not in eff
    up, down = eff["to_b"]["qdisc"], eff["to_a"]["qdisc"]
    assert up["classes"][0]["rate"] == "486400bit" and up["linklayer"] == "llc_snap_routed"
    assert [c["name"] for c in up["classes"]] == ["line", "interactive", "bulk"]
    assert up["classes"][2]["queue"]["ack_filter"] is True
    assert down["ingress"] is True and down["classes"][0]["rate"] == "7600000bit"
    cfg.write_text('line = { down = "8Mbit", up = "512kbit", up_fraction = 2.0 }\n'
                   '[interfaces]\na = "al-none0"\nb = "al-none1"\n')
    r = subprocess.run([*box_cmd, "--config", str(cfg), "--check"], capture_output=True,
                       text=True, timeout=10)
    assert r.returncode == 2 and "line.up_fraction" in r.stderr, r.stderr


def test_cli_box_check(box_cmd: list[str], tmp_path: Path) -> None:
    cfg = tmp_path / "box.toml"
    cfg.write_text('[interfaces]\na = "x0"\nb = "x1"\n[emulation.to_b]\nloss = 2.0\n')
    from click.testing import CliRunner

    from asymlink.cli import cli

    res = CliRunner().invoke(cli, ["box", "--config", str(cfg), "--check"])
    assert res.exit_code == 2, res.output
    assert "emulation.to_b.loss" in res.output


# --- real TCP through the box ---------------------------------------------------------------


@pytest.mark.parametrize("io", IO_MODES)
def test_real_tcp_stats_pcap_and_privileges(lab: Lab, tmp_path: Path, io: str) -> None:
    port = _free_port()
    box = start_box(lab, {"seed": 3, "stats": {"prometheus": f"127.0.0.1:{port}"},
                          "emulation": {"to_b": {"rate": "50Mbit", "delay": "2ms"}}, **_io(io)},
                    capture_dir=tmp_path)
    status = Path(f"/proc/{box.proc.pid}/status").read_text()
    uid = [ln for ln in status.splitlines() if ln.startswith("Uid:")][0].split()
    cap = [ln for ln in status.splitlines() if ln.startswith("CapEff:")][0].split()[1]
    assert uid[1:] == ["65534"] * 4, status
    assert int(cap, 16) == 0, "no capabilities after the devices are open"
    gbps = transfer(lab, 2.0)
    assert 0.02 < gbps <= 0.051, f"50 Mbit/s emulated link, got {gbps * 1e3:.1f} Mbit/s"
    time.sleep(0.2)
    live = box.stats()
    assert live["directions"]["to_b"]["sent"] > 1000
    # The endpoint listens on the loopback of the box's (router) namespace.
    url = f"http://127.0.0.1:{port}/metrics"
    fetch = f"import urllib.request as u; print(u.urlopen({url!r}, timeout=5).read().decode())"
    body = subprocess.run(lab.exec_argv("router", [sys.executable, "-c", fetch]),
                          capture_output=True, text=True, check=True).stdout
    assert 'asymlink_sent_total{dir="to_b"}' in body
    assert "asymlink_qdisc_dequeued_total" in body
    # The exposition is read by the reference parser: every family typed, every sample valid.
    families = {f.name: f for f in text_string_to_metric_families(body)}
    assert families["asymlink_sent"].type == "counter"
    sent = {s.labels["dir"]: s.value for s in families["asymlink_sent"].samples}
    assert sent["to_b"] > 1000
    assert all(f.type != "unknown" for f in families.values()), sorted(families)
    final = box.stop()
    for d, v in final["directions"].items():
        assert v["received"] == v["sent"] + sum(v["discarded"].values()) + v["held"], d
    assert final["directions"]["to_b"]["link"]["delivered"] > 1000
    for name in ("to_a.pcap", "to_b.pcap"):
        data = (tmp_path / name).read_bytes()
        magic, _, _, _, _, snaplen, linktype = struct.unpack("<IHHiIII", data[:24])
        assert magic == 0xA1B23C4D, "nanosecond pcap"
        assert linktype == 1, "Ethernet"
        assert len(data) > 24 + 16 * 100
    assert final["captures"]["to_b"]["packets"] == final["directions"]["to_b"]["sent"]


UDP_SINK = textwrap.dedent("""
    import socket, sys, time, json
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    s.bind(("0.0.0.0", int(sys.argv[1])))
    s.settimeout(0.5)
    open(sys.argv[3], "w").close()
    got = []
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        try:
            got.append(int(s.recv(2048)[:8]))
        except socket.timeout:
            pass
    print(json.dumps(got))
""")

UDP_BURST = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(int(sys.argv[3])):
        s.sendto(b"%08d" % i + b"x" * 1000, (sys.argv[1], int(sys.argv[2])))
""")


@pytest.mark.parametrize("io", IO_MODES)
def test_sighup_reload_keeps_queued_packets(lab: Lab, tmp_path: Path, io: str) -> None:
    """200 datagrams wait in a 100 kbit/s shaper; SIGHUP replaces it with a plain FIFO:
    every datagram arrives, in order, and none is counted as discarded."""
    slow = {"seed": 1, "to_b": {"qdisc": {"kind": "tbf", "rate": "100kbit", "limit": "500p"}},
            **_io(io)}
    box = start_box(lab, slow)
    ready = tmp_path / "sink.ready"
    (tmp_path / "sink.py").write_text(UDP_SINK)
    (tmp_path / "burst.py").write_text(UDP_BURST)
    tmp_path.chmod(0o755)
    sink = subprocess.Popen(lab.exec_argv("server", [sys.executable, str(tmp_path / "sink.py"),
                                                     "7001", "6", str(ready)]),
                            stdout=subprocess.PIPE, text=True)
    _wait_file(ready)
    # Resolve the server's MAC first: while ARP is pending, the client's kernel keeps
    # only a few datagrams (neighbour queue) and would drop the start of the burst.
    subprocess.run(lab.exec_argv("client", [sys.executable, str(tmp_path / "burst.py"),
                                            lab.addr("server"), "7002", "1"]), check=True)
    time.sleep(0.5)
    subprocess.run(lab.exec_argv("client", [sys.executable, str(tmp_path / "burst.py"),
                                            lab.addr("server"), "7001", "200"]), check=True)
    time.sleep(1.0)
    held = box.stats()["directions"]["to_b"]["qdisc"]["backlog_packets"]
    assert held > 150, f"the shaper holds the burst ({held})"
    box.reload({**_cfg(box), "to_b": {"qdisc": {"kind": "fifo", "limit": "1000p"}}})
    out, _ = sink.communicate(timeout=20)
    got = json.loads(out)
    assert got == list(range(200)), "all datagrams, in order"
    final = box.stop()
    assert final["reloads"] == 1
    assert final["directions"]["to_b"]["discarded"] == {}
    assert "reloaded" in box.log.read_text()


def _cfg(box) -> dict:
    import tomllib

    return tomllib.loads(box.config.read_text())


def _eth(payload: bytes, ethertype: int = 0x0800) -> bytes:
    dst, src = bytes.fromhex("020000000002"), bytes.fromhex("020000000001")
    return dst + src + struct.pack("!H", ethertype) + payload


def _ipv4_tcp(doff: int = 5, ihl: int = 5, total: int | None = None, opts: bytes = b"") -> bytes:
    tcp = struct.pack("!HHIIBBHHH", 40000, 5001, 1, 0, (doff << 4), 0x10, 1000, 0, 0) + opts
    ip_len = total if total is not None else 20 + len(tcp)
    ip = struct.pack("!BBHHHBBH4s4s", (4 << 4) | ihl, 0, ip_len, 7, 0, 64, 6, 0,
                     bytes([198, 18, 0, 1]), bytes([198, 18, 0, 2]))
    return ip + tcp


HOSTILE = {
    "bad_ihl": _eth(_ipv4_tcp(ihl=15)),
    "bad_data_offset": _eth(_ipv4_tcp(doff=15)),
    "options_overrun": _eth(_ipv4_tcp(doff=6, opts=bytes([8, 40, 0, 0]))),
    "truncated": _eth(_ipv4_tcp(total=900)),
    "zero_total_length": _eth(_ipv4_tcp(total=0)),
    "bad_version": _eth(b"\x75" + _ipv4_tcp()[1:]),
    "ipv6_ext_truncated": _eth(bytes([0x60, 0, 0, 0, 0, 8, 0, 64]) + bytes(32)
                               + bytes([6, 0, 1, 4, 0, 0, 0, 0]), 0x86DD),
    "non_ip": _eth(bytes(46), 0x88B5),
}

RAW_SEND = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW)
    s.bind(("eth0", 0))
    for hexframe in sys.argv[1:]:
        s.send(bytes.fromhex(hexframe))
""")

RAW_RECV = textwrap.dedent("""
    import socket, sys, time, json
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind(("eth0", 0))
    s.settimeout(0.3)
    open(sys.argv[2], "w").close()
    got = []
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        try:
            f, addr = s.recvfrom(65535)
        except socket.timeout:
            continue
        if addr[2] != socket.PACKET_OUTGOING and f[:6] == bytes.fromhex("020000000002"):
            got.append(f.hex())
    print(json.dumps(got))
""")


@pytest.mark.parametrize("io", IO_MODES)
def test_hostile_frames_cross_untouched_and_are_counted(lab: Lab, tmp_path: Path,
                                                        io: str) -> None:
    box = start_box(lab, {"seed": 1, "rewrite": [{"kind": "set_dscp", "dscp": 46}], **_io(io)})
    (tmp_path / "send.py").write_text(RAW_SEND)
    (tmp_path / "recv.py").write_text(RAW_RECV)
    ready = tmp_path / "recv.ready"
    rx = subprocess.Popen(lab.exec_argv("server", [sys.executable, str(tmp_path / "recv.py"),
                                                   "3", str(ready)]),
                          stdout=subprocess.PIPE, text=True)
    _wait_file(ready)
    frames = [f.ljust(60, b"\0") if len(f) < 60 else f for f in HOSTILE.values()]
    subprocess.run(lab.exec_argv("client", [sys.executable, str(tmp_path / "send.py"),
                                            *[f.hex() for f in frames]]), check=True)
    out, _ = rx.communicate(timeout=10)
    got = [bytes.fromhex(h) for h in json.loads(out)]
    def outside_dscp_and_ip_checksum(b: bytes) -> bytes:
        return b[:15] + b[16:24] + b[26:]

    for name, f in zip(HOSTILE, frames, strict=True):
        if name == "options_overrun":
            # A TCP segment whose option walk stops early parses (as in Linux) and is
            # treated as possibly signed: the DSCP rewrite applies (mutable even under
            # AH), every TCP byte stays as it was.
            same = [g for g in got
                    if outside_dscp_and_ip_checksum(g) == outside_dscp_and_ip_checksum(f)]
            assert same and same[0][15] >> 2 == 46, f"{name}: only the DSCP rewritten"
        else:
            assert f in got, f"{name} arrived untouched"
    st = box.stats()
    u = st["directions"]["to_b"]["unparsed"]
    malformed = u["bad_ip"] + u["bad_transport"]
    # options_overrun parses (as in Linux, the option list is cut where it overruns) and
    # non_ip is not IP: neither counts as malformed.
    assert malformed == len(HOSTILE) - 2 and u["non_ip"] >= 1, u
    # Still forwarding real traffic afterwards.
    assert transfer(lab, 1.0) > 0.001
    box.stop()


TCP_SINK = textwrap.dedent("""
    import hashlib, socket, sys
    s = socket.socket()
    s.bind(("0.0.0.0", int(sys.argv[1])))
    s.listen(1)
    open(sys.argv[2], "w").close()
    s.settimeout(20)
    c, _ = s.accept()
    c.settimeout(20)
    h, n = hashlib.sha256(), 0
    while b := c.recv(1 << 20):
        h.update(b)
        n += len(b)
    print(n, h.hexdigest())
""")

TCP_SOURCE = textwrap.dedent("""
    import hashlib, os, random, socket, sys
    rng = random.Random(7)
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=20)
    h, n = hashlib.sha256(), 0
    for _ in range(int(sys.argv[3])):
        b = rng.randbytes(rng.randrange(1, 1 << 17))
        s.sendall(b)
        h.update(b)
        n += len(b)
    s.close()
    print(n, h.hexdigest())
""")


@pytest.mark.parametrize("io", IO_MODES)
def test_tcp_bytes_arrive_exactly_as_sent(lab: Lab, tmp_path: Path, io: str) -> None:
    """Real Linux TCP through the box, several connections at once in both directions
    of the box: every byte arrives, in order (same digest), with nothing discarded; with
    mmap, the rings wrap many times over."""
    box = start_box(lab, {"seed": 1, **_io(io)})
    (tmp_path / "sink.py").write_text(TCP_SINK)
    (tmp_path / "source.py").write_text(TCP_SOURCE)
    tmp_path.chmod(0o755)
    sinks, sources = [], []
    for i, (rx, tx) in enumerate([("server", "client"), ("client", "server"),
                                  ("server", "client")]):
        ready = tmp_path / f"sink{i}.ready"
        sinks.append(subprocess.Popen(
            lab.exec_argv(rx, [sys.executable, str(tmp_path / "sink.py"), str(7100 + i),
                               str(ready)]), stdout=subprocess.PIPE, text=True))
        _wait_file(ready)
        sources.append(subprocess.Popen(
            lab.exec_argv(tx, [sys.executable, str(tmp_path / "source.py"), lab.addr(rx),
                               str(7100 + i), "200"]), stdout=subprocess.PIPE, text=True))
    for src, sink in zip(sources, sinks, strict=True):
        sent, _ = src.communicate(timeout=60)
        got, _ = sink.communicate(timeout=60)
        assert src.returncode == 0 and sent.split() == got.split(), (sent, got)
        assert int(sent.split()[0]) > 5_000_000
    final = box.stop()
    for d, v in final["directions"].items():
        assert v["discarded"] == {} and v["held"] == 0, (d, v)
        assert v["received"] == v["sent"] > 3000, d


VLAN_RECV = textwrap.dedent("""
    import socket, struct, sys, time, json
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA
    s.bind(("eth0", 0))
    s.settimeout(0.3)
    open(sys.argv[2], "w").close()
    got = []
    end = time.monotonic() + float(sys.argv[1])
    while time.monotonic() < end:
        try:
            f, anc, _, addr = s.recvmsg(65535, 256)
        except socket.timeout:
            continue
        if addr[2] == socket.PACKET_OUTGOING or f[:6] != bytes.fromhex("020000000002"):
            continue
        tci = None
        for level, kind, data in anc:
            if level == 263 and kind == 8:
                status, _, _, _, _, tci, tpid = struct.unpack("IIIHHHH", data[:20])
                tci = tci if status & 16 else None
        got.append([f.hex(), tci])
    print(json.dumps(got))
""")


@pytest.mark.parametrize("io", IO_MODES)
def test_vlan_tagged_frames_keep_their_tag(lab: Lab, tmp_path: Path, io: str) -> None:
    """The kernel strips a VLAN tag before a packet socket sees the frame (it reports it
    beside the frame): the box puts it back, so a tagged frame leaves tagged."""
    box = start_box(lab, {"seed": 1, **_io(io)})
    (tmp_path / "send.py").write_text(RAW_SEND)
    (tmp_path / "recv.py").write_text(VLAN_RECV)
    ready = tmp_path / "recv.ready"
    rx = subprocess.Popen(lab.exec_argv("server", [sys.executable, str(tmp_path / "recv.py"),
                                                   "2", str(ready)]),
                          stdout=subprocess.PIPE, text=True)
    _wait_file(ready)
    inner = _eth(_ipv4_tcp())
    tagged = (inner[:12] + struct.pack("!HH", 0x8100, (3 << 13) | 42) + inner[12:]).ljust(64, b"\0")
    subprocess.run(lab.exec_argv("client", [sys.executable, str(tmp_path / "send.py"),
                                            tagged.hex()]), check=True)
    out, _ = rx.communicate(timeout=10)
    got = json.loads(out)
    untagged = tagged[:12] + tagged[16:]
    assert [untagged.hex(), (3 << 13) | 42] in got, got
    assert box.stop()["directions"]["to_b"]["sent"] >= 1


def test_tun_pair_carries_real_tcp(lab: Lab, box_cmd: list[str], tmp_path: Path) -> None:
    """TUN mode: the box creates two TUN devices in the client namespace; one is moved
    to the server namespace (its file descriptor stays with the box), so every packet
    between 198.19.0.1 and 198.19.0.2 crosses the box as raw IP."""
    tmp_path.chmod(0o755)
    cfg = tmp_path / "tun.toml"
    cfg.write_text(textwrap.dedent(f"""
        seed = 1
        [interfaces]
        kind = "tun"
        a = "al-tun-a"
        b = "al-tun-b"
        [emulation.to_b]
        rate = "30Mbit"
        [stats]
        file = "{tmp_path / 'final.json'}"
        [capture]
        dir = "{tmp_path}"
        to_b = "to_b.pcap"
        """))
    cfg.chmod(0o644)
    ready = tmp_path / "ready"
    log = open(tmp_path / "box.log", "wb")  # noqa: SIM115 (closed in finally)
    box = subprocess.Popen(lab.exec_argv("client", [*box_cmd, "--config", str(cfg),
                                                    "--ready-file", str(ready)]),
                           stdout=log, stderr=log)
    try:
        _wait_file(ready, content=True)

        def ip(ns: str, *args: str) -> None:
            subprocess.run(["ip", "-n", ns, *args], check=True)

        subprocess.run(["ip", "-n", lab.client, "link", "set", "dev", "al-tun-b", "netns",
                        lab.server], check=True)
        ip(lab.client, "addr", "add", "198.19.0.1/24", "dev", "al-tun-a")
        ip(lab.server, "addr", "add", "198.19.0.2/24", "dev", "al-tun-b")
        ip(lab.server, "link", "set", "dev", "al-tun-b", "up")
        from asymlink.lab.scenario import TRAFFIC

        sink_ready = tmp_path / "sink.ready"
        report = tmp_path / "sink.json"
        sink = subprocess.Popen(lab.exec_argv("server", [
            sys.executable, TRAFFIC, "sink", "--port", "6001", "--seconds", "5",
            "--ready", str(sink_ready), "--report", str(report), "--t0", "0"]))
        _wait_file(sink_ready)
        subprocess.run(lab.exec_argv("client", [
            sys.executable, TRAFFIC, "send", "--to", "198.19.0.2", "--port", "6001",
            "--stop", "2"]), check=True, timeout=30)
        sink.terminate()
        sink.wait(10)
        sink_report = json.loads(report.read_text())
        # The rate over the middle second of the transfer (sink samples every 0.1 s): the
        # whole byte count would also hold what the link's buffer delivers after the
        # sender stops.
        samples = np.array(sink_report["samples"], dtype=float)
        t, b = samples[:, 0], samples[:, 1]
        t0 = t[np.argmax(b > 0)]
        rate = float(np.interp(t0 + 1.5, t, b) - np.interp(t0 + 0.5, t, b)) * 8
        assert rate > 5e6, f"{rate:.0f} bit/s over a 30 Mbit/s emulated TUN link"
        assert rate < 30e6, f"{rate:.0f} bit/s over a 30 Mbit/s emulated TUN link"
    finally:
        box.terminate()
        box.wait(10)
        log.close()
    assert box.returncode == 0, (tmp_path / "box.log").read_text()
    final = json.loads((tmp_path / "final.json").read_text())
    assert final["directions"]["to_b"]["sent"] > 1000
    assert final["directions"]["to_b"]["unparsed"]["runt"] == 0
    data = (tmp_path / "to_b.pcap").read_bytes()
    assert struct.unpack("<I", data[20:24])[0] == 101, "LINKTYPE_RAW"
