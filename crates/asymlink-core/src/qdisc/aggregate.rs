//! Aggregate shaper: the rate control of TCP connection aggregates (Mehra, Tewari &
//! Kandlur) as an egress queue discipline with one queue per connection.
//!
//! # Principles
//!
//! The token accounting is the core [`crate::aggregate`] controller, unchanged: policies
//! (a filter ⟨src, dst, src_port, dst_port⟩ with wildcards, a profile ⟨B, r_m, r_p, L_m⟩,
//! an action, a token-sharing scheme) and the shaping timer. What this discipline adds is
//! the part a host's TCP output routine plays in the paper: it holds each connection's
//! packets in their own FIFO and asks the controller for each queue's head.
//!
//! * A packet is keyed by its flow in its direction of travel (the packet's source is the
//!   controlled end). The first packet of a flow opens the connection in the controller,
//!   which puts it in the first policy whose filter matches. FIN or RST closes it once its
//!   queue has drained; a connection idle for `idle` with nothing queued is closed too.
//! * **Shape**: a connection whose head conforms sends it (marked if the action sets a
//!   DSCP); otherwise the head waits and the controller names the instant it will serve
//!   the waiters ([`Qdisc::poll_at`]). At that instant the woken connections are served
//!   one packet at a time in the policy's service order, round after round, until each
//!   waits again or is empty: the per-connection queues share the tokens as the scheme
//!   says (partitioned, common sequential/FCFS/LRU, logical).
//! * **Police and mark**: nothing waits; in-profile packets get the policy's DSCP, the
//!   rest its out-of-profile DSCP (IPv4 header checksum updated by the packet's
//!   `set_dscp_ecn`). **Police and drop**: out-of-profile packets are dropped
//!   ([`DropReason::Policed`]).
//! * Traffic no filter matches (and packets that are neither TCP nor UDP, or could not be
//!   parsed) passes through unconditioned, in arrival order with what the shaper releases.
//! * A packet larger than L_m cannot conform: a shaped one is dropped as
//!   [`DropReason::TooBig`] on arrival (it would block its queue forever).
//!
//! State is bounded: at most `max_conns` connections are tracked. A new flow beyond that
//! evicts the least recently active connection with nothing queued; if every tracked
//! connection has packets queued, the new flow's packet is dropped
//! ([`DropReason::StateFull`]) rather than let through unshaped. Queues are bounded per
//! connection (`flow_limit`) and as a whole (`limit`); a packet beyond either is dropped at
//! the tail ([`DropReason::QueueFull`]).
//!
//! The live box sees no RTTs: RTT-weighted depths use each policy's `default_rtt` (equal
//! shares without it).
//!
//! # Worked example
//!
//! ```toml
//! kind = "aggregate"
//! timer = "0s"                 # exact: serve each waiter when it conforms
//! max_conns = 1024
//! [[policies]]
//! filter = { src = "10.0.0.1", src_port = "*" }
//! profile = { depth = "6KB", rate = "3Mbit", max_packet = "1500B" }
//! action = { kind = "shape" }
//! scheme = { kind = "logical", depth = "equal" }
//! ```
//!
//! Three bulk connections from 10.0.0.1 each get a partition filling at 1 Mbit/s (one
//! 1500-byte packet every 12 ms) with a 2 KB depth; together they leave at 3 Mbit/s
//! whatever the link behind the discipline (if it is faster). If one of them has nothing
//! queued, its partition fills and the overflow goes to the other two: 1.5 Mbit/s each.

use super::{Backlog, ConfigError, Dequeued, DropReason, Drops, Qdisc, QdiscStats, Verdict};
use crate::aggregate::{
    ActionConfig, ConnKey, Controller, ControllerConfig, Decision, FlowTuple, Joined, PolicyConfig,
    Triggers,
};
use crate::packet::Pkt;
use crate::time::{Duration, Instant};
use crate::units::{Limit, Span};
use crate::wire::{FlowKey, TcpFlags, Transport};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

/// Aggregate shaper parameters.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AggregateConfig {
    /// The shaping timer; `"0s"` (default) serves each waiting connection at the exact
    /// instant it conforms, `"15ms"` is the paper's coarse timer.
    #[serde(default)]
    pub timer: Span,
    /// Which events serve waiting connections (`own` or `aggregate`).
    #[serde(default)]
    pub triggers: Triggers,
    /// Connections tracked at most (beyond: evict an idle one, else drop).
    #[serde(default = "default_max_conns")]
    pub max_conns: u32,
    /// Everything queued together (default 1000 packets).
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// One connection's queue (default 100 packets).
    #[serde(default = "default_flow_limit")]
    pub flow_limit: Limit,
    /// A connection with nothing queued and no packet for this long is closed (default 5 s).
    #[serde(default = "default_idle")]
    pub idle: Span,
    /// The policies, matched in order.
    pub policies: Vec<PolicyConfig>,
}

