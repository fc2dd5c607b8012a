//! Cases: one published measurement each, read from the TOML files under `cases/`.
//!
//! A file is one source: `[source]` (id, full citation) and `[[case]]` tables. A case either
//! describes a simulation (machine, workload, the baseline and measured configurations in
//! `numalab sim --compare` syntax, the metric, the published figure) or names the mechanism the
//! model lacks to express it (`not_expressible`), so that the scorecard lists it all the same.

use crate::metric::Metric;
use anyhow::{anyhow, bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The case files built into numalab (one per source).
pub const BUILTIN: &[(&str, &str)] = &[
    ("cases/g14.toml", include_str!("../cases/g14.toml")),
    ("cases/mi21.toml", include_str!("../cases/mi21.toml")),
    ("cases/m13.toml", include_str!("../cases/m13.toml")),
    ("cases/ga23.toml", include_str!("../cases/ga23.toml")),
    ("cases/gf09.toml", include_str!("../cases/gf09.toml")),
];

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Short id used in case ids and totals, e.g. `G14`.
    pub id: String,
    /// Authors, title, venue, year.
    pub citation: String,
}

/// Which way a comparative result goes, for cases published only as a direction.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Expect {
    /// The measured configuration is faster than the baseline (metric > 0).
    Faster,
    /// The measured configuration is slower than the baseline (metric < 0 for speedup and
    /// improvement, > 0 for time increase).
    Slower,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    pub id: String,
    /// Where in the source: table, figure, section.
    pub cite: String,
    /// The published row in words.
    pub what: String,
    /// Part of `numalab validate --quick` (CI).
    #[serde(default)]
    pub quick: bool,
    /// Set when the model cannot express the case yet: the missing mechanism or workload.
    pub not_expressible: Option<String>,
    pub machine: Option<String>,
    pub workload: Option<String>,
    pub threads: Option<usize>,
    #[serde(default = "default_pin")]
    pub pin: String,
    #[serde(default = "default_mempolicy")]
    pub mempolicy: String,
    #[serde(default = "default_thp")]
    pub thp: String,
    /// The hugetlbfs heap's page size: none, 2M or 1G (`numalab sim --hugetlb`).
    #[serde(default = "default_hugetlb")]
    pub hugetlb: String,
    /// Baseline configuration (`--compare` syntax), for comparative metrics and pairs.
    pub base: Option<String>,
    /// Measured configuration (`--compare` syntax; empty = the case's settings as they are).
    #[serde(default)]
    pub config: String,
    pub metric: Option<Metric>,
    /// Phase whose time the case measures (NPB's `timed`, STREAM's `triad`); default the
    /// whole run.
    pub region: Option<String>,
    /// The published value (of the measured configuration, or of the comparison).
    pub published: Option<f64>,
    /// For a published pair "before → after" of a per-run metric: the baseline's value.
    pub published_base: Option<f64>,
    /// For cases published as a direction only.
    pub expect: Option<Expect>,
    /// How the inputs were shrunk from the published ones, and why the shrink keeps what
    /// decides the result.
    pub shrink: Option<String>,
    /// The repeated part the shrink cut short and how often the published run does it: the
    /// scored figures weigh that part back (full_run.rs).
    pub full_run: Option<crate::full_run::FullRun>,
    /// For a multiprogrammed run: per task (the workload's task order), the weight of its
    /// time in the total CPU time the source compares, i.e. the length of that program's
    /// published run. The compared total is `Σ w · t_task / t_task(base)`: each shrunk
    /// program counts as much as its full run does (see `lib.rs`, `weighted_cpu_time`).
    pub cpu_time_weights: Option<Vec<f64>>,
}

fn default_pin() -> String {
    "none".into()
}
fn default_mempolicy() -> String {
    "default".into()
}
fn default_thp() -> String {
    "never".into()
}
fn default_hugetlb() -> String {
    "none".into()
}

/// What kind of comparison a case makes (derived from its fields by [`Case::kind`]).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Listed, not simulated.
    NotExpressible,
    /// A comparative metric against a published value.
    Comparison,
    /// A comparative metric whose published result is a direction only.
    Direction,
    /// A per-run metric of the measured configuration.
    Value,
    /// A per-run metric in the baseline and the measured configuration ("40 → 36").
    Pair,
}

impl Case {
    pub fn kind(&self) -> Kind {
        if self.not_expressible.is_some() {
            return Kind::NotExpressible;
        }
        match (self.metric.map(Metric::is_comparative), self.expect) {
            (Some(true), Some(_)) => Kind::Direction,
            (Some(true), None) => Kind::Comparison,
            _ if self.published_base.is_some() => Kind::Pair,
            _ => Kind::Value,
        }
    }

