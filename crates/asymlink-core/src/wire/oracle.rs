//! The oracles of the packet layer's fuzz targets (`fuzz/`), shared with the stable
//! replay of their corpus (`tests/fuzz_corpus.rs`): each function takes one fuzz input
//! and panics when an invariant breaks.
//!
//! [`check_parse`] (target `parse`): parse arbitrary bytes as an IP packet. Whatever the input:
//! * `Headers::parse` never panics;
//! * a successful parse gives a `Layout` inside the buffer that agrees with the headers;
//! * if the packet has no IPv4 options / IPv6 extension headers, is not a fragment and has
//!   no unknown TCP options, `emit` succeeds and re-parsing the result gives the same
//!   `Headers` and the same layout shape.
//!
//! [`check_mutate`] (target `mutate`): in-place edits on arbitrary bytes. Input: 2 bytes of window, 1 byte of
//! DSCP/ECN, 4 bytes of a forged layout, 1 byte of flags (bit 0: fill in correct IPv4
//! and TCP checksums before editing, so that the "exact stays exact" promise is
//! exercised on every shape the fuzzer finds, not only on the seeds), then the packet.
//! * `set_tcp_window` / `tcp_window` / `set_dscp_ecn` never panic, with the parsed layout
//!   or a forged one, on any bytes;
//! * a refusal changes nothing;
//! * an edit changes only the field and its checksum;
//! * a checksum that equalled a full recomputation before the edit still does after it;
//! * whether the checksum *verifies* (one's-complement sum over the data and the field is
//!   all ones) does not change: a corrupt packet stays corrupt. (Only the representation of
//!   zero may change: a stored 0xffff where recomputation gives 0x0000 verifies, and an
//!   edit may turn it into the recomputed form.)

use crate::checksum;
use crate::wire::{mutate, proto, Ecn, Headers, Layout, Transport};
use core::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The `parse` target's checks on one input (see the module documentation).
///
/// # Panics
/// When an invariant breaks.
pub fn check_parse(data: &[u8]) {
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
}

/// What a checksum field holds compared with the data it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Verdict {
    /// The field equals a full recomputation.
    exact: bool,
    /// The data plus the field sum to all ones (what a receiver checks).
    verifies: bool,
}

fn verdict(data_without_field: &[u8], initial: u32, stored: u16) -> Verdict {
    let acc = checksum::sum(data_without_field, initial);
    Verdict {
        exact: checksum::finish(acc) == stored,
        verifies: checksum::finish(checksum::sum(&stored.to_be_bytes(), acc)) == 0,
    }
}

/// The IPv4 header checksum's verdict (`None`: not IPv4 with a whole header).
fn ipv4_ok(b: &[u8]) -> Option<Verdict> {
    let ihl = (*b.first()? & 0x0f) as usize * 4;
    if b[0] >> 4 != 4 || ihl < 20 || b.len() < ihl {
        return None;
    }
    let mut h = b[..ihl].to_vec();
    let stored = u16::from_be_bytes([h[10], h[11]]);
    h[10] = 0;
    h[11] = 0;
    Some(verdict(&h, 0, stored))
}

/// The TCP checksum's verdict over the segment `layout` names (pseudo-header from the
/// fixed IP header). `None` when the layout is not TCP in `b`.
fn tcp_ok(b: &[u8], l: &Layout) -> Option<Verdict> {
    if l.l4_header_len < 20
        || l.ip_len > b.len()
        || l.l4_offset.checked_add(l.l4_header_len)? > l.ip_len
    {
        return None;
    }
    let (src, dst): (IpAddr, IpAddr) = match b[0] >> 4 {
        4 if l.l4_offset >= 20 => (
            Ipv4Addr::new(b[12], b[13], b[14], b[15]).into(),
            Ipv4Addr::new(b[16], b[17], b[18], b[19]).into(),
        ),
        6 if l.l4_offset >= 40 => {
            let s: [u8; 16] = b[8..24].try_into().unwrap();
            let d: [u8; 16] = b[24..40].try_into().unwrap();
            (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into())
        }
        _ => return None,
    };
    let mut seg = b[l.l4_offset..l.ip_len].to_vec();
    let stored = u16::from_be_bytes([seg[16], seg[17]]);
    seg[16] = 0;
    seg[17] = 0;
    let pseudo = checksum::pseudo_header(src, dst, 6, seg.len() as u32);
    Some(verdict(&seg, pseudo, stored))
}

/// The checksum promise of an edit: exact stays exact, and the verification result is
/// unchanged.
#[track_caller]
fn same_verdict(before: Option<Verdict>, after: Option<Verdict>, what: &str) {
    match (before, after) {
        (None, None) => {}
        (Some(b), Some(a)) => {
            assert!(!b.exact || a.exact, "{what}: exact before, not after");
            assert_eq!(a.verifies, b.verifies, "{what}: verification changed");
        }
        _ => panic!("{what}: checksum coverage changed"),
    }
}

fn changed(a: &[u8], b: &[u8]) -> Vec<usize> {
    (0..a.len()).filter(|&i| a[i] != b[i]).collect()
}

