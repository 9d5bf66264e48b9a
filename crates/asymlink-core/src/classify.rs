//! Classification: rules on addresses, ports, protocol, TCP flags, size and DSCP assign a
//! class, first match wins.
//!
//! ```toml
//! [classifier]
//! default = "default"
//! rules = [
//!   { class = "ack",         match = { pure_ack = true } },
//!   { class = "interactive", match = { proto = "tcp", port = ["22", "23"] } },
//!   { class = "bad",         match = { port = ["6881-6889"] } },
//! ]
//! ```
//!
//! `pure_ack` uses [`Headers::is_pure_ack`]: ACK set, no payload, no SYN/FIN/RST, whatever
//! the options and the size. The small-packet match of the old Linux recipes (`length < 64`)
//! misses ACKs carrying SACK blocks — exactly the ACKs that matter during loss recovery.
//!
//! The class table (names → [`ClassId`]) is the order in which classes first appear in the
//! rules, then the default.

use crate::packet::{ClassId, Pkt};
use crate::time::Instant;
use crate::wire::{proto, Headers, TcpFlags, Transport};
use core::net::IpAddr;
use serde::de::{self, Deserializer};
use serde::Deserialize;

/// An address prefix, written `10.0.0.0/8`, `2001:db8::/32` or a bare address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Cidr {
    /// Network address.
    pub addr: IpAddr,
    /// Prefix length.
    pub len: u8,
}

impl Cidr {
    /// Whether `a` lies in the prefix.
    pub fn contains(&self, a: IpAddr) -> bool {
        match (self.addr, a) {
            (IpAddr::V4(n), IpAddr::V4(x)) => {
                let mask = if self.len == 0 {
                    0
                } else {
                    u32::MAX << (32 - self.len as u32)
                };
                (u32::from(n) & mask) == (u32::from(x) & mask)
            }
            (IpAddr::V6(n), IpAddr::V6(x)) => {
                let mask = if self.len == 0 {
                    0
                } else {
                    u128::MAX << (128 - self.len as u32)
                };
                (u128::from(n) & mask) == (u128::from(x) & mask)
            }
            _ => false,
        }
    }
}

impl core::str::FromStr for Cidr {
    type Err = String;
    fn from_str(s: &str) -> Result<Cidr, String> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| format!("'{s}' is not an address or prefix"))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| format!("'{s}': prefix length must be 0..={max}"))?,
            None => max,
        };
        Ok(Cidr { addr, len })
    }
}

impl<'de> Deserialize<'de> for Cidr {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(de::Error::custom)
    }
}

/// An inclusive port range, written `"22"`, `"6881-6889"` or as an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// First port.
    pub lo: u16,
    /// Last port.
    pub hi: u16,
}

impl PortRange {
    /// Whether `p` is in the range.
    pub fn contains(&self, p: u16) -> bool {
        self.lo <= p && p <= self.hi
    }
}

impl<'de> Deserialize<'de> for PortRange {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(i64),
            S(String),
        }
        let bad = |s: &str| de::Error::custom(format!("port '{s}' must be 0-65535 or 'lo-hi'"));
        match Raw::deserialize(d)? {
            Raw::N(n) => u16::try_from(n)
                .map(|p| PortRange { lo: p, hi: p })
                .map_err(|_| bad(&n.to_string())),
            Raw::S(s) => {
                let (lo, hi) = match s.split_once('-') {
                    Some((a, b)) => (a.trim().parse::<u16>(), b.trim().parse::<u16>()),
                    None => (s.trim().parse::<u16>(), s.trim().parse::<u16>()),
                };
                match (lo, hi) {
                    (Ok(lo), Ok(hi)) if lo <= hi => Ok(PortRange { lo, hi }),
                    _ => Err(bad(&s)),
                }
            }
        }
    }
}

/// A protocol, by name (`tcp`, `udp`, `icmp`, `icmpv6`) or number.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Proto(pub u8);

