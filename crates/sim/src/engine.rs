//! The epoch engine: per-thread clocks, the access path through TLB, caches and memory,
//! faults, barriers, the sampler, khugepaged and periodic policies.
//!
//! Threads run one after the other up to the end of an epoch; the traffic of the epoch then
//! sets the controller and link latencies of the next one (docs/model.md).

use crate::barrier::BarrierDepartures;
use crate::config::{Progress, SimConfig};
use crate::hw::cache::{CacheOutcome, SetAssocCache};
use crate::hw::compact_cache::CompactCache;
use crate::hw::host_isa::{Avx2, Avx512, Baseline, HostIsa};
use crate::hw::memory_directory::MemoryDirectory;
use crate::hw::overlap::Window;
use crate::hw::private_cache::{Build, On, PrivateCache, PrivateLayout};
use crate::hw::smt::Cores;
use crate::hw::store_buffer::StoreBuffer;
use crate::hw::tlb::{Tlb, TlbOutcome};
use crate::memsys::{EpochEnd, MemSys};
use crate::os::anon_vma_lock::AnonVmaLock;
use crate::os::first_touch::Touch;
use crate::os::mmap_lock::MmapLock;
use crate::os::tlb_shootdown::Shootdowns;
use crate::os::{MigrateReport, Os, OsError};
use crate::pinning::Pinning;
use crate::results::*;
use crate::sched::{Scheduler, Switch};
use numalab_core::view::{NextTouchMechanism, NodeTraffic, ThreadCounters};
use numalab_core::workload::AddressSpace;
use numalab_core::Policy;
use numalab_core::{
    AccessKind, AccessSample, Action, CpuId, DataSource, GatherTable, MapOptions, MemPolicy,
    MemoryView, NodeId, Op, PageInfo, PageSize, Placements, RegionInfo, TaskId, ThreadId,
    ThreadInfo, ThreadProgram, Workload,
};
use numalab_machine::{Machine, Routes};
use std::time::Instant;

#[derive(Debug, thiserror::Error)]
pub enum SimError {
    #[error("machine '{machine}': {why}")]
    Machine { machine: String, why: String },
    #[error("pinning: {0}")]
    Pinning(String),
    #[error("memory policy: {0}")]
    Policy(String),
    #[error(transparent)]
    Os(#[from] OsError),
    #[error("workload '{0}' has no threads")]
    NoThreads(String),
    #[error("{0}")]
    Config(String),
}

/// Where page-table entries live in the caches' line-number space: walk references compete
/// for the caches like data does, so each line of 8 leaf entries gets a line number of its
/// own, `base + (size index << size_shift) + (addr >> (page shift + 3))`, above every data
/// line. Chosen once the workload has mapped its memory (all mappings are made while it is
/// built), as low as it can be, so that the compact caches' 27-bit tags hold page-walk lines
/// too (hw/compact_cache.rs; a tag that does not fit takes a slow escape path). The line's
/// low `size_shift` bits are the leaf index's, and no cache has more set bits than that, so
/// every walk line falls in the same cache set, and is told apart from the same lines, as
/// with any other base: results do not depend on it.
#[derive(Copy, Clone, Debug)]
struct PtLines {
    base: u64,
    size_shift: u32,
}

impl PtLines {
    /// For data addresses below `va_end`, and caches of at most `2^max_set_bits` sets.
    fn new(va_end: u64, max_set_bits: u32) -> PtLines {
        let bits = |x: u64| u64::BITS - x.leading_zeros();
        // leaf indices are below 2^size_shift, so the three sizes take [base, base + 3 ·
        // 2^size_shift) and base (a power of two) is above every data line
        let size_shift = bits(va_end >> 15).max(max_set_bits);
        let base = 1u64 << bits(va_end >> 6).max(size_shift + 2);
        PtLines { base, size_shift }
    }

    #[inline(always)]
    fn line(self, addr: u64, size: PageSize) -> u64 {
        self.base + ((size.index() as u64) << self.size_shift) + (addr >> (size.shift() + 3))
    }
}

/// How many ops ahead of the one executing the engine prefetches a reference's private cache
/// set (host-side only: no effect on results).
const PREFETCH_AHEAD_OPS: usize = 8;
/// How many ops ahead a read-modify-write's private set (prefetched 6 ops earlier) is read to
/// find the dirty line it will evict, whose LLC set is then prefetched (host-side only).
const VICTIM_AHEAD_OPS: usize = 2;
/// How many lines ahead inside a Run op the engine prefetches the private and LLC sets (a
/// stream's lines miss both: their LLC sets were the largest host stall left).
const RUN_PREFETCH_LINES: u32 = 4;
/// Runs up to this many lines get those prefetches (CG's rows of a and colidx: 10-30 lines,
/// each after a row of gathers). Longer runs (STREAM's 64-line chunks) walk consecutive sets,
/// which the host's own prefetcher follows; there the prefetches only cost (5 % on STREAM).
const SHORT_RUN_LINES: u32 = 32;

/// Figures copied out of the machine description for the hot path.
struct Params {
    /// 1 / the thread's share of its core's concurrency, and its share of the reorder
    /// buffer: the whole core's when no SMT sibling runs (`Simulator::run_turn`).
    inv_conc: f64,
    rob_entries: f64,
    /// The thread's store-buffer entries (the core's, split like the reorder buffer).
    sb_entries: usize,
    core_inv_conc: f64,
    core_rob_entries: f64,
    core_sb_entries: usize,
    private_hit_ns: f64,
    llc_hit_ns: f64,
    tlb_l2_hit_ns: f64,
    walk_base_ns: f64,
    /// 1 / the core's page walkers (`TlbConfig::page_walkers`): the share of a walk an
    /// independent reference waits for, the walkers taking the misses in turn.
    inv_walkers: f64,
    /// A locked read-modify-write's own time, beyond its line's (`CoreParams::locked_op_cycles`).
    locked_op_ns: f64,
    inv_ghz: f64,
    fault_ns: [f64; 3],
    /// A read fault on a cached file page (os/page_cache.rs).
    fault_file_ns: f64,
    sample_ns: f64,
    kernel_copy_bytes_per_ns: f64,
    /// A huge folio migrated whole (`OsCosts::thp_migrate_mbps`); 0: at the base-page rates.
    thp_migrate_bytes_per_ns: f64,
    move_pages_base_ns: f64,
    move_pages_bytes_per_ns: f64,
    /// migrate_pages(2): the base cost of each address-space walk, and the copy rate.
    migrate_pages_base_ns: f64,
    migrate_pages_bytes_per_ns: f64,
    split_ns: f64,
    /// TLB shootdowns: their costs and when the kernel raises them (os/tlb_shootdown.rs).
    shootdowns: Shootdowns,
    signal_ns: f64,
    mprotect_ns: f64,
    /// A context switch's direct cost (sched.rs), ns.
    context_switch_ns: f64,
    pt_lines: PtLines,
}

impl Params {
    /// `os::folio_copy_ns` with this machine's huge-folio rate.
    fn folio_copy_ns(&self, size: PageSize, base_bytes_per_ns: f64) -> f64 {
        crate::os::folio_copy_ns(size, base_bytes_per_ns, self.thp_migrate_bytes_per_ns)
    }
}

/// The per-op constants of a data reference, worked out once per op rather than per
/// reference (the same f64 products, so the results do not change).
#[derive(Copy, Clone, Debug)]
struct RefKind {
    write: bool,
    /// A plain store: it retires into the store buffer (hw/store_buffer.rs) and the thread
    /// waits only for a free entry.
    posted: bool,
    /// The reference's share of the line-fill buffers per ns of its cost: 1 for an
    /// independent reference (its cost is already latency / concurrency), 1 / concurrency for
    /// a dependent read (its cost is the whole latency, in one buffer).
    fill_share: f64,
    /// Latency multiplier: 1 for a dependent read (a walk, a pointer chase), else
    /// 1 / concurrency (independent misses overlap).
    overlap: f64,
    /// 1 where the reference's time can overlap compute (an independent reference), 0 for
    /// a dependent one (docs/model.md, "Compute and memory overlap").
    hide: f64,
    /// A sibling read: it issued alongside the thread's latest dependent read, so only the
    /// time its data lasts beyond that read's is charged (`dependent_data_ns`).
    sibling: bool,
    /// The share of a page walk charged to the reference: 1 for a dependent one (its walk
    /// waits for the address), 1 / page walkers for an independent one (the core's walkers
    /// serve independent misses side by side: docs/model.md, "One memory reference").
    walk_share: f64,
    /// A locked read-modify-write: a fence before it, and its own time (`atomic`).
    atomic: bool,
    /// `private_hit_ns · overlap`.
    private_hit_ns: f64,
    /// `llc_hit_ns · overlap`.
    llc_hit_ns: f64,
}

impl RefKind {
    #[inline(always)]
    fn new(p: &Params, kind: AccessKind) -> RefKind {
        // an atomic's line is charged as a dependent read's: all of its latency, in one
        // fill buffer, under no compute
        let atomic = kind == AccessKind::Atomic;
        RefKind {
            posted: kind == AccessKind::Write,
            sibling: kind == AccessKind::SiblingRead,
            atomic,
            ..Self::with(p, kind.writes(), kind.dependent() || atomic)
        }
    }

    #[inline(always)]
    fn with(p: &Params, write: bool, dependent: bool) -> RefKind {
        let overlap = if dependent { 1.0 } else { p.inv_conc };
        RefKind {
            write,
            posted: false,
            fill_share: if dependent { p.inv_conc } else { 1.0 },
            overlap,
            hide: if dependent { 0.0 } else { 1.0 },
            sibling: false,
            walk_share: if dependent { 1.0 } else { p.inv_walkers },
            atomic: false,
            private_hit_ns: p.private_hit_ns * overlap,
            llc_hit_ns: p.llc_hit_ns * overlap,
        }
    }
}

/// The rest of an op that an epoch's end interrupted.
#[derive(Copy, Clone, Debug)]
enum Pending {
    /// `left` lines of a Run from `addr`, `stride` bytes apart.
    Run {
        addr: u64,
        left: u32,
        stride: u64,
        kind: AccessKind,
    },
    /// The last `left` elements of a Gather, from gather-table entry `next`.
    Gather {
        base: u64,
        next: u32,
        left: u32,
        kind: AccessKind,
    },
}

struct Thread {
    id: u32,
    task: TaskId,
    cpu: CpuId,
    node: usize,
    /// The slot of the core `cpu` belongs to (`Simulator::cores`).
    core: usize,
    clock: f64,
    program: Box<dyn ThreadProgram>,
    ops: Vec<Op>,
    pos: usize,
    more: bool,
    finished: bool,
    waiting: bool,
    /// A Run or Gather op interrupted at an epoch end, to go on with first.
    pending: Option<Pending>,
    /// Memory references and private-cache misses at the start of the last turn.
    turn_start: (u64, u64),
    /// Over a quarter of the last turn's references missed the private cache: read-modify-
    /// write Access ops ahead get their dirty victim's LLC set prefetched (host-side only).
    victim_hints: bool,
    /// The core's TLBs and private cache during the thread's turn; between turns the
    /// thread holds an unused state here and the live one is its core's (`Simulator::cores`,
    /// hw/smt.rs), which SMT siblings share.
    tlb: Tlb,
    l2: PrivateCache,
    /// Time of the independent references so far, ns: what compute may overlap.
    indep_ns: f64,
    /// The longest data time (after translation) of the dependent reads issued together
    /// (the latest dependent read and its siblings since), ns: what a sibling read
    /// overlaps. 0 after a compute op or a barrier, which siblings cannot issue across.
    dep_shadow_ns: f64,
    /// The core's instruction window (hw/overlap.rs).
    window: Window,
    /// Stores retired and not yet written (hw/store_buffer.rs).
    sb: StoreBuffer,
    /// When the data of every reference issued so far has arrived (a load's line, a store's
    /// line for ownership), ns: what a fence waits for besides the store buffer (`fence`).
    /// Raised where a reference misses the private cache (`hierarchy`), from `issue_ns`.
    data_done_ns: f64,
    /// When the reference in flight issued (after its translation), ns; −∞ for one charged
    /// all its data time (a page walk's, a dependent read, a sibling read) and for a locked
    /// read-modify-write, whose data the fence before it must not wait for.
    issue_ns: f64,
    /// The clock at the start of the current turn: overlap never takes the clock back
    /// past it.
    turn_clock: f64,
    /// Lines of huge pages this thread zeroed in the current epoch, and its DRAM reads at
    /// the epoch's start: the share of a backlog wait spent in the fault handler
    /// (`Simulator::wait_for_backlogs`).
    epoch_zero_lines: u64,
    epoch_dram_start: u64,
    /// The memory lines it put on the memory system in the current epoch, per memory node
    /// (`memsys::requester_lines`): its share of a backlog's wait (`wait_for_backlogs`).
    epoch_lines: Vec<u64>,
    /// The huge page its fault is zeroing, written over the fault's time (`zero_fill`), and
    /// whether it wrote some in the current epoch (a thread ahead in its fault waits for
    /// the backlog it joins: `wait_for_backlogs`).
    zeroing: Option<Zeroing>,
    zeroed_in_epoch: bool,
    /// The migration copies it runs (`copy_on_thread`), written over its time as it goes
    /// (`write_copies`); whether it wrote some in the current epoch; and the copies' lines
    /// of the epoch, all and those inside faults (its share of a backlog's wait that is
    /// migration time: `wait_for_backlogs`).
    copies: Vec<CopyJob>,
    copied_in_epoch: bool,
    epoch_copy_lines: u64,
    epoch_copy_fault_lines: u64,
    /// First-touch faults in the current epoch: its share of its process's mmap_lock
    /// backlog (`Simulator::wait_for_mmap_lock`).
    epoch_faults: u32,
    /// Its migrations' anon_vma lock holds in the current epoch, ns, and those made inside
    /// a fault: its share of its process's lock backlog (`Simulator::wait_for_anon_vma_lock`).
    epoch_rmap_lock_ns: f64,
    epoch_rmap_lock_fault_ns: f64,
    /// Interrupts taken while it has migrations under the anon_vma lock, ns: time it would
    /// have spent spinning for the lock anyway (`spin_lock` leaves interrupts on).
    rmap_ipi_credit_ns: f64,
    /// The flush interrupts of its calls still running, for the other CPUs of the task whose
    /// pages they move.
    raised: Vec<InterruptStream>,
    s: ThreadStats,
    /// The phase the thread is in: its id, start clock and the counters at its start.
    phase: Option<(u16, f64, Box<ThreadStats>)>,
    phase_names: &'static [&'static str],
    /// A phase op stopped the run so policies' `on_phase` can act first.
    hook_phase: Option<u16>,
    /// A `move_pages` op stopped the run (`Op::MovePages`: base, pages, node): the call runs
    /// before the thread goes on.
    move_pages: Option<(u64, u32, u16)>,
}

impl Thread {}

/// The rest of a thread's kernel work (its copies, the interrupts its calls raise) comes `ns`
/// later: the thread waited.
fn delay_work(th: &mut Thread, ns: f64) {
    for c in &mut th.copies {
        c.span.delay(ns);
    }
    for st in &mut th.raised {
        st.delay(ns);
    }
}

/// A thread that ended its program in an epoch and waits at the epoch's end for what it
/// issued before (a backlog, the mmap_lock) ends when the wait does.
fn finish_after_wait(th: &mut Thread) {
    if th.finished {
        th.s.time_ns = th.clock;
    }
}

/// Bytes that kernel work moves at an even rate over `[from_ns, until_ns)`; `written` of them
/// are in the epochs closed so far.
#[derive(Copy, Clone, Debug)]
struct Span {
    bytes: u64,
    from_ns: f64,
    until_ns: f64,
    written: u64,
}

impl Span {
    /// The bytes written by `t_ns` and not counted yet; counts them.
    fn take_until(&mut self, t_ns: f64) -> u64 {
        let frac = if self.until_ns > self.from_ns {
            ((t_ns - self.from_ns) / (self.until_ns - self.from_ns)).clamp(0.0, 1.0)
        } else if t_ns >= self.from_ns {
            1.0
        } else {
            0.0
        };
        let by_now = (self.bytes as f64 * frac).round() as u64;
        let new = by_now.saturating_sub(self.written);
        self.written += new;
        new
    }

    fn done(&self) -> bool {
        self.written == self.bytes
    }

    /// The rest waits `ns` (its copier waited for a backlog): the span resumes that much
    /// later, at the same rate.
    fn delay(&mut self, ns: f64) {
        self.from_ns += ns;
        self.until_ns += ns;
    }
}

/// The flush interrupts of one call that raises many shootdowns (a migration call, user-space
/// next-touch's move_pages): the other CPUs of its task take them at an even rate while the
/// call unmaps and copies its folios, one flush per folio or batch (docs/model.md, "TLB
/// shootdowns"). Handed out at each epoch's end (`Simulator::deliver_interrupts`); when the
/// raising thread waits (a backlog, the mmap_lock, the anon_vma lock), so do its interrupts.
#[derive(Clone, Debug)]
struct InterruptStream {
    /// The threads whose CPUs the shootdowns reach (`Simulator::shootdown_cpus`).
    cpus: Vec<(CpuId, usize)>,
    /// What each of them loses over the whole call, ns.
    ns: f64,
    from_ns: f64,
    until_ns: f64,
    /// Handed out up to here.
    delivered_to_ns: f64,
}

impl InterruptStream {
    /// The rest comes `ns` later (its call waited).
    fn delay(&mut self, ns: f64) {
        self.from_ns += ns;
        self.until_ns += ns;
        self.delivered_to_ns += ns;
    }

    /// The share of `ns` that falls by `t_ns` and was not handed out yet; marks it handed out.
    fn take_until(&mut self, t_ns: f64) -> f64 {
        let to = t_ns.min(self.until_ns);
        if to <= self.delivered_to_ns {
            return 0.0;
        }
        let part = self.ns * (to - self.delivered_to_ns) / (self.until_ns - self.from_ns);
        self.delivered_to_ns = to;
        part
    }
}

