"""Simulator ↔ lab parity: one lab scenario, run in the simulator and in the lab.

`sim_scenario` translates a lab scenario into a simulator scenario with the same path —
the box's pipelines verbatim as a `[[middleboxes]]` entry, its link emulation as links
with the same rates, delays, framing and buffers — and the same traffic (real Linux
bulk transfers become `linux`-profile bulk flows, typed-echo probes `telnet` flows
without Nagle, ICMP pings UDP pings). `sim_metrics` computes, from the simulator's
tables, the metrics `run_scenario` computes from the lab's, with the same code, so
`compare` can put them side by side.

The path, per direction, is the same in both: the box's discipline feeds a link (the core's
link: modem buffer, serialiser, loss, delay line), in the lab inside the box and in the
simulator on the router that runs the middlebox:

```
 client ── [to_b discipline ─► modem_buffer ─► rate, linklayer ─► loss ─► delay] ── server
 client ── [delay ◄─ loss ◄─ rate, linklayer ◄─ modem_buffer ◄─ to_a discipline] ── server
```

In the simulator: `client ──line_a── box ──line_b── server`. `line_b.to_b` carries
`[emulation.to_b]` and `line_a.to_a` carries `[emulation.to_a]` verbatim (the link keys
are the same in both runtimes). The other directions of the lines (hosts → box) are fast
wires, like the lab's veth pairs. A direction without emulation is a fast wire too
(10 Gbit/s: the box's forwarding speed is far above every rate the parity scenarios use).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from asymlink.lab.netns import CLIENT_ADDR, SERVER_ADDR
from asymlink.lab.scenario import (
    LabScenario,
    bbr_episodes,
    bbr_window_means,
    window_metrics,
)
from asymlink.lab.traffic import CHUNK

#: Rate of the hops that are fast in the lab (veth, the box's own forwarding).
FAST = "10Gbit"
#: The lab's TCP: real Linux; the simulator's closest model.
PROFILE = "linux"


def _link(name: str, a: str, b: str, to_a: dict[str, Any],
          to_b: dict[str, Any]) -> dict[str, Any]:
    """A link whose directions carry emulated lines (link keys, verbatim; a trace-driven
    direction has no rate) or, where empty, fast wires."""
    def direction(keys: dict[str, Any]) -> dict[str, Any]:
        return ({} if "trace" in keys else {"rate": FAST}) | copy.deepcopy(keys)

    return {"name": name, "a": a, "b": b, "rate": FAST,
            "to_a": direction(to_a), "to_b": direction(to_b)}


def _secs(x: float) -> str:
    """A duration in seconds as the scenario vocabulary reads it: as Python writes `x`
    (`30.0s`, as in the generated files checked in), or, where that takes an exponent
    (`9.4e-05s` is not a duration), in plain decimals to the nanosecond."""
    r = f"{x}"
    if "e" not in r:
        return f"{r}s"
    return f"{x:.9f}".rstrip("0").rstrip(".") + "s"


def sim_scenario(sc: LabScenario, seed: int = 1,
                 box: dict[str, Any] | None = None) -> dict[str, Any]:
    """The simulator scenario (a dict in the scenario-file vocabulary) of lab scenario
    `sc`. Raises `ValueError` for what the simulator cannot mirror (paced senders; kernel
    forwarding with `router_commands`, unless `box` gives the middlebox that stands for
    them).

    With `[access]`, the line is a router `access` between the box and the server, as in
    the lab: `client ──line_a── box ──line_b── access ──line_c── server`, the access
    line's uplink on `line_c.to_b` and its downlink on `line_b.to_a`. Kernel forwarding
    without commands is a middlebox-free router."""
    if box is None and sc.forwarding != "box" and sc.router_commands:
        raise ValueError(f"{sc.name}: kernel commands have no simulator counterpart")
    if sc.clients > 1:
        raise ValueError(f"{sc.name}: the mirror has one client host ({sc.clients} in the lab)")
    body = box if box is not None else (sc.box if sc.forwarding == "box" else {})
    nodes: list[dict[str, Any]] = [
        {"name": "client", "addr": CLIENT_ADDR},
        {"name": "box", "kind": "router"},
        {"name": "server", "addr": SERVER_ADDR},
    ]
    ea = dict(body.get("emulation", {}).get("to_a", {}))
    eb = dict(body.get("emulation", {}).get("to_b", {}))
    links: list[dict[str, Any]] = [_link("line_a", "client", "box", ea, {})]
    if sc.access:
        nodes.insert(2, {"name": "access", "kind": "router"})
        links.append(_link("line_b", "box", "access", sc.access.get("to_a", {}), eb))
        links.append(_link("line_c", "access", "server", {}, sc.access.get("to_b", {})))
    else:
        links.append(_link("line_b", "box", "server", {}, eb))
    mb: dict[str, Any] = {"node": "box", "a": "line_a", "b": "line_b"}
    for k in ("line", "rewrite", "to_a", "to_b"):
        if k in body:
            mb[k] = copy.deepcopy(body[k])
    flows: list[dict[str, Any]] = []
    for f in sc.flows:
        if f.rate:
            raise ValueError(f"{sc.name}: flow {f.name} is paced; the simulator's linux "
                             "profile has no SO_MAX_PACING_RATE")
        tcp: Any = PROFILE
        if f.window or f.cc:
            tcp = {"profile": PROFILE}
        if f.window:
            # The lab's sink sets SO_RCVBUF to twice the window and TCP_WINDOW_CLAMP to
            # the window, on the listening socket and again after every read; the
            # simulator's Linux receive buffer takes both.
            tcp["so_rcvbuf"] = f"{2 * f.window}B"
            tcp["window_clamp"] = f"{f.window}B"
        if f.cc:
            # The sender's congestion control, set per socket in the lab.
            tcp["cc"] = f.cc
        # The lab's sender writes CHUNK bytes per non-blocking `send()`, whenever
        # `select()` finds the socket writable.
        flows.append({"name": f.name, "from": f.sender, "to": f.receiver, "port": f.port,
                      "start": _secs(f.start), "stop": _secs(f.stop), "tcp": tcp,
                      "app": {"kind": "bulk", "open": "sender", "write_size": f"{CHUNK}B"}})
    for p in sc.probes:
        if p.kind == "echo":
            flows.append({"name": p.name, "from": p.sender, "to": p.receiver, "port": p.port,
                          "start": _secs(p.start), "stop": _secs(p.stop),
                          # The lab's echo client and server set TCP_NODELAY.
                          "tcp": {"profile": PROFILE, "nagle": False},
                          "app": {"kind": "telnet", "interval": _secs(p.every)}})
        else:
            flows.append({"name": p.name, "from": p.sender, "to": p.receiver, "port": p.port,
                          "start": _secs(p.start), "stop": _secs(p.stop),
                          "app": {"kind": "ping", "interval": _secs(p.every), "size": "64B",
                                  "port": p.port}})
    return {
        "name": f"{sc.name}-sim",
        "description": f"simulator mirror of lab scenario {sc.name}",
        "duration": _secs(sc.duration),
        "seed": seed,
        "tcp": PROFILE,
        "monitor": {"interval": _secs(sc.interval), "events": False},
        "nodes": nodes,
        "links": links,
        "middleboxes": [mb] if sc.forwarding == "box" or box is not None else [],
        "flows": flows,
    }


def shifted(sc: LabScenario, dt: float) -> LabScenario:
    """`sc` with the flows that start at 0 started `dt` s later (their stops unchanged):
    the same run with the packets of the flows that run from the start at another phase
    against the probes and the flows that start later, which keep their schedule."""
    return replace(sc, flows=[replace(f, start=dt) if f.start == 0 else f for f in sc.flows])


def run_sim(sc: LabScenario, seed: int = 1, echo_phases: int = 1) -> dict[str, Any]:
    """Run the simulator mirror of `sc` with `seed`; returns metrics shaped like the lab's.

    With `echo_phases` = n > 1 the mirror runs n times, its echo probes starting
    0, 1/n, ... (n − 1)/n of their interval later, and the echo metrics are taken from
    the n runs' samples together (the flows' metrics from the first run, which is the
    plain mirror). The simulator is deterministic, so one run fixes where each echo falls
    in the cycle of packets on a slow line; a lab run's phase is whatever it happens to
    be. Pooling the phases gives the simulator's distribution over that phase."""
    from asymlink.runner import run
    from asymlink.scenario import Scenario

    def one(s: LabScenario) -> Any:
        return run(Scenario.from_dict(sim_scenario(s, seed), origin=f"{sc.name}-sim"))

    res = one(sc)
    probes = sim_probes(sc, res)
    for k in range(1, echo_phases):
        shifted = replace(sc, probes=[
            replace(p, start=p.start + k * p.every / echo_phases) if p.kind == "echo" else p
            for p in sc.probes])
        phase = sim_probes(shifted, one(shifted))
        for p in sc.probes:
            if p.kind == "echo":
                probes[p.name] = sorted(probes[p.name] + phase[p.name])
    return sim_metrics(sc, res, probes)


