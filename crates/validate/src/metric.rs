//! What a case measures, and how it is read from simulation results.

use numalab_sim::results::Metrics;
use numalab_sim::SimResult;
use serde::{Deserialize, Serialize};

/// A case's metric. Comparative metrics need a baseline run and a measured run; per-run
/// metrics are read from one run (or from both, for a published "before → after" pair).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Metric {
    /// G14's "performance improvement": `100 × (T_base / T_cfg − 1)` (+109 % = 2.09× faster,
    /// −43 % = 1.75× slower).
    SpeedupPercent,
    /// reference/policies.md §0 (Mi21): `100 × (T_base − T_cfg) / T_base`.
    TimeImprovementPercent,
    /// `100 × (T_cfg / T_base − 1)`: "+36 % time" (M13), a latency factor's excess.
    TimeIncreasePercent,
    /// Local access ratio of DRAM requests, % (policies.md §0).
    LarPercent,
    /// Controller imbalance, % (policies.md §0).
    ImbalancePercent,
    /// Largest share of one thread's time spent in the page-fault handler, % (G14 Table 1).
    MaxFaultTimeSharePercent,
    /// Share of private-cache (L2) misses caused by page-table walks, % (G14 Table 1).
    WalkL2MissSharePercent,
    /// STREAM's figure per instance (`mode=processes`): counted bytes of one instance's
    /// kernel repetitions over the kernel phase's time, GiB/s.
    StreamGibpsPerInstance,
    /// The same summed over all instances, GiB/s.
    StreamGibpsTotal,
    /// GF09's migration throughput: a `migrate-buffer` run's buffer bytes over its `migrate`
    /// phase's time (or `region`'s), GB/s (10⁹ B/s: GF09 prints MB/s). No value unless every
    /// page of the buffer migrated.
    MigrateGbps,
}

impl Metric {
    pub fn name(self) -> &'static str {
        match self {
            Metric::SpeedupPercent => "speedup %",
            Metric::TimeImprovementPercent => "time improvement %",
            Metric::TimeIncreasePercent => "time increase %",
            Metric::LarPercent => "LAR %",
            Metric::ImbalancePercent => "imbalance %",
            Metric::MaxFaultTimeSharePercent => "max fault-time share %",
            Metric::WalkL2MissSharePercent => "walk share of L2 misses %",
            Metric::StreamGibpsPerInstance => "STREAM GiB/s per instance",
            Metric::StreamGibpsTotal => "STREAM GiB/s total",
            Metric::MigrateGbps => "migration GB/s",
        }
    }

    /// True when the metric compares a measured run against a baseline run.
    pub fn is_comparative(self) -> bool {
        matches!(
            self,
            Metric::SpeedupPercent | Metric::TimeImprovementPercent | Metric::TimeIncreasePercent
        )
    }

    /// A comparative metric from the baseline's and the measured run's times.
    pub fn compare(self, t_base: f64, t_cfg: f64) -> Option<f64> {
        if !(t_base > 0.0 && t_cfg > 0.0) {
            return None;
        }
        match self {
            Metric::SpeedupPercent => Some(100.0 * (t_base / t_cfg - 1.0)),
            Metric::TimeImprovementPercent => Some(100.0 * (t_base - t_cfg) / t_base),
            Metric::TimeIncreasePercent => Some(100.0 * (t_cfg / t_base - 1.0)),
            _ => None,
        }
    }

    /// A per-run metric. `region` is the phase the case measures (None: the whole run); LAR,
    /// imbalance and the walk and fault shares then come from [`region_metrics`].
    pub fn of_run(self, r: &SimResult, region: Option<&str>) -> Option<f64> {
        match self {
            Metric::StreamGibpsPerInstance => stream_gibps(r, region).map(|(one, _)| one),
            Metric::StreamGibpsTotal => stream_gibps(r, region).map(|(_, all)| all),
            Metric::MigrateGbps => migrate_gbps(r, region),
            _ => match region {
                None => self.of_metrics(&r.metrics),
                Some(name) => self.of_metrics(&region_metrics(r, name)?),
            },
        }
    }

    /// A per-run metric that the run's metrics give (LAR, imbalance, fault and walk shares).
    pub fn of_metrics(self, m: &Metrics) -> Option<f64> {
        match self {
            Metric::LarPercent => m.lar_percent,
            Metric::ImbalancePercent => m.imbalance_percent,
            Metric::MaxFaultTimeSharePercent => m.max_page_fault_time_share_percent,
            Metric::WalkL2MissSharePercent => m.pagewalk_l2_miss_share_percent,
            _ => None,
        }
    }
}

/// The metrics of a measured region: the counters of phase `name` and of every other phase
/// that ran within its span (the pauses between its parts, such as a JVM's young collections
/// inside SPECjbb's measurement interval), summed thread by thread. What ran before or after
/// the span (a benchmark's untimed set-up) is left out, as the benchmark leaves it out. A phase
/// counts as inside when its whole span (first entry to last exit over every thread) is: a
/// phase that also ran outside the region (before or after it) is left out whole.
pub fn region_metrics(r: &SimResult, name: &str) -> Option<Metrics> {
    let p = r.phase(name)?;
    let mut merged = p.clone();
    for q in r.phases.iter().filter(|q| q.id != p.id) {
        if q.start_ns >= p.start_ns && q.end_ns <= p.end_ns && q.end_ns > q.start_ns {
            // threads that only ran the inner phase join with its counters
            let had = merged.per_thread.len();
            for (a, b) in merged.per_thread.iter_mut().zip(&q.per_thread) {
                a.add(b);
            }
            merged
                .per_thread
                .extend(q.per_thread.iter().skip(had).cloned());
            merged.accesses += q.accesses;
            merged.thread_ns += q.thread_ns;
        }
    }
    Some(numalab_sim::report::phase_metrics(
        &merged,
        r.per_node.len(),
        &r.samples,
    ))
}

