//! The ACK filter's policies, placements, drop policies, estimators and configuration
//! errors, as scripts of packets on explicit time.
//!
//! Packets are tagged in their TCP sequence-number field (which the filter never reads):
//! `ack(f, n)` is a pure ACK of flow `f` acknowledging `n`, tagged `tag`.

use asymlink_core::ack::Keep;
use asymlink_core::packet::HeaderPacket;
use asymlink_core::qdisc::ack_filter::{
    delta_o, AckDropPolicy, AckFilter, AckFilterConfig, AckPolicy, Delta, Measure, Placement,
    Service,
};
use asymlink_core::qdisc::{
    BuildCtx, Dequeued, DropReason, Drops, FilterReason, Qdisc, QdiscConfig, Stage, Verdict,
};
use asymlink_core::time::{Duration, Instant};
use asymlink_core::units::{Limit, Rate};
use asymlink_core::wire::{
    Headers, IpRepr, SackBlock, SackBlocks, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Transport,
    UdpRepr,
};
use core::net::{IpAddr, Ipv4Addr};

fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

fn us(t: u64) -> Instant {
    Instant::from_micros(t)
}

/// A segment of flow `flow` (receiver 10.0.0.2 → sender 10.0.0.1, port 1000 + flow).
fn seg(flow: u16, tag: u32, ack: u32, flags: TcpFlags, payload: u32) -> HeaderPacket {
    HeaderPacket::new(Headers::tcp(
        IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ),
        TcpRepr {
            src_port: 80,
            dst_port: 1000 + flow,
            seq: SeqNumber(tag),
            ack: SeqNumber(ack),
            flags,
            window: 1000,
            urgent: 0,
            opts: TcpOptions::default(),
        },
        payload,
    ))
}

/// A pure ACK.
fn ack(flow: u16, tag: u32, ack: u32) -> HeaderPacket {
    seg(flow, tag, ack, TcpFlags::ACK, 0)
}

fn edit(mut p: HeaderPacket, f: impl FnOnce(&mut TcpRepr)) -> HeaderPacket {
    f(p.hdr.tcp_repr_mut().unwrap());
    p
}

fn tag(p: &HeaderPacket) -> u32 {
    p.hdr.tcp_repr().map(|t| t.seq.0).unwrap_or(u32::MAX)
}

fn filter(cfg: AckFilterConfig, rate: Option<Rate>) -> AckFilter<HeaderPacket> {
    AckFilter::new(&cfg, rate).unwrap_or_else(|e| panic!("{e}"))
}

/// A test harness: the filter, its discard sink and a log of what was discarded.
struct H {
    q: AckFilter<HeaderPacket>,
    d: Drops<HeaderPacket>,
    /// (tag, verdict, stage) of every discard so far.
    gone: Vec<(u32, Verdict, Stage)>,
}

impl H {
    fn new(cfg: AckFilterConfig, rate: Option<Rate>) -> H {
        H {
            q: filter(cfg, rate),
            d: Drops::new(),
            gone: Vec::new(),
        }
    }
    #[track_caller]
    fn enq(&mut self, now: Instant, p: HeaderPacket) {
        self.q.enqueue(now, p, &mut self.d);
        self.collect();
    }
    #[track_caller]
    fn deq(&mut self, now: Instant) -> Option<u32> {
        let r = match self.q.dequeue(now, &mut self.d) {
            Dequeued::Packet(p) => Some(tag(&p)),
            Dequeued::Empty => None,
            Dequeued::NotBefore(t) => panic!("an ACK filter never waits (NotBefore({t:?}))"),
        };
        self.collect();
        r
    }
    #[track_caller]
    fn drain(&mut self, now: Instant) -> Vec<u32> {
        let mut out = Vec::new();
        while let Some(t) = self.deq(now) {
            out.push(t);
        }
        out
    }
    #[track_caller]
    fn collect(&mut self) {
        for x in self.d.drain() {
            self.gone.push((tag(&x.pkt), x.verdict, x.stage));
        }
        if let Err(e) = self.q.stats().check(self.q.backlog()) {
            panic!("conservation violated: {e}");
        }
    }
    fn filtered(&self) -> Vec<u32> {
        self.gone
            .iter()
            .filter(|g| matches!(g.1, Verdict::Filtered(_)))
            .map(|g| g.0)
            .collect()
    }
    fn dropped(&self) -> Vec<(u32, DropReason)> {
        self.gone
            .iter()
            .filter_map(|g| match g.1 {
                Verdict::Dropped(r) => Some((g.0, r)),
                _ => None,
            })
            .collect()
    }
}

fn cfg(policy: AckPolicy) -> AckFilterConfig {
    AckFilterConfig::new(policy)
}

const LINK: Option<Rate> = Some(Rate::kbps(100));

// ------------------------------------------------------------------------- none

#[test]
fn none_is_a_fifo_with_drop_tail() {
    let mut h = H::new(cfg(AckPolicy::None).with_limit(Limit::Packets(3)), None);
    for (i, a) in [100, 200, 300, 400].into_iter().enumerate() {
        h.enq(ms(i as u64), ack(0, i as u32, a));
    }
    assert_eq!(h.dropped(), vec![(3, DropReason::QueueFull)]);
    assert!(h.filtered().is_empty());
    assert_eq!(h.drain(ms(10)), vec![0, 1, 2]);
}

