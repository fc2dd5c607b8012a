//! Policy spec strings, `name` or `name:key=value,...` (e.g.
//! `carrefour-lp:split_share_percent=6,period_ms=1000`), and the parameter tables every policy
//! declares.
//!
//! Parsing is strict (DESIGN.md conventions): an unknown policy or key, a repeated key or a
//! value out of range is an error naming what was wrong and listing what is accepted, and no
//! policy is built from a half-valid spec.

use std::fmt;

/// Everything that can be wrong with a policy spec.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PolicyError {
    #[error("unknown policy '{name}': expected one of {valid}")]
    UnknownPolicy { name: String, valid: String },
    #[error("policy spec '{spec}' is malformed: {why} (expected name or name:key=value,...)")]
    Malformed { spec: String, why: String },
    #[error("{policy}: unknown key '{key}': valid keys are {valid}")]
    UnknownKey {
        policy: &'static str,
        key: String,
        valid: String,
    },
    #[error("{policy}: key '{key}' is given twice")]
    DuplicateKey { policy: &'static str, key: String },
    #[error("{policy}: {key}={value} is not valid: expected {expected}")]
    BadValue {
        policy: &'static str,
        key: &'static str,
        value: String,
        expected: String,
    },
}

/// How a parameter's value is written and checked.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ParamKind {
    /// Any number in `min..=max`.
    Number,
    /// A whole number in `min..=max` (underscores allowed: `30_000`).
    Integer,
    /// `0`/`1` (also `false`/`true`, `no`/`yes`); stored as 0.0 / 1.0.
    Flag,
    /// One of the listed names (e.g. `threads=balanced`); stored as its index, so `min` is 0
    /// and `max` the last index.
    Choice(&'static [&'static str]),
}

/// One tunable of a policy: what the CLI prints and what the parser checks.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct ParamInfo {
    pub key: &'static str,
    pub default: f64,
    /// Unit of the value (`ms`, `%`, `accesses/µs`, `samples`, `bool`, ...).
    pub unit: &'static str,
    /// What it controls, with its source (reference section, or [nl] for a numalab default).
    pub meaning: &'static str,
    pub kind: ParamKind,
    pub min: f64,
    pub max: f64,
}

/// A tunable of any kind: `min..=max` is what the parser accepts. Shared by the policies'
/// parameter tables.
pub const fn param(
    key: &'static str,
    default: f64,
    unit: &'static str,
    meaning: &'static str,
    kind: ParamKind,
    min: f64,
    max: f64,
) -> ParamInfo {
    ParamInfo {
        key,
        default,
        unit,
        meaning,
        kind,
        min,
        max,
    }
}

/// A numeric tunable, the common kind.
pub const fn num(
    key: &'static str,
    default: f64,
    unit: &'static str,
    meaning: &'static str,
    min: f64,
    max: f64,
) -> ParamInfo {
    param(key, default, unit, meaning, ParamKind::Number, min, max)
}

impl ParamInfo {
    /// The default as a spec would write it (`1000`, `0.5`, `1`).
    pub fn default_text(&self) -> String {
        self.value_text(self.default)
    }

    /// A value as a spec would write it: the name for a choice, the number otherwise.
    pub fn value_text(&self, v: f64) -> String {
        match self.kind {
            ParamKind::Choice(names) => names
                .get(v as usize)
                .map_or_else(|| format_value(v), |n| n.to_string()),
            _ => format_value(v),
        }
    }
}

/// A policy of the registry, for `numalab policy list`-like output.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyInfo {
    pub name: &'static str,
    pub summary: &'static str,
    pub params: Vec<ParamInfo>,
}

impl fmt::Display for PolicyInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}: {}", self.name, self.summary)?;
        for p in &self.params {
            writeln!(
                f,
                "  {}={} {}  {}",
                p.key,
                p.default_text(),
                p.unit,
                p.meaning
            )?;
        }
        Ok(())
    }
}

/// `1000` for whole numbers, the shortest decimal otherwise.
pub(crate) fn format_value(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{}", v as i64)
    } else {
        format!("{v}")
    }
}

/// `key=value` pairs of a spec, in order.
pub type KeyValues<'a> = Vec<(&'a str, &'a str)>;

