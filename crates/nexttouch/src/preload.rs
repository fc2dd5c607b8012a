//! Phase mode: at each phase boundary, mark every private anonymous writable mapping of the
//! process next-touch (heap and anonymous mmaps; not stacks, not loaded objects' data, not this
//! library's own state). Used by `numalab run --next-touch` through LD_PRELOAD:
//!
//! - `NUMALAB_NEXT_TOUCH=1` makes the constructor install the SIGSEGV handler, a phase-signal
//!   handler and a helper thread;
//! - `NUMALAB_NEXT_TOUCH_GRANULARITY=page|area` (default `page`);
//! - `NUMALAB_NEXT_TOUCH_SIGNAL=N` (or `USR1`/`USR2`; default SIGUSR2): the signal that announces
//!   a phase boundary from outside (`kill -USR2 PID`). Its handler only writes a byte to a pipe;
//!   the helper thread reads it and does the marking;
//! - `NUMALAB_NEXT_TOUCH_VERBOSE=1`: the helper reports each phase on stderr.
//!
//! A program that links the library calls `numalab_nt_phase()` / [`phase`] instead, which marks
//! synchronously in the calling thread.

use crate::area::{self, G};
use crate::maps::{self, Mapping};
use crate::{Error, Granularity};
use std::sync::atomic::{AtomicUsize, Ordering::*};
use std::sync::Mutex;

/// What one phase boundary did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PhaseReport {
    /// Areas of the previous phase unmarked first (their untouched pages stay where they are).
    pub unmarked_previous: usize,
    pub areas_marked: usize,
    pub bytes_marked: usize,
    /// Candidate ranges that `mark` refused (e.g. overlapping an area marked through the API).
    pub skipped: usize,
}

/// Areas marked by the last phase, so the next one can unmark them first.
static PHASE_AREAS: Mutex<Vec<crate::AreaId>> = Mutex::new(Vec::new());

/// Pages holding some thread's errno and thread control block: glibc's `syscall()` writes errno
/// when a call fails and stack-protected code reads the TCB canary, so marking them would make
/// the handler fault inside itself. Thread stacks (which hold other threads' TCBs) are skipped
/// anyway; the main thread's TLS lives in the heap (static binaries) or an anonymous mmap.
const TLS_SLOTS: usize = 64;
static TLS_PAGES: [AtomicUsize; TLS_SLOTS] = [const { AtomicUsize::new(0) }; TLS_SLOTS];

fn remember_thread_pages() {
    // SAFETY: both calls have no preconditions.
    let (errno_at, tcb) = unsafe {
        (
            libc::__errno_location() as usize,
            libc::pthread_self() as usize,
        )
    };
    for addr in [errno_at, tcb] {
        if TLS_PAGES.iter().any(|s| s.load(Relaxed) == addr) {
            continue;
        }
        for s in &TLS_PAGES {
            if s.compare_exchange(0, addr, AcqRel, Relaxed).is_ok() {
                break;
            }
        }
    }
}

/// Ranges preload must not mark: [`G`], every area's storage, recorded TLS pages.
fn exclusions(page: usize) -> Vec<(usize, usize)> {
    let mut ex = vec![area::global_range()];
    ex.extend(area::storage_ranges());
    for s in &TLS_PAGES {
        let a = s.load(Acquire);
        if a != 0 {
            let p = a / page * page;
            // The TCB and static TLS straddle pages; keep one page either side.
            ex.push((p.saturating_sub(page), p + 2 * page));
        }
    }
    ex
}

