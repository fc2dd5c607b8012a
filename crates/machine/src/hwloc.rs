//! Import of hwloc XML topologies (`lstopo --of xml`; reference/machines.md §8).
//!
//! Formats: hwloc 2.x files (`<topology version="2.0">` / `"3.0"`, NUMA nodes as memory
//! children, `<distances2>`, `<memattr>`) and hwloc 1.x files (no version, NUMA nodes in the
//! main tree, `<distances latency_base=...>` with normalised `<latency>` children).
//!
//! What hwloc gives and how it is used:
//! - NUMA nodes (by `os_index`, renumbered densely 0..n in OS order; the OS number is kept in
//!   [`NodeHw::os_index`]), their memory (`local_memory`) and local CPUs (`cpuset`). A node
//!   whose CPUs all belong to a closer node (CXL, HBM, NVDIMM memory attached to a package or
//!   the machine) becomes a CPU-less memory node. A file without NUMANode objects becomes one
//!   node holding every PU.
//! - Disallowed PUs and nodes (`allowed_cpuset` / `allowed_nodeset` of the Machine object,
//!   e.g. a file written inside a cgroup) are left out. An allowed PU whose node is disallowed
//!   has no local memory the model could place, so it is left out too (the description says so).
//! - SMT = PUs ÷ cores. The private cache is the highest-level data cache private to a core
//!   (normally the L2); the LLC of a node is the next level up, summed over the LLCs the node's
//!   CPUs use (so one node spanning 4 packages gets 4 L3s) or the node's share of an LLC that
//!   spans several nodes. `cache_associativity` −1 = fully associative, 0 = unknown
//!   ([`HwlocDefaults::cache_ways_when_unknown`]).
//! - Distances only give hop structure, never nanoseconds (SLIT is not ns, §8): the smallest
//!   remote value is one hop, a direct link; every pair at the next tier must then have a
//!   common neighbour. Where that does not fit (sub-NUMA clustering, cluster-on-die,
//!   multi-level or asymmetric matrices) the links are derived from the matrix: every pair of
//!   CPU nodes linked directly, latency proportional to distance (`cpu_node_links`), which a
//!   TOML file with `hwloc = ...` and `[[link]]` tables can replace. An all-equal matrix, or
//!   none at all, gives a full mesh. A CPU-less node is linked to the CPU node(s) nearest to it.
//!   The matrix is kept as reported, even where a local distance is not its row's smallest.
//! - Memory attributes (hwloc ≥ 2.3, from ACPI HMAT or `hwloc-annotate`): `Latency` (else
//!   `ReadLatency`), ns, and `Bandwidth` (else `ReadBandwidth`), MiB/s, per (initiator node,
//!   target node). Local values set `idle_local_ns` and `ctrl_peak_gbps`; values between linked
//!   nodes set the link's `hop_ns` (remote − local latency) and `gbps_per_dir`.
//!
//! Everything else (core clock, concurrency, TLBs, latencies and bandwidths without memory
//! attributes, curves, OS costs) comes from [`HwlocDefaults`]: documented estimates, to be
//! replaced by calibration (reference/machines.md §7) through a TOML override file.
//!
//! The import has two halves: [`parse_str`] reads the XML into a [`ParsedTopology`] (PUs, cores,
//! packages, nodes, caches, distances, memory attributes, allowed sets), and
//! [`import_parsed`] builds the machine from it. Other sources fill a [`ParsedTopology`] and get
//! the same machine-building rules: `numalab_place::machine_file` does so from the kernel's sysfs.

use crate::{
    CacheGeom, CoreParams, Curve, Link, Machine, MachineError, NodeHw, OsCosts, SiblingNumbering,
    TlbConfig, TlbPool,
};
use numalab_core::{CpuId, NodeId, NodeInfo, PageSize, Topology};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// Figures hwloc does not provide, used for every imported machine unless a TOML file with
/// `hwloc = "..."` overrides them. All are estimates (E) for a recent 2-socket x86 server
/// (Skylake-SP class, reference/machines.md §2 and §4); the values are listed in
/// docs/machine-format.md.
#[derive(Clone, Debug, PartialEq)]
pub struct HwlocDefaults {
    /// Core clock, GHz (converts cycle counts; hwloc does not record frequencies). 2.5.
    pub ghz: f64,
    /// Misses in flight per core (§5.4, "≈ 16-20 for Haswell and later"). 16.
    pub concurrency_lines: f64,
    /// Reorder-buffer entries per core: 224, Skylake-SP's (Intel optimization manual,
    /// §2.6.1), as the other defaults.
    pub rob_entries: u32,
    /// Store-buffer entries per core: 56, Skylake-SP's (Intel optimization manual, §2.6.1).
    pub store_buffer_entries: u32,
    /// A locked read-modify-write on a line in the L1, cycles: 19 ([`crate::DEFAULT_LOCKED_OP_CYCLES`]).
    pub locked_op_cycles: u32,
    /// Private cache when the file has no per-core L2: 1 MiB, 16-way (Skylake-SP L2).
    pub private_cache: CacheGeom,
    /// Load-to-use latency of a private-cache hit, ns: 14 cycles at 2.5 GHz = 5.6.
    pub private_hit_ns: f64,
    /// Load-to-use latency of an LLC hit, ns: 65 cycles at 2.5 GHz = 26.
    pub llc_hit_ns: f64,
    /// Associativity used when `cache_associativity` is 0 (unknown). 16.
    pub cache_ways_when_unknown: u32,
    /// Per-core TLBs: the Skylake-SP row of §2 (L1 64 × 4K 4-way, 32 × 2M 4-way, 4 × 1G;
    /// STLB 1536 × 4K/2M 12-way, 16 × 1G 4-way; L2 hit 2.8 ns, walk base 4 ns).
    pub tlb: TlbConfig,
    /// Idle local DRAM latency when there is no `Latency` memory attribute, ns. 90.
    pub idle_local_ns: f64,
    /// Sustained controller peak per CPU node without a `Bandwidth` attribute, GB/s. 50
    /// (a mid-range DDR4 socket; 6-channel Skylake-SP sustains ≈ 105).
    pub ctrl_peak_gbps: f64,
    /// Latency one hop between CPU nodes adds, ns. 50 (2-socket Skylake-SP: +50-54, §5.3).
    pub hop_ns: f64,
    /// Effective bandwidth per direction of a link between CPU nodes, GB/s. 34 (2 UPI links).
    pub link_gbps_per_dir: f64,
    /// Controller peak of a CPU-less memory node (CXL, HBM, NVDIMM), GB/s. 30 (a CXL type-3
    /// DDR5 expander behind x8 PCIe 5).
    pub memory_only_ctrl_peak_gbps: f64,
    /// Latency the link to a CPU-less node adds, ns. 80 (CXL memory: +70-90 ns over local DRAM).
    pub memory_only_hop_ns: f64,
    /// Bandwidth per direction of the link to a CPU-less node, GB/s. 25 (x8 PCIe 5 / CXL 2.0).
    pub memory_only_link_gbps_per_dir: f64,
    /// Normalised controller curve, scaled to each node's idle latency: the Intel shape (§5.2).
    pub curve_shape: Curve,
    /// Normalised link queueing shape: the Intel shape (§5.2).
    pub link_shape: Curve,
    /// Coherence traffic on links as a fraction of payload: 0.1 (§5.3, Intel).
    pub link_coherence_overhead: f64,
    /// Whether the sockets keep an in-memory coherence directory: false (hwloc does not say
    /// how sockets keep coherence; without a directory no directory writes are added).
    pub memory_directory: bool,
    /// Remote distance written into the matrix when the file has none. 20.
    pub remote_distance_when_missing: u32,
    /// Memory of a NUMA node without `local_memory`, bytes. 16 GiB.
    pub mem_bytes_when_missing: u64,
    /// OS costs: [`OsCosts::reference`] (policies.md §10).
    pub os: OsCosts,
}

impl Default for HwlocDefaults {
    fn default() -> Self {
        let ghz = 2.5;
        HwlocDefaults {
            ghz,
            concurrency_lines: 16.0,
            rob_entries: 224,
            store_buffer_entries: 56,
            locked_op_cycles: crate::DEFAULT_LOCKED_OP_CYCLES,
            private_cache: CacheGeom {
                bytes: 1 << 20,
                ways: 16,
            },
            private_hit_ns: 14.0 / ghz,
            llc_hit_ns: 65.0 / ghz,
            cache_ways_when_unknown: 16,
            tlb: TlbConfig {
                l1: vec![
                    TlbPool {
                        entries: 64,
                        ways: 4,
                        sizes: vec![PageSize::Base4K],
                    },
                    TlbPool {
                        entries: 32,
                        ways: 4,
                        sizes: vec![PageSize::Huge2M],
                    },
                    TlbPool {
                        entries: 4,
                        ways: 4,
                        sizes: vec![PageSize::Giant1G],
                    },
                ],
                l2: vec![
                    TlbPool {
                        entries: 1536,
                        ways: 12,
                        sizes: vec![PageSize::Base4K, PageSize::Huge2M],
                    },
                    TlbPool {
                        entries: 16,
                        ways: 4,
                        sizes: vec![PageSize::Giant1G],
                    },
                ],
                l2_hit_ns: 7.0 / ghz,
                walk_base_ns: 4.0,
                // the Broadwell-like default's one page-miss handler
                page_walkers: crate::DEFAULT_PAGE_WALKERS,
                psc: crate::PscConfig::DEFAULT,
            },
            idle_local_ns: 90.0,
            ctrl_peak_gbps: 50.0,
            hop_ns: 50.0,
            link_gbps_per_dir: 34.0,
            memory_only_ctrl_peak_gbps: 30.0,
            memory_only_hop_ns: 80.0,
            memory_only_link_gbps_per_dir: 25.0,
            curve_shape: Curve::intel_shape(),
            link_shape: Curve::intel_shape(),
            link_coherence_overhead: 0.1,
            memory_directory: false,
            remote_distance_when_missing: 20,
            mem_bytes_when_missing: 16 << 30,
            os: OsCosts::reference(),
        }
    }
}

/// An import and what the importer assumed.
#[derive(Clone, Debug)]
pub struct Imported {
    pub machine: Machine,
    /// Set when the distance matrix does not determine one-hop links (a pair at the second tier
    /// without a common one-hop neighbour, ...): why. The links between CPU nodes are then the
    /// derived model (every pair linked directly, latency proportional to distance;
    /// docs/machine-format.md); a TOML override with `replace_links = true` and `[[link]]`
    /// tables can give the real ones.
    pub links_derived: Option<String>,
    /// What the importer assumed or left out, also written into the machine's description.
    pub notes: Vec<String>,
}

