//! The box's datapath (the engine, without devices) with N subscriber lines, every one
//! saturated: each subscriber is sent 1500-byte packets at 1.2 Mbit/s toward it for
//! 3 s of simulated time, through its own line shaped at 1 Mbit/s
//! (`line = { down = "1Mbit", up = "1Mbit", down_fraction = 1.0 }`). Prints the wall-clock
//! time per offered and forwarded packet, each subscriber's delivered rate from 1 s to 3 s
//! against its 1 Mbit/s, the growth of resident memory, and what one stats snapshot (with
//! every subscriber's counters) and its Prometheus text cost. One thread, no devices: the
//! cost of the disciplines and the subscriber scheduling alone.
//!
//! Before that, what the configured entries cost: the growth of resident memory and the
//! time while the configuration is parsed and checked, and while `--workers W` engines
//! (each worker of a box builds one, from its own clone of the configuration) are built
//! from it (kept memory: freed heap is handed back first). With `--plans K` the entries' lines have K different rates (1 Mbit/s,
//! 1.00001 Mbit/s, ...; each plan shaped and measured at its own rate): `--plans N` gives every
//! subscriber its own.
//!
//! ```sh
//! cargo run --release -p asymlink-live --example subscribers_scale -- 1000 [--plans K] [--workers W]
//! ```

#![allow(unsafe_code)]

use asymlink_core::pipeline::Dir;
use asymlink_core::time::{Duration, Instant};
use asymlink_live::config::BoxConfig;
use asymlink_live::packet::LinkType;
use asymlink_live::sys::rss_bytes;
use asymlink_live::Engine;

fn addr(k: usize) -> [u8; 4] {
    [10, (k >> 16) as u8, (k >> 8) as u8, k as u8]
}

/// An Ethernet frame with a 1500-byte IPv4/UDP packet from 198.18.0.2 to `dst`.
fn frame(dst: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 1500];
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&1500u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 18, 0, 2]);
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
    ip[24..26].copy_from_slice(&1480u16.to_be_bytes());
    f
}

/// Plan `p`'s rate in bit/s: 1 000 000, 1 000 010, 1 000 020, ... (below the 1.2 Mbit/s
/// offered for up to 20 000 plans).
fn plan_bit(p: usize) -> usize {
    1_000_000 + 10 * p
}

