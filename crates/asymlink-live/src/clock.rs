//! Clocks: the event loop reads time through [`Clock`], so the same loop runs on the
//! monotonic wall clock ([`MonotonicClock`]) and on a [`FakeClock`] in tests.
//!
//! The loop reads the clock **once per wake-up** and hands that `now` to every core call of
//! the iteration (quinn's `drive_timer` pattern): the core sees non-decreasing time and a
//! whole batch of packets shares one timestamp.

use asymlink_core::time::Instant;
use std::cell::Cell;
use std::rc::Rc;

/// A source of `now`.
pub trait Clock {
    /// The current instant (nanoseconds since the clock's epoch). Never decreases.
    fn now(&self) -> Instant;
    /// Wall-clock (UNIX epoch) nanoseconds corresponding to `t`, for pcap timestamps.
    fn to_unix_nanos(&self, t: Instant) -> u64;
}

/// `CLOCK_MONOTONIC`, with the epoch at construction.
#[derive(Debug)]
pub struct MonotonicClock {
    start: std::time::Instant,
    unix_at_start: u64,
}

impl MonotonicClock {
    /// A clock whose epoch is now.
    pub fn new() -> MonotonicClock {
        let unix_at_start = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        MonotonicClock {
            start: std::time::Instant::now(),
            unix_at_start,
        }
    }
}

impl Default for MonotonicClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for MonotonicClock {
    #[inline]
    fn now(&self) -> Instant {
        Instant(self.start.elapsed().as_nanos() as u64)
    }
    fn to_unix_nanos(&self, t: Instant) -> u64 {
        self.unix_at_start.saturating_add(t.0)
    }
}

/// A clock moved by hand (tests). Clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct FakeClock {
    t: Rc<Cell<u64>>,
}

impl FakeClock {
    /// A clock at `Instant::ZERO`.
    pub fn new() -> FakeClock {
        FakeClock::default()
    }
    /// Move to `t` (never backwards: an earlier `t` is ignored).
    pub fn set(&self, t: Instant) {
        if t.0 > self.t.get() {
            self.t.set(t.0);
        }
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Instant {
        Instant(self.t.get())
    }
    fn to_unix_nanos(&self, t: Instant) -> u64 {
        t.0
    }
}
