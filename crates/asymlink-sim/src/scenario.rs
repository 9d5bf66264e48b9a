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

use crate::tcp::{TcpConfig, TcpProfile, TcpSpec};
use asymlink_core::classify::ClassifierConfig;
use asymlink_core::config::ConfigError;
use asymlink_core::jitter::Jitter;
use asymlink_core::link::LinkConfig;
use asymlink_core::overhead::LinkLayerConfig;
use asymlink_core::pipeline::{EgressConfig, MiddleboxConfig, RewriterConfig};
use asymlink_core::qdisc::QdiscConfig;
use asymlink_core::script::DropRule;
use asymlink_core::subscribers::SubscriberConfig;
use asymlink_core::trace::TraceSpec;
use asymlink_core::units::{Limit, Rate, Span};
use core::net::IpAddr;
use serde::Deserialize;
use std::collections::{HashMap, HashSet};
use std::path::Path;

mod app;
pub use app::{AppConfig, AppSpec, Dist, Opener};

fn err<T>(key: impl Into<String>, msg: impl Into<String>) -> Result<T, ConfigError> {
    Err(ConfigError::new(key, msg))
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
    /// Delivery schedule of both directions instead of `rate` (see
    /// [`asymlink_core::trace`]).
    #[serde(default)]
    pub trace: Option<TraceSpec>,
    /// Propagation delay of both directions.
    pub delay: Option<Span>,
    /// Delay jitter of both directions (see [`asymlink_core::jitter`]).
    #[serde(default)]
    pub jitter: Option<Jitter>,
    /// Loss probability of both directions.
    pub loss: Option<f64>,
    /// Scripted loss of both directions (each counts its own packets).
    pub drop: Option<Vec<DropRule>>,
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
            trace: self.trace.clone(),
            delay: self.delay,
            jitter: self.jitter,
            loss: self.loss,
            drop: self.drop.clone(),
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
    /// Subscriber lines on side a, each with its own pipeline (`subscribers`,
    /// `subscribers_file`, `max_subscribers`, `subscriber_idle_timeout`; see
    /// [`asymlink_core::subscribers`]). Taken off the table before the rest is read.
    #[serde(skip)]
    pub subscribers: SubscriberConfig,
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
    app: AppConfig,
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
    /// Which direction(s): `to_a`, `to_b` or `both` (default).
    #[serde(default)]
    pub dir: CaptureDir,
    /// Output file (relative to the run's output directory).
    pub file: String,
    /// Bytes captured per packet (default: whole packet; payload bytes are zeros).
    #[serde(default)]
    pub snaplen: Option<u32>,
}

/// The direction(s) of a link a capture records.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CaptureDir {
    /// Packets from b to a.
    ToA,
    /// Packets from a to b.
    ToB,
    /// Both directions.
    #[default]
    Both,
}

impl CaptureDir {
    /// Whether packets from a to b are recorded.
    pub fn to_b(self) -> bool {
        self != CaptureDir::ToA
    }
    /// Whether packets from b to a are recorded.
    pub fn to_a(self) -> bool {
        self != CaptureDir::ToB
    }
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
    /// Its subscribers (none: the pipeline takes all traffic).
    pub subscribers: SubscriberConfig,
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

impl Spec {
    /// Parse and validate TOML text.
    pub fn parse(src: &str) -> Result<Spec, ConfigError> {
        Spec::parse_in(src, None)
    }

    /// Parse and validate TOML text read from a file in directory `base`: trace files
    /// are relative to it (`None`: to the working directory).
    pub fn parse_in(src: &str, base: Option<&Path>) -> Result<Spec, ConfigError> {
        let (table, subscribers) = Spec::expand_middleboxes(src, base)?;
        let mut raw: RawScenario = match table {
            Some(t) => asymlink_core::config::from_toml_table(t, src)?,
            None => asymlink_core::config::from_toml(src)?,
        };
        for (m, s) in raw.middleboxes.iter_mut().zip(subscribers) {
            m.subscribers = s;
        }
        Spec::resolve(raw, base).map_err(|e| e.with_line(src))
    }

