//! Forwarding through AF_XDP sockets, measured against the kernel and the box (root only).
//!
//! ```text
//!  ns C: c0 ══ ra ─┐ ns R: forwarder ┌─ rb ══ s0 :ns S
//!                  └─────────────────┘
//! ```
//!
//! The example builds its own lab (namespaces `axdp<pid>{c,r,s}`, veth, MTU 1500, every
//! offload off; removed at the end) and, per run, measures one bulk Linux TCP transfer
//! C → S (CUBIC, 0.5 s warm-up, then `--seconds`) through three forwarders in R, one after
//! the other:
//!
//! * `kernel`: a Linux bridge holding `ra` and `rb`;
//! * `xdp`: this program. A five-instruction XDP program on `ra` and on `rb` redirects
//!   every frame to the AF_XDP socket of its receive queue (an `XSKMAP`); the two sockets
//!   share one UMEM, so a frame received on one side is put on the other side's transmit
//!   ring as it is, with no copy in user space. No pipeline: the unshaped case.
//! * `mmap`: `asymlink-box` with `[process] io = "mmap"` (built beside this example:
//!   `cargo build --release -p asymlink-live --bin asymlink-box`), unshaped.
//! * `box-xdp` (not in the default list): `asymlink-box` with `io = "xdp"`, the same
//!   program and sockets inside the box (`asymlink_live::xdp`).
//!
//! The BPF program and the sockets are the box's own (`asymlink_live::xdp`): loaded and
//! attached with the `bpf(2)` system call, no libbpf, no C toolchain. The link goes away
//! with the program's file descriptors.
//!
//! ```sh
//! cargo build --release -p asymlink-live --example afxdp_forward --bin asymlink-box
//! sudo target/release/examples/afxdp_forward [--runs 3] [--seconds 5] \
//!      [--modes kernel,xdp,mmap,box-xdp] [--xdp-mode native|generic] [--zerocopy] [--rt 20]
//! ```
//!
//! Prints one line per measurement and the ratios to the kernel of the same run.
// AF_XDP and bpf(2) have no safe wrapper among our dependencies: raw system calls,
// shared rings and mmap, each block with its reason.
#![allow(unsafe_code)]

use nix::sched::{setns, CloneFlags};
use std::fs::File;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use asymlink_live::xdp::{
    attach_redirect, bind_socket, AttachMode, Ring, Rings, Umem, UmemMap, FRAME,
};

const MAC_C: &str = "02:00:00:79:00:01";
const MAC_S: &str = "02:00:00:79:00:02";
const ADDR_C: &str = "10.79.0.1";
const ADDR_S: &str = "10.79.0.2";
const PORT: u16 = 5201;
const OFFLOADS: [&str; 9] = [
    "rx", "tx", "sg", "tso", "gso", "gro", "lro", "rxvlan", "txvlan",
];

// ---------------------------------------------------------------------------------------
// The lab
// ---------------------------------------------------------------------------------------

fn run(cmd: &str, args: &[&str]) -> io::Result<()> {
    let out = Command::new(cmd).args(args).output()?;
    if out.status.success() {
        Ok(())
    } else {
        Err(io::Error::other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )))
    }
}

fn in_ns(ns: &str, args: &[&str]) -> io::Result<()> {
    let mut a = vec!["netns", "exec", ns];
    a.extend_from_slice(args);
    run("ip", &a)
}

/// Our three namespaces; removed (with their veths) when dropped.
struct Lab {
    c: String,
    r: String,
    s: String,
}

impl Drop for Lab {
    fn drop(&mut self) {
        for n in [&self.c, &self.r, &self.s] {
            let _ = run("ip", &["netns", "del", n]);
        }
    }
}

