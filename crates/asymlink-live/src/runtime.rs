//! The event loop: one thread, one clock read per wake-up.
//!
//! Each wake-up (modelled on quinn's `drive_timer`):
//! 1. read the clock once → `now`;
//! 2. receive a batch from each readable side and feed it to the [`Engine`];
//! 3. run the timers due at `now`;
//! 4. take the frames due at `now` in each direction, capture them, send them in a batch
//!    (frames a device cannot take yet wait for it to become writable);
//! 5. handle signals (SIGHUP reload, SIGINT/SIGTERM exit) and publish stats when due;
//! 6. sleep until a device is ready, a signal arrives, or the earliest deadline
//!    (`Engine::poll_at`, the next stats publication), with nanosecond resolution.
//!
//! Devices, signals and the sleep are behind [`Io`], so the same loop runs on real
//! devices ([`SysIo`]) and, in tests, on scripted frames under a fake clock ([`MemIo`]).

use crate::breakdown::{Breakdown, Marks, SendCtx, Stamps};
use crate::capture::Capture;
use crate::clock::{Clock, FakeClock};
use crate::config::BoxConfig;
use crate::engine::{Engine, Sojourn};
use crate::packet::{LinkType, LivePacket};
use crate::sender::{Done, Outcome, Sender, SenderOptions, TxDevice};
use crate::stats::{Histogram, Published};
use crate::sys::{self, Device, Signal};
use asymlink_core::pipeline::Dir;
use asymlink_core::time::Instant;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What an event loop talks to.
pub trait Io {
    /// Link type of the devices.
    fn link_type(&self) -> LinkType;
    /// Read up to `max` frames from `side` (0 = a, 1 = b) without blocking; each goes to
    /// `f(frame, kernel_rx_unix_ns, truncated)`.
    fn recv(
        &mut self,
        side: usize,
        max: usize,
        f: &mut dyn FnMut(&[u8], u64, bool),
    ) -> io::Result<usize>;
    /// Send frames on `side` in order; returns how many the device took; `failed` gets the
    /// indices (among those) it refused for good.
    fn send(&mut self, side: usize, frames: &[&[u8]], failed: &mut Vec<usize>)
        -> io::Result<usize>;
    /// Retry frames `side` took but could not hand to its driver yet (memory-mapped
    /// rings; nothing to do elsewhere).
    fn flush(&mut self, _side: usize) -> io::Result<()> {
        Ok(())
    }
    /// Sleep until readable/writable/signal or `timeout`. Returns readable sides.
    fn wait(&mut self, timeout: Option<Duration>, want_write: [bool; 2]) -> io::Result<[bool; 2]>;
    /// Signals received since the last call.
    fn take_signals(&mut self, out: &mut Vec<Signal>);
    /// Frames the kernel dropped on `side` before the box could read them, since the last
    /// call.
    fn take_rx_drops(&mut self, _side: usize) -> u64 {
        0
    }
    /// Whether a received frame waits on `side`, when that can be told without a system
    /// call (memory-mapped rings, AF_XDP); false otherwise.
    fn rx_waiting(&self, _side: usize) -> bool {
        false
    }
    /// UNIX nanoseconds now, for the added-latency measurement (None: not measured).
    fn realtime_ns(&self) -> Option<u64> {
        None
    }
    /// The configuration a reload applies, when someone else has read and checked it (a
    /// worker's supervisor); `None`: the loop reads its configuration file.
    fn reload_config(&mut self) -> Option<BoxConfig> {
        None
    }
    /// The sender threads, one per side (`[process] tx_thread`), when frames are sent
    /// through them instead of [`Io::send`].
    fn senders(&mut self) -> Option<&mut [Sender; 2]> {
        None
    }
}

/// What [`EventLoop::step`] decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Control {
    /// Keep going.
    Continue,
    /// Exit was requested and done (captures and stats flushed).
    Exit,
}

/// The event loop.
pub struct EventLoop<C: Clock, I: Io> {
    clock: C,
    io: I,
    engine: Engine,
    cfg: BoxConfig,
    config_path: Option<PathBuf>,
    batch: usize,
    pending: [VecDeque<LivePacket>; 2],
    captures: [Option<Capture>; 2],
    published: Published,
    stats_file: Option<std::fs::File>,
    publish_every: Duration,
    horizon: Duration,
    next_publish: Instant,
    signals: Vec<Signal>,
    failed: Vec<usize>,
    reload_failures: u64,
    last_reload_error: Option<String>,
    wakeups: u64,
    rx_drops: [u64; 2],
    readable: [bool; 2],
    log: Box<dyn FnMut(&str)>,
    share: Option<Arc<WorkerControl>>,
    /// `[stats] latency_breakdown`.
    breakdown: Option<Box<BreakdownState>>,
    /// Frames given back by a sender thread, being accounted.
    done: Vec<Done>,
}

