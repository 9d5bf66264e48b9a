//! The simulator's packet: compact headers plus bookkeeping that real packets do not carry.

use asymlink_core::ack::AckSeg;
use asymlink_core::link::OnWire;
use asymlink_core::packet::{ClassId, Fields, FlowIds, Pkt};
use asymlink_core::time::Instant;
use asymlink_core::wire::{
    Ecn, Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Timestamp, Transport,
};
use std::net::IpAddr;

/// Index of a node in the simulation.
pub type NodeId = u32;
/// Index of a TCP connection endpoint in the simulation.
pub type ConnId = u32;
/// "No connection".
pub const NO_CONN: ConnId = u32::MAX;

/// The header fields every hop reads (the trace hash, the pure-ACK count), kept in the
/// packet itself so that a hop does not touch the out-of-line headers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HopFields {
    /// TCP: the sequence number; UDP: the source port; otherwise the protocol number.
    pub seq: u32,
    /// TCP: the acknowledgment number; UDP: the destination port; otherwise 0.
    pub ack: u32,
    /// TCP flags (none if not TCP).
    pub flags: u16,
    /// TCP window field, raw (0 if not TCP).
    pub window: u16,
    /// `Headers::payload_len`.
    pub payload_len: u32,
}

impl HopFields {
    /// The fields of `h`.
    #[inline]
    pub fn of(h: &Headers) -> HopFields {
        let (seq, ack, flags, window) = match &h.transport {
            Transport::Tcp(t) => (t.seq.0, t.ack.0, t.flags.0, t.window),
            Transport::Udp(u) => (u.src_port as u32, u.dst_port as u32, 0, 0),
            Transport::Other(x) => (*x as u32, 0, 0, 0),
        };
        HopFields {
            seq,
            ack,
            flags,
            window,
            payload_len: h.payload_len,
        }
    }

    /// `Headers::is_pure_ack`: TCP with ACK set, no SYN, FIN or RST, no payload (a packet
    /// that is not TCP has no flags).
    #[inline]
    pub fn is_pure_ack(&self) -> bool {
        let f = TcpFlags(self.flags);
        f.contains(TcpFlags::ACK)
            && !f.intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
            && self.payload_len == 0
    }
}

/// The addresses and ports of a TCP connection endpoint, as its segments carry them
/// (local: source, remote: destination).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnAddrs {
    /// The endpoint's own address and port.
    pub local: (IpAddr, u16),
    /// The other endpoint's address and port.
    pub remote: (IpAddr, u16),
}

/// A packet in flight in the simulator. Only the headers are "on the wire"; the rest is
/// the simulator's bookkeeping (routing shortcut, demultiplexing shortcut, tracing).
///
/// The headers (addresses, TCP options with their SACK blocks: 136 bytes) live out of
/// line, and the few fields every hop reads are copied into the packet ([`HopFields`]),
/// so the packet is 64 bytes, one cache line: that is what queues and delay lines hold and
/// move, and what a hop reads. The headers are read where a packet is classified,
/// rewritten or received. The engine reuses the header boxes of delivered and dropped
/// packets for new ones.
///
/// The common TCP segment has no header box at all (a *compact* packet): with no
/// option but timestamps and the IP fields a connection always sends, its headers are
/// the per-hop fields, the sending connection's addresses ([`ConnAddrs`]), and the IP
/// identification, DSCP, ECN and timestamps, kept in `tag` (which TCP does not use) and
/// `ts_gap_hi` (see [`SimPacket::compact`]). [`SimPacket::headers_with`] rebuilds them;
/// a compact packet answers [`Pkt::fields`], [`Pkt::flow_ids`] and the two rewrites
/// itself, and the engine gives it its box ([`SimPacket::materialise`]) before anything
/// that reads headers beyond those sees it, so only the receiving host rebuilds them, on
/// its stack.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimPacket {
    /// The headers (payload bytes are not simulated, only their count); `None`: a compact
    /// packet. Private: the copy in `hop` must follow every change (only the [`Pkt`]
    /// mutators change them).
    hdr: Option<Box<Headers>>,
    /// When it was offered to the egress of the link direction it waits for (ns): its
    /// sojourn time there is measured when its transmission starts. On a delay line,
    /// from then until it arrives, the field holds its arrival time instead ([`OnWire`]).
    pub queued_at: u64,
    /// Application data the simulator does not carry as bytes (e.g. a probe's send time);
    /// a compact packet's IP identification (bits 0–15), DSCP and ECN (16–23), the low
    /// byte of its timestamp gap (24–31, see [`SimPacket::compact`]) and TSval (32–63).
    pub tag: u64,
    /// The header fields every hop reads.
    hop: HopFields,
    /// `hdr.ip_len()`, computed once (every discipline and link asks for it).
    pub len: u32,
    /// Destination node (routing uses it instead of looking up the address).
    pub dst_node: NodeId,
    /// Source node.
    pub src_node: NodeId,
    /// The receiving connection endpoint if known (demultiplexing shortcut).
    pub dst_conn: ConnId,
    /// The sending connection endpoint (for per-flow monitors), or [`NO_CONN`].
    pub src_conn: ConnId,
    /// Class assigned by a classifier on the current hop.
    pub class: ClassId,
    /// The kind of transport header: [`SimPacket::TCP`], [`SimPacket::UDP`] or
    /// [`SimPacket::OTHER`] (per-protocol statistics read it on every hop).
    proto: u8,
    /// A compact packet's timestamp gap, high byte (see [`SimPacket::compact`]); else 0.
    ts_gap_hi: u8,
}

