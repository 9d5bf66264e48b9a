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
//!
//! # The ADSL paper's five classes
//!
//! `preset = "five_class"` appends the policy of Brouer & Hansen (2004, §III-C) after any
//! rules given: *ack* (pure TCP ACKs of every class), *interactive* (ssh, telnet, chat;
//! DSCP EF or the old "minimize delay" TOS), *bad* (known peer-to-peer ports: eDonkey,
//! Kazaa/FastTrack, BitTorrent, Gnutella), *good* (well-known services, TCP handshakes,
//! DNS) and *default*. With `p2p_hosts` it adds the paper's per-host heuristic, right after
//! the ACK rule: "if the bandwidth consumption of a local host increases above a certain
//! threshold, all connections between that host and external hosts are examined. If any of
//! the external hosts use known peer-to-peer ports, all traffic from the local node is
//! assumed to be peer-to-peer traffic".
//!
//! ```toml
//! [classifier]
//! preset = "five_class"
//! local = ["192.168.0.0/16"]                   # the LAN behind the middlebox
//! p2p_hosts = { threshold = "100kbit", window = "10s", hold = "60s" }
//! ```
//!
//! The heuristic keeps, per local host seen, a TSW rate estimate of the bytes this
//! classifier passes and the last time it talked to a remote peer-to-peer port; a host
//! whose rate exceeds `threshold` while such a contact is at most `window` old is flagged
//! for `hold`, and `match = { p2p_host = true }` matches its packets. At most `max_hosts`
//! hosts are tracked (further hosts are not, and never match).

use crate::config::ConfigError;
use crate::estimator::Tsw;
use crate::packet::{ClassId, Fields, Pkt};
use crate::time::Instant;
use crate::units::{Rate, Span};
use crate::wire::{proto, Headers, TcpFlags, Transport};
use core::net::IpAddr;
use serde::de::{self, Deserializer};
use serde::Deserialize;
use std::collections::BTreeMap;

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
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Cidr, ConfigError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a
            .trim()
            .parse()
            .map_err(|_| ConfigError::value(format!("'{s}' is not an address or prefix")))?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            Some(l) => l
                .trim()
                .parse::<u8>()
                .ok()
                .filter(|&n| n <= max)
                .ok_or_else(|| {
                    ConfigError::value(format!("'{s}': prefix length must be 0..={max}"))
                })?,
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
    /// The packet's local host is flagged by the peer-to-peer host heuristic (true) or not
    /// (false). Needs `p2p_hosts` in the classifier.
    pub p2p_host: Option<bool>,
}

fn ports(h: &Headers) -> Option<(u16, u16)> {
    match &h.transport {
        Transport::Tcp(t) => Some((t.src_port, t.dst_port)),
        Transport::Udp(u) => Some((u.src_port, u.dst_port)),
        Transport::Other(_) => None,
    }
}

impl Match {
    /// Whether a packet with these headers and IP length matches, for a packet whose local
    /// host is not flagged as a peer-to-peer host. Unparsed packets (`h = None`) match only
    /// an empty match or one on length alone.
    pub fn matches(&self, h: Option<&Headers>, ip_len: u32) -> bool {
        self.matches_host(h, ip_len, false)
    }

    /// [`Match::matches`] knowing whether the packet's local host is flagged.
    pub fn matches_host(&self, h: Option<&Headers>, ip_len: u32, p2p_host: bool) -> bool {
        let f = h.map(Fields::of);
        self.matches_parsed(&FieldMatch::of(self), h, f.as_ref(), ip_len, p2p_host)
    }

    /// [`Match::matches_host`] given the match's compiled field conditions (`fm`, of
    /// `self`) and the headers' [`Fields`] (`f`, of `h`): the conditions on fields, then
    /// those on addresses and ports.
    fn matches_parsed(
        &self,
        fm: &FieldMatch,
        h: Option<&Headers>,
        f: Option<&Fields>,
        ip_len: u32,
        p2p_host: bool,
    ) -> bool {
        if !fm.matches(f, ip_len, p2p_host) {
            return false;
        }
        // Without headers, the field match has let through only a match that needs none.
        let Some(h) = h else {
            return true;
        };
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
        if self.src_port.is_some() || self.dst_port.is_some() || self.port.is_some() {
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
        }
        true
    }

    /// Whether the match has conditions on what only a parsed packet has (an unparsed
    /// one never matches it).
    fn needs_headers(&self) -> bool {
        self.proto.is_some()
            || self.reads_addresses()
            || self.flags.is_some()
            || self.pure_ack.is_some()
            || self.dscp.is_some()
            || self.p2p_host == Some(true)
    }

