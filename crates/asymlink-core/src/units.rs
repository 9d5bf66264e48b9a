//! Quantities as people write them in configuration files, parsed exactly.
//!
//! * Rates: integer bits per second ([`Rate`]); written `512kbit`, `8Mbit`, `1.5Gbit`,
//!   `100bit`, optionally with `/s` (`8Mbit/s`). SI prefixes are decimal (k = 1000),
//!   binary prefixes (`Kibit`, `Mibit`) are 1024-based. `kbps`/`Mbps` are refused because tc
//!   reads them as *bytes* per second while most people mean bits: the error says so.
//! * Sizes: [`Bytes`], written `1500B`, `64KB` (decimal, 64 000), `64KiB` (binary, 65 536),
//!   `1MB`, `2MiB`, `1GB`.
//! * Queue limits: [`Limit`], a size or a packet count written `10p`, `10pkt` or
//!   `10packets`.
//! * Durations: `200ms`, `1.5s`, `10us`, `250ns`, `2min`.
//!
//! Bare numbers are refused for all of these: a unit is always explicit.
//! Fractions are parsed in exact decimal arithmetic and rounded to the nearest unit.

use crate::config::ConfigError;
use crate::time::{dur_ns, Duration};
use core::fmt;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// Split "1.5Mbit" into (mantissa "1.5", unit "Mbit"), allowing inner whitespace.
fn split_number(s: &str) -> (&str, &str) {
    let s = s.trim();
    let end = s
        .char_indices()
        .find(|(_, c)| !(c.is_ascii_digit() || *c == '.' || *c == '_'))
        .map(|(i, _)| i)
        .unwrap_or(s.len());
    (s[..end].trim(), s[end..].trim())
}

/// The error for a negative quantity (`-5Mbit`, `-30s`): rates, sizes, limits and
/// durations are all amounts, so the message says so instead of "unknown unit".
fn reject_negative(what: &str, s: &str) -> Result<(), ConfigError> {
    if s.trim_start().starts_with('-') {
        return Err(ConfigError::value(format!(
            "{what} '{s}' is negative; it must be positive, e.g. '{}'",
            example_for(what)
        )));
    }
    Ok(())
}

/// `mantissa × multiplier / divisor`, exact decimal, rounded to nearest. `None` on overflow
/// or a malformed number.
fn scale(mantissa: &str, multiplier: u128, divisor: u128) -> Option<u128> {
    let m: String = mantissa.chars().filter(|c| *c != '_').collect();
    if m.is_empty() || m.chars().filter(|c| *c == '.').count() > 1 || m == "." {
        return None;
    }
    let (int, frac) = match m.split_once('.') {
        Some((i, f)) => (i, f),
        None => (m.as_str(), ""),
    };
    if frac.len() > 18 {
        return None;
    }
    let int_v: u128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_v: u128 = if frac.is_empty() {
        0
    } else {
        frac.parse().ok()?
    };
    let frac_den = 10u128.checked_pow(frac.len() as u32)?;
    let num = int_v
        .checked_mul(frac_den)?
        .checked_add(frac_v)?
        .checked_mul(multiplier)?;
    let den = frac_den.checked_mul(divisor)?;
    Some((num + den / 2) / den)
}

/// A data rate in bits per second.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Rate(pub u64);

impl Rate {
    /// From bits per second.
    pub const fn bps(b: u64) -> Rate {
        Rate(b)
    }
    /// From kilobits (1000 bit) per second.
    pub const fn kbps(k: u64) -> Rate {
        Rate(k * 1_000)
    }
    /// From megabits per second.
    pub const fn mbps(m: u64) -> Rate {
        Rate(m * 1_000_000)
    }
    /// Bits per second.
    pub const fn bits_per_sec(self) -> u64 {
        self.0
    }
    /// Serialisation time of `bytes` at this rate, rounded up to the nanosecond.
    /// A zero rate means "infinitely slow" and returns `Duration::MAX`.
    pub fn tx_time(self, bytes: u64) -> Duration {
        Duration::from_nanos(self.tx_nanos(bytes))
    }
    /// [`Rate::tx_time`] in nanoseconds (saturating).
    #[inline]
    pub fn tx_nanos(self, bytes: u64) -> u64 {
        if self.0 == 0 {
            return u64::MAX;
        }
        // Bit-nanoseconds fit 64 bits for any packet (up to about 2.3 GB): a 64-bit
        // division (one instruction) instead of the 128-bit one (a library call), with
        // the same result.
        if bytes <= u64::MAX / 8_000_000_000 {
            return (bytes * 8_000_000_000).div_ceil(self.0);
        }
        let ns = (bytes as u128 * 8 * 1_000_000_000).div_ceil(self.0 as u128);
        u64::try_from(ns).unwrap_or(u64::MAX)
    }
    /// Bytes that can be sent in `d` at this rate (rounded down).
    pub fn bytes_in(self, d: Duration) -> u64 {
        let b = self.0 as u128 * dur_ns(d) as u128 / 8_000_000_000;
        u64::try_from(b).unwrap_or(u64::MAX)
    }
    /// The rate scaled by `num/den` (integer arithmetic, rounded down).
    pub fn scaled(self, num: u64, den: u64) -> Rate {
        if den == 0 {
            return Rate(u64::MAX);
        }
        Rate(u64::try_from(self.0 as u128 * num as u128 / den as u128).unwrap_or(u64::MAX))
    }
    /// Bits per second as a float (for reports).
    pub fn as_f64(self) -> f64 {
        self.0 as f64
    }
}