/// Simulated time of `region` (a phase name) or of the whole run, ns.
pub fn region_time_ns(r: &SimResult, region: Option<&str>) -> Option<f64> {
    match region {
        None => Some(r.sim_time_ns),
        Some(name) => r.phase(name).map(|p| p.end_ns - p.start_ns),
    }
}

/// `migrate-buffer`'s throughput, GB/s: the buffer's size over the `migrate` phase (or
/// `region`), when every one of its pages moved (a run without a policy that migrates has no
/// throughput to score).
fn migrate_gbps(r: &SimResult, region: Option<&str>) -> Option<f64> {
    use numalab_workloads::migrate_buffer::{NAME, PAGE_BYTES};
    let (name, pairs) = numalab_workloads::spec::split(&r.workload).ok()?;
    if name != NAME {
        return None;
    }
    let size = pairs
        .iter()
        .find(|(k, _)| *k == "size")
        .and_then(|(_, v)| numalab_workloads::spec::parse_size(v))?;
    if r.migrated_pages * PAGE_BYTES < size {
        return None;
    }
    let p = r.phase(region.unwrap_or("migrate"))?;
    let ns = p.end_ns - p.start_ns;
    (ns > 0.0).then(|| size as f64 / ns)
}

/// STREAM's bandwidth figure, (per instance, all instances) in GiB/s, from the kernel phase
/// (`region`, default `triad`) of a `stream:...,mode=processes` run.
fn stream_gibps(r: &SimResult, region: Option<&str>) -> Option<(f64, f64)> {
    use numalab_workloads::stream::{counted_bytes, Kernel};
    let (name, pairs) = numalab_workloads::spec::split(&r.workload).ok()?;
    if name != "stream" {
        return None;
    }
    let get = |k: &str| pairs.iter().find(|(key, _)| *key == k).map(|(_, v)| *v);
    let n: u64 = get("n")?.parse().ok()?;
    let ntimes: u64 = get("ntimes")?.parse().ok()?;
    let phase = region.unwrap_or("triad");
    let kernel = Kernel::ALL.into_iter().find(|k| k.name() == phase)?;
    let p = r.phase(phase)?;
    let secs = (p.end_ns - p.start_ns) / 1e9;
    if secs <= 0.0 {
        return None;
    }
    let one = (counted_bytes(kernel, n) * ntimes) as f64 / secs / (1u64 << 30) as f64;
    Some((one, one * r.threads as f64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_sim::results::{NodeStats, PhaseStats, ThreadStats};

    /// One thread on node 0 of two: `dram` reads from nodes 0 and 1, `fault_ns` in faults.
    fn phase(id: u16, name: &str, span: (f64, f64), dram: [u64; 2], fault_ns: f64) -> PhaseStats {
        PhaseStats {
            id,
            name: name.into(),
            start_ns: span.0,
            end_ns: span.1,
            per_thread: vec![ThreadStats {
                node: 0,
                time_ns: span.1 - span.0,
                fault_ns,
                dram_by_node: dram.to_vec(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn a_region_holds_the_pauses_inside_it_and_not_the_set_up_before_it() {
        let r = SimResult {
            per_node: vec![NodeStats::default(), NodeStats::default()],
            phases: vec![
                // the set-up: local reads and many faults, before the region
                phase(0, "load", (0.0, 100.0), [1000, 0], 90.0),
                // the measured interval: remote reads
                phase(1, "transactions", (100.0, 1000.0), [0, 100], 0.0),
                // a pause inside it: local reads and the interval's only faults
                phase(2, "gc", (400.0, 500.0), [50, 0], 90.0),
            ],
            ..Default::default()
        };
        let m = region_metrics(&r, "transactions").unwrap();
        // 50 local of 150 reads: the load's 1000 local ones are not counted
        assert!((m.lar_percent.unwrap() - 100.0 / 3.0).abs() < 1e-9, "{m:?}");
        // 90 ns of faults in the 900 ns interval
        let share = m.max_page_fault_time_share_percent.unwrap();
        assert!((share - 10.0).abs() < 0.01, "{share}");
        assert_eq!(
            Metric::LarPercent.of_run(&r, Some("transactions")),
            m.lar_percent
        );
        assert!(region_metrics(&r, "nosuch").is_none());
    }

    #[test]
    fn migration_throughput_is_the_buffer_over_the_migrate_phase_once_all_of_it_moved() {
        let mut r = SimResult {
            workload: "migrate-buffer:size=1M,from=0,to=1,how=touch".into(),
            phases: vec![
                phase(0, "fill", (0.0, 500.0), [0, 0], 0.0),
                phase(2, "migrate", (1000.0, 1_049_576.0), [0, 0], 0.0),
            ],
            migrated_pages: 256,
            ..Default::default()
        };
        // 1 MiB in 1 048 576 ns: 1 GB/s (10^9 B/s)
        let got = Metric::MigrateGbps.of_run(&r, None).unwrap();
        assert!((got - 1.0).abs() < 1e-12, "{got}");
        assert_eq!(Metric::MigrateGbps.of_run(&r, Some("fill")), Some(2097.152));
        // a page left behind (no policy migrated it): no throughput to score
        r.migrated_pages = 255;
        assert_eq!(Metric::MigrateGbps.of_run(&r, None), None);
        // another workload has no such figure
        r.workload = "stream:n=1000".into();
        r.migrated_pages = 256;
        assert_eq!(Metric::MigrateGbps.of_run(&r, None), None);
    }
}
