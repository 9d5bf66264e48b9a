//! Scenario files: the TOML schema, parsing with key paths in errors, and validation of the
//! topology. See `docs/scenario.md` for the reference with examples.
//!
//! ```toml
//! name = "asymmetric"
//! duration = "30s"
//! seed = 1
//! tcp = "paper"                       # default TCP profile of the flows
//!
//! [[nodes]]
//! name = "server"                     # kind = "host" by default
//! [[nodes]]
//! name = "r1"
//! kind = "router"
//! [[nodes]]
//! name = "client"
//!
//! [[links]]
//! name = "fwd"
//! a = "server"
//! b = "r1"
//! rate = "10Mbit"
//! delay = "1ms"
//!
//! [[links]]
//! name = "access"
//! a = "r1"
//! b = "client"
//! rate = "10Mbit"                     # both directions ...
//! delay = "99ms"
//! queue = { kind = "fifo", limit = "1000p" }
//! to_a = { rate = "100kbit" }         # ... except client -> r1
//!                                     # (packet_rate = 10: 10 packets/s whatever their size)
//!
//! [[flows]]
//! from = "server"                     # data source
//! to = "client"
//! app = { kind = "bulk", bytes = "1MB" }
//! ```

use crate::tcp::{TcpConfig, TcpSpec};
use asymlink_core::classify::ClassifierConfig;
use asymlink_core::link::LinkConfig;
use asymlink_core::overhead::LinkLayerConfig;
use asymlink_core::pipeline::{EgressConfig, MiddleboxConfig, RewriterConfig};
use asymlink_core::qdisc::QdiscConfig;
use asymlink_core::units::{Bytes, Limit, Rate, Span};
use core::net::IpAddr;
use serde::Deserialize;
use std::collections::HashMap;

/// A scenario error before the run: message plus the key path.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SpecError {
    /// Key path, e.g. `links[2].rate`.
    pub key: String,
    /// What is wrong.
    pub msg: String,
}

fn err<T>(key: impl Into<String>, msg: impl Into<String>) -> Result<T, SpecError> {
    Err(SpecError {
        key: key.into(),
        msg: msg.into(),
    })
}

/// The kind of a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeKind {
    /// An end host with one link and a TCP/UDP stack.
    #[default]
    Host,
    /// A router forwarding by static shortest-path routes.
    Router,
}

/// A node.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeSpec {
    /// Unique name.
    pub name: String,
    /// Host or router.
    #[serde(default)]
    pub kind: NodeKind,
    /// Address (hosts; assigned from 10.0.0.0/8 if absent).
    #[serde(default)]
    pub addr: Option<IpAddr>,
    /// Receiver-based window policy of a host's connections (see `docs/receiver-windows.md`).
    #[serde(default)]
    pub rwnd_policy: Option<asymlink_core::rwnd::RwndConfig>,
    /// Aggregate rate control at this host's TCP output (see `docs/aggregates.md`).
    #[serde(default)]
    pub conditioner: Option<asymlink_core::aggregate::ControllerConfig>,
}

/// A link between two nodes, full duplex.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LinkSpec {
    /// Unique name (default `a-b`).
    pub name: Option<String>,
    /// One end.
    pub a: String,
    /// The other end.
    pub b: String,
    /// Rate of both directions.
    pub rate: Option<Rate>,
    /// Packet rate of both directions (packets per second; see [`LinkConfig`]).
    pub packet_rate: Option<u32>,
    /// Propagation delay of both directions.
    pub delay: Option<Span>,
    /// Loss probability of both directions.
    pub loss: Option<f64>,
    /// Queue of both directions.
    pub queue: Option<QdiscConfig>,
    /// Classifier of both directions.
    pub classifier: Option<ClassifierConfig>,
    /// Link layer of both directions.
    pub linklayer: Option<LinkLayerConfig>,
    /// Modem buffer of both directions (between the queue and the line).
    pub modem_buffer: Option<Limit>,
    /// Overrides for the direction a → b (the same keys, see [`LinkConfig`]).
    #[serde(default)]
    pub to_b: LinkConfig,
    /// Overrides for the direction b → a.
    #[serde(default)]
    pub to_a: LinkConfig,
}

impl LinkSpec {
    /// The settings written for both directions.
    fn both(&self) -> LinkConfig {
        LinkConfig {
            rate: self.rate,
            packet_rate: self.packet_rate,
            delay: self.delay,
            loss: self.loss,
            linklayer: self.linklayer,
            modem_buffer: self.modem_buffer,
            queue: self.queue.clone(),
            classifier: self.classifier.clone(),
        }
    }
}

/// A middlebox on a router, between two of its links.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiddleboxSpec {
    /// The router it runs on.
    pub node: String,
    /// The link on side a.
    pub a: String,
    /// The link on side b.
    pub b: String,
    /// Rewriters.
    #[serde(default)]
    pub rewrite: Vec<RewriterConfig>,
    /// Egress toward side b (replaces that link's queue at this router).
    #[serde(default)]
    pub to_b: EgressConfig,
    /// Egress toward side a.
    #[serde(default)]
    pub to_a: EgressConfig,
}

