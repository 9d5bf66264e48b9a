//! A fixed-size log-linear histogram of durations (sojourn times) for percentiles.
//!
//! Values below 2^20 ns (1.05 ms) fall in 64 linear bins of 16.4 µs; above, each power of
//! two is split into 64 bins, so a reported percentile is within 1/64 (1.6 %) of the
//! true value. 1 408 counters cover up to 2^41 ns (36 min); longer values share the last
//! bin. Memory is fixed whatever the number of packets, and the counters are allocated
//! only up to the largest bin used, rounded up to a cache line (a link direction whose
//! packets never wait more than 16 µs keeps one line, which matters with tens of
//! thousands of link directions). Counters are 32-bit; a bin that counts past 2^32 − 1
//! carries into a second, 32-bit-high array allocated then.
//!
//! [`Batched`] records values of a few kinds (the simulator's TCP, UDP and other packets
//! of one link direction) through a buffer of 16 bin numbers held inline, and adds them
//! to the counters 16 at a time: where thousands of link directions take turns, the
//! counters are rarely in the cache when a packet is recorded, and the values of
//! successive packets usually fall in the same few cache lines of counters. Values of the
//! first bin (a packet that hardly waited, on most links most of them) are only counted,
//! per kind, and added to the counters with the next batch.

const SUB: u32 = 64;
const LINEAR_BITS: u32 = 20;
const OCTAVES: u32 = 21;
const BINS: usize = (SUB * (OCTAVES + 1)) as usize;
/// Counters per cache line: the counters grow by whole lines.
const LINE: usize = 16;

/// Counts of durations in nanoseconds.
#[derive(Clone, Debug, Default)]
pub struct Histogram {
    /// Low 32 bits of the counters of bins `0..counts.len()`; bins beyond are zero.
    counts: Vec<u32>,
    /// High 32 bits of the counters, allocated (as long as `counts`) only when a counter
    /// first passes 2^32 − 1.
    high: Vec<u32>,
    total: u64,
}

fn bin_of(v: u64) -> usize {
    if v < 1 << LINEAR_BITS {
        return (v >> (LINEAR_BITS - 6)) as usize;
    }
    let octave = 63 - v.leading_zeros(); // >= LINEAR_BITS
    let sub = (v >> (octave - 6)) & (SUB as u64 - 1);
    let i = (SUB * (octave - LINEAR_BITS + 1)) as usize + sub as usize;
    i.min(BINS - 1)
}

/// The middle of bin `i`, ns.
fn value_of(i: usize) -> u64 {
    let i = i as u32;
    if i < SUB {
        let w = 1u64 << (LINEAR_BITS - 6);
        return i as u64 * w + w / 2;
    }
    let octave = i / SUB - 1 + LINEAR_BITS;
    let sub = (i % SUB) as u64;
    let w = 1u64 << (octave - 6);
    (1u64 << octave) + sub * w + w / 2
}

impl Histogram {
    /// Count one value.
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.add_bin(bin_of(ns));
    }

    /// Count one value of bin `b`.
    #[inline]
    fn add_bin(&mut self, b: usize) {
        if b >= self.counts.len() {
            self.grow(b + 1);
        }
        let (c, carry) = self.counts[b].overflowing_add(1);
        self.counts[b] = c;
        if carry {
            self.carry(b);
        }
        self.total += 1;
    }

    /// Make room for bins `0..n` (rounded up to a whole cache line of counters).
    #[cold]
    fn grow(&mut self, n: usize) {
        let n = n.div_ceil(LINE) * LINE;
        self.counts.resize(n, 0);
        if !self.high.is_empty() {
            self.high.resize(n, 0);
        }
    }

    /// Bin `b`'s low counter wrapped: add 2^32 to it.
    #[cold]
    fn carry(&mut self, b: usize) {
        if self.high.is_empty() {
            self.high = vec![0; self.counts.len()];
        }
        self.high[b] += 1;
    }

    /// The count of bin `i`.
    #[inline]
    fn count(&self, i: usize) -> u64 {
        let lo = self.counts.get(i).copied().unwrap_or(0) as u64;
        let hi = self.high.get(i).copied().unwrap_or(0) as u64;
        hi << 32 | lo
    }

    /// Bins that may be non-zero.
    fn bins(&self) -> usize {
        self.counts.len()
    }

    /// Add `n` to bin `i`.
    fn add_count(&mut self, i: usize, n: u64) {
        if n == 0 {
            return;
        }
        if i >= self.counts.len() {
            self.grow(i + 1);
        }
        let v = self.count(i) + n;
        self.counts[i] = v as u32;
        if v >> 32 != 0 || !self.high.is_empty() {
            if self.high.is_empty() {
                self.high = vec![0; self.counts.len()];
            }
            self.high[i] = (v >> 32) as u32;
        }
        self.total += n;
    }

    /// Add `other`'s counts to these (histograms of parts of the same traffic).
    pub fn merge(&mut self, other: &Histogram) {
        for i in 0..other.bins() {
            self.add_count(i, other.count(i));
        }
    }

    /// Values counted.
    pub fn len(&self) -> u64 {
        self.total
    }

    /// Whether nothing was counted.
    pub fn is_empty(&self) -> bool {
        self.total == 0
    }

    /// The `q` quantile (0..=1), ns (the middle of its bin); 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        quantile_of(&[self], 0, &[], q)
    }
}

