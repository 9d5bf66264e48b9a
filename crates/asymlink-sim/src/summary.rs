//! Turning the world's state into result tables.

use crate::engine::{LinkDir, Source, World};
use crate::results::{ColumnData, Results, Table};
use crate::tcp::CcAlgo;
use asymlink_core::qdisc::{DropReason, FilterReason, QdiscStats};

pub(crate) fn results(w: &World, wall_s: f64) -> Results {
    let queue_names: Vec<String> = w.dirs.iter().map(|d| d.name.clone()).collect();
    let flow_names: Vec<String> = w.flows.iter().map(|f| f.name.clone()).collect();
    let mut tables = w
        .monitor
        .tables(&w.labels, &queue_names, &queue_names, &flow_names);
    tables.push(flow_summary(w));
    tables.push(queue_summary(w));
    tables.push(qdisc_counters(w));
    if w.mbs.iter().any(|m| !m.mb.table().is_empty()) {
        tables.push(subscriber_summary(w));
    }
    Results {
        scenario: w.spec.name.clone(),
        seed: w.spec.seed,
        duration_s: w.now.as_secs_f64(),
        wall_s,
        events: w.events,
        packet_hops: w.packet_hops,
        trace_hash: w.trace_hash,
        threads: 1,
        late_handovers: 0,
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
    let mut probes = Vec::with_capacity(n);
    let mut probe_rtts = Vec::with_capacity(n);
    let mut startup_exit = Vec::with_capacity(n);
    let mut started = Vec::with_capacity(n);
    let mut goodput = Vec::with_capacity(n);
    let end = w.now.as_secs_f64();
    // Each application's primary connections, in connection order (one pass, not one per
    // flow).
    let mut primaries: Vec<Vec<u32>> = vec![Vec::new(); w.apps.len()];
    for (i, slot) in w.conns.iter().enumerate() {
        if slot.primary {
            if let Some(v) = primaries.get_mut(slot.app as usize) {
                v.push(i as u32);
            }
        }
    }
    for (fi, f) in w.flows.iter().enumerate() {
        let _ = fi;
        name.push(f.name.clone());
        kind.push(w.apps[f.app as usize].kind().to_string());
        from.push(w.spec.nodes[f.from].name.clone());
        to.push(w.spec.nodes[f.to].name.clone());
        profile.push(f.tcp.profile.clone());
        let mut c = 0i64;
        let (mut s, mut rb, mut d, mut r, mut t, mut fr) = (0u64, 0u64, 0u64, 0u64, 0u64, 0u64);
        let mut lp = 0u64;
        let (mut prtt, mut sx, mut st0) = (0u64, f64::NAN, f64::NAN);
        for slot in primaries[f.app as usize]
            .iter()
            .map(|&i| &w.conns[i as usize])
        {
            let Some(st) = slot.totals() else { continue };
            c += 1;
            s += st.bytes_sent;
            rb += st.bytes_retransmitted;
            r += st.retransmits;
            t += st.timeouts;
            fr += st.fast_retransmits;
            lp += st.loss_probes;
            if let Some((probe_rtts, startup_exit, started)) = st.bbr {
                prtt += probe_rtts;
                if let Some(t) = startup_exit {
                    sx = if sx.is_nan() {
                        t.as_secs_f64()
                    } else {
                        sx.min(t.as_secs_f64())
                    };
                }
                if let Some(t) = started {
                    st0 = if st0.is_nan() {
                        t.as_secs_f64()
                    } else {
                        st0.min(t.as_secs_f64())
                    };
                }
            }
            if let Some(p) = w
                .conns
                .get(slot.peer as usize)
                .and_then(|p| p.bytes_delivered())
            {
                d += p;
            }
        }
        conns.push(c);
        sent.push(s as i64);
        retx_bytes.push(rb as i64);
        delivered.push(d as i64);
        retx.push(r as i64);
        timeouts.push(t as i64);
        fast.push(fr as i64);
        probes.push(lp as i64);
        probe_rtts.push(prtt as i64);
        startup_exit.push(sx);
        started.push(st0);
        let active = (end - f.start).max(1e-9);
        goodput.push(d as f64 * 8.0 / active);
    }
    let t = Table::new("flow_summary")
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
        .with("loss_probes", ColumnData::I64(probes));
    // BBR's columns only where a flow runs BBR (NaN for the others' startup exit).
    let t = if w.flows.iter().any(|f| f.tcp.cc == CcAlgo::Bbr) {
        t.with("bbr_probe_rtts", ColumnData::I64(probe_rtts))
            .with("bbr_startup_exit_s", ColumnData::F64(startup_exit))
            .with("bbr_started_s", ColumnData::F64(started))
    } else {
        t
    };
    t.with("goodput_bps", ColumnData::F64(goodput))
}

/// A row's counters: borrowed from the discipline where it keeps them, else computed (a
/// middlebox's over its subscribers' trees, a class's) and boxed, so that a row stays
/// small (tens of thousands of link directions).
enum RowStats<'a> {
    Borrowed(&'a QdiscStats),
    Owned(Box<QdiscStats>),
}

impl<'a> RowStats<'a> {
    fn of(c: std::borrow::Cow<'a, QdiscStats>) -> RowStats<'a> {
        match c {
            std::borrow::Cow::Borrowed(s) => RowStats::Borrowed(s),
            std::borrow::Cow::Owned(s) => RowStats::Owned(Box::new(s)),
        }
    }

    fn get(&self) -> &QdiscStats {
        match self {
            RowStats::Borrowed(s) => s,
            RowStats::Owned(s) => s,
        }
    }
}

/// One row of `queue_summary`: a link direction's discipline, or one of its classes.
struct QueueRow<'a> {
    name: std::borrow::Cow<'a, str>,
    dir: &'a LinkDir,
    kind: &'static str,
    stats: RowStats<'a>,
    /// Whether the row is the link direction itself (link columns apply) or a class.
    is_link: bool,
}

fn queue_summary(w: &World) -> Table {
    let mut rows: Vec<QueueRow<'_>> = Vec::with_capacity(w.dirs.len());
    for d in &w.dirs {
        let q = egress_qdisc(w, d);
        rows.push(QueueRow {
            name: std::borrow::Cow::Borrowed(&d.name),
            dir: d,
            kind: q.map_or("fifo", |q| q.kind()),
            // A middlebox's: over all its subscribers' trees.
            stats: RowStats::of(crate::engine::dir_stats(&w.mbs, d)),
            is_link: true,
        });
        for (cname, cst) in q.map(|q| q.child_stats()).unwrap_or_default() {
            rows.push(QueueRow {
                name: std::borrow::Cow::Owned(format!("{}/{cname}", d.name)),
                dir: d,
                kind: "class",
                stats: RowStats::Owned(Box::new(cst)),
                is_link: false,
            });
        }
    }
    let end_ns = w.now.as_nanos().max(1);
    let s = |f: &dyn Fn(&QueueRow<'_>) -> String| ColumnData::Str(rows.iter().map(f).collect());
    let i = |f: &dyn Fn(&QdiscStats) -> u64| {
        ColumnData::I64(rows.iter().map(|r| f(r.stats.get()) as i64).collect())
    };
    // Link columns: -1 (or NaN) on class rows.
    let li = |f: &dyn Fn(&LinkDir) -> u64| {
        ColumnData::I64(
            rows.iter()
                .map(|r| if r.is_link { f(r.dir) as i64 } else { -1 })
                .collect(),
        )
    };
    let lf = |f: &dyn Fn(&LinkDir) -> f64| {
        ColumnData::F64(
            rows.iter()
                .map(|r| if r.is_link { f(r.dir) } else { f64::NAN })
                .collect(),
        )
    };
    let mut t = Table::new("queue_summary")
        .with("queue", s(&|r| r.name.to_string()))
        .with("link", s(&|r| r.dir.link.clone()))
        .with("dir", s(&|r| r.dir.dir_name.to_string()))
        .with("kind", s(&|r| r.kind.to_string()))
        .with("received", i(&|st| st.received))
        .with("enqueued", i(&|st| st.enqueued))
        .with("dequeued", i(&|st| st.dequeued))
        .with("dequeued_bytes", i(&|st| st.dequeued_bytes))
        .with("dropped", i(&|st| st.drops()))
        .with("filtered", i(&|st| st.filters()))
        .with("backlog_packets", i(&|st| st.backlog.packets as u64))
        .with(
            "max_backlog_packets",
            i(&|st| st.max_backlog_packets as u64),
        )
        .with("max_backlog_bytes", i(&|st| st.max_backlog_bytes));
    for reason in DropReason::ALL {
        t = t.with(
            &format!("dropped_{}", reason.name()),
            i(&|st| st.dropped_for(reason)),
        );
    }
    for reason in FilterReason::ALL {
        t = t.with(
            &format!("filtered_{}", reason.name()),
            i(&|st| st.filtered_for(reason)),
        );
    }
    t.with("tx_packets", li(&|d| d.line.stats().sent))
        .with("tx_bytes", li(&|d| d.line.stats().sent_bytes))
        .with("tx_wire_bytes", li(&|d| d.line.stats().wire_bytes))
        .with("tx_pure_acks", li(&|d| d.tx_acks.0))
        .with("tx_pure_ack_bytes", li(&|d| d.tx_acks.1))
        .with("tx_pure_ack_wire_bytes", li(&|d| d.tx_acks.2))
        .with("link_loss", li(&|d| d.line.stats().lost))
        .with("modem_buffer_full", li(&|d| d.line.stats().modem_dropped))
        .with(
            "rate_bps",
            li(&|d| d.line.nominal_rate().map_or(0, |r| r.0)),
        )
        .with(
            "utilization",
            lf(&|d| d.line.stats().busy_ns.min(end_ns) as f64 / end_ns as f64),
        )
        .with(
            "mean_sojourn_ms",
            lf(&|d| {
                let sent = d.line.stats().sent;
                if sent == 0 {
                    0.0
                } else {
                    d.sojourn_sum_ns as f64 / sent as f64 / 1e6
                }
            }),
        )
        .with("max_sojourn_ms", lf(&|d| d.sojourn_max_ns as f64 / 1e6))
        .with("p50_sojourn_ms", lf(&|d| all_quantile(d, 0.5)))
        .with("p90_sojourn_ms", lf(&|d| all_quantile(d, 0.9)))
        .with("p99_sojourn_ms", lf(&|d| all_quantile(d, 0.99)))
        .with("p50_sojourn_tcp_ms", lf(&|d| proto_quantile(d, 0, 0.5)))
        .with("p90_sojourn_tcp_ms", lf(&|d| proto_quantile(d, 0, 0.9)))
        .with("p50_sojourn_udp_ms", lf(&|d| proto_quantile(d, 1, 0.5)))
        .with("p90_sojourn_udp_ms", lf(&|d| proto_quantile(d, 1, 0.9)))
}

/// The `q` quantile of the sojourn times of a link direction's TCP (`proto` 0) or UDP (1)
/// packets, ms; 0 when it sent none.
fn proto_quantile(d: &LinkDir, proto: usize, q: f64) -> f64 {
    d.sojourn_hist.quantile(proto, q) as f64 / 1e6
}

/// The `q` quantile of the sojourn times of all of a link direction's packets, ms.
fn all_quantile(d: &LinkDir, q: f64) -> f64 {
    d.sojourn_hist.quantile_all(q) as f64 / 1e6
}

/// The discipline feeding a link direction; `None`: the line's own FIFO
/// ([`Source::Line`]: no classes, no counters of its own).
fn egress_qdisc<'a>(
    w: &'a World,
    d: &'a LinkDir,
) -> Option<&'a dyn asymlink_core::qdisc::Qdisc<crate::packet::SimPacket>> {
    match &d.source {
        Source::Own(e) => Some(e.qdisc()),
        Source::Mb(m, md) => Some(w.mbs[*m as usize].mb.top_level().egress(*md).qdisc()),
        Source::Line => None,
    }
}

