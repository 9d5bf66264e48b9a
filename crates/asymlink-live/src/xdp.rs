//! AF_XDP sockets (`[process] io = "xdp"`, experimental): an XDP program on the interface
//! redirects every frame of receive queue 0 to the box's AF_XDP socket, whose rings the
//! box reads and writes without a system call per frame.
//!
//! * The program stamps the frame with the kernel's clock in its metadata area
//!   ([`stamp_redirect_program`]) and returns `bpf_redirect_map(xskmap,
//!   ctx->rx_queue_index, XDP_PASS)`; it is loaded and attached with the `bpf(2)` system
//!   call (`BPF_PROG_LOAD`,
//!   `BPF_MAP_CREATE`, `BPF_LINK_CREATE`): no libbpf, no C toolchain. Native (driver)
//!   XDP where the driver has it, the generic path otherwise. The link lives as long as
//!   the device: when the box exits, frames go back to the host's stack.
//! * Only queue 0 is served: a frame on another receive queue has no socket and goes to
//!   the host's stack (`XDP_PASS`). Reduce a multi-queue NIC to one (`ethtool -L`).
//! * Copy mode (`XDP_COPY`): the kernel copies a frame into the UMEM on receive and out
//!   of it on transmit. Drivers with zero-copy support would spare those copies; veth has
//!   none.
//! * Each device has its own UMEM: 2 048 frames for the fill ring (every received frame
//!   goes straight back once handed on) and 2 048 for transmission (back when the kernel
//!   completes them). Frames are handed on as slices of the UMEM and copied into a
//!   transmit frame on the way out, as the ring mode does.
//! * Receive timestamps: the program reserves 8 bytes of metadata before the frame
//!   (`bpf_xdp_adjust_meta`) and writes `bpf_ktime_get_ns()` there (CLOCK_MONOTONIC, in
//!   the driver's receive path: the NAPI poll on veth); copy mode copies the metadata
//!   into the UMEM just before the frame. The box reads it, clears it, and converts it to
//!   CLOCK_REALTIME, the clock of the other modes' kernel stamps. A frame without one (a
//!   driver without metadata room) is stamped when the box reads it. The
//!   `bpf_xdp_metadata_rx_timestamp` kfunc gives the driver's *hardware* stamp, which
//!   veth does not have (it returns the skb's hardware stamp, zero on veth), and it
//!   needs a device-bound program: not used.
#![allow(unsafe_code)]

use crate::sys::Rx;
use std::cell::Cell;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
const BPF_FUNC_KTIME_GET_NS: i32 = 5;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const BPF_FUNC_XDP_ADJUST_META: i32 = 54;
const XDP_PASS: i32 = 2;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;

/// UMEM frame size (a power of two from 2 KiB; holds a 1500-byte MTU frame and tags).
pub const FRAME: usize = 2048;
/// Slots per ring.
const RING: u32 = 2048;
/// UMEM frames: the fill ring's, then the transmit pool.
const FRAMES: usize = 2 * RING as usize;

