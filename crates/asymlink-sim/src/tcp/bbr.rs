//! BBR congestion control, version 1, as Linux mainline's `tcp_bbr.c` (`cc = "bbr"`).
//!
//! Principles. BBR models the path by two numbers: the bottleneck bandwidth (the
//! maximum of the delivery-rate samples over the last 10 round trips) and the round-trip
//! propagation time (the minimum RTT over the last 10 seconds). It paces at a gain times
//! the bandwidth and caps what is in flight at a gain times their product (the BDP):
//!
//! * STARTUP: pacing and cwnd gain 2/ln 2 ≈ 2.885, until the bandwidth stops growing by
//!   25 % for three rounds (the pipe is full);
//! * DRAIN: pacing gain 1/2.885 until what is in flight falls to one BDP;
//! * PROBE_BW: an eight-phase cycle of pacing gains 1.25, 0.75, 1, 1, 1, 1, 1, 1 (each
//!   phase about one minimum RTT; the first phase drawn at random, never the 0.75 one),
//!   cwnd gain 2;
//! * PROBE_RTT: when the minimum RTT has not been refreshed for 10 s, cwnd 4 segments for
//!   200 ms and one round, then back.
//!
//! On losses it keeps packet conservation for the first round of a recovery, and the
//! long-term sampling detects a token-bucket policer (loss rate ≥ 20 % over 4–16 rounds
//! with consistent bandwidth) and then paces at the policed rate for 48 rounds.
//!
//! Arithmetic follows Linux's fixed point: bandwidth in segments per microsecond scaled
//! by 2^24, gains scaled by 2^8, so the simulator's numbers are Linux's. Written from
//! the published algorithm and Linux's behaviour; no code is copied.

use super::conn::CaState;
use super::rate::RateSample;
use asymlink_core::time::{Duration, Instant};

/// Bandwidth scale: segments per µs × 2^24 (Linux `BW_SCALE`).
const BW_SCALE: u32 = 24;
const BW_UNIT: u64 = 1 << BW_SCALE;
/// Gain scale (Linux `BBR_SCALE`).
const BBR_SCALE: u32 = 8;
/// Gain 1.0.
pub const BBR_UNIT: u32 = 1 << BBR_SCALE;

/// Rounds the max-bandwidth filter covers (cycle length + 2).
const BW_RTTS: u32 = CYCLE_LEN as u32 + 2;
/// The min-RTT filter's window.
const MIN_RTT_WIN: Duration = Duration::from_secs(10);
/// Time spent in PROBE_RTT (at least).
const PROBE_RTT_TIME: Duration = Duration::from_millis(200);
/// Below this pacing rate (bytes/s) a burst may be a single segment (1.2 Mbit/s).
const MIN_TSO_RATE: u64 = 1_200_000 / 8;
/// Pace 1 % below the estimated bandwidth.
const PACING_MARGIN_PERCENT: u64 = 1;
/// 2/ln 2, scaled, rounded up.
const HIGH_GAIN: u32 = BBR_UNIT * 2885 / 1000 + 1;
/// Its inverse, for DRAIN.
const DRAIN_GAIN: u32 = BBR_UNIT * 1000 / 2885;
/// cwnd gain in PROBE_BW.
const CWND_GAIN: u32 = BBR_UNIT * 2;
const CYCLE_LEN: usize = 8;
/// PROBE_BW's pacing gains.
const PACING_GAIN: [u32; CYCLE_LEN] = [
    BBR_UNIT * 5 / 4,
    BBR_UNIT * 3 / 4,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
    BBR_UNIT,
];
/// The random start phase is drawn from this many (all but the 0.75 phase).
const CYCLE_RAND: u64 = 7;
/// Minimum cwnd (segments), and cwnd in PROBE_RTT.
const CWND_MIN_TARGET: u64 = 4;
/// Full bandwidth: growth below 25 % ...
const FULL_BW_THRESH: u64 = BBR_UNIT as u64 * 5 / 4;
/// ... for this many rounds.
const FULL_BW_CNT: u32 = 3;
/// Long-term sampling: intervals of at least 4 rounds ...
const LT_INTVL_MIN_RTTS: u32 = 4;
/// ... with a loss rate of at least 50/256 ≈ 20 % ...
const LT_LOSS_THRESH: u64 = 50;
/// ... and two intervals' bandwidths within 1/8 ...
const LT_BW_RATIO: u64 = BBR_UNIT as u64 / 8;
/// ... or 4 kbit/s (bytes/s) of each other.
const LT_BW_DIFF: u64 = 4000 / 8;
/// Rounds the policed rate is used before probing again.
const LT_BW_MAX_RTTS: u32 = 48;
/// ACK aggregation: gain on the extra acknowledged data ...
const EXTRA_ACKED_GAIN: u64 = BBR_UNIT as u64;
/// ... its filter's window in rounds ...
const EXTRA_ACKED_WIN_RTTS: u32 = 5;
/// ... the epoch's reset threshold ...
const ACK_EPOCH_ACKED_RESET: u64 = 1 << 20;
/// ... and the most it may add, as time at the bandwidth (µs).
const EXTRA_ACKED_MAX_US: u64 = 100_000;
/// Linux `TCP_INIT_CWND`.
const INIT_CWND: u64 = 10;
/// Largest GSO packet less headers (`GSO_LEGACY_MAX_SIZE - 1 - MAX_TCP_HEADER`).
const GSO_MAX_BYTES: u64 = 65_536 - 1 - 320;

/// BBR's state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Ramp up to fill the pipe.
    Startup,
    /// Drain the queue STARTUP built.
    Drain,
    /// Cruise, probing for more bandwidth once per cycle.
    ProbeBw,
    /// Refresh the minimum RTT with a small window.
    ProbeRtt,
}