/// Discipline-specific counters (`Qdisc::counters`, e.g. the ACK shaper's delay-bound
/// hits), then middlebox rewriters' counters (`Rewriter::counters`), one row per counter.
fn qdisc_counters(w: &World) -> Table {
    let (mut queue, mut name, mut value) = (Vec::new(), Vec::new(), Vec::new());
    for d in &w.dirs {
        for (n, v) in egress_qdisc(w, d).map(|q| q.counters()).unwrap_or_default() {
            queue.push(d.name.clone());
            name.push(n.to_string());
            value.push(v as i64);
        }
    }
    // Middlebox rewriters' counters, as `<middlebox>:rewrite:<kind>`.
    for m in &w.mbs {
        for r in m.mb.top_level().rewriters() {
            for (n, v) in r.counters() {
                queue.push(format!("{}:rewrite:{}", m.name, r.kind()));
                name.push(n.to_string());
                value.push(v as i64);
            }
        }
    }
    // Subscriber trees, as `<middlebox>:subscribers`.
    for m in w.mbs.iter().filter(|m| !m.mb.table().is_empty()) {
        let st = m.mb.stats();
        for (n, v) in [
            ("configured", m.mb.table().len() as u64),
            ("max", m.mb.max() as u64),
            ("live", m.mb.live() as u64),
            ("created", st.created),
            ("evicted", st.evicted),
            ("expired", st.expired),
            ("unplaced", st.unplaced),
        ] {
            queue.push(format!("{}:subscribers", m.name));
            name.push(n.to_string());
            value.push(v as i64);
        }
    }
    Table::new("qdisc_counters")
        .with("queue", ColumnData::Str(queue))
        .with("counter", ColumnData::Str(name))
        .with("value", ColumnData::I64(value))
}