/// `union bpf_attr`, as bytes: each command's fields are written at their offsets.
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, off: usize, v: u32) -> Attr {
        self.0[off..off + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, off: usize, v: u64) -> Attr {
        self.0[off..off + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
}

fn bpf_call(cmd: libc::c_long, mut attr: Attr, what: &str) -> io::Result<libc::c_long> {
    // SAFETY: the attribute block is 128 bytes, the size we pass; pointers in it refer to
    // live buffers of the caller.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr.0.as_mut_ptr(), 128usize) };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(r)
}

/// A `bpf(2)` command that returns a new descriptor.
fn bpf(cmd: libc::c_long, attr: Attr, what: &str) -> io::Result<OwnedFd> {
    let r = bpf_call(cmd, attr, what)?;
    // SAFETY: a descriptor the kernel just returned, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(r as RawFd) })
}

/// One `struct bpf_insn`: opcode, destination and source registers, offset, immediate.
fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> u64 {
    let mut b = [0u8; 8];
    b[0] = code;
    b[1] = (src << 4) | (dst & 0xf);
    b[2..4].copy_from_slice(&off.to_ne_bytes());
    b[4..8].copy_from_slice(&imm.to_ne_bytes());
    u64::from_ne_bytes(b)
}

/// `return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);`
pub fn redirect_program(map_fd: RawFd) -> [u64; 6] {
    [
        insn(0x61, 2, 1, 16, 0),                    // r2 = ctx->rx_queue_index
        insn(0x18, 1, 1, 0, map_fd),                // r1 = the map (ld_imm64, map fd)
        insn(0, 0, 0, 0, 0),                        //      (upper half)
        insn(0xb7, 3, 0, 0, XDP_PASS),              // r3 = XDP_PASS if no socket
        insn(0x85, 0, 0, 0, BPF_FUNC_REDIRECT_MAP), // r0 = bpf_redirect_map(r1, r2, r3)
        insn(0x95, 0, 0, 0, 0),                     // exit
    ]
}

/// Bytes of metadata the stamping program puts before a frame: its receive time.
pub const META: usize = 8;

/// ```text
/// if (bpf_xdp_adjust_meta(ctx, -8) == 0) {
///     u64 t = bpf_ktime_get_ns();
///     if (ctx->data_meta + 8 <= ctx->data) *(u64 *)ctx->data_meta = t;
/// }
/// return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
/// ```
pub fn stamp_redirect_program(map_fd: RawFd) -> [u64; 17] {
    let r = redirect_program(map_fd);
    [
        insn(0xbf, 6, 1, 0, 0),                        // r6 = ctx (kept across calls)
        insn(0xb7, 2, 0, 0, -(META as i32)),           // r2 = -8
        insn(0x85, 0, 0, 0, BPF_FUNC_XDP_ADJUST_META), // r0 = bpf_xdp_adjust_meta(r1, r2)
        insn(0x55, 0, 0, 7, 0),                        // if r0 != 0 goto redirect
        insn(0x85, 0, 0, 0, BPF_FUNC_KTIME_GET_NS),    // r0 = bpf_ktime_get_ns()
        insn(0x61, 2, 6, 0, 0),                        // r2 = ctx->data
        insn(0x61, 3, 6, 8, 0),                        // r3 = ctx->data_meta
        insn(0xbf, 4, 3, 0, 0),                        // r4 = r3
        insn(0x07, 4, 0, 0, META as i32),              // r4 += 8
        insn(0x2d, 4, 2, 1, 0),                        // if r4 > r2 goto redirect
        insn(0x7b, 3, 0, 0, 0),                        // *(u64 *)(r3 + 0) = r0
        // redirect: the redirect program, ctx from r6.
        insn(0x61, 2, 6, 16, 0), // r2 = ctx->rx_queue_index
        r[1],
        r[2],
        r[3],
        r[4],
        r[5],
    ]
}

/// Where the redirect program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver (native XDP) where the driver has it, the generic path otherwise.
    Best,
    /// In the driver only.
    Native,
    /// On the generic path (`XDP_FLAGS_SKB_MODE`) only.
    Generic,
}

/// An XSKMAP of one entry.
fn xskmap() -> io::Result<OwnedFd> {
    bpf(
        BPF_MAP_CREATE,
        Attr::new()
            .u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, 1),
        "BPF_MAP_CREATE (XSKMAP)",
    )
}

