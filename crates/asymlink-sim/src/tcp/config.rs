//! TCP configuration and the named profiles `paper`, `rfc` and `linux`.
//!
//! A scenario names a profile and may override any field:
//!
//! ```toml
//! tcp = "paper"
//! tcp = { profile = "paper", mss = "536B", delayed_ack = 2, rcvbuf = "1MB" }
//! ```
//!
//! | field | `paper` (ns-2 style) | `rfc` | `linux` |
//! |---|---|---|---|
//! | congestion control | NewReno | NewReno | CUBIC |
//! | loss recovery | NewReno (no SACK) | SACK, RFC 6675 | SACK, RFC 6675 |
//! | timestamps | off (40-byte ACKs) | on | on |
//! | MSS (payload) | 1000 B | 1460 B | 1448 B |
//! | initial window | 1 segment | 3 segments (RFC 3390) | 10 segments (RFC 6928) |
//! | slow-start growth | +1 MSS per ACK | +min(acked, MSS) per ACK (RFC 5681) | +acked bytes |
//! | what an ACK grows cwnd by | cumulatively acknowledged | cumulatively acknowledged | newly delivered (SACKed or acknowledged) |
//! | delayed ACK | every segment (d = 1) | d = 2, 200 ms | Linux: every 2 full segments, ato from 40 ms, quick ACKs |
//! | minimum RTO | 1 s | 1 s | 200 ms |
//! | RTO floor | RTO ≥ min RTO | RTO ≥ min RTO | RTO ≥ SRTT + min RTO |
//! | initial RTO | 3 s | 1 s | 1 s |
//! | Nagle | off | on (RFC 896) | on (Minshall's variant, FIN not held) |
//! | limited transmit | off | on | on |
//! | receive / send buffer | 1 MB / unlimited | 4 MB / 4 MB | autotuned (`rmem` / `wmem`) |
//! | spurious-timeout undo (Eifel, timestamps) | off | off | on |
//! | rescue retransmission (RFC 6675 NextSeg rules 3–4) | off | on | off |
//! | cwnd growth when not cwnd-limited | grows | RFC 7661 rule | Linux rule |
//! | loss detection with SACK | — | RFC 6675 (DupThresh) | RACK (RFC 8985, time-based) |
//! | tail-loss probe (RFC 8985 TLP) | off | off | on |
//! | cwnd during fast recovery | — (NewReno inflation) | cwnd = ssthresh at entry | PRR (RFC 6937) |
//! | HyStart (CUBIC leaves slow start on ACK trains or delay increase) | off | off | on |

use asymlink_core::config::ConfigError;
use asymlink_core::time::Duration;
use asymlink_core::units::{Bytes, Rate, Span};
use serde::Deserialize;

/// Congestion control algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CcAlgo {
    /// Reno (RFC 5681): fast recovery ends at the first new ACK.
    Reno,
    /// NewReno (RFC 6582): fast recovery ends when the recovery point is acknowledged.
    NewReno,
    /// CUBIC (RFC 9438).
    Cubic,
    /// BBR version 1 as Linux mainline `tcp_bbr.c`; paces (see `docs/tcp.md`).
    Bbr,
}

/// How slow start grows the window per ACK.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SsGrowth {
    /// One segment per ACK, whatever it acknowledges (ns-2).
    PerAck,
    /// `min(bytes acked, MSS)` per ACK (RFC 5681 §3.1).
    Rfc5681,
    /// All bytes acknowledged (Linux counts acknowledged packets).
    ByteCounting,
}

/// Which bytes of an ACK that advances SND.UNA count toward growing the window (in slow
/// start and congestion avoidance, outside a recovery).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GrowBy {
    /// The bytes the cumulative acknowledgment newly covers, SACKed earlier or not (RFC
    /// 5681, RFC 3465): a segment SACKed during a recovery counts when the recovery ends.
    Acked,
    /// The bytes this ACK newly delivered: newly SACKed ones plus cumulatively acknowledged
    /// ones not SACKed before (Linux `tcp_cong_control`'s `acked_sacked`, the change in
    /// `tp->delivered`). A segment counts once, when it is first delivered; one SACKed
    /// during a recovery (where PRR, not growth, sets cwnd) never counts.
    Delivered,
}

/// How the minimum RTO bounds the retransmission timeout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RtoFloor {
    /// RFC 6298 (2.4): RTO = max(`rto_min`, SRTT + max(G, 4·RTTVAR)).
    Rto,
    /// Linux `tcp_rtt_estimator` / `tcp_set_rto`: the variation term is at least `rto_min`,
    /// so RTO = SRTT + max(`rto_min`, 4·RTTVAR) — never less than SRTT + 200 ms by default.
    Variation,
}

/// Which rule Nagle's algorithm holds a short segment back by (with `nagle` on).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum NagleRule {
    /// RFC 896: a short segment waits while any data is unacknowledged.
    Rfc896,
    /// Minshall's variant, as Linux's `tcp_nagle_check` / `tcp_minshall_check`: a short
    /// segment waits only while an earlier short segment is unacknowledged, and a segment
    /// that carries the FIN never waits (`tcp_nagle_test`).
    Minshall,
}

