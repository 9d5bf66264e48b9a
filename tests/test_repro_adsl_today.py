"""`adsl-today`: its simulator scenarios are the translation of the lab scenarios, its
files check, its orderings hold on --quick (eight simulator runs, seconds), and a short
lab run (root, network namespaces; skipped with the reason otherwise) shows the same."""

from __future__ import annotations

from pathlib import Path

from asymlink import repro
from asymlink.lab import Lab, LabScenario, run_scenario
from asymlink.lab.parity import run_sim
from asymlink.repro import adsl_today


def test_files_check_and_are_generated() -> None:
    repro.get("adsl-today").check()
    stale = adsl_today.stale()
    assert not stale, ("regenerate with `python -m asymlink.repro.adsl_today_gen --write`: "
                       f"{stale}")


def test_arms_share_line_traffic_and_tcp() -> None:
    """The arms differ only in what manages the line: the same links (the line), flows
    and TCP — but for the BBR arms, whose transfers run BBR; the buffer overrides reach
    both line buffers."""
    e = adsl_today.TODAY
    docs = {a: e.scenario(a, quick=False).data for a in adsl_today.ARMS}
    ref = docs["fifo"]
    for arm, d in docs.items():
        for key in ("links", "tcp", "duration", "seed", "nodes"):
            assert d[key] == ref[key], f"{arm}: {key} differs"
        flows = d["flows"]
        if arm.endswith("-bbr"):
            bulk = [f for f in flows if f["app"]["kind"] == "bulk"]
            assert len(bulk) == 2 and all(f["tcp"]["cc"] == "bbr" for f in bulk), arm
            flows = [{**f, "tcp": "linux"} if f in bulk else f for f in flows]
        assert flows == ref["flows"], f"{arm}: flows differ"
    assert docs["line-bbr"]["middleboxes"] == docs["line"]["middleboxes"]
    assert ref["middleboxes"] == []
    assert "line" in docs["line"]["middleboxes"][0]
    small = e.scenario("fifo", quick=True).with_overrides(adsl_today.buffer_overrides(50)).data
    links = {lk["name"]: lk for lk in small["links"]}
    assert links["line_c"]["to_b"]["modem_buffer"] == "50p"
    assert links["line_b"]["to_a"]["modem_buffer"] == "50p"


def test_orderings_hold_on_quick(tmp_path: Path) -> None:
    repro.assert_expectations("adsl-today", tmp_path)
    assert (tmp_path / "figures" / "arms_1000p.png").is_file()


def _short(arm: str) -> LabScenario:
    """An arm with 50-packet line buffers, shortened: the download alone for 4 s, then an
    upload too (measured from 6 to 10 s)."""
    sc = adsl_today.lab_scenario(arm, 50)
    sc.duration = 10.0
    sc.windows = {"alone": (1.0, 4.0), "contended": (6.0, 10.0)}
    for f in sc.flows:
        f.stop = 10.0
        if f.name == "upload":
            f.start = 4.0
    for p in sc.probes:
        p.stop = 10.0
    return sc


def test_lab_line_against_fifo_and_the_simulator(live_ok: None, tmp_path: Path) -> None:
    """In the lab, with the line as the `[access]` hop (shortened, two runs of 10 s):
    `line` keeps the typed echo short and the download moving during the upload where the
    plain line does not, and the simulator's mirror of the `line` run gives both
    transfers within 15 % (the reproduction's full runs agree within 5 %)."""
    lab = Lab.up()
    try:
        m = {arm: run_scenario(_short(arm), tmp_path / arm, lab) for arm in ("fifo", "line")}
    finally:
        lab.down()
    both = "contended"
    fifo_echo = m["fifo"]["echo_latency_ms_in"][both]["typing"]["p90"]
    line_echo = m["line"]["echo_latency_ms_in"][both]["typing"]["p90"]
    assert line_echo < 100 and 3 * line_echo < fifo_echo, (line_echo, fifo_echo)
    down = {a: m[a]["throughput_mbps_in"][both]["download"] for a in m}
    assert down["line"] > 1.5 * down["fifo"], down
    sim = run_sim(_short("line"))
    for flow in ("download", "upload"):
        lab_v = m["line"]["throughput_mbps_in"][both][flow]
        sim_v = sim["throughput_mbps_in"][both][flow]
        assert abs(sim_v - lab_v) <= 0.15 * lab_v, (flow, sim_v, lab_v)