/// The XSKMAP with `xsk` at key 0, the redirect program using it (with `stamp`, the
/// one that stamps each frame first, [`stamp_redirect_program`]), and its link to
/// `ifindex` (dropping the three detaches the program).
pub fn attach_redirect(
    ifindex: u32,
    xsk: RawFd,
    mode: AttachMode,
    stamp: bool,
) -> io::Result<[OwnedFd; 3]> {
    let map = xskmap()?;
    let (key, value) = (0u32, xsk as u32);
    bpf_call(
        BPF_MAP_UPDATE_ELEM,
        Attr::new()
            .u32(0, map.as_raw_fd() as u32)
            .u64(8, &key as *const u32 as u64)
            .u64(16, &value as *const u32 as u64),
        "BPF_MAP_UPDATE_ELEM (XSKMAP)",
    )?;
    let prog = match stamp {
        true => load_xdp(&stamp_redirect_program(map.as_raw_fd()))?,
        false => load_xdp(&redirect_program(map.as_raw_fd()))?,
    };
    let link = |flags: u32| {
        bpf(
            BPF_LINK_CREATE,
            Attr::new()
                .u32(0, prog.as_raw_fd() as u32)
                .u32(4, ifindex)
                .u32(8, BPF_XDP)
                .u32(12, flags),
            &format!("BPF_LINK_CREATE (XDP, ifindex {ifindex})"),
        )
    };
    let link = match mode {
        AttachMode::Best => link(XDP_FLAGS_DRV_MODE).or_else(|_| link(XDP_FLAGS_SKB_MODE))?,
        AttachMode::Native => link(XDP_FLAGS_DRV_MODE)?,
        AttachMode::Generic => link(XDP_FLAGS_SKB_MODE)?,
    };
    Ok([map, prog, link])
}

/// Load `prog` as an XDP program (the verifier's log in the error if it refuses it).
pub fn load_xdp(prog: &[u64]) -> io::Result<OwnedFd> {
    let license = b"GPL\0";
    let mut log = vec![0u8; 16 * 1024];
    bpf(
        BPF_PROG_LOAD,
        Attr::new()
            .u32(0, BPF_PROG_TYPE_XDP)
            .u32(4, prog.len() as u32)
            .u64(8, prog.as_ptr() as u64)
            .u64(16, license.as_ptr() as u64)
            .u32(24, 1)
            .u32(28, log.len() as u32)
            .u64(32, log.as_mut_ptr() as u64)
            .u32(68, BPF_XDP),
        "BPF_PROG_LOAD (XDP)",
    )
    .map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        io::Error::new(
            e.kind(),
            format!("{e}; verifier: {}", String::from_utf8_lossy(&log[..end])),
        )
    })
}

/// One of the four single-producer single-consumer rings shared with the kernel.
pub struct Ring<T> {
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    descs: *mut T,
    mask: u32,
    size: u32,
    /// Our index: the producer's for fill and TX, the consumer's for RX and completion.
    head: u32,
    base: *mut libc::c_void,
    len: usize,
}

impl<T: Copy> Ring<T> {
    fn map(
        fd: &OwnedFd,
        off: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        ours_is_producer: bool,
    ) -> io::Result<Ring<T>> {
        let len = off.desc as usize + size as usize * std::mem::size_of::<T>();
        // SAFETY: maps the ring the kernel set up on this socket, at its page offset.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                fd.as_raw_fd(),
                pgoff as libc::off_t,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let at = |o: u64| base.cast::<u8>().wrapping_add(o as usize);
        let mut r = Ring {
            producer: at(off.producer).cast(),
            consumer: at(off.consumer).cast(),
            descs: at(off.desc).cast(),
            mask: size - 1,
            size,
            head: 0,
            base,
            len,
        };
        r.head = if ours_is_producer {
            r.prod().load(Ordering::Relaxed)
        } else {
            r.cons().load(Ordering::Relaxed)
        };
        Ok(r)
    }
    fn prod(&self) -> &AtomicU32 {
        // SAFETY: points into our live mapping, 4-byte aligned (kernel layout).
        unsafe { &*self.producer }
    }
    fn cons(&self) -> &AtomicU32 {
        // SAFETY: as above.
        unsafe { &*self.consumer }
    }
    /// Producer side: free slots.
    pub fn free(&self) -> u32 {
        self.size - self.head.wrapping_sub(self.cons().load(Ordering::Acquire))
    }
    /// Consumer side: filled slots.
    pub fn ready(&self) -> u32 {
        self.prod().load(Ordering::Acquire).wrapping_sub(self.head)
    }
    fn slot(&self, i: u32) -> *mut T {
        self.descs
            .wrapping_add((self.head.wrapping_add(i) & self.mask) as usize)
    }
    /// Consumer side: slot `i` past our index (`i` < [`Ring::ready`]).
    pub fn read(&self, i: u32) -> T {
        // SAFETY: `i` < ready(): a slot the kernel has published to us.
        unsafe { self.slot(i).read_volatile() }
    }
    /// Producer side: slot `i` past our index (`i` < [`Ring::free`]).
    pub fn write(&self, i: u32, v: T) {
        // SAFETY: `i` < free(): a slot the kernel has released to us.
        unsafe { self.slot(i).write_volatile(v) }
    }
    /// Producer side: publish `n` written slots.
    pub fn submit(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        self.prod().store(self.head, Ordering::Release);
    }
    /// Consumer side: hand `n` read slots back.
    pub fn release(&mut self, n: u32) {
        self.head = self.head.wrapping_add(n);
        self.cons().store(self.head, Ordering::Release);
    }
}

