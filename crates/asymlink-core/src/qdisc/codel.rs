//! CoDel: controlled-delay active queue management (RFC 8289).
//!
//! # Principles
//!
//! CoDel watches how long packets wait (their *sojourn time*, stamped at enqueue and read
//! at dequeue), not how many are queued. A queue whose every packet has waited at least
//! `target` (5 ms) for a whole `interval` (100 ms, about a worst-case RTT) holds a *standing*
//! queue that does no good; CoDel then drops (or, with `ecn`, marks) one packet at the head
//! and schedules the next drop by the control law `t + interval / √count`, so the drop rate
//! rises with the square root of the drops until the sojourn time falls below `target`.
//! When it re-enters dropping soon after leaving it (within 16 intervals), it resumes near
//! its previous drop rate instead of starting over. A queue holding at most one MTU is
//! never dropped from: it is not standing, the link is merely busy.
//!
//! Everything is integer nanoseconds: the control law computes `⌊interval / √count⌋`
//! exactly as `⌊√⌊interval² / count⌋⌋` with an integer square root (for non-negative `y`,
//! `⌊√⌊y⌋⌋ = ⌊√y⌋`), where Linux keeps a Newton approximation of `1/√count`.
//!
//! On slow links one MTU takes longer than `target` to send (a 1500-byte packet is 240 ms
//! at 50 kbit/s), so a single packet behind another would count as "standing". As CAKE's
//! `cake_set_rate()` does, when a rate is known (`rate`, or the rate of the link or HTB/HFSC
//! class the discipline feeds) the target is raised to at least 1.5 MTU serialisation
//! times and the interval to at least `interval + (raised target − target)` and twice the
//! raised target. Worked example: at 50 kbit/s, `target` = 1.5 × 240 ms = 360 ms and
//! `interval` = max(100 + 355, 720) ms = 720 ms; at 10 Mbit/s one MTU takes 1.2 ms and the
//! defaults stand.
//!
//! Deliberately not modelled: Linux's `ce_threshold`, and drops at enqueue beyond the
//! packet/byte `limit` other than plain tail drop (`queue_full`).

use super::{
    Backlog, BuildCtx, ConfigError, Dequeued, DropReason, Drops, Qdisc, QdiscStats, Stage, Verdict,
};
use crate::packet::Pkt;
use crate::time::{dur_ns, Duration, Instant};
use crate::units::{Bytes, Limit, Rate, Span};
use crate::wire::Ecn;
use serde::Deserialize;
use std::collections::VecDeque;

/// CoDel parameters.
#[derive(Clone, Copy, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CodelConfig {
    /// Capacity in packets or bytes; beyond it arrivals are tail-dropped (default 1000p).
    #[serde(default = "default_limit")]
    pub limit: Limit,
    /// Acceptable standing sojourn time (default 5 ms).
    #[serde(default = "default_target")]
    pub target: Span,
    /// Window over which the sojourn time must stay above `target` before dropping
    /// (default 100 ms).
    #[serde(default = "default_interval")]
    pub interval: Span,
    /// Mark ECN-capable packets CE instead of dropping them.
    #[serde(default)]
    pub ecn: bool,
    /// The largest packet (the "at most one MTU queued" exemption and the low-rate target).
    #[serde(default = "default_mtu")]
    pub mtu: Bytes,
    /// Rate for the low-rate target (default: the rate of the link or class fed).
    #[serde(default)]
    pub rate: Option<Rate>,
}

impl Default for CodelConfig {
    fn default() -> Self {
        CodelConfig {
            limit: default_limit(),
            target: default_target(),
            interval: default_interval(),
            ecn: false,
            mtu: default_mtu(),
            rate: None,
        }
    }
}

fn default_limit() -> Limit {
    Limit::Packets(1000)
}
fn default_target() -> Span {
    Span(Duration::from_millis(5))
}
fn default_interval() -> Span {
    Span(Duration::from_millis(100))
}
fn default_mtu() -> Bytes {
    Bytes(1500)
}

