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
//! * `PACKET_AUXDATA`: the kernel strips the VLAN tag of every tagged frame before a
//!   packet socket sees it and reports it beside the frame; the box puts it back, so a
//!   tagged frame leaves tagged;
//! * `MSG_TRUNC`: a frame larger than the receive slot is detected and dropped, counted,
//!   never forwarded cut short.
//!
//! With `[process] io = "mmap"` the same socket carries two memory-mapped rings instead
//! ([`Rings`]): a `TPACKET_V2` receive ring (frames are read where the kernel wrote them,
//! no system call while frames are waiting) and a `TPACKET_V2` transmit ring (frames are
//! written into it and one `sendto` sends them all). See [`Rings`] for the details.
#![allow(unsafe_code)]

use crate::packet::LinkType;
use nix::errno::Errno;
use nix::poll::{ppoll, PollFd, PollFlags};
use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
use nix::sys::signal::{SigSet, Signal as NixSignal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::unistd::{
    geteuid, setgroups, setresgid, setresuid, setuid, sysconf, Gid, Pid, SysconfVar, Uid, User,
};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
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
    /// AF_PACKET socket with memory-mapped receive and transmit rings.
    Mmap(Box<Rings>),
    /// AF_XDP socket on queue 0 with an XDP program redirecting to it.
    Xdp(Box<crate::xdp::Xsk>),
}

impl Device {
    /// Open an AF_PACKET socket on `ifname` (must exist and be up).
    pub fn packet(ifname: &str) -> io::Result<Device> {
        Ok(Device::Packet(packet_socket(ifname, None)?))
    }

    /// Open an AF_PACKET socket on `ifname` with memory-mapped rings ([`Rings`]).
    pub fn mmap(ifname: &str) -> io::Result<Device> {
        Ok(Device::Mmap(Box::new(Rings::open(ifname)?)))
    }

    /// Open an AF_XDP socket on `ifname` ([`crate::xdp::Xsk`]).
    pub fn xdp(ifname: &str) -> io::Result<Device> {
        Ok(Device::Xdp(Box::new(crate::xdp::Xsk::open(ifname)?)))
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
            Device::Packet(_) | Device::Mmap(_) | Device::Xdp(_) => LinkType::Ethernet,
            Device::Tun(_) => LinkType::RawIp,
        }
    }

    /// Frames the kernel dropped because the box did not read them in time (AF_PACKET
    /// `PACKET_STATISTICS`; the counter resets on each read, so callers accumulate).
    pub fn take_rx_drops(&self) -> u64 {
        let f = match self {
            Device::Packet(f) => f,
            Device::Mmap(r) => &r.fd,
            Device::Xdp(x) => return x.take_rx_drops(),
            Device::Tun(_) => return 0,
        };
        {
            {
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
        }
    }

    /// Retry frames a transmit ring could not hand to the driver yet (nothing to do for
    /// the other kinds).
    pub fn flush(&mut self) -> io::Result<()> {
        match self {
            Device::Mmap(r) => r.flush(),
            Device::Xdp(x) => x.flush(),
            _ => Ok(()),
        }
    }

    /// Whether a received frame waits, when that can be told without a system call
    /// (memory-mapped rings); `None` for the other kinds.
    #[inline]
    pub fn rx_pending(&self) -> Option<bool> {
        match self {
            Device::Mmap(r) => Some(r.rx_pending()),
            _ => None,
        }
    }

    /// Whether a received frame waits, told without a system call (rings, AF_XDP);
    /// false for the other kinds.
    #[inline]
    pub fn rx_waiting(&self) -> bool {
        match self {
            Device::Mmap(r) => r.rx_pending(),
            Device::Xdp(x) => x.rx_waiting(),
            _ => false,
        }
    }

    /// A device for a sender thread that sends what this one would (`[process]
    /// tx_thread`): the same socket through a duplicated descriptor; with rings, the
    /// twin takes the transmit ring and this device keeps the receive ring.
    pub fn tx_twin(&mut self) -> io::Result<Device> {
        match self {
            Device::Packet(fd) => Ok(Device::Packet(fd.try_clone()?)),
            Device::Tun(fd) => Ok(Device::Tun(fd.try_clone()?)),
            Device::Mmap(r) => Ok(Device::Mmap(Box::new(r.tx_twin()?))),
            Device::Xdp(_) => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "a sender thread is not available with io = \"xdp\"",
            )),
        }
    }

    /// Wait until the device can take a frame (or `timeout` passes).
    pub fn wait_writable(&self, timeout: Duration) -> io::Result<()> {
        let mut fds = [PollFd::new(self.as_fd(), PollFlags::POLLOUT)];
        match ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None) {
            Ok(_) | Err(Errno::EINTR) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Whether [`Device::flush`] has frames to retry.
    pub fn needs_flush(&self) -> bool {
        match self {
            Device::Mmap(r) => r.needs_kick(),
            Device::Xdp(x) => x.needs_kick(),
            _ => false,
        }
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        match self {
            Device::Packet(f) | Device::Tun(f) => f.as_fd(),
            Device::Mmap(r) => r.as_fd(),
            Device::Xdp(x) => x.as_fd(),
        }
    }
}

/// An AF_PACKET socket bound to `ifname`, promiscuous, ignoring its own output, bypassing
/// the qdisc, with receive timestamps. `setup` runs before `bind` (ring set-up must come
/// before the socket receives anything).
pub type Setup<'a> = &'a dyn Fn(RawFd) -> io::Result<()>;

fn packet_socket(ifname: &str, setup: Option<Setup<'_>>) -> io::Result<OwnedFd> {
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
    if let Some(setup) = setup {
        setup(raw)?;
    }
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
    setsockopt_int(raw, libc::SOL_PACKET, PACKET_AUXDATA, 1)?;
    // Best effort: buffers that absorb a burst while the loop sleeps, but not so large
    // that an overloaded box hides a long queue in the socket (2 MiB ≈ 1400 frames).
    let _ = setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_RCVBUFFORCE, 2 << 20);
    let _ = setsockopt_int(raw, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 2 << 20);
    Ok(fd)
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

