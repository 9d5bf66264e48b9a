//! The receiver's sequence space: in-order delivery point, out-of-order ranges and the
//! SACK blocks reported for them (RFC 2018 §4: the first block holds the most recent
//! arrival; the others repeat the most recently reported blocks).

use asymlink_core::time::{Duration, Instant};

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
    /// The part of the segment the receiver already held, as Linux reports it in a D-SACK
    /// block (`tcp_dsack_set`): all of it below `rcv_nxt`, the part below `rcv_nxt` of a
    /// segment that straddles it, or the overlap with the first out-of-order range it
    /// meets.
    pub dup_range: Option<(u64, u64)>,
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

    /// Bytes from the next expected byte to the end of the highest out-of-order range
    /// (zero without a gap).
    pub fn ooo_span(&self) -> u64 {
        self.ooo.last().map_or(0, |r| r.end - self.rcv_nxt)
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
            a.dup_range = Some((start, end));
            return a;
        }
        let had_gap = self.has_gap();
        if start < self.rcv_nxt {
            a.dup_range = Some((start, self.rcv_nxt));
        }
        if start > self.rcv_nxt {
            a.out_of_order = true;
            a.dup_range = self
                .ooo
                .iter()
                .find(|r| r.start < end && start < r.end)
                .map(|r| (start.max(r.start), end.min(r.end)));
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
    fn duplicates_give_the_range_already_held() {
        let mut r = Receiver::new(1);
        assert_eq!(r.on_data(1, 101).dup_range, None);
        assert_eq!(r.on_data(1, 101).dup_range, Some((1, 101)), "below rcv_nxt");
        assert_eq!(
            r.on_data(51, 151).dup_range,
            Some((51, 101)),
            "straddles rcv_nxt"
        );
        assert_eq!(r.on_data(301, 401).dup_range, None);
        assert_eq!(
            r.on_data(351, 451).dup_range,
            Some((351, 401)),
            "overlaps a range"
        );
        let a = r.on_data(301, 401);
        assert!(a.duplicate && a.out_of_order);
        assert_eq!(a.dup_range, Some((301, 401)));
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

/// Linux's receive-buffer autotuning ("dynamic right-sizing", `tcp_rcv_space_adjust` and
/// `tcp_rcvbuf_grow` as in Linux 6.18) and the receiver's RTT estimate it runs on
/// (`tcp_rcv_rtt_update`), with `tcp_grow_window`'s window threshold `rcv_ssthresh`.
///
/// Buffer sizes are bytes of memory (`tcp_rmem`); the window is half of them, Linux's
/// default scaling ratio (`TCP_DEFAULT_SCALING_RATIO`; Linux refines it per packet
/// from the payload's share of the buffer memory, which depends on the driver).
//= https://www.rfc-editor.org/rfc/rfc7323#section-4.1
//# A TCP MAY use the timestamps to measure the RTT at the receiver
#[derive(Clone, Debug)]
pub struct RcvAutotune {
    mss: u64,
    /// `sk_rcvbuf`: buffer memory (bytes).
    rcvbuf: u64,
    /// `tcp_rmem[2]`: the largest buffer autotuning may reach.
    max: u64,
    /// `rcv_ssthresh`: the window may not exceed it; grows with arriving segments.
    rcv_ssthresh: u64,
    /// `rcvq_space.space`: the most the application read in one receiver RTT.
    space: u64,
    /// Bytes read when the current measurement began, and when it began.
    space_read: u64,
    space_time: Instant,
    /// `rcv_rtt_est.rtt_us`: the receiver's RTT estimate.
    rtt: Option<Duration>,
    /// Per-window measurement: when `rcv_nxt` reaches `rtt_seq`, one window has arrived
    /// since `rtt_time` (`tcp_rcv_rtt_measure`).
    rtt_seq: u64,
    rtt_time: Option<Instant>,
    /// The last echoed timestamp sampled (`rcv_rtt_last_tsecr`).
    last_tsecr: Option<u32>,
}

/// The window a buffer of `space` bytes of memory holds.
fn win_from_space(space: u64) -> u64 {
    space / 2
}

impl RcvAutotune {
    /// A buffer of `rmem[1]` that may grow to `rmem[2]`, for segments of `mss` bytes.
    pub fn new(rmem: [u64; 3], mss: u32) -> RcvAutotune {
        let mss = mss as u64;
        let initial = Self::initial_window_for(rmem[1], mss);
        RcvAutotune {
            mss,
            rcvbuf: rmem[1],
            max: rmem[2].max(rmem[1]),
            rcv_ssthresh: initial,
            space: initial.min(10 * mss),
            space_read: 0,
            space_time: Instant::ZERO,
            rtt: None,
            rtt_seq: 0,
            rtt_time: None,
            last_tsecr: None,
        }
    }

    /// The initial window (`tcp_select_initial_window`): the default buffer's window,
    /// rounded down to whole segments (65 160 bytes for 128 KiB and a 1448-byte MSS).
    fn initial_window_for(rcvbuf: u64, mss: u64) -> u64 {
        let w = win_from_space(rcvbuf);
        if w > mss {
            w - w % mss
        } else {
            w
        }
    }

    /// The window offered in a SYN or SYN-ACK.
    pub fn initial_window(&self) -> u64 {
        Self::initial_window_for(self.rcvbuf, self.mss)
    }

    /// The connection is established (`tcp_init_buffer_space`): the first measurement
    /// starts; `mss` is the negotiated one.
    pub fn start(&mut self, now: Instant, mss: u32, read: u64) {
        self.mss = mss as u64;
        self.space = self
            .initial_window()
            .min(self.rcv_ssthresh)
            .min(10 * self.mss);
        self.space_read = read;
        self.space_time = now;
    }

    /// Buffer memory now (`sk_rcvbuf`).
    pub fn rcvbuf(&self) -> u64 {
        self.rcvbuf
    }

    /// The receiver's RTT estimate.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    /// `window_clamp`: the window the buffer holds.
    pub fn window_clamp(&self) -> u64 {
        win_from_space(self.rcvbuf)
    }

    /// The window to offer with `queued` bytes held (out of order or unread): what the
    /// buffer has left, at most `rcv_ssthresh` (`__tcp_select_window`).
    pub fn window(&self, queued: u64) -> u64 {
        self.window_clamp()
            .saturating_sub(queued)
            .min(self.rcv_ssthresh)
    }

    /// A data segment of `len` bytes arrived (`tcp_grow_window`): `rcv_ssthresh` grows by
    /// two segments toward what the buffer holds. Returns whether it grew (Linux then
    /// acknowledges at once).
    pub fn grow_window(&mut self, len: u64, queued: u64) -> bool {
        if len < 128 {
            return false;
        }
        let cap = self.window_clamp().saturating_sub(queued);
        let room = cap.saturating_sub(self.rcv_ssthresh);
        if room == 0 {
            return false;
        }
        let incr = (2 * self.mss).max(2 * len);
        self.rcv_ssthresh += room.min(incr);
        true
    }

    /// `tcp_rcv_rtt_update`: take a smaller sample at once; with timestamps (`win_dep`
    /// false) average larger ones (7/8), unless data waits unread.
    fn rtt_update(&mut self, sample: Duration, win_dep: bool, queue_empty: bool) {
        let sample = sample.max(Duration::from_micros(1));
        self.rtt = Some(match self.rtt {
            Some(old) if sample >= old => {
                if win_dep || !queue_empty {
                    return;
                }
                old - old / 8 + sample / 8
            }
            _ => sample,
        });
    }

    /// Per-window RTT measurement (`tcp_rcv_rtt_measure`), at every in-order data
    /// segment: the time one advertised window (`rcv_wnd`) took to arrive bounds the RTT
    /// from above; only the minimum is kept.
    pub fn measure_window(&mut self, now: Instant, rcv_nxt: u64, rcv_wnd: u64) {
        if let Some(t) = self.rtt_time {
            if rcv_nxt < self.rtt_seq {
                return;
            }
            self.rtt_update(now - t, true, true);
        }
        self.rtt_seq = rcv_nxt + rcv_wnd;
        self.rtt_time = Some(now);
    }

    /// Timestamp RTT measurement (`tcp_rcv_rtt_measure_ts`): a full-sized segment echoing
    /// a timestamp not sampled before; `elapsed` is how long ago this end sent it.
    pub fn measure_ts(
        &mut self,
        tsecr: u32,
        elapsed: Duration,
        full_sized: bool,
        queue_empty: bool,
    ) {
        if self.last_tsecr == Some(tsecr) {
            return;
        }
        self.last_tsecr = Some(tsecr);
        if full_sized && !elapsed.is_zero() {
            self.rtt_update(elapsed, false, queue_empty);
        }
    }

    /// The application has read `read` bytes in all, `unread` wait, `ooo_span` bytes
    /// lie between the next expected byte and the end of the out-of-order data
    /// (`tcp_rcv_space_adjust`): once per receiver RTT, if more was read than in any RTT
    /// before, grow the buffer.
    pub fn on_read(&mut self, now: Instant, read: u64, unread: u64, ooo_span: u64) {
        let Some(rtt) = self.rtt else {
            return;
        };
        if now - self.space_time < rtt {
            return;
        }
        let copied = (read - self.space_read).saturating_sub(unread);
        if copied > self.space {
            self.grow(copied, ooo_span);
        }
        self.space_read = read;
        self.space_time = now;
    }

    /// Out-of-order data arrived (`tcp_data_queue_ofo` calls `tcp_rcvbuf_grow`): make
    /// room for the reordered span.
    pub fn on_out_of_order(&mut self, ooo_span: u64) {
        self.grow(self.space, ooo_span);
    }

    /// `tcp_rcvbuf_grow`: the window for twice what was read in the last RTT (DRS is one
    /// RTT late), plus twice its growth rate (slow start doubles the sender's rate),
    /// plus the out-of-order span; the buffer for that window, at most `rmem[2]`.
    fn grow(&mut self, newval: u64, ooo_span: u64) {
        let old = self.space.max(1);
        self.space = newval;
        let mut rcvwin = 2 * newval;
        let grow = (rcvwin as u128 * newval.saturating_sub(old) as u128 / old as u128) as u64;
        rcvwin = rcvwin.saturating_add(2 * grow).saturating_add(ooo_span);
        let rcvbuf = rcvwin.saturating_mul(2).min(self.max);
        if rcvbuf > self.rcvbuf {
            self.rcvbuf = rcvbuf;
        }
    }
}

#[cfg(test)]
mod autotune_tests {
    use super::*;

    #[test]
    fn initial_window_is_half_the_default_buffer_in_whole_segments() {
        let a = RcvAutotune::new([4096, 131_072, 33_554_432], 1448);
        assert_eq!(a.initial_window(), 65_160);
        assert_eq!(a.window(0), 65_160);
        assert_eq!(a.window_clamp(), 65_536);
    }

    #[test]
    fn the_buffer_grows_once_per_rtt_with_what_was_read_up_to_rmem_max() {
        let mut a = RcvAutotune::new([4096, 131_072, 1_000_000], 1448);
        a.start(Instant::ZERO, 1448, 0);
        // No RTT estimate yet: nothing grows.
        a.on_read(Instant::from_millis(50), 30_000, 0, 0);
        assert_eq!(a.rcvbuf(), 131_072);
        // A 40 ms timestamp sample; then smaller ones are taken at once, larger averaged.
        a.measure_ts(7, Duration::from_millis(40), true, true);
        a.measure_ts(7, Duration::from_millis(10), true, true); // same TSecr: ignored
        assert_eq!(a.rtt(), Some(Duration::from_millis(40)));
        // 30 000 bytes read in the first 50 ms (> one RTT) against 14 480 (10 segments):
        // window 2·30 000 + 2·(60 000·15 520 / 14 480) = 188 618, buffer twice that.
        a.on_read(Instant::from_millis(60), 30_000, 0, 0);
        assert_eq!(a.window_clamp(), 188_618);
        assert_eq!(a.rcvbuf(), 377_236);
        // Within the next RTT: no new measurement.
        a.on_read(Instant::from_millis(90), 200_000, 0, 0);
        assert_eq!(a.rcvbuf(), 377_236);
        // The RTT after: 200 000 read (it began at 60 ms), capped at rmem[2].
        a.on_read(Instant::from_millis(101), 200_000, 0, 0);
        assert_eq!(a.rcvbuf(), 1_000_000);
        assert_eq!(a.window_clamp(), 500_000);
        // rcv_ssthresh follows two segments per arriving segment.
        assert_eq!(a.window(0), 65_160);
        assert!(a.grow_window(1448, 0));
        assert_eq!(a.window(0), 65_160 + 2896);
        // Per-window samples only lower the estimate.
        a.measure_window(Instant::from_millis(200), 1_000, 65_000);
        a.measure_window(Instant::from_millis(300), 70_000, 65_000);
        assert_eq!(a.rtt(), Some(Duration::from_millis(40)));
        a.measure_window(Instant::from_millis(320), 140_000, 65_000);
        assert_eq!(a.rtt(), Some(Duration::from_millis(20)));
    }
}
