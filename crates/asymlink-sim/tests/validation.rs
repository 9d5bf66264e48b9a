//! Validation of the simulator against numbers TCP theory predicts. Each test builds a
//! scenario, runs it, and asserts measured values (not just that the code runs).

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};

fn run(src: &str) -> (Results, Simulation) {
    let mut sim =
        Simulation::from_toml(src, RunOptions::default()).unwrap_or_else(|e| panic!("{e}"));
    sim.run();
    sim.check_conservation().unwrap();
    (sim.results(), sim)
}

fn col_f64(r: &Results, table: &str, col: &str) -> Vec<f64> {
    match r.table(table).unwrap().column(col).unwrap() {
        ColumnData::F64(v) => v.clone(),
        ColumnData::I64(v) => v.iter().map(|&x| x as f64).collect(),
        ColumnData::Str(_) => panic!("{col} is a string column"),
    }
}

/// Delivered bytes of the (only) flow at time `t` (from the flows time series).
fn delivered_at(r: &Results, t: f64) -> f64 {
    let ts = col_f64(r, "flows", "t");
    let d = col_f64(r, "flows", "bytes_delivered");
    let i = ts
        .iter()
        .position(|&x| (x - t).abs() < 1e-9)
        .unwrap_or_else(|| panic!("no sample at {t}"));
    d[i]
}

fn cwnd_at(r: &Results, t: f64) -> f64 {
    let ts = col_f64(r, "flows", "t");
    let c = col_f64(r, "flows", "cwnd_bytes");
    let i = ts
        .iter()
        .position(|&x| (x - t).abs() < 1e-9)
        .unwrap_or_else(|| panic!("no sample at {t}"));
    c[i]
}

/// Sender — router — receiver with the given forward/reverse rates and one-way delay.
fn dumbbell(
    dur: &str,
    fwd: &str,
    rev: &str,
    one_way_ms: f64,
    tcp: &str,
    extra_flow: &str,
    extra_link: &str,
) -> String {
    format!(
        r#"
        duration = "{dur}"
        [monitor]
        interval = "100ms"
        [[nodes]]
        name = "s"
        [[nodes]]
        name = "r"
        kind = "router"
        [[nodes]]
        name = "c"
        [[links]]
        name = "up"
        a = "s"
        b = "r"
        rate = "1Gbit"
        delay = "0ms"
        queue = {{ kind = "fifo", limit = "100000p" }}
        [[links]]
        name = "path"
        a = "r"
        b = "c"
        rate = "{fwd}"
        delay = "{one_way_ms}ms"
        queue = {{ kind = "fifo", limit = "100000p" }}
        to_a = {{ rate = "{rev}" }}
        {extra_link}
        [[flows]]
        from = "s"
        to = "c"
        start = "50ms"
        tcp = {tcp}
        {extra_flow}
        app = {{ kind = "bulk" }}
        "#
    )
}

#[test]
fn slow_start_grows_by_one_plus_one_over_d_per_rtt() {
    for d in [1u32, 2] {
        // 1 Gbit/s, 100 ms RTT: a round's burst takes microseconds, so between bursts the
        // window is stable and samples 100 ms apart see one round each.
        let tcp = format!(
            "{{ profile = \"paper\", delayed_ack = {d}, delack_timeout = \"500ms\", rcvbuf = \"100MB\" }}"
        );
        let src = dumbbell("2.5s", "1Gbit", "1Gbit", 50.0, &tcp, "", "");
        let (r, _) = run(&src);
        let alpha = 1.0 + 1.0 / d as f64;
        let mut ratios = Vec::new();
        for k in 3..24 {
            let t0 = k as f64 * 0.1;
            let (w0, w1) = (cwnd_at(&r, t0), cwnd_at(&r, t0 + 0.1));
            // From 8 segments on: below that, a delayed-ACK receiver waits for its timer
            // (the classic initial-window stall), which is not the growth law under test. Up to
            // 500 segments: beyond that a round's burst (4 ms at 1 Gbit/s) starts to queue
            // and stretch the round.
            if (8000.0..=500_000.0).contains(&w0) {
                ratios.push(w1 / w0);
            }
        }
        assert!(ratios.len() >= 6, "d={d}: {ratios:?}");
        let mean = ratios.iter().sum::<f64>() / ratios.len() as f64;
        assert!(
            (mean - alpha).abs() / alpha < 0.05,
            "d={d}: ratios {ratios:?}, expected {alpha}"
        );
    }
}