/// The `q` quantile of the values counted in `hists` together with `first` more values
/// in the first bin and the bins `extra` (sorted), ns; 0 when there are none.
fn quantile_of(hists: &[&Histogram], first: u64, extra: &[u16], q: f64) -> u64 {
    let total = hists.iter().map(|h| h.total).sum::<u64>() + first + extra.len() as u64;
    if total == 0 {
        return 0;
    }
    let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
    let bins = hists
        .iter()
        .map(|h| h.bins())
        .chain(extra.last().map(|&b| b as usize + 1))
        .chain((first > 0).then_some(1))
        .max()
        .unwrap_or(0);
    let mut seen = first;
    let mut e = 0;
    for i in 0..bins {
        seen += hists.iter().map(|h| h.count(i)).sum::<u64>();
        while e < extra.len() && extra[e] as usize == i {
            seen += 1;
            e += 1;
        }
        if seen >= rank {
            return value_of(i);
        }
    }
    value_of(BINS - 1)
}

/// Values below this (ns) fall in the first bin.
const FIRST_BIN_END: u64 = 1 << (LINEAR_BITS - 6);
/// Values pending in a [`Batched`] before they are counted.
const PENDING: usize = 16;
/// Bits of a pending entry that hold the bin (`BINS` ≤ 2^11); the kind is above them.
const BIN_BITS: u32 = 11;

/// Histograms of `K` kinds of durations (at most 32), recorded through a buffer of
/// 16 bin numbers held inline and counted 16 at a time (see the module documentation).
/// Reading them gives the same counts and percentiles as recording every value at once.
///
/// What a value touches comes first (`repr(C)`: the first-bin counts, the buffer; 46
/// bytes for three kinds); the histograms themselves are behind a pointer read only by a
/// batch, allocated with the first one.
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Batched<const K: usize> {
    /// Values of each kind in the first bin (below 16.4 µs: on a link, a packet that
    /// hardly waited, the most common value) not counted yet: a count each, not a
    /// pending entry (counted with a batch at the latest when one reaches 2^32 − 1).
    first: [u32; K],
    n: u8,
    /// Bin | kind << `BIN_BITS` of the values not counted yet.
    pending: [u16; PENDING],
    hists: Option<Box<[Histogram; K]>>,
}

impl<const K: usize> Default for Batched<K> {
    fn default() -> Self {
        Batched {
            first: [0; K],
            n: 0,
            pending: [0; PENDING],
            hists: None,
        }
    }
}

/// A histogram with nothing counted.
static EMPTY: Histogram = Histogram {
    counts: Vec::new(),
    high: Vec::new(),
    total: 0,
};

impl<const K: usize> Batched<K> {
    /// Count one value of kind `kind` (`< K`).
    #[inline]
    pub fn record(&mut self, kind: usize, ns: u64) {
        debug_assert!(kind < K && K <= 32);
        if ns < FIRST_BIN_END {
            if self.first[kind] == u32::MAX {
                self.flush();
            }
            self.first[kind] += 1;
            return;
        }
        self.pending[self.n as usize] = (bin_of(ns) as u16) | ((kind as u16) << BIN_BITS);
        self.n += 1;
        if self.n as usize == PENDING {
            self.flush();
        }
    }

