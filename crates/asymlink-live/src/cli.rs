//! The `asymlink-box` command line: argument parsing, start-up order and the event loop.
//!
//! Order of work: validate the configuration completely (exit 2 on any error, before any
//! device is touched) → open the devices (signals are blocked and routed to a signalfd
//! first) → open captures and the stats file, bind the stats endpoints → drop privileges
//! → run the event loop until SIGINT/SIGTERM (SIGHUP reloads).
//!
//! It lives in the library so that the same code runs as the standalone binary and inside
//! the Python extension module (which ships in the wheel: no separate binary to find).

use crate::capture::Capture;
use crate::clock::MonotonicClock;
use crate::config::{parse_loopback, BoxConfig};
use crate::runtime::{EventLoop, SysIo};
use crate::stats::Published;
use crate::workers::Workers;
use crate::{server, sys};
use asymlink_core::pipeline::Dir;
use std::path::{Path, PathBuf};

const USAGE: &str = "usage: asymlink-box --config FILE [--check | --print-effective] [--seed N]
                    [--ready-file PATH]

  --config FILE      the box configuration (TOML; see docs/live.md)
  --check            validate the configuration and exit (0: valid, 2: invalid)
  --print-effective  validate, print the configuration as the box runs it (a `line`
                     expanded into both directions, every subscriber listed with its
                     `line` expanded) and exit
  --seed N           master seed (overrides the file; default: the file's, else random)
  --ready-file PATH  write the box's pid to PATH once devices, captures and endpoints
                     are open and privileges dropped (PATH is created empty before)

Signals: SIGHUP reloads the configuration keeping queued packets; SIGINT/SIGTERM flush
captures and stats and exit.";

/// Print to stdout; a closed pipe (`asymlink-box --help | head -1`) is not an error.
fn say(m: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stdout(), "{m}");
}

fn log(m: &str) {
    eprintln!("asymlink-box: {m}");
}

struct Args {
    config: PathBuf,
    check: bool,
    print_effective: bool,
    seed: Option<u64>,
    ready: Option<PathBuf>,
}

/// What the command line asks for: a run, or a text to print and exit 0.
enum Cmd {
    Run(Args),
    Print(String),
}

fn args(argv: &[String]) -> Result<Cmd, String> {
    let mut it = argv.iter().cloned();
    let (mut config, mut check, mut seed, mut ready) = (None, false, None, None);
    let mut print_effective = false;
    while let Some(a) = it.next() {
        match a.as_str() {
            "--config" | "-c" => {
                config = Some(PathBuf::from(it.next().ok_or("--config needs a file")?))
            }
            "--check" => check = true,
            "--print-effective" => print_effective = true,
            "--seed" => {
                let v = it.next().ok_or("--seed needs a number")?;
                seed = Some(
                    v.parse()
                        .map_err(|_| format!("--seed: '{v}' is not a number"))?,
                );
            }
            "--ready-file" => {
                ready = Some(PathBuf::from(it.next().ok_or("--ready-file needs a path")?))
            }
            "-h" | "--help" => return Ok(Cmd::Print(USAGE.to_string())),
            "-V" | "--version" => {
                return Ok(Cmd::Print(format!(
                    "asymlink-box {}",
                    env!("CARGO_PKG_VERSION")
                )))
            }
            other => return Err(format!("unknown argument '{other}'\n{USAGE}")),
        }
    }
    Ok(Cmd::Run(Args {
        config: config.ok_or_else(|| format!("--config is required\n{USAGE}"))?,
        check,
        print_effective,
        seed,
        ready,
    }))
}

fn os_seed() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .is_ok()
    {
        u64::from_le_bytes(b)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(1)
    }
}

/// Validate a box configuration without touching any device: `None` when valid, else
/// the one-line error (what `--check` prints).
pub fn check(path: &Path) -> Option<String> {
    load(path).err()
}

fn load(path: &Path) -> Result<BoxConfig, String> {
    BoxConfig::load(path).map_err(|e| format!("invalid configuration {}: {e}", path.display()))
}