/// Import an `lstopo --of xml` file with `defaults` for what hwloc does not know, and validate
/// the result.
pub fn import_file(path: &Path, defaults: &HwlocDefaults) -> Result<Machine, MachineError> {
    let origin = path.display().to_string();
    finish(import_detailed(path, defaults)?, &origin)
}

/// Import XML text; `origin` names it in errors, `id` becomes the machine id.
pub fn import_str(
    xml: &str,
    origin: &str,
    id: &str,
    defaults: &HwlocDefaults,
) -> Result<Machine, MachineError> {
    finish(import_str_detailed(xml, origin, id, defaults)?, origin)
}

/// Make a machine of a parsed topology from any source (see [`import_parsed_detailed`]) and
/// validate it. Where the distances do not determine the links, the note on the derived links
/// ends with `link_advice` (how to give the real links, for this source).
pub fn import_parsed(
    topology: &ParsedTopology,
    origin: &str,
    id: &str,
    defaults: &HwlocDefaults,
    link_advice: &str,
) -> Result<Machine, MachineError> {
    finish(
        import_parsed_detailed(topology, origin, id, defaults, link_advice)?,
        origin,
    )
}

const XML_LINK_ADVICE: &str =
    "To give the real links: a TOML machine file with hwloc = \"<this file>\", \
     replace_links = true and one [[link]] table per link";

/// Validate an imported machine: [`Machine::validate`]'s rules but one. Its distance matrix
/// is the OS's as reported, kept even where a local distance is not the smallest of its row
/// (hwloc keeps it too; the description says so), which `Machine::validate` and machine files
/// refuse.
pub fn validate_imported(m: &Machine) -> Result<(), MachineError> {
    crate::validate::check_reported(m).map_err(|p| p.into_error(format!("machine '{}'", m.id)))
}

/// Validate an import ([`validate_imported`]), errors naming `origin`.
fn finish(imp: Imported, origin: &str) -> Result<Machine, MachineError> {
    validate_imported(&imp.machine).map_err(|e| match e {
        MachineError::Invalid {
            key,
            problem,
            expected,
            ..
        } => MachineError::Invalid {
            origin: origin.to_string(),
            key,
            problem,
            expected,
        },
        other => other,
    })?;
    Ok(imp.machine)
}

/// Import a file without validating the machine (see [`Imported`]).
pub fn import_detailed(path: &Path, defaults: &HwlocDefaults) -> Result<Imported, MachineError> {
    let xml = std::fs::read_to_string(path).map_err(|err| MachineError::Io {
        path: path.to_path_buf(),
        err,
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("machine");
    import_str_detailed(
        &xml,
        &path.display().to_string(),
        &format!("hwloc-{stem}"),
        defaults,
    )
}

// ---------------------------------------------------------------------------------------------
// hwloc bitmaps
// ---------------------------------------------------------------------------------------------

/// An hwloc bitmap (`0x0000f06f`, `0xffffffff,0x00000003`: comma-separated 32-bit words, most
/// significant first; a leading `0xf...f` word means every higher bit is set too). hwloc's
/// writer (`hwloc_bitmap_snprintf`) writes an all-zero word after the first as nothing, so
/// `0x00000001,,0x10000000` is bits 28 and 64: an empty word is a zero word.
#[derive(Clone, Debug, Default, PartialEq)]
struct Bitmap {
    bits: BTreeSet<u32>,
    /// Every bit from `infinite_from` up is set (`0xf...f` prefix).
    infinite_from: Option<u32>,
}

impl Bitmap {
    fn parse(s: &str) -> Result<Bitmap, String> {
        let mut bm = Bitmap::default();
        let words: Vec<&str> = s.trim().split(',').collect();
        let n = words.len();
        for (i, w) in words.iter().enumerate() {
            let w = w.trim();
            let hex = w
                .strip_prefix("0x")
                .or_else(|| w.strip_prefix("0X"))
                .unwrap_or(w);
            let base = 32 * (n - 1 - i) as u32;
            if hex.eq_ignore_ascii_case("f...f") {
                if i != 0 {
                    return Err(format!(
                        "bitmap '{s}': 0xf...f is only allowed as the first word"
                    ));
                }
                bm.infinite_from = Some(base);
                continue;
            }
            if w.is_empty() {
                continue; // an all-zero word, written as nothing
            }
            if hex.is_empty() || !hex.chars().all(|c| c.is_ascii_hexdigit()) {
                return Err(format!("bitmap '{s}': '{w}' is not a hexadecimal word"));
            }
            for (j, c) in hex.chars().rev().enumerate() {
                let d = c.to_digit(16).expect("checked hex digit");
                for b in 0..4 {
                    if d & (1 << b) != 0 {
                        bm.bits.insert(base + 4 * j as u32 + b);
                    }
                }
            }
        }
        Ok(bm)
    }

    fn contains(&self, bit: u32) -> bool {
        self.bits.contains(&bit) || self.infinite_from.is_some_and(|f| bit >= f)
    }
}

// ---------------------------------------------------------------------------------------------
// The parsed topology: what the import needs, from any source
// ---------------------------------------------------------------------------------------------

/// One NUMA node of a [`ParsedTopology`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedNode {
    /// The OS's number for the node (hwloc `os_index`, Linux `nodeN`).
    pub os_index: u32,
    /// Locality: the PUs this memory is local to (hwloc's cpuset of the node; the kernel's
    /// `cpulist`, empty for a CPU-less node).
    pub cpuset: BTreeSet<u32>,
    /// Memory of the node, bytes; None: unknown ([`HwlocDefaults::mem_bytes_when_missing`]).
    pub mem_bytes: Option<u64>,
    /// hwloc's subtype (`MCDRAM`, `HBM`, `NVM`, `SPM`, `CXL-DRAM`, ...): memory that Linux
    /// gives no CPUs even where hwloc records a locality.
    pub subtype: Option<String>,
}

/// One data or unified cache of a [`ParsedTopology`] (instruction caches are left out).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedCache {
    /// 1 for L1, 2 for L2, ...
    pub level: u32,
    /// Size, bytes.
    pub bytes: u64,
    /// Ways; −1 fully associative, 0 unknown ([`HwlocDefaults::cache_ways_when_unknown`]).
    pub associativity: i64,
    /// The PUs sharing this cache.
    pub cpuset: BTreeSet<u32>,
}

/// A NUMA distance matrix (SLIT-like: 10 = local) of a [`ParsedTopology`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedDistances {
    /// Where it came from, for notes (`NUMALatency`, `SLIT`).
    pub name: String,
    /// For each entry of [`ParsedTopology::numa`], its row and column in `matrix` (None: the
    /// matrix does not cover it, and is then ignored if the node is kept).
    pub position: Vec<Option<usize>>,
    /// Square matrix, row = from, column = to.
    pub matrix: Vec<Vec<u32>>,
}

/// One memory attribute (a latency in ns or a bandwidth in MiB/s) per (initiator, target).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedMemAttr {
    /// Its name, for notes (`Latency`, `ReadBandwidth`, ...).
    pub name: String,
    pub values: Vec<ParsedMemAttrValue>,
}

/// One value of a [`ParsedMemAttr`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedMemAttrValue {
    /// The PUs the value holds for (None: any initiator). It applies to a CPU node when it
    /// contains that node's CPUs or lies within them; the most specific initiator wins.
    pub initiator: Option<BTreeSet<u32>>,
    /// The target node: an index into [`ParsedTopology::numa`].
    pub target: usize,
    /// ns for a latency, MiB/s for a bandwidth.
    pub value: f64,
}

/// A topology as the import needs it, whatever its source: an hwloc XML file
/// ([`parse_str`]) or the kernel's sysfs (`numalab_place::machine_file`). [`import_parsed`]
/// turns it into a machine with [`HwlocDefaults`] for everything it does not give.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ParsedTopology {
    /// How the description names the source, after "imported from" / "read from":
    /// `hwloc XML lstopo.xml (format 2.0)`.
    pub imported_from: String,
    /// The machine's `source` (where the figures come from).
    pub source: String,
    /// Every logical CPU (PU) by OS number.
    pub pus: BTreeSet<u32>,
    /// The PUs of each core (empty: every PU is a core).
    pub cores: Vec<BTreeSet<u32>>,
    /// The PUs of each package (socket); only counted for the description.
    pub packages: Vec<BTreeSet<u32>>,
    /// NUMA nodes, in any order (the import sorts them by OS index). Empty: one node holds
    /// every PU.
    pub numa: Vec<ParsedNode>,
    pub caches: Vec<ParsedCache>,
    /// PUs allowed to run (None: all); the others are left out.
    pub allowed_pus: Option<BTreeSet<u32>>,
    /// NUMA nodes (OS numbers) allowed to hold memory (None: all); the others are left out.
    pub allowed_nodes: Option<BTreeSet<u32>>,
    /// Memory of the whole machine, bytes: used when there are no NUMA nodes.
    pub machine_mem: Option<u64>,
    pub cpu_model: Option<String>,
    pub distances: Option<ParsedDistances>,
    /// Latencies, ns (hwloc `Latency`, else `ReadLatency`).
    pub latency: Option<ParsedMemAttr>,
    /// Bandwidths, MiB/s (hwloc `Bandwidth`, else `ReadBandwidth`).
    pub bandwidth: Option<ParsedMemAttr>,
    /// Memory devices that are not NUMA nodes (CXL memory devices, DAX regions): "name (kind,
    /// size)". Linux only makes them nodes once onlined (`daxctl reconfigure-device`).
    pub memory_devices: Vec<String>,
    /// What the source's reader assumed or left out; the import's own notes follow.
    pub notes: Vec<String>,
}

fn attr_u64(n: &roxmltree::Node, name: &str) -> Option<u64> {
    n.attribute(name).and_then(|v| v.trim().parse().ok())
}

/// A byte count attribute: absent is None, present must be a whole number (a negative or
/// malformed size is an error, not a default assumed quietly).
fn bytes_attr(n: &roxmltree::Node, name: &str) -> Result<Option<u64>, String> {
    match n.attribute(name) {
        None => Ok(None),
        Some(v) => v.trim().parse().map(Some).map_err(|_| {
            format!(
                "{}: {name}=\"{v}\" is not a byte count (expected a whole number of bytes, as hwloc writes)",
                describe(n)
            )
        }),
    }
}

