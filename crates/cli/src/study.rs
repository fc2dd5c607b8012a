//! `numalab study`: grids of simulated or real runs from a study file (crates/study,
//! docs/study.md).

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand};
use numalab_study::report::mean_sd;
use numalab_study::table::Row;
use numalab_study::{RunOptions, StudyFile, StudyKind};
use std::fmt::Write as _;
use std::path::PathBuf;

#[derive(Subcommand, Clone)]
pub enum StudyCmd {
    /// Run every configuration of a study file's grid that is not done yet (resumable):
    /// simulations on all host cores, real runs (kind = "real") one at a time with their
    /// kernel settings restored after; then write DIR/results.parquet, DIR/results.csv and
    /// DIR/environment.json.
    Run(StudyRunArgs),
    /// Write one self-contained HTML page of a study folder's results: the runs as a sortable
    /// table, bar charts against a baseline with error bars, traffic and imbalance timelines,
    /// each metric's correlation with run time, the environment.
    Report(StudyReportArgs),
    /// Run one shard of a study folder's runs: the runs whose place in the grid is INDEX
    /// modulo OF (what each task of `study run --backend slurm`'s job array runs).
    Shard(StudyShardArgs),
    /// Write a study folder's tables (results.parquet, results.csv) from its runs' records,
    /// after a Slurm job array ended; runs without a record are listed as not run.
    Collect(StudyCollectArgs),
}

#[derive(Args, Clone)]
pub struct StudyShardArgs {
    /// The study folder (its study.toml says what to run).
    pub dir: PathBuf,
    /// This shard's number, 0 to OF-1 (a Slurm array task's $SLURM_ARRAY_TASK_ID).
    #[arg(long, value_parser = crate::numbers::whole::<usize>("a shard number", ..), allow_negative_numbers = true)]
    pub index: usize,
    /// The number of shards.
    #[arg(long, value_parser = crate::numbers::count::<usize>("shards", 1..), allow_negative_numbers = true)]
    pub of: usize,
    /// Simulations at once (default: the CPUs this process may use).
    #[arg(short = 'j', long, value_parser = crate::numbers::count::<usize>("simulations at once", 1..), allow_negative_numbers = true)]
    pub jobs: Option<usize>,
}

#[derive(Args, Clone)]
pub struct StudyCollectArgs {
    /// The study folder.
    pub dir: PathBuf,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// On this machine.
    Local,
    /// As a Slurm job array (sbatch), one task per shard of the runs to do.
    Slurm,
}

#[derive(Args, Clone)]
pub struct StudyReportArgs {
    /// The study folder (what `numalab study run FILE -o DIR` wrote).
    pub dir: PathBuf,
    /// The HTML file to write.
    #[arg(short = 'o', long, value_name = "FILE")]
    pub out: PathBuf,
    /// The configuration the charts compare against, by its label (default: the first).
    #[arg(long, value_name = "LABEL")]
    pub baseline: Option<String>,
}

#[derive(Args, Clone)]
pub struct StudyRunArgs {
    /// The study file (TOML: [defaults], [[axis]] key/values/labels, repeats; docs/study.md).
    pub file: PathBuf,
    /// The output folder (created if missing; a rerun into it skips the runs already done).
    #[arg(short = 'o', long, value_name = "DIR")]
    pub out: PathBuf,
    /// Simulations at once (default: every host core).
    #[arg(short = 'j', long, value_parser = crate::numbers::count::<usize>("simulations at once", 1..), allow_negative_numbers = true)]
    pub jobs: Option<usize>,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
    /// Where the runs go: this machine, or a Slurm cluster whose nodes share DIR.
    #[arg(long, value_enum, default_value = "local")]
    pub backend: Backend,
    /// Slurm: array tasks, each running an equal share of the runs to do (default: one per
    /// run, at most 64).
    #[arg(long, value_parser = crate::numbers::count::<usize>("array tasks", 1..), allow_negative_numbers = true)]
    pub shards: Option<usize>,
    /// Slurm: an extra sbatch option, as given (repeatable): --sbatch-arg=--partition=big.
    #[arg(long = "sbatch-arg", value_name = "ARG", allow_hyphen_values = true)]
    pub sbatch_args: Vec<String>,
    /// Slurm: submit and return (then `numalab study collect DIR` when the array has ended)
    /// instead of waiting for it and collecting.
    #[arg(long)]
    pub no_wait: bool,
}

