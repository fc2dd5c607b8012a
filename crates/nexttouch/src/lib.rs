//! Migrate-on-next-touch for real Linux processes, in user space (reference/policies.md section 4,
//! "User-space next-touch", Goglin & Furmento).
//!
//! [`mark`] protects a range with `mprotect(PROT_NONE)` and registers it. The first access to a
//! marked page raises SIGSEGV; the handler finds the area, asks the kernel which node the touching
//! CPU belongs to (`getcpu`), restores the original protection of the touched page
//! ([`Granularity::Page`]) or of the whole area ([`Granularity::Area`]), moves it there with
//! `move_pages(..., MPOL_MF_MOVE)` and returns, so the access retries and succeeds. (Protection
//! comes back before the move because Linux 6.1 to 6.4 `move_pages` cannot see PROT_NONE-mapped
//! pages.) Faults outside numalab's areas go
//! to the handler installed before ours. See docs/nexttouch.md for use from Rust, from C and via
//! `numalab run --next-touch` (LD_PRELOAD), and for the limits.
//!
//! Limits (details in docs/nexttouch.md):
//! - Page granularity restores protection one page at a time, which splits the VMA; a huge area
//!   touched sparsely can reach `vm.max_map_count` (65530 by default). Then mprotect fails with
//!   ENOMEM and the handler restores the whole area instead (counted in `protect_failures`): the
//!   area's remaining pages are no longer next-touch.
//! - A transparent huge page moves whole: `move_pages` on one base page of a THP migrates the
//!   whole 2 MiB folio (or splits it when the target has no huge page free).
//! - The kernel's own accesses to a marked page (`read(2)` into it, futexes) do not fault into
//!   user space: they fail with EFAULT. Touch buffers before passing them to syscalls.
//! - Marked ranges must be readable and writable; another SIGSEGV handler installed after ours
//!   must chain to it (as ours chains to the previous one).

mod area;
pub mod bench;
mod capi;
mod maps;
mod preload;
mod sys;
mod uffd;

pub use area::MAX_AREAS;
pub use preload::{phase, PhaseReport};

/// What a touch moves.
#[repr(u8)]
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// Only the touched base page (the kernel next-touch's unit).
    Page = 0,
    /// The whole marked area, at its first touch (Goglin's unit: a recorded structure).
    Area = 1,
}

impl Granularity {
    /// `page` or `area` (as NUMALAB_NEXT_TOUCH_GRANULARITY spells it).
    pub fn parse(s: &str) -> Option<Granularity> {
        match s.trim().to_ascii_lowercase().as_str() {
            "page" => Some(Granularity::Page),
            "area" => Some(Granularity::Area),
            _ => None,
        }
    }
    /// The C ABI's value (`NUMALAB_NT_PAGE` = 0, `NUMALAB_NT_AREA` = 1).
    pub fn from_c(v: i32) -> Option<Granularity> {
        match v {
            0 => Some(Granularity::Page),
            1 => Some(Granularity::Area),
            _ => None,
        }
    }
}

/// A marked area, as returned by [`mark`]: slot index in the low 32 bits, generation above.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct AreaId(pub u64);

/// Process-wide counters (the C ABI's `struct numalab_nt_stats`, field for field).
#[repr(C)]
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// SIGSEGVs handled inside marked areas (a thread that waited for another's move counts too).
    pub touches: u64,
    /// Pages that move_pages reported on the toucher's node afterwards (moved, or already there).
    pub pages_moved: u64,
    /// Pages never touched before marking (move_pages: ENOENT); first touch places them locally.
    pub pages_not_present: u64,
    /// Pages move_pages could not move (EBUSY, EACCES, ENOMEM, ... or the call failed).
    pub move_failures: u64,
    /// Protection restores that failed and fell back to restoring the whole area.
    pub protect_failures: u64,
    /// SIGSEGVs passed to the previously installed handler.
    pub chained_signals: u64,
    /// Areas marked now.
    pub live_areas: u64,
    /// Phase boundaries processed (preload mode and [`phase`]).
    pub phases: u64,
}

/// Counters of one area.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct AreaStats {
    pub start: usize,
    pub len_bytes: usize,
    pub granularity: Granularity,
    pub touches: u64,
    pub pages_moved: u64,
    pub pages_not_present: u64,
    pub move_failures: u64,
    pub protect_failures: u64,
    /// Pages that have not been touched since marking (and so would still move on touch).
    pub pages_still_marked: u64,
}

