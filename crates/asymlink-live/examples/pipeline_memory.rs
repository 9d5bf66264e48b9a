//! Memory of one box pipeline (the core middlebox a configuration builds: classifier,
//! disciplines, rewriters), measured as the growth of resident memory while `N` of them
//! are alive — what each subscriber's tree costs. Twice: as built (a subscriber's tree
//! before its traffic touched a discipline: flow tables are allocated on the first
//! packet), and after one 1000-byte UDP packet each way has crossed every pipeline (the
//! tables of the disciplines that packet reached are then allocated, and stay until the
//! tree is evicted: an idle subscriber that had traffic).
//!
//! ```sh
//! cargo run --release -p asymlink-live --example pipeline_memory -- box.toml 2000
//! ```

use asymlink_core::pipeline::{Dir, Middlebox};
use asymlink_core::qdisc::{Dequeued, Drops};
use asymlink_core::time::Instant;
use asymlink_live::config::BoxConfig;
use asymlink_live::packet::{LinkType, LivePacket};
use asymlink_live::sys::rss_bytes;

/// An Ethernet frame carrying a 1000-byte IPv4/UDP packet from `src` to `dst`.
fn frame(src: [u8; 4], dst: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 1000];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&1000u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let mut sum = 0u32;
    for i in (0..20).step_by(2) {
        sum += u32::from(u16::from_be_bytes([ip[i], ip[i + 1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    ip[20..22].copy_from_slice(&4000u16.to_be_bytes());
    ip[22..24].copy_from_slice(&5000u16.to_be_bytes());
    ip[24..26].copy_from_slice(&980u16.to_be_bytes());
    f
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (Some(path), n) = (args.first(), args.get(1).and_then(|s| s.parse().ok())) else {
        eprintln!("usage: pipeline_memory CONFIG.toml [N (default 2000)]");
        std::process::exit(2);
    };
    let n: usize = n.unwrap_or(2000).max(1);
    let cfg = match BoxConfig::load(std::path::Path::new(path)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("{path}: {e}");
            std::process::exit(2);
        }
    };
    let (mb, rates) = (cfg.middlebox(), cfg.rates());
    let before = rss_bytes();
    let mut all: Vec<Middlebox<LivePacket>> = (0..n)
        .map(|k| Middlebox::new(&mb, rates, k as u64).expect("validated"))
        .collect();
    let built = rss_bytes();
    let mut drops = Drops::new();
    let t = Instant::from_secs(1);
    for m in all.iter_mut() {
        let (home, far) = ([198, 18, 0, 12], [198, 18, 0, 2]);
        for (dir, src, dst) in [(Dir::ToB, home, far), (Dir::ToA, far, home)] {
            let p = LivePacket::new(frame(src, dst), LinkType::Ethernet, t, 0);
            m.handle_packet(t, dir, p, &mut drops);
            let mut now = t;
            loop {
                match m.poll_transmit(now, dir, &mut drops) {
                    Dequeued::Packet(_) => {}
                    Dequeued::NotBefore(nt) => now = nt,
                    Dequeued::Empty => break,
                }
            }
            drops.drain().for_each(drop);
        }
    }
    let touched = rss_bytes();
    let each = |a: u64, b: u64| b.saturating_sub(a) / n as u64;
    println!(
        "{n} pipelines of {path}: {} bytes each as built, {} bytes each after one packet \
         each way ({} MiB in all)",
        each(before, built),
        each(before, touched),
        touched.saturating_sub(before) >> 20
    );
    drop(all);
}
