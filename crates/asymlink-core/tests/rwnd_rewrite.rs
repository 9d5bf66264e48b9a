//! Advertised-window rewriting (`asymlink_core::rwnd::WindowRewriter`) on real packet
//! bytes: real Linux handshakes (`common/linux.rs`) and segments built with
//! `Headers::emit`. Every rewritten packet is checked against etherparse's full checksum
//! recomputation, and only the window and checksum bytes may change.

mod common;

use asymlink_core::packet::{ClassId, Pkt};
use asymlink_core::pipeline::{Action, Dir, Rewriter};
use asymlink_core::rwnd::{FlowClass, RwndConfig, WindowRewriter};
use asymlink_core::time::Instant;
use asymlink_core::wire::{
    mutate, Ecn, Headers, IpRepr, Layout, SeqNumber, TcpFlags, TcpOptions, TcpRepr,
};
use common::linux::*;
use common::{assert_checksums, diff_offsets};
use core::net::{IpAddr, Ipv4Addr};

/// A real packet: its bytes, parsed once, edited in place like the live box's packets.
struct Wire {
    buf: Vec<u8>,
    hdr: Headers,
    layout: Layout,
    class: ClassId,
}

impl Wire {
    #[track_caller]
    fn new(bytes: &[u8]) -> Wire {
        let (hdr, layout) = Headers::parse(bytes).expect("parses");
        Wire {
            buf: bytes.to_vec(),
            hdr,
            layout,
            class: ClassId::NONE,
        }
    }
    /// The raw TCP window field, read from the bytes.
    fn window(&self) -> u16 {
        mutate::tcp_window(&self.buf, &self.layout).expect("TCP")
    }
    /// The offsets of the window and checksum fields.
    fn editable(&self) -> [usize; 4] {
        let o = self.layout.l4_offset;
        [o + 14, o + 15, o + 16, o + 17]
    }
}

impl Pkt for Wire {
    fn ip_len(&self) -> u32 {
        self.layout.ip_len as u32
    }
    fn headers(&self) -> Option<&Headers> {
        Some(&self.hdr)
    }
    fn class(&self) -> ClassId {
        self.class
    }
    fn set_class(&mut self, class: ClassId) {
        self.class = class;
    }
    fn set_tcp_window(&mut self, window: u16) -> bool {
        if !mutate::set_tcp_window(&mut self.buf, &self.layout, window) {
            return false;
        }
        self.hdr.tcp_repr_mut().expect("TCP").window = window;
        true
    }
    fn set_dscp_ecn(&mut self, dscp: u8, ecn: Ecn) -> bool {
        mutate::set_dscp_ecn(&mut self.buf, dscp, ecn)
    }
}

fn ms(v: u64) -> Instant {
    Instant::from_millis(v)
}

fn rewriter(toml: &str, toward: Dir) -> WindowRewriter {
    let cfg: RwndConfig = toml::from_str(toml).unwrap();
    WindowRewriter::new(&cfg, toward).unwrap()
}

/// 28.8 kbit/s (3600 B/s), the paper's 0.4 s delay budget (1440 B).
const MODEM: &str = r#"link_rate = "28.8kbit""#;

/// Pass `bytes` through the rewriter at `t` in `dir`; check the result byte for byte:
/// only the window and checksum may differ, and every checksum must equal a full
/// recomputation. Returns the packet after rewriting.
#[track_caller]
fn pass(rw: &mut WindowRewriter, t: Instant, dir: Dir, bytes: &[u8]) -> Wire {
    let mut w = Wire::new(bytes);
    assert_checksums(&w.buf);
    let action = rw.on_packet(t, dir, &mut w);
    assert_eq!(action, Action::Pass);
    let changed = diff_offsets(bytes, &w.buf);
    let editable = w.editable();
    assert!(
        changed.iter().all(|o| editable.contains(o)),
        "bytes other than the window and checksum changed: {changed:?}"
    );
    assert_checksums(&w.buf);
    // The parsed view agrees with the bytes.
    let reparsed = Wire::new(&w.buf);
    assert_eq!(reparsed.hdr, w.hdr);
    w
}

