//! Counters of the box and their two renderings: a JSON snapshot (served on a unix socket
//! and written to a file at exit) and the Prometheus text exposition format (served on a
//! loopback TCP port).
//!
//! The event loop owns every counter (plain integers, no atomics on the hot path) and
//! publishes a snapshot every `stats.interval` (100 ms by default) into a [`Published`]
//! cell that the endpoint threads serve, rendering it themselves; a reader sees numbers
//! at most one interval old.

use asymlink_core::packet::Pkt;
use asymlink_core::subscribers::{SubscriberBox, SubscriberCounters};
use serde_json::{json, Map, Value};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};

/// Latency histogram: exact microseconds below 1024 µs, then 16 buckets per octave.
#[derive(Clone, Debug)]
pub struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum_ns: u128,
    max_ns: u64,
}

const LINEAR: usize = 1024;
const SUB: usize = 16;

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            buckets: vec![0; LINEAR + 40 * SUB],
            count: 0,
            sum_ns: 0,
            max_ns: 0,
        }
    }
}

impl Histogram {
    fn index(us: u64) -> usize {
        if (us as usize) < LINEAR {
            return us as usize;
        }
        let octave = 63 - us.leading_zeros() as usize; // >= 10
        let sub = ((us >> (octave - 4)) & (SUB as u64 - 1)) as usize;
        (LINEAR + (octave - 10) * SUB + sub).min(LINEAR + 40 * SUB - 1)
    }
    /// Lower bound in µs of bucket `i`.
    fn lower(i: usize) -> u64 {
        if i < LINEAR {
            return i as u64;
        }
        let octave = (i - LINEAR) / SUB + 10;
        let sub = ((i - LINEAR) % SUB) as u64;
        (1u64 << octave) + (sub << (octave - 4))
    }
    /// Record one value in nanoseconds.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.buckets[Self::index(ns / 1000)] += 1;
        self.count += 1;
        self.sum_ns += ns as u128;
        self.max_ns = self.max_ns.max(ns);
    }
    /// Number of values.
    pub fn count(&self) -> u64 {
        self.count
    }
    /// The `q` quantile (0..=1) in µs: the lower bound of the bucket holding it (exact to
    /// 1 µs below 1 ms, to 1/16 of an octave above). `None` if empty.
    pub fn quantile_us(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = ((q * self.count as f64).ceil() as u64).clamp(1, self.count);
        let mut seen = 0;
        for (i, &n) in self.buckets.iter().enumerate() {
            seen += n;
            if seen >= rank {
                return Some(Self::lower(i) as f64);
            }
        }
        Some(self.max_ns as f64 / 1000.0)
    }
    /// Add `other`'s values (another worker's) to these.
    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter_mut().zip(&other.buckets) {
            *a += b;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
        self.max_ns = self.max_ns.max(other.max_ns);
    }
    /// Forget everything.
    pub fn reset(&mut self) {
        *self = Histogram::default();
    }
    /// JSON summary.
    pub fn to_json(&self) -> Value {
        json!({
            "count": self.count,
            "mean": if self.count > 0 { Some(self.sum_ns as f64 / self.count as f64 / 1000.0) } else { None },
            "p50": self.quantile_us(0.5),
            "p90": self.quantile_us(0.9),
            "p99": self.quantile_us(0.99),
            "p999": self.quantile_us(0.999),
            "max": if self.count > 0 { Some(self.max_ns as f64 / 1000.0) } else { None },
        })
    }
}