    /// The scenario's table with the `line` of each middlebox expanded into its `to_a` and
    /// `to_b` and its subscriber keys taken off (`None`: no middlebox has either), and
    /// each middlebox's subscribers (`subscribers_file` relative to `base`).
    fn expand_middleboxes(
        src: &str,
        base: Option<&Path>,
    ) -> Result<(Option<toml::Table>, Vec<SubscriberConfig>), ConfigError> {
        // A syntax error is reported (one line, with its line number) by the parse proper.
        let Ok(mut t) = src.parse::<toml::Table>() else {
            return Ok((None, Vec::new()));
        };
        let mut any = false;
        let mut subscribers = Vec::new();
        if let Some(toml::Value::Array(mbs)) = t.get_mut("middleboxes") {
            for (i, m) in mbs.iter_mut().enumerate() {
                let toml::Value::Table(m) = m else {
                    subscribers.push(SubscriberConfig::default());
                    continue;
                };
                let at = |e: ConfigError| e.within(format!("middleboxes[{i}]")).with_line(src);
                any |= asymlink_core::line::expand(m).map_err(at)?;
                any |= asymlink_core::subscribers::KEYS
                    .iter()
                    .any(|k| m.contains_key(*k));
                let s = SubscriberConfig::take(m, base, &mut |p| std::fs::read_to_string(p))
                    .map_err(at)?;
                subscribers.push(s);
            }
        }
        Ok((any.then_some(t), subscribers))
    }

    /// Check a parsed scenario: the topology (nodes, links, middleboxes), then the flows
    /// and the monitors that refer to it.
    fn resolve(raw: RawScenario, base: Option<&Path>) -> Result<Spec, ConfigError> {
        if raw.duration.0.is_zero() {
            return err("duration", "must be positive");
        }
        let mut topo = Topology::new(&raw.nodes)?;
        let links = topo.links(&raw.links, base)?;
        let middleboxes = topo.middleboxes(&raw.middleboxes, &links)?;
        let flows = topo.flows(raw.tcp.as_ref(), &raw.flows)?;
        check_drop_flows(&raw.links, &flows)?;
        check_monitor(&raw.monitor, &links)?;
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

/// The nodes, checked, with what the links, middleboxes and flows need to know of them.
struct Topology<'a> {
    nodes: &'a [NodeSpec],
    index: HashMap<&'a str, usize>,
    /// Links per node (filled by [`Topology::links`]).
    degree: Vec<usize>,
}

impl<'a> Topology<'a> {
    fn new(nodes: &'a [NodeSpec]) -> Result<Topology<'a>, ConfigError> {
        if nodes.is_empty() {
            return err("nodes", "a scenario needs nodes");
        }
        let mut index = HashMap::new();
        let mut addrs: HashMap<IpAddr, usize> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            let key = |f: &str| format!("nodes[{i}].{f}");
            if n.name.is_empty() || n.name.contains(char::is_whitespace) {
                return err(key("name"), "must be a non-empty word");
            }
            if index.insert(n.name.as_str(), i).is_some() {
                return err(key("name"), format!("duplicate node '{}'", n.name));
            }
            if n.kind == NodeKind::Router && n.addr.is_some() {
                return err(key("addr"), "routers have no address here");
            }
            if let Some(p) = &n.rwnd_policy {
                if n.kind == NodeKind::Router {
                    return err(
                        key("rwnd_policy"),
                        "routers have no TCP receivers; put it on the receiving host \
                         (or rewrite windows in a middlebox: kind = \"rwnd\")",
                    );
                }
                p.params().map_err(|e| e.within(key("rwnd_policy")))?;
            }
            if let Some(c) = &n.conditioner {
                if n.kind == NodeKind::Router {
                    return err(
                        key("conditioner"),
                        "a conditioner acts at a host's TCP output; routers have none",
                    );
                }
                c.validate().map_err(|e| e.within(key("conditioner")))?;
            }
        }
        for (i, n) in nodes.iter().enumerate() {
            if let Some(a) = n.addr {
                if addrs.insert(a, i).is_some() {
                    return err(
                        format!("nodes[{i}].addr"),
                        format!("address {a} used twice"),
                    );
                }
            }
        }
        Ok(Topology {
            nodes,
            index,
            degree: vec![0; nodes.len()],
        })
    }

