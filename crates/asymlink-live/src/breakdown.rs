//! Where the added latency goes (`[stats] latency_breakdown = true`).
//!
//! The added latency of a frame runs from the kernel's receive timestamp to the start of
//! the send call that hands it to the egress device. With the breakdown on, the event
//! loop stamps the phases of every wake-up with the wall clock (and the thread's CPU time
//! at the wake-up and at each send call) and every frame with the instant it was read,
//! and splits each frame's added latency into consecutive parts that add up to it:
//!
//! ```text
//!  kernel rx ─► (loop busy with the previous wake-up: backlog, prev_rx, prev_tx, prev_other)
//!            ─► wakeup ─► rx_before ─► read ─► rx_after ─► (held) ─► tx_prep, tx_other ─► send
//! ```
//!
//! * `backlog` — the frame arrived before the previous wake-up started (the loop was more
//!   than a wake-up behind: a full receive batch, or a long stall);
//! * `prev_rx`, `prev_tx`, `prev_other` — the loop was still busy with the previous
//!   wake-up when the frame arrived: receiving, transmitting (timers, dequeues and the send
//!   calls, which on veth run the receiving host's stack), or signals and the stats
//!   publication;
//! * `wakeup` — from the later of the frame's arrival and the loop going to sleep to the
//!   loop running again (the poll wake-up, the scheduler, a halted virtual CPU);
//! * `rx_before` — reading and processing the frames read before it in its wake-up;
//! * `rx_after` — the same for the frames read after it;
//! * `held` — queued across wake-ups (a shaper, an emulated link, a full transmit ring);
//! * `tx_other` — send calls earlier in the wake-up that sends it (the other direction's,
//!   or earlier chunks of its own);
//! * `tx_prep` — the rest: timers, dequeues, capture, building the send.
//!
//! `off_cpu` is an overlay, not a part: of the time from the wake-up that sends the frame
//! to its send call, how long the thread was not running (preempted, or its virtual CPU
//! not scheduled by the host).
//!
//! Frames are counted in bands of their total (`BANDS_US`) with each part's sum, so the
//! band holding the p99 shows where the tail's time goes; for frames of at least
//! `TAIL_US` every part also has a coarse histogram (`TAIL_BUCKETS_US`). Everything is a
//! sum or a count, so the snapshots of several workers merge by adding.

use serde_json::{json, Map, Value};

/// The parts of a frame's added latency, in the order they happen.
pub const PARTS: [&str; 10] = [
    "backlog",
    "prev_rx",
    "prev_tx",
    "prev_other",
    "wakeup",
    "rx_before",
    "rx_after",
    "held",
    "tx_other",
    "tx_prep",
];
const NPARTS: usize = PARTS.len();
const BACKLOG: usize = 0;
const PREV_RX: usize = 1;
const PREV_TX: usize = 2;
const PREV_OTHER: usize = 3;
const WAKEUP: usize = 4;
const RX_BEFORE: usize = 5;
const RX_AFTER: usize = 6;
const HELD: usize = 7;
const TX_OTHER: usize = 8;
const TX_PREP: usize = 9;

/// Upper edges of the bands of the total, in µs (a last band holds the rest).
pub const BANDS_US: [u64; 6] = [25, 50, 100, 200, 500, 1000];
/// Frames with a total of at least this many µs get a histogram of each part.
pub const TAIL_US: u64 = 100;
/// Upper edges of the tail histograms' buckets, in µs (a last bucket holds the rest).
pub const TAIL_BUCKETS_US: [u64; 9] = [2, 5, 10, 20, 50, 100, 200, 500, 1000];

/// The wall-clock instants (UNIX ns) of one wake-up's phases.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Marks {
    /// The wait returned.
    pub wake: u64,
    /// Every side read and its frames fed to the pipeline.
    pub rx_end: u64,
    /// Both directions transmitted.
    pub tx_end: u64,
    /// About to wait again.
    pub sleep: u64,
}

/// What the loop remembers of a frame it read: when, and the parts of its latency up to
/// then (ns, saturated at about 4 s). Zero when the breakdown is off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stamps {
    /// UNIX ns at which the loop read the frame (0: not stamped).
    pub read: u64,
    /// `backlog` … `rx_before` (the parts before the read).
    pub before: [u32; 6],
    /// With a sender thread: the marks of the wake-up that handed the frame to it
    /// (`wake`, `rx_end`) and the instant it did (in `tx_end`).
    pub handoff: Marks,
}

fn sat(ns: u64) -> u32 {
    ns.min(u32::MAX as u64) as u32
}

/// The part of `[from, to)` after `t`.
fn after(t: u64, from: u64, to: u64) -> u64 {
    to.saturating_sub(from.max(t))
}

