//! Congestion window arithmetic: slow start, congestion avoidance (Reno, CUBIC), and the
//! reductions on loss and ECN. Loss *detection* and *recovery* live in the connection.

use super::config::{CaIncrease, CcAlgo, SsGrowth, TcpConfig};
use asymlink_core::time::{Duration, Instant};
#[cfg(test)]
use asymlink_core::units::Span;

/// CUBIC constants (RFC 9438 §4.1): C = 0.4, β = 0.7.
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

/// Window state in bytes.
#[derive(Clone, Debug)]
pub struct Cc {
    algo: CcAlgo,
    growth: SsGrowth,
    increase: CaIncrease,
    mss: u64,
    /// Congestion window (bytes).
    pub cwnd: u64,
    /// Slow-start threshold (bytes).
    pub ssthresh: u64,
    /// Fractional CA growth carried between ACKs (bytes × mss, Reno).
    ca_acc: u64,
    // CUBIC state (segments, seconds)
    w_max: f64,
    /// cwnd just before the last reduction (RFC 9438's cwnd_prior).
    cwnd_prior: f64,
    alpha_switch: bool,
    epoch_start: Option<Instant>,
    k: f64,
    w_est: f64,
}

impl Cc {
    /// Initial state for a connection whose effective MSS is `mss`.
    pub fn new(cfg: &TcpConfig, mss: u32) -> Cc {
        let mss = mss as u64;
        Cc {
            algo: cfg.cc,
            growth: cfg.ss_growth,
            increase: cfg.ca_increase,
            mss,
            cwnd: cfg.initial_window as u64 * mss,
            ssthresh: cfg.initial_ssthresh.unwrap_or(u64::MAX / 4),
            ca_acc: 0,
            w_max: 0.0,
            cwnd_prior: 0.0,
            alpha_switch: cfg.cubic_alpha_switch,
            epoch_start: None,
            k: 0.0,
            w_est: 0.0,
        }
    }

    /// Whether in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// An ACK acknowledged `acked` new bytes (outside recovery).
    pub fn on_ack(&mut self, now: Instant, acked: u64, srtt: Option<Duration>) {
        if acked == 0 {
            return;
        }
        if self.in_slow_start() {
            let inc = match self.growth {
                SsGrowth::PerAck => self.mss,
                SsGrowth::Rfc5681 => acked.min(self.mss),
                SsGrowth::ByteCounting => acked,
            };
            self.cwnd = (self.cwnd + inc).min(self.ssthresh.max(self.cwnd + 1));
            if !self.in_slow_start() {
                // Entering congestion avoidance: (re)start the CUBIC epoch.
                self.epoch_start = None;
            }
            return;
        }
        match (self.algo, self.increase) {
            (CcAlgo::Cubic, CaIncrease::Standard) => self.cubic_ack(now, acked, srtt),
            (_, CaIncrease::Standard) => self.reno_ack(acked),
            (_, rule) => self.scaled_ack(acked, rule.gain(srtt)),
        }
    }

    /// Congestion avoidance growing by `g` segments per RTT: g·MSS²/cwnd per ACK (in
    /// thousandths of a segment, carried between ACKs), at most one MSS per ACK.
    fn scaled_ack(&mut self, acked: u64, g: f64) {
        let g_milli = (g * 1000.0).round().clamp(1.0, 1e9) as u64;
        let per_ack = match self.growth {
            SsGrowth::PerAck | SsGrowth::Rfc5681 => self.mss,
            SsGrowth::ByteCounting => acked,
        };
        self.ca_acc += per_ack * self.mss * g_milli;
        let unit = self.cwnd.max(1) * 1000;
        let inc = self.ca_acc / unit;
        if inc >= self.mss {
            self.cwnd += self.mss;
            self.ca_acc = 0;
        } else if inc > 0 {
            self.ca_acc -= inc * unit;
            self.cwnd += inc;
        }
    }

