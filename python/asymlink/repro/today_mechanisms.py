"""`today-ack-mechanisms`: the papers' ACK mechanisms re-evaluated with today's senders
on a fixed-rate and a trace-driven (cellular) access link.

One box sits at the access line and emulates it (the uplink's and the downlink's queue are
the box's), so each mechanism owns the queue it is designed for:

    client ══ downlink (to_a): DOWN, 20 ms, box queue ══ [box] ══ server
           ══ uplink   (to_b): UP,   20 ms, box queue ══

Links (`LINKS`): `fixed` is 8 Mbit/s down / 512 kbit/s up (the ADSL ratio, plain IP
framing); `cellular` is a 50 Mbit/s downlink with the shipped `builtin:cellular` trace as
the uplink (LTE-like fading with outages, mean 8.68 Mbit/s). Arms (`ARMS`):

* `none`: 100-packet FIFOs in both directions (the baseline);
* `ackfilter`: delayed ACK filtering on the uplink (the paper's best single-connection
  policy), busy time measured by presence (the trace's rate is not known to the filter);
* `ackdelay`: ACK delay control — ACKs in their own queue on the uplink, leaked at the
  measured forward service rate, halved while the downlink queue holds 50 packets or more;
* `tree`: the ADSL paper's five-class uplink tree (docs/adsl.md), rates scaled to the
  uplink (its mean rate on a trace);
* `line`: line mode (`line = { down, up }`, the trace's mean rate for a trace);
* `rwnd`: receiver-window rewriting of the client's ACKs (the downlink's rate and buffer).

Traffic, for each sender (`cubic`, `bbr`: every flow of the run uses it): two downloads and
an upload, staggered, and typed echoes on the ssh port every 200 ms. Each seed draws the
flows' start offsets (`starts`), the same for every arm, so runs of one seed are paired.

Per run, over the window from `WINDOW_START` to the end: the downloads' goodput
(`down_mbps`, their sum), the upload's (`up_mbps`), the echo p90 (`echo_p90_ms`) and
Jain's index of the two downloads (`jain`). Against the baseline of the same seed, each
metric's difference over the seeds gives a mean and a 95 % t-interval (`paired_ci`); a
change counts when the interval excludes zero (`verdict`).

The lab scenarios are built by `lab_scenario`; the simulator runs their translation
(`asymlink.lab.parity.sim_scenario`), checked in for the CUBIC sender and seed 1 as
`scenarios/today-ack-mechanisms/<link>-<arm>.toml` by `python -m
asymlink.repro.today_mechanisms_gen --write` (`--check`: fail if stale; a test runs it).
`--lab OUT` runs the lab half (root).
"""

from __future__ import annotations

import copy
import json
import math
import random
import statistics
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path
from typing import Any

import tomli_w

from asymlink.lab.parity import sim_metrics, sim_scenario
from asymlink.lab.scenario import LabScenario
from asymlink.repro.base import Entry, Metrics, register
from asymlink.runner import run as run_scenario_file

ID = "today-ack-mechanisms"
HERE = Path(__file__).parent / "scenarios" / ID

ARMS = ["none", "ackfilter", "ackdelay", "tree", "line", "rwnd"]
MECHANISMS = ARMS[1:]
CCS = ["cubic", "bbr"]
DELAY = "20ms"
BUFFER = 100
#: Seeds (paired runs per cell) and run lengths, full and `--quick`.
SEEDS = {False: 10, True: 5}
DURATION = {False: 60.0, True: 10.0}
WINDOW_START = 5.0


def trace_mean_bps(name: str) -> float:
    """The mean rate of a shipped trace (`builtin:NAME`): 1500 bytes per opportunity over
    one period."""
    text = files("asymlink").joinpath("traces", f"{name}.trace").read_text()
    times = [int(x) for x in (ln.split("#")[0].strip() for ln in text.splitlines()) if x]
    return len(times) * 1500 * 8 / (times[-1] / 1000)