/// Why a call was refused. Nothing was applied when an error is returned.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum Error {
    #[error("mark: address {addr:#x} is not aligned to the page size ({page_bytes} bytes); pass a page-aligned start (mmap, or posix_memalign with the page size)")]
    Unaligned { addr: usize, page_bytes: usize },
    #[error("mark: zero-length range at {addr:#x}; pass at least one byte")]
    ZeroLength { addr: usize },
    #[error("mark: range {addr:#x} + {len_bytes} bytes wraps around the address space")]
    Overflow { addr: usize, len_bytes: usize },
    #[error("mark: range {addr:#x}..{end:#x} is not fully mapped: nothing mapped at {hole:#x}; mark only memory the process has mapped", end = addr + len_bytes)]
    NotMapped {
        addr: usize,
        len_bytes: usize,
        hole: usize,
    },
    #[error("mark: {start:#x}..{end:#x} is mapped {perms}; next-touch needs read-write memory (the handler restores the original protection, and must tell its own faults from real ones)")]
    NotReadWrite {
        start: usize,
        end: usize,
        perms: String,
    },
    #[error("mark: range {addr:#x}..{end:#x} overlaps the marked area {area_start:#x}..{area_end:#x}; unmark it first", end = addr + len_bytes)]
    Overlap {
        addr: usize,
        len_bytes: usize,
        area_start: usize,
        area_end: usize,
    },
    #[error("mark: {max} areas are marked already (the handler's fixed table); unmark some first")]
    TooManyAreas { max: usize },
    #[error("unmark: no marked area {id:?} (never marked, or unmarked already)")]
    UnknownArea { id: AreaId },
    #[error("unmark: no marked area contains {addr:#x}")]
    NoAreaAt { addr: usize },
    #[error("{call} failed: {}", std::io::Error::from_raw_os_error(*errno))]
    Sys { call: &'static str, errno: i32 },
}

impl Error {
    /// The errno the C ABI returns (negated) for this error.
    pub fn errno(&self) -> i32 {
        match self {
            Error::Unaligned { .. } | Error::ZeroLength { .. } | Error::Overflow { .. } => {
                libc::EINVAL
            }
            Error::NotMapped { .. } => libc::ENOMEM, // what mprotect/madvise say for a hole
            Error::NotReadWrite { .. } => libc::EACCES,
            Error::Overlap { .. } => libc::EEXIST,
            Error::TooManyAreas { .. } => libc::ENOSPC,
            Error::UnknownArea { .. } | Error::NoAreaAt { .. } => libc::ENOENT,
            Error::Sys { errno, .. } => *errno,
        }
    }
}

/// Install the SIGSEGV handler (idempotent; [`mark`] calls it). The handler that was installed
/// before is kept and receives every fault outside numalab's areas.
pub fn install() -> Result<(), Error> {
    area::install()
}

/// Mark `len_bytes` from `addr` (page-aligned; the length is rounded up to whole pages) for
/// migrate-on-next-touch with `granularity`. The range must be mapped read-write and not overlap
/// another marked area. On error nothing has changed.
pub fn mark(addr: *mut u8, len_bytes: usize, granularity: Granularity) -> Result<AreaId, Error> {
    area::mark(addr as usize, len_bytes, granularity)
}

/// Forget an area: pages not touched yet get their protection back without moving.
pub fn unmark(id: AreaId) -> Result<(), Error> {
    area::unmark(id)
}

/// [`unmark`] the area that contains `addr`.
pub fn unmark_at(addr: *const u8) -> Result<(), Error> {
    let id = area::area_at(addr as usize).ok_or(Error::NoAreaAt {
        addr: addr as usize,
    })?;
    area::unmark(id)
}

/// Process-wide counters.
pub fn stats() -> Stats {
    area::stats()
}

/// Counters of a live area (None once it is unmarked).
pub fn area_stats(id: AreaId) -> Option<AreaStats> {
    area::area_stats(id)
}

/// The node each page of `pages` is on now (move_pages query): `Ok(node)` or `Err(-errno status)`.
/// For tests and benchmarks; the handler never calls this.
///
/// A page that is still marked (mapped PROT_NONE) reads as `Err(-ENOENT)` on Linux 6.1 to 6.4,
/// whose move_pages does not look through PROT_NONE mappings (see docs/nexttouch.md); query it
/// after it was touched or unmarked.
pub fn page_nodes(pages: &[usize]) -> Result<Vec<Result<u32, i32>>, Error> {
    let ptrs: Vec<*mut std::ffi::c_void> =
        pages.iter().map(|&p| p as *mut std::ffi::c_void).collect();
    let mut status = vec![i32::MIN; pages.len()];
    // SAFETY: both arrays hold pages.len() elements.
    let r = unsafe { sys::query_pages(pages.len(), ptrs.as_ptr(), status.as_mut_ptr()) };
    if r < 0 {
        return Err(Error::Sys {
            call: "move_pages (query)",
            errno: std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        });
    }
    Ok(status
        .into_iter()
        .map(|s| if s >= 0 { Ok(s as u32) } else { Err(s) })
        .collect())
}

/// The node of the CPU the calling thread runs on (getcpu).
pub fn current_node() -> Option<numalab_core::NodeId> {
    sys::current_node().map(|n| numalab_core::NodeId(n as u16))
}

/// The base page size in bytes.
pub fn page_bytes() -> usize {
    sys::page_bytes()
}
