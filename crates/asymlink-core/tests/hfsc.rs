//! HFSC on explicit time: link-share proportions, upper limits, real-time guarantees,
//! deadlines of concave curves (delay decoupled from rate), release times and link-layer
//! charging, with the measured numbers asserted.

mod adsl_common;
use adsl_common::*;
use asymlink_core::packet::HeaderPacket;
use asymlink_core::qdisc::hfsc::{Hfsc, HfscConfig};
use asymlink_core::qdisc::{BuildCtx, Dequeued, Drops, Qdisc};
use asymlink_core::time::Instant;
use asymlink_core::units::Rate;

const GIG: Rate = Rate(1_000_000_000);

fn secs(s: u64) -> Instant {
    Instant::from_secs(s)
}

/// A top class shaped to 1 Mbit/s with leaves a (class 0) and b (class 1).
fn tree(a: &str, b: &str) -> String {
    format!(
        "kind = \"hfsc\"\nclasses = [{{ name = \"top\", ls = {{ m2 = \"1Mbit\" }}, ul = {{ m2 = \"1Mbit\" }} }}, \
         {{ name = \"a\", parent = \"top\", {a} }}, {{ name = \"b\", parent = \"top\", {b} }}]"
    )
}

fn both_greedy(q: &mut dyn Qdisc<HeaderPacket>, until: u64) -> Vec<Sent> {
    serve(
        q,
        GIG,
        secs(until),
        &[(0, 1000, secs(0), secs(999)), (1, 1000, secs(0), secs(999))],
        10,
    )
}

#[test]
fn link_share_is_proportional_to_the_curves() {
    let mut q = build(
        &tree("ls = { m2 = \"300kbit\" }", "ls = { m2 = \"100kbit\" }"),
        &["a", "b"],
    );
    let s = both_greedy(&mut *q, 21);
    close("a", rate_of(&s, 0, secs(1), secs(21)), 750e3, 0.01);
    close("b", rate_of(&s, 1, secs(1), secs(21)), 250e3, 0.01);
}

#[test]
fn upper_limit_caps_a_class_and_the_rest_goes_to_its_sibling() {
    let cfg = tree(
        "ls = { m2 = \"1Mbit\" }, ul = { m2 = \"400kbit\" }",
        "ls = { m2 = \"100kbit\" }",
    );
    let mut q = build(&cfg, &["a", "b"]);
    let s = serve(&mut *q, GIG, secs(11), &[(0, 1000, secs(0), secs(999))], 10);
    close("a alone", rate_of(&s, 0, secs(1), secs(11)), 400e3, 0.01);
    let mut q = build(&cfg, &["a", "b"]);
    let s = both_greedy(&mut *q, 21);
    close("a", rate_of(&s, 0, secs(1), secs(21)), 400e3, 0.01);
    close("b", rate_of(&s, 1, secs(1), secs(21)), 600e3, 0.01);
}

#[test]
fn real_time_guarantee_counts_against_the_upper_limit() {
    // a: real-time 200 kbit/s only; b: link-share. The top's 1 Mbit/s upper limit counts
    // a's real-time bytes too, so b gets the remaining 800 kbit/s.
    let mut q = build(
        &tree("rt = { m2 = \"200kbit\" }", "ls = { m2 = \"1Mbit\" }"),
        &["a", "b"],
    );
    let s = both_greedy(&mut *q, 21);
    close("a", rate_of(&s, 0, secs(1), secs(21)), 200e3, 0.01);
    close("b", rate_of(&s, 1, secs(1), secs(21)), 800e3, 0.01);
    let h = s.iter().filter(|x| x.class == 0).count();
    assert!(h > 0);
}

fn deadline_race(a_curve: &str) -> (u32, Option<(u64, u64)>) {
    let cfg: HfscConfig = toml::from_str(&format!(
        "classes = [{{ name = \"a\", rt = {a_curve} }}, {{ name = \"b\", rt = {{ m2 = \"500kbit\" }} }}]"
    ))
    .unwrap();
    let mut q: Hfsc<HeaderPacket> = Hfsc::new(&cfg, &BuildCtx::with_classes(&["a", "b"])).unwrap();
    let mut d = Drops::new();
    q.enqueue(ms(0), pkt(1, 1000, 1), &mut d); // b first
    q.enqueue(ms(0), pkt(0, 1000, 2), &mut d);
    let ed = q.class_deadline("a");
    let first = q.dequeue(ms(0), &mut d).packet().unwrap();
    check(&q);
    (first.hdr.tcp_repr().unwrap().seq.0, ed)
}

