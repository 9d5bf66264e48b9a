//! The ACK filter's configuration (`{ kind = "ack_filter", policy = "...", ... }`) and its
//! validation into immutable [`Params`].

use crate::qdisc::ConfigError;
use crate::time::{dur_ns, Duration};
use crate::units::{Bytes, Limit, Rate, Span};
use core::fmt;
use serde::de::{self, Deserializer, Visitor};
use serde::Deserialize;

/// Which filtering algorithm runs (Barakat & Altman, "On ACK filtering on a slow reverse
/// channel", plus a CAKE-like baseline).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckPolicy {
    /// No filtering: a FIFO (or round robin) with the configured drop policy.
    None,
    /// Classic filtering: a new ACK erases the queued ACKs of its connection.
    Classic,
    /// Static threshold δ: when δ ACKs of the connection are queued, the most recently
    /// received one is erased and the new ACK takes its place (paper §2.3).
    Threshold,
    /// Delayed filtering of one aggregate: classic filtering while the measured utilization
    /// of the channel is at or above the threshold, none below (paper §3).
    Delayed,
    /// Per-connection delayed filtering: a connection is filtered while its output rate
    /// is at or above `utilization` × channel rate / active connections (paper §4.1).
    Perflow,
    /// CAKE-like conservative filtering: each new ACK removes at most one older ACK, and
    /// only while two removable ones are queued; the new ACK joins the tail.
    Conservative,
}

impl AckPolicy {
    /// The policy's name as written in configuration.
    pub const fn name(self) -> &'static str {
        match self {
            AckPolicy::None => "none",
            AckPolicy::Classic => "classic",
            AckPolicy::Threshold => "threshold",
            AckPolicy::Delayed => "delayed",
            AckPolicy::Perflow => "perflow",
            AckPolicy::Conservative => "conservative",
        }
    }
}

/// Where a new ACK goes when it erases queued ACKs of its connection.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Placement {
    /// At the tail of the queue.
    Tail,
    /// In the position of the oldest erased ACK (the connection keeps its place in line).
    Replace,
}

/// How the queue is served.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Service {
    /// One FIFO in arrival order (in-place replacement keeps an erased ACK's position).
    Fifo,
    /// Round robin across connections, one packet per turn.
    RoundRobin,
}

/// What to drop when the buffer is still full after filtering.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum AckDropPolicy {
    /// Drop the arriving packet.
    Tail,
    /// Drop the oldest packet of the connection with the longest queue (the arriving
    /// packet counted in its connection's queue).
    LongestQueue,
    /// Drop the oldest packet of the connection with the highest measured output rate.
    HighestRate,
}

/// How delayed filtering measures the channel's utilization.
#[derive(Clone, Copy, PartialEq, Eq, Debug, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Measure {
    /// TSW rate of the departures against the channel rate (needs the rate).
    Rate,
    /// How often ACKs are present: the TSW average of the time the channel is busy,
    /// inferred from the runtime's dequeue calls (no rate needed).
    Presence,
}

/// The static threshold δ: a number of ACKs, or `"auto"` (eq. (1) of the paper when the
/// round-trip time and ACK ratio are given, else estimated online).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Delta {
    /// This many ACKs of a connection may be queued.
    Fixed(u32),
    /// δ_o = μ_r·T/(d+1) when T and d are configured, else an online estimate (see
    /// [`DeltaRule::Estimate`]).
    Auto,
}