pub fn run(cmd: StudyCmd) -> Result<()> {
    match cmd {
        StudyCmd::Run(a) => run_study(a),
        StudyCmd::Shard(a) => run_shard(a),
        StudyCmd::Collect(a) => {
            let study = StudyFile::load(&a.dir.join("study.toml"))
                .with_context(|| format!("{} is not a study folder", a.dir.display()))?;
            let outcome = numalab_study::collect(&study, &a.dir)?;
            report_outcome(&study, &outcome, &a.dir, Came::Collected)
        }
        StudyCmd::Report(a) => {
            crate::output::check_writable(Some(&a.out))?;
            let runs = numalab_study::report::write_report(&a.dir, &a.out, a.baseline.as_deref())?;
            println!("wrote {} ({runs} runs)", a.out.display());
            Ok(())
        }
    }
}

/// One line per configuration: its runs' mean time (± standard deviation with repeats),
/// LAR and imbalance.
fn summary(rows: &[Row]) -> String {
    let configs = config_order(rows);
    let w = configs.iter().map(|c| c.len()).max().unwrap_or(6).max(13);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<w$}  {:>6}  {:>18}  {:>7}  {:>9}",
        "configuration", "runs", "simulated ms", "LAR %", "imbal. %"
    );
    for c in configs {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.config == c).collect();
        let ok: Vec<_> = mine.iter().filter_map(|r| r.metrics.as_ref()).collect();
        let runs = format!("{}/{}", ok.len(), mine.len());
        if ok.is_empty() {
            let _ = writeln!(s, "{c:<w$}  {runs:>6}  {:>18}", "failed");
            continue;
        }
        let times: Vec<f64> = ok.iter().map(|m| m.sim_time_ms).collect();
        let (t, sd) = mean_sd(&times).expect("a successful run");
        let time = if ok.len() > 1 {
            format!("{t:.3} ± {sd:.3}")
        } else {
            format!("{t:.3}")
        };
        let avg = |f: &dyn Fn(&numalab_study::table::RunMetrics) -> Option<f64>| {
            let v: Vec<f64> = ok.iter().filter_map(|m| f(m)).collect();
            if v.is_empty() {
                "-".to_string()
            } else {
                format!("{:.1}", v.iter().sum::<f64>() / v.len() as f64)
            }
        };
        let _ = writeln!(
            s,
            "{c:<w$}  {runs:>6}  {time:>18}  {:>7}  {:>9}",
            avg(&|m| m.lar_percent),
            avg(&|m| m.imbalance_percent)
        );
    }
    s
}

/// The configurations in the order their rows come.
fn config_order(rows: &[Row]) -> Vec<&str> {
    let mut configs: Vec<&str> = Vec::new();
    for r in rows {
        if !configs.contains(&r.config.as_str()) {
            configs.push(&r.config);
        }
    }
    configs
}

