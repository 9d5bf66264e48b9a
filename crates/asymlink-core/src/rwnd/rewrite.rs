//! The policy enforced by a middlebox: advertised-window rewriting on the ACKs the
//! receivers send toward the senders.
//!
//! [`WindowRewriter`] is a [`Rewriter`] (it sees both directions of a middlebox, before
//! queueing). Per TCP connection it learns from the handshake the receiver's window scale
//! and MSS and takes one RTT sample (first SYN to the first non-SYN segment of its opener);
//! it feeds the data travelling toward the receiver and the data the receiver sends to a
//! [`Policy`]; and it lowers the window field of every segment the receiver sends to the
//! policy's allocation:
//!
//! * it never raises the window the receiver advertised;
//! * it never moves the right edge it advertised earlier to the left (RFC 9293
//!   §3.8.6.2.2 discourages shrinking the window) — unless the receiver itself does;
//! * it honours the window scale negotiated in the handshake (RFC 7323 §2.3) and rounds
//!   the window *up* to the scale's unit; when a unit is so large that the allocation is
//!   exceeded by an MSS or more, the segment is counted (`mss_inexpressible`);
//! * the window of a SYN or SYN-ACK (never scaled) is lowered to the flow's first
//!   allocation;
//! * a duplicate ACK stays a duplicate: while the ACK number and the window the receiver
//!   sent are those of its previous ACK, the window leaves as it left then (`frozen`),
//!   however the allocation moved meanwhile (RFC 5681 §2 counts an ACK as a duplicate
//!   only when the window is unchanged);
//! * a connection whose handshake it did not see (unknown scale) passes untouched and is
//!   counted, as do packets it cannot parse and non-TCP packets;
//! * a segment that may be signed end to end
//!   ([`Headers::is_signed`](crate::wire::Headers::is_signed): TCP-MD5, TCP-AO, TCP
//!   behind an IP Authentication Header, options not readable to the end) is never
//!   edited (`signed_untouched`): the peer would discard it;
//! * a connection counts in the policy's shares only once its handshake completed or data
//!   flowed: unanswered (possibly spoofed) SYNs shrink no one's window; until then its
//!   SYN-ACK gets the window it would get as one more flow;
//! * the flow table is bounded (`max_flows`): flows still in their handshake are evicted,
//!   oldest first, in amortized constant time; counted flows are never evicted (a new
//!   flow that finds the table full of them is not tracked, `table_full`), so no live
//!   connection's windows change mid-stream; flows quiet for `flow_timeout` are forgotten.
//!
//! On real packets, [`Pkt::set_tcp_window`] edits the bytes with an RFC 1624 incremental
//! checksum update.

use super::config::{FlowClass, RwndConfig};
use super::policy::{Policy, DEFAULT_MSS};
use crate::config::ConfigError;
use crate::packet::Pkt;
use crate::pipeline::{Action, Dir, Rewriter};
use crate::time::{earliest, Duration, Instant};
use crate::wire::{FlowKey, SeqNumber, TcpFlags, TcpRepr};
use std::collections::{BTreeMap, VecDeque};

/// Counters of a [`WindowRewriter`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RewriteCounters {
    /// Segments from receivers whose window field was lowered (SYNs excluded).
    pub rewritten: u64,
    /// SYN or SYN-ACK segments from receivers whose window field was lowered.
    pub syn_rewritten: u64,
    /// Segments whose window, rounded up to the scale's unit, exceeds the allocation by
    /// one MSS or more.
    pub mss_inexpressible: u64,
    /// Segments from receivers passed untouched because the flow's window scale is
    /// unknown (its handshake was not seen in full).
    pub unknown_scale: u64,
    /// TCP segments of flows not tracked (handshake not seen, or evicted / expired).
    pub untracked: u64,
    /// Packets that could not be parsed (passed untouched).
    pub unparsed: u64,
    /// Segments from receivers that may be signed end to end (TCP-MD5, TCP-AO, behind an
    /// IP Authentication Header, or options not readable to the end): never edited.
    pub signed_untouched: u64,
    /// Segments from receivers with the ACK number and window of the previous one, sent
    /// with the previous segment's window (so a duplicate ACK stays a duplicate).
    pub frozen: u64,
    /// Flows still in their handshake evicted because the table was full.
    pub evicted: u64,
    /// New flows not tracked because the table was full of counted flows (those are
    /// never evicted; they leave when they close or go quiet for `flow_timeout`).
    pub table_full: u64,
    /// Flows forgotten after `flow_timeout` without packets.
    pub expired: u64,
}

