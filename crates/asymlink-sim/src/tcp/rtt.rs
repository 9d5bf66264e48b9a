//! Retransmission timer computation (RFC 6298).

use super::config::RtoFloor;
use asymlink_core::time::{dur_ns, Duration};

/// SRTT/RTTVAR/RTO per RFC 6298, in nanoseconds, with the clock granularity G taken as
/// 1 ms (RFC 6298 §2.4: `RTO = SRTT + max(G, K*RTTVAR)`).
#[derive(Clone, Copy, Debug)]
pub struct RttEstimator {
    srtt: Option<u64>,
    rttvar: u64,
    min_rtt: Option<u64>,
    rto: u64,
    rto_min: u64,
    rto_max: u64,
    floor: RtoFloor,
    backoff: u32,
}

const G_NS: u64 = 1_000_000;

impl RttEstimator {
    /// A fresh estimator (RTO = `initial`); `floor` says how `min` bounds the RTO.
    pub fn new(initial: Duration, min: Duration, max: Duration, floor: RtoFloor) -> RttEstimator {
        RttEstimator {
            srtt: None,
            rttvar: 0,
            min_rtt: None,
            rto: dur_ns(initial),
            rto_min: dur_ns(min),
            rto_max: dur_ns(max),
            floor,
            backoff: 0,
        }
    }

    /// Feed a round-trip sample.
    //= https://www.rfc-editor.org/rfc/rfc6298#section-2
    //# (2.2) When the first RTT measurement R is made, the host MUST set
    //#       SRTT <- R, RTTVAR <- R/2, RTO <- SRTT + max (G, K*RTTVAR)
    //# (2.3) When a subsequent RTT measurement R' is made, a host MUST set
    //#       RTTVAR <- (1 - beta) * RTTVAR + beta * |SRTT - R'|
    //#       SRTT <- (1 - alpha) * SRTT + alpha * R'
    pub fn sample(&mut self, r: Duration) {
        let r = dur_ns(r).max(1);
        self.min_rtt = Some(self.min_rtt.map_or(r, |m| m.min(r)));
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                let delta = s.abs_diff(r);
                self.rttvar = (3 * self.rttvar + delta) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        self.rto = match self.floor {
            //= https://www.rfc-editor.org/rfc/rfc6298#section-2
            //# (2.4) Whenever RTO is computed, if it is less than 1 second, then the
            //#       RTO SHOULD be rounded up to 1 second.
            RtoFloor::Rto => (s + G_NS.max(4 * self.rttvar)).clamp(self.rto_min, self.rto_max),
            // Linux keeps the variation term (`rttvar_us`, the maximum of `mdev` over the
            // last RTT) at or above the minimum RTO; `__tcp_set_rto` adds it to SRTT.
            RtoFloor::Variation => (s + self.rto_min.max(4 * self.rttvar)).min(self.rto_max),
        };
        // A new sample after backoff: RFC 6298 §5 — the backed-off RTO is kept until an
        // acknowledgment of new data arrives; the caller resets the backoff then.
    }

    /// The current RTO including exponential backoff.
    pub fn rto(&self) -> Duration {
        let b = self.rto.saturating_mul(1u64 << self.backoff.min(16));
        Duration::from_nanos(b.min(self.rto_max))
    }

    /// Double the RTO (RFC 6298 §5.5).
    pub fn back_off(&mut self) {
        self.backoff = (self.backoff + 1).min(16);
    }

    /// Clear the backoff (new data acknowledged).
    pub fn reset_backoff(&mut self) {
        self.backoff = 0;
    }

    /// Smoothed RTT, if sampled.
    pub fn srtt(&self) -> Option<Duration> {
        self.srtt.map(Duration::from_nanos)
    }

    /// RTT variation.
    pub fn rttvar(&self) -> Duration {
        Duration::from_nanos(self.rttvar)
    }

    /// Smallest sample seen.
    pub fn min_rtt(&self) -> Option<Duration> {
        self.min_rtt.map(Duration::from_nanos)
    }

    /// Number of backoffs in effect.
    pub fn backoff(&self) -> u32 {
        self.backoff
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc6298_first_and_later_samples() {
        let mut e = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
            RtoFloor::Rto,
        );
        assert_eq!(e.rto(), Duration::from_secs(1));
        e.sample(Duration::from_millis(100));
        // SRTT 100, RTTVAR 50, RTO = 100 + 200 = 300 ms
        assert_eq!(e.rto(), Duration::from_millis(300));
        e.sample(Duration::from_millis(100));
        // RTTVAR = 3/4*50 = 37.5, RTO = 100 + 150 = 250
        assert_eq!(e.rto(), Duration::from_micros(250_000));
        e.back_off();
        assert_eq!(e.rto(), Duration::from_millis(500));
        e.reset_backoff();
        for _ in 0..50 {
            e.sample(Duration::from_millis(100));
        }
        assert_eq!(
            e.rto(),
            Duration::from_millis(200),
            "clamped at the minimum"
        );
    }

    #[test]
    fn linux_floor_applies_to_the_variation() {
        let mut e = RttEstimator::new(
            Duration::from_secs(1),
            Duration::from_millis(200),
            Duration::from_secs(60),
            RtoFloor::Variation,
        );
        for _ in 0..50 {
            e.sample(Duration::from_millis(100));
        }
        // RTTVAR has decayed to nothing: RTO = SRTT + 200 ms, not max(200 ms, SRTT).
        assert_eq!(e.rto(), Duration::from_millis(300));
        for _ in 0..50 {
            e.sample(Duration::from_millis(1000));
        }
        let rto = e.srtt().unwrap() + Duration::from_millis(200);
        assert_eq!(e.rto(), rto);
        e.back_off();
        assert_eq!(e.rto(), 2 * rto);
    }
}
