//! Linux system interfaces: AF_PACKET sockets, TUN devices, `ppoll`, `signalfd`, privilege
//! dropping. All `unsafe` code of the crate is in this module; each block states why it
//! is sound. Control-plane calls go through `nix`'s safe wrappers; raw `libc` remains for
//! what `nix` does not wrap without cost: the AF_PACKET socket and its options, the batched
//! `recvmmsg`/`sendmmsg` datapath into preallocated slots, the TUN ioctl, capability sets
//! and `SCHED_FIFO`.
//!
//! Pitfalls handled here (see `docs/live.md`):
//! * the packet socket is created with protocol 0 and bound with `ETH_P_ALL` to the
//!   interface, so no frame of another interface slips in between `socket` and `bind`;
//! * `PACKET_IGNORE_OUTGOING`: the box does not read back what it sends;
//! * `PACKET_QDISC_BYPASS`: frames go straight to the driver (the box is the qdisc);
//! * promiscuous membership: the frames are addressed to the hosts behind the box;
//! * `SO_TIMESTAMPNS`: kernel receive timestamps for the added-latency measurement;
//! * `MSG_TRUNC`: a frame larger than the receive slot is detected and dropped, counted,
//!   never forwarded cut short.
#![allow(unsafe_code)]

use crate::packet::LinkType;
use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sched::{sched_setaffinity, CpuSet};
use nix::sys::signal::{SigSet, Signal as NixSignal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::unistd::{
    geteuid, setgroups, setresgid, setresuid, setuid, sysconf, Gid, Pid, SysconfVar, Uid, User,
};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_int = 1;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const SO_TIMESTAMPNS: libc::c_int = 35;
const SCM_TIMESTAMPNS: libc::c_int = SO_TIMESTAMPNS;

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt_int(
    fd: RawFd,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: `v` lives for the call and its size is passed.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &v as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// The index of interface `name`.
pub fn if_index(name: &str) -> io::Result<u32> {
    nix::net::if_::if_nametoindex(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("no interface '{name}' in this network namespace"),
        )
    })
}

/// A device the box reads and writes frames on.
pub enum Device {
    /// AF_PACKET raw socket bound to an interface.
    Packet(OwnedFd),
    /// TUN character device.
    Tun(OwnedFd),
}

