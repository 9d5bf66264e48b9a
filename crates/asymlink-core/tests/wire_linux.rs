//! `Headers::parse` and `Headers::emit` against real Linux packets (see `common/linux.rs`
//! for how they were captured): the fields come out right, and re-emitting a parsed Linux
//! packet gives back the same bytes.

mod common;

use asymlink_core::wire::{
    mutate, Ecn, Headers, IpRepr, SackBlock, SackBlocks, SeqNumber, TcpFlags, Timestamp, Transport,
};
use common::linux::*;
use common::{assert_checksums, diff_offsets};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use etherparse::{TcpHeader, TcpOptionElement};

/// Every captured packet, by name.
const ALL: &[(&str, &[u8])] = &[
    ("V4_SYN", &V4_SYN),
    ("V4_SYN_ACK", &V4_SYN_ACK),
    ("V4_ACK", &V4_ACK),
    ("V4_DATA", &V4_DATA),
    ("V4_DATA_REPLY", &V4_DATA_REPLY),
    ("V4_FIN", &V4_FIN),
    ("V4_FIN_REPLY", &V4_FIN_REPLY),
    ("V6_SYN", &V6_SYN),
    ("V6_SYN_ACK", &V6_SYN_ACK),
    ("V6_ACK", &V6_ACK),
    ("V6_DATA", &V6_DATA),
    ("V6_FIN", &V6_FIN),
    ("V4_NOTS_SYN", &V4_NOTS_SYN),
    ("V4_NOTS_SYN_ACK", &V4_NOTS_SYN_ACK),
    ("V4_NOTS_ACK", &V4_NOTS_ACK),
    ("V4_NOSACK_SYN", &V4_NOSACK_SYN),
    ("V4_NOSACK_SYN_ACK", &V4_NOSACK_SYN_ACK),
    ("V4_BARE_SYN", &V4_BARE_SYN),
    ("V4_BARE_SYN_ACK", &V4_BARE_SYN_ACK),
    ("V4_BARE_ACK", &V4_BARE_ACK),
    ("V4_ECN_SYN", &V4_ECN_SYN),
    ("V4_ECN_SYN_ACK", &V4_ECN_SYN_ACK),
    ("V4_ECN_DATA", &V4_ECN_DATA),
];

const A: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 1));
const B: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 77, 0, 2));
const A6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0xa1, 0, 0, 0, 0, 0, 1));
const B6: IpAddr = IpAddr::V6(Ipv6Addr::new(0xfd00, 0xa1, 0, 0, 0, 0, 0, 2));
const SERVER_PORT: u16 = 47001;

#[track_caller]
fn parse(b: &[u8]) -> Headers {
    let (h, layout) = Headers::parse(b).expect("parses");
    assert_eq!(layout.ip_len, b.len());
    h
}

#[track_caller]
fn tcp(h: &Headers) -> asymlink_core::wire::TcpRepr {
    *h.tcp_repr().expect("TCP")
}

#[test]
fn captured_checksums_are_full() {
    // The capture had offloads off: every checksum is on the wire, not left to hardware.
    for (name, b) in ALL {
        let fields = common::checksum_fields(b);
        assert!(fields.iter().any(|f| f.what == "tcp"), "{name}");
        for f in fields {
            assert_eq!(f.stored, f.computed, "{name}: {f:?}");
        }
    }
}

#[test]
fn v4_syn() {
    let h = parse(&V4_SYN);
    assert_eq!(
        h.ip,
        IpRepr {
            src: A,
            dst: B,
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: 64,
            ident: 25530,
            dont_frag: true,
            flow_label: 0,
            extensions: false,
            auth: false,
        }
    );
    assert_eq!(h.payload_len, 0);
    let t = tcp(&h);
    assert_eq!((t.src_port, t.dst_port), (49234, SERVER_PORT));
    assert_eq!(t.seq, SeqNumber(0x3887_15d3));
    assert_eq!(t.ack, SeqNumber(0));
    assert_eq!(t.flags, TcpFlags::SYN);
    assert_eq!(t.window, 64240);
    assert_eq!(t.urgent, 0);
    assert_eq!(t.opts.mss, Some(1460));
    assert!(t.opts.sack_permitted);
    assert_eq!(
        t.opts.timestamp,
        Some(Timestamp {
            val: 0x6c2e_57d3,
            ecr: 0
        })
    );
    assert_eq!(t.opts.wscale, Some(10));
    assert!(t.opts.sack.is_empty());
    assert!(!t.opts.other);
    assert_eq!(t.header_len(), 40);
    assert!(h.is_syn_fin_rst() && !h.is_pure_ack() && !h.carries_data());
}