/// A huge page being zeroed by its thread's fault: written to `node` over the fault's time.
#[derive(Copy, Clone, Debug)]
struct Zeroing {
    node: usize,
    span: Span,
}

/// A folio's migration copy (docs/model.md, "Migration copies"): read from `from` and written
/// to `to` by a CPU of node `cpu_node`, over the time its copier spends on it. `in_fault`:
/// the copier is a thread in a fault (hint fault, next-touch), whose waits for the copy's
/// backlogs are fault time as well as migration time.
#[derive(Copy, Clone, Debug)]
struct CopyJob {
    cpu_node: usize,
    from: usize,
    to: usize,
    in_fault: bool,
    span: Span,
    /// The hold of its process's anon_vma lock (os/anon_vma_lock.rs) per byte copied: the
    /// call's shootdowns, raised inside the lock on kernels before 3.8; 0 otherwise.
    rmap_lock_ns_per_byte: f64,
}

impl CopyJob {
    /// Put on the memory system the bytes copied by `t_ns` and not yet written, counted as
    /// their copier's lines in `lines` (`memsys::requester_lines`); returns those lines.
    fn write_until(&mut self, t_ns: f64, mem: &mut MemSys, lines: &mut [u64]) -> u64 {
        let bytes = self.span.take_until(t_ns);
        if bytes == 0 {
            return 0;
        }
        mem.copy(self.cpu_node, self.from, self.to, bytes);
        let k = bytes.div_ceil(64);
        let n = lines.len() / 3;
        lines[self.from] += k;
        lines[n + self.to] += k;
        k
    }
}

/// The daemons and kernel threads whose work runs on some CPU (`Simulator::run_daemon`).
#[derive(Copy, Clone)]
enum Daemon {
    /// A policy's user-level daemon (Carrefour's, the NUMA manager's) calling move_pages.
    Policy = 0,
    Khugepaged = 1,
}

/// Shared state every access touches.
struct Shared {
    /// The machine's nodes (`n` of the per-node arrays).
    nodes: usize,
    os: Os,
    llc: Vec<SetAssocCache>,
    mem: MemSys,
    /// The sockets' memory directory, on machines that keep one (hw/memory_directory.rs).
    directory: Option<MemoryDirectory>,
    /// Each process's mmap_lock line, which its page faults pass (os/mmap_lock.rs).
    mmap_lock: MmapLock,
    /// Each process's anon_vma lock, which its migrations' rmap walks take before Linux 3.8
    /// (os/anon_vma_lock.rs).
    anon_vma_lock: AnonVmaLock,
    p: Params,
    sample_period: u64,
    sample_countdown: u64,
    samples: Vec<AccessSample>,
    tick_samples: Vec<AccessSample>,
    max_samples: usize,
    samples_taken: u64,
    /// TLB shootdowns raised in a fault handler for the task's other threads, handed to
    /// `interrupt_over` when the faulting thread's run returns.
    deferred_shootdowns: Vec<DeferredShootdowns>,
    /// Per task, its threads that have not finished: the CPUs a shootdown reaches.
    live_threads: Vec<u32>,
    /// Per task, the CPUs its live threads are placed on, when threads take turns on CPUs
    /// (refreshed every epoch); None: one thread per CPU, `live_threads` counts them.
    task_cpus: Option<Vec<u32>>,
    /// Fault time given back to a thread that lost a first-touch race it had faulted for
    /// (os/first_touch.rs): (thread, ns), applied when the running thread's turn returns.
    fault_refunds: Vec<(u32, f64)>,
}

/// Shootdowns a fault handler raised, for its task's other threads.
struct DeferredShootdowns {
    task: TaskId,
    /// The faulting thread (its own CPU is not reached).
    raiser: u32,
    /// The range to drop from their TLBs (len 0: nothing more to drop).
    range: (u64, u64),
    /// What each other live thread loses, ns, spread over `window` (at once when it is
    /// empty: one flush).
    ns: f64,
    window: (f64, f64),
}

pub struct Simulator {
    machine: Machine,
    threads: Vec<Thread>,
    /// Per thread, its program's gather table (beside `threads` so that the gather loop
    /// can read it while the thread's state is borrowed mutably).
    gather_tables: Vec<Option<GatherTable>>,
    sh: Shared,
    /// The physical cores the threads run on, with their private state (hw/smt.rs).
    cores: Cores,
    /// Live threads on each core slot at the start of the epoch: SMT siblings share the
    /// core's concurrency and reorder buffer.
    core_threads: Vec<u32>,
    /// When each waiter leaves a released barrier (barrier.rs).
    barrier: BarrierDepartures,
    cfg: SimConfig,
    workload_name: String,
    /// Threads whose CPUs the workload chose itself (a mix's `cpus=`, Metis' affinity).
    self_placed: usize,
    phases: Vec<PhaseStats>,
    now: f64,
    policy_ns: f64,
    /// When the policy daemon's and khugepaged's current work ends (`run_daemon`), ns.
    daemon_free_ns: [f64; 2],
    /// The copies the daemons run (a policy daemon's move_pages, khugepaged's collapses),
    /// over their work's time (`copy_on_daemon`); nobody waits for their backlogs but the
    /// threads whose traffic shares them.
    daemon_copies: Vec<CopyJob>,
    /// The lines the daemons' copies put on the memory system in the current epoch, per CPU
    /// node (`memsys::requester_lines`): their share of a backlog's wait.
    daemon_lines: Vec<Vec<u64>>,
    /// Flush interrupts of the policy daemon's calls still running (`interrupt_over`; a
    /// thread's are its own, `Thread::raised`). Unlike its copies, they keep their pace when
    /// the daemon's copies wait for a backlog (a call's copies may wait on several nodes).
    daemon_raised: Vec<InterruptStream>,
    /// Policy hooks that acted, with their decisions (`SimResult::policy_log`).
    policy_log: Vec<PolicyLogEntry>,
    /// Policies are configured: phase ops stop a thread's run for `on_phase`.
    hooks: bool,
    /// Run queues of the CPUs that several threads share (sched.rs); None when none does.
    sched: Option<Scheduler>,
    /// Threads moved to another node since the last `on_thread_moved` dispatch.
    moved: Vec<(ThreadId, NodeId, NodeId)>,
    /// The engine build that runs (`run_thread`): the best the host has up to
    /// `SimConfig::max_host_isa`.
    host_isa: HostIsa,
}

struct BuildSpace<'a> {
    os: &'a mut Os,
}

impl AddressSpace for BuildSpace<'_> {
    fn mmap(&mut self, task: TaskId, name: &str, bytes: u64, opts: MapOptions) -> u64 {
        self.os.mmap(
            task,
            name,
            bytes,
            opts.hugetlb,
            opts.thp_advice,
            opts.policy,
        )
    }

    fn mmap_file(&mut self, task: TaskId, name: &str, bytes: u64) -> u64 {
        self.os.mmap_file(task, name, bytes)
    }

    fn refused(&self) -> bool {
        self.os.map_refused.is_some()
    }

    fn host_memory_refused(&mut self, what: &str, bytes: u64) {
        self.os.refuse_host_memory(what, bytes);
    }
}

impl Simulator {
    pub fn new(
        machine: &Machine,
        workload: &dyn Workload,
        cfg: SimConfig,
    ) -> Result<Simulator, SimError> {
        let merr = |why: String| SimError::Machine {
            machine: machine.id.clone(),
            why,
        };
        machine
            .topology
            .validate()
            .map_err(|e| merr(e.to_string()))?;
        let routes = Routes::compute(machine.topology.num_nodes(), &machine.links)
            .map_err(|e| merr(e.to_string()))?;
        let host_isa = cfg.max_host_isa.capped();
        // A zero, negative or NaN epoch would never end (the loop advances time by it).
        if let Some(why) = crate::config::start_skew_us_problem(cfg.start_skew_ns / 1000.0) {
            return Err(SimError::Config(format!("start skew {why}")));
        }
        if let Some(why) = crate::config::epoch_us_problem(cfg.epoch_ns / 1000.0) {
            return Err(SimError::Config(format!("epoch length {why}")));
        }
        cfg.task_policy
            .validate(&machine.topology.online())
            .map_err(|e| SimError::Policy(e.to_string()))?;
        let nthreads = workload.threads();
        if nthreads == 0 {
            return Err(SimError::NoThreads(workload.name()));
        }
        let cpus = cfg
            .pinning
            .resolve(&machine.topology, nthreads)
            .map_err(SimError::Pinning)?;
        let mut os = Os::new(
            &machine.topology,
            cfg.thp,
            cfg.task_policy.clone(),
            cfg.seed,
        );
        if let Some(nb) = &cfg.numa_balancing {
            nb.validate().map_err(SimError::Policy)?;
            os.enable_numa_balancing(nb.clone(), &machine.os);
        }
        os.nt.lazy_max_block_bytes = cfg.lazy_max_block_bytes.max(4096);
        os.set_hugetlb_heap(cfg.hugetlb);
        let specs = workload.build(&mut BuildSpace { os: &mut os });
        if let Some(e) = os.map_refused.take() {
            return Err(e.into());
        }
        let (cpus, allowed) =
            apply_placements(machine, &cfg.pinning, cpus, &workload.placements(), &mut os)?;
        let c = &machine.core;
        let gather_tables = specs.iter().map(|s| s.program.gather_table()).collect();
        let mut cores = Cores::new(machine, host_isa);
        if let Some(nb) = os.numab.as_mut() {
            for (t, a) in allowed.into_iter().enumerate() {
                nb.set_cpus_allowed(t as u32, a);
            }
        }
        let threads: Vec<Thread> = specs
            .into_iter()
            .zip(cpus)
            .enumerate()
            .map(|(i, (spec, cpu))| {
                let node = machine
                    .topology
                    .node_of_cpu(cpu)
                    .expect("resolved CPUs exist")
                    .index();
                let phase_names = spec.program.phase_names();

                Thread {
                    id: i as u32,
                    task: spec.task,
                    cpu,
                    node,
                    core: cores.slot_of(cpu),
                    clock: start_delay_ns(cfg.seed, i, cfg.start_skew_ns),
                    program: spec.program,
                    ops: Vec::with_capacity(4096),
                    pos: 0,
                    more: true,
                    finished: false,
                    waiting: false,
                    pending: None,
                    turn_start: (0, 0),
                    victim_hints: false,
                    tlb: cores.fresh_tlb(),
                    l2: cores.fresh_l2(),
                    indep_ns: 0.0,
                    dep_shadow_ns: 0.0,
                    window: Window::default(),
                    sb: StoreBuffer::default(),
                    data_done_ns: 0.0,
                    issue_ns: 0.0,
                    turn_clock: 0.0,
                    epoch_zero_lines: 0,
                    zeroing: None,
                    copies: Vec::new(),
                    copied_in_epoch: false,
                    epoch_copy_lines: 0,
                    epoch_copy_fault_lines: 0,
                    zeroed_in_epoch: false,
                    epoch_faults: 0,
                    epoch_rmap_lock_ns: 0.0,
                    epoch_rmap_lock_fault_ns: 0.0,
                    rmap_ipi_credit_ns: 0.0,
                    raised: Vec::new(),
                    epoch_dram_start: 0,
                    epoch_lines: crate::memsys::requester_lines(machine.topology.num_nodes()),
                    s: ThreadStats {
                        thread: i as u32,
                        task: spec.task.0,
                        cpu: cpu.0,
                        node: node as u16,
                        dram_by_node: vec![0; machine.topology.num_nodes()],
                        ..Default::default()
                    },
                    phase: None,
                    phase_names,
                    hook_phase: None,
                    move_pages: None,
                }
            })
            .collect();
        // each task's mapped files were read into the page cache before the run, on the node
        // its first thread starts on (before any policy places threads), or the first node
        // with CPUs for a task without threads (os/page_cache.rs)
        os.set_fault_around(machine.os.linux_at_least(3, 15));
        let readers: std::collections::BTreeMap<TaskId, NodeId> = os
            .regions
            .iter()
            .filter(|r| r.file)
            .map(|r| {
                let node = threads.iter().find(|t| t.task == r.task).map_or_else(
                    || machine.topology.cpu_nodes().first().unwrap_or(NodeId(0)),
                    |t| NodeId(t.node as u16),
                );
                (r.task, node)
            })
            .collect();
        for (task, reader) in readers {
            os.populate_page_cache(task, reader)?;
        }
        // a node without an LLC gets a one-line cache
        let llc_shape =
            |h: &numalab_machine::NodeHw| h.llc.as_ref().map_or((64, 1), |g| (g.bytes, g.ways));
        let llc = machine
            .nodes
            .iter()
            .map(|h| {
                let (bytes, ways) = llc_shape(h);
                SetAssocCache::new(bytes, ways)
            })
            .collect();
        let os_c = &machine.os;
        let set_bits = |(bytes, ways)| SetAssocCache::geometry(bytes, ways).0.trailing_zeros();
        let max_set_bits = machine
            .nodes
            .iter()
            .map(|h| set_bits(llc_shape(h)))
            .chain([set_bits((c.private_cache.bytes, c.private_cache.ways))])
            .max()
            .unwrap_or(0);
        let p = Params {
            inv_conc: 1.0 / c.concurrency_lines.max(1.0),
            rob_entries: c.rob_entries as f64,
            sb_entries: c.store_buffer_entries as usize,
            core_inv_conc: 1.0 / c.concurrency_lines.max(1.0),
            core_rob_entries: c.rob_entries as f64,
            core_sb_entries: c.store_buffer_entries as usize,
            private_hit_ns: c.private_hit_ns,
            llc_hit_ns: c.llc_hit_ns,
            tlb_l2_hit_ns: c.tlb.l2_hit_ns,
            walk_base_ns: c.tlb.walk_base_ns,
            inv_walkers: 1.0 / c.tlb.page_walkers.max(1) as f64,
            locked_op_ns: c.locked_op_cycles as f64 / c.ghz,
            inv_ghz: 1.0 / c.ghz,
            fault_ns: [os_c.fault_4k_ns, os_c.fault_2m_ns, os_c.fault_1g_ns],
            fault_file_ns: os_c.fault_file_4k_ns,
            sample_ns: os_c.sample_ns,
            kernel_copy_bytes_per_ns: os_c.kernel_copy_mbps * 1e-3,
            thp_migrate_bytes_per_ns: os_c.thp_migrate_mbps * 1e-3,
            move_pages_base_ns: os_c.move_pages_base_ns,
            move_pages_bytes_per_ns: os_c.move_pages_mbps * 1e-3,
            migrate_pages_base_ns: os_c.migrate_pages_base_ns,
            migrate_pages_bytes_per_ns: os_c.migrate_pages_mbps * 1e-3,
            split_ns: os_c.split_ns,
            shootdowns: Shootdowns::new(os_c),
            signal_ns: os_c.signal_ns,
            mprotect_ns: os_c.mprotect_ns,
            context_switch_ns: os_c.context_switch_ns,
            pt_lines: PtLines::new(os.va_end(), max_set_bits),
        };
        let tasks = threads
            .iter()
            .map(|t| t.task.index() + 1)
            .max()
            .unwrap_or(0);
        let mmap_lock = {
            let mut nodes_of = vec![Vec::new(); tasks];
            for t in &threads {
                nodes_of[t.task.index()].push(t.node);
            }
            MmapLock::for_machine(&nodes_of, machine, &routes)
        };
        let barrier =
            BarrierDepartures::new(machine.topology.num_nodes(), tasks, cfg.seed, |from, to| {
                crate::hw::line_transfer_ns(machine, &routes, from, to)
            });
        let va_end = os.va_end();
        let sh = Shared {
            nodes: machine.topology.num_nodes(),
            mmap_lock,
            anon_vma_lock: AnonVmaLock::new(!os_c.linux_at_least(3, 8), tasks),
            mem: MemSys::new(machine, &routes),
            directory: machine
                .memory_directory
                .then(|| MemoryDirectory::new(va_end)),
            os,
            llc,
            p,
            sample_period: cfg.sample_period,
            sample_countdown: cfg.sample_period.max(1),
            samples: Vec::new(),
            tick_samples: Vec::new(),
            max_samples: cfg.max_samples,
            samples_taken: 0,
            deferred_shootdowns: Vec::new(),
            live_threads: {
                let mut n = vec![0; tasks];
                for t in &threads {
                    n[t.task.index()] += 1;
                }
                n
            },
            task_cpus: None,
            fault_refunds: Vec::new(),
        };
        Ok(Simulator {
            machine: machine.clone(),
            threads,
            gather_tables,
            sh,
            cores,
            core_threads: Vec::new(),
            barrier,
            workload_name: workload.name(),
            self_placed: workload.placements().thread_cpus.len(),
            host_isa,
            cfg,
            phases: Vec::new(),
            now: 0.0,
            policy_ns: 0.0,
            daemon_free_ns: [0.0; 2],
            daemon_copies: Vec::new(),
            daemon_lines: vec![
                crate::memsys::requester_lines(machine.topology.num_nodes());
                machine.topology.num_nodes()
            ],
            daemon_raised: Vec::new(),
            policy_log: Vec::new(),
            hooks: false,
            sched: None,
            moved: Vec::new(),
        })
    }

    /// Memory references simulated so far: each is one load or one store of a thread.
    fn memory_references(&self) -> u64 {
        self.threads.iter().map(|t| t.s.loads + t.s.stores).sum()
    }