    /// The index of the node `name`; the error names `key`.
    fn node(&self, name: &str, key: String) -> Result<usize, ConfigError> {
        self.index
            .get(name)
            .copied()
            .ok_or_else(|| ConfigError::new(key, format!("unknown node '{name}'")))
    }

    /// Resolve the links (each direction's settings over the link-wide ones) and check
    /// that every host has at most one.
    fn links(
        &mut self,
        raw: &[LinkSpec],
        base: Option<&Path>,
    ) -> Result<Vec<ResolvedLink>, ConfigError> {
        let mut links: Vec<ResolvedLink> = Vec::new();
        for (i, l) in raw.iter().enumerate() {
            let key = |f: &str| format!("links[{i}].{f}");
            let a = self.node(&l.a, key("a"))?;
            let b = self.node(&l.b, key("b"))?;
            if a == b {
                return err(key("b"), "a link must join two different nodes");
            }
            let name = l.name.clone().unwrap_or_else(|| format!("{}-{}", l.a, l.b));
            if links.iter().any(|o| o.name == name) {
                return err(
                    key("name"),
                    format!("duplicate link name '{name}' (name the links)"),
                );
            }
            self.degree[a] += 1;
            self.degree[b] += 1;
            links.push(ResolvedLink {
                name,
                a,
                b,
                to_b: link_dir(l, &l.to_b, "to_b", &key, base)?,
                to_a: link_dir(l, &l.to_a, "to_a", &key, base)?,
            });
        }
        for (i, n) in self.nodes.iter().enumerate() {
            if n.kind == NodeKind::Host && self.degree[i] > 1 {
                return err(
                    format!("nodes[{i}]"),
                    format!(
                        "host '{}' has {} links; a host has exactly one (put a router between)",
                        n.name, self.degree[i]
                    ),
                );
            }
        }
        Ok(links)
    }

    /// Resolve the middleboxes: each on a router, between two different links of it, at
    /// most one per link end.
    fn middleboxes(
        &self,
        raw: &[MiddleboxSpec],
        links: &[ResolvedLink],
    ) -> Result<Vec<ResolvedMiddlebox>, ConfigError> {
        let mut middleboxes = Vec::new();
        let mut taken: HashMap<(usize, usize), usize> = HashMap::new();
        // Links by name (the first of a name, as a search in order finds it): thousands of
        // middleboxes each name two of thousands of links.
        let mut by_name: HashMap<&str, usize> = HashMap::with_capacity(links.len());
        for (li, l) in links.iter().enumerate() {
            by_name.entry(l.name.as_str()).or_insert(li);
        }
        for (i, m) in raw.iter().enumerate() {
            let key = |f: &str| format!("middleboxes[{i}].{f}");
            let n = self.node(&m.node, key("node"))?;
            if self.nodes[n].kind != NodeKind::Router {
                return err(key("node"), format!("'{}' is not a router", m.node));
            }
            let link = |name: &str, k: String| -> Result<usize, ConfigError> {
                let Some(&li) = by_name.get(name) else {
                    return err(k, format!("unknown link '{name}'"));
                };
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
                if taken.insert((n, li), i).is_some() {
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
                subscribers: m.subscribers.clone(),
            });
        }
        Ok(middleboxes)
    }