/// Resident memory after handing freed heap back to the system: what is kept, not what
/// parsing used on the way.
fn rss_kept() -> u64 {
    // SAFETY: malloc_trim only releases free memory of the allocator's heap.
    unsafe { libc::malloc_trim(0) };
    rss_bytes()
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .and_then(|v| v.parse::<usize>().ok())
    };
    let n: usize = args
        .first()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000)
        .clamp(1, 1 << 20);
    let plans = flag("--plans").unwrap_or(1).clamp(1, n);
    let workers = flag("--workers").unwrap_or(1).max(1);
    let mut text = String::from("[interfaces]\na = \"x0\"\nb = \"x1\"\n");
    for k in 1..=n {
        let a = addr(k);
        let rate = plan_bit(k % plans);
        text += &format!(
            "[[subscribers]]\nprefix = \"{}.{}.{}.{}\"\n\
             line = {{ down = \"{rate}bit\", up = \"{rate}bit\", down_fraction = 1.0 }}\n",
            a[0], a[1], a[2], a[3]
        );
    }
    let rss_text = rss_kept();
    let t_cfg = std::time::Instant::now();
    let cfg = BoxConfig::parse(&text).expect("valid");
    cfg.validate().expect("valid");
    let cfg_s = t_cfg.elapsed().as_secs_f64();
    let rss_cfg = rss_kept();
    // The other workers' engines, each from its own clone of the configuration.
    let t_eng = std::time::Instant::now();
    let others: Vec<Engine> = (1..workers)
        .map(|k| Engine::new(&cfg.clone(), LinkType::Ethernet, k as u64).expect("builds"))
        .collect();
    let rss0 = rss_bytes();
    let mut eng = Engine::new(&cfg.clone(), LinkType::Ethernet, 1).expect("builds");
    let eng_s = t_eng.elapsed().as_secs_f64();
    let rss_eng = rss_kept();
    let per = |a: u64, b: u64| b.saturating_sub(a) as f64 / n as f64;
    println!(
        "{n} entries, {} plans: parsed and checked in {cfg_s:.3} s, +{:.0} bytes per entry \
         ({:.1} MiB); {workers} engines built in {eng_s:.3} s, +{:.0} bytes per entry \
         ({:.1} MiB)",
        cfg.subscribers.table.plans(),
        per(rss_text, rss_cfg),
        rss_cfg.saturating_sub(rss_text) as f64 / (1 << 20) as f64,
        per(rss_cfg, rss_eng),
        rss_eng.saturating_sub(rss_cfg) as f64 / (1 << 20) as f64,
    );
    drop(text);
    // 100 packets a second per subscriber (1.2 Mbit/s), spread evenly.
    let per_s = 100.0 * n as f64;
    let step = Duration::from_micros(100);
    let end = Instant::from_secs(3);
    let mut sent_bytes = vec![0u64; n + 1];
    let (mut offered, mut forwarded) = (0u64, 0u64);
    let mut out = Vec::new();
    let mut t = Instant::ZERO;
    let wall = std::time::Instant::now();
    while t < end {
        let due = (t.as_secs_f64() * per_s) as u64;
        while offered < due {
            let k = (offered % n as u64) as usize + 1;
            eng.handle_frame(t, Dir::ToA, frame(addr(k)), 0);
            offered += 1;
        }
        if eng.poll_at().is_some_and(|p| p <= t) {
            eng.handle_timeout(t);
        }
        eng.poll_transmit(t, Dir::ToA, &mut out);
        for p in out.drain(..) {
            let f = p.frame();
            let d = &f[14 + 16..14 + 20];
            let k = (usize::from(d[1]) << 16) | (usize::from(d[2]) << 8) | usize::from(d[3]);
            if t >= Instant::from_secs(1) {
                sent_bytes[k] += 1500;
            }
            forwarded += 1;
            eng.on_sent(p);
        }
        t = t.saturating_add(step);
    }
    let cpu = wall.elapsed().as_secs_f64();
    let rss = rss_bytes().saturating_sub(rss0);
    // Each subscriber's rate against its plan's (1 Mbit/s with one plan).
    let rates: Vec<f64> = sent_bytes[1..]
        .iter()
        .enumerate()
        .map(|(i, b)| *b as f64 * 8.0 / 2.0 / plan_bit((i + 1) % plans) as f64)
        .collect();
    let min = rates.iter().copied().fold(f64::MAX, f64::min);
    let max = rates.iter().copied().fold(0.0, f64::max);
    let within = rates.iter().filter(|r| (*r - 1.0).abs() <= 0.05).count();
    let live = eng.subscribers().live();
    eng.check_conservation().expect("conservation");
    // The stats the box publishes every interval, with every subscriber's counters.
    let t_snap = std::time::Instant::now();
    let snap = eng.snapshot();
    let json = snap.to_string();
    let snap_ms = t_snap.elapsed().as_secs_f64() * 1e3;
    let t_prom = std::time::Instant::now();
    let prom = asymlink_live::stats::prometheus(&snap);
    let prom_ms = t_prom.elapsed().as_secs_f64() * 1e3;
    // With `stats.subscriber_lines`: every subscriber's counters as well.
    let t_lines = std::time::Instant::now();
    let mut with_lines = snap.clone();
    with_lines["subscribers"] = asymlink_live::stats::subscribers_json(eng.subscribers(), true);
    let lines_json = with_lines.to_string();
    let lines_ms = t_lines.elapsed().as_secs_f64() * 1e3;
    let t_lprom = std::time::Instant::now();
    let lines_prom = asymlink_live::stats::prometheus(&with_lines);
    let lprom_ms = t_lprom.elapsed().as_secs_f64() * 1e3;
    println!(
        "{n} subscribers: {offered} packets \
         offered, {forwarded} forwarded in {cpu:.2} s wall clock ({:.0} ns per offered packet, \
         {:.0} ns per forwarded); rate 1-3 s per subscriber / its plan's min {min:.3} max {max:.3}, \
         {within} of {n} within 5 %; aggregate {:.1} of {n} plan rates; {live} trees, \
         resident memory +{} MiB ({} kB per tree); a stats snapshot {snap_ms:.1} ms \
         ({} kB of JSON), its Prometheus text {prom_ms:.1} ms ({} lines); with \
         subscriber_lines {lines_ms:.1} ms ({} kB), Prometheus {lprom_ms:.1} ms ({} lines)",
        cpu * 1e9 / offered.max(1) as f64,
        cpu * 1e9 / forwarded.max(1) as f64,
        rates.iter().sum::<f64>(),
        rss >> 20,
        rss / 1024 / live.max(1) as u64,
        json.len() / 1024,
        prom.lines().count(),
        lines_json.len() / 1024,
        lines_prom.lines().count(),
    );
    drop(others);
}
