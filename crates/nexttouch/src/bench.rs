//! Per-page cost of next-touch migration against one synchronous, batched move_pages of the same
//! pages (the benchmark), plus the userfaultfd experiment. Used by `examples/nt_bench.rs`
//! and the VM test `vm_bench_prints_ratios`; measures, never asserts.
//!
//! Pages are populated from a CPU of the first node with CPUs and touched (or moved) from a CPU
//! of the last one, so on a multi-node machine every variant really migrates; on a one-node
//! machine all moves target the node the pages are on already (move_pages then skips the copy,
//! while the userfaultfd variant still copies).

use crate::{mark, unmark, Granularity};
use std::ffi::c_void;
use std::time::Instant;

/// Nodes that have CPUs, with their CPUs, from /sys/devices/system/node.
pub fn node_cpus() -> Vec<(u32, Vec<usize>)> {
    let mut out = Vec::new();
    let Ok(dir) = std::fs::read_dir("/sys/devices/system/node") else {
        return out;
    };
    for e in dir.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some(n) = name
            .strip_prefix("node")
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let list = std::fs::read_to_string(e.path().join("cpulist")).unwrap_or_default();
        let cpus = parse_cpulist(&list);
        if !cpus.is_empty() {
            out.push((n, cpus));
        }
    }
    out.sort();
    out
}

/// `0-3,5` to [0, 1, 2, 3, 5].
pub fn parse_cpulist(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<usize>(), b.parse::<usize>()) {
                    v.extend(a..=b);
                }
            }
            None => v.extend(part.parse::<usize>().ok()),
        }
    }
    v
}

/// Pin the calling thread to one CPU (sched_setaffinity); false if the kernel refused.
pub fn pin_to_cpu(cpu: usize) -> bool {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    }
}

