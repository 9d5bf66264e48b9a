//! "A middlebox never breaks a connection", as properties over every mechanism that edits,
//! merges or removes packets, on random traffic with signed segments, duplicate-ACK
//! trains, connection-table overflow and SYN floods:
//!
//! * (a) no data segment leaves before an earlier data segment of its flow, and no pure
//!   ACK before an earlier pure ACK of its flow (a pure ACK may overtake data: ACK
//!   priority);
//! * (b) a signed segment (TCP-MD5, TCP-AO, behind AH, unreadable options) leaves with the
//!   headers it came with (DSCP/ECN aside) and is never removed as redundant (it may be
//!   dropped when a buffer overflows);
//! * (c) a duplicate ACK stays a duplicate: consecutive ACKs of a flow that came in with
//!   the same ACK number and window leave with the same window.
//!
//! What the ACK filter must preserve (cumulative ACK, SACK, window edge, timestamps, ECN
//! transitions, duplicate runs) is checked in `ack_filter_props.rs`.
//!
//! Packets are tagged in the IPv4 identification field, which no mechanism reads.

use asymlink_core::packet::HeaderPacket;
use asymlink_core::pipeline::{Dir, Rewriter};
use asymlink_core::qdisc::{BuildCtx, Dequeued, Drops, Qdisc, QdiscConfig, Verdict};
use asymlink_core::rwnd::{RwndConfig, WindowRewriter};
use asymlink_core::time::Instant;
use asymlink_core::units::Rate;
use asymlink_core::wire::{FlowKey, Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr};
use core::net::{IpAddr, Ipv4Addr};
use proptest::prelude::*;
use std::collections::HashMap;

const RCV: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));

fn sender(flow: u16) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(192, 0, 2, (flow % 250) as u8 + 1))
}

/// What the receiver side sends in one step of the random script.
#[derive(Clone, Debug)]
enum Step {
    /// A new ACK of `flow` (its ACK number advances by `adv` segments).
    Ack { flow: u16, adv: u8, window: u16 },
    /// `n` duplicates of the flow's last ACK.
    Dups { flow: u16, n: u8 },
    /// A data segment of the flow (payload), carrying the current ACK.
    Data { flow: u16, len: u16 },
    /// A SYN from a new (spoofed) flow.
    Syn { port: u16 },
    /// Take `n` packets out of the queue.
    Dequeue { n: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0u16..6, 0u8..3, prop_oneof![Just(5000u16), Just(6000), 1000u16..8000])
            .prop_map(|(flow, adv, window)| Step::Ack { flow, adv, window }),
        2 => (0u16..6, 1u8..5).prop_map(|(flow, n)| Step::Dups { flow, n }),
        2 => (0u16..6, 1u16..1400).prop_map(|(flow, len)| Step::Data { flow, len }),
        2 => (20_000u16..20_400).prop_map(|port| Step::Syn { port }),
        3 => (0u8..4).prop_map(|n| Step::Dequeue { n }),
    ]
}

/// Which segments are signed: flows 4 and 5 use TCP-MD5, flow 3 runs behind AH.
fn sign(h: &mut Headers, flow: u16) {
    match flow {
        4 | 5 => h.tcp_repr_mut().expect("TCP").opts.signed = true,
        3 => {
            h.ip.auth = true;
            h.ip.extensions = true;
        }
        _ => {}
    }
}