/// Deepest element nesting hwloc's files reach is about 15 (Machine, Package, Die, Group,
/// L3 ... L1, Core, PU); anything near this is not a topology, and parsing it would
/// exhaust the stack.
pub const MAX_XML_DEPTH: usize = 256;

/// roxmltree (0.20) expands a reference to an entity in text by parsing the entity's value
/// as content, nesting such expansions at most this deep.
const XML_ENTITY_NESTING: usize = 10;

/// An upper bound on how deep roxmltree's parser will recurse on `xml`: it recurses once per
/// open element, and an entity expanded in text adds its value's own nesting. Stops counting
/// once past `limit`.
///
/// The scan follows roxmltree's tokenizer so that it cannot be fooled: a `</` inside a
/// comment, CDATA section, processing instruction, DOCTYPE or quoted attribute value
/// (nesting 20 000 `<object><!--</x>-->` passed a plain count of `<` and `</`, then
/// overflowed the stack) closes nothing. Where the text is not well-formed roxmltree stops
/// with an error, so the scan may stop or overcount there.
fn xml_depth(xml: &str, limit: usize) -> usize {
    let mut entity = 0;
    let depth = content_depth(xml.as_bytes(), limit, Some(&mut entity));
    depth.saturating_add(entity.saturating_mul(XML_ENTITY_NESTING))
}

/// The end of the first `pat` in `b` from `from`: where scanning resumes after it.
fn past(b: &[u8], from: usize, pat: &[u8]) -> Option<usize> {
    let at = b.get(from..)?.windows(pat.len()).position(|w| w == pat)?;
    Some(from + at + pat.len())
}

/// The deepest element nesting of content `b` (a document, or an entity's value when
/// `entity` is None); the deepest nesting of the DOCTYPE's entity values goes to `entity`.
fn content_depth(b: &[u8], limit: usize, mut entity: Option<&mut usize>) -> usize {
    let (mut i, mut depth, mut max) = (0, 0usize, 0usize);
    while max <= limit {
        let Some(lt) = b[i..].iter().position(|&c| c == b'<').map(|k| i + k) else {
            break;
        };
        let rest = &b[lt..];
        let next = if rest.starts_with(b"<!--") {
            past(b, lt + 4, b"-->")
        } else if rest.starts_with(b"<![CDATA[") {
            past(b, lt + 9, b"]]>")
        } else if rest.starts_with(b"<?") {
            past(b, lt + 2, b"?>")
        } else if rest.starts_with(b"<!DOCTYPE") {
            // only the document's prolog may hold one, never an entity's value
            entity
                .as_deref_mut()
                .and_then(|e| doctype_end(b, lt + 9, limit, e))
        } else if rest.starts_with(b"<!") {
            None // roxmltree knows no other declaration
        } else if rest.starts_with(b"</") {
            depth = depth.saturating_sub(1);
            Some(lt + 2)
        } else {
            // a start tag: its end is the first '>' outside quoted attribute values (a value
            // may hold '>'; one holding '<' stops roxmltree)
            let mut j = lt + 1;
            let mut quote = None;
            while j < b.len() {
                match (quote, b[j]) {
                    (None, q @ (b'"' | b'\'')) => quote = Some(q),
                    (Some(q), c) if c == q => quote = None,
                    (None, b'>') => break,
                    _ => {}
                }
                j += 1;
            }
            // `<x/>` opens nothing (its '/' comes right before the '>', outside any value)
            if b[j - 1] != b'/' || j == b.len() {
                depth += 1;
                max = max.max(depth);
            }
            Some(j + 1)
        };
        match next {
            Some(n) => i = n.min(b.len()),
            None => break, // unterminated or not XML: roxmltree stops here
        }
    }
    max
}

/// Where the DOCTYPE whose keyword ends at `from` ends, as roxmltree reads it; the deepest
/// element nesting of its entity values raises `entity`. None where roxmltree would stop.
fn doctype_end(b: &[u8], from: usize, limit: usize, entity: &mut usize) -> Option<usize> {
    // the name and external ID (quoted literals), up to the internal subset or the end
    let mut j = from;
    loop {
        match *b.get(j)? {
            q @ (b'"' | b'\'') => j = past(b, j + 1, &[q])?,
            b'[' => break,
            b'>' => return Some(j + 1),
            _ => j += 1,
        }
    }
    j += 1;
    loop {
        while matches!(b.get(j), Some(b' ' | b'\t' | b'\n' | b'\r')) {
            j += 1;
        }
        let rest = b.get(j..)?;
        j = if rest.starts_with(b"<!ENTITY") {
            // name, then a quoted value or external ID literals, then '>'
            let mut k = j + 8;
            loop {
                match *b.get(k)? {
                    q @ (b'"' | b'\'') => {
                        let end = past(b, k + 1, &[q])?;
                        let value = &b[k + 1..end - 1];
                        *entity = (*entity).max(content_depth(value, limit, None));
                        k = end;
                    }
                    b'>' => break k + 1,
                    _ => k += 1,
                }
            }
        } else if rest.starts_with(b"<!--") {
            past(b, j + 4, b"-->")?
        } else if rest.starts_with(b"<?") {
            past(b, j + 2, b"?>")?
        } else if rest.starts_with(b"<!ELEMENT")
            || rest.starts_with(b"<!ATTLIST")
            || rest.starts_with(b"<!NOTATION")
        {
            past(b, j, b">")?
        } else if rest.starts_with(b"]") {
            j += 1;
            while matches!(b.get(j), Some(b' ' | b'\t' | b'\n' | b'\r')) {
                j += 1;
            }
            return (b.get(j) == Some(&b'>')).then_some(j + 1);
        } else {
            return None;
        };
    }
}

fn cpuset_of(n: &roxmltree::Node, origin: &str) -> Result<Option<BTreeSet<u32>>, MachineError> {
    match n.attribute("cpuset") {
        Some(s) => Bitmap::parse(s)
            .map(|b| Some(b.bits))
            .map_err(|e| MachineError::Hwloc {
                origin: origin.to_string(),
                problem: format!("object {}: {e}", describe(n)),
            }),
        None => Ok(None),
    }
}

fn describe(n: &roxmltree::Node) -> String {
    let t = n.attribute("type").unwrap_or("?");
    match n.attribute("os_index") {
        Some(i) => format!(
            "{t} (os_index {i}, line {})",
            n.document().text_pos_at(n.range().start).row
        ),
        None => format!(
            "{t} (line {})",
            n.document().text_pos_at(n.range().start).row
        ),
    }
}

/// Parse `lstopo --of xml` text into a [`ParsedTopology`]; `origin` names it in errors.
pub fn parse_str(xml: &str, origin: &str) -> Result<ParsedTopology, MachineError> {
    if xml_depth(xml, MAX_XML_DEPTH) > MAX_XML_DEPTH {
        return Err(MachineError::Parse {
            origin: origin.to_string(),
            message: format!(
                "elements nested more than {MAX_XML_DEPTH} deep: not an hwloc topology (hwloc's files nest about 15 levels)"
            ),
        });
    }
    let opts = roxmltree::ParsingOptions {
        allow_dtd: true,
        ..Default::default()
    };
    let doc =
        roxmltree::Document::parse_with_options(xml, opts).map_err(|e| MachineError::Parse {
            origin: origin.to_string(),
            message: format!("not well-formed XML: {e}"),
        })?;
    parse_doc(&doc, origin)
}

