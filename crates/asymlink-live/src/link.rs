//! Link emulation: one direction of a slow access link, so that one box can stand in for
//! an ADSL line or a satellite hop where `netem` does not exist.
//!
//! # Principles
//!
//! The emulated link sits **after** the middlebox discipline, like a modem after the
//! router that shapes for it:
//!
//! ```text
//!  discipline ──► [modem buffer: FIFO `queue`] ──► serialiser (`rate`, `linklayer`)
//!             ──► random loss (`loss`) ──► propagation (`delay`) ──► device
//! ```
//!
//! * With `queue` set, the discipline is drained as fast as it releases packets into a
//!   drop-tail FIFO of that size: the buffer of the modem. A discipline that does not
//!   shape below the link rate leaves the queue here (the ADSL problem); one that does
//!   keeps it in the discipline, where it can be managed (the fix).
//! * Without `queue`, the discipline *is* the link's queue: it is asked for a packet only
//!   when the serialiser is idle, as the simulator's links do.
//! * The serialiser charges `linklayer.wire_len(ip_len)` bytes at `rate` (ATM cells,
//!   PTM, Ethernet overhead: [`asymlink_core::overhead::LinkLayer`]), in integer
//!   nanoseconds. A transmission starts at `max(link free, packet available)`, never
//!   before: when the loop wakes late it catches up without exceeding the rate, and an
//!   idle link does not bank credit.
//! * Loss is decided per packet with the core's seeded [`Rng`]; a lost packet still
//!   occupies the serialiser (it was sent, then corrupted).
//! * Propagation is a FIFO delay line; only its head is a deadline.
//!
//! Without `rate`, serialisation takes no time; without `delay`, no propagation time. An
//! absent `[emulation.DIR]` section is a plain wire.

use crate::packet::LivePacket;
use asymlink_core::overhead::{LinkLayer, LinkLayerConfig};
use asymlink_core::packet::Pkt;
use asymlink_core::rand::Rng;
use asymlink_core::time::{dur_ns, earliest, Instant};
use asymlink_core::units::{Limit, Rate, Span};
use serde::Deserialize;
use std::collections::VecDeque;

/// `[emulation.to_a]` / `[emulation.to_b]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LinkEmuConfig {
    /// Serialisation rate (absent: infinitely fast).
    #[serde(default)]
    pub rate: Option<Rate>,
    /// One-way propagation delay.
    #[serde(default)]
    pub delay: Option<Span>,
    /// Random loss probability per packet (0..=1).
    #[serde(default)]
    pub loss: f64,
    /// How packets are charged on the wire (default: raw IP bytes).
    #[serde(default)]
    pub linklayer: Option<LinkLayerConfig>,
    /// The modem buffer in front of the serialiser (see the module documentation).
    #[serde(default)]
    pub queue: Option<Limit>,
}

impl LinkEmuConfig {
    /// Check the values; the error is (key, message).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if !(0.0..=1.0).contains(&self.loss) || self.loss.is_nan() {
            return Err((
                "loss",
                format!("{} is not a probability (0..=1)", self.loss),
            ));
        }
        if self.rate.is_some_and(|r| r.0 == 0) {
            return Err(("rate", "must be positive".into()));
        }
        if matches!(self.queue, Some(Limit::Packets(0)) | Some(Limit::Bytes(0))) {
            return Err(("queue", "must be positive".into()));
        }
        Ok(())
    }
}

/// Counters of one emulated link.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Packets offered by the discipline.
    pub offered: u64,
    /// Packets that finished propagation and went to the device.
    pub delivered: u64,
    /// Bytes (IP length) delivered.
    pub delivered_bytes: u64,
    /// Wire bytes charged by the serialiser (after the link-layer model).
    pub wire_bytes: u64,
    /// Packets lost at random.
    pub lost: u64,
    /// Packets dropped because the modem buffer was full.
    pub queue_dropped: u64,
    /// Highest modem-buffer occupancy in packets.
    pub max_queue_packets: u32,
}

/// One direction's emulated link.
#[derive(Debug)]
pub struct Link {
    rate: Option<Rate>,
    delay_ns: u64,
    loss: f64,
    ll: LinkLayer,
    limit: Option<Limit>,
    rng: Rng,
    /// Modem buffer: (packet, time it became available to the serialiser).
    queue: VecDeque<(LivePacket, Instant)>,
    queue_bytes: u64,
    free_at: Instant,
    wire: VecDeque<(Instant, LivePacket)>,
    lost: Vec<LivePacket>,
    stats: LinkStats,
}

impl Link {
    /// A link; `cfg = None` is a plain wire.
    pub fn new(cfg: Option<&LinkEmuConfig>, seed: u64) -> Link {
        let d = LinkEmuConfig::default();
        let c = cfg.unwrap_or(&d);
        Link {
            rate: c.rate,
            delay_ns: c.delay.map(|s| dur_ns(s.0)).unwrap_or(0),
            loss: c.loss,
            ll: c.linklayer.map(|l| l.build()).unwrap_or(LinkLayer::RAW),
            limit: c.queue,
            rng: Rng::new(seed),
            queue: VecDeque::new(),
            queue_bytes: 0,
            free_at: Instant::ZERO,
            wire: VecDeque::new(),
            lost: Vec::new(),
            stats: LinkStats::default(),
        }
    }

