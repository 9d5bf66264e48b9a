"""The aggregate rate control paper (Mehra, Tewari & Kandlur, "Design Considerations for
Rate Control of Aggregated TCP Connections", NOSSDAV 1999): three catalog entries.

* `aggregate-shaping` (Figs. 3, 4, 5, 7, 10): three connections with RTTs 50 / 300 /
  600 ms shaped as one aggregate (r_m = 500 kbit/s) at the server's TCP output by each
  token-sharing scheme, with equal and unequal client links; the full run sweeps the
  shaping-timer interval (the paper's open question, §6.2) with and without the
  aggregate's other triggers (§6.3), and the bucket depth B.
* `aggregate-policing` (Figs. 6, 8, 11): the same aggregate policed and marked instead,
  ERED at the access router: total and compliant (marked) throughput per scheme.
* `aggregate-window` (§5, not evaluated by the paper): the congestion-avoidance increase
  rules g(rtt) against standard TCP, fairness across RTTs and the aggregate against n
  standard connections at rtt_av.

The scenario files come from `aggregate_gen.py`. Every metric is computed here from the
simulation's tables (and, for the marked bytes, its packet captures) only.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from asymlink.analysis import jain_index, max_min_fairness_index, max_min_shares
from asymlink.repro import aggregate_gen as gen
from asymlink.repro.base import Entry, Metrics, register
from asymlink.results import Results

PAPER = "aggregate-tcp-rate-control"
CONNS = ["conn1", "conn2", "conn3"]
#: The link direction toward each connection's client (and the reference clients).
CLIENT_LINKS = ["c1:to_b", "c2:to_b", "c3:to_b"]
REF_LINKS = ["r1:to_b", "r2:to_b", "r3:to_b"]
LINKS = list(gen.LINK_RATES)
#: r_m, and the access link's rate (the bottleneck without rate control), bit/s.
RM_BPS = 500_000.0
ACCESS_BPS = 1_000_000.0


# --- measurements from a run's tables ---------------------------------------------------


def window(res: Results) -> tuple[float, float]:
    """The measurement window: the steady state after a warm-up of a fifth of the run."""
    end = float(res.meta["duration_s"])
    return end / 5, end


def rate_bps(res: Results, link: str, t0: float, t1: float) -> float:
    """The rate (bit/s, IP bytes) at which link direction `link` carried packets in
    [t0, t1]. Measured on each client's own link, so it counts the data as it reaches the
    client, when it reaches it (the receiver's in-order delivery instead comes in bursts
    after each loss recovery, which would distort any window); retransmissions count, as
    in a trace of the link."""
    f = res.links[res.links["link"] == link].sort_values("t")
    if f.empty:
        raise KeyError(f"no link direction {link!r} in {sorted(set(res.links['link']))}")
    b0, b1 = np.interp([t0, t1], f["t"].to_numpy(float), f["tx_bytes"].to_numpy(float),
                       left=0.0)
    return float((b1 - b0) * 8 / (t1 - t0))


def goodput_bps(res: Results, flow: str, t0: float, t1: float) -> float:
    """Goodput of `flow` (bytes delivered in order to the application) in [t0, t1]."""
    f = res.flows[res.flows["flow"] == flow].sort_values("t")
    b0, b1 = np.interp([t0, t1], f["t"].to_numpy(float), f["bytes_delivered"].to_numpy(float),
                       left=0.0)
    return float((b1 - b0) * 8 / (t1 - t0))


def fair_shares(links: str, capacity_bps: float) -> np.ndarray:
    """The max-min fair shares (bit/s) of `capacity_bps` among the three connections, each
    limited by its client link (§2.2)."""
    return max_min_shares(capacity_bps, [k * 1e3 for k in gen.LINK_RATES[links]])


def fairness(rates: Iterable[float], links: str, capacity_bps: float) -> float:
    """Jain's index for equal client links; the max-min-modified index (§2.2) otherwise."""
    r = list(rates)
    if links == "equal":
        return jain_index(r)
    return max_min_fairness_index(r, fair_shares(links, capacity_bps))


# --- aggregate-shaping --------------------------------------------------------------------

