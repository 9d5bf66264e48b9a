//! What the receiver measures for the policy: the access link's rate from the arrival
//! rate (§IV-D: "the receiver could simply observe the rate at which packets are
//! received").
//!
//! Behind a bottleneck, consecutive packets arrive no closer than the link's serialisation
//! time, so the bytes of a train of `n` packets, counted after the first, divided by the
//! time from the first arrival to the last, never exceed the link rate; they equal it when
//! the access queue stayed busy during the train. The estimate is the largest train rate
//! seen. It is in *payload* bytes per second — the unit of a window — so it is the link's
//! rate times the payload share of its packets.

use crate::time::{dur_ns, Instant};

/// Packets in one train.
pub const TRAIN_PACKETS: u32 = 8;

/// The largest arrival rate over trains of [`TRAIN_PACKETS`] data packets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ArrivalRate {
    first: Option<Instant>,
    packets: u32,
    bytes: u64,
    best: Option<u64>,
}

impl ArrivalRate {
    /// No estimate yet.
    pub fn new() -> ArrivalRate {
        ArrivalRate::default()
    }

    /// A data packet of `bytes` payload arrived at `now` (any flow of the link).
    pub fn handle_arrival(&mut self, now: Instant, bytes: u32) {
        let Some(first) = self.first else {
            self.first = Some(now);
            self.packets = 1;
            self.bytes = 0;
            return;
        };
        self.packets += 1;
        self.bytes += bytes as u64;
        if self.packets < TRAIN_PACKETS {
            return;
        }
        let span = dur_ns(now.saturating_since(first));
        if span > 0 {
            let rate = u64::try_from(self.bytes as u128 * 1_000_000_000 / span as u128)
                .unwrap_or(u64::MAX);
            self.best = Some(self.best.map_or(rate, |b| b.max(rate)));
        }
        // The last packet of this train starts the next one.
        self.first = Some(now);
        self.packets = 1;
        self.bytes = 0;
    }

    /// The estimate in payload bytes per second, once a train completed.
    pub fn bytes_per_sec(&self) -> Option<u64> {
        self.best
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::time::Duration;

    #[test]
    fn back_to_back_trains_give_the_link_rate() {
        // 536-byte payloads in 576-byte packets at 28.8 kbit/s: one every 160 ms.
        let mut r = ArrivalRate::new();
        let mut t = Instant::from_millis(1_000);
        assert_eq!(r.bytes_per_sec(), None);
        for _ in 0..TRAIN_PACKETS {
            r.handle_arrival(t, 536);
            t += Duration::from_millis(160);
        }
        assert_eq!(r.bytes_per_sec(), Some(3_350)); // 536 B / 0.16 s
    }

    #[test]
    fn gaps_lower_a_train_and_the_maximum_is_kept() {
        let mut r = ArrivalRate::new();
        let mut t = Instant::ZERO;
        for _ in 0..TRAIN_PACKETS {
            r.handle_arrival(t, 1_000);
            t += Duration::from_millis(10);
        }
        let fast = r.bytes_per_sec().unwrap();
        assert_eq!(fast, 100_000);
        for _ in 0..TRAIN_PACKETS {
            t += Duration::from_millis(90);
            r.handle_arrival(t, 1_000);
        }
        assert_eq!(
            r.bytes_per_sec(),
            Some(fast),
            "a slower train does not lower it"
        );
    }
}