const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_VNET_HDR: libc::c_int = 15;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_COPY: u32 = 1 << 1;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID: u32 = 1 << 6;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
/// The transmit states of a slot the kernel has not finished with (SEND_REQUEST, SENDING,
/// WRONG_FORMAT); the kernel may add timestamp flags to a free one.
const TP_STATUS_TX_BUSY: u32 = 0b111;
/// `struct tpacket2_hdr` (linux/if_packet.h).
#[repr(C)]
struct Tp2Hdr {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    sec: u32,
    nsec: u32,
    vlan_tci: u16,
    vlan_tpid: u16,
    _pad: [u8; 4],
}
/// Where a transmit frame's data starts in its slot: `TPACKET2_HDRLEN - sizeof(sockaddr_ll)`,
/// the header rounded up to 16 bytes.
const TX_DATA: usize = 32;
/// `struct virtio_net_hdr` (10 bytes), written before each transmitted frame.
const VNET_HDR: usize = 10;
/// Frames per ring block (blocks are the unit the kernel allocates).
const FRAMES_PER_BLOCK: usize = 32;

/// One ring inside the mapping: `n` slots of `frame` bytes from byte `off`, and the next
/// slot this side of the ring will look at.
struct Ring {
    off: usize,
    frame: usize,
    n: usize,
    head: usize,
}

/// An AF_PACKET socket with a memory-mapped receive ring and transmit ring
/// (`PACKET_RX_RING` / `PACKET_TX_RING`, `TPACKET_V2`), both in one mapping.
///
/// * **Receive**: the kernel writes each frame into the next free slot with a header
///   (length, kernel timestamp, VLAN tag) and flags the slot as the box's; the box reads
///   the frame there, copies it into a pooled buffer for the pipeline, and hands the slot
///   back. No system call while frames are waiting, no socket-queue bookkeeping per frame.
///   `TPACKET_V2` (one slot per frame, ready as soon as written) rather than `TPACKET_V3`
///   (blocks handed over when full or when a timer of at least 1 ms expires): V3 would hold
///   a lone frame back up to that timer, far above the box's latency budget.
/// * **Transmit**: the box writes frames into free slots, flags them, and one `sendto`
///   makes the kernel send every flagged frame in order (`PACKET_QDISC_BYPASS`: straight
///   to the driver). Each frame carries a `virtio_net_hdr` whose header length covers the
///   whole frame, which makes the kernel copy the frame into its own buffer instead of
///   pointing at the ring page: without it, a frame delivered to a local socket (a veth
///   peer's TCP receive queue) would still point into a slot the box reuses once the
///   kernel has handed it back.
/// * A frame the kernel stripped a VLAN tag from (`TP_STATUS_VLAN_VALID`, as it does for
///   every tagged frame it receives) gets its tag back before the pipeline sees it, so it
///   leaves tagged as it came.
/// * Frames longer than a slot (`tp_snaplen < tp_len`) are reported truncated (dropped,
///   counted, logged), never forwarded cut short. Slots hold the interface's MTU plus an
///   Ethernet header with two tags.
/// * `PACKET_LOSS` (skip a malformed transmit frame instead of stalling the ring) is a
///   safety net only: frames the device cannot take (longer than its MTU, shorter than an
///   Ethernet header, longer than a slot) are refused before they enter the ring and
///   counted as send failures, as the socket path counts them.
pub struct Rings {
    /// The mapping, shared with a transmit twin ([`Rings::tx_twin`]); declared before `fd`
    /// so that the last holder unmaps it before closing the socket.
    shared: Arc<Mapping>,
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    /// The transmit ring belongs to a twin (a sender thread): this value only receives.
    tx_moved: bool,
    rx: Ring,
    tx: Ring,
    mtu: usize,
    /// Frames flagged for sending that the kernel has not taken yet (it said "try again").
    kick: bool,
    /// A tagged copy of a frame whose VLAN tag the kernel stripped.
    scratch: Vec<u8>,
    /// Scratch for `send`.
    order: Vec<usize>,
}

// SAFETY: the mapping is reached through this value alone, or through it and its transmit
// twin, which touch disjoint parts of it (the receive ring here, the transmit ring there:
// `tx_moved`); moving either to another thread moves its only access to its part.
unsafe impl Send for Rings {}

/// A ring mapping, unmapped when its last holder goes.
struct Mapping {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: the pointer is only unmapped (in `drop`, once); the memory behind it is used by
// the [`Rings`] holding the mapping, under their own rules.
unsafe impl Send for Mapping {}
// SAFETY: as above; `Mapping` itself never reads or writes through the pointer.
unsafe impl Sync for Mapping {}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `ptr`/`len` are the mapping made in `Rings::open_with`, unmapped once,
        // here, when no `Rings` holds it any more.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// The MTU of interface `name`.
pub fn if_mtu(name: &str) -> io::Result<usize> {
    // SAFETY: plain syscall; the fd is owned right after.
    let s = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    // SAFETY: fresh fd.
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    let mut ifr = ifreq_named(name)?;
    // SAFETY: SIOCGIFMTU writes the mtu member of `ifr`, which lives for the call.
    unsafe {
        cvt(libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU as _, &mut ifr))?;
        Ok(ifr.ifr_ifru.ifru_mtu.max(0) as usize)
    }
}

impl Rings {
    /// Receive-ring slots (4 MiB of 2 KiB slots at MTU 1500, like the socket path's
    /// receive buffer).
    pub const RX_FRAMES: usize = 2048;
    /// Transmit-ring slots.
    pub const TX_FRAMES: usize = 512;

    /// Open the socket on `ifname` and map its rings.
    pub fn open(ifname: &str) -> io::Result<Rings> {
        Rings::open_with(ifname, &|_| Ok(()))
    }