@dataclass(frozen=True)
class Link:
    """An access line: the downlink and uplink keys of the box's emulation, and the rates
    the mechanisms are configured with (a trace's mean rate)."""

    name: str
    down: dict[str, Any]
    up: dict[str, Any]
    down_bps: float
    up_bps: float
    description: str


LINKS = {
    "fixed": Link("fixed", {"rate": "8Mbit"}, {"rate": "512kbit"}, 8e6, 512e3,
                  "8 Mbit/s down, 512 kbit/s up"),
    "cellular": Link("cellular", {"rate": "50Mbit"}, {"trace": "builtin:cellular"}, 50e6,
                     trace_mean_bps("cellular"),
                     "50 Mbit/s down, uplink on the builtin:cellular trace"),
    "leo": Link("leo", {"rate": "100Mbit"}, {"trace": "builtin:leo"}, 100e6,
                trace_mean_bps("leo"), "100 Mbit/s down, uplink on the builtin:leo trace"),
}


def _kbit(bps: float) -> str:
    return f"{max(1, round(bps / 1e3))}kbit"


def _fifo(n: int = BUFFER) -> dict[str, Any]:
    return {"kind": "fifo", "limit": f"{n}p"}


#: The ADSL paper's tree as shares of the uplink (docs/adsl.md: 495 of 512 kbit/s).
TREE = [
    ("root", None, 495, None, None, None),
    ("ack", "root", 436, None, 0, {"kind": "ack_fifo", "limit": "20p", "drop": "lowest_seq"}),
    ("interactive", "root", 18, 99, 0, _fifo(30)),
    ("bulk", "root", 41, 495, None, None),
    ("good", "bulk", 21, 397, 3, _fifo(50)),
    ("default", "bulk", 15, 495, 5, _fifo(50)),
    ("bad", "bulk", 6, 495, 7, _fifo(50)),
]


def tree_qdisc(up_bps: float) -> dict[str, Any]:
    """The five-class HTB with every rate scaled from the paper's 512 kbit/s line."""
    classes = []
    for name, parent, rate, ceil, prio, queue in TREE:
        c: dict[str, Any] = {"name": name, "rate": _kbit(up_bps * rate / 512)}
        if parent:
            c["parent"] = parent
        if ceil:
            c["ceil"] = _kbit(up_bps * ceil / 512)
        if prio is not None:
            c["prio"] = prio
        if queue:
            c["queue"] = copy.deepcopy(queue)
        classes.append(c)
    return {"kind": "htb", "default": "default", "classes": classes}


def box_config(link: Link, arm: str, buffer: int = BUFFER) -> dict[str, Any]:
    """The box of `arm` on `link` with `buffer`-packet line queues (lab vocabulary:
    `[box]`)."""
    box: dict[str, Any] = {
        "seed": 1,
        "emulation": {"to_a": {**link.down, "delay": DELAY},
                      "to_b": {**link.up, "delay": DELAY}},
    }
    fifo = {"to_a": {"qdisc": _fifo(buffer)}, "to_b": {"qdisc": _fifo(buffer)}}
    if arm == "none":
        box.update(fifo)
    elif arm == "ackfilter":
        box.update(fifo)
        box["to_b"] = {"qdisc": {"kind": "ack_filter", "policy": "delayed",
                                 "measure": "presence", "limit": f"{buffer}p"}}
    elif arm == "ackdelay":
        box.update(fifo)
        box["to_b"] = {"qdisc": {"kind": "ack_shaper", "threshold": f"{buffer // 2}p",
                                 "leak": {"kind": "rate"}, "limit": f"{buffer}p",
                                 "ack_limit": f"{buffer}p"}}
    elif arm == "tree":
        box.update(fifo)
        box["to_b"] = {"classifier": {"preset": "five_class"},
                       "qdisc": tree_qdisc(link.up_bps)}
    elif arm == "line":
        box["line"] = {"down": _kbit(link.down_bps), "up": _kbit(link.up_bps)}
    elif arm == "rwnd":
        box.update(fifo)
        box["rewrite"] = [{"kind": "rwnd", "receivers": "a",
                           "policy": {"link_rate": _kbit(link.down_bps),
                                      "access_queue": f"{buffer}p"}}]
    else:
        raise ValueError(f"unknown arm {arm!r} (arms: {ARMS})")
    return box


