//! The receiver-based policy at a simulated receiving host: [`tcp::RwndPolicy`] on top of
//! `asymlink_core::rwnd::Policy`, installed by `rwnd_policy = { ... }` on a `[[nodes]]`
//! entry (or [`crate::Simulation::set_rwnd_policy`]).
//!
//! The host's connections tell it what they send and receive; it answers the window each
//! may advertise (the connection still never advertises below one MSS or moves its right
//! edge left). What the hooks show, and therefore what it measures:
//!
//! * the handshake RTT: from the connection's first segment (its SYN or SYN-ACK) to the
//!   first segment it builds after the handshake (the ACK of the SYN-ACK, or on the
//!   accepting side the first data from the peer);
//! * request/response RTTs: data the host sends while nothing arrives, to the next
//!   arrival (the core policy takes these);
//! * no port numbers: the hooks carry none, so flows are classified by behaviour only
//!   (ports give first guesses in the middlebox rewriter);
//! * data arrivals in payload bytes (the link-rate estimate, when no rate is given).
//!
//! [`tcp::RwndPolicy`]: crate::tcp::RwndPolicy

use crate::packet::ConnId;
use crate::tcp::RwndPolicy;
use asymlink_core::config::ConfigError;
use asymlink_core::rwnd::{FlowInfo, Policy, RwndConfig};
use asymlink_core::time::Instant;
use std::collections::HashMap;

/// The policy of one receiving host.
pub struct RwndHost {
    policy: Policy<ConnId>,
    /// Per connection: when its first segment left, until the handshake RTT is sampled.
    handshake: HashMap<ConnId, Option<Instant>>,
}

impl RwndHost {
    /// A host policy from its configuration.
    pub fn new(cfg: &RwndConfig) -> Result<RwndHost, ConfigError> {
        Ok(RwndHost {
            policy: Policy::new(cfg)?,
            handshake: HashMap::new(),
        })
    }

    /// The core policy (classes and allocations of the host's connections).
    pub fn policy(&self) -> &Policy<ConnId> {
        &self.policy
    }

    /// What the policy knows about connection `conn`.
    pub fn flow(&self, conn: ConnId) -> Option<FlowInfo> {
        self.policy.flow(conn)
    }

    /// The handshake ends at the first segment received or built after the first one sent.
    fn handshake_done(&mut self, now: Instant, conn: ConnId) {
        if let Some(slot) = self.handshake.get_mut(&conn) {
            if let Some(t0) = slot.take() {
                self.policy
                    .handle_rtt_sample(now, conn, now.saturating_since(t0));
            }
        }
    }
}

impl RwndPolicy for RwndHost {
    fn on_data(&mut self, now: Instant, conn: ConnId, bytes: u32) {
        self.handshake_done(now, conn);
        self.policy.handle_data(now, conn, bytes);
    }

    fn on_send(&mut self, now: Instant, conn: ConnId, bytes: u32) {
        if let std::collections::hash_map::Entry::Vacant(e) = self.handshake.entry(conn) {
            e.insert(Some(now));
            self.policy.handle_open(now, conn, None);
        }
        self.policy.handle_send(now, conn, bytes);
    }

    fn window(&mut self, now: Instant, conn: ConnId, buffer_free: u64, mss: u32) -> u64 {
        self.handshake_done(now, conn);
        self.policy.window(now, conn, mss).min(buffer_free)
    }

    fn on_close(&mut self, now: Instant, conn: ConnId) {
        self.handshake.remove(&conn);
        self.policy.handle_close(now, conn);
    }
}
