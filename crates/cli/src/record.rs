//! `numalab record -- CMD ARGS...` / `numalab record --pid PID [--duration S]`: argument
//! mapping, Ctrl-C, the progress line and the summary over numalab-record (docs/record.md).

use anyhow::{bail, Result};
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use numalab_record::{record, Event, EventChoice, RecordOptions, RecordSummary, Target};
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

#[derive(Args, Clone, Debug)]
pub struct RecordArgs {
    /// Record this running process (all its threads) instead of starting a command.
    #[arg(long, conflicts_with = "command", value_parser = crate::numbers::pid(), allow_negative_numbers = true)]
    pub pid: Option<i32>,
    /// Stop after this many seconds (a started command is then sent SIGTERM).
    #[arg(long, value_name = "S")]
    pub duration: Option<f64>,
    /// Sampling mechanism: auto (PEBS, else IBS, else page faults), pebs, ibs or page-faults.
    #[arg(long, default_value = "auto")]
    pub event: String,
    /// Sample period (default: PEBS 2000 events, IBS 65536 ops, page faults 1 = every fault).
    #[arg(long, value_parser = crate::numbers::count::<u64>("events per sample", 1..), allow_negative_numbers = true)]
    pub period: Option<u64>,
    /// PEBS load-latency threshold in cycles, 3 to 65535 (the hardware's smallest, and its
    /// 16-bit field).
    #[arg(long, default_value_t = 30, value_parser = crate::numbers::count::<u32>("cycles", 3..=65535), allow_negative_numbers = true)]
    pub ldlat: u32,
    /// Sample file (Arrow IPC stream); the placement stream goes beside it as
    /// NAME.placement.arrows.
    #[arg(long, short = 'o', default_value = "numalab.arrows")]
    pub output: PathBuf,
    /// Placement snapshot period, milliseconds.
    #[arg(long, default_value_t = 100, value_parser = crate::numbers::count::<u64>("milliseconds", 1..), allow_negative_numbers = true)]
    pub snapshot_ms: u64,
    /// Also write the summary as JSON.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// No progress line.
    #[arg(long, short = 'q')]
    pub quiet: bool,
    /// The command and its arguments, after `--`.
    #[arg(last = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

static STOP: OnceLock<Arc<AtomicBool>> = OnceLock::new();

extern "C" fn on_sigint(_: libc::c_int) {
    if let Some(s) = STOP.get() {
        s.store(true, Ordering::Relaxed);
    }
}

/// Ctrl-C ends a `--pid` recording cleanly. With `-- CMD` the command gets the signal too (same
/// process group) and the recording ends when it exits; a handler rather than SIG_IGN, because
/// an ignored signal would stay ignored in the command after exec.
fn install_sigint(flag: Arc<AtomicBool>) {
    let _ = STOP.set(flag);
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = on_sigint as extern "C" fn(libc::c_int) as usize;
        sa.sa_flags = libc::SA_RESTART;
        libc::sigemptyset(&mut sa.sa_mask);
        libc::sigaction(libc::SIGINT, &sa, std::ptr::null_mut());
    }
}

