//! Estimators: the time-sliding-window rate estimator, EWMA, and minimum trackers.

use crate::time::{dur_ns, Duration, Instant};
use crate::units::Rate;

/// Time-sliding-window (TSW) rate estimator of Clark & Fang (1998), as used by the
/// ACK-filtering paper (§3.1). On each departure of `size` bytes at `now`:
///
/// ```text
/// Volume = Rate*Window + Size
/// Time   = Now - Last + Window
/// Rate   = Volume / Time
/// Last   = Now
/// ```
///
/// The past decays with a time constant that depends on the current rate, so a low rate
/// converges fast. All arithmetic is integer (bits and nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Tsw {
    window_ns: u64,
    rate_bps: u64,
    last: Instant,
    started: bool,
}

impl Tsw {
    /// An estimator with averaging window `window` (the paper uses about one RTT), starting
    /// at rate zero.
    pub fn new(window: Duration) -> Tsw {
        Tsw {
            window_ns: dur_ns(window).max(1),
            rate_bps: 0,
            last: Instant::ZERO,
            started: false,
        }
    }

    /// The averaging window.
    pub fn window(&self) -> Duration {
        Duration::from_nanos(self.window_ns)
    }

    /// Account a departure of `bytes` at `now`.
    pub fn update(&mut self, now: Instant, bytes: u32) {
        if !self.started {
            self.started = true;
            self.last = now;
        }
        let elapsed = dur_ns(now.saturating_since(self.last));
        let w = self.window_ns as u128;
        let volume_bits = self.rate_bps as u128 * w / 1_000_000_000 + bytes as u128 * 8;
        let time = elapsed as u128 + w;
        self.rate_bps = u64::try_from(volume_bits * 1_000_000_000 / time).unwrap_or(u64::MAX);
        self.last = self.last.max(now);
    }

    /// The estimate as of the last update.
    pub fn rate(&self) -> Rate {
        Rate(self.rate_bps)
    }

    /// The estimate decayed to `now` as if nothing had left since the last update (the
    /// formula with `Size = 0`); use it to notice that a flow went quiet.
    pub fn rate_at(&self, now: Instant) -> Rate {
        let elapsed = dur_ns(now.saturating_since(self.last)) as u128;
        let w = self.window_ns as u128;
        Rate(u64::try_from(self.rate_bps as u128 * w / (elapsed + w)).unwrap_or(u64::MAX))
    }

    /// The instant of the last update.
    pub fn last(&self) -> Instant {
        self.last
    }

    /// The last instant at which the decayed estimate is still at least `floor`: without
    /// further updates, `rate_at(t) >= floor` exactly for `t <= above_until(floor)`
    /// (`None`: already below it at the last update; `Instant(u64::MAX)`: never below).
    /// The decay is monotonic, so a flow's quiet deadline is known when it goes quiet.
    pub fn above_until(&self, floor: Rate) -> Option<Instant> {
        let (rate, floor) = (self.rate_bps as u128, floor.0 as u128);
        if rate < floor {
            return None;
        }
        if floor == 0 {
            return Some(Instant(u64::MAX));
        }
        // rate·w / (e + w) >= floor  ⇔  e <= (rate·w − floor·w) / floor (e an integer).
        let w = self.window_ns as u128;
        let e = (rate * w - floor * w) / floor;
        let e = u64::try_from(e).unwrap_or(u64::MAX);
        Some(Instant(self.last.0.saturating_add(e)))
    }
}

/// Exponentially weighted moving average: `avg += gain * (sample - avg)`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Ewma {
    gain: f64,
    value: Option<f64>,
}

impl Ewma {
    /// An average with weight `gain` (0 < gain ≤ 1) on each new sample.
    pub fn new(gain: f64) -> Ewma {
        Ewma {
            gain: gain.clamp(f64::MIN_POSITIVE, 1.0),
            value: None,
        }
    }
    /// Add a sample; the first sample initialises the average.
    pub fn update(&mut self, sample: f64) -> f64 {
        let v = match self.value {
            None => sample,
            Some(a) => a + self.gain * (sample - a),
        };
        self.value = Some(v);
        v
    }
    /// The average, if any sample was seen.
    pub fn value(&self) -> Option<f64> {
        self.value
    }
}

/// The minimum over all samples (BaseRTT = min RTT).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MinTracker {
    min: Option<Duration>,
}

impl MinTracker {
    /// Add a sample.
    pub fn update(&mut self, sample: Duration) {
        self.min = Some(self.min.map_or(sample, |m| m.min(sample)));
    }
    /// The minimum so far.
    pub fn get(&self) -> Option<Duration> {
        self.min
    }
}

