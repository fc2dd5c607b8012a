//! The simulated operating system's memory management: mappings (VMAs), the page table,
//! first-touch faults under memory policies, node capacity and fallback, THP allocation,
//! khugepaged promotion, splitting and page migration.
//!
//! Costs are not charged here: functions report what happened and the engine turns it into
//! time with the machine's [`numalab_machine::OsCosts`].

pub mod anon_vma_lock;
pub mod first_touch;
pub mod mempolicy;
pub mod migrate_pages;
pub mod migration_entry;
pub mod mmap_lock;
pub mod next_touch;
pub mod numa_balancing;
pub mod page_cache;
pub mod pagetable;
pub mod pt_pages;
pub mod thp_split_ext;
pub mod tlb_shootdown;

use mempolicy::{place, PlaceCtx, Placement, PolicyState};
use numalab_core::{MemPolicy, NodeId, PageSize, TaskId, Topology};
use pagetable::{PageTable, Pte, VA_BASE};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// /sys/kernel/mm/transparent_hugepage/enabled
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThpMode {
    Never,
    Madvise,
    Always,
}

impl FromStr for ThpMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "never" => Ok(ThpMode::Never),
            "madvise" => Ok(ThpMode::Madvise),
            "always" => Ok(ThpMode::Always),
            _ => Err(format!(
                "unknown THP mode '{s}': expected never, madvise or always"
            )),
        }
    }
}

impl fmt::Display for ThpMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ThpMode::Never => "never",
            ThpMode::Madvise => "madvise",
            ThpMode::Always => "always",
        })
    }
}

/// A mapping (VMA) of one task.
#[derive(Clone, Debug)]
pub struct Region {
    pub task: TaskId,
    pub start: u64,
    pub len: u64,
    pub name: String,
    pub policy: Option<MemPolicy>,
    pub pstate: PolicyState,
    pub thp_advice: Option<bool>,
    pub hugetlb: Option<PageSize>,
    /// A file in the page cache mapped MAP_PRIVATE (`mmap_file`): its pages exist before
    /// the run (`populate_page_cache`) and a fault maps them (`map_cached`).
    pub file: bool,
}

impl Region {
    pub fn end(&self) -> u64 {
        self.start + self.len
    }
}

#[derive(Clone, Debug)]
pub struct TaskMm {
    pub policy: MemPolicy,
    pub pstate: PolicyState,
}

/// vmstat-like counters, with the kernel's names (reference/policies.md §2.11).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct VmStat {
    pub pgfault_4k: u64,
    pub pgfault_2m: u64,
    pub pgfault_1g: u64,
    pub numa_hit: u64,
    pub numa_miss: u64,
    pub numa_foreign: u64,
    pub numa_interleave: u64,
    pub numa_local: u64,
    pub numa_other: u64,
    pub thp_fault_alloc: u64,
    pub thp_fault_fallback: u64,
    pub thp_collapse_alloc: u64,
    pub thp_split_page: u64,
    pub pgmigrate_success: u64,
    pub pgmigrate_fail: u64,
    pub thp_migration_success: u64,
    pub thp_migration_fail: u64,
    pub numa_pages_migrated: u64,
    pub percent_shortfall_pages: u64,
    /// Automatic NUMA balancing (numa_balancing.rs): entries protected (a THP counts 512),
    /// PMDs protected, hint faults, of which on a page already local, tiering promotions.
    pub numa_pte_updates: u64,
    pub numa_huge_pte_updates: u64,
    pub numa_hint_faults: u64,
    pub numa_hint_faults_local: u64,
    pub pgpromote_success: u64,
    pub pgpromote_candidate: u64,
    /// numalab's own: base pages of folios a first-touch fault placed for one thread and
    /// another thread's fault took over, finishing first (first_touch.rs).
    #[serde(default)]
    pub first_touch_race_pages: u64,
    /// numalab's own: faults on anonymous memory that cleared a page and found another
    /// thread's mapped first, freeing theirs (first_touch.rs; Linux counts them as faults, and
    /// a lost THP fault as `thp_fault_alloc`, with no event of their own).
    #[serde(default)]
    pub first_touch_faults_lost: u64,
    /// numalab's own: touches that found a folio under a migration entry while its copy ran
    /// and waited for it (migration_entry.rs; the kernel counts no such event).
    #[serde(default)]
    pub migration_entry_waits: u64,
    /// TLB shootdowns that reached another CPU, and the CPUs they reached in all (the
    /// kernel's `nr_tlb_remote_flush` and `nr_tlb_remote_flush_received`, counted under
    /// CONFIG_DEBUG_TLBFLUSH; os/tlb_shootdown.rs).
    #[serde(default)]
    pub nr_tlb_remote_flush: u64,
    #[serde(default)]
    pub nr_tlb_remote_flush_received: u64,
}