    /// Whether the match has conditions on addresses or ports (beyond [`Fields`]).
    fn reads_addresses(&self) -> bool {
        self.src.is_some()
            || self.dst.is_some()
            || self.src_port.is_some()
            || self.dst_port.is_some()
            || self.port.is_some()
    }
}

/// A match's conditions on what a packet answers without its headers (its [`Fields`],
/// length and peer-to-peer flag), compiled into a few words: the DSCP list as a bit per
/// code point, the TCP flags as one mask. A classifier whose rules read no addresses or
/// ports matches with these alone, without following the match's lists; one that does
/// checks these first, then the addresses and ports ([`Match::matches_host`]).
#[derive(Clone, Copy, Debug)]
struct FieldMatch {
    min_len: u32,
    max_len: u32,
    /// Bit `d` set: DSCP `d` matches (all set without a DSCP condition).
    dscp: u64,
    /// Flags that must all be set on a TCP packet (`None`: no flag condition).
    flags: Option<TcpFlags>,
    proto: Option<u8>,
    pure_ack: Option<bool>,
    p2p_host: Option<bool>,
    needs_headers: bool,
}

impl FieldMatch {
    fn of(m: &Match) -> FieldMatch {
        FieldMatch {
            min_len: m.min_len.unwrap_or(0),
            max_len: m.max_len.unwrap_or(u32::MAX),
            dscp: m.dscp.as_ref().map_or(u64::MAX, |v| {
                v.iter().filter(|&&d| d < 64).fold(0, |a, &d| a | 1 << d)
            }),
            flags: m
                .flags
                .as_ref()
                .map(|v| v.iter().fold(TcpFlags::NONE, |a, x| a | x.flag())),
            proto: m.proto.map(|p| p.0),
            pure_ack: m.pure_ack,
            p2p_host: m.p2p_host,
            needs_headers: m.needs_headers(),
        }
    }

    #[inline]
    fn matches(&self, f: Option<&Fields>, ip_len: u32, p2p_host: bool) -> bool {
        if self.p2p_host.is_some_and(|want| want != p2p_host) {
            return false;
        }
        if ip_len < self.min_len || ip_len > self.max_len {
            return false;
        }
        let Some(f) = f else {
            return !self.needs_headers;
        };
        if self.proto.is_some_and(|p| p != f.proto) {
            return false;
        }
        if let Some(fl) = self.flags {
            if !f.tcp || !f.flags.contains(fl) {
                return false;
            }
        }
        if self.pure_ack.is_some_and(|want| f.is_pure_ack() != want) {
            return false;
        }
        f.dscp < 64 && self.dscp >> f.dscp & 1 == 1
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
    /// A built-in policy whose rules follow `rules` (its default class applies when
    /// `default` is not given).
    #[serde(default)]
    pub preset: Option<Preset>,
    /// The local (LAN) prefixes, for the peer-to-peer host heuristic.
    #[serde(default)]
    pub local: Option<Vec<Cidr>>,
    /// The peer-to-peer host heuristic (needs `local`).
    #[serde(default)]
    pub p2p_hosts: Option<P2pHostConfig>,
}

/// Built-in policies.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Preset {
    /// The ADSL paper's classes: ack, interactive, good, bad, default.
    FiveClass,
}

/// Parameters of the peer-to-peer host heuristic.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct P2pHostConfig {
    /// A local host above this rate is examined.
    pub threshold: Rate,
    /// Averaging window of the rate estimate and how recent a peer-to-peer contact must be
    /// (default 10 s).
    #[serde(default = "default_p2p_window")]
    pub window: Span,
    /// How long a flagged host stays flagged after the last time it qualified (default
    /// 60 s).
    #[serde(default = "default_p2p_hold")]
    pub hold: Span,
    /// Most hosts tracked (default 4096).
    #[serde(default = "default_max_hosts")]
    pub max_hosts: u32,
}

fn default_p2p_window() -> Span {
    Span(crate::time::Duration::from_secs(10))
}
fn default_p2p_hold() -> Span {
    Span(crate::time::Duration::from_secs(60))
}
fn default_max_hosts() -> u32 {
    4096
}

