"""The ACK-filtering reproductions (Barakat & Altman, "On ACK filtering on a slow reverse
channel"): `ackfilter-threshold` (§2.4, figures 4-6), `ackfilter-delayed` (§3, figures
7-9) and `ackfilter-multi` (§4, figures 11-12).

Every metric is computed from the runs' own tables (flows, queues, links, measurements,
summaries); the scenario files come from `ackfilter_gen.py`, and each entry's
`paper.toml` holds the paper's values, the expected orderings and the reasons for every
parameter the paper leaves open.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any, cast

import numpy as np
import pandas as pd

from asymlink.repro.base import Entry, Metrics, draw_paper_values, get, register
from asymlink.results import Results

#: The reverse buffer (the client's queue onto the 100 kbit/s channel) and the sender's
#: egress in the single-connection topology.
REVERSE = "access:to_a"
SENDER = "core:to_b"
#: The reverse buffer in the multi-source topology.
MULTI_REVERSE = "sat:to_a"

# --- helpers on result tables -----------------------------------------------------------


def _flow(res: Results) -> pd.DataFrame:
    """The single connection's time series, indexed by time."""
    f = res.flows
    rows: pd.DataFrame = f[f["flow"] == f["flow"].iloc[0]]
    return rows.sort_values("t").set_index("t")


def _queue(res: Results, name: str) -> pd.DataFrame:
    q = res.queues
    return q[q["queue"] == name].sort_values("t").set_index("t")


def _at(series: pd.Series, t: float) -> float:
    """The value of a sampled series at time `t` (the last sample at or before it)."""
    return float(cast(float, series.asof(t)))


def _summary(res: Results, name: str) -> pd.Series:
    qs = res.queue_summary
    return qs[qs["queue"] == name].iloc[0]


def sending_rate(res: Results, interval: float = 0.2) -> pd.Series:
    """Transmission rate (bit/s) of the single connection through the forward path,
    averaged over `interval` (the paper's figure 5 uses 200 ms), indexed by the end of
    each interval. Measured where the data arrives (bytes delivered to the receiver), so
    bursts the sender hands to its own link queue do not count above the link rate."""
    f = _flow(res)
    end = float(f.index.max())
    grid = np.arange(interval, end + 1e-9, interval)
    sent = np.interp(grid, f.index.to_numpy(), f["bytes_delivered"].to_numpy(dtype=float))
    prev = np.concatenate([[0.0], sent[:-1]])
    return pd.Series((sent - prev) * 8 / interval, index=grid)


def first_time(series: pd.Series, predicate: Any) -> float | None:
    """The first sample time where `predicate(value)` holds."""
    hit = series[predicate(series)]
    return None if hit.empty else float(hit.index[0])


def _parallel_runs(jobs: list[tuple[str, str, str, bool, dict[str, Any], str]]) -> list[Any]:
    """Run `(entry, scenario, out_dir, quick, overrides, label)` jobs in a local process
    pool (two workers at most: the machine is shared); each returns `_multi_summary`."""
    workers = max(1, min(2, os.cpu_count() or 1))
    if workers == 1 or len(jobs) < 4:
        return [_run_job(j) for j in jobs]
    with ProcessPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(_run_job, jobs, chunksize=1))


def _run_job(job: tuple[str, str, str, bool, dict[str, Any], str]) -> dict[str, float]:
    entry_id, name, out_dir, quick, overrides, label = job
    res = get(entry_id).run_scenario(name, Path(out_dir), quick, overrides, label)
    return _multi_summary(res)


# --- ackfilter-threshold ----------------------------------------------------------------

#: metric key -> scenario file (without .toml)
THRESHOLD_ARMS = {
    "none": "none",
    "1": "delta-1",
    "3": "delta-3",
    "30": "delta-30",
    "100": "delta-100",
    "500": "delta-500",
    "delayed": "delayed",
}