/// A value drawn per use: a constant or a distribution.
#[derive(Clone, Debug, PartialEq)]
pub enum Dist {
    /// Always this value.
    Const(f64),
    /// Uniform in [min, max).
    Uniform(f64, f64),
    /// Exponential with this mean.
    Exponential(f64),
    /// Pareto with shape and minimum.
    Pareto(f64, f64),
}

impl Dist {
    /// Draw a value.
    pub fn sample(&self, rng: &mut asymlink_core::rand::Rng) -> f64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Uniform(a, b) => rng.uniform_range(a, b),
            Dist::Exponential(m) => rng.exponential(m),
            Dist::Pareto(alpha, xm) => rng.pareto(alpha, xm),
        }
    }
    /// The mean.
    pub fn mean(&self) -> f64 {
        match *self {
            Dist::Const(v) => v,
            Dist::Uniform(a, b) => (a + b) / 2.0,
            Dist::Exponential(m) => m,
            Dist::Pareto(alpha, xm) => {
                if alpha > 1.0 {
                    alpha * xm / (alpha - 1.0)
                } else {
                    f64::INFINITY
                }
            }
        }
    }
}

/// Parse a distribution of sizes (bytes) or durations (seconds): a string with a unit, or
/// `{ dist = "uniform", min = ..., max = ... }`, `{ dist = "exponential", mean = ... }`,
/// `{ dist = "pareto", shape = 1.5, min = ... }`.
fn parse_dist(
    v: &toml::Value,
    key: &str,
    unit: fn(&str) -> Result<f64, String>,
) -> Result<Dist, SpecError> {
    let get = |t: &toml::Table, k: &str| -> Result<f64, SpecError> {
        match t.get(k) {
            Some(toml::Value::String(s)) => unit(s).map_err(|m| SpecError {
                key: format!("{key}.{k}"),
                msg: m,
            }),
            Some(_) => err(format!("{key}.{k}"), "must be a string with a unit"),
            None => err(key, format!("missing '{k}'")),
        }
    };
    match v {
        toml::Value::String(s) => unit(s).map(Dist::Const).map_err(|m| SpecError {
            key: key.to_string(),
            msg: m,
        }),
        toml::Value::Table(t) => {
            let kind = t.get("dist").and_then(|d| d.as_str()).unwrap_or("");
            let allowed: &[&str] = match kind {
                "uniform" => &["dist", "min", "max"],
                "exponential" => &["dist", "mean"],
                "pareto" => &["dist", "shape", "min"],
                _ => {
                    return err(
                        format!("{key}.dist"),
                        format!("unknown distribution '{kind}' (uniform, exponential, pareto)"),
                    )
                }
            };
            if let Some(k) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
                return err(
                    format!("{key}.{k}"),
                    format!("unknown key for a {kind} distribution"),
                );
            }
            Ok(match kind {
                "uniform" => {
                    let (a, b) = (get(t, "min")?, get(t, "max")?);
                    if b < a {
                        return err(key, "max is below min");
                    }
                    Dist::Uniform(a, b)
                }
                "exponential" => Dist::Exponential(get(t, "mean")?),
                _ => {
                    let shape = t
                        .get("shape")
                        .and_then(|s| s.as_float().or(s.as_integer().map(|i| i as f64)));
                    let Some(shape) = shape.filter(|s| *s > 0.0) else {
                        return err(format!("{key}.shape"), "must be a positive number");
                    };
                    Dist::Pareto(shape, get(t, "min")?)
                }
            })
        }
        _ => err(key, "must be a value with a unit or a distribution table"),
    }
}

fn bytes_unit(s: &str) -> Result<f64, String> {
    s.parse::<Bytes>().map(|b| b.0 as f64).map_err(|e| e.0)
}

fn secs_unit(s: &str) -> Result<f64, String> {
    asymlink_core::units::parse_duration(s)
        .map(|d| d.as_secs_f64())
        .map_err(|e| e.0)
}

/// Who opens a bulk transfer's connection.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Opener {
    /// The data source connects, then sends (upload).
    #[default]
    Sender,
    /// The receiver connects; the source sends once accepted (download).
    Receiver,
}

/// An application, parsed.
#[derive(Clone, Debug, PartialEq)]
pub enum AppSpec {
    /// One transfer of `bytes` (endless if `None`).
    Bulk {
        /// Bytes to send.
        bytes: Option<u64>,
        /// Who connects.
        open: Opener,
    },
    /// Files one after another on new connections, separated by random gaps.
    FileTransfers {
        /// File size (bytes).
        size: Dist,
        /// Gap between the end of one file and the next (seconds).
        gap: Dist,
        /// Number of files (unlimited if `None`).
        count: Option<u32>,
    },
    /// Interactive typing: keystrokes from `from` to `to`, echoed back.
    Telnet {
        /// Time between keystrokes (seconds).
        interval: Dist,
        /// Bytes per keystroke.
        bytes: u32,
    },
    /// Web pages: the main object, then the other objects over parallel connections.
    Web {
        /// Request size (bytes).
        request: u64,
        /// Main page size (bytes).
        main: u64,
        /// Sizes of the embedded objects (bytes).
        objects: Vec<u64>,
        /// Parallel connections for the objects.
        parallel: u32,
        /// Reuse connections for several objects (HTTP/1.1) instead of one per object.
        persistent: bool,
        /// Number of page loads.
        pages: u32,
        /// Pause between page loads (seconds).
        think: Dist,
    },
    /// Constant-bit-rate UDP.
    Cbr {
        /// Rate.
        rate: Rate,
        /// Packet size (IP bytes).
        size: u32,
    },
    /// UDP echo probes measuring RTT.
    Ping {
        /// Time between probes.
        interval: Dist,
        /// Probe size (IP bytes).
        size: u32,
        /// DSCP of the probes.
        dscp: u8,
        /// Destination port (classifiers may match it).
        port: u16,
    },
}

