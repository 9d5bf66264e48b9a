//! Trace-driven links: a link direction whose capacity follows a recorded schedule of
//! delivery opportunities instead of a fixed `rate`, in mahimahi's trace format.
//!
//! ```toml
//! to_b = { trace = "lte-up.trace", delay = "20ms" }   # a file, relative to the config file
//! to_a = { trace = "builtin:cellular" }                # a trace shipped with asymlink
//! ```
//!
//! # The format
//!
//! One integer per line: a time in milliseconds at which the link may deliver one
//! MTU-sized packet (a *delivery opportunity* of [`OPPORTUNITY_BYTES`] = 1500 bytes).
//! Times never decrease; the same time written `k` times is `k` opportunities in that
//! millisecond. The trace loops: its period is the last time (which must be positive), so
//! a trace `1 2 2 4` offers one opportunity at 1 ms, two at 2 ms, one at 4 ms, then again
//! at 5, 6, 6, 8 ms, and so on. Blank lines and lines starting with `#` are skipped (a
//! mahimahi trace has neither). Time zero is the start of the run (simulator) or of the
//! box (live).
//!
//! # Serving packets (the rule)
//!
//! A link direction with a trace serves packets in bytes, as mahimahi does: each
//! opportunity carries up to 1500 link-layer bytes (after `linklayer`, raw IP bytes by
//! default).
//!
//! * The head packet takes bytes from the first opportunity at or after the instant it
//!   became available (a packet available exactly at an opportunity's time may use it).
//! * A packet smaller than what is left of an opportunity leaves the rest for the next
//!   packets **of the same opportunity**: two 750-byte packets, or 37 40-byte ACKs, share
//!   one opportunity and are delivered at its time. Bytes left when no packet is waiting
//!   at the opportunity's time are lost (an idle link banks nothing).
//! * A packet larger than what is left of an opportunity continues into the next ones
//!   and is delivered at the time of the opportunity that carries its last byte.
//! * The discipline is asked for a packet only when the line can serve it (at an
//!   opportunity, or with bytes left in the current one): packets wait in the discipline
//!   during an outage, where filters and AQMs can act on them, as in mahimahi's queue.
//! * Delivery is then delayed by the direction's `delay`; loss draws happen as the
//!   packet starts, as on a rate-driven link.
//!
//! A trace replaces `rate` (and `packet_rate`): a table that sets both is an error. A
//! direction's own `trace` or `rate` replaces the link-wide other one. Where a discipline
//! or a mechanism needs "the link rate", a trace link gives its mean rate over one period
//! ([`Trace::mean_rate`]).
//!
//! The link does not schedule anything per opportunity: each packet's delivery time is
//! computed when it starts (a binary search for the first usable opportunity, then
//! arithmetic over whole opportunities), and the driver is woken only at opportunities
//! that a waiting packet can use.

use crate::config::ConfigError;
use crate::time::Instant;
use crate::units::Rate;
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Bytes one delivery opportunity carries.
pub const OPPORTUNITY_BYTES: u32 = 1500;

/// The prefix that names a trace shipped with asymlink (`builtin:cellular`).
pub const BUILTIN_PREFIX: &str = "builtin:";

/// A delivery schedule: opportunity times within one period, in milliseconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trace {
    /// Opportunity times in ms, non-decreasing, the last equal to the period.
    ms: Vec<u32>,
}

impl Trace {
    /// Parse mahimahi's format (see the module documentation). Errors name the line.
    pub fn parse(text: &str) -> Result<Trace, ConfigError> {
        let mut ms: Vec<u32> = Vec::new();
        for (i, line) in text.lines().enumerate() {
            let l = line.trim();
            if l.is_empty() || l.starts_with('#') {
                continue;
            }
            let n = i + 1;
            let t: u32 = l.parse().map_err(|_| {
                ConfigError::value(format!(
                    "line {n}: '{l}' is not a time in whole milliseconds"
                ))
            })?;
            if let Some(&prev) = ms.last() {
                if t < prev {
                    return Err(ConfigError::value(format!(
                        "line {n}: {t} ms comes after {prev} ms; times must not decrease"
                    )));
                }
            }
            ms.push(t);
        }
        match ms.last() {
            None => Err(ConfigError::value(
                "no delivery opportunities (an empty trace)",
            )),
            Some(0) => Err(ConfigError::value(
                "the last time must be positive: it is the period after which the trace \
                 repeats",
            )),
            Some(_) => Ok(Trace { ms }),
        }
    }

