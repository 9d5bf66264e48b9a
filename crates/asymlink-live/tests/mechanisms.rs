//! Every mechanism of the core on the live box's event loop (fake clock, scripted devices):
//! ACK filtering (with the link-idle observation its estimators need), ACK delay control
//! (with the forward backlog passed between the box's two directions), HTB with exact ATM
//! accounting. The same configuration keys as the simulator; no special wiring.

use asymlink_core::pipeline::Dir;
use asymlink_core::time::Instant;
use asymlink_live::clock::{Clock, FakeClock};
use asymlink_live::runtime::{EventLoop, MemIo};
use etherparse::PacketBuilder;

mod common;
use common::*;

/// A frame of connection `port`: a pure ACK acknowledging `ack` (payload 0) or a data
/// segment, tagged by the IP identification.
fn seg(tag: u16, port: u16, ack: u32, payload: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(port, 80, 1000, 65535)
        .ack(ack);
    let mut out = Vec::new();
    b.write(&mut out, &vec![0x5a; payload]).unwrap();
    out[18..20].copy_from_slice(&tag.to_be_bytes());
    out[24] = 0;
    out[25] = 0;
    let c = ipv4_sum(&out[14..34]);
    out[24..26].copy_from_slice(&(!c).to_be_bytes());
    out
}

/// Departure times (ms, fractional) of the frames sent on `side` whose tag is in `tags`.
fn departures(el: &mut EventLoop<FakeClock, MemIo>, side: usize, tags: &[u16]) -> Vec<f64> {
    el.io()
        .sent
        .iter()
        .filter(|s| s.1 == side && tags.contains(&tag_of(&s.2)))
        .map(|s| s.0.as_nanos() as f64 / 1e6)
        .collect()
}

#[test]
fn delayed_ack_filtering_sees_the_link_go_idle() {
    // A 100 kbit/s reverse link: a 40-byte ACK takes 3.2 ms. Delayed filtering measures
    // how often the link is busy ("presence") from the box's dequeue calls; it needs a
    // call when the serialiser frees up with nothing queued, or an idle link would look
    // busy until the next arrival and light traffic would be filtered. The 37 ms
    // propagation delay makes sure nothing else wakes the loop in the idle gaps: each
    // burst's packets reach the device only after the next burst has arrived.
    let (mut el, clock) = setup(
        r#"
[to_b]
qdisc = { kind = "ack_filter", policy = "delayed", measure = "presence", window = "100ms", limit = "100p" }
[emulation.to_b]
rate = "100kbit"
delay = "37ms"
"#,
    );
    // Light load: a burst of 3 ACKs every 40 ms (busy 9.6 ms of 40: 24 %) for 2 s; then
    // overload: one ACK per millisecond (3.2 ms of work each) for half a second.
    let mut ack = 1000u32;
    let mut tag = 0u16;
    let mut next = |el: &mut EventLoop<FakeClock, MemIo>, t: Instant| {
        ack += 2896;
        tag += 1;
        el.io().arrive(t, 0, seg(tag, 40000, ack, 0));
    };
    for burst in 0..50u64 {
        for _ in 0..3 {
            next(&mut el, ms(40 * burst));
        }
    }
    for i in 0..500u64 {
        next(&mut el, ms(2200 + i));
    }
    run_until(&mut el, &clock, ms(2100));
    let snap = el.snapshot(clock.now());
    let q = &snap["directions"]["to_b"]["qdisc"];
    assert_eq!(q["filtered"], serde_json::json!({}), "light load: {q}");
    assert_eq!(snap["directions"]["to_b"]["sent"], 150);
    run_until(&mut el, &clock, ms(3000));
    let snap = el.snapshot(clock.now());
    let filtered = snap["directions"]["to_b"]["qdisc"]["filtered"]["ack_superseded"]
        .as_u64()
        .unwrap_or(0);
    assert!(filtered > 200, "overload is filtered: {filtered}");
    el.engine().check_conservation().unwrap();
}

#[test]
fn ack_delay_control_watches_the_forward_queue_across_the_box() {
    // Forward: data toward a (a download), a 1 Mbit/s link fed directly by the box's FIFO
    // (12 ms per 1500-byte packet). Reverse: the ACKs toward b, through the ACK shaper,
    // which must learn the forward backlog from the other direction of the same box.
    let (mut el, clock) = setup(
        r#"
[to_a]
qdisc = { kind = "fifo", limit = "100p" }
[to_b.qdisc]
kind = "ack_shaper"
threshold = "10p"
leak = { kind = "interval", interval = "10ms", congested_intervals = 2 }
max_delay = "1s"
[emulation.to_a]
rate = "1Mbit"
"#,
    );
    // 30 data packets at once: the forward backlog stays >= 10 until about 20 × 12 ms.
    for i in 0..30u16 {
        el.io().arrive(ms(0), 1, seg(1000 + i, 80, 1, 1460));
    }
    // 8 ACKs while congested, 8 more long after the forward queue drained.
    let early: Vec<u16> = (1..=8).collect();
    let late: Vec<u16> = (101..=108).collect();
    for (k, t) in early.iter().enumerate() {
        el.io()
            .arrive(ms(1), 0, seg(*t, 40000, 10_000 + 2896 * k as u32, 0));
    }
    for (k, t) in late.iter().enumerate() {
        el.io()
            .arrive(ms(600), 0, seg(*t, 40000, 100_000 + 2896 * k as u32, 0));
    }
    run_until(&mut el, &clock, ms(1000));
    let gaps = |v: Vec<f64>| -> Vec<f64> { v.windows(2).map(|w| w[1] - w[0]).collect() };
    let congested = gaps(departures(&mut el, 1, &early));
    let normal = gaps(departures(&mut el, 1, &late));
    assert_eq!(congested.len(), 7);
    for g in &congested {
        assert!(
            (g - 20.0).abs() < 0.01,
            "congested spacing 2 × 10 ms: {congested:?}"
        );
    }
    for g in &normal {
        assert!((g - 10.0).abs() < 0.01, "normal spacing 10 ms: {normal:?}");
    }
    let snap = el.snapshot(clock.now());
    let c = &snap["directions"]["to_b"]["qdisc"]["counters"];
    assert_eq!(c["congestion_onsets"], 1, "{c}");
    assert_eq!(snap["directions"]["to_a"]["sent"], 30);
}

