//! Carrefour-LP (Gaud et al., USENIX ATC 2014; reference/policies.md §7): Carrefour for
//! machines with transparent huge pages. It keeps 2 MiB pages by default, moves them as
//! Carrefour does, splits a huge page that holds a hot spot, and splits every shared huge
//! page (and stops allocating new ones) only when sample-based what-if estimates say 4 KiB
//! placement would reach a clearly better LAR than the best 2 MiB placement.
//!
//! One iteration (`tick`), in the order of §7's algorithm:
//! 1. counters of the last period: MAPTU, LAR, imbalance; if the previous iteration acted
//!    and neither LAR rose nor imbalance fell by `useful_change_percent` (relative), it was
//!    unproductive: do nothing and sleep `backoff_period_ms`;
//! 2. activity gate MAPTU / nodes ≥ `maptu_per_node_min`;
//! 3. conservative component: re-enable THP allocation (and promotion) when page walks or
//!    page faults cost more than 5 % (needs counters the view lacks, see [`conservative`]);
//! 4. reactive component: what-if LAR at 2 MiB and 4 KiB ([`estimate_lar`]), the split
//!    decision with its hysteresis ([`split_wanted`]); split shared 2 MiB pages and disable
//!    THP allocation when it holds; split hot 2 MiB pages (> `split_share_percent` of the
//!    samples) and interleave their 4 KiB pages; splits are throttled to
//!    `split_time_share_percent` of the period and allowed only when MAPTU ≥
//!    `split_maptu_min` and a mechanism is active (or a split was already done);
//! 5. Carrefour's interleave + migrate on the sampled pages (4 KiB subpages for pages split
//!    now), replication off.

use crate::carrefour::{
    global_decision, move_decisions, moves_to_actions, page_decisions, room_in, CarrefourParams,
    Mechanisms, RoundLog,
};
use crate::spec::{param, ParamInfo, ParamKind, ParamValues};
use crate::window::{group_by_block, group_by_current_page, CounterWindow, PageSamples, Rng};
use numalab_core::view::MemoryView;
use numalab_core::{AccessSample, Action, Decision, NodeId, NodeMask, PageSize, Policy};

pub const NAME: &str = "carrefour-lp";
pub const SUMMARY: &str = "Carrefour-LP (USENIX ATC 2014, policies.md §7): Carrefour plus \
     huge-page management: split hot 2 MiB pages, split shared ones and stop THP allocation \
     when 4 KiB placement is estimated to win, back off after unproductive iterations";

use ParamKind::{Flag, Integer, Number};

