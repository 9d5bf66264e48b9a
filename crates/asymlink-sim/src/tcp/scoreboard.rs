//! The sender's record of outstanding segments: what was sent when, what the receiver
//! SACKed, what is presumed lost and what was retransmitted (RFC 6675 §2–§4 state).
//!
//! Offsets are 64-bit positions in the connection's sequence space counted from the ISS
//! (the SYN is offset 0), so nothing here wraps.

use asymlink_core::time::{Duration, Instant};
use std::collections::VecDeque;

/// The receiver has SACKed the segment.
pub const SACKED: u8 = 1;
/// The segment is presumed lost (RFC 6675 IsLost, or an RTO).
pub const LOST: u8 = 2;
/// The segment was retransmitted at least once (no RTT sample from it: Karn).
pub const RETRANS: u8 = 4;
/// A retransmission of the segment is in flight (counted in pipe).
pub const RETX_OUT: u8 = 8;
/// The segment carries SYN.
pub const SYN: u8 = 16;
/// The segment carries FIN.
pub const FIN: u8 = 32;

/// Segment records a board keeps allocated however short its window gets.
const KEEP_SEGS: usize = 64;

/// One outstanding segment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SentSeg {
    /// First offset.
    pub start: u64,
    /// Offset after the last.
    pub end: u64,
    /// Last (re)transmission time.
    pub sent_at: Instant,
    /// The flag bits above ([`SentSeg::flags`]) in the top byte, and below them the
    /// position of its last (re)transmission among all transmissions
    /// ([`SentSeg::order`]): one word, so that a record takes 32 bytes, two to a cache
    /// line.
    tag: u64,
}

/// The bits of [`SentSeg::tag`] that hold the transmission's position.
const ORDER_MASK: u64 = (1 << 56) - 1;

impl SentSeg {
    /// A segment [start, end) sent at `sent_at` with `flags` (the scoreboard sets its
    /// order when it is pushed).
    pub fn new(start: u64, end: u64, sent_at: Instant, flags: u8) -> SentSeg {
        SentSeg {
            start,
            end,
            sent_at,
            tag: (flags as u64) << 56,
        }
    }
    /// Flag bits ([`SACKED`], [`LOST`], ...).
    #[inline]
    pub fn flags(&self) -> u8 {
        (self.tag >> 56) as u8
    }
    /// Position of its last (re)transmission among all transmissions (set by the
    /// scoreboard): orders segments sent at the same instant.
    #[inline]
    pub fn order(&self) -> u64 {
        self.tag & ORDER_MASK
    }
    #[inline]
    fn set_flags(&mut self, f: u8) {
        self.tag = (self.tag & ORDER_MASK) | (f as u64) << 56;
    }
    #[inline]
    fn add_flags(&mut self, f: u8) {
        self.tag |= (f as u64) << 56;
    }
    #[inline]
    fn clear_flags(&mut self, f: u8) {
        self.tag &= !((f as u64) << 56);
    }
    #[inline]
    fn set_order(&mut self, order: u64) {
        // 2^56 transmissions are out of reach of any simulation.
        debug_assert!(order <= ORDER_MASK);
        self.tag = (self.tag & !ORDER_MASK) | order;
    }
    /// Length in sequence space.
    #[inline]
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    /// Whether it covers no sequence space (never true of a queued segment).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    #[inline]
    fn has(&self, f: u8) -> bool {
        self.flags() & f != 0
    }
}

/// What a cumulative ACK removed.
#[derive(Clone, Copy, Debug, Default)]
pub struct Acked {
    /// Bytes of sequence space newly acknowledged.
    pub bytes: u64,
    /// Send time of the oldest fully acknowledged segment that was neither retransmitted
    /// nor SACKed before (the start of a sequence-based RTT sample, as Linux's
    /// `first_ackt` in `tcp_clean_rtx_queue`).
    pub first_clean_sent: Option<Instant>,
    /// Whether any acknowledged segment had been retransmitted (Karn: then no
    /// sequence-based sample may be taken from this ACK).
    pub any_retransmitted: bool,
    /// Whether a FIN was acknowledged.
    pub fin: bool,
}

/// A segment the receiver newly got (SACKed, or cumulatively acknowledged without having
/// been SACKed), for RACK (`Scoreboard::track_deliveries`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delivery {
    /// Its last (re)transmission time.
    pub sent_at: Instant,
    /// Position of that transmission ([`SentSeg::order`]).
    pub order: u64,
    /// Offset after its last byte.
    pub end: u64,
    /// Whether it was ever retransmitted.
    pub retrans: bool,
}

/// RACK state (RFC 8985 §6.1, Linux `tp->rack`): the most recently sent segment among
/// those delivered, and the RTT of the last delivery.
#[derive(Clone, Copy, Debug, Default)]
pub struct Rack {
    /// Transmission order of the most recently sent delivered segment (RACK.xmit_ts and
    /// RACK.end_seq: Linux orders by send time, then sequence; simulated segments sent at
    /// the same instant are ordered by when they were sent).
    pub xmit: Option<u64>,
    /// RTT of the last delivered segment taken (RACK.rtt).
    pub rtt: Duration,
    /// Something was delivered since the last loss scan.
    pub advanced: bool,
}

