"""`ackdelay-satellite`: ACK delay control ("Fast TCP") over a satellite link, Wu et al.
§4–5 (OPNET simulation).

One bulk transfer over 150 Mbit/s · 30 Mbit/s (130 ms) · 150 Mbit/s, MSS 536, 1 MB window
and initial ssthresh, router buffers of 1 MB and 250 KB; Fast TCP on the router next to
the sender, off (plain FIFO), on (the paper's fixed 50 KB threshold and leak rate) and
self-tuned (`auto`). Metrics (from the simulation's output only):

* `max_forward_queue_bytes.<buf>.<arm>` — peak backlog of the router's queue toward the
  satellite (the discipline's own maximum, not a sample);
* `forward_drops.<buf>.<arm>` — packets that queue dropped;
* `delivered_bytes.<buf>.<arm>` — bytes delivered to the receiving application;
* `max_backward_queue_bytes`, `max_total_buffer_bytes` (forward + backward, from the 10 ms
  samples), `timeouts`, `throughput_mbps` — the same keys.

`<buf>` is `1MB` or `250KB`, `<arm>` `off`, `on` or `auto`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from asymlink.repro.base import Entry, Metrics, draw_paper_values, register
from asymlink.results import Results

BUFFERS = {"1MB": "1mb", "250KB": "250kb"}
ARMS = ("off", "on", "auto")
FORWARD = "sat:to_b"  # r1 -> r2: the data toward the satellite
BACKWARD = "ground1:to_a"  # r1 -> source: the ACKs back to the sender
MSS = 536


def _row(summary: pd.DataFrame, key: str, value: str) -> pd.Series:
    rows = summary[summary[key] == value]
    if rows.empty:
        raise KeyError(f"no {key} {value!r} in the results")
    return rows.iloc[0]


def _series(results: Results, queue: str) -> pd.Series:
    q = results.queues
    return q[q["queue"] == queue].set_index("t")["bytes"].sort_index()


def _metrics_of(results: Results) -> dict[str, float]:
    qs, fs = results.queue_summary, results.flow_summary
    fwd, back = _row(qs, "queue", FORWARD), _row(qs, "queue", BACKWARD)
    flow = _row(fs, "flow", "bulk")
    total = _series(results, FORWARD).add(_series(results, BACKWARD), fill_value=0)
    duration = float(results.meta["duration_s"])
    return {
        "max_forward_queue_bytes": int(fwd["max_backlog_bytes"]),
        "forward_drops": int(fwd["dropped"]),
        "delivered_bytes": int(flow["bytes_delivered"]),
        "max_backward_queue_bytes": int(back["max_backlog_bytes"]),
        "max_total_buffer_bytes": int(total.max()),
        "timeouts": int(flow["timeouts"]),
        "throughput_mbps": float(flow["bytes_delivered"]) * 8 / duration / 1e6,
    }


def _run(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, dict[str, dict[str, float]]] = {}
    for buf, stem in BUFFERS.items():
        for arm in ARMS:
            results = ENTRY.run_scenario(f"{stem}-{arm}", out_dir, quick)
            for key, value in _metrics_of(results).items():
                metrics.setdefault(key, {}).setdefault(buf, {})[arm] = value
    return metrics


# --- figures ----------------------------------------------------------------------------

LABELS = {"off": "without Fast TCP", "on": "Fast TCP (50 KB)", "auto": "Fast TCP (auto)"}
STYLES = {"off": "-", "on": "-", "auto": ":"}


def _load(out_dir: Path, buf: str, arm: str) -> Results:
    return Results.load(out_dir / "runs" / f"{BUFFERS[buf]}-{arm}")


def _queue_series(results: Results, queue: str, column: str = "bytes") -> pd.Series:
    q = results.queues
    return q[q["queue"] == queue].set_index("t")[column].sort_index()


def _figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    runs = {(buf, arm): _load(out_dir, buf, arm) for buf in BUFFERS for arm in ARMS}
    written = []

    def panel_figure(rows: int) -> tuple[Figure, Any]:
        fig = Figure(figsize=(9.0, 2.8 * rows), layout="constrained")
        return fig, fig.subplots(rows, 1, sharex=True, squeeze=False)[:, 0]

    # Figures 4-5: cwnd, forward and backward queues, 1 MB buffer.
    for buf in BUFFERS:
        fig, axes = panel_figure(3)
        for arm in ARMS:
            r = runs[(buf, arm)]
            f = r.flows[r.flows["flow"] == "bulk"].sort_values("t")
            kw = {"label": LABELS[arm], "linestyle": STYLES[arm], "drawstyle": "steps-post"}
            axes[0].plot(f["t"], f["cwnd_bytes"] / 1e3, **kw)
            fwd = _queue_series(r, FORWARD)
            axes[1].plot(fwd.index, fwd / 1e3, **kw)
            back = _queue_series(r, BACKWARD)
            axes[2].plot(back.index, back / 1e3, **kw)
        axes[0].set_ylabel("cwnd (KB)")
        axes[1].set_ylabel("forward queue (KB)")
        axes[1].axhline(50, color="grey", linewidth=0.8, linestyle="--")
        draw_paper_values(axes[1], ENTRY.paper_data, f"max_forward_queue_bytes.{buf}", 1e-3,
                          "KB")
        axes[2].set_ylabel("backward (ACK) queue (KB)")
        axes[2].set_xlabel("time (s)")
        axes[0].legend(fontsize="small")
        axes[0].set_title(
            f"{buf} buffer: congestion window and the router's queues (paper Fig. 4-5, 7)"
        )
        for ax in axes:
            ax.grid(alpha=0.3)
        written.append(save(fig, out_dir / "figures" / f"cwnd_queues_{BUFFERS[buf]}.png"))

    # Figures 8-10 for the 250 KB buffer: total buffer, segments received, ACKs received.
    fig, axes = panel_figure(3)
    for arm in ARMS:
        r = runs[("250KB", arm)]
        kw = {"label": LABELS[arm], "linestyle": STYLES[arm], "drawstyle": "steps-post"}
        total = _queue_series(r, FORWARD).add(_queue_series(r, BACKWARD), fill_value=0)
        axes[0].plot(total.index, total / 1e3, **kw)
        f = r.flows[r.flows["flow"] == "bulk"].sort_values("t")
        axes[1].plot(f["t"], f["bytes_delivered"] / MSS, **kw)
        acks = _queue_series(r, BACKWARD, "dequeued")
        axes[2].plot(acks.index, acks, **kw)
    axes[0].set_ylabel("total buffer (KB)")
    axes[1].set_ylabel("segments received")
    axes[2].set_ylabel("ACKs received by source")
    axes[2].set_xlabel("time (s)")
    axes[0].legend(fontsize="small")
    axes[0].set_title(
        "250 KB buffer: total buffer occupancy, segments and ACKs received (paper Fig. 8-10)"
    )
    for ax in axes:
        ax.grid(alpha=0.3)
    written.append(save(fig, out_dir / "figures" / "buffer_segments_acks_250kb.png"))
    return written


ENTRY = register(
    Entry(
        id="ackdelay-satellite",
        paper="ack-delay-control-satellite",
        title="ACK delay control over a satellite link (simulation, §4-5)",
        run=_run,
        figures=_figures,
    )
)