/// Well-known peer-to-peer ports: eDonkey 4661-4672, Kazaa/FastTrack 1214, BitTorrent
/// 6881-6889, Gnutella 6346-6347.
pub const P2P_PORTS: [(u16, u16); 4] = [(4661, 4672), (1214, 1214), (6881, 6889), (6346, 6347)];
/// Interactive ports: ssh 22, telnet 23, MSN 1863, AIM/ICQ 5190, XMPP 5222-5223, IRC
/// 6660-6669 and 6697.
pub const INTERACTIVE_PORTS: [(u16, u16); 7] = [
    (22, 22),
    (23, 23),
    (1863, 1863),
    (5190, 5190),
    (5222, 5223),
    (6660, 6669),
    (6697, 6697),
];
/// Well-known services: ftp 20-21, smtp 25, dns 53, http 80, pop3 110, ntp 123, imap
/// 143, https 443, smtps 465, submission 587, imaps 993, pop3s 995, http-alt 8080.
pub const GOOD_PORTS: [(u16, u16); 13] = [
    (20, 21),
    (25, 25),
    (53, 53),
    (80, 80),
    (110, 110),
    (123, 123),
    (143, 143),
    (443, 443),
    (465, 465),
    (587, 587),
    (993, 993),
    (995, 995),
    (8080, 8080),
];

fn ranges(v: &[(u16, u16)]) -> Vec<PortRange> {
    v.iter().map(|&(lo, hi)| PortRange { lo, hi }).collect()
}

impl Preset {
    /// The preset's rules (with the host rule when the heuristic is on) and default class.
    pub fn rules(self, p2p_hosts: bool) -> (Vec<Rule>, &'static str) {
        match self {
            Preset::FiveClass => {
                let rule = |class: &str, when: Match| Rule {
                    class: class.to_string(),
                    when,
                };
                let mut v = vec![rule(
                    "ack",
                    Match {
                        pure_ack: Some(true),
                        ..Match::default()
                    },
                )];
                if p2p_hosts {
                    v.push(rule(
                        "bad",
                        Match {
                            p2p_host: Some(true),
                            ..Match::default()
                        },
                    ));
                }
                v.push(rule(
                    "interactive",
                    Match {
                        port: Some(ranges(&INTERACTIVE_PORTS)),
                        ..Match::default()
                    },
                ));
                v.push(rule(
                    "interactive",
                    Match {
                        dscp: Some(vec![46, 4]),
                        ..Match::default()
                    },
                ));
                v.push(rule(
                    "bad",
                    Match {
                        port: Some(ranges(&P2P_PORTS)),
                        ..Match::default()
                    },
                ));
                v.push(rule(
                    "good",
                    Match {
                        proto: Some(Proto(proto::TCP)),
                        flags: Some(vec![FlagName::Syn]),
                        ..Match::default()
                    },
                ));
                v.push(rule(
                    "good",
                    Match {
                        port: Some(ranges(&GOOD_PORTS)),
                        ..Match::default()
                    },
                ));
                (v, "default")
            }
        }
    }
}

impl ClassifierConfig {
    /// The rules in force: the configured ones, then the preset's.
    pub fn effective_rules(&self) -> Vec<Rule> {
        let mut v = self.rules.clone();
        if let Some(p) = self.preset {
            v.extend(p.rules(self.p2p_hosts.is_some()).0);
        }
        v
    }

    /// The default class in force.
    pub fn effective_default(&self) -> Option<String> {
        self.default.clone().or_else(|| {
            self.preset
                .map(|p| p.rules(self.p2p_hosts.is_some()).1.to_string())
        })
    }

    /// The class table: names in order of first appearance.
    pub fn class_names(&self) -> Vec<String> {
        let mut names: Vec<String> = Vec::new();
        let rules = self.effective_rules();
        let default = self.effective_default();
        let all = self
            .classes
            .iter()
            .chain(rules.iter().map(|r| &r.class))
            .chain(default.iter());
        for n in all {
            if !names.contains(n) {
                names.push(n.clone());
            }
        }
        names
    }
}

/// Per-host state of the peer-to-peer heuristic.
#[derive(Clone, Debug)]
struct HostState {
    rate: Tsw,
    p2p_seen: Option<Instant>,
    flagged_until: Option<Instant>,
    last_seen: Instant,
}

/// The peer-to-peer host heuristic.
#[derive(Clone, Debug)]
struct P2pHosts {
    cfg: P2pHostConfig,
    local: Vec<Cidr>,
    ports: Vec<PortRange>,
    hosts: BTreeMap<IpAddr, HostState>,
    flagged_total: u64,
    evicted: u64,
}

