//! A flood of new flows through the box's engine (`cargo run --release -p asymlink-bench
//! --example flood [-- FLOWS]`, default 1 000 000): spoofed SYNs toward side a (each a new flow
//! for the window rewriter's handshake table and the aggregate shaper's connection
//! table) alternating with pure ACKs of new connections from side a (each a new entry for
//! the ACK filter and the five-class classifier), while one legitimate connection
//! exchanges a data segment and an ACK every 1 000 flood packets.
//!
//! Reported: the per-packet cost of each block of 10 000 flood packets (the first block
//! after warm-up and the last, and their ratio: a cost that grows with the number of
//! flows seen would show an O(table) scan), the per-flow table sizes against their caps,
//! the resident memory, and the legitimate connection's rewritten windows and order.
//! Exits non-zero if a table exceeds its cap, the connection is reordered, or its
//! rewritten windows differ from a run without the flood. No wall-clock assertion: the figures are for
//! `docs/performance.md`.
//!
//! A second part drives the ACK filter alone, congested, with per-connection filtering
//! (`policy = "perflow"`) and each drop rule: half the arrivals are ACKs of 50 hot
//! connections, half ACKs of new ones, and the link takes one packet per three arrivals,
//! so every hot arrival counts the active connections and every arrival overflows the
//! buffer and picks a victim. With `free_below = 0` no entry is freed for a low rate, so
//! the table fills to its cap; the per-packet cost is reported with a 1 024-entry and a
//! 65 536-entry table: a scan of the table would make the second dearer.

use asymlink_core::packet::HeaderPacket;
use asymlink_core::pipeline::Dir;
use asymlink_core::qdisc::ack_filter::{AckDropPolicy, AckFilter, AckFilterConfig, AckPolicy};
use asymlink_core::qdisc::{Drops, Qdisc};
use asymlink_core::time::{Duration, Instant};
use asymlink_core::units::{Limit, Rate};
use asymlink_core::wire::{Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr};
use asymlink_live::config::BoxConfig;
use asymlink_live::engine::Engine;
use asymlink_live::packet::{LinkType, LivePacket};
use core::net::{IpAddr, Ipv4Addr};
use std::time::Instant as WallClock;

const CONFIG: &str = r#"
seed = 3
rewrite = [{ kind = "rwnd", receivers = "a", policy = { link_rate = "20Mbit", qlength_delay = "100ms", max_flows = 4096 } }]
[interfaces]
a = "a0"
b = "b0"

[to_b]
classifier = { preset = "five_class", local = ["10.0.0.0/8"], p2p_hosts = { threshold = "100kbit", window = "1s", hold = "10s", max_hosts = 64 } }
qdisc = { kind = "htb", default = "default", classes = [
  { name = "root", rate = "10Gbit" },
  { name = "ack", parent = "root", rate = "5Gbit", ceil = "10Gbit", prio = 0, queue = { kind = "ack_filter", policy = "classic", limit = "1000p", max_connections = 1024 } },
  { name = "interactive", parent = "root", rate = "1Gbit", ceil = "10Gbit", prio = 1 },
  { name = "good", parent = "root", rate = "1Gbit", ceil = "10Gbit", prio = 3 },
  { name = "default", parent = "root", rate = "1Gbit", ceil = "10Gbit", prio = 5 },
  { name = "bad", parent = "root", rate = "1Gbit", ceil = "10Gbit", prio = 7 },
] }

[to_a]
qdisc = { kind = "aggregate", max_conns = 1024, policies = [{ profile = { depth = "1MB", rate = "10Gbit" }, action = { kind = "shape" }, scheme = { kind = "common" } }] }
"#;

const CAPS: [(&str, &str, u64); 2] = [("to_b", "ack_filter", 1024), ("to_a", "aggregate", 1024)];
const RWND_CAP: u64 = 4096;

fn v4(a: [u8; 4]) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(a))
}

