//! `numalab validate`: the simulator against published measurements.
//!
//! Cases (`cases/*.toml`, one file per source, built into the binary) each describe one
//! published figure: a machine preset, a workload, the configurations compared, the metric and
//! the published value. [`run`] resolves every case first, simulates each distinct
//! configuration once (cases sharing runs share them) on a rayon pool, and scores the cases
//! ([`score`]): direction right, within ±30 % (or ±1 point for values of 3 or less).

pub mod case;
pub mod full_run;
pub mod metric;
pub mod score;

use anyhow::{anyhow, Context, Result};
use case::{Kind, SourcedCase};
use metric::Metric;
use numalab_runspec::{resolve, Defaults, RunSpec};
use numalab_sim::SimResult;
use rayon::prelude::*;
use score::{Measured, Row, Scorecard};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

/// How to run the suite.
pub struct Options {
    /// Epoch length, ns (the simulator's default is 20 µs).
    pub epoch_ns: f64,
    /// Host threads (0: all cores).
    pub jobs: usize,
    /// Runs per configuration (docs/VALIDATION.md, "Runs as samples").
    pub repeats: Repeats,
    /// Under [`Repeats::Auto`], the most seeds a configuration gets.
    pub max_seeds: usize,
    pub start_skew_ns: f64,
}

/// How many runs each configuration gets. Repeated runs take seeds 1, 2, ... with threads'
/// starts skewed by up to `start_skew_ns`; their values are averaged (times first for
/// comparisons) and their range reported.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Repeats {
    /// `Fixed(1)`: the one deterministic run (threads start together, default seed);
    /// `Fixed(n)`: seeds 1..=n.
    Fixed(usize),
    /// Seeds 1 and 2 for every configuration; then, as long as a case is not
    /// [settled](score::settled) (an edge of its verdict inside the value's
    /// [`SETTLED_CONFIDENCE`] t-interval), every configuration it compares gets seeds up to
    /// [`AUTO_SECOND_WAVE_SEEDS`], then [`AUTO_SEED_STEP`] more at a time, up to
    /// [`Options::max_seeds`]. A run decided by a race (which node wins a few hot huge pages,
    /// docs/VALIDATION.md) is so scored by its distribution rather than one draw of it, and a
    /// run whose first two seeds agree by chance is not trusted to be deterministic.
    Auto,
}

/// Seeds an unsettled case's configurations get after the first two: with per-seed spreads
/// of 20-35 points in the G14 THP cases, six seeds put the mean's standard error near 5
/// points, and Student's t falls from 12.7 (two seeds) to 2.57.
pub const AUTO_SECOND_WAVE_SEEDS: usize = 6;
/// Seeds added at a time, after the second wave, to the configurations of a case not yet
/// settled.
pub const AUTO_SEED_STEP: usize = 6;
/// The default of [`Options::max_seeds`]: 24 seeds halve six seeds' standard error.
pub const AUTO_MAX_SEEDS: usize = 24;
/// The default under `--quick`, which CI runs in its ten minutes: the second wave only.
pub const AUTO_MAX_SEEDS_QUICK: usize = AUTO_SECOND_WAVE_SEEDS;
pub use score::SETTLED_CONFIDENCE;

/// After the second wave, an unsettled case's further seeds go to the configurations whose
/// error term (the standard error their seeds alone put on the value) is at least this share
/// of the largest. A term under half the largest carries under a fifth of the variance
/// (0.5² / 1.25), so doubling its seeds would take at most a tenth off it, where doubling the
/// largest's takes at least two fifths: six seeds of a 4 KiB run that agree to 0.02 % beside
/// a THP race of 4-8 % per seed (CG.D, SSCA2) would otherwise run to the cap for nothing.
pub const AUTO_TERM_SHARE: f64 = 0.5;

/// The seeds a configuration of an unsettled case gets next, having `have`.
fn next_seeds(have: usize) -> usize {
    if have < AUTO_SECOND_WAVE_SEEDS {
        AUTO_SECOND_WAVE_SEEDS
    } else {
        have + AUTO_SEED_STEP
    }
}

impl Repeats {
    /// Seeds run for every configuration before any is judged.
    fn first_wave(self) -> usize {
        match self {
            Repeats::Fixed(n) => n,
            Repeats::Auto => 2,
        }
    }
}

/// The start skew of repeated runs: 1 µs, the order of a thread's wake-up latency (E).
pub const DEFAULT_START_SKEW_NS: f64 = 1_000.0;