/// The control parameters in nanoseconds, after the low-rate adjustment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct CodelParams {
    /// Target sojourn time.
    pub target: u64,
    /// Interval.
    pub interval: u64,
    /// Largest packet, bytes.
    pub mtu: u64,
    /// Mark instead of drop.
    pub ecn: bool,
}

impl CodelParams {
    /// Parameters from configured values; `rate` raises the target on slow links.
    pub fn new(
        target: Duration,
        interval: Duration,
        mtu: u64,
        ecn: bool,
        rate: Option<Rate>,
        key: &str,
    ) -> Result<CodelParams, ConfigError> {
        let (mut target, mut interval) = (dur_ns(target), dur_ns(interval));
        if target == 0 {
            return Err(ConfigError::new(
                format!("{key}.target"),
                "must be positive",
            ));
        }
        if interval < target {
            return Err(ConfigError::new(
                format!("{key}.interval"),
                "must be at least the target",
            ));
        }
        if interval > 60_000_000_000 {
            return Err(ConfigError::new(
                format!("{key}.interval"),
                "must be at most 60 s",
            ));
        }
        if !(68..=65_535).contains(&mtu) {
            return Err(ConfigError::new(
                format!("{key}.mtu"),
                "must be in 68..=65535 bytes",
            ));
        }
        if let Some(r) = rate {
            if r.0 == 0 {
                return Err(ConfigError::new(format!("{key}.rate"), "must be positive"));
            }
            // Modelled after cake_set_rate() in net/sched/sch_cake.c.
            let raised = r.tx_nanos(mtu).saturating_mul(3) / 2;
            if raised > target {
                interval = (interval + (raised - target)).max(2 * raised);
                target = raised;
            }
        }
        Ok(CodelParams {
            target,
            interval,
            mtu,
            ecn,
        })
    }
}

/// A packet with its enqueue time.
#[derive(Debug)]
pub(crate) struct Stamped<P> {
    /// When it was queued.
    pub at: Instant,
    /// The packet.
    pub pkt: P,
}

/// A FIFO of stamped packets with its byte count (one CoDel-managed queue).
#[derive(Debug)]
pub(crate) struct StampedQueue<P> {
    /// Packets, oldest first.
    pub q: VecDeque<Stamped<P>>,
    /// IP bytes queued.
    pub bytes: u64,
}

impl<P> Default for StampedQueue<P> {
    fn default() -> Self {
        StampedQueue {
            q: VecDeque::new(),
            bytes: 0,
        }
    }
}

impl<P: Pkt> StampedQueue<P> {
    /// Append.
    pub fn push(&mut self, at: Instant, pkt: P) {
        self.bytes += pkt.ip_len() as u64;
        self.q.push_back(Stamped { at, pkt });
    }
    /// Remove the oldest.
    pub fn pop(&mut self) -> Option<Stamped<P>> {
        let s = self.q.pop_front()?;
        self.bytes -= s.pkt.ip_len() as u64;
        Some(s)
    }
}

/// CoDel's own counters (beyond [`QdiscStats`]), summed over all queues of a discipline.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CodelCounters {
    /// Packets dropped by the control law.
    pub aqm_drops: u64,
    /// Packets marked CE instead of dropped.
    pub ecn_marks: u64,
    /// Times a queue entered the dropping state.
    pub drop_states: u64,
    /// Highest sojourn time seen at dequeue, nanoseconds.
    pub max_sojourn_ns: u64,
    /// Packets dropped by BLUE (`aqm = "cobalt"` only; also drop reason `aqm`).
    pub blue_drops: u64,
    /// Times BLUE raised a queue's drop probability (`aqm = "cobalt"` only).
    pub blue_raises: u64,
}

