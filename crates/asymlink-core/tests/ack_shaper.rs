//! The ACK shaper on explicit time: threshold crossing (with and without hysteresis), the
//! rate-based and interval-based leaks, the delay bound, per-connection service, ACK
//! identification, self-tuning, and the shaper inside a middlebox driven the way the
//! simulator and the live box drive it.

use asymlink_core::packet::HeaderPacket;
use asymlink_core::pipeline::{Dir, Middlebox, MiddleboxConfig};
use asymlink_core::qdisc::{
    AckShaper, AckShaperConfig, Backlog, Dequeued, DropReason, Drops, PeerObservation, Qdisc,
    Verdict,
};
use asymlink_core::time::{Duration, Instant};
use asymlink_core::units::Limit;
use asymlink_core::wire::{
    Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Transport, UdpRepr,
};
use core::net::{IpAddr, Ipv4Addr};

fn us(t: u64) -> Instant {
    Instant::from_micros(t)
}
fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

fn tcp(tag: u32, flow: u16, flags: TcpFlags, payload: u32) -> HeaderPacket {
    HeaderPacket::new(Headers {
        ip: IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ),
        transport: Transport::Tcp(TcpRepr {
            src_port: 80,
            dst_port: 1000 + flow,
            seq: SeqNumber(tag),
            ack: SeqNumber(tag),
            flags,
            window: 65535,
            urgent: 0,
            opts: TcpOptions::default(),
        }),
        payload_len: payload,
    })
}

/// A pure ACK (40 bytes) of connection `flow`, tagged `tag`.
fn ack(tag: u32, flow: u16) -> HeaderPacket {
    tcp(tag, flow, TcpFlags::ACK, 0)
}

/// A data segment (with the ACK bit, as every data segment has) of 576 bytes.
fn data(tag: u32) -> HeaderPacket {
    tcp(tag, 0, TcpFlags::ACK, 536)
}

fn tag(p: &HeaderPacket) -> u32 {
    match &p.hdr.transport {
        Transport::Tcp(t) => t.seq.0,
        Transport::Udp(u) => u.src_port as u32,
        Transport::Other(_) => u32::MAX,
    }
}

fn shaper(src: &str) -> AckShaper<HeaderPacket> {
    let cfg: AckShaperConfig = toml::from_str(src).unwrap_or_else(|e| panic!("{e}"));
    AckShaper::new(&cfg).unwrap_or_else(|e| panic!("{e}"))
}

#[track_caller]
fn check<Q: Qdisc<HeaderPacket> + ?Sized>(q: &Q) {
    if let Err(e) = q.stats().check(q.backlog()) {
        panic!("conservation violated: {e}");
    }
}

/// Offer a packet at `t`.
macro_rules! enq {
    ($q:expr, $t:expr, $p:expr) => {{
        let mut d = Drops::new();
        $q.enqueue($t, $p, &mut d);
        check(&$q);
        d
    }};
}

/// Dequeue at `t` and compare: `deq!(q, t) => tag` (a packet), `=> wait(t2)`, `=> empty`.
macro_rules! deq {
    ($q:expr, $t:expr => wait($w:expr)) => {{
        let mut d = Drops::new();
        let r = $q.dequeue($t, &mut d);
        check(&$q);
        assert_eq!(r, Dequeued::NotBefore($w), "dequeue at {:?}", $t);
    }};
    ($q:expr, $t:expr => empty) => {{
        let mut d = Drops::new();
        let r = $q.dequeue($t, &mut d);
        check(&$q);
        assert_eq!(r, Dequeued::Empty, "dequeue at {:?}", $t);
    }};
    ($q:expr, $t:expr => $tag:expr) => {{
        let mut d = Drops::new();
        let r = $q.dequeue($t, &mut d);
        check(&$q);
        match r {
            Dequeued::Packet(p) => assert_eq!(tag(&p), $tag, "dequeue at {:?}", $t),
            other => panic!(
                "dequeue at {:?}: expected packet {}, got {other:?}",
                $t, $tag
            ),
        }
    }};
}