pub const PARAMS: &[ParamInfo] = &[
    param(
        "period_ms",
        1000.0,
        "ms",
        "iteration period (§7 table: 1 s)",
        Number,
        0.001,
        3.6e6,
    ),
    param(
        "backoff_period_ms",
        5000.0,
        "ms",
        "pause after an unproductive iteration (§7 table: backs off to 5 s)",
        Number,
        0.0,
        3.6e6,
    ),
    param(
        "maptu_per_node_min",
        15.0,
        "DRAM accesses/µs per node",
        "activity gate: MAPTU / nodes must reach this (§7 table)",
        Number,
        0.0,
        1e9,
    ),
    param(
        "split_maptu_min",
        90.0,
        "DRAM accesses/µs, whole machine",
        "THP splitting allowed only at this MAPTU or above (§7 table; read as whole-machine \
         MAPTU since the table writes MAPTU / nodes where it means per node)",
        Number,
        0.0,
        1e9,
    ),
    param(
        "interleave_imbalance_percent",
        35.0,
        "%",
        "Carrefour's interleaving gate: controller imbalance above this (§6 step 3)",
        Number,
        0.0,
        1e6,
    ),
    param(
        "migrate_lar_percent",
        80.0,
        "%",
        "Carrefour's migration gate: LAR below this (§6 step 3)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "migrate_min_samples",
        2.0,
        "samples",
        "a page seen from one node moves only with this many samples (§6 step 5)",
        Integer,
        1.0,
        1e9,
    ),
    param(
        "max_tracked_pages",
        30_000.0,
        "pages",
        "pages tracked per iteration (§6 step 4, accurate mode)",
        Integer,
        1.0,
        1e9,
    ),
    param(
        "split_share_percent",
        6.0,
        "% of DRAM samples",
        "a 2 MiB page holding more than this is hot: split it and interleave its 4 KiB pages \
         (§7 table, §0 NHP)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "no_split_lar_gain_points",
        15.0,
        "LAR points",
        "no forced split when Carrefour on the current 2 MiB pages is estimated to gain at \
         least this (§7 table)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "no_split_lar_below_percent",
        10.0,
        "%",
        "no forced split while the current (sampled) LAR is below this (§7 table)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "forced_split_gain_points",
        5.0,
        "LAR points",
        "force the split when the 4 KiB estimate beats the 2 MiB estimate by at least this \
         (§7 table)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "split_hysteresis_rounds",
        2.0,
        "iterations",
        "the split decision must come out this many iterations in a row (§7 table: twice)",
        Integer,
        1.0,
        1000.0,
    ),
    param(
        "split_time_share_percent",
        3.0,
        "% of the period",
        "split throttle: time spent splitting per iteration (§7 table)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "split_cost_us",
        20.0,
        "µs per split",
        "estimated cost of one split, turning the throttle into a page count [nl: the \
         presets' split_ns; the view does not report time spent splitting]",
        Number,
        0.001,
        1e9,
    ),
    param(
        "useful_change_percent",
        10.0,
        "% (relative)",
        "an iteration was useful if LAR rose or imbalance fell by more than this (§7 table)",
        Number,
        0.0,
        1e6,
    ),
    param(
        "walk_share_enable_percent",
        5.0,
        "%",
        "conservative component: page-walk L2-miss share above this re-enables THP \
         allocation and promotion (§7)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "fault_share_enable_percent",
        5.0,
        "%",
        "conservative component: max page-fault time share above this re-enables THP \
         allocation (§7)",
        Number,
        0.0,
        100.0,
    ),
    param(
        "hold_promotion_after_split",
        1.0,
        "bool",
        "stop khugepaged promotion once a page is split, so it does not collapse the split \
         page back onto one node [nl]",
        Flag,
        0.0,
        1.0,
    ),
    param(
        "seed",
        1.0,
        "",
        "seed of the interleaving draws [nl]",
        Integer,
        0.0,
        1e15,
    ),
];

/// Carrefour-LP's parameters (defaults: the public runtime's usenix profile, §7 table).
#[derive(Clone, Debug, PartialEq)]
pub struct CarrefourLpParams {
    pub period_ms: f64,
    pub backoff_period_ms: f64,
    pub maptu_per_node_min: f64,
    pub split_maptu_min: f64,
    /// Carrefour's thresholds, used for the interleave + migrate step.
    pub carrefour: CarrefourParams,
    pub split_share_percent: f64,
    pub no_split_lar_gain_points: f64,
    pub no_split_lar_below_percent: f64,
    pub forced_split_gain_points: f64,
    pub split_hysteresis_rounds: u32,
    pub split_time_share_percent: f64,
    pub split_cost_us: f64,
    pub useful_change_percent: f64,
    pub walk_share_enable_percent: f64,
    pub fault_share_enable_percent: f64,
    pub hold_promotion_after_split: bool,
}

impl Default for CarrefourLpParams {
    fn default() -> Self {
        Self::from_values(&ParamValues::defaults(NAME, PARAMS))
    }
}

