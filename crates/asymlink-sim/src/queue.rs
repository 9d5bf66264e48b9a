//! The simulator's pending-event set: a four-ary min-heap of packed keys, fed by a
//! hierarchical timer wheel.
//!
//! An entry is one `u128`: the time in the high 64 bits, then a 32-bit insertion
//! sequence, then the event packed into 32 bits ([`QueueEvent`]). Ordering is one integer
//! comparison, ties resolve in insertion order (the sequence numbers are unique, so the
//! packed event never decides) — the property that makes runs deterministic — and an
//! entry moves as one 16-byte word. When the sequence would wrap (after 2^32 − 1 entries)
//! the pending entries are renumbered in their order, which changes no order.
//! Cancellation is lazy: an owner keeps a [`Timer`] holding the time of its one live
//! entry and recognises stale entries when they pop.
//!
//! The heap is four-ary: half the levels of a binary heap, so a pop moves its hole down
//! half as many times (three comparisons among four adjacent children, one cache line
//! of keys, per level).
//!
//! # Near-term entries in the heap, timers in the wheel
//!
//! Packet events (an arrival, a transmitter freeing up) are due within microseconds or
//! milliseconds and go straight into the heap ([`EventQueue::push`]). Timers (a
//! connection's RTO or delayed ACK, a shaper's tick, an application's think time) are
//! mostly far ahead and usually superseded before they fire; [`EventQueue::push_timer`]
//! keeps those beyond the current ~1 ms slot in a hierarchical timer wheel (eight levels
//! of 64 slots, the finest 2^20 ns ≈ 1.05 ms wide, each level 64 times coarser, the
//! eighth covering all of `u64` time) and moves a slot's entries into the heap only when
//! the heap's earliest entry reaches that slot. The heap therefore holds only what is
//! due in the next millisecond or so, not one entry per connection, and its pops stay
//! cheap as the number of connections grows.
//!
//! An entry keeps the key it was given when pushed, wherever it waits, and the heap gives
//! up its earliest entry only when no entry in the wheel could come before it; so the
//! order of events — ties included — is exactly that of one heap holding everything.

use asymlink_core::time::Instant;

/// An event as the queue stores it: packed into 32 bits.
pub trait QueueEvent: Copy {
    /// The event as 32 bits.
    fn pack(self) -> u32;
    /// The event [`QueueEvent::pack`] gave `x` for.
    fn unpack(x: u32) -> Self;
}

impl QueueEvent for u32 {
    #[inline]
    fn pack(self) -> u32 {
        self
    }
    #[inline]
    fn unpack(x: u32) -> u32 {
        x
    }
}

/// The time of a packed key.
#[inline]
fn key_time(k: u128) -> u64 {
    (k >> 64) as u64
}

/// Bits of a key below the time: the sequence and the event.
const SEQ_SHIFT: u32 = 32;

/// A four-ary min-heap of keys (the children of `i` are `4i + 1 ..= 4i + 4`). The
/// vector holds at least four `u128::MAX` keys after the `len` entries, so every node's
/// four children can be read without asking how many there are.
#[derive(Debug)]
struct Heap {
    v: Vec<u128>,
    len: usize,
}

impl Default for Heap {
    fn default() -> Self {
        Heap {
            v: vec![u128::MAX; 4],
            len: 0,
        }
    }
}

impl Heap {
    #[inline]
    fn len(&self) -> usize {
        self.len
    }

    /// The entries (in heap order).
    fn entries(&mut self) -> &mut [u128] {
        &mut self.v[..self.len]
    }

    #[inline]
    fn peek(&self) -> Option<u128> {
        (self.len > 0).then(|| self.v[0])
    }

    #[inline]
    fn push(&mut self, k: u128) {
        let mut i = self.len;
        self.len += 1;
        if self.len + 4 > self.v.len() {
            self.v.push(u128::MAX);
        }
        let v = &mut self.v[..];
        while i > 0 {
            let p = (i - 1) / 4;
            let pk = v[p];
            if pk <= k {
                break;
            }
            v[i] = pk;
            i = p;
        }
        v[i] = k;
    }