fn counter(rw: &WindowRewriter, name: &str) -> u64 {
    Rewriter::<Wire>::counters(rw)
        .into_iter()
        .find(|(n, _)| *n == name)
        .map(|(_, v)| v)
        .unwrap_or_else(|| panic!("no counter {name}"))
}

#[track_caller]
fn field(w: &Wire) -> u16 {
    w.window()
}

#[test]
fn linux_handshake_gives_the_scale_and_windows_are_lowered_in_its_units() {
    // The receiver is the client 10.77.0.1 (side a): the server's packets go to_a.
    let mut rw = rewriter(MODEM, Dir::ToA);
    let a_syn = pass(&mut rw, ms(0), Dir::ToB, &V4_SYN);
    // The receiver's own SYN is lowered (unscaled) to its first allocation: no RTT or
    // queue yet, so the delay budget, 1440 B, and never below one MSS (1460).
    assert_eq!(field(&a_syn), 1460);
    assert_eq!(counter(&rw, "syn_rewritten"), 1);
    let synack = pass(&mut rw, ms(99), Dir::ToA, &V4_SYN_ACK);
    assert_eq!(
        field(&synack),
        65_160,
        "the sender's packets are never rewritten"
    );
    let key = synack.hdr.flow_key();
    assert_eq!(rw.scale(&key), Some(10), "both SYNs carried wscale 10");
    // The ACK closing the handshake gives BaseRTT = 100 ms. The allocation is eq. (1)
    // for a lone interactive flow: 3600 B/s × 0.1 s + 1440 B = 1800 B, rounded up to
    // the scale's 1024-byte unit: field 2 (2048 B) instead of Linux's 63 (64 512 B).
    let ack = pass(&mut rw, ms(100), Dir::ToB, &V4_ACK);
    assert_eq!(V4_ACK.len(), ack.buf.len());
    assert_eq!(field(&ack), 2);
    let f = rw.policy().flow(key.canonical()).unwrap();
    assert_eq!(f.base_rtt, Some(core::time::Duration::from_millis(100)));
    assert_eq!(f.class, FlowClass::Interactive);
    assert_eq!(rw.policy().target(key.canonical()), Some(1_800));
    assert_eq!(counter(&rw, "rewritten"), 1);
    assert_eq!(
        counter(&rw, "mss_inexpressible"),
        0,
        "2048 - 1800 < one MSS"
    );
    // The request, then the response (toward the receiver), then the closing exchange.
    let data = pass(&mut rw, ms(101), Dir::ToB, &V4_DATA);
    assert_eq!(field(&data), 2);
    pass(&mut rw, ms(200), Dir::ToA, &V4_DATA_REPLY);
    let fin = pass(&mut rw, ms(201), Dir::ToB, &V4_FIN);
    assert_eq!(field(&fin), 2);
    pass(&mut rw, ms(300), Dir::ToA, &V4_FIN_REPLY);
    assert_eq!(rw.tracked(), 0, "both FINs seen: the flow is forgotten");
    assert_eq!(counter(&rw, "unknown_scale"), 0);
}

#[test]
fn ipv6_windows_and_checksums() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    pass(&mut rw, ms(0), Dir::ToB, &V6_SYN);
    let synack = pass(&mut rw, ms(49), Dir::ToA, &V6_SYN_ACK);
    assert_eq!(rw.scale(&synack.hdr.flow_key()), Some(10));
    let ack = pass(&mut rw, ms(50), Dir::ToB, &V6_ACK);
    // 3600 × 0.05 + 1440 = 1620 B: two 1024-byte units.
    assert_eq!(field(&ack), 2);
    assert_ne!(ack.buf, V6_ACK.to_vec());
    pass(&mut rw, ms(51), Dir::ToB, &V6_DATA);
    pass(&mut rw, ms(52), Dir::ToB, &V6_FIN);
}