impl CarrefourLpParams {
    pub fn from_values(v: &ParamValues) -> Self {
        CarrefourLpParams {
            period_ms: v.get("period_ms"),
            backoff_period_ms: v.get("backoff_period_ms"),
            maptu_per_node_min: v.get("maptu_per_node_min"),
            split_maptu_min: v.get("split_maptu_min"),
            carrefour: CarrefourParams {
                period_ms: v.get("period_ms"),
                // the activity gate is Carrefour-LP's own (per node), checked before
                maptu_min: 0.0,
                interleave_imbalance_percent: v.get("interleave_imbalance_percent"),
                migrate_lar_percent: v.get("migrate_lar_percent"),
                migrate_min_samples: v.get_u64("migrate_min_samples") as u32,
                max_tracked_pages: v.get_u64("max_tracked_pages") as usize,
                seed: v.get_u64("seed"),
            },
            split_share_percent: v.get("split_share_percent"),
            no_split_lar_gain_points: v.get("no_split_lar_gain_points"),
            no_split_lar_below_percent: v.get("no_split_lar_below_percent"),
            forced_split_gain_points: v.get("forced_split_gain_points"),
            split_hysteresis_rounds: v.get_u64("split_hysteresis_rounds") as u32,
            split_time_share_percent: v.get("split_time_share_percent"),
            split_cost_us: v.get("split_cost_us"),
            useful_change_percent: v.get("useful_change_percent"),
            walk_share_enable_percent: v.get("walk_share_enable_percent"),
            fault_share_enable_percent: v.get("fault_share_enable_percent"),
            hold_promotion_after_split: v.flag("hold_promotion_after_split"),
        }
    }

    /// Splits allowed per iteration: `split_time_share_percent` of the period over the cost
    /// of one split.
    pub fn split_budget(&self) -> usize {
        let budget_us = self.split_time_share_percent / 100.0 * self.period_ms * 1000.0;
        (budget_us / self.split_cost_us).floor() as usize
    }
}

/// LAR estimates from one iteration's DRAM samples (§7 "What-if LAR from samples"), %.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct LarEstimates {
    /// Samples whose accessing node holds the page now.
    pub current_percent: f64,
    /// After Carrefour on 2 MiB pages: a 2 MiB block seen from one node is assumed moved
    /// there, one seen from several nodes interleaved (each sample local with prob. 1/N).
    pub huge_percent: f64,
    /// The same with 4 KiB pages (after splitting).
    pub base_percent: f64,
    pub samples: usize,
}

/// §7's what-if estimates over DRAM-served samples on a machine of `nodes` nodes; `None`
/// without DRAM samples.
pub fn estimate_lar(samples: &[AccessSample], nodes: usize) -> Option<LarEstimates> {
    let dram: Vec<&AccessSample> = samples.iter().filter(|s| s.source.is_dram()).collect();
    if dram.is_empty() || nodes == 0 {
        return None;
    }
    let n = dram.len() as f64;
    let local = dram.iter().filter(|s| s.is_local()).count() as f64;
    let est = |size: PageSize| {
        let expected: f64 = group_by_block(samples, size, nodes)
            .iter()
            .map(|p| {
                let t = p.total() as f64;
                if p.accessing_nodes() == 1 {
                    t
                } else {
                    t / nodes as f64
                }
            })
            .sum();
        100.0 * expected / n
    };
    Some(LarEstimates {
        current_percent: 100.0 * local / n,
        huge_percent: est(PageSize::Huge2M),
        base_percent: est(PageSize::Base4K),
        samples: dram.len(),
    })
}

/// §7's reactive split test for one iteration (before hysteresis): no split when Carrefour on
/// 2 MiB pages is expected to gain enough or the current LAR is very low; split when the
/// 4 KiB estimate beats the 2 MiB one by the forced-split margin.
pub fn split_wanted(e: &LarEstimates, p: &CarrefourLpParams) -> bool {
    let gain_huge = e.huge_percent - e.current_percent;
    if gain_huge >= p.no_split_lar_gain_points || e.current_percent < p.no_split_lar_below_percent {
        return false;
    }
    e.base_percent - e.huge_percent >= p.forced_split_gain_points
}

/// §7's conservative component: `Some((allocate, promote))` to re-enable huge pages when
/// page walks (`walk_share_percent`, page-walk L2-miss share) or page faults
/// (`fault_share_percent`, max page-fault time share) cost more than their thresholds.
/// The policy measures both over the interval since its last check (`walk_and_fault_shares`).
pub fn conservative(
    walk_share_percent: Option<f64>,
    fault_share_percent: Option<f64>,
    p: &CarrefourLpParams,
) -> Option<(bool, bool)> {
    if walk_share_percent.is_some_and(|w| w > p.walk_share_enable_percent) {
        Some((true, true))
    } else if fault_share_percent.is_some_and(|f| f > p.fault_share_enable_percent) {
        // pages already faulted in gain nothing from promotion
        Some((true, false))
    } else {
        None
    }
}