#[test]
fn slow_reverse_link_clocks_the_sender() {
    // 100 kbit/s reverse, 40-byte ACKs: 312.5 ACKs/s; each acknowledges d segments of
    // 1000 bytes: 2.5 Mbit/s (d = 1) and 5 Mbit/s (d = 2), well below the 10 Mbit/s forward.
    // In congestion avoidance each ACK releases d segments (slow start would release 2d).
    for d in [1u32, 2] {
        let tcp = format!(
            "{{ profile = \"paper\", delayed_ack = {d}, rcvbuf = \"100MB\", initial_ssthresh = \"10KB\" }}"
        );
        let src = dumbbell("40s", "10Mbit", "100kbit", 50.0, &tcp, "", "");
        let (r, _) = run(&src);
        let bytes = delivered_at(&r, 40.0) - delivered_at(&r, 20.0);
        let measured = bytes * 8.0 / 20.0;
        let expected = 100_000.0 / (40.0 * 8.0) * d as f64 * 1000.0 * 8.0;
        assert!(
            (measured - expected).abs() / expected < 0.03,
            "d={d}: {measured} vs {expected}"
        );
    }
}

#[test]
fn a_long_flow_saturates_the_bottleneck() {
    // 10 Mbit/s, 50 ms RTT, buffer of one BDP (62.5 kB = 60 packets of 1040 B).
    let src = dumbbell(
        "60s",
        "10Mbit",
        "10Mbit",
        25.0,
        "{ profile = \"paper\", rcvbuf = \"100MB\" }",
        "",
        "",
    )
    .replace(
        "queue = { kind = \"fifo\", limit = \"100000p\" }\n        to_a",
        "queue = { kind = \"fifo\", limit = \"60p\" }\n        to_a",
    );
    let (r, _) = run(&src);
    let goodput = (delivered_at(&r, 60.0) - delivered_at(&r, 10.0)) * 8.0 / 50.0;
    let capacity = 10e6 * 1000.0 / 1040.0;
    assert!(
        goodput > 0.95 * capacity && goodput <= capacity * 1.001,
        "{goodput} of {capacity}"
    );
    let drops = col_f64(&r, "queue_summary", "dropped").iter().sum::<f64>();
    assert!(drops > 0.0, "the sawtooth overflows the buffer");
}

#[test]
fn window_limited_throughput_is_w_over_rtt() {
    // 20 000-byte window, 100 ms RTT, fast links: 200 kB/s.
    let src = dumbbell(
        "20s",
        "100Mbit",
        "100Mbit",
        50.0,
        "{ profile = \"paper\", rcvbuf = \"20000B\" }",
        "",
        "",
    );
    let (r, _) = run(&src);
    let rate = (delivered_at(&r, 20.0) - delivered_at(&r, 5.0)) / 15.0;
    let rtt = 0.1 + 2.0 * 1040.0 * 8.0 / 100e6; // plus serialisation of a segment and an ACK
    let expected = 20_000.0 / rtt;
    assert!(
        (rate - expected).abs() / expected < 0.02,
        "{rate} vs {expected}"
    );
}