// ------------------------------------------------------------------------- classic

#[test]
fn classic_replace_puts_the_new_ack_in_the_erased_ones_place() {
    let mut h = H::new(cfg(AckPolicy::Classic), None);
    h.enq(ms(0), ack(0, 1, 100)); // history for flow 0 (first ACK: possibly a duplicate)
    h.deq(ms(0));
    h.enq(ms(1), ack(0, 2, 200));
    h.enq(ms(2), ack(1, 3, 50));
    h.enq(ms(3), ack(0, 4, 300)); // erases 2 and takes its place, ahead of flow 1
    assert_eq!(h.filtered(), vec![2]);
    assert_eq!(h.q.stats().filtered_for(FilterReason::AckSuperseded), 1);
    assert_eq!(h.drain(ms(4)), vec![4, 3]);
}

#[test]
fn classic_tail_moves_the_new_ack_to_the_back() {
    let mut h = H::new(
        cfg(AckPolicy::Classic).with_placement(Placement::Tail),
        None,
    );
    h.enq(ms(0), ack(0, 1, 100));
    h.deq(ms(0));
    h.enq(ms(1), ack(0, 2, 200));
    h.enq(ms(2), ack(1, 3, 50));
    h.enq(ms(3), ack(0, 4, 300));
    assert_eq!(h.filtered(), vec![2]);
    assert_eq!(h.drain(ms(4)), vec![3, 4]);
}

#[test]
fn classic_erases_every_removable_ack_and_stops_at_a_kept_one() {
    let mut h = H::new(
        cfg(AckPolicy::Classic).with_placement(Placement::Tail),
        None,
    );
    // Queue of flow 0 built without filtering being able to act: duplicates are barriers.
    h.enq(ms(0), ack(0, 1, 100)); // possibly a duplicate (no history): kept
    h.enq(ms(1), ack(0, 2, 100)); // duplicate: kept
    h.enq(ms(2), ack(0, 3, 100)); // duplicate
    h.enq(ms(3), ack(0, 4, 100)); // duplicate
    assert!(h.filtered().is_empty(), "duplicates are never filtered");
    h.enq(ms(4), ack(0, 5, 200));
    h.enq(ms(5), ack(0, 6, 300)); // erases 5 only: 4 is a duplicate
    assert_eq!(h.filtered(), vec![5]);
    assert!(h.q.kept_for(Keep::DuplicateAck) >= 1);
    assert_eq!(h.drain(ms(6)), vec![1, 2, 3, 4, 6]);
}

#[test]
fn classic_keeps_ecn_transitions_window_updates_and_uncovered_sack() {
    let mut h = H::new(
        cfg(AckPolicy::Classic).with_placement(Placement::Tail),
        None,
    );
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(1), ack(0, 2, 200));
    // ECE on: 2 (without ECE) stays, and so does everything before it.
    h.enq(
        ms(2),
        edit(ack(0, 3, 300), |t| t.flags = TcpFlags::ACK | TcpFlags::ECE),
    );
    assert!(h.filtered().is_empty());
    // Same ECE state: 3 goes.
    h.enq(
        ms(3),
        edit(ack(0, 4, 400), |t| t.flags = TcpFlags::ACK | TcpFlags::ECE),
    );
    assert_eq!(h.filtered(), vec![3]);
    // A smaller window: 4 stays.
    h.enq(
        ms(4),
        edit(ack(0, 5, 500), |t| {
            t.flags = TcpFlags::ACK | TcpFlags::ECE;
            t.window = 900;
        }),
    );
    assert_eq!(h.filtered(), vec![3]);
    // SACK of [700, 800) above the next cumulative ACK (600) not repeated: 6 stays.
    let mut s = SackBlocks::new();
    s.push(SackBlock {
        left: SeqNumber(700),
        right: SeqNumber(800),
    });
    h.enq(
        ms(5),
        edit(ack(0, 6, 550), |t| {
            t.flags = TcpFlags::ACK | TcpFlags::ECE;
            t.window = 900;
            t.opts.sack = s;
        }),
    );
    assert_eq!(h.filtered(), vec![3, 5]);
    h.enq(
        ms(6),
        edit(ack(0, 7, 600), |t| {
            t.flags = TcpFlags::ACK | TcpFlags::ECE;
            t.window = 900;
        }),
    );
    assert_eq!(h.filtered(), vec![3, 5], "6's SACK block is not covered");
    assert!(h.q.kept_for(Keep::EcnChange) >= 1);
    assert!(h.q.kept_for(Keep::WindowUpdate) >= 1);
    assert!(h.q.kept_for(Keep::SackNotCovered) >= 1);
    assert_eq!(h.drain(ms(7)), vec![1, 2, 4, 6, 7]);
}

