//! Parse arbitrary bytes as an IP packet. Whatever the input:
//! * `Headers::parse` never panics;
//! * a successful parse gives a `Layout` inside the buffer that agrees with the headers;
//! * if the packet has no IPv4 options / IPv6 extension headers, is not a fragment and has
//!   no unknown TCP options, `emit` succeeds and re-parsing the result gives the same
//!   `Headers` and the same layout shape.
#![no_main]

use asymlink_core::wire::{proto, Headers, Transport};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((h, layout)) = Headers::parse(data) else {
        return;
    };

    // The layout lies inside the buffer and matches the headers.
    assert!(layout.ip_len <= data.len());
    assert!(layout.l4_offset >= h.ip.header_len());
    assert!(layout.l4_offset + layout.l4_header_len <= layout.ip_len);
    match h.transport {
        Transport::Tcp(_) => {
            assert_eq!(
                layout.l4_header_len,
                (data[layout.l4_offset + 12] >> 4) as usize * 4
            );
            assert_eq!(
                h.payload_len as usize,
                layout.ip_len - layout.l4_offset - layout.l4_header_len
            );
        }
        Transport::Udp(_) => {
            assert_eq!(layout.l4_header_len, 8);
            assert!(h.payload_len as usize <= layout.ip_len - layout.l4_offset - 8);
        }
        Transport::Other(_) => {
            assert_eq!(layout.l4_header_len, 0);
            assert_eq!(h.payload_len as usize, layout.ip_len - layout.l4_offset);
        }
    }
    assert!(h.ip.dscp < 64);

    // Round trip for packets the compact form describes completely.
    let plain_ip = layout.l4_offset == h.ip.header_len();
    let fragment = matches!(h.transport, Transport::Other(p) if p == proto::TCP || p == proto::UDP);
    let unknown_opts = h.tcp_repr().is_some_and(|t| t.opts.other);
    if !plain_ip || fragment || unknown_opts {
        return;
    }
    let mut out = Vec::new();
    h.emit(0x5a, &mut out)
        .unwrap_or_else(|e| panic!("parsed {h:?} but cannot emit it: {e}"));
    assert_eq!(out.len(), h.ip_len() as usize);
    let (back, back_layout) = Headers::parse(&out)
        .unwrap_or_else(|e| panic!("emitted {h:?} as {out:02x?}, which does not parse: {e}"));
    assert_eq!(back, h);
    assert_eq!(back_layout.l4_offset, layout.l4_offset);
    assert_eq!(back_layout.ip_len, out.len());
    if h.tcp_repr().is_some() {
        assert_eq!(
            back_layout.l4_header_len,
            h.tcp_repr().unwrap().header_len()
        );
    }
});