#[test]
fn htb_charges_atm_cells_on_the_live_path() {
    // The box shapes (no emulated link behind it): HTB at 848 kbit/s of ATM cells. A
    // 40-byte ACK over LLC/SNAP costs 2 cells = 106 bytes = 1 ms; charged by IP bytes it
    // would be 0.377 ms.
    let (mut el, clock) = setup(
        r#"
[to_b]
classifier = { preset = "five_class" }
qdisc = { kind = "htb", default = "default", linklayer = { encap = "llc_snap_routed" }, classes = [
  { name = "root", rate = "848kbit", burst = "106B", cburst = "106B" },
  { name = "ack", parent = "root", rate = "636kbit", ceil = "848kbit", burst = "106B", cburst = "106B", prio = 0 },
  { name = "interactive", parent = "root", rate = "53kbit", ceil = "848kbit", burst = "106B", cburst = "106B", prio = 1 },
  { name = "good", parent = "root", rate = "53kbit", ceil = "848kbit", burst = "106B", cburst = "106B", prio = 3 },
  { name = "default", parent = "root", rate = "53kbit", ceil = "848kbit", burst = "106B", cburst = "106B", prio = 5 },
  { name = "bad", parent = "root", rate = "53kbit", ceil = "848kbit", burst = "106B", cburst = "106B", prio = 7 },
] }
"#,
    );
    let tags: Vec<u16> = (1..=40).collect();
    for t in &tags {
        // Distinct connections: nothing here is an ACK filter.
        el.io().arrive(ms(0), 0, seg(*t, 40000 + *t, 5000, 0));
    }
    run_until(&mut el, &clock, ms(100));
    let d = departures(&mut el, 1, &tags);
    assert_eq!(d.len(), 40);
    let steady = (d[39] - d[9]) / 30.0;
    assert!(
        (steady - 1.0).abs() < 0.01,
        "1 ms per ACK (2 cells): {steady} ms"
    );
    let snap = el.snapshot(clock.now());
    assert_eq!(snap["directions"]["to_b"]["classes"]["ack"], 40);
    assert_eq!(
        snap["directions"]["to_b"]["qdisc"]["children"]["ack"]["dequeued"],
        40
    );
    assert!(el.engine().counters(Dir::ToB).discarded.is_empty());
}

#[test]
fn sojourn_times_are_measured_from_arrival_to_transmission() {
    // Ten 1250-byte packets arrive together at a 1 Mbit/s emulated link: 10 ms each on
    // the wire, so they wait 0, 10, ..., 90 ms before their transmission starts.
    let (mut el, clock) = setup(
        r#"
[to_b]
qdisc = { kind = "fifo", limit = "100p" }
[emulation.to_b]
rate = "1Mbit"
"#,
    );
    for t in 1..=10u16 {
        el.io().arrive(ms(0), 0, seg(t, 40000, 5000, 1250 - 40));
    }
    run_until(&mut el, &clock, ms(200));
    let s = el.engine().sojourn(Dir::ToB);
    assert_eq!(s.hist.len(), 10);
    assert_eq!(s.max_ns, 90_000_000);
    assert_eq!(s.sum_ns, 450_000_000);
    // Percentiles from the histogram: within its 1.6 % bins of 40 ms (the 5th of ten
    // values) and 80 ms (the 9th).
    let snap = el.snapshot(clock.now());
    let j = &snap["directions"]["to_b"]["sojourn_ms"];
    assert_eq!(j["count"], 10);
    assert_eq!(j["mean"], 45.0);
    let p50 = j["p50"].as_f64().unwrap();
    let p90 = j["p90"].as_f64().unwrap();
    assert!((p50 - 40.0).abs() / 40.0 < 0.016, "{p50}");
    assert!((p90 - 80.0).abs() / 80.0 < 0.016, "{p90}");
    assert_eq!(snap["directions"]["to_a"]["sojourn_ms"]["count"], 0);
    assert!(snap["directions"]["to_a"]["sojourn_ms"]["p50"].is_null());
}