/// The latency breakdown's state in the loop ([`crate::breakdown`]).
struct BreakdownState {
    agg: Breakdown,
    /// Whether this wake-up is stamped (the devices give wall-clock times).
    active: bool,
    prev: Marks,
    cur: Marks,
    /// The thread's CPU time at the wake-up.
    cpu_wake: u64,
    /// Time spent in send calls so far in this wake-up.
    tx_calls: u64,
    /// When this wake-up read side b again after its first send (0: it did not), and
    /// `tx_calls` then.
    mid: u64,
    tx_mid: u64,
}

/// Side index of the device a direction sends on (`ToB` leaves through side b).
fn out_side(d: Dir) -> usize {
    match d {
        Dir::ToB => 1,
        Dir::ToA => 0,
    }
}

impl<C: Clock, I: Io> EventLoop<C, I> {
    /// A loop over `io` with a validated configuration.
    pub fn new(clock: C, io: I, cfg: BoxConfig, seed: u64) -> Result<Self, String> {
        let engine = Engine::new(&cfg, io.link_type(), seed).map_err(|e| e.to_string())?;
        let publish_every = cfg
            .stats
            .interval
            .map(|s| s.0)
            .unwrap_or(Duration::from_millis(100));
        let batch = cfg.interfaces.batch.unwrap_or(64);
        let horizon = cfg.process.horizon.map(|s| s.0).unwrap_or(Duration::ZERO);
        Ok(EventLoop {
            next_publish: clock.now(),
            clock,
            io,
            engine,
            config_path: None,
            batch,
            pending: Default::default(),
            captures: [None, None],
            published: Published::default(),
            stats_file: None,
            publish_every,
            horizon,
            signals: Vec::new(),
            failed: Vec::new(),
            reload_failures: 0,
            last_reload_error: None,
            wakeups: 0,
            rx_drops: [0, 0],
            readable: [true, true],
            log: Box::new(|m| eprintln!("asymlink-box: {m}")),
            share: None,
            breakdown: cfg.stats.latency_breakdown.then(|| {
                Box::new(BreakdownState {
                    agg: Breakdown::default(),
                    active: false,
                    prev: Marks::default(),
                    cur: Marks::default(),
                    cpu_wake: 0,
                    tx_calls: 0,
                    mid: 0,
                    tx_mid: 0,
                })
            }),
            cfg,
            done: Vec::new(),
        })
    }

    /// Where SIGHUP re-reads the configuration from.
    pub fn set_config_path(&mut self, p: PathBuf) {
        self.config_path = Some(p);
    }

    /// Capture what is sent in `dir` to this open file.
    pub fn set_capture(&mut self, dir: Dir, c: Capture) {
        self.captures[dir.index()] = Some(c);
    }

    /// Write the final snapshot to this file at exit (and on every reload).
    pub fn set_stats_file(&mut self, f: std::fs::File) {
        self.stats_file = Some(f);
    }

    /// Replace the log sink (tests).
    pub fn set_log(&mut self, f: Box<dyn FnMut(&str)>) {
        self.log = f;
    }

    /// Also hand every published snapshot (and the latency histogram) to a worker's
    /// supervisor, which merges the workers' numbers.
    pub fn set_share(&mut self, c: Arc<WorkerControl>) {
        self.share = Some(c);
    }

    /// The shared snapshot the endpoints serve.
    pub fn published(&self) -> Published {
        self.published.clone()
    }

    /// The datapath.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The devices.
    pub fn io(&mut self) -> &mut I {
        &mut self.io
    }

