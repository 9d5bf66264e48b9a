"""Generate the checked-in scenario files of the aggregate rate control reproductions.

`python -m asymlink.repro.aggregate_gen` rewrites `scenarios/aggregate-{shaping,policing,
window}/*.toml` (not `paper.toml`); `--check` exits with status 1 if a file differs from
what this script produces (a test runs it). Every value here is a parameter fixed for all
arms of an entry; `paper.toml` of each entry says why.

The topology is the paper's Fig. 1(b): a server, the provider's router, and three clients
with round-trip times of 50, 300 and 600 ms. The server's access link is a separate hop
(edge router -> provider router) so that its queue is a router's ERED queue, as in §4.1.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent / "scenarios"

PAPER = (
    'Mehra, Tewari & Kandlur, "Design Considerations for Rate Control of Aggregated TCP\n'
    '# Connections" (NOSSDAV 1999)'
)

#: Client link one-way delays: 2 * (1 + 4 + d) ms = 50, 300, 600 ms of propagation RTT.
CLIENT_DELAYS_MS = (20, 145, 295)
RTTS_MS = (50, 300, 600)
#: Client link rates (kbit/s): §4.1, "equal" and "unequal" (Fig. 1(b)).
LINK_RATES = {"equal": (500, 500, 500), "unequal": (1000, 500, 100)}

#: The aggregate's profile: r_m = 500 kbit/s, B = 40 KB (2 rtt_av r_m), L_m = one
#: 1000-byte segment with its 40 header bytes, no peak limit.
PROFILE = '{ depth = "40KB", rate = "500kbit", max_packet = "1040B" }'
TIMER = "15ms"

#: Shaping arms (metric keys) and their token-sharing scheme.
SHAPING_SCHEMES = {
    "none": None,
    "partitioned": '{ kind = "partitioned", depth = "equal" }',
    "partitioned_rtt": '{ kind = "partitioned", depth = "rtt" }',
    "common_sequential": '{ kind = "common", order = "sequential" }',
    "common_fcfs": '{ kind = "common", order = "fcfs" }',
    "common_lru": '{ kind = "common", order = "lru" }',
    "logical": '{ kind = "logical", depth = "rtt" }',
}

SCHEME_TEXT = {
    "partitioned": "a partitioned bucket (r_m/3 and B/3 each, §4.2.1, Fig. 4(a))",
    "partitioned_rtt": "a partitioned bucket with RTT-proportional depths (§4.2.1, Fig. 4(b))",
    "common_sequential": "a common bucket served in list order (§4.2.2, Fig. 7(a))",
    "common_fcfs": "a common bucket served first come, first served (§4.2.2, Fig. 7(b))",
    "common_lru": "a common bucket served least recently used first (§4.2.2, Fig. 7(c,d))",
    "common": "a common bucket (§4.2.2, Fig. 8)",
    "logical": "a common bucket with logical partitions, RTT-weighted (§4.2.3, Figs. 10, 11)",
}

#: Policing arms (metric keys) and their scheme.
POLICING_SCHEMES = {
    "none": None,
    "partitioned": '{ kind = "partitioned", depth = "equal" }',
    "partitioned_rtt": '{ kind = "partitioned", depth = "rtt" }',
    "common": '{ kind = "common", order = "fcfs" }',
    "logical": '{ kind = "logical", depth = "rtt" }',
}

#: Window arms: the congestion-avoidance increase of the aggregate's connections.
RTT_AV = "316667us"  # (50 + 300 + 600) / 3 ms
WINDOW_RULES = {
    "standard": None,
    "aggregate_fair": f'{{ kind = "aggregate_fair", rtt_av = "{RTT_AV}" }}',
    "constant_rate": '{ kind = "constant_rate", a = 100.0 }',
    "increase_by_k": '{ kind = "increase_by_k", k = 4.0, min_rtt = "100ms" }',
}
RULE_TEXT = {
    "standard": "standard NewReno congestion avoidance (g = 1)",
    "aggregate_fair": "g(rtt) = rtt^2 / rtt_av^2, rtt_av = 316.7 ms (§5, aggregate fairness)",
    "constant_rate": "Constant-Rate, g = a rtt^2 with a = 100 /s^2 (Floyd 1991)",
    "increase_by_k": "Increase-by-K, g = 4 for RTTs of 100 ms and more (Henderson et al. 1998)",
}
#: The reference connections of the window entry's competition runs: RTT = rtt_av.
REF_DELAY = "153333us"  # 2 * (1 + 4 + 153.333) ms = 316.67 ms


def _topology(rates: tuple[int, int, int], client_queue: str, extra_clients: int = 0) -> str:
    nodes = [
        '[[nodes]]\nname = "edge"\nkind = "router"',
        '[[nodes]]\nname = "isp"\nkind = "router"',
    ]
    nodes += [f'[[nodes]]\nname = "client{i + 1}"' for i in range(3)]
    nodes += [f'[[nodes]]\nname = "ref{i + 1}"' for i in range(extra_clients)]
    links = [
        '[[links]]\nname = "lan"\na = "server"\nb = "edge"\nrate = "10Mbit"\ndelay = "1ms"',
        '[[links]]\nname = "access"\na = "edge"\nb = "isp"\nrate = "1Mbit"\ndelay = "4ms"\n'
        'to_b = { queue = { kind = "ered", limit = "50p", min_th = "5p", max_th = "15p", '
        "max_p = 0.1, marked_factor = 1.5 } }",
    ]
    for i, (rate, delay) in enumerate(zip(rates, CLIENT_DELAYS_MS, strict=True)):
        links.append(
            f'[[links]]\nname = "c{i + 1}"\na = "isp"\nb = "client{i + 1}"\n'
            f'rate = "{rate}kbit"\ndelay = "{delay}ms"\n'
            f"to_b = {{ queue = {client_queue} }}"
        )
    for i in range(extra_clients):
        links.append(
            f'[[links]]\nname = "r{i + 1}"\na = "isp"\nb = "ref{i + 1}"\n'
            f'rate = "10Mbit"\ndelay = "{REF_DELAY}"\n'
            f"to_b = {{ queue = {client_queue} }}"
        )
    return "\n\n".join(nodes) + "\n\n" + "\n\n".join(links) + "\n"


def _conditioner(scheme: str | None, action: str) -> str:
    if scheme is None:
        return ""
    return (
        "\n[nodes.conditioner]\n"
        f'timer = "{TIMER}"\n'
        'triggers = "own"\n'
        "[[nodes.conditioner.policies]]\n"
        'name = "server"\n'
        'filter = { src = "10.0.0.1" }\n'
        f"profile = {PROFILE}\n"
        f"action = {action}\n"
        f"scheme = {scheme}\n"
    )


def _flows(tcp: list[str] | None = None, names: tuple[str, ...] = ("conn1", "conn2", "conn3"),
           clients: tuple[str, ...] = ("client1", "client2", "client3")) -> str:
    out = []
    for i, (name, client) in enumerate(zip(names, clients, strict=True)):
        spec = f'[[flows]]\nname = "{name}"\nfrom = "server"\nto = "{client}"\n'
        if tcp is not None and tcp[i]:
            spec += f"tcp = {tcp[i]}\n"
        spec += 'app = { kind = "bulk", open = "receiver" }'
        out.append(spec)
    return "\n\n".join(out) + "\n"


def _diagram(rates: tuple[int, int, int], queue: str, client_note: str) -> str:
    r = [f"{x} kbit/s" for x in rates]
    return f"""\
