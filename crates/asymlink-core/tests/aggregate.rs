//! Aggregate rate control: token accounting of every scheme on explicit time, the sharing
//! of unused tokens and the aggregate bound (§4.2.3), the shaping timer and triggers
//! (§6.2-6.3), policing actions, membership.

use asymlink_core::aggregate::bucket::{excess_tokens, units, whole_bytes, LogicalView};
use asymlink_core::aggregate::{
    Controller, ControllerConfig, Decision, DepthShare, FlowTuple, Joined, Scheme,
};
use asymlink_core::time::{Duration, Instant};

fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

fn tuple(client: u8) -> FlowTuple {
    FlowTuple {
        src: "10.0.0.1".parse().unwrap(),
        src_port: 80,
        dst: format!("10.0.1.{client}").parse().unwrap(),
        dst_port: 40_000 + client as u16,
    }
}

/// A controller with one policy: `profile`, `action` and `scheme` are TOML inline tables.
fn controller(
    timer: &str,
    triggers: &str,
    profile: &str,
    action: &str,
    scheme: &str,
) -> Controller {
    let src = format!(
        "timer = \"{timer}\"\ntriggers = \"{triggers}\"\n[[policies]]\nfilter = {{ src_port = 80 }}\n\
         profile = {profile}\naction = {action}\nscheme = {scheme}\n"
    );
    let cfg: ControllerConfig = toml::from_str(&src).unwrap();
    Controller::new(&cfg).unwrap()
}

fn open(c: &mut Controller, now: Instant, keys: &[u64]) {
    for &k in keys {
        assert_eq!(c.handle_open(now, k, &tuple(k as u8)), Joined::Policy(0));
    }
}

fn level(c: &Controller, member: usize) -> u64 {
    whole_bytes(c.policies()[0].members()[member].bucket.level)
}

fn wake(c: &mut Controller, now: Instant) -> Vec<u64> {
    let mut out = Vec::new();
    c.poll_wake(now, &mut out);
    out
}

// 800 kbit/s = 100 bytes per millisecond: easy numbers.
const P800: &str = "{ depth = \"2000B\", rate = \"800kbit\", max_packet = \"1000B\" }";
const SHAPE: &str = "{ kind = \"shape\" }";

#[test]
fn common_bucket_accrues_exactly_and_waits_for_the_timer() {
    let mut c = controller(
        "15ms",
        "own",
        P800,
        SHAPE,
        "{ kind = \"common\", order = \"fcfs\" }",
    );
    open(&mut c, ms(0), &[1, 2, 3]);
    // The bucket starts full (2000 B): two packets go, the third waits for the timer.
    assert_eq!(c.admit(ms(1), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(1), 2, 1000), Decision::Send);
    assert_eq!(c.admit(ms(1), 3, 1000), Decision::Wait(ms(15)));
    assert_eq!(c.poll_at(), Some(ms(15)));
    // 10 ms later 1000 B have accrued: connection 1's own ACK lets it send at once,
    // ahead of the waiting connection 3 (the paper's simulator: own-output trigger).
    assert_eq!(c.admit(ms(11), 1, 1000), Decision::Send);
    assert_eq!(whole_bytes(c.policies()[0].common_bucket().level), 0);
    // At the timer, connection 3 is woken; 400 B are not enough.
    assert!(wake(&mut c, ms(14)).is_empty(), "nothing before the tick");
    assert_eq!(wake(&mut c, ms(15)), vec![3]);
    assert_eq!(c.admit(ms(15), 3, 1000), Decision::Wait(ms(30)));
    assert_eq!(c.poll_at(), Some(ms(30)), "the served tick is not repeated");
    assert_eq!(wake(&mut c, ms(30)), vec![3]);
    assert_eq!(c.admit(ms(30), 3, 1000), Decision::Send);
    assert_eq!(whole_bytes(c.policies()[0].common_bucket().level), 900);
    assert_eq!(c.poll_at(), None, "nobody waits");
    // The bucket never exceeds B: 100 ms idle only fills it to 2000 B.
    c.handle_event(ms(130), 1);
    assert_eq!(c.admit(ms(130), 1, 1000), Decision::Send);
    assert_eq!(whole_bytes(c.policies()[0].common_bucket().level), 1000);
    let s = c.policies()[0].stats();
    assert_eq!((s.in_profile_packets, s.waits), (5, 2));
    // Accrued 130 ms x 100 B/ms + 2000 held at start = 5000 spent + 1000 held + lost.
    assert_eq!(s.tokens_lost_bytes, 13_000 + 2000 - 5000 - 1000);
}

