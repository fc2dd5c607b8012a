//! The area registry and the SIGSEGV handler.
//!
//! Layout rules that keep the handler async-signal-safe:
//! - everything the handler reads or writes lives either in [`G`] (one static, so preload mode can
//!   exclude its pages from marking) or in an area's *storage*, a private mmap with a PROT_NONE
//!   guard page on each side (never the malloc heap, which preload mode marks);
//! - the handler takes no lock and allocates nothing; it synchronises with `mark`/`unmark` through
//!   atomics only: a per-slot reader count protects an area's storage from being unmapped while a
//!   handler uses it, and a per-page (or per-area) claim byte makes one toucher do the move while
//!   the others `sched_yield` until it is done.

use crate::sys;
use crate::{AreaId, AreaStats, Error, Granularity, Stats};
use std::cell::UnsafeCell;
use std::ffi::c_void;
use std::sync::atomic::{
    AtomicBool, AtomicI32, AtomicPtr, AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering::*,
};
use std::sync::Mutex;

/// Most areas registered at once. The handler scans slots linearly up to the high-water mark, so
/// this bounds the per-fault lookup (about 1 ns per slot in use).
pub const MAX_AREAS: usize = 8192;

const SLOT_FREE: u8 = 0;
const SLOT_LIVE: u8 = 1;
/// Unmarked; bounds kept until the slot is reused so a fault raised just before `unmark` restored
/// the protection (and delivered just after) is retried rather than treated as a real error.
const SLOT_RETIRED: u8 = 2;

/// Claim states of a page (Page granularity) or of the whole area (Area granularity).
const CLAIM_MARKED: u8 = 0;
const CLAIM_BUSY: u8 = 1;
const CLAIM_DONE: u8 = 2;

struct Slot {
    state: AtomicU8,
    start: AtomicUsize,
    end: AtomicUsize,
    area: AtomicPtr<AreaHeader>,
    readers: AtomicUsize,
    gen: AtomicU32,
    storage_start: AtomicUsize,
    storage_end: AtomicUsize,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            state: AtomicU8::new(SLOT_FREE),
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            area: AtomicPtr::new(std::ptr::null_mut()),
            readers: AtomicUsize::new(0),
            gen: AtomicU32::new(0),
            storage_start: AtomicUsize::new(0),
            storage_end: AtomicUsize::new(0),
        }
    }
}

#[derive(Default)]
pub(crate) struct Counters {
    pub touches: AtomicU64,
    pub pages_moved: AtomicU64,
    pub pages_not_present: AtomicU64,
    pub move_failures: AtomicU64,
    pub protect_failures: AtomicU64,
}

impl Counters {
    const fn new() -> Counters {
        Counters {
            touches: AtomicU64::new(0),
            pages_moved: AtomicU64::new(0),
            pages_not_present: AtomicU64::new(0),
            move_failures: AtomicU64::new(0),
            protect_failures: AtomicU64::new(0),
        }
    }
    fn add(&self, c: &AtomicU64, local: &AtomicU64, n: u64) {
        let _ = self;
        c.fetch_add(n, Relaxed);
        local.fetch_add(n, Relaxed);
    }
}

/// The previous SIGSEGV disposition, written once before our handler is installed.
struct PrevAction(UnsafeCell<libc::sigaction>);
// SAFETY: written only inside `install`'s Once before the handler can run, read-only afterwards.
unsafe impl Sync for PrevAction {}

/// All state the handler touches, in one static (see the module comment).
pub(crate) struct Global {
    slots: [Slot; MAX_AREAS],
    high: AtomicUsize,
    pub page_bytes: AtomicUsize,
    pub counters: Counters,
    pub chained_signals: AtomicU64,
    pub phases: AtomicU64,
    pub live_areas: AtomicU64,
    prev: PrevAction,
    pub installed: AtomicBool,
    /// Write end of the preload helper's pipe (-1 when there is no helper).
    pub phase_pipe_wr: AtomicI32,
}

