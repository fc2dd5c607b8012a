//! Müller's NUMA manager (L4/Fiasco.OC; reference/policies.md §8): a manager that interposes
//! on thread creation and allocation, with static thread policies (Fixed, RR Threads,
//! RR Tasks, Balanced), static region policies (Default, Local, Remote, Interleaved), and the
//! dynamic Auto policy (Balanced start, then per period Algorithm 4.1 moves the task that best
//! evens the nodes' cache pressure and Algorithm 4.2 lazily migrates the regions of tasks that
//! load remotely).
//!
//! Spec: `numa-manager:threads=balanced,memory=local`,
//! `numa-manager:threads=auto,thresh_mpki=5,period_ms=1000`,
//! `numa-manager:threads=auto,migrate=process` (the memory step by migrate_pages(2)). Creation-time placement goes
//! through `Policy::place_thread` / `place_region`; Auto's periodic steps through `tick`.

pub mod auto;
pub mod region_policy;
pub mod thread_policy;

pub use auto::{AutoParams, AutoRound, AutoState, LazyMove, TaskLoad, TaskMove};
pub use region_policy::{farthest, RegionPolicy, REGION_POLICIES};
pub use thread_policy::{ThreadPlacer, ThreadPolicy, THREAD_POLICIES};

use crate::carrefour::RoundLog;
use crate::spec::{ParamInfo, ParamKind, ParamValues};
use numalab_core::view::{MemoryView, RegionInfo, ThreadInfo};
use numalab_core::{Action, CpuId, Decision, MemPolicy, Policy};

pub const NAME: &str = "numa-manager";
pub const SUMMARY: &str = "Müller's NUMA manager (policies.md §8): thread policy at creation \
     (fixed, rr-threads, rr-tasks, balanced) or auto (balanced, then per period move the task \
     that best evens MPKI pressure and migrate remote memory home, lazily or by migrate_pages); \
     region policy at allocation (default, local, remote, interleaved)";

/// Auto's initial placement choices.
pub const INITIAL: &[&str] = &["balanced", "runner"];

/// How Auto's memory step moves memory.
pub const MIGRATE: &[&str] = &["lazy", "process"];

pub const PARAMS: &[ParamInfo] = &[
    ParamInfo {
        key: "threads",
        default: 4.0,
        unit: "fixed|rr-threads|rr-tasks|balanced|auto",
        meaning: "thread policy: at creation (§8 table), or auto = balanced then the periodic \
                  Algorithms 4.1 and 4.2",
        kind: ParamKind::Choice(THREAD_POLICIES),
        min: 0.0,
        max: 4.0,
    },
    ParamInfo {
        key: "memory",
        default: 0.0,
        unit: "default|local|remote|interleaved",
        meaning: "region policy at allocation (§8 table; default = the region's own policy, \
                  none named -> local [nl]; remote = farthest node, ties in ring order [nl])",
        kind: ParamKind::Choice(REGION_POLICIES),
        min: 0.0,
        max: 3.0,
    },
    ParamInfo {
        key: "cpu",
        default: 0.0,
        unit: "CPU id",
        meaning: "the CPU of the fixed thread policy (§8: CPU 0)",
        kind: ParamKind::Integer,
        min: 0.0,
        max: 1e6,
    },
    ParamInfo {
        key: "period_ms",
        default: 1000.0,
        unit: "ms",
        meaning: "auto: period T of the thread and memory steps (§8: 1 s)",
        kind: ParamKind::Number,
        min: 0.001,
        max: 3.6e6,
    },
    ParamInfo {
        key: "thresh_mpki",
        default: 5.0,
        unit: "LLC misses per 1000 instructions",
        meaning: "auto: THRESH_MPKI, the pressure gap between the hottest and the coldest node \
                  that triggers a task move [nl]",
        kind: ParamKind::Number,
        min: 0.0,
        max: 1e6,
    },
    ParamInfo {
        key: "thresh_rlr",
        default: 0.3,
        unit: "remote loads / loads",
        meaning: "auto: THRESH_RLR, a task's remote load ratio from which its regions off its \
                  home are lazily migrated there (Algorithm 4.2) [nl]",
        kind: ParamKind::Number,
        min: 0.0,
        max: 1.0,
    },
    ParamInfo {
        key: "max_moves",
        default: 1.0,
        unit: "tasks per period",
        meaning: "auto: at most this many tasks re-homed per period [nl]",
        kind: ParamKind::Integer,
        min: 0.0,
        max: 1e6,
    },
    ParamInfo {
        key: "lazy_migrate",
        default: 1.0,
        unit: "bool",
        meaning: "auto: run the memory step (Algorithm 4.2) after the thread step",
        kind: ParamKind::Flag,
        min: 0.0,
        max: 1.0,
    },
    ParamInfo {
        key: "migrate",
        default: 0.0,
        unit: "lazy|process",
        meaning: "auto: how the memory step moves a task's memory home: lazy = each region off \
                  home lazily (Algorithm 4.2, §4); process = one migrate_pages(2) of the whole \
                  task from every other node (interleaved regions too, as the kernel moves \
                  them) [nl]",
        kind: ParamKind::Choice(MIGRATE),
        min: 0.0,
        max: 1.0,
    },
    ParamInfo {
        key: "initial",
        default: 0.0,
        unit: "balanced|runner",
        meaning: "auto: initial placement, balanced (§8, SMT-aware by CPU numbering) or the \
                  runner's (--pin), homes taken from where each task's threads run [nl]",
        kind: ParamKind::Choice(INITIAL),
        min: 0.0,
        max: 1.0,
    },
];

