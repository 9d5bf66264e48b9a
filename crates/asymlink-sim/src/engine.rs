//! The discrete-event engine: nodes, links, hosts, routing and the event loop.
//!
//! # Event scheduling
//!
//! One pending-event set of `(time, sequence, event)` keys (`queue.rs`: a timing wheel
//! whose finest slots are taken out and sorted one at a time, beside a small heap; each
//! entry one packed `u128`); the sequence number breaks ties in insertion order, so runs
//! are deterministic. The pending set is kept small and its cost flat, as the design
//! notes ask:
//!
//! * a link direction is a transmitter followed by a FIFO "wire"; only the head of the
//!   wire is scheduled (`Arrive`), the rest wait in a plain queue;
//! * a TCP connection has at most one live entry. Its timers (RTO, delayed ACK, ...)
//!   are deadlines inside the connection; the engine schedules the earliest one lazily: a
//!   deadline that moves *later* costs nothing (the entry fires, finds nothing due, and is
//!   re-armed), and only a deadline that moves *earlier* pushes a new entry. Stale entries
//!   are recognised by comparing with the time the connection's [`Timer`] holds. Link
//!   directions, middleboxes and host conditioners keep their one live entry the same way.
//! * packet events and timers alike wait in the wheel's slots; what the engine
//!   schedules (a transmitter freeing up, an arrival, a timer) costs about the same
//!   whatever the number of pending events.

use crate::apps::{self, Api, App, Cmd};
use crate::monitor::Monitor;
use crate::packet::{ConnAddrs, ConnId, NodeId, SimPacket, NO_CONN};
use crate::parallel::{Handover, Part};
use crate::pcap::Capture;
use crate::queue::{EventQueue, PlacedTimer, QueueEvent, Timer};
use crate::scenario::Spec;
use crate::tcp::{Conditioner, ConnEvent, ConnIo, Connection, RwndPolicy, State, TcpConfig};
use crate::topology::{
    build_links, build_middleboxes, build_routes, build_topology, RouterRoutes, NO_ROUTE,
};
use crate::RunOptions;
use asymlink_core::config::ConfigError;
use asymlink_core::link::{Feed, Link};
use asymlink_core::packet::ClassId;
use asymlink_core::pipeline::{Dir, Egress};
use asymlink_core::qdisc::{Dequeued, Drops, QdiscConfig, QdiscStats, Verdict};
use asymlink_core::rand::Rng;
use asymlink_core::subscribers::SubscriberBox;
use asymlink_core::time::{Duration, Instant};
use asymlink_core::wire::{Headers, IpRepr, Transport, UdpRepr};
use core::net::IpAddr;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::Arc;

/// A scheduled event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Ev {
    /// A link direction finished serialising its current packet.
    TxDone(u32),
    /// The head of a link direction's wire arrives at the far end.
    Arrive(u32),
    /// A link direction's discipline said "not before now".
    Wake(u32),
    /// A connection's timer.
    Conn(u32),
    /// An application timer: an index into `World::app_timers` (application, token).
    App(u32),
    /// A middlebox timer.
    Mb(u32),
    /// A flow starts.
    FlowStart(u32),
    /// A flow stops.
    FlowStop(u32),
    /// A host's conditioner timer (shaping tick): wake its connections.
    Host(u32),
    /// Monitor sampling.
    Sample,
    /// A packet handed over by another world arrives: an index into its part's inbox.
    Remote(u32),
}

/// Indices an event carries are below this (28 bits; the other 4 are the kind).
pub(crate) const EV_INDEX_LIMIT: u32 = 1 << 28;

impl QueueEvent for Ev {
    #[inline]
    fn pack(self) -> u32 {
        let (tag, i) = match self {
            Ev::TxDone(i) => (0, i),
            Ev::Arrive(i) => (1, i),
            Ev::Wake(i) => (2, i),
            Ev::Conn(i) => (3, i),
            Ev::App(i) => (4, i),
            Ev::Mb(i) => (5, i),
            Ev::FlowStart(i) => (6, i),
            Ev::FlowStop(i) => (7, i),
            Ev::Host(i) => (8, i),
            Ev::Sample => (9, 0),
            Ev::Remote(i) => (10, i),
        };
        debug_assert!(i < EV_INDEX_LIMIT);
        tag << 28 | i
    }

    #[inline]
    fn unpack(x: u32) -> Ev {
        let i = x & (EV_INDEX_LIMIT - 1);
        match x >> 28 {
            0 => Ev::TxDone(i),
            1 => Ev::Arrive(i),
            2 => Ev::Wake(i),
            3 => Ev::Conn(i),
            4 => Ev::App(i),
            5 => Ev::Mb(i),
            6 => Ev::FlowStart(i),
            7 => Ev::FlowStop(i),
            8 => Ev::Host(i),
            9 => Ev::Sample,
            _ => Ev::Remote(i),
        }
    }
}

/// Where a link direction takes its packets from.
pub(crate) enum Source {
    /// Its own classifier + discipline (boxed: a link direction's size counts where tens
    /// of thousands are simulated, and most take their packets from a middlebox or their
    /// own FIFO).
    Own(Box<Egress<SimPacket>>),
    /// A middlebox direction.
    Mb(u32, Dir),
    /// The line's own drop-tail FIFO, its packets waiting in the delay line's ring
    /// ([`Link::own_fifo`]): a direction whose discipline is a plain FIFO.
    Line,
}

/// One direction of a link: the core's link fed by its discipline, plus the simulator's
/// bookkeeping (events, tables, captures).
///
/// Where tens of thousands of link directions are simulated, none of a direction's state
/// is cached when its next packet comes, and each cache line a packet touches is a trip
/// to memory: the fields a packet reads or writes come first (`repr(C)`, from a cache
/// line's start), the line's own first ([`Link::hot_len`]), and the names and captures,
/// read by the tables and by discards, last.
#[repr(C, align(64))]
pub(crate) struct LinkDir {
    /// Where packets to send come from: its own discipline or a middlebox direction.
    pub source: Source,
    /// The live `TxDone` event (the transmitter frees up). It is scheduled only while
    /// packets wait behind the transmitter, so an idle link costs no event per packet;
    /// a busy plain line with nothing waiting holds its place instead (a packet offered
    /// before the line frees up arms it there).
    pub txdone: PlacedTimer,
    /// The live `Wake` event (a discipline asked to be polled then).
    pub wake: Timer,
    /// Sum and maximum of the sojourn times (offer to start of transmission), ns.
    pub sojourn_sum_ns: u64,
    pub sojourn_max_ns: u64,
    /// Pure ACKs sent: packets, IP bytes, wire bytes.
    pub tx_acks: (u64, u64, u64),
    /// Distribution of the sojourn times of TCP, UDP and other packets, by
    /// `SimPacket::proto` (percentiles in `queue_summary`; the direction's own are those
    /// of the three together).
    pub sojourn_hist: crate::hist::Batched<3>,
    /// Whether nothing on this direction reads a packet's headers beyond what a compact
    /// packet answers itself (its own egress or the middlebox direction feeding it, no
    /// drop script, no capture): compact packets pass it as they are; elsewhere they get
    /// their header box as they are enqueued.
    pub plain: bool,
    /// Whether the line itself reads no headers (no drop script, no capture): a
    /// middlebox's packet that is a common segment leaves its header box behind as it
    /// goes onto the line ([`SimPacket::shed`]).
    pub bare_line: bool,
    /// The node this direction delivers to.
    pub to: NodeId,
    /// The line: modem buffer, serialiser, loss, delay line (shared with the live box).
    pub line: Link<SimPacket>,
    /// Indices into `World::captures` of the pcap files recording this direction (read
    /// only where the line is not bare).
    pub captures: Vec<usize>,
    /// Display name of this direction: `<link>:<dir_name>` (queue and link tables).
    pub name: String,
    /// Name of the link it belongs to.
    pub link: String,
    /// `"to_a"` or `"to_b"`.
    pub dir_name: &'static str,
}

/// `cfg` in the allocation of an equal configuration among `recent` (most recent first,
/// at most eight kept), or in a new one.
fn shared(recent: &mut Vec<Arc<TcpConfig>>, cfg: &TcpConfig) -> Arc<TcpConfig> {
    let x = match recent.iter().position(|x| **x == *cfg) {
        Some(i) => recent.remove(i),
        None => {
            recent.truncate(7);
            Arc::new(cfg.clone())
        }
    };
    recent.insert(0, Arc::clone(&x));
    x
}

/// A link direction's source as the core link sees it.
#[allow(clippy::vec_box)] // the pool holds the boxes themselves, for reuse
struct Feeder<'a> {
    source: &'a mut Source,
    mbs: &'a mut [MbState],
    /// On a bare line ([`LinkDir::bare_line`]): the connections' addresses, and the pool
    /// the header boxes that a middlebox's packets shed go back to.
    shed: Option<(&'a [ConnAddrs], &'a mut Vec<Box<Headers>>)>,
}