def sim_probes(sc: LabScenario, res: Any) -> dict[str, list[tuple[float, float]]]:
    """Each probe's samples, [(t, seconds)], from a simulator run of `sim_scenario(sc)`."""
    meas = res.measurements
    probes: dict[str, list[tuple[float, float]]] = {}
    for p in sc.probes:
        metric = "echo_latency_s" if p.kind == "echo" else "rtt_s"
        rows = meas[(meas["flow"] == p.name) & (meas["metric"] == metric)]
        probes[p.name] = list(zip(rows["t"].astype(float), rows["value"].astype(float),
                                  strict=True))
    return probes


def sim_metrics(sc: LabScenario, res: Any,
                probes: dict[str, list[tuple[float, float]]] | None = None) -> dict[str, Any]:
    """The lab's metrics (`throughput_mbps`, `throughput_mbps_in`, `echo_latency_ms`,
    `echo_latency_ms_in`, `ping_rtt_ms`, ...) from a simulator run of `sim_scenario(sc)`
    (the probes' samples `probes`, if given, instead of the run's)."""
    flows = res.flows
    delivered: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for f in sc.flows:
        rows = flows[flows["flow"] == f.name].sort_values("t")
        delivered[f.name] = (rows["t"].to_numpy(float), rows["bytes_delivered"].to_numpy(float))
    if probes is None:
        probes = sim_probes(sc, res)
    m: dict[str, Any] = {"scenario": sc.name, "source": "sim"}
    m.update(window_metrics(sc, delivered, probes))
    summary = res.flow_summary
    if "bbr_probe_rtts" in summary.columns:
        series = {}
        for f in sc.flows:
            rows = flows[flows["flow"] == f.name].sort_values("t")
            rows = rows[rows["bbr_pacing_gain"].notna()]
            srow = summary[summary["flow"] == f.name]
            if rows.empty or srow.empty:
                continue
            series[f.name] = rows
            # When STARTUP ended and how many PROBE_RTTs: the model's own record (exact);
            # when each PROBE_RTT began: from the series (to the sampling interval).
            ep = bbr_episodes(list(zip(rows["t"], rows["bbr_pacing_gain"],
                                       rows["bbr_cwnd_gain"], strict=True)))
            exit_s = float(srow["bbr_startup_exit_s"].iloc[0])
            started = float(srow["bbr_started_s"].iloc[0])
            m.setdefault("bbr", {})[f.name] = {
                "started_s": None if math.isnan(started) else started,
                "startup_exit_s": None if math.isnan(exit_s) else exit_s,
                "startup_s": None if math.isnan(exit_s - started) else exit_s - started,
                "probe_rtts": int(srow["bbr_probe_rtts"].iloc[0]),
                "probe_rtt_at_s": ep["probe_rtt_at_s"],
                "min_rtt_ms": float(rows["bbr_min_rtt_ms"].iloc[-1])}
        if series:
            m["bbr_in"] = bbr_window_means(sc, series)
    return m