#[derive(Clone, Debug)]
struct BoxFlow {
    /// The receiver sent the first SYN.
    receiver_opened: bool,
    /// The window-scale option of the receiver's SYN or SYN-ACK, once seen.
    recv_ws: Option<Option<u8>>,
    /// The window-scale option of the sender's SYN or SYN-ACK, once seen.
    send_ws: Option<Option<u8>>,
    /// When the first SYN passed.
    syn_at: Option<Instant>,
    /// The policy counts the flow: its handshake completed or data flowed. Until then
    /// it shares nothing (a SYN alone may be spoofed).
    counted: bool,
    /// The port-based class guess, applied when the flow is counted.
    guess: Option<FlowClass>,
    synack_seen: bool,
    rtt_done: bool,
    /// The MSS options of the receiver's and the sender's SYN or SYN-ACK.
    mss_opts: [Option<u16>; 2],
    /// The right edge last advertised toward the sender (after rewriting).
    edge: Option<SeqNumber>,
    /// The last ACK from the receiver: (ACK number, window field as received, window
    /// field as sent). A segment with the same ACK number and received window leaves with
    /// the same sent window, so duplicate ACKs stay duplicates.
    last_ack: Option<(SeqNumber, u16, u16)>,
    /// When the flow was first tracked.
    born: Instant,
    last_seen: Instant,
    fin_to_receiver: bool,
    fin_from_receiver: bool,
}

impl BoxFlow {
    fn new(now: Instant, receiver_opened: bool) -> BoxFlow {
        BoxFlow {
            receiver_opened,
            recv_ws: None,
            send_ws: None,
            syn_at: None,
            counted: false,
            guess: None,
            synack_seen: false,
            rtt_done: false,
            mss_opts: [None, None],
            edge: None,
            last_ack: None,
            born: now,
            last_seen: now,
            fin_to_receiver: false,
            fin_from_receiver: false,
        }
    }

    /// The segment size toward the receiver: the smaller MSS option of the handshake
    /// (536 without any).
    fn mss(&self) -> u32 {
        self.mss_opts
            .iter()
            .flatten()
            .map(|&m| m.max(1) as u32)
            .min()
            .unwrap_or(DEFAULT_MSS)
    }

    /// The shift of the receiver's window field, if known.
    //= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
    //# A TCP MAY send the Window Scale option in a <SYN,ACK> segment only if
    //# it has received a Window Scale option in the initial <SYN> segment.
    fn scale(&self) -> Option<u8> {
        let shift = match (self.recv_ws, self.send_ws) {
            (Some(Some(r)), Some(Some(_))) => r,
            (Some(_), Some(_)) => 0,
            // The receiver answered the SYN: its SYN-ACK alone tells whether scaling is on.
            (Some(r), None) if !self.receiver_opened => r.unwrap_or(0),
            _ => return None,
        };
        //= https://www.rfc-editor.org/rfc/rfc7323#section-2.3
        //# If a Window Scale option is received with a shift.cnt value larger
        //# than 14, the TCP SHOULD log the error but MUST use 14 instead of the
        //# specified value.
        Some(shift.min(14))
    }
}