#[test]
fn common_bucket_orders_waiters_sequential_fcfs_lru() {
    for (order, expect) in [
        ("sequential", vec![1, 2, 3]),
        ("fcfs", vec![3, 1, 2]),
        ("lru", vec![3, 2, 1]),
    ] {
        let scheme = format!("{{ kind = \"common\", order = \"{order}\" }}");
        let mut c = controller("15ms", "own", P800, SHAPE, &scheme);
        open(&mut c, ms(0), &[1, 2, 3]);
        // Served: 2 then 1 (LRU: 3 never served, then 2, then 1).
        assert_eq!(c.admit(ms(0), 2, 1000), Decision::Send);
        assert_eq!(c.admit(ms(0), 1, 1000), Decision::Send);
        // Become non-compliant: 3, then 1, then 2 (FCFS order).
        for k in [3, 1, 2] {
            assert!(matches!(c.admit(ms(1), k, 1000), Decision::Wait(_)));
        }
        assert_eq!(wake(&mut c, ms(15)), expect, "{order}");
    }
}

#[test]
fn partitioned_buckets_are_independent_and_follow_membership() {
    // 600 kbit/s for three: 200 kbit/s = 25 B/ms each, depth 3000/3 = 1000 B each.
    let p = "{ depth = \"3000B\", rate = \"600kbit\", max_packet = \"1000B\" }";
    let mut c = controller("0s", "own", p, SHAPE, "{ kind = \"partitioned\" }");
    open(&mut c, ms(0), &[1, 2, 3]);
    assert_eq!(level(&c, 0), 1000);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Send);
    // Its own bucket is empty; the others' tokens are not shared.
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Wait(ms(40)));
    assert_eq!(
        c.poll_at(),
        Some(ms(40)),
        "exact timer: the conforming instant"
    );
    assert_eq!(level(&c, 1), 1000);
    // Connection 3 leaves at 20 ms (its tokens go with it): 300 kbit/s = 37.5 B/ms each.
    c.handle_close(ms(20), 3);
    assert_eq!(level(&c, 0), 500);
    assert_eq!(c.policies()[0].members()[0].bucket.depth, units(1500));
    // 500 B at 37.5 B/ms: 13.333334 ms (rounded up to the nanosecond).
    let at = Instant(33_333_334);
    assert_eq!(c.admit(ms(20), 1, 1000), Decision::Wait(at));
    assert!(wake(&mut c, Instant(33_333_333)).is_empty());
    assert_eq!(wake(&mut c, at), vec![1]);
    assert_eq!(c.admit(at, 1, 1000), Decision::Send);
    // Lost: what the first members held above their shrinking depths as 2 and 3 joined
    // (1500 + 500 + 500 B: a partition is independent, nobody inherits it), the full
    // buckets of 2 and 3 for 20 ms (500 B each) and the leaver's 1000 B.
    assert_eq!(
        c.policies()[0].stats().tokens_lost_bytes,
        2500 + 1000 + 1000
    );
}

#[test]
fn partitioned_depths_follow_rtt() {
    // The paper's profile: B = 20 KB, RTTs 50 / 300 / 600 ms -> b_i = B * rtt_i / 950 ms.
    let p = "{ depth = \"20KB\", rate = \"500kbit\", max_packet = \"1040B\" }";
    let mut c = controller(
        "15ms",
        "own",
        p,
        SHAPE,
        "{ kind = \"partitioned\", depth = \"rtt\" }",
    );
    open(&mut c, ms(0), &[1, 2, 3]);
    for (k, rtt) in [(1, 50), (2, 300), (3, 600)] {
        c.handle_rtt(ms(1), k, Duration::from_millis(rtt));
    }
    let depths: Vec<u64> = c.policies()[0]
        .members()
        .iter()
        .map(|m| whole_bytes(m.bucket.depth))
        .collect();
    assert_eq!(depths, vec![1052, 6315, 12631]);
    // Each at least the rate window r_i * rtt_i (500/3 kbit/s): 1041, 6250, 12500 bytes.
    for (d, rtt) in depths.iter().zip([50u64, 300, 600]) {
        assert!(*d >= 500_000 / 3 * rtt / 8000, "{d}");
    }
    // A larger later estimate (queueing) does not move the depths.
    c.handle_rtt(ms(2), 1, Duration::from_millis(400));
    assert_eq!(whole_bytes(c.policies()[0].members()[0].bucket.depth), 1052);
    // A depth never falls below L_m, even for a tiny RTT.
    c.handle_rtt(ms(3), 1, Duration::from_micros(100));
    assert_eq!(whole_bytes(c.policies()[0].members()[0].bucket.depth), 1040);
}

