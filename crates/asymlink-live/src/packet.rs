//! [`LivePacket`]: a received frame as the core sees it.
//!
//! A frame is parsed **once**, on arrival: the link header is skipped (Ethernet with up to
//! two VLAN tags on AF_PACKET, nothing on TUN), the IP packet is handed to
//! [`Headers::parse`] (fuzzed, never panics), and the result is kept beside the bytes.
//! Anything that does not parse keeps `headers() == None`: the core then treats it as
//! opaque bulk traffic, never rewrites it, and the box forwards the original bytes
//! untouched (or drops it, counted, if the configuration says so).
//!
//! Mutators edit the bytes in place through [`asymlink_core::wire::mutate`] (RFC 1624
//! incremental checksum updates) and keep the parsed view consistent with the bytes.

use asymlink_core::packet::{ClassId, Pkt};
use asymlink_core::pipeline::Dir;
use asymlink_core::time::Instant;
use asymlink_core::wire::{mutate, Ecn, Headers, Layout, ParseError, Transport};

/// What precedes the IP header in a frame.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LinkType {
    /// Ethernet II (AF_PACKET on veth or a NIC).
    Ethernet,
    /// Nothing: the frame is the IP packet (TUN with `IFF_NO_PI`).
    RawIp,
}

/// Why a frame was not parsed as an IP packet the mechanisms can act on. The counters of
/// the box are indexed by these.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Hash)]
#[repr(u8)]
pub enum Unparsed {
    /// Not IP (ARP, LLDP, ...): normal traffic, forwarded as is.
    NonIp,
    /// Too short to hold a link header (or empty).
    Runt,
    /// The IP header is malformed or truncated (bad IHL, bad length, bad version,
    /// broken IPv6 extension chain, jumbogram).
    Ip,
    /// The TCP/UDP header is malformed or truncated (bad data offset, ...). (TCP options
    /// never are: as in Linux, a list that cannot be read to its end is cut there, and the
    /// segment counts as possibly signed, so no mechanism edits it.)
    Transport,
}

impl Unparsed {
    /// All kinds, in counter order.
    pub const ALL: [Unparsed; 4] = [
        Unparsed::NonIp,
        Unparsed::Runt,
        Unparsed::Ip,
        Unparsed::Transport,
    ];
    /// Stable snake_case name (JSON keys, Prometheus labels).
    pub const fn name(self) -> &'static str {
        match self {
            Unparsed::NonIp => "non_ip",
            Unparsed::Runt => "runt",
            Unparsed::Ip => "bad_ip",
            Unparsed::Transport => "bad_transport",
        }
    }
    /// Whether this is a malformed packet (as opposed to legitimate non-IP traffic).
    pub const fn is_malformed(self) -> bool {
        !matches!(self, Unparsed::NonIp)
    }
    fn from_error(e: &ParseError) -> Unparsed {
        match e {
            ParseError::Ip(_) => Unparsed::Ip,
            ParseError::Transport(_) => Unparsed::Transport,
        }
    }
}

const ETH_HLEN: usize = 14;
const ETHERTYPE_IPV4: u16 = 0x0800;
const ETHERTYPE_IPV6: u16 = 0x86DD;
const ETHERTYPE_VLAN: u16 = 0x8100;
const ETHERTYPE_QINQ: u16 = 0x88A8;

/// Where the IP packet starts in an Ethernet frame, or why there is none.
pub fn ethernet_l3_offset(frame: &[u8]) -> Result<usize, Unparsed> {
    if frame.len() < ETH_HLEN {
        return Err(Unparsed::Runt);
    }
    let mut off = 12;
    // At most two tags (802.1ad outer + 802.1Q inner).
    for _ in 0..3 {
        if frame.len() < off + 2 {
            return Err(Unparsed::Runt);
        }
        let et = u16::from_be_bytes([frame[off], frame[off + 1]]);
        match et {
            ETHERTYPE_VLAN | ETHERTYPE_QINQ => off += 4,
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => return Ok(off + 2),
            _ => return Err(Unparsed::NonIp),
        }
    }
    Err(Unparsed::NonIp)
}

