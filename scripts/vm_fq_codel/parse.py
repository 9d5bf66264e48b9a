"""Summarise a run of experiment.sh in the VM: python3 parse.py logs/NAME.raw.txt [warmup_s]."""
import json, re, statistics as st, sys

t = open(sys.argv[1]).read()
WARM = float(sys.argv[2]) if len(sys.argv) > 2 else 5.0
PERIOD = 0.25


def sec(n):
    m = re.search(r"=== BEGIN %s ===\n(.*?)=== END %s ===" % (re.escape(n), re.escape(n)), t, re.S)
    return m.group(1) if m else None


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] if v else float("nan")


def us(s):
    m = re.match(r"([\d.]+)(us|ms|s)", s)
    x = float(m.group(1))
    return x * {"us": 1e-3, "ms": 1, "s": 1e3}[m.group(2)]


arms = re.findall(r"=== BEGIN (\w+)\.samples ===", t)
for a in arms:
    samples = sec(a + ".samples").split("qdisc htb 1:")[1:]
    tot, flows = [], []
    for i, s in enumerate(samples):
        if i * PERIOD < WARM:
            continue
        m = re.search(r"qdisc fq_codel 10:.*?backlog (\d+)b (\d+)p", s, re.S)
        tot.append(int(m.group(1)))
        cl = {}
        for c in re.finditer(r"class fq_codel (10:\w+) .*?backlog (\d+)b (\d+)p.*?count (\d+) lastcount (\d+) ldelay (\S+)", s, re.S):
            cl[c.group(1)] = (int(c.group(2)), int(c.group(3)), int(c.group(4)), us(c.group(6)))
        flows.append(cl)
    # The UDP stream's queue: its packets are 1014 bytes on the wire (TCP's 1514).
    size = {}
    for cl in flows:
        for k, (b, p, *_r) in cl.items():
            if p:
                size.setdefault(k, []).append(b / p)
    udp = [k for k, v in size.items() if abs(st.median(v) - 1014) < 60]
    udp_d = [cl[k][3] for cl in flows for k in udp if k in cl]
    udp_b = [cl[k][0] for cl in flows for k in udp if k in cl]
    udp_c = [cl[k][2] for cl in flows for k in udp if k in cl]
    tcp_d = [v[3] for cl in flows for k, v in cl.items() if k not in udp]
    res = {}
    for k in ("h1", "h2", "udp"):
        s = sec(f"{a}.{k}")
        if s:
            e = json.loads(s)["end"]
            res[k] = e.get("sum_received", e.get("sum", {})).get("bits_per_second", 0) / 1e6
    pings = [float(m.group(2)) for m in re.finditer(r"icmp_seq=(\d+) .*?time=([\d.]+)", sec(a + ".ping"))
             if int(m.group(1)) > WARM * 10]
    tc = sec(a + ".tc")
    drops = re.search(r"qdisc fq_codel.*?dropped (\d+)", tc, re.S).group(1)
    sent = re.search(r"qdisc fq_codel.*?Sent (\d+) bytes", tc, re.S).group(1)
    print(f"{a}: samples {len(tot)} after {WARM:.0f} s; standing (total backlog / 10 Mbit/s) p50 {st.median(tot) * 8 / 1e4:.1f} ms"
          f" p90 {pct(tot, .9) * 8 / 1e4:.1f}; TCP flow ldelay p50 {st.median(tcp_d):.1f} ms p90 {pct(tcp_d, .9):.1f}")
    if udp:
        print(f"   UDP queue {udp}: ldelay p50 {st.median(udp_d):.1f} ms p90 {pct(udp_d, .9):.1f}; backlog p50 {st.median(udp_b) / 1014:.0f} packets"
              f" (= {st.median(udp_b) * 8 / 1e3:.0f} ms at 1 Mbit/s); count p50 {st.median(udp_c):.0f} max {max(udp_c)}")
    print(f"   goodput h1 {res.get('h1', 0):.2f} h2 {res.get('h2', 0):.2f} udp {res.get('udp', 0):.2f} Mbit/s; sent {int(sent) * 8 / 1e6:.1f} Mbit;"
          f" drops {drops}; ping p50 {st.median(pings):.1f} p90 {pct(pings, .9):.1f} ms ({len(pings)})")
