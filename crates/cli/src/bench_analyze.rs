//! `numalab bench analyze`: how fast `numalab analyze` reads and analyses samples, against
//! the real `perf script` on the same perf.data. A seeded synthetic stream
//! (`numalab_analyze::bench::Synthetic`: 16 threads on 4 nodes, 400 MiB, false-shared THPs)
//! is written as Arrow and as perf.data, then each reader runs as its own process with its
//! output thrown away; wall time and the child's user CPU are measured.

use anyhow::{bail, Context, Result};
use clap::Args;
use numalab_analyze::bench::Synthetic;
use numalab_analyze::perf_write::PerfWriter;
use numalab_analyze::{SampleSource, SampleWriter};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

#[derive(Args, Clone, Debug)]
pub struct BenchAnalyzeArgs {
    /// Samples generated.
    #[arg(long, default_value_t = 10_000_000, value_parser = crate::numbers::count::<u64>("samples", 1..), allow_negative_numbers = true)]
    pub samples: u64,
    /// Keep the generated files in DIR (default: a temporary directory, removed after).
    #[arg(long, value_name = "DIR")]
    pub keep: Option<PathBuf>,
    /// Generator seed.
    #[arg(long, default_value_t = 1, value_parser = crate::numbers::whole::<u64>("a whole-number seed", ..), allow_negative_numbers = true)]
    pub seed: u64,
    /// Skip `perf script` with its default fields (the slowest run).
    #[arg(long)]
    pub no_perf_default: bool,
    /// Run each command this many times and keep its fastest run (by wall time).
    #[arg(long, default_value_t = 1, value_parser = crate::numbers::count::<u32>("runs per command", 1..), allow_negative_numbers = true)]
    pub repeat: u32,
    /// Also write the results as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress bars.
    #[arg(long, short = 'q')]
    pub quiet: bool,
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct Timing {
    pub what: String,
    pub command: String,
    pub wall_s: f64,
    pub user_s: f64,
    pub samples_per_s: f64,
}

fn children_user_s() -> f64 {
    // SAFETY: getrusage fills the struct it is given.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut ru) };
    ru.ru_utime.tv_sec as f64 + ru.ru_utime.tv_usec as f64 * 1e-6
}

/// Runs `cmd` with stdout to /dev/null; wall and user CPU of the child (children are waited
/// one at a time, so the RUSAGE_CHILDREN difference is this child's).
fn time(what: &str, cmd: &mut Command, samples: u64) -> Result<Timing> {
    let shown = format!("{cmd:?}").replace('"', "");
    let user0 = children_user_s();
    let t = Instant::now();
    let out = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .with_context(|| format!("cannot run {shown}"))?;
    let wall_s = t.elapsed().as_secs_f64();
    if !out.status.success() {
        bail!(
            "{shown} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let user_s = children_user_s() - user0;
    Ok(Timing {
        what: what.into(),
        command: shown,
        wall_s,
        user_s,
        samples_per_s: samples as f64 / wall_s,
    })
}

/// Generates the files: (arrow, perf.data), `written(samples)` called as they grow. Both are
/// written under temporary names and renamed into place only when both are complete, so that
/// a failure (a full disk, Ctrl-C) leaves no half file in a `--keep` folder.
pub fn generate(
    dir: &Path,
    samples: u64,
    seed: u64,
    written: &dyn Fn(u64),
) -> Result<(PathBuf, PathBuf)> {
    let arrow = dir.join("bench.arrows");
    let perf = dir.join("bench.data");
    crate::output::with_temp(&arrow, |arrow_tmp| {
        crate::output::with_temp(&perf, |perf_tmp| {
            let mut src = Synthetic::new(samples, seed);
            let mut aw = SampleWriter::create(arrow_tmp, src.meta(), Default::default())?;
            let mut pw = PerfWriter::create(perf_tmp, src.meta())?;
            let mut done = 0;
            while let Some(b) = src.next_batch()? {
                for r in &b.records {
                    aw.push(r)?;
                    pw.push(r)?;
                }
                done += b.records.len() as u64;
                written(done);
            }
            aw.finish()?;
            pw.finish()?;
            // On disk before timing: otherwise the kernel writes the 1.3 GB back while the
            // first runs are measured.
            for (p, shown) in [(arrow_tmp, &arrow), (perf_tmp, &perf)] {
                std::fs::File::open(p)
                    .and_then(|f| f.sync_all())
                    .with_context(|| format!("syncing {}", shown.display()))?;
            }
            Ok(())
        })
    })?;
    Ok((arrow, perf))
}

pub fn run(a: BenchAnalyzeArgs) -> Result<()> {
    let (dir, temporary) = match &a.keep {
        Some(d) => {
            // a kept directory is the user's: it must exist (a typo should not create one)
            if !d.is_dir() {
                bail!(
                    "--keep {}: no such directory (create it first, or leave --keep out for a temporary one)",
                    d.display()
                );
            }
            (d.clone(), false)
        }
        None => (
            std::env::temp_dir().join(format!("numalab-bench-analyze-{}", std::process::id())),
            true,
        ),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let result = measure(&a, &dir);
    if temporary {
        std::fs::remove_dir_all(&dir).ok();
    }
    result
}

fn measure(a: &BenchAnalyzeArgs, dir: &Path) -> Result<()> {
    let n = a.samples;
    let t = Instant::now();
    let bar = crate::output::count_bar("bench analyze: generating", "samples", a.quiet);
    bar.set_length(n);
    let (arrow, perf) = generate(dir, n, a.seed, &|done| bar.set_position(done))?;
    bar.finish_and_clear();
    let size = |p: &Path| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0) as f64 / 1e6;
    eprintln!(
        "generated {n} samples in {:.1} s: {} ({:.0} MB), {} ({:.0} MB)",
        t.elapsed().as_secs_f64(),
        arrow.display(),
        size(&arrow),
        perf.display(),
        size(&perf)
    );
    let exe = std::env::current_exe().context("cannot find the numalab executable")?;
    let mut runs = Vec::new();
    let repeat = a.repeat;
    // numalab analyze on Arrow and on perf.data, perf script -F, and perf script's default
    let commands = if a.no_perf_default { 3 } else { 4 };
    let bar = crate::output::count_bar("bench analyze", "runs", a.quiet);
    bar.set_length(commands * u64::from(repeat));
    let mut go = |what: &str, cmd: &mut Command| -> Result<()> {
        bar.set_message(what.to_string());
        let mut r = time(what, cmd, n)?;
        bar.inc(1);
        for _ in 1..repeat {
            let again = time(what, cmd, n)?;
            bar.inc(1);
            if again.wall_s < r.wall_s {
                r = again;
            }
        }
        bar.suspend(|| {
            eprintln!(
                "{:<34} {:>8.2} s wall {:>8.2} s user",
                r.what, r.wall_s, r.user_s
            )
        });
        runs.push(r);
        Ok(())
    };
    go(
        "numalab analyze (Arrow)",
        Command::new(&exe).arg("analyze").arg(&arrow),
    )?;
    go(
        "numalab analyze (perf.data)",
        Command::new(&exe).arg("analyze").arg(&perf),
    )?;
    // The fields analyze uses: pid/tid, CPU, time, address, data source, page size, phys_addr.
    let fields = "pid,tid,cpu,time,addr,data_src,phys_addr,data_page_size";
    let perf_missing = |e: anyhow::Error| {
        e.context("the real perf tool is needed for the comparison (apt-get install linux-perf)")
    };
    go(
        "perf script -F (same fields)",
        Command::new("perf")
            .args(["script", "--force", "-F", fields, "-i"])
            .arg(&perf),
    )
    .map_err(perf_missing)?;
    if !a.no_perf_default {
        go(
            "perf script (default fields)",
            Command::new("perf")
                .args(["script", "--force", "-i"])
                .arg(&perf),
        )
        .map_err(perf_missing)?;
    }
    bar.finish_and_clear();
    println!(
        "{n} samples (seed {}), one process each, fastest of {repeat}:",
        a.seed
    );
    println!(
        "{:<34} {:>9} {:>9} {:>14} {:>12}",
        "run", "wall s", "user s", "samples/s", "vs analyze"
    );
    let best = runs[1].wall_s;
    for r in &runs {
        println!(
            "{:<34} {:>9.2} {:>9.2} {:>14.0} {:>11.1}x",
            r.what,
            r.wall_s,
            r.user_s,
            r.samples_per_s,
            r.wall_s / best
        );
    }
    println!(
        "perf script -F / numalab analyze on the same perf.data: {:.1}x wall, {:.1}x user CPU (target 20x); on Arrow: {:.1}x wall, {:.1}x user",
        runs[2].wall_s / runs[1].wall_s,
        runs[2].user_s / runs[1].user_s,
        runs[2].wall_s / runs[0].wall_s,
        runs[2].user_s / runs[0].user_s
    );
    if let Some(p) = &a.json {
        crate::output::write_atomic(p, serde_json::to_string_pretty(&runs)?.as_bytes())?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