#[test]
fn logical_partitions_share_unused_tokens_within_the_aggregate_bound() {
    // 300 kbit/s for three: 100 kbit/s = 12.5 B/ms each; B = 3000 B, 1000 B each.
    let p = "{ depth = \"3000B\", rate = \"300kbit\", max_packet = \"1000B\" }";
    let mut c = controller(
        "15ms",
        "own",
        p,
        SHAPE,
        "{ kind = \"logical\", depth = \"equal\" }",
    );
    open(&mut c, ms(0), &[1, 2, 3]);
    // The aggregate starts with B; joining re-partitions it without creating tokens.
    assert_eq!(
        (level(&c, 0), level(&c, 1), level(&c, 2)),
        (1000, 1000, 1000)
    );
    assert_eq!(c.policies()[0].tokens_held(), units(3000));
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(0), 2, 1000), Decision::Send);
    // Connection 3 sends nothing: its partition is full, so the 500 B it gains in 40 ms
    // go half to each of the others, on top of their own 500 B.
    c.handle_event(ms(40), 1);
    assert_eq!(c.admit(ms(40), 1, 1000), Decision::Wait(ms(45)));
    assert_eq!((level(&c, 0), level(&c, 1), level(&c, 2)), (750, 750, 1000));
    // 60 ms: 1 and 2 gain 250 B each and are full; 3's 250 B overflow the aggregate.
    assert_eq!(wake(&mut c, ms(60)), vec![1]);
    assert_eq!(c.admit(ms(60), 1, 1000), Decision::Send);
    assert_eq!(level(&c, 1), 1000);
    // Everything full: what accrues overflows the aggregate (never more than B held).
    c.handle_event(ms(200), 2);
    assert_eq!(c.policies()[0].tokens_held(), units(3000));
    let lost = c.policies()[0].stats().tokens_lost_bytes;
    // Accrued 300 kbit/s x 200 ms = 7500 B; held 3000 at the start; spent 3000; held 3000.
    assert_eq!(lost, 7500 + 3000 - 3000 - 3000);
}

#[test]
fn logical_sharing_matches_the_papers_excess_formula() {
    // B = 12 000 B, two partitions at 8 kbit/s (1000 B/s) each, depths by RTT 10 / 50 ms:
    // 2000 B and 10 000 B.
    let p = "{ depth = \"12000B\", rate = \"16kbit\", max_packet = \"1000B\" }";
    let mut c = controller(
        "15ms",
        "own",
        p,
        SHAPE,
        "{ kind = \"logical\", depth = \"rtt\" }",
    );
    open(&mut c, ms(0), &[1, 2]);
    c.handle_rtt(ms(0), 1, Duration::from_millis(10));
    c.handle_rtt(ms(0), 2, Duration::from_millis(50));
    let depths: Vec<u128> = c.policies()[0]
        .members()
        .iter()
        .map(|m| m.bucket.depth)
        .collect();
    assert_eq!(depths, vec![units(2000), units(10_000)]);
    assert_eq!((level(&c, 0), level(&c, 1)), (2000, 10_000));
    // Empty both at t = 0 (t_i = 0).
    for (k, n) in [(1, 2), (2, 10)] {
        for _ in 0..n {
            assert_eq!(c.admit(ms(0), k, 1000), Decision::Send);
        }
    }
    assert_eq!(c.policies()[0].tokens_held(), 0);
    let formula = |own1: u64, own2: u64, t: u64| {
        let view = |level: u64, depth: u64| LogicalView {
            level: units(level),
            depth: units(depth),
            rate_bps: 8000,
            last_empty: Instant::ZERO,
        };
        whole_bytes(excess_tokens(
            units(12_000),
            &[view(own1, 2000), view(own2, 10_000)],
            Instant::from_secs(t),
        ))
    };
    // T = 5 s: own tokens 2000 (capped) and 5000; unused 3000 = min(12000-7000, 3000).
    c.handle_event(Instant::from_secs(5), 1);
    assert_eq!(formula(2000, 5000, 5), 3000);
    assert_eq!(
        level(&c, 1),
        5000 + 3000,
        "partition 2 got exactly the excess"
    );
    // T = 6 s: unused 4000, room 12000 - 8000 = 4000: the bound min{..} is reached.
    c.handle_event(Instant::from_secs(6), 1);
    assert_eq!(formula(2000, 6000, 6), 4000);
    assert_eq!(level(&c, 1), 6000 + 4000);
    // T = 7 s: unused 5000 but room only 3000: the aggregate bound wins; the rest is lost.
    c.handle_event(Instant::from_secs(7), 1);
    assert_eq!(formula(2000, 7000, 7), 3000);
    assert_eq!(level(&c, 1), 7000 + 3000);
    assert_eq!(c.policies()[0].tokens_held(), units(12_000));
    assert_eq!(c.policies()[0].stats().tokens_lost_bytes, 2000);
}

