//! The ACK shaper's configuration vocabulary and its validation into [`Params`].
//!
//! ```toml
//! # the paper's simulation (§4.2): 50 KB threshold, leak at the forward packet rate, halved
//! qdisc = { kind = "ack_shaper", threshold = "50KB",
//!           leak = { kind = "rate", rate = "30Mbit", packet = "576B" } }
//! # the paper's router test (§6): one ACK per 100 ms, one per 200 ms under congestion
//! qdisc = { kind = "ack_shaper", threshold = "42p", max_delay = "5s",
//!           leak = { kind = "interval", interval = "100ms" } }
//! # self-tuning: threshold from the forward buffer, leak rate measured
//! qdisc = { kind = "ack_shaper", threshold = "auto", leak = { kind = "rate" } }
//! ```

use crate::qdisc::ConfigError;
use crate::time::dur_ns;
use crate::units::{Bytes, Limit, Rate, Span};
use core::fmt;
use serde::de::{self, Visitor};
use serde::{Deserialize, Deserializer};

/// Forward backlog at which the forward direction is declared congested.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Threshold {
    /// A fixed level in bytes (`"50KB"`) or packets (`"42p"`).
    Fixed(Limit),
    /// `"auto"`: the forward queue's capacity `C` minus the larger of twice the measured
    /// overshoot and `C/8` (`C/2` until the first congestion episode ends, never below
    /// `C/3`), in the capacity's unit; see the module documentation.
    Auto,
}

impl core::str::FromStr for Threshold {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Threshold, ConfigError> {
        if s.trim() == "auto" {
            return Ok(Threshold::Auto);
        }
        s.parse::<Limit>().map(Threshold::Fixed).map_err(|e| {
            ConfigError::value(format!(
                "{} (a threshold is \"auto\", packets like \"42p\" or bytes like \"50KB\")",
                e.msg
            ))
        })
    }
}

/// A fraction in (0, 1], written `"1/2"` or `"50%"`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Fraction {
    /// Numerator.
    pub num: u32,
    /// Denominator.
    pub den: u32,
}

impl Fraction {
    /// One half, the paper's reduction under congestion.
    pub const HALF: Fraction = Fraction { num: 1, den: 2 };
}

impl core::str::FromStr for Fraction {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Fraction, ConfigError> {
        let bad = || ConfigError::value(format!("fraction '{s}': write it as \"1/2\" or \"50%\""));
        let t = s.trim();
        let f = if let Some(p) = t.strip_suffix('%') {
            Fraction {
                num: p.trim().parse().map_err(|_| bad())?,
                den: 100,
            }
        } else if let Some((a, b)) = t.split_once('/') {
            Fraction {
                num: a.trim().parse().map_err(|_| bad())?,
                den: b.trim().parse().map_err(|_| bad())?,
            }
        } else {
            return Err(bad());
        };
        if f.num == 0 || f.den == 0 || f.num > f.den {
            return Err(ConfigError::value(format!(
                "fraction '{s}' must be above 0 and at most 1"
            )));
        }
        Ok(f)
    }
}

impl fmt::Display for Fraction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.num, self.den)
    }
}

struct FromStrVisitor<T>(&'static str, core::marker::PhantomData<T>);

impl<T: core::str::FromStr<Err = ConfigError>> Visitor<'_> for FromStrVisitor<T> {
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(|e: ConfigError| E::custom(e.msg))
    }
}

impl<'de> Deserialize<'de> for Threshold {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FromStrVisitor(
            "a threshold as a string: \"auto\", \"42p\" or \"50KB\"",
            core::marker::PhantomData,
        ))
    }
}

impl<'de> Deserialize<'de> for Fraction {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(FromStrVisitor(
            "a fraction as a string: \"1/2\" or \"50%\"",
            core::marker::PhantomData,
        ))
    }
}