/// The forward queue holds `bytes` in packets of 576 bytes.
fn fwd_bytes(bytes: u64) -> PeerObservation {
    PeerObservation {
        backlog: Backlog {
            packets: bytes.div_ceil(576) as u32,
            bytes,
        },
        service_rate: None,
        capacity_bytes: None,
        capacity_packets: None,
        dequeued_packets: 0,
        dequeued_bytes: 0,
    }
}

fn fwd_packets(packets: u32) -> PeerObservation {
    PeerObservation {
        backlog: Backlog {
            packets,
            bytes: packets as u64 * 296,
        },
        ..fwd_bytes(0)
    }
}

const PAPER_RATE: &str =
    "threshold = \"50KB\"\nleak = { kind = \"rate\", rate = \"30Mbit\", packet = \"576B\" }";

#[test]
fn rate_leak_follows_the_forward_service_rate_and_halves_under_congestion() {
    // 576 B at 30 Mbit/s: 153.6 µs per forward packet.
    let mut q = shaper(PAPER_RATE);
    for i in 0..6 {
        enq!(q, us(0), ack(i, 0));
    }
    deq!(q, us(0) => 0);
    deq!(q, us(0) => wait(Instant(153_600)));
    deq!(q, Instant(153_599) => wait(Instant(153_600)));
    deq!(q, Instant(153_600) => 1);
    // The forward queue reaches the threshold: the spacing doubles at once, also for
    // the ACK already waiting.
    q.handle_observation(Instant(200_000), &fwd_bytes(49_999));
    assert!(!q.is_congested());
    deq!(q, Instant(200_000) => wait(Instant(307_200)));
    q.handle_observation(Instant(200_000), &fwd_bytes(50_000));
    assert!(q.is_congested());
    deq!(q, Instant(307_200) => wait(Instant(460_800)));
    deq!(q, Instant(460_800) => 2);
    deq!(q, Instant(460_800) => wait(Instant(768_000)));
    // Below the threshold again (no hysteresis): the normal spacing is back at once.
    q.handle_observation(Instant(500_000), &fwd_bytes(49_000));
    assert!(!q.is_congested());
    deq!(q, Instant(614_400) => 3);
    let t = q.tuning();
    assert_eq!(t.spacing, Duration::from_nanos(153_600));
    assert_eq!(t.congested_spacing, Duration::from_nanos(307_200));
    assert_eq!(q.counters().congestion_onsets, 1);
    assert_eq!(q.counters().congested_ns, 300_000);
    assert_eq!(q.counters().acks_leaked, 4);
}

#[test]
fn congested_fraction_is_configurable() {
    let mut q = shaper(
        "threshold = \"10p\"\nleak = { kind = \"rate\", rate = \"8Mbit\", packet = \"1000B\", congested = \"1/4\" }",
    );
    q.handle_observation(ms(0), &fwd_packets(10));
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(0), ack(1, 0));
    deq!(q, ms(0) => 0);
    // 1000 B at 8 Mbit/s = 1 ms; a quarter of the rate = 4 ms apart.
    deq!(q, ms(0) => wait(ms(4)));
    // packets_per_ack scales the fixed spacing
    let mut q = shaper(
        "threshold = \"10p\"\nleak = { kind = \"rate\", rate = \"8Mbit\", packet = \"1000B\", packets_per_ack = 2 }",
    );
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(0), ack(1, 0));
    deq!(q, ms(0) => 0);
    deq!(q, ms(0) => wait(ms(2)));
}

