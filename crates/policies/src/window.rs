//! What sample-driven policies measure each iteration: controller counters over the last
//! interval (LAR, imbalance, MAPTU: reference §0) and DRAM samples grouped per page.

use numalab_core::metrics;
use numalab_core::view::MemoryView;
use numalab_core::{AccessSample, NodeId, PageSize, TaskId};
use std::collections::HashMap;

/// DRAM requests of one interval, `served[to][from]`, and its length.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IntervalCounters {
    pub served: Vec<Vec<u64>>,
    pub interval_ns: u64,
}

impl IntervalCounters {
    pub fn dram_requests(&self) -> u64 {
        self.served.iter().flatten().sum()
    }

    /// DRAM accesses per µs, whole machine (0 for an empty interval).
    pub fn maptu(&self) -> f64 {
        metrics::maptu(self.dram_requests(), self.interval_ns).unwrap_or(0.0)
    }

    /// MAPTU / number of nodes, as Carrefour-LP uses it.
    pub fn maptu_per_node(&self) -> f64 {
        metrics::maptu_per_node(self.dram_requests(), self.interval_ns, self.served.len())
            .unwrap_or(0.0)
    }

    pub fn lar_percent(&self) -> Option<f64> {
        metrics::lar_percent_from_traffic(&self.served)
    }

    pub fn imbalance_percent(&self) -> Option<f64> {
        metrics::imbalance_percent(&metrics::controller_loads(&self.served))
    }

    /// Each controller's share of the interval's DRAM requests, % (all 0 without traffic).
    pub fn controller_share_percent(&self) -> Vec<f64> {
        let loads = metrics::controller_loads(&self.served);
        let total: f64 = loads.iter().sum();
        loads
            .iter()
            .map(|l| if total > 0.0 { 100.0 * l / total } else { 0.0 })
            .collect()
    }
}

/// Turns the view's cumulative counters into per-interval deltas.
#[derive(Clone, Debug, Default)]
pub struct CounterWindow {
    last_served: Vec<Vec<u64>>,
    last_ns: u64,
}

impl CounterWindow {
    /// Counters since the previous call (since time 0 at the first call).
    pub fn advance(&mut self, view: &dyn MemoryView) -> IntervalCounters {
        let now = view.now_ns();
        let served = view.node_traffic().served;
        let delta = served
            .iter()
            .enumerate()
            .map(|(to, row)| {
                row.iter()
                    .enumerate()
                    .map(|(from, v)| {
                        let old = self
                            .last_served
                            .get(to)
                            .and_then(|r| r.get(from))
                            .copied()
                            .unwrap_or(0);
                        v.saturating_sub(old)
                    })
                    .collect()
            })
            .collect();
        let interval_ns = now.saturating_sub(self.last_ns);
        self.last_served = served;
        self.last_ns = now;
        IntervalCounters {
            served: delta,
            interval_ns,
        }
    }
}

/// DRAM samples that hit one page (folio), with the page's placement when it was looked up.
#[derive(Clone, Debug, PartialEq)]
pub struct PageSamples {
    pub task: TaskId,
    pub start: u64,
    pub size: PageSize,
    /// Node holding the page now.
    pub node: NodeId,
    /// Samples per accessing (CPU) node.
    pub per_node: Vec<u32>,
    pub writes: u32,
}

impl PageSamples {
    pub fn new(task: TaskId, start: u64, size: PageSize, node: NodeId, nodes: usize) -> Self {
        PageSamples {
            task,
            start,
            size,
            node,
            per_node: vec![0; nodes],
            writes: 0,
        }
    }

    pub fn total(&self) -> u32 {
        self.per_node.iter().sum()
    }

    /// Number of distinct accessing nodes (|S| of Carrefour).
    pub fn accessing_nodes(&self) -> usize {
        self.per_node.iter().filter(|c| **c > 0).count()
    }

    /// The accessing node when there is exactly one.
    pub fn single_node(&self) -> Option<NodeId> {
        let mut it = self
            .per_node
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(n, _)| NodeId(n as u16));
        let first = it.next()?;
        it.next().is_none().then_some(first)
    }

    pub fn end(&self) -> u64 {
        self.start + self.size.bytes()
    }

    /// Samples `s` adds to this page.
    pub fn add(&mut self, s: &AccessSample) {
        if let Some(c) = self.per_node.get_mut(s.cpu_node.index()) {
            *c += 1;
        }
        self.writes += s.write as u32;
    }
}

