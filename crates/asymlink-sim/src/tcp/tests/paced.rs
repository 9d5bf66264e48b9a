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

/// One BBR download over a 10 Mbit/s, 40 ms path with an unlimited FIFO.
fn bbr_run(until: Instant) -> Pair {
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.cc = CcAlgo::Bbr;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| c.write(now, u64::MAX / 4, io));
    p.run(until);
    p
}

#[test]
fn bbr_fills_the_pipe_without_a_standing_queue_and_probes_rtt_every_10_s() {
    use crate::tcp::bbr::Mode;
    let mut p = bbr_run(Instant::from_secs(2));
    let at2 = p.delivered();
    p.run(Instant::from_secs(12));
    let c = p.c[0].as_ref().unwrap();
    let info = c.bbr_info().expect("BBR state");
    // Throughput from 2 s to 12 s: the bottleneck's 10 Mbit/s less headers (1448 of
    // 1500 bytes) and PROBE_RTT's 200 ms, within 5 %.
    let mbps = (p.delivered() - at2) as f64 * 8.0 / 10.0 / 1e6;
    assert!((mbps - 9.65 * 0.98).abs() < 0.5, "{mbps} Mbit/s");
    // The bandwidth estimate is the bottleneck's payload rate (9.65 Mbit/s).
    assert!(
        (info.bw as f64 * 8.0 / 1e6 - 9.65).abs() < 0.3,
        "{} bytes/s",
        info.bw
    );
    // Min RTT: 40 ms of propagation and 1.2 ms to serialise a segment at 10 Mbit/s.
    let min_rtt = info.min_rtt.unwrap();
    assert!(
        (Duration::from_millis(41)..Duration::from_millis(43)).contains(&min_rtt),
        "{min_rtt:?}"
    );
    // STARTUP ends within a second; one PROBE_RTT in 12 s.
    let exit = info.startup_exit.expect("left STARTUP");
    assert!(exit < Instant::from_secs(1), "{exit:?}");
    assert_eq!(info.probe_rtt_rounds, 1);
    assert!(matches!(info.mode, Mode::ProbeBw));
    // No standing queue: the smoothed RTT stays near the path's 41 ms.
    let srtt = c.srtt().unwrap();
    assert!(srtt < Duration::from_millis(60), "{srtt:?}");
    assert_eq!(c.stats().retransmits, 0);
    assert!(c.paced());
}

#[test]
fn bbr_is_deterministic() {
    let a = bbr_run(Instant::from_secs(3));
    let b = bbr_run(Instant::from_secs(3));
    let times = |p: &Pair| p.log.iter().map(|(t, _, _)| *t).collect::<Vec<_>>();
    assert_eq!(times(&a), times(&b));
}

#[test]
fn bbr_recovers_losses() {
    // Scripted losses: a burst in STARTUP, one segment later, and every transmission from
    // the 1500th to the 1570th (most of a flight, and retransmissions).
    let mut cfg = TcpConfig::profile("linux").unwrap();
    cfg.cc = CcAlgo::Bbr;
    let mut p = Pair::new(&cfg, Rate::mbps(10), Duration::from_millis(20));
    p.drop = Box::new(|n, _| matches!(n, 40..=43 | 700 | 1500..=1570));
    p.run(Instant::from_millis(100));
    p.with(0, |c, now, io| {
        c.write(now, 4_000_000, io);
        c.close(now, io);
    });
    p.run(Instant::from_secs(30));
    assert_eq!(p.delivered(), 4_000_000);
    let c = p.c[0].as_ref().unwrap();
    let st = c.stats();
    assert_eq!((st.fast_retransmits, st.timeouts), (3, 0), "{st:?}");
    // After the losses BBR is back in PROBE_BW with its bandwidth estimate intact.
    let info = c.bbr_info().unwrap();
    assert!(info.startup_exit.is_some());
    assert!(info.bw as f64 * 8.0 > 8e6, "{info:?}");
}