impl Feed<SimPacket> for Feeder<'_> {
    #[inline]
    fn dequeue(&mut self, now: Instant, drops: &mut Drops<SimPacket>) -> Dequeued<SimPacket> {
        match self.source {
            Source::Own(e) => e.dequeue(now, drops),
            Source::Mb(m, md) => {
                mb_dequeue(&mut self.mbs[*m as usize], *md, now, drops, &mut self.shed)
            }
            // The line takes its own FIFO's packets without asking the feed.
            Source::Line => Dequeued::Empty,
        }
    }
}

/// The next packet of a middlebox's direction; on a bare line, a common segment sheds its
/// header box ([`SimPacket::shed`]), which goes back to the pool.
#[inline(never)]
#[allow(clippy::vec_box)]
fn mb_dequeue(
    mb: &mut MbState,
    md: Dir,
    now: Instant,
    drops: &mut Drops<SimPacket>,
    shed: &mut Option<(&[ConnAddrs], &mut Vec<Box<Headers>>)>,
) -> Dequeued<SimPacket> {
    let mut r = mb.mb.poll_transmit(now, md, drops);
    if let (Dequeued::Packet(p), Some((addrs, pool))) = (&mut r, shed) {
        if let Some(b) = addrs.get(p.src_conn as usize).and_then(|a| p.shed(a)) {
            if pool.len() < HDR_POOL_MAX {
                pool.push(b);
            }
        }
    }
    r
}

/// Packets queued in a link direction's source.
fn source_backlog(mbs: &[MbState], source: &Source, line: &Link<SimPacket>) -> u32 {
    match source {
        Source::Own(e) => e.qdisc().backlog().packets,
        Source::Mb(m, md) => mbs[*m as usize].mb.backlog(*md).packets,
        Source::Line => line.own_stats().map_or(0, |s| s.backlog.packets),
    }
}

/// A connection endpoint's state.
pub(crate) enum Endpoint {
    /// Not opened yet (or its opening failed).
    None,
    /// Open, or closing: the TCP endpoint.
    Open(Box<Connection>),
    /// Closed: the endpoint's state (buffers, scoreboard, timers) is freed when it
    /// closes; what is kept is what the results and the host's conditioner still read.
    Closed(Box<ClosedConn>),
}

/// What is kept of a closed connection.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ClosedConn {
    /// Its final counters.
    pub totals: ConnTotals,
    /// Its last smoothed RTT (a segment arriving after the close is still reported to
    /// the host's conditioner, as while the endpoint existed).
    pub srtt: Option<Duration>,
}

/// The counters of a connection that the flow summary adds up.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct ConnTotals {
    pub bytes_sent: u64,
    pub bytes_retransmitted: u64,
    pub retransmits: u64,
    pub timeouts: u64,
    pub fast_retransmits: u64,
    pub loss_probes: u64,
    pub bytes_delivered: u64,
    /// BBR's: PROBE_RTT episodes, when STARTUP ended, BBR's first ACK.
    pub bbr: Option<(u64, Option<Instant>, Option<Instant>)>,
}

impl ConnTotals {
    /// The totals of `c` so far.
    pub fn of(c: &Connection) -> ConnTotals {
        let st = c.stats();
        ConnTotals {
            bytes_sent: st.bytes_sent,
            bytes_retransmitted: st.bytes_retransmitted,
            retransmits: st.retransmits,
            timeouts: st.timeouts,
            fast_retransmits: st.fast_retransmits,
            loss_probes: st.loss_probes,
            bytes_delivered: st.bytes_delivered,
            bbr: c
                .bbr_info()
                .map(|b| (b.probe_rtt_rounds, b.startup_exit, b.started)),
        }
    }
}

/// A connection endpoint and its bookkeeping.
pub(crate) struct ConnSlot {
    /// The TCP endpoint, boxed: slots stay small (the vector of every connection opened
    /// in the run) and a closed endpoint's state is given back.
    pub endpoint: Endpoint,
    /// Index of its host in `World::hosts`.
    pub host: u32,
    /// The node of the other endpoint.
    pub remote_node: NodeId,
    /// The other endpoint's id (`NO_CONN` until it is known).
    pub peer: ConnId,
    /// Index of the application driving it in `World::apps`.
    pub app: u32,
    /// Whether this is the endpoint whose sending the monitors report (the flow's sender).
    pub primary: bool,
    /// Index into `World::labels`: the name the tables use (`flow`, `flow#1`, ...).
    pub label: u32,
    /// The live `Conn` event: the earliest of the connection's deadlines, armed lazily.
    pub timer: Timer,
}

impl ConnSlot {
    /// The endpoint while it is open.
    #[inline]
    pub fn conn(&self) -> Option<&Connection> {
        match &self.endpoint {
            Endpoint::Open(c) => Some(c),
            _ => None,
        }
    }

    /// Whether the endpoint was opened (it may have closed since).
    #[inline]
    pub fn opened(&self) -> bool {
        !matches!(self.endpoint, Endpoint::None)
    }

    /// The counters of an endpoint that was opened.
    pub fn totals(&self) -> Option<ConnTotals> {
        match &self.endpoint {
            Endpoint::None => None,
            Endpoint::Open(c) => Some(ConnTotals::of(c)),
            Endpoint::Closed(k) => Some(k.totals),
        }
    }

    /// Payload bytes the endpoint delivered to its application, if it was opened.
    pub fn bytes_delivered(&self) -> Option<u64> {
        match &self.endpoint {
            Endpoint::None => None,
            Endpoint::Open(c) => Some(c.stats().bytes_delivered),
            Endpoint::Closed(k) => Some(k.totals.bytes_delivered),
        }
    }

    /// Free the state of an endpoint that has closed, keeping its totals.
    fn free_closed(&mut self) {
        if let Endpoint::Open(c) = &self.endpoint {
            let kept = ClosedConn {
                totals: ConnTotals::of(c),
                srtt: c.srtt(),
            };
            self.endpoint = Endpoint::Closed(Box::new(kept));
        }
    }
}

/// A host: its connections, sockets and host-level mechanisms.
pub(crate) struct Host {
    /// Its node.
    pub node: NodeId,
    /// Connections of this host (to wake them when the conditioner's timer fires).
    pub conns: Vec<ConnId>,
    /// Traffic conditioner consulted before every transmission of this host's TCP.
    pub conditioner: Option<Box<dyn Conditioner>>,
    /// Receive-window policy bounding what this host's connections advertise.
    pub rwnd: Option<Box<dyn RwndPolicy>>,
    /// The live `Host` event (conditioner timer).
    pub cond_timer: Timer,
    /// Its IP address (given in the scenario, else 10.x.y.z assigned in order).
    pub addr: IpAddr,
    /// The link direction its packets leave on (a host has one link).
    pub out_dir: u32,
    /// Listening TCP ports → the application accepting on them.
    pub listeners: HashMap<u16, u32>,
    /// Bound UDP ports → the application receiving on them.
    pub udp: HashMap<u16, u32>,
    /// (remote address, remote port, local port) → connection.
    pub demux: HashMap<(IpAddr, u16, u16), ConnId>,
    /// Next ephemeral port for an outgoing connection.
    pub next_port: u16,
}

/// What a node is; the index is into `World::hosts` or counts routers.
pub(crate) enum NodeRole {
    Host(u32),
    Router(u32),
}

/// A node of the topology.
pub(crate) struct Node {
    pub role: NodeRole,
}

/// A middlebox on a link: the core's pipeline, shared with the live box.
pub(crate) struct MbState {
    /// Its name in the scenario.
    pub name: String,
    /// The core's middlebox: the top-level pipeline (rewriters, classifier, one discipline
    /// per direction) and its subscribers' trees, if any.
    pub mb: SubscriberBox<SimPacket>,
    /// The link directions it feeds, indexed by `Dir` (toward a, toward b).
    pub dirs: [u32; 2],
    /// Its live `Mb` event (a discipline's or rewriter's timer).
    pub timer: Timer,
    /// Whether a packet offered in one direction changes nothing in the other: no
    /// discipline watches the other direction, and there are no subscribers' trees.
    pub calm: bool,
}

/// A flow of the scenario.
pub(crate) struct FlowState {
    /// Its name (the `flow` column of the tables).
    pub name: String,
    /// Index of its application in `World::apps`.
    pub app: u32,
    /// The TCP configuration of its connections (profile plus overrides), one allocation
    /// for the flows of equal configurations.
    pub tcp: Arc<TcpConfig>,
    /// Indices of the sending and receiving nodes.
    pub from: usize,
    pub to: usize,
    /// Start time, s.
    pub start: f64,
}

