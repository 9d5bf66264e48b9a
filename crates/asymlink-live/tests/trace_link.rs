//! The box's emulated link driven by a mahimahi trace, under a fake clock: the delivery
//! schedule of a known trace reproduced to the millisecond, and trace files found
//! relative to the configuration file.

use asymlink_core::time::Instant;
use asymlink_live::BoxConfig;
use etherparse::PacketBuilder;
use std::path::PathBuf;

mod common;
use common::*;

/// An Ethernet + IPv4 + TCP frame of `payload` bytes (IP length `40 + payload`), tagged by
/// the IP identification.
fn tcp(tag: u16, payload: usize) -> Vec<u8> {
    let b = PacketBuilder::ethernet2([2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2])
        .ipv4([198, 18, 0, 1], [198, 18, 0, 2], 64)
        .tcp(40000, 5001, 1000 + tag as u32, 65535)
        .ack(777);
    let mut out = Vec::new();
    b.write(&mut out, &vec![0xab; payload]).unwrap();
    out[18..20].copy_from_slice(&tag.to_be_bytes());
    out[24] = 0;
    out[25] = 0;
    let c = !ipv4_sum(&out[14..34]);
    out[24..26].copy_from_slice(&c.to_be_bytes());
    out
}

/// A fresh directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("asymlink-trace-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn box_link_follows_the_trace_to_the_millisecond() {
    let dir = scratch("box");
    let trace = dir.join("t.trace");
    // Opportunities at 2, 4, 4 and 10 ms, repeating every 10 ms.
    std::fs::write(&trace, "2\n4\n4\n10\n").unwrap();
    let (mut el, clock) = setup(&format!(
        "[emulation.to_b]\ntrace = \"{}\"\ndelay = \"5ms\"\n",
        trace.display()
    ));
    // Five 1500-byte packets at 0: one per opportunity, then 5 ms of propagation.
    for i in 0..5 {
        el.io().arrive(ms(0), 0, tcp(i, 1460));
    }
    // 38 pure ACKs (40 bytes) at 20 ms (an opportunity: the period's end): 37 share it,
    // the 38th finishes in the 22 ms one.
    for i in 0..38 {
        el.io().arrive(ms(20), 0, tcp(100 + i, 0));
    }
    // A packet at 25 ms: the unused bytes of 22 ms and both 24 ms opportunities are
    // gone; it waits for 30 ms.
    el.io().arrive(ms(25), 0, tcp(200, 1460));
    run_until(&mut el, &clock, ms(100));
    let sent: Vec<(Instant, u16)> = el.io().sent.iter().map(|s| (s.0, tag_of(&s.2))).collect();
    let mut want: Vec<(Instant, u16)> = [7, 9, 9, 15, 17]
        .iter()
        .zip(0..)
        .map(|(&t, i)| (ms(t), i))
        .collect();
    want.extend((0..37).map(|i| (ms(25), 100 + i)));
    want.push((ms(27), 137));
    want.push((ms(35), 200));
    assert_eq!(sent, want);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn trace_files_are_relative_to_the_config_file() {
    let dir = scratch("rel");
    std::fs::create_dir_all(dir.join("traces")).unwrap();
    std::fs::write(dir.join("traces/up.trace"), "1\n2\n").unwrap();
    let cfg = dir.join("box.toml");
    std::fs::write(
        &cfg,
        format!("{BASE}[emulation.to_a]\ntrace = \"traces/up.trace\"\n"),
    )
    .unwrap();
    let c = BoxConfig::load(&cfg).unwrap();
    let t = c.emulation.to_a.as_ref().unwrap().trace.as_ref().unwrap();
    assert_eq!(t.trace.as_ref().unwrap().len(), 2);
    // 1500 bytes every millisecond: 12 Mbit/s is the rate the disciplines see.
    assert_eq!(c.rates()[1].map(|r| r.0), Some(12_000_000));
    // Errors name the key, the file and the line.
    std::fs::write(dir.join("traces/up.trace"), "1\nfast\n").unwrap();
    let e = BoxConfig::load(&cfg).unwrap_err();
    assert_eq!(e.path, "emulation.to_a.trace");
    assert!(
        e.msg.contains("up.trace") && e.msg.contains("line 2"),
        "{e}"
    );
    std::fs::write(
        &cfg,
        format!("{BASE}[emulation.to_a]\ntrace = \"traces/up.trace\"\nrate = \"1Mbit\"\n"),
    )
    .unwrap();
    std::fs::write(dir.join("traces/up.trace"), "1\n2\n").unwrap();
    let e = BoxConfig::load(&cfg).unwrap_err();
    assert_eq!(e.path, "emulation.to_a.trace");
    assert!(e.msg.contains("either 'trace' or 'rate'"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn box_link_serves_the_trace_when_the_loop_wakes_late() {
    // A real clock wakes after the deadline it was asked for, never at it. One
    // opportunity per millisecond (12 Mbit/s); the loop wakes 50 µs late every time.
    let dir = scratch("late");
    let trace = dir.join("t.trace");
    std::fs::write(&trace, "1\n").unwrap();
    let (mut el, clock) = setup(&format!(
        "[emulation.to_b]\ntrace = \"{}\"\n",
        trace.display()
    ));
    el.io().late = std::time::Duration::from_micros(50);
    // Twenty 1500-byte packets at 0.3 ms: one per opportunity from 1 ms on, each sent
    // at the late wake-up after its opportunity.
    for i in 0..20 {
        el.io().arrive(us(300), 0, tcp(i, 1460));
    }
    run_until(&mut el, &clock, ms(40));
    let sent: Vec<(Instant, u16)> = el.io().sent.iter().map(|s| (s.0, tag_of(&s.2))).collect();
    let want: Vec<(Instant, u16)> = (0..20)
        .map(|i| (us(1000 * (i as u64 + 1) + 50), i))
        .collect();
    assert_eq!(sent, want);
    std::fs::remove_dir_all(&dir).ok();
}