    /// Count the pending values.
    pub fn flush(&mut self) {
        let hists = self
            .hists
            .get_or_insert_with(|| Box::new(std::array::from_fn(|_| Histogram::default())));
        for &e in &self.pending[..self.n as usize] {
            let (bin, kind) = (
                (e & ((1 << BIN_BITS) - 1)) as usize,
                (e >> BIN_BITS) as usize,
            );
            hists[kind].add_bin(bin);
        }
        self.n = 0;
        for (h, f) in hists.iter_mut().zip(&mut self.first) {
            h.add_count(0, u64::from(std::mem::take(f)));
        }
    }

    /// The counted values of `kind`.
    fn hist(&self, kind: usize) -> &Histogram {
        self.hists.as_ref().map_or(&EMPTY, |h| &h[kind])
    }

    /// The sorted bins of the pending values of `kind` (all kinds: `None`).
    fn pending_bins(&self, kind: Option<usize>) -> ([u16; PENDING], usize) {
        let mut out = [0u16; PENDING];
        let mut m = 0;
        for &e in &self.pending[..self.n as usize] {
            if kind.is_none_or(|k| (e >> BIN_BITS) as usize == k) {
                out[m] = e & ((1 << BIN_BITS) - 1);
                m += 1;
            }
        }
        out[..m].sort_unstable();
        (out, m)
    }

    /// Values of `kind` counted.
    pub fn len(&self, kind: usize) -> u64 {
        self.hist(kind).len() + self.pending_bins(Some(kind)).1 as u64 + u64::from(self.first[kind])
    }

    /// The `q` quantile (0..=1) of the values of `kind`, ns (the middle of its bin); 0
    /// when there are none.
    pub fn quantile(&self, kind: usize, q: f64) -> u64 {
        let (bins, m) = self.pending_bins(Some(kind));
        quantile_of(
            &[self.hist(kind)],
            u64::from(self.first[kind]),
            &bins[..m],
            q,
        )
    }

