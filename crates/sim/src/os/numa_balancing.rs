//! Linux automatic NUMA balancing (reference/policies.md §2): the scanner of
//! `task_numa_work`, the hint fault of `do_numa_page` / `do_huge_pmd_numa_page`, the two-stage
//! filter `should_numa_migrate_memory`, fault accounting and grouping (`task_numa_fault`,
//! `task_numa_group`), the placement pass with scan-period adaptation
//! (`task_numa_placement`, `update_task_scan_period`), task placement (`task_numa_migrate`,
//! simplified: the simulator has no load balancer) and memory-tiering promotion (§2.10).
//!
//! Vocabulary as in the kernel: a *task* is a thread (`task_struct`), an *mm* is an address
//! space (numalab's `TaskId`). The engine drives [`Os::numa_balancing_tick`] at every epoch end
//! (the scheduler tick) and calls [`Os::numa_hint_fault`] from its PROT_NONE fault branch; it
//! turns the returned costs, copies, flushes and thread moves into time and actions.

use super::pagetable::PageTable;
use super::{MigrateReport, Os};
use numalab_core::{CpuId, MemPolicy, NodeId, PageSize, TaskId, Topology};
use numalab_machine::OsCosts;
use serde::{Deserialize, Serialize};

/// `kernel.numa_balancing` bit: normal (locality) balancing.
pub const NUMA_BALANCING_NORMAL: u8 = 1;
/// `kernel.numa_balancing` bit: memory tiering (promotion to top-tier nodes).
pub const NUMA_BALANCING_MEMORY_TIERING: u8 = 2;

/// Tunables (§2.1). Times are in ms of simulated time; `time_scale` multiplies every time
/// figure, the kernel's fixed ones included (the 1 s scan-rate floor, the 1 s task-migration
/// retry cap, the 1 s promotion rate window), so that a short simulation can run the
/// mechanism at the kernel's proportions (`time_scale=0.001`: one kernel second = 1 ms).
/// With `scale_costs` (the default) it multiplies every per-operation cost as well (PTE
/// updates, hint faults, copies and the bytes they move, shootdowns, splits): a run shrunk
/// to `time_scale` of its length scans and faults as often per unit of its work as the full
/// run, so only then does balancing cost the same fraction of it (docs/model.md).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NumaBalancingParams {
    /// `kernel.numa_balancing`: 0 off, 1 normal, 2 memory tiering, 3 both.
    pub mode: u8,
    pub scan_delay_ms: f64,
    pub scan_period_min_ms: f64,
    pub scan_period_max_ms: f64,
    pub scan_size_mb: u64,
    /// MAX_SCAN_WINDOW: hard cap on the scanning rate, MB/s.
    pub max_scan_window_mbps: u64,
    /// Tiering: a slow page is hot if its hint-fault latency is below this.
    pub hot_threshold_ms: f64,
    /// Tiering: cap on promotion candidates per destination node, MB/s.
    pub promote_rate_limit_mbps: u64,
    /// NUMA_PERIOD_SLOTS / NUMA_PERIOD_THRESHOLD: period adaptation aims at ~70 % local.
    pub period_slots: u64,
    pub period_threshold: u64,
    /// ACTIVE_NODE_FRACTION: a node is active if its CPU faults exceed max / this.
    pub active_node_fraction: u64,
    /// SMALLIMP: minimum task-swap gain (weights out of 1000 per side).
    pub smallimp: i64,
    /// Multiplies every time figure (see the type's documentation) [nl].
    pub time_scale: f64,
    /// `time_scale` multiplies the per-operation costs too (see the type's documentation).
    #[serde(default = "yes")]
    pub scale_costs: bool,
    /// Cost of changing one page-table entry (a PTE or a PMD) to PROT_NONE, charged to the
    /// scanning thread, ns [nl: change_pte_range's atomic modify/commit per entry].
    pub pte_update_ns: f64,
    /// Move and swap tasks towards their preferred node (§2.8).
    pub task_placement: bool,
    /// Mainline's long-lived mix-up of the private and local ratios in
    /// update_task_scan_period (§2.7); off = the intended version.
    pub mainline_scan_period: bool,
    /// The THP false-sharing split extension (§3); None = stock behaviour (§2.9).
    pub thp_split: Option<super::thp_split_ext::ThpSplitParams>,
}

impl Default for NumaBalancingParams {
    fn default() -> Self {
        NumaBalancingParams {
            mode: NUMA_BALANCING_NORMAL,
            scan_delay_ms: 1000.0,
            scan_period_min_ms: 1000.0,
            scan_period_max_ms: 60000.0,
            scan_size_mb: 256,
            max_scan_window_mbps: 2560,
            hot_threshold_ms: 1000.0,
            promote_rate_limit_mbps: 65536,
            period_slots: 10,
            period_threshold: 7,
            active_node_fraction: 3,
            smallimp: 30,
            time_scale: 1.0,
            scale_costs: true,
            pte_update_ns: 20.0,
            task_placement: true,
            mainline_scan_period: false,
            thp_split: None,
        }
    }
}

/// Keys accepted by [`NumaBalancingParams::parse`] (the THP-split keys are in
/// `thp_split_ext::KEYS`).
pub const KEYS: &[&str] = &[
    "mode",
    "scan_delay_ms",
    "scan_period_min_ms",
    "scan_period_max_ms",
    "scan_size_mb",
    "max_scan_window_mbps",
    "hot_threshold_ms",
    "promote_rate_limit_mbps",
    "period_slots",
    "period_threshold",
    "active_node_fraction",
    "smallimp",
    "time_scale",
    "scale_costs",
    "pte_update_ns",
    "task_placement",
    "mainline_scan_period",
];

fn parse_num<T: std::str::FromStr>(k: &str, v: &str) -> Result<T, String> {
    v.parse()
        .map_err(|_| format!("numa-balancing: '{k}={v}' is not a valid number"))
}

fn parse_bool(k: &str, v: &str) -> Result<bool, String> {
    match v {
        "1" | "true" | "on" | "yes" => Ok(true),
        "0" | "false" | "off" | "no" => Ok(false),
        _ => Err(format!(
            "numa-balancing: '{k}={v}' expects 1/0, true/false, on/off"
        )),
    }
}