impl Rack {
    /// A segment was delivered at `now` (Linux `tcp_rack_advance`). A retransmitted one
    /// whose RTT is below the minimum RTT may have been the original arriving late: it is
    /// not taken.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
    //# If Segment.retransmitted is TRUE and RACK.ack_ts < Segment.xmit_ts +
    //# RACK.min_RTT, then the sender MUST NOT update RACK.RTT
    pub fn advance(&mut self, d: &Delivery, now: Instant, min_rtt: Option<Duration>) {
        let rtt = now - d.sent_at;
        if d.retrans && min_rtt.is_none_or(|m| rtt < m) {
            return;
        }
        self.advanced = true;
        self.rtt = rtt;
        if self.xmit.is_none_or(|x| d.order > x) {
            self.xmit = Some(d.order);
        }
    }
}

/// What a RACK loss scan found.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RackLoss {
    /// Segments newly marked lost.
    pub newly_lost: u64,
    /// Whether a segment whose retransmission was in flight was among them.
    pub lost_retrans: bool,
    /// The longest a segment sent before the latest delivered one has left before its
    /// reordering window expires (the RACK reordering timer's delay).
    pub wait: Option<Duration>,
}

/// The scoreboard.
#[derive(Clone, Debug, Default)]
pub struct Scoreboard {
    segs: VecDeque<SentSeg>,
    sacked: u64,
    /// Segments SACKed (Linux `sacked_out`).
    sacked_segs: u64,
    /// Segments delivered so far: SACKed, or cumulatively acknowledged without having been
    /// SACKed (Linux `tp->delivered`).
    delivered: u64,
    /// Record each delivery in `deliveries` (RACK).
    track: bool,
    deliveries: Vec<Delivery>,
    /// A segment never retransmitted was delivered below one delivered before it: the
    /// path reorders (Linux `reord_seen`).
    reord_seen: bool,
    /// Transmissions so far (orders them: [`SentSeg::order`]).
    tx_count: u64,
    lost: u64,
    /// Segments ever marked lost (Linux `tp->lost`).
    lost_marks: u64,
    retx_out: u64,
    high_sacked: u64,
    /// Segments ending at or below this offset were already considered by `mark_lost`.
    lost_scanned: u64,
    /// No segment starting below this offset is a retransmission candidate.
    retx_hint: u64,
    /// No segment ending above this offset has a retransmission in flight (raised to the
    /// end of each segment retransmitted, lowered by the search for the highest one, RFC
    /// 6675 HighRxt, to what it found): that search starts there, not at the end of the
    /// board.
    retx_top: u64,
    /// Every segment ending at or below this offset is SACKed, marked lost or being
    /// retransmitted: the search for an RFC 6675 rule (3) candidate starts above it. Only
    /// taking a flag away (undoing loss marks, forgetting SACKs) moves it back, to 0.
    flagged_below: u64,
    /// SACKed ranges already applied (sorted, merged), so a SACK block repeated on every
    /// ACK costs only a lookup, not a walk over its segments.
    sacked_ranges: Vec<(u64, u64)>,
}

impl Scoreboard {
    /// Record a new transmission.
    pub fn push(&mut self, mut seg: SentSeg) {
        debug_assert!(self.segs.back().is_none_or(|b| b.end <= seg.start));
        self.tx_count += 1;
        seg.set_order(self.tx_count);
        self.segs.push_back(seg);
    }

    /// `self.segs.partition_point(below)` for a predicate that holds for the segments
    /// below offset `x` and not from there on. The segments are contiguous and nearly all
    /// of one size (the MSS), so the index is first worked out from `x`'s distance to the
    /// end of the first one and checked on its two neighbours; only a wrong guess (a board
    /// of mixed sizes) is searched for.
    #[inline]
    fn seg_index(&self, x: u64, below: impl Fn(&SentSeg) -> bool) -> usize {
        let n = self.segs.len();
        if n >= 2 {
            let end0 = self.segs[0].end;
            let w = self.segs[1].len().max(1);
            let g = if x < end0 {
                0
            } else {
                ((x - end0) / w).saturating_add(1).min(n as u64) as usize
            };
            if (g == 0 || below(&self.segs[g - 1])) && (g == n || !below(&self.segs[g])) {
                return g;
            }
        }
        self.segs.partition_point(below)
    }

    /// Outstanding segments.
    pub fn len(&self) -> usize {
        self.segs.len()
    }

    /// Whether nothing is outstanding.
    pub fn is_empty(&self) -> bool {
        self.segs.is_empty()
    }

    /// A segment by index.
    pub fn get(&self, i: usize) -> &SentSeg {
        &self.segs[i]
    }

    fn forget(&mut self, s: &SentSeg) {
        let l = s.len();
        if s.has(SACKED) {
            self.sacked -= l;
            self.sacked_segs -= 1;
        } else {
            if s.has(LOST) {
                self.lost -= l;
            }
            if s.has(RETX_OUT) {
                self.retx_out -= l;
            }
        }
    }

    /// The highest SACKed offset, or 0 while nothing is SACKed (Linux
    /// `tcp_highest_sack_seq`, which then answers `snd_una`): a segment delivered below it
    /// that was never retransmitted filled a hole without a retransmission, reordering.
    pub fn fack(&self) -> u64 {
        if self.sacked_segs > 0 {
            self.high_sacked
        } else {
            0
        }
    }

