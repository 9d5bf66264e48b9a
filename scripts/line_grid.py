"""Line mode over a grid of access lines, in the simulator.

    python scripts/line_grid.py              # the 32 points, about 20 s
    python scripts/line_grid.py --fairness   # two home hosts, 1 flow vs 8, each direction

For each line (downstream {1, 8, 24, 100} Mbit/s, asymmetry {8:1, 20:1}, ATM or PTM
framing, 50- or 1000-packet modem and DSLAM buffers) a middlebox with only
`line = { down, up, linklayer }` sits between a home client and the line; Linux hosts at
their defaults. Two runs of 30 s: a download alone, then a download and an upload; pings
every 200 ms; everything measured from 8 s. Printed per point, with a mark per goal
(`.` met, `X` not):

* the download during the upload is at least 90 % of the download alone;
* the upload is at least 80 % of (the shaped uplink rate - the wire rate of the pure ACKs
  that crossed the uplink);
* the ping p90, alone and under both loads, is at most the base RTT (14.4 ms) + one
  1500-byte packet's time on the uplink + 20 ms.

With `--fairness`, each point instead runs two home hosts on separate addresses, one with
one bulk flow and one with eight, once uploading and once downloading (30 s, measured from
8 s), and marks whether each host's goodput is within 10 % of half the total.
"""

from __future__ import annotations

import sys

import numpy as np

from asymlink import _native

BASE_RTT_MS = 14.4


def scenario(down: str, up: str, framing: str, buf: int, flows: list[str], dur: int) -> str:
    ll = ('{ framing = "atm", overhead = 10 }' if framing == "atm"
          else '{ framing = "ptm", overhead = 30 }')
    s = f'''
duration = "{dur}s"
tcp = "linux"
[monitor]
interval = "0.5s"
events = false
[[nodes]]
name = "client"
[[nodes]]
name = "mbox"
kind = "router"
[[nodes]]
name = "isp"
kind = "router"
[[nodes]]
name = "server"
[[links]]
name = "lan"
a = "client"
b = "mbox"
rate = "1Gbit"
delay = "100us"
[[links]]
name = "adsl"
a = "mbox"
b = "isp"
rate = "{down}"
delay = "5ms"
linklayer = {ll}
to_a = {{ queue = {{ kind = "fifo", limit = "{buf}p" }} }}
to_b = {{ rate = "{up}", queue = {{ kind = "fifo", limit = "{buf}p" }} }}
[[links]]
name = "core"
a = "isp"
b = "server"
rate = "1Gbit"
delay = "2ms"
[[middleboxes]]
node = "mbox"
a = "lan"
b = "adsl"
line = {{ down = "{down}", up = "{up}", linklayer = {ll} }}
[[flows]]
name = "ping"
from = "client"
to = "server"
port = 7
app = {{ kind = "ping", interval = "200ms", size = "64B", port = 7 }}
'''
    if "down" in flows:
        s += ('[[flows]]\nname = "down"\nfrom = "server"\nto = "client"\nport = 80\n'
              'app = { kind = "bulk", open = "receiver" }\n')
    if "up" in flows:
        s += ('[[flows]]\nname = "up"\nfrom = "client"\nto = "server"\nport = 5001\n'
              'app = { kind = "bulk" }\n')
    return s


def run(src: str) -> dict:
    sim = _native.Simulation(src, "line-grid")
    sim.run()
    return dict(sim.results())


def goodput_mbps(r: dict, flow: str, a: float, b: float) -> float:
    f = r["tables"]["flows"]
    t = np.asarray(f["t"])
    m = np.asarray(f["flow"]) == flow
    tt, dd = t[m], np.asarray(f["bytes_delivered"], dtype=float)[m]
    ia, ib = int(np.searchsorted(tt, a)), min(int(np.searchsorted(tt, b)), len(tt) - 1)
    return float((dd[ib] - dd[ia]) * 8 / (tt[ib] - tt[ia]) / 1e6)


def ping_p90_ms(r: dict, a: float) -> float:
    ms = r["tables"]["measurements"]
    t, v = np.asarray(ms["t"]), np.asarray(ms["value"])
    return float(np.percentile(v[t >= a], 90) * 1e3)