impl fmt::Debug for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for Rate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        if b >= 1_000_000_000 && b.is_multiple_of(1_000_000) {
            write!(f, "{}Gbit", b as f64 / 1e9)
        } else if b >= 1_000_000 && b.is_multiple_of(1_000) {
            write!(f, "{}Mbit", b as f64 / 1e6)
        } else if b >= 1_000 {
            write!(f, "{}kbit", b as f64 / 1e3)
        } else {
            write!(f, "{b}bit")
        }
    }
}

impl core::str::FromStr for Rate {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Rate, ConfigError> {
        reject_negative("rate", s)?;
        let (num, unit) = split_number(s);
        let unit_core = unit.strip_suffix("/s").unwrap_or(unit);
        let mult: u128 = match unit_core {
            "bit" | "bits" => 1,
            "kbit" | "Kbit" | "kbits" => 1_000,
            "Mbit" | "mbit" | "Mbits" => 1_000_000,
            "Gbit" | "gbit" | "Gbits" => 1_000_000_000,
            "Tbit" | "tbit" => 1_000_000_000_000,
            "Kibit" | "kibit" => 1 << 10,
            "Mibit" | "mibit" => 1 << 20,
            "Gibit" | "gibit" => 1 << 30,
            "bps" | "kbps" | "Kbps" | "mbps" | "Mbps" | "gbps" | "Gbps" => {
                return Err(ConfigError::value(format!(
                    "rate '{s}': '{unit}' is ambiguous (tc reads it as bytes/s); write bits as \
                     e.g. '512kbit' or '8Mbit'"
                )))
            }
            "" => {
                return Err(ConfigError::value(format!(
                    "rate '{s}' has no unit; write e.g. '512kbit', '8Mbit' or '1Gbit'"
                )))
            }
            _ => {
                return Err(ConfigError::value(format!(
                    "rate '{s}': unknown unit '{unit}' (use bit, kbit, Mbit, Gbit)"
                )))
            }
        };
        let v = scale(num, mult, 1)
            .ok_or_else(|| ConfigError::value(format!("rate '{s}': not a valid number")))?;
        let v =
            u64::try_from(v).map_err(|_| ConfigError::value(format!("rate '{s}' is too large")))?;
        Ok(Rate(v))
    }
}

/// A size in bytes.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Bytes(pub u64);

impl fmt::Display for Bytes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}B", self.0)
    }
}

fn size_multiplier(unit: &str) -> Option<u128> {
    Some(match unit {
        "B" | "b" | "byte" | "bytes" => 1,
        "KB" | "kB" | "kb" => 1_000,
        "MB" => 1_000_000,
        "GB" => 1_000_000_000,
        "KiB" | "kiB" => 1 << 10,
        "MiB" => 1 << 20,
        "GiB" => 1 << 30,
        _ => return None,
    })
}

impl core::str::FromStr for Bytes {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Bytes, ConfigError> {
        reject_negative("size", s)?;
        let (num, unit) = split_number(s);
        if unit.is_empty() {
            return Err(ConfigError::value(format!(
                "size '{s}' has no unit; write e.g. '1500B', '64KB' or '64KiB'"
            )));
        }
        let mult = size_multiplier(unit).ok_or_else(|| {
            ConfigError::value(format!(
                "size '{s}': unknown unit '{unit}' (use B, KB, MB, GB, KiB, MiB, GiB)"
            ))
        })?;
        let v = scale(num, mult, 1)
            .ok_or_else(|| ConfigError::value(format!("size '{s}': not a valid number")))?;
        Ok(Bytes(u64::try_from(v).map_err(|_| {
            ConfigError::value(format!("size '{s}' is too large"))
        })?))
    }
}

/// A queue or buffer limit: in bytes or in packets.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
pub enum Limit {
    /// At most this many bytes (IP length) queued.
    Bytes(u64),
    /// At most this many packets queued.
    Packets(u32),
}