#[test]
fn data_syn_fin_and_other_protocols_are_never_filtered() {
    let mut h = H::new(cfg(AckPolicy::Classic), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(1), seg(0, 2, 150, TcpFlags::ACK | TcpFlags::PSH, 500));
    h.enq(ms(2), seg(0, 3, 200, TcpFlags::ACK | TcpFlags::FIN, 0));
    let udp = HeaderPacket::new(Headers {
        ip: IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        ),
        transport: Transport::Udp(UdpRepr {
            src_port: 9,
            dst_port: 9,
        }),
        payload_len: 100,
    });
    h.enq(ms(3), udp);
    h.enq(ms(4), ack(0, 5, 300));
    assert!(h.filtered().is_empty(), "{:?}", h.filtered());
    assert_eq!(h.q.backlog().packets, 5);
}

#[test]
fn a_data_segment_supersedes_older_pure_acks() {
    let mut h = H::new(cfg(AckPolicy::Classic), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.deq(ms(0));
    h.enq(ms(1), ack(0, 2, 200));
    h.enq(ms(2), seg(0, 3, 300, TcpFlags::ACK | TcpFlags::PSH, 500));
    assert_eq!(h.filtered(), vec![2]);
    assert_eq!(h.drain(ms(3)), vec![3]);
}

// ------------------------------------------------------------------------- threshold

#[test]
fn threshold_erases_the_most_recent_ack_and_takes_its_place() {
    let mut h = H::new(cfg(AckPolicy::Threshold).with_delta(Delta::Fixed(2)), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(0), ack(0, 2, 200));
    h.enq(ms(0), ack(1, 3, 10)); // another connection behind
    h.enq(ms(1), ack(0, 4, 300)); // flow 0 has δ = 2 queued: 2 goes, 4 in its place
    h.enq(ms(2), ack(0, 5, 400)); // again: 4 goes, 5 in its place
    assert_eq!(h.filtered(), vec![2, 4]);
    assert_eq!(h.q.stats().filtered_for(FilterReason::AckThreshold), 2);
    assert_eq!(h.drain(ms(3)), vec![1, 5, 3]);
}

#[test]
fn threshold_below_delta_filters_nothing() {
    let mut h = H::new(cfg(AckPolicy::Threshold).with_delta(Delta::Fixed(30)), None);
    for i in 0..30 {
        h.enq(ms(i), ack(0, i as u32, 100 * (i as u32 + 1)));
    }
    assert!(h.filtered().is_empty());
    h.enq(ms(30), ack(0, 30, 3100));
    assert_eq!(h.filtered(), vec![29]);
    assert_eq!(h.q.backlog().packets, 30);
}

#[test]
fn delta_auto_uses_equation_one() {
    // 100 kbit/s, 40-byte ACKs, T = 200 ms, d = 1: 31.25 → 31.
    assert!((delta_o(Rate::kbps(100), Duration::from_millis(200), 40, 1) - 31.25).abs() < 1e-9);
    let q = filter(
        cfg(AckPolicy::Threshold)
            .with_delta(Delta::Auto)
            .with_eq1(Duration::from_millis(200), 1),
        LINK,
    );
    assert_eq!(q.delta(), Some(31));
    // d = 2 and a 1 Mbit/s channel: 3125 × 0.2 / 3 = 208.3.
    let q = filter(
        cfg(AckPolicy::Threshold)
            .with_delta(Delta::Auto)
            .with_eq1(Duration::from_millis(200), 2),
        Some(Rate::mbps(1)),
    );
    assert_eq!(q.delta(), Some(208));
}

/// Slow start over a 100 kbit/s channel (3.2 ms per ACK), T = 200 ms, d = 1: each round
/// the receiver sends a burst of ACKs at twice the channel's rate. Returns the harness
/// after `rounds` rounds.
fn slow_start_bursts(cfg: AckFilterConfig, rounds: u32) -> H {
    let mut h = H::new(cfg, LINK);
    let svc = 3200u64; // µs per ACK
    let mut t = 0u64;
    let mut next_free = 0u64; // when the channel can take the next ACK
    let mut tag = 0u32;
    let mut acked = 0u32;
    let mut burst = 1u32;
    for _ in 0..rounds {
        // Arrivals at twice the service rate, interleaved with link service.
        let start = t;
        for k in 0..burst {
            let at = start + k as u64 * svc / 2;
            while next_free <= at {
                let now = next_free.max(t);
                if h.deq(us(now)).is_some() {
                    next_free = now + svc;
                } else {
                    next_free = at + 1;
                    break;
                }
                t = now;
            }
            t = at;
            acked += 1000;
            tag += 1;
            h.enq(us(at), ack(0, tag, acked));
            if next_free <= at {
                h.deq(us(at));
                next_free = at + svc;
            }
        }
        t = start + 200_000;
        // Serve until the next round.
        while next_free < t {
            let now = next_free;
            if h.deq(us(now)).is_some() {
                next_free = now + svc;
            } else {
                next_free = t;
            }
        }
        burst *= 2;
    }
    h
}

#[test]
fn delta_auto_without_t_and_d_is_estimated_from_the_first_full_cycle() {
    let h = slow_start_bursts(cfg(AckPolicy::Threshold).with_delta(Delta::Auto), 8);
    let d = h.q.delta().expect("estimated after the channel filled");
    // δ_o = 31.25; the estimate lies within a factor 1 + 1/d = 2 above it.
    assert!((31..=64).contains(&d), "estimated δ = {d}");
    assert!(
        !h.filtered().is_empty(),
        "filtering started once δ was known"
    );
    // Before the estimate nothing was filtered (δ = ∞): the filtering came late.
    let mut early = slow_start_bursts(cfg(AckPolicy::Threshold).with_delta(Delta::Auto), 5);
    assert_eq!(
        early.q.delta(),
        None,
        "bursts of ≤ 16 ACKs never fill the channel"
    );
    assert!(early.filtered().is_empty());
    early.drain(ms(10_000));
}

// ------------------------------------------------------------------------- delayed

/// ACKs of `flows` arriving every `gap_us` (round robin over the flows) at a channel
/// served every 3.2 ms, for `dur_ms`.
fn steady(h: &mut H, flows: u16, gap_us: u64, dur_ms: u64) {
    let mut next_arrival = 0u64;
    let mut next_free = 0u64;
    let mut n = 0u32;
    let mut acked = [0u32; 8];
    let end = dur_ms * 1000;
    while next_arrival < end {
        if next_free <= next_arrival {
            let now = next_free;
            if h.deq(us(now)).is_some() {
                next_free = now + 3200;
            } else {
                next_free = next_arrival;
                // the link idles until the arrival
                h.enq(us(next_arrival), {
                    let f = (n % flows as u32) as u16;
                    acked[f as usize] += 1000;
                    n += 1;
                    ack(f, n, acked[f as usize])
                });
                next_arrival += gap_us;
            }
        } else {
            let f = (n % flows as u32) as u16;
            acked[f as usize] += 1000;
            n += 1;
            h.enq(us(next_arrival), ack(f, n, acked[f as usize]));
            next_arrival += gap_us;
        }
    }
}

#[test]
fn delayed_filters_only_once_the_channel_is_busy() {
    let mut h = H::new(
        cfg(AckPolicy::Delayed).with_window(Duration::from_millis(200)),
        LINK,
    );
    // Light load: an ACK every 10 ms (32 % of the channel): nothing is filtered.
    steady(&mut h, 1, 10_000, 2000);
    assert!(h.filtered().is_empty());
    assert!(h.q.utilization_ppm(ms(2000)) < 400_000);
    // Overload: an ACK every 1 ms. The queue first grows (the TSW rate takes a while to
    // reach 90 %), then filtering holds it at one ACK.
    let mut h = H::new(cfg(AckPolicy::Delayed), LINK);
    steady(&mut h, 1, 1000, 2000);
    let filtered = h.filtered();
    assert!(filtered.len() > 1000, "{}", filtered.len());
    // The first filtered ACK came after a burst was absorbed.
    assert!(filtered[0] > 30, "filtering started at ACK {}", filtered[0]);
    assert!(h.q.backlog().packets <= 2);
    assert!(h.q.utilization_ppm(ms(2000)) >= 900_000);
}

#[test]
fn delayed_presence_needs_no_rate() {
    let mut h = H::new(
        cfg(AckPolicy::Delayed).with_measure(Measure::Presence),
        None,
    );
    steady(&mut h, 1, 10_000, 1000);
    assert!(h.filtered().is_empty());
    let u = h.q.utilization_ppm(ms(1000));
    assert!(
        (250_000..400_000).contains(&u),
        "busy 3.2 ms of every 10: {u}"
    );
    let mut h = H::new(
        cfg(AckPolicy::Delayed).with_measure(Measure::Presence),
        None,
    );
    steady(&mut h, 1, 1000, 2000);
    assert!(h.filtered().len() > 1000);
    assert!(h.q.backlog().packets <= 2);
}

#[test]
fn delayed_drops_longest_queue_while_not_filtering_and_tail_while_filtering() {
    let mut h = H::new(cfg(AckPolicy::Delayed).with_limit(Limit::Packets(3)), LINK);
    // Not filtering (nothing has left yet): longest-queue drop.
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(0), ack(0, 2, 200));
    h.enq(ms(0), ack(0, 3, 300));
    h.enq(ms(0), ack(1, 4, 50));
    assert_eq!(h.dropped(), vec![(1, DropReason::LongestQueue)]);
    assert_eq!(h.drain(ms(1)), vec![2, 3, 4]);
    // While filtering, classic erasing makes room; a new connection meeting a full buffer
    // is dropped at the tail.
    let mut h = H::new(cfg(AckPolicy::Delayed).with_limit(Limit::Packets(3)), LINK);
    steady(&mut h, 1, 1000, 1000);
    assert!(h.q.utilization_ppm(ms(1000)) >= 900_000);
    assert!(h.filtered().len() > 100);
    let t = ms(1000);
    let mut tag = 10_000;
    let mut flow = 5;
    while h.q.backlog().packets < 3 {
        h.enq(t, ack(flow, tag, 1));
        flow += 1;
        tag += 1;
    }
    h.enq(t, ack(flow, tag, 1));
    assert_eq!(*h.dropped().last().unwrap(), (tag, DropReason::QueueFull));
}