    /// One wake-up's work, then sleep until the next.
    pub fn step(&mut self) -> io::Result<Control> {
        let now = self.clock.now() + self.horizon;
        self.wakeups += 1;
        if let Some(b) = self.breakdown.as_mut() {
            let wall = self.io.realtime_ns();
            b.active = wall.is_some();
            b.cur = Marks {
                wake: wall.unwrap_or(0),
                ..Marks::default()
            };
            b.cpu_wake = sys::thread_cpu_ns();
            b.tx_calls = 0;
            b.mid = 0;
            b.tx_mid = 0;
        }
        // Frames are stamped when they are read (the breakdown, on real devices only).
        let stamp = self
            .breakdown
            .as_ref()
            .filter(|b| b.active)
            .map(|b| (b.cur.wake, b.prev));
        // 2. receive
        for side in 0..2 {
            if self.readable[side] {
                self.receive(now, side, stamp)?;
            }
        }
        self.mark(|m, t| m.rx_end = t);
        // 3. timers
        self.engine.handle_timeout(now);
        // 4. transmit
        self.transmit(now, Dir::ToB)?;
        // Frames that reached side b during those send calls (on veth: what the host
        // behind b sent in reply, its stack running inside them) go out with this
        // wake-up's send toward a rather than after it and the next wake-up. Only where
        // the device tells without a system call (rings, AF_XDP).
        if self.io.senders().is_none() && self.io.rx_waiting(1) {
            let stamp = self.breakdown.as_mut().filter(|b| b.active).map(|b| {
                let t = sys::realtime_ns();
                b.mid = t;
                b.tx_mid = b.tx_calls;
                // The frames' wait so far counts as the previous phase's: the send calls.
                let prev = Marks {
                    tx_end: t,
                    sleep: t,
                    ..b.cur
                };
                (t, prev)
            });
            self.receive(now, 1, stamp)?;
            self.engine.handle_timeout(now);
        }
        self.transmit(now, Dir::ToA)?;
        self.mark(|m, t| m.tx_end = t);
        // 5. signals, stats
        self.io.take_signals(&mut self.signals);
        let signals: Vec<Signal> = self.signals.drain(..).collect();
        for s in signals {
            match s {
                Signal::Reload => self.reload(now),
                Signal::Exit => {
                    self.finish(now);
                    return Ok(Control::Exit);
                }
            }
        }
        if now >= self.next_publish {
            let t = self
                .breakdown
                .as_ref()
                .filter(|b| b.active)
                .map(|_| sys::realtime_ns());
            self.publish(now);
            self.next_publish = now + self.publish_every;
            if let (Some(t), Some(b)) = (t, self.breakdown.as_mut()) {
                b.agg.publication(sys::realtime_ns().saturating_sub(t));
            }
        }
        // 6. sleep
        let mut deadline = Some(self.next_publish);
        if let Some(t) = self.engine.poll_at() {
            deadline = Some(deadline.map_or(t, |d| d.min(t)));
        }
        let mut timeout = deadline.map(|d| d.saturating_since(now));
        let mut want_write = [!self.pending[0].is_empty(), !self.pending[1].is_empty()];
        if self.io.senders().is_some() {
            // Frames wait for room at a sender thread, not at a device: look again soon.
            if want_write != [false; 2] {
                timeout = Some(timeout.map_or(RETRY, |t| t.min(RETRY)));
            }
            want_write = [false; 2];
        }
        if let Some(b) = self.breakdown.as_mut().filter(|b| b.active) {
            let t = sys::realtime_ns();
            b.cur.sleep = t;
            let busy = t.saturating_sub(b.cur.wake);
            let cpu = sys::thread_cpu_ns().saturating_sub(b.cpu_wake);
            b.agg.wakeup(busy, busy.saturating_sub(cpu));
            b.prev = b.cur;
        }
        self.readable = self.io.wait(timeout, want_write)?;
        Ok(Control::Continue)
    }

    /// Read up to a batch of frames from `side` into the pipeline; `stamp`: the
    /// breakdown's marks for them (the start of their wake-up, the previous phase's).
    fn receive(
        &mut self,
        now: Instant,
        side: usize,
        stamp: Option<(u64, Marks)>,
    ) -> io::Result<()> {
        let dir = if side == 0 { Dir::ToB } else { Dir::ToA };
        let engine = &mut self.engine;
        let mut truncated = 0u64;
        self.io.recv(side, self.batch, &mut |frame, ts, trunc| {
            if trunc {
                truncated += 1;
                return;
            }
            match stamp {
                Some((wake, prev)) => {
                    let st = Stamps::at_read(ts, sys::realtime_ns(), wake, &prev);
                    let buf = engine.pool().copy_of(frame);
                    engine.handle_stamped(now, dir, buf, ts, st);
                }
                None => {
                    let buf = engine.pool().copy_of(frame);
                    engine.handle_frame(now, dir, buf, ts);
                }
            }
        })?;
        if truncated > 0 {
            (self.log)(&format!(
                "dropped {truncated} frame(s) larger than {} bytes",
                sys::SLOT
            ));
        }
        Ok(())
    }

    /// Set a mark of this wake-up to the wall clock now (breakdown on).
    fn mark(&mut self, f: impl FnOnce(&mut Marks, u64)) {
        if let Some(b) = self.breakdown.as_mut().filter(|b| b.active) {
            f(&mut b.cur, sys::realtime_ns());
        }
    }

    /// Account the frames the sender thread of `side` is done with (sent, refused, or
    /// left unsent at exit), in order; `stop`: stop it first.
    fn take_done(&mut self, side: usize, stop: bool) {
        let mut done = std::mem::take(&mut self.done);
        match self.io.senders() {
            Some(s) if stop => s[side].stop(&mut |d| done.push(d)),
            Some(s) => {
                s[side].take_done(&mut |d| done.push(d));
                if let Some(e) = s[side].take_error() {
                    (self.log)(&format!("sender thread of side {side}: {e}"));
                }
            }
            None => {}
        }
        for Done { pkt, outcome } in done.drain(..) {
            match outcome {
                Outcome::Sent { at, frames } => {
                    if let Some(c) = self.captures[pkt.dir.index()].as_mut() {
                        c.write(at, pkt.frame());
                    }
                    if pkt.rx_unix_ns > 0 {
                        self.engine
                            .record_latency(at.saturating_sub(pkt.rx_unix_ns));
                        if let Some(b) = self.breakdown.as_mut() {
                            let h = pkt.stamps.handoff;
                            // Until the hand-off as if it were the send call; the wait in
                            // the sender (behind its earlier send calls) as `tx_other`.
                            let c = SendCtx {
                                marks: h,
                                send: at,
                                tx_other: at.saturating_sub(h.tx_end),
                                off_cpu: 0,
                                frames: frames.into(),
                                mid: 0,
                                tx_mid: 0,
                            };
                            b.agg.record(pkt.rx_unix_ns, &pkt.stamps, &c);
                        }
                    }
                    self.engine.on_sent(pkt);
                }
                Outcome::Refused => self.engine.on_send_failed(pkt),
                Outcome::Unsent => self.engine.on_unsent_at_exit(pkt),
            }
        }
        self.done = done;
    }

