//! COBALT: CoDel with a decaying count, plus BLUE for unresponsive flows — CAKE's AQM, here
//! the optional AQM of every flow queue of `fq_codel` and `host_fq_codel` (`aqm = "cobalt"`).
//!
//! # Principles
//!
//! **The CoDel part** signals (drops, or marks CE) at dequeue by CoDel's control law
//! `t + interval / √count` while the head's sojourn time is at least `target`, as
//! [`codel`](super::codel) does, with one difference that matters for a flow that does not
//! slow down: RFC 8289 starts each dropping episode over (from the previous episode's
//! length when it follows soon), so a flow at twice its share, whose drop rate must stay
//! near `count` ≈ 156 drops in a row, falls back to a few tens after each short dip below
//! target and rebuilds its queue. Here `count` is never reset: while the queue is below
//! target, each control-law step that passes without a signal takes one off `count`
//! (`drop_next` advancing by `interval / √count` of the lowered count), and a new episode
//! starts from whatever is left. A queue that was briefly below target resumes at almost
//! the rate that held it; one that stayed below for long starts from nothing, as CoDel
//! does. The first signal of an episode comes one control-law step after the sojourn time
//! went above target (one `interval` from a count of 0).
//!
//! **The BLUE part** handles what no control law can: a flow that overflows the
//! discipline even so. Each time its queue loses a packet to the discipline's overflow
//! (`longest_queue`), its drop probability `p` rises by 1/256, and each time its queue is
//! found empty `p` falls by 1/4096 (at most once per `target` either way; while the queue
//! stays empty, once per `target` elapsed). A packet is dropped with probability `p` at
//! dequeue, ECN or not (an unresponsive flow ignores marks). A responsive flow never
//! overflows a flow-queueing discipline whose CoDel part controls it, so BLUE stays at 0
//! for it.
//!
//! As in CAKE, the last packet of a flow queue is never dropped (its signal is counted but
//! it is sent), and a queue holding at most one MTU in the whole discipline is not above
//! target (the same exemption as CoDel's).
//!
//! Integers throughout: times in nanoseconds, the control law exact as in
//! [`codel`](super::codel), `p` a fraction of 2³² drawn against the discipline's own seeded
//! generator. Modelled after the COBALT functions of Linux's `net/sched/sch_cake.c`
//! (`cobalt_should_drop`, `cobalt_queue_full`, `cobalt_queue_empty`); not modelled:
//! CAKE's ingress mode (`bulk_flows` in the target test) and its `mtu_time × 4` floor.

use super::codel::StampedQueue;
use super::codel::{control_law, isqrt, mark_ce, CodelCounters, CodelCtx, CodelParams, Stamped};
use super::{DropReason, Stage, Verdict};
use crate::packet::Pkt;
use crate::rand::Rng;
use crate::time::Instant;

/// BLUE's increase of `p` on overflow: 1/256 of 2³².
pub(crate) const P_INC: u32 = 1 << 24;
/// BLUE's decrease of `p` on an empty queue: 1/4096 of 2³².
pub(crate) const P_DEC: u32 = 1 << 20;

/// The COBALT state of one flow queue.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct CobaltVars {
    /// The control law's count: up by one per signal, down by one per control-law step
    /// spent below target.
    pub count: u32,
    /// The sojourn time is above target.
    pub dropping: bool,
    /// When the next signal is due (while dropping) or the next decrement of `count`
    /// (while below target).
    pub drop_next: u64,
    /// BLUE's drop probability, a fraction of 2³².
    pub p_drop: u32,
    /// When `p_drop` last changed.
    pub blue_timer: u64,
}

/// Whether `u < p` for a draw `u` uniform over `0..2³²`.
fn blue_draw(rng: &mut Rng, p: u32) -> bool {
    ((rng.next_u64() >> 32) as u32) < p
}