# --- comparison ----------------------------------------------------------------------------


@dataclass
class Row:
    """One compared metric: its path, both values, the relative difference."""

    arm: str
    metric: str
    sim: float
    lab: float
    #: Absolute allowance (the metric's unit) besides the relative tolerance; see
    #: `Pair.latency_allowance_ms`.
    allow: float = 0.0
    #: The metric's own relative tolerance, instead of the experiment's (0: only the
    #: absolute allowance counts, as for BBR's startup exit and PROBE_RTT count).
    tol: float | None = None
    #: Whether the row decides the experiment's outcome; a row that does not is reported
    #: beside the others (BBR's STARTUP duration: see `bbr_rows`).
    gate: bool = True
    #: The metric's values in the simulator over seeds 1..n (`Pair.seeded`), when the lab
    #: value is compared against their range rather than against `sim` (seed 1) alone.
    seeds: tuple[float, ...] = ()

    def within(self, tol: float) -> bool:
        """Within ±`tol` (or the row's own tolerance) relative, or within the absolute
        allowance, of `ref`."""
        return self.rel <= self.own(tol) or abs(self.ref - self.lab) <= self.allow

    @property
    def ref(self) -> float:
        """The simulator's value the lab's is measured against: `sim`, or with `seeds`
        the nearest end of their range [min, max] (the lab value itself when inside)."""
        if not self.seeds:
            return self.sim
        return min(max(self.lab, min(self.seeds)), max(self.seeds))

    def spread(self) -> dict[str, Any] | None:
        """The simulator's values over the seeds: their number, min, max, mean and
        standard deviation (n − 1), and the values; None for a single-seed row."""
        if not self.seeds:
            return None
        v = np.asarray(self.seeds, float)
        return {"seeds": len(v), "min": float(v.min()), "max": float(v.max()),
                "mean": float(v.mean()), "sd": float(v.std(ddof=1)) if len(v) > 1 else 0.0,
                "values": [float(x) for x in v]}

    def own(self, tol: float) -> float:
        """The relative tolerance that applies to this row."""
        return tol if self.tol is None else self.tol

    @property
    def rel(self) -> float:
        """|ref − lab| / lab (inf when lab is 0 and ref is not): against the seeds' range,
        0 inside it and the distance to its nearer end outside."""
        if self.lab == 0:
            return 0.0 if self.ref == 0 else math.inf
        return abs(self.ref - self.lab) / abs(self.lab)