fn lab() -> io::Result<Lab> {
    let p = format!("axdp{}", std::process::id() % 100_000);
    let lab = Lab {
        c: format!("{p}c"),
        r: format!("{p}r"),
        s: format!("{p}s"),
    };
    for n in [&lab.c, &lab.r, &lab.s] {
        run("ip", &["netns", "add", n])?;
        in_ns(n, &["sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1"])?;
        in_ns(
            n,
            &["sysctl", "-qw", "net.ipv6.conf.default.disable_ipv6=1"],
        )?;
        in_ns(n, &["ip", "link", "set", "lo", "up"])?;
    }
    for (end, mac, ns_end, peer) in [("c0", MAC_C, &lab.c, "ra"), ("s0", MAC_S, &lab.s, "rb")] {
        run(
            "ip",
            &[
                "link", "add", end, "address", mac, "netns", ns_end, "type", "veth", "peer",
                "name", peer, "netns", &lab.r,
            ],
        )?;
    }
    for (ns, d) in [
        (&lab.c, "c0"),
        (&lab.r, "ra"),
        (&lab.r, "rb"),
        (&lab.s, "s0"),
    ] {
        for f in OFFLOADS {
            let _ = in_ns(ns, &["ethtool", "-K", d, f, "off"]);
        }
        in_ns(ns, &["ip", "link", "set", d, "up"])?;
    }
    for (ns, d, a, peer, mac) in [
        (&lab.c, "c0", ADDR_C, ADDR_S, MAC_S),
        (&lab.s, "s0", ADDR_S, ADDR_C, MAC_C),
    ] {
        in_ns(ns, &["ip", "addr", "add", &format!("{a}/24"), "dev", d])?;
        in_ns(
            ns,
            &[
                "ip",
                "neigh",
                "replace",
                peer,
                "lladdr",
                mac,
                "nud",
                "permanent",
                "dev",
                d,
            ],
        )?;
        in_ns(ns, &["sysctl", "-qw", "net.ipv4.tcp_no_metrics_save=1"])?;
    }
    Ok(lab)
}

fn enter(ns: &str) -> io::Result<()> {
    let f = File::open(format!("/var/run/netns/{ns}"))?;
    setns(f, CloneFlags::CLONE_NEWNET).map_err(io::Error::from)
}

// ---------------------------------------------------------------------------------------
// The bulk transfer
// ---------------------------------------------------------------------------------------

/// One bulk TCP transfer C → S: goodput in Gbit/s over `seconds` after a 0.5 s warm-up,
/// and the bytes received in all.
fn transfer(lab: &Lab, seconds: f64) -> io::Result<(f64, u64)> {
    let warm = Duration::from_millis(500);
    let window = Duration::from_secs_f64(seconds);
    let (ready_tx, ready_rx) = mpsc::channel();
    let s_ns = lab.s.clone();
    let receiver = std::thread::spawn(move || -> io::Result<(f64, u64)> {
        enter(&s_ns)?;
        let l = TcpListener::bind((ADDR_S, PORT))?;
        let _ = ready_tx.send(());
        let (mut sock, _) = l.accept()?;
        sock.set_read_timeout(Some(Duration::from_secs(3)))?;
        let mut buf = vec![0u8; 256 * 1024];
        let t0 = Instant::now();
        let (mut total, mut mark) = (0u64, None);
        loop {
            let n = sock.read(&mut buf)?;
            if n == 0 {
                return Err(io::Error::other("the sender closed early"));
            }
            total += n as u64;
            let t = t0.elapsed();
            match mark {
                None if t >= warm => mark = Some((t, total)),
                Some((t1, b1)) if t >= warm + window => {
                    let g = (total - b1) as f64 * 8.0 / (t - t1).as_secs_f64() / 1e9;
                    return Ok((g, total));
                }
                _ => {}
            }
        }
    });
    ready_rx
        .recv_timeout(Duration::from_secs(5))
        .map_err(|_| io::Error::other("the receiver did not start"))?;
    let c_ns = lab.c.clone();
    let deadline = warm + window + Duration::from_secs(5);
    let sender = std::thread::spawn(move || -> io::Result<()> {
        enter(&c_ns)?;
        let addr: SocketAddr = format!("{ADDR_S}:{PORT}").parse().unwrap();
        let mut sock = TcpStream::connect_timeout(&addr, Duration::from_secs(3))?;
        let cc = b"cubic";
        // SAFETY: plain setsockopt on our socket with a valid buffer.
        unsafe {
            libc::setsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                libc::TCP_CONGESTION,
                cc.as_ptr().cast(),
                cc.len() as libc::socklen_t,
            );
        }
        sock.set_write_timeout(Some(Duration::from_secs(3)))?;
        let buf = vec![0x5au8; 128 * 1024];
        let t0 = Instant::now();
        // Until the receiver closes (the write then fails) or the deadline.
        while t0.elapsed() < deadline && sock.write_all(&buf).is_ok() {}
        Ok(())
    });
    let g = receiver.join().expect("receiver thread");
    let _ = sender.join().expect("sender thread");
    g
}

