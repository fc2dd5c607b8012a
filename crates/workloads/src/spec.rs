//! Workload spec strings: `name` or `name:key=value,key=value` (e.g. `npb-cg:class=B,niter=1`).
//!
//! Parsing is strict, following DESIGN.md's conventions: an unknown key, a repeated key or a value
//! of the wrong form is an error that names the problem and lists what is accepted, and nothing
//! is built from a half-valid spec.

use numalab_core::PageSize;

/// Everything that can be wrong with a workload spec or with the thread count asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WorkloadError {
    #[error("unknown workload '{name}': expected one of {valid}")]
    UnknownWorkload { name: String, valid: String },
    #[error(
        "workload spec '{spec}' is malformed: {why} (expected name or name:key=value,key=value)"
    )]
    Malformed { spec: String, why: String },
    #[error("{workload}: unknown key '{key}': valid keys are {valid}")]
    UnknownKey {
        workload: &'static str,
        key: String,
        valid: String,
    },
    #[error("{workload}: key '{key}' is given twice")]
    DuplicateKey { workload: &'static str, key: String },
    #[error("{workload}: {key}={value} is not valid: expected {expected}")]
    BadValue {
        workload: &'static str,
        key: &'static str,
        value: String,
        expected: String,
    },
    #[error("{workload}: {threads} threads requested, but {why}")]
    Threads {
        workload: &'static str,
        threads: usize,
        why: String,
    },
    #[error("{workload}: {why}")]
    Invalid { workload: &'static str, why: String },
}

/// `key=value` pairs of a spec, in order.
pub type KeyValues<'a> = Vec<(&'a str, &'a str)>;

/// Split a spec into its workload name and its `key=value` pairs (in order, untrimmed keys
/// rejected).
pub fn split(spec: &str) -> Result<(&str, KeyValues<'_>), WorkloadError> {
    let malformed = |why: String| WorkloadError::Malformed {
        spec: spec.to_string(),
        why,
    };
    let s = spec.trim();
    let (name, rest) = match s.split_once(':') {
        Some((n, r)) => (n.trim(), Some(r)),
        None => (s, None),
    };
    if name.is_empty() {
        return Err(malformed("the workload name is empty".into()));
    }
    let mut pairs = Vec::new();
    if let Some(rest) = rest {
        for part in rest.split(',') {
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
    }
    Ok((name, pairs))
}

/// The `key=value` pairs of one workload, checked against the keys it accepts.
pub struct Params<'a> {
    workload: &'static str,
    pairs: Vec<(&'a str, &'a str)>,
}

impl<'a> Params<'a> {
    /// Check that every key is one of `keys` and none is repeated.
    pub fn new(
        workload: &'static str,
        keys: &[&'static str],
        pairs: Vec<(&'a str, &'a str)>,
    ) -> Result<Self, WorkloadError> {
        for (i, (k, _)) in pairs.iter().enumerate() {
            if !keys.contains(k) {
                return Err(WorkloadError::UnknownKey {
                    workload,
                    key: k.to_string(),
                    valid: keys.join(", "),
                });
            }
            if pairs[..i].iter().any(|(k2, _)| k2 == k) {
                return Err(WorkloadError::DuplicateKey {
                    workload,
                    key: k.to_string(),
                });
            }
        }
        Ok(Params { workload, pairs })
    }

    pub fn workload(&self) -> &'static str {
        self.workload
    }

    /// The raw value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&'a str> {
        self.pairs.iter().find(|(k, _)| *k == key).map(|(_, v)| *v)
    }

    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    fn bad(&self, key: &'static str, value: &str, expected: impl Into<String>) -> WorkloadError {
        WorkloadError::BadValue {
            workload: self.workload,
            key,
            value: value.to_string(),
            expected: expected.into(),
        }
    }

    /// A byte size: an integer with an optional binary suffix K, M, G or T (`256M` = 256 MiB;
    /// `KB`, `KiB` and friends are accepted too).
    pub fn size(&self, key: &'static str, default: u64) -> Result<u64, WorkloadError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => parse_size(v).ok_or_else(|| {
                self.bad(
                    key,
                    v,
                    "a byte size such as 4096, 256M or 1G (K/M/G/T are binary)",
                )
            }),
        }
    }

    /// A non-negative integer (underscores allowed: `1_000_000`).
    pub fn uint(&self, key: &'static str, default: u64) -> Result<u64, WorkloadError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v
                .replace('_', "")
                .parse::<u64>()
                .map_err(|_| self.bad(key, v, "a non-negative integer")),
        }
    }

    /// An integer in `lo..=hi`.
    pub fn uint_in(
        &self,
        key: &'static str,
        default: u64,
        lo: u64,
        hi: u64,
    ) -> Result<u64, WorkloadError> {
        let x = self.uint(key, default)?;
        if x < lo || x > hi {
            return Err(self.bad(
                key,
                self.get(key).unwrap_or(""),
                format!("an integer in {lo}..={hi}"),
            ));
        }
        Ok(x)
    }

    /// A float in the half-open interval (lo, hi].
    pub fn float_in(
        &self,
        key: &'static str,
        default: f64,
        lo_excl: f64,
        hi: f64,
    ) -> Result<f64, WorkloadError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => match v.parse::<f64>() {
                Ok(x) if x > lo_excl && x <= hi => Ok(x),
                _ => Err(self.bad(key, v, format!("a number in ({lo_excl}, {hi}]"))),
            },
        }
    }

    /// One of `choices` (case-sensitive); returns its index.
    pub fn choice(
        &self,
        key: &'static str,
        choices: &[&str],
        default: usize,
    ) -> Result<usize, WorkloadError> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => choices
                .iter()
                .position(|c| *c == v)
                .ok_or_else(|| self.bad(key, v, format!("one of {}", choices.join(", ")))),
        }
    }

    /// `0` or `1` (also `false`/`true`, `no`/`yes`).
    pub fn flag(&self, key: &'static str, default: bool) -> Result<bool, WorkloadError> {
        match self.get(key) {
            None => Ok(default),
            Some("1" | "true" | "yes") => Ok(true),
            Some("0" | "false" | "no") => Ok(false),
            Some(v) => Err(self.bad(key, v, "0 or 1")),
        }
    }

    /// A page size `4K`, `2M` or `1G`.
    pub fn page(&self, key: &'static str) -> Result<Option<PageSize>, WorkloadError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<PageSize>()
                .map(Some)
                .map_err(|_| self.bad(key, v, "one of 4K, 2M, 1G")),
        }
    }

    /// A NUMA node number.
    pub fn node(&self, key: &'static str) -> Result<Option<u16>, WorkloadError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse::<u16>()
                .map(Some)
                .map_err(|_| self.bad(key, v, "a node number (0, 1, ...)")),
        }
    }
}

