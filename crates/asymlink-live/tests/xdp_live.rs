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
//! forwards nothing and the interfaces carry no program). A second test reads an AF_XDP
//! socket directly and checks that its frames carry the kernel's receive time.

use asymlink_live::sys::realtime_ns;
use asymlink_live::xdp::Xsk;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::Duration;

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

/// Frames read from the box's AF_XDP socket carry the time the kernel received them (the
/// XDP program's stamp, on the clock of the other modes' kernel stamps), not the time the
/// box read them: datagrams sent between `t0` and `t1` and read 50 ms later are stamped
/// between `t0` and `t1`.
#[test]
fn af_xdp_frames_carry_the_kernel_receive_time() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let client = Ipv4Addr::new(10, 79, 2, 1);
    let lab = lab("alx", "t", &[client], Ipv4Addr::new(10, 79, 2, 200));
    let (r, c) = (lab.r().to_string(), lab.c().to_string());
    let (t0, t1, read, stamps) = std::thread::spawn(move || {
        enter(&r);
        let mut x = Xsk::open("ra").unwrap();
        let t0 = realtime_ns();
        std::thread::spawn(move || {
            enter(&c);
            let s = UdpSocket::bind((client, 0)).unwrap();
            for i in 0..5u8 {
                s.send_to(&[i; 100], "10.79.2.200:9000").unwrap();
            }
        })
        .join()
        .unwrap();
        let t1 = realtime_ns();
        std::thread::sleep(Duration::from_millis(50));
        let mut stamps = Vec::new();
        x.recv(64, &mut |rx| stamps.push((rx.ts, rx.frame.len())));
        (t0, t1, realtime_ns(), stamps)
    })
    .join()
    .unwrap();
    // The five datagrams (Ethernet + IPv4 + UDP + 100 bytes).
    let ours: Vec<u64> = stamps
        .iter()
        .filter(|&&(_, len)| len == 14 + 20 + 8 + 100)
        .map(|&(ts, _)| ts)
        .collect();
    assert_eq!(ours.len(), 5, "{stamps:?}");
    for ts in ours {
        assert!(
            t0 <= ts && ts <= t1,
            "stamp {ts} outside the sending [{t0}, {t1}] (read at {read}, {} µs later)",
            (read - ts) / 1000
        );
    }
}
