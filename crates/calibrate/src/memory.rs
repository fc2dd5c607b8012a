//! What every measurement needs: a buffer whose pages all sit on one node, in the page size
//! asked for, and threads pinned to chosen CPUs.

use crate::CalibrateError;
use numalab_core::{MemPolicy, NodeId, NodeMask};
use numalab_linux::syscalls::mbind;
use numalab_linux::{MbindFlags, ModeFlags, Pid, SysRoot};

pub const BASE_PAGE_BYTES: usize = 4096;
pub const HUGE_PAGE_BYTES: usize = 2 << 20;

/// The page size a buffer asks for with madvise (transparent huge pages or not).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Pages {
    /// MADV_NOHUGEPAGE: 4 KiB pages.
    Base,
    /// MADV_HUGEPAGE: 2 MiB transparent huge pages where the kernel gives them.
    Huge,
}

/// An anonymous mapping bound to one node (MPOL_BIND) and faulted in, 2 MiB-aligned.
pub struct NodeBuffer {
    ptr: *mut u8,
    len: usize,
    /// The node's OS number (what mbind takes).
    pub os_node: u32,
}

// SAFETY: the buffer is plain memory owned by this value; the measurements share it read-only
// between threads, or write disjoint lines before any reader starts.
unsafe impl Send for NodeBuffer {}
unsafe impl Sync for NodeBuffer {}

impl NodeBuffer {
    /// Map `len` bytes (rounded up to 2 MiB), bind them to `os_node`, advise `pages` and, when
    /// `touch`, write every page so that each is allocated now, on that node.
    pub fn new(
        len: usize,
        os_node: u32,
        pages: Pages,
        touch: bool,
    ) -> Result<Self, CalibrateError> {
        let len = len.div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
        let map_len = len + HUGE_PAGE_BYTES;
        // SAFETY: a fresh private anonymous mapping; no existing memory is touched.
        let raw = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if raw == libc::MAP_FAILED {
            return Err(CalibrateError::Os {
                what: format!("mmap of {} MiB", map_len >> 20),
                err: std::io::Error::last_os_error(),
            });
        }
        // Keep a 2 MiB-aligned window so that huge pages can back all of it; give back the rest.
        let start = (raw as usize).div_ceil(HUGE_PAGE_BYTES) * HUGE_PAGE_BYTES;
        let head = start - raw as usize;
        let tail = map_len - head - len;
        // SAFETY: both ranges lie inside the mapping just made and are not used.
        unsafe {
            if head > 0 {
                libc::munmap(raw, head);
            }
            if tail > 0 {
                libc::munmap((start + len) as *mut libc::c_void, tail);
            }
        }
        let buf = NodeBuffer {
            ptr: start as *mut u8,
            len,
            os_node,
        };
        let advice = match pages {
            Pages::Base => libc::MADV_NOHUGEPAGE,
            Pages::Huge => libc::MADV_HUGEPAGE,
        };
        // SAFETY: madvise on our own mapping. A kernel without THP refuses MADV_HUGEPAGE with
        // EINVAL: the buffer then has base pages, which huge_fraction reports.
        unsafe { libc::madvise(buf.ptr as *mut libc::c_void, len, advice) };
        let node = NodeId(os_node as u16);
        mbind(
            buf.ptr as usize,
            len,
            &MemPolicy::Bind {
                nodes: NodeMask::single(node),
                numa_balancing: false,
            },
            ModeFlags::empty(),
            MbindFlags::empty(),
        )
        .map_err(|e| CalibrateError::Linux {
            what: format!("binding a buffer to node {os_node}"),
            err: e,
        })?;
        if touch {
            buf.touch();
        }
        Ok(buf)
    }

    /// Write one byte per base page: each page is faulted in, on the bound node.
    pub fn touch(&self) {
        self.touch_every(BASE_PAGE_BYTES);
    }

    /// Write one byte every `step` bytes (a page size: one first-touch fault per page).
    pub fn touch_every(&self, step: usize) {
        for off in (0..self.len).step_by(step) {
            // SAFETY: off < len, inside the mapping.
            unsafe { std::ptr::write_volatile(self.ptr.add(off), 1) };
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn addr(&self) -> usize {
        self.ptr as usize
    }

    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// The buffer as 64-bit words (it is always a multiple of 2 MiB, so of 8 bytes).
    pub fn words(&self) -> &[u64] {
        // SAFETY: the mapping is readable, aligned and `len` bytes long; nothing writes it
        // while measurements read it.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u64, self.len / 8) }
    }

    /// The share of the buffer that transparent huge pages back, from /proc/self/smaps
    /// (`AnonHugePages` of the VMA holding it); None when smaps cannot be read.
    pub fn huge_fraction(&self) -> Option<f64> {
        let vmas = numalab_linux::smaps::read_smaps(&SysRoot::host(), Pid::SELF).ok()?;
        let start = self.addr() as u64;
        let end = start + self.len as u64;
        let huge_kb: u64 = vmas
            .iter()
            .filter(|v| v.start < end && v.end > start)
            .filter_map(|v| v.anon_huge_pages_kb)
            .sum();
        Some(((huge_kb * 1024) as f64 / self.len as f64).min(1.0))
    }

    /// Base-page addresses of the buffer, one every `step` bytes (for move_pages).
    pub fn page_addrs(&self, step: usize) -> Vec<usize> {
        (0..self.len)
            .step_by(step)
            .map(|o| self.addr() + o)
            .collect()
    }
}

impl Drop for NodeBuffer {
    fn drop(&mut self) {
        // SAFETY: exactly the window kept in `new`.
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.len) };
    }
}

/// Pin the calling thread to one CPU.
pub fn pin_to(cpu: u32) -> Result<(), CalibrateError> {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET only writes inside it.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    unsafe { libc::CPU_SET(cpu as usize, &mut set) };
    // SAFETY: 0 = the calling thread; the set is initialised above.
    if unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) } != 0 {
        return Err(CalibrateError::Os {
            what: format!("pinning a thread to CPU {cpu}"),
            err: std::io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Result<Vec<u32>, CalibrateError> {
    // SAFETY: as in pin_to.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    if unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) } != 0
    {
        return Err(CalibrateError::Os {
            what: "reading this process's CPU affinity".into(),
            err: std::io::Error::last_os_error(),
        });
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&i| unsafe { libc::CPU_ISSET(i, &set) })
        .map(|i| i as u32)
        .collect())
}