pub(crate) static G: Global = Global {
    slots: [const { Slot::new() }; MAX_AREAS],
    high: AtomicUsize::new(0),
    page_bytes: AtomicUsize::new(4096),
    counters: Counters::new(),
    chained_signals: AtomicU64::new(0),
    phases: AtomicU64::new(0),
    live_areas: AtomicU64::new(0),
    // SAFETY: sigaction is plain old data; all-zero is SIG_DFL with no flags.
    prev: PrevAction(UnsafeCell::new(unsafe { std::mem::zeroed() })),
    installed: AtomicBool::new(false),
    phase_pipe_wr: AtomicI32::new(-1),
};

/// The address range of [`G`], which preload mode must never mark.
pub(crate) fn global_range() -> (usize, usize) {
    let a = &G as *const Global as usize;
    (a, a + std::mem::size_of::<Global>())
}

/// Serialises mark/unmark (never taken by the handler).
static MARK_LOCK: Mutex<MarkState> = Mutex::new(MarkState { cursor: 0 });
struct MarkState {
    /// Round-robin slot cursor, so a retired slot stays retired as long as possible.
    cursor: usize,
}

/// The head of an area's storage; the arrays follow it in the same mapping.
#[repr(C)]
struct AreaHeader {
    start: usize,
    len_bytes: usize,
    npages: usize,
    granularity: Granularity,
    unmarking: AtomicBool,
    /// Set when a per-page mprotect failed (e.g. vm.max_map_count reached) and the whole area's
    /// protection was restored instead: its remaining pages no longer fault.
    degraded: AtomicBool,
    /// Area granularity: the one claim byte.
    area_claim: AtomicU8,
    counters: Counters,
    storage_base: usize,
    storage_bytes: usize,
    /// Byte offsets from the header of: claim bytes (npages, Page granularity), original
    /// protection per page (npages bytes), and for Area granularity page addresses (npages
    /// pointers), target nodes and statuses (npages c_ints each).
    claims_off: usize,
    prot_off: usize,
    pages_off: usize,
    nodes_off: usize,
    status_off: usize,
}

impl AreaHeader {
    fn base(&self) -> *const u8 {
        self as *const AreaHeader as *const u8
    }
    fn claims(&self) -> &[AtomicU8] {
        let n = if self.granularity == Granularity::Page {
            self.npages
        } else {
            0
        };
        // SAFETY: the storage holds `n` claim bytes at claims_off, initialised to 0 by mmap.
        unsafe {
            std::slice::from_raw_parts(self.base().add(self.claims_off) as *const AtomicU8, n)
        }
    }
    fn prots(&self) -> &[u8] {
        // SAFETY: npages protection bytes written by `mark` before publication.
        unsafe { std::slice::from_raw_parts(self.base().add(self.prot_off), self.npages) }
    }
    fn contains(&self, addr: usize) -> bool {
        addr >= self.start && addr - self.start < self.len_bytes
    }

    /// Restore every page's original protection, one mprotect per run of equal protection.
    fn restore_all(&self, page: usize) -> bool {
        let prots = self.prots();
        let mut ok = true;
        let mut i = 0;
        while i < prots.len() {
            let mut j = i + 1;
            while j < prots.len() && prots[j] == prots[i] {
                j += 1;
            }
            ok &= sys::mprotect(
                self.start + i * page,
                (j - i) * page,
                prots[i] as libc::c_int,
            );
            i = j;
        }
        ok
    }

    /// Page granularity: restore one page; if the kernel refuses (ENOMEM when splitting the VMA
    /// would pass vm.max_map_count), restore the whole area so the toucher is not stuck faulting.
    fn restore_page(&self, idx: usize, page: usize) {
        if !sys::mprotect(
            self.start + idx * page,
            page,
            self.prots()[idx] as libc::c_int,
        ) {
            G.counters.add(
                &G.counters.protect_failures,
                &self.counters.protect_failures,
                1,
            );
            self.degraded.store(true, Release);
            self.restore_all(page);
        }
    }

    fn count_status(&self, status: libc::c_int, node: libc::c_int) {
        let c = &G.counters;
        if status == node {
            c.add(&c.pages_moved, &self.counters.pages_moved, 1);
        } else if status == -libc::ENOENT {
            // Never touched: the retried access allocates it by first touch, on this node.
            c.add(&c.pages_not_present, &self.counters.pages_not_present, 1);
        } else {
            c.add(&c.move_failures, &self.counters.move_failures, 1);
        }
    }

