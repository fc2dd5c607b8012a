//! Running a study: the runs not yet done, on a thread pool, each recorded as it finishes.
//!
//! Layout of the output folder:
//!
//! * `runs/NNNN-LABEL.rK.json`: one record per run (its key, row and, for a run that
//!   succeeded, the full simulation result with per-thread, per-node and timeline data),
//!   written whole as soon as the run ends. A rerun skips every run whose record holds the
//!   same key and succeeded; failed runs are tried again.
//! * `results.parquet`, `results.csv`: one row per run of the grid, in grid order.
//! * `environment.json`: [`Environment`] at the start of the last run; `study.toml`: the
//!   study file the results came from.

use crate::environment::Environment;
use crate::file::StudyKind;
use crate::grid::{Config, Grid};
use crate::table::{self, Row, RunMetrics};
use crate::{real, StudyFile};
use anyhow::{anyhow, bail, Context, Result};
use numalab_core::atomic_file::write_atomic;
use numalab_sim::SimResult;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Simulations at once (default: the host's cores). Real runs go one at a time.
    pub jobs: usize,
    /// The `numalab` binary that real runs start as `numalab run ... -- COMMAND`.
    pub numalab: Option<PathBuf>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
            numalab: None,
        }
    }
}

/// What a study run did.
#[derive(Clone, Debug)]
pub struct Outcome {
    pub grid: Grid,
    /// Every run of the grid, in grid order (configuration, then repeat).
    pub rows: Vec<Row>,
    /// Runs simulated now, and runs skipped because a previous run had done them.
    pub ran: usize,
    pub skipped: usize,
    pub results_parquet: PathBuf,
    pub results_csv: PathBuf,
}

impl Outcome {
    pub fn failed(&self) -> Vec<&Row> {
        self.rows.iter().filter(|r| r.status != "ok").collect()
    }
}

/// The traffic timeline's interval in a study's runs: 100 µs, five default epochs.
const TIMELINE_INTERVAL_NS: f64 = 100_000.0;

/// One run's record on disk.
#[derive(Serialize, Deserialize)]
struct Record {
    key: String,
    row: Row,
    result: Option<SimResult>,
}

/// One run of the grid: its configuration, repeat and seed, its key and its record's path.
struct Job<'a> {
    config: &'a Config,
    repeat: u64,
    seed: u64,
    key: String,
    path: PathBuf,
}

/// Every run of the grid, in grid order (configuration, then repeat), with its record under
/// `runs_dir`.
fn jobs<'a>(study: &StudyFile, grid: &'a Grid, runs_dir: &Path) -> Vec<Job<'a>> {
    let mut jobs = Vec::new();
    for c in &grid.configs {
        for repeat in 0..study.repeats as u64 {
            let seed = repeat + 1;
            jobs.push(Job {
                config: c,
                repeat,
                seed,
                key: c.run_key(study, seed),
                path: runs_dir.join(format!("{}.r{repeat}.json", c.file_stem())),
            });
        }
    }
    jobs
}

/// A run's row from its record, whatever its status (None: no record with this key).
fn recorded_row(path: &Path, key: &str) -> Option<Row> {
    let text = std::fs::read_to_string(path).ok()?;
    // only the key and the row are needed: skip the (large) result
    #[derive(Deserialize)]
    struct Head {
        key: String,
        row: Row,
    }
    let h: Head = serde_json::from_str(&text).ok()?;
    (h.key == key).then_some(h.row)
}

/// A finished run's row, if its record exists, has this key and succeeded.
fn done_row(path: &Path, key: &str) -> Option<Row> {
    recorded_row(path, key).filter(|r| r.status == "ok")
}

/// A finished run: its row and, when it succeeded, its full result.
pub type RunRecord = (Row, Option<SimResult>);

/// Every run's record in grid order (configuration, then repeat); None where no record with the
/// run's current key exists.
pub fn load_records(study: &StudyFile, grid: &Grid, out: &Path) -> Result<Vec<Option<RunRecord>>> {
    jobs(study, grid, &out.join("runs"))
        .iter()
        .map(|j| match std::fs::read_to_string(&j.path) {
            Ok(text) => {
                let r: Record = serde_json::from_str(&text).with_context(|| {
                    format!(
                        "{}: not a study run record (remove it to rerun)",
                        j.path.display()
                    )
                })?;
                Ok((r.key == j.key).then_some((r.row, r.result)))
            }
            Err(_) => Ok(None),
        })
        .collect()
}