/// The `subscribers` section of a snapshot: the trees' counters, and with `lines` (the
/// `stats.subscriber_lines` key) under `lines` each subscriber that ever had a tree, by
/// prefix, with its packets and bytes sent and discarded per direction and its trees
/// created and evicted. Numbers merge across workers by summing (a subscriber's traffic
/// meets on one worker), `configured` by the largest.
pub fn subscribers_json<P: Pkt + Send + 'static>(b: &SubscriberBox<P>, lines: bool) -> Value {
    let dir = |c: &SubscriberCounters, i: usize| {
        json!({
            "sent": c.sent[i],
            "sent_bytes": c.sent_bytes[i],
            "dropped": c.dropped[i],
            "dropped_bytes": c.dropped_bytes[i],
        })
    };
    let by_prefix: Map<String, Value> = b
        .table()
        .entries()
        .iter()
        .zip(b.counters())
        .filter(|(_, c)| lines && !c.is_zero())
        .map(|(e, c)| {
            let v = json!({
                "to_b": dir(c, 0),
                "to_a": dir(c, 1),
                "created": c.created,
                "evicted": c.evicted,
            });
            (e.prefix.to_string(), v)
        })
        .collect();
    let st = b.stats();
    let mut v = json!({
        "configured": b.table().len(),
        "max": b.max(),
        "live": b.live(),
        "created": st.created,
        "evicted": st.evicted,
        "expired": st.expired,
        "unplaced": st.unplaced,
        "replaced": st.replaced,
    });
    if lines {
        v["lines"] = Value::Object(by_prefix);
    }
    v
}

/// The latest snapshot, shared with the endpoint threads. The loop only hands the value
/// over; whoever reads it renders it (JSON or Prometheus text) in its own thread, so a
/// publication costs the forwarding thread no serialisation.
#[derive(Clone, Debug, Default)]
pub struct Published {
    inner: Arc<Mutex<Option<Arc<Value>>>>,
}

impl Published {
    /// Store a new snapshot.
    pub fn set(&self, snap: Value) {
        let old = match self.inner.lock() {
            Ok(mut g) => g.replace(Arc::new(snap)),
            Err(_) => None,
        };
        // The previous snapshot is freed after the lock is released.
        drop(old);
    }
    fn latest(&self) -> Option<Arc<Value>> {
        self.inner.lock().ok().and_then(|g| g.clone())
    }
    /// The JSON text, with the process's resident memory now (`rss_bytes`: reading it
    /// costs tens of microseconds, too much for the forwarding thread).
    pub fn json(&self) -> String {
        let Some(v) = self.latest() else {
            return String::new();
        };
        let mut v = (*v).clone();
        if let Value::Object(m) = &mut v {
            m.insert("rss_bytes".into(), json!(crate::sys::rss_bytes()));
        }
        serde_json::to_string(&v).unwrap_or_default()
    }
    /// The Prometheus text.
    pub fn prometheus(&self) -> String {
        self.latest().map(|v| prometheus(&v)).unwrap_or_default()
    }
}

fn esc(s: &str) -> String {
    s.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Metric families in order of first appearance, each with its samples grouped under one
/// `# TYPE` line, as the text format requires.
#[derive(Default)]
struct Exposition {
    families: Vec<(String, &'static str, String)>,
    index: std::collections::HashMap<String, usize>,
}

impl Exposition {
    /// Add a sample; a counter's name gets its `_total` suffix.
    fn sample(&mut self, name: &str, labels: &[(&str, &str)], v: f64, counter: bool) {
        let name = if counter && !name.ends_with("_total") {
            format!("{name}_total")
        } else {
            name.to_string()
        };
        let kind = if counter { "counter" } else { "gauge" };
        self.line(&name.clone(), kind, &name, labels, v);
    }

    /// Add a sample `sample_name` to family `family` of type `kind`.
    fn line(
        &mut self,
        family: &str,
        kind: &'static str,
        sample_name: &str,
        labels: &[(&str, &str)],
        v: f64,
    ) {
        let i = *self.index.entry(family.to_string()).or_insert_with(|| {
            self.families
                .push((family.to_string(), kind, String::new()));
            self.families.len() - 1
        });
        let out = &mut self.families[i].2;
        let l: Vec<String> = labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{}\"", esc(v)))
            .collect();
        if l.is_empty() {
            let _ = writeln!(out, "{sample_name} {v}");
        } else {
            let _ = writeln!(out, "{sample_name}{{{}}} {v}", l.join(","));
        }
    }

    fn render(self) -> String {
        let mut out = String::new();
        for (name, kind, lines) in self.families {
            let _ = writeln!(out, "# TYPE {name} {kind}");
            out.push_str(&lines);
        }
        out
    }
}

