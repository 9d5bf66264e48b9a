//! The box's configuration file: the middlebox vocabulary of the simulator (`rewrite`,
//! `to_a`, `to_b`, exactly as in a scenario's `[[middleboxes]]` entry) plus the sections
//! only a live box has. Unknown keys are errors everywhere.
//!
//! ```toml
//! seed = 7                              # optional; default: from the OS (logged)
//! malformed = "forward"                 # or "drop" (counted either way)
//!
//! [interfaces]
//! kind = "packet"                       # AF_PACKET on veth/Ethernet, or "tun"
//! a = "eth-lan"                         # side a (e.g. the home network)
//! b = "eth-wan"                         # side b (e.g. toward the modem / internet)
//!
//! [to_b]                                # the pipeline toward b (core MiddleboxConfig)
//! classifier = { default = "bulk", rules = [{ class = "ack", match = { pure_ack = true } }] }
//! qdisc = { kind = "prio", bands = [{ classes = ["ack"] }, { classes = ["bulk"] }] }
//!
//! [emulation.to_b]                      # optional: stand in for a slow link
//! rate = "512kbit"
//! delay = "10ms"
//! loss = 0.0
//! linklayer = { encap = "llc_snap_routed" }
//! queue = "30p"                         # the modem's buffer (see link.rs)
//!
//! [capture]
//! dir = "/var/lib/asymlink/pcap"
//! to_a = "to_a.pcap"
//! to_b = "to_b.pcap"
//! snaplen = 128
//!
//! [stats]
//! socket = "/run/asymlink/box.sock"     # JSON, one snapshot per connection
//! prometheus = "127.0.0.1:9464"         # loopback only
//! file = "/run/asymlink/final.json"     # written at exit
//!
//! [privileges]
//! user = "nobody"                       # dropped to once devices are open
//!
//! [process]
//! realtime_priority = 20                # SCHED_FIFO for the forwarding thread
//! cpu = 1                               # pin it (with workers: a list, one per worker)
//! workers = 1                           # forwarding threads (frames spread by subscriber)
//! horizon = "50us"                      # release packets up to 50 µs early (batching)
//! io = "socket"                         # or "mmap": memory-mapped rings, "xdp": AF_XDP
//! busy_poll = "0us"                     # keep checking the devices this long before sleeping
//! tx_thread = false                     # send from a second thread per interface
//!
//! [[subscribers]]                       # one pipeline per subscriber line (side a)
//! prefix = "198.18.0.12"                # LAN address or prefix, IPv4 or IPv6
//! line = { down = "8Mbit", up = "1Mbit" }   # or rewrite / to_a / to_b
//! ```
//!
//! `subscribers_file` names a file of further `[[subscribers]]` entries (relative to this
//! one) and `max_subscribers` caps the trees alive at once
//! ([`asymlink_core::subscribers`]).
//!
//! [`BoxConfig::load`] parses and validates **everything** (it builds the pipelines to
//! check them) without touching any device: a bad file is refused before anything
//! changes on the machine.

use asymlink_core::config::ConfigError;
use asymlink_core::link::LinkConfig;
use asymlink_core::pipeline::{Dir, EgressConfig, Middlebox, MiddleboxConfig, RewriterConfig};
use asymlink_core::subscribers::SubscriberConfig;
use asymlink_core::units::Rate;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// How the box reaches its two sides.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IfaceKind {
    /// AF_PACKET raw sockets on two existing Ethernet/veth interfaces (a bump in the wire).
    #[default]
    Packet,
    /// Two TUN devices (created if absent; raw IP, no link header).
    Tun,
}

/// `[interfaces]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct InterfacesConfig {
    /// Device kind.
    #[serde(default)]
    pub kind: IfaceKind,
    /// Side a.
    pub a: String,
    /// Side b.
    pub b: String,
    /// Frames read per side per wake-up (default 64).
    #[serde(default)]
    pub batch: Option<usize>,
}

/// `[emulation]`: per-direction link emulation, in the simulator's link vocabulary
/// ([`LinkConfig`]: `rate`, `packet_rate`, `trace`, `delay`, `jitter`, `loss`, `drop`,
/// `linklayer`, `modem_buffer`).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmulationConfig {
    /// Toward side a.
    #[serde(default)]
    pub to_a: Option<LinkConfig>,
    /// Toward side b.
    #[serde(default)]
    pub to_b: Option<LinkConfig>,
}

/// `[capture]`: pcap files of what the box sends, one per direction.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct CaptureConfig {
    /// Directory for relative file names (default: the working directory).
    #[serde(default)]
    pub dir: Option<PathBuf>,
    /// File for packets sent toward a.
    #[serde(default)]
    pub to_a: Option<PathBuf>,
    /// File for packets sent toward b.
    #[serde(default)]
    pub to_b: Option<PathBuf>,
    /// Bytes kept per packet (default 65535).
    #[serde(default)]
    pub snaplen: Option<u32>,
}

impl CaptureConfig {
    /// The resolved path of one direction's file.
    pub fn path(&self, dir: Dir) -> Option<PathBuf> {
        let f = match dir {
            Dir::ToA => self.to_a.as_ref(),
            Dir::ToB => self.to_b.as_ref(),
        }?;
        Some(match &self.dir {
            Some(d) if f.is_relative() => d.join(f),
            _ => f.clone(),
        })
    }
}

/// `[stats]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct StatsConfig {
    /// Unix socket serving a JSON snapshot to each connection.
    #[serde(default)]
    pub socket: Option<PathBuf>,
    /// Prometheus text endpoint (`127.0.0.1:PORT` or `[::1]:PORT`; loopback only).
    #[serde(default)]
    pub prometheus: Option<String>,
    /// JSON snapshot written here at exit (and on SIGHUP).
    #[serde(default)]
    pub file: Option<PathBuf>,
    /// How often the served snapshot is refreshed (default 100 ms).
    #[serde(default)]
    pub interval: Option<asymlink_core::units::Span>,
    /// Each subscriber's counters in the snapshot (`subscribers.lines`; default off: with
    /// a thousand subscribers they cost milliseconds per snapshot).
    #[serde(default)]
    pub subscriber_lines: bool,
    /// Split every frame's added latency into where it went (`latency_breakdown` in the
    /// snapshot, [`crate::breakdown`]; default off: a few clock reads per wake-up and one
    /// per frame).
    #[serde(default)]
    pub latency_breakdown: bool,
}

