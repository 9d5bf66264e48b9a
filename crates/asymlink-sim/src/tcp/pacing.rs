//! Sender pacing, as Linux's internal TCP pacing does it (`tcp_update_pacing_rate`,
//! `tcp_pacing_check`, `tcp_update_skb_after_send`, `tcp_tso_autosize`).
//!
//! Principles. Linux keeps an earliest departure time for the next data packet
//! (`tcp_wstamp_ns`); each data packet sent pushes it on by its payload at the pacing
//! rate. The output path holds data while that time lies in the future and arms a timer
//! for it. What leaves at once is one TSO/GSO packet, sized by `tcp_tso_autosize` to about
//! a millisecond of data at the pacing rate (at least two segments): so a paced sender
//! emits a burst, then waits. The simulator does the same with individual segments: a
//! burst of [`Pacer::burst_segs`] segments leaves together, the departure time moves on
//! by their sum, and the connection sleeps until then — one timer event per burst, not
//! per segment.
//!
//! Who paces. Linux paces in TCP only when a socket asks for it (`sk_pacing_status`
//! `SK_PACING_NEEDED`): BBR does, and so does `SO_MAX_PACING_RATE` (`max_pacing_rate`).
//! CUBIC over the default qdisc (fq_codel, pfifo_fast) is not paced; over `fq` it is
//! paced by the qdisc at the same rate, which the `pacing` key stands for.
//!
//! All arithmetic is integer: rates in bytes per second, time in nanoseconds.

use asymlink_core::time::{Duration, Instant};

/// Linux `sysctl_tcp_pacing_ss_ratio`: the pacing rate in slow start, percent of
/// cwnd·MSS/SRTT.
pub const PACING_SS_RATIO: u64 = 200;
/// Linux `sysctl_tcp_pacing_ca_ratio`: the same in congestion avoidance.
pub const PACING_CA_RATIO: u64 = 120;
/// Linux `sk_pacing_shift` (10): a burst is about 1/1024 s of data at the pacing rate.
const PACING_SHIFT: u32 = 10;
/// Linux `sysctl_tcp_tso_rtt_log` (9): low-RTT flows may build larger bursts.
const TSO_RTT_LOG: u32 = 9;
/// Largest GSO packet (`GSO_LEGACY_MAX_SIZE`).
const GSO_MAX_SIZE: u64 = 65_536;
/// Linux `sysctl_tcp_min_tso_segs`.
pub const MIN_TSO_SEGS: u64 = 2;
/// fq and Linux's internal pacing leave the first 10 data segments unpaced.
const UNPACED_SEGS: u64 = 10;

/// One connection's pacing state.
#[derive(Clone, Debug)]
pub struct Pacer {
    /// Pacing rate, bytes per second; `None`: not known yet (Linux's `~0UL`, unpaced).
    rate: Option<u64>,
    /// `SO_MAX_PACING_RATE`, bytes per second.
    max_rate: Option<u64>,
    /// Earliest departure time of the next data burst (Linux `tcp_wstamp_ns`).
    wstamp: Instant,
    /// Segments the current burst may still release.
    burst_left: u64,
    /// What is left of the current burst's lateness credit (ns): Linux credits a late
    /// TSO packet once, up to half of its whole length.
    credit_ns: u64,
    /// Data segments sent so far (Linux `data_segs_out`).
    data_segs_out: u64,
}

impl Pacer {
    /// A pacer capped at `max_rate` bytes per second (if any).
    pub fn new(max_rate: Option<u64>) -> Pacer {
        Pacer {
            rate: max_rate,
            max_rate,
            wstamp: Instant::ZERO,
            burst_left: 0,
            credit_ns: 0,
            data_segs_out: 0,
        }
    }

    /// The pacing rate, bytes per second (`None`: unlimited).
    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    /// Set the pacing rate (bytes per second), capped by the maximum.
    pub fn set_rate(&mut self, rate: u64) {
        let rate = rate.max(1);
        self.rate = Some(self.max_rate.map_or(rate, |m| rate.min(m)));
    }

    /// Linux `tcp_update_pacing_rate`: `ratio` × MSS × max(cwnd, packets out) / SRTT, with
    /// 200 % while cwnd is below half of ssthresh (slow start) and 120 % after. Without
    /// an RTT sample the rate stays unlimited (or at the maximum).
    pub fn update_from_cwnd(
        &mut self,
        mss: u64,
        cwnd: u64,
        packets_out: u64,
        ssthresh: u64,
        srtt: Option<Duration>,
    ) {
        match cwnd_rate(mss, cwnd, packets_out, ssthresh, srtt) {
            Some(r) => self.set_rate(r),
            None => self.rate = self.max_rate,
        }
    }

