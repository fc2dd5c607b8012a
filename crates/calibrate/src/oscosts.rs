//! OS costs (reference/machines.md §7.8): first-touch faults per page size and move_pages'
//! cost per call and per byte, measured on this kernel with the figures' meaning in the
//! machine file (`[os]`, docs/machine-format.md).

use crate::chase::median;
use crate::memory::{bind_to_node, on_cpu, NodeBuffer, Pages, BASE_PAGE_BYTES, HUGE_PAGE_BYTES};
use crate::CalibrateError;
use serde::Serialize;
use std::time::Instant;

/// A measured cost, or why it was not measured.
#[derive(Clone, Debug, Serialize)]
#[serde(untagged)]
pub enum Measured<T> {
    Value(T),
    Skipped { skipped: String },
}

impl<T> Measured<T> {
    pub fn value(&self) -> Option<&T> {
        match self {
            Measured::Value(v) => Some(v),
            Measured::Skipped { .. } => None,
        }
    }
    pub fn skipped(why: impl Into<String>) -> Self {
        Measured::Skipped {
            skipped: why.into(),
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct FaultCost {
    /// Median time of one first-touch fault, ns.
    pub ns: f64,
    /// Pages faulted per run, and runs.
    pub pages: usize,
    pub runs: usize,
}

/// First-touch faults of 4 KiB pages: a fresh buffer bound to `os_node`, one write per page,
/// by a thread on `cpu`; the time per page covers the trap, the allocation, the zeroing and
/// the mapping, as `fault_4k_ns` does.
pub fn fault_4k(
    cpu: u32,
    os_node: u32,
    bytes: usize,
    runs: usize,
) -> Result<Measured<FaultCost>, CalibrateError> {
    first_touch(cpu, os_node, bytes, runs, Pages::Base, |_| None)
}

/// First-touch faults of 2 MiB transparent huge pages: one write per 2 MiB of a fresh
/// MADV_HUGEPAGE buffer. Skipped, saying why, where the kernel gave fewer than 90 % huge pages
/// (THP "never", or no free 2 MiB blocks on the node).
pub fn fault_2m(
    cpu: u32,
    os_node: u32,
    bytes: usize,
    runs: usize,
) -> Result<Measured<FaultCost>, CalibrateError> {
    first_touch(cpu, os_node, bytes, runs, Pages::Huge, |buf| {
        match buf.huge_fraction() {
        Some(f) if f >= 0.9 => None,
        Some(f) => Some(format!(
            "the kernel gave {:.0} % of a MADV_HUGEPAGE buffer as 2 MiB pages (THP off, or no free 2 MiB blocks on node {os_node}): \
             enable THP (`numalab run --thp=madvise`, or /sys/kernel/mm/transparent_hugepage/enabled) and run again",
            f * 100.0
        )),
        None => Some("/proc/self/smaps is not readable, so whether the pages were huge is unknown".into()),
    }
    })
}

/// `runs` times: a fresh buffer of `pages`, one write per page, timed; the median per page.
/// `refused` says why a run's buffer does not count (its pages were not the size asked for).
fn first_touch(
    cpu: u32,
    os_node: u32,
    bytes: usize,
    runs: usize,
    pages: Pages,
    refused: impl Fn(&NodeBuffer) -> Option<String> + Send + Sync,
) -> Result<Measured<FaultCost>, CalibrateError> {
    let page_bytes = match pages {
        Pages::Base => BASE_PAGE_BYTES,
        Pages::Huge => HUGE_PAGE_BYTES,
    };
    on_cpu(cpu, || {
        let mut v = Vec::new();
        let mut count = 0;
        for _ in 0..runs.max(1) {
            let buf = NodeBuffer::new(bytes.max(page_bytes), os_node, pages, false)?;
            count = buf.len() / page_bytes;
            let t = Instant::now();
            buf.touch_every(page_bytes);
            let ns = t.elapsed().as_nanos() as f64 / count as f64;
            if let Some(why) = refused(&buf) {
                return Ok(Measured::skipped(why));
            }
            v.push(ns);
        }
        Ok(Measured::Value(FaultCost {
            ns: median(&mut v),
            pages: count,
            runs: runs.max(1),
        }))
    })
}

/// Linux 3.15's `fault_around_bytes` default: one read fault maps this much of a cached file.
const FAULT_AROUND_BYTES: usize = 64 << 10;

/// Read faults on a file in the page cache, as `fault_file_4k_ns` means them: a temporary file
/// of `bytes` written by a thread on `cpu` (so its pages are cached on that thread's node),
/// mapped MAP_PRIVATE and read at one byte per 64 KiB, the fault-around window from Linux
/// 3.15 (a fault there maps the window's 16 pages; before, one page a fault). The time per
/// read is the fault's.
pub fn fault_file_4k(
    cpu: u32,
    bytes: usize,
    runs: usize,
) -> Result<Measured<FaultCost>, CalibrateError> {
    let bytes = bytes.max(FAULT_AROUND_BYTES) / FAULT_AROUND_BYTES * FAULT_AROUND_BYTES;
    on_cpu(cpu, || {
        // a temporary directory that cannot take the file skips this figure, not the run
        let file = match cached_file(bytes) {
            Ok(f) => f,
            Err(why) => return Ok(Measured::skipped(why)),
        };
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        let windows = bytes / FAULT_AROUND_BYTES;
        let mut v = Vec::new();
        for _ in 0..runs.max(1) {
            // SAFETY: a fresh private mapping of the file, `bytes` long, unmapped below.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    bytes,
                    libc::PROT_READ,
                    libc::MAP_PRIVATE,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Ok(Measured::skipped(format!(
                    "mapping the temporary file failed: {}",
                    std::io::Error::last_os_error()
                )));
            }
            let t = Instant::now();
            for w in 0..windows {
                // SAFETY: inside the mapping.
                unsafe { std::ptr::read_volatile((p as *const u8).add(w * FAULT_AROUND_BYTES)) };
            }
            v.push(t.elapsed().as_nanos() as f64 / windows as f64);
            // SAFETY: the mapping made above.
            unsafe { libc::munmap(p, bytes) };
        }
        Ok(Measured::Value(FaultCost {
            ns: median(&mut v),
            pages: windows,
            runs: runs.max(1),
        }))
    })
}

/// A file of `bytes` in the temporary directory, written by this thread (so its page cache
/// is on this thread's node) and unlinked as soon as it is open: gone when the handle closes,
/// whatever happens. Err says why it could not be made.
fn cached_file(bytes: usize) -> Result<std::fs::File, String> {
    use std::io::Write;
    let path = std::env::temp_dir().join(format!(
        "numalab-calibrate-file-faults-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    ));
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .map_err(|e| {
            format!(
                "creating {}: {e} (set TMPDIR to a writable directory)",
                path.display()
            )
        })?;
    std::fs::remove_file(&path).map_err(|e| format!("unlinking {}: {e}", path.display()))?;
    let chunk = vec![1u8; 1 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(chunk.len());
        file.write_all(&chunk[..n])
            .map_err(|e| format!("writing {} MiB to the temporary file: {e}", bytes >> 20))?;
        left -= n;
    }
    file.flush()
        .map_err(|e| format!("writing the temporary file: {e}"))?;
    Ok(file)
}

const GIB: usize = 1 << 30;
const HUGETLB_1G: &str = "/sys/kernel/mm/hugepages/hugepages-1048576kB";

/// First-touch fault of a 1 GiB hugetlb page, where the administrator has reserved free
/// ones (the kernel gives 1 GiB pages only from hugetlbfs reservations).
pub fn fault_1g(cpu: u32, os_node: u32) -> Result<Measured<FaultCost>, CalibrateError> {
    let free = std::fs::read_to_string(format!(
        "/sys/devices/system/node/node{os_node}/hugepages/hugepages-1048576kB/free_hugepages"
    ))
    .ok()
    .and_then(|s| s.trim().parse::<u64>().ok())
    .unwrap_or(0);
    if free == 0 {
        return Ok(Measured::skipped(format!(
            "no free 1 GiB hugetlb page on node {os_node}: reserve one (as root: echo 1 > {HUGETLB_1G}/nr_hugepages, or hugepagesz=1G hugepages=N on the kernel command line) and run again"
        )));
    }
    on_cpu(cpu, || {
        // MAP_HUGE_1GB: log2(1 GiB) in the MAP_HUGE_SHIFT bits.
        let flags = libc::MAP_PRIVATE
            | libc::MAP_ANONYMOUS
            | libc::MAP_HUGETLB
            | (30 << libc::MAP_HUGE_SHIFT);
        // SAFETY: a fresh anonymous hugetlb mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                GIB,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Ok(Measured::skipped(format!(
                "mmap of a 1 GiB hugetlb page failed ({}) although node {os_node} lists a free one",
                std::io::Error::last_os_error()
            )));
        }
        let bound = bind_to_node(p as usize, GIB, os_node);
        let t = Instant::now();
        if bound.is_ok() {
            // SAFETY: inside the mapping.
            unsafe { std::ptr::write_volatile(p as *mut u8, 1) };
        }
        let ns = t.elapsed().as_nanos() as f64;
        // SAFETY: the mapping made above.
        unsafe { libc::munmap(p, GIB) };
        Ok(match bound {
            Ok(()) => Measured::Value(FaultCost {
                ns,
                pages: 1,
                runs: 1,
            }),
            Err(e) => Measured::skipped(format!("the 1 GiB page: {e}")),
        })
    })
}

