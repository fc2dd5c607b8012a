//! `numalab sim` and `--compare`: build configurations, run them in parallel, report.

use crate::output;
use crate::SimArgs;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
pub(crate) use numalab_runspec::is_numa_balancing;
use numalab_runspec::{policy_names, resolve, split_configs, Defaults, RunSpec};
use numalab_sim::SimResult;
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// The configurations to run: `--compare`'s, each crossed with `--policy`'s (whose first
/// entry is the baseline `none` unless the list names `none` itself).
fn configurations(args: &SimArgs) -> Result<Vec<String>> {
    let base = match &args.compare {
        Some(c) => split_configs(c),
        None => vec![String::new()],
    };
    let Some(p) = &args.policy else {
        return Ok(base);
    };
    let mut pols = numalab_policies::spec::split_list(p).map_err(|e| anyhow!("--policy: {e}"))?;
    if pols.is_empty() {
        bail!("--policy needs at least one policy: {}", policy_names());
    }
    if !pols.iter().any(|p| p == "none") {
        pols.insert(0, "none".into());
    }
    let mut out = Vec::new();
    for b in &base {
        for p in &pols {
            out.push(if b.is_empty() {
                format!("policy={p}")
            } else {
                format!("{b}+policy={p}")
            });
        }
    }
    Ok(out)
}