/// BBR's bandwidth filter: the core's windowed maximum over round trips.
pub use asymlink_core::estimator::WinMax as MaxFilter;

/// What the connection knows at an ACK, for BBR.
#[derive(Clone, Copy, Debug)]
pub struct AckCtx {
    /// Now.
    pub now: Instant,
    /// Segments delivered so far (Linux `tp->delivered`).
    pub delivered: u64,
    /// When the last delivery happened (Linux `tp->delivered_mstamp`).
    pub delivered_time: Instant,
    /// Segments ever marked lost (Linux `tp->lost`).
    pub lost: u64,
    /// Segments in flight after the ACK (Linux `tcp_packets_in_flight`).
    pub in_flight: u64,
    /// The sender's congestion state.
    pub ca_state: CaState,
    /// Current cwnd (segments).
    pub cwnd: u64,
    /// Smoothed RTT.
    pub srtt: Option<Duration>,
    /// Earliest departure time of the next paced segment (Linux `tcp_wstamp_ns`).
    pub edt: Instant,
}

/// BBR's answer to an ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckOut {
    /// New cwnd (segments).
    pub cwnd: u64,
    /// Pacing rate (bytes per second).
    pub pacing_rate: u64,
    /// Mark the flow app-limited (PROBE_RTT: its low rate must not lower the bandwidth
    /// estimate).
    pub mark_app_limited: bool,
}

/// What BBR shows of itself (Linux `tcp_bbr_info` and more).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BbrInfo {
    /// State.
    pub mode: Mode,
    /// Bandwidth estimate, bytes per second.
    pub bw: u64,
    /// Minimum RTT estimate.
    pub min_rtt: Option<Duration>,
    /// Pacing and cwnd gains (×256).
    pub pacing_gain: u32,
    /// cwnd gain (×256).
    pub cwnd_gain: u32,
    /// PROBE_BW cycle phase.
    pub cycle_idx: usize,
    /// PROBE_RTT episodes so far.
    pub probe_rtt_rounds: u64,
    /// When STARTUP found the pipe full (entered DRAIN).
    pub startup_exit: Option<Instant>,
    /// The first ACK BBR took (Linux: the first `bbr_main`, when `TCP_CC_INFO` first shows
    /// STARTUP's gains).
    pub started: Option<Instant>,
    /// Whether the policer's long-term rate is in use.
    pub lt_use_bw: bool,
    /// Round trips counted.
    pub rounds: u32,
}

/// BBR's state for one connection (Linux `struct bbr`).
#[derive(Clone, Debug)]
pub struct Bbr {
    mss: u64,
    max_pacing_rate: Option<u64>,
    rng: u64,
    mode: Mode,
    min_rtt_us: Option<u64>,
    min_rtt_stamp: Instant,
    probe_rtt_done_stamp: Option<Instant>,
    bw: MaxFilter,
    rtt_cnt: u32,
    next_rtt_delivered: u64,
    cycle_mstamp: Instant,
    prev_ca_state: CaState,
    packet_conservation: bool,
    round_start: bool,
    idle_restart: bool,
    probe_rtt_round_done: bool,
    lt_is_sampling: bool,
    lt_rtt_cnt: u32,
    lt_use_bw: bool,
    lt_bw: u64,
    lt_last_delivered: u64,
    lt_last_stamp_ms: u64,
    lt_last_lost: u64,
    pacing_gain: u32,
    cwnd_gain: u32,
    full_bw_reached: bool,
    full_bw_cnt: u32,
    cycle_idx: usize,
    has_seen_rtt: bool,
    prior_cwnd: u64,
    full_bw: u64,
    ack_epoch_mstamp: Instant,
    extra_acked: [u64; 2],
    ack_epoch_acked: u64,
    extra_acked_win_rtts: u32,
    extra_acked_win_idx: usize,
    pacing_rate: u64,
    /// ssthresh BBR sets on leaving STARTUP (segments; for observers, as Linux).
    pub ssthresh: Option<u64>,
    probe_rtt_rounds: u64,
    startup_exit: Option<Instant>,
    started: Option<Instant>,
}

fn us(d: Duration) -> u64 {
    (d.as_nanos() / 1000) as u64
}

fn state_rank(s: CaState) -> u8 {
    match s {
        CaState::Open => 0,
        CaState::Disorder => 1,
        CaState::Recovery => 3,
        CaState::Loss => 4,
    }
}

impl Bbr {
    /// A new BBR sender (Linux `bbr_init`) at `now` with MSS `mss`, the initial `cwnd`
    /// (segments) and what is known of the RTT; `seed` draws the PROBE_BW start phases.
    pub fn new(
        now: Instant,
        mss: u64,
        cwnd: u64,
        min_rtt: Option<Duration>,
        srtt: Option<Duration>,
        max_pacing_rate: Option<u64>,
        seed: u64,
    ) -> Bbr {
        let mut b = Bbr {
            mss: mss.max(1),
            max_pacing_rate,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            mode: Mode::Startup,
            min_rtt_us: min_rtt.map(us),
            min_rtt_stamp: now,
            probe_rtt_done_stamp: None,
            bw: MaxFilter::default(),
            rtt_cnt: 0,
            next_rtt_delivered: 0,
            cycle_mstamp: Instant::ZERO,
            prev_ca_state: CaState::Open,
            packet_conservation: false,
            round_start: false,
            idle_restart: false,
            probe_rtt_round_done: false,
            lt_is_sampling: false,
            lt_rtt_cnt: 0,
            lt_use_bw: false,
            lt_bw: 0,
            lt_last_delivered: 0,
            lt_last_stamp_ms: 0,
            lt_last_lost: 0,
            pacing_gain: HIGH_GAIN,
            cwnd_gain: HIGH_GAIN,
            full_bw_reached: false,
            full_bw_cnt: 0,
            cycle_idx: 0,
            has_seen_rtt: false,
            prior_cwnd: 0,
            full_bw: 0,
            ack_epoch_mstamp: now,
            extra_acked: [0; 2],
            ack_epoch_acked: 0,
            extra_acked_win_rtts: 0,
            extra_acked_win_idx: 0,
            pacing_rate: 0,
            ssthresh: None,
            probe_rtt_rounds: 0,
            startup_exit: None,
            started: None,
        };
        b.init_pacing_rate_from_rtt(cwnd, srtt);
        b
    }