    /// Opportunities per period.
    pub fn len(&self) -> usize {
        self.ms.len()
    }

    /// Whether the trace has no opportunities (never: parsing refuses it).
    pub fn is_empty(&self) -> bool {
        self.ms.is_empty()
    }

    /// The period (the last time), ms.
    pub fn period_ms(&self) -> u64 {
        *self.ms.last().expect("a parsed trace is not empty") as u64
    }

    /// The mean rate over one period (1500 bytes per opportunity).
    pub fn mean_rate(&self) -> Rate {
        let bits = self.ms.len() as u64 * OPPORTUNITY_BYTES as u64 * 8;
        Rate((bits.saturating_mul(1000) / self.period_ms()).max(1))
    }

    /// The time of opportunity `k` (counting from the first of the first period).
    pub fn time(&self, k: u64) -> Instant {
        let n = self.ms.len() as u64;
        let ms = (k / n)
            .saturating_mul(self.period_ms())
            .saturating_add(self.ms[(k % n) as usize] as u64);
        Instant(ms.saturating_mul(1_000_000))
    }

    /// The first opportunity at or after `t`.
    pub fn first_at_or_after(&self, t: Instant) -> u64 {
        let n = self.ms.len() as u64;
        let period_ns = self.period_ms() * 1_000_000;
        let lap = t.0 / period_ns;
        let within = t.0 % period_ns;
        // The last time is the period, beyond `within`: the search stays in this lap.
        let i = self
            .ms
            .partition_point(|&m| (m as u64) * 1_000_000 < within) as u64;
        let mut k = lap.saturating_mul(n).saturating_add(i);
        // At a lap boundary the previous lap's last opportunities (at the period) are
        // at `t` too.
        while k > 0 && self.time(k - 1) >= t {
            k -= 1;
        }
        k
    }
}

/// The `trace` key of a link direction: what was written, and the schedule once loaded.
#[derive(Clone, Debug)]
pub struct TraceSpec {
    /// As written: a path (relative to the configuration file) or `builtin:NAME`.
    pub source: String,
    /// The schedule, set by [`TraceSpec::load`].
    pub trace: Option<Arc<Trace>>,
}

impl PartialEq for TraceSpec {
    fn eq(&self, o: &TraceSpec) -> bool {
        self.source == o.source && self.trace == o.trace
    }
}

impl<'de> Deserialize<'de> for TraceSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let source = String::deserialize(d)?;
        if source.trim().is_empty() {
            return Err(serde::de::Error::custom(
                "an empty trace name; write a file path or 'builtin:NAME'",
            ));
        }
        Ok(TraceSpec {
            source,
            trace: None,
        })
    }
}

/// The traces shipped with asymlink, by name (generated by `scripts/gen_traces.py`; the
/// files live in the Python package, `asymlink/traces/NAME.trace`, and are built in here
/// so that the simulator and the box find them without the package).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "cellular",
        include_str!("../../../python/asymlink/traces/cellular.trace"),
    ),
    (
        "leo",
        include_str!("../../../python/asymlink/traces/leo.trace"),
    ),
    (
        "dsl",
        include_str!("../../../python/asymlink/traces/dsl.trace"),
    ),
];

/// The text of a shipped trace.
pub fn builtin(name: &str) -> Option<&'static str> {
    BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, t)| *t)
}

impl TraceSpec {
    /// Where the file is: `source` relative to `base` (the configuration file's
    /// directory; `None`: the working directory). `None` for a builtin.
    pub fn path(&self, base: Option<&Path>) -> Option<PathBuf> {
        if self.source.starts_with(BUILTIN_PREFIX) {
            return None;
        }
        let p = Path::new(&self.source);
        Some(match base {
            Some(b) if p.is_relative() => b.join(p),
            _ => p.to_path_buf(),
        })
    }