    fn move_one(&self, page_addr: usize) {
        let Some(node) = sys::current_node() else {
            G.counters
                .add(&G.counters.move_failures, &self.counters.move_failures, 1);
            return;
        };
        let pages = [page_addr as *mut c_void];
        let nodes = [node as libc::c_int];
        let mut status = [i32::MIN];
        // SAFETY: one-element arrays on the stack.
        let r = unsafe { sys::move_pages(1, pages.as_ptr(), nodes.as_ptr(), status.as_mut_ptr()) };
        if r < 0 {
            G.counters
                .add(&G.counters.move_failures, &self.counters.move_failures, 1);
        } else {
            self.count_status(status[0], nodes[0]);
        }
    }

    fn move_all(&self) {
        let n = self.npages;
        let Some(node) = sys::current_node() else {
            G.counters.add(
                &G.counters.move_failures,
                &self.counters.move_failures,
                n as u64,
            );
            return;
        };
        // SAFETY: the Area-granularity arrays hold npages elements each; only the claim winner
        // writes nodes/status, once.
        unsafe {
            let pages = self.base().add(self.pages_off) as *const *mut c_void;
            let nodes = self.base().add(self.nodes_off) as *mut libc::c_int;
            let status = self.base().add(self.status_off) as *mut libc::c_int;
            for i in 0..n {
                *nodes.add(i) = node as libc::c_int;
                *status.add(i) = i32::MIN;
            }
            let r = sys::move_pages(n, pages, nodes, status);
            if r < 0 {
                G.counters.add(
                    &G.counters.move_failures,
                    &self.counters.move_failures,
                    n as u64,
                );
                return;
            }
            for i in 0..n {
                self.count_status(*status.add(i), node as libc::c_int);
            }
        }
    }

    /// Handle a fault at `addr` inside this area. Returns false when the fault is not ours after
    /// all (the page is done and still unreadable: someone else protected it).
    fn on_fault(&self, addr: usize, page: usize) -> bool {
        G.counters
            .add(&G.counters.touches, &self.counters.touches, 1);
        let unmarking = self.unmarking.load(Acquire);
        let claim = match self.granularity {
            Granularity::Page => &self.claims()[(addr - self.start) / page],
            Granularity::Area => &self.area_claim,
        };
        match claim.compare_exchange(CLAIM_MARKED, CLAIM_BUSY, AcqRel, Acquire) {
            Ok(_) => {
                // Restore the protection first, then move: on Linux 6.1 to 6.4 move_pages does
                // not see PROT_NONE-mapped pages at all (follow_page() treats them like NUMA
                // hinting entries and fails with ENOENT: upstream 474098edac26, fixed in 6.5 by
                // d74943a2f3cd, never backported to 6.1). Moving an accessible page is the same
                // on every kernel; a thread that accesses it between the two calls just does not
                // fault, and the migration itself is transparent to concurrent accesses.
                match self.granularity {
                    Granularity::Page => {
                        let idx = (addr - self.start) / page;
                        self.restore_page(idx, page);
                        if !unmarking {
                            self.move_one(self.start + idx * page);
                        }
                    }
                    Granularity::Area => {
                        if !self.restore_all(page) {
                            G.counters.add(
                                &G.counters.protect_failures,
                                &self.counters.protect_failures,
                                1,
                            );
                        }
                        if !unmarking {
                            self.move_all();
                        }
                    }
                }
                claim.store(CLAIM_DONE, Release);
                true
            }
            Err(CLAIM_BUSY) => {
                // Another thread is moving this unit: wait until its protection is restored.
                while claim.load(Acquire) == CLAIM_BUSY {
                    sys::yield_now();
                }
                true
            }
            // Done already: a fault raised before the winner restored the protection retries;
            // anything else (the page made inaccessible since) is not ours.
            Err(_) => sys::readable(addr),
        }
    }
}

/// si_code of a fault on a mapped page without the needed permission (asm-generic/siginfo.h);
/// the libc crate does not export it.
const SEGV_ACCERR: libc::c_int = 2;