def measured_delta_o(res: Results) -> dict[str, float]:
    """Eq. (1), δ_o = μ_r·T/(d+1), with every quantity taken from a run: μ_r from the
    reverse channel's rate and the mean size of the ACKs it carried, T from the smallest
    smoothed RTT the sender measured, d from data segments sent per ACK offered to the
    reverse buffer."""
    rev = _summary(res, REVERSE)
    fwd = _summary(res, SENDER)
    ack_size = float(rev["dequeued_bytes"]) / float(rev["dequeued"])
    mu_r = float(rev["rate_bps"]) / (8 * ack_size)
    t = float(_flow(res)["srtt_ms"].min()) / 1e3
    d = float(fwd["dequeued"]) / float(rev["received"])
    return {"mu_r": mu_r, "T": t, "d": d, "delta_o": mu_r * t / (d + 1)}


def _threshold_run(out_dir: Path, quick: bool) -> Metrics:
    runs = {k: THRESHOLD.run_scenario(name, out_dir, quick) for k, name in THRESHOLD_ARMS.items()}
    eq1 = measured_delta_o(runs["none"])
    m: dict[str, Any] = {
        "delta_o": eq1["delta_o"],
        "eq1": {"mu_r_acks_per_s": eq1["mu_r"], "T_s": eq1["T"], "d": eq1["d"]},
        "acked_bytes_at_10s": {},
        "cwnd_at_2s": {},
        "cwnd_ratio_at_2s": {},
        "peak_rate_bps": {},
        "queue_reaches_delta_s": {},
        "rtt_converged_s": {},
        "rtt_at_10s_ms": {},
    }
    for k, res in runs.items():
        f = _flow(res)
        m["acked_bytes_at_10s"][k] = _at(f["bytes_acked"], 10.0)
        m["cwnd_at_2s"][k] = _at(f["cwnd_bytes"], 2.0)
        m["peak_rate_bps"][k] = float(sending_rate(res).max())
        m["rtt_at_10s_ms"][k] = _at(f["srtt_ms"], 10.0)
    for k in ("100", "500"):
        m["cwnd_ratio_at_2s"][k] = m["cwnd_at_2s"][k] / m["cwnd_at_2s"]["30"]
    # "The stabilization of RTT takes a long time for large δ (around 5 s for δ = 500)":
    # RTT stops growing once δ ACKs are always present in the reverse buffer.
    # The sender's smoothed RTT converges to T + δ/μ_r; we take the first time it is within
    # 5 % of that limit. The reverse buffer itself first holds δ ACKs earlier.
    for k in ("30", "100", "500"):
        q = _queue(runs[k], REVERSE)["packets"]
        t = first_time(q, lambda s, d=int(k): s >= d)
        if t is not None:
            m["queue_reaches_delta_s"][k] = t
        limit_ms = (eq1["T"] + int(k) / eq1["mu_r"]) * 1e3
        t = first_time(_flow(runs[k])["srtt_ms"], lambda s, lim=limit_ms: s >= 0.95 * lim)
        if t is not None:
            m["rtt_converged_s"][k] = t
    if not quick:
        # Sensitivity: the sender-side buffer, the one open parameter that can end slow
        # start (by loss) within the 10 s.
        sens: dict[str, float] = {}
        for k in ("1", "30", "500", "delayed"):
            r = THRESHOLD.run_scenario(
                THRESHOLD_ARMS[k], out_dir, quick, {"links.core.queue.limit": "300p"},
                label=f"sensitivity-fwd300p-{THRESHOLD_ARMS[k]}")
            sens[k] = _at(_flow(r)["bytes_acked"], 10.0)
        m["sensitivity_fwd_buffer_300p_acked_bytes_at_10s"] = sens
    return m


def _load_runs(out_dir: Path, names: Iterable[str]) -> dict[str, Results]:
    return {n: Results.load(out_dir / "runs" / n) for n in names}


