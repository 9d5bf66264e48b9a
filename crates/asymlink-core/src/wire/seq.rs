//! TCP sequence numbers with modular comparison (RFC 9293 §3.4, RFC 1982 style).

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, Sub};

/// A 32-bit TCP sequence number. Comparisons are modulo 2^32: `a < b` when `b` is ahead of
/// `a` by less than 2^31. Never compare raw `u32` values.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Signed distance `self - other` (positive when `self` is ahead).
    #[inline]
    pub fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    /// The larger of two sequence numbers in modular order.
    #[inline]
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        if self.diff(other) >= 0 {
            self
        } else {
            other
        }
    }
    /// The smaller of two sequence numbers in modular order.
    #[inline]
    pub fn min(self, other: SeqNumber) -> SeqNumber {
        if self.diff(other) <= 0 {
            self
        } else {
            other
        }
    }
}

impl PartialOrd for SeqNumber {
    #[inline]
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        Some(self.diff(*other).cmp(&0))
    }
}

impl Add<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn add(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_add(n))
    }
}

impl Sub<u32> for SeqNumber {
    type Output = SeqNumber;
    #[inline]
    fn sub(self, n: u32) -> SeqNumber {
        SeqNumber(self.0.wrapping_sub(n))
    }
}

impl Sub<SeqNumber> for SeqNumber {
    type Output = i32;
    #[inline]
    fn sub(self, o: SeqNumber) -> i32 {
        self.diff(o)
    }
}

impl fmt::Debug for SeqNumber {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wraps() {
        let a = SeqNumber(u32::MAX - 10);
        let b = a + 20;
        assert_eq!(b.0, 9);
        assert!(a < b);
        assert!(b > a);
        assert_eq!(b - a, 20);
        assert_eq!(a - b, -20);
        assert_eq!(a.max(b), b);
        assert_eq!(a.min(b), a);
    }
}