impl Stamps {
    /// The stamps of a frame received at `rx` (kernel timestamp) and read at `read`
    /// during the wake-up starting at `cur_wake`, the previous one having had the marks
    /// `prev`.
    pub fn at_read(rx: u64, read: u64, cur_wake: u64, prev: &Marks) -> Stamps {
        let mut before = [0u32; 6];
        if rx > 0 && rx <= read {
            before[BACKLOG] = sat(prev.wake.min(read).saturating_sub(rx));
            before[PREV_RX] = sat(after(rx, prev.wake, prev.rx_end));
            before[PREV_TX] = sat(after(rx, prev.rx_end, prev.tx_end));
            before[PREV_OTHER] = sat(after(rx, prev.tx_end, prev.sleep));
            before[WAKEUP] = sat(after(rx, prev.sleep, cur_wake));
            before[RX_BEFORE] = sat(after(rx, cur_wake, read));
        }
        Stamps {
            read,
            before,
            handoff: Marks::default(),
        }
    }
}

/// Counts and sums of one band of totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Band {
    count: u64,
    total_ns: u64,
    parts_ns: [u64; NPARTS],
    off_cpu_ns: u64,
    send_frames: u64,
}

/// The breakdown of every frame sent so far.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Breakdown {
    bands: Vec<Band>,
    tail: [[u64; TAIL_BUCKETS_US.len() + 1]; NPARTS],
    tail_off_cpu: [u64; TAIL_BUCKETS_US.len() + 1],
    wakeups: u64,
    busy_ns: u64,
    off_cpu_ns: u64,
    publications: u64,
    publish_ns: u64,
    publish_max_ns: u64,
}

impl Default for Breakdown {
    fn default() -> Self {
        Breakdown {
            bands: vec![Band::default(); BANDS_US.len() + 1],
            tail: [[0; TAIL_BUCKETS_US.len() + 1]; NPARTS],
            tail_off_cpu: [0; TAIL_BUCKETS_US.len() + 1],
            wakeups: 0,
            busy_ns: 0,
            off_cpu_ns: 0,
            publications: 0,
            publish_ns: 0,
            publish_max_ns: 0,
        }
    }
}

/// The wake-up that sends a frame, as the breakdown needs it.
#[derive(Clone, Copy, Debug, Default)]
pub struct SendCtx {
    /// Its marks so far (`wake`, `rx_end`).
    pub marks: Marks,
    /// Start of the send call (the end of the frame's added latency).
    pub send: u64,
    /// Time spent in send calls of this wake-up before this one.
    pub tx_other: u64,
    /// The thread was off its CPU this long between the wake-up and the send call.
    pub off_cpu: u64,
    /// Frames in the send call.
    pub frames: u64,
    /// When the wake-up read again after its first send calls (0: it did not), and the
    /// time in send calls before that: frames read then waited for those calls before
    /// their read (`prev_tx`), not after it.
    pub mid: u64,
    pub tx_mid: u64,
}

fn bucket(edges: &[u64], ns: u64) -> usize {
    edges
        .iter()
        .position(|&e| ns < e * 1000)
        .unwrap_or(edges.len())
}

impl Breakdown {
    /// The parts of the latency of a frame with stamps `s` sent as `c`. They add up to
    /// `c.send` minus the frame's kernel timestamp (for a frame stamped at its read).
    pub fn parts(s: &Stamps, c: &SendCtx) -> [u64; NPARTS] {
        let mut p = [0u64; NPARTS];
        for (d, v) in p.iter_mut().zip(s.before) {
            *d = v.into();
        }
        let from = if s.read >= c.marks.wake {
            // Read in this wake-up.
            p[RX_AFTER] = c.marks.rx_end.saturating_sub(s.read);
            c.marks.rx_end.max(s.read)
        } else {
            p[HELD] = c.marks.wake.saturating_sub(s.read);
            c.marks.wake
        };
        let rest = c.send.saturating_sub(from);
        let other = if c.mid > 0 && s.read >= c.mid {
            c.tx_other.saturating_sub(c.tx_mid)
        } else {
            c.tx_other
        };
        p[TX_OTHER] = other.min(rest);
        p[TX_PREP] = rest - p[TX_OTHER];
        p
    }