impl CodelCounters {
    /// As (name, value) pairs for [`Qdisc::counters`].
    pub fn pairs(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("aqm_drops", self.aqm_drops),
            ("ecn_marks", self.ecn_marks),
            ("drop_states", self.drop_states),
            ("max_sojourn_ns", self.max_sojourn_ns),
        ]
    }

    /// BLUE's counters as (name, value) pairs (disciplines running COBALT add them).
    pub fn blue_pairs(&self) -> [(&'static str, u64); 2] {
        [
            ("blue_drops", self.blue_drops),
            ("blue_raises", self.blue_raises),
        ]
    }
}

/// `⌊√n⌋` by Newton's method on integers.
pub(crate) fn isqrt(n: u128) -> u128 {
    if n < 2 {
        return n;
    }
    // Start above the root (2^⌈bits/2⌉) and descend; the iteration is monotone.
    let bits = 128 - n.leading_zeros();
    let mut x: u128 = 1 << bits.div_ceil(2);
    loop {
        let y = (x + n / x) / 2;
        if y >= x {
            return x;
        }
        x = y;
    }
}

//= https://www.rfc-editor.org/rfc/rfc8289#section-5.5
//# time_t control_law(time_t t, uint32_t count)
//# {
//#     return t + INTERVAL / sqrt(count);
//# }
/// `t + ⌊interval / √count⌋`, exactly.
pub(crate) fn control_law(t: u64, interval: u64, count: u32) -> u64 {
    let count = count.max(1) as u128;
    let step = isqrt((interval as u128 * interval as u128) / count) as u64;
    t.saturating_add(step)
}

/// The control state of one CoDel-managed queue (RFC 8289's per-queue variables).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CodelVars {
    /// Drops (or marks) since entering the dropping state.
    pub count: u32,
    /// `count` when the dropping state was last entered.
    pub lastcount: u32,
    /// In the dropping state.
    pub dropping: bool,
    /// When the sojourn time will have been above target for an interval (0: it is not
    /// above target).
    pub first_above_time: u64,
    /// When the next drop is due.
    pub drop_next: u64,
}

/// Mark `pkt` CE if it is ECN-capable. Returns whether it now carries CE.
pub(crate) fn mark_ce<P: Pkt>(pkt: &mut P) -> bool {
    match pkt.fields().map(|f| (f.dscp, f.ecn)) {
        Some((_, Ecn::Ce)) => true,
        Some((dscp, e)) if e.is_ect() => pkt.set_dscp_ecn(dscp, Ecn::Ce),
        _ => false,
    }
}

/// What a CoDel dequeue needs besides the queue and its state: the discipline's counters
/// and the drop sink.
pub(crate) struct CodelCtx<'a, P> {
    /// The discipline's counters; `backlog.bytes` is the whole discipline's backlog (the
    /// one-MTU exemption looks at it, as Linux does).
    pub stats: &'a mut QdiscStats,
    /// CoDel counters.
    pub counters: &'a mut CodelCounters,
    /// Where drops go.
    pub drops: &'a mut Drops<P>,
}

impl<P: Pkt> CodelCtx<'_, P> {
    fn drop(&mut self, s: Stamped<P>) {
        let v = Verdict::Dropped(DropReason::Aqm);
        self.stats.on_remove(v, s.pkt.ip_len());
        self.counters.aqm_drops += 1;
        self.drops.push(s.pkt, v, Stage::Removed);
    }
}

impl CodelVars {
    //= https://www.rfc-editor.org/rfc/rfc8289#section-5.3
    //# if (sojourn_time < TARGET || bytes() <= maxpacket_) {
    //#     // went below - stay below for at least INTERVAL
    //#     first_above_time_ = 0;
    //# } else {
    //#     if (first_above_time_ == 0) {
    //#         // just went above from below. if still above at
    //#         // first_above_time, will say it's ok to drop.
    //#         first_above_time_ = now + INTERVAL;
    //#     } else if (now >= first_above_time_) {
    //#         r.ok_to_drop = true;
    //#     }
    //# }
    fn do_dequeue<P: Pkt>(
        &mut self,
        p: &CodelParams,
        now: u64,
        q: &mut StampedQueue<P>,
        cx: &mut CodelCtx<'_, P>,
    ) -> (Option<Stamped<P>>, bool) {
        let Some(s) = q.pop() else {
            self.first_above_time = 0;
            return (None, false);
        };
        let sojourn = now.saturating_sub(s.at.as_nanos());
        cx.counters.max_sojourn_ns = cx.counters.max_sojourn_ns.max(sojourn);
        // Bytes left in the discipline once this packet is gone.
        let left = cx.stats.backlog.bytes - s.pkt.ip_len() as u64;
        let mut ok = false;
        if sojourn < p.target || left <= p.mtu {
            self.first_above_time = 0;
        } else if self.first_above_time == 0 {
            self.first_above_time = now.saturating_add(p.interval);
        } else if now >= self.first_above_time {
            ok = true;
        }
        (Some(s), ok)
    }