    /// Remove the earliest key.
    #[inline]
    fn pop(&mut self) -> Option<u128> {
        if self.len == 0 {
            return None;
        }
        self.len -= 1;
        let n = self.len;
        let v = &mut self.v[..];
        let top = v[0];
        let last = std::mem::replace(&mut v[n], u128::MAX);
        let mut i = 0;
        loop {
            let c = 4 * i + 1;
            if c >= n {
                break;
            }
            // The smallest of the four children (the padding loses every comparison).
            let ch = &v[c..c + 4];
            let (a, b) = if ch[1] < ch[0] {
                (1, ch[1])
            } else {
                (0, ch[0])
            };
            let (cc, d) = if ch[3] < ch[2] {
                (3, ch[3])
            } else {
                (2, ch[2])
            };
            let (m, mk) = if d < b { (c + cc, d) } else { (c + a, b) };
            if last <= mk {
                break;
            }
            v[i] = mk;
            i = m;
        }
        if n > 0 {
            v[i] = last;
        }
        Some(top)
    }
}

/// log2 of the finest slot's width in ns (2^20 ns ≈ 1.05 ms).
const SLOT_BITS: u32 = 20;
/// log2 of the slots per level.
const LEVEL_BITS: u32 = 6;
const SLOTS: usize = 1 << LEVEL_BITS;
/// Levels: 20 + 6 × 8 = 68 ≥ 64 bits, so every time has a level.
const LEVELS: usize = 8;

/// A hierarchical timer wheel of keys due at or after `cur`.
///
/// Level `k` has 64 slots of 2^(20 + 6k) ns. An entry sits at the lowest level whose slot
/// width covers the highest bit in which its time differs from `cur`, and no level above
/// 0 holds an entry in the slot that contains `cur` (such a slot is spread over the finer
/// levels as soon as `cur` enters it), so every entry of level `k` is earlier than every
/// entry of level `k + 1`, and within a level the slots are in time order from `cur`'s
/// slot on. The next entries due are therefore in the
/// lowest occupied slot of the lowest occupied level: a level-0 slot is moved into the
/// heap as a whole; a coarser slot is spread over the finer levels first (each entry
/// moves down at most seven times in its life).
#[derive(Debug)]
struct Wheel {
    /// Entries due before `cur` are not here (they are in the heap); `cur` is a multiple
    /// of the level-0 slot width and only grows.
    cur: u64,
    /// Bit `i` of `occupied[k]`: slot `i` of level `k` holds entries.
    occupied: [u64; LEVELS],
    /// `LEVELS × SLOTS` slots, level-major.
    slots: Vec<Vec<u128>>,
    /// Entries held.
    len: usize,
    /// An empty vector kept to swap with a slot being emptied (its capacity is reused).
    spare: Vec<u128>,
}

impl Wheel {
    fn new() -> Self {
        Wheel {
            cur: 0,
            occupied: [0; LEVELS],
            slots: (0..LEVELS * SLOTS).map(|_| Vec::new()).collect(),
            len: 0,
            spare: Vec::new(),
        }
    }

    /// Shift of level `k`'s slot index within a time.
    #[inline]
    fn shift(k: usize) -> u32 {
        SLOT_BITS + LEVEL_BITS * k as u32
    }

    /// Hold `e`, due at or after `cur`.
    #[inline]
    fn insert(&mut self, e: u128) {
        let t = key_time(e);
        debug_assert!(t >= self.cur);
        let diff = (t ^ self.cur) >> SLOT_BITS;
        let k = if diff == 0 {
            0
        } else {
            ((63 - diff.leading_zeros()) / LEVEL_BITS) as usize
        };
        let i = ((t >> Self::shift(k)) as usize) & (SLOTS - 1);
        self.slots[k * SLOTS + i].push(e);
        self.occupied[k] |= 1 << i;
        self.len += 1;
    }

    /// The lowest occupied level and slot, and the time that slot starts (no earlier than
    /// `cur`): no entry held is due before it.
    #[inline]
    fn next_slot(&self) -> Option<(usize, usize, u64)> {
        let k = self.occupied.iter().position(|&o| o != 0)?;
        let i = self.occupied[k].trailing_zeros() as usize;
        let up = Self::shift(k) + LEVEL_BITS;
        let base = if up >= 64 { 0 } else { self.cur >> up << up };
        let start = base | (i as u64) << Self::shift(k);
        Some((k, i, start.max(self.cur)))
    }

    /// Empty the lowest occupied slot: a level-0 slot into `heap` (then `cur` moves past
    /// it), a coarser one into the finer levels (then `cur` moves to its start).
    fn advance(&mut self, heap: &mut Heap) {
        let Some((k, i, start)) = self.next_slot() else {
            return;
        };
        self.occupied[k] &= !(1 << i);
        let mut taken = std::mem::take(&mut self.spare);
        std::mem::swap(&mut taken, &mut self.slots[k * SLOTS + i]);
        self.len -= taken.len();
        if k == 0 {
            self.cur = start + (1 << SLOT_BITS);
            for e in taken.drain(..) {
                heap.push(e);
            }
        } else {
            self.cur = start;
            for e in taken.drain(..) {
                self.insert(e);
            }
        }
        self.spare = taken;
        self.settle();
    }

