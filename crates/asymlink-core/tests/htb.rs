//! HTB on explicit time: rates, ceilings, borrowing, priorities, levels, modes and
//! link-layer charging, with the measured numbers asserted.

mod adsl_common;
use adsl_common::*;
use asymlink_core::qdisc::htb::{ClassMode, Htb, HtbConfig};
use asymlink_core::qdisc::{BuildCtx, Dequeued, Drops, Qdisc};
use asymlink_core::time::Instant;
use asymlink_core::units::Rate;

const GIG: Rate = Rate(1_000_000_000);

fn secs(s: u64) -> Instant {
    Instant::from_secs(s)
}

/// root 1 Mbit/s with two leaves a (class 0) and b (class 1).
fn two_leaves(a: &str, b: &str) -> String {
    format!(
        "kind = \"htb\"\nclasses = [{{ name = \"root\", rate = \"1Mbit\" }}, \
         {{ name = \"a\", parent = \"root\", {a} }}, {{ name = \"b\", parent = \"root\", {b} }}]"
    )
}

#[test]
fn guaranteed_rates_then_equal_share_of_the_excess() {
    // a: 300k, b: 100k, both ceil 1M, same prio, equal quanta: the 600k excess is split
    // equally -> a 600k, b 400k.
    let mut q = build(
        &two_leaves(
            "rate = \"300kbit\", ceil = \"1Mbit\", quantum = \"1000B\"",
            "rate = \"100kbit\", ceil = \"1Mbit\", quantum = \"1000B\"",
        ),
        &["a", "b"],
    );
    let s = serve(
        &mut *q,
        GIG,
        secs(21),
        &[(0, 1000, secs(0), secs(99)), (1, 1000, secs(0), secs(99))],
        10,
    );
    close("a", rate_of(&s, 0, secs(1), secs(21)), 600e3, 0.01);
    close("b", rate_of(&s, 1, secs(1), secs(21)), 400e3, 0.01);
}

#[test]
fn a_lone_class_borrows_up_to_its_ceiling() {
    // a alone: rate 100k, ceil 400k -> 400k; b alone: rate 100k, ceil 1M -> the root's 1M.
    let cfg = two_leaves(
        "rate = \"100kbit\", ceil = \"400kbit\"",
        "rate = \"100kbit\", ceil = \"1Mbit\"",
    );
    let mut q = build(&cfg, &["a", "b"]);
    let s = serve(
        &mut *q,
        GIG,
        secs(21),
        &[(0, 1000, secs(0), secs(10)), (1, 1000, secs(11), secs(21))],
        10,
    );
    close("a alone", rate_of(&s, 0, secs(1), secs(10)), 400e3, 0.01);
    close("b alone", rate_of(&s, 1, secs(12), secs(21)), 1e6, 0.01);
}

#[test]
fn priority_decides_who_borrows() {
    // Both 100k guaranteed; a (prio 0) takes the whole 800k excess, b (prio 1) keeps its
    // 100k rate only.
    let mut q = build(
        &two_leaves(
            "rate = \"100kbit\", ceil = \"1Mbit\", prio = 0",
            "rate = \"100kbit\", ceil = \"1Mbit\", prio = 1",
        ),
        &["a", "b"],
    );
    let s = serve(
        &mut *q,
        GIG,
        secs(21),
        &[(0, 1000, secs(0), secs(99)), (1, 1000, secs(0), secs(99))],
        10,
    );
    close("a", rate_of(&s, 0, secs(1), secs(21)), 900e3, 0.01);
    close("b", rate_of(&s, 1, secs(1), secs(21)), 100e3, 0.02);
}

