//! Several forwarding threads (`[process] workers = N`).
//!
//! ```text
//!            side a group (fanout, hash of the source)   side b group (hash of the destination)
//!  frames ─► member 0 ─► worker 0: Engine, pipelines ◄─ member 0 ◄─ frames
//!        └─► member 1 ─► worker 1: Engine, pipelines ◄─ member 1 ◄─┘
//!                                  ▲ commands (reload, exit), snapshots
//!                        supervisor (main thread): signals, stats merge
//! ```
//!
//! Each worker is a complete single-threaded box ([`EventLoop`] over its own sockets,
//! [`crate::engine::Engine`] with its own pipelines and links): nothing is shared on the
//! packet path, no lock is taken per frame. The kernel picks the worker of each frame
//! with the fanout program ([`sys::fanout_program`]), which hashes the subscriber's
//! address — the same hash of the source address on side a and of the destination
//! address on side b — so a subscriber's two directions meet on one worker, its queues
//! are whole there, and a connection is never reordered.
//!
//! The supervisor reads the signals: SIGHUP reads and checks the file once and hands the
//! new configuration to every worker; SIGINT/SIGTERM stop them. Every `stats.interval` it
//! merges the workers' latest snapshots ([`merge_snapshots`]) and publishes the result.

use crate::clock::MonotonicClock;
use crate::config::BoxConfig;
use crate::engine::Sojourn;
use crate::runtime::{EventLoop, SysIo, WorkerControl, WorkerStats};
use crate::stats::{Histogram, Published};
use crate::sys::{self, Signal};
use asymlink_core::rand::derive_seed;
use serde_json::{json, Value};
use std::io;
use std::os::fd::AsFd;
use std::path::PathBuf;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;

/// The master seed of worker `k`: worker 0 runs on the box's seed (one worker is the
/// single-threaded box), the others on streams derived from it.
pub fn worker_seed(master: u64, k: usize) -> u64 {
    if k == 0 {
        master
    } else {
        derive_seed(master, &format!("worker:{k}"))
    }
}

/// Keys whose merged value is the largest of the workers' (gauges of the whole process or
/// high-water marks), not the sum.
const MAX_KEYS: [&str; 7] = [
    "uptime_s",
    "configured",
    "rss_bytes",
    "reloads",
    "max_backlog_packets",
    "max_modem_packets",
    "publish_max_ns",
];

fn merge_into(acc: &mut Value, v: &Value, key: &str) {
    match (acc, v) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, bv) in b {
                match a.get_mut(k) {
                    Some(av) => merge_into(av, bv, k),
                    None => {
                        a.insert(k.clone(), bv.clone());
                    }
                }
            }
        }
        (Value::Number(_), Value::Number(_)) if key == "seed" => {}
        (a @ Value::Number(_), Value::Number(b)) => {
            let max = MAX_KEYS.contains(&key);
            *a = match (a.as_u64(), b.as_u64()) {
                (Some(x), Some(y)) => json!(if max { x.max(y) } else { x + y }),
                _ => {
                    let (x, y) = (a.as_f64().unwrap_or(0.0), b.as_f64().unwrap_or(0.0));
                    json!(if max { x.max(y) } else { x + y })
                }
            };
        }
        (a @ Value::Null, b) => *a = b.clone(),
        // Strings, booleans, lists: the first worker's.
        _ => {}
    }
}

/// One snapshot of the whole box from the workers' snapshots (in worker order): counters
/// summed, high-water marks and process gauges the largest, the seed and other labels the
/// first worker's (`seed`: worker 0 runs on the box's seed), the added latency and the
/// sojourn times from the merged histograms; `workers` lists each worker's frames per
/// direction.
pub fn merge_snapshots(parts: &[WorkerStats]) -> Value {
    let mut acc = Value::Null;
    let mut lat = Histogram::default();
    let mut sojourn: [Sojourn; 2] = Default::default();
    let mut each = Vec::new();
    for (k, w) in parts.iter().enumerate() {
        let snap = &w.snapshot;
        merge_into(&mut acc, snap, "");
        lat.merge(&w.latency);
        for (s, o) in sojourn.iter_mut().zip(&w.sojourn) {
            s.merge(o);
        }
        let dir = |d: &str, key: &str| snap["directions"][d][key].as_u64().unwrap_or(0);
        each.push(json!({
            "worker": k,
            "received": {"to_b": dir("to_b", "received"), "to_a": dir("to_a", "received")},
            "sent": {"to_b": dir("to_b", "sent"), "to_a": dir("to_a", "sent")},
            "wakeups": snap["wakeups"],
        }));
    }
    if let Value::Object(m) = &mut acc {
        m.insert("latency_us".into(), lat.to_json());
        m.insert("workers".into(), Value::Array(each));
        for (d, s) in ["to_b", "to_a"].iter().zip(&sojourn) {
            if let Some(Value::Object(dm)) = m.get_mut("directions").and_then(|v| v.get_mut(*d)) {
                dm.insert("sojourn_ms".into(), s.to_json());
            }
        }
    }
    acc
}

