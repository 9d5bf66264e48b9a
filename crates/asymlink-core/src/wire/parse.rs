//! Bytes → [`Headers`], zero-copy over the input (built on `etherparse`, which validates the
//! IPv4 IHL and total length, IPv6 payload length and extension-header chains, and the TCP
//! data offset). TCP options are walked here, as leniently as Linux: unknown kinds are
//! skipped by their length, and an option list that cannot be read to its end is cut
//! there (and marked possibly signed) instead of failing the packet.

use super::{
    Ecn, Headers, IpRepr, SackBlock, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Timestamp,
    Transport, UdpRepr,
};
use core::fmt;
use core::net::IpAddr;
use etherparse::{IpSlice, Ipv6ExtensionSlice, TcpSlice, UdpSlice};

/// Why bytes are not a packet asymlink can interpret. A middlebox forwards such packets
/// untouched (or drops them, counted); it never rewrites them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ParseError {
    /// Not an IP packet, or the IP header is malformed/truncated (the message says why).
    Ip(String),
    /// The TCP or UDP header is malformed or truncated.
    Transport(String),
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ParseError::Ip(m) => write!(f, "malformed IP header: {m}"),
            ParseError::Transport(m) => write!(f, "malformed transport header: {m}"),
        }
    }
}

impl std::error::Error for ParseError {}

/// Where the layers start in the original bytes (for in-place mutation). For a successful
/// parse, `l4_offset + l4_header_len <= ip_len <= bytes.len()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Offset of the transport header (after IPv4 options / IPv6 extension headers); for
    /// [`Transport::Other`], where the IP payload starts (so that
    /// `payload_len == ip_len - l4_offset`).
    pub l4_offset: usize,
    /// Length of the transport header (TCP: data offset × 4; UDP: 8; other: 0).
    pub l4_header_len: usize,
    /// Total packet length per the IP header (bytes beyond it are link padding).
    pub ip_len: usize,
}

fn offset_in(outer: &[u8], inner: &[u8]) -> usize {
    (inner.as_ptr() as usize).saturating_sub(outer.as_ptr() as usize)
}

/// TCP-MD5 signature option (RFC 2385).
const TCPOPT_MD5SIG: u8 = 19;
/// TCP Authentication Option (RFC 5925).
const TCPOPT_AO: u8 = 29;

/// Walk raw TCP option bytes as leniently as Linux's `tcp_parse_options`
/// (net/ipv4/tcp_input.c): options never make a segment malformed. End-of-list stops the
/// walk; a kind byte without a length, a length below 2 or one that runs past the header
/// stops it early; a known kind with a length Linux ignores (MSS not 4 bytes, SACK not
/// 2 + 8n, ...) is skipped by its length. Anything skipped or not read sets
/// [`TcpOptions::other`]; stopping early also sets [`TcpOptions::signed`] (a signature
/// cannot be ruled out in bytes that were not read), as does a TCP-MD5 or TCP-AO option.
pub(crate) fn parse_tcp_options(mut b: &[u8]) -> TcpOptions {
    let mut o = TcpOptions::default();
    let stop_early = |o: &mut TcpOptions| {
        o.other = true;
        o.signed = true;
    };
    while let Some(&kind) = b.first() {
        match kind {
            0 => break, // end of option list
            1 => {
                b = &b[1..];
                continue;
            }
            _ => {}
        }
        let Some(&len) = b.get(1) else {
            stop_early(&mut o); // a lone trailing kind byte
            break;
        };
        let len = len as usize;
        if len < 2 || len > b.len() {
            stop_early(&mut o); // "silly options" / "partial options": Linux stops here
            break;
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
                    // Four blocks fill 34 of the 40 option bytes: a fifth cannot occur.
                    if !o.sack.push(SackBlock {
                        left: SeqNumber(left),
                        right: SeqNumber(right),
                    }) {
                        o.other = true;
                    }
                }
            }
            (8, 10) => {
                o.timestamp = Some(Timestamp {
                    val: u32::from_be_bytes([body[0], body[1], body[2], body[3]]),
                    ecr: u32::from_be_bytes([body[4], body[5], body[6], body[7]]),
                })
            }
            (TCPOPT_MD5SIG | TCPOPT_AO, _) => {
                o.signed = true;
                o.other = true;
            }
            // Known kinds with lengths Linux ignores, and unknown kinds: skipped.
            _ => o.other = true,
        }
        b = &b[len..];
    }
    o
}