    /// Run to completion.
    pub fn run(mut self) -> Result<SimResult, SimError> {
        let started = Instant::now();
        let epoch = self.cfg.epoch_ns;
        let mut next_khugepaged = self.cfg.khugepaged_interval_ns;
        let mut policies = std::mem::take(&mut self.cfg.policies);
        self.hooks = !policies.is_empty();
        if self.hooks {
            self.initial_placement(&mut policies)?;
        }
        // threads placed on one CPU take turns on it (sched.rs)
        self.reschedule();
        let mut next_tick: Vec<f64> = policies.iter().map(|p| p.period_ns() as f64).collect();
        let mut timeline = Vec::new();
        let mut tl_acc = vec![0.0; self.machine.topology.num_nodes()];
        let mut tl_next = self.cfg.timeline_interval_ns;
        let mut util_sum = vec![0.0; tl_acc.len()];
        let mut epochs = 0u64;
        let mut clocks_at_start: Vec<f64> = Vec::with_capacity(self.threads.len());
        loop {
            let end = self.now + epoch;
            clocks_at_start.clear();
            clocks_at_start.extend(self.threads.iter().map(|t| t.clock));
            self.count_core_threads();
            if self.sched.is_some() {
                self.count_task_cpus();
            }
            // Run every runnable thread to the epoch end; barriers released mid-epoch let
            // their threads continue within the same epoch.
            loop {
                let mut progressed = false;
                if self.sched.is_some() {
                    self.idle_handovers();
                }
                for t in 0..self.threads.len() {
                    let th = &self.threads[t];
                    if th.finished || th.waiting || th.clock >= end {
                        continue;
                    }
                    // a time-shared thread runs while it holds its CPU, to its slice's end
                    let stop = match &mut self.sched {
                        None => end,
                        Some(s) if !s.holds_cpu(t) => continue,
                        Some(s) => {
                            let threads = &self.threads;
                            let runnable = runnable_in(threads);
                            s.resume(t, threads[t].clock, runnable);
                            s.turn_end(t, end)
                        }
                    };
                    if self.threads[t].clock < stop {
                        self.run_turn_hooks(&mut policies, t, stop)?;
                    }
                    if self.sched.is_some() {
                        self.after_turn(t);
                    }
                    progressed = true;
                }
                let released = self.release_barriers();
                if !progressed && !released {
                    break;
                }
            }
            if !self.sh.os.first_touch.is_empty() {
                self.sh.os.end_first_touch_epoch(end);
            }
            if !self.sh.os.migrating.is_empty() {
                self.sh.os.end_migrations(end);
            }
            for th in &mut self.threads {
                if th.zeroing.is_some() {
                    th.zeroed_in_epoch |= write_zeroing(th, &mut self.sh, end);
                }
                if !th.copies.is_empty() {
                    th.copied_in_epoch |= write_copies(th, &mut self.sh, end);
                }
            }
            self.write_daemon_copies(end);
            self.deliver_interrupts(end);
            let served = self.sh.mem.end_epoch(epoch);
            self.wait_for_backlogs(end, &served, &clocks_at_start);
            self.wait_for_mmap_lock(end, epoch);
            if self.sh.anon_vma_lock.exclusive() {
                self.wait_for_anon_vma_lock(end, epoch);
            }
            self.close_finished_phases();
            let bytes = served.ctrl_bytes;
            for (n, b) in bytes.iter().enumerate() {
                tl_acc[n] += b;
                util_sum[n] += self.sh.mem.ctrl_utilisation()[n];
            }
            self.now = end;
            epochs += 1;
            if self.cfg.timeline_interval_ns > 0.0 && self.now >= tl_next {
                timeline.push(TimelinePoint {
                    t_ns: self.now,
                    ctrl_bytes: std::mem::replace(&mut tl_acc, vec![0.0; bytes.len()]),
                });
                tl_next += self.cfg.timeline_interval_ns;
            }
            if self.now >= next_khugepaged {
                next_khugepaged += self.cfg.khugepaged_interval_ns;
                self.khugepaged();
            }
            if self.sh.os.numab.is_some() {
                self.numa_balancing_tick();
            }
            let mut ticked = false;
            for (i, pol) in policies.iter_mut().enumerate() {
                if self.now >= next_tick[i] {
                    next_tick[i] += pol.period_ns() as f64;
                    let actions = pol.tick(&self);
                    self.apply_hook(pol.as_mut(), "tick", actions, None);
                    ticked = true;
                }
            }
            if !self.moved.is_empty() {
                self.dispatch_moves(&mut policies);
            }
            if ticked || policies.is_empty() {
                // samples are handed to policies once, then dropped from the tick buffer
                self.sh.tick_samples.clear();
            }
            let done = self.threads.iter().filter(|t| t.finished).count();
            if epochs & 63 == 0 {
                let memory_references = self.memory_references();
                if let Some(cb) = self.cfg.progress.as_mut() {
                    cb(Progress {
                        sim_time_ns: self.now,
                        memory_references,
                        threads_done: done,
                        threads: self.threads.len(),
                    });
                }
            }
            if done == self.threads.len() {
                break;
            }
        }
        if tl_acc.iter().any(|b| *b > 0.0) {
            timeline.push(TimelinePoint {
                t_ns: self.now,
                ctrl_bytes: tl_acc,
            });
        }
        // the last faults' zeroing, in the controllers' byte counts
        for th in &mut self.threads {
            write_zeroing(th, &mut self.sh, f64::INFINITY);
            write_copies(th, &mut self.sh, f64::INFINITY);
        }
        self.write_daemon_copies(f64::INFINITY);
        let avg_util: Vec<f64> = util_sum.iter().map(|u| u / epochs.max(1) as f64).collect();
        Ok(self.finish(started, timeline, avg_util))
    }

    /// Threads that ran in the epoch ending at `end` cannot have the data they asked for
    /// before the backlogs their traffic joined are served (docs/model.md, "Memory system"):
    /// each one's clock moves to `end +` its share of those waits by its own lines
    /// (`MemSys::requester_waits`), the wait counted as memory time. Threads that did not
    /// run (held back already, or waiting all along) keep theirs.
    fn wait_for_backlogs(&mut self, end: f64, served: &EpochEnd, clocks_at_start: &[f64]) {
        // no backlog left (most epochs): nothing to share, and nothing allocated
        let stall_ns = served.any_wait().then(|| {
            // the daemons' copies are requesters too, one per node their CPUs are on
            let requesters: Vec<(usize, &[u64])> = self
                .threads
                .iter()
                .map(|th| (th.node, th.epoch_lines.as_slice()))
                .chain(self.daemon_lines.iter().map(Vec::as_slice).enumerate())
                .collect();
            self.sh.mem.requester_waits(served, &requesters)
        });
        if let Some(w) = &stall_ns {
            // a daemon's copy that outran a controller or link resumes when its lines are
            // served (its daemon is on a CPU of its own: nobody else waits for it)
            let n = self.sh.nodes;
            let daemon_waits = &w[self.threads.len()..self.threads.len() + n];
            for c in &mut self.daemon_copies {
                c.span.delay(daemon_waits[c.cpu_node]);
            }
        }
        for lines in &mut self.daemon_lines {
            lines.iter_mut().for_each(|x| *x = 0);
        }
        let sched = &self.sched;
        for (i, (th, &before)) in self.threads.iter_mut().zip(clocks_at_start).enumerate() {
            let stall = stall_ns.as_ref().map_or(0.0, |w| w[i]);
            // a thread switched out for another on its CPU waits its stall, not the epoch
            let off_cpu = sched.as_ref().is_some_and(|s| !s.holds_cpu(i));
            let until = if off_cpu {
                th.clock + stall
            } else {
                end + stall
            };
            // a thread in a fault that zeroed, or in a copy that copied, in this epoch issued
            // traffic in it
            let zeroed = std::mem::take(&mut th.zeroed_in_epoch);
            let copied = std::mem::take(&mut th.copied_in_epoch);
            let issued = th.clock != before || zeroed || copied;
            // a copier ahead of the epoch in its copy: the rest of the copy waits for what
            // the epoch could not serve, and so does the copier
            let wait = if th.clock < until {
                until - th.clock
            } else if copied {
                stall
            } else {
                0.0
            };
            if stall > 0.0 && issued && wait > 0.0 {
                // the shares of the thread's lines that zeroed its faults' huge pages and
                // that copied folios are fault and migration time; the rest waits for its
                // own data
                let dram = (th.s.dram_local + th.s.dram_remote - th.epoch_dram_start) as f64;
                let (zero, copy) = (th.epoch_zero_lines as f64, th.epoch_copy_lines as f64);
                let copy_fault = th.epoch_copy_fault_lines as f64;
                let all = (zero + copy + dram).max(1.0);
                th.s.fault_ns += wait * ((zero + copy_fault) / all);
                th.s.migration_ns += wait * (copy / all);
                th.s.memory_ns += wait * (1.0 - (zero + copy) / all);
                th.clock = if th.clock < until {
                    until
                } else {
                    th.clock + wait
                };
                delay_work(th, wait);
                finish_after_wait(th);
            }
            th.epoch_zero_lines = 0;
            th.epoch_copy_lines = 0;
            th.epoch_copy_fault_lines = 0;
            th.epoch_dram_start = th.s.dram_local + th.s.dram_remote;
            th.epoch_lines.iter_mut().for_each(|x| *x = 0);
        }
    }

    /// Threads whose faults queued on their process's mmap_lock line wait for its backlog at
    /// the epoch's end, in the fault handler, each in proportion to its faults in the epoch
    /// (os/mmap_lock.rs).
    fn wait_for_mmap_lock(&mut self, end: f64, epoch_ns: f64) {
        let backlog = self.sh.mmap_lock.end_epoch(epoch_ns);
        if backlog.iter().all(|&q| q == 0.0) {
            for th in &mut self.threads {
                th.epoch_faults = 0;
            }
            return;
        }
        let mut most = vec![0u32; backlog.len()];
        for th in &self.threads {
            let m = &mut most[th.task.index()];
            *m = (*m).max(th.epoch_faults);
        }
        for th in &mut self.threads {
            let (task, faults) = (th.task.index(), std::mem::take(&mut th.epoch_faults));
            if faults == 0 || backlog[task] == 0.0 {
                continue;
            }
            let until = end + backlog[task] * faults as f64 / most[task] as f64;
            if th.clock < until {
                // the fault's copies (next-touch, hinting faults) come after the lock
                delay_work(th, until - th.clock);
                th.s.fault_ns += until - th.clock;
                th.clock = until;
                finish_after_wait(th);
            }
        }
    }

    /// Threads whose migrations held their process's anon_vma lock beyond what the epoch
    /// served wait for its backlog at the epoch's end, each in proportion to its holds: its
    /// clock and the rest of its work (copies, interrupts it raises) move later by its share
    /// less the interrupts it took during its calls (which moved them already), as migration
    /// time (fault time for holds inside a fault) (os/anon_vma_lock.rs).
    fn wait_for_anon_vma_lock(&mut self, end: f64, epoch_ns: f64) {
        let backlog = self.sh.anon_vma_lock.end_epoch(epoch_ns);
        let mut most = vec![0.0f64; backlog.len()];
        for th in &self.threads {
            let m = &mut most[th.task.index()];
            *m = m.max(th.epoch_rmap_lock_ns);
        }
        let sched = &self.sched;
        for (i, th) in self.threads.iter_mut().enumerate() {
            let (task, held) = (th.task.index(), std::mem::take(&mut th.epoch_rmap_lock_ns));
            let in_fault = std::mem::take(&mut th.epoch_rmap_lock_fault_ns);
            if !th.copies.iter().any(|c| c.rmap_lock_ns_per_byte > 0.0) {
                // interrupts taken outside its calls do not shorten a later wait
                th.rmap_ipi_credit_ns = 0.0;
            }
            if held == 0.0 || backlog[task] == 0.0 {
                continue;
            }
            // it waits its share; the interrupts it took during its calls (already on its
            // clock and its copies) fall in that spinning time
            let share = backlog[task] * held / most[task];
            let absorbed = share.min(th.rmap_ipi_credit_ns);
            th.rmap_ipi_credit_ns -= absorbed;
            let share = share - absorbed;
            delay_work(th, share);
            if share <= 0.0 {
                continue;
            }
            // a thread switched out for another on its CPU waits its share, not the epoch
            let off_cpu = sched.as_ref().is_some_and(|s| !s.holds_cpu(i));
            let until = if off_cpu {
                th.clock + share
            } else {
                end + share
            };
            let wait = if th.clock < until {
                until - th.clock
            } else {
                share
            };
            th.clock += wait;
            // a hold inside a fault (user-space next-touch's move_pages) waits as fault time
            let fault = wait * (in_fault / held);
            th.s.fault_ns += fault;
            th.s.migration_ns += wait - fault;
            finish_after_wait(th);
        }
    }

    /// The last phase of every thread that ended in the epoch, closed once the epoch's waits
    /// (backlogs, locks) have moved its end.
    fn close_finished_phases(&mut self) {
        for th in &mut self.threads {
            if th.finished && th.phase.is_some() {
                close_phase(th, &mut self.phases);
            }
        }
    }

    /// Release every task whose live threads all wait at a barrier.
    fn release_barriers(&mut self) -> bool {
        let mut released = false;
        let ntasks = self
            .threads
            .iter()
            .map(|t| t.task.index() + 1)
            .max()
            .unwrap_or(0);
        for task in 0..ntasks {
            let live = self
                .threads
                .iter()
                .filter(|t| t.task.index() == task && !t.finished);
            let (mut any, mut all_wait, mut latest) = (false, true, 0.0f64);
            for t in live {
                any = true;
                all_wait &= t.waiting;
                latest = latest.max(t.clock);
            }
            if any && all_wait {
                // the last to arrive (the earliest of equals) releases the others, who leave
                // one flag-line transfer apart (barrier.rs)
                let release_at = latest + self.cfg.barrier_ns;
                let mine: Vec<usize> = (0..self.threads.len())
                    .filter(|&i| self.threads[i].task.index() == task && !self.threads[i].finished)
                    .collect();
                let releaser = *mine
                    .iter()
                    .find(|&&i| self.threads[i].clock == latest)
                    .expect("the latest arriver is a live thread");
                let waiters: Vec<usize> = mine.iter().copied().filter(|&i| i != releaser).collect();
                let nodes: Vec<usize> = waiters.iter().map(|&i| self.threads[i].node).collect();
                let delays = self
                    .barrier
                    .delays(task, self.threads[releaser].node, &nodes);
                let departures =
                    std::iter::once((releaser, 0.0)).chain(waiters.into_iter().zip(delays));
                for (i, delay) in departures {
                    let t = &mut self.threads[i];
                    let leave = release_at + delay;
                    t.s.barrier_wait_ns += leave - t.clock;
                    t.clock = leave;
                    t.waiting = false;
                }
                released = true;
            }
        }
        released
    }

    /// Give back the fault time of first-touch races lost (os/first_touch.rs). A thread's
    /// clock never goes back before the touch it faulted at, so at most into the epoch it
    /// has run in; it then runs on in this epoch.
    fn apply_fault_refunds(&mut self) {
        for (t, ns) in std::mem::take(&mut self.sh.fault_refunds) {
            // a thread that has finished keeps its end (its phases and time are reported)
            if let Some(th) = self.threads.get_mut(t as usize).filter(|th| !th.finished) {
                th.clock -= ns;
                th.s.fault_ns -= ns;
                // the fault's reference issued that much earlier too
                th.data_done_ns -= ns;
            }
        }
    }

    /// Live threads per core slot. A live thread holds its hardware thread even while it
    /// waits at a barrier (OpenMP's waits spin), so it counts until it finishes.
    fn count_core_threads(&mut self) {
        self.core_threads.clear();
        self.core_threads.resize(self.cores.len(), 0);
        for (t, th) in self.threads.iter().enumerate() {
            // of threads taking turns on a CPU, only the one holding it uses the core
            if !th.finished && self.sched.as_ref().is_none_or(|s| s.holds_cpu(t)) {
                self.core_threads[th.core] += 1;
            }
        }
    }

    /// Thread `t`'s turn up to `stop`, then the hooks of every phase op that stopped it
    /// (the thread goes on at once after them, so hooks that do nothing leave the order of
    /// execution unchanged), and the shootdowns and refunds its faults left for others.
    fn run_turn_hooks(
        &mut self,
        policies: &mut [Box<dyn Policy>],
        t: usize,
        stop: f64,
    ) -> Result<(), SimError> {
        self.run_turn(t, stop)?;
        loop {
            if !self.sh.deferred_shootdowns.is_empty() {
                self.flush_deferred_shootdowns();
            }
            if !self.sh.fault_refunds.is_empty() {
                self.apply_fault_refunds();
            }
            if let Some((base, pages, node)) = self.threads[t].move_pages.take() {
                let nodes = self.machine.topology.num_nodes();
                if node as usize >= nodes {
                    // move_pages(2) refuses it (ENODEV); a simulated program has no errno
                    return Err(SimError::Config(format!(
                        "thread {t} calls move_pages to node {node}, which {} does not have (nodes 0-{})",
                        self.machine.id,
                        nodes - 1
                    )));
                }
                let task = self.threads[t].task;
                let call = Action::Migrate {
                    task,
                    start: base,
                    len_bytes: pages as u64 * 4096,
                    to: NodeId(node),
                };
                self.apply_as(vec![call], Some(t));
            } else {
                let Some(id) = self.threads[t].hook_phase.take() else {
                    return Ok(());
                };
                self.phase_hooks(policies, t, id);
            }
            let th = &self.threads[t];
            if th.finished || th.waiting || th.clock >= stop {
                return Ok(());
            }
            self.run_turn(t, stop)?;
        }
    }

    /// After time-shared thread `t`'s turn: its CPU goes to the next thread of its queue
    /// when its slice is over or it stopped (sched.rs).
    fn after_turn(&mut self, t: usize) {
        let (Some(sched), threads) = (&mut self.sched, &self.threads) else {
            return;
        };
        let runnable = runnable_in(threads);
        if let Some(sw) = sched.after_turn(t, threads[t].clock, runnable) {
            self.context_switch(sw);
        }
    }

    /// CPUs whose holder waits or ended go to a runnable thread of their queue.
    fn idle_handovers(&mut self) {
        let (Some(sched), threads) = (&mut self.sched, &self.threads) else {
            return;
        };
        let runnable = runnable_in(threads);
        for sw in sched.idle_handovers(runnable) {
            self.context_switch(sw);
        }
    }