/// When the congestion window may grow: congestion-window validation. A flow held back
/// by the receive window, the application or a conditioner does not use its cwnd, so
/// ACKs say nothing about whether a larger one would be safe.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CwndValidation {
    /// Every ACK of new data grows the window, used or not (ns-2).
    Off,
    /// RFC 7661's growth rule: grow while the largest flight of the current window
    /// reached at least half the cwnd (the RFC's pipeACK ≥ ½·cwnd, with the flight
    /// standing in for pipeACK); its non-validated-phase reductions are not modelled.
    Rfc7661,
    /// Linux `tcp_is_cwnd_limited`: grow only if the flow was cwnd-limited in the current
    /// window (the flight reached cwnd, or data waited for it); in slow start also while
    /// cwnd is below twice the window's largest flight.
    Linux,
}

/// What a sender does with its window after an idle period longer than the RTO.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdleRestart {
    /// Resume at the old cwnd (ns-2's one-way agents: their timer is not running when
    /// idle).
    Off,
    /// RFC 5681 §4.1: cwnd = min(initial window, cwnd); ssthresh kept.
    Rfc5681,
    /// Linux `tcp_cwnd_restart` (`tcp_slow_start_after_idle` = 1): ssthresh = max(ssthresh,
    /// ¾·cwnd), cwnd halved for every RTO of idle time after the first, never below
    /// min(initial window, cwnd).
    Linux,
}

/// How the receiver times its delayed ACKs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum DelackMode {
    /// Acknowledge every `delayed_ack` full segments, else after `delack_timeout`; the
    /// first `quickack` segments of the connection are acknowledged at once.
    Fixed,
    /// Linux's delayed-ACK engine (`tcp_event_data_recv`, `__tcp_ack_snd_check`,
    /// `tcp_send_delayed_ack`): acknowledge as soon as more than one full segment (the
    /// largest seen, `rcv_mss`) is unacknowledged; otherwise wait `ato`, which starts at
    /// `delack_timeout` (Linux's TCP_ATO_MIN, 40 ms), follows the data's inter-arrival
    /// time, doubles when the timer fires, and is bounded by the smoothed RTT and 200 ms.
    /// Quick-ACK mode (every segment acknowledged, at most `quickack` ACKs, fewer if the
    /// window holds fewer than twice as many segments) at the first data, after a gap
    /// longer than the RTO, after a duplicate segment, and for 2 ACKs after an ECN CE mark;
    /// one immediate ACK whenever the receive window grew (`tcp_grow_window`).
    Linux,
}

/// How a retransmission timeout sets ssthresh.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TimeoutMode {
    /// RFC 5681 §3.1: reduced at a timeout in the open state or in a fast recovery; kept
    /// when the timer fires again before the recovery point of the last timeout is
    /// acknowledged (the segment was already resent by way of the timer).
    Rfc,
    /// Linux `tcp_enter_loss`: from the congestion controller unless the timeout
    /// interrupts a fast recovery whose recovery point is not yet acknowledged (its
    /// reduction stands), or follows an earlier timeout with no ACK of new data since
    /// (`icsk_retransmits`); a timeout after the window has grown back from an earlier one
    /// reduces again.
    Linux,
}

/// Congestion-avoidance increase rule: the window grows by g(rtt) segments per RTT
/// instead of one (Mehra et al. §5; Floyd 1991; Henderson et al. 1998). The increase per
/// ACK is g·MSS²/cwnd, never more than one MSS (Henderson's bound: never burstier than
/// slow start). `rtt` is the connection's smoothed estimate (g = 1 before the first
/// sample). With CUBIC, a non-standard rule replaces CUBIC's growth by this Reno-style one.
#[derive(Clone, Copy, Debug, PartialEq, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum CaIncrease {
    /// The algorithm's own rule.
    Standard,
    /// Aggregate fairness: g = rtt² / rtt_av², where `rtt_av` is the mean RTT of the
    /// aggregate's connections (which the server knows; given here).
    AggregateFair {
        /// The aggregate's mean RTT.
        rtt_av: Span,
    },
    /// Constant-Rate: g = a·rtt² (a in segments per second², e.g. 100: one segment per RTT
    /// at 100 ms).
    ConstantRate {
        /// The constant a (1/s²).
        a: f64,
    },
    /// Increase-by-K: g = K for connections whose RTT is at least `min_rtt` (all if absent).
    IncreaseByK {
        /// Segments per RTT.
        k: f64,
        /// RTT from which K applies.
        #[serde(default)]
        min_rtt: Option<Span>,
    },
}