#[test]
fn interval_leak_is_one_ack_per_interval_two_under_congestion() {
    // The paper's router test: interval 0.1 s, threshold 42 packets.
    let mut q = shaper("threshold = \"42p\"\nmax_delay = \"10s\"\nleak = { kind = \"interval\", interval = \"100ms\" }");
    for i in 0..10 {
        enq!(q, ms(0), ack(i, 0));
    }
    deq!(q, ms(0) => 0);
    deq!(q, ms(50) => wait(ms(100)));
    deq!(q, ms(100) => 1);
    // The link comes late (busy until 230 ms): no credit is kept for the lost time.
    deq!(q, ms(230) => 2);
    deq!(q, ms(230) => wait(ms(330)));
    q.handle_observation(ms(250), &fwd_packets(42));
    deq!(q, ms(330) => wait(ms(430)));
    deq!(q, ms(430) => 3);
    q.handle_observation(ms(500), &fwd_packets(41));
    deq!(q, ms(500) => wait(ms(530)));
    deq!(q, ms(530) => 4);
    assert_eq!(q.counters().acks_leaked, 5);
    assert_eq!(q.counters().acks_forced, 0);
}

#[test]
fn hysteresis_ends_congestion_only_below_release() {
    let mut q = shaper(
        "threshold = \"50KB\"\nrelease = \"30KB\"\nleak = { kind = \"interval\", interval = \"1ms\" }",
    );
    let mut seen = Vec::new();
    for b in [
        10_000, 49_999, 50_000, 40_000, 30_000, 29_999, 45_000, 50_001,
    ] {
        q.handle_observation(ms(1), &fwd_bytes(b));
        seen.push(q.is_congested());
    }
    assert_eq!(seen, [false, false, true, true, true, false, false, true]);
    assert_eq!(q.counters().congestion_onsets, 2);
    assert_eq!(q.tuning().release, Some(Limit::Bytes(30_000)));
}

#[test]
fn delay_bound_releases_every_ack_at_its_deadline_and_counts_it() {
    // ACKs arrive every 10 ms but leak one per 100 ms; the bound is 150 ms.
    let mut q = shaper(
        "threshold = \"1p\"\nmax_delay = \"150ms\"\nleak = { kind = \"interval\", interval = \"100ms\" }",
    );
    let mut out: Vec<(u64, u32)> = Vec::new();
    let mut d = Drops::new();
    let mut next_arrival = 0u64;
    for t in 0..=500u64 {
        if t == next_arrival && t < 300 {
            q.enqueue(ms(t), ack(t as u32, 0), &mut d);
            next_arrival += 10;
        }
        // A fast link: drain whatever may leave at t.
        while let Dequeued::Packet(p) = q.dequeue(ms(t), &mut d) {
            out.push((t, tag(&p)));
        }
        check(&q);
    }
    // Leak slots at 0, 100, 200, 300; everything else leaves exactly 150 ms after it came.
    for &(t, tag) in &out {
        let held = t - tag as u64;
        assert!(held <= 150, "ACK {tag} held {held} ms");
    }
    let forced = q.counters().acks_forced;
    let leaked = q.counters().acks_leaked;
    assert_eq!(forced + leaked, 30);
    assert_eq!(q.counters().max_hold_ns, 150_000_000);
    // Leak slots at 0 (ACK 0), 100 (ACK 10), 200, 300 and 400 (each time the oldest ACK,
    // which is just due: 50, 150, 250); every other ACK is forced out at its deadline.
    assert_eq!(leaked, 5, "{out:?}");
    assert_eq!(forced, 25);
    for (t, tag) in [
        (0, 0),
        (100, 10),
        (170, 20),
        (200, 50),
        (210, 60),
        (300, 150),
        (440, 290),
    ] {
        assert!(out.contains(&(t, tag)), "ACK {tag} at {t}: {out:?}");
    }
    assert!(d.is_empty());
}

