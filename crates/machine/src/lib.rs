//! Machine descriptions: what the simulator needs to know about a NUMA machine.
//!
//! A [`Machine`] is the OS-visible [`Topology`] plus the hardware figures that set its
//! performance: per-core concurrency, caches and TLBs, per-node controllers with their
//! bandwidth-latency curves, and the links between nodes with per-direction bandwidth.
//! Presets come from reference/machines.md; every figure there carries its source.
//!
//! Where a machine comes from:
//! - [`preset`] / [`presets`]: the built-in machines of reference/machines.md §1, written as
//!   TOML files (`crates/machine/presets/*.toml`) and parsed by the same loader as user files;
//! - [`Machine::from_toml_file`]: the TOML format of [`format`](mod@format) (docs/machine-format.md), which
//!   may start from a preset (`base = "..."`) or an hwloc XML file (`hwloc = "..."`) and
//!   override figures;
//! - [`hwloc::import_file`]: `lstopo --of xml` output, with [`hwloc::HwlocDefaults`] for what
//!   hwloc does not know;
//! - [`load`]: any of the three from one string, as the CLI takes it.

pub mod coherence;
pub mod cpulist;
pub mod curve;
mod error;
pub mod format;
pub mod hwloc;
mod presets;
pub mod routes;
pub mod show;
mod validate;

pub use coherence::Coherence;
pub use curve::Curve;
pub use error::MachineError;
pub use hwloc::HwlocDefaults;
pub use presets::{preset, preset_ids, presets};
pub use routes::{LinkDir, RouteError, Routes};

use numalab_core::{NodeId, PageSize, Topology};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// A set-associative cache geometry.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CacheGeom {
    pub bytes: u64,
    pub ways: u32,
}

/// One pool of TLB entries: `entries` in total, `ways`-associative (ways == entries: fully
/// associative), caching translations of the page sizes listed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TlbPool {
    pub entries: u32,
    pub ways: u32,
    pub sizes: Vec<PageSize>,
}

/// Per-core TLB hierarchy: the L1 DTLB pools and the second-level (STLB / L2 TLB) pools.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TlbConfig {
    pub l1: Vec<TlbPool>,
    pub l2: Vec<TlbPool>,
    /// Extra latency of a hit in the second level, ns.
    pub l2_hit_ns: f64,
    /// Fixed cost of a page walk besides its memory references (the walker pipeline), ns.
    pub walk_base_ns: f64,
    /// Page walks the core can have in flight at once (its page-miss handlers): 1 up to
    /// Haswell, 2 from Skylake (Intel's optimization manual). Absent in a machine file: 1.
    #[serde(default = "default_page_walkers")]
    pub page_walkers: u32,
    /// The paging-structure caches: upper-level entries a walk finds without a memory
    /// reference. Absent in a machine file: [`PscConfig::DEFAULT`].
    #[serde(default)]
    pub psc: PscConfig,
}

/// The page walkers of a machine file that does not give them: one, as every Intel core up
/// to Haswell (docs/model.md, "One memory reference", Page walkers).
pub const DEFAULT_PAGE_WALKERS: u32 = 1;

fn default_page_walkers() -> u32 {
    DEFAULT_PAGE_WALKERS
}

/// Paging-structure caches (Intel SDM vol. 3A §4.10.3): Intel keeps one per level, AMD one
/// unified page walk cache. The sizes are not documented by the vendors; the presets take
/// them from the papers that measured or modelled them (each preset says which).
#[derive(Copy, Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PscConfig {
    /// A PDE cache (2 MiB of address space an entry) and a PDPTE cache (1 GiB an entry).
    Split {
        pde_entries: u32,
        pdpte_entries: u32,
    },
    /// One cache for the entries of every level.
    Unified { entries: u32 },
}

impl PscConfig {
    /// Intel's since Nehalem as Bhattacharjee models it ("Large-reach memory management unit
    /// caches", MICRO 2013: 32-entry PDE cache, 4-entry PDPTE cache), E.
    pub const DEFAULT_PDE_ENTRIES: u32 = 32;
    pub const DEFAULT_PDPTE_ENTRIES: u32 = 4;
    pub const DEFAULT: PscConfig = PscConfig::Split {
        pde_entries: Self::DEFAULT_PDE_ENTRIES,
        pdpte_entries: Self::DEFAULT_PDPTE_ENTRIES,
    };
}

