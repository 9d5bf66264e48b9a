"""`ackdelay-router`: ACK delay control in a user-space router, Wu et al. §6 (Tables 2-3).

The paper's router forwards one packet from each direction per tick; "20 packets/s" is
10 per direction. Scenarios: one connection (MSS 256, 17 KB windows, forward queue 45,
threshold 42, interval 0.1 s, 50 s) and four connections started 0.5 s apart (MSS 1440,
queue 30, threshold 25, interval 0.05 s, 15 s each), each off / on (the paper's delay
algorithm) / auto (self-tuned), on the packet-clocked router and, as a variant, on a plain
rate-limited line. Metrics (from the simulation's output only):

* `throughput_kbps.<case>.<arm>` — `single`, `single_link`: bytes delivered in the 50 s
  run; `multi_total`, `multi_total_link`: the sum over the four connections of the bytes
  each delivered during its own 15 s, per second (as netperf reports per connection and
  the paper's Table 3 sums);
* `throughput_kbps.multi_conn.<arm>.<connN>` — per connection;
* `fairness_index.<multi|multi_link>.<arm>` — Jain's index of the four throughputs;
* `forward_drops`, `max_forward_queue_packets`, `max_ack_queue_packets`, `timeouts` —
  `<case>.<arm>` with `<case>` `single`, `single_link`, `multi`, `multi_link`;
* full runs only: `sensitivity.<name>.<metric>` — the single case with delayed ACKs (d = 2),
  and with the shaper's default 200 ms delay bound instead of 5 s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from asymlink.analysis import jain_index
from asymlink.repro.base import Entry, Metrics, draw_paper_values, register
from asymlink.results import Results

FORWARD = "wan:to_b"  # router -> dest: the data
BACKWARD = "lan:to_a"  # router -> source: the ACKs
CONN_SPAN_S = 15.0  # each connection of the multi case runs 15 s (netperf -l 15)

RUNS = {
    # metric case -> (scenario stem, arms)
    "single": ("single", ("off", "on", "auto")),
    "single_link": ("single-link", ("off", "on")),
    "multi": ("multi", ("off", "on", "auto")),
    "multi_link": ("multi-link", ("off", "on")),
}


def _queue(results: Results, name: str, column: str) -> int:
    qs = results.queue_summary
    return int(qs.loc[qs["queue"] == name, column].iloc[0])


def _delivered_at(results: Results, flow: str, t: float) -> float:
    f = results.flows[results.flows["flow"] == flow].sort_values("t")
    return float(np.interp(t, f["t"].to_numpy(float), f["bytes_delivered"].to_numpy(float)))


def _seconds(text: str) -> float:
    """A scenario duration such as "0.5s" or "250ms" in seconds."""
    for unit, scale in (("ms", 1e-3), ("s", 1.0)):
        if text.endswith(unit):
            return float(text[: -len(unit)]) * scale
    raise ValueError(f"unsupported duration {text!r}")


def _conn_throughputs(results: Results, scenario: str, quick: bool) -> dict[str, float]:
    """kbit/s of each connection over its own 15 s, from its start time in the scenario."""
    flows = ENTRY.scenario(scenario, quick).data["flows"]
    out = {}
    for f in flows:
        start = _seconds(f.get("start", "0s"))
        delivered = _delivered_at(results, f["name"], start + CONN_SPAN_S)
        out[f["name"]] = delivered * 8 / CONN_SPAN_S / 1e3
    return out


def _case_metrics(case: str, results: Results) -> dict[str, float]:
    m: dict[str, float] = {
        "forward_drops": _queue(results, FORWARD, "dropped"),
        "max_forward_queue_packets": _queue(results, FORWARD, "max_backlog_packets"),
        "max_ack_queue_packets": _queue(results, BACKWARD, "max_backlog_packets"),
        "timeouts": int(results.flow_summary["timeouts"].sum()),
    }
    if case.startswith("single"):
        delivered = float(results.flow_summary["bytes_delivered"].sum())
        m["throughput_kbps"] = delivered * 8 / float(results.meta["duration_s"]) / 1e3
    return m


def _run(out_dir: Path, quick: bool) -> dict[str, Any]:
    metrics: dict[str, Any] = {}

    def put(key: str, case: str, arm: str, value: Any) -> None:
        metrics.setdefault(key, {}).setdefault(case, {})[arm] = value

    for case, (stem, arms) in RUNS.items():
        for arm in arms:
            results = ENTRY.run_scenario(f"{stem}-{arm}", out_dir, quick)
            for key, value in _case_metrics(case, results).items():
                put(key, case, arm, value)
            if case.startswith("multi"):
                per_conn = _conn_throughputs(results, f"{stem}-{arm}", quick)
                total_key = "multi_total" if case == "multi" else "multi_total_link"
                put("throughput_kbps", total_key, arm, sum(per_conn.values()))
                put("fairness_index", case, arm, jain_index(list(per_conn.values())))
                if case == "multi":
                    metrics["throughput_kbps"].setdefault("multi_conn", {})[arm] = per_conn
    if not quick:
        sweep: dict[str, tuple[dict[str, Any], tuple[str, ...]]] = {
            # receivers acknowledging every second segment (4.4BSD's delayed ACK)
            "single_d2": ({"tcp.delayed_ack": 2, "tcp.delack_timeout": "200ms"}, ("off", "on")),
            # the shaper's default delay bound instead of the 5 s the scenario fixes
            "single_bound_200ms": ({"middleboxes.0.to_a.qdisc.max_delay": "200ms"}, ("on",)),
        }
        for name, (overrides, arms) in sweep.items():
            for arm in arms:
                results = ENTRY.run_scenario(
                    f"single-{arm}", out_dir, quick, overrides, label=f"{name}-{arm}"
                )
                for key, value in _case_metrics("single", results).items():
                    metrics.setdefault("sensitivity", {}).setdefault(name, {}).setdefault(key, {})[
                        arm
                    ] = value
    return metrics


# --- figures ----------------------------------------------------------------------------

LABELS = {"off": "without Fast TCP", "on": "Fast TCP", "auto": "Fast TCP (auto)"}


def _figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    written = []
    for case, title in (
        ("single", "one connection (paper Fig. 12-14)"),
        ("multi", "four connections (paper Fig. 16-18)"),
    ):
        fig = Figure(figsize=(9.0, 8.0), layout="constrained")
        axes = fig.subplots(3, 1, sharex=True)
        for arm in RUNS[case][1]:
            r = Results.load(out_dir / "runs" / f"{case}-{arm}")
            q = r.queues[r.queues["queue"] == FORWARD].sort_values("t")
            kw = {"label": LABELS[arm], "drawstyle": "steps-post"}
            axes[0].plot(q["t"], q["drops"], **kw)
            axes[1].plot(q["t"], q["packets"], **kw)
            axes[2].plot(q["t"], q["dequeued"], **kw)
        axes[0].set_ylabel("packets dropped")
        axes[1].set_ylabel("forward queue (packets)")
        axes[2].set_ylabel("packets forwarded")
        axes[2].set_xlabel("time (s)")
        axes[0].legend(fontsize="small")
        axes[0].set_title(f"Packet-clocked router, {title}")
        draw_paper_values(axes[0], ENTRY.paper_data, f"forward_drops.{case}")
        for ax in axes:
            ax.grid(alpha=0.3)
        written.append(save(fig, out_dir / "figures" / f"router_{case}.png"))
    # Figure 15: throughput of each connection.
    per_conn = metrics["throughput_kbps"]
    assert isinstance(per_conn, dict)
    conns = per_conn.get("multi_conn", {})
    assert isinstance(conns, dict)
    fig = Figure(figsize=(8.0, 4.0), layout="constrained")
    ax = fig.add_subplot()
    names = sorted(next(iter(conns.values())))  # type: ignore[arg-type]
    width = 0.8 / max(len(conns), 1)
    for i, (arm, values) in enumerate(conns.items()):
        assert isinstance(values, dict)
        xs = [k + i * width for k in range(len(names))]
        heights = [v for n in names if isinstance(v := values[n], int | float)]
        ax.bar(xs, heights, width=width, label=LABELS[arm])
    ax.set_xticks([k + width * (len(conns) - 1) / 2 for k in range(len(names))], names)
    ax.set_xlabel("connection")
    ax.set_ylabel("throughput (kbit/s)")
    ax.set_title("Throughput of each connection (paper Fig. 15)")
    ax.legend(fontsize="small")
    ax.grid(alpha=0.3, axis="y")
    written.append(save(fig, out_dir / "figures" / "router_multi_throughput.png"))
    return written


ENTRY = register(
    Entry(
        id="ackdelay-router",
        paper="ack-delay-control-satellite",
        title="ACK delay control in a user-space router (§6, Tables 2-3)",
        run=_run,
        figures=_figures,
    )
)