impl CaIncrease {
    /// g(rtt): segments per RTT.
    pub fn gain(&self, rtt: Option<Duration>) -> f64 {
        let Some(rtt) = rtt.map(|d| d.as_secs_f64()) else {
            return 1.0;
        };
        match *self {
            CaIncrease::Standard => 1.0,
            CaIncrease::AggregateFair { rtt_av } => {
                let av = rtt_av.0.as_secs_f64();
                rtt * rtt / (av * av)
            }
            CaIncrease::ConstantRate { a } => a * rtt * rtt,
            CaIncrease::IncreaseByK { k, min_rtt } => {
                if min_rtt.is_none_or(|m| rtt >= m.0.as_secs_f64()) {
                    k
                } else {
                    1.0
                }
            }
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let err = |k: &str, m: &str| Err(ConfigError::new(format!("ca_increase.{k}"), m));
        match *self {
            CaIncrease::Standard => Ok(()),
            CaIncrease::AggregateFair { rtt_av } if rtt_av.0.is_zero() => {
                err("rtt_av", "must be positive")
            }
            CaIncrease::ConstantRate { a } if !(a > 0.0 && a.is_finite()) => err(
                "a",
                "must be a positive number (segments per second squared)",
            ),
            CaIncrease::IncreaseByK { k, .. } if !(k > 0.0 && k <= 1000.0) => {
                err("k", "must be in (0, 1000] segments per RTT")
            }
            _ => Ok(()),
        }
    }
}

/// A fully resolved TCP configuration.
///
/// `repr(C)`: the fields a connection reads on every segment come first (the configuration
/// is part of each connection's state).
#[derive(Clone, Debug, PartialEq)]
#[repr(C)]
pub struct TcpConfig {
    /// Send buffer in bytes (bounds unacknowledged + unsent data; `None`: unlimited, or
    /// autotuned with `snd_autotune`). With Linux's sender (`delack_mode = "linux"`) it is
    /// the buffer's memory (`sk_sndbuf`, what `ss -m` shows as `tb`: twice the value given
    /// to `SO_SNDBUF`), of which each queued packet also takes its `sk_buff` (832 bytes).
    pub sndbuf: Option<u64>,
    /// Receive buffer in bytes (bounds the advertised window).
    pub rcvbuf: u64,
    /// Delayed-ACK timer.
    pub delack_timeout: Duration,
    /// With `rcv_autotune`: `TCP_WINDOW_CLAMP` as an application sets it that holds its
    /// window at this size: before the connection and again after every read (Linux
    /// resets the clamp when it re-estimates the payload ratio).
    pub window_clamp: Option<u64>,
    /// Acknowledge every `delayed_ack` full-sized segments.
    pub delayed_ack: u32,
    /// Segments acknowledged immediately at connection start (Linux quick-ACK mode).
    pub quickack: u32,
    /// Duplicate ACK threshold.
    pub dupthresh: u32,
    /// Congestion control.
    pub cc: CcAlgo,
    /// How delayed ACKs are timed.
    pub delack_mode: DelackMode,
    /// RACK loss detection (RFC 8985 §6, Linux `tcp_rack_*`) with SACK: a segment is lost
    /// once one sent after it was delivered and it is older than that one's RTT plus a
    /// reordering window; replaces RFC 6675's DupThresh rule and duplicate-ACK counting.
    pub rack: bool,
    /// Tail-loss probe (RFC 8985 §7, Linux `tcp_schedule_loss_probe`): with SACK, in the
    /// open state, a probe (new data, else the last segment again) after 2·SRTT without
    /// an ACK, so that a lost tail is found without a timeout.
    pub tlp: bool,
    /// HyStart (with `cc = "cubic"`): leave slow start (ssthresh = cwnd) when a round's
    /// ACK train lasts more than half the minimum RTT or its RTT rises by
    /// clamp(min RTT / 8, 4 ms, 16 ms), from a window of 16 segments on (Linux
    /// `tcp_cubic.c` `hystart_update`).
    pub hystart: bool,
    /// D-SACK (RFC 2883, Linux's `tcp_dsack`): with SACK, the receiver reports a segment
    /// it already held in a first SACK block of the next ACK; the sender undoes a fast
    /// recovery whose every retransmission was reported so, and widens RACK's reordering
    /// window after reordering.
    pub dsack: bool,
    /// Which bytes of an ACK grow the window.
    pub grow_by: GrowBy,
    /// When the congestion window may grow (congestion-window validation).
    pub cwnd_validation: CwndValidation,
    /// Restart after idle: what happens to cwnd when data follows an idle period longer
    /// than the RTO.
    pub idle_restart: IdleRestart,
    /// Nagle's algorithm (RFC 896).
    pub nagle: bool,
    /// What Nagle's algorithm waits for (`rfc896` or Linux's `minshall`).
    pub nagle_rule: NagleRule,
    /// Proportional rate reduction during SACK fast recovery (RFC 6937 with Linux's
    /// `tcp_cwnd_reduction`), instead of cwnd = ssthresh at entry.
    pub prr: bool,
    /// Offer SACK (RFC 2018) and use RFC 6675 recovery when both ends agree.
    pub sack: bool,
    /// Offer timestamps (RFC 7323).
    pub timestamps: bool,
    /// Offer window scaling (RFC 7323).
    pub window_scaling: bool,
    /// Offer ECN (RFC 3168).
    pub ecn: bool,
    /// Largest payload per segment, in bytes (also advertised as the MSS option).
    pub mss: u32,
    /// Initial window in segments.
    pub initial_window: u32,
    /// Initial slow-start threshold in bytes (`None`: unlimited).
    pub initial_ssthresh: Option<u64>,
    /// Minimum RTO (how it applies: `rto_floor`).
    pub rto_min: Duration,
    /// Whether `rto_min` bounds the RTO itself (RFC 6298) or its variation term (Linux).
    pub rto_floor: RtoFloor,
    /// RTO before any RTT sample.
    pub rto_initial: Duration,
    /// Maximum RTO.
    pub rto_max: Duration,
    /// Give up a SYN after this many retransmissions.
    pub syn_retries: u32,
    /// Pace every sender at Linux's rate (`tcp_update_pacing_rate`: 2 × cwnd·MSS/SRTT
    /// while cwnd is below half of ssthresh, 1.2 × after), as Linux does with the `fq`
    /// qdisc. BBR and `max_pacing_rate` pace whatever this says (Linux's internal pacing).
    pub pacing: bool,
    /// `SO_MAX_PACING_RATE`: the pacing rate never exceeds this (payload bit/s), and the
    /// sender paces (Linux's internal pacing) even when `pacing` is off.
    pub max_pacing_rate: Option<Rate>,
    /// Slow-start growth rule.
    pub ss_growth: SsGrowth,
    /// Limited transmit (RFC 3042).
    pub limited_transmit: bool,
    /// In SACK recovery, when no lost segment waits and no new data can be sent, resend a
    /// not yet SACKed segment below the highest SACK, else once per recovery the highest
    /// segment not SACKed (RFC 6675 NextSeg rules 3 and 4, the "rescue" retransmission).
    /// Linux has no such rule (its tail-loss probe, not modelled, covers the same case).
    pub rescue_retransmit: bool,
    /// Congestion-avoidance increase rule.
    pub ca_increase: CaIncrease,
    /// Undo a retransmission timeout found spurious by the echoed timestamp (Eifel
    /// detection, RFC 3522, as Linux does): needs timestamps.
    pub rto_undo: bool,
    /// CUBIC's Reno-friendly estimate grows with α = 1 once it has reached the cwnd of
    /// the last reduction (RFC 9438 §4.3); otherwise α = 3(1−β)/(1+β) throughout (Linux).
    pub cubic_alpha_switch: bool,
    /// Receive-buffer autotuning (Linux `tcp_rcv_space_adjust`): the window starts from
    /// `rmem[1]` and grows each receiver RTT with what the application read, up to
    /// `rmem[2]`; `rcvbuf` is then unused. Setting `rcvbuf` in a scenario turns it off
    /// (as `SO_RCVBUF` locks a Linux socket's buffer).
    pub rcv_autotune: bool,
    /// Linux's `tcp_rmem` (min, default, max) in bytes of buffer memory; with
    /// `rcv_autotune`, the window is the memory times the payload ratio (half, until
    /// `skb_truesize` re-estimates it).
    pub rmem: [u64; 3],
    /// With `rcv_autotune` (Linux's receive buffer): `SO_RCVBUF` as the application sets
    /// it: the buffer is twice this memory and autotuning is off.
    pub so_rcvbuf: Option<u64>,
    /// With `rcv_autotune`: the buffer memory a received full-sized segment takes
    /// (`skb->truesize`, set by the receiving driver); Linux re-estimates the payload
    /// ratio (`scaling_ratio`) from it at the first full-sized segment. `None`: the
    /// ratio stays at half.
    pub skb_truesize: Option<u64>,
    /// Send-buffer autotuning (Linux `tcp_sndbuf_expand`, with `delack_mode = "linux"` and
    /// no `sndbuf`): the buffer starts at twice (BBR: three times) max(10, cwnd) packets of
    /// 2304 bytes of memory, and grows so when a writer waiting for space finds the sender
    /// not cwnd-limited, up to `wmem[2]`. Setting `sndbuf` turns it off (as `SO_SNDBUF`
    /// locks a Linux socket's buffer).
    pub snd_autotune: bool,
    /// Linux's `tcp_wmem` (min, default, max) in bytes of buffer memory.
    pub wmem: [u64; 3],
    /// How a retransmission timeout sets ssthresh.
    pub timeout_mode: TimeoutMode,
    /// Profile it derives from (for reports).
    pub profile: String,
}

impl TcpConfig {
    /// A named profile.
    pub fn profile(name: &str) -> Option<TcpConfig> {
        let base = TcpConfig {
            profile: name.to_string(),
            cc: CcAlgo::NewReno,
            sack: true,
            timestamps: true,
            window_scaling: true,
            ecn: false,
            mss: 1460,
            initial_window: 3,
            initial_ssthresh: None,
            rcvbuf: 4_000_000,
            sndbuf: Some(4_000_000),
            delayed_ack: 2,
            delack_timeout: Duration::from_millis(200),
            quickack: 0,
            rto_min: Duration::from_secs(1),
            rto_floor: RtoFloor::Rto,
            rto_initial: Duration::from_secs(1),
            rto_max: Duration::from_secs(60),
            syn_retries: 6,
            nagle: true,
            nagle_rule: NagleRule::Rfc896,
            pacing: false,
            max_pacing_rate: None,
            ss_growth: SsGrowth::Rfc5681,
            grow_by: GrowBy::Acked,
            limited_transmit: true,
            dupthresh: 3,
            rescue_retransmit: true,
            ca_increase: CaIncrease::Standard,
            rto_undo: false,
            cwnd_validation: CwndValidation::Rfc7661,
            cubic_alpha_switch: true,
            idle_restart: IdleRestart::Rfc5681,
            rack: false,
            tlp: false,
            prr: false,
            hystart: false,
            rcv_autotune: false,
            rmem: [4096, 131_072, 33_554_432],
            so_rcvbuf: None,
            window_clamp: None,
            skb_truesize: None,
            snd_autotune: false,
            wmem: [4096, 16_384, 4_194_304],
            delack_mode: DelackMode::Fixed,
            timeout_mode: TimeoutMode::Rfc,
            dsack: false,
        };
        Some(match name {
            "rfc" => base,
            "paper" => TcpConfig {
                sack: false,
                timestamps: false,
                mss: 1000,
                initial_window: 1,
                rcvbuf: 1_000_000,
                sndbuf: None,
                delayed_ack: 1,
                delack_timeout: Duration::from_millis(100),
                rto_initial: Duration::from_secs(3),
                nagle: false,
                ss_growth: SsGrowth::PerAck,
                limited_transmit: false,
                rescue_retransmit: false,
                cwnd_validation: CwndValidation::Off,
                cubic_alpha_switch: false,
                idle_restart: IdleRestart::Off,
                ..base
            },
            "linux" => TcpConfig {
                cc: CcAlgo::Cubic,
                mss: 1448,
                initial_window: 10,
                rcvbuf: 6_000_000,
                sndbuf: None,
                snd_autotune: true,
                delack_timeout: Duration::from_millis(40),
                quickack: 16,
                rto_min: Duration::from_millis(200),
                rto_floor: RtoFloor::Variation,
                ss_growth: SsGrowth::ByteCounting,
                grow_by: GrowBy::Delivered,
                rto_undo: true,
                rescue_retransmit: false,
                nagle_rule: NagleRule::Minshall,
                cwnd_validation: CwndValidation::Linux,
                cubic_alpha_switch: false,
                idle_restart: IdleRestart::Linux,
                rack: true,
                tlp: true,
                prr: true,
                hystart: true,
                rcv_autotune: true,
                // What a 1448-byte segment takes on veth (measured in the lab).
                skb_truesize: Some(2304),
                delack_mode: DelackMode::Linux,
                timeout_mode: TimeoutMode::Linux,
                dsack: true,
                ..base
            },
            _ => return None,
        })
    }