    /// Hand the frames due in `d` to the sender thread of its interface.
    fn hand_off(&mut self, now: Instant, d: Dir) -> io::Result<()> {
        let side = out_side(d);
        self.take_done(side, false);
        let mut due = std::mem::take(&mut self.pending[side]);
        let mut out: Vec<LivePacket> = Vec::new();
        self.engine.poll_transmit(now, d, &mut out);
        if let Some(b) = self.breakdown.as_ref().filter(|b| b.active) {
            let mut h = b.cur;
            h.tx_end = sys::realtime_ns();
            for p in &mut out {
                p.stamps.handoff = h;
            }
        }
        due.extend(out);
        if let Some(s) = self.io.senders() {
            s[side].hand_off(&mut due)?;
        }
        self.pending[side] = due;
        Ok(())
    }

    fn transmit(&mut self, now: Instant, d: Dir) -> io::Result<()> {
        if self.io.senders().is_some() {
            return self.hand_off(now, d);
        }
        let side = out_side(d);
        let mut due = std::mem::take(&mut self.pending[side]);
        let mut out: Vec<LivePacket> = Vec::new();
        self.engine.poll_transmit(now, d, &mut out);
        due.extend(out);
        if due.is_empty() {
            self.pending[side] = due;
            return self.io.flush(side);
        }
        let frames: Vec<&[u8]> = due.iter().map(|p| p.frame()).collect();
        // Added latency is measured to the hand-off: the start of the send call. On veth
        // the call also runs the receiving stack of the peer synchronously (softirq on
        // bottom-half enable), which is the next hop's time, not the box's.
        let sent_at = self.io.realtime_ns();
        let cpu_at = match self.breakdown.as_ref().filter(|b| b.active) {
            Some(_) => sys::thread_cpu_ns(),
            None => 0,
        };
        let n = self.io.send(side, &frames, &mut self.failed)?;
        drop(frames);
        let ctx = match (self.breakdown.as_mut().filter(|b| b.active), sent_at) {
            (Some(b), Some(t)) => {
                let c = SendCtx {
                    marks: b.cur,
                    send: t,
                    tx_other: b.tx_calls,
                    off_cpu: t
                        .saturating_sub(b.cur.wake)
                        .saturating_sub(cpu_at.saturating_sub(b.cpu_wake)),
                    frames: n as u64,
                    mid: b.mid,
                    tx_mid: b.tx_mid,
                };
                b.tx_calls += sys::realtime_ns().saturating_sub(t);
                Some(c)
            }
            _ => None,
        };
        let unix_now = self.clock.to_unix_nanos(now);
        let mut fi = 0;
        for i in 0..n {
            let p = due.pop_front().expect("n <= len");
            if self.failed.get(fi) == Some(&i) {
                fi += 1;
                self.engine.on_send_failed(p);
                continue;
            }
            if let Some(c) = self.captures[d.index()].as_mut() {
                c.write(unix_now, p.frame());
            }
            if let (Some(t), true) = (sent_at, p.rx_unix_ns > 0) {
                self.engine.record_latency(t.saturating_sub(p.rx_unix_ns));
                if let (Some(c), Some(b)) = (&ctx, self.breakdown.as_mut()) {
                    b.agg.record(p.rx_unix_ns, &p.stamps, c);
                }
            }
            self.engine.on_sent(p);
        }
        self.pending[side] = due;
        Ok(())
    }

    fn reload(&mut self, now: Instant) {
        let Some(path) = self.config_path.clone() else {
            (self.log)("SIGHUP ignored: no configuration file");
            return;
        };
        let loaded = match self.io.reload_config() {
            Some(c) => Ok(c),
            None => BoxConfig::load(&path).map_err(|e| e.to_string()),
        };
        let result = loaded.and_then(|new| {
            if let Some(k) = self.cfg.restart_needed_for(&new) {
                return Err(format!(
                    "[{k}] changed: devices, captures, stats endpoints and privileges are \
                     fixed while the box runs; restart it to change them"
                ));
            }
            let moved = self.engine.reload(now, &new).map_err(|e| e.to_string())?;
            self.cfg = new;
            Ok(moved)
        });
        match result {
            Ok(moved) => {
                self.last_reload_error = None;
                (self.log)(&format!(
                    "reloaded {}: {moved} queued packet(s) moved to the new pipeline",
                    path.display()
                ));
            }
            Err(e) => {
                self.reload_failures += 1;
                (self.log)(&format!(
                    "reload refused, the running configuration stays: {e}"
                ));
                self.last_reload_error = Some(e);
            }
        }
        self.publish(now);
    }