impl Default for Options {
    fn default() -> Self {
        Options {
            epoch_ns: 20_000.0,
            jobs: 0,
            repeats: Repeats::Auto,
            max_seeds: AUTO_MAX_SEEDS,
            start_skew_ns: DEFAULT_START_SKEW_NS,
        }
    }
}

/// Keep the cases whose id matches `pattern` (a glob: `G14.*`, `*lbm*`; a pattern without `*`
/// or `?` matches as a substring), and with `quick` only the quick subset.
pub fn select(
    cases: Vec<SourcedCase>,
    pattern: Option<&str>,
    quick: bool,
) -> Result<Vec<SourcedCase>> {
    let matcher = match pattern {
        None => None,
        Some(p) => {
            let glob = if p.contains(['*', '?', '[']) {
                p.to_string()
            } else {
                format!("*{p}*")
            };
            Some(
                globset::GlobBuilder::new(&glob)
                    .case_insensitive(true)
                    .build()
                    .with_context(|| format!("--case {p}: not a valid pattern"))?
                    .compile_matcher(),
            )
        }
    };
    let kept: Vec<SourcedCase> = cases
        .into_iter()
        .filter(|c| !quick || c.case.quick)
        .filter(|c| matcher.as_ref().is_none_or(|m| m.is_match(&c.case.id)))
        .collect();
    if kept.is_empty() {
        return Err(anyhow!(
            "no case matches{}{}: `numalab validate --list` shows the ids",
            pattern.map(|p| format!(" '{p}'")).unwrap_or_default(),
            if quick { " in the quick subset" } else { "" }
        ));
    }
    Ok(kept)
}

/// The runs a case needs: (base, measured); base only where the metric compares or the
/// published figure is a pair.
struct CaseRuns {
    base: Option<usize>,
    measured: usize,
}

fn defaults(c: &case::Case) -> Defaults {
    Defaults {
        machine: c.machine.clone().unwrap_or_default(),
        workload: c.workload.clone().unwrap_or_default(),
        threads: c.threads,
        pin: c.pin.clone(),
        mempolicy: c.mempolicy.clone(),
        thp: c.thp.clone(),
        hugetlb: c.hugetlb.clone(),
    }
}

/// A canonical text for a run, so that cases sharing a configuration share its simulation.
fn run_key(d: &Defaults, config: &str) -> String {
    format!(
        "{}|{}|{:?}|{}|{}|{}|{}|{}",
        d.machine, d.workload, d.threads, d.pin, d.mempolicy, d.thp, d.hugetlb, config
    )
}

/// The distinct simulations a set of cases needs, and which of them each case reads.
pub struct Plan {
    specs: Vec<RunSpec>,
    per_case: Vec<Option<CaseRuns>>,
}

impl Plan {
    /// Distinct simulations to run.
    pub fn runs(&self) -> usize {
        self.specs.len()
    }
}

/// Resolve every case's configurations (machine, workload, policies, pinning) without
/// simulating: a broken case is an error before anything runs.
pub fn plan(cases: &[SourcedCase]) -> Result<Plan> {
    // Resolve every run before simulating anything: a broken case is an error up front.
    let mut keys: HashMap<String, usize> = HashMap::new();
    let mut specs: Vec<RunSpec> = Vec::new();
    let mut per_case: Vec<Option<CaseRuns>> = Vec::new();
    for c in cases {
        if c.case.kind() == Kind::NotExpressible {
            per_case.push(None);
            continue;
        }
        let d = defaults(&c.case);
        let mut index_of = |config: &str| -> Result<usize> {
            let key = run_key(&d, config);
            if let Some(&i) = keys.get(&key) {
                return Ok(i);
            }
            let spec = resolve(&d, config)
                .with_context(|| format!("case {}: configuration '{config}'", c.case.id))?;
            numalab_workloads::by_spec(&spec.workload, spec.threads)
                .map_err(|e| anyhow!("case {}: workload: {e}", c.case.id))?;
            specs.push(spec);
            keys.insert(key, specs.len() - 1);
            Ok(specs.len() - 1)
        };
        let needs_base =
            c.case.metric.is_some_and(Metric::is_comparative) || c.case.published_base.is_some();
        let base = if needs_base {
            Some(index_of(c.case.base.as_deref().unwrap_or(""))?)
        } else {
            None
        };
        let measured = index_of(&c.case.config)?;
        per_case.push(Some(CaseRuns { base, measured }));
    }

    Ok(Plan { specs, per_case })
}