    /// Apply new parameters (SIGHUP) keeping queued and in-flight packets. The random
    /// stream continues.
    pub fn reconfigure(&mut self, cfg: Option<&LinkEmuConfig>) {
        let d = LinkEmuConfig::default();
        let c = cfg.unwrap_or(&d);
        self.rate = c.rate;
        self.delay_ns = c.delay.map(|s| dur_ns(s.0)).unwrap_or(0);
        self.loss = c.loss;
        self.ll = c.linklayer.map(|l| l.build()).unwrap_or(LinkLayer::RAW);
        self.limit = c.queue;
    }

    /// Whether this link is a plain wire (packets go straight to the device).
    pub fn is_passthrough(&self) -> bool {
        self.rate.is_none()
            && self.delay_ns == 0
            && self.loss == 0.0
            && self.limit.is_none()
            && self.queue.is_empty()
            && self.wire.is_empty()
            && self.lost.is_empty()
    }

    /// Whether a modem buffer sits between the discipline and the serialiser.
    pub fn has_queue(&self) -> bool {
        self.limit.is_some()
    }

    /// Whether the discipline should be asked for a packet at `now`: always with a modem
    /// buffer (it absorbs or drops), otherwise only when the serialiser is idle.
    #[inline]
    pub fn wants_packet(&self, now: Instant) -> bool {
        self.limit.is_some() || self.free_at <= now
    }

    /// The discipline hands over a packet at `now`, available since `ready`
    /// (`ready <= now`). Returns the packet back if the modem buffer rejected it (the
    /// caller counts and frees it).
    pub fn offer(&mut self, now: Instant, ready: Instant, pkt: LivePacket) -> Option<LivePacket> {
        self.stats.offered += 1;
        let ready = ready.min(now);
        if let Some(limit) = self.limit {
            let len = pkt.ip_len();
            if !limit.admits(self.queue.len() as u32, self.queue_bytes, len) {
                self.stats.queue_dropped += 1;
                return Some(pkt);
            }
            self.queue_bytes += len as u64;
            self.queue.push_back((pkt, ready));
            self.stats.max_queue_packets =
                self.stats.max_queue_packets.max(self.queue.len() as u32);
            // The serialiser takes the head at once if idle: a modem holds `queue`
            // packets besides the one on the line.
            self.start_queued(now);
            None
        } else {
            self.transmit(ready, pkt);
            None
        }
    }

    /// Move packets from the modem buffer to the serialiser while it is idle at `now`.
    fn start_queued(&mut self, now: Instant) {
        while self.free_at <= now {
            let Some((pkt, ready)) = self.queue.pop_front() else {
                break;
            };
            self.queue_bytes -= pkt.ip_len() as u64;
            self.transmit(ready, pkt);
        }
    }

    /// Start serialising `pkt`, available since `ready`.
    fn transmit(&mut self, ready: Instant, pkt: LivePacket) {
        let start = self.free_at.max(ready);
        let wire = self.ll.wire_len(pkt.ip_len()) as u64;
        self.stats.wire_bytes += wire;
        let end = match self.rate {
            Some(r) => start.saturating_add(core::time::Duration::from_nanos(r.tx_nanos(wire))),
            None => start,
        };
        self.free_at = end;
        if self.loss > 0.0 && self.rng.bernoulli(self.loss) {
            self.stats.lost += 1;
            self.lost.push(pkt);
            return;
        }
        let arrive = Instant(end.0.saturating_add(self.delay_ns));
        self.wire.push_back((arrive, pkt));
    }

    /// Advance to `now`: start transmissions from the modem buffer, and move packets whose
    /// propagation has ended to `out` (in order).
    pub fn poll(&mut self, now: Instant, out: &mut Vec<LivePacket>) {
        self.start_queued(now);
        while self.wire.front().is_some_and(|(t, _)| *t <= now) {
            let (_, p) = self.wire.pop_front().expect("front exists");
            self.stats.delivered += 1;
            self.stats.delivered_bytes += p.ip_len() as u64;
            out.push(p);
        }
    }

    /// Packets lost at random since the last call (the caller counts and frees them).
    pub fn take_lost(&mut self) -> std::vec::Drain<'_, LivePacket> {
        self.lost.drain(..)
    }

    /// The next instant at which [`Link::poll`] has something to do.
    pub fn poll_at(&self) -> Option<Instant> {
        let q = (!self.queue.is_empty()).then_some(self.free_at);
        earliest(q, self.wire.front().map(|(t, _)| *t))
    }

    /// When the serialiser is next idle (for a discipline that feeds it directly).
    pub fn free_at(&self) -> Instant {
        self.free_at
    }

    /// Packets in the modem buffer and on the wire.
    pub fn backlog(&self) -> (u32, u32) {
        (self.queue.len() as u32, self.wire.len() as u32)
    }

    /// Counters.
    pub fn stats(&self) -> &LinkStats {
        &self.stats
    }

    /// Remove everything (exit).
    pub fn drain_all(&mut self) -> Vec<LivePacket> {
        let mut v: Vec<LivePacket> = self.queue.drain(..).map(|(p, _)| p).collect();
        v.extend(self.wire.drain(..).map(|(_, p)| p));
        v.append(&mut self.lost);
        self.queue_bytes = 0;
        v
    }
}
