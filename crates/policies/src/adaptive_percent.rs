//! Congestion-aware adaptive remote percentage (reference/policies.md §5, numalab's design
//! [nl] of the thesis's future work): every period, measure each memory controller's
//! utilisation and move each task's remote share p up when its local controller is congested
//! and a remote one has room, down when the remote one is busy; apply p as the task's
//! remote-percentage policy (`MemPolicy::RemotePercent`) for new allocations and, with
//! `move=1`, move the difference of the pages already placed.
//!
//! Control law, per task with local node L (where most of its threads run) and remote node R
//! (the least utilised other node, ties to the nearest then the lowest id):
//!
//! ```text
//! u_n = bytes served by controller n in the period / (peak_n · period)
//! if u_R > u_hi or u_R > u_L:               p -= step     (the remote side is no relief)
//! else if u_L > u_hi and u_R < u_L - margin: p += step     (congested here, room there)
//! p = clamp(p, 0, p_max)
//! ```
//!
//! Lowering takes precedence, so p never rises onto a busy remote controller. The margin is a
//! dead band: between "L congested with R clearly lighter" and "R busy or busier" p holds,
//! which keeps the loop from chasing its own measurement noise.

use crate::carrefour::RoundLog;
use crate::spec::{num, ParamInfo, ParamKind, ParamValues};
use crate::window::CounterWindow;
use numalab_core::view::{MemoryView, RegionInfo};
use numalab_core::{Action, Decision, MemPolicy, NodeId, NodeMask, Policy, TaskId};
use std::collections::BTreeMap;

pub const NAME: &str = "adaptive-percent";
pub const SUMMARY: &str = "adaptive remote percentage (policies.md §5 [nl]): per period, raise \
     a task's remote share p by step while its local controller is above u_hi and a remote one \
     is lighter by the margin, lower it when the remote one is busy or busier; applied as the \
     task's remote-percent policy, optionally moving the difference of placed pages";

/// Bytes per DRAM request (one cache line).
const LINE_BYTES: f64 = 64.0;

pub const PARAMS: &[ParamInfo] = &[
    num(
        "period_ms",
        1000.0,
        "ms",
        "control period (§5 [nl]: every 1 s)",
        0.001,
        3.6e6,
    ),
    ParamInfo {
        key: "step",
        default: 10.0,
        unit: "%",
        meaning: "change of p per period (§5 [nl])",
        kind: ParamKind::Integer,
        min: 1.0,
        max: 100.0,
    },
    ParamInfo {
        key: "p_max",
        default: 50.0,
        unit: "%",
        meaning: "largest remote share (§5 [nl])",
        kind: ParamKind::Integer,
        min: 0.0,
        max: 100.0,
    },
    num(
        "u_hi",
        0.7,
        "fraction of peak",
        "a controller above this utilisation is congested (§5 [nl])",
        0.0,
        10.0,
    ),
    num(
        "margin",
        0.1,
        "fraction of peak",
        "p rises only while the remote controller is this much less utilised (§5 [nl])",
        0.0,
        10.0,
    ),
    ParamInfo {
        key: "move",
        default: 0.0,
        unit: "bool",
        meaning: "also move_pages the difference of already placed pages (§5: the split of a \
                  running process is changed with move_pages)",
        kind: ParamKind::Flag,
        min: 0.0,
        max: 1.0,
    },
    num(
        "peak_gbps",
        0.0,
        "GB/s per controller",
        "controller peak bandwidth; 0 takes it from the view (machine description, HMAT) \
         [nl]",
        0.0,
        1e6,
    ),
];

#[derive(Clone, Debug, PartialEq)]
pub struct AdaptivePercentParams {
    pub period_ms: f64,
    pub step: u8,
    pub p_max: u8,
    pub u_hi: f64,
    pub margin: f64,
    pub move_pages: bool,
    /// 0: from the view.
    pub peak_gbps: f64,
}

impl Default for AdaptivePercentParams {
    fn default() -> Self {
        Self::from_values(&ParamValues::defaults(NAME, PARAMS))
    }
}

impl AdaptivePercentParams {
    pub fn from_values(v: &ParamValues) -> Self {
        AdaptivePercentParams {
            period_ms: v.get("period_ms"),
            step: v.get_u64("step") as u8,
            p_max: v.get_u64("p_max") as u8,
            u_hi: v.get("u_hi"),
            margin: v.get("margin"),
            move_pages: v.flag("move"),
            peak_gbps: v.get("peak_gbps"),
        }
    }
}

/// The decision for one task in one period.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskPercent {
    pub task: TaskId,
    pub local: NodeId,
    pub remote: NodeId,
    /// p before and after this period's step.
    pub before: u8,
    pub percent: u8,
    /// 4 KiB units of the task's placed pages on nodes other than `local`, and in all, before
    /// this period's moves.
    pub remote_units: u64,
    pub total_units: u64,
}