impl SimPacket {
    /// [`SimPacket::proto`] of a TCP packet.
    pub const TCP: u8 = 0;
    /// [`SimPacket::proto`] of a UDP packet.
    pub const UDP: u8 = 1;
    /// [`SimPacket::proto`] of any other packet.
    pub const OTHER: u8 = 2;

    /// A packet with the given headers and bookkeeping; the length and the per-hop
    /// fields are taken from `hdr`.
    pub fn new(
        hdr: Box<Headers>,
        src_node: NodeId,
        dst_node: NodeId,
        src_conn: ConnId,
        dst_conn: ConnId,
        tag: u64,
    ) -> SimPacket {
        SimPacket {
            len: hdr.ip_len(),
            hop: HopFields::of(&hdr),
            proto: match hdr.transport {
                Transport::Tcp(_) => SimPacket::TCP,
                Transport::Udp(_) => SimPacket::UDP,
                Transport::Other(_) => SimPacket::OTHER,
            },
            hdr: Some(hdr),
            class: ClassId::NONE,
            dst_node,
            src_node,
            dst_conn,
            src_conn,
            tag,
            queued_at: 0,
            ts_gap_hi: 0,
        }
    }

    /// A compact packet for the segment `h` of the connection whose addresses are `a`
    /// (see [`SimPacket`]), if the segment is a common one: TCP with no option but
    /// timestamps whose TSecr is at most 65 534 below TSval, no urgent pointer, the IP
    /// fields of `IpRepr::new` but for the identification, DSCP and ECN, and `a`'s
    /// addresses and ports. `None` otherwise.
    ///
    /// The timestamps take 48 bits: TSval, and the *gap* `TSval − TSecr + 1` (wrapping;
    /// 0: no timestamp option) in 16. TSecr echoes the peer's clock, which in the
    /// simulator is the same millisecond clock as TSval's, read when the peer sent the
    /// echoed segment (a round trip or an idle period earlier), so the gap is small.
    #[inline]
    pub fn compact(
        h: &Headers,
        a: &ConnAddrs,
        src_node: NodeId,
        dst_node: NodeId,
        src_conn: ConnId,
        dst_conn: ConnId,
    ) -> Option<SimPacket> {
        let (tag, ts_gap_hi) = compact_fields(h, a)?;
        // A common segment's IP length: the IP and TCP headers, timestamps (12 bytes with
        // their padding, the segment's only option) and the payload.
        let ts = ts_gap_hi != 0 || tag >> 24 & 0xff != 0;
        let headers = if h.ip.src.is_ipv4() { 40 } else { 60 } + if ts { 12 } else { 0 };
        let p = SimPacket {
            len: (headers as u32).saturating_add(h.payload_len),
            hop: HopFields::of(h),
            proto: SimPacket::TCP,
            hdr: None,
            class: ClassId::NONE,
            dst_node,
            src_node,
            dst_conn,
            src_conn,
            tag,
            queued_at: 0,
            ts_gap_hi,
        };
        debug_assert_eq!(p.headers_with(a), *h);
        debug_assert_eq!(p.len, h.ip_len());
        Some(p)
    }

