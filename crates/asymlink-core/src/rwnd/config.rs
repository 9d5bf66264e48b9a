//! The policy's configuration (`rwnd_policy = { ... }` on a simulated host, `{ kind = "rwnd",
//! ... }` as a middlebox rewriter) and its validation into immutable [`Params`].
//!
//! Every key has the paper's default; a scenario usually gives only the link rate and the
//! access queue:
//!
//! ```toml
//! rwnd_policy = { link_rate = "28.8kbit", access_queue = "20p" }
//! ```

use crate::config::ConfigError;
use crate::time::{dur_ns, Duration};
use crate::units::{Bytes, Limit, Rate, Span};
use serde::Deserialize;

/// The four priority classes of §IV-A, highest priority first.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FlowClass {
    /// Latency-sensitive, little data (telnet, chat); unknown flows start here.
    Interactive,
    /// At least `rcv_short` received since the flow last sent data (a web object).
    ShortBulk,
    /// At least `rcv_long` received since the flow last sent data (an ftp download).
    LongBulk,
    /// Nothing sent or received for `idle`.
    Idle,
}

impl FlowClass {
    /// All classes, in priority order (the index of [`FlowClass::index`]).
    pub const ALL: [FlowClass; 4] = [
        FlowClass::Interactive,
        FlowClass::ShortBulk,
        FlowClass::LongBulk,
        FlowClass::Idle,
    ];
    /// 0..4, in priority order.
    pub const fn index(self) -> usize {
        match self {
            FlowClass::Interactive => 0,
            FlowClass::ShortBulk => 1,
            FlowClass::LongBulk => 2,
            FlowClass::Idle => 3,
        }
    }
    /// The name as written in configuration.
    pub const fn name(self) -> &'static str {
        match self {
            FlowClass::Interactive => "interactive",
            FlowClass::ShortBulk => "short_bulk",
            FlowClass::LongBulk => "long_bulk",
            FlowClass::Idle => "idle",
        }
    }
}

/// First guesses from well-known ports (§IV-A: "initially classified by port number and
/// then by their observed behavior"). A port listed here is matched against the sender's
/// port first, then the receiver's.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PortGuesses {
    /// Ports of interactive applications (telnet 23, ssh 22, rlogin 513).
    #[serde(default = "default_interactive_ports")]
    pub interactive: Vec<u16>,
    /// Ports of short transfers (none by default: web connections prove themselves).
    #[serde(default)]
    pub short_bulk: Vec<u16>,
    /// Ports of long transfers (ftp-data 20).
    #[serde(default = "default_long_ports")]
    pub long_bulk: Vec<u16>,
}

fn default_interactive_ports() -> Vec<u16> {
    vec![22, 23, 513]
}
fn default_long_ports() -> Vec<u16> {
    vec![20]
}

impl Default for PortGuesses {
    fn default() -> Self {
        PortGuesses {
            interactive: default_interactive_ports(),
            short_bulk: Vec::new(),
            long_bulk: default_long_ports(),
        }
    }
}

impl PortGuesses {
    /// The class guessed for a connection between `sender_port` (the data source) and
    /// `receiver_port`, if either is listed (the sender's port wins).
    pub fn guess(&self, sender_port: u16, receiver_port: u16) -> Option<FlowClass> {
        let lists = [
            (&self.interactive, FlowClass::Interactive),
            (&self.short_bulk, FlowClass::ShortBulk),
            (&self.long_bulk, FlowClass::LongBulk),
        ];
        for port in [sender_port, receiver_port] {
            for (list, class) in lists {
                if list.contains(&port) {
                    return Some(class);
                }
            }
        }
        None
    }
}