fn parse_app(v: &toml::Value, key: &str) -> Result<AppSpec, SpecError> {
    let Some(t) = v.as_table() else {
        return err(key, "must be a table with a 'kind'");
    };
    let kind = t.get("kind").and_then(|k| k.as_str()).unwrap_or("");
    let allowed: &[&str] = match kind {
        "bulk" => &["kind", "bytes", "open"],
        "file_transfers" => &["kind", "size", "gap", "count"],
        "telnet" => &["kind", "interval", "bytes"],
        "web" => &[
            "kind",
            "request",
            "main",
            "objects",
            "object_count",
            "object_size",
            "parallel",
            "persistent",
            "pages",
            "think",
        ],
        "cbr" => &["kind", "rate", "size"],
        "ping" => &["kind", "interval", "size", "dscp", "port"],
        _ => {
            return err(
                format!("{key}.kind"),
                format!(
                    "unknown application '{kind}' (bulk, file_transfers, telnet, web, cbr, ping)"
                ),
            )
        }
    };
    if let Some(k) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
        return err(
            format!("{key}.{k}"),
            format!(
                "unknown key for a {kind} application (allowed: {})",
                allowed[1..].join(", ")
            ),
        );
    }
    let k = |name: &str| format!("{key}.{name}");
    let size = |name: &str| -> Result<Option<u64>, SpecError> {
        match t.get(name) {
            None => Ok(None),
            Some(toml::Value::String(s)) => {
                s.parse::<Bytes>()
                    .map(|b| Some(b.0))
                    .map_err(|e| SpecError {
                        key: k(name),
                        msg: e.0,
                    })
            }
            Some(_) => err(k(name), "must be a size with a unit, e.g. \"10MB\""),
        }
    };
    let int = |name: &str, default: i64, lo: i64, hi: i64| -> Result<i64, SpecError> {
        match t.get(name) {
            None => Ok(default),
            Some(toml::Value::Integer(i)) if (lo..=hi).contains(i) => Ok(*i),
            Some(_) => err(k(name), format!("must be an integer in {lo}..={hi}")),
        }
    };
    let dist = |name: &str, unit: fn(&str) -> Result<f64, String>| -> Result<Dist, SpecError> {
        match t.get(name) {
            Some(v) => parse_dist(v, &k(name), unit),
            None => err(key, format!("missing '{name}'")),
        }
    };
    Ok(match kind {
        "bulk" => AppSpec::Bulk {
            bytes: size("bytes")?,
            open: match t.get("open").map(|o| o.as_str()) {
                None => Opener::Sender,
                Some(Some("sender")) => Opener::Sender,
                Some(Some("receiver")) => Opener::Receiver,
                _ => return err(k("open"), "must be \"sender\" or \"receiver\""),
            },
        },
        "file_transfers" => AppSpec::FileTransfers {
            size: dist("size", bytes_unit)?,
            gap: dist("gap", secs_unit)?,
            count: match t.get("count") {
                None => None,
                Some(_) => Some(int("count", 0, 1, u32::MAX as i64)? as u32),
            },
        },
        "telnet" => AppSpec::Telnet {
            interval: dist("interval", secs_unit)?,
            bytes: int("bytes", 1, 1, 1_000_000)? as u32,
        },
        "web" => {
            let objects = match (t.get("objects"), t.get("object_count")) {
                (Some(toml::Value::Array(a)), None) => a
                    .iter()
                    .enumerate()
                    .map(|(i, v)| {
                        v.as_str()
                            .ok_or_else(|| SpecError {
                                key: format!("{key}.objects[{i}]"),
                                msg: "must be a size with a unit".into(),
                            })
                            .and_then(|s| {
                                s.parse::<Bytes>().map(|b| b.0).map_err(|e| SpecError {
                                    key: format!("{key}.objects[{i}]"),
                                    msg: e.0,
                                })
                            })
                    })
                    .collect::<Result<Vec<_>, _>>()?,
                (None, Some(_)) => {
                    let n = int("object_count", 0, 0, 100_000)? as usize;
                    let s = size("object_size")?.ok_or_else(|| SpecError {
                        key: k("object_size"),
                        msg: "required with object_count".into(),
                    })?;
                    vec![s; n]
                }
                (None, None) => Vec::new(),
                _ => {
                    return err(
                        k("objects"),
                        "give either a list 'objects' or 'object_count' + 'object_size'",
                    )
                }
            };
            AppSpec::Web {
                request: size("request")?.unwrap_or(300),
                main: size("main")?.ok_or_else(|| SpecError {
                    key: k("main"),
                    msg: "required".into(),
                })?,
                objects,
                parallel: int("parallel", 4, 1, 1000)? as u32,
                persistent: match t.get("persistent") {
                    None => false,
                    Some(toml::Value::Boolean(b)) => *b,
                    Some(_) => return err(k("persistent"), "must be true or false"),
                },
                pages: int("pages", 1, 1, 1_000_000)? as u32,
                think: match t.get("think") {
                    None => Dist::Const(1.0),
                    Some(v) => parse_dist(v, &k("think"), secs_unit)?,
                },
            }
        }
        "cbr" => AppSpec::Cbr {
            rate: match t.get("rate") {
                Some(toml::Value::String(s)) => s.parse::<Rate>().map_err(|e| SpecError {
                    key: k("rate"),
                    msg: e.0,
                })?,
                _ => return err(k("rate"), "required, e.g. \"64kbit\""),
            },
            size: size("size")?.unwrap_or(200).clamp(28, 65_535) as u32,
        },
        _ => AppSpec::Ping {
            interval: match t.get("interval") {
                Some(v) => parse_dist(v, &k("interval"), secs_unit)?,
                None => Dist::Const(1.0),
            },
            size: size("size")?.unwrap_or(64).clamp(28, 65_535) as u32,
            dscp: int("dscp", 0, 0, 63)? as u8,
            port: int("port", 7, 1, 65_535)? as u16,
        },
    })
}