#                                       +--c1 {r[0]:>11}, 20 ms--> client1  RTT  50 ms
#  server ==lan== edge ===access=== isp +--c2 {r[1]:>11}, 145 ms-> client2  RTT 300 ms
#  10.0.0.1   10 Mbit/s   1 Mbit/s      +--c3 {r[2]:>11}, 295 ms-> client3  RTT 600 ms
#             1 ms        4 ms, ERED 50p (min 5p, max 15p, max_p 0.1,
#                         marked 1.5x less likely dropped)
#                 client links: {queue}{client_note}
#  ACKs return over the same links (1000-packet FIFOs). Endless downloads, `paper` TCP
#  (NewReno, 1000-byte segments + 40 header bytes, an ACK per segment, IW 1, RTO min 1 s).
"""


MONITOR = """\
[monitor]
interval = "1s"
flows = true
queues = true
links = true
events = false
"""


def shaping(scheme: str, links: str) -> str:
    rates = LINK_RATES[links]
    what = (
        "No rate control: the reference (Fig. 3)."
        if SHAPING_SCHEMES[scheme] is None
        else f"The server shapes the aggregate of its connections (all traffic from 10.0.0.1) to\n"
        f"# <B 40 KB, r_m 500 kbit/s, no peak limit, L_m 1040 B> at its TCP output with\n"
        f"# {SCHEME_TEXT[scheme]};\n"
        f"# shaping timer {TIMER}, a sender also retries when its own ACKs arrive."
    )
    head = (
        f'# aggregate-shaping: "{scheme}", {links} client links.\n# {PAPER}, §4.\n#\n'
        + _diagram(rates, "drop-tail 20p", "")
        + f"#\n# {what}\n"
    )
    return (
        head
        + f'name = "aggregate-shaping-{scheme}-{links}"\n'
        + f'description = "aggregate shaping: {scheme}, {links} client links"\n'
        + 'duration = "200s"\nseed = 1\ntcp = "paper"\n\n'
        + MONITOR
        + '\n[[nodes]]\nname = "server"\naddr = "10.0.0.1"\n'
        + _conditioner(SHAPING_SCHEMES[scheme], '{ kind = "shape" }')
        + "\n"
        + _topology(rates, '{ kind = "fifo", limit = "20p" }')
        + "\n"
        + _flows()
    )


#: The packet captures the policing entry adds when it runs (a dotted-path override of
#: `monitor.capture`): the first 40 bytes of every packet toward each client, to count
#: the marked (compliant) bytes. Not in the files, which then run without `--out`.
CAPTURES = [
    {"link": f"c{i}", "dir": "to_b", "file": f"c{i}.pcap", "snaplen": 40} for i in (1, 2, 3)
]


def policing(scheme: str, links: str) -> str:
    rates = LINK_RATES[links]
    what = (
        "No conditioning: every packet unmarked (the reference)."
        if POLICING_SCHEMES[scheme] is None
        else "The server polices the aggregate of its connections (all traffic from 10.0.0.1)\n"
        "# with <B 40 KB, r_m 500 kbit/s, no peak limit, L_m 1040 B> at its TCP output:\n"
        "# in-profile packets are marked DSCP 10 (AF11), the rest go unmarked;\n"
        f"# {SCHEME_TEXT[scheme]}."
    )
    head = (
        f'# aggregate-policing: "{scheme}", {links} client links.\n# {PAPER}, §4.2.\n'
        "#\n"
        + _diagram(rates, "drop-tail 20p", "")
        + f"#\n# {what}\n"
        + "# `asymlink reproduce` adds 40-byte captures toward each client (CAPTURES) to count\n"
        + "# the marked bytes.\n"
    )
    return (
        head
        + f'name = "aggregate-policing-{scheme}-{links}"\n'
        + f'description = "aggregate policing and marking: {scheme}, {links} client links"\n'
        + 'duration = "200s"\nseed = 1\ntcp = "paper"\n\n'
        + MONITOR
        + '\n[[nodes]]\nname = "server"\naddr = "10.0.0.1"\n'
        + _conditioner(POLICING_SCHEMES[scheme], '{ kind = "police_mark", dscp = 10 }')
        + "\n"
        + _topology(rates, '{ kind = "fifo", limit = "20p" }')
        + "\n"
        + _flows()
    )


def window(rule: str, versus: bool) -> str:
    inc = WINDOW_RULES[rule]
    tcp = None if inc is None else [f'{{ profile = "paper", ca_increase = {inc} }}'] * 3
    refs = 3 if versus else 0
    diagram = """\
