//! `cargo run --release -p asymlink-sim --example trace_hash -- FILE.toml...` runs each
//! scenario with its own seed and prints its trace hash, events and packet-hops: a quick
//! check that a change to the engine left every trace as it was. `ASYMLINK_THREADS=2`
//! runs each partitioned (and prints the threads used and the late handovers too).
fn main() {
    let out = std::env::temp_dir().join("asymlink-trace-hash");
    std::fs::create_dir_all(&out).expect("temporary directory");
    for path in std::env::args().skip(1) {
        let p = std::path::Path::new(&path);
        let src = std::fs::read_to_string(p).expect("scenario file");
        let opts = asymlink_sim::RunOptions {
            out_dir: Some(out.clone()),
            seed: None,
            // `ASYMLINK_THREADS=2`: a partitioned run (its own traces).
            threads: std::env::var("ASYMLINK_THREADS")
                .ok()
                .and_then(|t| t.parse().ok())
                .unwrap_or(1),
        };
        match asymlink_sim::Simulation::from_toml_in(&src, p.parent(), opts) {
            Ok(mut sim) => {
                sim.run();
                let r = sim.results();
                if r.threads > 1 {
                    println!(
                        "{path} {:016x} {} {} threads={} late={} busy/waiting s={:.1?}",
                        r.trace_hash,
                        r.events,
                        r.packet_hops,
                        r.threads,
                        r.late_handovers,
                        sim.thread_times()
                    );
                } else {
                    println!(
                        "{path} {:016x} {} {}",
                        r.trace_hash, r.events, r.packet_hops
                    );
                }
            }
            Err(e) => println!("{path} error: {e}"),
        }
    }
}