impl Default for PscConfig {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// The reorder buffer of a machine file that does not give one: 128 entries, Nehalem's and
/// Westmere's (Intel 64 and IA-32 Architectures Optimization Reference Manual, §2.5.3.1) and
/// Bulldozer's retire queue (AMD Software Optimization Guide for Family 15h, §2.11), the
/// middle of the presets' range (72 on K10 to 224 on Skylake-SP).
pub const DEFAULT_ROB_ENTRIES: u32 = 128;

fn default_rob_entries() -> u32 {
    DEFAULT_ROB_ENTRIES
}

/// How a machine numbers the hardware threads of one core (SMT siblings) in a node's CPU
/// list. Linux on x86 spreads them: every core's first thread, then every core's second
/// (node 0 of `xeon-e5-2699v4-2n` is `0-21,44-65`, and CPUs c and c + 44 are one core). Some
/// systems number them adjacently: M13's L4 system on the X5650 (`(0, 1)` one core,
/// reference/machines.md §3.4).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SiblingNumbering {
    /// Position p of a node's n CPUs is core p mod (n / smt).
    #[default]
    Spread,
    /// Position p of a node's CPUs is core p / smt.
    Adjacent,
}

impl SiblingNumbering {
    pub fn name(self) -> &'static str {
        match self {
            SiblingNumbering::Spread => "spread",
            SiblingNumbering::Adjacent => "adjacent",
        }
    }
}

/// The store buffer of a machine file that does not give one: 32 entries, Nehalem's and
/// Westmere's (Intel 64 and IA-32 Architectures Optimization Reference Manual, §2.5: "32 store
/// buffers"), the middle of the presets' range (24 on Bulldozer to 56 on Skylake-SP).
pub const DEFAULT_STORE_BUFFER_ENTRIES: u32 = 32;

fn default_store_buffer_entries() -> u32 {
    DEFAULT_STORE_BUFFER_ENTRIES
}

/// A locked read-modify-write's latency on a line in the L1 of a machine file that does not
/// give one: 19 cycles, `lock cmpxchg m64, r64` as uops.info measured it on Alder Lake-P (latency
/// 19, 19.07 cycles an instruction back to back); AMD Jaguar's is about 17 (LLVM commit
/// b1bdd97a, 2019, "An atomic CMPXCHG has a latency of ~17cy"). No reading of the presets'
/// older cores was found, so they take it too (docs/model.md, "Atomics").
pub const DEFAULT_LOCKED_OP_CYCLES: u32 = 19;

fn default_locked_op_cycles() -> u32 {
    DEFAULT_LOCKED_OP_CYCLES
}

fn default_private_cache_cores() -> u32 {
    1
}

/// Per-core parameters (all cores of a preset are alike).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoreParams {
    pub ghz: f64,
    /// How the CPUs of one core are numbered (used where `topology.smt` > 1). Absent in a
    /// machine file: the Linux x86 convention, [`SiblingNumbering::Spread`].
    #[serde(default)]
    pub siblings: SiblingNumbering,
    /// Cache misses one core keeps in flight (reference/machines.md §5.4); SMT siblings share it.
    pub concurrency_lines: f64,
    /// Reorder-buffer entries: how many instructions past an outstanding miss the core can
    /// execute before it stalls, i.e. how much compute hides under independent misses
    /// (docs/model.md, "Compute and memory overlap"). Absent in a machine file: 128.
    #[serde(default = "default_rob_entries")]
    pub rob_entries: u32,
    /// Store-buffer entries: how many stores may wait for their line after they retire, so
    /// that store misses cost the core nothing until the buffer is full (docs/model.md,
    /// "Stores"). Absent in a machine file: 32.
    #[serde(default = "default_store_buffer_entries")]
    pub store_buffer_entries: u32,
    /// Cycles a locked read-modify-write (`lock cmpxchg`, `xchg`) takes on a line already in
    /// the L1: the core's own cost of the fence and the locked operation, beyond the line's
    /// latency (docs/model.md, "Atomics"). Absent in a machine file: 19.
    #[serde(default = "default_locked_op_cycles")]
    pub locked_op_cycles: u32,
    /// The private cache filter (the core's L2, or its module's).
    pub private_cache: CacheGeom,
    /// Cores that share one private cache: 1, or 2 on AMD's Bulldozer family, whose two
    /// integer cores of a module share its L2 while each keeps its own TLBs, reorder buffer
    /// and store queue. Consecutive cores of a node share one (docs/model.md, "SMT"). Absent
    /// in a machine file: 1.
    #[serde(default = "default_private_cache_cores")]
    pub private_cache_cores: u32,
    /// Load-to-use latency of a private-cache (L2) hit, ns.
    pub private_hit_ns: f64,
    /// Load-to-use latency of a hit in the node's LLC, ns.
    pub llc_hit_ns: f64,
    pub tlb: TlbConfig,
}