impl<T> Drop for Ring<T> {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.base, self.len) };
    }
}

fn setopt<T>(fd: &OwnedFd, name: libc::c_int, v: &T, what: &str) -> io::Result<()> {
    // SAFETY: `v` is a valid value of the option's type, of the size given.
    let r = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            name,
            (v as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if r < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("{what}: {e}")));
    }
    Ok(())
}

/// The four rings of an AF_XDP socket.
pub struct Rings {
    pub rx: Ring<libc::xdp_desc>,
    pub tx: Ring<libc::xdp_desc>,
    pub fill: Ring<u64>,
    pub comp: Ring<u64>,
}

/// The frames an AF_XDP socket uses.
pub enum Umem {
    /// Registers `len` bytes at `addr` (frames of 2 KiB), copied by the kernel or, with
    /// `zerocopy`, shared with a driver that supports it.
    Own {
        addr: *mut u8,
        len: usize,
        zerocopy: bool,
    },
    /// Shares the frames of this socket (`XDP_SHARED_UMEM`; its copy mode too).
    Shared(RawFd),
}

/// An AF_XDP socket bound to queue 0 of `ifindex`, with its four rings of `ring` slots
/// (a power of two). No program sends it frames yet: see [`attach_redirect`].
///
/// # Safety
/// With [`Umem::Own`], `addr` must be the start of `len` writable bytes, page-aligned,
/// that stay mapped until the socket and every socket sharing them are closed: the
/// kernel writes received frames there.
pub unsafe fn bind_socket(ifindex: u32, umem: Umem, ring: u32) -> io::Result<(OwnedFd, Rings)> {
    // SAFETY: plain socket(2).
    let raw = unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
    if raw < 0 {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("socket(AF_XDP): {e}")));
    }
    // SAFETY: fresh descriptor, owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(raw) };
    if let Umem::Own { addr, len, .. } = umem {
        let reg = libc::xdp_umem_reg {
            addr: addr as u64,
            len: len as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        setopt(&fd, libc::XDP_UMEM_REG, &reg, "XDP_UMEM_REG")?;
    }
    for opt in [
        libc::XDP_UMEM_FILL_RING,
        libc::XDP_UMEM_COMPLETION_RING,
        libc::XDP_RX_RING,
        libc::XDP_TX_RING,
    ] {
        setopt(&fd, opt, &(ring as libc::c_int), "AF_XDP ring size")?;
    }
    // SAFETY: zeroed plain-data struct, filled by getsockopt.
    let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
    let mut optlen = std::mem::size_of::<libc::xdp_mmap_offsets>() as libc::socklen_t;
    // SAFETY: valid out-pointers of the sizes given.
    if unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_MMAP_OFFSETS,
            (&mut off as *mut libc::xdp_mmap_offsets).cast(),
            &mut optlen,
        )
    } < 0
    {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(e.kind(), format!("XDP_MMAP_OFFSETS: {e}")));
    }
    let map = |what: &str, e: io::Error| io::Error::new(e.kind(), format!("mmap {what}: {e}"));
    let rings = Rings {
        rx: Ring::map(&fd, &off.rx, ring, libc::XDP_PGOFF_RX_RING as u64, false)
            .map_err(|e| map("RX ring", e))?,
        tx: Ring::map(&fd, &off.tx, ring, libc::XDP_PGOFF_TX_RING as u64, true)
            .map_err(|e| map("TX ring", e))?,
        fill: Ring::map(&fd, &off.fr, ring, libc::XDP_UMEM_PGOFF_FILL_RING, true)
            .map_err(|e| map("fill ring", e))?,
        comp: Ring::map(
            &fd,
            &off.cr,
            ring,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            false,
        )
        .map_err(|e| map("completion ring", e))?,
    };
    // SAFETY: an all-zero sockaddr_xdp is valid; fields set below.
    let mut sa: libc::sockaddr_xdp = unsafe { std::mem::zeroed() };
    sa.sxdp_family = libc::AF_XDP as u16;
    sa.sxdp_ifindex = ifindex;
    sa.sxdp_queue_id = 0;
    let how = match umem {
        Umem::Shared(owner) => {
            sa.sxdp_flags = libc::XDP_SHARED_UMEM;
            sa.sxdp_shared_umem_fd = owner as u32;
            "shared UMEM"
        }
        Umem::Own { zerocopy: true, .. } => {
            sa.sxdp_flags = libc::XDP_ZEROCOPY;
            "zero-copy"
        }
        Umem::Own { .. } => {
            sa.sxdp_flags = libc::XDP_COPY;
            "copy mode"
        }
    };
    // SAFETY: a valid sockaddr_xdp of the size given.
    if unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&sa as *const libc::sockaddr_xdp).cast(),
            std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
        )
    } < 0
    {
        let e = io::Error::last_os_error();
        return Err(io::Error::new(
            e.kind(),
            format!("bind(AF_XDP, ifindex {ifindex}, queue 0, {how}): {e}"),
        ));
    }
    Ok((fd, rings))
}

