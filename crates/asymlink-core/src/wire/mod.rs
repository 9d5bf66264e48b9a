//! Packets on the wire: a compact, owned representation ([`Headers`]) that the simulator
//! passes around, conversion from bytes ([`Headers::parse`], zero-copy over the input,
//! built on `etherparse`) and back to bytes ([`Headers::emit`], byte-exact with checksums),
//! and in-place mutation of real packets with incremental checksum updates ([`mutate`]).
//!
//! The compact form keeps every field the mechanisms and the TCP models read: addresses,
//! DSCP/ECN, TTL, the TCP sequence space, flags, window and the options MSS, window scale,
//! SACK-permitted, SACK blocks and timestamps. It does not keep IPv4 options, IPv6
//! extension headers, unknown TCP options or payload bytes; the live box forwards the
//! original bytes, so nothing is lost there, and [`TcpOptions::other`] records that unknown
//! options were present (the ACK filter refuses to filter such ACKs).
//!
//! Round trips (tested in `tests/wire_props.rs` and `tests/wire_linux.rs`, fuzzed in
//! `fuzz/`):
//! * `parse(emit(h)) == h` for every valid `h`: both addresses of one family, `dscp` below
//!   64, IPv6 headers with `ident` 0 and `dont_frag` false, IPv4 headers with `flow_label`
//!   0, `opts.other`, `opts.signed`, `ip.extensions` and `ip.auth` false, options that fit ([`TcpRepr::options_len`] ≤ 40), and
//!   [`Transport::Other`] only for protocols that are neither TCP, UDP nor IP extension
//!   headers (a fragment parses as `Other(6)`, but emits as an unfragmented packet);
//! * `emit(parse(b)) == b` for packets in the canonical option layout that Linux emits
//!   (checked against real captures), and `parse(emit(parse(b))) == parse(b)` for every
//!   packet that parses without IPv4 options, IPv6 extension headers or unknown options.

mod emit;
pub mod mutate;
pub mod oracle;
mod parse;
mod seq;

pub use emit::EmitError;
pub use parse::{Layout, ParseError};
pub use seq::SeqNumber;

use core::fmt;
use core::net::IpAddr;

/// IP protocol numbers used here.
pub mod proto {
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMP.
    pub const ICMP: u8 = 1;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// IPv6 hop-by-hop options header.
    pub const IPV6_HOP_BY_HOP: u8 = 0;
}

/// The ECN field of the IP header (RFC 3168).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub enum Ecn {
    /// Not ECN-capable transport (00).
    #[default]
    NotEct,
    /// ECT(1) (01).
    Ect1,
    /// ECT(0) (10).
    Ect0,
    /// Congestion experienced (11).
    Ce,
}

impl Ecn {
    /// The two-bit field value.
    pub const fn bits(self) -> u8 {
        match self {
            Ecn::NotEct => 0,
            Ecn::Ect1 => 1,
            Ecn::Ect0 => 2,
            Ecn::Ce => 3,
        }
    }
    /// From the two-bit field value (upper bits ignored).
    pub const fn from_bits(b: u8) -> Ecn {
        match b & 3 {
            0 => Ecn::NotEct,
            1 => Ecn::Ect1,
            2 => Ecn::Ect0,
            _ => Ecn::Ce,
        }
    }
    /// Whether the transport is ECN-capable (ECT(0), ECT(1) or CE).
    pub const fn is_ect(self) -> bool {
        !matches!(self, Ecn::NotEct)
    }
}

/// TCP header flags: the 9 flag bits (NS included) and, above them, the 3 reserved bits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct TcpFlags(pub u16);

impl TcpFlags {
    /// FIN.
    pub const FIN: TcpFlags = TcpFlags(0x001);
    /// SYN.
    pub const SYN: TcpFlags = TcpFlags(0x002);
    /// RST.
    pub const RST: TcpFlags = TcpFlags(0x004);
    /// PSH.
    pub const PSH: TcpFlags = TcpFlags(0x008);
    /// ACK.
    pub const ACK: TcpFlags = TcpFlags(0x010);
    /// URG.
    pub const URG: TcpFlags = TcpFlags(0x020);
    /// ECN-Echo.
    pub const ECE: TcpFlags = TcpFlags(0x040);
    /// Congestion window reduced.
    pub const CWR: TcpFlags = TcpFlags(0x080);
    /// ECN nonce (historic, RFC 3540); AE in Accurate ECN.
    pub const NS: TcpFlags = TcpFlags(0x100);
    /// The three reserved bits of the header (RFC 9293 §3.1), kept as parsed.
    pub const RESERVED: TcpFlags = TcpFlags(0xE00);
    /// No flags.
    pub const NONE: TcpFlags = TcpFlags(0);

