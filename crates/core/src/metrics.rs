//! NUMA metrics of `reference/policies.md` §0, as small pure functions.
//!
//! Every function returns `None` where the metric is undefined (a zero denominator, no data,
//! mismatched inputs) instead of a NaN or an infinity, so a report can print "n/a" and a
//! policy cannot be steered by a NaN. Percentages are in 0..=100; ratios named `*_ratio` or
//! `*_shares` are fractions in 0..=1 unless their name says `percent`.
//!
//! | Metric | Function(s) |
//! |---|---|
//! | LAR | [`lar_percent_from_traffic`], [`lar_percent_per_node`], [`lar_percent_from_samples`] |
//! | Imbalance | [`controller_loads`], [`imbalance_percent`] |
//! | MAPTU | [`maptu`], [`maptu_per_node`] |
//! | PAMUP, NHP, PSP, hot pages | [`PageAccessStats`] |
//! | MPKI | [`mpki`] |
//! | Remote load ratio | [`remote_load_ratio`] |
//! | Page-walk L2-miss share | [`pagewalk_l2_miss_share`] |
//! | Max page-fault time share | [`max_page_fault_time_share`] |
//! | NUMA factor | [`numa_factor`] |
//! | L3-miss source shares A-D | [`l3_miss_source_shares`] |
//! | Weighted speedup | [`weighted_speedup`] |
//! | Execution-time improvement | [`execution_time_improvement_percent`], [`mean`] |

use crate::ids::{TaskId, ThreadId};
use crate::page::PageSize;
use crate::sample::AccessSample;
use std::collections::{HashMap, HashSet};

/// `100 · num / den`, `None` when `den == 0`.
#[inline]
fn percent(num: f64, den: f64) -> Option<f64> {
    if den == 0.0 {
        None
    } else {
        Some(100.0 * num / den)
    }
}

/// `num / den`, `None` when `den == 0`.
#[inline]
fn ratio(num: f64, den: f64) -> Option<f64> {
    if den == 0.0 {
        None
    } else {
        Some(num / den)
    }
}

// ---------------------------------------------------------------------------------------------
// LAR
// ---------------------------------------------------------------------------------------------

/// Local access ratio from controller counters, %.
///
/// `served[to][from]` = DRAM requests served by the controller of node `to` on behalf of CPUs
/// of node `from`. A request is local when `to == from` (the diagonal), so
/// `LAR = 100 · Σ_n served[n][n] / Σ_{to,from} served[to][from]`.
/// Rows may be ragged (missing entries count as 0). `None` when there is no DRAM traffic.
pub fn lar_percent_from_traffic(served: &[Vec<u64>]) -> Option<f64> {
    let mut local = 0u64;
    let mut total = 0u64;
    for (to, row) in served.iter().enumerate() {
        total += row.iter().sum::<u64>();
        local += row.get(to).copied().unwrap_or(0);
    }
    percent(local as f64, total as f64)
}

/// Local access ratio of each accessing node from controller counters, %.
///
/// For accessing node `n`: `100 · served[n][n] / Σ_to served[to][n]` (the share of node `n`'s
/// DRAM requests that its own controller served). Entry `n` is `None` when node `n` made no
/// DRAM request. The result has one entry per column present in any row.
pub fn lar_percent_per_node(served: &[Vec<u64>]) -> Vec<Option<f64>> {
    let nodes = served
        .iter()
        .map(Vec::len)
        .max()
        .unwrap_or(0)
        .max(served.len());
    (0..nodes)
        .map(|from| {
            let total: u64 = served
                .iter()
                .map(|row| row.get(from).copied().unwrap_or(0))
                .sum();
            let local = served
                .get(from)
                .and_then(|row| row.get(from))
                .copied()
                .unwrap_or(0);
            percent(local as f64, total as f64)
        })
        .collect()
}