/// Why a 2 MiB page is split.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum SplitReason {
    /// Holds more than `split_share_percent` of the samples: split and interleave.
    Hot,
    /// Seen from several nodes while the split decision holds: split, place 4 KiB pages.
    Shared,
}

/// The 2 MiB pages to split this iteration, hot pages first (most sampled first), then shared
/// pages (most sampled first), at most `budget`. `pages` are grouped by current mapping;
/// `dram_samples` is the iteration's number of DRAM samples.
pub fn split_candidates(
    pages: &[PageSamples],
    dram_samples: usize,
    split_shared: bool,
    budget: usize,
    p: &CarrefourLpParams,
) -> Vec<(usize, SplitReason)> {
    let mut hot: Vec<usize> = Vec::new();
    let mut shared: Vec<usize> = Vec::new();
    for (i, pg) in pages.iter().enumerate() {
        if pg.size != PageSize::Huge2M {
            continue;
        }
        if 100.0 * pg.total() as f64 > p.split_share_percent * dram_samples as f64 {
            hot.push(i);
        } else if split_shared && pg.accessing_nodes() >= 2 {
            shared.push(i);
        }
    }
    let by_samples = |v: &mut Vec<usize>| {
        v.sort_by(|a, b| {
            pages[*b]
                .total()
                .cmp(&pages[*a].total())
                .then(pages[*a].start.cmp(&pages[*b].start))
        })
    };
    by_samples(&mut hot);
    by_samples(&mut shared);
    hot.into_iter()
        .map(|i| (i, SplitReason::Hot))
        .chain(shared.into_iter().map(|i| (i, SplitReason::Shared)))
        .take(budget)
        .collect()
}

/// What one iteration did.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum LpState {
    /// Sleeping after an unproductive iteration.
    BackedOff,
    /// The previous iteration's actions did not help: nothing done, back-off starts.
    Unproductive,
    /// Below the activity gate.
    #[default]
    Idle,
    /// Ran the algorithm (possibly without finding anything to do).
    Active,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct LpRound {
    pub time_ns: u64,
    pub state: LpState,
    pub maptu_per_node: f64,
    pub mechanisms: Mechanisms,
    pub estimates: Option<LarEstimates>,
    pub split_wanted: bool,
    /// Consecutive iterations the split decision came out (hysteresis counter).
    pub split_votes: u32,
    pub split_mode: bool,
    pub split_allowed: bool,
    pub split_budget: usize,
    /// Start addresses of the pages split, by reason.
    pub hot_splits: Vec<u64>,
    pub shared_splits: Vec<u64>,
    /// A `SetThpAllocation { allocate, promote }` issued this iteration.
    pub thp_allocation: Option<(bool, bool)>,
    pub page_moves: usize,
    pub actions: usize,
}

pub struct CarrefourLp {
    params: CarrefourLpParams,
    name: String,
    window: CounterWindow,
    rng: Rng,
    split_votes: u32,
    split_done: bool,
    thp_allocate: bool,
    thp_promote: bool,
    /// The THP setting last issued (the machine's is assumed on at the start, §7).
    thp_issued: (bool, bool),
    /// LAR and imbalance measured by the last iteration that acted, to judge it next time.
    pending_eval: Option<(Option<f64>, Option<f64>)>,
    backoff_until_ns: u64,
    log: Option<RoundLog<LpRound>>,
    /// Per-thread counters and time at the last conservative check (the interval's deltas
    /// give the page-walk miss share and the fault time share).
    prev_counters: Vec<(numalab_core::ThreadId, numalab_core::view::ThreadCounters)>,
    prev_check_ns: u64,
    /// Decisions of the ticks since `take_decisions` last ran.
    decisions: Vec<Decision>,
}