def _threshold_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from asymlink.plot import new_axes, save

    runs = _load_runs(out_dir, THRESHOLD_ARMS.values())
    label = {k: ("no filtering" if k == "none" else "delayed" if k == "delayed" else f"δ = {k}")
             for k in THRESHOLD_ARMS}
    figs = []
    ax = new_axes()
    for k, name in THRESHOLD_ARMS.items():
        f = _flow(runs[name])
        ax.plot(f.index, f["cwnd_bytes"] / 1000, label=label[k])
    ax.set(xlabel="time (s)", ylabel="congestion window (segments of 1000 B)",
           title="Fig. 4: TCP window vs time", xlim=(0, 10))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    figs.append(save(ax.figure, out_dir / "figures" / "fig4-window.png"))
    ax = new_axes()
    for k, name in THRESHOLD_ARMS.items():
        r = sending_rate(runs[name])
        ax.plot(r.index, r / 1e3, label=label[k], drawstyle="steps-pre")
    ax.set(xlabel="time (s)", ylabel="transmission rate (kbit/s, 200 ms averages)",
           title="Fig. 5: transmission rate vs time", xlim=(0, 10))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    figs.append(save(ax.figure, out_dir / "figures" / "fig5-rate.png"))
    ax = new_axes()
    for k, name in THRESHOLD_ARMS.items():
        f = _flow(runs[name])
        ax.plot(f.index, f["bytes_acked"] / 1000, label=label[k])
    ax.set(xlabel="time (s)", ylabel="last acknowledged sequence (segments)",
           title="Fig. 6: last acknowledged sequence number vs time", xlim=(0, 10))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    figs.append(save(ax.figure, out_dir / "figures" / "fig6-acked.png"))
    return figs


THRESHOLD = register(Entry(
    id="ackfilter-threshold",
    paper="ack-filtering-slow-reverse-channel",
    title="ACK filtering threshold δ: slow start against RTT (§2.4, figs. 4-6)",
    run=_threshold_run,
    figures=_threshold_figures,
))


# --- ackfilter-delayed ------------------------------------------------------------------

DELAYED_ARMS = {
    "none": "none",
    "delta_o": "static-delta-o",
    "estimated": "static-estimated",
    "delayed": "delayed",
    "presence": "delayed-presence",
}


def _delayed_run(out_dir: Path, quick: bool) -> Metrics:
    runs = {k: DELAYED.run_scenario(name, out_dir, quick) for k, name in DELAYED_ARMS.items()}
    m: dict[str, Any] = {
        "acked_bytes_at_10s": {},
        "filter_start_s": {},
        "max_reverse_queue": {},
        "mean_reverse_queue_after_5s": {},
        "rtt_at_10s_ms": {},
        "filtered": {},
    }
    for k, res in runs.items():
        f = _flow(res)
        q = _queue(res, REVERSE)
        m["acked_bytes_at_10s"][k] = _at(f["bytes_acked"], 10.0)
        m["max_reverse_queue"][k] = float(q["packets"].max())
        m["mean_reverse_queue_after_5s"][k] = float(q.loc[q.index >= 5.0, "packets"].mean())
        m["rtt_at_10s_ms"][k] = _at(f["srtt_ms"], 10.0)
        m["filtered"][k] = float(_summary(res, REVERSE)["filtered"])
        t = first_time(q["filtered"], lambda s: s > 0)
        if t is not None:
            m["filter_start_s"][k] = t
    acked = m["acked_bytes_at_10s"]
    m["delayed_vs_delta_o"] = acked["delayed"] / acked["delta_o"]
    m["presence_vs_delayed"] = acked["presence"] / acked["delayed"]
    starts = m["filter_start_s"]
    if "delayed" in starts and "delta_o" in starts:
        m["filter_start_gap_s"] = abs(starts["delayed"] - starts["delta_o"])
    # The δ the online estimator settled on shows as the reverse queue it holds once
    # filtering runs: the median over the last 3 s.
    packets = _queue(runs["estimated"], REVERSE)["packets"]
    m["estimated_delta"] = float(packets[packets.index >= 7.0].median())
    m["delta_o"] = measured_delta_o(runs["none"])["delta_o"]
    m["estimated_delta_vs_delta_o"] = m["estimated_delta"] / m["delta_o"]
    if not quick:
        # Sensitivity: the two open parameters of delayed filtering, the TSW window
        # ("in the same order as RTT") and the utilization threshold (90 %).
        sens: dict[str, float] = {}
        for w in ("100ms", "400ms"):
            for u in (0.8, 0.95):
                key = f"window_{w}_util_{round(u * 100)}"
                r = DELAYED.run_scenario(
                    "delayed", out_dir, quick,
                    {"links.access.to_a.queue.window": w, "links.access.to_a.queue.utilization": u},
                    label=f"sensitivity-{key}")
                sens[key] = _at(_flow(r)["bytes_acked"], 10.0) / acked["delta_o"]
        m["sensitivity_delayed_vs_delta_o"] = sens
    return m