#[test]
fn v4_syn_ack() {
    let h = parse(&V4_SYN_ACK);
    assert_eq!((h.ip.src, h.ip.dst, h.ip.ident), (B, A, 0));
    let t = tcp(&h);
    assert_eq!((t.src_port, t.dst_port), (SERVER_PORT, 49234));
    assert_eq!(t.flags, TcpFlags::SYN | TcpFlags::ACK);
    assert_eq!(t.seq, SeqNumber(0xec43_53e8));
    // The SYN-ACK acknowledges the SYN's sequence number + 1 and echoes its TSval.
    assert_eq!(t.ack, tcp(&parse(&V4_SYN)).seq + 1);
    assert_eq!(t.window, 65160);
    assert_eq!(t.opts.mss, Some(1460));
    assert!(t.opts.sack_permitted);
    assert_eq!(
        t.opts.timestamp,
        Some(Timestamp {
            val: 0x0aaf_120e,
            ecr: 0x6c2e_57d3
        })
    );
    assert_eq!(t.opts.wscale, Some(10));
}

#[test]
fn v4_pure_ack_with_timestamps() {
    let h = parse(&V4_ACK);
    assert!(h.is_pure_ack());
    let t = tcp(&h);
    assert_eq!(t.flags, TcpFlags::ACK);
    assert_eq!(t.seq, SeqNumber(0x3887_15d4));
    assert_eq!(t.ack, SeqNumber(0xec43_53e9));
    assert_eq!(t.window, 63); // scaled by 2^10 after the handshake
    assert_eq!(
        t.opts.timestamp,
        Some(Timestamp {
            val: 0x6c2e_57d4,
            ecr: 0x0aaf_120e
        })
    );
    assert_eq!(
        (t.opts.mss, t.opts.wscale, t.opts.sack_permitted),
        (None, None, false)
    );
    assert_eq!(t.header_len(), 32);
    assert_eq!(h.ip_len(), 52);
}

#[test]
fn v4_data_segment() {
    let h = parse(&V4_DATA);
    assert_eq!(h.payload_len, 64);
    assert!(h.carries_data() && !h.is_pure_ack());
    let t = tcp(&h);
    assert_eq!(t.flags, TcpFlags::PSH | TcpFlags::ACK);
    assert_eq!(t.seq, SeqNumber(0x3887_15d4));
    // The reply acknowledges exactly the 64 bytes.
    let r = parse(&V4_DATA_REPLY);
    assert_eq!(r.payload_len, 32);
    assert_eq!(tcp(&r).ack, t.seq + 64);
}

#[test]
fn v4_fin() {
    let h = parse(&V4_FIN);
    let t = tcp(&h);
    assert_eq!(t.flags, TcpFlags::FIN | TcpFlags::ACK);
    assert_eq!(t.seq, SeqNumber(0x3887_15d4) + 64);
    assert!(h.is_syn_fin_rst() && !h.is_pure_ack());
    let r = tcp(&parse(&V4_FIN_REPLY));
    assert_eq!(r.flags, TcpFlags::FIN | TcpFlags::ACK);
    assert_eq!(r.ack, t.seq + 1); // the FIN takes one sequence number
}

