//! Müller's static thread placement (reference/policies.md §8), decided at thread creation.
//!
//! CPU order inside a node is the view's (`node_cpus`, id order). The view does not say which
//! CPUs are SMT siblings; on Linux x86 and in the presets every core's first hardware thread is
//! numbered before any second one (node 0 of `xeon-e5-2699v4-2n` is `0-21,44-65`), so filling
//! a node in id order gives one thread per physical core before any core gets a second: that
//! is the SMT awareness of Balanced and Auto. A machine numbering siblings adjacently
//! (`0,1` = one core) would get siblings first.

use numalab_core::view::{MemoryView, ThreadInfo};
use numalab_core::{CpuId, NodeId, TaskId};
use std::collections::BTreeMap;

/// Thread policies, in the order of the `threads` parameter's choices.
pub const THREAD_POLICIES: &[&str] = &["fixed", "rr-threads", "rr-tasks", "balanced", "auto"];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ThreadPolicy {
    /// Every thread on one CPU, never moved.
    Fixed { cpu: CpuId },
    /// Global cursor over the logical CPUs: each new thread takes the next, wrapping.
    RrThreads,
    /// All threads of a task share one CPU; the cursor advances per task.
    RrTasks,
    /// A new task is homed on the node with the fewest homed tasks (ties: lowest id); its
    /// threads go on that node's CPUs.
    Balanced,
    /// Balanced at creation (or the runner's placement), then the periodic Algorithms 4.1
    /// and 4.2 (`auto.rs`).
    Auto,
}

impl ThreadPolicy {
    pub fn from_name(name: &str, cpu: CpuId) -> ThreadPolicy {
        match name {
            "fixed" => ThreadPolicy::Fixed { cpu },
            "rr-threads" => ThreadPolicy::RrThreads,
            "rr-tasks" => ThreadPolicy::RrTasks,
            "balanced" => ThreadPolicy::Balanced,
            "auto" => ThreadPolicy::Auto,
            other => panic!("unknown thread policy '{other}' (the parser checks names)"),
        }
    }
}

/// Every logical CPU of the machine, in id order.
pub fn all_cpus(view: &dyn MemoryView) -> Vec<CpuId> {
    let mut v: Vec<CpuId> = (0..view.num_nodes())
        .flat_map(|n| view.node_cpus(NodeId(n as u16)))
        .collect();
    v.sort();
    v
}

/// Nodes that have CPUs (a task can only be homed where its threads can run).
pub fn cpu_nodes(view: &dyn MemoryView) -> Vec<NodeId> {
    (0..view.num_nodes())
        .map(|n| NodeId(n as u16))
        .filter(|n| !view.node_cpus(*n).is_empty())
        .collect()
}

/// The state of the static rules: cursors, task CPUs and homes.
#[derive(Clone, Debug, Default)]
pub struct ThreadPlacer {
    /// Next CPU index for RR Threads / RR Tasks.
    cursor: usize,
    /// RR Tasks: the CPU of each task.
    task_cpu: BTreeMap<TaskId, CpuId>,
    /// Balanced: the home node of each task.
    pub homes: BTreeMap<TaskId, NodeId>,
    /// Balanced: threads placed so far on each node (the next one takes the next CPU).
    placed: BTreeMap<NodeId, usize>,
}

impl ThreadPlacer {
    /// The CPU for a new thread under `policy` (None: keep the runner's choice, e.g. Fixed on a
    /// CPU the machine does not have).
    pub fn place(
        &mut self,
        policy: ThreadPolicy,
        view: &dyn MemoryView,
        th: &ThreadInfo,
    ) -> Option<CpuId> {
        match policy {
            ThreadPolicy::Fixed { cpu } => all_cpus(view).contains(&cpu).then_some(cpu),
            ThreadPolicy::RrThreads => {
                let cpus = all_cpus(view);
                let c = *cpus.get(self.cursor % cpus.len().max(1))?;
                self.cursor += 1;
                Some(c)
            }
            ThreadPolicy::RrTasks => {
                if let Some(c) = self.task_cpu.get(&th.task) {
                    return Some(*c);
                }
                let cpus = all_cpus(view);
                let c = *cpus.get(self.cursor % cpus.len().max(1))?;
                self.cursor += 1;
                self.task_cpu.insert(th.task, c);
                Some(c)
            }
            ThreadPolicy::Balanced | ThreadPolicy::Auto => {
                let home = match self.homes.get(&th.task) {
                    Some(h) => *h,
                    None => {
                        let h = self.fewest_homed(view)?;
                        self.homes.insert(th.task, h);
                        h
                    }
                };
                let cpus = view.node_cpus(home);
                let k = self.placed.entry(home).or_insert(0);
                let c = *cpus.get(*k % cpus.len().max(1))?;
                *k += 1;
                Some(c)
            }
        }
    }

    /// The CPU node with the fewest homed tasks, ties to the lowest id.
    fn fewest_homed(&self, view: &dyn MemoryView) -> Option<NodeId> {
        cpu_nodes(view)
            .into_iter()
            .min_by_key(|n| (self.homes.values().filter(|h| *h == n).count(), *n))
    }
}