SHAPING_SCHEMES = list(gen.SHAPING_SCHEMES)
#: The full run's sensitivity sweeps: the shaping timer (with the connection's own
#: triggers, and with every event of the aggregate serving the waiters) and the depth B.
SWEEP_SCHEMES = ["partitioned_rtt", "common_fcfs", "common_lru", "logical"]
SWEEP_TIMERS = ["0s", "1ms", "5ms", "15ms", "50ms", "100ms", "200ms"]
SWEEP_TRIGGERS = ["own", "aggregate"]
SWEEP_DEPTHS = ["5KB", "10KB", "20KB", "40KB", "80KB"]
#: The quick run's small timer sweep: a coarse timer with and without the other triggers.
QUICK_TIMERS = ["15ms", "200ms"]
QUICK_SCHEMES = ["common_fcfs"]
COND = "nodes.0.conditioner"


def _shaping_measure(res: Results, links: str, scheme: str) -> dict[str, Any]:
    t0, t1 = window(res)
    rates = [rate_bps(res, c, t0, t1) for c in CLIENT_LINKS]
    capacity = ACCESS_BPS if scheme == "none" else RM_BPS
    return {
        "rates": rates,
        "fairness": fairness(rates, links, capacity),
        "utilization": sum(rates) / RM_BPS,
    }


def _shaping_sweep(out_dir: Path, quick: bool, schemes: list[str], timers: list[str],
                   depths: list[str]) -> dict[str, Any]:
    fair: dict[str, Any] = {}
    util: dict[str, Any] = {}
    for trig in SWEEP_TRIGGERS:
        for scheme in schemes:
            for links in LINKS:
                for timer in timers:
                    label = f"timer-{trig}-{scheme}-{links}-{timer}"
                    res = SHAPING.run_scenario(
                        f"{scheme}-{links}", out_dir, quick,
                        overrides={f"{COND}.timer": timer, f"{COND}.triggers": trig},
                        label=label,
                    )
                    m = _shaping_measure(res, links, scheme)
                    fair.setdefault(trig, {}).setdefault(scheme, {}).setdefault(links, {})[
                        timer] = m["fairness"]
                    util.setdefault(trig, {}).setdefault(scheme, {}).setdefault(links, {})[
                        timer] = m["utilization"]
    out: dict[str, Any] = {"timer": {"fairness_index": fair, "utilization": util}}
    if depths:
        dfair: dict[str, Any] = {}
        dutil: dict[str, Any] = {}
        for scheme in schemes:
            for links in LINKS:
                for depth in depths:
                    res = SHAPING.run_scenario(
                        f"{scheme}-{links}", out_dir, quick,
                        overrides={f"{COND}.policies.0.profile.depth": depth},
                        label=f"depth-{scheme}-{links}-{depth}",
                    )
                    m = _shaping_measure(res, links, scheme)
                    dfair.setdefault(scheme, {}).setdefault(links, {})[depth] = m["fairness"]
                    dutil.setdefault(scheme, {}).setdefault(links, {})[depth] = m["utilization"]
        out["depth"] = {"fairness_index": dfair, "utilization": dutil}
    return out


def _shaping_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    fair: dict[str, dict[str, float]] = {}
    util: dict[str, dict[str, float]] = {}
    kbps: dict[str, dict[str, dict[str, float]]] = {}
    for scheme in SHAPING_SCHEMES:
        for links in LINKS:
            m = _shaping_measure(SHAPING.run_scenario(f"{scheme}-{links}", out_dir, quick),
                                 links, scheme)
            fair.setdefault(scheme, {})[links] = m["fairness"]
            util.setdefault(scheme, {})[links] = m["utilization"]
            kbps.setdefault(scheme, {})[links] = {
                c: r / 1e3 for c, r in zip(CONNS, m["rates"], strict=True)
            }
    metrics: dict[str, Any] = {"fairness_index": fair, "utilization": util, "throughput_kbps": kbps}
    if quick:
        metrics["sweep"] = _shaping_sweep(out_dir, quick, QUICK_SCHEMES, QUICK_TIMERS, [])
    else:
        metrics["sweep"] = _shaping_sweep(out_dir, quick, SWEEP_SCHEMES, SWEEP_TIMERS,
                                          SWEEP_DEPTHS)
    return metrics


def _cumulative_panel(ax: Any, res: Results, title: str) -> None:
    """The paper's plot: the bytes carried to each client so far over the time so far."""
    for link, rtt in zip(CLIENT_LINKS, gen.RTTS_MS, strict=True):
        f = res.links[res.links["link"] == link].sort_values("t")
        t = f["t"].to_numpy(float)
        b = f["tx_bytes"].to_numpy(float)
        sel = t > 0
        ax.plot(t[sel], b[sel] * 8 / t[sel] / 1e3, label=f"rtt {rtt} ms")
    ax.set_title(title, fontsize="small")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("throughput so far (kbit/s)")
    ax.grid(alpha=0.3)


