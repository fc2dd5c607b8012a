//! `numalab sim` and `--compare`: build configurations, run them in parallel, report.

use crate::output;
use crate::SimArgs;
use anyhow::{anyhow, bail, Context, Result};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use numalab_core::MemPolicy;
use numalab_machine::Machine;
use numalab_sim::{Pinning, SimConfig, SimResult, ThpMode};
use rayon::prelude::*;
use std::time::{Duration, Instant};

/// One fully resolved configuration.
pub struct RunSpec {
    pub label: String,
    pub machine: Machine,
    pub workload: String,
    pub threads: usize,
    pub pin: Pinning,
    pub mempolicy: MemPolicy,
    pub thp: ThpMode,
    /// Placement policy specs (crates/policies), validated; built per run since a policy
    /// carries state.
    pub policies: Vec<String>,
    /// Linux automatic NUMA balancing in the simulated kernel (`policy=autonuma[:k=v,...]`).
    pub numa_balancing: Option<numalab_sim::NumaBalancingParams>,
}

/// `autonuma`, `numa-balancing` (the kernel's own mechanism, in the OS model) rather than a
/// policy of crates/policies.
pub(crate) fn is_numa_balancing(spec: &str) -> bool {
    let name = spec.split(':').next().unwrap_or("").trim();
    matches!(name, "autonuma" | "numa-balancing" | "numa_balancing")
}

const KEYS: &[&str] = &[
    "mempolicy",
    "thp",
    "pin",
    "threads",
    "machine",
    "workload",
    "policy",
];
const SHORTHANDS: &[(&str, &str)] = &[
    ("first-touch", "mempolicy=default"),
    ("local", "mempolicy=local"),
    ("interleave", "mempolicy=interleave:all"),
    ("thp", "thp=always"),
    ("nothp", "thp=never"),
    ("autonuma", "policy=autonuma"),
];

/// Split `--compare` on commas, keeping commas that continue a node or CPU list
/// (`mempolicy=bind:0,1` stays one setting).
pub fn split_configs(s: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for tok in s.split(',') {
        let list_continues = tok
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_digit() || c == '!');
        // `policy=carrefour-lp:period_ms=500,split_share_percent=8`: a `key=value` whose key is
        // not a configuration key continues the previous policy's parameters.
        let param_continues = out
            .last()
            .and_then(|l| l.rsplit('+').next())
            .is_some_and(|seg| seg.trim_start().starts_with("policy="))
            && tok
                .split_once('=')
                .is_some_and(|(k, _)| !KEYS.contains(&k.trim()));
        let continues = (list_continues || param_continues) && !out.is_empty();
        if continues {
            let last = out.last_mut().unwrap();
            last.push(',');
            last.push_str(tok);
        } else {
            out.push(tok.to_string());
        }
    }
    out.into_iter()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty())
        .collect()
}

fn default_threads(machine: &Machine, workload: &str) -> usize {
    let name = workload.split(':').next().unwrap_or("");
    match name {
        "ptrchase" => 1,
        // A multiprogrammed mix runs one thread per program copy, whatever --threads says.
        "mix" => numalab_workloads::by_spec(workload, 1).map_or(1, |w| w.threads()),
        _ => machine.topology.num_cpus(),
    }
}

fn resolve(base: &SimArgs, overrides: &str) -> Result<RunSpec> {
    let mut machine = base.machine.clone();
    let mut workload = base.workload.clone();
    let mut threads = base.threads;
    let mut pin = base.pin.clone();
    let mut mempolicy = base.mempolicy.clone();
    let mut thp = base.thp.clone();
    let mut policies: Vec<String> = Vec::new();
    let mut numa_balancing = None;
    for setting in overrides
        .split('+')
        .map(str::trim)
        .filter(|s| !s.is_empty())
    {
        let expanded = SHORTHANDS
            .iter()
            .find(|(k, _)| *k == setting)
            .map_or(setting, |(_, v)| v);
        let (k, v) = expanded.split_once('=').ok_or_else(|| {
            anyhow!(
                "configuration '{setting}' is neither key=value nor a shorthand: keys are {}; shorthands are {}",
                KEYS.join(", "),
                SHORTHANDS.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
            )
        })?;
        match k {
            "mempolicy" => mempolicy = v.to_string(),
            "policy" if is_numa_balancing(v) => {
                numa_balancing = Some(
                    numalab_sim::NumaBalancingParams::parse(v)
                        .map_err(|e| anyhow!("policy '{v}': {e}"))?,
                );
            }
            "policy" => {
                if v != "none" {
                    numalab_policies::parse_spec(v).map_err(|e| anyhow!("policy '{v}': {e}"))?;
                    policies.push(v.to_string());
                }
            }
            "thp" => thp = v.to_string(),
            "pin" => pin = v.to_string(),
            "threads" => {
                threads = Some(
                    v.parse()
                        .with_context(|| format!("threads={v} is not a number"))?,
                )
            }
            "machine" => machine = v.to_string(),
            "workload" => workload = v.to_string(),
            _ => bail!(
                "unknown configuration key '{k}': valid keys are {}",
                KEYS.join(", ")
            ),
        }
    }
    let m = numalab_machine::load(&machine)?;
    let mp = MemPolicy::parse(&mempolicy, &m.topology.online())
        .map_err(|e| anyhow!("--mempolicy: {e}"))?;
    let thp_mode: ThpMode = thp.parse().map_err(|e: String| anyhow!("--thp: {e}"))?;
    let pinning: Pinning = pin.parse().map_err(|e: String| anyhow!("--pin: {e}"))?;
    let threads = if workload.starts_with("mix:") {
        default_threads(&m, &workload)
    } else {
        threads.unwrap_or_else(|| default_threads(&m, &workload))
    };
    pinning
        .resolve(&m.topology, threads)
        .map_err(|e| anyhow!("--pin {pin}: {e}"))?;
    let label = if overrides.is_empty() {
        format!("{mempolicy} thp={thp}")
    } else {
        overrides.to_string()
    };
    Ok(RunSpec {
        label,
        machine: m,
        workload,
        threads,
        pin: pinning,
        mempolicy: mp,
        thp: thp_mode,
        policies,
        numa_balancing,
    })
}

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

