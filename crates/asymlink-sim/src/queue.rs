//! The simulator's pending-event set: a binary min-heap keyed by `(time, sequence)`.
//!
//! Time and insertion sequence are packed into one `u128` key (time in the high 64 bits),
//! so ordering is one integer comparison and ties resolve in insertion order — the
//! property that makes runs deterministic. Cancellation is lazy: an owner keeps a
//! [`Timer`] holding the time of its one live entry and recognises stale entries when
//! they pop.

use asymlink_core::time::Instant;
use std::collections::BinaryHeap;

#[derive(Clone, Copy, Debug)]
struct Entry<E> {
    key: u128,
    ev: E,
}

impl<E> PartialEq for Entry<E> {
    fn eq(&self, o: &Self) -> bool {
        self.key == o.key
    }
}
impl<E> Eq for Entry<E> {}
impl<E> PartialOrd for Entry<E> {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}
impl<E> Ord for Entry<E> {
    /// Reversed: `BinaryHeap` is a max-heap and the earliest entry must come first.
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        o.key.cmp(&self.key)
    }
}

/// Pending events in time order, FIFO among equal times.
#[derive(Debug)]
pub struct EventQueue<E> {
    heap: BinaryHeap<Entry<E>>,
    seq: u64,
}

impl<E: Copy> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: BinaryHeap::new(),
            seq: 0,
        }
    }
}

impl<E: Copy> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Schedule `ev` at `t`.
    #[inline]
    pub fn push(&mut self, t: Instant, ev: E) {
        self.seq += 1;
        self.heap.push(Entry {
            key: (t.as_nanos() as u128) << 64 | self.seq as u128,
            ev,
        });
    }

    /// Remove and return the earliest event if it is due at or before `limit`.
    #[inline]
    pub fn pop_until(&mut self, limit: Instant) -> Option<(Instant, E)> {
        let top = self.heap.peek()?;
        let at = (top.key >> 64) as u64;
        if at > limit.as_nanos() {
            return None;
        }
        let e = self.heap.pop()?;
        Some((Instant(at), e.ev))
    }

    /// Number of pending entries (stale ones included).
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }
}

/// A lazily re-armed timer: the time of its owner's one live entry in an
/// [`EventQueue`]. Entries are never removed; re-arming pushes a new one and the old one
/// becomes stale, recognised by [`Timer::fire`] when it pops.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Timer(Option<Instant>);

impl Timer {
    /// Make sure an entry fires at `t` or earlier: push `ev` at `t` unless the live entry
    /// is already due by then. For deadlines that may move later cheaply (the entry
    /// fires early, finds nothing due, and the owner re-arms) and must move earlier.
    #[inline]
    pub fn arm_by<E: Copy>(&mut self, q: &mut EventQueue<E>, t: Instant, ev: E) {
        if self.0.is_none_or(|s| t < s) {
            self.0 = Some(t);
            q.push(t, ev);
        }
    }

    /// Make sure the live entry fires exactly at `t`: push `ev` at `t` unless it already
    /// does (an entry at another time becomes stale).
    #[inline]
    pub fn arm_at<E: Copy>(&mut self, q: &mut EventQueue<E>, t: Instant, ev: E) {
        if self.0 != Some(t) {
            self.0 = Some(t);
            q.push(t, ev);
        }
    }

    /// An entry of this timer popped at `now`: whether it is the live one (then the timer
    /// is disarmed) rather than a stale one to ignore.
    #[inline]
    pub fn fire(&mut self, now: Instant) -> bool {
        let live = self.0 == Some(now);
        if live {
            self.0 = None;
        }
        live
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn time_order_then_insertion_order() {
        let mut q = EventQueue::new();
        q.push(Instant(5), 'a');
        q.push(Instant(3), 'b');
        q.push(Instant(5), 'c');
        q.push(Instant(3), 'd');
        let mut out = Vec::new();
        while let Some((t, e)) = q.pop_until(Instant(10)) {
            out.push((t.0, e));
        }
        assert_eq!(out, vec![(3, 'b'), (3, 'd'), (5, 'a'), (5, 'c')]);
    }

    #[test]
    fn respects_the_limit() {
        let mut q = EventQueue::new();
        q.push(Instant(7), 1);
        assert_eq!(q.pop_until(Instant(6)), None);
        assert_eq!(q.pop_until(Instant(7)), Some((Instant(7), 1)));
        assert!(q.is_empty());
    }

    #[test]
    fn timer_fires_only_its_live_entry() {
        let mut q = EventQueue::new();
        let mut t = Timer::default();
        t.arm_by(&mut q, Instant(5), 'x');
        t.arm_by(&mut q, Instant(7), 'x'); // later: the entry at 5 serves
        t.arm_by(&mut q, Instant(3), 'x'); // earlier: a new entry, 5 goes stale
        assert_eq!(q.len(), 2);
        let mut fired = Vec::new();
        while let Some((at, _)) = q.pop_until(Instant(10)) {
            fired.push((at.0, t.fire(at)));
        }
        assert_eq!(fired, [(3, true), (5, false)]);
    }

    #[test]
    fn exact_timer_follows_its_deadline_both_ways() {
        let mut q = EventQueue::new();
        let mut t = Timer::default();
        t.arm_at(&mut q, Instant(5), 'x');
        t.arm_at(&mut q, Instant(5), 'x'); // unchanged: no new entry
        t.arm_at(&mut q, Instant(8), 'x'); // later: a new entry, 5 goes stale
        assert_eq!(q.len(), 2);
        let mut fired = Vec::new();
        while let Some((at, _)) = q.pop_until(Instant(10)) {
            fired.push((at.0, t.fire(at)));
        }
        assert_eq!(fired, [(5, false), (8, true)]);
    }
}
