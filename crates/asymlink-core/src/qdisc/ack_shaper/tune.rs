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
//! Receivers acknowledge every segment (`d = 1`) or every second one (delayed ACKs,
//! `d = 2`), and the leak must space ACKs by `d` forward service times. The shaper
//! remembers the last cumulative acknowledgment number of each connection (a
//! direct-mapped table of 256 entries, so memory is bounded) and averages the bytes each
//! advancing ACK newly acknowledges (EWMA, gain 1/8); divided by the payload of the
//! largest forward packet seen (its IP length minus 40 bytes of headers) that gives `d`,
//! kept in 1/256 units and clamped to 1..=64. (Comparing ACK arrivals with forward
//! dequeues would be biased: in slow start the forward queue serves a round trip's
//! growth ahead of the ACKs.)

use crate::qdisc::PeerObservation;
use crate::time::Instant;
use crate::wire::Headers;

const GAIN_SHIFT: u32 = 3;
const TABLE: usize = 256;
/// Headers assumed per forward packet when converting its IP length to payload.
const HEADERS: u64 = 40;
/// Fixed-point unit of the packets-per-ACK ratio.
pub(super) const PPA_ONE: u64 = 256;

/// The estimator state.
#[derive(Clone, Debug)]
pub(super) struct ServiceEstimator {
    /// The peer's cumulative dequeue counts (packets, bytes) at the last observation.
    last_dequeued: (u64, u64),
    /// Time of the last dequeue that left the peer backlogged (the next dequeue ends one
    /// service time later).
    chain: Option<Instant>,
    /// EWMA of the service time per packet (ns).
    svc_ns: Option<u64>,
    /// Service-time samples taken.
    pub samples: u64,
    /// Largest forward packet seen (IP bytes).
    seg_max: u64,
    /// Last cumulative ACK per connection: (flow hash, ack number).
    last_ack: Vec<Option<(u64, u32)>>,
    /// EWMA of the bytes an advancing ACK newly acknowledges.
    acked: Option<u64>,
}

impl Default for ServiceEstimator {
    fn default() -> Self {
        ServiceEstimator {
            last_dequeued: (0, 0),
            chain: None,
            svc_ns: None,
            samples: 0,
            seg_max: 0,
            last_ack: vec![None; TABLE],
            acked: None,
        }
    }
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
        let (pkts, bytes) = self.last_dequeued;
        if obs.dequeued_packets > pkts {
            let k = obs.dequeued_packets - pkts;
            if k == 1 {
                self.seg_max = self.seg_max.max(obs.dequeued_bytes.saturating_sub(bytes));
            }
            if let Some(t0) = self.chain {
                let gap = now.saturating_since(t0).as_nanos() as u64;
                self.svc_ns = Some(ewma(self.svc_ns, gap / k));
                self.samples += 1;
            }
            self.last_dequeued = (obs.dequeued_packets, obs.dequeued_bytes);
            self.chain = (obs.backlog.packets > 0).then_some(now);
        } else if obs.backlog.packets == 0 {
            self.chain = None;
        }
    }

    /// A pure ACK arrived at the shaper.
    pub fn on_ack(&mut self, h: &Headers) {
        let Some(t) = h.tcp_repr() else { return };
        let key = h.flow_key().stable_hash();
        let slot = &mut self.last_ack[(key % TABLE as u64) as usize];
        if let Some((k, prev)) = *slot {
            let d = t.ack.0.wrapping_sub(prev);
            if k == key && d > 0 && d < 1 << 30 {
                self.acked = Some(ewma(self.acked, d as u64));
            }
        }
        *slot = Some((key, t.ack.0));
    }
    /// Measured service time per forward packet (ns), once there is a sample.
    pub fn service_ns(&self) -> Option<u64> {
        self.svc_ns
    }

    /// Measured forward packets per ACK × [`PPA_ONE`], once measured.
    pub fn packets_per_ack(&self) -> Option<u64> {
        let payload = self.seg_max.checked_sub(HEADERS).filter(|&p| p > 0)?;
        let acked = self.acked?;
        Some((acked * PPA_ONE / payload).clamp(PPA_ONE, 64 * PPA_ONE))
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
    fn packets_per_ack_from_acknowledgment_numbers() {
        use crate::packet::Pkt;
        use crate::qdisc::testutil::data_flow;
        let mut e = ServiceEstimator::default();
        // forward packets of 576 bytes (536 of payload)
        let o = PeerObservation {
            dequeued_bytes: 576,
            ..obs(1, 0)
        };
        e.observe(Instant::ZERO, &o);
        assert_eq!(e.packets_per_ack(), None);
        // two connections, each ACK advancing by two segments
        for i in 0..40u32 {
            for flow in 0..2u16 {
                let mut a = data_flow(0, 40, flow);
                a.hdr.tcp_repr_mut().unwrap().ack = crate::wire::SeqNumber(1000 + i * 1072);
                e.on_ack(a.headers().unwrap());
            }
        }
        assert_eq!(e.packets_per_ack(), Some(2 * PPA_ONE));
    }
}