/// What the handler decided.
enum Fault {
    Handled,
    NotOurs,
}

fn handle_fault(addr: usize) -> Fault {
    let page = G.page_bytes.load(Relaxed);
    let high = G.high.load(Acquire);
    let mut stale_hit = false;
    for s in &G.slots[..high] {
        let st = s.state.load(Acquire);
        if st == SLOT_FREE {
            continue;
        }
        if addr < s.start.load(Acquire) || addr >= s.end.load(Acquire) {
            continue;
        }
        if st == SLOT_RETIRED {
            stale_hit = true;
            continue;
        }
        s.readers.fetch_add(1, SeqCst);
        let p = s.area.load(SeqCst);
        // SAFETY: `unmark` nulls `area` and then waits for `readers` to drop to zero before it
        // unmaps the storage, so a non-null pointer loaded after our increment stays valid.
        let done = (!p.is_null())
            .then(|| unsafe { &*p })
            .filter(|h| h.contains(addr))
            .map(|h| h.on_fault(addr, page));
        s.readers.fetch_sub(1, SeqCst);
        match done {
            Some(true) => return Fault::Handled,
            Some(false) => return Fault::NotOurs,
            None => stale_hit = true, // unmarked or reused while we looked
        }
    }
    if stale_hit && sys::readable(addr) {
        Fault::Handled
    } else {
        Fault::NotOurs
    }
}

extern "C" fn on_sigsegv(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo for SA_SIGINFO handlers.
    let (code, addr) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
    // Our faults are access errors on mapped pages; SEGV_MAPERR (nothing mapped) never is.
    if code == SEGV_ACCERR {
        if let Fault::Handled = handle_fault(addr) {
            return;
        }
    }
    // SAFETY: forwarding the kernel's arguments unchanged.
    unsafe { chain(sig, info, ctx) }
}

/// Pass a fault that is not ours to the handler that was installed before us.
unsafe fn chain(sig: libc::c_int, info: *mut libc::siginfo_t, ctx: *mut c_void) {
    G.chained_signals.fetch_add(1, Relaxed);
    let prev = &*G.prev.0.get();
    let h = prev.sa_sigaction;
    if h == libc::SIG_DFL || h == libc::SIG_IGN || prev.sa_flags & libc::SA_RESETHAND != 0 {
        // Reset as the kernel would have; for SIG_DFL/SIG_IGN returning re-executes the access,
        // which faults again and kills the process with SIGSEGV as if we had never been here
        // (a synchronous SIGSEGV cannot be ignored).
        let mut dfl: libc::sigaction = std::mem::zeroed();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut());
        if h == libc::SIG_DFL || h == libc::SIG_IGN {
            return;
        }
    }
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        let f: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void) =
            std::mem::transmute(h);
        f(sig, info, ctx);
    } else {
        let f: extern "C" fn(libc::c_int) = std::mem::transmute(h);
        f(sig);
    }
}

static INSTALL: std::sync::Once = std::sync::Once::new();
static INSTALL_ERRNO: AtomicI32 = AtomicI32::new(0);

/// Install the SIGSEGV handler (once per process; later calls return the first result).
pub fn install() -> Result<(), Error> {
    INSTALL.call_once(|| {
        G.page_bytes.store(sys::page_bytes(), Relaxed);
        // Resolve every libc entry point the handlers use now, outside any signal, in case the
        // library was linked without BIND_NOW (lazy binding would run ld.so in the handler).
        let _ = sys::current_node();
        sys::yield_now();
        let _ = sys::readable(&G as *const Global as usize);
        let _ = sys::mprotect(0, 0, libc::PROT_NONE);
        // SAFETY: plain sigaction calls with valid structs; `prev` is written before any fault
        // can reach the new handler.
        unsafe {
            let _ = libc::__errno_location();
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = on_sigsegv
                as extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut c_void)
                as usize;
            // SA_ONSTACK: run on the thread's alternate stack when it has one, so a stack
            // overflow still reaches the previous handler (Rust's guard-page reporter).
            act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_RESTART;
            libc::sigemptyset(&mut act.sa_mask);
            if libc::sigaction(libc::SIGSEGV, &act, G.prev.0.get()) != 0 {
                INSTALL_ERRNO.store(
                    std::io::Error::last_os_error()
                        .raw_os_error()
                        .unwrap_or(libc::EINVAL),
                    Relaxed,
                );
                return;
            }
        }
        G.installed.store(true, Release);
    });
    match INSTALL_ERRNO.load(Relaxed) {
        0 => Ok(()),
        e => Err(Error::Sys {
            call: "sigaction(SIGSEGV)",
            errno: e,
        }),
    }
}