def starts(seed: int) -> dict[str, float]:
    """Each flow's start (s) in runs of `seed`: staggered, with a jitter the seed draws
    (the same for every arm and sender, so the runs of a seed are paired)."""
    rng = random.Random(seed)
    return {"download": round(rng.uniform(0.0, 0.5), 3),
            "download2": round(1.0 + rng.uniform(0.0, 1.0), 3),
            "upload": round(2.0 + rng.uniform(0.0, 1.0), 3),
            "typing": round(rng.uniform(0.0, 0.2), 3)}


def lab_scenario(link: str, arm: str, cc: str = "cubic", seed: int = 1,
                 quick: bool = False, buffer: int = BUFFER) -> LabScenario:
    """The lab scenario of one run."""
    lk = LINKS[link]
    dur = DURATION[quick]
    st = starts(seed)
    doc: dict[str, Any] = {
        "name": f"{link}-{arm}",
        "description": f"{ID}: {lk.description}; arm {arm}",
        "forwarding": "box",
        "duration": f"{dur}s",
        "interval": "100ms",
        "windows": {"steady": [f"{WINDOW_START}s", f"{dur}s"]},
        "box": box_config(lk, arm, buffer) | {"seed": seed},
        "flows": [
            {"name": "download", "from": "server", "to": "client", "port": 80,
             "start": f"{st['download']}s", "cc": cc},
            {"name": "download2", "from": "server", "to": "client", "port": 81,
             "start": f"{st['download2']}s", "cc": cc},
            {"name": "upload", "from": "client", "to": "server", "port": 5001,
             "start": f"{st['upload']}s", "cc": cc},
        ],
        "probes": [{"name": "typing", "kind": "echo", "from": "client", "to": "server",
                    "port": 22, "every": "200ms", "start": f"{st['typing']}s"}],
    }
    return LabScenario.from_dict(doc, f"{ID}/{link}-{arm}")


def sim_doc(link: str, arm: str, cc: str = "cubic", seed: int = 1,
            quick: bool = False, buffer: int = BUFFER) -> dict[str, Any]:
    """The simulator scenario (dict) of one run."""
    doc = sim_scenario(lab_scenario(link, arm, cc, seed, quick, buffer), seed=seed)
    doc["name"] = f"{ID}-{link}-{arm}"
    doc["description"] = f"{ID}: {LINKS[link].description}; arm {arm}"
    return doc


def scenario_names() -> list[str]:
    return [f"{link}-{arm}" for link in LINKS for arm in ARMS]


def generated() -> dict[str, str]:
    """The checked-in simulator scenario of each link and arm (CUBIC, seed 1, full)."""
    out = {}
    for link in LINKS:
        for arm in ARMS:
            lk = LINKS[link]
            down = lk.down.get("rate") or lk.down.get("trace")
            up = lk.up.get("rate") or lk.up.get("trace")
            head = (f"# Generated by `python -m asymlink.repro.today_mechanisms_gen --write`"
                    f"; do not edit.\n# {ID}: {lk.description}; arm {arm}.\n#\n"
                    "#   client --line_a-- box --line_b-- server\n"
                    f"#   downlink: line_a.to_a, {down}, {DELAY}; its queue is the box's to_a\n"
                    f"#   uplink:   line_b.to_b, {up}, {DELAY}; its queue is the box's to_b\n"
                    "#   (other directions: 10 Gbit/s wires)\n#\n"
                    "# The run varies the sender (flows' tcp.cc), the seed and the flows'"
                    " starts.\n")
            out[f"{link}-{arm}"] = head + tomli_w.dumps(sim_doc(link, arm))
    return out


