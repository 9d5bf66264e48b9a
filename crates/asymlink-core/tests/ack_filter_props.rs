//! Property test of the ACK filter's safety rules: random ACK streams of a few connections
//! (cumulative advances, duplicate ACKs, SACK blocks and D-SACK, ECN echoes, window
//! changes, timestamps, data segments, URG) go through every policy with a buffer large
//! enough that nothing overflows, served at random instants. Once the queue has drained,
//! the sender must have seen, per connection, exactly what the unfiltered stream shows:
//!
//! * the same highest cumulative ACK,
//! * the same SACK coverage above it,
//! * the same latest timestamp echo,
//! * the same window right edge,
//! * every ECE/CWR transition,
//! * for a connection without SACK, a run of at least 3 duplicate ACKs (at the same
//!   acknowledgment number) wherever the unfiltered stream had one,
//!
//! and the filtered stream must be a subsequence of the unfiltered one in which every
//! segment that is not a pure ACK survives.
//!
//! Raise the case count locally with `PROPTEST_CASES=5000 cargo test -p asymlink-core
//! --test ack_filter_props`.

use asymlink_core::packet::HeaderPacket;
use asymlink_core::qdisc::ack_filter::{
    AckFilter, AckFilterConfig, AckPolicy, Delta, Measure, Placement, Service,
};
use asymlink_core::qdisc::{Dequeued, Drops, Qdisc, Verdict};
use asymlink_core::time::{Duration, Instant};
use asymlink_core::units::{Limit, Rate};
use asymlink_core::wire::{
    Headers, IpRepr, SackBlock, SackBlocks, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Timestamp,
};
use core::net::{IpAddr, Ipv4Addr};
use proptest::prelude::*;
use std::collections::BTreeMap;

const MSS: u32 = 1000;

/// What a receiver does next.
#[derive(Clone, Copy, Debug)]
enum Action {
    /// Acknowledge `k` more segments (filling SACKed holes it reaches), and with it maybe
    /// receive an out-of-order segment `block` segments above (with SACK), change the
    /// window, toggle ECE/CWR, or echo an older timestamp.
    Advance {
        k: u32,
        block: u32,
        window: i32,
        ece: bool,
        cwr: bool,
        ts_back: bool,
    },
    /// A duplicate ACK (with SACK: one more out-of-order segment `r` segments above).
    Dup(u32),
    /// Change the window by this much (with the same cumulative ACK: a window update).
    Window(i32),
    /// Toggle ECE.
    Ece,
    /// Toggle CWR.
    Cwr,
    /// A data segment carrying the current ACK.
    Data(u32),
    /// A pure ACK with URG set.
    Urg,
    /// A pure ACK reporting a D-SACK block below the cumulative ACK.
    DSack,
}

fn action() -> impl Strategy<Value = Action> {
    prop_oneof![
        8 => (
            1u32..4,
            prop_oneof![2 => Just(0u32), 1 => 2u32..40],
            prop_oneof![3 => Just(0i32), 1 => -3000i32..3000],
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.1),
            prop::bool::weighted(0.05),
        )
            .prop_map(|(k, block, window, ece, cwr, ts_back)| Action::Advance {
                k,
                block,
                window,
                ece,
                cwr,
                ts_back,
            }),
        4 => (1u32..40).prop_map(Action::Dup),
        1 => (-300i32..300).prop_map(Action::Window),
        1 => Just(Action::Ece),
        1 => Just(Action::Cwr),
        1 => (1u32..1400).prop_map(Action::Data),
        1 => Just(Action::Urg),
        1 => Just(Action::DSack),
    ]
}

/// One step of the script: a connection acts, time passes, the link serves some packets.
#[derive(Clone, Copy, Debug)]
struct Step {
    conn: usize,
    action: Action,
    gap_us: u64,
    serve: u8,
}

fn step(conns: usize) -> impl Strategy<Value = Step> {
    (0..conns, action(), 0u64..6000, 0u8..3).prop_map(|(conn, action, gap_us, serve)| Step {
        conn,
        action,
        gap_us,
        serve,
    })
}