/// What one period measured and decided.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct AdaptiveRound {
    pub time_ns: u64,
    /// Utilisation of each controller over the period.
    pub util: Vec<f64>,
    pub tasks: Vec<TaskPercent>,
    /// Pages (folios) moved by `move=1`.
    pub pages_moved: usize,
}

/// One control step (see the module doc): the new p.
pub fn control(p: u8, u_local: f64, u_remote: f64, params: &AdaptivePercentParams) -> u8 {
    let p = p as i32;
    let step = params.step as i32;
    let next = if u_remote > params.u_hi || u_remote > u_local {
        p - step
    } else if u_local > params.u_hi && u_remote < u_local - params.margin {
        p + step
    } else {
        p
    };
    next.clamp(0, params.p_max as i32) as u8
}

/// Peak bandwidth of every controller, bytes/s: `peak_gbps` when set, else the view's.
pub fn controller_peaks(view: &dyn MemoryView, peak_gbps: f64) -> Result<Vec<f64>, String> {
    (0..view.num_nodes())
        .map(|n| {
            if peak_gbps > 0.0 {
                return Ok(peak_gbps * 1e9);
            }
            view.controller_peak_bytes_per_s(NodeId(n as u16))
                .filter(|b| *b > 0.0)
                .ok_or_else(|| {
                    format!(
                        "{NAME}: the view gives no peak bandwidth for node {n}'s memory \
                         controller (on Linux it comes from HMAT), so utilisation cannot be \
                         measured: give it as {NAME}:peak_gbps=<GB/s per controller>"
                    )
                })
        })
        .collect()
}

pub struct AdaptivePercent {
    params: AdaptivePercentParams,
    name: String,
    window: CounterWindow,
    /// Current p and the (p, remote node) last applied, per task.
    percent: BTreeMap<TaskId, u8>,
    applied: BTreeMap<TaskId, (u8, NodeId)>,
    log: Option<RoundLog<AdaptiveRound>>,
    /// Decisions of the ticks since `take_decisions` last ran.
    decisions: Vec<Decision>,
}

impl AdaptivePercent {
    pub fn new(params: AdaptivePercentParams) -> AdaptivePercent {
        AdaptivePercent {
            name: if params == AdaptivePercentParams::default() {
                NAME.to_string()
            } else {
                format!("{NAME}:custom")
            },
            params,
            window: CounterWindow::default(),
            percent: BTreeMap::new(),
            applied: BTreeMap::new(),
            log: None,
            decisions: Vec::new(),
        }
    }

    pub fn from_values(v: &ParamValues) -> AdaptivePercent {
        let mut a = AdaptivePercent::new(AdaptivePercentParams::from_values(v));
        a.name = v.canonical_name();
        a
    }

    /// Record every period into `log`.
    pub fn with_log(mut self, log: RoundLog<AdaptiveRound>) -> Self {
        self.log = Some(log);
        self
    }

    pub fn params(&self) -> &AdaptivePercentParams {
        &self.params
    }

    /// The current p of `task` (0 before its first step).
    pub fn percent_of(&self, task: TaskId) -> u8 {
        self.percent.get(&task).copied().unwrap_or(0)
    }
}