    /// As [`Rings::open`], running `extra` on the socket before it is bound.
    pub fn open_with(ifname: &str, extra: Setup<'_>) -> io::Result<Rings> {
        let mtu = if_mtu(ifname)?;
        // Room for the ring header (80 bytes before the MAC header on receive, 42 before
        // the frame on transmit), two VLAN tags and the Ethernet header.
        let frame = (mtu + 14 + 8 + 128).next_power_of_two().max(2048);
        let block = frame * FRAMES_PER_BLOCK;
        let req = |n: usize| -> [libc::c_uint; 4] {
            [
                block as libc::c_uint,
                (n / FRAMES_PER_BLOCK) as libc::c_uint,
                frame as libc::c_uint,
                n as libc::c_uint,
            ]
        };
        let setup = |fd: RawFd| -> io::Result<()> {
            extra(fd)?;
            setsockopt_int(fd, libc::SOL_PACKET, PACKET_VERSION, TPACKET_V2)?;
            setsockopt_int(fd, libc::SOL_PACKET, PACKET_VNET_HDR, 1)?;
            setsockopt_int(fd, libc::SOL_PACKET, PACKET_LOSS, 1)?;
            for (opt, n) in [
                (PACKET_RX_RING, Self::RX_FRAMES),
                (PACKET_TX_RING, Self::TX_FRAMES),
            ] {
                let r = req(n);
                // SAFETY: a tpacket_req is four unsigned ints; `r` lives for the call.
                cvt(unsafe {
                    libc::setsockopt(
                        fd,
                        libc::SOL_PACKET,
                        opt,
                        r.as_ptr() as *const libc::c_void,
                        std::mem::size_of_val(&r) as libc::socklen_t,
                    )
                })?;
            }
            Ok(())
        };
        let fd = packet_socket(ifname, Some(&setup))?;
        // The transmit ring's frames are charged to the send buffer until the kernel is
        // done with them: room for all of them, so a full ring is the only limit.
        let _ = setsockopt_int(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_SNDBUFFORCE,
            (4 * frame * Self::TX_FRAMES) as libc::c_int,
        );
        let map_len = frame * (Self::RX_FRAMES + Self::TX_FRAMES);
        // SAFETY: maps the rings just configured on `fd` (receive ring first, then transmit,
        // as the kernel lays them out); checked against MAP_FAILED below.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_LOCKED,
                fd.as_raw_fd(),
                0,
            )
        };
        let map = if map == libc::MAP_FAILED {
            // Without the right to lock memory, an ordinary mapping.
            // SAFETY: as above.
            let m = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    map_len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd.as_raw_fd(),
                    0,
                )
            };
            if m == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            m
        } else {
            map
        };
        Ok(Rings {
            shared: Arc::new(Mapping {
                ptr: map as *mut u8,
                len: map_len,
            }),
            fd,
            map: map as *mut u8,
            map_len,
            tx_moved: false,
            rx: Ring {
                off: 0,
                frame,
                n: Self::RX_FRAMES,
                head: 0,
            },
            tx: Ring {
                off: frame * Self::RX_FRAMES,
                frame,
                n: Self::TX_FRAMES,
                head: 0,
            },
            mtu,
            kick: false,
            scratch: Vec::with_capacity(frame),
            order: Vec::new(),
        })
    }

    /// A second value for the same socket that owns the transmit ring (for a sender
    /// thread): this one then only receives, the twin only sends. They share the
    /// mapping, and the socket through a duplicated descriptor.
    pub fn tx_twin(&mut self) -> io::Result<Rings> {
        if self.tx_moved {
            return Err(io::Error::other("the transmit ring already has a twin"));
        }
        let fd = self.fd.try_clone()?;
        self.tx_moved = true;
        let kick = std::mem::take(&mut self.kick);
        Ok(Rings {
            shared: self.shared.clone(),
            fd,
            map: self.map,
            map_len: self.map_len,
            tx_moved: false,
            // No receive ring: `recv` and `rx_pending` see no slot.
            rx: Ring {
                off: 0,
                frame: self.rx.frame,
                n: 0,
                head: 0,
            },
            tx: Ring {
                off: self.tx.off,
                frame: self.tx.frame,
                n: self.tx.n,
                head: self.tx.head,
            },
            mtu: self.mtu,
            kick,
            scratch: Vec::new(),
            order: Vec::new(),
        })
    }

    fn slot(&self, r: &Ring, i: usize) -> *mut u8 {
        debug_assert!(i < r.n && r.off + (i + 1) * r.frame <= self.map_len);
        // SAFETY: slot `i` of ring `r` lies inside the mapping (checked above in debug;
        // `i < n` by construction of every caller).
        unsafe { self.map.add(r.off + i * r.frame) }
    }

    /// Read the status word of slot `p` (shared with the kernel).
    fn load(p: *mut u8) -> u32 {
        // SAFETY: `p` is a slot of the mapping (from `slot`, used while `self` lives);
        // every slot starts with a 4-byte aligned u32 status (slots are 2 KiB multiples
        // from a page-aligned base) that the kernel and the box exchange, and an AtomicU32
        // has the layout of a u32.
        unsafe { (*(p as *const AtomicU32)).load(Ordering::Acquire) }
    }

    /// Write the status word of slot `p` (hands the slot over; see [`Rings::load`]).
    fn store(p: *mut u8, v: u32) {
        // SAFETY: as in `load`.
        unsafe { (*(p as *const AtomicU32)).store(v, Ordering::Release) }
    }

    /// Frames the ring can take now (free transmit slots from the head on, up to `max`).
    fn tx_free(&self, max: usize) -> usize {
        let mut k = 0;
        while k < max.min(self.tx.n) {
            let p = self.slot(&self.tx, (self.tx.head + k) % self.tx.n);
            if Self::load(p) & TP_STATUS_TX_BUSY != TP_STATUS_AVAILABLE {
                break;
            }
            k += 1;
        }
        k
    }

    /// Read up to `max` waiting frames, each handed to `f` (valid during the call).
    pub fn recv(&mut self, max: usize, f: &mut dyn FnMut(Rx<'_>)) -> usize {
        let mut got = 0;
        while got < max && self.rx.n > 0 {
            let p = self.slot(&self.rx, self.rx.head);
            let status = Self::load(p);
            if status & TP_STATUS_USER == 0 {
                break;
            }
            // SAFETY: the slot is the box's (TP_STATUS_USER) until handed back below; its
            // header was written by the kernel before the status (Acquire above).
            let h = unsafe { std::ptr::read(p as *const Tp2Hdr) };
            let snap = (h.snaplen as usize).min(self.rx.frame.saturating_sub(h.mac as usize));
            let truncated = status & TP_STATUS_COPY != 0 || (h.snaplen as usize) < h.len as usize;
            // SAFETY: `mac + snap` lies inside the slot (clamped above).
            let data = unsafe { std::slice::from_raw_parts(p.add(h.mac as usize), snap) };
            let ts = h.sec as u64 * 1_000_000_000 + h.nsec as u64;
            if status & TP_STATUS_VLAN_VALID != 0 && data.len() >= 12 && !truncated {
                // Put the stripped tag back: destination, source, tag, the rest.
                let tpid = if status & TP_STATUS_VLAN_TPID_VALID != 0 && h.vlan_tpid != 0 {
                    h.vlan_tpid
                } else {
                    0x8100
                };
                self.scratch.clear();
                self.scratch.extend_from_slice(&data[..12]);
                self.scratch.extend_from_slice(&tpid.to_be_bytes());
                self.scratch.extend_from_slice(&h.vlan_tci.to_be_bytes());
                self.scratch.extend_from_slice(&data[12..]);
                f(Rx {
                    frame: &self.scratch,
                    ts,
                    truncated,
                });
            } else {
                f(Rx {
                    frame: data,
                    ts,
                    truncated,
                });
            }
            Self::store(p, TP_STATUS_KERNEL);
            self.rx.head = (self.rx.head + 1) % self.rx.n;
            got += 1;
        }
        got
    }

    /// Whether the kernel has handed the box a received frame (the next slot is the
    /// box's).
    #[inline]
    pub fn rx_pending(&self) -> bool {
        self.rx.n > 0 && Self::load(self.slot(&self.rx, self.rx.head)) & TP_STATUS_USER != 0
    }

    /// Whether the device could not take a frame that the kernel refuses: shorter than an
    /// Ethernet header, longer than the MTU (plus a tag for tagged frames), or than a slot.
    fn refused(&self, fr: &[u8]) -> bool {
        let tagged =
            fr.len() >= 14 && matches!(u16::from_be_bytes([fr[12], fr[13]]), 0x8100 | 0x88a8);
        fr.len() < 14
            || fr.len() > self.mtu + 14 + if tagged { 4 } else { 0 }
            || TX_DATA + VNET_HDR + fr.len() > self.tx.frame
    }

    /// Ask the kernel to send every flagged frame. Returns false if it could not take
    /// them all yet (they stay flagged and go with the next call).
    fn kick(&mut self) -> io::Result<bool> {
        loop {
            // The kernel reads the flagged slots of the transmit ring, which the box does
            // not touch until they are free.
            let Err(e) = transmit_kick(self.fd.as_fd()) else {
                self.kick = false;
                return Ok(true);
            };
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Out of buffers, or the driver's queue is full: the frame stays flagged.
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    self.kick = true;
                    return Ok(false);
                }
                _ => return Err(e),
            }
        }
    }

    /// Whether flagged frames wait for another [`Rings::flush`].
    pub fn needs_kick(&self) -> bool {
        self.kick
    }

    /// Retry sending frames the kernel could not take yet.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.kick && !self.tx_moved {
            self.kick()?;
        }
        Ok(())
    }

    /// Send `frames` in order, as [`Batch::send`] does: returns how many were taken (the
    /// rest wait for a free slot), `failed` gets the indices the device cannot send.
    pub fn send(&mut self, frames: &[&[u8]], failed: &mut Vec<usize>) -> io::Result<usize> {
        failed.clear();
        if self.tx_moved {
            return Err(io::Error::other(
                "the transmit ring belongs to the sender thread",
            ));
        }
        let free = self.tx_free(frames.len());
        let mut queued = 0;
        // Index in `frames` of each frame put in the ring, in ring order.
        let mut order = std::mem::take(&mut self.order);
        order.clear();
        for (i, fr) in frames.iter().take(free).enumerate() {
            if self.refused(fr) {
                failed.push(i);
                continue;
            }
            let p = self.slot(&self.tx, self.tx.head);
            // SAFETY: the slot is free (TP_STATUS_AVAILABLE, checked by tx_free) so the
            // kernel does not read it; the writes stay inside it (`refused` checked the
            // length against the slot).
            unsafe {
                let d = p.add(TX_DATA);
                // virtio_net_hdr: no offloads, header length = the whole frame (little
                // endian, as the kernel reads it on this host).
                std::ptr::write_bytes(d, 0, VNET_HDR);
                let hl = (fr.len() as u16).to_le_bytes();
                *d.add(2) = hl[0];
                *d.add(3) = hl[1];
                std::ptr::copy_nonoverlapping(fr.as_ptr(), d.add(VNET_HDR), fr.len());
                (*(p as *mut Tp2Hdr)).len = (VNET_HDR + fr.len()) as u32;
            }
            Self::store(p, TP_STATUS_SEND_REQUEST);
            self.tx.head = (self.tx.head + 1) % self.tx.n;
            order.push(i);
            queued += 1;
        }
        if (queued > 0 || self.kick) && self.kick().is_err() {
            {
                // The device refused for good (down, gone): take back every frame it did
                // not send — they are the last ones flagged, the kernel sends in order —
                // and report those of this call failed, as the socket path does (frames
                // flagged by an earlier call that is still waiting are lost).
                let mut k = queued;
                let mut idx = self.tx.head;
                loop {
                    let prev = (idx + self.tx.n - 1) % self.tx.n;
                    let p = self.slot(&self.tx, prev);
                    if prev == self.tx.head || Self::load(p) != TP_STATUS_SEND_REQUEST {
                        break;
                    }
                    Self::store(p, TP_STATUS_AVAILABLE);
                    idx = prev;
                    if k > 0 {
                        k -= 1;
                        failed.push(order[k]);
                    }
                }
                self.tx.head = idx;
                self.kick = false;
                failed.sort_unstable();
            }
        }
        self.order = order;
        Ok(free)
    }

    /// The socket, for `poll` (readable: a received frame waits; writable: a transmit
    /// slot is free).
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// Size of a receive slot: the largest IP packet plus an Ethernet header with two tags.
pub const SLOT: usize = 65535 + 22;
/// Room before each receive slot for a VLAN tag the kernel stripped (put back in place).
const HEADROOM: usize = 4;
const STRIDE: usize = SLOT + HEADROOM;
const PACKET_AUXDATA: libc::c_int = 8;
const TP_STATUS_VLAN_VALID_AUX: u32 = 1 << 4;
const TP_STATUS_VLAN_TPID_VALID_AUX: u32 = 1 << 6;

