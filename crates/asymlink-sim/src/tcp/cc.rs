//! Congestion window arithmetic: slow start, congestion avoidance (Reno, CUBIC), and the
//! reductions on loss and ECN. Loss *detection* and *recovery* live in the connection.

use super::config::{CaIncrease, CcAlgo, SsGrowth, TcpConfig};
use asymlink_core::time::{Duration, Instant};
#[cfg(test)]
use asymlink_core::units::Span;

/// CUBIC constants (RFC 9438 §4.1): C = 0.4, β = 0.7.
const CUBIC_C: f64 = 0.4;
const CUBIC_BETA: f64 = 0.7;

/// HyStart (Linux `tcp_cubic.c`, as in 6.x): no detection below this window (segments).
const HYSTART_LOW_WINDOW: u64 = 16;
/// RTT samples per round before the delay detector may fire.
const HYSTART_MIN_SAMPLES: u32 = 8;
/// ACKs closer than this continue an ACK train.
const HYSTART_ACK_DELTA: Duration = Duration::from_millis(2);
/// The delay detector's threshold: clamp(min RTT / 8, 4 ms, 16 ms).
const HYSTART_DELAY_MIN: Duration = Duration::from_millis(4);
const HYSTART_DELAY_MAX: Duration = Duration::from_millis(16);

/// Which HyStart detector ended slow start.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HyStartExit {
    /// The round's ACK train lasted more than half the minimum RTT.
    AckTrain,
    /// The round's RTT rose above the minimum by the delay threshold.
    Delay,
}

/// HyStart's state: the minimum RTT and the current round (Linux's `bictcp` fields
/// `delay_min`, `round_start`, `end_seq`, `last_ack`, `curr_rtt`, `sample_cnt`, `found`).
#[derive(Clone, Debug)]
struct HyStart {
    found: bool,
    delay_min: Option<Duration>,
    round_start: Instant,
    /// The round ends when `snd_una` passes this (what was sent when it began).
    end_seq: u64,
    last_ack: Instant,
    curr_rtt: Option<Duration>,
    sample_cnt: u32,
}

impl HyStart {
    fn new() -> HyStart {
        HyStart {
            found: false,
            delay_min: None,
            round_start: Instant::ZERO,
            end_seq: 0,
            last_ack: Instant::ZERO,
            curr_rtt: None,
            sample_cnt: 0,
        }
    }

    /// Linux `bictcp_hystart_reset`: a new round starts now.
    fn new_round(&mut self, now: Instant, snd_nxt: u64) {
        self.round_start = now;
        self.last_ack = now;
        self.end_seq = snd_nxt;
        self.curr_rtt = None;
        self.sample_cnt = 0;
    }
}

/// What the sender knows when an ACK brings an RTT sample (for HyStart).
#[derive(Clone, Copy, Debug)]
pub struct AckSample {
    /// RTT of the most recently sent segment this ACK acknowledges (none if it covers a
    /// retransmission), Linux's `ca_rtt_us`.
    pub rtt: Duration,
    /// Cumulative acknowledgment after this ACK.
    pub snd_una: u64,
    /// Next new sequence offset to send.
    pub snd_nxt: u64,
    /// Smoothed RTT (for the pacing-rate term of the ACK-train threshold).
    pub srtt: Option<Duration>,
    /// Whether the sender paces (Linux does not halve the ACK-train threshold then).
    pub paced: bool,
}