/// A packet inside the box.
#[derive(Debug)]
pub struct LivePacket {
    buf: Vec<u8>,
    l3: u32,
    parsed: Option<(Headers, Layout)>,
    unparsed: Option<Unparsed>,
    class: ClassId,
    /// When the box read it (the wake-up's `now`).
    pub arrived: Instant,
    /// Kernel receive timestamp (UNIX nanoseconds; 0 if unknown), for the added-latency
    /// measurement.
    pub rx_unix_ns: u64,
    /// Direction of travel (set by the engine on arrival).
    pub dir: Dir,
}

impl LivePacket {
    /// Parse a frame read from a device of link type `lt`. Never panics.
    pub fn new(buf: Vec<u8>, lt: LinkType, arrived: Instant, rx_unix_ns: u64) -> LivePacket {
        let l3 = match lt {
            LinkType::RawIp => {
                if buf.is_empty() {
                    Err(Unparsed::Runt)
                } else {
                    Ok(0)
                }
            }
            LinkType::Ethernet => ethernet_l3_offset(&buf),
        };
        let (l3, parsed, unparsed) = match l3 {
            Err(u) => (0, None, Some(u)),
            Ok(off) => match Headers::parse(&buf[off..]) {
                Ok(p) => (off, Some(p), None),
                Err(e) => (off, None, Some(Unparsed::from_error(&e))),
            },
        };
        LivePacket {
            buf,
            l3: l3 as u32,
            parsed,
            unparsed,
            class: ClassId::NONE,
            arrived,
            rx_unix_ns,
            dir: Dir::ToB,
        }
    }

    /// The frame's bytes (link header included), as they will be sent.
    #[inline]
    pub fn frame(&self) -> &[u8] {
        &self.buf
    }

    /// Forget the class (before re-classification after a reload).
    pub fn clear_class(&mut self) {
        self.class = ClassId::NONE;
    }

    /// Give the buffer back (to recycle it).
    pub fn into_buf(self) -> Vec<u8> {
        self.buf
    }

    /// Why the packet was not parsed, if it was not.
    pub fn unparsed(&self) -> Option<Unparsed> {
        self.unparsed
    }

    /// The layout of the IP packet inside [`LivePacket::ip_bytes`], if parsed.
    pub fn layout(&self) -> Option<&Layout> {
        self.parsed.as_ref().map(|(_, l)| l)
    }

    /// The bytes from the IP header on (link padding included).
    pub fn ip_bytes(&self) -> &[u8] {
        &self.buf[self.l3 as usize..]
    }

    /// Whether this is an IP fragment (parsed, but its transport header is opaque).
    pub fn is_fragment(&self) -> bool {
        match &self.parsed {
            Some((h, _)) => {
                matches!(h.transport, Transport::Other(p) if p == 6 || p == 17)
            }
            None => false,
        }
    }

    /// Whether this packet can be what the box made of the input frame `orig`: same
    /// length, differences only where a rewriter may write (IPv4 TOS and header checksum,
    /// IPv6 version/traffic class/flow bytes), and a valid IPv4 header checksum still
    /// valid. The invariant the robustness tests and the `pipeline` fuzz target check on
    /// every frame that leaves; it never panics.
    pub fn is_rewrite_of(&self, orig: &[u8]) -> bool {
        let f = self.frame();
        if f.len() != orig.len() {
            return false;
        }
        let l3 = self.l3 as usize;
        let only_header_bytes = f.iter().zip(orig).enumerate().all(|(i, (a, b))| {
            a == b || (self.parsed.is_some() && matches!(i.wrapping_sub(l3), 0 | 1 | 10 | 11))
        });
        only_header_bytes && (!ipv4_header_ok(&orig[l3..]) || ipv4_header_ok(self.ip_bytes()))
    }
}

/// Whether `ip` starts with an IPv4 header whose checksum verifies (for invariant checks:
/// the robustness tests and the fuzz targets).
pub fn ipv4_header_ok(ip: &[u8]) -> bool {
    if ip.len() < 20 || ip[0] >> 4 != 4 {
        return false;
    }
    let ihl = (ip[0] & 0x0f) as usize * 4;
    if ihl < 20 || ip.len() < ihl {
        return false;
    }
    let mut s: u32 = ip[..ihl]
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum();
    while s > 0xffff {
        s = (s & 0xffff) + (s >> 16);
    }
    s == 0xffff
}