def stale() -> list[Path]:
    """Checked-in files that differ from `generated()`."""
    return [HERE / f"{n}.toml" for n, text in generated().items()
            if not (HERE / f"{n}.toml").exists()
            or (HERE / f"{n}.toml").read_text() != text]


def run_overrides(cc: str, seed: int, quick: bool, link: str = "", arm: str = "",
                  buffer: int = BUFFER) -> dict[str, Any]:
    """Overrides that turn a checked-in scenario into the run of (`cc`, `seed`, `quick`):
    `sim_doc(link, arm, cc, seed, quick)` (a test checks this); with another `buffer`
    (the sensitivity runs), the middlebox of `link` and `arm` with that buffer."""
    dur = DURATION[quick]
    st = starts(seed)
    o: dict[str, Any] = {"seed": seed, "duration": f"{dur}s"}
    if buffer != BUFFER:
        o["middleboxes"] = sim_doc(link, arm, cc, seed, quick, buffer)["middleboxes"]
    for flow in ("download", "download2", "upload"):
        o[f"flows.{flow}.start"] = f"{st[flow]}s"
        o[f"flows.{flow}.stop"] = f"{dur}s"
        o[f"flows.{flow}.tcp.cc"] = cc
    o["flows.typing.start"] = f"{st['typing']}s"
    o["flows.typing.stop"] = f"{dur}s"
    return o


# --- metrics and statistics --------------------------------------------------------------

METRICS = ["down_mbps", "up_mbps", "echo_p90_ms", "jain"]
#: +1: higher is better; -1: lower is better.
BETTER = {"down_mbps": 1, "up_mbps": 1, "echo_p90_ms": -1, "jain": 1}


def jain(xs: list[float]) -> float:
    """Jain's fairness index of `xs` (1 when all equal)."""
    s, q = sum(xs), sum(x * x for x in xs)
    return s * s / (len(xs) * q) if q > 0 else 1.0


def run_metrics(lab: dict[str, Any]) -> dict[str, float]:
    """The four metrics of a run from its lab-shaped metrics (simulator or lab)."""
    tp = lab["throughput_mbps_in"]["steady"]
    echo = lab["echo_latency_ms_in"]["steady"]["typing"]["p90"]
    return {"down_mbps": tp["download"] + tp["download2"], "up_mbps": tp["upload"],
            "echo_p90_ms": float("nan") if echo is None else float(echo),
            "jain": jain([tp["download"], tp["download2"]])}


#: Two-sided 95 % quantiles of Student's t (t_{0.975, df}), df = 1..30.
T975 = [12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228,
        2.201, 2.179, 2.160, 2.145, 2.131, 2.120, 2.110, 2.101, 2.093, 2.086,
        2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048, 2.045, 2.042]


def paired_ci(diffs: list[float]) -> tuple[float, float]:
    """(mean, half-width) of the 95 % t-interval of the mean of paired differences."""
    n = len(diffs)
    if n < 2:
        raise ValueError("a confidence interval needs at least two pairs")
    if n - 1 > len(T975):
        raise ValueError(f"at most {len(T975) + 1} pairs")
    mean = statistics.fmean(diffs)
    return mean, T975[n - 2] * statistics.stdev(diffs) / math.sqrt(n)


def significant(mean: float, half: float) -> bool:
    """Whether the interval mean ± half excludes zero."""
    return abs(mean) > half


#: Verdict codes in metrics.json.
HELPS, NEUTRAL, HURTS, MIXED = 1, 0, -1, 2
VERDICT_NAMES = {HELPS: "helps", NEUTRAL: "neutral", HURTS: "hurts", MIXED: "mixed"}