/// Where the IP header says the packet ends: IPv6 packets whose payload length is zero are
/// cut to their 40-byte header (what follows is link padding), except jumbograms (RFC 2675),
/// which are refused. IPv4 total lengths are checked by `etherparse`.
fn ip_extent(bytes: &[u8]) -> Result<&[u8], ParseError> {
    if bytes.len() > 40 && bytes[0] >> 4 == 6 && bytes[4] == 0 && bytes[5] == 0 {
        if bytes[6] == super::proto::IPV6_HOP_BY_HOP {
            return Err(ParseError::Ip(
                "IPv6 payload length 0 with a hop-by-hop header (jumbogram) is not supported"
                    .into(),
            ));
        }
        return Ok(&bytes[..40]);
    }
    Ok(bytes)
}

impl Headers {
    /// Parse an IP packet (IPv4 or IPv6, starting at the IP header, as read from a TUN
    /// device or after the Ethernet header). Bytes beyond the length the IP header states
    /// (link padding) are ignored; [`Layout::ip_len`] says where the packet ends.
    ///
    /// IPv4 options and IPv6 extension headers are skipped ([`Layout::l4_offset`] points
    /// past them). Fragments (first or not) and protocols other than TCP/UDP give
    /// [`Transport::Other`], whatever their payload. A TCP or UDP header that is truncated
    /// or inconsistent is an error: such a packet must be forwarded untouched, never
    /// rewritten. TCP options never are (see [`TcpOptions::signed`] for what a
    /// malformed option list means).
    ///
    /// Never panics, whatever the input (fuzzed: see `fuzz/`).
    pub fn parse(bytes: &[u8]) -> Result<(Headers, Layout), ParseError> {
        let sliced =
            IpSlice::from_slice(ip_extent(bytes)?).map_err(|e| ParseError::Ip(e.to_string()))?;
        let (ip, ip_len) = match &sliced {
            IpSlice::Ipv4(v4) => {
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
                    extensions: h.ihl() > 5 || v4.extensions().auth.is_some(),
                    auth: v4.extensions().auth.is_some(),
                };
                (repr, h.total_len() as usize)
            }
            IpSlice::Ipv6(v6) => {
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
                    extensions: !v6.extensions().is_empty(),
                    auth: v6
                        .extensions()
                        .clone()
                        .into_iter()
                        .any(|e| matches!(e, Ipv6ExtensionSlice::Authentication(_))),
                };
                (repr, 40 + h.payload_length() as usize)
            }
        };
        let payload = sliced.payload();
        let l4_start = offset_in(bytes, payload.payload);
        let proto = payload.ip_number.0;
        let seg = payload.payload;
        let layout = |l4_header_len| Layout {
            l4_offset: l4_start,
            l4_header_len,
            ip_len,
        };
        let headers = |transport, payload_len: usize| Headers {
            ip,
            transport,
            payload_len: payload_len as u32,
        };
        if payload.fragmented {
            // A fragment's transport header is absent or incomplete: treat as opaque.
            return Ok((headers(Transport::Other(proto), seg.len()), layout(0)));
        }
        match proto {
            super::proto::TCP => {
                let t = TcpSlice::from_slice(seg)
                    .map_err(|e| ParseError::Transport(format!("TCP: {e}")))?;
                let opts = parse_tcp_options(t.options());
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
                // The reserved bits (etherparse does not expose them): byte 12, bits 1-3.
                flags.0 |= ((seg[12] & 0x0e) as u16) << 8;
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
                let hl = t.header_len();
                Ok((headers(Transport::Tcp(tcp), seg.len() - hl), layout(hl)))
            }
            super::proto::UDP => {
                let u = UdpSlice::from_slice(seg)
                    .map_err(|e| ParseError::Transport(format!("UDP: {e}")))?;
                if u.length() == 0 {
                    // Only IPv6 jumbograms may say 0 (RFC 2675 §4), and those are refused.
                    return Err(ParseError::Transport("UDP: length field is 0".into()));
                }
                let udp = UdpRepr {
                    src_port: u.source_port(),
                    dst_port: u.destination_port(),
                };
                Ok((headers(Transport::Udp(udp), u.payload().len()), layout(8)))
            }
            p => Ok((headers(Transport::Other(p), seg.len()), layout(0))),
        }
    }
}
