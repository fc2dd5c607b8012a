//! The balance loop: every period, the period's samples → [`LinuxView`] → `Policy::tick` →
//! [`Executor`]. [`Balancer::new`] checks everything (policy spec, period, pid, sample
//! file, the kernel answering queries about the pid) before anything is applied.

use crate::exec::{Executor, Outcome, OutcomeKind};
use crate::replay::{PidFilter, Replay};
use crate::view::{LinuxView, WindowStats};
use crate::{pid_alive, Error};
use numalab_core::{metrics, MemoryView, NodeId, Policy, ThreadId};
use numalab_linux::SysRoot;
use serde::Serialize;
use std::collections::HashMap;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct BalanceOptions {
    pub pid: i32,
    /// A policy spec for `numalab_policies::by_spec`, e.g. `carrefour:maptu_min=10`.
    pub policy: String,
    pub samples: PathBuf,
    /// Period override; default the policy's `period_ns()`.
    pub period_ns: Option<u64>,
    /// Stop after this many ticks (default: when the samples are exhausted).
    pub ticks: Option<u64>,
    /// Decide but change nothing.
    pub dry_run: bool,
    /// Wait one period of real time before each tick (the policy acts at its cadence on the
    /// live process); false replays as fast as the ticks run.
    pub pace: bool,
}

/// Why the loop stopped.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopReason {
    /// `--ticks N` reached.
    Ticks,
    /// Every sample of the file was handed out.
    SamplesExhausted,
    /// The balanced process exited.
    ProcessExited,
}

impl std::fmt::Display for StopReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            StopReason::Ticks => "the requested number of ticks ran",
            StopReason::SamplesExhausted => "the samples are exhausted",
            StopReason::ProcessExited => "the process exited",
        })
    }
}

/// One tick, for the per-tick line and `--json`.
#[derive(Clone, Debug, Serialize)]
pub struct TickReport {
    pub tick: u64,
    /// End of the period, ns since the file's first sample (the view's `now_ns`).
    pub time_ns: u64,
    pub samples: u64,
    pub dram_samples: u64,
    pub unplaced_samples: u64,
    /// Samples of other pids dropped so far.
    pub other_pid_samples: u64,
    /// LAR of the period's DRAM samples (%).
    pub lar_percent: Option<f64>,
    /// `served[page node][cpu node]` of the period, in events.
    pub served: Vec<Vec<u64>>,
    pub actions: Vec<Outcome>,
    pub pages_moved: u64,
    pub page_queries: u64,
    /// Threads found on another node than at the previous tick (each given to the policy's
    /// `on_thread_moved`).
    pub threads_moved: u64,
    /// What the policy decided this tick and why (`Policy::take_decisions`).
    pub decisions: Vec<numalab_core::Decision>,
}

impl TickReport {
    fn count(&self, k: OutcomeKind) -> usize {
        self.actions.iter().filter(|a| a.result == k).count()
    }

    /// The one line `numalab balance` prints per tick.
    pub fn line(&self) -> String {
        let lar = self
            .lar_percent
            .map_or_else(|| "-".to_string(), |l| format!("{l:.1}%"));
        let mut s = format!(
            "tick {:>3}  t={:>8.3}s  samples {:>6} (dram {:>6})  LAR {:>6}  actions {}",
            self.tick,
            self.time_ns as f64 / 1e9,
            self.samples,
            self.dram_samples,
            lar,
            self.actions.len()
        );
        let dry = self.count(OutcomeKind::DryRun);
        if dry > 0 {
            s += &format!(" (dry run {dry})");
        } else {
            s += &format!(
                " (applied {}, skipped {}, failed {})",
                self.count(OutcomeKind::Applied),
                self.count(OutcomeKind::Skipped),
                self.count(OutcomeKind::Failed)
            );
        }
        s += &format!("  pages moved {}", self.pages_moved);
        s
    }
}

/// What `step` did.
#[derive(Clone, Debug)]
pub enum Step {
    Tick(Box<TickReport>),
    Stop(StopReason),
}

pub struct Balancer {
    opts: BalanceOptions,
    policy: Box<dyn Policy>,
    replay: Replay,
    view: LinuxView,
    exec: Executor,
    period_ns: u64,
    tick: u64,
    /// Each thread's node at the previous tick, to tell the policy about threads that moved.
    thread_nodes: HashMap<ThreadId, NodeId>,
    /// Things worth saying before the first tick (sample pids that differ, ...).
    pub warnings: Vec<String>,
    /// Where the PMU counts nothing: which thread counters are estimated from the samples
    /// and which are zero (said once per run).
    pub counters_note: Option<String>,
}