/// Per-connection settings.
#[derive(Clone, Copy, Debug)]
struct ConnSpec {
    base: u32,
    sack: bool,
    timestamps: bool,
}

fn conn_spec() -> impl Strategy<Value = ConnSpec> {
    (any::<u32>(), any::<bool>(), any::<bool>()).prop_map(|(base, sack, timestamps)| ConnSpec {
        base,
        sack,
        timestamps,
    })
}

/// A receiver generating the ACK stream of one connection.
struct Rx {
    spec: ConnSpec,
    port: u16,
    ack: SeqNumber,
    window: u16,
    ece: bool,
    cwr: bool,
    ts: (u32, u32),
    /// Out-of-order blocks above `ack`, most recently changed first.
    blocks: Vec<(SeqNumber, SeqNumber)>,
    /// Rotates which older blocks are reported (RFC 2018 §4 repeats them in turn).
    rot: usize,
}

impl Rx {
    fn new(spec: ConnSpec, port: u16) -> Rx {
        Rx {
            spec,
            port,
            ack: SeqNumber(spec.base),
            window: 20_000,
            ece: false,
            cwr: false,
            ts: (spec.base.rotate_left(7), spec.base.rotate_left(13)),
            blocks: Vec::new(),
            rot: 0,
        }
    }

    fn add_block(&mut self, l: SeqNumber, r: SeqNumber) {
        let (mut l, mut r) = (l, r);
        // Merge with overlapping or adjacent blocks.
        self.blocks.retain(|&(bl, br)| {
            if bl <= r && l <= br {
                l = l.min(bl);
                r = r.max(br);
                false
            } else {
                true
            }
        });
        self.blocks.insert(0, (l, r));
    }

    fn advance_over_blocks(&mut self) {
        loop {
            let ack = self.ack;
            let Some(i) = self.blocks.iter().position(|&(l, _)| l <= ack) else {
                break;
            };
            let (_, r) = self.blocks.remove(i);
            self.ack = self.ack.max(r);
        }
    }

    fn segment(&mut self, a: Action, tag: u32) -> HeaderPacket {
        let mut flags = TcpFlags::ACK;
        let mut payload = 0;
        let mut dsack = None;
        let mut ts_back = false;
        match a {
            Action::Advance {
                k,
                block,
                window,
                ece,
                cwr,
                ts_back: back,
            } => {
                self.ack = self.ack + k * MSS;
                self.advance_over_blocks();
                if self.spec.sack && block > 0 {
                    let l = self.ack + block * MSS;
                    self.add_block(l, l + MSS);
                }
                self.window = (self.window as i32 + window).clamp(1000, 60_000) as u16;
                self.ece ^= ece;
                self.cwr ^= cwr;
                ts_back = back;
            }
            Action::Dup(r) => {
                if self.spec.sack {
                    let l = self.ack + r * MSS;
                    self.add_block(l, l + MSS);
                }
            }
            Action::Window(d) => {
                self.window = (self.window as i32 + d).clamp(1000, 60_000) as u16;
            }
            Action::Ece => self.ece = !self.ece,
            Action::Cwr => self.cwr = !self.cwr,
            Action::Data(n) => {
                payload = n;
                flags = flags | TcpFlags::PSH;
            }
            Action::Urg => flags = flags | TcpFlags::URG,
            Action::DSack => {
                if self.spec.sack {
                    dsack = Some((self.ack - 2 * MSS, self.ack - MSS));
                }
            }
        }
        if self.ece {
            flags = flags | TcpFlags::ECE;
        }
        if self.cwr {
            flags = flags | TcpFlags::CWR;
        }
        let mut sack = SackBlocks::new();
        if self.spec.sack {
            if let Some((l, r)) = dsack {
                sack.push(SackBlock { left: l, right: r });
            }
            // The most recent block first, then up to two of the others in turn (how many
            // varies, so some blocks are reported by few ACKs).
            if let Some(&(l, r)) = self.blocks.first() {
                sack.push(SackBlock { left: l, right: r });
            }
            let others = &self.blocks[self.blocks.len().min(1)..];
            for i in 0..others.len().min(tag as usize % 3) {
                let (l, r) = others[(self.rot + i) % others.len()];
                sack.push(SackBlock { left: l, right: r });
            }
            self.rot = self.rot.wrapping_add(tag as usize * 7 + 1);
        }
        let timestamp = self.spec.timestamps.then(|| {
            self.ts.0 = self.ts.0.wrapping_add(1);
            self.ts.1 = if ts_back {
                self.ts.1.wrapping_sub(5)
            } else {
                self.ts.1.wrapping_add(tag % 3)
            };
            Timestamp {
                val: self.ts.0,
                ecr: self.ts.1,
            }
        });
        HeaderPacket::new(Headers::tcp(
            IpRepr::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ),
            TcpRepr {
                src_port: 80,
                dst_port: self.port,
                seq: SeqNumber(tag),
                ack: self.ack,
                flags,
                window: self.window,
                urgent: 0,
                opts: TcpOptions {
                    sack,
                    timestamp,
                    ..TcpOptions::default()
                },
            },
            payload,
        ))
    }
}

