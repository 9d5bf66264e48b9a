//! The allocation policy: classify flows, size each one's advertised window.
//!
//! [`Policy`] keeps the state of every flow of one receiver (a host, or all the hosts
//! behind a middlebox) keyed by any ordered id: the simulator uses its connection ids, the
//! rewriter the canonical flow key. Inputs are the receiver's view — data arriving
//! ([`Policy::handle_data`]), data it sends ([`Policy::handle_send`]), RTT samples — and the
//! output is the window a flow may advertise now ([`Policy::window`]). Windows are decided
//! in integer bytes and nanoseconds; the same inputs give the same windows.

use super::config::{FlowClass, Params, RwndConfig};
use super::estimate::ArrivalRate;
use crate::config::ConfigError;
use crate::time::{dur_ns, earliest, Duration, Instant};
use std::collections::BTreeMap;

/// The MSS assumed for a flow until its real one is known (RFC 9293's default, 536).
pub const DEFAULT_MSS: u32 = 536;

/// What the policy knows about one flow (see [`Policy::flow`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FlowInfo {
    /// Current class.
    pub class: FlowClass,
    /// The port-based guess, while it still applies (until the flow sends data).
    pub guess: Option<FlowClass>,
    /// Payload bytes received since the flow last sent data.
    pub since_send: u64,
    /// `BaseRTT`: the smallest RTT sample, if any.
    pub base_rtt: Option<Duration>,
    /// The allocation as grown so far (bytes; at most the target).
    pub allocation: u64,
    /// The flow's MSS.
    pub mss: u32,
    /// Last instant the flow sent or received data.
    pub last_active: Instant,
}

/// Counters of a policy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PolicyStats {
    /// Flows opened.
    pub opened: u64,
    /// Flows closed (or forgotten).
    pub closed: u64,
    /// Class changes (idle transitions included).
    pub reclassified: u64,
    /// RTT samples taken.
    pub rtt_samples: u64,
    /// Windows computed.
    pub windows: u64,
}

#[derive(Clone, Debug)]
struct Flow {
    class: FlowClass,
    guess: Option<FlowClass>,
    since_send: u64,
    last_active: Instant,
    last_data: Option<Instant>,
    base_rtt: Option<Duration>,
    /// When the flow sent data with nothing arriving: the next arrival is a response.
    probe: Option<Instant>,
    /// The grown allocation (bytes); `None` until the MSS is first needed.
    cur: Option<u64>,
    mss: u32,
}

impl Flow {
    /// A connection just seen: no samples, no window sent yet.
    fn fresh(class: FlowClass, guess: Option<FlowClass>, now: Instant, mss: u32) -> Flow {
        Flow {
            class,
            guess,
            since_send: 0,
            last_active: now,
            last_data: None,
            base_rtt: None,
            probe: None,
            cur: None,
            mss,
        }
    }
}

/// The receiver-based allocation policy of Spring et al. §IV for the flows of one
/// receiver. See the module documentation of [`crate::rwnd`].
#[derive(Clone, Debug)]
pub struct Policy<K: Ord + Copy> {
    p: Params,
    flows: BTreeMap<K, Flow>,
    counts: [u32; 4],
    rate: ArrivalRate,
    min_rtt: Option<Duration>,
    /// No flow can turn idle before this instant (a lower bound: activity only delays it).
    idle_check: Option<Instant>,
    now: Instant,
    stats: PolicyStats,
    /// Whether data sent while nothing arrives starts a request/response RTT sample.
    response_samples: bool,
}

impl<K: Ord + Copy> Policy<K> {
    /// A policy from its configuration.
    pub fn new(cfg: &RwndConfig) -> Result<Policy<K>, ConfigError> {
        Ok(Policy::from_params(cfg.params()?))
    }

    /// A policy from validated parameters.
    pub fn from_params(p: Params) -> Policy<K> {
        Policy {
            p,
            flows: BTreeMap::new(),
            counts: [0; 4],
            rate: ArrivalRate::new(),
            min_rtt: None,
            idle_check: None,
            now: Instant::ZERO,
            stats: PolicyStats::default(),
            response_samples: true,
        }
    }