// ---------------------------------------------------------------------------------------
// AF_XDP sockets (the box's own: `asymlink_live::xdp`)
// ---------------------------------------------------------------------------------------

const FRAMES: usize = 8192;
const RING: u32 = 2048;
const BATCH: u32 = 64;

struct Xsk {
    fd: OwnedFd,
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
}

fn if_index(name: &str) -> io::Result<u32> {
    let c = std::ffi::CString::new(name).unwrap();
    // SAFETY: a NUL-terminated name.
    match unsafe { libc::if_nametoindex(c.as_ptr()) } {
        0 => Err(io::Error::last_os_error()),
        i => Ok(i),
    }
}

/// An AF_XDP socket on `ifindex`, queue 0, with the frames of `umem`.
///
/// # Safety
/// As [`bind_socket`]: an owned area must outlive the sockets using it.
unsafe fn xsk(ifindex: u32, umem: Umem) -> io::Result<Xsk> {
    // SAFETY: the caller's promise.
    let (fd, Rings { rx, tx, fill, comp }) = unsafe { bind_socket(ifindex, umem, RING) }?;
    Ok(Xsk {
        fd,
        rx,
        tx,
        fill,
        comp,
    })
}

#[derive(Default, Debug)]
struct FwdStats {
    /// CPU time of the forwarding thread from ready to stop.
    cpu_ns: u64,
    a_to_b: u64,
    b_to_a: u64,
    tx_full_drops: u64,
    kicks: u64,
    rx_dropped: u64,
    rx_fill_ring_empty: u64,
}

/// Moves what `from` received onto `to`'s transmit ring, and kicks `to`'s transmission.
fn forward(from: &mut Xsk, to: &mut Xsk, free: &mut Vec<u64>, st: &mut FwdStats) -> u32 {
    let n = from.rx.ready().min(BATCH);
    if n == 0 {
        return 0;
    }
    let room = to.tx.free().min(n);
    for i in 0..room {
        to.tx.write(i, from.rx.read(i));
    }
    for i in room..n {
        free.push(from.rx.read(i).addr);
        st.tx_full_drops += 1;
    }
    from.rx.release(n);
    if room > 0 {
        to.tx.submit(room);
        kick(to, st);
    }
    room
}

/// In copy mode the kernel transmits in `sendto`, at most 32 frames a call.
fn kick(x: &Xsk, st: &mut FwdStats) {
    for _ in 0..(BATCH / 32 + 2) {
        st.kicks += 1;
        // SAFETY: a zero-length send on our socket: only the transmit kick.
        let r = unsafe {
            libc::sendto(
                x.fd.as_raw_fd(),
                std::ptr::null(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null(),
                0,
            )
        };
        if r >= 0 {
            break;
        }
        match io::Error::last_os_error().raw_os_error() {
            Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) => continue,
            _ => break,
        }
    }
}

fn reap(x: &mut Xsk, free: &mut Vec<u64>) {
    let n = x.comp.ready();
    for i in 0..n {
        free.push(x.comp.read(i));
    }
    x.comp.release(n);
}

fn refill(x: &mut Xsk, free: &mut Vec<u64>, cap: usize) {
    let n = (x.fill.free() as usize).min(free.len()).min(cap) as u32;
    for i in 0..n {
        x.fill.write(i, free.pop().unwrap());
    }
    if n > 0 {
        x.fill.submit(n);
    }
}

fn xdp_stats(x: &Xsk) -> libc::xdp_statistics {
    // SAFETY: zeroed plain-data struct, filled by getsockopt.
    let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    unsafe {
        libc::getsockopt(
            x.fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            (&mut s as *mut libc::xdp_statistics).cast(),
            &mut len,
        )
    };
    s
}