/// What a sender learns from a stream of segments of one connection.
#[derive(Debug, PartialEq, Eq)]
struct SenderView {
    highest_ack: SeqNumber,
    /// SACKed ranges above `highest_ack`, merged.
    sacked_above: Vec<(u32, u32)>,
    latest_ts_echo: Option<u32>,
    right_edge: SeqNumber,
    ecn_transitions: Vec<(bool, bool)>,
}

fn later_u32(a: u32, b: u32) -> u32 {
    if (b.wrapping_sub(a) as i32) > 0 {
        b
    } else {
        a
    }
}

fn view(stream: &[&HeaderPacket]) -> SenderView {
    let ts: Vec<&TcpRepr> = stream.iter().filter_map(|p| p.hdr.tcp_repr()).collect();
    let highest = ts.iter().map(|t| t.ack).reduce(SeqNumber::max).unwrap();
    // Union of SACK blocks, clipped above the highest ACK, as offsets from it.
    let mut ranges: Vec<(u32, u32)> = ts
        .iter()
        .flat_map(|t| t.opts.sack.iter())
        .filter(|b| b.right > highest)
        .map(|b| {
            let l = b.left.max(highest);
            (l.diff(highest) as u32, b.right.diff(highest) as u32)
        })
        .collect();
    ranges.sort();
    let mut merged: Vec<(u32, u32)> = Vec::new();
    for (l, r) in ranges {
        match merged.last_mut() {
            Some(m) if l <= m.1 => m.1 = m.1.max(r),
            _ => merged.push((l, r)),
        }
    }
    let latest_ts_echo = ts
        .iter()
        .filter_map(|t| t.opts.timestamp.map(|x| x.ecr))
        .reduce(later_u32);
    let right_edge = ts
        .iter()
        .map(|t| t.ack + t.window as u32)
        .reduce(SeqNumber::max)
        .unwrap();
    let mut ecn_transitions: Vec<(bool, bool)> = Vec::new();
    for t in &ts {
        let s = (
            t.flags.contains(TcpFlags::ECE),
            t.flags.contains(TcpFlags::CWR),
        );
        if ecn_transitions.last() != Some(&s) {
            ecn_transitions.push(s);
        }
    }
    SenderView {
        highest_ack: highest,
        sacked_above: merged,
        latest_ts_echo,
        right_edge,
        ecn_transitions,
    }
}

/// Acknowledgment numbers at which the stream has a run of at least three duplicate ACKs
/// (RFC 5681 §2: no data, no SYN/FIN, same ACK and window as the previous ACK), with the
/// number of such runs.
fn dup_runs(stream: &[&HeaderPacket]) -> BTreeMap<u32, usize> {
    let mut out = BTreeMap::new();
    let mut prev: Option<(SeqNumber, u16)> = None;
    let mut run = 0;
    let mut close = |run: usize, ack: Option<(SeqNumber, u16)>| {
        if run >= 3 {
            *out.entry(ack.unwrap().0 .0).or_insert(0) += 1;
        }
    };
    for p in stream {
        let t = p.hdr.tcp_repr().unwrap();
        let dup = p.hdr.payload_len == 0
            && !t.flags.intersects(TcpFlags::SYN | TcpFlags::FIN)
            && prev == Some((t.ack, t.window));
        if dup {
            run += 1;
        } else {
            close(run, prev);
            run = 0;
        }
        prev = Some((t.ack, t.window));
    }
    close(run, prev);
    out
}

