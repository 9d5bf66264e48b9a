//! Turning the world's state into result tables.

use crate::engine::{dir_stats, World};
use crate::results::{ColumnData, Results, Table};
use asymlink_core::qdisc::{DropReason, FilterReason, QdiscStats};

pub(crate) fn results(w: &World, wall_s: f64) -> Results {
    let queue_names: Vec<String> = w.dirs.iter().map(|d| d.name.clone()).collect();
    let flow_names: Vec<String> = w.flows.iter().map(|f| f.name.clone()).collect();
    let mut tables = w
        .monitor
        .tables(&w.labels, &queue_names, &queue_names, &flow_names);
    tables.push(flow_summary(w));
    tables.push(queue_summary(w));
    Results {
        scenario: w.spec.name.clone(),
        seed: w.spec.seed,
        duration_s: w.now.as_secs_f64(),
        wall_s,
        events: w.events,
        packet_hops: w.packet_hops,
        trace_hash: w.trace_hash,
        tables,
    }
}

fn flow_summary(w: &World) -> Table {
    let n = w.flows.len();
    let mut name = Vec::with_capacity(n);
    let mut kind = Vec::with_capacity(n);
    let mut from = Vec::with_capacity(n);
    let mut to = Vec::with_capacity(n);
    let mut profile = Vec::with_capacity(n);
    let mut conns = Vec::with_capacity(n);
    let mut sent = Vec::with_capacity(n);
    let mut retx_bytes = Vec::with_capacity(n);
    let mut delivered = Vec::with_capacity(n);
    let mut retx = Vec::with_capacity(n);
    let mut timeouts = Vec::with_capacity(n);
    let mut fast = Vec::with_capacity(n);
    let mut goodput = Vec::with_capacity(n);
    let end = w.now.as_secs_f64();
    for (fi, f) in w.flows.iter().enumerate() {
        let _ = fi;
        name.push(f.name.clone());
        kind.push(w.apps[f.app as usize].kind().to_string());
        from.push(w.spec.nodes[f.from].name.clone());
        to.push(w.spec.nodes[f.to].name.clone());
        profile.push(f.tcp.profile.clone());
        let mut c = 0i64;
        let (mut s, mut rb, mut d, mut r, mut t, mut fr) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        for slot in w.conns.iter().filter(|s| s.app == f.app && s.primary) {
            let Some(conn) = &slot.conn else { continue };
            c += 1;
            let st = conn.stats();
            s += st.bytes_sent;
            rb += st.bytes_retransmitted;
            r += st.retransmits;
            t += st.timeouts;
            fr += st.fast_retransmits;
            if let Some(p) = w
                .conns
                .get(slot.peer as usize)
                .and_then(|p| p.conn.as_ref())
            {
                d += p.stats().bytes_delivered;
            }
        }
        conns.push(c);
        sent.push(s as i64);
        retx_bytes.push(rb as i64);
        delivered.push(d as i64);
        retx.push(r as i64);
        timeouts.push(t as i64);
        fast.push(fr as i64);
        let active = (end - f.start).max(1e-9);
        goodput.push(d as f64 * 8.0 / active);
    }
    Table::new("flow_summary")
        .with("flow", ColumnData::Str(name))
        .with("app", ColumnData::Str(kind))
        .with("from", ColumnData::Str(from))
        .with("to", ColumnData::Str(to))
        .with("tcp", ColumnData::Str(profile))
        .with("connections", ColumnData::I64(conns))
        .with("bytes_sent", ColumnData::I64(sent))
        .with("bytes_retransmitted", ColumnData::I64(retx_bytes))
        .with("bytes_delivered", ColumnData::I64(delivered))
        .with("retransmits", ColumnData::I64(retx))
        .with("timeouts", ColumnData::I64(timeouts))
        .with("fast_retransmits", ColumnData::I64(fast))
        .with("goodput_bps", ColumnData::F64(goodput))
}