    /// Take the next packet of `q` at `now`, dropping (or marking) by the control law.
    /// Drops are counted in `cx` and pushed to its sink; the returned packet is counted as
    /// dequeued. `None` when `q` ran empty.
    pub fn dequeue<P: Pkt>(
        &mut self,
        p: &CodelParams,
        now: Instant,
        q: &mut StampedQueue<P>,
        cx: &mut CodelCtx<'_, P>,
    ) -> Option<P> {
        let now = now.as_nanos();
        let (mut r, mut ok) = self.do_dequeue(p, now, q, cx);
        if self.dropping {
            //= https://www.rfc-editor.org/rfc/rfc8289#section-5.4
            //# if (! r.ok_to_drop) {
            //#     // sojourn time below TARGET - leave drop state
            //#     dropping_ = false;
            //# }
            //# // Time for the next drop.  Drop current packet and dequeue
            //# // next.  If the dequeue doesn't take us out of dropping
            //# // state, schedule the next drop.
            if !ok {
                self.dropping = false;
            }
            while self.dropping && now >= self.drop_next {
                let mut s = r.take().expect("ok_to_drop implies a packet");
                self.count = self.count.saturating_add(1);
                if p.ecn && mark_ce(&mut s.pkt) {
                    // Linux's codel_dequeue(): a marked packet is sent and ends the round.
                    cx.counters.ecn_marks += 1;
                    self.drop_next = control_law(self.drop_next, p.interval, self.count);
                    r = Some(s);
                    break;
                }
                cx.drop(s);
                (r, ok) = self.do_dequeue(p, now, q, cx);
                if !ok {
                    self.dropping = false;
                } else {
                    self.drop_next = control_law(self.drop_next, p.interval, self.count);
                }
            }
        } else if ok {
            //= https://www.rfc-editor.org/rfc/rfc8289#section-5.4
            //# // If min went above TARGET close to when it last went
            //# // below, assume that the drop rate that controlled the
            //# // queue on the last cycle is a good starting point to
            //# // control it now.  ('drop_next' will be at most 'INTERVAL'
            //# // later than the time of the last drop, so 'now - drop_next'
            //# // is a good approximation of the time from the last drop
            //# // until now.)
            let mut s = r.take().expect("ok_to_drop implies a packet");
            if p.ecn && mark_ce(&mut s.pkt) {
                cx.counters.ecn_marks += 1;
                r = Some(s);
            } else {
                cx.drop(s);
                (r, _) = self.do_dequeue(p, now, q, cx);
            }
            self.dropping = true;
            cx.counters.drop_states += 1;
            let delta = self.count.wrapping_sub(self.lastcount);
            self.count = 1;
            // Signed difference, as the RFC's time_t and Linux's codel_time_before().
            let since = now as i128 - self.drop_next as i128;
            if delta > 1 && since < 16 * p.interval as i128 {
                self.count = delta;
            }
            self.drop_next = control_law(now, p.interval, self.count);
            self.lastcount = self.count;
        }
        r.map(|s| {
            cx.stats.on_dequeue(s.pkt.ip_len());
            s.pkt
        })
    }
}

