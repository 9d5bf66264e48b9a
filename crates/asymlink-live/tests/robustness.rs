//! The `pipeline` fuzz target's invariants on stable Rust, in every `cargo test`: a long
//! seeded stream of mutated frames — valid TCP segments (IPv4 and IPv6, ACKs and data,
//! with options) with bytes flipped, truncated, extended, or replaced by garbage —
//! arriving on both sides of the box, through the whole per-packet pipeline: the fuzz
//! target's (DSCP rewriter, prio with TBF/FIFO bands, link emulation with loss, ATM and a
//! modem buffer), and one with the mechanisms that keep per-flow state under small caps
//! (ACK filters, the ack FIFO with lowest-sequence drop, HTB charging ATM cells, the
//! five-class classifier and its peer-to-peer host table). Whatever arrives:
//! * nothing panics;
//! * received = sent + discarded + held, per direction, after every frame and at the end;
//! * a frame leaves only as it entered, except where a rewriter may write (the IPv4 TOS
//!   byte and header checksum, the IPv6 traffic class), and a valid IPv4 header checksum
//!   stays valid.
//!
//! The coverage-guided search itself is `crates/asymlink-live/fuzz` (nightly).

use asymlink_core::pipeline::Dir;
use asymlink_core::time::{Duration, Instant};
use asymlink_live::config::BoxConfig;
use asymlink_live::engine::Engine;
use asymlink_live::packet::LinkType;
use etherparse::PacketBuilder;
use std::collections::HashSet;

const FUZZ_CONFIG: &str = r#"
seed = 7
rewrite = [{ kind = "set_dscp", dscp = 46, dir = "to_b" }]
[interfaces]
a = "a0"
b = "b0"
[to_b]
classifier = { default = "bulk", rules = [{ class = "ack", match = { pure_ack = true } }, { class = "small", match = { max_len = 100 } }] }
qdisc = { kind = "prio", bands = [{ classes = ["ack"] }, { classes = ["small"], queue = { kind = "tbf", rate = "1Mbit", burst = "3000B", limit = "20p" } }, { classes = ["bulk"], queue = { kind = "fifo", limit = "10p" } }] }
[to_a]
qdisc = { kind = "fifo", limit = "8p", drop = "head" }
[emulation.to_b]
rate = "2Mbit"
loss = 0.1
modem_buffer = "5p"
linklayer = { encap = "llc_snap_routed" }
[emulation.to_a]
delay = "1ms"
"#;

