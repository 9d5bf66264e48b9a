//! TCP endpoints for the simulator.
//!
//! A [`Connection`] is a sans-IO state machine (quinn style): the engine feeds it segments
//! ([`Connection::on_segment`]), application writes ([`Connection::write`],
//! [`Connection::close`]) and timer expiries ([`Connection::on_timer`]); it answers with
//! segments to transmit and events for the application, collected in a [`ConnIo`], and
//! with [`Connection::poll_at`], its next deadline.
//!
//! What is modelled (see `docs/tcp.md` for the RFC mapping and the differences from ns-2
//! and Linux): three-way handshake with MSS / window scale / SACK-permitted / timestamps /
//! ECN negotiation; slow start and congestion avoidance (Reno, NewReno, CUBIC); fast
//! retransmit and fast recovery (Reno, NewReno RFC 6582, SACK RFC 6675); RACK-TLP loss
//! detection (RFC 8985) and proportional rate reduction (RFC 6937); limited transmit
//! (RFC 3042); RTO per RFC 6298 with backoff and Karn's rule; delayed ACKs (every d
//! segments, timer, immediate ACK on out-of-order data and gap fills, quick-ACK start);
//! Nagle (RFC 896 or Minshall) and sender SWS avoidance; zero windows and the persist
//! timer (a receiving application may stop reading); ECN (RFC 3168); receive window
//! with scaling that never shrinks; FIN teardown. Payload bytes are counted, not carried.
//!
//! Hooks for the mechanisms of later chapters: a [`Conditioner`] consulted before every
//! transmission (aggregate rate control at the server), a pluggable congestion-avoidance
//! increase ([`config::CaIncrease`]) and a [`RwndPolicy`] that bounds the advertised
//! window (receiver-based access-link management).

pub mod bbr;
pub mod cc;
pub mod config;
mod conn;
pub mod pacing;
pub mod rate;
pub mod recv;
pub mod rtt;
pub mod scoreboard;

pub use config::{
    CcAlgo, CwndValidation, DelackMode, GrowBy, IdleRestart, NagleRule, TcpConfig, TcpProfile,
    TcpSpec, TimeoutMode,
};
pub use conn::{CaState, ConnEvent, ConnStats, Connection, State};

use crate::packet::ConnId;
use asymlink_core::time::{Duration, Instant};
use asymlink_core::wire::Headers;
use core::net::IpAddr;

/// What a [`Conditioner`] says about a segment the sender wants to transmit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Admit {
    /// Send it unchanged.
    Send,
    /// Send it with this DSCP (in-profile marking).
    Mark(u8),
    /// Not before this instant; the sender will ask again then (or on the next ACK).
    Wait(Instant),
    /// Police: the segment is dropped at the source's output (TCP will see it as lost).
    Drop,
}

/// A traffic conditioner at the sender's TCP output (aggregate rate control).
pub trait Conditioner: Send {
    /// May connection `conn` send a packet of `ip_len` bytes now?
    fn admit(&mut self, now: Instant, conn: ConnId, ip_len: u32) -> Admit;
    /// A connection of this host opened.
    fn on_open(&mut self, _now: Instant, _conn: ConnId) {}
    /// A connection of this host closed.
    fn on_close(&mut self, _now: Instant, _conn: ConnId) {}
    /// Earliest instant at which waiting senders should be woken (shaping timer).
    fn poll_at(&self) -> Option<Instant> {
        None
    }
    /// A connection of this host opened; `local` is this host's end, `remote` the peer's
    /// (policy filters match on them). The default calls [`Conditioner::on_open`].
    fn on_open_flow(
        &mut self,
        now: Instant,
        conn: ConnId,
        _local: (IpAddr, u16),
        _remote: (IpAddr, u16),
    ) {
        self.on_open(now, conn);
    }
    /// Something happened on `conn` (an ACK or other segment, an application write, a
    /// timer, a wake-up); `srtt` is its smoothed RTT estimate. Called after every call
    /// into the connection: the aggregate's other shaping triggers (§6.3).
    fn on_activity(&mut self, _now: Instant, _conn: ConnId, _srtt: Option<Duration>) {}
    /// At a wake-up (`poll_at` reached): keep in `conns`, the host's connections, those to
    /// wake, in the order they may send. The default wakes all in connection order.
    fn wake_order(&mut self, _now: Instant, _conns: &mut Vec<ConnId>) {}
}

/// A receive-window policy at the receiver (bounds the window each connection advertises).
pub trait RwndPolicy: Send {
    /// `bytes` of payload arrived on `conn`.
    fn on_data(&mut self, _now: Instant, _conn: ConnId, _bytes: u32) {}
    /// The host sent a packet of `bytes` payload on `conn`.
    fn on_send(&mut self, _now: Instant, _conn: ConnId, _bytes: u32) {}
    /// The window (bytes) `conn` may advertise now; `buffer_free` is what its receive
    /// buffer allows. The connection never moves its right edge left, whatever this says.
    fn window(&mut self, now: Instant, conn: ConnId, buffer_free: u64, mss: u32) -> u64;
    /// `conn` closed.
    fn on_close(&mut self, _now: Instant, _conn: ConnId) {}
}

/// Inputs and outputs of one call into a connection.
pub struct ConnIo<'a> {
    /// Segments to transmit, in order.
    pub out: &'a mut Vec<Headers>,
    /// Events for the application.
    pub events: &'a mut Vec<ConnEvent>,
    /// The host's conditioner, if any.
    pub conditioner: Option<&'a mut dyn Conditioner>,
    /// The host's receive-window policy, if any.
    pub rwnd: Option<&'a mut dyn RwndPolicy>,
}

#[cfg(test)]
mod tests;