/// Render the JSON snapshot as Prometheus text. Every numeric leaf becomes a sample of a
/// metric named after its path, with the direction, class and reason keys turned into
/// labels:
///
/// * `directions.to_b.discarded.queue_full` → `asymlink_discarded_total{dir="to_b",reason="queue_full"}`
/// * `directions.to_b.qdisc.children.ack.dequeued` → `asymlink_qdisc_child_dequeued{dir="to_b",child="ack"}`
pub fn prometheus(snapshot: &Value) -> String {
    let mut ex = Exposition::default();
    let gauge_keys = [
        "backlog_packets",
        "backlog_bytes",
        "max_backlog_packets",
        "max_backlog_bytes",
        "modem_packets",
        "wire_packets",
        "max_modem_packets",
        "uptime_s",
    ];
    let is_gauge = |k: &str| gauge_keys.contains(&k);
    if let Some(v) = snapshot.get("uptime_s").and_then(Value::as_f64) {
        ex.sample("asymlink_uptime_seconds", &[], v, false);
    }
    for k in ["reloads", "reload_failures"] {
        if let Some(v) = snapshot.get(k).and_then(Value::as_f64) {
            ex.sample(&format!("asymlink_{k}"), &[], v, true);
        }
    }
    if let Some(ifs) = snapshot.get("interfaces").and_then(Value::as_object) {
        for (side, m) in ifs {
            for (k, v) in m.as_object().into_iter().flatten() {
                if let Some(x) = v.as_f64() {
                    ex.sample(
                        &format!("asymlink_interface_{k}"),
                        &[("side", side)],
                        x,
                        true,
                    );
                }
            }
        }
    }
    if let Some(dirs) = snapshot.get("directions").and_then(Value::as_object) {
        for (dir, d) in dirs {
            let Some(d) = d.as_object() else { continue };
            for (k, v) in d {
                match (k.as_str(), v) {
                    ("unparsed" | "discarded", Value::Object(m)) => {
                        for (reason, n) in m {
                            if let Some(x) = n.as_f64() {
                                ex.sample(
                                    &format!("asymlink_{k}"),
                                    &[("dir", dir), ("reason", reason)],
                                    x,
                                    true,
                                );
                            }
                        }
                    }
                    ("classes", Value::Object(m)) => {
                        for (class, n) in m {
                            if let Some(x) = n.as_f64() {
                                ex.sample(
                                    "asymlink_class_packets",
                                    &[("dir", dir), ("class", class)],
                                    x,
                                    true,
                                );
                            }
                        }
                    }
                    ("qdisc", Value::Object(q)) => qdisc_samples(&mut ex, dir, q, None, &is_gauge),
                    ("sojourn_ms", Value::Object(m)) => {
                        // A summary in seconds: quantiles, `_count` and `_sum`.
                        let name = "asymlink_sojourn_seconds";
                        for (q, quant) in [("p50", "0.5"), ("p90", "0.9"), ("p99", "0.99")] {
                            if let Some(x) = m.get(q).and_then(Value::as_f64) {
                                let labels = [("dir", dir.as_str()), ("quantile", quant)];
                                ex.line(name, "summary", name, &labels, x / 1e3);
                            }
                        }
                        for (k, suffix, scale) in
                            [("count", "_count", 1.0), ("sum_ms", "_sum", 1e3)]
                        {
                            if let Some(x) = m.get(k).and_then(Value::as_f64) {
                                let sample = format!("{name}{suffix}");
                                ex.line(name, "summary", &sample, &[("dir", dir)], x / scale);
                            }
                        }
                    }
                    ("link", Value::Object(m)) => {
                        for (lk, n) in m {
                            if let Some(x) = n.as_f64() {
                                ex.sample(
                                    &format!("asymlink_link_{lk}"),
                                    &[("dir", dir)],
                                    x,
                                    !is_gauge(lk),
                                );
                            }
                        }
                    }
                    ("rewriters", Value::Array(rs)) => {
                        for r in rs {
                            let kind = r.get("kind").and_then(Value::as_str).unwrap_or("?");
                            for (ck, n) in r.as_object().into_iter().flatten() {
                                if let Some(x) = n.as_f64() {
                                    ex.sample(
                                        &format!("asymlink_rewriter_{ck}"),
                                        &[("dir", dir), ("rewriter", kind)],
                                        x,
                                        true,
                                    );
                                }
                            }
                        }
                    }
                    (_, v) => {
                        if let Some(x) = v.as_f64() {
                            ex.sample(&format!("asymlink_{k}"), &[("dir", dir)], x, !is_gauge(k));
                        }
                    }
                }
            }
        }
    }
    if let Some(subs) = snapshot.get("subscribers").and_then(Value::as_object) {
        for (k, v) in subs {
            match (k.as_str(), v) {
                ("lines", Value::Object(lines)) => {
                    for (prefix, l) in lines {
                        for (lk, lv) in l.as_object().into_iter().flatten() {
                            if let Some(x) = lv.as_f64() {
                                let name = format!("asymlink_subscriber_trees_{lk}");
                                ex.sample(&name, &[("subscriber", prefix)], x, true);
                            }
                            for (ck, n) in lv.as_object().into_iter().flatten() {
                                if let Some(x) = n.as_f64() {
                                    let labels = [("subscriber", prefix.as_str()), ("dir", lk)];
                                    ex.sample(
                                        &format!("asymlink_subscriber_{ck}"),
                                        &labels,
                                        x,
                                        true,
                                    );
                                }
                            }
                        }
                    }
                }
                (_, v) => {
                    if let Some(x) = v.as_f64() {
                        let gauge = matches!(k.as_str(), "configured" | "max" | "live");
                        ex.sample(&format!("asymlink_subscribers_{k}"), &[], x, !gauge);
                    }
                }
            }
        }
    }
    if let Some(l) = snapshot.get("latency_us").and_then(Value::as_object) {
        let name = "asymlink_added_latency_microseconds";
        for q in ["p50", "p90", "p99", "p999"] {
            if let Some(x) = l.get(q).and_then(Value::as_f64) {
                let quant = format!("0.{}", &q[1..]);
                ex.line(name, "summary", name, &[("quantile", &quant)], x);
            }
        }
        if let Some(x) = l.get("count").and_then(Value::as_f64) {
            ex.line(name, "summary", &format!("{name}_count"), &[], x);
        }
    }
    ex.render()
}