/// Simulate the cases and score them. `progress(done, total)` is called as runs finish.
/// A failed simulation marks its cases as errors; the others are scored.
pub fn run(
    cases: &[SourcedCase],
    opts: &Options,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Scorecard> {
    if let Some(why) = numalab_sim::config::epoch_us_problem(opts.epoch_ns / 1000.0) {
        return Err(anyhow!("epoch length {why}"));
    }
    if opts.repeats == Repeats::Fixed(0) {
        return Err(anyhow!(
            "--repeats 0: expected at least 1 run per configuration"
        ));
    }
    let started = Instant::now();
    let Plan { specs, per_case } = plan(cases)?;
    let seeded = opts.repeats != Repeats::Fixed(1);
    let first = opts.repeats.first_wave();
    let done = AtomicUsize::new(0);
    let total = AtomicUsize::new(specs.len() * first);
    progress(0, specs.len() * first);
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()?;
    let simulate = |jobs: Vec<(usize, usize)>| -> Vec<SeededRun> {
        pool.install(|| {
            jobs.par_iter()
                .map(|&(i, k)| {
                    let spec = &specs[i];
                    let mut cfg = spec.sim_config(opts.epoch_ns, 0);
                    if seeded {
                        cfg.seed = k as u64 + 1;
                        cfg.start_skew_ns = opts.start_skew_ns;
                    }
                    let r = numalab_workloads::by_spec(&spec.workload, spec.threads)
                        .map_err(|e| e.to_string())
                        .and_then(|wl| {
                            numalab_sim::simulate(&spec.machine, wl.as_ref(), cfg)
                                .map_err(|e| format!("simulating '{}': {e}", spec.label))
                        });
                    let d = done.fetch_add(1, Ordering::Relaxed) + 1;
                    progress(d, total.load(Ordering::Relaxed));
                    ((i, k), r)
                })
                .collect()
        })
    };
    // Longest-looking runs first keeps the pool busy to the end (threads × a crude size).
    let longest_first = |mut jobs: Vec<(usize, usize)>| {
        jobs.sort_by_key(|&(i, _)| std::cmp::Reverse(specs[i].threads));
        jobs
    };
    let mut results = simulate(longest_first(
        (0..specs.len())
            .flat_map(|i| (0..first).map(move |k| (i, k)))
            .collect(),
    ));
    if opts.repeats == Repeats::Auto {
        if opts.max_seeds < first {
            return Err(anyhow!(
                "--max-seeds {}: expected at least {first}",
                opts.max_seeds
            ));
        }
        let waves = AutoWaves {
            specs: specs.len(),
            cases,
            per_case: &per_case,
            first,
            max_seeds: opts.max_seeds,
        };
        waves.run(&mut results, |more| {
            total.fetch_add(more.len(), Ordering::Relaxed);
            simulate(longest_first(more))
        });
    }
    let per_spec = by_spec(specs.len(), &mut results);

    let runs: Vec<score::RunInfo> = specs
        .iter()
        .zip(&per_spec)
        .map(|(spec, rs)| {
            let ok: Vec<&SimResult> = rs.iter().filter_map(|r| r.as_ref().ok()).collect();
            let all = ok.len() == rs.len();
            let ms: Vec<f64> = ok.iter().map(|r| r.sim_time_ns / 1e6).collect();
            score::RunInfo {
                machine: spec.machine.id.clone(),
                workload: spec.workload.clone(),
                threads: spec.threads,
                config: spec.label.clone(),
                sim_ms: all.then(|| mean(&ms)),
                sim_ms_repeats: if rs.len() > 1 && all { ms } else { Vec::new() },
                host_seconds: all.then(|| ok.iter().map(|r| r.host_seconds).sum()),
            }
        })
        .collect();
    let rows: Vec<Row> = cases
        .iter()
        .zip(&per_case)
        .map(|(c, runs)| match runs {
            None => score::not_expressible(c),
            Some(runs) => measure(c, runs, &per_spec),
        })
        .collect();
    Ok(Scorecard::new(
        rows,
        runs,
        started.elapsed().as_secs_f64(),
        opts.epoch_ns / 1000.0,
    ))
}

/// `--repeats auto` after its first wave: while a case is not [settled](score::settled),
/// more seeds ([`next_seeds`]) for every configuration it compares, up to `max_seeds`.
struct AutoWaves<'a> {
    /// Distinct configurations (every one has its first wave in the results).
    specs: usize,
    cases: &'a [SourcedCase],
    per_case: &'a [Option<CaseRuns>],
    first: usize,
    max_seeds: usize,
}