    /// Profile names.
    pub const PROFILES: [&'static str; 3] = ["paper", "rfc", "linux"];
}

/// A named TCP profile: `paper`, `rfc` or `linux` (see `docs/tcp.md`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TcpProfile {
    /// What the papers' simulators ran (ns-2 style Reno/NewReno).
    Paper,
    /// NewReno with SACK recovery, timestamps and delayed ACKs, per the RFCs.
    Rfc,
    /// What a current Linux kernel does.
    Linux,
}

impl TcpProfile {
    /// Every profile.
    pub const ALL: [TcpProfile; 3] = [TcpProfile::Paper, TcpProfile::Rfc, TcpProfile::Linux];

    /// The name as written in scenarios.
    pub const fn name(self) -> &'static str {
        match self {
            TcpProfile::Paper => "paper",
            TcpProfile::Rfc => "rfc",
            TcpProfile::Linux => "linux",
        }
    }

    /// The profile called `name`.
    pub fn from_name(name: &str) -> Option<TcpProfile> {
        TcpProfile::ALL.into_iter().find(|p| p.name() == name)
    }

    /// Its configuration.
    pub fn config(self) -> TcpConfig {
        TcpConfig::profile(self.name()).expect("every profile has a configuration")
    }
}

impl<'de> Deserialize<'de> for TcpProfile {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let name = String::deserialize(d)?;
        TcpProfile::from_name(&name).ok_or_else(|| {
            serde::de::Error::custom(format!("unknown TCP profile '{name}' (paper, rfc, linux)"))
        })
    }
}