/// Batched receive/send over a device.
pub struct Batch {
    slots: Vec<u8>,
    n: usize,
    msgs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
    ctrl: Vec<[u64; 16]>,
}

// SAFETY: the raw pointers inside `msgs`/`iovs` are set at the start of every call to
// point into `self`'s own buffers or the call's arguments and are not used after it;
// moving the value to another thread (a worker) carries no borrowed memory along.
unsafe impl Send for Batch {}

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
            slots: vec![0; n * STRIDE],
            n,
            // SAFETY: all-zero mmsghdr/iovec are valid values (null pointers, zero lengths).
            msgs: (0..n).map(|_| unsafe { std::mem::zeroed() }).collect(),
            iovs: (0..n).map(|_| unsafe { std::mem::zeroed() }).collect(),
            ctrl: vec![[0u64; 16]; n],
        }
    }

    /// Read up to `max` frames without blocking and hand each to `f`. Returns how many
    /// were read (0 when nothing is waiting).
    pub fn recv(
        &mut self,
        dev: &mut Device,
        max: usize,
        f: &mut dyn FnMut(Rx<'_>),
    ) -> io::Result<usize> {
        let max = max.min(self.n);
        match dev {
            Device::Mmap(r) => Ok(r.recv(max, f)),
            Device::Xdp(x) => Ok(x.recv(max, f)),
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
                    // SAFETY: slot i (after its headroom) lies inside `slots` (n * STRIDE
                    // bytes).
                    self.iovs[i].iov_base =
                        unsafe { base.add(i * STRIDE + HEADROOM) } as *mut libc::c_void;
                    self.iovs[i].iov_len = SLOT;
                    let h = &mut self.msgs[i].msg_hdr;
                    h.msg_name = std::ptr::null_mut();
                    h.msg_namelen = 0;
                    h.msg_iov = &mut self.iovs[i];
                    h.msg_iovlen = 1;
                    h.msg_control = self.ctrl[i].as_mut_ptr() as *mut libc::c_void;
                    h.msg_controllen = std::mem::size_of::<[u64; 16]>();
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
                    let (ts, tag) = cmsg_timestamp_and_tag(&self.msgs[i].msg_hdr);
                    let end = i * STRIDE + HEADROOM + len.min(SLOT);
                    let mut start = i * STRIDE + HEADROOM;
                    if let (Some(tag), false, true) = (tag, truncated, end - start >= 12) {
                        // Put the tag the kernel stripped back: move the addresses into
                        // the headroom and write the tag after them.
                        self.slots.copy_within(start..start + 12, start - HEADROOM);
                        start -= HEADROOM;
                        self.slots[start + 12..start + 16].copy_from_slice(&tag);
                    }
                    let frame = &self.slots[start..end];
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
        dev: &mut Device,
        frames: &[&[u8]],
        failed: &mut Vec<usize>,
    ) -> io::Result<usize> {
        failed.clear();
        match dev {
            Device::Mmap(r) => r.send(frames, failed),
            Device::Xdp(x) => x.send(frames, failed),
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

/// The kernel receive timestamp (0 if none) and the VLAN tag the kernel stripped from the
/// frame (`PACKET_AUXDATA`; TPID and TCI in network order), if any.
fn cmsg_timestamp_and_tag(h: &libc::msghdr) -> (u64, Option<[u8; 4]>) {
    let (mut ts, mut tag) = (0, None);
    // SAFETY: CMSG_* walk the control buffer that the kernel filled for `h`, bounded by
    // msg_controllen; each payload is read unaligned with the size of its type.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(h);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == SCM_TIMESTAMPNS {
                let t = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                ts = t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64;
            } else if (*c).cmsg_level == libc::SOL_PACKET && (*c).cmsg_type == PACKET_AUXDATA {
                // struct tpacket_auxdata: status, len, snaplen (u32), mac, net, vlan_tci,
                // vlan_tpid (u16).
                let a = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const [u8; 20]);
                let status = u32::from_ne_bytes([a[0], a[1], a[2], a[3]]);
                if status & TP_STATUS_VLAN_VALID_AUX != 0 {
                    let tci = u16::from_ne_bytes([a[16], a[17]]);
                    let tpid = u16::from_ne_bytes([a[18], a[19]]);
                    let tpid = if status & TP_STATUS_VLAN_TPID_VALID_AUX != 0 && tpid != 0 {
                        tpid
                    } else {
                        0x8100
                    };
                    let (p, t) = (tpid.to_be_bytes(), tci.to_be_bytes());
                    tag = Some([p[0], p[1], t[0], t[1]]);
                }
            }
            c = libc::CMSG_NXTHDR(h, c);
        }
    }
    (ts, tag)
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
    sig: BorrowedFd<'_>,
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
        PollFd::new(sig, PollFlags::POLLIN),
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

/// CLOCK_MONOTONIC in nanoseconds (the clock of `bpf_ktime_get_ns`).
#[inline]
pub fn monotonic_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC)
        .unwrap_or(TimeSpec::new(0, 0));
    ts.tv_sec() as u64 * 1_000_000_000 + ts.tv_nsec() as u64
}