impl NumaBalancingParams {
    /// Parse `numa-balancing[:key=value,...]` (also accepted: `autonuma`, or the list alone).
    /// Unknown keys are refused with the list of valid ones; nothing half-applies.
    pub fn parse(spec: &str) -> Result<Self, String> {
        let body = spec.trim();
        let body = ["numa-balancing", "numa_balancing", "autonuma"]
            .iter()
            .find_map(|n| body.strip_prefix(n))
            .map(|rest| rest.strip_prefix(':').unwrap_or(rest))
            .unwrap_or(body);
        let mut p = NumaBalancingParams::default();
        let mut split = super::thp_split_ext::ThpSplitParams::default();
        let mut any_split = false;
        for kv in body.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| {
                format!(
                    "numa-balancing: '{kv}' is not key=value (valid keys: {})",
                    all_keys()
                )
            })?;
            let (k, v) = (k.trim(), v.trim());
            match k {
                "mode" => p.mode = parse_num(k, v)?,
                "scan_delay_ms" => p.scan_delay_ms = parse_num(k, v)?,
                "scan_period_min_ms" => p.scan_period_min_ms = parse_num(k, v)?,
                "scan_period_max_ms" => p.scan_period_max_ms = parse_num(k, v)?,
                "scan_size_mb" => p.scan_size_mb = parse_num(k, v)?,
                "max_scan_window_mbps" => p.max_scan_window_mbps = parse_num(k, v)?,
                "hot_threshold_ms" => p.hot_threshold_ms = parse_num(k, v)?,
                "promote_rate_limit_mbps" => p.promote_rate_limit_mbps = parse_num(k, v)?,
                "period_slots" => p.period_slots = parse_num(k, v)?,
                "period_threshold" => p.period_threshold = parse_num(k, v)?,
                "active_node_fraction" => p.active_node_fraction = parse_num(k, v)?,
                "smallimp" => p.smallimp = parse_num(k, v)?,
                "time_scale" => p.time_scale = parse_num(k, v)?,
                "scale_costs" => p.scale_costs = parse_bool(k, v)?,
                "pte_update_ns" => p.pte_update_ns = parse_num(k, v)?,
                "task_placement" => p.task_placement = parse_bool(k, v)?,
                "mainline_scan_period" => p.mainline_scan_period = parse_bool(k, v)?,
                _ => {
                    if split
                        .set(k, v)
                        .map_err(|e| format!("numa-balancing: {e}"))?
                    {
                        any_split = true;
                    } else {
                        return Err(format!(
                            "numa-balancing: unknown key '{k}' (valid keys: {})",
                            all_keys()
                        ));
                    }
                }
            }
        }
        if any_split {
            p.thp_split = Some(split);
        }
        p.validate()?;
        Ok(p)
    }

    /// Check ranges and relations between tunables.
    pub fn validate(&self) -> Result<(), String> {
        let bad = |why: String| Err(format!("numa-balancing: {why}"));
        if self.mode > 3 {
            return bad(format!("mode={} (expected 0..3)", self.mode));
        }
        if self.scan_size_mb == 0 || self.max_scan_window_mbps == 0 {
            return bad("scan_size_mb and max_scan_window_mbps must be > 0".into());
        }
        let times = [
            self.scan_delay_ms,
            self.scan_period_min_ms,
            self.scan_period_max_ms,
            self.hot_threshold_ms,
        ];
        if times.iter().any(|t| !t.is_finite() || *t < 0.0) {
            return bad("times must be finite and >= 0".into());
        }
        if self.scan_period_min_ms <= 0.0 || self.scan_period_min_ms > self.scan_period_max_ms {
            return bad(format!(
                "need 0 < scan_period_min_ms ({}) <= scan_period_max_ms ({})",
                crate::config::shown(self.scan_period_min_ms),
                crate::config::shown(self.scan_period_max_ms)
            ));
        }
        if !(self.time_scale.is_finite() && self.time_scale > 0.0) {
            return bad(format!(
                "time_scale={} (expected > 0)",
                crate::config::shown(self.time_scale)
            ));
        }
        if self.period_slots == 0 || self.period_threshold > self.period_slots {
            return bad(format!(
                "need period_threshold ({}) <= period_slots ({}) and slots > 0",
                self.period_threshold, self.period_slots
            ));
        }
        if self.active_node_fraction == 0 || self.pte_update_ns < 0.0 {
            return bad("active_node_fraction must be > 0 and pte_update_ns >= 0".into());
        }
        Ok(())
    }
}

fn yes() -> bool {
    true
}

fn all_keys() -> String {
    NumaBalancingParams::keys().join(", ")
}

impl NumaBalancingParams {
    /// What the per-operation costs are multiplied by: `time_scale` with `scale_costs`.
    pub fn cost_scale(&self) -> f64 {
        if self.scale_costs {
            self.time_scale
        } else {
            1.0
        }
    }

    /// Every key `parse` accepts, balancing's and the split extension's.
    pub fn keys() -> Vec<&'static str> {
        KEYS.iter()
            .chain(super::thp_split_ext::KEYS)
            .copied()
            .collect()
    }
}

/// What the engine reports about one thread at a tick.
#[derive(Copy, Clone, Debug)]
pub struct TaskTick {
    pub thread: u32,
    pub mm: TaskId,
    pub cpu: CpuId,
    /// CPU time consumed so far (sum_exec_runtime): the clock minus barrier waits, ns.
    pub runtime_ns: f64,
    pub live: bool,
}

/// What a tick asks the engine to do.
#[derive(Clone, Debug, Default)]
pub struct TickOutcome {
    /// (thread, ns) scanning time charged to the thread that ran task_numa_work.
    pub scan_ns: Vec<(u32, f64)>,
    /// (thread, mm, start, len): protected ranges whose TLB entries are flushed, one
    /// shootdown each, raised by the thread that ran task_numa_work.
    pub flush: Vec<(u32, TaskId, u64, u64)>,
    /// (thread, cpu) moves, swaps being two moves (migrate_task_to / migrate_swap).
    pub moves: Vec<(u32, CpuId)>,
}

/// A hint fault as the engine sees it.
#[derive(Copy, Clone, Debug)]
pub struct HintFault {
    pub thread: u32,
    pub mm: TaskId,
    pub cpu: CpuId,
    pub nid: usize,
    pub addr: u64,
    pub now_ns: f64,
}

/// What a hint fault did, for the engine's cost and traffic accounting.
#[derive(Clone, Debug, Default)]
pub struct HintOutcome {
    /// Time charged to the faulting thread (trap, copy, flush, split).
    pub ns: f64,
    /// (from, to, bytes) of a migration copy.
    pub copies: Vec<(usize, usize, u64)>,
    /// Folios whose translation changed (migrated or split): flush from the faulting TLB.
    pub invalidate: Vec<(u64, PageSize)>,
    /// TLB shootdowns the fault raises for the task's other CPUs (os/tlb_shootdown.rs).
    pub flushes: u32,
}

/// `last_cpupid`: 0 = unset; else (pid + 1) << 32 | cpu, pid = numalab thread id (full ids:
/// no collisions of the kernel's 8-bit pid field).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct Cpupid(pub u64);

impl Cpupid {
    pub const UNSET: Cpupid = Cpupid(0);
    pub fn new(cpu: CpuId, pid: u32) -> Cpupid {
        Cpupid(((pid as u64 + 1) << 32) | cpu.0 as u64)
    }
    pub fn pid_unset(self) -> bool {
        self.0 >> 32 == 0
    }
    pub fn pid(self) -> Option<u32> {
        (!self.pid_unset()).then(|| ((self.0 >> 32) - 1) as u32)
    }
    pub fn cpu(self) -> CpuId {
        CpuId(self.0 as u32)
    }
}

/// Hint-fault flags (TNF_*).
#[derive(Copy, Clone, Debug, Default)]
pub struct Tnf {
    pub local: bool,
    pub shared: bool,
    pub no_group: bool,
    pub migrated: bool,
    pub migrate_fail: bool,
}

/// Per-address-space scanner state (mm->numa_*).
#[derive(Clone, Debug, Default)]
pub struct MmNuma {
    pub next_scan_ms: f64,
    pub scan_offset: u64,
    pub scan_seq: u64,
    /// RSS in base pages, refreshed once per scan sequence (task_nr_scan_windows).
    rss_pages: u64,
}

/// Per-task (thread) state: task_struct's numa_* fields.
#[derive(Clone, Debug)]
pub struct NumaTask {
    pub thread: u32,
    pub mm: TaskId,
    pub cpu: CpuId,
    pub nid: usize,
    pub live: bool,
    pub scan_period_ms: f64,
    pub scan_period_max_ms: f64,
    pub node_stamp_ns: f64,
    node_stamp_set: bool,
    /// The mm scan sequence seen by the last placement pass.
    pub numa_scan_seq: u64,
    pub preferred_nid: Option<usize>,
    /// Decayed faults `[node][priv]` and the buffers since the last placement pass.
    pub mem: Vec<[i64; 2]>,
    pub cpu_faults: Vec<[i64; 2]>,
    pub membuf: Vec<[i64; 2]>,
    pub cpubuf: Vec<[i64; 2]>,
    pub total_numa_faults: i64,
    /// numa_faults_locality: [remote, local, failed migrations].
    pub locality: [u64; 3],
    pub numa_group: Option<usize>,
    pub migrate_retry_ms: f64,
    pub numa_pages_migrated: u64,
    last_runtime_ns: f64,
    last_placement_ns: Option<f64>,
    runtime_ns: f64,
    pub scans: u64,
    /// (time ms, scan period ms) after each update_task_scan_period.
    pub scan_period_trace: Vec<(f64, f64)>,
}