/// The policy's configuration, as written (all keys optional).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RwndConfig {
    /// `Xput_link`, the access link's rate. Absent: estimated from the arrival rate of
    /// packet trains (flows are not limited until the first estimate exists).
    #[serde(default)]
    pub link_rate: Option<Rate>,
    /// `QLength_Delay` as time of link: the queueing delay the user accepts (0.4 s).
    #[serde(default = "default_qlength_delay")]
    pub qlength_delay: Span,
    /// `QLength_Loss`: a limit (`"6p"`, `"3KB"`). Absent: half of `access_queue` if
    /// given, else `QLength_Delay` stands in for it.
    #[serde(default)]
    pub qlength_loss: Option<Limit>,
    /// The access link's queue (its buffer), for `QLength_Loss` = half of it.
    #[serde(default)]
    pub access_queue: Option<Limit>,
    /// `Rcv_short`: received since the last send that makes a flow short bulk (2 KB).
    #[serde(default = "default_rcv_short")]
    pub rcv_short: Bytes,
    /// `Rcv_long`: received since the last send that makes a flow long bulk (8 KB).
    #[serde(default = "default_rcv_long")]
    pub rcv_long: Bytes,
    /// A flow that neither sent nor received data for this long is idle (30 s).
    #[serde(default = "default_idle")]
    pub idle: Span,
    /// The allocation a new flow starts from, growing by one packet per packet received
    /// (4 packets; never above its target).
    #[serde(default = "default_initial_window")]
    pub initial_window: Limit,
    /// Port-based first guesses.
    #[serde(default)]
    pub ports: PortGuesses,
    /// Middlebox only: at most this many flows tracked (the least recently active is
    /// evicted first; 4096).
    #[serde(default = "default_max_flows")]
    pub max_flows: u32,
    /// Middlebox only: a tracked flow with no packet for this long is forgotten (300 s).
    #[serde(default = "default_flow_timeout")]
    pub flow_timeout: Span,
}

fn default_qlength_delay() -> Span {
    Span(Duration::from_millis(400))
}
fn default_rcv_short() -> Bytes {
    Bytes(2_000)
}
fn default_rcv_long() -> Bytes {
    Bytes(8_000)
}
fn default_idle() -> Span {
    Span(Duration::from_secs(30))
}
fn default_initial_window() -> Limit {
    Limit::Packets(4)
}
fn default_max_flows() -> u32 {
    4096
}
fn default_flow_timeout() -> Span {
    Span(Duration::from_secs(300))
}

impl Default for RwndConfig {
    fn default() -> Self {
        RwndConfig {
            link_rate: None,
            qlength_delay: default_qlength_delay(),
            qlength_loss: None,
            access_queue: None,
            rcv_short: default_rcv_short(),
            rcv_long: default_rcv_long(),
            idle: default_idle(),
            initial_window: default_initial_window(),
            ports: PortGuesses::default(),
            max_flows: default_max_flows(),
            flow_timeout: default_flow_timeout(),
        }
    }
}

/// A size in packets of the flow's MSS or in bytes, resolved per flow.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Amount {
    /// Packets of the flow's MSS.
    Packets(u32),
    /// Bytes.
    Bytes(u64),
}

impl Amount {
    /// In bytes, for a flow with this MSS.
    pub fn bytes(self, mss: u32) -> u64 {
        match self {
            Amount::Packets(p) => p as u64 * mss as u64,
            Amount::Bytes(b) => b,
        }
    }
    fn halved(self) -> Amount {
        match self {
            Amount::Packets(p) => Amount::Packets(p / 2),
            Amount::Bytes(b) => Amount::Bytes(b / 2),
        }
    }
}

impl From<Limit> for Amount {
    fn from(l: Limit) -> Amount {
        match l {
            Limit::Packets(p) => Amount::Packets(p),
            Limit::Bytes(b) => Amount::Bytes(b),
        }
    }
}

/// The validated, immutable parameters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Params {
    /// Link rate, if given.
    pub link_rate: Option<Rate>,
    /// `QLength_Delay` as a time.
    pub qlength_delay: Duration,
    /// `QLength_Loss` (`None`: `QLength_Delay` stands in for it).
    pub qlength_loss: Option<Amount>,
    /// `Rcv_short` in bytes.
    pub rcv_short: u64,
    /// `Rcv_long` in bytes.
    pub rcv_long: u64,
    /// Idle threshold.
    pub idle: Duration,
    /// A new flow's starting allocation.
    pub initial_window: Amount,
    /// Port guesses.
    pub ports: PortGuesses,
    /// Middlebox flow table bound.
    pub max_flows: usize,
    /// Middlebox flow expiry.
    pub flow_timeout: Duration,
}