fn qdisc_samples(
    ex: &mut Exposition,
    dir: &str,
    q: &Map<String, Value>,
    child: Option<&str>,
    is_gauge: &dyn Fn(&str) -> bool,
) {
    let prefix = if child.is_some() {
        "asymlink_qdisc_child_"
    } else {
        "asymlink_qdisc_"
    };
    let kind = q.get("kind").and_then(Value::as_str).unwrap_or("?");
    let mut labels: Vec<(&str, &str)> = vec![("dir", dir), ("qdisc", kind)];
    if let Some(c) = child {
        labels.push(("child", c));
    }
    for (k, v) in q {
        match v {
            Value::Object(m) if k == "dropped" || k == "filtered" => {
                for (reason, n) in m {
                    if let Some(x) = n.as_f64() {
                        let mut l = labels.clone();
                        l.push(("reason", reason));
                        ex.sample(&format!("{prefix}{k}"), &l, x, true);
                    }
                }
            }
            Value::Object(m) if k == "children" => {
                for (name, c) in m {
                    if let Some(c) = c.as_object() {
                        qdisc_samples(ex, dir, c, Some(name), is_gauge);
                    }
                }
            }
            _ => {
                if let Some(x) = v.as_f64() {
                    ex.sample(&format!("{prefix}{k}"), &labels, x, !is_gauge(k));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each subscriber's counters, from the core through two workers' snapshots to the
    /// merged snapshot and the Prometheus text.
    #[test]
    fn per_subscriber_counters_merge_across_workers() {
        use crate::runtime::WorkerStats;
        use asymlink_core::packet::HeaderPacket;
        use asymlink_core::pipeline::{Dir, Middlebox, MiddleboxConfig};
        use asymlink_core::qdisc::{Dequeued, Drops};
        use asymlink_core::subscribers::SubscriberConfig;
        use asymlink_core::time::Instant;
        use asymlink_core::wire::{Headers, IpRepr, Transport, UdpRepr};
        let pkt = |src: &str, dst: &str, len: u32| {
            HeaderPacket::new(Headers {
                ip: IpRepr::new(src.parse().unwrap(), dst.parse().unwrap()),
                transport: Transport::Udp(UdpRepr {
                    src_port: 4000,
                    dst_port: 5000,
                }),
                payload_len: len - 28,
            })
        };
        let mut t: toml::Table = "[[subscribers]]\nprefix = \"198.18.0.1\"\n\
             to_b = { qdisc = { kind = \"fifo\", limit = \"2p\" } }\n\
             [[subscribers]]\nprefix = \"198.18.0.2\"\n\
             [[subscribers]]\nprefix = \"198.18.0.3\"\n"
            .parse()
            .unwrap();
        let cfg = SubscriberConfig::take(&mut t, None, &mut |_| unreachable!()).unwrap();
        // Worker 0 sees subscriber 1: three packets up (one over its limit), one down;
        // worker 1 sees subscriber 2: one packet up. Subscriber 3 sends nothing.
        let mut workers = Vec::new();
        for traffic in [
            vec![
                (Dir::ToB, pkt("198.18.0.1", "192.0.2.1", 100)),
                (Dir::ToB, pkt("198.18.0.1", "192.0.2.1", 200)),
                (Dir::ToB, pkt("198.18.0.1", "192.0.2.1", 300)),
                (Dir::ToA, pkt("192.0.2.1", "198.18.0.1", 1000)),
            ],
            vec![(Dir::ToB, pkt("198.18.0.2", "192.0.2.1", 500))],
        ] {
            let top = Middlebox::new(&MiddleboxConfig::default(), [None, None], 1).unwrap();
            let mut b = cfg.build(top, 1);
            let mut drops = Drops::new();
            for (d, p) in traffic {
                b.handle_packet(Instant::ZERO, d, p, &mut drops);
            }
            for d in [Dir::ToB, Dir::ToA] {
                while let Dequeued::Packet(_) = b.poll_transmit(Instant::ZERO, d, &mut drops) {}
            }
            workers.push(WorkerStats {
                snapshot: json!({ "subscribers": subscribers_json(&b, true) }),
                latency: Histogram::default(),
                sojourn: Default::default(),
            });
        }
        let m = crate::workers::merge_snapshots(&workers);
        let s = &m["subscribers"];
        assert_eq!(s["configured"], json!(3), "{s}");
        assert_eq!(s["live"], json!(2));
        assert_eq!(s["created"], json!(2));
        let one = &s["lines"]["198.18.0.1/32"];
        assert_eq!(one["to_b"]["sent"], json!(2), "{s}");
        assert_eq!(one["to_b"]["sent_bytes"], json!(300));
        assert_eq!(one["to_b"]["dropped"], json!(1));
        assert_eq!(one["to_b"]["dropped_bytes"], json!(300));
        assert_eq!(one["to_a"]["sent_bytes"], json!(1000));
        assert_eq!(one["created"], json!(1));
        assert_eq!(
            s["lines"]["198.18.0.2/32"]["to_b"]["sent_bytes"],
            json!(500)
        );
        assert!(
            s["lines"].get("198.18.0.3/32").is_none(),
            "never had a tree"
        );
        let p = prometheus(&m);
        for want in [
            "asymlink_subscribers_live 2",
            "asymlink_subscribers_created_total 2",
            "asymlink_subscriber_sent_bytes_total{subscriber=\"198.18.0.1/32\",dir=\"to_b\"} 300",
            "asymlink_subscriber_dropped_total{subscriber=\"198.18.0.1/32\",dir=\"to_b\"} 1",
            "asymlink_subscriber_trees_created_total{subscriber=\"198.18.0.2/32\"} 1",
        ] {
            assert!(p.contains(want), "{want} in\n{p}");
        }
    }

    #[test]
    fn histogram_quantiles() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile_us(0.5), None);
        for us in 1..=100u64 {
            h.record(us * 1000 + 500);
        }
        assert_eq!(h.quantile_us(0.5), Some(50.0));
        assert_eq!(h.quantile_us(0.99), Some(99.0));
        h.record(5_000_000); // 5 ms
        let p = h.quantile_us(1.0).unwrap();
        assert!((4800.0..=5000.0).contains(&p), "{p}");
        for us in [1024u64, 1500, 4095, 1 << 30] {
            let i = Histogram::index(us);
            assert!(Histogram::lower(i) <= us, "{us}");
        }
    }

    #[test]
    fn prometheus_labels() {
        let s = json!({
            "uptime_s": 1.5,
            "directions": {"to_b": {
                "received": 3,
                "discarded": {"queue_full": 2},
                "classes": {"ack": 1},
                "qdisc": {"kind": "prio", "dequeued": 1, "backlog_packets": 0,
                          "dropped": {"queue_full": 2}, "children": {"ack": {"kind": "fifo", "dequeued": 1}}}
            }}
        });
        let t = prometheus(&s);
        assert!(t.contains("asymlink_received_total{dir=\"to_b\"} 3"), "{t}");
        assert!(
            t.contains("asymlink_discarded_total{dir=\"to_b\",reason=\"queue_full\"} 2"),
            "{t}"
        );
        assert!(
            t.contains("asymlink_class_packets_total{dir=\"to_b\",class=\"ack\"} 1"),
            "{t}"
        );
        assert!(
            t.contains("asymlink_qdisc_backlog_packets{dir=\"to_b\",qdisc=\"prio\"} 0"),
            "{t}"
        );
        assert!(
            t.contains(
                "asymlink_qdisc_child_dequeued_total{dir=\"to_b\",qdisc=\"fifo\",child=\"ack\"} 1"
            ),
            "{t}"
        );
        assert!(t.contains("# TYPE asymlink_received_total counter"));
    }

    #[test]
    fn sojourn_times_are_a_summary_in_seconds() {
        let s = json!({
            "directions": {
                "to_a": {"sojourn_ms": {"count": 0, "sum_ms": 0.0, "p50": null}},
                "to_b": {"sojourn_ms": {"count": 4, "sum_ms": 50.0, "p50": 10.0, "p90": 20.0,
                                        "p99": 25.0, "mean": 12.5, "max": 25.0}},
            }
        });
        let t = prometheus(&s);
        let lines: Vec<&str> = t.lines().collect();
        let want = [
            "# TYPE asymlink_sojourn_seconds summary",
            "asymlink_sojourn_seconds_count{dir=\"to_a\"} 0",
            "asymlink_sojourn_seconds_sum{dir=\"to_a\"} 0",
            "asymlink_sojourn_seconds{dir=\"to_b\",quantile=\"0.5\"} 0.01",
            "asymlink_sojourn_seconds{dir=\"to_b\",quantile=\"0.9\"} 0.02",
            "asymlink_sojourn_seconds{dir=\"to_b\",quantile=\"0.99\"} 0.025",
            "asymlink_sojourn_seconds_count{dir=\"to_b\"} 4",
            "asymlink_sojourn_seconds_sum{dir=\"to_b\"} 0.05",
        ];
        assert_eq!(lines, want, "{t}");
    }

    #[test]
    fn each_family_is_one_group_under_one_type_line() {
        let s = json!({
            "directions": {
                "to_a": {"received": 1, "discarded": {"queue_full": 1}},
                "to_b": {"received": 2, "discarded": {"queue_full": 2}},
            },
            "latency_us": {"p50": 10.0, "p99": 30.0, "count": 5}
        });
        let t = prometheus(&s);
        let names: Vec<&str> = t
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().unwrap())
            .collect();
        let mut seen: Vec<&str> = Vec::new();
        for n in &names {
            let family = n.trim_end_matches("_count");
            if seen.last() != Some(&family) {
                assert!(
                    !seen.contains(&family),
                    "{family} is split into two groups:\n{t}"
                );
                seen.push(family);
            }
        }
        assert_eq!(
            t.matches("# TYPE asymlink_received_total counter").count(),
            1
        );
        assert!(
            t.contains("# TYPE asymlink_added_latency_microseconds summary"),
            "{t}"
        );
    }
}
