//! `numalab validate`: run the validation suite (crates/validate) and print its scorecard.

use crate::output;
use anyhow::{bail, Context, Result};
use clap::Args;
use numalab_validate::{case, score::Status};
use std::path::PathBuf;

#[derive(Args, Clone)]
pub struct ValidateArgs {
    /// Only the cases whose id matches: a glob (`G14.*`, `*lbm*`) or a substring (`SSCA`).
    #[arg(long, value_name = "PATTERN")]
    case: Option<String>,
    /// Only the quick subset (CI's).
    #[arg(long)]
    quick: bool,
    /// List the cases (id, source, what, shrink) without running them.
    #[arg(long)]
    list: bool,
    /// Case files or folders of .toml case files instead of the built-in cases.
    #[arg(long, value_name = "PATH")]
    cases: Vec<PathBuf>,
    /// Write the scorecard as JSON (`-`: to standard output, the table then going to
    /// standard error).
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Fail (non-zero exit) when a case listed in FILE (one id per line, `#` comments) ran and did
    /// not pass: a regression against the last recorded scorecard.
    #[arg(long, value_name = "FILE")]
    expect_passing: Option<PathBuf>,
    /// Write the ids of the passing cases to FILE (for --expect-passing).
    #[arg(long, value_name = "FILE")]
    write_passing: Option<PathBuf>,
    /// Epoch length in simulated microseconds, 0.1 to 1000.
    #[arg(long, default_value_t = 20.0, allow_negative_numbers = true)]
    epoch_us: f64,
    /// Host threads (default: all cores).
    #[arg(long, value_parser = crate::thread_count, allow_negative_numbers = true)]
    jobs: Option<usize>,
    /// Runs per configuration: `auto` (the default) runs seeds 1 and 2, then, while a case
    /// has an edge of its verdict (a tolerance's or the direction's) inside the 95 % Student-t
    /// interval of its value, seeds up to 6 for every configuration it compares and 6 more at
    /// a time, up to --max-seeds; N runs seeds 1..=N; 1 is the one deterministic run. Repeated
    /// runs skew each thread's start by up to --start-skew-us; values are averaged (times
    /// first), their standard error shown after ± and their range in brackets.
    #[arg(long, default_value = "auto", value_parser = parse_repeats, value_name = "N|auto", allow_negative_numbers = true)]
    repeats: numalab_validate::Repeats,
    /// With `--repeats auto`: the most seeds a configuration gets (default 24;
    /// 6 with --quick, which CI runs in its ten minutes).
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    max_seeds: Option<i64>,
    /// The start skew of repeated runs, simulated microseconds.
    #[arg(long, default_value_t = numalab_validate::DEFAULT_START_SKEW_NS / 1000.0, allow_negative_numbers = true)]
    start_skew_us: f64,
    /// No progress bar.
    #[arg(long, short = 'q')]
    quiet: bool,
}

fn parse_repeats(s: &str) -> std::result::Result<numalab_validate::Repeats, String> {
    if s == "auto" {
        return Ok(numalab_validate::Repeats::Auto);
    }
    match s.parse::<usize>() {
        Ok(n) if n >= 1 => Ok(numalab_validate::Repeats::Fixed(n)),
        _ => Err(format!(
            "expected `auto` or a number of runs of at least 1 (got '{s}')"
        )),
    }
}

fn read_ids(p: &std::path::Path) -> Result<Vec<String>> {
    let text = std::fs::read_to_string(p)
        .with_context(|| format!("--expect-passing: cannot read {}", p.display()))?;
    Ok(text
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect())
}

