//! Self-tuning measurements: the forward queue's service time per packet and the number
//! of forward packets per arriving ACK, both from the runtime's observations only.
//!
//! # Service time
//!
//! The forward queue is served back to back while it stays backlogged: when a dequeue
//! leaves packets behind, the next dequeue happens exactly when the link has finished
//! the packet just taken (a work-conserving link), so the gap between the two dequeues is
//! one packet's service time — whatever the link is (a bit-rate line, a packet-clocked
//! router, a token bucket). Gaps after which the queue had run empty are not samples (the
//! link may have idled). Samples feed an integer EWMA with gain 1/8.
//!
//! # Packets per ACK
//!
//! Every 16 ACKs the shaper compares how many packets the forward queue handed to its
//! link in the meantime: with receivers acknowledging every `d` segments the ratio tends
//! to `d`. It is kept in 1/256 units (EWMA gain 1/8), clamped to 1..=64.

use crate::qdisc::PeerObservation;
use crate::time::Instant;

const GAIN_SHIFT: u32 = 3;
const EPOCH_ACKS: u64 = 16;
/// Fixed-point unit of the packets-per-ACK ratio.
pub(super) const PPA_ONE: u64 = 256;

/// The estimator state.
#[derive(Clone, Debug, Default)]
pub(super) struct ServiceEstimator {
    /// The peer's cumulative dequeue count at the last observation.
    last_dequeued: u64,
    /// Time of the last dequeue that left the peer backlogged (the next dequeue ends one
    /// service time later).
    chain: Option<Instant>,
    /// EWMA of the service time per packet (ns).
    svc_ns: Option<u64>,
    /// Service-time samples taken.
    pub samples: u64,
    epoch_acks: u64,
    epoch_start: u64,
    /// EWMA of forward packets per ACK, × [`PPA_ONE`].
    ppa: Option<u64>,
}

fn ewma(old: Option<u64>, sample: u64) -> u64 {
    match old {
        None => sample,
        Some(v) => {
            let d = sample as i128 - v as i128;
            (v as i128 + (d >> GAIN_SHIFT)).max(0) as u64
        }
    }
}

impl ServiceEstimator {
    /// Feed an observation of the forward queue taken at `now`.
    pub fn observe(&mut self, now: Instant, obs: &PeerObservation) {
        if obs.dequeued_packets > self.last_dequeued {
            let k = obs.dequeued_packets - self.last_dequeued;
            if let Some(t0) = self.chain {
                let gap = now.saturating_since(t0).as_nanos() as u64;
                self.svc_ns = Some(ewma(self.svc_ns, gap / k));
                self.samples += 1;
            }
            self.last_dequeued = obs.dequeued_packets;
            self.chain = (obs.backlog.packets > 0).then_some(now);
        } else if obs.backlog.packets == 0 {
            self.chain = None;
        }
    }

    /// An ACK arrived at the shaper.
    pub fn on_ack(&mut self) {
        self.epoch_acks += 1;
        if self.epoch_acks >= EPOCH_ACKS {
            let fwd = self.last_dequeued.saturating_sub(self.epoch_start);
            let sample = (fwd * PPA_ONE / self.epoch_acks).clamp(PPA_ONE, 64 * PPA_ONE);
            self.ppa = Some(ewma(self.ppa, sample));
            self.epoch_acks = 0;
            self.epoch_start = self.last_dequeued;
        }
    }

    /// Measured service time per forward packet (ns), once there is a sample.
    pub fn service_ns(&self) -> Option<u64> {
        self.svc_ns
    }

    /// Measured forward packets per ACK × [`PPA_ONE`], once measured.
    pub fn packets_per_ack(&self) -> Option<u64> {
        self.ppa
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::qdisc::Backlog;

    fn obs(dequeued: u64, backlog: u32) -> PeerObservation {
        PeerObservation {
            backlog: Backlog {
                packets: backlog,
                bytes: backlog as u64 * 1000,
            },
            service_rate: None,
            capacity_bytes: None,
            capacity_packets: None,
            dequeued_packets: dequeued,
            dequeued_bytes: dequeued * 1000,
        }
    }

    #[test]
    fn samples_only_back_to_back_service() {
        let mut e = ServiceEstimator::default();
        let ms = Instant::from_millis;
        // idle link: a packet arrives and leaves at once, queue empty: no sample
        e.observe(ms(0), &obs(0, 1));
        e.observe(ms(0), &obs(1, 0));
        e.observe(ms(5), &obs(1, 1));
        e.observe(ms(8), &obs(2, 0));
        assert_eq!(e.service_ns(), None);
        // backlogged: dequeues 10 ms apart
        e.observe(ms(9), &obs(2, 3));
        e.observe(ms(10), &obs(3, 2));
        e.observe(ms(20), &obs(4, 1));
        assert_eq!(e.service_ns(), Some(10_000_000));
        e.observe(ms(30), &obs(5, 0));
        assert_eq!(e.samples, 2);
        // ran empty: the next gap is not a sample
        e.observe(ms(100), &obs(5, 1));
        e.observe(ms(100), &obs(6, 0));
        assert_eq!(e.samples, 2);
        // EWMA with gain 1/8 toward 18 ms
        e.observe(ms(101), &obs(6, 2));
        e.observe(ms(102), &obs(7, 1));
        e.observe(ms(120), &obs(8, 1));
        assert_eq!(e.service_ns(), Some(10_000_000 + 1_000_000));
    }

    #[test]
    fn packets_per_ack_tracks_the_ack_ratio() {
        let mut e = ServiceEstimator::default();
        for i in 1..=64u64 {
            e.observe(Instant::from_millis(i), &obs(2 * i, 1));
            e.on_ack();
        }
        assert_eq!(e.packets_per_ack(), Some(2 * PPA_ONE));
    }
}