/// One row per subscriber of every middlebox that has subscribers: `middlebox`,
/// `subscriber` (its prefix), per direction the packets and IP bytes its trees sent and
/// discarded (`to_b_packets`, `to_b_bytes`, `to_b_dropped`, `to_b_dropped_bytes`, the same
/// for `to_a`), and the trees `created` and `evicted` for it.
fn subscriber_summary(w: &World) -> Table {
    let mut mb = Vec::new();
    let mut sub = Vec::new();
    let mut rows: Vec<asymlink_core::subscribers::SubscriberCounters> = Vec::new();
    for m in &w.mbs {
        for (e, c) in m.mb.table().entries().iter().zip(m.mb.counters()) {
            mb.push(m.name.clone());
            sub.push(e.prefix.to_string());
            rows.push(*c);
        }
    }
    let col = |f: &dyn Fn(&asymlink_core::subscribers::SubscriberCounters) -> u64| {
        ColumnData::I64(rows.iter().map(|c| f(c) as i64).collect())
    };
    let mut t = Table::new("subscriber_summary")
        .with("middlebox", ColumnData::Str(mb))
        .with("subscriber", ColumnData::Str(sub));
    for (d, i) in [("to_b", 0), ("to_a", 1)] {
        t = t
            .with(&format!("{d}_packets"), col(&|c| c.sent[i]))
            .with(&format!("{d}_bytes"), col(&|c| c.sent_bytes[i]))
            .with(&format!("{d}_dropped"), col(&|c| c.dropped[i]))
            .with(&format!("{d}_dropped_bytes"), col(&|c| c.dropped_bytes[i]));
    }
    t.with("created", col(&|c| c.created))
        .with("evicted", col(&|c| c.evicted))
}