/// Local access ratio from samples, %.
///
/// Only DRAM-served samples count (`source.is_dram()`); a sample is local when the accessing
/// CPU's node is the page's node (`cpu_node == page_node`).
/// `LAR = 100 · local DRAM samples / DRAM samples`; `None` without DRAM-served samples.
pub fn lar_percent_from_samples(samples: &[AccessSample]) -> Option<f64> {
    let (local, dram) = samples
        .iter()
        .filter(|s| s.source.is_dram())
        .fold((0u64, 0u64), |(l, d), s| (l + s.is_local() as u64, d + 1));
    percent(local as f64, dram as f64)
}

// ---------------------------------------------------------------------------------------------
// Imbalance
// ---------------------------------------------------------------------------------------------

/// DRAM requests served by each controller: `A_to = Σ_from served[to][from]` (row sums).
pub fn controller_loads(served: &[Vec<u64>]) -> Vec<f64> {
    served
        .iter()
        .map(|row| row.iter().sum::<u64>() as f64)
        .collect()
}

/// Controller imbalance, %: `100 · σ(A) / μ(A)` with the *population* standard deviation
/// `σ = sqrt((1/N) Σ (A_n − μ)²)` over the `N` values of `per_node` (typically
/// [`controller_loads`] of one interval). `None` when `per_node` is empty or its mean is 0.
pub fn imbalance_percent(per_node: &[f64]) -> Option<f64> {
    let n = per_node.len() as f64;
    let m = mean(per_node)?;
    if m == 0.0 {
        return None;
    }
    let var = per_node.iter().map(|a| (a - m) * (a - m)).sum::<f64>() / n;
    Some(100.0 * var.sqrt() / m)
}

// ---------------------------------------------------------------------------------------------
// MAPTU
// ---------------------------------------------------------------------------------------------

/// MAPTU: DRAM accesses per microsecond of the interval, whole machine:
/// `dram_accesses / (interval_ns / 1000)`. `None` for an empty interval.
pub fn maptu(dram_accesses: u64, interval_ns: u64) -> Option<f64> {
    ratio(dram_accesses as f64 * 1000.0, interval_ns as f64)
}

/// MAPTU per node, as Carrefour-LP uses it: `maptu(dram_accesses, interval_ns) / nodes`.
/// `None` for an empty interval or zero nodes.
pub fn maptu_per_node(dram_accesses: u64, interval_ns: u64, nodes: usize) -> Option<f64> {
    ratio(maptu(dram_accesses, interval_ns)?, nodes as f64)
}

// ---------------------------------------------------------------------------------------------
// Page-level sample statistics: PAMUP, NHP, PSP, hot pages
// ---------------------------------------------------------------------------------------------

/// Threshold of a hot page, % of all samples (policies.md §0: 8 balanced nodes carry 12.5 %
/// each; half of that can unbalance one).
pub const HOT_PAGE_THRESHOLD_PCT: f64 = 6.0;

/// A page of one task. `start` is what the grouping function returned (by default the page's
/// start address); `size` is the mapping's size when grouping by mapping
/// ([`PageAccessStats::by_mapping`]), `None` with a custom grouping.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PageKey {
    pub task: TaskId,
    pub start: u64,
    pub size: Option<PageSize>,
}

/// Samples seen on one page.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Default)]
pub struct PageStat {
    /// Samples that hit the page.
    pub samples: u64,
    /// Distinct threads among those samples.
    pub threads: u32,
}

/// Per-page sample counts and distinct-thread counts, built in one pass over the samples;
/// PAMUP, NHP, PSP and the hot-page list are read from it.
#[derive(Clone, Debug, Default)]
pub struct PageAccessStats {
    pages: HashMap<PageKey, PageStat>,
    total: u64,
}

impl PageAccessStats {
    /// Groups samples by `(task, page_of(sample))`; `page_of` typically aligns the address
    /// down to a fixed granularity (e.g. `|s| s.addr & !0xfff` to look at 4 KiB subpages of
    /// huge pages, as huge-page false-sharing detection does).
    pub fn from_samples(samples: &[AccessSample], page_of: impl Fn(&AccessSample) -> u64) -> Self {
        Self::build(samples, |s| PageKey {
            task: s.task,
            start: page_of(s),
            size: None,
        })
    }

