//! Configurations of simulated runs, shared by `numalab sim --compare` and `numalab validate`.
//!
//! A configuration is `key=value` settings joined by `+` (keys: mempolicy, thp, hugetlb, pin,
//! threads, machine, workload, policy) or a shorthand (`first-touch`, `interleave`, `thp`, ...), applied
//! on top of [`Defaults`]. [`resolve`] checks every part against the machine before anything
//! runs, so a bad configuration fails before the first simulation starts.

use anyhow::{anyhow, bail, Context, Result};
use numalab_core::{MemPolicy, PageSize};
use numalab_machine::Machine;
use numalab_sim::{Pinning, SimConfig, ThpMode};

/// One fully resolved configuration.
pub struct RunSpec {
    pub label: String,
    pub machine: Machine,
    pub workload: String,
    pub threads: usize,
    pub pin: Pinning,
    pub mempolicy: MemPolicy,
    pub thp: ThpMode,
    /// The hugetlbfs heap's page size (`hugetlb=2M|1G`), None for plain anonymous memory.
    pub hugetlb: Option<PageSize>,
    /// Placement policy specs (crates/policies), validated; built per run since a policy
    /// carries state.
    pub policies: Vec<String>,
    /// Linux automatic NUMA balancing in the simulated kernel (`policy=autonuma[:k=v,...]`).
    pub numa_balancing: Option<numalab_sim::NumaBalancingParams>,
}

impl RunSpec {
    /// A note for the user when `--pin` asks for a placement that the workload overrides: a
    /// program that sets its own CPU affinity (Metis pins worker i to CPU i) keeps it, as a
    /// real `sched_setaffinity` overrides the launcher's.
    pub fn pinning_note(&self) -> Option<String> {
        if self.pin == Pinning::None {
            return None;
        }
        let w = numalab_workloads::by_spec(&self.workload, self.threads).ok()?;
        let own = w.placements().thread_cpus.len();
        (own > 0).then(|| {
            format!(
                "--pin {}: {} places {own} of its {} threads itself (its own CPU affinity, as the real program sets it), whatever --pin says",
                self.pin,
                w.name(),
                w.threads()
            )
        })
    }

    /// The simulator's configuration for this run (fresh policy objects; no progress callback).
    pub fn sim_config(&self, epoch_ns: f64, sample_period: u64) -> SimConfig {
        SimConfig {
            label: self.label.clone(),
            pinning: self.pin.clone(),
            task_policy: self.mempolicy.clone(),
            thp: self.thp,
            hugetlb: self.hugetlb,
            epoch_ns,
            sample_period,
            numa_balancing: self.numa_balancing.clone(),
            policies: self
                .policies
                .iter()
                .map(|p| numalab_policies::by_spec(p).expect("validated by resolve"))
                .collect(),
            ..Default::default()
        }
    }
}

/// `numalab sim`'s default settings, shared by its options and by the configurations that
/// leave a setting unset (a study's grid).
pub mod sim_defaults {
    pub const MACHINE: &str = "opteron6272-8n";
    pub const WORKLOAD: &str = "npb-cg:class=A";
    pub const PIN: &str = "none";
    pub const MEMPOLICY: &str = "default";
    pub const THP: &str = "never";
    pub const HUGETLB: &str = "none";
}

/// The settings a configuration starts from (`numalab sim`'s options).
#[derive(Clone, Debug)]
pub struct Defaults {
    pub machine: String,
    pub workload: String,
    pub threads: Option<usize>,
    pub pin: String,
    pub mempolicy: String,
    pub thp: String,
    /// `none`, `2M` or `1G`.
    pub hugetlb: String,
}

/// `none` (or `4K`, `never`) → None; `2M` / `1G` → the hugetlbfs heap's page size.
pub fn parse_hugetlb(s: &str) -> Result<Option<PageSize>> {
    match s.trim().to_ascii_lowercase().as_str() {
        "none" | "never" | "off" => Ok(None),
        _ => match s.parse::<PageSize>() {
            Ok(PageSize::Base4K) => Ok(None),
            Ok(size) => Ok(Some(size)),
            Err(_) => bail!(
                "hugetlb={s} is not a page size: expected none, 2M or 1G (the hugetlbfs pages backing the heap, as libhugetlbfs's HUGETLB_MORECORE)"
            ),
        },
    }
}

/// `autonuma`, `numa-balancing` (the kernel's own mechanism, in the OS model) rather than a
/// policy of crates/policies.
pub fn is_numa_balancing(spec: &str) -> bool {
    let name = spec.split(':').next().unwrap_or("").trim();
    matches!(name, "autonuma" | "numa-balancing" | "numa_balancing")
}

