//! `cargo run --release -p asymlink-sim --example bench -- [flows] [seconds]` runs the
//! standard dumbbell (100 Mbit/s bottleneck) with other flow counts;
//! `... -- scaling N [min_hops [seconds]]` runs one point of the scaling series
//! (N x 10 Mbit/s), optionally for a fixed number of simulated seconds (shorter runs for
//! `valgrind --tool=callgrind`).
fn main() {
    let args: Vec<String> = std::env::args().collect();
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
