//! One streaming pass over samples → a [`Report`]: LAR, controller imbalance, access rate, hot
//! pages (PAMUP, NHP), page sharing (PSP), attribution to mappings, huge-page false sharing
//! (policies.md §9) and what-if estimates (§7's rule, extended to imbalance and to the
//! placements numalab offers).
//!
//! Memory is bounded by the number of distinct sampled 4 KiB pages: samples are folded into
//! per-subpage counters as batches arrive and never kept.
//!
//! Which samples count where: PAMUP, NHP and PSP use every sample (policies.md §0: "% of all
//! samples"); LAR, imbalance, what-if and remote traffic use DRAM-served samples only. A
//! sample whose data source is unknown (`perf record -d` on a hardware event without data_src)
//! counts as DRAM when [`Options::unknown_source_as_dram`] is set, the default: load-address
//! samples then still show who touches which page. Samples of events that are not memory
//! accesses (`page-faults` and other software events, tracepoints: `Known::NOT_ACCESS`) never
//! count as DRAM; they still count in PAMUP, NHP and PSP, as every sample does.

use crate::error::Error;
use crate::record::{Mapping, MappingKind, Row, SampleSource};
use numalab_core::metrics::{
    controller_loads, imbalance_percent, lar_percent_from_traffic, lar_percent_per_node,
    HOT_PAGE_THRESHOLD_PCT,
};
use numalab_core::{DataSource, PageSize};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;