#[test]
fn a_receiver_that_accepts_has_its_syn_ack_lowered_unscaled() {
    // The receiver is the server 10.77.0.2 (side b).
    let mut rw = rewriter(MODEM, Dir::ToB);
    let syn = pass(&mut rw, ms(0), Dir::ToB, &V4_SYN);
    assert_eq!(field(&syn), 64_240, "the sender's SYN is untouched");
    let synack = pass(&mut rw, ms(1), Dir::ToA, &V4_SYN_ACK);
    // RFC 7323: the window of a SYN-ACK is never scaled. First allocation: 1460 B.
    assert_eq!(field(&synack), 1_460);
    assert_eq!(counter(&rw, "syn_rewritten"), 1);
    pass(&mut rw, ms(80), Dir::ToB, &V4_ACK);
    pass(&mut rw, ms(81), Dir::ToB, &V4_DATA);
    // The server's reply: scaled by its own wscale (10). BaseRTT 80 ms: 288 + 1440 =
    // 1728 B, two units.
    let reply = pass(&mut rw, ms(82), Dir::ToA, &V4_DATA_REPLY);
    assert_eq!(field(&reply), 2);
    assert_eq!(counter(&rw, "rewritten"), 1);
}

// ------------------------------------------------------------------ built segments

const SND: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));
const RCV: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 0, 0, 2));
const SND_PORT: u16 = 8080;
const RCV_PORT: u16 = 40_000;
const ISS_SND: u32 = 1_000_000;
const ISS_RCV: u32 = 5_000;

/// A segment as bytes (valid checksums, zero payload bytes).
#[allow(clippy::too_many_arguments)]
fn seg(
    from_receiver: bool,
    sport: u16,
    flags: TcpFlags,
    seq: u32,
    ack: u32,
    window: u16,
    opts: TcpOptions,
    payload: u32,
) -> Vec<u8> {
    let (src, dst, src_port, dst_port) = if from_receiver {
        (RCV, SND, sport, SND_PORT)
    } else {
        (SND, RCV, SND_PORT, sport)
    };
    let tcp = TcpRepr {
        src_port,
        dst_port,
        seq: SeqNumber(seq),
        ack: SeqNumber(ack),
        flags,
        window,
        urgent: 0,
        opts,
    };
    Headers::tcp(IpRepr::new(src, dst), tcp, payload)
        .to_bytes()
        .unwrap()
}

fn syn_opts(mss: u16, wscale: Option<u8>) -> TcpOptions {
    TcpOptions {
        mss: Some(mss),
        wscale,
        ..TcpOptions::default()
    }
}

/// The receiver (side a, reached by `to_a`) opens a connection from port `port`; the
/// handshake takes 160 ms from `t0`. Returns the sequence numbers after it.
fn handshake(
    rw: &mut WindowRewriter,
    t0: u64,
    port: u16,
    mss: u16,
    rcv_ws: Option<u8>,
    snd_ws: Option<u8>,
) {
    let ack = TcpFlags::ACK;
    let syn = TcpFlags::SYN;
    pass(
        rw,
        ms(t0),
        Dir::ToB,
        &seg(
            true,
            port,
            syn,
            ISS_RCV,
            0,
            65_535,
            syn_opts(mss, rcv_ws),
            0,
        ),
    );
    pass(
        rw,
        ms(t0 + 159),
        Dir::ToA,
        &seg(
            false,
            port,
            syn | ack,
            ISS_SND,
            ISS_RCV + 1,
            65_535,
            syn_opts(mss, snd_ws),
            0,
        ),
    );
    pass(
        rw,
        ms(t0 + 160),
        Dir::ToB,
        &seg(
            true,
            port,
            ack,
            ISS_RCV + 1,
            ISS_SND + 1,
            65_535,
            TcpOptions::default(),
            0,
        ),
    );
}

