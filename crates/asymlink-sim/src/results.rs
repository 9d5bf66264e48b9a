//! Columnar results handed to the front end (Python turns them into pandas DataFrames).
//!
//! Tables and their columns (all times in seconds since the start of the run):
//!
//! * `flows` — per-flow time series sampled every `monitor.interval`: `t`, `flow`,
//!   `cwnd_bytes`, `ssthresh_bytes`, `srtt_ms`, `rto_ms`, `inflight_bytes`, `bytes_sent`,
//!   `bytes_acked`, `bytes_delivered`, `retransmits`, `timeouts`.
//! * `queues` — per-queue time series: `t`, `queue`, `packets`, `bytes`, and cumulative
//!   `drops`, `filtered`, `dequeued`, `dropped_<reason>`, `filtered_<reason>` (one column
//!   per `DropReason` / `FilterReason`), and `sojourn_ms` (mean time from offer to start of
//!   transmission of the packets that left since the previous sample; 0 if none).
//! * `links` — per link direction: `t`, `link`, `utilization` (fraction of the interval the
//!   transmitter was busy), `tx_bytes` (cumulative).
//! * `events` — discrete events: `t`, `kind` (`drop`, `filter`, `fast_retransmit`,
//!   `timeout`, `loss_probe`), `where`, `flow`, `detail`.
//! * `measurements` — application measurements: `t`, `flow`, `metric`, `value`
//!   (e.g. `echo_latency_s`, `page_time_s`, `transfer_time_s`).
//! * `flow_summary` — one row per flow; `queue_summary` — one row per queue with counters
//!   by reason and, for link directions, what the link sent: `tx_wire_bytes` (after the
//!   link layer, e.g. ATM cells), `tx_pure_acks`, `tx_pure_ack_bytes`,
//!   `tx_pure_ack_wire_bytes`, and the sojourn times `mean_sojourn_ms`, `max_sojourn_ms`,
//!   `p50_sojourn_ms`, `p90_sojourn_ms`, `p99_sojourn_ms` (from a log-linear histogram,
//!   within 1.6 %), and of TCP and UDP packets alone `p50_sojourn_tcp_ms`,
//!   `p90_sojourn_tcp_ms`, `p50_sojourn_udp_ms`, `p90_sojourn_udp_ms`.
//! * `qdisc_counters` — discipline-specific counters (`Qdisc::counters`, e.g. the ACK
//!   shaper's delay-bound hits), and middlebox rewriters' counters with `queue`
//!   `<middlebox>:rewrite:<kind>` (e.g. `pool:rewrite:rwnd`), and a middlebox's subscriber
//!   trees as `<middlebox>:subscribers` (`configured`, `max`, `live`, `created`, `evicted`,
//!   `expired`, `unplaced`): `queue`, `counter`, `value`.
//! * `subscriber_summary` — only with subscribers: one row per subscriber of a middlebox:
//!   `middlebox`, `subscriber` (its prefix), `to_b_packets`, `to_b_bytes`, `to_b_dropped`,
//!   `to_b_dropped_bytes`, the same four for `to_a` (IP bytes its trees sent and
//!   discarded), `created`, `evicted` (its trees).

/// The data of one column.
#[derive(Clone, Debug, PartialEq)]
pub enum ColumnData {
    /// Floating point values.
    F64(Vec<f64>),
    /// Integers.
    I64(Vec<i64>),
    /// Strings.
    Str(Vec<String>),
}

impl ColumnData {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            ColumnData::F64(v) => v.len(),
            ColumnData::I64(v) => v.len(),
            ColumnData::Str(v) => v.len(),
        }
    }
    /// Whether empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A named column.
#[derive(Clone, Debug, PartialEq)]
pub struct Column {
    /// Column name.
    pub name: String,
    /// Values.
    pub data: ColumnData,
}

/// A named table of equal-length columns.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Table {
    /// Table name.
    pub name: String,
    /// Columns.
    pub columns: Vec<Column>,
}

impl Table {
    /// An empty table.
    pub fn new(name: &str) -> Table {
        Table {
            name: name.to_string(),
            columns: Vec::new(),
        }
    }
    /// Add a column (builder style).
    pub fn with(mut self, name: &str, data: ColumnData) -> Table {
        self.columns.push(Column {
            name: name.to_string(),
            data,
        });
        self
    }
    /// Number of rows (of the first column).
    pub fn rows(&self) -> usize {
        self.columns.first().map(|c| c.data.len()).unwrap_or(0)
    }
    /// A column by name.
    pub fn column(&self, name: &str) -> Option<&ColumnData> {
        self.columns
            .iter()
            .find(|c| c.name == name)
            .map(|c| &c.data)
    }
}

/// Everything a run produced.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Results {
    /// Scenario name.
    pub scenario: String,
    /// Master seed.
    pub seed: u64,
    /// Simulated duration in seconds.
    pub duration_s: f64,
    /// Wall-clock seconds spent simulating.
    pub wall_s: f64,
    /// Events processed.
    pub events: u64,
    /// Packet transmissions on all links.
    pub packet_hops: u64,
    /// A hash of the packet trace (every transmission: time, link, headers); equal for
    /// equal runs.
    pub trace_hash: u64,
    /// Threads the run used (the worlds its nodes were divided between).
    pub threads: u32,
    /// Packets handed between worlds that arrived before the window they were sent in had
    /// ended (0 in a correct partitioned run; counted, not hidden).
    pub late_handovers: u64,
    /// Tables.
    pub tables: Vec<Table>,
}

impl Results {
    /// A table by name.
    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }
}
