//! Paced senders on explicit time: departures spaced at the pacing rate, one timer event
//! per burst.

use super::*;

/// Payload send times of the client's data segments in `[from, to)`.
fn data_sends(p: &Pair, from: Instant, to: Instant) -> Vec<Instant> {
    p.log
        .iter()
        .filter(|(t, f, h)| *f == 0 && h.payload_len > 0 && *t >= from && *t < to)
        .map(|(t, _, _)| *t)
        .collect()
}

/// Group equal send instants: (instant, segments sent then).
fn bursts(sends: &[Instant]) -> Vec<(Instant, usize)> {
    let mut out: Vec<(Instant, usize)> = Vec::new();
    for &t in sends {
        match out.last_mut() {
            Some((u, n)) if *u == t => *n += 1,
            _ => out.push((t, 1)),
        }
    }
    out
}

#[test]
fn max_pacing_rate_spaces_bursts_at_the_rate() {
    // 100 Mbit/s cap on a 1 Gbit/s path, 40 ms RTT: bursts of 8 segments (12 207 B per
    // 1/1024 s at 12.5 MB/s, 1448 B each), one every 8 × 1448 B / 12.5 MB/s = 926.72 us.
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.max_pacing_rate = Some(Rate::mbps(100));
    let mut p = Pair::new(&cfg, Rate::mbps(1000), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 40_000_000, io));
    let (from, to) = (Instant::from_millis(1500), Instant::from_millis(2000));
    p.run(to);
    let c = p.c[0].as_ref().unwrap();
    assert!(c.paced());
    assert_eq!(c.pacing_rate(), Some(12_500_000));
    let b = bursts(&data_sends(&p, from, to));
    assert!(b.len() > 500, "{} bursts", b.len());
    for w in b.windows(2) {
        assert_eq!(w[0].1, 8, "burst size at {:?}", w[0].0);
        assert_eq!(
            w[1].0 - w[0].0,
            Duration::from_nanos(926_720),
            "at {:?}",
            w[0].0
        );
    }
    // The rate is the cap: 100 Mbit/s of payload, to within one burst.
    let bytes: usize = b.iter().map(|x| x.1).sum::<usize>() * 1448;
    let secs = (b.last().unwrap().0 - b[0].0).as_secs_f64();
    let rate = (bytes - 8 * 1448) as f64 * 8.0 / secs;
    assert!((rate - 100e6).abs() < 0.01e9, "{rate}");
}

#[test]
fn a_paced_sender_costs_one_timer_event_per_burst() {
    // 10 Mbit/s cap: 1220 B per 1/1024 s, so the minimum burst of 2 segments, every
    // 2 × 1448 B / 1.25 MB/s = 2.3168 ms.
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.max_pacing_rate = Some(Rate::mbps(10));
    let mut p = Pair::new(&cfg, Rate::mbps(1000), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    let timers_before = p.timer_calls[0];
    p.with(0, |c, now, io| c.write(now, 5_000_000, io));
    p.run(Instant::from_secs(10));
    assert_eq!(p.delivered(), 5_000_000);
    let all = data_sends(&p, Instant::ZERO, Instant::from_secs(10));
    let b = bursts(&all);
    let timers = p.timer_calls[0] - timers_before;
    // Every timer call released a burst (or was a delayed-ACK or probe timer); never one
    // per segment.
    assert!(
        timers <= b.len(),
        "{timers} timer calls for {} bursts",
        b.len()
    );
    assert!(
        all.len() >= 2 * b.len() - 20,
        "{} segments in {} bursts",
        all.len(),
        b.len()
    );
    let late = bursts(&data_sends(
        &p,
        Instant::from_secs(2),
        Instant::from_secs(3),
    ));
    for w in late.windows(2) {
        assert_eq!(w[0].1, 2);
        assert_eq!(w[1].0 - w[0].0, Duration::from_nanos(2_316_800));
    }
}

#[test]
fn fq_style_pacing_follows_cwnd_over_srtt() {
    // `pacing = true` (CUBIC over fq): in congestion avoidance the rate is 1.2 × cwnd·MSS
    // / SRTT, recomputed at every ACK.
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.pacing = true;
    cfg.initial_ssthresh = Some(20 * 1448);
    let mut p = Pair::new(&cfg, Rate::mbps(1000), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, 1_000_000, io));
    p.run(Instant::from_millis(400));
    let c = p.c[0].as_ref().unwrap();
    let (cwnd, srtt) = (c.cwnd() / 1448, c.srtt().unwrap());
    let want = 1448u128 * 120 * cwnd as u128 * 10_000_000 / srtt.as_nanos();
    assert_eq!(c.pacing_rate(), Some(want as u64));
    // Not paced by default: CUBIC over the default qdisc.
    let c = TcpConfig::profile("linux").unwrap();
    let p = Pair::new(&c, Rate::mbps(1000), Duration::from_millis(20));
    assert!(!p.c[0].as_ref().unwrap().paced());
}