/// Frames' memory: an anonymous mapping, unmapped when dropped (after the sockets that
/// use it are closed).
pub struct UmemMap {
    addr: *mut u8,
    len: usize,
}

impl UmemMap {
    /// `len` bytes, populated.
    pub fn new(len: usize) -> io::Result<UmemMap> {
        // SAFETY: an anonymous private mapping of our own.
        let addr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if addr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(UmemMap {
            addr: addr.cast(),
            len,
        })
    }

    /// The whole area, for [`Umem::Own`].
    pub fn umem(&self, zerocopy: bool) -> Umem {
        Umem::Own {
            addr: self.addr,
            len: self.len,
            zerocopy,
        }
    }
}

impl Drop for UmemMap {
    fn drop(&mut self) {
        // SAFETY: our own mapping, unmapped once.
        unsafe { libc::munmap(self.addr.cast(), self.len) };
    }
}

/// An AF_XDP socket on queue 0 of one interface, with its UMEM and XDP program.
pub struct Xsk {
    // Field order is drop order: the program's link first (frames go to the host's
    // stack from then on), the rings, the socket, the UMEM last.
    _bpf: [OwnedFd; 3],
    rx: Ring<libc::xdp_desc>,
    tx: Ring<libc::xdp_desc>,
    fill: Ring<u64>,
    comp: Ring<u64>,
    fd: OwnedFd,
    umem: UmemMap,
    /// Transmit frames not in the kernel's hands.
    tx_pool: Vec<u64>,
    /// Frames put on the transmit ring that the kernel has not taken yet.
    kick: bool,
    /// `rx_dropped + rx_ring_full` at the last [`Xsk::take_rx_drops`].
    drops_seen: Cell<u64>,
}