    /// Make a packet whose headers are a common segment of the connection whose
    /// addresses are `a` (see [`SimPacket::compact`]) compact again, everything else as
    /// it was; its header box is returned, for reuse. `None` (the packet unchanged)
    /// otherwise.
    #[inline]
    pub fn shed(&mut self, a: &ConnAddrs) -> Option<Box<Headers>> {
        if self.proto != SimPacket::TCP {
            return None;
        }
        let (tag, ts_gap_hi) = compact_fields(self.hdr.as_deref()?, a)?;
        self.tag = tag;
        self.ts_gap_hi = ts_gap_hi;
        let b = self.hdr.take();
        debug_assert_eq!(Some(self.headers_with(a)), b.as_deref().copied());
        b
    }

    /// Whether the packet is compact (no header box; see [`SimPacket`]).
    #[inline]
    pub fn is_compact(&self) -> bool {
        self.hdr.is_none()
    }

    /// The headers, given the sending connection's addresses (read only for a compact
    /// packet).
    #[inline]
    pub fn headers_with(&self, a: &ConnAddrs) -> Headers {
        if let Some(h) = &self.hdr {
            return **h;
        }
        let mut ip = IpRepr::new(a.local.0, a.remote.0);
        ip.ident = self.tag as u16;
        let tos = (self.tag >> 16) as u8;
        ip.dscp = tos >> 2;
        ip.ecn = Ecn::from_bits(tos);
        let opts = TcpOptions {
            timestamp: self.compact_timestamp(),
            ..TcpOptions::default()
        };
        let f = &self.hop;
        let t = TcpRepr {
            src_port: a.local.1,
            dst_port: a.remote.1,
            seq: SeqNumber(f.seq),
            ack: SeqNumber(f.ack),
            flags: TcpFlags(f.flags),
            window: f.window,
            urgent: 0,
            opts,
        };
        Headers::tcp(ip, t, f.payload_len)
    }

    /// A compact packet's timestamps option (see [`SimPacket::compact`]).
    #[inline]
    fn compact_timestamp(&self) -> Option<Timestamp> {
        let gap = u32::from(self.ts_gap_hi) << 8 | (self.tag >> 24) as u32 & 0xff;
        (gap != 0).then(|| {
            let val = (self.tag >> 32) as u32;
            Timestamp {
                val,
                ecr: val.wrapping_sub(gap - 1),
            }
        })
    }

    /// Give a compact packet its header box `b`, holding the headers
    /// [`SimPacket::headers_with`] rebuilds: from then on it is a packet like any other.
    pub fn materialise(&mut self, b: Box<Headers>) {
        debug_assert!(self.hdr.is_none());
        self.hdr = Some(b);
        self.tag = 0;
        self.ts_gap_hi = 0;
    }

    /// The headers of a packet that is not compact.
    ///
    /// # Panics
    /// On a compact packet (the engine gives it a box before anything reads them).
    #[inline]
    pub fn hdr(&self) -> &Headers {
        self.hdr
            .as_deref()
            .expect("a compact packet's headers are read")
    }

    /// The header fields every hop reads (equal to those of [`SimPacket::hdr`]).
    #[inline]
    pub fn hop(&self) -> &HopFields {
        &self.hop
    }

    /// The kind of transport header ([`SimPacket::TCP`], [`SimPacket::UDP`],
    /// [`SimPacket::OTHER`]).
    #[inline]
    pub fn proto(&self) -> u8 {
        self.proto
    }

    /// The header box, for reuse once the packet is gone (`None`: a compact packet).
    #[inline]
    pub fn into_hdr(self) -> Option<Box<Headers>> {
        self.hdr
    }
}