def _shaping_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    m: Any = metrics
    figs = []
    for links in LINKS:
        fig = Figure(figsize=(14.0, 7.0), layout="constrained")
        axes = fig.subplots(2, 4).ravel()
        for ax, scheme in zip(axes, SHAPING_SCHEMES, strict=False):
            res = Results.load(out_dir / "runs" / f"{scheme}-{links}")
            _cumulative_panel(ax, res, scheme)
        axes[-1].axis("off")
        axes[0].legend(fontsize="small")
        fig.suptitle(f"aggregate-shaping, {links} client links (r_m = 500 kbit/s)")
        figs.append(save(fig, out_dir / "figures" / f"throughput-{links}.png"))

    fig = Figure(figsize=(12.0, 4.0), layout="constrained")
    axes = fig.subplots(1, 2)
    x = np.arange(len(SHAPING_SCHEMES))
    for ax, key, label in ((axes[0], "fairness_index", "fairness index"),
                           (axes[1], "utilization", "aggregate throughput / r_m")):
        node = m[key]
        for k, links in enumerate(LINKS):
            vals = [float(node[s][links]) for s in SHAPING_SCHEMES]
            ax.bar(x + (k - 0.5) * 0.4, vals, width=0.4, label=links)
        # The paper's value for a bar: a black bar-wide mark on it.
        marks = [(SHAPING_SCHEMES.index(p.metric[1]) + (LINKS.index(p.metric[2]) - 0.5) * 0.4,
                  p.value) for p in SHAPING.paper_data.paper_values
                 if p.metric[0] == key and len(p.metric) == 3
                 and p.metric[1] in SHAPING_SCHEMES and p.metric[2] in LINKS]
        if marks:
            ax.plot(*zip(*marks, strict=True), linestyle="none", marker="_", markersize=14,
                    markeredgewidth=2, color="black", label="paper")
        ax.set_xticks(x, SHAPING_SCHEMES, rotation=30, ha="right", fontsize="small")
        ax.set_xlabel("token-bucket scheme")
        ax.set_title(f"{label} per scheme (paper Tables 1-3)", fontsize="small")
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize="small")
    figs.append(save(fig, out_dir / "figures" / "schemes.png"))

    sweep = m.get("sweep")
    if isinstance(sweep, dict) and isinstance(sweep.get("timer"), dict):
        timer = sweep["timer"]
        fig = Figure(figsize=(12.0, 7.0), layout="constrained")
        axes = fig.subplots(2, 2)
        for row, key in enumerate(("fairness_index", "utilization")):
            for col, links in enumerate(LINKS):
                ax = axes[row][col]
                for trig, by_scheme in timer[key].items():
                    for scheme, by_links in by_scheme.items():
                        d = by_links[links]
                        ms = [_ms(t) for t in d]
                        ax.plot(ms, list(d.values()), marker="o",
                                linestyle="-" if trig == "own" else "--",
                                label=f"{scheme} ({trig})")
                ax.set_xscale("symlog", linthresh=1.0)
                ax.set_xlabel("shaping timer (ms; 0 = exact)")
                ax.set_ylabel(key.replace("_", " "))
                ax.set_title(f"{links} client links", fontsize="small")
                ax.grid(alpha=0.3)
        axes[0][0].legend(fontsize="x-small")
        figs.append(save(fig, out_dir / "figures" / "timer-sweep.png"))
    return figs


def _ms(span: str) -> float:
    for unit, scale in (("ms", 1.0), ("us", 1e-3), ("s", 1e3)):
        if span.endswith(unit):
            return float(span.removesuffix(unit)) * scale
    raise ValueError(span)


SHAPING = register(
    Entry(
        id="aggregate-shaping",
        paper=PAPER,
        title="Shaping a TCP aggregate: partitioned, common and logical token buckets "
        "(Figs. 3-5, 7, 10)",
        run=_shaping_run,
        figures=_shaping_figures,
    )
)


# --- aggregate-policing -------------------------------------------------------------------

POLICING_SCHEMES = list(gen.POLICING_SCHEMES)
MARK_DSCP = 10