    /// Remove everything below `ack`. `prior_fack` is [`Scoreboard::fack`] from before
    /// this ACK's SACK blocks were applied (Linux `prior_fack` in `tcp_ack`): a segment the
    /// receiver held its ACK for and acknowledged together with the first SACK after a
    /// loss lies below the new highest SACKed offset, but it was never a hole.
    pub fn ack_to(&mut self, ack: u64, prior_fack: u64) -> Acked {
        let mut r = Acked::default();
        let drop_n = self.sacked_ranges.partition_point(|x| x.1 <= ack);
        if drop_n > 0 {
            self.sacked_ranges.drain(..drop_n);
        }
        while let Some(front) = self.segs.front().copied() {
            if front.end <= ack {
                self.segs.pop_front();
                self.forget(&front);
                if !front.has(SACKED) {
                    self.delivered += 1;
                    if self.track {
                        if !front.has(RETRANS) && front.start < prior_fack {
                            self.reord_seen = true;
                        }
                        self.deliveries.push(Delivery {
                            sent_at: front.sent_at,
                            order: front.order(),
                            end: front.end,
                            retrans: front.has(RETRANS),
                        });
                    }
                }
                r.bytes += front.len();
                r.any_retransmitted |= front.has(RETRANS);
                r.fin |= front.has(FIN);
                if !front.has(RETRANS | SACKED) && r.first_clean_sent.is_none() {
                    r.first_clean_sent = Some(front.sent_at);
                }
            } else if front.start < ack {
                // Partial acknowledgment of a segment: trim it.
                let f = self.segs.front_mut().expect("front exists");
                let cut = ack - f.start;
                if f.has(SACKED) {
                    self.sacked -= cut;
                } else {
                    if f.has(LOST) {
                        self.lost -= cut;
                    }
                    if f.has(RETX_OUT) {
                        self.retx_out -= cut;
                    }
                }
                f.start = ack;
                r.any_retransmitted |= f.has(RETRANS);
                r.bytes += cut;
                break;
            } else {
                break;
            }
        }
        self.give_back();
        r
    }

    /// Return most of the record's memory once the window has shrunk to a quarter of
    /// its largest size (a slow start's peak would otherwise stay allocated for the whole
    /// connection: with ten thousand connections that is the largest part of the
    /// simulator's memory). Halving at a quarter keeps the cost amortised constant.
    #[inline]
    fn give_back(&mut self) {
        let (len, cap) = (self.segs.len(), self.segs.capacity());
        if cap > KEEP_SEGS && len * 4 < cap {
            self.segs.shrink_to((len * 2).max(KEEP_SEGS));
        }
    }

    /// Mark segments fully inside [left, right) as SACKed. Returns bytes newly SACKed.
    pub fn sack(&mut self, left: u64, right: u64) -> u64 {
        if right <= left {
            return 0;
        }
        // The parts of [left, right) not already applied.
        let mut pieces: [(u64, u64); 8] = [(0, 0); 8];
        let mut n = 0;
        let mut cur = left;
        let first = self.sacked_ranges.partition_point(|r| r.1 < left);
        for &(a, b) in &self.sacked_ranges[first..] {
            if a >= right {
                break;
            }
            if a > cur && n < pieces.len() {
                pieces[n] = (cur, a.min(right));
                n += 1;
            }
            cur = cur.max(b);
            if cur >= right {
                break;
            }
        }
        if cur < right && n < pieces.len() {
            pieces[n] = (cur, right);
            n += 1;
        }
        let mut newly = 0;
        for &(l, r) in &pieces[..n] {
            newly += self.mark_sacked(l, r);
        }
        self.insert_range(first, left, right);
        if newly > 0 {
            self.high_sacked = self.high_sacked.max(right);
        }
        newly
    }

    fn mark_sacked(&mut self, left: u64, right: u64) -> u64 {
        let mut newly = 0;
        let fack = self.fack();
        let first = self.seg_index(left, |s| s.end <= left);
        for i in first..self.segs.len() {
            let s = self.segs[i];
            if s.start >= right {
                break;
            }
            if s.start >= left && s.end <= right && !s.has(SACKED) {
                let l = s.len();
                if s.has(LOST) {
                    self.lost -= l;
                }
                if s.has(RETX_OUT) {
                    self.retx_out -= l;
                }
                self.segs[i].set_flags((s.flags() | SACKED) & !(LOST | RETX_OUT));
                self.sacked += l;
                self.sacked_segs += 1;
                self.delivered += 1;
                newly += l;
                if self.track {
                    if !s.has(RETRANS) && s.start < fack {
                        self.reord_seen = true;
                    }
                    self.deliveries.push(Delivery {
                        sent_at: s.sent_at,
                        order: s.order(),
                        end: s.end,
                        retrans: s.has(RETRANS),
                    });
                }
            }
        }
        newly
    }

    /// Add [left, right) to the applied ranges; `i`: the first range that ends at or
    /// after `left`.
    fn insert_range(&mut self, i: usize, left: u64, right: u64) {
        let v = &mut self.sacked_ranges;
        let mut j = i;
        let (mut l, mut r) = (left, right);
        while j < v.len() && v[j].0 <= r {
            l = l.min(v[j].0);
            r = r.max(v[j].1);
            j += 1;
        }
        // Usually one range grows (or a repeated block changes nothing) in place.
        match j - i {
            0 => v.insert(i, (l, r)),
            1 => v[i] = (l, r),
            _ => {
                v[i] = (l, r);
                v.drain(i + 1..j);
            }
        }
    }