    /// Linux `tcp_tso_autosize`: the segments one burst may carry at the current rate —
    /// about 1 ms of data (plus up to 64 KB more for flows whose minimum RTT is below
    /// ~16 ms), at most 64 KB, at least `min_segs` (2; BBR asks for 1 below 1.2 Mbit/s).
    pub fn burst_segs(&self, mss: u64, min_rtt: Option<Duration>, min_segs: u64) -> u64 {
        match self.rate {
            None => u64::MAX,
            rate => tso_autosize(rate, mss, min_rtt, min_segs),
        }
    }

    /// Linux `tcp_pacing_check`: may data leave now? `burst` segments (see
    /// [`Pacer::burst_segs`]) may leave once the departure time is reached. Returns the
    /// instant to wait for otherwise.
    pub fn check(&mut self, now: Instant, burst: u64) -> Option<Instant> {
        if self.burst_left > 0 {
            return None;
        }
        if self.wstamp > now {
            return Some(self.wstamp);
        }
        self.burst_left = burst.max(1);
        None
    }

    /// The output path stopped (window, data or pacing): the burst is over; what is sent
    /// next waits for the departure time (Linux builds the next TSO packet then).
    pub fn end_burst(&mut self) {
        self.burst_left = 0;
    }

    /// A data segment with `len` payload bytes left at `now` (Linux
    /// `tcp_update_skb_after_send`): the departure time moves on by len / rate, less the
    /// sender's lateness (the time the departure time was behind `now` when the burst
    /// began), of which Linux credits at most half of the TSO packet's length — here at
    /// most half of each of the burst's segments, until the credit is used up. The first
    /// 10 data segments are not paced.
    pub fn on_sent(&mut self, now: Instant, len: u64) {
        if now >= self.wstamp {
            // A new burst (the segments of one burst leave before the departure time
            // they push on): its credit is its own lateness.
            self.credit_ns = (now - self.wstamp).as_nanos() as u64;
            self.wstamp = now;
        }
        self.data_segs_out += 1;
        self.burst_left = self.burst_left.saturating_sub(1);
        let Some(rate) = self.rate else {
            return;
        };
        if self.data_segs_out < UNPACED_SEGS {
            return;
        }
        let mut len_ns = (len as u128 * 1_000_000_000 / rate.max(1) as u128) as u64;
        let credit = (len_ns / 2).min(self.credit_ns);
        self.credit_ns -= credit;
        len_ns -= credit;
        self.wstamp += Duration::from_nanos(len_ns);
    }

    /// Earliest departure time of the next burst.
    pub fn next_departure(&self) -> Instant {
        self.wstamp
    }
}

/// Linux `tcp_update_pacing_rate`'s rate, bytes per second: `ratio` × MSS × max(cwnd,
/// packets out) / SRTT, with 200 % while cwnd is below half of ssthresh (slow start) and
/// 120 % after (cwnd, packets out and ssthresh in segments); `None` without an RTT sample.
pub fn cwnd_rate(
    mss: u64,
    cwnd: u64,
    packets_out: u64,
    ssthresh: u64,
    srtt: Option<Duration>,
) -> Option<u64> {
    let srtt = srtt.filter(|d| !d.is_zero())?;
    let ratio = if cwnd < ssthresh / 2 {
        PACING_SS_RATIO
    } else {
        PACING_CA_RATIO
    };
    let segs = cwnd.max(packets_out) as u128;
    let r = mss as u128 * ratio as u128 * segs * 10_000_000 / srtt.as_nanos().max(1);
    Some(u64::try_from(r).unwrap_or(u64::MAX))
}

