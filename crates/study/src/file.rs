//! The study file (docs/study.md): TOML, checked whole before anything runs.

use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use std::path::Path;

/// The settings a configuration may set: `numalab sim`'s options, as `--compare` names them.
pub const SETTINGS: &[&str] = &[
    "machine",
    "workload",
    "threads",
    "pin",
    "mempolicy",
    "thp",
    "hugetlb",
    "policy",
];

/// The settings of a real-run study (`kind = "real"`): the command, `numalab run`'s placement
/// options for it, and the two kernel settings a configuration may change.
pub const REAL_SETTINGS: &[&str] = &["command", "run", "numa_balancing", "thp"];

/// What a study runs: simulations (the default) or a real program on this host.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StudyKind {
    #[default]
    Sim,
    Real,
}

impl StudyKind {
    /// The settings a configuration of this kind may set.
    pub fn settings(self) -> &'static [&'static str] {
        match self {
            StudyKind::Sim => SETTINGS,
            StudyKind::Real => REAL_SETTINGS,
        }
    }
}

/// Most configurations × repeats a study may hold: far beyond any grid a person reads, small
/// enough that a typo (an axis of a million values) is caught before it runs for days.
pub const MAX_RUNS: usize = 100_000;

/// A study file as written.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StudyFile {
    /// The study's name (default: the file's stem).
    #[serde(default)]
    pub name: Option<String>,
    /// Simulated (`"sim"`, the default) or real runs (`"real"`: docs/study.md, "Real runs").
    #[serde(default)]
    pub kind: StudyKind,
    /// Real runs: untimed runs of each configuration before its timed ones (default 0).
    #[serde(default)]
    pub warmups: usize,
    /// Runs per configuration, with seeds 1..N (default 1, seed 1).
    #[serde(default = "one")]
    pub repeats: usize,
    /// Epoch length in simulated microseconds (default 20, as `numalab sim`).
    #[serde(default = "twenty")]
    pub epoch_us: f64,
    /// One access sample every N memory references (default 4099, as `numalab sim`; 0 = off).
    #[serde(default = "sample_period_default")]
    pub sample_period: u64,
    /// With several repeats, each thread starts after a delay drawn in [0, N) µs from the
    /// run's seed (default 1 µs, as `numalab validate --repeats`), so repeats differ.
    #[serde(default = "one_f")]
    pub start_skew_us: f64,
    /// Settings every configuration starts from; unset ones take `numalab sim`'s defaults.
    #[serde(default)]
    pub defaults: toml::Table,
    /// The axes, in the order the grid varies them (the last fastest).
    #[serde(default, rename = "axis")]
    pub axes: Vec<AxisFile>,
    /// The file's text as read (copied into the study folder, shown in the report).
    #[serde(skip)]
    pub source: String,
}

/// One `[[axis]]`: a setting and its values.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AxisFile {
    pub key: String,
    pub values: Vec<toml::Value>,
    /// Display labels, one per value (default: the values).
    #[serde(default)]
    pub labels: Vec<String>,
}

fn one() -> usize {
    1
}
fn one_f() -> f64 {
    1.0
}
fn twenty() -> f64 {
    20.0
}
fn sample_period_default() -> u64 {
    4099
}

/// A setting's value as the configuration string takes it: strings as written, integers
/// (threads) as decimals; anything else is refused, naming where it was.
pub fn setting_value(v: &toml::Value, what: &str) -> Result<String> {
    match v {
        toml::Value::String(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        toml::Value::String(_) => bail!("{what} is empty"),
        toml::Value::Integer(i) => Ok(i.to_string()),
        other => bail!(
            "{what} is {} ({other}): expected a string (or an integer for threads)",
            other.type_str()
        ),
    }
}

/// Why a sample period cannot go with these policies, if it cannot: Carrefour and Carrefour-LP
/// decide from access samples (IBS in the papers), so with the sampler off (period 0) they
/// would run and never act. `numalab sim --sample-period` and a study's `sample_period` both
/// ask here, each naming its own setting before the reason: `0 turns the sampler off, ...`.
pub fn sampler_off_problem<'a>(
    sample_period: u64,
    policies: impl IntoIterator<Item = &'a str>,
) -> Option<String> {
    if sample_period != 0 {
        return None;
    }
    let p = policies.into_iter().find(|p| p.starts_with("carrefour"))?;
    Some(format!(
        "0 turns the sampler off, but policy {p} decides from access samples: give a period (default {})",
        sample_period_default()
    ))
}

fn check_key(kind: StudyKind, key: &str, what: &str) -> Result<()> {
    if kind.settings().contains(&key) {
        return Ok(());
    }
    let hint = match kind {
        StudyKind::Sim if REAL_SETTINGS.contains(&key) => {
            " (a real-run setting: write kind = \"real\" at the top of the file)"
        }
        StudyKind::Real if SETTINGS.contains(&key) => {
            " (a simulation setting: this study has kind = \"real\")"
        }
        _ => "",
    };
    Err(anyhow!(
        "{what}: unknown setting '{key}'{hint}: settings are {}",
        kind.settings().join(", ")
    ))
}

