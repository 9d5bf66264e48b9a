//! The invariant harness the robustness tests, the fuzz-corpus replay and the `pipeline`
//! fuzz target share: frames go through the whole per-packet pipeline of an [`Engine`]
//! (parse → rewriters → classifier → disciplines → emulated link), and after every frame
//! and at the end the harness checks that
//! * nothing panics;
//! * every frame is accounted for: received = sent + discarded + held, per direction
//!   ([`Engine::check_conservation`]);
//! * a frame leaves only as it entered, except where a rewriter may write, and every
//!   checksum that verified still verifies ([`LivePacket::is_rewrite_of`]: DSCP/ECN and
//!   the IPv4 header checksum; the TCP window and checksum, never of a signed segment).
//!
//! Three configurations cover the mechanisms: [`PIPELINE`] (DSCP rewriter, prio with
//! TBF/FIFO bands, link emulation with loss, ATM framing and a modem buffer),
//! [`MECHANISMS`] (the mechanisms with per-flow state under small caps: ACK filters, the
//! ack FIFO with lowest-sequence drop, HTB charging ATM cells, the five-class classifier
//! and its peer-to-peer host table) and [`REWRITING`] (the receiver-window rewriter with
//! a four-flow table and the ACK shaper, per connection, in front of a congested reverse
//! link).
//!
//! [`run_records`] is the `pipeline` fuzz target's input format: one byte choosing the
//! configuration, then records `[dt (50 µs units)][flags: bit 0 = side][len][len bytes]`.
//! [`check_frame`] is the `frame` fuzz target: one frame's parse and edits.

use crate::config::BoxConfig;
use crate::engine::Engine;
use crate::packet::{ipv4_header_ok, LinkType, LivePacket};
use asymlink_core::packet::Pkt;
use asymlink_core::pipeline::Dir;
use asymlink_core::time::{Duration, Instant};
use asymlink_core::wire::Ecn;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::OnceLock;

/// DSCP rewriter, prio with TBF/FIFO bands, link emulation with loss, ATM and a modem
/// buffer.
pub const PIPELINE: &str = r#"
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

/// The mechanisms that keep per-flow state, under small caps.
pub const MECHANISMS: &str = r#"
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

/// The receiver-window rewriter (side a's receivers, a four-flow table) and the ACK
/// shaper (per connection, three buckets) on the ACKs of side a, which it slows while the
/// data queue toward a is congested; DSCP set toward a.
pub const REWRITING: &str = r#"
seed = 13
rewrite = [
  { kind = "rwnd", receivers = "a", policy = { link_rate = "4Mbit", qlength_delay = "50ms", max_flows = 4 } },
  { kind = "set_dscp", dscp = 10, dir = "to_a" },
]
[interfaces]
a = "a0"
b = "b0"
[to_b.qdisc]
kind = "ack_shaper"
threshold = "4p"
leak = { kind = "interval", interval = "1ms", congested_intervals = 3 }
per_connection = true
buckets = 3
max_delay = "20ms"
ack_limit = "30p"
limit = "30p"
[to_a]
qdisc = { kind = "fifo", limit = "20p" }
[emulation.to_b]
rate = "10Mbit"
loss = 0.05
modem_buffer = "20p"
[emulation.to_a]
rate = "4Mbit"
delay = "1ms"
"#;

/// Every configuration, in the order the fuzz input's first byte selects them.
pub const CONFIGS: [&str; 3] = [PIPELINE, MECHANISMS, REWRITING];

/// The parsed and validated configuration `CONFIGS[i % 3]` (parsed once per process).
pub fn config(i: usize) -> &'static BoxConfig {
    static PARSED: OnceLock<Vec<BoxConfig>> = OnceLock::new();
    let all = PARSED.get_or_init(|| {
        CONFIGS
            .iter()
            .map(|s| {
                let c = BoxConfig::parse(s).expect("harness configuration parses");
                c.validate().expect("harness configuration is valid");
                c
            })
            .collect()
    });
    &all[i % all.len()]
}

/// What a run did.
#[derive(Debug)]
pub struct Outcome {
    /// Frames fed.
    pub received: u64,
    /// Frames that left.
    pub sent: u64,
    /// The engine's counters at the end, before shutdown ([`Harness::finish`]; `Null` from
    /// [`run_records`], which skips it: building the JSON report cost more than the run).
    pub snapshot: Value,
}

/// An engine under invariant checks.
pub struct Harness {
    engine: Engine,
    lt: LinkType,
    now: Instant,
    /// Input frames, keyed by their bytes with every byte a rewrite may write cleared.
    originals: HashMap<Vec<u8>, Vec<Vec<u8>>>,
    out: Vec<LivePacket>,
    received: u64,
    sent: u64,
}

impl Harness {
    /// A harness around an engine built from `cfg` for Ethernet frames.
    pub fn new(cfg: &BoxConfig) -> Harness {
        let lt = LinkType::Ethernet;
        Harness {
            engine: Engine::new(cfg, lt, 7).expect("harness engine builds"),
            lt,
            now: Instant::ZERO,
            originals: HashMap::new(),
            out: Vec::new(),
            received: 0,
            sent: 0,
        }
    }