    /// The same policy taking RTT samples only from [`Policy::handle_rtt_sample`]: for an
    /// observer that does not see the whole request/response path (a middlebox sees a
    /// request leave and its response arrive, but not the leg to the receiver and back).
    pub fn without_response_samples(mut self) -> Policy<K> {
        self.response_samples = false;
        self
    }

    /// The parameters.
    pub fn params(&self) -> &Params {
        &self.p
    }

    // ------------------------------------------------------------------ inputs

    /// A flow opened. `guess` is the port-based first guess ([`Policy::guess_ports`]),
    /// if any; without one the flow starts interactive (§IV-A). Opening a known flow
    /// changes nothing.
    pub fn handle_open(&mut self, now: Instant, id: K, guess: Option<FlowClass>) {
        let now = self.advance(now);
        if self.flows.contains_key(&id) {
            return;
        }
        let class = guess.unwrap_or(FlowClass::Interactive);
        self.flows
            .insert(id, Flow::fresh(class, guess, now, DEFAULT_MSS));
        self.counts[class.index()] += 1;
        self.stats.opened += 1;
        let deadline = now + self.p.idle;
        self.idle_check = earliest(self.idle_check, Some(deadline));
    }

    /// The class the configured ports suggest for a connection from `sender_port` (the
    /// data source) to `receiver_port`.
    pub fn guess_ports(&self, sender_port: u16, receiver_port: u16) -> Option<FlowClass> {
        self.p.ports.guess(sender_port, receiver_port)
    }

    /// A data segment of `bytes` payload arrived for the receiver on flow `id` (an
    /// unknown flow is opened first). Reclassifies the flow, feeds the link-rate estimate
    /// and grows the allocation by one packet toward its target (§IV-B).
    pub fn handle_data(&mut self, now: Instant, id: K, bytes: u32) {
        let now = self.advance(now);
        if bytes == 0 {
            return;
        }
        if self.p.link_rate.is_none() {
            self.rate.handle_arrival(now, bytes);
        }
        self.handle_open(now, id, None);
        let f = self.flows.get_mut(&id).expect("opened");
        f.last_active = now;
        f.last_data = Some(now);
        let sample = f.probe.take().map(|t| now.saturating_since(t));
        f.since_send += bytes as u64;
        if let Some(rtt) = sample {
            self.handle_rtt_sample(now, id, rtt);
        }
        self.reclassify(id);
        let target = self.target_of(&self.flows[&id]);
        let f = self.flows.get_mut(&id).expect("opened");
        let cur = f.cur.unwrap_or(self.p.initial_window.bytes(f.mss));
        //= §IV-B: "Our policy increases the buffer size by one packet on receipt of each
        //= packet until the target size is reached, similar to slow start."
        f.cur = Some(cur.saturating_add(f.mss as u64).min(target));
    }

    /// The receiver sent a segment of `bytes` payload on flow `id` (0: a pure ACK, which
    /// changes nothing). Sending data resets the count of bytes received since the last
    /// send, ends the port guess, and starts a request/response RTT sample when nothing is
    /// arriving on the flow.
    pub fn handle_send(&mut self, now: Instant, id: K, bytes: u32) {
        let now = self.advance(now);
        if bytes == 0 {
            return;
        }
        self.handle_open(now, id, None);
        let f = self.flows.get_mut(&id).expect("opened");
        f.since_send = 0;
        f.guess = None;
        f.last_active = now;
        let quiet = f
            .last_data
            .is_none_or(|d| now.saturating_since(d) >= f.base_rtt.unwrap_or(Duration::ZERO));
        if self.response_samples && f.probe.is_none() && quiet {
            f.probe = Some(now);
        }
        self.reclassify(id);
    }

    /// An RTT sample for flow `id` (e.g. its handshake). `BaseRTT` is the minimum.
    pub fn handle_rtt_sample(&mut self, now: Instant, id: K, rtt: Duration) {
        self.advance(now);
        let Some(f) = self.flows.get_mut(&id) else {
            return;
        };
        f.base_rtt = Some(f.base_rtt.map_or(rtt, |b| b.min(rtt)));
        self.min_rtt = Some(self.min_rtt.map_or(rtt, |b| b.min(rtt)));
        self.stats.rtt_samples += 1;
    }

