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

use serde_json::Value;
use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
use std::process::Command;
use std::time::{Duration, Instant};

mod netns;
use netns::*;

const N: u32 = 500;

/// Sends `N` datagrams `[seq: u32 BE]` from the client, echoed by the server; returns the
/// sequence numbers the server got and those that came back, in arrival order.
fn traffic(lab: &Lab, client: Ipv4Addr) -> (Vec<u32>, Vec<u32>) {
    let server: SocketAddr = "10.79.1.200:9000".parse().unwrap();
    let (s_ns, (up_tx, up_rx), (ready_tx, ready_rx)) = (
        lab.s().to_string(),
        std::sync::mpsc::channel(),
        std::sync::mpsc::channel(),
    );
    let srv = std::thread::spawn(move || {
        enter(&s_ns);
        let sock = UdpSocket::bind(server).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        ready_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 64];
        while let Ok((len, from)) = sock.recv_from(&mut buf) {
            if len == 4 {
                got.push(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]));
                let _ = sock.send_to(&buf[..len], from);
            }
        }
        up_tx.send(got).unwrap();
    });
    ready_rx.recv().unwrap();
    let c_ns = lab.c().to_string();
    let cli = std::thread::spawn(move || {
        enter(&c_ns);
        let s = UdpSocket::bind(SocketAddr::new(client.into(), 0)).unwrap();
        s.connect(server).unwrap();
        s.set_nonblocking(true).unwrap();
        let mut back = Vec::new();
        let mut buf = [0u8; 64];
        let mut drain = |back: &mut Vec<u32>| {
            while let Ok(len) = s.recv(&mut buf) {
                if len == 4 {
                    back.push(u32::from_be_bytes([buf[0], buf[1], buf[2], buf[3]]));
                }
            }
        };
        for seq in 0..N {
            let _ = s.send(&seq.to_be_bytes());
            if seq % 16 == 15 {
                std::thread::sleep(Duration::from_micros(300));
                drain(&mut back);
            }
        }
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(400) {
            drain(&mut back);
            std::thread::sleep(Duration::from_millis(5));
        }
        back
    });
    let back = cli.join().unwrap();
    let got = up_rx.recv().unwrap();
    srv.join().unwrap();
    (got, back)
}

fn in_order(v: &[u32]) -> bool {
    v.windows(2).all(|w| w[0] < w[1])
}

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
    let dir = std::env::temp_dir().join(format!("{}-box", lab.r()));
    std::fs::create_dir_all(&dir).unwrap();
    let final_json = dir.join("final.json");
    let cfg = dir.join("box.toml");
    std::fs::write(
        &cfg,
        format!(
            "seed = 1\n[interfaces]\na = \"ra\"\nb = \"rb\"\n\
             [stats]\nfile = \"{}\"\n[privileges]\nuser = \"root\"\n\
             [process]\nio = \"xdp\"\n",
            final_json.display()
        ),
    )
    .unwrap();
    let boxp = BoxProcess::start(lab.r(), &cfg);
    assert!(has_xdp(lab.r(), "ra") && has_xdp(lab.r(), "rb"));
    let (got, back) = traffic(&lab, client);
    boxp.stop();
    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(&final_json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
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
