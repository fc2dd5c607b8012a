//! numalab's instrumented workloads: real algorithms that emit their memory references, one per
//! 64-byte line, for the simulator (reference/workloads.md; the interface is
//! `numalab_core::workload`).
//!
//! | name | model | threads |
//! |---|---|---|
//! | `stream` | STREAM 5.10 copy/scale/add/triad (§2.1) | T (or T single-threaded processes) |
//! | `ptrchase` | pointer-chase latency probe (§2.2) | exactly 1 |
//! | `randrw` | random independent reads or writes, M13's NUMA factor (§2.4) | exactly 1 |
//! | `mlc-loaded` | MLC-like loaded latency (§2.3) | 1 latency thread + T−1 injectors |
//! | `gups` | HPCC RandomAccess (§2.5) | T |
//! | `npb-cg` | NAS CG, NPB 3.4 OpenMP, exact matrix (§3.1) | T |
//! | `npb-is` | NAS IS, NPB's keys, bucket sort and ranking (§3.3) | T |
//! | `npb-ft` | NAS FT, 3-D FFT with the z-pass gather (§3.6) | T |
//! | `npb-sp` | NAS SP: ADI steps on k-slabs, z_solve across slabs (§3.5) | T |
//! | `npb-lu` | NAS LU: SSOR, wavefront sweeps over j-bands (skewed barriers) (§3.4) | T |
//! | `npb-ua` | NAS UA: adaptive octree of spectral elements, mortar exchange, Morton renumbering (§3.2) | T |
//! | `matmul` | Metis matrix multiply, row-block map tasks (§4.5) | T |
//! | `migrate-buffer` | GF09's threaded migration microbenchmark: a buffer filled on one node, pulled by threads on another (§7.2) | 1 filler + T−1 copiers |
//! | `lu-blocked` | GF09's blocked LU, interleaved, next-touch phase hook per step (§4.1) | T |
//! | `streamcluster` | PARSEC streamcluster, master-generated chunks, pgain passes (§4.2) | T |
//! | `metis-wc`, `metis-wr`, `metis-wrmem` | Metis MapReduce: map into per-thread tables, column reduce, merge (§4.4) | T |
//! | `ssca2` | SSCA2 v2.2: R-MAT graph, CSR build, betweenness-centrality BFS (§4.3) | T |
//! | `jbb` | SPECjbb-like: warehouses, TLABs from a shared eden, parallel young GC (§4.6) | T |
//! | `lbm-like`, `gems-like`, `mcf-like`, `omnetpp-like`, `libquantum-like`, `gcc-like`, `perlbench-like`, `bzip2-like`, `gobmk-like`, `hmmer-like`, `h264ref-like`, `astar-like` | SPEC CPU-like single-thread kernels (§5) | one copy (task) per thread |
//! | `mix` | multiprogrammed mix of any workloads, each with its copies, threads, task policy and CPUs: `mix:lbm-like*4+mcf-like(mempolicy=bind:1)*4` | one task per copy |
//!
//! Workloads are built from spec strings, `name` or `name:key=value,...`, by [`by_spec`];
//! [`list`] describes every name with its keys and defaults.