fn policies() -> Vec<(&'static str, AckFilterConfig, Option<Rate>)> {
    let big = Limit::Packets(100_000);
    let c = |p| AckFilterConfig::new(p).with_limit(big);
    // A tiny channel rate makes the rate-driven policies filter as soon as anything left;
    // a realistic one makes them switch on and off.
    let tiny = Some(Rate::bps(8));
    let slow = Some(Rate::kbps(100));
    vec![
        ("none", c(AckPolicy::None), None),
        ("classic", c(AckPolicy::Classic), None),
        (
            "classic-tail",
            c(AckPolicy::Classic).with_placement(Placement::Tail),
            None,
        ),
        (
            "classic-rr",
            c(AckPolicy::Classic).with_service(Service::RoundRobin),
            None,
        ),
        (
            "threshold-1",
            c(AckPolicy::Threshold).with_delta(Delta::Fixed(1)),
            None,
        ),
        (
            "threshold-2",
            c(AckPolicy::Threshold).with_delta(Delta::Fixed(2)),
            None,
        ),
        (
            "threshold-3-tail",
            c(AckPolicy::Threshold)
                .with_delta(Delta::Fixed(3))
                .with_placement(Placement::Tail),
            None,
        ),
        (
            "threshold-auto",
            c(AckPolicy::Threshold).with_delta(Delta::Auto),
            None,
        ),
        ("delayed-always", c(AckPolicy::Delayed), tiny),
        (
            "delayed",
            c(AckPolicy::Delayed).with_window(Duration::from_millis(20)),
            slow,
        ),
        (
            "delayed-presence",
            c(AckPolicy::Delayed)
                .with_measure(Measure::Presence)
                .with_utilization(0.3),
            None,
        ),
        ("perflow-fifo", c(AckPolicy::Perflow), tiny),
        (
            "perflow-rr",
            c(AckPolicy::Perflow).with_service(Service::RoundRobin),
            tiny,
        ),
        (
            "perflow-rr-slow",
            c(AckPolicy::Perflow)
                .with_service(Service::RoundRobin)
                .with_window(Duration::from_millis(20)),
            slow,
        ),
        ("conservative", c(AckPolicy::Conservative), None),
    ]
}

/// Run the script through one policy; returns the input and output streams.
fn run(
    cfg: &AckFilterConfig,
    rate: Option<Rate>,
    specs: &[ConnSpec],
    steps: &[Step],
) -> (Vec<HeaderPacket>, Vec<HeaderPacket>, u64) {
    let mut q = AckFilter::new(cfg, rate).unwrap();
    let mut drops = Drops::new();
    let mut rx: Vec<Rx> = specs
        .iter()
        .enumerate()
        .map(|(i, s)| Rx::new(*s, 1000 + i as u16))
        .collect();
    let mut input = Vec::new();
    let mut output = Vec::new();
    let mut now = Instant::ZERO;
    let mut filtered = 0;
    for (i, s) in steps.iter().enumerate() {
        let p = rx[s.conn].segment(s.action, i as u32);
        input.push(p.clone());
        q.enqueue(now, p, &mut drops);
        now += Duration::from_micros(s.gap_us);
        for _ in 0..s.serve {
            match q.dequeue(now, &mut drops) {
                Dequeued::Packet(p) => output.push(p),
                _ => break,
            }
        }
        for d in drops.drain() {
            assert!(
                matches!(d.verdict, Verdict::Filtered(_)),
                "nothing may overflow: {:?}",
                d.verdict
            );
            filtered += 1;
        }
        q.stats().check(q.backlog()).unwrap();
    }
    now += Duration::from_millis(1);
    while let Dequeued::Packet(p) = q.dequeue(now, &mut drops) {
        output.push(p);
    }
    assert!(drops.is_empty());
    assert_eq!(q.backlog().packets, 0);
    assert_eq!(q.stats().filters(), filtered);
    (input, output, filtered)
}