/// The simulation world.
pub(crate) struct World {
    /// The validated scenario (with the seed in effect), less its links once built: they
    /// live on as `dirs`.
    pub spec: Spec,
    /// Simulated time of the event being processed.
    pub now: Instant,
    /// End of the run.
    pub end: Instant,
    queue: EventQueue<Ev>,
    /// Every node, indexed by `NodeId` (scenario order).
    pub nodes: Vec<Node>,
    pub hosts: Vec<Host>,
    /// `routes[router].toward(host)`: the link direction a router forwards toward that host.
    pub(crate) routes: Vec<RouterRoutes>,
    /// Link directions: link i has `2i` (toward b) and `2i + 1` (toward a).
    pub dirs: Vec<LinkDir>,
    pub mbs: Vec<MbState>,
    /// Connection endpoints, indexed by `ConnId`.
    pub conns: Vec<ConnSlot>,
    /// Per connection endpoint (by `ConnId`): its addresses and ports, for the headers of
    /// its compact packets (kept for the run, like the slots).
    conn_addrs: Vec<ConnAddrs>,
    next_conn: ConnId,
    /// Applications, one per flow.
    pub apps: Vec<Box<dyn App>>,
    /// Per application: the kinds of connection events it is called for (`App::wants`).
    app_wants: Vec<u16>,
    app_rngs: Vec<Rng>,
    /// Pending application timers `(application, token)`, indexed by `Ev::App`; free
    /// entries are listed in `app_timers_free`.
    app_timers: Vec<(u32, u32)>,
    app_timers_free: Vec<u32>,
    pub flows: Vec<FlowState>,
    /// Per application: its connections opened so far, `[not primary, primary]` (the
    /// suffix of the next connection's label).
    opened: Vec<[u32; 2]>,
    /// Connection names as the tables show them (see `ConnSlot::label`).
    pub labels: Vec<String>,
    /// Sampled time series and events (the results tables).
    pub monitor: Monitor,
    /// Open pcap files.
    pub captures: Vec<Capture>,
    iss_rng: Rng,
    /// Events processed and packet hops (one per packet per link direction) so far.
    pub events: u64,
    pub packet_hops: u64,
    /// Running hash of every packet hop (time, direction, header fields): equal seeds give
    /// equal hashes (the determinism tests compare it).
    pub trace_hash: u64,
    pool_out: Vec<Vec<Headers>>,
    pool_ev: Vec<Vec<ConnEvent>>,
    pool_cmd: Vec<Vec<Cmd>>,
    /// Header boxes of delivered and dropped packets, reused for new packets (the boxes
    /// themselves are what is kept: a new packet takes one without allocating).
    #[allow(
        clippy::vec_box,
        reason = "the pool holds allocations to hand out again"
    )]
    pool_hdr: Vec<Box<Headers>>,
    drops: Drops<SimPacket>,
    /// Outputs of connection calls not yet flushed (a stack: calls nest).
    pending_out: Vec<(Vec<Headers>, Vec<ConnEvent>)>,
    /// Packets with no route to their destination, and segments for a port nobody
    /// listens on (both discarded and counted).
    pub unroutable: u64,
    pub no_listener: u64,
    /// This world's part of a partitioned run (none: the world is the whole scenario).
    part: Option<Box<Part>>,
}

/// A connection's addresses and label, handed to another world with its first packet.
pub(crate) struct ConnAddrsLabel {
    pub addrs: ConnAddrs,
    pub label: u32,
}

impl World {
    /// Build the world of a validated scenario: topology, links and middleboxes, routes,
    /// then flows and captures.
    pub fn build(spec: Spec, opts: &RunOptions) -> Result<World, ConfigError> {
        World::build_part(spec, opts, None)
    }

    /// [`World::build`] for world `part` of a partitioned run ([`crate::parallel`]): only
    /// world 0 starts the flows, and no world samples the monitors by itself.
    pub fn build_part(
        spec: Spec,
        opts: &RunOptions,
        part: Option<u32>,
    ) -> Result<World, ConfigError> {
        let mut spec = spec;
        // The seed in effect (a run option overrides the file's), so results report it.
        let seed = opts.seed.unwrap_or(spec.seed);
        spec.seed = seed;
        let (nodes, mut hosts) = build_topology(&spec)?;
        let (mut dirs, adj) = build_links(&spec, seed, &nodes, &mut hosts)?;
        let mbs = build_middleboxes(&spec, seed, &mut dirs)?;
        let routes = build_routes(&spec, &nodes, &hosts, &adj)?;
        let most = [dirs.len(), mbs.len(), hosts.len(), spec.flows.len()];
        if most.iter().any(|&n| n >= EV_INDEX_LIMIT as usize) {
            return Err(ConfigError::new(
                "links",
                format!("at most {} links, hosts and flows", EV_INDEX_LIMIT / 2),
            ));
        }
        let mut w = World {
            now: Instant::ZERO,
            end: Instant::ZERO + spec.duration,
            queue: EventQueue::new(),
            nodes,
            hosts,
            routes,
            dirs,
            mbs,
            conns: Vec::new(),
            conn_addrs: Vec::new(),
            next_conn: 0,
            apps: Vec::new(),
            app_wants: Vec::new(),
            app_rngs: Vec::new(),
            app_timers: Vec::new(),
            app_timers_free: Vec::new(),
            flows: Vec::new(),
            opened: Vec::new(),
            labels: Vec::new(),
            monitor: Monitor::new(&spec.monitor),
            captures: Vec::new(),
            iss_rng: Rng::child(seed, "tcp:iss"),
            events: 0,
            packet_hops: 0,
            trace_hash: 0xcbf2_9ce4_8422_2325,
            pool_out: Vec::new(),
            pool_ev: Vec::new(),
            pool_cmd: Vec::new(),
            pool_hdr: Vec::new(),
            drops: Drops::new(),
            pending_out: Vec::new(),
            unroutable: 0,
            no_listener: 0,
            part: None,
            spec,
        };
        w.add_flows(part.is_none_or(|p| p == 0));
        w.open_captures(opts)?;
        for (i, d) in w.dirs.iter_mut().enumerate() {
            // A plain FIFO without a classifier waits in the line's delay ring (where the
            // line is a plain serialiser and delay: `Link::own_fifo` says).
            let l = &w.spec.links[i / 2];
            let ds = if i % 2 == 0 { &l.to_b } else { &l.to_a };
            if matches!(d.source, Source::Own(_)) && ds.classifier.is_none() {
                if let QdiscConfig::Fifo(c) = ds.queue.clone().unwrap_or_default() {
                    if d.line.own_fifo(&c) {
                        d.source = Source::Line;
                    }
                }
            }
            d.bare_line = d.captures.is_empty() && !d.line.has_script();
            d.plain = d.bare_line
                && match &d.source {
                    Source::Own(e) => !e.reads_headers(),
                    Source::Line => true,
                    Source::Mb(m, md) => !w.mbs[*m as usize].mb.reads_headers(*md),
                };
        }
        // The links live on as `dirs`; their configurations are not read after this
        // (tens of megabytes with tens of thousands of links).
        w.spec.links = Vec::new();
        if part.is_none() {
            w.schedule(Instant::ZERO, Ev::Sample);
        }
        Ok(w)
    }

    /// The flows: their applications, listeners on both hosts (the app knows which end
    /// opens), and their start and stop events.
    fn add_flows(&mut self, start: bool) {
        let seed = self.spec.seed;
        // The flows' configurations, most recent first: a flow whose configuration equals
        // one of the last few shares its allocation (a scenario's flows usually have one of
        // a few), so that the connections' reads of it on every segment hit the same lines.
        let mut recent: Vec<Arc<TcpConfig>> = Vec::new();
        for (i, f) in self.spec.flows.clone().iter().enumerate() {
            let app = self.apps.len() as u32;
            debug_assert_eq!(app as usize, i, "one application per flow, in order");
            let a = apps::build(f);
            self.app_wants.push(a.wants());
            self.apps.push(a);
            self.opened.push([0, 0]);
            self.app_rngs
                .push(Rng::child(seed, &format!("app:{}", f.name)));
            self.flows.push(FlowState {
                name: f.name.clone(),
                app,
                tcp: shared(&mut recent, &f.tcp),
                from: f.from,
                to: f.to,
                start: f.start,
            });
            for n in [f.from, f.to] {
                let NodeRole::Host(h) = self.nodes[n].role else {
                    continue;
                };
                self.hosts[h as usize].listeners.insert(f.port, app);
                self.hosts[h as usize].udp.insert(f.port, app);
            }
            if !start {
                continue;
            }
            self.schedule(
                Instant::ZERO + Duration::from_secs_f64(f.start),
                Ev::FlowStart(i as u32),
            );
            if let Some(s) = f.stop {
                self.schedule(
                    Instant::ZERO + Duration::from_secs_f64(s),
                    Ev::FlowStop(i as u32),
                );
            }
        }
    }

    /// Open the pcap captures and attach them to their link directions.
    fn open_captures(&mut self, opts: &RunOptions) -> Result<(), ConfigError> {
        for c in self.spec.monitor.capture.clone() {
            let Some(dir) = &opts.out_dir else {
                return Err(ConfigError::new(
                    "monitor.capture",
                    "captures need an output directory (asymlink run --out DIR)",
                ));
            };
            let idx = self.captures.len();
            let path = dir.join(&c.file);
            self.captures
                .push(
                    Capture::create(&path, c.snaplen.unwrap_or(65_535)).map_err(|e| {
                        ConfigError::new("monitor.capture", format!("{}: {e}", path.display()))
                    })?,
                );
            for (i, l) in self.spec.links.iter().enumerate() {
                if l.name == c.link {
                    if c.dir.to_b() {
                        self.dirs[2 * i].captures.push(idx);
                    }
                    if c.dir.to_a() {
                        self.dirs[2 * i + 1].captures.push(idx);
                    }
                }
            }
        }
        Ok(())
    }

