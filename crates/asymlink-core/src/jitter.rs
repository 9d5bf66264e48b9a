//! Delay jitter of a link direction (`jitter`): an extra delay drawn per packet from the
//! link's seeded random stream and added to its propagation delay, as netem's jitter
//! does, except that a direction never reorders: a packet never arrives before the one
//! sent ahead of it.
//!
//! ```toml
//! jitter = "2ms"                                         # uniform in [0, 2 ms)
//! jitter = { dist = "uniform", min = "0.1ms", max = "2ms" }
//! jitter = { dist = "exponential", mean = "0.2ms" }
//! jitter = { dist = "pareto", shape = 1.5, min = "50us" }
//! ```
//!
//! A packet whose transmission ends at `end` arrives at
//! `max(previous arrival, end + delay + draw)`, the draw in whole nanoseconds, where the
//! previous arrival is that of the packet ahead of it still on the wire (none once the
//! wire is empty). The draw
//! only adds delay: `delay` is the least a packet takes (netem's `delay 10ms 2ms`, uniform
//! in 8–12 ms, is `delay = "8ms"` with `jitter = { dist = "uniform", min = "0ms",
//! max = "4ms" }`). Packets that the line sends back to back and that draw less than the
//! one ahead arrive right behind it: jitter bunches packets as well as spreading them.

use crate::config::ConfigError;
use crate::rand::Rng;
use crate::time::Instant;
use crate::units::Span;
use serde::de::{self, Deserializer, MapAccess, Visitor};
use serde::Deserialize;

/// The distribution of the extra delay per packet, in nanoseconds.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Jitter {
    /// Uniform in [min, max).
    Uniform { min: f64, max: f64 },
    /// Exponential with this mean.
    Exponential { mean: f64 },
    /// Pareto with this shape and minimum (heavy-tailed: most draws near the minimum).
    Pareto { shape: f64, min: f64 },
}

impl Jitter {
    /// Draw one extra delay (ns) from `rng`.
    #[inline]
    pub fn draw(&self, rng: &mut Rng) -> u64 {
        let ns = match *self {
            Jitter::Uniform { min, max } => rng.uniform_range(min, max),
            Jitter::Exponential { mean } => rng.exponential(mean),
            Jitter::Pareto { shape, min } => rng.pareto(shape, min),
        };
        // `as` saturates: a Pareto draw of shape <= 1 may be huge.
        ns as u64
    }

    /// Whether every draw is zero.
    pub fn is_zero(&self) -> bool {
        match *self {
            Jitter::Uniform { min, max } => min == 0.0 && max == 0.0,
            Jitter::Exponential { mean } => mean == 0.0,
            Jitter::Pareto { .. } => false,
        }
    }

    /// Check the parameters; errors name the key within the `jitter` table.
    pub fn validate(&self) -> Result<(), ConfigError> {
        match *self {
            Jitter::Uniform { min, max } if max < min => {
                Err(ConfigError::new("jitter.max", "is below min"))
            }
            Jitter::Pareto { shape, .. } if !(shape > 0.0 && shape.is_finite()) => Err(
                ConfigError::new("jitter.shape", "must be a positive number"),
            ),
            Jitter::Pareto { min, .. } if min <= 0.0 => Err(ConfigError::new(
                "jitter.min",
                "must be positive for a Pareto draw",
            )),
            _ => Ok(()),
        }
    }
}

/// A direction's jitter. (The arrival of the packet ahead is the delay line's to know:
/// its last entry.)
#[derive(Clone, Debug)]
pub struct JitterLine {
    dist: Jitter,
}

impl JitterLine {
    /// Jitter `dist` on a line.
    pub fn new(dist: Jitter) -> JitterLine {
        JitterLine { dist }
    }

    /// The distribution.
    pub fn dist(&self) -> &Jitter {
        &self.dist
    }

    /// The arrival of a packet due at `at` without jitter: `at` plus a draw, never before
    /// the packet ahead of it on the wire, which arrives at `ahead` (`None`: the wire is
    /// empty).
    #[inline]
    pub fn arrival(&self, at: Instant, ahead: Option<Instant>, rng: &mut Rng) -> Instant {
        let t = Instant(at.0.saturating_add(self.dist.draw(rng)));
        ahead.map_or(t, |a| t.max(a))
    }
}

fn ns(s: Span) -> f64 {
    s.0.as_nanos() as f64
}

/// `{ dist = "uniform", min, max }`, `{ dist = "exponential", mean }`,
/// `{ dist = "pareto", shape, min }`.
#[derive(Deserialize)]
#[serde(tag = "dist", rename_all = "snake_case", deny_unknown_fields)]
enum JitterTable {
    Uniform {
        #[serde(default)]
        min: Span,
        max: Span,
    },
    Exponential {
        mean: Span,
    },
    Pareto {
        shape: f64,
        min: Span,
    },
}