impl<'de> Deserialize<'de> for Proto {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            N(u8),
            S(String),
        }
        match Raw::deserialize(d)? {
            Raw::N(n) => Ok(Proto(n)),
            Raw::S(s) => match s.to_ascii_lowercase().as_str() {
                "tcp" => Ok(Proto(proto::TCP)),
                "udp" => Ok(Proto(proto::UDP)),
                "icmp" => Ok(Proto(proto::ICMP)),
                "icmpv6" => Ok(Proto(proto::ICMPV6)),
                _ => Err(de::Error::custom(format!(
                    "unknown protocol '{s}' (tcp, udp, icmp, icmpv6 or a number)"
                ))),
            },
        }
    }
}

/// A TCP flag name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FlagName {
    /// SYN.
    Syn,
    /// FIN.
    Fin,
    /// RST.
    Rst,
    /// PSH.
    Psh,
    /// ACK.
    Ack,
    /// URG.
    Urg,
    /// ECE.
    Ece,
    /// CWR.
    Cwr,
}

impl FlagName {
    fn flag(self) -> TcpFlags {
        match self {
            FlagName::Syn => TcpFlags::SYN,
            FlagName::Fin => TcpFlags::FIN,
            FlagName::Rst => TcpFlags::RST,
            FlagName::Psh => TcpFlags::PSH,
            FlagName::Ack => TcpFlags::ACK,
            FlagName::Urg => TcpFlags::URG,
            FlagName::Ece => TcpFlags::ECE,
            FlagName::Cwr => TcpFlags::CWR,
        }
    }
}

/// The conditions of a rule; all given conditions must hold. An empty match matches all.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Match {
    /// IP protocol.
    pub proto: Option<Proto>,
    /// Source address in any of these prefixes.
    pub src: Option<Vec<Cidr>>,
    /// Destination address in any of these prefixes.
    pub dst: Option<Vec<Cidr>>,
    /// Source port in any of these ranges.
    pub src_port: Option<Vec<PortRange>>,
    /// Destination port in any of these ranges.
    pub dst_port: Option<Vec<PortRange>>,
    /// Either port in any of these ranges.
    pub port: Option<Vec<PortRange>>,
    /// All of these TCP flags set.
    pub flags: Option<Vec<FlagName>>,
    /// Pure ACK (true) or not a pure ACK (false).
    pub pure_ack: Option<bool>,
    /// Minimum IP length.
    pub min_len: Option<u32>,
    /// Maximum IP length.
    pub max_len: Option<u32>,
    /// DSCP in this list.
    pub dscp: Option<Vec<u8>>,
}

fn ports(h: &Headers) -> Option<(u16, u16)> {
    match &h.transport {
        Transport::Tcp(t) => Some((t.src_port, t.dst_port)),
        Transport::Udp(u) => Some((u.src_port, u.dst_port)),
        Transport::Other(_) => None,
    }
}