/// A numa_group: tasks that share memory.
#[derive(Clone, Debug)]
pub struct NumaGroup {
    pub gid: u32,
    pub nr_tasks: u32,
    pub faults: Vec<[i64; 2]>,
    pub faults_cpu: Vec<[i64; 2]>,
    pub total_faults: i64,
    pub active_nodes: usize,
    pub max_faults_cpu: i64,
}

/// Per node memory-tiering state (pgdat->nbp_*).
#[derive(Clone, Debug, Default)]
struct TierNode {
    rl_start_ms: f64,
    rl_nr_cand: u64,
    th_start_ms: f64,
    th_nr_cand: u64,
    /// 0 = use hot_threshold_ms.
    threshold_ms: f64,
    candidates: u64,
}

/// The end state of balancing, in the result.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NumaBalancingReport {
    pub mode: u8,
    pub tasks: Vec<NumaTaskReport>,
    /// Completed scan sequences per mm.
    pub scan_seq: Vec<u64>,
    pub groups: usize,
    pub task_moves: u64,
    pub task_swaps: u64,
}

#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct NumaTaskReport {
    pub thread: u32,
    pub mm: u32,
    pub preferred_nid: Option<u16>,
    pub scan_period_ms: f64,
    pub numa_scan_seq: u64,
    pub numa_pages_migrated: u64,
    pub numa_group: Option<u32>,
    pub scans: u64,
    /// Decayed memory faults per node (private + shared).
    pub mem_faults: Vec<i64>,
    pub scan_period_trace: Vec<(f64, f64)>,
}

const TRACE_MAX: usize = 4096;

/// Costs taken from the machine (reference §10) and the tunables.
#[derive(Clone, Debug)]
struct Costs {
    hint_fault_ns: f64,
    kernel_copy_bytes_per_ns: f64,
    /// A huge folio's copy (`OsCosts::thp_migrate_mbps`); 0: at `kernel_copy_bytes_per_ns`.
    thp_copy_bytes_per_ns: f64,
    split_ns: f64,
    pte_update_ns: f64,
    /// The share of a migrated folio's bytes that loads the memory system (`cost_scale`).
    copy_bytes_scale: f64,
}

pub struct NumaBalancing {
    /// Per thread: the CPUs it may run on (None: all). Task placement never moves a thread
    /// outside them (task_numa_find_cpu's `cpumask_test_cpu(cpu, p->cpus_ptr)`, and for a
    /// swap the other task's mask must hold the source CPU).
    cpus_allowed: Vec<Option<Vec<CpuId>>>,
    pub params: NumaBalancingParams,
    nr_nodes: usize,
    costs: Costs,
    cpu_node: Vec<usize>,
    node_cpus: Vec<Vec<CpuId>>,
    top_tier: Vec<bool>,
    distance: Vec<Vec<u32>>,
    pub mms: Vec<MmNuma>,
    pub tasks: Vec<NumaTask>,
    /// Slab of groups; freed slots are None.
    pub groups: Vec<Option<NumaGroup>>,
    /// Thread running on each CPU (cpu_rq(cpu)->curr).
    cpu_curr: Vec<Option<u32>>,
    /// Per 4 KiB page (PageTable::index); a huge folio uses its head's entry.
    last_cpupid: Vec<Cpupid>,
    /// Tiering: the time a slow page was protected, ms.
    scan_time_ms: Vec<f32>,
    /// §3 `reset`: the page's next hint fault migrates it at once.
    pub(super) force_migrate: Vec<bool>,
    tier: Vec<TierNode>,
    /// Thread moves decided in fault context, carried out by the engine at the tick.
    pending_moves: Vec<(u32, CpuId)>,
    task_moves: u64,
    task_swaps: u64,
}

fn grow<T: Clone + Default>(v: &mut Vec<T>, i: usize) {
    if i >= v.len() {
        v.resize((i | 511) + 1, T::default());
    }
}

fn vma_policy_mof(p: &MemPolicy) -> bool {
    // only the default/local policy, or BIND with MPOL_F_NUMA_BALANCING, migrate on fault
    matches!(
        p,
        MemPolicy::Default
            | MemPolicy::Local
            | MemPolicy::Bind {
                numa_balancing: true,
                ..
            }
    )
}

impl NumaBalancing {
    pub fn new(params: NumaBalancingParams, topo: &Topology, c: &OsCosts) -> NumaBalancing {
        let n = topo.num_nodes();
        let max_cpu = topo
            .cpus()
            .iter()
            .map(|c| c.0 as usize + 1)
            .max()
            .unwrap_or(0);
        let mut cpu_node = vec![0; max_cpu];
        for (i, node) in topo.nodes.iter().enumerate() {
            for c in &node.cpus {
                cpu_node[c.0 as usize] = i;
            }
        }
        NumaBalancing {
            nr_nodes: n,
            costs: Costs {
                hint_fault_ns: c.fault_4k_ns * params.cost_scale(),
                kernel_copy_bytes_per_ns: c.kernel_copy_mbps * 1e-3 / params.cost_scale(),
                thp_copy_bytes_per_ns: c.thp_migrate_mbps * 1e-3 / params.cost_scale(),
                split_ns: c.split_ns * params.cost_scale(),
                pte_update_ns: params.pte_update_ns * params.cost_scale(),
                copy_bytes_scale: params.cost_scale(),
            },
            cpu_node,
            node_cpus: topo.nodes.iter().map(|n| n.cpus.clone()).collect(),
            // [nl] the top tier = nodes with CPUs; CPU-less nodes are the slow tier
            top_tier: topo.nodes.iter().map(|n| !n.cpus.is_empty()).collect(),
            distance: topo.distances.clone(),
            mms: Vec::new(),
            tasks: Vec::new(),
            groups: Vec::new(),
            cpu_curr: vec![None; max_cpu],
            last_cpupid: Vec::new(),
            scan_time_ms: Vec::new(),
            force_migrate: Vec::new(),
            tier: vec![TierNode::default(); n],
            pending_moves: Vec::new(),
            task_moves: 0,
            task_swaps: 0,
            cpus_allowed: Vec::new(),
            params,
        }
    }

    fn ms(&self, kernel_ms: f64) -> f64 {
        kernel_ms * self.params.time_scale
    }

    fn normal(&self) -> bool {
        self.params.mode & NUMA_BALANCING_NORMAL != 0
    }

    fn tiering(&self) -> bool {
        self.params.mode & NUMA_BALANCING_MEMORY_TIERING != 0
    }

    fn mm(&mut self, mm: TaskId) -> &mut MmNuma {
        while self.mms.len() <= mm.index() {
            let first = self.ms(self.params.scan_delay_ms);
            self.mms.push(MmNuma {
                next_scan_ms: first,
                ..Default::default()
            });
        }
        &mut self.mms[mm.index()]
    }

    fn task(&mut self, thread: u32, mm: TaskId, cpu: CpuId) -> usize {
        let n = self.nr_nodes;
        while self.tasks.len() <= thread as usize {
            let id = self.tasks.len() as u32;
            self.tasks.push(NumaTask {
                thread: id,
                mm,
                cpu,
                nid: self.cpu_node.get(cpu.0 as usize).copied().unwrap_or(0),
                live: true,
                scan_period_ms: self.params.scan_delay_ms * self.params.time_scale,
                scan_period_max_ms: self.params.scan_period_max_ms * self.params.time_scale,
                node_stamp_ns: 0.0,
                node_stamp_set: false,
                numa_scan_seq: 0,
                preferred_nid: None,
                mem: vec![[0; 2]; n],
                cpu_faults: vec![[0; 2]; n],
                membuf: vec![[0; 2]; n],
                cpubuf: vec![[0; 2]; n],
                total_numa_faults: 0,
                locality: [0; 3],
                numa_group: None,
                migrate_retry_ms: 0.0,
                numa_pages_migrated: 0,
                last_runtime_ns: 0.0,
                last_placement_ns: None,
                runtime_ns: 0.0,
                scans: 0,
                scan_period_trace: Vec::new(),
            });
        }
        self.mm(mm);
        thread as usize
    }

