//! [`Executor`]: carries out a policy's `Action`s on another, running process, as far as
//! Linux lets one process change another; everything else is skipped with the reason.
//!
//! | action | on Linux |
//! |---|---|
//! | `Migrate`, `MovePages`, `Interleave` | `move_pages(2)` on the pid, batched: pages already on their target and pages not present are left alone |
//! | `SplitHuge` | debugfs `split_huge_pages` (`pid,start,end`, root, Linux 5.13+), else skipped |
//! | `SetThpAdvice` | `process_madvise(2)`; kernels refuse MADV_(NO)HUGEPAGE there, so it is skipped with the kernel's answer |
//! | `MoveThread` | `sched_setaffinity(2)` on the thread id |
//! | `SetRangePolicy`, `SetTaskPolicy` | skipped: mbind / set_mempolicy act on the calling process only |
//! | `LazyMigrate` | done eagerly: `move_pages(2)` of the range's populated pages not on the target |
//! | `MarkNextTouch` | skipped: needs the process's cooperation (numalab-nexttouch) |
//! | `SetThpAllocation` | skipped: a machine-wide setting, not the balanced process's |
//! | `MigrateProcess` | `migrate_pages(2)` on the pid; pages counted from its numa_maps before and after |

use numalab_core::migrate_pages::migration_steps;
use numalab_core::{Action, MemPolicy, NodeId, NodeMask};
use numalab_linux::numa_maps::{bytes_per_node, read_numa_maps};
use numalab_linux::syscalls::{
    migrate_pages, move_pages, move_pages_query, MovePagesOptions, PageStatus,
};
use numalab_linux::{Pid, SysRoot};
use serde::Serialize;
use std::collections::BTreeMap;

const BASE: u64 = 4096;

/// The reason given with every `LazyMigrate` carried out.
pub const LAZY_EAGER: &str = "lazy migration done eagerly: faults of another process cannot be \
     intercepted (see docs/balance.md)";

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum OutcomeKind {
    /// Carried out (for moves: the call was made; per-page results in the counts).
    Applied,
    /// Not possible on another process on Linux, or not the balanced process's.
    Skipped,
    /// Tried and refused by the kernel.
    Failed,
    /// `--dry-run`: what would be done.
    DryRun,
}

/// What became of one action.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Outcome {
    /// The action's kind (kebab-case, as core's serde names it).
    pub action: &'static str,
    /// The action in one line.
    pub what: String,
    pub result: OutcomeKind,
    pub reason: Option<String>,
    /// Pages the action named (4 KiB steps for ranges, one per entry for `MovePages`).
    pub pages_asked: u64,
    /// Pages the kernel reported on their target after the call, that were elsewhere before.
    pub pages_moved: u64,
    /// Pages already on their target.
    pub already_there: u64,
    /// Pages not moved, by status (not-present, busy, denied, fault, no-memory, errno N,
    /// no-memory-node for a target without memory).
    pub not_moved: BTreeMap<String, u64>,
    /// For `MovePages`: each page the policy named and its target node, so that a report
    /// says where the policy decided every page should go.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub targets: Vec<(u64, u16)>,
}

impl Outcome {
    fn new(a: &Action) -> Outcome {
        Outcome {
            action: kind_name(a),
            what: describe(a),
            result: OutcomeKind::Applied,
            reason: None,
            pages_asked: 0,
            pages_moved: 0,
            already_there: 0,
            not_moved: BTreeMap::new(),
            targets: match a {
                Action::MovePages { pages, .. } => pages.iter().map(|(p, n)| (*p, n.0)).collect(),
                _ => Vec::new(),
            },
        }
    }

    fn skip(mut self, why: impl Into<String>) -> Outcome {
        self.result = OutcomeKind::Skipped;
        self.reason = Some(why.into());
        self
    }

    fn fail(mut self, why: impl Into<String>) -> Outcome {
        self.result = OutcomeKind::Failed;
        self.reason = Some(why.into());
        self
    }
}