#[test]
fn a_concave_curve_cuts_the_delay_not_the_rate() {
    // a is guaranteed only 10 kbit/s in the long run. With a concave curve (1 Mbit/s for
    // the first 10 ms) its 1000-byte packet is due 8 ms after arrival and overtakes b's
    // (due at 16 ms at 500 kbit/s), although b arrived first; with a linear 10 kbit/s curve
    // it would be due at 800 ms and wait.
    let (first, ed) = deadline_race("{ m1 = \"1Mbit\", d = \"10ms\", m2 = \"10kbit\" }");
    assert_eq!((first, ed), (2, Some((0, 8_000_000))));
    let (first, ed) = deadline_race("{ m2 = \"10kbit\" }");
    assert_eq!((first, ed), (1, Some((0, 800_000_000))));
}

#[test]
fn a_concave_real_time_class_alone_runs_at_m2() {
    // The eligible curve is the m2 part: real-time service never runs ahead of 100 kbit/s.
    let mut q = build(
        "kind = \"hfsc\"\nclasses = [{ name = \"a\", rt = { m1 = \"1Mbit\", d = \"10ms\", m2 = \"100kbit\" } }]",
        &["a"],
    );
    let s = serve(&mut *q, GIG, secs(11), &[(0, 1000, secs(0), secs(99))], 10);
    close("a", rate_of(&s, 0, secs(1), secs(11)), 100e3, 0.01);
    // One packet every 80 ms exactly.
    assert_eq!(s[1].at, ms(80));
    assert_eq!(s[2].at, ms(160));
}

#[test]
fn release_times_under_an_upper_limit() {
    let cfg: HfscConfig = toml::from_str(
        "classes = [{ name = \"top\", ls = { m2 = \"1Mbit\" }, ul = { m2 = \"1Mbit\" } }, \
         { name = \"a\", parent = \"top\", ls = { m2 = \"1Mbit\" } }]",
    )
    .unwrap();
    let mut q: Hfsc<HeaderPacket> = Hfsc::new(&cfg, &BuildCtx::with_classes(&["a"])).unwrap();
    let mut d = Drops::new();
    for i in 0..3 {
        q.enqueue(ms(0), pkt(0, 1000, i), &mut d);
    }
    assert!(q.dequeue(ms(0), &mut d).packet().is_some());
    assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(8)));
    assert_eq!(q.dequeue(ms(7), &mut d), Dequeued::NotBefore(ms(8)));
    assert!(q.dequeue(ms(8), &mut d).packet().is_some());
    assert_eq!(q.dequeue(ms(8), &mut d), Dequeued::NotBefore(ms(16)));
    // Idle for a second: the upper limit restarts at the new backlogged period (no
    // accumulated credit), 1 packet now, the next 8 ms later.
    assert!(q.dequeue(ms(16), &mut d).packet().is_some());
    assert_eq!(q.dequeue(ms(16), &mut d), Dequeued::Empty);
    for i in 0..2 {
        q.enqueue(ms(1000), pkt(0, 1000, 10 + i), &mut d);
    }
    assert!(q.dequeue(ms(1000), &mut d).packet().is_some());
    assert_eq!(q.dequeue(ms(1000), &mut d), Dequeued::NotBefore(ms(1008)));
    check(&q);
}

#[test]
fn charges_atm_cells() {
    // 40-byte ACKs over LLC/SNAP cost 106 wire bytes: an 848 kbit/s upper limit passes
    // 1000 per second.
    let mut q = build(
        "kind = \"hfsc\"\nlinklayer = \"llc_snap_routed\"\nclasses = [\
         { name = \"top\", ls = { m2 = \"848kbit\" }, ul = { m2 = \"848kbit\" } },\
         { name = \"ack\", parent = \"top\", ls = { m2 = \"848kbit\" } }]",
        &["ack"],
    );
    let s = serve(&mut *q, GIG, secs(11), &[(0, 40, secs(0), secs(99))], 10);
    let n = s
        .iter()
        .filter(|x| x.at >= secs(1) && x.at < secs(11))
        .count();
    close("ACKs/s", n as f64 / 10.0, 1000.0, 0.002);
}

