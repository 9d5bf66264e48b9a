"""`adsl-today`: the ADSL line of the paper with today's hosts, four ways of managing it, and
two of them with BBR senders.

An 8 Mbit/s / 512 kbit/s ATM line with deep (1000-packet) or shallow (50-packet) buffers
in the modem and the DSLAM, Linux hosts at their defaults (CUBIC, autotuned windows): a
download alone, then an upload as well, typed echoes throughout. Arms:

* `fifo`: nothing manages the line;
* `tree`: the paper's five-class uplink tree (docs/adsl.md, "A ready configuration");
* `linux`: the recipe this kernel can run — HTB with ATM size tables, u32 filters and
  pfifo leaves on the uplink, HTB on an IFB for the downlink (docs/adsl.md);
* `line`: line mode, one key for both directions;
* `fifo-bbr`, `line-bbr`: `fifo` and `line` with BBR senders (both transfers; Linux
  `tcp_bbr` set per socket in the lab, the simulator's BBR model).

The arms are the lab scenarios `today-<arm>` (python/asymlink/lab/scenarios), whose line is
the lab's `[access]` hop. The simulator runs their translation
(`asymlink.lab.parity.sim_scenario`; the `linux` arm's tc commands become the same HTB tree
in the simulator's vocabulary, `LINUX_SIM_BOX`), checked in as `scenarios/adsl-today/*.toml`
by `python -m asymlink.repro.adsl_today_gen --write` (`--check`: fail if stale, a test runs
it). The lab half needs root: `python -m asymlink.repro.adsl_today_gen --lab OUT` runs every
arm and buffer in a fresh lab and writes `OUT/lab_metrics.json`; the figure shows it
beside the simulator when it is in the entry's output directory.

Both halves compute their metrics with the same code (`window_metrics`): goodput in
Mbit/s over the `alone` window (1-12 s) and the `contended` window (16-30 s, the upload
running since 12 s), and typed-echo latency percentiles in each window. The reference
numbers are CAKE's on the same line (Debian's kernel in a VM, `../shared/anchors/cake`),
in `paper.toml`.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import tomli_w

from asymlink.lab.bench import scenario_path
from asymlink.lab.parity import sim_metrics, sim_scenario
from asymlink.lab.scenario import LabScenario
from asymlink.repro.base import Entry, Metrics, draw_paper_marks, register

ARMS = ["fifo", "tree", "linux", "line", "fifo-bbr", "line-bbr"]
BUFFERS = [50, 1000]
HERE = Path(__file__).parent / "scenarios" / "adsl-today"

#: The `linux` arm in the simulator: the tc recipe of `today-linux.toml` as the box's HTB
#: (same rates, classes, priorities, pfifo limits and cell accounting). Linux's u32 ACK
#: match (TCP under 64 bytes with only the ACK flag) is `pure_ack` here: the same packets
#: for these flows (52-byte ACKs with timestamps).
LLC = {"encap": "llc_snap_routed"}


def _fifo(n: int) -> dict[str, Any]:
    return {"kind": "fifo", "limit": f"{n}p"}


LINUX_SIM_BOX: dict[str, Any] = {
    "to_b": {
        "classifier": {"default": "bulk", "rules": [
            {"class": "ack", "match": {"pure_ack": True}},
            {"class": "interactive", "match": {"dst_port": [22]}},
            {"class": "interactive", "match": {"proto": "icmp"}},
        ]},
        "qdisc": {"kind": "htb", "default": "bulk", "linklayer": LLC, "classes": [
            {"name": "root", "rate": "490kbit"},
            {"name": "ack", "parent": "root", "rate": "245kbit", "ceil": "490kbit", "prio": 0,
             "queue": _fifo(50)},
            {"name": "interactive", "parent": "root", "rate": "49kbit", "ceil": "490kbit",
             "prio": 1, "queue": _fifo(50)},
            {"name": "bulk", "parent": "root", "rate": "196kbit", "ceil": "490kbit",
             "prio": 2, "queue": _fifo(50)},
        ]},
    },
    "to_a": {
        "classifier": {"default": "bulk", "rules": [
            {"class": "interactive", "match": {"src_port": [22]}},
            {"class": "interactive", "match": {"proto": "icmp"}},
        ]},
        "qdisc": {"kind": "htb", "default": "bulk", "linklayer": LLC, "classes": [
            {"name": "root", "rate": "7600kbit"},
            {"name": "interactive", "parent": "root", "rate": "760kbit", "ceil": "7600kbit",
             "prio": 0, "queue": _fifo(50)},
            {"name": "bulk", "parent": "root", "rate": "6840kbit", "ceil": "7600kbit",
             "prio": 1, "queue": _fifo(50)},
        ]},
    },
}


def lab_scenario(arm: str, buffer: int | None = None) -> LabScenario:
    """The lab scenario of `arm`, with both line buffers set to `buffer` packets."""
    sc = LabScenario.from_file(scenario_path(f"today-{arm}"))
    if buffer is not None:
        for d in sc.access.values():
            d["modem_buffer"] = f"{buffer}p"
    return sc


def buffer_overrides(buffer: int) -> dict[str, str]:
    """Simulator overrides that set both line buffers (uplink: `line_c.to_b`, downlink:
    `line_b.to_a`)."""
    return {"links.line_c.to_b.modem_buffer": f"{buffer}p",
            "links.line_b.to_a.modem_buffer": f"{buffer}p"}


# --- the checked-in simulator scenarios ------------------------------------------------


def generated() -> dict[str, str]:
    """The simulator scenario file of each arm (name -> TOML text)."""
    out = {}
    for arm in ARMS:
        sc = lab_scenario(arm)
        doc = sim_scenario(sc, box=copy.deepcopy(LINUX_SIM_BOX) if arm == "linux" else None)
        doc["name"] = f"adsl-today-{arm}"
        doc["description"] = f"adsl-today, arm {arm}: {sc.description}"
        head = (f"# Generated by `python -m asymlink.repro.adsl_today_gen --write` from the lab\n"
                f"# scenario today-{arm}.toml (python/asymlink/lab/scenarios); do not edit.\n")
        out[arm] = head + tomli_w.dumps(doc)
    return out


def stale() -> list[Path]:
    """Checked-in files that differ from `generated()`."""
    return [HERE / f"{n}.toml" for n, text in generated().items()
            if not (HERE / f"{n}.toml").exists()
            or (HERE / f"{n}.toml").read_text() != text]


# --- metrics -----------------------------------------------------------------------------

METRICS = {
    "down_alone_mbps": ("throughput_mbps_in", "alone", "download"),
    "down_during_upload_mbps": ("throughput_mbps_in", "contended", "download"),
    "up_mbps": ("throughput_mbps_in", "contended", "upload"),
    "echo_p90_ms": ("echo_latency_ms_in", "contended", "typing", "p90"),
    "echo_p90_alone_ms": ("echo_latency_ms_in", "alone", "typing", "p90"),
}


def _pick(m: dict[str, Any], path: tuple[str, ...]) -> float:
    node: Any = m
    for k in path:
        node = node[k]
    return float("nan") if node is None else float(node)


def summarise(per_run: dict[tuple[str, int], dict[str, Any]]) -> dict[str, Any]:
    """`{metric: {"<arm>_<buffer>p": value}}` from each run's lab-shaped metrics."""
    return {key: {f"{arm}_{buf}p": _pick(m, path) for (arm, buf), m in per_run.items()}
            for key, path in METRICS.items()}