fn parse_doc(doc: &roxmltree::Document, origin: &str) -> Result<ParsedTopology, MachineError> {
    let hw = |problem: String| MachineError::Hwloc {
        origin: origin.to_string(),
        problem,
    };
    let root = doc.root_element();
    if root.tag_name().name() != "topology" {
        return Err(hw(format!(
            "the root element is <{}>; expected <topology>, as written by `lstopo --of xml`",
            root.tag_name().name()
        )));
    }
    let version = root.attribute("version").unwrap_or("1.x").to_string();
    let mut t = ParsedTopology {
        imported_from: format!("hwloc XML {origin} (format {version})"),
        source: format!(
            "hwloc XML {origin}; figures hwloc does not give are numalab::machine::HwlocDefaults (E, docs/machine-format.md)"
        ),
        ..Default::default()
    };
    // XML-only bookkeeping: gp_index of each NUMA node (distances and memory attributes may
    // name nodes by it) and of every object with a cpuset (memory-attribute initiators).
    let mut numa_gp: Vec<Option<u64>> = Vec::new();
    let mut gp_cpusets: HashMap<u64, BTreeSet<u32>> = HashMap::new();
    let mut allowed_cpus: Option<Bitmap> = None;
    let mut allowed_nodes: Option<Bitmap> = None;
    // hwloc 1.x distance blocks.
    let mut v1_distances: Vec<V1Distances> = Vec::new();
    let mut saw_machine = false;
    for n in root.descendants().filter(|n| n.is_element()) {
        match n.tag_name().name() {
            "object" => {}
            "info" if t.cpu_model.is_none() && n.attribute("name") == Some("CPUModel") => {
                t.cpu_model = n.attribute("value").map(|v| v.trim().to_string());
                continue;
            }
            "distances" => {
                let base: f64 = n
                    .attribute("latency_base")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(1.0);
                let nb = attr_u64(&n, "nbobjs").unwrap_or(0) as usize;
                let values: Vec<f64> = n
                    .children()
                    .filter(|c| c.has_tag_name("latency"))
                    .filter_map(|c| c.attribute("value").and_then(|v| v.parse().ok()))
                    .collect();
                // hwloc 2 reads only the blocks of the root object (the Machine, a child of
                // <topology>); those of deeper objects are ignored.
                let at_root = n
                    .parent_element()
                    .and_then(|p| p.parent_element())
                    .is_some_and(|g| g == root);
                v1_distances.push(V1Distances {
                    base,
                    nbobjs: nb,
                    at_root,
                    values,
                });
                continue;
            }
            _ => continue,
        }
        let ty = n.attribute("type").unwrap_or("");
        let cpuset = cpuset_of(&n, origin)?;
        if let (Some(gp), Some(cs)) = (attr_u64(&n, "gp_index"), &cpuset) {
            gp_cpusets.insert(gp, cs.clone());
        }
        let os_index = || {
            n.attribute("os_index")
                .and_then(|v| v.parse::<u32>().ok())
                .ok_or_else(|| hw(format!("object {} has no numeric os_index", describe(&n))))
        };
        match ty {
            "Machine" if !saw_machine => {
                saw_machine = true;
                let bm = |name: &str| -> Result<Option<Bitmap>, MachineError> {
                    n.attribute(name)
                        .map(Bitmap::parse)
                        .transpose()
                        .map_err(|e| hw(format!("Machine object: {e}")))
                };
                allowed_cpus = bm("allowed_cpuset")?;
                allowed_nodes = bm("allowed_nodeset")?;
                t.machine_mem = bytes_attr(&n, "local_memory").map_err(hw)?;
            }
            "PU" => {
                t.pus.insert(os_index()?);
            }
            "Core" => t.cores.push(cpuset.unwrap_or_default()),
            "Package" | "Socket" => t.packages.push(cpuset.unwrap_or_default()),
            "NUMANode" => {
                // hwloc 2 puts the locality on the node; hwloc 1 files always have it too, but
                // fall back to the parent's cpuset if a hand-edited file lacks it.
                let cs = match cpuset {
                    Some(c) => c,
                    None => match n.parent_element() {
                        Some(p) => cpuset_of(&p, origin)?.unwrap_or_default(),
                        None => BTreeSet::new(),
                    },
                };
                t.numa.push(ParsedNode {
                    os_index: os_index()?,
                    cpuset: cs,
                    mem_bytes: bytes_attr(&n, "local_memory").map_err(hw)?,
                    subtype: n.attribute("subtype").map(str::to_string),
                });
                numa_gp.push(attr_u64(&n, "gp_index"));
            }
            "OSDev" => {
                let name = n.attribute("name").unwrap_or("?");
                let subtype = n.attribute("subtype").unwrap_or("");
                if subtype == "CXLMem" || name.starts_with("dax") {
                    let sizes: Vec<String> = n
                        .children()
                        .filter(|c| c.has_tag_name("info"))
                        .filter(|c| {
                            c.attribute("name")
                                .is_some_and(|k| k.ends_with("Size") && k != "SectorSize")
                        })
                        .filter_map(|c| {
                            Some(format!(
                                "{} {}",
                                c.attribute("name")?,
                                c.attribute("value")?
                            ))
                        })
                        .collect();
                    t.memory_devices.push(format!(
                        "{name} ({subtype}{}{})",
                        if sizes.is_empty() { "" } else { ", " },
                        sizes.join(", ")
                    ));
                }
            }
            "MemCache" => {
                // A memory-side cache (KNL's MCDRAM in cache mode, an HBM or CXL cache) sits in
                // front of its node's memory for every CPU, not in a core's hierarchy: it is
                // never the LLC (a 2 GiB one taken as an LLC made STREAM need 8 GB of host
                // memory). The model has no memory-side cache: said in the description.
                let bytes = attr_u64(&n, "cache_size").unwrap_or(0);
                t.notes.push(format!(
                    "a {} MiB memory-side cache (hwloc MemCache) is not modelled: its node's \
                     memory is simulated without it",
                    bytes >> 20
                ));
            }
            ty if ty.ends_with("Cache") => {
                // Level: the `depth` attribute (hwloc 1 "Cache" objects and hwloc 2 alike),
                // else the type name (L2Cache, L3Cache). Instruction caches are skipped.
                let level = attr_u64(&n, "depth").map(|d| d as u32).or_else(|| {
                    ty.strip_prefix('L').and_then(|r| {
                        r.trim_end_matches("Cache")
                            .trim_end_matches('i')
                            .parse()
                            .ok()
                    })
                });
                let instruction = n.attribute("cache_type") == Some("2") || ty.ends_with("iCache");
                if let (Some(level), false) = (level, instruction) {
                    t.caches.push(ParsedCache {
                        level,
                        bytes: attr_u64(&n, "cache_size").unwrap_or(0),
                        associativity: n
                            .attribute("cache_associativity")
                            .and_then(|v| v.parse().ok())
                            .unwrap_or(0),
                        cpuset: cpuset.unwrap_or_default(),
                    });
                }
            }
            _ => {}
        }
    }
    if t.pus.is_empty() {
        return Err(hw(
            "the file has no PU objects (logical CPUs); expected the output of `lstopo --of xml` for a whole machine".to_string(),
        ));
    }
    // The allowed sets only ever decide about the file's own PUs and nodes, so they are kept as
    // those (an `0xf...f` bitmap is infinite).
    t.allowed_pus =
        allowed_cpus.map(|a| t.pus.iter().copied().filter(|&p| a.contains(p)).collect());
    t.allowed_nodes = allowed_nodes.map(|a| {
        t.numa
            .iter()
            .map(|o| o.os_index)
            .filter(|&i| a.contains(i))
            .collect()
    });
    if !t.numa.is_empty() {
        t.distances = xml_distances(doc, &t.numa, &numa_gp, &v1_distances, origin, &mut t.notes)?;
    }
    let gp_to_numa: HashMap<u64, usize> = numa_gp
        .iter()
        .enumerate()
        .filter_map(|(i, g)| g.map(|g| (g, i)))
        .collect();
    t.latency = xml_memattr(
        doc,
        &["Latency", "ReadLatency"],
        &gp_to_numa,
        &gp_cpusets,
        origin,
    )?;
    t.bandwidth = xml_memattr(
        doc,
        &["Bandwidth", "ReadBandwidth"],
        &gp_to_numa,
        &gp_cpusets,
        origin,
    )?;
    Ok(t)
}

// ---------------------------------------------------------------------------------------------
// Distances and memory attributes of an XML file
// ---------------------------------------------------------------------------------------------

/// One hwloc 1.x `<distances>` block: `nbobjs` objects some levels below the object holding
/// it, values normalised to `latency_base`.
struct V1Distances {
    base: f64,
    nbobjs: usize,
    /// Held by the root object (hwloc 2 reads only those).
    at_root: bool,
    values: Vec<f64>,
}

/// The NUMA latency matrix of the file, or None (with a note where distance blocks exist but
/// none covers the nodes).
///
/// hwloc 2.x: the `distances2` block named `NUMALatency`, else the unnamed latency-kind
/// NUMANode blocks are the candidates. hwloc 1.x: every `<distances>` block is a latency
/// matrix (hwloc 2 reads them so); hwloc 2 takes those of the root object with as many objects
/// as there are NUMA nodes as NUMA matrices, over the nodes in document order, and so do we.
/// Of several candidates, the first with 10 on its diagonal (the SLIT's local value, what the
/// OS gives) is used, else the first: 1.x files, and 2.x files converted from them, may carry
/// matrices of other levels (packages at 1/2/4/8, say) that are as many as the NUMA nodes.
/// (A 1.x block's `relative_depth` does not tell: hwloc 2's 1.x export writes a NUMA
/// matrix's one level off when the nodes hang below a package.)
fn xml_distances(
    doc: &roxmltree::Document,
    numa: &[ParsedNode],
    numa_gp: &[Option<u64>],
    v1_blocks: &[V1Distances],
    origin: &str,
    notes: &mut Vec<String>,
) -> Result<Option<ParsedDistances>, MachineError> {
    let hw = |problem: String| MachineError::Hwloc {
        origin: origin.to_string(),
        problem,
    };
    let blocks: Vec<roxmltree::Node> = doc
        .root_element()
        .descendants()
        .filter(|n| n.has_tag_name("distances2") && n.attribute("type") == Some("NUMANode"))
        .collect();
    if let Some(b) = blocks
        .iter()
        .find(|n| n.attribute("name") == Some("NUMALatency"))
    {
        return Ok(Some(read_distances2(b, numa, numa_gp, &hw)?));
    }
    let kind = |n: &roxmltree::Node| attr_u64(n, "kind").unwrap_or(0);
    let mut candidates = Vec::new();
    for b in blocks
        .iter()
        .filter(|n| kind(n) & 4 != 0 && kind(n) & 16 == 0)
    {
        candidates.push(read_distances2(b, numa, numa_gp, &hw)?);
    }
    let what = if candidates.is_empty() {
        for b in v1_blocks
            .iter()
            .filter(|b| b.at_root && b.nbobjs == numa.len() && b.nbobjs > 0)
        {
            candidates.push(read_v1_distances(b, &hw)?);
        }
        "hwloc 1.x distance matrices over as many objects as NUMA nodes"
    } else {
        "unnamed NUMA latency matrices"
    };
    let slit = candidates
        .iter()
        .position(|d| (0..d.matrix.len()).all(|i| d.matrix[i][i] == 10));
    if candidates.len() > 1 {
        notes.push(format!(
            "{} {what}: {}",
            candidates.len(),
            match slit {
                Some(i) => format!("number {} used, the first with 10 on its diagonal", i + 1),
                None => "the first used".to_string(),
            }
        ));
    }
    if !candidates.is_empty() {
        return Ok(Some(candidates.swap_remove(slit.unwrap_or(0))));
    }
    if !v1_blocks.is_empty() {
        notes.push(
            "the hwloc 1.x distance blocks do not cover the NUMA nodes (hwloc reads only the root object's, over as many objects as NUMA nodes): ignored"
                .to_string(),
        );
    }
    Ok(None)
}

/// One hwloc 1.x block over the NUMA nodes in document order.
fn read_v1_distances(
    b: &V1Distances,
    hw: &dyn Fn(String) -> MachineError,
) -> Result<ParsedDistances, MachineError> {
    let nb = b.nbobjs;
    if b.values.len() != nb.saturating_mul(nb) {
        return Err(hw(format!(
            "<distances nbobjs=\"{nb}\">: {} latency values; expected {}",
            b.values.len(),
            nb.saturating_mul(nb)
        )));
    }
    let matrix = (0..nb)
        .map(|i| {
            (0..nb)
                .map(|j| (b.values[i * nb + j] * b.base).round() as u32)
                .collect()
        })
        .collect();
    Ok(ParsedDistances {
        name: "hwloc 1.x latencies".to_string(),
        position: (0..nb).map(Some).collect(),
        matrix,
    })
}

