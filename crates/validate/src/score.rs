//! Scoring a case: direction and tolerance (issue "Trustworthy simulation I"), the scorecard
//! rows, totals per source and overall.

use crate::case::{Expect, Kind, SourcedCase};
use crate::metric::Metric;
use serde::Serialize;
use std::collections::BTreeMap;

/// Relative tolerance on a published value.
pub const RELATIVE_TOLERANCE: f64 = 0.30;
/// Published values of at most this size (in the metric's unit: points of a percentage, ...)
/// get an absolute tolerance instead: ±30 % of 0.1 would demand a precision that no
/// measurement of such a small share has.
pub const SMALL_VALUE: f64 = 3.0;
pub const SMALL_VALUE_TOLERANCE: f64 = 1.0;

/// The half-width of the tolerance around `published`: ±30 %, or ±1 point when the published
/// value is 3 or less.
fn tolerance_width(published: f64) -> f64 {
    if published.abs() <= SMALL_VALUE {
        SMALL_VALUE_TOLERANCE
    } else {
        RELATIVE_TOLERANCE * published.abs()
    }
}

/// Within ±30 %, or ±1 point when the published value is 3 or less.
pub fn within_tolerance(published: f64, simulated: f64) -> bool {
    (simulated - published).abs() <= tolerance_width(published)
}

/// A verdict is settled when no edge of it lies inside the two-sided interval of this
/// confidence around the value: Student's t with the value's degrees of freedom, so that two
/// seeds that happen to agree (t = 12.7 for one degree of freedom) do not settle a verdict
/// that six seeds (t = 2.57) would show to be close. The rule is a stopping rule, not a test.
pub const SETTLED_CONFIDENCE: f64 = 0.95;

/// The half-width of the [`SETTLED_CONFIDENCE`] interval, in standard errors, for an
/// estimate with `dof` degrees of freedom (Student's t; the normal 1.96 without a finite
/// `dof`).
pub fn settled_t(dof: f64) -> f64 {
    use statrs::distribution::{ContinuousCDF, StudentsT};
    let q = 0.5 + SETTLED_CONFIDENCE / 2.0;
    match StudentsT::new(0.0, 1.0, dof) {
        Ok(t) if dof.is_finite() => t.inverse_cdf(q),
        _ => 1.959_963_984_540_054, // the normal quantile at 0.975
    }
}

/// The standard error and Welch–Satterthwaite degrees of freedom of a sum of independent
/// estimates, each `(standard error, degrees of freedom)` in the sum's unit: a comparison of
/// two configurations' unpaired seeds, or a pair's difference. Parts without error count for
/// nothing; with no error at all, the smallest part's degrees of freedom.
pub fn welch(parts: &[(f64, f64)]) -> (f64, f64) {
    let var: f64 = parts.iter().map(|(se, _)| se * se).sum();
    let denom: f64 = parts
        .iter()
        .filter(|(se, _)| *se > 0.0)
        .map(|(se, dof)| se.powi(4) / dof)
        .sum();
    let dof = if denom > 0.0 {
        var * var / denom
    } else {
        parts.iter().map(|p| p.1).fold(f64::INFINITY, f64::min)
    };
    (var.sqrt(), dof)
}

/// Changes smaller than this (in the metric's unit) count as none.
pub const DEAD_BAND: f64 = 0.5;
/// Two changes this close agree whatever their signs.
pub const SAME_DIRECTION_BAND: f64 = 1.0;

/// The sign of a change, with changes smaller than half a point counted as none.
fn direction(v: f64) -> i8 {
    if v > DEAD_BAND {
        1
    } else if v < -DEAD_BAND {
        -1
    } else {
        0
    }
}

/// Do a published and a simulated change point the same way? Two changes within a point of
/// each other agree whatever their signs (a published "0 → 0.1" is no direction).
pub fn same_direction(published: f64, simulated: f64) -> bool {
    direction(published) == direction(simulated)
        || (published - simulated).abs() <= SAME_DIRECTION_BAND
}