    //= https://www.rfc-editor.org/rfc/rfc5681#section-3.1
    //# cwnd += SMSS*SMSS/cwnd                     (3)
    fn reno_ack(&mut self, acked: u64) {
        let per_ack = match self.growth {
            // ns-2 / RFC 5681 eq. 3: one increment per ACK whatever it covers.
            SsGrowth::PerAck | SsGrowth::Rfc5681 => self.mss,
            // Appropriate byte counting (RFC 3465): in proportion to bytes acked.
            SsGrowth::ByteCounting => acked,
        };
        self.ca_acc += per_ack * self.mss;
        let inc = self.ca_acc / self.cwnd.max(1);
        if inc > 0 {
            self.ca_acc -= inc * self.cwnd;
            self.cwnd += inc;
        }
    }

    //= https://www.rfc-editor.org/rfc/rfc9438#section-4.2
    //# W_cubic(t) = C * (t - K)^3 + W_max
    fn cubic_ack(&mut self, now: Instant, acked: u64, srtt: Option<Duration>) {
        let mss = self.mss as f64;
        let cwnd_seg = self.cwnd as f64 / mss;
        if self.epoch_start.is_none() {
            // A new epoch: K is the time to climb back to W_max from the current window.
            self.w_max = self.w_max.max(cwnd_seg);
            self.k = ((self.w_max - cwnd_seg) / CUBIC_C).cbrt();
            self.w_est = cwnd_seg;
            self.epoch_start = Some(now);
        }
        let epoch = self.epoch_start.unwrap_or(now);
        let rtt = srtt.map(|d| d.as_secs_f64()).unwrap_or(0.1);
        let t = (now - epoch).as_secs_f64() + rtt;
        let target = CUBIC_C * (t - self.k).powi(3) + self.w_max;
        let acked_seg = acked as f64 / mss;
        // RFC 9438 §4.3: Reno-friendly estimate.
        //= https://www.rfc-editor.org/rfc/rfc9438#section-4.3
        //# Once W_est has grown to reach the cwnd at the time of most recently
        //# setting ssthresh -- that is, W_est >= cwnd_prior -- the sender SHOULD set
        //# alpha_cubic to 1 to ensure that it can achieve the same congestion window
        //# increment rate as Reno, which uses AIMD(1, 0.5).
        let alpha = if self.alpha_switch && self.w_est >= self.cwnd_prior {
            1.0
        } else {
            3.0 * (1.0 - CUBIC_BETA) / (1.0 + CUBIC_BETA)
        };
        self.w_est += alpha * acked_seg / cwnd_seg;
        let mut new = cwnd_seg;
        if target > cwnd_seg {
            // §4.4: increase by (target - cwnd)/cwnd per segment acknowledged, capped at
            // 1.5x per RTT.
            let target = target.min(1.5 * cwnd_seg);
            new += (target - cwnd_seg) / cwnd_seg * acked_seg;
        }
        if self.w_est > new {
            new = self.w_est;
        }
        self.cwnd = ((new * mss) as u64).max(self.cwnd);
    }

    /// A congestion event (fast retransmit or ECN echo): set ssthresh and cwnd.
    /// `flight` is the data outstanding when the loss was detected.
    //= https://www.rfc-editor.org/rfc/rfc5681#section-3.1
    //# ssthresh = max (FlightSize / 2, 2*SMSS)            (4)
    pub fn on_congestion(&mut self, flight: u64) {
        match self.algo {
            CcAlgo::Reno | CcAlgo::NewReno => {
                self.ssthresh = (flight / 2).max(2 * self.mss);
            }
            CcAlgo::Cubic => {
                let cwnd_seg = self.cwnd as f64 / self.mss as f64;
                //= https://www.rfc-editor.org/rfc/rfc9438#section-4.7
                //# if cwnd < W_max and fast convergence enabled, further reduce W_max:
                //#    W_max = cwnd * (1 + beta_cubic) / 2
                //# otherwise, remember cwnd before reduction:
                //#    W_max = cwnd
                // (W_max here is the one the last reduction set, fast-converged or not, as
                // Linux's `last_max_cwnd`.)
                self.w_max = if cwnd_seg < self.w_max {
                    cwnd_seg * (1.0 + CUBIC_BETA) / 2.0
                } else {
                    cwnd_seg
                };
                self.cwnd_prior = cwnd_seg;
                self.epoch_start = None;
                self.k = 0.0;
                self.ssthresh = ((self.cwnd as f64 * CUBIC_BETA) as u64).max(2 * self.mss);
            }
        }
        self.cwnd = self.ssthresh;
        self.ca_acc = 0;
    }

