//! Next-touch and lazy migration driven by the workload's hooks (reference/policies.md §4).
//!
//! `next-touch` marks memory at an event and lets the touches move it:
//!
//! - `trigger=phase`: when a thread of a task first reaches phase `phase` for the k-th time
//!   (GF09's blocked LU opens each step with it: `lu_blocked::NEXT_TOUCH_HOOK`), the task's
//!   regions are marked once for that occurrence: kernel next-touch (`mechanism=kernel`,
//!   per page), user-space next-touch (`mechanism=user`, units of `unit_kb`), or lazily
//!   migrated to the node of the thread that reached the phase (`mechanism=lazy`).
//! - `trigger=thread-move`: when a thread changes node (a policy's `MoveThread`, NUMA
//!   balancing's task moves), its task's regions are marked: with `mechanism=lazy`, lazily
//!   migrated to its new node (Müller: "the scheduler moving a thread to another node: mark
//!   its working set"); with `kernel`/`user`, marked migrate-on-next-touch.
//!
//! The marking is the policy; moving is the runner's (the simulator's os/next_touch.rs, the
//! `numalab-nexttouch` library on Linux). [`lazy_migration`] and [`mark_regions`] give other
//! policies the same actions (the NUMA manager's memory step migrates lazily).

use crate::spec::{ParamInfo, ParamKind, ParamValues};
use numalab_core::view::{MemoryView, NextTouchMechanism, RegionInfo};
use numalab_core::{Action, Decision, NodeId, Policy, TaskId, ThreadId};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

pub const NAME: &str = "next-touch";
pub const SUMMARY: &str = "Next-touch and lazy migration (GF09, Müller; policies.md §4): at a \
     workload phase or when a thread changes node, mark the task's regions migrate-on-next-touch \
     (kernel: per page; user: mprotect + move_pages per unit) or migrate them lazily";

const MECHANISMS: &[&str] = &["kernel", "user", "lazy"];
const TRIGGERS: &[&str] = &["phase", "thread-move"];
const REGIONS: &[&str] = &["all", "largest"];

pub const PARAMS: &[ParamInfo] = &[
    ParamInfo {
        key: "mechanism",
        default: 0.0,
        unit: "kernel|user|lazy",
        meaning: "kernel next-touch (madvise flag, one fault and copy per page), user-space \
                  next-touch (mprotect, SIGSEGV, move_pages of the unit) or lazy migration to \
                  the thread's node (§4)",
        kind: ParamKind::Choice(MECHANISMS),
        min: 0.0,
        max: 2.0,
    },
    ParamInfo {
        key: "unit_kb",
        default: 64.0,
        unit: "KiB",
        meaning: "user-space next-touch: the block that moves as one on a touch, 0 = each \
                  marked region whole (§4: the recorded area or structure) [nl: 64]",
        kind: ParamKind::Integer,
        min: 0.0,
        max: 1e9,
    },
    ParamInfo {
        key: "phase",
        default: 1.0,
        unit: "phase id",
        meaning: "trigger=phase: the workload phase at whose start the regions are marked \
                  (lu-blocked's NEXT_TOUCH_HOOK is 1)",
        kind: ParamKind::Integer,
        min: 0.0,
        max: 65535.0,
    },
    ParamInfo {
        key: "trigger",
        default: 0.0,
        unit: "phase|thread-move",
        meaning: "mark at each occurrence of the phase (once per task, by the first thread \
                  reaching it) or when a thread changes node (§4 triggers)",
        kind: ParamKind::Choice(TRIGGERS),
        min: 0.0,
        max: 1.0,
    },
    ParamInfo {
        key: "regions",
        default: 0.0,
        unit: "all|largest",
        meaning: "which of the task's regions are marked: all, or only the largest mapping \
                  [nl]",
        kind: ParamKind::Choice(REGIONS),
        min: 0.0,
        max: 1.0,
    },
];

pub const LAZY_NAME: &str = "lazy-migration";
pub const LAZY_SUMMARY: &str = "Lazy migration when a thread changes node (Müller; policies.md \
     §4): the task's regions are unmapped and each touched block moves to the thread's new \
     node at its first fault; next-touch:mechanism=lazy,trigger=thread-move";

/// `lazy-migration`'s table: the region choice of `next-touch`.
pub const LAZY_PARAMS: &[ParamInfo] = &[PARAMS[4]];