    /// The full JSON snapshot.
    pub fn snapshot(&self, now: Instant) -> Value {
        let mut s = self.engine.snapshot();
        let m = s.as_object_mut().expect("object");
        m.insert("uptime_s".into(), json!(now.as_secs_f64()));
        m.insert("wakeups".into(), json!(self.wakeups));
        m.insert("reload_failures".into(), json!(self.reload_failures));
        m.insert("last_reload_error".into(), json!(self.last_reload_error));
        if let Some(b) = &self.breakdown {
            m.insert("latency_breakdown".into(), b.agg.to_json());
        }
        let a = self.engine.counters(Dir::ToB);
        let b = self.engine.counters(Dir::ToA);
        m.insert(
            "interfaces".into(),
            json!({
                "a": {"rx_packets": a.received, "rx_bytes": a.received_bytes,
                      "rx_kernel_drops": self.rx_drops[0],
                      "tx_packets": b.sent, "tx_bytes": b.sent_bytes},
                "b": {"rx_packets": b.received, "rx_bytes": b.received_bytes,
                      "rx_kernel_drops": self.rx_drops[1],
                      "tx_packets": a.sent, "tx_bytes": a.sent_bytes},
            }),
        );
        let caps: serde_json::Map<String, Value> = [Dir::ToB, Dir::ToA]
            .iter()
            .filter_map(|d| {
                self.captures[d.index()].as_ref().map(|c| {
                    (
                        d.name().to_string(),
                        json!({"packets": c.packets, "error": c.error}),
                    )
                })
            })
            .collect();
        m.insert("captures".into(), Value::Object(caps));
        s
    }

    fn publish(&mut self, now: Instant) {
        if self.io.senders().is_some() {
            for side in 0..2 {
                self.take_done(side, false);
            }
        }
        for side in 0..2 {
            self.rx_drops[side] += self.io.take_rx_drops(side);
        }
        for c in self.captures.iter_mut().flatten() {
            c.flush();
        }
        let snap = self.snapshot(now);
        if let Some(c) = &self.share {
            // A worker's numbers are served merged, by its supervisor.
            let w = WorkerStats {
                latency: self.engine.latency().clone(),
                sojourn: [Dir::ToB, Dir::ToA].map(|d| self.engine.sojourn(d).clone()),
                snapshot: snap,
            };
            if let Ok(mut g) = c.snapshot.lock() {
                *g = Some(w);
            }
        } else {
            self.published.set(snap);
        }
    }

    fn write_stats_file(&mut self) {
        use std::io::{Seek, Write};
        let json = self.published.json();
        if let Some(f) = self.stats_file.as_mut() {
            let r = f
                .set_len(0)
                .and_then(|_| f.seek(std::io::SeekFrom::Start(0)))
                .and_then(|_| f.write_all(json.as_bytes()))
                .and_then(|_| f.write_all(b"\n"))
                .and_then(|_| f.flush());
            if let Err(e) = r {
                (self.log)(&format!("could not write the stats file: {e}"));
            }
        }
    }

    /// Exit: discard what is still held (counted), flush captures, publish and write the
    /// final stats.
    pub fn finish(&mut self, now: Instant) {
        for side in 0..2 {
            // What a sender thread has not sent yet is discarded at shutdown.
            self.take_done(side, true);
            for p in self.pending[side].drain(..) {
                self.engine.on_send_failed(p);
            }
        }
        let n = self.engine.shutdown();
        self.publish(now);
        self.write_stats_file();
        (self.log)(&format!("exiting; {n} queued packet(s) discarded"));
    }

    /// Run until SIGINT/SIGTERM.
    pub fn run(&mut self) -> io::Result<()> {
        loop {
            if self.step()? == Control::Exit {
                return Ok(());
            }
        }
    }
}

/// How soon a transmit ring retries frames its driver could not take.
const RETRY: Duration = Duration::from_micros(50);

/// What wakes a loop besides its devices: signals (a single loop), or its supervisor (a
/// worker).
enum Wake {
    Signals(nix::sys::signalfd::SignalFd),
    Control(Arc<WorkerControl>),
}

/// What a worker's supervisor and the worker share: commands (reload, exit) with the
/// configuration to reload to, and the worker's latest snapshot. Touched at reloads and
/// at each stats publication, never per packet.
pub struct WorkerControl {
    notify: sys::Notify,
    signals: Mutex<Vec<Signal>>,
    config: Mutex<Option<BoxConfig>>,
    /// The worker's latest snapshot and the distributions behind its percentiles.
    pub snapshot: Mutex<Option<WorkerStats>>,
}

/// One worker's published numbers: the JSON snapshot, and the histograms its percentiles
/// come from (percentiles of the whole box are those of the merged histograms).
#[derive(Clone, Debug)]
pub struct WorkerStats {
    /// The snapshot.
    pub snapshot: Value,
    /// Added latency.
    pub latency: Histogram,
    /// Sojourn times, `[to_b, to_a]`.
    pub sojourn: [Sojourn; 2],
}