/// The ranges a phase marks, from the process's mappings: `rw-p` anonymous or `[heap]`, minus
/// mappings right after a PROT_NONE one (thread stacks and signal stacks, which sit above their
/// guard page; our own storage looks the same), minus anonymous mappings right after a file
/// mapping (a loaded object's .bss), minus the mapping holding `sp` (the caller's stack), minus
/// `exclude` (split around, page-aligned outward).
pub(crate) fn candidates(
    maps: &[Mapping],
    exclude: &[(usize, usize)],
    sp: usize,
    page: usize,
) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (i, m) in maps.iter().enumerate() {
        if &m.perms != b"rw-p" || !(m.path.is_empty() || m.path == "[heap]") {
            continue;
        }
        if m.start <= sp && sp < m.end {
            continue;
        }
        if m.path.is_empty() {
            if let Some(prev) = i.checked_sub(1).map(|j| &maps[j]) {
                if prev.end == m.start && (prev.perms[..3] == *b"---" || prev.path.starts_with('/'))
                {
                    continue;
                }
            }
        }
        let mut pieces = vec![(m.start, m.end)];
        for &(xa, xb) in exclude {
            let (xa, xb) = (xa / page * page, xb.div_ceil(page) * page);
            pieces = pieces
                .into_iter()
                .flat_map(|(a, b)| {
                    if xb <= a || xa >= b {
                        vec![(a, b)]
                    } else {
                        [(a, xa.max(a)), (xb.min(b), b)]
                            .into_iter()
                            .filter(|(x, y)| y > x)
                            .collect()
                    }
                })
                .collect();
        }
        out.extend(pieces);
    }
    out
}

/// One phase boundary: unmark the previous phase's areas, then mark every candidate mapping with
/// `granularity`. Runs in the calling thread (the helper thread in preload mode).
pub fn phase(granularity: Granularity) -> Result<PhaseReport, Error> {
    crate::install()?;
    remember_thread_pages();
    let page = crate::page_bytes();
    // Touching heap memory while it is marked is fine here: the handler restores it.
    let mut prev = PHASE_AREAS.lock().unwrap_or_else(|p| p.into_inner());
    let mut report = PhaseReport::default();
    for id in prev.drain(..) {
        if area::unmark(id).is_ok() {
            report.unmarked_previous += 1;
        }
    }
    let maps = maps::read_self().map_err(|e| Error::Sys {
        call: "read /proc/self/maps",
        errno: e.raw_os_error().unwrap_or(libc::EIO),
    })?;
    let local = 0u8;
    let sp = &local as *const u8 as usize;
    let ranges = candidates(&maps, &exclusions(page), sp, page);
    prev.reserve(ranges.len());
    for (a, b) in ranges {
        match area::mark(a, b - a, granularity) {
            Ok(id) => {
                prev.push(id);
                report.areas_marked += 1;
                report.bytes_marked += b - a;
            }
            Err(_) => report.skipped += 1,
        }
    }
    G.phases.fetch_add(1, Relaxed);
    Ok(report)
}

/// Granularity from NUMALAB_NEXT_TOUCH_GRANULARITY (default page).
pub(crate) fn env_granularity() -> Granularity {
    std::env::var("NUMALAB_NEXT_TOUCH_GRANULARITY")
        .ok()
        .and_then(|v| Granularity::parse(&v))
        .unwrap_or(Granularity::Page)
}

fn env_signal() -> libc::c_int {
    match std::env::var("NUMALAB_NEXT_TOUCH_SIGNAL") {
        Ok(v) => {
            let v = v.trim().trim_start_matches("SIG");
            match v {
                "USR1" => libc::SIGUSR1,
                "USR2" => libc::SIGUSR2,
                n => n
                    .parse()
                    .ok()
                    .filter(|&s| s > 0 && s < 65 && s != libc::SIGSEGV)
                    .unwrap_or(libc::SIGUSR2),
            }
        }
        Err(_) => libc::SIGUSR2,
    }
}

/// The phase signal's handler: one byte into the pipe, errno preserved (async-signal-safe).
extern "C" fn on_phase_signal(_sig: libc::c_int) {
    let fd = G.phase_pipe_wr.load(Relaxed);
    if fd >= 0 {
        // SAFETY: errno is this thread's; write(2) on a non-blocking pipe; a full pipe already
        // holds a pending boundary, so a lost byte loses nothing.
        unsafe {
            let e = *libc::__errno_location();
            libc::write(fd, b"p".as_ptr() as *const libc::c_void, 1);
            *libc::__errno_location() = e;
        }
    }
}