    /// Check that the fields fit together, naming the case and the problem.
    pub fn check(&self) -> Result<()> {
        let id = &self.id;
        if self.not_expressible.is_some() {
            return Ok(());
        }
        let metric = self
            .metric
            .ok_or_else(|| anyhow!("case {id}: no metric (and not marked not_expressible)"))?;
        if self.machine.is_none() || self.workload.is_none() {
            bail!("case {id}: a simulated case needs machine and workload");
        }
        let needs_base = metric.is_comparative() || self.published_base.is_some();
        if needs_base && self.base.is_none() {
            bail!(
                "case {id}: metric {} needs a base configuration",
                metric.name()
            );
        }
        match self.kind() {
            Kind::Direction if self.published.is_some() => {
                bail!("case {id}: give either published or expect, not both")
            }
            Kind::Comparison | Kind::Value | Kind::Pair if self.published.is_none() => {
                bail!("case {id}: no published value")
            }
            _ => {}
        }
        if self.expect.is_some() && !metric.is_comparative() {
            bail!(
                "case {id}: expect = faster/slower needs a time comparison, not {}",
                metric.name()
            );
        }
        if let Some(fr) = &self.full_run {
            if fr.times == 0 {
                bail!("case {id}: full_run.times must be at least 1");
            }
            if self.region.is_some() {
                bail!("case {id}: give either region (a phase timed alone) or full_run, not both");
            }
            if matches!(
                metric,
                Metric::StreamGibpsPerInstance | Metric::StreamGibpsTotal | Metric::MigrateGbps
            ) {
                bail!("case {id}: full_run does not apply to {}", metric.name());
            }
        }
        if let Some(w) = &self.cpu_time_weights {
            if !metric.is_comparative() {
                bail!(
                    "case {id}: cpu_time_weights weigh a time comparison, not {}",
                    metric.name()
                );
            }
            if self.region.is_some() || self.full_run.is_some() {
                bail!("case {id}: cpu_time_weights weigh whole tasks: no region or full_run");
            }
            if w.is_empty() || w.iter().any(|x| !(x.is_finite() && *x > 0.0)) {
                bail!("case {id}: cpu_time_weights must be positive numbers, one per task");
            }
        }
        for v in [self.published, self.published_base].into_iter().flatten() {
            if !v.is_finite() {
                bail!("case {id}: published value {v} is not a number");
            }
        }
        Ok(())
    }
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct CaseFile {
    source: Source,
    #[serde(rename = "case", default)]
    cases: Vec<Case>,
}

/// A case with its source.
#[derive(Clone, Debug)]
pub struct SourcedCase {
    pub source: Source,
    pub case: Case,
}

/// Parse one case file; `name` is used in errors.
pub fn parse(name: &str, text: &str) -> Result<Vec<SourcedCase>> {
    let f: CaseFile = toml::from_str(text).with_context(|| format!("case file {name}"))?;
    f.cases
        .into_iter()
        .map(|case| {
            case.check().with_context(|| format!("case file {name}"))?;
            Ok(SourcedCase {
                source: f.source.clone(),
                case,
            })
        })
        .collect()
}

/// Every built-in case, checked; ids are unique.
pub fn builtin() -> Result<Vec<SourcedCase>> {
    let mut all = Vec::new();
    for (name, text) in BUILTIN {
        all.extend(parse(name, text)?);
    }
    unique(&all)?;
    Ok(all)
}

/// Cases from files or folders of `.toml` files given by the user.
pub fn from_paths(paths: &[std::path::PathBuf]) -> Result<Vec<SourcedCase>> {
    let mut files = Vec::new();
    for p in paths {
        if p.is_dir() {
            let mut inside: Vec<_> = std::fs::read_dir(p)
                .with_context(|| format!("reading case folder {}", p.display()))?
                .filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|f| f.extension().is_some_and(|e| e == "toml"))
                .collect();
            inside.sort();
            if inside.is_empty() {
                bail!("case folder {} holds no .toml file", p.display());
            }
            files.extend(inside);
        } else {
            files.push(p.clone());
        }
    }
    let mut all = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f)
            .with_context(|| format!("reading case file {}", f.display()))?;
        all.extend(parse(&f.display().to_string(), &text)?);
    }
    unique(&all)?;
    Ok(all)
}

fn unique(all: &[SourcedCase]) -> Result<()> {
    let mut seen = std::collections::HashSet::new();
    for c in all {
        if !seen.insert(c.case.id.as_str()) {
            bail!("case id {} appears twice", c.case.id);
        }
    }
    Ok(())
}