#                                       +--c1 10 Mbit/s, 20 ms----> client1  RTT  50 ms
#  server ==lan== edge ===access=== isp +--c2 10 Mbit/s, 145 ms---> client2  RTT 300 ms
#  10.0.0.1   10 Mbit/s   1 Mbit/s      +--c3 10 Mbit/s, 295 ms---> client3  RTT 600 ms
#             1 ms        4 ms, RED 50p (min 5p, max 15p, max_p 0.1)
"""
    if versus:
        diagram += (
            "#                                 (isp) +--r1..r3 10 Mbit/s, 153.3 ms--> "
            "ref1..3  RTT 316.7 ms\n"
        )
    diagram += (
        "#  The access link is the only bottleneck. Endless downloads, `paper` TCP (NewReno,\n"
        "#  1000-byte segments, an ACK per segment, IW 1, RTO min 1 s).\n"
    )
    what = f"The aggregate's three connections use {RULE_TEXT[rule]}."
    if versus:
        what += (
            "\n# Three standard connections with RTT = rtt_av (316.7 ms) share the bottleneck: "
            "the\n# aggregate's total against n standard connections at rtt_av."
        )
    name = f"vs-{rule}" if versus else rule
    flows = _flows(tcp)
    if versus:
        flows += "\n" + _flows(None, ("ref1", "ref2", "ref3"), ("ref1", "ref2", "ref3"))
    return (
        f'# aggregate-window: "{name}" (§5, not evaluated by the paper).\n# {PAPER}.\n#\n'
        + diagram
        + f"#\n# {what}\n"
        + f'name = "aggregate-window-{name}"\n'
        + f'description = "aggregate window adaptation: {name}"\n'
        + 'duration = "300s"\nseed = 1\ntcp = "paper"\n\n'
        + MONITOR
        + '\n[[nodes]]\nname = "server"\naddr = "10.0.0.1"\n\n'
        + _topology((10_000, 10_000, 10_000), '{ kind = "fifo", limit = "100p" }', refs)
        .replace('rate = "10000kbit"', 'rate = "10Mbit"')
        + "\n"
        + flows
    )


def files() -> dict[Path, str]:
    """Every generated file and its text."""
    out: dict[Path, str] = {}
    for links in LINK_RATES:
        for scheme in SHAPING_SCHEMES:
            out[HERE / "aggregate-shaping" / f"{scheme}-{links}.toml"] = shaping(scheme, links)
        for scheme in POLICING_SCHEMES:
            out[HERE / "aggregate-policing" / f"{scheme}-{links}.toml"] = policing(scheme, links)
    for rule in WINDOW_RULES:
        out[HERE / "aggregate-window" / f"{rule}.toml"] = window(rule, versus=False)
        out[HERE / "aggregate-window" / f"vs-{rule}.toml"] = window(rule, versus=True)
    return out


def stale() -> list[Path]:
    """Generated files that are missing or differ from what this script produces."""
    return [p for p, text in files().items() if not p.exists() or p.read_text() != text]


def main(argv: list[str]) -> int:
    if "--check" in argv:
        bad = stale()
        for p in bad:
            print(f"stale: {p}")
        return 1 if bad else 0
    for p, text in files().items():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