fn default_max_conns() -> u32 {
    1024
}
fn default_limit() -> Limit {
    Limit::Packets(1000)
}
fn default_flow_limit() -> Limit {
    Limit::Packets(100)
}
fn default_idle() -> Span {
    Span(Duration::from_secs(5))
}

#[derive(Debug)]
struct Conn<P> {
    flow: FlowKey,
    policy: usize,
    q: VecDeque<P>,
    bytes: u64,
    last: Instant,
    closing: bool,
}

/// Counters beyond [`QdiscStats`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AggregateCounters {
    /// Connections opened (joined a policy).
    pub opened: u64,
    /// Connections closed (FIN/RST drained, idle, evicted).
    pub closed: u64,
    /// Connections evicted to make room for a new one.
    pub evicted: u64,
    /// Packets no policy matched (passed through).
    pub unmatched_packets: u64,
    /// Packets sent in profile.
    pub in_profile: u64,
    /// Packets sent out of profile (police and mark).
    pub out_profile: u64,
    /// Packets marked with a DSCP.
    pub marked: u64,
    /// Times a connection's head had to wait for tokens.
    pub waits: u64,
}

/// The aggregate shaper. See the module documentation.
#[derive(Debug)]
pub struct Aggregate<P> {
    ctl: Controller,
    policies: Vec<PolicyConfig>,
    max_conns: usize,
    limit: Limit,
    flow_limit: Limit,
    idle: Duration,
    flows: HashMap<FlowKey, ConnKey>,
    conns: BTreeMap<ConnKey, Conn<P>>,
    /// The connections with nothing queued, by (last activity, key): the eviction victim
    /// is the first, and the idle sweep takes a prefix (no scan of the table).
    idle_conns: BTreeSet<(Instant, ConnKey)>,
    next_key: ConnKey,
    ready: VecDeque<P>,
    now: Instant,
    next_sweep: Instant,
    woken: Vec<ConnKey>,
    /// What is really held (ready queue and connection queues), kept apart from the
    /// counters so that the conservation check compares two accounts.
    held: Backlog,
    counters: AggregateCounters,
    stats: QdiscStats,
}

impl<P: Pkt> Aggregate<P> {
    /// Build from configuration (the controller validates the policies; errors name the
    /// key under `aggregate.`).
    pub fn new(cfg: &AggregateConfig) -> Result<Self, ConfigError> {
        let err = |k: &str, m: &str| ConfigError::new(format!("aggregate.{k}"), m);
        if cfg.max_conns == 0 {
            return Err(err("max_conns", "must be positive"));
        }
        for (k, l) in [("limit", cfg.limit), ("flow_limit", cfg.flow_limit)] {
            if matches!(l, Limit::Packets(0) | Limit::Bytes(0)) {
                return Err(err(k, "must be positive"));
            }
        }
        if cfg.idle.0.is_zero() {
            return Err(err("idle", "must be positive"));
        }
        let ctl_cfg = ControllerConfig {
            timer: cfg.timer,
            triggers: cfg.triggers,
            max_conns: cfg.max_conns,
            policies: cfg.policies.clone(),
        };
        let ctl = Controller::new(&ctl_cfg).map_err(|e| e.within("aggregate"))?;
        Ok(Aggregate {
            ctl,
            policies: cfg.policies.clone(),
            max_conns: cfg.max_conns as usize,
            limit: cfg.limit,
            flow_limit: cfg.flow_limit,
            idle: cfg.idle.0,
            flows: HashMap::new(),
            conns: BTreeMap::new(),
            idle_conns: BTreeSet::new(),
            next_key: 1,
            ready: VecDeque::new(),
            now: Instant::ZERO,
            next_sweep: Instant::ZERO,
            woken: Vec::new(),
            held: Backlog::default(),
            counters: AggregateCounters::default(),
            stats: QdiscStats::default(),
        })
    }

    /// The controller (per-policy aggregates and their counters).
    pub fn controller(&self) -> &Controller {
        &self.ctl
    }

    /// Counters beyond [`QdiscStats`].
    pub fn aggregate_counters(&self) -> AggregateCounters {
        self.counters
    }

    /// Connections tracked.
    pub fn tracked(&self) -> usize {
        self.conns.len()
    }