    fn node_of_cpu(&self, cpu: CpuId) -> usize {
        self.cpu_node.get(cpu.0 as usize).copied().unwrap_or(0)
    }

    pub(super) fn cpu_node_of(&self, cpu: CpuId) -> usize {
        self.node_of_cpu(cpu)
    }

    pub(super) fn split_cost_ns(&self) -> f64 {
        self.costs.split_ns
    }

    pub(super) fn set_cpupid_range(&mut self, first: usize, n: usize, v: Cpupid) {
        grow(&mut self.last_cpupid, first + n - 1);
        self.last_cpupid[first..first + n].fill(v);
    }

    pub(super) fn set_force_migrate_range(&mut self, first: usize, n: usize, on: bool) {
        grow(&mut self.force_migrate, first + n - 1);
        self.force_migrate[first..first + n].fill(on);
    }

    // ---------------------------------------------------------------- scan period bounds

    fn nr_scan_windows(&self, mm: TaskId) -> u64 {
        let scan_pages = self.params.scan_size_mb << 8;
        let rss = self.mms[mm.index()].rss_pages.max(1);
        rss.div_ceil(scan_pages).max(1)
    }

    /// task_scan_min (§2.3.5).
    fn task_scan_min(&self, p: usize) -> f64 {
        let size = self.params.scan_size_mb;
        let windows = if size < self.params.max_scan_window_mbps {
            self.params.max_scan_window_mbps / size
        } else {
            1
        };
        let floor = self.ms(1000.0) / windows as f64;
        let scan =
            self.ms(self.params.scan_period_min_ms) / self.nr_scan_windows(self.tasks[p].mm) as f64;
        floor.max(scan)
    }

    /// group_refs · (shared + 1) / (private + shared + 1) for a grouped task.
    fn group_scale(&self, p: usize) -> Option<f64> {
        let g = self.groups[self.tasks[p].numa_group?].as_ref()?;
        let shared: i64 = g.faults.iter().map(|f| f[0]).sum();
        let private: i64 = g.faults.iter().map(|f| f[1]).sum();
        Some(
            g.nr_tasks as f64 * (shared.max(0) + 1) as f64
                / (private.max(0) + shared.max(0) + 1) as f64,
        )
    }

    fn task_scan_start(&self, p: usize) -> f64 {
        let smin = self.task_scan_min(p);
        let period = smin * self.group_scale(p).unwrap_or(1.0);
        smin.max(period)
    }

    fn task_scan_max(&self, p: usize) -> f64 {
        let smin = self.task_scan_min(p);
        let mut smax =
            self.ms(self.params.scan_period_max_ms) / self.nr_scan_windows(self.tasks[p].mm) as f64;
        if let Some(s) = self.group_scale(p) {
            smax = smax.max(smax * s);
        }
        smin.max(smax)
    }

    // ---------------------------------------------------------------- scanner (§2.3)

    /// One scheduler tick for every thread: task_tick_numa, then task_numa_work when due.
    pub fn tick(&mut self, os: &mut Os, now_ns: f64, threads: &[TaskTick]) -> TickOutcome {
        let mut out = TickOutcome::default();
        for c in self.cpu_curr.iter_mut() {
            *c = None;
        }
        for t in threads {
            let p = self.task(t.thread, t.mm, t.cpu);
            let nid = self.node_of_cpu(t.cpu);
            let task = &mut self.tasks[p];
            task.cpu = t.cpu;
            task.nid = nid;
            task.live = t.live;
            task.runtime_ns = task.runtime_ns.max(t.runtime_ns);
            if t.live {
                if let Some(c) = self.cpu_curr.get_mut(t.cpu.0 as usize) {
                    *c = Some(t.thread);
                }
            }
        }
        let now_ms = now_ns * 1e-6;
        for t in threads.iter().filter(|t| t.live) {
            let p = t.thread as usize;
            // task_tick_numa: at most one scan-work per tick and per elapsed period of CPU time
            let period_ns = self.tasks[p].scan_period_ms * 1e6;
            if self.tasks[p].runtime_ns > self.tasks[p].node_stamp_ns + period_ns {
                if !self.tasks[p].node_stamp_set {
                    self.tasks[p].node_stamp_set = true;
                    if self.mms[t.mm.index()].rss_pages == 0 {
                        self.mms[t.mm.index()].rss_pages = os.rss_pages(t.mm);
                    }
                    self.tasks[p].scan_period_ms = self.task_scan_start(p);
                }
                self.tasks[p].node_stamp_ns += period_ns;
                if now_ms >= self.mms[t.mm.index()].next_scan_ms {
                    self.task_numa_work(os, p, now_ms, &mut out);
                }
            }
        }
        out
    }

    /// task_numa_work: protect the next window of the mm (§2.3.2-4).
    fn task_numa_work(&mut self, os: &mut Os, p: usize, now_ms: f64, out: &mut TickOutcome) {
        let mm = self.tasks[p].mm;
        // only one thread per address space scans per period (the cmpxchg on next_scan)
        let next = now_ms + self.tasks[p].scan_period_ms;
        self.mms[mm.index()].next_scan_ms = next;
        self.tasks[p].scans += 1;
        let mut pages: i64 = (self.params.scan_size_mb << 8) as i64;
        let mut virtpages = pages * 8;
        let mut start = self.mms[mm.index()].scan_offset;
        let vmas: Vec<(u64, u64, bool)> = os
            .regions
            .iter()
            .filter(|r| r.task == mm)
            .map(|r| {
                let pol = r.policy.as_ref().unwrap_or(&os.tasks[mm.index()].policy);
                (r.start, r.end(), r.hugetlb.is_none() && vma_policy_mof(pol))
            })
            .collect();
        if !vmas.iter().any(|v| v.1 > start) {
            self.reset_ptenuma_scan(os, mm);
            start = 0;
        }
        // single-threaded mm: pages already on the node the task runs on are not protected
        let users = self.tasks.iter().filter(|t| t.mm == mm && t.live).count();
        let target_node = (users == 1).then_some(self.tasks[p].nid);
        let (mut updates, mut huge) = (0u64, 0u64);
        let (mut lo, mut hi) = (u64::MAX, 0u64);
        let mut stopped = false;
        let first = start;
        for &(vs, ve, ok) in vmas.iter().filter(|v| v.1 > first) {
            if !ok {
                continue;
            }
            loop {
                start = start.max(vs);
                let end = (start + ((pages.max(0) as u64) << 12))
                    .div_ceil(PageSize::Huge2M.bytes())
                    * PageSize::Huge2M.bytes();
                let end = end.min(ve);
                let (u, h) = self.change_prot_numa(os, start, end, target_node, now_ms);
                if u > 0 {
                    pages -= ((end - start) >> 12) as i64;
                    lo = lo.min(start);
                    hi = hi.max(end);
                }
                updates += u;
                huge += h;
                virtpages -= ((end - start) >> 12) as i64;
                start = end;
                if pages <= 0 || virtpages <= 0 {
                    stopped = true;
                    break;
                }
                if end == ve {
                    break;
                }
            }
            if stopped {
                break;
            }
        }
        if stopped {
            self.mms[mm.index()].scan_offset = start;
        } else {
            self.reset_ptenuma_scan(os, mm);
        }
        os.vm.numa_pte_updates += updates;
        os.vm.numa_huge_pte_updates += huge;
        // one entry per PTE and per PMD changed; a THP is one PMD
        let entries = (updates - huge * 512) + huge;
        let ns = entries as f64 * self.costs.pte_update_ns;
        if ns > 0.0 {
            out.scan_ns.push((p as u32, ns));
            // keep scanning under ~3 % of the task's runtime
            self.tasks[p].node_stamp_ns += 32.0 * ns;
        }
        if hi > lo {
            out.flush.push((p as u32, mm, lo, hi - lo));
        }
    }