/// A TCP specification in a scenario: a profile name, or a table with `profile` and
/// overrides.
#[derive(Clone, Debug)]
#[allow(
    clippy::large_enum_variant,
    reason = "parsed once per flow from a scenario; size does not matter"
)]
pub enum TcpSpec {
    /// Just a profile name.
    Name(TcpProfile),
    /// A profile with overrides.
    Table(TcpOverrides),
}

/// Overrides of profile fields (all optional).
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
#[allow(missing_docs)]
pub struct TcpOverrides {
    pub profile: Option<TcpProfile>,
    pub cc: Option<CcAlgo>,
    pub sack: Option<bool>,
    pub timestamps: Option<bool>,
    pub window_scaling: Option<bool>,
    pub ecn: Option<bool>,
    pub mss: Option<Bytes>,
    pub initial_window: Option<u32>,
    pub initial_ssthresh: Option<Bytes>,
    pub rcvbuf: Option<Bytes>,
    pub sndbuf: Option<Bytes>,
    pub delayed_ack: Option<u32>,
    pub delack_timeout: Option<Span>,
    pub quickack: Option<u32>,
    pub rto_min: Option<Span>,
    pub rto_floor: Option<RtoFloor>,
    pub rto_initial: Option<Span>,
    pub rto_max: Option<Span>,
    pub syn_retries: Option<u32>,
    pub nagle: Option<bool>,
    pub nagle_rule: Option<NagleRule>,
    pub pacing: Option<bool>,
    pub max_pacing_rate: Option<Rate>,
    pub ss_growth: Option<SsGrowth>,
    pub grow_by: Option<GrowBy>,
    pub limited_transmit: Option<bool>,
    pub dupthresh: Option<u32>,
    pub rescue_retransmit: Option<bool>,
    pub ca_increase: Option<CaIncrease>,
    pub rto_undo: Option<bool>,
    pub cwnd_validation: Option<CwndValidation>,
    pub cubic_alpha_switch: Option<bool>,
    pub idle_restart: Option<IdleRestart>,
    pub rack: Option<bool>,
    pub tlp: Option<bool>,
    pub prr: Option<bool>,
    pub hystart: Option<bool>,
    pub rcv_autotune: Option<bool>,
    pub rmem: Option<[Bytes; 3]>,
    pub so_rcvbuf: Option<Bytes>,
    pub window_clamp: Option<Bytes>,
    pub skb_truesize: Option<Bytes>,
    pub snd_autotune: Option<bool>,
    pub wmem: Option<[Bytes; 3]>,
    pub delack_mode: Option<DelackMode>,
    pub timeout_mode: Option<TimeoutMode>,
    pub dsack: Option<bool>,
}

