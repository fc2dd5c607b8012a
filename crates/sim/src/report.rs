//! Whole-run metrics (reference/policies.md §0) from the engine's counters and samples.

use crate::results::{Metrics, NodeStats, PhaseStats, ThreadStats};
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

/// Per-node stats holding only the requests each controller served per requesting node
/// (`served[to][from]`): what the traffic metrics (LAR, imbalance) read.
pub fn nodes_serving(served: Vec<Vec<u64>>) -> Vec<NodeStats> {
    served
        .into_iter()
        .enumerate()
        .map(|(d, served_from)| NodeStats {
            node: d as u16,
            served_from,
            ..Default::default()
        })
        .collect()
}

/// The metrics of one phase: [`compute_metrics`] over the phase's per-thread counters, the
/// controller traffic its threads caused (each thread counted from the node it ran on when
/// it left the phase), and the samples taken between the phase's first start and last end.
pub fn phase_metrics(p: &PhaseStats, nodes: usize, samples: &[AccessSample]) -> Metrics {
    let mut served = vec![vec![0u64; nodes]; nodes];
    for t in &p.per_thread {
        for (to, &reads) in t.dram_by_node.iter().enumerate().take(nodes) {
            served[to][(t.node as usize).min(nodes - 1)] += reads;
        }
    }
    let per_node = nodes_serving(served);
    let (from, to) = (p.start_ns as u64, p.end_ns.ceil() as u64);
    // threads take turns within an epoch, so samples are in time order only epoch by epoch
    let window: Vec<AccessSample> = samples
        .iter()
        .filter(|s| (from..=to).contains(&s.time_ns))
        .copied()
        .collect();
    compute_metrics(&p.per_thread, &per_node, &window, p.end_ns - p.start_ns)
}