/// `n` data segments of `size` toward the receiver on `port`, from byte `from`.
fn data(rw: &mut WindowRewriter, t: u64, port: u16, from: u32, n: u32, size: u32) {
    for i in 0..n {
        let s = seg(
            false,
            port,
            TcpFlags::ACK,
            ISS_SND + 1 + from + i * size,
            ISS_RCV + 1,
            65_535,
            TcpOptions::default(),
            size,
        );
        pass(rw, ms(t), Dir::ToA, &s);
    }
}

/// An ACK from the receiver on `port` acknowledging `acked` bytes, advertising `window`
/// (raw field). Returns the field after rewriting.
fn ack_from_receiver(rw: &mut WindowRewriter, t: u64, port: u16, acked: u32, window: u16) -> u16 {
    let s = seg(
        true,
        port,
        TcpFlags::ACK,
        ISS_RCV + 1,
        ISS_SND + 1 + acked,
        window,
        TcpOptions::default(),
        0,
    );
    field(&pass(rw, ms(t), Dir::ToB, &s))
}

#[test]
fn the_window_grows_a_packet_per_packet_and_never_rises_above_the_receivers() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    // No window scaling (neither SYN offers it): the field is in bytes.
    handshake(&mut rw, 0, RCV_PORT, 536, None, None);
    // 16 segments: long bulk. Target: 3600 × 0.16 + 1440 = 2016 B. The allocation
    // starts at 4 packets (2144 B) capped by the target.
    data(&mut rw, 200, RCV_PORT, 0, 16, 536);
    assert_eq!(
        ack_from_receiver(&mut rw, 201, RCV_PORT, 16 * 536, 32_000),
        2_016
    );
    // A receiver advertising less than the allocation is left alone: never raised.
    let before = counter(&rw, "rewritten");
    assert_eq!(
        ack_from_receiver(&mut rw, 202, RCV_PORT, 16 * 536 + 1_000, 1_000),
        1_000
    );
    assert_eq!(counter(&rw, "rewritten"), before);
}

#[test]
fn the_right_edge_never_moves_left_when_the_allocation_shrinks() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    handshake(&mut rw, 0, RCV_PORT, 536, Some(0), Some(0));
    data(&mut rw, 200, RCV_PORT, 0, 16, 536);
    let acked = 16 * 536;
    let w1 = ack_from_receiver(&mut rw, 201, RCV_PORT, acked, 60_000) as u32;
    assert_eq!(w1, 2_016);
    let edge = acked + w1;
    // A web object starts on a second connection: 4 KB makes it short bulk, and the long
    // flow's allocation drops to one packet at once (§IV-C.2 case 2).
    handshake(&mut rw, 300, RCV_PORT + 1, 536, Some(0), Some(0));
    data(&mut rw, 500, RCV_PORT + 1, 0, 8, 536);
    let long = rw.policy().ids().next().unwrap();
    assert_eq!(rw.policy().flow(long).unwrap().class, FlowClass::LongBulk);
    assert_eq!(rw.policy().target(long), Some(536));
    // The long flow's next ACKs: the window closes as data fills it, never below the
    // edge already advertised, until the edge is one MSS ahead.
    assert_eq!(
        ack_from_receiver(&mut rw, 501, RCV_PORT, acked, 60_000) as u32,
        w1
    );
    let w = ack_from_receiver(&mut rw, 502, RCV_PORT, acked + 1_072, 60_000) as u32;
    assert_eq!(acked + 1_072 + w, edge);
    let w = ack_from_receiver(&mut rw, 503, RCV_PORT, edge - 100, 60_000) as u32;
    assert_eq!(w, 536, "never below one MSS");
    // But the receiver itself may shrink its window: the box never raises it.
    let w = ack_from_receiver(&mut rw, 504, RCV_PORT, edge, 100);
    assert_eq!(w, 100);
}