/// `[privileges]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct PrivilegesConfig {
    /// The user to switch to once devices are open when started as root. `"root"` keeps
    /// root (not recommended). Default `nobody`.
    #[serde(default = "nobody")]
    pub user: String,
}

fn nobody() -> String {
    "nobody".into()
}

impl Default for PrivilegesConfig {
    fn default() -> Self {
        PrivilegesConfig { user: nobody() }
    }
}

/// How the box moves frames between its AF_PACKET sockets and its buffers.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum IoMode {
    /// `recvmmsg` / `sendmmsg`: one system call per batch, the kernel copies each frame.
    #[default]
    Socket,
    /// Memory-mapped receive and transmit rings (`PACKET_RX_RING` / `PACKET_TX_RING`):
    /// frames are read where the kernel wrote them and written where it sends them from.
    Mmap,
    /// Experimental: AF_XDP sockets (copy mode) fed by an XDP program that redirects
    /// every frame of receive queue 0; one worker; needs CAP_BPF and CAP_NET_ADMIN at
    /// start.
    Xdp,
}

/// `[process]`: scheduling of the forwarding thread.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ProcessConfig {
    /// Run the event loop under `SCHED_FIFO` at this priority (1..=99): it runs as soon
    /// as a frame arrives instead of queueing behind other processes (recommended on a
    /// shared machine; needs CAP_SYS_NICE, applied before privileges are dropped).
    #[serde(default)]
    pub realtime_priority: Option<u8>,
    /// Pin the event loop to this CPU; with several workers, a list of one CPU per
    /// worker.
    #[serde(default)]
    pub cpu: Option<Cpus>,
    /// Forwarding threads (default 1). With more than one, each worker has its own
    /// sockets and pipelines; the kernel spreads frames among them by the subscriber's
    /// address (`PACKET_FANOUT_CBPF`: the source address of frames from side a, the
    /// destination of frames from side b), so both directions of a subscriber meet on
    /// one worker and a connection is never reordered.
    #[serde(default)]
    pub workers: Option<usize>,
    /// Let packets leave up to this much before their exact departure time (default 0).
    /// The loop then runs on a clock this far ahead: rates stay exact over time, bursts
    /// grow by at most `horizon` worth of bytes, and a fast shaped link (1 Gbit/s: one
    /// packet every 12 µs) costs one wake-up per `horizon` instead of one per packet.
    /// 50 µs is a good value from about 100 Mbit/s up.
    #[serde(default)]
    pub horizon: Option<asymlink_core::units::Span>,
    /// How frames are read and written on AF_PACKET interfaces (default `socket`).
    #[serde(default)]
    pub io: IoMode,
    /// Before sleeping, keep checking the devices for this long (default 0: sleep at
    /// once). A frame arriving meanwhile is read without a wake-up (on a virtual machine
    /// the wake-up of an idle virtual CPU is the largest part of the added latency's
    /// tail), at the price of a CPU kept busy for up to this long after every wake-up.
    /// At most [`MAX_BUSY_POLL`].
    #[serde(default)]
    pub busy_poll: Option<asymlink_core::units::Span>,
    /// Send from a second thread per interface (default false): the event loop hands
    /// the frames that are due to the sender of their output interface (one FIFO each,
    /// so order is kept) and goes back to reading, instead of waiting for its send
    /// calls (on veth a send call runs the receiving host's stack). Not with
    /// `io = "xdp"`.
    #[serde(default)]
    pub tx_thread: bool,
}

/// The longest `[process] busy_poll`.
pub const MAX_BUSY_POLL: std::time::Duration = std::time::Duration::from_millis(1);

/// `[process] cpu`: one CPU, or a list of one CPU per worker.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(untagged)]
pub enum Cpus {
    /// One CPU.
    One(usize),
    /// One CPU per worker, in worker order.
    List(Vec<usize>),
}

impl Cpus {
    /// The CPUs as a list.
    pub fn list(&self) -> Vec<usize> {
        match self {
            Cpus::One(c) => vec![*c],
            Cpus::List(l) => l.clone(),
        }
    }
}

/// Most worker threads (the kernel's fanout group holds up to 256 members; more than
/// the CPUs of a box serves nothing).
pub const MAX_WORKERS: usize = 64;

impl ProcessConfig {
    /// The number of forwarding threads.
    pub fn workers(&self) -> usize {
        self.workers.unwrap_or(1)
    }
    /// The CPU of each worker (`None`: not pinned).
    pub fn worker_cpus(&self) -> Vec<Option<usize>> {
        match &self.cpu {
            None => vec![None; self.workers()],
            Some(c) => c.list().into_iter().map(Some).collect(),
        }
    }
}

/// What to do with frames that are not well-formed IP.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum MalformedPolicy {
    /// Forward them untouched through the pipeline (as opaque traffic), counted.
    #[default]
    Forward,
    /// Drop them on arrival, counted (reason `malformed`).
    Drop,
}

/// The whole file.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BoxConfig {
    /// Master seed (loss emulation, randomised disciplines). Default: from the OS.
    #[serde(default)]
    pub seed: Option<u64>,
    /// Malformed-frame policy.
    #[serde(default)]
    pub malformed: MalformedPolicy,
    /// Devices.
    pub interfaces: InterfacesConfig,
    /// Rewriters (core vocabulary).
    #[serde(default)]
    pub rewrite: Vec<RewriterConfig>,
    /// Pipeline toward b (core vocabulary).
    #[serde(default)]
    pub to_b: EgressConfig,
    /// Pipeline toward a (core vocabulary).
    #[serde(default)]
    pub to_a: EgressConfig,
    /// Link emulation.
    #[serde(default)]
    pub emulation: EmulationConfig,
    /// Captures.
    #[serde(default)]
    pub capture: CaptureConfig,
    /// Stats endpoints.
    #[serde(default)]
    pub stats: StatsConfig,
    /// Privilege drop.
    #[serde(default)]
    pub privileges: PrivilegesConfig,
    /// Scheduling.
    #[serde(default)]
    pub process: ProcessConfig,
    /// Subscriber lines, each with its own pipeline: the keys `subscribers`,
    /// `subscribers_file` (relative to this file), `max_subscribers` and
    /// `subscriber_idle_timeout`, checked by the core ([`SubscriberConfig::take`], as for
    /// a simulator middlebox).
    #[serde(skip)]
    pub subscribers: SubscriberConfig,
}