#[test]
fn guaranteed_rate_beats_higher_priority_borrowing() {
    // b has the lowest priority but sends at its own rate (level 0) before a borrows.
    let mut q = build(
        &two_leaves(
            "rate = \"100kbit\", ceil = \"1Mbit\", prio = 0",
            "rate = \"300kbit\", prio = 7",
        ),
        &["a", "b"],
    );
    let s = serve(
        &mut *q,
        GIG,
        secs(21),
        &[(0, 1000, secs(0), secs(99)), (1, 1000, secs(0), secs(99))],
        10,
    );
    close("b", rate_of(&s, 1, secs(1), secs(21)), 300e3, 0.01);
    close("a", rate_of(&s, 0, secs(1), secs(21)), 700e3, 0.01);
}

#[test]
fn nearer_lender_first_then_priority_at_the_root() {
    // root 1M -> x (500k, prio 0) and g (200k, ceil 1M) -> g1 (100k, ceil 1M, prio 1).
    // g1 sends 100k on its own, borrows 100k from g (level 7, served before the root's
    // level 8); the root's remaining 300k goes to x (prio 0) rather than g1 (prio 1).
    let mut q = build(
        "kind = \"htb\"\nclasses = [\
         { name = \"root\", rate = \"1Mbit\" },\
         { name = \"x\", parent = \"root\", rate = \"500kbit\", ceil = \"1Mbit\", prio = 0 },\
         { name = \"g\", parent = \"root\", rate = \"200kbit\", ceil = \"1Mbit\" },\
         { name = \"g1\", parent = \"g\", rate = \"100kbit\", ceil = \"1Mbit\", prio = 1 }]",
        &["x", "g1"],
    );
    let s = serve(
        &mut *q,
        GIG,
        secs(21),
        &[(0, 1000, secs(0), secs(99)), (1, 1000, secs(0), secs(99))],
        10,
    );
    close("x", rate_of(&s, 0, secs(1), secs(21)), 800e3, 0.01);
    close("g1", rate_of(&s, 1, secs(1), secs(21)), 200e3, 0.02);
}

#[test]
fn quanta_weight_the_excess() {
    // Equal tiny rates, quanta 3000 B and 1000 B: the excess splits 3:1.
    let mut q = build(
        &two_leaves(
            "rate = \"8kbit\", ceil = \"1Mbit\", quantum = \"3000B\"",
            "rate = \"8kbit\", ceil = \"1Mbit\", quantum = \"1000B\"",
        ),
        &["a", "b"],
    );
    let s = serve(
        &mut *q,
        GIG,
        secs(21),
        &[(0, 1000, secs(0), secs(99)), (1, 1000, secs(0), secs(99))],
        10,
    );
    let (a, b) = (
        rate_of(&s, 0, secs(1), secs(21)),
        rate_of(&s, 1, secs(1), secs(21)),
    );
    close("a", a, 8e3 + 984e3 * 0.75, 0.01);
    close("b", b, 8e3 + 984e3 * 0.25, 0.02);
}

#[test]
fn a_busy_link_is_never_overdriven() {
    // The shaper at 2 Mbit/s feeding a 1 Mbit/s link: the link sets the pace, the shaper
    // just follows (its tokens stay positive, no burst beyond its bucket).
    let mut q = build(
        "kind = \"htb\"\nclasses = [{ name = \"a\", rate = \"2Mbit\" }]",
        &["a"],
    );
    let s = serve(
        &mut *q,
        Rate::mbps(1),
        secs(5),
        &[(0, 1000, secs(0), secs(99))],
        10,
    );
    close("a", rate_of(&s, 0, secs(1), secs(5)), 1e6, 0.01);
}

