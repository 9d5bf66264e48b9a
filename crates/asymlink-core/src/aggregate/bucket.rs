//! Token arithmetic for aggregate rate control: exact integers on explicit time.
//!
//! # Units
//!
//! Tokens are counted in **bit-nanoseconds** ([`UNITS_PER_BYTE`] = 8·10⁹ per byte), so a
//! bucket filling at `r` bit/s gains exactly `r` units per nanosecond: a full-rate bucket
//! never rounds. A bucket filling at a fraction of a rate (`r_m / n` for one of `n`
//! partitions) carries the remainder of the division from one update to the next, so the
//! partitions together gain exactly what the aggregate would: nothing is created or lost
//! by rounding, whatever the update pattern. Counters are `u128` (a 100 Gbit/s bucket
//! can run for 10¹⁹ s before overflowing).
//!
//! # Sharing unused tokens (§4.2.3)
//!
//! [`water_fill`] hands the tokens that overflow full logical buckets to the buckets that
//! are not full, in equal shares, re-sharing what a receiving bucket cannot hold, until
//! everything is placed or every bucket is full (the remainder overflows the aggregate and
//! is lost). Since each bucket holds at most its depth `b_i` and the depths sum to `B`,
//! the tokens held never exceed the aggregate depth. [`excess_tokens`] is the paper's
//! closed form for the same quantity, min{B − Σ b̂_i, Σ max(0, r_i(T − t_i) − b_i)}; the
//! tests check that the two agree where the formula applies (buckets that were empty at
//! `t_i` and have not sent since).

use crate::time::{dur_ns, Instant};
use crate::units::Rate;

/// Token units per byte: one bit-nanosecond is the unit (a rate of `r` bit/s adds `r`
/// units per nanosecond).
pub const UNITS_PER_BYTE: u128 = 8_000_000_000;

/// `bytes` in token units.
#[inline]
pub const fn units(bytes: u64) -> u128 {
    bytes as u128 * UNITS_PER_BYTE
}

/// Token units as whole bytes (rounded down).
#[inline]
pub const fn whole_bytes(units: u128) -> u64 {
    (units / UNITS_PER_BYTE) as u64
}

/// A token bucket filling at `rate · num / den` with depth `depth` (units).
///
/// The bucket itself never caps: [`Bucket::accrue`] returns what the elapsed time adds,
/// and the caller decides where tokens above the depth go (lost for a plain bucket, shared
/// for a logical partition).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Tokens held (units).
    pub level: u128,
    /// Depth (units).
    pub depth: u128,
    /// Fill rate numerator: bit/s (units per ns) times `num`.
    rate: u128,
    /// Share of the rate: `num / den`.
    num: u128,
    den: u128,
    /// Remainder of the last division (units × den), carried so that rounding never loses
    /// tokens.
    rem: u128,
    /// The last instant the bucket was empty (could not pay for a packet); the `t_i` of
    /// the paper's excess formula.
    pub last_empty: Instant,
}

impl Bucket {
    /// A full bucket of `depth` units filling at `rate`.
    pub fn full(rate: Rate, depth: u128) -> Bucket {
        Bucket {
            level: depth,
            depth,
            rate: rate.0 as u128,
            num: 1,
            den: 1,
            rem: 0,
            last_empty: Instant::ZERO,
        }
    }

    /// Fill at `rate · num / den` from now on (`den > 0`). The carried remainder is kept
    /// when the share does not change.
    pub fn set_rate(&mut self, rate: Rate, num: u64, den: u64) {
        let (num, den) = (num as u128, den.max(1) as u128);
        if (rate.0 as u128, num, den) != (self.rate, self.num, self.den) {
            self.rate = rate.0 as u128;
            self.num = num;
            self.den = den;
            self.rem = 0;
        }
    }

    /// The fill rate in bit/s (rounded down).
    pub fn rate_bps(&self) -> u64 {
        (self.rate * self.num / self.den) as u64
    }

    /// The tokens `dt_ns` nanoseconds add (not yet added to `level`).
    #[inline]
    pub fn accrue(&mut self, dt_ns: u64) -> u128 {
        let total = self.rate * self.num * dt_ns as u128 + self.rem;
        self.rem = total % self.den;
        total / self.den
    }

    /// Nanoseconds until the bucket holds `cost` units at its fill rate alone
    /// (`u64::MAX` if it never will: a zero rate).
    pub fn nanos_until(&self, cost: u128) -> u64 {
        if self.level >= cost {
            return 0;
        }
        let per_ns = self.rate * self.num; // units × den per ns
        if per_ns == 0 {
            return u64::MAX;
        }
        let need = (cost - self.level) * self.den;
        let need = need.saturating_sub(self.rem);
        u64::try_from(need.div_ceil(per_ns)).unwrap_or(u64::MAX)
    }

