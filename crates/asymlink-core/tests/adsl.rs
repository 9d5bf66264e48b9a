//! The ADSL paper's arithmetic and the ready configuration of `docs/adsl.md`.

mod adsl_common;
use adsl_common::*;
use asymlink_core::classify::{Classifier, ClassifierConfig};
use asymlink_core::overhead::{Encapsulation, Framing, LinkLayer, LinkLayerConfig};
use asymlink_core::packet::{HeaderPacket, Pkt};
use asymlink_core::pipeline::{Dir, Middlebox, MiddleboxConfig};
use asymlink_core::qdisc::Drops;
use asymlink_core::time::Instant;
use asymlink_core::units::Rate;
use asymlink_core::wire::{
    Headers, IpRepr, SackBlock, SeqNumber, TcpFlags, TcpOptions, TcpRepr, Timestamp,
};

fn ll(e: Encapsulation) -> LinkLayer {
    LinkLayer::preset(e)
}

#[test]
fn cells_of_the_worked_examples() {
    use Encapsulation::*;
    // (preset, IP length, cells)
    for (e, ip, cells) in [
        (LlcSnapRouted, 40, 2),     // 40 + 8 + 8 = 56 > 48
        (VcMuxRouted, 40, 1),       // 40 + 8 = 48: exactly one cell
        (VcMuxRouted, 41, 2),       // one byte more: a second cell, 47 bytes of padding
        (LlcSnapRouted, 52, 2),     // Linux ACK with timestamps
        (LlcSnapRouted, 80, 2),     // ... even with 3 SACK blocks (52 + 28) = 96 exactly
        (LlcSnapRouted, 81, 3),     //
        (LlcSnapRouted, 1500, 32),  // 1516 -> 31.6 -> 32
        (VcMuxRouted, 1500, 32),    // 1508 -> 31.4 -> 32
        (PppoaVcMux, 1500, 32),     // 1510
        (PppoeLlc, 1492, 32),       // 1492 + 32 + 8 = 1532 = 31.9 cells
        (PppoeLlc, 40, 2),          // 80
        (LlcSnapBridged, 1500, 32), // 1532
        (VcMuxBridged, 40, 2),      // 64
    ] {
        assert_eq!(ll(e).atm_cells(ip), cells, "{e:?} {ip} B");
        assert_eq!(ll(e).wire_len(ip), cells * 53, "{e:?} {ip} B");
    }
}

#[test]
fn the_papers_overhead_figures() {
    // Cell header: 5 of 53 bytes = 9.43 %; OAM: one cell in 27 = 3.7 %.
    assert_eq!((5.0f64 / 53.0 * 1e4).round() / 100.0, 9.43);
    assert_eq!((1.0f64 / 27.0 * 1e3).round() / 10.0, 3.7);
    // 500 kbit/s of line -> AAL5 payload after both: 436 kbit/s (the paper uses 432).
    assert_eq!(Rate::kbps(500).scaled(48 * 26, 53 * 27), Rate(436_058));
    // The paper's ACKs: 313 kbit/s of cells, "160 kbit/s (32 %) pure overhead": 52-byte
    // ACKs in 2 cells, 54 of 106 bytes overhead.
    let l = ll(Encapsulation::LlcSnapRouted);
    let overhead = 313_000 * (l.wire_len(52) - 52) as u64 / l.wire_len(52) as u64;
    assert_eq!(overhead, 159_452);
    // With the OAM share charged (one cell in 27): 2 cells cost 110 bytes on average.
    let mut oam = l;
    oam.oam_one_in = 27;
    assert_eq!(oam.wire_len(52), 110);
    assert_eq!(oam.wire_len(1500), 1761);
    // IP-size accounting under-counts a 40-byte ACK 2.65 times.
    assert_eq!(l.wire_len(40) as f64 / 40.0, 2.65);
}