impl<'de> Deserialize<'de> for Jitter {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Jitter, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Jitter;
            fn expecting(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
                f.write_str(
                    "a duration (uniform from 0) or a table { dist = \"uniform\" | \
                     \"exponential\" | \"pareto\", ... }",
                )
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Jitter, E> {
                let max: Span = s.parse().map_err(|e: ConfigError| E::custom(e.msg))?;
                Ok(Jitter::Uniform {
                    min: 0.0,
                    max: ns(max),
                })
            }
            fn visit_map<A: MapAccess<'de>>(self, m: A) -> Result<Jitter, A::Error> {
                let t = JitterTable::deserialize(de::value::MapAccessDeserializer::new(m))?;
                Ok(match t {
                    JitterTable::Uniform { min, max } => Jitter::Uniform {
                        min: ns(min),
                        max: ns(max),
                    },
                    JitterTable::Exponential { mean } => Jitter::Exponential { mean: ns(mean) },
                    JitterTable::Pareto { shape, min } => Jitter::Pareto {
                        shape,
                        min: ns(min),
                    },
                })
            }
        }
        d.deserialize_any(V)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Deserialize)]
    struct T {
        jitter: Jitter,
    }

    fn parse(s: &str) -> Result<Jitter, String> {
        toml::from_str::<T>(s)
            .map(|t| t.jitter)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn reads_a_duration_and_the_three_tables() {
        assert_eq!(
            parse("jitter = \"2ms\"").unwrap(),
            Jitter::Uniform { min: 0.0, max: 2e6 }
        );
        assert_eq!(
            parse("jitter = { dist = \"uniform\", min = \"10us\", max = \"1ms\" }").unwrap(),
            Jitter::Uniform { min: 1e4, max: 1e6 }
        );
        assert_eq!(
            parse("jitter = { dist = \"exponential\", mean = \"0.2ms\" }").unwrap(),
            Jitter::Exponential { mean: 2e5 }
        );
        assert_eq!(
            parse("jitter = { dist = \"pareto\", shape = 1.5, min = \"50us\" }").unwrap(),
            Jitter::Pareto {
                shape: 1.5,
                min: 5e4
            }
        );
        assert!(parse("jitter = \"2\"").unwrap_err().contains("no unit"));
        assert!(parse("jitter = { dist = \"normal\", mean = \"1ms\" }").is_err());
        assert!(
            parse("jitter = { dist = \"exponential\", mean = \"1ms\", max = \"2ms\" }").is_err()
        );
    }

    #[test]
    fn validates_its_parameters() {
        let bad = Jitter::Uniform { min: 2.0, max: 1.0 };
        assert_eq!(bad.validate().unwrap_err().path, "jitter.max");
        let bad = Jitter::Pareto {
            shape: 0.0,
            min: 1.0,
        };
        assert_eq!(bad.validate().unwrap_err().path, "jitter.shape");
        let bad = Jitter::Pareto {
            shape: 1.5,
            min: 0.0,
        };
        assert_eq!(bad.validate().unwrap_err().path, "jitter.min");
        assert!(Jitter::Exponential { mean: 1e5 }.validate().is_ok());
    }

    #[test]
    fn draws_stay_within_the_distribution() {
        let mut rng = Rng::new(7);
        let u = Jitter::Uniform {
            min: 1000.0,
            max: 5000.0,
        };
        let e = Jitter::Exponential { mean: 2e5 };
        let p = Jitter::Pareto {
            shape: 1.5,
            min: 5e4,
        };
        let (mut su, mut se) = (0.0, 0.0);
        for _ in 0..20_000 {
            let d = u.draw(&mut rng);
            assert!((1000..5000).contains(&d));
            su += d as f64;
            se += e.draw(&mut rng) as f64;
            assert!(p.draw(&mut rng) >= 50_000);
        }
        // Means within 3 % of 3000 ns and 200 µs.
        assert!((su / 20_000.0 - 3000.0).abs() < 90.0, "{}", su / 20_000.0);
        assert!((se / 20_000.0 - 2e5).abs() < 6e3, "{}", se / 20_000.0);
    }

    #[test]
    fn a_line_never_reorders() {
        let mut rng = Rng::new(3);
        let line = JitterLine::new(Jitter::Uniform { min: 0.0, max: 1e6 });
        let mut prev = None;
        let mut bunched = 0;
        for k in 0..10_000u64 {
            // Packets due 100 µs apart, jitter up to 1 ms: many would overtake.
            let due = Instant(k * 100_000);
            let t = line.arrival(due, prev, &mut rng);
            assert!(Some(t) >= prev && t >= due && t.0 < due.0 + 1_000_000);
            bunched += (Some(t) == prev) as u32;
            prev = Some(t);
        }
        assert!(bunched > 1000, "{bunched}");
        // With the wire empty, nothing holds a packet back.
        assert_eq!(
            line.arrival(Instant(5), None, &mut Rng::new(1)),
            Instant(5 + Jitter::Uniform { min: 0.0, max: 1e6 }.draw(&mut Rng::new(1)))
        );
    }
}