/// What the policy marks with.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Mechanism {
    Kernel,
    User { unit_bytes: u64 },
    Lazy,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Trigger {
    Phase(u16),
    ThreadMove,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RegionSel {
    All,
    Largest,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NextTouchParams {
    pub mechanism: Mechanism,
    pub trigger: Trigger,
    pub regions: RegionSel,
}

impl Default for NextTouchParams {
    fn default() -> Self {
        Self::from_values(&ParamValues::defaults(NAME, PARAMS))
    }
}

impl NextTouchParams {
    pub fn from_values(v: &ParamValues) -> Self {
        let mechanism = match v.get_u64("mechanism") {
            0 => Mechanism::Kernel,
            1 => Mechanism::User {
                unit_bytes: v.get_u64("unit_kb") << 10,
            },
            _ => Mechanism::Lazy,
        };
        let trigger = match v.get_u64("trigger") {
            0 => Trigger::Phase(v.get_u64("phase") as u16),
            _ => Trigger::ThreadMove,
        };
        let regions = match v.get_u64("regions") {
            0 => RegionSel::All,
            _ => RegionSel::Largest,
        };
        NextTouchParams {
            mechanism,
            trigger,
            regions,
        }
    }
}

/// One marking the policy made: when, why, and how many actions.
#[derive(Clone, Debug, PartialEq)]
pub struct MarkEvent {
    pub time_ns: u64,
    pub thread: ThreadId,
    pub task: TaskId,
    /// The phase id, or None for a thread move.
    pub phase: Option<u16>,
    /// Destination of a lazy migration.
    pub to: Option<NodeId>,
    pub actions: usize,
}

pub type MarkLog = Arc<Mutex<Vec<MarkEvent>>>;

pub struct NextTouch {
    params: NextTouchParams,
    name: String,
    /// Occurrences of the trigger phase seen per thread, and per task the last occurrence
    /// marked: the k-th occurrence is marked once, by the first thread reaching it.
    seen: HashMap<ThreadId, u64>,
    marked: HashMap<TaskId, u64>,
    log: Option<MarkLog>,
    /// Decisions of the hooks since `take_decisions` last ran.
    decisions: Vec<Decision>,
}

impl NextTouch {
    pub fn new(params: NextTouchParams) -> NextTouch {
        NextTouch {
            name: if params == NextTouchParams::default() {
                NAME.to_string()
            } else {
                format!("{NAME}:custom")
            },
            params,
            seen: HashMap::new(),
            marked: HashMap::new(),
            log: None,
            decisions: Vec::new(),
        }
    }

    /// Log the ranges `actions` mark, with `why` they were marked now.
    fn explain(&mut self, actions: &[Action], why: String) {
        let count = |f: fn(&Action) -> bool| actions.iter().filter(|a| f(a)).count() as u64;
        let marked = count(|a| matches!(a, Action::MarkNextTouch { .. }));
        if marked > 0 {
            self.decisions.push(Decision::new(
                "mark next-touch",
                marked,
                format!("{why}; each page moves to the node of the thread that touches it next"),
            ));
        }
        let lazy = count(|a| matches!(a, Action::LazyMigrate { .. }));
        if lazy > 0 {
            self.decisions.push(Decision::new(
                "lazy migrate",
                lazy,
                format!("{why}; pages move when touched"),
            ));
        }
    }

    pub fn from_values(v: &ParamValues) -> NextTouch {
        let mut p = NextTouch::new(NextTouchParams::from_values(v));
        p.name = v.canonical_name();
        p
    }

    /// `lazy-migration`: lazy migration of the moved thread's task regions to its new node.
    pub fn lazy_from_values(v: &ParamValues) -> NextTouch {
        let mut p = NextTouch::new(NextTouchParams {
            mechanism: Mechanism::Lazy,
            trigger: Trigger::ThreadMove,
            regions: match v.get_u64("regions") {
                0 => RegionSel::All,
                _ => RegionSel::Largest,
            },
        });
        p.name = v.canonical_name();
        p
    }

    /// Record every marking into `log`.
    pub fn with_log(mut self, log: MarkLog) -> Self {
        self.log = Some(log);
        self
    }

    fn mark(
        &mut self,
        view: &dyn MemoryView,
        thread: ThreadId,
        phase: Option<u16>,
        node: NodeId,
    ) -> Vec<Action> {
        let Some(task) = view
            .threads()
            .iter()
            .find(|t| t.thread == thread)
            .map(|t| t.task)
        else {
            return Vec::new();
        };
        let regions = select(&view.regions(), task, self.params.regions);
        let (actions, to) = match self.params.mechanism {
            Mechanism::Kernel => (mark_regions(&regions, NextTouchMechanism::Kernel), None),
            Mechanism::User { unit_bytes } => (
                mark_regions(&regions, NextTouchMechanism::User { unit_bytes }),
                None,
            ),
            Mechanism::Lazy => (lazy_regions(&regions, node), Some(node)),
        };
        if let Some(log) = &self.log {
            log.lock().unwrap().push(MarkEvent {
                time_ns: view.now_ns(),
                thread,
                task,
                phase,
                to,
                actions: actions.len(),
            });
        }
        actions
    }
}

/// The task's regions the selection names (largest: the first of the largest size).
fn select(all: &[RegionInfo], task: TaskId, sel: RegionSel) -> Vec<RegionInfo> {
    let mine = all.iter().filter(|r| r.task == task);
    match sel {
        RegionSel::All => mine.cloned().collect(),
        RegionSel::Largest => mine
            .fold(None::<&RegionInfo>, |best, r| match best {
                Some(b) if b.len_bytes >= r.len_bytes => Some(b),
                _ => Some(r),
            })
            .into_iter()
            .cloned()
            .collect(),
    }
}

/// One `MarkNextTouch` per region.
pub fn mark_regions(regions: &[RegionInfo], mechanism: NextTouchMechanism) -> Vec<Action> {
    regions
        .iter()
        .map(|r| Action::MarkNextTouch {
            task: r.task,
            start: r.start,
            len_bytes: r.len_bytes,
            mechanism,
        })
        .collect()
}

fn lazy_regions(regions: &[RegionInfo], to: NodeId) -> Vec<Action> {
    regions
        .iter()
        .map(|r| Action::LazyMigrate {
            task: r.task,
            start: r.start,
            len_bytes: r.len_bytes,
            to,
        })
        .collect()
}

/// Lazy migration of every region of `task` to `to` (Müller's dataspace migration, §4): what
/// a policy returns to move a task's memory after its threads, paying only for pages touched.
pub fn lazy_migration(view: &dyn MemoryView, task: TaskId, to: NodeId) -> Vec<Action> {
    lazy_regions(&select(&view.regions(), task, RegionSel::All), to)
}

impl Policy for NextTouch {
    fn name(&self) -> &str {
        &self.name
    }

    /// Nothing periodic; a short period keeps the runner's per-tick sample buffer small.
    fn period_ns(&self) -> u64 {
        1_000_000
    }

    fn tick(&mut self, _view: &dyn MemoryView) -> Vec<Action> {
        Vec::new()
    }

    fn on_phase(&mut self, view: &dyn MemoryView, thread: ThreadId, phase: u16) -> Vec<Action> {
        if self.params.trigger != Trigger::Phase(phase) {
            return Vec::new();
        }
        let k = {
            let c = self.seen.entry(thread).or_insert(0);
            *c += 1;
            *c
        };
        let Some(info) = view.threads().into_iter().find(|t| t.thread == thread) else {
            return Vec::new();
        };
        let last = self.marked.entry(info.task).or_insert(0);
        if k <= *last {
            return Vec::new(); // another thread of the task marked this occurrence
        }
        *last = k;
        let actions = self.mark(view, thread, Some(phase), info.node);
        self.explain(
            &actions,
            format!(
                "thread {} reached phase {phase} (occurrence {k}) on node {}",
                thread.0, info.node.0
            ),
        );
        actions
    }

    fn on_thread_moved(
        &mut self,
        view: &dyn MemoryView,
        thread: ThreadId,
        _from: NodeId,
        to: NodeId,
    ) -> Vec<Action> {
        if self.params.trigger != Trigger::ThreadMove {
            return Vec::new();
        }
        let actions = self.mark(view, thread, None, to);
        self.explain(
            &actions,
            format!(
                "thread {} moved to node {}: its task's memory follows",
                thread.0, to.0
            ),
        );
        actions
    }

    fn take_decisions(&mut self) -> Vec<Decision> {
        std::mem::take(&mut self.decisions)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::split;

    fn params(spec: &str) -> NextTouchParams {
        let (_, pairs) = split(spec).unwrap();
        NextTouchParams::from_values(&ParamValues::parse(NAME, PARAMS, &pairs).unwrap())
    }

    #[test]
    fn spec_keys_map_to_params() {
        assert_eq!(
            NextTouchParams::default(),
            NextTouchParams {
                mechanism: Mechanism::Kernel,
                trigger: Trigger::Phase(1),
                regions: RegionSel::All,
            }
        );
        let p = params("next-touch:mechanism=user,unit_kb=256,phase=3,regions=largest");
        assert_eq!(
            p.mechanism,
            Mechanism::User {
                unit_bytes: 256 << 10
            }
        );
        assert_eq!(p.trigger, Trigger::Phase(3));
        assert_eq!(p.regions, RegionSel::Largest);
        let p = params("next-touch:mechanism=lazy,trigger=thread-move");
        assert_eq!(
            (p.mechanism, p.trigger),
            (Mechanism::Lazy, Trigger::ThreadMove)
        );
    }

    #[test]
    fn lazy_migration_is_next_touch_lazy_on_thread_moves() {
        assert_eq!(LAZY_PARAMS[0].key, "regions");
        let (_, pairs) = split("lazy-migration:regions=largest").unwrap();
        let v = ParamValues::parse(LAZY_NAME, LAZY_PARAMS, &pairs).unwrap();
        let p = NextTouch::lazy_from_values(&v);
        assert_eq!(p.name, "lazy-migration:regions=largest");
        assert_eq!(
            p.params,
            NextTouchParams {
                mechanism: Mechanism::Lazy,
                trigger: Trigger::ThreadMove,
                regions: RegionSel::Largest,
            }
        );
    }

    #[test]
    fn largest_region_is_selected_per_task() {
        let r = |task, start, len| RegionInfo {
            task: TaskId(task),
            start,
            len_bytes: len,
            name: String::new(),
            policy: None,
            thp_advice: None,
        };
        let all = vec![r(0, 0, 10), r(1, 100, 50), r(0, 200, 30), r(0, 300, 20)];
        let sel = select(&all, TaskId(0), RegionSel::Largest);
        assert_eq!(sel.len(), 1);
        assert_eq!(sel[0].start, 200);
        assert_eq!(select(&all, TaskId(0), RegionSel::All).len(), 3);
    }
}