/// The values at which a verdict on `published` changes: the tolerance's edges.
fn tolerance_edges(published: f64) -> [f64; 2] {
    let w = tolerance_width(published);
    [published - w, published + w]
}

/// Of `candidates`, the values at which `verdict` changes (it differs just below and just
/// above them).
fn edges_of(candidates: &[f64], verdict: impl Fn(f64) -> bool) -> Vec<f64> {
    candidates
        .iter()
        .copied()
        .filter(|&e| {
            let d = 1e-9 * e.abs().max(1.0);
            verdict(e - d) != verdict(e + d)
        })
        .collect()
}

/// The values at which a simulated change's agreement with a published `change` flips: of
/// the dead band's edges and the edges of the point of agreement around `change`, those where
/// [`same_direction`] changes (with `change` = −43, only −0.5: a change of −44 or −42 agrees
/// by its sign as well).
fn direction_edges(change: f64) -> Vec<f64> {
    edges_of(
        &[
            -DEAD_BAND,
            DEAD_BAND,
            change - SAME_DIRECTION_BAND,
            change + SAME_DIRECTION_BAND,
        ],
        |s| same_direction(change, s),
    )
}

/// The sign a direction case expects: a faster run has a positive speedup or improvement, a
/// negative time increase.
fn wanted_direction(case: &crate::case::Case) -> i8 {
    let faster_sign = match case.metric {
        Some(Metric::TimeIncreasePercent) => -1,
        _ => 1,
    };
    match case.expect {
        Some(Expect::Faster) => faster_sign,
        _ => -faster_sign,
    }
}

/// Is the case's verdict settled by its seeds: does none of the values at which its
/// direction or tolerance would change lie inside the [`SETTLED_CONFIDENCE`] t-interval of
/// the simulated value (for a pair, of either value, and of their difference)? A value
/// without a standard error (one run, or seeds that agree exactly) is settled.
/// `validate --repeats auto` samples every configuration of an unsettled case further
/// (docs/VALIDATION.md, "Runs as samples").
pub fn settled(c: &SourcedCase, m: &Measured) -> bool {
    let Some(sim) = m.value else { return true };
    let clear = |x: f64, se: Option<f64>, dof: Option<f64>, edges: &[f64]| {
        let d = match (se, dof) {
            (Some(se), Some(dof)) if se > 0.0 => settled_t(dof) * se,
            _ => 0.0,
        };
        edges.iter().all(|&e| (x - e).abs() >= d)
    };
    let (se, dof) = (m.stderr, m.dof);
    let case = &c.case;
    match case.kind() {
        Kind::Direction => {
            let want = wanted_direction(case);
            let edges = edges_of(&[-DEAD_BAND, DEAD_BAND], |s| direction(s) == want);
            clear(sim, se, dof, &edges)
        }
        Kind::Comparison => {
            let p = case.published.expect("checked");
            clear(sim, se, dof, &direction_edges(p)) && clear(sim, se, dof, &tolerance_edges(p))
        }
        Kind::Value => clear(
            sim,
            se,
            dof,
            &tolerance_edges(case.published.expect("checked")),
        ),
        Kind::Pair => {
            let (pb, p) = (
                case.published_base.expect("checked"),
                case.published.expect("checked"),
            );
            let Some(sb) = m.base_value else { return true };
            // the two runs' seeds are not paired: the difference's error adds both
            let diff = match (se.zip(dof), m.base_stderr.zip(m.base_dof)) {
                (None, None) => None,
                (a, b) => Some(welch(&[a, b].into_iter().flatten().collect::<Vec<_>>())),
            };
            clear(sim, se, dof, &tolerance_edges(p))
                && clear(sb, m.base_stderr, m.base_dof, &tolerance_edges(pb))
                && clear(
                    sim - sb,
                    diff.map(|d| d.0),
                    diff.map(|d| d.1),
                    &direction_edges(p - pb),
                )
        }
        Kind::NotExpressible => true,
    }
}