def verdict(effects: dict[str, tuple[float, float]]) -> int:
    """`helps` when some metric changes for the better beyond its interval and none for
    the worse, `hurts` the reverse, `mixed` both, `neutral` neither."""
    good = bad = False
    for metric, (mean, half) in effects.items():
        if significant(mean, half):
            if mean * BETTER[metric] > 0:
                good = True
            else:
                bad = True
    return MIXED if good and bad else HELPS if good else HURTS if bad else NEUTRAL


def _cell(link: str, cc: str) -> str:
    return f"{link}_{cc}"


def summarise(per_run: dict[tuple[str, str, str, int], dict[str, float]]) -> Metrics:
    """metrics.json from each run's metrics, keyed (link, cc, arm, seed):

    * `mean.<metric>.<link>_<cc>_<arm>`: the mean over the seeds;
    * `diff.<metric>.<link>_<cc>_<arm>` and `ci.<metric>.<link>_<cc>_<arm>`: the mean
      paired difference to `none` and the half-width of its 95 % interval;
    * `verdict.<link>_<cc>_<arm>`: 1 helps, 0 neutral, -1 hurts, 2 mixed;
    * `seeds`: the number of seeds.

    The full run adds `sensitivity.buffer_<n>p.verdict.<...>` (`_run`)."""
    out: dict[str, Any] = {"mean": {m: {} for m in METRICS}, "diff": {m: {} for m in METRICS},
                           "ci": {m: {} for m in METRICS}, "verdict": {}}
    seeds = sorted({k[3] for k in per_run})
    out["seeds"] = len(seeds)
    for link in LINKS:
        for cc in CCS:
            for arm in ARMS:
                key = f"{_cell(link, cc)}_{arm}"
                for m in METRICS:
                    out["mean"][m][key] = statistics.fmean(
                        per_run[(link, cc, arm, s)][m] for s in seeds)
                if arm == "none":
                    continue
                effects = {}
                for m in METRICS:
                    d = [per_run[(link, cc, arm, s)][m] - per_run[(link, cc, "none", s)][m]
                         for s in seeds]
                    effects[m] = paired_ci(d)
                    out["diff"][m][key], out["ci"][m][key] = effects[m]
                out["verdict"][key] = verdict(effects)
    return out


def _one(job: tuple[str, str, str, int, bool, int]) -> tuple[tuple[str, str, str, int],
                                                               dict[str, float]]:
    link, arm, cc, seed, quick, buffer = job
    scenario = TODAY.scenario(f"{link}-{arm}", quick=False).with_overrides(
        run_overrides(cc, seed, quick, link, arm, buffer))
    res = run_scenario_file(scenario)
    return (link, cc, arm, seed), run_metrics(sim_metrics(
        lab_scenario(link, arm, cc, seed, quick, buffer), res))


#: The full run's sensitivity sweep: the line queues' size (the most influential open
#: parameter), on these links, with `SENSITIVITY_SEEDS` seeds.
SENSITIVITY_BUFFERS = [30, 300]
SENSITIVITY_LINKS = ["fixed", "cellular"]
SENSITIVITY_SEEDS = 5


def _runs(quick: bool, buffer: int, links: list[str], seeds: int
          ) -> dict[tuple[str, str, str, int], dict[str, float]]:
    jobs = [(link, arm, cc, seed, quick, buffer) for link in links for cc in CCS
            for arm in ARMS for seed in range(1, seeds + 1)]
    return dict(_one(j) for j in jobs)


def _run(out_dir: Path, quick: bool) -> Metrics:
    per_run = _runs(quick, BUFFER, list(LINKS), SEEDS[quick])
    (out_dir / "runs.json").write_text(json.dumps(
        [{"link": k[0], "cc": k[1], "arm": k[2], "seed": k[3], **v}
         for k, v in sorted(per_run.items())], indent=1) + "\n")
    metrics = summarise(per_run)
    table = verdict_table(metrics)
    if not quick:
        cases = [(link, cc, arm) for link in SENSITIVITY_LINKS for cc in CCS
                 for arm in MECHANISMS]
        sensitivity: dict[str, Any] = {}
        for buf in SENSITIVITY_BUFFERS:
            s = lab_summary(_runs(quick, buf, SENSITIVITY_LINKS, SENSITIVITY_SEEDS), cases)
            sensitivity[f"buffer_{buf}p"] = {"verdict": s["verdict"], "seeds": s["seeds"]}
            table += "\n" + verdict_table(s, cases, f"Verdicts with {buf}-packet line queues")
        metrics["sensitivity"] = sensitivity
    (out_dir / "verdicts.md").write_text(table)
    return metrics


