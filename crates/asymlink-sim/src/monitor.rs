//! Recording: time series, events and measurements, stored column-wise and turned into
//! [`Table`]s at the end.

use crate::results::{ColumnData, Table};
use crate::scenario::MonitorSpec;
use crate::tcp::Connection;
use asymlink_core::qdisc::{DropReason, FilterReason, QdiscStats};
use asymlink_core::time::{dur_ns, Duration, Instant};

/// Events beyond this many are counted, not stored.
const EVENT_CAP: usize = 2_000_000;

#[derive(Default)]
struct FlowCols {
    t: Vec<f64>,
    label: Vec<u32>,
    cwnd: Vec<i64>,
    ssthresh: Vec<i64>,
    srtt_ms: Vec<f64>,
    rto_ms: Vec<f64>,
    inflight: Vec<i64>,
    sent: Vec<i64>,
    acked: Vec<i64>,
    delivered: Vec<i64>,
    retx: Vec<i64>,
    timeouts: Vec<i64>,
    /// Pacing rate (bit/s; NaN when not paced) and BBR's `TCP_CC_INFO` (NaN for other
    /// senders): bandwidth (bit/s), minimum RTT (ms), pacing and cwnd gains.
    pacing_bps: Vec<f64>,
    bbr_bw_bps: Vec<f64>,
    bbr_min_rtt_ms: Vec<f64>,
    bbr_pacing_gain: Vec<f64>,
    bbr_cwnd_gain: Vec<f64>,
    /// Whether any sampled sender ran BBR (the BBR columns are added only then).
    any_bbr: bool,
}

#[derive(Default)]
struct QueueCols {
    t: Vec<f64>,
    idx: Vec<u32>,
    packets: Vec<i64>,
    bytes: Vec<i64>,
    drops: Vec<i64>,
    filtered: Vec<i64>,
    dequeued: Vec<i64>,
    by_drop: Vec<[u64; DropReason::ALL.len()]>,
    by_filter: Vec<[u64; FilterReason::ALL.len()]>,
    sojourn_ms: Vec<f64>,
}

#[derive(Default)]
struct LinkCols {
    t: Vec<f64>,
    idx: Vec<u32>,
    util: Vec<f64>,
    tx_bytes: Vec<i64>,
}

#[derive(Default)]
struct EventCols {
    t: Vec<f64>,
    kind: Vec<&'static str>,
    at: Vec<String>,
    label: Vec<Option<u32>>,
    detail: Vec<&'static str>,
}

#[derive(Default)]
struct MeasureCols {
    t: Vec<f64>,
    flow: Vec<u32>,
    metric: Vec<&'static str>,
    value: Vec<f64>,
}

/// The recorder.
pub struct Monitor {
    /// Sampling interval.
    pub interval: Duration,
    flows_on: bool,
    queues_on: bool,
    links_on: bool,
    events_on: bool,
    flows: FlowCols,
    queues: QueueCols,
    links: LinkCols,
    last_busy: Vec<(u64, u64)>,
    last_sojourn: Vec<(u64, u64)>,
    events: EventCols,
    /// Events not stored because of the cap.
    pub events_dropped: u64,
    measures: MeasureCols,
}

impl Monitor {
    /// A recorder configured by the scenario.
    pub fn new(spec: &MonitorSpec) -> Monitor {
        Monitor {
            interval: spec.interval.0,
            flows_on: spec.flows,
            queues_on: spec.queues,
            links_on: spec.links,
            events_on: spec.events,
            flows: FlowCols::default(),
            queues: QueueCols::default(),
            links: LinkCols::default(),
            last_busy: Vec::new(),
            last_sojourn: Vec::new(),
            events: EventCols::default(),
            events_dropped: 0,
            measures: MeasureCols::default(),
        }
    }