    /// Count one frame sent.
    pub fn record(&mut self, rx: u64, s: &Stamps, c: &SendCtx) {
        if rx == 0 || s.read == 0 || rx > s.read {
            return;
        }
        let p = Self::parts(s, c);
        let total: u64 = p.iter().sum();
        let b = &mut self.bands[bucket(&BANDS_US, total)];
        b.count += 1;
        b.total_ns += total;
        for (a, v) in b.parts_ns.iter_mut().zip(p) {
            *a += v;
        }
        b.off_cpu_ns += c.off_cpu;
        b.send_frames += c.frames;
        if total >= TAIL_US * 1000 {
            for (h, v) in self.tail.iter_mut().zip(p) {
                h[bucket(&TAIL_BUCKETS_US, v)] += 1;
            }
            self.tail_off_cpu[bucket(&TAIL_BUCKETS_US, c.off_cpu)] += 1;
        }
    }

    /// Count one wake-up: `busy` from its start to its sleep, `off_cpu` of that time off
    /// the CPU.
    pub fn wakeup(&mut self, busy: u64, off_cpu: u64) {
        self.wakeups += 1;
        self.busy_ns += busy;
        self.off_cpu_ns += off_cpu;
    }

    /// Count one stats publication that took `ns` (part of `prev_other` for the frames
    /// arriving meanwhile).
    pub fn publication(&mut self, ns: u64) {
        self.publications += 1;
        self.publish_ns += ns;
        self.publish_max_ns = self.publish_max_ns.max(ns);
    }

    /// Frames counted.
    pub fn count(&self) -> u64 {
        self.bands.iter().map(|b| b.count).sum()
    }

    /// The JSON form: sums and counts only, under keys that name their bounds, so the
    /// snapshots of several workers merge by adding.
    pub fn to_json(&self) -> Value {
        let parts = |v: &[u64; NPARTS]| -> Map<String, Value> {
            PARTS
                .iter()
                .zip(v)
                .map(|(k, n)| (k.to_string(), json!(n)))
                .collect()
        };
        let bands: Map<String, Value> = self
            .bands
            .iter()
            .enumerate()
            .map(|(i, b)| {
                (
                    range_name(&BANDS_US, i),
                    json!({
                        "count": b.count,
                        "total_ns": b.total_ns,
                        "parts_ns": parts(&b.parts_ns),
                        "off_cpu_ns": b.off_cpu_ns,
                        "send_frames": b.send_frames,
                    }),
                )
            })
            .collect();
        let hist = |h: &[u64]| -> Map<String, Value> {
            h.iter()
                .enumerate()
                .map(|(i, n)| (range_name(&TAIL_BUCKETS_US, i), json!(n)))
                .collect()
        };
        let tail: Map<String, Value> = PARTS
            .iter()
            .zip(&self.tail)
            .map(|(k, h)| (k.to_string(), Value::Object(hist(h))))
            .chain([(
                "off_cpu".to_string(),
                Value::Object(hist(&self.tail_off_cpu)),
            )])
            .collect();
        json!({
            "bands_us": bands,
            format!("tail_from_{TAIL_US}us"): tail,
            "wakeups": self.wakeups,
            "busy_ns": self.busy_ns,
            "off_cpu_ns": self.off_cpu_ns,
            "publications": self.publications,
            "publish_ns": self.publish_ns,
            "publish_max_ns": self.publish_max_ns,
        })
    }
}