    /// Groups samples by the page that mapped them: `(task, page_size.align_down(addr),
    /// page_size)`. The size is part of the key so that a 2 MiB page and, after a split, its
    /// first 4 KiB subpage stay distinct.
    pub fn by_mapping(samples: &[AccessSample]) -> Self {
        Self::build(samples, |s| PageKey {
            task: s.task,
            start: s.page_size.align_down(s.addr),
            size: Some(s.page_size),
        })
    }

    fn build(samples: &[AccessSample], key_of: impl Fn(&AccessSample) -> PageKey) -> Self {
        let mut pages: HashMap<PageKey, PageStat> = HashMap::new();
        let mut seen: HashSet<(PageKey, ThreadId)> = HashSet::new();
        for s in samples {
            let key = key_of(s);
            let stat = pages.entry(key).or_default();
            stat.samples += 1;
            if seen.insert((key, s.thread)) {
                stat.threads += 1;
            }
        }
        PageAccessStats {
            pages,
            total: samples.len() as u64,
        }
    }

    /// Number of samples aggregated.
    pub fn total_samples(&self) -> u64 {
        self.total
    }

    /// Number of distinct pages sampled.
    pub fn page_count(&self) -> usize {
        self.pages.len()
    }

    /// Statistics of one page, if it was sampled.
    pub fn get(&self, key: &PageKey) -> Option<PageStat> {
        self.pages.get(key).copied()
    }

    /// All sampled pages, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = (&PageKey, &PageStat)> {
        self.pages.iter()
    }

    /// PAMUP: % of all samples that hit the single most-sampled page,
    /// `100 · max_p samples(p) / total`. `None` without samples.
    pub fn pamup_percent(&self) -> Option<f64> {
        let max = self.pages.values().map(|p| p.samples).max().unwrap_or(0);
        percent(max as f64, self.total as f64)
    }

    /// NHP: number of pages holding strictly more than `threshold_pct` % of all samples
    /// (the metric's threshold is [`HOT_PAGE_THRESHOLD_PCT`] = 6 %). 0 without samples.
    pub fn nhp(&self, threshold_pct: f64) -> usize {
        self.pages
            .values()
            .filter(|p| self.is_hot(p, threshold_pct))
            .count()
    }

    /// PSP: % of samples that hit pages touched (in these samples) by at least two distinct
    /// threads, `100 · Σ_{p: threads(p) ≥ 2} samples(p) / total`. `None` without samples.
    pub fn psp_percent(&self) -> Option<f64> {
        let shared: u64 = self
            .pages
            .values()
            .filter(|p| p.threads >= 2)
            .map(|p| p.samples)
            .sum();
        percent(shared as f64, self.total as f64)
    }

    /// Pages holding strictly more than `threshold_pct` % of all samples, most sampled first
    /// (ties by key, so the order is deterministic).
    pub fn hot_pages(&self, threshold_pct: f64) -> Vec<(PageKey, PageStat)> {
        let mut hot: Vec<(PageKey, PageStat)> = self
            .pages
            .iter()
            .filter(|(_, p)| self.is_hot(p, threshold_pct))
            .map(|(k, p)| (*k, *p))
            .collect();
        hot.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(&b.0)));
        hot
    }

    #[inline]
    fn is_hot(&self, p: &PageStat, threshold_pct: f64) -> bool {
        self.total > 0 && 100.0 * p.samples as f64 > threshold_pct * self.total as f64
    }
}

// ---------------------------------------------------------------------------------------------
// Counter ratios
// ---------------------------------------------------------------------------------------------

/// MPKI (cache pressure): `llc_misses · 1000 / instructions`, where LLC misses = load misses
/// + store misses. `None` when no instruction retired.
pub fn mpki(llc_misses: u64, instructions: u64) -> Option<f64> {
    ratio(llc_misses as f64 * 1000.0, instructions as f64)
}