// SAFETY: the raw pointers refer to mappings owned by this value; it is used by one
// thread at a time (moved to a worker, never shared).
unsafe impl Send for Xsk {}

impl Xsk {
    /// Socket, UMEM, rings and program on `ifname` (must exist and be up).
    pub fn open(ifname: &str) -> io::Result<Xsk> {
        let ifindex = crate::sys::if_index(ifname)?;
        let umem = UmemMap::new(FRAMES * FRAME)?;
        // SAFETY: `umem` is dropped after the socket (field order).
        let (fd, mut r) = unsafe { bind_socket(ifindex, umem.umem(false), RING) }?;
        for i in 0..RING {
            r.fill.write(i, u64::from(i) * FRAME as u64);
        }
        r.fill.submit(RING);
        let bpf = attach_redirect(ifindex, fd.as_raw_fd(), AttachMode::Best, true)?;
        let Rings { rx, tx, fill, comp } = r;
        Ok(Xsk {
            rx,
            tx,
            fill,
            comp,
            fd,
            _bpf: bpf,
            umem,
            tx_pool: (RING as u64..FRAMES as u64)
                .map(|i| i * FRAME as u64)
                .collect(),
            kick: false,
            drops_seen: Cell::new(0),
        })
    }

    fn frame(&self, addr: u64, len: usize) -> &[u8] {
        // SAFETY: the kernel hands out addresses of frames inside our UMEM, len ≤ FRAME.
        unsafe { std::slice::from_raw_parts(self.umem.addr.add(addr as usize), len.min(FRAME)) }
    }

    /// Whether a received frame waits on the receive ring.
    #[inline]
    pub fn rx_waiting(&self) -> bool {
        self.rx.ready() > 0
    }

    /// The program's receive stamp before the frame at `addr` (0 if none), cleared so
    /// that the frame's next use cannot show it.
    fn take_stamp(&self, addr: u64) -> u64 {
        let at = addr as usize;
        if at % FRAME < META || at > FRAMES * FRAME {
            return 0;
        }
        // SAFETY: the 8 bytes before a received frame lie in its UMEM chunk (the kernel
        // leaves XDP_PACKET_HEADROOM before the frame); the kernel does not write this
        // frame while we hold it.
        unsafe {
            let p = self.umem.addr.add(at - META).cast::<u64>();
            let v = p.read_unaligned();
            p.write_unaligned(0);
            v
        }
    }

