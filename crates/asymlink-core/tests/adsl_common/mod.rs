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
    /// When it was offered.
    pub queued_at: Instant,
    /// Its class.
    pub class: u16,
    /// IP length.
    pub len: u32,
}

impl Sent {
    /// Time spent in the discipline.
    pub fn delay_ms(&self) -> f64 {
        (self.at - self.queued_at).as_secs_f64() * 1e3
    }
}

/// A traffic source for [`serve_mixed`].
#[derive(Clone, Copy, Debug)]
pub struct Src {
    /// Class of its packets.
    pub class: u16,
    /// IP length of its packets.
    pub len: u32,
    /// Active from.
    pub on: Instant,
    /// Active until.
    pub off: Instant,
    /// `None`: greedy (keeps `depth` packets queued); `Some(ns)`: one packet every `ns`.
    pub every: Option<u64>,
}

/// Drain `q` onto a link of rate `link` (IP bytes) from 0 to `until`; `sources`:
/// (class, packet size, active from, active until), each greedy (keeps `depth` packets
/// queued). Conservation is checked after every step.
pub fn serve(
    q: &mut dyn Qdisc<HeaderPacket>,
    link: Rate,
    until: Instant,
    sources: &[(u16, u32, Instant, Instant)],
    depth: u32,
) -> Vec<Sent> {
    let srcs: Vec<Src> = sources
        .iter()
        .map(|&(class, len, on, off)| Src {
            class,
            len,
            on,
            off,
            every: None,
        })
        .collect();
    serve_mixed(q, link, until, &srcs, depth)
}

/// [`serve`] with greedy and periodic sources.
pub fn serve_mixed(
    q: &mut dyn Qdisc<HeaderPacket>,
    link: Rate,
    until: Instant,
    sources: &[Src],
    depth: u32,
) -> Vec<Sent> {
    let mut d = Drops::new();
    let mut queued = vec![0u32; sources.len()];
    let mut next_tick: Vec<Instant> = sources.iter().map(|s| s.on).collect();
    let mut tag = 0u32;
    let mut offered: std::collections::HashMap<u32, Instant> = Default::default();
    let mut out = Vec::new();
    let mut t = Instant::ZERO;
    // The link is busy until `free`; the discipline is asked when it is free.
    let mut free = Instant::ZERO;
    while t < until {
        for (i, s) in sources.iter().enumerate() {
            if !(s.on <= t && t < s.off) {
                continue;
            }
            match s.every {
                None => {
                    while queued[i] < depth {
                        tag += 1;
                        offered.insert(tag, t);
                        q.enqueue(t, pkt(s.class, s.len, tag), &mut d);
                        queued[i] += 1;
                    }
                }
                Some(ns) => {
                    while next_tick[i] <= t {
                        tag += 1;
                        offered.insert(tag, next_tick[i]);
                        q.enqueue(t, pkt(s.class, s.len, tag), &mut d);
                        queued[i] += 1;
                        next_tick[i] = Instant(next_tick[i].0 + ns);
                    }
                }
            }
        }
        check(q);
        // The next instant something may change without the discipline's say.
        let mut wake = until;
        for (i, s) in sources.iter().enumerate() {
            if s.on > t {
                wake = wake.min(s.on);
            }
            if s.every.is_some() && next_tick[i] > t && next_tick[i] < s.off {
                wake = wake.min(next_tick[i]);
            }
        }
        if t < free {
            t = free.min(wake);
            continue;
        }
        match q.dequeue(t, &mut d) {
            Dequeued::Packet(p) => {
                let class = p.class().0;
                let i = sources.iter().position(|s| s.class == class).unwrap();
                queued[i] -= 1;
                let tg = p.hdr.tcp_repr().unwrap().seq.0;
                out.push(Sent {
                    at: t,
                    queued_at: offered.remove(&tg).unwrap(),
                    class,
                    len: p.ip_len(),
                });
                free = Instant(t.0 + link.tx_nanos(p.ip_len() as u64));
                t = free.min(wake);
            }
            Dequeued::NotBefore(x) => {
                assert!(x > t, "NotBefore({x:?}) at {t:?} is not in the future");
                t = x.min(wake);
            }
            Dequeued::Empty => t = wake,
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
