"""Generate the checked-in scenario files of the ACK-filtering reproductions.

`python -m asymlink.repro.ackfilter_gen` rewrites `scenarios/ackfilter-{threshold,delayed,
multi}/*.toml` (not `paper.toml`); `--check` exits with status 1 if a file differs from
what this script produces (a test runs it). Every value here is a parameter fixed before
any result was seen; `paper.toml` of each entry says why.

The multi-source topologies draw the access delays and start times from a fixed seed
(Python's `random.Random`, value-stable across versions for `random()`), so the files
never change unless this script does.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).parent / "scenarios"

# --- the single-connection scenario (paper §2.4, §3.2) -----------------------------------

#: δ values of the paper's figures 4-6.
DELTAS = (1, 3, 30, 100, 500)
#: The reverse buffer is "set to a large value": nothing is ever dropped there.
BIG = "100000p"
#: TSW window of delayed filtering, "in the same order as RTT" (T = 200 ms).
WINDOW = "200ms"

SINGLE_HEADER = """\
# {title}
#
#   server ---------------- router ---------------- client
#      core: 10 Mbit/s, 50 ms      access: 10 Mbit/s, 50 ms  ->
#      both ways, FIFO {big}    <- 100 kbit/s, 50 ms, reverse buffer:
#                                  {queue}
#
# One Reno transfer (the `paper` TCP profile: 1000-byte segments, an ACK per segment
# (d = 1), 40-byte ACKs, initial window 1, no SACK, no timestamps) from server to client,
# receiver window and initial ssthresh unlimited, big buffers everywhere. T = 200 ms of
# propagation (+ 0.8 ms data and 3.2 ms ACK serialisation). The reverse buffer is the
# client's queue onto the 100 kbit/s channel (link `access`, direction `to_a`).
# Barakat & Altman, "On ACK filtering on a slow reverse channel", {section}.
"""

SINGLE_BODY = """\
name = "{name}"
duration = "10s"
seed = 1
tcp = {{ profile = "paper", cc = "reno", rcvbuf = "100MB" }}

[monitor]
interval = "20ms"
flows = true
queues = true
links = true
events = false

[[nodes]]
name = "server"
[[nodes]]
name = "router"
kind = "router"
[[nodes]]
name = "client"

[[links]]
name = "core"
a = "server"
b = "router"
rate = "10Mbit"
delay = "50ms"
queue = {{ kind = "fifo", limit = "{big}" }}

[[links]]
name = "access"
a = "router"
b = "client"
rate = "10Mbit"
delay = "50ms"
queue = {{ kind = "fifo", limit = "{big}" }}
to_a = {{ rate = "100kbit", queue = {queue} }}

