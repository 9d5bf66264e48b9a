//! Aggregate rate control at a host's TCP output: the core's
//! [`asymlink_core::aggregate::Controller`] behind the engine's [`Conditioner`] hooks, as
//! the paper's `qosmgr` agent sits behind ns-2's TCP.
//!
//! ```toml
//! [[nodes]]
//! name = "server"
//! [nodes.conditioner]
//! timer = "15ms"
//! [[nodes.conditioner.policies]]
//! filter = { src_port = "*" }
//! profile = { depth = "20KB", rate = "500kbit", max_packet = "1040B" }
//! action = { kind = "shape" }
//! scheme = { kind = "logical", depth = "rtt" }
//! ```
//!
//! How the engine's hooks map onto the controller:
//!
//! * a connection's tuple at open ([`Conditioner::on_open_flow`]) joins it to the first
//!   policy whose filter matches (source = this host's end); closing leaves;
//! * before every data segment (new or retransmitted, and a FIN) the sender asks
//!   [`Conditioner::admit`]: send, mark (DSCP), police (the segment counts as sent and is
//!   lost) or wait. A waiting sender never retries on its own timer: it retries when its
//!   own ACKs or application writes run its output routine, and when the controller's
//!   shaping timer ([`Conditioner::poll_at`]) wakes the waiters in the policy's order
//!   ([`Conditioner::wake_order`]) — so that the fairness order, not the event queue's tie
//!   breaking, decides who gets the tokens;
//! * after every call into a connection ([`Conditioner::on_activity`]) the controller gets
//!   the connection's RTT estimate (for RTT-weighted depths) and the event (a trigger).

use crate::packet::ConnId;
use crate::tcp::{Admit, Conditioner};
use asymlink_core::aggregate::{Controller, ControllerConfig, Decision, FlowTuple};
use asymlink_core::config::ConfigError;
use asymlink_core::time::{Duration, Instant};
use core::net::IpAddr;

/// The core controller as a simulator conditioner.
#[derive(Debug)]
pub struct AggregateConditioner {
    ctl: Controller,
    wake: Vec<u64>,
}

impl AggregateConditioner {
    /// Build from the `conditioner` table of a host.
    pub fn new(cfg: &ControllerConfig) -> Result<AggregateConditioner, ConfigError> {
        Ok(AggregateConditioner {
            ctl: Controller::new(cfg)?,
            wake: Vec::new(),
        })
    }

    /// The controller (policies, counters).
    pub fn controller(&self) -> &Controller {
        &self.ctl
    }
}

impl Conditioner for AggregateConditioner {
    fn admit(&mut self, now: Instant, conn: ConnId, ip_len: u32) -> Admit {
        match self.ctl.admit(now, conn as u64, ip_len) {
            Decision::Send => Admit::Send,
            Decision::Mark(d) => Admit::Mark(d),
            Decision::Drop => Admit::Drop,
            // Woken by `wake_order` (or by its own ACKs), never by its own timer.
            Decision::Wait(_) => Admit::Wait(Instant::MAX),
        }
    }

    fn on_open_flow(
        &mut self,
        now: Instant,
        conn: ConnId,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
    ) {
        let t = FlowTuple {
            src: local.0,
            src_port: local.1,
            dst: remote.0,
            dst_port: remote.1,
        };
        self.ctl.handle_open(now, conn as u64, &t);
    }

    fn on_close(&mut self, now: Instant, conn: ConnId) {
        self.ctl.handle_close(now, conn as u64);
    }

    fn on_activity(&mut self, now: Instant, conn: ConnId, srtt: Option<Duration>) {
        if let Some(rtt) = srtt {
            self.ctl.handle_rtt(now, conn as u64, rtt);
        }
        self.ctl.handle_event(now, conn as u64);
    }

    fn poll_at(&self) -> Option<Instant> {
        self.ctl.poll_at()
    }

    fn wake_order(&mut self, now: Instant, conns: &mut Vec<ConnId>) {
        self.wake.clear();
        self.ctl.poll_wake(now, &mut self.wake);
        conns.clear();
        conns.extend(self.wake.iter().map(|&k| k as ConnId));
    }
}
