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

/// Accepted epoch lengths, simulated µs (`--epoch-us`, a study's `epoch_us`). Below 0.1 µs an
/// epoch is shorter than one DRAM access (60-150 ns on the presets), so a thread could not
/// finish a reference inside it and a run would take ~10^4 epochs per simulated millisecond of
/// bookkeeping; above 1000 µs it is longer than a scheduler tick at CONFIG_HZ=1000, and the
/// work the engine runs at epoch ends (policy ticks, khugepaged, NUMA-balancing scans, queue
/// latencies) would be quantised to it. docs/VALIDATION.md, "Epoch length", shows results
/// stable from 5 to 100 µs.
pub const EPOCH_US_RANGE: std::ops::RangeInclusive<f64> = 0.1..=1000.0;

/// Largest start skew, simulated µs: a skew samples start-up jitter (thread creation takes
/// tens of µs), and a second of it is already far beyond that; the engine steps through the
/// idle epochs of a delayed start, so an unbounded skew would never end.
pub const START_SKEW_US_MAX: f64 = 1e6;

/// A number for an error message: plain, or in exponent form where plain would print
/// hundreds of digits (`1e300`, `1e-30`).
pub fn shown(v: f64) -> String {
    if v != 0.0 && v.is_finite() && !(1e-4..1e9).contains(&v.abs()) {
        format!("{v:e}")
    } else {
        format!("{v}")
    }
}

/// Why `epoch_us` is refused, or None when it is in [`EPOCH_US_RANGE`].
pub fn epoch_us_problem(epoch_us: f64) -> Option<String> {
    (!EPOCH_US_RANGE.contains(&epoch_us)).then(|| {
        format!(
            "{}: expected a number of simulated microseconds in {}..={} (default 20)",
            shown(epoch_us),
            EPOCH_US_RANGE.start(),
            EPOCH_US_RANGE.end()
        )
    })
}

/// Why `start_skew_us` is refused, or None when it is in 0..=[`START_SKEW_US_MAX`].
pub fn start_skew_us_problem(start_skew_us: f64) -> Option<String> {
    (!(0.0..=START_SKEW_US_MAX).contains(&start_skew_us)).then(|| {
        format!(
            "{}: expected a number of simulated microseconds in 0..={}",
            shown(start_skew_us),
            shown(START_SKEW_US_MAX)
        )
    })
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