/// `"a-b"` for range `i` of `edges` (in µs), `"a-"` for the last.
fn range_name(edges: &[u64], i: usize) -> String {
    let from = if i == 0 { 0 } else { edges[i - 1] };
    match edges.get(i) {
        Some(to) => format!("{from}-{to}"),
        None => format!("{from}-"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const US: u64 = 1000;

    fn prev() -> Marks {
        // Previous wake-up: woke at 1000 µs, received until 1010, transmitted until 1050,
        // slept at 1060.
        Marks {
            wake: 1000 * US,
            rx_end: 1010 * US,
            tx_end: 1050 * US,
            sleep: 1060 * US,
        }
    }

    #[test]
    fn a_frame_arriving_during_the_previous_transmit_waits_for_it_and_the_wakeup() {
        let cur = Marks {
            wake: 1100 * US,
            rx_end: 1108 * US,
            tx_end: 0,
            sleep: 0,
        };
        // Arrived at 1030 (during the previous transmit), read at 1105.
        let s = Stamps::at_read(1030 * US, 1105 * US, cur.wake, &prev());
        assert_eq!(s.before, [0, 0, 20_000, 10_000, 40_000, 5_000]);
        let c = SendCtx {
            marks: cur,
            send: 1130 * US,
            tx_other: 12 * US,
            off_cpu: 3 * US,
            frames: 4,
            ..SendCtx::default()
        };
        let p = Breakdown::parts(&s, &c);
        // rx_after 3 µs; after rx_end (1108): 22 µs, 12 of them the other send call.
        assert_eq!(
            p,
            [0, 0, 20_000, 10_000, 40_000, 5_000, 3_000, 0, 12_000, 10_000]
        );
        assert_eq!(p.iter().sum::<u64>(), 100 * US);
        let mut b = Breakdown::default();
        b.record(1030 * US, &s, &c);
        let j = b.to_json();
        // 100 µs: the band [100, 200) and the tail histograms.
        let band = &j["bands_us"]["100-200"];
        assert_eq!(band["count"], 1);
        assert_eq!(band["total_ns"], 100_000);
        assert_eq!(band["parts_ns"]["wakeup"], 40_000);
        assert_eq!(band["send_frames"], 4);
        assert_eq!(j["bands_us"]["50-100"]["count"], 0);
        assert_eq!(j["bands_us"]["1000-"]["count"], 0);
        // wakeup 40 µs: bucket [20, 50); off CPU 3 µs: [2, 5).
        assert_eq!(j["tail_from_100us"]["wakeup"]["20-50"], 1);
        assert_eq!(j["tail_from_100us"]["off_cpu"]["2-5"], 1);
        assert_eq!(j["tail_from_100us"]["backlog"]["0-2"], 1);
        assert_eq!(b.count(), 1);
    }

    #[test]
    fn a_frame_from_before_the_previous_wakeup_is_backlog() {
        let cur_wake = 1070 * US;
        let s = Stamps::at_read(990 * US, 1071 * US, cur_wake, &prev());
        // 10 µs before the previous wake-up, then its whole 60 µs, 10 µs asleep, 1 µs read.
        assert_eq!(s.before, [10_000, 10_000, 40_000, 10_000, 10_000, 1_000]);
    }

    #[test]
    fn a_frame_arriving_after_the_wakeup_or_held_over() {
        let cur = Marks {
            wake: 1100 * US,
            rx_end: 1110 * US,
            ..Marks::default()
        };
        // Arrived at 1102, read at 1104: all rx_before.
        let s = Stamps::at_read(1102 * US, 1104 * US, cur.wake, &prev());
        assert_eq!(s.before, [0, 0, 0, 0, 0, 2_000]);
        // Read at 1020 (the previous wake-up), sent now at 1115.
        let held = Stamps {
            read: 1020 * US,
            before: [0, 0, 0, 0, 5_000, 1_000],
            ..Stamps::default()
        };
        let c = SendCtx {
            marks: cur,
            send: 1115 * US,
            ..SendCtx::default()
        };
        let p = Breakdown::parts(&held, &c);
        assert_eq!(p[HELD], 80_000);
        assert_eq!(p[TX_PREP], 15_000);
        assert_eq!(p[RX_AFTER], 0);
        assert_eq!(p.iter().sum::<u64>(), (1115 - 1014) * US);
    }

    #[test]
    fn a_frame_read_again_after_the_first_send_waited_for_that_send_before_its_read() {
        // Woke at 1100, read until 1108, sent toward b from 1110 to 1140, read side b
        // again at 1141, sends toward a at 1150.
        let cur = Marks {
            wake: 1100 * US,
            rx_end: 1108 * US,
            ..Marks::default()
        };
        let again = Marks {
            tx_end: 1141 * US,
            sleep: 1141 * US,
            ..cur
        };
        let c = SendCtx {
            marks: cur,
            send: 1150 * US,
            tx_other: 30 * US,
            mid: 1141 * US,
            tx_mid: 30 * US,
            ..SendCtx::default()
        };
        // Arrived at 1120, during the send toward b; read at 1142.
        let s = Stamps::at_read(1120 * US, 1142 * US, again.tx_end, &again);
        assert_eq!(s.before, [0, 0, 21_000, 0, 0, 1_000]);
        let p = Breakdown::parts(&s, &c);
        assert_eq!(p[TX_OTHER], 0);
        assert_eq!(p[TX_PREP], 8_000);
        assert_eq!(p.iter().sum::<u64>(), 30 * US);
        // A frame of the first read in the same send call still waited for the send
        // toward b after its read.
        let first = Stamps::at_read(1104 * US, 1105 * US, cur.wake, &prev());
        let p = Breakdown::parts(&first, &c);
        assert_eq!(
            (p[RX_AFTER], p[TX_OTHER], p[TX_PREP]),
            (3_000, 30_000, 12_000)
        );
        assert_eq!(p.iter().sum::<u64>(), 46 * US);
    }

    #[test]
    fn unstamped_frames_are_not_counted() {
        let mut b = Breakdown::default();
        b.record(0, &Stamps::default(), &SendCtx::default());
        b.record(5, &Stamps::default(), &SendCtx::default());
        assert_eq!(b.count(), 0);
    }
}
