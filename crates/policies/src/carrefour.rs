//! Carrefour (Dashti et al., ASPLOS 2013; reference/policies.md §6): a traffic-management
//! daemon. Every period it reads the controllers' DRAM counters, decides from MAPTU,
//! controller imbalance and LAR which mechanisms the memory system needs, then places the
//! pages seen in DRAM-served (northbridge IBS-like) samples: a page accessed from one node
//! moves to that node, a page accessed from several nodes is interleaved towards
//! under-loaded controllers.
//!
//! Replication (§6 step 3, first bullet of step 5) is left out: it needs per-node replicas of
//! a page and a write fault collapsing them, which neither `core::view::Action` nor the
//! simulator has, and its gate needs the fraction of written cache lines, which no counter
//! of the view gives. The parameters say so rather than pretending.

use crate::spec::{num, ParamInfo, ParamKind, ParamValues};
use crate::window::{group_by_current_page, CounterWindow, IntervalCounters, PageSamples, Rng};
use numalab_core::view::MemoryView;
use numalab_core::{Action, Decision, NodeId, PageSize, Policy, TaskId};
use std::sync::{Arc, Mutex};

pub const NAME: &str = "carrefour";
pub const SUMMARY: &str = "Carrefour (ASPLOS 2013, policies.md §6): per period, gate on MAPTU, \
     enable interleaving (imbalance) and migration (LAR), then migrate single-node pages and \
     interleave shared pages seen in DRAM samples";

pub const PARAMS: &[ParamInfo] = &[
    num(
        "period_ms",
        1000.0,
        "ms",
        "iteration period (§6: every 1 s)",
        0.001,
        3.6e6,
    ),
    num(
        "maptu_min",
        50.0,
        "DRAM accesses/µs, whole machine",
        "below this the machine is memory-light and nothing is done (§6 step 2)",
        0.0,
        1e9,
    ),
    num(
        "interleave_imbalance_percent",
        35.0,
        "%",
        "interleaving is enabled when controller imbalance exceeds this (§6 step 3)",
        0.0,
        1e6,
    ),
    num(
        "migrate_lar_percent",
        80.0,
        "%",
        "migration is enabled when the local access ratio is below this (§6 step 3)",
        0.0,
        100.0,
    ),
    ParamInfo {
        key: "migrate_min_samples",
        default: 2.0,
        unit: "samples",
        meaning: "a page seen from one node moves only with at least this many samples in \
                  the period (§6 step 5)",
        kind: ParamKind::Integer,
        min: 1.0,
        max: 1e9,
    },
    ParamInfo {
        key: "max_tracked_pages",
        default: 30_000.0,
        unit: "pages",
        meaning: "pages tracked per period: 30 000 in accurate mode, 10 000 in cheap mode \
                  (§6 step 4)",
        kind: ParamKind::Integer,
        min: 1.0,
        max: 1e9,
    },
    ParamInfo {
        key: "seed",
        default: 1.0,
        unit: "",
        meaning: "seed of the interleaving draws [nl] (reproducible runs)",
        kind: ParamKind::Integer,
        min: 0.0,
        max: 1e15,
    },
];

/// Carrefour's thresholds (defaults: reference §6).
#[derive(Clone, Debug, PartialEq)]
pub struct CarrefourParams {
    pub period_ms: f64,
    pub maptu_min: f64,
    pub interleave_imbalance_percent: f64,
    pub migrate_lar_percent: f64,
    pub migrate_min_samples: u32,
    pub max_tracked_pages: usize,
    pub seed: u64,
}

impl Default for CarrefourParams {
    fn default() -> Self {
        Self::from_values(&ParamValues::defaults(NAME, PARAMS))
    }
}

impl CarrefourParams {
    pub fn from_values(v: &ParamValues) -> Self {
        CarrefourParams {
            period_ms: v.get("period_ms"),
            maptu_min: v.get("maptu_min"),
            interleave_imbalance_percent: v.get("interleave_imbalance_percent"),
            migrate_lar_percent: v.get("migrate_lar_percent"),
            migrate_min_samples: v.get_u64("migrate_min_samples") as u32,
            max_tracked_pages: v.get_u64("max_tracked_pages") as usize,
            seed: v.get_u64("seed"),
        }
    }
}

/// The global decision of one iteration (§6 steps 1-3).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Mechanisms {
    pub maptu: f64,
    pub lar_percent: Option<f64>,
    pub imbalance_percent: Option<f64>,
    /// MAPTU reached the gate: the memory system is loaded enough to act.
    pub active: bool,
    pub interleave: bool,
    pub migrate: bool,
}