fn last_errno() -> i32 {
    std::io::Error::last_os_error()
        .raw_os_error()
        .unwrap_or(libc::EIO)
}

fn round_up(v: usize, to: usize) -> usize {
    v.div_ceil(to) * to
}

/// Map storage of `bytes` with a PROT_NONE guard page on each side: guards keep the kernel from
/// merging it with a neighbouring anonymous mapping that preload mode could mark, and make it
/// look like a stack to the preload scan (which skips mappings that follow a guard).
fn map_storage(bytes: usize, page: usize) -> Result<(usize, usize), Error> {
    let total = round_up(bytes, page) + 2 * page;
    // SAFETY: a fresh private anonymous mapping; no existing memory is affected.
    let base = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            total,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if base == libc::MAP_FAILED {
        return Err(Error::Sys {
            call: "mmap (area storage)",
            errno: last_errno(),
        });
    }
    let base = base as usize;
    if !sys::mprotect(base, page, libc::PROT_NONE)
        || !sys::mprotect(base + total - page, page, libc::PROT_NONE)
    {
        let e = last_errno();
        // SAFETY: unmapping what we just mapped.
        unsafe { libc::munmap(base as *mut c_void, total) };
        return Err(Error::Sys {
            call: "mprotect (storage guard)",
            errno: e,
        });
    }
    Ok((base, total))
}

fn slot_of(id: AreaId) -> Option<&'static Slot> {
    let idx = (id.0 & 0xffff_ffff) as usize;
    let gen = (id.0 >> 32) as u32;
    let s = G.slots.get(idx)?;
    (s.state.load(Acquire) == SLOT_LIVE && s.gen.load(Acquire) == gen).then_some(s)
}