/// A CoDel queue.
#[derive(Debug)]
pub struct Codel<P> {
    limit: Limit,
    params: CodelParams,
    vars: CodelVars,
    q: StampedQueue<P>,
    stats: QdiscStats,
    counters: CodelCounters,
}

impl<P: Pkt> Codel<P> {
    /// Build; the low-rate target uses `cfg.rate`, else `ctx.link_rate`.
    pub fn new(cfg: &CodelConfig, ctx: &BuildCtx) -> Result<Self, ConfigError> {
        if matches!(cfg.limit, Limit::Packets(0) | Limit::Bytes(0)) {
            return Err(ConfigError::new("codel.limit", "must be positive"));
        }
        let params = CodelParams::new(
            cfg.target.0,
            cfg.interval.0,
            cfg.mtu.0,
            cfg.ecn,
            cfg.rate.or(ctx.link_rate),
            "codel",
        )?;
        Ok(Codel {
            limit: cfg.limit,
            params,
            vars: CodelVars::default(),
            q: StampedQueue::default(),
            stats: QdiscStats::default(),
            counters: CodelCounters::default(),
        })
    }

    /// The effective target (after the low-rate adjustment).
    pub fn target(&self) -> Duration {
        Duration::from_nanos(self.params.target)
    }

    /// The effective interval.
    pub fn interval(&self) -> Duration {
        Duration::from_nanos(self.params.interval)
    }

    /// CoDel's counters.
    pub fn codel_counters(&self) -> CodelCounters {
        self.counters
    }

    /// Whether the control law is in its dropping state.
    pub fn dropping(&self) -> bool {
        self.vars.dropping
    }
}

impl<P: Pkt + Send> Qdisc<P> for Codel<P> {
    fn has_timers(&self) -> bool {
        false
    }
    fn reads_headers(&self) -> bool {
        false
    }
    fn observes_peer(&self) -> bool {
        false
    }
    fn enqueue(&mut self, now: Instant, pkt: P, drops: &mut Drops<P>) {
        self.stats.on_receive();
        let len = pkt.ip_len();
        let b = self.stats.backlog;
        if !self.limit.admits(b.packets, b.bytes, len) {
            self.stats
                .on_reject(Verdict::Dropped(DropReason::QueueFull));
            drops.reject(pkt, DropReason::QueueFull);
            return;
        }
        self.q.push(now, pkt);
        self.stats.on_enqueue(len);
    }

    fn dequeue(&mut self, now: Instant, drops: &mut Drops<P>) -> Dequeued<P> {
        let mut cx = CodelCtx {
            stats: &mut self.stats,
            counters: &mut self.counters,
            drops,
        };
        let r = self.vars.dequeue(&self.params, now, &mut self.q, &mut cx);
        debug_assert_eq!(self.stats.check(self.stats.backlog), Ok(()));
        match r {
            Some(p) => Dequeued::Packet(p),
            None => Dequeued::Empty,
        }
    }

    fn backlog(&self) -> Backlog {
        self.stats.backlog
    }

    fn stats(&self) -> &QdiscStats {
        &self.stats
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.counters.pairs()
    }

    fn kind(&self) -> &'static str {
        "codel"
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;

    const MS: u64 = 1_000_000;

    fn codel(src: &str) -> Codel<HeaderPacket> {
        let cfg: CodelConfig = toml::from_str(src).unwrap();
        Codel::new(&cfg, &BuildCtx::default()).unwrap()
    }

    #[test]
    fn integer_square_root_is_exact() {
        for n in 0u128..10_000 {
            let r = isqrt(n);
            assert!(r * r <= n && (r + 1) * (r + 1) > n, "isqrt({n}) = {r}");
        }
        for n in [u64::MAX as u128, (1u128 << 100) + 12_345, u128::MAX] {
            let r = isqrt(n);
            assert!(r * r <= n, "{n}");
            assert!((r + 1).checked_mul(r + 1).is_none_or(|s| s > n), "{n}");
        }
    }