    /// The pacing rate (bytes per second).
    pub fn pacing_rate(&self) -> u64 {
        self.pacing_rate
    }

    /// The state.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// What BBR shows of itself.
    pub fn info(&self) -> BbrInfo {
        BbrInfo {
            mode: self.mode,
            bw: self.rate_bytes_per_sec(self.bw(), BBR_UNIT, 100),
            min_rtt: self.min_rtt_us.map(Duration::from_micros),
            pacing_gain: self.pacing_gain,
            cwnd_gain: self.cwnd_gain,
            cycle_idx: self.cycle_idx,
            probe_rtt_rounds: self.probe_rtt_rounds,
            startup_exit: self.startup_exit,
            started: self.started,
            lt_use_bw: self.lt_use_bw,
            rounds: self.rtt_cnt,
        }
    }

    /// Segments per burst BBR asks for at least (Linux `bbr_min_tso_segs`).
    pub fn min_tso_segs(&self) -> u64 {
        if self.pacing_rate < MIN_TSO_RATE {
            1
        } else {
            2
        }
    }

    fn rand_below(&mut self, n: u64) -> u64 {
        // splitmix64
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        ((z >> 32) * n) >> 32
    }

    fn max_bw(&self) -> u64 {
        self.bw.get()
    }

    /// The bandwidth in use: the policer's long-term rate, or the max filter.
    fn bw(&self) -> u64 {
        if self.lt_use_bw {
            self.lt_bw
        } else {
            self.max_bw()
        }
    }

    fn extra_acked(&self) -> u64 {
        self.extra_acked[0].max(self.extra_acked[1])
    }

    /// bw × MSS × gain in bytes per second, less `margin`'s complement (Linux
    /// `bbr_rate_bytes_per_sec` with margin 99 %).
    fn rate_bytes_per_sec(&self, bw: u64, gain: u32, percent: u64) -> u64 {
        let r = (bw as u128 * self.mss as u128 * gain as u128) >> BBR_SCALE;
        let r = r * (1_000_000 / 100 * percent) as u128;
        u64::try_from(r >> BW_SCALE).unwrap_or(u64::MAX)
    }

    fn bw_to_pacing_rate(&self, bw: u64, gain: u32) -> u64 {
        let r = self.rate_bytes_per_sec(bw, gain, 100 - PACING_MARGIN_PERCENT);
        self.max_pacing_rate.map_or(r, |m| r.min(m))
    }

    fn init_pacing_rate_from_rtt(&mut self, cwnd: u64, srtt: Option<Duration>) {
        let rtt_us = match srtt {
            Some(s) => {
                self.has_seen_rtt = true;
                us(s).max(1)
            }
            None => 1000,
        };
        let bw = cwnd * BW_UNIT / rtt_us;
        self.pacing_rate = self.bw_to_pacing_rate(bw, HIGH_GAIN);
    }

    fn set_pacing_rate(&mut self, bw: u64, gain: u32, cwnd: u64, srtt: Option<Duration>) {
        let rate = self.bw_to_pacing_rate(bw, gain);
        if !self.has_seen_rtt && srtt.is_some() {
            self.init_pacing_rate_from_rtt(cwnd, srtt);
        }
        if self.full_bw_reached || rate > self.pacing_rate {
            self.pacing_rate = rate;
        }
    }

    fn tso_segs_goal(&self) -> u64 {
        let bytes = (self.pacing_rate >> 10).min(GSO_MAX_BYTES);
        (bytes / self.mss).max(self.min_tso_segs()).min(0x7f)
    }

    fn save_cwnd(&mut self, cwnd: u64) {
        if state_rank(self.prev_ca_state) < state_rank(CaState::Recovery)
            && self.mode != Mode::ProbeRtt
        {
            self.prior_cwnd = cwnd;
        } else {
            self.prior_cwnd = self.prior_cwnd.max(cwnd);
        }
    }

    /// Transmission starts after the flow was idle and app-limited (Linux
    /// `CA_EVENT_TX_START`).
    pub fn on_tx_start(&mut self, now: Instant, cwnd: u64, srtt: Option<Duration>) -> Option<u64> {
        self.idle_restart = true;
        self.ack_epoch_mstamp = now;
        self.ack_epoch_acked = 0;
        match self.mode {
            Mode::ProbeBw => {
                self.set_pacing_rate(self.bw(), BBR_UNIT, cwnd, srtt);
                None
            }
            Mode::ProbeRtt => self.check_probe_rtt_done(now, cwnd),
            _ => None,
        }
    }

    fn bdp(&self, bw: u64, gain: u32) -> u64 {
        let Some(min_rtt) = self.min_rtt_us else {
            return INIT_CWND;
        };
        let w = bw as u128 * min_rtt as u128;
        let bdp = ((w * gain as u128) >> BBR_SCALE).div_ceil(BW_UNIT as u128);
        u64::try_from(bdp).unwrap_or(u64::MAX)
    }