fn run(argv: &[String]) -> Result<(), (u8, String)> {
    let a = match args(argv).map_err(|e| (2, e))? {
        Cmd::Run(a) => a,
        Cmd::Print(text) => {
            say(&text);
            return Ok(());
        }
    };
    if a.print_effective {
        let text = BoxConfig::effective(&a.config).map_err(|e| {
            (
                2,
                format!("invalid configuration {}: {e}", a.config.display()),
            )
        })?;
        say(text.trim_end());
        return Ok(());
    }
    let cfg = load(&a.config).map_err(|e| (2, e))?;
    if a.check {
        say(&format!("ok: {}", a.config.display()));
        return Ok(());
    }
    let seed = a
        .seed
        .or(cfg.seed)
        .or_else(|| {
            std::env::var("ASYMLINK_SEED")
                .ok()
                .and_then(|s| s.parse().ok())
        })
        .unwrap_or_else(os_seed);
    log(&format!("seed {seed}"));

    if cfg.process.workers() > 1 {
        return run_workers(&a, cfg, seed);
    }
    // Devices (signals are blocked and go to a signalfd from here on).
    let io = SysIo::open(&cfg).map_err(|e| (1, format!("cannot open devices: {e}")))?;
    let lt = crate::runtime::Io::link_type(&io);
    let mut el =
        EventLoop::new(MonotonicClock::new(), io, cfg.clone(), seed).map_err(|e| (2, e))?;
    el.set_config_path(a.config.clone());

    // Files and endpoints, while we may still create them anywhere.
    let snaplen = cfg.capture.snaplen.unwrap_or(65535);
    for d in [Dir::ToB, Dir::ToA] {
        if let Some(p) = cfg.capture.path(d) {
            let c = Capture::create(&p, lt, snaplen)
                .map_err(|e| (1, format!("capture {}: {e}", p.display())))?;
            el.set_capture(d, c);
            log(&format!("capturing {} to {}", d.name(), p.display()));
        }
    }
    if let Some(f) = open_stats(&cfg, el.published())? {
        el.set_stats_file(f);
    }
    // Created now, while any path may be created; written once privileges are dropped,
    // so that a reader who sees the pid sees the box fully started.
    let ready = create_ready(&a)?;

    if let Some(Some(cpu)) = cfg.process.worker_cpus().first() {
        sys::set_affinity(*cpu).map_err(|e| (1, format!("process.cpu {cpu}: {e}")))?;
    }
    realtime_then_unprivileged(&cfg, "event loop")?;
    if let Some(mut f) = ready {
        use std::io::Write;
        writeln!(f, "{}", std::process::id()).map_err(|e| (1, format!("ready file: {e}")))?;
    }
    log(&format!(
        "forwarding between {} (a) and {} (b)",
        cfg.interfaces.a, cfg.interfaces.b
    ));
    let result = el.run().map_err(|e| (1, format!("event loop: {e}")));
    if let Some(p) = &cfg.stats.socket {
        // Best effort: the directory may not be writable any more without privileges;
        // a stale socket is replaced at the next start.
        let _ = std::fs::remove_file(p);
    }
    result
}

/// The stats endpoints and the stats file, shared by both ways of running.
fn open_stats(
    cfg: &BoxConfig,
    published: Published,
) -> Result<Option<std::fs::File>, (u8, String)> {
    if let Some(p) = &cfg.stats.socket {
        server::serve_unix(p, published.clone())
            .map_err(|e| (1, format!("stats.socket {}: {e}", p.display())))?;
        log(&format!("stats (JSON) on unix socket {}", p.display()));
    }
    if let Some(addr) = &cfg.stats.prometheus {
        let sa = parse_loopback(addr).map_err(|e| (2, e.to_string()))?;
        let local = server::serve_prometheus(sa, published)
            .map_err(|e| (1, format!("stats.prometheus {addr}: {e}")))?;
        log(&format!("stats (Prometheus) on http://{local}/metrics"));
    }
    match &cfg.stats.file {
        Some(p) => std::fs::File::create(p)
            .map(Some)
            .map_err(|e| (1, format!("stats.file {}: {e}", p.display()))),
        None => Ok(None),
    }
}

/// The ready file, created now while any path may be created; the pid is written once
/// the box has started and dropped its privileges.
fn create_ready(a: &Args) -> Result<Option<std::fs::File>, (u8, String)> {
    a.ready
        .as_ref()
        .map(|r| std::fs::File::create(r).map_err(|e| (1, format!("ready file: {e}"))))
        .transpose()
}

/// `[process] realtime_priority` for this thread (logged as what runs under it), then
/// the privileges dropped for `[privileges] user`.
fn realtime_then_unprivileged(cfg: &BoxConfig, who: &str) -> Result<(), (u8, String)> {
    if let Some(p) = cfg.process.realtime_priority {
        sys::set_realtime(p).map_err(|e| (1, format!("process.realtime_priority {p}: {e}")))?;
        log(&format!("{who} under SCHED_FIFO priority {p}"));
    }
    let what = sys::drop_privileges(&cfg.privileges.user)
        .map_err(|e| (1, format!("cannot drop privileges: {e}")))?;
    log(&format!("privileges dropped: {what}"));
    Ok(())
}

/// `[process] workers` > 1: the same start-up order, with one event loop per worker
/// thread ([`Workers`]); this thread reads the signals and merges the stats.
fn run_workers(a: &Args, cfg: BoxConfig, seed: u64) -> Result<(), (u8, String)> {
    let n = cfg.process.workers();
    let mut w = Workers::open(&cfg, a.config.clone(), seed)
        .map_err(|e| (1, format!("cannot open devices: {e}")))?;
    if let Some(f) = open_stats(&cfg, w.published())? {
        w.set_stats_file(f);
    }
    let ready = create_ready(a)?;
    // The workers inherit the scheduling class and the dropped privileges of this thread;
    // each pins itself to its CPU (which needs no privilege).
    realtime_then_unprivileged(&cfg, &format!("{n} workers"))?;
    let realtime = cfg.process.realtime_priority.is_some();
    let result = w
        .run(move || {
            if realtime {
                // The supervisor only merges stats: back to the ordinary scheduler.
                sys::set_normal_scheduling()?;
            }
            if let Some(mut f) = ready {
                use std::io::Write;
                writeln!(f, "{}", std::process::id())?;
            }
            Ok(())
        })
        .map_err(|e| (1, format!("workers: {e}")));
    if let Some(p) = &cfg.stats.socket {
        let _ = std::fs::remove_file(p);
    }
    result
}

/// The whole `asymlink-box` command: `argv` without the program name; returns the exit
/// status (0 ok, 1 runtime failure, 2 invalid arguments or configuration). Errors are
/// printed to stderr as one line prefixed `asymlink-box:`. Shared by the standalone binary
/// and the Python package (`python -m asymlink.live`, `asymlink box`).
pub fn main(argv: &[String]) -> u8 {
    match run(argv) {
        Ok(()) => 0,
        Err((code, msg)) => {
            log(&msg);
            code
        }
    }
}