    /// Resolve the flows: between two linked hosts, unique names, TCP settings over the
    /// scenario's default profile, a free listening port.
    fn flows(&self, tcp: Option<&TcpSpec>, raw: &[RawFlow]) -> Result<Vec<FlowSpec>, ConfigError> {
        let default_tcp = tcp.cloned().unwrap_or(TcpSpec::Name(TcpProfile::Rfc));
        let default_profile = default_tcp.profile(TcpProfile::Rfc);
        let base_tcp = default_tcp
            .resolve(TcpProfile::Rfc)
            .map_err(|e| e.within("tcp"))?;
        let mut flows: Vec<FlowSpec> = Vec::new();
        let mut names: HashSet<String> = HashSet::new();
        let mut ports: HashMap<(usize, u16), usize> = HashMap::new();
        for (i, f) in raw.iter().enumerate() {
            let key = |k: &str| format!("flows[{i}].{k}");
            let from = self.node(&f.from, key("from"))?;
            let to = self.node(&f.to, key("to"))?;
            for (n, k) in [(from, "from"), (to, "to")] {
                let node = &self.nodes[n];
                if node.kind != NodeKind::Host {
                    return err(
                        key(k),
                        format!("'{}' is a router; flows run between hosts", node.name),
                    );
                }
                if self.degree[n] == 0 {
                    return err(key(k), format!("host '{}' has no link", node.name));
                }
            }
            if from == to {
                return err(key("to"), "a flow needs two different hosts");
            }
            let name = f.name.clone().unwrap_or_else(|| format!("flow{i}"));
            if !names.insert(name.clone()) {
                return err(key("name"), format!("duplicate flow name '{name}'"));
            }
            let tcp = match &f.tcp {
                None => base_tcp.clone(),
                Some(s) => s
                    .resolve(default_profile)
                    .map_err(|e| e.within(key("tcp")))?,
            };
            let app = f.app.resolve().map_err(|e| e.within(key("app")))?;
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
        Ok(flows)
    }
}

/// One direction of link `l`: its own settings `d` over the link-wide ones. Errors name
/// the key that was written: `to_a.rate` or the link's `rate`.
fn link_dir(
    l: &LinkSpec,
    d: &LinkConfig,
    dname: &str,
    key: &dyn Fn(&str) -> String,
    base: Option<&Path>,
) -> Result<LinkConfig, ConfigError> {
    let mut c = d.or(&l.both());
    c.validate().map_err(|e| {
        let own = match e.path.as_str() {
            p if p.starts_with("drop") => d.drop.is_some(),
            p if p.starts_with("jitter") => d.jitter.is_some(),
            "rate" => d.rate.is_some(),
            "loss" => d.loss.is_some(),
            "packet_rate" => d.packet_rate.is_some(),
            "trace" => d.trace.is_some(),
            "modem_buffer" => d.modem_buffer.is_some(),
            _ => false,
        };
        let k = if own {
            key(&format!("{dname}.{}", e.path))
        } else {
            key(&e.path)
        };
        ConfigError::new(k, e.msg)
    })?;
    if c.rate.is_none() && c.packet_rate.is_none() && c.trace.is_none() {
        return err(
            key("rate"),
            format!(
                "no rate for direction {dname} (set 'rate' or '{dname}.rate', \
                 'packet_rate' or 'trace')"
            ),
        );
    }
    if let Some(t) = &mut c.trace {
        t.load(base, &mut |p| std::fs::read_to_string(p))
            .map_err(|e| {
                let k = if d.trace.is_some() {
                    format!("{dname}.trace")
                } else {
                    "trace".into()
                };
                ConfigError::new(key(&k), e.msg)
            })?;
    }
    Ok(c)
}

/// Scripted drops name existing flows.
fn check_drop_flows(links: &[LinkSpec], flows: &[FlowSpec]) -> Result<(), ConfigError> {
    for (i, l) in links.iter().enumerate() {
        for (dname, rules) in [
            ("", &l.drop),
            ("to_b.", &l.to_b.drop),
            ("to_a.", &l.to_a.drop),
        ] {
            for (j, r) in rules.iter().flatten().enumerate() {
                let DropRule::Segment(s) = r else { continue };
                let Some(name) = &s.flow else { continue };
                if !flows.iter().any(|f| &f.name == name) {
                    return err(
                        format!("links[{i}].{dname}drop[{j}].flow"),
                        format!("unknown flow '{name}'"),
                    );
                }
            }
        }
    }
    Ok(())
}

/// Captures name existing links; the sampling interval is positive.
fn check_monitor(m: &MonitorSpec, links: &[ResolvedLink]) -> Result<(), ConfigError> {
    for (i, c) in m.capture.iter().enumerate() {
        if !links.iter().any(|l| l.name == c.link) {
            return err(
                format!("monitor.capture[{i}].link"),
                format!("unknown link '{}'", c.link),
            );
        }
    }
    if m.interval.0.is_zero() {
        return err("monitor.interval", "must be positive");
    }
    Ok(())
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
                open: Opener::Sender,
                then: None,
                write_size: None,
            }
        );
    }