impl Device {
    /// Open an AF_PACKET socket on `ifname` (must exist and be up).
    pub fn packet(ifname: &str) -> io::Result<Device> {
        let ifindex = if_index(ifname)?;
        // SAFETY: plain syscall; the fd is owned right after.
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        })?;
        // SAFETY: `fd` was just returned by socket() and is owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        // SAFETY: zeroed sockaddr_ll is a valid value; fields set below.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = (libc::ETH_P_ALL as u16).to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: `sll` is a valid sockaddr_ll and its size is passed.
        cvt(unsafe {
            libc::bind(
                raw,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        // SAFETY: zeroed packet_mreq is valid; fields set below.
        let mut mr: libc::packet_mreq = unsafe { std::mem::zeroed() };
        mr.mr_ifindex = ifindex as i32;
        mr.mr_type = PACKET_MR_PROMISC as u16;
        // SAFETY: `mr` is a valid packet_mreq and its size is passed.
        cvt(unsafe {
            libc::setsockopt(
                raw,
                libc::SOL_PACKET,
                PACKET_ADD_MEMBERSHIP,
                &mr as *const libc::packet_mreq as *const libc::c_void,
                std::mem::size_of::<libc::packet_mreq>() as libc::socklen_t,
            )
        })?;
        setsockopt_int(raw, libc::SOL_PACKET, PACKET_IGNORE_OUTGOING, 1)?;
        setsockopt_int(raw, libc::SOL_PACKET, PACKET_QDISC_BYPASS, 1)?;
        setsockopt_int(raw, libc::SOL_SOCKET, SO_TIMESTAMPNS, 1)?;
        // Best effort: bigger buffers absorb bursts while the loop sleeps.
        // Best effort: buffers that absorb a burst while the loop sleeps, but not so large
        // that an overloaded box hides a long queue in the socket (2 MiB ≈ 1400 frames).
        let _ = setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 2 << 20);
        let _ = setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 2 << 20);
        Ok(Device::Packet(fd))
    }

    /// Open (creating it if absent) the TUN device `name`, without packet information
    /// header, and bring it up.
    pub fn tun(name: &str) -> io::Result<Device> {
        let path = c"/dev/net/tun";
        // SAFETY: valid path; the fd is owned right after.
        let fd = cvt(unsafe {
            libc::open(
                path.as_ptr(),
                libc::O_RDWR | libc::O_NONBLOCK | libc::O_CLOEXEC,
            )
        })?;
        // SAFETY: fresh fd, owned by nobody else.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let mut ifr = ifreq_named(name)?;
        ifr.ifr_ifru.ifru_flags = (libc::IFF_TUN | libc::IFF_NO_PI) as libc::c_short;
        // SAFETY: TUNSETIFF takes a pointer to an ifreq, which lives for the call.
        cvt(unsafe { libc::ioctl(fd.as_raw_fd(), libc::TUNSETIFF as _, &mut ifr) })?;
        set_up(name)?;
        Ok(Device::Tun(fd))
    }

    /// The link type of frames on this device.
    pub fn link_type(&self) -> LinkType {
        match self {
            Device::Packet(_) => LinkType::Ethernet,
            Device::Tun(_) => LinkType::RawIp,
        }
    }

    /// Frames the kernel dropped because the box did not read them in time (AF_PACKET
    /// `PACKET_STATISTICS`; the counter resets on each read, so callers accumulate).
    pub fn take_rx_drops(&self) -> u64 {
        match self {
            Device::Packet(f) => {
                let mut st = [0u32; 2];
                let mut len = std::mem::size_of_val(&st) as libc::socklen_t;
                // SAFETY: PACKET_STATISTICS fills a tpacket_stats (two u32) of `len` bytes.
                let r = unsafe {
                    libc::getsockopt(
                        f.as_raw_fd(),
                        libc::SOL_PACKET,
                        PACKET_STATISTICS,
                        st.as_mut_ptr() as *mut libc::c_void,
                        &mut len,
                    )
                };
                if r == 0 {
                    st[1] as u64
                } else {
                    0
                }
            }
            Device::Tun(_) => 0,
        }
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Device::Packet(f) | Device::Tun(f) => f.as_fd(),
        }
    }
}

fn ifreq_named(name: &str) -> io::Result<libc::ifreq> {
    if name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    // SAFETY: an all-zero ifreq is a valid value.
    let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in ifr.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(ifr)
}

/// Set IFF_UP on interface `name`.
pub fn set_up(name: &str) -> io::Result<()> {
    // SAFETY: plain syscall; the fd is owned right after.
    let s = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh fd.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let mut ifr = ifreq_named(name)?;
    // SAFETY: SIOCGIFFLAGS/SIOCSIFFLAGS read and write the flags member of `ifr`.
    unsafe {
        cvt(libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCGIFFLAGS as _,
            &mut ifr,
        ))?;
        ifr.ifr_ifru.ifru_flags |= libc::IFF_UP as libc::c_short;
        cvt(libc::ioctl(
            s.as_raw_fd(),
            libc::SIOCSIFFLAGS as _,
            &mut ifr,
        ))?;
    }
    Ok(())
}

/// Size of a receive slot: the largest IP packet plus an Ethernet header with two tags.
pub const SLOT: usize = 65535 + 22;

/// Batched receive/send over a device.
pub struct Batch {
    slots: Vec<u8>,
    n: usize,
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<[u64; 8]>,
}

/// One received frame.
pub struct Rx<'a> {
    /// The bytes (valid until the next receive).
    pub frame: &'a [u8],
    /// Kernel receive timestamp, UNIX ns (0 if none).
    pub ts: u64,
    /// The frame was longer than a slot and is cut short (must not be forwarded).
    pub truncated: bool,
}

