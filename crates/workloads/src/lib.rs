//! numalab's instrumented workloads: real algorithms that emit their memory references, one per
//! 64-byte line, for the simulator (reference/workloads.md; the interface is
//! `numalab_core::workload`).
//!
//! | name | model | threads |
//! |---|---|---|
//! | `stream` | STREAM 5.10 copy/scale/add/triad (§2.1) | T (or T single-threaded processes) |
//! | `ptrchase` | pointer-chase latency probe (§2.2) | exactly 1 |
//! | `mlc-loaded` | MLC-like loaded latency (§2.3) | 1 latency thread + T−1 injectors |
//! | `gups` | HPCC RandomAccess (§2.5) | T |
//! | `npb-cg` | NAS CG, NPB 3.4 OpenMP, exact matrix (§3.1) | T |
//!
//! Workloads are built from spec strings, `name` or `name:key=value,...`, by [`by_spec`];
//! [`list`] describes every name with its keys and defaults.

pub mod emit;
pub mod gups;
pub mod inspect;
pub mod mlc_loaded;
pub mod npb_cg;
pub mod ptrchase;
pub mod spec;
pub mod stream;

pub use spec::WorkloadError;

use numalab_core::workload::Workload;
use spec::Params;

type Ctor = fn(&Params, usize) -> Result<Box<dyn Workload>, WorkloadError>;

struct Entry {
    name: &'static str,
    keys: &'static [&'static str],
    description: &'static str,
    ctor: Ctor,
}

const REGISTRY: &[Entry] = &[
    Entry {
        name: stream::NAME,
        keys: stream::KEYS,
        description: stream::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(stream::Stream::from_params(p, t)?)),
    },
    Entry {
        name: ptrchase::NAME,
        keys: ptrchase::KEYS,
        description: ptrchase::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(ptrchase::PtrChase::from_params(p, t)?)),
    },
    Entry {
        name: mlc_loaded::NAME,
        keys: mlc_loaded::KEYS,
        description: mlc_loaded::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(mlc_loaded::MlcLoaded::from_params(p, t)?)),
    },
    Entry {
        name: gups::NAME,
        keys: gups::KEYS,
        description: gups::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(gups::Gups::from_params(p, t)?)),
    },
    Entry {
        name: npb_cg::NAME,
        keys: npb_cg::KEYS,
        description: npb_cg::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(npb_cg::NpbCg::from_params(p, t)?)),
    },
];

/// Build the workload a spec names, for `threads` threads (all tasks together).
///
/// `ptrchase` accepts only `threads = 1`; `mlc-loaded` uses thread 0 for latency and the others
/// as injectors; the rest split their work over `threads`. Heavy preparation (CG's matrix, chase
/// chains) happens in `Workload::build`, not here, so a spec can be validated cheaply.
pub fn by_spec(spec: &str, threads: usize) -> Result<Box<dyn Workload>, WorkloadError> {
    let (name, pairs) = spec::split(spec)?;
    let entry =
        REGISTRY
            .iter()
            .find(|e| e.name == name)
            .ok_or_else(|| WorkloadError::UnknownWorkload {
                name: name.to_string(),
                valid: REGISTRY
                    .iter()
                    .map(|e| e.name)
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
    let params = Params::new(entry.name, entry.keys, pairs)?;
    (entry.ctor)(&params, threads)
}

/// Every workload: (name, one-line description with its keys and defaults).
pub fn list() -> Vec<(&'static str, &'static str)> {
    REGISTRY.iter().map(|e| (e.name, e.description)).collect()
}
