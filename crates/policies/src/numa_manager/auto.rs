//! Müller's Auto policy (reference/policies.md §8): every period, per-task MPKI from the
//! threads' counters, pressure per node, Algorithm 4.1 generalised to N nodes with the
//! absolute-difference [fix] (move at most `max_moves` tasks), then Algorithm 4.2 (lazily
//! migrate the regions of tasks that load remotely to their home), or in its place one
//! whole-process `migrate_pages(2)` of such a task to its home (`migrate=process`).

use super::region_policy::migratable;
use super::thread_policy::cpu_nodes;
use numalab_core::view::{MemoryView, RegionInfo, ThreadCounters};
use numalab_core::{Action, CpuId, MemPolicy, NodeId, NodeMask, TaskId, ThreadId};
use std::collections::BTreeMap;

/// What one task did over the last period.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskLoad {
    pub task: TaskId,
    /// Home node at the start of the period.
    pub home: NodeId,
    /// LLC misses per 1000 instructions over the period (0 without instructions).
    pub mpki: f64,
    /// Remote loads / loads over the period (None without loads).
    pub remote_load_ratio: Option<f64>,
}

/// A task re-homed by Algorithm 4.1.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskMove {
    pub task: TaskId,
    pub from: NodeId,
    pub to: NodeId,
    /// pressure[hot] − pressure[cold] before the move.
    pub diff_before: f64,
    /// |pressure[cold] − pressure[hot]| after it.
    pub diff_after: f64,
}

/// A region lazily migrated by Algorithm 4.2.
#[derive(Clone, Debug, PartialEq)]
pub struct LazyMove {
    pub task: TaskId,
    pub start: u64,
    pub len_bytes: u64,
    pub to: NodeId,
}

/// What one Auto period saw and did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AutoRound {
    pub time_ns: u64,
    pub tasks: Vec<TaskLoad>,
    /// Σ MPKI of the tasks homed on each node, before the moves.
    pub pressure: Vec<f64>,
    pub moves: Vec<TaskMove>,
    pub lazy: Vec<LazyMove>,
    /// Tasks whose memory one migrate_pages call sent home (`migrate=process`), and where.
    pub whole: Vec<(TaskId, NodeId)>,
}

/// `pressure[n]` = Σ MPKI of the tasks homed on n (additive: a move shifts exactly the task's
/// value).
pub fn node_pressure(tasks: &[TaskLoad], nodes: usize) -> Vec<f64> {
    let mut p = vec![0.0; nodes];
    for t in tasks {
        if let Some(x) = p.get_mut(t.home.index()) {
            *x += t.mpki;
        }
    }
    p
}

/// Algorithm 4.1 generalised to N nodes, repeated at most `max_moves` times (each task moves
/// at most once):
///
/// hot = argmax pressure, cold = argmin (over `nodes`, the nodes with CPUs; ties to the lowest
/// id); d = pressure[hot] − pressure[cold]; if d ≥ `thresh_mpki`, move the task t homed on hot
/// that minimises |(pressure[cold] + t) − (pressure[hot] − t)|, if that is below d. The
/// printed pseudo-code compares the signed difference, so nothing moves when the second node
/// is the hotter; the absolute difference is the [fix].
pub fn thread_step(
    tasks: &[TaskLoad],
    nodes: &[NodeId],
    num_nodes: usize,
    thresh_mpki: f64,
    max_moves: usize,
) -> Vec<TaskMove> {
    let mut pressure = node_pressure(tasks, num_nodes);
    let mut homes: Vec<NodeId> = tasks.iter().map(|t| t.home).collect();
    let mut moved = vec![false; tasks.len()];
    let mut out = Vec::new();
    while out.len() < max_moves {
        let pick = |better: fn(f64, f64) -> bool| {
            nodes
                .iter()
                .copied()
                .fold(None, |acc: Option<NodeId>, n| match acc {
                    Some(a) if !better(pressure[n.index()], pressure[a.index()]) => Some(a),
                    _ => Some(n),
                })
        };
        let (Some(hot), Some(cold)) = (pick(|a, b| a > b), pick(|a, b| a < b)) else {
            break;
        };
        if hot == cold {
            break;
        }
        let (ph, pc) = (pressure[hot.index()], pressure[cold.index()]);
        let d = ph - pc;
        if d < thresh_mpki {
            break;
        }
        let mut best: Option<(usize, f64)> = None;
        for (i, t) in tasks.iter().enumerate() {
            if moved[i] || homes[i] != hot {
                continue;
            }
            let d2 = ((pc + t.mpki) - (ph - t.mpki)).abs();
            if d2 < best.map_or(d, |(_, b)| b) {
                best = Some((i, d2));
            }
        }
        let Some((i, d2)) = best else { break };
        moved[i] = true;
        homes[i] = cold;
        pressure[hot.index()] -= tasks[i].mpki;
        pressure[cold.index()] += tasks[i].mpki;
        out.push(TaskMove {
            task: tasks[i].task,
            from: hot,
            to: cold,
            diff_before: d,
            diff_after: d2,
        });
    }
    out
}

