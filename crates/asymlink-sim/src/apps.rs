//! Applications: what flows do with their connections.
//!
//! An application is a state machine driven by the engine. It never touches connections
//! directly: it issues commands through an [`Api`] (connect, write, close, set a timer,
//! send a datagram, record a measurement), which the engine executes after the callback
//! returns. One application instance handles both ends of its flow (so a web app knows
//! which object the server must send on which connection).

use crate::packet::{ConnId, NO_CONN};
use crate::scenario::{AppSpec, Dist, FlowSpec, Opener};
use crate::tcp::ConnEvent;
use asymlink_core::rand::Rng;
use asymlink_core::time::{Duration, Instant};
use std::collections::{HashMap, VecDeque};

/// An endless source writes this much (the connection caps it).
pub const ENDLESS: u64 = u64::MAX / 4;

/// A command from an application.
#[derive(Clone, Debug, PartialEq)]
pub enum Cmd {
    /// Open connection `conn` (an id reserved by [`Api::connect`]) from node `from` to
    /// node `to` on `port`. `primary` marks the endpoint whose sending is monitored.
    Connect {
        /// Reserved id.
        conn: ConnId,
        /// Opening node.
        from: usize,
        /// Listening node.
        to: usize,
        /// Destination port.
        port: u16,
        /// Whether the opening endpoint is the data sender.
        primary: bool,
    },
    /// Write bytes.
    Write(ConnId, u64),
    /// The application's bytes per `send()` call on a connection (Linux's sender).
    WriteSize(ConnId, u64),
    /// Close (FIN after the written data).
    Close(ConnId),
    /// Stop writing (forget unsent data beyond what was sent) and close.
    Stop(ConnId),
    /// Call `on_timer(token)` at this instant.
    Timer(Instant, u32),
    /// Record a measurement.
    Measure(&'static str, f64),
    /// Send a UDP datagram of `size` IP bytes.
    Udp {
        /// Source node.
        from: usize,
        /// Destination node.
        to: usize,
        /// Source port.
        src_port: u16,
        /// Destination port.
        dst_port: u16,
        /// IP length.
        size: u32,
        /// DSCP.
        dscp: u8,
        /// Application tag carried with the packet.
        tag: u64,
    },
}

/// The command interface handed to application callbacks.
pub struct Api<'a> {
    /// Current time.
    pub now: Instant,
    pub(crate) cmds: &'a mut Vec<Cmd>,
    pub(crate) next_conn: &'a mut ConnId,
    /// The application's random stream.
    pub rng: &'a mut Rng,
}

impl Api<'_> {
    /// Open a connection; returns its id (valid immediately for bookkeeping).
    pub fn connect(&mut self, from: usize, to: usize, port: u16, primary: bool) -> ConnId {
        let conn = *self.next_conn;
        *self.next_conn += 1;
        self.cmds.push(Cmd::Connect {
            conn,
            from,
            to,
            port,
            primary,
        });
        conn
    }
    /// Write `n` bytes on `conn`.
    pub fn write(&mut self, conn: ConnId, n: u64) {
        self.cmds.push(Cmd::Write(conn, n));
    }
    /// Write in `send()` calls of at most `n` bytes on `conn` (see
    /// [`crate::tcp::Connection::set_write_size`]).
    pub fn write_size(&mut self, conn: ConnId, n: u64) {
        self.cmds.push(Cmd::WriteSize(conn, n));
    }
    /// Close `conn`.
    pub fn close(&mut self, conn: ConnId) {
        self.cmds.push(Cmd::Close(conn));
    }
    /// Stop an endless writer and close.
    pub fn stop(&mut self, conn: ConnId) {
        self.cmds.push(Cmd::Stop(conn));
    }
    /// Timer after `d`.
    pub fn timer_in(&mut self, d: Duration, token: u32) {
        self.cmds.push(Cmd::Timer(self.now + d, token));
    }
    /// Record a measurement.
    pub fn measure(&mut self, metric: &'static str, value: f64) {
        self.cmds.push(Cmd::Measure(metric, value));
    }
    /// Draw from a distribution (seconds or bytes).
    pub fn draw(&mut self, d: &Dist) -> f64 {
        d.sample(self.rng).max(0.0)
    }
}

