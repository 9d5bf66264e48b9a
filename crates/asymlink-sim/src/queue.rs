//! The simulator's pending-event set: a hierarchical timing wheel whose finest slots are
//! taken out one at a time and sorted, with a small four-ary heap beside them.
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
//! # Places held without entries
//!
//! A [`PlacedTimer`] can take its entry's place in the order without the entry
//! ([`PlacedTimer::hold_at`]): it takes the sequence number a push would have taken and
//! keeps it, and only if it is armed before that place has passed
//! ([`PlacedTimer::arm_at`]) does the entry go into the queue, with that number — so it
//! runs exactly where it would have run had it been pushed when the place was taken. An
//! owner whose entry would find nothing to do when it fires holds its place instead and
//! saves the event. A place never armed costs nothing but its number. Held places are
//! renumbered with the pending entries: once a place was held the queue refuses to
//! renumber by itself, and when only 2^28 numbers are left it stops handing out entries
//! at the end of the finest slot being taken out ([`EventQueue::pop_until`] answers
//! `None`, [`EventQueue::renumber_due`] says why) until its owner renumbers
//! ([`EventQueue::renumber_with`], given every `PlacedTimer`). The owner asks once per
//! `None`, not once per event:
//!
//! ```ignore
//! loop {
//!     while let Some((t, ev)) = q.pop_until(limit) { /* dispatch */ }
//!     if !q.renumber_due() { break; }
//!     q.renumber_with(timers.iter_mut());
//! }
//! ```
//!
//! # A calendar of slots
//!
//! Every entry ([`EventQueue::push`]) goes into the wheel unless its finest slot has
//! already been taken out. The finest level has 1 024 slots; coarser levels of 64 slots,
//! each 64 times wider, cover the rest of time, and a coarse slot is spread over the finer
//! levels when time reaches it (a connection's RTO, a flow's start). When the entries
//! taken out last are all popped, the next occupied finest slot is taken out whole and
//! sorted (the "run"); entries pushed meanwhile for the time before its end (a transmitter
//! freeing up within the slot, an arrival right behind another) go into the heap, and
//! each pop takes the earlier of the run's next entry and the heap's top. A packet event
//! therefore costs an append to a slot, its share of sorting a few entries and a read
//! from the run, whatever the number of pending events; a heap of every pending entry
//! (one arrival per busy link direction) grew by a level with every fourfold.
//!
//! The width of the finest slots follows the events' density: every few thousand entries
//! (and never sooner than the wheel's size in entries, so placing every entry again costs
//! at most one insertion per entry popped) the queue counts the entries that left the
//! wheel per finest slot taken out, and outside 4–32 it scales the width by the power of
//! two that brings that to about 6 (from 64 ns to 16.8 ms; 64 μs at first).
//!
//! An entry keeps the key it was given when pushed, wherever it waits, and the run and
//! the heap hold only entries due before every entry in the wheel; so the order of
//! events — ties included — is exactly that of one heap holding everything, whatever the
//! slot width.

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

