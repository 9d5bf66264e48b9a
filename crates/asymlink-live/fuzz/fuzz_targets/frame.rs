//! A frame as the box receives it (Ethernet, or raw IP when the first input byte is odd).
//! Whatever the bytes:
//! * parsing never panics and keeps the bytes;
//! * a parsed packet's layout lies inside the frame;
//! * editing the window or DSCP/ECN never panics, changes nothing when refused, and
//!   keeps a valid IPv4 header checksum valid.
#![no_main]

use asymlink_core::packet::Pkt;
use asymlink_core::time::Instant;
use asymlink_core::wire::Ecn;
use asymlink_live::packet::{ipv4_header_ok, LinkType, LivePacket};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&ctl, frame)) = data.split_first() else {
        return;
    };
    let lt = if ctl & 1 == 1 {
        LinkType::RawIp
    } else {
        LinkType::Ethernet
    };
    let mut p = LivePacket::new(frame.to_vec(), lt, Instant::ZERO, 0);
    assert_eq!(p.frame(), frame);
    let l3 = frame.len() - p.ip_bytes().len();
    if let Some(l) = p.layout().copied() {
        assert!(p.headers().is_some());
        assert!(l.ip_len <= frame.len() - l3);
        assert!(l.l4_offset + l.l4_header_len <= l.ip_len);
    } else {
        assert!(p.unparsed().is_some());
    }
    let valid_before = ipv4_header_ok(p.ip_bytes());
    let before = p.frame().to_vec();
    let dscp = ctl >> 2;
    if !p.set_dscp_ecn(dscp, Ecn::from_bits(ctl >> 1)) {
        assert_eq!(p.frame(), &before[..], "a refused edit changes nothing");
    } else if valid_before {
        assert!(ipv4_header_ok(p.ip_bytes()), "checksum stays valid");
    }
    let before = p.frame().to_vec();
    if !p.set_tcp_window(u16::from_be_bytes([ctl, ctl.wrapping_mul(7)])) {
        assert_eq!(p.frame(), &before[..]);
    } else {
        // Only the window and the TCP checksum may change.
        let diff: Vec<usize> = (0..before.len())
            .filter(|&i| before[i] != p.frame()[i])
            .collect();
        assert!(diff.len() <= 4, "{diff:?}");
    }
});