/// The workers and what the supervisor needs to run them.
pub struct Workers {
    controls: Vec<Arc<WorkerControl>>,
    ios: Vec<SysIo>,
    cfg: BoxConfig,
    path: PathBuf,
    seed: u64,
    sig: nix::sys::signalfd::SignalFd,
    published: Published,
    stats_file: Option<std::fs::File>,
}

fn log(m: &str) {
    eprintln!("asymlink-box: {m}");
}

impl Workers {
    /// Open every worker's devices (signals are blocked and read by the caller's thread
    /// from here on). Nothing runs yet.
    pub fn open(cfg: &BoxConfig, path: PathBuf, seed: u64) -> io::Result<Workers> {
        let sig = sys::signal_fd()?;
        let controls = (0..cfg.process.workers())
            .map(|_| WorkerControl::new().map(Arc::new))
            .collect::<io::Result<Vec<_>>>()?;
        let ios = SysIo::open_workers(cfg, &controls)?;
        Ok(Workers {
            controls,
            ios,
            cfg: cfg.clone(),
            path,
            seed,
            sig,
            published: Published::default(),
            stats_file: None,
        })
    }

    /// The merged snapshot the endpoints serve.
    pub fn published(&self) -> Published {
        self.published.clone()
    }

    /// Write the final merged snapshot to this file at exit.
    pub fn set_stats_file(&mut self, f: std::fs::File) {
        self.stats_file = Some(f);
    }

