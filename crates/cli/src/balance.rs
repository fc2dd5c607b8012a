//! `numalab balance`: a policy of numalab-policies run on a live process, samples replayed
//! from a file (numalab-balance; docs/balance.md).

use crate::output::check_writable;
use anyhow::{bail, Result};
use clap::Args;
use numalab_balance::{BalanceOptions, Balancer, OutcomeKind};
use serde::Serialize;
use std::path::PathBuf;

#[derive(Args, Clone, Debug)]
pub struct BalanceArgs {
    /// The process whose pages the policy places.
    #[arg(long, value_parser = crate::numbers::pid(), allow_negative_numbers = true)]
    pub pid: i32,
    /// The policy and its parameters, as `numalab policy list` shows them (e.g. carrefour,
    /// carrefour-lp:split_share_percent=8).
    #[arg(long)]
    pub policy: String,
    /// Samples of the process: numalab's Arrow sample file or perf.data (perf mem record).
    #[arg(long, value_name = "FILE")]
    pub samples: PathBuf,
    /// Policy period in ms (default: the policy's own): each tick replays this much of the
    /// file's time.
    #[arg(long)]
    pub period_ms: Option<f64>,
    /// Stop after N ticks (default: when the samples are exhausted or the process exits).
    #[arg(long, value_parser = crate::numbers::count::<u64>("ticks", 1..), allow_negative_numbers = true)]
    pub ticks: Option<u64>,
    /// Print the actions each tick would take; change nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not wait a period of real time between ticks: replay as fast as the ticks run.
    #[arg(long)]
    pub fast: bool,
    /// Write the per-tick report as JSON.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[derive(Serialize)]
struct JsonReport<'a> {
    pid: i32,
    policy: &'a str,
    samples: String,
    period_ns: u64,
    dry_run: bool,
    warnings: &'a [String],
    /// Which thread counters were measured (perf), estimated from the samples, or zero.
    counters: numalab_balance::CounterReport,
    stop: numalab_balance::StopReason,
    pages_moved: u64,
    ticks: &'a [numalab_balance::TickReport],
}

pub fn run(a: BalanceArgs) -> Result<()> {
    check_writable(a.json.as_deref())?;
    let period_ns = match a.period_ms {
        Some(ms) if !(ms > 0.0 && ms.is_finite()) => {
            bail!("--period-ms {ms}: must be a positive number of milliseconds")
        }
        Some(ms) => Some((ms * 1e6).max(1.0) as u64),
        None => None,
    };
    let mut b = Balancer::new(BalanceOptions {
        pid: a.pid,
        policy: a.policy.clone(),
        samples: a.samples.clone(),
        period_ns,
        ticks: a.ticks,
        dry_run: a.dry_run,
        pace: !a.fast,
    })?;
    for w in &b.warnings {
        eprintln!("warning: {w}");
    }
    if let Some(n) = &b.counters_note {
        eprintln!("note: {n}");
    }
    println!(
        "balancing pid {} with {} every {} ms{}, samples from {}",
        a.pid,
        b.policy_name(),
        b.period_ns() as f64 / 1e6,
        if a.dry_run { " (dry run)" } else { "" },
        a.samples.display()
    );
    let dry = a.dry_run;
    let (stop, ticks) = b.run(|t| {
        println!("{}", t.line());
        for o in &t.actions {
            // a dry run lists every action; a real run the ones not simply applied (skipped,
            // failed, or applied otherwise than asked: a lazy migration done eagerly)
            if dry || o.result != OutcomeKind::Applied || o.reason.is_some() {
                let why = o
                    .reason
                    .as_deref()
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default();
                println!("    {:?} {}{why}", o.result, o.what);
            }
        }
    })?;
    let moved: u64 = ticks.iter().map(|t| t.pages_moved).sum();
    println!(
        "stopped after {} tick{}: {stop}; {moved} pages moved",
        ticks.len(),
        if ticks.len() == 1 { "" } else { "s" }
    );
    if let Some(p) = &a.json {
        let r = JsonReport {
            pid: a.pid,
            policy: b.policy_name(),
            samples: a.samples.display().to_string(),
            period_ns: b.period_ns(),
            dry_run: a.dry_run,
            warnings: &b.warnings,
            counters: b.view().counter_report(),
            stop,
            pages_moved: moved,
            ticks: &ticks,
        };
        crate::output::write_atomic(p, serde_json::to_string_pretty(&r)?.as_bytes())?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}