pub fn kind_name(a: &Action) -> &'static str {
    match a {
        Action::Migrate { .. } => "migrate",
        Action::MovePages { .. } => "move-pages",
        Action::Interleave { .. } => "interleave",
        Action::SplitHuge { .. } => "split-huge",
        Action::SetThpAdvice { .. } => "set-thp-advice",
        Action::SetThpAllocation { .. } => "set-thp-allocation",
        Action::SetRangePolicy { .. } => "set-range-policy",
        Action::MarkNextTouch { .. } => "mark-next-touch",
        Action::LazyMigrate { .. } => "lazy-migrate",
        Action::SetTaskPolicy { .. } => "set-task-policy",
        Action::MoveThread { .. } => "move-thread",
        Action::MigrateProcess { .. } => "migrate-process",
    }
}

/// One line per action.
pub fn describe(a: &Action) -> String {
    let range = |s: &u64, l: &u64| format!("{:#x}-{:#x} ({} KiB)", s, s + l, l / 1024);
    match a {
        Action::Migrate {
            start,
            len_bytes,
            to,
            ..
        } => format!("migrate {} to {to}", range(start, len_bytes)),
        Action::MovePages { pages, .. } => {
            let mut to: BTreeMap<u16, usize> = BTreeMap::new();
            for (_, n) in pages {
                *to.entry(n.0).or_default() += 1;
            }
            let dest: Vec<String> = to.iter().map(|(n, c)| format!("{c} to node{n}")).collect();
            format!("move {} pages: {}", pages.len(), dest.join(", "))
        }
        Action::Interleave {
            start,
            len_bytes,
            nodes,
            ..
        } => format!("interleave {} over nodes {nodes}", range(start, len_bytes)),
        Action::SplitHuge { addr, .. } => format!("split the huge page at {addr:#x}"),
        Action::SetThpAdvice {
            start,
            len_bytes,
            allow,
            ..
        } => format!(
            "madvise {} {}",
            range(start, len_bytes),
            if *allow {
                "MADV_HUGEPAGE"
            } else {
                "MADV_NOHUGEPAGE"
            }
        ),
        Action::SetThpAllocation { allocate, promote } => {
            format!("THP allocation {allocate}, khugepaged promotion {promote}")
        }
        Action::SetRangePolicy {
            start,
            len_bytes,
            policy,
            ..
        } => format!("mbind {} {policy:?}", range(start, len_bytes)),
        Action::MarkNextTouch {
            start, len_bytes, ..
        } => format!("mark {} migrate-on-next-touch", range(start, len_bytes)),
        Action::LazyMigrate {
            start,
            len_bytes,
            to,
            ..
        } => format!("lazy-migrate {} to {to}", range(start, len_bytes)),
        Action::SetTaskPolicy { policy, .. } => format!("set_mempolicy {policy:?}"),
        Action::MoveThread { thread, cpu } => format!("move thread {} to {cpu}", thread.0),
        Action::MigrateProcess { from, to, .. } => {
            format!("migrate_pages from nodes {from} to nodes {to}")
        }
    }
}

fn status_name(s: PageStatus) -> String {
    match s {
        PageStatus::OnNode(n) => format!("on-{n}"),
        PageStatus::NotPresent => "not-present".into(),
        PageStatus::Busy => "busy".into(),
        PageStatus::Denied => "denied".into(),
        PageStatus::Fault => "fault".into(),
        PageStatus::NoMemory => "no-memory".into(),
        PageStatus::Other(e) => format!("errno {e}"),
    }
}

/// Carries out actions on one process.
pub struct Executor {
    pid: i32,
    dry_run: bool,
    opts: MovePagesOptions,
    has_memory: NodeMask,
    /// Where debugfs' split_huge_pages is (tests point it elsewhere).
    pub split_file: std::path::PathBuf,
}

impl Executor {
    /// `has_memory`: the nodes that can take pages (a move to any other is refused per page).
    pub fn new(pid: i32, has_memory: NodeMask, dry_run: bool) -> Executor {
        Executor {
            pid,
            dry_run,
            opts: MovePagesOptions::default(),
            has_memory,
            split_file: "/sys/kernel/debug/split_huge_pages".into(),
        }
    }