    /// Feed `frame` on side `dir` `after` the previous one, run the timers, send what is
    /// due, and check every frame that leaves and the accounting.
    ///
    /// # Panics
    /// When an invariant breaks.
    pub fn feed(&mut self, after: Duration, dir: Dir, frame: Vec<u8>) {
        self.now += after;
        let key = LivePacket::new(frame.clone(), self.lt, self.now, 0).rewritable_cleared();
        let same = self.originals.entry(key).or_default();
        if !same.contains(&frame) {
            same.push(frame.clone());
        }
        self.engine.handle_frame(self.now, dir, frame, 0);
        self.received += 1;
        self.step();
        self.check();
    }

    fn step(&mut self) {
        self.engine.handle_timeout(self.now);
        for d in [Dir::ToB, Dir::ToA] {
            self.engine.poll_transmit(self.now, d, &mut self.out);
        }
        for p in std::mem::take(&mut self.out) {
            let ok = self
                .originals
                .get(&p.rewritable_cleared())
                .is_some_and(|c| c.iter().any(|o| p.is_rewrite_of(o)));
            assert!(
                ok,
                "a frame left that never entered, or corrupted: {:02x?}",
                p.frame()
            );
            self.sent += 1;
            self.engine.on_sent(p);
        }
    }

    fn check(&self) {
        if let Err(e) = self.engine.check_conservation() {
            panic!("accounting: {e}");
        }
    }

    /// Run the engine's timers until nothing is due (at most `wakeups` times), checking
    /// every frame that leaves, then shut it down.
    ///
    /// # Panics
    /// When an invariant breaks.
    pub fn finish(self, wakeups: usize) -> Outcome {
        self.finish_with(wakeups, true)
    }

    fn finish_with(mut self, wakeups: usize, snapshot: bool) -> Outcome {
        for _ in 0..wakeups {
            let Some(t) = self.engine.poll_at() else {
                break;
            };
            self.now = self.now.max(t);
            self.step();
        }
        self.check();
        let snapshot = if snapshot {
            self.engine.snapshot()
        } else {
            Value::Null
        };
        self.engine.shutdown();
        self.check();
        Outcome {
            received: self.received,
            sent: self.sent,
            snapshot,
        }
    }
}

/// Run fuzz input `data` (first byte: the configuration, `CONFIGS[data[0] % 3]`; then
/// records `[dt (50 µs units)][flags: bit 0 = side][len][len bytes]`, a short last record
/// taking what is left) through a fresh engine under the invariant checks. The outcome
/// has no snapshot (the JSON report took over 40 % of a fuzz execution).
///
/// # Panics
/// When an invariant breaks.
pub fn run_records(data: &[u8]) -> Outcome {
    let Some((&which, mut rest)) = data.split_first() else {
        return Harness::new(config(0)).finish_with(0, false);
    };
    let mut h = Harness::new(config(which as usize));
    while rest.len() >= 3 {
        let (dt, flags, len) = (rest[0], rest[1], rest[2] as usize);
        rest = &rest[3..];
        let (frame, tail) = rest.split_at(len.min(rest.len()));
        rest = tail;
        let dir = if flags & 1 == 0 { Dir::ToB } else { Dir::ToA };
        h.feed(Duration::from_micros(dt as u64 * 50), dir, frame.to_vec());
    }
    h.finish_with(1000, false)
}

/// The `frame` fuzz target's checks on one input: a control byte (bit 0: raw IP instead
/// of Ethernet; the rest: DSCP/ECN and window values), then a frame. Parsing never panics
/// and keeps the bytes; a parsed layout lies inside the frame; editing the window or
/// DSCP/ECN never panics, changes nothing when refused, keeps a valid IPv4 header
/// checksum valid, and touches at most the field and its checksum.
///
/// # Panics
/// When an invariant breaks.
pub fn check_frame(data: &[u8]) {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let lt = if ctl & 1 == 1 {
        LinkType::RawIp
    } else {
        LinkType::Ethernet
    };
    let mut p = LivePacket::new(frame.to_vec(), lt, Instant::ZERO, 0);
    assert_eq!(p.frame(), frame);
    let l3 = frame.len() - p.ip_bytes().len();
    if let Some(l) = p.layout().copied() {
        assert!(p.headers().is_some());
        assert!(l.ip_len <= frame.len() - l3);
        assert!(l.l4_offset + l.l4_header_len <= l.ip_len);
    } else {
        assert!(p.unparsed().is_some());
    }
    let valid_before = ipv4_header_ok(p.ip_bytes());
    let before = p.frame().to_vec();
    let dscp = ctl >> 2;
    if !p.set_dscp_ecn(dscp, Ecn::from_bits(ctl >> 1)) {
        assert_eq!(p.frame(), &before[..], "a refused edit changes nothing");
    } else {
        if valid_before {
            assert!(ipv4_header_ok(p.ip_bytes()), "checksum stays valid");
        }
        assert!(
            p.is_rewrite_of(&before),
            "only DSCP/ECN and the IPv4 checksum"
        );
    }
    let before = p.frame().to_vec();
    if !p.set_tcp_window(u16::from_be_bytes([ctl, ctl.wrapping_mul(7)])) {
        assert_eq!(p.frame(), &before[..]);
    } else {
        // Only the window and the TCP checksum may change.
        let diff: Vec<usize> = (0..before.len())
            .filter(|&i| before[i] != p.frame()[i])
            .collect();
        assert!(diff.len() <= 4, "{diff:?}");
        assert!(p.is_rewrite_of(&before), "only the window and its checksum");
    }
}