#[test]
fn random_loss_matches_the_mathis_formula() {
    // NewReno, d = 1, MSS 1000, RTT 100 ms; loss only on data packets.
    // Mathis et al. 1997: throughput = MSS/RTT * C/sqrt(p), C = sqrt(3/2).
    for (p, dur) in [(0.001f64, "600s"), (0.005, "600s"), (0.01, "900s")] {
        let src = dumbbell(
            dur,
            "100Mbit",
            "100Mbit",
            50.0,
            "{ profile = \"paper\", rcvbuf = \"100MB\" }",
            "",
            "",
        )
        .replace(
            "to_a = { rate = \"100Mbit\" }",
            &format!("to_a = {{ rate = \"100Mbit\" }}\n        to_b = {{ loss = {p} }}"),
        );
        let (r, _) = run(&src);
        let end: f64 = dur.trim_end_matches('s').parse().unwrap();
        let bps = (delivered_at(&r, end) - delivered_at(&r, 20.0)) * 8.0 / (end - 20.0);
        let expected = 1000.0 * 8.0 / 0.1 * (1.5f64).sqrt() / p.sqrt();
        let err = (bps - expected) / expected;
        eprintln!(
            "mathis p={p}: measured {bps:.0} bit/s, formula {expected:.0} ({:+.1} %)",
            err * 100.0
        );
        assert!(
            err.abs() < 0.20,
            "p={p}: {bps:.0} bit/s vs Mathis {expected:.0} ({:+.1} %)",
            err * 100.0
        );
    }
}

#[test]
fn same_seed_same_trace_different_seed_different_trace() {
    let src = dumbbell("10s", "10Mbit", "1Mbit", 20.0, "\"rfc\"", "", "").replace(
        "to_a = { rate = \"1Mbit\" }",
        "to_a = { rate = \"1Mbit\" }\n        loss = 0.01",
    );
    let (a, _) = run(&src);
    let (b, _) = run(&src);
    assert_eq!(a.trace_hash, b.trace_hash);
    assert_eq!(a.packet_hops, b.packet_hops);
    assert_eq!(
        a,
        Results {
            wall_s: a.wall_s,
            ..b.clone()
        }
    );
    let mut sim = Simulation::from_toml(
        &src,
        RunOptions {
            seed: Some(2),
            ..RunOptions::default()
        },
    )
    .unwrap();
    sim.run();
    assert_ne!(sim.results().trace_hash, a.trace_hash);
}

#[test]
fn conservation_holds_on_every_queue_under_overload() {
    // Many flows into a small buffer: lots of drops, identities must hold.
    let mut src = dumbbell("10s", "2Mbit", "2Mbit", 10.0, "\"rfc\"", "", "").replace(
        "limit = \"100000p\" }\n        to_a",
        "limit = \"10p\" }\n        to_a",
    );
    for i in 0..5 {
        src.push_str(&format!(
            "[[flows]]\nname = \"x{i}\"\nfrom = \"s\"\nto = \"c\"\nstart = \"{}ms\"\napp = {{ kind = \"bulk\" }}\n",
            100 * i
        ));
    }
    let (r, sim) = run(&src);
    sim.check_conservation().unwrap();
    assert!(col_f64(&r, "queue_summary", "dropped").iter().sum::<f64>() > 10.0);
}

#[test]
fn results_report_the_seed_in_effect() {
    let src = dumbbell("1s", "10Mbit", "1Mbit", 5.0, "\"rfc\"", "", "");
    let mut sim = Simulation::from_toml(
        &src,
        RunOptions {
            seed: Some(42),
            ..RunOptions::default()
        },
    )
    .unwrap();
    sim.run();
    assert_eq!(sim.results().seed, 42);
}

/// Max SRTT of the only flow over the run (ms), from the flows time series.
fn max_srtt_ms(r: &Results) -> f64 {
    col_f64(r, "flows", "srtt_ms")
        .into_iter()
        .filter(|x| x.is_finite())
        .fold(0.0, f64::max)
}