    /// Thread `sw.to` takes the CPU at `sw.at` (or when it became runnable, if later) after
    /// a context switch's direct cost; the time it waited is its run delay. A switch to
    /// another process flushes the core's TLB (no PCID tagging).
    fn context_switch(&mut self, sw: Switch) {
        let cost = self.sh.p.context_switch_ns;
        let other_mm = self.threads[sw.from].task != self.threads[sw.to].task;
        let th = &mut self.threads[sw.to];
        let start = th.clock.max(sw.at) + cost;
        th.s.run_delay_ns += start - th.clock;
        th.s.context_switches += 1;
        th.clock = start;
        if other_mm {
            self.cores.state(th.core).tlb.flush();
        }
        let (Some(sched), threads) = (&mut self.sched, &self.threads) else {
            return;
        };
        let runnable = runnable_in(threads);
        sched.started(sw.to, start, runnable);
    }

    /// One turn of thread `t`: it borrows its core's TLBs and private cache, runs with its
    /// share of the core's miss concurrency and reorder buffer (an even split among the
    /// core's live threads, hw/smt.rs), and hands the state back.
    fn run_turn(&mut self, t: usize, end: f64) -> Result<(), SimError> {
        let slot = self.threads[t].core;
        let sharers = f64::from(self.core_threads.get(slot).copied().unwrap_or(1).max(1));
        self.sh.p.inv_conc = self.sh.p.core_inv_conc * sharers;
        self.sh.p.rob_entries = self.sh.p.core_rob_entries / sharers;
        self.sh.p.sb_entries = (self.sh.p.core_sb_entries as f64 / sharers).max(1.0) as usize;
        self.swap_core_state(t);
        let r = self.run_thread(t, end);
        self.swap_core_state(t);
        r
    }

    fn swap_core_state(&mut self, t: usize) {
        let th = &mut self.threads[t];
        let (tlb, l2) = self.cores.state_and_l2(th.core);
        std::mem::swap(&mut th.tlb, tlb);
        std::mem::swap(&mut th.l2, l2);
    }

    /// Runs thread `t` up to `end`, in the best engine build the host has (`host_isa`) for
    /// the layout of the thread's private cache.
    fn run_thread(&mut self, t: usize, end: f64) -> Result<(), SimError> {
        let compact = self.threads[t].l2.is_compact();
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `host_isa` never names a build whose features the CPU lacks
        // (`HostIsa::capped`), and the compact layout only exists where it is AVX2 or better.
        unsafe {
            match (self.host_isa, compact) {
                (HostIsa::Avx512, true) => return self.run_thread_avx512(t, end),
                (HostIsa::Avx2, true) => return self.run_thread_avx2(t, end),
                (HostIsa::Avx512 | HostIsa::Avx2, false) => {
                    return self.run_thread_avx2_wide(t, end)
                }
                (HostIsa::Baseline, _) => {}
            }
        }
        debug_assert!(!compact, "the baseline build has no compact layout");
        self.run_thread_body(On::<Baseline, SetAssocCache>::new(Baseline), t, end)
    }

    /// The same code compiled for AVX2 + BMI: the set searches' byte broadcasts become one
    /// instruction and the SIMD code three-operand (about 5 % fewer host cycles). Only
    /// integer SIMD and the same scalar f64 operations (Rust never contracts to FMA), so
    /// results are bit-identical to the baseline build. For private caches wider than the
    /// compact layout holds.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
    unsafe fn run_thread_avx2_wide(&mut self, t: usize, end: f64) -> Result<(), SimError> {
        // SAFETY: the caller checked the features (see `run_thread`)
        let isa = unsafe { Avx2::new_unchecked() };
        self.run_thread_body(On::<Avx2, SetAssocCache>::new(isa), t, end)
    }

    /// The AVX2 build with compact private caches (hw/compact_cache.rs: a set in one host
    /// line, compared in two 256-bit halves).
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,bmi1,bmi2,lzcnt,popcnt")]
    unsafe fn run_thread_avx2(&mut self, t: usize, end: f64) -> Result<(), SimError> {
        // SAFETY: as above
        let isa = unsafe { Avx2::new_unchecked() };
        self.run_thread_body(On::<Avx2, CompactCache>::new(isa), t, end)
    }

    /// The AVX2 build plus AVX-512F, with compact private caches compared in one 512-bit
    /// register.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx2,bmi1,bmi2,lzcnt,popcnt")]
    unsafe fn run_thread_avx512(&mut self, t: usize, end: f64) -> Result<(), SimError> {
        // SAFETY: as above
        let isa = unsafe { Avx512::new_unchecked() };
        self.run_thread_body(On::<Avx512, CompactCache>::new(isa), t, end)
    }