// ------------------------------------------------------------------------- perflow

#[test]
fn perflow_filters_the_fast_connection_and_spares_the_slow_one() {
    let mut h = H::new(cfg(AckPolicy::Perflow), LINK);
    // Flow 0: an ACK every 1 ms; flow 1: a pair of ACKs every 100 ms.
    let mut a0 = 0;
    let mut a1 = 0;
    let mut tag = 0;
    let mut next_free = 0u64;
    for t in 0..3000u64 {
        let now = t * 1000;
        while next_free <= now {
            let at = next_free;
            if h.deq(us(at)).is_some() {
                next_free = at + 3200;
            } else {
                next_free = now + 1;
            }
        }
        a0 += 1000;
        tag += 1;
        h.enq(us(now), ack(0, tag, a0));
        if t % 100 == 0 {
            for _ in 0..2 {
                a1 += 1000;
                tag += 1;
                h.enq(us(now), ack(1, 1_000_000 + tag, a1));
            }
        }
    }
    let f = h.filtered();
    assert!(f.iter().filter(|&&t| t < 1_000_000).count() > 1000);
    assert_eq!(
        f.iter().filter(|&&t| t >= 1_000_000).count(),
        0,
        "the slow connection stays below its fair share"
    );
}

#[test]
fn perflow_round_robin_serves_connections_in_turn() {
    let mut h = H::new(
        cfg(AckPolicy::Perflow).with_service(Service::RoundRobin),
        LINK,
    );
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(0), ack(0, 2, 100)); // duplicates: never filtered
    h.enq(ms(0), ack(0, 3, 100));
    h.enq(ms(0), ack(1, 11, 50));
    h.enq(ms(0), ack(1, 12, 50));
    h.enq(ms(0), ack(2, 21, 70));
    assert_eq!(h.drain(ms(1)), vec![1, 11, 21, 2, 12, 3]);
}