/// A compact packet's `tag` and `ts_gap_hi` for the headers `h` of the connection whose
/// addresses are `a`, if they are a common segment's ([`SimPacket::compact`]).
#[inline]
fn compact_fields(h: &Headers, a: &ConnAddrs) -> Option<(u64, u8)> {
    let Transport::Tcp(t) = &h.transport else {
        return None;
    };
    let o = &t.opts;
    let ip = &h.ip;
    let (ts_val, gap) = match o.timestamp {
        None => (0, 0),
        Some(ts) => (ts.val, ts.val.wrapping_sub(ts.ecr).wrapping_add(1)),
    };
    let common = t.urgent == 0
        && o.mss.is_none()
        && o.wscale.is_none()
        && !o.sack_permitted
        && (o.timestamp.is_none() || (1..=0xffff).contains(&gap))
        && o.sack.is_empty()
        && !o.other
        && !o.signed
        && ip.dscp < 64
        && ip.ttl == 64
        && ip.dont_frag == ip.src.is_ipv4()
        && ip.flow_label == 0
        && !ip.extensions
        && !ip.auth
        && (t.src_port, t.dst_port) == (a.local.1, a.remote.1)
        && (ip.src, ip.dst) == (a.local.0, a.remote.0);
    common.then_some((
        u64::from(ip.ident)
            | u64::from(ip.dscp << 2 | ip.ecn.bits()) << 16
            | u64::from(gap as u8) << 24
            | u64::from(ts_val) << 32,
        (gap >> 8) as u8,
    ))
}

const _: () = assert!(core::mem::size_of::<SimPacket>() <= 64);

/// A delay line's entry: the packet, with its arrival time in `queued_at` (the sojourn
/// it measures ends when the transmission starts, before the packet goes onto the line),
/// aligned so that each entry is one cache line.
#[derive(Debug)]
#[repr(align(64))]
pub struct OnLine(SimPacket);

const _: () = assert!(core::mem::size_of::<OnLine>() == 64);

impl OnWire for SimPacket {
    type Entry = OnLine;
    #[inline]
    fn to_wire(mut self, at: Instant) -> OnLine {
        self.queued_at = at.as_nanos();
        OnLine(self)
    }
    #[inline]
    fn arrival(e: &OnLine) -> Instant {
        Instant(e.0.queued_at)
    }
    #[inline]
    fn off_wire(e: OnLine) -> SimPacket {
        e.0
    }
    #[inline]
    fn waiting(self) -> OnLine {
        OnLine(self)
    }
    #[inline]
    fn pkt(e: &OnLine) -> &SimPacket {
        &e.0
    }
    #[inline]
    fn depart(e: &mut OnLine, at: Instant) {
        e.0.queued_at = at.as_nanos();
    }
}