#[test]
fn a_scale_too_coarse_for_one_mss_rounds_up_and_is_counted() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    // Receiver scale 14: one unit is 16 384 bytes, 30 MSS of 536.
    handshake(&mut rw, 0, RCV_PORT, 536, Some(14), Some(7));
    // The ACK of the handshake already could not express the first allocation.
    assert_eq!(counter(&rw, "mss_inexpressible"), 1);
    assert_eq!(counter(&rw, "rewritten"), 1);
    data(&mut rw, 200, RCV_PORT, 0, 16, 536);
    // The allocation (2016 B) rounds up to one unit: field 1, counted.
    assert_eq!(ack_from_receiver(&mut rw, 201, RCV_PORT, 16 * 536, 40), 1);
    assert_eq!(counter(&rw, "mss_inexpressible"), 2);
    assert_eq!(counter(&rw, "rewritten"), 2);
    // The receiver's own field of 1 is left alone; the edge already advertised holds
    // that much, so nothing is rounded (not counted).
    assert_eq!(ack_from_receiver(&mut rw, 202, RCV_PORT, 16 * 536, 1), 1);
    assert_eq!(counter(&rw, "mss_inexpressible"), 2);
    assert_eq!(counter(&rw, "rewritten"), 2);
}

#[test]
fn a_shift_above_14_is_used_as_14() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    handshake(&mut rw, 0, RCV_PORT, 536, Some(15), Some(7));
    let s = seg(
        true,
        RCV_PORT,
        TcpFlags::ACK,
        0,
        0,
        1,
        TcpOptions::default(),
        0,
    );
    let w = Wire::new(&s);
    assert_eq!(rw.scale(&w.hdr.flow_key()), Some(14));
}

#[test]
fn a_flow_whose_handshake_was_not_seen_passes_untouched() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    // Mid-connection: data and ACKs only. Nothing is rewritten, byte for byte.
    data(&mut rw, 0, RCV_PORT, 0, 16, 536);
    let s = seg(
        true,
        RCV_PORT,
        TcpFlags::ACK,
        1,
        2,
        60_000,
        TcpOptions::default(),
        0,
    );
    let w = pass(&mut rw, ms(1), Dir::ToB, &s);
    assert_eq!(w.buf, s);
    assert_eq!(counter(&rw, "untracked"), 17);
    assert_eq!(rw.tracked(), 0);
}

#[test]
fn a_flow_whose_scale_is_unknown_passes_untouched_and_is_counted() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    // The receiver's SYN passes the box, the sender's SYN-ACK takes another path: the
    // receiver's scale is known but whether the sender agreed to scaling is not.
    let syn = seg(
        true,
        RCV_PORT,
        TcpFlags::SYN,
        ISS_RCV,
        0,
        65_535,
        syn_opts(536, Some(7)),
        0,
    );
    pass(&mut rw, ms(0), Dir::ToB, &syn);
    data(&mut rw, 200, RCV_PORT, 0, 16, 536);
    let s = seg(
        true,
        RCV_PORT,
        TcpFlags::ACK,
        ISS_RCV + 1,
        ISS_SND + 1,
        500,
        TcpOptions::default(),
        0,
    );
    let w = pass(&mut rw, ms(201), Dir::ToB, &s);
    assert_eq!(w.buf, s);
    assert_eq!(counter(&rw, "unknown_scale"), 1);
    assert_eq!(counter(&rw, "rewritten"), 0);
    // Likewise when only the sender's SYN was seen: the receiver's SYN-ACK decides.
    let mut rw = rewriter(MODEM, Dir::ToA);
    let syn = seg(
        false,
        RCV_PORT,
        TcpFlags::SYN,
        ISS_SND,
        0,
        65_535,
        syn_opts(536, Some(7)),
        0,
    );
    pass(&mut rw, ms(0), Dir::ToA, &syn);
    let w = pass(&mut rw, ms(201), Dir::ToB, &s);
    assert_eq!(w.buf, s);
    assert_eq!(counter(&rw, "unknown_scale"), 1);
}