pub fn sim(args: SimArgs) -> Result<()> {
    if let Some(why) = numalab_sim::config::epoch_us_problem(args.epoch_us) {
        bail!("--epoch-us {why}");
    }
    if let Some(why) = numalab_sim::config::start_skew_us_problem(args.start_skew_us) {
        bail!("--start-skew-us {why}");
    }
    let configs = configurations(&args)?;
    if configs.is_empty() {
        bail!("--compare needs at least one configuration");
    }
    // Resolve and validate everything before simulating anything.
    let defaults = Defaults {
        machine: args.machine.clone(),
        workload: args.workload.clone(),
        threads: args.threads,
        pin: args.pin.clone(),
        mempolicy: args.mempolicy.clone(),
        thp: args.thp.clone(),
        hugetlb: args.hugetlb.clone(),
    };
    let specs: Vec<RunSpec> = configs
        .iter()
        .map(|c| {
            let r = resolve(&defaults, c);
            if c.is_empty() {
                r
            } else {
                r.with_context(|| format!("configuration '{c}'"))
            }
        })
        .collect::<Result<_>>()?;
    // Carrefour and Carrefour-LP decide from access samples (IBS in the papers): with the
    // sampler off they would run and never act
    if args.sample_period == 0 {
        if let Some(p) = specs
            .iter()
            .flat_map(|s| &s.policies)
            .find(|p| p.starts_with("carrefour"))
        {
            bail!(
                "--sample-period 0 turns the sampler off, but policy {p} decides from access samples: give a period (default 4099)"
            );
        }
    }
    let workloads = specs
        .iter()
        .map(|s| {
            numalab_workloads::by_spec(&s.workload, s.threads)
                .map_err(|e| anyhow!("--workload: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    output::check_json_out(args.json.as_deref())?;
    output::check_writable(args.csv.as_deref())?;
    let sample_paths: Vec<std::path::PathBuf> = match &args.samples_out {
        None => Vec::new(),
        Some(p) if specs.len() == 1 => vec![p.clone()],
        Some(p) => (1..=specs.len()).map(|i| numbered(p, i)).collect(),
    };
    for p in &sample_paths {
        output::check_writable(Some(p))?;
    }

    let multi = MultiProgress::new();
    if args.quiet {
        multi.set_draw_target(ProgressDrawTarget::hidden());
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0))
        .build()?;
    let results: Vec<Result<SimResult>> = pool.install(|| {
        specs
            .par_iter()
            .zip(workloads.par_iter())
            .map(|(spec, wl)| {
                let bar = multi.add(ProgressBar::hidden());
                bar.set_style(ProgressStyle::with_template("{spinner} {prefix}: {msg}").unwrap());
                bar.set_prefix(spec.label.clone());
                let started = Instant::now();
                let quiet = args.quiet;
                let b2 = bar.clone();
                let progress = move |p: numalab_sim::Progress| {
                    // only runs longer than a second get a visible bar
                    if !quiet && b2.is_hidden() && started.elapsed() > Duration::from_secs(1) {
                        b2.set_draw_target(ProgressDrawTarget::stderr());
                        b2.enable_steady_tick(Duration::from_millis(200));
                    }
                    b2.set_message(format!(
                        "simulated {:.2} ms, {:.0} M references, {}/{} threads done",
                        p.sim_time_ns / 1e6,
                        p.memory_references as f64 / 1e6,
                        p.threads_done,
                        p.threads
                    ));
                };
                let mut cfg = spec.sim_config(args.epoch_us * 1000.0, args.sample_period);
                cfg.seed = args.seed;
                cfg.start_skew_ns = args.start_skew_us * 1000.0;
                cfg.progress = Some(Box::new(progress));
                let r = numalab_sim::simulate(&spec.machine, wl.as_ref(), cfg)
                    .with_context(|| format!("simulating '{}'", spec.label));
                bar.finish_and_clear();
                r
            })
            .collect()
    });
    let results: Vec<SimResult> = results.into_iter().collect::<Result<_>>()?;
    let json_stdout = output::json_to_stdout(args.json.as_deref());
    output::print_report(&output::table(&results), json_stdout);
    if let Some(p) = &args.json {
        output::write_json(p, &results)?;
    }
    if let Some(p) = &args.csv {
        output::write_csv(p, &results)?;
        eprintln!("wrote {}", p.display());
    }
    for ((p, r), spec) in sample_paths.iter().zip(&results).zip(&specs) {
        write_samples(p, r, spec, args.sample_period)?;
        let dropped = r.samples_taken.saturating_sub(r.samples.len() as u64);
        if dropped > 0 {
            eprintln!(
                "wrote {} ({} samples; {dropped} more were taken but not kept: the simulator keeps at most {} in memory, so raise --sample-period for a complete file)",
                p.display(),
                r.samples.len(),
                r.samples.len()
            );
        } else {
            eprintln!("wrote {} ({} samples)", p.display(), r.samples.len());
        }
    }
    Ok(())
}

/// `out.arrows` -> `out-2.arrows`.
fn numbered(p: &std::path::Path, i: usize) -> std::path::PathBuf {
    let stem = p
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let name = match p.extension() {
        Some(e) => format!("{stem}-{i}.{}", e.to_string_lossy()),
        None => format!("{stem}-{i}"),
    };
    p.with_file_name(name)
}

fn write_samples(
    p: &std::path::Path,
    r: &SimResult,
    spec: &RunSpec,
    sample_period: u64,
) -> Result<()> {
    let meta = numalab_analyze::record::FileMeta {
        machine: r.machine.clone(),
        workload: r.workload.clone(),
        origin: "sim".into(),
        sample_period,
        page_size: Some(numalab_core::PageSize::Base4K),
        nodes: spec.machine.topology.nodes.len() as u16,
        topology: Some(spec.machine.topology.clone()),
        events: vec!["memory-reference".into()],
        mappings: Vec::new(),
        samples_dropped: r.samples_taken.saturating_sub(r.samples.len() as u64),
        ..Default::default()
    };
    output::with_temp(p, |tmp| {
        // FILE.data: perf.data, for perf script / perf mem report.
        if p.extension().is_some_and(|e| e == "data") {
            let mut src = numalab_analyze::record::MemorySource::new(meta, &r.samples);
            numalab_analyze::perf_write::export(&mut src, tmp)?;
            return Ok(());
        }
        let mut w = numalab_analyze::SampleWriter::create(tmp, &meta, Default::default())?;
        for s in &r.samples {
            w.push_sample(s)?;
        }
        w.finish()?;
        Ok(())
    })
}
