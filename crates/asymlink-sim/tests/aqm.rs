//! The AQM benchmark (examples/aqm) on a shortened run: the orderings and goals that
//! docs/qdisc.md reports for the full run hold here too.

#[path = "../examples/aqm/row.rs"]
mod row;

fn src(name: &str) -> String {
    let path = format!(
        "{}/../../examples/aqm/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    std::fs::read_to_string(path).expect("scenario file")
}

fn arm(name: &str) -> row::Row {
    row::run(name, &src(name), Some("15s"), 5.0)
}

/// The arm with `aqm = "cobalt"` on its flow-queueing discipline.
fn cobalt_arm(name: &str) -> row::Row {
    let from = format!("kind = \"{name}\",");
    let to = format!("kind = \"{name}\", aqm = \"cobalt\",");
    let s = src(name);
    assert!(s.contains(&from));
    row::run(name, &s.replace(&from, &to), Some("15s"), 5.0)
}

#[test]
fn aqm_benchmark_orderings() {
    let base = arm("unloaded");
    let fifo = arm("fifo");
    let codel = arm("codel");
    let fq = arm("fq_codel");
    let host = arm("host_fq_codel");
    for r in [&fifo, &codel, &fq, &host] {
        assert!(r.utilization > 0.95, "{r:?}");
        assert!(r.drops > 0, "{r:?}");
        assert_eq!(r.flows.len(), 11, "{}: 9 bulk, udp, ping", r.arm);
    }
    // The bloated FIFO holds about its whole buffer; CoDel keeps far less standing.
    assert!(fifo.standing_ms > 500.0, "{fifo:?}");
    assert!(codel.standing_ms < fifo.standing_ms / 10.0, "{codel:?}");
    assert!(host.sojourn_ms[0] < fifo.sojourn_ms[0] / 10.0, "{host:?}");
    // Flow queueing: the sparse ping keeps its unloaded RTT (within 10 ms at p90).
    assert!(fq.ping_ms[1] - base.ping_ms[1] < 10.0, "{fq:?} vs {base:?}");
    assert!(
        host.ping_ms[1] - base.ping_ms[1] < 10.0,
        "{host:?} vs {base:?}"
    );
    assert!(fifo.ping_ms[1] > 500.0, "{fifo:?}");
    // Per-flow fairness gives the 8-flow host most of the bulk rate; host-then-flow
    // splits it between the hosts within 10 % of equal.
    assert!(fq.h1_share() < 0.25, "{fq:?}");
    assert!((host.h1_share() - 0.5).abs() < 0.05, "{host:?}");
    // The unresponsive 2 Mbit/s UDP flow is below its host's share: it is not starved.
    assert!(host.udp_mbps > 1.9, "{host:?}");
}

/// COBALT on the flow queues: the median sojourn under load (the unresponsive UDP flow
/// included) at most twice the target, where RFC 8289 CoDel's is above it; the UDP
/// packets' own median near target; the sparse ping and the host split kept.
#[test]
fn aqm_benchmark_cobalt() {
    let base = arm("unloaded");
    let fq = arm("fq_codel");
    let fq_cobalt = cobalt_arm("fq_codel");
    let host_cobalt = cobalt_arm("host_fq_codel");
    assert!(fq.sojourn_ms[0] > 10.0, "{fq:?}");
    assert!(fq.sojourn_tcp_udp_ms[1] > 50.0, "{fq:?}");
    for r in [&fq_cobalt, &host_cobalt] {
        assert!(r.sojourn_ms[0] <= 10.0, "{r:?}");
        assert!(r.sojourn_tcp_udp_ms[1] <= 10.0, "{r:?}");
        assert!(r.ping_ms[1] - base.ping_ms[1] < 10.0, "{r:?}");
        assert!(r.utilization > 0.95, "{r:?}");
        // The decaying count does it: nothing overflows, BLUE stays at 0.
        let blue = r.counters.iter().find(|(n, _)| n == "blue_drops");
        assert_eq!(blue.map(|(_, v)| *v), Some(0), "{r:?}");
    }
    assert!((fq_cobalt.udp_mbps - 1.0).abs() < 0.1, "{fq_cobalt:?}");
    assert!(
        (host_cobalt.h1_share() - 0.5).abs() < 0.1,
        "{host_cobalt:?}"
    );
}