/// The forwarder: sets up in namespace `ns`, reports readiness (or the error) on `ready`,
/// and forwards until `stop`.
/// How the forwarder attaches and runs.
#[derive(Clone, Copy)]
struct XdpOpts {
    /// XDP in the generic (skb) path instead of the driver's.
    generic: bool,
    /// Ask for zero-copy AF_XDP sockets.
    zerocopy: bool,
    /// SCHED_FIFO priority of the forwarding thread (0: normal scheduling).
    rt: u8,
}

fn xdp_forwarder(
    ns: &str,
    opts: XdpOpts,
    stop: &AtomicBool,
    ready: &mpsc::Sender<Result<(), String>>,
) -> io::Result<FwdStats> {
    enter(ns)?;
    let (ia, ib) = (if_index("ra")?, if_index("rb")?);
    // Declared before the sockets: unmapped after they are closed.
    let area = UmemMap::new(FRAMES * FRAME)?;
    // SAFETY: `area` outlives both sockets (declared before them).
    let mut a = unsafe { xsk(ia, area.umem(opts.zerocopy)) }?;
    // SAFETY: shares `a`'s frames, as above.
    let mut b = unsafe { xsk(ib, Umem::Shared(a.fd.as_raw_fd())) }?;
    let mut free: Vec<u64> = (0..FRAMES as u64).map(|i| i * FRAME as u64).collect();
    refill(&mut a, &mut free, RING as usize);
    refill(&mut b, &mut free, RING as usize);
    // One program and map per device: each device has one receive queue, queue 0.
    let mode = if opts.generic {
        AttachMode::Generic
    } else {
        AttachMode::Native
    };
    let _la = attach_redirect(ia, a.fd.as_raw_fd(), mode, false)?;
    let _lb = attach_redirect(ib, b.fd.as_raw_fd(), mode, false)?;
    if opts.rt > 0 {
        let p = libc::sched_param {
            sched_priority: opts.rt as libc::c_int,
        };
        // SAFETY: plain syscall with a valid sched_param.
        unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) };
    }
    let _ = ready.send(Ok(()));
    let mut st = FwdStats::default();
    let cpu0 = thread_cpu_ns();
    while !stop.load(Ordering::Relaxed) {
        let n1 = forward(&mut a, &mut b, &mut free, &mut st);
        let n2 = forward(&mut b, &mut a, &mut free, &mut st);
        st.a_to_b += n1 as u64;
        st.b_to_a += n2 as u64;
        reap(&mut a, &mut free);
        reap(&mut b, &mut free);
        let half = free.len() / 2 + 1;
        refill(&mut a, &mut free, half);
        refill(&mut b, &mut free, usize::MAX);
        if n1 + n2 == 0 && a.rx.ready() == 0 && b.rx.ready() == 0 {
            let mut fds = [
                libc::pollfd {
                    fd: a.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: b.fd.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: two valid pollfds.
            unsafe { libc::poll(fds.as_mut_ptr(), 2, 50) };
        }
    }
    st.cpu_ns = thread_cpu_ns() - cpu0;
    for x in [&a, &b] {
        let s = xdp_stats(x);
        st.rx_dropped += s.rx_dropped;
        st.rx_fill_ring_empty += s.rx_fill_ring_empty_descs;
    }
    Ok(st)
}

// ---------------------------------------------------------------------------------------
// The three forwarders
// ---------------------------------------------------------------------------------------

fn thread_cpu_ns() -> u64 {
    // SAFETY: a zeroed timespec filled by clock_gettime.
    let mut t: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// User + system CPU time of process `pid`, all threads (clock ticks of 10 ms).
fn process_cpu_ns(pid: u32) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let rest = s.rsplit(')').next().unwrap_or("");
    let f: Vec<u64> = rest
        .split_whitespace()
        .map(|x| x.parse().unwrap_or(0))
        .collect();
    // Fields 14 and 15 of stat; `rest` starts at field 3.
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    f.get(11)
        .zip(f.get(12))
        .map_or(0, |(u, s)| (u + s) * 1_000_000_000 / hz)
}

fn with_kernel(lab: &Lab, seconds: f64) -> io::Result<(f64, u64)> {
    let r = &lab.r;
    in_ns(r, &["ip", "link", "add", "br0", "type", "bridge"])?;
    in_ns(r, &["ip", "link", "set", "ra", "master", "br0"])?;
    in_ns(r, &["ip", "link", "set", "rb", "master", "br0"])?;
    in_ns(r, &["ip", "link", "set", "br0", "up"])?;
    let g = transfer(lab, seconds);
    in_ns(r, &["ip", "link", "del", "br0"])?;
    g
}

fn with_xdp(lab: &Lab, seconds: f64, opts: XdpOpts) -> io::Result<((f64, u64), FwdStats)> {
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (ns, st) = (lab.r.clone(), stop.clone());
    let h = std::thread::Builder::new()
        .name("axdp-fwd".into())
        .spawn(move || {
            let r = xdp_forwarder(&ns, opts, &st, &tx);
            if let Err(e) = &r {
                let _ = tx.send(Err(e.to_string()));
            }
            r
        })?;
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => {
            let _ = h.join();
            return Err(io::Error::other(e));
        }
        Err(_) => return Err(io::Error::other("the AF_XDP forwarder did not start")),
    }
    let g = transfer(lab, seconds);
    stop.store(true, Ordering::Relaxed);
    let st = h.join().expect("forwarder thread")?;
    Ok((g?, st))
}

