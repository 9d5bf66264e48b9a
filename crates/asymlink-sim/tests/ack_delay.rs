//! ACK delay control in the simulator: packet-clocked links, the ACK shaper on a router
//! that sees both directions (the simulator re-polls both directions and the middlebox
//! deadline after every change), conservation and determinism.

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};

fn run(src: &str) -> Results {
    let mut sim =
        Simulation::from_toml(src, RunOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    sim.run();
    sim.check_conservation().unwrap();
    sim.results()
}

fn col_i(r: &Results, table: &str, col: &str) -> Vec<i64> {
    match r.table(table).unwrap().column(col).unwrap() {
        ColumnData::I64(v) => v.clone(),
        c => panic!("{col}: {c:?}"),
    }
}

fn col_s(r: &Results, table: &str, col: &str) -> Vec<String> {
    match r.table(table).unwrap().column(col).unwrap() {
        ColumnData::Str(v) => v.clone(),
        c => panic!("{col}: {c:?}"),
    }
}

/// A queue_summary value by queue name.
fn queue(r: &Results, name: &str, col: &str) -> i64 {
    let names = col_s(r, "queue_summary", "queue");
    let i = names
        .iter()
        .position(|n| n == name)
        .unwrap_or_else(|| panic!("no queue {name} in {names:?}"));
    col_i(r, "queue_summary", col)[i]
}

/// Source — router — dest; the router forwards `pps` packets/s each way (or a bit rate),
/// a middlebox on the router with `to_a` as the reverse discipline.
fn router(pps: &str, to_a: &str, duration: &str) -> String {
    router_q(pps, "45p", to_a, duration)
}

fn router_q(pps: &str, fwd_limit: &str, to_a: &str, duration: &str) -> String {
    format!(
        r#"
        duration = "{duration}"
        tcp = {{ profile = "paper", cc = "reno", mss = "256B", rcvbuf = "17KB", sndbuf = "17KB" }}
        [[nodes]]
        name = "source"
        [[nodes]]
        name = "router"
        kind = "router"
        [[nodes]]
        name = "dest"
        [[links]]
        name = "lan"
        a = "source"
        b = "router"
        rate = "100Mbit"
        delay = "1ms"
        to_a = {{ {pps} }}
        [[links]]
        name = "wan"
        a = "router"
        b = "dest"
        rate = "100Mbit"
        delay = "300ms"
        to_b = {{ {pps} }}
        [[middleboxes]]
        node = "router"
        a = "lan"
        b = "wan"
        [middleboxes.to_b]
        qdisc = {{ kind = "fifo", limit = "{fwd_limit}" }}
        [middleboxes.to_a]
        qdisc = {to_a}
        [[flows]]
        from = "source"
        to = "dest"
        app = {{ kind = "bulk" }}
        "#
    )
}

const FIFO: &str = r#"{ kind = "fifo", limit = "1000p" }"#;
const SHAPER: &str = r#"{ kind = "ack_shaper", threshold = "42p", max_delay = "5s", leak = { kind = "interval", interval = "100ms" } }"#;

/// The cumulative `dequeued` counter of a queue at sample time `t`.
fn dequeued_at(r: &Results, name: &str, t: f64) -> i64 {
    let ts = match r.table("queues").unwrap().column("t").unwrap() {
        ColumnData::F64(v) => v.clone(),
        c => panic!("{c:?}"),
    };
    let names = col_s(r, "queues", "queue");
    let deq = col_i(r, "queues", "dequeued");
    (0..ts.len())
        .find(|&i| names[i] == name && (ts[i] - t).abs() < 1e-9)
        .map(|i| deq[i])
        .unwrap_or_else(|| panic!("no sample of {name} at {t}"))
}

#[test]
fn packet_rate_serves_packets_whatever_their_size() {
    // A forward queue large enough that the 17 KB window never overflows it: once slow
    // start has filled it, the router forwards exactly 10 packets/s of 296 bytes.
    let r = run(&router_q("packet_rate = 10", "1000p", FIFO, "20s"));
    let forwarded = dequeued_at(&r, "wan:to_b", 18.0) - dequeued_at(&r, "wan:to_b", 8.0);
    assert!(
        (99..=101).contains(&forwarded),
        "{forwarded} packets in 10 s"
    );
    assert_eq!(queue(&r, "wan:to_b", "dropped"), 0);
    // The ACKs (40 bytes) take a tick each too: as many as data packets.
    let acks = dequeued_at(&r, "lan:to_a", 18.5) - dequeued_at(&r, "lan:to_a", 8.5);
    assert!((99..=101).contains(&acks), "{acks} ACKs in 10 s");
    // With a bit rate as well, the longer time wins: 296 B at 10 kbit/s is 236.8 ms.
    let r = run(&router_q(
        "packet_rate = 10, rate = \"10kbit\"",
        "1000p",
        FIFO,
        "30s",
    ));
    let forwarded = dequeued_at(&r, "wan:to_b", 28.0) - dequeued_at(&r, "wan:to_b", 18.0);
    assert!(
        (41..=43).contains(&forwarded),
        "{forwarded} packets in 10 s"
    );
}

#[test]
fn shaper_on_the_router_avoids_the_overflow() {
    let off = run(&router("packet_rate = 10", FIFO, "30s"));
    let on = run(&router("packet_rate = 10", SHAPER, "30s"));
    let drops_off = queue(&off, "wan:to_b", "dropped");
    let drops_on = queue(&on, "wan:to_b", "dropped");
    assert!(
        drops_off > 0,
        "the 17 KB window overflows the 45-packet queue without it"
    );
    assert_eq!(drops_on, 0);
    // The forward queue hovers at the threshold: it reaches 42 and never the limit.
    assert!((42..45).contains(&queue(&on, "wan:to_b", "max_backlog_packets")));
    // The ACKs the window no longer fits in the forward queue wait in the shaper.
    assert!(queue(&on, "lan:to_a", "max_backlog_packets") >= 10);
    let delivered = |r: &Results| col_i(r, "flow_summary", "bytes_delivered")[0];
    assert!(delivered(&on) > delivered(&off));
    // Only the handshake's SYN-ACK (and a FIN, if any) takes the data queue; every pure ACK
    // goes through the ACK queue, and nothing is lost there.
    assert!(queue(&on, "lan:to_a/data", "received") <= 2);
    assert!(queue(&on, "lan:to_a/acks", "received") > 200);
    assert_eq!(queue(&on, "lan:to_a/acks", "dropped"), 0);
}

#[test]
fn same_seed_same_trace() {
    let src = router("packet_rate = 10", SHAPER, "10s");
    let a = run(&src);
    let b = run(&src);
    assert_eq!(a.trace_hash, b.trace_hash);
}

#[test]
fn shaper_is_refused_as_a_link_queue() {
    let src = router("packet_rate = 10", FIFO, "1s").replace(
        "delay = \"300ms\"",
        &format!("delay = \"300ms\"\n        queue = {SHAPER}"),
    );
    let e = Simulation::from_toml(&src, RunOptions::default())
        .err()
        .unwrap();
    assert!(
        e.path.starts_with("links[1]") && e.msg.contains("middleboxes"),
        "{e}"
    );
}