    /// The window flow `id` may advertise now, in bytes: its allocation, never below
    /// `mss` (an unknown flow is opened first). A target below the grown allocation takes
    /// effect at once; the caller keeps the right edge from moving left.
    pub fn window(&mut self, now: Instant, id: K, mss: u32) -> u64 {
        let now = self.advance(now);
        self.handle_open(now, id, None);
        let f = self.flows.get_mut(&id).expect("opened");
        f.mss = mss.max(1);
        let target = self.target_of(&self.flows[&id]);
        let f = self.flows.get_mut(&id).expect("opened");
        let cur = f
            .cur
            .unwrap_or(self.p.initial_window.bytes(f.mss))
            .min(target);
        f.cur = Some(cur);
        self.stats.windows += 1;
        cur.max(mss as u64)
    }

    /// The window a flow that is not counted yet (a connection still in its handshake)
    /// may advertise now: what it would get if it opened now with the port guess `guess`,
    /// never below `mss`. Changes no state, so unanswered (possibly spoofed) SYNs do not
    /// shrink the windows of the flows that are counted.
    pub fn prospective_window(&mut self, now: Instant, guess: Option<FlowClass>, mss: u32) -> u64 {
        let now = self.advance(now);
        let mss = mss.max(1);
        let class = guess.unwrap_or(FlowClass::Interactive);
        let f = Flow::fresh(class, guess, now, mss);
        self.counts[class.index()] += 1;
        let target = self.target_of(&f);
        self.counts[class.index()] -= 1;
        self.stats.windows += 1;
        self.p.initial_window.bytes(mss).min(target).max(mss as u64)
    }

    /// Flow `id` closed; its share goes to the others.
    pub fn handle_close(&mut self, now: Instant, id: K) {
        self.advance(now);
        if let Some(f) = self.flows.remove(&id) {
            self.counts[f.class.index()] -= 1;
            self.stats.closed += 1;
        }
    }

    /// The earliest instant at which a flow may turn idle ([`Policy::handle_timeout`]
    /// then reclassifies it). Calling it late is harmless: every input first catches up.
    pub fn poll_at(&self) -> Option<Instant> {
        self.idle_check
    }