/// Auto's memory of the previous period.
#[derive(Clone, Debug, Default)]
pub struct AutoState {
    last: BTreeMap<ThreadId, ThreadCounters>,
    /// Home node of every known task (seeded by the creation-time placement).
    pub homes: BTreeMap<TaskId, NodeId>,
    /// Regions already lazily migrated, and where to: not marked again while the task stays.
    migrated: BTreeMap<(TaskId, u64), NodeId>,
    /// Tasks already sent home by migrate_pages, and where: not again while the task stays.
    migrated_whole: BTreeMap<TaskId, NodeId>,
}

/// Auto's thresholds.
#[derive(Clone, Debug, PartialEq)]
pub struct AutoParams {
    pub thresh_mpki: f64,
    pub thresh_rlr: f64,
    pub max_moves: usize,
    /// Run the memory step.
    pub lazy_migrate: bool,
    /// The memory step moves a task's whole memory with one migrate_pages(2) call (every
    /// node but its home, to its home) instead of lazily migrating each region.
    pub whole_process: bool,
}

impl AutoState {
    /// One period: measure, Algorithm 4.1, Algorithm 4.2.
    pub fn tick(&mut self, view: &dyn MemoryView, p: &AutoParams) -> (Vec<Action>, AutoRound) {
        let threads = view.threads();
        // per-task counter deltas since the previous period
        let mut sums: BTreeMap<TaskId, (u64, u64, u64, u64)> = BTreeMap::new();
        let mut nodes_of: BTreeMap<TaskId, Vec<NodeId>> = BTreeMap::new();
        for th in &threads {
            let now = view.thread_counters(th.thread);
            let old = self.last.insert(th.thread, now).unwrap_or_default();
            let s = sums.entry(th.task).or_default();
            s.0 += now.instructions.saturating_sub(old.instructions);
            s.1 += now.llc_misses.saturating_sub(old.llc_misses);
            s.2 += now.loads.saturating_sub(old.loads);
            s.3 += now.remote_loads.saturating_sub(old.remote_loads);
            nodes_of.entry(th.task).or_default().push(th.node);
        }
        let tasks: Vec<TaskLoad> = sums
            .iter()
            .map(|(task, &(instr, llc, loads, remote))| {
                let home = *self
                    .homes
                    .entry(*task)
                    .or_insert_with(|| majority(&nodes_of[task]));
                TaskLoad {
                    task: *task,
                    home,
                    mpki: if instr > 0 {
                        llc as f64 * 1000.0 / instr as f64
                    } else {
                        0.0
                    },
                    remote_load_ratio: (loads > 0).then(|| remote as f64 / loads as f64),
                }
            })
            .collect();
        let n = view.num_nodes();
        let moves = thread_step(&tasks, &cpu_nodes(view), n, p.thresh_mpki, p.max_moves);
        let mut actions = Vec::new();
        // occupancy of each CPU, so moved threads take free CPUs of the cold node first
        let mut busy: BTreeMap<CpuId, usize> = BTreeMap::new();
        for th in &threads {
            *busy.entry(th.cpu).or_default() += 1;
        }
        for m in &moves {
            self.homes.insert(m.task, m.to);
            let cpus = view.node_cpus(m.to);
            for th in threads.iter().filter(|t| t.task == m.task) {
                let Some(&cpu) = cpus
                    .iter()
                    .min_by_key(|c| busy.get(c).copied().unwrap_or(0))
                else {
                    continue;
                };
                *busy.entry(cpu).or_default() += 1;
                if let Some(b) = busy.get_mut(&th.cpu) {
                    *b = b.saturating_sub(1);
                }
                actions.push(Action::MoveThread {
                    thread: th.thread,
                    cpu,
                });
            }
        }
        let mut lazy = Vec::new();
        let mut whole = Vec::new();
        if p.lazy_migrate && p.whole_process {
            whole = self.migrate_whole(view, &tasks, p.thresh_rlr, &mut actions);
        } else if p.lazy_migrate {
            let regions = view.regions();
            for t in &tasks {
                if !t.remote_load_ratio.is_some_and(|r| r >= p.thresh_rlr) {
                    continue;
                }
                let home = self.homes[&t.task];
                for r in regions
                    .iter()
                    .filter(|r| r.task == t.task && migratable(r.policy.as_ref()))
                {
                    if self.migrated.get(&(r.task, r.start)) == Some(&home)
                        || !off_home(view, r.task, r.start, r.len_bytes, home)
                    {
                        continue;
                    }
                    self.migrated.insert((r.task, r.start), home);
                    // Müller's migrate allocates the region's backing on the destination:
                    // pages not yet faulted go there too
                    actions.push(prefer_home(r, home));
                    actions.push(Action::LazyMigrate {
                        task: r.task,
                        start: r.start,
                        len_bytes: r.len_bytes,
                        to: home,
                    });
                    lazy.push(LazyMove {
                        task: r.task,
                        start: r.start,
                        len_bytes: r.len_bytes,
                        to: home,
                    });
                }
            }
        }
        let round = AutoRound {
            time_ns: view.now_ns(),
            pressure: node_pressure(&tasks, n),
            tasks,
            moves,
            lazy,
            whole,
        };
        (actions, round)
    }

