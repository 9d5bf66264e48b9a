//! Scripted loss: the `drop` list of a link direction, which drops chosen packets instead
//! of random ones, so a test or a conformance case can lose exactly the segment it is
//! about, in the simulator and in the live box alike.
//!
//! ```toml
//! drop = ["data:30", "data:31", "ack:5", "syn:1"]         # the Nth packet of a kind
//! drop = [{ flow = "download", seq = 43441, tx = 2 }]      # a segment's k-th transmission
//! ```
//!
//! * **`"kind:N"`** drops the `N`th packet of that kind to pass this direction (1-based;
//!   every transmission counts, retransmissions included). Kinds:
//!   - `data`: a TCP segment carrying payload (whatever its flags);
//!   - `ack`: a pure ACK: TCP with ACK set, no payload, none of SYN, FIN, RST;
//!   - `syn`: SYN set (a SYN or a SYN-ACK);
//!   - `fin`: FIN set (with or without payload: a FIN with data is also `data`);
//!   - `rst`: RST set;
//!   - `packet`: any packet, TCP or not.
//! * **`{ flow, port, seq, tx }`** drops the `tx`th transmission (default 1) of the TCP
//!   segment whose sequence number is `seq`, relative to the initial sequence number of
//!   its sender (the SYN is 0, the first data byte 1, as tcpdump and Wireshark count).
//!   The link learns each connection's initial sequence number from the SYN or SYN-ACK it
//!   sees in this direction — the sender's, since a sender's SYN travels the way its data
//!   does; a connection whose SYN it did not see is never matched. Only segments that
//!   carry data or FIN are counted. `flow` names a scenario flow (simulator only; the
//!   simulator matches its two hosts and its port); `port` matches connections with that
//!   port at either end; with neither, every TCP connection in the direction matches,
//!   each counted on its own.
//!
//! Counts are taken where random loss is drawn: as the transmission starts, after the
//! discipline and the modem buffer, so a packet those dropped is not counted. A scripted
//! drop is a `link_loss` like a random one (counted in `lost` and in `scripted`); the
//! random stream is drawn for every packet whether or not a script drops it, so adding a
//! script does not move the random losses.

use crate::config::ConfigError;
use crate::packet::Pkt;
use crate::wire::{FlowKey, Headers, TcpFlags};
use core::fmt;
use core::net::IpAddr;
use serde::Deserialize;
use std::collections::BTreeMap;

/// A kind of packet counted by `"kind:N"` rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PktKind {
    /// TCP with payload.
    Data,
    /// A pure ACK (no payload, no SYN/FIN/RST).
    Ack,
    /// SYN set (SYN or SYN-ACK).
    Syn,
    /// FIN set.
    Fin,
    /// RST set.
    Rst,
    /// Any packet.
    Packet,
}

impl PktKind {
    /// Every kind, in counter order.
    pub const ALL: [PktKind; 6] = [
        PktKind::Data,
        PktKind::Ack,
        PktKind::Syn,
        PktKind::Fin,
        PktKind::Rst,
        PktKind::Packet,
    ];

    /// The name written in a rule.
    pub fn name(self) -> &'static str {
        match self {
            PktKind::Data => "data",
            PktKind::Ack => "ack",
            PktKind::Syn => "syn",
            PktKind::Fin => "fin",
            PktKind::Rst => "rst",
            PktKind::Packet => "packet",
        }
    }

    /// Whether a packet with headers `h` (`None`: unparsed) is of this kind.
    pub fn matches(self, h: Option<&Headers>) -> bool {
        if self == PktKind::Packet {
            return true;
        }
        let Some(h) = h else { return false };
        let Some(t) = h.tcp_repr() else { return false };
        match self {
            PktKind::Data => h.payload_len > 0,
            PktKind::Ack => h.is_pure_ack(),
            PktKind::Syn => t.flags.contains(TcpFlags::SYN),
            PktKind::Fin => t.flags.contains(TcpFlags::FIN),
            PktKind::Rst => t.flags.contains(TcpFlags::RST),
            PktKind::Packet => true,
        }
    }
}

/// `"kind:N"`: the `n`th packet of `kind` (1-based).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NthDrop {
    /// The kind counted.
    pub kind: PktKind,
    /// Which one, 1-based.
    pub n: u64,
}

