//! The simulator's packet: compact headers plus bookkeeping that real packets do not carry.

use asymlink_core::packet::{ClassId, Pkt};
use asymlink_core::wire::{Ecn, Headers};

/// Index of a node in the simulation.
pub type NodeId = u32;
/// Index of a TCP connection endpoint in the simulation.
pub type ConnId = u32;
/// "No connection".
pub const NO_CONN: ConnId = u32::MAX;

/// A packet in flight in the simulator. Only `hdr` is "on the wire"; the rest is the
/// simulator's bookkeeping (routing shortcut, demultiplexing shortcut, tracing).
///
/// The headers (addresses, TCP options with their SACK blocks: 136 bytes) live out of
/// line, so the packet itself is 56 bytes: that is what queues and delay lines hold and
/// move, and what their spare capacity costs. The engine reuses the header boxes of
/// delivered and dropped packets for new ones.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SimPacket {
    /// The headers (payload bytes are not simulated, only their count).
    pub hdr: Box<Headers>,
    /// Class assigned by a classifier on the current hop.
    pub class: ClassId,
    /// Destination node (routing uses it instead of looking up the address).
    pub dst_node: NodeId,
    /// Source node.
    pub src_node: NodeId,
    /// The receiving connection endpoint if known (demultiplexing shortcut).
    pub dst_conn: ConnId,
    /// The sending connection endpoint (for per-flow monitors), or [`NO_CONN`].
    pub src_conn: ConnId,
    /// Unique id of this packet (for traces).
    pub uid: u64,
    /// Application data the simulator does not carry as bytes (e.g. a probe's send time).
    pub tag: u64,
    /// `hdr.ip_len()`, computed once (every discipline and link asks for it).
    pub len: u32,
    /// When it was offered to the egress of the link direction it waits for (ns): its
    /// sojourn time there is measured when its transmission starts.
    pub queued_at: u64,
}

impl SimPacket {
    /// A packet with the given headers and bookkeeping; the length is cached from `hdr`.
    pub fn new(
        hdr: Box<Headers>,
        src_node: NodeId,
        dst_node: NodeId,
        src_conn: ConnId,
        dst_conn: ConnId,
        uid: u64,
        tag: u64,
    ) -> SimPacket {
        SimPacket {
            len: hdr.ip_len(),
            hdr,
            class: ClassId::NONE,
            dst_node,
            src_node,
            dst_conn,
            src_conn,
            uid,
            tag,
            queued_at: 0,
        }
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
