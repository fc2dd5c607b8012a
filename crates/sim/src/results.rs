//! What a simulation run reports (reference/workloads.md §6, policies.md §0).

use crate::os::next_touch::NextTouchStats;
use crate::os::numa_balancing::NumaBalancingReport;
use crate::os::VmStat;
use numalab_core::AccessSample;
use serde::{Deserialize, Serialize};

/// Per-thread counters and time breakdown.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ThreadStats {
    pub thread: u32,
    pub task: u32,
    pub cpu: u32,
    pub node: u16,
    pub time_ns: f64,
    /// Compute ops' time, all of it; `overlap_ns` of it ran under independent misses
    /// (hw/overlap.rs), so a thread's time is compute + memory + faults + waits − overlap.
    pub compute_ns: f64,
    pub memory_ns: f64,
    #[serde(default)]
    pub overlap_ns: f64,
    pub fault_ns: f64,
    pub barrier_wait_ns: f64,
    pub migration_ns: f64,
    pub instructions: u64,
    pub loads: u64,
    pub stores: u64,
    pub private_misses: u64,
    pub llc_misses: u64,
    /// DRAM reads (demand loads, RFOs and page-walk references) served locally / remotely.
    pub dram_local: u64,
    pub dram_remote: u64,
    /// Demand loads served by remote DRAM (the remote load ratio's numerator).
    pub remote_loads: u64,
    /// Locked read-modify-writes (`AccessKind::Atomic`: a lock's acquire and release, an
    /// atomic counter), counted in `stores` too.
    #[serde(default)]
    pub atomics: u64,
    /// L1 DTLB misses and second-level TLB misses (page walks), per page size 4K/2M/1G.
    pub dtlb_l1_misses: [u64; 3],
    pub page_walks: [u64; 3],
    pub walk_refs: u64,
    /// Page-walk references that missed the private cache (the "L2 misses caused by walks").
    pub walk_private_misses: u64,
    pub faults: u64,
    /// Folios this thread's touches moved by kernel or user-space next-touch.
    pub next_touch_migrations: u64,
    /// Time spent protecting pages for NUMA balancing (task_numa_work), ns.
    pub numa_scan_ns: f64,
    /// DRAM reads served by each memory node (`dram_local + dram_remote` split by node).
    #[serde(default)]
    pub dram_by_node: Vec<u64>,
    /// Time-sharing (sched.rs): times this thread got its CPU back from another thread, and
    /// the time it was runnable but waiting for the CPU, the switches' own cost included
    /// (schedstat's `run_delay`), ns.
    #[serde(default)]
    pub context_switches: u64,
    #[serde(default)]
    pub run_delay_ns: f64,
}

impl ThreadStats {
    /// Instructions retired: `instructions` counts the compute ops' only, and each memory
    /// reference is one more (added here rather than on the engine's hot path).
    pub fn retired_instructions(&self) -> u64 {
        self.instructions + self.loads + self.stores
    }

    /// The counters accumulated since `earlier` (a snapshot of the same thread); identity
    /// fields are kept. Times are differences too.
    pub fn since(&self, earlier: &ThreadStats) -> ThreadStats {
        let mut d = self.clone();
        d.for_each_counter(earlier, |now, then| *now -= then, |now, then| *now -= then);
        d
    }

    /// Add `other`'s counters to these (per-phase sums over the phase's visits).
    pub fn add(&mut self, other: &ThreadStats) {
        self.for_each_counter(other, |a, b| *a += b, |a, b| *a += b);
    }

    /// Add `other`'s counters `k` times (a phase weighted by how often the full-length run
    /// repeats it: `numalab validate`'s `full_run`).
    pub fn add_times(&mut self, other: &ThreadStats, k: u64) {
        self.for_each_counter(other, |a, b| *a += b * k, |a, b| *a += b * k as f64);
    }

