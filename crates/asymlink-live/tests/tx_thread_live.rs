//! The box with `[process] tx_thread = true` on real interfaces (root only; skipped
//! otherwise): namespaces and veth pairs of our own, removed afterwards.
//!
//! ```text
//!  ns C: c0 ══ ra ─┐ ns R: asymlink-box, a sender thread per side ┌─ rb ══ s0 (echo) :ns S
//!                  └──────────────────────────────────────────────┘
//! ```
//!
//! For each I/O mode (`socket`, `mmap`; and `mmap` with two workers): the client sends
//! numbered UDP datagrams to an echo server through the box; the test checks that the
//! sender threads run, that the datagrams crossed both ways in order, and that the box
//! accounted for every frame it received (sent or discarded, nothing held) once it has
//! stopped.

use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr};

mod netns;
use netns::*;

const N: u32 = 600;

/// The names of the threads of process `pid`.
fn threads(pid: u32) -> Vec<String> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|t| std::fs::read_to_string(t.path().join("comm")).ok())
                .map(|s| s.trim().to_string())
                .collect()
        })
        .unwrap_or_default()
}

fn through_sender_threads(io: &str, workers: usize, prefix: &str, net: u8) {
    let client = Ipv4Addr::new(10, 79, net, 1);
    let lab = lab(prefix, "t", &[client], Ipv4Addr::new(10, 79, net, 200));
    let files = BoxFiles::new(
        &lab,
        "",
        &format!("[process]\nio = \"{io}\"\ntx_thread = true\nworkers = {workers}\n"),
    );
    let boxp = files.start(&lab);
    let server: SocketAddr = format!("10.79.{net}.200:9000").parse().unwrap();
    let (mut got, mut back) = echo_datagrams(&lab, &[client], server, N);
    let (got, back) = (got.remove(0), back.remove(0));
    // Both senders have sent by now (they start at the first frame of their side).
    let names = threads(boxp.pid());
    boxp.stop();
    let stats = files.final_stats();
    // One client: its frames meet on one worker, whose two senders run.
    for side in ["a", "b"] {
        assert!(
            (0..workers).any(|k| names.iter().any(|n| *n == format!("asymlink-tx{k}{side}"))),
            "{io}: no sender thread for side {side} in {names:?}"
        );
    }
    assert!(in_order(&got), "{io}: client → server reordered: {got:?}");
    assert!(in_order(&back), "{io}: echoes reordered: {back:?}");
    // Most datagrams make it (the kernel may drop a few under load; never reorder).
    assert!(got.len() as u32 > N * 8 / 10, "{io}: {} of {N}", got.len());
    assert!(
        back.len() as u32 > N * 7 / 10,
        "{io}: {} echoes",
        back.len()
    );
    for (d, seen) in [("to_b", got.len()), ("to_a", back.len())] {
        let c = &stats["directions"][d];
        let received = c["received"].as_u64().unwrap();
        let sent = c["sent"].as_u64().unwrap();
        // Every frame that reached the other side was sent through a sender thread.
        assert!(
            sent >= seen as u64,
            "{io} {d}: {sent} sent, {seen} seen: {c}"
        );
        assert!(received <= N as u64 + 10, "{io} {d}: {c}");
        let discarded: u64 = c["discarded"]
            .as_object()
            .map(|m| m.values().filter_map(Value::as_u64).sum())
            .unwrap_or(0);
        assert_eq!(received, sent + discarded, "{io} {d}: {c}");
    }
}

#[test]
fn datagrams_cross_in_order_through_sender_threads() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    through_sender_threads("socket", 1, "atxs", 81);
    through_sender_threads("mmap", 1, "atxm", 82);
    through_sender_threads("mmap", 2, "atxw", 83);
}