/// Wake the helper thread (preload mode); false when there is none.
pub(crate) fn signal_helper() -> bool {
    if G.phase_pipe_wr.load(Relaxed) < 0 {
        return false;
    }
    on_phase_signal(0);
    true
}

fn start_preload() -> Result<(), String> {
    crate::install().map_err(|e| e.to_string())?;
    let granularity = env_granularity();
    let verbose = std::env::var("NUMALAB_NEXT_TOUCH_VERBOSE").is_ok_and(|v| v == "1");
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 fills two fds; sigaction with a zeroed struct and a valid handler.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(format!("pipe2: {}", std::io::Error::last_os_error()));
        }
        libc::fcntl(fds[1], libc::F_SETFL, libc::O_NONBLOCK);
        G.phase_pipe_wr.store(fds[1], Release);
        let sig = env_signal();
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = on_phase_signal as extern "C" fn(libc::c_int) as usize;
        act.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut act.sa_mask);
        if libc::sigaction(sig, &act, std::ptr::null_mut()) != 0 {
            return Err(format!(
                "sigaction({sig}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    let rd = fds[0];
    std::thread::Builder::new()
        .name("numalab-nt".into())
        .spawn(move || loop {
            let mut buf = [0u8; 64];
            // SAFETY: reading into a stack buffer; several bytes are one boundary (coalesced).
            let n = unsafe { libc::read(rd, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
            if n == 0 {
                return;
            }
            if n < 0 {
                if std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                return;
            }
            let r = phase(granularity);
            if verbose {
                match r {
                    Ok(r) => eprintln!(
                        "numalab-nexttouch: phase {}: {} areas ({} bytes) marked {:?}, {} unmarked, {} skipped",
                        G.phases.load(Relaxed),
                        r.areas_marked,
                        r.bytes_marked,
                        granularity,
                        r.unmarked_previous,
                        r.skipped
                    ),
                    Err(e) => eprintln!("numalab-nexttouch: phase failed: {e}"),
                }
            }
        })
        .map_err(|e| format!("spawning the helper thread: {e}"))?;
    Ok(())
}

/// Runs when the library is loaded (LD_PRELOAD or linked): remembers the loading thread's TLS
/// pages, and with NUMALAB_NEXT_TOUCH=1 starts phase mode.
#[ctor::ctor(unsafe)]
fn preload_init() {
    remember_thread_pages();
    if std::env::var("NUMALAB_NEXT_TOUCH").is_ok_and(|v| v == "1") {
        if let Err(e) = start_preload() {
            eprintln!("numalab-nexttouch: next-touch phase mode not started: {e}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(start: usize, end: usize, perms: &str, path: &str) -> Mapping {
        let p = perms.as_bytes();
        Mapping {
            start,
            end,
            perms: [p[0], p[1], p[2], p[3]],
            path: path.into(),
        }
    }

    #[test]
    fn candidates_keep_heap_and_anonymous_and_skip_stacks_bss_files() {
        let page = 0x1000;
        let maps = vec![
            m(0x10000, 0x11000, "r--p", "/bin/prog"),
            m(0x11000, 0x12000, "rw-p", "/bin/prog"),
            m(0x12000, 0x14000, "rw-p", ""), // .bss continuation: skipped
            m(0x20000, 0x40000, "rw-p", "[heap]"),
            m(0x50000, 0x51000, "---p", ""), // guard
            m(0x51000, 0x60000, "rw-p", ""), // thread stack: skipped
            m(0x70000, 0x80000, "rw-p", ""), // anonymous mmap: kept, minus exclusion
            m(0x90000, 0x98000, "rw-s", ""), // shared: skipped
            m(0xa0000, 0xa8000, "rw-p", ""), // holds sp: skipped
            m(0xb0000, 0xb1000, "rw-p", "[stack]"),
        ];
        let c = candidates(&maps, &[(0x74000, 0x74010)], 0xa1234, page);
        assert_eq!(
            c,
            vec![(0x20000, 0x40000), (0x70000, 0x74000), (0x75000, 0x80000)]
        );
    }
}