    /// Read (through `read`, the driver's file access) and parse the schedule. Errors
    /// are at the empty key (the caller places them at `trace`) and name the file.
    pub fn load(
        &mut self,
        base: Option<&Path>,
        read: &mut dyn FnMut(&Path) -> std::io::Result<String>,
    ) -> Result<(), ConfigError> {
        let (text, shown) = match self.path(base) {
            None => {
                let name = &self.source[BUILTIN_PREFIX.len()..];
                let text = builtin(name).ok_or_else(|| {
                    let names: Vec<&str> = BUILTIN.iter().map(|(n, _)| *n).collect();
                    ConfigError::value(format!(
                        "no builtin trace '{name}'; builtins are {}",
                        names.join(", ")
                    ))
                })?;
                (std::borrow::Cow::Borrowed(text), self.source.clone())
            }
            Some(p) => {
                let text = read(&p).map_err(|e| {
                    ConfigError::value(format!("cannot read '{}': {e}", p.display()))
                })?;
                (std::borrow::Cow::Owned(text), p.display().to_string())
            }
        };
        let t =
            Trace::parse(&text).map_err(|e| ConfigError::value(format!("'{shown}' {}", e.msg)))?;
        self.trace = Some(Arc::new(t));
        Ok(())
    }
}

/// Where a trace-driven line stands: the first opportunity not used up, and the bytes
/// left in it.
#[derive(Clone, Debug)]
pub(crate) struct TraceLine {
    pub trace: Arc<Trace>,
    /// The first opportunity with bytes left.
    pub next: u64,
    /// Bytes left in it.
    pub left: u32,
}

impl TraceLine {
    pub fn new(trace: Arc<Trace>, from: Instant) -> TraceLine {
        let next = trace.first_at_or_after(from);
        TraceLine {
            trace,
            next,
            left: OPPORTUNITY_BYTES,
        }
    }

    /// When the line can next start a packet.
    pub fn next_time(&self) -> Instant {
        self.trace.time(self.next)
    }

    /// When a packet available at `t` would start: the current opportunity if it is not
    /// earlier than `t`, else the first one at or after `t`.
    pub fn start_for(&self, t: Instant) -> Instant {
        let cur = self.next_time();
        if cur >= t {
            cur
        } else {
            self.trace.time(self.trace.first_at_or_after(t))
        }
    }

    /// Give up the opportunities before `t` (nobody was waiting for them).
    pub fn skip_to(&mut self, t: Instant) {
        if self.next_time() < t {
            self.next = self.trace.first_at_or_after(t);
            self.left = OPPORTUNITY_BYTES;
        }
    }

    /// Serve `bytes` from the current opportunity onwards; returns when the last byte
    /// goes (the packet's delivery).
    pub fn serve(&mut self, bytes: u32) -> Instant {
        let mut need = bytes.max(1);
        if need > self.left {
            need -= self.left;
            // Whole opportunities after the current one, then the one with the last byte.
            let more = (need - 1) / OPPORTUNITY_BYTES;
            self.next += 1 + more as u64;
            self.left = OPPORTUNITY_BYTES;
            need -= more * OPPORTUNITY_BYTES;
        }
        self.left -= need;
        let end = self.next_time();
        if self.left == 0 {
            self.next += 1;
            self.left = OPPORTUNITY_BYTES;
        }
        end
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: u64) -> Instant {
        Instant::from_millis(t)
    }