impl CarrefourLp {
    /// §7's conservative inputs over the interval since the last check: page-walk share of
    /// private-cache misses (all threads) and the largest per-thread share of time in faults.
    fn walk_and_fault_shares(&mut self, view: &dyn MemoryView) -> (Option<f64>, Option<f64>) {
        let now = view.now_ns();
        let (mut walk, mut miss, mut fault_max) = (0u64, 0u64, 0u64);
        let mut next = Vec::new();
        for t in view.threads() {
            let c = view.thread_counters(t.thread);
            let prev = self
                .prev_counters
                .iter()
                .find(|(id, _)| *id == t.thread)
                .map(|(_, c)| *c)
                .unwrap_or_default();
            walk += c
                .page_walk_private_misses
                .saturating_sub(prev.page_walk_private_misses);
            miss += c.private_misses.saturating_sub(prev.private_misses);
            fault_max = fault_max.max(c.fault_ns.saturating_sub(prev.fault_ns));
            next.push((t.thread, c));
        }
        let elapsed_ns = now.saturating_sub(self.prev_check_ns);
        self.prev_counters = next;
        self.prev_check_ns = now;
        (
            numalab_core::metrics::pagewalk_l2_miss_share(walk, miss),
            numalab_core::metrics::max_page_fault_time_share(&[fault_max], elapsed_ns),
        )
    }

    pub fn new(params: CarrefourLpParams) -> CarrefourLp {
        let name = if params == CarrefourLpParams::default() {
            NAME.to_string()
        } else {
            format!("{NAME}:custom")
        };
        CarrefourLp {
            rng: Rng::new(params.carrefour.seed),
            params,
            name,
            window: CounterWindow::default(),
            split_votes: 0,
            split_done: false,
            // §7: the loop starts with 2 MiB allocation and promotion enabled
            thp_allocate: true,
            thp_promote: true,
            thp_issued: (true, true),
            pending_eval: None,
            backoff_until_ns: 0,
            log: None,
            prev_counters: Vec::new(),
            prev_check_ns: 0,
            decisions: Vec::new(),
        }
    }

    pub fn from_values(v: &ParamValues) -> CarrefourLp {
        let mut c = CarrefourLp::new(CarrefourLpParams::from_values(v));
        c.name = v.canonical_name();
        c
    }

    pub fn with_log(mut self, log: RoundLog<LpRound>) -> Self {
        self.log = Some(log);
        self
    }

    pub fn params(&self) -> &CarrefourLpParams {
        &self.params
    }

    fn record(&self, round: LpRound) {
        if let Some(log) = &self.log {
            log.lock().expect("round log").push(round);
        }
    }

    /// §7 "useful iteration": LAR rose or imbalance fell by more than the relative margin.
    fn was_useful(&self, before: (Option<f64>, Option<f64>), m: &Mechanisms) -> Option<bool> {
        let k = self.params.useful_change_percent / 100.0;
        let (lar0, imb0) = before;
        let (lar1, imb1) = (m.lar_percent, m.imbalance_percent);
        if lar1.is_none() && imb1.is_none() {
            return None;
        }
        let lar_up = matches!((lar0, lar1), (Some(a), Some(b)) if b > a * (1.0 + k) && b > a);
        let imb_down = matches!((imb0, imb1), (Some(a), Some(b)) if b < a * (1.0 - k));
        Some(lar_up || imb_down)
    }
}

impl Policy for CarrefourLp {
    fn name(&self) -> &str {
        &self.name
    }

    fn period_ns(&self) -> u64 {
        (self.params.period_ms * 1e6).max(1.0) as u64
    }

