//! The grid: the axes' Cartesian product, each configuration with its full settings.

use crate::file::{setting_value, StudyFile, StudyKind};
use anyhow::{anyhow, Result};
use numalab_runspec::{sim_defaults, Defaults, RunSpec};

/// `numalab sim`'s defaults, for settings neither `[defaults]` nor an axis sets.
const SIM_DEFAULTS: &[(&str, &str)] = &[
    ("machine", sim_defaults::MACHINE),
    ("workload", sim_defaults::WORKLOAD),
    ("pin", sim_defaults::PIN),
    ("mempolicy", sim_defaults::MEMPOLICY),
    ("thp", sim_defaults::THP),
    ("hugetlb", sim_defaults::HUGETLB),
    ("policy", "none"),
];

/// One configuration of the grid.
#[derive(Clone, Debug)]
pub struct Config {
    /// Position in the grid (the last axis varies fastest).
    pub index: usize,
    /// The axes' labels, `key=label` joined by spaces (`thp=THP mempolicy=interleave:all`);
    /// "default" for a study without axes.
    pub label: String,
    /// Per axis, in file order: (setting, value, label).
    pub axes: Vec<(String, String, String)>,
    /// Every setting (defaults, then the axes), in the order of the study kind's settings
    /// ([`crate::file::SETTINGS`], [`crate::file::REAL_SETTINGS`]); `threads` only when set.
    pub settings: Vec<(String, String)>,
}

impl Config {
    pub fn setting(&self, key: &str) -> Option<&str> {
        self.settings
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    /// Resolve against the machine and workload registries (errors name the configuration).
    pub fn resolve(&self) -> Result<RunSpec> {
        let get = |k: &str| self.setting(k).unwrap_or_default().to_string();
        let threads = match self.setting("threads") {
            Some(t) => Some(
                t.parse::<usize>()
                    .map_err(|_| anyhow!("threads={t} is not a whole number of threads"))?,
            ),
            None => None,
        };
        let d = Defaults {
            machine: get("machine"),
            workload: get("workload"),
            threads,
            pin: get("pin"),
            mempolicy: get("mempolicy"),
            thp: get("thp"),
            hugetlb: get("hugetlb"),
        };
        let policy = get("policy");
        let overrides = if policy == "none" {
            String::new()
        } else {
            format!("policy={policy}")
        };
        let mut spec = numalab_runspec::resolve(&d, &overrides)?;
        spec.label = self.label.clone();
        Ok(spec)
    }

    /// The identity of one run of this configuration: every setting and every simulation
    /// option. A rerun skips a run whose record carries the same key.
    pub fn run_key(&self, study: &StudyFile, seed: u64) -> String {
        let settings: Vec<String> = self
            .settings
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let skew = if study.repeats > 1 {
            study.start_skew_us
        } else {
            0.0
        };
        if study.kind == StudyKind::Real {
            // a real run's identity: what ran and how (its seed is the repeat's number)
            return format!(
                "kind=real {} warmups={} repeat={seed}",
                settings.join(" "),
                study.warmups
            );
        }
        format!(
            "{} epoch_us={} sample_period={} seed={seed} start_skew_us={skew}",
            settings.join(" "),
            study.epoch_us,
            study.sample_period
        )
    }

    /// A file-name stem for this configuration: its index and label, with anything but
    /// letters, digits, `.`, `-` and `_` replaced (the key inside the record is what counts).
    pub fn file_stem(&self) -> String {
        let slug: String = self
            .label
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || "._-".contains(c) {
                    c
                } else {
                    '_'
                }
            })
            .take(80)
            .collect();
        format!("{:04}-{slug}", self.index)
    }
}

/// The configurations of a study, in grid order.
#[derive(Clone, Debug)]
pub struct Grid {
    pub configs: Vec<Config>,
    /// The axes' settings, in file order (the results' axis columns).
    pub axis_keys: Vec<String>,
}

impl Grid {
    pub fn new(study: &StudyFile) -> Result<Grid> {
        let mut base: Vec<(String, String)> = Vec::new();
        let keys = study.kind.settings();
        for key in keys {
            let from_file = study
                .defaults
                .get(*key)
                .map(|v| setting_value(v, &format!("[defaults] {key}")))
                .transpose()?;
            let sim = study.kind == StudyKind::Sim;
            let v = from_file.or_else(|| {
                sim.then_some(())?;
                SIM_DEFAULTS
                    .iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.to_string())
            });
            if let Some(v) = v {
                base.push((key.to_string(), v));
            }
        }
        // each axis: (key, [(value, label)])
        let mut axes: Vec<(String, Vec<(String, String)>)> = Vec::new();
        for a in &study.axes {
            let mut vals = Vec::new();
            for (j, v) in a.values.iter().enumerate() {
                let s = setting_value(v, &format!("axis '{}'", a.key))?;
                let label = a.labels.get(j).cloned().unwrap_or_else(|| s.clone());
                vals.push((s, label));
            }
            axes.push((a.key.clone(), vals));
        }
        let total: usize = axes.iter().map(|(_, v)| v.len()).product();
        let mut configs = Vec::with_capacity(total);
        for index in 0..total {
            // mixed radix, the last axis fastest
            let mut rest = index;
            let mut picks = vec![0; axes.len()];
            for (i, (_, vals)) in axes.iter().enumerate().rev() {
                picks[i] = rest % vals.len();
                rest /= vals.len();
            }
            let chosen: Vec<(String, String, String)> = axes
                .iter()
                .zip(&picks)
                .map(|((k, vals), &p)| (k.clone(), vals[p].0.clone(), vals[p].1.clone()))
                .collect();
            let mut settings = base.clone();
            for (k, v, _) in &chosen {
                match settings.iter_mut().find(|(sk, _)| sk == k) {
                    Some(s) => s.1 = v.clone(),
                    None => settings.push((k.clone(), v.clone())),
                }
            }
            settings.sort_by_key(|(k, _)| keys.iter().position(|s| s == k));
            let label = if chosen.is_empty() {
                "default".to_string()
            } else {
                chosen
                    .iter()
                    .map(|(k, _, l)| format!("{k}={l}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            configs.push(Config {
                index,
                label,
                axes: chosen,
                settings,
            });
        }
        Ok(Grid {
            configs,
            axis_keys: axes.into_iter().map(|(k, _)| k).collect(),
        })
    }
}
