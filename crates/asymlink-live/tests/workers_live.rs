//! Two workers on real interfaces (root only; skipped otherwise): namespaces and veth
//! pairs of our own, removed afterwards.
//!
//! ```text
//!  ns C: c0 (two subscribers) ══ ra ─┐ ns R: asymlink-box, workers = 2 ┌─ rb ══ s0 (echo) :ns S
//!                                    └─────────────────────────────────┘
//! ```
//!
//! Each subscriber sends numbered UDP datagrams to an echo server. The subscribers'
//! addresses are chosen so that the fanout hash puts them on different workers
//! ([`sys::subscriber_hash`]); the test checks that each worker forwarded its subscriber's
//! datagrams in both directions (the echoes come back through the same worker), and that
//! no datagram arrived out of order, either way. Socket and memory-mapped I/O.

use asymlink_live::sys::subscriber_hash;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;

mod netns;
use netns::*;

const PER_SUB: u32 = 400;

/// `busy`: the workers busy-poll and break their latency down.
fn box_files(lab: &Lab, io: &str, busy: bool) -> BoxFiles {
    let (stats, process) = match busy {
        true => ("latency_breakdown = true\n", "busy_poll = \"50us\"\n"),
        false => ("", ""),
    };
    BoxFiles::new(
        lab,
        "",
        &format!("{stats}[process]\nworkers = 2\nio = \"{io}\"\n{process}"),
    )
}

fn two_workers(io: &str, busy: bool) {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    // One subscriber per worker, as the kernel will place them.
    let pick = |w: u32| {
        (1..200u8)
            .map(|h| Ipv4Addr::new(10, 77, 0, h))
            .find(|a| subscriber_hash(IpAddr::V4(*a)) % 2 == w)
            .expect("an address for each worker")
    };
    let subs = [pick(0), pick(1)];
    let lab = lab(
        "alw",
        match (io, busy) {
            ("mmap", false) => "m",
            ("mmap", true) => "p",
            (_, false) => "s",
            (_, true) => "q",
        },
        &subs,
        Ipv4Addr::new(10, 77, 0, 200),
    );
    let files = box_files(&lab, io, busy);
    let boxp = files.start(&lab);
    let server: SocketAddr = "10.77.0.200:9000".parse().unwrap();
    let (got, back) = echo_datagrams(&lab, &subs, server, PER_SUB);
    // A reload reaches every worker (the supervisor reads the file once).
    let text = std::fs::read_to_string(&files.config).unwrap();
    std::fs::write(
        &files.config,
        format!("{text}[to_b]\nqdisc = {{ kind = \"fifo\", limit = \"500p\" }}\n"),
    )
    .unwrap();
    boxp.signal(nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    boxp.stop();
    let stats = files.final_stats();
    assert_eq!(stats["reloads"], 1, "every worker reloaded once: {stats}");
    assert_eq!(stats["reload_failures"], 0);
    let workers = stats["workers"].as_array().expect("per-worker counts");
    assert_eq!(workers.len(), 2);
    for (k, sub) in subs.iter().enumerate() {
        assert!(in_order(&got[k]), "{sub} → server reordered: {:?}", got[k]);
        assert!(
            in_order(&back[k]),
            "echoes to {sub} reordered: {:?}",
            back[k]
        );
        // Most datagrams make it (the kernel may drop a few under load; never reorder).
        assert!(
            got[k].len() as u32 > PER_SUB * 8 / 10,
            "{sub}: {} of {PER_SUB}",
            got[k].len()
        );
        assert!(
            back[k].len() as u32 > PER_SUB * 7 / 10,
            "{sub}: {} echoes",
            back[k].len()
        );
        // Worker k carried subscriber k, both ways, and (nearly) nothing else: the other
        // subscriber's datagrams would double the count.
        let w = &workers[k];
        let up = w["received"]["to_b"].as_u64().unwrap();
        let down = w["received"]["to_a"].as_u64().unwrap();
        assert!(
            up >= got[k].len() as u64 && up <= PER_SUB as u64 + 10,
            "worker {k} received {up} toward b for {sub}: {stats}"
        );
        assert!(
            down >= back[k].len() as u64 && down <= PER_SUB as u64 + 10,
            "worker {k} received {down} toward a for {sub}: {stats}"
        );
    }
    let total = stats["directions"]["to_b"]["received"].as_u64().unwrap();
    let per: u64 = workers
        .iter()
        .map(|w| w["received"]["to_b"].as_u64().unwrap())
        .sum();
    assert_eq!(total, per, "the merged counters are the workers' sum");
    if busy {
        // Every frame whose added latency was measured is in the breakdown (merged over
        // the workers by adding), its parts adding up to its total.
        let bd = &stats["latency_breakdown"];
        let bands = bd["bands_us"].as_object().expect("bands");
        let count: u64 = bands.values().map(|b| b["count"].as_u64().unwrap()).sum();
        assert_eq!(
            count,
            stats["latency_us"]["count"].as_u64().unwrap(),
            "{bd}"
        );
        assert!(count as u32 > PER_SUB, "{bd}");
        for (k, b) in bands {
            let parts: u64 = b["parts_ns"]
                .as_object()
                .unwrap()
                .values()
                .map(|v| v.as_u64().unwrap())
                .sum();
            assert_eq!(parts, b["total_ns"].as_u64().unwrap(), "band {k}: {b}");
        }
        assert!(bd["wakeups"].as_u64().unwrap() > 0, "{bd}");
    } else {
        assert!(stats.get("latency_breakdown").is_none());
    }
}

#[test]
fn two_workers_socket_io() {
    two_workers("socket", false);
}

#[test]
fn two_workers_mmap_io() {
    two_workers("mmap", false);
}

#[test]
fn two_workers_busy_polling_with_the_latency_breakdown_socket_io() {
    two_workers("socket", true);
}

#[test]
fn two_workers_busy_polling_with_the_latency_breakdown_mmap_io() {
    two_workers("mmap", true);
}