    /// A retransmission timeout: ssthresh as on congestion, cwnd to one segment (the loss
    /// window, RFC 5681 §3.1).
    pub fn on_timeout(&mut self, flight: u64) {
        self.on_congestion(flight);
        self.cwnd = self.mss;
        self.epoch_start = None;
    }

    /// Data follows an idle period of `idle` (longer than `rto`): restart from at most the
    /// initial window `iw` (RFC 5681 §4.1), or as Linux's `tcp_cwnd_restart` when `linux`.
    /// CUBIC starts a new epoch from the restarted window.
    //= https://www.rfc-editor.org/rfc/rfc5681#section-4.1
    //# Therefore, a TCP SHOULD set cwnd to no more than RW before beginning
    //# transmission if the TCP has not sent data in an interval exceeding
    //# the retransmission timeout.
    pub fn restart_after_idle(&mut self, linux: bool, idle: Duration, rto: Duration, iw: u64) {
        let restart = iw.min(self.cwnd);
        if linux {
            self.ssthresh = self.ssthresh.max(self.cwnd / 2 + self.cwnd / 4);
            let mut cwnd = self.cwnd;
            let mut left = idle.saturating_sub(rto);
            while !left.is_zero() && cwnd > restart {
                cwnd >>= 1;
                left = left.saturating_sub(rto);
            }
            self.cwnd = cwnd.max(restart);
        } else {
            self.cwnd = restart;
        }
        self.ca_acc = 0;
        self.epoch_start = None;
    }

