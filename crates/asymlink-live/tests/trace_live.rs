//! A trace-driven emulated link on real interfaces (root only; skipped otherwise):
//! namespaces and veth pairs of our own, removed afterwards.
//!
//! ```text
//!  ns C: c0 ══ ra ─┐ ns R: asymlink-box, [emulation.to_b] trace ┌─ rb ══ s0 :ns S
//!                  └───────────────────────────────────────────┘
//! ```
//!
//! The client sends UDP datagrams toward the server at about twice the trace's rate for
//! a second; the server must receive them at the trace's rate (one 1500-byte opportunity
//! per millisecond: 12 Mbit/s of IP bytes). The box's loop wakes after each opportunity,
//! never exactly at it, which a fake clock does not show.

use std::net::{Ipv4Addr, UdpSocket};
use std::time::{Duration, Instant};

mod netns;
use netns::*;

const PAYLOAD: usize = 1400;

#[test]
fn box_trace_link_delivers_at_the_trace_rate() {
    if let Some(why) = skip_reason() {
        eprintln!("skipped: {why}");
        return;
    }
    let lab = lab(
        "al-tr",
        "",
        &[Ipv4Addr::new(10, 78, 0, 1)],
        Ipv4Addr::new(10, 78, 0, 2),
    );
    let (c, s) = (lab.c(), lab.s());
    let files = BoxFiles::new(
        &lab,
        "",
        "[to_b]\nqdisc = { kind = \"fifo\", limit = \"100p\" }\n\
         [emulation.to_b]\ntrace = \"t.trace\"\n",
    );
    std::fs::write(files.dir.join("t.trace"), "1\n").unwrap();
    let boxp = files.start(&lab);
    // The server: (arrival, bytes) of every datagram.
    let (bound_tx, bound_rx) = std::sync::mpsc::channel();
    let s_ns = s.to_string();
    let srv = std::thread::spawn(move || {
        enter(&s_ns);
        let sock = UdpSocket::bind("10.78.0.2:9000").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        bound_tx.send(()).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 2048];
        while let Ok(len) = sock.recv(&mut buf) {
            got.push((Instant::now(), len));
        }
        got
    });
    bound_rx.recv().unwrap();
    // The client: 8 datagrams every 4 ms for 1 s, about 23 Mbit/s of IP bytes.
    let c_ns = c.to_string();
    std::thread::spawn(move || {
        enter(&c_ns);
        let sock = UdpSocket::bind("10.78.0.1:0").unwrap();
        sock.connect("10.78.0.2:9000").unwrap();
        let start = Instant::now();
        let mut k = 0u32;
        while start.elapsed() < Duration::from_secs(1) {
            for _ in 0..8 {
                let _ = sock.send(&[0x5a; PAYLOAD]);
            }
            k += 1;
            let next = start + Duration::from_millis(4 * k as u64);
            std::thread::sleep(next.saturating_duration_since(Instant::now()));
        }
    })
    .join()
    .unwrap();
    let got = srv.join().unwrap();
    boxp.stop();
    let stats = std::fs::read_to_string(&files.final_json).unwrap_or_default();
    assert!(
        got.len() > 100,
        "{} datagrams arrived; box stats: {stats}",
        got.len()
    );
    // The rate over the arrivals after the first (which may have found an idle line).
    let span = got.last().unwrap().0 - got[0].0;
    let ip_bytes: usize = got[1..].iter().map(|g| g.1 + 28).sum();
    let mbps = ip_bytes as f64 * 8.0 / span.as_secs_f64() / 1e6;
    eprintln!("{mbps:.2} Mbit/s through a 12 Mbit/s trace");
    assert!(
        (10.0..13.0).contains(&mbps),
        "{mbps:.2} Mbit/s through a 12 Mbit/s trace ({} datagrams over {span:?})",
        got.len()
    );
}
