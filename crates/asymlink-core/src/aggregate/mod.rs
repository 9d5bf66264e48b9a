//! Rate control of TCP connection aggregates at the traffic source (Mehra, Tewari &
//! Kandlur, "Design Considerations for Rate Control of Aggregated TCP Connections").
//!
//! # Principles
//!
//! A **policy** is a filter ⟨src, dst, src_port, dst_port⟩ with wildcards, a traffic
//! profile ⟨B, r_m, r_p, L_m⟩ (depth, average rate, peak rate, largest packet) and an
//! action: *shape* (a non-conforming packet waits), *police and mark* (in-profile packets
//! get a DSCP, the rest go best effort) or *police and drop*. The connections its filter
//! matches form its **aggregate**; they join when they open and leave when they close.
//!
//! The aggregate's tokens are shared among its connections by one of three **schemes**
//! (§4.2):
//!
//! * **partitioned** — one bucket per connection ⟨r_m/n, b_i⟩ with b_i = B/n or
//!   B·rtt_i/Σrtt: independent rate control, as fair as TCP lets it be, but the share of
//!   a connection that cannot use it (a slow client link) is wasted;
//! * **common** — one bucket ⟨r_m, B⟩ for all, whose tokens go to the waiting connections
//!   in *sequential* (list), *FCFS* (first to become non-compliant) or *LRU* (least
//!   recently served) order at each service: no token is wasted, but whoever asks most
//!   often (the short-RTT connection, clocked by its frequent ACKs) gets most;
//! * **logical** — a common bucket with logical partitions ⟨r_m/n, b_i⟩: each connection
//!   spends its own partition, and what a full partition cannot hold (an idle or
//!   bottlenecked connection's unused share) is shared equally among the partitions that
//!   are not full, never letting the aggregate hold more than B. Fair *and* fully used.
//!
//! Shaped senders that must wait are served at the **shaping timer** (one timer for all
//! policies, default 15 ms; `0s` wakes each sender at the exact instant it conforms), by
//! their own output routine (an ACK or an application write on the connection), and, with
//! `triggers = "aggregate"`, by any event on any connection of the aggregate (§6.3).
//!
//! All token arithmetic is integer on explicit time ([`bucket`]): bit-nanoseconds, exact
//! partition rates with carried remainders, deterministic sharing.
//!
//! # What it deliberately does not do
//!
//! It does not queue packets: a sans-IO [`Controller`] answers "send, mark, wait until,
//! drop" for a packet a sender wants to transmit. The simulator's TCP asks it before every
//! transmission (`asymlink-sim`'s conditioner adapter, as in the paper's `qosmgr` agent).
//! The egress shaper [`crate::qdisc::Aggregate`] (`kind = "aggregate"`, simulator
//! middleboxes and the live box) holds packets in per-connection queues and asks it for
//! each queue's head ([`Controller::cancel_wait`] when a queue empties).
//! Complete generality (nested aggregates, per-connection profiles) is not a goal.
//!
//! # Worked example (the paper's setting)
//!
//! r_m = 500 kbit/s, B = 20 KB, three connections with RTTs 50, 300 and 600 ms, 1040-byte
//! packets. Each partition fills at 166.7 kbit/s (one packet every 49.9 ms); RTT-weighted
//! depths are 20 000·50/950 = 1 052 B, 6 315 B and 12 631 B, each at least the rate window
//! r_i·rtt_i the paper asks for (1 042, 6 250, 12 500 B). If the 600 ms client can only
//! take 100 kbit/s its partition fills, and the 66.7 kbit/s it cannot use are shared
//! between the other two: 200 + 200 + 100 kbit/s, the whole 500.

pub mod bucket;
pub mod config;
pub mod filter;
pub mod policy;

pub use config::{
    ActionConfig, ControllerConfig, DepthShare, Order, PolicyConfig, ProfileConfig, SchemeConfig,
    Triggers,
};
pub use filter::{Field, Filter, FlowTuple};
pub use policy::{Aggregate, AggregateStats, Member, Scheme};

use crate::config::ConfigError;
use crate::time::{dur_ns, Duration, Instant};
use std::collections::BTreeMap;

/// The runtime's name for a connection (the simulator's connection id, the live qdisc's
/// table slot).
pub type ConnKey = u64;