    /// The memory step with `migrate=process`: each task that loads remotely at least
    /// `thresh_rlr` and has memory off its home gets one migrate_pages(2) from every other
    /// node to its home (the call moves all of its memory, interleaved regions too, as the
    /// kernel's does), and its migratable regions the home as preferred node for later
    /// faults, as the lazy step gives them.
    fn migrate_whole(
        &mut self,
        view: &dyn MemoryView,
        tasks: &[TaskLoad],
        thresh_rlr: f64,
        actions: &mut Vec<Action>,
    ) -> Vec<(TaskId, NodeId)> {
        let regions = view.regions();
        let all = NodeMask::first_n(view.num_nodes());
        let mut whole = Vec::new();
        for t in tasks {
            if !t.remote_load_ratio.is_some_and(|r| r >= thresh_rlr) {
                continue;
            }
            let home = self.homes[&t.task];
            let mine: Vec<_> = regions.iter().filter(|r| r.task == t.task).collect();
            if self.migrated_whole.get(&t.task) == Some(&home)
                || !mine
                    .iter()
                    .any(|r| off_home(view, r.task, r.start, r.len_bytes, home))
            {
                continue;
            }
            self.migrated_whole.insert(t.task, home);
            for r in mine.iter().filter(|r| migratable(r.policy.as_ref())) {
                actions.push(prefer_home(r, home));
            }
            let mut from = all;
            from.clear(home);
            actions.push(Action::MigrateProcess {
                task: t.task,
                from,
                to: NodeMask::single(home),
            });
            whole.push((t.task, home));
        }
        whole
    }
}

/// The memory step's policy for a region's later faults: its task's home, preferred.
fn prefer_home(r: &RegionInfo, home: NodeId) -> Action {
    Action::SetRangePolicy {
        task: r.task,
        start: r.start,
        len_bytes: r.len_bytes,
        policy: MemPolicy::Preferred { node: home },
    }
}