#[test]
fn perflow_frees_entries_of_connections_that_went_quiet() {
    let mut h = H::new(cfg(AckPolicy::Perflow).with_free_below(0.01), LINK);
    for f in 0..5u16 {
        h.enq(ms(0), ack(f, f as u32, 100));
        h.enq(ms(0), ack(f, 10 + f as u32, 200));
    }
    h.drain(ms(10));
    assert_eq!(h.q.connections(), 5);
    // Long after, one connection sends: the others' rates have decayed below 1 %.
    h.enq(ms(20_000), ack(0, 99, 300));
    h.enq(ms(20_000), ack(0, 100, 400)); // triggers the per-connection test
    assert_eq!(h.q.connections(), 1);
}

// ------------------------------------------------------------------------- drops

#[test]
fn filtering_makes_room_before_any_drop() {
    let mut h = H::new(cfg(AckPolicy::Classic).with_limit(Limit::Packets(2)), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.deq(ms(0));
    h.enq(ms(1), ack(0, 2, 200));
    h.enq(ms(1), ack(1, 3, 50));
    h.enq(ms(2), ack(0, 4, 300)); // full, but 2 is superseded
    assert!(h.dropped().is_empty());
    assert_eq!(h.filtered(), vec![2]);
    h.enq(ms(3), ack(2, 5, 10)); // a new connection: drop-tail
    assert_eq!(h.dropped(), vec![(5, DropReason::QueueFull)]);
}

#[test]
fn a_dropped_arrival_filters_nothing() {
    // Byte limit: the newer ACK (with SACK, 52 bytes) does not fit in place of the
    // 40-byte one it supersedes; it is dropped and the old ACK stays.
    let mut h = H::new(cfg(AckPolicy::Classic).with_limit(Limit::Bytes(80)), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.deq(ms(0));
    h.enq(ms(1), ack(0, 2, 200));
    h.enq(ms(1), ack(1, 3, 50));
    let mut s = SackBlocks::new();
    s.push(SackBlock {
        left: SeqNumber(400),
        right: SeqNumber(500),
    });
    h.enq(ms(2), edit(ack(0, 4, 300), |t| t.opts.sack = s));
    assert_eq!(h.dropped(), vec![(4, DropReason::QueueFull)]);
    assert!(h.filtered().is_empty());
    assert_eq!(h.drain(ms(3)), vec![2, 3]);
}

#[test]
fn longest_queue_drop_takes_the_oldest_of_the_longest_queue() {
    let mut h = H::new(
        cfg(AckPolicy::None)
            .with_limit(Limit::Packets(4))
            .with_drop(AckDropPolicy::LongestQueue),
        None,
    );
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(0), ack(0, 2, 200));
    h.enq(ms(0), ack(0, 3, 300));
    h.enq(ms(0), ack(1, 4, 50));
    h.enq(ms(0), ack(1, 5, 60)); // flow 0 is longest (3 vs 2 counting the arrival)
    assert_eq!(h.dropped(), vec![(1, DropReason::LongestQueue)]);
    h.enq(ms(0), ack(1, 6, 70)); // now flow 1 (2 + 1) is longest: its oldest goes
    assert_eq!(h.dropped()[1], (4, DropReason::LongestQueue));
    assert_eq!(h.drain(ms(1)), vec![2, 3, 5, 6]);
    assert_eq!(h.q.stats().dropped_for(DropReason::LongestQueue), 2);
}

#[test]
fn highest_rate_drop_takes_the_oldest_of_the_fastest_connection() {
    let mut h = H::new(
        cfg(AckPolicy::None)
            .with_limit(Limit::Packets(3))
            .with_drop(AckDropPolicy::HighestRate),
        None,
    );
    // Flow 0 sends 10 ACKs that leave; flow 1 one. Flow 0's output rate is higher.
    for i in 0..10 {
        h.enq(ms(i), ack(0, i as u32, 100 * (i as u32 + 1)));
        h.deq(ms(i));
    }
    h.enq(ms(10), ack(1, 100, 10));
    h.deq(ms(10));
    h.enq(ms(11), ack(1, 101, 20));
    h.enq(ms(11), ack(1, 102, 30));
    h.enq(ms(11), ack(0, 103, 2000));
    h.enq(ms(11), ack(1, 104, 40)); // full: flow 0 has the highest rate → 103 goes
    assert_eq!(h.dropped(), vec![(103, DropReason::HighestRate)]);
    // An arrival of the fastest connection with nothing of it queued is itself dropped.
    h.enq(ms(12), ack(0, 105, 2100));
    assert_eq!(h.dropped()[1], (105, DropReason::HighestRate));
}

#[test]
fn perflow_defaults_to_highest_rate_drop() {
    let q = filter(cfg(AckPolicy::Perflow), LINK);
    assert_eq!(q.params().drop, Some(AckDropPolicy::HighestRate));
    let q = filter(cfg(AckPolicy::Classic), LINK);
    assert_eq!(q.params().drop, Some(AckDropPolicy::Tail));
    let q = filter(cfg(AckPolicy::Delayed), LINK);
    assert_eq!(
        q.params().drop,
        None,
        "adaptive: tail while filtering, else longest queue"
    );
}

// ------------------------------------------------------------------------- conservative

#[test]
fn conservative_removes_one_older_ack_when_two_are_removable() {
    let mut h = H::new(cfg(AckPolicy::Conservative), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.deq(ms(0));
    h.enq(ms(1), ack(0, 2, 200));
    h.enq(ms(2), ack(0, 3, 300)); // one removable (2): kept
    assert!(h.filtered().is_empty());
    h.enq(ms(3), ack(0, 4, 400)); // two removable (2, 3): the oldest goes
    assert_eq!(h.filtered(), vec![2]);
    h.enq(ms(4), ack(0, 5, 500));
    assert_eq!(h.filtered(), vec![2, 3]);
    assert_eq!(h.drain(ms(5)), vec![4, 5]);
}

/// SACK blocks from `(left, right)` pairs.
fn sack_of(blocks: &[(u32, u32)]) -> SackBlocks {
    let mut s = SackBlocks::new();
    for &(l, r) in blocks {
        s.push(SackBlock {
            left: SeqNumber(l),
            right: SeqNumber(r),
        });
    }
    s
}

#[test]
fn the_same_cumulative_ack_with_more_sack_coverage_keeps_the_queued_ack() {
    // CAKE may remove the queued ACK here (the newer one covers more); asymlink keeps
    // every ACK whose number the newer one does not exceed (`not_newer`): it may be the
    // duplicate ACK a sender counts towards fast retransmit.
    for placement in [Placement::Tail, Placement::Replace] {
        let mut h = H::new(cfg(AckPolicy::Classic).with_placement(placement), None);
        // History first (the first ACK of a connection is always kept).
        h.enq(ms(0), ack(0, 0, 50));
        assert_eq!(h.drain(ms(0)), vec![0]);
        h.enq(
            ms(0),
            edit(ack(0, 1, 100), |t| t.opts.sack = sack_of(&[(300, 400)])),
        );
        h.enq(
            ms(1),
            edit(ack(0, 2, 100), |t| {
                t.opts.sack = sack_of(&[(300, 400), (500, 600)]);
            }),
        );
        assert!(h.filtered().is_empty(), "{placement:?}");
        assert!(h.q.kept_for(Keep::NotNewer) >= 1);
        assert_eq!(h.drain(ms(2)), vec![1, 2]);
    }
}

#[test]
fn a_rst_with_ack_never_supersedes_a_queued_ack() {
    // CAKE lets a newer RST+ACK trigger removal of the queued ACKs; asymlink does not
    // (`newer_not_ack`): a RST the receiver discards (out of window) must not have cost
    // the connection its ACKs.
    for placement in [Placement::Tail, Placement::Replace] {
        let mut h = H::new(cfg(AckPolicy::Classic).with_placement(placement), None);
        h.enq(ms(0), ack(0, 0, 50));
        assert_eq!(h.drain(ms(0)), vec![0]);
        h.enq(ms(0), ack(0, 1, 100));
        h.enq(ms(1), ack(0, 2, 200));
        assert_eq!(h.filtered(), vec![1]);
        h.enq(ms(1), ack(0, 4, 250));
        assert_eq!(h.filtered(), vec![1, 2]);
        h.enq(ms(2), seg(0, 3, 300, TcpFlags::ACK | TcpFlags::RST, 0));
        assert_eq!(h.filtered(), vec![1, 2], "{placement:?}");
        assert_eq!(h.drain(ms(3)), vec![4, 3]);
    }
}

// ------------------------------------------------------------------------- state

#[test]
fn the_connection_table_is_bounded() {
    let mut h = H::new(cfg(AckPolicy::Classic).with_max_connections(2), None);
    h.enq(ms(0), ack(0, 1, 100));
    h.enq(ms(0), ack(1, 2, 100));
    // Both entries have packets queued: flow 2 shares the unfiltered bucket.
    h.enq(ms(1), ack(2, 3, 100));
    h.enq(ms(1), ack(2, 4, 200));
    assert_eq!(h.q.untracked(), 2);
    assert!(h.filtered().is_empty());
    assert_eq!(h.q.connections(), 2);
    h.drain(ms(2));
    // Now idle entries are evicted to make room.
    h.enq(ms(3), ack(2, 5, 300));
    assert_eq!(h.q.evicted(), 1);
    assert_eq!(h.q.connections(), 2);
}

#[test]
fn a_full_table_evicts_the_entry_idle_the_longest() {
    for service in [Service::RoundRobin, Service::Fifo] {
        let mut h = H::new(
            cfg(AckPolicy::Classic)
                .with_max_connections(2)
                .with_service(service),
            None,
        );
        // Flow 0 goes idle at 0 ms, flow 1 at 1 ms, flow 0 again at 2 ms.
        for (t, f, n) in [(0, 0, 100), (1, 1, 100), (2, 0, 200)] {
            h.enq(ms(t), ack(f, n, n));
            assert_eq!(h.drain(ms(t)), vec![n]);
        }
        // Flow 2 takes the entry of flow 1, idle the longest; flow 0 keeps its history, so
        // its ACK 300 is superseded by 400 (a fresh entry would keep its first ACK).
        h.enq(ms(3), ack(2, 1, 100));
        assert_eq!(h.q.evicted(), 1);
        h.enq(ms(3), ack(0, 300, 300));
        h.enq(ms(3), ack(0, 400, 400));
        assert_eq!(h.filtered(), vec![300], "{service:?}");
        assert_eq!(h.q.untracked(), 0);
    }
}

#[test]
fn a_flow_in_the_shared_bucket_is_never_reordered() {
    // Both entries busy: flow 2's 1000 and 2000 wait in the shared bucket. Flow 0's entry
    // then goes idle; flow 2's 3000 must not take it (round robin would serve it first).
    for service in [Service::RoundRobin, Service::Fifo] {
        let mut h = H::new(
            cfg(AckPolicy::Classic)
                .with_max_connections(2)
                .with_service(service),
            None,
        );
        h.enq(ms(0), ack(0, 1, 100));
        h.enq(ms(0), ack(1, 2, 100));
        h.enq(ms(1), ack(2, 1000, 1000));
        h.enq(ms(1), ack(2, 2000, 2000));
        assert_eq!(h.deq(ms(2)), Some(1));
        h.enq(ms(3), ack(2, 3000, 3000));
        let out: Vec<u32> = h.drain(ms(4)).into_iter().filter(|&t| t >= 1000).collect();
        assert_eq!(out, vec![1000, 2000, 3000], "{service:?}");
        // Once its shared packets have left, the flow gets an entry of its own.
        h.enq(ms(5), ack(2, 4000, 4000));
        assert_eq!(h.q.connections(), 2);
        assert_eq!(h.q.queue_lengths().len(), 1);
        assert!(h.q.queue_lengths()[0].0.is_some());
    }
}

#[test]
fn signed_reserved_flag_and_extension_header_acks_are_never_filtered() {
    let signed = |p: HeaderPacket| edit(p, |t| t.opts.signed = true);
    let reserved = |p: HeaderPacket| edit(p, |t| t.flags = TcpFlags::ACK | TcpFlags(0x200));
    let ae = |p: HeaderPacket| edit(p, |t| t.flags = TcpFlags::ACK | TcpFlags::NS);
    let ah = |mut p: HeaderPacket| {
        p.hdr.ip.auth = true;
        p.hdr.ip.extensions = true;
        p
    };
    let ext = |mut p: HeaderPacket| {
        p.hdr.ip.extensions = true;
        p
    };
    let kinds: [(&dyn Fn(HeaderPacket) -> HeaderPacket, Keep); 5] = [
        (&signed, Keep::Signed),
        (&ah, Keep::Signed),
        (&reserved, Keep::ReservedFlag),
        (&ae, Keep::ReservedFlag),
        (&ext, Keep::IpExtensions),
    ];
    for (make, why) in kinds {
        let mut h = H::new(
            cfg(AckPolicy::Classic).with_placement(Placement::Tail),
            None,
        );
        h.enq(ms(0), ack(0, 1, 100));
        h.deq(ms(0));
        // A train of increasing ACKs of this kind: each would supersede the one before.
        for (i, a) in [200, 300, 400].into_iter().enumerate() {
            h.enq(ms(1 + i as u64), make(ack(0, 2 + i as u32, a)));
        }
        assert!(h.filtered().is_empty(), "{why:?}");
        assert!(h.q.kept_for(why) >= 1, "{why:?}");
        // A plain newer ACK does not remove them either.
        h.enq(ms(5), ack(0, 9, 500));
        assert!(h.filtered().is_empty(), "{why:?}");
        assert_eq!(h.drain(ms(6)), vec![2, 3, 4, 9], "{why:?}");
    }
}

#[test]
fn memory_does_not_grow_with_traffic() {
    let mut h = H::new(
        cfg(AckPolicy::Classic).with_placement(Placement::Tail),
        None,
    );
    let (mut peak, mut peak_slots) = (0, 0);
    // 100 000 ACKs of 50 connections, a departure every 4 arrivals.
    for i in 0..100_000u32 {
        let f = (i % 50) as u16;
        h.enq(us(i as u64 * 100), ack(f, i, 1000 + i));
        if i % 4 == 0 {
            h.deq(us(i as u64 * 100));
        }
        h.gone.clear();
        peak = peak.max(h.q.backlog().packets);
        peak_slots = peak_slots.max(h.q.slots_held());
    }
    // One ACK per connection, plus each connection's first ACK (kept: without history it
    // may be a duplicate) until it leaves.
    assert!(peak <= 100, "{peak}");
    assert!(peak_slots <= 2 * 100 + 65, "{peak_slots}");
    assert_eq!(h.q.connections(), 50);
    assert_eq!(
        h.q.stats().filters() + h.q.stats().dequeued + h.q.backlog().packets as u64,
        100_000
    );
}

// ------------------------------------------------------------------------- config

fn build(src: &str) -> Result<(), String> {
    let c: QdiscConfig = toml::from_str(src).map_err(|e| e.to_string())?;
    let ctx = BuildCtx {
        link_rate: None,
        ..BuildCtx::default()
    };
    c.build::<HeaderPacket>(&ctx)
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[test]
fn configuration_errors_are_clear() {
    let cases = [
        ("policy = \"classic\"\ndelat = 3", "delat"),
        ("policy = \"clasic\"", "clasic"),
        ("policy = \"threshold\"\ndelta = 0", "at least 1"),
        ("policy = \"threshold\"\ndelta = -3", "δ must be"),
        ("policy = \"threshold\"\ndelta = \"big\"", "δ must be"),
        ("policy = \"threshold\"", "ack_filter.delta: is required"),
        (
            "policy = \"classic\"\ndelta = 3",
            "ack_filter.delta: is not used by policy = \"classic\"",
        ),
        (
            "policy = \"threshold\"\ndelta = 3\nrtt = \"200ms\"",
            "only used with delta = \"auto\"",
        ),
        (
            "policy = \"threshold\"\ndelta = \"auto\"\nrtt = \"200ms\"",
            "ack_every",
        ),
        (
            "policy = \"threshold\"\ndelta = \"auto\"\nrtt = \"200ms\"\nack_every = 1",
            "channel_rate",
        ),
        (
            "policy = \"delayed\"",
            "set channel_rate, or measure = \"presence\"",
        ),
        (
            "policy = \"perflow\"",
            "per-connection filtering needs the channel rate",
        ),
        (
            "policy = \"delayed\"\nmeasure = \"presence\"\nutilization = 1.5",
            "utilization",
        ),
        (
            "policy = \"conservative\"\nplacement = \"tail\"",
            "placement: is not used",
        ),
        ("policy = \"classic\"\nlimit = \"0p\"", "limit"),
        ("policy = \"classic\"\nwindow = \"0ms\"", "window"),
        (
            "policy = \"perflow\"\nchannel_rate = \"100kbit\"\nfree_below = 2.0",
            "free_below",
        ),
        (
            "policy = \"classic\"\nmax_connections = 0",
            "max_connections",
        ),
        ("policy = \"classic\"\nservice = \"lifo\"", "lifo"),
    ];
    for (body, needle) in cases {
        let src = format!("kind = \"ack_filter\"\n{body}");
        let e = build(&src).expect_err(body);
        assert!(e.contains(needle), "{body}: {e}");
    }
    for ok in [
        "policy = \"none\"",
        "policy = \"classic\"\nplacement = \"tail\"\nservice = \"round_robin\"",
        "policy = \"threshold\"\ndelta = 30\nlimit = \"10p\"\ndrop = \"longest_queue\"",
        "policy = \"threshold\"\ndelta = \"auto\"",
        "policy = \"threshold\"\ndelta = \"auto\"\nrtt = \"200ms\"\nack_every = 2\nchannel_rate = \"100kbit\"",
        "policy = \"delayed\"\nmeasure = \"presence\"\nwindow = \"300ms\"",
        "policy = \"delayed\"\nchannel_rate = \"64kbit\"\nutilization = 0.8",
        "policy = \"perflow\"\nchannel_rate = \"100kbit\"\nservice = \"round_robin\"\ndrop = \"tail\"",
        "policy = \"conservative\"\nlimit = \"64KB\"",
    ] {
        let src = format!("kind = \"ack_filter\"\n{ok}");
        build(&src).unwrap_or_else(|e| panic!("{ok}: {e}"));
    }
}