#[derive(Clone, Debug, PartialEq)]
pub struct NumaManagerParams {
    pub threads: ThreadPolicy,
    pub memory: RegionPolicy,
    pub period_ms: f64,
    pub auto: AutoParams,
    /// Auto starts from Balanced (true) or from the runner's placement (false).
    pub auto_balanced_start: bool,
}

impl Default for NumaManagerParams {
    fn default() -> Self {
        Self::from_values(&ParamValues::defaults(NAME, PARAMS))
    }
}

impl NumaManagerParams {
    pub fn from_values(v: &ParamValues) -> Self {
        NumaManagerParams {
            threads: ThreadPolicy::from_name(v.choice("threads"), CpuId(v.get_u64("cpu") as u32)),
            memory: RegionPolicy::from_name(v.choice("memory")),
            period_ms: v.get("period_ms"),
            auto: AutoParams {
                thresh_mpki: v.get("thresh_mpki"),
                thresh_rlr: v.get("thresh_rlr"),
                max_moves: v.get_u64("max_moves") as usize,
                lazy_migrate: v.flag("lazy_migrate"),
                whole_process: v.choice("migrate") == "process",
            },
            auto_balanced_start: v.choice("initial") == "balanced",
        }
    }
}

pub struct NumaManager {
    params: NumaManagerParams,
    name: String,
    placer: ThreadPlacer,
    auto: AutoState,
    log: Option<RoundLog<AutoRound>>,
    /// Decisions of the ticks since `take_decisions` last ran.
    decisions: Vec<Decision>,
}

impl NumaManager {
    pub fn new(params: NumaManagerParams) -> NumaManager {
        NumaManager {
            name: if params == NumaManagerParams::default() {
                NAME.to_string()
            } else {
                format!("{NAME}:custom")
            },
            params,
            placer: ThreadPlacer::default(),
            auto: AutoState::default(),
            log: None,
            decisions: Vec::new(),
        }
    }

    pub fn from_values(v: &ParamValues) -> NumaManager {
        let mut m = NumaManager::new(NumaManagerParams::from_values(v));
        m.name = v.canonical_name();
        m
    }

    /// Record every Auto period into `log`.
    pub fn with_log(mut self, log: RoundLog<AutoRound>) -> Self {
        self.log = Some(log);
        self
    }

    pub fn params(&self) -> &NumaManagerParams {
        &self.params
    }
}