impl Limit {
    /// Whether adding a packet of `len` bytes to a backlog of (`pkts`, `bytes`) stays within
    /// the limit.
    #[inline]
    pub fn admits(self, pkts: u32, bytes: u64, len: u32) -> bool {
        match self {
            Limit::Bytes(b) => bytes + len as u64 <= b,
            Limit::Packets(p) => pkts < p,
        }
    }
    /// Whether a backlog of (`pkts`, `bytes`) exceeds the limit.
    #[inline]
    pub fn exceeded_by(self, pkts: u32, bytes: u64) -> bool {
        match self {
            Limit::Bytes(b) => bytes > b,
            Limit::Packets(p) => pkts > p,
        }
    }
}

impl fmt::Display for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Limit::Bytes(b) => write!(f, "{b}B"),
            Limit::Packets(p) => write!(f, "{p}p"),
        }
    }
}

impl core::str::FromStr for Limit {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Limit, ConfigError> {
        reject_negative("limit", s)?;
        let (num, unit) = split_number(s);
        match unit {
            "p" | "pkt" | "pkts" | "packet" | "packets" => {
                let n: u32 = num.replace('_', "").parse().map_err(|_| {
                    ConfigError::value(format!("limit '{s}': packet count must be a whole number"))
                })?;
                Ok(Limit::Packets(n))
            }
            "" => Err(ConfigError::value(format!(
                "limit '{s}' has no unit; write packets ('100p') or bytes ('64KB')"
            ))),
            _ => s.parse::<Bytes>().map(|b| Limit::Bytes(b.0)).map_err(|_| {
                ConfigError::value(format!(
                    "limit '{s}': unknown unit '{unit}' (use p for packets or B, KB, KiB, MB ...)"
                ))
            }),
        }
    }
}

/// Parse a duration such as `200ms`, `1.5s`, `10us`, `2min`.
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    reject_negative("duration", s)?;
    let (num, unit) = split_number(s);
    let mult: u128 = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" | "sec" => 1_000_000_000,
        "min" => 60_000_000_000,
        "h" => 3_600_000_000_000,
        "" => {
            return Err(ConfigError::value(format!(
                "duration '{s}' has no unit; write e.g. '200ms', '1.5s' or '10us'"
            )))
        }
        _ => {
            return Err(ConfigError::value(format!(
                "duration '{s}': unknown unit '{unit}' (use ns, us, ms, s, min, h)"
            )))
        }
    };
    let v = scale(num, mult, 1)
        .ok_or_else(|| ConfigError::value(format!("duration '{s}': not a valid number")))?;
    Ok(Duration::from_nanos(u64::try_from(v).map_err(|_| {
        ConfigError::value(format!("duration '{s}' is too large"))
    })?))
}

