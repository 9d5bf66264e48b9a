//! Property tests of the packet layer: round trips, checksums against etherparse's
//! independent computation, in-place rewrites that touch only what they must, and
//! sequence-number order across wraparound.
//!
//! Case counts are modest (the whole file runs in well under a second in debug builds);
//! raise them locally with `PROPTEST_CASES=100000 cargo test -p asymlink-core --test wire_props`.

mod common;

use asymlink_core::wire::{
    mutate, Ecn, EmitError, Headers, IpRepr, SackBlock, SackBlocks, SeqNumber, TcpFlags,
    TcpOptions, TcpRepr, Timestamp, Transport, UdpRepr,
};
use common::{assert_checksums, diff_offsets};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use proptest::prelude::*;

fn config() -> ProptestConfig {
    ProptestConfig {
        cases: 256,
        ..ProptestConfig::default()
    }
}

fn ecn() -> impl Strategy<Value = Ecn> {
    prop_oneof![
        Just(Ecn::NotEct),
        Just(Ecn::Ect1),
        Just(Ecn::Ect0),
        Just(Ecn::Ce)
    ]
}

/// A valid IP header: IPv4 (no flow label) or IPv6 (no ident, no DF), DSCP < 64.
fn ip_repr() -> impl Strategy<Value = IpRepr> {
    let v4 = (
        any::<u32>(),
        any::<u32>(),
        0u8..64,
        ecn(),
        any::<u8>(),
        any::<u16>(),
        any::<bool>(),
    )
        .prop_map(|(s, d, dscp, ecn, ttl, ident, df)| IpRepr {
            src: IpAddr::V4(Ipv4Addr::from(s)),
            dst: IpAddr::V4(Ipv4Addr::from(d)),
            dscp,
            ecn,
            ttl,
            ident,
            dont_frag: df,
            flow_label: 0,
            extensions: false,
            auth: false,
        });
    let v6 = (
        any::<u128>(),
        any::<u128>(),
        0u8..64,
        ecn(),
        any::<u8>(),
        0u32..(1 << 20),
    )
        .prop_map(|(s, d, dscp, ecn, ttl, fl)| IpRepr {
            src: IpAddr::V6(Ipv6Addr::from(s)),
            dst: IpAddr::V6(Ipv6Addr::from(d)),
            dscp,
            ecn,
            ttl,
            ident: 0,
            dont_frag: false,
            flow_label: fl,
            extensions: false,
            auth: false,
        });
    prop_oneof![v4, v6]
}

fn sack_blocks() -> impl Strategy<Value = SackBlocks> {
    prop::collection::vec((any::<u32>(), any::<u32>()), 0..=4).prop_map(|v| {
        let mut s = SackBlocks::new();
        for (l, r) in v {
            s.push(SackBlock {
                left: SeqNumber(l),
                right: SeqNumber(r),
            });
        }
        s
    })
}

/// Any combination of the options we understand (including ones that do not fit; callers
/// filter on `options_len() <= 40`).
fn tcp_options() -> impl Strategy<Value = TcpOptions> {
    (
        prop::option::of(any::<u16>()),
        prop::option::of(any::<u8>()),
        any::<bool>(),
        prop::option::of((any::<u32>(), any::<u32>())),
        sack_blocks(),
    )
        .prop_map(|(mss, wscale, sack_permitted, ts, sack)| TcpOptions {
            mss,
            wscale,
            sack_permitted,
            timestamp: ts.map(|(val, ecr)| Timestamp { val, ecr }),
            sack,
            other: false,
            signed: false,
        })
}

fn tcp_repr() -> impl Strategy<Value = TcpRepr> {
    (
        any::<u16>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        // The 9 flags (the checksum oracle, etherparse, drops the reserved bits).
        0u16..0x200,
        any::<u16>(),
        any::<u16>(),
        tcp_options(),
    )
        .prop_map(|(sp, dp, seq, ack, flags, window, urgent, opts)| TcpRepr {
            src_port: sp,
            dst_port: dp,
            seq: SeqNumber(seq),
            ack: SeqNumber(ack),
            flags: TcpFlags(flags),
            window,
            urgent,
            opts,
        })
        .prop_filter("options fit in 40 bytes", |t| t.options_len() <= 40)
}

/// Protocols that are neither TCP/UDP nor an IP extension header: they round-trip as
/// `Transport::Other`.
const OPAQUE_PROTOCOLS: &[u8] = &[1, 2, 4, 41, 47, 58, 59, 89, 103, 132];

