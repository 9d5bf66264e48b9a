//! A flow's application: `app = { kind = "...", ... }`, deserialised as a tagged enum
//! ([`AppConfig`]) and checked into an [`AppSpec`]; sizes and times may be random
//! ([`Dist`]).
//!
//! ```toml
//! app = { kind = "bulk", bytes = "1MB", open = "receiver" }
//! app = { kind = "file_transfers", size = { dist = "pareto", shape = 1.2, min = "10KB" },
//!         gap = { dist = "exponential", mean = "1s" }, count = 20 }
//! app = { kind = "web", main = "10KB", object_count = 8, object_size = "5KB", parallel = 4 }
//! ```

use asymlink_core::config::ConfigError;
use asymlink_core::units::{Bytes, Rate, Span};
use core::time::Duration;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

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

impl Dist {
    /// Check the parameters; the error names `key`.
    fn checked(&self, key: &str) -> Result<Dist, ConfigError> {
        match *self {
            Dist::Uniform(a, b) if b < a => {
                Err(ConfigError::new(format!("{key}.max"), "is below min"))
            }
            Dist::Pareto(shape, _) if !(shape > 0.0 && shape.is_finite()) => Err(ConfigError::new(
                format!("{key}.shape"),
                "must be a positive number",
            )),
            _ => Ok(self.clone()),
        }
    }
}

/// A quantity a distribution is written in: sizes in bytes, durations in seconds.
trait Quantity: for<'de> Deserialize<'de> + core::str::FromStr<Err = ConfigError> {
    fn value(&self) -> f64;
}

impl Quantity for Bytes {
    fn value(&self) -> f64 {
        self.0 as f64
    }
}

impl Quantity for Span {
    fn value(&self) -> f64 {
        self.0.as_secs_f64()
    }
}

/// `{ dist = "uniform", min, max }`, `{ dist = "exponential", mean }`,
/// `{ dist = "pareto", shape, min }`.
#[derive(Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
enum DistTable<Q> {
    Uniform { min: Q, max: Q },
    Exponential { mean: Q },
    Pareto { shape: f64, min: Q },
}

/// A [`Dist`] of `Q`: a string with a unit (a constant) or a distribution table.
fn dist<'de, D: Deserializer<'de>, Q: Quantity>(d: D) -> Result<Dist, D::Error> {
    struct V<Q>(core::marker::PhantomData<Q>);
    impl<'de, Q: Quantity> Visitor<'de> for V<Q> {
        type Value = Dist;
        fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
            f.write_str("a value with a unit or a table { dist = \"uniform\" | \"exponential\" | \"pareto\", ... }")
        }
        fn visit_str<E: de::Error>(self, s: &str) -> Result<Dist, E> {
            s.parse::<Q>()
                .map(|q| Dist::Const(q.value()))
                .map_err(|e| E::custom(e.msg))
        }
        fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Dist, A::Error> {
            let t = DistTable::<Q>::deserialize(de::value::MapAccessDeserializer::new(m))?;
            Ok(match t {
                DistTable::Uniform { min, max } => Dist::Uniform(min.value(), max.value()),
                DistTable::Exponential { mean } => Dist::Exponential(mean.value()),
                DistTable::Pareto { shape, min } => Dist::Pareto(shape, min.value()),
            })
        }
    }
    d.deserialize_any(V::<Q>(core::marker::PhantomData))
}

fn size_dist<'de, D: Deserializer<'de>>(d: D) -> Result<Dist, D::Error> {
    dist::<D, Bytes>(d)
}

fn time_dist<'de, D: Deserializer<'de>>(d: D) -> Result<Dist, D::Error> {
    dist::<D, Span>(d)
}

fn one_second() -> Dist {
    Dist::Const(1.0)
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

/// An application as written in a flow's `app` table, tagged by `kind`.
#[derive(Clone, Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum AppConfig {
    /// `{ kind = "bulk", bytes = "1MB", open = "sender" }` (endless without `bytes`);
    /// with `then = "2MB"` and `idle = "2s"`, a second write of `then` bytes `idle` after
    /// the first is acknowledged, on the same connection; with `write_size = "64KiB"`,
    /// the application writes in `send()` calls of that many bytes, each once the socket
    /// is writable (Linux's sender).
    Bulk {
        #[serde(default)]
        bytes: Option<Bytes>,
        #[serde(default)]
        open: Opener,
        #[serde(default)]
        then: Option<Bytes>,
        #[serde(default)]
        idle: Option<Span>,
        #[serde(default)]
        write_size: Option<Bytes>,
    },
    /// `{ kind = "file_transfers", size = ..., gap = ..., count = 10 }`.
    FileTransfers {
        #[serde(deserialize_with = "size_dist")]
        size: Dist,
        #[serde(deserialize_with = "time_dist")]
        gap: Dist,
        #[serde(default)]
        count: Option<u32>,
    },
    /// `{ kind = "telnet", interval = ..., bytes = 1 }`.
    Telnet {
        #[serde(deserialize_with = "time_dist")]
        interval: Dist,
        #[serde(default)]
        bytes: Option<u32>,
    },
    /// `{ kind = "web", main = "10KB", objects = ["5KB", ...] }` or `object_count` +
    /// `object_size`; `request` (300B), `parallel` (4), `persistent`, `pages` (1),
    /// `think` (1s).
    Web {
        #[serde(default)]
        request: Option<Bytes>,
        main: Bytes,
        #[serde(default)]
        objects: Option<Vec<Bytes>>,
        #[serde(default)]
        object_count: Option<u32>,
        #[serde(default)]
        object_size: Option<Bytes>,
        #[serde(default)]
        parallel: Option<u32>,
        #[serde(default)]
        persistent: bool,
        #[serde(default)]
        pages: Option<u32>,
        #[serde(default = "one_second", deserialize_with = "time_dist")]
        think: Dist,
    },
    /// `{ kind = "cbr", rate = "64kbit", size = "200B" }`.
    Cbr {
        rate: Rate,
        #[serde(default)]
        size: Option<Bytes>,
    },
    /// `{ kind = "ping", interval = "1s", size = "64B", dscp = 0, port = 7 }`.
    Ping {
        #[serde(default = "one_second", deserialize_with = "time_dist")]
        interval: Dist,
        #[serde(default)]
        size: Option<Bytes>,
        #[serde(default)]
        dscp: Option<u8>,
        #[serde(default)]
        port: Option<u16>,
    },
}

