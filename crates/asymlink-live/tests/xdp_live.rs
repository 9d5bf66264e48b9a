//! The box with `[process] io = "xdp"` on real interfaces (root only; skipped otherwise):
//! namespaces and veth pairs of our own, removed afterwards.
//!
//! ```text
//!  ns C: c0 ══ ra ─┐ ns R: asymlink-box, io = "xdp" ┌─ rb ══ s0 (echo) :ns S
//!                  └────────────────────────────────┘
//! ```
//!
//! The client sends numbered UDP datagrams to an echo server through the box; the test
//! checks that they crossed both ways in order, that the box counted them on its AF_XDP
//! sockets, and that the XDP programs went with the box (afterwards the router namespace
//! forwards nothing and the interfaces carry no program).

use std::net::{Ipv4Addr, SocketAddr};
use std::process::Command;

mod netns;
use netns::*;

const N: u32 = 500;

/// Whether `dev` in namespace `ns` has an XDP program attached.
fn has_xdp(ns: &str, dev: &str) -> bool {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ip", "-d", "link", "show", dev])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).contains("prog/xdp")
}

#[test]
fn datagrams_cross_through_af_xdp_sockets() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let client = Ipv4Addr::new(10, 79, 1, 1);
    let lab = lab("alx", "x", &[client], Ipv4Addr::new(10, 79, 1, 200));
    let files = BoxFiles::new(&lab, "", "[process]\nio = \"xdp\"\n");
    let boxp = files.start(&lab);
    assert!(has_xdp(lab.r(), "ra") && has_xdp(lab.r(), "rb"));
    let server: SocketAddr = "10.79.1.200:9000".parse().unwrap();
    let (mut got, mut back) = echo_datagrams(&lab, &[client], server, N);
    let (got, back) = (got.remove(0), back.remove(0));
    boxp.stop();
    let stats = files.final_stats();
    assert!(in_order(&got), "client → server reordered: {got:?}");
    assert!(in_order(&back), "echoes reordered: {back:?}");
    // Most datagrams make it (the kernel may drop a few under load; never reorder).
    assert!(got.len() as u32 > N * 8 / 10, "{} of {N}", got.len());
    assert!(back.len() as u32 > N * 7 / 10, "{} echoes", back.len());
    let up = stats["directions"]["to_b"]["received"].as_u64().unwrap();
    let down = stats["directions"]["to_a"]["received"].as_u64().unwrap();
    assert!(
        up >= got.len() as u64 && up <= N as u64 + 10,
        "{up} received toward b: {stats}"
    );
    assert!(
        down >= back.len() as u64 && down <= N as u64 + 10,
        "{down} received toward a: {stats}"
    );
    // The programs went with the box's descriptors.
    assert!(!has_xdp(lab.r(), "ra") && !has_xdp(lab.r(), "rb"));
}