/// §6 steps 2-3: act only above `maptu_min`; interleave when imbalance > threshold; migrate
/// when LAR < threshold. An interval without DRAM traffic enables nothing.
pub fn global_decision(c: &IntervalCounters, p: &CarrefourParams) -> Mechanisms {
    let maptu = c.maptu();
    let lar = c.lar_percent();
    let imb = c.imbalance_percent();
    let active = maptu >= p.maptu_min && c.dram_requests() > 0;
    Mechanisms {
        maptu,
        lar_percent: lar,
        imbalance_percent: imb,
        active,
        interleave: active && imb.is_some_and(|i| i > p.interleave_imbalance_percent),
        migrate: active && lar.is_some_and(|l| l < p.migrate_lar_percent),
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum MoveKind {
    /// Single accessing node: move the page there.
    Migrate,
    /// Several accessing nodes: move the page to a drawn, less loaded controller.
    Interleave,
}

/// One page Carrefour decided to move.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct PageMove {
    pub task: TaskId,
    pub start: u64,
    pub size: PageSize,
    pub from: NodeId,
    pub to: NodeId,
    pub kind: MoveKind,
}

/// §6 step 5 for each sampled page, with S = its accessing nodes:
/// - |S| > 1 and interleaving enabled: select the page with probability equal to the traffic
///   share of the node holding it, then draw a destination with weight
///   (100 − destination's traffic share %), among nodes with room for the page;
/// - |S| = 1 with at least `migrate_min_samples` samples and migration enabled: move it to
///   that node.
///
/// `share_percent[n]` is controller n's share of the interval's DRAM requests;
/// `room[n]` says whether node n can take a page of the given size. Pages whose draw lands
/// on their own node stay.
pub fn page_decisions(
    pages: &[PageSamples],
    m: &Mechanisms,
    share_percent: &[f64],
    room: &dyn Fn(NodeId, PageSize) -> bool,
    p: &CarrefourParams,
    rng: &mut Rng,
) -> Vec<PageMove> {
    let mut out = Vec::new();
    if !m.active {
        return out;
    }
    for pg in pages {
        let decided = match pg.accessing_nodes() {
            0 => None,
            1 => {
                let to = pg.single_node().expect("one accessing node");
                (m.migrate && pg.total() >= p.migrate_min_samples && to != pg.node)
                    .then_some((to, MoveKind::Migrate))
            }
            _ if m.interleave => {
                let holder_share = share_percent.get(pg.node.index()).copied().unwrap_or(0.0);
                if rng.unit() * 100.0 < holder_share {
                    let weights: Vec<f64> = share_percent
                        .iter()
                        .enumerate()
                        .map(|(n, s)| {
                            if room(NodeId(n as u16), pg.size) {
                                100.0 - s
                            } else {
                                0.0
                            }
                        })
                        .collect();
                    rng.weighted(&weights)
                        .map(|n| NodeId(n as u16))
                        .filter(|to| *to != pg.node)
                        .map(|to| (to, MoveKind::Interleave))
                } else {
                    None
                }
            }
            _ => None,
        };
        if let Some((to, kind)) = decided {
            if room(to, pg.size) {
                out.push(PageMove {
                    task: pg.task,
                    start: pg.start,
                    size: pg.size,
                    from: pg.node,
                    to,
                    kind,
                });
            }
        }
    }
    out
}

/// The decisions behind `moves`, one per kind, with the measurements that enabled it
/// (§6 steps 2-5): what the policy log shows.
pub fn move_decisions(moves: &[PageMove], m: &Mechanisms, p: &CarrefourParams) -> Vec<Decision> {
    let count = |k: MoveKind| moves.iter().filter(|mv| mv.kind == k).count() as u64;
    let pct = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.0} %"));
    let mut out = Vec::new();
    let migrated = count(MoveKind::Migrate);
    if migrated > 0 {
        out.push(Decision::new(
            "migrate",
            migrated,
            format!(
                "sampled from one node only; LAR {} < {} % and MAPTU {:.0} (Carrefour §6 steps 3, 5)",
                pct(m.lar_percent),
                p.migrate_lar_percent,
                m.maptu
            ),
        ));
    }
    let interleaved = count(MoveKind::Interleave);
    if interleaved > 0 {
        out.push(Decision::new(
            "interleave",
            interleaved,
            format!(
                "sampled from several nodes; controller imbalance {} > {} %, page drawn by its controller's traffic share (Carrefour §6 steps 2, 5)",
                pct(m.imbalance_percent),
                p.interleave_imbalance_percent
            ),
        ));
    }
    out
}