/// Validate, allocate storage, publish, then mprotect(PROT_NONE). See `crate::mark`.
pub fn mark(addr: usize, len_bytes: usize, granularity: Granularity) -> Result<AreaId, Error> {
    install()?;
    let page = G.page_bytes.load(Relaxed);
    if addr & (page - 1) != 0 {
        return Err(Error::Unaligned {
            addr,
            page_bytes: page,
        });
    }
    if len_bytes == 0 {
        return Err(Error::ZeroLength { addr });
    }
    let len = round_up(len_bytes, page);
    let end = addr
        .checked_add(len)
        .ok_or(Error::Overflow { addr, len_bytes })?;
    let npages = len / page;

    let mut guard = MARK_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    // Overlap first: a marked range reads as ---p in the maps and would be misreported.
    for s in &G.slots[..G.high.load(Acquire)] {
        if s.state.load(Acquire) == SLOT_LIVE {
            let (a, b) = (s.start.load(Acquire), s.end.load(Acquire));
            if a < end && addr < b {
                return Err(Error::Overlap {
                    addr,
                    len_bytes: len,
                    area_start: a,
                    area_end: b,
                });
            }
        }
    }
    // The original protection of every page; the range must be mapped without holes.
    let maps = crate::maps::read_self().map_err(|e| Error::Sys {
        call: "read /proc/self/maps",
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    })?;
    let mut runs: Vec<(usize, usize, libc::c_int)> = Vec::new();
    let mut cursor = addr;
    for m in maps.iter().filter(|m| m.end > addr && m.start < end) {
        if m.start > cursor {
            break;
        }
        if !(m.readable() && m.writable()) {
            return Err(Error::NotReadWrite {
                start: m.start.max(addr),
                end: m.end.min(end),
                perms: m.perms_str(),
            });
        }
        runs.push((cursor, m.end.min(end), m.prot()));
        cursor = m.end.min(end);
    }
    if cursor < end {
        return Err(Error::NotMapped {
            addr,
            len_bytes: len,
            hole: cursor,
        });
    }
    // A free slot, or else the retired slot the cursor reaches first (retired longest ago, mostly).
    let pick = (0..MAX_AREAS)
        .map(|k| (guard.cursor + k) % MAX_AREAS)
        .find(|&i| G.slots[i].state.load(Acquire) == SLOT_FREE)
        .or_else(|| {
            (0..MAX_AREAS)
                .map(|k| (guard.cursor + k) % MAX_AREAS)
                .find(|&i| G.slots[i].state.load(Acquire) == SLOT_RETIRED)
        });
    let Some(idx) = pick else {
        return Err(Error::TooManyAreas { max: MAX_AREAS });
    };
    guard.cursor = (idx + 1) % MAX_AREAS;

    // Storage: header, then the arrays, each aligned for its element type.
    let ptr_bytes = std::mem::size_of::<usize>();
    let int_bytes = std::mem::size_of::<libc::c_int>();
    let mut off = round_up(std::mem::size_of::<AreaHeader>(), 64);
    let claims_off = off;
    if granularity == Granularity::Page {
        off += npages;
    }
    let prot_off = off;
    off = round_up(off + npages, ptr_bytes);
    let pages_off = off;
    let (nodes_off, status_off);
    if granularity == Granularity::Area {
        off += npages * ptr_bytes;
        nodes_off = off;
        off += npages * int_bytes;
        status_off = off;
        off += npages * int_bytes;
    } else {
        nodes_off = off;
        status_off = off;
    }
    let (sbase, sbytes) = map_storage(off, page)?;
    let hptr = (sbase + page) as *mut AreaHeader;
    // SAFETY: the storage is fresh, writable, page-aligned and `off` bytes long; nothing else
    // sees it until it is published below.
    unsafe {
        hptr.write(AreaHeader {
            start: addr,
            len_bytes: len,
            npages,
            granularity,
            unmarking: AtomicBool::new(false),
            degraded: AtomicBool::new(false),
            area_claim: AtomicU8::new(CLAIM_MARKED),
            counters: Counters::new(),
            storage_base: sbase,
            storage_bytes: sbytes,
            claims_off,
            prot_off,
            pages_off,
            nodes_off,
            status_off,
        });
        let b = hptr as *mut u8;
        for &(a, e, prot) in &runs {
            for p in (a..e).step_by(page) {
                *b.add(prot_off + (p - addr) / page) = prot as u8;
            }
        }
        if granularity == Granularity::Area {
            let pages = b.add(pages_off) as *mut usize;
            for i in 0..npages {
                *pages.add(i) = addr + i * page;
            }
        }
    }
    // Publish before protecting: a touch right after mprotect must find the area.
    let s = &G.slots[idx];
    let gen = s.gen.load(Relaxed).wrapping_add(1);
    s.state.store(SLOT_FREE, SeqCst);
    s.start.store(addr, SeqCst);
    s.end.store(end, SeqCst);
    s.storage_start.store(sbase, SeqCst);
    s.storage_end.store(sbase + sbytes, SeqCst);
    s.gen.store(gen, SeqCst);
    s.area.store(hptr, SeqCst);
    s.state.store(SLOT_LIVE, SeqCst);
    G.high.fetch_max(idx + 1, SeqCst);
    if !sys::mprotect(addr, len, libc::PROT_NONE) {
        // e.g. ENOMEM: the VMA split would pass vm.max_map_count. mprotect may have changed part
        // of the range, so put every page back before reporting, and nothing stays applied.
        let e = last_errno();
        // SAFETY: hptr is the header we just wrote.
        let h = unsafe { &*hptr };
        h.unmarking.store(true, SeqCst);
        h.restore_all(page);
        retire(s, h);
        return Err(Error::Sys {
            call: "mprotect(PROT_NONE)",
            errno: e,
        });
    }
    G.live_areas.fetch_add(1, Relaxed);
    Ok(AreaId(((gen as u64) << 32) | idx as u64))
}