    fn for_each_counter(
        &mut self,
        o: &ThreadStats,
        int: impl Fn(&mut u64, u64),
        float: impl Fn(&mut f64, f64),
    ) {
        for (a, b) in [
            (&mut self.time_ns, o.time_ns),
            (&mut self.compute_ns, o.compute_ns),
            (&mut self.memory_ns, o.memory_ns),
            (&mut self.overlap_ns, o.overlap_ns),
            (&mut self.fault_ns, o.fault_ns),
            (&mut self.barrier_wait_ns, o.barrier_wait_ns),
            (&mut self.migration_ns, o.migration_ns),
            (&mut self.numa_scan_ns, o.numa_scan_ns),
            (&mut self.run_delay_ns, o.run_delay_ns),
        ] {
            float(a, b);
        }
        for (a, b) in [
            (&mut self.instructions, o.instructions),
            (&mut self.loads, o.loads),
            (&mut self.stores, o.stores),
            (&mut self.private_misses, o.private_misses),
            (&mut self.llc_misses, o.llc_misses),
            (&mut self.dram_local, o.dram_local),
            (&mut self.dram_remote, o.dram_remote),
            (&mut self.remote_loads, o.remote_loads),
            (&mut self.atomics, o.atomics),
            (&mut self.walk_refs, o.walk_refs),
            (&mut self.walk_private_misses, o.walk_private_misses),
            (&mut self.faults, o.faults),
            (&mut self.next_touch_migrations, o.next_touch_migrations),
            (&mut self.context_switches, o.context_switches),
        ] {
            int(a, b);
        }
        for i in 0..3 {
            int(&mut self.dtlb_l1_misses[i], o.dtlb_l1_misses[i]);
            int(&mut self.page_walks[i], o.page_walks[i]);
        }
        if self.dram_by_node.len() < o.dram_by_node.len() {
            self.dram_by_node.resize(o.dram_by_node.len(), 0);
        }
        for (a, &b) in self.dram_by_node.iter_mut().zip(&o.dram_by_node) {
            int(a, b);
        }
    }
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NodeStats {
    pub node: u16,
    pub ctrl_read_bytes: u64,
    pub ctrl_write_bytes: u64,
    /// Of `ctrl_write_bytes`, the lines the controller wrote to update the memory directory
    /// after remote reads (machines with one: hw/memory_directory.rs).
    #[serde(default)]
    pub directory_write_bytes: u64,
    /// DRAM requests this controller served, per requesting node.
    pub served_from: Vec<u64>,
    /// Average and peak utilisation of the controller over the run.
    pub avg_utilisation: f64,
    pub peak_utilisation: f64,
    pub resident_bytes: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct LinkStats {
    pub from: u16,
    pub to: u16,
    pub bytes: f64,
    pub gbps_per_dir: f64,
    pub avg_utilisation: f64,
    pub peak_utilisation: f64,
}

/// A phase of the workload: earliest start and latest end over its threads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PhaseStats {
    pub id: u16,
    pub name: String,
    pub start_ns: f64,
    pub end_ns: f64,
    /// Sum over threads of the time spent in the phase.
    pub thread_ns: f64,
    pub accesses: u64,
    /// Per thread (index = thread id), its counters while in the phase, every visit
    /// summed; `time_ns` is its time in the phase. Threads that never ran it have zeros.
    #[serde(default)]
    pub per_thread: Vec<ThreadStats>,
    /// The run's metrics over this phase alone (docs/model.md, "Metrics"): LAR, controller
    /// imbalance, MPKI, walk and fault shares from the phase's counters; PAMUP, NHP, PSP
    /// from the samples taken between its start and end.
    #[serde(default)]
    pub metrics: Metrics,
}

/// One policy hook that acted: what it asked for, what that did, and why.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct PolicyLogEntry {
    /// Simulated time of the hook, ms.
    pub t_ms: f64,
    pub policy: String,
    /// `tick` (periodic), `phase` (a thread reached a phase boundary), `thread_moved`.
    pub hook: String,
    /// Actions returned by the hook.
    pub actions: u64,
    /// Base pages (4 KiB units) migrated, and pages that could not be (no room).
    pub pages_migrated: u64,
    pub pages_failed: u64,
    pub huge_splits: u64,
    /// Threads moved to another CPU.
    pub threads_moved: u64,
    /// Ranges marked for next-touch or lazy migration, and range or task policies set.
    pub ranges_marked: u64,
    pub policies_set: u64,
    /// The policy's own account: each kind of decision, how many, and why.
    pub decisions: Vec<numalab_core::Decision>,
}