    #[test]
    fn control_law_values() {
        let i = 100 * MS;
        assert_eq!(control_law(0, i, 1), 100_000_000);
        assert_eq!(control_law(0, i, 2), 70_710_678); // 100 ms / √2 = 70.7106781 ms
        assert_eq!(control_law(0, i, 3), 57_735_026);
        assert_eq!(control_law(0, i, 4), 50_000_000);
        assert_eq!(control_law(7, i, 100), 10_000_007);
        assert_eq!(control_law(0, i, 0), 100_000_000, "count 0 treated as 1");
    }

    #[test]
    fn low_rate_raises_target_and_interval() {
        let p = |rate: &str| {
            let cfg: CodelConfig = toml::from_str(&format!("rate = \"{rate}\"")).unwrap();
            let q: Codel<HeaderPacket> = Codel::new(&cfg, &BuildCtx::default()).unwrap();
            (q.target(), q.interval())
        };
        // 1500 B at 50 kbit/s = 240 ms; 1.5× = 360 ms; interval max(100+355, 720) ms.
        assert_eq!(
            p("50kbit"),
            (Duration::from_millis(360), Duration::from_millis(720))
        );
        // 1500 B at 10 Mbit/s = 1.2 ms: the defaults stand.
        assert_eq!(
            p("10Mbit"),
            (Duration::from_millis(5), Duration::from_millis(100))
        );
        // The rate of the link fed is used when none is configured.
        let ctx = BuildCtx {
            link_rate: Some(Rate(1_000_000)),
            ..BuildCtx::default()
        };
        let q: Codel<HeaderPacket> = Codel::new(&CodelConfig::default(), &ctx).unwrap();
        assert_eq!(q.target(), Duration::from_millis(18)); // 1.5 × 12 ms
        assert_eq!(q.interval(), Duration::from_millis(113)); // max(100 + 13, 36)
    }

    #[test]
    fn config_errors_name_the_key() {
        let e = |src: &str| {
            let cfg: CodelConfig = toml::from_str(src).unwrap();
            Codel::<HeaderPacket>::new(&cfg, &BuildCtx::default())
                .unwrap_err()
                .path
        };
        assert_eq!(e("target = \"0ms\""), "codel.target");
        assert_eq!(e("interval = \"1ms\""), "codel.interval");
        assert_eq!(e("mtu = \"10B\""), "codel.mtu");
        assert_eq!(e("limit = \"0p\""), "codel.limit");
    }

    /// RFC 8289 §5's pseudocode, transcribed as literally as possible (signed time,
    /// floating-point square root) on a plain queue of (tag, enqueue time, bytes).
    struct Reference {
        q: VecDeque<(u32, i64, u64)>,
        first_above_time: i64,
        drop_next: i64,
        count: u32,
        lastcount: u32,
        dropping: bool,
        dropped: Vec<u32>,
    }

    const TARGET: i64 = 5_000_000;
    const INTERVAL: i64 = 100_000_000;
    const MAXPACKET: u64 = 1500;

    impl Reference {
        fn bytes(&self) -> u64 {
            self.q.iter().map(|p| p.2).sum()
        }
        fn control_law(t: i64, count: u32) -> i64 {
            t + (INTERVAL as f64 / (count as f64).sqrt()) as i64
        }
        fn dodequeue(&mut self, now: i64) -> (Option<u32>, bool) {
            let Some((tag, ts, _)) = self.q.pop_front() else {
                self.first_above_time = 0;
                return (None, false);
            };
            let sojourn_time = now - ts;
            let mut ok_to_drop = false;
            if sojourn_time < TARGET || self.bytes() <= MAXPACKET {
                self.first_above_time = 0;
            } else if self.first_above_time == 0 {
                self.first_above_time = now + INTERVAL;
            } else if now >= self.first_above_time {
                ok_to_drop = true;
            }
            (Some(tag), ok_to_drop)
        }
        fn dequeue(&mut self, now: i64) -> Option<u32> {
            let (mut p, mut ok) = self.dodequeue(now);
            if self.dropping {
                if !ok {
                    self.dropping = false;
                }
                while now >= self.drop_next && self.dropping {
                    self.dropped.push(p.unwrap());
                    self.count += 1;
                    (p, ok) = self.dodequeue(now);
                    if !ok {
                        self.dropping = false;
                    } else {
                        self.drop_next = Self::control_law(self.drop_next, self.count);
                    }
                }
            } else if ok {
                self.dropped.push(p.unwrap());
                (p, _) = self.dodequeue(now);
                self.dropping = true;
                let delta = self.count - self.lastcount;
                self.count = 1;
                if delta > 1 && now - self.drop_next < 16 * INTERVAL {
                    self.count = delta;
                }
                self.drop_next = Self::control_law(now, self.count);
                self.lastcount = self.count;
            }
            p
        }
    }