fn simulate(study: &StudyFile, job: &Job) -> Result<SimResult> {
    let spec = job.config.resolve()?;
    let mut cfg = spec.sim_config(study.epoch_us * 1000.0, study.sample_period);
    cfg.seed = job.seed;
    // a timeline for runs of a millisecond too (the report draws it; sim's default is 1 ms)
    cfg.timeline_interval_ns = TIMELINE_INTERVAL_NS;
    if study.repeats > 1 {
        cfg.start_skew_ns = study.start_skew_us * 1000.0;
    }
    let wl = numalab_workloads::by_spec(&spec.workload, spec.threads)
        .map_err(|e| anyhow!("workload '{}': {e}", spec.workload))?;
    // a defect in one configuration must not take the others down with it
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        numalab_sim::simulate(&spec.machine, wl.as_ref(), cfg)
    }))
    .map_err(|p| {
        let msg = p
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default();
        anyhow!("internal error in the simulator ({msg}): please report it with the study file")
    })?;
    r.map_err(|e| anyhow!("{e}"))
}

/// Write a run's record whole and return its row.
fn record(job: &Job, rec: Record) -> Result<Row> {
    let text = serde_json::to_vec(&rec)?;
    write_atomic(&job.path, &text)?;
    Ok(rec.row)
}

fn row_of(job: &Job, error: Option<String>) -> Row {
    Row {
        config: job.config.label.clone(),
        axes: job.config.axes.iter().map(|(_, v, _)| v.clone()).collect(),
        repeat: job.repeat,
        seed: job.seed,
        status: if error.is_none() { "ok" } else { "failed" }.into(),
        error,
        metrics: None,
        real: None,
    }
}

