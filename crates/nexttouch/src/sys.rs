//! Raw syscalls used by the SIGSEGV handler.
//!
//! Every call here goes through `libc::syscall` directly, for async-signal-safety: the handler
//! may run while the interrupted thread holds any lock or is inside malloc, so it must not
//! allocate, lock or build typed errors. That is why the typed wrappers of `numalab-linux`
//! (which format `Error`s with `String`s) are not used on this path. None of these functions
//! reads `errno`; failures come back as `false` or a negative value.

use std::ffi::c_void;

/// `MPOL_MF_MOVE` from include/uapi/linux/mempolicy.h: move pages mapped only by this process.
pub const MPOL_MF_MOVE: libc::c_int = 1 << 1;

/// The NUMA node of the CPU this thread runs on now (getcpu(2)), or None if the call failed.
#[inline]
pub fn current_node() -> Option<u32> {
    let mut cpu: libc::c_uint = 0;
    let mut node: libc::c_uint = 0;
    // SAFETY: both out-pointers are valid for writes; the third argument (tcache) must be NULL.
    let r = unsafe {
        libc::syscall(
            libc::SYS_getcpu,
            &mut cpu as *mut libc::c_uint,
            &mut node as *mut libc::c_uint,
            std::ptr::null_mut::<c_void>(),
        )
    };
    (r == 0).then_some(node)
}

/// move_pages(0, count, pages, nodes, status, MPOL_MF_MOVE) on the calling process. Returns the
/// syscall's raw result (0 = every status filled in, > 0 = pages not migrated, -1 = failed).
///
/// # Safety
/// `pages`, `nodes` and `status` must each be valid for `count` elements.
#[inline]
pub unsafe fn move_pages(
    count: usize,
    pages: *const *mut c_void,
    nodes: *const libc::c_int,
    status: *mut libc::c_int,
) -> libc::c_long {
    libc::syscall(
        libc::SYS_move_pages,
        0 as libc::c_long,
        count as libc::c_ulong,
        pages,
        nodes,
        status,
        MPOL_MF_MOVE,
    )
}

/// move_pages query (nodes = NULL): fills `status` with each page's node or a negative errno.
///
/// # Safety
/// `pages` and `status` must each be valid for `count` elements.
pub unsafe fn query_pages(
    count: usize,
    pages: *const *mut c_void,
    status: *mut libc::c_int,
) -> libc::c_long {
    libc::syscall(
        libc::SYS_move_pages,
        0 as libc::c_long,
        count as libc::c_ulong,
        pages,
        std::ptr::null::<libc::c_int>(),
        status,
        0 as libc::c_int,
    )
}

/// mprotect(2) without touching errno's meaning for the caller; true on success.
#[inline]
pub fn mprotect(addr: usize, len_bytes: usize, prot: libc::c_int) -> bool {
    // SAFETY: mprotect only changes page protections; a bad range is reported, not undefined.
    unsafe { libc::syscall(libc::SYS_mprotect, addr, len_bytes, prot) == 0 }
}

/// Whether one byte at `addr` is readable now, asked of the kernel (process_vm_readv on our own
/// pid returns EFAULT instead of faulting), so the handler can tell "this page was unmarked after
/// the fault was raised" from a real error.
pub fn readable(addr: usize) -> bool {
    let mut byte = 0u8;
    let local = libc::iovec {
        iov_base: &mut byte as *mut u8 as *mut c_void,
        iov_len: 1,
    };
    let remote = libc::iovec {
        iov_base: addr as *mut c_void,
        iov_len: 1,
    };
    // SAFETY: getpid has no preconditions; the iovecs describe one valid local byte and a remote
    // address the kernel checks.
    unsafe {
        let pid = libc::syscall(libc::SYS_getpid);
        libc::syscall(
            libc::SYS_process_vm_readv,
            pid,
            &local as *const libc::iovec,
            1usize,
            &remote as *const libc::iovec,
            1usize,
            0usize,
        ) == 1
    }
}

/// Give the CPU to another thread while a concurrent handler finishes a claimed page.
#[inline]
pub fn yield_now() {
    // SAFETY: no arguments, no memory touched.
    unsafe {
        libc::syscall(libc::SYS_sched_yield);
    }
}

/// The base page size in bytes.
pub fn page_bytes() -> usize {
    // SAFETY: sysconf has no preconditions.
    let v = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if v > 0 {
        v as usize
    } else {
        4096
    }
}
