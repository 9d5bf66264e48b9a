"""Receiver-based access-link management (Spring, Chesire, Berryman, Sahasranaman,
Anderson, Bershad, INFOCOM 2000), §V: three catalog entries.

* `receiver-telnet` (Figs. 2-3) — a 240 KB ftp download over a 28.8 kbit/s modem while
  the user types in telnet (BaseRTT 0.16 s), and a 106 KB download from a distant server
  (BaseRTT 0.56 s). Arms: `default` (the connection advertises its 32 KiB buffer),
  `managed` (the client host runs the policy), and for the classic case `box` (the modem
  pool rewrites the client's advertised windows). Metrics:
  `telnet_latency_s.<arm>` (median echo latency over all keystrokes of the run),
  `ftp_throughput_kBps.<arm>`, `distant_telnet_latency_s.<arm>`,
  `distant_ftp_throughput_kBps.<arm>`; also `modem_queue_packets.<arm>` and
  `modem_queue_delay_s.<arm>` (mean backlog toward the client while the download runs, in
  packets and in seconds of modem time: the queueing delay every telnet packet sees,
  which is what the paper's "4 second delay" measures), with `distant_` variants,
  `box_windows_rewritten` (segments whose window the box lowered).
* `receiver-web` (Fig. 4) — a web page during a 970 KB download. Metrics:
  `page_time_s.<arm>`, `ftp_kB_during_page.<arm>` (what the download received while the
  page loaded), `queue_drops.<arm>`.
* `receiver-loss` (Fig. 5) — two transfers 50 ms apart over 512 kbit/s, 22 ms, a
  10-packet queue, QLength_Loss = 6. Metrics: `queue_drops.<arm>`,
  `queue_packets_mean.<arm>` and `queue_packets_max.<arm>` (while both transfers run),
  `fairness_index.<arm>` (Jain's index of the two transfers' throughputs while both
  run), `completion_s.<arm>` (when the last transfer finished),
  `retransmits.<arm>`.

Full runs add `sensitivity.*`: the delay budget (QLength_Delay 0.2 s and 0.8 s) for the
classic telnet case, parallel connections (2, 6) for the web page, and a symmetric
512 kbit/s uplink for the loss case.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from asymlink.analysis import jain_index
from asymlink.repro.base import Entry, Metrics, draw_paper_values, register
from asymlink.results import Results

LINE = "line:to_b"  # the access link toward the client (the queue the policy manages)


# --- helpers ----------------------------------------------------------------------------


def _measure(results: Results, flow: str, metric: str) -> pd.Series:
    m = results.measurements
    return m[(m["flow"] == flow) & (m["metric"] == metric)]["value"].astype(float)


def _one(results: Results, flow: str, metric: str) -> float:
    values = _measure(results, flow, metric)
    if values.empty:
        raise RuntimeError(f"{flow}: no {metric} measured (the run is too short)")
    return float(values.iloc[0])


def _finished_at(results: Results, flow: str, start: float) -> float:
    return start + _one(results, flow, "transfer_time_s")


def _queue_series(results: Results, name: str = LINE) -> pd.DataFrame:
    q = results.queues
    return q[q["queue"] == name].sort_values("t")


def _between(df: pd.DataFrame, t0: float, t1: float) -> pd.DataFrame:
    return df[(df["t"] >= t0) & (df["t"] <= t1)]


def _queue_summary(results: Results, column: str, name: str = LINE) -> int:
    qs = results.queue_summary
    return int(qs.loc[qs["queue"] == name, column].iloc[0])


def _rewriter_counter(results: Results, counter: str) -> int:
    c = results.qdisc_counters
    rows = c[c["queue"].str.contains(":rewrite:rwnd") & (c["counter"] == counter)]
    return int(rows["value"].sum())


# --- receiver-telnet --------------------------------------------------------------------

MODEM_BYTES_PER_S = 28_800 / 8

TELNET_CASES = {
    # metric prefix -> (scenario stem, arms, ftp bytes, ftp start s)
    "": ("classic", ("default", "managed", "box"), 240_000, 0.0),
    "distant_": ("distant", ("default", "managed"), 106_000, 0.0),
}


def _telnet_metrics(results: Results, ftp_bytes: int, ftp_start: float) -> dict[str, float]:
    t_ftp = _one(results, "ftp", "transfer_time_s")
    queue = _between(_queue_series(results), ftp_start, ftp_start + t_ftp)
    return {
        "telnet_latency_s": float(_measure(results, "telnet", "echo_latency_s").median()),
        "ftp_throughput_kBps": ftp_bytes / t_ftp / 1e3,
        "modem_queue_packets": float(queue["packets"].mean()),
        "modem_queue_delay_s": float(queue["bytes"].mean()) / MODEM_BYTES_PER_S,
    }


def _run_telnet(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for prefix, (stem, arms, ftp_bytes, start) in TELNET_CASES.items():
        for arm in arms:
            results = TELNET.run_scenario(f"{stem}-{arm}", out_dir, quick)
            for key, value in _telnet_metrics(results, ftp_bytes, start).items():
                metrics.setdefault(prefix + key, {})[arm] = value
            if arm == "box":
                metrics["box_windows_rewritten"] = _rewriter_counter(results, "rewritten")
    if not quick:
        for budget in ("200ms", "800ms"):
            results = TELNET.run_scenario(
                "classic-managed",
                out_dir,
                quick,
                # a smaller budget may slow the download beyond the 90 s run
                {"nodes.0.rwnd_policy.qlength_delay": budget, "duration": "300s"},
                label=f"classic-managed-qdelay-{budget}",
            )
            for key, value in _telnet_metrics(results, 240_000, 0.0).items():
                metrics.setdefault("sensitivity", {}).setdefault(f"qlength_delay_{budget}", {})[
                    key
                ] = value
    return metrics


ARM_LABELS = {"default": "default receiver", "managed": "managed (host)", "box": "managed (box)"}


def _telnet_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    written = []
    for stem, arms, title in (
        ("classic", ("default", "managed", "box"), "240 KB download, BaseRTT 0.16 s (Fig. 2)"),
        ("distant", ("default", "managed"), "106 KB download, BaseRTT 0.56 s (Fig. 3)"),
    ):
        fig = Figure(figsize=(9.0, 6.0), layout="constrained")
        axes = fig.subplots(2, 1, sharex=True)
        for arm in arms:
            r = Results.load(out_dir / "runs" / f"{stem}-{arm}")
            m = r.measurements
            lat = m[(m["flow"] == "telnet") & (m["metric"] == "echo_latency_s")]
            axes[0].plot(lat["t"], lat["value"], ".", label=ARM_LABELS[arm], markersize=4)
            f = r.flows[r.flows["flow"] == "ftp"].sort_values("t")
            axes[1].plot(f["t"], f["bytes_delivered"] / 1e3, label=ARM_LABELS[arm])
        axes[0].set_ylabel("telnet echo latency (s)")
        axes[0].set_yscale("log")
        axes[1].set_ylabel("ftp received (kB)")
        axes[1].set_xlabel("time (s)")
        axes[0].set_title(f"Telnet during an ftp download over a 28.8 kbit/s modem: {title}")
        if stem == "classic":
            draw_paper_values(axes[0], TELNET.paper_data, "telnet_latency_s")
        axes[0].legend(fontsize="small")
        for ax in axes:
            ax.grid(alpha=0.3)
        written.append(save(fig, out_dir / "figures" / f"telnet_{stem}.png"))
    return written


TELNET = register(
    Entry(
        id="receiver-telnet",
        paper="receiver-based-access-link",
        title="Telnet latency during a download over a modem (Figs. 2-3)",
        run=_run_telnet,
        figures=_telnet_figures,
    )
)


# --- receiver-web -----------------------------------------------------------------------

WEB_START_S = 20.0  # the page's start in the scenario files


def _web_metrics(results: Results) -> dict[str, float]:
    page = _one(results, "web", "page_time_s")
    f = results.flows[results.flows["flow"] == "ftp"].sort_values("t")
    t = f["t"].to_numpy(float)
    got = f["bytes_delivered"].to_numpy(float)
    during = np.interp(WEB_START_S + page, t, got) - np.interp(WEB_START_S, t, got)
    return {
        "page_time_s": page,
        "ftp_kB_during_page": float(during) / 1e3,
        "queue_drops": _queue_summary(results, "dropped"),
    }


def _run_web(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for arm in ("default", "managed"):
        results = WEB.run_scenario(arm, out_dir, quick)
        for key, value in _web_metrics(results).items():
            metrics.setdefault(key, {})[arm] = value
    if not quick:
        for parallel in (2, 6):
            for arm in ("default", "managed"):
                results = WEB.run_scenario(
                    arm,
                    out_dir,
                    quick,
                    {"flows.1.app.parallel": parallel, "duration": "500s"},
                    label=f"{arm}-parallel-{parallel}",
                )
                metrics.setdefault("sensitivity", {}).setdefault(f"parallel_{parallel}", {})[
                    arm
                ] = _web_metrics(results)["page_time_s"]
    return metrics


def _web_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    fig = Figure(figsize=(9.0, 6.0), layout="constrained")
    axes = fig.subplots(2, 1, sharex=True)
    page = metrics["page_time_s"]
    assert isinstance(page, dict)
    for arm in ("default", "managed"):
        r = Results.load(out_dir / "runs" / arm)
        q = _queue_series(r)
        line = axes[0].plot(q["t"], q["packets"], drawstyle="steps-post", label=ARM_LABELS[arm])
        f = r.flows[r.flows["flow"] == "ftp"].sort_values("t")
        axes[1].plot(f["t"], f["bytes_delivered"] / 1e3, label=ARM_LABELS[arm])
        end = page[arm]
        assert isinstance(end, int | float)
        for ax in axes:
            ax.axvline(WEB_START_S + end, color=line[0].get_color(), linestyle=":")
    for ax in axes:
        ax.axvline(WEB_START_S, color="grey", linestyle=":")
    # The paper's page times, as the instants its pages would end.
    for p in WEB.paper_data.paper_values:
        if p.metric[0] == "page_time_s" and len(p.metric) == 2:
            for ax in axes:
                ax.axvline(WEB_START_S + p.value, color="black", linestyle="--", linewidth=0.8,
                           alpha=0.7)
            axes[0].annotate(f"paper: {p.metric[1]} {p.value:g} s", (WEB_START_S + p.value, 1.0),
                             xycoords=("data", "axes fraction"), xytext=(2, -12),
                             textcoords="offset points", fontsize="small")
    axes[0].set_ylabel("queue toward the client (packets)")
    axes[1].set_ylabel("ftp received (kB)")
    axes[1].set_xlabel("time (s); dotted: the page's start and ends; dashed: the paper's ends")
    axes[0].set_title("A web page during a 970 KB download over a 28.8 kbit/s modem (Fig. 4)")
    axes[0].legend(fontsize="small")
    for ax in axes:
        ax.grid(alpha=0.3)
    return [save(fig, out_dir / "figures" / "web.png")]


WEB = register(
    Entry(
        id="receiver-web",
        paper="receiver-based-access-link",
        title="Web page time during a download over a modem (Fig. 4)",
        run=_run_web,
        figures=_web_figures,
    )
)


# --- receiver-loss ----------------------------------------------------------------------

LOSS_STARTS = {"ftp1": 0.0, "ftp2": 0.05}


def _loss_metrics(results: Results) -> dict[str, float]:
    done = {f: _finished_at(results, f, s) for f, s in LOSS_STARTS.items()}
    both_from, both_to = max(LOSS_STARTS.values()), min(done.values())
    q = _between(_queue_series(results), both_from, both_to)["packets"]
    delivered = []
    for flow in LOSS_STARTS:
        f = results.flows[results.flows["flow"] == flow].sort_values("t")
        t, got = f["t"].to_numpy(float), f["bytes_delivered"].to_numpy(float)
        delivered.append(float(np.interp(both_to, t, got) - np.interp(both_from, t, got)))
    fs = results.flow_summary
    return {
        "queue_drops": _queue_summary(results, "dropped"),
        "queue_packets_mean": float(q.mean()),
        "queue_packets_max": float(q.max()),
        "fairness_index": jain_index(delivered),
        "completion_s": max(done.values()),
        "retransmits": int(fs["retransmits"].sum()),
    }


def _run_loss(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {}
    for arm in ("default", "managed"):
        results = LOSS.run_scenario(arm, out_dir, quick)
        for key, value in _loss_metrics(results).items():
            metrics.setdefault(key, {})[arm] = value
    if not quick:
        for arm in ("default", "managed"):
            results = LOSS.run_scenario(
                arm, out_dir, quick, {"links.line.to_a.rate": "512kbit"}, label=f"{arm}-uplink-512k"
            )
            m = _loss_metrics(results)
            s = metrics.setdefault("sensitivity", {}).setdefault("uplink_512kbit", {})
            s.setdefault("queue_drops", {})[arm] = m["queue_drops"]
            s.setdefault("queue_packets_mean", {})[arm] = m["queue_packets_mean"]
    return metrics


def _loss_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    fig = Figure(figsize=(10.0, 6.0), layout="constrained")
    axes = fig.subplots(2, 2, sharex=True)
    for col, arm in enumerate(("default", "managed")):
        r = Results.load(out_dir / "runs" / arm)
        for flow in LOSS_STARTS:
            f = r.flows[r.flows["flow"] == flow].sort_values("t")
            axes[0][col].plot(f["t"], f["bytes_delivered"] / 1e3, label=flow)
        q = _queue_series(r)
        axes[1][col].plot(q["t"], q["packets"], drawstyle="steps-post")
        ev = r.events
        if not ev.empty:
            drops = ev[(ev["kind"] == "drop") & (ev["where"] == LINE)]
            axes[1][col].plot(drops["t"], np.full(len(drops), -0.5), "d", markersize=4)
        axes[0][col].set_title(ARM_LABELS[arm])
        axes[0][col].set_ylabel("received (kB)")
        axes[1][col].set_ylabel("queue (packets)")
        axes[1][col].set_xlabel("time (s)")
        draw_paper_values(axes[1][col], LOSS.paper_data, f"queue_packets_mean.{arm}")
        axes[0][col].legend(fontsize="small")
        for ax in (axes[0][col], axes[1][col]):
            ax.grid(alpha=0.3)
    fig.suptitle("Two transfers over 512 kbit/s with a 10-packet queue (Fig. 5)")
    return [save(fig, out_dir / "figures" / "loss.png")]


LOSS = register(
    Entry(
        id="receiver-loss",
        paper="receiver-based-access-link",
        title="Congestion losses at a small access queue (Fig. 5)",
        run=_run_loss,
        figures=_loss_figures,
    )
)
