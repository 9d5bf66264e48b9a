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
        .replace("interval = \"1s\"", "interval = \"100ms\"")
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
    // The flow series show what `TCP_CC_INFO` shows (BBR senders only): the bandwidth
    // estimate near the bottleneck's payload rate once the pipe is full, the gains of
    // STARTUP first and of PROBE_RTT (cwnd gain 1) once, the pacing rate near gain × bw.
    assert!(cubic.table("flows").unwrap().column("bbr_bw_bps").is_none());
    let flow = strs(&bbr, "flows", "flow");
    let at = |c: &str| -> Vec<f64> {
        let v = f64s(&bbr, "flows", c);
        (0..v.len())
            .filter(|&i| flow[i] == "bulk")
            .map(|i| v[i])
            .collect()
    };
    let (t, bw, pg, cg, pr) = (
        at("t"),
        at("bbr_bw_bps"),
        at("bbr_pacing_gain"),
        at("bbr_cwnd_gain"),
        at("pacing_rate_bps"),
    );
    let first = (0..t.len())
        .find(|&i| !pg[i].is_nan())
        .expect("a BBR sample");
    assert!(
        (pg[first] - 739.0 / 256.0).abs() < 1e-9 && pg[first] == cg[first],
        "{pg:?}"
    );
    let late: Vec<usize> = (0..t.len()).filter(|&i| t[i] >= 3.0).collect();
    for &i in &late {
        assert!(bw[i] > 9.0e6 && bw[i] < 10.0e6, "bw {} at {}", bw[i], t[i]);
        let want = bw[i] * pg[i] * 0.99;
        assert!((pr[i] - want).abs() <= 0.01 * want, "{} vs {want}", pr[i]);
    }
    let entered = (1..t.len())
        .filter(|&i| cg[i] == 1.0 && cg[i - 1] != 1.0)
        .count();
    assert_eq!(entered, 1, "PROBE_RTT entries seen in the series");
    let min_rtt = at("bbr_min_rtt_ms");
    assert!(
        min_rtt[late[0]] > 42.0 && min_rtt[late[0]] < 45.0,
        "{min_rtt:?}"
    );
    // The ping: BBR keeps the FIFO near empty, CUBIC fills its 100 packets.
    let (b, c) = (ping_ms(&bbr), ping_ms(&cubic));
    assert!(b < 60.0, "BBR ping {b} ms");
    assert!(c > b + 40.0, "CUBIC ping {c} ms vs BBR {b} ms");
    // Same seed, same trace.
    assert_eq!(bbr.trace_hash, run("bbr").trace_hash);
}