    /// Read up to `max` frames and hand each to `f` (valid during the call); each frame
    /// goes back to the fill ring at once.
    pub fn recv(&mut self, max: usize, f: &mut dyn FnMut(Rx<'_>)) -> usize {
        let n = self.rx.ready().min(max as u32);
        if n == 0 {
            return 0;
        }
        let read = crate::sys::realtime_ns();
        let mono = crate::sys::monotonic_ns();
        let room = self.fill.free();
        for i in 0..n {
            let d = self.rx.read(i);
            let ts = stamp_to_realtime(self.take_stamp(d.addr), mono, read);
            f(Rx {
                frame: self.frame(d.addr, d.len as usize),
                ts,
                truncated: false,
            });
            // The fill ring holds every receive frame, so it has room for each one back.
            if i < room {
                self.fill.write(i, d.addr);
            }
        }
        self.rx.release(n);
        self.fill.submit(n.min(room));
        n as usize
    }

    /// Send `frames` in order: returns how many were taken (the rest wait for a free
    /// transmit frame); `failed` gets the indices the device cannot send (longer than a
    /// frame, or shorter than an Ethernet header).
    pub fn send(&mut self, frames: &[&[u8]], failed: &mut Vec<usize>) -> io::Result<usize> {
        failed.clear();
        self.reap();
        let mut slots = self.tx.free();
        let mut put = 0;
        let mut taken = 0;
        for (i, fr) in frames.iter().enumerate() {
            if fr.len() > FRAME || fr.len() < 14 {
                failed.push(i);
                taken += 1;
                continue;
            }
            let Some(addr) = (slots > 0).then(|| self.tx_pool.pop()).flatten() else {
                break;
            };
            // SAFETY: `addr` is a transmit frame of our UMEM that the kernel does not
            // hold; `fr` fits in it.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    fr.as_ptr(),
                    self.umem.addr.add(addr as usize),
                    fr.len(),
                )
            };
            self.tx.write(
                put,
                libc::xdp_desc {
                    addr,
                    len: fr.len() as u32,
                    options: 0,
                },
            );
            put += 1;
            slots -= 1;
            taken += 1;
        }
        if put > 0 {
            self.tx.submit(put);
            self.kick()?;
        }
        Ok(taken)
    }

    /// Return completed transmit frames to the pool.
    fn reap(&mut self) {
        let n = self.comp.ready();
        for i in 0..n {
            self.tx_pool.push(self.comp.read(i));
        }
        self.comp.release(n);
    }

    /// In copy mode the kernel transmits in `sendto`, at most 32 frames a call.
    fn kick(&mut self) -> io::Result<()> {
        self.kick = false;
        for _ in 0..8 {
            let Err(e) = crate::sys::transmit_kick(self.fd.as_fd()) else {
                return Ok(());
            };
            match e.raw_os_error() {
                Some(libc::EAGAIN) | Some(libc::EBUSY) | Some(libc::ENOBUFS) => {}
                Some(libc::ENETDOWN) | Some(libc::ENXIO) => return Ok(()),
                _ => return Err(e),
            }
            self.reap();
        }
        self.kick = true;
        Ok(())
    }

    /// Whether frames wait on the transmit ring for another [`Xsk::flush`].
    pub fn needs_kick(&self) -> bool {
        self.kick
    }

    /// Kick the transmission of frames the kernel did not take yet.
    pub fn flush(&mut self) -> io::Result<()> {
        self.reap();
        if self.kick {
            self.kick()?;
        }
        Ok(())
    }

    /// Frames the kernel dropped for want of room on the receive side since the last
    /// call.
    pub fn take_rx_drops(&self) -> u64 {
        // SAFETY: zeroed plain-data struct, filled by getsockopt.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        let mut len = std::mem::size_of::<libc::xdp_statistics>() as libc::socklen_t;
        // SAFETY: valid out-pointers of the sizes given.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_XDP,
                libc::XDP_STATISTICS,
                (&mut s as *mut libc::xdp_statistics).cast(),
                &mut len,
            )
        };
        if r != 0 {
            return 0;
        }
        let total = s.rx_dropped + s.rx_ring_full + s.rx_fill_ring_empty_descs;
        total - self.drops_seen.replace(total)
    }

    /// The socket, readable when frames wait on the receive ring.
    pub fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// A receive stamp of the program (CLOCK_MONOTONIC ns, 0 if none) on the clock of the