/// Parse `4096`, `4K`, `256M`, `1G`, `2T` (binary multiples; an optional trailing `B` or `iB`).
pub fn parse_size(s: &str) -> Option<u64> {
    let t = s.trim().replace('_', "");
    let upper = t.to_ascii_uppercase();
    let body = upper
        .strip_suffix("IB")
        .or_else(|| upper.strip_suffix('B'))
        .unwrap_or(&upper);
    let (digits, shift) = match body.chars().last()? {
        'K' => (&body[..body.len() - 1], 10),
        'M' => (&body[..body.len() - 1], 20),
        'G' => (&body[..body.len() - 1], 30),
        'T' => (&body[..body.len() - 1], 40),
        _ => (body, 0),
    };
    let n: u64 = digits.parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// Format a byte count the way specs write it (largest exact binary unit).
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(40, "T"), (30, "G"), (20, "M"), (10, "K")] {
        if bytes >= 1u64 << shift && bytes & ((1u64 << shift) - 1) == 0 {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("256M"), Some(256 << 20));
        assert_eq!(parse_size("1g"), Some(1 << 30));
        assert_eq!(parse_size("2KiB"), Some(2048));
        assert_eq!(parse_size("3MB"), Some(3 << 20));
        assert_eq!(parse_size("1.5G"), None);
        assert_eq!(parse_size("M"), None);
        assert_eq!(format_size(200 << 20), "200M");
        assert_eq!(format_size(1000), "1000");
    }

    #[test]
    fn splitting() {
        let (n, p) = split("stream:kernel=triad, n=4000000").unwrap();
        assert_eq!(n, "stream");
        assert_eq!(p, vec![("kernel", "triad"), ("n", "4000000")]);
        assert!(split(":a=b").is_err());
        assert!(split("x:a").is_err());
        let e = Params::new("x", &["a", "b"], vec![("c", "1")])
            .err()
            .unwrap();
        assert_eq!(e.to_string(), "x: unknown key 'c': valid keys are a, b");
        assert!(matches!(
            Params::new("x", &["a"], vec![("a", "1"), ("a", "2")]),
            Err(WorkloadError::DuplicateKey { .. })
        ));
    }
}