def _delayed_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from asymlink.plot import new_axes, save

    runs = _load_runs(out_dir, DELAYED_ARMS.values())
    label = {"none": "no filtering", "delta_o": "static δ = δ_o (eq. 1)",
             "estimated": "static δ estimated online", "delayed": "delayed filtering",
             "presence": "delayed, presence (rate unknown)"}
    figs = []
    ax = new_axes()
    for k, name in DELAYED_ARMS.items():
        f = _flow(runs[name])
        ax.plot(f.index, f["bytes_acked"] / 1000, label=label[k])
    ax.set(xlabel="time (s)", ylabel="last acknowledged sequence (segments)",
           title="Fig. 7: delayed filtering against δ = δ_o", xlim=(0, 10))
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3)
    figs.append(save(ax.figure, out_dir / "figures" / "fig7-acked.png"))
    for fig, k, title in (("fig8", "delta_o", "Fig. 8: reverse buffer, static δ = δ_o"),
                          ("fig9", "delayed", "Fig. 9: reverse buffer, delayed filtering")):
        q = _queue(runs[DELAYED_ARMS[k]], REVERSE)
        ax = new_axes()
        ax.plot(q.index, q["packets"], drawstyle="steps-post")
        draw_paper_values(ax, DELAYED.paper_data, "delta_o")
        ax.set(xlabel="time (s)", ylabel="ACKs in the reverse buffer", title=title,
               xlim=(0, 10))
        ax.grid(alpha=0.3)
        figs.append(save(ax.figure, out_dir / "figures" / f"{fig}-reverse-buffer.png"))
    return figs


DELAYED = register(Entry(
    id="ackfilter-delayed",
    paper="ack-filtering-slow-reverse-channel",
    title="Delayed ACK filtering against the optimal static threshold (§3, figs. 7-9)",
    run=_delayed_run,
    figures=_delayed_figures,
))


# --- ackfilter-multi --------------------------------------------------------------------

#: The algorithms (keys of [meta.arms] in the scenario files).
MULTI_ARMS = ("none", "classic", "delayed", "perflow_fifo", "perflow_rr", "conservative")
MULTI_BUFFERS = ("large", "small")
#: N of the --quick run (the full run takes every N = 1..20).
QUICK_NS = (1, 2, 5, 10, 20)


def _multi_summary(res: Results) -> dict[str, float]:
    """What the multi entry needs from one run (small, so pool workers return it)."""
    ms = res.measurements
    tp = ms.loc[ms["metric"] == "throughput_bps", "value"]
    fs = res.flow_summary
    dur = float(res.meta["duration_s"])
    per_source = fs["bytes_delivered"].to_numpy(dtype=float) * 8 / dur
    jain = float(per_source.sum() ** 2 / (len(per_source) * (per_source**2).sum())) \
        if per_source.sum() > 0 else 0.0
    rev = _summary(res, MULTI_REVERSE)
    return {
        "mean_file_throughput_bps": float(tp.mean()) if len(tp) else 0.0,
        "files_completed": float(len(tp)),
        "goodput_bps": float(per_source.sum()),
        "fairness": jain,
        "reverse_filtered": float(rev["filtered"]),
        "reverse_dropped": float(rev["dropped"]),
    }