    fn clock(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    fn close(&mut self, now: Instant, key: ConnKey) {
        if let Some(c) = self.conns.remove(&key) {
            debug_assert!(c.q.is_empty());
            self.idle_conns.remove(&(c.last, key));
            self.flows.remove(&c.flow);
            self.ctl.handle_close(now, key);
            self.counters.closed += 1;
        }
    }

    /// Close connections with nothing queued that have been idle for `idle`.
    fn sweep(&mut self, now: Instant) {
        if now < self.next_sweep {
            return;
        }
        self.next_sweep = now.saturating_add(self.idle / 4);
        while let Some(&(last, k)) = self.idle_conns.first() {
            if now.saturating_since(last) < self.idle {
                break;
            }
            self.close(now, k);
        }
    }

    /// The connection of `flow`, opening it if needed. `Err(true)`: the table is full of
    /// connections with queued packets; `Err(false)`: no policy matched.
    fn conn_for(&mut self, now: Instant, flow: FlowKey) -> Result<ConnKey, bool> {
        if let Some(&k) = self.flows.get(&flow) {
            return Ok(k);
        }
        let tuple = FlowTuple {
            src: flow.src,
            src_port: flow.src_port,
            dst: flow.dst,
            dst_port: flow.dst_port,
        };
        // Only flows some policy takes need a slot.
        let Some(policy) = self.policies.iter().position(|p| p.filter.matches(&tuple)) else {
            return Err(false);
        };
        if self.conns.len() >= self.max_conns {
            // The least recently active connection with nothing queued.
            let victim = self.idle_conns.first().map(|&(_, k)| k);
            match victim {
                Some(k) => {
                    self.close(now, k);
                    self.counters.evicted += 1;
                }
                None => return Err(true),
            }
        }
        let key = self.next_key;
        self.next_key += 1;
        match self.ctl.handle_open(now, key, &tuple) {
            Joined::Policy(p) => debug_assert_eq!(p, policy),
            // Cannot happen: the filter matched and the tables have the same bound.
            Joined::Unmatched | Joined::Untracked => return Err(true),
        }
        self.counters.opened += 1;
        self.flows.insert(flow, key);
        self.idle_conns.insert((now, key));
        self.conns.insert(
            key,
            Conn {
                flow,
                policy,
                q: VecDeque::new(),
                bytes: 0,
                last: now,
                closing: false,
            },
        );
        Ok(key)
    }

    fn mark(&mut self, pkt: &mut P, d: Decision) {
        if let Decision::Mark(dscp) = d {
            let ecn = pkt.headers().map(|h| h.ip.ecn);
            if let Some(ecn) = ecn {
                if pkt.set_dscp_ecn(dscp, ecn) {
                    self.counters.marked += 1;
                }
            }
        }
    }

    /// Ask the controller for connection `key`'s head. Returns true if the head left (sent
    /// or dropped) and more is queued without waiting.
    fn try_head(&mut self, now: Instant, key: ConnKey, drops: &mut Drops<P>) -> bool {
        let Some(c) = self.conns.get_mut(&key) else {
            return false;
        };
        let Some(len) = c.q.front().map(Pkt::ip_len) else {
            self.ctl.cancel_wait(key);
            return false;
        };
        let d = self.ctl.admit(now, key, len);
        let c = self.conns.get_mut(&key).expect("checked");
        match d {
            Decision::Wait(_) => {
                self.counters.waits += 1;
                return false;
            }
            Decision::Send | Decision::Mark(_) => {
                let mut p = c.q.pop_front().expect("head exists");
                c.bytes -= len as u64;
                self.counters.in_profile += 1;
                self.mark(&mut p, d);
                // Leaves the per-connection queue for the ready queue: still backlog.
                self.ready.push_back(p);
            }
            Decision::Drop => {
                let p = c.q.pop_front().expect("head exists");
                c.bytes -= len as u64;
                self.held.sub(len);
                let v = Verdict::Dropped(DropReason::Policed);
                self.stats.on_remove(v, len);
                drops.push(p, v, super::Stage::Removed);
            }
        }
        let c = &self.conns[&key];
        if c.q.is_empty() {
            self.idle_conns.insert((c.last, key));
            self.ctl.cancel_wait(key);
            if c.closing {
                self.close(now, key);
            }
            return false;
        }
        true
    }

    /// Serve the connections the controller wakes at `now`, one packet per connection per
    /// round in the policy's order.
    fn serve(&mut self, now: Instant, drops: &mut Drops<P>) {
        for _ in 0..8 {
            if self.ctl.poll_at().is_none_or(|t| t > now) {
                break;
            }
            let mut woken = std::mem::take(&mut self.woken);
            woken.clear();
            self.ctl.poll_wake(now, &mut woken);
            if woken.is_empty() {
                self.woken = woken;
                break;
            }
            while !woken.is_empty() {
                let mut i = 0;
                while i < woken.len() {
                    if self.try_head(now, woken[i], drops) {
                        i += 1;
                    } else {
                        woken.remove(i);
                    }
                }
            }
            self.woken = woken;
        }
    }

    fn shaped_backlog(&self) -> bool {
        self.stats.backlog.packets as usize > self.ready.len()
    }
}

impl<P: Pkt + Send> Qdisc<P> for Aggregate<P> {
    fn enqueue(&mut self, now: Instant, mut pkt: P, drops: &mut Drops<P>) {
        let now = self.clock(now);
        self.stats.on_receive();
        let len = pkt.ip_len();
        self.sweep(now);
        let reject = |s: &mut QdiscStats, d: &mut Drops<P>, p: P, r: DropReason| {
            s.on_reject(Verdict::Dropped(r));
            d.reject(p, r);
        };
        let b = self.stats.backlog;
        if !self.limit.admits(b.packets, b.bytes, len) {
            return reject(&mut self.stats, drops, pkt, DropReason::QueueFull);
        }
        let flow = match pkt.headers() {
            Some(h) if matches!(h.transport, Transport::Tcp(_) | Transport::Udp(_)) => {
                Some((h.flow_key(), h.tcp_repr().map(|t| t.flags)))
            }
            _ => None,
        };
        let Some((flow, flags)) = flow else {
            self.counters.unmatched_packets += 1;
            self.ready.push_back(pkt);
            self.held.add(len);
            self.stats.on_enqueue(len);
            return;
        };
        let key = match self.conn_for(now, flow) {
            Ok(k) => k,
            Err(false) => {
                self.counters.unmatched_packets += 1;
                self.ready.push_back(pkt);
                self.held.add(len);
                self.stats.on_enqueue(len);
                return;
            }
            Err(true) => return reject(&mut self.stats, drops, pkt, DropReason::StateFull),
        };
        let fin = flags.is_some_and(|f| f.intersects(TcpFlags(TcpFlags::FIN.0 | TcpFlags::RST.0)));
        let (policy, qlen, qbytes) = {
            let c = self.conns.get_mut(&key).expect("just found");
            if c.q.is_empty() {
                self.idle_conns.remove(&(c.last, key));
                self.idle_conns.insert((now, key));
            }
            c.last = now;
            c.closing |= fin;
            (c.policy, c.q.len(), c.bytes)
        };
        let pol = &self.policies[policy];
        let shapes = matches!(pol.action, ActionConfig::Shape { .. });
        if shapes {
            if len as u64 > pol.profile.max_packet.0 {
                reject(&mut self.stats, drops, pkt, DropReason::TooBig);
            } else if !self.flow_limit.admits(qlen as u32, qbytes, len) {
                reject(&mut self.stats, drops, pkt, DropReason::QueueFull);
            } else {
                let c = self.conns.get_mut(&key).expect("just found");
                if c.q.is_empty() {
                    self.idle_conns.remove(&(now, key));
                }
                c.q.push_back(pkt);
                c.bytes += len as u64;
                self.held.add(len);
                self.stats.on_enqueue(len);
                self.ctl.handle_event(now, key);
                if qlen == 0 {
                    // The queue was empty: its new head asks at once.
                    while self.try_head(now, key, drops) {}
                }
                self.serve(now, drops);
            }
        } else {
            self.ctl.handle_event(now, key);
            let d = self.ctl.admit(now, key, len);
            match d {
                Decision::Drop => reject(&mut self.stats, drops, pkt, DropReason::Policed),
                Decision::Send | Decision::Mark(_) => {
                    let in_profile = match (pol.action, d) {
                        (ActionConfig::PoliceMark { dscp, .. }, Decision::Mark(m)) => m == dscp,
                        (ActionConfig::PoliceMark { .. }, _) => false,
                        _ => true,
                    };
                    if in_profile {
                        self.counters.in_profile += 1;
                    } else {
                        self.counters.out_profile += 1;
                    }
                    self.mark(&mut pkt, d);
                    self.ready.push_back(pkt);
                    self.held.add(len);
                    self.stats.on_enqueue(len);
                }
                Decision::Wait(_) => unreachable!("policing never waits"),
            }
            if fin {
                self.close(now, key);
            }
        }
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        let now = self.clock(now);
        self.serve(now, drops);
        if let Some(p) = self.ready.pop_front() {
            self.held.sub(p.ip_len());
            self.stats.on_dequeue(p.ip_len());
            return Dequeued::Packet(p);
        }
        if !self.shaped_backlog() {
            return Dequeued::Empty;
        }
        match self.ctl.poll_at() {
            Some(t) => Dequeued::NotBefore(t.max(Instant(now.0 + 1))),
            // Every queued head waits for the controller; it should have named an instant.
            // Retry shortly rather than stall.
            None => {
                debug_assert!(false, "aggregate: backlog without a wake-up");
                Dequeued::NotBefore(now.saturating_add(Duration::from_millis(1)))
            }
        }
    }