const MECHANISMS_CONFIG: &str = r#"
seed = 11
[interfaces]
a = "a0"
b = "b0"
[to_b]
classifier = { preset = "five_class", local = ["10.0.0.0/8", "fd00::/8"], p2p_hosts = { threshold = "50kbit", window = "100ms", hold = "1s", max_hosts = 8 } }
qdisc = { kind = "htb", default = "default", linklayer = { encap = "llc_snap_routed" }, classes = [
  { name = "root", rate = "2Mbit" },
  { name = "ack", parent = "root", rate = "1Mbit", ceil = "2Mbit", prio = 0, queue = { kind = "ack_filter", policy = "classic", limit = "20p", max_connections = 4 } },
  { name = "interactive", parent = "root", rate = "200kbit", ceil = "2Mbit", prio = 0, queue = { kind = "ack_fifo", limit = "5p", drop = "lowest_seq", max_connections = 4 } },
  { name = "good", parent = "root", rate = "300kbit", ceil = "2Mbit", prio = 3, queue = { kind = "fifo", limit = "10p" } },
  { name = "default", parent = "root", rate = "300kbit", ceil = "2Mbit", prio = 5, queue = { kind = "fifo", limit = "10p" } },
  { name = "bad", parent = "root", rate = "200kbit", ceil = "2Mbit", prio = 7, queue = { kind = "fifo", limit = "10p" } },
] }
[to_a]
qdisc = { kind = "ack_filter", policy = "classic", limit = "16p", max_connections = 4 }
[emulation.to_b]
rate = "2Mbit"
loss = 0.05
modem_buffer = "8p"
linklayer = { encap = "llc_snap_routed" }
[emulation.to_a]
rate = "10Mbit"
delay = "2ms"
"#;

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// A well-formed TCP segment (IPv4 or IPv6, with timestamps, pure ACK or data) of one of
/// six connections. ACK numbers and timestamps grow with `clock` and the window stays,
/// so queued ACKs of a connection can supersede each other (the ACK filters' work).
fn segment(r: &mut Rng, clock: u32) -> Vec<u8> {
    let conn = r.below(6) as u8;
    let (sport, dport) = (
        1000 + conn as u16,
        [22, 80, 443, 5001, 6881, 9][conn as usize],
    );
    let payload = if r.below(2) == 0 {
        0
    } else {
        r.below(1400) as usize
    };
    let eth = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
    let ip = if r.below(4) == 0 {
        eth.ipv6(
            [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, conn],
            [0x20, 1, 0xd, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
            64,
        )
    } else {
        eth.ipv4([10, 0, 0, conn + 1], [192, 0, 2, 1], 64)
    };
    let tcp = ip
        .tcp(sport, dport, 1_000 + conn as u32, 65535)
        .ack(clock.wrapping_mul(1448))
        .options(&[etherparse::TcpOptionElement::Timestamp(clock, clock)])
        .unwrap();
    let mut out = Vec::new();
    tcp.write(&mut out, &vec![0x5a; payload]).unwrap();
    out
}

/// A frame: a segment, often damaged.
fn frame(r: &mut Rng, clock: u32) -> Vec<u8> {
    let mut f = segment(r, clock);
    match r.below(8) {
        0..=2 => {} // intact
        3 => {
            // flip a few bytes, mostly in the headers
            for _ in 0..1 + r.below(4) {
                let i = r.below(f.len().min(80) as u64) as usize;
                f[i] ^= 1 << r.below(8);
            }
        }
        4 => f.truncate(r.below(f.len() as u64) as usize),
        5 => {
            let n = r.below(64) as usize;
            f.extend((0..n).map(|_| r.next() as u8));
        }
        6 => {
            let n = r.below(200) as usize;
            f = (0..n).map(|_| r.next() as u8).collect();
        }
        _ => {
            // damage a length or offset field on purpose
            let i = [14 + 2, 14 + 3, 14, 14 + 20 + 12, 14 + 4, 14 + 5][r.below(6) as usize];
            if i < f.len() {
                f[i] = r.next() as u8;
            }
        }
    }
    f
}

fn run(config: &str, seed: u64, frames: usize) -> (u64, u64, serde_json::Value) {
    let cfg = BoxConfig::parse(config).unwrap();
    cfg.validate().unwrap();
    let mut e = Engine::new(&cfg, LinkType::Ethernet, 7).unwrap();
    let mut r = Rng(seed);
    let mut now = Instant::ZERO;
    let mut originals: HashSet<Vec<u8>> = HashSet::new();
    let mut out = Vec::new();
    let (mut sent, mut received) = (0u64, 0u64);
    for i in 0..frames {
        now += Duration::from_micros(r.below(400));
        let dir = if r.below(3) == 0 { Dir::ToA } else { Dir::ToB };
        let f = frame(&mut r, 1 + i as u32);
        originals.insert(f.clone());
        e.handle_frame(now, dir, f, 0);
        received += 1;
        e.handle_timeout(now);
        for d in [Dir::ToB, Dir::ToA] {
            e.poll_transmit(now, d, &mut out);
        }
        for p in out.drain(..) {
            assert!(
                originals
                    .iter()
                    .any(|o| o.len() == p.frame().len() && p.is_rewrite_of(o)),
                "a frame left that never entered, or corrupted: {:02x?}",
                p.frame()
            );
            sent += 1;
            e.on_sent(p);
        }
        e.check_conservation().unwrap();
    }
    for _ in 0..100_000 {
        let Some(t) = e.poll_at() else { break };
        now = now.max(t);
        e.handle_timeout(now);
        for d in [Dir::ToB, Dir::ToA] {
            e.poll_transmit(now, d, &mut out);
        }
        for p in out.drain(..) {
            sent += 1;
            e.on_sent(p);
        }
    }
    e.check_conservation().unwrap();
    let snap = e.snapshot();
    e.shutdown();
    e.check_conservation().unwrap();
    (received, sent, snap)
}

#[test]
fn mutated_frames_through_the_fuzz_targets_pipeline() {
    for seed in [1, 2, 3] {
        let (rx, tx, _) = run(FUZZ_CONFIG, 0x9e37_79b9_7f4a_7c15 ^ seed, 20_000);
        assert!(tx > rx / 4, "most frames cross: {tx} of {rx}");
    }
}

#[test]
fn mutated_frames_through_every_stateful_mechanism() {
    for seed in [1, 2, 3] {
        let (rx, tx, snap) = run(MECHANISMS_CONFIG, 0x2545_f491_4f6c_dd1d ^ seed, 20_000);
        assert!(tx > rx / 4, "most frames cross: {tx} of {rx}");
        // The stateful paths were exercised.
        let dirs = &snap["directions"];
        let superseded = dirs["to_a"]["discarded"]["ack_superseded"].as_u64();
        assert!(superseded.unwrap_or(0) > 0, "ACK filter: {}", dirs["to_a"]);
        let evicted = dirs["to_b"]["classifier_hosts"]["evicted"].as_u64();
        assert!(evicted.unwrap_or(0) > 0, "host table: {}", dirs["to_b"]);
    }
}