impl<'de> Deserialize<'de> for TcpSpec {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = TcpSpec;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a TCP profile name or a table of TCP settings")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<TcpSpec, E> {
                TcpProfile::deserialize(serde::de::value::StrDeserializer::new(v))
                    .map(TcpSpec::Name)
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, m: A) -> Result<TcpSpec, A::Error> {
                TcpOverrides::deserialize(serde::de::value::MapAccessDeserializer::new(m))
                    .map(TcpSpec::Table)
            }
        }
        d.deserialize_any(V)
    }
}

impl TcpSpec {
    /// The profile it names, or `default_profile` (a table without `profile`).
    pub fn profile(&self, default_profile: TcpProfile) -> TcpProfile {
        match self {
            TcpSpec::Name(p) => *p,
            TcpSpec::Table(t) => t.profile.unwrap_or(default_profile),
        }
    }

    /// Resolve against `default_profile`; the error names the bad field.
    pub fn resolve(&self, default_profile: TcpProfile) -> Result<TcpConfig, ConfigError> {
        let o = match self {
            TcpSpec::Name(_) => TcpOverrides::default(),
            TcpSpec::Table(t) => t.clone(),
        };
        let mut c = self.profile(default_profile).config();
        macro_rules! set {
            ($f:ident) => {
                if let Some(v) = o.$f {
                    c.$f = v;
                }
            };
            ($f:ident, $conv:expr) => {
                if let Some(v) = o.$f {
                    c.$f = $conv(v);
                }
            };
        }
        set!(cc);
        set!(sack);
        set!(timestamps);
        set!(window_scaling);
        set!(ecn);
        set!(mss, |b: Bytes| b.0 as u32);
        set!(initial_window);
        if let Some(b) = o.initial_ssthresh {
            c.initial_ssthresh = Some(b.0);
        }
        set!(rcvbuf, |b: Bytes| b.0);
        // A buffer set by hand is fixed, as `SO_RCVBUF` locks a Linux socket's buffer.
        if o.rcvbuf.is_some() {
            c.rcv_autotune = false;
        }
        set!(rcv_autotune);
        set!(rmem, |r: [Bytes; 3]| r.map(|b| b.0));
        if o.so_rcvbuf.is_some() || o.window_clamp.is_some() {
            let key = match o.so_rcvbuf {
                Some(_) => "so_rcvbuf",
                None => "window_clamp",
            };
            if o.rcvbuf.is_some() {
                return Err(ConfigError::new(
                    key,
                    "a fixed `rcvbuf` has no Linux buffer to set: use one or the other",
                ));
            }
            if !c.rcv_autotune {
                return Err(ConfigError::new(
                    key,
                    "needs Linux's receive buffer (`rcv_autotune`, the linux profile)",
                ));
            }
        }
        set!(so_rcvbuf, |b: Bytes| Some(b.0));
        set!(window_clamp, |b: Bytes| Some(b.0));
        set!(skb_truesize, |b: Bytes| Some(b.0));
        set!(hystart);
        set!(delack_mode);
        set!(timeout_mode);
        set!(dsack);
        if let Some(b) = o.sndbuf {
            c.sndbuf = Some(b.0);
            // A buffer set by hand is fixed, as `SO_SNDBUF` locks a Linux socket's buffer.
            c.snd_autotune = false;
        }
        set!(snd_autotune);
        set!(wmem, |r: [Bytes; 3]| r.map(|b| b.0));
        set!(delayed_ack);
        set!(delack_timeout, |s: Span| s.0);
        set!(quickack);
        set!(rto_min, |s: Span| s.0);
        set!(rto_floor);
        set!(rto_initial, |s: Span| s.0);
        set!(rto_max, |s: Span| s.0);
        set!(syn_retries);
        set!(nagle);
        set!(pacing);
        if let Some(r) = o.max_pacing_rate {
            c.max_pacing_rate = Some(r);
        }
        set!(ss_growth);
        set!(grow_by);
        set!(limited_transmit);
        set!(dupthresh);
        set!(ca_increase);
        set!(rto_undo);
        set!(nagle_rule);
        set!(rescue_retransmit);
        set!(cwnd_validation);
        set!(cubic_alpha_switch);
        set!(idle_restart);
        set!(rack);
        set!(tlp);
        set!(prr);
        c.validate()?;
        Ok(c)
    }
}