    /// After `cur` moved: spread the coarse slots that now contain `cur` over the finer
    /// levels, coarsest first. Afterwards no level above 0 holds an entry in `cur`'s own
    /// slot, which is what keeps the levels in time order.
    fn settle(&mut self) {
        for k in (1..LEVELS).rev() {
            let i = ((self.cur >> Self::shift(k)) as usize) & (SLOTS - 1);
            if self.occupied[k] & (1 << i) == 0 {
                continue;
            }
            self.occupied[k] &= !(1 << i);
            let mut taken = std::mem::take(&mut self.spare);
            std::mem::swap(&mut taken, &mut self.slots[k * SLOTS + i]);
            self.len -= taken.len();
            for e in taken.drain(..) {
                self.insert(e);
            }
            self.spare = taken;
        }
    }
}

/// Pending events in time order, FIFO among equal times.
#[derive(Debug)]
pub struct EventQueue<E> {
    /// Entries due before `wheel.cur`, and any pushed with [`EventQueue::push`].
    heap: Heap,
    /// Timers due at or after `wheel.cur`.
    wheel: Wheel,
    /// The last sequence number given.
    seq: u32,
    /// The largest sequence number given before the pending entries are renumbered
    /// (`u32::MAX`; tests lower it).
    seq_max: u32,
    _ev: std::marker::PhantomData<E>,
}

impl<E: QueueEvent> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            heap: Heap::default(),
            wheel: Wheel::new(),
            seq: 0,
            seq_max: u32::MAX,
            _ev: std::marker::PhantomData,
        }
    }
}

