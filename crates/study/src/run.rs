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
use crate::grid::{Config, Grid};
use crate::table::{self, Row, RunMetrics};
use crate::StudyFile;
use anyhow::{anyhow, bail, Context, Result};
use numalab_core::atomic_file::write_atomic;
use numalab_sim::SimResult;
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

#[derive(Clone, Debug)]
pub struct RunOptions {
    /// Simulations at once (default: the host's cores).
    pub jobs: usize,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            jobs: std::thread::available_parallelism().map_or(1, |n| n.get()),
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

/// A finished run's row, if its record exists, has this key and succeeded.
fn done_row(path: &Path, key: &str) -> Option<Row> {
    let text = std::fs::read_to_string(path).ok()?;
    // only the key and the row are needed: skip the (large) result
    #[derive(Deserialize)]
    struct Head {
        key: String,
        row: Row,
    }
    let h: Head = serde_json::from_str(&text).ok()?;
    (h.key == key && h.row.status == "ok").then_some(h.row)
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
        },
        result,
    };
    let text = serde_json::to_vec(&rec)?;
    write_atomic(&job.path, &text)?;
    Ok(rec.row)
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
    if out.exists() && !out.is_dir() {
        bail!(
            "cannot write the study to {}: it is a file, not a folder",
            out.display()
        );
    }
    let runs_dir = out.join("runs");
    std::fs::create_dir_all(&runs_dir)
        .with_context(|| format!("cannot create the study folder {}", runs_dir.display()))?;
    let env = Environment::snapshot();

    let jobs = jobs(study, &grid, &runs_dir);
    let mut rows: Vec<Option<Row>> = jobs.iter().map(|j| done_row(&j.path, &j.key)).collect();
    let todo: Vec<usize> = (0..jobs.len()).filter(|&i| rows[i].is_none()).collect();
    let skipped = jobs.len() - todo.len();
    let done = AtomicUsize::new(0);
    progress(0, todo.len());
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.jobs)
        .build()?;
    let fresh: Vec<(usize, Result<Row>)> = pool.install(|| {
        todo.par_iter()
            .map(|&i| {
                let r = run_one(study, &jobs[i]);
                progress(done.fetch_add(1, Ordering::Relaxed) + 1, todo.len());
                (i, r)
            })
            .collect()
    });
    for (i, r) in fresh {
        rows[i] = Some(r?);
    }
    let rows: Vec<Row> = rows
        .into_iter()
        .map(|r| r.expect("every run done"))
        .collect();

    let results_parquet = out.join("results.parquet");
    let results_csv = out.join("results.csv");
    table::write_parquet(&results_parquet, &grid.axis_keys, &rows)?;
    table::write_csv(&results_csv, &grid.axis_keys, &rows)?;
    write_atomic(
        &out.join("environment.json"),
        &serde_json::to_vec_pretty(&env)?,
    )?;
    write_atomic(&out.join("study.toml"), study.source.as_bytes())?;
    Ok(Outcome {
        grid,
        rows,
        ran: todo.len(),
        skipped,
        results_parquet,
        results_csv,
    })
}
