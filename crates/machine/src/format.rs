//! The TOML machine format (full reference: docs/machine-format.md).
//!
//! A file either describes a whole machine, or starts from another description and overrides
//! some of its figures:
//!
//! ```toml
//! base = "opteron6272-8n"      # a preset id or another .toml file (relative to this one)
//! # hwloc = "lstopo.xml"       # or an hwloc XML file (relative to this one)
//! id = "opteron6272-8n-fast"
//!
//! [core]
//! concurrency_lines = 10.0
//!
//! [[node]]
//! id = 2
//! ctrl_peak_gbps = 18.0
//! ```
//!
//! Every key carries its unit in its name (`mem_bytes`, `ctrl_peak_gbps`, `idle_local_ns`,
//! `hop_ns`); unknown keys are errors, so a typo never silently leaves a default in place.
//! Loading always ends with [`Machine::validate`], so a file that loads is a usable machine.

use crate::hwloc::{self, HwlocDefaults};
use crate::validate::{self, Problem};
use crate::{
    cpulist, preset, preset_ids, CacheGeom, Coherence, CoreParams, Curve, Link, Machine,
    MachineError, NodeHw, OsCosts, PscConfig, SiblingNumbering, TlbConfig, TlbPool,
};
use numalab_core::{NodeId, NodeInfo, PageSize, Topology};
use serde::Deserialize;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// How many files a chain of `base = "other.toml"` may span; more is taken for a cycle.
const MAX_BASE_DEPTH: usize = 8;

// ---------------------------------------------------------------------------------------------
// The file as written: every key optional, so the same structs serve full files and overrides.
// ---------------------------------------------------------------------------------------------

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRaw {
    base: Option<String>,
    hwloc: Option<String>,
    id: Option<String>,
    description: Option<String>,
    source: Option<String>,
    link_shape: Option<ShapeRaw>,
    coherence: Option<String>,
    link_coherence_overhead: Option<f64>,
    memory_directory: Option<bool>,
    replace_links: Option<bool>,
    core: Option<CoreRaw>,
    distances: Option<DistancesRaw>,
    all_nodes: Option<NodeCommonRaw>,
    node: Option<Vec<NodeRaw>>,
    all_links: Option<AllLinksRaw>,
    link: Option<Vec<LinkRaw>>,
    os: Option<OsRaw>,
}

/// A curve shape by name (`"intel"`, `"amd"`: reference/machines.md §5.2) or as points.
#[derive(Debug, Clone)]
enum ShapeRaw {
    Named(String),
    Points(Vec<(f64, f64)>),
}

/// Deserialise a value that may take one of two forms, with an error that says which forms
/// are accepted (serde's untagged enums only say "did not match any variant").
fn either<'de, D, T>(
    d: D,
    expected: &str,
    from_string: impl FnOnce(String) -> T,
    from_other: impl FnOnce(toml::Value) -> Result<T, toml::de::Error>,
) -> Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
{
    use serde::de::Error;
    match toml::Value::deserialize(d)? {
        toml::Value::String(s) => Ok(from_string(s)),
        v @ (toml::Value::Array(_) | toml::Value::Table(_)) => from_other(v)
            .map_err(|e| D::Error::custom(format!("{}; expected {expected}", e.message().trim()))),
        other => {
            let t = other.type_str();
            let article = if t.starts_with(['a', 'e', 'i', 'o', 'u']) {
                "an"
            } else {
                "a"
            };
            Err(D::Error::custom(format!(
                "found {article} {t}; expected {expected}"
            )))
        }
    }
}