    fn poll_at(&self) -> Option<Instant> {
        if self.shaped_backlog() {
            self.ctl.poll_at()
        } else {
            None
        }
    }

    fn handle_timeout(&mut self, now: Instant, drops: &mut Drops<P>) {
        let now = self.clock(now);
        self.serve(now, drops);
    }

    fn backlog(&self) -> Backlog {
        self.held
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.counters;
        let (_, untracked) = self.ctl.unconditioned();
        vec![
            ("conns_tracked", self.conns.len() as u64),
            ("conns_opened", c.opened),
            ("conns_closed", c.closed),
            ("conns_evicted", c.evicted),
            ("conns_untracked", untracked),
            ("unmatched_packets", c.unmatched_packets),
            ("in_profile_packets", c.in_profile),
            ("out_profile_packets", c.out_profile),
            ("marked_packets", c.marked),
            ("waits", c.waits),
        ]
    }

    fn flow_entries(&self) -> u64 {
        self.conns.len() as u64
    }

    fn kind(&self) -> &'static str {
        "aggregate"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;
    use crate::qdisc::Stage;

    fn cfg(policy: &str, extra: &str) -> AggregateConfig {
        toml::from_str(&format!("{extra}\n[[policies]]\n{policy}")).unwrap()
    }

    const SHAPE3: &str = r#"
        filter = { src = "10.0.0.1" }
        profile = { depth = "6KB", rate = "3Mbit", max_packet = "1500B" }
        action = { kind = "shape" }
    "#;