/// How ACKs leak out of the ACK queue.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LeakConfig {
    /// Rate-based (the paper's simulation, §4.2): normally one ACK per forward packet
    /// service time ("the normal rate equal to the service rate of the data packet in the
    /// forward buffer"), `congested` times that rate under congestion.
    ///
    /// With `rate` and `packet` the normal spacing is fixed at the time `rate` needs for
    /// one `packet`, times `packets_per_ack` (default 1). Without them the shaper measures
    /// the forward queue's service time per packet while it is backlogged and, unless
    /// `packets_per_ack` is given, the number of forward packets per arriving ACK
    /// (self-tuning).
    Rate {
        /// The forward service rate (fixed setting).
        #[serde(default)]
        rate: Option<Rate>,
        /// The forward packet size the rate is divided by (fixed setting).
        #[serde(default)]
        packet: Option<Bytes>,
        /// Forward packets acknowledged per ACK (the receivers' ACK ratio).
        #[serde(default)]
        packets_per_ack: Option<u32>,
        /// Leak rate under congestion as a fraction of the normal rate (default `"1/2"`).
        #[serde(default = "half")]
        congested: Fraction,
    },
    /// Interval-based (the paper's router test, §6): one ACK per `interval`, one per
    /// `congested_intervals × interval` under congestion.
    Interval {
        /// Spacing of ACKs without congestion.
        interval: Span,
        /// Multiplier of the spacing under congestion (default 2).
        #[serde(default = "two")]
        congested_intervals: u32,
    },
}

fn half() -> Fraction {
    Fraction::HALF
}
fn two() -> u32 {
    2
}

/// ACK shaper parameters (`kind = "ack_shaper"`).
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckShaperConfig {
    /// Forward backlog at or above which the forward direction is congested: `"50KB"`,
    /// `"42p"` or `"auto"`.
    pub threshold: Threshold,
    /// Hysteresis: once congested, congestion ends only when the forward backlog falls
    /// below this level (same unit as `threshold`, at most `threshold`; default: the
    /// threshold itself, i.e. no hysteresis).
    #[serde(default)]
    pub release: Option<Limit>,
    /// How ACKs leak.
    pub leak: LeakConfig,
    /// One ACK queue per connection, served round robin under the one leak rate (default:
    /// one aggregate FIFO, as the paper proposes).
    #[serde(default)]
    pub per_connection: bool,
    /// Number of per-connection queues (connections are hashed into them; default 1024).
    #[serde(default = "default_buckets")]
    pub buckets: u32,
    /// The longest an ACK is held by the leak (default 200 ms, well below the 1 s minimum
    /// RTO of RFC 6298 and at the 200 ms of Linux). An ACK reaching it is released at
    /// once and counted (`acks_forced`).
    #[serde(default = "default_max_delay")]
    pub max_delay: Span,
    /// Capacity of the ACK queue (default 1000 packets); a full ACK queue drops the
    /// arriving ACK.
    #[serde(default = "default_limit")]
    pub ack_limit: Limit,
    /// Capacity of the data queue (default 1000 packets).
    #[serde(default = "default_limit")]
    pub limit: Limit,
}

fn default_buckets() -> u32 {
    1024
}
fn default_max_delay() -> Span {
    Span(core::time::Duration::from_millis(200))
}
fn default_limit() -> Limit {
    Limit::Packets(1000)
}

impl AckShaperConfig {
    /// A configuration with the defaults for everything but the threshold and the leak.
    pub fn new(threshold: Threshold, leak: LeakConfig) -> AckShaperConfig {
        AckShaperConfig {
            threshold,
            release: None,
            leak,
            per_connection: false,
            buckets: default_buckets(),
            max_delay: default_max_delay(),
            ack_limit: default_limit(),
            limit: default_limit(),
        }
    }
    /// With hysteresis: congestion ends below `release`.
    pub fn with_release(mut self, release: Limit) -> Self {
        self.release = Some(release);
        self
    }
    /// With per-connection ACK queues.
    pub fn with_per_connection(mut self, on: bool) -> Self {
        self.per_connection = on;
        self
    }
    /// With a delay bound.
    pub fn with_max_delay(mut self, d: core::time::Duration) -> Self {
        self.max_delay = Span(d);
        self
    }
    /// With queue capacities for ACKs and for data.
    pub fn with_limits(mut self, ack_limit: Limit, limit: Limit) -> Self {
        self.ack_limit = ack_limit;
        self.limit = limit;
        self
    }

    /// Whether the threshold is derived from the forward queue's capacity.
    pub fn needs_peer_capacity(&self) -> bool {
        self.threshold == Threshold::Auto
    }
}

/// Where the normal ACK spacing comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Base {
    /// A fixed spacing in nanoseconds.
    Fixed(u64),
    /// Measured forward service time per packet × packets per ACK (given, or measured).
    Measured { packets_per_ack: Option<u32> },
}