    #[inline(always)]
    fn run_thread_body<B: Build>(&mut self, b: B, t: usize, end: f64) -> Result<(), SimError> {
        let th = &mut self.threads[t];
        let table = self.gather_tables[t].as_ref();
        let sh = &mut self.sh;
        // Victim hints pay where most references miss the private cache (GUPS, CG's matrix
        // fill); where they hit, the search only costs (NAS IS, 9 % misses: +10 % without
        // this gate).
        let (refs, misses) = (th.s.loads + th.s.stores, th.s.private_misses);
        th.victim_hints = (misses - th.turn_start.1) * 4 > refs - th.turn_start.0;
        th.turn_start = (refs, misses);
        th.turn_clock = th.clock;
        // an op interrupted at the last epoch's end goes on first
        if th.clock < end {
            let done = match th.pending.take() {
                None => true,
                Some(Pending::Run {
                    addr,
                    left,
                    stride,
                    kind,
                }) => run_lines(b, th, sh, addr, left, stride, kind, end)?,
                Some(Pending::Gather {
                    base,
                    next,
                    left,
                    kind,
                }) => gather(b, th, sh, table, base, next, left, kind, end)?,
            };
            if !done {
                return Ok(());
            }
        }
        while th.clock < end {
            if th.pos == th.ops.len() {
                if !th.more {
                    // the program ends with a system call, which waits for its stores
                    drain_stores(th);
                    th.finished = true;
                    sh.live_threads[th.task.index()] -= 1;
                    // its last phase closes after the epoch's waits, which it may still
                    // have to wait (`close_finished_phases`)
                    th.s.time_ns = th.clock;
                    return Ok(());
                }
                th.ops.clear();
                th.pos = 0;
                th.more = th.program.fill(&mut th.ops);
                continue;
            }
            let op = th.ops[th.pos];
            // The host-cache lines of the private cache set that a later reference will search
            // are requested now, so that the misses of several references overlap instead of
            // each one waiting on host memory in turn.
            match th.ops.get(th.pos + PREFETCH_AHEAD_OPS) {
                Some(Op::Access { addr, .. }) => {
                    B::Cache::of_ref(&th.l2).prefetch(addr >> 6);
                    // and its LLC set: single Access ops are mostly scattered writes (CG's
                    // matrix fill) that miss the private cache, and their LLC sets' host
                    // lines were the largest stall left on that path (class B scale 0.3:
                    // 5.81 -> 5.50 user s, paired runs, docs/PERFORMANCE.md)
                    sh.llc[th.node].prefetch(addr >> 6);
                }
                Some(Op::Run { base, lines, .. }) if *lines <= SHORT_RUN_LINES => {
                    // a short run's first line (the later ones are prefetched inside the run)
                    B::Cache::of_ref(&th.l2).prefetch(base >> 6);
                    sh.llc[th.node].prefetch(base >> 6);
                }
                _ => {}
            }
            // Nearer, for a read-modify-write whose private set has arrived by now: the dirty
            // line it will evict is written into the LLC, so that LLC set is prefetched too
            // (GUPS: 5.2 -> 3.2 user s). Plain writes are left out: MLC's injectors write
            // sequential lines, whose LLC sets the host prefetches itself, and paid for the
            // search (up to +7 %).
            if th.victim_hints {
                if let Some(Op::Access { addr, kind }) = th.ops.get(th.pos + VICTIM_AHEAD_OPS) {
                    if matches!(kind, AccessKind::ReadModifyWrite | AccessKind::Atomic) {
                        if let Some(v) =
                            B::Cache::of_ref(&th.l2).dirty_victim_of(b.isa(), addr >> 6)
                        {
                            sh.llc[th.node].prefetch(v);
                        }
                    }
                }
            }
            th.pos += 1;
            match op {
                Op::Access { addr, kind } => access(b, th, sh, addr, kind)?,
                Op::Run {
                    base,
                    lines,
                    stride_bytes,
                    kind,
                } => {
                    if !run_lines(b, th, sh, base, lines, stride_bytes as u64, kind, end)? {
                        return Ok(());
                    }
                }
                Op::Gather {
                    base,
                    first,
                    count,
                    kind,
                } => {
                    if !gather(b, th, sh, table, base, first, count as u32, kind, end)? {
                        return Ok(());
                    }
                }
                Op::Compute {
                    cycles,
                    instructions,
                } => {
                    let ns = cycles as f64 * sh.p.inv_ghz;
                    let refs = th.s.loads + th.s.stores;
                    let hidden =
                        th.window
                            .compute(ns, instructions, sh.p.rob_entries, th.indep_ns, refs);
                    // what was hidden is taken back, but never past the turn's start
                    let hidden = hidden.min(th.clock + ns - th.turn_clock);
                    th.clock += ns - hidden;
                    th.s.compute_ns += ns;
                    th.s.overlap_ns += hidden;
                    th.s.instructions += instructions as u64;
                    th.dep_shadow_ns = 0.0;
                }
                Op::Barrier => {
                    // a barrier's locked instructions wait for the thread's stores and loads
                    fence(th);
                    th.window.serialise(th.indep_ns, th.s.loads + th.s.stores);
                    th.dep_shadow_ns = 0.0;
                    th.waiting = true;
                    return Ok(());
                }
                Op::Phase { id } => {
                    close_phase(th, &mut self.phases);
                    th.phase = Some((id, th.clock, Box::new(th.s.clone())));
                    if self.hooks {
                        // stop here: the policies' on_phase actions apply before the
                        // thread's next access (run() calls them and resumes the thread)
                        th.hook_phase = Some(id);
                        return Ok(());
                    }
                }
                Op::MovePages { base, pages, node } => {
                    // a system call: it waits for the thread's stores; the engine runs it
                    // (run_turn_hooks) before the thread goes on
                    drain_stores(th);
                    th.window.serialise(th.indep_ns, th.s.loads + th.s.stores);
                    th.dep_shadow_ns = 0.0;
                    th.move_pages = Some((base, pages, node));
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// Automatic NUMA balancing's scheduler tick (os/numa_balancing.rs): scanning time goes to
    /// the scanning thread, protected ranges are flushed, task moves and swaps are applied.
    fn numa_balancing_tick(&mut self) {
        let ticks: Vec<crate::os::numa_balancing::TaskTick> = self
            .threads
            .iter()
            .map(|t| crate::os::numa_balancing::TaskTick {
                thread: t.id,
                mm: t.task,
                cpu: t.cpu,
                // a thread's clock may run ahead of the tick: count CPU time up to now only
                runtime_ns: t.clock.min(self.now) - t.s.barrier_wait_ns - t.s.run_delay_ns,
                live: !t.finished,
            })
            .collect();
        let out = self.sh.os.numa_balancing_tick(self.now, &ticks);
        for (t, ns) in out.scan_ns {
            let th = &mut self.threads[t as usize];
            th.clock += ns;
            th.s.numa_scan_ns += ns;
        }
        // the scan's flushes are per-operation costs of balancing: scaled with `time_scale`
        // like the others (`scale_costs`)
        let scale = self
            .sh
            .os
            .numab
            .as_ref()
            .map_or(1.0, |nb| nb.params.cost_scale());
        for (t, task, start, len) in out.flush {
            // task_numa_work runs in thread t's context: it raises the flush
            let ns = self.raise_shootdowns(task, Some(t as usize), (start, len), 1, scale);
            let th = &mut self.threads[t as usize];
            th.clock += ns;
            th.s.numa_scan_ns += ns;
        }
        let moves = out.moves.into_iter().map(|(t, cpu)| Action::MoveThread {
            thread: ThreadId(t),
            cpu,
        });
        self.apply(moves.collect());
    }

    fn khugepaged(&mut self) {
        let collapsed = self
            .sh
            .os
            .khugepaged_scan(self.cfg.khugepaged_ranges_per_scan);
        for (start, copies) in collapsed {
            // khugepaged copies the range's pages into the new huge page, the range under
            // migration entries meanwhile, on some CPU (`run_daemon`)
            let bytes: u64 = copies.iter().map(|c| c.2).sum();
            let ns = bytes as f64 / self.sh.p.kernel_copy_bytes_per_ns;
            // the old PMD is cleared and flushed first (`pmdp_collapse_flush`): one shootdown
            let owner = self
                .sh
                .os
                .regions
                .iter()
                .find(|r| r.start <= start && start < r.end());
            let flush = match owner.map(|r| r.task) {
                Some(task) => self.raise_shootdowns(task, None, (start, 0), 1, 1.0),
                None => 0.0,
            };
            let from_ns = self.run_daemon(Daemon::Khugepaged, flush + ns) + flush;
            self.sh
                .os
                .mark_migrating(start, PageSize::Huge2M, from_ns, from_ns + ns);
            self.copy_on_daemon(&copies, from_ns, from_ns + ns);
            for core in self.cores.states() {
                core.tlb.invalidate_range(start, PageSize::Huge2M.bytes());
            }
        }
    }

    fn task_of_region(
        &self,
        task: TaskId,
        start: u64,
        len: u64,
    ) -> impl Iterator<Item = usize> + '_ {
        self.sh
            .os
            .regions
            .iter()
            .enumerate()
            .filter(move |(_, r)| r.task == task && r.start < start + len && start < r.end())
            .map(|(i, _)| i)
    }

    /// Carry out policy actions. Copies load the memory system; migration cost goes to the
    /// policy's daemon (`charge`), TLB shootdowns stall the task's threads.
    fn apply(&mut self, actions: Vec<Action>) {
        self.apply_as(actions, None)
    }

    /// Apply one policy hook's actions (`apply_as`) and log, when it asked for or decided
    /// anything, what the actions did beside the policy's own account of why.
    fn apply_hook(
        &mut self,
        pol: &mut dyn Policy,
        hook: &str,
        actions: Vec<Action>,
        caller: Option<usize>,
    ) {
        let count = |f: fn(&Action) -> bool| actions.iter().filter(|a| f(a)).count() as u64;
        let threads_moved = count(|a| matches!(a, Action::MoveThread { .. }));
        let ranges_marked =
            count(|a| matches!(a, Action::MarkNextTouch { .. } | Action::LazyMigrate { .. }));
        let policies_set = count(|a| {
            matches!(
                a,
                Action::SetRangePolicy { .. }
                    | Action::SetTaskPolicy { .. }
                    | Action::SetThpAdvice { .. }
                    | Action::SetThpAllocation { .. }
            )
        });
        let n = actions.len() as u64;
        let vm = &self.sh.os.vm;
        let before = (vm.pgmigrate_success, vm.pgmigrate_fail, vm.thp_split_page);
        self.apply_as(actions, caller);
        let decisions = pol.take_decisions();
        if n == 0 && decisions.is_empty() {
            return;
        }
        let vm = &self.sh.os.vm;
        self.policy_log.push(PolicyLogEntry {
            t_ms: self.now / 1e6,
            policy: pol.name().to_string(),
            hook: hook.to_string(),
            actions: n,
            pages_migrated: vm.pgmigrate_success - before.0,
            pages_failed: vm.pgmigrate_fail - before.1,
            huge_splits: vm.thp_split_page - before.2,
            threads_moved,
            ranges_marked,
            policies_set,
            decisions,
        });
    }

    /// `apply`, with the direct cost of marking calls (madvise, mprotect) charged to thread
    /// `caller` when a hook runs in its context (`on_phase`), else to the policy.
    fn apply_as(&mut self, actions: Vec<Action>, caller: Option<usize>) {
        for a in actions {
            match a {
                Action::Migrate {
                    task,
                    start,
                    len_bytes,
                    to,
                } => {
                    let r = self.sh.os.migrate_range(start, len_bytes, to);
                    self.after_migration(task, r, caller);
                }
                Action::MovePages { task, pages } => {
                    let mut r = MigrateReport::default();
                    for (addr, to) in pages {
                        for (fs, pte) in self.sh.os.pt.folios(addr & !0xfff, 4096) {
                            self.sh.os.migrate_folio(fs, pte, to, &mut r);
                        }
                    }
                    self.after_migration(task, r, caller);
                }
                Action::Interleave {
                    task,
                    start,
                    len_bytes,
                    nodes,
                } => {
                    let r = self.sh.os.interleave_range(start, len_bytes, &nodes);
                    self.after_migration(task, r, caller);
                }
                Action::SplitHuge { task, addr } => {
                    if let Some((s, size)) = self.sh.os.split(addr) {
                        let flush = self.raise_shootdowns(task, caller, (s, size.bytes()), 1, 1.0);
                        self.charge(caller, self.sh.p.split_ns + flush);
                    }
                }
                Action::SetThpAdvice {
                    task,
                    start,
                    len_bytes,
                    allow,
                } => {
                    let idx: Vec<usize> = self.task_of_region(task, start, len_bytes).collect();
                    for i in idx {
                        self.sh.os.regions[i].thp_advice = Some(allow);
                    }
                }
                Action::SetThpAllocation { allocate, promote } => {
                    self.sh.os.thp_alloc_enabled = allocate;
                    self.sh.os.thp_promote_enabled = promote;
                }
                Action::SetRangePolicy {
                    task,
                    start,
                    len_bytes,
                    policy,
                } => {
                    let idx: Vec<usize> = self.task_of_region(task, start, len_bytes).collect();
                    for i in idx {
                        self.sh.os.regions[i].policy = Some(policy.clone());
                    }
                }
                Action::SetTaskPolicy { task, policy } => {
                    self.sh.os.set_task_policy(task, policy);
                }
                Action::LazyMigrate {
                    task,
                    start,
                    len_bytes,
                    to,
                } => {
                    // unmap (os/next_touch.rs): one protection change and its shootdown
                    self.sh.os.lazy_migrate(task, start, len_bytes, to);
                    let flush = self.raise_shootdowns(task, caller, (start, len_bytes), 1, 1.0);
                    self.charge(caller, self.sh.p.mprotect_ns + flush);
                }
                Action::MarkNextTouch {
                    task,
                    start,
                    len_bytes,
                    mechanism,
                } => {
                    // madvise or mprotect(PROT_NONE): one call and one shootdown
                    match mechanism {
                        NextTouchMechanism::Kernel => {
                            self.sh.os.mark_next_touch_kernel(task, start, len_bytes);
                        }
                        NextTouchMechanism::User { unit_bytes } => {
                            self.sh
                                .os
                                .mark_next_touch_user(task, start, len_bytes, unit_bytes);
                        }
                    }
                    let flush = self.raise_shootdowns(task, caller, (start, len_bytes), 1, 1.0);
                    self.charge(caller, self.sh.p.mprotect_ns + flush);
                }
                Action::MigrateProcess { task, from, to } => {
                    // migrate_pages(2): each step (source node) walks the whole address
                    // space, the call's base cost (GF09: "walks the whole address space")
                    let (r, steps) = self.sh.os.migrate_process(task, &from, &to);
                    if steps > 0 {
                        let base = steps as f64 * self.sh.p.migrate_pages_base_ns;
                        let rate = self.sh.p.migrate_pages_bytes_per_ns;
                        self.migration_call(task, r, caller, base, rate);
                    }
                }
                Action::MoveThread { thread, cpu } => {
                    if let Some(node) = self.machine.topology.node_of_cpu(cpu) {
                        if let Some(th) = self.threads.get_mut(thread.index()) {
                            if th.node != node.index() {
                                // on_thread_moved fires for a change of node
                                let from = NodeId(th.node as u16);
                                self.moved.push((thread, from, node));
                            }
                            // a migrated thread finds what its new core caches, with no
                            // translation of its own in the TLB (the switch of address space)
                            th.cpu = cpu;
                            th.node = node.index();
                            th.core = self.cores.slot_of(cpu);
                            self.cores.state(th.core).tlb.flush();
                            // the run queues follow the threads' CPUs (sched.rs)
                            let t = thread.index();
                            let shared = self
                                .threads
                                .iter()
                                .enumerate()
                                .any(|(i, o)| i != t && !o.finished && o.cpu == cpu);
                            if shared || self.sched.is_some() {
                                self.reschedule();
                            }
                        }
                    }
                }
            }
        }
    }

    /// A move_pages call made for a policy moved `r`'s folios: its copies load the memory
    /// system; its time (`move_pages_base_ns` + each folio's copy at `move_pages_mbps`, a huge
    /// one at `thp_migrate_mbps` where the machine has it) goes to its caller
    /// (`charge`); each folio is under a migration entry while its copy runs, in the call's
    /// order from the call's start (`Os::mark_migrating`); the task's TLBs are shot down.
    fn after_migration(&mut self, task: TaskId, r: MigrateReport, caller: Option<usize>) {
        if r.folios_moved > 0 {
            let (base, rate) = (
                self.sh.p.move_pages_base_ns,
                self.sh.p.move_pages_bytes_per_ns,
            );
            self.migration_call(task, r, caller, base, rate);
        }
    }

    /// One migration call that moved `r`'s folios: `base_ns` of work before the copies, then
    /// each folio's copy at `rate` (bytes per ns; a huge folio at `thp_migrate_mbps` where the
    /// machine has it), all to `caller` (`charge`). The copies load the memory system as the
    /// call runs them, each folio is under a migration entry while its copy runs
    /// (`Os::mark_migrating`), and the task's TLBs are shot down when anything moved.
    fn migration_call(
        &mut self,
        task: TaskId,
        r: MigrateReport,
        caller: Option<usize>,
        base_ns: f64,
        rate: f64,
    ) {
        let p = &self.sh.p;
        let copy_ns: f64 = r.moved.iter().map(|&(_, s)| p.folio_copy_ns(s, rate)).sum();
        // the task's PTEs of a policy's folios are accessible: each folio (or batch) flushes
        let flushes = p
            .shootdowns
            .migration_flushes(r.moved.iter().map(|&(_, s)| (s, true)));
        let cpus = self.shootdown_cpus(task, caller);
        let flush_ns = flushes as f64 * p.shootdowns.initiator_ns(cpus.len());
        self.sh.os.vm.count_remote_flushes(flushes, cpus.len());
        let start = self.charge(caller, base_ns + flush_ns + copy_ns);
        if r.folios_moved == 0 {
            return;
        }
        let window = (start + base_ns, start + base_ns + flush_ns + copy_ns);
        match caller.and_then(|t| self.threads.get_mut(t)) {
            Some(th) => {
                // on kernels before 3.8 the shootdowns are raised inside the anon_vma lock
                // (of the caller's process: a call on another's pages holds none, left out)
                let hold = if self.sh.anon_vma_lock.exclusive() && th.task == task {
                    flush_ns
                } else {
                    0.0
                };
                copy_on_thread(th, &r.copies, window.0, window.1, false, hold);
            }
            None => self.copy_on_daemon(&r.copies, window.0, window.1),
        }
        // each folio: unmap and flush, then its copy (before 6.3's batches, folio by folio)
        let flush_each = flush_ns / r.moved.len().max(1) as f64;
        let mut at = window.0;
        for &(s, size) in &r.moved {
            let until = at + flush_each + self.sh.p.folio_copy_ns(size, rate);
            self.sh.os.mark_migrating(s, size, at, until);
            at = until;
            for th in self.threads.iter().filter(|t| t.task == task) {
                self.cores.state(th.core).tlb.invalidate(s, size);
            }
        }
        let ipi_ns = flushes as f64 * self.sh.p.shootdowns.ipi_ns;
        self.interrupt_over(caller, cpus, ipi_ns, window);
    }

    /// A daemon copies `copies` (from, to, bytes) over `[from_ns, until_ns)` of its work: as
    /// `copy_on_thread`, run by a CPU of the destination node (where the kernel allocates the
    /// new folio; which CPU a daemon runs on is not modelled).
    fn copy_on_daemon(&mut self, copies: &[(usize, usize, u64)], from_ns: f64, until_ns: f64) {
        let jobs = copy_jobs(copies, None, false, from_ns, until_ns, 0.0);
        self.daemon_copies.extend(jobs);
    }

    /// Put on the memory system the daemons' copies run by `t_ns`.
    fn write_daemon_copies(&mut self, t_ns: f64) {
        if self.daemon_copies.is_empty() {
            return;
        }
        for c in &mut self.daemon_copies {
            c.write_until(t_ns, &mut self.sh.mem, &mut self.daemon_lines[c.cpu_node]);
        }
        self.daemon_copies.retain(|c| !c.span.done());
    }

    /// Time of a call made for a policy: to thread `caller` when a hook runs in its context,
    /// else to the policy's daemon (`run_daemon`). Returns when the call starts.
    fn charge(&mut self, caller: Option<usize>, ns: f64) -> f64 {
        match caller.and_then(|t| self.threads.get_mut(t)) {
            Some(th) => {
                let start = th.clock;
                th.clock += ns;
                th.s.migration_ns += ns;
                start
            }
            None => {
                self.policy_ns += ns;
                self.run_daemon(Daemon::Policy, ns)
            }
        }
    }

    /// `ns` of work of a daemon or kernel thread, from the epoch's end or the end of its
    /// previous work, whichever is later; returns its start. It runs on a CPU no live thread
    /// holds when there is one; when every CPU runs a live thread, the scheduler gives it one
    /// of theirs, whose thread loses that time (charged as migration time to the live thread
    /// least advanced in simulated time, the approximation of which CPU it wakes on). A thread
    /// waiting at a barrier leaves its CPU to it.
    fn run_daemon(&mut self, which: Daemon, ns: f64) -> f64 {
        let start = self.now.max(self.daemon_free_ns[which as usize]);
        self.daemon_free_ns[which as usize] = start + ns;
        // the CPUs busy: those whose holding thread runs (of threads taking turns on a CPU,
        // only the holder is on it)
        let sched = &self.sched;
        let holds = |i: usize| sched.as_ref().is_none_or(|s| s.holds_cpu(i));
        let running = |i: usize, t: &Thread| !t.finished && !t.waiting && holds(i);
        let busy = (self.threads.iter().enumerate())
            .filter(|(i, t)| running(*i, t))
            .count();
        if busy >= self.machine.topology.num_cpus() {
            let victim = (self.threads.iter_mut().enumerate())
                .filter(|(i, t)| running(*i, t))
                .map(|(_, t)| t)
                .min_by(|a, b| a.clock.total_cmp(&b.clock));
            if let Some(th) = victim {
                th.clock += ns;
                th.s.migration_ns += ns;
            }
        }
        start
    }

    fn thread_info(&self, t: usize) -> ThreadInfo {
        let th = &self.threads[t];
        ThreadInfo {
            thread: ThreadId(th.id),
            task: th.task,
            cpu: th.cpu,
            node: NodeId(th.node as u16),
        }
    }

    /// The hooks of thread creation and allocation (`place_thread`, `place_region`), before
    /// the first access: every thread in order, then every mapping the workload made, with
    /// its task's first thread as the requester.
    fn initial_placement(&mut self, policies: &mut [Box<dyn Policy>]) -> Result<(), SimError> {
        for pol in policies.iter() {
            pol.check(&*self)
                .map_err(|e| SimError::Policy(format!("policy {}: {e}", pol.name())))?;
        }
        for t in 0..self.threads.len() {
            for pol in policies.iter_mut() {
                let info = self.thread_info(t);
                let Some(cpu) = pol.place_thread(&*self, &info) else {
                    continue;
                };
                let node = self.machine.topology.node_of_cpu(cpu).ok_or_else(|| {
                    SimError::Pinning(format!(
                        "policy {} placed thread {t} on CPU {}, which the machine lacks",
                        pol.name(),
                        cpu.0
                    ))
                })?;
                let th = &mut self.threads[t];
                th.cpu = cpu;
                th.node = node.index();
                th.core = self.cores.slot_of(cpu);
                th.s.cpu = cpu.0;
                th.s.node = node.0;
            }
        }
        let online = self.machine.topology.online();
        for r in 0..self.sh.os.regions.len() {
            let task = self.sh.os.regions[r].task;
            let Some(first) = self.threads.iter().position(|t| t.task == task) else {
                continue;
            };
            for pol in policies.iter_mut() {
                let region = self.regions().swap_remove(r);
                let requester = self.thread_info(first);
                if let Some(p) = pol.place_region(&*self, &region, &requester) {
                    p.validate(&online).map_err(|e| {
                        SimError::Policy(format!(
                            "policy {} for mapping '{}': {e}",
                            pol.name(),
                            region.name
                        ))
                    })?;
                    let reg = &mut self.sh.os.regions[r];
                    reg.policy = Some(p);
                    reg.pstate = Default::default();
                }
            }
        }
        Ok(())
    }

    /// Thread `t` stopped at phase `id`: every policy's `on_phase`, applied in its context.
    fn phase_hooks(&mut self, policies: &mut [Box<dyn Policy>], t: usize, id: u16) {
        for pol in policies.iter_mut() {
            let actions = pol.on_phase(&*self, ThreadId(t as u32), id);
            self.apply_hook(pol.as_mut(), "phase", actions, Some(t));
        }
        self.dispatch_moves(policies);
    }

    /// `on_thread_moved` for every change of node since the last dispatch. A policy reacting
    /// may move threads again; a few rounds at most, so two policies cannot ping-pong forever.
    fn dispatch_moves(&mut self, policies: &mut [Box<dyn Policy>]) {
        for _ in 0..8 {
            if self.moved.is_empty() {
                return;
            }
            for (thread, from, to) in std::mem::take(&mut self.moved) {
                for pol in policies.iter_mut() {
                    let actions = pol.on_thread_moved(&*self, thread, from, to);
                    self.apply_hook(pol.as_mut(), "thread_moved", actions, None);
                }
            }
        }
        self.moved.clear();
    }

    /// The other CPUs' share of shootdowns raised in fault handlers.
    fn flush_deferred_shootdowns(&mut self) {
        for d in std::mem::take(&mut self.sh.deferred_shootdowns) {
            let raiser = self.threads.iter().position(|t| t.id == d.raiser);
            let cpus = self.shootdown_cpus(d.task, raiser);
            self.drop_from_tlbs(d.task, d.range);
            self.interrupt_over(raiser, cpus, d.ns, d.window);
        }
    }

    /// The CPUs a shootdown for `task` raised by `caller` reaches: those its live threads
    /// are placed on, the raiser's own excepted (a daemon, None, runs on a CPU of its own;
    /// os/tlb_shootdown.rs). Threads taking turns on a CPU count once.
    fn shootdown_cpus(&self, task: TaskId, caller: Option<usize>) -> Vec<(CpuId, usize)> {
        let own = caller.and_then(|t| self.threads.get(t)).map(|th| th.cpu);
        let mut cpus: Vec<(CpuId, usize)> = (self.threads.iter().enumerate())
            .filter(|(_, t)| t.task == task && !t.finished && Some(t.cpu) != own)
            .map(|(i, t)| (t.cpu, i))
            .collect();
        cpus.sort_unstable_by_key(|c| c.0);
        cpus.dedup_by_key(|c| c.0);
        cpus
    }

    /// Every live thread of `task` drops `[start, start + len)` from its TLB (len 0: nothing
    /// more to drop).
    fn drop_from_tlbs(&mut self, task: TaskId, (start, len): (u64, u64)) {
        if len == 0 {
            return;
        }
        for th in self
            .threads
            .iter()
            .filter(|t| t.task == task && !t.finished)
        {
            self.cores.state(th.core).tlb.invalidate_range(start, len);
        }
    }

    /// Each of `cpus` loses `ns` to flush interrupts spread evenly over `window` (a call's
    /// unmapping and copying, one flush per folio or batch): handed out at the epochs' ends
    /// that `window` covers (`deliver_interrupts`), at once when it is empty. A call's
    /// thousands of flushes then reach the others while it runs; charged all at its start,
    /// they would hold back the calls the others were about to make.
    fn interrupt_over(
        &mut self,
        raiser: Option<usize>,
        cpus: Vec<(CpuId, usize)>,
        ns: f64,
        (from, until): (f64, f64),
    ) {
        if ns <= 0.0 || cpus.is_empty() {
            return;
        }
        if until <= from {
            self.lose_to_interrupts(&cpus, ns);
            return;
        }
        let stream = InterruptStream {
            cpus,
            ns,
            from_ns: from,
            until_ns: until,
            delivered_to_ns: from,
        };
        match raiser.and_then(|t| self.threads.get_mut(t)) {
            Some(th) => th.raised.push(stream),
            None => self.daemon_raised.push(stream),
        }
    }

    /// The flush interrupts that the calls still running raised by `end` (`interrupt_over`).
    fn deliver_interrupts(&mut self, end: f64) {
        let mut daemon = std::mem::take(&mut self.daemon_raised);
        self.deliver_streams(&mut daemon, end);
        self.daemon_raised = daemon;
        for t in 0..self.threads.len() {
            if self.threads[t].raised.is_empty() {
                continue;
            }
            // delivering raises no stream, so nothing joins the list while it is out
            let mut raised = std::mem::take(&mut self.threads[t].raised);
            self.deliver_streams(&mut raised, end);
            debug_assert!(self.threads[t].raised.is_empty());
            self.threads[t].raised = raised;
        }
    }

    /// Each stream's part from where it was handed out to `end`, to the threads on its CPUs;
    /// a thread that ended in between takes the part up to its end.
    fn deliver_streams(&mut self, streams: &mut Vec<InterruptStream>, end: f64) {
        for st in streams.iter_mut() {
            let from = st.delivered_to_ns;
            let ns = st.take_until(end);
            if ns <= 0.0 {
                continue;
            }
            let to = st.delivered_to_ns;
            for &(_, t) in &st.cpus {
                let on_cpu = self.sched.as_ref().map_or(t, |s| s.holder_for(t));
                let th = &self.threads[on_cpu];
                let part = if th.finished {
                    ns * ((th.s.time_ns.min(to) - from) / (to - from)).max(0.0)
                } else {
                    ns
                };
                self.lose_to_interrupt(on_cpu, part);
            }
        }
        streams.retain(|st| st.until_ns > end);
    }

    /// Each of `cpus` loses `ns` to interrupts now: the thread holding it (when threads take
    /// turns on it). A thread that has ended left its CPU, which loses nothing of its.
    fn lose_to_interrupts(&mut self, cpus: &[(CpuId, usize)], ns: f64) {
        for &(_, t) in cpus {
            let on_cpu = self.sched.as_ref().map_or(t, |s| s.holder_for(t));
            if !self.threads[on_cpu].finished {
                self.lose_to_interrupt(on_cpu, ns);
            }
        }
    }

    /// Thread `t` loses `ns` to interrupts: it runs that much later, a copy it is running
    /// included (a thread that has ended, by an interrupt before its end: it ends later).
    fn lose_to_interrupt(&mut self, t: usize, ns: f64) {
        if ns <= 0.0 {
            return;
        }
        let spins = self.sh.anon_vma_lock.exclusive();
        let th = &mut self.threads[t];
        th.clock += ns;
        th.s.migration_ns += ns;
        delay_work(th, ns);
        finish_after_wait(th);
        if spins {
            th.rmap_ipi_credit_ns += ns;
        }
    }

    /// Run queues for the threads' CPUs now (sched.rs), and the task CPU counts shootdowns
    /// raised in fault handlers use.
    fn reschedule(&mut self) {
        let cpus: Vec<CpuId> = self.threads.iter().map(|t| t.cpu).collect();
        let clocks: Vec<f64> = self.threads.iter().map(|t| t.clock.max(self.now)).collect();
        let eevdf = self.machine.os.linux_at_least(6, 6);
        self.sched = Scheduler::new(&cpus, &clocks, self.machine.topology.num_cpus(), eevdf);
        self.count_task_cpus();
    }

    /// Per task, the CPUs its live threads are placed on (`Shared::task_cpus`), when threads
    /// take turns on CPUs; otherwise the fault paths count threads.
    fn count_task_cpus(&mut self) {
        if self.sched.is_none() {
            self.sh.task_cpus = None;
            return;
        }
        let mut per_task: Vec<Vec<CpuId>> = vec![Vec::new(); self.sh.live_threads.len()];
        for th in self.threads.iter().filter(|t| !t.finished) {
            per_task[th.task.index()].push(th.cpu);
        }
        self.sh.task_cpus = Some(
            per_task
                .into_iter()
                .map(|mut c| {
                    c.sort_unstable();
                    c.dedup();
                    c.len() as u32
                })
                .collect(),
        );
    }

    /// `flushes` shootdowns of `[start, start + len)` for `task`, raised by `caller`, at
    /// `scale` times the costs: the task's other live threads lose the interrupts; returns
    /// the raiser's time, for the caller to charge where the operation's cost goes.
    fn raise_shootdowns(
        &mut self,
        task: TaskId,
        caller: Option<usize>,
        (start, len): (u64, u64),
        flushes: u32,
        scale: f64,
    ) -> f64 {
        if flushes == 0 {
            return 0.0;
        }
        let sd = self.sh.p.shootdowns.scaled(scale);
        let cpus = self.shootdown_cpus(task, caller);
        self.sh.os.vm.count_remote_flushes(flushes, cpus.len());
        self.drop_from_tlbs(task, (start, len));
        self.lose_to_interrupts(&cpus, flushes as f64 * sd.ipi_ns);
        flushes as f64 * sd.initiator_ns(cpus.len())
    }

    fn finish(
        self,
        started: Instant,
        timeline: Vec<TimelinePoint>,
        avg_util: Vec<f64>,
    ) -> SimResult {
        let Simulator {
            machine,
            threads,
            sh,
            cfg,
            workload_name,
            phases,
            policy_ns,
            policy_log,
            ..
        } = self;
        let per_thread: Vec<ThreadStats> = threads
            .iter()
            .map(|t| ThreadStats {
                instructions: t.s.retired_instructions(),
                ..t.s.clone()
            })
            .collect();
        let memory_references = per_thread.iter().map(|t| t.loads + t.stores).sum();
        let sim_time_ns = per_thread.iter().map(|t| t.time_ns).fold(0.0, f64::max);
        let n = machine.topology.num_nodes();
        let mut resident = vec![0u64; n];
        for r in &sh.os.regions {
            for (_, pte) in sh.os.pt.folios(r.start, r.len) {
                resident[pte.node()] += pte.size().bytes();
            }
        }
        let served = sh.mem.served();
        let per_node: Vec<NodeStats> = (0..n)
            .map(|d| NodeStats {
                node: d as u16,
                ctrl_read_bytes: sh.mem.ctrl_read_bytes(d),
                ctrl_write_bytes: sh.mem.ctrl_write_bytes[d],
                directory_write_bytes: sh.mem.directory_write_bytes[d],
                served_from: served[d].clone(),
                avg_utilisation: avg_util[d],
                peak_utilisation: sh.mem.ctrl_util_max[d],
                resident_bytes: resident[d],
            })
            .collect();
        let links = (0..sh.mem.num_link_slots())
            .map(|s| {
                let l = &machine.links[s / 2];
                let (from, to) = if s % 2 == 0 {
                    (l.a.0, l.b.0)
                } else {
                    (l.b.0, l.a.0)
                };
                let cap = sh.mem.link_capacity_bytes_per_ns(s);
                LinkStats {
                    from,
                    to,
                    bytes: sh.mem.link_bytes[s],
                    gbps_per_dir: l.gbps_per_dir,
                    avg_utilisation: if sim_time_ns > 0.0 {
                        sh.mem.link_bytes[s] / (cap * sim_time_ns)
                    } else {
                        0.0
                    },
                    peak_utilisation: sh.mem.link_util_max[s],
                }
            })
            .collect();
        let metrics =
            crate::report::compute_metrics(&per_thread, &per_node, &sh.samples, sim_time_ns);
        let mut phases = phases;
        // Phases are recorded as threads first leave them, which is not always the order in
        // which they began (a thread may leave phase 2 before a slower one leaves phase 1);
        // readers take them in start order (`validate`'s `full_run` weighs "from a phase on").
        phases.sort_by(|a, b| a.start_ns.total_cmp(&b.start_ns).then(a.id.cmp(&b.id)));
        for p in &mut phases {
            p.metrics = crate::report::phase_metrics(p, n, &sh.samples);
        }
        SimResult {
            label: cfg.label.clone(),
            machine: machine.id.clone(),
            workload: workload_name,
            threads: threads.len(),
            pinning: match self.self_placed {
                0 => cfg.pinning.to_string(),
                k => format!("{} ({k} threads placed by the workload)", cfg.pinning),
            },
            mempolicy: cfg.task_policy.to_string(),
            thp: cfg.thp.to_string(),
            hugetlb: cfg.hugetlb.map_or("none".into(), |s| s.to_string()),
            sim_time_ns,
            memory_references,
            metrics,
            per_thread,
            per_node,
            links,
            phases,
            migrated_pages: sh.os.vm.pgmigrate_success,
            splits: sh.os.vm.thp_split_page,
            promotions: sh.os.vm.thp_collapse_alloc,
            vmstat: sh.os.vm.clone(),
            numa_balancing: sh.os.numa_balancing_report(),
            next_touch: sh.os.nt.stats.clone(),
            policy_ns,
            policy_log,
            timeline,
            samples_taken: sh.samples_taken,
            samples_kept: sh.samples.len() as u64,
            samples: sh.samples,
            host_seconds: started.elapsed().as_secs_f64(),
        }
    }
}

/// When thread `i` starts, ns: uniform in [0, `skew_ns`) from `seed` and `i` (splitmix64), 0
/// without skew. Real runs differ by microseconds in when each thread starts (creation and
/// wake-up order, timer ticks); a skew with several seeds samples that variation, which
/// decides near-ties such as first-touch races for hot huge pages (docs/model.md, "Runs as
/// samples").
fn start_delay_ns(seed: u64, i: usize, skew_ns: f64) -> f64 {
    if skew_ns <= 0.0 {
        return 0.0;
    }
    let mut z = seed
        .wrapping_add((i as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15))
        .wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    skew_ns * (z >> 11) as f64 / (1u64 << 53) as f64
}

/// The CPUs a thread may run on (None: any).
type Affinity = Option<Vec<CpuId>>;

/// A workload's own placements (a mix's per-program `mempolicy=` and `cpus=`) over the run's:
/// each listed task gets its policy, each listed thread the k-th CPU of its list and the
/// list as its affinity. Returns every thread's CPU and allowed CPUs (None: anywhere).
fn apply_placements(
    machine: &Machine,
    pinning: &Pinning,
    mut cpus: Vec<CpuId>,
    p: &Placements,
    os: &mut Os,
) -> Result<(Vec<CpuId>, Vec<Affinity>), SimError> {
    let topo = &machine.topology;
    let online = topo.online();
    for (task, spec) in &p.task_policies {
        let policy = MemPolicy::parse(spec, &online)
            .and_then(|mp| mp.validate(&online).map(|_| mp))
            .map_err(|e| SimError::Policy(format!("task {}: mempolicy '{spec}': {e}", task.0)))?;
        os.set_task_policy(*task, policy);
    }
    let mut allowed: Vec<Affinity> = cpus
        .iter()
        .map(|&c| pinning.cpus_allowed(topo, c))
        .collect();
    for (thread, list, k) in &p.thread_cpus {
        let bad = |why: String| {
            SimError::Pinning(format!(
                "thread {thread}: cpus={list} (the workload's own placement of it): {why}"
            ))
        };
        let v = match list.strip_prefix("node:") {
            // a node's CPUs, as `numactl --cpunodebind` binds a thread
            Some(n) => {
                let node = n
                    .parse::<u16>()
                    .ok()
                    .and_then(|n| topo.nodes.iter().find(|x| x.id.0 == n))
                    .ok_or_else(|| {
                        bad(format!(
                            "{machine} has no node {n} (nodes {})",
                            topo.nodes
                                .iter()
                                .map(|x| x.id.0.to_string())
                                .collect::<Vec<_>>()
                                .join(", "),
                            machine = machine.id
                        ))
                    })?;
                if node.cpus.is_empty() {
                    return Err(bad(format!("node {n} has no CPUs")));
                }
                node.cpus.clone()
            }
            None => match list.parse::<Pinning>() {
                Ok(Pinning::Cpus(v)) => v,
                _ => return Err(bad("expected a CPU list such as 0-5,12, or node:N".into())),
            },
        };
        if let Some(c) = v.iter().find(|c| topo.node_of_cpu(**c).is_none()) {
            return Err(bad(format!("CPU {} does not exist on {}", c.0, machine.id)));
        }
        let slot = cpus
            .get_mut(*thread)
            .ok_or_else(|| bad("the workload has no such thread".into()))?;
        *slot = v[k % v.len()];
        allowed[*thread] = Some(v);
    }
    // threads without a list of their own take the run's pinning order, skipping the CPUs
    // the listed ones claimed (an explicit --pin CPU list is kept as given)
    if !p.thread_cpus.is_empty() && !matches!(pinning, Pinning::Cpus(_)) {
        let listed: std::collections::HashSet<usize> =
            p.thread_cpus.iter().map(|(t, _, _)| *t).collect();
        let claimed: std::collections::HashSet<CpuId> = listed.iter().map(|&t| cpus[t]).collect();
        if let Ok(order) = pinning.resolve(topo, topo.num_cpus()) {
            let mut free = order.into_iter().filter(|c| !claimed.contains(c));
            for t in (0..cpus.len()).filter(|t| !listed.contains(t)) {
                if let Some(c) = free.next() {
                    cpus[t] = c;
                    allowed[t] = pinning.cpus_allowed(topo, c);
                }
            }
        }
    }
    // threads that share a CPU take turns on it (sched.rs)
    Ok((cpus, allowed))
}

fn close_phase(th: &mut Thread, phases: &mut Vec<PhaseStats>) {
    if let Some((id, start, at_start)) = th.phase.take() {
        let name = th
            .phase_names
            .get(id as usize)
            .map_or_else(|| format!("phase{id}"), |s| s.to_string());
        let mut delta = th.s.since(&at_start);
        delta.time_ns = th.clock - start;
        delta.instructions = delta.retired_instructions();
        let acc = delta.loads + delta.stores;
        let i = match phases.iter().position(|p| p.id == id) {
            Some(i) => {
                let p = &mut phases[i];
                p.start_ns = p.start_ns.min(start);
                p.end_ns = p.end_ns.max(th.clock);
                p.thread_ns += th.clock - start;
                p.accesses += acc;
                i
            }
            None => {
                phases.push(PhaseStats {
                    id,
                    name,
                    start_ns: start,
                    end_ns: th.clock,
                    thread_ns: th.clock - start,
                    accesses: acc,
                    ..Default::default()
                });
                phases.len() - 1
            }
        };
        let per_thread = &mut phases[i].per_thread;
        let t = th.s.thread as usize;
        if per_thread.len() <= t {
            per_thread.resize_with(t + 1, ThreadStats::default);
        }
        let slot = &mut per_thread[t];
        // where the thread is now (a policy may have moved it since it started)
        (slot.thread, slot.task, slot.cpu, slot.node) =
            (th.s.thread, th.s.task, th.cpu.0, th.node as u16);
        slot.add(&delta);
    }
}

/// `lines` references `stride` bytes apart from `addr` (a Run op), stopping at the epoch's
/// end: then the rest is kept in `th.pending` and false returned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn run_lines<B: Build>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    lines: u32,
    stride: u64,
    kind: AccessKind,
    end: f64,
) -> Result<bool, SimError> {
    let (mut a, mut n) = (addr, lines);
    let rk = RefKind::new(&sh.p, kind);
    // the host's own prefetcher follows long runs (their sets are consecutive host memory)
    let short = lines <= SHORT_RUN_LINES;
    // The page of the last translated line: a later line of the run on the same page needs
    // no translation (nothing ran in between, so its entry is present and it is the most
    // recent entry of its L1 TLB pool: a repeat hit that costs 0 and changes nothing).
    let (mut page_lo, mut page_hi) = (1u64, 0u64);
    let (mut home, mut size) = (0, PageSize::Base4K);
    while n > 0 {
        if short && n > RUN_PREFETCH_LINES {
            // host-side only, as the op-ahead prefetch
            let ahead = (a + RUN_PREFETCH_LINES as u64 * stride) >> 6;
            B::Cache::of_ref(&th.l2).prefetch(ahead);
            sh.llc[th.node].prefetch(ahead);
        }
        if a >= page_lo && a < page_hi {
            reference::<B, false>(b, th, sh, a, &rk, home, size, 0.0);
        } else {
            let (cost, h, s) = translate(b, th, sh, a, rk.walk_share)?;
            (home, size) = (h, s);
            if th.tlb.l1_covers(s) {
                page_lo = a & !(s.bytes() - 1);
                page_hi = page_lo + s.bytes();
            }
            reference::<B, true>(b, th, sh, a, &rk, home, size, cost);
        }
        a += stride;
        n -= 1;
        if th.clock >= end && n > 0 {
            th.pending = Some(Pending::Run {
                addr: a,
                left: n,
                stride,
                kind,
            });
            return Ok(false);
        }
    }
    Ok(true)
}

/// Elements `first..first + count` of a Gather op over the thread's gather table, stopping
/// at the epoch's end: then the rest is kept in `th.pending` and false returned.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn gather<B: Build>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    table: Option<&GatherTable>,
    base: u64,
    first: u32,
    count: u32,
    kind: AccessKind,
    end: f64,
) -> Result<bool, SimError> {
    let table = table.expect("a program emitting Op::Gather must return a gather table");
    let (index, shift) = (&*table.index, table.elem_shift);
    let lo = first as usize;
    let elems = &index[lo..lo + count as usize];
    // As in `run_lines`: an element on the page the gather last translated needs no
    // translation (nothing ran in between that changes a page table or a TLB, so the lookup
    // would be a free repeat L1 hit). Asked from the address alone, the question resolves
    // early: sorted indices make it a coin toss that the host mispredicts half the time.
    // (Written out in both loops on purpose: the same logic as a shared `LastPage` struct
    // with an inlined method measured 12 % slower.)
    let rk = RefKind::new(&sh.p, kind);
    let (mut page_lo, mut page_hi) = (1u64, 0u64);
    let (mut home, mut size) = (0, PageSize::Base4K);
    for (j, &i) in elems.iter().enumerate() {
        // as for Access ops: the private cache set of the element PREFETCH_AHEAD_OPS later
        // (often the next row's) is requested now so that host misses overlap
        if let Some(&ahead) = index.get(lo + j + PREFETCH_AHEAD_OPS) {
            B::Cache::of_ref(&th.l2).prefetch((base + ((ahead as u64) << shift)) >> 6);
        }
        let a = base + ((i as u64) << shift);
        if a >= page_lo && a < page_hi {
            reference::<B, false>(b, th, sh, a, &rk, home, size, 0.0);
        } else {
            let (cost, h, s) = translate(b, th, sh, a, rk.walk_share)?;
            (home, size) = (h, s);
            if th.tlb.l1_covers(s) {
                page_lo = a & !(s.bytes() - 1);
                page_hi = page_lo + s.bytes();
            }
            reference::<B, true>(b, th, sh, a, &rk, home, size, cost);
        }
        if th.clock >= end && j + 1 < elems.len() {
            th.pending = Some(Pending::Gather {
                base,
                next: first + j as u32 + 1,
                left: count - j as u32 - 1,
                kind,
            });
            return Ok(false);
        }
    }
    Ok(true)
}

/// Through the private cache, the node's LLC and DRAM. Returns (ns, source, private miss).
#[inline(always)]
fn hierarchy<B: Build>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    line: u64,
    home: usize,
    rk: &RefKind,
) -> (f64, DataSource, bool) {
    let node = th.node;
    match B::Cache::of(&mut th.l2).access(b.isa(), line, rk.write, home as u8) {
        CacheOutcome::Hit => (rk.private_hit_ns, DataSource::PrivateCache, false),
        CacheOutcome::Miss { evicted } => {
            th.s.private_misses += 1;
            if let Some(ev) = evicted {
                if ev.dirty {
                    // a dirty private line is written into the LLC
                    if let CacheOutcome::Miss { evicted: Some(e2) } =
                        sh.llc[node].access(ev.line, true, ev.meta)
                    {
                        if e2.dirty {
                            write_back(sh, th, node, e2.line, e2.meta as usize);
                        }
                    }
                }
            }
            match sh.llc[node].access(line, false, home as u8) {
                CacheOutcome::Hit => {
                    // its data arrives a whole hit latency after it issued (a fence waits
                    // for it: `fence`)
                    th.data_done_ns = th.data_done_ns.max(th.issue_ns + sh.p.llc_hit_ns);
                    (rk.llc_hit_ns, DataSource::LocalLlc, true)
                }
                CacheOutcome::Miss { evicted } => {
                    if let Some(ev) = evicted {
                        if ev.dirty {
                            write_back(sh, th, node, ev.line, ev.meta as usize);
                        }
                    }
                    th.s.llc_misses += 1;
                    sh.mem.read(node, home);
                    th.epoch_lines[home] += 1;
                    if home != node {
                        if let Some(dir) = &mut sh.directory {
                            if dir.remote_read(line, home) {
                                sh.mem.directory_write(home);
                                th.epoch_lines[2 * sh.nodes + home] += 1;
                            }
                        }
                    }
                    let lat = sh.mem.read_latency_ns(node, home);
                    th.data_done_ns = th.data_done_ns.max(th.issue_ns + lat);
                    th.s.dram_by_node[home] += 1;
                    if home == node {
                        th.s.dram_local += 1;
                        (lat * rk.overlap, DataSource::LocalDram, true)
                    } else {
                        th.s.dram_remote += 1;
                        (lat * rk.overlap, DataSource::RemoteDram, true)
                    }
                }
            }
        }
    }
}