    fn port(p: &HeaderPacket) -> u16 {
        p.hdr.tcp_repr().unwrap().src_port
    }

    /// Keep `backlog[f]` packets of 1500 B queued for each flow `f` that is active at
    /// each millisecond (active(f, t)); dequeue whatever is available each millisecond.
    /// Returns the bytes sent per flow from `from` ms to `until` ms.
    fn run(
        q: &mut Aggregate<HeaderPacket>,
        flows: u16,
        active: impl Fn(u16, u64) -> bool,
        from: u64,
        until: u64,
    ) -> Vec<u64> {
        let mut sent = vec![0u64; flows as usize];
        let mut d = Drops::new();
        let mut tag = 0;
        let mut queued = vec![0u32; flows as usize];
        for t in 0..until {
            for f in 0..flows {
                while active(f, t) && queued[f as usize] < 5 {
                    q.enqueue(ms(t), data_flow(tag, 1500, f), &mut d);
                    tag += 1;
                    queued[f as usize] += 1;
                }
            }
            if q.poll_at().is_some_and(|p| p <= ms(t)) {
                q.handle_timeout(ms(t), &mut d);
            }
            while let Dequeued::Packet(p) = q.dequeue(ms(t), &mut d) {
                let f = port(&p) - 1000;
                queued[f as usize] -= 1;
                if t >= from {
                    sent[f as usize] += p.ip_len() as u64;
                }
            }
            check(q);
            assert_eq!(q.backlog(), recount(q));
        }
        assert!(d.is_empty(), "unexpected drops: {:?}", d.since(0).len());
        sent
    }

    /// The packets really queued, counted afresh (and the idle index checked against the
    /// table).
    fn recount(q: &Aggregate<HeaderPacket>) -> Backlog {
        check_idle_index(q);
        let mut b = Backlog::default();
        for p in q
            .ready
            .iter()
            .chain(q.conns.values().flat_map(|c| c.q.iter()))
        {
            b.add(p.ip_len());
        }
        b
    }

    fn mbit(bytes: u64, ms: u64) -> f64 {
        bytes as f64 * 8.0 / (ms as f64 * 1000.0)
    }

