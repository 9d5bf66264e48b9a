//! Line mode in the simulator: one `line` key on a middlebox in front of an ADSL line with
//! deep buffers, Linux hosts at their defaults, a download and an upload at once.
//!
//! ```text
//!  client --lan 100M-- mbox ==adsl 8M/512k ATM, 1000p each way== isp --core 100M-- server
//!                      (middlebox: `line`, or nothing)
//! ```

mod common;

use asymlink_sim::results::{ColumnData, Results};
use asymlink_sim::{RunOptions, Simulation};
use common::run;

fn scenario(middlebox: &str) -> String {
    scenario_with("512kbit", true, middlebox)
}

/// The line with an uplink of `up`, a download, an upload (if `upload`) and pings.
fn scenario_with(up: &str, upload: bool, middlebox: &str) -> String {
    let upload = match upload {
        true => "[[flows]]\nname = \"up\"\nfrom = \"client\"\nto = \"server\"\nport = 5001\napp = { kind = \"bulk\" }",
        false => "",
    };
    format!(
        r#"
        duration = "30s"
        tcp = "linux"
        [monitor]
        interval = "1s"
        events = false
        [[nodes]]
        name = "client"
        [[nodes]]
        name = "mbox"
        kind = "router"
        [[nodes]]
        name = "isp"
        kind = "router"
        [[nodes]]
        name = "server"
        [[links]]
        name = "lan"
        a = "client"
        b = "mbox"
        rate = "100Mbit"
        delay = "100us"
        [[links]]
        name = "adsl"
        a = "mbox"
        b = "isp"
        rate = "8Mbit"
        delay = "5ms"
        linklayer = {{ framing = "atm", overhead = 10 }}
        to_a = {{ queue = {{ kind = "fifo", limit = "1000p" }} }}
        to_b = {{ rate = "{up}", queue = {{ kind = "fifo", limit = "1000p" }} }}
        [[links]]
        name = "core"
        a = "isp"
        b = "server"
        rate = "100Mbit"
        delay = "2ms"
        {middlebox}
        [[flows]]
        name = "down"
        from = "server"
        to = "client"
        port = 80
        app = {{ kind = "bulk", open = "receiver" }}
        {upload}
        [[flows]]
        name = "ping"
        from = "client"
        to = "server"
        port = 7
        app = {{ kind = "ping", interval = "200ms", size = "64B", port = 7 }}
        "#
    )
}

fn goodput_mbps(r: &Results, flow: &str) -> f64 {
    common::value(r, "flow_summary", "flow", flow, "goodput_bps") / 1e6
}

fn ping_p90_ms(r: &Results) -> f64 {
    let t = r.table("measurements").unwrap();
    let ColumnData::F64(v) = t.column("value").unwrap() else {
        panic!()
    };
    let ColumnData::F64(at) = t.column("t").unwrap() else {
        panic!()
    };
    // After both transfers have filled what they fill.
    let mut v: Vec<f64> = v
        .iter()
        .zip(at)
        .filter(|(_, &t)| t >= 10.0)
        .map(|(x, _)| *x)
        .collect();
    v.sort_by(f64::total_cmp);
    v[v.len() * 9 / 10] * 1e3
}

#[test]
fn one_line_keeps_both_directions_moving_and_latency_low() {
    let plain = run(&scenario(""));
    let line = run(&scenario(
        r#"
        [[middleboxes]]
        node = "mbox"
        a = "lan"
        b = "adsl"
        line = { down = "8Mbit", up = "512kbit", linklayer = { framing = "atm", overhead = 10 } }
        "#,
    ));
    let row = |r: &Results| {
        (
            goodput_mbps(r, "down"),
            goodput_mbps(r, "up"),
            ping_p90_ms(r),
        )
    };
    let (pd, pu, pp) = row(&plain);
    let (ld, lu, lp) = row(&line);
    eprintln!("plain: down {pd:.2} up {pu:.3} Mbit/s, ping p90 {pp:.0} ms");
    eprintln!("line:  down {ld:.2} up {lu:.3} Mbit/s, ping p90 {lp:.0} ms");
    // The goal: p90 within the base RTT (14.2 ms) + one MTU's serialisation on the
    // uplink (1500 B in 32 ATM cells at 512 kbit/s: 26.5 ms) + 20 ms.
    let goal = 14.2 + 32.0 * 53.0 * 8.0 / 512.0 + 20.0;
    assert!(lp <= goal, "ping p90 {lp} ms > {goal} ms (plain {pp} ms)");
    assert!(lu > 0.2, "upload {lu} Mbit/s");
    assert!(ld > 4.0, "download {ld} Mbit/s");
}

#[test]
fn on_a_20_to_1_line_the_download_keeps_its_rate_during_an_upload() {
    // 8 Mbit/s / 400 kbit/s ATM: the download's ACKs alone would need 62 % of the shaped
    // uplink; the ACK class is guaranteed half of it (a quarter left the download at 87 %).
    let mb = r#"
        [[middleboxes]]
        node = "mbox"
        a = "lan"
        b = "adsl"
        line = { down = "8Mbit", up = "400kbit", linklayer = { framing = "atm", overhead = 10 } }
        "#;
    // After the start-up (both transfers from 0 s), to the end of the run.
    let rate = |r: &Results, flow: &str| common::goodput_between(r, flow, 8.0, 30.0) / 1e6;
    let alone = rate(&run(&scenario_with("400kbit", false, mb)), "down");
    let both = run(&scenario_with("400kbit", true, mb));
    let (down, up) = (rate(&both, "down"), rate(&both, "up"));
    eprintln!(
        "20:1 line: download alone {alone:.2}, with an upload {down:.2} (upload {up:.3}) Mbit/s"
    );
    assert!(down >= 0.9 * alone, "download {down} vs alone {alone}");
    assert!(up > 0.15, "upload {up} Mbit/s");
}

#[test]
fn a_bad_line_names_the_middlebox() {
    let src = scenario(
        r#"
        [[middleboxes]]
        node = "mbox"
        a = "lan"
        b = "adsl"
        line = { down = "8Mbit", up = "512kbit", down_fraction = 0 }
        "#,
    );
    let e = Simulation::from_toml(&src, RunOptions::default())
        .err()
        .unwrap()
        .to_string();
    assert!(e.starts_with("middleboxes[0].line.down_fraction"), "{e}");
}