impl<E: QueueEvent> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    #[inline]
    fn entry(&mut self, t: Instant, ev: E) -> u128 {
        if self.seq == self.seq_max {
            self.renumber();
        }
        self.seq += 1;
        (t.as_nanos() as u128) << 64 | (self.seq as u128) << SEQ_SHIFT | ev.pack() as u128
    }

    /// The sequence numbers ran out: number the pending entries 1, 2, ... in their order
    /// (a strictly increasing map of the keys, so the heap stays a heap and every entry
    /// stays in its slot of the wheel) and continue after them.
    #[cold]
    #[inline(never)]
    fn renumber(&mut self) {
        let mut all: Vec<u128> = self.heap.entries().to_vec();
        for s in &self.wheel.slots {
            all.extend_from_slice(s);
        }
        all.sort_unstable();
        let low = (1u128 << SEQ_SHIFT) - 1;
        let renumbered = |k: u128| -> u128 {
            let pos = all.partition_point(|&x| x < k) as u128;
            (k >> 64) << 64 | (pos + 1) << SEQ_SHIFT | (k & low)
        };
        for k in self.heap.entries().iter_mut() {
            *k = renumbered(*k);
        }
        for s in self.wheel.slots.iter_mut() {
            for k in s.iter_mut() {
                *k = renumbered(*k);
            }
        }
        self.seq = u32::try_from(all.len()).expect("fewer than 2^32 pending events");
        assert!(
            self.seq < self.seq_max,
            "more pending events than sequence numbers"
        );
    }

    /// Schedule `ev` at `t`, straight into the heap: for events due soon (packet
    /// arrivals, transmitters freeing up).
    #[inline]
    pub fn push(&mut self, t: Instant, ev: E) {
        let e = self.entry(t, ev);
        self.heap.push(e);
    }

    /// Schedule `ev` at `t`, a timer: beyond the current ~1 ms slot it waits in the wheel
    /// until its slot comes up. The order of events is the same as with
    /// [`EventQueue::push`].
    #[inline]
    pub fn push_timer(&mut self, t: Instant, ev: E) {
        let e = self.entry(t, ev);
        if key_time(e) < self.wheel.cur {
            self.heap.push(e);
        } else {
            self.wheel.insert(e);
        }
    }

    /// Remove and return the earliest event if it is due at or before `limit`.
    #[inline]
    pub fn pop_until(&mut self, limit: Instant) -> Option<(Instant, E)> {
        let limit = limit.as_nanos();
        // Move timers into the heap until its earliest entry is earlier than anything
        // left in the wheel (or nothing in the wheel is due by `limit`).
        loop {
            let top = self.heap.peek().map(key_time);
            // The common case: the heap's earliest entry is before the wheel's range.
            if top.is_some_and(|t| t < self.wheel.cur) || self.wheel.len == 0 {
                break;
            }
            let Some((_, _, start)) = self.wheel.next_slot() else {
                break;
            };
            if top.is_some_and(|t| t < start) || start > limit {
                break;
            }
            self.wheel.advance(&mut self.heap);
        }
        let at = key_time(self.heap.peek()?);
        if at > limit {
            return None;
        }
        let e = self.heap.pop()?;
        Some((Instant(at), E::unpack(e as u32)))
    }

    /// Number of pending entries (stale ones included).
    pub fn len(&self) -> usize {
        self.heap.len() + self.wheel.len
    }

    /// Entries in the heap (the rest wait in the timer wheel).
    pub fn heap_len(&self) -> usize {
        self.heap.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
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
    /// The entry is a timer ([`EventQueue::push_timer`]).
    #[inline]
    pub fn arm_by<E: QueueEvent>(&mut self, q: &mut EventQueue<E>, t: Instant, ev: E) {
        if self.0.is_none_or(|s| t < s) {
            self.0 = Some(t);
            q.push_timer(t, ev);
        }
    }

    /// Make sure the live entry fires exactly at `t`: push `ev` at `t` unless it already
    /// does (an entry at another time becomes stale).
    #[inline]
    pub fn arm_at<E: QueueEvent>(&mut self, q: &mut EventQueue<E>, t: Instant, ev: E) {
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

    impl QueueEvent for char {
        fn pack(self) -> u32 {
            self as u32
        }
        fn unpack(x: u32) -> char {
            char::from_u32(x).unwrap()
        }
    }

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

    /// Timers and near-term events, pushed and popped in random interleavings, come out
    /// in exactly the order of one sorted list of `(time, push order)`.
    #[test]
    fn wheel_keeps_the_order_of_one_heap() {
        for seed in 0..20 {
            random_order(seed, u32::MAX);
        }
    }

    /// The same with sequence numbers that run out every few hundred entries: renumbering
    /// the pending entries changes no order.
    #[test]
    fn renumbering_keeps_the_order() {
        for seed in 0..20 {
            random_order(seed, 900 + 20 * seed as u32);
        }
    }

    fn random_order(seed: u64, seq_max: u32) {
        use asymlink_core::rand::Rng;
        {
            let mut rng = Rng::new(seed);
            let mut q = EventQueue::new();
            q.seq_max = seq_max;
            let mut reference: Vec<(u64, u32)> = Vec::new();
            let mut got = Vec::new();
            let mut now = 0u64;
            let mut n = 0u32;
            for _ in 0..4000 {
                match rng.below(4) {
                    0 | 1 => {
                        // Near or far, on slot boundaries now and then, ties common.
                        let span = [1u64 << 10, 1 << 20, 1 << 27, 1 << 40][rng.below(4) as usize];
                        let mut t = now + rng.below(span);
                        if rng.below(4) == 0 {
                            t &= !((1 << 20) - 1);
                            t = t.max(now);
                        }
                        n += 1;
                        if rng.below(2) == 0 {
                            q.push(Instant(t), n);
                        } else {
                            q.push_timer(Instant(t), n);
                        }
                        reference.push((t, n));
                    }
                    _ => {
                        let limit = now + rng.below(1 << 22);
                        while let Some((t, e)) = q.pop_until(Instant(limit)) {
                            assert!(t.0 >= now && t.0 <= limit);
                            now = t.0;
                            got.push((t.0, e));
                        }
                        now = limit;
                    }
                }
            }
            while let Some((t, e)) = q.pop_until(Instant(u64::MAX)) {
                got.push((t.0, e));
            }
            reference.sort_unstable();
            assert_eq!(got, reference, "seed {seed}");
            assert!(q.is_empty());
            assert!(seq_max == u32::MAX || n > seq_max, "renumbered");
        }
    }

    #[test]
    fn far_timers_wait_outside_the_heap() {
        let mut q = EventQueue::new();
        for i in 0..1000u32 {
            q.push_timer(Instant(1_000_000_000 + i as u64 * 1_000_000), i);
        }
        q.push(Instant(10), 5000);
        assert_eq!(q.len(), 1001);
        assert_eq!(q.heap_len(), 1);
        assert_eq!(
            q.pop_until(Instant(2_000_000_000)),
            Some((Instant(10), 5000))
        );
        // The first timer's slot moved into the heap, not the whole wheel.
        assert_eq!(
            q.pop_until(Instant(2_000_000_000)),
            Some((Instant(1_000_000_000), 0))
        );
        assert!(q.heap_len() <= 2, "heap holds {}", q.heap_len());
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