    #[test]
    fn every_scheme_gives_the_rate_and_fair_shares() {
        for scheme in [
            "{ kind = \"logical\", depth = \"equal\" }",
            "{ kind = \"partitioned\" }",
            "{ kind = \"common\", order = \"fcfs\" }",
            "{ kind = \"common\", order = \"lru\" }",
            "{ kind = \"common\", order = \"sequential\" }",
        ] {
            for timer in ["0s", "15ms"] {
                // A coarse timer needs a depth of at least r_m × timer (5.6 KB here) per
                // share, or tokens overflow between ticks: 15 KB.
                let policy = if timer == "0s" {
                    SHAPE3.to_string()
                } else {
                    SHAPE3.replace("6KB", "15KB")
                };
                let c = cfg(
                    &format!("{policy}\nscheme = {scheme}"),
                    &format!("timer = \"{timer}\""),
                );
                let mut q = Aggregate::new(&c).unwrap();
                let sent = run(&mut q, 3, |_, _| true, 1000, 11_000);
                let total = mbit(sent.iter().sum(), 10_000);
                assert!(
                    (total - 3.0).abs() < 0.03,
                    "{scheme} {timer}: {total} Mbit/s"
                );
                if scheme.contains("sequential") {
                    // The paper's finding (§4.2.2): a sequential scan serves the head of
                    // the list first. With tokens for one packet at each exact instant the
                    // first connection takes them all; with a 15 ms timer it takes the
                    // odd packet of each tick.
                    assert!(sent[0] > sent[1] && sent[0] > sent[2], "{timer}: {sent:?}");
                    continue;
                }
                for s in &sent {
                    let r = mbit(*s, 10_000);
                    // Woken connections are served one packet each per round: equal shares
                    // whenever the tokens of a service suffice for all of them.
                    assert!((r - 1.0).abs() < 0.05, "{scheme} {timer}: {sent:?}");
                }
                assert_eq!(q.tracked(), 3);
            }
        }
    }

