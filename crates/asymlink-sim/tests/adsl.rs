//! The ADSL modem in the simulator: a router whose uplink is an ATM line with its own
//! FIFO. A middlebox shaper in front of it that under-counts the ATM overhead builds a
//! hidden queue in the modem; one that charges cells exactly keeps the queue at home.
//!
//! ```text
//!  client --lan 100M-- mbox --tomodem 100M-- modem ==adsl 8M/512k ATM, 50p== isp --core 100M-- server
//!                      (middlebox: five classes + HTB on to_b)
//! ```

mod common;

use asymlink_sim::results::Results;
use common::run;

/// A column of `queue_summary` at the row of queue `q`.
fn summary(r: &Results, q: &str, col: &str) -> f64 {
    common::value(r, "queue_summary", "queue", q, col)
}

fn scenario(shaper_linklayer: &str, root_rate: &str) -> String {
    format!(
        r#"
        duration = "40s"
        tcp = {{ profile = "rfc", mss = "1448B", rto_min = "200ms" }}
        [monitor]
        interval = "1s"
        events = false
        [[nodes]]
        name = "client"
        [[nodes]]
        name = "mbox"
        kind = "router"
        [[nodes]]
        name = "modem"
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
        name = "tomodem"
        a = "mbox"
        b = "modem"
        rate = "100Mbit"
        delay = "100us"
        [[links]]
        name = "adsl"
        a = "modem"
        b = "isp"
        rate = "8Mbit"
        delay = "10ms"
        linklayer = {{ encap = "llc_snap_routed", oam_one_in = 27 }}
        queue = {{ kind = "fifo", limit = "50p" }}
        to_b = {{ rate = "512kbit" }}
        [[links]]
        name = "core"
        a = "isp"
        b = "server"
        rate = "100Mbit"
        delay = "5ms"
        [[middleboxes]]
        node = "mbox"
        a = "lan"
        b = "tomodem"
        [middleboxes.to_b]
        classifier = {{ preset = "five_class" }}
        qdisc = {{ kind = "htb", default = "default", linklayer = {shaper_linklayer}, classes = [
          {{ name = "root", rate = "{root_rate}" }},
          {{ name = "ack", parent = "root", rate = "{root_rate}", prio = 0 }},
          {{ name = "default", parent = "root", rate = "8kbit", ceil = "{root_rate}", prio = 1 }},
        ] }}
        [[flows]]
        name = "down"
        from = "server"
        to = "client"
        port = 80
        tcp = {{ profile = "rfc", mss = "1448B", rto_min = "200ms", rcvbuf = "34752B" }}
        app = {{ kind = "bulk", open = "receiver" }}
        [[flows]]
        name = "up"
        from = "client"
        to = "server"
        port = 12345
        start = "2s"
        app = {{ kind = "bulk" }}
        "#
    )
}

#[test]
fn under_counting_the_atm_overhead_hides_a_queue_in_the_modem() {
    // IP-size accounting at the paper's 432 kbit/s: 52-byte ACKs cost 110 wire bytes
    // (2 cells + the OAM share) but are charged 52, so the line is overdriven.
    let ip = run(&scenario("\"raw\"", "432kbit"));
    // Exact cell accounting at 480 kbit/s of cells (97 % of the 493 kbit/s of user cells
    // a 512 kbit/s line with one OAM cell in 27 carries).
    let exact = run(&scenario(
        "{ encap = \"llc_snap_routed\", oam_one_in = 27 }",
        "480kbit",
    ));
    let modem = "adsl:to_b";
    let (ip_delay, exact_delay) = (
        summary(&ip, modem, "mean_sojourn_ms"),
        summary(&exact, modem, "mean_sojourn_ms"),
    );
    eprintln!("modem queue: ip {ip_delay:.1} ms, exact {exact_delay:.1} ms");
    assert!(ip_delay > 150.0, "the hidden queue: {ip_delay} ms");
    assert!(exact_delay < 20.0, "no hidden queue: {exact_delay} ms");
    // With exact accounting the queue is in the middlebox instead.
    let mbox = "tomodem:to_b";
    assert!(summary(&exact, mbox, "mean_sojourn_ms") > 50.0);
    // The line charges every ACK 2 cells plus the OAM share: 110 bytes.
    let acks = summary(&exact, modem, "tx_pure_acks");
    assert!(acks > 1000.0);
    assert_eq!(
        summary(&exact, modem, "tx_pure_ack_wire_bytes"),
        acks * 110.0
    );
    assert_eq!(summary(&exact, modem, "tx_pure_ack_bytes"), acks * 52.0);
}
