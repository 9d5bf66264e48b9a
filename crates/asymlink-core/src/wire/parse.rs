//! Bytes → [`Headers`], zero-copy over the input (built on `etherparse`, which validates the
//! IPv4 IHL and total length, IPv6 payload length and extension-header chains, and the TCP
//! data offset). TCP options are walked here so that unknown kinds are skipped by their
//! length instead of failing the packet.

use super::{
    Ecn, Headers, IpRepr, SackBlock, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Timestamp,
    Transport, UdpRepr,
};
use core::fmt;
use core::net::IpAddr;
use etherparse::{NetSlice, SlicedPacket, TransportSlice};

/// Why bytes are not a packet asymlink can interpret. A middlebox forwards such packets
/// untouched (or drops them, counted); it never rewrites them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not an IP packet, or the IP header is malformed/truncated (the message says why).
    Ip(String),
    /// The TCP or UDP header is malformed or truncated.
    Transport(String),
    /// TCP options run past the header or have an impossible length.
    TcpOptions(&'static str),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Ip(m) => write!(f, "malformed IP header: {m}"),
            ParseError::Transport(m) => write!(f, "malformed transport header: {m}"),
            ParseError::TcpOptions(m) => write!(f, "malformed TCP options: {m}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Where the layers start in the original bytes (for in-place mutation).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the transport header (after IPv4 options / IPv6 extension headers); equal
    /// to the IP length for [`Transport::Other`].
    pub l4_offset: usize,
    /// Length of the transport header (TCP: data offset × 4; UDP: 8; other: 0).
    pub l4_header_len: usize,
    /// Total packet length per the IP header (bytes beyond it are link padding).
    pub ip_len: usize,
}

fn offset_in(outer: &[u8], inner: &[u8]) -> usize {
    (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize)
}

/// Walk raw TCP option bytes.
pub(crate) fn parse_tcp_options(mut b: &[u8]) -> Result<TcpOptions, ParseError> {
    let mut o = TcpOptions::default();
    while let Some(&kind) = b.first() {
        match kind {
            0 => break, // end of option list
            1 => {
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        let len = *b
            .get(1)
            .ok_or(ParseError::TcpOptions("option length missing"))? as usize;
        if len < 2 {
            return Err(ParseError::TcpOptions("option length below 2"));
        }
        if len > b.len() {
            return Err(ParseError::TcpOptions("option runs past the header"));
        }
        let body = &b[2..len];
        match (kind, len) {
            (2, 4) => o.mss = Some(u16::from_be_bytes([body[0], body[1]])),
            (3, 3) => o.wscale = Some(body[0]),
            (4, 2) => o.sack_permitted = true,
            (5, l) if l >= 10 && (l - 2) % 8 == 0 => {
                for c in body.chunks_exact(8) {
                    let left = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
                    let right = u32::from_be_bytes([c[4], c[5], c[6], c[7]]);
                    if !o.sack.push(SackBlock {
                        left: SeqNumber(left),
                        right: SeqNumber(right),
                    }) {
                        return Err(ParseError::TcpOptions("more than four SACK blocks"));
                    }
                }
            }
            (8, 10) => {
                o.timestamp = Some(Timestamp {
                    val: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                    ecr: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                })
            }
            (2..=5, _) | (8, _) => {
                return Err(ParseError::TcpOptions("known option with a wrong length"))
            }
            _ => o.other = true,
        }
        b = &b[len..];
    }
    Ok(o)
}

impl Headers {
    /// Parse an IP packet (IPv4 or IPv6, starting at the IP header, as read from a TUN
    /// device or after the Ethernet header).
    ///
    /// Non-first fragments and protocols other than TCP/UDP give [`Transport::Other`].
    pub fn parse(bytes: &[u8]) -> Result<(Headers, Layout), ParseError> {
        let sliced = SlicedPacket::from_ip(bytes).map_err(|e| ParseError::Ip(e.to_string()))?;
        let (ip, ip_len, l4_start, proto, fragmented) = match &sliced.net {
            Some(NetSlice::Ipv4(v4)) => {
                let h = v4.header();
                let repr = IpRepr {
                    src: IpAddr::V4(h.source_addr()),
                    dst: IpAddr::V4(h.destination_addr()),
                    dscp: h.dcp().value(),
                    ecn: Ecn::from_bits(h.ecn().value()),
                    ttl: h.ttl(),
                    ident: h.identification(),
                    dont_frag: h.dont_fragment(),
                    flow_label: 0,
                };
                let payload = v4.payload();
                (
                    repr,
                    h.total_len() as usize,
                    offset_in(bytes, payload.payload),
                    payload.ip_number.0,
                    v4.is_payload_fragmented(),
                )
            }
            Some(NetSlice::Ipv6(v6)) => {
                let h = v6.header();
                let repr = IpRepr {
                    src: IpAddr::V6(h.source_addr()),
                    dst: IpAddr::V6(h.destination_addr()),
                    dscp: h.dscp().value(),
                    ecn: Ecn::from_bits(h.ecn().value()),
                    ttl: h.hop_limit(),
                    ident: 0,
                    dont_frag: false,
                    flow_label: h.flow_label().value(),
                };
                let payload = v6.payload();
                (
                    repr,
                    40 + h.payload_length() as usize,
                    offset_in(bytes, payload.payload),
                    payload.ip_number.0,
                    v6.is_payload_fragmented(),
                )
            }
            _ => return Err(ParseError::Ip("not an IPv4 or IPv6 packet".into())),
        };
        let other = |p: u8| {
            Ok((
                Headers {
                    ip,
                    transport: Transport::Other(p),
                    payload_len: ip_len.saturating_sub(l4_start) as u32,
                },
                Layout {
                    l4_offset: l4_start,
                    l4_header_len: 0,
                    ip_len,
                },
            ))
        };
        if fragmented {
            // A fragment's transport header is absent or incomplete: treat as opaque.
            return other(proto);
        }
        match &sliced.transport {
            Some(TransportSlice::Tcp(t)) => {
                let opts = parse_tcp_options(t.options())?;
                let mut flags = TcpFlags::NONE;
                flags.set(TcpFlags::FIN, t.fin());
                flags.set(TcpFlags::SYN, t.syn());
                flags.set(TcpFlags::RST, t.rst());
                flags.set(TcpFlags::PSH, t.psh());
                flags.set(TcpFlags::ACK, t.ack());
                flags.set(TcpFlags::URG, t.urg());
                flags.set(TcpFlags::ECE, t.ece());
                flags.set(TcpFlags::CWR, t.cwr());
                flags.set(TcpFlags::NS, t.ns());
                let hl = t.data_offset() as usize * 4;
                let tcp = TcpRepr {
                    src_port: t.source_port(),
                    dst_port: t.destination_port(),
                    seq: SeqNumber(t.sequence_number()),
                    ack: SeqNumber(t.acknowledgment_number()),
                    flags,
                    window: t.window_size(),
                    urgent: t.urgent_pointer(),
                    opts,
                };
                Ok((
                    Headers {
                        ip,
                        transport: Transport::Tcp(tcp),
                        payload_len: t.payload().len() as u32,
                    },
                    Layout {
                        l4_offset: l4_start,
                        l4_header_len: hl,
                        ip_len,
                    },
                ))
            }
            Some(TransportSlice::Udp(u)) => Ok((
                Headers {
                    ip,
                    transport: Transport::Udp(UdpRepr {
                        src_port: u.source_port(),
                        dst_port: u.destination_port(),
                    }),
                    payload_len: u.payload().len() as u32,
                },
                Layout {
                    l4_offset: l4_start,
                    l4_header_len: 8,
                    ip_len,
                },
            )),
            None if proto == super::proto::TCP || proto == super::proto::UDP => Err(
                ParseError::Transport("transport header missing or truncated".into()),
            ),
            _ => other(proto),
        }
    }
}
