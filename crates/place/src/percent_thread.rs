//! The placement thread of `--remote-percent` where the kernel has no weighted interleave (or
//! numalab may not set weights): every period it queries where the child's pages are and moves
//! the ones on the wrong side of the [`PercentSplit`] with batched move_pages. Only the
//! difference moves: a placed page whose hash keeps it where it is is never touched again.

use crate::percent::PercentSplit;
use crate::vma::{placeable_ranges, HUGE_BYTES};
use numalab_core::NodeId;
use numalab_linux::syscalls::{move_pages, move_pages_query, MovePagesOptions, PageStatus};
use numalab_linux::sysroot::Pid;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

const PAGE_BYTES: u64 = 4096;

/// What the thread did, for the summary line printed when the child exits.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct PercentSummary {
    pub percent: u8,
    pub local: Option<NodeId>,
    pub passes: u64,
    pub pages_moved: u64,
    pub move_failures: u64,
    /// Present pages and the share of them on remote nodes at the last pass.
    pub pages_present: u64,
    pub remote_share_percent: f64,
    /// Times P was changed through the control file.
    pub percent_changes: u64,
    pub last_error: Option<String>,
}

impl std::fmt::Display for PercentSummary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "remote-percent {} %: {} passes, {} pages moved ({} failed), {:.1} % of {} present pages remote at the last pass, {} change(s) of P",
            self.percent,
            self.passes,
            self.pages_moved,
            self.move_failures,
            self.remote_share_percent,
            self.pages_present,
            self.percent_changes
        )?;
        if let Some(e) = &self.last_error {
            write!(f, "; last error: {e}")?;
        }
        Ok(())
    }
}

/// One pass: query every placeable page of `pid`, move those off their target.
pub fn place_once(
    pid: Pid,
    split: &PercentSplit,
    opts: &MovePagesOptions,
    sum: &mut PercentSummary,
) -> Result<(), numalab_linux::Error> {
    let ranges = placeable_ranges(pid)?;
    let mut pages: Vec<usize> = Vec::new();
    let mut units: Vec<u64> = Vec::new();
    for r in &ranges {
        let mut a = r.start;
        while a < r.end {
            pages.push(a as usize);
            // A THP-backed range is placed per 2 MiB unit, since the kernel migrates a huge
            // page whole: hashing its subpages apart would move it back and forth.
            units.push(if r.thp { a & !(HUGE_BYTES - 1) } else { a });
            a += PAGE_BYTES;
        }
    }
    let status = move_pages_query(pid, &pages, opts)?;
    let mut todo_pages = Vec::new();
    let mut todo_nodes = Vec::new();
    let (mut present, mut remote) = (0u64, 0u64);
    for ((addr, unit), st) in pages.iter().zip(&units).zip(&status) {
        let PageStatus::OnNode(node) = *st else {
            continue;
        };
        present += 1;
        let want = split.target(*unit);
        if want != split.local() {
            remote += 1;
        }
        if want != node {
            todo_pages.push(*addr);
            todo_nodes.push(want);
        }
    }
    if !todo_pages.is_empty() {
        let rep = move_pages(pid, &todo_pages, &todo_nodes, opts)?;
        for (st, want) in rep.status.iter().zip(&todo_nodes) {
            if *st == PageStatus::OnNode(*want) {
                sum.pages_moved += 1;
            } else {
                sum.move_failures += 1;
            }
        }
    }
    sum.passes += 1;
    sum.pages_present = present;
    sum.remote_share_percent = if present == 0 {
        0.0
    } else {
        remote as f64 / present as f64 * 100.0
    };
    Ok(())
}

/// Re-read P from the control file; a missing, unreadable or bad value keeps the current P
/// (and is reported in the summary) so a half-written file never moves pages.
fn apply_control(path: &std::path::Path, split: &mut PercentSplit, sum: &mut PercentSummary) {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) => {
            sum.last_error = Some(format!("{}: {e}", path.display()));
            return;
        }
    };
    let Ok(p) = text.trim().parse::<u32>() else {
        sum.last_error = Some(format!(
            "{}: '{}' is not a percentage",
            path.display(),
            text.trim()
        ));
        return;
    };
    if p != split.percent() as u32 {
        match split.set_percent(p) {
            Ok(()) => {
                sum.percent = split.percent();
                sum.percent_changes += 1;
            }
            Err(e) => sum.last_error = Some(format!("{}: {e}", path.display())),
        }
    }
}

pub struct PercentThread {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<PercentSummary>,
}

impl PercentThread {
    pub fn start(
        pid: Pid,
        mut split: PercentSplit,
        period_ms: u64,
        control: Option<std::path::PathBuf>,
    ) -> PercentThread {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let handle = std::thread::Builder::new()
            .name("numalab-percent".into())
            .spawn(move || {
                let opts = MovePagesOptions::default();
                let mut sum = PercentSummary {
                    percent: split.percent(),
                    local: Some(split.local()),
                    ..Default::default()
                };
                while !flag.load(Ordering::Relaxed) {
                    if let Some(path) = &control {
                        apply_control(path, &mut split, &mut sum);
                    }
                    if let Err(e) = place_once(pid, &split, &opts, &mut sum) {
                        // The child exiting mid-pass shows up as ESRCH or a vanished /proc
                        // entry; anything else is kept for the summary.
                        if !flag.load(Ordering::Relaxed) {
                            sum.last_error = Some(e.to_string());
                        }
                    }
                    // Sleep in short steps so the end of the child is noticed quickly.
                    let mut slept = 0;
                    while slept < period_ms && !flag.load(Ordering::Relaxed) {
                        let step = (period_ms - slept).min(20);
                        std::thread::sleep(Duration::from_millis(step));
                        slept += step;
                    }
                }
                sum
            })
            .expect("spawning the placement thread");
        PercentThread { stop, handle }
    }

    pub fn stop(self) -> PercentSummary {
        self.stop.store(true, Ordering::Relaxed);
        self.handle.join().unwrap_or_default()
    }
}