#[test]
fn sparse_interactive_traffic_keeps_a_short_delay_beside_bulk() {
    // The paper's wish: a 512 kbit/s line shaped at 480 kbit/s; interactive guaranteed
    // only 32 kbit/s but with a 400 kbit/s first slope; bulk greedy with 1500-byte
    // packets. One 100-byte interactive packet every 100 ms waits at most for the bulk
    // packet on the line (1500 B at 512 kbit/s = 23.4 ms), and bulk gets the rest.
    let mut q = build(
        "kind = \"hfsc\"\nclasses = [\
         { name = \"top\", ls = { m2 = \"480kbit\" }, ul = { m2 = \"480kbit\" } },\
         { name = \"interactive\", parent = \"top\", rt = { m1 = \"400kbit\", d = \"10ms\", m2 = \"32kbit\" }, ls = { m2 = \"32kbit\" } },\
         { name = \"bulk\", parent = \"top\", ls = { m2 = \"448kbit\" } }]",
        &["interactive", "bulk"],
    );
    let s = serve_mixed(
        &mut *q,
        Rate::kbps(512),
        secs(61),
        &[
            Src {
                class: 0,
                len: 100,
                on: secs(0),
                off: secs(999),
                every: Some(100_000_000),
            },
            Src {
                class: 1,
                len: 1500,
                on: secs(0),
                off: secs(999),
                every: None,
            },
        ],
        10,
    );
    let worst = s
        .iter()
        .filter(|x| x.class == 0 && x.at >= secs(1))
        .map(|x| x.delay_ms())
        .fold(0.0, f64::max);
    assert!(worst <= 23.5, "interactive waited {worst:.2} ms");
    close("interactive", rate_of(&s, 0, secs(1), secs(61)), 8e3, 0.02);
    close("bulk", rate_of(&s, 1, secs(1), secs(61)), 472e3, 0.01);
}

#[test]
fn errors_name_the_problem() {
    for (src, needle) in [
        ("classes = [{ name = \"a\" }]", "needs a real-time or link-share"),
        (
            "classes = [{ name = \"r\", rt = { m2 = \"1Mbit\" }, ls = { m2 = \"1Mbit\" } }, \
             { name = \"a\", parent = \"r\", ls = { m2 = \"1Mbit\" } }]",
            "real-time curves are for leaves",
        ),
        (
            "classes = [{ name = \"r\", ul = { m2 = \"1Mbit\" } }, \
             { name = \"a\", parent = \"r\", ls = { m2 = \"1Mbit\" } }]",
            "needs a link-share curve",
        ),
        (
            "classes = [{ name = \"a\", rt = { m2 = \"1Mbit\" }, ul = { m2 = \"1Mbit\" } }]",
            "give ls too",
        ),
        (
            "classes = [{ name = \"a\", parent = \"x\", ls = { m2 = \"1Mbit\" } }]",
            "unknown parent",
        ),
        (
            "classes = [{ name = \"a\", parent = \"b\", ls = { m2 = \"1Mbit\" } }, \
             { name = \"b\", parent = \"a\", ls = { m2 = \"1Mbit\" } }]",
            "cycle",
        ),
        (
            "classes = [{ name = \"a\", ls = { m2 = \"1Mbit\" } }, { name = \"a\", ls = { m2 = \"1Mbit\" } }]",
            "duplicate",
        ),
        (
            "classes = [{ name = \"a\", sc = { m2 = \"1Mbit\" }, rt = { m2 = \"1Mbit\" } }]",
            "sc sets both",
        ),
        (
            "classes = [{ name = \"a\", ls = { m1 = \"1Mbit\", m2 = \"1Mbit\" } }]",
            "m1 and d",
        ),
        (
            "default = \"zz\"\nclasses = [{ name = \"a\", ls = { m2 = \"1Mbit\" } }]",
            "unknown class 'zz'",
        ),
    ] {
        let e = build_err(&format!("kind = \"hfsc\"\n{src}"), &["a"]);
        assert!(e.contains(needle), "{src}: {e}");
    }
}

#[test]
fn a_shaping_leaf_discipline_is_waited_for() {
    // A leaf whose own discipline is a 100 kbit/s token bucket: HFSC answers "not before"
    // the bucket's time (never "empty" with packets queued) and the leaf runs at 100k.
    let cfg: HfscConfig = toml::from_str(
        "classes = [{ name = \"a\", ls = { m2 = \"1Mbit\" }, \
         queue = { kind = \"tbf\", rate = \"100kbit\", burst = \"1000B\" } }]",
    )
    .unwrap();
    let mut q: Hfsc<HeaderPacket> = Hfsc::new(&cfg, &BuildCtx::with_classes(&["a"])).unwrap();
    let mut d = Drops::new();
    for i in 0..3 {
        q.enqueue(ms(0), pkt(0, 1000, i), &mut d);
    }
    assert!(q.dequeue(ms(0), &mut d).packet().is_some());
    assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(80)));
    assert!(q.dequeue(ms(80), &mut d).packet().is_some());
    check(&q);
    let mut q = build(
        &format!(
            "kind = \"hfsc\"\n{}",
            "classes = [{ name = \"a\", ls = { m2 = \"1Mbit\" }, \
         queue = { kind = \"tbf\", rate = \"100kbit\", burst = \"1000B\" } }]"
        ),
        &["a"],
    );
    let s = serve(&mut *q, GIG, secs(11), &[(0, 1000, secs(0), secs(99))], 10);
    close("a", rate_of(&s, 0, secs(1), secs(11)), 100e3, 0.01);
}