#[test]
fn logical_partitions_give_a_bottlenecked_share_to_the_others() {
    // The paper's unequal case in token terms: r_m = 500 kbit/s, three partitions; one
    // connection can only use 100 kbit/s. The other two get 200 kbit/s each.
    let p = "{ depth = \"20KB\", rate = \"500kbit\", max_packet = \"1000B\" }";
    let mut c = controller(
        "0s",
        "own",
        p,
        SHAPE,
        "{ kind = \"logical\", depth = \"equal\" }",
    );
    open(&mut c, ms(0), &[1, 2, 3]);
    let mut sent = [0u64; 3];
    let mut next3 = Instant::ZERO;
    // Every millisecond for 100 s, 1 and 2 send whatever they may; 3 sends at most one
    // 1000-byte packet per 80 ms (100 kbit/s).
    for t in 0..100_000u64 {
        let now = ms(t);
        for k in [1u64, 2] {
            while c.admit(now, k, 1000) == Decision::Send {
                sent[k as usize - 1] += 1000;
            }
        }
        if now >= next3 && c.admit(now, 3, 1000) == Decision::Send {
            sent[2] += 1000;
            next3 = now + Duration::from_millis(80);
        }
    }
    let kbps: Vec<u64> = sent.iter().map(|b| b * 8 / 100_000).collect();
    assert_eq!(kbps[2], 100);
    for k in 0..2 {
        assert!((199..=201).contains(&kbps[k]), "{kbps:?}");
    }
    // At most r_m plus the initial 20 KB spread over the run (1.6 kbit/s).
    assert!(kbps.iter().sum::<u64>() <= 502, "{kbps:?}");
}

#[test]
fn peak_rate_spaces_packets() {
    // r_p = 8 Mbit/s, L_m = 1000 B: a packet per millisecond at most, whatever the bucket.
    let p = "{ depth = \"10KB\", rate = \"1Mbit\", peak = \"8Mbit\", max_packet = \"1000B\" }";
    let mut c = controller("0s", "own", p, SHAPE, "{ kind = \"common\" }");
    open(&mut c, ms(0), &[1]);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Wait(ms(1)));
    assert_eq!(c.admit(Instant::from_micros(500), 1, 500), Decision::Send);
    assert_eq!(
        c.admit(Instant::from_micros(500), 1, 1000),
        Decision::Wait(Instant::from_micros(1500))
    );
}

#[test]
fn policing_marks_or_drops_out_of_profile_packets() {
    let mark = "{ kind = \"police_mark\", dscp = 10 }";
    let mut c = controller("15ms", "own", P800, mark, "{ kind = \"common\" }");
    open(&mut c, ms(0), &[1]);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Mark(10));
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Mark(10));
    assert_eq!(
        c.admit(ms(0), 1, 1000),
        Decision::Mark(0),
        "out of profile: best effort"
    );
    assert_eq!(c.admit(ms(10), 1, 1000), Decision::Mark(10));
    assert_eq!(c.poll_at(), None, "policing never makes anyone wait");
    let s = c.policies()[0].stats();
    assert_eq!((s.in_profile_packets, s.out_profile_packets), (3, 1));
    let drop = "{ kind = \"police_drop\" }";
    let mut c = controller("15ms", "own", P800, drop, "{ kind = \"partitioned\" }");
    open(&mut c, ms(0), &[1]);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(0), 1, 1000), Decision::Drop);
    // Larger than L_m: never conforms.
    assert_eq!(c.admit(ms(100), 1, 1001), Decision::Drop);
    assert_eq!(c.policies()[0].stats().oversize_packets, 1);
}