#[test]
fn modes_on_explicit_time() {
    // a: rate 1 Mbit/s (burst 1500 B = 12 ms), ceil 2 Mbit/s (cburst 1500 B = 6 ms) under
    // a 2 Mbit/s root.
    let cfg: HtbConfig = toml::from_str(
        "classes = [{ name = \"root\", rate = \"2Mbit\", burst = \"1500B\", cburst = \"1500B\" }, \
         { name = \"a\", parent = \"root\", rate = \"1Mbit\", ceil = \"2Mbit\", burst = \"1500B\", cburst = \"1500B\" }]",
    )
    .unwrap();
    let mut q: Htb<_> = Htb::new(&cfg, &BuildCtx::with_classes(&["a"])).unwrap();
    let mut d = Drops::new();
    for i in 0..10 {
        q.enqueue(ms(0), pkt(0, 1500, i), &mut d);
    }
    assert_eq!(q.class_mode("a", ms(0)), Some(ClassMode::CanSend));
    // First packet: a's own credit (level 0). a: tokens 0, ctokens 0.
    assert!(q.dequeue(ms(0), &mut d).packet().is_some());
    assert_eq!(q.class_tokens("a", ms(0)), Some((0, 0)));
    // Second: still CanSend at exactly 0. a: tokens -12 ms, ctokens -6 ms.
    assert!(q.dequeue(ms(0), &mut d).packet().is_some());
    assert_eq!(q.class_mode("a", ms(0)), Some(ClassMode::CantSend));
    assert_eq!(q.class_tokens("a", ms(0)), Some((-12_000_000, -6_000_000)));
    // The root paid 6 ms per packet (6 - 12 = -6 ms). At 6 ms a's ctokens are back to 0
    // (MayBorrow: rate tokens still -6 ms) and the root's tokens to 0 (CanSend): a
    // borrows from the root.
    assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(6)));
    assert_eq!(q.class_mode("a", ms(6)), Some(ClassMode::MayBorrow));
    assert_eq!(q.class_mode("root", ms(6)), Some(ClassMode::CanSend));
    assert!(q.dequeue(ms(6), &mut d).packet().is_some());
    let c = q.class_counters("a").unwrap();
    assert_eq!((c.packets, c.borrowed), (3, 1));
    assert_eq!(q.class_counters("root").unwrap().lent, 1);
    // Borrowing kept a's rate tokens where they were (-12 + 6 = -6 ms) and cost ctokens.
    assert_eq!(q.class_tokens("a", ms(6)), Some((-6_000_000, -6_000_000)));
    check(&q);
}

#[test]
fn charges_atm_cells_not_ip_bytes() {
    // 40-byte ACKs over LLC/SNAP: 2 cells = 106 wire bytes = 1 ms at 848 kbit/s, so
    // 1000 ACKs/s; charged as IP bytes the same shaper would pass 2650 ACKs/s.
    for (ll, per_sec) in [("\"llc_snap_routed\"", 1000.0), ("\"raw\"", 2650.0)] {
        let mut q = build(
            &format!(
                "kind = \"htb\"\nlinklayer = {ll}\nclasses = [{{ name = \"ack\", rate = \"848kbit\" }}]"
            ),
            &["ack"],
        );
        let s = serve(&mut *q, GIG, secs(11), &[(0, 40, secs(0), secs(99))], 10);
        let n = s
            .iter()
            .filter(|x| x.at >= secs(1) && x.at < secs(11))
            .count() as f64;
        close(ll, n / 10.0, per_sec, 0.002);
    }
    // tc's `overhead` beside `linklayer`: 40 + 8 (LLC/SNAP) with ATM framing = 2 cells.
    let cfg: HtbConfig = toml::from_str(
        "linklayer = \"atm\"\noverhead = 8\nclasses = [{ name = \"a\", rate = \"1Mbit\" }]",
    )
    .unwrap();
    let q: Htb<asymlink_core::packet::HeaderPacket> =
        Htb::new(&cfg, &BuildCtx::with_classes(&["a"])).unwrap();
    assert_eq!(q.linklayer().wire_len(40), 106);
    assert_eq!(q.linklayer().wire_len(1500), 1696);
}

