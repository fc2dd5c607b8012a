//! A scripted workload of several tasks (own TaskId, own mappings) and probes that record
//! where threads run and where each region's pages are, for the NUMA manager and adaptive
//! percentage scenarios. Used as `#[path = "common/tasks.rs"] mod tasks;`.
#![allow(dead_code)]

use numalab_core::view::{MemoryView, ThreadInfo};
use numalab_core::{
    Action, AddressSpace, MapOptions, NodeId, Op, Policy, TaskId, ThreadProgram, ThreadSpec,
    Workload,
};
use std::sync::{Arc, Mutex};

/// Builds the ops of one thread lazily: `gen(bases, thread_in_task, chunk, out)` appends
/// chunk number `chunk` and returns false after the last one; `bases` are the task's
/// mappings in order.
pub type TaskGen = Arc<dyn Fn(&[u64], usize, usize, &mut Vec<Op>) -> bool + Send + Sync>;

pub struct TaskSpec {
    /// (bytes, options) of each mapping of the task, in order.
    pub maps: Vec<(u64, MapOptions)>,
    pub threads: usize,
    pub gen: TaskGen,
}

/// Task i is `TaskId(i)`; threads are numbered task by task. Mappings are named `t{i}m{j}`.
pub struct Tasks(pub Vec<TaskSpec>);

struct Lazy {
    bases: Vec<u64>,
    t: usize,
    chunk: usize,
    gen: TaskGen,
}

impl ThreadProgram for Lazy {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        let more = (self.gen)(&self.bases, self.t, self.chunk, out);
        self.chunk += 1;
        more
    }
}

impl Workload for Tasks {
    fn name(&self) -> String {
        "tasks".into()
    }
    fn threads(&self) -> usize {
        self.0.iter().map(|t| t.threads).sum()
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let mut out = Vec::new();
        for (i, spec) in self.0.iter().enumerate() {
            let task = TaskId(i as u32);
            let bases: Vec<u64> = spec
                .maps
                .iter()
                .enumerate()
                .map(|(j, (b, o))| mem.mmap(task, &format!("t{i}m{j}"), *b, o.clone()))
                .collect();
            for t in 0..spec.threads {
                out.push(ThreadSpec {
                    task,
                    program: Box::new(Lazy {
                        bases: bases.clone(),
                        t,
                        chunk: 0,
                        gen: spec.gen.clone(),
                    }),
                });
            }
        }
        out
    }
}

/// What a [`Watch`] saw at one tick.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    pub time_ns: u64,
    pub threads: Vec<ThreadInfo>,
    /// Per region, in mmap order: (name, populated 4 KiB units per node).
    pub regions: Vec<(String, Vec<u64>)>,
    /// Node of every 4 KiB page of each region (None: not populated), when `pages` is set.
    pub pages: Vec<Vec<Option<NodeId>>>,
}

impl Snapshot {
    pub fn region(&self, name: &str) -> &Vec<u64> {
        &self
            .regions
            .iter()
            .find(|(n, _)| n == name)
            .unwrap_or_else(|| panic!("no region {name}"))
            .1
    }
    pub fn cpus(&self) -> Vec<u32> {
        self.threads.iter().map(|t| t.cpu.0).collect()
    }
}

/// A policy that only looks: every period it records threads and placement. Listed after
/// the policy under test, it sees that policy's actions applied.
pub struct Watch {
    pub period_ns: u64,
    pub pages: bool,
    pub out: Arc<Mutex<Vec<Snapshot>>>,
}

impl Watch {
    pub fn new(period_ns: u64, pages: bool) -> (Box<Watch>, Arc<Mutex<Vec<Snapshot>>>) {
        let out = Arc::new(Mutex::new(Vec::new()));
        (
            Box::new(Watch {
                period_ns,
                pages,
                out: out.clone(),
            }),
            out,
        )
    }
}

impl Policy for Watch {
    fn name(&self) -> &str {
        "watch"
    }
    fn period_ns(&self) -> u64 {
        self.period_ns
    }
    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action> {
        let n = view.num_nodes();
        let mut snap = Snapshot {
            time_ns: view.now_ns(),
            threads: view.threads(),
            ..Default::default()
        };
        for r in view.regions() {
            let mut per = vec![0u64; n];
            let mut pages = Vec::new();
            for i in 0..r.len_bytes / 4096 {
                let pg = view.page(r.task, r.start + i * 4096);
                if let Some(p) = pg {
                    per[p.node.index()] += 1;
                }
                if self.pages {
                    pages.push(pg.map(|p| p.node));
                }
            }
            snap.regions.push((r.name.clone(), per));
            snap.pages.push(pages);
        }
        self.out.lock().unwrap().push(snap);
        Vec::new()
    }
}