fn queue_summary(w: &World) -> Table {
    let mut rows: Vec<(
        String,
        String,
        String,
        String,
        QdiscStats,
        Option<(u64, u64, u64, u64, f64)>,
    )> = Vec::new();
    // Per row, for link directions: wire bytes, pure ACKs (packets, IP bytes, wire bytes),
    // mean and max sojourn (ms).
    let mut extra: Vec<Option<(u64, (u64, u64, u64), f64, f64)>> = Vec::new();
    let end_ns = w.now.as_nanos().max(1);
    for d in &w.dirs {
        let st = dir_stats(&w.mbs, d);
        let kind = match &d.source {
            crate::engine::Source::Own(e) => e.qdisc().kind(),
            crate::engine::Source::Mb(m, md) => w.mbs[*m as usize].mb.egress(*md).qdisc().kind(),
        };
        let util = d.busy_ns.min(end_ns) as f64 / end_ns as f64;
        rows.push((
            d.name.clone(),
            d.link.clone(),
            d.dir_name.to_string(),
            kind.to_string(),
            st.clone(),
            Some((d.tx_packets, d.tx_bytes, d.lost, d.rate.0, util)),
        ));
        extra.push(Some((
            d.tx_wire_bytes,
            d.tx_acks,
            if d.tx_packets == 0 {
                0.0
            } else {
                d.sojourn_sum_ns as f64 / d.tx_packets as f64 / 1e6
            },
            d.sojourn_max_ns as f64 / 1e6,
        )));
        let children = match &d.source {
            crate::engine::Source::Own(e) => e.qdisc().child_stats(),
            crate::engine::Source::Mb(m, md) => {
                w.mbs[*m as usize].mb.egress(*md).qdisc().child_stats()
            }
        };
        for (cname, cst) in children {
            extra.push(None);
            rows.push((
                format!("{}/{cname}", d.name),
                d.link.clone(),
                d.dir_name.to_string(),
                "class".into(),
                cst,
                None,
            ));
        }
    }
    let col_s = |f: &dyn Fn(
        &(
            String,
            String,
            String,
            String,
            QdiscStats,
            Option<(u64, u64, u64, u64, f64)>,
        ),
    ) -> String| { ColumnData::Str(rows.iter().map(f).collect()) };
    let col_i = |f: &dyn Fn(
        &(
            String,
            String,
            String,
            String,
            QdiscStats,
            Option<(u64, u64, u64, u64, f64)>,
        ),
    ) -> i64| { ColumnData::I64(rows.iter().map(f).collect()) };
    let mut t = Table::new("queue_summary")
        .with("queue", col_s(&|r| r.0.clone()))
        .with("link", col_s(&|r| r.1.clone()))
        .with("dir", col_s(&|r| r.2.clone()))
        .with("kind", col_s(&|r| r.3.clone()))
        .with("received", col_i(&|r| r.4.received as i64))
        .with("enqueued", col_i(&|r| r.4.enqueued as i64))
        .with("dequeued", col_i(&|r| r.4.dequeued as i64))
        .with("dequeued_bytes", col_i(&|r| r.4.dequeued_bytes as i64))
        .with("dropped", col_i(&|r| r.4.drops() as i64))
        .with("filtered", col_i(&|r| r.4.filters() as i64))
        .with("backlog_packets", col_i(&|r| r.4.backlog.packets as i64))
        .with(
            "max_backlog_packets",
            col_i(&|r| r.4.max_backlog_packets as i64),
        )
        .with(
            "max_backlog_bytes",
            col_i(&|r| r.4.max_backlog_bytes as i64),
        );
    for reason in DropReason::ALL {
        t = t.with(
            &format!("dropped_{}", reason.name()),
            col_i(&|r| r.4.dropped_for(reason) as i64),
        );
    }
    for reason in FilterReason::ALL {
        t = t.with(
            &format!("filtered_{}", reason.name()),
            col_i(&|r| r.4.filtered_for(reason) as i64),
        );
    }
    t.with(
        "tx_packets",
        col_i(&|r| r.5.map(|x| x.0 as i64).unwrap_or(-1)),
    )
    .with(
        "tx_bytes",
        col_i(&|r| r.5.map(|x| x.1 as i64).unwrap_or(-1)),
    )
    .with(
        "link_loss",
        col_i(&|r| r.5.map(|x| x.2 as i64).unwrap_or(-1)),
    )
    .with(
        "rate_bps",
        col_i(&|r| r.5.map(|x| x.3 as i64).unwrap_or(-1)),
    )
    .with(
        "utilization",
        ColumnData::F64(
            rows.iter()
                .map(|r| r.5.map(|x| x.4).unwrap_or(f64::NAN))
                .collect(),
        ),
    )
    .with(
        "tx_wire_bytes",
        ColumnData::I64(
            extra
                .iter()
                .map(|e| e.map(|x| x.0 as i64).unwrap_or(-1))
                .collect(),
        ),
    )
    .with(
        "tx_pure_acks",
        ColumnData::I64(
            extra
                .iter()
                .map(|e| e.map(|x| x.1 .0 as i64).unwrap_or(-1))
                .collect(),
        ),
    )
    .with(
        "tx_pure_ack_bytes",
        ColumnData::I64(
            extra
                .iter()
                .map(|e| e.map(|x| x.1 .1 as i64).unwrap_or(-1))
                .collect(),
        ),
    )
    .with(
        "tx_pure_ack_wire_bytes",
        ColumnData::I64(
            extra
                .iter()
                .map(|e| e.map(|x| x.1 .2 as i64).unwrap_or(-1))
                .collect(),
        ),
    )
    .with(
        "mean_sojourn_ms",
        ColumnData::F64(
            extra
                .iter()
                .map(|e| e.map(|x| x.2).unwrap_or(f64::NAN))
                .collect(),
        ),
    )
    .with(
        "max_sojourn_ms",
        ColumnData::F64(
            extra
                .iter()
                .map(|e| e.map(|x| x.3).unwrap_or(f64::NAN))
                .collect(),
        ),
    )
}
