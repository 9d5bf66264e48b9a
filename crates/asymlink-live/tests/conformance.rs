//! Conformance: the simulator and the box are one datapath.
//!
//! A simulator scenario puts a middlebox on router `box` between two links named `a` and
//! `b`, with TCP connections of the `linux` profile (MSS, window scale, SACK, timestamps;
//! payloads are zeros) crossing it both ways:
//!
//! ```text
//!  client ─c─ r1 ─a─ box ─b─ r2 ─s─ server
//! ```
//!
//! Captures record what enters the box (`a` toward b, `b` toward a: their transmission
//! start, plus serialisation and propagation, is the arrival) and what leaves its links
//! (`s` toward the server and `c` toward the client start transmitting as a packet
//! arrives at an idle fast router, so their timestamps are the arrivals). The same input
//! frames, at the same nanoseconds, go through the live box's event loop under the fake
//! clock, configured with the same pipelines, `[emulation.to_b]` = link `b`'s direction
//! toward b and `[emulation.to_a]` = link `a`'s direction toward a, and the same seed: the
//! frames it sends must be the simulator's, byte for byte and nanosecond for nanosecond.

use asymlink_core::pipeline::Dir;
use asymlink_core::qdisc::DropReason;
use asymlink_core::time::Instant;
use asymlink_core::units::Rate;
use asymlink_live::clock::{Clock, FakeClock};
use asymlink_live::packet::LinkType;
use asymlink_live::runtime::{Control, EventLoop, MemIo};
use asymlink_live::BoxConfig;
use asymlink_sim::{RunOptions, Simulation};
use std::path::Path;

const SEED: u64 = 42;
const SECS: u64 = 4;

/// The middlebox: DSCP rewriting toward the server, ACKs first toward the server, an ACK
/// filter toward the client (it watches the line go idle).
const PIPELINE: &str = r#"
rewrite = [{ kind = "set_dscp", dscp = 10, dir = "to_b" }]
[to_b]
classifier = { default = "bulk", rules = [{ class = "ack", match = { pure_ack = true } }] }
qdisc = { kind = "prio", bands = [{ classes = ["ack"], queue = { kind = "fifo", limit = "20p" } }, { classes = ["bulk"], queue = { kind = "fifo", limit = "30p" } }] }
[to_a]
qdisc = { kind = "fifo", limit = "40p" }
"#;

/// The line toward the server (link `b`, direction to_b) and toward the client (link `a`,
/// direction to_a): the keys are the same in both runtimes.
const LINE_TO_B: &str = r#"rate = "1Mbit"
delay = "15ms"
loss = 0.02
linklayer = { encap = "llc_snap_routed" }
modem_buffer = "12p"
"#;
const LINE_TO_A: &str = r#"rate = "4Mbit"
delay = "5ms"
loss = 0.01
"#;

/// Rate and delay of the directions that feed the box (a toward b, b toward a).
const IN_RATE: &str = "100Mbit";
const IN_DELAY_NS: u64 = 1_000_000;

fn inline(table: &str) -> String {
    format!(
        "{{ {} }}",
        table
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect::<Vec<_>>()
            .join(", ")
    )
}

fn scenario() -> String {
    let mb: String = PIPELINE
        .replace("[to_b]", "[middleboxes.to_b]")
        .replace("[to_a]", "[middleboxes.to_a]");
    format!(
        r#"
duration = "{SECS}s"
seed = {SEED}
tcp = "linux"
[[nodes]]
name = "client"
[[nodes]]
name = "r1"
kind = "router"
[[nodes]]
name = "box"
kind = "router"
[[nodes]]
name = "r2"
kind = "router"
[[nodes]]
name = "server"
[[links]]
name = "c"
a = "client"
b = "r1"
rate = "10Gbit"
[[links]]
name = "a"
a = "r1"
b = "box"
rate = "{IN_RATE}"
delay = "1ms"
to_a = {to_a}
[[links]]
name = "b"
a = "box"
b = "r2"
rate = "{IN_RATE}"
delay = "1ms"
to_b = {to_b}
[[links]]
name = "s"
a = "r2"
b = "server"
rate = "10Gbit"
[[flows]]
name = "up"
from = "client"
to = "server"
app = {{ kind = "bulk" }}
[[flows]]
name = "down"
from = "server"
to = "client"
start = "0.3s"
app = {{ kind = "bulk" }}
[[flows]]
name = "typing"
from = "client"
to = "server"
tcp = {{ profile = "linux", nagle = false }}
app = {{ kind = "telnet", interval = "150ms" }}
[monitor]
capture = [
  {{ link = "a", dir = "to_b", file = "in_to_b.pcap" }},
  {{ link = "b", dir = "to_a", file = "in_to_a.pcap" }},
  {{ link = "s", dir = "to_b", file = "out_to_b.pcap" }},
  {{ link = "c", dir = "to_a", file = "out_to_a.pcap" }},
]
[[middleboxes]]
node = "box"
a = "a"
b = "b"
{mb}
"#,
        to_a = inline(LINE_TO_A),
        to_b = inline(LINE_TO_B),
    )
}