def get(m: dict[str, Any], path: str) -> float:
    """The value at a dotted metric path (`throughput_mbps_in.contended.download`,
    `echo_latency_ms_in.contended.typing.p50`)."""
    v: Any = m
    for part in path.split("."):
        v = v[part]
    return float(v)


def compare(arms: dict[str, tuple[dict[str, Any], dict[str, Any]]],
            metrics: list[str], latency_allowance_ms: float = 0.0,
            gate: bool = True, seeds: dict[str, list[dict[str, Any]]] | None = None,
            seeded: tuple[str, ...] = ()) -> list[Row]:
    """Rows for every arm (name → (sim metrics, lab metrics)) and metric path; latency
    metrics (`…_ms_…`) get `latency_allowance_ms` as their absolute allowance; `gate`:
    whether the rows decide the experiment (else they are reported beside it). The
    metrics in `seeded` are compared against the range of their values in `seeds`
    (arm → the simulator's metrics over seeds 1..n)."""
    def over(arm: str, k: str) -> tuple[float, ...]:
        if k not in seeded or not seeds:
            return ()
        return tuple(get(m, k) for m in seeds[arm])

    return [Row(arm, k, get(s, k), get(lab, k), latency_allowance_ms if "_ms_" in k else 0.0,
                gate=gate, seeds=over(arm, k))
            for arm, (s, lab) in arms.items() for k in metrics]