/// The standard error of the mean of `v` (None for fewer than two values).
pub fn stderr_of(v: &[f64]) -> Option<f64> {
    let n = v.len();
    (n > 1).then(|| {
        let m = v.iter().sum::<f64>() / n as f64;
        let var = v.iter().map(|x| (x - m).powi(2)).sum::<f64>() / (n - 1) as f64;
        (var / n as f64).sqrt()
    })
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// Direction right and, where a value is published, within tolerance.
    Pass,
    /// Direction wrong, or out of tolerance.
    Miss,
    /// The model cannot express the case yet (the mechanism is named in `note`).
    NotExpressible,
    /// A simulation of the case failed (the error is in `note`).
    Error,
}

/// One row of the scorecard.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    pub id: String,
    pub source: String,
    pub cite: String,
    pub what: String,
    pub metric: Option<String>,
    pub published: Option<f64>,
    pub published_base: Option<f64>,
    pub expect: Option<Expect>,
    pub simulated: Option<f64>,
    pub simulated_base: Option<f64>,
    pub direction_right: Option<bool>,
    pub within_tolerance: Option<bool>,
    pub status: Status,
    pub note: Option<String>,
    /// Simulated milliseconds of the baseline and measured runs (for reading the rows).
    pub base_ms: Option<f64>,
    pub config_ms: Option<f64>,
    /// With `--repeats`: the smallest and largest value over the repeats (the simulated
    /// value is their mean, or the comparison of the mean times).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub spread: Option<(f64, f64)>,
    /// With repeats: the standard error of the simulated value (of the mean over seeds, from
    /// the per-seed values), and the seeds of the case's most sampled configuration.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stderr: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub seeds: Option<usize>,
    /// With repeats: false when an edge of the verdict lies inside the value's
    /// [`SETTLED_CONFIDENCE`] t-interval, so that more seeds could turn it ([`settled`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settled: Option<bool>,
}

/// What the runs gave for a case: the measured value and, for pairs, the baseline's.
pub struct Measured {
    pub value: Option<f64>,
    pub base_value: Option<f64>,
    pub base_ms: Option<f64>,
    pub config_ms: Option<f64>,
    /// Smallest and largest value over repeats (None for one run).
    pub spread: Option<(f64, f64)>,
    /// Standard errors of `value` and `base_value` over the seeds (None for one run), and
    /// their degrees of freedom (seeds − 1; Welch–Satterthwaite for a comparison).
    pub stderr: Option<f64>,
    pub base_stderr: Option<f64>,
    pub dof: Option<f64>,
    pub base_dof: Option<f64>,
    /// Each configuration's share of the error, in the value's unit: the standard error its
    /// seeds alone put on the scored value (baseline's, measured's; None where it cannot be
    /// told apart, as in a seed-by-seed comparison). `validate --repeats auto` samples
    /// further the configurations whose term matters (`lib.rs`, `AutoWaves`).
    pub terms: [Option<f64>; 2],
    /// Seeds of the case's most sampled configuration (None for one run).
    pub seeds: Option<usize>,
}

fn row(c: &SourcedCase) -> Row {
    Row {
        id: c.case.id.clone(),
        source: c.source.id.clone(),
        cite: c.case.cite.clone(),
        what: c.case.what.clone(),
        metric: c.case.metric.map(|m| m.name().to_string()),
        published: c.case.published,
        published_base: c.case.published_base,
        expect: c.case.expect,
        simulated: None,
        simulated_base: None,
        direction_right: None,
        within_tolerance: None,
        status: Status::NotExpressible,
        note: c.case.not_expressible.clone(),
        base_ms: None,
        config_ms: None,
        spread: None,
        stderr: None,
        seeds: None,
        settled: None,
    }
}