#[allow(clippy::too_many_arguments)]
fn tcp(
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
    seq: u32,
    ack: u32,
    flags: TcpFlags,
    opts: TcpOptions,
    payload: u32,
) -> Vec<u8> {
    let h = Headers::tcp(
        IpRepr::new(src, dst),
        TcpRepr {
            src_port: sport,
            dst_port: dport,
            seq: SeqNumber(seq),
            ack: SeqNumber(ack),
            flags,
            window: 65535,
            urgent: 0,
            opts,
        },
        payload,
    );
    let mut out = Vec::new();
    h.emit(0x5a, &mut out).expect("emits");
    out
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

struct Legit {
    /// Rewritten windows of its ACKs as they leave, in order.
    windows: Vec<u16>,
    /// Sequence numbers of its data segments as they leave, in order.
    data_seqs: Vec<u32>,
}

const CLIENT: [u8; 4] = [10, 0, 0, 2];
const SERVER: [u8; 4] = [192, 0, 2, 1];

fn collect(e: &mut Engine, now: Instant, out: &mut Vec<LivePacket>, legit: &mut Legit) {
    for d in [Dir::ToB, Dir::ToA] {
        e.poll_transmit(now, d, out);
    }
    for p in out.drain(..) {
        if let Some(h) = asymlink_core::packet::Pkt::headers(&p) {
            if let Some(t) = h.tcp_repr() {
                let k = h.flow_key();
                if k.src == v4(CLIENT)
                    && t.src_port == 5000
                    && h.payload_len == 0
                    && !t.flags.contains(TcpFlags::SYN)
                {
                    legit.windows.push(t.window);
                } else if k.src == v4(SERVER) && t.src_port == 80 && h.payload_len > 0 {
                    legit.data_seqs.push(t.seq.0);
                }
            }
        }
        e.on_sent(p);
    }
}

struct Run {
    legit: Legit,
    blocks: Vec<f64>,
    rss_at: Vec<(u64, u64)>,
    snap: serde_json::Value,
}

const BLOCK: u64 = 10_000;

/// Run `flows` flood packets (or, with `flood` false, only the legitimate connection over
/// the same time).
fn run(flows: u64, flood: bool) -> Run {
    let cfg = BoxConfig::parse(CONFIG).expect("parses");
    cfg.validate().expect("valid");
    let mut e = Engine::new(&cfg, LinkType::RawIp, 3).expect("builds");
    let mut out = Vec::new();
    let mut legit = Legit {
        windows: Vec::new(),
        data_seqs: Vec::new(),
    };
    let mut now = Instant::ZERO;
    let (client, server) = (v4(CLIENT), v4(SERVER));
    let ws = TcpOptions {
        mss: Some(1460),
        wscale: Some(7),
        sack_permitted: true,
        ..TcpOptions::default()
    };
    // The legitimate connection's handshake.
    e.handle_frame(
        now,
        Dir::ToB,
        tcp(client, 5000, server, 80, 1, 0, TcpFlags::SYN, ws, 0),
        0,
    );
    now += Duration::from_micros(100);
    e.handle_frame(
        now,
        Dir::ToA,
        tcp(
            server,
            80,
            client,
            5000,
            9,
            2,
            TcpFlags::SYN | TcpFlags::ACK,
            ws,
            0,
        ),
        0,
    );
    collect(&mut e, now, &mut out, &mut legit);
    let (mut data_seq, mut acked) = (10u32, 10u32);
    let mut exchange = |e: &mut Engine, now: Instant| {
        e.handle_frame(
            now,
            Dir::ToA,
            tcp(
                server,
                80,
                client,
                5000,
                data_seq,
                2,
                TcpFlags::ACK,
                TcpOptions::default(),
                1448,
            ),
            0,
        );
        data_seq = data_seq.wrapping_add(1448);
        e.handle_frame(
            now,
            Dir::ToB,
            tcp(
                client,
                5000,
                server,
                80,
                2,
                acked.wrapping_add(1448),
                TcpFlags::ACK,
                TcpOptions::default(),
                0,
            ),
            0,
        );
        acked = acked.wrapping_add(1448);
    };
    for _ in 0..20 {
        now += Duration::from_micros(500);
        exchange(&mut e, now);
        collect(&mut e, now, &mut out, &mut legit);
    }

    let mut blocks: Vec<f64> = Vec::new();
    let mut rss_at = Vec::new();
    let mut t0 = WallClock::now();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..flows {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        now += Duration::from_micros(1);
        let frame = if i % 2 == 0 {
            // A spoofed SYN from anywhere to a host on side a.
            let src = v4([
                (x >> 8) as u8 | 1,
                (x >> 16) as u8,
                (x >> 24) as u8,
                (x >> 32) as u8,
            ]);
            let dst = v4([10, 0, (x >> 40) as u8, (x >> 48) as u8]);
            (
                Dir::ToA,
                tcp(
                    src,
                    (x >> 3) as u16 | 1024,
                    dst,
                    80,
                    x as u32,
                    0,
                    TcpFlags::SYN,
                    ws,
                    0,
                ),
            )
        } else {
            // A pure ACK of a new connection from side a.
            let src = v4([10, 1, (x >> 40) as u8, (x >> 48) as u8]);
            (
                Dir::ToB,
                tcp(
                    src,
                    (x >> 3) as u16 | 1024,
                    server,
                    443,
                    1,
                    x as u32,
                    TcpFlags::ACK,
                    TcpOptions::default(),
                    0,
                ),
            )
        };
        if flood {
            e.handle_frame(now, frame.0, frame.1, 0);
        }
        if i % 1000 == 999 {
            exchange(&mut e, now);
        }
        e.handle_timeout(now);
        collect(&mut e, now, &mut out, &mut legit);
        if (i + 1) % BLOCK == 0 {
            let dt = t0.elapsed();
            blocks.push(dt.as_nanos() as f64 / BLOCK as f64);
            rss_at.push((i + 1, rss_bytes()));
            t0 = WallClock::now();
        }
    }
    // Drain.
    for _ in 0..100_000 {
        let Some(t) = e.poll_at() else { break };
        now = now.max(t);
        e.handle_timeout(now);
        collect(&mut e, now, &mut out, &mut legit);
    }
    e.check_conservation().expect("conservation");
    Run {
        legit,
        blocks,
        rss_at,
        snap: e.snapshot(),
    }
}

/// The ACK filter alone (see the module documentation): `n` arrivals, per-packet cost
/// (ns) of each block of `BLOCK` arrivals, and the entries tracked at the end.
fn ack_filter_flood(rule: AckDropPolicy, max_conns: u32, n: u64) -> (Vec<f64>, usize) {
    let cfg = AckFilterConfig::new(AckPolicy::Perflow)
        .with_drop(rule)
        .with_limit(Limit::Packets(1000))
        .with_max_connections(max_conns)
        .with_window(Duration::from_millis(100))
        // No entry is freed for a low rate: the table fills up to its cap.
        .with_free_below(0.0);
    let mut q: AckFilter<HeaderPacket> = AckFilter::new(&cfg, Some(Rate::mbps(1))).expect("valid");
    let mut d = Drops::new();
    let mut hot_ack = [0u32; 50];
    let mut x: u64 = 0x2545_f491_4f6c_dd1d;
    let mut now = Instant::ZERO;
    let mut blocks = Vec::new();
    let mut t0 = WallClock::now();
    for i in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        now += Duration::from_micros(1);
        let (src, port, ack) = if i % 2 == 0 {
            let h = (x % 50) as usize;
            hot_ack[h] = hot_ack[h].wrapping_add(1448);
            ([10, 2, 0, h as u8], 1024 + h as u16, hot_ack[h])
        } else {
            (
                [10, 3, (x >> 40) as u8, (x >> 48) as u8],
                (x >> 3) as u16 | 1024,
                x as u32,
            )
        };
        let h = Headers::tcp(
            IpRepr::new(v4(src), v4(SERVER)),
            TcpRepr {
                src_port: port,
                dst_port: 443,
                seq: SeqNumber(1),
                ack: SeqNumber(ack),
                flags: TcpFlags::ACK,
                window: 1000,
                urgent: 0,
                opts: TcpOptions::default(),
            },
            0,
        );
        q.enqueue(now, HeaderPacket::new(h), &mut d);
        if i % 3 == 2 {
            let _ = q.dequeue(now, &mut d);
        }
        d.drain().for_each(std::mem::drop);
        if (i + 1) % BLOCK == 0 {
            blocks.push(t0.elapsed().as_nanos() as f64 / BLOCK as f64);
            t0 = WallClock::now();
        }
    }
    (blocks, q.connections())
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s.get(s.len() / 2).copied().unwrap_or(0.0)
}

