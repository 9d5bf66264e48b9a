//! Subscriber lines in the simulator: a box at the provider's end of three lines, each
//! subscriber with its own tree (the core's `subscribers`, as the live box runs them).
//!
//! ```text
//!  s1 198.18.0.1 --100M--\
//!  s2 198.18.0.2 --100M--- olt --access 100M, 2 ms-- isp --core 100M, 5 ms-- server
//!  s3 198.18.0.3 --100M--/                           (middlebox: side a = access,
//!                                                     subscribers 2 / 4 / 8 Mbit/s down)
//! ```

mod common;

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};
use common::run;

const RATES_MBIT: [f64; 3] = [2.0, 4.0, 8.0];

/// The three lines, a download to each subscriber, and `subscribers` (the middlebox's
/// subscriber keys).
fn scenario(subscribers: &str) -> String {
    let mut s = String::from(
        r#"
        duration = "20s"
        tcp = "linux"
        [monitor]
        interval = "1s"
        events = false
        [[nodes]]
        name = "olt"
        kind = "router"
        [[nodes]]
        name = "isp"
        kind = "router"
        [[nodes]]
        name = "server"
        [[links]]
        name = "access"
        a = "olt"
        b = "isp"
        rate = "100Mbit"
        delay = "2ms"
        [[links]]
        name = "core"
        a = "isp"
        b = "server"
        rate = "100Mbit"
        delay = "5ms"
        "#,
    );
    for k in 1..=3 {
        s += &format!(
            "[[nodes]]\nname = \"s{k}\"\naddr = \"198.18.0.{k}\"\n\
             [[links]]\nname = \"l{k}\"\na = \"s{k}\"\nb = \"olt\"\nrate = \"100Mbit\"\ndelay = \"100us\"\n\
             [[flows]]\nname = \"down{k}\"\nfrom = \"server\"\nto = \"s{k}\"\nport = {port}\n\
             app = {{ kind = \"bulk\", open = \"receiver\" }}\n",
            port = 5000 + k
        );
    }
    s += "[[middleboxes]]\nnode = \"isp\"\na = \"access\"\nb = \"core\"\n";
    s += subscribers;
    s
}

/// Subscriber 1 with an inline pipeline, 2 with a table of its own, 3 by line mode
/// (shaped at the full line rate here), as the box's file writes them.
const SUBSCRIBERS: &str = r#"
max_subscribers = 3
[[middleboxes.subscribers]]
prefix = "198.18.0.1"
to_a = { qdisc = { kind = "tbf", rate = "2Mbit", limit = "100p" } }
[[middleboxes.subscribers]]
prefix = "198.18.0.2"
[middleboxes.subscribers.to_a]
qdisc = { kind = "tbf", rate = "4Mbit", limit = "100p" }
[[middleboxes.subscribers]]
prefix = "198.18.0.3/32"
line = { down = "8Mbit", up = "1Mbit", down_fraction = 1.0 }
"#;

fn column_i64(r: &Results, table: &str, col: &str) -> Vec<i64> {
    match r.table(table).unwrap().column(col).unwrap() {
        ColumnData::I64(v) => v.clone(),
        _ => panic!("{table}.{col} is not an integer column"),
    }
}

#[test]
fn each_subscriber_gets_its_own_rate() {
    let r = run(&scenario(SUBSCRIBERS));
    let prefixes = match r.table("subscriber_summary").unwrap().column("subscriber") {
        Some(ColumnData::Str(v)) => v.clone(),
        _ => panic!("subscriber column"),
    };
    assert_eq!(
        prefixes,
        ["198.18.0.1/32", "198.18.0.2/32", "198.18.0.3/32"]
    );
    let bytes = column_i64(&r, "subscriber_summary", "to_a_bytes");
    let created = column_i64(&r, "subscriber_summary", "created");
    for (k, rate) in RATES_MBIT.iter().enumerate() {
        // The IP bytes each subscriber's tree sent over the run, slow start included.
        let ip = bytes[k] as f64 * 8.0 / 20.0 / 1e6;
        let goodput = common::goodput_between(&r, &format!("down{}", k + 1), 5.0, 20.0) / 1e6;
        eprintln!("subscriber {k}: {ip:.3} Mbit/s IP, {goodput:.3} Mbit/s goodput of {rate}");
        assert!(
            (ip - rate).abs() < 0.03 * rate,
            "subscriber {k}: {ip} Mbit/s at the IP layer, shaped at {rate}"
        );
        assert!(
            goodput > 0.93 * rate && goodput < *rate,
            "subscriber {k}: goodput {goodput} Mbit/s, shaped at {rate}"
        );
        assert_eq!(created[k], 1, "one tree each, kept all run");
    }
    // The downloads' ACKs went up through the trees as well.
    let up = column_i64(&r, "subscriber_summary", "to_b_packets");
    assert!(up.iter().all(|&n| n > 100), "{up:?}");
    // The middlebox's counters and its queue over every tree.
    let counter = |name: &str| {
        let t = r.table("qdisc_counters").unwrap();
        let (ColumnData::Str(q), ColumnData::Str(c), ColumnData::I64(v)) = (
            t.column("queue").unwrap(),
            t.column("counter").unwrap(),
            t.column("value").unwrap(),
        ) else {
            panic!("qdisc_counters columns")
        };
        (0..q.len())
            .find(|&i| q[i] == "isp[access|core]:subscribers" && c[i] == name)
            .map(|i| v[i])
            .unwrap_or_else(|| panic!("no subscriber counter {name}"))
    };
    assert_eq!(counter("configured"), 3);
    assert_eq!(counter("live"), 3);
    assert_eq!(counter("unplaced"), 0);
    let sent = common::value(
        &r,
        "queue_summary",
        "queue",
        "access:to_a",
        "dequeued_bytes",
    );
    assert_eq!(
        sent as i64,
        bytes.iter().sum::<i64>(),
        "the link's queue is the trees'"
    );
}

#[test]
fn same_seed_same_trace() {
    let hash = |seed: u64| {
        let mut sim = Simulation::from_toml(
            &scenario(SUBSCRIBERS).replace("duration = \"20s\"", "duration = \"3s\""),
            RunOptions {
                seed: Some(seed),
                ..RunOptions::default()
            },
        )
        .unwrap();
        sim.run();
        sim.results().trace_hash
    };
    assert_eq!(hash(3), hash(3));
}

#[test]
fn errors_name_the_subscriber_key() {
    let err = |subs: &str| {
        Simulation::from_toml(&scenario(subs), RunOptions::default())
            .err()
            .unwrap_or_else(|| panic!("accepted: {subs}"))
    };
    let e = err("[[middleboxes.subscribers]]\nprefix = \"198.18.0.1\"\n\
                 [[middleboxes.subscribers]]\nprefix = \"198.18.0.2/33\"\n");
    assert_eq!(e.path, "middleboxes[0].subscribers[1].prefix", "{e}");
    let e = err("[[middleboxes.subscribers]]\nprefix = \"198.18.0.1\"\n\
                 line = { down = \"8Mbit\" }\n");
    assert!(
        e.path.starts_with("middleboxes[0].subscribers[0].line"),
        "{e}"
    );
    let e = err("max_subscribers = 0\n");
    assert_eq!(e.path, "middleboxes[0].max_subscribers", "{e}");
    let e = err("subscribers_file = \"no-such-file.toml\"\n");
    assert_eq!(e.path, "middleboxes[0].subscribers_file", "{e}");
}