    // ------------------------------------------------------------------ scheduling

    /// Schedule an event at `t`.
    #[inline(always)]
    fn schedule(&mut self, t: Instant, ev: Ev) {
        self.queue.push(t, ev);
    }

    /// `hdr` in a header box, reused if one is free.
    #[inline]
    fn boxed(&mut self, hdr: Headers) -> Box<Headers> {
        match self.pool_hdr.pop() {
            Some(mut b) => {
                *b = hdr;
                b
            }
            None => Box::new(hdr),
        }
    }

    /// Keep the header box of a packet that is gone, for the next packet (a compact
    /// packet has none).
    #[inline]
    fn recycle(&mut self, b: Option<Box<Headers>>) {
        if let Some(b) = b {
            if self.pool_hdr.len() < HDR_POOL_MAX {
                self.pool_hdr.push(b);
            }
        }
    }

    /// Give a compact packet its header box (before anything that reads headers sees it).
    #[cold]
    #[inline(never)]
    fn materialise(&mut self, p: &mut SimPacket) {
        let hdr = p.headers_with(&self.conn_addrs[p.src_conn as usize]);
        let b = self.boxed(hdr);
        p.materialise(b);
    }

    /// Process events up to `t` (inclusive, capped at the end).
    pub fn run_until(&mut self, t: Instant) {
        let limit = t.min(self.end);
        loop {
            while let Some((at, ev)) = self.queue.pop_until(limit) {
                self.now = at;
                self.events += 1;
                self.dispatch(ev);
            }
            // The queue also stops when the sequence numbers run out with places held
            // (once in 2^32 entries): renumber them with the transmitters' places.
            if !self.queue.renumber_due() {
                break;
            }
            self.queue
                .renumber_with(self.dirs.iter_mut().map(|d| &mut d.txdone));
        }
        self.now = self.now.max(limit);
        if self.now >= self.end {
            for c in self.captures.iter_mut() {
                c.flush();
            }
        }
    }

    /// One event. The link events, the most common, are handled here; a connection's
    /// timer and the rest of the events in functions of their own, so that their frames
    /// (a connection call's buffers, an application's) are not this one's: every event
    /// pays this function's entry and exit.
    fn dispatch(&mut self, ev: Ev) {
        match ev {
            Ev::TxDone(d) => self.tx_done(d),
            Ev::Arrive(d) => self.arrive(d),
            Ev::Wake(d) => {
                if self.dirs[d as usize].wake.fire(self.now) {
                    self.kick(d);
                }
            }
            Ev::Conn(c) => self.conn_timer(c),
            _ => self.dispatch_rest(ev),
        }
    }

    /// A connection's timer event.
    #[inline(never)]
    fn conn_timer(&mut self, c: u32) {
        let slot = &mut self.conns[c as usize];
        if !slot.timer.fire(self.now) {
            return; // stale entry
        }
        let due = slot
            .conn()
            .and_then(|x| x.poll_at())
            .is_some_and(|t| t <= self.now);
        if due {
            self.conn_call(c, |x, now, io| x.on_timer(now, io));
        } else {
            self.schedule_conn(c);
        }
    }

    /// The events other than a link's and a connection's timer.
    #[inline(never)]
    fn dispatch_rest(&mut self, ev: Ev) {
        match ev {
            Ev::TxDone(_) | Ev::Arrive(_) | Ev::Wake(_) | Ev::Conn(_) => {
                unreachable!("handled by dispatch")
            }
            Ev::App(i) => {
                let (a, token) = self.app_timers[i as usize];
                self.app_timers_free.push(i);
                self.app_call(a, |app, api| app.on_timer(token, api));
            }
            Ev::Mb(m) => {
                if !self.mbs[m as usize].timer.fire(self.now) {
                    return;
                }
                let now = self.now;
                let mut drops = std::mem::take(&mut self.drops);
                self.mbs[m as usize].mb.handle_timeout(now, &mut drops);
                self.drops = drops;
                if !self.drops.is_empty() {
                    self.handle_drops(&format!("mb:{}", self.mbs[m as usize].name));
                }
                self.after_mb(m);
            }
            Ev::Host(h) => {
                if !self.hosts[h as usize].cond_timer.fire(self.now) {
                    return;
                }
                let mut conns = self.hosts[h as usize].conns.clone();
                let now = self.now;
                if let Some(c) = self.hosts[h as usize].conditioner.as_mut() {
                    c.wake_order(now, &mut conns);
                }
                for c in conns {
                    self.conn_call(c, |x, now, io| x.wake(now, io));
                }
                self.schedule_host(h);
            }
            Ev::FlowStart(f) => {
                let a = self.flows[f as usize].app;
                self.app_call(a, |app, api| app.start(api));
            }
            Ev::FlowStop(f) => {
                let a = self.flows[f as usize].app;
                self.app_call(a, |app, api| app.stop(api));
            }
            Ev::Remote(i) => self.remote_arrival(i),
            Ev::Sample => {
                self.sample();
                let next = self.now + self.monitor.interval;
                if next <= self.end {
                    self.schedule(next, Ev::Sample);
                }
            }
        }
    }

    // ------------------------------------------------------------------ links

    /// Let link direction `d` take packets from its source (the core link decides when
    /// the discipline is asked), then schedule what it needs next: the arrival of the head
    /// of its delay line, the discipline's "not before", the serialiser freeing up.
    fn kick(&mut self, d: u32) {
        let di = d as usize;
        let now = self.now;
        let World {
            dirs,
            mbs,
            captures,
            trace_hash,
            packet_hops,
            drops,
            queue,
            conn_addrs,
            pool_hdr,
            part,
            ..
        } = self;
        let LinkDir {
            line,
            source,
            bare_line,
            tx_acks,
            sojourn_sum_ns,
            sojourn_max_ns,
            sojourn_hist,
            captures: caps,
            txdone,
            wake,
            ..
        } = &mut dirs[di];
        if !line.wants_packet(now) {
            // Packets wait behind the transmitter: make sure it is woken when free. A
            // plain line with nothing waiting would find nothing to do then: it holds
            // the wake-up's place, for a packet offered before then.
            let t = line.free_at();
            if txdone.pushed_at(t) {
                // Scheduled already (the usual case).
            } else if line.settled(now)
                && line
                    .busy_wake(now, source_backlog(mbs, source, line))
                    .is_none()
            {
                txdone.hold_at(queue, t);
            } else {
                txdone.arm_at(queue, t, Ev::TxDone(d));
            }
            return;
        }
        let had_head = line.next_arrival().is_some();
        let bare = *bare_line;
        let shed =
            (bare && matches!(source, Source::Mb(..))).then_some((&conn_addrs[..], pool_hdr));
        let mut feed = Feeder { source, mbs, shed };
        let not_before = line.pull(now, &mut feed, drops, &mut |tx| {
            let p = tx.pkt;
            *packet_hops += 1;
            *trace_hash = trace_mix(*trace_hash, tx.start.as_nanos(), d, p);
            if !bare {
                for &c in caps.iter() {
                    captures[c].write(tx.start, p.hdr());
                }
            }
            if p.hop().is_pure_ack() {
                tx_acks.0 += 1;
                tx_acks.1 += p.len as u64;
                tx_acks.2 += tx.wire_len as u64;
            }
            let sojourn = tx.start.as_nanos().saturating_sub(p.queued_at);
            *sojourn_sum_ns += sojourn;
            *sojourn_max_ns = (*sojourn_max_ns).max(sojourn);
            sojourn_hist.record(p.proto() as usize, sojourn);
        });
        let exported = line.exports();
        if exported {
            // Off the line at once, for the world of its far end (see `hand_over`).
            let part = part.as_mut().expect("an exporting line's world is a part");
            line.take_exported(&mut part.scratch);
        }
        if !had_head {
            if let Some(t) = line.next_arrival() {
                queue.push(t, Ev::Arrive(d));
            }
        }
        if let Some(t) = not_before {
            wake.arm_by(queue, t.max(now), Ev::Wake(d));
        }
        let backlog = source_backlog(mbs, source, line);
        if let Some(t) = line.busy_wake(now, backlog) {
            txdone.arm_at(queue, t, Ev::TxDone(d));
        }
        let mb = match source {
            Source::Mb(m, _) => Some(*m),
            Source::Own(_) | Source::Line => None,
        };
        // (Handling the drops schedules nothing: the order of events is as if they were
        // handled before the entries above.)
        if !self.drops.is_empty() {
            let name = self.dirs[di].name.clone();
            self.handle_drops(&name);
        }
        if exported {
            self.hand_over(d);
        }
        if let Some(m) = mb {
            self.schedule_mb(m);
        }
    }

    fn tx_done(&mut self, d: u32) {
        if self.dirs[d as usize].txdone.fire(self.now) {
            self.kick(d);
        }
    }