impl Balancer {
    /// Checks everything before anything is applied: the policy spec, the period, the pid
    /// (alive, and the kernel answers move_pages queries about it), the sample file
    /// (readable, not empty, its pids).
    pub fn new(opts: BalanceOptions) -> Result<Balancer, Error> {
        let policy =
            numalab_policies::by_spec(&opts.policy).map_err(|e| Error(format!("--policy: {e}")))?;
        let period_ns = opts.period_ns.unwrap_or_else(|| policy.period_ns());
        if period_ns == 0 {
            return Err(Error("the period must be positive".into()));
        }
        if !pid_alive(opts.pid) {
            return Err(Error(format!(
                "process {} does not exist (or has exited)",
                opts.pid
            )));
        }
        let mut replay = Replay::open(&opts.samples)?;
        let pids = replay.probe()?;
        if pids.is_empty() {
            return Err(Error(format!(
                "{}: no samples in the file",
                opts.samples.display()
            )));
        }
        let mut warnings = Vec::new();
        let target = opts.pid as u32;
        if pids.contains_key(&target) {
            if pids.len() > 1 {
                let others: Vec<String> = pids
                    .keys()
                    .filter(|p| **p != target)
                    .map(|p| p.to_string())
                    .collect();
                warnings.push(format!(
                    "the sample file also has samples of pid {}: only those of pid {target} are used",
                    others.join(", ")
                ));
            }
            replay.set_filter(PidFilter::Only(target));
        } else {
            let seen: Vec<String> = pids.keys().map(|p| p.to_string()).collect();
            warnings.push(format!(
                "the samples are of pid {} (first batch), not {target}: they are replayed as \
                 the samples of process {target} (addresses must be of the same program)",
                seen.join(", ")
            ));
            replay.set_filter(PidFilter::All);
        }
        let view = LinuxView::new(opts.pid, SysRoot::host())?;
        if view.threads().is_empty() {
            return Err(Error(format!("process {} has no threads", opts.pid)));
        }
        // the kernel must let us look at (and so move) the pid's pages: ask about one
        numalab_linux::move_pages_query(
            numalab_linux::Pid(opts.pid),
            &[0x1000],
            &Default::default(),
        )
        .map_err(|e| {
            Error(format!(
                "cannot query the pages of process {}: {e}",
                opts.pid
            ))
        })?;
        // a policy that cannot run on this view (e.g. needs controller peaks the host's HMAT
        // lacks) is refused now rather than half-way
        policy
            .check(&view)
            .map_err(|e| Error(format!("--policy {}: {e}", opts.policy)))?;
        // said once per run: which thread counters the policy sees measured, estimated, zero
        let counters = view.counter_report();
        let counters_note = counters.note.is_some().then(|| counters.line());
        let exec = Executor::new(opts.pid, view.topology().has_memory, opts.dry_run);
        let thread_nodes = view.threads().iter().map(|t| (t.thread, t.node)).collect();
        Ok(Balancer {
            opts,
            policy,
            replay,
            view,
            exec,
            period_ns,
            tick: 0,
            thread_nodes,
            warnings,
            counters_note,
        })
    }

    pub fn period_ns(&self) -> u64 {
        self.period_ns
    }

    pub fn policy_name(&self) -> &str {
        self.policy.name()
    }

    pub fn view(&self) -> &LinuxView {
        &self.view
    }

    /// One period: wait (when pacing), take its samples, rebuild the view, tick, apply.
    pub fn step(&mut self) -> Result<Step, Error> {
        if self.opts.ticks.is_some_and(|n| self.tick >= n) {
            return Ok(Step::Stop(StopReason::Ticks));
        }
        if self.replay.exhausted() {
            return Ok(Step::Stop(StopReason::SamplesExhausted));
        }
        if self.opts.pace {
            std::thread::sleep(Duration::from_nanos(self.period_ns));
        }
        if !pid_alive(self.opts.pid) {
            return Ok(Step::Stop(StopReason::ProcessExited));
        }
        let now = (self.tick + 1) * self.period_ns;
        let records = self.replay.window(now)?;
        let stats: WindowStats = match self
            .view
            .refresh(now, &records, self.replay.sample_period())
        {
            Ok(s) => s,
            // reading /proc/PID fails when the process is gone
            Err(_) if !pid_alive(self.opts.pid) => {
                return Ok(Step::Stop(StopReason::ProcessExited))
            }
            Err(e) => return Err(e),
        };
        self.tick += 1;
        // threads the scheduler (or a MoveThread) put on another node since the last tick:
        // the policy's on_thread_moved hook, then its tick
        let mut actions = Vec::new();
        let now_nodes: HashMap<ThreadId, NodeId> = self
            .view
            .threads()
            .iter()
            .map(|t| (t.thread, t.node))
            .collect();
        let mut moved_threads: Vec<(ThreadId, NodeId, NodeId)> = now_nodes
            .iter()
            .filter_map(|(t, to)| {
                let from = *self.thread_nodes.get(t)?;
                (from != *to).then_some((*t, from, *to))
            })
            .collect();
        moved_threads.sort();
        for (t, from, to) in &moved_threads {
            actions.extend(self.policy.on_thread_moved(&self.view, *t, *from, *to));
        }
        self.thread_nodes = now_nodes;
        actions.extend(self.policy.tick(&self.view));
        let decisions = self.policy.take_decisions();
        let outcomes: Vec<Outcome> = self.exec.apply_all(&actions);
        let moved: u64 = outcomes.iter().map(|o| o.pages_moved).sum();
        if moved > 0 {
            self.view.forget_pages();
        }
        Ok(Step::Tick(Box::new(TickReport {
            tick: self.tick,
            time_ns: now,
            samples: stats.samples,
            dram_samples: stats.dram_samples,
            unplaced_samples: stats.unplaced_samples,
            other_pid_samples: self.replay.other_pid_samples,
            lar_percent: metrics::lar_percent_from_traffic(&stats.served),
            served: stats.served,
            actions: outcomes,
            pages_moved: moved,
            page_queries: self.view.query_stats().pages,
            threads_moved: moved_threads.len() as u64,
            decisions,
        })))
    }

    /// Ticks until a stop reason; `on_tick` sees each report as it is made.
    pub fn run(
        &mut self,
        mut on_tick: impl FnMut(&TickReport),
    ) -> Result<(StopReason, Vec<TickReport>), Error> {
        let mut all = Vec::new();
        loop {
            match self.step()? {
                Step::Tick(r) => {
                    on_tick(&r);
                    all.push(*r);
                }
                Step::Stop(why) => return Ok((why, all)),
            }
        }
    }
}