    /// The `q` quantile of the values of every kind together.
    pub fn quantile_all(&self, q: f64) -> u64 {
        let (bins, m) = self.pending_bins(None);
        let hists: [&Histogram; K] = std::array::from_fn(|k| self.hist(k));
        let first = self.first.iter().map(|&f| u64::from(f)).sum();
        quantile_of(&hists, first, &bins[..m], q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantiles_within_the_bin_width() {
        let mut h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        // 1..=1000 ms, uniformly.
        for ms in 1..=1000u64 {
            h.record(ms * 1_000_000);
        }
        for (q, want) in [(0.5, 500e6), (0.9, 900e6), (0.99, 990e6), (0.001, 1e6)] {
            let got = h.quantile(q) as f64;
            assert!((got - want).abs() / want < 0.016, "q{q}: {got} vs {want}");
        }
        let mut h = Histogram::default();
        for v in [0, 5_000, 16_383, 16_384, 1 << 19] {
            h.record(v);
        }
        assert_eq!(h.quantile(0.2), 8_192);
        assert_eq!(h.quantile(0.6), 8_192);
        assert_eq!(h.quantile(0.8), 16_384 + 8_192);
        assert_eq!(h.len(), 5);
        // Beyond the range: the last bin.
        h.record(u64::MAX);
        assert!(h.quantile(1.0) > 1 << 40);
    }

    #[test]
    fn counters_grow_only_to_the_line_of_the_largest_bin_used() {
        let mut h = Histogram::default();
        assert_eq!(h.counts.capacity(), 0);
        for v in [0, 10, 16_000] {
            h.record(v);
        }
        assert_eq!(h.counts.len(), LINE);
        let mut g = Histogram::default();
        g.record(2_000_000); // 2 ms: a bin above the linear range
        assert_eq!(
            g.counts.len(),
            (bin_of(2_000_000) + 1).div_ceil(LINE) * LINE
        );
        g.merge(&h);
        h.merge(&g);
        assert_eq!(h.len(), 7);
        assert_eq!(h.counts.len(), g.counts.len());
        assert_eq!(h.quantile(0.5), 8_192);
        assert_eq!(h.quantile(1.0), g.quantile(1.0));
        assert!((g.quantile(1.0) as f64 - 2e6).abs() / 2e6 < 0.016);
        assert!(h.high.is_empty());
    }

    #[test]
    fn counters_carry_past_32_bits() {
        let mut h = Histogram::default();
        h.record(5_000);
        h.counts[0] = u32::MAX;
        h.record(5_000);
        assert_eq!(h.count(0), 1 << 32);
        assert_eq!(h.high.len(), h.counts.len());
        h.record(3_000_000); // grows both arrays
        assert_eq!(h.high.len(), h.counts.len());
        let mut g = Histogram::default();
        g.record(3_000_000);
        g.merge(&h);
        g.merge(&h);
        assert_eq!(g.count(0), 2 << 32);
        assert_eq!(g.count(bin_of(3_000_000)), 3);
        // A total counts what was recorded (not the forced counter); a merge adds the
        // other's counts.
        assert_eq!(h.len(), 3);
        assert_eq!(g.len(), 1 + 2 * ((1 << 32) + 1));
    }

    #[test]
    fn batched_reads_as_if_every_value_were_counted_at_once() {
        let mut rng = crate::rand::Rng::new(7);
        let mut b = Batched::<3>::default();
        let mut each: [Histogram; 3] = Default::default();
        for i in 0..1_000u64 {
            let kind = (rng.next_u64() % 3) as usize;
            // Mostly sub-millisecond, some up to a second, a few beyond the range.
            let ns = match i % 10 {
                0 => rng.next_u64() % 1_000_000_000,
                9 if i % 100 == 99 => u64::MAX - i,
                // The first bin (a packet that did not wait) and around its end.
                1..=3 => rng.next_u64() % 16_384,
                4 => 16_380 + rng.next_u64() % 8,
                _ => rng.next_u64() % 2_000_000,
            };
            b.record(kind, ns);
            each[kind].record(ns);
            // Pending values (1..16 of them) count as much as counted ones.
            if i % 37 == 0 || i == 999 {
                let mut all = Histogram::default();
                for h in &each {
                    all.merge(h);
                }
                for q in [0.0, 0.1, 0.5, 0.9, 0.99, 1.0] {
                    for (k, h) in each.iter().enumerate() {
                        assert_eq!(b.quantile(k, q), h.quantile(q), "{i} {k} {q}");
                        assert_eq!(b.len(k), h.len());
                    }
                    assert_eq!(b.quantile_all(q), all.quantile(q), "{i} {q}");
                }
            }
        }
        assert_ne!(b.n, 0);
        b.flush();
        assert_eq!(b.n, 0);
        for (k, h) in each.iter().enumerate() {
            assert_eq!(b.hist(k).counts, h.counts);
            assert_eq!(b.len(k), h.len());
        }
        assert_eq!(Batched::<3>::default().quantile_all(0.5), 0);
        // Only values of the first bin, none counted yet.
        let mut b = Batched::<3>::default();
        b.record(1, 5);
        assert_eq!(
            (b.len(1), b.quantile(1, 1.0), b.quantile_all(0.5)),
            (1, 8_192, 8_192)
        );
        assert_eq!((b.len(0), b.quantile(0, 0.5)), (0, 0));
    }

    #[test]
    fn batched_first_bin_counts_carry_into_the_histogram_and_the_rest_is_apart() {
        // What a value touches is one cache line; the histograms come with the first batch.
        assert_eq!(std::mem::size_of::<Batched<3>>(), 56);
        assert_eq!(std::mem::offset_of!(Batched<3>, hists), 48);
        let mut b = Batched::<3>::default();
        for _ in 0..100 {
            b.record(2, 10);
        }
        assert!(b.hists.is_none());
        assert_eq!((b.len(2), b.quantile(2, 0.5)), (100, 8_192));
        // A first-bin count about to pass 2^32 − 1 is counted with a batch first.
        b.first[2] = u32::MAX - 1;
        b.record(1, 3_000_000);
        b.record(2, 10);
        assert!(b.hists.is_none());
        b.record(2, 10);
        assert_eq!(b.first[2], 1);
        assert_eq!(b.n, 0);
        let h = b.hist(2);
        assert_eq!(
            (h.count(0), h.len()),
            (u64::from(u32::MAX), u64::from(u32::MAX))
        );
        assert_eq!(b.len(2), 1u64 << 32);
        assert_eq!(b.len(1), 1);
        assert_eq!(b.hist(1).count(bin_of(3_000_000)), 1);
        assert_eq!(b.quantile_all(1.0), b.quantile(1, 0.5));
    }

    #[test]
    fn bins_are_contiguous_and_monotone() {
        let mut last = 0;
        for e in 0..45u32 {
            for k in 0..8u64 {
                let v = (1u64 << e) + k * ((1u64 << e) / 8);
                let b = bin_of(v);
                assert!(b >= last, "{v}");
                last = b;
            }
        }
        for i in 0..BINS {
            assert_eq!(bin_of(value_of(i)), i, "{i}");
        }
    }
}