/// Split a spec into its policy name and its `key=value` pairs, in order.
pub fn split(spec: &str) -> Result<(&str, KeyValues<'_>), PolicyError> {
    let malformed = |why: String| PolicyError::Malformed {
        spec: spec.to_string(),
        why,
    };
    let s = spec.trim();
    let (name, rest) = match s.split_once(':') {
        Some((n, r)) => (n.trim(), Some(r)),
        None => (s, None),
    };
    if name.is_empty() {
        return Err(malformed("the policy name is empty".into()));
    }
    let mut pairs = Vec::new();
    for part in rest.into_iter().flat_map(|r| r.split(',')) {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let (k, v) = part
            .split_once('=')
            .ok_or_else(|| malformed(format!("'{part}' is not key=value")))?;
        let (k, v) = (k.trim(), v.trim());
        if k.is_empty() || v.is_empty() {
            return Err(malformed(format!("'{part}' has an empty key or value")));
        }
        pairs.push((k, v));
    }
    Ok((name, pairs))
}

/// Split a list of specs such as `carrefour,carrefour-lp:period_ms=500,split_share_percent=8`
/// (the CLI's `--policy A,B`): a comma-separated item that has no `=`, or that has a `:`,
/// starts a new spec; a bare `key=value` item continues the previous one.
pub fn split_list(list: &str) -> Result<Vec<String>, PolicyError> {
    let mut out: Vec<String> = Vec::new();
    for item in list.split(',') {
        let item = item.trim();
        if item.is_empty() {
            continue;
        }
        let starts_spec = item.contains(':') || !item.contains('=');
        match out.last_mut() {
            Some(last) if !starts_spec => {
                last.push(',');
                last.push_str(item);
            }
            None if !starts_spec => {
                return Err(PolicyError::Malformed {
                    spec: list.to_string(),
                    why: format!("'{item}' comes before any policy name"),
                })
            }
            _ => out.push(item.to_string()),
        }
    }
    Ok(out)
}

/// Checked parameter values of one policy: every key of its table, defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamValues {
    policy: &'static str,
    values: Vec<(ParamInfo, f64)>,
}

impl ParamValues {
    /// Check `pairs` against `table` (known keys, no repeats, values of the right kind and
    /// range) and fill in the defaults.
    pub fn parse(
        policy: &'static str,
        table: &[ParamInfo],
        pairs: &[(&str, &str)],
    ) -> Result<ParamValues, PolicyError> {
        let mut values: Vec<(ParamInfo, f64)> = table.iter().map(|p| (*p, p.default)).collect();
        for (i, (k, v)) in pairs.iter().enumerate() {
            let Some(slot) = values.iter_mut().find(|(p, _)| p.key == *k) else {
                return Err(PolicyError::UnknownKey {
                    policy,
                    key: k.to_string(),
                    valid: table.iter().map(|p| p.key).collect::<Vec<_>>().join(", "),
                });
            };
            if pairs[..i].iter().any(|(k2, _)| k2 == k) {
                return Err(PolicyError::DuplicateKey {
                    policy,
                    key: k.to_string(),
                });
            }
            slot.1 = parse_value(policy, &slot.0, v)?;
        }
        Ok(ParamValues { policy, values })
    }

    /// The defaults of `table`.
    pub fn defaults(policy: &'static str, table: &[ParamInfo]) -> ParamValues {
        ParamValues {
            policy,
            values: table.iter().map(|p| (*p, p.default)).collect(),
        }
    }

    pub fn policy(&self) -> &'static str {
        self.policy
    }

    /// The value of `key`. Panics if the policy's own table lacks `key` (a programming error,
    /// not an input error: inputs were checked by [`ParamValues::parse`]).
    pub fn get(&self, key: &str) -> f64 {
        self.values
            .iter()
            .find(|(p, _)| p.key == key)
            .map(|(_, v)| *v)
            .unwrap_or_else(|| panic!("{}: no parameter '{key}' in its table", self.policy))
    }

    pub fn get_u64(&self, key: &str) -> u64 {
        self.get(key) as u64
    }

    pub fn flag(&self, key: &str) -> bool {
        self.get(key) != 0.0
    }

    /// The name chosen for a [`ParamKind::Choice`] key (panics on another kind, as `get`
    /// does on an unknown key: a programming error).
    pub fn choice(&self, key: &str) -> &'static str {
        let (p, v) = self
            .values
            .iter()
            .find(|(p, _)| p.key == key)
            .unwrap_or_else(|| panic!("{}: no parameter '{key}' in its table", self.policy));
        match p.kind {
            ParamKind::Choice(names) => names[*v as usize],
            _ => panic!("{}: parameter '{key}' is not a choice", self.policy),
        }
    }

    /// `name` alone when every value is its default, else `name:key=value,...` listing the
    /// values that differ (what reports print as the policy's name).
    pub fn canonical_name(&self) -> String {
        let changed: Vec<String> = self
            .values
            .iter()
            .filter(|(p, v)| *v != p.default)
            .map(|(p, v)| format!("{}={}", p.key, p.value_text(*v)))
            .collect();
        if changed.is_empty() {
            self.policy.to_string()
        } else {
            format!("{}:{}", self.policy, changed.join(","))
        }
    }
}