pub mod astar;
pub mod bzip2;
pub mod emit;
pub mod gcc;
pub mod gems;
pub mod gobmk;
pub mod grid;
pub mod gups;
pub mod h264ref;
pub mod hmmer;
pub mod inspect;
pub mod jbb;
pub mod kernel;
pub mod lbm;
pub mod libquantum;
pub mod lu_blocked;
pub mod matmul;
pub mod mcf;
pub mod metis;
pub mod migrate_buffer;
pub mod mix;
pub mod mlc_loaded;
pub mod npb_cg;
pub mod npb_ft;
pub mod npb_is;
pub mod npb_lu;
pub mod npb_sp;
pub mod npb_ua;
pub mod omnetpp;
pub mod perlbench;
pub mod ptrchase;
pub mod randrw;
pub mod script;
pub mod spec;
pub mod ssca2;
pub mod stream;
pub mod streamcluster;

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
        name: migrate_buffer::NAME,
        keys: migrate_buffer::KEYS,
        description: migrate_buffer::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(migrate_buffer::MigrateBuffer::from_params(p, t)?)),
    },
    Entry {
        name: randrw::NAME,
        keys: randrw::KEYS,
        description: randrw::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(randrw::RandRw::from_params(p, t)?)),
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
    Entry {
        name: npb_is::NAME,
        keys: npb_is::KEYS,
        description: npb_is::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(npb_is::NpbIs::from_params(p, t)?)),
    },
    Entry {
        name: npb_ft::NAME,
        keys: npb_ft::KEYS,
        description: npb_ft::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(npb_ft::NpbFt::from_params(p, t)?)),
    },
    Entry {
        name: npb_sp::NAME,
        keys: npb_sp::KEYS,
        description: npb_sp::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(npb_sp::NpbSp::from_params(p, t)?)),
    },
    Entry {
        name: npb_lu::NAME,
        keys: npb_lu::KEYS,
        description: npb_lu::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(npb_lu::NpbLu::from_params(p, t)?)),
    },
    Entry {
        name: npb_ua::NAME,
        keys: npb_ua::KEYS,
        description: npb_ua::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(npb_ua::NpbUa::from_params(p, t)?)),
    },
    Entry {
        name: matmul::NAME,
        keys: matmul::KEYS,
        description: matmul::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(matmul::Matmul::from_params(p, t)?)),
    },
    Entry {
        name: lu_blocked::NAME,
        keys: lu_blocked::KEYS,
        description: lu_blocked::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(lu_blocked::LuBlocked::from_params(p, t)?)),
    },
    Entry {
        name: streamcluster::NAME,
        keys: streamcluster::KEYS,
        description: streamcluster::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(streamcluster::Streamcluster::from_params(p, t)?)),
    },
    Entry {
        name: metis::WC,
        keys: metis::KEYS,
        description: metis::DESCRIPTION_WC,
        ctor: |p, t| Ok(Box::new(metis::Metis::from_params(metis::App::Wc, p, t)?)),
    },
    Entry {
        name: metis::WR,
        keys: metis::KEYS,
        description: metis::DESCRIPTION_WR,
        ctor: |p, t| Ok(Box::new(metis::Metis::from_params(metis::App::Wr, p, t)?)),
    },
    Entry {
        name: metis::WRMEM,
        keys: metis::KEYS,
        description: metis::DESCRIPTION_WRMEM,
        ctor: |p, t| {
            Ok(Box::new(metis::Metis::from_params(
                metis::App::WrMem,
                p,
                t,
            )?))
        },
    },
    Entry {
        name: ssca2::NAME,
        keys: ssca2::KEYS,
        description: ssca2::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(ssca2::Ssca2::from_params(p, t)?)),
    },
    Entry {
        name: jbb::NAME,
        keys: jbb::KEYS,
        description: jbb::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(jbb::Jbb::from_params(p, t)?)),
    },
    Entry {
        name: lbm::NAME,
        keys: lbm::KEYS,
        description: lbm::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(lbm::Lbm::workload(p, t)?)),
    },
    Entry {
        name: gems::NAME,
        keys: gems::KEYS,
        description: gems::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(gems::Gems::workload(p, t)?)),
    },
    Entry {
        name: mcf::NAME,
        keys: mcf::KEYS,
        description: mcf::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(mcf::Mcf::workload(p, t)?)),
    },
    Entry {
        name: omnetpp::NAME,
        keys: omnetpp::KEYS,
        description: omnetpp::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(omnetpp::Omnetpp::workload(p, t)?)),
    },
    Entry {
        name: libquantum::NAME,
        keys: libquantum::KEYS,
        description: libquantum::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(libquantum::Libquantum::workload(p, t)?)),
    },
    Entry {
        name: gcc::NAME,
        keys: gcc::KEYS,
        description: gcc::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(gcc::Gcc::workload(p, t)?)),
    },
    Entry {
        name: perlbench::NAME,
        keys: perlbench::KEYS,
        description: perlbench::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(perlbench::Perlbench::workload(p, t)?)),
    },
    Entry {
        name: bzip2::NAME,
        keys: bzip2::KEYS,
        description: bzip2::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(bzip2::Bzip2::workload(p, t)?)),
    },
    Entry {
        name: gobmk::NAME,
        keys: gobmk::KEYS,
        description: gobmk::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(gobmk::Gobmk::workload(p, t)?)),
    },
    Entry {
        name: hmmer::NAME,
        keys: hmmer::KEYS,
        description: hmmer::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(hmmer::Hmmer::workload(p, t)?)),
    },
    Entry {
        name: h264ref::NAME,
        keys: h264ref::KEYS,
        description: h264ref::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(h264ref::H264ref::workload(p, t)?)),
    },
    Entry {
        name: astar::NAME,
        keys: astar::KEYS,
        description: astar::DESCRIPTION,
        ctor: |p, t| Ok(Box::new(astar::Astar::workload(p, t)?)),
    },
];

/// Build the workload a spec names, for `threads` threads (all tasks together).
///
/// `ptrchase` and `randrw` accept only `threads = 1`; `mlc-loaded` uses thread 0 for latency and the others
/// as injectors; the §5 single-thread kernels run `threads` copies, one task each; `mix` sets
/// its own thread count (its copies) and ignores `threads`; the rest split their work over
/// `threads`. Heavy preparation (CG's matrix, chase
/// chains) happens in `Workload::build`, not here, so a spec can be validated cheaply.
pub fn by_spec(spec: &str, threads: usize) -> Result<Box<dyn Workload>, WorkloadError> {
    // a mix names programs with their own keys: its syntax is not name:key=value
    if spec.trim() == mix::NAME {
        return Ok(Box::new(mix::Mix::parse("")?));
    }
    if let Some((mix::NAME, body)) = spec.trim().split_once(':').map(|(n, b)| (n.trim(), b)) {
        return Ok(Box::new(mix::Mix::parse(body)?));
    }
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
                    .chain([mix::NAME])
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
    let params = Params::new(entry.name, entry.keys, pairs)?;
    (entry.ctor)(&params, threads)
}

/// The keys of a registered workload (not `mix`), None for an unknown name.
pub fn keys_of(name: &str) -> Option<&'static [&'static str]> {
    REGISTRY.iter().find(|e| e.name == name).map(|e| e.keys)
}

/// Every registered workload's name (not `mix`), in the registry's order.
pub fn names() -> Vec<&'static str> {
    REGISTRY.iter().map(|e| e.name).collect()
}

/// Every workload: (name, one-line description with its keys and defaults).
pub fn list() -> Vec<(&'static str, &'static str)> {
    REGISTRY
        .iter()
        .map(|e| (e.name, e.description))
        .chain([(mix::NAME, mix::DESCRIPTION)])
        .collect()
}