impl Pkt for LivePacket {
    #[inline]
    fn ip_len(&self) -> u32 {
        match &self.parsed {
            Some((_, l)) => l.ip_len as u32,
            None => (self.buf.len() - self.l3 as usize) as u32,
        }
    }
    #[inline]
    fn headers(&self) -> Option<&Headers> {
        self.parsed.as_ref().map(|(h, _)| h)
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
        let Some((h, layout)) = self.parsed.as_mut() else {
            return false;
        };
        if h.is_signed() {
            return false; // the peer would discard an edited signed segment
        }
        let Some(t) = h.tcp_repr_mut() else {
            return false;
        };
        if !mutate::set_tcp_window(&mut self.buf[self.l3 as usize..], layout, window) {
            return false;
        }
        t.window = window;
        true
    }
    fn set_dscp_ecn(&mut self, dscp: u8, ecn: Ecn) -> bool {
        let Some((h, _)) = self.parsed.as_mut() else {
            return false;
        };
        if !mutate::set_dscp_ecn(&mut self.buf[self.l3 as usize..], dscp, ecn) {
            return false;
        }
        h.ip.dscp = dscp & 0x3f;
        h.ip.ecn = ecn;
        true
    }
}

/// A free list of packet buffers, so the hot path does not allocate per packet.
#[derive(Debug, Default)]
pub struct Pool {
    free: Vec<Vec<u8>>,
    max: usize,
}

/// Capacity of pooled buffers: an MTU-1500 Ethernet frame with two VLAN tags fits.
pub const POOL_BUF: usize = 2048;

impl Pool {
    /// A pool keeping at most `max` idle buffers.
    pub fn new(max: usize) -> Pool {
        Pool {
            free: Vec::new(),
            max,
        }
    }
    /// A buffer holding a copy of `data`.
    #[inline]
    pub fn copy_of(&mut self, data: &[u8]) -> Vec<u8> {
        let mut b = if data.len() <= POOL_BUF {
            self.free
                .pop()
                .unwrap_or_else(|| Vec::with_capacity(POOL_BUF))
        } else {
            Vec::with_capacity(data.len())
        };
        b.clear();
        b.extend_from_slice(data);
        b
    }
    /// Return a buffer.
    #[inline]
    pub fn put(&mut self, b: Vec<u8>) {
        if b.capacity() == POOL_BUF && self.free.len() < self.max {
            self.free.push(b);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eth(et: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&et.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    #[test]
    fn link_headers() {
        assert_eq!(ethernet_l3_offset(&[0; 13]), Err(Unparsed::Runt));
        assert_eq!(
            ethernet_l3_offset(&eth(0x0806, &[0; 28])),
            Err(Unparsed::NonIp)
        );
        assert_eq!(ethernet_l3_offset(&eth(0x0800, &[])), Ok(14));
        let mut tagged = eth(0x8100, &[0, 5]);
        tagged.extend_from_slice(&0x86DDu16.to_be_bytes());
        assert_eq!(ethernet_l3_offset(&tagged), Ok(18));
        // A tag with nothing after it.
        assert_eq!(
            ethernet_l3_offset(&eth(0x8100, &[0, 5])),
            Err(Unparsed::Runt)
        );
        // Too many tags.
        let mut many = eth(0x8100, &[0, 1, 0x81, 0, 0, 1, 0x81, 0, 0, 1, 0x81, 0]);
        many.extend_from_slice(&[0; 4]);
        assert_eq!(ethernet_l3_offset(&many), Err(Unparsed::NonIp));
    }

    #[test]
    fn unparsed_frames_keep_their_bytes() {
        let f = eth(0x0800, &[0x4f, 0, 0, 20]); // IHL 15 but 4 bytes
        let p = LivePacket::new(f.clone(), LinkType::Ethernet, Instant::ZERO, 0);
        assert_eq!(p.unparsed(), Some(Unparsed::Ip));
        assert!(p.headers().is_none());
        assert_eq!(p.ip_len(), 4);
        assert_eq!(p.frame(), &f[..]);
        let e = LivePacket::new(Vec::new(), LinkType::RawIp, Instant::ZERO, 0);
        assert_eq!(e.unparsed(), Some(Unparsed::Runt));
        assert_eq!(e.ip_len(), 0);
    }
}
