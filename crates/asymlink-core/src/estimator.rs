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

/// Kathleen Nichols' windowed extreme filter (Linux `lib/win_minmax.c`): the best, second
/// and third best samples of a window, each newer than the one before, in O(1) memory.
/// Exact when the extreme is recent, within a factor of the window otherwise. Times are
/// any monotonic counter (nanoseconds, round trips) compared with wrapping arithmetic;
/// `MAX` selects the maximum ([`WinMax`]) or the minimum ([`WinMin`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WinFilter<const MAX: bool> {
    s: [(u64, u64); 3],
}

/// The windowed maximum (BBR's bandwidth filter).
pub type WinMax = WinFilter<true>;
/// The windowed minimum (BBR's and the ACK shaper's minimum RTT).
pub type WinMin = WinFilter<false>;

impl<const MAX: bool> WinFilter<MAX> {
    /// Whether `a` is at least as good as `b`.
    fn as_good(a: u64, b: u64) -> bool {
        if MAX {
            a >= b
        } else {
            a <= b
        }
    }

    /// The extreme over the window (0 before any sample).
    pub fn get(&self) -> u64 {
        self.s[0].1
    }

    /// Forget everything but sample `v` at time `t`.
    pub fn reset(&mut self, t: u64, v: u64) -> u64 {
        self.s = [(t, v); 3];
        v
    }

    /// Take sample `v` at time `t`, keeping the extreme over the last `win`; returns it.
    pub fn update(&mut self, win: u64, t: u64, v: u64) -> u64 {
        if Self::as_good(v, self.s[0].1) || t.wrapping_sub(self.s[2].0) > win {
            return self.reset(t, v);
        }
        if Self::as_good(v, self.s[1].1) {
            self.s[1] = (t, v);
            self.s[2] = (t, v);
        } else if Self::as_good(v, self.s[2].1) {
            self.s[2] = (t, v);
        }
        // Age the kept samples: the best one expires after the window; the second and
        // third are refreshed after a quarter and a half of it so that they stay spread.
        let dt = t.wrapping_sub(self.s[0].0);
        if dt > win {
            self.s[0] = self.s[1];
            self.s[1] = self.s[2];
            self.s[2] = (t, v);
            if t.wrapping_sub(self.s[0].0) > win {
                self.s[0] = self.s[1];
                self.s[1] = self.s[2];
                self.s[2] = (t, v);
            }
        } else if self.s[1].0 == self.s[0].0 && dt > win / 4 {
            self.s[1] = (t, v);
            self.s[2] = (t, v);
        } else if self.s[2].0 == self.s[1].0 && dt > win / 2 {
            self.s[2] = (t, v);
        }
        self.s[0].1
    }
}

/// The minimum duration over a sliding time window ([`WinMin`] over nanoseconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WindowedMin {
    window_ns: u64,
    f: WinMin,
    valid: bool,
}

impl WindowedMin {
    /// A filter over `window`.
    pub fn new(window: Duration) -> WindowedMin {
        WindowedMin {
            window_ns: dur_ns(window).max(1),
            f: WinMin::default(),
            valid: false,
        }
    }

    /// Add a sample `v` taken at `now`; returns the windowed minimum.
    pub fn update(&mut self, now: Instant, v: Duration) -> Duration {
        let (t, v) = (now.as_nanos(), dur_ns(v));
        let m = if self.valid {
            self.f.update(self.window_ns, t, v)
        } else {
            self.valid = true;
            self.f.reset(t, v)
        };
        Duration::from_nanos(m)
    }

    /// The current minimum, if any sample was seen.
    pub fn get(&self) -> Option<Duration> {
        self.valid.then(|| Duration::from_nanos(self.f.get()))
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

    #[test]
    fn the_max_filter_mirrors_the_min_filter() {
        // The same samples, negated around 1000: the maximum follows the minimum exactly,
        // through expiry of the best sample and a reset after a long silence.
        let (mut lo, mut hi) = (WinMin::default(), WinMax::default());
        let samples = [
            (0, 400),
            (1, 700),
            (5, 500),
            (10, 600),
            (11, 650),
            (12, 100),
            (40, 900),
        ];
        lo.reset(0, 400);
        hi.reset(0, 1000 - 400);
        let mut got = Vec::new();
        for &(t, v) in &samples[1..] {
            let (a, b) = (lo.update(10, t, v), hi.update(10, t, 1000 - v));
            assert_eq!(a, 1000 - b, "at {t}");
            got.push(a);
        }
        assert_eq!(got, [400, 400, 400, 500, 100, 900]);
    }
}