impl VmStat {
    /// Count `flushes` shootdowns, each reaching `cpus` other CPUs.
    pub fn count_remote_flushes(&mut self, flushes: u32, cpus: usize) {
        if cpus > 0 {
            self.nr_tlb_remote_flush += u64::from(flushes);
            self.nr_tlb_remote_flush_received += u64::from(flushes) * cpus as u64;
        }
    }
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum OsError {
    #[error("the host cannot allocate {} GiB for {what} (the simulator's own data for this run, not simulated memory); run it on a host with more free memory or shrink the workload", gib(*bytes))]
    HostMemory { what: String, bytes: u64 },
    #[error("mmap of '{name}' refused: {} GiB is more than the machine's {} GiB of memory (Linux's heuristic overcommit refuses a mapping larger than RAM + swap); shrink the workload or pick a larger machine", gib(*bytes), gib(*total))]
    MapTooLarge {
        name: String,
        bytes: u64,
        total: u64,
    },
    #[error("segmentation fault: task {task} touched address {addr:#x}, which no mapping covers (a workload bug)")]
    Segfault { task: u32, addr: u64 },
    #[error("out of memory: {what} needs {need_pages} pages but nodes {nodes} are full (MPOL_BIND does not fall back)")]
    BindOom {
        what: String,
        need_pages: u64,
        nodes: String,
    },
    #[error("out of memory: {what} needs {need_pages} pages and every node is full ({total_gib:.1} GiB simulated)")]
    Oom {
        what: String,
        need_pages: u64,
        total_gib: f64,
    },
}

fn gib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 30) as f64)
}

/// The outcome of a first-touch fault.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Fault {
    pub folio_start: u64,
    pub size: PageSize,
    pub node: NodeId,
    /// Placed by the toucher's node (policy default or local): a race for it is decided by
    /// simulated time while the epoch lasts (first_touch.rs).
    pub local_rule: bool,
    /// A hugetlbfs page: faults on it serialise on the fault mutex (first_touch.rs).
    pub hugetlb: bool,
    /// A read fault that mapped a page already in the page cache (page_cache.rs): nothing
    /// allocated or cleared.
    pub file: bool,
}

/// Bytes copied from one node to another: (from node index, to node index, bytes).
pub type NodeCopy = (usize, usize, u64);