    #[test]
    fn logical_partitions_share_what_an_idle_connection_leaves() {
        let c = cfg(
            &format!("{SHAPE3}\nscheme = {{ kind = \"logical\", depth = \"equal\" }}"),
            "timer = \"0s\"",
        );
        let mut q = Aggregate::new(&c).unwrap();
        // Flow 2 sends only during the first second.
        let sent = run(&mut q, 3, |f, t| f < 2 || t < 1000, 2000, 12_000);
        let r: Vec<f64> = sent.iter().map(|s| mbit(*s, 10_000)).collect();
        assert!(
            (r[0] - 1.5).abs() < 0.05 && (r[1] - 1.5).abs() < 0.05,
            "{r:?}"
        );
        assert_eq!(r[2], 0.0);
        // Partitioned: the idle connection's share is wasted until it is closed as idle.
        let c = cfg(
            &format!("{SHAPE3}\nscheme = {{ kind = \"partitioned\" }}"),
            "timer = \"0s\"\nidle = \"60s\"",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let sent = run(&mut q, 3, |f, t| f < 2 || t < 1000, 2000, 12_000);
        let r: Vec<f64> = sent.iter().map(|s| mbit(*s, 10_000)).collect();
        assert!(
            (r[0] - 1.0).abs() < 0.05 && (r[1] - 1.0).abs() < 0.05,
            "{r:?}"
        );
        // ... and with a short idle timeout the two get it back.
        let c = cfg(
            &format!("{SHAPE3}\nscheme = {{ kind = \"partitioned\" }}"),
            "timer = \"0s\"\nidle = \"500ms\"",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let sent = run(&mut q, 3, |f, t| f < 2 || t < 1000, 2000, 12_000);
        let r: Vec<f64> = sent.iter().map(|s| mbit(*s, 10_000)).collect();
        assert!(
            (r[0] - 1.5).abs() < 0.05 && (r[1] - 1.5).abs() < 0.05,
            "{r:?}"
        );
        assert_eq!(q.tracked(), 2);
        assert_eq!(q.aggregate_counters().closed, 1);
    }

    #[test]
    fn waits_until_the_exact_conforming_instant() {
        // 1 Mbit/s, depth 1500 B: one 1500-byte packet at once, then one per 12 ms.
        let c = cfg(
            "profile = { depth = \"1500B\", rate = \"1Mbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"common\" }",
            "timer = \"0s\"",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        for i in 0..3 {
            q.enqueue(ms(0), data(i, 1500), &mut d);
        }
        assert_eq!(tag(&q.dequeue(ms(0), &mut d).packet().unwrap()), 0);
        assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(12)));
        assert_eq!(q.poll_at(), Some(ms(12)));
        assert_eq!(q.dequeue(ms(11), &mut d), Dequeued::NotBefore(ms(12)));
        assert_eq!(tag(&q.dequeue(ms(12), &mut d).packet().unwrap()), 1);
        assert_eq!(q.dequeue(ms(12), &mut d), Dequeued::NotBefore(ms(24)));
        check(&q);
        // A 15 ms timer serves at its ticks.
        let c = cfg(
            "profile = { depth = \"1500B\", rate = \"1Mbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"common\" }",
            "timer = \"15ms\"",
        );
        let mut q = Aggregate::new(&c).unwrap();
        for i in 0..3 {
            q.enqueue(ms(0), data(i, 1500), &mut d);
        }
        assert!(q.dequeue(ms(0), &mut d).packet().is_some());
        assert_eq!(q.dequeue(ms(0), &mut d), Dequeued::NotBefore(ms(15)));
        assert!(q.dequeue(ms(15), &mut d).packet().is_some());
        assert_eq!(q.dequeue(ms(15), &mut d), Dequeued::NotBefore(ms(30)));
        check(&q);
    }

    #[test]
    fn police_mark_sets_dscp_in_and_out_of_profile() {
        let c = cfg(
            "profile = { depth = \"3000B\", rate = \"1Mbit\" }\naction = { kind = \"police_mark\", dscp = 10, out_dscp = 0 }\nscheme = { kind = \"common\" }",
            "",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        for i in 0..4 {
            let mut p = data(i, 1500);
            p.hdr.ip.dscp = 46;
            q.enqueue(ms(0), p, &mut d);
        }
        let out = drain(&mut q, ms(0));
        let dscps: Vec<u8> = out.iter().map(|p| p.hdr.ip.dscp).collect();
        assert_eq!(dscps, vec![10, 10, 0, 0]);
        let c = q.aggregate_counters();
        assert_eq!((c.in_profile, c.out_profile, c.marked), (2, 2, 4));
        check(&q);
    }

    #[test]
    fn police_drop_drops_out_of_profile() {
        let c = cfg(
            "profile = { depth = \"3000B\", rate = \"1Mbit\" }\naction = { kind = \"police_drop\" }\nscheme = { kind = \"partitioned\" }",
            "",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        for i in 0..4 {
            q.enqueue(ms(0), data(i, 1500), &mut d);
        }
        assert_eq!(drain(&mut q, ms(0)).len(), 2);
        assert_eq!(d.len(), 2);
        assert_eq!(d.since(0)[0].verdict, Verdict::Dropped(DropReason::Policed));
        assert_eq!(d.since(0)[0].stage, Stage::Rejected);
        // 12 ms later one more packet's tokens are back.
        q.enqueue(ms(12), data(9, 1500), &mut d);
        assert_eq!(drain(&mut q, ms(12)).len(), 1);
        check(&q);
    }

    #[test]
    fn unmatched_and_non_tcp_pass_through() {
        let c = cfg(
            "filter = { dst_port = 443 }\nprofile = { depth = \"1500B\", rate = \"8kbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"common\" }",
            "",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        for i in 0..50 {
            q.enqueue(ms(0), data(i, 1500), &mut d); // dst_port 80
        }
        assert_eq!(drain(&mut q, ms(0)).len(), 50);
        assert_eq!(q.tracked(), 0);
        assert_eq!(q.aggregate_counters().unmatched_packets, 50);
        check(&q);
    }

    /// The idle index holds exactly the connections with nothing queued, by last activity.
    #[track_caller]
    fn check_idle_index(q: &Aggregate<HeaderPacket>) {
        let idle: BTreeSet<(Instant, ConnKey)> = (q.conns.iter())
            .filter(|(_, c)| c.q.is_empty())
            .map(|(&k, c)| (c.last, k))
            .collect();
        assert_eq!(q.idle_conns, idle);
    }

    #[test]
    fn eviction_takes_the_least_recently_active_idle_connection() {
        let c = cfg(
            "profile = { depth = \"3000B\", rate = \"8kbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"partitioned\" }",
            "max_conns = 3",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        // Flows 0, 1, 2 send at 0, 1, 2 ms and go idle; flow 0 sends again at 3 ms.
        for (t, f) in [(0, 0), (1, 1), (2, 2), (3, 0)] {
            q.enqueue(ms(t), data_flow(t as u32, 1000, f), &mut d);
            assert_eq!(drain(&mut q, ms(t)).len(), 1);
            check_idle_index(&q);
        }
        let tracked = |q: &Aggregate<HeaderPacket>| {
            let mut f: Vec<u16> = q.conns.values().map(|c| c.flow.src_port - 1000).collect();
            f.sort();
            f
        };
        // Flow 3 evicts flow 1 (idle since 1 ms), flow 4 then flow 2 (2 ms), flow 5 then
        // flow 0 (3 ms): least recently active first, not the oldest connection.
        q.enqueue(ms(4), data_flow(4, 1000, 3), &mut d);
        assert_eq!(tracked(&q), vec![0, 2, 3]);
        assert_eq!(drain(&mut q, ms(4)).len(), 1);
        q.enqueue(ms(5), data_flow(5, 1000, 4), &mut d);
        assert_eq!(tracked(&q), vec![0, 3, 4]);
        q.enqueue(ms(6), data_flow(6, 1000, 5), &mut d);
        assert_eq!(tracked(&q), vec![3, 4, 5]);
        assert_eq!(q.aggregate_counters().evicted, 3);
        check_idle_index(&q);
        assert!(d.is_empty());
        check(&q);
    }

    #[test]
    fn bounded_table_evicts_idle_then_refuses() {
        let c = cfg(
            "profile = { depth = \"1500B\", rate = \"8kbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"partitioned\" }",
            "max_conns = 2",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        // Two flows send their first packet at once (full buckets) and go idle.
        q.enqueue(ms(0), data_flow(0, 1500, 0), &mut d);
        q.enqueue(ms(1), data_flow(1, 1500, 1), &mut d);
        assert_eq!(drain(&mut q, ms(1)).len(), 2);
        // A third flow evicts the least recently active one.
        q.enqueue(ms(2), data_flow(2, 1500, 2), &mut d);
        assert_eq!(q.aggregate_counters().evicted, 1);
        assert_eq!(q.tracked(), 2);
        assert_eq!(drain(&mut q, ms(2)).len(), 1);
        // Both tracked connections now hold a waiting packet: a new flow is refused.
        q.enqueue(ms(3), data_flow(3, 1500, 1), &mut d);
        q.enqueue(ms(3), data_flow(4, 1500, 2), &mut d);
        q.enqueue(ms(3), data_flow(5, 1500, 3), &mut d);
        assert_eq!(d.len(), 1);
        assert_eq!(
            d.since(0)[0].verdict,
            Verdict::Dropped(DropReason::StateFull)
        );
        assert_eq!(q.flow_entries(), 2);
        check(&q);
    }

    #[test]
    fn fin_closes_after_drain_and_oversize_is_too_big() {
        let c = cfg(
            "profile = { depth = \"1500B\", rate = \"1Mbit\", max_packet = \"1000B\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"logical\" }",
            "",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        q.enqueue(ms(0), data(0, 1500), &mut d);
        assert_eq!(d.since(0)[0].verdict, Verdict::Dropped(DropReason::TooBig));
        q.enqueue(ms(0), data(1, 1000), &mut d);
        let mut fin = data(2, 1000);
        if let Some(t) = fin.hdr.tcp_repr_mut() {
            t.flags.set(TcpFlags::FIN, true);
        }
        q.enqueue(ms(0), fin, &mut d);
        assert_eq!(q.tracked(), 1);
        let mut got = drain(&mut q, ms(0));
        got.extend(drain(&mut q, ms(100)));
        assert_eq!(got.len(), 2);
        assert_eq!(q.tracked(), 0);
        assert_eq!(q.aggregate_counters().closed, 1);
        check(&q);
    }

    #[test]
    fn queue_limits_and_errors() {
        let c = cfg(
            "profile = { depth = \"1500B\", rate = \"8kbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"common\" }",
            "flow_limit = \"3p\"\nlimit = \"5p\"",
        );
        let mut q = Aggregate::new(&c).unwrap();
        let mut d = Drops::new();
        for i in 0..6 {
            q.enqueue(ms(0), data_flow(i, 1500, 0), &mut d);
        }
        // One left at once, three wait, two refused.
        assert_eq!(d.len(), 2);
        for i in 0..4 {
            q.enqueue(ms(0), data_flow(10 + i, 1500, 1), &mut d);
        }
        assert_eq!(q.backlog().packets, 5);
        assert_eq!(d.len(), 5);
        check(&q);
        let e =
            toml::from_str::<AggregateConfig>(&format!("limt = \"5p\"\n[[policies]]\n{SHAPE3}"))
                .unwrap_err()
                .to_string();
        assert!(e.contains("limt"), "{e}");
        let bad = cfg(
            "profile = { depth = \"100B\", rate = \"8kbit\" }\naction = { kind = \"shape\" }\nscheme = { kind = \"common\" }",
            "",
        );
        let e = Aggregate::<HeaderPacket>::new(&bad).unwrap_err();
        assert_eq!(e.path, "aggregate.policies[0].profile.depth");
        let e = Aggregate::<HeaderPacket>::new(&cfg(
            &format!("{SHAPE3}\nscheme = {{ kind = \"common\" }}"),
            "max_conns = 0",
        ))
        .unwrap_err();
        assert_eq!(e.path, "aggregate.max_conns");
    }
}