#[test]
fn the_papers_five_class_tree_keeps_its_guarantees() {
    // The ADSL paper's tree (432 kbit/s): everyone greedy with 1500-byte packets except
    // the ack class (40-byte ACKs). Guarantees first: ack 380k, interactive 15.6k,
    // good 18.2k, default 13k, bad 5.2k; then the excess (none here: rates sum to 432k).
    let mut q = build(
        "kind = \"htb\"\ndefault = \"default\"\nclasses = [\
         { name = \"root\", rate = \"432kbit\" },\
         { name = \"ack\", parent = \"root\", rate = \"380kbit\", prio = 0 },\
         { name = \"interactive\", parent = \"root\", rate = \"15.6kbit\", ceil = \"86kbit\", prio = 0 },\
         { name = \"bulk\", parent = \"root\", rate = \"36.4kbit\", ceil = \"432kbit\" },\
         { name = \"good\", parent = \"bulk\", rate = \"18.2kbit\", ceil = \"346kbit\", prio = 3 },\
         { name = \"default\", parent = \"bulk\", rate = \"13kbit\", ceil = \"432kbit\", prio = 5 },\
         { name = \"bad\", parent = \"bulk\", rate = \"5.2kbit\", ceil = \"432kbit\", prio = 7 }]",
        &["ack", "interactive", "good", "bad", "default"],
    );
    let on = |c| (c, if c == 0 { 40 } else { 1500 }, secs(0), secs(999));
    let s = serve(
        &mut *q,
        GIG,
        secs(301),
        &[on(0), on(1), on(2), on(3), on(4)],
        10,
    );
    let r = |c| rate_of(&s, c, secs(1), secs(301));
    close("ack", r(0), 380e3, 0.01);
    close("interactive", r(1), 15.6e3, 0.05);
    close("good", r(2), 18.2e3, 0.05);
    close("bad", r(3), 5.2e3, 0.10);
    close("default", r(4), 13e3, 0.05);
    // Without the ACKs, interactive (prio 0) borrows up to its 86k ceiling; good (prio 3)
    // borrows the rest up to its 346k ceiling; default and bad keep their rates.
    let mut q = build(
        "kind = \"htb\"\ndefault = \"default\"\nclasses = [\
         { name = \"root\", rate = \"432kbit\" },\
         { name = \"ack\", parent = \"root\", rate = \"380kbit\", prio = 0 },\
         { name = \"interactive\", parent = \"root\", rate = \"15.6kbit\", ceil = \"86kbit\", prio = 0 },\
         { name = \"bulk\", parent = \"root\", rate = \"36.4kbit\", ceil = \"432kbit\" },\
         { name = \"good\", parent = \"bulk\", rate = \"18.2kbit\", ceil = \"346kbit\", prio = 3 },\
         { name = \"default\", parent = \"bulk\", rate = \"13kbit\", ceil = \"432kbit\", prio = 5 },\
         { name = \"bad\", parent = \"bulk\", rate = \"5.2kbit\", ceil = \"432kbit\", prio = 7 }]",
        &["ack", "interactive", "good", "bad", "default"],
    );
    let s = serve(&mut *q, GIG, secs(301), &[on(1), on(2), on(3), on(4)], 10);
    let r = |c| rate_of(&s, c, secs(1), secs(301));
    close("interactive", r(1), 86e3, 0.02);
    close("good", r(2), 432e3 - 86e3 - 13e3 - 5.2e3, 0.03);
    close("default", r(4), 13e3, 0.10);
    close("bad", r(3), 5.2e3, 0.15);
}

#[test]
fn a_shaping_leaf_discipline_is_waited_for() {
    // A leaf whose discipline is a 100 kbit/s token bucket under a 1 Mbit/s class: HTB
    // answers "not before" the bucket's time and the leaf runs at 100 kbit/s.
    let mut q = build(
        "kind = \"htb\"\nclasses = [{ name = \"a\", rate = \"1Mbit\", \
         queue = { kind = \"tbf\", rate = \"100kbit\", burst = \"1000B\" } }]",
        &["a"],
    );
    let s = serve(&mut *q, GIG, secs(11), &[(0, 1000, secs(0), secs(99))], 10);
    close("a", rate_of(&s, 0, secs(1), secs(11)), 100e3, 0.01);
}