#[derive(Clone, Debug, Serialize)]
pub struct MovePagesCost {
    pub from_node: u32,
    pub to_node: u32,
    /// Median time of a call moving one 4 KiB page, ns: the per-call cost.
    pub one_page_call_ns: f64,
    /// One call moving `pages` 4 KiB pages, ns.
    pub batch_call_ns: f64,
    pub pages: usize,
    /// 2 MiB THPs moved by one call naming each one's first page: MB/s, whether they arrived
    /// still huge (migrated whole) or split, and how many.
    pub thp: Measured<ThpMove>,
}

#[derive(Clone, Debug, Serialize)]
pub struct ThpMove {
    pub huge_pages: usize,
    pub call_ns: f64,
    pub mbps: f64,
    /// Share of the buffer still in huge pages after the move (1 = migrated whole).
    pub huge_after: f64,
}

/// move_pages(2) between two nodes, from a thread on `cpu`: single-page calls give the cost
/// per call, one call over `bytes` of 4 KiB pages the cost per byte.
pub fn move_pages_cost(
    cpu: u32,
    from: u32,
    to: u32,
    bytes: usize,
    calls: usize,
) -> Result<MovePagesCost, CalibrateError> {
    on_cpu(cpu, || {
        let buf = NodeBuffer::new(bytes, from, Pages::Base, true)?;
        let pages = buf.page_addrs(BASE_PAGE_BYTES);
        // One page per call, alternating between the nodes so that every call moves a page.
        let mut one = Vec::with_capacity(calls);
        for i in 0..calls.max(1) {
            let page = pages[i % pages.len()];
            let target = if (i / pages.len()) % 2 == 0 { to } else { from };
            one.push(timed_move(&[page], target)?);
        }
        let one_page_call_ns = median(&mut one);
        // Pages moved by the single-page calls went back or away; put them all on `from`.
        timed_move(&pages, from)?;
        let batch_call_ns = timed_move(&pages, to)?;
        let n = pages.len();
        drop(buf);
        let thp = thp_move(from, to, bytes)?;
        Ok(MovePagesCost {
            from_node: from,
            to_node: to,
            one_page_call_ns,
            batch_call_ns,
            pages: n,
            thp,
        })
    })
}

