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
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

mod netns;
use netns::*;

const PER_SUB: u32 = 400;

fn start_box(lab: &Lab, dir: &Path, io: &str) -> (BoxProcess, PathBuf) {
    let final_json = dir.join("final.json");
    let cfg = dir.join("box.toml");
    std::fs::write(
        &cfg,
        format!(
            "seed = 1\n[interfaces]\na = \"ra\"\nb = \"rb\"\n\
             [stats]\nfile = \"{}\"\n[privileges]\nuser = \"root\"\n\
             [process]\nworkers = 2\nio = \"{io}\"\n",
            final_json.display()
        ),
    )
    .unwrap();
    (BoxProcess::start(lab.r(), &cfg), final_json)
}

/// Datagrams `[subscriber][seq: u32 BE]` from each subscriber, echoed back. Returns, per
/// subscriber, the sequence numbers the server got and those that came back, in arrival
/// order.
fn traffic(lab: &Lab, subs: &[Ipv4Addr]) -> (Vec<Vec<u32>>, Vec<Vec<u32>>) {
    let server: SocketAddr = "10.77.0.200:9000".parse().unwrap();
    let s_ns = lab.s().to_string();
    let n = subs.len();
    let (up_tx, up_rx) = std::sync::mpsc::channel();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let srv = std::thread::spawn(move || {
        enter(&s_ns);
        let sock = UdpSocket::bind(server).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        bound_tx.send(()).unwrap();
        let mut got = vec![Vec::new(); n];
        let mut buf = [0u8; 64];
        while let Ok((len, from)) = sock.recv_from(&mut buf) {
            if len == 5 && (buf[0] as usize) < n {
                got[buf[0] as usize].push(u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]));
                let _ = sock.send_to(&buf[..len], from);
            }
        }
        up_tx.send(got).unwrap();
    });
    bound_rx.recv().unwrap();
    let c_ns = lab.c().to_string();
    let subs = subs.to_vec();
    let cli = std::thread::spawn(move || {
        enter(&c_ns);
        let socks: Vec<UdpSocket> = subs
            .iter()
            .map(|a| {
                let s = UdpSocket::bind(SocketAddr::new(IpAddr::V4(*a), 0)).unwrap();
                s.connect(server).unwrap();
                s.set_nonblocking(true).unwrap();
                s
            })
            .collect();
        let mut back = vec![Vec::new(); socks.len()];
        let mut buf = [0u8; 64];
        let mut drain = |back: &mut Vec<Vec<u32>>| {
            for (k, s) in socks.iter().enumerate() {
                while let Ok(len) = s.recv(&mut buf) {
                    if len == 5 {
                        back[k].push(u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]));
                    }
                }
            }
        };
        for seq in 0..PER_SUB {
            for (k, s) in socks.iter().enumerate() {
                let mut m = [k as u8, 0, 0, 0, 0];
                m[1..].copy_from_slice(&seq.to_be_bytes());
                let _ = s.send(&m);
            }
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

fn two_workers(io: &str) {
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
        if io == "mmap" { "m" } else { "s" },
        &subs,
        Ipv4Addr::new(10, 77, 0, 200),
    );
    let dir = std::env::temp_dir().join(format!("{}-box", lab.r()));
    std::fs::create_dir_all(&dir).unwrap();
    let (boxp, final_json) = start_box(&lab, &dir, io);
    let (got, back) = traffic(&lab, &subs);
    // A reload reaches every worker (the supervisor reads the file once).
    let cfg = dir.join("box.toml");
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{text}[to_b]\nqdisc = {{ kind = \"fifo\", limit = \"500p\" }}\n"),
    )
    .unwrap();
    boxp.signal(nix::sys::signal::Signal::SIGHUP);
    std::thread::sleep(Duration::from_millis(300));
    boxp.stop();
    let stats: Value =
        serde_json::from_str(&std::fs::read_to_string(&final_json).unwrap()).unwrap();
    let _ = std::fs::remove_dir_all(&dir);
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
}

#[test]
fn two_workers_socket_io() {
    two_workers("socket");
}

#[test]
fn two_workers_mmap_io() {
    two_workers("mmap");
}