impl core::str::FromStr for NthDrop {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<NthDrop, ConfigError> {
        let names = || {
            PktKind::ALL
                .iter()
                .map(|k| k.name())
                .collect::<Vec<_>>()
                .join(", ")
        };
        let Some((k, n)) = s.split_once(':') else {
            return Err(ConfigError::value(format!(
                "'{s}' is not a drop rule; write 'kind:N' (e.g. 'data:30') or a table \
                 {{ seq = ..., tx = ... }}"
            )));
        };
        let kind = PktKind::ALL
            .into_iter()
            .find(|x| x.name() == k.trim())
            .ok_or_else(|| {
                ConfigError::value(format!(
                    "unknown packet kind '{k}' in '{s}'; kinds are {}",
                    names()
                ))
            })?;
        let n: u64 = n.trim().parse().map_err(|_| {
            ConfigError::value(format!("'{s}': '{n}' is not a packet count (e.g. '{k}:3')"))
        })?;
        if n == 0 {
            return Err(ConfigError::value(format!(
                "'{s}': counts start at 1 ('{k}:1' is the first)"
            )));
        }
        Ok(NthDrop { kind, n })
    }
}

impl fmt::Display for NthDrop {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.n)
    }
}

/// `{ flow, port, seq, tx }`: the `tx`th transmission of the segment at relative sequence
/// number `seq`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentDrop {
    /// A scenario flow's name (the simulator resolves it to its hosts and port).
    #[serde(default)]
    pub flow: Option<String>,
    /// Connections with this port at either end.
    #[serde(default)]
    pub port: Option<u16>,
    /// The segment's first sequence number, relative to its sender's ISN (data starts
    /// at 1).
    pub seq: u32,
    /// Which transmission of it, 1-based (default 1: the original).
    #[serde(default = "one")]
    pub tx: u32,
    /// The two addresses of the flow `flow` names, set by the simulator.
    #[serde(skip)]
    pub hosts: Option<(IpAddr, IpAddr)>,
}

fn one() -> u32 {
    1
}

impl SegmentDrop {
    /// Whether a TCP packet with key `k` belongs to the connections this rule watches.
    fn watches(&self, k: &FlowKey) -> bool {
        self.port.is_none_or(|p| k.src_port == p || k.dst_port == p)
            && self
                .hosts
                .is_none_or(|(a, b)| (k.src == a && k.dst == b) || (k.src == b && k.dst == a))
    }
}

/// One entry of a `drop` list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DropRule {
    /// `"kind:N"`.
    Nth(NthDrop),
    /// `{ seq, tx, ... }`.
    Segment(SegmentDrop),
}

impl<'de> Deserialize<'de> for DropRule {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = DropRule;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a drop rule: 'kind:N' (e.g. 'data:30') or { seq = ..., tx = ... }")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<DropRule, E> {
                v.parse().map(DropRule::Nth).map_err(E::custom)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<DropRule, A::Error> {
                SegmentDrop::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(DropRule::Segment)
            }
        }
        d.deserialize_any(V)
    }
}

/// Check a `drop` list; errors name `drop[i]` or `drop[i].key`.
pub fn validate(rules: &[DropRule]) -> Result<(), ConfigError> {
    for (i, r) in rules.iter().enumerate() {
        let DropRule::Segment(s) = r else { continue };
        let at = |k: &str, m: &str| Err(ConfigError::new(format!("drop[{i}].{k}"), m));
        if s.tx == 0 {
            return at(
                "tx",
                "transmissions are counted from 1 (tx = 1 is the original)",
            );
        }
        if s.seq == 0 {
            return at(
                "seq",
                "sequence numbers are relative to the ISN: the SYN is 0, data starts at 1",
            );
        }
        if s.flow.as_deref().is_some_and(str::is_empty) {
            return at("flow", "must name a flow");
        }
    }
    Ok(())
}

/// Per-connection state of the segment rules.
#[derive(Debug)]
struct Conn {
    isn: u32,
    /// Transmissions seen, per segment rule.
    seen: Vec<u32>,
}

/// At most this many connections are tracked per direction (the box may see many).
const MAX_CONNS: usize = 65_536;

/// The running state of a `drop` list on one link direction.
#[derive(Debug)]
pub struct Script {
    rules: Vec<DropRule>,
    nth: Vec<NthDrop>,
    segs: Vec<SegmentDrop>,
    counts: [u64; PktKind::ALL.len()],
    conns: BTreeMap<FlowKey, Conn>,
    dropped: u64,
}