/// One line per configuration of a real-run study: wall time as hyperfine reports it (mean ±
/// standard deviation, median, range), mean user and system time, and an outlier warning.
fn real_summary(rows: &[Row]) -> String {
    let configs = config_order(rows);
    let w = configs.iter().map(|c| c.len()).max().unwrap_or(6).max(13);
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<w$}  {:>6}  {:>20}  {:>10}  {:>21}  {:>9}  {:>9}",
        "configuration", "runs", "wall ms", "median", "min … max", "user ms", "sys ms"
    );
    let mut warnings = Vec::new();
    for c in configs {
        let mine: Vec<&Row> = rows.iter().filter(|r| r.config == c).collect();
        let ok: Vec<_> = mine.iter().filter_map(|r| r.real.as_ref()).collect();
        let runs = format!("{}/{}", ok.len(), mine.len());
        let wall: Vec<f64> = ok.iter().map(|m| m.wall_ms).collect();
        let Some(st) = numalab_study::real::stats(&wall) else {
            let _ = writeln!(s, "{c:<w$}  {runs:>6}  {:>20}", "failed");
            continue;
        };
        let mean = |f: fn(&numalab_study::table::RealMetrics) -> f64| {
            ok.iter().map(|m| f(m)).sum::<f64>() / ok.len() as f64
        };
        let _ = writeln!(
            s,
            "{c:<w$}  {runs:>6}  {:>20}  {:>10.1}  {:>21}  {:>9.1}  {:>9.1}",
            format!("{:.1} ± {:.1}", st.mean, st.sd),
            st.median,
            format!("{:.1} … {:.1}", st.min, st.max),
            mean(|m| m.user_ms),
            mean(|m| m.sys_ms)
        );
        if st.outliers > 0 {
            warnings.push(format!(
                "warning: {c}: {} of {} runs are statistical outliers (more than ten MAD-estimated standard deviations from the median, as hyperfine flags them): something else ran, or caches and page placement differ between runs; more warm-ups or a quieter machine help",
                st.outliers, st.n
            ));
        }
    }
    for wline in warnings {
        let _ = writeln!(s, "{wline}");
    }
    s
}

fn run_study(a: StudyRunArgs) -> Result<()> {
    let study = StudyFile::load(&a.file)?;
    if a.backend == Backend::Slurm {
        return run_on_slurm(&study, &a);
    }
    if a.shards.is_some() || !a.sbatch_args.is_empty() || a.no_wait {
        bail!("--shards, --sbatch-arg and --no-wait are for --backend slurm");
    }
    let mut opts = RunOptions::default();
    if let Some(j) = a.jobs {
        opts.jobs = j;
    }
    opts.numalab = Some(std::env::current_exe().context("cannot find numalab's own binary")?);
    let bar = crate::output::count_bar("study", "runs", a.quiet);
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let outcome = numalab_study::run(&study, &a.out, &opts, &progress)?;
    bar.finish_and_clear();
    report_outcome(&study, &outcome, &a.out, Came::RanHere)
}

/// How a study's results came to be: its runs done by this command (some perhaps by an
/// earlier one), or gathered from the records that Slurm's tasks wrote.
#[derive(Clone, Copy, PartialEq)]
enum Came {
    RanHere,
    Collected,
}

/// The summary table, where the results are, and the failures (exit status 2 with any).
fn report_outcome(
    study: &StudyFile,
    outcome: &numalab_study::Outcome,
    out: &std::path::Path,
    came: Came,
) -> Result<()> {
    let table = match study.kind {
        StudyKind::Sim => summary(&outcome.rows),
        StudyKind::Real => real_summary(&outcome.rows),
    };
    print!("{table}");
    if came == Came::Collected {
        println!(
            "\n{} runs: {} with a successful record; results in {} and {}",
            outcome.rows.len(),
            outcome.skipped,
            outcome.results_parquet.display(),
            outcome.results_csv.display()
        );
    } else {
        let verb = match study.kind {
            StudyKind::Sim => "simulated",
            StudyKind::Real => "run",
        };
        println!(
            "\n{} runs: {} {verb} now, {} already done; results in {} and {}",
            outcome.rows.len(),
            outcome.ran,
            outcome.skipped,
            outcome.results_parquet.display(),
            outcome.results_csv.display()
        );
    }
    let failed = outcome.failed();
    if !failed.is_empty() {
        for r in &failed {
            eprintln!(
                "failed: {} (repeat {}): {}",
                r.config,
                r.repeat,
                r.error.as_deref().unwrap_or("")
            );
        }
        bail!(
            "{} of {} runs failed (their records are in {}; a rerun tries them again)",
            failed.len(),
            outcome.rows.len(),
            out.join("runs").display()
        );
    }
    Ok(())
}

