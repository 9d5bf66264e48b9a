"""The lab's access-line hop (`[access]`): a fourth namespace between the router and the
server whose box only emulates the line. Validation runs anywhere; the measurement needs
root and network namespaces (skipped with the reason otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asymlink.lab import Lab, LabError, LabScenario, run_scenario
from asymlink.lab.scenario import TRAFFIC

# The downlink 4 Mbit/s + 20 ms, the uplink 2 Mbit/s + 10 ms: a 30 ms round trip.
ACCESS = {"to_a": {"rate": "4Mbit", "delay": "20ms", "modem_buffer": "100p"},
          "to_b": {"rate": "2Mbit", "delay": "10ms", "modem_buffer": "100p"}}


@pytest.mark.parametrize(("access", "needle"), [
    ({"to_c": {}}, "access.to_c"),
    ({"to_b": {"queue": "fifo"}}, "access.to_b.queue"),
    ({"to_b": {"rate": "fast"}}, "access.to_b.rate"),
    ({"to_a": {"delay": "20"}}, "access.to_a.delay"),
    ({"to_a": {"loss": 2.0}}, "access.to_a.loss"),
    ({"to_a": {"modem_buffer": "lots"}}, "access.to_a.modem_buffer"),
    ({"to_b": {"linklayer": {"encap": "carrier_pigeon"}}}, "access.to_b.linklayer"),
])
def test_access_errors_name_the_key(access: dict, needle: str) -> None:
    with pytest.raises(LabError, match=needle.replace(".", r"\.")):
        LabScenario.from_dict({"access": access})


def test_access_parses() -> None:
    sc = LabScenario.from_dict({"access": {**ACCESS, "to_b": {
        **ACCESS["to_b"], "linklayer": {"encap": "llc_snap_routed"}, "loss": 0.0}}})
    assert sc.access["to_a"]["rate"] == "4Mbit"
    assert sc.access["to_b"]["linklayer"] == {"encap": "llc_snap_routed"}


def _scenario(forwarding: str) -> LabScenario:
    """Idle pings for 1 s, then a download (1-3.5 s), then an upload (3.5-6 s)."""
    return LabScenario.from_dict({
        "name": f"access-{forwarding}", "duration": "6s", "forwarding": forwarding,
        "access": ACCESS,
        "flows": [{"name": "download", "from": "server", "to": "client", "start": "1s",
                   "stop": "3.5s"},
                  {"name": "upload", "from": "client", "to": "server", "start": "3.5s"}],
        "probes": [{"name": "ping", "kind": "ping", "from": "client", "to": "server",
                    "every": "50ms", "stop": "1s"}],
        "windows": {"down": ["2s", "3.5s"], "up": ["4.5s", "6s"]},
    })


@pytest.mark.parametrize("forwarding", ["kernel", "box"])
def test_access_line_rate_and_delay(live_ok: None, tmp_path: Path, forwarding: str) -> None:
    """Through the access hop (behind a Linux bridge, or a box that forwards unshaped),
    idle pings take the configured 30 ms round trip and each direction's bulk transfer
    runs at the configured rate.

    Tolerances: the round trip adds to the 30 ms only the serialisation of two 84-byte
    pings (0.5 ms) and the forwarding of five hops (well under a millisecond on an idle
    machine), so 30-33 ms. A full 1500-byte IP packet carries 1448 bytes of payload (TCP
    with timestamps), so goodput is at most 96.5 % of the rate; with a 100-packet buffer
    (4 and 8 times the path's bandwidth-delay product) the line never idles once slow
    start is over, so the measurement window (the last 1.5 s of each transfer) sees at
    least 85 % of the rate (the remaining slack covers CUBIC's first loss episode)."""
    out = tmp_path / forwarding
    lab = Lab.up()
    try:
        m = run_scenario(_scenario(forwarding), out, lab)
        assert lab.access and lab.access_ns in _netns()
    finally:
        lab.down()
    assert lab.access_ns not in _netns()
    ping = m["ping_rtt_ms"]["ping"]
    assert ping["count"] >= 10
    assert 30.0 <= ping["p50"] <= 33.0, ping
    down = m["throughput_mbps_in"]["down"]["download"]
    up = m["throughput_mbps_in"]["up"]["upload"]
    assert 0.85 * 4 <= down <= 4 * 1448 / 1500 * 1.01, down
    assert 0.85 * 2 <= up <= 2 * 1448 / 1500 * 1.01, up
    stats = json.loads((out / "access_stats.json").read_text())
    assert stats["directions"]["to_a"]["sent"] > 500


def test_access_hop_can_be_removed(live_ok: None) -> None:
    """The server is wired straight to the router again after `set_access(False)`, and
    the kernel bridge survives the rewiring."""
    lab = Lab.up()
    try:
        lab.set_forwarding("kernel")
        lab.set_access(True)
        lab.set_access(False)
        assert not lab.access and lab.access_ns not in _netns()
        report = lab.dir / "ping.json"
        r = subprocess.run(lab.exec_argv("client", [
            sys.executable, TRAFFIC, "ping", "--to", lab.addr("server"), "--stop", "0.5",
            "--every", "0.1", "--report", str(report)]), capture_output=True, text=True,
            timeout=10)
        assert r.returncode == 0, r.stderr
        assert json.loads(report.read_text())["samples"], "no echo reply"
    finally:
        lab.down()


def _netns() -> str:
    return subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout


@pytest.mark.parametrize(("doc", "needle"), [
    ({"router_commands": ["tc qdisc add dev {b} root pfifo"]}, "router_commands"),
    ({"forwarding": "kernel", "router_commands": ["rm -rf /"]}, r"router_commands\[0\]"),
    ({"forwarding": "kernel", "router_commands": "tc qdisc"}, "router_commands"),
])
def test_router_commands_are_checked(doc: dict, needle: str) -> None:
    with pytest.raises(LabError, match=needle):
        LabScenario.from_dict(doc)


def test_linux_recipe_applies_and_is_removed(live_ok: None) -> None:
    """The Linux recipe of `today-linux` (HTB with ATM size tables, u32, pfifo, an IFB for
    the downlink) runs on this kernel, and clearing it leaves the router as it was."""
    from asymlink.lab.bench import scenario_path

    sc = LabScenario.from_file(scenario_path("today-linux"))
    lab = Lab.up()
    try:
        lab.set_forwarding("kernel")
        lab.router_commands(sc.router_commands)
        shown = subprocess.run(["tc", "-n", lab.router, "qdisc", "show"], capture_output=True,
                               text=True).stdout
        assert "htb 1: dev veth-b" in shown and "htb 1: dev ifb0" in shown, shown
        assert "ingress ffff: dev veth-b" in shown, shown
        lab.clear_router_qdiscs()
        shown = subprocess.run(["tc", "-n", lab.router, "qdisc", "show"], capture_output=True,
                               text=True).stdout
        assert "htb" not in shown and "ifb0" not in shown and "ingress" not in shown, shown
    finally:
        lab.down()


def test_trace_files_are_relative_to_the_scenario(tmp_path: Path) -> None:
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "up.trace").write_text("1\n")
    path = tmp_path / "trace.toml"
    path.write_text('[box.emulation.to_b]\ntrace = "traces/up.trace"\n'
                    '[box.emulation.to_a]\ntrace = "builtin:cellular"\n'
                    '[access.to_b]\ntrace = "traces/up.trace"\ndelay = "5ms"\n')
    sc = LabScenario.from_file(path)
    want = str(tmp_path / "traces" / "up.trace")
    assert sc.box["emulation"]["to_b"]["trace"] == want
    assert sc.box["emulation"]["to_a"]["trace"] == "builtin:cellular"
    assert sc.access["to_b"]["trace"] == want