def table(rows: list[Row], tol: float) -> str:
    """A Markdown table of the rows, each marked within / outside `tol`."""
    out = [f"| arm | metric | sim | lab | (sim − lab) / lab | within ±{round(tol * 100)} % |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        diff = (r.ref - r.lab) / abs(r.lab) if r.lab else (0.0 if r.ref == 0 else math.inf)
        sp = r.spread()
        if sp is None:
            sim = f"{r.sim:.4g}"
            rel = f"{diff * 100:+.0f} %"
        else:
            # The lab value against the seeds' range: 0 inside, else from the nearer end.
            sim = (f"{sp['min']:.4g}–{sp['max']:.4g} over seeds 1–{sp['seeds']} "
                   f"(mean {sp['mean']:.4g}, sd {sp['sd']:.2g})")
            rel = ("0 % (in range)" if diff == 0 else
                   f"{diff * 100:+.0f} % (from the range's {'min' if diff > 0 else 'max'})")
        out.append(f"| {r.arm} | `{r.metric}` | {sim} | {r.lab:.4g} | {rel} | "
                   f"{_verdict(r, tol)} |")
    return "\n".join(out)


def _verdict(r: Row, tol: float) -> str:
    if not r.gate:
        return _verdict(replace(r, gate=True), tol) + ", reported"
    if r.seeds:
        if r.ref == r.lab:
            return "yes (in the seeds' range)"
        if r.rel <= r.own(tol):
            return f"yes (within ±{round(r.own(tol) * 100)} % of the range's nearer end)"
        return (f"yes (within {r.allow:g} ms of the range's nearer end)" if r.within(tol)
                else "NO")
    if r.tol is not None:
        if r.metric.endswith("startup_s"):
            return (f"yes (within one RTT, {r.allow * 1e3:.0f} ms)" if r.within(tol)
                    else f"NO (more than one RTT, {r.allow * 1e3:.0f} ms)")
        return "yes (equal)" if r.within(tol) else "NO (must be equal)"
    if r.rel <= tol:
        return "yes"
    return f"yes (within {r.allow:g} ms)" if r.within(tol) else "NO"


def bbr_state_table(sim: dict[str, dict[str, Any]], lab: dict[str, dict[str, Any]]) -> str:
    """A Markdown table of the BBR senders' mean state per window (bandwidth estimate,
    pacing rate, cwnd, SRTT, min RTT) in the simulator and the lab; "" without BBR."""
    out = []
    for arm in lab:
        for wname, flows in lab[arm].get("bbr_in", {}).items():
            for flow, lv in flows.items():
                sv = sim.get(arm, {}).get("bbr_in", {}).get(wname, {}).get(flow, {})
                for k, v in lv.items():
                    out.append(f"| {arm} | {wname} | {flow} | {k} | "
                               f"{sv.get(k, math.nan):.4g} | {v:.4g} |")
    if not out:
        return ""
    return "\n".join(["| arm | window | flow | state | sim | lab |", "|---|---|---|---|---|---|",
                      *out])


def bbr_rows(arms: dict[str, tuple[dict[str, Any], dict[str, Any]]]) -> list[Row]:
    """BBR's path compared per arm and BBR flow: the number of PROBE_RTT episodes,
    equal (reported, not decisive, when Linux lowered its minimum RTT so that a PROBE_RTT
    due within the flow fell past its end);
    and how long STARTUP lasted, counted from the first ACK BBR took (so the lab's
    process start-up does not count), within one RTT (the lab's minimum RTT as Linux's
    BBR measured it). The STARTUP row is reported, not decisive: STARTUP ends at a round
    boundary once the bandwidth estimate grew by less than 25 % for three rounds, and on
    the slow ACK path the estimate climbs in steps near that threshold, so a few quick
    ACKs more or less in the first round trips move the end by a round of about 100 ms
    (docs/tcp.md, "STARTUP on the slow ACK path, segment by segment")."""
    rows = []
    for arm, (s, lab) in arms.items():
        for flow, lb in lab.get("bbr", {}).items():
            sb = s.get("bbr", {}).get(flow, {})
            exit_sim, exit_lab = sb.get("startup_s"), lb.get("startup_s")
            rows.append(Row(arm, f"bbr.{flow}.startup_s",
                            math.nan if exit_sim is None else exit_sim,
                            math.nan if exit_lab is None else exit_lab,
                            allow=lb["min_rtt_ms"] / 1e3, tol=0.0, gate=False))
            # Equal counts are expected only while Linux's PROBE_RTT schedule fits the
            # run: a sample a few microseconds below the minimum RTT (lab timing jitter)
            # restarts Linux's 10 s, and late in a run moves its PROBE_RTT past the end.
            rows.append(Row(arm, f"bbr.{flow}.probe_rtts", float(sb.get("probe_rtts", -1)),
                            float(lb["probe_rtts"]), tol=0.0,
                            gate=not lb.get("probe_rtt_postponed_s")))
    return rows


def ordering(arms: dict[str, dict[str, Any]], metric: str) -> list[str]:
    """Arm names sorted by `metric`, ascending."""
    return sorted(arms, key=lambda a: get(arms[a], metric))


# --- the parity experiments ------------------------------------------------------------------

#: Relative tolerance of every compared metric (±15 %).
TOLERANCE = 0.15


@dataclass(frozen=True)
class Pair:
    """One parity experiment: shipped lab scenarios (the arms), the metrics compared
    between simulator and lab, and the metrics whose ordering of arms must agree."""

    name: str
    arms: tuple[str, ...]
    metrics: tuple[str, ...]
    ordering: tuple[str, ...]
    what: str
    #: Absolute allowance for latency metrics, besides ±15 %: a typed echo's latency
    #: behind a shaped upload depends on whether it lands behind a packet being
    #: serialized on the slow link — a phase effect the simulator and the lab do not
    #: share, which moves tail percentiles by up to one such packet's time.
    latency_allowance_ms: float = 0.0
    #: Metrics compared and reported beside the others, but not deciding the experiment.
    reported: tuple[str, ...] = ()
    #: Phases of the echo probes the simulator's echo metrics pool (`run_sim`).
    echo_phases: int = 1
    #: Seeds (1..`seeds`) the simulator's mirror runs with, for the metrics in `seeded`.
    seeds: int = 1
    #: Metrics (among `metrics` and `reported`) that spread with the seed in the simulator,
    #: as they do from run to run in the lab: a lab value is compared against the range of
    #: the simulator's values over the seeds — within the tolerance (or allowance) of the
    #: range's nearer end, and inside it exactly. Every other metric is compared against
    #: seed 1's value.
    seeded: tuple[str, ...] = ()
    #: With `seeds` > 1, seed 1 + k (k = 1 .. `seeds` − 1) also starts the flows that
    #: start at 0 k / `seeds` × `phase` seconds later (`shifted`). A lab run starts its
    #: probes and later flows on schedule, but where their packets fall against those of
    #: the flows already running (their ACK clock, BBR's gain cycle) is not under its
    #: control; one simulator run fixes it (0: the seeds alone).
    phase: float = 0.0


PAIRS: dict[str, Pair] = {
    "adsl": Pair(
        "adsl", ("adsl-problem", "adsl-fix"),
        ("throughput_mbps_in.alone.download",
         "throughput_mbps_in.contended.download",
         "throughput_mbps_in.contended.upload",
         "echo_latency_ms_in.alone.typing.p50",
         "echo_latency_ms_in.contended.typing.p50",
         "echo_latency_ms_in.contended.typing.p90"),
        ("throughput_mbps_in.contended.download",
         "throughput_mbps_in.contended.upload",
         "echo_latency_ms_in.contended.typing.p50"),
        "the ADSL problem (an upload fills the modem) and its fix (five classes, HTB, ATM "
        "cells in the box)",
        # Half of one 1500-byte packet's time on the 495 kbit/s of ATM cells (27 ms).
        latency_allowance_ms=13.5,
        # An echo typed every 200 ms against an upload packet every ~55 ms on the line:
        # where the echoes fall in that cycle sets the tail (40.8-50.0 ms p90 over 40
        # phases of adsl-fix's probe), so the simulator's echoes pool eight phases.
        echo_phases=8),
    "ackfilter": Pair(
        "ackfilter", ("ackfilter-off", "ackfilter-on"),
        ("throughput_mbps_in.steady.download",
         "echo_latency_ms_in.steady.typing.p50",
         "echo_latency_ms_in.steady.typing.p90"),
        ("throughput_mbps_in.steady.download",
         "echo_latency_ms_in.steady.typing.p50"),
        "a download clocked by ACKs over a 100 kbit/s reverse link, without and with "
        "classic ACK filtering"),
    # The download's mean RTT (SRTT: `TCP_INFO` in the lab) is compared here and on the
    # fixed bottleneck (below).
    "bbr": Pair(
        "bbr", ("bbr-ackfilter-off", "bbr-ackfilter-on"),
        ("throughput_mbps_in.steady.download",
         "bbr_in.steady.download.srtt_ms",
         "echo_latency_ms_in.steady.typing.p50",
         "echo_latency_ms_in.steady.typing.p90"),
        ("throughput_mbps_in.steady.download",
         "echo_latency_ms_in.steady.typing.p50"),
        "a BBR download (Linux tcp_bbr / the simulator's BBR) over a 100 kbit/s reverse "
        "link without and with ACK filtering"),
    # On the fixed bottleneck the echo behind the download and the download's SRTT follow
    # the FIFO queue BBR keeps, which grows while its bandwidth estimate (the largest
    # delivery-rate sample of 10 rounds) is above 9.75 Mbit/s, where pacing at 99 % of it
    # outruns the line: a burst of ACKs lifts it. The lab keeps the hosts' own ACK timing
    # (their traffic tools under SCHED_FIFO, `scenario.HOST_PRIORITY`; docs/tcp.md, "The
    # fixed bottleneck's queue"), and the rows decide.
    "bbr-fixed": Pair(
        "bbr-fixed", ("bbr-fixed",),
        ("throughput_mbps_in.steady.download",
         "bbr_in.steady.download.srtt_ms",
         "echo_latency_ms_in.steady.typing.p50"),
        (),
        "a BBR download over a fixed 10 Mbit/s, 40 ms bottleneck with a 100-packet FIFO"),
    # What `bbr-adsl` measures spreads from run to run in both runtimes, with phases no run
    # controls: where the echo's keystrokes fall against the download's ACKs (a keystroke
    # just ahead of an ACK can make a delivery-rate sample above the line's rate, which
    # BBR's bandwidth filter keeps for 10 rounds), BBR's random first phase, and where the
    # upload's handshake falls in the download's queue. The echo alone and the download's
    # SRTT alone follow the downlink queue BBR keeps (it grows while the estimate is above
    # 6.90 Mbit/s, where pacing at 99 % of it outruns the line). The upload's minimum RTT
    # is its handshake's, its SYN-ACK behind the download's queue at 12 s; at the line's
    # one-segment BDP a few ms more of it are two segments more of cwnd, 55 ms more of
    # modem queue: the contended download and echo fall into two modes (docs/tcp.md).
    # These metrics are compared against the range of the simulator's values over 20 runs
    # whose seeds, and the download's phase against the probe and the upload (over one
    # echo interval), differ.
    "bbr-adsl": Pair(
        "bbr-adsl", ("bbr-adsl",),
        ("throughput_mbps_in.alone.download",
         "throughput_mbps_in.contended.upload",
         "echo_latency_ms_in.alone.typing.p50",
         "bbr_in.alone.download.srtt_ms",
         "throughput_mbps_in.contended.download",
         "echo_latency_ms_in.contended.typing.p50",
         "echo_latency_ms_in.contended.typing.p90"),
        (),
        "the ADSL line of `adsl` with BBR senders: a BBR download, a BBR upload from 12 s",
        latency_allowance_ms=13.5,
        reported=("bbr.upload.min_rtt_ms",),
        seeds=20,
        seeded=("echo_latency_ms_in.alone.typing.p50",
                "bbr_in.alone.download.srtt_ms",
                "throughput_mbps_in.contended.download",
                "echo_latency_ms_in.contended.typing.p50",
                "echo_latency_ms_in.contended.typing.p90",
                "bbr.upload.min_rtt_ms"),
        phase=0.2),
}


@dataclass
class Outcome:
    """The result of one parity experiment."""

    pair: Pair
    sim: dict[str, dict[str, Any]]
    lab: dict[str, dict[str, Any]]
    rows: list[Row]
    tol: float

    @property
    def outside(self) -> list[Row]:
        """Compared metrics outside the tolerance (among those that decide)."""
        return [r for r in self.rows if r.gate and not r.within(self.tol)]

    def orderings(self) -> list[tuple[str, list[str], list[str]]]:
        """(metric, arms ascending in the simulator, arms ascending in the lab)."""
        return [(k, ordering(self.sim, k), ordering(self.lab, k)) for k in self.pair.ordering]

    @property
    def ordering_mismatches(self) -> list[str]:
        return [k for k, s, la in self.orderings() if s != la]

    @property
    def ok(self) -> bool:
        return not self.outside and not self.ordering_mismatches

    def to_dict(self) -> dict[str, Any]:
        return {"pair": self.pair.name, "arms": list(self.pair.arms), "tolerance": self.tol,
                "ok": self.ok,
                "rows": [{"arm": r.arm, "metric": r.metric, "sim": r.sim, "lab": r.lab,
                          "rel": r.rel, "allow": r.allow, "tol": r.own(self.tol),
                          "within": r.within(self.tol), "gate": r.gate,
                          "sim_seeds": r.spread()}
                         for r in self.rows],
                "bbr": {a: {"sim": self.sim[a].get("bbr"), "lab": self.lab[a].get("bbr"),
                            "sim_in": self.sim[a].get("bbr_in"),
                            "lab_in": self.lab[a].get("bbr_in")}
                        for a in self.pair.arms if "bbr" in self.lab[a]},
                "ordering": [{"metric": k, "sim": s, "lab": la, "same": s == la}
                             for k, s, la in self.orderings()],
                "tcp_congestion_control": {a: self.lab[a].get("tcp_congestion_control")
                                           for a in self.pair.arms}}

    def markdown(self) -> str:
        lines = [f"### {self.pair.name}: {self.pair.what}", "", table(self.rows, self.tol), ""]
        for k, s, la in self.orderings():
            lines.append(f"* ordering by `{k}` (ascending): simulator {' < '.join(s)}, "
                         f"lab {' < '.join(la)} — {'same' if s == la else 'DIFFERENT'}")
        state = bbr_state_table(self.sim, self.lab)
        if state:
            lines += ["", "BBR's state (means over each window; `TCP_CC_INFO` and "
                      "`TCP_INFO` in the lab, the model in the simulator):", "", state]
        return "\n".join(lines) + "\n"


def run_pair(pair: Pair, out: Any, lab: Any = None, tol: float = TOLERANCE,
             seed: int = 1) -> Outcome:
    """Run every arm of `pair` in the simulator (with `seed`, and for `pair.seeded` with
    the seeds `seed`..`seed + pair.seeds − 1`, each at its phase, `Pair.phase`) and in the
    lab (`lab`, or a fresh one removed afterwards); the lab's results go to `out/<arm>`."""
    from pathlib import Path

    from asymlink.lab.bench import scenario_path
    from asymlink.lab.netns import Lab
    from asymlink.lab.scenario import run_scenario

    out = Path(out)
    own = lab is None
    lab = lab or Lab.up()
    try:
        sims: dict[str, dict[str, Any]] = {}
        seeds: dict[str, list[dict[str, Any]]] = {}
        labs: dict[str, dict[str, Any]] = {}
        for arm in pair.arms:
            sc = LabScenario.from_file(scenario_path(arm))
            sims[arm] = run_sim(sc, seed, pair.echo_phases)
            if pair.seeded:
                seeds[arm] = [sims[arm]] + [
                    run_sim(shifted(sc, k * pair.phase / pair.seeds), seed + k,
                            pair.echo_phases)
                    for k in range(1, pair.seeds)]
            labs[arm] = run_scenario(sc, out / arm, lab)
    finally:
        if own:
            lab.down()
    both = {a: (sims[a], labs[a]) for a in pair.arms}
    rows = (compare(both, list(pair.metrics), pair.latency_allowance_ms,
                    seeds=seeds, seeded=pair.seeded)
            + compare(both, list(pair.reported), pair.latency_allowance_ms, gate=False,
                      seeds=seeds, seeded=pair.seeded)
            + bbr_rows(both))
    return Outcome(pair, sims, labs, rows, tol)