    fn reset_ptenuma_scan(&mut self, os: &Os, mm: TaskId) {
        let m = &mut self.mms[mm.index()];
        m.scan_seq += 1;
        m.scan_offset = 0;
        m.rss_pages = os.rss_pages(mm);
    }

    /// change_prot_numa over `[start, end)`: returns (base pages protected, PMDs protected).
    fn change_prot_numa(
        &mut self,
        os: &mut Os,
        start: u64,
        end: u64,
        target_node: Option<usize>,
        now_ms: f64,
    ) -> (u64, u64) {
        let (mut updates, mut huge) = (0, 0);
        let mut a = start;
        while a < end {
            let e = os.pt.get(a);
            if !e.present() {
                a += 4096;
                continue;
            }
            let size = e.size();
            let fs = size.align_down(a);
            a = fs + size.bytes();
            // already protected: avoid the TLB flush
            if e.prot_none() || target_node == Some(e.node()) {
                continue;
            }
            let top = self.top_tier.get(e.node()).copied().unwrap_or(true);
            if !self.normal() && top {
                continue;
            }
            if self.tiering() && !top {
                let i = PageTable::index(fs);
                grow(&mut self.scan_time_ms, i);
                self.scan_time_ms[i] = now_ms as f32;
            }
            os.pt.set_prot_none(fs, size, true);
            updates += size.base_pages();
            if size != PageSize::Base4K {
                huge += 1;
            }
        }
        (updates, huge)
    }

    // ---------------------------------------------------------------- hint fault (§2.4)

    /// do_numa_page / do_huge_pmd_numa_page.
    pub fn hint_fault(&mut self, os: &mut Os, f: &HintFault) -> HintOutcome {
        let mut out = HintOutcome {
            ns: self.costs.hint_fault_ns,
            ..Default::default()
        };
        let p = self.task(f.thread, f.mm, f.cpu);
        self.tasks[p].cpu = f.cpu;
        self.tasks[p].nid = f.nid;
        let now_ms = f.now_ns * 1e-6;
        let pte = os.pt.get(f.addr);
        let size = pte.size();
        let fs = size.align_down(f.addr);
        os.vm.numa_hint_faults += 1;
        // make the entry accessible again
        os.pt.set_prot_none(fs, size, false);
        let page_nid = pte.node();
        let this_nid = f.nid;
        let mut flags = Tnf {
            // private mappings, never VM_SHARED between processes. Anonymous ones are
            // writable; a page of a private file mapping that was only read is mapped
            // read-only (its copy-on-write pending), and do_numa_page sets TNF_NO_GROUP for
            // a PTE that is not writable (page_cache.rs)
            no_group: os.in_file_mapping(f.addr),
            shared: false,
            ..Default::default()
        };
        if page_nid == this_nid {
            os.vm.numa_hint_faults_local += 1;
            flags.local = true;
        }
        let idx = PageTable::index(fs);
        grow(&mut self.last_cpupid, idx);
        let last_cpupid = self.last_cpupid[idx];
        if size == PageSize::Huge2M {
            if let Some(sp) = self.params.thp_split.clone() {
                if let Some(done) = super::thp_split_ext::huge_hint_fault(
                    self,
                    os,
                    f,
                    p,
                    &sp,
                    fs,
                    pte,
                    last_cpupid,
                    flags,
                    &mut out,
                ) {
                    return done;
                }
            }
        }
        let ri = os.region_index(f.addr);
        let policy = ri
            .and_then(|i| os.regions[i].policy.clone())
            .unwrap_or_else(|| os.tasks[f.mm.index()].policy.clone());
        // mpol_misplaced
        let target = match policy {
            MemPolicy::Default | MemPolicy::Local => Some(this_nid),
            MemPolicy::Bind {
                nodes,
                numa_balancing: true,
            } if nodes.contains(NodeId(this_nid as u16)) => Some(this_nid),
            _ => None,
        }
        .filter(|_| self.should_numa_migrate_memory(os, p, fs, size, page_nid, f.cpu, now_ms))
        .filter(|&t| t != page_nid);
        let mut nid = page_nid;
        if let Some(t) = target {
            if self.migrate_misplaced(os, fs, pte, t, &mut out) {
                flags.migrated = true;
                nid = t;
            } else {
                flags.migrate_fail = true;
            }
        }
        self.task_numa_fault(os, p, last_cpupid, nid, size.base_pages(), flags, now_ms);
        out
    }

    /// migrate_misplaced_folio: move the folio, count it, cost the copy and the flush.
    pub(super) fn migrate_misplaced(
        &mut self,
        os: &mut Os,
        fs: u64,
        pte: super::pagetable::Pte,
        to: usize,
        out: &mut HintOutcome,
    ) -> bool {
        let mut r = MigrateReport::default();
        os.migrate_folio(fs, pte, NodeId(to as u16), &mut r);
        if r.folios_moved == 0 {
            return false;
        }
        let units = pte.size().base_pages();
        os.vm.numa_pages_migrated += units;
        let from_top = self.top_tier.get(pte.node()).copied().unwrap_or(true);
        if !from_top && self.top_tier.get(to).copied().unwrap_or(true) {
            os.vm.pgpromote_success += units;
        }
        let bytes = pte.size().bytes();
        let loaded = (bytes as f64 * self.costs.copy_bytes_scale)
            .round()
            .max(1.0) as u64;
        out.copies.push((pte.node(), to, loaded));
        out.invalidate.push((fs, pte.size()));
        // unmapping a base page's PROT_NONE PTE needs no flush (`pte_accessible`, Linux 3.8,
        // which introduced NUMA balancing); a huge page's PMD is flushed (`pmdp_invalidate`)
        if pte.size() != PageSize::Base4K {
            out.flushes += 1;
        }
        // the kernel copies in the faulting context
        out.ns += super::folio_copy_ns(
            pte.size(),
            self.costs.kernel_copy_bytes_per_ns,
            self.costs.thp_copy_bytes_per_ns,
        );
        true
    }

    /// The two-stage filter (§2.5), preceded by the tiering test for slow pages (§2.10) and
    /// the §3 `reset` mark.
    #[allow(clippy::too_many_arguments)]
    fn should_numa_migrate_memory(
        &mut self,
        os: &mut Os,
        p: usize,
        fs: u64,
        size: PageSize,
        src_nid: usize,
        dst_cpu: CpuId,
        now_ms: f64,
    ) -> bool {
        let dst_nid = self.node_of_cpu(dst_cpu);
        let idx = PageTable::index(fs);
        if self.force_migrate.get(idx).copied().unwrap_or(false) {
            self.force_migrate[idx] = false;
            return true;
        }
        let src_top = self.top_tier.get(src_nid).copied().unwrap_or(true);
        if self.tiering() && !src_top {
            return self.should_promote(os, dst_nid, size, idx, now_ms);
        }
        let this_cpupid = Cpupid::new(dst_cpu, self.tasks[p].thread);
        grow(&mut self.last_cpupid, idx);
        let last = std::mem::replace(&mut self.last_cpupid[idx], this_cpupid);
        if !self.tiering() && !src_top && last.pid_unset() {
            return false;
        }
        let task = &self.tasks[p];
        let me = Some(task.thread);
        // young task, first or private fault
        if (task.preferred_nid.is_none() || task.numa_scan_seq <= 4)
            && (last.pid_unset() || last.pid() == me)
        {
            return true;
        }
        // two faults in a row from the destination node
        if !last.pid_unset() && self.node_of_cpu(last.cpu()) != dst_nid {
            return false;
        }
        if last.pid() == me {
            return true;
        }
        let Some(g) = task.numa_group.and_then(|g| self.groups[g].as_ref()) else {
            return true;
        };
        let cpu = |n: usize| g.faults_cpu[n][0] + g.faults_cpu[n][1];
        let mem = |n: usize| g.faults[n][0] + g.faults[n][1];
        if cpu(dst_nid) > cpu(src_nid) * self.params.active_node_fraction as i64 {
            return true;
        }
        // 3/4 hysteresis between CPU use and memory placement
        cpu(dst_nid) * mem(src_nid) * 3 > cpu(src_nid) * mem(dst_nid) * 4
    }

