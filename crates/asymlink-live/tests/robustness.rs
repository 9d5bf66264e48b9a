//! The `pipeline` fuzz target's invariants on stable Rust, in every `cargo test`: a long
//! seeded stream of mutated frames — valid TCP segments (IPv4 and IPv6, ACKs and data,
//! with timestamps or a TCP-MD5 signature) with bytes flipped, truncated, extended, or
//! replaced by garbage — arriving on both sides of the box, through the whole per-packet
//! pipeline in each of the harness's configurations ([`asymlink_live::harness`]: the
//! fuzz target's DSCP rewriter, prio and link emulation; the mechanisms with per-flow
//! state under small caps; the receiver-window rewriter with the ACK shaper). The
//! harness checks that nothing panics, that received = sent + discarded + held per
//! direction after every frame and at the end, and that a frame leaves only as it
//! entered except where a rewriter may write (DSCP/ECN; the TCP window, never of a signed
//! segment), with every checksum that verified still verifying.
//!
//! The coverage-guided search itself is `crates/asymlink-live/fuzz` (nightly); its corpus
//! is replayed by `tests/fuzz_corpus.rs`.

use asymlink_core::pipeline::Dir;
use asymlink_core::time::Duration;
use asymlink_live::config::BoxConfig;
use asymlink_live::harness::{self, Harness, Outcome};
use etherparse::PacketBuilder;

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

/// A well-formed TCP segment (IPv4 or IPv6, with timestamps or, one in eight, signed
/// with TCP-MD5; pure ACK or data) of one of six connections. ACK numbers and timestamps grow with `clock` and the window stays,
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
        .ack(clock.wrapping_mul(1448));
    let tcp = if r.below(8) == 0 {
        // Signed with TCP-MD5 (RFC 2385): kind 19, length 18, a 16-byte digest.
        let mut o = vec![19, 18];
        o.extend((0..16).map(|_| r.next() as u8));
        o.extend([1, 1]);
        tcp.options_raw(&o).unwrap()
    } else {
        tcp.options(&[etherparse::TcpOptionElement::Timestamp(clock, clock)])
            .unwrap()
    };
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

fn run(config: &BoxConfig, seed: u64, frames: usize) -> Outcome {
    let mut h = Harness::new(config);
    let mut r = Rng(seed);
    for i in 0..frames {
        let after = Duration::from_micros(r.below(400));
        let dir = if r.below(3) == 0 { Dir::ToA } else { Dir::ToB };
        let f = frame(&mut r, 1 + i as u32);
        h.feed(after, dir, f);
    }
    h.finish(100_000)
}

#[test]
fn mutated_frames_through_the_fuzz_targets_pipeline() {
    for seed in [1, 2, 3] {
        let o = run(harness::config(0), 0x9e37_79b9_7f4a_7c15 ^ seed, 20_000);
        assert!(o.sent > o.received / 4, "most frames cross: {o:?}");
    }
}

#[test]
fn mutated_frames_through_every_stateful_mechanism() {
    for seed in [1, 2, 3] {
        let o = run(harness::config(1), 0x2545_f491_4f6c_dd1d ^ seed, 20_000);
        assert!(o.sent > o.received / 4, "most frames cross: {o:?}");
        // The stateful paths were exercised.
        let dirs = &o.snapshot["directions"];
        let superseded = dirs["to_a"]["discarded"]["ack_superseded"].as_u64();
        assert!(superseded.unwrap_or(0) > 0, "ACK filter: {}", dirs["to_a"]);
        let evicted = dirs["to_b"]["classifier_hosts"]["evicted"].as_u64();
        assert!(evicted.unwrap_or(0) > 0, "host table: {}", dirs["to_b"]);
    }
}

#[test]
fn mutated_frames_through_the_window_rewriter_and_the_ack_shaper() {
    for seed in [1, 2, 3] {
        let o = run(harness::config(2), 0x51_7cc1_b727_220a ^ seed, 20_000);
        assert!(o.sent > o.received / 4, "most frames cross: {o:?}");
        // Windows were rewritten, signed segments left alone, ACKs shaped.
        let to_b = &o.snapshot["directions"]["to_b"];
        let rwnd = &to_b["rewriters"][0];
        assert_eq!(rwnd["kind"], "rwnd");
        assert!(rwnd["rewritten"].as_u64().unwrap() > 100, "{rwnd}");
        assert!(rwnd["signed_untouched"].as_u64().unwrap() > 10, "{rwnd}");
        assert!(rwnd["table_full"].as_u64().unwrap() > 0, "{rwnd}");
        let shaper = &to_b["qdisc"]["counters"];
        assert!(shaper["acks_leaked"].as_u64().unwrap() > 100, "{shaper}");
        assert!(
            shaper["congestion_onsets"].as_u64().unwrap() > 0,
            "{shaper}"
        );
    }
}