/// The node most of `nodes` are on, ties to the lowest id.
fn majority(nodes: &[NodeId]) -> NodeId {
    let mut count: BTreeMap<NodeId, usize> = BTreeMap::new();
    for n in nodes {
        *count.entry(*n).or_default() += 1;
    }
    count
        .iter()
        .fold(None, |acc: Option<(NodeId, usize)>, (n, c)| match acc {
            Some((_, bc)) if bc >= *c => acc,
            _ => Some((*n, *c)),
        })
        .map_or(NodeId(0), |(n, _)| n)
}

/// Whether a populated page of the range lies off `home` (stops at the first one found).
fn off_home(view: &dyn MemoryView, task: TaskId, start: u64, len: u64, home: NodeId) -> bool {
    let end = start + len;
    let mut a = start;
    while a < end {
        match view.page(task, a) {
            Some(pg) => {
                if pg.node != home {
                    return true;
                }
                a = pg.start + pg.size.bytes();
            }
            None => a += 4096,
        }
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(task: u32, home: u16, mpki: f64) -> TaskLoad {
        TaskLoad {
            task: TaskId(task),
            home: NodeId(home),
            mpki,
            remote_load_ratio: None,
        }
    }

    const TWO: &[NodeId] = &[NodeId(0), NodeId(1)];

    #[test]
    fn moves_the_task_that_best_evens_pressure() {
        // node 0: 40 + 20, node 1: 30 -> d = 30. Moving the 40 gives |70 - 20| = 50 (worse),
        // moving the 20 gives |50 - 40| = 10: the lighter task is the right one.
        let tasks = [t(0, 0, 40.0), t(1, 0, 20.0), t(2, 1, 30.0)];
        let m = thread_step(&tasks, TWO, 2, 5.0, 1);
        assert_eq!(m.len(), 1);
        assert_eq!(
            (m[0].task, m[0].from, m[0].to),
            (TaskId(1), NodeId(0), NodeId(1))
        );
        assert_eq!((m[0].diff_before, m[0].diff_after), (30.0, 10.0));
    }

    #[test]
    fn absolute_difference_lets_the_second_node_be_the_hotter() {
        // The printed two-node code only moves from node 0; here node 1 is hot (55 vs 1).
        // Moving the 30 leaves |31 - 25| = 6, moving the 25 leaves |26 - 30| = 4.
        let tasks = [t(0, 0, 1.0), t(1, 1, 30.0), t(2, 1, 25.0)];
        let m = thread_step(&tasks, TWO, 2, 5.0, 1);
        assert_eq!(
            (m[0].task, m[0].from, m[0].to),
            (TaskId(2), NodeId(1), NodeId(0))
        );
    }

    #[test]
    fn threshold_balance_and_move_cap() {
        // d = 4 < 5: nothing
        assert!(thread_step(&[t(0, 0, 4.0)], TWO, 2, 5.0, 1).is_empty());
        // a single task whose move would not narrow the gap stays (|8 - 0| is not < 8)
        assert!(thread_step(&[t(0, 0, 8.0)], TWO, 2, 5.0, 1).is_empty());
        // four equal tasks on node 0 of 4 nodes: one per period, three with a cap of 3
        let four: Vec<NodeId> = (0..4).map(NodeId).collect();
        let tasks: Vec<TaskLoad> = (0..4).map(|i| t(i, 0, 10.0)).collect();
        assert_eq!(thread_step(&tasks, &four, 4, 5.0, 1).len(), 1);
        let m = thread_step(&tasks, &four, 4, 5.0, 3);
        let to: Vec<u16> = m.iter().map(|m| m.to.0).collect();
        assert_eq!(
            to,
            vec![1, 2, 3],
            "each to the coldest node, ties to the lowest id"
        );
        // a CPU-less node (2 here) is never cold
        let m = thread_step(&tasks, &[NodeId(0), NodeId(1)], 4, 5.0, 3);
        assert!(m.iter().all(|m| m.to == NodeId(1)), "{m:?}");
    }

    #[test]
    fn majority_ties_to_lowest() {
        assert_eq!(majority(&[NodeId(1), NodeId(0)]), NodeId(0));
        assert_eq!(majority(&[NodeId(1), NodeId(0), NodeId(1)]), NodeId(1));
    }
}