    fn take_decisions(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.decisions)
    }

    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action> {
        // the window advances every tick, so the iteration after a back-off looks at the
        // last period only
        let counters = self.window.advance(view);
        let now = view.now_ns();
        let p = self.params.clone();
        let mut round = LpRound {
            time_ns: now,
            maptu_per_node: counters.maptu_per_node(),
            mechanisms: global_decision(&counters, &p.carrefour),
            ..Default::default()
        };
        if now < self.backoff_until_ns {
            round.state = LpState::BackedOff;
            self.record(round);
            return Vec::new();
        }
        if let Some(before) = self.pending_eval.take() {
            if self.was_useful(before, &round.mechanisms) == Some(false) {
                // switch the mechanisms off for the back-off period
                self.backoff_until_ns = now + (p.backoff_period_ms * 1e6) as u64;
                self.decisions.push(Decision::new(
                    "back off",
                    1,
                    format!(
                        "the last iteration that acted improved neither LAR nor imbalance: mechanisms off for {} ms (Carrefour-LP §7)",
                        p.backoff_period_ms
                    ),
                ));
                self.split_votes = 0;
                round.state = LpState::Unproductive;
                self.record(round);
                return Vec::new();
            }
        }
        if round.maptu_per_node < p.maptu_per_node_min || counters.dram_requests() == 0 {
            round.state = LpState::Idle;
            round.mechanisms.interleave = false;
            round.mechanisms.migrate = false;
            self.split_votes = 0;
            self.record(round);
            return Vec::new();
        }
        round.state = LpState::Active;
        let m = round.mechanisms.clone();
        let mut actions = Vec::new();

        // conservative component: THP back on when walks or faults cost too much
        let (walk_share, fault_share) = self.walk_and_fault_shares(view);
        if let Some((allocate, promote)) = conservative(walk_share, fault_share, &p) {
            if (allocate, promote) != (self.thp_allocate, self.thp_promote) {
                let pct = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.1} %"));
                self.decisions.push(Decision::new(
                    if promote { "thp on" } else { "thp allocation on" },
                    1,
                    format!(
                        "conservative component: page-walk share {} (threshold {} %), fault-time share {} (threshold {} %) (Carrefour-LP §7)",
                        pct(walk_share),
                        p.walk_share_enable_percent,
                        pct(fault_share),
                        p.fault_share_enable_percent
                    ),
                ));
            }
            self.thp_allocate = allocate;
            self.thp_promote = promote;
        }

        // reactive component
        let samples = view.samples();
        let nodes = view.num_nodes();
        round.estimates = estimate_lar(samples, nodes);
        round.split_wanted = round.estimates.is_some_and(|e| split_wanted(&e, &p));
        self.split_votes = if round.split_wanted {
            self.split_votes + 1
        } else {
            0
        };
        round.split_votes = self.split_votes;
        round.split_mode = self.split_votes >= p.split_hysteresis_rounds;
        round.split_allowed =
            m.maptu >= p.split_maptu_min && (m.interleave || m.migrate || self.split_done);
        round.split_budget = p.split_budget();

        let pages = group_by_current_page(view, samples, p.carrefour.max_tracked_pages);
        let dram_samples = pages.iter().map(|pg| pg.total() as usize).sum();
        let split_shared = round.split_mode || !self.thp_allocate;
        let splits = if round.split_allowed {
            split_candidates(&pages, dram_samples, split_shared, round.split_budget, &p)
        } else {
            Vec::new()
        };
        if round.split_allowed && round.split_mode && self.thp_allocate {
            self.thp_allocate = false;
            self.decisions.push(Decision::new(
                "thp allocation off",
                1,
                format!(
                    "reactive component: LAR estimated better with 4 KiB pages for {} iterations in a row (Carrefour-LP §7)",
                    self.split_votes
                ),
            ));
        }
        let hot = splits
            .iter()
            .filter(|(_, r)| *r == SplitReason::Hot)
            .count() as u64;
        if hot > 0 {
            self.decisions.push(Decision::new(
                "split + interleave",
                hot,
                format!(
                    "hot 2 MiB page: more than {} % of the DRAM samples (Carrefour-LP §7)",
                    p.split_share_percent
                ),
            ));
        }
        let shared = splits.len() as u64 - hot;
        if shared > 0 {
            self.decisions.push(Decision::new(
                "split",
                shared,
                "2 MiB page sampled from several nodes while splitting is estimated to raise LAR; its 4 KiB pages placed by Carrefour (Carrefour-LP §7)",
            ));
        }
        if !splits.is_empty() {
            self.split_done = true;
            if p.hold_promotion_after_split {
                self.thp_promote = false;
            }
        }
        let want = (self.thp_allocate, self.thp_promote);
        if want != self.thp_issued {
            actions.push(Action::SetThpAllocation {
                allocate: want.0,
                promote: want.1,
            });
            self.thp_issued = want;
            round.thp_allocation = Some(want);
        }

        let all_nodes = NodeMask::from_nodes(
            (0..nodes)
                .map(|n| NodeId(n as u16))
                .filter(|n| view.free_bytes(*n) >= PageSize::Base4K.bytes()),
        );
        let mut split_now = vec![None; pages.len()];
        for &(i, reason) in &splits {
            let pg = &pages[i];
            split_now[i] = Some(reason);
            actions.push(Action::SplitHuge {
                task: pg.task,
                addr: pg.start,
            });
            match reason {
                SplitReason::Hot => {
                    round.hot_splits.push(pg.start);
                    actions.push(Action::Interleave {
                        task: pg.task,
                        start: pg.start,
                        len_bytes: pg.size.bytes(),
                        nodes: all_nodes,
                    });
                }
                SplitReason::Shared => round.shared_splits.push(pg.start),
            }
        }

        // Carrefour's interleave + migrate: pages as mapped, except pages split as shared
        // just now, which are placed by their 4 KiB subpages
        let mut candidates: Vec<PageSamples> = Vec::with_capacity(pages.len());
        for (i, pg) in pages.iter().enumerate() {
            match split_now[i] {
                None => candidates.push(pg.clone()),
                Some(SplitReason::Hot) => {}
                Some(SplitReason::Shared) => {
                    let inside: Vec<AccessSample> = samples
                        .iter()
                        .filter(|s| s.task == pg.task && s.addr >= pg.start && s.addr < pg.end())
                        .copied()
                        .collect();
                    candidates.extend(
                        group_by_block(&inside, PageSize::Base4K, nodes)
                            .into_iter()
                            .map(|mut sub| {
                                sub.node = pg.node;
                                sub
                            }),
                    );
                }
            }
        }
        let shares = counters.controller_share_percent();
        let room = room_in(view);
        let moves = page_decisions(&candidates, &m, &shares, &room, &p.carrefour, &mut self.rng);
        round.page_moves = moves.len();
        self.decisions
            .extend(move_decisions(&moves, &m, &p.carrefour));
        actions.extend(moves_to_actions(&moves));

        let acted = actions.iter().any(|a| {
            matches!(
                a,
                Action::Migrate { .. }
                    | Action::MovePages { .. }
                    | Action::Interleave { .. }
                    | Action::SplitHuge { .. }
            )
        });
        if acted {
            self.pending_eval = Some((m.lar_percent, m.imbalance_percent));
        }
        round.actions = actions.len();
        self.record(round);
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_core::{CpuId, DataSource, TaskId, ThreadId};

    fn s(addr: u64, cpu_node: u16, page_node: u16) -> AccessSample {
        AccessSample {
            time_ns: 0,
            task: TaskId(0),
            thread: ThreadId(cpu_node as u32),
            cpu: CpuId(cpu_node as u32),
            cpu_node: NodeId(cpu_node),
            addr,
            page_node: NodeId(page_node),
            page_size: PageSize::Huge2M,
            source: if cpu_node == page_node {
                DataSource::LocalDram
            } else {
                DataSource::RemoteDram
            },
            latency_ns: 100.0,
            write: false,
        }
    }

    const MB2: u64 = 2 << 20;

    #[test]
    fn what_if_lar_for_false_sharing_favours_4k() {
        // One 2 MiB page on node 0; nodes 0..3 each read their own 4 KiB subpage 10 times:
        // 2 MiB view: one page shared by 4 nodes -> 1/4 expected local; 4 KiB view: every
        // subpage private -> all local. Current: node 0's samples only, 25 %.
        let mut v = Vec::new();
        for n in 0..4u16 {
            for i in 0..10 {
                v.push(s(MB2 + n as u64 * 4096 + i * 64, n, 0));
            }
        }
        // plus a cache-served sample, which must not count
        let mut cached = s(MB2, 1, 0);
        cached.source = DataSource::LocalLlc;
        v.push(cached);
        let e = estimate_lar(&v, 4).unwrap();
        assert_eq!(e.samples, 40);
        assert_eq!(e.current_percent, 25.0);
        assert_eq!(e.huge_percent, 25.0);
        assert_eq!(e.base_percent, 100.0);
        let p = CarrefourLpParams::default();
        assert!(split_wanted(&e, &p));
        assert_eq!(estimate_lar(&[cached], 4), None);
    }

    #[test]
    fn no_split_when_moving_2m_pages_suffices_or_lar_is_tiny() {
        let p = CarrefourLpParams::default();
        // Pages private to one remote node each: Carrefour on 2 MiB gains 100 points.
        let mut v = Vec::new();
        for n in 0..4u16 {
            for i in 0..10 {
                v.push(s((n as u64 + 1) * MB2 + i * 4096, n, (n + 1) % 4));
            }
        }
        let e = estimate_lar(&v, 4).unwrap();
        assert_eq!((e.current_percent, e.huge_percent), (0.0, 100.0));
        assert!(!split_wanted(&e, &p));
        // Gains below 15 points both ways, 4 KiB better by 4.9 points only: no split.
        let e = LarEstimates {
            current_percent: 50.0,
            huge_percent: 60.0,
            base_percent: 64.9,
            samples: 100,
        };
        assert!(!split_wanted(&e, &p));
        // By 5 points: split.
        let e = LarEstimates {
            base_percent: 65.0,
            ..e
        };
        assert!(split_wanted(&e, &p));
        // Same but current LAR 9 %: no forced split (§7 "or current LAR < 10 %").
        let e = LarEstimates {
            current_percent: 9.0,
            huge_percent: 20.0,
            base_percent: 90.0,
            samples: 100,
        };
        assert!(!split_wanted(&e, &p));
    }

    fn page(start: u64, size: PageSize, per_node: &[u32]) -> PageSamples {
        let mut p = PageSamples::new(TaskId(0), start, size, NodeId(0), per_node.len());
        p.per_node = per_node.to_vec();
        p
    }

    #[test]
    fn hot_pages_first_then_shared_pages_within_the_throttle() {
        let p = CarrefourLpParams::default();
        // 100 samples: A 2 MiB 7 % from one node (hot), B 2 MiB 6 % shared (not hot: the
        // threshold is strict), C 2 MiB 20 % shared (hot), D 4 KiB 30 % (not a huge page),
        // E 2 MiB 5 % shared.
        let pages = [
            page(0x20_0000, PageSize::Huge2M, &[7, 0]),
            page(0x40_0000, PageSize::Huge2M, &[3, 3]),
            page(0x60_0000, PageSize::Huge2M, &[10, 10]),
            page(0x80_0000, PageSize::Base4K, &[30, 0]),
            page(0xa0_0000, PageSize::Huge2M, &[4, 1]),
        ];
        let c = split_candidates(&pages, 100, false, 10, &p);
        assert_eq!(c, vec![(2, SplitReason::Hot), (0, SplitReason::Hot)]);
        let c = split_candidates(&pages, 100, true, 10, &p);
        assert_eq!(
            c,
            vec![
                (2, SplitReason::Hot),
                (0, SplitReason::Hot),
                (1, SplitReason::Shared),
                (4, SplitReason::Shared)
            ]
        );
        // throttle: a budget of 3 keeps the first three
        assert_eq!(split_candidates(&pages, 100, true, 3, &p).len(), 3);
        // 3 % of 1 s at 20 µs per split -> 1 500 splits; 3 % of 2 ms -> 3.
        assert_eq!(p.split_budget(), 1500);
        let short = CarrefourLpParams {
            period_ms: 2.0,
            ..p.clone()
        };
        assert_eq!(short.split_budget(), 3);
    }

    #[test]
    fn conservative_component_order() {
        let p = CarrefourLpParams::default();
        assert_eq!(conservative(Some(6.0), Some(50.0), &p), Some((true, true)));
        assert_eq!(conservative(Some(5.0), Some(6.0), &p), Some((true, false)));
        assert_eq!(conservative(Some(1.0), Some(1.0), &p), None);
        assert_eq!(conservative(None, None, &p), None);
    }
}