impl Batch {
    /// Buffers for `n` frames per call.
    pub fn new(n: usize) -> Batch {
        Batch {
            slots: vec![0; n * SLOT],
            n,
            // SAFETY: all-zero mmsghdr/iovec are valid values (null pointers, zero lengths).
            msgs: (0..n).map(|_| unsafe { std::mem::zeroed() }).collect(),
            iovs: (0..n).map(|_| unsafe { std::mem::zeroed() }).collect(),
            ctrl: vec![[0u64; 8]; n],
        }
    }

    /// Read up to `max` frames without blocking and hand each to `f`. Returns how many
    /// were read (0 when nothing is waiting).
    pub fn recv(
        &mut self,
        dev: &Device,
        max: usize,
        f: &mut dyn FnMut(Rx<'_>),
    ) -> io::Result<usize> {
        let max = max.min(self.n);
        match dev {
            Device::Tun(fd) => {
                let mut got = 0;
                while got < max {
                    let buf = &mut self.slots[..SLOT];
                    // SAFETY: `buf` is valid for SLOT bytes.
                    let r = unsafe {
                        libc::read(fd.as_raw_fd(), buf.as_mut_ptr() as *mut libc::c_void, SLOT)
                    };
                    if r < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::Interrupted
                        {
                            break;
                        }
                        return Err(e);
                    }
                    got += 1;
                    f(Rx {
                        frame: &self.slots[..r as usize],
                        ts: 0,
                        truncated: false,
                    });
                }
                Ok(got)
            }
            Device::Packet(fd) => {
                let base = self.slots.as_mut_ptr();
                for i in 0..max {
                    // SAFETY: slot i lies inside `slots` (n * SLOT bytes).
                    self.iovs[i].iov_base = unsafe { base.add(i * SLOT) } as *mut libc::c_void;
                    self.iovs[i].iov_len = SLOT;
                    let h = &mut self.msgs[i].msg_hdr;
                    h.msg_name = std::ptr::null_mut();
                    h.msg_namelen = 0;
                    h.msg_iov = &mut self.iovs[i];
                    h.msg_iovlen = 1;
                    h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
                    h.msg_controllen = std::mem::size_of::<[u64; 8]>();
                    h.msg_flags = 0;
                    self.msgs[i].msg_len = 0;
                }
                // SAFETY: every header points into buffers owned by `self`, which outlive the
                // call; `max` headers are initialised.
                let r = unsafe {
                    libc::recvmmsg(
                        fd.as_raw_fd(),
                        self.msgs.as_mut_ptr(),
                        max as libc::c_uint,
                        libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                        std::ptr::null_mut(),
                    )
                };
                if r < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted
                    {
                        return Ok(0);
                    }
                    return Err(e);
                }
                let r = r as usize;
                for i in 0..r {
                    let len = self.msgs[i].msg_len as usize;
                    let truncated =
                        len > SLOT || self.msgs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
                    let ts = cmsg_timestamp(&self.msgs[i].msg_hdr);
                    let start = i * SLOT;
                    let frame = &self.slots[start..start + len.min(SLOT)];
                    f(Rx {
                        frame,
                        ts,
                        truncated,
                    });
                }
                Ok(r)
            }
        }
    }

    /// Send `frames` in order. Returns how many were handed to the device; `failed`
    /// receives the indices (within those) that the device refused for good (wrong size,
    /// no buffers, device down). Stops early, without error, when the device would block.
    pub fn send(
        &mut self,
        dev: &Device,
        frames: &[&[u8]],
        failed: &mut Vec<usize>,
    ) -> io::Result<usize> {
        failed.clear();
        match dev {
            Device::Tun(fd) => {
                for (i, fr) in frames.iter().enumerate() {
                    // SAFETY: `fr` is valid for its length.
                    let r = unsafe {
                        libc::write(fd.as_raw_fd(), fr.as_ptr() as *const libc::c_void, fr.len())
                    };
                    if r < 0 {
                        let e = io::Error::last_os_error();
                        if e.kind() == io::ErrorKind::WouldBlock {
                            return Ok(i);
                        }
                        failed.push(i);
                    }
                }
                Ok(frames.len())
            }
            Device::Packet(fd) => {
                let mut done = 0;
                while done < frames.len() {
                    let k = (frames.len() - done).min(self.n);
                    for j in 0..k {
                        let fr = frames[done + j];
                        self.iovs[j].iov_base = fr.as_ptr() as *mut libc::c_void;
                        self.iovs[j].iov_len = fr.len();
                        let h = &mut self.msgs[j].msg_hdr;
                        h.msg_name = std::ptr::null_mut();
                        h.msg_namelen = 0;
                        h.msg_iov = &mut self.iovs[j];
                        h.msg_iovlen = 1;
                        h.msg_control = std::ptr::null_mut();
                        h.msg_controllen = 0;
                        h.msg_flags = 0;
                    }
                    // SAFETY: the headers point at `frames`, borrowed for the call.
                    let r = unsafe {
                        libc::sendmmsg(
                            fd.as_raw_fd(),
                            self.msgs.as_mut_ptr(),
                            k as libc::c_uint,
                            libc::MSG_DONTWAIT,
                        )
                    };
                    if r > 0 {
                        done += r as usize;
                        continue;
                    }
                    let e = io::Error::last_os_error();
                    match e.kind() {
                        io::ErrorKind::WouldBlock => return Ok(done),
                        io::ErrorKind::Interrupted => continue,
                        _ => {
                            // The first frame of the batch was refused: count it and go on.
                            failed.push(done);
                            done += 1;
                        }
                    }
                }
                Ok(done)
            }
        }
    }
}