#[test]
fn delay_bound_deadline_is_announced_by_not_before_and_poll_at() {
    let mut q = shaper(
        "threshold = \"1p\"\nmax_delay = \"30ms\"\nleak = { kind = \"interval\", interval = \"100ms\" }",
    );
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(5), ack(1, 0));
    deq!(q, ms(5) => 0);
    deq!(q, ms(5) => wait(ms(35)));
    assert_eq!(q.poll_at(), Some(ms(35)));
    q.handle_timeout(ms(35), &mut Drops::new());
    // Due now: poll_at only announces future instants (the link is what waits).
    assert_eq!(q.poll_at(), None);
    deq!(q, ms(35) => 1);
    assert_eq!(q.counters().acks_forced, 1);
    // A forced release does not use a leak slot: the next leak is still at 100 ms.
    enq!(q, ms(40), ack(2, 0));
    deq!(q, ms(40) => wait(ms(70)));
}

#[test]
fn only_pure_acks_are_shaped() {
    let mut q = shaper("threshold = \"1p\"\nleak = { kind = \"interval\", interval = \"1s\" }");
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(0), ack(1, 0)); // held until 1 s
    let others = [
        tcp(2, 0, TcpFlags::ACK, 100), // data with a piggybacked ACK
        tcp(3, 0, TcpFlags::ACK | TcpFlags::FIN, 0), // FIN
        tcp(4, 0, TcpFlags::SYN | TcpFlags::ACK, 0), // SYN-ACK
        tcp(5, 0, TcpFlags::RST, 0),   // RST
        HeaderPacket::new(Headers {
            ip: IpRepr::new(
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
                IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            ),
            transport: Transport::Udp(UdpRepr {
                src_port: 6,
                dst_port: 53,
            }),
            payload_len: 20,
        }),
    ];
    for p in others {
        enq!(q, ms(0), p);
    }
    let mut order = Vec::new();
    let mut d = Drops::new();
    while let Dequeued::Packet(p) = q.dequeue(ms(0), &mut d) {
        order.push(tag(&p));
    }
    assert_eq!(order, [0, 2, 3, 4, 5, 6]);
    assert_eq!(q.counters().acks_received, 2);
    assert_eq!(q.counters().data_received, 5);
    // ACK 1 waits for the leak (1 s) or the default 200 ms bound, whichever comes first.
    deq!(q, ms(0) => wait(ms(200)));
}

#[test]
fn eligible_acks_and_data_leave_in_arrival_order() {
    let mut q = shaper("threshold = \"1p\"\nleak = { kind = \"interval\", interval = \"10ms\" }");
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(0), ack(1, 0));
    deq!(q, ms(0) => 0);
    enq!(q, ms(3), data(2));
    enq!(q, ms(4), ack(3, 0));
    // At 12 ms ACK 1 (arrived at 0) is due and older than the data packet.
    deq!(q, ms(12) => 1);
    deq!(q, ms(12) => 2);
    deq!(q, ms(12) => wait(ms(22)));
}

#[test]
fn per_connection_queues_share_the_leak_round_robin() {
    let mut q = shaper(
        "threshold = \"1p\"\nper_connection = true\nbuckets = 64\nmax_delay = \"10s\"\nleak = { kind = \"interval\", interval = \"10ms\" }",
    );
    // Connection 1 queued four ACKs before connection 2's two.
    for i in 0..4 {
        enq!(q, ms(0), ack(10 + i, 1));
    }
    for i in 0..2 {
        enq!(q, ms(0), ack(20 + i, 2));
    }
    let mut order = Vec::new();
    for k in 0..6 {
        let mut d = Drops::new();
        match q.dequeue(ms(10 * k), &mut d) {
            Dequeued::Packet(p) => order.push(tag(&p)),
            r => panic!("{r:?}"),
        }
        check(&q);
    }
    assert_eq!(order, [10, 20, 11, 21, 12, 13]);
    // The aggregate queue would have kept arrival order.
    let mut a = shaper("threshold = \"1p\"\nmax_delay = \"10s\"\nleak = { kind = \"interval\", interval = \"10ms\" }");
    for i in 0..2 {
        enq!(a, ms(0), ack(10 + i, 1));
    }
    enq!(a, ms(0), ack(20, 2));
    deq!(a, ms(0) => 10);
    deq!(a, ms(10) => 11);
    deq!(a, ms(20) => 20);
}

