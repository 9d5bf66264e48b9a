//! Scripted loss on simulated links: the chosen packets are lost, the sender repairs them.

mod common;
use asymlink_sim::results::{ColumnData, Results};
use common::{run, value};

/// A 100 KB download over a 10 Mbit/s, 20 ms line with `drop` on the server's direction.
fn download(drop: &str) -> Results {
    run(&format!(
        r#"
duration = "5s"
[[nodes]]
name = "server"
[[nodes]]
name = "client"
[[links]]
name = "line"
a = "server"
b = "client"
rate = "10Mbit"
delay = "20ms"
to_b = {{ drop = {drop} }}
[[flows]]
name = "dl"
from = "server"
to = "client"
tcp = "linux"
app = {{ kind = "bulk", bytes = "100KB", open = "receiver" }}
"#
    ))
}

/// Times of `kind` events of the run, in seconds.
fn events(r: &Results, kind: &str) -> Vec<f64> {
    let t = r.table("events").unwrap();
    let (Some(ColumnData::F64(ts)), Some(ColumnData::Str(kinds))) =
        (t.column("t"), t.column("kind"))
    else {
        panic!("events table")
    };
    ts.iter()
        .zip(kinds)
        .filter(|(_, k)| *k == kind)
        .map(|(t, _)| *t)
        .collect()
}

#[test]
fn a_segment_by_sequence_number_is_lost_once() {
    let r = download(r#"[{ flow = "dl", seq = 14481 }]"#);
    assert_eq!(
        value(&r, "queue_summary", "queue", "line:to_b", "link_loss"),
        1.0
    );
    assert_eq!(value(&r, "flow_summary", "flow", "dl", "retransmits"), 1.0);
    assert_eq!(
        value(&r, "flow_summary", "flow", "dl", "bytes_delivered"),
        100_000.0
    );
    assert_eq!(events(&r, "drop").len(), 1);
    // Nothing is lost without the script.
    let clean = download("[]");
    assert_eq!(
        value(&clean, "flow_summary", "flow", "dl", "retransmits"),
        0.0
    );
}

#[test]
fn losing_the_retransmission_too_costs_a_second_repair() {
    let r = download(r#"[{ flow = "dl", seq = 14481 }, { flow = "dl", seq = 14481, tx = 2 }]"#);
    assert_eq!(
        value(&r, "queue_summary", "queue", "line:to_b", "link_loss"),
        2.0
    );
    assert!(value(&r, "flow_summary", "flow", "dl", "retransmits") >= 2.0);
    assert_eq!(
        value(&r, "flow_summary", "flow", "dl", "bytes_delivered"),
        100_000.0
    );
}

#[test]
fn a_lost_syn_ack_delays_the_transfer_by_the_initial_rto() {
    let t = |drop| {
        value(
            &download(drop),
            "measurements",
            "metric",
            "transfer_time_s",
            "value",
        )
    };
    let (clean, lost) = (t("[]"), t(r#"["syn:1"]"#));
    // The SYN-ACK is the first SYN toward the client; the client's SYN is retransmitted
    // after the initial RTO of 1 s and the server answers it again.
    assert!(lost - clean > 0.9 && lost - clean < 1.1, "{clean} → {lost}");
}

#[test]
fn unknown_flows_are_named_at_their_key() {
    let src = r#"
duration = "1s"
[[nodes]]
name = "a"
[[nodes]]
name = "b"
[[links]]
a = "a"
b = "b"
rate = "1Mbit"
to_a = { drop = ["ack:1", { flow = "nope", seq = 1 }] }
[[flows]]
from = "a"
to = "b"
app = { kind = "bulk" }
"#;
    let e = asymlink_sim::Simulation::from_toml(src, Default::default())
        .err()
        .unwrap();
    assert_eq!(e.path, "links[0].to_a.drop[1].flow");
    assert!(e.to_string().contains("unknown flow 'nope'"), "{e}");
    let e = asymlink_sim::Simulation::from_toml(
        &src.replace("{ flow = \"nope\", seq = 1 }", "\"ak:1\""),
        Default::default(),
    )
    .err()
    .unwrap();
    assert!(e.to_string().contains("unknown packet kind 'ak'"), "{e}");
}

#[test]
fn a_second_write_follows_the_idle_period() {
    let r = run(r#"
duration = "10s"
[[nodes]]
name = "server"
[[nodes]]
name = "client"
[[links]]
a = "server"
b = "client"
rate = "10Mbit"
delay = "20ms"
[[flows]]
name = "dl"
from = "server"
to = "client"
tcp = "linux"
app = { kind = "bulk", bytes = "30KB", then = "60KB", idle = "2s", open = "receiver" }
"#);
    assert_eq!(
        value(&r, "flow_summary", "flow", "dl", "bytes_delivered"),
        90_000.0
    );
    let t = value(&r, "measurements", "metric", "transfer_time_s", "value");
    assert!(t > 2.0 && t < 2.5, "{t}");
}