# --- the lab half ------------------------------------------------------------------------

#: The cases the lab runs (link, sender, mechanism), each against the baseline of the same
#: link and sender. Fixed-rate ones: the box's trace-driven emulation does not pass
#: traffic in the lab yet (see docs/traces.md).
LAB_CASES = [("fixed", "cubic", "ackfilter"), ("fixed", "cubic", "line")]


def lab_summary(per_run: dict[tuple[str, str, str, int], dict[str, float]],
                cases: list[tuple[str, str, str]]) -> dict[str, Any]:
    """`summarise` restricted to `cases` (and their baselines): the same keys."""
    seeds = sorted({k[3] for k in per_run})
    out: dict[str, Any] = {"mean": {m: {} for m in METRICS}, "diff": {m: {} for m in METRICS},
                           "ci": {m: {} for m in METRICS}, "verdict": {}, "seeds": len(seeds)}
    for link, cc, arm in cases:
        for a in ("none", arm):
            for m in METRICS:
                out["mean"][m][f"{_cell(link, cc)}_{a}"] = statistics.fmean(
                    per_run[(link, cc, a, s)][m] for s in seeds)
        key = f"{_cell(link, cc)}_{arm}"
        effects = {}
        for m in METRICS:
            d = [per_run[(link, cc, arm, s)][m] - per_run[(link, cc, "none", s)][m]
                 for s in seeds]
            effects[m] = paired_ci(d)
            out["diff"][m][key], out["ci"][m][key] = effects[m]
        out["verdict"][key] = verdict(effects)
    return out


def run_lab(out_dir: Path, seeds: int = 5, quick: bool = False,
            cases: list[tuple[str, str, str]] | None = None) -> dict[str, Any]:
    """The lab half (root): each case of `cases` (default `LAB_CASES`) and its baseline,
    `seeds` paired seeds, in one fresh lab, runs as long as the simulator's (60 s; with
    `quick` 10 s). Writes `lab_metrics.json` (keys as metrics.json, plus `duration_s`) and
    `lab_verdicts.md`."""
    from asymlink.lab import Lab, run_scenario

    cases = cases or LAB_CASES
    runs = sorted({(link, cc, a) for link, cc, arm in cases for a in ("none", arm)})
    per_run = {}
    lab = Lab.up()
    try:
        for seed in range(1, seeds + 1):
            for link, cc, arm in runs:
                m = run_scenario(lab_scenario(link, arm, cc, seed, quick),
                                 out_dir / "lab" / f"{link}-{cc}-{arm}-{seed}", lab)
                per_run[(link, cc, arm, seed)] = run_metrics(m)
    finally:
        lab.down()
    metrics = lab_summary(per_run, cases) | {"duration_s": DURATION[quick]}
    (out_dir / "lab_runs.json").write_text(json.dumps(
        [{"link": k[0], "cc": k[1], "arm": k[2], "seed": k[3], **v}
         for k, v in sorted(per_run.items())], indent=1) + "\n")
    (out_dir / "lab_metrics.json").write_text(json.dumps(metrics, indent=2, sort_keys=True)
                                              + "\n")
    (out_dir / "lab_verdicts.md").write_text(verdict_table(metrics, cases, "Lab verdicts"))
    return metrics


# --- the verdict table and figure ----------------------------------------------------------