/// Unpublish, wait for handlers that still use the storage, unmap it.
fn retire(s: &Slot, h: &AreaHeader) {
    s.state.store(SLOT_RETIRED, SeqCst);
    s.area.store(std::ptr::null_mut(), SeqCst);
    while s.readers.load(SeqCst) != 0 {
        sys::yield_now();
    }
    s.storage_start.store(0, SeqCst);
    s.storage_end.store(0, SeqCst);
    let (base, bytes) = (h.storage_base, h.storage_bytes);
    // SAFETY: no handler can reach the storage any more (pointer nulled, readers drained).
    unsafe { libc::munmap(base as *mut c_void, bytes) };
}

/// Restore the original protection of every page still marked and forget the area.
pub fn unmark(id: AreaId) -> Result<(), Error> {
    let _guard = MARK_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let s = slot_of(id).ok_or(Error::UnknownArea { id })?;
    let page = G.page_bytes.load(Relaxed);
    // SAFETY: LIVE slots always carry a valid header while MARK_LOCK is held.
    let h = unsafe { &*s.area.load(SeqCst) };
    // From here a touch restores its page without moving it; then restore the rest ourselves.
    h.unmarking.store(true, SeqCst);
    if !h.restore_all(page) {
        return Err(Error::Sys {
            call: "mprotect (unmark)",
            errno: last_errno(),
        });
    }
    retire(s, h);
    G.live_areas.fetch_sub(1, Relaxed);
    Ok(())
}

/// The live area containing `addr`.
pub fn area_at(addr: usize) -> Option<AreaId> {
    let _guard = MARK_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    G.slots[..G.high.load(Acquire)]
        .iter()
        .enumerate()
        .find_map(|(i, s)| {
            (s.state.load(Acquire) == SLOT_LIVE
                && s.start.load(Acquire) <= addr
                && addr < s.end.load(Acquire))
            .then(|| AreaId(((s.gen.load(Acquire) as u64) << 32) | i as u64))
        })
}

/// Counters of one live area.
pub fn area_stats(id: AreaId) -> Option<AreaStats> {
    let _guard = MARK_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    let s = slot_of(id)?;
    // SAFETY: LIVE slot under MARK_LOCK: the header is valid.
    let h = unsafe { &*s.area.load(SeqCst) };
    let c = &h.counters;
    Some(AreaStats {
        start: h.start,
        len_bytes: h.len_bytes,
        granularity: h.granularity,
        touches: c.touches.load(Relaxed),
        pages_moved: c.pages_moved.load(Relaxed),
        pages_not_present: c.pages_not_present.load(Relaxed),
        move_failures: c.move_failures.load(Relaxed),
        protect_failures: c.protect_failures.load(Relaxed),
        pages_still_marked: match h.granularity {
            _ if h.degraded.load(Acquire) => 0,
            Granularity::Page => h
                .claims()
                .iter()
                .filter(|c| c.load(Acquire) == CLAIM_MARKED)
                .count() as u64,
            Granularity::Area => {
                if h.area_claim.load(Acquire) == CLAIM_MARKED {
                    h.npages as u64
                } else {
                    0
                }
            }
        },
    })
}

/// The storage mappings of live areas (preload mode must never mark them).
pub fn storage_ranges() -> Vec<(usize, usize)> {
    G.slots[..G.high.load(Acquire)]
        .iter()
        .filter(|s| s.state.load(Acquire) == SLOT_LIVE)
        .map(|s| (s.storage_start.load(Acquire), s.storage_end.load(Acquire)))
        .filter(|&(a, b)| b > a)
        .collect()
}

/// Process-wide counters.
pub fn stats() -> Stats {
    let c = &G.counters;
    Stats {
        touches: c.touches.load(Relaxed),
        pages_moved: c.pages_moved.load(Relaxed),
        pages_not_present: c.pages_not_present.load(Relaxed),
        move_failures: c.move_failures.load(Relaxed),
        protect_failures: c.protect_failures.load(Relaxed),
        chained_signals: G.chained_signals.load(Relaxed),
        live_areas: G.live_areas.load(Relaxed),
        phases: G.phases.load(Relaxed),
    }
}