/// A case the model cannot express.
pub fn not_expressible(c: &SourcedCase) -> Row {
    row(c)
}

/// A case whose simulation failed.
pub fn failed(c: &SourcedCase, error: String) -> Row {
    Row {
        status: Status::Error,
        note: Some(error),
        ..row(c)
    }
}

/// Score a simulated case.
pub fn score(c: &SourcedCase, m: Measured) -> Row {
    let mut r = row(c);
    r.simulated = m.value;
    r.simulated_base = m.base_value;
    r.base_ms = m.base_ms;
    r.config_ms = m.config_ms;
    r.spread = m.spread;
    r.stderr = m.stderr;
    r.seeds = m.seeds;
    if m.stderr.is_some() || m.base_stderr.is_some() {
        r.settled = Some(settled(c, &m));
    }
    let Some(sim) = m.value else {
        r.status = Status::Error;
        r.note =
            Some("the metric is not defined for this run (no such phase, or no traffic)".into());
        return r;
    };
    let case = &c.case;
    let (dir, tol) = match case.kind() {
        Kind::Direction => (Some(direction(sim) == wanted_direction(case)), None),
        Kind::Comparison => {
            let p = case.published.expect("checked");
            (Some(same_direction(p, sim)), Some(within_tolerance(p, sim)))
        }
        Kind::Value => {
            let p = case.published.expect("checked");
            (None, Some(within_tolerance(p, sim)))
        }
        Kind::Pair => {
            let (pb, p) = (
                case.published_base.expect("checked"),
                case.published.expect("checked"),
            );
            match m.base_value {
                None => {
                    r.status = Status::Error;
                    r.note = Some("the metric is not defined for the baseline run".into());
                    return r;
                }
                Some(sb) => (
                    Some(same_direction(p - pb, sim - sb)),
                    Some(within_tolerance(pb, sb) && within_tolerance(p, sim)),
                ),
            }
        }
        Kind::NotExpressible => unreachable!("not simulated"),
    };
    r.direction_right = dir;
    r.within_tolerance = tol;
    r.status = if dir != Some(false) && tol != Some(false) {
        Status::Pass
    } else {
        Status::Miss
    };
    r
}

/// Counts over a set of rows.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct Totals {
    pub cases: usize,
    pub not_expressible: usize,
    pub errors: usize,
    /// Simulated cases with a direction to check, and those right.
    pub with_direction: usize,
    pub direction_right: usize,
    /// Simulated cases with a published value, and those within tolerance.
    pub with_value: usize,
    pub within_tolerance: usize,
    pub pass: usize,
}

impl Totals {
    pub fn of<'a>(rows: impl IntoIterator<Item = &'a Row>) -> Totals {
        let mut t = Totals::default();
        for r in rows {
            t.cases += 1;
            match r.status {
                Status::NotExpressible => t.not_expressible += 1,
                Status::Error => t.errors += 1,
                Status::Pass => t.pass += 1,
                Status::Miss => {}
            }
            if let Some(d) = r.direction_right {
                t.with_direction += 1;
                t.direction_right += d as usize;
            }
            if let Some(w) = r.within_tolerance {
                t.with_value += 1;
                t.within_tolerance += w as usize;
            }
        }
        t
    }
}

/// One simulation the suite ran (several cases may share it).
#[derive(Clone, Debug, Serialize)]
pub struct RunInfo {
    pub machine: String,
    pub workload: String,
    pub threads: usize,
    pub config: String,
    /// Simulated time (the mean over repeats).
    pub sim_ms: Option<f64>,
    /// With repeats: each repeat's simulated time, seed 1 first.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub sim_ms_repeats: Vec<f64>,
    pub host_seconds: Option<f64>,
}