    fn quantization_budget(&self, cwnd: u64) -> u64 {
        let mut cwnd = cwnd + 3 * self.tso_segs_goal();
        cwnd = (cwnd + 1) & !1;
        if self.mode == Mode::ProbeBw && self.cycle_idx == 0 {
            cwnd += 2;
        }
        cwnd
    }

    fn inflight(&self, bw: u64, gain: u32) -> u64 {
        self.quantization_budget(self.bdp(bw, gain))
    }

    /// What will be in the network when the next paced segment leaves: what is in flight
    /// now, less what the bandwidth delivers until then (Linux
    /// `bbr_packets_in_net_at_edt`).
    fn packets_in_net_at_edt(&self, inflight_now: u64, now: Instant, edt: Instant) -> u64 {
        let interval_us = us(edt.max(now) - now);
        let delivered = ((self.bw() as u128 * interval_us as u128) >> BW_SCALE) as u64;
        let mut at_edt = inflight_now;
        if self.pacing_gain > BBR_UNIT {
            at_edt += self.tso_segs_goal();
        }
        at_edt.saturating_sub(delivered)
    }

    fn ack_aggregation_cwnd(&self) -> u64 {
        if EXTRA_ACKED_GAIN == 0 || !self.full_bw_reached {
            return 0;
        }
        let max_aggr = (self.bw() as u128 * EXTRA_ACKED_MAX_US as u128 / BW_UNIT as u128) as u64;
        ((EXTRA_ACKED_GAIN * self.extra_acked()) >> BBR_SCALE).min(max_aggr)
    }

    /// Packet conservation in the first round of a recovery, the saved cwnd back after it
    /// (Linux `bbr_set_cwnd_to_recover_or_restore`). Returns the cwnd and whether it is
    /// final.
    fn recover_or_restore(&mut self, rs: &RateSample, c: &AckCtx, acked: u64) -> (u64, bool) {
        let (prev, state) = (self.prev_ca_state, c.ca_state);
        let mut cwnd = c.cwnd;
        if rs.losses > 0 {
            cwnd = cwnd.saturating_sub(rs.losses).max(1);
        }
        let rec = state_rank(CaState::Recovery);
        if state == CaState::Recovery && prev != CaState::Recovery {
            self.packet_conservation = true;
            self.next_rtt_delivered = c.delivered;
            cwnd = c.in_flight + acked;
        } else if state_rank(prev) >= rec && state_rank(state) < rec {
            cwnd = cwnd.max(self.prior_cwnd);
            self.packet_conservation = false;
        }
        self.prev_ca_state = state;
        if self.packet_conservation {
            return (cwnd.max(c.in_flight + acked), true);
        }
        (cwnd, false)
    }

    fn set_cwnd(&mut self, rs: &RateSample, c: &AckCtx, bw: u64, gain: u32) -> u64 {
        let acked = rs.acked_sacked;
        let mut cwnd = c.cwnd;
        if acked > 0 {
            let (w, done) = self.recover_or_restore(rs, c, acked);
            cwnd = w;
            if !done {
                let mut target = self.bdp(bw, gain);
                target += self.ack_aggregation_cwnd();
                target = self.quantization_budget(target);
                if self.full_bw_reached {
                    cwnd = (cwnd + acked).min(target);
                } else if cwnd < target || c.delivered < INIT_CWND {
                    cwnd += acked;
                }
                cwnd = cwnd.max(CWND_MIN_TARGET);
            }
        }
        if self.mode == Mode::ProbeRtt {
            cwnd = cwnd.min(CWND_MIN_TARGET);
        }
        cwnd
    }

    fn is_next_cycle_phase(&self, rs: &RateSample, c: &AckCtx) -> bool {
        let full_length = self
            .min_rtt_us
            .is_none_or(|m| us(c.delivered_time.saturating_since(self.cycle_mstamp)) > m);
        if self.pacing_gain == BBR_UNIT {
            return full_length;
        }
        let inflight = self.packets_in_net_at_edt(rs.prior_in_flight, c.now, c.edt);
        let bw = self.max_bw();
        if self.pacing_gain > BBR_UNIT {
            // Probing: until a round passed and the pipe holds gain × BDP, or a loss says
            // it is full.
            return full_length
                && (rs.losses > 0 || inflight >= self.inflight(bw, self.pacing_gain));
        }
        // Draining: until a round passed or the queue is gone.
        full_length || inflight <= self.inflight(bw, BBR_UNIT)
    }

    fn advance_cycle_phase(&mut self, delivered_time: Instant) {
        self.cycle_idx = (self.cycle_idx + 1) % CYCLE_LEN;
        self.cycle_mstamp = delivered_time;
    }

    fn reset_probe_bw_mode(&mut self, delivered_time: Instant) {
        self.mode = Mode::ProbeBw;
        self.cycle_idx = CYCLE_LEN - 1 - self.rand_below(CYCLE_RAND) as usize;
        self.advance_cycle_phase(delivered_time);
    }

    fn reset_mode(&mut self, delivered_time: Instant) {
        if self.full_bw_reached {
            self.reset_probe_bw_mode(delivered_time);
        } else {
            self.mode = Mode::Startup;
        }
    }

    fn reset_lt_interval(&mut self, delivered: u64, lost: u64, delivered_time: Instant) {
        self.lt_last_stamp_ms = delivered_time.as_nanos() / 1_000_000;
        self.lt_last_delivered = delivered;
        self.lt_last_lost = lost;
        self.lt_rtt_cnt = 0;
    }