    /// RFC 6675 IsLost over the whole board: mark as lost every un-SACKed, not
    /// retransmitted segment below the point where `dupthresh` SACKed segments, or more than
    /// `(dupthresh - 1) * mss` SACKed bytes, lie above it. Returns bytes newly marked.
    pub fn mark_lost(&mut self, dupthresh: u32, mss: u64) -> u64 {
        if self.sacked == 0 {
            return 0;
        }
        let mut count = 0u32;
        let mut bytes = 0u64;
        let mut boundary = None;
        // Every SACKed segment ends at or below the highest SACKed offset: the walk down
        // to the `dupthresh`-th SACKed segment starts there, not at the end of the board.
        let hs = self.high_sacked;
        let top = self.seg_index(hs, |s| s.start < hs);
        for i in (0..top).rev() {
            let s = &self.segs[i];
            if s.has(SACKED) {
                count += 1;
                bytes += s.len();
                if count >= dupthresh || bytes > (dupthresh as u64 - 1) * mss {
                    boundary = Some(i);
                    break;
                }
            }
        }
        let Some(b) = boundary else { return 0 };
        let mut newly = 0;
        // Segments below the previous boundary were handled by an earlier call.
        let ls = self.lost_scanned;
        let from = self.seg_index(ls, |s| s.end <= ls);
        if from < b {
            self.lost_scanned = self.segs[b - 1].end;
        }
        let mut first_marked = None;
        for i in from..b {
            let s = self.segs[i];
            if !s.has(SACKED | LOST | RETX_OUT) {
                self.lost_marks += 1;
                self.segs[i].add_flags(LOST);
                self.lost += s.len();
                newly += s.len();
                first_marked = first_marked.or(Some(s.start));
            }
        }
        // Only a segment marked here became a retransmission candidate: the search for
        // the next one need not start below it (most calls in a recovery mark nothing,
        // and a hint lowered to the boundary's old position would send the next search
        // over every segment sent since).
        if let Some(start) = first_marked {
            self.retx_hint = self.retx_hint.min(start);
        }
        newly
    }

    /// Whether the first outstanding segment is presumed lost by the SACK rule.
    pub fn head_is_lost(&self, dupthresh: u32, mss: u64) -> bool {
        let Some(head) = self.segs.front() else {
            return false;
        };
        if head.has(SACKED) {
            return false;
        }
        // Every SACKed segment lies above the head: the counters say it without a walk.
        self.sacked_segs >= dupthresh as u64 || self.sacked > (dupthresh as u64 - 1) * mss
    }

    /// Mark the first outstanding segment lost (fast retransmit / NewReno partial ACK).
    pub fn mark_head_lost(&mut self) {
        if let Some(s) = self.segs.front().copied() {
            self.retx_hint = self.retx_hint.min(s.start);
            if !s.has(SACKED | LOST) {
                self.lost += s.len();
                self.lost_marks += 1;
                let f = self.segs.front_mut().expect("front exists");
                f.add_flags(LOST);
                if f.has(RETX_OUT) {
                    // Its retransmission is presumed lost too: allow another.
                    f.clear_flags(RETX_OUT);
                    self.retx_out -= s.len();
                }
            }
        }
    }

    /// After a retransmission timeout: everything not SACKed is lost and no retransmission
    /// is in flight any more.
    pub fn mark_all_lost(&mut self) {
        self.retx_out = 0;
        self.lost = 0;
        self.retx_hint = 0;
        self.retx_top = 0;
        self.lost_scanned = self.segs.back().map_or(0, |s| s.end);
        for s in self.segs.iter_mut() {
            if !s.has(SACKED) {
                if !s.has(LOST) {
                    self.lost_marks += 1;
                }
                s.set_flags((s.flags() | LOST) & !RETX_OUT);
                self.lost += s.len();
            }
        }
    }

    /// A timeout was spurious: nothing is presumed lost any more (retransmissions already
    /// sent stay in flight), and the SACK loss rule looks at every segment again (the
    /// timeout had marked them all as considered).
    pub fn unmark_lost(&mut self) {
        self.lost = 0;
        self.lost_scanned = 0;
        self.flagged_below = 0;
        for s in self.segs.iter_mut() {
            s.clear_flags(LOST);
        }
    }

    /// The RTT sample an ACK that removed `a` gives at `now` (Karn's rule, RFC 6298 §3):
    /// `None` when any segment it acknowledged had been retransmitted, since the ACK may
    /// answer either transmission.
    pub fn karn_sample(a: &Acked, now: Instant) -> Option<asymlink_core::time::Duration> {
        if a.any_retransmitted {
            return None;
        }
        a.first_clean_sent.map(|t| now - t)
    }

    /// The first segment to retransmit: lost, not SACKed, no retransmission in flight.
    pub fn next_retransmit(&self) -> Option<usize> {
        if self.lost == 0 {
            return None;
        }
        let h = self.retx_hint;
        let from = self.seg_index(h, |s| s.end <= h);
        self.segs
            .range(from..)
            .position(|s| s.has(LOST) && !s.has(SACKED | RETX_OUT))
            .map(|i| i + from)
    }