/// Linux `tcp_tso_autosize`: the segments one TSO/GSO packet may carry at `rate` bytes
/// per second (`None`: no rate yet, Linux's `~0UL`) — about 1 ms of data plus up to
/// 64 KB more for flows whose minimum RTT is below ~16 ms, at most 64 KB, at least
/// `min_segs`.
pub fn tso_autosize(rate: Option<u64>, mss: u64, min_rtt: Option<Duration>, min_segs: u64) -> u64 {
    let mut bytes = rate.map_or(GSO_MAX_SIZE, |r| r >> PACING_SHIFT);
    let r = min_rtt.map_or(u64::MAX, |d| (d.as_nanos() / 1000) as u64) >> TSO_RTT_LOG;
    if r < 64 {
        bytes = bytes.saturating_add(GSO_MAX_SIZE >> r);
    }
    let bytes = bytes.min(GSO_MAX_SIZE);
    (bytes / mss.max(1)).max(min_segs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rate_follows_tcp_update_pacing_rate() {
        let mut p = Pacer::new(None);
        let srtt = Some(Duration::from_millis(100));
        // Slow start (cwnd below ssthresh / 2): 200 % of 10 × 1000 B / 100 ms.
        p.update_from_cwnd(1000, 10, 0, u64::MAX, srtt);
        assert_eq!(p.rate(), Some(200_000));
        // Congestion avoidance: 120 %; packets out above cwnd count.
        p.update_from_cwnd(1000, 10, 20, 20, srtt);
        assert_eq!(p.rate(), Some(240_000));
        // SO_MAX_PACING_RATE caps it.
        let mut p = Pacer::new(Some(50_000));
        p.update_from_cwnd(1000, 10, 0, u64::MAX, srtt);
        assert_eq!(p.rate(), Some(50_000));
        // No RTT sample yet: unlimited (or the maximum).
        p.update_from_cwnd(1000, 10, 0, u64::MAX, None);
        assert_eq!(p.rate(), Some(50_000));
        assert_eq!(Pacer::new(None).rate(), None);
    }

    #[test]
    fn bursts_are_about_a_millisecond_at_the_rate() {
        let mut p = Pacer::new(None);
        let rtt = Some(Duration::from_millis(50));
        p.set_rate(12_500_000); // 100 Mbit/s: 12 207 B per 1/1024 s
        assert_eq!(p.burst_segs(1448, rtt, 2), 8);
        p.set_rate(125_000); // 1 Mbit/s: the minimum
        assert_eq!(p.burst_segs(1448, rtt, 2), 2);
        assert_eq!(p.burst_segs(1448, rtt, 1), 1);
        p.set_rate(1_250_000_000); // 10 Gbit/s: 64 KB at most
        assert_eq!(p.burst_segs(1448, rtt, 2), 45);
        // A 1 ms minimum RTT adds 64 KB >> 1.
        p.set_rate(12_500_000);
        assert_eq!(p.burst_segs(1448, Some(Duration::from_millis(1)), 2), 31);
    }

    #[test]
    fn departures_are_spaced_by_length_over_rate() {
        let mut p = Pacer::new(None);
        p.set_rate(1_000_000); // 1 MB/s: 1000 B take 1 ms
        let mut now = Instant::ZERO;
        // The first 10 segments are not paced.
        for _ in 0..9 {
            assert_eq!(p.check(now, 1), None);
            p.on_sent(now, 1000);
        }
        p.end_burst();
        assert_eq!(p.next_departure(), now);
        // Then one burst of two segments, and the next departure 2 ms later (the tenth
        // segment already counts).
        assert_eq!(p.check(now, 2), None);
        p.on_sent(now, 1000);
        p.on_sent(now, 1000);
        assert_eq!(p.check(now, 2), Some(Instant::from_millis(2)));
        now = Instant::from_millis(2);
        assert_eq!(p.check(now, 2), None);
        p.on_sent(now, 1000);
        p.on_sent(now, 1000);
        assert_eq!(p.next_departure(), Instant::from_millis(4));
        // Late by 3 ms: up to half of the next segment's time is credited.
        now = Instant::from_millis(7);
        assert_eq!(p.check(now, 1), None);
        p.on_sent(now, 1000);
        assert_eq!(p.next_departure(), Instant::from_micros(7_500));
    }

    #[test]
    fn a_late_burst_is_credited_half_of_its_whole_length() {
        // Linux credits a late TSO packet of two segments up to half of its length (one
        // segment's time), not half of one segment.
        let mut p = Pacer::new(None);
        p.set_rate(1_000_000); // 1000 B per ms
        for _ in 0..10 {
            p.on_sent(Instant::ZERO, 1000);
        }
        p.end_burst();
        assert_eq!(p.next_departure(), Instant::from_millis(1));
        // 3 ms late: 2 ms of data, less a credit of 1 ms.
        let now = Instant::from_millis(4);
        assert_eq!(p.check(now, 2), None);
        p.on_sent(now, 1000);
        p.on_sent(now, 1000);
        p.end_burst();
        assert_eq!(p.next_departure(), Instant::from_millis(5));
        // On time: no credit, the burst's full length; a lateness smaller than half of
        // the burst is credited whole.
        let now = Instant::from_millis(5);
        assert_eq!(p.check(now, 2), None);
        p.on_sent(now, 1000);
        p.on_sent(now, 1000);
        p.end_burst();
        assert_eq!(p.next_departure(), Instant::from_millis(7));
        let now = Instant::from_micros(7_300);
        assert_eq!(p.check(now, 2), None);
        p.on_sent(now, 1000);
        p.on_sent(now, 1000);
        assert_eq!(p.next_departure(), Instant::from_millis(9));
    }
}