/// Remote load ratio (fraction, 0..=1): `remote_loads / loads` retired, per task.
/// `None` when no load retired.
pub fn remote_load_ratio(remote_loads: u64, loads: u64) -> Option<f64> {
    ratio(remote_loads as f64, loads as f64)
}

/// Page-walk L2-miss share, %: `100 · walk_l2_misses / all_l2_misses` (L2 misses caused by
/// page-table walks over all L2 misses; a proxy for TLB cost). `None` without L2 misses.
pub fn pagewalk_l2_miss_share(walk_l2_misses: u64, all_l2_misses: u64) -> Option<f64> {
    percent(walk_l2_misses as f64, all_l2_misses as f64)
}

/// Max page-fault time share, %: `100 · max_c fault_ns[c] / elapsed_ns` (the max over cores,
/// because page-table lock contention follows the worst core). `None` when there is no core or
/// `elapsed_ns == 0`.
pub fn max_page_fault_time_share(fault_ns_per_core: &[u64], elapsed_ns: u64) -> Option<f64> {
    let max = *fault_ns_per_core.iter().max()?;
    percent(max as f64, elapsed_ns as f64)
}

/// NUMA factor: `remote_time / local_time` (e.g. remote over local access latency).
/// `None` when `local_time == 0`.
pub fn numa_factor(remote_time: f64, local_time: f64) -> Option<f64> {
    ratio(remote_time, local_time)
}

/// L3-miss source shares (fractions, 0..=1) of L3-missing retired loads served by local DRAM
/// (`a`), remote DRAM (`b`), remote HITM (`c`) and remote forward (`d`), each over
/// `a + b + c + d` (policies.md's [fix]: the printed denominator omits `b`; with the fix the
/// four shares sum to 1). `None` when all four are 0.
pub fn l3_miss_source_shares(a: u64, b: u64, c: u64, d: u64) -> Option<[f64; 4]> {
    let sum = (a + b + c + d) as f64;
    if sum == 0.0 {
        return None;
    }
    Some([
        a as f64 / sum,
        b as f64 / sum,
        c as f64 / sum,
        d as f64 / sum,
    ])
}

/// Weighted speedup: `(1/N) Σ_i ipc_cfg[i] / ipc_base[i]`, the baseline being the same co-run
/// with all memory local; > 1 is better. `None` when the slices are empty, of different
/// lengths, or a baseline IPC is 0.
pub fn weighted_speedup(ipc_cfg: &[f64], ipc_base: &[f64]) -> Option<f64> {
    if ipc_cfg.is_empty() || ipc_cfg.len() != ipc_base.len() {
        return None;
    }
    let mut sum = 0.0;
    for (c, b) in ipc_cfg.iter().zip(ipc_base) {
        sum += ratio(*c, *b)?;
    }
    Some(sum / ipc_cfg.len() as f64)
}

/// Execution-time improvement, %: `100 · (t_base − t_cfg) / t_base` (positive = faster).
/// `T` is the mean run time over all co-running instances (see [`mean`]). `None` when
/// `t_base == 0`.
pub fn execution_time_improvement_percent(t_base: f64, t_cfg: f64) -> Option<f64> {
    percent(t_base - t_cfg, t_base)
}