pub fn run(a: ValidateArgs) -> Result<()> {
    if let Some(why) = numalab_sim::config::epoch_us_problem(a.epoch_us) {
        bail!("--epoch-us {why}");
    }
    if !(a.start_skew_us.is_finite()
        && a.start_skew_us > 0.0
        && a.start_skew_us <= numalab_sim::config::START_SKEW_US_MAX)
    {
        bail!(
            "--start-skew-us {}: expected a positive number of microseconds, at most {}",
            numalab_sim::config::shown(a.start_skew_us),
            numalab_sim::config::shown(numalab_sim::config::START_SKEW_US_MAX)
        );
    }
    let all = if a.cases.is_empty() {
        case::builtin()?
    } else {
        case::from_paths(&a.cases)?
    };
    // every loaded id, before --case and --quick narrow the run: a passing list names them all
    let known_ids: std::collections::HashSet<String> =
        all.iter().map(|c| c.case.id.clone()).collect();
    let cases = numalab_validate::select(all, a.case.as_deref(), a.quick)?;
    if a.list {
        for c in &cases {
            println!(
                "{}  [{}{}] {}",
                c.case.id,
                c.source.id,
                if c.case.quick { ", quick" } else { "" },
                c.case.what
            );
            if let Some(m) = &c.case.not_expressible {
                println!("    not expressible: {m}");
            }
            if let Some(s) = &c.case.shrink {
                println!("    shrink: {s}");
            }
        }
        return Ok(());
    }
    output::check_json_out(a.json.as_deref())?;
    output::check_writable(a.write_passing.as_deref())?;
    let expected = match &a.expect_passing {
        Some(p) => {
            let ids = read_ids(p)?;
            for id in &ids {
                if !known_ids.contains(id) {
                    bail!("--expect-passing {}: no case has the id {id}", p.display());
                }
            }
            ids
        }
        None => Vec::new(),
    };

    let bar = output::count_bar("validate", "simulations", a.quiet);
    let progress = |done: usize, total: usize| {
        bar.set_length(total as u64);
        bar.set_position(done as u64);
    };
    let max_seeds = match a.max_seeds {
        None if a.quick => numalab_validate::AUTO_MAX_SEEDS_QUICK,
        None => numalab_validate::AUTO_MAX_SEEDS,
        Some(n) if (2..=1000).contains(&n) => n as usize,
        Some(n) => bail!("--max-seeds {n}: expected 2 to 1000 seeds"),
    };
    let opts = numalab_validate::Options {
        epoch_ns: a.epoch_us * 1000.0,
        jobs: a.jobs.unwrap_or(0),
        repeats: a.repeats,
        max_seeds,
        start_skew_ns: a.start_skew_us * 1000.0,
    };
    let card = numalab_validate::run(&cases, &opts, &progress)?;
    bar.finish_and_clear();
    let json_stdout = output::json_to_stdout(a.json.as_deref());
    let mut report = card.table();
    report += &format!(
        "\n{} cases in {:.0} s of host time (epochs of {} µs{})\n",
        card.rows.len(),
        card.host_seconds,
        card.epoch_us,
        match a.repeats {
            numalab_validate::Repeats::Fixed(1) =>
                "; one deterministic run per configuration".to_string(),
            numalab_validate::Repeats::Fixed(n) => format!(
                "; {n} runs per configuration, seeds 1-{n}, starts skewed by up to {} µs",
                a.start_skew_us
            ),
            numalab_validate::Repeats::Auto => {
                let seeds_over = |n: usize| {
                    card.runs
                        .iter()
                        .filter(|r| r.sim_ms_repeats.len() > n)
                        .count()
                };
                let second = numalab_validate::AUTO_SECOND_WAVE_SEEDS.min(max_seeds);
                let beyond = if max_seeds > second {
                    format!(
                        ", {} of them beyond {second} (up to {max_seeds})",
                        seeds_over(second)
                    )
                } else {
                    String::new()
                };
                format!(
                    "; seeds 1-2 per configuration, 1-{second} for the {} configurations of cases whose verdict had an edge inside its {:.0} % t-interval{beyond}; starts skewed by up to {} µs",
                    seeds_over(2),
                    numalab_validate::SETTLED_CONFIDENCE * 100.0,
                    a.start_skew_us
                )
            }
        }
    );
    output::print_report(&report, json_stdout);
    if let Some(p) = &a.json {
        output::write_json_text(p, &serde_json::to_string_pretty(&card)?)?;
    }
    if let Some(p) = &a.write_passing {
        let mut text = String::from("# cases that passed: numalab validate --write-passing\n");
        for id in numalab_validate::passing_ids(&card) {
            text.push_str(&id);
            text.push('\n');
        }
        output::write_atomic(p, text.as_bytes())?;
        eprintln!("wrote {}", p.display());
    }
    let errors: Vec<_> = card
        .rows
        .iter()
        .filter(|r| r.status == Status::Error)
        .collect();
    let regressed = numalab_validate::regressions(&card, &expected);
    if !regressed.is_empty() {
        let ids: Vec<&str> = regressed.iter().map(|r| r.id.as_str()).collect();
        bail!(
            "{} case(s) that passed before no longer pass: {}",
            ids.len(),
            ids.join(", ")
        );
    }
    if !errors.is_empty() {
        let ids: Vec<&str> = errors.iter().map(|r| r.id.as_str()).collect();
        bail!(
            "{} case(s) could not be simulated: {}",
            ids.len(),
            ids.join(", ")
        );
    }
    Ok(())
}
