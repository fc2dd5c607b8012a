//! Shared pieces of the policy scenarios: a scripted workload, a small 4-node machine, and a
//! probe policy that records where pages are, all run through the real simulator.
#![allow(dead_code)]

use numalab_core::view::MemoryView;
use numalab_core::{
    AccessKind, Action, AddressSpace, CpuId, MapOptions, NodeId, Op, PageSize, Policy, TaskId,
    ThreadProgram, ThreadSpec, Workload,
};
use numalab_machine::{CacheGeom, Machine};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};
use std::sync::{Arc, Mutex};

pub const KB4: u64 = 4096;
pub const MB2: u64 = 2 << 20;
pub const LINE: u64 = 64;

/// Builds the op stream of thread `t` lazily, chunk by chunk: `gen(bases, t, chunk, out)`
/// appends the ops of chunk number `chunk` and returns false after the last one.
pub type Gen = fn(&[u64], usize, usize, &mut Vec<Op>) -> bool;

/// A workload of one task: mappings of the given sizes, `threads` threads running `gen`.
pub struct Script {
    pub maps: Vec<u64>,
    pub threads: usize,
    pub gen: Gen,
}

struct Lazy {
    bases: Vec<u64>,
    t: usize,
    chunk: usize,
    gen: Gen,
}

impl ThreadProgram for Lazy {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        let more = (self.gen)(&self.bases, self.t, self.chunk, out);
        self.chunk += 1;
        more
    }
}

impl Workload for Script {
    fn name(&self) -> String {
        "script".into()
    }
    fn threads(&self) -> usize {
        self.threads
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let bases: Vec<u64> = self
            .maps
            .iter()
            .enumerate()
            .map(|(i, b)| mem.mmap(TaskId(0), &format!("m{i}"), *b, MapOptions::default()))
            .collect();
        (0..self.threads)
            .map(|t| ThreadSpec {
                task: TaskId(0),
                program: Box::new(Lazy {
                    bases: bases.clone(),
                    t,
                    chunk: 0,
                    gen: self.gen,
                }),
            })
            .collect()
    }
}

/// `lines` consecutive lines from `start`, one reference each.
pub fn run(start: u64, lines: u64, kind: AccessKind) -> Op {
    Op::Run {
        base: start,
        lines: lines as u32,
        stride_bytes: LINE as u16,
        kind,
    }
}

/// One write per 4 KiB page of `[start, start + bytes)`: first touch without streaming.
pub fn touch_pages(start: u64, bytes: u64) -> Op {
    Op::Run {
        base: start,
        lines: (bytes / KB4) as u32,
        stride_bytes: KB4 as u16,
        kind: AccessKind::Write,
    }
}

/// The Opteron 6164 HE preset (4 nodes × 6 cores, the Carrefour-LP study machine: CPUs
/// 0-5 on node 0, 6-11 on node 1, ...) with caches shrunk to 32 KiB private and 256 KiB LLC,
/// so that scenarios of a few MiB miss them as real working sets of GiB miss the real ones
/// and each test stays small. Everything else (controllers, links, costs) is the preset's.
pub fn machine() -> Machine {
    shrunk_caches("opteron6164he-4n")
}

/// xeon-e5-2699v4-2n (22 cores per node, node 0: CPUs 0-21 and their siblings 44-65; 65 GB/s
/// per controller) with the same shrunk caches, so that arrays of a few MiB stream from DRAM.
pub fn xeon2() -> Machine {
    shrunk_caches("xeon-e5-2699v4-2n")
}

/// Preset `name` with its caches shrunk to 32 KiB private and 256 KiB LLC per node.
pub fn shrunk_caches(name: &str) -> Machine {
    let mut m = numalab_machine::preset(name).expect("preset exists");
    m.core.private_cache = CacheGeom {
        bytes: 32 << 10,
        ways: 8,
    };
    for n in &mut m.nodes {
        n.llc = Some(CacheGeom {
            bytes: 256 << 10,
            ways: 16,
        });
    }
    m
}

/// Thread t on the first CPU of node t (4 threads, one per node).
pub fn one_thread_per_node() -> Pinning {
    Pinning::Cpus(vec![CpuId(0), CpuId(6), CpuId(12), CpuId(18)])
}

/// Where every 4 KiB page of every mapping was at the probe's last tick: `pages[m][i]` is
/// the node and folio size behind page `i` of mapping `m`.
#[derive(Clone, Debug, Default)]
pub struct Placement {
    /// Start address of each mapping, in mmap order.
    pub starts: Vec<u64>,
    pub pages: Vec<Vec<Option<(NodeId, PageSize)>>>,
}

impl Placement {
    /// Pages of mapping `m` per node (4 KiB units).
    pub fn per_node(&self, m: usize, nodes: usize) -> Vec<usize> {
        let mut c = vec![0; nodes];
        for (n, _) in self.pages[m].iter().flatten() {
            c[n.index()] += 1;
        }
        c
    }
}

/// A policy that only looks: every period it records the placement of every mapping.
/// Listed after the policy under test with the same period, it sees that policy's actions
/// applied, so its last record is the final placement.
pub struct Probe {
    pub period_ns: u64,
    pub out: Arc<Mutex<Placement>>,
}

impl Policy for Probe {
    fn name(&self) -> &str {
        "probe"
    }
    fn period_ns(&self) -> u64 {
        self.period_ns
    }
    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action> {
        let regions = view.regions();
        let starts = regions.iter().map(|r| r.start).collect();
        let pages = regions
            .iter()
            .map(|r| {
                (0..r.len_bytes / KB4)
                    .map(|i| {
                        view.page(r.task, r.start + i * KB4)
                            .map(|p| (p.node, p.size))
                    })
                    .collect()
            })
            .collect();
        *self.out.lock().unwrap() = Placement { starts, pages };
        Vec::new()
    }
}

pub struct Run {
    pub result: SimResult,
    pub placement: Placement,
}

/// Simulate `w` on [`machine`] with `policy` (if any) followed by a probe of `period_ns`.
pub fn simulate_with(
    machine: &Machine,
    w: &Script,
    thp: ThpMode,
    sample_period: u64,
    policy: Option<Box<dyn Policy>>,
    probe_period_ns: u64,
) -> Run {
    let out = Arc::new(Mutex::new(Placement::default()));
    let mut policies: Vec<Box<dyn Policy>> = policy.into_iter().collect();
    policies.push(Box::new(Probe {
        period_ns: probe_period_ns,
        out: out.clone(),
    }));
    let cfg = SimConfig {
        pinning: one_thread_per_node(),
        thp,
        sample_period,
        policies,
        ..Default::default()
    };
    let result = simulate(machine, w, cfg).expect("simulation runs");
    let placement = out.lock().unwrap().clone();
    Run { result, placement }
}

pub fn lar(r: &SimResult) -> f64 {
    r.metrics.lar_percent.expect("DRAM traffic")
}

pub fn imbalance(r: &SimResult) -> f64 {
    r.metrics.imbalance_percent.expect("DRAM traffic")
}