impl CobaltVars {
    /// Take one off `count` for every control-law step that has passed by `now` (the
    /// schedule moves on by `interval / √count` of the lowered count each time).
    pub fn decay(&mut self, p: &CodelParams, now: u64) {
        if self.count == 0 || now < self.drop_next {
            return;
        }
        // From count n, reaching 0 takes Σ_{k=1}^{n-1} ⌊interval / √k⌋ < 2·interval·√n;
        // past that bound the loop would end at 0 anyway.
        let bound = 2 * u128::from(p.interval) * (isqrt(u128::from(self.count)) + 1);
        if u128::from(now - self.drop_next) >= bound {
            self.count = 0;
            return;
        }
        while self.count > 0 && now >= self.drop_next {
            self.count -= 1;
            self.drop_next = control_law(self.drop_next, p.interval, self.count);
        }
    }

    /// BLUE: the queue lost a packet to the discipline's overflow at `now`. `p` rises
    /// (at most once per target) and the next dequeue is due for a signal.
    pub fn on_overflow(&mut self, p: &CodelParams, now: u64, c: &mut CodelCounters) {
        if now.saturating_sub(self.blue_timer) > p.target {
            self.p_drop = self.p_drop.saturating_add(P_INC);
            self.blue_timer = now;
            c.blue_raises += 1;
        }
        self.dropping = true;
        self.drop_next = now;
        self.count = self.count.max(1);
    }

    /// The queue was found empty at `now`: `p` falls (at most once per target), the
    /// dropping state ends, `count` decays.
    pub fn on_empty(&mut self, p: &CodelParams, now: u64) {
        if self.p_drop > 0 && now.saturating_sub(self.blue_timer) > p.target {
            self.p_drop = self.p_drop.saturating_sub(P_DEC);
            self.blue_timer = now;
        }
        self.dropping = false;
        self.decay(p, now);
    }

    /// Bring a state kept while its bucket was out of use (its queue empty) up to `now`:
    /// `p` falls once per whole `target` elapsed, `count` decays.
    pub fn resume(&mut self, p: &CodelParams, now: u64) {
        if self.p_drop > 0 && p.target > 0 {
            let k = now.saturating_sub(self.blue_timer) / p.target;
            if k > 0 {
                let dec = k.saturating_mul(u64::from(P_DEC));
                self.p_drop = u64::from(self.p_drop).saturating_sub(dec) as u32;
                self.blue_timer = self.blue_timer.saturating_add(k * p.target);
            }
        }
        self.dropping = false;
        self.decay(p, now);
    }

    /// Whether anything of this state, kept with its queue empty, would still act at
    /// `now` (else a fresh state is the same).
    pub fn matters(&self, p: &CodelParams, now: u64) -> bool {
        let mut v = *self;
        v.resume(p, now);
        v.p_drop > 0 || v.count > 0
    }

    /// Take the next packet of `q` at `now`, dropping (or marking) by the decaying control
    /// law and dropping by BLUE. Drops are counted in `cx` and pushed to its sink; the
    /// returned packet is counted as dequeued. `None` when `q` ran empty.
    pub fn dequeue<P: Pkt>(
        &mut self,
        p: &CodelParams,
        now: Instant,
        q: &mut StampedQueue<P>,
        cx: &mut CodelCtx<'_, P>,
        rng: &mut Rng,
    ) -> Option<P> {
        let now = now.as_nanos();
        loop {
            let Some(mut s) = q.pop() else {
                self.on_empty(p, now);
                return None;
            };
            let len = s.pkt.ip_len();
            let sojourn = now.saturating_sub(s.at.as_nanos());
            cx.counters.max_sojourn_ns = cx.counters.max_sojourn_ns.max(sojourn);
            // Bytes left in the discipline once this packet is gone.
            let left = cx.stats.backlog.bytes - u64::from(len);
            let due = self.count > 0 && now >= self.drop_next;
            if sojourn >= p.target && left > p.mtu {
                if !self.dropping {
                    self.dropping = true;
                    cx.counters.drop_states += 1;
                    self.drop_next = control_law(now, p.interval, self.count);
                }
                self.count = self.count.max(1);
            } else {
                self.dropping = false;
            }
            let mut drop: Option<bool> = None; // Some(blue)
            if due && self.dropping {
                self.count = self.count.saturating_add(1);
                self.drop_next = control_law(self.drop_next, p.interval, self.count);
                if p.ecn && mark_ce(&mut s.pkt) {
                    cx.counters.ecn_marks += 1;
                } else {
                    drop = Some(false);
                }
            } else {
                self.decay(p, now);
            }
            if drop.is_none() && self.p_drop > 0 && blue_draw(rng, self.p_drop) {
                drop = Some(true);
            }
            match drop {
                Some(blue) if !q.q.is_empty() => drop_packet(cx, s, blue),
                _ => {
                    cx.stats.on_dequeue(len);
                    return Some(s.pkt);
                }
            }
        }
    }
}