fn transport() -> impl Strategy<Value = Transport> {
    prop_oneof![
        3 => tcp_repr().prop_map(Transport::Tcp),
        1 => (any::<u16>(), any::<u16>())
            .prop_map(|(s, d)| Transport::Udp(UdpRepr { src_port: s, dst_port: d })),
        1 => prop::sample::select(OPAQUE_PROTOCOLS).prop_map(Transport::Other),
    ]
}

fn headers() -> impl Strategy<Value = Headers> {
    (ip_repr(), transport(), 0u32..4000).prop_map(|(ip, transport, payload_len)| Headers {
        ip,
        transport,
        payload_len,
    })
}

fn tcp_headers() -> impl Strategy<Value = Headers> {
    (ip_repr(), tcp_repr(), 0u32..2000).prop_map(|(ip, t, n)| Headers::tcp(ip, t, n))
}

proptest! {
    #![proptest_config(config())]

    /// `parse(emit(h)) == h`, the layout describes the bytes, and etherparse agrees with
    /// every checksum.
    #[test]
    fn emit_then_parse_is_identity(h in headers(), fill in any::<u8>()) {
        let mut b = Vec::new();
        h.emit(fill, &mut b).unwrap();
        prop_assert_eq!(b.len(), h.ip_len() as usize);
        let (back, layout) = Headers::parse(&b).unwrap();
        prop_assert_eq!(back, h);
        prop_assert_eq!(layout.ip_len, b.len());
        prop_assert_eq!(layout.l4_offset, h.ip.header_len());
        let l4_len = match h.transport {
            Transport::Tcp(t) => t.header_len(),
            Transport::Udp(_) => 8,
            Transport::Other(_) => 0,
        };
        prop_assert_eq!(layout.l4_header_len, l4_len);
        prop_assert!(b[layout.l4_offset + l4_len..].iter().all(|&x| x == fill));
        assert_checksums(&b);
    }

    /// Link-layer padding after the IP total length changes nothing.
    #[test]
    fn trailing_padding_is_ignored(h in headers(), pad in prop::collection::vec(any::<u8>(), 1..64)) {
        let mut b = h.to_bytes().unwrap();
        let (want, want_layout) = Headers::parse(&b).unwrap();
        b.extend_from_slice(&pad);
        let (got, layout) = Headers::parse(&b).unwrap();
        prop_assert_eq!(got, want);
        prop_assert_eq!(layout, want_layout);
    }

    /// Any truncation of a valid packet is an error (the IP length says more bytes were
    /// due), never a panic and never a shorter packet.
    #[test]
    fn truncation_is_detected(h in headers(), cut in any::<prop::sample::Index>()) {
        let b = h.to_bytes().unwrap();
        let n = cut.index(b.len());
        prop_assert!(Headers::parse(&b[..n]).is_err(), "parsed a packet cut to {} of {}", n, b.len());
    }

    /// Emitting a TCP header whose options were packed (Linux layout over 40 bytes) still
    /// round-trips and verifies.
    #[test]
    fn every_fitting_option_set_round_trips(ip in ip_repr(), t in tcp_repr()) {
        let h = Headers::tcp(ip, t, 0);
        let b = h.to_bytes().unwrap();
        prop_assert_eq!(b.len() % 4, 0);
        prop_assert_eq!(Headers::parse(&b).unwrap().0, h);
        let (eh, _) = etherparse::TcpHeader::from_slice(&b[ip.header_len()..]).unwrap();
        prop_assert!(eh.options_iterator().all(|o| o.is_ok()));
    }

    /// `set_tcp_window` changes the window and the TCP checksum, nothing else, and the
    /// checksum equals a full recomputation.
    #[test]
    fn set_tcp_window_is_exact(h in tcp_headers(), fill in any::<u8>(), w in any::<u16>()) {
        let mut b = Vec::new();
        h.emit(fill, &mut b).unwrap();
        let orig = b.clone();
        let (_, layout) = Headers::parse(&b).unwrap();
        prop_assert!(mutate::set_tcp_window(&mut b, &layout, w));
        assert_checksums(&b);
        let l4 = layout.l4_offset;
        for at in diff_offsets(&orig, &b) {
            prop_assert!((l4 + 14..l4 + 18).contains(&at), "byte {} changed", at);
        }
        let (back, _) = Headers::parse(&b).unwrap();
        let mut want = h;
        want.tcp_repr_mut().unwrap().window = w;
        prop_assert_eq!(back, want);
        // Identical to emitting the edited headers from scratch.
        let mut fresh = Vec::new();
        want.emit(fill, &mut fresh).unwrap();
        prop_assert_eq!(fresh, b);
    }

    /// `set_dscp_ecn` changes the traffic-class bits (and the IPv4 header checksum),
    /// nothing else; transport checksums are not affected.
    #[test]
    fn set_dscp_ecn_is_exact(h in headers(), dscp in 0u8..64, e in ecn()) {
        let mut b = h.to_bytes().unwrap();
        let orig = b.clone();
        prop_assert!(mutate::set_dscp_ecn(&mut b, dscp, e));
        assert_checksums(&b);
        let allowed: &[usize] = if h.ip.src.is_ipv4() { &[1, 10, 11] } else { &[0, 1] };
        for at in diff_offsets(&orig, &b) {
            prop_assert!(allowed.contains(&at), "byte {} changed", at);
        }
        prop_assert_eq!(b[0] >> 4, orig[0] >> 4, "version kept");
        let (back, _) = Headers::parse(&b).unwrap();
        let mut want = h;
        want.ip.dscp = dscp;
        want.ip.ecn = e;
        prop_assert_eq!(back, want);
        prop_assert_eq!(want.to_bytes().unwrap(), b);
    }

    /// Edits on a packet with a wrong checksum keep it wrong by the same amount: they never
    /// "repair" a corrupt packet nor hide the corruption.
    #[test]
    fn edits_preserve_checksum_error(h in tcp_headers(), w in any::<u16>(), dscp in 0u8..64, delta in 1u16..0xffff) {
        let mut b = h.to_bytes().unwrap();
        let (_, layout) = Headers::parse(&b).unwrap();
        let at = layout.l4_offset + 16;
        let bad = u16::from_be_bytes([b[at], b[at + 1]]).wrapping_add(delta);
        b[at..at + 2].copy_from_slice(&bad.to_be_bytes());
        let before: Vec<_> = common::checksum_fields(&b).into_iter().map(|f| f.stored != f.computed).collect();
        prop_assert!(mutate::set_tcp_window(&mut b, &layout, w));
        prop_assert!(mutate::set_dscp_ecn(&mut b, dscp, Ecn::Ect1));
        let after: Vec<_> = common::checksum_fields(&b).into_iter().map(|f| f.stored != f.computed).collect();
        prop_assert_eq!(before, after);
    }

    /// Modular order: `a < a + d` for 0 < d < 2^31, whatever `a` (so across wraparound);
    /// `>` is its mirror; the distance is `d`.
    #[test]
    fn seq_order_across_wraparound(a in any::<u32>(), d in 1u32..(1 << 31)) {
        let a = SeqNumber(a);
        let b = a + d;
        prop_assert!(a < b);
        prop_assert!(b > a);
        prop_assert!(a <= b);
        prop_assert!(b >= a);
        prop_assert!(a != b);
        prop_assert_eq!(b - a, d as i32);
        prop_assert_eq!(a - b, (d as i32).wrapping_neg());
        prop_assert_eq!(b - d, a);
        prop_assert_eq!(a.max(b), b);
        prop_assert_eq!(a.min(b), a);
    }

    /// For any two numbers: exactly one of `<`, `==`, `>` holds unless they are 2^31
    /// apart (then none does); `max`/`min` are commutative and return one of the two.
    #[test]
    fn seq_order_is_consistent(
        a in any::<u32>(),
        d in prop_oneof![any::<u32>(), Just(0u32), Just(1 << 31), Just((1 << 31) - 1), Just((1 << 31) + 1)],
    ) {
        let (a, b) = (SeqNumber(a), SeqNumber(a) + d);
        let n = [a < b, a == b, a > b].iter().filter(|&&x| x).count();
        if a.0.wrapping_sub(b.0) == 1 << 31 {
            prop_assert_eq!(n, 0);
            prop_assert_eq!(a.partial_cmp(&b), None);
        } else {
            prop_assert_eq!(n, 1);
            prop_assert_eq!(a.partial_cmp(&b), b.partial_cmp(&a).map(|o| o.reverse()));
        }
        prop_assert_eq!(a.max(b), b.max(a));
        prop_assert_eq!(a.min(b), b.min(a));
        prop_assert!(a.max(b) == a || a.max(b) == b);
        prop_assert!(a.min(b) == a || a.min(b) == b);
        prop_assert!(a == b || a.max(b) != a.min(b));
    }

    /// Transitivity inside any half of the sequence space.
    #[test]
    fn seq_order_is_transitive_within_a_window(a in any::<u32>(), x in 0u32..(1 << 30), y in 0u32..(1 << 30)) {
        let a = SeqNumber(a);
        let (b, c) = (a + x, a + x + y);
        prop_assert!(a <= b);
        prop_assert!(b <= c);
        prop_assert!(a <= c);
    }
}