def _run(out_dir: Path, quick: bool) -> dict[str, Any]:
    per_run = {}
    for buf in BUFFERS:
        for arm in ARMS:
            res = TODAY.run_scenario(arm, out_dir, quick, overrides=buffer_overrides(buf),
                                     label=f"{arm}_{buf}p")
            per_run[(arm, buf)] = sim_metrics(lab_scenario(arm, buf), res)
    return summarise(per_run)


def run_lab(out_dir: Path, buffers: list[int] | None = None,
            arms: list[str] | None = None) -> dict[str, Any]:
    """Every arm and buffer in one fresh lab (root); writes `lab_metrics.json` and each
    run's tables under `lab/<arm>_<buffer>p`. About 35 s per run."""
    from asymlink.lab import Lab, run_scenario

    per_run = {}
    lab = Lab.up()
    try:
        for buf in buffers or BUFFERS:
            for arm in arms or ARMS:
                per_run[(arm, buf)] = run_scenario(lab_scenario(arm, buf),
                                                   out_dir / "lab" / f"{arm}_{buf}p", lab)
    finally:
        lab.down()
    metrics = summarise(per_run)
    (out_dir / "lab_metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True)
                                              + "\n")
    return metrics


# --- figure ------------------------------------------------------------------------------

PANELS = [("down_alone_mbps", "download alone (Mbit/s)"),
          ("down_during_upload_mbps", "download during upload (Mbit/s)"),
          ("up_mbps", "upload (Mbit/s)"),
          ("echo_p90_ms", "echo p90 during both (ms)")]
