//! Shared harness of the scheduler tests (`htb.rs`, `hfsc.rs`, `adsl.rs`): classed test
//! packets and a backlogged link that drains a discipline on explicit time.
#![allow(dead_code)]

use asymlink_core::packet::{ClassId, HeaderPacket, Pkt};
use asymlink_core::qdisc::{BuildCtx, Dequeued, Drops, Qdisc, QdiscConfig};
use asymlink_core::time::Instant;
use asymlink_core::units::Rate;
use asymlink_core::wire::{Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr};
use core::net::{IpAddr, Ipv4Addr};

/// `t` milliseconds.
pub fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

/// A TCP packet of exactly `ip_len` bytes (a pure ACK when `ip_len` is 40) of class
/// `class`, tagged `tag` in its sequence number.
pub fn pkt(class: u16, ip_len: u32, tag: u32) -> HeaderPacket {
    let tcp = TcpRepr {
        src_port: 1000 + class,
        dst_port: 80,
        seq: SeqNumber(tag),
        ack: SeqNumber(0),
        flags: TcpFlags::ACK,
        window: 65535,
        urgent: 0,
        opts: TcpOptions::default(),
    };
    let mut p = HeaderPacket::new(Headers::tcp(
        IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ),
        tcp,
        ip_len.saturating_sub(40),
    ));
    p.set_class(ClassId(class));
    p
}

/// Build a discipline from TOML (`kind = ...`) with these classifier classes.
pub fn build(src: &str, classes: &[&str]) -> Box<dyn Qdisc<HeaderPacket>> {
    let cfg: QdiscConfig = toml::from_str(src).unwrap_or_else(|e| panic!("{e}"));
    cfg.build(&BuildCtx::with_classes(classes))
        .unwrap_or_else(|e| panic!("{e}"))
}

/// The error building `src` gives.
pub fn build_err(src: &str, classes: &[&str]) -> String {
    let cfg: QdiscConfig = match toml::from_str(src) {
        Ok(c) => c,
        Err(e) => return e.to_string(),
    };
    match cfg.build::<HeaderPacket>(&BuildCtx::with_classes(classes)) {
        Ok(_) => panic!("accepted: {src}"),
        Err(e) => e.to_string(),
    }
}

/// Assert the conservation identities.
#[track_caller]
pub fn check(q: &dyn Qdisc<HeaderPacket>) {
    if let Err(e) = q.stats().check(q.backlog()) {
        panic!("{} conservation violated: {e}", q.kind());
    }
}

/// One transmission.
#[derive(Clone, Copy, Debug)]
pub struct Sent {
    /// When it left the discipline.
    pub at: Instant,
    /// Its class.
    pub class: u16,
    /// IP length.
    pub len: u32,
}

/// Drain `q` onto a link of rate `link` (IP bytes) from `from` to `until`. `sources`
/// lists (class, packet size, active from, active until): an active source keeps
/// `depth` packets queued (a greedy sender). Conservation is checked after every step.
pub fn serve(
    q: &mut dyn Qdisc<HeaderPacket>,
    link: Rate,
    until: Instant,
    sources: &[(u16, u32, Instant, Instant)],
    depth: u32,
) -> Vec<Sent> {
    let mut d = Drops::new();
    let mut queued = vec![0u32; sources.len()];
    let mut tag = 0u32;
    let mut out = Vec::new();
    let mut t = Instant::ZERO;
    while t < until {
        for (i, &(class, len, on, off)) in sources.iter().enumerate() {
            if on <= t && t < off {
                while queued[i] < depth {
                    tag += 1;
                    q.enqueue(t, pkt(class, len, tag), &mut d);
                    queued[i] += 1;
                }
            }
        }
        check(q);
        // The next source switch-on, so an idle link wakes up for it.
        let next_on = sources
            .iter()
            .filter(|s| s.2 > t)
            .map(|s| s.2)
            .min()
            .unwrap_or(until);
        match q.dequeue(t, &mut d) {
            Dequeued::Packet(p) => {
                let class = p.class().0;
                let i = sources.iter().position(|s| s.0 == class).unwrap();
                queued[i] -= 1;
                out.push(Sent {
                    at: t,
                    class,
                    len: p.ip_len(),
                });
                t = Instant(t.0 + link.tx_nanos(p.ip_len() as u64));
            }
            Dequeued::NotBefore(x) => {
                assert!(x > t, "NotBefore({x:?}) at {t:?} is not in the future");
                t = x.min(next_on);
            }
            Dequeued::Empty => t = next_on,
        }
        check(q);
    }
    assert!(d.is_empty(), "unexpected drops: {}", d.len());
    out
}

/// Bit/s of class `class` sent in [from, to).
pub fn rate_of(sent: &[Sent], class: u16, from: Instant, to: Instant) -> f64 {
    let bytes: u64 = sent
        .iter()
        .filter(|s| s.class == class && s.at >= from && s.at < to)
        .map(|s| s.len as u64)
        .sum();
    bytes as f64 * 8.0 / (to - from).as_secs_f64()
}

/// Assert `measured` is within `tol` (relative) of `expected`.
#[track_caller]
pub fn close(what: &str, measured: f64, expected: f64, tol: f64) {
    assert!(
        (measured - expected).abs() <= tol * expected.abs(),
        "{what}: measured {measured:.0}, expected {expected:.0} (±{:.1} %)",
        tol * 100.0
    );
}