/// Turn a script into packets from the receiver (ACKs and its data), tagged in order.
fn packets(script: &[Step]) -> Vec<(Instant, Option<u8>, HeaderPacket)> {
    let mut ack: HashMap<u16, (u32, u16)> = HashMap::new();
    let mut seq: HashMap<u16, u32> = HashMap::new();
    let mut out = Vec::new();
    let mut tag: u16 = 0;
    let mut t = 0u64;
    let mut mk = |flow: u16, sport: u16, flags: TcpFlags, a: u32, w: u16, s: u32, len: u32| {
        tag += 1;
        let mut ip = IpRepr::new(RCV, sender(flow));
        ip.ident = tag;
        let mut h = Headers::tcp(
            ip,
            TcpRepr {
                src_port: sport,
                dst_port: 80,
                seq: SeqNumber(s),
                ack: SeqNumber(a),
                flags,
                window: w,
                urgent: 0,
                opts: TcpOptions::default(),
            },
            len,
        );
        sign(&mut h, flow);
        HeaderPacket::new(h)
    };
    for s in script {
        t += 1;
        let now = Instant::from_micros(t * 100);
        match *s {
            Step::Ack { flow, adv, window } => {
                let e = ack.entry(flow).or_insert((1000, window));
                e.0 += adv as u32 * 1000;
                e.1 = window;
                let (a, w) = *e;
                let sq = *seq.entry(flow).or_insert(1);
                out.push((now, None, mk(flow, 1000 + flow, TcpFlags::ACK, a, w, sq, 0)));
            }
            Step::Dups { flow, n } => {
                let (a, w) = *ack.entry(flow).or_insert((1000, 5000));
                let sq = *seq.entry(flow).or_insert(1);
                for _ in 0..n {
                    out.push((now, None, mk(flow, 1000 + flow, TcpFlags::ACK, a, w, sq, 0)));
                }
            }
            Step::Data { flow, len } => {
                let (a, w) = *ack.entry(flow).or_insert((1000, 5000));
                let sq = seq.entry(flow).or_insert(1);
                let p = mk(
                    flow,
                    1000 + flow,
                    TcpFlags::ACK | TcpFlags::PSH,
                    a,
                    w,
                    *sq,
                    len as u32,
                );
                *sq += len as u32;
                out.push((now, None, p));
            }
            Step::Syn { port } => {
                let p = mk(
                    200 + port % 50,
                    port,
                    TcpFlags::SYN,
                    0,
                    65_535,
                    port as u32,
                    0,
                );
                out.push((now, None, p));
            }
            Step::Dequeue { n } => {
                if let Some(last) = out.last_mut() {
                    last.1 = Some(last.1.unwrap_or(0) + n);
                }
            }
        }
    }
    out
}

fn tag(p: &HeaderPacket) -> u16 {
    p.hdr.ip.ident
}

/// (a), (b) and (c) over what left a discipline, given what entered.
fn check_output(
    input: &[(Instant, Option<u8>, HeaderPacket)],
    out: &[HeaderPacket],
    removed: &[(HeaderPacket, Verdict)],
) -> Result<(), TestCaseError> {
    let by_tag: HashMap<u16, &HeaderPacket> = input.iter().map(|(_, _, p)| (tag(p), p)).collect();
    // (a) per flow, data in order and pure ACKs in order.
    let mut last: HashMap<(FlowKey, bool), u16> = HashMap::new();
    for p in out {
        let pure = p.hdr.is_pure_ack();
        let k = (p.hdr.flow_key(), pure);
        if let Some(&prev) = last.get(&k) {
            prop_assert!(
                prev < tag(p),
                "flow {:?} reordered: {} after {}",
                k,
                tag(p),
                prev
            );
        }
        last.insert(k, tag(p));
        // (b) signed segments leave as they came (DSCP/ECN aside).
        let orig = by_tag[&tag(p)];
        if orig.hdr.is_signed() {
            let mut a = p.hdr;
            a.ip.dscp = orig.hdr.ip.dscp;
            a.ip.ecn = orig.hdr.ip.ecn;
            prop_assert_eq!(a, orig.hdr);
        }
    }
    // (b) signed segments are never filtered as redundant.
    for (p, v) in removed {
        if p.hdr.is_signed() {
            prop_assert!(
                !matches!(v, Verdict::Filtered(_)),
                "signed {} filtered",
                tag(p)
            );
        }
    }
    Ok(())
}