    /// One tick's actions in order. A `SetTaskPolicy` is skipped as by [`Executor::apply`],
    /// but a percentage policy without a `MovePages` of the same task in the tick also says
    /// that only pages already placed could have been moved, and how.
    pub fn apply_all(&self, actions: &[Action]) -> Vec<Outcome> {
        actions
            .iter()
            .map(|a| {
                let o = self.apply(a);
                match a {
                    Action::SetTaskPolicy {
                        task,
                        policy: MemPolicy::RemotePercent { percent, .. },
                    } if !actions
                        .iter()
                        .any(|b| matches!(b, Action::MovePages { task: t, .. } if t == task)) =>
                    {
                        let why = o.reason.clone().unwrap_or_default();
                        o.skip(format!(
                            "{why}; its future allocations keep their policy, so the \
                             {percent}% remote share is not applied: only pages already placed \
                             can be moved from outside (adaptive-percent with move=1 does that)"
                        ))
                    }
                    _ => o,
                }
            })
            .collect()
    }

    pub fn apply(&self, a: &Action) -> Outcome {
        let o = Outcome::new(a);
        // a policy may act on every task of a view; numalab balance changes one process
        if let Some(t) = a.task() {
            if t.0 as i64 != self.pid as i64 {
                return o.skip(format!(
                    "task {} is not the balanced process {}: only its memory is changed",
                    t.0, self.pid
                ));
            }
        }
        match a {
            Action::Migrate {
                start,
                len_bytes,
                to,
                ..
            } => self.move_range(o, *start, *len_bytes, *to),
            Action::MovePages { pages, .. } => self.move_list(o, pages),
            Action::Interleave {
                start,
                len_bytes,
                nodes,
                ..
            } => {
                let targets: Vec<NodeId> = nodes.iter().collect();
                if targets.is_empty() {
                    return o.skip("empty node set");
                }
                // page k of the range goes to the k-th node round robin, as the kernel's
                // interleave numbers pages by their offset in the range
                let pages: Vec<(u64, NodeId)> = range_pages(*start, *len_bytes)
                    .enumerate()
                    .map(|(k, p)| (p, targets[k % targets.len()]))
                    .collect();
                self.move_list(o, &pages)
            }
            Action::SplitHuge { addr, .. } => self.split(o, *addr),
            Action::SetThpAdvice {
                start,
                len_bytes,
                allow,
                ..
            } => self.thp_advice(o, *start, *len_bytes, *allow),
            Action::SetThpAllocation { .. } => o.skip(
                "THP allocation and khugepaged are machine-wide settings \
                 (/sys/kernel/mm/transparent_hugepage): numalab balance changes the balanced \
                 process only",
            ),
            Action::SetRangePolicy { .. } => o.skip(
                "mbind(2) sets a range policy in the calling process only: Linux has no way to \
                 set one in another process",
            ),
            Action::SetTaskPolicy { .. } => o.skip(
                "set_mempolicy(2) sets the calling thread's policy only: Linux has no way to set \
                 another process's",
            ),
            Action::MarkNextTouch { .. } => o.skip(
                "next-touch needs the process's cooperation (its own mprotect and SIGSEGV \
                 handler, which alone learns the next toucher's node): start it under `numalab run \
                 --next-touch` (numalab-nexttouch's preload)",
            ),
            Action::LazyMigrate {
                start,
                len_bytes,
                to,
                ..
            } => {
                // the populated pages not on `to` move now (move_list leaves the rest alone);
                // pages faulted later follow the process's own policy
                let mut o = self.move_range(o, *start, *len_bytes, *to);
                if o.result != OutcomeKind::Failed {
                    o.reason = Some(LAZY_EAGER.into());
                }
                o
            }
            Action::MigrateProcess { from, to, .. } => self.migrate_process(o, from, to),
            Action::MoveThread { thread, cpu } => {
                if !std::path::Path::new(&format!("/proc/{}/task/{}", self.pid, thread.0)).exists()
                {
                    return o.skip(format!(
                        "thread {} is not a thread of process {}",
                        thread.0, self.pid
                    ));
                }
                if self.dry_run {
                    return Outcome {
                        result: OutcomeKind::DryRun,
                        ..o
                    };
                }
                match set_affinity(thread.0 as i32, cpu.0) {
                    Ok(()) => o,
                    Err(e) => o.fail(format!("sched_setaffinity: {e}")),
                }
            }
        }
    }