fn main() {
    let flows: u64 = std::env::args()
        .skip(1)
        .find_map(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let control = run(flows, false);
    let Run {
        legit,
        blocks,
        rss_at,
        snap,
    } = run(flows, true);
    let mut ok = true;
    println!("flood: {flows} new flows (half spoofed SYNs toward a, half new ACK flows from a)");
    if blocks.len() >= 3 {
        // The first block includes filling the tables; the second is the first steady one.
        let first = blocks[1];
        let last = *blocks.last().unwrap();
        let n = blocks.len();
        let mut sorted = blocks.clone();
        sorted.sort_by(|a, b| a.total_cmp(b));
        println!(
            "per-packet cost: block 2 (10k-20k flows) {first:.0} ns, last block ({}k-{}k) {last:.0} ns, ratio {:.2}; median of {n} blocks {:.0} ns",
            (flows - BLOCK) / 1000,
            flows / 1000,
            last / first,
            sorted[n / 2]
        );
    }
    let step = (blocks.len() / 10).max(1);
    let trend: Vec<String> = (blocks.iter().enumerate())
        .filter(|(i, _)| i % step == step - 1)
        .map(|(i, b)| format!("{}k: {b:.0}", (i as u64 + 1) * BLOCK / 1000))
        .collect();
    println!("per-packet cost by flows seen (ns): {}", trend.join(", "));
    if let (Some(a), Some(b)) = (rss_at.get(1), rss_at.last()) {
        println!(
            "resident memory: {:.1} MiB after {} flows, {:.1} MiB after {} flows",
            a.1 as f64 / 1048576.0,
            a.0,
            b.1 as f64 / 1048576.0,
            b.0
        );
    }
    let dirs = &snap["directions"];
    for (dir, kind, cap) in CAPS {
        let q = &dirs[dir]["qdisc"];
        // The discipline itself or its ACK class child.
        let entries = q["flow_entries"].as_u64().unwrap_or(0);
        println!("{dir} {kind}: flow entries {entries} (cap {cap}; a tree sums its leaves)");
        if entries > cap {
            ok = false;
        }
    }
    let rw = &dirs["to_b"]["rewriters"][0];
    let tracked = rw["tracked"].as_u64().unwrap_or(0);
    println!(
        "rwnd: tracked {tracked} (cap {RWND_CAP}), evicted {}, table_full {}",
        rw["evicted"], rw["table_full"]
    );
    if tracked > RWND_CAP {
        ok = false;
    }
    let hosts = &dirs["to_b"]["classifier_hosts"];
    println!("classifier hosts: {hosts}");
    let w = &legit.windows;
    let (wmin, wmax) = (w.iter().min().copied(), w.iter().max().copied());
    println!(
        "legitimate connection: {} ACKs left (rewritten windows {wmin:?}..{wmax:?}), {} data segments left",
        legit.windows.len(),
        legit.data_seqs.len()
    );
    if legit.windows != control.legit.windows || legit.data_seqs != control.legit.data_seqs {
        println!("FAIL: the legitimate connection's windows or data differ from the run without the flood");
        ok = false;
    } else {
        println!("legitimate connection: windows and data identical to the run without the flood");
    }
    let in_order = legit
        .data_seqs
        .windows(2)
        .all(|p| SeqNumber(p[1]).diff(SeqNumber(p[0])) > 0);
    println!("legitimate data in order: {in_order}");
    ok &= in_order;
    for rule in [AckDropPolicy::LongestQueue, AckDropPolicy::HighestRate] {
        let mut line = format!("ACK filter alone, perflow, drop {rule:?}, {flows} arrivals:");
        for max_conns in [1024, 65536] {
            let (blocks, entries) = ack_filter_flood(rule, max_conns, flows);
            let (first, last) = (
                blocks.get(1).copied().unwrap_or(0.0),
                blocks.last().copied().unwrap_or(0.0),
            );
            line += &format!(
                " table {max_conns}: median {:.0} ns (block 2 {first:.0}, last {last:.0}), {entries} entries;",
                median(&blocks)
            );
            if entries > max_conns as usize {
                ok = false;
            }
        }
        println!("{line}");
    }
    if !ok {
        std::process::exit(1);
    }
}
