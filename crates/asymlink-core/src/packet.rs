//! What a queue discipline, classifier or rewriter may ask of a packet: the [`Pkt`] trait.
//!
//! The simulator implements it for its compact packets (headers only, no bytes); the live
//! box for a byte buffer parsed once on arrival. Mutators keep the two views consistent:
//! the live implementation edits the bytes in place with incremental checksum updates.

use crate::ack::AckSeg;
use crate::wire::{Ecn, Headers, TcpFlags, Transport};

/// A class assigned by a classifier (an index into the class table of a configuration).
/// [`ClassId::NONE`] means "not classified".
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug, Default)]
pub struct ClassId(pub u16);

impl ClassId {
    /// Not classified.
    pub const NONE: ClassId = ClassId(u16::MAX);
    /// Whether a class was assigned.
    pub fn is_some(self) -> bool {
        self != ClassId::NONE
    }
}

/// Who a packet belongs to, as a packet that knows it without its headers tells the
/// flow-queueing disciplines ([`Pkt::flow_ids`]), so that they need not read the headers
/// to find its queue.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowIds {
    /// The flow: equal for the packets of one 5-tuple (addresses, ports, protocol) and
    /// different for packets of different 5-tuples.
    pub flow: u64,
    /// The source host: equal for the packets of one source address, different for
    /// different source addresses.
    pub src: u64,
    /// The destination host, as `src`.
    pub dst: u64,
}

/// The header fields, besides addresses and ports, that classifiers and markers read
/// ([`Pkt::fields`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fields {
    /// The IP protocol number ([`Headers::protocol`]).
    pub proto: u8,
    /// Whether the transport header is TCP's (`flags` is meaningful).
    pub tcp: bool,
    /// The IP DSCP.
    pub dscp: u8,
    /// The IP ECN field.
    pub ecn: Ecn,
    /// The TCP flags (none if not TCP).
    pub flags: TcpFlags,
    /// [`Headers::payload_len`].
    pub payload_len: u32,
}

impl Fields {
    /// The fields of `h`.
    #[inline]
    pub fn of(h: &Headers) -> Fields {
        let (tcp, flags) = match &h.transport {
            Transport::Tcp(t) => (true, t.flags),
            _ => (false, TcpFlags(0)),
        };
        Fields {
            proto: h.protocol(),
            tcp,
            dscp: h.ip.dscp,
            ecn: h.ip.ecn,
            flags,
            payload_len: h.payload_len,
        }
    }

    /// [`Headers::is_pure_ack`]: TCP, ACK set, no SYN, FIN or RST, no payload.
    #[inline]
    pub fn is_pure_ack(&self) -> bool {
        self.tcp
            && self.flags.contains(TcpFlags::ACK)
            && !self
                .flags
                .intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
            && self.payload_len == 0
    }
}

/// A packet as seen by the core.
pub trait Pkt {
    /// Length of the IP packet in bytes (what a raw-IP link carries).
    fn ip_len(&self) -> u32;
    /// The parsed headers, or `None` if the packet could not be parsed (such packets are
    /// never rewritten; disciplines treat them as opaque bulk traffic).
    fn headers(&self) -> Option<&Headers>;
    /// The class a classifier assigned ([`ClassId::NONE`] if none).
    fn class(&self) -> ClassId;
    /// Record the class a classifier assigned.
    fn set_class(&mut self, class: ClassId);
    /// Set the TCP window field (raw, before scaling). Returns false (and changes nothing)
    /// if not TCP, not parsed, or possibly signed
    /// ([`Headers::is_signed`](crate::wire::Headers::is_signed)).
    fn set_tcp_window(&mut self, window: u16) -> bool;
    /// Set the IP DSCP and ECN fields. Returns false if not parsed.
    fn set_dscp_ecn(&mut self, dscp: u8, ecn: Ecn) -> bool;
    /// The packet's flow and hosts if it knows them without reading its headers; `None`
    /// (the default) makes the flow-queueing disciplines hash the headers' addresses,
    /// ports and protocol instead. The values are hashed again with each discipline's
    /// perturbation, so they need only be distinct, not random-looking.
    #[inline]
    fn flow_ids(&self) -> Option<FlowIds> {
        None
    }
    /// The protocol, DSCP, ECN, TCP flags and payload length ([`Fields`]), or `None` if
    /// the packet could not be parsed. The default reads them from
    /// [`Pkt::headers`]; a packet that keeps its headers packed answers without
    /// unpacking them.
    #[inline]
    fn fields(&self) -> Option<Fields> {
        self.headers().map(Fields::of)
    }
    /// What ACK filtering reads of a TCP segment ([`AckSeg`]), or `None` if the packet is
    /// not a parsed TCP segment. The default reads it from [`Pkt::headers`], as
    /// [`Pkt::fields`].
    #[inline]
    fn ack_seg(&self) -> Option<AckSeg> {
        self.headers().and_then(AckSeg::of)
    }
}

/// A packet that is only headers: used by unit tests of disciplines and by the simulator's
/// packet type (which wraps it with tracing metadata).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeaderPacket {
    /// The headers.
    pub hdr: Headers,
    /// Assigned class.
    pub class: ClassId,
}

impl HeaderPacket {
    /// Wrap headers, unclassified.
    pub fn new(hdr: Headers) -> HeaderPacket {
        HeaderPacket {
            hdr,
            class: ClassId::NONE,
        }
    }
}

impl Pkt for HeaderPacket {
    fn ip_len(&self) -> u32 {
        self.hdr.ip_len()
    }
    fn headers(&self) -> Option<&Headers> {
        Some(&self.hdr)
    }
    fn class(&self) -> ClassId {
        self.class
    }
    fn set_class(&mut self, class: ClassId) {
        self.class = class;
    }
    fn set_tcp_window(&mut self, window: u16) -> bool {
        if self.hdr.is_signed() {
            return false;
        }
        match self.hdr.tcp_repr_mut() {
            Some(t) => {
                t.window = window;
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
}
