//! The AQM benchmark: `cargo run --release -p asymlink-sim --example aqm [-- duration]`
//! (`-- --flows` adds per-flow goodput and the bottleneck's counters on stderr; `--udp
//! RATE` sends the unresponsive UDP stream at RATE instead of 2 Mbit/s) runs `examples/aqm/*.toml` (FIFO, CoDel,
//! FQ-CoDel, host-then-flow, and the unloaded baseline) and prints the table of
//! docs/qdisc.md. Arms ending in ` cobalt` run the same file with `aqm = "cobalt"` on the
//! flow queues; the last row is `fq_codel` without the unresponsive UDP flow (the lab's
//! flows: bulk TCP and the ping).

mod row;

const ARMS: [&str; 8] = [
    "unloaded",
    "fifo",
    "codel",
    "fq_codel",
    "fq_codel cobalt",
    "host_fq_codel",
    "host_fq_codel cobalt",
    "fq_codel no UDP",
];
const WARMUP_S: f64 = 5.0;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let per_flow = args.iter().any(|a| a == "--flows");
    let udp = args
        .iter()
        .position(|a| a == "--udp")
        .map(|i| args.get(i + 1).expect("--udp RATE").clone());
    let duration = args
        .iter()
        .enumerate()
        .find(|&(i, a)| !a.starts_with("--") && (i == 0 || args[i - 1] != "--udp"))
        .map(|(_, a)| a.clone());
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/aqm");
    println!(
        "| arm | sojourn p50 / p90 / p99 (ms) | p50 TCP / UDP (ms) | standing (ms) | ping p50 / p90 (ms) | h1 (1 flow) / h2 (8 flows) Mbit/s | h1 share | UDP Mbit/s | drops | utilisation |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|");
    for arm in ARMS {
        let file = arm.split(' ').next().unwrap_or(arm);
        let src = std::fs::read_to_string(format!("{dir}/{file}.toml")).expect("scenario file");
        let src = match &udp {
            Some(rate) => {
                // (The unloaded arm has no UDP stream.)
                let from = "rate = \"2Mbit\", size";
                src.replace(from, &format!("rate = \"{rate}\", size"))
            }
            None => src,
        };
        let src = if arm.ends_with(" no UDP") {
            without_flow(&src, "udp")
        } else if arm.ends_with(" cobalt") {
            with_cobalt(&src, file)
        } else {
            src
        };
        let r = row::run(arm, &src, duration.as_deref(), WARMUP_S);
        let loaded = r.host_mbps[0] + r.host_mbps[1] > 0.0;
        let hosts = if loaded {
            format!(
                "{:.2} / {:.2} | {:.1} % | {:.2}",
                r.host_mbps[0],
                r.host_mbps[1],
                r.h1_share() * 100.0,
                r.udp_mbps + 0.0 // no UDP flow: +0.00, not -0.00
            )
        } else {
            "— | — | —".to_string()
        };
        println!(
            "| `{}` | {:.1} / {:.1} / {:.1} | {:.1} / {:.1} | {:.1} | {:.1} / {:.1} | {hosts} | {} | {:.1} % |",
            r.arm,
            r.sojourn_ms[0],
            r.sojourn_ms[1],
            r.sojourn_ms[2],
            r.sojourn_tcp_udp_ms[0],
            r.sojourn_tcp_udp_ms[1],
            r.standing_ms,
            r.ping_ms[0],
            r.ping_ms[1],
            r.drops,
            r.utilization * 100.0
        );
        if per_flow {
            for (name, mbps, retx, rto) in &r.flows {
                eprintln!("  {arm} {name}: {mbps:.2} Mbit/s, {retx} retransmits, {rto} timeouts");
            }
            let c: Vec<String> = r.counters.iter().map(|(n, v)| format!("{n} {v}")).collect();
            eprintln!("  {arm} bottleneck: {}", c.join(", "));
        }
    }
}

/// The scenario text with `aqm = "cobalt"` on the `kind` discipline under test.
fn with_cobalt(src: &str, kind: &str) -> String {
    let from = format!("kind = \"{kind}\",");
    assert!(src.contains(&from), "{kind}");
    src.replace(&from, &format!("kind = \"{kind}\", aqm = \"cobalt\","))
}

/// The scenario text without the `[[flows]]` table named `name`.
fn without_flow(src: &str, name: &str) -> String {
    let tag = format!("name = \"{name}\"");
    let mut parts = src.split("[[flows]]");
    let mut out = parts.next().unwrap_or_default().to_string();
    for p in parts {
        if !p.lines().any(|l| l.trim() == tag) {
            out.push_str("[[flows]]");
            out.push_str(p);
        }
    }
    out
}