    #[test]
    fn parses_loops_and_finds_opportunities() {
        let t = Trace::parse("1\n2\n2\n4\n").unwrap();
        assert_eq!(t.len(), 4);
        assert_eq!(t.period_ms(), 4);
        let times: Vec<Instant> = (0..9).map(|k| t.time(k)).collect();
        assert_eq!(
            times,
            [1, 2, 2, 4, 5, 6, 6, 8, 9].map(ms).to_vec(),
            "the trace repeats every 4 ms"
        );
        assert_eq!(t.first_at_or_after(Instant::ZERO), 0);
        assert_eq!(t.first_at_or_after(ms(2)), 1);
        assert_eq!(t.first_at_or_after(Instant(2_000_001)), 3);
        assert_eq!(
            t.first_at_or_after(ms(4)),
            3,
            "the period's own opportunity"
        );
        assert_eq!(t.first_at_or_after(Instant(4_000_001)), 4);
        assert_eq!(t.first_at_or_after(ms(8)), 7);
        assert_eq!(t.first_at_or_after(ms(4_000_000)), 3_999_999);
        // 4 opportunities of 1500 bytes every 4 ms: 12 Mbit/s.
        assert_eq!(t.mean_rate(), Rate(12_000_000));
        // A trace starting at 0: the lap boundary holds two opportunities.
        let z = Trace::parse("0\n3\n").unwrap();
        assert_eq!(
            (0..4).map(|k| z.time(k)).collect::<Vec<_>>(),
            [0, 3, 3, 6].map(ms)
        );
        assert_eq!(z.first_at_or_after(ms(3)), 1);
        assert_eq!(z.first_at_or_after(Instant(3_000_001)), 3);
    }

    #[test]
    fn parse_errors_name_the_line() {
        for (src, want) in [
            ("1\n2\nx\n", "line 3: 'x' is not a time"),
            ("1\n-2\n", "line 2: '-2'"),
            ("1.5\n", "line 1: '1.5'"),
            ("5\n3\n", "line 2: 3 ms comes after 5 ms"),
            ("", "no delivery opportunities"),
            ("# only a comment\n", "no delivery opportunities"),
            ("0\n0\n", "the last time must be positive"),
        ] {
            let e = Trace::parse(src).unwrap_err();
            assert!(e.msg.contains(want), "{src:?}: {}", e.msg);
        }
        assert!(Trace::parse("# comment\n\n1\n").is_ok());
    }

    #[test]
    fn builtins_parse_and_have_their_documented_shape() {
        for (name, mean_mbps) in [("cellular", 8.68), ("leo", 12.57), ("dsl", 4.0)] {
            let mut spec = TraceSpec {
                source: format!("builtin:{name}"),
                trace: None,
            };
            spec.load(None, &mut |_| unreachable!("a builtin reads no file"))
                .unwrap();
            let t = spec.trace.unwrap();
            assert_eq!(t.period_ms(), 60_000, "{name}");
            let m = t.mean_rate().0 as f64 / 1e6;
            assert!((m - mean_mbps).abs() < 0.01, "{name}: {m} Mbit/s");
        }
        // The DSL line's retrain: no opportunity from 25 s to 40 s.
        let dsl = Trace::parse(builtin("dsl").unwrap()).unwrap();
        let k =
            dsl.first_at_or_after(Instant::from_secs(25) + core::time::Duration::from_millis(1));
        assert_eq!(dsl.time(k), Instant::from_millis(40_003));
    }

    #[test]
    fn bytes_are_shared_within_an_opportunity_and_carried_across() {
        let tr = Arc::new(Trace::parse("1\n2\n2\n4\n").unwrap());
        let mut l = TraceLine::new(tr.clone(), Instant::ZERO);
        // Two 750-byte packets share the 1 ms opportunity.
        assert_eq!(l.serve(750), ms(1));
        assert_eq!(l.serve(750), ms(1));
        // 1000 bytes, then 1000 more: the second spans the first 2 ms opportunity's rest
        // and the second one's start.
        assert_eq!(l.serve(1000), ms(2));
        assert_eq!(l.serve(1000), ms(2));
        assert_eq!((l.next, l.left), (2, 1000));
        // 4000 bytes: 1000 left at 2 ms, 1500 at 4 ms, 1500 at 5 ms: done at 5 ms.
        assert_eq!(l.serve(4000), ms(5));
        assert_eq!((l.next, l.left), (5, 1500));
        // Skipping: nobody waited at 6 ms; a packet at 6.5 ms starts at 8 ms.
        assert_eq!(l.start_for(Instant(6_500_000)), ms(8));
        l.skip_to(Instant(6_500_000));
        assert_eq!(l.serve(1500), ms(8));
        assert_eq!(l.next_time(), ms(9));
    }
}