#: CAKE on the same line (1000-packet buffers), drawn as a reference line per panel.
CAKE = {"down_alone_mbps": 6.31, "down_during_upload_mbps": 6.21, "up_mbps": 0.330,
        "echo_p90_ms": 56.0}


def _figures(out_dir: Path, metrics: Metrics) -> list[Path]:
    from matplotlib.figure import Figure

    from asymlink.plot import save

    lab_file = out_dir / "lab_metrics.json"
    lab = json.loads(lab_file.read_text()) if lab_file.exists() else None
    sources = [("simulator", metrics)] + ([("lab", lab)] if lab else [])
    paths = []
    for buf in BUFFERS:
        fig = Figure(figsize=(16.0, 4.0), layout="constrained")
        axes = fig.subplots(1, len(PANELS))
        width = 0.8 / len(sources)
        for ax, (key, label) in zip(axes, PANELS, strict=True):
            for i, (src, m) in enumerate(sources):
                node = m.get(key, {}) if isinstance(m, dict) else {}
                vals = [float(node.get(f"{a}_{buf}p", float("nan")))
                        for a in ARMS]
                xs = [j + (i - (len(sources) - 1) / 2) * width for j in range(len(ARMS))]
                ax.bar(xs, vals, width=width, label=src)
                for x, v in zip(xs, vals, strict=True):
                    ax.annotate(f"{v:.3g}", (x, v), ha="center", va="bottom",
                                fontsize="x-small")
            if buf == 1000 and key in CAKE:
                ax.axhline(CAKE[key], color="#c44e52", linestyle="--", label="CAKE")
            if key.startswith("echo"):
                ax.set_yscale("log")
            draw_paper_marks(ax, TODAY.paper_data, key,
                             {f"{a}_{buf}p": j for j, a in enumerate(ARMS)})
            ax.set_xticks(range(len(ARMS)), ARMS)
            ax.set_xlabel("uplink configuration")
            ax.set_ylabel(label)
            ax.grid(axis="y", alpha=0.3)
        axes[0].legend(fontsize="small")
        fig.suptitle(f"adsl-today: 8M/512k ATM line, {buf}-packet buffers, Linux hosts "
                     "at defaults")
        paths.append(save(fig, out_dir / "figures" / f"arms_{buf}p.png"))
    return paths


TODAY = register(
    Entry(
        id="adsl-today",
        paper="adsl-middlebox-link-sharing",
        title="Today's hosts on the paper's ADSL line: FIFO, the paper's tree, a Linux "
              "recipe and line mode, beside CAKE",
        run=_run,
        figures=_figures,
    )
)