#[test]
fn v6_syn() {
    let h = parse(&V6_SYN);
    assert_eq!(
        h.ip,
        IpRepr {
            src: A6,
            dst: B6,
            dscp: 0,
            ecn: Ecn::NotEct,
            ttl: 64,
            ident: 0,
            dont_frag: false,
            flow_label: 0x3b00d,
            extensions: false,
            auth: false,
        }
    );
    let t = tcp(&h);
    assert_eq!((t.src_port, t.dst_port), (36600, SERVER_PORT));
    assert_eq!(t.flags, TcpFlags::SYN);
    assert_eq!(t.seq, SeqNumber(0x49bc_e231));
    assert_eq!(t.window, 64800);
    assert_eq!(t.opts.mss, Some(1440)); // 1500 - 40 - 20
    assert!(t.opts.sack_permitted);
    assert_eq!(
        t.opts.timestamp,
        Some(Timestamp {
            val: 0xeb27_0f45,
            ecr: 0
        })
    );
    assert_eq!(t.opts.wscale, Some(10));
    assert_eq!(h.ip_len(), 80);
    let sa = parse(&V6_SYN_ACK);
    assert_eq!((sa.ip.src, sa.ip.dst), (B6, A6));
    assert_eq!(tcp(&sa).ack, t.seq + 1);
    assert_eq!(parse(&V6_DATA).payload_len, 64);
}

#[test]
fn syn_option_layouts_without_timestamps_or_sack() {
    let t = tcp(&parse(&V4_NOTS_SYN));
    assert_eq!((t.opts.mss, t.opts.wscale), (Some(1460), Some(10)));
    assert!(t.opts.sack_permitted && t.opts.timestamp.is_none());
    assert_eq!(t.header_len(), 32);
    assert!(tcp(&parse(&V4_NOTS_ACK)).opts == Default::default());

    let t = tcp(&parse(&V4_NOSACK_SYN));
    assert!(!t.opts.sack_permitted && t.opts.timestamp.is_some());
    assert_eq!(t.header_len(), 40);

    let t = tcp(&parse(&V4_BARE_SYN));
    assert!(!t.opts.sack_permitted && t.opts.timestamp.is_none());
    assert_eq!((t.opts.mss, t.opts.wscale), (Some(1460), Some(10)));
    assert_eq!(t.header_len(), 28);
}

#[test]
fn ecn_handshake_and_dscp() {
    let h = parse(&V4_ECN_SYN);
    // RFC 3168 §6.1.1: an ECN-setup SYN has ECE and CWR; the IP header is not ECT.
    assert_eq!(tcp(&h).flags, TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR);
    assert_eq!((h.ip.dscp, h.ip.ecn), (46, Ecn::NotEct));
    assert!(h.has_ece_or_cwr());
    let sa = parse(&V4_ECN_SYN_ACK);
    assert_eq!(
        tcp(&sa).flags,
        TcpFlags::SYN | TcpFlags::ACK | TcpFlags::ECE
    );
    let d = parse(&V4_ECN_DATA);
    assert_eq!((d.ip.dscp, d.ip.ecn), (46, Ecn::Ect0));
    assert!(!d.has_ece_or_cwr());
}

/// The payload byte to re-emit a captured packet with.
fn fill_of(b: &[u8], h: &Headers) -> u8 {
    if h.payload_len > 0 {
        b[b.len() - 1]
    } else {
        0
    }
}

#[test]
fn emit_reproduces_every_linux_packet() {
    for (name, b) in ALL {
        let (h, layout) = Headers::parse(b).unwrap();
        assert_eq!(layout.l4_offset, h.ip.header_len(), "{name}");
        let mut out = Vec::new();
        h.emit(fill_of(b, &h), &mut out).unwrap();
        assert_eq!(
            out.as_slice(),
            *b,
            "{name}: emit(parse(b)) differs at {:?}",
            diff_offsets(&out, b)
        );
        assert_eq!(h.ip_len() as usize, b.len(), "{name}");
    }
}

#[test]
fn emit_appends_after_existing_bytes() {
    let h = parse(&V6_DATA);
    let mut out = vec![0xee; 3];
    h.emit(b'A', &mut out).unwrap();
    assert_eq!(&out[..3], &[0xee; 3]);
    assert_eq!(&out[3..], &V6_DATA[..]);
}