/// The whole scorecard.
#[derive(Clone, Debug, Serialize)]
pub struct Scorecard {
    pub rows: Vec<Row>,
    pub per_source: BTreeMap<String, Totals>,
    pub overall: Totals,
    pub runs: Vec<RunInfo>,
    /// Host seconds the suite took.
    pub host_seconds: f64,
    pub epoch_us: f64,
}

impl Scorecard {
    pub fn new(rows: Vec<Row>, runs: Vec<RunInfo>, host_seconds: f64, epoch_us: f64) -> Scorecard {
        let mut per_source: BTreeMap<String, Vec<&Row>> = BTreeMap::new();
        for r in &rows {
            per_source.entry(r.source.clone()).or_default().push(r);
        }
        let per_source = per_source
            .into_iter()
            .map(|(s, rs)| (s, Totals::of(rs)))
            .collect();
        let overall = Totals::of(&rows);
        Scorecard {
            rows,
            per_source,
            overall,
            runs,
            host_seconds,
            epoch_us,
        }
    }

    /// The readable table: one row per case, then totals.
    pub fn table(&self) -> String {
        use std::fmt::Write as _;
        let mut out = String::new();
        let w = self
            .rows
            .iter()
            .map(|r| r.id.len())
            .max()
            .unwrap_or(4)
            .max(4);
        let _ = writeln!(
            out,
            "{:<w$}  {:<26} {:>15} {:>15}  {:<5} {:<5} status",
            "case", "metric", "published", "simulated", "dir", "tol"
        );
        for r in &self.rows {
            let metric = r.metric.clone().unwrap_or_else(|| "-".into());
            let published = match (r.published_base, r.published, r.expect) {
                (Some(b), Some(p), _) => format!("{} → {}", num(b), num(p)),
                (None, Some(p), _) => num(p),
                (_, None, Some(Expect::Faster)) => "faster".into(),
                (_, None, Some(Expect::Slower)) => "slower".into(),
                _ => "-".into(),
            };
            let mut simulated = match (r.simulated_base, r.simulated) {
                (Some(b), Some(s)) => format!("{} → {}", num(b), num(s)),
                (None, Some(s)) => num(s),
                _ => "-".into(),
            };
            if let Some(se) = r.stderr {
                simulated = format!("{simulated} ±{}", num(se));
            }
            if let Some((lo, hi)) = r.spread {
                simulated = format!("{simulated} [{}..{}]", num(lo), num(hi));
            }
            if let Some(n) = r.seeds {
                simulated = format!("{simulated} ({n} seeds)");
            }
            let yn = |v: Option<bool>| match v {
                Some(true) => "yes",
                Some(false) => "NO",
                None => "-",
            };
            // a verdict more seeds could turn says so
            let unsettled = if r.settled == Some(false) {
                format!(
                    " (unsettled: an edge inside the {:.0} % t-interval)",
                    SETTLED_CONFIDENCE * 100.0
                )
            } else {
                String::new()
            };
            let status = match r.status {
                Status::Pass => format!("pass{unsettled}"),
                Status::Miss => format!("miss{unsettled}"),
                Status::NotExpressible => {
                    format!("not expressible: {}", r.note.as_deref().unwrap_or(""))
                }
                Status::Error => format!("error: {}", r.note.as_deref().unwrap_or("")),
            };
            let _ = writeln!(
                out,
                "{:<w$}  {:<26} {:>15} {:>15}  {:<5} {:<5} {}",
                r.id,
                metric,
                published,
                simulated,
                yn(r.direction_right),
                yn(r.within_tolerance),
                status
            );
        }
        let _ = writeln!(out);
        let _ = writeln!(
            out,
            "{:<8} {:>6} {:>9} {:>12} {:>16} {:>6} {:>7}",
            "source", "cases", "not expr.", "direction", "within ±30 %", "pass", "errors"
        );
        let line = |out: &mut String, name: &str, t: &Totals| {
            let _ = writeln!(
                out,
                "{:<8} {:>6} {:>9} {:>12} {:>16} {:>6} {:>7}",
                name,
                t.cases,
                t.not_expressible,
                format!("{}/{}", t.direction_right, t.with_direction),
                format!("{}/{}", t.within_tolerance, t.with_value),
                t.pass,
                t.errors
            );
        };
        for (s, t) in &self.per_source {
            line(&mut out, s, t);
        }
        line(&mut out, "all", &self.overall);
        out
    }
}