    /// Room below the depth.
    #[inline]
    pub fn room(&self) -> u128 {
        self.depth.saturating_sub(self.level)
    }
}

/// Add `add` units to `b`, capped at its depth; returns what did not fit.
#[inline]
pub fn fill(b: &mut Bucket, add: u128) -> u128 {
    let room = b.room();
    if add <= room {
        b.level += add;
        0
    } else {
        b.level = b.depth.max(b.level);
        add - room
    }
}

/// Share `excess` units equally among the buckets of `buckets` that are not full
/// (`eligible[i]`), re-sharing what a bucket cannot hold, until all is placed or every
/// eligible bucket is full. Returns what could not be placed (it overflows the aggregate).
/// Shares that do not divide evenly give the odd units to the earliest buckets, so the
/// result is deterministic and conserves tokens exactly.
pub fn water_fill(buckets: &mut [&mut Bucket], mut excess: u128) -> u128 {
    while excess > 0 {
        let open: Vec<usize> = (0..buckets.len())
            .filter(|&i| buckets[i].room() > 0)
            .collect();
        if open.is_empty() {
            break;
        }
        let m = open.len() as u128;
        let share = excess / m;
        let mut odd = excess % m;
        let mut placed = 0u128;
        for &i in &open {
            let mut give = share;
            if odd > 0 {
                give += 1;
                odd -= 1;
            }
            let give = give.min(buckets[i].room());
            buckets[i].level += give;
            placed += give;
        }
        if placed == 0 {
            break;
        }
        excess -= placed;
    }
    excess
}

/// One logical bucket as the paper's excess formula sees it.
#[derive(Clone, Copy, Debug)]
pub struct LogicalView {
    /// Tokens of its own at `T` (b̂_i, units).
    pub level: u128,
    /// Depth b_i (units).
    pub depth: u128,
    /// Fill rate r_i, bit/s (= units per ns).
    pub rate_bps: u128,
    /// The last time it was empty (t_i).
    pub last_empty: Instant,
}

/// §4.2.3: the unused tokens available to the other logical buckets at time `t`:
/// min{B − Σ b̂_i, Σ max(0, r_i·(T − t_i) − b_i)} (units), where `aggregate_depth` is B.
pub fn excess_tokens(aggregate_depth: u128, buckets: &[LogicalView], t: Instant) -> u128 {
    let held: u128 = buckets.iter().map(|b| b.level).sum();
    let unused: u128 = buckets
        .iter()
        .map(|b| {
            let gained = b.rate_bps * dur_ns(t - b.last_empty) as u128;
            gained.saturating_sub(b.depth)
        })
        .sum();
    aggregate_depth.saturating_sub(held).min(unused)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fractional_share_never_loses_tokens_to_rounding() {
        // 500 kbit/s split three ways, updated at awkward instants: the three partitions
        // together gain exactly what the aggregate gains.
        let mut parts: Vec<Bucket> = (0..3)
            .map(|_| {
                let mut b = Bucket::full(Rate::kbps(500), u128::MAX);
                b.level = 0;
                b.set_rate(Rate::kbps(500), 1, 3);
                b
            })
            .collect();
        let mut total = 0u128;
        let mut t = 0u64;
        for step in [1u64, 7, 333, 1_000_001, 3, 15_000_000, 2] {
            t += step;
            for p in parts.iter_mut() {
                total += p.accrue(step);
            }
        }
        assert_eq!(total, 500_000 * t as u128);
    }

    #[test]
    fn nanos_until_is_exact() {
        // 8 Mbit/s = 1 byte per microsecond: 1000 bytes need 1 ms from empty.
        let mut b = Bucket::full(Rate::mbps(8), units(2000));
        b.level = 0;
        assert_eq!(b.nanos_until(units(1000)), 1_000_000);
        b.level = units(400);
        assert_eq!(b.nanos_until(units(1000)), 600_000);
        let add = b.accrue(600_000);
        assert_eq!(fill(&mut b, add), 0);
        assert_eq!(b.level, units(1000));
    }

    #[test]
    fn water_fill_shares_equally_and_respects_depths() {
        let mk = |level: u64, depth: u64| {
            let mut b = Bucket::full(Rate::kbps(1), units(depth));
            b.level = units(level);
            b
        };
        let (mut a, mut b, mut c) = (mk(0, 100), mk(90, 100), mk(100, 100));
        // 60 bytes of excess: a and b are open, 30 each; b holds only 10, a takes the rest.
        let lost = water_fill(&mut [&mut a, &mut b, &mut c], units(60));
        assert_eq!(lost, 0);
        assert_eq!(
            (a.level, b.level, c.level),
            (units(50), units(100), units(100))
        );
        // Everything full: the excess overflows the aggregate.
        let lost = water_fill(&mut [&mut a, &mut b, &mut c], units(80));
        assert_eq!(lost, units(30));
        assert_eq!(a.level, units(100));
    }
}