impl AutoWaves<'_> {
    /// `simulate` runs (configuration, seed index) jobs; their results join `results`.
    fn run(
        &self,
        results: &mut Vec<SeededRun>,
        mut simulate: impl FnMut(Vec<(usize, usize)>) -> Vec<SeededRun>,
    ) {
        let specs = self.specs;
        let mut have = vec![self.first; specs];
        loop {
            // every case scored on the seeds so far: unsettled, more seeds for its runs
            let mut want = have.clone();
            let per_spec = by_spec(specs, results);
            for (c, runs) in self.cases.iter().zip(self.per_case) {
                let Some(runs) = runs else { continue };
                let sampled: Vec<usize> = [runs.base, Some(runs.measured)]
                    .into_iter()
                    .flatten()
                    .filter(|&i| have[i] < self.max_seeds)
                    .collect();
                if sampled.is_empty() {
                    continue;
                }
                // a failed run's error is reported; more seeds would not help
                let Ok(m) = measured_values(c, runs, &per_spec) else {
                    continue;
                };
                if score::settled(c, &m) {
                    continue;
                }
                let terms = m.terms;
                let configs = [runs.base, Some(runs.measured)];
                let largest = terms.iter().flatten().fold(0.0f64, |a, &t| a.max(t));
                for i in sampled {
                    let term = configs
                        .iter()
                        .position(|&c| c == Some(i))
                        .and_then(|k| terms[k]);
                    // the second wave for all; after it, only where the error is
                    let matters = have[i] < AUTO_SECOND_WAVE_SEEDS
                        || term.is_none_or(|t| t >= AUTO_TERM_SHARE * largest);
                    if matters {
                        want[i] = want[i].max(next_seeds(have[i]).min(self.max_seeds));
                    }
                }
            }
            let more: Vec<(usize, usize)> = (0..specs)
                .flat_map(|i| (have[i]..want[i]).map(move |k| (i, k)))
                .collect();
            if more.is_empty() {
                return;
            }
            results.extend(simulate(more));
            have = want;
        }
    }
}

/// One simulation's outcome: (configuration, seed index) and its result.
type SeededRun = ((usize, usize), Result<SimResult, String>);

/// Each configuration's runs, seed 1 first.
type PerSpec<'a> = Vec<Vec<&'a Result<SimResult, String>>>;

/// Group the runs by configuration, in seed order.
fn by_spec(specs: usize, results: &mut [SeededRun]) -> PerSpec<'_> {
    results.sort_by_key(|(ik, _)| *ik);
    let mut per_spec: PerSpec = (0..specs).map(|_| Vec::new()).collect();
    for ((i, _), r) in results.iter() {
        per_spec[*i].push(r);
    }
    per_spec
}

fn mean(v: &[f64]) -> f64 {
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// The mean of the values that exist (None when none does).
fn mean_of(v: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = v.flatten().collect();
    (!v.is_empty()).then(|| mean(&v))
}

/// The range of the values that exist, when there are several.
fn range_of(v: &[Option<f64>]) -> Option<(f64, f64)> {
    let v: Vec<f64> = v.iter().flatten().copied().collect();
    (v.len() > 1).then(|| {
        v.iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &x| {
                (lo.min(x), hi.max(x))
            })
    })
}

/// Score a case from its runs' repeats (one each without `--repeats`): comparisons from the
/// mean times, per-run metrics as the mean of each repeat's value.
fn measure(c: &SourcedCase, runs: &CaseRuns, results: &PerSpec) -> Row {
    match measured_values(c, runs, results) {
        Ok(m) => score::score(c, m),
        Err(e) => score::failed(c, e),
    }
}

