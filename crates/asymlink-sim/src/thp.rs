//! A global allocator that asks Linux for transparent huge pages under the heap.
//!
//! A large simulation (the access network's 10 000 lines: over a gigabyte of per-line
//! state, each line touched a few times per simulated second) spends much of its time on
//! TLB misses: every hop reaches a dozen separate heap objects spread over the whole heap,
//! and with 4 KiB pages each one is a page walk. With 2 MiB pages the walks mostly hit.
//! On machines whose `/sys/kernel/mm/transparent_hugepage/enabled` is `madvise` (the
//! usual default) the kernel uses huge pages only where the program asked for them:
//! [`ThpAlloc`] forwards every call to the system allocator and marks the heap's new
//! memory `MADV_HUGEPAGE` as it grows (glibc's `glibc.malloc.hugetlb=1` tunable does the
//! same, but it can only be set in the environment before the process starts). Nothing
//! changes in what is allocated or in any result; elsewhere than on Linux it is the system
//! allocator.
//!
//! The binaries install it (`#[global_allocator] static A: ThpAlloc = ThpAlloc;`): the
//! Python extension, the examples. It does nothing until [`enable`] is called, which
//! building a [`Simulation`](crate::Simulation) does (so the live box, in the same Python
//! extension, keeps the plain system allocator unless a simulation ran in its process);
//! the environment variable `ASYMLINK_NO_THP=1` keeps it off, to compare.
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};

/// The system allocator, with the heap's growth marked for transparent huge pages once
/// [`enable`] was called.
pub struct ThpAlloc;

/// Start marking the heap's growth (and blocks of 2 MiB or more) for huge pages, if the
/// process allocates through [`ThpAlloc`] and `ASYMLINK_NO_THP` is not set.
pub fn enable() {
    #[cfg(target_os = "linux")]
    linux::enable();
}

#[cfg(target_os = "linux")]
mod linux {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    const PAGE: usize = 4096;
    const HUGE: usize = 2 << 20;
    /// Blocks from this size on are advised directly (those from their own mapping).
    const BIG: usize = HUGE;
    /// Heap growth steps, and the size from which the C allocator maps a block of its own
    /// (its dynamic threshold's ceiling, fixed: setting the step turns the dynamics off).
    const STEP: usize = 16 * HUGE;

    /// Whether [`enable`](super::enable) was called (and not refused).
    static ON: AtomicBool = AtomicBool::new(false);
    /// The break (the end of the main heap) when last looked at.
    static BRK: AtomicUsize = AtomicUsize::new(0);

    pub fn enable() {
        if std::env::var_os("ASYMLINK_NO_THP").is_some_and(|v| v != "0") {
            return;
        }
        if ON.swap(true, Ordering::Relaxed) {
            return;
        }
        // Ask the heap to grow in steps that whole huge pages fit in, so that memory is
        // touched after its range was marked.
        // SAFETY: tuning parameters of the C allocator; `sbrk(0)` only reads the break.
        unsafe {
            libc::mallopt(libc::M_TOP_PAD, STEP as libc::c_int);
            libc::mallopt(libc::M_MMAP_THRESHOLD, STEP as libc::c_int);
            BRK.store(libc::sbrk(0) as usize, Ordering::Relaxed);
        }
    }

    fn advise(start: usize, end: usize) {
        let start = start.next_multiple_of(PAGE);
        let end = end & !(PAGE - 1);
        if end > start {
            // SAFETY: a hint on pages the process has mapped; it changes no contents.
            unsafe {
                libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE);
            }
        }
    }

    /// After an allocation of `size` bytes at `p`: mark a new block of its own mapping, or
    /// the part of the heap it grew by.
    #[inline]
    pub fn after_alloc(p: *mut u8, size: usize) {
        if p.is_null() || !ON.load(Ordering::Relaxed) {
            return;
        }
        if size >= BIG {
            advise(p as usize, p as usize + size);
            return;
        }
        // SAFETY: `sbrk(0)` only reads the current break.
        let now = unsafe { libc::sbrk(0) } as usize;
        let before = BRK.swap(now, Ordering::Relaxed);
        if now > before {
            advise(before, now);
        }
    }
}

// SAFETY: every call goes to the system allocator unchanged; the rest only gives the
// kernel a hint about memory the allocator already holds.
unsafe impl GlobalAlloc for ThpAlloc {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        #[cfg(target_os = "linux")]
        linux::after_alloc(p, layout.size());
        p
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc_zeroed(layout) };
        #[cfg(target_os = "linux")]
        linux::after_alloc(p, layout.size());
        p
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, passed on.
        unsafe { System.dealloc(ptr, layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        #[cfg(target_os = "linux")]
        linux::after_alloc(p, new_size);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocates_reallocates_and_frees_like_the_system_allocator() {
        let a = ThpAlloc;
        for size in [1usize, 64, 4096, 1 << 20, 5 << 20] {
            let layout = Layout::from_size_align(size, 16).unwrap();
            // SAFETY: non-zero layouts; every block is written within its size and freed
            // once with its layout.
            unsafe {
                let p = a.alloc_zeroed(layout);
                assert!(!p.is_null());
                assert_eq!(*p.add(size - 1), 0);
                p.add(size - 1).write(7);
                let q = a.realloc(p, layout, 2 * size);
                assert_eq!(*q.add(size - 1), 7);
                q.add(2 * size - 1).write(9);
                a.dealloc(q, Layout::from_size_align(2 * size, 16).unwrap());
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_large_block_is_marked_for_huge_pages() {
        enable();
        let a = ThpAlloc;
        let size = 8 << 20;
        let layout = Layout::from_size_align(size, 16).unwrap();
        // SAFETY: a non-zero layout, freed once with it.
        let p = unsafe { a.alloc(layout) };
        assert!(!p.is_null());
        let addr = p as usize + (4 << 20);
        // The mapping holding the block's middle lists the `hg` (MADV_HUGEPAGE) flag.
        let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
        let mut inside = false;
        let mut flags = None;
        for line in smaps.lines() {
            if let Some((range, _)) = line.split_once(' ') {
                if let Some((lo, hi)) = range.split_once('-') {
                    if let (Ok(lo), Ok(hi)) =
                        (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
                    {
                        inside = lo <= addr && addr < hi;
                        continue;
                    }
                }
            }
            if inside {
                if let Some(f) = line.strip_prefix("VmFlags:") {
                    flags = Some(f.to_string());
                }
            }
        }
        // SAFETY: allocated above with this layout.
        unsafe { a.dealloc(p, layout) };
        let flags = flags.expect("the block's mapping in /proc/self/smaps");
        assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
    }
}