/// An application.
pub trait App: Send {
    /// The flow starts.
    fn start(&mut self, api: &mut Api<'_>);
    /// The flow's stop time arrived.
    fn stop(&mut self, _api: &mut Api<'_>) {}
    /// A listening endpoint accepted `conn` (opened by `peer`). Returns whether the
    /// accepting endpoint is the data sender.
    fn on_accept(&mut self, _conn: ConnId, _peer: ConnId, _api: &mut Api<'_>) -> bool {
        false
    }
    /// An event on one of the flow's connections (only the kinds [`App::wants`] names).
    fn on_event(&mut self, conn: ConnId, ev: ConnEvent, api: &mut Api<'_>);
    /// The kinds of connection events `on_event` acts on, as a set of
    /// [`ConnEvent::bit`]s: the engine asks once, when the application is built, and does
    /// not call `on_event` for the others (an application that ignores `Acked` saves a
    /// call per acknowledgment). All of them unless overridden.
    fn wants(&self) -> u16 {
        ConnEvent::ALL
    }
    /// A timer set with [`Api::timer_in`] fired.
    fn on_timer(&mut self, _token: u32, _api: &mut Api<'_>) {}
    /// A datagram arrived at `node`.
    fn on_udp(&mut self, _node: usize, _size: u32, _tag: u64, _api: &mut Api<'_>) {}
    /// Short name of the kind.
    fn kind(&self) -> &'static str;
}

/// Build the application of a flow.
pub fn build(flow: &FlowSpec) -> Box<dyn App> {
    let (from, to, port) = (flow.from, flow.to, flow.port);
    match &flow.app {
        AppSpec::Bulk {
            bytes,
            open,
            then,
            write_size,
        } => Box::new(Bulk {
            from,
            to,
            port,
            bytes: *bytes,
            open: *open,
            then: *then,
            write_size: *write_size,
            acked: 0,
            sender: NO_CONN,
            receiver: NO_CONN,
            got: 0,
            started: Instant::ZERO,
        }),
        AppSpec::FileTransfers { size, gap, count } => Box::new(Files {
            from,
            to,
            port,
            size: size.clone(),
            gap: gap.clone(),
            left: *count,
            cur: None,
        }),
        AppSpec::Telnet { interval, bytes } => Box::new(Telnet {
            from,
            to,
            port,
            interval: interval.clone(),
            bytes: *bytes as u64,
            client: NO_CONN,
            typed: 0,
            echoed: 0,
            pending: VecDeque::new(),
            stopped: false,
        }),
        AppSpec::Web {
            request,
            main,
            objects,
            parallel,
            persistent,
            pages,
            think,
        } => Box::new(Web {
            server: from,
            client: to,
            port,
            request: *request,
            main: *main,
            objects: objects.clone(),
            parallel: *parallel,
            persistent: *persistent,
            pages_left: *pages,
            think: think.clone(),
            page_start: Instant::ZERO,
            queue: VecDeque::new(),
            done_objects: 0,
            client_conns: HashMap::new(),
            server_conns: HashMap::new(),
            server_peer: HashMap::new(),
            main_done: false,
        }),
        AppSpec::Cbr { rate, size } => Box::new(Cbr {
            from,
            to,
            port,
            gap: rate.tx_time(*size as u64),
            size: *size,
            seq: 0,
            stopped: false,
        }),
        AppSpec::Ping {
            interval,
            size,
            dscp,
            port,
        } => Box::new(Ping {
            from,
            to,
            port: *port,
            interval: interval.clone(),
            size: *size,
            dscp: *dscp,
            stopped: false,
        }),
    }
}

// ------------------------------------------------------------------------------ bulk

struct Bulk {
    from: usize,
    to: usize,
    port: u16,
    bytes: Option<u64>,
    open: Opener,
    /// The second write and the idle time before it.
    then: Option<(u64, Duration)>,
    /// Bytes per `send()` call (`None`: one call per write).
    write_size: Option<u64>,
    /// Bytes of the first write acknowledged.
    acked: u64,
    sender: ConnId,
    receiver: ConnId,
    got: u64,
    started: Instant,
}

impl Bulk {
    /// All the bytes the flow sends.
    fn total(&self) -> Option<u64> {
        self.bytes.map(|b| b + self.then.map_or(0, |t| t.0))
    }
}

impl App for Bulk {
    fn start(&mut self, api: &mut Api<'_>) {
        self.started = api.now;
        match self.open {
            Opener::Sender => self.sender = api.connect(self.from, self.to, self.port, true),
            Opener::Receiver => self.receiver = api.connect(self.to, self.from, self.port, false),
        }
    }
    fn stop(&mut self, api: &mut Api<'_>) {
        if self.sender != NO_CONN {
            api.stop(self.sender);
        }
    }
    fn on_accept(&mut self, conn: ConnId, _peer: ConnId, _api: &mut Api<'_>) -> bool {
        match self.open {
            Opener::Sender => {
                self.receiver = conn;
                false
            }
            Opener::Receiver => {
                self.sender = conn;
                true
            }
        }
    }
    fn on_event(&mut self, conn: ConnId, ev: ConnEvent, api: &mut Api<'_>) {
        match ev {
            ConnEvent::Established if conn == self.sender => {
                if let Some(n) = self.write_size {
                    api.write_size(conn, n);
                }
                api.write(conn, self.bytes.unwrap_or(ENDLESS));
                if self.bytes.is_some() && self.then.is_none() {
                    api.close(conn);
                }
            }
            ConnEvent::Acked(n) if conn == self.sender => {
                if let (Some(b), Some((_, idle))) = (self.bytes, self.then) {
                    let before = self.acked;
                    self.acked += n;
                    if before < b && self.acked >= b {
                        api.timer_in(idle, 0);
                    }
                }
            }
            ConnEvent::Delivered(n) if conn == self.receiver => {
                self.got += n;
                if self.total() == Some(self.got) {
                    let t = (api.now - self.started).as_secs_f64();
                    api.measure("transfer_time_s", t);
                    api.measure("throughput_bps", self.got as f64 * 8.0 / t.max(1e-9));
                }
            }
            ConnEvent::PeerClosed => api.close(conn),
            _ => {}
        }
    }
    fn wants(&self) -> u16 {
        let mut w = ConnEvent::Established.bit() | ConnEvent::PeerClosed.bit();
        if self.bytes.is_some() && self.then.is_some() {
            w |= ConnEvent::Acked(0).bit();
        }
        if self.total().is_some() {
            w |= ConnEvent::Delivered(0).bit();
        }
        w
    }
    fn on_timer(&mut self, _token: u32, api: &mut Api<'_>) {
        if let Some((n, _)) = self.then {
            api.write(self.sender, n);
            api.close(self.sender);
        }
    }
    fn kind(&self) -> &'static str {
        "bulk"
    }
}

// ------------------------------------------------------------------------------ files

struct CurrentFile {
    sender: ConnId,
    receiver: ConnId,
    size: u64,
    got: u64,
    started: Instant,
}

struct Files {
    from: usize,
    to: usize,
    port: u16,
    size: Dist,
    gap: Dist,
    left: Option<u32>,
    cur: Option<CurrentFile>,
}

impl Files {
    fn next_file(&mut self, api: &mut Api<'_>) {
        if self.left == Some(0) {
            return;
        }
        if let Some(l) = &mut self.left {
            *l -= 1;
        }
        let size = api.draw(&self.size).round().max(1.0) as u64;
        let sender = api.connect(self.from, self.to, self.port, true);
        self.cur = Some(CurrentFile {
            sender,
            receiver: NO_CONN,
            size,
            got: 0,
            started: api.now,
        });
    }
}

impl App for Files {
    fn start(&mut self, api: &mut Api<'_>) {
        self.next_file(api);
    }
    fn stop(&mut self, _api: &mut Api<'_>) {
        self.left = Some(0);
    }
    fn on_accept(&mut self, conn: ConnId, peer: ConnId, _api: &mut Api<'_>) -> bool {
        if let Some(c) = &mut self.cur {
            if c.sender == peer {
                c.receiver = conn;
            }
        }
        false
    }
    fn on_event(&mut self, conn: ConnId, ev: ConnEvent, api: &mut Api<'_>) {
        match ev {
            ConnEvent::Established => {
                if let Some(c) = &self.cur {
                    if c.sender == conn {
                        api.write(conn, c.size);
                        api.close(conn);
                    }
                }
            }
            ConnEvent::Delivered(n) => {
                let Some(c) = &mut self.cur else { return };
                if c.receiver != conn {
                    return;
                }
                c.got += n;
                if c.got == c.size {
                    let t = (api.now - c.started).as_secs_f64();
                    api.measure("file_size_bytes", c.size as f64);
                    api.measure("transfer_time_s", t);
                    api.measure("throughput_bps", c.size as f64 * 8.0 / t.max(1e-9));
                    self.cur = None;
                    let gap = api.draw(&self.gap);
                    api.timer_in(Duration::from_secs_f64(gap), 0);
                }
            }
            ConnEvent::PeerClosed => api.close(conn),
            _ => {}
        }
    }
    fn on_timer(&mut self, _token: u32, api: &mut Api<'_>) {
        self.next_file(api);
    }
    fn kind(&self) -> &'static str {
        "file_transfers"
    }
}

// ------------------------------------------------------------------------------ telnet

struct Telnet {
    from: usize,
    to: usize,
    port: u16,
    interval: Dist,
    bytes: u64,
    client: ConnId,
    typed: u64,
    echoed: u64,
    pending: VecDeque<(u64, Instant)>,
    stopped: bool,
}

impl App for Telnet {
    fn start(&mut self, api: &mut Api<'_>) {
        self.client = api.connect(self.from, self.to, self.port, true);
    }
    fn stop(&mut self, api: &mut Api<'_>) {
        self.stopped = true;
        api.close(self.client);
    }
    fn on_event(&mut self, conn: ConnId, ev: ConnEvent, api: &mut Api<'_>) {
        match ev {
            ConnEvent::Established if conn == self.client => {
                let d = api.draw(&self.interval);
                api.timer_in(Duration::from_secs_f64(d), 0);
            }
            ConnEvent::Delivered(n) if conn == self.client => {
                self.echoed += n;
                while let Some(&(end, t)) = self.pending.front() {
                    if end > self.echoed {
                        break;
                    }
                    self.pending.pop_front();
                    api.measure("echo_latency_s", (api.now - t).as_secs_f64());
                }
            }
            // The server echoes what it receives.
            ConnEvent::Delivered(n) => api.write(conn, n),
            ConnEvent::PeerClosed => api.close(conn),
            _ => {}
        }
    }
    fn on_timer(&mut self, _token: u32, api: &mut Api<'_>) {
        if self.stopped {
            return;
        }
        api.write(self.client, self.bytes);
        self.typed += self.bytes;
        self.pending.push_back((self.typed, api.now));
        let d = api.draw(&self.interval);
        api.timer_in(Duration::from_secs_f64(d), 0);
    }
    fn kind(&self) -> &'static str {
        "telnet"
    }
}

// ------------------------------------------------------------------------------ web

/// One client connection of a page load.
struct WebConn {
    /// Object index being fetched (`None`: the main page).
    object: Option<usize>,
    expect: u64,
    got: u64,
}

/// The server side of one connection: request bytes received, responses sent.
struct ServerConn {
    req_got: u64,
    answered: u32,
}

struct Web {
    server: usize,
    client: usize,
    port: u16,
    request: u64,
    main: u64,
    objects: Vec<u64>,
    parallel: u32,
    persistent: bool,
    pages_left: u32,
    think: Dist,
    page_start: Instant,
    queue: VecDeque<usize>,
    done_objects: usize,
    client_conns: HashMap<ConnId, WebConn>,
    server_conns: HashMap<ConnId, ServerConn>,
    /// Server connection → the client connection it serves.
    server_peer: HashMap<ConnId, ConnId>,
    main_done: bool,
}

impl Web {
    fn start_page(&mut self, api: &mut Api<'_>) {
        self.pages_left -= 1;
        self.page_start = api.now;
        self.queue = (0..self.objects.len()).collect();
        self.done_objects = 0;
        self.main_done = false;
        let c = api.connect(self.client, self.server, self.port, false);
        self.client_conns.insert(
            c,
            WebConn {
                object: None,
                expect: self.main,
                got: 0,
            },
        );
    }

    /// Ask for the next object on `conn`, or close it when none is left.
    fn request_next(&mut self, conn: ConnId, api: &mut Api<'_>) {
        match self.queue.pop_front() {
            Some(o) => {
                let wc = self.client_conns.get_mut(&conn).expect("client conn");
                wc.object = Some(o);
                wc.expect = self.objects[o];
                wc.got = 0;
                api.write(conn, self.request);
            }
            None => {
                self.client_conns.remove(&conn);
                api.close(conn);
            }
        }
    }

    fn open_for_object(&mut self, api: &mut Api<'_>) {
        if let Some(o) = self.queue.pop_front() {
            let c = api.connect(self.client, self.server, self.port, false);
            self.client_conns.insert(
                c,
                WebConn {
                    object: Some(o),
                    expect: self.objects[o],
                    got: 0,
                },
            );
        }
    }

    fn page_done(&mut self, api: &mut Api<'_>) {
        api.measure("page_time_s", (api.now - self.page_start).as_secs_f64());
        if self.pages_left > 0 {
            let d = api.draw(&self.think);
            api.timer_in(Duration::from_secs_f64(d), 0);
        }
    }

    /// The response size for a request arriving on client connection `peer`.
    fn response_for(&self, peer: ConnId) -> Option<u64> {
        self.client_conns.get(&peer).map(|c| c.expect)
    }
}

impl App for Web {
    fn start(&mut self, api: &mut Api<'_>) {
        self.start_page(api);
    }
    fn stop(&mut self, _api: &mut Api<'_>) {
        self.pages_left = 0;
    }
    fn on_accept(&mut self, conn: ConnId, peer: ConnId, _api: &mut Api<'_>) -> bool {
        self.server_conns.insert(
            conn,
            ServerConn {
                req_got: 0,
                answered: 0,
            },
        );
        // Remember which client connection this serves (its id is the peer).
        self.server_peer.insert(conn, peer);
        true
    }
    fn on_event(&mut self, conn: ConnId, ev: ConnEvent, api: &mut Api<'_>) {
        match ev {
            ConnEvent::Established if self.client_conns.contains_key(&conn) => {
                api.write(conn, self.request);
            }
            ConnEvent::Delivered(n) => {
                if let Some(peer) = self.server_peer.get(&conn).copied() {
                    // Server side: count request bytes; answer each complete request.
                    let size = self.response_for(peer);
                    let sc = self.server_conns.get_mut(&conn).expect("server conn");
                    sc.req_got += n;
                    while sc.req_got >= self.request {
                        sc.req_got -= self.request;
                        if let Some(s) = size {
                            sc.answered += 1;
                            api.write(conn, s);
                            if !self.persistent {
                                // HTTP/1.0: one object per connection.
                                api.close(conn);
                            }
                        }
                    }
                    return;
                }
                let Some(wc) = self.client_conns.get_mut(&conn) else {
                    return;
                };
                wc.got += n;
                if wc.got < wc.expect {
                    return;
                }
                let was_main = wc.object.is_none();
                if was_main {
                    self.main_done = true;
                    if self.objects.is_empty() {
                        self.client_conns.remove(&conn);
                        api.close(conn);
                        self.page_done(api);
                        return;
                    }
                    if self.persistent {
                        self.request_next(conn, api);
                        for _ in 1..self.parallel {
                            self.open_for_object(api);
                        }
                    } else {
                        self.client_conns.remove(&conn);
                        api.close(conn);
                        for _ in 0..self.parallel {
                            self.open_for_object(api);
                        }
                    }
                    return;
                }
                self.done_objects += 1;
                if self.persistent {
                    self.request_next(conn, api);
                } else {
                    self.client_conns.remove(&conn);
                    api.close(conn);
                    self.open_for_object(api);
                }
                if self.done_objects == self.objects.len() {
                    self.page_done(api);
                }
            }
            ConnEvent::PeerClosed => api.close(conn),
            ConnEvent::Closed | ConnEvent::Reset => {
                self.server_conns.remove(&conn);
                self.server_peer.remove(&conn);
            }
            _ => {}
        }
    }
    fn on_timer(&mut self, _token: u32, api: &mut Api<'_>) {
        self.start_page(api);
    }
    fn kind(&self) -> &'static str {
        "web"
    }
}

// ------------------------------------------------------------------------------ UDP

struct Cbr {
    from: usize,
    to: usize,
    port: u16,
    gap: Duration,
    size: u32,
    seq: u64,
    stopped: bool,
}

impl App for Cbr {
    fn start(&mut self, api: &mut Api<'_>) {
        self.on_timer(0, api);
    }
    fn stop(&mut self, _api: &mut Api<'_>) {
        self.stopped = true;
    }
    fn on_event(&mut self, _conn: ConnId, _ev: ConnEvent, _api: &mut Api<'_>) {}
    fn wants(&self) -> u16 {
        0
    }
    fn on_timer(&mut self, _token: u32, api: &mut Api<'_>) {
        if self.stopped {
            return;
        }
        self.seq += 1;
        api.cmds.push(Cmd::Udp {
            from: self.from,
            to: self.to,
            src_port: self.port,
            dst_port: self.port,
            size: self.size,
            dscp: 0,
            tag: self.seq,
        });
        api.timer_in(self.gap, 0);
    }
    fn on_udp(&mut self, _node: usize, size: u32, _tag: u64, api: &mut Api<'_>) {
        api.measure("udp_bytes", size as f64);
    }
    fn kind(&self) -> &'static str {
        "cbr"
    }
}

struct Ping {
    from: usize,
    to: usize,
    port: u16,
    interval: Dist,
    size: u32,
    dscp: u8,
    stopped: bool,
}

impl App for Ping {
    fn start(&mut self, api: &mut Api<'_>) {
        self.on_timer(0, api);
    }
    fn stop(&mut self, _api: &mut Api<'_>) {
        self.stopped = true;
    }
    fn on_event(&mut self, _conn: ConnId, _ev: ConnEvent, _api: &mut Api<'_>) {}
    fn wants(&self) -> u16 {
        0
    }
    fn on_timer(&mut self, _token: u32, api: &mut Api<'_>) {
        if self.stopped {
            return;
        }
        api.cmds.push(Cmd::Udp {
            from: self.from,
            to: self.to,
            src_port: self.port,
            dst_port: self.port,
            size: self.size,
            dscp: self.dscp,
            tag: api.now.as_nanos(),
        });
        let d = api.draw(&self.interval);
        api.timer_in(Duration::from_secs_f64(d.max(1e-6)), 0);
    }
    fn on_udp(&mut self, node: usize, size: u32, tag: u64, api: &mut Api<'_>) {
        if node == self.to {
            // Echo back with the original send time.
            api.cmds.push(Cmd::Udp {
                from: self.to,
                to: self.from,
                src_port: self.port,
                dst_port: self.port,
                size,
                dscp: self.dscp,
                tag,
            });
        } else {
            api.measure("rtt_s", (api.now - Instant(tag)).as_secs_f64());
        }
    }
    fn kind(&self) -> &'static str {
        "ping"
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(bytes: Option<u64>, then: Option<(u64, Duration)>) -> Bulk {
        Bulk {
            from: 0,
            to: 1,
            port: 5001,
            bytes,
            open: Opener::Sender,
            then,
            write_size: None,
            acked: 0,
            sender: 1,
            receiver: 2,
            got: 0,
            started: Instant::ZERO,
        }
    }

    const EVENTS: [ConnEvent; 9] = [
        ConnEvent::Established,
        ConnEvent::Delivered(1 << 40),
        ConnEvent::Acked(1 << 40),
        ConnEvent::PeerClosed,
        ConnEvent::Closed,
        ConnEvent::Reset,
        ConnEvent::FastRetransmit,
        ConnEvent::Timeout,
        ConnEvent::LossProbe,
    ];

    /// The commands and state `on_event` leaves after `ev` on `conn`.
    fn after(mut b: Bulk, conn: ConnId, ev: ConnEvent) -> (Vec<Cmd>, u64, u64) {
        let (mut cmds, mut next, mut rng) = (Vec::new(), 10, Rng::new(1));
        let mut api = Api {
            now: Instant::ZERO + Duration::from_secs(1),
            cmds: &mut cmds,
            next_conn: &mut next,
            rng: &mut rng,
        };
        b.on_event(conn, ev, &mut api);
        (cmds, b.acked, b.got)
    }

    #[test]
    fn event_kinds_have_distinct_bits_within_all() {
        let mut seen = 0u16;
        for e in EVENTS {
            assert_eq!(e.bit().count_ones(), 1);
            assert_eq!(seen & e.bit(), 0, "{e:?}");
            seen |= e.bit();
        }
        assert_eq!(seen, ConnEvent::ALL);
    }

    #[test]
    fn bulk_is_not_called_for_acks_and_deliveries_it_ignores() {
        let second = Some((1000, Duration::from_secs(2)));
        let endless = bulk(None, None).wants();
        assert_eq!(endless & ConnEvent::Acked(0).bit(), 0);
        assert_eq!(endless & ConnEvent::Delivered(0).bit(), 0);
        // A sized transfer measures its end: it wants deliveries, and acknowledgments only
        // when a second write waits for the first to be acknowledged.
        let sized = bulk(Some(5000), None).wants();
        assert_eq!(sized & ConnEvent::Acked(0).bit(), 0);
        assert_ne!(sized & ConnEvent::Delivered(0).bit(), 0);
        let two = bulk(Some(5000), second).wants();
        assert_ne!(two & ConnEvent::Acked(0).bit(), 0);
        assert_ne!(two & ConnEvent::Delivered(0).bit(), 0);
        // What it is not called for would have done nothing; what it is called for does.
        for (bytes, then) in [(None, None), (Some(5000), None), (Some(5000), second)] {
            let wants = bulk(bytes, then).wants();
            for conn in [1, 2] {
                for e in EVENTS {
                    // (An endless flow's count of delivered bytes is compared with no
                    // total: it is never read.)
                    let (cmds, acked, _) = after(bulk(bytes, then), conn, e);
                    if wants & e.bit() == 0 {
                        assert_eq!((cmds, acked), (vec![], 0), "{e:?} on {conn}");
                    }
                }
            }
        }
        let (cmds, acked, _) = after(bulk(Some(5000), second), 1, ConnEvent::Acked(5000));
        assert_eq!(acked, 5000);
        assert_eq!(cmds.len(), 1);
        let (cmds, _, got) = after(bulk(Some(5000), None), 2, ConnEvent::Delivered(5000));
        assert_eq!(got, 5000);
        assert_eq!(cmds.len(), 2);
        // A datagram source is called for no connection event.
        let cbr = Cbr {
            from: 0,
            to: 1,
            port: 1,
            gap: Duration::from_millis(1),
            size: 100,
            seq: 0,
            stopped: false,
        };
        assert_eq!(cbr.wants(), 0);
    }
}