/// Window state in bytes.
///
/// `repr(C)`: the fields every ACK reads come first (see [`super::Connection`]'s layout).
#[derive(Clone, Debug)]
#[repr(C)]
pub struct Cc {
    /// Congestion window (bytes).
    pub cwnd: u64,
    /// Slow-start threshold (bytes).
    pub ssthresh: u64,
    mss: u64,
    /// Fractional CA growth carried between ACKs (bytes × mss, Reno).
    ca_acc: u64,
    algo: CcAlgo,
    growth: SsGrowth,
    increase: CaIncrease,
    alpha_switch: bool,
    // CUBIC state (segments, seconds)
    w_max: f64,
    /// cwnd just before the last reduction (RFC 9438's cwnd_prior).
    cwnd_prior: f64,
    epoch_start: Option<Instant>,
    k: f64,
    w_est: f64,
    hystart: Option<HyStart>,
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
            hystart: (cfg.hystart && cfg.cc == CcAlgo::Cubic).then(HyStart::new),
        }
    }

    /// An ACK of new data brought an RTT sample (Linux `cubictcp_acked`): track the
    /// minimum RTT and, in slow start, run HyStart's detectors (`hystart_update`). When
    /// one fires, ssthresh = cwnd ends slow start before any loss.
    pub fn on_rtt_sample(&mut self, now: Instant, s: AckSample) -> Option<HyStartExit> {
        let in_ss = self.in_slow_start();
        let cwnd_segs = self.cwnd / self.mss;
        let epoch_start = self.epoch_start;
        let h = self.hystart.as_mut()?;
        // Discard delay samples right after a reduction (for a second, as Linux).
        if epoch_start.is_some_and(|e| now - e < Duration::from_secs(1)) {
            return None;
        }
        let delay = s.rtt.max(Duration::from_micros(1));
        if h.delay_min.is_none_or(|m| delay < m) {
            h.delay_min = Some(delay);
        }
        if h.found || !in_ss {
            return None;
        }
        if s.snd_una > h.end_seq {
            h.new_round(now, s.snd_nxt);
        }
        if cwnd_segs < HYSTART_LOW_WINDOW {
            return None;
        }
        let delay_min = h.delay_min.unwrap_or(delay);
        let mut exit = None;
        // ACK train: ACKs no more than 2 ms apart since the round began, for longer than
        // half the minimum RTT (plus the pacing allowance `hystart_ack_delay`).
        if now - h.last_ack <= HYSTART_ACK_DELTA {
            h.last_ack = now;
            let mut threshold = delay_min + hystart_ack_delay(self.cwnd, s.srtt);
            if !s.paced {
                threshold /= 2;
            }
            if now - h.round_start > threshold {
                exit = Some(HyStartExit::AckTrain);
            }
        }
        // Delay increase: the round's smallest RTT over its first 8 samples (and after).
        let curr = h.curr_rtt.map_or(delay, |c| c.min(delay));
        h.curr_rtt = Some(curr);
        if h.sample_cnt < HYSTART_MIN_SAMPLES {
            h.sample_cnt += 1;
        } else if exit.is_none() {
            let thresh = (delay_min / 8).clamp(HYSTART_DELAY_MIN, HYSTART_DELAY_MAX);
            if curr > delay_min + thresh {
                exit = Some(HyStartExit::Delay);
            }
        }
        if exit.is_some() {
            h.found = true;
            self.ssthresh = self.cwnd;
        }
        exit
    }

    /// Whether in slow start.
    pub fn in_slow_start(&self) -> bool {
        self.cwnd < self.ssthresh
    }

    /// An ACK acknowledged `acked` new bytes (outside recovery).
    pub fn on_ack(&mut self, now: Instant, acked: u64, srtt: Option<Duration>) {
        if acked == 0 || self.algo == CcAlgo::Bbr {
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
            // BBR keeps cwnd and ssthresh (Linux `bbr_ssthresh`): it sets cwnd itself at
            // the next ACK.
            CcAlgo::Bbr => return,
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
        if self.algo == CcAlgo::Bbr {
            // Linux `tcp_enter_loss`: cwnd = in flight + 1 (nothing is in flight once all
            // is marked lost); ssthresh stays.
            self.cwnd = self.mss;
            return;
        }
        self.on_congestion(flight);
        self.cwnd = self.mss;
        self.epoch_start = None;
        // Linux resets CUBIC, HyStart included, on entering the Loss state.
        if let Some(h) = self.hystart.as_mut() {
            *h = HyStart::new();
        }
    }

    /// Data follows an idle period of `idle` (longer than `rto`): restart from at most the
    /// initial window `iw` (RFC 5681 §4.1), or as Linux's `tcp_cwnd_restart` when `linux`.
    /// CUBIC starts a new epoch from the restarted window.
    //= https://www.rfc-editor.org/rfc/rfc5681#section-4.1
    //# Therefore, a TCP SHOULD set cwnd to no more than RW before beginning
    //# transmission if the TCP has not sent data in an interval exceeding
    //# the retransmission timeout.
    pub fn restart_after_idle(&mut self, linux: bool, idle: Duration, rto: Duration, iw: u64) {
        if self.algo == CcAlgo::Bbr {
            // Linux skips `tcp_cwnd_restart` for a congestion control that sets cwnd
            // itself; BBR restarts from idle on its own (`CA_EVENT_TX_START`).
            return;
        }
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

    /// HyStart's minimum RTT (`None` without HyStart or before a sample).
    pub fn hystart_min_rtt(&self) -> Option<Duration> {
        self.hystart.as_ref()?.delay_min
    }
}

/// Linux `hystart_ack_delay`: how long pacing may stretch an ACK train, 4 GSO-sized
/// bursts (64 KiB each) at the pacing rate (twice cwnd/SRTT in slow start), at most 1 ms.
fn hystart_ack_delay(cwnd: u64, srtt: Option<Duration>) -> Duration {
    let Some(srtt) = srtt.filter(|d| !d.is_zero()) else {
        return Duration::ZERO;
    };
    let rate = 2.0 * cwnd as f64 / srtt.as_secs_f64(); // bytes/s
    let d = Duration::from_secs_f64(4.0 * 65_536.0 / rate);
    d.min(Duration::from_millis(1))
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

    fn sample(rtt_ms: u64, snd_una: u64, snd_nxt: u64) -> AckSample {
        AckSample {
            rtt: Duration::from_millis(rtt_ms),
            snd_una,
            snd_nxt,
            srtt: Some(Duration::from_millis(rtt_ms)),
            paced: false,
        }
    }

    #[test]
    fn hystart_needs_a_window_of_16_segments() {
        let mut c = cc("linux");
        assert_eq!(c.cwnd, 10_000);
        // A huge delay increase, but the window is below hystart_low_window.
        assert_eq!(c.on_rtt_sample(Instant::ZERO, sample(20, 1, 10_001)), None);
        for i in 1..20 {
            let t = Instant::from_millis(10 * i);
            assert_eq!(c.on_rtt_sample(t, sample(200, 1 + i, 10_001)), None);
        }
        assert!(c.in_slow_start());
        assert_eq!(c.hystart_min_rtt(), Some(Duration::from_millis(20)));
        // Off in the other profiles.
        let mut r = cc("rfc");
        r.cwnd = 100_000;
        assert_eq!(r.on_rtt_sample(Instant::ZERO, sample(20, 1, 2)), None);
        assert_eq!(r.hystart_min_rtt(), None);
    }

    #[test]
    fn hystart_delay_detector_fires_on_the_ninth_sample_of_a_round() {
        let mut c = cc("linux");
        c.cwnd = 20_000;
        // Round 1 sets the minimum: 40 ms (threshold clamp(40/8, 4, 16) = 5 ms).
        let mut now = Instant::from_millis(100);
        assert_eq!(c.on_rtt_sample(now, sample(40, 1, 20_001)), None);
        // Round 2 (snd_una passes 20 001): samples 3 ms apart (no ACK train), RTT 45 ms
        // is not above 40 + 5.
        for k in 0..12u64 {
            now += Duration::from_millis(3);
            let s = sample(45, 20_002 + k * 1000, 40_001);
            assert_eq!(c.on_rtt_sample(now, s), None, "sample {k}");
        }
        // Round 3: 46 ms is; the first 8 samples only take the round's minimum.
        for k in 0..8u64 {
            now += Duration::from_millis(3);
            let s = sample(46, 40_002 + k * 1000, 60_001);
            assert_eq!(c.on_rtt_sample(now, s), None, "sample {k}");
        }
        now += Duration::from_millis(3);
        let exit = c.on_rtt_sample(now, sample(46, 48_002, 60_001));
        assert_eq!(exit, Some(HyStartExit::Delay));
        assert_eq!(c.ssthresh, c.cwnd, "slow start ends at the current window");
        assert!(!c.in_slow_start());
        // Once found, HyStart stays quiet until a timeout resets it.
        c.ssthresh = u64::MAX / 4;
        now += Duration::from_millis(3);
        assert_eq!(c.on_rtt_sample(now, sample(100, 49_002, 60_001)), None);
        c.on_timeout(20_000);
        assert_eq!(c.hystart_min_rtt(), None);
    }

    #[test]
    fn hystart_ack_train_fires_after_half_the_minimum_rtt() {
        let mut c = cc("linux");
        c.cwnd = 30_000;
        let mut now = Instant::from_millis(100);
        c.on_rtt_sample(now, sample(20, 1, 30_001));
        // The next round: ACKs 1 ms apart at a constant 20 ms RTT (no delay increase).
        // Threshold (20 ms + 1 ms pacing allowance) / 2 = 10.5 ms after the round began.
        now += Duration::from_millis(20);
        assert_eq!(c.on_rtt_sample(now, sample(20, 30_002, 60_001)), None);
        let start = now;
        let mut exit = None;
        while exit.is_none() && now - start < Duration::from_millis(30) {
            now += Duration::from_millis(1);
            exit = c.on_rtt_sample(now, sample(20, 30_003, 60_001));
        }
        assert_eq!(exit, Some(HyStartExit::AckTrain));
        assert_eq!(now - start, Duration::from_millis(11));
        assert_eq!(c.ssthresh, 30_000);
        // ACKs 3 ms apart are no train: a fresh window stays in slow start.
        let mut c = cc("linux");
        c.cwnd = 30_000;
        let mut now = Instant::from_millis(100);
        c.on_rtt_sample(now, sample(20, 1, 30_001));
        for _ in 0..20 {
            now += Duration::from_millis(3);
            assert_eq!(c.on_rtt_sample(now, sample(20, 30_002, 60_001)), None);
        }
        assert!(c.in_slow_start());
    }
}