/// One `distances2` block over NUMA nodes.
fn read_distances2(
    b: &roxmltree::Node,
    numa: &[ParsedNode],
    numa_gp: &[Option<u64>],
    hw: &dyn Fn(String) -> MachineError,
) -> Result<ParsedDistances, MachineError> {
    let name = b.attribute("name").unwrap_or("(unnamed)");
    let nb = attr_u64(b, "nbobjs")
        .ok_or_else(|| hw(format!("distances2 '{name}' has no nbobjs")))? as usize;
    let numbers = |tag: &str| -> Result<Vec<u64>, MachineError> {
        let mut v = Vec::new();
        for c in b.children().filter(|c| c.has_tag_name(tag)) {
            for w in c.text().unwrap_or("").split_whitespace() {
                v.push(w.parse().map_err(|_| {
                    hw(format!(
                        "distances2 '{name}': <{tag}> holds '{w}', not a number"
                    ))
                })?);
            }
        }
        Ok(v)
    };
    let indexes = numbers("indexes")?;
    let values = numbers("u64values")?;
    if indexes.len() != nb || values.len() != nb.saturating_mul(nb) {
        return Err(hw(format!(
            "distances2 '{name}': {} indexes and {} values for nbobjs = {nb}; expected {nb} indexes and {} values",
            indexes.len(),
            values.len(),
            nb.saturating_mul(nb)
        )));
    }
    let by_gp = b.attribute("indexing") == Some("gp");
    let position = numa
        .iter()
        .zip(numa_gp)
        .map(|(o, gp)| {
            let key = if by_gp {
                *gp
            } else {
                Some(u64::from(o.os_index))
            };
            key.and_then(|k| indexes.iter().position(|&i| i == k))
        })
        .collect();
    let matrix = (0..nb)
        .map(|i| {
            (0..nb)
                .map(|j| u32::try_from(values[i * nb + j]).unwrap_or(u32::MAX))
                .collect()
        })
        .collect();
    Ok(ParsedDistances {
        name: name.to_string(),
        position,
        matrix,
    })
}

/// Read memory attribute `names` (the first one present wins); values whose target is not a
/// NUMA node of the file, or whose initiator object the file lacks, are skipped.
fn xml_memattr(
    doc: &roxmltree::Document,
    names: &[&str],
    gp_to_numa: &HashMap<u64, usize>,
    gp_cpusets: &HashMap<u64, BTreeSet<u32>>,
    origin: &str,
) -> Result<Option<ParsedMemAttr>, MachineError> {
    let hw = |problem: String| MachineError::Hwloc {
        origin: origin.to_string(),
        problem,
    };
    for name in names {
        let Some(attr) = doc
            .root_element()
            .children()
            .find(|n| n.has_tag_name("memattr") && n.attribute("name") == Some(name))
        else {
            continue;
        };
        let mut out = ParsedMemAttr {
            name: name.to_string(),
            values: Vec::new(),
        };
        for v in attr.children().filter(|c| c.has_tag_name("memattr_value")) {
            if v.attribute("target_obj_type")
                .is_some_and(|t| t != "NUMANode")
            {
                continue;
            }
            let Some(target) =
                attr_u64(&v, "target_obj_gp_index").and_then(|g| gp_to_numa.get(&g).copied())
            else {
                continue;
            };
            let Some(value) = v.attribute("value").and_then(|x| x.parse::<f64>().ok()) else {
                return Err(hw(format!(
                    "memattr '{name}': a memattr_value without a numeric value"
                )));
            };
            let initiator: Option<BTreeSet<u32>> = if let Some(cs) = v.attribute("initiator_cpuset")
            {
                Some(
                    Bitmap::parse(cs)
                        .map_err(|e| hw(format!("memattr '{name}': {e}")))?
                        .bits,
                )
            } else if let Some(gp) = attr_u64(&v, "initiator_obj_gp_index") {
                match gp_cpusets.get(&gp) {
                    Some(cs) => Some(cs.clone()),
                    None => continue, // an initiator object this file does not have
                }
            } else {
                None
            };
            out.values.push(ParsedMemAttrValue {
                initiator,
                target,
                value,
            });
        }
        return Ok(Some(out));
    }
    Ok(None)
}

// ---------------------------------------------------------------------------------------------
// From parsed figures to dense node ids
// ---------------------------------------------------------------------------------------------

/// The distance matrix over the `kept` NUMA entries (indexes into `t.numa`), or None with a
/// note when it does not cover them all.
fn kept_distances(
    t: &ParsedTopology,
    kept: &[usize],
    origin: &str,
    notes: &mut Vec<String>,
) -> Result<Option<Vec<Vec<u32>>>, MachineError> {
    let Some(d) = &t.distances else {
        return Ok(None);
    };
    let size = d.matrix.len();
    if d.matrix.iter().any(|row| row.len() != size) {
        return Err(MachineError::Hwloc {
            origin: origin.to_string(),
            problem: format!("distance matrix '{}' is not square", d.name),
        });
    }
    let pos: Option<Vec<usize>> = kept
        .iter()
        .map(|&k| d.position.get(k).copied().flatten().filter(|&p| p < size))
        .collect();
    let Some(pos) = pos else {
        notes.push(format!(
            "the distance matrix '{}' does not cover every allowed node: ignored",
            d.name
        ));
        return Ok(None);
    };
    Ok(Some(
        pos.iter()
            .map(|&i| pos.iter().map(|&j| d.matrix[i][j]).collect())
            .collect(),
    ))
}

/// Values of one memory attribute: (initiator node, target node) → value, both dense ids.
type PairValues = HashMap<(usize, usize), f64>;

/// The values of `attr` per (CPU node, target node), dense ids; `dense_of` maps an index into
/// `t.numa` to its dense id (kept nodes only).
fn pair_values(
    attr: Option<&ParsedMemAttr>,
    dense_of: &HashMap<usize, usize>,
    node_cpus: &[BTreeSet<u32>],
) -> (Option<String>, PairValues) {
    let Some(attr) = attr else {
        return (None, HashMap::new());
    };
    // For each pair keep the value of the most specific initiator (fewest PUs).
    let mut best: HashMap<(usize, usize), (usize, f64)> = HashMap::new();
    for v in &attr.values {
        let Some(&target) = dense_of.get(&v.target) else {
            continue;
        };
        for (src, cpus) in node_cpus.iter().enumerate() {
            if cpus.is_empty() {
                continue;
            }
            let spec = match &v.initiator {
                None => usize::MAX,
                Some(i) if !i.is_disjoint(cpus) && (i.is_subset(cpus) || i.is_superset(cpus)) => {
                    i.len()
                }
                Some(_) => continue,
            };
            let e = best.entry((src, target)).or_insert((spec, v.value));
            if spec < e.0 {
                *e = (spec, v.value);
            }
        }
    }
    (
        Some(attr.name.clone()),
        best.into_iter().map(|(k, (_, v))| (k, v)).collect(),
    )
}

// ---------------------------------------------------------------------------------------------
// The import
// ---------------------------------------------------------------------------------------------

/// Import XML text without validating the machine (see [`Imported`]).
pub fn import_str_detailed(
    xml: &str,
    origin: &str,
    id: &str,
    d: &HwlocDefaults,
) -> Result<Imported, MachineError> {
    import_parsed_detailed(&parse_str(xml, origin)?, origin, id, d, XML_LINK_ADVICE)
}

/// Make a machine of a parsed topology from any source, with `d` for what it does not give;
/// `origin` names the source in errors, `id` becomes the machine id, `link_advice` ends the
/// note on derived links (see [`Imported::links_derived`]). Nothing is validated yet: see
/// [`import_parsed`].
///
/// The steps, in order (each adds its notes to the description): the allowed PUs and nodes,
/// each PU's node, memory, SMT, caches, the distance matrix, links between CPU nodes
/// (`cpu_node_links`) and to CPU-less nodes, the figures of nodes and links (memory
/// attributes, else defaults), and the machine.
pub fn import_parsed_detailed(
    s: &ParsedTopology,
    origin: &str,
    id: &str,
    d: &HwlocDefaults,
    link_advice: &str,
) -> Result<Imported, MachineError> {
    let hw = |problem: String| MachineError::Hwloc {
        origin: origin.to_string(),
        problem,
    };
    if s.pus.is_empty() {
        return Err(hw(
            "no logical CPUs (PUs): a machine needs at least one".to_string()
        ));
    }
    let (mut b, pus) = Build::new(s, d, &hw)?;
    let cpus = b.assign_cpus(&pus);
    if cpus.iter().all(BTreeSet::is_empty) {
        return Err(hw(
            "no allowed CPU is local to an allowed NUMA node".to_string()
        ));
    }
    let mem = b.memory();
    let kept_pus: BTreeSet<u32> = cpus.iter().flatten().copied().collect();
    let (smt, siblings, cores) = smt_of(&s.cores, &kept_pus);
    let (private_cache, llcs) = b.caches(&cpus, &kept_pus);
    let (have_matrix, distances) = b.distances(origin)?;
    let cpu_nodes: Vec<usize> = (0..b.n).filter(|&i| !cpus[i].is_empty()).collect();
    let mem_nodes: Vec<usize> = (0..b.n).filter(|&i| cpus[i].is_empty()).collect();
    let cpu_links = cpu_node_links(
        &distances,
        have_matrix,
        &cpu_nodes,
        &|k| b.os_index(k),
        d.hop_ns,
    );
    if let Some(why) = &cpu_links.derived_because {
        b.notes.push(format!(
            "links derived from the distance matrix: {why}, so every pair of CPU nodes is linked \
             directly, each link's hop_ns = {} ns × its distance ÷ {} (the smallest remote \
             distance gets the one-hop latency; asymmetric pairs take the mean of both \
             directions), gbps_per_dir the default (docs/machine-format.md). {link_advice}",
            d.hop_ns, cpu_links.one_hop
        ));
    }
    let mut pairs = cpu_links.pairs.clone();
    pairs.extend(b.memory_node_links(&cpus, &distances, have_matrix, &cpu_nodes, &mem_nodes));
    if !s.memory_devices.is_empty() {
        b.notes.push(format!(
            "memory devices that are not NUMA nodes (not onlined as system RAM) are not modelled: {}; \
             online them and re-run lstopo, or add CPU-less [[node]] tables in a TOML override",
            s.memory_devices.join("; ")
        ));
    }

    let (idle, peak, links) = b.node_and_link_figures(
        &cpus,
        &pairs,
        &cpu_links.derived_hop_ns,
        &cpu_nodes,
        &mem_nodes,
    );
    let machine = b.assemble(Assembly {
        id,
        cpus: &cpus,
        mem: &mem,
        kept_pus: &kept_pus,
        smt,
        siblings,
        cores,
        private_cache,
        llcs: &llcs,
        distances,
        idle: &idle,
        peak: &peak,
        links,
    });
    Ok(Imported {
        machine,
        links_derived: cpu_links.derived_because,
        notes: b.notes,
    })
}

/// The parts of a machine that [`Build::assemble`] puts together.
struct Assembly<'x> {
    id: &'x str,
    cpus: &'x [BTreeSet<u32>],
    mem: &'x [u64],
    kept_pus: &'x BTreeSet<u32>,
    smt: u32,
    siblings: SiblingNumbering,
    cores: usize,
    private_cache: CacheGeom,
    llcs: &'x [Option<CacheGeom>],
    distances: Vec<Vec<u32>>,
    idle: &'x [f64],
    peak: &'x [f64],
    links: Vec<Link>,
}

