//! Trace-driven links in the simulator: a mahimahi trace sets when the line delivers,
//! trace files are found relative to the scenario file, and runs stay deterministic.

use asymlink_sim::results::ColumnData;
use asymlink_sim::{RunOptions, Simulation};
use std::path::{Path, PathBuf};

/// A fresh directory holding `traces/line.trace` with `sched`.
fn scratch(name: &str, sched: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("asymlink-simtrace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(d.join("traces")).unwrap();
    std::fs::write(d.join("traces/line.trace"), sched).unwrap();
    d
}

/// Sender `s` — router — client `c`; the line (router → client) as `line`, `app` from s
/// to c.
fn scenario(line: &str, app: &str, duration: &str) -> String {
    format!(
        r#"
duration = "{duration}"
[[nodes]]
name = "s"
[[nodes]]
name = "r"
kind = "router"
[[nodes]]
name = "c"
[[links]]
name = "lan"
a = "s"
b = "r"
rate = "100Mbit"
[[links]]
name = "line"
a = "r"
b = "c"
rate = "1Mbit"
delay = "10ms"
{line}
[[flows]]
name = "f"
from = "s"
to = "c"
app = {app}
"#
    )
}

fn run(src: &str, base: &Path) -> Simulation {
    let mut sim = Simulation::from_toml_in(src, Some(base), RunOptions::default())
        .unwrap_or_else(|e| panic!("{e}"));
    sim.run();
    sim.check_conservation().unwrap();
    sim
}

fn cell(sim: &Simulation, table: &str, key_col: &str, key: &str, col: &str) -> f64 {
    let r = sim.results();
    let t = r.table(table).unwrap();
    let ColumnData::Str(keys) = t.column(key_col).unwrap() else {
        panic!()
    };
    let i = keys.iter().position(|k| k == key).unwrap();
    match t.column(col).unwrap() {
        ColumnData::I64(v) => v[i] as f64,
        ColumnData::F64(v) => v[i],
        c => panic!("{c:?}"),
    }
}

#[test]
fn a_saturated_line_sends_one_mtu_packet_per_opportunity() {
    // 2, 4, 4, 10 ms every 10 ms: 400 opportunities a second, 4.8 Mbit/s. A 20 Mbit/s
    // stream of 1500-byte datagrams keeps the line busy; the link-wide 1 Mbit/s rate is
    // replaced by the direction's trace.
    let dir = scratch("sat", "2\n4\n4\n10\n");
    let sim = run(
        &scenario(
            "to_b = { trace = \"traces/line.trace\" }",
            "{ kind = \"cbr\", rate = \"20Mbit\", size = \"1500B\" }",
            "1s",
        ),
        &dir,
    );
    let q = "line:to_b";
    // Opportunities at 2 ms .. 1000 ms inclusive: 100 periods of 4.
    assert_eq!(cell(&sim, "queue_summary", "queue", q, "tx_packets"), 400.0);
    assert_eq!(cell(&sim, "queue_summary", "queue", q, "rate_bps"), 4.8e6);
    assert_eq!(cell(&sim, "queue_summary", "queue", q, "utilization"), 1.0);
    // The other direction keeps the link-wide rate.
    assert_eq!(
        cell(&sim, "queue_summary", "queue", "line:to_a", "rate_bps"),
        1e6
    );
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn tcp_over_a_trace_is_deterministic_and_differs_from_its_mean_rate() {
    // Bursty: 20 opportunities in the first 20 ms of every 100 ms, nothing else.
    let sched: String = (1..=20).map(|t| format!("{t}\n")).collect::<String>() + "100\n";
    let dir = scratch("tcp", &sched);
    let bulk = "{ kind = \"bulk\" }";
    let traced = scenario("to_b = { trace = \"traces/line.trace\" }", bulk, "3s");
    let a = run(&traced, &dir).results();
    let b = run(&traced, &dir).results();
    assert_eq!(a.trace_hash, b.trace_hash, "same seed, same trace");
    // 21 packets per 100 ms = 2.52 Mbit/s on average, delivered in bursts.
    let steady = run(
        &scenario("to_b = { rate = \"2.52Mbit\" }", bulk, "3s"),
        &dir,
    )
    .results();
    assert_ne!(a.trace_hash, steady.trace_hash);
    let sim = run(&traced, &dir);
    let delivered = cell(&sim, "flow_summary", "flow", "f", "bytes_delivered");
    // At most the trace's capacity in 3 s (63 opportunities of 1500 bytes, each carrying
    // 1448 bytes of payload and 52 of headers), and most of it.
    assert!(delivered <= 3.0 * 210.0 * 1448.0, "{delivered}");
    assert!(delivered > 0.7 * 3.0 * 210.0 * 1448.0, "{delivered}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn trace_errors_name_the_key_and_the_file() {
    let dir = scratch("err", "1\n2\nsoon\n");
    let cbr = "{ kind = \"cbr\", rate = \"1Mbit\" }";
    let err = |line: &str| {
        Simulation::from_toml_in(
            &scenario(line, cbr, "1s"),
            Some(&dir),
            RunOptions::default(),
        )
        .err()
        .unwrap()
    };
    let e = err("to_b = { trace = \"traces/line.trace\" }");
    assert_eq!(e.path, "links[1].to_b.trace");
    assert!(e.msg.contains("line.trace' line 3: 'soon'"), "{e}");
    let e = err("to_b = { trace = \"traces/none.trace\" }");
    assert!(
        e.msg.contains("cannot read") && e.msg.contains("none.trace"),
        "{e}"
    );
    let e = err("to_b = { trace = \"traces/line.trace\", rate = \"1Mbit\" }");
    assert_eq!(e.path, "links[1].to_b.trace");
    assert!(e.msg.contains("either 'trace' or 'rate'"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}