fn check_window(buf: &mut Vec<u8>, layout: &Layout, window: u16) {
    let before = buf.clone();
    let tcp_before = tcp_ok(buf, layout);
    let ip_before = ipv4_ok(buf);
    let read = mutate::tcp_window(buf, layout);
    if mutate::set_tcp_window(buf, layout, window) {
        assert!(read.is_some());
        assert_eq!(mutate::tcp_window(buf, layout), Some(window));
        let o = layout.l4_offset;
        for i in changed(&before, buf) {
            assert!((o + 14..o + 18).contains(&i), "byte {i} changed");
        }
        // Both checksums keep their verdict (the IP header is only touched if the TCP
        // header overlaps it, which a forged layout can arrange: then its verdict may change).
        same_verdict(tcp_before, tcp_ok(buf, layout), "tcp after set_tcp_window");
        if o >= ((before[0] & 0x0f) as usize * 4) {
            same_verdict(ip_before, ipv4_ok(buf), "ipv4 after set_tcp_window");
        }
    } else {
        assert!(read.is_none());
        assert_eq!(*buf, before, "refused but changed");
    }
}

fn check_dscp(buf: &mut Vec<u8>, layout: Option<&Layout>, dscp: u8, ecn: Ecn) {
    let before = buf.clone();
    let ip_before = ipv4_ok(buf);
    let tcp_before = layout.and_then(|l| tcp_ok(buf, l));
    if mutate::set_dscp_ecn(buf, dscp, ecn) {
        let allowed: &[usize] = if buf[0] >> 4 == 4 {
            &[1, 10, 11]
        } else {
            &[0, 1]
        };
        for i in changed(&before, buf) {
            assert!(allowed.contains(&i), "byte {i} changed");
        }
        assert_eq!(buf[0] >> 4, before[0] >> 4);
        same_verdict(ip_before, ipv4_ok(buf), "ipv4 after set_dscp_ecn");
        if let Some(l) = layout {
            if l.l4_offset >= 12 {
                same_verdict(tcp_before, tcp_ok(buf, l), "tcp after set_dscp_ecn");
            }
        }
        if let Ok((h, _)) = Headers::parse(buf) {
            assert_eq!((h.ip.dscp, h.ip.ecn), (dscp & 0x3f, ecn));
        }
    } else {
        assert_eq!(*buf, before, "refused but changed");
    }
}

/// Overwrite the IPv4 header checksum and the TCP checksum with full recomputations.
fn fill_checksums(b: &mut [u8], l: &Layout) {
    if ipv4_ok(b).is_some() {
        let ihl = (b[0] & 0x0f) as usize * 4;
        b[10] = 0;
        b[11] = 0;
        let c = checksum::finish(checksum::sum(&b[..ihl], 0));
        b[10..12].copy_from_slice(&c.to_be_bytes());
    }
    if tcp_ok(b, l).is_some() {
        let at = l.l4_offset + 16;
        b[at] = 0;
        b[at + 1] = 0;
        let (src, dst): (IpAddr, IpAddr) = if b[0] >> 4 == 4 {
            (
                Ipv4Addr::new(b[12], b[13], b[14], b[15]).into(),
                Ipv4Addr::new(b[16], b[17], b[18], b[19]).into(),
            )
        } else {
            let s: [u8; 16] = b[8..24].try_into().unwrap();
            let d: [u8; 16] = b[24..40].try_into().unwrap();
            (Ipv6Addr::from(s).into(), Ipv6Addr::from(d).into())
        };
        let seg = &b[l.l4_offset..l.ip_len];
        let pseudo = checksum::pseudo_header(src, dst, 6, seg.len() as u32);
        let c = checksum::finish(checksum::sum(seg, pseudo));
        b[at..at + 2].copy_from_slice(&c.to_be_bytes());
        assert!(tcp_ok(b, l).unwrap().exact);
    }
}

/// The `mutate` target's checks on one input (see the module documentation).
///
/// # Panics
/// When an invariant breaks.
pub fn check_mutate(data: &[u8]) {
    if data.len() < 8 {
        return;
    }
    let window = u16::from_be_bytes([data[0], data[1]]);
    let dscp = data[2] >> 2;
    let ecn = Ecn::from_bits(data[2]);
    let forged = Layout {
        l4_offset: data[3] as usize,
        l4_header_len: data[4] as usize,
        ip_len: u16::from_be_bytes([data[5], data[6]]) as usize,
    };
    let fill = data[7] & 1 != 0;
    let pkt = &data[8..];

    let mut buf = pkt.to_vec();
    match Headers::parse(&buf) {
        Ok((_, layout)) => {
            if fill {
                fill_checksums(&mut buf, &layout);
            }
            check_window(&mut buf, &layout, window);
            check_dscp(&mut buf, Some(&layout), dscp, ecn);
            // The edits are what parse then reports.
            if let Some(w) = mutate::tcp_window(&buf, &layout) {
                assert_eq!(w, window);
                let (h, _) = Headers::parse(&buf).expect("still parses after edits");
                assert_eq!(h.tcp_repr().unwrap().window, window);
            }
        }
        Err(_) => check_dscp(&mut buf, None, dscp, ecn),
    }
    let mut buf = pkt.to_vec();
    if fill {
        fill_checksums(&mut buf, &forged);
    }
    check_window(&mut buf, &forged, window);
}