    #[test]
    fn a_bulk_writer_takes_a_write_size() {
        let s = Spec::parse(&BASE.replace("bytes = \"1MB\"", "write_size = \"64KiB\"")).unwrap();
        assert_eq!(
            s.flows[0].app,
            AppSpec::Bulk {
                bytes: None,
                open: Opener::Sender,
                then: None,
                write_size: Some(65_536),
            }
        );
        let m = e(&BASE.replace("bytes = \"1MB\"", "write_size = \"0B\""));
        assert!(m.contains("flows[0].app.write_size"), "{m}");
    }

    fn e(src: &str) -> String {
        let e = Spec::parse(src).unwrap_err();
        e.to_string()
    }

    #[test]
    fn a_link_takes_jitter_for_both_directions_or_one() {
        let s = Spec::parse(&BASE.replace(
            "to_a = { rate = \"100kbit\" }",
            "jitter = \"1ms\"\n        to_a = { rate = \"100kbit\", jitter = { dist = \"exponential\", mean = \"0.2ms\" } }",
        ))
        .unwrap();
        assert_eq!(
            s.links[1].to_b.jitter,
            Some(Jitter::Uniform { min: 0.0, max: 1e6 })
        );
        assert_eq!(
            s.links[1].to_a.jitter,
            Some(Jitter::Exponential { mean: 2e5 })
        );
        assert_eq!(s.links[0].to_b.jitter, None);
        let m = e(&BASE.replace(
            "to_a = { rate = \"100kbit\" }",
            "to_a = { rate = \"100kbit\", jitter = { dist = \"uniform\", min = \"2ms\", max = \"1ms\" } }",
        ));
        assert!(m.contains("links[1].to_a.jitter.max"), "{m}");
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
    fn typed_fields_name_their_key() {
        // TCP profiles, capture directions and application fields are typed: a bad value
        // is refused at its own key, with the line.
        let m = e(&BASE.replace("duration = \"10s\"", "duration = \"10s\"\ntcp = \"bsd\""));
        assert!(m.starts_with("tcp: unknown TCP profile 'bsd'"), "{m}");
        let m = e(&BASE.replace("[[flows]]", "[[flows]]\ntcp = { profile = \"reno\" }"));
        assert!(
            m.starts_with("flows[0].tcp.profile: unknown TCP profile"),
            "{m}"
        );
        let m = e(&format!(
            "{BASE}\n[[monitor.capture]]\nlink = \"s-r\"\ndir = \"up\"\nfile = \"x.pcap\""
        ));
        assert!(
            m.starts_with("monitor.capture[0].dir: unknown variant `up`"),
            "{m}"
        );
        let m = e(&BASE.replace("bytes = \"1MB\"", "bytes = \"1MB\", open = \"both\""));
        assert!(
            m.starts_with("flows[0].app.open: unknown variant `both`"),
            "{m}"
        );
        let m = e(&BASE.replace(
            "app = { kind = \"bulk\", bytes = \"1MB\" }",
            "app = { kind = \"ping\", dscp = 64 }",
        ));
        assert!(m.starts_with("flows[0].app.dscp: must be in 0..=63"), "{m}");
        let m = e(&BASE.replace(
            "app = { kind = \"bulk\", bytes = \"1MB\" }",
            "app = { kind = \"file_transfers\", size = { dist = \"uniform\", min = \"1MB\", max = \"1KB\" }, gap = \"1s\" }",
        ));
        assert!(m.starts_with("flows[0].app.size.max: is below min"), "{m}");
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