/// A dirty line evicted from node `node`'s LLC goes back to its home; the write stores the
/// line's directory state I (hw/memory_directory.rs). It counts as the line of the thread
/// whose miss evicted it.
#[inline(always)]
fn write_back(sh: &mut Shared, th: &mut Thread, node: usize, line: u64, home: usize) {
    sh.mem.write_back(node, home);
    th.epoch_lines[sh.nodes + home] += 1;
    if let Some(dir) = &mut sh.directory {
        dir.write_back(line);
    }
}

/// One memory reference of thread `th` to the line holding `addr`.
#[inline(always)]
fn access<B: Build>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    kind: AccessKind,
) -> Result<(), SimError> {
    let rk = RefKind::new(&sh.p, kind);
    let (cost, home, size) = translate(b, th, sh, addr, rk.walk_share)?;
    reference::<B, true>(b, th, sh, addr, &rk, home, size, cost);
    Ok(())
}

/// The translation part of a reference: faults, then the TLB and, on a miss, the walk.
/// Returns its cost, the page's home node and size.
#[inline(always)]
fn translate<B: Build>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    walk_share: f64,
) -> Result<(f64, usize, PageSize), SimError> {
    let mut pte = sh.os.pt.try_get(addr);
    let mut cost = 0.0;
    if pte.needs_fault() {
        if pte.fresh() {
            pte = fresh_touch(th, sh, addr, pte, &mut cost);
        }
        if !pte.only_fresh() {
            // a trap: the handler's locked instructions wait for the stores before it
            drain_stores(th);
            cost += slow_path(th, sh, addr, pte)?;
            // a trap: nothing overlaps across it (its own cost joins `indep_ns` with the
            // reference's, so the mark goes past it)
            th.window
                .serialise(th.indep_ns + cost, th.s.loads + th.s.stores);
            pte = sh.os.pt.get(addr);
        }
    }
    let size = pte.size();
    let home = pte.node();
    match th.tlb.lookup(addr, size) {
        TlbOutcome::L1Hit => {}
        TlbOutcome::L2Hit => {
            th.s.dtlb_l1_misses[size.index()] += 1;
            cost += sh.p.tlb_l2_hit_ns;
        }
        TlbOutcome::Miss => {
            th.s.dtlb_l1_misses[size.index()] += 1;
            th.s.page_walks[size.index()] += 1;
            // the upper-level entries the paging-structure caches miss (hw/psc.rs), then the
            // leaf (8 entries per line), each a dependent reference through the caches; a
            // PDE's line is a 2 MiB page's leaf line, a PDPTE's a 1 GiB page's
            let up = th.tlb.walk_levels(addr, size);
            let walk = RefKind::with(&sh.p, false, true);
            // the walk's references are charged whole: nothing for a fence to wait for
            th.issue_ns = f64::NEG_INFINITY;
            let before_walk = cost;
            cost += sh.p.walk_base_ns;
            // each entry is read from its table page's node (os/pt_pages.rs), where the fault
            // that needed the table put it
            let table = |sh: &Shared, level| sh.os.pt_pages.node(addr, level).unwrap_or(home);
            for (needed, level) in [(up.pdpte, PageSize::Giant1G), (up.pde, PageSize::Huge2M)] {
                if needed {
                    let node = table(sh, level);
                    cost += walk_ref(b, th, sh, sh.p.pt_lines.line(addr, level), node, &walk);
                }
            }
            let leaf = sh.p.pt_lines.line(addr, size);
            let node = table(sh, size);
            cost += walk_ref(b, th, sh, leaf, node, &walk);
            // an independent reference's walk shares the core's walkers with its neighbours'
            // (summed as before and scaled after, so that one walker's arithmetic is unchanged)
            if walk_share != 1.0 {
                cost = before_walk + (cost - before_walk) * walk_share;
            }
        }
    }
    Ok((cost, home, size))
}