    /// RFC 6675 NextSeg rule (3): the first segment above the highest retransmission in
    /// flight (HighRxt) and wholly below the highest SACKed offset (HighSACK) that is not
    /// SACKed, not presumed lost and not being retransmitted.
    ///
    /// A sender in recovery asks on every ACK while it can send nothing else, and after a
    /// slow start's overshoot the board holds thousands of segments, nearly all SACKed or
    /// lost. Both walks remember where they ended: the search for HighRxt lowers
    /// `retx_top` to the retransmission it finds (nothing above it is in flight), and the
    /// search for a candidate skips the segments an earlier search found flagged
    /// (`flagged_below`).
    pub fn next_below_high_sacked(&mut self) -> Option<usize> {
        let from = if self.retx_out == 0 {
            // No segment is being retransmitted (a SACKed one never is).
            self.retx_top = 0;
            0
        } else {
            let rt = self.retx_top;
            let top = self.seg_index(rt, |s| s.end <= rt);
            match self.segs.range(..top).rposition(|s| s.has(RETX_OUT)) {
                Some(h) => {
                    self.retx_top = self.segs[h].end;
                    h + 1
                }
                None => {
                    self.retx_top = 0;
                    0
                }
            }
        };
        let fb = self.flagged_below;
        let known = self.seg_index(fb, |s| s.end <= fb);
        // The first segment not flagged from `known` on (below `from` it is no candidate,
        // but the segments before it are all flagged), and the first at or above `from`.
        let (mut unflagged, mut found, mut end) = (None, None, known);
        for (k, s) in self.segs.range(known..).enumerate() {
            if s.end > self.high_sacked {
                break;
            }
            end = known + k + 1;
            if !s.has(SACKED | LOST | RETX_OUT) {
                unflagged.get_or_insert(known + k);
                if known + k >= from {
                    found = Some(known + k);
                    break;
                }
            }
        }
        let flagged_to = unflagged.unwrap_or(end);
        if flagged_to > known {
            self.flagged_below = self.segs[flagged_to - 1].end;
        }
        found
    }

    /// The segment holding the highest offset not SACKed (RFC 6675 NextSeg rule (4), the
    /// rescue retransmission).
    pub fn last_unsacked(&self) -> Option<usize> {
        self.segs.iter().rposition(|s| !s.has(SACKED))
    }

    /// [`Scoreboard::next_retransmit`], remembering where the search ended so that the
    /// next one starts there: at the segment found (a sender the congestion window holds
    /// back asks again on every ACK), or after the last segment when none was (any new
    /// candidate lowers the hint again).
    pub fn next_retransmit_mut(&mut self) -> Option<usize> {
        if self.lost == 0 {
            // Nothing to search (the common case): the hint stays where it is, which only
            // bounds a later search and never changes its answer.
            return None;
        }
        let r = self.next_retransmit();
        self.retx_hint = match r {
            Some(i) => self.retx_hint.max(self.segs[i].start),
            None => self.segs.back().map_or(0, |s| s.end),
        };
        r
    }

    /// Record the retransmission of segment `i` at `now`.
    pub fn retransmitted(&mut self, i: usize, now: Instant) {
        let s = &mut self.segs[i];
        self.retx_hint = self.retx_hint.max(s.start);
        self.retx_top = self.retx_top.max(s.end);
        if !s.has(RETX_OUT) && !s.has(SACKED) {
            self.retx_out += s.end - s.start;
        }
        s.add_flags(RETRANS | RETX_OUT);
        s.sent_at = now;
        self.tx_count += 1;
        s.set_order(self.tx_count);
    }

    /// RFC 6675 pipe: outstanding bytes not SACKed and not lost, plus retransmissions in
    /// flight.
    pub fn pipe(&self, outstanding: u64) -> u64 {
        outstanding
            .saturating_sub(self.sacked)
            .saturating_sub(self.lost)
            + self.retx_out
    }

    /// Record every delivery for [`Scoreboard::take_deliveries`] (RACK).
    pub fn track_deliveries(&mut self, on: bool) {
        self.track = on;
    }

    /// The deliveries recorded since the last call, oldest processed first.
    pub fn take_deliveries(&mut self, out: &mut Vec<Delivery>) {
        out.clear();
        out.append(&mut self.deliveries);
    }

    /// Segments delivered so far (SACKed, or acknowledged without having been SACKed).
    pub fn delivered_segs(&self) -> u64 {
        self.delivered
    }

    /// Segments ever marked lost (Linux `tp->lost`).
    pub fn lost_marks(&self) -> u64 {
        self.lost_marks
    }

    /// Segments SACKed.
    pub fn sacked_segs(&self) -> u64 {
        self.sacked_segs
    }

    /// Transmissions so far: the order the next one gets.
    pub fn tx_count(&self) -> u64 {
        self.tx_count
    }

    /// Whether a delivery showed the path reordering (tracked deliveries only).
    pub fn reord_seen(&self) -> bool {
        self.reord_seen
    }

    /// Bytes of retransmissions in flight.
    pub fn retx_out_bytes(&self) -> u64 {
        self.retx_out
    }

    /// Whether the first outstanding segment was ever retransmitted.
    pub fn head_retransmitted(&self) -> bool {
        self.segs.front().is_some_and(|s| s.has(RETRANS))
    }