[[flows]]
name = "transfer"
from = "server"
to = "client"
app = {{ kind = "bulk" }}
"""


def _inline(d: dict[str, object]) -> str:
    parts = []
    for k, v in d.items():
        if isinstance(v, str):
            parts.append(f'{k} = "{v}"')
        elif isinstance(v, float):
            parts.append(f"{k} = {v!r}")
        else:
            parts.append(f"{k} = {v}")
    return "{ " + ", ".join(parts) + " }"


def _single(name: str, title: str, section: str, queue: dict[str, object]) -> str:
    q = _inline({"kind": "ack_filter", **queue, "limit": BIG})
    return SINGLE_HEADER.format(title=title, big=BIG, queue=q, section=section) + "\n" + \
        SINGLE_BODY.format(name=name, big=BIG, queue=q)


def threshold_files() -> dict[str, str]:
    """`ackfilter-threshold`: no filtering, static δ ∈ DELTAS, delayed filtering."""
    sec = "§2.4, figures 4-6"
    files = {
        "none.toml": _single("ackfilter-threshold-none", "No ACK filtering (δ = ∞).", sec,
                             {"policy": "none"}),
        "delayed.toml": _single(
            "ackfilter-threshold-delayed", "Delayed filtering (TSW rate vs 90 % of the channel).",
            sec, {"policy": "delayed", "window": WINDOW, "utilization": 0.9}),
    }
    for d in DELTAS:
        files[f"delta-{d}.toml"] = _single(
            f"ackfilter-threshold-delta-{d}",
            f"Static filtering with threshold δ = {d} (the new ACK takes the erased one's place).",
            sec, {"policy": "threshold", "delta": d, "placement": "replace"})
    return files


def delayed_files() -> dict[str, str]:
    """`ackfilter-delayed`: delayed filtering against static δ = δ_o, and the variants for
    an unknown channel rate."""
    sec = "§3, figures 7-9"
    return {
        "none.toml": _single("ackfilter-delayed-none", "No ACK filtering (reference).", sec,
                             {"policy": "none"}),
        "static-delta-o.toml": _single(
            "ackfilter-delayed-static-delta-o",
            "Static filtering with δ = δ_o from eq. (1): μ_r·T/(d+1), T = 200 ms, d = 1.",
            sec, {"policy": "threshold", "delta": "auto", "rtt": "200ms", "ack_every": 1,
                  "placement": "replace"}),
        "static-estimated.toml": _single(
            "ackfilter-delayed-static-estimated",
            "Static filtering with δ estimated online (T and d unknown to the filter).",
            sec, {"policy": "threshold", "delta": "auto", "placement": "replace"}),
        "delayed.toml": _single(
            "ackfilter-delayed-delayed",
            "Delayed filtering: TSW output rate against 90 % of the channel rate.", sec,
            {"policy": "delayed", "window": WINDOW, "utilization": 0.9}),
        "delayed-presence.toml": _single(
            "ackfilter-delayed-delayed-presence",
            "Delayed filtering without the channel rate: how often ACKs are present (90 %).",
            sec, {"policy": "delayed", "measure": "presence", "window": WINDOW,
                  "utilization": 0.9}),
    }


# --- the multi-source scenario (paper §4, figures 10-12) ---------------------------------

NMAX = 20
#: Receiver buffer (bounds the advertised window): 64 KB, the largest window without
#: window scaling. See `paper.toml` for why.
RCVBUF = "64KB"
#: Buffer sizes of figures 11 ("large") and 12 (10 packets).
BUFFERS = {"large": "10000p", "small": "10p"}
#: The five algorithms of figures 11-12, plus the CAKE-like baseline.
ARMS: dict[str, dict[str, object]] = {
    "none": {"kind": "ack_filter", "policy": "none"},
    "classic": {"kind": "ack_filter", "policy": "classic"},
    "delayed": {"kind": "ack_filter", "policy": "delayed", "window": WINDOW,
                "utilization": 0.9},
    "perflow_fifo": {"kind": "ack_filter", "policy": "perflow", "window": WINDOW,
                     "utilization": 0.9, "service": "fifo"},
    "perflow_rr": {"kind": "ack_filter", "policy": "perflow", "window": WINDOW,
                   "utilization": 0.9, "service": "round_robin"},
    "conservative": {"kind": "ack_filter", "policy": "conservative"},
}

MULTI_HEADER = """\
# ACK filtering with {n} source{s} (Barakat & Altman §4, figures 10-12).
#
#   S1 ..{dots}.. S{n}     access links: 100 Mbit/s both ways, delay U(1, 10) ms each
#      \\   |   /        (drawn once, seed 2004), FIFO 10000p
#       router ------------------------------------------------------- D
#                 sat: 10 Mbit/s, 100 ms, FIFO 10000p  ->
#                 <- 100 kbit/s, 100 ms, reverse buffer: the ACK filter
#
# Each source S_i sends files of U(10 kB, 10 MB) to D one after another on new Reno
# connections (`paper` profile: 1000-byte segments, an ACK per segment, 40-byte ACKs,
# receiver window 64 KB), waiting U(0.1, 1) s between files; sources start at U(0, 1) s.
# Metric: the mean throughput of the files completed in 1000 s.
#
# This file runs the arm `none` with the large buffer. The other arms replace the
# reverse buffer's queue with one of [meta.arms] and its limit with one of
# [meta.buffers], e.g.
#   asymlink run {file} --out out --set {example}
"""

#: The `--set` argument of the example in each multi file's header.
MULTI_EXAMPLE = (
    "'links.0.to_a.queue={kind=\"ack_filter\",policy=\"perflow\",service=\"round_robin\","
    "window=\"200ms\",utilization=0.9,limit=\"10p\"}'"
)


def multi_file(n: int) -> str:
    """The topology with `n` sources."""
    rng = random.Random(2004)
    delays = [rng.uniform(1.0, 10.0) for _ in range(NMAX)]
    starts = [rng.uniform(0.0, 1.0) for _ in range(NMAX)]
    out = [MULTI_HEADER.format(n=n, s="" if n == 1 else "s", dots="." * min(n, 6),
                               file=f"n{n:02d}.toml", example=MULTI_EXAMPLE)]
    out.append(f'name = "ackfilter-multi-n{n:02d}"\nduration = "1000s"\nseed = 1\n'
               f'tcp = {{ profile = "paper", cc = "reno", rcvbuf = "{RCVBUF}" }}\n')
    out.append('[monitor]\ninterval = "10s"\nflows = false\nqueues = true\nlinks = true\n'
               'events = false\n')
    out.append("[meta.buffers]\n" + "".join(f'{k} = "{v}"\n' for k, v in BUFFERS.items()))
    out.append("[meta.arms]\n" + "".join(f"{k} = {_inline(v)}\n" for k, v in ARMS.items()))
    out.append('[[nodes]]\nname = "D"\n[[nodes]]\nname = "router"\nkind = "router"\n')
    for i in range(1, n + 1):
        out.append(f'[[nodes]]\nname = "S{i}"\n')
    none_large = _inline({**ARMS["none"], "limit": BUFFERS["large"]})
    out.append(
        '[[links]]\nname = "sat"\na = "router"\nb = "D"\nrate = "10Mbit"\ndelay = "100ms"\n'
        'queue = { kind = "fifo", limit = "10000p" }\n'
        f'to_a = {{ rate = "100kbit", queue = {none_large} }}\n')
    for i in range(1, n + 1):
        out.append(f'[[links]]\nname = "s{i}"\na = "S{i}"\nb = "router"\nrate = "100Mbit"\n'
                   f'delay = "{delays[i - 1] * 1000:.0f}us"\n'
                   'queue = { kind = "fifo", limit = "10000p" }\n')
    for i in range(1, n + 1):
        out.append(
            f'[[flows]]\nname = "S{i}"\nfrom = "S{i}"\nto = "D"\n'
            f'start = "{starts[i - 1] * 1000:.0f}ms"\n'
            'app = { kind = "file_transfers", '
            'size = { dist = "uniform", min = "10KB", max = "10MB" }, '
            'gap = { dist = "uniform", min = "100ms", max = "1s" } }\n')
    return "\n".join(out)


def multi_files() -> dict[str, str]:
    """`ackfilter-multi`: one topology per N = 1..20."""
    return {f"n{n:02d}.toml": multi_file(n) for n in range(1, NMAX + 1)}


GENERATED = {
    "ackfilter-threshold": threshold_files,
    "ackfilter-delayed": delayed_files,
    "ackfilter-multi": multi_files,
}


def stale() -> list[Path]:
    """Files that differ from (or are missing against) what this script generates, and
    generated-looking files it no longer produces."""
    out = []
    for entry, gen in GENERATED.items():
        d = HERE / entry
        want = gen()
        for name, text in want.items():
            p = d / name
            if not p.exists() or p.read_text(encoding="utf-8") != text:
                out.append(p)
        if d.exists():
            for p in d.glob("*.toml"):
                if p.name != "paper.toml" and p.name not in want:
                    out.append(p)
    return out


def write() -> list[Path]:
    """(Re)write every generated file; returns those written."""
    written = []
    for entry, gen in GENERATED.items():
        d = HERE / entry
        d.mkdir(parents=True, exist_ok=True)
        for name, text in gen().items():
            p = d / name
            if not p.exists() or p.read_text(encoding="utf-8") != text:
                p.write_text(text, encoding="utf-8")
                written.append(p)
    return written


def main(argv: list[str]) -> int:
    if argv[1:] == ["--check"]:
        bad = stale()
        for p in bad:
            print(f"stale: {p}", file=sys.stderr)
        return 1 if bad else 0
    for p in write():
        print(f"wrote {p}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