/// The minimum over a sliding time window, in O(1) memory (Kathleen Nichols' three-sample
/// windowed-min filter, as used by BBR and Linux `win_minmax`). The estimate is exact when
/// the minimum is recent and within a factor of the window otherwise.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowedMin {
    window_ns: u64,
    s: [(Instant, u64); 3],
    valid: bool,
}

impl WindowedMin {
    /// A filter over `window`.
    pub fn new(window: Duration) -> WindowedMin {
        WindowedMin {
            window_ns: dur_ns(window).max(1),
            s: [(Instant::ZERO, 0); 3],
            valid: false,
        }
    }

    /// Add a sample `v` taken at `now`; returns the windowed minimum.
    pub fn update(&mut self, now: Instant, v: Duration) -> Duration {
        let v = dur_ns(v);
        let win = self.window_ns;
        if !self.valid || v <= self.s[0].1 || dur_ns(now - self.s[2].0) > win {
            self.s = [(now, v); 3];
            self.valid = true;
            return Duration::from_nanos(v);
        }
        if v <= self.s[1].1 {
            self.s[1] = (now, v);
            self.s[2] = (now, v);
        } else if v <= self.s[2].1 {
            self.s[2] = (now, v);
        }
        // Age out the best samples.
        let dt = dur_ns(now - self.s[0].0);
        if dt > win {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = (now, v);
            if dur_ns(now - self.s[0].0) > win {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = (now, v);
            }
        } else if self.s[1].0 == self.s[0].0 && dt > win / 4 {
            self.s[1] = (now, v);
            self.s[2] = (now, v);
        } else if self.s[2].0 == self.s[1].0 && dt > win / 2 {
            self.s[2] = (now, v);
        }
        Duration::from_nanos(self.s[0].1)
    }

    /// The current minimum, if any sample was seen.
    pub fn get(&self) -> Option<Duration> {
        self.valid.then(|| Duration::from_nanos(self.s[0].1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tsw_converges_to_the_offered_rate() {
        // 40-byte ACKs every 3.2 ms = 100 kbit/s.
        let mut t = Tsw::new(Duration::from_millis(200));
        let mut now = Instant::ZERO;
        for _ in 0..2000 {
            now += Duration::from_micros(3200);
            t.update(now, 40);
        }
        let r = t.rate().0 as f64;
        assert!((r - 100_000.0).abs() / 100_000.0 < 0.01, "{r}");
        // It decays when the flow stops: after one window, half.
        let later = t.rate_at(now + Duration::from_millis(200)).0 as f64;
        assert!((later / r - 0.5).abs() < 0.01, "{later}");
    }

    #[test]
    fn tsw_above_until_is_the_last_instant_at_or_above_the_floor() {
        let mut rng = crate::rand::Rng::new(5);
        for _ in 0..2000 {
            let mut t = Tsw::new(Duration::from_micros(1 + rng.below(300_000)));
            let mut now = Instant::ZERO;
            for _ in 0..rng.below(4) {
                now += Duration::from_micros(rng.below(50_000));
                t.update(now, 40 + rng.below(1500) as u32);
            }
            let floor = Rate(rng.below(200_000));
            match t.above_until(floor) {
                None => assert!(t.rate_at(t.last()) < floor),
                Some(d) if d.0 == u64::MAX => assert_eq!(floor.0, 0),
                Some(d) => {
                    assert!(t.rate_at(d) >= floor, "{t:?} {floor:?} {d:?}");
                    assert!(t.rate_at(Instant(d.0 + 1)) < floor, "{t:?} {floor:?} {d:?}");
                    assert!(t.rate_at(t.last()) >= floor);
                }
            }
        }
    }

    #[test]
    fn tsw_reacts_faster_at_low_rates() {
        let mut t = Tsw::new(Duration::from_millis(100));
        t.update(Instant::from_millis(0), 40);
        t.update(Instant::from_millis(50), 40);
        assert!(t.rate().0 > 0);
    }

    #[test]
    fn ewma_and_min() {
        let mut e = Ewma::new(0.125);
        assert_eq!(e.update(8.0), 8.0);
        assert_eq!(e.update(16.0), 9.0);
        let mut m = MinTracker::default();
        m.update(Duration::from_millis(5));
        m.update(Duration::from_millis(3));
        m.update(Duration::from_millis(4));
        assert_eq!(m.get(), Some(Duration::from_millis(3)));
    }

    #[test]
    fn windowed_min_forgets_old_minimum() {
        let mut w = WindowedMin::new(Duration::from_secs(10));
        w.update(Instant::from_secs(0), Duration::from_millis(50));
        for s in 1..=9 {
            assert_eq!(
                w.update(Instant::from_secs(s), Duration::from_millis(80)),
                Duration::from_millis(50)
            );
        }
        let m = w.update(Instant::from_secs(21), Duration::from_millis(80));
        assert_eq!(m, Duration::from_millis(80));
    }
}
