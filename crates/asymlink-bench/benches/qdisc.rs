//! Discipline hot paths: one enqueue + one dequeue per iteration at a steady backlog.
//!
//! `cargo bench -p asymlink-core --bench qdisc`

use asymlink_core::packet::HeaderPacket;
use asymlink_core::qdisc::{BuildCtx, Drops, Qdisc, QdiscConfig};
use asymlink_core::time::Instant;
use asymlink_core::wire::{Headers, IpRepr, SeqNumber, TcpFlags, TcpOptions, TcpRepr};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;

fn pkt(flow: u16, len: u32) -> HeaderPacket {
    HeaderPacket::new(Headers::tcp(
        IpRepr::new("10.0.0.1".parse().unwrap(), "10.0.0.2".parse().unwrap()),
        TcpRepr {
            src_port: 1000 + flow,
            dst_port: 80,
            seq: SeqNumber(1),
            ack: SeqNumber(1),
            flags: TcpFlags::ACK,
            window: 1000,
            urgent: 0,
            opts: TcpOptions::default(),
        },
        len.saturating_sub(40),
    ))
}

fn steady(c: &mut Criterion, name: &str, cfg: &str, flows: u16) {
    let cfg: QdiscConfig = toml::from_str(cfg).unwrap();
    let mut q: Box<dyn Qdisc<HeaderPacket>> = cfg.build(&BuildCtx::default()).unwrap();
    let mut drops = Drops::new();
    let pkts: Vec<HeaderPacket> = (0..flows).map(|f| pkt(f, 1500)).collect();
    for i in 0..100 {
        q.enqueue(Instant(0), pkts[i % pkts.len()].clone(), &mut drops);
    }
    let mut i = 0usize;
    let mut now = 0u64;
    c.bench_function(name, |b| {
        b.iter(|| {
            i += 1;
            now += 12_000;
            q.enqueue(Instant(now), pkts[i % pkts.len()].clone(), &mut drops);
            black_box(q.dequeue(Instant(now), &mut drops));
            drops.drain();
        })
    });
}

fn disciplines(c: &mut Criterion) {
    steady(c, "fifo", "kind = \"fifo\"\nlimit = \"1000p\"", 1);
    steady(c, "drr_100_flows", "kind = \"drr\"\nlimit = \"1000p\"", 100);
    steady(
        c,
        "tbf_1gbit",
        "kind = \"tbf\"\nrate = \"1Gbit\"\nburst = \"1MB\"",
        1,
    );
}

criterion_group!(benches, disciplines);
criterion_main!(benches);
