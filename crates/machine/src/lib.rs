//! Machine descriptions: what the simulator needs to know about a NUMA machine.
//!
//! A [`Machine`] is the OS-visible [`Topology`] plus the hardware figures that set its
//! performance: per-core concurrency, caches and TLBs, per-node controllers with their
//! bandwidth-latency curves, and the links between nodes with per-direction bandwidth.
//! Presets come from reference/machines.md; every figure there carries its source.

pub mod curve;
pub mod routes;

pub use curve::Curve;
pub use routes::{LinkDir, Routes};

use numalab_core::{NodeId, PageSize, Topology};
use serde::{Deserialize, Serialize};

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
    /// Fixed cost of a page walk besides its memory references (paging-structure caches,
    /// walker pipeline), ns.
    pub walk_base_ns: f64,
}

/// Per-core parameters (all cores of a preset are alike).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CoreParams {
    pub ghz: f64,
    /// Cache misses one core keeps in flight (reference/machines.md §5.4); SMT siblings share it.
    pub concurrency_lines: f64,
    /// The private cache filter (the core's L2, or its module's).
    pub private_cache: CacheGeom,
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
}

/// OS-level costs (reference/policies.md §10); every figure overridable.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct OsCosts {
    /// First-touch fault of a 4 KiB page (trap, allocation, zeroing, mapping), ns.
    pub fault_4k_ns: f64,
    /// First-touch fault of a 2 MiB huge page (zeroing 2 MiB dominates), ns.
    pub fault_2m_ns: f64,
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
    /// Cost of splitting one huge page, ns.
    pub split_ns: f64,
    /// Cost of one TLB shootdown (IPIs to the other CPUs of the task), ns.
    pub tlb_shootdown_ns: f64,
    /// Per-sample cost of the IBS/PEBS-like sampler to the sampled thread, ns.
    pub sample_ns: f64,
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
    /// Coherence overhead added to link payload (0.2 = +20 %).
    pub link_coherence_overhead: f64,
    pub os: OsCosts,
}

impl Machine {
    /// Idle latency from CPU node `from` to memory on node `to`: the owner's idle local
    /// latency plus the hop terms of the route.
    pub fn idle_latency_ns(&self, routes: &Routes, from: NodeId, to: NodeId) -> f64 {
        let base = self.nodes[to.index()].idle_local_ns;
        base + routes.route(from, to).iter().map(|ld| self.links[ld.link].hop_ns).sum::<f64>()
    }
}