/// Advertised-window rewriting at a middlebox, sharing the receiver policy of
/// [`Policy`]. See the module documentation.
pub struct WindowRewriter {
    /// Packets travelling in this direction go to the receivers.
    toward: Dir,
    policy: Policy<FlowKey>,
    flows: BTreeMap<FlowKey, BoxFlow>,
    /// Flows tracked before they are counted, oldest first (with their birth instant);
    /// may hold stale entries, skipped when popped.
    embryonic: VecDeque<(FlowKey, Instant)>,
    max_flows: usize,
    flow_timeout: Duration,
    sweep_at: Option<Instant>,
    counters: RewriteCounters,
}

impl WindowRewriter {
    /// A rewriter for receivers reached by packets travelling in `toward`.
    pub fn new(cfg: &RwndConfig, toward: Dir) -> Result<WindowRewriter, ConfigError> {
        let p = cfg.params()?;
        Ok(WindowRewriter {
            toward,
            max_flows: p.max_flows,
            flow_timeout: p.flow_timeout,
            // A box sees a request leave and its response come back without the leg
            // between the box and the receiver: such samples would understate BaseRTT.
            policy: Policy::from_params(p).without_response_samples(),
            flows: BTreeMap::new(),
            embryonic: VecDeque::new(),
            sweep_at: None,
            counters: RewriteCounters::default(),
        })
    }

    /// The policy (classes, allocations).
    pub fn policy(&self) -> &Policy<FlowKey> {
        &self.policy
    }

    /// The counters.
    pub fn stats(&self) -> &RewriteCounters {
        &self.counters
    }

    /// Flows tracked.
    pub fn tracked(&self) -> usize {
        self.flows.len()
    }

    /// The receiver's window scale for a flow, if tracked and known.
    pub fn scale(&self, key: &FlowKey) -> Option<u8> {
        self.flows.get(&key.canonical()).and_then(|f| f.scale())
    }

    fn forget(&mut self, now: Instant, key: FlowKey) {
        if self.flows.remove(&key).is_some() {
            self.policy.handle_close(now, key);
        }
    }

    /// The oldest flow still in its handshake, if any (amortized O(1): entries of flows
    /// that were counted or forgotten meanwhile are skipped once).
    fn oldest_embryonic(&mut self) -> Option<FlowKey> {
        while let Some(&(k, born)) = self.embryonic.front() {
            self.embryonic.pop_front();
            if self
                .flows
                .get(&k)
                .is_some_and(|f| !f.counted && f.born == born)
            {
                return Some(k);
            }
        }
        None
    }

    /// Make room for one more flow: evict the oldest flow still in its handshake. A table
    /// full of counted flows evicts none of them (that would change the windows of a live
    /// connection mid-stream, and let a SYN flood push real flows out): the new flow is
    /// not tracked (`table_full`). Amortized O(1), no scan of the table.
    fn make_room(&mut self, now: Instant) -> bool {
        while self.flows.len() >= self.max_flows {
            match self.oldest_embryonic() {
                Some(k) => {
                    self.forget(now, k);
                    self.counters.evicted += 1;
                }
                None => {
                    self.counters.table_full += 1;
                    return false;
                }
            }
        }
        true
    }

    fn track(
        &mut self,
        now: Instant,
        key: FlowKey,
        receiver_opened: bool,
        guess_ports: (u16, u16),
    ) -> bool {
        if !self.make_room(now) {
            return false;
        }
        let mut f = BoxFlow::new(now, receiver_opened);
        f.guess = self.policy.guess_ports(guess_ports.0, guess_ports.1);
        self.flows.insert(key, f);
        self.embryonic.push_back((key, now));
        if self.embryonic.len() > 2 * self.max_flows + 16 {
            let flows = &self.flows;
            self.embryonic
                .retain(|(k, born)| flows.get(k).is_some_and(|f| !f.counted && f.born == *born));
        }
        self.sweep_at = earliest(self.sweep_at, Some(now + self.flow_timeout));
        true
    }

    /// Let the policy count the flow (once its handshake completed or data flowed).
    fn count(&mut self, now: Instant, key: FlowKey) {
        let f = self.flows.get_mut(&key).expect("tracked");
        if !f.counted {
            f.counted = true;
            self.policy.handle_open(now, key, f.guess);
        }
    }