    /// RACK loss detection (RFC 8985 §6.2 step 5, Linux `tcp_rack_detect_loss`): every
    /// segment not SACKed (and not already lost and waiting for its retransmission) that
    /// was sent before the most recently sent delivered one is lost once
    /// `rack.rtt + reo_wnd` has passed since it was sent; the others report how long they
    /// still have. Segments are kept in sequence order; those never retransmitted are also
    /// in send order, so the scan stops at the first of them sent after RACK's segment.
    //= https://www.rfc-editor.org/rfc/rfc8985#section-6.2
    //# If Segment.xmit_ts + RACK.rtt + RACK.reo_wnd - Now() <= 0, then the
    //# segment is marked as lost
    pub fn rack_detect_loss(&mut self, rack: &Rack, now: Instant, reo_wnd: Duration) -> RackLoss {
        let mut r = RackLoss::default();
        let Some(rx) = rack.xmit else {
            return r;
        };
        for i in 0..self.segs.len() {
            let s = self.segs[i];
            if s.has(SACKED) || (s.has(LOST) && !s.has(RETX_OUT)) {
                continue;
            }
            if s.order() >= rx {
                if s.has(RETRANS) {
                    continue;
                }
                break;
            }
            let deadline = s.sent_at + rack.rtt + reo_wnd;
            if deadline <= now {
                let l = s.len();
                if s.has(RETX_OUT) {
                    self.retx_out -= l;
                    r.lost_retrans = true;
                }
                if !s.has(LOST) {
                    self.lost += l;
                    self.lost_marks += 1;
                }
                self.segs[i].set_flags((s.flags() | LOST) & !RETX_OUT);
                self.retx_hint = self.retx_hint.min(s.start);
                r.newly_lost += 1;
            } else {
                let left = deadline - now;
                r.wait = Some(r.wait.map_or(left, |w: Duration| w.max(left)));
            }
        }
        r
    }

    /// Index of the last outstanding segment (the tail-loss probe's retransmission).
    pub fn last(&self) -> Option<usize> {
        self.segs.len().checked_sub(1)
    }

    /// Bytes SACKed.
    pub fn sacked_bytes(&self) -> u64 {
        self.sacked
    }

    /// Bytes presumed lost and not yet retransmitted-in-flight.
    pub fn lost_bytes(&self) -> u64 {
        self.lost
    }

    /// Highest SACKed offset.
    pub fn high_sacked(&self) -> u64 {
        self.high_sacked
    }

    /// Clear SACK state (the receiver reneged or recovery restarted from scratch).
    pub fn clear_sacks(&mut self) {
        for s in self.segs.iter_mut() {
            s.clear_flags(SACKED);
        }
        self.flagged_below = 0;
        self.sacked = 0;
        self.sacked_segs = 0;
        self.high_sacked = 0;
        self.lost_scanned = 0;
        self.sacked_ranges.clear();
    }