/// An import in progress: the source, the defaults, the nodes kept and the notes so far.
struct Build<'a> {
    s: &'a ParsedTopology,
    d: &'a HwlocDefaults,
    /// The allowed NUMA entries in OS-index order: (index into `s.numa`, entry); their
    /// position is the dense node id.
    numa: Vec<(usize, &'a ParsedNode)>,
    /// No NUMA node: one node holds every CPU.
    single: bool,
    /// Nodes of the machine.
    n: usize,
    notes: Vec<String>,
}

impl<'a> Build<'a> {
    /// The allowed PUs and NUMA nodes (disallowed ones are left out, with a note).
    fn new(
        s: &'a ParsedTopology,
        d: &'a HwlocDefaults,
        hw: &dyn Fn(String) -> MachineError,
    ) -> Result<(Build<'a>, BTreeSet<u32>), MachineError> {
        let mut notes = s.notes.clone();
        let pus: BTreeSet<u32> = s
            .pus
            .iter()
            .copied()
            .filter(|p| match &s.allowed_pus {
                Some(a) => a.contains(p),
                None => true,
            })
            .collect();
        let disallowed_pus: Vec<u32> = s.pus.difference(&pus).copied().collect();
        if !disallowed_pus.is_empty() {
            notes.push(format!(
                "CPUs {} are disallowed (allowed_cpuset) and left out",
                list(&disallowed_pus)
            ));
        }
        if pus.is_empty() {
            return Err(hw(
                "no PU is allowed by the Machine object's allowed_cpuset".to_string(),
            ));
        }
        let mut numa: Vec<(usize, &ParsedNode)> = s.numa.iter().enumerate().collect();
        numa.sort_by_key(|(_, o)| o.os_index);
        let disallowed_nodes: Vec<u32> = numa
            .iter()
            .filter(|(_, o)| {
                s.allowed_nodes
                    .as_ref()
                    .is_some_and(|a| !a.contains(&o.os_index))
            })
            .map(|(_, o)| o.os_index)
            .collect();
        if !disallowed_nodes.is_empty() {
            notes.push(format!(
                "NUMA nodes {} are disallowed (allowed_nodeset) and left out",
                list(&disallowed_nodes)
            ));
        }
        numa.retain(|(_, o)| !disallowed_nodes.contains(&o.os_index));
        if !s.numa.is_empty() && numa.is_empty() {
            return Err(hw(
                "every NUMA node is disallowed by the Machine object's allowed_nodeset".to_string(),
            ));
        }

        let single = numa.is_empty();
        if single {
            notes.push("the file has no NUMANode objects: one node holds every CPU".to_string());
        }
        let n = if single { 1 } else { numa.len() };
        Ok((
            Build {
                s,
                d,
                numa,
                single,
                n,
                notes,
            },
            pus,
        ))
    }

    /// The OS number of dense node `k` (0 for the single node of a file without NUMA nodes).
    fn os_index(&self, k: usize) -> u32 {
        if self.single {
            0
        } else {
            self.numa[k].1.os_index
        }
    }

    /// Each allowed PU's node, by dense id.
    fn assign_cpus(&mut self, pus: &BTreeSet<u32>) -> Vec<BTreeSet<u32>> {
        let (single, n, numa, notes) = (self.single, self.n, &self.numa, &mut self.notes);
        // Each PU goes to the most local node containing it: the smallest locality, then nodes
        // without a subtype (DRAM before HBM / CXL / NVM), then the lowest OS index.
        let mut cpus: Vec<BTreeSet<u32>> = vec![BTreeSet::new(); n];
        let mut homeless = Vec::new();
        for &p in pus {
            if single {
                cpus[0].insert(p);
                continue;
            }
            let best = numa
                .iter()
                .enumerate()
                .filter(|(_, (_, o))| o.cpuset.contains(&p))
                .min_by_key(|(_, (_, o))| (o.cpuset.len(), o.subtype.is_some(), o.os_index));
            match best {
                Some((i, _)) => {
                    cpus[i].insert(p);
                }
                None => homeless.push(p),
            }
        }
        if !homeless.is_empty() {
            notes.push(format!(
                "CPUs {} are allowed but their NUMA node is not (or absent): left out, the model has no local memory for them",
                list(&homeless)
            ));
        }
        cpus
    }

    /// Each node's memory, bytes.
    fn memory(&mut self) -> Vec<u64> {
        let (s, d, single, numa, notes) =
            (self.s, self.d, self.single, &self.numa, &mut self.notes);
        if single {
            vec![s.machine_mem.unwrap_or_else(|| {
                notes.push(format!(
                    "no memory size in the file: {} bytes assumed",
                    d.mem_bytes_when_missing
                ));
                d.mem_bytes_when_missing
            })]
        } else {
            let missing: Vec<u32> = numa
                .iter()
                .filter(|(_, o)| o.mem_bytes.is_none())
                .map(|(_, o)| o.os_index)
                .collect();
            if !missing.is_empty() {
                notes.push(format!(
                    "NUMA nodes {} have no local_memory: {} bytes assumed",
                    list(&missing),
                    d.mem_bytes_when_missing
                ));
            }
            numa.iter()
                .map(|(_, o)| o.mem_bytes.unwrap_or(d.mem_bytes_when_missing))
                .collect()
        }
    }

    /// The private cache of a core and each node's LLC (None: no shared cache above the
    /// private one).
    fn caches(
        &mut self,
        cpus: &[BTreeSet<u32>],
        kept_pus: &BTreeSet<u32>,
    ) -> (CacheGeom, Vec<Option<CacheGeom>>) {
        let (s, d, single, n, numa, notes) = (
            self.s,
            self.d,
            self.single,
            self.n,
            &self.numa,
            &mut self.notes,
        );
        let ways_of = |c: &ParsedCache, bytes: u64| -> u32 {
            match c.associativity {
                a if a < 0 => (bytes / 64).max(1) as u32,
                0 => d.cache_ways_when_unknown,
                a => a as u32,
            }
        };
        let core_of = |p: u32| s.cores.iter().find(|c| c.contains(&p));
        let first = *kept_pus.iter().next().expect("some CPU is kept");
        let private = s
            .caches
            .iter()
            .filter(|c| c.level >= 2 && c.bytes > 0 && c.cpuset.contains(&first))
            .filter(|c| match core_of(first) {
                Some(core) => c.cpuset.is_subset(core),
                None => c.cpuset.len() == 1,
            })
            .max_by_key(|c| c.level);
        // No cache private to one core: a shared L2 under a higher level (Bulldozer modules,
        // Atom clusters) is still the closest filter a core has, so it is modelled per core.
        let private = private.or_else(|| {
            let top = s
                .caches
                .iter()
                .filter(|c| c.cpuset.contains(&first))
                .map(|c| c.level)
                .max()?;
            let l2 = s
                .caches
                .iter()
                .find(|c| c.level == 2 && c.bytes > 0 && c.cpuset.contains(&first) && top > 2)?;
            notes.push(
                "the L2 is shared by several cores: modelled as each core's private cache \
                 (a machine file can share it: core.private_cache_cores)"
                    .to_string(),
            );
            Some(l2)
        });
        let (private_cache, private_level) = match private {
            Some(c) => (
                CacheGeom {
                    bytes: c.bytes,
                    ways: ways_of(c, c.bytes),
                },
                c.level,
            ),
            None => {
                notes.push(
                    "no per-core L2 cache in the topology: the default private cache is assumed"
                        .to_string(),
                );
                (d.private_cache.clone(), 1)
            }
        };
        let mut llcs: Vec<Option<CacheGeom>> = Vec::with_capacity(n);
        for (i, node_cpus) in cpus.iter().enumerate() {
            if node_cpus.is_empty() {
                llcs.push(None);
                continue;
            }
            // The node's full locality (disallowed CPUs included) sets its share of a shared LLC.
            let locality: BTreeSet<u32> = if single {
                s.pus.clone()
            } else {
                numa[i].1.cpuset.clone()
            };
            let candidates: Vec<&ParsedCache> = s
                .caches
                .iter()
                .filter(|c| {
                    c.level > private_level && c.bytes > 0 && !c.cpuset.is_disjoint(node_cpus)
                })
                .collect();
            let Some(level) = candidates.iter().map(|c| c.level).max() else {
                llcs.push(None);
                continue;
            };
            let mut bytes = 0u64;
            let mut ways = 0;
            for c in candidates.iter().filter(|c| c.level == level) {
                let share = c.cpuset.intersection(&locality).count().max(1) as f64
                    / c.cpuset.len().max(1) as f64;
                bytes += (c.bytes as f64 * share.min(1.0)) as u64;
                ways = ways_of(c, c.bytes);
            }
            bytes -= bytes % 64;
            let ways = ways.min((bytes / 64).max(1) as u32);
            llcs.push(Some(CacheGeom { bytes, ways }));
        }
        if llcs
            .iter()
            .zip(cpus)
            .any(|(l, c)| l.is_none() && !c.is_empty())
        {
            notes.push(
                "some CPU nodes have no shared cache above the private one: llc = none".to_string(),
            );
        }

        (private_cache, llcs)
    }

    /// The distance matrix over the kept nodes: (whether the source gave one, the matrix; a
    /// full mesh at 10 / `remote_distance_when_missing` where it did not).
    fn distances(&mut self, origin: &str) -> Result<(bool, Vec<Vec<u32>>), MachineError> {
        let (s, d, single, n, numa, notes) = (
            self.s,
            self.d,
            self.single,
            self.n,
            &self.numa,
            &mut self.notes,
        );
        let kept: Vec<usize> = numa.iter().map(|(i, _)| *i).collect();
        let matrix = if single {
            None
        } else {
            kept_distances(s, &kept, origin, notes)?
        };
        let distances = match &matrix {
            Some(m) => m.clone(),
            None if n == 1 => vec![vec![10]],
            None => {
                notes.push(format!(
                    "no distance matrix: a full mesh is assumed, distances 10 / {}",
                    d.remote_distance_when_missing
                ));
                (0..n)
                    .map(|i| {
                        (0..n)
                            .map(|j| {
                                if i == j {
                                    10
                                } else {
                                    d.remote_distance_when_missing
                                }
                            })
                            .collect()
                    })
                    .collect()
            }
        };
        for (i, row) in distances.iter().enumerate() {
            if let Some((j, &dj)) = row
                .iter()
                .enumerate()
                .filter(|&(j, _)| j != i)
                .min_by_key(|&(_, &v)| v)
            {
                if dj < row[i] {
                    notes.push(format!(
                        "OS node {}'s local distance ({}) is larger than its distance to OS node {} ({}), \
                         as the file gives it: kept as reported (hwloc keeps it too); fallback still \
                         starts at the local node",
                        numa[i].1.os_index, row[i], numa[j].1.os_index, dj
                    ));
                }
            }
        }

        Ok((matrix.is_some(), distances))
    }