    fn reset_lt(&mut self, delivered: u64, lost: u64, delivered_time: Instant) {
        self.lt_bw = 0;
        self.lt_use_bw = false;
        self.lt_is_sampling = false;
        self.reset_lt_interval(delivered, lost, delivered_time);
    }

    /// An interval of long-term sampling ended with bandwidth `bw`: if it agrees with
    /// the last one, a policer is at work — use their mean.
    fn lt_interval_done(&mut self, bw: u64, delivered: u64, lost: u64, delivered_time: Instant) {
        if self.lt_bw != 0 {
            let diff = bw.abs_diff(self.lt_bw);
            if diff * BBR_UNIT as u64 <= LT_BW_RATIO * self.lt_bw
                || self.rate_bytes_per_sec(diff, BBR_UNIT, 100) <= LT_BW_DIFF
            {
                self.lt_bw = (bw + self.lt_bw) >> 1;
                self.lt_use_bw = true;
                self.pacing_gain = BBR_UNIT;
                self.lt_rtt_cnt = 0;
                return;
            }
        }
        self.lt_bw = bw;
        self.reset_lt_interval(delivered, lost, delivered_time);
    }

    /// Long-term bandwidth sampling (Linux `bbr_lt_bw_sampling`): detect a token-bucket
    /// policer from intervals with high loss and consistent delivery rate.
    fn lt_sampling(&mut self, rs: &RateSample, c: &AckCtx) {
        let (delivered, lost, dt) = (c.delivered, c.lost, c.delivered_time);
        if self.lt_use_bw {
            if self.mode == Mode::ProbeBw && self.round_start {
                self.lt_rtt_cnt += 1;
                if self.lt_rtt_cnt >= LT_BW_MAX_RTTS {
                    self.reset_lt(delivered, lost, dt);
                    self.reset_probe_bw_mode(dt);
                }
            }
            return;
        }
        if !self.lt_is_sampling {
            if rs.losses == 0 {
                return;
            }
            self.reset_lt_interval(delivered, lost, dt);
            self.lt_is_sampling = true;
        }
        if rs.is_app_limited {
            self.reset_lt(delivered, lost, dt);
            return;
        }
        if self.round_start {
            self.lt_rtt_cnt += 1;
        }
        if self.lt_rtt_cnt < LT_INTVL_MIN_RTTS {
            return;
        }
        if self.lt_rtt_cnt > 4 * LT_INTVL_MIN_RTTS {
            self.reset_lt(delivered, lost, dt);
            return;
        }
        if rs.losses == 0 {
            return;
        }
        let lost_n = lost - self.lt_last_lost;
        let delivered_n = delivered - self.lt_last_delivered;
        if delivered_n == 0 || (lost_n << BBR_SCALE) < LT_LOSS_THRESH * delivered_n {
            return;
        }
        let t_ms = (dt.as_nanos() / 1_000_000).saturating_sub(self.lt_last_stamp_ms);
        if t_ms < 1 {
            return;
        }
        let bw = delivered_n * BW_UNIT / (t_ms * 1000);
        self.lt_interval_done(bw, delivered, lost, dt);
    }

    fn update_bw(&mut self, rs: &RateSample, c: &AckCtx) {
        self.round_start = false;
        let (Some(delivered), Some(interval)) = (rs.delivered, rs.interval) else {
            return;
        };
        if rs.prior_delivered >= self.next_rtt_delivered {
            self.next_rtt_delivered = c.delivered;
            self.rtt_cnt += 1;
            self.round_start = true;
            self.packet_conservation = false;
        }
        self.lt_sampling(rs, c);
        let bw = delivered * BW_UNIT / us(interval).max(1);
        if !rs.is_app_limited || bw >= self.max_bw() {
            self.bw
                .update(u64::from(BW_RTTS), u64::from(self.rtt_cnt), bw);
        }
    }

    fn update_ack_aggregation(&mut self, rs: &RateSample, c: &AckCtx) {
        if rs.acked_sacked == 0 || rs.delivered.is_none() || rs.interval.is_none() {
            return;
        }
        if self.round_start {
            self.extra_acked_win_rtts = (self.extra_acked_win_rtts + 1).min(0x1f);
            if self.extra_acked_win_rtts >= EXTRA_ACKED_WIN_RTTS {
                self.extra_acked_win_rtts = 0;
                self.extra_acked_win_idx ^= 1;
                self.extra_acked[self.extra_acked_win_idx] = 0;
            }
        }
        let epoch_us = us(c.delivered_time.saturating_since(self.ack_epoch_mstamp));
        let mut expected = (self.bw() as u128 * epoch_us as u128 / BW_UNIT as u128) as u64;
        if self.ack_epoch_acked <= expected
            || self.ack_epoch_acked + rs.acked_sacked >= ACK_EPOCH_ACKED_RESET
        {
            self.ack_epoch_acked = 0;
            self.ack_epoch_mstamp = c.delivered_time;
            expected = 0;
        }
        self.ack_epoch_acked = (self.ack_epoch_acked + rs.acked_sacked).min(0xfffff);
        let extra = (self.ack_epoch_acked - expected).min(c.cwnd);
        let slot = &mut self.extra_acked[self.extra_acked_win_idx];
        if extra > *slot {
            *slot = extra;
        }
    }

    fn check_full_bw_reached(&mut self, rs: &RateSample) {
        if self.full_bw_reached || !self.round_start || rs.is_app_limited {
            return;
        }
        let thresh = (self.full_bw * FULL_BW_THRESH) >> BBR_SCALE;
        if self.max_bw() >= thresh {
            self.full_bw = self.max_bw();
            self.full_bw_cnt = 0;
            return;
        }
        self.full_bw_cnt += 1;
        self.full_bw_reached = self.full_bw_cnt >= FULL_BW_CNT;
    }