#[test]
fn full_ack_queue_drops_the_arriving_ack() {
    let mut q = shaper(
        "threshold = \"1p\"\nack_limit = \"2p\"\nlimit = \"1p\"\nleak = { kind = \"interval\", interval = \"1s\" }",
    );
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(0), ack(1, 0));
    let d = enq!(q, ms(0), ack(2, 0));
    assert_eq!(
        d.since(0)[0].verdict,
        Verdict::Dropped(DropReason::QueueFull)
    );
    assert_eq!(tag(&d.since(0)[0].pkt), 2);
    enq!(q, ms(0), data(3));
    let d = enq!(q, ms(0), data(4));
    assert_eq!(tag(&d.since(0)[0].pkt), 4);
    assert_eq!(q.stats().dropped_for(DropReason::QueueFull), 2);
    assert_eq!(q.ack_stats().rejected, 1);
    assert_eq!(q.data_stats().rejected, 1);
}

#[test]
fn time_going_back_is_no_time_passing() {
    let mut q = shaper("threshold = \"1p\"\nleak = { kind = \"interval\", interval = \"10ms\" }");
    enq!(q, ms(100), ack(0, 0));
    enq!(q, ms(100), ack(1, 0));
    deq!(q, ms(100) => 0);
    deq!(q, ms(50) => wait(ms(110)));
    q.handle_observation(ms(20), &fwd_packets(5));
    deq!(q, ms(110) => wait(ms(120)));
}

// ---------------------------------------------------------------- self-tuning

#[test]
fn measured_leak_follows_the_forward_service_time_and_ack_ratio() {
    let src = "threshold = \"auto\"\nleak = { kind = \"rate\" }";
    let mut q = shaper(src);
    // Nothing measured yet: ACKs pass.
    enq!(q, ms(0), ack(0, 0));
    enq!(q, ms(0), ack(1, 0));
    deq!(q, ms(0) => 0);
    deq!(q, ms(0) => 1);
    assert_eq!(q.tuning().threshold, None, "no capacity known yet");
    let mut q = shaper(src);
    // The forward queue (capacity 45 packets) is served back to back every 2 ms, and
    // two forward packets are acknowledged per ACK.
    let mut n = 0u64;
    for k in 1..=64u64 {
        let obs = PeerObservation {
            backlog: Backlog {
                packets: 3,
                bytes: 3 * 296,
            },
            capacity_packets: Some(45),
            dequeued_packets: k,
            dequeued_bytes: k * 296,
            ..fwd_packets(0)
        };
        q.handle_observation(ms(2 * k), &obs);
        if k % 2 == 0 {
            // each ACK acknowledges two 256-byte segments
            enq!(q, ms(2 * k), ack(k as u32 * 256, 0));
            let mut d = Drops::new();
            while let Dequeued::Packet(_) = q.dequeue(ms(2 * k), &mut d) {
                n += 1;
            }
        }
    }
    let t = q.tuning();
    assert_eq!(t.service_time, Some(Duration::from_millis(2)));
    assert_eq!(t.packets_per_ack_x256, Some(512));
    assert_eq!(t.spacing, Duration::from_millis(4));
    // auto threshold before any congestion episode: half of 45 packets
    assert_eq!(t.threshold, Some(Limit::Packets(22)));
    assert!(!t.congested);
    assert_eq!(n, 32);
    // A given ACK ratio overrides the measured one.
    let q2 = shaper("threshold = \"auto\"\nleak = { kind = \"rate\", packets_per_ack = 1 }");
    assert_eq!(q2.tuning().spacing, Duration::ZERO);
}

// ---------------------------------------------------------------- in a middlebox