/// Real runs, one at a time (they would disturb each other): per configuration with runs to
/// do, its kernel settings, its warm-ups, then its timed repeats; the settings are restored
/// before the next configuration, and on an error or an interrupt. An interrupt stops the
/// study after the run in progress (which is recorded only if it finished).
fn run_real(
    study: &StudyFile,
    jobs: &[Job],
    todo: &[usize],
    numalab: &Path,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<(usize, Result<Row>)>> {
    real::interrupted();
    let mut out = Vec::new();
    let mut i = 0;
    while i < todo.len() {
        let config = jobs[todo[i]].config;
        let mine: Vec<usize> = todo[i..]
            .iter()
            .copied()
            .take_while(|&j| std::ptr::eq(jobs[j].config, config))
            .collect();
        i += mine.len();
        let failed_all = |e: &anyhow::Error| -> Result<Vec<(usize, Result<Row>)>> {
            mine.iter()
                .map(|&j| {
                    Ok((
                        j,
                        record(
                            &jobs[j],
                            Record {
                                key: jobs[j].key.clone(),
                                row: row_of(&jobs[j], Some(format!("{e:#}"))),
                                result: None,
                            },
                        ),
                    ))
                })
                .collect()
        };
        let spec = match real::RealSpec::of(config) {
            Ok(s) => s,
            Err(e) => {
                out.extend(failed_all(&e)?);
                continue;
            }
        };
        let settings = match real::KernelSettings::apply(&spec) {
            Ok(s) => s,
            Err(e) => {
                out.extend(failed_all(&e)?);
                continue;
            }
        };
        let mut warm_error = None;
        for _ in 0..study.warmups {
            if let Err(e) = real::run_once(numalab, &spec) {
                warm_error = Some(e.context("warm-up run"));
                break;
            }
        }
        for &j in &mine {
            if real::was_interrupted() {
                break;
            }
            let job = &jobs[j];
            let (error, m) = match &warm_error {
                Some(e) => (Some(format!("{e:#}")), None),
                None => match real::run_once(numalab, &spec) {
                    Ok(m) => (None, Some(m)),
                    Err(e) => (Some(format!("{e:#}")), None),
                },
            };
            if real::was_interrupted() {
                break;
            }
            let mut row = row_of(job, error);
            row.real = m;
            out.push((
                j,
                record(
                    job,
                    Record {
                        key: job.key.clone(),
                        row,
                        result: None,
                    },
                ),
            ));
            progress(out.len(), todo.len());
        }
        settings.restore()?;
        if real::was_interrupted() {
            bail!(
                "interrupted: the kernel settings are restored; {} of {} runs finished now, a rerun does the rest",
                out.len(),
                todo.len()
            );
        }
    }
    Ok(out)
}

fn run_one(study: &StudyFile, job: &Job) -> Result<Row> {
    let (status, error, result) = match simulate(study, job) {
        Ok(r) => ("ok", None, Some(r)),
        Err(e) => ("failed", Some(format!("{e:#}")), None),
    };
    let rec = Record {
        key: job.key.clone(),
        row: Row {
            config: job.config.label.clone(),
            axes: job.config.axes.iter().map(|(_, v, _)| v.clone()).collect(),
            repeat: job.repeat,
            seed: job.seed,
            status: status.into(),
            error,
            metrics: result.as_ref().map(RunMetrics::of),
            real: None,
        },
        result,
    };
    record(job, rec)
}

/// The output folder's runs directory, created (with the folder) if missing.
fn runs_dir(out: &Path) -> Result<PathBuf> {
    if out.exists() && !out.is_dir() {
        bail!(
            "cannot write the study to {}: it is a file, not a folder",
            out.display()
        );
    }
    let runs_dir = out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .with_context(|| format!("cannot create the study folder {}", runs_dir.display()))?;
    Ok(runs_dir)
}

/// Run the jobs `todo` (indices into `jobs`): simulations on a pool of `opts.jobs` threads,
/// real runs one at a time.
fn execute(
    study: &StudyFile,
    jobs: &[Job],
    todo: &[usize],
    opts: &RunOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Vec<(usize, Result<Row>)>> {
    if opts.jobs == 0 {
        bail!("--jobs 0: expected at least 1 simulation at once");
    }
    let done = AtomicUsize::new(0);
    progress(0, todo.len());
    Ok(match study.kind {
        StudyKind::Real => {
            let numalab = opts.numalab.as_deref().ok_or_else(|| {
                anyhow!("real runs need the numalab binary to start them (RunOptions::numalab)")
            })?;
            run_real(study, jobs, todo, numalab, progress)?
        }
        StudyKind::Sim => {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(opts.jobs)
                .build()?;
            pool.install(|| {
                todo.par_iter()
                    .map(|&i| {
                        let r = run_one(study, &jobs[i]);
                        progress(done.fetch_add(1, Ordering::Relaxed) + 1, todo.len());
                        (i, r)
                    })
                    .collect()
            })
        }
    })
}

/// Write the tables, the environment and the study file; the outcome of `rows` (grid order).
fn finish(
    study: &StudyFile,
    grid: Grid,
    out: &Path,
    rows: Vec<Row>,
    ran: usize,
    skipped: usize,
) -> Result<Outcome> {
    let results_parquet = out.join("results.parquet");
    let results_csv = out.join("results.csv");
    table::write_parquet(&results_parquet, &grid.axis_keys, study.kind, &rows)?;
    table::write_csv(&results_csv, &grid.axis_keys, study.kind, &rows)?;
    write_atomic(
        &out.join("environment.json"),
        &serde_json::to_vec_pretty(&Environment::snapshot())?,
    )?;
    write_atomic(&out.join("study.toml"), study.source.as_bytes())?;
    Ok(Outcome {
        grid,
        rows,
        ran,
        skipped,
        results_parquet,
        results_csv,
    })
}

/// Run `study` into `out` (created if missing). `progress(done, total)` is called as runs
/// finish, `total` counting only the runs to simulate now. Failed runs are recorded and
/// returned in the outcome's rows; only a problem with the output folder is an error.
pub fn run(
    study: &StudyFile,
    out: &Path,
    opts: &RunOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<Outcome> {
    if opts.jobs == 0 {
        bail!("--jobs 0: expected at least 1 simulation at once");
    }
    let grid = Grid::new(study)?;
    let runs_dir = runs_dir(out)?;
    let jobs = jobs(study, &grid, &runs_dir);
    let mut rows: Vec<Option<Row>> = jobs.iter().map(|j| done_row(&j.path, &j.key)).collect();
    let todo: Vec<usize> = (0..jobs.len()).filter(|&i| rows[i].is_none()).collect();
    let skipped = jobs.len() - todo.len();
    for (i, r) in execute(study, &jobs, &todo, opts, progress)? {
        rows[i] = Some(r?);
    }
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| r.expect("every run done"))
        .collect();
    let ran = todo.len();
    drop(jobs);
    finish(study, grid, out, rows, ran, skipped)
}

/// One shard of a study run as several processes (a Slurm job array's tasks): the runs whose
/// position in the grid is `index` modulo `of`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub of: usize,
}

impl Shard {
    pub fn new(index: usize, of: usize) -> Result<Shard> {
        if of == 0 || index >= of {
            bail!("shard {index} of {of}: expected 0 <= index < of");
        }
        Ok(Shard { index, of })
    }

    fn holds(&self, run: usize) -> bool {
        run % self.of == self.index
    }
}

/// What a shard did: its runs' rows (grid order), how many ran now, and its Parquet part.
pub struct ShardOutcome {
    pub rows: Vec<Row>,
    pub ran: usize,
    pub part: PathBuf,
}

/// Run the shard's runs not yet done into `out` (the study's folder, shared by all shards:
/// each run writes its own record), then write the shard's rows as `parts/part-K.parquet`.
/// The tables of the whole study come from [`collect`].
pub fn run_shard(
    study: &StudyFile,
    out: &Path,
    shard: Shard,
    opts: &RunOptions,
    progress: &(dyn Fn(usize, usize) + Sync),
) -> Result<ShardOutcome> {
    let grid = Grid::new(study)?;
    let runs_dir = runs_dir(out)?;
    let jobs = jobs(study, &grid, &runs_dir);
    let mine: Vec<usize> = (0..jobs.len()).filter(|&i| shard.holds(i)).collect();
    let mut rows: Vec<(usize, Option<Row>)> = mine
        .iter()
        .map(|&i| (i, done_row(&jobs[i].path, &jobs[i].key)))
        .collect();
    let todo: Vec<usize> = rows
        .iter()
        .filter(|(_, r)| r.is_none())
        .map(|(i, _)| *i)
        .collect();
    for (i, r) in execute(study, &jobs, &todo, opts, progress)? {
        let r = r?;
        if let Some(slot) = rows.iter_mut().find(|(j, _)| *j == i) {
            slot.1 = Some(r);
        }
    }
    let rows: Vec<Row> = rows.into_iter().filter_map(|(_, r)| r).collect();
    let parts = out.join("parts");
    std::fs::create_dir_all(&parts)
        .with_context(|| format!("cannot create {}", parts.display()))?;
    let part = parts.join(format!("part-{:04}.parquet", shard.index));
    table::write_parquet(&part, &grid.axis_keys, study.kind, &rows)?;
    Ok(ShardOutcome {
        rows,
        ran: todo.len(),
        part,
    })
}

/// The runs of `study` in `out` without a successful record: what a rerun would do.
pub fn pending(study: &StudyFile, out: &Path) -> Result<usize> {
    let grid = Grid::new(study)?;
    let jobs = jobs(study, &grid, &out.join("runs"));
    Ok(jobs
        .iter()
        .filter(|j| done_row(&j.path, &j.key).is_none())
        .count())
}

/// Gather the records the shards wrote into the study's tables (as a local run ends): every
/// run of the grid, a run without a record as failed ("not run").
pub fn collect(study: &StudyFile, out: &Path) -> Result<Outcome> {
    if !out.join("runs").is_dir() {
        bail!(
            "{} holds no study runs (no runs/ folder): run the study into it first",
            out.display()
        );
    }
    let grid = Grid::new(study)?;
    let jobs = jobs(study, &grid, &out.join("runs"));
    let rows: Vec<Row> = jobs
        .iter()
        .map(|j| {
            recorded_row(&j.path, &j.key).unwrap_or_else(|| {
                row_of(
                    j,
                    Some(
                        "not run: no record (its task did not start, was cancelled or is still running; a rerun submits it again)"
                            .into(),
                    ),
                )
            })
        })
        .collect();
    let done = rows.iter().filter(|r| r.status == "ok").count();
    drop(jobs);
    finish(study, grid, out, rows, 0, done)
}