impl RwndConfig {
    /// Check the configuration. Errors name the key.
    pub fn params(&self) -> Result<Params, ConfigError> {
        if self.link_rate.is_some_and(|r| r.0 == 0) {
            return Err(ConfigError::new("link_rate", "must be positive"));
        }
        if dur_ns(self.qlength_delay.0) == 0 {
            return Err(ConfigError::new(
                "qlength_delay",
                "must be positive (it is the queueing delay the user accepts)",
            ));
        }
        let nonzero = |l: Limit| match l {
            Limit::Packets(p) => p > 0,
            Limit::Bytes(b) => b > 0,
        };
        let qlength_loss = match (self.qlength_loss, self.access_queue) {
            (Some(l), _) => {
                if !nonzero(l) {
                    return Err(ConfigError::new("qlength_loss", "must be positive"));
                }
                Some(l.into())
            }
            (None, None) => None,
            (None, Some(q)) => {
                let half = Amount::from(q).halved();
                if half.bytes(1) == 0 {
                    return Err(ConfigError::new(
                        "access_queue",
                        "too small: QLength_Loss is half of it, which must be positive",
                    ));
                }
                Some(half)
            }
        };
        if self.rcv_short.0 == 0 || self.rcv_long.0 <= self.rcv_short.0 {
            return Err(ConfigError::new(
                "rcv_long",
                format!(
                    "need 0 < rcv_short < rcv_long (got {} and {})",
                    self.rcv_short, self.rcv_long
                ),
            ));
        }
        if dur_ns(self.idle.0) == 0 {
            return Err(ConfigError::new("idle", "must be positive"));
        }
        if !nonzero(self.initial_window) {
            return Err(ConfigError::new("initial_window", "must be positive"));
        }
        if self.max_flows == 0 {
            return Err(ConfigError::new("max_flows", "must be positive"));
        }
        Ok(Params {
            link_rate: self.link_rate,
            qlength_delay: self.qlength_delay.0,
            qlength_loss,
            rcv_short: self.rcv_short.0,
            rcv_long: self.rcv_long.0,
            idle: self.idle.0,
            initial_window: self.initial_window.into(),
            ports: self.ports.clone(),
            max_flows: self.max_flows as usize,
            flow_timeout: self.flow_timeout.0,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> RwndConfig {
        toml::from_str(s).unwrap()
    }

    #[test]
    fn defaults_are_the_papers() {
        let p = RwndConfig::default().params().unwrap();
        assert_eq!(p.qlength_delay, Duration::from_millis(400));
        assert_eq!((p.rcv_short, p.rcv_long), (2_000, 8_000));
        assert_eq!(p.idle, Duration::from_secs(30));
        assert_eq!(p.qlength_loss, None);
        assert_eq!(p.ports.guess(20, 40_000), Some(FlowClass::LongBulk));
        assert_eq!(p.ports.guess(40_000, 23), Some(FlowClass::Interactive));
        assert_eq!(p.ports.guess(80, 40_000), None);
    }

    #[test]
    fn qlength_loss_is_half_the_access_queue_unless_given() {
        let p = parse(r#"access_queue = "20p""#).params().unwrap();
        assert_eq!(p.qlength_loss, Some(Amount::Packets(10)));
        let p = parse(
            r#"access_queue = "20p"
               qlength_loss = "6p""#,
        )
        .params()
        .unwrap();
        assert_eq!(p.qlength_loss, Some(Amount::Packets(6)));
        let p = parse(r#"qlength_loss = "3KB""#).params().unwrap();
        assert_eq!(p.qlength_loss, Some(Amount::Bytes(3_000)));
    }

    #[test]
    fn errors_name_the_key() {
        let e = parse(r#"qlength_delay = "0s""#).params().unwrap_err();
        assert_eq!(e.path, "qlength_delay");
        let e = parse(r#"rcv_short = "9KB""#).params().unwrap_err();
        assert_eq!(e.path, "rcv_long");
        let e = parse(r#"access_queue = "1p""#).params().unwrap_err();
        assert_eq!(e.path, "access_queue");
        let e = parse(r#"link_rate = "0bit""#).params().unwrap_err();
        assert_eq!(e.path, "link_rate");
        assert!(toml::from_str::<RwndConfig>("qlength_loss = 6").is_err());
        assert!(toml::from_str::<RwndConfig>("qlength_los = \"6p\"").is_err());
    }
}