/// An application, checked.
#[derive(Clone, Debug, PartialEq)]
pub enum AppSpec {
    /// One transfer of `bytes` (endless if `None`).
    Bulk {
        /// Bytes to send.
        bytes: Option<u64>,
        /// Who connects.
        open: Opener,
        /// A second write: its bytes, and the idle time after the first is acknowledged.
        then: Option<(u64, Duration)>,
        /// Bytes per `send()` call, each once the socket is writable (`None`: one call
        /// per write).
        write_size: Option<u64>,
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

/// `v` (default `default`) if it lies in `lo..=hi`; the error names `key`.
fn within<T: PartialOrd + Copy + core::fmt::Display>(
    v: Option<T>,
    default: T,
    lo: T,
    hi: T,
    key: &str,
) -> Result<T, ConfigError> {
    let v = v.unwrap_or(default);
    if v < lo || v > hi {
        return Err(ConfigError::new(key, format!("must be in {lo}..={hi}")));
    }
    Ok(v)
}

/// An IP packet size, clamped to what a UDP packet can be.
fn packet_size(b: Option<Bytes>, default: u64) -> u32 {
    b.map_or(default, |b| b.0).clamp(28, 65_535) as u32
}

impl AppConfig {
    /// Check the ranges; errors name the key relative to the `app` table.
    pub fn resolve(&self) -> Result<AppSpec, ConfigError> {
        Ok(match self {
            AppConfig::Bulk {
                bytes,
                open,
                then,
                idle,
                write_size,
            } => AppSpec::Bulk {
                write_size: match write_size {
                    Some(b) if b.0 == 0 => {
                        return Err(ConfigError::new("write_size", "must be at least 1 byte"))
                    }
                    w => w.map(|b| b.0),
                },
                bytes: bytes.map(|b| b.0),
                open: *open,
                then: match (then, bytes) {
                    (None, _) if idle.is_some() => {
                        return Err(ConfigError::new(
                            "idle",
                            "comes with 'then' (a second write)",
                        ))
                    }
                    (None, _) => None,
                    (Some(_), None) => {
                        return Err(ConfigError::new(
                            "then",
                            "needs 'bytes': an endless first write never ends",
                        ))
                    }
                    (Some(t), Some(_)) => Some((t.0, idle.map_or(Duration::ZERO, |s| s.0))),
                },
            },
            AppConfig::FileTransfers { size, gap, count } => AppSpec::FileTransfers {
                size: size.checked("size")?,
                gap: gap.checked("gap")?,
                count: match count {
                    Some(0) => return Err(ConfigError::new("count", "must be at least 1")),
                    c => *c,
                },
            },
            AppConfig::Telnet { interval, bytes } => AppSpec::Telnet {
                interval: interval.checked("interval")?,
                bytes: within(*bytes, 1, 1, 1_000_000, "bytes")?,
            },
            AppConfig::Web {
                request,
                main,
                objects,
                object_count,
                object_size,
                parallel,
                persistent,
                pages,
                think,
            } => AppSpec::Web {
                request: request.map_or(300, |b| b.0),
                main: main.0,
                objects: match (objects, object_count, object_size) {
                    (Some(list), None, None) => list.iter().map(|b| b.0).collect(),
                    (None, Some(n), Some(s)) => {
                        vec![s.0; within(Some(*n), 0, 0, 100_000, "object_count")? as usize]
                    }
                    (None, Some(_), None) => {
                        return Err(ConfigError::new(
                            "object_size",
                            "required with object_count",
                        ))
                    }
                    (None, None, None) => Vec::new(),
                    _ => {
                        return Err(ConfigError::new(
                            "objects",
                            "give either a list 'objects' or 'object_count' + 'object_size'",
                        ))
                    }
                },
                parallel: within(*parallel, 4, 1, 1000, "parallel")?,
                persistent: *persistent,
                pages: within(*pages, 1, 1, 1_000_000, "pages")?,
                think: think.checked("think")?,
            },
            AppConfig::Cbr { rate, size } => AppSpec::Cbr {
                rate: *rate,
                size: packet_size(*size, 200),
            },
            AppConfig::Ping {
                interval,
                size,
                dscp,
                port,
            } => AppSpec::Ping {
                interval: interval.checked("interval")?,
                size: packet_size(*size, 64),
                dscp: within(*dscp, 0, 0, 63, "dscp")?,
                port: within(*port, 7, 1, 65_535, "port")?,
            },
        })
    }
}