#[test]
fn options_that_cannot_fit_are_refused() {
    let mut sack = SackBlocks::new();
    for i in 0..4 {
        sack.push(SackBlock {
            left: SeqNumber(i),
            right: SeqNumber(i + 1),
        });
    }
    let opts = TcpOptions {
        timestamp: Some(Timestamp { val: 1, ecr: 2 }),
        sack,
        ..Default::default()
    };
    let t = TcpRepr {
        src_port: 1,
        dst_port: 2,
        seq: SeqNumber(0),
        ack: SeqNumber(0),
        flags: TcpFlags::ACK,
        window: 0,
        urgent: 0,
        opts,
    };
    let ip = IpRepr::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    let h = Headers::tcp(ip, t, 0);
    let mut out = vec![7u8];
    assert_eq!(h.emit(0, &mut out), Err(EmitError::OptionsTooLong(44)));
    assert_eq!(out, [7], "nothing written on error");
}

#[test]
fn packed_layout_when_linux_layout_overflows() {
    // MSS + TS + 3 SACK blocks: Linux layout 4 + 12 + 28 = 44 bytes, packed 4 + 10 + 26 = 40.
    let mut sack = SackBlocks::new();
    for i in 0..3 {
        sack.push(SackBlock {
            left: SeqNumber(i * 10),
            right: SeqNumber(i * 10 + 5),
        });
    }
    let opts = TcpOptions {
        mss: Some(1460),
        timestamp: Some(Timestamp {
            val: 0x01020304,
            ecr: 0x05060708,
        }),
        sack,
        ..Default::default()
    };
    let t = TcpRepr {
        src_port: 1,
        dst_port: 2,
        seq: SeqNumber(0),
        ack: SeqNumber(0),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        window: 0,
        urgent: 0,
        opts,
    };
    assert_eq!(t.options_len(), 40);
    let ip = IpRepr::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    let h = Headers::tcp(ip, t, 0);
    let b = h.to_bytes().unwrap();
    assert_eq!(&b[40..50], &[2, 4, 0x05, 0xb4, 8, 10, 1, 2, 3, 4]);
    assert_eq!(&b[54..56], &[5, 26]);
    assert_eq!(Headers::parse(&b).unwrap().0, h);
    assert_checksums(&b);
}