/// What a migration did.
/// The copy time of one migrated folio of `size`: at `base_bytes_per_ns`, or, for a huge folio
/// where the machine has a figure (`huge_bytes_per_ns` > 0, `OsCosts::thp_migrate_mbps`), at
/// that rate (the kernel migrates it whole: one copy, one unmap and remap instead of 512).
pub fn folio_copy_ns(size: PageSize, base_bytes_per_ns: f64, huge_bytes_per_ns: f64) -> f64 {
    let rate = if size != PageSize::Base4K && huge_bytes_per_ns > 0.0 {
        huge_bytes_per_ns
    } else {
        base_bytes_per_ns
    };
    size.bytes() as f64 / rate
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MigrateReport {
    pub folios_moved: u64,
    pub base_pages_moved: u64,
    pub already_there: u64,
    pub failed_nomem: u64,
    pub not_present: u64,
    /// (source node, destination node, bytes) per move, for traffic accounting.
    #[serde(skip)]
    pub copies: Vec<NodeCopy>,
    /// Folios moved (start, size), for TLB invalidation.
    #[serde(skip)]
    pub moved: Vec<(u64, PageSize)>,
}

pub struct Os {
    pub pt: PageTable,
    pub regions: Vec<Region>,
    next_va: u64,
    pub tasks: Vec<TaskMm>,
    default_task_policy: MemPolicy,
    pub free_pages: Vec<u64>,
    pub total_pages: Vec<u64>,
    pub thp: ThpMode,
    /// Carrefour-LP's switches: huge-page allocation at fault, khugepaged promotion.
    pub thp_alloc_enabled: bool,
    pub thp_promote_enabled: bool,
    topo: Topology,
    zonelists: Vec<Vec<NodeId>>,
    rng: u64,
    khugepaged_cursor: u64,
    pub vm: VmStat,
    /// Automatic NUMA balancing state when enabled (`enable_numa_balancing`).
    pub numab: Option<Box<numa_balancing::NumaBalancing>>,
    /// Next-touch and lazy migration marks and counters (next_touch.rs).
    pub nt: next_touch::NextTouchState,
    /// The folios first touched in the current epoch (first_touch.rs).
    pub first_touch: first_touch::FirstTouch,
    /// The folios being migrated, with when their copies run (migration_entry.rs).
    pub migrating: migration_entry::MigrationEntries,
    /// libhugetlbfs's `HUGETLB_MORECORE`: the page size backing every task's heap (None:
    /// mappings are plain anonymous memory).
    hugetlb_heap: Option<PageSize>,
    /// Per task: its heap mapping (index into `regions`) and the bytes allocated in it.
    heaps: Vec<Option<(usize, u64)>>,
    /// The first mapping refused (`mmap`), reported once the workload is built.
    pub map_refused: Option<OsError>,
    /// The node of each page-table page, set by the fault that allocated it (pt_pages.rs).
    pub pt_pages: pt_pages::PtPages,
    /// Base pages a read fault on a cached file maps (page_cache.rs): 16 with Linux 3.15's
    /// fault-around, 1 before (`set_fault_around`).
    pub fault_around_pages: u64,
}

/// Uniform draws below their argument from a 64-bit LCG seeded with `seed` (Knuth's MMIX
/// constants): a policy's random choices for one allocation (`mempolicy::place`).
fn draws(mut seed: u64) -> impl FnMut(u64) -> u64 {
    move |m: u64| {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (seed >> 33) % m
    }
}

impl Os {
    pub fn new(topo: &Topology, thp: ThpMode, task_policy: MemPolicy, seed: u64) -> Os {
        let total: Vec<u64> = topo.nodes.iter().map(|n| n.mem_bytes >> 12).collect();
        Os {
            pt: PageTable::new(),
            regions: Vec::new(),
            next_va: VA_BASE,
            tasks: Vec::new(),
            default_task_policy: task_policy,
            free_pages: total.clone(),
            total_pages: total,
            thp,
            thp_alloc_enabled: true,
            thp_promote_enabled: true,
            zonelists: (0..topo.num_nodes())
                .map(|i| topo.nodes_by_distance(NodeId(i as u16)))
                .collect(),
            topo: topo.clone(),
            rng: seed | 1,
            khugepaged_cursor: VA_BASE,
            vm: VmStat::default(),
            numab: None,
            nt: next_touch::NextTouchState::default(),
            first_touch: first_touch::FirstTouch::default(),
            migrating: migration_entry::MigrationEntries::default(),
            hugetlb_heap: None,
            heaps: Vec::new(),
            map_refused: None,
            pt_pages: pt_pages::PtPages::default(),
            fault_around_pages: 1,
        }
    }

    /// Back every task's heap with hugetlbfs pages of `size`, as libhugetlbfs does with
    /// `HUGETLB_MORECORE=2M|1G` (docs/model.md, "Hugetlbfs heap"): from then on a mapping
    /// without its own page size or range policy is carved from the task's heap.
    pub fn set_hugetlb_heap(&mut self, size: Option<PageSize>) {
        self.hugetlb_heap = size.filter(|s| *s != PageSize::Base4K);
    }

    pub fn topology(&self) -> &Topology {
        &self.topo
    }

    fn task_mut(&mut self, task: TaskId) -> &mut TaskMm {
        while self.tasks.len() <= task.index() {
            self.tasks.push(TaskMm {
                policy: self.default_task_policy.clone(),
                pstate: PolicyState::default(),
            });
        }
        &mut self.tasks[task.index()]
    }

    /// Set a task's policy (set_mempolicy): applies to later faults only.
    pub fn set_task_policy(&mut self, task: TaskId, policy: MemPolicy) {
        let t = self.task_mut(task);
        t.policy = policy;
        t.pstate = PolicyState::default();
    }

    /// The end of the address space mapped so far: every mapping lies below it.
    pub fn va_end(&self) -> u64 {
        self.next_va
    }

    /// mmap: reserve a range, 2 MiB aligned (1 GiB for 1G hugetlb), populated at first touch.
    pub fn mmap(
        &mut self,
        task: TaskId,
        name: &str,
        bytes: u64,
        hugetlb: Option<PageSize>,
        thp_advice: Option<bool>,
        policy: Option<MemPolicy>,
    ) -> u64 {
        self.task_mut(task);
        // Linux's heuristic overcommit (vm.overcommit_memory = 0, mm/util.c
        // __vm_enough_memory) refuses a single mapping larger than RAM + swap; the simulated
        // machine has no swap. Refusing here also keeps the host's page table bounded.
        let total = self.topo.total_mem_bytes();
        if bytes > total {
            self.map_refused.get_or_insert(OsError::MapTooLarge {
                name: name.to_string(),
                bytes,
                total,
            });
            return self.next_va;
        }
        if let (None, None, Some(size)) = (hugetlb, &policy, self.hugetlb_heap) {
            return self.heap_alloc(task, bytes, size);
        }
        let align = match hugetlb {
            Some(PageSize::Giant1G) => PageSize::Giant1G.bytes(),
            _ => PageSize::Huge2M.bytes(),
        };
        let unit = hugetlb.map_or(4096, |s| s.bytes());
        let len = bytes.max(1).div_ceil(unit) * unit;
        let start = self.next_va.div_ceil(align) * align;
        // one unmapped 2 MiB guard between mappings, so overruns fault instead of aliasing
        self.next_va = start + len + PageSize::Huge2M.bytes();
        self.grow_page_table(name);
        self.regions.push(Region {
            task,
            start,
            len,
            name: name.to_string(),
            policy,
            pstate: PolicyState::default(),
            thp_advice,
            hugetlb,
            file: false,
        });
        start
    }

    /// mmap of a file already in the page cache, MAP_PRIVATE and only read (page_cache.rs):
    /// 4 KiB pages whatever THP or the hugetlbfs heap say, placed before the run by
    /// `populate_page_cache`.
    pub fn mmap_file(&mut self, task: TaskId, name: &str, bytes: u64) -> u64 {
        // a file is never carved from the hugetlbfs heap: that heap is malloc's
        let heap = self.hugetlb_heap.take();
        let start = self.mmap(task, name, bytes, None, None, None);
        self.hugetlb_heap = heap;
        if let Some(r) = self.regions.last_mut().filter(|r| r.start == start) {
            r.file = true;
        }
        start
    }

    /// The host-side page table up to `next_va`; where the host cannot allocate it the run
    /// stops with that error (the mapping's name says whose).
    fn grow_page_table(&mut self, name: &str) {
        if let Err(bytes) = self.pt.grow_to(self.next_va) {
            self.refuse_host_memory(&format!("the page table of mapping '{name}'"), bytes);
        }
    }

    /// The host could not allocate `bytes` for `what`: the run stops with that error once the
    /// workload is built (the first refusal is the one reported).
    pub fn refuse_host_memory(&mut self, what: &str, bytes: u64) {
        self.map_refused.get_or_insert(OsError::HostMemory {
            what: what.to_string(),
            bytes,
        });
    }

    /// `malloc(bytes)` from `task`'s hugetlbfs heap (libhugetlbfs's morecore.c): the library
    /// sets `M_MMAP_MAX` to 0, so even large allocations come from the heap, one after the
    /// other, and neighbouring allocations share huge pages. Allocations start on a cache
    /// line (glibc guarantees 16 B; numalab's workloads align their arrays to lines). The heap
    /// grows in place while it is the last mapping; after another mapping it starts a new
    /// heap segment (as morecore does when it cannot extend contiguously).
    fn heap_alloc(&mut self, task: TaskId, bytes: u64, size: PageSize) -> u64 {
        const ALIGN: u64 = 64;
        let unit = size.bytes();
        let guard = PageSize::Huge2M.bytes();
        if self.heaps.len() <= task.index() {
            self.heaps.resize(task.index() + 1, None);
        }
        let grows = self.heaps[task.index()].filter(|&(ri, _)| ri + 1 == self.regions.len());
        let (ri, start) = match grows {
            Some((ri, used)) => (ri, self.regions[ri].start + used.div_ceil(ALIGN) * ALIGN),
            None => {
                let start = self.next_va.div_ceil(unit) * unit;
                self.regions.push(Region {
                    task,
                    start,
                    len: 0,
                    // /proc/pid/maps calls it [heap]; the page size says what backs it
                    name: format!("[heap {size}]"),
                    policy: None,
                    pstate: PolicyState::default(),
                    thp_advice: None,
                    hugetlb: Some(size),
                    file: false,
                });
                (self.regions.len() - 1, start)
            }
        };
        let r = &mut self.regions[ri];
        let used = start + bytes.max(1) - r.start;
        r.len = used.div_ceil(unit) * unit;
        self.next_va = r.end() + guard;
        self.grow_page_table("[heap]");
        self.heaps[task.index()] = Some((ri, used));
        start
    }

    /// The mapping containing `addr`.
    pub fn region_index(&self, addr: u64) -> Option<usize> {
        let i = self.regions.partition_point(|r| r.start <= addr);
        if i == 0 {
            return None;
        }
        let r = &self.regions[i - 1];
        (addr < r.end()).then_some(i - 1)
    }

    fn next_rand(&mut self) -> u64 {
        // xorshift64*: deterministic, seeded per run
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Whether THP applies to a mapping at all (the mode and its madvise advice) and the
    /// aligned 2 MiB range at `huge_start` lies inside it: shared by faults and khugepaged.
    fn thp_range_allowed(&self, r: &Region, huge_start: u64) -> bool {
        let mode_allows = match self.thp {
            ThpMode::Never => false,
            ThpMode::Madvise => r.thp_advice == Some(true),
            ThpMode::Always => r.thp_advice != Some(false),
        };
        // Linux maps a regular file's page cache with base pages (before 5.4 always; since,
        // khugepaged collapses only executable text: CONFIG_READ_ONLY_THP_FOR_FS)
        r.hugetlb.is_none()
            && !r.file
            && mode_allows
            && huge_start >= r.start
            && huge_start + PageSize::Huge2M.bytes() <= r.end()
    }

    fn thp_eligible(&self, r: &Region, huge_start: u64) -> bool {
        self.thp_alloc_enabled
            && self.thp_range_allowed(r, huge_start)
            && self
                .pt
                .present_base_pages(huge_start, PageSize::Huge2M.bytes())
                == 0
    }

    /// Handle a first-touch fault by a CPU on node `local`: choose the folio size and node
    /// and map it.
    pub fn fault(&mut self, task: TaskId, addr: u64, local: NodeId) -> Result<Fault, OsError> {
        let ri = self
            .region_index(addr)
            .filter(|&i| self.regions[i].task == task)
            .ok_or(OsError::Segfault { task: task.0, addr })?;
        if self.regions[ri].file && self.pt.get(addr).cached() {
            return Ok(self.map_cached(ri, addr, local));
        }
        let mut size = self.regions[ri].hugetlb.unwrap_or(PageSize::Base4K);
        let huge_start = PageSize::Huge2M.align_down(addr);
        let want_thp = size == PageSize::Base4K && self.thp_eligible(&self.regions[ri], huge_start);
        if want_thp {
            size = PageSize::Huge2M;
        }
        match self.alloc(ri, addr, size, local) {
            Ok(f) => {
                if want_thp {
                    self.vm.thp_fault_alloc += 1;
                }
                Ok(f)
            }
            Err(_) if want_thp => {
                // the kernel falls back to base pages when no huge page can be had
                self.vm.thp_fault_fallback += 1;
                self.alloc(ri, addr, PageSize::Base4K, local)
            }
            Err(e) => Err(e),
        }
    }

    /// The node a page-table page allocated by a fault of `task` on a CPU of `local` goes
    /// to (pt_pages.rs): the task policy's choice, as `pagetable_alloc` makes it, without
    /// the VMA's policy. Like any allocation under the task policy it advances the task's
    /// interleave cursor and remote-percentage counters.
    fn table_node(&mut self, task: TaskId, local: NodeId) -> NodeId {
        if matches!(
            self.tasks[task.index()].policy,
            MemPolicy::Default | MemPolicy::Local
        ) {
            return local;
        }
        let placement = self.task_placement(task, local);
        self.room_for(&placement, 1).unwrap_or(placement.intended)
    }

    /// Where `task`'s policy puts one base page allocated from a CPU of `local`, outside any
    /// VMA (a page-table page, the page cache): a placement of the task policy, which
    /// advances its interleave cursor and remote-percentage counters.
    pub(crate) fn task_placement(&mut self, task: TaskId, local: NodeId) -> Placement {
        let mut rand = draws(self.next_rand());
        let ctx = PlaceCtx {
            topo: &self.topo,
            zonelists: &self.zonelists,
            local,
            vma_offset: None,
            units: 1,
        };
        let t = &mut self.tasks[task.index()];
        place(&t.policy, &mut t.pstate, &ctx, &mut rand)
    }

    /// The first node of `placement`'s order with `units` free base pages.
    pub(crate) fn room_for(&self, placement: &Placement, units: u64) -> Option<NodeId> {
        placement
            .order
            .iter()
            .copied()
            .find(|n| self.free_pages[n.index()] >= units)
    }

    /// No node of `placement`'s order had room for `what`: MPOL_BIND's error names the
    /// nodes, the others the machine's whole memory.
    pub(crate) fn out_of_memory(
        &self,
        what: String,
        need_pages: u64,
        placement: &Placement,
    ) -> OsError {
        if placement.strict {
            OsError::BindOom {
                what,
                need_pages,
                nodes: numalab_core::NodeMask::from_nodes(placement.order.iter().copied())
                    .to_string(),
            }
        } else {
            OsError::Oom {
                what,
                need_pages,
                total_gib: self.topo.total_mem_bytes() as f64 / (1u64 << 30) as f64,
            }
        }
    }

    /// numastat's counters for `units` base pages allocated on `node` by a CPU of `local`.
    pub(crate) fn count_numa_alloc(
        &mut self,
        node: NodeId,
        placement: &Placement,
        local: NodeId,
        units: u64,
    ) {
        if node == placement.intended {
            self.vm.numa_hit += units;
            if placement.interleave {
                self.vm.numa_interleave += units;
            }
        } else {
            self.vm.numa_miss += units;
            self.vm.numa_foreign += units;
        }
        if node == local {
            self.vm.numa_local += units;
        } else {
            self.vm.numa_other += units;
        }
    }

    fn alloc(
        &mut self,
        ri: usize,
        addr: u64,
        size: PageSize,
        local: NodeId,
    ) -> Result<Fault, OsError> {
        let folio_start = size.align_down(addr);
        let units = size.base_pages();
        let mut rand = draws(self.next_rand());
        let policy_is_local = {
            let r = &self.regions[ri];
            let p = r
                .policy
                .as_ref()
                .unwrap_or(&self.tasks[r.task.index()].policy);
            matches!(p, MemPolicy::Default | MemPolicy::Local)
        };
        let region = &mut self.regions[ri];
        let task = region.task;
        let placement = {
            let vma_offset = region
                .policy
                .as_ref()
                .map(|_| (folio_start - region.start) >> size.shift());
            let ctx = PlaceCtx {
                topo: &self.topo,
                zonelists: &self.zonelists,
                local,
                vma_offset,
                units,
            };
            match &region.policy {
                Some(p) => {
                    let before = region.pstate.pct_shortfall_units;
                    let pl = place(p, &mut region.pstate, &ctx, &mut rand);
                    self.vm.percent_shortfall_pages += region.pstate.pct_shortfall_units - before;
                    pl
                }
                None => {
                    let t = &mut self.tasks[task.index()];
                    let before = t.pstate.pct_shortfall_units;
                    let pl = place(&t.policy, &mut t.pstate, &ctx, &mut rand);
                    self.vm.percent_shortfall_pages += t.pstate.pct_shortfall_units - before;
                    pl
                }
            }
        };
        let Some(node) = self.room_for(&placement, units) else {
            let what = format!("a {size} fault in '{}'", self.regions[ri].name);
            return Err(self.out_of_memory(what, units, &placement));
        };
        self.free_pages[node.index()] -= units;
        self.pt.map(folio_start, size, node);
        if self.pt_pages.node(folio_start, size).is_none() {
            let table_node = self.table_node(task, local);
            self.pt_pages.fault(folio_start, size, table_node);
        }
        match size {
            PageSize::Base4K => self.vm.pgfault_4k += 1,
            PageSize::Huge2M => self.vm.pgfault_2m += 1,
            PageSize::Giant1G => self.vm.pgfault_1g += 1,
        }
        self.count_numa_alloc(node, &placement, local, units);
        Ok(Fault {
            folio_start,
            size,
            node,
            local_rule: policy_is_local,
            hugetlb: self.regions[ri].hugetlb.is_some(),
            file: false,
        })
    }

    /// A first-touch fault by `thread` from `now_ns` to `done_ns` placed `f` by the local
    /// rule: the folio is fresh until the epoch ends, or its fault if that ends later
    /// (first_touch.rs).
    pub fn mark_fresh(&mut self, f: &Fault, thread: u32, now_ns: f64, done_ns: f64) {
        self.pt.set_fresh(f.folio_start, f.size, true);
        self.first_touch
            .placed(f.folio_start, f.size, thread, (now_ns, done_ns), f.hugetlb);
    }

    /// A thread on `to` touched the fresh folio at `start` earlier than its owner so far: the
    /// folio is placed there instead, where `to` has room (first_touch.rs). Not a migration:
    /// no copy, no migration counters.
    pub fn take_over_fresh(&mut self, start: u64, size: PageSize, to: NodeId) {
        let pte = self.pt.get(start);
        let units = size.base_pages();
        if pte.size() != size || pte.node() == to.index() || self.free_pages[to.index()] < units {
            return;
        }
        self.free_pages[to.index()] -= units;
        self.free_pages[pte.node()] += units;
        self.pt.set_node(start, size, to);
        self.vm.first_touch_race_pages += units;
    }

    /// The epoch ended at `end_ns`: the folios first touched whose fault has ended are no
    /// longer fresh (over the size they were placed with, so that pieces of a folio split
    /// since are cleared too).
    pub fn end_first_touch_epoch(&mut self, end_ns: f64) {
        for (start, size) in self.first_touch.end_epoch(end_ns) {
            self.pt.set_fresh(start, size, false);
        }
    }

    /// The folio at `start` is under a migration entry while its copy runs, from `from_ns`
    /// to `until_ns` (migration_entry.rs).
    pub fn mark_migrating(&mut self, start: u64, size: PageSize, from_ns: f64, until_ns: f64) {
        if until_ns <= from_ns {
            return;
        }
        self.pt.set_migrating(start, size, true);
        let w = migration_entry::CopyWindow {
            size,
            from_ns,
            until_ns,
        };
        self.migrating.insert(start, w);
    }

    /// The copies that ended by `now_ns` are mapped: their folios leave the slow path.
    pub fn end_migrations(&mut self, now_ns: f64) {
        for (start, size) in self.migrating.expire(now_ns) {
            self.pt.set_migrating(start, size, false);
        }
    }

    /// Move one folio to `to`. Fails (and changes nothing) when `to` lacks room.
    pub fn migrate_folio(&mut self, start: u64, pte: Pte, to: NodeId, report: &mut MigrateReport) {
        let size = pte.size();
        let units = size.base_pages();
        if pte.node() == to.index() {
            report.already_there += 1;
            return;
        }
        if self.free_pages[to.index()] < units {
            report.failed_nomem += 1;
            self.vm.pgmigrate_fail += units;
            if size != PageSize::Base4K {
                self.vm.thp_migration_fail += 1;
            }
            return;
        }
        let from = pte.node();
        self.free_pages[to.index()] -= units;
        self.free_pages[from] += units;
        self.pt.map(start, size, to);
        self.vm.pgmigrate_success += units;
        if size != PageSize::Base4K {
            self.vm.thp_migration_success += 1;
        }
        report.folios_moved += 1;
        report.base_pages_moved += units;
        report.copies.push((from, to.index(), size.bytes()));
        report.moved.push((start, size));
    }

    /// Migrate every present folio of `[start, start + len)` to `to` (a huge page moves whole).
    pub fn migrate_range(&mut self, start: u64, len: u64, to: NodeId) -> MigrateReport {
        let mut report = MigrateReport::default();
        let folios = self.pt.folios(start, len);
        let present: u64 = folios.iter().map(|(_, p)| p.size().base_pages()).sum();
        report.not_present = (len >> 12).saturating_sub(present);
        for (fs, pte) in folios {
            self.migrate_folio(fs, pte, to, &mut report);
        }
        report
    }

    /// Spread the present folios of a range round robin over `nodes` (page index modulo the
    /// mask, as a range interleave policy would have placed them).
    pub fn interleave_range(
        &mut self,
        start: u64,
        len: u64,
        nodes: &numalab_core::NodeMask,
    ) -> MigrateReport {
        let mut report = MigrateReport::default();
        let w = nodes.weight().max(1) as u64;
        for (fs, pte) in self.pt.folios(start, len) {
            let idx = (fs - start.min(fs)) >> pte.size().shift();
            let to = nodes
                .nth((idx % w) as usize)
                .unwrap_or(NodeId(pte.node() as u16));
            self.migrate_folio(fs, pte, to, &mut report);
        }
        report
    }

    /// Split the huge folio containing `addr` into base pages in place. Returns its start and
    /// size if there was one to split.
    pub fn split(&mut self, addr: u64) -> Option<(u64, PageSize)> {
        let pte = self.pt.try_get(addr);
        if !pte.present() || pte.size() == PageSize::Base4K {
            return None;
        }
        let start = pte.size().align_down(addr);
        self.pt.split(start, pte.size());
        self.vm.thp_split_page += 1;
        Some((start, pte.size()))
    }

    /// One khugepaged pass over up to `max_ranges` aligned 2 MiB ranges: collapse each range
    /// of THP-enabled mappings that holds base pages (max_ptes_none = 511, the kernel default)
    /// into a huge page on the node holding most of them. Returns (start, copies) per collapse.
    pub fn khugepaged_scan(&mut self, max_ranges: usize) -> Vec<(u64, Vec<NodeCopy>)> {
        let mut out = Vec::new();
        if !self.thp_promote_enabled || self.thp == ThpMode::Never || self.regions.is_empty() {
            return out;
        }
        let end = self.next_va;
        let mut scanned = 0;
        let mut a = self.khugepaged_cursor;
        let mut wrapped = false;
        while scanned < max_ranges {
            if a >= end {
                if wrapped {
                    break;
                }
                wrapped = true;
                a = VA_BASE;
            }
            let hs = PageSize::Huge2M.align_down(a);
            a = hs + PageSize::Huge2M.bytes();
            let Some(ri) = self.region_index(hs) else {
                continue;
            };
            scanned += 1;
            if !self.thp_range_allowed(&self.regions[ri], hs) {
                continue;
            }
            let first = self.pt.get(hs);
            if first.present() && first.size() != PageSize::Base4K {
                continue;
            }
            let mut per_node = vec![0u64; self.free_pages.len()];
            for off in (0..PageSize::Huge2M.bytes()).step_by(4096) {
                let e = self.pt.get(hs + off);
                if e.present() {
                    per_node[e.node()] += 1;
                }
            }
            let present: u64 = per_node.iter().sum();
            if present == 0 {
                continue;
            }
            let target = (0..per_node.len())
                .max_by_key(|&n| (per_node[n], std::cmp::Reverse(n)))
                .unwrap();
            let need = 512 - per_node[target];
            if self.free_pages[target] < need {
                continue;
            }
            let mut copies = Vec::new();
            for (n, &c) in per_node.iter().enumerate() {
                self.free_pages[n] += c;
                if c > 0 {
                    copies.push((n, target, c * 4096));
                }
            }
            self.free_pages[target] -= 512;
            self.pt.map(hs, PageSize::Huge2M, NodeId(target as u16));
            self.vm.thp_collapse_alloc += 1;
            out.push((hs, copies));
        }
        self.khugepaged_cursor = a;
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_core::{CpuId, NodeInfo, NodeMask};

    fn topo2(mem: u64) -> Topology {
        Topology {
            nodes: (0..2)
                .map(|i| NodeInfo {
                    id: NodeId(i),
                    cpus: vec![CpuId(i as u32)],
                    mem_bytes: mem,
                })
                .collect(),
            distances: vec![vec![10, 20], vec![20, 10]],
            smt: 1,
        }
    }

    #[test]
    fn hugetlb_heap_packs_allocations_into_shared_huge_pages() {
        let t = topo2(4 << 30);
        let mut os = Os::new(&t, ThpMode::Never, MemPolicy::Default, 1);
        os.set_hugetlb_heap(Some(PageSize::Giant1G));
        let (t0, t1) = (TaskId(0), TaskId(1));
        // malloc-like: one after the other on cache lines, in one 1 GiB-backed heap
        let a = os.mmap(t0, "a", 1000, None, None, None);
        let b = os.mmap(t0, "b", 3 << 20, None, None, None);
        assert!(
            a.is_multiple_of(1 << 30),
            "the heap starts on a 1 GiB boundary"
        );
        assert_eq!(b, a + 1024, "b follows a on the next cache line");
        assert_eq!(os.regions.len(), 1);
        assert_eq!(os.regions[0].hugetlb, Some(PageSize::Giant1G));
        assert_eq!(os.regions[0].len, 1 << 30);
        // growing past the first page extends the heap in place
        let c = os.mmap(t0, "c", 1 << 30, None, None, None);
        assert_eq!(c, b + (3 << 20));
        assert_eq!((os.regions.len(), os.regions[0].len), (1, 2 << 30));
        // an mbind range keeps its own mapping, and the heap starts a new segment after it
        let bound = MemPolicy::parse("bind:1", &NodeMask::from_nodes([NodeId(0), NodeId(1)]));
        let m = os.mmap(t0, "m", 4096, None, None, Some(bound.unwrap()));
        assert!(m >= os.regions[0].end());
        assert_eq!(os.regions[1].hugetlb, None);
        let d = os.mmap(t0, "d", 64, None, None, None);
        assert!(d > m && d.is_multiple_of(1 << 30), "a second heap segment");
        // another process has its own heap
        let e = os.mmap(t1, "e", 64, None, None, None);
        assert_eq!(os.region_index(e).map(|i| os.regions[i].task), Some(t1));
        // one fault maps the whole 1 GiB folio that a, b and the start of c share
        let f = os.fault(t0, b + 4096, NodeId(1)).unwrap();
        assert_eq!(
            (f.folio_start, f.size, f.node),
            (a, PageSize::Giant1G, NodeId(1))
        );
        assert!(os.pt.get(a).present() && os.pt.get(c).present());
        assert_eq!((os.vm.pgfault_1g, os.vm.pgfault_4k), (1, 0));
        // 4K means no hugetlbfs heap
        os.set_hugetlb_heap(Some(PageSize::Base4K));
        let g = os.mmap(t0, "g", 64, None, None, None);
        assert_eq!(os.regions[os.region_index(g).unwrap()].hugetlb, None);
    }

    #[test]
    fn thp_always_maps_huge_pages_and_counts_512_to_1() {
        let t = topo2(4 << 30);
        for (mode, size) in [
            (ThpMode::Never, PageSize::Base4K),
            (ThpMode::Always, PageSize::Huge2M),
        ] {
            let mut os = Os::new(&t, mode, MemPolicy::Default, 1);
            let a = os.mmap(TaskId(0), "r", 1 << 30, None, None, None);
            for off in (0..1u64 << 30).step_by(4096) {
                if !os.pt.get(a + off).present() {
                    os.fault(TaskId(0), a + off, NodeId(0)).unwrap();
                }
            }
            assert_eq!(os.pt.get(a).size(), size);
            let faults = os.vm.pgfault_4k + os.vm.pgfault_2m;
            assert_eq!(faults, (1u64 << 30) / size.bytes());
        }
    }

    #[test]
    fn full_node_falls_back_by_distance_and_bind_ooms() {
        let t = topo2(8 << 20);
        let mut os = Os::new(&t, ThpMode::Never, MemPolicy::Default, 1);
        let a = os.mmap(TaskId(0), "r", 12 << 20, None, None, None);
        for off in (0..12u64 << 20).step_by(4096) {
            os.fault(TaskId(0), a + off, NodeId(0)).unwrap();
        }
        assert_eq!(os.free_pages[0], 0);
        assert_eq!(os.free_pages[1], 1024);
        assert_eq!(os.vm.numa_miss, 1024);
        let b = os.mmap(
            TaskId(0),
            "b",
            8 << 20,
            None,
            None,
            Some(MemPolicy::Bind {
                nodes: NodeMask::single(NodeId(0)),
                numa_balancing: false,
            }),
        );
        assert!(matches!(
            os.fault(TaskId(0), b, NodeId(0)),
            Err(OsError::BindOom { .. })
        ));
        assert!(matches!(
            os.fault(TaskId(0), 0x10, NodeId(0)),
            Err(OsError::Segfault { .. })
        ));
    }

    #[test]
    fn migration_moves_whole_folios_and_respects_capacity() {
        let t = topo2(64 << 20);
        let mut os = Os::new(&t, ThpMode::Always, MemPolicy::Default, 1);
        let a = os.mmap(TaskId(0), "r", 8 << 20, None, None, None);
        os.fault(TaskId(0), a, NodeId(0)).unwrap();
        os.fault(TaskId(0), a + (2 << 20), NodeId(0)).unwrap();
        let r = os.migrate_range(a, 8 << 20, NodeId(1));
        assert_eq!(r.folios_moved, 2);
        assert_eq!(r.base_pages_moved, 1024);
        assert_eq!(r.not_present, 1024);
        assert_eq!(os.pt.get(a + 4096).node(), 1);
        assert_eq!(os.free_pages[0], (64 << 20) / 4096);
        assert_eq!(os.split(a + 4096), Some((a, PageSize::Huge2M)));
        assert_eq!(os.pt.get(a + 8192).size(), PageSize::Base4K);
        assert_eq!(os.pt.get(a + 8192).node(), 1);
    }

    #[test]
    fn khugepaged_collapses_on_the_majority_node() {
        let t = topo2(64 << 20);
        let mut os = Os::new(&t, ThpMode::Madvise, MemPolicy::Default, 1);
        let a = os.mmap(TaskId(0), "r", 2 << 20, None, Some(true), None);
        os.thp_alloc_enabled = false;
        for i in 0..10 {
            os.fault(TaskId(0), a + i * 4096, NodeId(if i < 7 { 1 } else { 0 }))
                .unwrap();
        }
        let done = os.khugepaged_scan(16);
        assert_eq!(done.len(), 1);
        assert_eq!(os.pt.get(a).size(), PageSize::Huge2M);
        assert_eq!(os.pt.get(a).node(), 1);
        assert_eq!(
            os.free_pages[0] + os.free_pages[1],
            2 * (64 << 20) / 4096 - 512
        );
    }
}