/// Analysis options; `Default` gives policies.md's thresholds.
#[derive(Clone, Debug)]
pub struct Options {
    /// Number of nodes; `None` takes the file's, else the largest node seen + 1.
    pub nodes: Option<usize>,
    pub unknown_source_as_dram: bool,
    /// Hot page: strictly more than this % of all samples (policies.md §0: 6).
    pub hot_page_threshold_pct: f64,
    /// Pages, mappings and regions listed in the report.
    pub top: usize,
    /// A 2 MiB region is examined for false sharing from this many samples (§9: 16).
    pub false_sharing_min_samples: u64,
    /// Falsely shared when at least this % of sampled subpages see one node only (§9: 80).
    pub false_sharing_disjoint_pct: f64,
    /// Remote percentages P of the "percentage P" what-if scenarios.
    pub remote_percents: Vec<u8>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            nodes: None,
            unknown_source_as_dram: true,
            hot_page_threshold_pct: HOT_PAGE_THRESHOLD_PCT,
            top: 10,
            false_sharing_min_samples: 16,
            false_sharing_disjoint_pct: 80.0,
            remote_percents: vec![25, 50],
        }
    }
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub machine: String,
    pub workload: String,
    pub origin: String,
    pub nodes: usize,
    pub sample_period: u64,
    pub samples: SampleCounts,
    pub first_time_ns: Option<u64>,
    pub last_time_ns: Option<u64>,
    pub rate: AccessRate,
    /// LAR of DRAM samples whose page node is known, % (`None` without page nodes).
    pub lar_percent: Option<f64>,
    /// Per accessing node, %.
    pub lar_per_node_percent: Vec<Option<f64>>,
    /// 100 · σ / μ of the DRAM samples each controller served, %.
    pub imbalance_percent: Option<f64>,
    /// DRAM samples served by each node's controller (page node known).
    pub controller_samples: Vec<u64>,
    pub pages: PageReport,
    pub mappings: Vec<MappingReport>,
    pub false_sharing: FalseSharingReport,
    pub what_if: Vec<Scenario>,
    /// The input was cut short: where it ends and how many records were read.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub truncated: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct SampleCounts {
    pub total: u64,
    pub with_cpu_node: u64,
    pub with_page_node: u64,
    /// Counted as DRAM-served (see the module docs).
    pub dram: u64,
    pub unknown_source: u64,
    /// Samples of events that are not memory accesses (page faults: `Known::NOT_ACCESS`),
    /// never counted as DRAM.
    pub not_accesses: u64,
    pub writes: u64,
    pub by_source: BTreeMap<String, u64>,
    /// Samples the recorder took but did not keep (`FileMeta::samples_dropped`).
    pub dropped: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct AccessRate {
    pub duration_ns: u64,
    pub samples_per_s: Option<f64>,
    /// samples · sample period / duration: events (accesses, misses, faults) per second.
    pub est_events_per_s: Option<f64>,
    /// Samples from each accessing node.
    pub samples_by_cpu_node: Vec<u64>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PageReport {
    /// Pages as mapped (a THP counts once).
    pub distinct_pages: usize,
    pub pamup_percent: Option<f64>,
    pub nhp: usize,
    pub psp_percent: Option<f64>,
    pub hot_threshold_pct: f64,
    /// Most sampled pages first.
    pub top: Vec<PageEntry>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct PageEntry {
    pub task: u32,
    pub start: u64,
    pub page_size: String,
    pub samples: u64,
    pub percent: f64,
    pub hot: bool,
    pub shared: bool,
    pub samples_by_node: Vec<u64>,
    pub page_node: Option<u16>,
    pub mapping: Option<String>,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct MappingReport {
    pub task: u32,
    pub name: String,
    pub kind: Option<MappingKind>,
    pub start: u64,
    pub len_bytes: u64,
    pub samples: u64,
    pub percent: f64,
    pub dram_local: u64,
    pub dram_remote: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct FalseSharingReport {
    /// 2 MiB regions with enough samples.
    pub regions_examined: usize,
    pub falsely_shared: usize,
    pub truly_shared: usize,
    pub mixed: usize,
    /// Regions touched by ≥ 2 nodes, most sampled first.
    pub regions: Vec<Region>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Sharing {
    /// ≥ 2 nodes, but ≥ 80 % of the sampled subpages see one node only: splitting fixes it.
    FalselyShared,
    /// Most sampled subpages see several nodes: splitting does not help.
    TrulyShared,
    Mixed,
}

#[derive(Clone, Debug, Serialize)]
pub struct Region {
    pub task: u32,
    pub start: u64,
    /// Some sample says the region is mapped by a 2 MiB page.
    pub mapped_huge: bool,
    pub sharing: Sharing,
    pub samples: u64,
    pub samples_by_node: Vec<u64>,
    pub subpages_sampled: u32,
    /// Subpages whose samples all come from node n (the disjoint-use histogram).
    pub single_node_subpages: Vec<u32>,
    /// Subpages touched by ≥ 2 nodes (overlapping use).
    pub shared_subpages: u32,
    pub disjoint_percent: f64,
    /// Nodes holding the region per the samples (one when mapped by a 2 MiB page).
    pub page_nodes: Vec<u16>,
    pub dram_samples: u64,
    /// Remote DRAM samples now (page node known).
    pub remote_dram: Option<u64>,
    /// Expected remote DRAM samples after splitting and placing subpages (§7 rule).
    pub remote_dram_after_split: f64,
}

#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    pub lar_percent: Option<f64>,
    pub imbalance_percent: Option<f64>,
    /// Share of DRAM traffic per controller, %.
    pub controller_share_percent: Vec<f64>,
}

/// The address space as the mapping records left it: later mappings replace the parts of
/// earlier ones they overlap (as mmap over an existing range, or mprotect splitting a VMA,
/// does), so a lookup finds the latest mapping of an address.
struct Vmas {
    /// (task, start) → (end, index into the mapping list).
    tree: std::collections::BTreeMap<(u32, u64), (u64, usize)>,
}

impl Vmas {
    fn build(maps: &[Mapping]) -> Vmas {
        let mut tree = std::collections::BTreeMap::new();
        for (i, m) in maps.iter().enumerate() {
            let (s, e) = (m.start, m.start.saturating_add(m.len_bytes));
            if e <= s {
                continue;
            }
            // Existing intervals overlapping [s, e): the one starting before s, and those
            // starting inside.
            let mut hit: Vec<(u64, u64, usize)> = Vec::new();
            if let Some((&(_, os), &(oe, oi))) = tree.range(..(m.task, s)).next_back() {
                if oe > s && tree.contains_key(&(m.task, os)) {
                    hit.push((os, oe, oi));
                }
            }
            for (&(_, os), &(oe, oi)) in tree.range((m.task, s)..(m.task, e)) {
                hit.push((os, oe, oi));
            }
            for (os, oe, oi) in hit {
                tree.remove(&(m.task, os));
                if os < s {
                    tree.insert((m.task, os), (s, oi));
                }
                if oe > e {
                    tree.insert((m.task, e), (oe, oi));
                }
            }
            tree.insert((m.task, s), (e, i));
        }
        Vmas { tree }
    }

    fn find(&self, task: u32, addr: u64) -> Option<usize> {
        let (&(t, _), &(end, i)) = self.tree.range(..=(task, addr)).next_back()?;
        (t == task && addr < end).then_some(i)
    }
}

/// Counters of one 4 KiB subpage.
#[derive(Clone, Debug, Default)]
struct Sub {
    samples: u64,
    by_node: Vec<u64>,
    dram_by_node: Vec<u64>,
    first_thread: u32,
    multi_thread: bool,
    /// Largest known page shift of the samples (12 when none is known).
    shift: u8,
    page_node: Option<u16>,
    dram_local: u64,
    dram_remote: u64,
}

fn bump(v: &mut Vec<u64>, i: usize, by: u64) {
    if v.len() <= i {
        v.resize(i + 1, 0);
    }
    v[i] += by;
}

/// Subpage counters by (task, 4 KiB page number). aHash rather than the standard SipHash:
/// this map is touched once per sample, and its order never reaches the report.
type SubMap = HashMap<(u32, u64), Sub, ahash::RandomState>;

/// Per-node counters of a subpage while reading: inline for up to 8 nodes (no allocation
/// and no pointer to chase per sample: this is the analysis' hot spot), vectors beyond.
#[derive(Clone, Debug)]
enum NodeCounts {
    Inline { by: [u32; 8], dram: [u32; 8] },
    Wide(Box<(Vec<u64>, Vec<u64>)>),
}

impl NodeCounts {
    #[inline]
    fn add(&mut self, node: usize, dram: bool) {
        if let NodeCounts::Inline { by, dram: d } = self {
            if node < 8 && by[node] < u32::MAX {
                by[node] += 1;
                d[node] += dram as u32;
                return;
            }
        }
        self.widen();
        if let NodeCounts::Wide(w) = self {
            bump(&mut w.0, node, 1);
            if dram {
                bump(&mut w.1, node, 1);
            }
        }
    }

    /// The counters as vectors up to the last node counted (as `bump` grows them).
    fn vectors(&self) -> (Vec<u64>, Vec<u64>) {
        match self {
            NodeCounts::Inline { by, dram } => {
                let trim = |a: &[u32; 8]| {
                    let len = a.iter().rposition(|c| *c > 0).map_or(0, |i| i + 1);
                    a[..len].iter().map(|c| *c as u64).collect::<Vec<u64>>()
                };
                (trim(by), trim(dram))
            }
            NodeCounts::Wide(w) => (w.0.clone(), w.1.clone()),
        }
    }

    fn widen(&mut self) {
        if matches!(self, NodeCounts::Inline { .. }) {
            *self = NodeCounts::Wide(Box::new(self.vectors()));
        }
    }
}

/// A subpage's counters while reading; becomes a [`Sub`] for the report.
#[derive(Clone, Debug)]
struct SubAcc {
    samples: u64,
    dram_local: u64,
    dram_remote: u64,
    first_thread: u32,
    page_node: Option<u16>,
    shift: u8,
    multi_thread: bool,
    counts: NodeCounts,
}

impl SubAcc {
    fn new(thread: u32) -> SubAcc {
        SubAcc {
            samples: 0,
            dram_local: 0,
            dram_remote: 0,
            first_thread: thread,
            page_node: None,
            shift: 12,
            multi_thread: false,
            counts: NodeCounts::Inline {
                by: [0; 8],
                dram: [0; 8],
            },
        }
    }

    fn add(
        &mut self,
        thread: u32,
        shift: Option<u8>,
        page_node: Option<usize>,
        cpu_node: Option<usize>,
        dram: bool,
    ) {
        self.samples += 1;
        if self.first_thread != thread {
            self.multi_thread = true;
        }
        if let Some(sh) = shift {
            self.shift = self.shift.max(sh);
        }
        if let Some(p) = page_node {
            self.page_node = Some(p as u16);
        }
        if let Some(f) = cpu_node {
            self.counts.add(f, dram);
            if dram {
                if let Some(p) = page_node {
                    if p == f {
                        self.dram_local += 1;
                    } else {
                        self.dram_remote += 1;
                    }
                }
            }
        }
    }

    fn into_sub(self) -> Sub {
        let (by_node, dram_by_node) = self.counts.vectors();
        Sub {
            samples: self.samples,
            by_node,
            dram_by_node,
            first_thread: self.first_thread,
            multi_thread: self.multi_thread,
            shift: self.shift,
            page_node: self.page_node,
            dram_local: self.dram_local,
            dram_remote: self.dram_remote,
        }
    }
}

/// A subpage's counters in one cache line: the table of all sampled subpages is looked up
/// once per sample at a random place, so one line per entry (64-byte aligned, narrow
/// counters) is what the analysis' speed comes down to. Entries whose task, address or
/// counts do not fit move to the wide map (`SubAcc`).
#[repr(C, align(64))]
#[derive(Clone, Copy, Debug)]
struct Line {
    /// task << 44 | 4 KiB page number.
    key: u64,
    samples: u32,
    dram_local: u32,
    dram_remote: u32,
    first_thread: u32,
    /// `NO_NODE` when unknown.
    page_node: u16,
    shift: u8,
    /// `MULTI_THREAD`, `WIDE` (counted in the wide map from then on).
    flags: u8,
    by: [u16; 8],
    dram: [u16; 8],
}

const NO_NODE: u16 = u16::MAX;
const MULTI_THREAD: u8 = 1;
const WIDE: u8 = 2;
const VPN_BITS: u32 = 44;

impl Line {
    fn to_acc(self) -> SubAcc {
        SubAcc {
            samples: self.samples as u64,
            dram_local: self.dram_local as u64,
            dram_remote: self.dram_remote as u64,
            first_thread: self.first_thread,
            page_node: (self.page_node != NO_NODE).then_some(self.page_node),
            shift: self.shift,
            multi_thread: self.flags & MULTI_THREAD != 0,
            counts: NodeCounts::Inline {
                by: self.by.map(u32::from),
                dram: self.dram.map(u32::from),
            },
        }
    }
}

/// The slot of a `Line` key: a multiplicative hash's top bits (`shift` = 64 − log2 slots).
/// Cheaper than aHash, and the table's order never reaches the report.
#[inline]
fn line_slot(key: u64, shift: u32) -> usize {
    ((key ^ (key >> 29)).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> shift) as usize
}

/// Key of an empty slot (no subpage has it: tasks must be below 2^20 − 1 to get a line).
const EMPTY: u64 = u64::MAX;

fn empty_line() -> Line {
    Line {
        key: EMPTY,
        samples: 0,
        dram_local: 0,
        dram_remote: 0,
        first_thread: 0,
        page_node: NO_NODE,
        shift: 12,
        flags: 0,
        by: [0; 8],
        dram: [0; 8],
    }
}

/// `n` empty lines, on transparent huge pages where the system allows it (madvise mode): each
/// sample touches a random line of a table of several MiB, and with 4 KiB pages nearly every
/// touch (and prefetch) also misses the TLB.
fn alloc_lines(n: usize) -> Vec<Line> {
    let mut v: Vec<Line> = Vec::with_capacity(n);
    #[cfg(target_os = "linux")]
    {
        extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        const MADV_HUGEPAGE: i32 = 14;
        let bytes = n * std::mem::size_of::<Line>();
        let start = v.as_mut_ptr() as usize;
        let (a, e) = ((start + 4095) & !4095, (start + bytes) & !4095);
        if bytes >= 1 << 21 && e > a {
            // SAFETY: advice on pages of an allocation this function owns and has not touched;
            // failure only means no huge pages.
            unsafe { madvise(a as *mut std::ffi::c_void, e - a, MADV_HUGEPAGE) };
        }
    }
    v.resize(n, empty_line());
    v
}

/// The subpage table: narrow entries in an open-addressing table of lines (linear probing,
/// at most half full, so that the slot of a key is known without reading anything and a
/// prefetch needs no load), the rest in a map of `SubAcc`.
struct Subpages {
    lines: Vec<Line>,
    /// 64 − log2(lines.len()).
    shift: u32,
    used: usize,
    wide: HashMap<(u32, u64), SubAcc, ahash::RandomState>,
}

impl Default for Subpages {
    fn default() -> Self {
        Subpages {
            lines: alloc_lines(1 << 12),
            shift: 64 - 12,
            used: 0,
            wide: HashMap::default(),
        }
    }
}

impl Subpages {
    /// One sample's share (the per-sample hot path, hence the plain arguments; unknown
    /// shift = 0, unknown nodes = `NO_NODE`).
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn add(
        &mut self,
        task: u32,
        vpn: u64,
        thread: u32,
        shift: u8,
        page_node: u16,
        cpu_node: u16,
        dram: bool,
    ) {
        if task < (1 << (64 - VPN_BITS)) - 1 && vpn < 1 << VPN_BITS {
            let key = (task as u64) << VPN_BITS | vpn;
            let mask = self.lines.len() - 1;
            let mut i = line_slot(key, self.shift);
            while self.lines[i].key != key && self.lines[i].key != EMPTY {
                i = (i + 1) & mask;
            }
            if self.lines[i].key == EMPTY {
                if 2 * (self.used + 1) > self.lines.len() {
                    self.grow();
                    return self.add(task, vpn, thread, shift, page_node, cpu_node, dram);
                }
                self.used += 1;
                self.lines[i].key = key;
                self.lines[i].first_thread = thread;
            }
            let line = &mut self.lines[i];
            if line.flags & WIDE == 0 {
                let f = cpu_node as usize;
                // page_node == NO_NODE fits (it means unknown); cpu nodes from 8 do not.
                let fits = line.samples < u32::MAX
                    && (cpu_node == NO_NODE
                        || (f < 8
                            && line.by[f] < u16::MAX
                            && line.dram[f] < u16::MAX
                            && line.dram_local < u32::MAX
                            && line.dram_remote < u32::MAX));
                if fits {
                    line.samples += 1;
                    if line.first_thread != thread {
                        line.flags |= MULTI_THREAD;
                    }
                    line.shift = line.shift.max(shift);
                    if page_node != NO_NODE {
                        line.page_node = page_node;
                    }
                    if cpu_node != NO_NODE {
                        line.by[f] += 1;
                        if dram {
                            line.dram[f] += 1;
                            if page_node != NO_NODE {
                                if page_node == cpu_node {
                                    line.dram_local += 1;
                                } else {
                                    line.dram_remote += 1;
                                }
                            }
                        }
                    }
                    return;
                }
                line.flags |= WIDE;
                self.wide.insert((task, vpn), line.to_acc());
            }
        }
        let known = |n: u16| (n != NO_NODE).then_some(n as usize);
        self.wide
            .entry((task, vpn))
            .or_insert_with(|| SubAcc::new(thread))
            .add(
                thread,
                (shift != 0).then_some(shift),
                known(page_node),
                known(cpu_node),
                dram,
            );
    }

    /// Doubles the table and re-inserts its lines.
    #[cold]
    fn grow(&mut self) {
        let grown = alloc_lines(self.lines.len() * 2);
        let old = std::mem::replace(&mut self.lines, grown);
        self.shift -= 1;
        let mask = self.lines.len() - 1;
        for l in old.into_iter().filter(|l| l.key != EMPTY) {
            let mut i = line_slot(l.key, self.shift);
            while self.lines[i].key != EMPTY {
                i = (i + 1) & mask;
            }
            self.lines[i] = l;
        }
    }

    /// Starts loading the home slot of a subpage that a later sample will update: the table is
    /// larger than the caches and each update otherwise waits for its line.
    #[inline]
    fn prefetch(&self, task: u32, vpn: u64) {
        #[cfg(target_arch = "x86_64")]
        {
            let key = (task as u64) << VPN_BITS | vpn;
            let l = &self.lines[line_slot(key, self.shift)];
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            // SAFETY: a prefetch is a hint; it never faults and the pointer is valid.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(l as *const Line as *const i8) };
        }
    }

    fn into_subs(self) -> SubMap {
        let mut out: SubMap = self
            .wide
            .into_iter()
            .map(|(k, v)| (k, v.into_sub()))
            .collect();
        for l in self.lines {
            if l.key != EMPTY && l.flags & WIDE == 0 {
                let k = ((l.key >> VPN_BITS) as u32, l.key & ((1 << VPN_BITS) - 1));
                out.insert(k, l.to_acc().into_sub());
            }
        }
        out
    }
}

#[derive(Default)]
struct Acc {
    /// Filled from `live` when reading ends.
    subs: SubMap,
    live: Subpages,
    /// served[page node][cpu node], DRAM samples with both known.
    served: Vec<Vec<u64>>,
    counts: SampleCounts,
    /// Samples per `DataSource` in `Row::SOURCES` order; names are given at the end.
    by_source: [u64; 5],
    by_cpu_node: Vec<u64>,
    first: Option<u64>,
    last: Option<u64>,
    mappings: Vec<Mapping>,
    max_node: usize,
}

const SOURCES: [DataSource; 5] = Row::SOURCES;

impl Acc {
    fn add_rows(&mut self, rows: &[Row], opts: &Options) {
        let (mut first, mut last) = (
            self.first.unwrap_or(u64::MAX),
            self.last.unwrap_or(u64::MIN),
        );
        // DRAM or not by source index (unknown: the option).
        let mut is_dram = [opts.unknown_source_as_dram; 256];
        for (i, s) in Row::SOURCES.iter().enumerate() {
            is_dram[i] = s.is_dram();
        }
        is_dram[Row::NOT_ACCESS as usize] = false;
        let mut by_source = [0u64; 256];
        let (mut dram_n, mut writes, mut with_cpu, mut with_page) = (0u64, 0u64, 0u64, 0u64);
        const AHEAD: usize = 12;
        for (i, r) in rows.iter().enumerate() {
            if let Some(n) = rows.get(i + AHEAD) {
                self.live.prefetch(n.task, n.addr >> 12);
            }
            first = first.min(r.time_ns);
            last = last.max(r.time_ns);
            by_source[r.source as usize] += 1;
            let dram = is_dram[r.source as usize];
            dram_n += dram as u64;
            writes += (r.write == 1) as u64;
            let (cpu_node, page_node) = (r.cpu_node, r.page_node);
            with_cpu += (cpu_node != NO_NODE) as u64;
            with_page += (page_node != NO_NODE) as u64;
            if cpu_node != NO_NODE {
                let n = cpu_node as usize;
                bump(&mut self.by_cpu_node, n, 1);
                self.max_node = self.max_node.max(n);
            }
            if page_node != NO_NODE {
                let p = page_node as usize;
                self.max_node = self.max_node.max(p);
                if dram && cpu_node != NO_NODE {
                    if self.served.len() <= p {
                        self.served.resize(p + 1, Vec::new());
                    }
                    bump(&mut self.served[p], cpu_node as usize, 1);
                }
            }
            self.live.add(
                r.task,
                r.addr >> 12,
                r.thread,
                r.page_shift,
                page_node,
                cpu_node,
                dram,
            );
        }
        let c = &mut self.counts;
        c.total += rows.len() as u64;
        c.dram += dram_n;
        c.writes += writes;
        c.with_cpu_node += with_cpu;
        c.with_page_node += with_page;
        for (i, n) in by_source.iter().enumerate() {
            match self.by_source.get_mut(i) {
                Some(b) => *b += n,
                None if i == Row::NOT_ACCESS as usize => c.not_accesses += n,
                None => c.unknown_source += n,
            }
        }
        if !rows.is_empty() {
            self.first = Some(first);
            self.last = Some(last);
        }
    }

    /// Moves the per-source counts into the report's named map.
    fn name_sources(&mut self) {
        for (i, n) in self.by_source.iter().enumerate() {
            if *n == 0 {
                continue;
            }
            let name = serde_json::to_value(SOURCES[i])
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            *self.counts.by_source.entry(name).or_default() += n;
        }
    }
}

/// A page as mapped, aggregated from its subpages.
#[derive(Clone, Debug, Default)]
struct PageAgg {
    samples: u64,
    first_thread: Option<u32>,
    multi_thread: bool,
    by_node: Vec<u64>,
    dram_by_node: Vec<u64>,
    page_node: Option<u16>,
    dram_local: u64,
    dram_remote: u64,
}

fn add_into(dst: &mut Vec<u64>, src: &[u64]) {
    if dst.len() < src.len() {
        dst.resize(src.len(), 0);
    }
    for (d, s) in dst.iter_mut().zip(src) {
        *d += s;
    }
}

fn nodes_touching(v: &[u64]) -> usize {
    v.iter().filter(|c| **c > 0).count()
}

/// Reading and counting on two threads: this thread decodes batches of rows (the source need
/// not be `Send`), a second one folds them into `acc` in the same order, so the result is the
/// one of a single thread. Each takes about half of the time, so wall time nearly halves
/// where a second core is free; the extra CPU is a channel message per batch.
fn pipelined(
    acc: Acc,
    source: &mut dyn SampleSource,
    maps: &mut Vec<Mapping>,
    opts: &Options,
) -> Result<Acc, Error> {
    use std::sync::mpsc::{channel, sync_channel};
    std::thread::scope(|s| {
        let (full_tx, full_rx) = sync_channel::<Vec<Row>>(2);
        let (empty_tx, empty_rx) = channel::<Vec<Row>>();
        let worker = s.spawn(move || {
            let mut acc = acc;
            for rows in full_rx {
                acc.add_rows(&rows, opts);
                // The reader may be gone after an error; the buffer is then dropped.
                let _ = empty_tx.send(rows);
            }
            acc
        });
        let mut res = Ok(());
        loop {
            let mut rows = empty_rx.try_recv().unwrap_or_default();
            rows.clear();
            match source.next_rows(&mut rows, maps) {
                Ok(true) => {
                    if full_tx.send(rows).is_err() {
                        break;
                    }
                }
                Ok(false) => break,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        drop(full_tx);
        let acc = worker
            .join()
            .unwrap_or_else(|p| std::panic::resume_unwind(p));
        res.map(|()| acc)
    })
}

/// Reads `source` to its end and analyses it.
pub fn analyze(source: &mut dyn SampleSource, opts: &Options) -> Result<Report, Error> {
    let mut acc = Acc {
        mappings: source.meta().mappings.clone(),
        ..Default::default()
    };
    let mut maps = Vec::new();
    let mut acc = if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
        pipelined(acc, source, &mut maps, opts)?
    } else {
        let mut rows = Vec::new();
        while {
            rows.clear();
            source.next_rows(&mut rows, &mut maps)?
        } {
            acc.add_rows(&rows, opts);
        }
        acc
    };
    acc.mappings.append(&mut maps);
    acc.name_sources();
    acc.subs = std::mem::take(&mut acc.live).into_subs();
    let meta = source.meta();
    let nodes = opts
        .nodes
        .or((meta.nodes > 0).then_some(meta.nodes as usize))
        .unwrap_or(acc.max_node + 1)
        .max(acc.max_node + 1);
    let mut report = finish(acc, nodes, meta, opts);
    report.truncated = source.truncated();
    Ok(report)
}

fn finish(acc: Acc, nodes: usize, meta: &crate::record::FileMeta, opts: &Options) -> Report {
    let n = nodes;
    let mut served = acc.served.clone();
    served.resize(n, Vec::new());
    for row in &mut served {
        row.resize(n, 0);
    }
    let has_served = served.iter().flatten().any(|c| *c > 0);
    let total = acc.counts.total;
    let duration_ns = match (acc.first, acc.last) {
        (Some(f), Some(l)) => l - f,
        _ => 0,
    };
    let secs = duration_ns as f64 / 1e9;
    let mut by_cpu_node = acc.by_cpu_node.clone();
    by_cpu_node.resize(n, 0);

    // Pages as mapped: a subpage belongs to the page of its largest known size.
    let mut pages: HashMap<(u32, u64, u8), PageAgg> = HashMap::new();
    for (&(task, p4k), sub) in &acc.subs {
        let start = (p4k << 12) & !((1u64 << sub.shift) - 1);
        let pa = pages.entry((task, start, sub.shift)).or_default();
        pa.samples += sub.samples;
        match pa.first_thread {
            None => pa.first_thread = Some(sub.first_thread),
            Some(t) if t != sub.first_thread => pa.multi_thread = true,
            _ => {}
        }
        pa.multi_thread |= sub.multi_thread;
        add_into(&mut pa.by_node, &sub.by_node);
        add_into(&mut pa.dram_by_node, &sub.dram_by_node);
        pa.page_node = pa.page_node.or(sub.page_node);
        pa.dram_local += sub.dram_local;
        pa.dram_remote += sub.dram_remote;
    }
    let pct = |x: u64| {
        if total == 0 {
            0.0
        } else {
            100.0 * x as f64 / total as f64
        }
    };
    // §0's definitions (core::metrics::PageAccessStats computes the same from a slice; it has
    // no incremental form yet, and tests/ pin the two together).
    let max_page = pages.values().map(|p| p.samples).max().unwrap_or(0);
    let hot = |p: &PageAgg| {
        total > 0 && 100.0 * p.samples as f64 > opts.hot_page_threshold_pct * total as f64
    };
    let shared: u64 = pages
        .values()
        .filter(|p| p.multi_thread)
        .map(|p| p.samples)
        .sum();

    let vmas = Vmas::build(&acc.mappings);
    let maps = &acc.mappings;
    let mapping_of = |task: u32, addr: u64| vmas.find(task, addr);

    let mut sorted: Vec<(&(u32, u64, u8), &PageAgg)> = pages.iter().collect();
    sorted.sort_by(|a, b| b.1.samples.cmp(&a.1.samples).then(a.0.cmp(b.0)));
    let top_pages = sorted
        .iter()
        .take(opts.top)
        .map(|(&(task, start, shift), p)| {
            let mut by_node = p.by_node.clone();
            by_node.resize(n, 0);
            PageEntry {
                task,
                start,
                page_size: PageSize::ALL
                    .into_iter()
                    .find(|s| s.shift() == shift as u32)
                    .map_or("?".into(), |s| s.to_string()),
                samples: p.samples,
                percent: pct(p.samples),
                hot: hot(p),
                shared: p.multi_thread,
                samples_by_node: by_node,
                page_node: p.page_node,
                mapping: mapping_of(task, start).map(|i| maps[i].name.clone()),
            }
        })
        .collect();
    let page_report = PageReport {
        distinct_pages: pages.len(),
        pamup_percent: (total > 0).then(|| pct(max_page)),
        nhp: pages.values().filter(|p| hot(p)).count(),
        psp_percent: (total > 0).then(|| pct(shared)),
        hot_threshold_pct: opts.hot_page_threshold_pct,
        top: top_pages,
    };

    // Attribution to mappings: the segments of one file count together (a library's text,
    // data and relro are one object); anonymous mappings stay apart (each is a data structure).
    let exec_names: std::collections::HashSet<&str> = maps
        .iter()
        .filter(|m| m.kind == MappingKind::Binary)
        .map(|m| m.name.as_str())
        .collect();
    let mut per_map: HashMap<(u32, String, u64), MappingReport> = HashMap::new();
    for (&(task, start, _), p) in &pages {
        let i = mapping_of(task, start);
        let key = match i {
            Some(i) if matches!(maps[i].kind, MappingKind::File | MappingKind::Binary) => {
                (task, maps[i].name.clone(), 0)
            }
            Some(i) => (task, maps[i].name.clone(), maps[i].start),
            None => (task, String::new(), 0),
        };
        let e = per_map.entry(key).or_insert_with(|| match i {
            Some(i) => {
                let m = &maps[i];
                let file = matches!(m.kind, MappingKind::File | MappingKind::Binary);
                MappingReport {
                    task: m.task,
                    name: m.name.clone(),
                    kind: Some(if file && exec_names.contains(m.name.as_str()) {
                        MappingKind::Binary
                    } else {
                        m.kind
                    }),
                    start: if file { 0 } else { m.start },
                    len_bytes: if file { 0 } else { m.len_bytes },
                    ..Default::default()
                }
            }
            None => MappingReport {
                task,
                name: "(no mapping known)".into(),
                ..Default::default()
            },
        });
        e.samples += p.samples;
        e.dram_local += p.dram_local;
        e.dram_remote += p.dram_remote;
    }
    let mut mappings: Vec<MappingReport> = per_map.into_values().collect();
    for m in &mut mappings {
        m.percent = pct(m.samples);
    }
    mappings.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.start.cmp(&b.start)));
    mappings.truncate(opts.top);

    let false_sharing = false_sharing(&acc, n, opts);
    let what_if = what_if(&acc, &pages, &served, has_served, n, opts);

    Report {
        machine: meta.machine.clone(),
        workload: meta.workload.clone(),
        origin: meta.origin.clone(),
        nodes: n,
        sample_period: meta.sample_period,
        samples: SampleCounts {
            dropped: meta.samples_dropped,
            ..acc.counts.clone()
        },
        first_time_ns: acc.first,
        last_time_ns: acc.last,
        rate: AccessRate {
            duration_ns,
            samples_per_s: (secs > 0.0).then(|| total as f64 / secs),
            est_events_per_s: (secs > 0.0 && meta.sample_period > 0)
                .then(|| (total * meta.sample_period) as f64 / secs),
            samples_by_cpu_node: by_cpu_node,
        },
        lar_percent: if has_served {
            lar_percent_from_traffic(&served)
        } else {
            None
        },
        lar_per_node_percent: if has_served {
            lar_percent_per_node(&served)
        } else {
            vec![None; n]
        },
        imbalance_percent: if has_served {
            imbalance_percent(&controller_loads(&served))
        } else {
            None
        },
        controller_samples: served.iter().map(|r| r.iter().sum()).collect(),
        pages: page_report,
        mappings,
        false_sharing,
        what_if,
        truncated: None,
    }
}

fn false_sharing(acc: &Acc, n: usize, opts: &Options) -> FalseSharingReport {
    let mut regions: HashMap<(u32, u64), Vec<&Sub>> = HashMap::new();
    for (&(task, p4k), sub) in &acc.subs {
        regions.entry((task, p4k >> 9)).or_default().push(sub);
    }
    let mut out = FalseSharingReport::default();
    for ((task, r2m), subs) in regions {
        let samples: u64 = subs.iter().map(|s| s.by_node.iter().sum::<u64>()).sum();
        if samples < opts.false_sharing_min_samples {
            continue;
        }
        out.regions_examined += 1;
        let mut by_node = Vec::new();
        for s in &subs {
            add_into(&mut by_node, &s.by_node);
        }
        by_node.resize(n, 0);
        if nodes_touching(&by_node) < 2 {
            continue;
        }
        let mut single = vec![0u32; n];
        let mut shared_subpages = 0u32;
        let mut sampled = 0u32;
        let mut page_nodes: Vec<u16> = Vec::new();
        let mut dram = 0u64;
        let mut remote_now = 0u64;
        let mut known_now = false;
        let mut after_split = 0.0;
        for s in &subs {
            let touching = nodes_touching(&s.by_node);
            if touching == 0 {
                continue;
            }
            sampled += 1;
            if touching == 1 {
                let node = s.by_node.iter().position(|c| *c > 0).unwrap_or(0);
                single[node] += 1;
            } else {
                shared_subpages += 1;
            }
            if let Some(p) = s.page_node {
                if !page_nodes.contains(&p) {
                    page_nodes.push(p);
                }
            }
            let d: u64 = s.dram_by_node.iter().sum();
            dram += d;
            if s.dram_local + s.dram_remote > 0 {
                known_now = true;
            }
            remote_now += s.dram_remote;
            // §7: a subpage seen from one node moves there; several nodes: interleaved.
            if nodes_touching(&s.dram_by_node) > 1 {
                after_split += d as f64 * (1.0 - 1.0 / n as f64);
            }
        }
        page_nodes.sort();
        let disjoint = 100.0 * single.iter().sum::<u32>() as f64 / sampled.max(1) as f64;
        let sharing = if disjoint >= opts.false_sharing_disjoint_pct {
            out.falsely_shared += 1;
            Sharing::FalselyShared
        } else if 2 * shared_subpages > sampled {
            out.truly_shared += 1;
            Sharing::TrulyShared
        } else {
            out.mixed += 1;
            Sharing::Mixed
        };
        out.regions.push(Region {
            task,
            start: r2m << 21,
            mapped_huge: subs.iter().any(|s| s.shift >= 21),
            sharing,
            samples,
            samples_by_node: by_node,
            subpages_sampled: sampled,
            single_node_subpages: single,
            shared_subpages,
            disjoint_percent: disjoint,
            page_nodes,
            dram_samples: dram,
            remote_dram: known_now.then_some(remote_now),
            remote_dram_after_split: after_split,
        });
    }
    out.regions
        .sort_by(|a, b| b.samples.cmp(&a.samples).then(a.start.cmp(&b.start)));
    out.regions.truncate(opts.top.max(1) * 10);
    out
}

/// Expected DRAM traffic `m[to][from]` under a placement rule, in integer units of
/// `1 / scale` sample so that core's integer LAR formula applies exactly: `scale` is
/// divisible by N (interleave) and by 100·(N−1) (percentage P).
struct Traffic {
    m: Vec<Vec<u64>>,
    n: usize,
    scale: u64,
}

impl Traffic {
    fn new(n: usize) -> Traffic {
        Traffic {
            m: vec![vec![0; n]; n],
            n,
            scale: 100 * n as u64 * (n.max(2) - 1) as u64,
        }
    }
    fn local(&mut self, by_node: &[u64]) {
        for (f, c) in by_node.iter().enumerate() {
            self.m[f][f] += c * self.scale;
        }
    }
    fn on(&mut self, to: usize, by_node: &[u64]) {
        for (f, c) in by_node.iter().enumerate() {
            self.m[to][f] += c * self.scale;
        }
    }
    fn interleave(&mut self, by_node: &[u64]) {
        for (f, c) in by_node.iter().enumerate() {
            for to in 0..self.n {
                self.m[to][f] += c * self.scale / self.n as u64;
            }
        }
    }
    /// Carrefour's per-page rule (§6/§7): one accessing node → migrate there, else interleave.
    fn carrefour(&mut self, by_node: &[u64]) {
        if nodes_touching(by_node) <= 1 {
            self.local(by_node);
        } else {
            self.interleave(by_node);
        }
    }
    /// P % of the page's traffic from a remote node (spread evenly), the rest from its home,
    /// the node that touches it most (first touch, approximately).
    fn percent(&mut self, by_node: &[u64], p: u64) {
        let home = (0..by_node.len())
            .max_by_key(|i| (by_node[*i], std::cmp::Reverse(*i)))
            .unwrap_or(0);
        if self.n == 1 {
            return self.local(by_node);
        }
        for (f, c) in by_node.iter().enumerate() {
            let unit = c * self.scale;
            self.m[home][f] += unit * (100 - p) / 100;
            for to in (0..self.n).filter(|t| *t != home) {
                self.m[to][f] += unit * p / (100 * (self.n as u64 - 1));
            }
        }
    }
    fn scenario(&self, name: &str, description: &str) -> Scenario {
        let loads = controller_loads(&self.m);
        let sum: f64 = loads.iter().sum();
        Scenario {
            name: name.into(),
            description: description.into(),
            lar_percent: lar_percent_from_traffic(&self.m),
            imbalance_percent: imbalance_percent(&loads),
            controller_share_percent: loads
                .iter()
                .map(|l| if sum > 0.0 { 100.0 * l / sum } else { 0.0 })
                .collect(),
        }
    }
}

fn what_if(
    acc: &Acc,
    pages: &HashMap<(u32, u64, u8), PageAgg>,
    served: &[Vec<u64>],
    has_served: bool,
    n: usize,
    opts: &Options,
) -> Vec<Scenario> {
    let fit = |v: &[u64]| {
        let mut v = v.to_vec();
        v.resize(n, 0);
        v
    };
    let mut out = Vec::new();
    if has_served {
        let mut t = Traffic::new(n);
        for (to, row) in served.iter().enumerate() {
            t.on(to, row);
        }
        out.push(t.scenario("as-is", "pages where the samples saw them"));
    }
    let mut carrefour = Traffic::new(n);
    let mut interleave = Traffic::new(n);
    for p in pages.values() {
        let d = fit(&p.dram_by_node);
        carrefour.carrefour(&d);
        interleave.interleave(&d);
    }
    // Split shared 2 MiB pages: such a page's subpages are placed one by one.
    let mut split = Traffic::new(n);
    let mut shared_huge: HashMap<(u32, u64), bool> = HashMap::new();
    for (&(task, start, shift), p) in pages {
        if shift == 21 {
            shared_huge.insert((task, start), nodes_touching(&p.dram_by_node) > 1);
        }
    }
    for (&(task, p4k), s) in &acc.subs {
        let d = fit(&s.dram_by_node);
        let start = (p4k << 12) & !((1u64 << s.shift) - 1);
        if s.shift == 21 && shared_huge.get(&(task, start)) == Some(&true) {
            split.carrefour(&d);
        }
    }
    for (&(task, start, shift), p) in pages {
        if !(shift == 21 && shared_huge.get(&(task, start)) == Some(&true)) {
            split.carrefour(&fit(&p.dram_by_node));
        }
    }
    out.push(carrefour.scenario(
        "carrefour",
        "migrate pages used by one node there, interleave the others (page sizes as mapped)",
    ));
    out.push(split.scenario(
        "split-shared-2m",
        "split 2 MiB pages used by several nodes, then Carrefour on the pieces",
    ));
    out.push(interleave.scenario("interleave-all", "every page interleaved over all nodes"));
    for &p in &opts.remote_percents {
        let p = p.min(100);
        let mut t = Traffic::new(n);
        for pa in pages.values() {
            t.percent(&fit(&pa.dram_by_node), p as u64);
        }
        out.push(t.scenario(
            &format!("percent-{p}"),
            &format!("{p} % of each page's traffic remote, the rest on its main user's node"),
        ));
    }
    out
}

fn opt(v: Option<f64>, unit: &str) -> String {
    v.map_or("n/a".into(), |x| format!("{x:.1}{unit}"))
}

/// A human-readable rendering of a report.
pub fn render_text(r: &Report) -> String {
    let mut s = String::new();
    let w = &mut s;
    let _ = writeln!(
        w,
        "samples: {} from {} ({}), workload '{}', {} node(s), period {}",
        r.samples.total,
        if r.machine.is_empty() {
            "?"
        } else {
            &r.machine
        },
        r.origin,
        r.workload,
        r.nodes,
        r.sample_period
    );
    if let Some(t) = &r.truncated {
        let _ = writeln!(
            w,
            "warning: the file is {t}; everything below is of those records"
        );
    }
    if r.samples.dropped > 0 {
        let _ = writeln!(
            w,
            "warning: {} more samples were taken but are not in the file (the recorder's cap); \
             shares below are of the kept samples",
            r.samples.dropped
        );
    }
    let _ = writeln!(
        w,
        "  with CPU node {}, with page node {}, counted as DRAM {}, unknown source {}, writes {}",
        r.samples.with_cpu_node,
        r.samples.with_page_node,
        r.samples.dram,
        r.samples.unknown_source,
        r.samples.writes
    );
    if r.samples.not_accesses > 0 {
        let _ = writeln!(
            w,
            "  not memory accesses {} (page faults or other software events: where they \
             happened counts for page sharing and hot pages, never as DRAM traffic)",
            r.samples.not_accesses
        );
    }
    if !r.samples.by_source.is_empty() {
        let src: Vec<String> = r
            .samples
            .by_source
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        let _ = writeln!(w, "  sources: {}", src.join(", "));
    }
    let _ = writeln!(
        w,
        "duration {:.3} ms, {} samples/s, {} events/s (estimated)",
        r.rate.duration_ns as f64 / 1e6,
        opt(r.rate.samples_per_s, ""),
        opt(r.rate.est_events_per_s, "")
    );
    let _ = writeln!(w, "samples by CPU node: {:?}", r.rate.samples_by_cpu_node);
    let _ = writeln!(
        w,
        "LAR {}  imbalance {}  controller samples {:?}",
        opt(r.lar_percent, " %"),
        opt(r.imbalance_percent, " %"),
        r.controller_samples
    );
    let _ = writeln!(
        w,
        "pages {}  PAMUP {}  NHP(>{} %) {}  PSP {}",
        r.pages.distinct_pages,
        opt(r.pages.pamup_percent, " %"),
        r.pages.hot_threshold_pct,
        r.pages.nhp,
        opt(r.pages.psp_percent, " %")
    );
    let _ = writeln!(w, "top pages:");
    for p in &r.pages.top {
        let _ = writeln!(
            w,
            "  task {:>6} {:#014x} {:>2} {:>8} {:5.1} %{}{} by node {:?} on {} {}",
            p.task,
            p.start,
            p.page_size,
            p.samples,
            p.percent,
            if p.hot { " hot" } else { "" },
            if p.shared { " shared" } else { "" },
            p.samples_by_node,
            p.page_node.map_or("?".into(), |n| format!("node{n}")),
            p.mapping.as_deref().unwrap_or("")
        );
    }
    let _ = writeln!(w, "mappings:");
    for m in &r.mappings {
        let _ = writeln!(
            w,
            "  {:5.1} % {:>8} samples  {:<10} {} (DRAM local {}, remote {})",
            m.percent,
            m.samples,
            m.kind
                .map_or("?".into(), |k| format!("{k:?}").to_lowercase()),
            m.name,
            m.dram_local,
            m.dram_remote
        );
    }
    let fs = &r.false_sharing;
    let huge = fs.regions.iter().filter(|g| g.mapped_huge).count();
    let _ = writeln!(
        w,
        "2 MiB regions examined {} ({} listed are mapped by huge pages; the others are base pages, i.e. what THP would share): falsely shared {}, truly shared {}, mixed {}",
        fs.regions_examined, huge, fs.falsely_shared, fs.truly_shared, fs.mixed
    );
    for g in fs.regions.iter().take(10) {
        let _ = writeln!(
            w,
            "  task {} {:#014x}{} {:?}: {} samples by node {:?}, subpages one-node {:?} shared {} ({:.0} % disjoint), on {:?}, remote DRAM {} -> {:.1} after split",
            g.task,
            g.start,
            if g.mapped_huge { " (THP)" } else { "" },
            g.sharing,
            g.samples,
            g.samples_by_node,
            g.single_node_subpages,
            g.shared_subpages,
            g.disjoint_percent,
            g.page_nodes,
            g.remote_dram.map_or("?".into(), |x| x.to_string()),
            g.remote_dram_after_split
        );
    }
    let _ = writeln!(w, "what-if (DRAM samples):");
    for sc in &r.what_if {
        let _ = writeln!(
            w,
            "  {:<16} LAR {:>8}  imbalance {:>8}  {}",
            sc.name,
            opt(sc.lar_percent, " %"),
            opt(sc.imbalance_percent, " %"),
            sc.description
        );
    }
    s
}