fn run_qdisc(
    src: &str,
    input: &[(Instant, Option<u8>, HeaderPacket)],
) -> Result<(), TestCaseError> {
    let c: QdiscConfig = toml::from_str(src).unwrap_or_else(|e| panic!("{src}: {e}"));
    let ctx = BuildCtx {
        link_rate: Some(Rate::kbps(100)),
        ..BuildCtx::default()
    };
    let mut q = c
        .build::<HeaderPacket>(&ctx)
        .unwrap_or_else(|e| panic!("{src}: {e}"));
    let mut drops = Drops::new();
    let mut out = Vec::new();
    let mut removed = Vec::new();
    let mut now = Instant::ZERO;
    let take = |q: &mut Box<dyn Qdisc<HeaderPacket>>,
                now: &mut Instant,
                drops: &mut Drops<HeaderPacket>| {
        match q.dequeue(*now, drops) {
            Dequeued::Packet(p) => Some(p),
            Dequeued::NotBefore(t) => {
                *now = t.max(*now);
                match q.dequeue(*now, drops) {
                    Dequeued::Packet(p) => Some(p),
                    _ => None,
                }
            }
            Dequeued::Empty => None,
        }
    };
    for (t, deq, p) in input {
        now = now.max(*t);
        q.enqueue(now, p.clone(), &mut drops);
        for _ in 0..deq.unwrap_or(0) {
            if let Some(p) = take(&mut q, &mut now, &mut drops) {
                out.push(p);
            }
        }
        removed.extend(drops.drain().map(|d| (d.pkt, d.verdict)));
    }
    let mut idle = 0;
    while q.backlog().packets > 0 && idle < 10_000 {
        match take(&mut q, &mut now, &mut drops) {
            Some(p) => out.push(p),
            None => {
                idle += 1;
                now += core::time::Duration::from_millis(10);
            }
        }
    }
    removed.extend(drops.drain().map(|d| (d.pkt, d.verdict)));
    prop_assert_eq!(
        out.len() + removed.len(),
        input.len(),
        "{}: every packet leaves once",
        src
    );
    check_output(input, &out, &removed)
}

