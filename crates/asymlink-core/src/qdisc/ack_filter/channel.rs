//! What the ACK filter learns about its channel without being told its rate: when it is
//! busy (from the runtime's dequeue calls), how often it is busy (a TSW average of busy
//! time), and the burst structure used to estimate δ_o online.
//!
//! The inference rests on one property of the runtime, which both the simulator's links
//! and the live box's device loop have: `dequeue` is called when the link can take a
//! packet. So after a call that returned a packet, the channel is busy until the next
//! call; a call that finds the queue empty marks the channel idle. (Inside a priority
//! parent, time spent on other bands counts as busy — which is what "the channel is in
//! use" means.)

use crate::time::{dur_ns, Duration, Instant};

/// Busy-time tracking, the presence estimator and the online δ estimator.
#[derive(Clone, Debug)]
pub(crate) struct Channel {
    window_ns: u64,
    /// A packet was handed out and the next dequeue call has not come yet.
    busy: bool,
    /// Busy time is accounted up to here.
    acc_from: Instant,
    /// Presence: TSW average of the busy fraction, in parts per million, as of `last`.
    frac_ppm: u64,
    last: Instant,
    /// Start of the current busy period and of the previous one.
    period_start: Instant,
    prev_start: Option<Instant>,
    /// A busy period was seen.
    started: bool,
    /// Peak backlog per connection within the first cycle of the current busy period.
    peak: u32,
    /// The δ estimate, once made.
    estimate: Option<u32>,
}

impl Channel {
    pub(crate) fn new(window: Duration) -> Channel {
        Channel {
            window_ns: dur_ns(window).max(1),
            busy: false,
            acc_from: Instant::ZERO,
            frac_ppm: 0,
            last: Instant::ZERO,
            period_start: Instant::ZERO,
            prev_start: None,
            started: false,
            peak: 0,
            estimate: None,
        }
    }

    /// The TSW update with "size" = busy nanoseconds since the last update (the paper's
    /// §3.1 algorithm with the slight change of measuring presence instead of bytes):
    /// `Volume = Frac·Window + Busy; Time = Now − Last + Window; Frac = Volume / Time`.
    fn account(&mut self, now: Instant) {
        let now = now.max(self.last);
        let busy_ns = if self.busy {
            dur_ns(now.saturating_since(self.acc_from))
        } else {
            0
        };
        let w = self.window_ns as u128;
        let volume = self.frac_ppm as u128 * w + busy_ns as u128 * 1_000_000;
        let time = dur_ns(now - self.last) as u128 + w;
        self.frac_ppm = ((volume / time) as u64).min(1_000_000);
        self.last = now;
        self.acc_from = now;
    }

    /// The runtime asked for a packet at `now`; `sent` says whether one was handed out.
    pub(crate) fn on_dequeue_call(&mut self, now: Instant, sent: bool) {
        self.account(now);
        match (self.busy, sent) {
            (false, true) => {
                self.busy = true;
                self.prev_start = self.started.then_some(self.period_start);
                self.started = true;
                self.period_start = now;
                self.peak = 0;
            }
            (true, false) => self.busy = false,
            _ => {}
        }
    }

    /// How often the channel was busy, averaged over about one window, as of `now`, in
    /// parts per million.
    pub(crate) fn presence_ppm(&self, now: Instant) -> u64 {
        let now = now.max(self.last);
        let busy_ns = if self.busy {
            dur_ns(now.saturating_since(self.acc_from))
        } else {
            0
        };
        let w = self.window_ns as u128;
        let volume = self.frac_ppm as u128 * w + busy_ns as u128 * 1_000_000;
        let time = dur_ns(now - self.last) as u128 + w;
        ((volume / time) as u64).min(1_000_000)
    }

    /// Feed the online δ estimator at `now` with the current backlog per connection (call
    /// on every arrival, before queueing). Returns the estimate once it exists.
    ///
    /// While the channel is in a busy period that started at `s` after one that started
    /// at `s'`, the cycle is `s − s'`. In slow start ACKs come in one burst per RTT, so
    /// before the channel is fully used each busy period ends within its cycle. The first
    /// busy period that lasts a whole cycle marks full utilization, and the peak queue it
    /// built within that cycle is δ_o (paper §2.2: the queue of length μ_r·T/(d+1) that a
    /// burst of μ_r·T ACKs leaves).
    pub(crate) fn estimate_delta(&mut self, now: Instant, per_conn_backlog: u32) -> Option<u32> {
        if self.estimate.is_some() {
            return self.estimate;
        }
        if self.busy {
            if let Some(prev) = self.prev_start {
                let cycle = self.period_start.saturating_since(prev);
                if !cycle.is_zero() && now.saturating_since(self.period_start) >= cycle {
                    self.estimate = Some(self.peak.max(1));
                    return self.estimate;
                }
            }
            self.peak = self.peak.max(per_conn_backlog);
        }
        None
    }

    /// The δ estimate, if made.
    pub(crate) fn estimate(&self) -> Option<u32> {
        self.estimate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(t: u64) -> Instant {
        Instant::from_millis(t)
    }

    #[test]
    fn presence_converges_to_the_busy_fraction() {
        let mut c = Channel::new(Duration::from_millis(200));
        // Busy 3 ms out of every 4 ms for 2 s.
        for k in 0..500 {
            c.on_dequeue_call(ms(4 * k), true);
            c.on_dequeue_call(ms(4 * k + 3), false);
        }
        let p = c.presence_ppm(ms(2000)) as f64 / 1e6;
        assert!((p - 0.75).abs() < 0.02, "{p}");
        // Idle for one window: it halves.
        let later = c.presence_ppm(ms(2200)) as f64 / 1e6;
        assert!((later / p - 0.5).abs() < 0.02, "{later}");
        // Continuously busy: tends to 1, counting the ongoing busy time.
        c.on_dequeue_call(ms(3000), true);
        let p = c.presence_ppm(ms(4000)) as f64 / 1e6;
        assert!(p > 0.8, "{p}");
    }

    #[test]
    fn estimator_waits_for_a_busy_period_longer_than_a_cycle() {
        let mut c = Channel::new(Duration::from_millis(200));
        // Cycle 1: a short burst at t = 0 (queue 2), idle from 10 ms.
        c.on_dequeue_call(ms(0), true);
        assert_eq!(c.estimate_delta(ms(1), 2), None);
        c.on_dequeue_call(ms(10), false);
        // Cycle 2 starts at 200 ms: cycle = 200 ms. Queue grows to 7 within it.
        c.on_dequeue_call(ms(200), true);
        for (t, q) in [(210, 3), (250, 7), (300, 5)] {
            assert_eq!(c.estimate_delta(ms(t), q), None);
        }
        // The next burst arrives at 400 ms while still busy: the estimate is the peak (7),
        // not the current backlog (20).
        assert_eq!(c.estimate_delta(ms(400), 20), Some(7));
        assert_eq!(c.estimate(), Some(7));
    }
}