    fn arrive(&mut self, d: u32) {
        let now = self.now;
        let dir = &mut self.dirs[d as usize];
        let Some(p) = dir.line.pop_arrival(now) else {
            return;
        };
        let next = dir.line.next_arrival();
        let to = dir.to;
        if let Some(next) = next {
            self.schedule(next, Ev::Arrive(d));
        }
        self.deliver(to, p);
    }

    fn enqueue(&mut self, d: u32, mut p: SimPacket) {
        let now = self.now;
        if p.is_compact() && !self.dirs[d as usize].plain {
            self.materialise(&mut p);
        }
        p.class = ClassId::NONE;
        p.queued_at = now.as_nanos();
        let drops = &mut self.drops;
        let dir = &mut self.dirs[d as usize];
        let mb = match &mut dir.source {
            Source::Line => {
                dir.line.enqueue(p, drops);
                None
            }
            Source::Own(e) => {
                e.enqueue(now, p, drops);
                None
            }
            Source::Mb(m, md) => {
                self.mbs[*m as usize].mb.handle_packet(now, *md, p, drops);
                Some(*m)
            }
        };
        if !self.drops.is_empty() {
            let name = self.dirs[d as usize].name.clone();
            self.handle_drops(&name);
        }
        self.kick(d);
        if let Some(m) = mb {
            self.after_offer(m);
        }
    }

    /// A packet was offered to middlebox `m` and its direction kicked: kick both directions
    /// again as [`World::after_mb`] does, except one whose kick would do nothing — the
    /// middlebox is calm (the offer changed nothing in the other direction, and the kick
    /// changed nothing more), its line idle and settled ([`Link::settled`]) and no call of
    /// it due now. (A busy line is kicked: its kick may schedule the transmitter's wake-up,
    /// whose place among the events of the same instant must stay where it was.)
    fn after_offer(&mut self, m: u32) {
        let now = self.now;
        for d in self.mbs[m as usize].dirs {
            let dir = &self.dirs[d as usize];
            let idle = self.mbs[m as usize].calm
                && dir.line.free_at() <= now
                && dir.line.settled(now)
                && !dir.txdone.armed_by(&self.queue, now)
                && !dir.wake.armed_by(now);
            if !idle {
                self.kick(d);
            }
        }
        self.schedule_mb(m);
    }

    /// A middlebox changed: the other direction may release packets earlier.
    fn after_mb(&mut self, m: u32) {
        for d in self.mbs[m as usize].dirs {
            self.kick(d);
        }
        self.schedule_mb(m);
    }

    fn schedule_mb(&mut self, m: u32) {
        let mb = &mut self.mbs[m as usize];
        if let Some(t) = mb.mb.poll_at() {
            mb.timer.arm_by(&mut self.queue, t.max(self.now), Ev::Mb(m));
        }
    }

    fn handle_drops(&mut self, at: &str) {
        let now = self.now;
        let mut drops = std::mem::take(&mut self.drops);
        for dsc in drops.drain() {
            if self.monitor.events_on() {
                let (kind, reason) = match dsc.verdict {
                    Verdict::Dropped(r) => ("drop", r.name()),
                    Verdict::Filtered(r) => ("filter", r.name()),
                };
                let label = self.label_of(dsc.pkt.src_conn);
                self.monitor.event(now, kind, at, label, reason);
            }
            self.recycle(dsc.pkt.into_hdr());
        }
        self.drops = drops;
    }

    fn label_of(&self, c: ConnId) -> Option<u32> {
        label_of(&self.conns, self.part.as_deref(), c)
    }

    // ------------------------------------------------------------------ nodes

    fn deliver(&mut self, node: NodeId, p: SimPacket) {
        match self.nodes[node as usize].role {
            NodeRole::Router(r) => {
                let NodeRole::Host(h) = self.nodes[p.dst_node as usize].role else {
                    self.unroutable += 1;
                    self.recycle(p.into_hdr());
                    return;
                };
                let d = self.routes[r as usize].toward(h);
                if d == NO_ROUTE {
                    self.unroutable += 1;
                    self.recycle(p.into_hdr());
                    return;
                }
                self.enqueue(d, p);
            }
            NodeRole::Host(h) => {
                if p.dst_node != node {
                    self.unroutable += 1;
                    self.recycle(p.into_hdr());
                    return;
                }
                self.host_receive(h, p);
            }
        }
    }

    /// A packet reaches its host (out of line: its connection and application calls keep
    /// their frames off the routers' path).
    #[inline(never)]
    fn host_receive(&mut self, h: u32, mut p: SimPacket) {
        if p.is_compact() {
            let cid = p.dst_conn;
            if self
                .conns
                .get(cid as usize)
                .is_some_and(|s| s.host == h && s.opened())
            {
                // The common segment: its headers are rebuilt here, on the stack, from the
                // packet and the sender's addresses; there is no box to read.
                let hdr = p.headers_with(&self.conn_addrs[p.src_conn as usize]);
                self.conn_call(cid, |c, now, io| c.on_segment(now, &hdr, io));
                return;
            }
            self.materialise(&mut p);
        }
        match p.hdr().transport {
            Transport::Tcp(t) => {
                let mut cid = p.dst_conn;
                if cid == NO_CONN
                    || self
                        .conns
                        .get(cid as usize)
                        .is_none_or(|s| s.host != h || !s.opened())
                {
                    cid = self.hosts[h as usize]
                        .demux
                        .get(&(p.hdr().ip.src, t.src_port, t.dst_port))
                        .copied()
                        .unwrap_or(NO_CONN);
                }
                if cid != NO_CONN {
                    let slot = &mut self.conns[cid as usize];
                    if slot.peer == NO_CONN {
                        slot.peer = p.src_conn;
                    }
                    // The headers stay in their box (no copy) until the call returns.
                    let hdr = p.into_hdr().expect("not compact");
                    self.conn_call(cid, |c, now, io| c.on_segment(now, &hdr, io));
                    self.recycle(Some(hdr));
                    return;
                }
                let syn = t.flags.contains(asymlink_core::wire::TcpFlags::SYN)
                    && !t.flags.contains(asymlink_core::wire::TcpFlags::ACK);
                let Some(&app) = self.hosts[h as usize]
                    .listeners
                    .get(&t.dst_port)
                    .filter(|_| syn)
                else {
                    self.no_listener += 1;
                    self.recycle(p.into_hdr());
                    return;
                };
                self.accept(h, app, &p);
            }
            Transport::Udp(u) => {
                if let Some(&app) = self.hosts[h as usize].udp.get(&u.dst_port) {
                    let node = self.hosts[h as usize].node as usize;
                    let size = p.len;
                    let tag = p.tag;
                    self.app_call(app, |a, api| a.on_udp(node, size, tag, api));
                }
            }
            Transport::Other(_) => {}
        }
        self.recycle(p.into_hdr());
    }

    /// The flow an application drives: each flow has one application, built in flow
    /// order, so the indices agree.
    #[inline]
    fn flow_of_app(&self, app: u32) -> usize {
        debug_assert_eq!(self.flows[app as usize].app, app);
        app as usize
    }

    /// The label of the `n`-th connection (from 0) of flow `f` on one side.
    fn conn_label(&self, f: usize, n: u32) -> String {
        let base = &self.flows[f].name;
        if n == 0 {
            base.clone()
        } else {
            format!("{base}#{n}")
        }
    }

