//! A shrunk run weighted back to the length of the published one (a case's `full_run`).
//!
//! Many cases shorten the program's repeated part: CG runs one of class D's 100 iterations,
//! lbm 2 of its ≈ 3 000 time steps. What comes before that part (reading the input, building
//! the matrix, first-touching every page) runs once in both, so in the shrunk run it weighs
//! tens of times more than in the published one, and every whole-run figure (the time, the
//! share of time in the fault handler, the traffic ratios) mixes the two parts in the wrong
//! proportion. As sampled simulation does (SimPoint weights each simulated region by how
//! often the full run executes it), the case names the phase where the repeated part starts
//! and how many times the published run repeats what the shrunk run did once; the scored
//! figures count that part `times` times:
//!
//! - time: `T = T_run + (times − 1) × (T_run − start of the phase − F)`, with `F` the longest
//!   time one thread spent in the fault handler during that part (its first touches happen
//!   once);
//! - every thread's counters: the run's plus `times − 1` copies of its counters in the phase
//!   and the later ones, except faults (a repeated part that touched its pages once does not
//!   fault on them again);
//! - controller traffic (LAR, imbalance): the run's plus `times − 1` copies of the part's.
//!
//! Approximation: the repetitions are taken to behave like the simulated one (no drift of the
//! placement or the caches after it), which holds for the static placements these cases
//! compare, not for a policy that keeps moving pages.

use numalab_sim::report::{compute_metrics, nodes_serving};
use numalab_sim::results::{Metrics, ThreadStats};
use numalab_sim::SimResult;
use serde::{Deserialize, Serialize};

/// The repeated part of a case's workload and how often the published run does it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FullRun {
    /// The phase where the repeated part starts; it and every later phase of the workload
    /// make up that part.
    pub from_phase: String,
    /// How many times the published run does what the shrunk run did once (≥ 1).
    pub times: u64,
}

/// The figures of a run weighted to the published run's length.
pub struct Weighted {
    pub time_ns: f64,
    pub metrics: Metrics,
}

impl FullRun {
    pub fn weigh(&self, r: &SimResult) -> Result<Weighted, String> {
        let first = r
            .phases
            .iter()
            .position(|p| p.name == self.from_phase)
            .ok_or_else(|| {
                let names: Vec<&str> = r.phases.iter().map(|p| p.name.as_str()).collect();
                format!(
                    "full_run: the run has no phase '{}' (its phases: {})",
                    self.from_phase,
                    names.join(", ")
                )
            })?;
        let part = &r.phases[first..];
        let start_ns = part
            .iter()
            .map(|p| p.start_ns)
            .fold(f64::INFINITY, f64::min);
        let extra = self.times.saturating_sub(1);
        // the part's faults are first touches done once: its repeated span leaves them out
        // (the longest one thread spent in them, as the threads fault side by side)
        let part_fault_ns = r
            .per_thread
            .iter()
            .map(|t| {
                part.iter()
                    .flat_map(|p| p.per_thread.iter().filter(|x| x.thread == t.thread))
                    .map(|x| x.fault_ns)
                    .sum::<f64>()
            })
            .fold(0.0, f64::max);
        let span_ns = (r.sim_time_ns - start_ns - part_fault_ns).max(0.0);
        let time_ns = r.sim_time_ns + extra as f64 * span_ns;

        let nodes = r.per_node.len();
        let mut threads: Vec<ThreadStats> = r.per_thread.clone();
        let mut served: Vec<Vec<u64>> = r.per_node.iter().map(|n| n.served_from.clone()).collect();
        for phase in part {
            for t in &phase.per_thread {
                let mut again = t.clone();
                again.faults = 0;
                again.fault_ns = 0.0;
                if let Some(w) = threads.iter_mut().find(|w| w.thread == t.thread) {
                    w.add_times(&again, extra);
                }
                // the controller traffic the part caused, from the node the thread ran on
                let from = (t.node as usize).min(nodes.saturating_sub(1));
                for (to, &reads) in t.dram_by_node.iter().enumerate().take(nodes) {
                    served[to][from] += reads * extra;
                }
            }
        }
        let per_node = nodes_serving(served);
        Ok(Weighted {
            time_ns,
            metrics: compute_metrics(&threads, &per_node, &[], time_ns),
        })
    }
}
