//! The BBR example (examples/bbr/dumbbell.toml) on a shortened run: BBR fills the
//! 10 Mbit/s bottleneck, keeps its FIFO short and probes the RTT once per 10 s.

use asymlink_sim::{ColumnData, Results, RunOptions, Simulation};

fn f64s(r: &Results, t: &str, c: &str) -> Vec<f64> {
    match r.table(t).and_then(|t| t.column(c)) {
        Some(ColumnData::F64(v)) => v.clone(),
        Some(ColumnData::I64(v)) => v.iter().map(|&x| x as f64).collect(),
        _ => panic!("{t}.{c}"),
    }
}

fn strs<'a>(r: &'a Results, t: &str, c: &str) -> &'a [String] {
    match r.table(t).and_then(|t| t.column(c)) {
        Some(ColumnData::Str(v)) => v,
        _ => panic!("{t}.{c}"),
    }
}

fn run(cc: &str) -> Results {
    let path = format!(
        "{}/../../examples/bbr/dumbbell.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let src = std::fs::read_to_string(path)
        .expect("scenario file")
        .replace("duration = \"30s\"", "duration = \"12s\"")
        .replace("cc = \"bbr\"", &format!("cc = \"{cc}\""));
    let mut sim = Simulation::from_toml(&src, RunOptions::default()).expect("scenario");
    sim.run();
    sim.check_conservation().expect("conservation");
    sim.results()
}

/// Median ping RTT after 2 s, ms.
fn ping_ms(r: &Results) -> f64 {
    let (t, flow, metric, value) = (
        f64s(r, "measurements", "t"),
        strs(r, "measurements", "flow"),
        strs(r, "measurements", "metric"),
        f64s(r, "measurements", "value"),
    );
    let mut v: Vec<f64> = (0..t.len())
        .filter(|&i| flow[i] == "ping" && metric[i] == "rtt_s" && t[i] >= 2.0)
        .map(|i| value[i] * 1e3)
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

#[test]
fn bbr_example_fills_the_pipe_with_a_short_queue() {
    let bbr = run("bbr");
    let cubic = run("cubic");
    let row = |r: &Results, c: &str| f64s(r, "flow_summary", c)[0];
    // Goodput over the run (STARTUP included): most of the 10 Mbit/s.
    assert!(
        row(&bbr, "goodput_bps") > 8.5e6,
        "{}",
        row(&bbr, "goodput_bps")
    );
    assert_eq!(row(&bbr, "bbr_probe_rtts"), 1.0);
    let exit = row(&bbr, "bbr_startup_exit_s");
    assert!(exit > 0.0 && exit < 1.5, "{exit}");
    // Without a BBR flow the summary has no BBR columns.
    let summary = cubic.table("flow_summary").unwrap();
    assert!(summary.column("bbr_probe_rtts").is_none());
    // The ping: BBR keeps the FIFO near empty, CUBIC fills its 100 packets.
    let (b, c) = (ping_ms(&bbr), ping_ms(&cubic));
    assert!(b < 60.0, "BBR ping {b} ms");
    assert!(c > b + 40.0, "CUBIC ping {c} ms vs BBR {b} ms");
    // Same seed, same trace.
    assert_eq!(bbr.trace_hash, run("bbr").trace_hash);
}