pub fn policy_names() -> String {
    let names: Vec<String> = numalab_policies::list()
        .into_iter()
        .map(|i| i.name.to_string())
        .collect();
    format!(
        "valid policies: none, autonuma (Linux NUMA balancing), {}",
        names.join(", ")
    )
}

pub fn sim(args: SimArgs) -> Result<()> {
    let configs = configurations(&args)?;
    if configs.is_empty() {
        bail!("--compare needs at least one configuration");
    }
    // Resolve and validate everything before simulating anything.
    let specs: Vec<RunSpec> = configs
        .iter()
        .map(|c| {
            let r = resolve(&args, c);
            if c.is_empty() {
                r
            } else {
                r.with_context(|| format!("configuration '{c}'"))
            }
        })
        .collect::<Result<_>>()?;
    let workloads = specs
        .iter()
        .map(|s| {
            numalab_workloads::by_spec(&s.workload, s.threads)
                .map_err(|e| anyhow!("--workload: {e}"))
        })
        .collect::<Result<Vec<_>>>()?;
    output::check_writable(args.json.as_deref())?;
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
                let cfg = SimConfig {
                    label: spec.label.clone(),
                    pinning: spec.pin.clone(),
                    task_policy: spec.mempolicy.clone(),
                    thp: spec.thp,
                    epoch_ns: args.epoch_us * 1000.0,
                    sample_period: args.sample_period,
                    progress: Some(Box::new(progress)),
                    numa_balancing: spec.numa_balancing.clone(),
                    policies: spec
                        .policies
                        .iter()
                        .map(|p| numalab_policies::by_spec(p).expect("validated before the run"))
                        .collect(),
                    ..Default::default()
                };
                let r = numalab_sim::simulate(&spec.machine, wl.as_ref(), cfg)
                    .with_context(|| format!("simulating '{}'", spec.label));
                bar.finish_and_clear();
                r
            })
            .collect()
    });
    let results: Vec<SimResult> = results.into_iter().collect::<Result<_>>()?;
    print!("{}", output::table(&results));
    if let Some(p) = &args.json {
        output::write_json(p, &results)?;
        eprintln!("wrote {}", p.display());
    }
    if let Some(p) = &args.csv {
        output::write_csv(p, &results)?;
        eprintln!("wrote {}", p.display());
    }
    for ((p, r), spec) in sample_paths.iter().zip(&results).zip(&specs) {
        write_samples(p, r, spec, args.sample_period)?;
        eprintln!("wrote {} ({} samples)", p.display(), r.samples.len());
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
    };
    // FILE.data: perf.data, for perf script / perf mem report.
    if p.extension().is_some_and(|e| e == "data") {
        let mut src = numalab_analyze::record::MemorySource::new(meta, &r.samples);
        numalab_analyze::perf_write::export(&mut src, p)?;
        return Ok(());
    }
    let mut w = numalab_analyze::SampleWriter::create(p, &meta, Default::default())?;
    for s in &r.samples {
        w.push_sample(s)?;
    }
    w.finish()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compare_keeps_node_lists_together() {
        assert_eq!(
            split_configs("first-touch,mempolicy=bind:0,1,thp"),
            vec!["first-touch", "mempolicy=bind:0,1", "thp"]
        );
        assert_eq!(
            split_configs("thp=always+pin=0-3,5,interleave"),
            vec!["thp=always+pin=0-3,5", "interleave"]
        );
        assert_eq!(
            split_configs(
                "policy=carrefour-lp:period_ms=500,split_share_percent=8,thp=always,nothp"
            ),
            vec![
                "policy=carrefour-lp:period_ms=500,split_share_percent=8",
                "thp=always",
                "nothp"
            ]
        );
    }
}