/// Runs the recording; returns the command's exit status (0 for `--pid`).
pub fn run(a: RecordArgs) -> Result<i32> {
    crate::output::check_writable(Some(&a.output))?;
    crate::output::check_writable(a.json.as_deref())?;
    let target = match (a.pid, a.command.is_empty()) {
        (Some(p), true) => Target::Pid(p),
        (None, false) => Target::Command(a.command.clone()),
        (None, true) => bail!("nothing to record: give a command after `--` (numalab record -- CMD ARGS...) or --pid PID"),
        (Some(_), false) => bail!("--pid and a command exclude each other"),
    };
    let event: EventChoice = a.event.parse()?;
    let duration = match a.duration {
        Some(s) if s > 0.0 => match Duration::try_from_secs_f64(s) {
            Ok(d) => Some(d),
            Err(_) => bail!(
                "--duration {}: too long a time (expected seconds > 0)",
                numalab_sim::config::shown(s)
            ),
        },
        Some(s) => bail!("--duration {s}: expected seconds > 0"),
        None => None,
    };
    let stop = Arc::new(AtomicBool::new(false));
    install_sigint(stop.clone());
    let mut opts = RecordOptions::new(target, &a.output);
    opts.event = event;
    opts.period = a.period;
    opts.ldlat = a.ldlat;
    opts.duration = duration;
    opts.snapshot_interval = Duration::from_millis(a.snapshot_ms);
    opts.stop = Some(stop);

    // With --duration the end is known: a bar over it. Without, the recording ends when the
    // command exits or on Ctrl-C, which nothing can foresee: a spinner with the time spent.
    let bar = match duration {
        Some(d) => crate::output::duration_bar("recording", d, a.quiet),
        None if a.quiet => ProgressBar::hidden(),
        None => {
            let b = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr());
            b.set_style(
                ProgressStyle::with_template("{spinner} recording {elapsed} {msg}")
                    .expect("valid template"),
            );
            b
        }
    };
    let s = record(&opts, &mut |e| match e {
        Event::Message(m) => bar.suspend(|| eprintln!("{m}")),
        Event::Progress(p) => {
            if let Some(d) = duration {
                bar.set_position(crate::output::duration_position(p.elapsed, d));
            }
            bar.set_message(format!(
                "samples {}  lost {}  pages {}  snapshots {}",
                p.samples, p.lost, p.pages, p.snapshots
            ));
            bar.tick();
        }
    });
    bar.finish_and_clear();
    let s = s?;
    eprint!("{}", summary_text(&s));
    if let Some(p) = &a.json {
        crate::output::write_atomic(p, serde_json::to_string_pretty(&s)?.as_bytes())?;
        eprintln!("wrote {}", p.display());
    }
    Ok(s.exit_code.unwrap_or(0))
}

/// The end-of-run summary (on stderr: stdout belongs to the command).
pub fn summary_text(s: &RecordSummary) -> String {
    let mut t = String::new();
    let pct = |a: u64, b: u64| {
        if b == 0 {
            0.0
        } else {
            100.0 * a as f64 / b as f64
        }
    };
    t.push_str(&format!(
        "recorded {} samples ({} with page node, {:.1} %) of {} thread{} in {} process{} over {:.2} s\n",
        s.samples,
        s.samples_with_page_node,
        pct(s.samples_with_page_node, s.samples),
        s.threads,
        if s.threads == 1 { "" } else { "s" },
        s.processes,
        if s.processes == 1 { "" } else { "es" },
        s.duration_s
    ));
    t.push_str(&format!(
        "  mechanism  {} ({})\n",
        s.mechanism.name(),
        s.events.join(", ")
    ));
    t.push_str(&format!(
        "  lost       {} samples{}{}\n",
        s.lost,
        if s.throttled > 0 {
            format!(", throttled {} times", s.throttled)
        } else {
            String::new()
        },
        if s.skipped > 0 {
            format!(", {} without a user data address", s.skipped)
        } else {
            String::new()
        }
    ));
    t.push_str(&format!(
        "  pages      {} distinct 4 KiB pages, {} placement queries ({} answered with a node)\n",
        s.pages, s.queries.pages_queried, s.queries.on_node
    ));
    if !s.numa_maps_bytes.is_empty() {
        let per: Vec<String> = s
            .numa_maps_bytes
            .iter()
            .map(|(n, b)| format!("N{n}={:.1}M", *b as f64 / (1 << 20) as f64))
            .collect();
        t.push_str(&format!("  numa_maps  {} (last read)\n", per.join(" ")));
    }
    t.push_str(&format!("  uncore     {}\n", s.uncore.status));
    for c in &s.uncore.controllers {
        t.push_str(&format!(
            "    {} cpu {} node {}: read {:.1} MiB, write {:.1} MiB\n",
            c.pmu,
            c.cpu,
            c.node.map_or("?".into(), |n| n.to_string()),
            c.read_bytes as f64 / (1 << 20) as f64,
            c.write_bytes as f64 / (1 << 20) as f64
        ));
    }
    if let Some(c) = s.exit_code {
        t.push_str(&format!("  command    exited with status {c}\n"));
    }
    t.push_str(&format!(
        "  output     {} (placement: {}); read it with: numalab analyze {}\n",
        s.output.display(),
        s.placement_output.display(),
        s.output.display()
    ));
    t
}
