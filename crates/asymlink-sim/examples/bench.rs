//! `cargo run --release -p asymlink-sim --example bench -- [flows] [seconds]` runs the
//! standard dumbbell (100 Mbit/s bottleneck) with other flow counts;
//! `... -- scaling N [min_hops [seconds]]` runs one point of the scaling series
//! (N x 10 Mbit/s), optionally for a fixed number of simulated seconds (shorter runs for
//! `valgrind --tool=callgrind`).
//!
//! `... -- window N WARM SECONDS` runs the scaling point of N flows for WARM simulated
//! seconds, then SECONDS more inside the function `measured_window`, and prints the
//! events and packet-hops of that window: with
//! `valgrind --tool=callgrind --cache-sim=yes --toggle-collect='*measured_window*'` the
//! profile covers the steady state only, not building the world or the flows' start.
//! With `ASYMLINK_BENCH_PAUSE=S` it stops 0.1 simulated s before the window, prints
//! `paused` to stderr and sleeps S seconds: run under
//! `valgrind --tool=callgrind --instr-atstart=no ...` and switch the instrumentation on
//! then (`callgrind_control -i on`), so the warm-up of a large point runs uninstrumented.
use asymlink_core::time::{Duration, Instant};
use asymlink_sim::{RunOptions, Simulation};

#[inline(never)]
fn measured_window(sim: &mut Simulation, until: Instant) {
    sim.run_until(until);
}

fn window(args: &[String]) {
    let n = args
        .get(2)
        .map(|s| s.parse().expect("flows"))
        .unwrap_or(1000);
    let warm: f64 = args.get(3).map(|s| s.parse().expect("warm")).unwrap_or(1.2);
    let secs: f64 = args
        .get(4)
        .map(|s| s.parse().expect("seconds"))
        .unwrap_or(0.1);
    let mut spec = asymlink_sim::bench::BenchSpec::scaling(n, 0);
    spec.duration_s = warm + secs;
    let mut sim = Simulation::from_toml(&spec.to_toml(), RunOptions::default()).expect("bench");
    if let Some(pause) = std::env::var("ASYMLINK_BENCH_PAUSE")
        .ok()
        .and_then(|s| s.parse::<f64>().ok())
    {
        // Stop 0.1 simulated s before the window and wait: time to switch valgrind's
        // instrumentation on, so that the warm-up runs at native speed and the
        // simulated caches are warm when the window starts.
        sim.run_until(Instant::ZERO + Duration::from_secs_f64((warm - 0.1).max(0.0)));
        eprintln!("paused");
        std::thread::sleep(std::time::Duration::from_secs_f64(pause));
    }
    sim.run_until(Instant::ZERO + Duration::from_secs_f64(warm));
    let (e0, h0) = (sim.events(), sim.packet_hops());
    let end = sim.end();
    let t0 = std::time::Instant::now();
    measured_window(&mut sim, end);
    let wall = t0.elapsed().as_secs_f64();
    let (events, hops) = (sim.events() - e0, sim.packet_hops() - h0);
    println!(
        "flows {n} window {warm}..{} s: events {events} packet_hops {hops} \
         events/hop {:.3} ns/hop {:.1} trace_hash {:016x}",
        warm + secs,
        events as f64 / hops.max(1) as f64,
        wall * 1e9 / hops.max(1) as f64,
        sim.results().trace_hash
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("window") {
        window(&args);
        return;
    }
    let spec = if args.get(1).map(String::as_str) == Some("scaling") {
        let n = args.get(2).map(|s| s.parse().expect("flows")).unwrap_or(10);
        let hops = args
            .get(3)
            .map(|s| s.parse().expect("hops"))
            .unwrap_or(10_000_000);
        let mut spec = asymlink_sim::bench::BenchSpec::scaling(n, hops);
        if let Some(s) = args.get(4) {
            spec.duration_s = s.parse().expect("seconds");
        }
        spec
    } else {
        let mut spec = asymlink_sim::bench::BenchSpec::standard();
        if let Some(n) = args.get(1) {
            spec.flows = n.parse().expect("flows");
        }
        if let Some(s) = args.get(2) {
            spec.duration_s = s.parse().expect("seconds");
        }
        spec
    };
    let r = asymlink_sim::bench::run(&spec).expect("bench");
    println!("{r:#?}");
}