/// A trap or a system call (a fault, `move_pages`, the program's end): the thread waits until
/// its store buffer has drained. The wait is memory time. (A trap also waits for the loads
/// before it, in hardware; the model leaves that out because the lines a fault's kernel code
/// clears or copies are not put in the faulting core's caches, so the first access after a
/// fault misses where the real one hits, and a wait for it at the next trap would charge that
/// miss again: docs/model.md, "Atomics".)
fn drain_stores(th: &mut Thread) {
    let wait = th.sb.fence(th.clock);
    th.clock += wait;
    th.s.memory_ns += wait;
}

/// A locked instruction's fence (an atomic; a barrier's): the thread waits until every
/// earlier reference has its data and its store buffer has drained (docs/model.md,
/// "Atomics"). The wait is memory time.
fn fence(th: &mut Thread) {
    let wait = th
        .sb
        .fence(th.clock)
        .max(th.data_done_ns - th.clock)
        .max(0.0);
    th.clock += wait;
    th.s.memory_ns += wait;
}

/// The zeroing of a folio this thread's fault allocated on `node` (docs/model.md, "OS
/// model"): a huge page's clearing is write traffic to its node, counted as this thread's,
/// written evenly over the fault's time (`write_zeroing` puts each epoch's share on the
/// controller). A 4 KiB page's lines stay in the cache it was cleared through (its memory
/// traffic is the reads and write-backs of the program's own accesses to it). Returns the
/// fault's time: the preset's fault cost, or the core's time to write a huge page where
/// that is longer.
fn zero_fill(th: &mut Thread, sh: &mut Shared, node: usize, size: PageSize) -> f64 {
    let ns = fault_time_ns(&sh.mem, &sh.p, th.node, node, size);
    if size == PageSize::Base4K {
        return ns;
    }
    // a fault starts after the thread's previous one ended: what is left of that one's
    // zeroing lies before this instant
    write_zeroing(th, sh, f64::INFINITY);
    th.zeroing = Some(Zeroing {
        node,
        span: Span {
            bytes: size.bytes(),
            from_ns: th.clock,
            until_ns: th.clock + ns,
            written: 0,
        },
    });
    ns
}

/// A first-touch fault of the thread allocating a folio of `size` on `node`: its zeroing
/// (`zero_fill`), its pass over the process's mmap_lock line, its count in the epoch and its
/// time as fault time. Returns that time; the caller adds it to the reference's cost.
fn take_fault(th: &mut Thread, sh: &mut Shared, node: usize, size: PageSize) -> f64 {
    let ns = zero_fill(th, sh, node, size);
    charge_fault(th, sh, ns)
}

/// A fault of `ns` in the thread's handler: its pass over the process's mmap_lock line, its
/// count in the epoch and its time as fault time. Returns `ns`.
fn charge_fault(th: &mut Thread, sh: &mut Shared, ns: f64) -> f64 {
    pass_mmap_lock(th, sh);
    th.s.fault_ns += ns;
    ns
}

/// A page fault's pass over its process's mmap_lock line (os/mmap_lock.rs), which every
/// fault takes: first touch, next-touch and lazy migration, NUMA hinting faults.
fn pass_mmap_lock(th: &mut Thread, sh: &mut Shared) {
    sh.mmap_lock.fault(th.task.index(), th.node);
    th.epoch_faults += 1;
}

/// How long a fault of a thread on `cpu_node` allocating a folio of `size` on `node` takes:
/// the preset's fault cost, or, for a huge page, the core's time to clear it where that is
/// longer.
fn fault_time_ns(mem: &MemSys, p: &Params, cpu_node: usize, node: usize, size: PageSize) -> f64 {
    let fault_ns = p.fault_ns[size.index()];
    if size == PageSize::Base4K {
        return fault_ns;
    }
    // clear_huge_page is the core's stores: at most its lines in flight, each taking the
    // path's latency (`L / C` a line, as any store stream; a 6164 HE core streams 9.5 GB/s,
    // AT10, so 2 MiB take 220 µs there), never faster than the preset's fault cost
    let lines = (size.bytes() / 64) as f64;
    let pace_ns = lines * mem.read_latency_ns(cpu_node, node) * p.inv_conc;
    fault_ns.max(pace_ns)
}

/// Put on the memory system the bytes the thread's zeroing wrote by `t_ns`; returns whether
/// it wrote any.
fn write_zeroing(th: &mut Thread, sh: &mut Shared, t_ns: f64) -> bool {
    let Some(z) = th.zeroing.as_mut() else {
        return false;
    };
    let bytes = z.span.take_until(t_ns);
    let node = z.node;
    if z.span.done() {
        th.zeroing = None;
    }
    if bytes == 0 {
        return false;
    }
    sh.mem.zero_fill(th.node, node, bytes);
    th.epoch_zero_lines += bytes / 64;
    th.epoch_lines[sh.nodes + node] += bytes / 64;
    true
}

/// The jobs of copying `copies` (from, to, bytes: a migration's folios, in order) on a CPU of
/// `cpu_node` (None: of each folio's destination) over `[from_ns, until_ns)`, each folio's
/// bytes over its share of the time, and `rmap_lock_ns` of anon_vma lock hold (0: none)
/// spread over the bytes the same way.
fn copy_jobs(
    copies: &[(usize, usize, u64)],
    cpu_node: Option<usize>,
    in_fault: bool,
    from_ns: f64,
    until_ns: f64,
    rmap_lock_ns: f64,
) -> impl Iterator<Item = CopyJob> + '_ {
    let total: u64 = copies.iter().map(|c| c.2).sum();
    let ns_per_byte = (until_ns - from_ns).max(0.0) / total.max(1) as f64;
    let rmap_lock_ns_per_byte = rmap_lock_ns / total.max(1) as f64;
    let mut at = from_ns;
    copies.iter().filter_map(move |&(from, to, bytes)| {
        let start = at;
        at += bytes as f64 * ns_per_byte;
        (from != to && bytes > 0).then_some(CopyJob {
            cpu_node: cpu_node.unwrap_or(to),
            from,
            to,
            in_fault,
            span: Span {
                bytes,
                from_ns: start,
                until_ns: at,
                written: 0,
            },
            rmap_lock_ns_per_byte,
        })
    })
}

/// The thread copies `copies` over `[from_ns, until_ns)` of its time (docs/model.md,
/// "Migration copies"): each epoch gets the bytes it copied in it (`write_copies`), as its own
/// lines, so that its copies and other copiers' add up on the controllers and links, and it
/// waits for the backlogs they make.
fn copy_on_thread(
    th: &mut Thread,
    copies: &[(usize, usize, u64)],
    from_ns: f64,
    until_ns: f64,
    in_fault: bool,
    rmap_lock_ns: f64,
) {
    let jobs = copy_jobs(
        copies,
        Some(th.node),
        in_fault,
        from_ns,
        until_ns,
        rmap_lock_ns,
    );
    th.copies.extend(jobs);
}

/// Put on the memory system the bytes of the thread's copies run by `t_ns`; returns whether
/// it wrote any.
fn write_copies(th: &mut Thread, sh: &mut Shared, t_ns: f64) -> bool {
    if th.copies.is_empty() {
        return false;
    }
    let mut wrote = false;
    for c in &mut th.copies {
        let before = c.span.written;
        let lines = c.write_until(t_ns, &mut sh.mem, &mut th.epoch_lines);
        if lines == 0 {
            continue;
        }
        if c.rmap_lock_ns_per_byte > 0.0 {
            let hold = (c.span.written - before) as f64 * c.rmap_lock_ns_per_byte;
            th.epoch_rmap_lock_ns += hold;
            if c.in_fault {
                th.epoch_rmap_lock_fault_ns += hold;
            }
            sh.anon_vma_lock.offer(th.task.index(), hold);
        }
        th.epoch_copy_lines += 2 * lines;
        if c.in_fault {
            th.epoch_copy_fault_lines += 2 * lines;
        }
        wrote = true;
    }
    th.copies.retain(|c| !c.span.done());
    wrote
}

/// A touch of a fresh folio (os/first_touch.rs) while its owner's fault may be in flight.
/// Anonymous memory: the thread takes a fault of its own, clearing a page on its node; the
/// first fault to end maps its page (a takeover where it is this thread's), the others pay
/// their clearing for nothing. hugetlbfs: the earliest touch takes the folio and its fault,
/// a later one waits for the fault in flight. Returns the entry as it is now; the fault's
/// cost joins `cost`.
fn fresh_touch(
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    pte: crate::os::pagetable::Pte,
    cost: &mut f64,
) -> crate::os::pagetable::Pte {
    let start = pte.size().align_down(addr);
    let own_fault = |size| fault_time_ns(&sh.mem, &sh.p, th.node, th.node, size);
    let touch = sh.os.first_touch.touched(start, th.id, th.clock, own_fault);
    match touch {
        None => pte,
        Some(Touch::Lost) => {
            // its own page, allocated and cleared on its node, then freed: the fault's time
            // and zeroing traffic, and the owner's page mapped when it ends
            drain_stores(th);
            *cost += take_fault(th, sh, th.node, pte.size());
            sh.os.vm.first_touch_faults_lost += 1;
            th.window
                .serialise(th.indep_ns + *cost, th.s.loads + th.s.stores);
            pte
        }
        Some(Touch::WaitUntil(done)) => {
            // a fault too (it takes the mmap_lock), then the page lock holds this thread
            // until the owner's fault ends
            pass_mmap_lock(th, sh);
            th.s.fault_ns += done - th.clock;
            th.clock = done;
            th.window.serialise(th.indep_ns, th.s.loads + th.s.stores);
            pte
        }
        Some(Touch::Takeover(take)) => {
            // a fault: the trap waits for the thread's stores
            drain_stores(th);
            sh.os
                .take_over_fresh(start, take.size, NodeId(th.node as u16));
            let now = sh.os.pt.get(addr);
            let ns = take_fault(th, sh, now.node(), take.size);
            sh.os.first_touch.fault_ends(start, th.clock + ns);
            *cost += ns;
            // hugetlbfs: the previous owner only waited for this fault, and the rest of its own
            // comes back once its turn is not running (`apply_fault_refunds`); anonymous
            // memory: it cleared a page of its own for nothing
            if !take.serialised {
                sh.os.vm.first_touch_faults_lost += 1;
            }
            let refund = take.refund_ns(th.clock, ns);
            if refund > 0.0 && take.previous != th.id {
                sh.fault_refunds.push((take.previous, refund));
            }
            th.window
                .serialise(th.indep_ns + *cost, th.s.loads + th.s.stores);
            sh.os.pt.get(addr)
        }
    }
}

/// One page-walk reference to page-table line `line`: its latency, counted as a walk
/// reference (and a walk-caused private miss where it missed).
#[inline(always)]
fn walk_ref<B: Build>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    line: u64,
    home: usize,
    walk: &RefKind,
) -> f64 {
    th.s.walk_refs += 1;
    let (ns, _, missed) = hierarchy(b, th, sh, line, home, walk);
    if missed {
        th.s.walk_private_misses += 1;
    }
    ns
}

/// The data part of a reference whose translation cost `cost`: caches, memory, counters,
/// the sampler. `TRANSLATED` is false where the translation was the free repeat of the
/// previous one (`cost` is then 0 and is not added: `0.0 + ns` is `ns` for the non-negative
/// latencies here, one add less on the commonest path).
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn reference<B: Build, const TRANSLATED: bool>(
    b: B,
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    rk: &RefKind,
    home: usize,
    size: PageSize,
    cost: f64,
) {
    // a private-cache hit is there when charged (the level stands for the L1 too, whose hits
    // are folded into compute); a miss's data a whole latency after this (`hierarchy`). A
    // reference charged all its data time (a dependent read, a sibling with the read it
    // issued with) has it by the end of its charge, and an atomic's fence must not wait for
    // its own line: −∞, which raises nothing.
    th.issue_ns = if rk.hide == 0.0 {
        f64::NEG_INFINITY
    } else if TRANSLATED {
        th.clock + cost
    } else {
        th.clock
    };
    let (ns, source, _) = hierarchy(b, th, sh, addr >> 6, home, rk);
    if rk.posted {
        // the store retires into the store buffer after its translation; the thread waits
        // only for a free entry, time nothing can overlap (the core cannot issue stores)
        th.s.stores += 1;
        let translated = if TRANSLATED { cost } else { 0.0 };
        let stall = th.sb.post(th.clock + translated, ns, sh.p.sb_entries);
        th.clock += translated + stall;
        th.s.memory_ns += translated + stall;
        th.indep_ns += translated * rk.hide;
    } else if rk.atomic {
        let translated = if TRANSLATED { cost } else { 0.0 };
        // a line in the private cache stands for one in the L1, whose access the locked
        // operation's measured latency includes
        let line_ns = if source == DataSource::PrivateCache {
            0.0
        } else {
            ns
        };
        locked_rmw(th, sh.p.locked_op_ns, translated, line_ns);
    } else {
        plain_data::<TRANSLATED>(th, sh, rk, ns, source, cost);
    }
    if sh.sample_period > 0 {
        sh.sample_countdown -= 1;
        if sh.sample_countdown == 0 {
            sh.sample_countdown = sh.sample_period;
            take_sample(th, sh, addr, home, size, source, ns, rk.write);
        }
    }
}

/// A locked read-modify-write (docs/model.md, "Atomics"): its translation (page-table reads
/// pass locked instructions, SDM vol. 3A §8.1.2), then the fence (every earlier reference's
/// data, the store buffer drained), then the locked operation's own time and all of its
/// line's latency `ns` beyond the private cache, under nothing; nothing after it overlaps
/// anything before it.
#[cold]
fn locked_rmw(th: &mut Thread, locked_op_ns: f64, translated_ns: f64, ns: f64) {
    th.clock += translated_ns;
    th.s.memory_ns += translated_ns;
    fence(th);
    th.clock += locked_op_ns + ns;
    th.s.memory_ns += locked_op_ns + ns;
    th.s.stores += 1;
    th.s.atomics += 1;
    th.dep_shadow_ns = 0.0;
    th.window.serialise(th.indep_ns, th.s.loads + th.s.stores);
}