def wire_bytes(ip_len: int, framing: str) -> float:
    if framing == "atm":
        return float(-(-(ip_len + 10 + 8) // 48) * 53)
    return (ip_len + 30) * 65 / 64


def point(down_m: int, asym: int, framing: str, buf: int, dur: int = 30, warm: float = 8.0) -> str:
    up_bps = down_m * 1e6 / asym
    down, up = f"{down_m}Mbit", f"{int(up_bps)}bit"
    alone = run(scenario(down, up, framing, buf, ["down"], dur))
    both = run(scenario(down, up, framing, buf, ["down", "up"], dur))
    d_alone = goodput_mbps(alone, "down", warm, dur)
    d_both = goodput_mbps(both, "down", warm, dur)
    upload = goodput_mbps(both, "up", warm, dur)
    p_alone, p_both = ping_p90_ms(alone, warm), ping_p90_ms(both, warm)
    q = both["tables"]["queue_summary"]
    i = list(q["queue"]).index("adsl:to_b")
    ack_mbps = float(q["tx_pure_ack_wire_bytes"][i]) * 8 / dur / 1e6
    up_goal = 0.8 * (0.95 * up_bps / 1e6 - ack_mbps)
    p_goal = BASE_RTT_MS + wire_bytes(1500, framing) * 8 / up_bps * 1e3 + 20
    marks = "".join("." if ok else "X" for ok in (
        d_both >= 0.9 * d_alone, upload >= up_goal, max(p_alone, p_both) <= p_goal))
    return (f"{down_m:>3}M {asym}:1 {framing} {buf:>4}p {marks} download alone {d_alone:.2f}"
            f" with upload {d_both:.2f} ({d_both / d_alone:.0%}) upload {upload:.3f}"
            f" (goal {up_goal:.3f}) ping p90 {p_alone:.0f}/{p_both:.0f} ms (goal {p_goal:.0f})")


def two_hosts(src: str, way: str) -> str:
    """`src` with the client replaced by two hosts behind a LAN switch: `h1` with one bulk
    flow and `h2` with eight, all uploading (`way = "up"`) or all downloading."""
    src = src.replace('[[nodes]]\nname = "client"\n',
                      '[[nodes]]\nname = "h1"\n[[nodes]]\nname = "h2"\n'
                      '[[nodes]]\nname = "switch"\nkind = "router"\n')
    src = src.replace('a = "client"\nb = "mbox"',
                      'a = "switch"\nb = "mbox"')
    src = src.replace('from = "client"', 'from = "h1"')
    for h in ("h1", "h2"):
        src += (f'[[links]]\nname = "{h}-lan"\na = "{h}"\nb = "switch"\n'
                'rate = "1Gbit"\ndelay = "100us"\n')
    for h, n in (("h1", 1), ("h2", 8)):
        for k in range(n):
            ends = ('from = "server"\nto = "{h}"', 'open = "receiver"') if way == "down" \
                else ('from = "{h}"\nto = "server"', '')
            app = "{ kind = \"bulk\"" + (", " + ends[1] if ends[1] else "") + " }"
            src += (f'[[flows]]\nname = "{h}-{k}"\n' + ends[0].format(h=h)
                    + f'\nport = {6000 + 10 * k + (1 if h == "h2" else 0)}\napp = {app}\n')
    return src


def fairness(down_m: int, asym: int, framing: str, buf: int, dur: int = 30,
             warm: float = 8.0) -> str:
    up_bps = down_m * 1e6 / asym
    down, up = f"{down_m}Mbit", f"{int(up_bps)}bit"
    out = f"{down_m:>3}M {asym}:1 {framing} {buf:>4}p"
    for way in ("up", "down"):
        r = run(two_hosts(scenario(down, up, framing, buf, [], dur), way))
        h1 = goodput_mbps(r, "h1-0", warm, dur)
        h2 = sum(goodput_mbps(r, f"h2-{k}", warm, dur) for k in range(8))
        share = h1 / (h1 + h2)
        ok = "." if abs(share - 0.5) <= 0.05 else "X"
        out += f" {ok} {way}: 1 flow {h1:.3f} vs 8 flows {h2:.3f} Mbit/s (h1 {share:.1%})"
    return out


def main() -> None:
    each = fairness if "--fairness" in sys.argv[1:] else point
    for down in (1, 8, 24, 100):
        for asym in (8, 20):
            for framing in ("atm", "ptm"):
                for buf in (50, 1000):
                    print(each(down, asym, framing, buf), flush=True)


if __name__ == "__main__":
    main()