impl<'de> Deserialize<'de> for ShapeRaw {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        either(
            d,
            "\"intel\", \"amd\" or [[utilisation %, ratio], ...]",
            ShapeRaw::Named,
            |v| v.try_into().map(ShapeRaw::Points),
        )
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct CoreRaw {
    ghz: Option<f64>,
    threads_per_core: Option<u32>,
    siblings: Option<SiblingNumbering>,
    concurrency_lines: Option<f64>,
    rob_entries: Option<u32>,
    store_buffer_entries: Option<u32>,
    locked_op_cycles: Option<u32>,
    private_cache: Option<CacheRaw>,
    private_cache_cores: Option<u32>,
    private_hit_ns: Option<f64>,
    llc_hit_ns: Option<f64>,
    tlb: Option<TlbRaw>,
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CacheRaw {
    bytes: Option<u64>,
    ways: Option<u32>,
}

/// `llc = { bytes = ..., ways = ... }` or `llc = "none"`.
#[derive(Debug, Clone)]
enum LlcRaw {
    Cache(CacheRaw),
    Word(String),
}

impl<'de> Deserialize<'de> for LlcRaw {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        either(
            d,
            "{ bytes = ..., ways = ... } or \"none\"",
            LlcRaw::Word,
            |v| v.try_into().map(LlcRaw::Cache),
        )
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlbRaw {
    l1: Option<Vec<PoolRaw>>,
    l2: Option<Vec<PoolRaw>>,
    l2_hit_ns: Option<f64>,
    walk_base_ns: Option<f64>,
    page_walkers: Option<u32>,
    psc: Option<PscRaw>,
}

/// `psc = { pde_entries = 32, pdpte_entries = 4 }` (Intel) or `psc = { unified_entries = 24 }`
/// (AMD).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PscRaw {
    pde_entries: Option<u32>,
    pdpte_entries: Option<u32>,
    unified_entries: Option<u32>,
}

fn psc(raw: PscRaw, old: Option<PscConfig>) -> Result<PscConfig, Problem> {
    match (raw.pde_entries, raw.pdpte_entries, raw.unified_entries) {
        (None, None, Some(entries)) => Ok(PscConfig::Unified { entries }),
        (pde, pdpte, None) if pde.is_some() || pdpte.is_some() => {
            // a level not named keeps the base's size (Intel's default over an AMD base)
            let (d_pde, d_pdpte) = match old {
                Some(PscConfig::Split {
                    pde_entries,
                    pdpte_entries,
                }) => (pde_entries, pdpte_entries),
                _ => (
                    PscConfig::DEFAULT_PDE_ENTRIES,
                    PscConfig::DEFAULT_PDPTE_ENTRIES,
                ),
            };
            Ok(PscConfig::Split {
                pde_entries: pde.unwrap_or(d_pde),
                pdpte_entries: pdpte.unwrap_or(d_pdpte),
            })
        }
        _ => Err(Problem::new(
            "core.tlb.psc",
            "the split form (pde_entries, pdpte_entries) and the unified one (unified_entries) mixed, or no key given",
            "{ pde_entries = N, pdpte_entries = M } (one cache per level, Intel) or { unified_entries = N } (AMD)",
        )),
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct PoolRaw {
    entries: u32,
    /// Absent: fully associative (ways = entries).
    ways: Option<u32>,
    sizes: Vec<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct DistancesRaw {
    matrix: Vec<Vec<u32>>,
}

/// `cpus = "0-11,24-35"` or `cpus = [0, 1, 2]`.
#[derive(Debug, Clone)]
enum CpusRaw {
    List(String),
    Ids(Vec<u32>),
}

impl<'de> Deserialize<'de> for CpusRaw {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        either(
            d,
            "a CPU list such as \"0-11,24-35\" or an array of CPU numbers",
            CpusRaw::List,
            |v| v.try_into().map(CpusRaw::Ids),
        )
    }
}

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeCommonRaw {
    ctrl_peak_gbps: Option<f64>,
    idle_local_ns: Option<f64>,
    curve: Option<Vec<(f64, f64)>>,
    curve_shape: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct NodeRaw {
    id: u16,
    os_index: Option<u32>,
    cpus: Option<CpusRaw>,
    mem_bytes: Option<u64>,
    llc: Option<LlcRaw>,
    ctrl_peak_gbps: Option<f64>,
    idle_local_ns: Option<f64>,
    curve: Option<Vec<(f64, f64)>>,
    curve_shape: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct AllLinksRaw {
    gbps_per_dir: Option<f64>,
    hop_ns: Option<f64>,
    next_hop_ns: Option<f64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct LinkRaw {
    a: u16,
    b: u16,
    gbps_per_dir: Option<f64>,
    hop_ns: Option<f64>,
    next_hop_ns: Option<f64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct OsRaw {
    fault_4k_ns: Option<f64>,
    fault_2m_ns: Option<f64>,
    fault_1g_ns: Option<f64>,
    fault_file_4k_ns: Option<f64>,
    move_pages_base_ns: Option<f64>,
    move_pages_mbps: Option<f64>,
    migrate_pages_base_ns: Option<f64>,
    migrate_pages_mbps: Option<f64>,
    kernel_copy_mbps: Option<f64>,
    thp_migrate_mbps: Option<f64>,
    split_ns: Option<f64>,
    tlb_shootdown_ns: Option<f64>,
    tlb_shootdown_per_cpu_ns: Option<f64>,
    tlb_flush_ipi_ns: Option<f64>,
    sample_ns: Option<f64>,
    signal_ns: Option<f64>,
    mprotect_ns: Option<f64>,
    linux: Option<String>,
    context_switch_ns: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Loading
// ---------------------------------------------------------------------------------------------

/// Read and resolve a machine file.
pub(crate) fn load_file(path: &Path) -> Result<Machine, MachineError> {
    load_file_at_depth(path, 0)
}

fn load_file_at_depth(path: &Path, depth: usize) -> Result<Machine, MachineError> {
    let text = std::fs::read_to_string(path).map_err(|err| MachineError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let origin = path.display().to_string();
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .map(str::to_string);
    parse_at_depth(&text, &origin, path.parent(), stem, depth)
}

/// Resolve machine-file text. `dir` is where relative `base` / `hwloc` paths start (None: the
/// current directory).
pub(crate) fn parse_str(
    text: &str,
    origin: &str,
    dir: Option<&Path>,
) -> Result<Machine, MachineError> {
    parse_at_depth(text, origin, dir, None, 0)
}

fn parse_at_depth(
    text: &str,
    origin: &str,
    dir: Option<&Path>,
    stem: Option<String>,
    depth: usize,
) -> Result<Machine, MachineError> {
    let raw: FileRaw = toml::from_str(text).map_err(|e| MachineError::Parse {
        origin: origin.to_string(),
        message: e.to_string(),
    })?;
    let invalid = |p: Problem| p.into_error(origin.to_string());
    let relative = |p: &str| -> PathBuf {
        let p = Path::new(p);
        match dir {
            Some(d) if p.is_relative() => d.join(p),
            _ => p.to_path_buf(),
        }
    };

    // The starting point: nothing (a full description), a preset, another file, or hwloc XML.
    let mut start: Option<Start> = None;
    match (&raw.base, &raw.hwloc) {
        (Some(_), Some(_)) => {
            return Err(invalid(Problem::new(
                "hwloc",
                "both `base` and `hwloc` are given",
                "one starting point: `base = \"<preset or .toml>\"` or `hwloc = \"<file.xml>\"`",
            )))
        }
        (Some(b), None) => {
            if depth >= MAX_BASE_DEPTH {
                return Err(invalid(Problem::new(
                    "base",
                    format!("the chain of base files is deeper than {MAX_BASE_DEPTH}"),
                    "a chain of base files without a cycle",
                )));
            }
            let machine = if let Some(m) = preset(b) {
                m
            } else if b.to_ascii_lowercase().ends_with(".toml") {
                let path = relative(b);
                if !path.exists() {
                    return Err(invalid(Problem::new(
                        "base",
                        format!("file {} does not exist", path.display()),
                        "a preset id or an existing .toml file, relative to this file",
                    )));
                }
                load_file_at_depth(&path, depth + 1)?
            } else {
                return Err(invalid(Problem::new(
                    "base",
                    format!("'{b}' is not a built-in preset and not a .toml file"),
                    format!(
                        "one of the presets ({}) or a path to a .toml machine file",
                        preset_ids().join(", ")
                    ),
                )));
            };
            start = Some(Start {
                what: format!("base {b}"),
                machine,
                reported_distances: None,
            });
        }
        (None, Some(h)) => {
            let path = relative(h);
            let imported = hwloc::import_detailed(&path, &HwlocDefaults::default())?;
            start = Some(Start {
                what: format!("hwloc {h}"),
                reported_distances: Some(imported.machine.topology.distances.clone()),
                machine: imported.machine,
            });
        }
        (None, None) => {}
    }

    let reported = start.as_ref().and_then(|s| s.reported_distances.clone());
    let machine = resolve(raw, start, stem, origin).map_err(invalid)?;
    if reported.as_ref() == Some(&machine.topology.distances) {
        validate::check_reported(&machine).map_err(invalid)?;
    } else {
        validate::check(&machine).map_err(invalid)?;
    }
    Ok(machine)
}

/// What an override file starts from.
struct Start {
    what: String,
    machine: Machine,
    /// The distance matrix an hwloc import reported: kept as the OS gives it unless the file
    /// replaces it (see `validate::check_reported`).
    reported_distances: Option<Vec<Vec<u32>>>,
}

fn missing(key: impl Into<String>, expected: &str) -> Problem {
    Problem::new(key, "missing", expected)
}

/// `new`, else `old`, else the error for a required key.
fn pick<T>(new: Option<T>, old: Option<T>, key: &str, expected: &str) -> Result<T, Problem> {
    new.or(old).ok_or_else(|| missing(key, expected))
}

fn named_shape(key: &str, name: &str) -> Result<Curve, Problem> {
    match name.to_ascii_lowercase().as_str() {
        "intel" => Ok(Curve::intel_shape()),
        "amd" => Ok(Curve::amd_shape()),
        _ => Err(Problem::new(
            key,
            format!("unknown shape '{name}'"),
            "\"intel\" or \"amd\" (reference/machines.md §5.2)",
        )),
    }
}

fn page_sizes(key: &str, sizes: &[String]) -> Result<Vec<PageSize>, Problem> {
    sizes
        .iter()
        .map(|s| {
            s.parse::<PageSize>()
                .map_err(|e| Problem::new(key, e, "page sizes \"4K\", \"2M\", \"1G\""))
        })
        .collect()
}

fn pools(key: &str, raw: Vec<PoolRaw>) -> Result<Vec<TlbPool>, Problem> {
    raw.into_iter()
        .enumerate()
        .map(|(i, p)| {
            Ok(TlbPool {
                entries: p.entries,
                ways: p.ways.unwrap_or(p.entries),
                sizes: page_sizes(&format!("{key}[{i}].sizes"), &p.sizes)?,
            })
        })
        .collect()
}

fn cache(key: &str, raw: Option<CacheRaw>, old: Option<&CacheGeom>) -> Result<CacheGeom, Problem> {
    let raw = raw.unwrap_or_default();
    Ok(CacheGeom {
        bytes: pick(
            raw.bytes,
            old.map(|c| c.bytes),
            &format!("{key}.bytes"),
            "the cache size in bytes",
        )?,
        ways: pick(
            raw.ways,
            old.map(|c| c.ways),
            &format!("{key}.ways"),
            "the associativity (ways)",
        )?,
    })
}

/// Apply the file to its starting point (or build from nothing).
fn resolve(
    raw: FileRaw,
    start: Option<Start>,
    stem: Option<String>,
    origin: &str,
) -> Result<Machine, Problem> {
    let (base, what) = match start {
        Some(s) => (Some(s.machine), Some(s.what)),
        None => (None, None),
    };
    let b = base.as_ref();

    // Identity. An override without its own id is named after its file, so it cannot be
    // mistaken for the machine it starts from.
    let id = match (raw.id, b) {
        (Some(id), _) => id,
        (None, Some(bm)) => stem.unwrap_or_else(|| bm.id.clone()),
        (None, None) => {
            return Err(missing(
                "id",
                "a short machine name such as \"xeon-gold6130-2n\"",
            ))
        }
    };
    let description = match (raw.description, b) {
        (Some(d), _) => d,
        (None, Some(bm)) => format!("{} (with overrides from {origin})", bm.description),
        (None, None) => String::new(),
    };
    let source = match (raw.source, b, &what) {
        (Some(s), _, _) => s,
        (None, Some(bm), Some(w)) if !bm.source.is_empty() => {
            format!("{}; {w}, overrides in {origin}", bm.source)
        }
        (None, _, Some(w)) => format!("{w}, overrides in {origin}"),
        (None, _, None) => String::new(),
    };

    // Core.
    let rc = raw.core.unwrap_or_default();
    let oc = b.map(|m| &m.core);
    let rt = rc.tlb.unwrap_or_default();
    let ot = oc.map(|c| &c.tlb);
    let tlb = TlbConfig {
        l1: match rt.l1 {
            Some(p) => pools("core.tlb.l1", p)?,
            None => pick(
                None,
                ot.map(|t| t.l1.clone()),
                "core.tlb.l1",
                "a list of L1 DTLB pools",
            )?,
        },
        l2: match rt.l2 {
            Some(p) => pools("core.tlb.l2", p)?,
            None => ot.map(|t| t.l2.clone()).unwrap_or_default(),
        },
        l2_hit_ns: pick(
            rt.l2_hit_ns,
            ot.map(|t| t.l2_hit_ns),
            "core.tlb.l2_hit_ns",
            "the extra latency of an L2 TLB hit in ns",
        )?,
        walk_base_ns: pick(
            rt.walk_base_ns,
            ot.map(|t| t.walk_base_ns),
            "core.tlb.walk_base_ns",
            "the fixed page-walk cost in ns",
        )?,
        page_walkers: rt
            .page_walkers
            .or(ot.map(|t| t.page_walkers))
            .unwrap_or(crate::DEFAULT_PAGE_WALKERS),
        psc: match rt.psc {
            Some(raw) => psc(raw, ot.map(|t| t.psc))?,
            None => ot.map(|t| t.psc).unwrap_or_default(),
        },
    };
    let core = CoreParams {
        ghz: pick(
            rc.ghz,
            oc.map(|c| c.ghz),
            "core.ghz",
            "the core clock in GHz",
        )?,
        siblings: rc.siblings.or(oc.map(|c| c.siblings)).unwrap_or_default(),
        concurrency_lines: pick(
            rc.concurrency_lines,
            oc.map(|c| c.concurrency_lines),
            "core.concurrency_lines",
            "the misses one core keeps in flight",
        )?,
        rob_entries: rc
            .rob_entries
            .or(oc.map(|c| c.rob_entries))
            .unwrap_or(crate::DEFAULT_ROB_ENTRIES),
        store_buffer_entries: rc
            .store_buffer_entries
            .or(oc.map(|c| c.store_buffer_entries))
            .unwrap_or(crate::DEFAULT_STORE_BUFFER_ENTRIES),
        locked_op_cycles: rc
            .locked_op_cycles
            .or(oc.map(|c| c.locked_op_cycles))
            .unwrap_or(crate::DEFAULT_LOCKED_OP_CYCLES),
        private_cache: cache(
            "core.private_cache",
            rc.private_cache,
            oc.map(|c| &c.private_cache),
        )?,
        private_cache_cores: rc
            .private_cache_cores
            .or(oc.map(|c| c.private_cache_cores))
            .unwrap_or(1),
        private_hit_ns: pick(
            rc.private_hit_ns,
            oc.map(|c| c.private_hit_ns),
            "core.private_hit_ns",
            "the L2 hit latency in ns",
        )?,
        llc_hit_ns: pick(
            rc.llc_hit_ns,
            oc.map(|c| c.llc_hit_ns),
            "core.llc_hit_ns",
            "the LLC hit latency in ns",
        )?,
        tlb,
    };
    let smt = pick(
        rc.threads_per_core,
        b.map(|m| m.topology.smt),
        "core.threads_per_core",
        "hardware threads per core (1 = no SMT)",
    )?;

    // Nodes: start from the base's, apply [all_nodes], then each [[node]] (which may append).
    let all = raw.all_nodes.unwrap_or_default();
    if all.curve.is_some() && all.curve_shape.is_some() {
        return Err(Problem::new(
            "all_nodes.curve_shape",
            "both curve and curve_shape given",
            "one of them",
        ));
    }
    let mut infos: Vec<NodeInfo> = b.map(|m| m.topology.nodes.clone()).unwrap_or_default();
    let mut hws: Vec<Option<NodeHw>> = b
        .map(|m| m.nodes.iter().cloned().map(Some).collect())
        .unwrap_or_default();
    let mut node_raws: Vec<Option<NodeRaw>> = (0..infos.len()).map(|_| None).collect();
    for nr in raw.node.unwrap_or_default() {
        let i = usize::from(nr.id);
        if i < node_raws.len() {
            if node_raws[i].is_some() {
                return Err(Problem::new(
                    format!("node[{i}].id"),
                    format!("node {i} is given twice"),
                    "one [[node]] table per node id",
                ));
            }
            node_raws[i] = Some(nr);
        } else if i == node_raws.len() {
            node_raws.push(Some(nr));
            hws.push(None);
            infos.push(NodeInfo {
                id: NodeId(nr_id(i)),
                cpus: Vec::new(),
                mem_bytes: 0,
            });
        } else {
            return Err(Problem::new(
                format!("node[{i}].id"),
                format!("node id {i} skips id {}", node_raws.len()),
                "new nodes numbered densely after the existing ones, in order",
            ));
        }
    }
    let mut nodes = Vec::with_capacity(hws.len());
    for (i, (nr, old)) in node_raws.into_iter().zip(hws).enumerate() {
        let k = |s: &str| format!("node[{i}].{s}");
        let is_new = old.is_none();
        let nr = nr.unwrap_or(NodeRaw {
            id: nr_id(i),
            os_index: None,
            cpus: None,
            mem_bytes: None,
            llc: None,
            ctrl_peak_gbps: None,
            idle_local_ns: None,
            curve: None,
            curve_shape: None,
        });
        let info = &mut infos[i];
        match nr.cpus {
            Some(CpusRaw::List(s)) => {
                info.cpus = cpulist::parse(&s).map_err(|e| {
                    Problem::new(
                        k("cpus"),
                        e,
                        "a CPU list like \"0-11,24-35\" (\"\" for none)",
                    )
                })?
            }
            Some(CpusRaw::Ids(v)) => {
                let mut c: Vec<_> = v.into_iter().map(numalab_core::CpuId).collect();
                c.sort();
                info.cpus = c;
            }
            None if is_new => {
                return Err(missing(
                    k("cpus"),
                    "the node's CPUs, e.g. \"0-11\" (\"\" for a CPU-less node)",
                ))
            }
            None => {}
        }
        match nr.mem_bytes {
            Some(v) => info.mem_bytes = v,
            None if is_new => return Err(missing(k("mem_bytes"), "the node's memory in bytes")),
            None => {}
        }
        let llc =
            match nr.llc {
                Some(LlcRaw::Word(w)) if w.eq_ignore_ascii_case("none") => None,
                Some(LlcRaw::Word(w)) => {
                    return Err(Problem::new(
                        k("llc"),
                        format!("'{w}'"),
                        "{ bytes = ..., ways = ... } or \"none\"",
                    ));
                }
                Some(LlcRaw::Cache(c)) => Some(cache(
                    &k("llc"),
                    Some(c),
                    old.as_ref().and_then(|o| o.llc.as_ref()),
                )?),
                None if is_new && !info.cpus.is_empty() => return Err(missing(
                    k("llc"),
                    "{ bytes = ..., ways = ... }, or \"none\" for a node without a shared cache",
                )),
                None => old.as_ref().and_then(|o| o.llc.clone()),
            };
        let ctrl_peak_gbps = pick(
            nr.ctrl_peak_gbps.or(all.ctrl_peak_gbps),
            old.as_ref().map(|o| o.ctrl_peak_gbps),
            &k("ctrl_peak_gbps"),
            "the sustained controller peak in GB/s",
        )?;
        let idle_local_ns = pick(
            nr.idle_local_ns.or(all.idle_local_ns),
            old.as_ref().map(|o| o.idle_local_ns),
            &k("idle_local_ns"),
            "the idle local latency in ns",
        )?;
        if nr.curve.is_some() && nr.curve_shape.is_some() {
            return Err(Problem::new(
                k("curve_shape"),
                "both curve and curve_shape given",
                "one of them",
            ));
        }
        let curve = if let Some(p) = nr.curve {
            Curve { points: p }
        } else if let Some(s) = &nr.curve_shape {
            named_shape(&k("curve_shape"), s)?.scaled(idle_local_ns)
        } else if let Some(p) = &all.curve {
            Curve { points: p.clone() }
        } else if let Some(s) = &all.curve_shape {
            named_shape("all_nodes.curve_shape", s)?.scaled(idle_local_ns)
        } else if let Some(o) = &old {
            // A new idle latency without a new curve keeps the curve's shape: every point
            // scales by new idle ÷ old idle.
            if idle_local_ns == o.idle_local_ns {
                o.curve.clone()
            } else {
                let f = idle_local_ns / o.idle_local_ns;
                Curve {
                    points: o.curve.points.iter().map(|&(u, v)| (u, v * f)).collect(),
                }
            }
        } else {
            return Err(missing(
                k("curve"),
                "[[utilisation %, latency ns], ...] or curve_shape = \"intel\" / \"amd\"",
            ));
        };
        let os_index = nr.os_index.or(old.as_ref().and_then(|o| o.os_index));
        nodes.push(NodeHw {
            llc,
            ctrl_peak_gbps,
            idle_local_ns,
            curve,
            os_index,
        });
    }
    let n = nodes.len();

    let distances = match (raw.distances, b) {
        (Some(d), _) => d.matrix,
        (None, Some(bm)) => bm.topology.distances.clone(),
        (None, None) if n == 1 => vec![vec![10]],
        (None, None) => {
            return Err(missing(
                "distances.matrix",
                "an N×N SLIT-like matrix (10 = local), one row per node",
            ))
        }
    };
    let topology = Topology {
        nodes: infos,
        distances,
        smt,
    };

    // Links.
    let replace = raw.replace_links.unwrap_or(false) || b.is_none();
    let mut links: Vec<Link> = if replace {
        Vec::new()
    } else {
        b.map(|m| m.links.clone()).unwrap_or_default()
    };
    if let Some(al) = &raw.all_links {
        for l in &mut links {
            l.gbps_per_dir = al.gbps_per_dir.unwrap_or(l.gbps_per_dir);
            l.hop_ns = al.hop_ns.unwrap_or(l.hop_ns);
            l.next_hop_ns = al.next_hop_ns.or(l.next_hop_ns);
        }
    }
    let link_raws = raw.link.unwrap_or_default();
    let al = raw.all_links.unwrap_or_default();
    for (i, lr) in link_raws.into_iter().enumerate() {
        let k = |s: &str| format!("link[{i}].{s}");
        let (a, bn) = (lr.a.min(lr.b), lr.a.max(lr.b));
        let existing = links
            .iter_mut()
            .find(|l| l.a.0.min(l.b.0) == a && l.a.0.max(l.b.0) == bn);
        match existing {
            Some(l) => {
                l.gbps_per_dir = lr.gbps_per_dir.unwrap_or(l.gbps_per_dir);
                l.hop_ns = lr.hop_ns.unwrap_or(l.hop_ns);
                l.next_hop_ns = lr.next_hop_ns.or(l.next_hop_ns);
            }
            None => links.push(Link {
                a: NodeId(lr.a),
                b: NodeId(lr.b),
                gbps_per_dir: pick(
                    lr.gbps_per_dir.or(al.gbps_per_dir),
                    None,
                    &k("gbps_per_dir"),
                    "effective GB/s per direction",
                )?,
                hop_ns: pick(
                    lr.hop_ns.or(al.hop_ns),
                    None,
                    &k("hop_ns"),
                    "the latency the hop adds in ns",
                )?,
                next_hop_ns: lr.next_hop_ns.or(al.next_hop_ns),
            }),
        }
    }

    let link_shape = match raw.link_shape {
        Some(ShapeRaw::Named(s)) => named_shape("link_shape", &s)?,
        Some(ShapeRaw::Points(p)) => Curve { points: p },
        None => pick(
            None,
            b.map(|m| m.link_shape.clone()),
            "link_shape",
            "\"intel\", \"amd\" or [[utilisation %, ratio], ...]",
        )?,
    };
    // A machine without the key keeps its base's protocol, or the flat factor.
    let coherence = match raw.coherence.as_deref() {
        Some(name) => Coherence::parse(name).ok_or_else(|| {
            Problem::new(
                "coherence",
                format!("unknown protocol '{name}'"),
                Coherence::NAMES,
            )
        })?,
        None => b.map(|m| m.coherence).unwrap_or_default(),
    };
    let link_coherence_overhead = if coherence == Coherence::Flat {
        // a base with another protocol has no flat factor to inherit
        pick(
            raw.link_coherence_overhead,
            b.filter(|m| m.coherence == Coherence::Flat)
                .map(|m| m.link_coherence_overhead),
            "link_coherence_overhead",
            "the coherence traffic added to link payload as a fraction (0.1 Intel, 0.2 Opteron)",
        )?
    } else if raw.link_coherence_overhead.is_some() {
        return Err(Problem::new(
            "link_coherence_overhead",
            format!(
                "set, but coherence = \"{}\" counts its protocol's messages on the links",
                coherence.name()
            ),
            "no link_coherence_overhead, or coherence = \"flat\" with it",
        ));
    } else {
        0.0
    };

    // Optional: a machine without the key has no memory directory (snooping or probes only).
    let memory_directory = raw
        .memory_directory
        .or(b.map(|m| m.memory_directory))
        .unwrap_or(false);

    let ro = raw.os.unwrap_or_default();
    let oo = b.map(|m| m.os.clone()).unwrap_or_else(OsCosts::reference);
    let os = OsCosts {
        fault_4k_ns: ro.fault_4k_ns.unwrap_or(oo.fault_4k_ns),
        fault_2m_ns: ro.fault_2m_ns.unwrap_or(oo.fault_2m_ns),
        fault_1g_ns: ro.fault_1g_ns.unwrap_or(oo.fault_1g_ns),
        fault_file_4k_ns: ro.fault_file_4k_ns.unwrap_or(oo.fault_file_4k_ns),
        move_pages_base_ns: ro.move_pages_base_ns.unwrap_or(oo.move_pages_base_ns),
        move_pages_mbps: ro.move_pages_mbps.unwrap_or(oo.move_pages_mbps),
        migrate_pages_base_ns: ro.migrate_pages_base_ns.unwrap_or(oo.migrate_pages_base_ns),
        migrate_pages_mbps: ro.migrate_pages_mbps.unwrap_or(oo.migrate_pages_mbps),
        kernel_copy_mbps: ro.kernel_copy_mbps.unwrap_or(oo.kernel_copy_mbps),
        thp_migrate_mbps: ro.thp_migrate_mbps.unwrap_or(oo.thp_migrate_mbps),
        split_ns: ro.split_ns.unwrap_or(oo.split_ns),
        tlb_shootdown_ns: ro.tlb_shootdown_ns.unwrap_or(oo.tlb_shootdown_ns),
        tlb_shootdown_per_cpu_ns: ro
            .tlb_shootdown_per_cpu_ns
            .unwrap_or(oo.tlb_shootdown_per_cpu_ns),
        tlb_flush_ipi_ns: ro.tlb_flush_ipi_ns.unwrap_or(oo.tlb_flush_ipi_ns),
        sample_ns: ro.sample_ns.unwrap_or(oo.sample_ns),
        signal_ns: ro.signal_ns.unwrap_or(oo.signal_ns),
        mprotect_ns: ro.mprotect_ns.unwrap_or(oo.mprotect_ns),
        linux: ro.linux.unwrap_or(oo.linux),
        context_switch_ns: ro.context_switch_ns.unwrap_or(oo.context_switch_ns),
    };

    Ok(Machine {
        id,
        description,
        source,
        topology,
        core,
        nodes,
        links,
        link_shape,
        coherence,
        link_coherence_overhead,
        memory_directory,
        os,
    })
}

/// Node ids are u16 throughout numalab; the format never gets near the limit.
fn nr_id(i: usize) -> u16 {
    u16::try_from(i).expect("node ids fit in u16")
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// A float as TOML that parses back to exactly the same f64 (Rust's shortest round-trip form,
/// with a `.0` so it reads as a float).
fn num(v: f64) -> String {
    if v.is_nan() {
        return "nan".to_string();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.to_string();
    }
    let s = format!("{v:?}");
    if s.contains('.') || s.contains('e') {
        s
    } else {
        format!("{s}.0")
    }
}

fn string(s: &str) -> String {
    toml::Value::String(s.to_string()).to_string()
}

fn points(c: &Curve) -> String {
    let p: Vec<String> = c
        .points
        .iter()
        .map(|&(u, v)| format!("[{}, {}]", num(u), num(v)))
        .collect();
    format!("[{}]", p.join(", "))
}

fn shape(c: &Curve) -> String {
    if *c == Curve::intel_shape() {
        string("intel")
    } else if *c == Curve::amd_shape() {
        string("amd")
    } else {
        points(c)
    }
}

fn pool_list(pools: &[TlbPool]) -> String {
    if pools.is_empty() {
        return "[]".to_string();
    }
    let mut s = String::from("[\n");
    for p in pools {
        let sizes: Vec<String> = p.sizes.iter().map(|z| string(&z.to_string())).collect();
        let _ = writeln!(
            s,
            "  {{ entries = {}, ways = {}, sizes = [{}] }},",
            p.entries,
            p.ways,
            sizes.join(", ")
        );
    }
    s.push(']');
    s
}

/// Serialise a machine as a complete machine file.
pub(crate) fn to_toml(m: &Machine) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "# numalab machine file (format: docs/machine-format.md)");
    let _ = writeln!(s, "id = {}", string(&m.id));
    let _ = writeln!(s, "description = {}", string(&m.description));
    let _ = writeln!(s, "source = {}", string(&m.source));
    let _ = writeln!(s, "link_shape = {}", shape(&m.link_shape));
    let _ = writeln!(s, "coherence = {}", string(m.coherence.name()));
    if m.coherence == Coherence::Flat {
        let _ = writeln!(
            s,
            "link_coherence_overhead = {}",
            num(m.link_coherence_overhead)
        );
    }
    let _ = writeln!(s, "memory_directory = {}", m.memory_directory);

    let c = &m.core;
    let _ = writeln!(s, "\n[core]");
    let _ = writeln!(s, "ghz = {}", num(c.ghz));
    let _ = writeln!(s, "threads_per_core = {}", m.topology.smt);
    let _ = writeln!(s, "siblings = {}", string(c.siblings.name()));
    let _ = writeln!(s, "concurrency_lines = {}", num(c.concurrency_lines));
    let _ = writeln!(s, "rob_entries = {}", c.rob_entries);
    let _ = writeln!(s, "store_buffer_entries = {}", c.store_buffer_entries);
    let _ = writeln!(s, "locked_op_cycles = {}", c.locked_op_cycles);
    let _ = writeln!(
        s,
        "private_cache = {{ bytes = {}, ways = {} }}",
        c.private_cache.bytes, c.private_cache.ways
    );
    let _ = writeln!(s, "private_cache_cores = {}", c.private_cache_cores);
    let _ = writeln!(s, "private_hit_ns = {}", num(c.private_hit_ns));
    let _ = writeln!(s, "llc_hit_ns = {}", num(c.llc_hit_ns));
    let _ = writeln!(s, "\n[core.tlb]");
    let _ = writeln!(s, "l2_hit_ns = {}", num(c.tlb.l2_hit_ns));
    let _ = writeln!(s, "walk_base_ns = {}", num(c.tlb.walk_base_ns));
    let _ = writeln!(s, "page_walkers = {}", c.tlb.page_walkers);
    let _ = match c.tlb.psc {
        PscConfig::Split {
            pde_entries,
            pdpte_entries,
        } => writeln!(
            s,
            "psc = {{ pde_entries = {pde_entries}, pdpte_entries = {pdpte_entries} }}"
        ),
        PscConfig::Unified { entries } => writeln!(s, "psc = {{ unified_entries = {entries} }}"),
    };
    let _ = writeln!(s, "l1 = {}", pool_list(&c.tlb.l1));
    let _ = writeln!(s, "l2 = {}", pool_list(&c.tlb.l2));

    let _ = writeln!(s, "\n[distances]\nmatrix = [");
    for row in &m.topology.distances {
        let r: Vec<String> = row.iter().map(u32::to_string).collect();
        let _ = writeln!(s, "  [{}],", r.join(", "));
    }
    let _ = writeln!(s, "]");

    for (info, hw) in m.topology.nodes.iter().zip(&m.nodes) {
        let _ = writeln!(s, "\n[[node]]");
        let _ = writeln!(s, "id = {}", info.id.0);
        if let Some(os) = hw.os_index {
            let _ = writeln!(s, "os_index = {os}");
        }
        let _ = writeln!(s, "cpus = {}", string(&cpulist::format(&info.cpus)));
        let _ = writeln!(s, "mem_bytes = {}", info.mem_bytes);
        match &hw.llc {
            Some(g) => {
                let _ = writeln!(s, "llc = {{ bytes = {}, ways = {} }}", g.bytes, g.ways);
            }
            None => {
                let _ = writeln!(s, "llc = \"none\"");
            }
        }
        let _ = writeln!(s, "ctrl_peak_gbps = {}", num(hw.ctrl_peak_gbps));
        let _ = writeln!(s, "idle_local_ns = {}", num(hw.idle_local_ns));
        let _ = writeln!(s, "curve = {}", points(&hw.curve));
    }

    for l in &m.links {
        let _ = writeln!(s, "\n[[link]]");
        let _ = writeln!(s, "a = {}\nb = {}", l.a.0, l.b.0);
        let _ = writeln!(s, "gbps_per_dir = {}", num(l.gbps_per_dir));
        let _ = writeln!(s, "hop_ns = {}", num(l.hop_ns));
        if let Some(v) = l.next_hop_ns {
            let _ = writeln!(s, "next_hop_ns = {}", num(v));
        }
    }

    let o = &m.os;
    let _ = writeln!(s, "\n[os]");
    for (k, v) in [
        ("fault_4k_ns", o.fault_4k_ns),
        ("fault_2m_ns", o.fault_2m_ns),
        ("fault_1g_ns", o.fault_1g_ns),
        ("fault_file_4k_ns", o.fault_file_4k_ns),
        ("move_pages_base_ns", o.move_pages_base_ns),
        ("move_pages_mbps", o.move_pages_mbps),
        ("migrate_pages_base_ns", o.migrate_pages_base_ns),
        ("migrate_pages_mbps", o.migrate_pages_mbps),
        ("kernel_copy_mbps", o.kernel_copy_mbps),
        ("thp_migrate_mbps", o.thp_migrate_mbps),
        ("split_ns", o.split_ns),
        ("tlb_shootdown_ns", o.tlb_shootdown_ns),
        ("tlb_shootdown_per_cpu_ns", o.tlb_shootdown_per_cpu_ns),
        ("tlb_flush_ipi_ns", o.tlb_flush_ipi_ns),
        ("sample_ns", o.sample_ns),
        ("signal_ns", o.signal_ns),
        ("mprotect_ns", o.mprotect_ns),
        ("context_switch_ns", o.context_switch_ns),
    ] {
        let _ = writeln!(s, "{k} = {}", num(v));
    }
    let _ = writeln!(s, "linux = \"{}\"", o.linux.escape_default());
    s
}