    /// Effective MSS.
    pub fn mss(&self) -> u64 {
        self.mss
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cc(profile: &str) -> Cc {
        Cc::new(&TcpConfig::profile(profile).unwrap(), 1000)
    }

    #[test]
    fn slow_start_per_ack_vs_rfc() {
        let mut c = cc("paper");
        c.on_ack(Instant::ZERO, 2000, None); // a delayed ACK covering two segments
        assert_eq!(c.cwnd, 2000, "ns-2: one segment per ACK");
        let mut r = cc("rfc");
        let w = r.cwnd;
        r.on_ack(Instant::ZERO, 2000, None);
        assert_eq!(r.cwnd, w + 1000, "RFC 5681: min(acked, SMSS)");
        let mut l = cc("linux");
        let w = l.cwnd;
        l.on_ack(Instant::ZERO, 2000, None);
        assert_eq!(l.cwnd, w + 2000, "byte counting");
    }

    #[test]
    fn reno_adds_one_segment_per_window() {
        let mut c = cc("paper");
        c.cwnd = 10_000;
        c.ssthresh = 5_000;
        for _ in 0..10 {
            c.on_ack(Instant::ZERO, 1000, None);
        }
        assert!((10_900..=11_000).contains(&c.cwnd), "{}", c.cwnd);
        c.on_congestion(11_000);
        assert_eq!(c.ssthresh, 5_500);
        assert_eq!(c.cwnd, 5_500);
        c.on_timeout(4_000);
        assert_eq!(c.ssthresh, 2_000);
        assert_eq!(c.cwnd, 1_000);
    }

    #[test]
    fn scaled_increase_grows_g_segments_per_window() {
        for (rtt_ms, g) in [(600u64, 4.0f64), (150, 0.25), (300, 1.0)] {
            let mut cfg = TcpConfig::profile("paper").unwrap();
            cfg.ca_increase = CaIncrease::AggregateFair {
                rtt_av: Span(Duration::from_millis(300)),
            };
            let mut c = Cc::new(&cfg, 1000);
            c.cwnd = 20_000;
            c.ssthresh = 10_000;
            // One window of ACKs (20 ACKs of one segment each).
            for _ in 0..20 {
                c.on_ack(Instant::ZERO, 1000, Some(Duration::from_millis(rtt_ms)));
            }
            let grown = (c.cwnd - 20_000) as f64 / 1000.0;
            assert!(
                (grown - g).abs() <= 0.2 * g.max(1.0),
                "rtt {rtt_ms}: {grown} vs {g}"
            );
        }
        // Never more than one MSS per ACK, however large g is.
        let mut cfg = TcpConfig::profile("paper").unwrap();
        cfg.ca_increase = CaIncrease::ConstantRate { a: 1e6 };
        let mut c = Cc::new(&cfg, 1000);
        c.cwnd = 4_000;
        c.ssthresh = 2_000;
        c.on_ack(Instant::ZERO, 1000, Some(Duration::from_millis(100)));
        assert_eq!(c.cwnd, 5_000);
    }

    #[test]
    fn cubic_fast_convergence_compares_with_the_last_w_max() {
        let mut c = cc("linux");
        c.cwnd = 100_000;
        c.ssthresh = 50_000;
        c.on_congestion(100_000);
        assert!((c.w_max - 100.0).abs() < 1e-9, "{}", c.w_max);
        // Below the last W_max: fast convergence releases bandwidth.
        c.cwnd = 90_000;
        c.on_congestion(90_000);
        assert!((c.w_max - 76.5).abs() < 1e-9, "{}", c.w_max);
        // 80 segments is above the last W_max (76.5): W_max = 80 (comparing with the
        // unreduced 90 would have cut it to 68).
        c.cwnd = 80_000;
        c.on_congestion(80_000);
        assert!((c.w_max - 80.0).abs() < 1e-9, "{}", c.w_max);
    }

    /// ACK one segment at a time, a window per `rtt`, until `until`.
    fn grow(c: &mut Cc, now: &mut Instant, until: Instant, rtt: Duration) {
        while *now < until {
            let segs = (c.cwnd / 1000).max(1) as u32;
            *now += rtt / segs;
            c.on_ack(*now, 1000, Some(rtt));
        }
    }

    #[test]
    fn rfc_cubic_alpha_becomes_one_once_w_est_reaches_the_prior_cwnd() {
        // 10 ms RTT: the Reno-friendly estimate, not the cubic curve, sets the window.
        let growth = |profile: &str| {
            let mut cfg = TcpConfig::profile(profile).unwrap();
            cfg.cc = CcAlgo::Cubic;
            let mut c = Cc::new(&cfg, 1000);
            c.cwnd = 100_000;
            c.ssthresh = 50_000;
            c.on_congestion(100_000); // cwnd 70 segments, cwnd_prior 100
            let rtt = Duration::from_millis(10);
            let mut now = Instant::ZERO;
            // W_est climbs from 70 to 100 in 30 / 0.53 = 57 RTTs (0.57 s).
            grow(&mut c, &mut now, Instant::from_millis(800), rtt);
            let w0 = c.cwnd;
            grow(&mut c, &mut now, Instant::from_millis(1000), rtt);
            (c.cwnd - w0) as f64 / 1000.0
        };
        let (rfc, linux) = (growth("rfc"), growth("linux"));
        assert!((rfc - 20.0).abs() < 2.0, "rfc: {rfc} segments in 20 RTTs");
        assert!(
            (linux - 20.0 * 0.3 * 3.0 / 1.7).abs() < 2.0,
            "linux: {linux} segments in 20 RTTs"
        );
    }

    #[test]
    fn cubic_reduces_by_beta_and_regrows_toward_wmax() {
        let mut c = cc("linux");
        c.cwnd = 100_000;
        c.ssthresh = 50_000;
        c.on_congestion(100_000);
        assert_eq!(c.cwnd, 70_000);
        let mut now = Instant::ZERO;
        for _ in 0..2000 {
            now += Duration::from_millis(1);
            c.on_ack(now, 1000, Some(Duration::from_millis(50)));
        }
        assert!(c.cwnd > 90_000, "{}", c.cwnd);
    }
}