def pcap_bytes(path: Path, t0: float, t1: float) -> tuple[float, float]:
    """(all, marked) IP bytes of the packets in a RAW pcap with timestamps in [t0, t1];
    marked = a non-zero DSCP. Reads the IP total length, so a short snaplen suffices."""
    data = path.read_bytes()
    if len(data) < 24:
        raise ValueError(f"{path}: not a pcap file")
    magic = struct.unpack_from("<I", data, 0)[0]
    if magic == 0xA1B23C4D:
        endian, frac = "<", 1e-9
    elif magic == 0xA1B2C3D4:
        endian, frac = "<", 1e-6
    elif magic == 0x4D3CB2A1:
        endian, frac = ">", 1e-9
    elif magic == 0xD4C3B2A1:
        endian, frac = ">", 1e-6
    else:
        raise ValueError(f"{path}: unknown pcap magic {magic:#x}")
    total = marked = 0.0
    off = 24
    rec = struct.Struct(endian + "IIII")
    while off + 16 <= len(data):
        sec, sub, incl, _orig = rec.unpack_from(data, off)
        off += 16
        t = sec + sub * frac
        pkt = data[off:off + incl]
        off += incl
        if not t0 <= t <= t1 or len(pkt) < 4 or pkt[0] >> 4 != 4:
            continue
        length = int.from_bytes(pkt[2:4], "big")
        total += length
        if pkt[1] >> 2:
            marked += length
    return total, marked


def _policing_measure(res: Results, run_dir: Path, links: str) -> dict[str, Any]:
    t0, t1 = window(res)
    tot, comp = [], []
    for i in (1, 2, 3):
        a, m = pcap_bytes(run_dir / f"c{i}.pcap", t0, t1)
        tot.append(a * 8 / (t1 - t0))
        comp.append(m * 8 / (t1 - t0))
    good = [goodput_bps(res, c, t0, t1) for c in CONNS]
    carried = [rate_bps(res, c, t0, t1) for c in CLIENT_LINKS]
    return {"total": tot, "compliant": comp, "goodput": good,
            "fairness": fairness(carried, links, ACCESS_BPS)}


#: Seeds per arm: police-and-mark loses unmarked packets at the ERED router, and the
#: timeouts of the long connections make one run's window noisy; the metrics are means.
POLICING_SEEDS = [1, 2, 3, 4, 5]


def _policing_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {k: {} for k in (
        "total_kbps", "compliant_kbps", "goodput_kbps", "compliant_share", "fairness_index",
        "per_connection")}
    for scheme in POLICING_SCHEMES:
        for links in LINKS:
            name = f"{scheme}-{links}"
            runs = []
            for seed in POLICING_SEEDS:
                label = f"{name}-seed{seed}"
                res = POLICING.run_scenario(
                    name, out_dir, quick, label=label,
                    overrides={"monitor.capture": gen.CAPTURES, "seed": seed})
                runs.append(_policing_measure(res, out_dir / "runs" / label, links))

            def mean(key: str, runs: list[dict[str, Any]] = runs) -> np.ndarray:
                return np.asarray(np.mean([r[key] for r in runs], axis=0), dtype=float)

            tot, comp = mean("total"), mean("compliant")
            metrics["total_kbps"].setdefault(scheme, {})[links] = tot.sum() / 1e3
            metrics["compliant_kbps"].setdefault(scheme, {})[links] = comp.sum() / 1e3
            metrics["goodput_kbps"].setdefault(scheme, {})[links] = mean("goodput").sum() / 1e3
            metrics["compliant_share"].setdefault(scheme, {})[links] = comp.sum() / RM_BPS
            metrics["fairness_index"].setdefault(scheme, {})[links] = float(
                np.mean([r["fairness"] for r in runs]))
            metrics["per_connection"].setdefault(scheme, {})[links] = {
                c: {"total_kbps": a / 1e3, "compliant_kbps": b / 1e3}
                for c, a, b in zip(CONNS, tot, comp, strict=True)
            }
    return metrics