def _multi_jobs(out_dir: Path, quick: bool, ns: Iterable[int],
                extra: Mapping[str, Any] | None = None, tag: str = "") -> list[Any]:
    jobs = []
    for n in ns:
        name = f"n{n:02d}"
        sc = MULTI.scenario(name, quick)
        arms, buffers = sc.get("meta.arms"), sc.get("meta.buffers")
        for buf in MULTI_BUFFERS:
            for arm in MULTI_ARMS:
                queue = {**arms[arm], "limit": buffers[buf]}
                overrides = {"links.sat.to_a.queue": queue, **(extra or {})}
                label = f"{tag}{buf}-{arm}-{name}"
                jobs.append((MULTI.id, name, str(out_dir), quick, overrides, label))
    return jobs


def _multi_run(out_dir: Path, quick: bool) -> Metrics:
    ns = QUICK_NS if quick else tuple(range(1, 21))
    jobs = _multi_jobs(out_dir, quick, ns)
    results = _parallel_runs(jobs)
    keys = ("mean_file_throughput_bps", "goodput_bps", "files_completed", "fairness",
            "reverse_filtered", "reverse_dropped")
    m: dict[str, Any] = {k: {b: {a: {} for a in MULTI_ARMS} for b in MULTI_BUFFERS}
                         for k in keys}
    for job, r in zip(jobs, results, strict=True):
        buf, arm, name = job[5].split("-")
        n = str(int(name[1:]))
        for k in keys:
            m[k][buf][arm][n] = r[k]
    # Ratios the paper's statements are about.
    mft = m["mean_file_throughput_bps"]
    m["classic_vs_perflow_rr"] = {
        b: {n: mft[b]["classic"][n] / mft[b]["perflow_rr"][n] for n in mft[b]["classic"]}
        for b in MULTI_BUFFERS}
    if not quick:
        # Sensitivity: the receiver window, which decides how long the unfiltered ACK
        # queue can grow (1 MB = the `paper` profile's default instead of 64 KB).
        sjobs = _multi_jobs(out_dir, quick, (1, 5, 10, 20),
                            {"tcp": {"profile": "paper", "cc": "reno", "rcvbuf": "1MB"}},
                            tag="rcvbuf1MB_")
        sres = _parallel_runs(sjobs)
        sens: dict[str, Any] = {b: {a: {} for a in MULTI_ARMS} for b in MULTI_BUFFERS}
        for job, r in zip(sjobs, sres, strict=True):
            buf, arm, name = job[5].removeprefix("rcvbuf1MB_").split("-")
            sens[buf][arm][str(int(name[1:]))] = r["mean_file_throughput_bps"]
        m["sensitivity_rcvbuf_1MB_mean_file_throughput_bps"] = sens
    return m


def _multi_figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from asymlink.plot import new_axes, save

    figs = []
    mft = metrics["mean_file_throughput_bps"]
    assert isinstance(mft, dict)
    for fig, buf, title in (("fig11", "large", "Fig. 11: multiple connections, large buffer"),
                            ("fig12", "small", "Fig. 12: multiple connections, 10-packet buffer")):
        ax = new_axes()
        per_buf = mft[buf]
        assert isinstance(per_buf, dict)
        for arm in MULTI_ARMS:
            series = per_buf[arm]
            assert isinstance(series, dict)
            ns = sorted(series, key=int)
            ax.plot([int(n) for n in ns], [float(series[n]) / 1e3 for n in ns],  # type: ignore[arg-type]
                    marker="o", label=arm)
        ax.set(xlabel="number of sources N", ylabel="mean file throughput (kbit/s)",
               title=title)
        ax.legend(fontsize="small")
        ax.grid(alpha=0.3)
        figs.append(save(ax.figure, out_dir / "figures" / f"{fig}-{buf}-buffer.png"))
    return figs


MULTI = register(Entry(
    id="ackfilter-multi",
    paper="ack-filtering-slow-reverse-channel",
    title="ACK filtering with many connections, large and 10-packet buffers (§4, figs. 11-12)",
    run=_multi_run,
    figures=_multi_figures,
))