    /// Memory tiering (§2.10): promote a slow page if the fast node has room, else if it is
    /// hot (short hint-fault latency) and under the rate limit.
    fn should_promote(
        &mut self,
        os: &mut Os,
        dst: usize,
        size: PageSize,
        idx: usize,
        now_ms: f64,
    ) -> bool {
        let nr = size.base_pages();
        let total = os.total_pages[dst];
        // [nl] watermarks are not modelled: "ample" = above max(1 GiB, 1/16 of the node)
        let enough = (1u64 << 18).max(total >> 4);
        if os.free_pages[dst] > enough {
            self.tier[dst].threshold_ms = 0.0;
            return true;
        }
        let hot = self.ms(self.params.hot_threshold_ms);
        let rate_limit_pages = self.params.promote_rate_limit_mbps << 8; // per kernel second
        let period = self.ms(self.params.scan_period_max_ms);
        let second = self.ms(1000.0);
        let t = &mut self.tier[dst];
        // numa_promotion_adjust_threshold
        if now_ms - t.th_start_ms > period {
            t.th_start_ms = now_ms;
            let ref_cand = rate_limit_pages as f64 * (period / second);
            let diff = (t.candidates - t.th_nr_cand) as f64;
            let unit = 2.0 * hot / 16.0;
            let th = if t.threshold_ms > 0.0 {
                t.threshold_ms
            } else {
                hot
            };
            t.threshold_ms = if diff > ref_cand * 1.1 {
                (th - unit).max(unit)
            } else if diff < ref_cand * 0.9 {
                (th + unit).min(2.0 * hot)
            } else {
                th
            };
            t.th_nr_cand = t.candidates;
        }
        let th = if t.threshold_ms > 0.0 {
            t.threshold_ms
        } else {
            hot
        };
        let scanned = self.scan_time_ms.get(idx).copied().unwrap_or(0.0) as f64;
        if now_ms - scanned >= th {
            return false;
        }
        // numa_promotion_rate_limit
        t.candidates += nr;
        os.vm.pgpromote_candidate += nr;
        if now_ms - t.rl_start_ms > second {
            t.rl_start_ms = now_ms;
            t.rl_nr_cand = t.candidates;
        }
        t.candidates - t.rl_nr_cand < rate_limit_pages
    }

    // ---------------------------------------------------------------- accounting (§2.6)

