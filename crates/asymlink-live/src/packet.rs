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

use asymlink_core::checksum;
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
    /// When the loop read it and where its latency went until then (`[stats]
    /// latency_breakdown`; zero otherwise).
    pub stamps: crate::breakdown::Stamps,
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
            stamps: Default::default(),
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
    /// length, differences only where a rewriter may write, and every checksum that
    /// verified in `orig` still verifies. A rewriter may write:
    /// * the IPv4 TOS byte and header checksum; the IPv6 traffic class (the low nibble of
    ///   byte 0 and the high nibble of byte 1; the version stays);
    /// * the TCP window and the TCP checksum, unless the segment may be signed
    ///   ([`Headers::is_signed`]: TCP-MD5, TCP-AO, options that cannot be walked to the
    ///   end, or an IP Authentication Header), whose TCP header and payload stay intact.
    ///
    /// Nothing of a frame that did not parse may change. The invariant the robustness
    /// tests, the corpus replay and the `pipeline` fuzz target check on every frame that
    /// leaves; it never panics.
    pub fn is_rewrite_of(&self, orig: &[u8]) -> bool {
        let f = self.frame();
        if f.len() != orig.len() {
            return false;
        }
        let Some((h, layout)) = &self.parsed else {
            return f == orig;
        };
        let l3 = self.l3 as usize;
        let only_writable = f
            .iter()
            .zip(orig)
            .enumerate()
            .all(|(i, (a, b))| (a ^ b) & !self.writable_bits(i) == 0);
        only_writable
            && (!ipv4_header_ok(&orig[l3..]) || ipv4_header_ok(self.ip_bytes()))
            && (!tcp_checksum_ok(h, layout, &orig[l3..])
                || tcp_checksum_ok(h, layout, self.ip_bytes()))
    }

    /// The frame with every bit a rewrite may write ([`LivePacket::is_rewrite_of`])
    /// cleared: equal for a frame and whatever the box may make of it.
    pub fn rewritable_cleared(&self) -> Vec<u8> {
        (self.frame().iter().enumerate())
            .map(|(i, b)| b & !self.writable_bits(i))
            .collect()
    }

    /// Which bits of byte `i` of the frame a rewrite may change.
    fn writable_bits(&self, i: usize) -> u8 {
        let Some((h, layout)) = &self.parsed else {
            return 0;
        };
        let v4 = h.ip.src.is_ipv4();
        let Some(off) = i.checked_sub(self.l3 as usize) else {
            return 0;
        };
        match off {
            1 | 10 | 11 if v4 => 0xff,
            0 if !v4 => 0x0f,
            1 if !v4 => 0xf0,
            _ if h.tcp_repr().is_some()
                && !h.is_signed()
                && (layout.l4_offset + 14..layout.l4_offset + 18).contains(&off) =>
            {
                0xff
            }
            _ => 0,
        }
    }
}

