//! One row of the AQM benchmark table, computed from a run's own results.

use asymlink_sim::{ColumnData, Results, RunOptions, Simulation};

/// What the table reports for one arm.
#[derive(Clone, Debug)]
pub struct Row {
    /// Arm (scenario file stem).
    pub arm: String,
    /// Bottleneck sojourn time percentiles (whole run), ms.
    pub sojourn_ms: [f64; 3],
    /// Median sojourn time of the TCP packets and of the UDP packets alone, ms.
    pub sojourn_tcp_udp_ms: [f64; 2],
    /// Median of the bottleneck's per-second mean sojourn time after the warm-up, ms.
    pub standing_ms: f64,
    /// Ping RTT median and p90 after the warm-up, ms.
    pub ping_ms: [f64; 2],
    /// Bulk goodput of h1 and h2 over the run, Mbit/s.
    pub host_mbps: [f64; 2],
    /// UDP delivered, Mbit/s.
    pub udp_mbps: f64,
    /// Bottleneck drops.
    pub drops: i64,
    /// Bottleneck utilisation.
    pub utilization: f64,
    /// Per flow: name, goodput Mbit/s, retransmits, timeouts.
    pub flows: Vec<(String, f64, i64, i64)>,
    /// The bottleneck discipline's own counters (`qdisc_counters`).
    pub counters: Vec<(String, i64)>,
}

impl Row {
    /// h1's share of the two hosts' bulk goodput.
    pub fn h1_share(&self) -> f64 {
        let t = self.host_mbps[0] + self.host_mbps[1];
        if t > 0.0 {
            self.host_mbps[0] / t
        } else {
            f64::NAN
        }
    }
}

fn strs<'a>(r: &'a Results, t: &str, c: &str) -> &'a [String] {
    match r.table(t).and_then(|t| t.column(c)) {
        Some(ColumnData::Str(v)) => v,
        _ => panic!("{t}.{c}"),
    }
}

fn f64s(r: &Results, t: &str, c: &str) -> Vec<f64> {
    match r.table(t).and_then(|t| t.column(c)) {
        Some(ColumnData::F64(v)) => v.clone(),
        Some(ColumnData::I64(v)) => v.iter().map(|&x| x as f64).collect(),
        _ => panic!("{t}.{c}"),
    }
}

/// The `q` quantile of `v` (nearest rank).
pub fn quantile(v: &mut [f64], q: f64) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let rank = ((q * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Run one scenario file's text (with its duration replaced by `duration`, if given) and
/// compute its row; pings before `warmup_s` are left out.
pub fn run(arm: &str, src: &str, duration: Option<&str>, warmup_s: f64) -> Row {
    let src = match duration {
        Some(d) => src.replace("duration = \"30s\"", &format!("duration = \"{d}\"")),
        None => src.to_string(),
    };
    let mut sim = Simulation::from_toml(&src, RunOptions::default()).expect("scenario");
    sim.run();
    sim.check_conservation().expect("conservation");
    let r = sim.results();
    let q = strs(&r, "queue_summary", "queue")
        .iter()
        .position(|n| n == "bottleneck:to_b")
        .expect("bottleneck row");
    let col = |c: &str| f64s(&r, "queue_summary", c)[q];
    let (t, flow, metric, value) = (
        f64s(&r, "measurements", "t"),
        strs(&r, "measurements", "flow"),
        strs(&r, "measurements", "metric"),
        f64s(&r, "measurements", "value"),
    );
    let mut rtt: Vec<f64> = (0..t.len())
        .filter(|&i| flow[i] == "ping" && metric[i] == "rtt_s" && t[i] >= warmup_s)
        .map(|i| value[i] * 1e3)
        .collect();
    let (qt, qname, qsoj) = (
        f64s(&r, "queues", "t"),
        strs(&r, "queues", "queue"),
        f64s(&r, "queues", "sojourn_ms"),
    );
    let mut standing: Vec<f64> = (0..qt.len())
        .filter(|&i| qname[i] == "bottleneck:to_b" && qt[i] > warmup_s)
        .map(|i| qsoj[i])
        .collect();
    let udp_bytes: f64 = (0..t.len())
        .filter(|&i| flow[i] == "udp" && metric[i] == "udp_bytes")
        .map(|i| value[i])
        .sum();
    let dur = r.duration_s;
    let from = strs(&r, "flow_summary", "from");
    let app = strs(&r, "flow_summary", "app");
    let delivered = f64s(&r, "flow_summary", "bytes_delivered");
    let host = |h: &str| {
        (0..from.len())
            .filter(|&i| from[i] == h && app[i] == "bulk")
            .map(|i| delivered[i])
            .sum::<f64>()
            * 8.0
            / dur
            / 1e6
    };
    let (cq, cn, cv) = (
        strs(&r, "qdisc_counters", "queue"),
        strs(&r, "qdisc_counters", "counter"),
        f64s(&r, "qdisc_counters", "value"),
    );
    let counters = (0..cq.len())
        .filter(|&i| cq[i] == "bottleneck:to_b")
        .map(|i| (cn[i].clone(), cv[i] as i64))
        .collect();
    Row {
        arm: arm.to_string(),
        counters,
        sojourn_ms: [
            col("p50_sojourn_ms"),
            col("p90_sojourn_ms"),
            col("p99_sojourn_ms"),
        ],
        sojourn_tcp_udp_ms: [col("p50_sojourn_tcp_ms"), col("p50_sojourn_udp_ms")],
        standing_ms: quantile(&mut standing, 0.5),
        ping_ms: [quantile(&mut rtt, 0.5), quantile(&mut rtt, 0.9)],
        host_mbps: [host("h1"), host("h2")],
        udp_mbps: udp_bytes * 8.0 / dur / 1e6,
        drops: col("dropped") as i64,
        utilization: col("utilization"),
        flows: (0..from.len())
            .map(|i| {
                (
                    strs(&r, "flow_summary", "flow")[i].clone(),
                    f64s(&r, "flow_summary", "goodput_bps")[i] / 1e6,
                    f64s(&r, "flow_summary", "retransmits")[i] as i64,
                    f64s(&r, "flow_summary", "timeouts")[i] as i64,
                )
            })
            .collect(),
    }
}