#[test]
fn huge_payload_len_is_an_error_not_an_overflow() {
    let ip = IpRepr::new(
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    );
    for payload_len in [u32::MAX, u32::MAX - 40, 65535 - 7, 65535 - 8 + 1] {
        let h = Headers {
            ip,
            transport: Transport::Udp(UdpRepr {
                src_port: 1,
                dst_port: 2,
            }),
            payload_len,
        };
        let mut out = Vec::new();
        assert!(matches!(h.emit(0, &mut out), Err(EmitError::TooLong(_))));
        assert!(out.is_empty());
    }
    // The largest IPv6 payload that fits, and the largest IPv4 packet.
    let h = Headers {
        ip,
        transport: Transport::Udp(UdpRepr {
            src_port: 1,
            dst_port: 2,
        }),
        payload_len: 65535 - 8,
    };
    let b = h.to_bytes().unwrap();
    assert_eq!(b.len(), 40 + 65535);
    assert_eq!(Headers::parse(&b).unwrap().0, h);
    assert_checksums(&b);
}

#[test]
fn mixed_families_are_refused() {
    let mut ip = IpRepr::new(
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
        IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
    );
    ip.dst = IpAddr::V6(Ipv6Addr::LOCALHOST);
    let h = Headers {
        ip,
        transport: Transport::Other(1),
        payload_len: 0,
    };
    assert_eq!(h.to_bytes(), Err(EmitError::MixedFamilies));
}

#[test]
fn dscp_above_six_bits_does_not_spill_into_the_version() {
    let mut ip = IpRepr::new(
        IpAddr::V6(Ipv6Addr::LOCALHOST),
        IpAddr::V6(Ipv6Addr::LOCALHOST),
    );
    ip.dscp = 0xff;
    let h = Headers {
        ip,
        transport: Transport::Other(59),
        payload_len: 0,
    };
    let b = h.to_bytes().unwrap();
    assert_eq!(b[0] >> 4, 6);
    assert_eq!(Headers::parse(&b).unwrap().0.ip.dscp, 0x3f);
    let mut b4 = Headers {
        ip: IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2)),
        ),
        transport: Transport::Other(1),
        payload_len: 8,
    }
    .to_bytes()
    .unwrap();
    assert!(mutate::set_dscp_ecn(&mut b4, 0xff, Ecn::Ce));
    assert_eq!(b4[0], 0x45);
    assert_eq!(b4[1], 0xff);
    assert_checksums(&b4);
}