/// Whether the TCP checksum of the IP packet `ip` (parsed as `h`, `layout`) verifies;
/// false for anything but TCP. The pseudo-header takes the addresses of the IP header,
/// which is what a receiver without an IPv6 routing header checks.
pub fn tcp_checksum_ok(h: &Headers, layout: &Layout, ip: &[u8]) -> bool {
    if h.tcp_repr().is_none() || layout.ip_len > ip.len() || layout.l4_offset > layout.ip_len {
        return false;
    }
    let seg = &ip[layout.l4_offset..layout.ip_len];
    let acc = checksum::pseudo_header(h.ip.src, h.ip.dst, 6, seg.len() as u32);
    checksum::finish(checksum::sum(seg, acc)) == 0
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

impl asymlink_core::link::OnWire for LivePacket {
    type Entry = asymlink_core::link::Paired<Self>;
    #[inline]
    fn to_wire(self, at: Instant) -> Self::Entry {
        asymlink_core::link::Paired::new(self, at)
    }
    #[inline]
    fn arrival(e: &Self::Entry) -> Instant {
        e.at()
    }
    #[inline]
    fn off_wire(e: Self::Entry) -> Self {
        e.into_pkt()
    }
    #[inline]
    fn waiting(self) -> Self::Entry {
        asymlink_core::link::Paired::new(self, Instant::ZERO)
    }
    #[inline]
    fn pkt(e: &Self::Entry) -> &Self {
        e.pkt()
    }
    #[inline]
    fn depart(e: &mut Self::Entry, at: Instant) {
        e.set_at(at);
    }
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

    /// An Ethernet frame with a TCP pure ACK (IPv4 or IPv6), optionally signed with
    /// TCP-MD5.
    fn ack(v6: bool, signed: bool) -> Vec<u8> {
        let b = etherparse::PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]);
        let ip = if v6 {
            b.ipv6([0xfd; 16], [0x20; 16], 64)
        } else {
            b.ipv4([10, 0, 0, 1], [192, 0, 2, 1], 64)
        };
        let tcp = ip.tcp(1000, 80, 7, 65535).ack(1);
        let tcp = if signed {
            let mut o = vec![19, 18];
            o.extend([0xab; 16]);
            o.extend([1, 1]);
            tcp.options_raw(&o).unwrap()
        } else {
            tcp.options(&[etherparse::TcpOptionElement::Timestamp(1, 2)])
                .unwrap()
        };
        let mut out = Vec::new();
        tcp.write(&mut out, &[]).unwrap();
        out
    }

    #[test]
    fn a_rewrite_may_change_the_window_and_checksums_only() {
        for v6 in [false, true] {
            let orig = ack(v6, false);
            let mut p = LivePacket::new(orig.clone(), LinkType::Ethernet, Instant::ZERO, 0);
            let tcp = 14 + if v6 { 40 } else { 20 };
            assert!(tcp_checksum_ok(
                p.headers().unwrap(),
                p.layout().unwrap(),
                p.ip_bytes()
            ));
            assert!(p.set_tcp_window(1234) && p.set_dscp_ecn(10, Ecn::Ect0));
            assert_ne!(p.frame(), &orig[..]);
            assert!(
                p.is_rewrite_of(&orig),
                "window and DSCP rewritten (v6: {v6})"
            );
            assert_eq!(p.rewritable_cleared(), {
                let o = LivePacket::new(orig.clone(), LinkType::Ethernet, Instant::ZERO, 0);
                o.rewritable_cleared()
            });
            // A window written without its checksum update no longer verifies.
            let mut bad = p.frame().to_vec();
            bad[tcp + 14] ^= 0x40;
            let q = LivePacket::new(bad, LinkType::Ethernet, Instant::ZERO, 0);
            assert!(!q.is_rewrite_of(&orig), "TCP checksum broken (v6: {v6})");
            // Nothing else may change: the sequence number, an address byte (IPv6), the
            // IPv4 header checksum alone.
            for i in [tcp + 5, 14 + 10, 14 + 13, 14 + 25] {
                let mut other = orig.clone();
                other[i] ^= 1;
                let q = LivePacket::new(other, LinkType::Ethernet, Instant::ZERO, 0);
                assert!(!q.is_rewrite_of(&orig), "byte {i} changed (v6: {v6})");
            }
        }
    }

    #[test]
    fn a_rewrite_never_changes_a_signed_segments_tcp_bytes() {
        let orig = ack(false, true);
        let p = LivePacket::new(orig.clone(), LinkType::Ethernet, Instant::ZERO, 0);
        assert!(p.headers().unwrap().is_signed());
        // The window and checksum edited consistently, as a rewriter would: refused.
        let mut edited = orig.clone();
        let (w, c) = (14 + 20 + 14, 14 + 20 + 16);
        let old = u16::from_be_bytes([edited[w], edited[w + 1]]);
        let ck = u16::from_be_bytes([edited[c], edited[c + 1]]);
        edited[w..w + 2].copy_from_slice(&1234u16.to_be_bytes());
        edited[c..c + 2].copy_from_slice(&checksum::update(ck, old, 1234).to_be_bytes());
        let q = LivePacket::new(edited, LinkType::Ethernet, Instant::ZERO, 0);
        assert!(tcp_checksum_ok(
            q.headers().unwrap(),
            q.layout().unwrap(),
            q.ip_bytes()
        ));
        assert!(!q.is_rewrite_of(&orig));
        // DSCP may still be set.
        let mut d = LivePacket::new(orig.clone(), LinkType::Ethernet, Instant::ZERO, 0);
        assert!(d.set_dscp_ecn(46, Ecn::NotEct));
        assert!(d.is_rewrite_of(&orig));
    }
}
