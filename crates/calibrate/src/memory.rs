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
        bind_to_node(buf.ptr as usize, len, os_node)?;
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

/// Bind `[addr, addr + len)` of this process to node `os_node` (MPOL_BIND): its pages are
/// allocated there when first touched.
pub fn bind_to_node(addr: usize, len: usize, os_node: u32) -> Result<(), CalibrateError> {
    mbind(
        addr,
        len,
        &MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(os_node as u16)),
            numa_balancing: false,
        },
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .map_err(|err| CalibrateError::Linux {
        what: format!("binding memory to node {os_node}"),
        err,
    })
}

/// Pin the calling thread to one CPU.
pub fn pin_to(cpu: u32) -> Result<(), CalibrateError> {
    numalab_linux::syscalls::set_cpu_affinity(0, &[numalab_core::CpuId(cpu)]).map_err(|err| {
        CalibrateError::Os {
            what: format!("pinning a thread to CPU {cpu}"),
            err,
        }
    })
}

/// Run `f` on a thread pinned to `cpu`, so that the caller's own affinity is left as it was.
pub fn on_cpu<T: Send>(
    cpu: u32,
    f: impl FnOnce() -> Result<T, CalibrateError> + Send,
) -> Result<T, CalibrateError> {
    std::thread::scope(|s| {
        s.spawn(|| {
            pin_to(cpu)?;
            f()
        })
        .join()
        .expect("a measuring thread")
    })
}

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> Result<Vec<u32>, CalibrateError> {
    numalab_linux::syscalls::cpu_affinity()
        .map(|cpus| cpus.into_iter().map(|c| c.0).collect())
        .map_err(|err| CalibrateError::Os {
            what: "reading this process's CPU affinity".into(),
            err,
        })
}