    /// Every 4 KiB step of the range to `to`, a chunk at a time: a large sparse range (a
    /// reserved heap) never needs its whole page list in memory.
    fn move_range(&self, mut o: Outcome, start: u64, len: u64, to: NodeId) -> Outcome {
        const CHUNK: usize = 1 << 16;
        let mut pages = range_pages(start, len).peekable();
        while pages.peek().is_some() {
            let chunk: Vec<(u64, NodeId)> = pages.by_ref().take(CHUNK).map(|p| (p, to)).collect();
            o = self.move_list(o, &chunk);
            if o.result == OutcomeKind::Failed {
                break;
            }
        }
        o
    }

    /// `migrate_pages(2)` on the whole process. The call returns only how many pages it could
    /// not move, so the pages on the source nodes it empties (the kernel's map,
    /// `numalab_core::migrate_pages`) are counted from /proc/PID/numa_maps before (asked) and
    /// after (moved: the net decrease, exact unless a source is also a destination).
    fn migrate_process(&self, mut o: Outcome, from: &NodeMask, to: &NodeMask) -> Outcome {
        let no_memory = to.and_not(&self.has_memory);
        if !no_memory.is_empty() {
            return o.skip(format!(
                "nodes {no_memory} have no memory: migrate_pages(2) cannot move pages there \
                 (numalab topo lists the nodes with memory)"
            ));
        }
        let sources = NodeMask::from_nodes(migration_steps(from, to).into_iter().map(|(s, _)| s));
        let on_sources = || -> Result<u64, String> {
            let maps =
                read_numa_maps(&SysRoot::host(), Pid(self.pid)).map_err(|e| e.to_string())?;
            let bytes = bytes_per_node(&maps);
            Ok(sources
                .iter()
                .map(|n| bytes.get(&n).copied().unwrap_or(0))
                .sum::<u64>()
                / BASE)
        };
        let before = match on_sources() {
            Ok(p) => p,
            Err(e) => return o.fail(e),
        };
        o.pages_asked = before;
        if self.dry_run {
            o.result = OutcomeKind::DryRun;
            return o;
        }
        match migrate_pages(Pid(self.pid), from, to) {
            Ok(left) => {
                if left > 0 {
                    o.not_moved.insert("not-moved".into(), left);
                }
                match on_sources() {
                    Ok(after) => o.pages_moved = before.saturating_sub(after),
                    Err(e) => o.reason = Some(format!("moved pages not counted: {e}")),
                }
                o
            }
            Err(e) => o.fail(e.to_string()),
        }
    }

    /// Moves each page to its node with move_pages, leaving alone the pages already there,
    /// those not present and targets without memory; counts per status.
    fn move_list(&self, mut o: Outcome, pages: &[(u64, NodeId)]) -> Outcome {
        o.pages_asked += pages.len() as u64;
        let addrs: Vec<usize> = pages.iter().map(|(a, _)| *a as usize).collect();
        let before = match move_pages_query(Pid(self.pid), &addrs, &self.opts) {
            Ok(s) => s,
            Err(e) => return o.fail(e.to_string()),
        };
        let mut go_addr = Vec::new();
        let mut go_node = Vec::new();
        for ((addr, to), st) in pages.iter().zip(&before) {
            match st {
                PageStatus::OnNode(n) if n == to => o.already_there += 1,
                PageStatus::OnNode(_) if !self.has_memory.contains(*to) => {
                    *o.not_moved.entry("no-memory-node".into()).or_default() += 1
                }
                PageStatus::OnNode(_) => {
                    go_addr.push(*addr as usize);
                    go_node.push(*to);
                }
                s => *o.not_moved.entry(status_name(*s)).or_default() += 1,
            }
        }
        if self.dry_run {
            o.result = OutcomeKind::DryRun;
            return o;
        }
        if go_addr.is_empty() {
            return o;
        }
        match move_pages(Pid(self.pid), &go_addr, &go_node, &self.opts) {
            Ok(rep) => {
                for (st, to) in rep.status.iter().zip(&go_node) {
                    match st {
                        PageStatus::OnNode(n) if n == to => o.pages_moved += 1,
                        // the kernel left it where it was, or another thread moved it
                        PageStatus::OnNode(_) => {
                            *o.not_moved.entry("stayed".into()).or_default() += 1
                        }
                        s => *o.not_moved.entry(status_name(*s)).or_default() += 1,
                    }
                }
                o
            }
            Err(e) => o.fail(e.to_string()),
        }
    }