impl Match {
    /// Whether a packet with these headers and IP length matches. Unparsed packets
    /// (`h = None`) match only an empty match or one on length alone.
    pub fn matches(&self, h: Option<&Headers>, ip_len: u32) -> bool {
        if self.min_len.is_some_and(|m| ip_len < m) || self.max_len.is_some_and(|m| ip_len > m) {
            return false;
        }
        let needs_headers = self.proto.is_some()
            || self.src.is_some()
            || self.dst.is_some()
            || self.src_port.is_some()
            || self.dst_port.is_some()
            || self.port.is_some()
            || self.flags.is_some()
            || self.pure_ack.is_some()
            || self.dscp.is_some();
        let Some(h) = h else { return !needs_headers };
        if self.proto.is_some_and(|p| p.0 != h.protocol()) {
            return false;
        }
        if let Some(v) = &self.src {
            if !v.iter().any(|c| c.contains(h.ip.src)) {
                return false;
            }
        }
        if let Some(v) = &self.dst {
            if !v.iter().any(|c| c.contains(h.ip.dst)) {
                return false;
            }
        }
        let p = ports(h);
        let in_ranges = |v: &Vec<PortRange>, port: u16| v.iter().any(|r| r.contains(port));
        if let Some(v) = &self.src_port {
            if !p.is_some_and(|(s, _)| in_ranges(v, s)) {
                return false;
            }
        }
        if let Some(v) = &self.dst_port {
            if !p.is_some_and(|(_, d)| in_ranges(v, d)) {
                return false;
            }
        }
        if let Some(v) = &self.port {
            if !p.is_some_and(|(s, d)| in_ranges(v, s) || in_ranges(v, d)) {
                return false;
            }
        }
        if let Some(fl) = &self.flags {
            let Some(t) = h.tcp_repr() else { return false };
            if !fl.iter().all(|f| t.flags.contains(f.flag())) {
                return false;
            }
        }
        if self.pure_ack.is_some_and(|want| h.is_pure_ack() != want) {
            return false;
        }
        if let Some(v) = &self.dscp {
            if !v.contains(&h.ip.dscp) {
                return false;
            }
        }
        true
    }
}

/// One rule.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Class assigned when the rule matches.
    pub class: String,
    /// Conditions.
    #[serde(rename = "match", default)]
    pub when: Match,
}

/// Classifier configuration.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClassifierConfig {
    /// Rules, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
    /// Class of packets no rule matches (unclassified if absent).
    #[serde(default)]
    pub default: Option<String>,
    /// Extra class names to define even if no rule assigns them.
    #[serde(default)]
    pub classes: Vec<String>,
}

impl ClassifierConfig {
    /// The class table: names in order of first appearance.
    pub fn class_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let all = self
            .classes
            .iter()
            .chain(self.rules.iter().map(|r| &r.class))
            .chain(self.default.iter());
        for n in all {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}

/// A compiled classifier.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<(Match, ClassId)>,
    default: ClassId,
    names: Vec<String>,
    counts: Vec<u64>,
}

impl Classifier {
    /// Compile a configuration.
    pub fn new(cfg: &ClassifierConfig) -> Result<Classifier, String> {
        let names = cfg.class_names();
        if names.len() >= u16::MAX as usize {
            return Err("too many classes".into());
        }
        let id = |n: &str| ClassId(names.iter().position(|x| x == n).unwrap() as u16);
        for n in &names {
            if n.is_empty() {
                return Err("class names must not be empty".into());
            }
        }
        Ok(Classifier {
            rules: cfg
                .rules
                .iter()
                .map(|r| (r.when.clone(), id(&r.class)))
                .collect(),
            default: cfg.default.as_deref().map(id).unwrap_or(ClassId::NONE),
            counts: vec![0; names.len() + 1],
            names,
        })
    }

    /// Class names; a name's index is its [`ClassId`].
    pub fn class_names(&self) -> &[String] {
        &self.names
    }

    /// Classify and record the class in the packet.
    pub fn classify<P: Pkt>(&mut self, _now: Instant, pkt: &mut P) -> ClassId {
        let h = pkt.headers();
        let len = pkt.ip_len();
        let c = self
            .rules
            .iter()
            .find(|(m, _)| m.matches(h, len))
            .map(|(_, c)| *c)
            .unwrap_or(self.default);
        let slot = if c.is_some() {
            c.0 as usize
        } else {
            self.names.len()
        };
        self.counts[slot] += 1;
        pkt.set_class(c);
        c
    }

