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
    #[arg(short = 'j', long)]
    pub jobs: Option<usize>,
    /// No progress bar.
    #[arg(short, long)]
    pub quiet: bool,
}

pub fn run(cmd: StudyCmd) -> Result<()> {
    match cmd {
        StudyCmd::Run(a) => run_study(a),
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
    let (table, verb) = match study.kind {
        StudyKind::Sim => (summary(&outcome.rows), "simulated"),
        StudyKind::Real => (real_summary(&outcome.rows), "run"),
    };
    print!("{table}");
    println!(
        "\n{} runs: {} {verb} now, {} already done; results in {} and {}",
        outcome.rows.len(),
        outcome.ran,
        outcome.skipped,
        outcome.results_parquet.display(),
        outcome.results_csv.display()
    );
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
            a.out.join("runs").display()
        );
    }
    Ok(())
}