    /// Offer and serve a scripted load to both, comparing every decision: a 10 Mbit/s
    /// link (1500-byte packets, one per 1.2 ms) fed at varying multiples of its rate with
    /// idle gaps, so the queue rises, is controlled, drains and returns. Time advances in
    /// 100 µs steps.
    #[test]
    fn control_law_matches_the_rfc_pseudocode_step_by_step() {
        // The pseudocode has no buffer limit.
        let mut q = codel("limit = \"100000p\"");
        let mut r = Reference {
            q: VecDeque::new(),
            first_above_time: 0,
            drop_next: 0,
            count: 0,
            lastcount: 0,
            dropping: false,
            dropped: Vec::new(),
        };
        let mut d = Drops::new();
        let service = 1_200_000u64;
        // (arrival gap, phase length), ns; gap 0 = silence: 1.09× and 1.2× overload, a
        // burst at 2×, underload, silence, and 1.33× overload again soon after (the
        // dropping state resumes near its previous drop rate).
        let phases: [(u64, u64); 7] = [
            (1_100_000, 1_500 * MS),
            (1_000_000, 1_000 * MS),
            (600_000, 100 * MS),
            (1_500_000, 800 * MS),
            (0, 200 * MS),
            (900_000, 1_000 * MS),
            (0, 1_000 * MS),
        ];
        let (mut t, mut next_tx, mut tag_n, mut sent) = (0u64, 0u64, 0u32, 0usize);
        for (gap, len) in phases {
            let (start, end) = (t, t + len);
            while t < end {
                if gap > 0 && (t - start) % gap == 0 {
                    q.enqueue(Instant::from_nanos(t), data(tag_n, 1500), &mut d);
                    r.q.push_back((tag_n, t as i64, 1500));
                    tag_n += 1;
                }
                if t >= next_tx && q.backlog().packets > 0 {
                    let ours = q.dequeue(Instant::from_nanos(t), &mut d).packet();
                    let theirs = r.dequeue(t as i64);
                    assert_eq!(ours.as_ref().map(tag), theirs, "t={t}");
                    let dropped: Vec<u32> = d.drain().map(|x| tag(&x.pkt)).collect();
                    let n = r.dropped.len();
                    assert_eq!(dropped, r.dropped[n - dropped.len()..], "t={t}");
                    assert_eq!(q.vars.count, r.count, "t={t}");
                    assert_eq!(q.vars.dropping, r.dropping, "t={t}");
                    assert_eq!(q.vars.drop_next as i64, r.drop_next, "t={t}");
                    if ours.is_some() {
                        sent += 1;
                        next_tx = t + service;
                    }
                    check(&q);
                }
                t += 100_000;
            }
        }
        let c = q.codel_counters();
        assert_eq!(c.aqm_drops as usize, r.dropped.len());
        assert!(
            c.aqm_drops > 20,
            "the overload phases were controlled: {c:?}"
        );
        assert!(c.drop_states >= 2, "{c:?}");
        assert!(sent > 1000, "{sent}");
        assert_eq!(q.backlog().packets, 0);
        check(&q);
    }