/// What a sender may do with the packet it wants to transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// Send it unchanged.
    Send,
    /// Send it with this DSCP.
    Mark(u8),
    /// Not now: the controller expects to serve this sender at this instant (the next
    /// shaping-timer expiry, or the conforming instant with an exact timer). Waiting
    /// senders are handed out by [`Controller::poll_wake`].
    Wait(Instant),
    /// Police: the packet is dropped.
    Drop,
}

/// Where a connection went when it opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Joined {
    /// The aggregate of policy `i`.
    Policy(usize),
    /// No filter matched: not conditioned.
    Unmatched,
    /// The connection table was full: not conditioned.
    Untracked,
}

/// Aggregate rate control for one traffic source: its policies and the shaping timer.
///
/// Inputs: [`Controller::handle_open`] / [`Controller::handle_close`] (membership),
/// [`Controller::handle_rtt`] (the sender's RTT estimates), [`Controller::handle_event`]
/// (any activity on a connection: a trigger), [`Controller::admit`] (may this packet go?).
/// Outputs: [`Controller::poll_at`] (when to call back) and [`Controller::poll_wake`] (who
/// should retry, in the policy's order). `now` must not decrease between calls.
#[derive(Clone, Debug)]
pub struct Controller {
    timer: Option<Duration>,
    triggers: Triggers,
    max_conns: usize,
    policies: Vec<Aggregate>,
    conns: BTreeMap<ConnKey, usize>,
    now: Instant,
    served_tick: Option<Instant>,
    immediate: bool,
    unmatched: u64,
    untracked: u64,
}

impl Controller {
    /// Build from a configuration (validated here).
    pub fn new(cfg: &ControllerConfig) -> Result<Controller, ConfigError> {
        cfg.validate()?;
        Ok(Controller {
            timer: (!cfg.timer.0.is_zero()).then_some(cfg.timer.0),
            triggers: cfg.triggers,
            max_conns: cfg.max_conns as usize,
            policies: cfg
                .policies
                .iter()
                .enumerate()
                .map(|(i, p)| Aggregate::new(p, i))
                .collect(),
            conns: BTreeMap::new(),
            now: Instant::ZERO,
            served_tick: None,
            immediate: false,
            unmatched: 0,
            untracked: 0,
        })
    }

    /// The policies' aggregates, in configuration order.
    pub fn policies(&self) -> &[Aggregate] {
        &self.policies
    }

    /// The policy `key` belongs to.
    pub fn policy_of(&self, key: ConnKey) -> Option<usize> {
        self.conns.get(&key).copied()
    }

    /// Connections no filter matched, and connections refused because the table was full.
    pub fn unconditioned(&self) -> (u64, u64) {
        (self.unmatched, self.untracked)
    }

    /// Connections tracked.
    pub fn tracked(&self) -> usize {
        self.conns.len()
    }

    fn clock(&mut self, now: Instant) -> Instant {
        self.now = self.now.max(now);
        self.now
    }

    /// A connection opened at `now` (the "new connection" trigger).
    pub fn handle_open(&mut self, now: Instant, key: ConnKey, tuple: &FlowTuple) -> Joined {
        let now = self.clock(now);
        if let Some(&p) = self.conns.get(&key) {
            return Joined::Policy(p);
        }
        let Some(p) = self.policies.iter().position(|a| a.filter.matches(tuple)) else {
            self.unmatched += 1;
            return Joined::Unmatched;
        };
        if self.conns.len() >= self.max_conns {
            self.untracked += 1;
            return Joined::Untracked;
        }
        self.policies[p].join(now, key);
        self.conns.insert(key, p);
        self.trigger(now, p);
        Joined::Policy(p)
    }

    /// A connection closed at `now`.
    pub fn handle_close(&mut self, now: Instant, key: ConnKey) {
        let now = self.clock(now);
        if let Some(p) = self.conns.remove(&key) {
            self.policies[p].leave(now, key);
            self.trigger(now, p);
        }
    }

    /// The sender's RTT estimate for `key`.
    pub fn handle_rtt(&mut self, now: Instant, key: ConnKey, rtt: Duration) {
        let now = self.clock(now);
        if let Some(&p) = self.conns.get(&key) {
            self.policies[p].set_rtt(now, key, rtt);
        }
    }