/// A flow as written in the file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFlow {
    name: Option<String>,
    from: String,
    to: String,
    #[serde(default)]
    start: Option<Span>,
    #[serde(default)]
    stop: Option<Span>,
    #[serde(default)]
    tcp: Option<TcpSpec>,
    app: toml::Value,
    #[serde(default)]
    port: Option<u16>,
}

/// A flow, resolved.
#[derive(Clone, Debug)]
pub struct FlowSpec {
    /// Unique name.
    pub name: String,
    /// Data source node index.
    pub from: usize,
    /// Data sink node index.
    pub to: usize,
    /// Start time (seconds).
    pub start: f64,
    /// Stop time (seconds; endless sources stop writing).
    pub stop: Option<f64>,
    /// TCP configuration.
    pub tcp: TcpConfig,
    /// Application.
    pub app: AppSpec,
    /// Server port.
    pub port: u16,
}

/// A packet capture.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CaptureSpec {
    /// Link name.
    pub link: String,
    /// `to_a`, `to_b` or `both`.
    #[serde(default = "both")]
    pub dir: String,
    /// Output file (relative to the run's output directory).
    pub file: String,
    /// Bytes captured per packet (default: whole packet; payload bytes are zeros).
    #[serde(default)]
    pub snaplen: Option<u32>,
}

fn both() -> String {
    "both".into()
}

/// What is recorded.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MonitorSpec {
    /// Sampling interval of the time series.
    #[serde(default = "default_interval")]
    pub interval: Span,
    /// Per-flow time series.
    #[serde(default = "yes")]
    pub flows: bool,
    /// Per-queue time series.
    #[serde(default = "yes")]
    pub queues: bool,
    /// Per-link time series.
    #[serde(default = "yes")]
    pub links: bool,
    /// Discrete events (drops, timeouts, ...).
    #[serde(default = "yes")]
    pub events: bool,
    /// Packet captures.
    #[serde(default)]
    pub capture: Vec<CaptureSpec>,
}

fn default_interval() -> Span {
    Span(core::time::Duration::from_millis(100))
}
fn yes() -> bool {
    true
}

