//! Delivery-rate estimation (draft-cheng-iccrg-delivery-rate-estimation, as Linux's
//! `tcp_rate.c`): each transmission remembers how much had been delivered when it left;
//! when it is delivered (cumulatively acknowledged or SACKed), the data delivered since,
//! over the longer of the send and ACK intervals, is a bandwidth sample. Samples taken
//! while the application had nothing to send are marked app-limited.
//!
//! Counts are segments (Linux `tp->delivered`), times [`Instant`]s.

use super::scoreboard::Delivery;
use asymlink_core::time::{Duration, Instant};
use std::collections::VecDeque;

/// What a transmission remembers (Linux `tcp_skb_cb.tx`).
#[derive(Clone, Copy, Debug)]
struct TxState {
    /// Segments delivered when it left.
    delivered: u64,
    /// When the last of those was delivered.
    delivered_time: Instant,
    /// Send time of the first segment of the current send phase.
    first_tx_time: Instant,
    /// Sent while the flow was app-limited.
    app_limited: bool,
}

/// One ACK's rate sample (Linux `struct rate_sample`).
#[derive(Clone, Copy, Debug, Default)]
pub struct RateSample {
    /// Segments delivered over the interval (`None`: no valid sample).
    pub delivered: Option<u64>,
    /// The sample's interval (`None`: invalid, e.g. shorter than the minimum RTT).
    pub interval: Option<Duration>,
    /// Delivered count when the newest delivered segment was sent.
    pub prior_delivered: u64,
    /// Segments newly acknowledged or SACKed by this ACK.
    pub acked_sacked: u64,
    /// Segments newly marked lost while processing this ACK.
    pub losses: u64,
    /// Segments in flight before this ACK.
    pub prior_in_flight: u64,
    /// The newest delivered segment was sent while app-limited.
    pub is_app_limited: bool,
    /// RTT of the most recently sent segment delivered by this ACK (not a retransmission).
    pub rtt: Option<Duration>,
    /// When the newest delivered segment's prior delivery happened (`prior_mstamp`).
    pub(crate) prior_time: Option<Instant>,
    /// Transmission order of the newest delivered segment.
    pub(crate) newest: Option<u64>,
    /// Send phase: from the first to the newest delivered segment's transmission.
    pub(crate) send_interval: Duration,
}

/// The sender's delivery-rate state (Linux `tp->delivered_mstamp`, `first_tx_mstamp`,
/// `app_limited`, and the per-transmission records).
#[derive(Clone, Debug, Default)]
pub struct RateSampler {
    /// Transmission order of `txs[0]`.
    base: u64,
    txs: VecDeque<Option<TxState>>,
    delivered_time: Instant,
    first_tx_time: Instant,
    /// Non-zero: samples are app-limited until more than this many segments are
    /// delivered (Linux `tp->app_limited`).
    app_limited: u64,
}

impl RateSampler {
    /// When the last delivery happened (Linux `tp->delivered_mstamp`).
    pub fn delivered_time(&self) -> Instant {
        self.delivered_time
    }

    /// Whether the flow is marked app-limited.
    pub fn app_limited(&self) -> bool {
        self.app_limited != 0
    }

    /// Mark the flow app-limited until the data now in flight is delivered (`mark` is
    /// the delivered count plus the segments in flight; at least 1).
    pub fn set_app_limited(&mut self, mark: u64) {
        self.app_limited = mark.max(1);
    }

    /// Transmission `order` left at `now` (Linux `tcp_rate_skb_sent`); `idle`: nothing
    /// was outstanding, so a new send phase starts; `delivered`: segments delivered so far.
    pub fn on_sent(&mut self, order: u64, now: Instant, idle: bool, delivered: u64) {
        if idle {
            self.first_tx_time = now;
            self.delivered_time = now;
        }
        let tx = TxState {
            delivered,
            delivered_time: self.delivered_time,
            first_tx_time: self.first_tx_time,
            app_limited: self.app_limited != 0,
        };
        if self.txs.is_empty() {
            self.base = order;
        }
        if order < self.base {
            return;
        }
        let i = (order - self.base) as usize;
        if i >= self.txs.len() {
            self.txs.resize(i + 1, None);
        }
        self.txs[i] = Some(tx);
    }

    /// Transmission `order` will never be delivered as such (it was sent again).
    pub fn forget(&mut self, order: u64) {
        self.take(order);
    }

    fn take(&mut self, order: u64) -> Option<TxState> {
        let i = usize::try_from(order.checked_sub(self.base)?).ok()?;
        let tx = self.txs.get_mut(i)?.take();
        while self.txs.front().is_some_and(|t| t.is_none()) {
            self.txs.pop_front();
            self.base += 1;
        }
        tx
    }