/// A SACK-carrying ACK as Linux lays it out (`NOP NOP TS NOP NOP SACK`), built from the
/// real pure ACK; cross-checked with etherparse's own option parser.
#[test]
fn sack_ack_built_with_emit_matches_etherparse() {
    for (base, blocks) in [
        (&V4_ACK[..], &[(0x0100u32, 0x0200u32), (0x0300, 0x0400)][..]),
        (
            &V4_ACK[..],
            &[
                (0xffff_ff00, 0x0000_0100),
                (0x1000, 0x2000),
                (0x3000, 0x4000),
            ][..],
        ),
        (&V6_ACK[..], &[(7, 8), (9, 10), (11, 12)][..]),
    ] {
        let mut h = parse(base);
        let t = h.tcp_repr_mut().unwrap();
        let mut sack = SackBlocks::new();
        for &(l, r) in blocks {
            assert!(sack.push(SackBlock {
                left: SeqNumber(l),
                right: SeqNumber(r),
            }));
        }
        t.opts.sack = sack;
        let ts = t.opts.timestamp.unwrap();
        let bytes = h.to_bytes().unwrap();
        assert_checksums(&bytes);

        // Linux layout: the base ACK's options, then NOP NOP SACK(n).
        let l4 = h.ip.header_len();
        let n = blocks.len();
        let hl = 32 + 4 + 8 * n;
        assert_eq!(bytes.len(), l4 + hl);
        assert_eq!(bytes[l4 + 12] >> 4, hl as u8 / 4);
        assert_eq!(&bytes[l4..l4 + 12], &base[l4..l4 + 12], "ports, seq, ack");
        assert_eq!(
            &bytes[l4 + 20..l4 + 32],
            &base[l4 + 20..l4 + 32],
            "NOP NOP TS"
        );
        assert_eq!(&bytes[l4 + 32..l4 + 36], &[1, 1, 5, 2 + 8 * n as u8]);

        // etherparse reads the same options.
        let (eh, rest) = TcpHeader::from_slice(&bytes[l4..]).unwrap();
        assert!(rest.is_empty());
        let opts: Vec<_> = eh.options_iterator().map(|o| o.unwrap()).collect();
        let mut more = [None; 3];
        for (i, &b) in blocks[1..].iter().enumerate() {
            more[i] = Some(b);
        }
        assert_eq!(
            opts,
            vec![
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::Timestamp(ts.val, ts.ecr),
                TcpOptionElement::Noop,
                TcpOptionElement::Noop,
                TcpOptionElement::SelectiveAcknowledgement(blocks[0], more),
            ]
        );

        // And ours reads back what was written.
        let (back, _) = Headers::parse(&bytes).unwrap();
        assert_eq!(back, h);
        assert!(back.is_pure_ack());
    }
}

#[test]
fn rewriting_a_real_packet_keeps_checksums_right() {
    for (name, b) in ALL {
        let (h, layout) = Headers::parse(b).unwrap();
        let mut buf = b.to_vec();
        assert_eq!(mutate::tcp_window(&buf, &layout), Some(tcp(&h).window));
        assert!(mutate::set_tcp_window(&mut buf, &layout, 7));
        assert_eq!(mutate::tcp_window(&buf, &layout), Some(7));
        assert!(mutate::set_dscp_ecn(&mut buf, 10, Ecn::Ce));
        assert_checksums(&buf);
        let (h2, _) = Headers::parse(&buf).unwrap();
        let mut want = h;
        want.tcp_repr_mut().unwrap().window = 7;
        want.ip.dscp = 10;
        want.ip.ecn = Ecn::Ce;
        assert_eq!(h2, want, "{name}");
        // Re-emitting the rewritten headers gives the rewritten bytes.
        let mut out = Vec::new();
        h2.emit(fill_of(b, &h2), &mut out).unwrap();
        assert_eq!(out, buf, "{name}");
    }
}

#[test]
fn transport_is_tcp_everywhere() {
    for (name, b) in ALL {
        assert!(matches!(parse(b).transport, Transport::Tcp(_)), "{name}");
    }
}
