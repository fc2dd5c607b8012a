//! The interface between placement policies and whatever runs them (DESIGN.md: "the one idea").
//!
//! A policy sees a [`MemoryView`] (page placement, per-node traffic, samples, threads) and
//! returns [`Action`]s. The simulator and the Linux runtime both implement the view and carry
//! out the actions, so Carrefour, Carrefour-LP, the NUMA manager and percentage placement are
//! written once.

use crate::ids::{CpuId, NodeId, TaskId, ThreadId};
use crate::mempolicy::MemPolicy;
use crate::nodemask::NodeMask;
use crate::page::PageSize;
use crate::sample::AccessSample;
use serde::{Deserialize, Serialize};

/// Placement of the page (folio) backing one address.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PageInfo {
    /// First address of the folio.
    pub start: u64,
    pub size: PageSize,
    pub node: NodeId,
}

/// A mapped range of one task (a VMA; Müller's "region").
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RegionInfo {
    pub task: TaskId,
    pub start: u64,
    pub len_bytes: u64,
    pub name: String,
    /// The range policy (`mbind`), if any.
    pub policy: Option<MemPolicy>,
    /// MADV_HUGEPAGE (true), MADV_NOHUGEPAGE (false), or neither.
    pub thp_advice: Option<bool>,
}

#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ThreadInfo {
    pub thread: ThreadId,
    pub task: TaskId,
    pub cpu: CpuId,
    pub node: NodeId,
}

/// Per-thread hardware counters since the start of the run (monotonic, like perf counters).
#[derive(Copy, Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadCounters {
    pub instructions: u64,
    pub loads: u64,
    pub stores: u64,
    pub llc_misses: u64,
    pub remote_loads: u64,
    pub cycles: u64,
    /// References that missed the private caches (L2 misses on Intel, as perf counts them).
    pub private_misses: u64,
    /// Page walks (TLB misses that walked the page table).
    pub page_walks: u64,
    /// Page-walk references that missed the private caches (Carrefour-LP's walk miss share).
    pub page_walk_private_misses: u64,
    /// Time spent in page faults, ns (Carrefour-LP's fault time share).
    pub fault_ns: u64,
}

/// DRAM requests served per controller, split by requesting node: `served[to][from]`,
/// cumulative since the start of the run.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeTraffic {
    pub served: Vec<Vec<u64>>,
}

pub trait MemoryView {
    fn num_nodes(&self) -> usize;
    /// Node distances, SLIT units.
    fn distance(&self, from: NodeId, to: NodeId) -> u32;
    fn now_ns(&self) -> u64;
    /// The folio backing `addr` of `task`, or None if not populated.
    fn page(&self, task: TaskId, addr: u64) -> Option<PageInfo>;
    fn regions(&self) -> Vec<RegionInfo>;
    fn threads(&self) -> Vec<ThreadInfo>;
    fn thread_counters(&self, thread: ThreadId) -> ThreadCounters;
    fn node_traffic(&self) -> NodeTraffic;
    /// Samples gathered since the previous policy tick.
    fn samples(&self) -> &[AccessSample];
    /// Free bytes per node.
    fn free_bytes(&self, node: NodeId) -> u64;
    /// CPUs of a node, in id order (empty for a CPU-less node).
    fn node_cpus(&self, node: NodeId) -> Vec<CpuId>;
    /// Peak bandwidth of the node's memory controller, bytes per second, where known (the
    /// machine description in the simulator, HMAT on Linux). Adaptive percentage divides
    /// measured traffic by it to get controller utilisation.
    fn controller_peak_bytes_per_s(&self, _node: NodeId) -> Option<f64> {
        None
    }
}

/// How a range marked migrate-on-next-touch moves when it is touched
/// (reference/policies.md section 4).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mechanism", rename_all = "kebab-case")]
pub enum NextTouchMechanism {
    /// Kernel next-touch (`madvise(MIGRATE_ON_NEXT_TOUCH)`): a flag per page table entry; the
    /// fault handler copies each touched page to the toucher's node, strictly page by page.
    Kernel,
    /// User-space next-touch: `mprotect(PROT_NONE)`; the SIGSEGV handler moves the whole unit
    /// (`unit_bytes`-aligned block of the range, or the whole range when `unit_bytes` is 0)
    /// with `move_pages`, then restores the protection.
    User { unit_bytes: u64 },
}