/// A real-run setting's value, checked: `numa_balancing` 0/1 (or off/on), `thp` one of the
/// kernel's modes, `command` and `run` split as a shell would (quotes kept together).
fn check_real_value(key: &str, v: &str, what: &str) -> Result<()> {
    match key {
        "numa_balancing" if crate::real::parse_balancing(v).is_none() => {
            bail!("{what}: numa_balancing = '{v}': expected 0 or 1 (off or on)")
        }
        "thp" if !crate::real::THP_MODES.contains(&v) => bail!(
            "{what}: thp = '{v}': expected one of {}",
            crate::real::THP_MODES.join(", ")
        ),
        "command" | "run" if shlex::split(v).is_none() => {
            bail!("{what}: {key} = '{v}' has an unclosed quote")
        }
        _ => Ok(()),
    }
}

impl StudyFile {
    /// Read and check a study file.
    pub fn load(path: &Path) -> Result<StudyFile> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read study file {}", path.display()))?;
        let mut f = StudyFile::parse(&text).with_context(|| format!("{}", path.display()))?;
        if f.name.is_none() {
            f.name = path.file_stem().map(|s| s.to_string_lossy().into_owned());
        }
        Ok(f)
    }

    /// Parse and check a study file's text.
    pub fn parse(text: &str) -> Result<StudyFile> {
        let mut f: StudyFile =
            toml::from_str(text).map_err(|e| anyhow!("not a study file: {e}"))?;
        f.check()?;
        f.source = text.to_string();
        Ok(f)
    }

    fn check(&self) -> Result<()> {
        if self.repeats == 0 {
            bail!("repeats = 0: expected at least 1 run per configuration");
        }
        if let Some(why) = numalab_sim::config::epoch_us_problem(self.epoch_us) {
            bail!("epoch_us = {why}");
        }
        if let Some(why) = numalab_sim::config::start_skew_us_problem(self.start_skew_us) {
            bail!("start_skew_us = {why}");
        }
        if self.kind == StudyKind::Sim && self.warmups > 0 {
            bail!("warmups = {}: warm-up runs are for real runs (kind = \"real\"); a simulation is the same every time", self.warmups);
        }
        for (k, v) in &self.defaults {
            check_key(self.kind, k, "[defaults]")?;
            let s = setting_value(v, &format!("[defaults] {k}"))?;
            if self.kind == StudyKind::Real {
                check_real_value(k, &s, "[defaults]")?;
            }
        }
        let mut seen: Vec<&str> = Vec::new();
        for (i, a) in self.axes.iter().enumerate() {
            let what = format!("axis {} ('{}')", i + 1, a.key);
            check_key(self.kind, &a.key, &what)?;
            if seen.contains(&a.key.as_str()) {
                bail!(
                    "{what}: the setting '{}' has two axes; give one axis all its values",
                    a.key
                );
            }
            seen.push(&a.key);
            if a.values.is_empty() {
                bail!("{what} has no values");
            }
            let mut vals: Vec<String> = Vec::new();
            for (j, v) in a.values.iter().enumerate() {
                let s = setting_value(v, &format!("{what}, value {}", j + 1))?;
                if self.kind == StudyKind::Real {
                    check_real_value(&a.key, &s, &what)?;
                }
                if vals.contains(&s) {
                    bail!("{what}: value '{s}' is given twice");
                }
                vals.push(s);
            }
            if !a.labels.is_empty() && a.labels.len() != a.values.len() {
                bail!(
                    "{what} has {} labels for {} values: give one label per value, or none",
                    a.labels.len(),
                    a.values.len()
                );
            }
            let mut labels: Vec<&str> = Vec::new();
            for l in &a.labels {
                if l.trim().is_empty() || labels.contains(&l.as_str()) {
                    bail!("{what}: labels must be non-empty and distinct ('{l}')");
                }
                labels.push(l);
            }
        }
        if self.kind == StudyKind::Real
            && !self.defaults.contains_key("command")
            && !self.axes.iter().any(|a| a.key == "command")
        {
            bail!("a real-run study needs a command: set command = \"...\" in [defaults] or give it an axis");
        }
        let runs = self
            .axes
            .iter()
            .try_fold(self.repeats, |n, a| n.checked_mul(a.values.len()))
            .filter(|&n| n <= MAX_RUNS);
        if runs.is_none() {
            bail!(
                "the grid holds more than {MAX_RUNS} runs (axes' values multiplied, times repeats): split the study"
            );
        }
        if self.kind == StudyKind::Sim && self.sample_period == 0 {
            // the first configuration with such a policy, by the label its results carry
            for c in crate::grid::Grid::new(self)?.configs {
                if let Some(why) = sampler_off_problem(self.sample_period, c.setting("policy")) {
                    bail!("configuration '{}': sample_period = {why}", c.label);
                }
            }
        }
        Ok(())
    }
}