pub const KEYS: &[&str] = &[
    "mempolicy",
    "thp",
    "hugetlb",
    "pin",
    "threads",
    "machine",
    "workload",
    "policy",
];
pub const SHORTHANDS: &[(&str, &str)] = &[
    ("first-touch", "mempolicy=default"),
    ("local", "mempolicy=local"),
    ("interleave", "mempolicy=interleave:all"),
    ("thp", "thp=always"),
    ("nothp", "thp=never"),
    ("hugetlb-2m", "hugetlb=2M"),
    ("hugetlb-1g", "hugetlb=1G"),
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
        "ptrchase" | "randrw" => 1,
        // GF09's benchmark: the filler and one copier per CPU of the copiers' node
        "migrate-buffer" => {
            let to = numalab_workloads::migrate_buffer::copier_node_of(workload);
            let cpus = machine
                .topology
                .nodes
                .iter()
                .find(|n| Some(n.id.0) == to)
                .map_or(1, |n| n.cpus.len().max(1));
            1 + cpus
        }
        // A multiprogrammed mix runs one thread per program copy, whatever --threads says.
        "mix" => numalab_workloads::by_spec(workload, 1).map_or(1, |w| w.threads()),
        _ => machine.topology.num_cpus(),
    }
}

/// Apply `overrides` (one configuration) to `base` and check the result. A `workload=mix:...`
/// setting is the last of its configuration: it runs to the end, its programs joined by `+`.
pub fn resolve(base: &Defaults, overrides: &str) -> Result<RunSpec> {
    let mut machine = base.machine.clone();
    let mut workload = base.workload.clone();
    let mut threads = base.threads;
    let mut pin = base.pin.clone();
    let mut mempolicy = base.mempolicy.clone();
    let mut thp = base.thp.clone();
    let mut hugetlb = base.hugetlb.clone();
    let mut policies: Vec<String> = Vec::new();
    let mut numa_balancing = None;
    // a `workload=` setting runs to the end of the configuration, so that a mix's programs
    // (`mix:a*2+b*2`) keep their own `+`
    let (settings, mix_workload) = match overrides.find("workload=mix:") {
        Some(at) if at == 0 || overrides[..at].ends_with('+') => (
            overrides[..at].trim_end_matches('+'),
            Some(overrides[at + "workload=".len()..].trim()),
        ),
        _ => (overrides, None),
    };
    if let Some(w) = mix_workload {
        workload = w.to_string();
    }
    for setting in settings.split('+').map(str::trim).filter(|s| !s.is_empty()) {
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
            "hugetlb" => hugetlb = v.to_string(),
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
    let hugetlb_size = parse_hugetlb(&hugetlb).context("--hugetlb")?;
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
        match hugetlb_size {
            Some(size) => format!("{mempolicy} thp={thp} hugetlb={size}"),
            None => format!("{mempolicy} thp={thp}"),
        }
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
        hugetlb: hugetlb_size,
        policies,
        numa_balancing,
    })
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

    #[test]
    fn migrate_buffer_defaults_to_one_copier_per_cpu_of_its_node() {
        let m = numalab_machine::preset("opteron8347he-4n").unwrap();
        assert_eq!(default_threads(&m, "migrate-buffer"), 5);
        assert_eq!(default_threads(&m, "migrate-buffer:size=1M,to=2"), 5);
        // a node the machine lacks: the placement's error names it later
        assert_eq!(default_threads(&m, "migrate-buffer:to=9"), 2);
    }

    #[test]
    fn hugetlb_sizes_and_their_errors() {
        assert_eq!(parse_hugetlb("none").unwrap(), None);
        assert_eq!(parse_hugetlb("4K").unwrap(), None);
        assert_eq!(parse_hugetlb("2M").unwrap(), Some(PageSize::Huge2M));
        assert_eq!(parse_hugetlb("1g").unwrap(), Some(PageSize::Giant1G));
        let e = parse_hugetlb("3M").unwrap_err().to_string();
        assert!(
            e.contains("hugetlb=3M") && e.contains("none, 2M or 1G"),
            "{e}"
        );
        let d = Defaults {
            machine: "xeon-x5650-2n".into(),
            workload: "stream:n=1000".into(),
            threads: Some(2),
            pin: "none".into(),
            mempolicy: "default".into(),
            thp: "never".into(),
            hugetlb: "none".into(),
        };
        assert_eq!(
            resolve(&d, "hugetlb-1g").unwrap().hugetlb,
            Some(PageSize::Giant1G)
        );
        assert_eq!(resolve(&d, "").unwrap().hugetlb, None);
        let e = format!("{:#}", resolve(&d, "hugetlb=huge").err().unwrap());
        assert!(e.contains("--hugetlb") && e.contains("hugetlb=huge"), "{e}");
    }

    #[test]
    fn a_mix_workload_keeps_its_plus_signs() {
        let d = Defaults {
            machine: "xeon-x5650-2n".into(),
            workload: "stream:n=1000".into(),
            threads: None,
            pin: "none".into(),
            mempolicy: "default".into(),
            thp: "never".into(),
            hugetlb: "none".into(),
        };
        let mix = "mix:stream(cpus=0)+stream(cpus=12;mempolicy=bind:0)";
        let r = resolve(&d, &format!("thp=always+workload={mix}")).unwrap();
        assert_eq!(r.workload, mix);
        assert_eq!(r.threads, 2);
        assert_eq!(r.thp, ThpMode::Always);
        assert_eq!(
            resolve(&d, &format!("workload={mix}")).unwrap().workload,
            mix
        );
    }
}