impl P2pHosts {
    /// Account the packet and say whether its local host is flagged.
    fn observe(&mut self, now: Instant, h: &Headers, ip_len: u32) -> bool {
        let (local, remote_port) = if self.local.iter().any(|c| c.contains(h.ip.src)) {
            (h.ip.src, ports(h).map(|p| p.1))
        } else if self.local.iter().any(|c| c.contains(h.ip.dst)) {
            (h.ip.dst, ports(h).map(|p| p.0))
        } else {
            return false;
        };
        if !self.hosts.contains_key(&local)
            && self.hosts.len() >= self.cfg.max_hosts as usize
            && !self.evict(now)
        {
            return false;
        }
        let window = self.cfg.window.0;
        let st = self.hosts.entry(local).or_insert_with(|| HostState {
            rate: Tsw::new(window),
            p2p_seen: None,
            flagged_until: None,
            last_seen: now,
        });
        st.last_seen = now;
        st.rate.update(now, ip_len);
        if remote_port.is_some_and(|p| self.ports.iter().any(|r| r.contains(p))) {
            st.p2p_seen = Some(now);
        }
        let recent = st
            .p2p_seen
            .is_some_and(|t| now.saturating_since(t) <= window);
        if recent && st.rate.rate() > self.cfg.threshold {
            if st.flagged_until.is_none_or(|u| u <= now) {
                self.flagged_total += 1;
            }
            st.flagged_until = Some(now + self.cfg.hold.0);
        }
        st.flagged_until.is_some_and(|u| u > now)
    }

    /// Make room for a new host (the table is full): forget the least recently seen host
    /// that is not flagged. A flood of spoofed local addresses thus cannot grow the table
    /// or keep real hosts out of it, and never clears a flag. Returns false when every
    /// host is flagged (the new one is then not tracked).
    fn evict(&mut self, now: Instant) -> bool {
        let victim = self
            .hosts
            .iter()
            .filter(|(_, s)| s.flagged_until.is_none_or(|u| u <= now))
            .min_by_key(|(a, s)| (s.last_seen, **a))
            .map(|(a, _)| *a);
        match victim {
            Some(a) => {
                self.hosts.remove(&a);
                self.evicted += 1;
                true
            }
            None => false,
        }
    }
}

/// A compiled classifier.
#[derive(Clone, Debug)]
pub struct Classifier {
    rules: Vec<(Match, ClassId)>,
    /// The rules' [`FieldMatch`]es, in order: what a classifier that does not read headers
    /// matches with.
    fields: Vec<(FieldMatch, ClassId)>,
    default: ClassId,
    names: Vec<String>,
    counts: Vec<u64>,
    p2p: Option<P2pHosts>,
    /// Whether a rule or the peer-to-peer heuristic reads addresses or ports: otherwise
    /// the rules are matched against the packet's [`Fields`], not its headers.
    reads: bool,
}

impl Classifier {
    /// Compile a configuration. Errors name the key within the classifier's table.
    pub fn new(cfg: &ClassifierConfig) -> Result<Classifier, ConfigError> {
        let names = cfg.class_names();
        if names.len() >= u16::MAX as usize {
            return Err(ConfigError::new("classes", "too many classes"));
        }
        let id = |n: &str| ClassId(names.iter().position(|x| x == n).unwrap() as u16);
        let empty = "class names must not be empty";
        if let Some(i) = cfg.classes.iter().position(|n| n.is_empty()) {
            return Err(ConfigError::new(format!("classes[{i}]"), empty));
        }
        if let Some(i) = cfg.rules.iter().position(|r| r.class.is_empty()) {
            return Err(ConfigError::new(format!("rules[{i}].class"), empty));
        }
        if cfg.default.as_deref() == Some("") {
            return Err(ConfigError::new("default", empty));
        }
        let rules = cfg.effective_rules();
        let p2p = match (&cfg.p2p_hosts, &cfg.local) {
            (None, _) => {
                if let Some(i) = rules.iter().position(|r| r.when.p2p_host.is_some()) {
                    return Err(ConfigError::new(
                        format!("rules[{i}].match.p2p_host"),
                        "a rule matches p2p_host but the classifier has no p2p_hosts heuristic",
                    ));
                }
                None
            }
            (Some(_), None) => {
                return Err(ConfigError::new(
                    "p2p_hosts",
                    "p2p_hosts needs 'local': the LAN prefixes whose hosts it watches",
                ))
            }
            (Some(c), Some(local)) => {
                for (zero, key) in [
                    (c.threshold.0 == 0, "threshold"),
                    (c.window.0.is_zero(), "window"),
                    (c.max_hosts == 0, "max_hosts"),
                ] {
                    if zero {
                        return Err(ConfigError::new(
                            format!("p2p_hosts.{key}"),
                            "must be positive",
                        ));
                    }
                }
                Some(P2pHosts {
                    cfg: *c,
                    local: local.clone(),
                    ports: ranges(&P2P_PORTS),
                    hosts: BTreeMap::new(),
                    flagged_total: 0,
                    evicted: 0,
                })
            }
        };
        let reads = p2p.is_some() || rules.iter().any(|r| r.when.reads_addresses());
        Ok(Classifier {
            reads,
            rules: rules
                .iter()
                .map(|r| (r.when.clone(), id(&r.class)))
                .collect(),
            fields: rules
                .iter()
                .map(|r| (FieldMatch::of(&r.when), id(&r.class)))
                .collect(),
            default: cfg
                .effective_default()
                .as_deref()
                .map(id)
                .unwrap_or(ClassId::NONE),
            counts: vec![0; names.len() + 1],
            names,
            p2p,
        })
    }