/// Arithmetic mean, `None` for an empty slice.
pub fn mean(values: &[f64]) -> Option<f64> {
    if values.is_empty() {
        None
    } else {
        Some(values.iter().sum::<f64>() / values.len() as f64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::{CpuId, NodeId};
    use crate::sample::DataSource;

    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() < 1e-9
    }

    fn sample(task: u32, thread: u32, addr: u64, cpu_node: u16, page_node: u16) -> AccessSample {
        AccessSample {
            time_ns: 0,
            task: TaskId(task),
            thread: ThreadId(thread),
            cpu: CpuId(0),
            cpu_node: NodeId(cpu_node),
            addr,
            page_node: NodeId(page_node),
            page_size: PageSize::Base4K,
            source: if cpu_node == page_node {
                DataSource::LocalDram
            } else {
                DataSource::RemoteDram
            },
            latency_ns: 100.0,
            write: false,
        }
    }

    #[test]
    fn lar_from_traffic() {
        // served[to][from]: controller 0 served 30 for node 0 and 10 for node 1; controller 1
        // served 20 for node 0 and 40 for node 1. Local = 30 + 40 = 70, total = 100 -> 70 %.
        let served = vec![vec![30, 10], vec![20, 40]];
        assert!(close(lar_percent_from_traffic(&served).unwrap(), 70.0));
        // Per accessing node: node 0 made 30 + 20 = 50 requests, 30 local -> 60 %;
        // node 1 made 10 + 40 = 50, 40 local -> 80 %.
        let per = lar_percent_per_node(&served);
        assert!(close(per[0].unwrap(), 60.0) && close(per[1].unwrap(), 80.0));
        // No traffic: undefined.
        assert_eq!(lar_percent_from_traffic(&[vec![0, 0], vec![0, 0]]), None);
        assert_eq!(lar_percent_from_traffic(&[]), None);
        // Node 1 idle -> its LAR is None, node 0's is 100 % (5 of 5 local).
        assert_eq!(
            lar_percent_per_node(&[vec![5, 0], vec![0, 0]]),
            vec![Some(100.0), None]
        );
    }

    #[test]
    fn lar_from_samples() {
        // 3 DRAM samples local, 1 DRAM remote, 2 cache-served (ignored) -> 3 / 4 = 75 %.
        let mut s = vec![
            sample(0, 0, 0x1000, 0, 0),
            sample(0, 0, 0x2000, 1, 1),
            sample(0, 0, 0x3000, 0, 0),
            sample(0, 0, 0x4000, 0, 1),
        ];
        let mut c1 = sample(0, 0, 0x5000, 0, 1);
        c1.source = DataSource::RemoteCache;
        let mut c2 = sample(0, 0, 0x6000, 0, 1);
        c2.source = DataSource::PrivateCache;
        s.push(c1);
        s.push(c2);
        assert!(close(lar_percent_from_samples(&s).unwrap(), 75.0));
        // Only cache-served samples: undefined.
        assert_eq!(lar_percent_from_samples(&[c1, c2]), None);
        assert_eq!(lar_percent_from_samples(&[]), None);
    }

    #[test]
    fn imbalance() {
        // Row sums of [[30,10],[20,40]] = [40, 60].
        let loads = controller_loads(&[vec![30, 10], vec![20, 40]]);
        assert_eq!(loads, vec![40.0, 60.0]);
        // mean 50, deviations ±10, population variance (100 + 100) / 2 = 100, σ = 10
        // -> 100 · 10 / 50 = 20 %.
        assert!(close(imbalance_percent(&loads).unwrap(), 20.0));
        // [2, 4, 4, 4, 5, 5, 7, 9]: mean 5, squared deviations 9+1+1+1+0+0+4+16 = 32,
        // variance 32 / 8 = 4, σ = 2 -> 100 · 2 / 5 = 40 % (the sample stddev would give 42.76).
        let v = [2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0];
        assert!(close(imbalance_percent(&v).unwrap(), 40.0));
        // Perfect balance -> 0 %.
        assert!(close(imbalance_percent(&[7.0, 7.0, 7.0]).unwrap(), 0.0));
        assert_eq!(imbalance_percent(&[0.0, 0.0]), None);
        assert_eq!(imbalance_percent(&[]), None);
    }

    #[test]
    fn maptu_values() {
        // 50 000 accesses in 1 ms = 1000 µs -> 50 per µs; over 4 nodes -> 12.5.
        assert!(close(maptu(50_000, 1_000_000).unwrap(), 50.0));
        assert!(close(maptu_per_node(50_000, 1_000_000, 4).unwrap(), 12.5));
        // 3 accesses in 1500 ns = 1.5 µs -> 2 per µs.
        assert!(close(maptu(3, 1_500).unwrap(), 2.0));
        assert_eq!(maptu(10, 0), None);
        assert_eq!(maptu_per_node(10, 1000, 0), None);
    }

    /// 20 samples of task 0 on 4 KiB pages:
    /// page A (0x1000): 10 samples, threads {0, 1}  -> shared, 50 %
    /// page B (0x2000):  5 samples, thread  {0}     -> private, 25 %
    /// page C (0x3000):  4 samples, threads {2, 3}  -> shared, 20 %
    /// page D (0x4000):  1 sample,  thread  {1}     -> private, 5 %
    fn page_samples() -> Vec<AccessSample> {
        let mut v = Vec::new();
        for i in 0..10 {
            v.push(sample(0, i % 2, 0x1000 + 8 * i as u64, 0, 0));
        }
        for i in 0..5 {
            v.push(sample(0, 0, 0x2000 + 64 * i, 0, 0));
        }
        for i in 0..4 {
            v.push(sample(0, 2 + (i % 2) as u32, 0x3ff8 - 8 * i, 0, 0));
        }
        v.push(sample(0, 1, 0x4000, 0, 0));
        v
    }

    #[test]
    fn page_stats() {
        let st = PageAccessStats::by_mapping(&page_samples());
        assert_eq!(st.total_samples(), 20);
        assert_eq!(st.page_count(), 4);
        let a = PageKey {
            task: TaskId(0),
            start: 0x1000,
            size: Some(PageSize::Base4K),
        };
        assert_eq!(
            st.get(&a),
            Some(PageStat {
                samples: 10,
                threads: 2
            })
        );
        // PAMUP: most-sampled page A has 10 of 20 -> 50 %.
        assert!(close(st.pamup_percent().unwrap(), 50.0));
        // NHP(6 %): A 50 %, B 25 %, C 20 % are > 6 %; D 5 % is not -> 3.
        assert_eq!(st.nhp(HOT_PAGE_THRESHOLD_PCT), 3);
        // NHP(25 %) is strict: only A (B has exactly 25 %) -> 1.
        assert_eq!(st.nhp(25.0), 1);
        // PSP: shared pages A (10) + C (4) = 14 of 20 -> 70 %.
        assert!(close(st.psp_percent().unwrap(), 70.0));
        // Hot pages, most sampled first: A, B, C.
        let hot: Vec<u64> = st
            .hot_pages(HOT_PAGE_THRESHOLD_PCT)
            .iter()
            .map(|(k, _)| k.start)
            .collect();
        assert_eq!(hot, vec![0x1000, 0x2000, 0x3000]);
    }

    #[test]
    fn page_stats_grouping_and_tasks() {
        // Same address in two tasks = two pages; each with one thread -> PSP 0 %.
        let v = vec![sample(0, 0, 0x1000, 0, 0), sample(1, 1, 0x1000, 0, 0)];
        let st = PageAccessStats::by_mapping(&v);
        assert_eq!(st.page_count(), 2);
        assert!(close(st.psp_percent().unwrap(), 0.0));
        // A 2 MiB page hit by two threads at different 4 KiB subpages: one page, shared
        // (PSP 100 %); grouped by 4 KiB with a custom function: two private pages (PSP 0 %).
        let mut h1 = sample(0, 0, 0x20_0000, 0, 0);
        let mut h2 = sample(0, 1, 0x20_5000, 0, 0);
        h1.page_size = PageSize::Huge2M;
        h2.page_size = PageSize::Huge2M;
        let st = PageAccessStats::by_mapping(&[h1, h2]);
        assert_eq!(st.page_count(), 1);
        assert!(close(st.psp_percent().unwrap(), 100.0));
        // PAMUP: the one page has 2 of 2 -> 100 %.
        assert!(close(st.pamup_percent().unwrap(), 100.0));
        let st4k = PageAccessStats::from_samples(&[h1, h2], |s| s.addr & !0xfff);
        assert_eq!(st4k.page_count(), 2);
        assert!(close(st4k.psp_percent().unwrap(), 0.0));
        // PAMUP: each 4 KiB subpage has 1 of 2 -> 50 %.
        assert!(close(st4k.pamup_percent().unwrap(), 50.0));
        // No samples: PAMUP and PSP undefined, no hot page.
        let empty = PageAccessStats::by_mapping(&[]);
        assert_eq!(empty.pamup_percent(), None);
        assert_eq!(empty.psp_percent(), None);
        assert_eq!(empty.nhp(HOT_PAGE_THRESHOLD_PCT), 0);
        assert!(empty.hot_pages(0.0).is_empty());
    }

    #[test]
    fn counter_ratios() {
        // 2 500 LLC misses in 1 000 000 instructions -> 2500 · 1000 / 1e6 = 2.5 MPKI.
        assert!(close(mpki(2_500, 1_000_000).unwrap(), 2.5));
        assert_eq!(mpki(1, 0), None);
        // 30 remote of 120 loads -> 0.25.
        assert!(close(remote_load_ratio(30, 120).unwrap(), 0.25));
        assert_eq!(remote_load_ratio(0, 0), None);
        // 150 walk-caused of 600 L2 misses -> 25 %.
        assert!(close(pagewalk_l2_miss_share(150, 600).unwrap(), 25.0));
        assert_eq!(pagewalk_l2_miss_share(0, 0), None);
        // Cores spent 10, 40, 25 ms faulting in 200 ms -> max 40 / 200 = 20 %.
        let f = [10_000_000, 40_000_000, 25_000_000];
        assert!(close(
            max_page_fault_time_share(&f, 200_000_000).unwrap(),
            20.0
        ));
        assert_eq!(max_page_fault_time_share(&[], 100), None);
        assert_eq!(max_page_fault_time_share(&f, 0), None);
        // 180 ns remote / 120 ns local -> 1.5.
        assert!(close(numa_factor(180.0, 120.0).unwrap(), 1.5));
        assert_eq!(numa_factor(1.0, 0.0), None);
    }

    #[test]
    fn l3_shares() {
        // A=50, B=30, C=15, D=5, sum 100 -> 0.50, 0.30, 0.15, 0.05 (B in the denominator).
        let s = l3_miss_source_shares(50, 30, 15, 5).unwrap();
        let want = [0.5, 0.3, 0.15, 0.05];
        for i in 0..4 {
            assert!(close(s[i], want[i]));
        }
        assert!(close(s.iter().sum::<f64>(), 1.0));
        assert_eq!(l3_miss_source_shares(0, 0, 0, 0), None);
    }

    #[test]
    fn speedups() {
        // IPC ratios 1.2/1.0 = 1.2 and 0.9/1.5 = 0.6 -> (1.2 + 0.6) / 2 = 0.9.
        assert!(close(
            weighted_speedup(&[1.2, 0.9], &[1.0, 1.5]).unwrap(),
            0.9
        ));
        assert_eq!(weighted_speedup(&[1.0], &[1.0, 2.0]), None);
        assert_eq!(weighted_speedup(&[], &[]), None);
        assert_eq!(weighted_speedup(&[1.0], &[0.0]), None);
        // Base runs 10 s and 14 s (mean 12), config runs 9 s (mean 9):
        // 100 · (12 − 9) / 12 = 25 %.
        let tb = mean(&[10.0, 14.0]).unwrap();
        let tc = mean(&[9.0]).unwrap();
        assert!(close(
            execution_time_improvement_percent(tb, tc).unwrap(),
            25.0
        ));
        // Slower config: 100 · (10 − 12.5) / 10 = −25 %.
        assert!(close(
            execution_time_improvement_percent(10.0, 12.5).unwrap(),
            -25.0
        ));
        assert_eq!(execution_time_improvement_percent(0.0, 1.0), None);
        assert_eq!(mean(&[]), None);
    }
}