#[test]
fn without_window_scaling_on_both_sides_the_field_is_bytes() {
    // The sender's SYN-ACK carries no wscale: scaling is off whatever the receiver asked.
    let mut rw = rewriter(MODEM, Dir::ToA);
    handshake(&mut rw, 0, RCV_PORT, 536, Some(7), None);
    let s = seg(
        true,
        RCV_PORT,
        TcpFlags::ACK,
        0,
        0,
        1,
        TcpOptions::default(),
        0,
    );
    assert_eq!(rw.scale(&Wire::new(&s).hdr.flow_key()), Some(0));
    data(&mut rw, 200, RCV_PORT, 0, 16, 536);
    assert_eq!(
        ack_from_receiver(&mut rw, 201, RCV_PORT, 16 * 536, 30_000),
        2_016
    );
}

#[test]
fn incremental_checksums_match_a_full_recomputation_for_every_window() {
    // Every (original, rewritten) pair over a spread of windows and payload sizes: the
    // checksum after the in-place edit equals etherparse's recomputation.
    for payload in [0u32, 1, 7, 536] {
        for orig in [1u16, 2, 255, 256, 4_096, 40_000, 65_535] {
            for new in [0u16, 1, 536, 2_016, 65_534, 65_535] {
                let s = seg(
                    true,
                    RCV_PORT,
                    TcpFlags::ACK,
                    7,
                    9,
                    orig,
                    TcpOptions::default(),
                    payload,
                );
                let mut w = Wire::new(&s);
                assert!(w.set_tcp_window(new));
                assert_eq!(w.window(), new);
                assert_checksums(&w.buf);
                let fresh = seg(
                    true,
                    RCV_PORT,
                    TcpFlags::ACK,
                    7,
                    9,
                    new,
                    TcpOptions::default(),
                    payload,
                );
                assert_eq!(
                    w.buf, fresh,
                    "same bytes as a packet emitted with that window"
                );
            }
        }
    }
}

#[test]
fn port_guesses_apply_in_the_box() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    // ftp-data: the server's port 20 connects to the client (active ftp).
    let tcp = TcpRepr {
        src_port: 20,
        dst_port: RCV_PORT,
        seq: SeqNumber(ISS_SND),
        ack: SeqNumber(0),
        flags: TcpFlags::SYN,
        window: 65_535,
        urgent: 0,
        opts: syn_opts(536, None),
    };
    let b = Headers::tcp(IpRepr::new(SND, RCV), tcp, 0)
        .to_bytes()
        .unwrap();
    let w = pass(&mut rw, ms(0), Dir::ToA, &b);
    let key = w.hdr.flow_key().canonical();
    // Counted (and classed) once the handshake completes.
    assert_eq!(rw.policy().flow(key), None);
    let synack = TcpRepr {
        src_port: RCV_PORT,
        dst_port: 20,
        seq: SeqNumber(ISS_RCV),
        ack: SeqNumber(ISS_SND + 1),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        ..tcp
    };
    let b = Headers::tcp(IpRepr::new(RCV, SND), synack, 0)
        .to_bytes()
        .unwrap();
    pass(&mut rw, ms(100), Dir::ToB, &b);
    let ack = TcpRepr {
        seq: SeqNumber(ISS_SND + 1),
        ack: SeqNumber(ISS_RCV + 1),
        flags: TcpFlags::ACK,
        opts: TcpOptions::default(),
        ..tcp
    };
    let b = Headers::tcp(IpRepr::new(SND, RCV), ack, 0)
        .to_bytes()
        .unwrap();
    pass(&mut rw, ms(101), Dir::ToA, &b);
    assert_eq!(rw.policy().flow(key).unwrap().class, FlowClass::LongBulk);
}