impl<'de> Deserialize<'de> for Delta {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Delta;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a number of ACKs (1 or more) or \"auto\"")
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Delta, E> {
                match u32::try_from(v) {
                    Ok(n) => Ok(Delta::Fixed(n)),
                    Err(_) => Err(E::custom(format!(
                        "δ must be a number of ACKs in 1..={}, got {v}",
                        u32::MAX
                    ))),
                }
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Delta, E> {
                self.visit_i64(i64::try_from(v).unwrap_or(i64::MAX))
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<Delta, E> {
                if v == "auto" {
                    Ok(Delta::Auto)
                } else {
                    Err(E::custom(format!(
                        "δ must be a number of ACKs or \"auto\", got \"{v}\""
                    )))
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// ACK filter parameters, as written in scenario files and the live box's configuration.
/// Every key but `policy` is optional; keys that do not apply to the policy are errors.
///
/// ```toml
/// queue = { kind = "ack_filter", policy = "threshold", delta = 30, limit = "10000p" }
/// queue = { kind = "ack_filter", policy = "threshold", delta = "auto", rtt = "200ms", ack_every = 1 }
/// queue = { kind = "ack_filter", policy = "delayed", window = "200ms", utilization = 0.9 }
/// queue = { kind = "ack_filter", policy = "perflow", service = "round_robin", limit = "10p" }
/// ```
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckFilterConfig {
    /// The filtering algorithm.
    pub policy: AckPolicy,
    /// Buffer capacity in packets or bytes (default 1000 packets).
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// Where a new ACK goes when it erases older ones (classic, threshold, delayed,
    /// perflow; default `replace`, as in the paper).
    #[serde(default)]
    pub placement: Option<Placement>,
    /// FIFO or round robin across connections (default `fifo`).
    #[serde(default)]
    pub service: Option<Service>,
    /// Drop policy when still full after filtering (default: the paper's choice for the
    /// policy, see [`AckFilterConfig::default_drop`]).
    #[serde(default)]
    pub drop: Option<AckDropPolicy>,
    /// δ (threshold only).
    #[serde(default)]
    pub delta: Option<Delta>,
    /// T, the round-trip time without queueing, for eq. (1) (threshold with `"auto"`).
    #[serde(default)]
    pub rtt: Option<Span>,
    /// d, data segments per ACK, for eq. (1) (threshold with `"auto"`).
    #[serde(default)]
    pub ack_every: Option<u32>,
    /// Size of an ACK on the channel, for eq. (1) (default 40 B).
    #[serde(default)]
    pub ack_size: Option<Bytes>,
    /// TSW averaging window (default 200 ms; the paper takes about one RTT).
    #[serde(default)]
    pub window: Option<Span>,
    /// Utilization threshold, a fraction in (0, 1] (default 0.9).
    #[serde(default)]
    pub utilization: Option<f64>,
    /// How delayed filtering measures utilization (default `rate`).
    #[serde(default)]
    pub measure: Option<Measure>,
    /// The channel rate (default: the rate of the link the queue feeds).
    #[serde(default)]
    pub channel_rate: Option<Rate>,
    /// Perflow: an idle connection's entry is freed when its rate falls below this fraction
    /// of the channel rate (default 0.01).
    #[serde(default)]
    pub free_below: Option<f64>,
    /// Most connections tracked at once (default 1024); beyond, idle entries are evicted,
    /// or packets share one unfiltered bucket.
    #[serde(default)]
    pub max_connections: Option<u32>,
}

fn default_limit() -> Limit {
    Limit::Packets(1000)
}

impl AckFilterConfig {
    /// A configuration with `policy` and every other key at its default.
    pub fn new(policy: AckPolicy) -> AckFilterConfig {
        AckFilterConfig {
            policy,
            limit: default_limit(),
            placement: None,
            service: None,
            drop: None,
            delta: None,
            rtt: None,
            ack_every: None,
            ack_size: None,
            window: None,
            utilization: None,
            measure: None,
            channel_rate: None,
            free_below: None,
            max_connections: None,
        }
    }
    /// Set the buffer limit.
    pub fn with_limit(mut self, l: Limit) -> Self {
        self.limit = l;
        self
    }
    /// Set the placement of a new ACK.
    pub fn with_placement(mut self, p: Placement) -> Self {
        self.placement = Some(p);
        self
    }
    /// Set the service discipline.
    pub fn with_service(mut self, s: Service) -> Self {
        self.service = Some(s);
        self
    }
    /// Set the drop policy.
    pub fn with_drop(mut self, d: AckDropPolicy) -> Self {
        self.drop = Some(d);
        self
    }
    /// Set δ.
    pub fn with_delta(mut self, d: Delta) -> Self {
        self.delta = Some(d);
        self
    }
    /// Set T and d for eq. (1).
    pub fn with_eq1(mut self, rtt: Duration, ack_every: u32) -> Self {
        self.rtt = Some(Span(rtt));
        self.ack_every = Some(ack_every);
        self
    }
    /// Set the TSW window.
    pub fn with_window(mut self, w: Duration) -> Self {
        self.window = Some(Span(w));
        self
    }
    /// Set the utilization threshold.
    pub fn with_utilization(mut self, u: f64) -> Self {
        self.utilization = Some(u);
        self
    }
    /// Set the utilization measure.
    pub fn with_measure(mut self, m: Measure) -> Self {
        self.measure = Some(m);
        self
    }
    /// Set the channel rate.
    pub fn with_channel_rate(mut self, r: Rate) -> Self {
        self.channel_rate = Some(r);
        self
    }
    /// Set the perflow free threshold.
    pub fn with_free_below(mut self, f: f64) -> Self {
        self.free_below = Some(f);
        self
    }
    /// Set the connection table's capacity.
    pub fn with_max_connections(mut self, n: u32) -> Self {
        self.max_connections = Some(n);
        self
    }

    /// The drop policy the paper uses with each filtering policy (§4.2): drop-tail for no
    /// filtering, classic and static filtering; for delayed filtering of one aggregate,
    /// drop-tail while filtering and longest-queue-drop otherwise (`None` here); the
    /// highest-rate drop for per-connection filtering; drop-tail for the CAKE-like mode.
    pub fn default_drop(policy: AckPolicy) -> Option<AckDropPolicy> {
        match policy {
            AckPolicy::Delayed => None,
            AckPolicy::Perflow => Some(AckDropPolicy::HighestRate),
            _ => Some(AckDropPolicy::Tail),
        }
    }

    /// Check the configuration and resolve defaults. `link_rate` is the rate of the link
    /// the queue feeds, if known. Errors name the key (`ack_filter.<key>`).
    pub fn params(&self, link_rate: Option<Rate>) -> Result<Params, ConfigError> {
        let pol = self.policy;
        let e = |k: &str, m: String| Err(ConfigError::new(format!("ack_filter.{k}"), m));
        // Keys that do not apply to the policy.
        let uses = |key: &str| -> bool {
            use AckPolicy as A;
            match key {
                "placement" => matches!(pol, A::Classic | A::Threshold | A::Delayed | A::Perflow),
                "delta" | "rtt" | "ack_every" | "ack_size" => pol == A::Threshold,
                "utilization" => matches!(pol, A::Delayed | A::Perflow),
                "channel_rate" => matches!(pol, A::Threshold | A::Delayed | A::Perflow),
                "measure" => pol == A::Delayed,
                "free_below" => pol == A::Perflow,
                _ => true,
            }
        };
        let set: [(&str, bool); 10] = [
            ("placement", self.placement.is_some()),
            ("delta", self.delta.is_some()),
            ("rtt", self.rtt.is_some()),
            ("ack_every", self.ack_every.is_some()),
            ("ack_size", self.ack_size.is_some()),
            ("utilization", self.utilization.is_some()),
            ("channel_rate", self.channel_rate.is_some()),
            ("measure", self.measure.is_some()),
            ("free_below", self.free_below.is_some()),
            ("max_connections", self.max_connections.is_some()),
        ];
        for (key, present) in set {
            if present && !uses(key) {
                return e(key, format!("is not used by policy = \"{}\"", pol.name()));
            }
        }
        match self.limit {
            Limit::Packets(0) | Limit::Bytes(0) => return e("limit", "must be positive".into()),
            _ => {}
        }
        let window = self
            .window
            .map(|s| s.0)
            .unwrap_or(Duration::from_millis(200));
        if dur_ns(window) == 0 {
            return e("window", "must be positive".into());
        }
        let util = self.utilization.unwrap_or(0.9);
        if !(util > 0.0 && util <= 1.0) {
            return e(
                "utilization",
                format!("must be a fraction in (0, 1], got {util}"),
            );
        }
        let free = self.free_below.unwrap_or(0.01);
        if !(0.0..1.0).contains(&free) {
            return e(
                "free_below",
                format!("must be a fraction in [0, 1), got {free}"),
            );
        }
        let max_conns = self.max_connections.unwrap_or(1024);
        if !(1..=1 << 20).contains(&max_conns) {
            return e("max_connections", "must be in 1..=1048576".into());
        }
        if self.channel_rate.is_some_and(|r| r.0 == 0) {
            return e("channel_rate", "must be positive".into());
        }
        let channel = self.channel_rate.or(link_rate).filter(|r| r.0 > 0);
        let measure = self.measure.unwrap_or(Measure::Rate);
        let ack_size = self.ack_size.map(|b| b.0).unwrap_or(40);
        if ack_size == 0 {
            return e("ack_size", "must be positive".into());
        }
        if let Some(d) = self.ack_every {
            if d == 0 {
                return e("ack_every", "must be at least 1".into());
            }
        }
        if self.rtt.is_some_and(|r| r.0.is_zero()) {
            return e("rtt", "must be positive".into());
        }
        let no_rate = |what: &str| {
            e(
                "channel_rate",
                format!(
                    "{what} needs the channel rate, and the rate of the link is not known here: \
                     set channel_rate{}",
                    if pol == AckPolicy::Perflow {
                        ""
                    } else {
                        ", or measure = \"presence\""
                    }
                ),
            )
        };
        let delta =
            match (pol, self.delta) {
                (AckPolicy::Threshold, None) => {
                    return e(
                        "delta",
                        "is required for policy = \"threshold\" (a number or \"auto\")".into(),
                    )
                }
                (AckPolicy::Threshold, Some(Delta::Fixed(0))) => {
                    return e(
                        "delta",
                        "must be at least 1 (δ = 0 would queue no ACK at all)".into(),
                    )
                }
                (AckPolicy::Threshold, Some(Delta::Fixed(n))) => {
                    if self.rtt.is_some() || self.ack_every.is_some() || self.ack_size.is_some() {
                        return e(
                            if self.rtt.is_some() {
                                "rtt"
                            } else if self.ack_every.is_some() {
                                "ack_every"
                            } else {
                                "ack_size"
                            },
                            "only used with delta = \"auto\"".into(),
                        );
                    }
                    DeltaRule::Fixed(n)
                }
                (AckPolicy::Threshold, Some(Delta::Auto)) => match (self.rtt, self.ack_every) {
                    (Some(rtt), Some(d)) => {
                        let Some(c) = channel else {
                            return no_rate("delta = \"auto\" with rtt and ack_every (eq. (1))");
                        };
                        DeltaRule::Fixed(delta_o(c, rtt.0, ack_size, d).round().max(1.0) as u32)
                    }
                    (None, None) => {
                        if self.ack_size.is_some() {
                            return e(
                                "ack_size",
                                "only used with rtt and ack_every (eq. (1))".into(),
                            );
                        }
                        DeltaRule::Estimate
                    }
                    (Some(_), None) => return e(
                        "ack_every",
                        "give both rtt and ack_every for eq. (1), or neither to estimate δ online"
                            .into(),
                    ),
                    (None, Some(_)) => return e(
                        "rtt",
                        "give both rtt and ack_every for eq. (1), or neither to estimate δ online"
                            .into(),
                    ),
                },
                _ => DeltaRule::None,
            };
        if pol == AckPolicy::Delayed && measure == Measure::Rate && channel.is_none() {
            return no_rate("delayed filtering with measure = \"rate\"");
        }
        if pol == AckPolicy::Perflow && channel.is_none() {
            return no_rate("per-connection filtering");
        }
        Ok(Params {
            policy: pol,
            limit: self.limit,
            placement: self.placement.unwrap_or(match pol {
                AckPolicy::Conservative | AckPolicy::None => Placement::Tail,
                _ => Placement::Replace,
            }),
            service: self.service.unwrap_or(Service::Fifo),
            drop: self.drop.or(AckFilterConfig::default_drop(pol)),
            delta,
            window,
            util_ppm: (util * 1e6).round() as u64,
            measure,
            channel,
            free_ppm: (free * 1e6).round() as u64,
            max_conns,
        })
    }
}

/// δ_o = μ_r·T/(d+1) (eq. (1) of the paper), with μ_r = `channel` / `ack_size` in ACKs per
/// second, `rtt` = T and `ack_every` = d. For 100 kbit/s, 40-byte ACKs, T = 200 ms and
/// d = 1: 312.5 ACK/s × 0.2 s / 2 = 31.25.
pub fn delta_o(channel: Rate, rtt: Duration, ack_size: u64, ack_every: u32) -> f64 {
    let mu = channel.0 as f64 / (8.0 * ack_size as f64);
    mu * rtt.as_secs_f64() / (ack_every as f64 + 1.0)
}

/// How δ is obtained.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum DeltaRule {
    /// Not a threshold policy.
    None,
    /// Configured, or computed by eq. (1).
    Fixed(u32),
    /// Estimated online: no filtering until the channel first stays busy for a whole
    /// burst cycle (the start-to-start time of the previous two busy periods, about one
    /// RTT in slow start); δ is then the peak backlog per connection within that first
    /// cycle, which by the paper's derivation (§2.2) is δ_o (up to a factor 1 + 1/d).
    Estimate,
}

/// Validated, resolved parameters (immutable while the filter runs).
#[derive(Clone, Copy, PartialEq, Debug)]
pub struct Params {
    /// Policy.
    pub policy: AckPolicy,
    /// Buffer capacity.
    pub limit: Limit,
    /// Placement of a new ACK that erases older ones.
    pub placement: Placement,
    /// Service discipline.
    pub service: Service,
    /// Drop policy; `None` is delayed filtering's adaptive rule (tail while filtering,
    /// longest queue otherwise).
    pub drop: Option<AckDropPolicy>,
    /// δ.
    pub delta: DeltaRule,
    /// TSW window.
    pub window: Duration,
    /// Utilization threshold in parts per million.
    pub util_ppm: u64,
    /// Utilization measure.
    pub measure: Measure,
    /// Channel rate, if known.
    pub channel: Option<Rate>,
    /// Perflow free threshold in parts per million of the channel rate.
    pub free_ppm: u64,
    /// Connection table capacity.
    pub max_conns: u32,
}