    fn check_drain(&mut self, c: &AckCtx) {
        if self.mode == Mode::Startup && self.full_bw_reached {
            self.mode = Mode::Drain;
            self.startup_exit.get_or_insert(c.now);
            self.ssthresh = Some(self.inflight(self.max_bw(), BBR_UNIT));
        }
        if self.mode == Mode::Drain
            && self.packets_in_net_at_edt(c.in_flight, c.now, c.edt)
                <= self.inflight(self.max_bw(), BBR_UNIT)
        {
            self.reset_probe_bw_mode(c.delivered_time);
        }
    }

    /// PROBE_RTT ends once its time and a round are over: cwnd back to what it was.
    fn check_probe_rtt_done(&mut self, now: Instant, cwnd: u64) -> Option<u64> {
        if self.probe_rtt_done_stamp.is_none_or(|d| now <= d) {
            return None;
        }
        self.min_rtt_stamp = now;
        self.reset_mode(now);
        Some(cwnd.max(self.prior_cwnd))
    }

    /// The min-RTT filter and PROBE_RTT (Linux `bbr_update_min_rtt`). Returns a cwnd to
    /// restore when PROBE_RTT ends, and whether to mark the flow app-limited.
    fn update_min_rtt(&mut self, rs: &RateSample, c: &AckCtx) -> (Option<u64>, bool) {
        let expired = c.now > self.min_rtt_stamp + MIN_RTT_WIN;
        if let Some(rtt) = rs.rtt {
            let rtt = us(rtt);
            if self.min_rtt_us.is_none_or(|m| rtt < m) || expired {
                self.min_rtt_us = Some(rtt);
                self.min_rtt_stamp = c.now;
            }
        }
        let mut restore = None;
        let mut mark = false;
        if expired && !self.idle_restart && self.mode != Mode::ProbeRtt {
            self.mode = Mode::ProbeRtt;
            self.probe_rtt_rounds += 1;
            self.save_cwnd(c.cwnd);
            self.probe_rtt_done_stamp = None;
        }
        if self.mode == Mode::ProbeRtt {
            // Ignore the low rate of PROBE_RTT in the bandwidth filter.
            mark = true;
            if self.probe_rtt_done_stamp.is_none() && c.in_flight <= CWND_MIN_TARGET {
                self.probe_rtt_done_stamp = Some(c.now + PROBE_RTT_TIME);
                self.probe_rtt_round_done = false;
                self.next_rtt_delivered = c.delivered;
            } else if self.probe_rtt_done_stamp.is_some() {
                if self.round_start {
                    self.probe_rtt_round_done = true;
                }
                if self.probe_rtt_round_done {
                    restore = self.check_probe_rtt_done(c.now, c.cwnd);
                }
            }
        }
        if rs.delivered.is_some_and(|d| d > 0) {
            self.idle_restart = false;
        }
        (restore, mark)
    }

    fn update_gains(&mut self) {
        (self.pacing_gain, self.cwnd_gain) = match self.mode {
            Mode::Startup => (HIGH_GAIN, HIGH_GAIN),
            Mode::Drain => (DRAIN_GAIN, HIGH_GAIN),
            Mode::ProbeBw => (
                if self.lt_use_bw {
                    BBR_UNIT
                } else {
                    PACING_GAIN[self.cycle_idx]
                },
                CWND_GAIN,
            ),
            Mode::ProbeRtt => (BBR_UNIT, BBR_UNIT),
        };
    }

    /// An ACK with its rate sample (Linux `bbr_main`): update the model, then the pacing
    /// rate and cwnd.
    pub fn on_ack(&mut self, rs: &RateSample, c: &AckCtx) -> AckOut {
        let mut c = *c;
        self.started.get_or_insert(c.now);
        // Entering a recovery saves the cwnd (Linux calls `bbr_ssthresh` first).
        if c.ca_state == CaState::Recovery && self.prev_ca_state != CaState::Recovery {
            self.save_cwnd(c.cwnd);
        }
        self.update_bw(rs, &c);
        self.update_ack_aggregation(rs, &c);
        if self.mode == Mode::ProbeBw && self.is_next_cycle_phase(rs, &c) {
            self.advance_cycle_phase(c.delivered_time);
        }
        self.check_full_bw_reached(rs);
        self.check_drain(&c);
        let (restore, mark) = self.update_min_rtt(rs, &c);
        if let Some(w) = restore {
            c.cwnd = w;
        }
        self.update_gains();
        let bw = self.bw();
        self.set_pacing_rate(bw, self.pacing_gain, c.cwnd, c.srtt);
        let cwnd = self.set_cwnd(rs, &c, bw, self.cwnd_gain);
        AckOut {
            cwnd,
            pacing_rate: self.pacing_rate,
            mark_app_limited: mark,
        }
    }

    /// A retransmission timeout (Linux `bbr_ssthresh` then `bbr_set_state(TCP_CA_Loss)`):
    /// save the cwnd before it collapses, restart the full-bandwidth count, and count the
    /// timeout as a loss round in the long-term sampling.
    pub fn on_timeout(&mut self, cwnd_before: u64, c: &AckCtx) {
        self.save_cwnd(cwnd_before);
        self.prev_ca_state = CaState::Loss;
        self.full_bw = 0;
        self.round_start = true;
        let rs = RateSample {
            losses: 1,
            ..RateSample::default()
        };
        self.lt_sampling(&rs, c);
    }