impl WorkerControl {
    /// A control block with its own wake-up.
    pub fn new() -> io::Result<WorkerControl> {
        Ok(WorkerControl {
            notify: sys::Notify::new()?,
            signals: Mutex::new(Vec::new()),
            config: Mutex::new(None),
            snapshot: Mutex::new(None),
        })
    }
    /// Ask the worker to reload to `cfg` (already validated).
    pub fn reload(&self, cfg: &BoxConfig) {
        if let Ok(mut g) = self.config.lock() {
            *g = Some(cfg.clone());
        }
        self.send(Signal::Reload);
    }
    /// Ask the worker to exit.
    pub fn exit(&self) {
        self.send(Signal::Exit);
    }
    fn send(&self, s: Signal) {
        if let Ok(mut g) = self.signals.lock() {
            g.push(s);
        }
        self.notify.wake();
    }
}

/// Real devices.
pub struct SysIo {
    devs: [Device; 2],
    batch: sys::Batch,
    wake: Wake,
    /// `[process] busy_poll`.
    busy_poll: Duration,
    /// `[process] tx_thread`: a sender thread per side.
    senders: Option<[Sender; 2]>,
}

/// A device's transmit side, in a sender thread.
struct DevTx {
    dev: Device,
    batch: sys::Batch,
}

impl TxDevice for DevTx {
    fn send(&mut self, frames: &[&[u8]], failed: &mut Vec<usize>) -> io::Result<usize> {
        self.batch.send(&mut self.dev, frames, failed)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.dev.flush()
    }
    fn needs_flush(&self) -> bool {
        self.dev.needs_flush()
    }
    fn wait_writable(&self, timeout: Duration) {
        let _ = self.dev.wait_writable(timeout);
    }
}

/// The sender threads of `devs` (`[process] tx_thread`; `worker`: whose event loop, for
/// its CPU and the threads' names), or `None`.
fn senders(
    cfg: &BoxConfig,
    devs: &mut [Device; 2],
    worker: usize,
) -> io::Result<Option<[Sender; 2]>> {
    if !cfg.process.tx_thread {
        return Ok(None);
    }
    let batch = cfg.interfaces.batch.unwrap_or(64);
    let avoid_cpu = cfg.process.worker_cpus().get(worker).copied().flatten();
    let mut make = |side: usize| -> io::Result<Sender> {
        let dev = devs[side].tx_twin()?;
        Ok(Sender::new(
            Box::new(DevTx {
                dev,
                batch: sys::Batch::new(batch),
            }),
            SenderOptions {
                batch,
                busy_poll: busy_poll(cfg),
                avoid_cpu,
                name: format!("asymlink-tx{worker}{}", ["a", "b"][side]),
            },
        ))
    };
    Ok(Some([make(0)?, make(1)?]))
}

impl SysIo {
    /// Open both sides as configured and the signalfd (signals are blocked from here on).
    pub fn open(cfg: &BoxConfig) -> io::Result<SysIo> {
        let sig = sys::signal_fd()?;
        let open = |name: &str| match (cfg.interfaces.kind, cfg.process.io) {
            (crate::config::IfaceKind::Packet, crate::config::IoMode::Socket) => {
                Device::packet(name)
            }
            (crate::config::IfaceKind::Packet, crate::config::IoMode::Mmap) => Device::mmap(name),
            (crate::config::IfaceKind::Packet, crate::config::IoMode::Xdp) => Device::xdp(name),
            (crate::config::IfaceKind::Tun, _) => Device::tun(name),
        };
        let a = open(&cfg.interfaces.a).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("interfaces.a '{}': {e}", cfg.interfaces.a),
            )
        })?;
        let b = open(&cfg.interfaces.b).map_err(|e| {
            io::Error::new(
                e.kind(),
                format!("interfaces.b '{}': {e}", cfg.interfaces.b),
            )
        })?;
        sys::set_timer_slack_ns(1);
        let mut devs = [a, b];
        let senders = senders(cfg, &mut devs, 0)?;
        Ok(SysIo {
            devs,
            batch: sys::Batch::new(cfg.interfaces.batch.unwrap_or(64)),
            wake: Wake::Signals(sig),
            busy_poll: busy_poll(cfg),
            senders,
        })
    }

    /// The devices of `controls.len()` workers: on each side one fanout group whose
    /// member `k` is worker `k`'s socket (see [`sys::open_group`]). Signals are not
    /// touched: the caller blocks them and reads them ([`sys::signal_fd`]).
    pub fn open_workers(
        cfg: &BoxConfig,
        controls: &[Arc<WorkerControl>],
    ) -> io::Result<Vec<SysIo>> {
        let n = controls.len();
        let mmap = cfg.process.io == crate::config::IoMode::Mmap;
        let mut groups = Vec::new();
        for (k, name, side) in [
            ("a", &cfg.interfaces.a, sys::HashSide::A),
            ("b", &cfg.interfaces.b, sys::HashSide::B),
        ] {
            groups.push(
                sys::open_group(name, mmap, n, side).map_err(|e| {
                    io::Error::new(e.kind(), format!("interfaces.{k} '{name}': {e}"))
                })?,
            );
        }
        let b = groups.pop().expect("two sides");
        let a = groups.pop().expect("two sides");
        sys::set_timer_slack_ns(1);
        a.into_iter()
            .zip(b)
            .zip(controls)
            .enumerate()
            .map(|(k, ((a, b), c))| {
                let mut devs = [a, b];
                let senders = senders(cfg, &mut devs, k)?;
                Ok(SysIo {
                    devs,
                    batch: sys::Batch::new(cfg.interfaces.batch.unwrap_or(64)),
                    wake: Wake::Control(c.clone()),
                    busy_poll: busy_poll(cfg),
                    senders,
                })
            })
            .collect()
    }
}