def _policing_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    fig = Figure(figsize=(12.0, 7.0), layout="constrained")
    axes = fig.subplots(2, 2)
    per: Any = metrics["per_connection"]
    x = np.arange(len(POLICING_SCHEMES))
    for col, links in enumerate(LINKS):
        for row, key in enumerate(("total_kbps", "compliant_kbps")):
            ax = axes[row][col]
            bottom = np.zeros(len(POLICING_SCHEMES))
            for c, rtt in zip(CONNS, gen.RTTS_MS, strict=True):
                vals = np.array([float(per[s][links][c][key]) for s in POLICING_SCHEMES])
                ax.bar(x, vals, bottom=bottom, label=f"rtt {rtt} ms")
                bottom += vals
            if key == "compliant_kbps":
                ax.axhline(RM_BPS / 1e3, color="k", linestyle=":", label="r_m")
            ax.set_xticks(x, POLICING_SCHEMES, fontsize="small")
            ax.set_xlabel("token-bucket scheme")
            ax.set_ylabel(key.replace("_kbps", " throughput (kbit/s)"))
            ax.set_title(f"{links} client links", fontsize="small")
            ax.grid(axis="y", alpha=0.3)
    axes[0][0].legend(fontsize="small")
    fig.suptitle("aggregate-policing: throughput per connection, stacked (r_m = 500 kbit/s)")
    return [save(fig, out_dir / "figures" / "policing.png")]


POLICING = register(
    Entry(
        id="aggregate-policing",
        paper=PAPER,
        title="Policing and marking a TCP aggregate with ERED routers (Figs. 6, 8, 11)",
        run=_policing_run,
        figures=_policing_figures,
    )
)


# --- aggregate-window ---------------------------------------------------------------------

WINDOW_RULES = list(gen.WINDOW_RULES)


def _window_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {k: {} for k in (
        "fairness_index", "aggregate_kbps", "throughput_kbps", "vs_aggregate_kbps",
        "vs_reference_kbps", "aggregate_over_reference")}
    for rule in WINDOW_RULES:
        res = WINDOW.run_scenario(rule, out_dir, quick)
        t0, t1 = window(res)
        rates = [rate_bps(res, c, t0, t1) for c in CLIENT_LINKS]
        metrics["fairness_index"][rule] = jain_index(rates)
        metrics["aggregate_kbps"][rule] = sum(rates) / 1e3
        metrics["throughput_kbps"][rule] = {c: r / 1e3 for c, r in zip(CONNS, rates, strict=True)}
        vs = WINDOW.run_scenario(f"vs-{rule}", out_dir, quick)
        t0, t1 = window(vs)
        agg = sum(rate_bps(vs, c, t0, t1) for c in CLIENT_LINKS)
        ref = sum(rate_bps(vs, c, t0, t1) for c in REF_LINKS)
        metrics["vs_aggregate_kbps"][rule] = agg / 1e3
        metrics["vs_reference_kbps"][rule] = ref / 1e3
        metrics["aggregate_over_reference"][rule] = agg / ref if ref > 0 else 0.0
    return metrics


def _window_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    fig = Figure(figsize=(14.0, 4.0), layout="constrained")
    axes = fig.subplots(1, len(WINDOW_RULES))
    for ax, rule in zip(axes, WINDOW_RULES, strict=True):
        _cumulative_panel(ax, Results.load(out_dir / "runs" / rule), rule)
    axes[0].legend(fontsize="small")
    fig.suptitle("aggregate-window: the aggregate's three connections alone")
    figs = [save(fig, out_dir / "figures" / "window-alone.png")]

    fig = Figure(figsize=(6.0, 4.0), layout="constrained")
    ax = fig.subplots()
    x = np.arange(len(WINDOW_RULES))
    agg: Any = metrics["vs_aggregate_kbps"]
    ref: Any = metrics["vs_reference_kbps"]
    ax.bar(x - 0.2, [float(agg[r]) for r in WINDOW_RULES], 0.4,
           label="aggregate (RTT 50/300/600 ms)")
    ax.bar(x + 0.2, [float(ref[r]) for r in WINDOW_RULES], 0.4,
           label="3 standard connections, RTT = rtt_av")
    ax.set_xticks(x, WINDOW_RULES, fontsize="small")
    ax.set_xlabel("window-increase rule")
    ax.set_ylabel("throughput (kbit/s)")
    ax.set_title("The aggregate against three standard connections at rtt_av")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize="small")
    figs.append(save(fig, out_dir / "figures" / "window-versus.png"))
    return figs


WINDOW = register(
    Entry(
        id="aggregate-window",
        paper=PAPER,
        title="Congestion-window increase for aggregate fairness (§5, not evaluated by the "
        "paper)",
        run=_window_run,
        figures=_window_figures,
    )
)