    fn split(&self, o: Outcome, addr: u64) -> Outcome {
        let f = &self.split_file;
        if !f.exists() {
            return o.skip(format!(
                "no {}: Linux splits another process's huge page in place only through debugfs \
                 (root, CONFIG_DEBUG_FS, Linux 5.13+); MADV_NOHUGEPAGE would not split it",
                f.display()
            ));
        }
        if self.dry_run {
            return Outcome {
                result: OutcomeKind::DryRun,
                ..o
            };
        }
        let start = addr & !((2 << 20) - 1);
        let line = format!("{},{:#x},{:#x}", self.pid, start, start + (2 << 20));
        match std::fs::write(f, &line) {
            Ok(()) => o,
            Err(e) => o.fail(format!("writing '{line}' to {}: {e}", f.display())),
        }
    }

    fn thp_advice(&self, o: Outcome, start: u64, len: u64, allow: bool) -> Outcome {
        if self.dry_run {
            return Outcome {
                result: OutcomeKind::DryRun,
                ..o
            };
        }
        let advice = if allow {
            libc::MADV_HUGEPAGE
        } else {
            libc::MADV_NOHUGEPAGE
        };
        match process_madvise(self.pid, start, len, advice) {
            Ok(()) => o,
            Err(libc::ENOSYS) => o.skip("no process_madvise(2) (Linux 5.10+): the advice cannot be given to another process"),
            Err(libc::EINVAL) => o.skip(
                "process_madvise(2) refuses MADV_HUGEPAGE/MADV_NOHUGEPAGE (it takes COLD, \
                 PAGEOUT, WILLNEED and COLLAPSE only): THP advice cannot be given to another \
                 process",
            ),
            Err(e) => o.fail(format!(
                "process_madvise: {}",
                std::io::Error::from_raw_os_error(e)
            )),
        }
    }
}

/// 4 KiB steps of `[start, start + len)`.
fn range_pages(start: u64, len: u64) -> impl Iterator<Item = u64> {
    let first = start & !(BASE - 1);
    (first..start.saturating_add(len)).step_by(BASE as usize)
}

fn set_affinity(tid: i32, cpu: u32) -> Result<(), std::io::Error> {
    numalab_linux::syscalls::set_cpu_affinity(tid, &[numalab_core::CpuId(cpu)])
}

/// process_madvise(pidfd_open(pid), [start, len), advice): Err(errno).
fn process_madvise(pid: i32, start: u64, len: u64, advice: i32) -> Result<(), i32> {
    // SAFETY: raw syscalls with plain integer arguments and one iovec that lives across the
    // call; the pidfd is closed before returning.
    unsafe {
        let fd = libc::syscall(libc::SYS_pidfd_open, pid, 0) as i32;
        if fd < 0 {
            return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        let iov = libc::iovec {
            iov_base: start as *mut libc::c_void,
            iov_len: len as usize,
        };
        let r = libc::syscall(libc::SYS_process_madvise, fd, &iov, 1usize, advice, 0u32);
        let err = std::io::Error::last_os_error().raw_os_error().unwrap_or(0);
        libc::close(fd);
        if r < 0 {
            return Err(err);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_step_by_base_pages() {
        // a chunked range (move_range) asks for every page once
        let ex = Executor::new(std::process::id() as i32, NodeMask::single(NodeId(0)), true);
        let a = Action::Migrate {
            task: numalab_core::TaskId(std::process::id()),
            start: 0x1000_0000,
            len_bytes: (1 << 16) * 4096 + 3 * 4096,
            to: NodeId(0),
        };
        let o = ex.apply(&a);
        assert_eq!(o.result, OutcomeKind::DryRun, "{o:?}");
        assert_eq!(o.pages_asked, (1 << 16) + 3);
        let v: Vec<u64> = range_pages(0x1800, 0x2000).collect();
        assert_eq!(v, vec![0x1000, 0x2000, 0x3000]);
        assert_eq!(range_pages(0x1000, 0).count(), 0);
    }
}
