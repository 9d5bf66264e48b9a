//! TCP sequence numbers with modular comparison (RFC 9293 §3.4, RFC 1982 style).

use core::cmp::Ordering;
use core::fmt;
use core::ops::{Add, Sub};

/// A 32-bit TCP sequence number. Comparisons are modulo 2^32: `a < b` when `b` is ahead of
/// `a` by less than 2^31. Never compare raw `u32` values.
///
/// Two numbers exactly 2^31 apart are *incomparable* (RFC 1982 §3.2: "the result of the
/// comparison is undefined"): `partial_cmp` returns `None`, so `<`, `>`, `<=` and `>=` are
/// all false. Without that, each would be "less than" the other.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SeqNumber(pub u32);

impl SeqNumber {
    /// Signed distance `self - other` (positive when `self` is ahead). Two numbers 2^31
    /// apart give `i32::MIN` whichever way round.
    #[inline]
    pub fn diff(self, other: SeqNumber) -> i32 {
        self.0.wrapping_sub(other.0) as i32
    }
    /// The larger of two sequence numbers in modular order. For incomparable numbers
    /// (2^31 apart) the one with the larger raw value, so that `max` is commutative.
    #[inline]
    pub fn max(self, other: SeqNumber) -> SeqNumber {
        match self.partial_cmp(&other) {
            Some(Ordering::Less) => other,
            Some(_) => self,
            None if self.0 > other.0 => self,
            None => other,
        }
    }
    /// The smaller of two sequence numbers in modular order. For incomparable numbers
    /// (2^31 apart) the one with the smaller raw value, so that `min` is commutative.
    #[inline]
    pub fn min(self, other: SeqNumber) -> SeqNumber {
        match self.partial_cmp(&other) {
            Some(Ordering::Greater) => other,
            Some(_) => self,
            None if self.0 < other.0 => self,
            None => other,
        }
    }
}

impl PartialOrd for SeqNumber {
    #[inline]
    fn partial_cmp(&self, other: &SeqNumber) -> Option<Ordering> {
        match self.diff(*other) {
            i32::MIN => None,
            d => Some(d.cmp(&0)),
        }
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

    #[test]
    fn half_space_apart_is_incomparable() {
        let a = SeqNumber(5);
        let b = a + (1 << 31);
        assert_eq!(a.partial_cmp(&b), None);
        let (lt, gt, le, ge) = (a < b, a > b, a <= b, a >= b);
        assert!(!lt && !gt && !le && !ge);
        assert_eq!(a.max(b), b.max(a));
        assert_eq!(a.min(b), b.min(a));
        assert_ne!(a.max(b), a.min(b));
    }
}