/// Per-interval controller traffic, for plots over time.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct TimelinePoint {
    pub t_ns: f64,
    pub ctrl_bytes: Vec<f64>,
}

/// The policy metrics of reference/policies.md §0, whole run.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct Metrics {
    pub lar_percent: Option<f64>,
    pub imbalance_percent: Option<f64>,
    pub maptu: f64,
    pub pamup_percent: Option<f64>,
    pub nhp: Option<usize>,
    pub psp_percent: Option<f64>,
    pub mpki: Option<f64>,
    pub remote_load_ratio: Option<f64>,
    pub pagewalk_l2_miss_share_percent: Option<f64>,
    pub max_page_fault_time_share_percent: Option<f64>,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct SimResult {
    pub label: String,
    pub machine: String,
    pub workload: String,
    pub threads: usize,
    pub pinning: String,
    pub mempolicy: String,
    pub thp: String,
    /// The hugetlbfs page size backing the heap (`--hugetlb`), "none" without.
    #[serde(default)]
    pub hugetlb: String,
    /// Simulated wall time: the last thread's finish time.
    pub sim_time_ns: f64,
    pub memory_references: u64,
    pub metrics: Metrics,
    pub per_thread: Vec<ThreadStats>,
    pub per_node: Vec<NodeStats>,
    pub links: Vec<LinkStats>,
    /// Every phase a thread entered, in the order the phases began (ties by id).
    pub phases: Vec<PhaseStats>,
    pub vmstat: VmStat,
    /// Automatic NUMA balancing's end state (per task and mm), when it was on.
    pub numa_balancing: Option<NumaBalancingReport>,
    /// Next-touch (kernel and user-space) and lazy migration: marks, faults, pages moved.
    #[serde(default)]
    pub next_touch: NextTouchStats,
    pub migrated_pages: u64,
    pub splits: u64,
    pub promotions: u64,
    pub policy_ns: f64,
    /// Every policy hook that decided or did something: when, which policy and hook, what
    /// its actions did and the decisions with their reasons (quiet hooks are not listed).
    #[serde(default)]
    pub policy_log: Vec<PolicyLogEntry>,
    pub timeline: Vec<TimelinePoint>,
    pub samples_taken: u64,
    /// Samples kept in `samples` (at most `SimConfig::max_samples`); `samples_taken −
    /// samples_kept` were counted but dropped, and the table and sample files say so.
    #[serde(default)]
    pub samples_kept: u64,
    /// Samples kept (bounded by the sampler's buffer); not written to JSON by default.
    #[serde(skip)]
    pub samples: Vec<AccessSample>,
    /// Host seconds the run took.
    pub host_seconds: f64,
}

impl SimResult {
    pub fn phase(&self, name: &str) -> Option<&PhaseStats> {
        self.phases.iter().find(|p| p.name == name)
    }

    pub fn total_faults(&self) -> u64 {
        self.vmstat.pgfault_4k + self.vmstat.pgfault_2m + self.vmstat.pgfault_1g
    }

    pub fn dram_bytes(&self) -> u64 {
        self.per_node
            .iter()
            .map(|n| n.ctrl_read_bytes + n.ctrl_write_bytes)
            .sum()
    }
}
