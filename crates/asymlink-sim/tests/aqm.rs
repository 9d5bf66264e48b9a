//! The AQM benchmark (examples/aqm) on a shortened run: the orderings and goals that
//! docs/qdisc.md reports for the full run hold here too.

#[path = "../examples/aqm/row.rs"]
mod row;

fn arm(name: &str) -> row::Row {
    let path = format!(
        "{}/../../examples/aqm/{name}.toml",
        env!("CARGO_MANIFEST_DIR")
    );
    let src = std::fs::read_to_string(path).expect("scenario file");
    row::run(name, &src, Some("15s"), 5.0)
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