/// A case's values from its runs' repeats (the error of a failed run).
fn measured_values(
    c: &SourcedCase,
    runs: &CaseRuns,
    results: &PerSpec,
) -> Result<Measured, String> {
    let get = |i: usize| -> Result<Vec<&SimResult>, String> {
        results[i]
            .iter()
            .map(|r| r.as_ref().map_err(Clone::clone))
            .collect()
    };
    let measured = get(runs.measured)?;
    let base = runs.base.map(get).transpose()?;
    let seeds = [runs.base, Some(runs.measured)]
        .into_iter()
        .flatten()
        .map(|i| results[i].len())
        .max()
        .filter(|&n| n > 1);
    let metric = c
        .case
        .metric
        .expect("checked: simulated cases have a metric");
    if let (Some(w), Some(base)) = (&c.case.cpu_time_weights, &base) {
        return weighted_cpu_time(w, base, &measured).map(|m| Measured { seeds, ..m });
    }
    let region = c.case.region.as_deref();
    // with `full_run`, every figure comes from the runs weighted to the published length
    let weigh = |rs: &[&SimResult]| -> Result<Option<Vec<full_run::Weighted>>, String> {
        c.case
            .full_run
            .as_ref()
            .map(|fr| rs.iter().map(|r| fr.weigh(r)).collect())
            .transpose()
    };
    let measured_w = weigh(&measured)?;
    let base_w = base.as_deref().map(weigh).transpose()?.flatten();
    let times = |rs: &[&SimResult], w: &Option<Vec<full_run::Weighted>>| -> Option<Vec<f64>> {
        match w {
            Some(w) => Some(w.iter().map(|x| x.time_ns).collect()),
            None => rs
                .iter()
                .map(|r| metric::region_time_ns(r, region))
                .collect(),
        }
    };
    let per_run = |rs: &[&SimResult], w: &Option<Vec<full_run::Weighted>>| -> Vec<Option<f64>> {
        match w {
            Some(w) => w.iter().map(|x| metric.of_metrics(&x.metrics)).collect(),
            None => rs.iter().map(|r| metric.of_run(r, region)).collect(),
        }
    };
    let (times_m, times_b) = (
        times(&measured, &measured_w),
        base.as_deref().and_then(|b| times(b, &base_w)),
    );
    let (value, each, compared) = if metric.is_comparative() {
        match (&times_b, &times_m) {
            // The range seed by seed; where one side has fewer seeds (a configuration shared
            // with a case that needed more), its mean stands for the seeds it did not run.
            (Some(tb), Some(tc)) => (
                metric.compare(mean(tb), mean(tc)),
                (0..tb.len().max(tc.len()))
                    .map(|i| {
                        let x = tb.get(i).copied().unwrap_or_else(|| mean(tb));
                        let y = tc.get(i).copied().unwrap_or_else(|| mean(tc));
                        metric.compare(x, y)
                    })
                    .collect(),
                comparison_error(|b, c| metric.compare(b, c), tb, tc),
            ),
            _ => (None, Vec::new(), None),
        }
    } else {
        let each = per_run(&measured, &measured_w);
        (mean_of(each.iter().copied()), each, None)
    };
    let base_each = if metric.is_comparative() {
        Vec::new()
    } else {
        base.as_deref()
            .map(|b| per_run(b, &base_w))
            .unwrap_or_default()
    };
    let base_error = error_of_existing(&base_each);
    // a comparison's error from both runs' times; a per-run value's from its own seeds
    let (error, terms) = match compared {
        Some((error, [b, c])) => (Some(error), [Some(b), Some(c)]),
        None if metric.is_comparative() => (None, [None, None]),
        None => {
            let error = error_of_existing(&each);
            (error, [base_error.map(|e| e.0), error.map(|e| e.0)])
        }
    };
    Ok(Measured {
        value,
        base_value: mean_of(base_each.iter().copied()),
        base_ms: times_b.as_deref().map(|t| mean(t) / 1e6),
        config_ms: times_m.as_deref().map(|t| mean(t) / 1e6),
        spread: range_of(&each),
        stderr: error.map(|e| e.0),
        base_stderr: base_error.map(|e| e.0),
        dof: error.map(|e| e.1),
        base_dof: base_error.map(|e| e.1),
        terms,
        seeds,
    })
}

/// The standard error and degrees of freedom of `compare(mean b, mean c)` from two
/// configurations' unpaired seeds: each side's error through the comparison's slope (first
/// order), added as independent ([`score::welch`]); and those two terms. None unless both
/// sides have several seeds.
fn comparison_error(
    compare: impl Fn(f64, f64) -> Option<f64>,
    b: &[f64],
    c: &[f64],
) -> Option<((f64, f64), [f64; 2])> {
    let (se_b, se_c) = (score::stderr_of(b)?, score::stderr_of(c)?);
    let (mb, mc) = (mean(b), mean(c));
    let slope = |g: &dyn Fn(f64) -> Option<f64>, x: f64| -> Option<f64> {
        let h = 1e-6 * x.abs();
        Some((g(x + h)? - g(x - h)?) / (2.0 * h))
    };
    let d_b = slope(&|x| compare(x, mc), mb)?;
    let d_c = slope(&|x| compare(mb, x), mc)?;
    let terms = [(d_b * se_b).abs(), (d_c * se_c).abs()];
    Some((
        score::welch(&[
            (terms[0], (b.len() - 1) as f64),
            (terms[1], (c.len() - 1) as f64),
        ]),
        terms,
    ))
}

