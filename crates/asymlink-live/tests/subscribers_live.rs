//! Subscriber lines on real interfaces (root only; skipped otherwise): namespaces and
//! veth pairs of our own, removed afterwards.
//!
//! ```text
//!  ns C: c0 (three subscriber addresses) ══ ra ─┐ ns R: asymlink-box ┌─ rb ══ s0 :ns S
//! ```
//!
//! Three subscribers — two access lines (`line`, 2 and 8 Mbit/s down) and one explicit
//! token bucket (4 Mbit/s) — each receive UDP at about 20 Mbit/s from the server; the box
//! runs two workers. Each subscriber receives at its own rate. A reload then changes one
//! subscriber's rate; the other two keep their trees and their rates.

use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};

mod netns;
use netns::*;

const PAYLOAD: usize = 1000;

/// The box's configuration after its `[stats]` file: two workers, three subscribers.
fn subscribers(tbf_rate: &str) -> String {
    format!(
        "[process]\nworkers = 2\n\
         [[subscribers]]\nprefix = \"10.78.0.11\"\n\
         line = {{ down = \"2Mbit\", up = \"1Mbit\" }}\n\
         [[subscribers]]\nprefix = \"10.78.0.12\"\n\
         to_a = {{ qdisc = {{ kind = \"tbf\", rate = \"{tbf_rate}\", burst = \"3000B\", limit = \"100p\" }} }}\n\
         [[subscribers]]\nprefix = \"10.78.0.13\"\n\
         line = {{ down = \"8Mbit\", up = \"1Mbit\" }}\n"
    )
}

/// The server sends `PAYLOAD`-byte datagrams to each subscriber at about 20 Mbit/s for
/// `secs`, calling `on_mid` half-way; returns the arrivals in the client namespace
/// (seconds since the start, subscriber index).
fn blast(
    lab: &Lab,
    subs: &[Ipv4Addr],
    secs: f64,
    on_mid: impl FnOnce() + Send,
) -> Vec<(f64, usize)> {
    let c_ns = lab.c().to_string();
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let t0 = Instant::now();
    let rcv = std::thread::spawn(move || {
        enter(&c_ns);
        let sock = UdpSocket::bind("0.0.0.0:9000").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        bound_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(len) = sock.recv(&mut buf) {
            if len == PAYLOAD {
                got.push((t0.elapsed().as_secs_f64(), buf[0] as usize));
            }
        }
        got
    });
    bound_rx.recv().unwrap();
    let s_ns = lab.s().to_string();
    let dests: Vec<SocketAddr> = subs
        .iter()
        .map(|a| SocketAddr::new(IpAddr::V4(*a), 9000))
        .collect();
    std::thread::scope(|sc| {
        sc.spawn(move || {
            enter(&s_ns);
            let sock = UdpSocket::bind("10.78.0.200:0").unwrap();
            // 20 Mbit/s of payload: 2500 datagrams a second per subscriber.
            let mut sent = 0u64;
            let mut on_mid = Some(on_mid);
            loop {
                let t = t0.elapsed().as_secs_f64();
                if t >= secs {
                    break;
                }
                if t >= secs / 2.0 {
                    if let Some(f) = on_mid.take() {
                        f();
                    }
                }
                let due = (t * 2500.0) as u64;
                while sent < due {
                    for (k, d) in dests.iter().enumerate() {
                        let mut m = [0u8; PAYLOAD];
                        m[0] = k as u8;
                        let _ = sock.send_to(&m, d);
                    }
                    sent += 1;
                }
                std::thread::sleep(Duration::from_micros(500));
            }
        });
    });
    rcv.join().unwrap()
}

/// Mbit/s of IP packets (payload + 28 bytes) from subscriber `k` arriving in `[a, b)` s.
fn rate(got: &[(f64, usize)], k: usize, a: f64, b: f64) -> f64 {
    let n = got
        .iter()
        .filter(|(t, s)| *s == k && *t >= a && *t < b)
        .count();
    n as f64 * (PAYLOAD + 28) as f64 * 8.0 / (b - a) / 1e6
}