/// `study run --backend slurm`: the study file into DIR, the runs to do as a job array of
/// `numalab study shard` tasks, then (unless --no-wait) the tables from their records.
fn run_on_slurm(study: &StudyFile, a: &StudyRunArgs) -> Result<()> {
    if study.kind == StudyKind::Real {
        bail!("a real-run study runs on this machine only (it sets this machine's kernel settings): use the local backend");
    }
    if a.out.exists() && !a.out.is_dir() {
        bail!(
            "cannot write the study to {}: it is a file, not a folder",
            a.out.display()
        );
    }
    std::fs::create_dir_all(&a.out)
        .with_context(|| format!("cannot create the study folder {}", a.out.display()))?;
    // the tasks read the study from the folder: a rerun with a changed file changes its keys
    numalab_core::atomic_file::write_atomic(&a.out.join("study.toml"), study.source.as_bytes())?;
    let pending = numalab_study::pending(study, &a.out)?;
    if pending == 0 {
        println!("every run has a successful record: nothing to submit");
        let outcome = numalab_study::collect(study, &a.out)?;
        return report_outcome(study, &outcome, &a.out, Came::Collected);
    }
    let opts = numalab_study::slurm::SlurmOptions {
        shards: a.shards,
        sbatch_args: a.sbatch_args.clone(),
        wait: !a.no_wait,
    };
    let exe = std::env::current_exe().context("cannot find numalab's own binary")?;
    if !a.quiet {
        eprintln!("submitting {pending} runs to Slurm...");
    }
    let sub = numalab_study::slurm::submit(&exe, &a.out, pending, &opts)?;
    let plural = |n: usize| if n == 1 { "" } else { "s" };
    println!(
        "Slurm job {}: {} array task{} for {pending} run{}; task logs in {}",
        sub.job_id,
        sub.shards,
        plural(sub.shards),
        plural(pending),
        sub.log_dir.display()
    );
    if a.no_wait {
        println!(
            "when it has ended: numalab study collect {} (a rerun of this command resubmits what failed)",
            a.out.display()
        );
        return Ok(());
    }
    if sub.all_succeeded == Some(false) {
        eprintln!(
            "some array tasks failed: see {}/{}_*.out",
            sub.log_dir.display(),
            sub.job_id
        );
    }
    let outcome = numalab_study::collect(study, &a.out)?;
    report_outcome(study, &outcome, &a.out, Came::Collected)
}

/// `study shard`: one array task's runs, then its Parquet part.
fn run_shard(a: StudyShardArgs) -> Result<()> {
    let study = StudyFile::load(&a.dir.join("study.toml"))
        .with_context(|| format!("{} is not a study folder", a.dir.display()))?;
    let shard = numalab_study::Shard::new(a.index, a.of)?;
    let mut opts = RunOptions::default();
    // in a Slurm task: the CPUs it was given (--cpus-per-task), where the cluster does not
    // confine tasks to them (task/none), so that tasks sharing a node do not oversubscribe it
    let slurm_cpus = std::env::var("SLURM_CPUS_PER_TASK")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .filter(|&n| n > 0);
    if let Some(j) = a.jobs.or(slurm_cpus) {
        opts.jobs = j;
    }
    opts.numalab = Some(std::env::current_exe().context("cannot find numalab's own binary")?);
    let o = numalab_study::run_shard(&study, &a.dir, shard, &opts, &|_, _| {})?;
    let failed = o.rows.iter().filter(|r| r.status != "ok").count();
    println!(
        "shard {} of {}: {} runs, {} run now, {failed} failed; part {}",
        a.index,
        a.of,
        o.rows.len(),
        o.ran,
        o.part.display()
    );
    for r in o.rows.iter().filter(|r| r.status != "ok") {
        eprintln!(
            "failed: {} (repeat {}): {}",
            r.config,
            r.repeat,
            r.error.as_deref().unwrap_or("")
        );
    }
    if failed > 0 {
        bail!("{failed} runs of shard {} failed", a.index);
    }
    Ok(())
}
