//! Helpers for discipline tests: tiny packets tagged with an id, explicit time.

use super::{Dequeued, Drops, Qdisc};
use crate::packet::{ClassId, HeaderPacket, Pkt};
use crate::time::Instant;
use crate::wire::{Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Transport};
use core::net::{IpAddr, Ipv4Addr};

/// `t` milliseconds.
pub fn ms(t: u64) -> Instant {
    Instant::from_millis(t)
}

fn addr(n: u8) -> IpAddr {
    IpAddr::V4(Ipv4Addr::new(10, 0, 0, n))
}

/// A TCP data packet of exactly `ip_len` bytes, tagged `tag` (in its sequence number),
/// from port 1000 + flow.
pub fn data_flow(tag: u32, ip_len: u32, flow: u16) -> HeaderPacket {
    let tcp = TcpRepr {
        src_port: 1000 + flow,
        dst_port: 80,
        seq: SeqNumber(tag),
        ack: SeqNumber(0),
        flags: TcpFlags::ACK,
        window: 65535,
        urgent: 0,
        opts: TcpOptions::default(),
    };
    HeaderPacket::new(Headers {
        ip: IpRepr::new(addr(1), addr(2)),
        transport: Transport::Tcp(tcp),
        payload_len: ip_len.saturating_sub(40),
    })
}

/// A TCP data packet of exactly `ip_len` bytes tagged `tag`.
pub fn data(tag: u32, ip_len: u32) -> HeaderPacket {
    data_flow(tag, ip_len, 0)
}

/// The same with a class.
pub fn classed(tag: u32, ip_len: u32, class: u16) -> HeaderPacket {
    let mut p = data(tag, ip_len);
    p.set_class(ClassId(class));
    p
}

/// The tag of a test packet.
pub fn tag(p: &HeaderPacket) -> u32 {
    p.hdr.tcp_repr().map(|t| t.seq.0).unwrap_or(u32::MAX)
}

/// Dequeue everything available at `now`.
pub fn drain<Q: Qdisc<HeaderPacket>>(q: &mut Q, now: Instant) -> Vec<HeaderPacket> {
    let mut d = Drops::new();
    let mut out = Vec::new();
    while let Dequeued::Packet(p) = q.dequeue(now, &mut d) {
        out.push(p);
    }
    out
}

/// Assert the conservation identities.
#[track_caller]
pub fn check<P: Pkt, Q: Qdisc<P> + ?Sized>(q: &Q) {
    if let Err(e) = q.stats().check(q.backlog()) {
        panic!("{} conservation violated: {e}", q.kind());
    }
}