    /// Whether every flag of `other` is set.
    #[inline]
    pub const fn contains(self, other: TcpFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// Whether any flag of `other` is set.
    #[inline]
    pub const fn intersects(self, other: TcpFlags) -> bool {
        self.0 & other.0 != 0
    }
    /// Set or clear the flags of `other`.
    #[inline]
    pub fn set(&mut self, other: TcpFlags, on: bool) {
        if on {
            self.0 |= other.0
        } else {
            self.0 &= !other.0
        }
    }
}

impl core::ops::BitOr for TcpFlags {
    type Output = TcpFlags;
    fn bitor(self, o: TcpFlags) -> TcpFlags {
        TcpFlags(self.0 | o.0)
    }
}

impl fmt::Debug for TcpFlags {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        const NAMES: [(TcpFlags, &str); 10] = [
            (TcpFlags::SYN, "S"),
            (TcpFlags::FIN, "F"),
            (TcpFlags::RST, "R"),
            (TcpFlags::PSH, "P"),
            (TcpFlags::ACK, "."),
            (TcpFlags::URG, "U"),
            (TcpFlags::ECE, "E"),
            (TcpFlags::CWR, "W"),
            (TcpFlags::NS, "N"),
            (TcpFlags::RESERVED, "r"),
        ];
        f.write_str("[")?;
        for (flag, name) in NAMES {
            if self.intersects(flag) {
                f.write_str(name)?;
            }
        }
        f.write_str("]")
    }
}

/// A SACK block: the half-open sequence range [left, right) (RFC 2018).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct SackBlock {
    /// First sequence number of the block.
    pub left: SeqNumber,
    /// Sequence number just after the block.
    pub right: SeqNumber,
}

/// Up to four SACK blocks, inline (no allocation).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SackBlocks {
    len: u8,
    blocks: [(u32, u32); 4],
}

impl SackBlocks {
    /// The most blocks any TCP header can carry.
    pub const MAX: usize = 4;

    /// No blocks.
    pub const fn new() -> SackBlocks {
        SackBlocks {
            len: 0,
            blocks: [(0, 0); 4],
        }
    }
    /// Append a block; returns false (and changes nothing) when four are present.
    pub fn push(&mut self, b: SackBlock) -> bool {
        if (self.len as usize) < Self::MAX {
            self.blocks[self.len as usize] = (b.left.0, b.right.0);
            self.len += 1;
            true
        } else {
            false
        }
    }
    /// Number of blocks.
    pub fn len(&self) -> usize {
        self.len as usize
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Drop blocks beyond the first `n`.
    pub fn truncate(&mut self, n: usize) {
        self.len = self.len.min(n as u8);
    }
    /// The blocks, in header order (the first is the most recent, RFC 2018 §4).
    pub fn iter(&self) -> impl Iterator<Item = SackBlock> + '_ {
        self.blocks[..self.len as usize]
            .iter()
            .map(|&(l, r)| SackBlock {
                left: SeqNumber(l),
                right: SeqNumber(r),
            })
    }
}

impl fmt::Debug for SackBlocks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.iter().map(|b| (b.left.0, b.right.0)))
            .finish()
    }
}

/// The TCP timestamps option (RFC 7323).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Timestamp {
    /// TSval: the sender's clock.
    pub val: u32,
    /// TSecr: the echoed value.
    pub ecr: u32,
}

/// The TCP options asymlink understands.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug, Default)]
pub struct TcpOptions {
    /// Maximum segment size (SYN only).
    pub mss: Option<u16>,
    /// Window scale shift count (SYN only, RFC 7323 §2).
    pub wscale: Option<u8>,
    /// SACK permitted (SYN only, RFC 2018).
    pub sack_permitted: bool,
    /// Timestamps (RFC 7323 §3).
    pub timestamp: Option<Timestamp>,
    /// SACK blocks (RFC 2018).
    pub sack: SackBlocks,
    /// Options of other kinds were present, or a known kind with a length Linux ignores,
    /// or the list stopped early (parse only; they are not emitted).
    pub other: bool,
    /// The segment may be signed end to end: it carries a TCP-MD5 (RFC 2385, kind 19) or
    /// TCP-AO (RFC 5925, kind 29) option, or its option list could not be read to the end
    /// (an option with a length below 2 or running past the header ends it, as in Linux's
    /// `tcp_parse_options`), so a signature cannot be ruled out. Parse only; not emitted.
    /// See [`Headers::is_signed`].
    pub signed: bool,
}