fn parse_value(policy: &'static str, p: &ParamInfo, v: &str) -> Result<f64, PolicyError> {
    let bad = |expected: String| PolicyError::BadValue {
        policy,
        key: p.key,
        value: v.to_string(),
        expected,
    };
    let range = format!("{}..={}", format_value(p.min), format_value(p.max));
    match p.kind {
        ParamKind::Flag => match v {
            "1" | "true" | "yes" => Ok(1.0),
            "0" | "false" | "no" => Ok(0.0),
            _ => Err(bad("0 or 1".into())),
        },
        ParamKind::Integer => match v.replace('_', "").parse::<u64>() {
            Ok(x) if (x as f64) >= p.min && (x as f64) <= p.max => Ok(x as f64),
            _ => Err(bad(format!("a whole number in {range} {}", p.unit))),
        },
        ParamKind::Number => match v.replace('_', "").parse::<f64>() {
            Ok(x) if x.is_finite() && x >= p.min && x <= p.max => Ok(x),
            _ => Err(bad(format!("a number in {range} {}", p.unit))),
        },
        ParamKind::Choice(names) => names
            .iter()
            .position(|n| *n == v)
            .map(|i| i as f64)
            .ok_or_else(|| bad(format!("one of {}", names.join(", ")))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TABLE: &[ParamInfo] = &[
        ParamInfo {
            key: "period_ms",
            default: 1000.0,
            unit: "ms",
            meaning: "period",
            kind: ParamKind::Number,
            min: 0.001,
            max: 1e6,
        },
        ParamInfo {
            key: "pages",
            default: 30_000.0,
            unit: "pages",
            meaning: "tracked pages",
            kind: ParamKind::Integer,
            min: 1.0,
            max: 1e9,
        },
        ParamInfo {
            key: "replicate",
            default: 0.0,
            unit: "bool",
            meaning: "flag",
            kind: ParamKind::Flag,
            min: 0.0,
            max: 1.0,
        },
    ];

    #[test]
    fn parses_and_fills_defaults() {
        let (name, pairs) = split("x: period_ms=0.5 , pages=1_000").unwrap();
        assert_eq!(name, "x");
        let v = ParamValues::parse("x", TABLE, &pairs).unwrap();
        assert_eq!(v.get("period_ms"), 0.5);
        assert_eq!(v.get_u64("pages"), 1000);
        assert!(!v.flag("replicate"));
        assert_eq!(v.canonical_name(), "x:period_ms=0.5,pages=1000");
        assert_eq!(ParamValues::defaults("x", TABLE).canonical_name(), "x");
    }

    #[test]
    fn errors_name_the_problem_and_the_valid_keys() {
        let e = ParamValues::parse("x", TABLE, &[("nope", "1")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x: unknown key 'nope': valid keys are period_ms, pages, replicate"
        );
        let e = ParamValues::parse("x", TABLE, &[("pages", "1"), ("pages", "2")]).unwrap_err();
        assert!(matches!(e, PolicyError::DuplicateKey { .. }));
        let e = ParamValues::parse("x", TABLE, &[("pages", "0.5")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "x: pages=0.5 is not valid: expected a whole number in 1..=1000000000 pages"
        );
        let e = ParamValues::parse("x", TABLE, &[("period_ms", "0")]).unwrap_err();
        assert!(
            e.to_string().contains("a number in 0.001..=1000000 ms"),
            "{e}"
        );
        let e = ParamValues::parse("x", TABLE, &[("replicate", "maybe")]).unwrap_err();
        assert!(e.to_string().contains("expected 0 or 1"), "{e}");
        assert!(split(":a=1").is_err());
        assert!(split("x:a").is_err());
        assert!(split("x:a=").is_err());
    }

    #[test]
    fn lists_split_on_names_not_on_parameter_commas() {
        let l =
            split_list("carrefour, carrefour-lp:period_ms=500,split_share_percent=8,x").unwrap();
        assert_eq!(
            l,
            vec![
                "carrefour".to_string(),
                "carrefour-lp:period_ms=500,split_share_percent=8".to_string(),
                "x".to_string()
            ]
        );
        assert!(split_list("a=1,carrefour").is_err());
        assert!(split_list("").unwrap().is_empty());
    }
}
