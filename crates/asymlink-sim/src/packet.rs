//! The simulator's packet: compact headers plus bookkeeping that real packets do not carry.

use asymlink_core::packet::{ClassId, FlowIds, Pkt};
use asymlink_core::wire::{Ecn, Headers, TcpFlags, Transport};

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

/// A packet in flight in the simulator. Only the headers are "on the wire"; the rest is
/// the simulator's bookkeeping (routing shortcut, demultiplexing shortcut, tracing).
///
/// The headers (addresses, TCP options with their SACK blocks: 136 bytes) live out of
/// line, and the few fields every hop reads are copied into the packet ([`HopFields`]),
/// so the packet is 64 bytes, one cache line: that is what queues and delay lines hold and
/// move, and what a hop reads. The headers are read where a packet is classified,
/// rewritten or received. The engine reuses the header boxes of delivered and dropped
/// packets for new ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimPacket {
    /// The headers (payload bytes are not simulated, only their count). Private: the
    /// copy in `hop` must follow every change (only the [`Pkt`] mutators change them).
    hdr: Box<Headers>,
    /// When it was offered to the egress of the link direction it waits for (ns): its
    /// sojourn time there is measured when its transmission starts.
    pub queued_at: u64,
    /// Application data the simulator does not carry as bytes (e.g. a probe's send time).
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
            hdr,
            class: ClassId::NONE,
            dst_node,
            src_node,
            dst_conn,
            src_conn,
            tag,
            queued_at: 0,
        }
    }

    /// The headers.
    #[inline]
    pub fn hdr(&self) -> &Headers {
        &self.hdr
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

    /// The header box, for reuse once the packet is gone.
    #[inline]
    pub fn into_hdr(self) -> Box<Headers> {
        self.hdr
    }
}

const _: () = assert!(core::mem::size_of::<SimPacket>() <= 64);

impl Pkt for SimPacket {
    #[inline]
    fn ip_len(&self) -> u32 {
        self.len
    }
    #[inline]
    fn headers(&self) -> Option<&Headers> {
        Some(&*self.hdr)
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
        match self.hdr.tcp_repr_mut() {
            Some(t) => {
                t.window = window;
                self.hop.window = window;
                true
            }
            None => false,
        }
    }
    fn set_dscp_ecn(&mut self, dscp: u8, ecn: Ecn) -> bool {
        self.hdr.ip.dscp = dscp;
        self.hdr.ip.ecn = ecn;
        true
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
    use asymlink_core::wire::{IpRepr, SeqNumber, TcpOptions, TcpRepr, UdpRepr};

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
}
