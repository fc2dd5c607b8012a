//! Whole-run metrics (reference/policies.md §0) from the engine's counters and samples.

use crate::results::{Metrics, NodeStats, ThreadStats};
use numalab_core::metrics as m;
use numalab_core::AccessSample;

pub fn compute_metrics(
    threads: &[ThreadStats],
    nodes: &[NodeStats],
    samples: &[AccessSample],
    sim_time_ns: f64,
) -> Metrics {
    let served: Vec<Vec<u64>> = nodes.iter().map(|n| n.served_from.clone()).collect();
    let loads: Vec<f64> = m::controller_loads(&served);
    let dram: u64 = served.iter().flatten().sum();
    // Hot-page and sharing metrics use DRAM-served samples, as Carrefour's northbridge
    // IBS samples do: cache hits say nothing about placement.
    let dram_samples: Vec<AccessSample> = samples
        .iter()
        .filter(|s| s.source.is_dram())
        .copied()
        .collect();
    let stats = m::PageAccessStats::by_mapping(&dram_samples);
    let sum = |f: fn(&ThreadStats) -> u64| threads.iter().map(f).sum::<u64>();
    let fault_ns: Vec<u64> = threads.iter().map(|t| t.fault_ns as u64).collect();
    Metrics {
        lar_percent: m::lar_percent_from_traffic(&served),
        imbalance_percent: m::imbalance_percent(&loads),
        maptu: m::maptu(dram, sim_time_ns as u64).unwrap_or(0.0),
        pamup_percent: stats.pamup_percent(),
        nhp: (!dram_samples.is_empty()).then(|| stats.nhp(6.0)),
        psp_percent: stats.psp_percent(),
        mpki: m::mpki(sum(|t| t.llc_misses), sum(|t| t.instructions)),
        remote_load_ratio: m::remote_load_ratio(sum(|t| t.remote_loads), sum(|t| t.loads)),
        pagewalk_l2_miss_share_percent: m::pagewalk_l2_miss_share(
            sum(|t| t.walk_private_misses),
            sum(|t| t.private_misses),
        ),
        max_page_fault_time_share_percent: m::max_page_fault_time_share(
            &fault_ns,
            sim_time_ns as u64,
        ),
    }
}