/// The standard error and degrees of freedom (n − 1) over the values that exist (None unless
/// all do and there are several).
fn error_of_existing(v: &[Option<f64>]) -> Option<(f64, f64)> {
    let v: Option<Vec<f64>> = v.iter().copied().collect();
    v.and_then(|v| score::stderr_of(&v).map(|se| (se, (v.len() - 1) as f64)))
}

/// Each task's time in a run (its last thread's finish), in task order.
fn task_times(r: &SimResult) -> Vec<f64> {
    let tasks = r
        .per_thread
        .iter()
        .map(|t| t.task as usize + 1)
        .max()
        .unwrap_or(0);
    let mut t = vec![0.0f64; tasks];
    for th in &r.per_thread {
        let slot = &mut t[th.task as usize];
        *slot = slot.max(th.time_ns);
    }
    t
}

/// A multiprogrammed comparison of total CPU time with each program weighted to its full
/// run: `100 × (Σ w · t_cfg / t_base / Σ w − 1)` over the tasks, from the mean task times
/// (and per repeat for the spread). The times shown are the plain sums of task times.
fn weighted_cpu_time(
    weights: &[f64],
    base: &[&SimResult],
    measured: &[&SimResult],
) -> Result<Measured, String> {
    let per_task = |rs: &[&SimResult]| -> Result<Vec<Vec<f64>>, String> {
        rs.iter()
            .map(|r| {
                let t = task_times(r);
                if t.len() == weights.len() {
                    Ok(t)
                } else {
                    Err(format!(
                        "cpu_time_weights has {} weights but the run has {} tasks",
                        weights.len(),
                        t.len()
                    ))
                }
            })
            .collect()
    };
    let (b, m) = (per_task(base)?, per_task(measured)?);
    let total_w: f64 = weights.iter().sum();
    let increase = |tb: &[f64], tm: &[f64]| -> Option<f64> {
        let mut sum = 0.0;
        for ((w, x), y) in weights.iter().zip(tb).zip(tm) {
            if !(*x > 0.0 && *y > 0.0) {
                return None;
            }
            sum += w * y / x;
        }
        Some(100.0 * (sum / total_w - 1.0))
    };
    let mean_tasks = |runs: &[Vec<f64>]| -> Vec<f64> {
        (0..weights.len())
            .map(|i| mean(&runs.iter().map(|r| r[i]).collect::<Vec<_>>()))
            .collect()
    };
    let sum_ms =
        |runs: &[Vec<f64>]| mean(&runs.iter().map(|r| r.iter().sum()).collect::<Vec<f64>>()) / 1e6;
    // seed by seed, over the seeds both sides ran
    let each: Vec<Option<f64>> = b.iter().zip(&m).map(|(x, y)| increase(x, y)).collect();
    let error = error_of_existing(&each);
    Ok(Measured {
        value: increase(&mean_tasks(&b), &mean_tasks(&m)),
        base_value: None,
        base_ms: Some(sum_ms(&b)),
        config_ms: Some(sum_ms(&m)),
        spread: range_of(&each),
        stderr: error.map(|e| e.0),
        base_stderr: None,
        dof: error.map(|e| e.1),
        base_dof: None,
        terms: [None, None], // seed by seed: the two runs' shares are not told apart
        seeds: None,
    })
}

/// Ids of the passing cases, one per line (the file `--expect-passing` reads).
pub fn passing_ids(card: &Scorecard) -> Vec<String> {
    card.rows
        .iter()
        .filter(|r| r.status == score::Status::Pass)
        .map(|r| r.id.clone())
        .collect()
}

/// Cases listed as passing that ran and did not pass.
pub fn regressions<'a>(card: &'a Scorecard, expected: &[String]) -> Vec<&'a Row> {
    card.rows
        .iter()
        .filter(|r| expected.contains(&r.id) && r.status != score::Status::Pass)
        .collect()
}