/// Turns page moves into one batched `MovePages` per task (§6 step 6: the moves of an
/// iteration are batched per process), pages in address order: one call's fixed cost and one
/// TLB shootdown per process, as a move_pages call with a node per page.
pub fn moves_to_actions(moves: &[PageMove]) -> Vec<Action> {
    let mut sorted: Vec<&PageMove> = moves.iter().collect();
    sorted.sort_by_key(|m| (m.task, m.start));
    let mut out: Vec<Action> = Vec::new();
    for m in sorted {
        match out.last_mut() {
            Some(Action::MovePages { task, pages }) if *task == m.task => {
                pages.push((m.start, m.to))
            }
            _ => out.push(Action::MovePages {
                task: m.task,
                pages: vec![(m.start, m.to)],
            }),
        }
    }
    out
}

/// What one Carrefour iteration saw and did (for tests, reports and debugging).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CarrefourRound {
    pub time_ns: u64,
    pub mechanisms: Mechanisms,
    pub pages_sampled: usize,
    pub moves: Vec<PageMove>,
    pub actions: usize,
}

/// Shared record of a policy's iterations, readable while or after a simulation runs.
pub type RoundLog<T> = Arc<Mutex<Vec<T>>>;

pub struct Carrefour {
    params: CarrefourParams,
    name: String,
    window: CounterWindow,
    rng: Rng,
    log: Option<RoundLog<CarrefourRound>>,
    /// Decisions of the ticks since `take_decisions` last ran.
    decisions: Vec<Decision>,
}

impl Carrefour {
    pub fn new(params: CarrefourParams) -> Carrefour {
        Carrefour {
            rng: Rng::new(params.seed),
            name: name_of(&params),
            params,
            window: CounterWindow::default(),
            log: None,
            decisions: Vec::new(),
        }
    }

    pub fn from_values(v: &ParamValues) -> Carrefour {
        let mut c = Carrefour::new(CarrefourParams::from_values(v));
        c.name = v.canonical_name();
        c
    }

    /// Record every iteration into `log`.
    pub fn with_log(mut self, log: RoundLog<CarrefourRound>) -> Self {
        self.log = Some(log);
        self
    }

    pub fn params(&self) -> &CarrefourParams {
        &self.params
    }
}

fn name_of(p: &CarrefourParams) -> String {
    if *p == CarrefourParams::default() {
        NAME.to_string()
    } else {
        format!("{NAME}:custom")
    }
}

/// Nodes that can take a page of `size` now.
pub(crate) fn room_in(view: &dyn MemoryView) -> impl Fn(NodeId, PageSize) -> bool + '_ {
    move |n: NodeId, size: PageSize| view.free_bytes(n) >= size.bytes()
}

impl Policy for Carrefour {
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
        let counters = self.window.advance(view);
        let m = global_decision(&counters, &self.params);
        let mut round = CarrefourRound {
            time_ns: view.now_ns(),
            mechanisms: m.clone(),
            ..Default::default()
        };
        let mut actions = Vec::new();
        if m.active && (m.interleave || m.migrate) {
            let pages = group_by_current_page(view, view.samples(), self.params.max_tracked_pages);
            let shares = counters.controller_share_percent();
            let room = room_in(view);
            let moves = page_decisions(&pages, &m, &shares, &room, &self.params, &mut self.rng);
            actions = moves_to_actions(&moves);
            self.decisions
                .extend(move_decisions(&moves, &m, &self.params));
            round.pages_sampled = pages.len();
            round.moves = moves;
        }
        round.actions = actions.len();
        if let Some(log) = &self.log {
            log.lock().expect("round log").push(round);
        }
        actions
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(start: u64, node: u16, per_node: &[u32]) -> PageSamples {
        let mut p = PageSamples::new(
            TaskId(0),
            start,
            PageSize::Base4K,
            NodeId(node),
            per_node.len(),
        );
        p.per_node = per_node.to_vec();
        p
    }

    fn loaded(interleave: bool, migrate: bool) -> Mechanisms {
        Mechanisms {
            active: true,
            interleave,
            migrate,
            ..Default::default()
        }
    }

    fn any_room(_: NodeId, _: PageSize) -> bool {
        true
    }

    #[test]
    fn global_gates_follow_section_6() {
        let p = CarrefourParams::default();
        // 1 ms interval, 2 nodes. 40 000 requests -> MAPTU 40 < 50: nothing, whatever LAR says.
        let light = IntervalCounters {
            served: vec![vec![0, 20_000], vec![0, 20_000]],
            interval_ns: 1_000_000,
        };
        let m = global_decision(&light, &p);
        assert!(!m.active && !m.interleave && !m.migrate, "{m:?}");
        // 100 000 requests -> MAPTU 100; all on node 0, half of them from node 1:
        // LAR 50 % < 80 -> migrate; loads 100k / 0 -> imbalance 100 % > 35 -> interleave.
        let hot = IntervalCounters {
            served: vec![vec![50_000, 50_000], vec![0, 0]],
            interval_ns: 1_000_000,
        };
        let m = global_decision(&hot, &p);
        assert!(m.active && m.interleave && m.migrate, "{m:?}");
        assert_eq!(m.lar_percent, Some(50.0));
        // Balanced and local: loaded, but neither mechanism is needed.
        let fine = IntervalCounters {
            served: vec![vec![50_000, 0], vec![0, 50_000]],
            interval_ns: 1_000_000,
        };
        let m = global_decision(&fine, &p);
        assert!(m.active && !m.interleave && !m.migrate, "{m:?}");
    }