/// Groups DRAM-served samples by the folio that maps them now (looked up in `view`, so a
/// page migrated or split since the sample counts where it is), in order of first
/// appearance, keeping at most `max_pages` pages (Carrefour tracks a bounded number of
/// pages). Samples of pages no longer present are dropped.
pub fn group_by_current_page(
    view: &dyn MemoryView,
    samples: &[AccessSample],
    max_pages: usize,
) -> Vec<PageSamples> {
    let nodes = view.num_nodes();
    let mut index: HashMap<(TaskId, u64), usize> = HashMap::new();
    let mut pages: Vec<PageSamples> = Vec::new();
    for s in samples.iter().filter(|s| s.source.is_dram()) {
        // the sample's own mapping is a cheap first guess; the view decides
        let guess = (s.task, s.page_size.align_down(s.addr));
        if let Some(&i) = index.get(&guess) {
            if pages[i].size == s.page_size || pages[i].end() > s.addr {
                pages[i].add(s);
                continue;
            }
        }
        let Some(info) = view.page(s.task, s.addr) else {
            continue;
        };
        let key = (s.task, info.start);
        let i = match index.get(&key) {
            Some(&i) => i,
            None => {
                if pages.len() >= max_pages {
                    continue;
                }
                pages.push(PageSamples::new(
                    s.task, info.start, info.size, info.node, nodes,
                ));
                index.insert(key, pages.len() - 1);
                pages.len() - 1
            }
        };
        pages[i].add(s);
    }
    pages
}

/// Groups DRAM-served samples by aligned blocks of `size` (a what-if grouping: the pages as
/// they would be with pages of that size), with the node of the sample's page as `node`.
pub fn group_by_block(samples: &[AccessSample], size: PageSize, nodes: usize) -> Vec<PageSamples> {
    let mut index: HashMap<(TaskId, u64), usize> = HashMap::new();
    let mut pages: Vec<PageSamples> = Vec::new();
    for s in samples.iter().filter(|s| s.source.is_dram()) {
        let key = (s.task, size.align_down(s.addr));
        let i = *index.entry(key).or_insert_with(|| {
            pages.push(PageSamples::new(s.task, key.1, size, s.page_node, nodes));
            pages.len() - 1
        });
        pages[i].add(s);
    }
    pages
}

/// A small deterministic generator (SplitMix64): policies draw the same choices for the same
/// seed, so simulations are reproducible.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// An index drawn with probability proportional to `weights` (None if all are ≤ 0).
    pub fn weighted(&mut self, weights: &[f64]) -> Option<usize> {
        let total: f64 = weights.iter().filter(|w| **w > 0.0).sum();
        if total <= 0.0 {
            return None;
        }
        let mut x = self.unit() * total;
        let mut last = None;
        for (i, w) in weights.iter().enumerate() {
            if *w <= 0.0 {
                continue;
            }
            last = Some(i);
            if x < *w {
                return Some(i);
            }
            x -= w;
        }
        last
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interval_metrics() {
        // node 0 served 300 local + 100 for node 1; node 1 served 100 for itself.
        let c = IntervalCounters {
            served: vec![vec![300, 100], vec![0, 100]],
            interval_ns: 10_000,
        };
        assert_eq!(c.dram_requests(), 500);
        // 500 requests in 10 µs -> 50 per µs; 25 per node.
        assert_eq!(c.maptu(), 50.0);
        assert_eq!(c.maptu_per_node(), 25.0);
        // local 400 of 500.
        assert_eq!(c.lar_percent(), Some(80.0));
        // loads 400 and 100: mean 250, σ 150 -> 60 %.
        assert_eq!(c.imbalance_percent(), Some(60.0));
        assert_eq!(c.controller_share_percent(), vec![80.0, 20.0]);
    }

    #[test]
    fn weighted_draw_follows_weights() {
        let mut r = Rng::new(7);
        let mut hits = [0u32; 3];
        for _ in 0..10_000 {
            hits[r.weighted(&[1.0, 0.0, 3.0]).unwrap()] += 1;
        }
        assert_eq!(hits[1], 0);
        // expect 2 500 / 7 500; allow 3 % of the draws either way
        assert!((hits[0] as i32 - 2500).abs() < 300, "{hits:?}");
        assert_eq!(r.weighted(&[0.0, 0.0]), None);
    }
}
