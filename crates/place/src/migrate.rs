//! `numalab migrate`: move pages of a running process, with a per-status report and rates.
//! Page mode (default): query every page of the selected ranges with move_pages, plan with
//! [`crate::migrate_plan::plan`], move in batches. Whole-process mode: one migrate_pages call,
//! with before/after queries for the report.

use crate::migrate_plan::{plan, Counts, Outcome, Selection, PAGE_BYTES};
use crate::vma::migratable_ranges;
use numalab_core::{NodeId, NodeMask};
use numalab_linux::syscalls::{
    migrate_pages, move_pages, move_pages_query, MovePagesOptions, PageStatus,
};
use numalab_linux::sysroot::Pid;
use serde::Serialize;
use std::collections::BTreeMap;
use std::time::Instant;
use thiserror::Error;

#[derive(Debug, Error)]
pub enum MigrateError {
    #[error("no process with pid {0} (it may have exited)")]
    NoProcess(i32),
    #[error("pid {0}: not permitted to inspect or move this process's pages (needs the same user or CAP_SYS_NICE)")]
    NotPermitted(i32),
    #[error(
        "--whole-process moves every page with migrate_pages: it cannot be combined with --{0}"
    )]
    WholeWith(&'static str),
    #[error(transparent)]
    Linux(#[from] numalab_linux::Error),
}

#[derive(Clone, Debug)]
pub struct MigrateRequest {
    pub pid: Pid,
    pub selection: Selection,
    pub whole_process: bool,
    pub dry_run: bool,
    pub batch_pages: usize,
    pub move_all: bool,
}

#[derive(Clone, Debug, Serialize)]
pub struct MigrateReport {
    pub pid: i32,
    /// "move_pages" or "migrate_pages".
    pub syscall: &'static str,
    pub dry_run: bool,
    pub pages_scanned: u64,
    /// Pages selected for a move (what a dry run would move).
    pub pages_to_move: u64,
    pub counts: Counts,
    /// Present pages per node before and after.
    pub before: BTreeMap<u16, u64>,
    pub after: BTreeMap<u16, u64>,
    pub seconds: f64,
    pub pages_per_s: f64,
    pub mb_per_s: f64,
}

fn check_alive(pid: Pid) -> Result<(), MigrateError> {
    // SAFETY: signal 0 only checks existence and permission.
    if unsafe { libc::kill(pid.0, 0) } != 0 {
        return Err(match std::io::Error::last_os_error().raw_os_error() {
            Some(libc::EPERM) => MigrateError::NotPermitted(pid.0),
            _ => MigrateError::NoProcess(pid.0),
        });
    }
    Ok(())
}

fn histogram(status: &[PageStatus]) -> BTreeMap<u16, u64> {
    let mut h = BTreeMap::new();
    for s in status {
        if let PageStatus::OnNode(n) = s {
            *h.entry(n.0).or_insert(0u64) += 1;
        }
    }
    h
}

/// Page addresses of the target's placeable ranges, clipped to the selection's range.
fn pages_of(req: &MigrateRequest) -> Result<Vec<usize>, MigrateError> {
    let ranges = migratable_ranges(req.pid).map_err(|e| match e.errno() {
        Some(libc::ENOENT) | Some(libc::ESRCH) => MigrateError::NoProcess(req.pid.0),
        Some(libc::EACCES) | Some(libc::EPERM) => MigrateError::NotPermitted(req.pid.0),
        _ => MigrateError::Linux(e),
    })?;
    let mut pages = Vec::new();
    for r in ranges {
        let (mut s, mut e) = (r.start, r.end);
        if let Some((a, b)) = req.selection.range {
            s = s.max(a);
            e = e.min(b);
        }
        let mut p = s;
        while p < e {
            pages.push(p as usize);
            p += PAGE_BYTES;
        }
    }
    Ok(pages)
}

fn outcome(st: PageStatus, want: NodeId) -> Outcome {
    match st {
        PageStatus::OnNode(n) if n == want => Outcome::Moved,
        // Still elsewhere after the call: the kernel could not isolate it this time.
        PageStatus::OnNode(_) | PageStatus::Busy => Outcome::Busy,
        PageStatus::NotPresent | PageStatus::Fault => Outcome::NotPresent,
        PageStatus::Denied => Outcome::Denied,
        PageStatus::NoMemory | PageStatus::Other(_) => Outcome::Failed,
    }
}

pub fn run(req: &MigrateRequest) -> Result<MigrateReport, MigrateError> {
    check_alive(req.pid)?;
    if req.whole_process {
        if req.selection.range.is_some() {
            return Err(MigrateError::WholeWith("range"));
        }
        if req.selection.fraction.is_some() {
            return Err(MigrateError::WholeWith("fraction"));
        }
    }
    let opts = MovePagesOptions {
        batch_pages: req.batch_pages.max(1),
        move_all: req.move_all,
    };
    let pages = pages_of(req)?;
    let before = move_pages_query(req.pid, &pages, &opts)?;
    let current: Vec<(u64, Option<NodeId>)> = pages
        .iter()
        .zip(&before)
        .map(|(a, s)| (*a as u64, s.node()))
        .collect();
    let (moves, mut counts) = plan(&req.selection, &current);
    let mut report = MigrateReport {
        pid: req.pid.0,
        syscall: if req.whole_process {
            "migrate_pages"
        } else {
            "move_pages"
        },
        dry_run: req.dry_run,
        pages_scanned: pages.len() as u64,
        pages_to_move: moves.len() as u64,
        counts,
        before: histogram(&before),
        after: BTreeMap::new(),
        seconds: 0.0,
        pages_per_s: 0.0,
        mb_per_s: 0.0,
    };
    if req.dry_run {
        report.after = report.before.clone();
        return Ok(report);
    }
    let t0 = Instant::now();
    if req.whole_process {
        let from = req.selection.from.unwrap_or_else(|| {
            // Every node but the targets: migrate_pages maps from[i] to to[i mod |to|].
            let all = NodeMask::from_nodes(before.iter().filter_map(|s| s.node()));
            all.and_not(&req.selection.to)
        });
        if !from.is_empty() {
            migrate_pages(req.pid, &from, &req.selection.to)?;
        }
        report.seconds = t0.elapsed().as_secs_f64();
        let after = move_pages_query(req.pid, &pages, &opts)?;
        // Classify each planned page by where it ended.
        let idx: std::collections::HashMap<u64, usize> = pages
            .iter()
            .enumerate()
            .map(|(i, a)| (*a as u64, i))
            .collect();
        for (addr, _) in &moves {
            let st = after[idx[addr]];
            counts.add(match st {
                PageStatus::OnNode(n) if req.selection.to.contains(n) => Outcome::Moved,
                st => outcome(st, NodeId(u16::MAX)),
            });
        }
        report.after = histogram(&after);
    } else {
        let addrs: Vec<usize> = moves.iter().map(|(a, _)| *a as usize).collect();
        let nodes: Vec<NodeId> = moves.iter().map(|(_, n)| *n).collect();
        let rep = move_pages(req.pid, &addrs, &nodes, &opts)?;
        report.seconds = t0.elapsed().as_secs_f64();
        for (st, want) in rep.status.iter().zip(&nodes) {
            counts.add(outcome(*st, *want));
        }
        report.after = histogram(&move_pages_query(req.pid, &pages, &opts)?);
    }
    report.counts = counts;
    if report.seconds > 0.0 {
        report.pages_per_s = counts.moved as f64 / report.seconds;
        report.mb_per_s = counts.moved as f64 * PAGE_BYTES as f64 / 1e6 / report.seconds;
    }
    Ok(report)
}