/// `bytes` (IPv4, TCP) with a TCP-MD5 option (RFC 2385, kind 19, 18 bytes) appended to its
/// TCP options.
fn with_md5(bytes: &[u8]) -> Vec<u8> {
    let hl = (bytes[32] >> 4) as usize * 4;
    let mut b = bytes[..20 + hl].to_vec();
    b.extend_from_slice(&[1, 1, 19, 18]);
    b.extend_from_slice(&[0xab; 16]);
    b.extend_from_slice(&bytes[20 + hl..]);
    b[32] = (((hl + 20) / 4) as u8) << 4 | (b[32] & 0x0f);
    let total = b.len() as u16;
    b[2..4].copy_from_slice(&total.to_be_bytes());
    b
}

/// `bytes` (IPv4, TCP) carried behind an IP Authentication Header (RFC 4302).
fn behind_ah(bytes: &[u8]) -> Vec<u8> {
    let mut b = bytes[..20].to_vec();
    b[9] = 51;
    b.extend_from_slice(&[6, 4, 0, 0, 0, 0, 0x10, 0x01, 0, 0, 0, 7]);
    b.extend_from_slice(&[0x5a; 12]);
    b.extend_from_slice(&bytes[20..]);
    let total = b.len() as u16;
    b[2..4].copy_from_slice(&total.to_be_bytes());
    b
}

/// Pass `bytes` and return them as they left.
fn through(rw: &mut WindowRewriter, t: u64, dir: Dir, bytes: &[u8]) -> Vec<u8> {
    let mut w = Wire::new(bytes);
    assert_eq!(rw.on_packet(ms(t), dir, &mut w), Action::Pass);
    w.buf
}

#[test]
fn signed_segments_are_never_edited() {
    let mut rw = rewriter(MODEM, Dir::ToA);
    // A receiver's signed SYN keeps its window (an unsigned one is lowered to 1460 above).
    let syn = seg(
        true,
        RCV_PORT + 1,
        TcpFlags::SYN,
        ISS_RCV,
        0,
        65_535,
        syn_opts(1460, None),
        0,
    );
    for signed in [with_md5(&syn), behind_ah(&syn)] {
        assert!(Headers::parse(&signed).unwrap().0.is_signed());
        assert_eq!(through(&mut rw, 0, Dir::ToB, &signed), signed);
    }
    // A tracked bulk flow: the unsigned ACK is lowered, its signed twins are not.
    handshake(&mut rw, 0, RCV_PORT, 536, None, None);
    data(&mut rw, 200, RCV_PORT, 0, 16, 536);
    let ack = seg(
        true,
        RCV_PORT,
        TcpFlags::ACK,
        ISS_RCV + 1,
        ISS_SND + 1 + 16 * 536,
        32_000,
        TcpOptions::default(),
        0,
    );
    let edits = counter(&rw, "syn_rewritten") + counter(&rw, "rewritten");
    for signed in [with_md5(&ack), behind_ah(&ack)] {
        assert_eq!(through(&mut rw, 201, Dir::ToB, &signed), signed);
    }
    assert_eq!(counter(&rw, "signed_untouched"), 4);
    assert_eq!(
        counter(&rw, "syn_rewritten") + counter(&rw, "rewritten"),
        edits
    );
    assert_eq!(
        ack_from_receiver(&mut rw, 202, RCV_PORT, 16 * 536, 32_000),
        2_016
    );
}