fn busy_poll(cfg: &BoxConfig) -> Duration {
    cfg.process.busy_poll.map(|s| s.0).unwrap_or(Duration::ZERO)
}

impl SysIo {
    /// Keep checking the devices for up to `spin` (`[process] busy_poll`): the sides with
    /// a frame waiting as soon as one has, `None` if none came. Rings are checked in
    /// memory; other devices (and the wake-up descriptor) with a `ppoll` that does not
    /// sleep.
    fn spin(&self, wake: BorrowedFd<'_>, spin: Duration) -> io::Result<Option<[bool; 2]>> {
        let start = std::time::Instant::now();
        let rings = self.devs.iter().all(|d| d.rx_pending().is_some());
        loop {
            if rings {
                let r = self.devs.each_ref().map(|d| d.rx_pending() == Some(true));
                if r[0] || r[1] {
                    return Ok(Some(r));
                }
            } else {
                let r = sys::poll(&self.devs, wake, [false; 2], Some(Duration::ZERO))?;
                if r.readable[0] || r.readable[1] || r.signal {
                    return Ok(Some(r.readable));
                }
            }
            if start.elapsed() >= spin {
                return Ok(None);
            }
            std::hint::spin_loop();
        }
    }
}

impl Io for SysIo {
    fn link_type(&self) -> LinkType {
        self.devs[0].link_type()
    }
    fn recv(
        &mut self,
        side: usize,
        max: usize,
        f: &mut dyn FnMut(&[u8], u64, bool),
    ) -> io::Result<usize> {
        self.batch.recv(&mut self.devs[side], max, &mut |rx| {
            f(rx.frame, rx.ts, rx.truncated)
        })
    }
    fn send(
        &mut self,
        side: usize,
        frames: &[&[u8]],
        failed: &mut Vec<usize>,
    ) -> io::Result<usize> {
        self.batch.send(&mut self.devs[side], frames, failed)
    }
    fn flush(&mut self, side: usize) -> io::Result<()> {
        self.devs[side].flush()
    }
    fn wait(&mut self, timeout: Option<Duration>, want_write: [bool; 2]) -> io::Result<[bool; 2]> {
        // A transmit ring whose driver queue was full: retry soon (the ring socket does not
        // report writable until then).
        let timeout = if self.devs.iter().any(|d| d.needs_flush()) {
            Some(timeout.map_or(RETRY, |t| t.min(RETRY)))
        } else {
            timeout
        };
        let fd = match &self.wake {
            Wake::Signals(s) => s.as_fd(),
            Wake::Control(c) => c.notify.as_fd(),
        };
        let mut timeout = timeout;
        // Busy-poll before sleeping (not while frames wait for room to be sent).
        if !self.busy_poll.is_zero() && want_write == [false; 2] {
            let spin = timeout.map_or(self.busy_poll, |t| t.min(self.busy_poll));
            let start = std::time::Instant::now();
            if let Some(r) = self.spin(fd, spin)? {
                return Ok(r);
            }
            timeout = timeout.map(|t| t.saturating_sub(start.elapsed()));
        }
        let r = sys::poll(&self.devs, fd, want_write, timeout)?;
        Ok(r.readable)
    }
    fn take_signals(&mut self, out: &mut Vec<Signal>) {
        match &self.wake {
            Wake::Signals(s) => sys::read_signals(s, out),
            Wake::Control(c) => {
                c.notify.clear();
                if let Ok(mut g) = c.signals.lock() {
                    out.append(&mut g);
                }
            }
        }
    }
    fn reload_config(&mut self) -> Option<BoxConfig> {
        match &self.wake {
            Wake::Control(c) => c.config.lock().ok().and_then(|g| g.clone()),
            Wake::Signals(_) => None,
        }
    }
    fn realtime_ns(&self) -> Option<u64> {
        Some(sys::realtime_ns())
    }
    fn rx_waiting(&self, side: usize) -> bool {
        self.devs[side].rx_waiting()
    }
    fn take_rx_drops(&mut self, side: usize) -> u64 {
        self.devs[side].take_rx_drops()
    }
    fn senders(&mut self) -> Option<&mut [Sender; 2]> {
        self.senders.as_mut()
    }
}