    /// Learn from a SYN or SYN-ACK.
    fn on_syn(&mut self, now: Instant, key: FlowKey, to_rcv: bool, t: &TcpRepr) {
        // (sender port, receiver port)
        let ports = if to_rcv {
            (t.src_port, t.dst_port)
        } else {
            (t.dst_port, t.src_port)
        };
        let synack = t.flags.contains(TcpFlags::ACK);
        if !synack {
            // A SYN for a flow seen before that got past its handshake is a new connection
            // on a reused port pair.
            if self.flows.get(&key).is_some_and(|f| f.synack_seen) {
                self.forget(now, key);
            }
            if !self.flows.contains_key(&key) {
                if !self.track(now, key, !to_rcv, ports) {
                    return;
                }
                self.flows.get_mut(&key).expect("tracked").syn_at = Some(now);
            }
        } else if !self.flows.contains_key(&key) {
            if to_rcv {
                // The receiver's SYN was not seen: its scale is unknown.
                return;
            }
            if !self.track(now, key, false, ports) {
                return;
            }
        }
        let f = self.flows.get_mut(&key).expect("tracked");
        if synack {
            f.synack_seen = true;
        }
        if to_rcv {
            f.send_ws = Some(t.opts.wscale);
        } else {
            f.recv_ws = Some(t.opts.wscale);
        }
        if t.opts.mss.is_some() {
            f.mss_opts[to_rcv as usize] = t.opts.mss;
        }
    }

    /// Lower the window of a segment from the receiver to the allocation.
    fn rewrite<P: Pkt>(&mut self, now: Instant, key: FlowKey, t: &TcpRepr, pkt: &mut P) {
        let syn = t.flags.contains(TcpFlags::SYN);
        let f = self.flows.get_mut(&key).expect("tracked");
        let shift = if syn {
            //= https://www.rfc-editor.org/rfc/rfc7323#section-2.2
            //# The window field in a segment where the SYN bit is set (i.e., a <SYN>
            //# or <SYN,ACK>) MUST NOT be scaled.
            0
        } else {
            match f.scale() {
                Some(s) => s,
                None => {
                    self.counters.unknown_scale += 1;
                    return;
                }
            }
        };
        let is_ack = t.flags.contains(TcpFlags::ACK);
        if !syn && is_ack {
            if let Some((ack, rcvd, sent)) = f.last_ack {
                if ack == t.ack && rcvd == t.window {
                    //= https://www.rfc-editor.org/rfc/rfc5681#section-2
                    //# (e) the advertised window in the incoming acknowledgment equals the
                    //# advertised window in the last incoming acknowledgment.
                    // Same ACK number, same window from the receiver: repeat what was
                    // sent, or the sender would not count a duplicate ACK.
                    if sent != t.window && pkt.set_tcp_window(sent) {
                        self.counters.rewritten += 1;
                    }
                    self.counters.frozen += 1;
                    return;
                }
            }
        }
        let mss = f.mss();
        let edge = f.edge;
        let want = if f.counted {
            self.policy.window(now, key, mss)
        } else {
            self.policy.prospective_window(now, f.guess, mss)
        };
        let unit = 1u64 << shift;
        let orig_field = t.window as u64;
        let orig = orig_field << shift;
        let mut w = want;
        if t.flags.contains(TcpFlags::ACK) {
            if let Some(e) = edge {
                let ahead = e - t.ack;
                if ahead > 0 {
                    w = w.max(ahead as u64);
                }
            }
        }
        // Never above what the receiver advertised; rounded up to the scale's unit (so
        // still at most the receiver's field).
        let bound = w.min(orig);
        let field = bound.div_ceil(unit);
        if (field << shift) - bound >= mss as u64 {
            // The scale's unit cannot express the allocation within one MSS: rounded up.
            self.counters.mss_inexpressible += 1;
        }
        let f = self.flows.get_mut(&key).expect("tracked");
        if is_ack {
            f.edge = Some(t.ack + (field << shift) as u32);
            if !syn {
                f.last_ack = Some((t.ack, t.window, field as u16));
            }
        }
        if field != orig_field && pkt.set_tcp_window(field as u16) {
            if syn {
                self.counters.syn_rewritten += 1;
            } else {
                self.counters.rewritten += 1;
            }
        }
    }