    /// task_numa_fault.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn task_numa_fault(
        &mut self,
        os: &Os,
        p: usize,
        last_cpupid: Cpupid,
        mem_node: usize,
        pages: u64,
        flags: Tnf,
        now_ms: f64,
    ) {
        let cpu_node = self.tasks[p].nid;
        let mut local = flags.local;
        // slow-tier statistics are not kept in tiering mode
        if !self.top_tier.get(mem_node).copied().unwrap_or(true)
            && (self.tiering() || last_cpupid.pid_unset())
        {
            return;
        }
        let mut priv_ = true;
        if !last_cpupid.pid_unset() {
            priv_ = last_cpupid.pid() == Some(self.tasks[p].thread);
            if !priv_ && !flags.no_group {
                self.task_numa_group(p, last_cpupid, flags, &mut priv_);
            }
        }
        // pseudo-interleaving: a spread group is not pushed to rescan faster
        if let Some(g) = self.tasks[p]
            .numa_group
            .and_then(|g| self.groups[g].as_ref())
        {
            if !priv_
                && !local
                && g.active_nodes > 1
                && self.is_active_node(g, cpu_node)
                && self.is_active_node(g, mem_node)
            {
                local = true;
            }
        }
        self.task_numa_placement(os, p, now_ms);
        if self.params.task_placement && now_ms >= self.tasks[p].migrate_retry_ms {
            self.numa_migrate_preferred(p, now_ms);
        }
        let t = &mut self.tasks[p];
        let pages = pages as i64;
        if flags.migrated {
            t.numa_pages_migrated += pages as u64;
        }
        if flags.migrate_fail {
            t.locality[2] += pages as u64;
        }
        let pi = priv_ as usize;
        t.membuf[mem_node][pi] += pages;
        t.cpubuf[cpu_node][pi] += pages;
        t.locality[local as usize] += pages as u64;
    }

    fn is_active_node(&self, g: &NumaGroup, nid: usize) -> bool {
        (g.faults_cpu[nid][0] + g.faults_cpu[nid][1]) * self.params.active_node_fraction as i64
            > g.max_faults_cpu
    }

    /// task_numa_group: join the group of the task that faulted the page last.
    fn task_numa_group(&mut self, p: usize, last: Cpupid, flags: Tnf, priv_: &mut bool) {
        if self.tasks[p].numa_group.is_none() {
            let t = &self.tasks[p];
            let g = NumaGroup {
                gid: t.thread,
                nr_tasks: 1,
                faults: t.mem.clone(),
                faults_cpu: t.cpu_faults.clone(),
                total_faults: t.total_numa_faults,
                active_nodes: 1,
                max_faults_cpu: 0,
            };
            let slot = match self.groups.iter().position(Option::is_none) {
                Some(i) => {
                    self.groups[i] = Some(g);
                    i
                }
                None => {
                    self.groups.push(Some(g));
                    self.groups.len() - 1
                }
            };
            self.tasks[p].numa_group = Some(slot);
        }
        // the task now running on the CPU that faulted last
        let Some(tsk) = self.cpu_curr.get(last.cpu().0 as usize).copied().flatten() else {
            return;
        };
        if Some(tsk) != last.pid() {
            return;
        }
        let Some(grp) = self.tasks[tsk as usize].numa_group else {
            return;
        };
        let my = self.tasks[p].numa_group.expect("created above");
        if grp == my {
            return;
        }
        let (gs, ms) = {
            let g = self.groups[grp].as_ref().expect("live group");
            let m = self.groups[my].as_ref().expect("live group");
            ((g.nr_tasks, g.gid), (m.nr_tasks, m.gid))
        };
        // only join a larger group; the tie-break on a stable id replaces the kernel's address
        if ms.0 > gs.0 || (ms.0 == gs.0 && ms.1 > gs.1) {
            return;
        }
        let join = self.tasks[tsk as usize].mm == self.tasks[p].mm || flags.shared;
        *priv_ = !join;
        if !join {
            return;
        }
        let t = self.tasks[p].clone();
        {
            let m = self.groups[my].as_mut().expect("live group");
            for n in 0..self.nr_nodes {
                for k in 0..2 {
                    m.faults[n][k] -= t.mem[n][k];
                    m.faults_cpu[n][k] -= t.cpu_faults[n][k];
                }
            }
            m.total_faults -= t.total_numa_faults;
            m.nr_tasks -= 1;
            if m.nr_tasks == 0 {
                self.groups[my] = None;
            }
        }
        let g = self.groups[grp].as_mut().expect("live group");
        for n in 0..self.nr_nodes {
            for k in 0..2 {
                g.faults[n][k] += t.mem[n][k];
                g.faults_cpu[n][k] += t.cpu_faults[n][k];
            }
        }
        g.total_faults += t.total_numa_faults;
        g.nr_tasks += 1;
        self.tasks[p].numa_group = Some(grp);
    }

    // ---------------------------------------------------------------- placement (§2.7)

    /// task_numa_placement: once per scan sequence.
    fn task_numa_placement(&mut self, _os: &Os, p: usize, now_ms: f64) {
        let mm = self.tasks[p].mm;
        let seq = self.mms[mm.index()].scan_seq;
        if self.tasks[p].numa_scan_seq == seq {
            return;
        }
        self.tasks[p].numa_scan_seq = seq;
        self.tasks[p].scan_period_max_ms = self.task_scan_max(p);
        let n = self.nr_nodes;
        let ng = self.tasks[p].numa_group;
        let t = &mut self.tasks[p];
        let total_faults = (t.locality[0] + t.locality[1]) as i64;
        // runtime share since the last pass, 16-bit fixed point
        let now_ns = now_ms * 1e6;
        let w: i64 = match t.last_placement_ns {
            Some(last) => {
                let runtime = (t.runtime_ns - t.last_runtime_ns).max(0.0);
                let period = (now_ns - last).max(0.0);
                ((runtime * 65536.0) / (period + 1.0)) as i64
            }
            None => 65536,
        };
        t.last_placement_ns = Some(now_ns);
        t.last_runtime_ns = t.runtime_ns;
        let mut fault_types = [0i64; 2];
        let (mut max_faults, mut max_nid) = (0i64, None);
        for nid in 0..n {
            let (mut faults, mut group_faults) = (0i64, 0i64);
            for (pr, fault_type) in fault_types.iter_mut().enumerate() {
                let t = &mut self.tasks[p];
                let diff = t.membuf[nid][pr] - t.mem[nid][pr] / 2;
                *fault_type += t.membuf[nid][pr];
                t.membuf[nid][pr] = 0;
                let f_weight = w * t.cpubuf[nid][pr] / (total_faults + 1);
                let f_diff = f_weight - t.cpu_faults[nid][pr] / 2;
                t.cpubuf[nid][pr] = 0;
                t.mem[nid][pr] += diff;
                t.cpu_faults[nid][pr] += f_diff;
                t.total_numa_faults += diff;
                faults += t.mem[nid][pr];
                if let Some(g) = ng.and_then(|g| self.groups[g].as_mut()) {
                    g.faults[nid][pr] += diff;
                    g.faults_cpu[nid][pr] += f_diff;
                    g.total_faults += diff;
                    group_faults += g.faults[nid][pr];
                }
            }
            let score = if ng.is_some() { group_faults } else { faults };
            if score > max_faults {
                max_faults = score;
                max_nid = Some(nid);
            }
        }
        // a task cannot run on a CPU-less node: take the nearest node with CPUs
        let max_nid = max_nid.map(|m| self.nearest_cpu_node(m));
        if let Some(g) = ng.and_then(|g| self.groups[g].as_mut()) {
            // numa_group_count_active_nodes
            let maxc = (0..n)
                .map(|i| g.faults_cpu[i][0] + g.faults_cpu[i][1])
                .max()
                .unwrap_or(0);
            let frac = self.params.active_node_fraction as i64;
            g.active_nodes = (0..n)
                .filter(|&i| (g.faults_cpu[i][0] + g.faults_cpu[i][1]) * frac > maxc)
                .count();
            g.max_faults_cpu = maxc;
        }
        if max_faults > 0 {
            self.tasks[p].preferred_nid = max_nid;
        }
        self.update_task_scan_period(p, fault_types[0], fault_types[1], now_ms);
    }

    fn nearest_cpu_node(&self, nid: usize) -> usize {
        if !self.node_cpus[nid].is_empty() {
            return nid;
        }
        (0..self.nr_nodes)
            .filter(|&n| !self.node_cpus[n].is_empty())
            .min_by_key(|&n| (self.distance[nid][n], n))
            .unwrap_or(nid)
    }

    /// update_task_scan_period (§2.7.4), the intended version unless `mainline_scan_period`.
    fn update_task_scan_period(&mut self, p: usize, shared: i64, private: i64, now_ms: f64) {
        let slots = self.params.period_slots as i64;
        let thr = self.params.period_threshold as i64;
        let smin = self.task_scan_min(p);
        let smax = self.task_scan_max(p);
        let mm = self.tasks[p].mm;
        let t = &mut self.tasks[p];
        let remote = t.locality[0] as i64;
        let local = t.locality[1] as i64;
        if local + shared == 0 || t.locality[2] > 0 {
            t.scan_period_ms = (2.0 * t.scan_period_ms).min(t.scan_period_max_ms);
            self.mms[mm.index()].next_scan_ms = now_ms + t.scan_period_ms;
            // the kernel returns without clearing the locality counters here
            if t.scan_period_trace.len() < TRACE_MAX {
                t.scan_period_trace.push((now_ms, t.scan_period_ms));
            }
            return;
        }
        // DIV_ROUND_UP(period, slots) on integer ms; continuous here so scaled time works
        let slot = t.scan_period_ms / slots as f64;
        let lr = local * slots / (local + remote).max(1);
        let sr = shared * slots / (shared + private).max(1);
        let pr = private * slots / (shared + private).max(1);
        // mainline tests the private ratio first and calls it the local one
        let (first, second) = if self.params.mainline_scan_period {
            (pr, lr)
        } else {
            (lr, sr)
        };
        let diff = if first >= thr {
            (first - thr).max(1) as f64 * slot
        } else if second >= thr {
            (second - thr).max(1) as f64 * slot
        } else {
            -((thr - first.max(second)) as f64) * slot
        };
        t.scan_period_ms = (t.scan_period_ms + diff).clamp(smin, smax.max(smin));
        t.locality = [0; 3];
        if t.scan_period_trace.len() < TRACE_MAX {
            t.scan_period_trace.push((now_ms, t.scan_period_ms));
        }
    }

    // ---------------------------------------------------------------- task placement (§2.8)

    fn task_faults(&self, p: usize, nid: usize) -> i64 {
        let t = &self.tasks[p];
        t.mem[nid][0] + t.mem[nid][1]
    }

    fn task_weight(&self, p: usize, nid: usize) -> i64 {
        let total = self.tasks[p].total_numa_faults;
        if total <= 0 {
            return 0;
        }
        1000 * self.task_faults(p, nid) / total
    }

    fn group_weight(&self, p: usize, nid: usize) -> i64 {
        let Some(g) = self.tasks[p]
            .numa_group
            .and_then(|g| self.groups[g].as_ref())
        else {
            return 0;
        };
        if g.total_faults <= 0 {
            return 0;
        }
        1000 * (g.faults[nid][0] + g.faults[nid][1]) / g.total_faults
    }

    /// numa_migrate_preferred.
    fn numa_migrate_preferred(&mut self, p: usize, now_ms: f64) {
        let Some(pref) = self.tasks[p].preferred_nid else {
            return;
        };
        if self.tasks[p].total_numa_faults <= 0 {
            return;
        }
        let interval = self.ms(1000.0).min(self.tasks[p].scan_period_ms / 16.0);
        self.tasks[p].migrate_retry_ms = now_ms + interval;
        if self.tasks[p].nid == pref {
            return;
        }
        self.task_numa_migrate(p);
    }

    fn node_load(&self, nid: usize) -> i64 {
        self.node_cpus[nid]
            .iter()
            .filter(|c| self.cpu_curr.get(c.0 as usize).copied().flatten().is_some())
            .count() as i64
    }

    /// Set a thread's affinity mask (None: every CPU), as sched_setaffinity does.
    pub fn set_cpus_allowed(&mut self, thread: u32, cpus: Option<Vec<CpuId>>) {
        let t = thread as usize;
        if self.cpus_allowed.len() <= t {
            self.cpus_allowed.resize(t + 1, None);
        }
        self.cpus_allowed[t] = cpus;
    }

    fn may_run_on(&self, thread: u32, cpu: CpuId) -> bool {
        match self.cpus_allowed.get(thread as usize) {
            Some(Some(mask)) => mask.contains(&cpu),
            _ => true,
        }
    }

    /// task_numa_migrate, simplified: load = running threads per node, capacity = CPUs per
    /// node, no SMT, no distance-weighted scores; affinity masks are honoured.
    fn task_numa_migrate(&mut self, p: usize) {
        let src = self.tasks[p].nid;
        let pref = self.tasks[p].preferred_nid.expect("caller checked");
        let taskweight = self.task_weight(p, src);
        let groupweight = self.group_weight(p, src);
        // (cpu, swapped task, imp)
        let mut best: Option<(CpuId, Option<u32>, i64)> = None;
        let try_node = |this: &Self, dst: usize, best: &mut Option<(CpuId, Option<u32>, i64)>| {
            let taskimp = this.task_weight(p, dst) - taskweight;
            let groupimp = this.group_weight(p, dst) - groupweight;
            this.task_numa_find_cpu(p, src, dst, taskimp, groupimp, best);
        };
        try_node(self, pref, &mut best);
        let spread = self.tasks[p]
            .numa_group
            .and_then(|g| self.groups[g].as_ref())
            .is_some_and(|g| g.active_nodes > 1);
        if best.is_none() || spread {
            for nid in 0..self.nr_nodes {
                if nid == src || nid == pref || self.node_cpus[nid].is_empty() {
                    continue;
                }
                let taskimp = self.task_weight(p, nid) - taskweight;
                let groupimp = self.group_weight(p, nid) - groupweight;
                if taskimp < 0 && groupimp < 0 {
                    continue;
                }
                try_node(self, nid, &mut best);
            }
        }
        if self.tasks[p].numa_group.is_some() {
            // a grouped task settles on the node it ends up on
            let nid = best.map_or(src, |b| self.node_of_cpu(b.0));
            self.tasks[p].preferred_nid = Some(nid);
        }
        let Some((cpu, swap, _)) = best else {
            return;
        };
        let src_cpu = self.tasks[p].cpu;
        let me = self.tasks[p].thread;
        self.move_task(p, cpu);
        if let Some(cur) = swap {
            self.move_task(cur as usize, src_cpu);
            self.cpu_curr[src_cpu.0 as usize] = Some(cur);
            self.task_swaps += 1;
        } else {
            self.cpu_curr[src_cpu.0 as usize] = None;
            self.task_moves += 1;
        }
        self.cpu_curr[cpu.0 as usize] = Some(me);
    }

    fn move_task(&mut self, p: usize, cpu: CpuId) {
        let nid = self.node_of_cpu(cpu);
        let t = &mut self.tasks[p];
        t.cpu = cpu;
        t.nid = nid;
        let thread = t.thread;
        self.pending_moves.retain(|m| m.0 != thread);
        self.pending_moves.push((thread, cpu));
    }

    /// task_numa_find_cpu + task_numa_compare over the CPUs of `dst`.
    fn task_numa_find_cpu(
        &self,
        p: usize,
        src: usize,
        dst: usize,
        taskimp: i64,
        groupimp: i64,
        best: &mut Option<(CpuId, Option<u32>, i64)>,
    ) {
        let (src_cap, dst_cap) = (
            self.node_cpus[src].len() as i64,
            self.node_cpus[dst].len() as i64,
        );
        let (src_load, dst_load) = (self.node_load(src), self.node_load(dst));
        let old_imb = (dst_load * src_cap - src_load * dst_cap).abs();
        let imb = ((dst_load + 1) * src_cap - (src_load - 1) * dst_cap).abs();
        let maymove = imb <= old_imb;
        let p_ng = self.tasks[p].numa_group;
        let smallimp = self.params.smallimp;
        let (p_thread, src_cpu) = (self.tasks[p].thread, self.tasks[p].cpu);
        for &cpu in &self.node_cpus[dst] {
            if !self.may_run_on(p_thread, cpu) {
                continue;
            }
            let best_imp = best.map_or(0, |b| b.2);
            let imp = if p_ng.is_some() { groupimp } else { taskimp };
            let cur = self.cpu_curr.get(cpu.0 as usize).copied().flatten();
            let Some(cur) = cur else {
                // [nl] a move needs a positive gain: without a load balancer to pull tasks
                // back, a zero-gain move would only shuffle tasks
                if maymove && imp > 0 && imp >= best_imp {
                    *best = Some((cpu, None, imp));
                }
                continue;
            };
            let c = cur as usize;
            if c == p || self.tasks.get(c).is_none_or(|t| !t.live) {
                continue;
            }
            // a swap moves `cur` to p's CPU: its mask must allow it
            if !self.may_run_on(self.tasks[c].thread, src_cpu) {
                continue;
            }
            let cur_ng = self.tasks[c].numa_group;
            let mut imp = imp;
            if cur_ng == p_ng {
                imp = taskimp + self.task_weight(c, src) - self.task_weight(c, dst);
                if cur_ng.is_some() {
                    imp -= imp / 16;
                }
            } else if cur_ng.is_some() && p_ng.is_some() {
                imp += self.group_weight(c, src) - self.group_weight(c, dst);
            } else {
                imp += self.task_weight(c, src) - self.task_weight(c, dst);
            }
            if imp < smallimp || imp <= best_imp + smallimp / 2 {
                continue;
            }
            // a swap keeps both nodes' loads
            *best = Some((cpu, Some(cur), imp));
        }
    }

    /// The thread moves decided since the last tick.
    pub fn take_moves(&mut self) -> Vec<(u32, CpuId)> {
        std::mem::take(&mut self.pending_moves)
    }

    pub fn report(&self) -> NumaBalancingReport {
        NumaBalancingReport {
            mode: self.params.mode,
            tasks: self
                .tasks
                .iter()
                .map(|t| NumaTaskReport {
                    thread: t.thread,
                    mm: t.mm.0,
                    preferred_nid: t.preferred_nid.map(|n| n as u16),
                    scan_period_ms: t.scan_period_ms,
                    numa_scan_seq: t.numa_scan_seq,
                    numa_pages_migrated: t.numa_pages_migrated,
                    numa_group: t
                        .numa_group
                        .and_then(|g| self.groups[g].as_ref())
                        .map(|g| g.gid),
                    scans: t.scans,
                    mem_faults: t.mem.iter().map(|f| f[0] + f[1]).collect(),
                    scan_period_trace: t.scan_period_trace.clone(),
                })
                .collect(),
            scan_seq: self.mms.iter().map(|m| m.scan_seq).collect(),
            groups: self.groups.iter().flatten().count(),
            task_moves: self.task_moves,
            task_swaps: self.task_swaps,
        }
    }
}