    /// Check the byte counters against the flags (tests).
    #[cfg(test)]
    pub fn check(&self) {
        let mut sacked = 0;
        let mut lost = 0;
        let mut retx = 0;
        let sacked_segs = self.segs.iter().filter(|s| s.has(SACKED)).count() as u64;
        assert_eq!(sacked_segs, self.sacked_segs);
        for s in &self.segs {
            if s.has(SACKED) {
                sacked += s.len();
            } else {
                if s.has(LOST) {
                    lost += s.len();
                }
                if s.has(RETX_OUT) {
                    retx += s.len();
                }
            }
        }
        assert_eq!(
            (sacked, lost, retx),
            (self.sacked, self.lost, self.retx_out)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn board(n: u64) -> Scoreboard {
        let mut b = Scoreboard::default();
        for i in 0..n {
            b.push(SentSeg::new(
                1 + i * 100,
                1 + (i + 1) * 100,
                Instant::from_millis(i),
                0,
            ));
        }
        b
    }

    /// The board's former walks over every segment, kept as the reference for the
    /// searches that now start from the counters and offsets.
    fn walk_head_is_lost(b: &Scoreboard, dupthresh: u32, mss: u64) -> bool {
        let Some(head) = b.segs.front() else {
            return false;
        };
        if head.has(SACKED) {
            return false;
        }
        let (mut count, mut bytes) = (0u32, 0u64);
        for s in b.segs.iter().skip(1) {
            if s.has(SACKED) {
                count += 1;
                bytes += s.len();
                if count >= dupthresh || bytes > (dupthresh as u64 - 1) * mss {
                    return true;
                }
            }
        }
        false
    }

    fn walk_next_below_high_sacked(b: &Scoreboard) -> Option<usize> {
        let from = b
            .segs
            .iter()
            .rposition(|s| s.has(RETX_OUT))
            .map_or(0, |i| i + 1);
        b.segs
            .range(from..)
            .take_while(|s| s.end <= b.high_sacked)
            .position(|s| !s.has(SACKED | LOST | RETX_OUT))
            .map(|i| i + from)
    }

    fn walk_mark_lost(b: &mut Scoreboard, dupthresh: u32, mss: u64) -> u64 {
        if b.sacked == 0 {
            return 0;
        }
        let (mut count, mut bytes, mut boundary) = (0u32, 0u64, None);
        for i in (0..b.segs.len()).rev() {
            let s = &b.segs[i];
            if s.has(SACKED) {
                count += 1;
                bytes += s.len();
                if count >= dupthresh || bytes > (dupthresh as u64 - 1) * mss {
                    boundary = Some(i);
                    break;
                }
            }
        }
        let Some(bd) = boundary else { return 0 };
        let mut newly = 0;
        let from = b.segs.partition_point(|s| s.end <= b.lost_scanned);
        if from < bd {
            b.lost_scanned = b.segs[bd - 1].end;
        }
        for i in from..bd {
            let s = b.segs[i];
            if !s.has(SACKED | LOST | RETX_OUT) {
                b.retx_hint = b.retx_hint.min(s.start);
                b.lost_marks += 1;
                b.segs[i].add_flags(LOST);
                b.lost += s.len();
                newly += s.len();
            }
        }
        newly
    }

    #[test]
    fn two_segment_records_fit_a_cache_line() {
        assert_eq!(std::mem::size_of::<SentSeg>(), 32);
        let mut s = SentSeg::new(1, 2, Instant::from_millis(3), FIN);
        s.set_order(ORDER_MASK);
        s.add_flags(SACKED | LOST);
        s.clear_flags(LOST);
        assert_eq!((s.flags(), s.order()), (FIN | SACKED, ORDER_MASK));
        s.set_flags(RETX_OUT);
        s.set_order(7);
        assert_eq!((s.flags(), s.order()), (RETX_OUT, 7));
    }

    #[test]
    fn guessed_index_is_the_partition_point() {
        // Boards of one size (the guess holds), of mixed sizes, with a trimmed head and a
        // short tail (it is searched for); offsets on and between boundaries, and beyond.
        let mut rng = asymlink_core::rand::Rng::new(3);
        for case in 0..200 {
            let mut b = Scoreboard::default();
            let mut next = 1 + rng.below(1000);
            let n = rng.below(40);
            for i in 0..n {
                let len = match case % 3 {
                    0 => 100,
                    1 => 50 + rng.below(3) * 25,
                    _ if i + 1 == n => 1 + rng.below(99),
                    _ => 100,
                };
                b.push(SentSeg::new(next, next + len, Instant::ZERO, 0));
                next += len;
            }
            if case % 4 == 3 && n > 0 {
                let una = b.get(0).start + rng.below(b.get(0).len());
                b.ack_to(una, 0);
            }
            for _ in 0..50 {
                let x = rng.below(next + 300);
                assert_eq!(
                    b.seg_index(x, |s| s.end <= x),
                    b.segs.partition_point(|s| s.end <= x),
                    "case {case} x {x}"
                );
                assert_eq!(
                    b.seg_index(x, |s| s.start < x),
                    b.segs.partition_point(|s| s.start < x),
                    "case {case} x {x}"
                );
            }
        }
    }

    #[test]
    fn searches_agree_with_walks_over_the_whole_board() {
        // Random sends, SACKs, cumulative ACKs, loss marks, retransmissions and timeouts;
        // after each step the searches must answer as the walks over every segment do.
        for seed in 0..40 {
            let mut rng = asymlink_core::rand::Rng::new(seed);
            let mut b = Scoreboard::default();
            let (mut next, mut una, mut t) = (1u64, 1u64, 0u64);
            for _ in 0..600 {
                t += 1;
                let now = Instant::from_millis(t);
                match rng.below(16) {
                    0..=4 => {
                        let len = 50 + rng.below(3) * 25;
                        b.push(SentSeg::new(next, next + len, now, 0));
                        next += len;
                    }
                    5..=7 if next > una => {
                        let l = una + rng.below(next - una);
                        let r = (l + 1 + rng.below(300)).min(next);
                        b.sack(l, r);
                    }
                    8 if next > una => {
                        let prior = b.fack();
                        una += rng.below((next - una).min(400) + 1);
                        b.ack_to(una, prior);
                    }
                    9 | 10 => {
                        let mut w = b.clone();
                        let got = b.mark_lost(3, 100);
                        assert_eq!(got, walk_mark_lost(&mut w, 3, 100), "seed {seed}");
                        assert_eq!(format!("{b:?}"), format!("{w:?}"), "seed {seed}");
                    }
                    11 => {
                        // Sometimes the congestion window holds the retransmission back.
                        if let Some(i) = b.next_retransmit_mut().filter(|_| rng.below(2) == 0) {
                            b.retransmitted(i, now);
                        }
                    }
                    // The sender's last resort (RFC 6675 NextSeg rules 3 and 4) once
                    // nothing marked lost waits.
                    12 if b.next_retransmit_mut().is_none() => {
                        if let Some(i) = b.next_below_high_sacked() {
                            b.retransmitted(i, now);
                        } else if let Some(i) = b.last_unsacked() {
                            b.retransmitted(i, now);
                        }
                    }
                    13 => b.mark_head_lost(),
                    14 => match rng.below(8) {
                        0 => b.mark_all_lost(),
                        1 => b.unmark_lost(),
                        2 => b.clear_sacks(),
                        _ => {}
                    },
                    _ => {}
                }
                b.check();
                for dupthresh in [1, 3, 5] {
                    assert_eq!(
                        b.head_is_lost(dupthresh, 100),
                        walk_head_is_lost(&b, dupthresh, 100),
                        "seed {seed}"
                    );
                }
                assert_eq!(
                    b.next_below_high_sacked(),
                    walk_next_below_high_sacked(&b),
                    "seed {seed}"
                );
                let first_lost = (0..b.len()).find(|&i| {
                    let s = b.get(i);
                    s.has(LOST) && !s.has(SACKED | RETX_OUT)
                });
                assert_eq!(b.next_retransmit(), first_lost, "seed {seed}");
            }
        }
    }

    /// The applied SACK ranges stay the sorted, merged union of every block applied (a
    /// map of units says what that union is).
    #[test]
    fn applied_ranges_are_the_union_of_the_blocks() {
        let mut rng = asymlink_core::rand::Rng::new(7);
        for _ in 0..50 {
            let mut b = Scoreboard::default();
            let mut units = [false; 200];
            for _ in 0..60 {
                let l = rng.below(190);
                let r = l + 1 + rng.below(10);
                b.sack(l * 10, r * 10);
                units[l as usize..r as usize]
                    .iter_mut()
                    .for_each(|u| *u = true);
                let mut want = Vec::new();
                let mut u = 0;
                while u < units.len() {
                    if units[u] {
                        let s = u;
                        while u < units.len() && units[u] {
                            u += 1;
                        }
                        want.push((s as u64 * 10, u as u64 * 10));
                    }
                    u += 1;
                }
                assert_eq!(b.sacked_ranges, want);
            }
        }
    }

    #[test]
    fn sack_and_islost() {
        let mut b = board(10);
        let out = 1000;
        assert_eq!(b.pipe(out), 1000);
        // segment 0 lost; 1..=3 SACKed
        assert_eq!(b.sack(101, 401), 300);
        assert!(b.head_is_lost(3, 100));
        assert_eq!(b.mark_lost(3, 100), 100);
        assert_eq!(b.pipe(out), 1000 - 300 - 100);
        assert_eq!(b.next_retransmit(), Some(0));
        b.retransmitted(0, Instant::from_millis(20));
        assert_eq!(b.pipe(out), 700);
        assert_eq!(b.next_retransmit(), None);
        b.check();
        let a = b.ack_to(401, 0);
        assert_eq!(a.bytes, 400);
        assert!(a.any_retransmitted);
        assert_eq!(b.pipe(600), 600);
        b.check();
    }

    #[test]
    fn rtt_sample_only_from_clean_segments() {
        let mut b = board(3);
        let a = b.ack_to(201, 0);
        // The oldest segment acknowledged starts the sample.
        assert_eq!(a.first_clean_sent, Some(Instant::from_millis(0)));
        b.mark_all_lost();
        b.retransmitted(0, Instant::from_millis(9));
        let a = b.ack_to(301, 0);
        assert_eq!(a.first_clean_sent, None);
        b.check();
    }

    #[test]
    fn karn_no_sample_when_an_acked_segment_was_retransmitted() {
        // Segments 0..5; segment 1 lost and retransmitted at 50 ms; 2..4 SACKed.
        let mut b = board(5);
        b.ack_to(101, 0);
        b.sack(201, 501);
        b.mark_lost(3, 100);
        assert_eq!(b.next_retransmit(), Some(0));
        assert_eq!(b.get(0).start, 101);
        b.retransmitted(0, Instant::from_millis(50));
        // One ACK covers the retransmission and the SACKed segments: no sequence sample
        // (neither from the retransmission nor from segments SACKed long ago).
        let a = b.ack_to(501, 0);
        assert!(a.any_retransmitted);
        assert_eq!(Scoreboard::karn_sample(&a, Instant::from_millis(150)), None);
        // A clean ACK gives the sample from its oldest segment.
        let mut c = board(3);
        let a = c.ack_to(301, 0);
        assert_eq!(
            Scoreboard::karn_sample(&a, Instant::from_millis(100)),
            Some(asymlink_core::time::Duration::from_millis(100))
        );
        b.check();
    }

    #[test]
    fn partial_ack_trims() {
        let mut b = board(2);
        b.mark_all_lost();
        let a = b.ack_to(51, 0);
        assert_eq!(a.bytes, 50);
        assert_eq!(b.lost_bytes(), 150);
        b.check();
    }

    #[test]
    fn rack_marks_lost_once_the_reordering_window_has_passed() {
        // Segments sent at 0, 1, 2, 3 ms; segment 2 SACKed at 100 ms (RTT 98 ms).
        let mut b = board(4);
        b.track_deliveries(true);
        let mut rack = Rack::default();
        b.sack(201, 301);
        let mut d = Vec::new();
        b.take_deliveries(&mut d);
        let min_rtt = Some(Duration::from_millis(90));
        for x in &d {
            rack.advance(x, Instant::from_millis(100), min_rtt);
        }
        assert_eq!(rack.rtt, Duration::from_millis(98));
        let reo = Duration::from_millis(10);
        // Segments 0 and 1 were sent before it: lost at sent + 98 + 10 ms; segment 3 was
        // sent after it and is not considered.
        let r = b.rack_detect_loss(&rack, Instant::from_millis(100), reo);
        assert_eq!(r.newly_lost, 0);
        assert_eq!(r.wait, Some(Duration::from_millis(9)));
        let r = b.rack_detect_loss(&rack, Instant::from_millis(108), reo);
        assert_eq!((r.newly_lost, r.wait), (1, Some(Duration::from_millis(1))));
        assert_eq!(b.next_retransmit(), Some(0));
        let r = b.rack_detect_loss(&rack, Instant::from_millis(109), reo);
        assert_eq!((r.newly_lost, r.wait), (1, None));
        assert_eq!(b.lost_bytes(), 200);
        // A retransmission of segment 0, lost again: found once a later send is delivered.
        b.retransmitted(0, Instant::from_millis(110));
        b.sack(301, 401);
        b.take_deliveries(&mut d);
        // Segment 3's delivery at 200 ms: sent before the retransmission, it does not
        // make the retransmission lost.
        for x in &d {
            rack.advance(x, Instant::from_millis(200), min_rtt);
        }
        let r = b.rack_detect_loss(&rack, Instant::from_millis(400), reo);
        assert!(!r.lost_retrans);
        b.check();
    }
}
