//! The receiver's sequence space: in-order delivery point, out-of-order ranges and the
//! SACK blocks reported for them (RFC 2018 §4: the first block holds the most recent
//! arrival; the others repeat the most recently reported blocks).

use asymlink_core::time::{Duration, Instant};

/// SACK blocks a header can carry (RFC 2018 §3: at most four).
const MAX_SACK_BLOCKS: usize = 4;

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
            self.stamp += 1;
            if start < end && self.ooo.last().is_none_or(|l| start >= l.end) {
                // At or above the end of every range held (the usual arrival behind a
                // hole): nothing overlaps, the last range grows or a new one starts.
                self.append(start, end);
                return a;
            }
            a.dup_range = self
                .ooo
                .iter()
                .find(|r| r.start < end && start < r.end)
                .map(|r| (start.max(r.start), end.min(r.end)));
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

    /// [`Receiver::on_data`] of `len` bytes at `rcv_nxt` without a gap (the caller checked
    /// [`Receiver::has_gap`]): all of them are delivered.
    #[inline]
    pub fn on_data_in_order(&mut self, len: u64) -> Arrival {
        debug_assert!(self.ooo.is_empty() && len > 0);
        self.rcv_nxt += len;
        Arrival {
            delivered: len,
            ..Arrival::default()
        }
    }

    /// [`Receiver::insert`] of a range that starts at or above the end of every range
    /// held: it extends the last one when adjacent, or follows it.
    fn append(&mut self, start: u64, end: u64) {
        let stamp = self.stamp;
        self.ooo_bytes += end - start;
        match self.ooo.last_mut() {
            Some(l) if l.end == start => {
                l.end = end;
                l.stamp = stamp;
            }
            _ => self.ooo.push(Range { start, end, stamp }),
        }
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
    ///
    /// At most four blocks fit in a TCP header, so `max` is capped at four. The ranges
    /// are disjoint (their starts differ), so "newest first, then lowest start" is a
    /// total order; the newest `max` are picked by insertion into a short array
    /// instead of sorting a copy of the whole queue.
    pub fn sack_blocks(&self, max: usize) -> impl Iterator<Item = (u64, u64)> {
        let max = max.min(MAX_SACK_BLOCKS);
        let mut best = [(0u64, 0u64, 0u64); MAX_SACK_BLOCKS];
        let mut n = 0;
        if max > 0 {
            // Backwards: the newest ranges are usually the highest, so the array fills
            // with them first and most older ranges are passed over after one test.
            for r in self.ooo.iter().rev() {
                // Goes before `best[i]` when newer, or as new and lower.
                let before =
                    |b: &(u64, u64, u64)| r.stamp > b.0 || (r.stamp == b.0 && r.start < b.1);
                if n == max && !before(&best[n - 1]) {
                    continue;
                }
                let mut i = if n < max { n } else { n - 1 };
                while i > 0 && before(&best[i - 1]) {
                    best[i] = best[i - 1];
                    i -= 1;
                }
                best[i] = (r.stamp, r.start, r.end);
                n = (n + 1).min(max);
            }
        }
        best.into_iter().take(n).map(|(_, s, e)| (s, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The blocks picked without sorting are the first `max` of the whole queue sorted
    /// newest first, then by start, across random arrivals with holes.
    #[test]
    fn sack_blocks_match_a_full_sort() {
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        let mut checked = 0;
        for _ in 0..50 {
            let mut r = Receiver::new(0);
            for _ in 0..200 {
                let seg = next(64);
                r.on_data(r.rcv_nxt() + seg * 100, r.rcv_nxt() + seg * 100 + 100);
                for max in 0..=6 {
                    let mut v = r.ooo.clone();
                    v.sort_by(|a, b| b.stamp.cmp(&a.stamp).then(a.start.cmp(&b.start)));
                    let want: Vec<_> = v
                        .iter()
                        .take(max.min(4))
                        .map(|g| (g.start, g.end))
                        .collect();
                    assert_eq!(r.sack_blocks(max).collect::<Vec<_>>(), want);
                    checked += want.len();
                }
            }
        }
        assert!(checked > 10_000, "{checked}");
    }

    /// Random arrivals (in order, behind holes, overlapping, duplicates) against a map
    /// of 100-byte units, each holding the arrival counter of the out-of-order segment
    /// that last covered it: the delivery point, the bytes held, what each arrival
    /// reports and the SACK blocks (a range is as new as its newest unit) agree.
    #[test]
    fn arrivals_match_a_map_of_units() {
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = |n: u64| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x % n
        };
        for _ in 0..60 {
            let mut r = Receiver::new(0);
            let mut units: Vec<Option<u64>> = vec![None; 400];
            let (mut nxt, mut stamp) = (0usize, 0u64);
            for _ in 0..150 {
                let lo = (nxt + next(24) as usize).saturating_sub(4);
                let hi = (lo + 1 + next(3) as usize).min(units.len());
                if lo >= hi {
                    continue;
                }
                let (start, end) = (lo as u64 * 100, hi as u64 * 100);
                // What the map says before the arrival.
                let mut want = Arrival {
                    duplicate: hi <= nxt || (lo > nxt && units[lo..hi].iter().all(|u| u.is_some())),
                    out_of_order: lo > nxt,
                    ..Default::default()
                };
                want.dup_range = if hi <= nxt {
                    Some((start, end))
                } else if lo < nxt {
                    Some((start, nxt as u64 * 100))
                } else if lo == nxt {
                    None
                } else {
                    // The overlap with the first held range that overlaps the segment.
                    let first = (lo..hi).find(|&u| units[u].is_some());
                    first.map(|f| {
                        let mut b = f;
                        while b > nxt && units[b - 1].is_some() {
                            b -= 1;
                        }
                        let mut e = f;
                        while e < units.len() && units[e].is_some() {
                            e += 1;
                        }
                        (start.max(b as u64 * 100), end.min(e as u64 * 100))
                    })
                };
                if hi > nxt {
                    if lo > nxt {
                        stamp += 1;
                        units[lo..hi].iter_mut().for_each(|u| *u = Some(stamp));
                    } else {
                        let old = nxt;
                        nxt = hi;
                        while nxt < units.len() && units[nxt].is_some() {
                            nxt += 1;
                        }
                        want.delivered = (nxt - old) as u64 * 100;
                        want.filled_gap = units[old..].iter().any(|u| u.is_some());
                        units[..nxt].iter_mut().for_each(|u| *u = None);
                    }
                }
                let got = r.on_data(start, end);
                assert_eq!(got, want, "[{start}, {end}) at {}", r.rcv_nxt());
                assert_eq!(r.rcv_nxt(), nxt as u64 * 100);
                let held = units.iter().filter(|u| u.is_some()).count() as u64;
                assert_eq!(r.ooo_bytes(), held * 100);
                // Runs of held units: (newest stamp, start, end).
                let mut runs = Vec::new();
                let mut u = nxt;
                while u < units.len() {
                    if units[u].is_none() {
                        u += 1;
                        continue;
                    }
                    let b = u;
                    let mut newest = 0;
                    while u < units.len() && units[u].is_some() {
                        newest = newest.max(units[u].unwrap_or(0));
                        u += 1;
                    }
                    runs.push((newest, b as u64 * 100, u as u64 * 100));
                }
                runs.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                let blocks: Vec<_> = runs.iter().take(4).map(|&(_, s, e)| (s, e)).collect();
                assert_eq!(r.sack_blocks(4).collect::<Vec<_>>(), blocks);
            }
        }
    }

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

/// Linux's receive buffer: its autotuning ("dynamic right-sizing", `tcp_rcv_space_adjust`
/// and `tcp_rcvbuf_grow` as in Linux 6.18) and the receiver's RTT estimate it runs on
/// (`tcp_rcv_rtt_update`), the window clamp and `tcp_grow_window`'s window threshold
/// `rcv_ssthresh`, and the payload ratio (`scaling_ratio`) that turns buffer memory into
/// window.
///
/// Buffer sizes are bytes of memory (`tcp_rmem`, `SO_RCVBUF` doubled); the window is
/// memory × `scaling_ratio` / 256, which starts at half (`TCP_DEFAULT_SCALING_RATIO`) and
/// is re-estimated from the first full-sized segment as payload / memory taken
/// (`skb->len / skb->truesize` in `tcp_measure_rcv_mss`; the memory depends on the
/// driver). A changed ratio resets the window clamp to the whole buffer's window, even
/// where the application had clamped it (`TCP_WINDOW_CLAMP`).
//= https://www.rfc-editor.org/rfc/rfc7323#section-4.1
//# A TCP MAY use the timestamps to measure the RTT at the receiver
#[derive(Clone, Debug)]
pub struct RcvAutotune {
    mss: u64,
    /// `sk_rcvbuf`: buffer memory (bytes).
    rcvbuf: u64,
    /// `tcp_rmem[2]`: the largest buffer autotuning may reach.
    max: u64,
    /// The buffer was set by the application (`SO_RCVBUF`, `SOCK_RCVBUF_LOCK`): no
    /// autotuning.
    locked: bool,
    /// `scaling_ratio`: window bytes per 256 bytes of buffer memory.
    ratio: u64,
    /// Memory a received full-sized segment takes (`skb->truesize`); `None`: the ratio
    /// stays at its default.
    truesize: Option<u64>,
    /// `window_clamp`: the window never exceeds it (0 before the handshake: none).
    clamp: u64,
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

/// `TCP_DEFAULT_SCALING_RATIO`: half of the buffer memory is window.
const DEFAULT_RATIO: u64 = 128;

/// What the application sets on a Linux receive buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RcvBufOpts {
    /// `SO_RCVBUF` (bytes; the buffer is twice it and autotuning is off).
    pub so_rcvbuf: Option<u64>,
    /// `TCP_WINDOW_CLAMP` (bytes), set before the connection.
    pub window_clamp: Option<u64>,
    /// Memory a received full-sized segment takes (`skb->truesize`).
    pub truesize: Option<u64>,
}

impl RcvAutotune {
    /// A buffer of `rmem[1]` that may grow to `rmem[2]`, for segments of `mss` bytes.
    pub fn new(rmem: [u64; 3], mss: u32) -> RcvAutotune {
        Self::with_opts(rmem, mss, RcvBufOpts::default())
    }

    /// As `new`, with the application's socket options.
    pub fn with_opts(rmem: [u64; 3], mss: u32, o: RcvBufOpts) -> RcvAutotune {
        let mss = mss as u64;
        let (rcvbuf, max, locked) = match o.so_rcvbuf {
            Some(b) => (2 * b, 2 * b, true),
            None => (rmem[1], rmem[2].max(rmem[1]), false),
        };
        let mut a = RcvAutotune {
            mss,
            rcvbuf,
            max,
            locked,
            ratio: DEFAULT_RATIO,
            truesize: o.truesize,
            clamp: o.window_clamp.unwrap_or(0),
            rcv_ssthresh: 0,
            space: 0,
            space_read: 0,
            space_time: Instant::ZERO,
            rtt: None,
            rtt_seq: 0,
            rtt_time: None,
            last_tsecr: None,
        };
        // A buffer the application set bounds the clamp (`tcp_connect_init`,
        // `tcp_openreq_init_rwin`).
        let full = a.win(a.rcvbuf);
        if a.locked && (a.clamp == 0 || a.clamp > full) {
            a.clamp = full;
        }
        a.rcv_ssthresh = a.initial_window();
        a.space = a.rcv_ssthresh.min(10 * mss);
        a
    }

    /// `tcp_win_from_space`: the window `space` bytes of memory hold.
    fn win(&self, space: u64) -> u64 {
        (space * self.ratio) >> 8
    }

    /// `tcp_space_from_win`: the memory a window of `win` bytes needs.
    fn space_from_win(&self, win: u64) -> u64 {
        (win << 8) / self.ratio
    }

    /// The initial window (`tcp_select_initial_window`): what the buffer holds at the
    /// default ratio, at most the clamp, rounded down to whole segments (65 160 bytes
    /// for 128 KiB and a 1448-byte MSS).
    pub fn initial_window(&self) -> u64 {
        let mut w = self.win(self.rcvbuf);
        if self.clamp > 0 {
            w = w.min(self.clamp);
        }
        if w > self.mss {
            w - w % self.mss
        } else {
            w
        }
    }

    /// The connection is established (`tcp_init_buffer_space`): the clamp is bounded by
    /// the largest window the scale can carry and by the buffer (less one segment held
    /// back, `tcp_app_win`), the first measurement starts; `mss` is the negotiated one.
    pub fn start(&mut self, now: Instant, mss: u32, read: u64, wscale: u8) {
        let rcv_wnd = self.initial_window();
        self.mss = mss as u64;
        let scale_max = 65_535u64 << wscale;
        self.clamp = if self.clamp == 0 {
            scale_max
        } else {
            self.clamp.min(scale_max)
        };
        let maxwin = self.win(self.rcvbuf);
        if self.clamp >= maxwin {
            self.clamp = maxwin;
        }
        if self.clamp > 2 * self.mss && self.clamp + self.mss > maxwin {
            self.clamp = (2 * self.mss).max(maxwin.saturating_sub(self.mss));
        }
        self.rcv_ssthresh = self.rcv_ssthresh.min(self.clamp);
        self.space = self.rcv_ssthresh.min(rcv_wnd).min(10 * self.mss);
        self.space_read = read;
        self.space_time = now;
    }

    /// Buffer memory now (`sk_rcvbuf`).
    pub fn rcvbuf(&self) -> u64 {
        self.rcvbuf
    }

    /// The payload ratio (`scaling_ratio`, per 256 bytes of memory).
    pub fn scaling_ratio(&self) -> u64 {
        self.ratio
    }

    /// The receiver's RTT estimate.
    pub fn rtt(&self) -> Option<Duration> {
        self.rtt
    }

    /// `window_clamp`: the largest window this end may offer.
    pub fn window_clamp(&self) -> u64 {
        self.clamp
    }

    /// `rcv_ssthresh`.
    pub fn rcv_ssthresh(&self) -> u64 {
        self.rcv_ssthresh
    }

    /// The window `__tcp_select_window` counts as full: the clamp, at most what the
    /// buffer holds.
    pub fn full_window(&self) -> u64 {
        self.clamp.min(self.win(self.rcvbuf))
    }

    /// What the buffer has left with `queued` bytes held (`tcp_space`).
    pub fn free_space(&self, queued: u64) -> u64 {
        self.win(self.rcvbuf).saturating_sub(queued)
    }

    /// The window to offer with `queued` bytes held (out of order or unread): what the
    /// buffer has left, at most `rcv_ssthresh` (`__tcp_select_window`).
    pub fn window(&self, queued: u64) -> u64 {
        self.free_space(queued).min(self.rcv_ssthresh)
    }

    /// `tcp_set_window_clamp`: a smaller clamp lowers `rcv_ssthresh` with it; a larger
    /// one lets it rise to the window last offered (`rcv_wnd`).
    pub fn set_window_clamp(&mut self, val: u64, rcv_wnd: u64) {
        if val == self.clamp {
            return;
        }
        if val < self.clamp {
            self.rcv_ssthresh = self.rcv_ssthresh.min(val);
        } else {
            self.rcv_ssthresh = self.rcv_ssthresh.max(rcv_wnd.min(val));
        }
        self.clamp = val;
    }

    /// A segment of `len` bytes, larger than the receiver's segment-size estimate, arrived
    /// (`tcp_measure_rcv_mss`): the payload ratio is re-estimated from the memory it
    /// takes; a new ratio resets the clamp to the whole buffer's window.
    pub fn measure_ratio(&mut self, len: u64, rcv_wnd: u64) {
        let Some(truesize) = self.truesize else {
            return;
        };
        let ratio = ((len << 8) / truesize.max(1)).clamp(1, 255);
        if ratio == self.ratio {
            return;
        }
        self.ratio = ratio;
        let val = self.win(self.rcvbuf);
        self.set_window_clamp(val, rcv_wnd);
        if self.clamp < self.space {
            self.space = self.clamp;
        }
    }

    /// A data segment of `len` bytes arrived and `queued` bytes (it included) wait in
    /// the buffer (`tcp_grow_window`): `rcv_ssthresh` grows by two segments toward what
    /// the buffer holds. Returns whether it grew (Linux then acknowledges at once).
    pub fn grow_window(&mut self, len: u64, queued: u64) -> bool {
        if len < 128 {
            return false;
        }
        let cap = self.clamp.min(self.win(self.rcvbuf).saturating_sub(queued));
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
    /// plus the out-of-order span; the buffer for that window, at most `rmem[2]`, and the
    /// clamp follows it. A buffer the application set keeps its size.
    fn grow(&mut self, newval: u64, ooo_span: u64) {
        let old = self.space.max(1);
        self.space = newval;
        if self.locked {
            return;
        }
        let mut rcvwin = 2 * newval;
        let grow = (rcvwin as u128 * newval.saturating_sub(old) as u128 / old as u128) as u64;
        rcvwin = rcvwin.saturating_add(2 * grow).saturating_add(ooo_span);
        let rcvbuf = self.space_from_win(rcvwin).min(self.max);
        if rcvbuf > self.rcvbuf {
            self.rcvbuf = rcvbuf;
            self.clamp = self.win(rcvbuf);
        }
    }
}

#[cfg(test)]
mod autotune_tests {
    use super::*;

    #[test]
    fn initial_window_is_half_the_default_buffer_in_whole_segments() {
        let mut a = RcvAutotune::new([4096, 131_072, 33_554_432], 1448);
        assert_eq!(a.initial_window(), 65_160);
        assert_eq!(a.window(0), 65_160);
        // Established (`tcp_init_buffer_space`): the clamp is the buffer's window less
        // one segment held back.
        a.start(Instant::ZERO, 1448, 0, 10);
        assert_eq!(a.window_clamp(), 65_536 - 1448);
        assert_eq!(a.window(0), 65_536 - 1448);
    }

    /// Linux ≥ 6.7 re-estimates the payload ratio at the first full-sized segment (1448
    /// of 2304 bytes of memory: 160/256) and resets the clamp to the whole buffer's
    /// window: 81 920 bytes of the default 128 KiB, toward which `rcv_ssthresh` grows.
    #[test]
    fn the_payload_ratio_from_the_first_full_segment_resets_the_clamp() {
        let opts = RcvBufOpts {
            truesize: Some(2304),
            ..RcvBufOpts::default()
        };
        let mut a = RcvAutotune::with_opts([4096, 131_072, 33_554_432], 1448, opts);
        a.start(Instant::ZERO, 1448, 0, 10);
        a.measure_ratio(1448, 65_160);
        assert_eq!(a.scaling_ratio(), 160);
        assert_eq!(a.window_clamp(), 81_920);
        // `tcp_set_window_clamp` raised the threshold back to the window offered.
        assert_eq!(a.window(0), 65_160);
        let mut offered = vec![];
        while a.grow_window(1448, 1448) {
            offered.push(a.window(0));
        }
        // Two segments per arrival, up to what the buffer holds with the segment in it.
        assert_eq!(offered, [68_056, 70_952, 73_848, 76_744, 79_640, 80_472]);
        // The same ratio again changes nothing.
        a.measure_ratio(1448, 80_472);
        assert_eq!(a.window_clamp(), 81_920);
    }

    /// A buffer the application set (`SO_RCVBUF` 128 KiB: 256 KiB of memory) with the
    /// window clamped to 64 KiB (`TCP_WINDOW_CLAMP`), as the lab's sink does: the
    /// initial window is the clamp in whole segments; the ratio's re-estimate resets the
    /// clamp to the buffer's 163 840 bytes, so the first segment grows the threshold
    /// (68 056 offered) until the application clamps again; the buffer never autotunes.
    #[test]
    fn a_set_buffer_and_clamp_open_by_the_ratio_reestimate_until_clamped_again() {
        let opts = RcvBufOpts {
            so_rcvbuf: Some(131_072),
            window_clamp: Some(65_536),
            truesize: Some(2304),
        };
        let mut a = RcvAutotune::with_opts([4096, 131_072, 33_554_432], 1448, opts);
        assert_eq!(a.initial_window(), 65_160);
        a.start(Instant::ZERO, 1448, 0, 1);
        assert_eq!((a.window_clamp(), a.window(0)), (65_536, 65_160));
        a.measure_ratio(1448, 65_160);
        assert_eq!(a.window_clamp(), 163_840);
        assert!(a.grow_window(1448, 1448));
        assert_eq!(a.window(0), 68_056);
        a.set_window_clamp(65_536, 68_056);
        assert_eq!((a.window_clamp(), a.window(0)), (65_536, 65_536));
        assert!(!a.grow_window(1448, 1448));
        a.measure_ts(7, Duration::from_millis(40), true, true);
        a.on_read(Instant::from_millis(60), 1_000_000, 0, 0);
        assert_eq!(a.rcvbuf(), 262_144);
        assert_eq!(a.window_clamp(), 65_536);
    }

    #[test]
    fn the_buffer_grows_once_per_rtt_with_what_was_read_up_to_rmem_max() {
        let mut a = RcvAutotune::new([4096, 131_072, 1_000_000], 1448);
        a.start(Instant::ZERO, 1448, 0, 5);
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
        // rcv_ssthresh (the clamp at the start, one segment below the buffer's 65 536)
        // follows two segments per arriving segment.
        assert_eq!(a.window(0), 64_088);
        assert!(a.grow_window(1448, 0));
        assert_eq!(a.window(0), 64_088 + 2896);
        // Per-window samples only lower the estimate.
        a.measure_window(Instant::from_millis(200), 1_000, 65_000);
        a.measure_window(Instant::from_millis(300), 70_000, 65_000);
        assert_eq!(a.rtt(), Some(Duration::from_millis(40)));
        a.measure_window(Instant::from_millis(320), 140_000, 65_000);
        assert_eq!(a.rtt(), Some(Duration::from_millis(20)));
    }
}