/// Per-node memory hardware.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeHw {
    /// Shared last-level cache of the node (None for a CPU-less memory node).
    pub llc: Option<CacheGeom>,
    /// Sustained controller peak, reads + writes, GB/s (10^9 B/s).
    pub ctrl_peak_gbps: f64,
    /// Idle load-to-use latency of a local DRAM access, ns.
    pub idle_local_ns: f64,
    /// Bandwidth-latency curve: (utilisation %, latency ns) of a local access.
    pub curve: Curve,
    /// The node's number in the OS (hwloc `os_index`, Linux `nodeN`) when it differs from its
    /// dense id here: an importer renumbers sparse or partly disallowed node sets to 0..n and
    /// keeps the original so the Linux runtime can translate back. None: the OS number is the id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os_index: Option<u32>,
}

/// A point-to-point link between two nodes (HyperTransport, QPI, UPI, CXL), symmetric.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Link {
    pub a: NodeId,
    pub b: NodeId,
    /// Effective payload bandwidth per direction, GB/s.
    pub gbps_per_dir: f64,
    /// Latency this hop adds to an idle access, ns.
    pub hop_ns: f64,
    /// Latency this link adds when it is not the first link of a route, ns; None: `hop_ns`.
    /// On Barcelona a second hop costs less than the first (reference/machines.md §5.3:
    /// 8347 HE +30 ns for the first hop, +25 for the second): the request and its probes are
    /// already under way, only the forwarding is added. See [`Machine::route_hop_ns`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_hop_ns: Option<f64>,
}

impl Link {
    /// Latency this link adds at position `pos` of a route (0 = the first link), ns.
    #[inline]
    pub fn hop_ns_at(&self, pos: usize) -> f64 {
        if pos == 0 {
            self.hop_ns
        } else {
            self.next_hop_ns.unwrap_or(self.hop_ns)
        }
    }
}

/// OS-level costs (reference/policies.md §10); every figure overridable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OsCosts {
    /// First-touch fault of a 4 KiB page (trap, allocation, zeroing, mapping), ns.
    pub fault_4k_ns: f64,
    /// First-touch fault of a 2 MiB huge page (zeroing 2 MiB dominates), ns.
    pub fault_2m_ns: f64,
    /// A read fault on a page of a file already in the page cache (trap, page-cache lookup,
    /// mapping: no allocation, no zeroing), ns. From Linux 3.15 the same fault also maps
    /// the cached pages around it (fault-around), inside this cost.
    #[serde(default = "default_fault_file_4k_ns")]
    pub fault_file_4k_ns: f64,
    /// First-touch fault of a 1 GiB page, ns.
    pub fault_1g_ns: f64,
    /// move_pages base cost per call, ns (GF09: ≈ 160 µs).
    pub move_pages_base_ns: f64,
    /// move_pages throughput for large batches, MB/s (GF09: ≈ 600).
    pub move_pages_mbps: f64,
    /// migrate_pages base cost, ns (GF09: ≈ 400 µs) and throughput MB/s (≈ 780).
    pub migrate_pages_base_ns: f64,
    pub migrate_pages_mbps: f64,
    /// Kernel-internal page copy (next-touch, balancing migrations), MB/s (GF09: ≈ 1000).
    pub kernel_copy_mbps: f64,
    /// A huge folio (2 MiB, 1 GiB) migrated whole, as move_pages does since Linux 4.14 and
    /// NUMA balancing's hint faults do: its copy throughput, MB/s. 0 (the reference): huge
    /// folios move at the base-page rates (`move_pages_mbps`, `kernel_copy_mbps`), as when
    /// move_pages split them (before 4.14) or where no figure exists for the hardware.
    pub thp_migrate_mbps: f64,
    /// Cost of splitting one huge page, ns.
    pub split_ns: f64,
    /// A TLB shootdown's cost to the CPU that raises it when it reaches one other CPU of
    /// the task (send the IPI, wait for its acknowledgement), ns. Each further CPU adds
    /// `tlb_shootdown_per_cpu_ns` (the IPIs go out one after another); each CPU reached
    /// loses `tlb_flush_ipi_ns`. A task with no other CPU flushes locally, at no extra cost.
    pub tlb_shootdown_ns: f64,
    /// Each further CPU a shootdown reaches, to the raising CPU, ns.
    #[serde(default = "default_tlb_shootdown_per_cpu_ns")]
    pub tlb_shootdown_per_cpu_ns: f64,
    /// Each CPU a shootdown reaches: the flush interrupt (entry, INVLPG, acknowledgement,
    /// return), ns.
    #[serde(default = "default_tlb_flush_ipi_ns")]
    pub tlb_flush_ipi_ns: f64,
    /// Per-sample cost of the IBS/PEBS-like sampler to the sampled thread, ns.
    pub sample_ns: f64,
    /// User-space next-touch: delivering SIGSEGV to the handler and returning (trap, signal
    /// frame, sigreturn), ns. §10: "signal + mprotect nearly free" next to move_pages (E).
    #[serde(default = "default_signal_ns")]
    pub signal_ns: f64,
    /// One mprotect / madvise call over a range (the protection change itself; the TLB
    /// shootdown it causes is `tlb_shootdown_ns`), ns (E, §10: nearly free).
    #[serde(default = "default_mprotect_ns")]
    pub mprotect_ns: f64,
    /// The Linux release the costs and the kernel's behaviour follow, "MAJOR.MINOR" (the
    /// preset's study's kernel): where a mechanism changed between releases the model does
    /// what that release does (docs/model.md, "TLB shootdowns").
    #[serde(default = "default_linux")]
    pub linux: String,
    /// A context switch's direct cost, when threads take turns on a CPU, ns.
    #[serde(default = "default_context_switch_ns")]
    pub context_switch_ns: f64,
}

