"""Several client hosts behind the box (`client2` ... in a lab scenario): validation runs
anywhere; the measurement needs root and network namespaces (skipped with the reason
otherwise)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from asymlink.lab import Lab, LabError, LabScenario, run_scenario
from asymlink.lab.scenario import TRAFFIC


def _flow(name: str, src: str, dst: str = "server", **kw: str) -> dict[str, str]:
    return {"name": name, "from": src, "to": dst, **kw}


def test_clients_follow_the_flows() -> None:
    sc = LabScenario.from_dict({"flows": [_flow("a", "client"), _flow("b", "client3")]})
    assert sc.clients == 3
    assert LabScenario.from_dict({"flows": [_flow("a", "client")]}).clients == 1
    assert LabScenario.from_dict({"clients": 2, "flows": [_flow("a", "client")]}).clients == 2


@pytest.mark.parametrize(("doc", "needle"), [
    ({"clients": 9}, "clients"),
    ({"clients": 0}, "clients"),
    ({"clients": 1, "flows": [_flow("a", "client2")]}, "clients"),
    ({"flows": [_flow("a", "client", "client2")]}, r"flows\[0\]"),
    ({"flows": [_flow("a", "client9")]}, r"flows\[0\]"),
    ({"probes": [{"name": "p", "kind": "ping", "from": "server", "to": "server"}]},
     r"probes\[0\]"),
])
def test_client_errors_name_the_key(doc: dict, needle: str) -> None:
    with pytest.raises(LabError, match=needle):
        LabScenario.from_dict(doc)


def test_two_client_hosts_both_carry_traffic(live_ok: None, tmp_path: Path) -> None:
    """Host 1 uploads with one flow, host 2 with three, for 3 s through a 10 Mbit/s uplink
    shared host-then-flow, while host 2 also downloads: every flow delivers, and over the
    last 2 s each host gets a fair part of the uplink. Host-then-flow gives each host half;
    the bound (a quarter to three quarters) leaves room for the hosts' start-up on a loaded
    machine while still failing if the box saw one host (host 1 would get a quarter) or a
    host carried nothing. Afterwards the lab is back to one client, which still reaches
    the server, and `down` removes every namespace of the lab."""
    sc = LabScenario.from_dict({
        "name": "two-hosts", "duration": "3s", "windows": {"steady": ["1s", "3s"]},
        "box": {"to_b": {"qdisc": {"kind": "host_fq_codel", "hosts": "src"}},
                "emulation": {"to_b": {"rate": "10Mbit"}}},
        "flows": [_flow("h1", "client"), *[_flow(f"h2-{k}", "client2") for k in range(3)],
                  _flow("down2", "server", "client2")],
    })
    lab = Lab.up()
    try:
        m = run_scenario(sc, tmp_path / "run", lab)
        assert lab.clients == 2
        assert all(v > 0 for v in m["delivered_bytes"].values()), m["delivered_bytes"]
        up = {h: sum(v for k, v in m["throughput_mbps_in"]["steady"].items()
                     if k.startswith(h)) for h in ("h1", "h2-")}
        share = up["h1"] / (up["h1"] + up["h2-"])
        assert 0.25 < share < 0.75, up
        assert set(m["host_throughput_mbps"]) == {"client", "client2"}
        # One client again: the original wiring, client to server through the router.
        lab.set_clients(1)
        lab.set_forwarding("kernel")
        report = tmp_path / "ping.json"
        r = subprocess.run(lab.exec_argv("client", [
            sys.executable, TRAFFIC, "ping", "--to", lab.addr("server"), "--stop", "0.5",
            "--every", "0.1", "--timeout", "0.3", "--report", str(report)]),
            capture_output=True, text=True, timeout=10)
        assert r.returncode == 0, r.stderr
        assert json.loads(report.read_text())["samples"], "no ping answered"
    finally:
        lab.down()
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert lab.name not in names