impl TcpConfig {
    /// Check value ranges.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let err = |k: &str, m: &str| Err(ConfigError::new(k, m));
        if !(64..=65_495).contains(&self.mss) {
            return err("mss", "must be between 64B and 65495B");
        }
        if self.initial_window == 0 || self.initial_window > 1000 {
            return err("initial_window", "must be 1..=1000 segments");
        }
        if self.delayed_ack == 0 || self.delayed_ack > 64 {
            return err("delayed_ack", "must be 1..=64 segments");
        }
        if self.rcvbuf < self.mss as u64 {
            return err("rcvbuf", "must hold at least one MSS");
        }
        if !self.window_scaling && self.rcvbuf > 65_535 {
            // Not an error: the advertised window is capped at 65535.
        }
        if self.rcv_autotune {
            let [lo, def, hi] = self.rmem;
            if !(lo <= def && def <= hi) {
                return err("rmem", "must be [min, default, max] in increasing order");
            }
            if def / 2 < self.mss as u64 {
                return err("rmem", "the default buffer must hold at least two MSS");
            }
        }
        if self.so_rcvbuf.is_some_and(|b| b < self.mss as u64) {
            return err("so_rcvbuf", "must hold at least one MSS");
        }
        if self.window_clamp.is_some_and(|b| b < self.mss as u64) {
            return err("window_clamp", "must hold at least one MSS");
        }
        if self.skb_truesize.is_some_and(|b| b < self.mss as u64) {
            return err("skb_truesize", "must be at least the MSS");
        }
        if self.sndbuf.is_some_and(|s| s < self.mss as u64) {
            return err("sndbuf", "must hold at least one MSS");
        }
        if self.snd_autotune {
            let [lo, def, hi] = self.wmem;
            if !(lo <= def && def <= hi) {
                return err("wmem", "must be [min, default, max] in increasing order");
            }
            if def < self.mss as u64 {
                return err("wmem", "the default buffer must hold at least one MSS");
            }
        }
        if self.rto_min.is_zero() || self.rto_min > self.rto_max {
            return err("rto_min", "must be positive and at most rto_max");
        }
        if self.dupthresh == 0 {
            return err("dupthresh", "must be positive");
        }
        if self.max_pacing_rate.is_some_and(|r| r.bits_per_sec() < 8) {
            return err(
                "max_pacing_rate",
                "must be at least 8bit (one byte per second)",
            );
        }
        self.ca_increase.validate()?;
        Ok(())
    }

    /// The window scale this end offers: the smallest shift that lets `rcvbuf` be
    /// advertised (RFC 7323 §2.3, at most 14); with autotuning, `rmem[2]` or a larger
    /// `SO_RCVBUF` buffer's window, at most the window clamp (as Linux's
    /// `tcp_select_initial_window`: 7 for 6 MiB, 10 for 32 MiB, 1 for a 64 KiB clamp).
    pub fn wscale_shift(&self) -> u8 {
        let buf = if self.rcv_autotune {
            let mut b = self.rmem[2];
            // The clamp: the application's, or a set buffer's window (half of it
            // before the payload ratio is known).
            let clamp = match (self.window_clamp, self.so_rcvbuf) {
                (Some(c), Some(s)) => Some(c.min(s)),
                (c, s) => c.or(s),
            };
            if let Some(s) = self.so_rcvbuf {
                b = b.max(s);
            }
            clamp.map_or(b, |c| b.min(c))
        } else {
            self.rcvbuf
        };
        let mut s = 0u8;
        while s < 14 && (buf >> s) > 65_535 {
            s += 1;
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_resolve_with_overrides() {
        let s: TcpSpec =
            toml::from_str::<toml::Value>("t = { profile = \"paper\", mss = \"536B\" }")
                .unwrap()
                .get("t")
                .unwrap()
                .clone()
                .try_into()
                .unwrap();
        let c = s.resolve(TcpProfile::Rfc).unwrap();
        assert_eq!(c.mss, 536);
        assert!(!c.sack);
        assert_eq!(c.delayed_ack, 1);
        let bad: Result<TcpSpec, _> = toml::Value::try_into(
            toml::from_str::<toml::Value>("mss = \"536B\"\nmsss = 1").unwrap(),
        );
        assert!(bad.is_err());
        let bad: Result<TcpSpec, _> = toml::Value::try_into(toml::Value::from("bsd"));
        assert!(bad
            .unwrap_err()
            .to_string()
            .contains("unknown TCP profile 'bsd'"));
    }

    #[test]
    fn ca_increase_rules() {
        let t = |src: &str| -> Result<TcpConfig, ConfigError> {
            let v: toml::Value = toml::from_str(src).unwrap();
            let s: TcpSpec = v.get("t").unwrap().clone().try_into().unwrap();
            s.resolve(TcpProfile::Paper)
        };
        let c =
            t("t = { ca_increase = { kind = \"aggregate_fair\", rtt_av = \"300ms\" } }").unwrap();
        let g = |ms: u64| c.ca_increase.gain(Some(Duration::from_millis(ms)));
        assert!((g(300) - 1.0).abs() < 1e-12);
        assert!((g(600) - 4.0).abs() < 1e-12);
        assert!((g(150) - 0.25).abs() < 1e-12);
        assert_eq!(c.ca_increase.gain(None), 1.0);
        let c = t("t = { ca_increase = { kind = \"constant_rate\", a = 100.0 } }").unwrap();
        assert!((c.ca_increase.gain(Some(Duration::from_millis(200))) - 4.0).abs() < 1e-12);
        let c =
            t("t = { ca_increase = { kind = \"increase_by_k\", k = 4.0, min_rtt = \"100ms\" } }")
                .unwrap();
        assert_eq!(c.ca_increase.gain(Some(Duration::from_millis(50))), 1.0);
        assert_eq!(c.ca_increase.gain(Some(Duration::from_millis(300))), 4.0);
        let e = t("t = { ca_increase = { kind = \"constant_rate\", a = -1.0 } }").unwrap_err();
        assert_eq!(e.path, "ca_increase.a");
    }

    #[test]
    fn a_fixed_rcvbuf_turns_autotuning_off() {
        let t = |src: &str| -> Result<TcpConfig, ConfigError> {
            let v: toml::Value = toml::from_str(src).unwrap();
            let s: TcpSpec = v.get("t").unwrap().clone().try_into().unwrap();
            s.resolve(TcpProfile::Linux)
        };
        let c = t("t = \"linux\"").unwrap();
        assert!(c.rcv_autotune && c.hystart);
        assert_eq!(c.delack_mode, DelackMode::Linux);
        assert_eq!(c.rmem, [4096, 131_072, 33_554_432]);
        assert_eq!(c.wscale_shift(), 10);
        let c = t("t = { rcvbuf = \"64KiB\" }").unwrap();
        assert!(!c.rcv_autotune);
        assert_eq!(c.wscale_shift(), 1);
        let c = t("t = { rmem = [\"4KiB\", \"128KiB\", \"6MiB\"] }").unwrap();
        assert!(c.rcv_autotune);
        assert_eq!(c.wscale_shift(), 7);
        let e = t("t = { rmem = [\"4KiB\", \"128KiB\", \"64KiB\"] }").unwrap_err();
        assert_eq!(e.path, "rmem");
        assert!(c.snd_autotune && c.sndbuf.is_none());
        let c = t("t = { sndbuf = \"4MB\" }").unwrap();
        assert!(!c.snd_autotune);
        assert_eq!(c.sndbuf, Some(4_000_000));
        let c = t("t = { profile = \"rfc\" }").unwrap();
        assert!(!c.rcv_autotune && !c.hystart && !c.snd_autotune);
        assert_eq!(c.delack_mode, DelackMode::Fixed);
    }

    #[test]
    fn wscale_covers_rcvbuf() {
        let mut c = TcpConfig::profile("rfc").unwrap();
        c.rcvbuf = 65_535;
        assert_eq!(c.wscale_shift(), 0);
        c.rcvbuf = 1_000_000;
        assert_eq!(c.wscale_shift(), 4);
    }
}