/// (timestamp ns, bytes) of a nanosecond pcap file.
fn read_pcap(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let b = std::fs::read(path).unwrap();
    let magic = u32::from_ne_bytes(b[0..4].try_into().unwrap());
    assert_eq!(magic, 0xa1b2_3c4d, "a nanosecond pcap in native byte order");
    let u32_at = |o: usize| u32::from_ne_bytes(b[o..o + 4].try_into().unwrap());
    let mut out = Vec::new();
    let mut o = 24;
    while o + 16 <= b.len() {
        let t = u32_at(o) as u64 * 1_000_000_000 + u32_at(o + 4) as u64;
        let incl = u32_at(o + 8) as usize;
        assert_eq!(incl, u32_at(o + 12) as usize, "whole packets captured");
        out.push((t, b[o + 16..o + 16 + incl].to_vec()));
        o += 16 + incl;
    }
    out
}

#[test]
fn simulator_and_box_send_the_same_frames_at_the_same_nanoseconds() {
    let dir = std::env::temp_dir().join(format!("asymlink-conformance-{}", std::process::id()));
    let opts = RunOptions {
        out_dir: Some(dir.clone()),
        seed: None,
        threads: 1,
    };
    let mut sim = Simulation::from_toml(&scenario(), opts).unwrap();
    sim.run();
    sim.check_conservation().unwrap();
    drop(sim); // flushes the captures
    let read = |f: &str| read_pcap(&dir.join(f));
    let (in_b, in_a) = (read("in_to_b.pcap"), read("in_to_a.pcap"));
    let (out_b, out_a) = (read("out_to_b.pcap"), read("out_to_a.pcap"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(
        in_b.len() > 300 && in_a.len() > 300,
        "{} {}",
        in_b.len(),
        in_a.len()
    );

    // The box's inputs: arrival = start of transmission + serialisation + propagation.
    let rate: Rate = IN_RATE.parse().unwrap();
    let mut arrivals: Vec<(u64, usize, Vec<u8>)> = Vec::new();
    for (side, trace) in [(0usize, &in_b), (1, &in_a)] {
        for (t, bytes) in trace {
            let at = t + rate.tx_nanos(bytes.len() as u64) + IN_DELAY_NS;
            arrivals.push((at, side, bytes.clone()));
        }
    }
    arrivals.sort_by_key(|a| a.0);

    let cfg = format!(
        "seed = {SEED}\n{PIPELINE}\n[emulation.to_b]\n{LINE_TO_B}\n[emulation.to_a]\n{LINE_TO_A}\n\
         [interfaces]\nkind = \"tun\"\na = \"a0\"\nb = \"b0\"\n[stats]\ninterval = \"1000s\"\n"
    );
    let cfg = BoxConfig::parse(&cfg).unwrap();
    cfg.validate().unwrap();
    let clock = FakeClock::new();
    let mut io = MemIo::new(clock.clone(), LinkType::RawIp);
    for (t, side, bytes) in arrivals {
        io.arrive(Instant(t), side, bytes);
    }
    let mut el = EventLoop::new(clock.clone(), io, cfg, SEED).unwrap();
    el.set_log(Box::new(|_| {}));
    let end = Instant::from_secs(SECS);
    while clock.now() <= end {
        assert_eq!(el.step().unwrap(), Control::Continue);
        if el.io().idle {
            break;
        }
    }
    el.engine().check_conservation().unwrap();
    let c = el.engine().counters(Dir::ToB);
    assert!(
        c.discarded.get(DropReason::LinkLoss) > 0
            && c.discarded.get(DropReason::ModemBufferFull) > 0,
        "the trace exercises loss and the modem buffer: {:?}",
        c.discarded
    );
    // What the box sent before the simulator's end, per side (0 = toward a).
    let all_sent = std::mem::take(&mut el.io().sent);
    let sent = |side: usize| -> Vec<(u64, Vec<u8>)> {
        all_sent
            .iter()
            .filter(|s| s.1 == side && s.0 < end)
            .map(|s| (s.0.as_nanos(), s.2.clone()))
            .collect()
    };
    let before = |v: &[(u64, Vec<u8>)]| -> Vec<(u64, Vec<u8>)> {
        v.iter().filter(|x| x.0 < end.as_nanos()).cloned().collect()
    };
    for (name, live, simulated) in [
        ("toward b", sent(1), before(&out_b)),
        ("toward a", sent(0), before(&out_a)),
    ] {
        let first_diff = live
            .iter()
            .zip(&simulated)
            .position(|(l, s)| l != s)
            .unwrap_or(live.len().min(simulated.len()));
        assert!(
            live == simulated,
            "{name}: {} frames from the box, {} from the simulator; first difference at \
             #{first_diff}: box {:?}, simulator {:?}",
            live.len(),
            simulated.len(),
            live.get(first_diff).map(|x| (x.0, x.1.len())),
            simulated.get(first_diff).map(|x| (x.0, x.1.len())),
        );
        assert!(live.len() > 300, "{name}: {} frames", live.len());
    }
}