#[test]
fn tc_vocabulary() {
    #[derive(serde::Deserialize)]
    struct H {
        linklayer: LinkLayerConfig,
    }
    let h: H = toml::from_str("linklayer = { framing = \"atm\", overhead = 8, mpu = 0 }").unwrap();
    assert_eq!(h.linklayer.build(), ll(Encapsulation::LlcSnapRouted));
    let h: H = toml::from_str("linklayer = \"ptm\"").unwrap();
    assert_eq!(h.linklayer.build().framing, Framing::Ptm);
    let h: H = toml::from_str("linklayer = { encap = \"ethernet\" }").unwrap();
    assert_eq!(h.linklayer.build().wire_len(40), 84);
}

/// The ```toml blocks of `docs/adsl.md` that are middlebox configurations.
fn doc_configs() -> Vec<String> {
    let doc = include_str!("../../../docs/adsl.md");
    let mut out = Vec::new();
    let mut rest = doc;
    while let Some(i) = rest.find("```toml\n") {
        let body = &rest[i + 8..];
        let end = body.find("```").expect("closed block");
        if body[..end].contains("[to_b]") {
            out.push(body[..end].to_string());
        }
        rest = &body[end + 3..];
    }
    out
}

fn tcp_pkt(src: &str, dport: u16, flags: TcpFlags, payload: u32, sack: bool) -> HeaderPacket {
    let mut opts = TcpOptions {
        timestamp: Some(Timestamp { val: 1, ecr: 1 }),
        ..TcpOptions::default()
    };
    if sack {
        for (l, r) in [(5000, 6000), (7000, 8000)] {
            opts.sack.push(SackBlock {
                left: SeqNumber(l),
                right: SeqNumber(r),
            });
        }
    }
    HeaderPacket::new(Headers::tcp(
        IpRepr::new(src.parse().unwrap(), "198.51.100.1".parse().unwrap()),
        TcpRepr {
            src_port: 40000,
            dst_port: dport,
            seq: SeqNumber(1),
            ack: SeqNumber(1000),
            flags,
            window: 1000,
            urgent: 0,
            opts,
        },
        payload,
    ))
}

#[test]
fn the_ready_configurations_of_the_docs_build_and_classify() {
    let configs = doc_configs();
    assert_eq!(configs.len(), 2, "HTB and HFSC configurations");
    for src in configs {
        let cfg: MiddleboxConfig = toml::from_str(&src).unwrap_or_else(|e| panic!("{e}\n{src}"));
        let mut mb: Middlebox<HeaderPacket> =
            Middlebox::new(&cfg, [Some(Rate::mbps(100)), Some(Rate::mbps(100))], 1)
                .unwrap_or_else(|e| panic!("{e}\n{src}"));
        let classifier = cfg.to_b.classifier.as_ref().unwrap();
        let names = Classifier::new(classifier).unwrap().class_names().to_vec();
        let mut d = Drops::new();
        let a = TcpFlags::ACK;
        let offered = [
            tcp_pkt("192.168.1.10", 80, a, 1448, false),   // good
            tcp_pkt("192.168.1.10", 6881, a, 1448, false), // bad
            tcp_pkt("192.168.1.10", 80, a, 0, true),       // ack (with SACK and timestamps)
            tcp_pkt("192.168.1.10", 22, a, 48, false),     // interactive
        ];
        for p in offered {
            mb.handle_packet(ms(0), Dir::ToB, p, &mut d);
        }
        assert!(d.is_empty());
        // The ACK and the interactive packet leave first (prio 0 within their rates).
        let mut first = Vec::new();
        for _ in 0..2 {
            let p = mb.poll_transmit(ms(0), Dir::ToB, &mut d).packet().unwrap();
            first.push(names[p.class().0 as usize].clone());
        }
        first.sort();
        assert_eq!(first, ["ack", "interactive"], "{src}");
        check(mb.egress(Dir::ToB).qdisc());
    }
}

#[test]
fn a_sack_bearing_ack_is_an_ack_whatever_its_size() {
    let cfg: ClassifierConfig = toml::from_str("preset = \"five_class\"").unwrap();
    let mut c = Classifier::new(&cfg).unwrap();
    let mut p = tcp_pkt("10.0.0.1", 6881, TcpFlags::ACK, 0, true);
    assert!(
        p.ip_len() > 64,
        "bigger than the old recipes' small-packet match"
    );
    let id = c.classify(Instant::ZERO, &mut p);
    assert_eq!(c.class_names()[id.0 as usize], "ack");
}