    /// Start the workers (each pins itself to its CPU and builds its pipelines; the
    /// scheduling class and the privileges are the calling thread's, inherited), wait
    /// until all run, then supervise them until SIGINT/SIGTERM.
    pub fn run(mut self, started: impl FnOnce() -> io::Result<()>) -> io::Result<()> {
        let cpus = self.cfg.process.worker_cpus();
        let (ready_tx, ready_rx) = mpsc::channel::<Result<(), String>>();
        let mut handles: Vec<JoinHandle<io::Result<()>>> = Vec::new();
        let ios = std::mem::take(&mut self.ios);
        for (k, io) in ios.into_iter().enumerate() {
            let cfg = self.cfg.clone();
            let ctrl = self.controls[k].clone();
            let path = self.path.clone();
            let seed = worker_seed(self.seed, k);
            let cpu = cpus[k];
            let ready = ready_tx.clone();
            let h = std::thread::Builder::new()
                .name(format!("asymlink-w{k}"))
                .spawn(move || {
                    let setup = || -> Result<EventLoop<MonotonicClock, SysIo>, String> {
                        if let Some(c) = cpu {
                            sys::set_affinity(c).map_err(|e| format!("process.cpu {c}: {e}"))?;
                        }
                        let mut el = EventLoop::new(MonotonicClock::new(), io, cfg, seed)?;
                        el.set_config_path(path);
                        el.set_share(ctrl);
                        el.set_log(Box::new(move |m| {
                            eprintln!("asymlink-box: worker {k}: {m}")
                        }));
                        Ok(el)
                    };
                    match setup() {
                        Ok(mut el) => {
                            let _ = ready.send(Ok(()));
                            el.run()
                        }
                        Err(e) => {
                            let _ = ready.send(Err(format!("worker {k}: {e}")));
                            Ok(())
                        }
                    }
                })?;
            handles.push(h);
        }
        drop(ready_tx);
        let mut failed = None;
        for _ in 0..handles.len() {
            match ready_rx.recv() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => failed = Some(e),
                Err(_) => failed = Some("a worker stopped while starting".into()),
            }
        }
        if let Some(e) = failed {
            let _ = self.stop(handles);
            return Err(io::Error::other(e));
        }
        log(&format!(
            "{} workers forwarding between {} (a) and {} (b)",
            self.controls.len(),
            self.cfg.interfaces.a,
            self.cfg.interfaces.b
        ));
        let result = started().and_then(|_| self.supervise(&handles));
        let stopped = self.stop(handles);
        result.and(stopped)
    }

    fn supervise(&mut self, handles: &[JoinHandle<io::Result<()>>]) -> io::Result<()> {
        let every = self
            .cfg
            .stats
            .interval
            .map(|s| s.0)
            .unwrap_or(Duration::from_millis(100));
        let mut signals = Vec::new();
        let (mut refused, mut last_error) = (0u64, None::<String>);
        loop {
            sys::wait_readable(self.sig.as_fd(), every)?;
            sys::read_signals(&self.sig, &mut signals);
            for s in signals.drain(..) {
                match s {
                    Signal::Exit => return Ok(()),
                    Signal::Reload => match self.check_reload() {
                        Ok(new) => {
                            for c in &self.controls {
                                c.reload(&new);
                            }
                            self.cfg = new;
                            last_error = None;
                        }
                        Err(e) => {
                            refused += 1;
                            log(&format!(
                                "reload refused, the running configuration stays: {e}"
                            ));
                            last_error = Some(e);
                        }
                    },
                }
            }
            if let Some(k) = handles.iter().position(|h| h.is_finished()) {
                return Err(io::Error::other(format!("worker {k} stopped")));
            }
            self.publish(refused, &last_error);
        }
    }

    fn check_reload(&self) -> Result<BoxConfig, String> {
        let new = BoxConfig::load(&self.path).map_err(|e| e.to_string())?;
        if let Some(k) = self.cfg.restart_needed_for(&new) {
            return Err(format!(
                "[{k}] changed: devices, workers, captures, stats endpoints and privileges \
                 are fixed while the box runs; restart it to change them"
            ));
        }
        Ok(new)
    }

    fn publish(&self, refused: u64, last_error: &Option<String>) {
        let parts: Vec<WorkerStats> = self
            .controls
            .iter()
            .filter_map(|c| c.snapshot.lock().ok().and_then(|g| g.clone()))
            .collect();
        if parts.is_empty() {
            return;
        }
        let mut snap = merge_snapshots(&parts);
        if let Value::Object(m) = &mut snap {
            let workers_refused = m["reload_failures"].as_u64().unwrap_or(0);
            m.insert("reload_failures".into(), json!(workers_refused + refused));
            if last_error.is_some() {
                m.insert("last_reload_error".into(), json!(last_error));
            }
        }
        self.published.set(snap);
    }

    /// Tell every worker to exit, wait for them, publish and write the final merged
    /// snapshot.
    fn stop(&mut self, handles: Vec<JoinHandle<io::Result<()>>>) -> io::Result<()> {
        for c in &self.controls {
            c.exit();
        }
        let mut result = Ok(());
        for (k, h) in handles.into_iter().enumerate() {
            match h.join() {
                Ok(Ok(())) => {}
                Ok(Err(e)) => result = Err(io::Error::new(e.kind(), format!("worker {k}: {e}"))),
                Err(_) => result = Err(io::Error::other(format!("worker {k} panicked"))),
            }
        }
        self.publish(0, &None);
        if let Some(f) = self.stats_file.as_mut() {
            use std::io::Write;
            let json = self.published.json();
            let _ = f
                .write_all(json.as_bytes())
                .and_then(|_| f.write_all(b"\n"));
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snapshots_merge_by_kind_of_number() {
        let mut h0 = Histogram::default();
        let mut h1 = Histogram::default();
        for us in [10, 20, 30] {
            h0.record(us * 1000);
        }
        h1.record(500_000);
        let mut s0: [Sojourn; 2] = Default::default();
        let mut s1: [Sojourn; 2] = Default::default();
        s0[0].record(1_000_000);
        s1[0].record(3_000_000);
        s1[0].record(5_000_000);
        let w = |rx: u64, max: u64, up: f64| {
            json!({
                "seed": rx,
                "uptime_s": up,
                "reloads": 1,
                "reload_failures": 0,
                "last_reload_error": null,
                "directions": {"to_b": {"received": rx, "sent": rx,
                                        "sojourn_ms": {"count": 1, "p50": 99.0},
                                        "qdisc": {"kind": "fifo", "max_backlog_packets": max}},
                               "to_a": {"received": 1, "sent": 1}},
                "wakeups": 5,
            })
        };
        let parts = [
            WorkerStats {
                snapshot: w(10, 4, 1.5),
                latency: h0,
                sojourn: s0,
            },
            WorkerStats {
                snapshot: w(7, 9, 1.25),
                latency: h1,
                sojourn: s1,
            },
        ];
        let m = merge_snapshots(&parts);
        assert_eq!(m["seed"], json!(10), "the first worker's seed");
        assert_eq!(m["directions"]["to_b"]["received"], json!(17));
        assert_eq!(
            m["directions"]["to_b"]["qdisc"]["max_backlog_packets"],
            json!(9)
        );
        assert_eq!(m["directions"]["to_b"]["qdisc"]["kind"], json!("fifo"));
        assert_eq!(m["reloads"], json!(1));
        assert_eq!(m["uptime_s"], json!(1.5));
        assert_eq!(m["latency_us"]["count"], json!(4));
        assert_eq!(m["latency_us"]["max"], json!(500.0));
        assert_eq!(m["latency_us"]["p50"], json!(20.0));
        let so = &m["directions"]["to_b"]["sojourn_ms"];
        assert_eq!(so["count"], json!(3));
        assert_eq!(so["max"], json!(5.0));
        assert_eq!(so["mean"], json!(3.0));
        let p50 = so["p50"].as_f64().unwrap();
        assert!(
            (p50 - 3.0).abs() < 0.05,
            "the middle of the merged values: {p50}"
        );
        assert_eq!(m["workers"][1]["received"]["to_b"], json!(7));
        assert_eq!(m["workers"][0]["sent"]["to_a"], json!(1));
    }

    #[test]
    fn worker_zero_runs_on_the_master_seed() {
        assert_eq!(worker_seed(42, 0), 42);
        assert_ne!(worker_seed(42, 1), 42);
        assert_ne!(worker_seed(42, 1), worker_seed(42, 2));
    }
}
