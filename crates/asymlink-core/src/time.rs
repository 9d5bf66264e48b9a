//! Time as integer nanoseconds.
//!
//! The core never reads a clock: every entry point takes `now: Instant`, supplied by the
//! runtime (the simulator's event clock or the live box's monotonic clock). Callers must
//! supply non-decreasing `now`; code in this crate treats a `now` that goes backwards as
//! zero elapsed time (it never panics on it).

use core::fmt;
use core::ops::{Add, AddAssign, Sub};
pub use core::time::Duration;

/// A point in time: nanoseconds since an arbitrary epoch (run start in the simulator,
/// process start in the live box).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Instant(pub u64);

impl Instant {
    /// The epoch.
    pub const ZERO: Instant = Instant(0);
    /// A time later than any real deadline.
    pub const MAX: Instant = Instant(u64::MAX);

    /// From nanoseconds since the epoch.
    pub const fn from_nanos(ns: u64) -> Self {
        Instant(ns)
    }
    /// From microseconds since the epoch.
    pub const fn from_micros(us: u64) -> Self {
        Instant(us * 1_000)
    }
    /// From milliseconds since the epoch.
    pub const fn from_millis(ms: u64) -> Self {
        Instant(ms * 1_000_000)
    }
    /// From whole seconds since the epoch.
    pub const fn from_secs(s: u64) -> Self {
        Instant(s * 1_000_000_000)
    }
    /// Nanoseconds since the epoch.
    pub const fn as_nanos(self) -> u64 {
        self.0
    }
    /// Seconds since the epoch as a float (for reports and plots only).
    pub fn as_secs_f64(self) -> f64 {
        self.0 as f64 * 1e-9
    }
    /// Time elapsed since `earlier`; zero if `earlier` is later than `self`.
    pub fn saturating_since(self, earlier: Instant) -> Duration {
        Duration::from_nanos(self.0.saturating_sub(earlier.0))
    }
    /// `self + d`, saturating at [`Instant::MAX`].
    pub fn saturating_add(self, d: Duration) -> Instant {
        Instant(self.0.saturating_add(dur_ns(d)))
    }
    /// `self - d`, saturating at [`Instant::ZERO`].
    pub fn saturating_sub(self, d: Duration) -> Instant {
        Instant(self.0.saturating_sub(dur_ns(d)))
    }
}

/// A duration in nanoseconds, saturating at `u64::MAX` (584 years).
#[inline]
pub fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Add<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn add(self, d: Duration) -> Instant {
        self.saturating_add(d)
    }
}

impl AddAssign<Duration> for Instant {
    #[inline]
    fn add_assign(&mut self, d: Duration) {
        *self = *self + d;
    }
}

impl Sub<Instant> for Instant {
    type Output = Duration;
    /// Saturating: a negative span is zero.
    #[inline]
    fn sub(self, rhs: Instant) -> Duration {
        self.saturating_since(rhs)
    }
}

impl Sub<Duration> for Instant {
    type Output = Instant;
    #[inline]
    fn sub(self, d: Duration) -> Instant {
        self.saturating_sub(d)
    }
}

impl fmt::Debug for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{:09}s",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

impl fmt::Display for Instant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The earlier of two optional deadlines (`None` means "no deadline").
#[inline]
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(x), Some(y)) => Some(x.min(y)),
        (x, None) => x,
        (None, y) => y,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arithmetic_saturates() {
        let t = Instant::from_millis(5);
        assert_eq!(t - Instant::from_millis(7), Duration::ZERO);
        assert_eq!(t - Duration::from_millis(9), Instant::ZERO);
        assert_eq!(Instant::MAX + Duration::from_secs(1), Instant::MAX);
        assert_eq!(t + Duration::from_micros(1), Instant(5_001_000));
    }

    #[test]
    fn earliest_of_options() {
        let a = Some(Instant(3));
        assert_eq!(earliest(a, None), a);
        assert_eq!(earliest(None, a), a);
        assert_eq!(earliest(a, Some(Instant(2))), Some(Instant(2)));
        assert_eq!(earliest(None, None), None);
    }
}
