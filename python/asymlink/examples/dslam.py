"""An access network generated in Python: `lines` subscriber lines behind one DSLAM and a
shared backhaul, each line managed at home by a middlebox configured by `line`.

```text
 srv0..srvS ── 10Gbit, 10ms ── core ══ backhaul 10Gbit, 2ms ══ dslam
                                                                │ line i: ADSL 8M/512k ATM
                                                                │      or VDSL 50M/10M PTM
                                                              home i  (middlebox: `line`)
                                                                │ 1Gbit, 0.1ms
                                                              client i
```

Each subscriber browses (web pages with think times), downloads files (Pareto sizes,
exponential gaps) and, on a share of the lines, uploads files. `load` scales the offered
download traffic relative to the backhaul: at the default the backhaul is kept busy more
than half of the time on average.
"""

from __future__ import annotations

import random
from typing import Any

from asymlink.scenario import Scenario

#: The two kinds of line: (name, down, up, encapsulation, DSLAM buffer in packets).
LINE_KINDS = (
    ("adsl", 8_000_000, 512_000, "llc_snap_routed", 200),
    ("vdsl", 50_000_000, 10_000_000, "bridged_ptm", 400),
)

BACKHAUL_BPS = 10_000_000_000
#: Mean download file size (bytes) of the Pareto distribution below (shape 1.5, min 400 KB).
_FILE_MIN = 400_000
_FILE_MEAN = 3 * _FILE_MIN


def _rate(bps: int) -> str:
    return f"{bps // 1000}kbit" if bps % 1_000_000 else f"{bps // 1_000_000}Mbit"


def dslam(lines: int = 10_000, seed: int = 1, duration: str = "60s", vdsl_share: float = 0.3,
          load: float = 0.7, upload_share: float = 0.2, servers: int = 16) -> Scenario:
    """The access network as a Scenario (`asymlink.run` runs it; `.to_toml()` writes it).

    `lines` subscriber lines, a `vdsl_share` of them VDSL 50M/10M (PTM), the rest ADSL
    8M/512k (ATM, LLC/SNAP). Every line runs a web browser and a file downloader; an
    `upload_share` of them also uploads. The download gap is set so that the downloads
    alone offer `load` × the 10 Gbit/s backhaul on average (web pages and uploads add to
    it). The line kinds, servers and applications are drawn from `seed`, which is also
    the scenario's seed: the same arguments give the same scenario and the same run.
    """
    if lines < 1:
        raise ValueError(f"lines must be at least 1, not {lines}")
    if not load > 0:   # NaN too
        raise ValueError(f"load must be positive, not {load}")
    rng = random.Random(seed)
    # Each line's downloader: one file of mean _FILE_MEAN, then an exponential gap; the
    # gap's mean makes `lines` downloaders offer `load` × the backhaul.
    per_line_bps = load * BACKHAUL_BPS / lines
    gap_s = max(0.1, _FILE_MEAN * 8 / per_line_bps)

    nodes: list[dict[str, Any]] = [{"name": "core", "kind": "router"},
                                   {"name": "dslam", "kind": "router"}]
    links: list[dict[str, Any]] = [{
        "name": "backhaul", "a": "core", "b": "dslam", "rate": _rate(BACKHAUL_BPS),
        "delay": "2ms", "queue": {"kind": "fifo", "limit": "10000p"},
    }]
    for s in range(servers):
        nodes.append({"name": f"srv{s}"})
        links.append({"name": f"srv{s}", "a": f"srv{s}", "b": "core",
                      "rate": _rate(BACKHAUL_BPS), "delay": "10ms"})
    middleboxes: list[dict[str, Any]] = []
    flows: list[dict[str, Any]] = []
    for i in range(lines):
        kind, down, up, encap, buffer = LINE_KINDS[1 if rng.random() < vdsl_share else 0]
        home, client, line = f"home{i}", f"sub{i}", f"line{i}"
        nodes += [{"name": home, "kind": "router"}, {"name": client}]
        links += [
            {"name": f"lan{i}", "a": client, "b": home, "rate": "1Gbit", "delay": "0.1ms"},
            {"name": line, "a": home, "b": "dslam", "delay": "1ms",
             "linklayer": {"encap": encap},
             "to_b": {"rate": _rate(up)},
             "to_a": {"rate": _rate(down), "queue": {"kind": "fifo", "limit": f"{buffer}p"}}},
        ]
        middleboxes.append({"node": home, "a": f"lan{i}", "b": line,
                            "line": {"down": _rate(down), "up": _rate(up),
                                     "linklayer": {"encap": encap}}})
        srv = f"srv{rng.randrange(servers)}"
        flows.append({"name": f"web{i}", "from": srv, "to": client,
                      "start": f"{rng.uniform(0, 5):.3f}s", "app": {
                          "kind": "web", "main": "60KB", "object_count": 8,
                          "object_size": "20KB",
                          "persistent": True, "pages": 1000,
                          "think": {"dist": "exponential", "mean": "15s"}}})
        flows.append({"name": f"dl{i}", "from": f"srv{rng.randrange(servers)}", "to": client,
                      "start": f"{rng.uniform(0, gap_s):.3f}s", "app": {
                          "kind": "file_transfers",
                          "size": {"dist": "pareto", "shape": 1.5, "min": f"{_FILE_MIN}B"},
                          "gap": {"dist": "exponential", "mean": f"{gap_s:.3f}s"}}})
        if rng.random() < upload_share:
            flows.append({"name": f"ul{i}", "from": client, "to": srv,
                          "start": f"{rng.uniform(0, 20):.3f}s", "app": {
                              "kind": "file_transfers",
                              "size": {"dist": "pareto", "shape": 1.5, "min": "200KB"},
                              "gap": {"dist": "exponential", "mean": "30s"}}})
    data = {
        "name": "dslam",
        "description": f"{lines} subscriber lines behind a DSLAM and a 10 Gbit/s backhaul, "
                       "each managed by line mode",
        "duration": duration, "seed": seed, "tcp": "linux",
        "nodes": nodes, "links": links, "middleboxes": middleboxes, "flows": flows,
        # Per-connection and per-queue series of 10 000 lines would dwarf the run: keep
        # the link series (the backhaul's utilisation) and the summaries.
        "monitor": {"interval": "1s", "flows": False, "queues": False, "events": False},
    }
    return Scenario.from_dict(data, origin="example:dslam")