fn cmsg_timestamp(h: &libc::msghdr) -> u64 {
    // SAFETY: CMSG_* walk the control buffer that the kernel filled for `h`, bounded by
    // msg_controllen.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                return ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64;
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    0
}

/// Signals the box handles.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Signal {
    /// SIGHUP: reload.
    Reload,
    /// SIGINT / SIGTERM: exit.
    Exit,
}

/// Block SIGHUP, SIGINT and SIGTERM in this thread (and threads spawned after) and return
/// a signalfd that reports them.
pub fn signal_fd() -> io::Result<SignalFd> {
    let mut set = SigSet::empty();
    for s in [NixSignal::SIGHUP, NixSignal::SIGINT, NixSignal::SIGTERM] {
        set.add(s);
    }
    set.thread_block()?;
    Ok(SignalFd::with_flags(
        &set,
        SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC,
    )?)
}

/// Read pending signals from a signalfd.
pub fn read_signals(fd: &SignalFd, out: &mut Vec<Signal>) {
    while let Ok(Some(si)) = fd.read_signal() {
        out.push(if si.ssi_signo == NixSignal::SIGHUP as u32 {
            Signal::Reload
        } else {
            Signal::Exit
        });
    }
}

/// Readiness after [`poll`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Ready {
    /// Readable, per side.
    pub readable: [bool; 2],
    /// Writable, per side.
    pub writable: [bool; 2],
    /// A signal is pending.
    pub signal: bool,
}

/// Wait until a device is readable (or writable, for sides in `want_write`), a signal
/// arrives, or `timeout` passes (`None`: forever). Nanosecond resolution (`ppoll`).
pub fn poll(
    devs: &[Device; 2],
    sig: &SignalFd,
    want_write: [bool; 2],
    timeout: Option<Duration>,
) -> io::Result<Ready> {
    let events = |w: bool| match w {
        true => PollFlags::POLLIN | PollFlags::POLLOUT,
        false => PollFlags::POLLIN,
    };
    let mut fds = [
        PollFd::new(devs[0].as_fd(), events(want_write[0])),
        PollFd::new(devs[1].as_fd(), events(want_write[1])),
        PollFd::new(sig.as_fd(), PollFlags::POLLIN),
    ];
    let mut ready = Ready::default();
    // A null sigmask keeps the current mask.
    match ppoll(&mut fds, timeout.map(TimeSpec::from_duration), None) {
        Ok(_) => {}
        Err(Errno::EINTR) => return Ok(ready),
        Err(e) => return Err(e.into()),
    }
    for (i, fd) in fds.iter().take(2).enumerate() {
        let re = fd.revents().unwrap_or(PollFlags::empty());
        ready.readable[i] = re.intersects(PollFlags::POLLIN | PollFlags::POLLERR);
        ready.writable[i] = re.contains(PollFlags::POLLOUT);
        if re.intersects(PollFlags::POLLHUP | PollFlags::POLLNVAL) {
            return Err(io::Error::other(format!(
                "device {} went away",
                if i == 0 { "a" } else { "b" }
            )));
        }
    }
    ready.signal = fds[2]
        .revents()
        .is_some_and(|r| r.contains(PollFlags::POLLIN));
    Ok(ready)
}