#[test]
fn aggregate_triggers_serve_waiters_in_order() {
    let mut c = controller(
        "15ms",
        "aggregate",
        P800,
        SHAPE,
        "{ kind = \"common\", order = \"fcfs\" }",
    );
    open(&mut c, ms(0), &[1, 2]);
    assert_eq!(c.admit(ms(1), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(1), 1, 1000), Decision::Send);
    assert_eq!(c.admit(ms(1), 2, 1000), Decision::Wait(ms(15)));
    // At 11 ms there are tokens again; connection 1 asks for itself but 2 waits first:
    // 1 is told to wait and a service is due at once.
    assert_eq!(c.admit(ms(11), 1, 1000), Decision::Wait(ms(15)));
    assert_eq!(c.poll_at(), Some(ms(11)));
    assert_eq!(wake(&mut c, ms(11)), vec![2, 1]);
    assert_eq!(c.admit(ms(11), 2, 1000), Decision::Send);
    assert_eq!(c.admit(ms(11), 1, 1000), Decision::Wait(ms(15)));
    // An event on any connection (an ACK on 2, which has nothing to send) is a trigger.
    c.handle_event(ms(13), 2);
    assert_eq!(
        c.poll_at(),
        Some(ms(15)),
        "200 B only: nothing to serve yet"
    );
    c.handle_event(ms(21), 2);
    assert_eq!(c.poll_at(), Some(ms(21)));
    assert_eq!(wake(&mut c, ms(21)), vec![1]);
}

#[test]
fn a_woken_sender_that_does_not_ask_stops_waiting() {
    let mut c = controller("15ms", "own", P800, SHAPE, "{ kind = \"common\" }");
    open(&mut c, ms(0), &[1]);
    c.admit(ms(0), 1, 1000);
    c.admit(ms(0), 1, 1000);
    assert!(matches!(c.admit(ms(0), 1, 1000), Decision::Wait(_)));
    assert_eq!(wake(&mut c, ms(15)), vec![1]);
    c.handle_event(ms(15), 1); // it was woken, but its window had closed: no admit
    assert_eq!(c.poll_at(), None);
}

#[test]
fn membership_filters_and_table_bound() {
    let src = r#"
        max_conns = 2
        [[policies]]
        filter = { dst = "10.0.1.0/24", dst_port = "40001-40002" }
        profile = { depth = "2000B", rate = "800kbit", max_packet = "1000B" }
        action = { kind = "shape" }
        scheme = { kind = "logical" }
        [[policies]]
        filter = { dst_port = 40003 }
        profile = { depth = "2000B", rate = "800kbit", max_packet = "1000B" }
        action = { kind = "police_mark" }
        scheme = { kind = "common" }
    "#;
    let mut c = Controller::new(&toml::from_str(src).unwrap()).unwrap();
    assert_eq!(c.handle_open(ms(0), 1, &tuple(1)), Joined::Policy(0));
    assert_eq!(c.handle_open(ms(0), 3, &tuple(3)), Joined::Policy(1));
    assert_eq!(c.handle_open(ms(0), 4, &tuple(4)), Joined::Unmatched);
    assert_eq!(c.handle_open(ms(0), 2, &tuple(2)), Joined::Untracked);
    assert_eq!(c.admit(ms(0), 4, 60_000), Decision::Send, "unconditioned");
    c.handle_close(ms(1), 3);
    assert_eq!(c.handle_open(ms(1), 2, &tuple(2)), Joined::Policy(0));
    assert_eq!(c.policies()[0].members().len(), 2);
    // The logical scheme weighs depths by RTT unless told otherwise.
    assert_eq!(c.policies()[0].scheme(), Scheme::Logical(DepthShare::Rtt));
    assert_eq!(c.unconditioned(), (1, 1));
}

#[test]
fn same_inputs_same_decisions() {
    let run = || {
        let mut c = controller(
            "15ms",
            "aggregate",
            P800,
            SHAPE,
            "{ kind = \"common\", order = \"lru\" }",
        );
        open(&mut c, ms(0), &[1, 2, 3]);
        let mut log = Vec::new();
        for t in 0..2000u64 {
            let k = 1 + (t * 7919 % 3);
            log.push(c.admit(Instant::from_micros(t * 997), k, 500 + (t % 500) as u32));
            let mut out = Vec::new();
            c.poll_wake(Instant::from_micros(t * 997), &mut out);
            log.extend(out.into_iter().map(|k| Decision::Mark(k as u8)));
        }
        log
    };
    assert_eq!(run(), run());
}