fn default_fault_file_4k_ns() -> f64 {
    OsCosts::reference().fault_file_4k_ns
}

fn default_context_switch_ns() -> f64 {
    OsCosts::reference().context_switch_ns
}

fn default_tlb_shootdown_per_cpu_ns() -> f64 {
    OsCosts::reference().tlb_shootdown_per_cpu_ns
}

fn default_tlb_flush_ipi_ns() -> f64 {
    OsCosts::reference().tlb_flush_ipi_ns
}

fn default_linux() -> String {
    OsCosts::reference().linux
}

/// "MAJOR.MINOR" (a patch level and anything after it ignored: "2.6.27" is 2.6) as a pair,
/// or None when it does not start so.
pub fn parse_linux_version(v: &str) -> Option<(u32, u32)> {
    let mut parts = v.trim().split('.');
    let major = parts.next()?.parse().ok()?;
    let minor = parts
        .next()?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    Some((major, minor))
}

fn default_signal_ns() -> f64 {
    OsCosts::reference().signal_ns
}

fn default_mprotect_ns() -> f64 {
    OsCosts::reference().mprotect_ns
}

impl OsCosts {
    /// The figures of reference/policies.md §10: migration costs measured by GF09 on the
    /// Opteron 8347 HE machine (M), fault, split, shootdown and sampling costs estimated (E).
    /// Every preset writes these out explicitly; files that omit `[os]` get them.
    pub fn reference() -> OsCosts {
        OsCosts {
            fault_4k_ns: 1_000.0,
            fault_2m_ns: 80_000.0,
            fault_1g_ns: 50_000_000.0,
            // E: 0.23 × fault_4k_ns. On a Linux 6.18 host (`numalab calibrate`, docs/
            // calibrate.md) a read fault on a cached file page took 340-380 ns (mapping the
            // 16 pages of fault-around) against 1 500-1 580 ns for an anonymous first
            // touch: no allocation and no clearing
            fault_file_4k_ns: 230.0,
            move_pages_base_ns: 160_000.0,
            move_pages_mbps: 600.0,
            migrate_pages_base_ns: 400_000.0,
            migrate_pages_mbps: 780.0,
            kernel_copy_mbps: 1_000.0,
            thp_migrate_mbps: 0.0,
            split_ns: 20_000.0,
            // The Multikernel's unmap latency of Linux 2.6.26 on an 8 × 4-core Opteron
            // (Baumann et al., SOSP 2009, Fig. 7, as read off the plot): ≈ 5 200 cycles with
            // one other core, ≈ 29 500 with 31, so ≈ 810 cycles a further core; at 2 GHz
            // (that machine's clock). It includes the unmap call's own work (E: a few
            // hundred ns too much).
            tlb_shootdown_ns: 2_600.0,
            tlb_shootdown_per_cpu_ns: 405.0,
            // the flush interrupt on each CPU reached: ≈ 800 cycles of trap (Baumann et al.
            // 2009) and one INVLPG, 260 cycles (`__flush_tlb_one`, I. Molnar, LKML
            // 2015-06): ≈ 1 060 cycles at 2 GHz (E: the sum of two published parts)
            tlb_flush_ipi_ns: 530.0,
            sample_ns: 200.0,
            signal_ns: 2_000.0,
            mprotect_ns: 1_000.0,
            linux: "6.1".to_string(),
            // E: the direct cost measured by two processes passing a byte through pipes
            // (Ousterhout's method) is a few µs on 2-4 GHz x86 (Li, Ding & Shen, "Quantifying
            // the cost of context switch", ExpCS 2007); the caches and TLB the switch
            // disturbs are the model's own (sim/src/sched.rs)
            context_switch_ns: 3_000.0,
        }
    }