LABELS = {"down_mbps": "down", "up_mbps": "up", "echo_p90_ms": "echo p90", "jain": "Jain"}


def _effect_text(metrics: dict[str, Any], key: str) -> str:
    parts = []
    for m in METRICS:
        mean = metrics["diff"][m][key]
        half = metrics["ci"][m][key]
        if significant(float(mean), float(half)):
            base = float(metrics["mean"][m][key.rsplit("_", 1)[0] + "_none"])
            rel = f" ({100 * float(mean) / base:+.0f} %)" if base else ""
            parts.append(f"{LABELS[m]} {float(mean):+.3g}{rel}")
    return ", ".join(parts) or "no change beyond the interval"


def verdict_table(metrics: dict[str, Any], cases: list[tuple[str, str, str]] | None = None,
                  title: str = "Verdicts") -> str:
    """Markdown: each mechanism × sender × link (or each of `cases`) with its verdict and
    the significant changes (mean paired difference to the baseline, and relative to the
    baseline's mean)."""
    cases = cases or [(link, cc, arm) for link in LINKS for cc in CCS for arm in MECHANISMS]
    lines = [f"# {title}", "",
             f"Paired over {metrics['seeds']} seeds; a change counts when its 95 % "
             "t-interval excludes zero.", "",
             "| link | sender | mechanism | verdict | changes beyond the interval |",
             "|---|---|---|---|---|"]
    for link, cc, arm in cases:
        key = f"{_cell(link, cc)}_{arm}"
        v = VERDICT_NAMES[int(metrics["verdict"][key])]
        lines.append(f"| {link} | {cc} | {arm} | {v} | {_effect_text(metrics, key)} |")
    return "\n".join(lines) + "\n"


COLOURS = {HELPS: "#55a868", NEUTRAL: "#e4e4e4", HURTS: "#c44e52", MIXED: "#dd8452"}