    /// Links from CPU-less nodes to the CPU node(s) nearest to them.
    fn memory_node_links(
        &mut self,
        cpus: &[BTreeSet<u32>],
        distances: &[Vec<u32>],
        have_matrix: bool,
        cpu_nodes: &[usize],
        mem_nodes: &[usize],
    ) -> Vec<(usize, usize)> {
        let (numa, notes) = (&self.numa, &mut self.notes);
        // CPU-less nodes hang off the CPU node(s) nearest to them: by distance, else by locality,
        // else every CPU node.
        let mut pairs = Vec::new();
        for &m in mem_nodes {
            let near: Vec<usize> = if have_matrix {
                let best = cpu_nodes
                    .iter()
                    .map(|&c| distances[c][m])
                    .min()
                    .unwrap_or(0);
                cpu_nodes
                    .iter()
                    .copied()
                    .filter(|&c| distances[c][m] == best)
                    .collect()
            } else {
                let loc = &numa[m].1.cpuset;
                let v: Vec<usize> = cpu_nodes
                    .iter()
                    .copied()
                    .filter(|&c| !cpus[c].is_disjoint(loc))
                    .collect();
                if v.is_empty() {
                    cpu_nodes.to_vec()
                } else {
                    v
                }
            };
            pairs.extend(near.into_iter().map(|c| (c.min(m), c.max(m))));
        }
        if !mem_nodes.is_empty() {
            notes.push(format!(
                "CPU-less memory nodes {} are linked to their nearest CPU nodes",
                list(
                    &mem_nodes
                        .iter()
                        .map(|&m| numa[m].1.os_index)
                        .collect::<Vec<_>>()
                )
            ));
        }

        pairs
    }

    /// Each node's idle latency and controller peak, and the links' figures: memory
    /// attributes where they give them, else the defaults (`derived_hop_ns` for links of the
    /// derived model).
    fn node_and_link_figures(
        &mut self,
        cpus: &[BTreeSet<u32>],
        pairs: &[(usize, usize)],
        derived_hop_ns: &HashMap<(usize, usize), f64>,
        cpu_nodes: &[usize],
        mem_nodes: &[usize],
    ) -> (Vec<f64>, Vec<f64>, Vec<Link>) {
        let (s, d, single, n, numa, notes) = (
            self.s,
            self.d,
            self.single,
            self.n,
            &self.numa,
            &mut self.notes,
        );
        let dense_of: HashMap<usize, usize> = if single {
            HashMap::new()
        } else {
            numa.iter()
                .enumerate()
                .map(|(dense, (k, _))| (*k, dense))
                .collect()
        };
        let (lat_name, mut lat) = pair_values(s.latency.as_ref(), &dense_of, cpus);
        let (bw_name, mut bw_mibps) = pair_values(s.bandwidth.as_ref(), &dense_of, cpus);
        let gbps = |mibps: f64| mibps * 1_048_576.0 / 1e9;
        // A value no memory has is a firmware table's mistake (an HMAT in the wrong unit, a
        // placeholder, hwloc's own test file with 20 MiB/s): reported and left out, so the
        // defaults apply, rather than simulated literally. Latency: ≈ 60 ns (local DDR) to a few
        // µs (CXL behind a switch); bandwidth: ≈ 1 GB/s (one old DDR channel, persistent-memory
        // writes) to 2 TB/s (HBM3).
        let os_of = |k: usize| numa[k].1.os_index;
        let mut drop_implausible =
            |vals: &mut HashMap<(usize, usize), f64>,
             what: &str,
             shown: &dyn Fn(f64) -> f64,
             (lo, hi, unit): (f64, f64, &str)| {
                let mut bad: Vec<((usize, usize), f64)> = vals
                    .iter()
                    .filter(|(_, &v)| !(lo..=hi).contains(&shown(v)))
                    .map(|(&k, &v)| (k, v))
                    .collect();
                bad.sort_by_key(|(k, _)| *k);
                if let Some(&((i, t), v)) = bad.first() {
                    notes.push(format!(
                    "memory attribute {what}: {} value(s) not plausible for memory (expected {lo}-{hi} {unit}), e.g. {} {unit} from node {} to node {}: left out, defaults used",
                    bad.len(),
                    (shown(v) * 1000.0).round() / 1000.0,
                    os_of(i),
                    os_of(t)
                ));
                }
                for (k, _) in bad {
                    vals.remove(&k);
                }
            };
        drop_implausible(&mut lat, "latency", &|v| v, (20.0, 5000.0, "ns"));
        drop_implausible(&mut bw_mibps, "bandwidth", &gbps, (1.0, 2000.0, "GB/s"));
        if let Some(name) = &lat_name {
            notes.push(format!("latencies from the '{name}' memory attribute"));
        }
        if let Some(name) = &bw_name {
            notes.push(format!(
                "bandwidths from the '{name}' memory attribute (MiB/s)"
            ));
        }
        let mut idle = vec![d.idle_local_ns; n];
        let mut peak = vec![d.ctrl_peak_gbps; n];
        for &c in cpu_nodes {
            if let Some(&v) = lat.get(&(c, c)) {
                idle[c] = v;
            }
            if let Some(&v) = bw_mibps.get(&(c, c)) {
                peak[c] = gbps(v);
            }
        }
        for &m in mem_nodes {
            peak[m] = bw_mibps
                .iter()
                .filter(|((_, t), _)| *t == m)
                .map(|(_, &v)| gbps(v))
                .fold(None, |acc: Option<f64>, v| {
                    Some(acc.map_or(v, |a| a.max(v)))
                })
                .unwrap_or(d.memory_only_ctrl_peak_gbps);
            // The device behaves as DRAM behind a link: its local latency is its nearest CPU
            // node's, and the link's hop carries the extra latency the attributes show.
            idle[m] = pairs
                .iter()
                .filter_map(|&(a, b)| {
                    if b == m {
                        Some(a)
                    } else if a == m {
                        Some(b)
                    } else {
                        None
                    }
                })
                .map(|c| idle[c])
                .fold(f64::INFINITY, f64::min);
            if !idle[m].is_finite() {
                idle[m] = d.idle_local_ns;
            }
        }
        // What the attributes give per link: (hop ns, GB/s per direction), None where they give
        // nothing for either direction.
        let attributed: Vec<(Option<f64>, Option<f64>)> = pairs
            .iter()
            .map(|&(a, b)| {
                let hops: Vec<f64> = [(a, b), (b, a)]
                    .iter()
                    .filter_map(|&(x, y)| lat.get(&(x, y)).map(|&l| (l - idle[y]).max(0.0)))
                    .collect();
                let hop = (!hops.is_empty()).then(|| hops.iter().sum::<f64>() / hops.len() as f64);
                let gbps_per_dir = [(a, b), (b, a)]
                    .iter()
                    .filter_map(|k| bw_mibps.get(k).map(|&v| gbps(v)))
                    .fold(None, |acc: Option<f64>, v| {
                        Some(acc.map_or(v, |x| x.min(v)))
                    });
                (hop, gbps_per_dir)
            })
            .collect();
        // The CPU-less end of a link, if it has one.
        let memory_end = |(a, b): (usize, usize)| {
            if cpus[a].is_empty() {
                Some(a)
            } else if cpus[b].is_empty() {
                Some(b)
            } else {
                None
            }
        };
        // ACPI HMAT (the kernel's accessN classes, and hwloc's attributes taken from them) gives a
        // memory node's figures only for its best initiators; the other CPU nodes linked to a
        // CPU-less node are no faster, so their links take the slowest attributed link to that node
        // rather than the default, which would make them faster than the best.
        let slowest_to = |m: usize| -> (Option<f64>, Option<f64>) {
            let mut hop: Option<f64> = None;
            let mut bw: Option<f64> = None;
            for (&p, &(h, g)) in pairs.iter().zip(&attributed) {
                if memory_end(p) == Some(m) {
                    hop = h.map_or(hop, |h| Some(hop.map_or(h, |x| x.max(h))));
                    bw = g.map_or(bw, |g| Some(bw.map_or(g, |x| x.min(g))));
                }
            }
            (hop, bw)
        };
        let mut filled: BTreeSet<u32> = BTreeSet::new();
        let links: Vec<Link> = pairs
            .iter()
            .zip(&attributed)
            .map(|(&(a, b), &(hop, bw))| {
                let memory = memory_end((a, b));
                let (fill_hop, fill_bw) = memory.map_or((None, None), slowest_to);
                if let Some(m) = memory {
                    if (hop.is_none() && fill_hop.is_some()) || (bw.is_none() && fill_bw.is_some())
                    {
                        filled.insert(numa[m].1.os_index);
                    }
                }
                let hop_ns = hop.or(fill_hop).unwrap_or(if memory.is_some() {
                    d.memory_only_hop_ns
                } else {
                    derived_hop_ns.get(&(a, b)).copied().unwrap_or(d.hop_ns)
                });
                let gbps_per_dir = bw.or(fill_bw).unwrap_or(if memory.is_some() {
                    d.memory_only_link_gbps_per_dir
                } else {
                    d.link_gbps_per_dir
                });
                Link {
                    a: NodeId(a as u16),
                    b: NodeId(b as u16),
                    gbps_per_dir,
                    hop_ns,
                    next_hop_ns: None,
                }
            })
            .collect();
        if !filled.is_empty() {
            notes.push(format!(
                "links to CPU-less nodes {} from CPU nodes the memory attributes do not name take the \
                 slowest named link to that node (the attributes give only the best initiators)",
                list(&filled.iter().copied().collect::<Vec<_>>())
            ));
        }

        (idle, peak, links)
    }