impl Script {
    /// The state of `rules`, counting from zero; `None` for an empty list.
    pub fn new(rules: &[DropRule]) -> Option<Script> {
        if rules.is_empty() {
            return None;
        }
        let mut nth = Vec::new();
        let mut segs = Vec::new();
        for r in rules {
            match r {
                DropRule::Nth(n) => nth.push(*n),
                DropRule::Segment(s) => segs.push(s.clone()),
            }
        }
        Some(Script {
            rules: rules.to_vec(),
            nth,
            segs,
            counts: [0; PktKind::ALL.len()],
            conns: BTreeMap::new(),
            dropped: 0,
        })
    }

    /// The rules this state runs.
    pub fn rules(&self) -> &[DropRule] {
        &self.rules
    }

    /// Packets this script dropped.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Count `p`'s transmission; whether a rule drops it.
    pub fn on_transmit<P: Pkt>(&mut self, p: &P) -> bool {
        let h = p.headers();
        let mut drop = false;
        for (i, k) in PktKind::ALL.into_iter().enumerate() {
            if k.matches(h) {
                self.counts[i] += 1;
                let n = self.counts[i];
                drop |= self.nth.iter().any(|r| r.kind == k && r.n == n);
            }
        }
        if !self.segs.is_empty() {
            if let Some(h) = h {
                drop |= self.segment(h);
            }
        }
        if drop {
            self.dropped += 1;
        }
        drop
    }

