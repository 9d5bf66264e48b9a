//! Malformed, unusual and hostile input, as literal bytes (smoltcp `test_truncated` /
//! `test_impossible_len` style). Each must give a clear `ParseError` or a correct
//! `Headers` — never a panic — and the in-place edits must refuse layouts that do not fit.
//!
//! Checksum fields in these literals are zero unless a test needs them: `parse` does not
//! verify checksums (a middlebox forwards what it cannot vouch for).

mod common;

use asymlink_core::checksum;
use asymlink_core::wire::{
    mutate, Ecn, Headers, Layout, ParseError, SeqNumber, TcpFlags, TcpOptions, Transport,
};
use common::assert_checksums;
use core::net::{IpAddr, Ipv4Addr};

/// IPv4 (20) + TCP (20) + 4 bytes of payload: 10.0.0.1:1234 -> 10.0.0.2:80, seq 1, ack 2,
/// PSH|ACK, window 4096.
const V4_TCP: [u8; 44] = [
    0x45, 0x00, 0x00, 0x2c, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0x00, 0x00, 10, 0, 0, 1, //
    10, 0, 0, 2, 0x04, 0xd2, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x02, //
    0x50, 0x18, 0x10, 0x00, 0x00, 0x00, 0x00, 0x00, 0xaa, 0xbb, 0xcc, 0xdd,
];

/// IPv6 (40) + TCP (20), no payload: ::1 -> ::2, SYN.
const V6_TCP: [u8; 60] = [
    0x60, 0x00, 0x00, 0x00, 0x00, 0x14, 0x06, 0x40, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, //
    0, 0, 0, 0, 0, 0, 0, 2, 0x04, 0xd2, 0x00, 0x50, 0x00, 0x00, 0x00, 0x01, //
    0x00, 0x00, 0x00, 0x00, 0x50, 0x02, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00,
];

