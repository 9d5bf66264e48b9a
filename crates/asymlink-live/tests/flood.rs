//! A flood of new flows through the box (ACK filtering, HTB with the ack FIFO, the
//! five-class classifier with its peer-to-peer host table) does not grow its memory: every
//! per-flow table is bounded and evicts. Alone in its test binary so that the process's
//! resident memory is this test's.

use asymlink_core::pipeline::Dir;
use asymlink_core::time::Instant;
use asymlink_live::clock::{Clock, FakeClock};
use asymlink_live::packet::LinkType;
use asymlink_live::runtime::{EventLoop, MemIo};
use asymlink_live::BoxConfig;
use etherparse::PacketBuilder;

const CONFIG: &str = r#"
[interfaces]
a = "a0"
b = "b0"
batch = 1024
[stats]
interval = "1000s"

[to_b]
classifier = { preset = "five_class", local = ["10.0.0.0/8"], p2p_hosts = { threshold = "100kbit", window = "1s", hold = "10s", max_hosts = 64 } }
qdisc = { kind = "htb", default = "default", classes = [
  { name = "root", rate = "1Gbit" },
  { name = "ack", parent = "root", rate = "500Mbit", ceil = "1Gbit", prio = 0, queue = { kind = "ack_filter", policy = "classic", limit = "200p", max_connections = 256 } },
  { name = "interactive", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 1 },
  { name = "good", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 3 },
  { name = "default", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 5 },
  { name = "bad", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 7 },
] }

[to_a]
classifier = { preset = "five_class" }
qdisc = { kind = "htb", default = "default", classes = [
  { name = "root", rate = "1Gbit" },
  { name = "ack", parent = "root", rate = "500Mbit", ceil = "1Gbit", prio = 0, queue = { kind = "ack_fifo", limit = "20p", drop = "lowest_seq", max_connections = 256 } },
  { name = "interactive", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 1 },
  { name = "good", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 3 },
  { name = "default", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 5 },
  { name = "bad", parent = "root", rate = "100Mbit", ceil = "1Gbit", prio = 7 },
] }
"#;

/// A TCP segment from `src:sport` to `dst:dport` (a pure ACK when `payload` is 0).
fn seg(src: [u8; 4], sport: u16, dst: [u8; 4], dport: u16, ack: u32, payload: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4(src, dst, 64)
        .tcp(sport, dport, 1000, 65535)
        .ack(ack);
    let mut out = Vec::new();
    b.write(&mut out, &vec![0x5a; payload]).unwrap();
    out
}

fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: u64 = s.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

#[test]
fn a_flood_of_new_flows_keeps_state_and_memory_bounded() {
    let cfg = BoxConfig::parse(CONFIG).unwrap();
    cfg.validate().unwrap();
    let clock = FakeClock::new();
    let io = MemIo::new(clock.clone(), LinkType::Ethernet);
    let mut el = EventLoop::new(clock.clone(), io, cfg, 1).unwrap();
    el.set_log(Box::new(|_| {}));
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    const FLOWS: u64 = 60_000;
    const PER_MS: u64 = 100;
    let mut rss_warm = 0;
    let mut max_entries = [0u64; 2];
    let mut max_hosts = 0u64;
    for batch in 0..FLOWS / PER_MS {
        let t = Instant::from_millis(batch);
        for _ in 0..PER_MS {
            let r = rnd();
            // A new 5-tuple: a local host of 10.0.0.0/8, a random port, a remote server.
            let local = [10, (r >> 8) as u8, (r >> 16) as u8, (r >> 24) as u8 | 1];
            let remote = [192, 0, 2, (r >> 32) as u8 | 1];
            let port = 1024 + (r >> 40) as u16 % 60000;
            let rport = [80, 443, 6881, 22][(r >> 56) as usize % 4];
            let ack = (r >> 20) as u32;
            el.io()
                .arrive(t, 0, seg(local, port, remote, rport, ack, 0));
            el.io()
                .arrive(t, 0, seg(local, port, remote, rport, ack, 100));
            el.io()
                .arrive(t, 1, seg(remote, rport, local, port, ack, 0));
        }
        // Run until the batch is through (sent, or dropped by the short ack FIFO).
        el.step().unwrap();
        while el.engine().held(Dir::ToB) + el.engine().held(Dir::ToA) > 0 {
            el.step().unwrap();
        }
        el.io().sent.clear();
        if batch % 25 == 0 {
            let snap = el.snapshot(clock.now());
            for (i, d) in ["to_b", "to_a"].iter().enumerate() {
                let e = snap["directions"][d]["qdisc"]["flow_entries"]
                    .as_u64()
                    .unwrap();
                max_entries[i] = max_entries[i].max(e);
            }
            max_hosts = max_hosts.max(
                snap["directions"]["to_b"]["classifier_hosts"]["tracked"]
                    .as_u64()
                    .unwrap(),
            );
        }
        if batch == 100 {
            rss_warm = rss_bytes();
        }
    }
    el.engine().check_conservation().unwrap();
    let rss_end = rss_bytes();
    let snap = el.snapshot(clock.now());
    let b = &snap["directions"]["to_b"];
    let a = &snap["directions"]["to_a"];
    // Every table stayed within its bound, and evicted to stay there.
    assert!(
        max_entries[0] <= 256 && max_entries[1] <= 256,
        "{max_entries:?}"
    );
    assert!(max_hosts <= 64, "{max_hosts}");
    let ack_b = &b["qdisc"]["children"]["ack"];
    assert_eq!(
        ack_b["dequeued"], FLOWS,
        "every ACK through the ack class: {ack_b}"
    );
    assert!(b["classifier_hosts"]["evicted"].as_u64().unwrap() > FLOWS / 2);
    assert_eq!(b["received"], 2 * FLOWS);
    assert_eq!(a["received"], FLOWS);
    // Memory: what the first 10 000 flows used is all it takes; the next 50 000 add
    // (almost) nothing. (A table growing per flow would cost > 100 bytes × 50 000.)
    let growth = rss_end.saturating_sub(rss_warm);
    assert!(
        growth < 2 << 20,
        "resident memory grew by {growth} bytes ({rss_warm} -> {rss_end})"
    );
}