/// The key of a place: time and sequence number, the event bits zero.
#[inline]
fn place_key(t: Instant, seq: u32) -> u128 {
    (t.as_nanos() as u128) << 64 | (seq as u128) << SEQ_SHIFT
}

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

    /// The earliest key, `u128::MAX` if there is none (the padding).
    #[inline]
    fn top(&self) -> u128 {
        self.v[0]
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

/// log2 of the finest slot's width in ns: the narrowest (64 ns), the widest (≈ 16.8 ms)
/// and the first.
const MIN_SLOT_BITS: u32 = 6;
const MAX_SLOT_BITS: u32 = 24;
const START_SLOT_BITS: u32 = 16;
/// log2 of the number of finest slots (1 024).
const FINE_BITS: u32 = 10;
const FINE_SLOTS: usize = 1 << FINE_BITS;
/// log2 of the slots of each coarse level.
const LEVEL_BITS: u32 = 6;
const SLOTS: usize = 1 << LEVEL_BITS;
/// Coarse levels: enough that every `u64` time has one with the narrowest finest slots
/// (6 + 10 + 6 × 8 = 64).
const COARSE: usize = (64 - MIN_SLOT_BITS - FINE_BITS).div_ceil(LEVEL_BITS) as usize;

/// The slot width is reviewed after this many entries at least.
const REVIEW_MIN: usize = 4096;
/// Entries per finest slot the width keeps to, and aims at when it changes.
const DENSITY_LOW: u64 = 4;
const DENSITY_HIGH: u64 = 32;
const DENSITY_AIM: u64 = 6;

/// A hierarchical timing wheel of keys due at or after `cur`.
///
/// The finest level has 1 024 slots of 2^`bits` ns; coarse level `k` has 64 slots of
/// 2^(`bits` + 10 + 6k) ns. An entry sits at the finest level if its time agrees with
/// `cur` in every bit from `bits + 10` up, else at the coarse level whose slot width
/// covers the highest bit in which the two differ; no coarse level holds an entry in the
/// slot that contains `cur` (such a slot is spread over the finer levels as soon as `cur`
/// enters it). So every entry of a level is earlier than every entry of the next, and
/// within a level the slots are in time order from `cur`'s slot on: the next entries due
/// are in the lowest occupied slot of the lowest occupied level. A finest slot is taken
/// out whole (into the queue's sorted run); a coarse slot is spread over the finer levels
/// first.
#[derive(Debug)]
struct Wheel {
    /// Entries due before `cur` are not here. `cur` only grows.
    cur: u64,
    /// log2 of the finest slot's width in ns.
    bits: u32,
    /// Bit `i` of `fine_occ[w]`: finest slot `64w + i` holds entries.
    fine_occ: [u64; FINE_SLOTS / 64],
    /// Bit `w`: `fine_occ[w]` is not zero.
    fine_sum: u64,
    /// Bit `i` of `occ[k]`: slot `i` of coarse level `k` holds entries.
    occ: [u64; COARSE],
    /// The `FINE_SLOTS` finest slots, then `COARSE × SLOTS` coarse ones, level-major.
    slots: Vec<Vec<u128>>,
    /// Entries held.
    len: usize,
    /// An empty vector kept to swap with a coarse slot being spread (its capacity is
    /// reused).
    spare: Vec<u128>,
}

impl Wheel {
    fn new() -> Self {
        Wheel {
            cur: 0,
            bits: START_SLOT_BITS,
            fine_occ: [0; FINE_SLOTS / 64],
            fine_sum: 0,
            occ: [0; COARSE],
            slots: (0..FINE_SLOTS + COARSE * SLOTS)
                .map(|_| Vec::new())
                .collect(),
            len: 0,
            spare: Vec::new(),
        }
    }

    /// Bits of a time below the coarse levels.
    #[inline]
    fn span(&self) -> u32 {
        self.bits + FINE_BITS
    }

    /// Shift of coarse level `k`'s slot index within a time (64 or more: no such level).
    #[inline]
    fn coarse_shift(&self, k: usize) -> u32 {
        self.span() + LEVEL_BITS * k as u32
    }

    /// Hold `e`, due at or after `cur`.
    #[inline]
    fn insert(&mut self, e: u128) {
        let t = key_time(e);
        debug_assert!(t >= self.cur);
        self.len += 1;
        if (t ^ self.cur) >> self.span() == 0 {
            let i = (t >> self.bits) as usize & (FINE_SLOTS - 1);
            self.slots[i].push(e);
            self.fine_occ[i / 64] |= 1 << (i % 64);
            self.fine_sum |= 1 << (i / 64);
        } else {
            self.insert_coarse(e);
        }
    }

    /// Hold `e`, due at or after `cur` but beyond the finest level.
    #[inline(never)]
    fn insert_coarse(&mut self, e: u128) {
        let t = key_time(e);
        let diff = (t ^ self.cur) >> self.span();
        let k = ((63 - diff.leading_zeros()) / LEVEL_BITS) as usize;
        let i = (t >> self.coarse_shift(k)) as usize & (SLOTS - 1);
        self.slots[FINE_SLOTS + k * SLOTS + i].push(e);
        self.occ[k] |= 1 << i;
    }

    /// The lowest occupied slot of the lowest occupied level (its index in `slots`) and
    /// the time it starts (no earlier than `cur`): no entry held is due before it.
    #[inline]
    fn next_slot(&self) -> Option<(usize, u64)> {
        if self.fine_sum != 0 {
            let w = self.fine_sum.trailing_zeros() as usize;
            let i = w * 64 + self.fine_occ[w].trailing_zeros() as usize;
            let start = self.cur >> self.span() << self.span() | (i as u64) << self.bits;
            return Some((i, start.max(self.cur)));
        }
        let k = self.occ.iter().position(|&o| o != 0)?;
        let i = self.occ[k].trailing_zeros() as usize;
        let shift = self.coarse_shift(k);
        let up = shift + LEVEL_BITS;
        let base = if up >= 64 { 0 } else { self.cur >> up << up };
        let start = base | (i as u64) << shift;
        Some((FINE_SLOTS + k * SLOTS + i, start.max(self.cur)))
    }

    /// Swap finest slot `i`'s entries into `out` (whose old contents are dropped) and
    /// move `cur` past the slot.
    #[inline]
    fn take_fine(&mut self, i: usize, out: &mut Vec<u128>) {
        let w = &mut self.fine_occ[i / 64];
        *w &= !(1 << (i % 64));
        if *w == 0 {
            self.fine_sum &= !(1 << (i / 64));
        }
        std::mem::swap(out, &mut self.slots[i]);
        self.slots[i].clear();
        self.len -= out.len();
        let old = self.cur;
        let start = old >> self.span() << self.span() | (i as u64) << self.bits;
        self.cur = start.saturating_add(1 << self.bits);
        // Only a `cur` that entered another coarse slot can find entries to spread.
        if (old ^ self.cur) >> self.span() != 0 {
            self.settle();
        }
    }

    /// Spread coarse slot `s` (an index in `slots`), which starts at `start`, over the
    /// finer levels; `cur` moves to its start.
    #[inline(never)]
    fn spread(&mut self, s: usize, start: u64) {
        let k = (s - FINE_SLOTS) / SLOTS;
        self.occ[k] &= !(1 << ((s - FINE_SLOTS) % SLOTS));
        self.cur = start;
        self.respread(s);
        self.settle();
    }

    /// Re-insert the entries of slot `s` (its occupancy bit already cleared).
    fn respread(&mut self, s: usize) {
        let mut taken = std::mem::take(&mut self.spare);
        std::mem::swap(&mut taken, &mut self.slots[s]);
        self.len -= taken.len();
        for e in taken.drain(..) {
            self.insert(e);
        }
        self.spare = taken;
    }

    /// After `cur` moved: spread the coarse slots that now contain `cur` over the finer
    /// levels, coarsest first. Afterwards no coarse level holds an entry in `cur`'s own
    /// slot, which is what keeps the levels in time order.
    #[inline(never)]
    fn settle(&mut self) {
        for k in (0..COARSE).rev() {
            let shift = self.coarse_shift(k);
            if shift >= 64 {
                continue;
            }
            let i = (self.cur >> shift) as usize & (SLOTS - 1);
            if self.occ[k] & (1 << i) == 0 {
                continue;
            }
            self.occ[k] &= !(1 << i);
            self.respread(FINE_SLOTS + k * SLOTS + i);
        }
    }

    /// Make the finest slots 2^`bits` ns wide: every entry is placed again.
    #[cold]
    #[inline(never)]
    fn set_bits(&mut self, bits: u32) {
        let mut all = Vec::with_capacity(self.len);
        for s in self.slots.iter_mut() {
            all.append(s);
        }
        self.fine_occ = [0; FINE_SLOTS / 64];
        self.fine_sum = 0;
        self.occ = [0; COARSE];
        self.len = 0;
        self.bits = bits;
        for e in all {
            self.insert(e);
        }
    }
}

/// Pending events in time order, FIFO among equal times.
#[derive(Debug)]
pub struct EventQueue<E> {
    /// The entries of the finest slot taken out last, sorted; those before `pos` have
    /// been popped. All are due before `wheel.cur`.
    run: Vec<u128>,
    pos: usize,
    /// Entries pushed due before `wheel.cur` (after their slot was taken out).
    heap: Heap,
    /// Entries due at or after `wheel.cur`.
    wheel: Wheel,
    /// Entries that left the wheel (taken out with their finest slot, or pushed straight
    /// into the heap) since the slot width was last reviewed.
    near: usize,
    /// Finest slots taken out since the last review.
    taken: usize,
    /// `near` at which the slot width is reviewed next.
    review_at: usize,
    /// The last sequence number given.
    seq: u32,
    /// The largest sequence number given before the pending entries are renumbered
    /// (`u32::MAX`; tests lower it).
    seq_max: u32,
    /// `seq` from which the queue wants its owner to renumber, once a place was held
    /// (`seq_max` less a sixteenth).
    renumber_at: u32,
    /// Whether a place was held ([`PlacedTimer::hold_at`]) since the last renumbering:
    /// then only [`EventQueue::renumber_with`], which is given the held places, may
    /// renumber.
    placed: bool,
    /// The key of the entry popped last (0 before the first) as of the last pop from the
    /// heap or the last slot taken out; with the run's entries popped since
    /// ([`EventQueue::last`]), the key of the entry popped last: held places at or before
    /// it have passed. (A pop from the run stores nothing.)
    last: u128,
    _ev: std::marker::PhantomData<E>,
}

impl<E: QueueEvent> Default for EventQueue<E> {
    fn default() -> Self {
        EventQueue {
            run: Vec::new(),
            pos: 0,
            heap: Heap::default(),
            wheel: Wheel::new(),
            near: 0,
            taken: 0,
            review_at: REVIEW_MIN,
            seq: 0,
            seq_max: u32::MAX,
            renumber_at: u32::MAX - u32::MAX / 16,
            placed: false,
            last: 0,
            _ev: std::marker::PhantomData,
        }
    }
}

impl<E: QueueEvent> EventQueue<E> {
    /// An empty queue.
    pub fn new() -> Self {
        Self::default()
    }

    /// Give sequence numbers up to `m` before renumbering (tests).
    #[cfg(test)]
    fn set_seq_max(&mut self, m: u32) {
        self.seq_max = m;
        self.renumber_at = m - m / 16;
    }

    /// The next sequence number.
    #[inline]
    fn next_seq(&mut self) -> u32 {
        if self.seq == self.seq_max {
            assert!(
                !self.placed,
                "sequence numbers ran out with places held: renumber_with was due"
            );
            self.renumber(&[]);
        }
        self.seq += 1;
        self.seq
    }

    #[inline]
    fn entry(&mut self, t: Instant, ev: E) -> u128 {
        let seq = self.next_seq();
        let e = (t.as_nanos() as u128) << 64 | (seq as u128) << SEQ_SHIFT | ev.pack() as u128;
        debug_assert!(e != u128::MAX, "the key that marks an empty run or heap");
        e
    }

    /// Whether places were held and the sequence numbers are running out (2^28 numbers
    /// left, or a sixteenth of a test's): [`EventQueue::renumber_with`] is due, and
    /// until it is called [`EventQueue::pop_until`] hands out no entry of another finest
    /// slot. (Without held places the queue renumbers by itself.)
    #[inline]
    pub fn renumber_due(&self) -> bool {
        self.placed && self.seq >= self.renumber_at
    }

    /// The key of the entry popped last (0 before the first).
    #[inline]
    fn last(&self) -> u128 {
        match self.pos.checked_sub(1) {
            Some(i) => self.last.max(self.run[i]),
            None => self.last,
        }
    }

    /// Renumber the pending entries and the places `timers` hold (every
    /// [`PlacedTimer`] used with this queue that may hold one), keeping their order.
    #[cold]
    #[inline(never)]
    pub fn renumber_with<'a>(&mut self, timers: impl Iterator<Item = &'a mut PlacedTimer>) {
        let mut held: Vec<&'a mut PlacedTimer> = Vec::new();
        for pt in timers {
            if pt.seq != 0 {
                if self.passed(pt.at.unwrap_or_default(), pt.seq) {
                    *pt = PlacedTimer::default();
                } else {
                    held.push(pt);
                }
            }
        }
        let keys: Vec<u128> = held
            .iter()
            .map(|pt| place_key(pt.at.unwrap_or_default(), pt.seq))
            .collect();
        let new = self.renumber(&keys);
        for (pt, k) in held.into_iter().zip(new) {
            pt.seq = (k >> SEQ_SHIFT) as u32;
        }
        self.placed = false;
    }

    /// The sequence numbers ran out: number the pending entries, the entry popped last
    /// and the held places `extra` (keys with the event bits zero) 1, 2, ... in their
    /// order (a strictly increasing map of the keys, so the heap stays a heap, the run
    /// stays sorted and every entry stays in its slot of the wheel) and continue after
    /// them. Returns the keys `extra` map to.
    #[cold]
    #[inline(never)]
    fn renumber(&mut self, extra: &[u128]) -> Vec<u128> {
        // The run from the entry popped from it last, which [`EventQueue::last`] reads.
        let from = self.pos.saturating_sub(1);
        let mut all: Vec<u128> = self.heap.entries().to_vec();
        all.extend_from_slice(&self.run[from..]);
        for s in &self.wheel.slots {
            all.extend_from_slice(s);
        }
        all.extend_from_slice(extra);
        if self.last != 0 {
            all.push(self.last);
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
        for k in self.run[from..].iter_mut() {
            *k = renumbered(*k);
        }
        for s in self.wheel.slots.iter_mut() {
            for k in s.iter_mut() {
                *k = renumbered(*k);
            }
        }
        if self.last != 0 {
            self.last = renumbered(self.last);
        }
        let out = extra.iter().map(|&k| renumbered(k)).collect();
        self.seq = u32::try_from(all.len()).expect("fewer than 2^32 pending events");
        assert!(
            self.seq < self.seq_max,
            "more pending events than sequence numbers"
        );
        out
    }

    /// Take the next sequence number for a place held without an entry.
    #[inline]
    fn hold(&mut self) -> u32 {
        let seq = self.next_seq();
        self.placed = true;
        seq
    }

    /// Whether the place at `t` with sequence number `seq` has passed: an entry there
    /// would have been popped already.
    #[inline]
    fn passed(&self, t: Instant, seq: u32) -> bool {
        place_key(t, seq) < self.last()
    }

    /// Schedule `ev` at `t` in the place held with sequence number `seq` (not passed).
    #[inline]
    fn push_placed(&mut self, t: Instant, seq: u32, ev: E) {
        let e = place_key(t, seq) | ev.pack() as u128;
        debug_assert!(e > self.last());
        self.insert(e);
    }

    /// Schedule `ev` at `t`: into the wheel unless its finest slot was already taken out.
    #[inline(always)]
    pub fn push(&mut self, t: Instant, ev: E) {
        let e = self.entry(t, ev);
        self.insert(e);
    }

    #[inline(always)]
    fn insert(&mut self, e: u128) {
        if key_time(e) < self.wheel.cur {
            self.near += 1;
            self.heap.push(e);
        } else {
            self.wheel.insert(e);
        }
    }

    /// Take the wheel's next slot out if it starts by `limit`: a finest slot into the
    /// sorted run (the run and the heap are empty then), a coarse one spread over the
    /// finer levels. Whether there was one; none while the owner is due to renumber
    /// ([`EventQueue::renumber_due`]).
    #[inline]
    fn advance(&mut self, limit: u64) -> bool {
        let Some((s, start)) = self.wheel.next_slot() else {
            return false;
        };
        if start > limit || self.renumber_due() {
            return false;
        }
        if s < FINE_SLOTS {
            debug_assert!(self.heap.len() == 0 && self.pos == self.run.len());
            // The run's last entry was popped last unless the heap's was.
            if let Some(&k) = self.run.last() {
                self.last = self.last.max(k);
            }
            self.wheel.take_fine(s, &mut self.run);
            if self.run.len() > 1 {
                self.run.sort_unstable();
            }
            self.pos = 0;
            self.near += self.run.len();
            self.taken += 1;
            if self.near >= self.review_at {
                self.review();
            }
        } else {
            self.wheel.spread(s, start);
        }
        true
    }

    /// Keep the finest slots about `DENSITY_LOW ..= DENSITY_HIGH` entries wide: the
    /// entries that left the wheel since the last review per finest slot taken out (empty
    /// slots cost next to nothing and are not counted). Out of that range, the width
    /// changes by the power of two nearest to the factor that would make it
    /// `DENSITY_AIM`. Reviews come at least as many entries apart as the wheel holds, so
    /// placing them all again costs at most one insertion per entry popped.
    #[cold]
    #[inline(never)]
    fn review(&mut self) {
        let (near, taken) = (self.near as u64, self.taken.max(1) as u64);
        let bits = self.wheel.bits;
        if !(taken * DENSITY_LOW..=taken * DENSITY_HIGH).contains(&near) {
            // log2(AIM · taken / near), rounded (ties up): compare squares against powers
            // of two to stay in integers.
            let (num, den) = (DENSITY_AIM * taken, near.max(1));
            let want = if num >= den {
                let mut k = 0;
                while (num * num) >> (2 * k + 1) >= den * den {
                    k += 1;
                }
                (bits + k).min(MAX_SLOT_BITS)
            } else {
                let mut k = 0;
                while (den * den) >> (2 * k + 1) > num * num {
                    k += 1;
                }
                bits.saturating_sub(k).max(MIN_SLOT_BITS)
            };
            if want != bits {
                self.wheel.set_bits(want);
            }
        }
        self.near = 0;
        self.taken = 0;
        self.review_at = self.wheel.len.max(REVIEW_MIN);
    }

    /// Remove and return the earliest event if it is due at or before `limit`. `None`
    /// also while the owner is due to renumber ([`EventQueue::renumber_due`]) and the
    /// finest slot taken out is done.
    #[inline]
    pub fn pop_until(&mut self, limit: Instant) -> Option<(Instant, E)> {
        let limit = limit.as_nanos();
        loop {
            // Everything in the run and the heap is due before anything in the wheel.
            let r = self.run.get(self.pos).copied().unwrap_or(u128::MAX);
            let h = self.heap.top();
            let m = r.min(h);
            if m != u128::MAX {
                let at = key_time(m);
                if at > limit {
                    return None;
                }
                if r < h {
                    self.pos += 1;
                } else {
                    self.heap.pop();
                    self.last = m;
                }
                return Some((Instant(at), E::unpack(m as u32)));
            }
            if !self.advance(limit) {
                return None;
            }
        }
    }

    /// Number of pending entries (stale ones included).
    pub fn len(&self) -> usize {
        self.heap.len() + (self.run.len() - self.pos) + self.wheel.len
    }

    /// Entries out of the wheel: in the run and the heap.
    pub fn near_len(&self) -> usize {
        self.heap.len() + (self.run.len() - self.pos)
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
    #[inline]
    pub fn arm_by<E: QueueEvent>(&mut self, q: &mut EventQueue<E>, t: Instant, ev: E) {
        if self.0.is_none_or(|s| t < s) {
            self.0 = Some(t);
            q.push(t, ev);
        }
    }

    /// Whether the live entry fires at `t` or earlier ([`Timer::arm_by`] would push
    /// nothing).
    #[inline]
    pub fn armed_by(&self, t: Instant) -> bool {
        self.0.is_some_and(|s| s <= t)
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

/// A timer with one live entry, like [`Timer`], that can also hold its entry's place
/// without the entry ([`PlacedTimer::hold_at`]): for an owner whose entry would, as
/// things stand, find nothing to do when it fires, but must run in its place among the
/// events of its instant if something comes up before then ([`PlacedTimer::arm_at`]).
/// Whatever is held or armed, the events run in the order they would have had, had every
/// `hold_at` been an `arm_at`, less the held entries never armed — provided the timer is
/// never moved back to an instant it left (as a transmitter's wake-up, which only moves
/// later): there a [`Timer`] would take a stale entry for its live one.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PlacedTimer {
    /// The time of the live entry or of the place held.
    at: Option<Instant>,
    /// The sequence number of the place held (its entry not in the queue), or 0: the
    /// entry is in the queue.
    seq: u32,
}

impl PlacedTimer {
    /// The time of the live entry or held place, unless the place has passed (then, had
    /// the entry been pushed, it would have fired).
    #[inline]
    fn live<E: QueueEvent>(&self, q: &EventQueue<E>) -> Option<Instant> {
        match self.at {
            Some(t) if self.seq != 0 && q.passed(t, self.seq) => None,
            at => at,
        }
    }

    /// Make sure the live entry fires exactly at `t`, as [`Timer::arm_at`]: a place held
    /// at `t` gets its entry, pushed with the place's sequence number.
    #[inline(always)]
    pub fn arm_at<E: QueueEvent>(&mut self, q: &mut EventQueue<E>, t: Instant, ev: E) {
        if self.pushed_at(t) {
            return;
        }
        if self.live(q) == Some(t) {
            if self.seq != 0 {
                q.push_placed(t, self.seq, ev);
                self.seq = 0;
            }
        } else {
            self.at = Some(t);
            self.seq = 0;
            q.push(t, ev);
        }
    }

    /// Whether the live entry is in the queue at `t` (then [`PlacedTimer::arm_at`] and
    /// [`PlacedTimer::hold_at`] at `t` do nothing).
    #[inline]
    pub fn pushed_at(&self, t: Instant) -> bool {
        self.at == Some(t) && self.seq == 0
    }

    /// Take the place [`PlacedTimer::arm_at`] would take at `t`, without an entry (an
    /// entry at another time becomes stale, a place at another time is given up);
    /// nothing if the live entry or place is at `t` already.
    #[inline]
    pub fn hold_at<E: QueueEvent>(&mut self, q: &mut EventQueue<E>, t: Instant) {
        if self.live(q) != Some(t) {
            self.at = Some(t);
            self.seq = q.hold();
        }
    }

    /// Whether the live entry, or a place that has not passed, is due at `t` or earlier.
    #[inline]
    pub fn armed_by<E: QueueEvent>(&self, q: &EventQueue<E>, t: Instant) -> bool {
        self.live(q).is_some_and(|s| s <= t)
    }

    /// An entry of this timer popped at `now`: whether it is the live one (then the timer
    /// is disarmed) rather than a stale one to ignore.
    #[inline]
    pub fn fire(&mut self, now: Instant) -> bool {
        let live = self.at == Some(now) && self.seq == 0;
        if live {
            self.at = None;
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
            q.set_seq_max(seq_max);
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
                        q.push(Instant(t), n);
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
    fn far_timers_wait_in_the_wheel() {
        let mut q = EventQueue::new();
        for i in 0..1000u32 {
            q.push(Instant(1_000_000_000 + i as u64 * 1_000_000), i);
        }
        q.push(Instant(10), 5000);
        assert_eq!(q.len(), 1001);
        assert_eq!(q.near_len(), 0);
        assert_eq!(
            q.pop_until(Instant(2_000_000_000)),
            Some((Instant(10), 5000))
        );
        // Only the first timer's finest slot was taken out of the wheel.
        assert_eq!(
            q.pop_until(Instant(2_000_000_000)),
            Some((Instant(1_000_000_000), 0))
        );
        assert_eq!(q.near_len(), 0);
        assert_eq!(q.len(), 999);
    }

    /// Events as the engine schedules them — one popped, a few pushed at or after its
    /// time: the same instant, within the finest slot, a link delay or a timeout ahead,
    /// on slot boundaries, at the far end of time — come out exactly as from a
    /// `BinaryHeap` of `(time, push order)`.
    #[test]
    fn matches_a_binary_heap() {
        use asymlink_core::rand::Rng;
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        for seed in 0..30 {
            let mut rng = Rng::new(1000 + seed);
            let mut q = EventQueue::new();
            if seed % 3 == 1 {
                q.set_seq_max(5000);
            }
            let mut reference = BinaryHeap::new();
            let mut n = 0u32;
            let mut now = 0u64;
            let mut popped = 0;
            let mut push = |q: &mut EventQueue<u32>, r: &mut BinaryHeap<_>, t: u64| {
                n += 1;
                q.push(Instant(t), n);
                r.push(Reverse((t, n)));
            };
            for _ in 0..200 {
                push(&mut q, &mut reference, rng.below(1 << 24));
            }
            for step in 0..60_000u32 {
                let limit = if step % 1000 == 999 {
                    // Now and then a limit before the next event.
                    now.saturating_add(rng.below(1 << 12))
                } else {
                    u64::MAX
                };
                let got = q.pop_until(Instant(limit));
                let want = match reference.peek() {
                    Some(&Reverse((t, _))) if t <= limit => reference.pop().map(|Reverse(x)| x),
                    _ => None,
                };
                assert_eq!(got.map(|(t, e)| (t.0, e)), want, "seed {seed} step {step}");
                let Some((t, _)) = want else {
                    now = limit;
                    continue;
                };
                assert!(t >= now);
                now = t;
                popped += 1;
                let (fine, coarse) = (q.wheel.bits, q.wheel.span());
                for _ in 0..rng.below(3) + u64::from(reference.len() < 50) {
                    let d = match rng.below(if step % 97 == 0 { 16 } else { 15 }) {
                        0..=2 => 0,
                        3..=6 => rng.below(1 << 12),
                        7..=9 => 1_000_000 + rng.below(1 << 14),
                        10 => 8_000_000 + rng.below(1 << 16),
                        11 => rng.below(1 << 30),
                        // The start of a later finest slot, of a later coarse slot.
                        12 => (((now >> fine) + 1 + rng.below(4)) << fine).wrapping_sub(now),
                        13 => (((now >> coarse) + 1 + rng.below(2)) << coarse).wrapping_sub(now),
                        14 => rng.below(1 << 44),
                        _ => u64::MAX - rng.below(1 << 13),
                    };
                    push(&mut q, &mut reference, now.saturating_add(d));
                }
            }
            assert!(popped > 50_000);
            assert_eq!(q.len(), reference.len());
        }
    }

    /// Dense events (a few ns apart) narrow the finest slots, sparse ones (milliseconds
    /// apart) widen them, and the order stays that of one sorted list.
    #[test]
    fn slot_width_follows_the_density() {
        use asymlink_core::rand::Rng;
        let mut rng = Rng::new(7);
        let mut q = EventQueue::new();
        let mut reference = Vec::new();
        let mut got = Vec::new();
        let mut n = 0u32;
        let mut now = 0u64;
        let mut widths = Vec::new();
        for phase in 0..6 {
            // Each popped event is followed by one within 200 gaps: an event every 32 ns
            // or every 65 μs or so, in turns.
            let gap = if phase % 2 == 0 { 1 << 6 } else { 1 << 18 };
            for _ in 0..200 {
                n += 1;
                let t = now + rng.below(gap * 200);
                q.push(Instant(t), n);
                reference.push((t, n));
            }
            for _ in 0..200_000 {
                let (t, e) = q.pop_until(Instant(u64::MAX)).unwrap();
                got.push((t.0, e));
                now = t.0;
                n += 1;
                let t = now + rng.below(gap * 200);
                q.push(Instant(t), n);
                reference.push((t, n));
            }
            widths.push(q.wheel.bits);
        }
        while let Some((t, e)) = q.pop_until(Instant(u64::MAX)) {
            got.push((t.0, e));
        }
        reference.sort_unstable();
        assert_eq!(got, reference);
        // About 6 events per slot: some 200 ns, or some 400 μs (less as the pending
        // events pile up from phase to phase).
        for (phase, &bits) in widths.iter().enumerate() {
            let want = if phase % 2 == 0 { 7..=10 } else { 16..=21 };
            assert!(want.contains(&bits), "phase {phase}: {widths:?}");
        }
    }

    /// Owners that hold places ([`PlacedTimer::hold_at`]) and arm some of them later run
    /// their events exactly where owners that pushed an entry for every hold
    /// ([`Timer::arm_at`]) run theirs, less the entries of the holds never armed — with
    /// places at the current instant, places that passed, and renumbering (sequence
    /// numbers running out every few thousand) in between.
    #[test]
    fn held_places_keep_the_order_of_pushed_entries() {
        use asymlink_core::rand::Rng;
        const OWNERS: usize = 12;
        for seed in 0..24u64 {
            let mut rng = Rng::new(500 + seed);
            // The reference pushes an entry for every hold; `needed` says whether its
            // live entry was armed (else it fires as a no-op, which the other skips).
            let mut old: EventQueue<u32> = EventQueue::new();
            let mut old_t = [Timer::default(); OWNERS];
            let mut needed = [false; OWNERS];
            let mut new: EventQueue<u32> = EventQueue::new();
            let mut new_t = [PlacedTimer::default(); OWNERS];
            if seed % 2 == 1 {
                old.set_seq_max(3000 + 100 * seed as u32);
                new.set_seq_max(3000 + 100 * seed as u32);
            }
            let mut n = 0u32;
            let mut fired = 0;
            let mut renumbered = 0;
            for _ in 0..40 {
                n += 1;
                let t = rng.below(1 << 20);
                old.push(Instant(t), 1000 + n);
                new.push(Instant(t), 1000 + n);
            }
            for step in 0..40_000u32 {
                // The next event that does something, from both.
                let want = loop {
                    let Some((t, e)) = old.pop_until(Instant(u64::MAX)) else {
                        break None;
                    };
                    if e < 1000 {
                        let o = e as usize;
                        if !old_t[o].fire(t) || !needed[o] {
                            continue; // stale, or a hold never armed
                        }
                    }
                    break Some((t, e));
                };
                // As the engine pops: renumbering when the queue stops for it.
                let got = loop {
                    let Some((t, e)) = new.pop_until(Instant(u64::MAX)) else {
                        if new.renumber_due() {
                            new.renumber_with(new_t.iter_mut());
                            renumbered += 1;
                            continue;
                        }
                        break None;
                    };
                    if e < 1000 && !new_t[e as usize].fire(t) {
                        continue; // stale
                    }
                    break Some((t, e));
                };
                assert_eq!(got, want, "seed {seed} step {step}");
                let Some((t, _)) = got else { break };
                let now = t.0;
                fired += 1;
                for (o, (ot, nt)) in old_t.iter().zip(&new_t).enumerate() {
                    for d in [0, 1, 1 << 12] {
                        let at = Instant(now + d);
                        assert_eq!(ot.armed_by(at), nt.armed_by(&new, at), "seed {seed} step {step} owner {o} {ot:?} {nt:?} d {d} now {now} last {:x}", new.last());
                    }
                }
                for _ in 0..rng.below(4) {
                    let o = rng.below(OWNERS as u64) as usize;
                    // Often the owner's own time (a hold there, then an arm), often now;
                    // never earlier than the owner's time (as a transmitter's).
                    let t = match rng.below(6) {
                        0 => Instant(now),
                        1 | 2 => new_t[o].at.unwrap_or(Instant(now)),
                        3 => Instant(now + rng.below(1 << 10)),
                        _ => Instant(now + rng.below(1 << 18)),
                    };
                    let t = t.max(new_t[o].at.unwrap_or(t)).max(Instant(now));
                    match rng.below(5) {
                        0 | 1 => {
                            if old_t[o] != Timer(Some(t)) {
                                needed[o] = false;
                            }
                            old_t[o].arm_at(&mut old, t, o as u32);
                            new_t[o].hold_at(&mut new, t);
                        }
                        2 | 3 => {
                            old_t[o].arm_at(&mut old, t, o as u32);
                            needed[o] = true;
                            new_t[o].arm_at(&mut new, t, o as u32);
                        }
                        _ => {
                            n += 1;
                            let t = Instant(now + rng.below(1 << 20));
                            old.push(t, 1000 + n);
                            new.push(t, 1000 + n);
                        }
                    }
                }
                if old.len() < 20 {
                    n += 1;
                    let t = Instant(now + rng.below(1 << 20));
                    old.push(t, 1000 + n);
                    new.push(t, 1000 + n);
                }
            }
            assert!(fired > 30_000, "seed {seed}: {fired}");
            assert!(seed % 2 == 0 || renumbered > 3, "seed {seed}: {renumbered}");
        }
    }

    /// Places held across a renumbering keep their place among the entries of their
    /// instant, before the entries pushed after it.
    #[test]
    fn renumbering_moves_held_places_with_the_entries() {
        let mut q: EventQueue<u32> = EventQueue::new();
        q.set_seq_max(64);
        let mut timers = [PlacedTimer::default(); 2];
        q.push(Instant(100), 1);
        timers[0].hold_at(&mut q, Instant(100));
        q.push(Instant(100), 2);
        timers[1].hold_at(&mut q, Instant(100));
        q.push(Instant(100), 3);
        let mut renumbered = false;
        for i in 0..100 {
            q.push(Instant(50), 1000 + i);
            assert_eq!(q.pop_until(Instant(60)), Some((Instant(50), 1000 + i)));
            if q.renumber_due() {
                let before = q.seq;
                q.renumber_with(timers.iter_mut());
                assert!(q.seq < before);
                renumbered = true;
            }
        }
        assert!(renumbered);
        q.push(Instant(100), 4);
        timers[1].arm_at(&mut q, Instant(100), 11);
        timers[0].arm_at(&mut q, Instant(100), 10);
        let mut got = Vec::new();
        while let Some((t, e)) = q.pop_until(Instant(200)) {
            assert_eq!(t, Instant(100));
            got.push(e);
        }
        assert_eq!(got, [1, 10, 2, 11, 3, 4]);
    }

    /// With places held and the sequence numbers running out, the queue hands out the
    /// rest of the finest slot taken out, then nothing (though entries are due) until its
    /// owner renumbers; then it goes on in order, the place where it was held.
    #[test]
    fn stops_at_the_end_of_a_slot_until_renumbered() {
        let max = Instant(u64::MAX);
        let mut q: EventQueue<u32> = EventQueue::new();
        q.set_seq_max(64); // due from sequence number 60 on
        let mut timers = [PlacedTimer::default()];
        timers[0].hold_at(&mut q, Instant(5 << 20));
        q.push(Instant(0), 0);
        assert_eq!(q.pop_until(max), Some((Instant(0), 0)));
        for i in 1..=5u32 {
            q.push(Instant(u64::from(i) << 20), i);
        }
        // Entries within the finest slot taken out (into the heap), popped at once.
        for k in 0..52u32 {
            q.push(Instant(10 + u64::from(k)), 1000 + k);
            assert_eq!(
                q.pop_until(max),
                Some((Instant(10 + u64::from(k)), 1000 + k))
            );
        }
        assert!(!q.renumber_due());
        q.push(Instant(100), 100); // the numbers run out
        assert!(q.renumber_due());
        assert_eq!(q.pop_until(max), Some((Instant(100), 100)));
        assert_eq!(q.pop_until(max), None);
        assert_eq!(q.len(), 5);
        let before = q.seq;
        q.renumber_with(timers.iter_mut());
        assert!(!q.renumber_due());
        assert!(q.seq < before, "{} {before}", q.seq);
        timers[0].arm_at(&mut q, Instant(5 << 20), 200);
        let got: Vec<u32> = std::iter::from_fn(|| q.pop_until(max).map(|(_, e)| e)).collect();
        assert_eq!(got, [1, 2, 3, 4, 200, 5]);
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