    /// Packets per class (the last entry counts unclassified packets).
    pub fn counts(&self) -> &[u64] {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::wire::{IpRepr, SackBlock, SeqNumber, TcpOptions, TcpRepr};

    fn tcp(flags: TcpFlags, payload: u32, dport: u16, sack: bool) -> HeaderPacket {
        let mut opts = TcpOptions::default();
        if sack {
            opts.sack.push(SackBlock {
                left: SeqNumber(1000),
                right: SeqNumber(2000),
            });
            opts.sack.push(SackBlock {
                left: SeqNumber(3000),
                right: SeqNumber(4000),
            });
            opts.timestamp = Some(crate::wire::Timestamp { val: 1, ecr: 2 });
        }
        HeaderPacket::new(Headers::tcp(
            IpRepr::new("10.0.0.1".parse().unwrap(), "192.0.2.1".parse().unwrap()),
            TcpRepr {
                src_port: 40000,
                dst_port: dport,
                seq: SeqNumber(1),
                ack: SeqNumber(1),
                flags,
                window: 1000,
                urgent: 0,
                opts,
            },
            payload,
        ))
    }

    fn cls(src: &str) -> Classifier {
        let c: ClassifierConfig = toml::from_str(src).unwrap();
        Classifier::new(&c).unwrap()
    }

    #[test]
    fn pure_ack_matches_sack_bearing_acks() {
        let mut c = cls(
            "default = \"bulk\"\nrules = [{ class = \"ack\", match = { pure_ack = true } }, \
             { class = \"small\", match = { max_len = 64 } }]",
        );
        let mut sack_ack = tcp(TcpFlags::ACK, 0, 80, true);
        assert!(
            sack_ack.ip_len() > 64,
            "a SACK ACK is bigger than the old 64-byte match"
        );
        assert_eq!(c.classify(Instant::ZERO, &mut sack_ack), ClassId(0));
        let mut syn = tcp(TcpFlags::SYN | TcpFlags::ACK, 0, 80, false);
        assert_eq!(
            c.classify(Instant::ZERO, &mut syn),
            ClassId(1),
            "SYN-ACK is not a pure ACK"
        );
        let mut data = tcp(TcpFlags::ACK, 1000, 80, false);
        assert_eq!(c.classify(Instant::ZERO, &mut data), ClassId(2));
        assert_eq!(c.counts(), &[1, 1, 1, 0]);
    }

    #[test]
    fn ports_prefixes_flags() {
        let mut c = cls("rules = [\
             { class = \"p2p\", match = { port = [\"6881-6889\"] } },\
             { class = \"ssh\", match = { proto = \"tcp\", dst_port = [22] } },\
             { class = \"lan\", match = { dst = [\"192.0.2.0/24\"], flags = [\"syn\"] } }]");
        assert_eq!(
            c.classify(Instant::ZERO, &mut tcp(TcpFlags::ACK, 10, 6885, false)),
            ClassId(0)
        );
        assert_eq!(
            c.classify(Instant::ZERO, &mut tcp(TcpFlags::ACK, 10, 22, false)),
            ClassId(1)
        );
        assert_eq!(
            c.classify(Instant::ZERO, &mut tcp(TcpFlags::SYN, 0, 80, false)),
            ClassId(2)
        );
        assert_eq!(
            c.classify(Instant::ZERO, &mut tcp(TcpFlags::ACK, 0, 80, false)),
            ClassId::NONE
        );
    }

    #[test]
    fn bad_config_is_reported() {
        for (src, needle) in [
            (
                "rules = [{ class = \"x\", match = { port = [\"70000\"] } }]",
                "70000",
            ),
            (
                "rules = [{ class = \"x\", match = { dst = [\"10.0.0.0/40\"] } }]",
                "prefix",
            ),
            (
                "rules = [{ class = \"x\", match = { proto = \"sctpp\" } }]",
                "sctpp",
            ),
            (
                "rules = [{ class = \"x\", match = { prot = \"tcp\" } }]",
                "prot",
            ),
        ] {
            let e = toml::from_str::<ClassifierConfig>(src)
                .unwrap_err()
                .to_string();
            assert!(e.contains(needle), "{e}");
        }
    }
}