/// `f`, tried again (up to three times, 0.5 s apart) while the device's queue is still
/// bound to the socket of the forwarder or box that has just left it: the kernel frees
/// the XSKMAP that held that socket a moment later.
fn retry_busy<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    for _ in 0..2 {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) || e.to_string().contains("busy") => {
                std::thread::sleep(Duration::from_millis(500))
            }
            r => return r,
        }
    }
    f()
}

struct BoxProcess(Child);

impl Drop for BoxProcess {
    fn drop(&mut self) {
        let _ = nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(self.0.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        );
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_secs(5) {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Goodput, bytes, and the box's CPU time during the transfer.
fn with_box(
    lab: &Lab,
    seconds: f64,
    exe: &std::path::Path,
    io_mode: &str,
) -> io::Result<((f64, u64), u64)> {
    let dir = std::env::temp_dir().join(format!("axdp{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cfg = dir.join("box.toml");
    let ready = dir.join("ready");
    let _ = std::fs::remove_file(&ready);
    std::fs::write(
        &cfg,
        format!(
            "seed = 1\n[interfaces]\na = \"ra\"\nb = \"rb\"\n[privileges]\nuser = \"root\"\n\
             [process]\nio = \"{io_mode}\"\nrealtime_priority = 20\nhorizon = \"50us\"\n"
        ),
    )?;
    // A queue the `xdp` forwarder has just left may stay bound for a moment (see
    // `retry_busy`), so the box gets three tries.
    let mut tries = 0;
    let b = loop {
        tries += 1;
        let child = Command::new("ip")
            .args(["netns", "exec", &lab.r])
            .arg(exe)
            .arg("--config")
            .arg(&cfg)
            .arg("--ready-file")
            .arg(&ready)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()?;
        let mut b = BoxProcess(child);
        let t0 = Instant::now();
        let exited = loop {
            if !std::fs::read_to_string(&ready).map_or(true, |s| s.trim().is_empty()) {
                break None;
            }
            if let Some(status) = b.0.try_wait()? {
                break Some(status);
            }
            if t0.elapsed() > Duration::from_secs(10) {
                return Err(io::Error::other("the box did not start"));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        match exited {
            None => break b,
            Some(status) if tries >= 3 => {
                return Err(io::Error::other(format!("the box exited: {status}")))
            }
            Some(_) => std::thread::sleep(Duration::from_millis(500)),
        }
    };
    let cpu0 = process_cpu_ns(b.0.id());
    let g = transfer(lab, seconds);
    let cpu = process_cpu_ns(b.0.id()) - cpu0;
    drop(b);
    let _ = std::fs::remove_dir_all(&dir);
    Ok((g?, cpu))
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}

fn main() {
    if nix::unistd::geteuid().as_raw() != 0 {
        eprintln!("afxdp_forward: needs root (namespaces, bpf(2), AF_XDP)");
        std::process::exit(2);
    }
    let mut args = std::env::args().skip(1);
    let (mut runs, mut seconds) = (3usize, 5.0f64);
    let mut opts = XdpOpts {
        generic: false,
        zerocopy: false,
        rt: 20,
    };
    let mut modes = vec!["kernel".to_string(), "xdp".into(), "mmap".into()];
    let mut exe = std::env::current_exe()
        .ok()
        .and_then(|p| Some(p.parent()?.parent()?.join("asymlink-box")))
        .unwrap_or_default();
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("a value after the option");
        match a.as_str() {
            "--runs" => runs = val().parse().expect("--runs N"),
            "--seconds" => seconds = val().parse().expect("--seconds S"),
            "--modes" => modes = val().split(',').map(str::to_string).collect(),
            "--xdp-mode" => opts.generic = val() == "generic",
            "--zerocopy" => opts.zerocopy = true,
            "--rt" => opts.rt = val().parse().expect("--rt PRIORITY (0: normal scheduling)"),
            "--box" => exe = val().into(),
            _ => {
                eprintln!(
                    "usage: afxdp_forward [--runs N] [--seconds S] [--modes kernel,xdp,mmap,socket,box-xdp] \
                     [--xdp-mode native|generic] [--zerocopy] [--rt PRIORITY] [--box PATH]"
                );
                std::process::exit(2);
            }
        }
    }
    let lab = match lab() {
        Ok(l) => l,
        Err(e) => {
            eprintln!("afxdp_forward: lab: {e}");
            std::process::exit(1);
        }
    };
    println!(
        "# lab {} / {} / {}; {seconds} s per transfer after 0.5 s; XDP {} mode, AF_XDP {}",
        lab.c,
        lab.r,
        lab.s,
        if opts.generic {
            "generic (skb)"
        } else {
            "native (driver)"
        },
        if opts.zerocopy {
            "zero-copy"
        } else {
            "copy mode"
        }
    );
    let mut failed = false;
    for run_no in 1..=runs {
        println!("run {run_no}: load average {}", loadavg());
        // Each run starts with a different forwarder, so none always goes first.
        let mut order = modes.clone();
        order.rotate_left((run_no - 1) % modes.len().max(1));
        let mut results = Vec::new();
        for m in &order {
            // Goodput, bytes, and the forwarder's CPU time where it has its own thread.
            let r = match m.as_str() {
                "kernel" => with_kernel(&lab, seconds).map(|g| (g, None, String::new())),
                "xdp" => retry_busy(|| with_xdp(&lab, seconds, opts))
                    .map(|(g, st)| (g, Some(st.cpu_ns), format!("{st:?}"))),
                "mmap" | "socket" => {
                    with_box(&lab, seconds, &exe, m).map(|(g, cpu)| (g, Some(cpu), String::new()))
                }
                // The box with `io = "xdp"`.
                "box-xdp" => with_box(&lab, seconds, &exe, "xdp")
                    .map(|(g, cpu)| (g, Some(cpu), String::new())),
                other => Err(io::Error::other(format!("unknown mode {other}"))),
            };
            match r {
                Ok(v) => results.push((m.clone(), v)),
                Err(e) => {
                    failed = true;
                    println!("  {m:<6} failed: {e}");
                }
            }
        }
        let kernel = results
            .iter()
            .find(|(m, _)| m == "kernel")
            .map(|(_, ((g, _), _, _))| *g);
        for (m, ((g, bytes), cpu, extra)) in &results {
            let ratio = kernel.map_or(String::new(), |k| format!("  {:.2} of kernel", g / k));
            // CPU per full-sized TCP segment carried (its ACKs included).
            let per_seg = cpu.map_or(String::new(), |c| {
                format!(
                    "  CPU {:.2} µs per segment",
                    c as f64 / 1e3 / (*bytes as f64 / 1448.0)
                )
            });
            println!("  {m:<6} {g:6.2} Gbit/s{ratio}{per_seg}  {extra}");
        }
        println!("  load average after: {}", loadavg());
    }
    drop(lab);
    std::process::exit(i32::from(failed));
}