    /// The segment rules: learn ISNs from SYNs, count transmissions of watched segments.
    fn segment(&mut self, h: &Headers) -> bool {
        let Some(t) = h.tcp_repr() else { return false };
        let key = h.flow_key();
        if !self.segs.iter().any(|s| s.watches(&key)) {
            return false;
        }
        if t.flags.contains(TcpFlags::SYN) {
            if self.conns.len() < MAX_CONNS || self.conns.contains_key(&key) {
                // A new SYN (a reused port) starts the count afresh; a retransmitted one
                // (same ISN) keeps it.
                let n = self.segs.len();
                let c = self.conns.entry(key).or_insert(Conn {
                    isn: t.seq.0,
                    seen: vec![0; n],
                });
                if c.isn != t.seq.0 {
                    *c = Conn {
                        isn: t.seq.0,
                        seen: vec![0; n],
                    };
                }
            }
            return false;
        }
        if h.payload_len == 0 && !t.flags.contains(TcpFlags::FIN) {
            return false;
        }
        let Some(c) = self.conns.get_mut(&key) else {
            return false;
        };
        let rel = t.seq.0.wrapping_sub(c.isn);
        let mut drop = false;
        for (s, seen) in self.segs.iter().zip(c.seen.iter_mut()) {
            if s.seq == rel && s.watches(&key) {
                *seen += 1;
                drop |= *seen == s.tx;
            }
        }
        drop
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::wire::{IpRepr, SeqNumber, TcpRepr, Transport, UdpRepr};
    use core::net::Ipv4Addr;

    fn ip(a: u8, b: u8) -> IpRepr {
        IpRepr::new(
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, a)),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, b)),
        )
    }

    fn tcp(sport: u16, seq: u32, flags: TcpFlags, len: u32) -> HeaderPacket {
        HeaderPacket::new(Headers::tcp(
            ip(1, 2),
            TcpRepr {
                src_port: sport,
                dst_port: 80,
                seq: SeqNumber(seq),
                ack: SeqNumber(7),
                flags,
                window: 100,
                urgent: 0,
                opts: Default::default(),
            },
            len,
        ))
    }

    fn rules(src: &str) -> Vec<DropRule> {
        #[derive(Deserialize)]
        struct T {
            drop: Vec<DropRule>,
        }
        toml::from_str::<T>(src).unwrap().drop
    }

    const A: TcpFlags = TcpFlags::ACK;

    #[test]
    fn kinds_are_counted_separately_retransmissions_included() {
        let mut s =
            Script::new(&rules(r#"drop = ["data:2", "data:3", "ack:2", "syn:1"]"#)).unwrap();
        let syn = tcp(1, 100, TcpFlags::SYN, 0);
        let synack = tcp(1, 100, TcpFlags::SYN | A, 0);
        let ack = tcp(1, 101, A, 0);
        let d1 = tcp(1, 101, A, 1000);
        let fin = tcp(1, 1101, A | TcpFlags::FIN, 0);
        let got: Vec<bool> = [&syn, &synack, &ack, &d1, &ack, &d1, &d1, &fin, &ack]
            .iter()
            .map(|p| s.on_transmit(*p))
            .collect();
        // syn:1 is the SYN (the SYN-ACK is syn 2); ack:2 the second pure ACK; data 2 and
        // 3 are the two retransmissions of the same segment; a FIN is not a pure ACK.
        assert_eq!(
            got,
            [true, false, false, false, true, true, true, false, false]
        );
        assert_eq!(s.dropped(), 4);
        // UDP is a packet of no TCP kind.
        let mut s = Script::new(&rules(r#"drop = ["packet:2", "data:1"]"#)).unwrap();
        let udp = HeaderPacket::new(Headers {
            ip: ip(1, 2),
            transport: Transport::Udp(UdpRepr {
                src_port: 1,
                dst_port: 2,
            }),
            payload_len: 100,
        });
        assert!(!s.on_transmit(&udp));
        assert!(s.on_transmit(&udp));
        assert!(!s.on_transmit(&udp));
        assert!(s.on_transmit(&d1));
    }

    #[test]
    fn segments_by_relative_sequence_and_transmission() {
        // ISN 4_294_967_000: relative numbers wrap.
        let isn = 4_294_967_000u32;
        let rel = |r: u32| isn.wrapping_add(r);
        let mut s = Script::new(&rules(
            "drop = [{ seq = 1449, tx = 2 }, { seq = 2897 }, { port = 9, seq = 1 }]",
        ))
        .unwrap();
        // Data before the SYN was seen: not matched.
        assert!(!s.on_transmit(&tcp(5, rel(2897), A, 1448)));
        assert!(!s.on_transmit(&tcp(5, isn, TcpFlags::SYN | A, 0)));
        let seg = |r| tcp(5, rel(r), A, 1448);
        let got: Vec<bool> = [1, 1449, 2897, 1449, 2897, 1449]
            .iter()
            .map(|&r| s.on_transmit(&seg(r)))
            .collect();
        assert_eq!(got, [false, false, true, true, false, false]);
        // Another connection (another port) counts on its own; the port-9 rule does not
        // watch either.
        assert!(!s.on_transmit(&tcp(6, 55, TcpFlags::SYN, 0)));
        assert!(!s.on_transmit(&tcp(6, 55 + 1449, A, 1448)));
        assert!(s.on_transmit(&tcp(6, 55 + 1449, A, 1448)));
        // A pure ACK at the same number is not a transmission of the segment.
        assert!(!s.on_transmit(&tcp(6, 55 + 2897, A, 0)));
        assert!(s.on_transmit(&tcp(6, 55 + 2897, A, 100)));
    }

    #[test]
    fn flows_are_matched_by_hosts_and_port() {
        let (a, b) = (ip(1, 2).src, ip(1, 2).dst);
        let with = |hosts| {
            let mut r = rules("drop = [{ flow = \"dl\", seq = 1 }]");
            if let DropRule::Segment(s) = &mut r[0] {
                s.hosts = Some(hosts);
                s.port = Some(80);
            }
            Script::new(&r).unwrap()
        };
        let mut sc = with((b, a));
        assert!(!sc.on_transmit(&tcp(3, 10, TcpFlags::SYN, 0)));
        assert!(sc.on_transmit(&tcp(3, 11, A, 10)));
        let mut sc = with((a, ip(9, 9).dst));
        assert!(!sc.on_transmit(&tcp(3, 10, TcpFlags::SYN, 0)));
        assert!(!sc.on_transmit(&tcp(3, 11, A, 10)), "other hosts");
    }

    #[test]
    fn errors_name_the_rule() {
        #[derive(Debug, Deserialize)]
        #[allow(dead_code)]
        struct T {
            drop: Vec<DropRule>,
        }
        for (src, want) in [
            (r#"drop = ["data"]"#, "not a drop rule"),
            (r#"drop = ["dta:3"]"#, "unknown packet kind 'dta'"),
            (r#"drop = ["data:0"]"#, "counts start at 1"),
            (r#"drop = ["data:x"]"#, "not a packet count"),
            (r#"drop = [{ sq = 3 }]"#, "unknown field `sq`"),
            (r#"drop = [3]"#, "a drop rule"),
        ] {
            let e = crate::config::from_toml::<T>(src).unwrap_err();
            assert!(e.to_string().contains(want), "{src}: {e}");
            assert!(e.path.starts_with("drop"), "{src}: {e}");
        }
        for (src, key) in [
            ("drop = [\"ack:1\", { seq = 5, tx = 0 }]", "drop[1].tx"),
            ("drop = [{ seq = 0 }]", "drop[0].seq"),
            ("drop = [{ flow = \"\", seq = 1 }]", "drop[0].flow"),
        ] {
            assert_eq!(validate(&rules(src)).unwrap_err().path, key);
        }
        assert!(validate(&rules(r#"drop = ["ack:1", { seq = 5 }]"#)).is_ok());
    }
}