#[test]
fn random_loss_does_not_inflate_the_rtt_estimate() {
    // One flow, 100 ms propagation RTT, 2 % random loss on data, fast links and no
    // queueing: every RTT sample should be close to 100 ms. Karn's rule (RFC 6298 §3) keeps
    // an ACK that covers a retransmitted segment from yielding a sequence-based sample
    // (which would span the recovery); timestamps give the samples then. The receivers
    // acknowledge every segment: a delayed ACK legitimately adds its wait to a sample (the
    // sample starts at the oldest segment acknowledged, as in Linux and RFC 7323 §4.1), which
    // is not what this test is about, so the `linux` profile's receiver uses the fixed
    // engine here (Linux's own engine ignores `delayed_ack`).
    let mut maxima = Vec::new();
    for profile in ["paper", "rfc", "linux"] {
        let src = dumbbell(
            "60s",
            "100Mbit",
            "100Mbit",
            50.0,
            &format!("{{ profile = \"{profile}\", delayed_ack = 1, delack_mode = \"fixed\" }}"),
            "",
            "",
        )
        .replace(
            "to_a = { rate = \"100Mbit\" }",
            "to_a = { rate = \"100Mbit\" }\n        to_b = { loss = 0.02 }",
        )
        .replace("interval = \"100ms\"", "interval = \"10ms\"");
        let (r, _) = run(&src);
        let max = max_srtt_ms(&r);
        eprintln!("{profile}: max SRTT {max:.1} ms");
        maxima.push((profile, max));
    }
    for (profile, max) in maxima {
        assert!(
            max > 99.0 && max < 115.0,
            "{profile}: max SRTT {max:.1} ms vs 100 ms propagation"
        );
    }
}

/// The showcase's access line without the upload: a `linux` (or `rfc`) download from a
/// server 25 ms away over 8 Mbit/s down / 512 kbit/s up, under a 64 KiB receive window.
/// The window, not the cwnd, limits the flow; a cwnd that kept growing on every ACK
/// (congestion-window validation off) reaches megabytes and would make CUBIC's ssthresh
/// after a loss meaningless. With validation the cwnd stays within twice the window (slow
/// start may reach twice the largest flight) plus the growth of one ACK.
#[test]
fn a_window_limited_download_keeps_its_cwnd_bounded() {
    let topology = |tcp: &str| {
        format!(
            r#"
            duration = "10s"
            [monitor]
            interval = "100ms"
            [[nodes]]
            name = "server"
            [[nodes]]
            name = "isp"
            kind = "router"
            [[nodes]]
            name = "client"
            [[links]]
            name = "core"
            a = "server"
            b = "isp"
            rate = "100Mbit"
            delay = "20ms"
            [[links]]
            name = "line"
            a = "isp"
            b = "client"
            delay = "5ms"
            to_b = {{ rate = "8Mbit", queue = {{ kind = "fifo", limit = "100p" }} }}
            to_a = {{ rate = "512kbit", queue = {{ kind = "fifo", limit = "30p" }} }}
            [[flows]]
            from = "server"
            to = "client"
            tcp = {tcp}
            app = {{ kind = "bulk", open = "receiver" }}
            "#
        )
    };
    let max_cwnd = |tcp: &str| {
        let (r, _) = run(&topology(tcp));
        let cwnd = col_f64(&r, "flows", "cwnd_bytes")
            .into_iter()
            .fold(0.0, f64::max);
        let goodput = delivered_at(&r, 10.0) * 8.0 / 10.0;
        (cwnd, goodput)
    };
    let window = 65_536.0;
    for profile in ["rfc", "linux"] {
        let (cwnd, goodput) = max_cwnd(&format!(
            "{{ profile = \"{profile}\", rcvbuf = \"64KiB\" }}"
        ));
        eprintln!("{profile}: max cwnd {cwnd:.0} B, goodput {goodput:.0} bit/s");
        assert!(
            cwnd <= 2.0 * window + 4.0 * 1460.0,
            "{profile}: cwnd {cwnd:.0} B under a {window} B window"
        );
        // Still window-limited, not cwnd-limited: 64 KiB per ~60 ms round trip.
        assert!(goodput > 6.0e6, "{profile}: {goodput:.0} bit/s");
    }
    // Without validation (and without HyStart, which would end slow start near the
    // window), slow start grows cwnd far beyond the window.
    let (unvalidated, _) = max_cwnd(
        "{ profile = \"linux\", rcvbuf = \"64KiB\", cwnd_validation = \"off\", hystart = false }",
    );
    eprintln!("linux without validation: max cwnd {unvalidated:.0} B");
    assert!(unvalidated > 10.0 * window, "{unvalidated:.0}");
}