impl Default for MonitorSpec {
    fn default() -> Self {
        MonitorSpec {
            interval: default_interval(),
            flows: true,
            queues: true,
            links: true,
            events: true,
            capture: Vec::new(),
        }
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScenario {
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    duration: Span,
    #[serde(default)]
    seed: Option<u64>,
    #[serde(default)]
    tcp: Option<TcpSpec>,
    nodes: Vec<NodeSpec>,
    #[serde(default)]
    links: Vec<LinkSpec>,
    #[serde(default)]
    middleboxes: Vec<MiddleboxSpec>,
    #[serde(default)]
    flows: Vec<RawFlow>,
    #[serde(default)]
    monitor: MonitorSpec,
    /// Free-form metadata (reproductions keep their parameter notes here).
    #[serde(default)]
    #[allow(dead_code)]
    meta: Option<toml::Table>,
}

/// A link, resolved.
#[derive(Clone, Debug)]
pub struct ResolvedLink {
    /// Name.
    pub name: String,
    /// Node index of end a.
    pub a: usize,
    /// Node index of end b.
    pub b: usize,
    /// Direction a → b (its own keys over the link-wide ones, validated).
    pub to_b: LinkConfig,
    /// Direction b → a.
    pub to_a: LinkConfig,
}

/// A middlebox, resolved.
#[derive(Clone, Debug)]
pub struct ResolvedMiddlebox {
    /// Router node index.
    pub node: usize,
    /// Link index on side a.
    pub a: usize,
    /// Link index on side b.
    pub b: usize,
    /// Configuration.
    pub cfg: MiddleboxConfig,
}

/// A validated scenario.
#[derive(Clone, Debug)]
pub struct Spec {
    /// Name.
    pub name: String,
    /// Description.
    pub description: String,
    /// Duration.
    pub duration: core::time::Duration,
    /// Master seed.
    pub seed: u64,
    /// Nodes.
    pub nodes: Vec<NodeSpec>,
    /// Links.
    pub links: Vec<ResolvedLink>,
    /// Middleboxes.
    pub middleboxes: Vec<ResolvedMiddlebox>,
    /// Flows.
    pub flows: Vec<FlowSpec>,
    /// Monitors.
    pub monitor: MonitorSpec,
}

fn path_error(e: serde_path_to_error::Error<toml::de::Error>) -> SpecError {
    let path = e.path().to_string();
    let inner = e.into_inner();
    let mut msg = inner.message().to_string();
    if let Some(span) = inner.span() {
        msg = format!("{msg} (at byte {}..{})", span.start, span.end);
    }
    SpecError {
        key: if path == "." { String::new() } else { path },
        msg,
    }
}

fn line_of(src: &str, e: &SpecError) -> SpecError {
    // Turn "(at byte a..b)" into a line number for humans.
    if let Some(i) = e.msg.find("(at byte ") {
        let rest = &e.msg[i + 9..];
        if let Some(start) = rest
            .split("..")
            .next()
            .and_then(|s| s.parse::<usize>().ok())
        {
            let line = src[..start.min(src.len())].matches('\n').count() + 1;
            return SpecError {
                key: e.key.clone(),
                msg: format!("{} (line {line})", e.msg[..i].trim_end()),
            };
        }
    }
    e.clone()
}

/// Where the value at `key` is written in the TOML `src`: its byte range, and whether that
/// is the value itself (`true`) or the deepest table on the path that exists (`false`: a
/// missing key is reported where it belongs). The key path is written as in errors
/// (`links[1].to_a.rate`) or dotted (`links.1.to_a.rate`). `None` if the text does not
/// parse or the path does not start in it.
pub fn span_of_key(src: &str, key: &str) -> Option<(core::ops::Range<usize>, bool)> {
    use toml::de::{DeArray, DeTable, DeValue};
    let doc = DeTable::parse(src).ok()?;
    let mut parts: Vec<Result<usize, &str>> = Vec::new();
    for seg in key.split('.') {
        let (name, rest) = seg.split_once('[').unwrap_or((seg, ""));
        if let Ok(i) = name.parse::<usize>() {
            parts.push(Ok(i));
        } else if !name.is_empty() {
            parts.push(Err(name));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse::<usize>() {
                parts.push(Ok(i));
            }
        }
    }
    let total = parts.len();
    let mut found: Option<(core::ops::Range<usize>, usize)> = None;
    let mut table: Option<&DeTable<'_>> = Some(doc.get_ref());
    let mut array: Option<&DeArray<'_>> = None;
    for (depth, part) in parts.into_iter().enumerate() {
        let value = match (part, table, array) {
            (Err(name), Some(t), _) => t.iter().find(|(k, _)| k.get_ref() == name).map(|(_, v)| v),
            (Ok(i), _, Some(a)) => a.get(i),
            _ => None,
        };
        let Some(value) = value else { break };
        found = Some((value.span(), depth + 1));
        (table, array) = match value.get_ref() {
            DeValue::Table(t) => (Some(t), None),
            DeValue::Array(a) => (None, Some(a)),
            _ => (None, None),
        };
    }
    found.map(|(span, depth)| (span, depth == total))
}

/// The line (1-based) of the value at `key` in `src`, or of the deepest table on the path
/// that exists (see [`span_of_key`]).
pub fn line_of_key(src: &str, key: &str) -> Option<usize> {
    let (span, _) = span_of_key(src, key)?;
    let start = span.start.min(src.len());
    Some(src[..start].matches('\n').count() + 1)
}

/// `e` with the line of its key appended, unless it already names a line.
pub fn with_key_line(src: &str, mut e: SpecError) -> SpecError {
    if !e.key.is_empty() && !e.msg.contains("(line ") {
        if let Some(line) = line_of_key(src, &e.key) {
            e.msg = format!("{} (line {line})", e.msg);
        }
    }
    e
}

impl Spec {
    /// Parse and validate TOML text.
    pub fn parse(src: &str) -> Result<Spec, SpecError> {
        let de = toml::Deserializer::parse(src).map_err(|e| {
            let mut se = SpecError {
                key: String::new(),
                msg: e.message().to_string(),
            };
            if let Some(span) = e.span() {
                se.msg = format!("{} (at byte {}..{})", se.msg, span.start, span.end);
            }
            line_of(src, &se)
        })?;
        let raw: RawScenario =
            serde_path_to_error::deserialize(de).map_err(|e| line_of(src, &path_error(e)))?;
        Spec::resolve(raw).map_err(|e| with_key_line(src, e))
    }

    fn resolve(raw: RawScenario) -> Result<Spec, SpecError> {
        if raw.duration.0.is_zero() {
            return err("duration", "must be positive");
        }
        // Nodes
        let mut index: HashMap<&str, usize> = HashMap::new();
        if raw.nodes.is_empty() {
            return err("nodes", "a scenario needs nodes");
        }
        for (i, n) in raw.nodes.iter().enumerate() {
            if n.name.is_empty() || n.name.contains(char::is_whitespace) {
                return err(format!("nodes[{i}].name"), "must be a non-empty word");
            }
            if index.insert(&n.name, i).is_some() {
                return err(
                    format!("nodes[{i}].name"),
                    format!("duplicate node '{}'", n.name),
                );
            }
            if n.kind == NodeKind::Router && n.addr.is_some() {
                return err(format!("nodes[{i}].addr"), "routers have no address here");
            }
            if let Some(p) = &n.rwnd_policy {
                if n.kind == NodeKind::Router {
                    return err(
                        format!("nodes[{i}].rwnd_policy"),
                        "routers have no TCP receivers; put it on the receiving host \
                         (or rewrite windows in a middlebox: kind = \"rwnd\")",
                    );
                }
                if let Err(e) = p.params() {
                    return err(format!("nodes[{i}].rwnd_policy.{}", e.key), e.msg);
                }
            }
            if let Some(c) = &n.conditioner {
                if n.kind == NodeKind::Router {
                    return err(
                        format!("nodes[{i}].conditioner"),
                        "a conditioner acts at a host's TCP output; routers have none",
                    );
                }
                c.validate().map_err(|e| SpecError {
                    key: format!("nodes[{i}].conditioner.{}", e.key),
                    msg: e.msg,
                })?;
            }
        }
        let node = |name: &str, key: String| -> Result<usize, SpecError> {
            index.get(name).copied().ok_or_else(|| SpecError {
                key,
                msg: format!("unknown node '{name}'"),
            })
        };
        // Addresses
        let mut addrs: HashMap<IpAddr, usize> = HashMap::new();
        for (i, n) in raw.nodes.iter().enumerate() {
            if let Some(a) = n.addr {
                if addrs.insert(a, i).is_some() {
                    return err(
                        format!("nodes[{i}].addr"),
                        format!("address {a} used twice"),
                    );
                }
            }
        }
        // Links
        let mut links = Vec::new();
        let mut link_index: HashMap<String, usize> = HashMap::new();
        let mut degree = vec![0usize; raw.nodes.len()];
        for (i, l) in raw.links.iter().enumerate() {
            let key = |f: &str| format!("links[{i}].{f}");
            let a = node(&l.a, key("a"))?;
            let b = node(&l.b, key("b"))?;
            if a == b {
                return err(key("b"), "a link must join two different nodes");
            }
            let name = l.name.clone().unwrap_or_else(|| format!("{}-{}", l.a, l.b));
            if link_index.insert(name.clone(), i).is_some() {
                return err(
                    key("name"),
                    format!("duplicate link name '{name}' (name the links)"),
                );
            }
            degree[a] += 1;
            degree[b] += 1;
            let both = l.both();
            let dir = |d: &LinkConfig, dname: &str| -> Result<LinkConfig, SpecError> {
                let c = d.or(&both);
                // Errors name the key that was written: `to_a.rate` or the link's `rate`.
                c.validate().map_err(|e| SpecError {
                    key: match e.key {
                        "rate" if d.rate.is_some() => key(&format!("{dname}.rate")),
                        "loss" if d.loss.is_some() => key(&format!("{dname}.loss")),
                        "packet_rate" if d.packet_rate.is_some() => {
                            key(&format!("{dname}.packet_rate"))
                        }
                        "modem_buffer" if d.modem_buffer.is_some() => {
                            key(&format!("{dname}.modem_buffer"))
                        }
                        k => key(k),
                    },
                    msg: e.msg,
                })?;
                if c.rate.is_none() && c.packet_rate.is_none() {
                    return err(
                        key("rate"),
                        format!(
                            "no rate for direction {dname} (set 'rate' or '{dname}.rate', \
                             or 'packet_rate')"
                        ),
                    );
                }
                Ok(c)
            };
            links.push(ResolvedLink {
                name,
                a,
                b,
                to_b: dir(&l.to_b, "to_b")?,
                to_a: dir(&l.to_a, "to_a")?,
            });
        }
        for (i, n) in raw.nodes.iter().enumerate() {
            if n.kind == NodeKind::Host && degree[i] > 1 {
                return err(
                    format!("nodes[{i}]"),
                    format!(
                        "host '{}' has {} links; a host has exactly one (put a router between)",
                        n.name, degree[i]
                    ),
                );
            }
        }
        // Middleboxes
        let mut middleboxes = Vec::new();
        let mut mb_links: HashMap<(usize, usize), usize> = HashMap::new();
        for (i, m) in raw.middleboxes.iter().enumerate() {
            let key = |f: &str| format!("middleboxes[{i}].{f}");
            let n = node(&m.node, key("node"))?;
            if raw.nodes[n].kind != NodeKind::Router {
                return err(key("node"), format!("'{}' is not a router", m.node));
            }
            let link = |name: &str, k: String| -> Result<usize, SpecError> {
                let li = *link_index.get(name).ok_or_else(|| SpecError {
                    key: k.clone(),
                    msg: format!("unknown link '{name}'"),
                })?;
                if links[li].a != n && links[li].b != n {
                    return err(k, format!("link '{name}' does not touch '{}'", m.node));
                }
                Ok(li)
            };
            let a = link(&m.a, key("a"))?;
            let b = link(&m.b, key("b"))?;
            if a == b {
                return err(key("b"), "sides a and b must be different links");
            }
            for li in [a, b] {
                if mb_links.insert((n, li), i).is_some() {
                    return err(
                        key("a"),
                        format!(
                            "link '{}' at '{}' already has a middlebox",
                            links[li].name, m.node
                        ),
                    );
                }
            }
            middleboxes.push(ResolvedMiddlebox {
                node: n,
                a,
                b,
                cfg: MiddleboxConfig {
                    rewrite: m.rewrite.clone(),
                    to_b: m.to_b.clone(),
                    to_a: m.to_a.clone(),
                },
            });
        }
        // Flows
        let default_tcp = raw.tcp.clone().unwrap_or(TcpSpec::Name("rfc".into()));
        let default_profile = match &default_tcp {
            TcpSpec::Name(n) => n.clone(),
            TcpSpec::Table(t) => t.profile.clone().unwrap_or_else(|| "rfc".into()),
        };
        let base_tcp = default_tcp.resolve("rfc").map_err(|(k, m)| SpecError {
            key: format!("tcp.{k}"),
            msg: m,
        })?;
        let mut flows = Vec::new();
        let mut names: HashMap<String, usize> = HashMap::new();
        let mut ports: HashMap<(usize, u16), usize> = HashMap::new();
        for (i, f) in raw.flows.iter().enumerate() {
            let key = |k: &str| format!("flows[{i}].{k}");
            let from = node(&f.from, key("from"))?;
            let to = node(&f.to, key("to"))?;
            for (n, k) in [(from, "from"), (to, "to")] {
                if raw.nodes[n].kind != NodeKind::Host {
                    return err(
                        key(k),
                        format!(
                            "'{}' is a router; flows run between hosts",
                            raw.nodes[n].name
                        ),
                    );
                }
                if degree[n] == 0 {
                    return err(key(k), format!("host '{}' has no link", raw.nodes[n].name));
                }
            }
            if from == to {
                return err(key("to"), "a flow needs two different hosts");
            }
            let name = f.name.clone().unwrap_or_else(|| format!("flow{i}"));
            if names.insert(name.clone(), i).is_some() {
                return err(key("name"), format!("duplicate flow name '{name}'"));
            }
            let tcp = match &f.tcp {
                None => base_tcp.clone(),
                Some(s) => s.resolve(&default_profile).map_err(|(k, m)| SpecError {
                    key: key(&format!("tcp.{k}")),
                    msg: m,
                })?,
            };
            let app = parse_app(&f.app, &key("app"))?;
            let port = f.port.unwrap_or(5000 + i as u16);
            // The listening end must not clash.
            let listener = match &app {
                AppSpec::Bulk {
                    open: Opener::Receiver,
                    ..
                } => from,
                AppSpec::Web { .. } => from,
                _ => to,
            };
            if ports.insert((listener, port), i).is_some() {
                return err(
                    key("port"),
                    format!("port {port} already used on that host"),
                );
            }
            let start = f.start.map(|s| s.0.as_secs_f64()).unwrap_or(0.0);
            let stop = f.stop.map(|s| s.0.as_secs_f64());
            if stop.is_some_and(|s| s <= start) {
                return err(key("stop"), "must be after start");
            }
            flows.push(FlowSpec {
                name,
                from,
                to,
                start,
                stop,
                tcp,
                app,
                port,
            });
        }
        for (i, c) in raw.monitor.capture.iter().enumerate() {
            if !link_index.contains_key(&c.link) {
                return err(
                    format!("monitor.capture[{i}].link"),
                    format!("unknown link '{}'", c.link),
                );
            }
            if !["to_a", "to_b", "both"].contains(&c.dir.as_str()) {
                return err(
                    format!("monitor.capture[{i}].dir"),
                    "must be to_a, to_b or both",
                );
            }
        }
        if raw.monitor.interval.0.is_zero() {
            return err("monitor.interval", "must be positive");
        }
        Ok(Spec {
            name: raw.name.unwrap_or_else(|| "scenario".into()),
            description: raw.description.unwrap_or_default(),
            duration: raw.duration.0,
            seed: raw.seed.unwrap_or(1),
            nodes: raw.nodes,
            links,
            middleboxes,
            flows,
            monitor: raw.monitor,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BASE: &str = r#"
        duration = "10s"
        [[nodes]]
        name = "s"
        [[nodes]]
        name = "r"
        kind = "router"
        [[nodes]]
        name = "c"
        [[links]]
        a = "s"
        b = "r"
        rate = "10Mbit"
        delay = "1ms"
        [[links]]
        a = "r"
        b = "c"
        rate = "10Mbit"
        delay = "10ms"
        to_a = { rate = "100kbit" }
        [[flows]]
        from = "s"
        to = "c"
        app = { kind = "bulk", bytes = "1MB" }
    "#;

    #[test]
    fn parses_a_valid_scenario() {
        let s = Spec::parse(BASE).unwrap();
        assert_eq!(s.links[1].to_a.rate, Some(Rate::kbps(100)));
        assert_eq!(s.links[1].to_b.rate, Some(Rate::mbps(10)));
        assert_eq!(s.flows[0].tcp.profile, "rfc");
        assert_eq!(
            s.flows[0].app,
            AppSpec::Bulk {
                bytes: Some(1_000_000),
                open: Opener::Sender
            }
        );
    }

    fn e(src: &str) -> String {
        let e = Spec::parse(src).unwrap_err();
        format!("{}: {}", e.key, e.msg)
    }

    #[test]
    fn errors_name_the_key() {
        let m = e(&BASE.replace(
            "rate = \"10Mbit\"\n        delay = \"1ms\"",
            "rat = \"10Mbit\"",
        ));
        assert!(m.contains("links[0]") && m.contains("rat"), "{m}");
        let m = e(&BASE.replace("\"100kbit\"", "100"));
        assert!(
            m.contains("links[1].to_a.rate") && m.contains("no unit"),
            "{m}"
        );
        let m = e(&BASE.replace("b = \"c\"", "b = \"x\""));
        assert!(
            m.contains("links[1].b") && m.contains("unknown node 'x'"),
            "{m}"
        );
        let m = e(&BASE.replace("kind = \"bulk\"", "kind = \"bulkk\""));
        assert!(m.contains("flows[0].app.kind"), "{m}");
        let m = e(&BASE.replace("bytes = \"1MB\"", "bytes = \"1MB\", size = \"1\""));
        assert!(m.contains("flows[0].app.size"), "{m}");
        let m = e(&format!(
            "{BASE}\n[[links]]\na = \"c\"\nb = \"s\"\nname = \"x\"\nrate = \"1Mbit\""
        ));
        assert!(m.contains("has 2 links"), "{m}");
        let m = e(&BASE.replace("duration = \"10s\"", "duration = \"0s\""));
        assert!(m.contains("duration"), "{m}");
        // A zero rate written on one direction is named there, with its line.
        let src = BASE.replace(
            "to_a = { rate = \"100kbit\" }",
            "to_a = { rate = \"0kbit\" }",
        );
        let line = src.lines().position(|l| l.contains("0kbit")).unwrap() + 1;
        let m = e(&src);
        assert!(m.starts_with("links[1].to_a.rate: must be positive"), "{m}");
        assert!(m.ends_with(&format!("(line {line})")), "{m}");
        let m = e(&BASE.replace(
            "[[flows]]",
            "[[flows]]\ntcp = { profile = \"paper\", mss = \"10B\" }",
        ));
        assert!(m.contains("flows[0].tcp.mss"), "{m}");
        let m = e("duration = \"1s\"\nnodes = [{ name = \"a\" }]\n[[flows]]\nfrom = \"a\"\nto = \"a\"\napp = { kind = \"bulk\" }");
        assert!(m.contains("has no link"), "{m}");
        let m = e("duration = \"1s\"\nnodes = [\n");
        assert!(m.contains("line"), "{m}");
    }

    #[test]
    fn packet_rate_links() {
        let s = Spec::parse(&BASE.replace(
            "to_a = { rate = \"100kbit\" }",
            "to_a = { packet_rate = 10 }",
        ))
        .unwrap();
        assert_eq!(s.links[1].to_a.packet_rate, Some(10));
        assert_eq!(
            s.links[1].to_a.rate,
            Some(Rate::mbps(10)),
            "the link-wide rate still applies"
        );
        let s = Spec::parse(&BASE.replace(
            "rate = \"10Mbit\"\n        delay = \"10ms\"",
            "packet_rate = 20\n        delay = \"10ms\"",
        ))
        .unwrap();
        assert_eq!(s.links[1].to_b.rate, None);
        assert_eq!(s.links[1].to_b.packet_rate, Some(20));
        assert_eq!(s.links[1].to_a.rate, Some(Rate::kbps(100)));
        let m = e(&BASE.replace(
            "to_a = { rate = \"100kbit\" }",
            "to_a = { packet_rate = 0 }",
        ));
        assert!(m.contains("links[1].to_a.packet_rate"), "{m}");
    }

    #[test]
    fn distributions() {
        let s = Spec::parse(&BASE.replace(
            "app = { kind = \"bulk\", bytes = \"1MB\" }",
            "app = { kind = \"file_transfers\", size = { dist = \"uniform\", min = \"10KB\", max = \"10MB\" }, gap = { dist = \"exponential\", mean = \"1s\" } }",
        ))
        .unwrap();
        match &s.flows[0].app {
            AppSpec::FileTransfers { size, gap, count } => {
                assert_eq!(*size, Dist::Uniform(10_000.0, 10_000_000.0));
                assert_eq!(*gap, Dist::Exponential(1.0));
                assert_eq!(*count, None);
            }
            a => panic!("{a:?}"),
        }
    }
}
