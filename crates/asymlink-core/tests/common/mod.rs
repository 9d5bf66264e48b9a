//! Helpers shared by the wire integration tests: checksums recomputed *independently* of
//! `asymlink_core::checksum`, with etherparse.
#![allow(dead_code)]

pub mod linux;

use etherparse::{IpSlice, Ipv4Header, Ipv6Header, TcpHeader, UdpHeader};

/// One checksum field of a packet: where it is, what it holds, what a full recomputation
/// over the packet's current bytes gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Field {
    /// Which checksum.
    pub what: &'static str,
    /// Offset of the field in the packet.
    pub at: usize,
    /// The value stored in the packet.
    pub stored: u16,
    /// The value etherparse computes.
    pub computed: u16,
}

/// The checksum fields of an IPv4/IPv6 + TCP/UDP packet (no IP options or extension
/// headers for the transport checksum), stored and recomputed by etherparse. Panics if
/// etherparse cannot slice the packet.
pub fn checksum_fields(b: &[u8]) -> Vec<Field> {
    let ip = IpSlice::from_slice(b).expect("etherparse slices the packet");
    let payload = ip.payload();
    let l4 = payload.payload.as_ptr() as usize - b.as_ptr() as usize;
    let seg = payload.payload;
    let mut out = Vec::new();
    enum Net {
        V4(Ipv4Header),
        V6(Ipv6Header),
    }
    let net = match &ip {
        IpSlice::Ipv4(v4) => {
            let h = v4.header().to_header();
            out.push(Field {
                what: "ipv4 header",
                at: 10,
                stored: h.header_checksum,
                computed: h.calc_header_checksum(),
            });
            Net::V4(h)
        }
        IpSlice::Ipv6(v6) => Net::V6(v6.header().to_header()),
    };
    if payload.fragmented {
        return out;
    }
    match payload.ip_number.0 {
        6 => {
            let (t, data) = TcpHeader::from_slice(seg).expect("TCP header");
            let computed = match &net {
                Net::V4(h) => t.calc_checksum_ipv4(h, data).unwrap(),
                Net::V6(h) => t.calc_checksum_ipv6(h, data).unwrap(),
            };
            out.push(Field {
                what: "tcp",
                at: l4 + 16,
                stored: t.checksum,
                computed,
            });
        }
        17 => {
            let (u, _) = UdpHeader::from_slice(seg).expect("UDP header");
            let data = &seg[8..u.length as usize];
            let computed = match &net {
                Net::V4(h) => u.calc_checksum_ipv4(h, data).unwrap(),
                Net::V6(h) => u.calc_checksum_ipv6(h, data).unwrap(),
            };
            out.push(Field {
                what: "udp",
                at: l4 + 6,
                stored: u.checksum,
                computed,
            });
        }
        _ => {}
    }
    out
}

/// Assert every checksum of `b` equals etherparse's full recomputation.
#[track_caller]
pub fn assert_checksums(b: &[u8]) {
    let fields = checksum_fields(b);
    for f in &fields {
        assert_eq!(
            f.stored, f.computed,
            "{} checksum at {}: stored {:#06x}, recomputed {:#06x}",
            f.what, f.at, f.stored, f.computed
        );
    }
}

/// The offsets of the bytes where `a` and `b` differ (same length required).
pub fn diff_offsets(a: &[u8], b: &[u8]) -> Vec<usize> {
    assert_eq!(a.len(), b.len());
    (0..a.len()).filter(|&i| a[i] != b[i]).collect()
}