/// A TCP header in compact form. The checksum is computed when emitting.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct TcpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Sequence number.
    pub seq: SeqNumber,
    /// Acknowledgment number (meaningful when the ACK flag is set).
    pub ack: SeqNumber,
    /// Flags.
    pub flags: TcpFlags,
    /// The window field as sent (before scaling).
    pub window: u16,
    /// Urgent pointer.
    pub urgent: u16,
    /// Options.
    pub opts: TcpOptions,
}

impl TcpRepr {
    /// Length of the options as [`Headers::emit`] lays them out (a multiple of 4; above 40
    /// when they cannot be emitted).
    pub fn options_len(&self) -> usize {
        emit::tcp_options_len(&self.opts)
    }
    /// Header length in bytes (20 + options).
    pub fn header_len(&self) -> usize {
        20 + self.options_len()
    }
}

/// A UDP header in compact form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
}

/// The transport layer of a packet.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Transport {
    /// TCP.
    Tcp(TcpRepr),
    /// UDP.
    Udp(UdpRepr),
    /// Anything else (ICMP, non-first fragments, ...): only the protocol number is known.
    Other(u8),
}

/// The network layer in compact form.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct IpRepr {
    /// Source address (v4 or v6; both addresses have the same family).
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Differentiated services code point (6 bits; [`Headers::emit`] ignores higher bits).
    pub dscp: u8,
    /// ECN field.
    pub ecn: Ecn,
    /// TTL / hop limit.
    pub ttl: u8,
    /// IPv4 identification (0 for IPv6).
    pub ident: u16,
    /// IPv4 don't-fragment flag (false for IPv6).
    pub dont_frag: bool,
    /// IPv6 flow label (0 for IPv4).
    pub flow_label: u32,
    /// IPv4 options or IPv6 extension headers precede the transport header (parse only;
    /// [`Headers::emit`] emits neither).
    pub extensions: bool,
    /// An IP Authentication Header (RFC 4302) precedes the transport header: the packet
    /// is signed (parse only; implies `extensions`).
    pub auth: bool,
}

impl IpRepr {
    /// A header with defaults (TTL 64, DF set for v4) between `src` and `dst`.
    pub fn new(src: IpAddr, dst: IpAddr) -> IpRepr {
        IpRepr {
            src,
            dst,
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: 64,
            ident: 0,
            dont_frag: src.is_ipv4(),
            flow_label: 0,
            extensions: false,
            auth: false,
        }
    }
    /// Header length when emitted (20 for IPv4, 40 for IPv6).
    pub fn header_len(&self) -> usize {
        if self.src.is_ipv4() {
            20
        } else {
            40
        }
    }
}

/// A whole packet's headers in compact form; the payload is only a length.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub struct Headers {
    /// Network layer.
    pub ip: IpRepr,
    /// Transport layer.
    pub transport: Transport,
    /// Bytes after the transport header (after the IP header for [`Transport::Other`]).
    pub payload_len: u32,
}

/// A connection's identity: addresses, ports and protocol, as seen in one direction.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Debug)]
pub struct FlowKey {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 for port-less protocols).
    pub src_port: u16,
    /// Destination port (0 for port-less protocols).
    pub dst_port: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl FlowKey {
    /// The same flow seen from the other direction.
    pub fn reversed(&self) -> FlowKey {
        FlowKey {
            src: self.dst,
            dst: self.src,
            src_port: self.dst_port,
            dst_port: self.src_port,
            proto: self.proto,
        }
    }
    /// A direction-independent key (the smaller of the key and its reverse), so both
    /// directions of a connection map to one entry.
    pub fn canonical(&self) -> FlowKey {
        let r = self.reversed();
        if r < *self {
            r
        } else {
            *self
        }
    }
    /// A 64-bit hash of the key that does not depend on the process (FNV-1a), for
    /// deterministic bucketing.
    pub fn stable_hash(&self) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let mut eat = |b: u8| {
            h ^= b as u64;
            h = h.wrapping_mul(0x0000_0100_0000_01B3);
        };
        for a in [self.src, self.dst] {
            match a {
                IpAddr::V4(v) => v.octets().iter().for_each(|&b| eat(b)),
                IpAddr::V6(v) => v.octets().iter().for_each(|&b| eat(b)),
            }
        }
        self.src_port.to_be_bytes().iter().for_each(|&b| eat(b));
        self.dst_port.to_be_bytes().iter().for_each(|&b| eat(b));
        eat(self.proto);
        h
    }
}