fn middlebox(src: &str) -> Middlebox<HeaderPacket> {
    let cfg: MiddleboxConfig = toml::from_str(src).unwrap_or_else(|e| panic!("{e}"));
    Middlebox::new(&cfg, [None, None], 1).unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn middlebox_feeds_the_forward_backlog_and_capacity() {
    // Forward (to_b): a 45-packet FIFO; reverse (to_a): the shaper with an auto threshold.
    let mut mb = middlebox(
        r#"
        [to_b]
        qdisc = { kind = "fifo", limit = "45p" }
        [to_a]
        qdisc = { kind = "ack_shaper", threshold = "auto", max_delay = "10s", leak = { kind = "interval", interval = "100ms" } }
        "#,
    );
    let mut d = Drops::new();
    for i in 0..3 {
        mb.handle_packet(ms(0), Dir::ToA, ack(i, 0), &mut d);
    }
    assert_eq!(
        tag(&mb.poll_transmit(ms(0), Dir::ToA, &mut d).packet().unwrap()),
        0
    );
    assert_eq!(
        mb.poll_transmit(ms(0), Dir::ToA, &mut d),
        Dequeued::NotBefore(ms(100))
    );
    assert_eq!(mb.poll_at(), Some(ms(100)));
    // 22 forward packets (half of 45, before any episode) make it congested.
    for i in 0..22 {
        mb.handle_packet(ms(10), Dir::ToB, data(100 + i), &mut d);
    }
    assert_eq!(
        mb.poll_transmit(ms(10), Dir::ToA, &mut d),
        Dequeued::NotBefore(ms(200))
    );
    assert_eq!(mb.poll_at(), Some(ms(200)));
    // Four more arrive (an overshoot of 4), then the forward link drains five: the episode
    // ends below 22 and the next threshold is 45 - max(2 x 4, 45 / 8) = 37.
    for i in 22..26 {
        mb.handle_packet(ms(20), Dir::ToB, data(100 + i), &mut d);
    }
    for _ in 0..5 {
        assert!(mb
            .poll_transmit(ms(150), Dir::ToB, &mut d)
            .packet()
            .is_some());
    }
    assert_eq!(mb.poll_at(), None, "not congested: the next ACK is due");
    assert_eq!(
        tag(&mb
            .poll_transmit(ms(150), Dir::ToA, &mut d)
            .packet()
            .unwrap()),
        1
    );
    assert_eq!(mb.poll_at(), Some(ms(250)));
    mb.handle_timeout(ms(250), &mut d);
    assert_eq!(
        tag(&mb
            .poll_transmit(ms(250), Dir::ToA, &mut d)
            .packet()
            .unwrap()),
        2
    );
    assert!(d.is_empty());
    let c = mb.egress(Dir::ToA).qdisc().counters();
    assert!(c.contains(&("congestion_onsets", 1)), "{c:?}");
    // 21 queued; 15 more make 36, below the learnt threshold of 37.
    for i in 26..41 {
        mb.handle_packet(ms(260), Dir::ToB, data(100 + i), &mut d);
    }
    let c = mb.egress(Dir::ToA).qdisc().counters();
    assert!(c.contains(&("congestion_onsets", 1)), "36 < 37: {c:?}");
    mb.handle_packet(ms(260), Dir::ToB, data(200), &mut d);
    let c = mb.egress(Dir::ToA).qdisc().counters();
    assert!(c.contains(&("congestion_onsets", 2)), "37 reached: {c:?}");
}

#[test]
fn auto_threshold_needs_a_forward_capacity() {
    let cfg: MiddleboxConfig = toml::from_str(
        r#"
        [to_b]
        qdisc = { kind = "prio", bands = [{}, {}] }
        [to_a]
        qdisc = { kind = "ack_shaper", threshold = "auto", leak = { kind = "rate" } }
        "#,
    )
    .unwrap();
    let e = Middlebox::<HeaderPacket>::new(&cfg, [None, None], 1)
        .err()
        .unwrap();
    assert_eq!(e.path, "to_a.qdisc.threshold");
    assert!(e.msg.contains("prio"), "{e}");
}

/// Drive a middlebox on explicit time the way the paper's satellite case does: forward at
/// 30 Mbit/s with 576-byte packets; a burst of 200 ACKs arrives back from the satellite;
/// each ACK the router sends on brings two segments (slow start) 2 ms later. Returns the
/// peak forward backlog, the drops and the shaper's counters.
fn slow_start_burst(to_a: &str) -> (u64, usize, Vec<(&'static str, u64)>) {
    use std::cmp::Reverse;
    let mut mb = middlebox(&format!(
        "[to_b]\nqdisc = {{ kind = \"fifo\", limit = \"1MB\" }}\n[to_a]\nqdisc = {to_a}\n"
    ));
    let svc = 153_600u64; // ns per forward packet
    let loop_ns = 2_000_000u64; // router -> sender -> router
    let mut d = Drops::new();
    // arrivals at the router: (time, is_data, tag)
    let mut pending: std::collections::BinaryHeap<Reverse<(u64, bool, u32)>> = Default::default();
    for i in 0..200u32 {
        pending.push(Reverse((i as u64 * 10_000, false, i)));
    }
    let (mut fwd_free, mut rev_free, mut max_fwd, mut next_tag) = (0u64, 0u64, 0u64, 10_000u32);
    let mut t = 0u64;
    while t < 100_000_000 {
        while let Some(&Reverse((at, is_data, tg))) = pending.peek() {
            if at > t {
                break;
            }
            pending.pop();
            let (dir, p) = if is_data {
                (Dir::ToB, data(tg))
            } else {
                (Dir::ToA, ack(tg, 0))
            };
            mb.handle_packet(Instant(t), dir, p, &mut d);
        }
        if t >= fwd_free
            && mb
                .poll_transmit(Instant(t), Dir::ToB, &mut d)
                .packet()
                .is_some()
        {
            fwd_free = t + svc; // its ACK comes back after the 100 ms horizon
        }
        if t >= rev_free
            && mb
                .poll_transmit(Instant(t), Dir::ToA, &mut d)
                .packet()
                .is_some()
        {
            rev_free = t + 2_134; // 40 B at 150 Mbit/s
            for _ in 0..2 {
                next_tag += 1;
                pending.push(Reverse((t + loop_ns, true, next_tag)));
            }
        }
        max_fwd = max_fwd.max(mb.backlog(Dir::ToB).bytes);
        t += 1_000;
    }
    (max_fwd, d.len(), mb.egress(Dir::ToA).qdisc().counters())
}

#[test]
fn paper_satellite_step_response() {
    let (off, drops, _) = slow_start_burst("{ kind = \"fifo\", limit = \"1MB\" }");
    assert_eq!(drops, 0);
    // Without the shaper the queue grows by one packet per service time for the whole
    // burst: 200 ACKs bring 400 segments, half of which queue.
    assert!(
        off >= 100 * 576,
        "forward queue peaked at {off} B without the shaper"
    );
    let (on, drops, c) = slow_start_burst(
        "{ kind = \"ack_shaper\", threshold = \"50KB\", leak = { kind = \"rate\", rate = \"30Mbit\", packet = \"576B\" } }",
    );
    assert_eq!(drops, 0);
    let get = |k: &str| c.iter().find(|x| x.0 == k).map(|x| x.1).unwrap();
    assert!(get("congestion_onsets") >= 1, "{c:?}");
    assert_eq!(get("acks_forced"), 0, "{c:?}");
    // With it the overshoot is about one control loop of segments arriving at twice the
    // service rate minus the service: 2 ms / 153.6 µs = 13 packets.
    assert!(
        (50_000..=50_000 + 14 * 576).contains(&on),
        "forward queue peaked at {on} B with the shaper"
    );
}