    /// The machine, its description listing the notes.
    fn assemble(&mut self, a: Assembly) -> Machine {
        let (s, d, single, n, numa, notes) = (
            self.s,
            self.d,
            self.single,
            self.n,
            &self.numa,
            &mut self.notes,
        );
        let Assembly {
            id,
            cpus,
            mem,
            kept_pus,
            smt,
            siblings,
            cores,
            private_cache,
            llcs,
            distances,
            idle,
            peak,
            links,
        } = a;
        let identity = single
            || numa
                .iter()
                .enumerate()
                .all(|(i, (_, o))| o.os_index as usize == i);
        let nodes_hw: Vec<NodeHw> = (0..n)
            .map(|i| NodeHw {
                llc: llcs[i].clone(),
                ctrl_peak_gbps: peak[i],
                idle_local_ns: idle[i],
                curve: d.curve_shape.scaled(idle[i]),
                os_index: if single {
                    None
                } else {
                    Some(numa[i].1.os_index)
                },
            })
            .collect();
        let topology = Topology {
            nodes: (0..n)
                .map(|i| NodeInfo {
                    id: NodeId(i as u16),
                    cpus: cpus[i].iter().map(|&p| CpuId(p)).collect(),
                    mem_bytes: mem[i],
                })
                .collect(),
            distances,
            smt,
        };
        if !identity {
            let map: Vec<String> = numa
                .iter()
                .enumerate()
                .map(|(i, (_, o))| format!("{i}={}", o.os_index))
                .collect();
            notes.push(format!(
                "nodes renumbered densely (id=OS index): {}",
                map.join(", ")
            ));
        }
        let packages = s
            .packages
            .iter()
            .filter(|p| !p.is_disjoint(kept_pus))
            .count();
        let description = format!(
            "{}imported from {}: {} NUMA node{}, {} package{}, {} cores, {} CPUs. Notes: {}",
            s.cpu_model
                .as_ref()
                .map(|m| format!("{m}, "))
                .unwrap_or_default(),
            s.imported_from,
            n,
            if n == 1 { "" } else { "s" },
            packages,
            if packages == 1 { "" } else { "s" },
            cores,
            kept_pus.len(),
            if notes.is_empty() {
                "none".to_string()
            } else {
                notes.join("; ")
            }
        );
        Machine {
            id: id.to_string(),
            description,
            source: s.source.clone(),
            topology,
            core: CoreParams {
                ghz: d.ghz,
                siblings,
                concurrency_lines: d.concurrency_lines,
                rob_entries: d.rob_entries,
                store_buffer_entries: d.store_buffer_entries,
                locked_op_cycles: d.locked_op_cycles,
                // a shared L2 (Bulldozer modules) is imported as each core's own, with a
                // note (`caches`); a machine file can say `private_cache_cores`
                private_cache_cores: 1,
                private_cache,
                private_hit_ns: d.private_hit_ns,
                llc_hit_ns: d.llc_hit_ns,
                tlb: d.tlb.clone(),
            },
            nodes: nodes_hw,
            links,
            link_shape: d.link_shape.clone(),
            coherence: crate::Coherence::Flat,
            link_coherence_overhead: d.link_coherence_overhead,
            memory_directory: d.memory_directory,
            os: d.os.clone(),
        }
    }
}

/// SMT (PUs per core over the cores that keep a PU), how siblings are numbered, and the
/// number of cores that keep a PU.
fn smt_of(cores: &[BTreeSet<u32>], kept_pus: &BTreeSet<u32>) -> (u32, SiblingNumbering, usize) {
    // SMT: PUs per core over the cores that keep a PU.
    let core_sizes: Vec<usize> = cores
        .iter()
        .map(|c| c.intersection(kept_pus).count())
        .filter(|&k| k > 0)
        .collect();
    let smt = if core_sizes.is_empty() {
        1
    } else {
        ((core_sizes.iter().sum::<usize>() as f64 / core_sizes.len() as f64).round() as u32).max(1)
    };
    let siblings = sibling_numbering(cores, kept_pus);

    (smt, siblings, core_sizes.len())
}

/// The links between CPU nodes and how they were found.
struct CpuLinks {
    /// Linked pairs (a < b), dense ids.
    pairs: Vec<(usize, usize)>,
    /// Set when the one-hop model failed and every pair is linked (the derived model): why.
    derived_because: Option<String>,
    /// The smallest remote distance between CPU nodes (0 without any).
    one_hop: u32,
    /// hop_ns of each derived link, by pair.
    derived_hop_ns: HashMap<(usize, usize), f64>,
}

/// Links between CPU nodes from the distance matrix.
///
/// The one-hop model: the smallest remote value is one hop, a direct link; every pair at the
/// k-th remote tier must then be at most k links apart. No matrix or one remote value: a full
/// mesh. Where the tiers cannot come from one-hop links (sub-NUMA clustering 10/11/21,
/// cluster-on-die 10/21/31, multi-level matrices such as 10/50/65/79, asymmetric matrices), the
/// derived model: every pair of CPU nodes linked directly, each link's latency proportional to
/// its distance (mean of both directions), `one_hop_ns` for the smallest remote distance, so
/// the idle latency order of the matrix is kept.
fn cpu_node_links(
    distances: &[Vec<u32>],
    have_matrix: bool,
    cpu_nodes: &[usize],
    os_index: &dyn Fn(usize) -> u32,
    one_hop_ns: f64,
) -> CpuLinks {
    let remote: BTreeSet<u32> = cpu_nodes
        .iter()
        .flat_map(|&i| {
            cpu_nodes
                .iter()
                .filter(move |&&j| j != i)
                .map(move |&j| (i, j))
        })
        .map(|(i, j)| distances[i][j])
        .collect();
    let one_hop = remote.iter().next().copied().unwrap_or(0);
    let mesh: Vec<(usize, usize)> = cpu_nodes
        .iter()
        .enumerate()
        .flat_map(|(x, &i)| cpu_nodes[x + 1..].iter().map(move |&j| (i, j)))
        .collect();
    let one_hop_links = |pairs: Vec<(usize, usize)>| CpuLinks {
        pairs,
        derived_because: None,
        one_hop,
        derived_hop_ns: HashMap::new(),
    };
    if !have_matrix || remote.len() <= 1 {
        return one_hop_links(mesh);
    }
    let pairs: Vec<(usize, usize)> = mesh
        .iter()
        .copied()
        .filter(|&(i, j)| distances[i][j] == one_hop || distances[j][i] == one_hop)
        .collect();
    let tiers: Vec<u32> = remote.iter().copied().collect();
    let hops = bfs_hops(distances.len(), &pairs);
    let mut problem = None;
    'check: for &i in cpu_nodes {
        for &j in cpu_nodes {
            if i == j {
                continue;
            }
            let tier = tiers
                .iter()
                .position(|&t| t == distances[i][j])
                .expect("every remote value is a tier")
                + 1;
            let h = hops[i][j];
            if h == usize::MAX || h > tier {
                problem = Some(format!(
                    "OS nodes {} and {} are at distance {} ({} hops by the matrix's tiers {:?}) but {}",
                    os_index(i),
                    os_index(j),
                    distances[i][j],
                    tier,
                    tiers,
                    if tier == 2 {
                        "have no common one-hop neighbour".to_string()
                    } else if h == usize::MAX {
                        "are not connected by one-hop links".to_string()
                    } else {
                        format!("are {h} one-hop links apart")
                    }
                ));
                break 'check;
            }
        }
    }
    let Some(why) = problem else {
        return one_hop_links(pairs);
    };
    let derived_hop_ns = mesh
        .iter()
        .map(|&(i, j)| {
            let dist = f64::from(distances[i][j]) / 2.0 + f64::from(distances[j][i]) / 2.0;
            ((i, j), one_hop_ns * dist / f64::from(one_hop.max(1)))
        })
        .collect();
    CpuLinks {
        pairs: mesh,
        derived_because: Some(why),
        one_hop,
        derived_hop_ns,
    }
}

/// Hop counts over undirected `pairs` (usize::MAX: unreachable).
fn bfs_hops(n: usize, pairs: &[(usize, usize)]) -> Vec<Vec<usize>> {
    let mut adj = vec![Vec::new(); n];
    for &(a, b) in pairs {
        adj[a].push(b);
        adj[b].push(a);
    }
    (0..n)
        .map(|src| {
            let mut h = vec![usize::MAX; n];
            h[src] = 0;
            let mut q = std::collections::VecDeque::from([src]);
            while let Some(v) = q.pop_front() {
                for &w in &adj[v] {
                    if h[w] == usize::MAX {
                        h[w] = h[v] + 1;
                        q.push_back(w);
                    }
                }
            }
            h
        })
        .collect()
}

/// `0-1,12-15` for a list of ids.
fn list(ids: &[u32]) -> String {
    crate::cpulist::format(&ids.iter().map(|&i| CpuId(i)).collect::<Vec<_>>())
}

/// How the kept PUs of each core are numbered: adjacent where every core with several PUs
/// has consecutive ids (`0,1`), else Linux's spread (`0,44`), which is also what a machine
/// without SMT gets (the numbering then means nothing).
fn sibling_numbering(cores: &[BTreeSet<u32>], kept: &BTreeSet<u32>) -> SiblingNumbering {
    let mut multi = cores
        .iter()
        .map(|c| c.intersection(kept).copied().collect::<Vec<u32>>())
        .filter(|pus| pus.len() > 1)
        .peekable();
    if multi.peek().is_none() {
        return SiblingNumbering::Spread;
    }
    if multi.all(|pus| pus.windows(2).all(|w| w[1] == w[0] + 1)) {
        SiblingNumbering::Adjacent
    } else {
        SiblingNumbering::Spread
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bitmaps() {
        let b = Bitmap::parse("0x0000f06f").unwrap();
        assert_eq!(
            b.bits.iter().copied().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 5, 6, 12, 13, 14, 15]
        );
        let b = Bitmap::parse("0x00000001,0x80000000").unwrap();
        assert_eq!(b.bits.iter().copied().collect::<Vec<_>>(), vec![31, 32]);
        let b = Bitmap::parse("0xf...f,0x00000003").unwrap();
        assert!(b.contains(0) && b.contains(1) && !b.contains(2) && b.contains(40));
        assert!(Bitmap::parse("0x0").unwrap().bits.is_empty());
        assert!(Bitmap::parse("0xzz").is_err());
        // hwloc writes all-zero words after the first as nothing
        let b = Bitmap::parse("0x00000001,,0x10000000").unwrap();
        assert_eq!(b.bits.iter().copied().collect::<Vec<_>>(), vec![28, 64]);
        let b = Bitmap::parse("0x0000ffff,,,").unwrap();
        assert_eq!(b.bits.iter().next(), Some(&96));
        assert_eq!(b.bits.len(), 16);
        assert!(Bitmap::parse("0x1,0x").is_err(), "a bare 0x is not a word");
    }
}