/// Every discipline that removes packets as redundant or holds per-flow queues, with
/// small tables so that SYN floods overflow them.
const QDISCS: &[&str] = &[
    "kind = \"ack_filter\"\npolicy = \"classic\"\nservice = \"round_robin\"\nmax_connections = 2\nlimit = \"30p\"",
    "kind = \"ack_filter\"\npolicy = \"classic\"\nmax_connections = 3\nlimit = \"30p\"",
    "kind = \"ack_filter\"\npolicy = \"conservative\"\nservice = \"round_robin\"\nmax_connections = 2",
    "kind = \"ack_filter\"\npolicy = \"perflow\"\nchannel_rate = \"100kbit\"\nservice = \"round_robin\"\nmax_connections = 3\nlimit = \"20p\"",
    "kind = \"ack_filter\"\npolicy = \"threshold\"\ndelta = 2\nservice = \"round_robin\"\nmax_connections = 2",
    "kind = \"ack_fifo\"\nlimit = \"5p\"\ndrop = \"lowest_seq\"\nmax_connections = 2",
    "kind = \"ack_shaper\"\nthreshold = \"50KB\"\nleak = { kind = \"interval\", interval = \"1ms\" }\nper_connection = true\nbuckets = 3",
    // Flow queues with the ACK filter; two queues, so that connections collide.
    "kind = \"fq_codel\"\nflows = 2\nack_filter = true\nlimit = \"30p\"",
    "kind = \"fq_codel\"\nflows = 2\nlimit = \"30p\"",
    "kind = \"host_fq_codel\"\nflows = 8\nhost_buckets = 8\nack_filter = true",
    "kind = \"host_fq_codel\"\nflows = 8\nhost_buckets = 8",
    // COBALT on the flow queues (BLUE drops when the small limit overflows).
    "kind = \"fq_codel\"\nflows = 2\nack_filter = true\nlimit = \"10p\"\naqm = \"cobalt\"",
    "kind = \"host_fq_codel\"\nflows = 8\nhost_buckets = 8\nlimit = \"10p\"\naqm = \"cobalt\"",
];

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn disciplines_keep_order_and_leave_signed_segments_alone(
        script in prop::collection::vec(step(), 1..120)
    ) {
        let input = packets(&script);
        for src in QDISCS {
            run_qdisc(src, &input).map_err(|e| TestCaseError::fail(format!("{src}: {e}")))?;
        }
    }

    #[test]
    fn the_window_rewriter_keeps_signed_segments_and_duplicate_acks(
        script in prop::collection::vec(step(), 1..120),
        max_flows in 2u32..8,
    ) {
        let cfg: RwndConfig =
            toml::from_str(&format!("link_rate = \"1Mbit\"\nmax_flows = {max_flows}")).unwrap();
        // Receivers are on side a; what they send travels toward b.
        let mut rw = WindowRewriter::new(&cfg, Dir::ToA).unwrap();
        // Handshakes for the six flows first (no window scaling), so they are tracked.
        let mut t = 0;
        for flow in 0..6u16 {
            let sa = IpRepr::new(sender(flow), RCV);
            let ra = IpRepr::new(RCV, sender(flow));
            let base = TcpRepr {
                src_port: 1000 + flow,
                dst_port: 80,
                seq: SeqNumber(0),
                ack: SeqNumber(0),
                flags: TcpFlags::SYN,
                window: 65_535,
                urgent: 0,
                opts: TcpOptions { mss: Some(1000), ..TcpOptions::default() },
            };
            let syn = TcpRepr { src_port: 80, dst_port: 1000 + flow, ..base };
            let synack = TcpRepr { flags: TcpFlags::SYN | TcpFlags::ACK, ack: SeqNumber(1), ..base };
            let ack = TcpRepr { src_port: 80, dst_port: 1000 + flow, flags: TcpFlags::ACK, ack: SeqNumber(1), opts: TcpOptions::default(), ..base };
            for (dir, h) in [
                (Dir::ToA, Headers::tcp(sa, syn, 0)),
                (Dir::ToB, Headers::tcp(ra, synack, 0)),
                (Dir::ToA, Headers::tcp(sa, ack, 0)),
                (Dir::ToA, Headers::tcp(sa, TcpRepr { seq: SeqNumber(1), ..ack }, 1000)),
            ] {
                t += 1;
                let mut p = HeaderPacket::new(h);
                sign(&mut p.hdr, flow);
                rw.on_packet(Instant::from_micros(t), dir, &mut p);
            }
        }
        let input = packets(&script);
        let mut out = Vec::new();
        let mut sent = 1001u32;
        for (i, (_, _, p)) in input.iter().enumerate() {
            let now = Instant::from_micros(t + 1 + i as u64);
            // Data keeps arriving for the receiver (out of order or not, it grows the
            // allocation): the windows would move between duplicates.
            let pt = p.hdr.tcp_repr().unwrap();
            let data = TcpRepr {
                src_port: pt.dst_port,
                dst_port: pt.src_port,
                seq: SeqNumber(sent),
                ack: SeqNumber(1),
                flags: TcpFlags::ACK,
                window: 65_535,
                urgent: 0,
                opts: TcpOptions::default(),
            };
            sent += 500;
            let mut d = HeaderPacket::new(Headers::tcp(IpRepr::new(p.hdr.ip.dst, RCV), data, 500));
            rw.on_packet(now, Dir::ToA, &mut d);
            let mut q = p.clone();
            rw.on_packet(now, Dir::ToB, &mut q);
            prop_assert!(q.hdr.tcp_repr().unwrap().window <= p.hdr.tcp_repr().unwrap().window, "never raised");
            out.push(q);
        }
        check_output(&input, &out, &[])?;
        // (c) consecutive segments of a flow that came in with the same ACK number and
        // window leave with the same window.
        let mut last: HashMap<FlowKey, (u32, u16, u16)> = HashMap::new();
        for (i, q) in input.iter().map(|x| &x.2).zip(&out) {
            let ti = i.hdr.tcp_repr().unwrap();
            if !ti.flags.contains(TcpFlags::ACK) || ti.flags.contains(TcpFlags::SYN) {
                continue;
            }
            let to = q.hdr.tcp_repr().unwrap();
            let k = i.hdr.flow_key();
            if let Some(&(a, w, sent)) = last.get(&k) {
                if a == ti.ack.0 && w == ti.window {
                    prop_assert_eq!(to.window, sent, "duplicate ACK {} of {:?} changed window", tag(i), k);
                }
            }
            last.insert(k, (ti.ack.0, ti.window, to.window));
        }
    }
}