    /// A segment was delivered (Linux `tcp_rate_skb_delivered`): the sample takes its
    /// prior state from the most recently sent of the segments this ACK delivers.
    pub fn on_delivered(&mut self, d: &Delivery, now: Instant, rs: &mut RateSample) {
        if !d.retrans {
            let rtt = now - d.sent_at;
            rs.rtt = Some(rs.rtt.map_or(rtt, |r| r.min(rtt)));
        }
        let Some(tx) = self.take(d.order) else {
            return;
        };
        if rs.newest.is_none_or(|n| d.order > n) {
            rs.newest = Some(d.order);
            rs.prior_delivered = tx.delivered;
            rs.prior_time = Some(tx.delivered_time);
            rs.is_app_limited = tx.app_limited;
            self.first_tx_time = d.sent_at;
            rs.send_interval = d.sent_at.saturating_since(tx.first_tx_time);
        }
    }

    /// Finish the ACK's sample (Linux `tcp_rate_gen`): `delivered` is the delivered count
    /// after the ACK; the interval is the longer of the send and ACK phases, invalid if
    /// shorter than the minimum RTT.
    pub fn finish(
        &mut self,
        now: Instant,
        delivered: u64,
        min_rtt: Option<Duration>,
        rs: &mut RateSample,
    ) {
        if self.app_limited != 0 && delivered > self.app_limited {
            self.app_limited = 0;
        }
        if rs.acked_sacked > 0 {
            self.delivered_time = now;
        }
        let Some(prior_time) = rs.prior_time else {
            rs.delivered = None;
            rs.interval = None;
            return;
        };
        rs.delivered = Some(delivered.saturating_sub(rs.prior_delivered));
        let ack_interval = now.saturating_since(prior_time);
        let interval = rs.send_interval.max(ack_interval);
        rs.interval =
            (min_rtt.is_none_or(|m| interval >= m) && !interval.is_zero()).then_some(interval);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn delivery(order: u64, sent_ms: u64) -> Delivery {
        Delivery {
            sent_at: Instant::from_millis(sent_ms),
            order,
            end: order * 1000,
            retrans: false,
        }
    }

    #[test]
    fn a_window_delivered_one_rtt_later_gives_its_rate() {
        // 10 segments sent 1 ms apart from t = 0, each delivered 100 ms after sending.
        let mut r = RateSampler::default();
        for k in 0..10u64 {
            r.on_sent(k + 1, Instant::from_millis(k), k == 0, 0);
        }
        let mut last = RateSample::default();
        for k in 0..10u64 {
            let now = Instant::from_millis(100 + k);
            let mut rs = RateSample {
                acked_sacked: 1,
                ..RateSample::default()
            };
            r.on_delivered(&delivery(k + 1, k), now, &mut rs);
            r.finish(now, k + 1, Some(Duration::from_millis(100)), &mut rs);
            last = rs;
        }
        // The 10th: 10 delivered since it was sent, over max(send 9 ms, ack 109 ms).
        assert_eq!(last.delivered, Some(10));
        assert_eq!(last.interval, Some(Duration::from_millis(109)));
        assert_eq!(last.rtt, Some(Duration::from_millis(100)));
        assert!(!last.is_app_limited);
        assert!(
            r.txs.is_empty(),
            "records of delivered segments are dropped"
        );
    }

    #[test]
    fn app_limited_marks_samples_until_the_bubble_is_delivered() {
        let mut r = RateSampler::default();
        r.set_app_limited(2);
        r.on_sent(1, Instant::ZERO, true, 0);
        r.on_sent(2, Instant::ZERO, false, 0);
        let mut rs = RateSample {
            acked_sacked: 1,
            ..RateSample::default()
        };
        let now = Instant::from_millis(50);
        r.on_delivered(&delivery(1, 0), now, &mut rs);
        r.finish(now, 1, None, &mut rs);
        assert!(rs.is_app_limited);
        assert!(r.app_limited());
        let mut rs = RateSample {
            acked_sacked: 2,
            ..RateSample::default()
        };
        r.on_delivered(&delivery(2, 0), now, &mut rs);
        r.finish(now, 3, None, &mut rs);
        assert!(!r.app_limited(), "3 delivered > mark 2");
        // A sample shorter than the minimum RTT is invalid.
        r.on_sent(3, now, true, 3);
        let mut rs = RateSample {
            acked_sacked: 1,
            ..RateSample::default()
        };
        let later = Instant::from_millis(60);
        r.on_delivered(&delivery(3, 50), later, &mut rs);
        r.finish(later, 4, Some(Duration::from_millis(40)), &mut rs);
        assert_eq!(rs.delivered, Some(1));
        assert_eq!(rs.interval, None);
    }
}