    /// Explicit time: a standing queue of 10 packets served one per 10 ms.
    #[test]
    fn first_drop_after_an_interval_above_target() {
        let mut q = codel("");
        let mut d = Drops::new();
        for i in 0..40 {
            q.enqueue(ms(0), data(i, 1500), &mut d);
        }
        // t = 10 ms: sojourn 10 ms > 5 ms, 58.5 KB queued: first_above_time = 110 ms.
        assert_eq!(tag(&q.dequeue(ms(10), &mut d).packet().unwrap()), 0);
        assert_eq!(q.vars.first_above_time, 110 * MS);
        // Until 110 ms no drop.
        for (k, t) in (20..110).step_by(10).enumerate() {
            assert_eq!(
                tag(&q.dequeue(ms(t), &mut d).packet().unwrap()),
                k as u32 + 1
            );
        }
        assert!(d.is_empty());
        // At 110 ms: drop the head (10), send 11, next drop at 210 ms (count 1).
        assert_eq!(tag(&q.dequeue(ms(110), &mut d).packet().unwrap()), 11);
        assert_eq!(d.drain().map(|x| tag(&x.pkt)).collect::<Vec<_>>(), vec![10]);
        assert!(q.dropping());
        assert_eq!(q.vars.drop_next, 210 * MS);
        // At 210 ms: drop 12, count 2, next drop 210 + 70.710678 ms.
        assert_eq!(tag(&q.dequeue(ms(210), &mut d).packet().unwrap()), 13);
        assert_eq!(q.vars.count, 2);
        assert_eq!(q.vars.drop_next, 210 * MS + 70_710_678);
        check(&q);
        assert_eq!(q.stats().dropped_for(DropReason::Aqm), 2);
    }

    #[test]
    fn one_mtu_left_is_never_dropped() {
        let mut q = codel("");
        let mut d = Drops::new();
        q.enqueue(ms(0), data(0, 1500), &mut d);
        q.enqueue(ms(0), data(1, 1500), &mut d);
        // Both have waited far beyond target, but one MTU remains after the first.
        assert!(q.dequeue(ms(500), &mut d).packet().is_some());
        assert_eq!(q.vars.first_above_time, 0);
        assert!(q.dequeue(ms(600), &mut d).packet().is_some());
        assert!(d.is_empty());
        assert_eq!(q.dequeue(ms(700), &mut d), Dequeued::Empty);
        check(&q);
    }

    #[test]
    fn ecn_marks_instead_of_dropping() {
        let mut q = codel("ecn = true");
        let mut d = Drops::new();
        for i in 0..40 {
            let mut p = data(i, 1500);
            if i % 2 == 0 {
                p.set_dscp_ecn(0, Ecn::Ect0);
            }
            q.enqueue(ms(0), p, &mut d);
        }
        for t in (10..110).step_by(10) {
            q.dequeue(ms(t), &mut d);
        }
        // At 110 ms the head is 10 (ECT): marked and sent, nothing dropped.
        let p = q.dequeue(ms(110), &mut d).packet().unwrap();
        assert_eq!(tag(&p), 10);
        assert_eq!(p.hdr.ip.ecn, Ecn::Ce);
        assert!(d.is_empty());
        // At 210 ms the head is 11 (not ECT): dropped; 12 (ECT) is not due: sent unmarked.
        let p = q.dequeue(ms(210), &mut d).packet().unwrap();
        assert_eq!(tag(&p), 12);
        assert_eq!(p.hdr.ip.ecn, Ecn::Ect0);
        assert_eq!(d.drain().map(|x| tag(&x.pkt)).collect::<Vec<_>>(), vec![11]);
        let c = q.codel_counters();
        assert_eq!((c.ecn_marks, c.aqm_drops), (1, 1));
        check(&q);
    }

    #[test]
    fn tail_drop_at_the_limit() {
        let mut q = codel("limit = \"2p\"");
        let mut d = Drops::new();
        for i in 0..3 {
            q.enqueue(ms(0), data(i, 100), &mut d);
        }
        assert_eq!(q.stats().dropped_for(DropReason::QueueFull), 1);
        check(&q);
    }
}