/// A stable pseudo-random rank of a page (SplitMix64 of task and page number): pages go remote
/// in ascending rank and come back in descending rank, so raising p and lowering it again
/// moves the same pages, and runs are reproducible.
fn page_rank(task: TaskId, start: u64) -> u64 {
    let mut z = ((task.0 as u64) << 48 ^ (start >> 12)).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The populated folios (start, 4 KiB units, node) of `task`'s regions that its task policy
/// governs (no range policy of their own).
fn task_pages(
    view: &dyn MemoryView,
    regions: &[RegionInfo],
    task: TaskId,
) -> Vec<(u64, u64, NodeId)> {
    let mut out = Vec::new();
    for r in regions
        .iter()
        .filter(|r| r.task == task && matches!(r.policy, None | Some(MemPolicy::Default)))
    {
        let mut a = r.start;
        while a < r.start + r.len_bytes {
            match view.page(task, a) {
                Some(pg) => {
                    out.push((pg.start, pg.size.bytes() / 4096, pg.node));
                    a = pg.start + pg.size.bytes();
                }
                None => a += 4096,
            }
        }
    }
    out
}

/// Moves that bring the share of `pages` off `local` to `percent` % (in 4 KiB units): local
/// pages to `remote` in ascending rank, or off-local pages back home in descending rank,
/// until the difference is covered (a huge page may overshoot by its size).
fn difference_moves(
    task: TaskId,
    pages: &[(u64, u64, NodeId)],
    local: NodeId,
    remote: NodeId,
    percent: u8,
) -> Vec<(u64, NodeId)> {
    let total: u64 = pages.iter().map(|p| p.1).sum();
    let off: u64 = pages.iter().filter(|p| p.2 != local).map(|p| p.1).sum();
    let target = total * percent as u64 / 100;
    let mut moves = Vec::new();
    let (mut cands, need, to): (Vec<_>, u64, NodeId) = if off < target {
        let c = pages.iter().filter(|p| p.2 == local).collect();
        (c, target - off, remote)
    } else {
        let c = pages.iter().filter(|p| p.2 != local).collect();
        (c, off - target, local)
    };
    if need == 0 {
        return moves;
    }
    cands.sort_by_key(|p| page_rank(task, p.0));
    if to == local {
        cands.reverse();
    }
    let mut moved = 0;
    for p in cands {
        if moved >= need {
            break;
        }
        moves.push((p.0, to));
        moved += p.1;
    }
    moves.sort();
    moves
}

impl Policy for AdaptivePercent {
    fn name(&self) -> &str {
        &self.name
    }

    fn period_ns(&self) -> u64 {
        (self.params.period_ms * 1e6).max(1.0) as u64
    }

    fn check(&self, view: &dyn MemoryView) -> Result<(), String> {
        controller_peaks(view, self.params.peak_gbps).map(|_| ())
    }

    fn take_decisions(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.decisions)
    }

    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action> {
        // Runners call `check` first; a view that still lacks peaks gets no actions rather
        // than actions computed from made-up figures.
        let Ok(peaks) = controller_peaks(view, self.params.peak_gbps) else {
            return Vec::new();
        };
        let c = self.window.advance(view);
        let mut round = AdaptiveRound {
            time_ns: view.now_ns(),
            ..Default::default()
        };
        let mut actions = Vec::new();
        if c.interval_ns == 0 {
            return actions;
        }
        let secs = c.interval_ns as f64 * 1e-9;
        let util: Vec<f64> = c
            .served
            .iter()
            .zip(&peaks)
            .map(|(row, peak)| row.iter().sum::<u64>() as f64 * LINE_BYTES / (peak * secs))
            .collect();
        let n = view.num_nodes();
        let regions = if self.params.move_pages {
            view.regions()
        } else {
            Vec::new()
        };
        // each task's local node: where most of its threads run (ties to the lowest id)
        let mut on_node: BTreeMap<TaskId, Vec<usize>> = BTreeMap::new();
        for th in view.threads() {
            on_node.entry(th.task).or_insert_with(|| vec![0; n])[th.node.index()] += 1;
        }
        for (task, counts) in on_node {
            let local = NodeId(
                (0..n).fold(0, |best, i| if counts[i] > counts[best] { i } else { best }) as u16,
            );
            let Some(remote) = (0..n)
                .map(|i| NodeId(i as u16))
                .filter(|r| *r != local)
                .min_by(|a, b| {
                    util[a.index()]
                        .total_cmp(&util[b.index()])
                        .then(view.distance(local, *a).cmp(&view.distance(local, *b)))
                        .then(a.cmp(b))
                })
            else {
                continue;
            };
            let before = self.percent_of(task);
            let p = control(
                before,
                util[local.index()],
                util[remote.index()],
                &self.params,
            );
            self.percent.insert(task, p);
            let pages = if self.params.move_pages {
                task_pages(view, &regions, task)
            } else {
                Vec::new()
            };
            round.tasks.push(TaskPercent {
                task,
                local,
                remote,
                before,
                percent: p,
                remote_units: pages.iter().filter(|x| x.2 != local).map(|x| x.1).sum(),
                total_units: pages.iter().map(|x| x.1).sum(),
            });
            let last = self.applied.get(&task).copied();
            if last != Some((p, remote)) && (last.is_some() || p > 0) {
                self.applied.insert(task, (p, remote));
                self.decisions.push(Decision::new(
                    "set remote percent",
                    1,
                    format!(
                        "task {}: {before} → {p} % on node {} (controller utilisation local {:.0} %, remote {:.0} %: Mi21's feedback)",
                        task.0,
                        remote.0,
                        util[local.index()] * 100.0,
                        util[remote.index()] * 100.0
                    ),
                ));
                actions.push(Action::SetTaskPolicy {
                    task,
                    policy: MemPolicy::RemotePercent {
                        percent: p,
                        remote: NodeMask::single(remote),
                    },
                });
            }
            if self.params.move_pages {
                let moves = difference_moves(task, &pages, local, remote, p);
                if !moves.is_empty() {
                    round.pages_moved += moves.len();
                    self.decisions.push(Decision::new(
                        "move pages",
                        moves.len() as u64,
                        format!(
                            "task {}: bring the placed share to {p} % remote (move_pages of the difference)",
                            task.0
                        ),
                    ));
                    actions.push(Action::MovePages { task, pages: moves });
                }
            }
        }
        round.util = util;
        if let Some(log) = &self.log {
            log.lock().expect("round log").push(round);
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_core::view::{NodeTraffic, PageInfo, RegionInfo, ThreadCounters, ThreadInfo};
    use numalab_core::{AccessSample, CpuId, ThreadId};

    /// Two nodes, no controller peak (Linux without HMAT).
    struct NoPeak;

    impl MemoryView for NoPeak {
        fn num_nodes(&self) -> usize {
            2
        }
        fn distance(&self, a: NodeId, b: NodeId) -> u32 {
            if a == b {
                10
            } else {
                20
            }
        }
        fn now_ns(&self) -> u64 {
            1_000_000
        }
        fn page(&self, _: TaskId, _: u64) -> Option<PageInfo> {
            None
        }
        fn regions(&self) -> Vec<RegionInfo> {
            Vec::new()
        }
        fn threads(&self) -> Vec<ThreadInfo> {
            Vec::new()
        }
        fn thread_counters(&self, _: ThreadId) -> ThreadCounters {
            ThreadCounters::default()
        }
        fn node_traffic(&self) -> NodeTraffic {
            NodeTraffic {
                served: vec![vec![0; 2]; 2],
            }
        }
        fn samples(&self) -> &[AccessSample] {
            &[]
        }
        fn free_bytes(&self, _: NodeId) -> u64 {
            1 << 30
        }
        fn node_cpus(&self, n: NodeId) -> Vec<CpuId> {
            vec![CpuId(n.0 as u32)]
        }
    }

    #[test]
    fn a_view_without_controller_peaks_is_a_clear_error_unless_given() {
        let e = controller_peaks(&NoPeak, 0.0).unwrap_err();
        assert!(e.contains("no peak bandwidth for node 0"), "{e}");
        assert!(e.contains("adaptive-percent:peak_gbps="), "{e}");
        assert_eq!(controller_peaks(&NoPeak, 50.0).unwrap(), vec![50e9, 50e9]);
        let mut p = AdaptivePercent::new(AdaptivePercentParams {
            peak_gbps: 50.0,
            ..Default::default()
        });
        assert!(p.tick(&NoPeak).is_empty());
    }

    #[test]
    fn refuses_to_guess_a_peak() {
        let mut p = AdaptivePercent::new(AdaptivePercentParams::default());
        let e = p.check(&NoPeak).unwrap_err();
        assert!(e.contains("no peak bandwidth for node 0"), "{e}");
        assert!(p.tick(&NoPeak).is_empty());
    }

    #[test]
    fn control_law() {
        let p = AdaptivePercentParams::default();
        // congested locally, idle remote: up by one step, capped at p_max
        assert_eq!(control(0, 0.9, 0.1, &p), 10);
        assert_eq!(control(50, 0.9, 0.1, &p), 50);
        // local below u_hi: hold
        assert_eq!(control(20, 0.6, 0.1, &p), 20);
        // congested, but the remote is within the margin (0.68 > 0.75 - 0.1): hold
        assert_eq!(control(20, 0.75, 0.68, &p), 20);
        // remote busier, or above u_hi: down, never below 0
        assert_eq!(control(20, 0.5, 0.6, &p), 10);
        assert_eq!(control(20, 0.95, 0.75, &p), 10);
        assert_eq!(control(0, 0.2, 0.3, &p), 0);
    }

    #[test]
    fn moves_only_the_difference_and_back_in_reverse() {
        let t = TaskId(3);
        let (l, r) = (NodeId(0), NodeId(1));
        let mut pages: Vec<(u64, u64, NodeId)> = (0..100).map(|i| (i * 4096, 1, l)).collect();
        let up = difference_moves(t, &pages, l, r, 30);
        assert_eq!(up.len(), 30);
        for (a, to) in &up {
            pages[(*a / 4096) as usize].2 = *to;
        }
        // nothing to do at the same p; 10 more at 40, all of them new
        assert!(difference_moves(t, &pages, l, r, 30).is_empty());
        let more = difference_moves(t, &pages, l, r, 40);
        assert_eq!(more.len(), 10);
        assert!(more.iter().all(|m| !up.contains(m)));
        // back to 20: 10 of the pages sent remote come home
        let down = difference_moves(t, &pages, l, r, 20);
        assert_eq!(down.len(), 10);
        assert!(down
            .iter()
            .all(|(a, to)| *to == l && up.iter().any(|(b, _)| b == a)));
    }
}
