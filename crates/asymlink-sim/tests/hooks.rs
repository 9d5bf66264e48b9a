//! The host-level hooks later mechanisms build on: a conditioner at the sender's TCP
//! output and a receive-window policy at the receiver.

use asymlink_core::time::{Duration, Instant};
use asymlink_sim::packet::ConnId;
use asymlink_sim::results::ColumnData;
use asymlink_sim::tcp::{Admit, Conditioner, RwndPolicy};
use asymlink_sim::{RunOptions, Simulation};
use std::sync::{Arc, Mutex};

const SRC: &str = r#"
    duration = "20s"
    tcp = { profile = "paper", rcvbuf = "1MB" }
    [[nodes]]
    name = "s"
    [[nodes]]
    name = "c"
    [[links]]
    a = "s"
    b = "c"
    rate = "100Mbit"
    delay = "10ms"
    [[flows]]
    from = "s"
    to = "c"
    app = { kind = "bulk" }
"#;

fn delivered(sim: &Simulation) -> i64 {
    match sim
        .results()
        .table("flow_summary")
        .unwrap()
        .column("bytes_delivered")
        .unwrap()
    {
        ColumnData::I64(v) => v[0],
        _ => unreachable!(),
    }
}

/// A token bucket at 1 Mbit/s with a 15 ms tick, as a conditioner would do.
struct Bucket {
    tokens: i64,
    last: Instant,
    tick: Duration,
    opened: Arc<Mutex<Vec<ConnId>>>,
}

impl Conditioner for Bucket {
    fn admit(&mut self, now: Instant, _conn: ConnId, ip_len: u32) -> Admit {
        let dt = (now - self.last).as_nanos() as i64;
        self.last = now;
        self.tokens = (self.tokens + dt / 8_000).min(20_000); // 1 Mbit/s = 1 byte per 8 us
        if self.tokens >= ip_len as i64 {
            self.tokens -= ip_len as i64;
            Admit::Send
        } else {
            let wait = (ip_len as i64 - self.tokens) * 8_000;
            let wait = Duration::from_nanos(wait as u64).max(self.tick);
            Admit::Wait(now + wait)
        }
    }
    fn on_open(&mut self, _now: Instant, conn: ConnId) {
        self.opened.lock().unwrap().push(conn);
    }
}

#[test]
fn a_conditioner_paces_the_sender() {
    let mut sim = Simulation::from_toml(SRC, RunOptions::default()).unwrap();
    let opened = Arc::new(Mutex::new(Vec::new()));
    sim.set_conditioner(
        "s",
        Box::new(Bucket {
            tokens: 0,
            last: Instant::ZERO,
            tick: Duration::from_millis(15),
            opened: opened.clone(),
        }),
    )
    .unwrap();
    sim.run();
    let bps = delivered(&sim) as f64 * 8.0 / 20.0;
    // 1 Mbit/s of IP bytes; payload is 1000/1040 of it, minus the handshake time.
    assert!((0.90e6..=0.97e6).contains(&bps), "{bps}");
    assert_eq!(opened.lock().unwrap().len(), 1);
    assert!(sim.set_conditioner("nope", Box::new(Noop)).is_err());
}

struct Noop;
impl Conditioner for Noop {
    fn admit(&mut self, _: Instant, _: ConnId, _: u32) -> Admit {
        Admit::Send
    }
}

struct Fixed(u64);
impl RwndPolicy for Fixed {
    fn window(&mut self, _now: Instant, _conn: ConnId, free: u64, _mss: u32) -> u64 {
        self.0.min(free)
    }
}

#[test]
fn a_receive_window_policy_limits_the_sender() {
    let mut sim = Simulation::from_toml(SRC, RunOptions::default()).unwrap();
    sim.set_rwnd_policy("c", Box::new(Fixed(10_000))).unwrap();
    sim.run();
    // 10 000 bytes per 20 ms RTT (plus serialisation): about 4 Mbit/s.
    let bps = delivered(&sim) as f64 * 8.0 / 20.0;
    let expected = 10_000.0 * 8.0 / (0.020 + 2.0 * 1040.0 * 8.0 / 100e6);
    assert!(
        (bps - expected).abs() / expected < 0.05,
        "{bps} vs {expected}"
    );
}