/// The decisions of one Auto period, with the figures that triggered them.
fn auto_decisions(round: &AutoRound, p: &AutoParams) -> Vec<Decision> {
    let mut out: Vec<Decision> = round
        .moves
        .iter()
        .map(|m| {
            Decision::new(
                "move task",
                1,
                format!(
                    "task {}: node {} → {}, cache-pressure difference {:.1} MPKI ≥ {} (M13 Algorithm 4.1)",
                    m.task.0, m.from.0, m.to.0, m.diff_before, p.thresh_mpki
                ),
            )
        })
        .collect();
    let mut tasks: Vec<numalab_core::TaskId> = round.lazy.iter().map(|l| l.task).collect();
    tasks.dedup();
    for task in tasks {
        let regions = round.lazy.iter().filter(|l| l.task == task).count() as u64;
        let rlr = round
            .tasks
            .iter()
            .find(|t| t.task == task)
            .and_then(|t| t.remote_load_ratio)
            .unwrap_or(0.0);
        out.push(Decision::new(
            "lazy migrate",
            regions,
            format!(
                "task {}: remote load ratio {rlr:.2} ≥ {} (M13 Algorithm 4.2)",
                task.0, p.thresh_rlr
            ),
        ));
    }
    for (task, home) in &round.whole {
        let rlr = round
            .tasks
            .iter()
            .find(|t| t.task == *task)
            .and_then(|t| t.remote_load_ratio)
            .unwrap_or(0.0);
        out.push(Decision::new(
            "migrate process",
            1,
            format!(
                "task {}: remote load ratio {rlr:.2} ≥ {}, all of its memory to node {} \
                 (migrate_pages)",
                task.0, p.thresh_rlr, home.0
            ),
        ));
    }
    out
}

impl Policy for NumaManager {
    fn name(&self) -> &str {
        &self.name
    }

    fn period_ns(&self) -> u64 {
        (self.params.period_ms * 1e6).max(1.0) as u64
    }

    fn tick(&mut self, view: &dyn MemoryView) -> Vec<Action> {
        if self.params.threads != ThreadPolicy::Auto {
            // the static policies act at creation and allocation only
            return Vec::new();
        }
        let (actions, round) = self.auto.tick(view, &self.params.auto);
        self.decisions
            .extend(auto_decisions(&round, &self.params.auto));
        if let Some(log) = &self.log {
            log.lock().expect("round log").push(round);
        }
        actions
    }

    fn take_decisions(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.decisions)
    }

    fn place_thread(&mut self, view: &dyn MemoryView, thread: &ThreadInfo) -> Option<CpuId> {
        if self.params.threads == ThreadPolicy::Auto && !self.params.auto_balanced_start {
            return None;
        }
        let cpu = self.placer.place(self.params.threads, view, thread);
        if self.params.threads == ThreadPolicy::Auto {
            // Auto's homes start as Balanced's
            self.auto.homes.extend(self.placer.homes.iter());
        }
        cpu
    }

    fn place_region(
        &mut self,
        view: &dyn MemoryView,
        region: &RegionInfo,
        requester: &ThreadInfo,
    ) -> Option<MemPolicy> {
        Some(self.params.memory.place(view, region, requester))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_names_the_policies_and_rejects_unknown_ones() {
        let p = crate::by_spec("numa-manager:threads=balanced,memory=local").unwrap();
        assert_eq!(p.name(), "numa-manager:threads=balanced,memory=local");
        let v = crate::parse_spec("numa-manager:threads=fixed,cpu=3,memory=interleaved").unwrap();
        let m = NumaManagerParams::from_values(&v);
        assert_eq!(m.threads, ThreadPolicy::Fixed { cpu: CpuId(3) });
        assert_eq!(m.memory, RegionPolicy::Interleaved);
        let d = NumaManagerParams::default();
        assert_eq!(d.threads, ThreadPolicy::Auto);
        assert_eq!(d.auto.thresh_mpki, 5.0);
        assert_eq!(d.auto.thresh_rlr, 0.3);
        let e = crate::by_spec("numa-manager:threads=spread").err().unwrap();
        assert_eq!(
            e.to_string(),
            "numa-manager: threads=spread is not valid: expected one of fixed, rr-threads, \
             rr-tasks, balanced, auto"
        );
        let listed = crate::list()
            .into_iter()
            .find(|i| i.name == NAME)
            .unwrap()
            .to_string();
        assert!(listed.contains("  threads=auto "), "{listed}");
        assert!(listed.contains("  memory=default "), "{listed}");
    }
}