    /// Something happened on connection `key` at `now` (an ACK, an application write, a
    /// retry it was woken for). A waiter that was woken at `now` and did not ask to send
    /// no longer waits; with `triggers = "aggregate"` the event serves the waiters.
    pub fn handle_event(&mut self, now: Instant, key: ConnKey) {
        let now = self.clock(now);
        let Some(&p) = self.conns.get(&key) else {
            return;
        };
        let a = &mut self.policies[p];
        a.advance(now);
        if let Some(i) = a.find(key) {
            let m = &a.members()[i];
            if m.waiting.is_some() && m.woken_at == Some(now) && m.asked_at != Some(now) {
                a.cancel_wait(i);
            }
        }
        self.trigger(now, p);
    }

    /// `key` no longer has anything to send (a queue emptied): it stops waiting.
    pub fn cancel_wait(&mut self, key: ConnKey) {
        if let Some(&p) = self.conns.get(&key) {
            if let Some(i) = self.policies[p].find(key) {
                self.policies[p].cancel_wait(i);
            }
        }
    }

    fn trigger(&mut self, now: Instant, p: usize) {
        if self.triggers != Triggers::Aggregate {
            return;
        }
        let a = &mut self.policies[p];
        a.advance(now);
        if a.shapes() && a.waiter_ready() {
            self.immediate = true;
        }
    }

    /// The next shaping-timer expiry at or after `now` not yet served.
    fn next_tick(&self, now: Instant, d: Duration) -> Instant {
        let d = dur_ns(d).max(1);
        let t = Instant(now.0.div_ceil(d).saturating_mul(d));
        if self.served_tick == Some(t) {
            Instant(t.0.saturating_add(d))
        } else {
            t
        }
    }

    /// May connection `key` send a packet of `len` IP bytes at `now`? Connections of no
    /// aggregate always may.
    pub fn admit(&mut self, now: Instant, key: ConnKey, len: u32) -> Decision {
        let now = self.clock(now);
        let Some(&p) = self.conns.get(&key) else {
            return Decision::Send;
        };
        let timer = self.timer;
        let tick = timer.map(|d| self.next_tick(now, d));
        let a = &mut self.policies[p];
        let Some(i) = a.find(key) else {
            return Decision::Send;
        };
        let (d, ahead_ready) = a.admit(now, i, len, self.triggers, |agg, i| match tick {
            Some(t) => t,
            None => now.saturating_add(Duration::from_nanos(
                agg.nanos_until(i, bucket::units(len as u64)),
            )),
        });
        if ahead_ready {
            self.immediate = true;
        }
        d
    }

    /// Whether any sender waits for tokens.
    pub fn has_waiters(&self) -> bool {
        self.policies.iter().any(|a| a.has_waiters())
    }

    /// The earliest instant at which [`Controller::poll_wake`] has senders to wake: now
    /// (a trigger found a waiter that can be served), the next shaping-timer expiry, or
    /// (exact timer) the instant the first waiter conforms. `None` when nobody waits.
    pub fn poll_at(&self) -> Option<Instant> {
        if !self.has_waiters() {
            return None;
        }
        if self.immediate {
            return Some(self.now);
        }
        match self.timer {
            Some(d) => Some(self.next_tick(self.now, d)),
            None => self
                .policies
                .iter()
                .filter_map(|a| a.next_ready())
                .min()
                .map(|t| t.max(self.now)),
        }
    }

    /// At `now` (the instant [`Controller::poll_at`] named): append to `out` the senders
    /// that should try again, each policy's waiters in its service order (policies in
    /// configuration order). Nothing is appended when no service is due at `now`.
    pub fn poll_wake(&mut self, now: Instant, out: &mut Vec<ConnKey>) {
        let now = self.clock(now);
        let tick_due = self.timer.is_some_and(|d| {
            now.0.is_multiple_of(dur_ns(d).max(1)) && self.served_tick != Some(now)
        });
        for a in self.policies.iter_mut() {
            a.advance(now);
        }
        let exact_due = self.timer.is_none()
            && self
                .policies
                .iter()
                .any(|a| a.next_ready().is_some_and(|t| t <= now));
        if !(self.immediate || tick_due || exact_due) {
            return;
        }
        self.immediate = false;
        if tick_due {
            self.served_tick = Some(now);
        }
        for a in self.policies.iter_mut() {
            for i in a.waiters() {
                a.mark_woken(i, now);
                out.push(a.members()[i].key);
            }
        }
    }
}