def _figures(out_dir: Path, metrics: dict[str, Any]) -> list[Path]:
    """One cell per mechanism (row) and link × sender × metric (column): green when the
    metric changes for the better beyond its interval, red for the worse, grey otherwise,
    with the relative change; each row's verdict per link and sender above its cells."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch, Rectangle

    from asymlink.plot import save

    groups = [(link, cc) for link in LINKS for cc in CCS]
    nm = len(METRICS)
    fig = Figure(figsize=(1.0 * nm * len(groups) + 1.5, 0.75 * len(MECHANISMS) + 2.0),
                 layout="constrained")
    ax = fig.subplots()
    for g, (link, cc) in enumerate(groups):
        for i, arm in enumerate(MECHANISMS):
            key = f"{_cell(link, cc)}_{arm}"
            base_key = f"{_cell(link, cc)}_none"
            for j, m in enumerate(METRICS):
                mean = float(metrics["diff"][m][key])
                half = float(metrics["ci"][m][key])
                base = float(metrics["mean"][m][base_key])
                sig = significant(mean, half)
                colour = (COLOURS[HELPS] if sig and mean * BETTER[m] > 0
                          else COLOURS[HURTS] if sig else COLOURS[NEUTRAL])
                x = g * nm + j
                ax.add_patch(Rectangle((x, i), 1, 1, facecolor=colour, edgecolor="white",
                                       linewidth=1))
                rel = 100 * mean / base if base else 0.0
                ax.text(x + 0.5, i + 0.5, f"{rel:+.0f} %" if sig else "=", ha="center",
                        va="center", fontsize="x-small")
            v = VERDICT_NAMES[int(metrics["verdict"][key])]
            ax.text(g * nm + nm / 2, i + 0.02, v, ha="center", va="top", fontsize=6,
                    color="#333333")
        ax.axvline(g * nm, color="black", linewidth=1.5)
    ax.set_xlim(0, nm * len(groups))
    ax.set_ylim(len(MECHANISMS), 0)
    ax.set_xticks([g * nm + j + 0.5 for g in range(len(groups)) for j in range(nm)],
                  [LABELS[m] for _ in groups for m in METRICS], fontsize="x-small",
                  rotation=90)
    ax.set_yticks([i + 0.5 for i in range(len(MECHANISMS))], MECHANISMS)
    top = ax.secondary_xaxis("top")
    top.set_xticks([g * nm + nm / 2 for g in range(len(groups))],
                   [f"{lk} / {cc}" for lk, cc in groups])
    top.tick_params(length=0)
    ax.tick_params(length=0)
    ax.set_xlabel("metric (change against no mechanism, relative to its mean)")
    ax.set_ylabel("mechanism")
    ax.legend(handles=[Patch(color=COLOURS[HELPS], label="better beyond the interval"),
                       Patch(color=COLOURS[HURTS], label="worse beyond the interval"),
                       Patch(color=COLOURS[NEUTRAL], label="within the interval")],
              loc="upper center", bbox_to_anchor=(0.5, -0.25), ncol=3, fontsize="small")
    fig.suptitle(f"{ID}: each mechanism against no mechanism, paired over "
                 f"{metrics['seeds']} seeds, 95 % t-intervals")
    paths = [save(fig, out_dir / "figures" / "verdicts.png")]
    lab_file = out_dir / "lab_metrics.json"
    if lab_file.exists():
        paths.append(_lab_figure(out_dir, metrics, json.loads(lab_file.read_text())))
    return paths


def _lab_figure(out_dir: Path, metrics: dict[str, Any], lab: dict[str, Any]) -> Path:
    """The lab's cases beside the simulator's: each metric's mean per arm, with the lab's
    verdicts in the title of each case."""
    from matplotlib.figure import Figure

    from asymlink.plot import save

    keys = sorted(lab["verdict"])
    arms: list[str] = []
    for k in keys:
        cell, arm = k.rsplit("_", 1)
        arms += [a for a in (f"{cell}_none", k) if a not in arms]
    fig = Figure(figsize=(4.0 * len(METRICS), 3.8), layout="constrained")
    axes = fig.subplots(1, len(METRICS))
    for ax, m in zip(axes, METRICS, strict=True):
        xs = range(len(arms))
        ax.bar([x - 0.2 for x in xs], [float(metrics["mean"][m].get(k, float("nan")))
                                       for k in arms], width=0.4, label="simulator")
        ax.bar([x + 0.2 for x in xs], [lab["mean"][m][k] for k in arms], width=0.4,
               label="lab")
        ax.set_xticks(xs, [k.replace("_", " ").rsplit(" ", 1)[0] + "\n" + k.rsplit("_", 1)[1]
                           for k in arms], fontsize="x-small")
        ax.set_ylabel(LABELS[m] + {"down_mbps": " (Mbit/s)", "up_mbps": " (Mbit/s)",
                                   "echo_p90_ms": " (ms)", "jain": ""}[m])
        ax.set_xlabel("case and arm")
        ax.grid(axis="y", alpha=0.3)
    axes[0].legend(fontsize="small")
    verdicts = "; ".join(f"{k.replace('_', ' ')}: lab {VERDICT_NAMES[int(lab['verdict'][k])]}, "
                         f"simulator {VERDICT_NAMES[int(metrics['verdict'][k])]}"
                         for k in keys)
    fig.suptitle(f"{ID}: lab (real Linux TCP, {lab['seeds']} seeds, {lab['duration_s']:g} s "
                 f"runs) beside the simulator ({metrics['seeds']} seeds)\n{verdicts}",
                 fontsize="medium")
    return save(fig, out_dir / "figures" / "lab.png")


TODAY = register(
    Entry(
        id=ID,
        paper="ack-filtering, ack-delay-control, adsl-middlebox, receiver-based",
        title="The 2000s ACK mechanisms with today's senders (CUBIC, BBR) on a fixed and a "
              "cellular link: helps, hurts or neutral",
        run=_run,
        figures=_figures,
    )
)