impl Os {
    /// Turn automatic NUMA balancing on (mode 0 leaves it off).
    pub fn enable_numa_balancing(&mut self, params: NumaBalancingParams, costs: &OsCosts) {
        self.numab =
            (params.mode != 0).then(|| Box::new(NumaBalancing::new(params, &self.topo, costs)));
    }

    /// Present base pages of an address space (get_mm_rss).
    pub fn rss_pages(&self, mm: TaskId) -> u64 {
        self.regions
            .iter()
            .filter(|r| r.task == mm)
            .map(|r| self.pt.present_base_pages(r.start, r.len) as u64)
            .sum()
    }

    /// The scheduler-tick work of NUMA balancing for every thread.
    pub fn numa_balancing_tick(&mut self, now_ns: f64, threads: &[TaskTick]) -> TickOutcome {
        let Some(mut nb) = self.numab.take() else {
            return TickOutcome::default();
        };
        let mut out = nb.tick(self, now_ns, threads);
        out.moves = nb.take_moves();
        self.numab = Some(nb);
        out
    }

    /// A NUMA hinting fault on a PROT_NONE entry. Without balancing the entry is simply made
    /// accessible again at the hint-fault cost of zero extra work.
    pub fn numa_hint_fault(&mut self, f: &HintFault) -> HintOutcome {
        let Some(mut nb) = self.numab.take() else {
            let pte = self.pt.get(f.addr);
            self.pt
                .set_prot_none(pte.size().align_down(f.addr), pte.size(), false);
            return HintOutcome::default();
        };
        let out = nb.hint_fault(self, f);
        self.numab = Some(nb);
        out
    }

    pub fn numa_balancing_report(&self) -> Option<NumaBalancingReport> {
        self.numab.as_ref().map(|nb| nb.report())
    }
}