    /// Whether the modelled kernel is `major.minor` or later.
    pub fn linux_at_least(&self, major: u32, minor: u32) -> bool {
        parse_linux_version(&self.linux).is_some_and(|v| v >= (major, minor))
    }

    /// The raising CPU's time for one shootdown reaching `cpus` other CPUs, ns (0 for none:
    /// a local flush, in the operation's own cost).
    pub fn shootdown_initiator_ns(&self, cpus: usize) -> f64 {
        match cpus {
            0 => 0.0,
            k => self.tlb_shootdown_ns + (k - 1) as f64 * self.tlb_shootdown_per_cpu_ns,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Machine {
    pub id: String,
    pub description: String,
    /// Where the figures come from (keys of reference/machines.md).
    pub source: String,
    pub topology: Topology,
    pub core: CoreParams,
    /// Indexed by node id.
    pub nodes: Vec<NodeHw>,
    pub links: Vec<Link>,
    /// Normalised queueing shape applied to links: (utilisation %, latency ÷ idle).
    pub link_shape: Curve,
    /// How the links carry coherence traffic (coherence.rs).
    #[serde(default)]
    pub coherence: Coherence,
    /// With [`Coherence::Flat`]: the coherence traffic added to a line's payload on the
    /// links (0.2 = +20 %); 0 with the HyperTransport protocols, whose messages are counted.
    pub link_coherence_overhead: f64,
    /// The sockets keep an in-memory coherence directory (Intel's "memory directory": bits
    /// in each line's ECC saying whether another socket may hold it), so a remote read that
    /// changes a line's directory state writes the line back to its home node
    /// (docs/model.md, "Memory directory").
    pub memory_directory: bool,
    pub os: OsCosts,
}

impl Machine {
    /// Idle latency from CPU node `from` to memory on node `to`: the owner's idle local
    /// latency plus the hop terms of the route.
    pub fn idle_latency_ns(&self, routes: &Routes, from: NodeId, to: NodeId) -> f64 {
        let base = self.nodes[to.index()].idle_local_ns;
        base + self.route_hop_ns(routes.route(from, to))
    }

    /// The idle latency the links of `route` add, ns: the first link's `hop_ns`, then each
    /// further link's `next_hop_ns` (or `hop_ns` when it has none).
    pub fn route_hop_ns(&self, route: &[LinkDir]) -> f64 {
        route
            .iter()
            .enumerate()
            .map(|(pos, ld)| self.links[ld.link].hop_ns_at(pos))
            .sum()
    }

    /// Peak bandwidth of CPUs on `from` reading memory on `to`, GB/s: the owner's controller
    /// peak, capped by the narrowest link of the route (reference/machines.md §5.3), in the
    /// links' own units: with a protocol that counts its messages this is the raw capacity,
    /// and [`Machine::read_payload_gbps`] the lines a read stream gets (what `machine show`
    /// prints).
    pub fn peak_bandwidth_gbps(&self, routes: &Routes, from: NodeId, to: NodeId) -> f64 {
        routes
            .route(from, to)
            .iter()
            .map(|ld| self.links[ld.link].gbps_per_dir)
            .fold(self.nodes[to.index()].ctrl_peak_gbps, f64::min)
    }

    /// The private cache of every CPU, as dense indices (the nodes' caches in node order):
    /// `(cpu id, cache)` for each CPU. `core.private_cache_cores` consecutive cores of a node
    /// share one (a node's last cache may have fewer); SMT siblings share their core's.
    pub fn private_caches_of_cpus(&self) -> Vec<(numalab_core::CpuId, usize)> {
        let share = self.core.private_cache_cores.max(1) as usize;
        let smt = self.topology.smt.max(1) as usize;
        let cores = self.cores_of_cpus();
        let mut out = Vec::with_capacity(cores.len());
        let (mut at, mut first_core, mut first_cache) = (0, 0, 0);
        for n in &self.topology.nodes {
            let node_cores = n.cpus.len().div_ceil(smt);
            for &(cpu, core) in &cores[at..at + n.cpus.len()] {
                out.push((cpu, first_cache + (core - first_core) / share));
            }
            at += n.cpus.len();
            first_core += node_cores;
            first_cache += node_cores.div_ceil(share);
        }
        out
    }

    /// The physical core of every CPU, as dense indices (the nodes' cores in node order):
    /// `(cpu id, core)` for each CPU. SMT siblings share a core (`core.siblings` says how they
    /// are numbered); a node whose CPU count is not a multiple of `smt` gets a last, partial
    /// core.
    pub fn cores_of_cpus(&self) -> Vec<(numalab_core::CpuId, usize)> {
        let smt = self.topology.smt.max(1) as usize;
        let mut out = Vec::with_capacity(self.topology.num_cpus());
        let mut first = 0;
        for n in &self.topology.nodes {
            let cores = n.cpus.len().div_ceil(smt);
            for (p, &cpu) in n.cpus.iter().enumerate() {
                let local = match self.core.siblings {
                    SiblingNumbering::Spread => p % cores.max(1),
                    SiblingNumbering::Adjacent => p / smt,
                };
                out.push((cpu, first + local));
            }
            first += cores;
        }
        out
    }

    /// The static routes over this machine's links (see [`Routes::compute`]).
    pub fn routes(&self) -> Result<Routes, RouteError> {
        Routes::compute(self.topology.num_nodes(), &self.links)
    }

    /// Check every figure: the topology, per-node hardware, curves, TLB pools, links and
    /// their routes, OS costs. The error names the key of the TOML format that is wrong. An
    /// imported machine keeps the OS's distance matrix as reported, which may break the rule
    /// that a local distance is its row's smallest: check those with
    /// [`hwloc::validate_imported`].
    pub fn validate(&self) -> Result<(), MachineError> {
        validate::check(self).map_err(|p| p.into_error(format!("machine '{}'", self.id)))
    }

    /// Parse a machine file (format: [`format`](mod@format), docs/machine-format.md). `base` and `hwloc`
    /// paths in it are taken relative to the file's folder.
    pub fn from_toml_file(path: impl AsRef<Path>) -> Result<Machine, MachineError> {
        format::load_file(path.as_ref())
    }

    /// Parse machine-file text. `origin` names it in errors (a file name, say); relative
    /// `base` / `hwloc` paths are taken from the current directory.
    pub fn from_toml_str(text: &str, origin: &str) -> Result<Machine, MachineError> {
        format::parse_str(text, origin, None)
    }

    /// The machine as a complete TOML machine file (no `base`), which parses back to an equal
    /// machine.
    pub fn to_toml(&self) -> String {
        format::to_toml(self)
    }
}

/// A machine by name, as the CLI takes it: a built-in preset id, a `.toml` machine file or an
/// hwloc `.xml` file (imported with [`HwlocDefaults`]). An unknown name is an error that lists
/// every preset id.
pub fn load(name_or_path: &str) -> Result<Machine, MachineError> {
    if let Some(m) = preset(name_or_path) {
        return Ok(m);
    }
    let path = Path::new(name_or_path);
    let ext = path
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("toml") => Machine::from_toml_file(path),
        Some("xml") => hwloc::import_file(path, &HwlocDefaults::default()),
        _ => Err(MachineError::Unknown {
            name: name_or_path.to_string(),
            presets: preset_ids().into_iter().map(String::from).collect(),
        }),
    }
}