    #[test]
    fn single_node_pages_need_two_samples_shared_pages_are_interleaved() {
        let p = CarrefourParams::default();
        let mut rng = Rng::new(3);
        let pages = [
            page(0x1000, 0, &[0, 2]), // two samples from node 1: migrate to 1
            page(0x2000, 0, &[0, 1]), // one sample: stays
            page(0x3000, 1, &[0, 5]), // already on its node: stays
            page(0x4000, 0, &[3, 3]), // shared, on the node carrying all traffic
        ];
        // node 0 carries 100 % of the traffic: the shared page is selected for sure and its
        // only destination with a positive weight is node 1.
        let moves = page_decisions(
            &pages,
            &loaded(true, true),
            &[100.0, 0.0],
            &any_room,
            &p,
            &mut rng,
        );
        assert_eq!(moves.len(), 2, "{moves:?}");
        assert_eq!(
            (moves[0].start, moves[0].to, moves[0].kind),
            (0x1000, NodeId(1), MoveKind::Migrate)
        );
        assert_eq!(
            (moves[1].start, moves[1].to, moves[1].kind),
            (0x4000, NodeId(1), MoveKind::Interleave)
        );
        // Mechanisms off: the same samples move nothing of their kind.
        let only_migrate = page_decisions(
            &pages,
            &loaded(false, true),
            &[100.0, 0.0],
            &any_room,
            &p,
            &mut rng,
        );
        assert!(only_migrate.iter().all(|m| m.kind == MoveKind::Migrate));
        assert_eq!(only_migrate.len(), 1);
        let only_interleave = page_decisions(
            &pages,
            &loaded(true, false),
            &[100.0, 0.0],
            &any_room,
            &p,
            &mut rng,
        );
        assert!(only_interleave
            .iter()
            .all(|m| m.kind == MoveKind::Interleave));
        assert_eq!(only_interleave.len(), 1);
        let idle = page_decisions(
            &pages,
            &Mechanisms::default(),
            &[100.0, 0.0],
            &any_room,
            &p,
            &mut rng,
        );
        assert!(idle.is_empty());
        // A full destination takes nothing.
        let full = |n: NodeId, _: PageSize| n != NodeId(1);
        assert!(page_decisions(
            &pages,
            &loaded(true, true),
            &[100.0, 0.0],
            &full,
            &p,
            &mut rng
        )
        .is_empty());
    }

    #[test]
    fn interleave_selection_follows_the_holders_traffic_share() {
        // Shared pages on node 0, which carries 25 % of the traffic of 4 nodes (balanced):
        // about a quarter are selected, and the destination weights are 75 each, so about
        // 3/4 of the selected leave node 0: ~18.75 % of pages move.
        let p = CarrefourParams::default();
        let mut rng = Rng::new(11);
        let pages: Vec<PageSamples> = (0..4000)
            .map(|i| page(i * 4096, 0, &[1, 1, 1, 1]))
            .collect();
        let moves = page_decisions(
            &pages,
            &loaded(true, true),
            &[25.0; 4],
            &any_room,
            &p,
            &mut rng,
        );
        let share = 100.0 * moves.len() as f64 / pages.len() as f64;
        assert!((share - 18.75).abs() < 2.5, "moved {share} %");
        assert!(moves.iter().all(|m| m.to != NodeId(0)));
    }

    #[test]
    fn moves_become_one_batch_per_task() {
        let mv = |start: u64, to: u16| PageMove {
            task: TaskId(0),
            start,
            size: PageSize::Base4K,
            from: NodeId(0),
            to: NodeId(to),
            kind: MoveKind::Migrate,
        };
        let mut other = mv(0x9000, 3);
        other.task = TaskId(1);
        let a = moves_to_actions(&[
            mv(0x3000, 1),
            other,
            mv(0x1000, 1),
            mv(0x2000, 1),
            mv(0x4000, 2),
        ]);
        let n = NodeId;
        assert_eq!(
            a,
            vec![
                Action::MovePages {
                    task: TaskId(0),
                    pages: vec![
                        (0x1000, n(1)),
                        (0x2000, n(1)),
                        (0x3000, n(1)),
                        (0x4000, n(2))
                    ],
                },
                Action::MovePages {
                    task: TaskId(1),
                    pages: vec![(0x9000, n(3))]
                },
            ]
        );
    }
}