fn drop_packet<P: Pkt>(cx: &mut CodelCtx<'_, P>, s: Stamped<P>, blue: bool) {
    let v = Verdict::Dropped(DropReason::Aqm);
    cx.stats.on_remove(v, s.pkt.ip_len());
    if blue {
        cx.counters.blue_drops += 1;
    } else {
        cx.counters.aqm_drops += 1;
    }
    cx.drops.push(s.pkt, v, Stage::Removed);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::HeaderPacket;
    use crate::qdisc::testutil::*;
    use crate::qdisc::{Drops, QdiscStats};
    use core::time::Duration;

    const MS: u64 = 1_000_000;

    fn params() -> CodelParams {
        CodelParams::new(
            Duration::from_millis(5),
            Duration::from_millis(100),
            1500,
            false,
            None,
            "t",
        )
        .unwrap()
    }

    /// One flow queue with its discipline's counters, as `fq_codel` holds them.
    struct One {
        p: CodelParams,
        v: CobaltVars,
        q: StampedQueue<HeaderPacket>,
        stats: QdiscStats,
        counters: CodelCounters,
        drops: Drops<HeaderPacket>,
        rng: Rng,
        next_tag: u32,
    }

    impl One {
        fn new() -> One {
            One {
                p: params(),
                v: CobaltVars::default(),
                q: StampedQueue::default(),
                stats: QdiscStats::default(),
                counters: CodelCounters::default(),
                drops: Drops::new(),
                rng: Rng::new(7),
                next_tag: 0,
            }
        }
        fn push(&mut self, at_ms: u64) {
            self.stats.on_receive();
            self.q.push(ms(at_ms), data(self.next_tag, 1500));
            self.stats.on_enqueue(1500);
            self.next_tag += 1;
        }
        fn pop(&mut self, at_ns: u64) -> Option<u32> {
            let mut cx = CodelCtx {
                stats: &mut self.stats,
                counters: &mut self.counters,
                drops: &mut self.drops,
            };
            let r = self.v.dequeue(
                &self.p,
                Instant::from_nanos(at_ns),
                &mut self.q,
                &mut cx,
                &mut self.rng,
            );
            assert_eq!(self.stats.check(self.stats.backlog), Ok(()));
            r.map(|p| tag(&p))
        }
        fn dropped(&mut self) -> Vec<u32> {
            self.drops.drain().map(|d| tag(&d.pkt)).collect()
        }
    }

    /// The decaying count, step by step: a standing queue is controlled up to count 4,
    /// then sits below target; count falls by one per control-law step of the lowered
    /// count, and a new episode resumes from what is left instead of from 1.
    #[test]
    fn the_count_decays_step_by_step_and_a_new_episode_resumes_from_it() {
        let mut o = One::new();
        for _ in 0..60 {
            o.push(0);
        }
        // t = 10 ms: sojourn 10 ms ≥ 5 ms: dropping, first signal due one interval on.
        assert_eq!(o.pop(10 * MS), Some(0));
        assert!(o.v.dropping);
        assert_eq!((o.v.count, o.v.drop_next), (1, 110 * MS));
        assert_eq!(o.counters.drop_states, 1);
        // Nothing due before 110 ms.
        assert_eq!(o.pop(60 * MS), Some(1));
        assert!(o.dropped().is_empty());
        // 110 ms: drop 2, count 2, next at 110 + 100/√2 = 180.710678 ms; 3 sent.
        assert_eq!(o.pop(110 * MS), Some(3));
        assert_eq!(o.dropped(), vec![2]);
        assert_eq!((o.v.count, o.v.drop_next), (2, 180_710_678));
        // 181 ms: drop 4, count 3, next + 100/√3 = 57.735026 ms.
        assert_eq!(o.pop(181 * MS), Some(5));
        assert_eq!(o.dropped(), vec![4]);
        assert_eq!((o.v.count, o.v.drop_next), (3, 238_445_704));
        // 239 ms: drop 6, count 4, next + 50 ms.
        assert_eq!(o.pop(239 * MS), Some(7));
        assert_eq!((o.v.count, o.v.drop_next), (4, 288_445_704));
        assert_eq!(o.counters.aqm_drops, 3);
        // The rest of the queue goes at once (sojourn far above target, but no signal is
        // due before 288 ms; the last packet leaves the discipline at most one MTU).
        while !o.q.q.is_empty() {
            o.pop(240 * MS);
        }
        assert!(!o.v.dropping);
        // A fresh packet, below target, before the next step: count stays.
        o.push(286);
        assert_eq!(o.pop(286 * MS), Some(60));
        assert_eq!((o.v.count, o.v.drop_next), (4, 288_445_704));
        // Below target at 300 ms: the step due at 288.4 ms takes count to 3, the next
        // step is 100/√3 ms later.
        o.push(300);
        o.pop(300 * MS);
        assert_eq!((o.v.count, o.v.drop_next), (3, 346_180_730));
        // At 400 ms: one more step (346.2 ms), count 2; the next (+ 100/√2) is at 416.9.
        o.push(400);
        o.pop(400 * MS);
        assert_eq!((o.v.count, o.v.drop_next), (2, 416_891_408));
        assert_eq!(o.counters.aqm_drops, 3);
        // Above target again at 420 ms: a new episode from count 2, not from 1; the step
        // due at 416.9 ms signals at once (count 3), the next one 100/√2 + 100/√3 ms on.
        for _ in 0..10 {
            o.push(405);
        }
        o.pop(420 * MS);
        assert!(o.v.dropping);
        assert_eq!(o.counters.aqm_drops, 4, "resumed at once");
        assert_eq!(o.v.count, 3);
        assert_eq!(o.v.drop_next, 420 * MS + 70_710_678 + 57_735_026);
        assert_eq!(o.counters.drop_states, 2);
    }

    /// Long enough below target, the count decays to nothing (the shortcut agrees with
    /// the step-by-step loop).
    #[test]
    fn a_long_quiet_spell_decays_the_count_to_zero() {
        let p = params();
        for n in [1u32, 2, 3, 10, 156, 1000] {
            for gap in [0u64, 50 * MS, 300 * MS, 2_000 * MS, 20_000 * MS] {
                let v0 = CobaltVars {
                    count: n,
                    drop_next: 1_000 * MS,
                    ..CobaltVars::default()
                };
                let now = 1_000 * MS + gap;
                let mut fast = v0;
                fast.decay(&p, now);
                let mut slow = v0;
                while slow.count > 0 && now >= slow.drop_next {
                    slow.count -= 1;
                    slow.drop_next = control_law(slow.drop_next, p.interval, slow.count);
                }
                assert_eq!(fast.count, slow.count, "n {n} gap {gap}");
                if fast.count > 0 {
                    assert_eq!(fast.drop_next, slow.drop_next);
                }
            }
        }
        // 156 drops' worth of count (the rate that holds a flow at twice its share) is
        // gone after about 2.3 s below target: Σ_{k=1}^{155} 100 ms / √k.
        let mut v = CobaltVars {
            count: 156,
            ..CobaltVars::default()
        };
        v.decay(&p, 2_200 * MS);
        assert!(v.count > 0, "{v:?}");
        v.decay(&p, 2_400 * MS);
        assert_eq!(v.count, 0);
    }

    /// BLUE: `p` rises by 1/256 per overflow, at most once per target; falls by 1/4096
    /// when the queue is found empty, at most once per target; and drops at that rate.
    #[test]
    fn blue_raises_and_lowers_the_drop_probability() {
        let p = params();
        let mut c = CodelCounters::default();
        let mut v = CobaltVars::default();
        v.on_overflow(&p, 10 * MS, &mut c);
        assert_eq!((v.p_drop, v.blue_timer, c.blue_raises), (P_INC, 10 * MS, 1));
        assert!(v.dropping && v.count == 1 && v.drop_next == 10 * MS);
        // Within a target of the last change: no further rise.
        v.on_overflow(&p, 15 * MS, &mut c);
        assert_eq!(v.p_drop, P_INC);
        v.on_overflow(&p, 15 * MS + 1, &mut c);
        assert_eq!((v.p_drop, c.blue_raises), (2 * P_INC, 2));
        // Empty within a target: unchanged; later: down by P_DEC.
        v.on_empty(&p, 16 * MS);
        assert_eq!(v.p_drop, 2 * P_INC);
        assert!(!v.dropping);
        v.on_empty(&p, 21 * MS);
        assert_eq!((v.p_drop, v.blue_timer), (2 * P_INC - P_DEC, 21 * MS));
        // Idle for 100 ms (20 targets): down by 20 × P_DEC.
        v.resume(&p, 121 * MS);
        assert_eq!(v.p_drop, 2 * P_INC - 21 * P_DEC);
        assert!(v.matters(&p, 121 * MS));
        // It never goes below 0; then nothing of the state matters.
        v.resume(&p, 10_000 * MS);
        assert_eq!(v.p_drop, 0);
        assert!(!v.matters(&p, 10_000 * MS));
        // A kept state whose p has run down while its queue stayed empty does not matter.
        let v = CobaltVars {
            p_drop: 3 * P_DEC,
            ..CobaltVars::default()
        };
        assert!(v.matters(&p, 14 * MS), "two steps of 5 ms: p = 1/4096");
        assert!(!v.matters(&p, 15 * MS));
        // Saturates at 1.
        let mut v = CobaltVars {
            p_drop: u32::MAX - 5,
            ..CobaltVars::default()
        };
        v.on_overflow(&p, 100 * MS, &mut c);
        assert_eq!(v.p_drop, u32::MAX);
    }

    /// At p = 1/4 and no queue above target, BLUE drops about a quarter of the packets
    /// (never the last of the queue), always as `aqm` drops counted in `blue_drops`.
    #[test]
    fn blue_drops_at_its_probability() {
        let mut o = One::new();
        o.v.p_drop = 1 << 30;
        o.v.blue_timer = 0;
        let mut sent = 0;
        for i in 0..4000u64 {
            // Two packets, served at once (below target); the queue is never found empty,
            // so p stays.
            o.push(i);
            o.push(i);
            while !o.q.q.is_empty() {
                if o.pop(i * MS).is_some() {
                    sent += 1;
                }
            }
        }
        let blue = o.counters.blue_drops;
        assert_eq!(o.counters.aqm_drops, 0);
        assert_eq!(blue + sent, 8000);
        assert_eq!(o.stats.dropped_for(DropReason::Aqm), blue);
        // Only the first of each pair can be dropped: 4000 draws at 1/4 (σ ≈ 27).
        assert!((900..1100).contains(&blue), "{blue}");
        assert_eq!(o.v.p_drop, 1 << 30);
    }
}