/// other modes' kernel stamps (CLOCK_REALTIME ns), given both clocks read just after it
/// (`mono`, `real`); `real` itself when there is no stamp or it lies after `mono`.
pub fn stamp_to_realtime(stamp: u64, mono: u64, real: u64) -> u64 {
    if stamp == 0 || stamp > mono {
        return real;
    }
    real.saturating_sub(mono - stamp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redirect_program_encodes_its_instructions() {
        let p = redirect_program(7);
        // ldx w r2, [r1 + 16]: opcode 0x61, dst 2, src 1, offset 16.
        assert_eq!(p[0].to_ne_bytes(), [0x61, 0x12, 16, 0, 0, 0, 0, 0]);
        // ld_imm64 r1, map fd 7 (src = BPF_PSEUDO_MAP_FD = 1), then an all-zero half.
        assert_eq!(p[1].to_ne_bytes(), [0x18, 0x11, 0, 0, 7, 0, 0, 0]);
        assert_eq!(p[2], 0);
        // mov r3, XDP_PASS; call bpf_redirect_map (51); exit.
        assert_eq!(p[3].to_ne_bytes(), [0xb7, 0x03, 0, 0, 2, 0, 0, 0]);
        assert_eq!(p[4].to_ne_bytes(), [0x85, 0, 0, 0, 51, 0, 0, 0]);
        assert_eq!(p[5].to_ne_bytes(), [0x95, 0, 0, 0, 0, 0, 0, 0]);
    }

    #[test]
    fn stamp_program_encodes_its_instructions() {
        let p = stamp_redirect_program(7);
        let b = |i: usize| p[i].to_ne_bytes();
        assert_eq!(b(0), [0xbf, 0x16, 0, 0, 0, 0, 0, 0]); // mov r6, r1
        assert_eq!(b(1), [0xb7, 0x02, 0, 0, 0xf8, 0xff, 0xff, 0xff]); // mov r2, -8
        assert_eq!(b(2), [0x85, 0, 0, 0, 54, 0, 0, 0]); // call bpf_xdp_adjust_meta
        assert_eq!(b(3), [0x55, 0, 7, 0, 0, 0, 0, 0]); // jne r0, 0, +7
        assert_eq!(b(4), [0x85, 0, 0, 0, 5, 0, 0, 0]); // call bpf_ktime_get_ns
        assert_eq!(b(5), [0x61, 0x62, 0, 0, 0, 0, 0, 0]); // ldxw r2, [r6 + 0] (data)
        assert_eq!(b(6), [0x61, 0x63, 8, 0, 0, 0, 0, 0]); // ldxw r3, [r6 + 8] (data_meta)
        assert_eq!(b(7), [0xbf, 0x34, 0, 0, 0, 0, 0, 0]); // mov r4, r3
        assert_eq!(b(8), [0x07, 0x04, 0, 0, 8, 0, 0, 0]); // add r4, 8
        assert_eq!(b(9), [0x2d, 0x24, 1, 0, 0, 0, 0, 0]); // jgt r4, r2, +1
        assert_eq!(b(10), [0x7b, 0x03, 0, 0, 0, 0, 0, 0]); // stxdw [r3 + 0], r0
        assert_eq!(b(11), [0x61, 0x62, 16, 0, 0, 0, 0, 0]); // ldxw r2, [r6 + 16]
                                                            // Both jumps land on the redirect (instruction 11), which ends as the plain
                                                            // program does.
        assert_eq!(3 + 1 + 7, 11);
        assert_eq!(9 + 1 + 1, 11);
        assert_eq!(p[12..], redirect_program(7)[1..]);
    }

    /// The verifier accepts both programs (root only; skipped otherwise).
    #[test]
    fn the_verifier_accepts_the_programs() {
        if nix::unistd::geteuid().as_raw() != 0 {
            eprintln!("skipped: needs root");
            return;
        }
        let map = xskmap().unwrap();
        load_xdp(&stamp_redirect_program(map.as_raw_fd())).unwrap();
        load_xdp(&redirect_program(map.as_raw_fd())).unwrap();
        // A program that writes the metadata without the bounds check is refused: the
        // check is what the verifier asks for.
        let mut p = stamp_redirect_program(map.as_raw_fd());
        p[9] = insn(0xbf, 4, 4, 0, 0); // mov r4, r4 in place of the bounds check
        let e = load_xdp(&p).unwrap_err().to_string();
        assert!(e.contains("invalid access to packet"), "{e}");
    }

    #[test]
    fn stamps_convert_to_the_wall_clock() {
        let (mono, real) = (5_000_000_000, 1_800_000_000_000_000_000);
        // 40 µs before the clocks were read.
        assert_eq!(stamp_to_realtime(mono - 40_000, mono, real), real - 40_000);
        assert_eq!(stamp_to_realtime(mono, mono, real), real);
        // No stamp, or one from the future: the read time.
        assert_eq!(stamp_to_realtime(0, mono, real), real);
        assert_eq!(stamp_to_realtime(mono + 1, mono, real), real);
    }
}
