//! `numalab bench migrate`: the cost of moving pages between two nodes, as ratios (absolute
//! times mean little in an emulated VM): move_pages by batch size, and `numalab migrate`
//! (move_pages and migrate_pages) against numactl's `migratepages` on the same process.

use numalab_core::{MemPolicy, NodeId, NodeMask};
use numalab_linux::syscalls::{move_pages_query, set_mempolicy, MovePagesOptions, PageStatus};
use numalab_linux::sysroot::Pid;
use serde::Serialize;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use thiserror::Error;

const PAGE_BYTES: usize = 4096;

#[derive(Debug, Error)]
pub enum BenchError {
    #[error("--from and --to are both node {0}: moving needs two nodes with memory (on a single-node machine, run this in the test VM: docs/testing.md)")]
    SameNode(u16),
    #[error("{0}")]
    Linux(#[from] numalab_linux::Error),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("{0}")]
    Other(String),
}

#[derive(Clone, Debug, Serialize)]
pub struct BatchRow {
    pub batch_pages: usize,
    pub pages: usize,
    pub seconds: f64,
    pub pages_per_s: f64,
    /// Time per page relative to the largest batch.
    pub relative_cost: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct ToolRow {
    pub tool: String,
    pub pages_moved: u64,
    pub seconds: f64,
    /// Time relative to numactl's migratepages (None when it is not installed).
    pub relative_to_migratepages: Option<f64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct MigrateBench {
    pub from: u16,
    pub to: u16,
    pub size_bytes: usize,
    pub batches: Vec<BatchRow>,
    pub tools: Vec<ToolRow>,
}

fn count_on(status: &[PageStatus], node: NodeId) -> usize {
    status
        .iter()
        .filter(|s| **s == PageStatus::OnNode(node))
        .count()
}

/// Move again, at most [`BUSY_RETRIES`] times, the pages move_pages found busy (-EBUSY: the
/// page could not be isolated from its LRU list, e.g. while it still sat in a CPU's LRU
/// batch after the previous round, or was locked) or not present (-ENOENT), updating their
/// entries of `status`. The kernel's own migrate_pages retries its transient failures ten
/// times; a user of move_pages must retry its -EBUSY pages itself. Every page of the buffer
/// was written, so -ENOENT is transient too: on Linux 6.1 in the test VM (1024 of 4095
/// moved once, the rest -ENOENT). The likely cause, not confirmed: automatic NUMA balancing,
/// on by default there, had just made those pages inaccessible (NUMA hinting PTEs). Reading a
/// byte of such a page takes the fault that maps it again. The retries are part of the timed
/// move.
fn retry_busy(
    pages: &[usize],
    dest: NodeId,
    opts: &MovePagesOptions,
    status: &mut [PageStatus],
) -> Result<(), BenchError> {
    for _ in 0..BUSY_RETRIES {
        let busy: Vec<usize> = (0..pages.len())
            .filter(|&i| matches!(status[i], PageStatus::Busy | PageStatus::NotPresent))
            .collect();
        if busy.is_empty() {
            break;
        }
        for &i in &busy {
            if status[i] == PageStatus::NotPresent {
                // SAFETY: `pages` are whole pages inside the caller's live, initialised
                // buffer; a volatile read of one byte only faults the page back in.
                unsafe { std::ptr::read_volatile(pages[i] as *const u8) };
            }
        }
        let again: Vec<usize> = busy.iter().map(|&i| pages[i]).collect();
        let rep = numalab_linux::syscalls::move_pages_to(Pid::SELF, &again, dest, opts)?;
        for (&i, st) in busy.iter().zip(rep.status) {
            status[i] = st;
        }
    }
    Ok(())
}

/// Calls after the first for pages found busy (`retry_busy`).
const BUSY_RETRIES: usize = 3;

/// What move_pages said of the pages that did not reach `dest`, most frequent first
/// ("3647 × Busy, 2 × OnNode(NodeId(2))"): a failed round then says why.
fn status_counts(status: &[PageStatus], dest: NodeId) -> String {
    let mut counts: std::collections::HashMap<PageStatus, usize> = Default::default();
    for s in status.iter().filter(|s| **s != PageStatus::OnNode(dest)) {
        *counts.entry(*s).or_default() += 1;
    }
    let mut v: Vec<_> = counts.into_iter().collect();
    v.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then(format!("{:?}", a.0).cmp(&format!("{:?}", b.0)))
    });
    v.iter()
        .map(|(s, n)| format!("{n} × {s:?}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// move_pages of a buffer of `size_bytes` back and forth between `from` and `to`, once per
/// batch size (best of `repeat` rounds each).
pub fn batches(
    from: NodeId,
    to: NodeId,
    size_bytes: usize,
    sizes: &[usize],
    repeat: usize,
) -> Result<Vec<BatchRow>, BenchError> {
    if from == to {
        return Err(BenchError::SameNode(from.0));
    }
    // Base pages only: with THP a move of one subpage carries its whole 2 MiB page and the
    // per-page figures would mix two page sizes. PR_SET_THP_DISABLE is per process.
    // SAFETY: prctl with integer arguments.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
    // First touch on `from`, then back to the default policy.
    set_mempolicy(&MemPolicy::Bind {
        nodes: NodeMask::single(from),
        numa_balancing: false,
    })?;
    let buf = vec![1u8; size_bytes.max(PAGE_BYTES)];
    set_mempolicy(&MemPolicy::Default)?;
    let start = (buf.as_ptr() as usize).div_ceil(PAGE_BYTES) * PAGE_BYTES;
    let end = buf.as_ptr() as usize + buf.len();
    let pages: Vec<usize> = (start..end)
        .step_by(PAGE_BYTES)
        .filter(|p| p + PAGE_BYTES <= end)
        .collect();
    let mut rows = Vec::new();
    let mut at = from;
    for &b in sizes {
        let opts = MovePagesOptions {
            batch_pages: b.max(1),
            move_all: false,
        };
        let mut best = f64::INFINITY;
        for _ in 0..repeat.max(1) {
            let dest = if at == from { to } else { from };
            let t0 = Instant::now();
            let mut rep = numalab_linux::syscalls::move_pages_to(Pid::SELF, &pages, dest, &opts)?;
            retry_busy(&pages, dest, &opts, &mut rep.status)?;
            let s = t0.elapsed().as_secs_f64();
            let moved = count_on(&rep.status, dest);
            if moved < pages.len() * 9 / 10 {
                return Err(BenchError::Other(format!(
                    "only {moved} of {} pages reached node {} (is it full?); the others: {}",
                    pages.len(),
                    dest.0,
                    status_counts(&rep.status, dest)
                )));
            }
            at = dest;
            best = best.min(s);
        }
        rows.push(BatchRow {
            batch_pages: b,
            pages: pages.len(),
            seconds: best,
            pages_per_s: pages.len() as f64 / best,
            relative_cost: 0.0,
        });
    }
    if let Some(base) = rows.iter().max_by_key(|r| r.batch_pages).map(|r| r.seconds) {
        for r in &mut rows {
            r.relative_cost = r.seconds / base;
        }
    }
    drop(buf);
    Ok(rows)
}

/// A memhog child holding `size` on `from`; returns it and its pid.
fn holder(
    numalab: &Path,
    from: NodeId,
    size_bytes: usize,
) -> Result<(std::process::Child, i32), BenchError> {
    let io = |what: &str| {
        let what = what.to_string();
        move |err| BenchError::Io { what, err }
    };
    let mut child = Command::new(numalab)
        .args(["run", "--thp=never", &format!("--membind={}", from.0), "--"])
        .arg(numalab)
        .args(["memhog", &size_bytes.to_string(), "--hold-s=3600"])
        .stdout(Stdio::piped())
        .spawn()
        .map_err(io("starting numalab memhog"))?;
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("piped"))
        .read_line(&mut line)
        .map_err(io("reading memhog's first line"))?;
    let pid = line
        .split_whitespace()
        .nth(3)
        .and_then(|p| p.parse().ok())
        .ok_or_else(|| BenchError::Other(format!("memhog said '{}'", line.trim())))?;
    Ok((child, pid))
}

fn timed(cmd: &mut Command) -> Result<f64, BenchError> {
    let t0 = Instant::now();
    let out = cmd.output().map_err(|err| BenchError::Io {
        what: format!("{cmd:?}"),
        err,
    })?;
    if !out.status.success() {
        return Err(BenchError::Other(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(t0.elapsed().as_secs_f64())
}

fn pages_on(pid: i32, node: NodeId) -> Result<u64, BenchError> {
    let ranges = crate::vma::placeable_ranges(Pid(pid))?;
    let pages: Vec<usize> = ranges
        .iter()
        .flat_map(|r| (r.start..r.end).step_by(PAGE_BYTES))
        .map(|a| a as usize)
        .collect();
    Ok(count_on(
        &move_pages_query(Pid(pid), &pages, &MovePagesOptions::default())?,
        node,
    ) as u64)
}

/// Each tool moves a fresh memhog process's memory from `from` to `to`, timed from the outside
/// (process start included, the same for every tool).
pub fn tools(
    numalab: &Path,
    from: NodeId,
    to: NodeId,
    size_bytes: usize,
    repeat: usize,
) -> Result<Vec<ToolRow>, BenchError> {
    if from == to {
        return Err(BenchError::SameNode(from.0));
    }
    let migratepages = [
        "/usr/bin/migratepages",
        "/bin/migratepages",
        "/usr/local/bin/migratepages",
    ]
    .into_iter()
    .map(Path::new)
    .find(|p| p.exists());
    let mut rows = Vec::new();
    // Best of `repeat`, each on a fresh process placed on `from`.
    let mut run = |tool: &str, args: &dyn Fn(i32) -> Command| -> Result<(), BenchError> {
        let mut best: Option<ToolRow> = None;
        for _ in 0..repeat.max(1) {
            let (mut child, pid) = holder(numalab, from, size_bytes)?;
            let s = timed(&mut args(pid));
            let moved = pages_on(pid, to);
            let _ = child.kill();
            let _ = child.wait();
            let row = ToolRow {
                tool: tool.to_string(),
                pages_moved: moved?,
                seconds: s?,
                relative_to_migratepages: None,
            };
            if best.as_ref().is_none_or(|b| row.seconds < b.seconds) {
                best = Some(row);
            }
        }
        rows.extend(best);
        Ok(())
    };
    if let Some(mp) = migratepages {
        run("migratepages (numactl)", &|pid| {
            let mut c = Command::new(mp);
            c.args([pid.to_string(), from.0.to_string(), to.0.to_string()]);
            c
        })?;
    }
    run("numalab migrate --whole-process", &|pid| {
        let mut c = Command::new(numalab);
        c.args([
            "migrate",
            "--pid",
            &pid.to_string(),
            "--from",
            &from.0.to_string(),
            "--to",
            &to.0.to_string(),
            "--whole-process",
        ]);
        c
    })?;
    run("numalab migrate (move_pages)", &|pid| {
        let mut c = Command::new(numalab);
        c.args([
            "migrate",
            "--pid",
            &pid.to_string(),
            "--from",
            &from.0.to_string(),
            "--to",
            &to.0.to_string(),
        ]);
        c
    })?;
    if migratepages.is_some() {
        let base = rows[0].seconds;
        for r in &mut rows {
            r.relative_to_migratepages = Some(r.seconds / base);
        }
    }
    Ok(rows)
}
