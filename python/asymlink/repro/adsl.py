"""The ADSL middlebox paper (Brouer & Hansen, DIKU TR 2004/07): four catalog entries.

* `adsl-problem` (Fig. 1): a downstream transfer collapses while the uplink is busy.
* `adsl-linksharing` (Figs. 5-6): FIFO vs ACK priority vs the paper's five-class HTB.
* `adsl-ackfifo` (Fig. 7): a slower ack class, its FIFO limited to 5, and the
  per-connection lowest-sequence ACK drop the paper planned.
* `adsl-atm` (Fig. 8, §III-D): IP-size vs fixed-overhead vs exact ATM cell accounting in
  the shaper, and the queue that hides in the modem.

All share one topology (see the scenario files): a LAN client, the middlebox router, a
modem router whose uplink is the ATM line (its own FIFO, the true cell rate), the ISP and
a server. Every metric is computed here from the simulation's tables only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from asymlink.repro.base import Entry, Metrics, PaperData, register
from asymlink.results import Results

PAPER = "adsl-middlebox-link-sharing"
#: The ATM line's uplink (modem -> ISP) and downlink directions, and the middlebox's
#: egress toward the modem.
MODEM_UP = "adsl:to_b"
MODEM_DOWN = "adsl:to_a"
SHAPER = "tomodem:to_b"


# --- measurements from a run's tables ---------------------------------------------------


def window(res: Results) -> tuple[float, float]:
    """The measurement window: after a warm-up of a third of the run (at most 15 s)."""
    end = float(res.meta["duration_s"])
    return min(15.0, end / 3), end


def goodput_mbps(res: Results, flow: str, t0: float, t1: float) -> float:
    """Goodput of `flow` (bytes delivered to the receiving application) in [t0, t1]."""
    f = res.flows[res.flows["flow"] == flow].sort_values("t")
    if f.empty:
        return 0.0
    t = f["t"].to_numpy(float)
    b = f["bytes_delivered"].to_numpy(float)
    b0, b1 = np.interp([t0, t1], t, b, left=0.0)
    return float((b1 - b0) * 8 / (t1 - t0) / 1e6)


def ping_rtt_ms(res: Results, flow: str, t0: float) -> float:
    """Mean RTT of the probes of ping flow `flow` sent after `t0` (NaN if none came back)."""
    m = res.measurements
    sel = m[(m["flow"] == flow) & (m["metric"] == "rtt_s") & (m["t"] >= t0)]
    return float(sel["value"].mean() * 1e3) if len(sel) else float("nan")


def queue_row(res: Results, queue: str) -> pd.Series:
    """The `queue_summary` row of `queue`."""
    qs = res.queue_summary
    rows = qs[qs["queue"] == queue]
    if rows.empty:
        raise KeyError(f"no queue {queue!r} in {list(qs['queue'])}")
    return rows.iloc[0]


def sojourn_ms(res: Results, queue: str, t0: float) -> float:
    """Mean time from offer to transmission at `queue` of the packets sent after `t0`
    (each sample's mean weighted by the packets it covers)."""
    q = res.queues[res.queues["queue"] == queue].sort_values("t")
    n = np.diff(q["dequeued"].to_numpy(float), prepend=0.0)
    s = q["sojourn_ms"].to_numpy(float)
    sel = (q["t"].to_numpy(float) > t0) & (n > 0)
    return float((s[sel] * n[sel]).sum() / n[sel].sum()) if sel.any() else 0.0


def ack_shares(res: Results, queue: str, line_bps: float, oam_one_in: int) -> dict[str, float]:
    """What pure ACKs took of a line over the whole run, as fractions of its raw cell rate:
    `uplink` (their cells), `overhead` (their cells minus their IP bytes), and `use` (all
    cells sent). The simulator's wire bytes include the OAM cells' share, which belongs to
    the line, not to the ACKs: it is taken out."""
    r = queue_row(res, queue)
    total = line_bps * float(res.meta["duration_s"]) / 8
    own = (oam_one_in - 1) / oam_one_in if oam_one_in >= 2 else 1.0
    cells = float(r["tx_pure_ack_wire_bytes"]) * own
    return {
        "uplink": cells / total,
        "overhead": (cells - float(r["tx_pure_ack_bytes"])) / total,
        "use": float(r["tx_wire_bytes"]) * own / total,
    }


def _load_runs(out_dir: Path, names: list[str]) -> dict[str, Results]:
    return {n: Results.load(out_dir / "runs" / n) for n in names}


def _bar(ax: Any, labels: list[str], values: list[float], ylabel: str) -> None:
    ax.bar(labels, values, color="#4878a8")
    for i, v in enumerate(values):
        ax.annotate(f"{v:.3g}", (i, v), ha="center", va="bottom", fontsize="small")
    ax.set_xlabel("configuration")
    ax.set_ylabel(ylabel)
    ax.grid(axis="y", alpha=0.3)


def _metric_dict(metrics: Metrics, key: str) -> dict[str, float]:
    node = metrics.get(key, {})
    if not isinstance(node, dict):
        return {}
    return {k: float(v) for k, v in node.items() if not isinstance(v, dict)}


def _timeseries_figure(out_dir: Path, names: list[str], flow: str, path: str,
                       title: str, reference: str | None = None) -> Path:
    """Goodput of `flow` in each run over time; `reference`: the adsl-problem metric whose
    paper values are drawn as reference lines (Mbit/s)."""
    from asymlink.analysis import INTERVAL_DRAWSTYLE, throughput
    from asymlink.plot import new_axes, save

    ax = new_axes()
    for name, res in _load_runs(out_dir, names).items():
        tp = throughput(res.flows[res.flows["flow"] == flow], interval=1.0)
        ax.plot(tp["t"], tp["throughput_bps"] / 1e6, label=name, drawstyle=INTERVAL_DRAWSTYLE)
    ax.set_xlabel("time (s)")
    ax.set_ylabel(f"{flow} goodput (Mbit/s)")
    if reference is not None:
        from asymlink.repro.base import draw_paper_values

        draw_paper_values(ax, PROBLEM.paper_data, reference)
    ax.set_title(title)
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return save(ax.figure, out_dir / "figures" / path)


# --- adsl-problem -------------------------------------------------------------------------

PROBLEM_ARMS = ["alone", "with_upload"]
PROBLEM_SWEEP = [10, 25, 50, 100]


def _problem_measure(res: Results) -> dict[str, float]:
    t0, t1 = window(res)
    return {
        "down": goodput_mbps(res, "down", t0, t1),
        "up": goodput_mbps(res, "up", t0, t1),
        "rtt": ping_rtt_ms(res, "ping", t0),
        "modem": sojourn_ms(res, MODEM_UP, t0),
    }


def _problem_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    m = {a: _problem_measure(PROBLEM.run_scenario(a, out_dir, quick)) for a in PROBLEM_ARMS}
    metrics: dict[str, Any] = {
        "down_mbps": {a: m[a]["down"] for a in PROBLEM_ARMS},
        "rtt_ms": {a: m[a]["rtt"] for a in PROBLEM_ARMS},
        "modem_queue_delay_ms": {a: m[a]["modem"] for a in PROBLEM_ARMS},
        "up_mbps": {"with_upload": m["with_upload"]["up"]},
        "down_ratio": m["with_upload"]["down"] / m["alone"]["down"],
    }
    if not quick:
        sweep = {
            str(n): _problem_measure(
                PROBLEM.run_scenario(
                    "with_upload", out_dir, quick,
                    overrides={"links.adsl.to_b.queue.limit": f"{n}p"}, label=f"modem_buffer_{n}p",
                )
            )
            for n in PROBLEM_SWEEP
        }
        metrics["sweep_modem_buffer"] = {
            "down_mbps": {k: v["down"] for k, v in sweep.items()},
            "rtt_ms": {k: v["rtt"] for k, v in sweep.items()},
        }
    return metrics


def _problem_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from asymlink.plot import new_axes, save
    from asymlink.repro.base import draw_paper_values

    figs = [_timeseries_figure(out_dir, PROBLEM_ARMS, "down", "downstream.png",
                               "adsl-problem: downstream transfer alone and during an upload",
                               reference="down_mbps")]
    ax = new_axes()
    for name, res in _load_runs(out_dir, PROBLEM_ARMS).items():
        m = res.measurements
        p = m[(m["flow"] == "ping") & (m["metric"] == "rtt_s")]
        ax.plot(p["t"], p["value"] * 1e3, ".", ms=3, label=name)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("ping RTT (ms)")
    ax.set_title("adsl-problem: ping RTT alone and during an upload")
    ax.set_yscale("log")
    draw_paper_values(ax, PROBLEM.paper_data, "rtt_ms")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    figs.append(save(ax.figure, out_dir / "figures" / "rtt.png"))
    return figs


PROBLEM = register(
    Entry(
        id="adsl-problem",
        paper=PAPER,
        title="Downstream TCP collapses while the ADSL uplink is busy (Fig. 1)",
        run=_problem_run,
        figures=_problem_figures,
    )
)



# --- the shared traffic of adsl-linksharing, adsl-ackfifo and adsl-atm ------------------

UPLOADS = ["up_good", "up_default", "up_bad"]
LINE_BPS = 512_000.0
OAM_ONE_IN = 27


def _mix_measure(res: Results) -> dict[str, float]:
    """Downstream, uploads, probe RTTs and queue delays of one run of the shared mix."""
    t0, t1 = window(res)
    return {
        "down": goodput_mbps(res, "down", t0, t1),
        "up": sum(goodput_mbps(res, f, t0, t1) for f in UPLOADS),
        "interactive": ping_rtt_ms(res, "ping_interactive", t0),
        "ack": ping_rtt_ms(res, "ping_ack", t0),
        "good": ping_rtt_ms(res, "ping_good", t0),
        "modem": sojourn_ms(res, MODEM_UP, t0),
        "shaper": sojourn_ms(res, SHAPER, t0),
    }


def _bars_figure(out_dir: Path, metrics: Metrics, panels: list[tuple[str, str]], path: str,
                 title: str, paper: PaperData) -> Path:
    """One bar panel per metric, the paper's values marked on their bars."""
    from matplotlib.figure import Figure

    from asymlink.plot import save
    from asymlink.repro.base import draw_paper_marks

    fig = Figure(figsize=(4.0 * len(panels), 4.0), layout="constrained")
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (key, label) in zip(axes, panels, strict=True):
        d = _metric_dict(metrics, key)
        _bar(ax, list(d), list(d.values()), label)
        if draw_paper_marks(ax, paper, key, {arm: i for i, arm in enumerate(d)}):
            ax.legend(fontsize="small")
    fig.suptitle(title)
    return save(fig, out_dir / "figures" / path)


# --- adsl-linksharing ----------------------------------------------------------------------

LINKSHARING_ARMS = ["fifo", "ackprio", "htb5", "hfsc"]


def _linksharing_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    m = {a: _mix_measure(LINKSHARING.run_scenario(a, out_dir, quick)) for a in LINKSHARING_ARMS}
    metrics: dict[str, Any] = {
        "down_mbps": {a: m[a]["down"] for a in LINKSHARING_ARMS},
        "interactive_rtt_ms": {a: m[a]["interactive"] for a in LINKSHARING_ARMS},
        "ack_rtt_ms": {a: m[a]["ack"] for a in LINKSHARING_ARMS},
        "good_rtt_ms": {a: m[a]["good"] for a in LINKSHARING_ARMS},
        "up_mbps": {a: m[a]["up"] for a in LINKSHARING_ARMS},
        "modem_queue_delay_ms": {a: m[a]["modem"] for a in LINKSHARING_ARMS},
        "shaper_queue_delay_ms": {a: m[a]["shaper"] for a in LINKSHARING_ARMS},
        "down_vs_ackprio": m["htb5"]["down"] / m["ackprio"]["down"],
    }
    if not quick:
        sweep = {
            str(n): _mix_measure(
                LINKSHARING.run_scenario(
                    "fifo", out_dir, quick,
                    overrides={"links.adsl.to_b.queue.limit": f"{n}p"}, label=f"fifo_modem_{n}p",
                )
            )
            for n in PROBLEM_SWEEP
        }
        metrics["sweep_modem_buffer"] = {
            "down_mbps": {k: v["down"] for k, v in sweep.items()},
            "interactive_rtt_ms": {k: v["interactive"] for k, v in sweep.items()},
        }
    return metrics


def _linksharing_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    return [
        _bars_figure(out_dir, metrics,
                     [("down_mbps", "downstream goodput (Mbit/s)"),
                      ("interactive_rtt_ms", "interactive RTT (ms)"),
                      ("good_rtt_ms", "good-class RTT (ms)")],
                     "bars.png", "adsl-linksharing: FIFO, ACK priority, five classes (HTB, HFSC)",
                     LINKSHARING.paper_data),
        _timeseries_figure(out_dir, LINKSHARING_ARMS, "down", "downstream.png",
                           "adsl-linksharing: downstream goodput"),
    ]


LINKSHARING = register(
    Entry(
        id="adsl-linksharing",
        paper=PAPER,
        title="ACK priority vs five-class HTB link sharing on the ADSL uplink (Figs. 5-6)",
        run=_linksharing_run,
        figures=_linksharing_figures,
    )
)


# --- adsl-ackfifo --------------------------------------------------------------------------

ACKFIFO_ARMS = ["ack380", "ack190", "fifo5", "lowseq"]
ACK_RATES = {"ack380": 380e3, "ack190": 190e3, "fifo5": 190e3, "lowseq": 190e3}
ACK_LIMIT_KEY = "middleboxes.0.to_b.qdisc.classes.1.queue.limit"
ACK_LIMIT_SWEEP = [3, 5, 10, 20]


def _ackfifo_measure(res: Results, ack_rate: float) -> dict[str, float]:
    t0, t1 = window(res)
    ack = queue_row(res, f"{SHAPER}/ack")
    offered = float(ack["received"])
    removed = float(ack["dropped"]) + float(ack["filtered"])
    # The cells the pure ACKs took on the line (all of them come from the ack class), over
    # what the class's rate allows: its use of its rate.
    ack_line = ack_shares(res, MODEM_UP, LINE_BPS, OAM_ONE_IN)["uplink"] * LINE_BPS
    fs = res.flow_summary.set_index("flow")
    return {
        "down": goodput_mbps(res, "down", t0, t1),
        "removed": removed,
        "share": removed / offered if offered else 0.0,
        "use": ack_line / ack_rate,
        "ack_rtt": ping_rtt_ms(res, "ping_ack", t0),
        "retx": float(cast(float, fs.loc["down", "retransmits"])),
    }


def _ackfifo_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    m = {a: _ackfifo_measure(ACKFIFO.run_scenario(a, out_dir, quick), ACK_RATES[a])
         for a in ACKFIFO_ARMS}
    ref = m["ack380"]["down"]
    metrics: dict[str, Any] = {
        "down_mbps": {a: m[a]["down"] for a in ACKFIFO_ARMS},
        "acks_removed": {a: m[a]["removed"] for a in ACKFIFO_ARMS},
        "ack_removed_share": {a: m[a]["share"] for a in ACKFIFO_ARMS},
        "down_ratio": {a: m[a]["down"] / ref for a in ACKFIFO_ARMS if a != "ack380"},
        "ack_class_use": {a: m[a]["use"] for a in ACKFIFO_ARMS},
        "ack_rtt_ms": {a: m[a]["ack_rtt"] for a in ACKFIFO_ARMS},
        "retransmits": {a: m[a]["retx"] for a in ACKFIFO_ARMS},
    }
    if not quick:
        metrics["sweep_ack_limit"] = {
            arm: {
                str(n): _ackfifo_measure(
                    ACKFIFO.run_scenario(arm, out_dir, quick,
                                         overrides={ACK_LIMIT_KEY: f"{n}p"},
                                         label=f"{arm}_limit_{n}p"),
                    ACK_RATES[arm],
                )["down"]
                for n in ACK_LIMIT_SWEEP
            }
            for arm in ("fifo5", "lowseq")
        }
    return metrics


def _ackfifo_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    return [
        _bars_figure(out_dir, metrics,
                     [("down_mbps", "downstream goodput (Mbit/s)"),
                      ("ack_removed_share", "ACKs removed (fraction)")],
                     "bars.png", "adsl-ackfifo: a slower ack class and ACK drop policies",
                     ACKFIFO.paper_data),
        _timeseries_figure(out_dir, ACKFIFO_ARMS, "down", "downstream.png",
                           "adsl-ackfifo: downstream goodput"),
    ]


ACKFIFO = register(
    Entry(
        id="adsl-ackfifo",
        paper=PAPER,
        title="Ack class at half rate, a 5-packet ack FIFO, lowest-sequence ACK drop (Fig. 7)",
        run=_ackfifo_run,
        figures=_ackfifo_figures,
    )
)


# --- adsl-atm ------------------------------------------------------------------------------

ATM_ARMS = ["ip", "fixed", "exact"]
CELL_ARMS = {"llc_snap": "cells_llc", "vc_mux": "cells_vcmux"}


def _atm_run(out_dir: Path, quick: bool) -> dict[str, Any]:
    runs = {a: ATM.run_scenario(a, out_dir, quick) for a in ATM_ARMS}
    m = {a: _mix_measure(r) for a, r in runs.items()}
    shares = {a: ack_shares(r, MODEM_UP, LINE_BPS, OAM_ONE_IN) for a, r in runs.items()}
    metrics: dict[str, Any] = {
        "modem_queue_delay_ms": {a: m[a]["modem"] for a in ATM_ARMS},
        "shaper_queue_delay_ms": {a: m[a]["shaper"] for a in ATM_ARMS},
        "interactive_rtt_ms": {a: m[a]["interactive"] for a in ATM_ARMS},
        "down_mbps": {a: m[a]["down"] for a in ATM_ARMS},
        "uplink_use": {a: shares[a]["use"] for a in ATM_ARMS},
        "ack_uplink_share": {a: shares[a]["uplink"] for a in ATM_ARMS},
        "ack_overhead_share": {a: shares[a]["overhead"] for a in ATM_ARMS},
        "ack_overhead_fraction": {
            a: shares[a]["overhead"] / shares[a]["uplink"] if shares[a]["uplink"] else 0.0
            for a in ATM_ARMS
        },
        "ack_cells": {},
        "data_cells": {},
    }
    for key, arm in CELL_ARMS.items():
        res = ATM.run_scenario(arm, out_dir, quick)
        up, down = queue_row(res, MODEM_UP), queue_row(res, MODEM_DOWN)
        metrics["ack_cells"][key] = float(up["tx_pure_ack_wire_bytes"]) / float(
            up["tx_pure_acks"]) / 53
        metrics["data_cells"][key] = float(down["tx_wire_bytes"]) / float(down["tx_packets"]) / 53
    if not quick:
        metrics["sweep_modem_buffer"] = {
            "modem_queue_delay_ms": {
                str(n): _mix_measure(
                    ATM.run_scenario("ip", out_dir, quick,
                                     overrides={"links.adsl.to_b.queue.limit": f"{n}p"},
                                     label=f"ip_modem_{n}p")
                )["modem"]
                for n in PROBLEM_SWEEP
            }
        }
    return metrics


def _atm_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from asymlink.analysis import INTERVAL_DRAWSTYLE
    from asymlink.plot import new_axes, save

    ax = new_axes()
    for name, res in _load_runs(out_dir, ATM_ARMS).items():
        q = res.queues[res.queues["queue"] == MODEM_UP].sort_values("t")
        # sojourn_ms: mean over the packets that left in the interval ending at t
        ax.plot(q["t"], q["sojourn_ms"], label=name, drawstyle=INTERVAL_DRAWSTYLE)
    ax.set_xlabel("time (s)")
    ax.set_ylabel("modem uplink queue delay (ms)")
    ax.set_title("adsl-atm: the queue hidden in the modem")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    return [
        save(ax.figure, out_dir / "figures" / "modem_queue.png"),
        _bars_figure(out_dir, metrics,
                     [("modem_queue_delay_ms", "modem queue delay (ms)"),
                      ("ack_uplink_share", "ACK share of the line"),
                      ("ack_overhead_share", "ACK overhead share of the line")],
                     "bars.png", "adsl-atm: IP size vs fixed overhead vs exact cells",
                     ATM.paper_data),
    ]


ATM = register(
    Entry(
        id="adsl-atm",
        paper=PAPER,
        title="ATM overhead accounting in the shaper and the hidden modem queue (Fig. 8, §III-D)",
        run=_atm_run,
        figures=_atm_figures,
    )
)

__all__ = [
    "ACKFIFO",
    "ATM",
    "LINKSHARING",
    "PROBLEM",
    "ack_shares",
    "goodput_mbps",
    "ping_rtt_ms",
    "queue_row",
    "sojourn_ms",
]