fn allow_all_cpus() {
    // SAFETY: as in pin_to_cpu.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

/// Median per-page costs in nanoseconds.
#[derive(Clone, Debug)]
pub struct BenchReport {
    pub pages: usize,
    pub rounds: usize,
    pub from_node: u32,
    pub to_node: u32,
    /// One move_pages call for all pages.
    pub sync_move_ns: f64,
    /// One move_pages call per page (the call a Page-granularity touch makes).
    pub single_move_ns: f64,
    /// One mprotect(PROT_NONE -> original) per page, in address order (the touch's restore).
    pub single_mprotect_ns: f64,
    /// Page granularity: mark (mprotect + registration) per page.
    pub nt_page_mark_ns: f64,
    /// Page granularity: one touch (SIGSEGV, getcpu, move_pages of 1 page, mprotect, return).
    pub nt_page_touch_ns: f64,
    /// Area granularity: mark + the one touch that moves everything, per page.
    pub nt_area_ns: f64,
    /// userfaultfd experiment: (mark per page, touch per page), or why it could not run.
    pub uffd: Result<(f64, f64), String>,
}

impl BenchReport {
    /// The report as text: absolute numbers and the ratios the issue asks for.
    pub fn render(&self) -> String {
        let mut s = format!(
            "next-touch bench: {} pages x {} rounds, node {} -> node {}{}\n",
            self.pages,
            self.rounds,
            self.from_node,
            self.to_node,
            if self.from_node == self.to_node {
                " (same node: move_pages finds every page in place and copies nothing)"
            } else {
                ""
            }
        );
        let r = |x: f64| x / self.sync_move_ns;
        s += &format!(
            "  sync move_pages, one call       {:>9.0} ns/page  1.00x\n",
            self.sync_move_ns
        );
        s += &format!(
            "  move_pages, one call per page   {:>9.0} ns/page  {:.2}x\n",
            self.single_move_ns,
            r(self.single_move_ns)
        );
        s += &format!(
            "  mprotect restore, one per page  {:>9.0} ns/page  {:.2}x\n",
            self.single_mprotect_ns,
            r(self.single_mprotect_ns)
        );
        s += &format!(
            "  next-touch page: mark           {:>9.0} ns/page  {:.2}x\n",
            self.nt_page_mark_ns,
            r(self.nt_page_mark_ns)
        );
        s += &format!(
            "  next-touch page: touch          {:>9.0} ns/page  {:.2}x\n",
            self.nt_page_touch_ns,
            r(self.nt_page_touch_ns)
        );
        s += &format!(
            "  next-touch page: mark + touch   {:>9.0} ns/page  {:.2}x\n",
            self.nt_page_mark_ns + self.nt_page_touch_ns,
            r(self.nt_page_mark_ns + self.nt_page_touch_ns)
        );
        s += &format!(
            "  next-touch area: mark + touch   {:>9.0} ns/page  {:.2}x\n",
            self.nt_area_ns,
            r(self.nt_area_ns)
        );
        match &self.uffd {
            Ok((m, t)) => {
                s += &format!(
                    "  userfaultfd: mark               {:>9.0} ns/page  {:.2}x\n",
                    m,
                    r(*m)
                );
                s += &format!(
                    "  userfaultfd: touch              {:>9.0} ns/page  {:.2}x  ({:.2}x the mprotect touch)\n",
                    t,
                    r(*t),
                    t / self.nt_page_touch_ns
                );
            }
            Err(e) => s += &format!("  userfaultfd: not run: {e}\n"),
        }
        s
    }
}

struct Map(usize, usize);
impl Map {
    fn new(len: usize) -> Map {
        // SAFETY: fresh anonymous mapping.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED, "mmap of the bench buffer failed");
        // No THP: the bench compares base-page moves.
        unsafe { libc::madvise(p, len, libc::MADV_NOHUGEPAGE) };
        Map(p as usize, len)
    }
}
impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: our mapping.
        unsafe { libc::munmap(self.0 as *mut c_void, self.1) };
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Run the benchmark: `pages` base pages, `rounds` repetitions, median per variant.
pub fn run(pages: usize, rounds: usize) -> BenchReport {
    let page = crate::page_bytes();
    let len = pages * page;
    let nodes = node_cpus();
    let (from, to) = match (nodes.first(), nodes.last()) {
        (Some(a), Some(b)) => ((a.0, a.1[0]), (b.0, b.1[0])),
        _ => ((0, 0), (0, 0)),
    };
    // Populate from `from`, measure from `to`.
    let fresh = || {
        pin_to_cpu(from.1);
        let m = Map::new(len);
        for i in 0..pages {
            // SAFETY: in bounds.
            unsafe { *((m.0 + i * page) as *mut u64) = i as u64 };
        }
        pin_to_cpu(to.1);
        m
    };
    let touch_all = |m: &Map| {
        let mut sum = 0u64;
        for i in 0..pages {
            // SAFETY: in bounds.
            sum = sum
                .wrapping_add(unsafe { std::ptr::read_volatile((m.0 + i * page) as *const u64) });
        }
        std::hint::black_box(sum);
    };
    let per_page = |t: Instant| t.elapsed().as_nanos() as f64 / pages as f64;
    let (mut single, mut prot) = (vec![], vec![]);
    let (mut sync, mut pmark, mut ptouch, mut area, mut umark, mut utouch) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    let mut uffd_err = None;
    for _ in 0..rounds {
        let m = fresh();
        let ptrs: Vec<*mut c_void> = (0..pages)
            .map(|i| (m.0 + i * page) as *mut c_void)
            .collect();
        let nodes_v = vec![to.0 as libc::c_int; pages];
        let mut status = vec![0; pages];
        let t = Instant::now();
        // SAFETY: arrays of `pages` elements.
        unsafe {
            crate::sys::move_pages(pages, ptrs.as_ptr(), nodes_v.as_ptr(), status.as_mut_ptr())
        };
        sync.push(per_page(t));
        drop(m);

        let m = fresh();
        let ptrs: Vec<*mut c_void> = (0..pages)
            .map(|i| (m.0 + i * page) as *mut c_void)
            .collect();
        let t = Instant::now();
        for i in 0..pages {
            // SAFETY: one-element slices of the arrays above.
            unsafe {
                crate::sys::move_pages(
                    1,
                    ptrs.as_ptr().add(i),
                    nodes_v.as_ptr(),
                    status.as_mut_ptr(),
                )
            };
        }
        single.push(per_page(t));
        crate::sys::mprotect(m.0, len, libc::PROT_NONE);
        let t = Instant::now();
        for i in 0..pages {
            crate::sys::mprotect(m.0 + i * page, page, libc::PROT_READ | libc::PROT_WRITE);
        }
        prot.push(per_page(t));
        drop(m);

        let m = fresh();
        let t = Instant::now();
        let id = mark(m.0 as *mut u8, len, Granularity::Page).expect("bench mark");
        pmark.push(per_page(t));
        let t = Instant::now();
        touch_all(&m);
        ptouch.push(per_page(t));
        unmark(id).expect("bench unmark");
        drop(m);

        let m = fresh();
        let t = Instant::now();
        let id = mark(m.0 as *mut u8, len, Granularity::Area).expect("bench mark");
        touch_all(&m);
        area.push(per_page(t));
        unmark(id).expect("bench unmark");
        drop(m);

        if uffd_err.is_none() {
            let m = fresh();
            let t = Instant::now();
            match crate::uffd::UffdArea::mark(m.0, len) {
                Ok(u) => {
                    umark.push(per_page(t));
                    let t = Instant::now();
                    touch_all(&m);
                    utouch.push(per_page(t));
                    drop(u);
                }
                Err(e) => uffd_err = Some(e),
            }
        }
    }
    allow_all_cpus();
    BenchReport {
        pages,
        rounds,
        from_node: from.0,
        to_node: to.0,
        sync_move_ns: median(sync),
        single_move_ns: median(single),
        single_mprotect_ns: median(prot),
        nt_page_mark_ns: median(pmark),
        nt_page_touch_ns: median(ptouch),
        nt_area_ns: median(area),
        uffd: match uffd_err {
            Some(e) => Err(e),
            None => Ok((median(umark), median(utouch))),
        },
    }
}