/// Validated parameters (immutable while running).
#[derive(Clone, Debug)]
pub(super) struct Params {
    pub threshold: Threshold,
    pub release: Option<Limit>,
    pub base: Base,
    /// Spacing under congestion = normal × `slow_num / slow_den`.
    pub slow_num: u64,
    pub slow_den: u64,
    pub buckets: u32,
    pub max_delay_ns: u64,
    pub ack_limit: Limit,
    pub limit: Limit,
}

fn positive(l: Limit) -> bool {
    !matches!(l, Limit::Packets(0) | Limit::Bytes(0))
}

fn same_unit(a: Limit, b: Limit) -> bool {
    matches!(
        (a, b),
        (Limit::Bytes(_), Limit::Bytes(_)) | (Limit::Packets(_), Limit::Packets(_))
    )
}

fn below_or_equal(a: Limit, b: Limit) -> bool {
    match (a, b) {
        (Limit::Bytes(x), Limit::Bytes(y)) => x <= y,
        (Limit::Packets(x), Limit::Packets(y)) => x <= y,
        _ => false,
    }
}

impl Params {
    /// Validate a configuration; errors name the key.
    pub fn new(c: &AckShaperConfig) -> Result<Params, ConfigError> {
        let e = |k: &str, m: String| Err(ConfigError::new(format!("ack_shaper.{k}"), m));
        if let Threshold::Fixed(t) = c.threshold {
            if !positive(t) {
                return e("threshold", "must be positive".into());
            }
        }
        if let Some(r) = c.release {
            let Threshold::Fixed(t) = c.threshold else {
                return e(
                    "release",
                    "needs a fixed threshold (with \"auto\" there is no hysteresis)".into(),
                );
            };
            if !same_unit(r, t) {
                return e(
                    "release",
                    format!("must use the threshold's unit ({r} vs threshold {t})"),
                );
            }
            if !below_or_equal(r, t) || !positive(r) {
                return e(
                    "release",
                    format!("must be positive and at most the threshold {t} (got {r})"),
                );
            }
        }
        let (base, slow_num, slow_den) = match &c.leak {
            LeakConfig::Interval {
                interval,
                congested_intervals,
            } => {
                let ns = dur_ns(interval.0);
                if ns == 0 {
                    return e("leak.interval", "must be positive".into());
                }
                if !(1..=1000).contains(congested_intervals) {
                    return e(
                        "leak.congested_intervals",
                        "must be an integer in 1..=1000".into(),
                    );
                }
                (Base::Fixed(ns), *congested_intervals as u64, 1)
            }
            LeakConfig::Rate {
                rate,
                packet,
                packets_per_ack,
                congested,
            } => {
                if let Some(k) = packets_per_ack {
                    if !(1..=64).contains(k) {
                        return e("leak.packets_per_ack", "must be in 1..=64".into());
                    }
                }
                let base = match (rate, packet) {
                    (Some(r), Some(p)) => {
                        if r.0 == 0 {
                            return e("leak.rate", "must be positive".into());
                        }
                        if p.0 == 0 || p.0 > 65_535 {
                            return e("leak.packet", "must be 1B..=65535B".into());
                        }
                        let per_packet = r.tx_nanos(p.0);
                        Base::Fixed(per_packet.saturating_mul(packets_per_ack.unwrap_or(1) as u64))
                    }
                    (None, None) => Base::Measured {
                        packets_per_ack: *packets_per_ack,
                    },
                    (Some(_), None) => {
                        return e(
                            "leak.packet",
                            "give both 'rate' and 'packet' (fixed) or neither (measured)".into(),
                        )
                    }
                    (None, Some(_)) => {
                        return e(
                            "leak.rate",
                            "give both 'rate' and 'packet' (fixed) or neither (measured)".into(),
                        )
                    }
                };
                // Rate × num/den  ⇔  spacing × den/num.
                (base, congested.den as u64, congested.num as u64)
            }
        };
        if c.max_delay.0.is_zero() {
            return e("max_delay", "must be positive".into());
        }
        if !positive(c.ack_limit) {
            return e("ack_limit", "must be positive".into());
        }
        if !positive(c.limit) {
            return e("limit", "must be positive".into());
        }
        let buckets = if c.per_connection {
            if !(1..=65_536).contains(&c.buckets) {
                return e("buckets", "must be in 1..=65536".into());
            }
            c.buckets
        } else {
            1
        };
        Ok(Params {
            threshold: c.threshold,
            release: c.release,
            base,
            slow_num,
            slow_den,
            buckets,
            max_delay_ns: dur_ns(c.max_delay.0),
            ack_limit: c.ack_limit,
            limit: c.limit,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(src: &str) -> Result<AckShaperConfig, String> {
        toml::from_str(src).map_err(|e| e.to_string())
    }

    fn build_err(src: &str) -> String {
        let c = cfg(src).unwrap();
        Params::new(&c).unwrap_err().to_string()
    }

    #[test]
    fn parses_the_papers_settings() {
        let c = cfg("threshold = \"50KB\"\nleak = { kind = \"rate\", rate = \"30Mbit\", packet = \"576B\" }").unwrap();
        assert_eq!(c.threshold, Threshold::Fixed(Limit::Bytes(50_000)));
        let p = Params::new(&c).unwrap();
        // 576 B at 30 Mbit/s = 153.6 µs; halved rate = doubled spacing.
        assert_eq!(p.base, Base::Fixed(153_600));
        assert_eq!((p.slow_num, p.slow_den), (2, 1));
        assert_eq!(p.max_delay_ns, 200_000_000);
        let c = cfg("threshold = \"42p\"\nleak = { kind = \"interval\", interval = \"100ms\" }")
            .unwrap();
        let p = Params::new(&c).unwrap();
        assert_eq!(p.base, Base::Fixed(100_000_000));
        assert_eq!((p.slow_num, p.slow_den), (2, 1));
        let c =
            cfg("threshold = \"auto\"\nleak = { kind = \"rate\", congested = \"25%\" }").unwrap();
        let p = Params::new(&c).unwrap();
        assert_eq!(
            p.base,
            Base::Measured {
                packets_per_ack: None
            }
        );
        assert_eq!((p.slow_num, p.slow_den), (100, 25));
    }

    #[test]
    fn errors_name_the_key() {
        let m =
            cfg("threshold = 50\nleak = { kind = \"interval\", interval = \"1s\" }").unwrap_err();
        assert!(m.contains("threshold"), "{m}");
        let m = cfg("threshold = \"50\"\nleak = { kind = \"interval\", interval = \"1s\" }")
            .unwrap_err();
        assert!(m.contains("no unit"), "{m}");
        let m = cfg("threshold = \"5p\"\nleak = { kind = \"intervall\", interval = \"1s\" }")
            .unwrap_err();
        assert!(m.contains("intervall"), "{m}");
        let m = cfg("threshold = \"5p\"\nleak = { kind = \"interval\", intervl = \"1s\" }")
            .unwrap_err();
        assert!(m.contains("intervl"), "{m}");
        let m =
            cfg("threshold = \"5p\"\nleak = { kind = \"rate\", congested = \"3/2\" }").unwrap_err();
        assert!(m.contains("at most 1"), "{m}");
        let m = cfg("threshold = \"5p\"\nleak = { kind = \"rate\", congested = \"half\" }")
            .unwrap_err();
        assert!(m.contains("1/2"), "{m}");
        let m = build_err("threshold = \"5p\"\nrelease = \"1KB\"\nleak = { kind = \"rate\" }");
        assert!(
            m.starts_with("ack_shaper.release") && m.contains("unit"),
            "{m}"
        );
        let m = build_err("threshold = \"5p\"\nrelease = \"6p\"\nleak = { kind = \"rate\" }");
        assert!(m.contains("at most"), "{m}");
        let m = build_err("threshold = \"auto\"\nrelease = \"6p\"\nleak = { kind = \"rate\" }");
        assert!(m.contains("fixed threshold"), "{m}");
        let m = build_err("threshold = \"5p\"\nleak = { kind = \"rate\", rate = \"1Mbit\" }");
        assert!(m.starts_with("ack_shaper.leak.packet"), "{m}");
        let m = build_err("threshold = \"0p\"\nleak = { kind = \"rate\" }");
        assert!(m.starts_with("ack_shaper.threshold"), "{m}");
        let m = build_err("threshold = \"5p\"\nleak = { kind = \"interval\", interval = \"0s\" }");
        assert!(m.starts_with("ack_shaper.leak.interval"), "{m}");
        let m = build_err("threshold = \"5p\"\nmax_delay = \"0s\"\nleak = { kind = \"rate\" }");
        assert!(m.starts_with("ack_shaper.max_delay"), "{m}");
        let m = build_err(
            "threshold = \"5p\"\nper_connection = true\nbuckets = 0\nleak = { kind = \"rate\" }",
        );
        assert!(m.starts_with("ack_shaper.buckets"), "{m}");
    }
}