/// Fill in the IPv4 header checksum and the TCP/UDP checksum (no IP options or extension
/// headers after a v6 header are assumed by the transport part: the caller says where L4
/// starts).
fn fix_checksums(b: &mut [u8], l4: usize) {
    if b[0] >> 4 == 4 {
        let ihl = (b[0] & 15) as usize * 4;
        b[10] = 0;
        b[11] = 0;
        let c = checksum::finish(checksum::sum(&b[..ihl], 0));
        b[10..12].copy_from_slice(&c.to_be_bytes());
    }
    let (src, dst, proto): (IpAddr, IpAddr, u8) = if b[0] >> 4 == 4 {
        (
            Ipv4Addr::new(b[12], b[13], b[14], b[15]).into(),
            Ipv4Addr::new(b[16], b[17], b[18], b[19]).into(),
            b[9],
        )
    } else {
        let s: [u8; 16] = b[8..24].try_into().unwrap();
        let d: [u8; 16] = b[24..40].try_into().unwrap();
        (s.into(), d.into(), 6)
    };
    let at = l4 + if proto == 17 { 6 } else { 16 };
    b[at] = 0;
    b[at + 1] = 0;
    let pseudo = checksum::pseudo_header(src, dst, proto, (b.len() - l4) as u32);
    let c = checksum::finish(checksum::sum(&b[l4..], pseudo));
    b[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

#[track_caller]
fn ip_err(b: &[u8]) -> String {
    match Headers::parse(b) {
        Err(ParseError::Ip(m)) => m,
        other => panic!("expected ParseError::Ip, got {other:?}"),
    }
}

#[track_caller]
fn transport_err(b: &[u8]) -> String {
    match Headers::parse(b) {
        Err(ParseError::Transport(m)) => m,
        other => panic!("expected ParseError::Transport, got {other:?}"),
    }
}

/// The options of a packet that must parse (options never make a packet malformed, as in
/// Linux's `tcp_parse_options`).
#[track_caller]
fn opts_of(b: &[u8]) -> TcpOptions {
    match Headers::parse(b) {
        Ok((h, _)) => h.tcp_repr().expect("TCP").opts,
        other => panic!("expected a TCP packet, got {other:?}"),
    }
}

/// Options cut where Linux stops reading them: what came before is kept, the rest is
/// unknown, and the segment counts as possibly signed (never edited).
#[track_caller]
fn assert_cut(o: &TcpOptions) {
    assert!(o.other && o.signed, "{o:?}");
}

/// V4_TCP with `opts` (a multiple of 4 bytes) as TCP options.
fn v4_with_tcp_options(opts: &[u8]) -> Vec<u8> {
    assert_eq!(opts.len() % 4, 0);
    let mut b = V4_TCP[..40].to_vec();
    b.extend_from_slice(opts);
    b.extend_from_slice(&V4_TCP[40..]);
    let total = b.len() as u16;
    b[2..4].copy_from_slice(&total.to_be_bytes());
    b[32] = ((20 + opts.len()) as u8 / 4) << 4;
    b
}

#[test]
fn baseline_literals_parse() {
    let (h, l) = Headers::parse(&V4_TCP).unwrap();
    let t = h.tcp_repr().unwrap();
    assert_eq!(
        (t.src_port, t.dst_port, t.seq, t.ack),
        (1234, 80, SeqNumber(1), SeqNumber(2))
    );
    assert_eq!(t.flags, TcpFlags::PSH | TcpFlags::ACK);
    assert_eq!(
        (h.payload_len, l.l4_offset, l.l4_header_len, l.ip_len),
        (4, 20, 20, 44)
    );
    let (h, l) = Headers::parse(&V6_TCP).unwrap();
    assert_eq!(h.tcp_repr().unwrap().flags, TcpFlags::SYN);
    assert_eq!((h.payload_len, l.l4_offset, l.ip_len), (0, 40, 60));
}

// ------------------------------------------------------------------------------- IP layer

#[test]
fn test_empty() {
    assert!(!ip_err(&[]).is_empty());
}

#[test]
fn test_truncated() {
    // Every proper prefix of a valid packet is refused: the IP header or its length field
    // says more bytes are due.
    for b in [&V4_TCP[..], &V6_TCP[..]] {
        for n in 0..b.len() {
            assert!(
                Headers::parse(&b[..n]).is_err(),
                "prefix of {n} bytes parsed"
            );
        }
    }
}

#[test]
fn test_bad_version() {
    for v in [0x00u8, 0x10, 0x55, 0x75, 0xf5] {
        let mut b = V4_TCP;
        b[0] = v;
        ip_err(&b);
    }
}

#[test]
fn test_ihl_below_five() {
    for ihl in 0..5u8 {
        let mut b = V4_TCP;
        b[0] = 0x40 | ihl;
        ip_err(&b);
    }
}

#[test]
fn test_ihl_beyond_buffer() {
    let mut b = V4_TCP;
    b[0] = 0x4f; // 60-byte header in a 44-byte packet
    ip_err(&b);
    ip_err(&[
        0x46, 0, 0, 20, 0, 0, 0, 0, 64, 6, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2,
    ]);
}

#[test]
fn test_impossible_len() {
    // Total length beyond the buffer.
    let mut b = V4_TCP;
    b[2..4].copy_from_slice(&45u16.to_be_bytes());
    ip_err(&b);
    b[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    ip_err(&b);
    // Total length below the header (including 0, which TSO super-packets carry).
    for total in [0u16, 1, 19] {
        b[2..4].copy_from_slice(&total.to_be_bytes());
        ip_err(&b);
    }
    // Total length covering the IP header but not the TCP header.
    b[2..4].copy_from_slice(&30u16.to_be_bytes());
    transport_err(&b);
    // IPv6 payload length beyond the buffer.
    let mut b = V6_TCP;
    b[4..6].copy_from_slice(&21u16.to_be_bytes());
    ip_err(&b);
    // IPv6 payload length shorter than the TCP header.
    b[4..6].copy_from_slice(&19u16.to_be_bytes());
    transport_err(&b);
}

#[test]
fn test_trailing_link_padding() {
    // A 44-byte packet padded to 60 bytes by Ethernet's minimum frame: the padding is not
    // payload, and edits leave it alone.
    let mut b = V4_TCP.to_vec();
    fix_checksums(&mut b, 20);
    b.extend_from_slice(&[0x5a; 16]);
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!((h.payload_len, l.ip_len), (4, 44));
    assert!(mutate::set_tcp_window(&mut b, &l, 1));
    assert!(mutate::set_dscp_ecn(&mut b, 8, Ecn::Ect0));
    assert_eq!(&b[44..], &[0x5a; 16]);
    assert_checksums(&b[..44]);
    // IPv6 likewise.
    let mut b = V6_TCP.to_vec();
    b.extend_from_slice(&[0; 6]);
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!((h.payload_len, l.ip_len), (0, 60));
}

#[test]
fn test_jumbo_ish_ipv4() {
    // The largest IPv4 packet: 65535 bytes.
    let mut b = vec![0x41u8; 65535];
    b[..40].copy_from_slice(&V4_TCP[..40]);
    b[2..4].copy_from_slice(&0xffffu16.to_be_bytes());
    fix_checksums(&mut b, 20);
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!((h.payload_len, l.ip_len), (65535 - 40, 65535));
    let mut out = Vec::new();
    h.emit(0x41, &mut out).unwrap();
    assert_eq!(out, b);
    assert!(mutate::set_tcp_window(&mut b, &l, 0));
    assert_checksums(&b);
}

#[test]
fn test_ipv6_payload_length_zero() {
    // No payload and link padding after it: the padding is ignored.
    let mut b = V6_TCP[..40].to_vec();
    b[4] = 0;
    b[5] = 0;
    b[6] = 59; // no next header
    b.extend_from_slice(&[0; 8]);
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!(
        (h.transport, h.payload_len, l.ip_len),
        (Transport::Other(59), 0, 40)
    );
    // A jumbogram (RFC 2675: payload length 0, hop-by-hop header follows) is refused.
    b[6] = 0;
    assert!(ip_err(&b).contains("jumbogram"));
    // Payload length 0 with a TCP next header: the TCP header is missing.
    b[6] = 6;
    b.extend_from_slice(&[0; 20]);
    transport_err(&b);
}

/// An IP Authentication Header (RFC 4302) with a 12-byte ICV, followed by TCP.
fn ah(next: u8) -> Vec<u8> {
    let mut a = vec![next, 4, 0, 0, 0, 0, 0x10, 0x01, 0, 0, 0, 7];
    a.extend_from_slice(&[0x5a; 12]);
    a
}

#[test]
fn test_tcp_behind_ah_is_signed() {
    // IPv4: protocol 51 (AH), AH's next header TCP.
    let mut b = V4_TCP[..20].to_vec();
    b[9] = 51;
    b.extend_from_slice(&ah(6));
    b.extend_from_slice(&V4_TCP[20..]);
    let total = b.len() as u16;
    b[2..4].copy_from_slice(&total.to_be_bytes());
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!(l.l4_offset, 20 + 24);
    assert_eq!(h.tcp_repr().unwrap().src_port, 1234);
    assert!(h.ip.auth && h.ip.extensions && h.is_signed());
    // IPv6: next header 51, AH's next header TCP.
    let mut b = V6_TCP[..40].to_vec();
    b[6] = 51;
    b.extend_from_slice(&ah(6));
    b.extend_from_slice(&V6_TCP[40..]);
    let plen = (b.len() - 40) as u16;
    b[4..6].copy_from_slice(&plen.to_be_bytes());
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!(l.l4_offset, 40 + 24);
    assert!(h.ip.auth && h.is_signed());
    // The plain packets are not.
    assert!(!Headers::parse(&V4_TCP).unwrap().0.is_signed());
    assert!(!Headers::parse(&V6_TCP).unwrap().0.ip.extensions);
}

#[test]
fn test_tcp_reserved_flag_bits_are_kept() {
    let mut b = V4_TCP;
    b[32] |= 0x0e; // the three reserved bits
    let t = *Headers::parse(&b).unwrap().0.tcp_repr().unwrap();
    assert_eq!(t.flags, TcpFlags::PSH | TcpFlags::ACK | TcpFlags::RESERVED);
}

#[test]
fn test_ipv4_options() {
    // IHL 6: NOP NOP NOP EOL. The header is skipped; the TCP header is found after it.
    let mut b = vec![
        0x46, 0x00, 0x00, 0x30, 0x12, 0x34, 0x40, 0x00, 0x40, 0x06, 0, 0,
    ];
    b.extend_from_slice(&[10, 0, 0, 1, 10, 0, 0, 2, 0x01, 0x01, 0x01, 0x00]);
    b.extend_from_slice(&V4_TCP[20..]);
    fix_checksums(&mut b, 24);
    assert_checksums(&b);
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!((l.l4_offset, l.l4_header_len, l.ip_len), (24, 20, 48));
    let t = h.tcp_repr().unwrap();
    assert_eq!((t.src_port, t.dst_port, t.window), (1234, 80, 4096));
    assert_eq!(h.payload_len, 4);
    assert!(h.ip.extensions && !h.ip.auth && !h.is_signed());
    // Edits find the fields past the options and keep both checksums right.
    assert!(mutate::set_tcp_window(&mut b, &l, 77));
    assert!(mutate::set_dscp_ecn(&mut b, 46, Ecn::Ce));
    assert_checksums(&b);
    assert_eq!(mutate::tcp_window(&b, &l), Some(77));
    assert_eq!(&b[20..24], &[1, 1, 1, 0], "options untouched");
}

#[test]
fn test_ipv6_extension_headers() {
    // Hop-by-hop (PadN) then routing (type 2, one address) then TCP.
    let mut b = V6_TCP[..40].to_vec();
    b[6] = 0; // hop-by-hop
    b.extend_from_slice(&[43, 0, 0x01, 0x04, 0, 0, 0, 0]);
    b.extend_from_slice(&[6, 2, 2, 1, 0, 0, 0, 0]);
    b.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9]);
    b.extend_from_slice(&V6_TCP[40..]);
    b.extend_from_slice(&[0x77; 3]);
    let plen = (b.len() - 40) as u16;
    b[4..6].copy_from_slice(&plen.to_be_bytes());
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!(
        (l.l4_offset, l.l4_header_len, l.ip_len),
        (40 + 8 + 24, 20, b.len())
    );
    assert_eq!(h.tcp_repr().unwrap().flags, TcpFlags::SYN);
    assert_eq!(h.payload_len, 3);
    assert!(h.ip.extensions && !h.ip.auth && !h.is_signed());
    let before = b.clone();
    assert!(mutate::set_tcp_window(&mut b, &l, 5));
    assert_eq!(
        common::diff_offsets(&before, &b),
        [72 + 14, 72 + 15, 72 + 16, 72 + 17]
    );

    // Hop-by-hop that is not first is malformed (RFC 8200 §4.1).
    let mut bad = V6_TCP[..40].to_vec();
    bad[6] = 60; // destination options
    bad.extend_from_slice(&[0, 0, 0x01, 0x04, 0, 0, 0, 0]); // -> hop-by-hop
    bad.extend_from_slice(&[6, 0, 0x01, 0x04, 0, 0, 0, 0]);
    bad.extend_from_slice(&V6_TCP[40..]);
    let plen = (bad.len() - 40) as u16;
    bad[4..6].copy_from_slice(&plen.to_be_bytes());
    ip_err(&bad);

    // An extension header that overruns the payload.
    let mut bad = V6_TCP[..40].to_vec();
    bad[6] = 43;
    bad.extend_from_slice(&[6, 4, 2, 1, 0, 0, 0, 0]); // says 40 bytes, has 8
    bad[4..6].copy_from_slice(&8u16.to_be_bytes());
    ip_err(&bad);
}

#[test]
fn test_ipv4_fragments() {
    // First fragment (MF, offset 0) and a later one (offset 1480): opaque, whatever the
    // payload looks like; the window cannot be edited.
    for (frag, what) in [(0x2000u16, "first"), (0x00b9, "later"), (0x20b9, "middle")] {
        let mut b = V4_TCP;
        b[6..8].copy_from_slice(&frag.to_be_bytes());
        let (h, l) = Headers::parse(&b).unwrap();
        assert_eq!(h.transport, Transport::Other(6), "{what}");
        assert_eq!(
            (h.payload_len, l.l4_offset, l.l4_header_len),
            (24, 20, 0),
            "{what}"
        );
        let before = b;
        assert!(!mutate::set_tcp_window(&mut b, &l, 1), "{what}");
        assert_eq!(mutate::tcp_window(&b, &l), None);
        assert_eq!(b, before);
    }
    // A later fragment too short to hold a TCP header is still fine.
    let mut b = V4_TCP[..28].to_vec();
    b[2..4].copy_from_slice(&28u16.to_be_bytes());
    b[6..8].copy_from_slice(&0x0001u16.to_be_bytes());
    assert_eq!(Headers::parse(&b).unwrap().0.transport, Transport::Other(6));
}

#[test]
fn test_ipv6_fragments() {
    for (off_m, what) in [([0x00u8, 0x01], "first"), ([0x05, 0xc8], "later")] {
        let mut b = V6_TCP[..40].to_vec();
        b[6] = 44;
        b.extend_from_slice(&[6, 0, off_m[0], off_m[1], 0xde, 0xad, 0xbe, 0xef]);
        b.extend_from_slice(&V6_TCP[40..]);
        let plen = (b.len() - 40) as u16;
        b[4..6].copy_from_slice(&plen.to_be_bytes());
        let (h, l) = Headers::parse(&b).unwrap();
        assert_eq!(h.transport, Transport::Other(6), "{what}");
        assert_eq!(
            (h.payload_len, l.l4_offset, l.l4_header_len),
            (20, 48, 0),
            "{what}"
        );
        assert!(!mutate::set_tcp_window(&mut b.clone(), &l, 1));
    }
    // An atomic fragment (offset 0, no more fragments, RFC 6946) is a whole packet.
    let mut b = V6_TCP[..40].to_vec();
    b[6] = 44;
    b.extend_from_slice(&[6, 0, 0, 0, 0, 0, 0, 1]);
    b.extend_from_slice(&V6_TCP[40..]);
    b[4..6].copy_from_slice(&28u16.to_be_bytes());
    let (h, l) = Headers::parse(&b).unwrap();
    assert!(h.tcp_repr().is_some());
    assert_eq!(l.l4_offset, 48);
}

#[test]
fn test_other_protocols_of_any_length() {
    // ICMP, ICMPv6, GRE, ... are opaque, even when shorter than their own headers.
    for (proto, len) in [(1u8, 0usize), (1, 4), (1, 8), (58, 2), (47, 3), (132, 0)] {
        let mut b = V4_TCP[..20].to_vec();
        b[9] = proto;
        b.extend(std::iter::repeat_n(0x11, len));
        let total = b.len() as u16;
        b[2..4].copy_from_slice(&total.to_be_bytes());
        let (h, l) = Headers::parse(&b).unwrap();
        assert_eq!(h.transport, Transport::Other(proto));
        assert_eq!(
            (h.payload_len as usize, l.l4_offset, l.l4_header_len),
            (len, 20, 0)
        );
        let mut out = Vec::new();
        h.emit(0x11, &mut out).unwrap();
        assert_eq!(out[20..], b[20..]);
    }
}

// ------------------------------------------------------------------------------- UDP

#[test]
fn test_udp_lengths() {
    let mut b = V4_TCP[..20].to_vec();
    b[9] = 17;
    b.extend_from_slice(&[0x00, 0x35, 0x13, 0x88, 0x00, 0x0c, 0x00, 0x00, 1, 2, 3, 4]);
    b[2..4].copy_from_slice(&32u16.to_be_bytes());
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!(h.payload_len, 4);
    assert_eq!(l.l4_header_len, 8);
    // Length 0 (legal only in IPv6 jumbograms), below 8, beyond the IP payload.
    for len in [0u16, 1, 7, 13, 0xffff] {
        let mut bad = b.clone();
        bad[24..26].copy_from_slice(&len.to_be_bytes());
        transport_err(&bad);
    }
    // Shorter than the IP payload: the rest is not UDP payload.
    b[24..26].copy_from_slice(&9u16.to_be_bytes());
    assert_eq!(Headers::parse(&b).unwrap().0.payload_len, 1);
    // Truncated header.
    let mut short = b[..26].to_vec();
    short[2..4].copy_from_slice(&26u16.to_be_bytes());
    transport_err(&short);
}

// ------------------------------------------------------------------------------- TCP header

#[test]
fn test_tcp_data_offset_below_five() {
    for off in 0..5u8 {
        let mut b = V4_TCP;
        b[32] = off << 4;
        assert!(transport_err(&b).contains("TCP"), "data offset {off}");
    }
}

#[test]
fn test_tcp_data_offset_beyond_segment() {
    let mut b = V4_TCP;
    b[40..44].copy_from_slice(&[1, 1, 1, 1]);
    b[32] = 6 << 4; // 24-byte header in a 24-byte segment: fits (four NOPs), payload 0
    let (h, l) = Headers::parse(&b).unwrap();
    assert_eq!((l.l4_header_len, h.payload_len), (24, 0));
    b[32] = 7 << 4; // 28 bytes in 24
    transport_err(&b);
    b[32] = 15 << 4;
    transport_err(&b);
}

#[test]
fn test_tcp_options_overrun_cut_the_list() {
    // Timestamps option says 10 bytes, 8 remain in the header: Linux stops there.
    let o = opts_of(&v4_with_tcp_options(&[1, 1, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0]));
    assert_cut(&o);
    assert_eq!(o.timestamp, None);
    // A lone trailing kind byte, after a readable MSS.
    let o = opts_of(&v4_with_tcp_options(&[2, 4, 0x05, 0xb4, 1, 1, 1, 2]));
    assert_cut(&o);
    assert_eq!(o.mss, Some(1460));
    // Unknown kind whose length overruns.
    assert_cut(&opts_of(&v4_with_tcp_options(&[1, 1, 0x99, 40])));
}

#[test]
fn test_tcp_option_length_zero_or_one_cuts_the_list() {
    for kind in [2u8, 5, 8, 30, 0xfe] {
        for len in [0u8, 1] {
            let o = opts_of(&v4_with_tcp_options(&[kind, len, 0, 0]));
            assert_cut(&o);
            assert_eq!((o.mss, o.timestamp, o.sack.len()), (None, None, 0));
        }
    }
}

#[test]
fn test_tcp_unknown_options_are_skipped() {
    // MSS, an unknown kind 0x99 of length 6, MD5 (19, 18 bytes), EOL, then TS after EOL
    // (ignored: nothing after end-of-list is an option).
    let mut opts = vec![2, 4, 0x05, 0xb4, 0x99, 6, 1, 2, 3, 4];
    opts.extend_from_slice(&[19, 18]);
    opts.extend_from_slice(&[0xab; 16]);
    opts.extend_from_slice(&[0, 0, 0, 0]);
    let b = v4_with_tcp_options(&opts);
    let (h, l) = Headers::parse(&b).unwrap();
    let o = h.tcp_repr().unwrap().opts;
    assert!(o.other);
    assert_eq!(o.mss, Some(1460));
    assert_eq!(l.l4_header_len, 20 + 32);
    assert_eq!(h.payload_len, 4);
    // Known options after an unknown one are still read.
    let b = v4_with_tcp_options(&[0xfd, 4, 0xee, 0xee, 1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
    let o = Headers::parse(&b).unwrap().0.tcp_repr().unwrap().opts;
    assert!(o.other);
    assert_eq!(o.timestamp.map(|t| (t.val, t.ecr)), Some((7, 9)));
    // Nothing unknown: not flagged.
    let b = v4_with_tcp_options(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9]);
    assert!(!Headers::parse(&b).unwrap().0.tcp_repr().unwrap().opts.other);
}

#[test]
fn test_tcp_sack_lengths() {
    // 2 + 8n is required: 2 (no block), 3, 9, 11, 12 are skipped as Linux skips them (the
    // packet parses; the option is unknown, the list was read to its end).
    for len in [2u8, 3, 9, 11, 12] {
        let mut opts = vec![1, 1, 5, len];
        opts.resize(4 + len as usize - 2, 0);
        opts.resize(opts.len().div_ceil(4) * 4, 0);
        let o = opts_of(&v4_with_tcp_options(&opts));
        assert!(
            o.other && !o.signed && o.sack.is_empty(),
            "SACK length {len}: {o:?}"
        );
    }
    // 2 + 8·4 = 34 is the most a header can hold; all four blocks come back in order.
    let mut opts = vec![1, 1, 5, 34];
    for i in 0..8u32 {
        opts.extend_from_slice(&(i * 100).to_be_bytes());
    }
    let b = v4_with_tcp_options(&opts);
    let o = Headers::parse(&b).unwrap().0.tcp_repr().unwrap().opts;
    let blocks: Vec<_> = o.sack.iter().map(|s| (s.left.0, s.right.0)).collect();
    assert_eq!(blocks, [(0, 100), (200, 300), (400, 500), (600, 700)]);
    // (Five blocks cannot be written: even split over several SACK options they need
    // 4 + 8·5 > 40 bytes, so the parser's "more than four SACK blocks" is defensive.)
}

#[test]
fn test_tcp_known_options_with_wrong_lengths_are_skipped() {
    for opts in [
        [2u8, 3, 0, 1], // MSS of 3 bytes
        [3, 4, 7, 0],   // window scale of 4 bytes
        [4, 3, 0, 1],   // SACK-permitted of 3 bytes
        [8, 4, 0, 0],   // timestamps of 4 bytes
    ] {
        let o = opts_of(&v4_with_tcp_options(&opts));
        assert!(o.other && !o.signed, "{opts:?}: {o:?}");
        assert_eq!(
            (o.mss, o.wscale, o.sack_permitted, o.timestamp),
            (None, None, false, None)
        );
    }
    // An option after a skipped one is still read.
    let o = opts_of(&v4_with_tcp_options(&[
        2, 3, 0, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9, 1, 1,
    ]));
    assert_eq!(o.timestamp.map(|t| (t.val, t.ecr)), Some((7, 9)));
}

#[test]
fn test_tcp_signature_options_mark_the_segment_signed() {
    // TCP-MD5 (kind 19, 18 bytes) and TCP-AO (kind 29, here 16 bytes).
    let mut md5 = vec![1, 1, 19, 18];
    md5.extend_from_slice(&[0xab; 16]);
    let (h, _) = Headers::parse(&v4_with_tcp_options(&md5)).unwrap();
    assert!(h.tcp_repr().unwrap().opts.signed && h.is_signed());
    let mut ao = vec![1, 1, 29, 16, 3, 4];
    ao.extend_from_slice(&[0xcd; 12]);
    ao.extend_from_slice(&[1, 1]);
    let (h, _) = Headers::parse(&v4_with_tcp_options(&ao)).unwrap();
    assert!(h.is_signed());
    // Timestamps only: not signed.
    let (h, _) =
        Headers::parse(&v4_with_tcp_options(&[1, 1, 8, 10, 0, 0, 0, 7, 0, 0, 0, 9])).unwrap();
    assert!(!h.is_signed());
}

#[test]
fn test_parsed_nonlinux_layout_reemits_and_reparses() {
    // Packed options in an order Linux never uses (WS, TS, SACK-permitted, MSS, EOL pad):
    // the bytes differ on re-emission, the meaning does not.
    let opts = [
        3, 3, 7, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2, 4, 2, 2, 4, 0x05, 0xb4, 0,
    ];
    let b = v4_with_tcp_options(&opts);
    let (h, _) = Headers::parse(&b).unwrap();
    let o = h.tcp_repr().unwrap().opts;
    assert_eq!(
        (o.mss, o.wscale, o.sack_permitted),
        (Some(1460), Some(7), true)
    );
    let mut out = Vec::new();
    h.emit(0, &mut out).unwrap();
    assert_eq!(Headers::parse(&out).unwrap().0, h);
    assert_checksums(&out);
}

// ------------------------------------------------------------------------------- mutate

#[test]
fn mutate_refuses_layouts_that_do_not_fit() {
    let mut good = V4_TCP.to_vec();
    fix_checksums(&mut good, 20);
    let (_, l) = Headers::parse(&good).unwrap();
    let bad_layouts = [
        Layout {
            l4_header_len: 8,
            ..l
        }, // UDP
        Layout {
            l4_header_len: 0,
            ..l
        }, // opaque
        Layout { l4_offset: 30, ..l }, // header runs past ip_len
        Layout { ip_len: 100, ..l },   // packet runs past the buffer
        Layout {
            l4_offset: usize::MAX - 5,
            ..l
        }, // overflow bait
        Layout {
            l4_offset: usize::MAX,
            l4_header_len: usize::MAX,
            ip_len: usize::MAX,
        },
        Layout {
            l4_header_len: 60,
            ..l
        }, // header longer than the packet
    ];
    for bad in bad_layouts {
        let mut b = good.clone();
        assert!(!mutate::set_tcp_window(&mut b, &bad, 1), "{bad:?}");
        assert_eq!(mutate::tcp_window(&b, &bad), None, "{bad:?}");
        assert_eq!(b, good, "{bad:?}");
    }
    // A correct layout on a buffer cut short.
    let mut short = good[..30].to_vec();
    assert!(!mutate::set_tcp_window(&mut short, &l, 1));
    assert_eq!(short, good[..30]);
    // The window is already the value asked for: nothing changes, and that is success.
    let mut b = good.clone();
    assert!(mutate::set_tcp_window(&mut b, &l, 4096));
    assert_eq!(b, good);
}

#[test]
fn set_dscp_ecn_refuses_what_is_not_an_ip_header() {
    let cases: [&[u8]; 7] = [
        &[],
        &V4_TCP[..19], // short IPv4 header
        &[0x44; 20],   // IHL 4
        &[0x46; 20],   // IHL 6, 20 bytes
        &V6_TCP[..39], // short IPv6 header
        &[0x55; 40],   // version 5
        &[0x00; 40],   // version 0
    ];
    for c in cases {
        let mut b = c.to_vec();
        assert!(!mutate::set_dscp_ecn(&mut b, 46, Ecn::Ce), "{c:?}");
        assert_eq!(b, c);
    }
}