impl BoxConfig {
    /// Parse TOML text (key paths in errors) and load the emulation's traces (relative
    /// to the working directory). Does not validate; see [`BoxConfig::load`].
    pub fn parse(text: &str) -> Result<BoxConfig, ConfigError> {
        BoxConfig::parse_in(text, None)
    }

    /// [`BoxConfig::parse`] for the text of a file in directory `base`: trace files are
    /// relative to it.
    pub fn parse_in(text: &str, base: Option<&Path>) -> Result<BoxConfig, ConfigError> {
        let (table, subscribers) = BoxConfig::expand(text, base)?;
        let mut cfg: BoxConfig = match table {
            Some(t) => asymlink_core::config::from_toml_table(t, text)?,
            None => asymlink_core::config::from_toml(text)?,
        };
        cfg.subscribers = subscribers;
        for (d, e) in [
            ("to_a", &mut cfg.emulation.to_a),
            ("to_b", &mut cfg.emulation.to_b),
        ] {
            if let Some(t) = e.as_mut().and_then(|e| e.trace.as_mut()) {
                t.load(base, &mut |p| std::fs::read_to_string(p))
                    .map_err(|e| e.within(format!("emulation.{d}.trace")).with_line(text))?;
            }
        }
        Ok(cfg)
    }

    /// The file's table with its `line` expanded into `to_a` and `to_b` and its subscriber
    /// keys taken off (`None`: the file has neither), and its subscribers
    /// (`subscribers_file` relative to `base`).
    fn expand(
        text: &str,
        base: Option<&Path>,
    ) -> Result<(Option<toml::Table>, SubscriberConfig), ConfigError> {
        // A syntax error is reported (one line, with its line number) by the parse proper.
        let Ok(mut t) = text.parse::<toml::Table>() else {
            return Ok((None, SubscriberConfig::default()));
        };
        let line = asymlink_core::line::expand(&mut t)?;
        let subs = asymlink_core::subscribers::KEYS
            .iter()
            .any(|k| t.contains_key(*k));
        let s = SubscriberConfig::take(&mut t, base, &mut |p| std::fs::read_to_string(p))
            .map_err(|e| e.with_line(text))?;
        Ok(((line || subs).then_some(t), s))
    }