/// What a policy asks for. Ranges are `[start, start + len_bytes)` in `task`'s address space.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "action", rename_all = "kebab-case")]
pub enum Action {
    /// Move every populated page of the range to `to` (move_pages / migrate_pages).
    Migrate {
        task: TaskId,
        start: u64,
        len_bytes: u64,
        to: NodeId,
    },
    /// Move single pages, each to its own node, in one batched call (move_pages with a nodes
    /// array): one call's fixed cost and one TLB shootdown for the batch, where a `Migrate`
    /// per page would pay both per page. A page inside a huge page moves the huge page.
    MovePages {
        task: TaskId,
        pages: Vec<(u64, NodeId)>,
    },
    /// Spread the range's pages round robin over `nodes` (moving populated ones).
    Interleave {
        task: TaskId,
        start: u64,
        len_bytes: u64,
        nodes: NodeMask,
    },
    /// Split the huge page containing `addr` into base pages, in place.
    SplitHuge { task: TaskId, addr: u64 },
    /// Allow (MADV_HUGEPAGE) or forbid (MADV_NOHUGEPAGE) huge pages in a range.
    SetThpAdvice {
        task: TaskId,
        start: u64,
        len_bytes: u64,
        allow: bool,
    },
    /// Enable or disable huge-page allocation and khugepaged promotion for the whole machine.
    SetThpAllocation { allocate: bool, promote: bool },
    /// Set a range policy for future faults (mbind without MPOL_MF_MOVE).
    SetRangePolicy {
        task: TaskId,
        start: u64,
        len_bytes: u64,
        policy: MemPolicy,
    },
    /// Mark the range migrate-on-next-touch: each unit moves to the node of the thread that
    /// touches it next.
    MarkNextTouch {
        task: TaskId,
        start: u64,
        len_bytes: u64,
        mechanism: NextTouchMechanism,
    },
    /// Lazy migration to a known destination (Müller's dataspace migration, section 4):
    /// unmap the range; a fault moves the faulting block to `to` before mapping it. Untouched
    /// pages stay where they are and cost nothing.
    LazyMigrate {
        task: TaskId,
        start: u64,
        len_bytes: u64,
        to: NodeId,
    },
    /// Replace the task policy of every thread of `task` for future faults (set_mempolicy).
    SetTaskPolicy { task: TaskId, policy: MemPolicy },
    /// Move a thread to another CPU.
    MoveThread { thread: ThreadId, cpu: CpuId },
    /// Move every page of the whole task on a node of `from` to the node at the same position
    /// in `to` (migrate_pages(2): the kernel's `node_remap`; when the masks differ in weight,
    /// pages already on a node of `to` stay). One call for the whole address space.
    MigrateProcess {
        task: TaskId,
        from: NodeMask,
        to: NodeMask,
    },
}

impl Action {
    /// The task whose memory or policy the action changes (None for machine-wide settings and
    /// thread moves).
    pub fn task(&self) -> Option<TaskId> {
        match self {
            Action::Migrate { task, .. }
            | Action::MovePages { task, .. }
            | Action::Interleave { task, .. }
            | Action::SplitHuge { task, .. }
            | Action::SetThpAdvice { task, .. }
            | Action::SetRangePolicy { task, .. }
            | Action::MarkNextTouch { task, .. }
            | Action::LazyMigrate { task, .. }
            | Action::SetTaskPolicy { task, .. }
            | Action::MigrateProcess { task, .. } => Some(*task),
            Action::SetThpAllocation { .. } | Action::MoveThread { .. } => None,
        }
    }
}

/// One kind of decision a policy hook made, how many times, and why, in the policy's own
/// (its paper's) words: `migrate`, 120, `one accessing node (Carrefour §6 step 5)`. Runners
/// log them per hook beside what the actions did (the simulator's `SimResult::policy_log`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    pub what: String,
    pub count: u64,
    pub reason: String,
}

impl Decision {
    pub fn new(what: &str, count: u64, reason: impl Into<String>) -> Decision {
        Decision {
            what: what.to_string(),
            count,
            reason: reason.into(),
        }
    }
}

/// A placement policy that decides periodically from a memory view.
pub trait Policy: Send {
    fn name(&self) -> &str;
    /// How often `tick` runs, in simulated or real nanoseconds.
    fn period_ns(&self) -> u64;
    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action>;

    /// Whether this policy can run on `view` at all (e.g. it needs controller peaks the view
    /// lacks). Runners call it once before the first hook or tick and refuse to start with
    /// the message, so nothing is applied by a policy that could not finish.
    fn check(&self, _view: &dyn MemoryView) -> Result<(), String> {
        Ok(())
    }

    /// What the hooks decided since the last call, one entry per kind of decision with its
    /// reason. Runners call it after every hook and log it with what the actions did; a
    /// policy that records nothing is logged by its actions alone.
    fn take_decisions(&mut self) -> Vec<Decision> {
        Vec::new()
    }

    /// A thread reached phase boundary `phase` (`Op::Phase`): the hook of next-touch and lazy
    /// migration. Actions apply before the thread goes on.
    fn on_phase(&mut self, _view: &dyn MemoryView, _thread: ThreadId, _phase: u16) -> Vec<Action> {
        Vec::new()
    }

    /// A thread was moved from one node to another (by a policy or the scheduler).
    fn on_thread_moved(
        &mut self,
        _view: &dyn MemoryView,
        _thread: ThreadId,
        _from: NodeId,
        _to: NodeId,
    ) -> Vec<Action> {
        Vec::new()
    }

    /// Thread creation (a NUMA manager interposing on it): the CPU to start `thread` on, or
    /// None to keep the runner's choice (`--pin`). Called once per thread, in thread order,
    /// before the run starts.
    fn place_thread(&mut self, _view: &dyn MemoryView, _thread: &ThreadInfo) -> Option<CpuId> {
        None
    }

    /// Allocation (a NUMA manager interposing on it): the range policy for a new mapping
    /// requested by `requester` (the task's first thread when the runner does not know), or
    /// None to keep the mapping's own. Called after `place_thread` for every thread.
    fn place_region(
        &mut self,
        _view: &dyn MemoryView,
        _region: &RegionInfo,
        _requester: &ThreadInfo,
    ) -> Option<MemPolicy> {
        None
    }
}