#[test]
fn each_subscriber_gets_its_own_rate() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let subs = [11u8, 12, 13].map(|h| Ipv4Addr::new(10, 78, 0, h));
    let lab = lab("als", "r", &subs, Ipv4Addr::new(10, 78, 0, 200));
    let files = BoxFiles::new(&lab, "", &subscribers("4Mbit"));
    let boxp = files.start(&lab);
    let got = blast(&lab, &subs, 6.0, || {
        files.write("", &subscribers("3Mbit"));
        boxp.signal(nix::sys::signal::Signal::SIGHUP);
    });
    boxp.stop();
    let stats = files.final_stats();
    // Before the reload (0.5-3 s) and after it (3.5-6 s).
    let before: Vec<f64> = (0..3).map(|k| rate(&got, k, 0.5, 3.0)).collect();
    let after: Vec<f64> = (0..3).map(|k| rate(&got, k, 3.5, 6.0)).collect();
    eprintln!("Mbit/s before {before:?}, after {after:?}");
    // The lines shape to 95 % of their downlink; the token bucket to its rate.
    for (k, want) in [(0, 1.9), (1, 4.0), (2, 7.6)] {
        let got = before[k];
        assert!(
            (got - want).abs() <= 0.1 * want,
            "subscriber {}: {got:.3} Mbit/s, expected {want}: {stats}",
            subs[k]
        );
    }
    for (k, want) in [(0, 1.9), (1, 3.0), (2, 7.6)] {
        let got = after[k];
        assert!(
            (got - want).abs() <= 0.1 * want,
            "after the reload, subscriber {}: {got:.3} Mbit/s, expected {want}",
            subs[k]
        );
    }
    let s = &stats["subscribers"];
    assert_eq!(stats["reloads"], 1, "{stats}");
    assert_eq!(s["configured"], 3, "{stats}");
    assert_eq!(
        s["created"], 4,
        "three trees, and the changed one again: {stats}"
    );
    assert_eq!(
        s["replaced"], 1,
        "only the changed subscriber's tree: {stats}"
    );
    assert_eq!(s["unplaced"], 0, "{stats}");
}

/// `max_subscribers` on real interfaces: four subscribers take turns datagram by datagram,
/// each waiting for its echo before the next sends, under a cap of two trees (one worker).
/// A subscriber without a tree gets one by evicting the tree idle longest (or, if both
/// trees still hold packets, crosses unshaped through the top-level pipeline,
/// `unplaced`): the live trees never exceed the cap, no datagram is reordered in either
/// direction, and the counters add up. (Sent in bursts instead, a box the scheduler wakes
/// late reads every subscriber's datagrams in one wake-up, both trees hold packets, and
/// the others cross unplaced without an eviction.)
#[test]
fn the_cap_bounds_the_live_trees() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    const PER_SUB: u32 = 200;
    let subs = [21u8, 22, 23, 24].map(|h| Ipv4Addr::new(10, 78, 0, h));
    let lab = lab("als", "m", &subs, Ipv4Addr::new(10, 78, 0, 200));
    let mut rest = String::from("[process]\nworkers = 1\n");
    for a in &subs {
        rest += &format!(
            "[[subscribers]]\nprefix = \"{a}\"\n\
             to_a = {{ qdisc = {{ kind = \"fifo\", limit = \"100p\" }} }}\n"
        );
    }
    let files = BoxFiles::new(&lab, "max_subscribers = 2\n", &rest);
    let boxp = files.start(&lab);
    let server: SocketAddr = "10.78.0.200:9000".parse().unwrap();
    let (got, back) = echo_datagrams_in_turn(&lab, &subs, server, PER_SUB);
    boxp.stop();
    let stats = files.final_stats();
    for (k, a) in subs.iter().enumerate() {
        assert!(in_order(&got[k]), "{a} → server reordered: {:?}", got[k]);
        assert!(in_order(&back[k]), "echoes to {a} reordered: {:?}", back[k]);
        assert!(
            got[k].len() as u32 > PER_SUB * 8 / 10 && back[k].len() as u32 > PER_SUB * 7 / 10,
            "{a}: {} datagrams, {} echoes of {PER_SUB}",
            got[k].len(),
            back[k].len()
        );
    }
    let s = &stats["subscribers"];
    let n = |k: &str| s[k].as_u64().unwrap_or_else(|| panic!("{k}: {stats}"));
    eprintln!("subscribers {s}");
    assert_eq!(n("max"), 2, "{stats}");
    assert!(n("live") <= 2, "{stats}");
    assert_eq!(n("expired") + n("replaced"), 0, "{stats}");
    assert_eq!(n("created") - n("evicted"), n("live"), "{stats}");
    // Four subscribers over two trees: every subscriber had one at some point.
    assert!(n("created") >= 4 && n("evicted") >= 2, "{stats}");
}