    /// The configuration as the box runs it (what `--print-effective` shows): the file
    /// with its `line` expanded, and every subscriber — those of `subscribers_file` too —
    /// with its `line` expanded, with `max_subscribers` and `subscriber_idle_timeout` in
    /// effect. Validates it first.
    pub fn effective(path: &Path) -> Result<String, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::value(e.to_string()))?;
        BoxConfig::effective_text(&text, path.parent())
    }

    /// [`BoxConfig::effective`] of the text of a file in directory `base`.
    fn effective_text(text: &str, base: Option<&Path>) -> Result<String, ConfigError> {
        let cfg = BoxConfig::from_text(text, base)?;
        let mut t = match BoxConfig::expand(text, base)?.0 {
            Some(t) => t,
            None => text
                .parse()
                .map_err(|e| ConfigError::new("", format!("TOML syntax: {e}")))?,
        };
        cfg.subscribers.write_effective(&mut t);
        toml::to_string(&t).map_err(|e| ConfigError::new("", e.to_string()))
    }

    /// Read, parse and validate a file. Errors name the key and its line.
    pub fn load(path: &Path) -> Result<BoxConfig, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::value(e.to_string()))?;
        BoxConfig::from_text(&text, path.parent())
    }

    /// Parse and validate the text of a file.
    fn from_text(text: &str, base: Option<&Path>) -> Result<BoxConfig, ConfigError> {
        let cfg = BoxConfig::parse_in(text, base)?;
        cfg.validate().map_err(|e| e.with_line(text))?;
        Ok(cfg)
    }

    /// The core middlebox configuration.
    pub fn middlebox(&self) -> MiddleboxConfig {
        #[allow(clippy::needless_update)] // keys the core adds later take their defaults
        MiddleboxConfig {
            rewrite: self.rewrite.clone(),
            to_b: self.to_b.clone(),
            to_a: self.to_a.clone(),
            ..MiddleboxConfig::default()
        }
    }

    /// The emulation of one direction.
    pub fn emulation(&self, dir: Dir) -> Option<&LinkConfig> {
        match dir {
            Dir::ToA => self.emulation.to_a.as_ref(),
            Dir::ToB => self.emulation.to_b.as_ref(),
        }
    }

    /// Link rates per direction ([to_b, to_a]) as the core wants them.
    pub fn rates(&self) -> [Option<Rate>; 2] {
        [
            self.emulation(Dir::ToB).and_then(|e| e.nominal_rate()),
            self.emulation(Dir::ToA).and_then(|e| e.nominal_rate()),
        ]
    }

    /// Check everything that can be checked without touching a device: the pipelines
    /// build, the emulation parameters make sense, names and addresses are usable.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let i = &self.interfaces;
        for (k, n) in [("interfaces.a", &i.a), ("interfaces.b", &i.b)] {
            if n.is_empty() || n.len() > 15 || n.contains('/') || n.contains(char::is_whitespace) {
                return Err(ConfigError::new(
                    k,
                    format!(
                        "'{n}' is not a valid interface name (1-15 characters, no '/' or spaces)"
                    ),
                ));
            }
        }
        if i.a == i.b {
            return Err(ConfigError::new(
                "interfaces.b",
                "must differ from interfaces.a",
            ));
        }
        if let Some(b) = i.batch {
            if !(1..=1024).contains(&b) {
                return Err(ConfigError::new("interfaces.batch", "must be 1..=1024"));
            }
        }
        Middlebox::<crate::packet::LivePacket>::new(&self.middlebox(), self.rates(), 0)?;
        for d in [Dir::ToB, Dir::ToA] {
            if let Some(e) = self.emulation(d) {
                let key = |k: &str| format!("emulation.{}.{k}", d.name());
                e.validate()
                    .map_err(|e| e.within(format!("emulation.{}", d.name())))?;
                for (set, k) in [
                    (e.queue.is_some(), "queue"),
                    (e.classifier.is_some(), "classifier"),
                ] {
                    if set {
                        return Err(ConfigError::new(
                            key(k),
                            format!(
                                "the box's discipline and classifier are set in [{0}] \
                                 (qdisc, classifier); the buffer between them and the line \
                                 is modem_buffer",
                                d.name()
                            ),
                        ));
                    }
                }
                for (j, r) in e.drop.iter().flatten().enumerate() {
                    if let asymlink_core::script::DropRule::Segment(s) = r {
                        if s.flow.is_some() {
                            return Err(ConfigError::new(
                                key(&format!("drop[{j}].flow")),
                                "the box knows no flow names; match the connection by                                  'port' (or neither: every connection)",
                            ));
                        }
                    }
                }
            }
        }
        if let Some(s) = self.capture.snaplen {
            if s < 64 {
                return Err(ConfigError::new("capture.snaplen", "must be at least 64"));
            }
        }
        if let Some(d) = &self.capture.dir {
            if !d.is_dir() {
                return Err(ConfigError::new(
                    "capture.dir",
                    format!("'{}' is not a directory", d.display()),
                ));
            }
        }
        for d in [Dir::ToB, Dir::ToA] {
            if let Some(p) = self.capture.path(d) {
                check_parent(&p, &format!("capture.{}", d.name()))?;
            }
        }
        if let (Some(a), Some(b)) = (self.capture.path(Dir::ToA), self.capture.path(Dir::ToB)) {
            if a == b {
                return Err(ConfigError::new(
                    "capture.to_b",
                    "must differ from capture.to_a",
                ));
            }
        }
        if let Some(p) = &self.stats.socket {
            check_parent(p, "stats.socket")?;
        }
        if let Some(p) = &self.stats.file {
            check_parent(p, "stats.file")?;
        }
        if let Some(a) = &self.stats.prometheus {
            parse_loopback(a).map_err(|e| e.within("stats.prometheus"))?;
        }
        if let Some(iv) = &self.stats.interval {
            if iv.0.is_zero() {
                return Err(ConfigError::new("stats.interval", "must be positive"));
            }
        }
        if let Some(p) = self.process.realtime_priority {
            if !(1..=99).contains(&p) {
                return Err(ConfigError::new(
                    "process.realtime_priority",
                    "must be 1..=99",
                ));
            }
        }
        if let Some(b) = &self.process.busy_poll {
            if b.0 > MAX_BUSY_POLL {
                return Err(ConfigError::new(
                    "process.busy_poll",
                    "must be at most 1ms (the loop spins this long after every wake-up)",
                ));
            }
        }
        if self.process.io == IoMode::Mmap && self.interfaces.kind != IfaceKind::Packet {
            return Err(ConfigError::new(
                "process.io",
                "\"mmap\" needs interfaces.kind = \"packet\" (TUN devices have no rings)",
            ));
        }
        if self.process.tx_thread && self.process.io == IoMode::Xdp {
            return Err(ConfigError::new(
                "process.tx_thread",
                "not available with io = \"xdp\" (use \"mmap\" or \"socket\")",
            ));
        }
        let n = self.process.workers();
        if self.process.io == IoMode::Xdp {
            if self.interfaces.kind != IfaceKind::Packet {
                return Err(ConfigError::new(
                    "process.io",
                    "\"xdp\" needs interfaces.kind = \"packet\" (XDP runs on network devices)",
                ));
            }
            if n != 1 {
                return Err(ConfigError::new(
                    "process.io",
                    "\"xdp\" runs one worker (its sockets serve receive queue 0 only)",
                ));
            }
        }
        if !(1..=MAX_WORKERS).contains(&n) {
            return Err(ConfigError::new(
                "process.workers",
                format!("must be 1..={MAX_WORKERS}"),
            ));
        }
        if let Some(c) = &self.process.cpu {
            let cpus = c.list();
            if cpus.len() != n {
                return Err(ConfigError::new(
                    "process.cpu",
                    format!(
                        "gives {} CPU(s) for {n} worker(s); list one CPU per worker \
                         (cpu = [{}])",
                        cpus.len(),
                        (0..n).map(|k| k.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            let mut seen = std::collections::BTreeSet::new();
            for c in &cpus {
                if *c >= 1024 {
                    return Err(ConfigError::new(
                        "process.cpu",
                        format!("CPU {c} is out of range (0..1024)"),
                    ));
                }
                if !seen.insert(*c) {
                    return Err(ConfigError::new(
                        "process.cpu",
                        format!("CPU {c} is given twice; each worker needs its own CPU"),
                    ));
                }
            }
        }
        if n > 1 {
            if self.interfaces.kind != IfaceKind::Packet {
                return Err(ConfigError::new(
                    "process.workers",
                    "several workers need interfaces.kind = \"packet\" (the kernel spreads \
                     AF_PACKET frames among them; a TUN device has one queue)",
                ));
            }
            if self.capture.to_a.is_some() || self.capture.to_b.is_some() {
                return Err(ConfigError::new(
                    "process.workers",
                    "captures need workers = 1 (each worker sends part of the traffic)",
                ));
            }
            for (dir, link) in [
                ("to_a", &self.emulation.to_a),
                ("to_b", &self.emulation.to_b),
            ] {
                let Some(link) = link else { continue };
                let key = if link.trace.is_some() {
                    "trace"
                } else if link.rate.is_some() {
                    "rate"
                } else if link.packet_rate.is_some() {
                    "packet_rate"
                } else {
                    continue;
                };
                return Err(ConfigError::new(
                    format!("emulation.{dir}.{key}"),
                    "an emulated line's capacity needs workers = 1 (each worker would \
                     emulate a whole line of its own)",
                ));
            }
        }
        if self.privileges.user.is_empty() {
            return Err(ConfigError::new("privileges.user", "must not be empty"));
        }
        if n > 1 {
            // The fanout program hashes a whole IPv4 address and the first 56 bits of an
            // IPv6 one: a subscriber must not be wider, or its traffic would be spread
            // over workers that each shape it to the whole rate.
            for (i, e) in self.subscribers.table.entries().iter().enumerate() {
                let (ok, need) = match e.prefix.addr {
                    std::net::IpAddr::V4(_) => (e.prefix.len == 32, "one IPv4 address (/32)"),
                    std::net::IpAddr::V6(_) => (e.prefix.len >= 56, "an IPv6 /56 or longer"),
                };
                if !ok {
                    return Err(ConfigError::new(
                        format!("{}.prefix", self.subscribers.key_of(i)),
                        format!(
                            "{}: with several workers a subscriber is {need}, what the \
                             workers' fanout hash keeps on one worker",
                            e.prefix
                        ),
                    ));
                }
            }
        }
        Ok(())
    }

    /// Whether a reload from `self` to `new` needs a restart (devices, captures,
    /// endpoints and privileges are fixed once open). Returns the first such key.
    pub fn restart_needed_for(&self, new: &BoxConfig) -> Option<&'static str> {
        if self.interfaces != new.interfaces {
            Some("interfaces")
        } else if self.capture != new.capture {
            Some("capture")
        } else if self.stats != new.stats {
            Some("stats")
        } else if self.privileges != new.privileges {
            Some("privileges")
        } else if self.process != new.process {
            Some("process")
        } else {
            None
        }
    }
}

fn check_parent(p: &Path, key: &str) -> Result<(), ConfigError> {
    let parent = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    if !parent.is_dir() {
        return Err(ConfigError::new(
            key,
            format!("directory '{}' does not exist", parent.display()),
        ));
    }
    Ok(())
}

/// Parse a Prometheus listen address; only loopback addresses are accepted.
pub fn parse_loopback(a: &str) -> Result<SocketAddr, ConfigError> {
    let sa: SocketAddr = a.parse().map_err(|_| {
        ConfigError::value(format!(
            "'{a}' is not an address:port (e.g. 127.0.0.1:9464)"
        ))
    })?;
    if !sa.ip().is_loopback() {
        return Err(ConfigError::value(format!(
            "'{a}' is not a loopback address; the endpoint is bound to localhost only \
             (use 127.0.0.1 or [::1])"
        )));
    }
    Ok(sa)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "[interfaces]\na = \"x0\"\nb = \"x1\"\n";

    fn err(extra: &str) -> ConfigError {
        let c = BoxConfig::parse(&format!("{MIN}{extra}"));
        match c {
            Err(e) => e,
            Ok(c) => c.validate().unwrap_err(),
        }
    }

    #[test]
    fn minimal_is_valid() {
        let c = BoxConfig::parse(MIN).unwrap();
        c.validate().unwrap();
        assert_eq!(c.interfaces.kind, IfaceKind::Packet);
        assert_eq!(c.privileges.user, "nobody");
    }

    #[test]
    fn errors_name_the_key() {
        let e = BoxConfig::parse(&format!("bogus = 1\n{MIN}")).unwrap_err();
        assert!(e.msg.contains("bogus"), "{e}");
        assert_eq!(err("bogus = 1").path, "interfaces.bogus");
        assert_eq!(
            err("[stats]\nprometheus = \"0.0.0.0:9\"").path,
            "stats.prometheus"
        );
        assert_eq!(
            err("[stats]\nprometheus = \"10.0.0.1:9\"").path,
            "stats.prometheus"
        );
        let e = err("[to_b]\nqdisc = { kind = \"prio\", bands = [{ classes = [\"nope\"] }] }");
        assert!(e.path.starts_with("to_b."), "{e}");
        let e = err("[to_b]\nqdisc = { kind = \"fifo\", limt = \"1p\" }");
        assert!(e.to_string().contains("limt"), "{e}");
        assert_eq!(
            err("[emulation.to_a]\nloss = 1.5").path,
            "emulation.to_a.loss"
        );
        assert_eq!(
            err("[emulation.to_a]\nrate = \"0bit\"").path,
            "emulation.to_a.rate"
        );
        assert_eq!(
            err("[emulation.to_b]\ndrop = [\"ack:2\", { flow = \"dl\", seq = 1 }]").path,
            "emulation.to_b.drop[1].flow"
        );
        assert_eq!(
            err("[emulation.to_b]\ndrop = [{ seq = 1, tx = 0 }]").path,
            "emulation.to_b.drop[0].tx"
        );
        let e = err("[emulation.to_a]\nrate = \"8mbps\"");
        assert!(e.path.contains("emulation.to_a.rate"), "{e}");
        assert_eq!(
            err("[capture]\ndir = \"/nonexistent-al\"\nto_a=\"x\"").path,
            "capture.dir"
        );
        assert_eq!(
            err("[stats]\nsocket = \"/nonexistent-al/s\"").path,
            "stats.socket"
        );
        let e = BoxConfig::parse("[interfaces]\na = \"x\"\nb = \"x\"").unwrap();
        assert_eq!(e.validate().unwrap_err().path, "interfaces.b");
        let e = BoxConfig::parse("[interfaces]\na = \"much-too-long-name\"\nb = \"x\"").unwrap();
        assert_eq!(e.validate().unwrap_err().path, "interfaces.a");
    }

    #[test]
    fn the_receiver_window_rewriter_needs_no_live_code() {
        // The box builds its pipeline from the core's `RewriterConfig`: the receiver
        // policy's rewriter is configured exactly as in a simulated middlebox.
        let rw = "rewrite = [{ kind = \"rwnd\", receivers = \"a\", \
                  policy = { link_rate = \"8Mbit\", qlength_loss = \"6p\" } }]\n";
        let c = BoxConfig::parse(&format!("{rw}{MIN}")).unwrap();
        c.validate().unwrap();
        let bad = "rewrite = [{ kind = \"rwnd\", receivers = \"a\", \
                   policy = { qlength_delay = \"0s\" } }]\n";
        let e = BoxConfig::parse(&format!("{bad}{MIN}"))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("qlength_delay"), "{e}");
    }

    #[test]
    fn the_aggregate_shaper_needs_no_live_code() {
        // The egress aggregate shaper is a core discipline: the box builds it from the same
        // `QdiscConfig` as a simulated middlebox, and its errors name the key.
        let q = "[to_a.qdisc]\nkind = \"aggregate\"\n[[to_a.qdisc.policies]]\n\
                 filter = { src = \"198.18.0.2\" }\n\
                 profile = { depth = \"15KB\", rate = \"6Mbit\" }\n\
                 action = { kind = \"shape\" }\nscheme = { kind = \"logical\" }\n";
        let c = BoxConfig::parse(&format!("{MIN}{q}")).unwrap();
        c.validate().unwrap();
        let e = BoxConfig::parse(&format!("{MIN}{}", q.replace("15KB", "100B")))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("profile.depth"), "{e}");
    }

    #[test]
    fn the_aqm_disciplines_need_no_live_code() {
        // CoDel is a core discipline: the box builds it from the same `QdiscConfig` as a
        // simulated link or middlebox, and its errors name the key.
        let q =
            "[to_a.qdisc]\nkind = \"codel\"\ntarget = \"5ms\"\ninterval = \"100ms\"\necn = true\n";
        let c = BoxConfig::parse(&format!("{MIN}{q}")).unwrap();
        c.validate().unwrap();
        let e = BoxConfig::parse(&format!("{MIN}{}", q.replace("100ms", "1ms")))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().contains("codel.interval"), "{e}");
        for q in [
            "[to_a.qdisc]\nkind = \"fq_codel\"\nflows = 256\n",
            "[to_b.qdisc]\nkind = \"host_fq_codel\"\nhosts = \"dst\"\n",
            "[to_a.qdisc]\nkind = \"fq_codel\"\naqm = \"cobalt\"\n",
            "[to_b.qdisc]\nkind = \"host_fq_codel\"\nhosts = \"dst\"\naqm = \"cobalt\"\n",
        ] {
            BoxConfig::parse(&format!("{MIN}{q}"))
                .unwrap()
                .validate()
                .unwrap();
        }
        let e = BoxConfig::parse(&format!(
            "{MIN}[to_b.qdisc]\nkind = \"host_fq_codel\"\nflows = 12\n"
        ))
        .unwrap()
        .validate()
        .unwrap_err();
        assert!(e.to_string().contains("host_fq_codel.flows"), "{e}");
        // A bad per-flow AQM is one line naming the key.
        let e = BoxConfig::parse(&format!(
            "{MIN}[to_b.qdisc]\nkind = \"fq_codel\"\naqm = \"blue\"\n"
        ))
        .and_then(|c| c.validate())
        .unwrap_err()
        .to_string();
        assert!(e.contains("to_b.qdisc.aqm"), "{e}");
        assert!(!e.contains('\n'), "{e}");
    }

    #[test]
    fn one_line_configures_both_directions() {
        let c = BoxConfig::parse(&format!(
            "line = {{ down = \"8Mbit\", up = \"512kbit\", linklayer = \"llc_snap_routed\" }}\n{MIN}"
        ))
        .unwrap();
        c.validate().unwrap();
        assert!(c.to_b.classifier.is_some(), "uplink classes");
        let mb = Middlebox::<crate::packet::LivePacket>::new(&c.middlebox(), c.rates(), 0).unwrap();
        assert_eq!(mb.egress(Dir::ToB).qdisc().kind(), "htb");
        assert_eq!(mb.egress(Dir::ToA).qdisc().kind(), "htb");
        // An explicit part replaces the line's; an error in it is named by its key.
        let c = BoxConfig::parse(&format!(
            "line = {{ down = \"8Mbit\", up = \"512kbit\" }}\n\
             [to_b]\nqdisc = {{ kind = \"fifo\", limit = \"50p\" }}\n{MIN}"
        ))
        .unwrap();
        c.validate().unwrap();
        assert!(c.to_b.classifier.is_some() && c.to_a.classifier.is_none());
        let e = BoxConfig::parse(&format!(
            "line = {{ down = \"8Mbit\", up = \"512kbit\" }}\n\
             [to_b]\nqdisc = {{ kind = \"fifo\", limit = \"0p\" }}\n{MIN}"
        ))
        .unwrap()
        .validate()
        .unwrap_err();
        assert!(e.to_string().starts_with("to_b.fifo.limit"), "{e}");
        let e = BoxConfig::parse(&format!("line = {{ down = \"8Mbit\" }}\n{MIN}")).unwrap_err();
        assert!(
            e.to_string().starts_with("line:") && e.msg.contains("up"),
            "{e}"
        );
    }

    #[test]
    fn io_mode() {
        assert_eq!(BoxConfig::parse(MIN).unwrap().process.io, IoMode::Socket);
        let c = BoxConfig::parse(&format!("{MIN}[process]\nio = \"mmap\"\n")).unwrap();
        c.validate().unwrap();
        assert_eq!(c.process.io, IoMode::Mmap);
        let x = BoxConfig::parse(&format!("{MIN}[process]\nio = \"xdp\"\n")).unwrap();
        x.validate().unwrap();
        assert_eq!(x.process.io, IoMode::Xdp);
        let e = BoxConfig::parse(&format!("{MIN}[process]\nio = \"xdp\"\nworkers = 2\n"))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(
            e.to_string().starts_with("process.io") && e.msg.contains("one worker"),
            "{e}"
        );
        let e = BoxConfig::parse(&format!("{MIN}[process]\nio = \"ring\"\n")).unwrap_err();
        assert!(e.to_string().contains("process.io"), "{e}");
        let tun = MIN.replace("[interfaces]", "[interfaces]\nkind = \"tun\"");
        let e = BoxConfig::parse(&format!("{tun}[process]\nio = \"mmap\"\n"))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().starts_with("process.io"), "{e}");
        let e = BoxConfig::parse(&format!("{tun}[process]\nio = \"xdp\"\n"))
            .unwrap()
            .validate()
            .unwrap_err();
        assert!(e.to_string().starts_with("process.io"), "{e}");
        // A restart is needed to change it.
        let mut d = c.clone();
        d.process.io = IoMode::Socket;
        assert_eq!(c.restart_needed_for(&d), Some("process"));
    }

    #[test]
    fn workers_and_their_cpus() {
        let c = BoxConfig::parse(MIN).unwrap();
        assert_eq!(c.process.workers(), 1);
        assert_eq!(c.process.worker_cpus(), [None]);
        let ok = |p: &str| {
            let c = BoxConfig::parse(&format!("{MIN}[process]\n{p}\n")).unwrap();
            c.validate().unwrap();
            c
        };
        assert_eq!(ok("cpu = 1").process.worker_cpus(), [Some(1)]);
        let c = ok("workers = 2\ncpu = [1, 0]\nio = \"mmap\"");
        assert_eq!(c.process.workers(), 2);
        assert_eq!(c.process.worker_cpus(), [Some(1), Some(0)]);
        assert_eq!(ok("workers = 3").process.worker_cpus(), [None, None, None]);
        let err = |p: &str| {
            BoxConfig::parse(&format!("{MIN}[process]\n{p}\n"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string()
        };
        let e = err("workers = 2\ncpu = 1");
        assert!(
            e.starts_with("process.cpu")
                && e.contains("1 CPU(s) for 2 worker(s)")
                && e.contains("cpu = [0, 1]"),
            "{e}"
        );
        assert!(err("workers = 2\ncpu = [1, 1]").contains("CPU 1 is given twice"));
        assert!(err("workers = 0").starts_with("process.workers: must be 1..=64"));
        assert!(err("workers = 65").starts_with("process.workers"));
        let tun = MIN.replace("[interfaces]", "[interfaces]\nkind = \"tun\"");
        let e = BoxConfig::parse(&format!("{tun}[process]\nworkers = 2\n"))
            .unwrap()
            .validate()
            .unwrap_err()
            .to_string();
        assert!(
            e.starts_with("process.workers") && e.contains("packet"),
            "{e}"
        );
        let e = BoxConfig::parse(&format!(
            "{MIN}[capture]\nto_a = \"/tmp/x.pcap\"\n[process]\nworkers = 2\n"
        ))
        .unwrap()
        .validate()
        .unwrap_err()
        .to_string();
        assert!(e.contains("captures need workers = 1"), "{e}");
        // A line's capacity is one; a delay alone is the same on every worker.
        let two = "[process]\nworkers = 2\n";
        for (body, key) in [
            (
                "[emulation.to_b]\nrate = \"1Mbit\"\n",
                "emulation.to_b.rate",
            ),
            (
                "[emulation.to_a]\ntrace = \"builtin:dsl\"\n",
                "emulation.to_a.trace",
            ),
            (
                "[emulation.to_a]\npacket_rate = 100\n",
                "emulation.to_a.packet_rate",
            ),
        ] {
            let e = BoxConfig::parse(&format!("{MIN}{body}{two}"))
                .unwrap()
                .validate()
                .unwrap_err()
                .to_string();
            assert!(e.starts_with(key) && e.contains("workers = 1"), "{e}");
        }
        let delay_only = format!("{MIN}[emulation.to_b]\ndelay = \"10ms\"\n{two}");
        BoxConfig::parse(&delay_only).unwrap().validate().unwrap();
        let e = BoxConfig::parse(&format!("{MIN}[process]\ncpu = \"one\"\n")).unwrap_err();
        assert!(e.to_string().contains("process.cpu"), "{e}");
    }

    #[test]
    fn tx_thread_key() {
        assert!(!BoxConfig::parse(MIN).unwrap().process.tx_thread);
        for io in ["socket", "mmap"] {
            let c = BoxConfig::parse(&format!(
                "{MIN}[process]\ntx_thread = true\nio = \"{io}\"\n"
            ))
            .unwrap();
            c.validate().unwrap();
            assert!(c.process.tx_thread);
        }
        for (body, what) in [
            ("[process]\ntx_thread = \"yes\"\n", ""),
            ("[process]\ntx_thread = 1\n", ""),
            (
                "[process]\ntx_thread = true\nio = \"xdp\"\n",
                "not available with io = \"xdp\"",
            ),
        ] {
            let e = match BoxConfig::parse(&format!("{MIN}{body}")) {
                Ok(c) => c.validate().unwrap_err().to_string(),
                Err(e) => e.to_string(),
            };
            assert!(
                e.contains("process.tx_thread") && e.contains(what),
                "{body}: {e}"
            );
            assert!(!e.contains('\n'), "{body}: {e}");
        }
    }

    #[test]
    fn busy_poll_and_latency_breakdown() {
        let c = BoxConfig::parse(MIN).unwrap();
        assert_eq!(c.process.busy_poll, None);
        assert!(!c.stats.latency_breakdown);
        let c = BoxConfig::parse(&format!(
            "{MIN}[process]\nbusy_poll = \"50us\"\n[stats]\nlatency_breakdown = true\n"
        ))
        .unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.process.busy_poll.map(|s| s.0),
            Some(std::time::Duration::from_micros(50))
        );
        assert!(c.stats.latency_breakdown);
        let one_ms = format!("{MIN}[process]\nbusy_poll = \"1ms\"\n");
        BoxConfig::parse(&one_ms).unwrap().validate().unwrap();
        // Errors: one line, naming the key.
        for (body, what) in [
            ("[process]\nbusy_poll = \"2ms\"\n", "at most 1ms"),
            ("[process]\nbusy_poll = \"fast\"\n", ""),
            ("[process]\nbusy_poll = 50\n", ""),
            ("[stats]\nlatency_breakdown = \"yes\"\n", ""),
        ] {
            let e = err(body).to_string();
            let key = if body.contains("busy_poll") {
                "process.busy_poll"
            } else {
                "stats.latency_breakdown"
            };
            assert!(e.contains(key) && e.contains(what), "{body}: {e}");
            assert!(!e.contains('\n'), "{body}: {e}");
        }
        // A running box keeps its [process] and [stats]: a reload changing them is refused.
        let d = BoxConfig::parse(&format!("{MIN}[process]\nbusy_poll = \"20us\"\n")).unwrap();
        let c = BoxConfig::parse(MIN).unwrap();
        assert_eq!(c.restart_needed_for(&d), Some("process"));
    }

    #[test]
    fn subscribers_inline_and_from_a_file() {
        let dir = std::env::temp_dir().join(format!("al-subs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("subs.toml"),
            "[[subscribers]]\nprefix = \"198.18.0.13\"\n\
             line = { down = \"8Mbit\", up = \"1Mbit\" }\n\
             [[subscribers]]\nprefix = \"2001:db8:0:100::/56\"\n",
        )
        .unwrap();
        let text = format!(
            "max_subscribers = 2\nsubscribers_file = \"subs.toml\"\n{MIN}\
             [[subscribers]]\nprefix = \"198.18.0.12\"\n\
             to_b = {{ qdisc = {{ kind = \"tbf\", rate = \"4Mbit\" }} }}\n"
        );
        let c = BoxConfig::from_text(&text, Some(&dir)).unwrap();
        let t = &c.subscribers.table;
        assert_eq!(t.len(), 3);
        assert_eq!(t.lookup("198.18.0.12".parse().unwrap()), Some(0));
        assert_eq!(t.lookup("198.18.0.13".parse().unwrap()), Some(1));
        assert_eq!(t.lookup("2001:db8:0:1aa::1".parse().unwrap()), Some(2));
        assert_eq!(c.subscribers.max_subscribers(), 2);
        // Errors name the key, in the file or in the included one.
        let e = BoxConfig::from_text(
            &format!(
                "{MIN}[[subscribers]]\nprefix = \"198.18.0.1\"\n[[subscribers]]\nprefix = \"x\"\n"
            ),
            Some(&dir),
        )
        .unwrap_err();
        assert_eq!(e.path, "subscribers[1].prefix", "{e}");
        std::fs::write(
            dir.join("bad.toml"),
            "[[subscribers]]\nprefix = \"198.18.0.1\"\nto_a = 3\n",
        )
        .unwrap();
        let e = BoxConfig::from_text(
            &format!("subscribers_file = \"bad.toml\"\n{MIN}"),
            Some(&dir),
        )
        .unwrap_err();
        assert!(
            e.path.starts_with("subscribers_file.subscribers[0].to_a"),
            "{e}"
        );
        let e = BoxConfig::from_text(
            &format!("subscribers_file = \"none.toml\"\n{MIN}"),
            Some(&dir),
        )
        .unwrap_err();
        assert_eq!(e.path, "subscribers_file", "{e}");
        let e = BoxConfig::parse(&format!("max_subscribers = 0\n{MIN}")).unwrap_err();
        assert_eq!(e.path, "max_subscribers", "{e}");
        // Several workers: a subscriber is what the fanout hash keeps on one worker.
        let e = BoxConfig::from_text(
            &format!("subscribers_file = \"subs.toml\"\n{MIN}[process]\nworkers = 2\n"),
            Some(&dir),
        );
        assert!(e.is_ok(), "{e:?}");
        let e = BoxConfig::from_text(
            &format!("{MIN}[[subscribers]]\nprefix = \"198.18.0.0/30\"\n[process]\nworkers = 2\n"),
            Some(&dir),
        )
        .unwrap_err();
        assert_eq!(e.path, "subscribers[0].prefix", "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// `--print-effective` lists every subscriber, the included file's too, with its
    /// `line` expanded; what it prints is a configuration the box runs alike.
    #[test]
    fn the_effective_configuration_expands_subscribers() {
        let dir = std::env::temp_dir().join(format!("al-eff-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("subs.toml"),
            "[[subscribers]]\nprefix = \"198.18.0.13\"\n\
             line = { down = \"8Mbit\", up = \"1Mbit\", linklayer = \"llc_snap_routed\" }\n",
        )
        .unwrap();
        std::fs::write(
            dir.join("box.toml"),
            format!(
                "subscribers_file = \"subs.toml\"\n{MIN}\
                 [[subscribers]]\nprefix = \"198.18.0.12\"\n\
                 to_b = {{ qdisc = {{ kind = \"tbf\", rate = \"4Mbit\" }} }}\n"
            ),
        )
        .unwrap();
        let text = BoxConfig::effective(&dir.join("box.toml")).unwrap();
        let orig = BoxConfig::load(&dir.join("box.toml")).unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        let t: toml::Table = text.parse().unwrap();
        assert!(!t.contains_key("subscribers_file"), "{text}");
        assert_eq!(t["max_subscribers"].as_integer(), Some(2), "{text}");
        assert_eq!(t["subscriber_idle_timeout"].as_str(), Some("60s"));
        let subs = t["subscribers"].as_array().unwrap();
        assert_eq!(subs[0]["prefix"].as_str(), Some("198.18.0.12/32"));
        assert_eq!(subs[0]["to_b"]["qdisc"]["kind"].as_str(), Some("tbf"));
        let line = subs[1].as_table().unwrap();
        assert_eq!(line["prefix"].as_str(), Some("198.18.0.13/32"));
        assert!(!line.contains_key("line"), "{text}");
        // At the provider's end the downlink leaves toward the line: HTB with the line's
        // interactive and bulk classes at 95 % of 8 Mbit/s.
        let down = &line["to_a"]["qdisc"];
        assert_eq!(down["kind"].as_str(), Some("htb"), "{text}");
        assert_eq!(
            down["classes"][0]["rate"].as_str(),
            Some("7600000bit"),
            "{text}"
        );
        assert_eq!(
            line["to_b"]["qdisc"]["ingress"].as_bool(),
            Some(true),
            "{text}"
        );
        // It runs alike: the same subscribers, the same pipelines.
        let again = BoxConfig::from_text(&text, None).unwrap();
        assert_eq!(again.subscribers.inline, 2, "no file any more");
        let (a, o) = (
            again.subscribers.table.entries(),
            orig.subscribers.table.entries(),
        );
        assert_eq!(a.len(), o.len());
        for (a, o) in a.iter().zip(o) {
            assert_eq!((a.prefix, a.plan.expanded()), (o.prefix, o.plan.expanded()));
        }
    }

    #[test]
    fn reload_restart_keys() {
        let a = BoxConfig::parse(MIN).unwrap();
        let mut b = a.clone();
        assert_eq!(a.restart_needed_for(&b), None);
        b.interfaces.a = "y".into();
        assert_eq!(a.restart_needed_for(&b), Some("interfaces"));
    }
}