    /// Catch up with `now`: flows without data for `idle` become idle.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.advance(now);
    }

    // ------------------------------------------------------------------ queries

    /// The flow's state, if known.
    pub fn flow(&self, id: K) -> Option<FlowInfo> {
        self.flows.get(&id).map(|f| FlowInfo {
            class: f.class,
            guess: f.guess,
            since_send: f.since_send,
            base_rtt: f.base_rtt,
            allocation: f.cur.unwrap_or(self.p.initial_window.bytes(f.mss)),
            mss: f.mss,
            last_active: f.last_active,
        })
    }

    /// The flow's target allocation now (eq. 1 and the case rules, before growth).
    pub fn target(&self, id: K) -> Option<u64> {
        self.flows.get(&id).map(|f| self.target_of(f))
    }

    /// Flows per class, indexed by [`FlowClass::index`].
    pub fn counts(&self) -> [u32; 4] {
        self.counts
    }

    /// Tracked flows.
    pub fn len(&self) -> usize {
        self.flows.len()
    }

    /// Whether no flow is tracked.
    pub fn is_empty(&self) -> bool {
        self.flows.is_empty()
    }

    /// The ids of the tracked flows, in order.
    pub fn ids(&self) -> impl Iterator<Item = K> + '_ {
        self.flows.keys().copied()
    }

    /// `Xput_link` in payload bytes per second: configured, or estimated.
    pub fn link_bytes_per_sec(&self) -> Option<u64> {
        match self.p.link_rate {
            Some(r) => Some(r.0 / 8),
            None => self.rate.bytes_per_sec(),
        }
    }

    /// The smallest RTT sample of any flow.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt
    }

    /// Counters.
    pub fn stats(&self) -> &PolicyStats {
        &self.stats
    }

    // ------------------------------------------------------------------ internals

    /// Clamp `now` (a backwards step counts as no time) and turn quiet flows idle.
    fn advance(&mut self, now: Instant) -> Instant {
        let now = now.max(self.now);
        self.now = now;
        if self.idle_check.is_some_and(|t| t <= now) {
            self.sweep_idle(now);
        }
        now
    }

    fn sweep_idle(&mut self, now: Instant) {
        let idle = self.p.idle;
        let mut next = None;
        let mut changed = 0;
        for f in self.flows.values_mut() {
            if f.class == FlowClass::Idle {
                continue;
            }
            let deadline = f.last_active + idle;
            if deadline <= now {
                //= §IV-C.1: "Idle connections receive one-packet buffers."
                self.counts[f.class.index()] -= 1;
                self.counts[FlowClass::Idle.index()] += 1;
                f.class = FlowClass::Idle;
                f.since_send = 0;
                f.probe = None;
                f.cur = Some(f.mss as u64);
                changed += 1;
            } else {
                next = earliest(next, Some(deadline));
            }
        }
        self.stats.reclassified += changed;
        self.idle_check = next;
    }

    /// The class behaviour gives: bytes received since the last send against the
    /// thresholds; while the port guess holds, the more bulk-like of the two.
    fn classify(p: &Params, f: &Flow) -> FlowClass {
        let seen = if f.since_send >= p.rcv_long {
            FlowClass::LongBulk
        } else if f.since_send >= p.rcv_short {
            FlowClass::ShortBulk
        } else {
            FlowClass::Interactive
        };
        match f.guess {
            Some(g) => g.max(seen),
            None => seen,
        }
    }

    fn reclassify(&mut self, id: K) {
        let f = self.flows.get_mut(&id).expect("known flow");
        let new = Self::classify(&self.p, f);
        if new != f.class {
            let was_idle = f.class == FlowClass::Idle;
            self.counts[f.class.index()] -= 1;
            self.counts[new.index()] += 1;
            f.class = new;
            self.stats.reclassified += 1;
            if was_idle {
                let deadline = f.last_active + self.p.idle;
                self.idle_check = earliest(self.idle_check, Some(deadline));
            }
        }
    }

    /// `QLength_Target` in bytes for a flow of this MSS (§IV-C): `QLength_Delay` when
    /// interactive flows exist and it is the smaller, `QLength_Loss` otherwise.
    fn q_target(&self, rate: u64, mss: u32) -> u64 {
        let delay = mul_div(rate, dur_ns(self.p.qlength_delay), 1_000_000_000);
        let loss = self.p.qlength_loss.map_or(delay, |a| a.bytes(mss));
        if self.counts[FlowClass::Interactive.index()] > 0 {
            delay.min(loss)
        } else {
            loss
        }
    }

    /// Eq. (1): `(Xput_link × BaseRTT_i + QLength_Target) / n`, or unbounded while the
    /// link rate is unknown.
    fn eq1(&self, f: &Flow, n: u32) -> u64 {
        let Some(rate) = self.link_bytes_per_sec() else {
            return u64::MAX;
        };
        let rtt = f.base_rtt.or(self.min_rtt).unwrap_or(Duration::ZERO);
        let bdp = mul_div(rate, dur_ns(rtt), 1_000_000_000);
        (bdp + self.q_target(rate, f.mss)) / n.max(1) as u64
    }

    /// The target allocation of `f` (§IV-C), never below one MSS.
    fn target_of(&self, f: &Flow) -> u64 {
        let [_, short, long, _] = self.counts;
        let t = match f.class {
            FlowClass::Idle => 0,
            //= §IV-C.2 case 2: "Each long-lived flow gets the minimum buffer allocation
            //= of one packet."
            FlowClass::LongBulk if short > 0 => 0,
            //= §IV-C.2 case 1: eq. (1) over the long-lived flows.
            FlowClass::LongBulk => self.eq1(f, long),
            //= §IV-C.3: eq. (1) over the short-lived flows (the long ones hold one packet).
            FlowClass::ShortBulk => self.eq1(f, short),
            //= §IV-C.4: "we allocate the same buffer size as other bulk-transfer flows".
            FlowClass::Interactive => self.eq1(f, if short > 0 { short } else { long }),
        };
        t.max(f.mss as u64)
    }
}

/// `a × b / c` without overflow (saturating).
fn mul_div(a: u64, b: u64, c: u64) -> u64 {
    u64::try_from(a as u128 * b as u128 / c.max(1) as u128).unwrap_or(u64::MAX)
}