/// A load or read-modify-write that is not a locked instruction: its translation `cost` and
/// its data time `ns` (dependent reads and siblings: `dependent_data_ns`).
#[inline(always)]
fn plain_data<const TRANSLATED: bool>(
    th: &mut Thread,
    sh: &Shared,
    rk: &RefKind,
    ns: f64,
    source: DataSource,
    cost: f64,
) {
    // `hide` is 0 exactly for a dependent read or its sibling (`RefKind::with`)
    let data_ns = if rk.hide == 0.0 {
        dependent_data_ns(th, rk, ns, sh.p.inv_conc)
    } else {
        ns
    };
    let cost = if TRANSLATED { cost + data_ns } else { data_ns };
    if rk.write {
        th.s.stores += 1;
    } else {
        th.s.loads += 1;
        if source == DataSource::RemoteDram {
            th.s.remote_loads += 1;
        }
    }
    // loads and the stores draining share the line-fill buffers
    th.sb.load(th.clock, ns * rk.fill_share);
    th.clock += cost;
    th.s.memory_ns += cost;
    th.indep_ns += cost * rk.hide;
}

/// The time the data part (`ns`, after the translation) of a dependent read adds to its
/// thread. A dependent read waits for the load before it, so all of it; a sibling, issued
/// with the latest dependent read, only what it lasts beyond the longest data time of that
/// group, and never less than an independent reference's share of the fill buffers
/// (`ns · inv_conc`). Its translation is charged in full before it: its walk waits for the
/// address, whatever walkers the core has (docs/model.md, "One memory reference").
#[inline(always)]
fn dependent_data_ns(th: &mut Thread, rk: &RefKind, ns: f64, inv_conc: f64) -> f64 {
    if rk.sibling {
        let excess = (ns - th.dep_shadow_ns).max(ns * inv_conc);
        th.dep_shadow_ns = th.dep_shadow_ns.max(ns);
        excess
    } else {
        th.dep_shadow_ns = ns;
        ns
    }
}

#[cold]
#[allow(clippy::too_many_arguments)]
fn take_sample(
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    home: usize,
    size: PageSize,
    source: DataSource,
    ns: f64,
    write: bool,
) {
    sh.samples_taken += 1;
    let s = AccessSample {
        time_ns: th.clock as u64,
        task: th.task,
        thread: ThreadId(th.id),
        cpu: th.cpu,
        cpu_node: NodeId(th.node as u16),
        addr,
        page_node: NodeId(home as u16),
        page_size: size,
        source,
        latency_ns: ns as f32,
        write,
    };
    if sh.samples.len() < sh.max_samples {
        sh.samples.push(s);
    }
    if sh.tick_samples.len() < sh.max_samples {
        sh.tick_samples.push(s);
    }
    th.clock += sh.p.sample_ns;
}

/// Faults: first touch, next-touch migration, hinting-fault protection.
#[cold]
fn slow_path(
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    pte: crate::os::pagetable::Pte,
) -> Result<f64, SimError> {
    let mut waited = 0.0;
    if pte.migrating() {
        // a migration entry: the fault sleeps until the copy is mapped (migration_entry.rs)
        waited = migration_entry_wait(th, sh, addr);
        if !sh.os.pt.try_get(addr).needs_fault_beyond_migration() {
            // a touch inside the copy's window faults on the migration entry, taking the
            // mmap_lock before it sleeps; one before or after it does not fault
            if waited > 0.0 {
                pass_mmap_lock(th, sh);
            }
            return Ok(waited);
        }
    }
    slow_path_after_wait(th, sh, addr, pte).map(|ns| ns + waited)
}

/// Wait for the copy of the folio holding `addr` if it is running now: the time is the
/// faulting thread's, in the fault handler (`migration_entry_wait`).
fn migration_entry_wait(th: &mut Thread, sh: &mut Shared, addr: u64) -> f64 {
    let wait = sh
        .os
        .migrating
        .window(addr)
        .map_or(0.0, |w| w.wait_ns(th.clock));
    th.s.fault_ns += wait;
    sh.os.vm.migration_entry_waits += u64::from(wait > 0.0);
    wait
}

/// The faults other than a migration entry's wait.
fn slow_path_after_wait(
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    pte: crate::os::pagetable::Pte,
) -> Result<f64, SimError> {
    if pte.moves_on_touch() {
        // user-space next-touch or lazy migration first; what remains (a first touch, a
        // kernel next-touch flag, a hint fault) takes the paths below
        let ns = moves_on_touch_fault(th, sh, addr, pte);
        let pte = sh.os.pt.try_get(addr);
        // the folios this fault moved are under migration entries until its end: this thread
        // does not wait for its own copy
        let more = if pte.needs_fault_beyond_migration() {
            slow_path_after_wait(th, sh, addr, pte)?
        } else {
            // the fault (lazy) or the SIGSEGV's fault (user-space next-touch) took the
            // mmap_lock; the paths below pass it for a fault that goes on there
            pass_mmap_lock(th, sh);
            0.0
        };
        return Ok(ns + more);
    }
    let local = NodeId(th.node as u16);
    if !pte.present() {
        let f = sh.os.fault(th.task, addr, local)?;
        let ns = if f.file {
            // a page-cache page mapped: no allocation, no zeroing (os/page_cache.rs)
            let file_ns = sh.p.fault_file_ns;
            charge_fault(th, sh, file_ns)
        } else {
            take_fault(th, sh, f.node.index(), f.size)
        };
        if f.local_rule {
            sh.os.mark_fresh(&f, th.id, th.clock, th.clock + ns);
        }
        th.s.faults += 1;
        return Ok(ns);
    }
    // a fault that finds the page present (kernel next-touch, a hint fault, a protection
    // cleared) is a page fault too: it takes the mmap_lock as a first touch does
    pass_mmap_lock(th, sh);
    let size = pte.size();
    let start = size.align_down(addr);
    let mut ns = 0.0;
    if pte.next_touch() {
        // kernel next-touch (os/next_touch.rs): the fault, then a kernel copy of the folio
        // to the toucher's node (≈ 5.1 µs per 4 KiB page with the §10 figures)
        let r = sh.os.kernel_next_touch_fault(addr, local);
        ns += sh.p.fault_ns[0];
        if r.folios_moved > 0 {
            // the marked PTE is inaccessible: a flush before 3.8, or for a huge folio
            let flushes =
                sh.p.shootdowns
                    .migration_flushes(std::iter::once((size, false)));
            ns += raise_from_fault(th, sh, (start, 0), flushes, 1.0, None);
            let copy_ns = sh.p.folio_copy_ns(size, sh.p.kernel_copy_bytes_per_ns);
            let at = th.clock + ns;
            copy_on_thread(th, &r.copies, at, at + copy_ns, true, 0.0);
            ns += copy_ns;
            th.s.next_touch_migrations += 1;
            th.tlb.invalidate(start, size);
            // other touchers wait while this fault copies (migration_entry.rs)
            sh.os.mark_migrating(start, size, th.clock, th.clock + ns);
        }
    }
    if sh.os.pt.get(addr).prot_none() && sh.os.numab.is_some() {
        // NUMA balancing hint fault (os/numa_balancing.rs): cost, copies and flushes reported
        let h = sh
            .os
            .numa_hint_fault(&crate::os::numa_balancing::HintFault {
                thread: th.id,
                mm: th.task,
                cpu: th.cpu,
                nid: th.node,
                addr,
                now_ns: th.clock,
            });
        let copied = !h.copies.is_empty();
        // the fault's copies over its time (the hint fault's own costs are small beside them)
        copy_on_thread(
            th,
            &h.copies,
            th.clock + ns,
            th.clock + ns + h.ns,
            true,
            0.0,
        );
        for (s, sz) in h.invalidate {
            th.tlb.invalidate(s, sz);
        }
        // balancing's per-operation costs scale with `time_scale` (`scale_costs`)
        let scale = sh
            .os
            .numab
            .as_ref()
            .map_or(1.0, |nb| nb.params.cost_scale());
        ns += h.ns + raise_from_fault(th, sh, (0, 0), h.flushes, scale, None);
        if copied {
            // the faulting thread copies the folio; other touchers wait (migration_entry.rs)
            let now = sh.os.pt.get(addr).size();
            sh.os
                .mark_migrating(now.align_down(addr), now, th.clock, th.clock + ns);
        }
    } else if sh.os.pt.get(addr).prot_none() {
        sh.os.pt.set_prot_none(start, size, false);
        ns += sh.p.fault_ns[0];
    }
    th.s.fault_ns += ns;
    th.s.migration_ns += ns;
    Ok(ns)
}

/// Whether thread `i` of `threads` can run (for the run queues, sched.rs): not ended, not
/// waiting at a barrier.
fn runnable_in(threads: &[Thread]) -> impl Fn(usize) -> bool + '_ {
    |i| !threads[i].finished && !threads[i].waiting
}

/// `flushes` shootdowns of `[start, start + len)` raised in thread `th`'s fault handler, at
/// `scale` times the costs (os/tlb_shootdown.rs): returns the thread's time; the task's other
/// live threads lose the interrupts from when this thread's run returns, spread over
/// `work`, the `(from, ns)` of the handler's work among which the flushes are raised, and
/// the raising itself (None: at once).
fn raise_from_fault(
    th: &Thread,
    sh: &mut Shared,
    (start, len): (u64, u64),
    flushes: u32,
    scale: f64,
    work: Option<(f64, f64)>,
) -> f64 {
    let own = match &sh.task_cpus {
        Some(c) => c[th.task.index()],
        None => sh.live_threads[th.task.index()],
    };
    let cpus = own.saturating_sub(1) as usize;
    if flushes == 0 || cpus == 0 {
        return 0.0;
    }
    let sd = sh.p.shootdowns.scaled(scale);
    sh.os.vm.count_remote_flushes(flushes, cpus);
    let raise_ns = flushes as f64 * sd.initiator_ns(cpus);
    let window = work.map_or((0.0, 0.0), |(from, ns)| (from, from + ns + raise_ns));
    sh.deferred_shootdowns.push(DeferredShootdowns {
        task: th.task,
        raiser: th.id,
        range: (start, len),
        ns: flushes as f64 * sd.ipi_ns,
        window,
    });
    raise_ns
}

/// A fault on a page marked by user-space next-touch or unmapped by lazy migration
/// (os/next_touch.rs), charged to the toucher. User-space: SIGSEGV delivery, one move_pages
/// call for the unit, the mprotect restoring it and its shootdowns (the other CPUs' share is
/// handed over when this thread's run returns, spread over the call's copies). Lazy: one
/// fault plus a kernel copy per page moved.
#[cold]
fn moves_on_touch_fault(
    th: &mut Thread,
    sh: &mut Shared,
    addr: u64,
    pte: crate::os::pagetable::Pte,
) -> f64 {
    let (ns, r, rmap_hold_ns) = if pte.lazy() {
        let f = sh.os.lazy_fault(addr);
        let bytes = f.report.base_pages_moved << 12;
        let ns = sh.p.fault_ns[0] + bytes as f64 / sh.p.kernel_copy_bytes_per_ns;
        (ns, f.report, 0.0)
    } else {
        let t = sh.os.user_next_touch_fault(addr, NodeId(th.node as u16));
        let bytes = t.report.base_pages_moved << 12;
        // move_pages over the unit's PROT_NONE folios, then the mprotect restoring it
        let moved = t.report.moved.iter().map(|&(_, size)| (size, false));
        let flushes = sh.p.shootdowns.migration_flushes(moved) + 1;
        let unit = (t.unit_start, t.unit_len);
        // the flushes are raised among the call's copies
        let copy_ns = bytes as f64 / sh.p.move_pages_bytes_per_ns;
        let copies_from = th.clock + sh.p.signal_ns + sh.p.move_pages_base_ns;
        let work = Some((copies_from, copy_ns));
        let raise_ns = raise_from_fault(th, sh, unit, flushes, 1.0, work);
        let ns = sh.p.signal_ns + sh.p.move_pages_base_ns + copy_ns + sh.p.mprotect_ns + raise_ns;
        th.tlb.invalidate_range(t.unit_start, t.unit_len);
        th.s.next_touch_migrations += t.report.folios_moved;
        // before 3.8 the move_pages call's flushes are raised inside the anon_vma lock (all
        // but the mprotect's, os/anon_vma_lock.rs)
        let hold = if sh.anon_vma_lock.exclusive() {
            raise_ns * (flushes - 1) as f64 / flushes as f64
        } else {
            0.0
        };
        (ns, t.report, hold)
    };
    copy_on_thread(th, &r.copies, th.clock, th.clock + ns, true, rmap_hold_ns);
    for &(s, size) in &r.moved {
        th.tlb.invalidate(s, size);
        // moved during this fault; other touchers wait (migration_entry.rs)
        sh.os.mark_migrating(s, size, th.clock, th.clock + ns);
    }
    th.s.fault_ns += ns;
    th.s.migration_ns += ns;
    ns
}

impl MemoryView for Simulator {
    fn num_nodes(&self) -> usize {
        self.machine.topology.num_nodes()
    }
    fn distance(&self, from: NodeId, to: NodeId) -> u32 {
        self.machine.topology.distance(from, to)
    }
    fn now_ns(&self) -> u64 {
        self.now as u64
    }
    fn page(&self, task: TaskId, addr: u64) -> Option<PageInfo> {
        let ri = self.sh.os.region_index(addr)?;
        if self.sh.os.regions[ri].task != task {
            return None;
        }
        let pte = self.sh.os.pt.try_get(addr);
        pte.present().then(|| PageInfo {
            start: pte.size().align_down(addr),
            size: pte.size(),
            node: NodeId(pte.node() as u16),
        })
    }
    fn regions(&self) -> Vec<RegionInfo> {
        self.sh
            .os
            .regions
            .iter()
            .map(|r| RegionInfo {
                task: r.task,
                start: r.start,
                len_bytes: r.len,
                name: r.name.clone(),
                policy: r.policy.clone(),
                thp_advice: r.thp_advice,
            })
            .collect()
    }
    fn threads(&self) -> Vec<ThreadInfo> {
        self.threads
            .iter()
            .map(|t| ThreadInfo {
                thread: ThreadId(t.id),
                task: t.task,
                cpu: t.cpu,
                node: NodeId(t.node as u16),
            })
            .collect()
    }
    fn thread_counters(&self, thread: ThreadId) -> ThreadCounters {
        let Some(t) = self.threads.get(thread.index()) else {
            return ThreadCounters::default();
        };
        ThreadCounters {
            instructions: t.s.retired_instructions(),
            loads: t.s.loads,
            stores: t.s.stores,
            llc_misses: t.s.llc_misses,
            remote_loads: t.s.remote_loads,
            cycles: (t.clock * self.machine.core.ghz) as u64,
            private_misses: t.s.private_misses,
            page_walks: t.s.page_walks.iter().sum(),
            page_walk_private_misses: t.s.walk_private_misses,
            fault_ns: t.s.fault_ns as u64,
        }
    }
    fn node_traffic(&self) -> NodeTraffic {
        NodeTraffic {
            served: self.sh.mem.served(),
        }
    }
    // The view's samples are those gathered since the previous policy tick.
    #[allow(clippy::misnamed_getters)]
    fn samples(&self) -> &[AccessSample] {
        &self.sh.tick_samples
    }
    fn free_bytes(&self, node: NodeId) -> u64 {
        self.sh
            .os
            .free_pages
            .get(node.index())
            .map_or(0, |p| p << 12)
    }
    fn node_cpus(&self, node: NodeId) -> Vec<CpuId> {
        let mut v = self
            .machine
            .topology
            .nodes
            .get(node.index())
            .map_or_else(Vec::new, |n| n.cpus.clone());
        v.sort();
        v
    }
    fn controller_peak_bytes_per_s(&self, node: NodeId) -> Option<f64> {
        self.machine
            .nodes
            .get(node.index())
            .map(|n| n.ctrl_peak_gbps * 1e9)
    }
}

/// Convenience: simulate `workload` on `machine` with `cfg`.
pub fn simulate(
    machine: &Machine,
    workload: &dyn Workload,
    cfg: SimConfig,
) -> Result<SimResult, SimError> {
    Simulator::new(machine, workload, cfg)?.run()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn page_walk_lines_sit_above_data_keep_their_set_and_never_collide() {
        const VA_BASE: u64 = 1 << 32; // os::pagetable's
        for (va_end, max_set_bits) in [
            (VA_BASE + (64 << 20), 11),
            (VA_BASE + (3 << 30), 15),
            (1 << 40, 12),
        ] {
            let pt = PtLines::new(va_end, max_set_bits);
            // every cache's set index of a walk line is its leaf index's, as with any base
            assert!(pt.size_shift >= max_set_bits);
            // low enough for the compact private caches' tags (27 bits above 9 to 11 set bits)
            assert!(pt.base < 1 << 36, "{va_end:#x}: base {:#x}", pt.base);
            let last_data_line = (va_end - 1) >> 6;
            let mut seen = std::collections::HashSet::new();
            for size in PageSize::ALL {
                for addr in [
                    VA_BASE,
                    VA_BASE + 12345 * 4096,
                    va_end - 1,
                    (va_end - 1) & !0x7fff,
                ] {
                    let line = pt.line(addr, size);
                    assert!(line > last_data_line, "{line:#x} among the data lines");
                    let idx = addr >> (size.shift() + 3);
                    let low = (1u64 << pt.size_shift) - 1;
                    assert_eq!(line & low, idx & low, "the set bits are the leaf index's");
                    assert!(line < 2 * pt.base);
                    seen.insert((line, (size.index(), idx)));
                }
            }
            // one line per (size, leaf index), one (size, leaf index) per line
            let lines: std::collections::HashSet<_> = seen.iter().map(|x| x.0).collect();
            let keys: std::collections::HashSet<_> = seen.iter().map(|x| x.1).collect();
            assert_eq!(lines.len(), keys.len());
        }
    }
}