#[test]
fn duplicate_acks_stay_duplicates() {
    // A fast link: the allocation is far below its target and grows a packet per packet.
    let mut rw = rewriter(r#"link_rate = "10Mbit""#, Dir::ToA);
    handshake(&mut rw, 0, RCV_PORT, 536, None, None);
    data(&mut rw, 200, RCV_PORT, 0, 4, 536);
    let first = ack_from_receiver(&mut rw, 201, RCV_PORT, 4 * 536, 60_000);
    assert!(first < 60_000, "{first}");
    // Segment 5 is lost; 6, 7, 8, 9 arrive and each is answered by a duplicate ACK. The
    // allocation grows with every arrival, but the duplicates must keep their window.
    let mut dups = Vec::new();
    for i in 0..4 {
        data(&mut rw, 202 + i, RCV_PORT, (5 + i as u32) * 536, 1, 536);
        dups.push(ack_from_receiver(
            &mut rw,
            202 + i,
            RCV_PORT,
            4 * 536,
            60_000,
        ));
    }
    assert_eq!(dups, vec![first; 4]);
    assert_eq!(counter(&rw, "frozen"), 4);
    // The retransmission fills the hole: a new ACK number gets the grown allocation.
    data(&mut rw, 210, RCV_PORT, 4 * 536, 1, 536);
    let next = ack_from_receiver(&mut rw, 211, RCV_PORT, 9 * 536, 60_000);
    assert!(next > first, "{next} > {first}");
    // A window update from the receiver (same ACK number, new window) is not frozen.
    let update = ack_from_receiver(&mut rw, 212, RCV_PORT, 9 * 536, 1_000);
    assert_eq!(update, 1_000);
}

/// A SYN from a spoofed address toward the receiver's `port`, and the receiver's SYN-ACK.
fn spoofed_syn(rw: &mut WindowRewriter, t: u64, i: u32, port: u16) {
    let src = IpAddr::V4(Ipv4Addr::from(0xc633_0000 + i)); // 198.51.x.x
    let sport = 1024 + (i % 60_000) as u16;
    let syn = TcpRepr {
        src_port: sport,
        dst_port: port,
        seq: SeqNumber(i),
        ack: SeqNumber(0),
        flags: TcpFlags::SYN,
        window: 65_535,
        urgent: 0,
        opts: syn_opts(1460, None),
    };
    let b = Headers::tcp(IpRepr::new(src, RCV), syn, 0)
        .to_bytes()
        .unwrap();
    through(rw, t, Dir::ToA, &b);
    let synack = TcpRepr {
        src_port: port,
        dst_port: sport,
        seq: SeqNumber(77),
        ack: SeqNumber(i + 1),
        flags: TcpFlags::SYN | TcpFlags::ACK,
        ..syn
    };
    let b = Headers::tcp(IpRepr::new(RCV, src), synack, 0)
        .to_bytes()
        .unwrap();
    through(rw, t, Dir::ToB, &b);
}

#[test]
fn spoofed_syns_do_not_shrink_legitimate_windows() {
    for max_flows in [16u32, 4096] {
        let mut rw = rewriter(
            &format!("link_rate = \"1Mbit\"\nmax_flows = {max_flows}"),
            Dir::ToA,
        );
        handshake(&mut rw, 0, RCV_PORT, 536, None, None);
        data(&mut rw, 200, RCV_PORT, 0, 40, 536);
        let before = ack_from_receiver(&mut rw, 201, RCV_PORT, 40 * 536, 60_000);
        assert!(before > 4 * 536, "{before}");
        // 1000 unanswered SYNs, to the web port and to others, each answered by the
        // receiver's SYN-ACK; none completes its handshake.
        for i in 0..1000 {
            spoofed_syn(
                &mut rw,
                300 + i as u64 / 100,
                i,
                [80, 443, 8080, 22][i as usize % 4],
            );
        }
        data(&mut rw, 319, RCV_PORT, 40 * 536, 1, 536);
        let after = ack_from_receiver(&mut rw, 320, RCV_PORT, 41 * 536, 60_000);
        assert_eq!(
            after,
            before + 536,
            "max_flows {max_flows}: grown by one packet"
        );
        assert_eq!(rw.policy().len(), 1, "only the real flow counts");
        assert!(
            rw.scale(&real_key()).is_some(),
            "the real flow is still tracked"
        );
    }
}

fn real_key() -> asymlink_core::wire::FlowKey {
    asymlink_core::wire::FlowKey {
        src: RCV,
        dst: SND,
        src_port: RCV_PORT,
        dst_port: SND_PORT,
        proto: 6,
    }
}