/// Format a duration the way [`parse_duration`] reads it.
pub fn format_duration(d: Duration) -> String {
    let ns = dur_ns(d);
    if ns.is_multiple_of(1_000_000_000) {
        format!("{}s", ns / 1_000_000_000)
    } else if ns.is_multiple_of(1_000_000) {
        format!("{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        format!("{}us", ns / 1_000)
    } else {
        format!("{ns}ns")
    }
}

struct StrVisitor<T>(&'static str, core::marker::PhantomData<T>);

impl<T> Visitor<'_> for StrVisitor<T>
where
    T: core::str::FromStr<Err = ConfigError>,
{
    type Value = T;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} written as a string with a unit", self.0)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<T, E> {
        v.parse().map_err(|e: ConfigError| E::custom(e.msg))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<T, E> {
        Err(E::custom(format!(
            "{} {v} has no unit; write it as a string with a unit, e.g. \"{}\"",
            self.0,
            example_for(self.0)
        )))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<T, E> {
        self.visit_i64(v as i64)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<T, E> {
        Err(E::custom(format!(
            "{} {v} has no unit; write it as a string with a unit, e.g. \"{}\"",
            self.0,
            example_for(self.0)
        )))
    }
}

fn example_for(what: &str) -> &'static str {
    match what {
        "rate" => "512kbit",
        "size" => "64KB",
        "limit" => "100p",
        _ => "200ms",
    }
}

macro_rules! serde_via_str {
    ($t:ty, $what:literal) => {
        impl<'de> Deserialize<'de> for $t {
            fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                d.deserialize_any(StrVisitor::<$t>($what, core::marker::PhantomData))
            }
        }
        impl Serialize for $t {
            fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }
    };
}

serde_via_str!(Rate, "rate");
serde_via_str!(Bytes, "size");
serde_via_str!(Limit, "limit");

/// A duration that deserialises from `"200ms"`-style strings.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Debug)]
pub struct Span(pub Duration);

impl core::str::FromStr for Span {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Span, ConfigError> {
        parse_duration(s).map(Span)
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

serde_via_str!(Span, "duration");

impl From<Span> for Duration {
    fn from(s: Span) -> Duration {
        s.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates() {
        assert_eq!("512kbit".parse::<Rate>().unwrap(), Rate(512_000));
        assert_eq!("8Mbit".parse::<Rate>().unwrap(), Rate(8_000_000));
        assert_eq!("1.5Mbit/s".parse::<Rate>().unwrap(), Rate(1_500_000));
        assert_eq!("28.8kbit".parse::<Rate>().unwrap(), Rate(28_800));
        assert_eq!("1Kibit".parse::<Rate>().unwrap(), Rate(1024));
        assert!("512".parse::<Rate>().unwrap_err().msg.contains("no unit"));
        assert!("512kbps"
            .parse::<Rate>()
            .unwrap_err()
            .msg
            .contains("ambiguous"));
        assert!("5furlong"
            .parse::<Rate>()
            .unwrap_err()
            .msg
            .contains("unknown unit"));
        assert!("1.2.3Mbit".parse::<Rate>().is_err());
    }

    #[test]
    fn sizes_and_limits() {
        assert_eq!("64KB".parse::<Bytes>().unwrap(), Bytes(64_000));
        assert_eq!("64KiB".parse::<Bytes>().unwrap(), Bytes(65_536));
        assert_eq!("1MB".parse::<Bytes>().unwrap(), Bytes(1_000_000));
        assert_eq!("34752B".parse::<Bytes>().unwrap(), Bytes(34_752));
        assert_eq!("10p".parse::<Limit>().unwrap(), Limit::Packets(10));
        assert_eq!("250KB".parse::<Limit>().unwrap(), Limit::Bytes(250_000));
        assert!("10".parse::<Limit>().is_err());
        assert!("1.5p".parse::<Limit>().is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("200ms").unwrap(), Duration::from_millis(200));
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("10us").unwrap(), Duration::from_micros(10));
        assert_eq!(parse_duration("2min").unwrap(), Duration::from_secs(120));
        assert!(parse_duration("3").is_err());
        assert_eq!(format_duration(Duration::from_millis(130)), "130ms");
    }

    #[test]
    fn negative_values_must_be_positive() {
        let msg = |r: Result<(), ConfigError>| r.unwrap_err().msg;
        let rate = msg("-5Mbit".parse::<Rate>().map(drop));
        assert_eq!(
            rate,
            "rate '-5Mbit' is negative; it must be positive, e.g. '512kbit'"
        );
        let dur = msg(parse_duration(" -30s").map(drop));
        assert!(
            dur.contains("must be positive") && !dur.contains("unknown unit"),
            "{dur}"
        );
        assert!(msg("-64KB".parse::<Bytes>().map(drop)).contains("must be positive"));
        assert!(msg("-10p".parse::<Limit>().map(drop)).contains("must be positive"));
    }

    #[test]
    fn tx_time_is_exact_and_rounds_up() {
        // 40-byte ACK at 100 kbit/s: 3.2 ms.
        assert_eq!(Rate::kbps(100).tx_time(40), Duration::from_micros(3200));
        // 1500 B at 1 Gbit/s: 12 us.
        assert_eq!(Rate::mbps(1000).tx_nanos(1500), 12_000);
        // 1 byte at 3 bit/s: 8/3 s rounded up.
        assert_eq!(Rate(3).tx_nanos(1), 2_666_666_667);
        assert_eq!(Rate(0).tx_nanos(1), u64::MAX);
        assert_eq!(Rate::mbps(8).bytes_in(Duration::from_millis(1)), 1000);
    }

    #[test]
    fn tx_nanos_agrees_with_the_wide_computation_on_both_sides_of_the_fast_path() {
        let edge = u64::MAX / 8_000_000_000;
        for bytes in [
            0,
            1,
            40,
            1500,
            65_535,
            edge - 1,
            edge,
            edge + 1,
            u64::MAX / 8,
        ] {
            for rate in [
                1,
                3,
                7_999,
                100_000,
                1_000_000_007,
                100_000_000_000,
                u64::MAX,
            ] {
                let wide = (bytes as u128 * 8_000_000_000).div_ceil(rate as u128);
                let want = u64::try_from(wide).unwrap_or(u64::MAX);
                assert_eq!(
                    Rate(rate).tx_nanos(bytes),
                    want,
                    "{bytes} B at {rate} bit/s"
                );
            }
        }
    }

    #[test]
    fn serde_refuses_bare_numbers() {
        #[derive(Deserialize, Debug)]
        struct T {
            #[allow(dead_code)]
            r: Rate,
        }
        let e = toml::from_str::<T>("r = 512").unwrap_err().to_string();
        assert!(e.contains("no unit"), "{e}");
        let t: T = toml::from_str("r = \"512kbit\"").unwrap();
        assert_eq!(t.r, Rate(512_000));
    }
}