/// CPU time of the calling thread in nanoseconds (for the latency breakdown: the wall
/// time it was not running is the time it was preempted or its CPU not scheduled).
#[inline]
pub fn thread_cpu_ns() -> u64 {
    let ts = nix::time::clock_gettime(nix::time::ClockId::CLOCK_THREAD_CPUTIME_ID)
        .unwrap_or(TimeSpec::new(0, 0));
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

/// A zero-length send on a ring socket (memory-mapped or AF_XDP): asks the kernel to
/// transmit the frames queued on its transmit ring.
pub(crate) fn transmit_kick(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: no buffer and no address: only the transmit kick.
    let r = unsafe {
        libc::sendto(
            fd.as_raw_fd(),
            std::ptr::null(),
            0,
            libc::MSG_DONTWAIT,
            std::ptr::null(),
            0,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Wait until `fd` is readable or `timeout` passes.
pub fn wait_readable(fd: BorrowedFd<'_>, timeout: Duration) -> io::Result<bool> {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    match ppoll(&mut fds, Some(TimeSpec::from_duration(timeout)), None) {
        Ok(n) => Ok(n > 0),
        Err(Errno::EINTR) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Run the calling thread under the ordinary scheduler again (giving up `SCHED_FIFO`
/// needs no privilege).
pub fn set_normal_scheduling() -> io::Result<()> {
    let p = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall with a valid sched_param.
    cvt(unsafe { libc::sched_setscheduler(0, libc::SCHED_OTHER, &p) }).map(|_| ())
}

/// Pin the calling thread to CPU `cpu`.
pub fn set_affinity(cpu: usize) -> io::Result<()> {
    let mut set = CpuSet::new();
    set.set(cpu)
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    Ok(sched_setaffinity(Pid::from_raw(0), &set)?)
}

/// Let the calling thread run on every CPU it may use except `cpu` (when that leaves
/// any): a sender thread kept off its event loop's CPU.
pub fn set_affinity_except(cpu: usize) -> io::Result<()> {
    let mut set = sched_getaffinity(Pid::from_raw(0))?;
    let others = (0..CpuSet::count()).filter(|&c| c != cpu && set.is_set(c).unwrap_or(false));
    if others.count() == 0 {
        return Ok(());
    }
    let _ = set.unset(cpu);
    Ok(sched_setaffinity(Pid::from_raw(0), &set)?)
}

// ---------------------------------------------------------------------------------------
// Worker threads: fanout groups and the subscriber hash.

const PACKET_FANOUT: libc::c_int = 18;
const PACKET_FANOUT_DATA: libc::c_int = 22;
const PACKET_FANOUT_CBPF: u32 = 6;
const PACKET_FANOUT_FLAG_UNIQUEID: u32 = 0x2000;
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;

/// One classic-BPF instruction (`struct sock_filter`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SockFilter {
    /// Opcode.
    pub code: u16,
    /// Jump offset if true.
    pub jt: u8,
    /// Jump offset if false.
    pub jf: u8,
    /// Constant.
    pub k: u32,
}

/// `struct sock_fprog`.
#[repr(C)]
struct SockFprog {
    len: libc::c_ushort,
    filter: *const SockFilter,
}

/// Classic BPF opcodes used by the programs below (linux/filter.h).
pub mod bpf {
    /// `BPF_LD | BPF_W | BPF_ABS`: A = 32-bit word at k (network order).
    pub const LD_W_ABS: u16 = 0x20; // BPF_LD (0) | BPF_W (0) | BPF_ABS
    /// `BPF_ALU | BPF_MUL | BPF_K`.
    pub const MUL_K: u16 = 0x04 | 0x20;
    /// `BPF_ALU | BPF_RSH | BPF_K`.
    pub const RSH_K: u16 = 0x04 | 0x70;
    /// `BPF_ALU | BPF_AND | BPF_K`.
    pub const AND_K: u16 = 0x04 | 0x50;
    /// `BPF_ALU | BPF_XOR | BPF_X`.
    pub const XOR_X: u16 = 0x04 | 0xa0 | 0x08;
    /// `BPF_JMP | BPF_JEQ | BPF_K`.
    pub const JEQ_K: u16 = 0x05 | 0x10;
    /// `BPF_RET | BPF_A`.
    pub const RET_A: u16 = 0x06 | 0x10;
    /// `BPF_RET | BPF_K`.
    pub const RET_K: u16 = 0x06;
    /// `BPF_MISC | BPF_TAX`: X = A.
    pub const TAX: u16 = 0x07;
    /// `SKF_AD_OFF + SKF_AD_PROTOCOL`: the frame's EtherType (after a VLAN tag the
    /// kernel took off), in host order.
    pub const AD_PROTOCOL: u32 = (-0x1000i32) as u32;
    /// `SKF_NET_OFF`: loads relative to the network header.
    pub const NET_OFF: i32 = -0x0010_0000;
}

/// The multiplier of the subscriber hash (2^32 / golden ratio, odd).
pub const HASH_MUL: u32 = 0x9e37_79b1;
/// The part of an IPv6 address that names a subscriber in the hash: the first 56 bits
/// (a /56 delegation and every /64 in it meet on one worker). IPv4: the whole address.
pub const HASH_V6_MASK: u32 = 0xffff_ff00;

/// Which address of a frame names its subscriber: the source for frames received on
/// side a (the subscribers' side), the destination for frames received on side b.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HashSide {
    /// Side a: hash the source address.
    A,
    /// Side b: hash the destination address.
    B,
}

/// The fanout program of one side: the same hash of the subscriber's address on both
/// sides, so that both directions of a subscriber's traffic meet on one worker. The
/// kernel takes the result modulo the number of workers. IPv4: `(addr × M) >> 16`; IPv6:
/// `((w0 × M) ^ (w1 & HASH_V6_MASK)) × M >> 16` over the first 56 bits; anything else
/// (ARP, a frame too short to hold the address) goes to worker 0.
pub fn fanout_program(side: HashSide) -> Vec<SockFilter> {
    use bpf::*;
    let (v4, v6) = match side {
        HashSide::A => (12, 8),  // IPv4 / IPv6 source address
        HashSide::B => (16, 24), // destination address
    };
    let net = |off: i32| (NET_OFF + off) as u32;
    let i = |code, k| SockFilter {
        code,
        jt: 0,
        jf: 0,
        k,
    };
    let j = |k, jt, jf| SockFilter {
        code: JEQ_K,
        jt,
        jf,
        k,
    };
    vec![
        /* 0 */ i(LD_W_ABS, AD_PROTOCOL),
        /* 1 */ j(0x0800, 0, 4), // IPv4: 2, else 6
        /* 2 */ i(LD_W_ABS, net(v4)),
        /* 3 */ i(MUL_K, HASH_MUL),
        /* 4 */ i(RSH_K, 16),
        /* 5 */ i(RET_A, 0),
        /* 6 */ j(0x86dd, 0, 9), // IPv6: 7, else 16
        /* 7 */ i(LD_W_ABS, net(v6)),
        /* 8 */ i(MUL_K, HASH_MUL),
        /* 9 */ i(TAX, 0),
        /* 10 */ i(LD_W_ABS, net(v6 + 4)),
        /* 11 */ i(AND_K, HASH_V6_MASK),
        /* 12 */ i(XOR_X, 0),
        /* 13 */ i(MUL_K, HASH_MUL),
        /* 14 */ i(RSH_K, 16),
        /* 15 */ i(RET_A, 0),
        /* 16 */ i(RET_K, 0),
    ]
}

/// The fanout program's hash of a subscriber's address, in Rust: the worker of a
/// subscriber is `subscriber_hash(addr) % workers` (tests and tools use it to predict
/// where a subscriber's traffic goes).
pub fn subscriber_hash(addr: std::net::IpAddr) -> u32 {
    match addr {
        std::net::IpAddr::V4(a) => u32::from(a).wrapping_mul(HASH_MUL) >> 16,
        std::net::IpAddr::V6(a) => {
            let o = a.octets();
            let w = |i: usize| u32::from_be_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            ((w(0).wrapping_mul(HASH_MUL) ^ (w(4) & HASH_V6_MASK)).wrapping_mul(HASH_MUL)) >> 16
        }
    }
}

fn attach_filter(
    fd: RawFd,
    prog: &[SockFilter],
    level: libc::c_int,
    opt: libc::c_int,
) -> io::Result<()> {
    let fp = SockFprog {
        len: prog.len() as libc::c_ushort,
        filter: prog.as_ptr(),
    };
    // SAFETY: `fp` points at `prog`, both alive for the call; the kernel copies the program.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            opt,
            &fp as *const SockFprog as *const libc::c_void,
            std::mem::size_of::<SockFprog>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

/// Join `fd` to a `PACKET_FANOUT_CBPF` group: a new one with a kernel-chosen id when `id`
/// is `None` (the program is attached to it), else group `id`. Returns the group's id.
/// Frames a member sends are not delivered back to the group
/// (`PACKET_FANOUT_FLAG_IGNORE_OUTGOING`, where the kernel has it).
fn join_fanout(fd: RawFd, id: Option<u16>, prog: &[SockFilter]) -> io::Result<u16> {
    let join = |flags: u32| {
        let arg = match id {
            None => ((PACKET_FANOUT_CBPF | flags | PACKET_FANOUT_FLAG_UNIQUEID) << 16) as i32,
            Some(id) => (((PACKET_FANOUT_CBPF | flags) << 16) | id as u32) as i32,
        };
        setsockopt_int(fd, libc::SOL_PACKET, PACKET_FANOUT, arg)
    };
    if let Err(e) = join(PACKET_FANOUT_FLAG_IGNORE_OUTGOING) {
        // Kernels before 6.8 do not know the flag (the box's own frames are skipped by the
        // group anyway: the kernel never delivers a frame to the group that sent it).
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
        join(0)?;
    }
    let mut v: u32 = 0;
    let mut len = std::mem::size_of::<u32>() as libc::socklen_t;
    // SAFETY: PACKET_FANOUT reads back one u32 (id | type << 16 | flags << 24).
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            PACKET_FANOUT,
            &mut v as *mut u32 as *mut libc::c_void,
            &mut len,
        )
    })?;
    let gid = (v & 0xffff) as u16;
    if id.is_none() {
        attach_filter(fd, prog, libc::SOL_PACKET, PACKET_FANOUT_DATA)?;
    }
    Ok(gid)
}

/// A socket filter that accepts nothing: set on each member before it is bound, so that
/// no frame reaches it on its own before the whole group is formed (it would otherwise
/// get a copy of every frame while bound and not yet in the group); removed when the
/// group is complete.
const DROP_ALL: [SockFilter; 1] = [SockFilter {
    code: bpf::RET_K,
    jt: 0,
    jf: 0,
    k: 0,
}];

/// Open `n` devices on `ifname` (`mmap`: with rings) spread by one fanout group whose
/// program hashes the subscriber's address of `side`. Device `k` is member `k` of the
/// group: opened in the same order on both sides, a subscriber's frames of both
/// directions go to the devices of the same index.
pub fn open_group(ifname: &str, mmap: bool, n: usize, side: HashSide) -> io::Result<Vec<Device>> {
    let prog = fanout_program(side);
    let quiet = |fd: RawFd| attach_filter(fd, &DROP_ALL, libc::SOL_SOCKET, libc::SO_ATTACH_FILTER);
    let mut devs = Vec::with_capacity(n);
    let mut gid = None;
    for _ in 0..n {
        let dev = if mmap {
            Device::Mmap(Box::new(Rings::open_with(ifname, &quiet)?))
        } else {
            Device::Packet(packet_socket(ifname, Some(&quiet))?)
        };
        gid = Some(join_fanout(dev.as_fd().as_raw_fd(), gid, &prog)?);
        devs.push(dev);
    }
    for d in &devs {
        let fd = d.as_fd().as_raw_fd();
        // The option takes no value, but the kernel wants an int-sized one.
        setsockopt_int(fd, libc::SOL_SOCKET, libc::SO_DETACH_FILTER, 0)?;
    }
    Ok(devs)
}

/// A wake-up another thread can trigger (an `eventfd`), for a worker's event loop.
#[derive(Debug)]
pub struct Notify(OwnedFd);

impl Notify {
    /// A fresh, non-blocking eventfd.
    pub fn new() -> io::Result<Notify> {
        // SAFETY: plain syscall; the fd is owned right after.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh fd, owned by nobody else.
        Ok(Notify(unsafe { OwnedFd::from_raw_fd(fd) }))
    }
    /// Wake the waiting side.
    pub fn wake(&self) {
        let one = 1u64.to_ne_bytes();
        // SAFETY: an eventfd write takes 8 bytes from a buffer valid for the call.
        unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr() as *const libc::c_void, 8) };
    }
    /// Consume pending wake-ups.
    pub fn clear(&self) {
        let mut b = [0u8; 8];
        // SAFETY: an eventfd read fills 8 bytes of a buffer valid for the call.
        unsafe { libc::read(self.0.as_raw_fd(), b.as_mut_ptr() as *mut libc::c_void, 8) };
    }
    /// The fd, for `poll`.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

#[cfg(test)]
mod fanout_tests {
    use super::*;
    use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

    /// A classic-BPF interpreter for the instructions the fanout program uses, with the
    /// kernel's semantics: 32-bit arithmetic, big-endian loads, a load outside the
    /// packet ends the program with 0; `SKF_AD_PROTOCOL` is `proto`, `SKF_NET_OFF + k`
    /// byte `k` of `net` (the packet from its network header). Any other instruction
    /// fails the test.
    fn run(prog: &[SockFilter], proto: u16, net: &[u8]) -> u32 {
        let (mut a, mut x, mut pc) = (0u32, 0u32, 0usize);
        loop {
            let f = prog[pc];
            pc += 1;
            match f.code {
                bpf::LD_W_ABS if f.k == bpf::AD_PROTOCOL => a = proto as u32,
                bpf::LD_W_ABS => {
                    let off = (f.k as i32 - bpf::NET_OFF) as usize;
                    assert!((f.k as i32) >= bpf::NET_OFF, "only network-relative loads");
                    let Some(b) = net.get(off..off + 4) else {
                        return 0;
                    };
                    a = u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
                }
                bpf::MUL_K => a = a.wrapping_mul(f.k),
                bpf::RSH_K => a >>= f.k,
                bpf::AND_K => a &= f.k,
                bpf::XOR_X => a ^= x,
                bpf::TAX => x = a,
                bpf::JEQ_K => pc += if a == f.k { f.jt } else { f.jf } as usize,
                bpf::RET_A => return a,
                bpf::RET_K => return f.k,
                c => panic!("instruction {c:#x} not interpreted"),
            }
        }
    }

    fn v4(src: Ipv4Addr, dst: Ipv4Addr) -> Vec<u8> {
        let mut h = vec![0u8; 40];
        h[0] = 0x45;
        h[9] = 6;
        h[12..16].copy_from_slice(&src.octets());
        h[16..20].copy_from_slice(&dst.octets());
        h
    }

    fn v6(src: Ipv6Addr, dst: Ipv6Addr) -> Vec<u8> {
        let mut h = vec![0u8; 60];
        h[0] = 0x60;
        h[6] = 6;
        h[8..24].copy_from_slice(&src.octets());
        h[24..40].copy_from_slice(&dst.octets());
        h
    }

    /// A small deterministic generator for addresses.
    fn next(s: &mut u64) -> u64 {
        *s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        *s >> 16
    }

    #[test]
    fn both_directions_of_a_subscriber_hash_alike() {
        let (pa, pb) = (fanout_program(HashSide::A), fanout_program(HashSide::B));
        let mut s = 7u64;
        for _ in 0..2000 {
            let sub = Ipv4Addr::from(next(&mut s) as u32);
            let far = Ipv4Addr::from(next(&mut s) as u32);
            let up = run(&pa, 0x0800, &v4(sub, far));
            let down = run(&pb, 0x0800, &v4(far, sub));
            assert_eq!(up, down, "{sub} <-> {far}");
            assert_eq!(up, subscriber_hash(IpAddr::V4(sub)));
            let sub6 = Ipv6Addr::from(((next(&mut s) as u128) << 80) | next(&mut s) as u128);
            let far6 = Ipv6Addr::from(((next(&mut s) as u128) << 64) | next(&mut s) as u128);
            let up = run(&pa, 0x86dd, &v6(sub6, far6));
            assert_eq!(up, run(&pb, 0x86dd, &v6(far6, sub6)), "{sub6} <-> {far6}");
            assert_eq!(up, subscriber_hash(IpAddr::V6(sub6)));
        }
    }

    #[test]
    fn a_subscribers_ipv6_hosts_share_a_worker_and_subscribers_spread() {
        let pa = fanout_program(HashSide::A);
        let far = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1);
        // Every host and /64 inside one /56 hashes alike.
        let base: u128 = 0x2001_0db8_1234_5600 << 64;
        let h0 = run(&pa, 0x86dd, &v6(Ipv6Addr::from(base | 1), far));
        for host in [2u128, 0xffff, 0x1234_5678_9abc_def0, (0xff << 64) | 7] {
            assert_eq!(run(&pa, 0x86dd, &v6(Ipv6Addr::from(base | host), far)), h0);
        }
        // 1000 consecutive IPv4 subscribers and 1000 consecutive /56s spread evenly.
        for n in [2u32, 3, 4] {
            let mut per = vec![0u32; n as usize];
            let mut per6 = vec![0u32; n as usize];
            for k in 0..1000u32 {
                let sub = Ipv4Addr::from(0x0a00_0000 + k);
                per[(run(&pa, 0x0800, &v4(sub, Ipv4Addr::new(192, 0, 2, 1))) % n) as usize] += 1;
                let sub6 = Ipv6Addr::from(base + ((k as u128) << 72) + 1);
                per6[(run(&pa, 0x86dd, &v6(sub6, far)) % n) as usize] += 1;
            }
            for c in per.iter().chain(&per6) {
                let share = *c as f64 / 1000.0;
                assert!(
                    (share - 1.0 / n as f64).abs() < 0.05,
                    "{n} workers: {per:?} {per6:?}"
                );
            }
        }
    }

    #[test]
    fn known_hash_values() {
        // The lab's benchmark predicts placements with a Python copy of the hash
        // (asymlink.lab.bench.subscriber_worker); its test checks the same two values.
        assert_eq!(
            subscriber_hash(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 1))),
            4777
        );
        assert_eq!(
            subscriber_hash(IpAddr::V4(Ipv4Addr::new(198, 18, 0, 14))),
            7034
        );
    }

    #[test]
    fn other_frames_go_to_the_first_worker() {
        let pa = fanout_program(HashSide::A);
        let pb = fanout_program(HashSide::B);
        let arp = vec![0u8; 28];
        assert_eq!(run(&pa, 0x0806, &arp), 0);
        assert_eq!(run(&pb, 0x0806, &arp), 0);
        // Too short to hold the address: the kernel's load fails and the program gives 0.
        assert_eq!(run(&pb, 0x0800, &[0x45; 18]), 0);
        assert_eq!(run(&pa, 0x86dd, &[0x60; 12]), 0);
    }
}