fn thp_move(from: u32, to: u32, bytes: usize) -> Result<Measured<ThpMove>, CalibrateError> {
    let buf = NodeBuffer::new(bytes.max(HUGE_PAGE_BYTES), from, Pages::Huge, true)?;
    match buf.huge_fraction() {
        Some(f) if f >= 0.9 => {}
        Some(f) => {
            return Ok(Measured::skipped(format!(
                "the kernel gave {:.0} % of the buffer as 2 MiB pages (THP off, or no free 2 MiB blocks on node {from})",
                f * 100.0
            )))
        }
        None => return Ok(Measured::skipped("/proc/self/smaps is not readable")),
    }
    let heads = buf.page_addrs(HUGE_PAGE_BYTES);
    let call_ns = timed_move(&heads, to)?;
    let huge_after = buf.huge_fraction().unwrap_or(0.0);
    Ok(Measured::Value(ThpMove {
        huge_pages: heads.len(),
        call_ns,
        mbps: buf.len() as f64 / call_ns * 1e3,
        huge_after,
    }))
}

/// One move_pages(2) call moving `pages` of this process to `node`, timed, ns. Made here with
/// libc rather than numalab-linux's wrapper, which reads sysfs to check the node before each
/// call: that check would be timed as part of the call.
fn timed_move(pages: &[usize], node: u32) -> Result<f64, CalibrateError> {
    let nodes = vec![node as libc::c_int; pages.len()];
    let mut status = vec![0 as libc::c_int; pages.len()];
    let t = Instant::now();
    // SAFETY: three arrays of pages.len() elements; the pages are this process's own.
    let r = unsafe {
        libc::syscall(
            libc::SYS_move_pages,
            0,
            pages.len() as libc::c_ulong,
            pages.as_ptr(),
            nodes.as_ptr(),
            status.as_mut_ptr(),
            numalab_linux::MbindFlags::MOVE.bits() as libc::c_int,
        )
    };
    let ns = t.elapsed().as_nanos() as f64;
    if r < 0 {
        return Err(CalibrateError::Os {
            what: format!("move_pages of {} pages to node {node}", pages.len()),
            err: std::io::Error::last_os_error(),
        });
    }
    if let Some(bad) = status.iter().find(|&&s| s < 0) {
        return Err(CalibrateError::Os {
            what: format!(
                "move_pages of {} pages to node {node} (a page's status)",
                pages.len()
            ),
            err: std::io::Error::from_raw_os_error(-bad),
        });
    }
    Ok(ns)
}