/// Scripted devices under a [`FakeClock`] (tests): frames arrive at given instants, sent
/// frames are recorded with the instant they left, and `wait` moves the clock to the next
/// event instead of sleeping.
pub struct MemIo {
    clock: FakeClock,
    lt: LinkType,
    arrivals: VecDeque<(Instant, usize, Vec<u8>)>,
    signals: VecDeque<(Instant, Signal)>,
    /// (time, side, frame) of every frame sent.
    pub sent: Vec<(Instant, usize, Vec<u8>)>,
    /// Frames the "device" refuses (by exact length), to test the error path.
    pub refuse_len: Option<usize>,
    /// Set when `wait` found nothing left to do (no deadline, no scripted event).
    pub idle: bool,
    /// How long after a deadline `wait` returns (zero: exactly at it), as a real
    /// clock's timers wake late.
    pub late: Duration,
    /// Sender threads over these devices instead of `sent` ([`MemIo::send_through`]).
    senders: Option<[Sender; 2]>,
    /// The devices tell without a system call whether a frame waits, as memory-mapped
    /// rings and AF_XDP do ([`Io::rx_waiting`]).
    pub rings: bool,
    /// Every frame sent on side b brings this frame back on side b at once: the host
    /// behind b answering inside the send call, as on veth.
    pub reply_b: Option<Vec<u8>>,
}

impl MemIo {
    /// Scripted I/O on `clock`.
    pub fn new(clock: FakeClock, lt: LinkType) -> MemIo {
        MemIo {
            clock,
            lt,
            arrivals: VecDeque::new(),
            signals: VecDeque::new(),
            sent: Vec::new(),
            refuse_len: None,
            idle: false,
            late: Duration::ZERO,
            senders: None,
            rings: false,
            reply_b: None,
        }
    }
    /// Send through a sender thread per side, over these devices (`[process]
    /// tx_thread`), instead of recording in `sent`.
    pub fn send_through(&mut self, devs: [Box<dyn TxDevice>; 2]) {
        let mut side = 0;
        self.senders = Some(devs.map(|d| {
            side += 1;
            Sender::new(
                d,
                SenderOptions {
                    batch: 64,
                    name: format!("memio-tx{side}"),
                    ..SenderOptions::default()
                },
            )
        }));
    }
    /// A frame arriving on `side` at `t` (push in time order).
    pub fn arrive(&mut self, t: Instant, side: usize, frame: Vec<u8>) {
        self.arrivals.push_back((t, side, frame));
    }
    /// A signal at `t` (push in time order).
    pub fn signal(&mut self, t: Instant, s: Signal) {
        self.signals.push_back((t, s));
    }
}

impl Io for MemIo {
    fn link_type(&self) -> LinkType {
        self.lt
    }
    fn recv(
        &mut self,
        side: usize,
        max: usize,
        f: &mut dyn FnMut(&[u8], u64, bool),
    ) -> io::Result<usize> {
        let now = self.clock.now();
        let mut n = 0;
        let mut i = 0;
        while i < self.arrivals.len() && n < max {
            let (t, s, _) = &self.arrivals[i];
            if *t > now {
                break;
            }
            if *s == side {
                let (_, _, fr) = self.arrivals.remove(i).expect("index valid");
                f(&fr, 0, false);
                n += 1;
            } else {
                i += 1;
            }
        }
        Ok(n)
    }
    fn send(
        &mut self,
        side: usize,
        frames: &[&[u8]],
        failed: &mut Vec<usize>,
    ) -> io::Result<usize> {
        failed.clear();
        for (i, f) in frames.iter().enumerate() {
            if self.refuse_len == Some(f.len()) {
                failed.push(i);
                continue;
            }
            self.sent.push((self.clock.now(), side, f.to_vec()));
            if let (1, Some(r)) = (side, &self.reply_b) {
                let now = self.clock.now();
                let at = self
                    .arrivals
                    .iter()
                    .position(|a| a.0 > now)
                    .unwrap_or(self.arrivals.len());
                self.arrivals.insert(at, (now, 1, r.clone()));
            }
        }
        Ok(frames.len())
    }
    fn rx_waiting(&self, side: usize) -> bool {
        let now = self.clock.now();
        self.rings
            && self
                .arrivals
                .iter()
                .take_while(|a| a.0 <= now)
                .any(|a| a.1 == side)
    }
    fn wait(&mut self, timeout: Option<Duration>, _want_write: [bool; 2]) -> io::Result<[bool; 2]> {
        let now = self.clock.now();
        let mut next = timeout.map(|d| now + d + self.late);
        let ev = [
            self.arrivals.front().map(|a| a.0),
            self.signals.front().map(|s| s.0),
        ];
        for t in ev.into_iter().flatten() {
            next = Some(next.map_or(t, |n: Instant| n.min(t)));
        }
        match next {
            Some(t) => {
                self.idle = false;
                self.clock.set(t)
            }
            None => self.idle = true,
        }
        Ok([true, true])
    }
    fn senders(&mut self) -> Option<&mut [Sender; 2]> {
        self.senders.as_mut()
    }
    fn take_signals(&mut self, out: &mut Vec<Signal>) {
        let now = self.clock.now();
        while self.signals.front().is_some_and(|(t, _)| *t <= now) {
            out.push(self.signals.pop_front().expect("front").1);
        }
    }
}
