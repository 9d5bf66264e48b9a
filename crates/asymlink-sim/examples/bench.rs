//! `cargo run --release -p asymlink-sim --example bench -- [flows] [seconds]`
fn main() {
    let args: Vec<String> = std::env::args().collect();
    let mut spec = asymlink_sim::bench::BenchSpec::standard();
    if let Some(n) = args.get(1) {
        spec.flows = n.parse().expect("flows");
    }
    if let Some(s) = args.get(2) {
        spec.duration_s = s.parse().expect("seconds");
    }
    let r = asymlink_sim::bench::run(&spec).expect("bench");
    println!("{r:#?}");
}
