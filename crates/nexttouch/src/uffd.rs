//! A userfaultfd next-touch, kept as a measured experiment (see docs/nexttouch.md, "Why not
//! userfaultfd"): it is not offered through `mark`, only timed by `bench`.
//!
//! Of the userfaultfd modes only MISSING can catch both reads and writes of private anonymous
//! memory (WP catches writes only; MINOR is for shmem/hugetlbfs), and MISSING needs the pages
//! absent. So marking moves the pages out of the range with `mremap(MREMAP_DONTUNMAP)` (5.7+),
//! which leaves the range mapped and empty, into a stash, and registers the range MISSING with
//! `UFFD_FEATURE_SIGBUS`: the toucher gets SIGBUS (no handler thread, and the toucher's own
//! node is the local one), and its handler `UFFDIO_COPY`s the page from the stash, which
//! allocates the new page under the toucher's policy, i.e. on its node: a migration by copy.

use std::ffi::c_void;
use std::sync::atomic::{AtomicI32, AtomicU64, AtomicUsize, Ordering::*};

const UFFD_API: u64 = 0xAA;
const UFFD_FEATURE_SIGBUS: u64 = 1 << 7;
const UFFD_USER_MODE_ONLY: libc::c_int = 1;
const UFFDIO_REGISTER_MODE_MISSING: u64 = 1;

const fn iowr(nr: u64, size: usize) -> u64 {
    (3 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}
const fn ior(nr: u64, size: usize) -> u64 {
    (2 << 30) | ((size as u64) << 16) | (0xAA << 8) | nr
}

#[repr(C)]
struct UffdioApi {
    api: u64,
    features: u64,
    ioctls: u64,
}
#[repr(C)]
struct UffdioRange {
    start: u64,
    len: u64,
}
#[repr(C)]
struct UffdioRegister {
    range: UffdioRange,
    mode: u64,
    ioctls: u64,
}
#[repr(C)]
struct UffdioCopy {
    dst: u64,
    src: u64,
    len: u64,
    mode: u64,
    copy: i64,
}

const UFFDIO_API: u64 = iowr(0x3F, std::mem::size_of::<UffdioApi>());
const UFFDIO_REGISTER: u64 = iowr(0x00, std::mem::size_of::<UffdioRegister>());
const UFFDIO_UNREGISTER: u64 = ior(0x01, std::mem::size_of::<UffdioRange>());
const UFFDIO_COPY: u64 = iowr(0x03, std::mem::size_of::<UffdioCopy>());

/// The one experimental area the SIGBUS handler serves (the bench marks one at a time).
static FD: AtomicI32 = AtomicI32::new(-1);
static START: AtomicUsize = AtomicUsize::new(0);
static LEN: AtomicUsize = AtomicUsize::new(0);
static STASH: AtomicUsize = AtomicUsize::new(0);
static PAGE: AtomicUsize = AtomicUsize::new(4096);
pub(crate) static COPIES: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_sigbus(_sig: libc::c_int, info: *mut libc::siginfo_t, _ctx: *mut c_void) {
    // SAFETY: valid siginfo from the kernel; raw ioctl on our uffd (async-signal-safe).
    unsafe {
        let addr = (*info).si_addr() as usize;
        let (start, len, page) = (START.load(Relaxed), LEN.load(Relaxed), PAGE.load(Relaxed));
        if addr < start || addr >= start + len {
            libc::_exit(99); // the bench touches nothing else
        }
        let p = addr / page * page;
        let mut c = UffdioCopy {
            dst: p as u64,
            src: (STASH.load(Relaxed) + (p - start)) as u64,
            len: page as u64,
            mode: 0,
            copy: 0,
        };
        // EEXIST: another toucher copied it first; the retry finds the page.
        libc::syscall(
            libc::SYS_ioctl,
            FD.load(Relaxed),
            UFFDIO_COPY,
            &mut c as *mut UffdioCopy,
        );
        COPIES.fetch_add(1, Relaxed);
    }
}

/// An area marked with the userfaultfd mechanism.
pub struct UffdArea {
    start: usize,
    len: usize,
    stash: usize,
    fd: libc::c_int,
    old: libc::sigaction,
}

fn err(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

impl UffdArea {
    /// Mark `[start, start + len)` (page-aligned, private anonymous, populated).
    pub fn mark(start: usize, len: usize) -> Result<UffdArea, String> {
        let page = crate::page_bytes();
        PAGE.store(page, Relaxed);
        // SAFETY: raw syscalls with valid structs; the range is the caller's own mapping.
        unsafe {
            let fd = libc::syscall(
                libc::SYS_userfaultfd,
                libc::O_CLOEXEC | libc::O_NONBLOCK | UFFD_USER_MODE_ONLY,
            ) as libc::c_int;
            if fd < 0 {
                return Err(err("userfaultfd(UFFD_USER_MODE_ONLY)"));
            }
            let mut api = UffdioApi {
                api: UFFD_API,
                features: UFFD_FEATURE_SIGBUS,
                ioctls: 0,
            };
            if libc::ioctl(fd, UFFDIO_API as _, &mut api) != 0 {
                libc::close(fd);
                return Err(err("UFFDIO_API(UFFD_FEATURE_SIGBUS)"));
            }
            let stash = libc::mremap(
                start as *mut c_void,
                len,
                len,
                libc::MREMAP_MAYMOVE | libc::MREMAP_DONTUNMAP,
            );
            if stash == libc::MAP_FAILED {
                libc::close(fd);
                return Err(err("mremap(MREMAP_DONTUNMAP)"));
            }
            let mut reg = UffdioRegister {
                range: UffdioRange {
                    start: start as u64,
                    len: len as u64,
                },
                mode: UFFDIO_REGISTER_MODE_MISSING,
                ioctls: 0,
            };
            if libc::ioctl(fd, UFFDIO_REGISTER as _, &mut reg) != 0 {
                let e = err("UFFDIO_REGISTER(MISSING)");
                // Put the pages back where they were.
                libc::mremap(
                    stash,
                    len,
                    len,
                    libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
                    start as *mut c_void,
                );
                libc::close(fd);
                return Err(e);
            }
            FD.store(fd, Relaxed);
            START.store(start, Relaxed);
            LEN.store(len, Relaxed);
            STASH.store(stash as usize, Relaxed);
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction =
                on_sigbus as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) as usize;
            act.sa_flags = libc::SA_SIGINFO;
            let mut old: libc::sigaction = std::mem::zeroed();
            libc::sigaction(libc::SIGBUS, &act, &mut old);
            Ok(UffdArea {
                start,
                len,
                stash: stash as usize,
                fd,
                old,
            })
        }
    }
}

impl Drop for UffdArea {
    /// Unregister and free the stash. Untouched pages would have to be copied (or, on 6.8+,
    /// UFFDIO_MOVEd) back first; the bench touches every page, so they are simply dropped.
    fn drop(&mut self) {
        // SAFETY: undoing what `mark` did, on our own fd and mappings.
        unsafe {
            let mut r = UffdioRange {
                start: self.start as u64,
                len: self.len as u64,
            };
            libc::ioctl(self.fd, UFFDIO_UNREGISTER as _, &mut r);
            libc::munmap(self.stash as *mut c_void, self.len);
            libc::close(self.fd);
            FD.store(-1, Relaxed);
            LEN.store(0, Relaxed);
            libc::sigaction(libc::SIGBUS, &self.old, std::ptr::null_mut());
        }
    }
}