    fn sweep(&mut self, now: Instant) {
        let timeout = self.flow_timeout;
        let stale: Vec<FlowKey> = self
            .flows
            .iter()
            .filter(|(_, f)| f.last_seen + timeout <= now)
            .map(|(k, _)| *k)
            .collect();
        self.counters.expired += stale.len() as u64;
        for k in stale {
            self.forget(now, k);
        }
        self.sweep_at = self.flows.values().map(|f| f.last_seen + timeout).min();
    }
}

impl<P: Pkt> Rewriter<P> for WindowRewriter {
    fn on_packet(&mut self, now: Instant, dir: Dir, pkt: &mut P) -> Action {
        if self.sweep_at.is_some_and(|t| t <= now) {
            self.sweep(now);
        }
        let Some(h) = pkt.headers() else {
            self.counters.unparsed += 1;
            return Action::Pass;
        };
        let Some(t) = h.tcp_repr().copied() else {
            return Action::Pass;
        };
        let payload = h.payload_len;
        let signed = h.is_signed();
        let key = h.flow_key().canonical();
        let to_rcv = dir == self.toward;
        let syn = t.flags.contains(TcpFlags::SYN);
        if syn {
            self.on_syn(now, key, to_rcv, &t);
        }
        let Some(f) = self.flows.get_mut(&key) else {
            self.counters.untracked += 1;
            return Action::Pass;
        };
        f.last_seen = now;
        if !syn && !f.rtt_done && f.synack_seen {
            // The first segment after the SYN-ACK from the side that sent the SYN closes
            // the handshake: one RTT as seen from that side.
            if to_rcv != f.receiver_opened {
                f.rtt_done = true;
                let t0 = f.syn_at;
                self.count(now, key);
                if let Some(t0) = t0 {
                    self.policy
                        .handle_rtt_sample(now, key, now.saturating_since(t0));
                }
            }
        }
        if payload > 0 {
            self.count(now, key);
        }
        let f = self.flows.get_mut(&key).expect("tracked");
        if t.flags.contains(TcpFlags::RST) {
            self.forget(now, key);
            return Action::Pass;
        }
        let fin = t.flags.contains(TcpFlags::FIN);
        if to_rcv {
            if payload > 0 {
                self.policy.handle_data(now, key, payload);
            }
            if fin {
                f.fin_to_receiver = true;
            }
        } else {
            if fin {
                f.fin_from_receiver = true;
            }
            if payload > 0 {
                self.policy.handle_send(now, key, payload);
            }
            if signed {
                self.counters.signed_untouched += 1;
            } else {
                self.rewrite(now, key, &t, pkt);
            }
        }
        let f = &self.flows[&key];
        if f.fin_to_receiver && f.fin_from_receiver {
            self.forget(now, key);
        }
        Action::Pass
    }

    fn poll_at(&self) -> Option<Instant> {
        earliest(self.sweep_at, self.policy.poll_at())
    }

    fn handle_timeout(&mut self, now: Instant) {
        self.policy.handle_timeout(now);
        if self.sweep_at.is_some_and(|t| t <= now) {
            self.sweep(now);
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.counters;
        vec![
            ("rewritten", c.rewritten),
            ("syn_rewritten", c.syn_rewritten),
            ("mss_inexpressible", c.mss_inexpressible),
            ("unknown_scale", c.unknown_scale),
            ("untracked", c.untracked),
            ("unparsed", c.unparsed),
            ("signed_untouched", c.signed_untouched),
            ("frozen", c.frozen),
            ("evicted", c.evicted),
            ("table_full", c.table_full),
            ("expired", c.expired),
            ("tracked", self.flows.len() as u64),
        ]
    }

    fn kind(&self) -> &'static str {
        "rwnd"
    }
}