fn num(v: f64) -> String {
    if v.abs() >= 100.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tolerance_is_relative_above_three_and_absolute_below() {
        assert!(within_tolerance(-43.0, -31.0));
        assert!(!within_tolerance(-43.0, -30.0));
        assert!(within_tolerance(-43.0, -55.9));
        assert!(!within_tolerance(-43.0, -56.0));
        assert!(within_tolerance(0.1, 1.05));
        assert!(!within_tolerance(0.1, 1.2));
        assert!(within_tolerance(3.0, 2.0));
        assert!(!within_tolerance(3.0, 1.9));
        assert!(!within_tolerance(4.0, 2.7));
    }

    fn one_case(fields: &str) -> SourcedCase {
        let text = format!(
            "[source]\nid = \"T\"\ncitation = \"t\"\n\n[[case]]\nid = \"T.x\"\ncite = \"t\"\nwhat = \"t\"\nmachine = \"xeon-x5650-2n\"\nworkload = \"stream\"\nconfig = \"\"\nbase = \"\"\n{fields}\n"
        );
        crate::case::parse("t.toml", &text).unwrap().remove(0)
    }

    fn measured(value: f64, stderr: Option<f64>) -> Measured {
        Measured {
            value: Some(value),
            base_value: None,
            base_ms: None,
            config_ms: None,
            spread: None,
            stderr,
            base_stderr: None,
            // many seeds: the normal interval, ±1.96 standard errors
            dof: stderr.map(|_| f64::INFINITY),
            base_dof: None,
            terms: [None, stderr],
            seeds: None,
        }
    }

    #[test]
    fn a_verdict_is_settled_when_no_edge_lies_inside_its_t_interval() {
        // published -43: tolerance edges -55.9 and -30.1; the direction changes at -0.5 only
        // (-44 and -42 agree by their sign as well as by the point of agreement)
        let c = one_case("metric = \"speedup_percent\"\npublished = -43");
        assert!(settled(&c, &measured(-37.6, Some(2.0))));
        assert!(
            !settled(&c, &measured(-37.6, Some(4.0))),
            "-30.1 is 7.5 away"
        );
        assert!(settled(&c, &measured(-43.5, Some(0.3))), "-44 is no edge");
        assert!(!settled(&c, &measured(-1.0, Some(0.3))), "-0.5 is 0.5 away");
        assert!(settled(&c, &measured(-20.0, None)), "no error: settled");
        assert!(settled(&c, &measured(-20.0, Some(0.0))));
        // published 0.3 (no direction): agreement on [-0.7, 1.3], the dead band inside it
        let z = one_case("metric = \"speedup_percent\"\npublished = 0.3");
        assert!(!settled(&z, &measured(1.2, Some(0.1))), "1.3 is 0.1 away");
        assert!(
            settled(&z, &measured(0.45, Some(0.05))),
            "0.5 is no edge here"
        );
        // a direction: only the dead band's edge on the expected side counts
        let d = one_case("metric = \"speedup_percent\"\nexpect = \"faster\"");
        assert!(!settled(&d, &measured(0.6, Some(1.0))));
        assert!(settled(&d, &measured(5.9, Some(2.0))));
        assert!(settled(&d, &measured(-5.0, Some(2.0))));
        assert!(settled(&d, &measured(-0.6, Some(0.1))), "-0.5 is no edge");
        let t = one_case("metric = \"time_increase_percent\"\nexpect = \"faster\"");
        assert!(
            !settled(&t, &measured(-0.6, Some(0.1))),
            "faster is below -0.5"
        );
        // a pair: each value against its tolerance, their difference against the direction
        let p = one_case("metric = \"lar_percent\"\npublished_base = 88\npublished = 66");
        let pair = |sb: f64, s: f64, se: f64| Measured {
            base_value: Some(sb),
            base_stderr: Some(se),
            base_dof: Some(f64::INFINITY),
            ..measured(s, Some(se))
        };
        assert!(settled(&p, &pair(82.0, 20.0, 1.0)));
        assert!(!settled(&p, &pair(82.0, 47.0, 1.0)), "46.2 is 0.8 from 47");
        assert!(!settled(&p, &pair(62.0, 40.0, 1.0)), "61.6 is 0.4 from 62");
        // the difference (published -22): 82 → 81.6 is 0.1 from the dead band's edge at
        // -0.5, and 82 → 82.2 is clear of it (+0.5 is no edge: both sides disagree)
        assert!(!settled(&p, &pair(82.0, 81.6, 0.1)));
        assert!(settled(&p, &pair(82.0, 82.2, 0.1)));
    }

    #[test]
    fn few_seeds_widen_the_interval_by_students_t() {
        assert!((settled_t(1.0) - 12.706).abs() < 1e-3);
        assert!((settled_t(5.0) - 2.571).abs() < 1e-3);
        assert!((settled_t(f64::INFINITY) - 1.960).abs() < 1e-3);
        // published -43: the edge -30.1 is 7.5 from -37.6; 0.7 standard errors are clear of it
        // with six seeds (2.57 × 0.7 = 1.8) and not with two (12.7 × 0.7 = 8.9)
        let c = one_case("metric = \"speedup_percent\"\npublished = -43");
        let with_dof = |dof: f64| Measured {
            dof: Some(dof),
            ..measured(-37.6, Some(0.7))
        };
        assert!(settled(&c, &with_dof(5.0)));
        assert!(!settled(&c, &with_dof(1.0)));
    }

    #[test]
    fn welch_adds_variances_and_weighs_degrees_of_freedom() {
        // equal errors and seeds: the sum's dof is the two parts' together
        let (se, dof) = welch(&[(1.0, 5.0), (1.0, 5.0)]);
        assert!(
            (se - 2f64.sqrt()).abs() < 1e-12 && (dof - 10.0).abs() < 1e-9,
            "{se} {dof}"
        );
        // one part without error: the other's alone
        let (se, dof) = welch(&[(0.0, 1.0), (0.5, 17.0)]);
        assert!(
            (se - 0.5).abs() < 1e-12 && (dof - 17.0).abs() < 1e-9,
            "{se} {dof}"
        );
        // one part dominates: close to its dof
        let (_, dof) = welch(&[(0.01, 1.0), (1.0, 5.0)]);
        assert!((dof - 5.0).abs() < 0.01, "{dof}");
        assert_eq!(welch(&[(0.0, 1.0), (0.0, 5.0)]), (0.0, 1.0));
    }

    #[test]
    fn stderr_is_the_sample_deviation_over_root_n() {
        assert_eq!(stderr_of(&[1.0]), None);
        let se = stderr_of(&[1.0, 3.0]).unwrap();
        assert!((se - 1.0).abs() < 1e-12, "{se}"); // sd √2, over √2
        assert_eq!(stderr_of(&[2.0, 2.0, 2.0]), Some(0.0));
    }

    #[test]
    fn directions_agree_by_sign_or_within_a_point() {
        assert!(same_direction(-43.0, -2.0));
        assert!(!same_direction(-43.0, 3.0));
        assert!(same_direction(0.0, 0.9));
        assert!(!same_direction(0.0, 1.6));
        assert!(same_direction(-4.0, -48.0));
        assert!(!same_direction(58.0, -1.0));
    }
}
