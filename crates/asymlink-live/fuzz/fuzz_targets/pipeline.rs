//! The whole per-packet pipeline of the box: a sequence of frames arriving on either side
//! at increasing times goes through parse → rewriter (DSCP) → classifier → prio/TBF →
//! emulated link (rate, loss, modem buffer) → out. Whatever the frames:
//! * nothing panics;
//! * every frame is accounted for: received = sent + discarded + held, per direction;
//! * a frame that leaves differs from the one that entered at most in the IPv4 TOS byte
//!   and header checksum (the DSCP rewrite), or the IPv6 traffic class, and a valid
//!   IPv4 header checksum stays valid.
//!
//! Input: records of [dt_us: u8][flags: u8][len: u8][len bytes]; flags bit 0 = side.
#![no_main]

use asymlink_core::pipeline::Dir;
use asymlink_core::time::{Duration, Instant};
use asymlink_live::config::BoxConfig;
use asymlink_live::engine::Engine;
use asymlink_live::packet::LinkType;
use libfuzzer_sys::fuzz_target;
use std::collections::HashMap;

const CONFIG: &str = r#"
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

fuzz_target!(|data: &[u8]| {
    let cfg = BoxConfig::parse(CONFIG).unwrap();
    let mut e = Engine::new(&cfg, LinkType::Ethernet, 7).unwrap();
    let mut now = Instant::ZERO;
    let mut originals: HashMap<Vec<u8>, ()> = HashMap::new();
    let mut out = Vec::new();
    let mut rest = data;
    while rest.len() >= 3 {
        let (dt, flags, len) = (rest[0], rest[1], rest[2] as usize);
        rest = &rest[3..];
        let n = len.min(rest.len());
        let (frame, tail) = rest.split_at(n);
        rest = tail;
        now = now + Duration::from_micros(dt as u64 * 50);
        let dir = if flags & 1 == 0 { Dir::ToB } else { Dir::ToA };
        originals.insert(frame.to_vec(), ());
        e.handle_frame(now, dir, frame.to_vec(), 0);
        e.handle_timeout(now);
        for d in [Dir::ToB, Dir::ToA] {
            e.poll_transmit(now, d, &mut out);
        }
        for p in out.drain(..) {
            // The original is the input frame of the same length that differs only where
            // the rewrite may write.
            let ok = originals.keys().any(|o| p.is_rewrite_of(o));
            assert!(
                ok,
                "a frame left that never entered, or corrupted: {:02x?}",
                p.frame()
            );
            e.on_sent(p);
        }
        e.check_conservation().unwrap();
    }
    // Drain everything that is still due.
    for _ in 0..1000 {
        let Some(t) = e.poll_at() else { break };
        now = now.max(t);
        e.handle_timeout(now);
        for d in [Dir::ToB, Dir::ToA] {
            e.poll_transmit(now, d, &mut out);
        }
        for p in out.drain(..) {
            e.on_sent(p);
        }
    }
    e.check_conservation().unwrap();
    e.shutdown();
    e.check_conservation().unwrap();
});
