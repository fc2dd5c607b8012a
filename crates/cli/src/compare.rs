//! `numalab sim` and `--compare`: build configurations, run them in parallel, report.

use crate::output;
use crate::SimArgs;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressDrawTarget};
pub(crate) use numalab_runspec::is_numa_balancing;
use numalab_runspec::{policy_names, resolve, split_configs, Defaults, RunSpec};
use numalab_sim::SimResult;
use rayon::prelude::*;

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
    let mut notes: Vec<String> = specs.iter().filter_map(RunSpec::pinning_note).collect();
    notes.dedup();
    for n in notes {
        eprintln!("note: {n}");
    }
    // the same check as a study file's sample_period (numalab_study::sampler_off_problem)
    if let Some(why) = numalab_study::sampler_off_problem(
        args.sample_period,
        specs
            .iter()
            .flat_map(|s| s.policies.iter().map(String::as_str)),
    ) {
        bail!("--sample-period {why}");
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
    // several configurations: their number is known, so a bar over them (with the share done
    // and the time left) heads each run's own line
    let overall = (specs.len() > 1).then(|| {
        let bar = multi.add(output::count_bar("sim", "configurations", args.quiet));
        bar.set_length(specs.len() as u64);
        bar
    });
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.jobs.unwrap_or(0))
        .build()?;
    let results: Vec<Result<SimResult>> = pool.install(|| {
        specs
            .par_iter()
            .zip(workloads.par_iter())
            .map(|(spec, wl)| {
                // A run is a spinner with what it has done, not a bar: the engine reports the
                // simulated time and references so far, but how many a workload needs is
                // known only when it ends (threads finish at data-dependent times, and faults,
                // migrations and policies change the length), so there is no total to divide
                // by and no time left to estimate.
                let bar = output::spinner("{spinner} {prefix}: {msg}");
                bar.set_prefix(spec.label.clone());
                let mut slow = output::SlowBar::in_multi(bar.clone(), &multi, args.quiet);
                let progress = move |p: numalab_sim::Progress| {
                    slow.poke();
                    slow.bar.set_message(spinner_message(&p));
                };
                let mut cfg = spec.sim_config(args.epoch_us * 1000.0, args.sample_period);
                cfg.seed = args.seed;
                cfg.start_skew_ns = args.start_skew_us * 1000.0;
                cfg.progress = Some(Box::new(progress));
                let r = numalab_sim::simulate(&spec.machine, wl.as_ref(), cfg)
                    .with_context(|| format!("simulating '{}'", spec.label));
                bar.finish_and_clear();
                if let Some(o) = &overall {
                    o.inc(1);
                }
                r
            })
            .collect()
    });
    if let Some(o) = overall {
        o.finish_and_clear();
    }
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

/// What a run's spinner says: what the engine has simulated so far, each figure named.
fn spinner_message(p: &numalab_sim::Progress) -> String {
    format!(
        "so far {:.2} ms simulated, {:.1} M memory references, {}/{} threads finished",
        p.sim_time_ns / 1e6,
        p.memory_references as f64 / 1e6,
        p.threads_done,
        p.threads
    )
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