impl Pkt for SimPacket {
    #[inline]
    fn ip_len(&self) -> u32 {
        self.len
    }
    #[inline]
    fn headers(&self) -> Option<&Headers> {
        Some(self.hdr())
    }
    #[inline]
    fn class(&self) -> ClassId {
        self.class
    }
    #[inline]
    fn set_class(&mut self, class: ClassId) {
        self.class = class;
    }
    fn set_tcp_window(&mut self, window: u16) -> bool {
        let Some(hdr) = self.hdr.as_mut() else {
            // A compact segment's window is its per-hop field (it is never signed).
            self.hop.window = window;
            return true;
        };
        match hdr.tcp_repr_mut() {
            Some(t) => {
                t.window = window;
                self.hop.window = window;
                true
            }
            None => false,
        }
    }
    fn set_dscp_ecn(&mut self, dscp: u8, ecn: Ecn) -> bool {
        let Some(hdr) = self.hdr.as_mut() else {
            // A compact packet's DSCP and ECN are bits 16-23 of its tag.
            let tos = u64::from((dscp & 0x3f) << 2 | ecn.bits());
            self.tag = self.tag & !(0xff << 16) | tos << 16;
            return true;
        };
        hdr.ip.dscp = dscp;
        hdr.ip.ecn = ecn;
        true
    }
    /// A compact packet's from the packet itself (a TCP segment; DSCP and ECN in its
    /// tag); another's from its headers.
    #[inline]
    fn fields(&self) -> Option<Fields> {
        let Some(h) = &self.hdr else {
            let tos = (self.tag >> 16) as u8;
            return Some(Fields {
                proto: asymlink_core::wire::proto::TCP,
                tcp: true,
                dscp: tos >> 2,
                ecn: Ecn::from_bits(tos),
                flags: TcpFlags(self.hop.flags),
                payload_len: self.hop.payload_len,
            });
        };
        Some(Fields::of(h))
    }
    /// A compact packet's from the packet itself (no option but timestamps, never
    /// signed); another's from its headers.
    #[inline]
    fn ack_seg(&self) -> Option<AckSeg> {
        let Some(h) = &self.hdr else {
            let f = &self.hop;
            return Some(AckSeg {
                ack: SeqNumber(f.ack),
                window: f.window,
                flags: TcpFlags(f.flags),
                payload_len: f.payload_len,
                signed: false,
                ip_extensions: false,
                other_options: false,
                wscale: None,
                sack: Default::default(),
                timestamp: self.compact_timestamp(),
            });
        };
        AckSeg::of(h)
    }
    /// From the packet itself, not its headers: a host is its node (a host has one
    /// address), a TCP flow its sending connection endpoint (one 5-tuple for its whole
    /// life), any other flow its nodes, ports ([`HopFields`]) and protocol.
    #[inline]
    fn flow_ids(&self) -> Option<FlowIds> {
        let flow = if self.proto == SimPacket::TCP {
            u64::from(self.src_conn)
        } else {
            let mut s = (u64::from(self.src_node) << 32) | u64::from(self.dst_node);
            let h = asymlink_core::rand::splitmix64(&mut s);
            let mut s = h ^ (u64::from(self.hop.seq) << 32 | u64::from(self.hop.ack));
            // Above every connection id, so never a TCP flow's.
            asymlink_core::rand::splitmix64(&mut s) | (u64::from(self.proto) + 1) << 56
        };
        Some(FlowIds {
            flow,
            src: u64::from(self.src_node),
            dst: u64::from(self.dst_node),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use asymlink_core::wire::UdpRepr;

    fn tcp(flags: TcpFlags, payload_len: u32) -> Headers {
        Headers {
            ip: IpRepr::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into()),
            transport: Transport::Tcp(TcpRepr {
                src_port: 40_001,
                dst_port: 80,
                seq: SeqNumber(0xdead_beef),
                ack: SeqNumber(0x0123_4567),
                flags,
                window: 512,
                urgent: 0,
                opts: TcpOptions::default(),
            }),
            payload_len,
        }
    }

    #[test]
    fn hop_fields_follow_the_headers() {
        for (flags, len) in [
            (TcpFlags::ACK, 0),
            (TcpFlags::ACK, 1448),
            (TcpFlags::ACK | TcpFlags::FIN, 0),
            (TcpFlags::SYN, 0),
            (TcpFlags::SYN | TcpFlags::ACK, 0),
            (TcpFlags::RST | TcpFlags::ACK, 0),
            (TcpFlags::ACK | TcpFlags::PSH | TcpFlags::ECE, 0),
        ] {
            let h = tcp(flags, len);
            let p = SimPacket::new(Box::new(h), 0, 1, 2, 3, 0);
            assert_eq!(p.hop().is_pure_ack(), h.is_pure_ack(), "{flags:?} {len}");
            assert_eq!(p.hop().seq, 0xdead_beef);
            assert_eq!(p.hop().ack, 0x0123_4567);
            assert_eq!(p.hop().flags, flags.0);
            assert_eq!(p.hop().payload_len, len);
            assert_eq!(p.proto(), SimPacket::TCP);
        }
        let u = Headers {
            ip: IpRepr::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into()),
            transport: Transport::Udp(UdpRepr {
                src_port: 5000,
                dst_port: 6000,
            }),
            payload_len: 100,
        };
        let p = SimPacket::new(Box::new(u), 0, 1, NO_CONN, NO_CONN, 7);
        assert!(!p.hop().is_pure_ack());
        assert_eq!(p.proto(), SimPacket::UDP);
        assert_eq!((p.hop().seq, p.hop().ack, p.hop().flags), (5000, 6000, 0));
    }

    #[test]
    fn flow_ids_name_the_connection_the_nodes_and_the_ports() {
        let ids = |p: &SimPacket| p.flow_ids().unwrap();
        // One connection endpoint: every segment, whatever its flags and length.
        let a = SimPacket::new(Box::new(tcp(TcpFlags::SYN, 0)), 4, 9, 12, NO_CONN, 0);
        let b = SimPacket::new(Box::new(tcp(TcpFlags::ACK, 1448)), 4, 9, 12, 30, 0);
        assert_eq!(ids(&a), ids(&b));
        assert_eq!((ids(&a).src, ids(&a).dst), (4, 9));
        // Its peer's segments, and another connection's, are other flows.
        let peer = SimPacket::new(Box::new(tcp(TcpFlags::ACK, 0)), 9, 4, 30, 12, 0);
        let other = SimPacket::new(Box::new(tcp(TcpFlags::ACK, 0)), 4, 9, 13, 31, 0);
        assert_ne!(ids(&peer).flow, ids(&a).flow);
        assert_ne!(ids(&other).flow, ids(&a).flow);
        // UDP: the nodes and both ports.
        let udp = |from: NodeId, to: NodeId, sp: u16, dp: u16| {
            let h = Headers {
                ip: IpRepr::new([10, 0, 0, 1].into(), [10, 0, 0, 2].into()),
                transport: Transport::Udp(UdpRepr {
                    src_port: sp,
                    dst_port: dp,
                }),
                payload_len: 100,
            };
            ids(&SimPacket::new(Box::new(h), from, to, NO_CONN, NO_CONN, 0)).flow
        };
        let u = udp(4, 9, 5000, 6000);
        assert_eq!(u, udp(4, 9, 5000, 6000));
        for v in [
            udp(5, 9, 5000, 6000),
            udp(4, 8, 5000, 6000),
            udp(4, 9, 5001, 6000),
        ] {
            assert_ne!(u, v);
        }
        assert_ne!(u, udp(4, 9, 5000, 6001));
        assert!(u > u64::from(u32::MAX), "never a connection's");
    }

    #[test]
    fn a_rewritten_window_is_seen_by_the_hop_fields() {
        let mut p = SimPacket::new(Box::new(tcp(TcpFlags::ACK, 0)), 0, 1, 2, 3, 0);
        assert!(p.set_tcp_window(77));
        assert_eq!(p.hop().window, 77);
        assert_eq!(p.hdr().tcp_repr().unwrap().window, 77);
        assert_eq!(*p.hop(), HopFields::of(p.hdr()));
        assert!(p.set_dscp_ecn(10, Ecn::Ce));
        assert_eq!(*p.hop(), HopFields::of(p.hdr()));
    }

    fn addrs() -> ConnAddrs {
        ConnAddrs {
            local: ([10, 0, 0, 1].into(), 40_001),
            remote: ([10, 0, 0, 2].into(), 80),
        }
    }

    #[test]
    fn a_common_segment_is_compact_and_rebuilt_exactly() {
        let mut h = tcp(TcpFlags::ACK | TcpFlags::PSH, 1448);
        h.ip.ident = 0xbeef;
        h.ip.dscp = 46;
        h.ip.ecn = Ecn::Ect0;
        let p = SimPacket::compact(&h, &addrs(), 0, 1, 2, 3).expect("compact");
        assert!(p.is_compact());
        assert_eq!(p.headers_with(&addrs()), h);
        assert_eq!(*p.hop(), HopFields::of(&h));
        assert_eq!(p.len, h.ip_len());
        assert_eq!(p.proto(), SimPacket::TCP);
        assert_eq!(
            (p.src_node, p.dst_node, p.src_conn, p.dst_conn),
            (0, 1, 2, 3)
        );
        // Another segment.
        let plain = tcp(TcpFlags::ACK, 0);
        let q = SimPacket::compact(&plain, &addrs(), 0, 1, 2, 3).expect("compact");
        assert_eq!(q.headers_with(&addrs()), plain);
        // Given its box, it is a packet like any other.
        let mut m = p.clone();
        m.materialise(Box::new(m.headers_with(&addrs())));
        assert!(!m.is_compact());
        assert_eq!(*m.hdr(), h);
        assert_eq!(m.proto(), SimPacket::TCP);
        assert!(m.set_tcp_window(9));
        assert_eq!(m.hdr().tcp_repr().unwrap().window, 9);
    }

    #[test]
    fn a_segment_with_timestamps_is_compact_and_rebuilt_exactly() {
        let a = addrs();
        for (val, ecr) in [
            (1, 0),
            (40_000, 39_980),
            (40_000, 40_000),
            (70_000, 70_000 - 65_534),
            (5, u32::MAX - 3),
            (u32::MAX, u32::MAX - 1000),
        ] {
            let mut h = tcp(TcpFlags::ACK, 1448);
            h.ip.ident = 0xffff;
            h.ip.dscp = 63;
            h.ip.ecn = Ecn::Ce;
            h.tcp_repr_mut().unwrap().opts.timestamp = Some(Timestamp { val, ecr });
            let h = Headers::tcp(h.ip, *h.tcp_repr().unwrap(), 1448);
            let p = SimPacket::compact(&h, &a, 0, 1, 2, 3).expect("compact");
            assert_eq!(p.headers_with(&a), h, "{val} {ecr}");
            assert_eq!(p.len, h.ip_len());
            assert_eq!(p.len, 20 + 32 + 1448);
            let mut m = p.clone();
            m.materialise(Box::new(m.headers_with(&a)));
            assert_eq!(*m.hdr(), h);
            assert_eq!((m.tag, m.ts_gap_hi), (0, 0));
            // And back: it sheds its box, keeping what a hop set.
            m.queued_at = 77;
            m.class = ClassId(3);
            assert_eq!(*m.shed(&a).expect("a common segment"), h);
            assert_eq!(m.headers_with(&a), h);
            assert_eq!((m.queued_at, m.class), (77, ClassId(3)));
            m.queued_at = 0;
            m.class = ClassId::NONE;
            assert_eq!(m, p);
            assert!(m.shed(&a).is_none(), "already compact");
        }
    }

    #[test]
    fn a_compact_packet_answers_fields_and_rewrites_without_a_box() {
        let a = addrs();
        let mut h = tcp(TcpFlags::ACK | TcpFlags::ECE, 1448);
        h.ip.dscp = 46;
        h.ip.ecn = Ecn::Ect0;
        h.tcp_repr_mut().unwrap().opts.timestamp = Some(Timestamp { val: 9, ecr: 8 });
        let h = Headers::tcp(h.ip, *h.tcp_repr().unwrap(), 1448);
        let mut p = SimPacket::compact(&h, &a, 0, 1, 2, 3).expect("compact");
        assert_eq!(p.fields(), Some(Fields::of(&h)));
        assert_eq!(p.ack_seg(), AckSeg::of(&h));
        let pure = tcp(TcpFlags::ACK, 0);
        let q = SimPacket::compact(&pure, &a, 0, 1, 2, 3).expect("compact");
        assert_eq!(q.ack_seg(), AckSeg::of(&pure));
        assert_eq!(q.ack_seg().unwrap().meta().removable, Ok(()));
        let mut boxed = SimPacket::new(Box::new(h), 0, 1, 2, 3, 0);
        assert_eq!(boxed.fields(), Some(Fields::of(&h)));
        // Marked CE and given a window, it stays compact and its headers say so.
        assert!(p.set_dscp_ecn(10, Ecn::Ce));
        assert!(p.set_tcp_window(77));
        assert!(p.is_compact());
        assert!(boxed.set_dscp_ecn(10, Ecn::Ce));
        assert!(boxed.set_tcp_window(77));
        assert_eq!(p.headers_with(&a), *boxed.hdr());
        assert_eq!(*p.hop(), *boxed.hop());
        assert_eq!(p.fields(), boxed.fields());
        let f = p.fields().unwrap();
        assert_eq!((f.dscp, f.ecn, f.proto, f.tcp), (10, Ecn::Ce, 6, true));
        // The box it sheds holds the same headers.
        let mut again = boxed.clone();
        assert!(again.shed(&a).is_some());
        assert_eq!(again.tag, p.tag);
    }

    #[test]
    fn a_compact_packets_length_is_the_ip_length_of_its_headers() {
        let v6 = ConnAddrs {
            local: ("2001:db8::1".parse().unwrap(), 40_001),
            remote: ("2001:db8::2".parse().unwrap(), 80),
        };
        for a in [addrs(), v6] {
            for ts in [None, Some(Timestamp { val: 9, ecr: 7 })] {
                for payload in [0, 1, 1448, u32::MAX - 30, u32::MAX] {
                    let mut ip = IpRepr::new(a.local.0, a.remote.0);
                    ip.ident = 3;
                    let mut t = *tcp(TcpFlags::ACK, 0).tcp_repr().unwrap();
                    t.opts.timestamp = ts;
                    let h = Headers::tcp(ip, t, payload);
                    let p = SimPacket::compact(&h, &a, 0, 1, 2, 3).expect("compact");
                    assert_eq!(p.len, h.ip_len(), "{:?} {ts:?} {payload}", a.local.0);
                    assert_eq!(p.headers_with(&a), h);
                }
            }
        }
    }

    #[test]
    fn only_common_segments_shed_their_box() {
        let a = addrs();
        let mut h = tcp(TcpFlags::ACK, 0);
        h.tcp_repr_mut().unwrap().window = 9;
        let mut p = SimPacket::new(Box::new(h), 0, 1, 2, 3, 0);
        assert!(p.shed(&a).is_some());
        assert_eq!(p.headers_with(&a), h);
        let mut other = a;
        other.local.1 += 1;
        let mut q = SimPacket::new(Box::new(h), 0, 1, 2, 3, 0);
        assert!(q.shed(&other).is_none());
        assert_eq!(*q.hdr(), h);
        h.ip.ttl = 63;
        let mut r = SimPacket::new(Box::new(h), 0, 1, 2, 3, 0);
        assert!(r.shed(&a).is_none());
        assert_eq!(*r.hdr(), h);
    }

    #[test]
    fn other_segments_keep_their_box() {
        let a = addrs();
        let base = tcp(TcpFlags::ACK, 0);
        assert!(SimPacket::compact(&base, &a, 0, 1, 2, 3).is_some());
        let mut cases: Vec<Headers> = Vec::new();
        let mut with = |f: &dyn Fn(&mut Headers)| {
            let mut h = base;
            f(&mut h);
            cases.push(h);
        };
        with(&|h| {
            h.tcp_repr_mut()
                .unwrap()
                .opts
                .sack
                .push(asymlink_core::wire::SackBlock {
                    left: SeqNumber(1),
                    right: SeqNumber(2),
                });
        });
        with(&|h| h.tcp_repr_mut().unwrap().opts.mss = Some(1460));
        with(&|h| h.tcp_repr_mut().unwrap().opts.wscale = Some(7));
        with(&|h| h.tcp_repr_mut().unwrap().opts.sack_permitted = true);
        with(&|h| h.tcp_repr_mut().unwrap().opts.other = true);
        // TSecr above TSval, or too far below it.
        for (val, ecr) in [(1, 2), (70_000, 70_000 - 65_535), (5, u32::MAX - 65_531)] {
            with(&move |h| h.tcp_repr_mut().unwrap().opts.timestamp = Some(Timestamp { val, ecr }));
        }
        with(&|h| {
            let t = h.tcp_repr_mut().unwrap();
            t.opts.timestamp = Some(Timestamp { val: 9, ecr: 8 });
            t.opts.sack.push(asymlink_core::wire::SackBlock {
                left: SeqNumber(1),
                right: SeqNumber(2),
            });
        });
        with(&|h| h.tcp_repr_mut().unwrap().urgent = 1);
        with(&|h| h.ip.ttl = 63);
        with(&|h| h.ip.dont_frag = false);
        with(&|h| h.ip.src = [10, 0, 0, 9].into());
        with(&|h| h.tcp_repr_mut().unwrap().dst_port = 81);
        with(&|h| {
            h.transport = Transport::Udp(UdpRepr {
                src_port: 40_001,
                dst_port: 80,
            })
        });
        for h in cases {
            assert!(SimPacket::compact(&h, &a, 0, 1, 2, 3).is_none(), "{h:?}");
        }
    }
}