impl Headers {
    /// A TCP packet's headers.
    pub fn tcp(ip: IpRepr, tcp: TcpRepr, payload_len: u32) -> Headers {
        Headers {
            ip,
            transport: Transport::Tcp(tcp),
            payload_len,
        }
    }

    /// Total IP length in bytes as emitted (IP header + transport header + payload).
    pub fn ip_len(&self) -> u32 {
        let l4 = match &self.transport {
            Transport::Tcp(t) => t.header_len(),
            Transport::Udp(_) => 8,
            Transport::Other(_) => 0,
        };
        // Saturating: a `payload_len` near `u32::MAX` must give `EmitError::TooLong`, not
        // an overflow.
        ((self.ip.header_len() + l4) as u32).saturating_add(self.payload_len)
    }

    /// The TCP header, if this is TCP.
    #[inline]
    pub fn tcp_repr(&self) -> Option<&TcpRepr> {
        match &self.transport {
            Transport::Tcp(t) => Some(t),
            _ => None,
        }
    }

    /// Mutable TCP header, if this is TCP.
    #[inline]
    pub fn tcp_repr_mut(&mut self) -> Option<&mut TcpRepr> {
        match &mut self.transport {
            Transport::Tcp(t) => Some(t),
            _ => None,
        }
    }

    /// IP protocol number.
    pub fn protocol(&self) -> u8 {
        match self.transport {
            Transport::Tcp(_) => proto::TCP,
            Transport::Udp(_) => proto::UDP,
            Transport::Other(p) => p,
        }
    }

    /// The flow this packet belongs to, in its direction of travel.
    pub fn flow_key(&self) -> FlowKey {
        let (sp, dp) = match &self.transport {
            Transport::Tcp(t) => (t.src_port, t.dst_port),
            Transport::Udp(u) => (u.src_port, u.dst_port),
            Transport::Other(_) => (0, 0),
        };
        FlowKey {
            src: self.ip.src,
            dst: self.ip.dst,
            src_port: sp,
            dst_port: dp,
            proto: self.protocol(),
        }
    }

    /// Whether this TCP segment carries payload bytes.
    pub fn carries_data(&self) -> bool {
        self.tcp_repr().is_some() && self.payload_len > 0
    }

    /// A *pure ACK*: a TCP segment with ACK set, no payload and none of SYN, FIN, RST,
    /// whatever its options (SACK, timestamps) and its size.
    pub fn is_pure_ack(&self) -> bool {
        match &self.transport {
            Transport::Tcp(t) => {
                t.flags.contains(TcpFlags::ACK)
                    && !t
                        .flags
                        .intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
                    && self.payload_len == 0
            }
            _ => false,
        }
    }

    /// Whether this is a TCP segment that may be signed end to end: TCP-MD5 or TCP-AO
    /// options, options that could not be read to the end, or an IP Authentication Header
    /// in front of it. A middlebox never changes such a segment's TCP header, payload or
    /// immutable IP fields, and never removes it as redundant; it may queue it, drop it
    /// (counted) and set DSCP/ECN (mutable under AH, RFC 4302 §3.3.3.1).
    pub fn is_signed(&self) -> bool {
        self.tcp_repr()
            .is_some_and(|t| t.opts.signed || self.ip.auth)
    }

    /// Whether SYN, FIN or RST is set.
    pub fn is_syn_fin_rst(&self) -> bool {
        self.tcp_repr().is_some_and(|t| {
            t.flags
                .intersects(TcpFlags::SYN | TcpFlags::FIN | TcpFlags::RST)
        })
    }

    /// Whether ECE or CWR is set.
    pub fn has_ece_or_cwr(&self) -> bool {
        self.tcp_repr()
            .is_some_and(|t| t.flags.intersects(TcpFlags::ECE | TcpFlags::CWR))
    }

    /// RFC 5681 §2 duplicate-ACK test against the previous ACK of the same flow and
    /// direction: same acknowledgment number, same advertised window, no data, no SYN/FIN,
    /// both carry ACK. (Whether the receiver of this ACK has outstanding data — the last
    /// condition of the RFC — is unknown to an observer and is not checked.)
    pub fn is_duplicate_ack_of(&self, prev: &Headers) -> bool {
        match (self.tcp_repr(), prev.tcp_repr()) {
            (Some(a), Some(p)) => {
                a.flags.contains(TcpFlags::ACK)
                    && p.flags.contains(TcpFlags::ACK)
                    && !a.flags.intersects(TcpFlags::SYN | TcpFlags::FIN)
                    && self.payload_len == 0
                    && a.ack == p.ack
                    && a.window == p.window
                    && self.flow_key() == prev.flow_key()
            }
            _ => false,
        }
    }
}