    /// A loss reduction was undone (Linux `bbr_undo_cwnd`): cwnd stays; the pipe may not
    /// be full after all, and the long-term sampling starts over.
    pub fn on_undo(&mut self, c: &AckCtx) {
        self.full_bw = 0;
        self.full_bw_cnt = 0;
        self.reset_lt(c.delivered, c.lost, c.delivered_time);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    #[test]
    fn max_filter_keeps_the_best_of_the_window() {
        let mut f = MaxFilter::default();
        f.update(10, 0, 100);
        assert_eq!(f.update(10, 1, 50), 100);
        assert_eq!(f.update(10, 5, 80), 100);
        assert_eq!(f.update(10, 10, 60), 100, "100 is 10 rounds old: still in");
        // Round 11: 100 expires; the best of what followed (80 at round 5) takes over.
        assert_eq!(f.update(10, 11, 70), 80);
        // A new maximum replaces everything.
        assert_eq!(f.update(10, 12, 200), 200);
        // Long silence: the next sample resets the filter.
        assert_eq!(f.update(10, 40, 10), 10);
    }

    const MSS: u64 = 1000;

    /// A model of one BBR flow on a `rate` (segments per ms) bottleneck with propagation
    /// RTT `rtt_ms` and an unlimited buffer, in 1 ms ticks on explicit time: paced
    /// segments join the bottleneck queue, `rate` of them are served per tick, and each
    /// served batch is acknowledged one RTT later.
    struct Fluid {
        b: Bbr,
        now: Instant,
        cwnd: u64,
        delivered: u64,
        delivered_time: Instant,
        inflight: u64,
        /// Waiting at the bottleneck: (send time, delivered at send, its time, segments).
        queue: VecDeque<(Instant, u64, Instant, u64)>,
        /// ACKs on their way: (arrival, send time, delivered at send, its time, segments).
        acks: VecDeque<(Instant, Instant, u64, Instant, u64)>,
        rate: u64,
        rtt: Duration,
        credit: u64,
        modes: Vec<(Instant, Mode)>,
        cycle: Vec<u32>,
    }

    impl Fluid {
        fn new(rate: u64, rtt_ms: u64, seed: u64) -> Fluid {
            let rtt = Duration::from_millis(rtt_ms);
            Fluid {
                b: Bbr::new(Instant::ZERO, MSS, 10, Some(rtt), Some(rtt), None, seed),
                now: Instant::ZERO,
                cwnd: 10,
                delivered: 0,
                delivered_time: Instant::ZERO,
                inflight: 0,
                queue: VecDeque::new(),
                acks: VecDeque::new(),
                rate,
                rtt,
                credit: 0,
                modes: vec![(Instant::ZERO, Mode::Startup)],
                cycle: Vec::new(),
            }
        }

        fn step(&mut self) {
            self.now += Duration::from_millis(1);
            while self.acks.front().is_some_and(|a| a.0 <= self.now) {
                let (_, t, d, dt, n) = self.acks.pop_front().unwrap();
                self.delivered += n;
                self.inflight -= n;
                let rs = RateSample {
                    delivered: Some(self.delivered - d),
                    interval: Some(self.now.saturating_since(dt).max(self.rtt)),
                    prior_delivered: d,
                    acked_sacked: n,
                    prior_in_flight: self.inflight + n,
                    rtt: Some(self.now - t),
                    ..RateSample::default()
                };
                self.delivered_time = self.now;
                let c = AckCtx {
                    now: self.now,
                    delivered: self.delivered,
                    delivered_time: self.now,
                    lost: 0,
                    in_flight: self.inflight,
                    ca_state: CaState::Open,
                    cwnd: self.cwnd,
                    srtt: Some(self.rtt),
                    edt: self.now,
                };
                self.cwnd = self.b.on_ack(&rs, &c).cwnd;
                if self.modes.last().unwrap().1 != self.b.mode() {
                    self.modes.push((self.now, self.b.mode()));
                }
                if self.b.mode() == Mode::ProbeBw {
                    let g = self.b.info().pacing_gain;
                    if self.cycle.last() != Some(&g) {
                        self.cycle.push(g);
                    }
                }
            }
            // Pacing: bytes/s → segments this tick, the remainder carried.
            self.credit += self.b.pacing_rate();
            let n = (self.credit / (1000 * MSS)).min(self.cwnd.saturating_sub(self.inflight));
            self.credit -= n * 1000 * MSS;
            self.credit = self.credit.min(2000 * MSS);
            if n > 0 {
                if self.inflight == 0 {
                    self.delivered_time = self.now;
                }
                self.queue
                    .push_back((self.now, self.delivered, self.delivered_time, n));
                self.inflight += n;
            }
            let mut served = self.rate;
            while served > 0 {
                let Some(q) = self.queue.front_mut() else {
                    break;
                };
                let take = q.3.min(served);
                served -= take;
                q.3 -= take;
                let (t, d, dt) = (q.0, q.1, q.2);
                if q.3 == 0 {
                    self.queue.pop_front();
                }
                self.acks.push_back((self.now + self.rtt, t, d, dt, take));
            }
        }
    }

    #[test]
    fn gains_and_targets_are_linux_fixed_point() {
        assert_eq!(HIGH_GAIN, 739);
        assert_eq!(DRAIN_GAIN, 88);
        let b = Bbr::new(
            Instant::ZERO,
            MSS,
            10,
            None,
            Some(Duration::from_millis(100)),
            None,
            1,
        );
        // 10 segments per 100 ms × 739/256 × 0.99 = 285.7 kB/s (Linux fixed point).
        assert_eq!(b.pacing_rate(), 285_662);
        // Before any RTT sample, BDP falls back to the initial window.
        assert_eq!(b.bdp(12345, BBR_UNIT), INIT_CWND);
    }

    #[test]
    fn startup_drain_probe_bw_and_probe_rtt_on_a_fixed_bottleneck() {
        // 10 segments per ms (80 Mbit/s with 1000-byte segments), 40 ms: BDP 400.
        let mut f = Fluid::new(10, 40, 7);
        while f.now < Instant::from_secs(12) {
            f.step();
        }
        let modes: Vec<Mode> = f.modes.iter().map(|m| m.1).collect();
        assert_eq!(
            &modes[..4],
            &[Mode::Startup, Mode::Drain, Mode::ProbeBw, Mode::ProbeRtt],
            "{:?}",
            f.modes
        );
        let info = f.b.info();
        // The bandwidth estimate is the bottleneck's (10 segments/ms = 10 MB/s).
        assert!((info.bw as i64 - 10_000_000).abs() < 200_000, "{}", info.bw);
        assert_eq!(info.min_rtt, Some(Duration::from_millis(40)));
        // STARTUP left within a few rounds of filling the pipe (~log2(400/10) + 3).
        let exit = info.startup_exit.unwrap();
        assert!(exit < Instant::from_millis(800), "{exit:?}");
        // One PROBE_RTT, 10 s after the min RTT was last lowered, and it lasted at least
        // 200 ms with cwnd 4.
        assert_eq!(info.probe_rtt_rounds, 1);
        let enter = f.modes.iter().find(|m| m.1 == Mode::ProbeRtt).unwrap().0;
        assert!(enter > Instant::from_secs(10), "{enter:?}");
        let leave = f
            .modes
            .iter()
            .skip_while(|m| m.1 != Mode::ProbeRtt)
            .nth(1)
            .unwrap()
            .0;
        assert!(leave - enter >= PROBE_RTT_TIME, "{:?}", leave - enter);
        assert_eq!(f.modes.last().unwrap().1, Mode::ProbeBw);
        // The gain cycle: 1.25 then 0.75 then 1 (6 phases: one run of 1s).
        let c = &f.cycle;
        let i = c.iter().position(|g| *g == 320).unwrap();
        assert_eq!(&c[i..i + 3], &[320, 192, 256], "{c:?}");
    }

    #[test]
    fn probe_bw_start_phase_is_seeded() {
        let start = |seed: u64| {
            let mut b = Bbr::new(Instant::ZERO, MSS, 10, None, None, None, seed);
            b.reset_probe_bw_mode(Instant::ZERO);
            b.cycle_idx
        };
        let phases: Vec<usize> = (0..700).map(start).collect();
        assert_eq!(
            phases,
            (0..700).map(start).collect::<Vec<_>>(),
            "deterministic"
        );
        let mut count = [0usize; CYCLE_LEN];
        for &p in &phases {
            count[p] += 1;
        }
        assert_eq!(count[1], 0, "never the 0.75 phase");
        for p in [0, 2, 3, 4, 5, 6, 7] {
            assert!((60..140).contains(&count[p]), "phase {p}: {count:?}");
        }
    }

    #[test]
    fn packet_conservation_in_the_first_round_of_a_recovery() {
        let mut b = Bbr::new(
            Instant::ZERO,
            MSS,
            10,
            None,
            Some(Duration::from_millis(10)),
            None,
            1,
        );
        let rs = RateSample {
            acked_sacked: 2,
            losses: 3,
            ..RateSample::default()
        };
        let c = AckCtx {
            now: Instant::from_millis(100),
            delivered: 100,
            delivered_time: Instant::from_millis(100),
            lost: 3,
            in_flight: 30,
            ca_state: CaState::Recovery,
            cwnd: 60,
            srtt: Some(Duration::from_millis(10)),
            edt: Instant::from_millis(100),
        };
        // In flight + acked.
        assert_eq!(b.on_ack(&rs, &c).cwnd, 32);
        // Recovery ends: the cwnd from before it is back.
        let c2 = AckCtx {
            ca_state: CaState::Open,
            cwnd: 32,
            ..c
        };
        let rs2 = RateSample {
            acked_sacked: 1,
            ..RateSample::default()
        };
        assert!(b.on_ack(&rs2, &c2).cwnd >= 60);
    }

    #[test]
    fn a_policer_is_detected_by_long_term_sampling() {
        let mut b = Bbr::new(
            Instant::ZERO,
            MSS,
            10,
            Some(Duration::from_millis(50)),
            None,
            None,
            3,
        );
        b.full_bw_reached = true;
        b.reset_probe_bw_mode(Instant::ZERO);
        // Rounds of 50 ms: 100 segments delivered and 50 lost per round (33 % loss), at a
        // steady 2 segments per ms.
        let (mut delivered, mut lost) = (0u64, 0u64);
        for round in 1..=12u64 {
            let t = Instant::from_millis(50 * round);
            delivered += 100;
            lost += 50;
            let rs = RateSample {
                delivered: Some(100),
                interval: Some(Duration::from_millis(50)),
                prior_delivered: delivered - 100,
                acked_sacked: 100,
                losses: 50,
                prior_in_flight: 100,
                rtt: Some(Duration::from_millis(50)),
                ..RateSample::default()
            };
            let c = AckCtx {
                now: t,
                delivered,
                delivered_time: t,
                lost,
                in_flight: 100,
                ca_state: CaState::Open,
                cwnd: 100,
                srtt: Some(Duration::from_millis(50)),
                edt: t,
            };
            b.on_ack(&rs, &c);
            if b.info().lt_use_bw {
                break;
            }
        }
        let info = b.info();
        assert!(info.lt_use_bw, "policer not detected");
        assert_eq!(info.pacing_gain, BBR_UNIT);
        // 2 segments per ms = 2 MB/s.
        assert!((info.bw as i64 - 2_000_000).abs() < 50_000, "{}", info.bw);
    }
}