    /// Whether flow series are recorded.
    pub fn flows_on(&self) -> bool {
        self.flows_on
    }
    /// Whether queue series are recorded.
    pub fn queues_on(&self) -> bool {
        self.queues_on
    }
    /// Whether link series are recorded.
    pub fn links_on(&self) -> bool {
        self.links_on
    }
    /// Whether events are recorded.
    pub fn events_on(&self) -> bool {
        self.events_on
    }

    /// One sample of a sending endpoint.
    pub fn flow_row(&mut self, now: Instant, label: u32, c: &Connection, delivered: u64) {
        let f = &mut self.flows;
        let s = c.stats();
        f.t.push(now.as_secs_f64());
        f.label.push(label);
        f.cwnd.push(c.cwnd().min(i64::MAX as u64 / 2) as i64);
        f.ssthresh
            .push(c.ssthresh().min(i64::MAX as u64 / 2) as i64);
        f.srtt_ms
            .push(c.srtt().map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN));
        f.rto_ms.push(c.rto().as_secs_f64() * 1e3);
        f.inflight.push(c.inflight() as i64);
        f.sent.push(s.bytes_sent as i64);
        f.acked.push(s.bytes_acked as i64);
        f.delivered.push(delivered as i64);
        f.retx.push(s.retransmits as i64);
        f.timeouts.push(s.timeouts as i64);
        f.pacing_bps
            .push(c.pacing_rate().map_or(f64::NAN, |r| r as f64 * 8.0));
        let b = c.bbr_info();
        f.any_bbr |= b.is_some();
        let gain = |g: u32| f64::from(g) / 256.0;
        f.bbr_bw_bps.push(b.map_or(f64::NAN, |b| b.bw as f64 * 8.0));
        f.bbr_min_rtt_ms.push(
            b.and_then(|b| b.min_rtt)
                .map_or(f64::NAN, |d| d.as_secs_f64() * 1e3),
        );
        f.bbr_pacing_gain
            .push(b.map_or(f64::NAN, |b| gain(b.pacing_gain)));
        f.bbr_cwnd_gain
            .push(b.map_or(f64::NAN, |b| gain(b.cwnd_gain)));
    }

    /// One sample of a queue; `sojourn` is the cumulative (sum of sojourn times in ns,
    /// packets sent) of the link direction it feeds, from which the mean sojourn time of
    /// the packets that left since the previous sample follows (0 if none did: a number,
    /// so that equal runs compare equal).
    pub fn queue_row(&mut self, now: Instant, idx: usize, st: &QdiscStats, sojourn: (u64, u64)) {
        if !self.queues_on {
            return;
        }
        if self.last_sojourn.len() <= idx {
            self.last_sojourn.resize(idx + 1, (0, 0));
        }
        let (last_sum, last_n) = self.last_sojourn[idx];
        let n = sojourn.1.saturating_sub(last_n);
        let mean_ms = if n == 0 {
            0.0
        } else {
            sojourn.0.saturating_sub(last_sum) as f64 / n as f64 / 1e6
        };
        self.last_sojourn[idx] = sojourn;
        let q = &mut self.queues;
        q.sojourn_ms.push(mean_ms);
        q.t.push(now.as_secs_f64());
        q.idx.push(idx as u32);
        q.packets.push(st.backlog.packets as i64);
        q.bytes.push(st.backlog.bytes as i64);
        q.drops.push(st.drops() as i64);
        q.filtered.push(st.filters() as i64);
        q.dequeued.push(st.dequeued as i64);
        q.by_drop.push(st.dropped);
        q.by_filter.push(st.filtered);
    }

    /// One sample of a link direction (busy time and bytes are cumulative).
    pub fn link_row(&mut self, now: Instant, idx: usize, busy_ns: u64, tx_bytes: u64) {
        if !self.links_on {
            return;
        }
        if self.last_busy.len() <= idx {
            self.last_busy.resize(idx + 1, (0, 0));
        }
        let (last_t, last_busy) = self.last_busy[idx];
        let span = now.as_nanos().saturating_sub(last_t);
        let util = if span == 0 {
            0.0
        } else {
            ((busy_ns - last_busy) as f64 / span as f64).min(1.0)
        };
        self.last_busy[idx] = (now.as_nanos(), busy_ns);
        let l = &mut self.links;
        l.t.push(now.as_secs_f64());
        l.idx.push(idx as u32);
        l.util.push(util);
        l.tx_bytes.push(tx_bytes as i64);
    }

    /// A discrete event.
    pub fn event(
        &mut self,
        now: Instant,
        kind: &'static str,
        at: &str,
        label: Option<u32>,
        detail: &'static str,
    ) {
        if !self.events_on {
            return;
        }
        if self.events.t.len() >= EVENT_CAP {
            self.events_dropped += 1;
            return;
        }
        let e = &mut self.events;
        e.t.push(now.as_secs_f64());
        e.kind.push(kind);
        e.at.push(at.to_string());
        e.label.push(label);
        e.detail.push(detail);
    }

    /// Move `other`'s events into this recorder's, in order of time (this one's first at
    /// equal times): the events of another world of a partitioned run.
    pub fn take_events(&mut self, other: &mut Monitor) {
        self.events_dropped += std::mem::take(&mut other.events_dropped);
        let theirs = std::mem::take(&mut other.events);
        if theirs.t.is_empty() {
            return;
        }
        let ours = std::mem::take(&mut self.events);
        let n = ours.t.len() + theirs.t.len();
        let mut e = EventCols {
            t: Vec::with_capacity(n),
            kind: Vec::with_capacity(n),
            at: Vec::with_capacity(n),
            label: Vec::with_capacity(n),
            detail: Vec::with_capacity(n),
        };
        let mut a = ours
            .t
            .into_iter()
            .zip(ours.kind)
            .zip(ours.at)
            .zip(ours.label)
            .zip(ours.detail)
            .peekable();
        let mut b = theirs
            .t
            .into_iter()
            .zip(theirs.kind)
            .zip(theirs.at)
            .zip(theirs.label)
            .zip(theirs.detail)
            .peekable();
        loop {
            let take_a = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) => x.0 .0 .0 .0 <= y.0 .0 .0 .0,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (None, None) => break,
            };
            let next = if take_a { a.next() } else { b.next() };
            let Some(((((t, kind), at), label), detail)) = next else {
                break;
            };
            if e.t.len() >= EVENT_CAP {
                self.events_dropped += 1;
                continue;
            }
            e.t.push(t);
            e.kind.push(kind);
            e.at.push(at);
            e.label.push(label);
            e.detail.push(detail);
        }
        self.events = e;
    }

    /// An application measurement.
    pub fn measure(&mut self, now: Instant, flow: u32, metric: &'static str, value: f64) {
        let m = &mut self.measures;
        m.t.push(now.as_secs_f64());
        m.flow.push(flow);
        m.metric.push(metric);
        m.value.push(value);
    }

    /// Measurements of one flow and metric (for summaries).
    pub fn measured(&self, flow: u32, metric: &str) -> Vec<f64> {
        let m = &self.measures;
        (0..m.t.len())
            .filter(|&i| m.flow[i] == flow && m.metric[i] == metric)
            .map(|i| m.value[i])
            .collect()
    }

    /// The recorded tables.
    pub fn tables(
        &self,
        labels: &[String],
        queue_names: &[String],
        link_names: &[String],
        flow_names: &[String],
    ) -> Vec<Table> {
        let name = |v: &[u32], names: &[String]| -> ColumnData {
            ColumnData::Str(v.iter().map(|&i| names[i as usize].clone()).collect())
        };
        let f = &self.flows;
        let flows = Table::new("flows")
            .with("t", ColumnData::F64(f.t.clone()))
            .with("flow", name(&f.label, labels))
            .with("cwnd_bytes", ColumnData::I64(f.cwnd.clone()))
            .with("ssthresh_bytes", ColumnData::I64(f.ssthresh.clone()))
            .with("srtt_ms", ColumnData::F64(f.srtt_ms.clone()))
            .with("rto_ms", ColumnData::F64(f.rto_ms.clone()))
            .with("inflight_bytes", ColumnData::I64(f.inflight.clone()))
            .with("bytes_sent", ColumnData::I64(f.sent.clone()))
            .with("bytes_acked", ColumnData::I64(f.acked.clone()))
            .with("bytes_delivered", ColumnData::I64(f.delivered.clone()))
            .with("retransmits", ColumnData::I64(f.retx.clone()))
            .with("timeouts", ColumnData::I64(f.timeouts.clone()));
        // Pacing and BBR's state (as `TCP_CC_INFO` shows it) only where a sender ran BBR.
        let flows = if f.any_bbr {
            flows
                .with("pacing_rate_bps", ColumnData::F64(f.pacing_bps.clone()))
                .with("bbr_bw_bps", ColumnData::F64(f.bbr_bw_bps.clone()))
                .with("bbr_min_rtt_ms", ColumnData::F64(f.bbr_min_rtt_ms.clone()))
                .with(
                    "bbr_pacing_gain",
                    ColumnData::F64(f.bbr_pacing_gain.clone()),
                )
                .with("bbr_cwnd_gain", ColumnData::F64(f.bbr_cwnd_gain.clone()))
        } else {
            flows
        };
        let q = &self.queues;
        let mut queues = Table::new("queues")
            .with("t", ColumnData::F64(q.t.clone()))
            .with("queue", name(&q.idx, queue_names))
            .with("packets", ColumnData::I64(q.packets.clone()))
            .with("bytes", ColumnData::I64(q.bytes.clone()))
            .with("drops", ColumnData::I64(q.drops.clone()))
            .with("filtered", ColumnData::I64(q.filtered.clone()))
            .with("dequeued", ColumnData::I64(q.dequeued.clone()))
            .with("sojourn_ms", ColumnData::F64(q.sojourn_ms.clone()));
        for r in DropReason::ALL {
            let v = q.by_drop.iter().map(|a| a[r as usize] as i64).collect();
            queues = queues.with(&format!("dropped_{}", r.name()), ColumnData::I64(v));
        }
        for r in FilterReason::ALL {
            let v = q.by_filter.iter().map(|a| a[r as usize] as i64).collect();
            queues = queues.with(&format!("filtered_{}", r.name()), ColumnData::I64(v));
        }
        let l = &self.links;
        let links = Table::new("links")
            .with("t", ColumnData::F64(l.t.clone()))
            .with("link", name(&l.idx, link_names))
            .with("utilization", ColumnData::F64(l.util.clone()))
            .with("tx_bytes", ColumnData::I64(l.tx_bytes.clone()));
        let e = &self.events;
        let events = Table::new("events")
            .with("t", ColumnData::F64(e.t.clone()))
            .with(
                "kind",
                ColumnData::Str(e.kind.iter().map(|s| s.to_string()).collect()),
            )
            .with("where", ColumnData::Str(e.at.clone()))
            .with(
                "flow",
                ColumnData::Str(
                    e.label
                        .iter()
                        .map(|l| l.map(|i| labels[i as usize].clone()).unwrap_or_default())
                        .collect(),
                ),
            )
            .with(
                "detail",
                ColumnData::Str(e.detail.iter().map(|s| s.to_string()).collect()),
            );
        let m = &self.measures;
        let measurements = Table::new("measurements")
            .with("t", ColumnData::F64(m.t.clone()))
            .with("flow", name(&m.flow, flow_names))
            .with(
                "metric",
                ColumnData::Str(m.metric.iter().map(|s| s.to_string()).collect()),
            )
            .with("value", ColumnData::F64(m.value.clone()));
        vec![flows, queues, links, events, measurements]
    }
}

/// Nanoseconds of a duration (helper for callers computing rates).
pub fn ns(d: Duration) -> u64 {
    dur_ns(d)
}
