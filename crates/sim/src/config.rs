//! Run configuration of the simulator.

use crate::hw::host_isa::HostIsa;
use crate::os::numa_balancing::NumaBalancingParams;
use crate::os::ThpMode;
use crate::pinning::Pinning;
use numalab_core::{MemPolicy, PageSize, Policy};

/// Progress of a running simulation, handed to the progress callback.
#[derive(Copy, Clone, Debug)]
pub struct Progress {
    pub sim_time_ns: f64,
    pub memory_references: u64,
    pub threads_done: usize,
    pub threads: usize,
}

pub struct SimConfig {
    /// A label for reports (e.g. "thp=always").
    pub label: String,
    pub pinning: Pinning,
    /// The task policy every task starts with (set_mempolicy before exec).
    pub task_policy: MemPolicy,
    pub thp: ThpMode,
    /// libhugetlbfs's `HUGETLB_MORECORE`: back every task's heap with hugetlbfs pages of
    /// this size (2M or 1G); None: plain anonymous memory (docs/model.md, "Hugetlbfs heap").
    pub hugetlb: Option<PageSize>,
    /// Automatic NUMA balancing (`kernel.numa_balancing` and its tunables); None = off.
    pub numa_balancing: Option<NumaBalancingParams>,
    /// Simulated length of one epoch: traffic of an epoch sets latencies of the next.
    pub epoch_ns: f64,
    /// One access sample every this many memory references (0: sampler off).
    pub sample_period: u64,
    /// At most this many samples are kept in the result (the rest are counted only).
    pub max_samples: usize,
    /// khugepaged wake-up interval (Carrefour-LP checks promotion every 10 ms).
    pub khugepaged_interval_ns: f64,
    /// 2 MiB ranges khugepaged examines per wake-up (pages_to_scan 4096 / 512).
    pub khugepaged_ranges_per_scan: usize,
    /// Cost of releasing an OpenMP barrier, ns (E).
    pub barrier_ns: f64,
    /// Interval of the per-node traffic timeline; 0 records none.
    pub timeline_interval_ns: f64,
    pub seed: u64,
    /// Each thread starts after a delay drawn uniformly in [0, start_skew_ns) from `seed`
    /// (0: all start together, the run is one fixed sample). Several seeds with a skew of a
    /// few microseconds sample the run-to-run variation (docs/model.md, "Runs as samples").
    pub start_skew_ns: f64,
    /// Largest mapping unit of lazy migration, bytes (a power of two, 4 KiB or more):
    /// `u64::MAX` maps the largest aligned block inside the region, as Müller does.
    pub lazy_max_block_bytes: u64,
    /// Periodic placement policies that act through the MemoryView / Action interface.
    pub policies: Vec<Box<dyn Policy>>,
    /// Called about every 64 epochs.
    pub progress: Option<Box<dyn FnMut(Progress) + Send>>,
    /// Host side only: the best engine build the run may use (`HostIsa::Avx512`, the
    /// default, lets it take the best the host has). Results are identical in every build;
    /// tests and benchmarks compare them.
    pub max_host_isa: HostIsa,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            label: String::new(),
            pinning: Pinning::None,
            task_policy: MemPolicy::Default,
            thp: ThpMode::Never,
            hugetlb: None,
            numa_balancing: None,
            epoch_ns: 20_000.0,
            sample_period: 4099,
            max_samples: 1_000_000,
            khugepaged_interval_ns: 10_000_000.0,
            khugepaged_ranges_per_scan: 8,
            barrier_ns: 1_000.0,
            timeline_interval_ns: 1_000_000.0,
            seed: 42,
            start_skew_ns: 0.0,
            lazy_max_block_bytes: u64::MAX,
            policies: Vec::new(),
            progress: None,
            max_host_isa: HostIsa::Avx512,
        }
    }
}
