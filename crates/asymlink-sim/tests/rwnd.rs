//! Receiver-based windows enforced in the simulator, both ways: by the receiving host
//! (`rwnd_policy` on a node) and by a middlebox rewriting the receiver's ACKs
//! (`rewrite = [{ kind = "rwnd" }]`). A download over a 28.8 kbit/s modem with a telnet
//! session: the policy must hold the modem queue near QLength_Delay (0.4 s, 1440 B, under
//! 3 packets) where the default receiver lets the 16 KiB send buffer fill it.

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};

const BASE: &str = r#"
    duration = "40s"
    tcp = { profile = "rfc", mss = "536B", timestamps = false }
    [[nodes]]
    name = "client"
    POLICY
    [[nodes]]
    name = "pool"
    kind = "router"
    [[nodes]]
    name = "server"
    [[links]]
    name = "line"
    a = "pool"
    b = "client"
    rate = "28.8kbit"
    delay = "60ms"
    to_b = { queue = { kind = "fifo", limit = "40p" } }
    [[links]]
    name = "backbone"
    a = "server"
    b = "pool"
    rate = "10Mbit"
    delay = "8ms"
    MIDDLEBOX
    [[flows]]
    name = "ftp"
    from = "server"
    to = "client"
    port = 20
    tcp = { profile = "rfc", mss = "536B", timestamps = false, rcvbuf = "32KiB", sndbuf = "16KiB" }
    app = { kind = "bulk", bytes = "100KB", open = "receiver" }
    [[flows]]
    name = "telnet"
    from = "client"
    to = "server"
    port = 23
    app = { kind = "telnet", interval = "1s" }
"#;

const HOST: &str = r#"rwnd_policy = { link_rate = "28.8kbit", access_queue = "40p" }"#;
const BOX: &str = r#"
    [[middleboxes]]
    node = "pool"
    a = "backbone"
    b = "line"
    rewrite = [{ kind = "rwnd", receivers = "b", policy = { link_rate = "28.8kbit", access_queue = "40p" } }]
    [middleboxes.to_b]
    qdisc = { kind = "fifo", limit = "40p" }
"#;

fn run(policy: &str, middlebox: &str) -> Results {
    let src = BASE
        .replace("POLICY", policy)
        .replace("MIDDLEBOX", middlebox);
    let mut sim = Simulation::from_toml(&src, RunOptions::default()).unwrap();
    sim.run();
    sim.check_conservation().unwrap();
    sim.results()
}

fn strs(r: &Results, table: &str, col: &str) -> Vec<String> {
    match r.table(table).unwrap().column(col).unwrap() {
        ColumnData::Str(v) => v.clone(),
        _ => panic!("{table}.{col} is not text"),
    }
}

fn nums(r: &Results, table: &str, col: &str) -> Vec<f64> {
    match r.table(table).unwrap().column(col).unwrap() {
        ColumnData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        ColumnData::F64(v) => v.clone(),
        ColumnData::Str(_) => panic!("{table}.{col} is text"),
    }
}

/// Max backlog (packets) of the modem queue toward the client.
fn modem_max_backlog(r: &Results) -> f64 {
    let names = strs(r, "queue_summary", "queue");
    let i = names.iter().position(|n| n == "line:to_b").unwrap();
    nums(r, "queue_summary", "max_backlog_packets")[i]
}

/// Median telnet echo latency (s).
fn echo_median(r: &Results) -> f64 {
    let metric = strs(r, "measurements", "metric");
    let value = nums(r, "measurements", "value");
    let mut v: Vec<f64> = metric
        .iter()
        .zip(value)
        .filter(|(m, _)| *m == "echo_latency_s")
        .map(|(_, v)| v)
        .collect();
    assert!(v.len() > 10);
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn ftp_time(r: &Results) -> f64 {
    let metric = strs(r, "measurements", "metric");
    let value = nums(r, "measurements", "value");
    metric
        .iter()
        .zip(value)
        .find(|(m, _)| *m == "transfer_time_s")
        .map(|(_, v)| v)
        .expect("the download finished")
}

fn counter(r: &Results, name: &str) -> f64 {
    let queue = strs(r, "qdisc_counters", "queue");
    let counter = strs(r, "qdisc_counters", "counter");
    let value = nums(r, "qdisc_counters", "value");
    (0..queue.len())
        .find(|&i| queue[i].ends_with(":rewrite:rwnd") && counter[i] == name)
        .map(|i| value[i])
        .unwrap_or_else(|| panic!("no rewriter counter {name}"))
}

#[test]
fn the_host_and_the_box_hold_the_modem_queue_to_the_delay_budget() {
    let default = run("", "");
    let host = run(HOST, "");
    let middlebox = run("", BOX);
    // Default: the 16 KiB window sits in the modem queue (about 30 packets, 4 s).
    assert!(
        modem_max_backlog(&default) >= 25.0,
        "{}",
        modem_max_backlog(&default)
    );
    assert!(echo_median(&default) > 3.0, "{}", echo_median(&default));
    // Managed: eq. (1) gives 3600 × BaseRTT + 1440 B ≈ 2 KB in flight; the queue holds
    // a few packets, the echo about BaseRTT + 0.4 s.
    for (arm, r) in [("host", &host), ("box", &middlebox)] {
        let q = modem_max_backlog(r);
        assert!(q <= 8.0, "{arm}: modem queue reached {q} packets");
        let e = echo_median(r);
        assert!(e < 0.8, "{arm}: median echo {e} s");
        // The download is not slowed: within 5 % of the default's time.
        let (t, t0) = (ftp_time(r), ftp_time(&default));
        assert!(t < t0 * 1.05, "{arm}: download took {t} s against {t0} s");
    }
    // The box lowered the client's windows; every flow's handshake was seen.
    assert!(counter(&middlebox, "rewritten") > 50.0);
    assert_eq!(counter(&middlebox, "unknown_scale"), 0.0);
    assert_eq!(counter(&middlebox, "mss_inexpressible"), 0.0);
}

#[test]
fn the_same_seed_gives_the_same_run() {
    let a = run(HOST, "");
    let b = run(HOST, "");
    assert_eq!(
        nums(&a, "flows", "bytes_delivered"),
        nums(&b, "flows", "bytes_delivered")
    );
    assert_eq!(
        nums(&a, "measurements", "value"),
        nums(&b, "measurements", "value")
    );
}