    /// Connection `id` became open (its endpoint exists): it counts toward the labels of
    /// the application's later connections on its side.
    fn count_open(&mut self, id: ConnId) {
        let s = &self.conns[id as usize];
        if s.opened() {
            self.opened[s.app as usize][s.primary as usize] += 1;
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn new_slot(
        &mut self,
        id: ConnId,
        host: u32,
        remote_node: NodeId,
        app: u32,
        primary: bool,
        local: (IpAddr, u16),
        remote: (IpAddr, u16),
    ) {
        assert!(id < EV_INDEX_LIMIT, "too many connections in one run");
        let idx = id as usize;
        while self.conns.len() <= idx {
            self.conns.push(ConnSlot {
                endpoint: Endpoint::None,
                host: u32::MAX,
                remote_node: 0,
                peer: NO_CONN,
                app: u32::MAX,
                primary: false,
                label: 0,
                timer: Timer::default(),
            });
        }
        let f = self.flow_of_app(app);
        let label = {
            let name = self.conn_label(f, self.opened[app as usize][primary as usize]);
            self.labels.push(name);
            self.labels.len() as u32 - 1
        };
        self.hosts[host as usize].conns.push(id);
        let now = self.now;
        if let Some(c) = self.hosts[host as usize].conditioner.as_mut() {
            c.on_open_flow(now, id, local, remote);
        }
        while self.conn_addrs.len() <= idx {
            self.conn_addrs.push(ConnAddrs { local, remote });
        }
        self.conn_addrs[idx] = ConnAddrs { local, remote };
        self.conns[idx] = ConnSlot {
            endpoint: Endpoint::None,
            host,
            remote_node,
            peer: NO_CONN,
            app,
            primary,
            label,
            timer: Timer::default(),
        };
    }

    fn accept(&mut self, h: u32, app: u32, p: &SimPacket) {
        let id = self.next_conn;
        self.next_conn += 1;
        let flow = self.flow_of_app(app);
        let cfg = self.flows[flow].tcp.clone();
        let iss = self.iss_rng.next_u64() as u32;
        let local = (
            self.hosts[h as usize].addr,
            p.hdr().tcp_repr().map(|t| t.dst_port).unwrap_or(0),
        );
        let remote = (
            p.hdr().ip.src,
            p.hdr().tcp_repr().map(|t| t.src_port).unwrap_or(0),
        );
        self.new_slot(id, h, p.src_node, app, false, local, remote);
        self.conns[id as usize].peer = p.src_conn;
        let hdr = *p.hdr();
        let mut made = None;
        self.with_io(h, |now, io| {
            made = Connection::accept(now, id, &cfg, local, &hdr, iss, io);
        });
        let Some(conn) = made else { return };
        let remote = conn.remote();
        self.hosts[h as usize]
            .demux
            .insert((remote.0, remote.1, local.1), id);
        self.conns[id as usize].endpoint = Endpoint::Open(Box::new(conn));
        self.count_open(id);
        let peer = p.src_conn;
        let mut primary = false;
        self.app_call(app, |a, api| primary = a.on_accept(id, peer, api));
        if primary {
            self.opened[app as usize][0] -= 1;
            self.conns[id as usize].primary = true;
            self.relabel(id);
            self.count_open(id);
        }
        self.flush_io(id);
        self.schedule_conn(id);
    }

    /// Name connection `id` (open, not yet counted) after the primary connections of its
    /// application opened before it.
    fn relabel(&mut self, id: ConnId) {
        let app = self.conns[id as usize].app;
        let f = self.flow_of_app(app);
        let name = self.conn_label(f, self.opened[app as usize][1]);
        self.labels[self.conns[id as usize].label as usize] = name;
    }

    // ------------------------------------------------------------------ connections

    /// Scratch I/O buffers for a call that creates a connection; the outputs wait on the
    /// `pending_out` stack for [`World::flush_io`] (buffers come from pools, so nesting is
    /// safe).
    fn with_io(&mut self, h: u32, f: impl FnOnce(Instant, &mut ConnIo<'_>)) {
        let mut out = self.pool_out.pop().unwrap_or_default();
        let mut ev = self.pool_ev.pop().unwrap_or_default();
        {
            let host = &mut self.hosts[h as usize];
            let mut io = ConnIo {
                out: &mut out,
                events: &mut ev,
                conditioner: host
                    .conditioner
                    .as_deref_mut()
                    .map(|c| c as &mut dyn Conditioner),
                rwnd: host.rwnd.as_deref_mut().map(|r| r as &mut dyn RwndPolicy),
            };
            f(self.now, &mut io);
        }
        self.pending_out.push((out, ev));
    }

    fn conn_call(
        &mut self,
        cid: ConnId,
        f: impl FnOnce(&mut Connection, Instant, &mut ConnIo<'_>),
    ) {
        let mut out = self.pool_out.pop().unwrap_or_default();
        let mut ev = self.pool_ev.pop().unwrap_or_default();
        let h = self.conns[cid as usize].host;
        {
            let slot = &mut self.conns[cid as usize];
            let conn = match &mut slot.endpoint {
                Endpoint::Open(c) => c,
                Endpoint::Closed(k) => {
                    let srtt = k.srtt;
                    self.pool_out.push(out);
                    self.pool_ev.push(ev);
                    self.closed_call(cid, h, srtt);
                    return;
                }
                Endpoint::None => {
                    self.pool_out.push(out);
                    self.pool_ev.push(ev);
                    return;
                }
            };
            let host = &mut self.hosts[h as usize];
            let mut io = ConnIo {
                out: &mut out,
                events: &mut ev,
                conditioner: host
                    .conditioner
                    .as_deref_mut()
                    .map(|c| c as &mut dyn Conditioner),
                rwnd: host.rwnd.as_deref_mut().map(|r| r as &mut dyn RwndPolicy),
            };
            f(conn, self.now, &mut io);
            if let Some(c) = io.conditioner.take() {
                c.on_activity(self.now, cid, conn.srtt());
            }
        }
        self.flush_bufs(cid, out, ev);
        self.schedule_conn(cid);
        if self.hosts[h as usize].conditioner.is_some() {
            self.schedule_host(h);
        }
    }

    /// A call into an endpoint that has closed (a late segment, a write or close by its
    /// application): a closed endpoint ignores it, but the host's conditioner is told of
    /// the activity as while the endpoint existed.
    #[cold]
    fn closed_call(&mut self, cid: ConnId, h: u32, srtt: Option<Duration>) {
        let now = self.now;
        if let Some(c) = self.hosts[h as usize].conditioner.as_mut() {
            c.on_activity(now, cid, srtt);
            self.schedule_host(h);
        }
    }

    /// Schedule the host's conditioner timer (lazily, as for connections).
    fn schedule_host(&mut self, h: u32) {
        let Some(t) = self.hosts[h as usize]
            .conditioner
            .as_ref()
            .and_then(|c| c.poll_at())
        else {
            return;
        };
        self.hosts[h as usize]
            .cond_timer
            .arm_by(&mut self.queue, t.max(self.now), Ev::Host(h));
    }

    /// Transmit what the last call produced and hand its events to the application.
    fn flush_io(&mut self, cid: ConnId) {
        let Some((out, ev)) = self.pending_out.pop() else {
            return;
        };
        self.flush_bufs(cid, out, ev);
    }

    /// Transmit the headers in `out` and hand the events in `ev` to the application;
    /// the buffers go back to their pools.
    fn flush_bufs(&mut self, cid: ConnId, mut out: Vec<Headers>, mut ev: Vec<ConnEvent>) {
        let h = self.conns[cid as usize].host;
        for hdr in &out {
            self.host_send(h, cid, hdr);
        }
        out.clear();
        let app = self.conns[cid as usize].app;
        for e in ev.drain(..) {
            match e {
                ConnEvent::Closed | ConnEvent::Reset => {
                    if let Some(c) = self.conns[cid as usize].conn() {
                        let (r, l) = (c.remote(), c.local());
                        self.hosts[h as usize].demux.remove(&(r.0, r.1, l.1));
                    }
                    self.conns[cid as usize].free_closed();
                    let now = self.now;
                    let host = &mut self.hosts[h as usize];
                    host.conns.retain(|&c| c != cid);
                    if let Some(c) = host.conditioner.as_mut() {
                        c.on_close(now, cid);
                    }
                    if let Some(p) = host.rwnd.as_mut() {
                        p.on_close(now, cid);
                    }
                }
                ConnEvent::FastRetransmit | ConnEvent::Timeout | ConnEvent::LossProbe => {
                    if self.monitor.events_on() {
                        let label = self.conns[cid as usize].label;
                        let kind = match e {
                            ConnEvent::Timeout => "timeout",
                            ConnEvent::LossProbe => "loss_probe",
                            _ => "fast_retransmit",
                        };
                        let now = self.now;
                        self.monitor.event(now, kind, "tcp", Some(label), "");
                    }
                    continue;
                }
                _ => {}
            }
            if self.app_wants[app as usize] & e.bit() == 0 {
                continue;
            }
            self.app_call(app, |a, api| a.on_event(cid, e, api));
        }
        self.pool_out.push(out);
        self.pool_ev.push(ev);
    }

    /// After every call into a connection: usually its timer's entry already fires by its
    /// earliest deadline, and nothing is pushed (the push stays out of line).
    #[inline]
    fn schedule_conn(&mut self, cid: ConnId) {
        let slot = &self.conns[cid as usize];
        if let Some(t) = slot.conn().and_then(|c| c.poll_at()) {
            let t = t.max(self.now);
            if !slot.timer.armed_by(t) {
                self.arm_conn(cid, t);
            }
        }
    }

    #[inline(never)]
    fn arm_conn(&mut self, cid: ConnId, t: Instant) {
        self.conns[cid as usize]
            .timer
            .arm_by(&mut self.queue, t, Ev::Conn(cid));
    }

    fn host_send(&mut self, h: u32, cid: ConnId, hdr: &Headers) {
        let (node, d) = (self.hosts[h as usize].node, self.hosts[h as usize].out_dir);
        let slot = &self.conns[cid as usize];
        let (remote, peer) = (slot.remote_node, slot.peer);
        let p = match SimPacket::compact(
            hdr,
            &self.conn_addrs[cid as usize],
            node,
            remote,
            cid,
            peer,
        ) {
            Some(p) => p,
            // Copied once, from the connection's output into a header box.
            None => SimPacket::new(self.boxed(*hdr), node, remote, cid, peer, 0),
        };
        self.enqueue(d, p);
    }

    // ------------------------------------------------------------------ applications

    fn app_call(&mut self, a: u32, f: impl FnOnce(&mut dyn App, &mut Api<'_>)) {
        let mut cmds = self.pool_cmd.pop().unwrap_or_default();
        {
            let mut api = Api {
                now: self.now,
                cmds: &mut cmds,
                next_conn: &mut self.next_conn,
                rng: &mut self.app_rngs[a as usize],
            };
            f(&mut *self.apps[a as usize], &mut api);
        }
        for c in cmds.drain(..) {
            self.exec(a, c);
        }
        self.pool_cmd.push(cmds);
    }

    fn exec(&mut self, app: u32, c: Cmd) {
        match c {
            Cmd::Connect {
                conn,
                from,
                to,
                port,
                primary,
            } => {
                let (NodeRole::Host(h), NodeRole::Host(th)) =
                    (&self.nodes[from].role, &self.nodes[to].role)
                else {
                    return;
                };
                let (h, th) = (*h, *th);
                let flow = self.flow_of_app(app);
                let cfg = self.flows[flow].tcp.clone();
                let iss = self.iss_rng.next_u64() as u32;
                let port_local = {
                    let host = &mut self.hosts[h as usize];
                    host.next_port = host.next_port.checked_add(1).unwrap_or(40_000);
                    host.next_port
                };
                let local = (self.hosts[h as usize].addr, port_local);
                let remote = (self.hosts[th as usize].addr, port);
                self.new_slot(conn, h, to as NodeId, app, primary, local, remote);
                self.hosts[h as usize]
                    .demux
                    .insert((remote.0, remote.1, local.1), conn);
                let mut made = None;
                self.with_io(h, |now, io| {
                    made = Some(Connection::connect(now, conn, &cfg, local, remote, iss, io));
                });
                if let Some(c) = made {
                    self.conns[conn as usize].endpoint = Endpoint::Open(Box::new(c));
                }
                self.count_open(conn);
                self.flush_io(conn);
                self.schedule_conn(conn);
            }
            Cmd::Write(cid, n) => self.conn_call(cid, |c, now, io| c.write(now, n, io)),
            Cmd::WriteSize(cid, n) => self.conn_call(cid, |c, _, _| c.set_write_size(n)),
            Cmd::Close(cid) => self.conn_call(cid, |c, now, io| c.close(now, io)),
            Cmd::Stop(cid) => self.conn_call(cid, |c, now, io| c.stop_writing(now, io)),
            Cmd::Timer(at, token) => {
                let i = match self.app_timers_free.pop() {
                    Some(i) => {
                        self.app_timers[i as usize] = (app, token);
                        i
                    }
                    None => {
                        self.app_timers.push((app, token));
                        let i = self.app_timers.len() as u32 - 1;
                        assert!(i < EV_INDEX_LIMIT, "too many pending application timers");
                        i
                    }
                };
                self.schedule(at.max(self.now), Ev::App(i));
            }
            Cmd::Measure(metric, value) => {
                let f = self.flow_of_app(app);
                let now = self.now;
                self.monitor.measure(now, f as u32, metric, value);
            }
            Cmd::Udp {
                from,
                to,
                src_port,
                dst_port,
                size,
                dscp,
                tag,
            } => {
                let (NodeRole::Host(h), NodeRole::Host(th)) =
                    (&self.nodes[from].role, &self.nodes[to].role)
                else {
                    return;
                };
                let (h, th) = (*h, *th);
                let mut ip = IpRepr::new(self.hosts[h as usize].addr, self.hosts[th as usize].addr);
                ip.dscp = dscp;
                let hdr = Headers {
                    ip,
                    transport: Transport::Udp(UdpRepr { src_port, dst_port }),
                    payload_len: size.saturating_sub(ip.header_len() as u32 + 8),
                };
                let hdr = self.boxed(hdr);
                let p = SimPacket::new(hdr, from as NodeId, to as NodeId, NO_CONN, NO_CONN, tag);
                let d = self.hosts[h as usize].out_dir;
                self.enqueue(d, p);
            }
        }
    }

    // ------------------------------------------------------------------ monitoring

    pub fn host_by_name(&self, name: &str) -> Result<usize, String> {
        let i = self
            .spec
            .nodes
            .iter()
            .position(|n| n.name == name)
            .ok_or_else(|| format!("unknown node '{name}'"))?;
        match self.nodes[i].role {
            NodeRole::Host(h) => Ok(h as usize),
            NodeRole::Router(_) => Err(format!("'{name}' is a router, not a host")),
        }
    }

    pub fn check_conservation(&self) -> Result<(), String> {
        for d in &self.dirs {
            let (st, backlog) = match &d.source {
                Source::Own(e) => (Cow::Borrowed(e.qdisc().stats()), e.qdisc().backlog()),
                Source::Line => {
                    let st = d.line.own_stats().expect("a line with its own FIFO");
                    (Cow::Borrowed(st), st.backlog)
                }
                Source::Mb(m, md) => {
                    let mb = &self.mbs[*m as usize].mb;
                    (mb.qdisc_stats(*md), mb.backlog(*md))
                }
            };
            st.check(backlog).map_err(|e| format!("{}: {e}", d.name))?;
        }
        for m in &self.mbs {
            m.mb.check().map_err(|e| format!("{}: {e}", m.name))?;
        }
        Ok(())
    }

    fn sample(&mut self) {
        self.sample_flows();
        if self.monitor.queues_on() || self.monitor.links_on() {
            for (i, d) in self.dirs.iter().enumerate() {
                sample_dir(&mut self.monitor, self.now, i, &self.mbs, d);
            }
        }
    }

    /// Record the flows' series at `now`.
    pub(crate) fn sample_flows(&mut self) {
        let now = self.now;
        if self.monitor.flows_on() {
            for slot in self.conns.iter() {
                let Some(c) = slot.conn() else { continue };
                if !slot.primary || c.state() == State::Closed {
                    continue;
                }
                let delivered = self
                    .conns
                    .get(slot.peer as usize)
                    .and_then(|p| p.bytes_delivered())
                    .unwrap_or(0);
                self.monitor.flow_row(now, slot.label, c, delivered);
            }
        }
    }
}

/// The label of connection `c`: its slot's, or in a partitioned run's world the one
/// handed over with its first packet.
fn label_of(conns: &[ConnSlot], part: Option<&Part>, c: ConnId) -> Option<u32> {
    match (conns.get(c as usize), part) {
        (Some(s), _) => Some(s.label),
        (None, Some(p)) => p.labels.get(c as usize).copied().filter(|&l| l != u32::MAX),
        (None, None) => None,
    }
}

/// Record link direction `i`'s queue and link series at `now` (if on).
pub(crate) fn sample_dir(
    monitor: &mut Monitor,
    now: Instant,
    i: usize,
    mbs: &[MbState],
    d: &LinkDir,
) {
    if !(monitor.queues_on() || monitor.links_on()) {
        return;
    }
    let st = dir_stats(mbs, d);
    let ls = d.line.stats();
    monitor.queue_row(now, i, &st, (d.sojourn_sum_ns, ls.sent));
    monitor.link_row(now, i, ls.busy_ns, ls.sent_bytes);
}

/// The trace hash of a partitioned run: the worlds' hashes, in order.
pub(crate) fn hash_worlds(h: u64, next: u64) -> u64 {
    let h = (h ^ next).wrapping_mul(0x100_0000_01B3);
    h ^ h >> 29
}

// ---------------------------------------------------------------------- partitioned runs

impl World {
    /// Make this world part `me` of `worlds` ([`crate::parallel`]): its link directions
    /// from its nodes to another world's (`dir_world` says which world sends on each,
    /// `node_world` which receives) export their packets.
    pub(crate) fn partition(
        &mut self,
        me: u32,
        worlds: usize,
        node_world: &[u32],
        dir_world: &[u32],
    ) {
        for (i, d) in self.dirs.iter_mut().enumerate() {
            if dir_world[i] == me && node_world[d.to as usize] != me {
                d.line.set_export(true);
            }
        }
        self.part = Some(Box::new(Part {
            node_world: node_world.to_vec(),
            out: (0..worlds).map(|_| Vec::new()).collect(),
            told: vec![Vec::new(); worlds],
            buckets: (0..worlds).map(|_| Default::default()).collect(),
            first_step: vec![0; worlds],
            spare: Vec::new(),
            labels: Vec::new(),
            inbox: Vec::new(),
            inbox_free: Vec::new(),
            horizon: Instant::ZERO,
            late: 0,
            scratch: Vec::new(),
        }));
    }

    fn part(&mut self) -> &mut Part {
        self.part.as_mut().expect("a partitioned run's world")
    }

    /// Hand the packets link direction `d` just exported to the world of its far end, with
    /// each connection's addresses and label the first time that world gets its packets
    /// (out of line: only a partitioned run's crossing directions call it).
    #[inline(never)]
    fn hand_over(&mut self, d: u32) {
        let World {
            dirs,
            part,
            conn_addrs,
            conns,
            ..
        } = self;
        let part = part.as_mut().expect("a partitioned run's world");
        let to = part.node_world[dirs[d as usize].to as usize] as usize;
        let mut got = std::mem::take(&mut part.scratch);
        for (at, pkt) in got.drain(..) {
            if at < part.horizon {
                part.late += 1;
            }
            let c = pkt.src_conn as usize;
            let mut addrs = None;
            if let Some(&a) = conn_addrs.get(c) {
                let told = &mut part.told[to];
                if told.len() <= c / 64 {
                    told.resize(c / 64 + 1, 0);
                }
                if told[c / 64] & 1 << (c % 64) == 0 {
                    told[c / 64] |= 1 << (c % 64);
                    let label = label_of(conns, Some(part), c as ConnId).unwrap_or(u32::MAX);
                    addrs = Some(Box::new(ConnAddrsLabel { addrs: a, label }));
                }
            }
            part.out[to].push(Handover {
                at,
                dir: d,
                pkt,
                addrs,
            });
        }
        part.scratch = got;
    }

    /// Sort the packets world `from` handed to this one into the steps (of `step_len`)
    /// of their arrivals.
    pub(crate) fn receive(&mut self, from: usize, got: &mut Vec<Handover>, step_len: u64) {
        let part = self.part.as_mut().expect("a partitioned run's world");
        let buckets = &mut part.buckets[from];
        for h in got.drain(..) {
            let k = h.at.as_nanos() / step_len;
            // A packet for a step already processed (late: counted by its sender) goes
            // into the first step kept.
            let i = k.saturating_sub(part.first_step[from]) as usize;
            while buckets.len() <= i {
                buckets.push_back(part.spare.pop().unwrap_or_default());
            }
            buckets[i].push(h);
        }
    }

    /// Put the packets handed to this world that arrive before `end` on its queue (at
    /// `from` at the earliest: the step about to be processed), world by world, each
    /// world's in the order sent; the others stay for a later step.
    pub(crate) fn arrivals_before(&mut self, from: Instant, end: Instant, step_len: u64) {
        let worlds = self.part().buckets.len();
        for v in 0..worlds {
            loop {
                let part = self.part.as_mut().expect("a partitioned run's world");
                let first = part.first_step[v];
                if part.buckets[v].is_empty() || first * step_len >= end.as_nanos() {
                    break;
                }
                let mut b = part.buckets[v].pop_front().unwrap_or_default();
                part.first_step[v] = first + 1;
                let whole = (first + 1) * step_len <= end.as_nanos();
                let mut kept = Vec::new();
                for h in b.drain(..) {
                    if !whole && h.at >= end {
                        kept.push(h);
                    } else {
                        self.take_handover(h, from);
                    }
                }
                let part = self.part.as_mut().expect("a partitioned run's world");
                part.spare.push(b);
                if !kept.is_empty() {
                    // The rest of a step cut short: it stays first.
                    part.buckets[v].push_front(kept);
                    part.first_step[v] = first;
                    break;
                }
            }
            // The buckets start at the step `end` is in (whether or not packets came).
            let part = self.part.as_mut().expect("a partitioned run's world");
            if part.buckets[v].is_empty() {
                part.first_step[v] = part.first_step[v].max(end.as_nanos() / step_len);
            }
        }
    }

    /// A packet handed to this world, as the event of its arrival (at `from` at the
    /// earliest).
    fn take_handover(&mut self, h: Handover, from: Instant) {
        let part = self.part.as_mut().expect("a partitioned run's world");
        if let Some(a) = h.addrs {
            let c = h.pkt.src_conn as usize;
            if self.conn_addrs.len() <= c {
                self.conn_addrs.resize(c + 1, a.addrs);
            }
            self.conn_addrs[c] = a.addrs;
            if part.labels.len() <= c {
                part.labels.resize(c + 1, u32::MAX);
            }
            part.labels[c] = a.label;
        }
        let slot = (h.dir, h.pkt);
        let i = match part.inbox_free.pop() {
            Some(i) => {
                part.inbox[i as usize] = Some(slot);
                i
            }
            None => {
                part.inbox.push(Some(slot));
                (part.inbox.len() - 1) as u32
            }
        };
        self.queue.push(h.at.max(from), Ev::Remote(i));
    }

    /// A packet handed over by another world arrives at the far end of its link.
    fn remote_arrival(&mut self, i: u32) {
        let part = self.part();
        let (d, p) = part.inbox[i as usize].take().expect("a handed-over packet");
        part.inbox_free.push(i);
        let to = self.dirs[d as usize].to;
        self.deliver(to, p);
    }

    /// A lookahead past the start of the step about to be processed.
    pub(crate) fn set_horizon(&mut self, t: Instant) {
        self.part().horizon = t;
    }

    /// The packets handed over in this step, per receiving world.
    pub(crate) fn outboxes(&mut self) -> &mut [Vec<Handover>] {
        &mut self.part().out
    }

    /// Packets this world handed over sooner than a lookahead after its step's start.
    pub(crate) fn late_handovers(&self) -> u64 {
        self.part.as_ref().map_or(0, |p| p.late)
    }
}

/// The counters of the discipline feeding a link direction (a middlebox's: over all its
/// subscribers' trees).
pub(crate) fn dir_stats<'a>(mbs: &'a [MbState], d: &'a LinkDir) -> Cow<'a, QdiscStats> {
    match &d.source {
        Source::Own(e) => Cow::Borrowed(e.qdisc().stats()),
        Source::Mb(m, md) => mbs[*m as usize].mb.qdisc_stats(*md),
        Source::Line => Cow::Borrowed(d.line.own_stats().expect("a line with its own FIFO")),
    }
}

/// Most header boxes kept for reuse (about 10 MB).
const HDR_POOL_MAX: usize = 1 << 16;

#[inline]
fn trace_mix(mut h: u64, t: u64, dir: u32, p: &SimPacket) -> u64 {
    const K: u64 = 0x100_0000_01B3;
    // The fields of the headers, as copied into the packet (`HopFields`): a hop does not
    // read the headers themselves.
    let f = p.hop();
    for w in [
        t,
        dir as u64,
        f.seq as u64 | (f.ack as u64) << 32,
        f.flags as u64 | (f.window as u64) << 16,
        f.payload_len as u64 | (p.src_conn as u64) << 32,
    ] {
        h = (h ^ w).wrapping_mul(K);
        h ^= h >> 29;
    }
    h
}

#[cfg(test)]
mod layout {
    use super::{LinkDir, Source};
    use crate::packet::SimPacket;
    use crate::queue::{PlacedTimer, Timer};
    use asymlink_core::link::Link;
    use std::collections::BTreeSet;
    use std::mem::{align_of, offset_of, size_of};

    /// The cache lines of `spans` (offset, length) from the start of a link direction.
    fn lines(spans: &[(&str, usize, usize)]) -> BTreeSet<usize> {
        spans
            .iter()
            .flat_map(|&(_, o, n)| o / 64..(o + n).div_ceil(64))
            .collect()
    }

    /// What a packet reads or writes of the link direction it crosses (its own FIFO, a
    /// middlebox or its own discipline feeding it, on a plain line): the events, the
    /// counters and sojourns, the flags and the node it goes to, and the line's first
    /// bytes ([`Link::hot_len`]).
    fn a_hops_fields() -> Vec<(&'static str, usize, usize)> {
        vec![
            ("source", offset_of!(LinkDir, source), size_of::<Source>()),
            (
                "txdone",
                offset_of!(LinkDir, txdone),
                size_of::<PlacedTimer>(),
            ),
            ("wake", offset_of!(LinkDir, wake), size_of::<Timer>()),
            ("sojourn_sum_ns", offset_of!(LinkDir, sojourn_sum_ns), 8),
            ("sojourn_max_ns", offset_of!(LinkDir, sojourn_max_ns), 8),
            ("tx_acks", offset_of!(LinkDir, tx_acks), 24),
            (
                "sojourn_hist",
                offset_of!(LinkDir, sojourn_hist),
                size_of::<crate::hist::Batched<3>>(),
            ),
            ("plain", offset_of!(LinkDir, plain), 1),
            ("bare_line", offset_of!(LinkDir, bare_line), 1),
            ("to", offset_of!(LinkDir, to), 4),
            (
                "line",
                offset_of!(LinkDir, line),
                Link::<SimPacket>::hot_len(),
            ),
        ]
    }

    /// A hop touches the first eight cache lines of its link direction (of the 13 it
    /// spans), and those are whole lines of the direction's own.
    #[test]
    fn a_hop_touches_eight_cache_lines_of_its_link_direction() {
        assert_eq!(align_of::<LinkDir>(), 64);
        let fields = a_hops_fields();
        let hot = lines(&fields);
        assert_eq!(hot, (0..8).collect(), "{fields:?}");
        assert_eq!(size_of::<Source>(), 16);
        // The names and captures are beyond them.
        let end = fields.iter().map(|f| f.1 + f.2).max().unwrap_or(0);
        for cold in [
            offset_of!(LinkDir, captures),
            offset_of!(LinkDir, name),
            offset_of!(LinkDir, link),
            offset_of!(LinkDir, dir_name),
        ] {
            assert!(cold >= end, "{cold} < {end}");
        }
        assert_eq!(size_of::<LinkDir>().div_ceil(64), 13);
    }
}