/// Resident memory of this process in bytes (`/proc/self/statm`), 0 if unknown.
pub fn rss_bytes() -> u64 {
    let Ok(s) = std::fs::read_to_string("/proc/self/statm") else {
        return 0;
    };
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let page = sysconf(SysconfVar::PAGE_SIZE).ok().flatten().unwrap_or(0);
    pages * page.max(0) as u64
}

/// Ask the kernel for precise timer wake-ups (the default slack is 50 µs).
pub fn set_timer_slack_ns(ns: u64) {
    let _ = nix::sys::prctl::set_timerslack(ns as libc::c_ulong);
}

/// CLOCK_REALTIME in nanoseconds (for the latency measurement against kernel timestamps).
#[inline]
pub fn realtime_ns() -> u64 {
    let ts =
        nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME).unwrap_or(TimeSpec::new(0, 0));
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// Look up a user: (uid, gid).
pub fn lookup_user(name: &str) -> io::Result<(u32, u32)> {
    match User::from_name(name) {
        Ok(Some(u)) => Ok((u.uid.as_raw(), u.gid.as_raw())),
        _ => Err(io::Error::new(
            io::ErrorKind::NotFound,
            format!("no user '{name}'"),
        )),
    }
}

/// The effective user id.
pub fn euid() -> u32 {
    geteuid().as_raw()
}

/// Drop privileges for good: switch to `user` if running as root (unless `user` is
/// "root"), clear every capability (effective, permitted, inheritable, ambient, bounding)
/// and set no-new-privs. Returns a description of what was done.
pub fn drop_privileges(user: &str) -> io::Result<String> {
    let mut what = Vec::new();
    // Bounding set first: needs CAP_SETPCAP, which we still have if we had anything.
    for cap in 0..64 {
        // SAFETY: plain prctl; EINVAL for capabilities the kernel does not know.
        unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) };
    }
    if euid() == 0 && user != "root" {
        let (uid, gid) = lookup_user(user)?;
        // In the order that keeps the right to call the next; the C library applies each
        // to every thread of the process.
        let (u, g) = (Uid::from_raw(uid), Gid::from_raw(gid));
        setgroups(&[])?;
        setresgid(g, g, g)?;
        setresuid(u, u, u)?;
        if setuid(Uid::from_raw(0)).is_ok() {
            return Err(io::Error::other(
                "could regain root after dropping privileges",
            ));
        }
        what.push(format!("user {user} (uid {uid}, gid {gid})"));
    }
    // SAFETY: plain prctl.
    unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL,
            0,
            0,
            0,
        );
    }
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: i32,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    let hdr = CapHeader {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    // SAFETY: capset with a v3 header and two data words, both valid for the call.
    let r = unsafe { libc::syscall(libc::SYS_capset, &hdr as *const CapHeader, data.as_ptr()) };
    if r != 0 {
        return Err(io::Error::last_os_error());
    }
    what.push("no capabilities".into());
    nix::sys::prctl::set_no_new_privs()?;
    Ok(what.join(", "))
}

/// Run the calling thread under `SCHED_FIFO` at `priority` (1..=99): it then runs as soon
/// as a frame wakes it instead of waiting behind ordinary processes. The kernel's
/// real-time throttling (`sched_rt_runtime_us`) still reserves CPU time for the rest.
pub fn set_realtime(priority: u8) -> io::Result<()> {
    let p = libc::sched_param {
        sched_priority: priority as libc::c_int,
    };
    // SAFETY: plain syscall with a valid sched_param.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &p) }).map(|_| ())
}

/// Pin the calling thread to CPU `cpu`.
pub fn set_affinity(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(sched_setaffinity(Pid::from_raw(0), &set)?)
}
