//! Memory of one box pipeline (the core middlebox a configuration builds: classifier,
//! disciplines, rewriters), measured as the growth of resident memory while `N` of them
//! are alive — what each subscriber would cost with a pipeline of its own.
//!
//! ```sh
//! cargo run --release -p asymlink-live --example pipeline_memory -- box.toml 2000
//! ```

use asymlink_core::pipeline::Middlebox;
use asymlink_live::config::BoxConfig;
use asymlink_live::packet::LivePacket;
use asymlink_live::sys::rss_bytes;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), n) = (args.first(), args.get(1).and_then(|s| s.parse().ok())) else {
        eprintln!("usage: pipeline_memory CONFIG.toml [N (default 2000)]");
        std::process::exit(2);
    };
    let n: usize = n.unwrap_or(2000).max(1);
    let cfg = match BoxConfig::load(std::path::Path::new(path)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    let (mb, rates) = (cfg.middlebox(), cfg.rates());
    let before = rss_bytes();
    let all: Vec<Middlebox<LivePacket>> = (0..n)
        .map(|k| Middlebox::new(&mb, rates, k as u64).expect("validated"))
        .collect();
    let after = rss_bytes();
    println!(
        "{n} pipelines of {path}: {} bytes each ({} MiB in all)",
        after.saturating_sub(before) / n as u64,
        after.saturating_sub(before) >> 20
    );
    drop(all);
}
