//! The receiver's sequence space: in-order delivery point, out-of-order ranges and the
//! SACK blocks reported for them (RFC 2018 §4: the first block holds the most recent
//! arrival; the others repeat the most recently reported blocks).

/// One out-of-order range [start, end) and when it last changed (arrival counter).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Range {
    start: u64,
    end: u64,
    stamp: u64,
}

/// What an arriving segment did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// Bytes newly delivered in order.
    pub delivered: u64,
    /// The segment was above `rcv_nxt` (out of order).
    pub out_of_order: bool,
    /// The segment filled (part of) a gap.
    pub filled_gap: bool,
    /// Nothing in the segment was new.
    pub duplicate: bool,
}

/// Receive-side sequence state (offsets from the peer's ISS; data starts at 1).
#[derive(Clone, Debug)]
pub struct Receiver {
    rcv_nxt: u64,
    ooo: Vec<Range>,
    ooo_bytes: u64,
    stamp: u64,
}

impl Receiver {
    /// Expecting offset `rcv_nxt` next.
    pub fn new(rcv_nxt: u64) -> Receiver {
        Receiver {
            rcv_nxt,
            ooo: Vec::new(),
            ooo_bytes: 0,
            stamp: 0,
        }
    }

    /// Next expected offset.
    pub fn rcv_nxt(&self) -> u64 {
        self.rcv_nxt
    }

    /// Advance past a FIN or SYN (one sequence number, no data).
    pub fn advance_control(&mut self) {
        self.rcv_nxt += 1;
    }

    /// Bytes held out of order.
    pub fn ooo_bytes(&self) -> u64 {
        self.ooo_bytes
    }

    /// Whether a gap exists.
    pub fn has_gap(&self) -> bool {
        !self.ooo.is_empty()
    }

    /// A segment covering [start, end) arrived.
    pub fn on_data(&mut self, start: u64, end: u64) -> Arrival {
        let mut a = Arrival::default();
        if end <= self.rcv_nxt {
            a.duplicate = true;
            return a;
        }
        let had_gap = self.has_gap();
        if start > self.rcv_nxt {
            a.out_of_order = true;
            self.stamp += 1;
            let before = self.ooo_bytes;
            self.insert(start, end);
            a.duplicate = self.ooo_bytes == before;
            return a;
        }
        // In order (possibly overlapping already-received bytes).
        let old = self.rcv_nxt;
        self.rcv_nxt = end;
        // Absorb out-of-order ranges now contiguous.
        let mut absorbed = 0;
        while let Some(r) = self.ooo.first().copied() {
            if r.start > self.rcv_nxt {
                break;
            }
            self.ooo.remove(0);
            self.ooo_bytes -= r.end - r.start;
            absorbed += 1;
            if r.end > self.rcv_nxt {
                self.rcv_nxt = r.end;
            }
        }
        a.delivered = self.rcv_nxt - old;
        a.filled_gap = had_gap && (absorbed > 0 || self.has_gap());
        a
    }

    fn insert(&mut self, start: u64, end: u64) {
        let stamp = self.stamp;
        let mut s = start;
        let mut e = end;
        // Merge with every overlapping or adjacent range.
        let mut i = 0;
        while i < self.ooo.len() {
            let r = self.ooo[i];
            if r.end < s || r.start > e {
                i += 1;
                continue;
            }
            s = s.min(r.start);
            e = e.max(r.end);
            self.ooo_bytes -= r.end - r.start;
            self.ooo.remove(i);
        }
        let pos = self.ooo.partition_point(|r| r.start < s);
        self.ooo.insert(
            pos,
            Range {
                start: s,
                end: e,
                stamp,
            },
        );
        self.ooo_bytes += e - s;
    }

    /// Up to `max` SACK blocks, most recently changed first.
    pub fn sack_blocks(&self, max: usize) -> impl Iterator<Item = (u64, u64)> {
        let mut v: Vec<Range> = self.ooo.clone();
        v.sort_by(|a, b| b.stamp.cmp(&a.stamp).then(a.start.cmp(&b.start)));
        v.into_iter().take(max).map(|r| (r.start, r.end))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_order_then_gap_then_fill() {
        let mut r = Receiver::new(1);
        assert_eq!(r.on_data(1, 101).delivered, 100);
        let a = r.on_data(201, 301);
        assert!(a.out_of_order);
        assert_eq!(a.delivered, 0);
        let a = r.on_data(401, 501);
        assert!(a.out_of_order);
        let blocks: Vec<_> = r.sack_blocks(3).collect();
        assert_eq!(blocks, vec![(401, 501), (201, 301)]);
        let a = r.on_data(101, 201);
        assert_eq!(a.delivered, 200, "fills the gap and absorbs [201,301)");
        assert!(a.filled_gap);
        assert_eq!(r.rcv_nxt(), 301);
        assert_eq!(r.ooo_bytes(), 100);
        let a = r.on_data(1, 101);
        assert!(a.duplicate);
    }

    #[test]
    fn overlapping_ooo_merge() {
        let mut r = Receiver::new(1);
        r.on_data(201, 301);
        r.on_data(251, 401);
        r.on_data(101, 151);
        let blocks: Vec<_> = r.sack_blocks(4).collect();
        assert_eq!(blocks, vec![(101, 151), (201, 401)]);
        assert_eq!(r.ooo_bytes(), 250);
        assert!(r.on_data(201, 301).duplicate);
    }
}
