//! The simulator benchmark: a fixed dumbbell of long-lived NewReno flows.
//!
//! Each sender has its own access link (1 Gbit/s by default) into router `r1`; `r1`–`r2`
//! is the bottleneck with a drop-tail buffer of one bandwidth-delay product; each receiver
//! hangs off `r2` on its own access link. 1500-byte packets, 20 ms RTT. Monitors are off:
//! the benchmark measures the engine, not the recorder.
//!
//! `packet_hops` counts every transmission of a data or ACK packet on every link.

use crate::{RunOptions, Simulation};
use std::fmt::Write as _;

/// Benchmark parameters.
#[derive(Clone, Debug)]
pub struct BenchSpec {
    /// Number of flows.
    pub flows: u32,
    /// Bottleneck rate in bit/s.
    pub bottleneck_bps: u64,
    /// Access link rate in bit/s.
    pub access_bps: u64,
    /// Round-trip propagation time in seconds.
    pub rtt_s: f64,
    /// Simulated seconds.
    pub duration_s: f64,
    /// TCP profile.
    pub profile: String,
    /// Congestion control instead of the profile's (`bbr`: the paced BBR dumbbell).
    pub cc: Option<String>,
}

impl BenchSpec {
    /// The fixed benchmark of the foundation issue: 100 flows, 100 Mbit/s, 60 s.
    pub fn standard() -> BenchSpec {
        BenchSpec {
            flows: 100,
            bottleneck_bps: 100_000_000,
            access_bps: 1_000_000_000,
            rtt_s: 0.020,
            duration_s: 60.0,
            profile: "rfc".into(),
            cc: None,
        }
    }

    /// The scaling series point: `n` flows over an `n × 10` Mbit/s bottleneck, long enough
    /// for at least `min_hops` packet-hops.
    pub fn scaling(n: u32, min_hops: u64) -> BenchSpec {
        // Each flow carries ~10 Mbit/s: ~830 data packets/s; with delayed ACKs about 1.5
        // packets per data packet per link, three links each way → ~3700 hops/s per flow.
        let per_flow_hops = 3_700.0;
        let secs = (min_hops as f64 / (per_flow_hops * n as f64)).max(5.0);
        BenchSpec {
            flows: n,
            bottleneck_bps: 10_000_000 * n as u64,
            access_bps: 1_000_000_000,
            rtt_s: 0.020,
            duration_s: secs.ceil(),
            profile: "rfc".into(),
            cc: None,
        }
    }

    /// The scenario as TOML.
    pub fn to_toml(&self) -> String {
        let bdp_bytes = self.bottleneck_bps as f64 / 8.0 * self.rtt_s;
        let buffer_pkts = (bdp_bytes / 1500.0).ceil().max(2.0) as u64;
        // One-way delay 10 ms: access 1 ms + bottleneck 8 ms + access 1 ms.
        let one_way_ms = self.rtt_s * 1e3 / 2.0;
        let access_ms = (one_way_ms * 0.1).max(0.0);
        let core_ms = one_way_ms - 2.0 * access_ms;
        let mut s = String::new();
        let _ = writeln!(
            s,
            "name = \"bench-dumbbell-{}\"\nduration = \"{}s\"\nseed = 1",
            self.flows, self.duration_s
        );
        let cc = self
            .cc
            .as_ref()
            .map_or(String::new(), |c| format!(", cc = \"{c}\""));
        let _ = writeln!(
            s,
            "tcp = {{ profile = \"{}\", mss = \"1460B\", timestamps = false, rcvbuf = \"64MB\", sndbuf = \"64MB\"{cc} }}",
            self.profile
        );
        let _ = writeln!(s, "[monitor]\nflows = false\nqueues = false\nlinks = false\nevents = false\ninterval = \"10s\"");
        let _ = writeln!(s, "[[nodes]]\nname = \"r1\"\nkind = \"router\"\n[[nodes]]\nname = \"r2\"\nkind = \"router\"");
        for i in 0..self.flows {
            let _ = writeln!(s, "[[nodes]]\nname = \"s{i}\"\n[[nodes]]\nname = \"d{i}\"");
        }
        let _ = writeln!(
            s,
            "[[links]]\nname = \"core\"\na = \"r1\"\nb = \"r2\"\nrate = \"{}bit\"\ndelay = \"{core_ms}ms\"\nqueue = {{ kind = \"fifo\", limit = \"{buffer_pkts}p\" }}",
            self.bottleneck_bps
        );
        for i in 0..self.flows {
            let _ = writeln!(
                s,
                "[[links]]\na = \"s{i}\"\nb = \"r1\"\nrate = \"{r}bit\"\ndelay = \"{access_ms}ms\"\n[[links]]\na = \"r2\"\nb = \"d{i}\"\nrate = \"{r}bit\"\ndelay = \"{access_ms}ms\"",
                r = self.access_bps
            );
        }
        for i in 0..self.flows {
            // Staggered starts over the first second avoid a synchronised slow start.
            let start_ms = (i as u64 * 1000) / self.flows.max(1) as u64;
            let _ = writeln!(
                s,
                "[[flows]]\nfrom = \"s{i}\"\nto = \"d{i}\"\nstart = \"{start_ms}ms\"\napp = {{ kind = \"bulk\" }}"
            );
        }
        s
    }
}

/// Benchmark results.
#[derive(Clone, Debug)]
pub struct BenchResult {
    /// Flows.
    pub flows: u32,
    /// Simulated seconds.
    pub sim_s: f64,
    /// Wall seconds of the event loop (scenario parsing and setup excluded).
    pub wall_s: f64,
    /// Wall seconds of parsing and building the world.
    pub setup_s: f64,
    /// Packet transmissions.
    pub packet_hops: u64,
    /// Events processed.
    pub events: u64,
    /// Packet-hops per wall second.
    pub packet_hops_per_sec: f64,
    /// Events per wall second.
    pub events_per_sec: f64,
    /// Nanoseconds of wall time per packet-hop.
    pub ns_per_hop: f64,
    /// Bottleneck utilisation (delivered bits / capacity over the run).
    pub goodput_fraction: f64,
    /// Hash of every packet-hop (equal for equal runs: a change to the engine that keeps
    /// it kept every packet's path and timing).
    pub trace_hash: u64,
}

/// Run a benchmark.
pub fn run(spec: &BenchSpec) -> Result<BenchResult, crate::ConfigError> {
    let t0 = std::time::Instant::now();
    let mut sim = Simulation::from_toml(&spec.to_toml(), RunOptions::default())?;
    let setup_s = t0.elapsed().as_secs_f64();
    sim.run();
    let r = sim.results();
    let delivered: i64 = match r
        .table("flow_summary")
        .and_then(|t| t.column("bytes_delivered"))
    {
        Some(crate::ColumnData::I64(v)) => v.iter().sum(),
        _ => 0,
    };
    let wall = r.wall_s.max(1e-9);
    Ok(BenchResult {
        flows: spec.flows,
        sim_s: spec.duration_s,
        wall_s: r.wall_s,
        setup_s,
        packet_hops: r.packet_hops,
        events: r.events,
        packet_hops_per_sec: r.packet_hops as f64 / wall,
        events_per_sec: r.events as f64 / wall,
        ns_per_hop: wall * 1e9 / r.packet_hops.max(1) as f64,
        goodput_fraction: delivered as f64 * 8.0 / (spec.bottleneck_bps as f64 * spec.duration_s),
        trace_hash: r.trace_hash,
    })
}