    /// Class names; a name's index is its [`ClassId`].
    pub fn class_names(&self) -> &[String] {
        &self.names
    }

    /// Whether classifying reads a packet's headers beyond its [`Fields`] (a rule on
    /// addresses or ports, or the peer-to-peer heuristic).
    pub fn reads_headers(&self) -> bool {
        self.reads
    }

    /// Classify and record the class in the packet.
    pub fn classify<P: Pkt>(&mut self, now: Instant, pkt: &mut P) -> ClassId {
        let len = pkt.ip_len();
        let c = if self.reads {
            let h = pkt.headers();
            let flagged = match (&mut self.p2p, h) {
                (Some(p), Some(h)) => p.observe(now, h, len),
                _ => false,
            };
            let f = h.map(Fields::of);
            self.rules
                .iter()
                .zip(&self.fields)
                .find(|((m, _), (fm, _))| m.matches_parsed(fm, h, f.as_ref(), len, flagged))
                .map(|((_, c), _)| *c)
        } else {
            let f = pkt.fields();
            self.fields
                .iter()
                .find(|(m, _)| m.matches(f.as_ref(), len, false))
                .map(|(_, c)| *c)
        }
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

    /// Whether the peer-to-peer heuristic currently flags `host`.
    pub fn is_p2p_host(&self, host: IpAddr, now: Instant) -> bool {
        self.p2p.as_ref().is_some_and(|p| {
            p.hosts
                .get(&host)
                .and_then(|s| s.flagged_until)
                .is_some_and(|u| u > now)
        })
    }

    /// How many times a host became flagged.
    pub fn p2p_flagged_total(&self) -> u64 {
        self.p2p.as_ref().map(|p| p.flagged_total).unwrap_or(0)
    }

    /// Local hosts the peer-to-peer heuristic currently tracks (at most `max_hosts`).
    pub fn p2p_hosts(&self) -> usize {
        self.p2p.as_ref().map(|p| p.hosts.len()).unwrap_or(0)
    }

    /// Hosts the heuristic forgot to make room for new ones.
    pub fn p2p_evicted(&self) -> u64 {
        self.p2p.as_ref().map(|p| p.evicted).unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::wire::{Ecn, IpRepr, SackBlock, SeqNumber, TcpOptions, TcpRepr};

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

    /// The field conditions of a match read straight from its lists: what the compiled
    /// [`FieldMatch`] must answer.
    fn reference(m: &Match, f: Option<&Fields>, ip_len: u32, p2p_host: bool) -> bool {
        if m.p2p_host.is_some_and(|want| want != p2p_host) {
            return false;
        }
        if m.min_len.is_some_and(|x| ip_len < x) || m.max_len.is_some_and(|x| ip_len > x) {
            return false;
        }
        let Some(f) = f else {
            return !m.needs_headers();
        };
        m.proto.is_none_or(|p| p.0 == f.proto)
            && m.flags
                .as_ref()
                .is_none_or(|fl| f.tcp && fl.iter().all(|x| f.flags.contains(x.flag())))
            && m.pure_ack.is_none_or(|want| f.is_pure_ack() == want)
            && m.dscp.as_ref().is_none_or(|v| v.contains(&f.dscp))
    }

    /// The compiled field match answers as the match itself, for every combination of
    /// conditions and fields below (and for packets without fields).
    #[test]
    fn field_match_agrees_with_the_match() {
        let matches = [
            "{}",
            "{ dscp = [46, 48, 56] }",
            "{ dscp = [0] }",
            "{ dscp = [] }",
            "{ max_len = 200, pure_ack = false }",
            "{ min_len = 100, max_len = 1400 }",
            "{ pure_ack = true }",
            "{ flags = [\"syn\"] }",
            "{ flags = [\"syn\", \"ack\"], proto = \"tcp\" }",
            "{ flags = [] }",
            "{ proto = \"udp\", dscp = [10, 63] }",
            "{ p2p_host = true }",
            "{ p2p_host = false, min_len = 41 }",
        ];
        let flag_sets = [
            TcpFlags::NONE,
            TcpFlags::ACK,
            TcpFlags::SYN,
            TcpFlags::SYN | TcpFlags::ACK,
            TcpFlags::ACK | TcpFlags::PSH,
            TcpFlags::FIN | TcpFlags::ACK,
        ];
        let mut checked = 0;
        for src in matches {
            let m: Match = toml::from_str(&format!("m = {src}"))
                .map(|t: toml::Table| t["m"].clone().try_into().unwrap())
                .unwrap();
            let fm = FieldMatch::of(&m);
            for len in [40, 64, 100, 200, 201, 1400, 1500] {
                for p2p in [false, true] {
                    assert_eq!(
                        fm.matches(None, len, p2p),
                        reference(&m, None, len, p2p),
                        "{src}, no fields, {len}, {p2p}"
                    );
                    for (proto, tcp) in [(6, true), (17, false), (1, false)] {
                        for &flags in &flag_sets {
                            for dscp in [0, 10, 46, 48, 63] {
                                for payload_len in [0, 100] {
                                    let f = Fields {
                                        proto,
                                        tcp,
                                        dscp,
                                        ecn: Ecn::NotEct,
                                        flags: if tcp { flags } else { TcpFlags::NONE },
                                        payload_len,
                                    };
                                    assert_eq!(
                                        fm.matches(Some(&f), len, p2p),
                                        reference(&m, Some(&f), len, p2p),
                                        "{src}, {f:?}, {len}, {p2p}"
                                    );
                                    checked += 1;
                                }
                            }
                        }
                    }
                }
            }
        }
        assert_eq!(checked, 13 * 7 * 2 * 3 * 6 * 5 * 2);
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

    /// A packet that answers [`Pkt::fields`] but whose headers must not be read (as a
    /// simulator packet kept compact).
    struct Packed(HeaderPacket, bool);

    impl Pkt for Packed {
        fn ip_len(&self) -> u32 {
            self.0.ip_len()
        }
        fn headers(&self) -> Option<&Headers> {
            panic!("the headers are read")
        }
        fn class(&self) -> ClassId {
            self.0.class
        }
        fn set_class(&mut self, c: ClassId) {
            self.0.class = c;
        }
        fn set_tcp_window(&mut self, _: u16) -> bool {
            unreachable!()
        }
        fn set_dscp_ecn(&mut self, _: u8, _: crate::wire::Ecn) -> bool {
            unreachable!()
        }
        fn fields(&self) -> Option<Fields> {
            self.1.then(|| Fields::of(&self.0.hdr))
        }
    }

    #[test]
    fn rules_without_addresses_or_ports_read_only_the_fields() {
        let cfg = "default = \"bulk\"\nrules = [\
             { class = \"interactive\", match = { dscp = [46, 48, 56] } },\
             { class = \"interactive\", match = { max_len = 200, pure_ack = false } },\
             { class = \"syn\", match = { proto = \"tcp\", flags = [\"syn\"] } },\
             { class = \"short\", match = { max_len = 100 } }]";
        let mut c = cls(cfg);
        assert!(!c.reads_headers());
        let mut ef = tcp(TcpFlags::ACK, 1000, 80, false);
        ef.hdr.ip.dscp = 46;
        let cases = [
            (ef, "interactive"),
            (tcp(TcpFlags::ACK, 100, 80, false), "interactive"),
            (tcp(TcpFlags::ACK, 0, 80, false), "short"),
            (tcp(TcpFlags::ACK, 0, 80, true), "short"),
            (
                tcp(TcpFlags::ACK | TcpFlags::FIN, 0, 80, false),
                "interactive",
            ),
            (tcp(TcpFlags::SYN, 500, 80, false), "syn"),
            (tcp(TcpFlags::ACK, 1000, 80, false), "bulk"),
        ];
        for (p, want) in cases {
            let id = |n: &str| ClassId(c.class_names().iter().position(|x| x == n).unwrap() as u16);
            let (want, mut by_hdr) = (id(want), p.clone());
            let mut packed = Packed(p, true);
            assert_eq!(c.classify(Instant::ZERO, &mut packed), want);
            assert_eq!(packed.class(), want);
            // The same as the headers give.
            assert_eq!(cls(cfg).classify(Instant::ZERO, &mut by_hdr), want);
        }
        // Unparsed: only the rules on length alone match.
        let mut opaque = Packed(tcp(TcpFlags::ACK, 0, 80, false), false);
        assert_eq!(c.classify(Instant::ZERO, &mut opaque), ClassId(2));
        // A rule on ports or addresses, or the host heuristic, reads the headers.
        for other in [
            "rules = [{ class = \"x\", match = { port = [22] } }]",
            "rules = [{ class = \"x\", match = { src = [\"10.0.0.0/8\"] } }]",
            "preset = \"five_class\"",
        ] {
            assert!(cls(other).reads_headers(), "{other}");
        }
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

    fn pkt_from(
        src: &str,
        dst: &str,
        sport: u16,
        dport: u16,
        flags: TcpFlags,
        payload: u32,
    ) -> HeaderPacket {
        HeaderPacket::new(Headers::tcp(
            IpRepr::new(src.parse().unwrap(), dst.parse().unwrap()),
            TcpRepr {
                src_port: sport,
                dst_port: dport,
                seq: SeqNumber(1),
                ack: SeqNumber(1),
                flags,
                window: 1000,
                urgent: 0,
                opts: TcpOptions::default(),
            },
            payload,
        ))
    }

    fn name(c: &Classifier, id: ClassId) -> &str {
        if id.is_some() {
            &c.class_names()[id.0 as usize]
        } else {
            "(none)"
        }
    }

    #[test]
    fn five_class_preset() {
        let mut c = cls("preset = \"five_class\"");
        assert_eq!(
            c.class_names(),
            &["ack", "interactive", "bad", "good", "default"]
        );
        let a = TcpFlags::ACK;
        let cases: Vec<(HeaderPacket, &str)> = vec![
            (tcp(a, 0, 6881, true), "ack"), // a SACK-bearing ACK of a p2p flow: still ack
            (tcp(a, 100, 22, false), "interactive"),
            (tcp(a, 100, 6667, false), "interactive"),
            (tcp(a, 1000, 6882, false), "bad"),
            (tcp(a, 1000, 4662, false), "bad"),
            (tcp(TcpFlags::SYN, 0, 40001, false), "good"),
            (tcp(TcpFlags::SYN | a, 0, 40001, false), "good"),
            (tcp(a, 1000, 80, false), "good"),
            (tcp(a, 1000, 12345, false), "default"),
            (tcp(a | TcpFlags::FIN, 0, 12345, false), "default"),
        ];
        for (mut p, want) in cases {
            let got = c.classify(Instant::ZERO, &mut p);
            assert_eq!(name(&c, got), want, "{:?}", p.hdr.transport);
        }
        // UDP: DNS is good; a probe marked EF is interactive.
        let mut dns = HeaderPacket::new(Headers {
            ip: IpRepr::new("10.0.0.1".parse().unwrap(), "192.0.2.1".parse().unwrap()),
            transport: Transport::Udp(crate::wire::UdpRepr {
                src_port: 40000,
                dst_port: 53,
            }),
            payload_len: 40,
        });
        let got = c.classify(Instant::ZERO, &mut dns);
        assert_eq!(name(&c, got), "good");
        dns.hdr.ip.dscp = 46;
        if let Transport::Udp(u) = &mut dns.hdr.transport {
            u.dst_port = 9999;
        }
        let got = c.classify(Instant::ZERO, &mut dns);
        assert_eq!(name(&c, got), "interactive");
        // Rules given explicitly come first.
        let mut c = cls(
            "preset = \"five_class\"\nrules = [{ class = \"interactive\", match = { port = [\"2222\"] } }]",
        );
        let got = c.classify(Instant::ZERO, &mut tcp(a, 10, 2222, false));
        assert_eq!(name(&c, got), "interactive");
    }

    #[test]
    fn p2p_host_heuristic() {
        // 100 kbit/s threshold, 1 s window, 5 s hold; the LAN is 10.0.0.0/24.
        let mut c = cls("preset = \"five_class\"\nlocal = [\"10.0.0.0/24\"]\n\
             p2p_hosts = { threshold = \"100kbit\", window = \"1s\", hold = \"5s\" }");
        let a = TcpFlags::ACK;
        let web = |t: u64, c: &mut Classifier| {
            let mut p = pkt_from("10.0.0.5", "192.0.2.9", 40000, 80, a, 1460);
            let id = c.classify(Instant::from_millis(t), &mut p);
            name(c, id).to_string()
        };
        // 1500-byte packets every 10 ms: 1.2 Mbit/s, well above the threshold, but no
        // peer-to-peer contact: good.
        for t in (0..2000).step_by(10) {
            assert_eq!(web(t, &mut c), "good");
        }
        // One packet to a remote BitTorrent port: bad by its port, and the host is flagged.
        let mut p2p = pkt_from("10.0.0.5", "198.51.100.7", 40001, 6881, a, 1460);
        let id = c.classify(Instant::from_millis(2000), &mut p2p);
        assert_eq!(name(&c, id), "bad");
        assert!(c.is_p2p_host("10.0.0.5".parse().unwrap(), Instant::from_millis(2000)));
        // Now all its traffic is bad ...
        assert_eq!(web(2010, &mut c), "bad");
        // ... in both directions (the remote side's source port is the p2p port) ...
        let mut back = pkt_from("192.0.2.9", "10.0.0.5", 80, 40000, a, 1460);
        let id = c.classify(Instant::from_millis(2020), &mut back);
        assert_eq!(name(&c, id), "bad");
        // ... except its pure ACKs, which stay in the ack class.
        let mut ack = pkt_from("10.0.0.5", "192.0.2.9", 40000, 80, a, 0);
        let id = c.classify(Instant::from_millis(2030), &mut ack);
        assert_eq!(name(&c, id), "ack");
        // Another host is not affected.
        let mut other = pkt_from("10.0.0.6", "192.0.2.9", 40000, 80, a, 1460);
        let id = c.classify(Instant::from_millis(2040), &mut other);
        assert_eq!(name(&c, id), "good");
        // The host keeps qualifying while the contact is at most the window (1 s) old,
        // i.e. until 3000 ms; the flag then lasts the hold (5 s): until 8000 ms.
        for t in (2050..8000).step_by(10) {
            assert_eq!(web(t, &mut c), "bad", "at {t} ms");
        }
        assert_eq!(web(8000, &mut c), "good");
        assert_eq!(c.p2p_flagged_total(), 1);
        // A host below the threshold talking to a p2p port is not flagged.
        let mut slow = pkt_from("10.0.0.7", "198.51.100.7", 40001, 6881, a, 100);
        c.classify(Instant::from_secs(10), &mut slow);
        let mut slow_web = pkt_from("10.0.0.7", "192.0.2.9", 40000, 80, a, 100);
        let id = c.classify(Instant::from_secs(10), &mut slow_web);
        assert_eq!(name(&c, id), "good");
    }

    #[test]
    fn p2p_host_table_is_bounded_and_keeps_flagged_hosts() {
        let mut c = cls("preset = \"five_class\"\nlocal = [\"10.0.0.0/8\"]\n\
             p2p_hosts = { threshold = \"100kbit\", window = \"1s\", hold = \"60s\", max_hosts = 8 }");
        let a = TcpFlags::ACK;
        // Host 10.0.0.5 is flagged ...
        for t in (0..1000).step_by(10) {
            let mut p = pkt_from("10.0.0.5", "198.51.100.7", 40001, 6881, a, 1460);
            c.classify(Instant::from_millis(t), &mut p);
        }
        assert!(c.is_p2p_host("10.0.0.5".parse().unwrap(), Instant::from_millis(1000)));
        // ... then a flood of 10 000 other local source addresses passes.
        for i in 0..10_000u32 {
            let src = format!("10.1.{}.{}", i / 250, i % 250 + 1);
            let mut p = pkt_from(&src, "192.0.2.9", 40000, 80, a, 100);
            c.classify(Instant::from_millis(1000 + i as u64 / 10), &mut p);
            assert!(c.p2p_hosts() <= 8);
        }
        assert_eq!(c.p2p_evicted(), 10_000 - 7);
        // The flag survived the flood.
        let mut web = pkt_from("10.0.0.5", "192.0.2.9", 40000, 80, a, 1460);
        let id = c.classify(Instant::from_secs(3), &mut web);
        assert_eq!(name(&c, id), "bad");
    }

    #[test]
    fn p2p_config_errors() {
        for (src, needle) in [
            (
                "preset = \"five_class\"\np2p_hosts = { threshold = \"1Mbit\" }",
                "needs 'local'",
            ),
            (
                "rules = [{ class = \"x\", match = { p2p_host = true } }]",
                "no p2p_hosts",
            ),
        ] {
            let cfg: ClassifierConfig = toml::from_str(src).unwrap();
            let e = Classifier::new(&cfg).unwrap_err();
            assert!(e.msg.contains(needle), "{e}");
        }
        let e = toml::from_str::<ClassifierConfig>("preset = \"six_class\"")
            .unwrap_err()
            .to_string();
        assert!(e.contains("six_class"), "{e}");
    }
}