fn tag(p: &HeaderPacket) -> u32 {
    p.hdr.tcp_repr().unwrap().seq.0
}

fn check_policy(
    name: &str,
    cfg: &AckFilterConfig,
    rate: Option<Rate>,
    specs: &[ConnSpec],
    steps: &[Step],
) -> Result<u64, TestCaseError> {
    let (input, output, filtered) = run(cfg, rate, specs, steps);
    prop_assert_eq!(
        input.len() as u64,
        output.len() as u64 + filtered,
        "{}",
        name
    );
    for (c, spec) in specs.iter().enumerate() {
        let port = 1000 + c as u16;
        let of = |s: &[HeaderPacket]| -> Vec<usize> {
            s.iter()
                .enumerate()
                .filter(|(_, p)| p.hdr.tcp_repr().unwrap().dst_port == port)
                .map(|(i, _)| i)
                .collect()
        };
        let before: Vec<&HeaderPacket> = of(&input).into_iter().map(|i| &input[i]).collect();
        let after: Vec<&HeaderPacket> = of(&output).into_iter().map(|i| &output[i]).collect();
        if before.is_empty() {
            continue;
        }
        // A subsequence, in order, keeping everything that is not a pure ACK.
        let mut it = before.iter();
        for a in &after {
            prop_assert!(
                it.any(|b| tag(b) == tag(a)),
                "{}: conn {}: output out of order or invented",
                name,
                c
            );
        }
        let kept: Vec<u32> = after.iter().map(|p| tag(p)).collect();
        for b in &before {
            let t = b.hdr.tcp_repr().unwrap();
            let pure = b.hdr.payload_len == 0 && !t.flags.intersects(TcpFlags::URG | TcpFlags::PSH);
            if !pure {
                prop_assert!(
                    kept.contains(&tag(b)),
                    "{}: conn {}: lost a non-pure segment",
                    name,
                    c
                );
            }
        }
        prop_assert!(
            !after.is_empty(),
            "{}: conn {}: every ACK was removed",
            name,
            c
        );
        prop_assert_eq!(view(&before), view(&after), "{}: conn {}", name, c);
        if !spec.sack {
            let (want, got) = (dup_runs(&before), dup_runs(&after));
            for (ack, n) in &want {
                prop_assert!(
                    got.get(ack).copied().unwrap_or(0) >= *n,
                    "{}: conn {}: the run of duplicate ACKs at {} was broken ({:?} vs {:?})",
                    name,
                    c,
                    ack,
                    want,
                    got
                );
            }
        }
    }
    Ok(filtered)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn filtering_never_loses_what_the_sender_needs(
        specs in prop::collection::vec(conn_spec(), 1..4),
        steps in (1usize..4).prop_flat_map(|n| prop::collection::vec(step(n), 1..250)),
    ) {
        let n = specs.len();
        let steps: Vec<Step> = steps.into_iter().map(|s| Step { conn: s.conn % n, ..s }).collect();
        for (name, cfg, rate) in policies() {
            check_policy(name, &cfg, rate, &specs, &steps)?;
        }
    }
}

/// The property above would also hold for a filter that never filters: check that the
/// policies do filter on streams where filtering is allowed.
#[test]
fn the_policies_do_filter() {
    let specs = [ConnSpec {
        base: 5,
        sack: false,
        timestamps: true,
    }];
    let steps: Vec<Step> = (0..400)
        .map(|i| Step {
            conn: 0,
            action: Action::Advance {
                k: 1 + (i % 2),
                block: 0,
                window: 0,
                ece: false,
                cwr: false,
                ts_back: false,
            },
            gap_us: 500,
            serve: if i % 4 == 0 { 1 } else { 0 },
        })
        .collect();
    for (name, cfg, rate) in policies() {
        let filtered = check_policy(name, &cfg, rate, &specs, &steps).unwrap();
        if name == "none" {
            assert_eq!(filtered, 0);
        } else if name == "threshold-auto" || name == "delayed-presence" || name == "delayed" {
            // These depend on the channel's state; just safe.
        } else {
            assert!(filtered > 100, "{name}: {filtered}");
        }
    }
}
