//! Placement policies of the literature, written once against `numalab_core::view`
//! (`MemoryView` in, `Action`s out), so they run in the simulator and on a real kernel.
//!
//! | name | file | reference |
//! |---|---|---|
//! | `carrefour` | [`carrefour`] | policies.md §6 (Dashti et al., ASPLOS 2013) |
//! | `carrefour-lp` | [`carrefour_lp`] | policies.md §7 (Gaud et al., USENIX ATC 2014) |
//! | `numa-manager` | [`numa_manager`] | policies.md §8 (Müller, TU Dresden 2013) |
//! | `adaptive-percent` | [`adaptive_percent`] | policies.md §5, adaptive variant [nl] |
//! | `next-touch` | [`next_touch`] | policies.md §4 (Goglin & Furmento 2009; Müller) |
//! | `lazy-migration` | [`next_touch`] | policies.md §4 (Müller's lazy dataspace migration) |
//!
//! Policies are built from spec strings, `name` or `name:key=value,...`, by [`by_spec`]
//! (several at once, as `--policy A,B` gives them, by [`by_specs`]); [`list`] describes each
//! policy with its parameters, defaults and units. Every threshold and period is a named
//! parameter whose default is the reference's figure. Control laws and parameter tables are
//! in docs/policies.md.

pub mod adaptive_percent;
pub mod carrefour;
pub mod carrefour_lp;
pub mod next_touch;
pub mod numa_manager;
pub mod spec;
pub mod window;

pub use carrefour::{Carrefour, CarrefourParams, CarrefourRound, RoundLog};
pub use carrefour_lp::{CarrefourLp, CarrefourLpParams, LpRound, LpState};
pub use spec::{ParamInfo, ParamKind, ParamValues, PolicyError, PolicyInfo};

use numalab_core::Policy;

type Ctor = fn(&ParamValues) -> Box<dyn Policy>;

struct Entry {
    name: &'static str,
    summary: &'static str,
    params: &'static [ParamInfo],
    ctor: Ctor,
}

const REGISTRY: &[Entry] = &[
    Entry {
        name: carrefour::NAME,
        summary: carrefour::SUMMARY,
        params: carrefour::PARAMS,
        ctor: |v| Box::new(Carrefour::from_values(v)),
    },
    Entry {
        name: carrefour_lp::NAME,
        summary: carrefour_lp::SUMMARY,
        params: carrefour_lp::PARAMS,
        ctor: |v| Box::new(CarrefourLp::from_values(v)),
    },
    Entry {
        name: numa_manager::NAME,
        summary: numa_manager::SUMMARY,
        params: numa_manager::PARAMS,
        ctor: |v| Box::new(numa_manager::NumaManager::from_values(v)),
    },
    Entry {
        name: adaptive_percent::NAME,
        summary: adaptive_percent::SUMMARY,
        params: adaptive_percent::PARAMS,
        ctor: |v| Box::new(adaptive_percent::AdaptivePercent::from_values(v)),
    },
    Entry {
        name: next_touch::NAME,
        summary: next_touch::SUMMARY,
        params: next_touch::PARAMS,
        ctor: |v| Box::new(next_touch::NextTouch::from_values(v)),
    },
    Entry {
        name: next_touch::LAZY_NAME,
        summary: next_touch::LAZY_SUMMARY,
        params: next_touch::LAZY_PARAMS,
        ctor: |v| Box::new(next_touch::NextTouch::lazy_from_values(v)),
    },
];

fn entry(name: &str) -> Result<&'static Entry, PolicyError> {
    REGISTRY
        .iter()
        .find(|e| e.name == name)
        .ok_or_else(|| PolicyError::UnknownPolicy {
            name: name.to_string(),
            valid: REGISTRY
                .iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
                .join(", "),
        })
}

/// Check a spec and return its policy's name and full parameter values (defaults filled in),
/// without building the policy.
pub fn parse_spec(spec: &str) -> Result<ParamValues, PolicyError> {
    let (name, pairs) = spec::split(spec)?;
    let e = entry(name)?;
    ParamValues::parse(e.name, e.params, &pairs)
}

/// Build the policy a spec names, e.g. `carrefour-lp:split_share_percent=6,period_ms=1000`.
pub fn by_spec(spec: &str) -> Result<Box<dyn Policy>, PolicyError> {
    let values = parse_spec(spec)?;
    let e = entry(values.policy())?;
    Ok((e.ctor)(&values))
}

/// Build every policy of a comma-separated list (`carrefour,carrefour-lp:period_ms=500`);
/// all specs are checked before any policy is built.
pub fn by_specs(list: &str) -> Result<Vec<Box<dyn Policy>>, PolicyError> {
    let specs = spec::split_list(list)?;
    let values = specs
        .iter()
        .map(|s| parse_spec(s))
        .collect::<Result<Vec<_>, _>>()?;
    values
        .iter()
        .map(|v| Ok((entry(v.policy())?.ctor)(v)))
        .collect()
}

/// Every policy with its parameters, for the CLI.
pub fn list() -> Vec<PolicyInfo> {
    REGISTRY
        .iter()
        .map(|e| PolicyInfo {
            name: e.name,
            summary: e.summary,
            params: e.params.to_vec(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_builds_and_rejects_with_the_valid_choices() {
        let p = by_spec("carrefour").unwrap();
        assert_eq!(p.name(), "carrefour");
        assert_eq!(p.period_ns(), 1_000_000_000);
        let p = by_spec("carrefour-lp:split_share_percent=6,period_ms=500").unwrap();
        // 6 is the default, so only the period shows in the name
        assert_eq!(p.name(), "carrefour-lp:period_ms=500");
        assert_eq!(p.period_ns(), 500_000_000);
        let e = by_spec("carefour").err().unwrap();
        // starts with: the list grows as policies are registered
        assert!(
            e.to_string()
                .starts_with("unknown policy 'carefour': expected one of carrefour, carrefour-lp"),
            "{e}"
        );
        let e = by_spec("carrefour:period=5").err().unwrap();
        assert!(
            e.to_string().starts_with(
                "carrefour: unknown key 'period': valid keys are period_ms, maptu_min,"
            ),
            "{e}"
        );
        let v = by_specs("carrefour,carrefour-lp:period_ms=500,split_share_percent=8").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(
            v[1].name(),
            "carrefour-lp:period_ms=500,split_share_percent=8"
        );
        // one bad spec fails the whole list
        assert!(by_specs("carrefour,carrefour-lp:nope=1").is_err());
    }

    #[test]
    fn every_listed_parameter_parses_at_its_default_and_has_a_unit_or_is_a_seed() {
        let l = list();
        assert_eq!(l.len(), REGISTRY.len());
        for info in l {
            assert!(!info.params.is_empty());
            for p in &info.params {
                assert!(
                    p.default >= p.min && p.default <= p.max,
                    "{}: {}",
                    info.name,
                    p.key
                );
                let spec = format!("{}:{}={}", info.name, p.key, p.default_text());
                let v = parse_spec(&spec).unwrap();
                assert_eq!(v.canonical_name(), info.name, "{spec}");
                assert!(!p.unit.is_empty() || p.key == "seed", "{}", p.key);
            }
        }
    }
}
