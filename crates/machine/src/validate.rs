//! Whole-machine validation. Problems are reported with the key of the TOML format
//! (docs/machine-format.md) that holds the wrong figure, so a user can find it in their file.

use crate::{CacheGeom, Curve, Machine, MachineError, RouteError, TlbPool};
use numalab_core::{PageSize, TopologyError};

/// A validation failure before it is attached to a file or machine name.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Problem {
    pub key: String,
    pub problem: String,
    pub expected: String,
}

impl Problem {
    pub fn new(
        key: impl Into<String>,
        problem: impl Into<String>,
        expected: impl Into<String>,
    ) -> Problem {
        Problem {
            key: key.into(),
            problem: problem.into(),
            expected: expected.into(),
        }
    }

    pub fn into_error(self, origin: String) -> MachineError {
        MachineError::Invalid {
            origin,
            key: self.key,
            problem: self.problem,
            expected: self.expected,
        }
    }
}

/// The relative distance between a curve's zero-load value and the node's `idle_local_ns`
/// beyond which they are taken to be in different units (cycles, or another node's figures).
/// Measured curves start a little off the idle figure (Gold 6130: 92 vs 90 ns), so some slack.
const CURVE_IDLE_TOLERANCE: f64 = 0.25;

fn positive(key: &str, v: f64, expected: &str) -> Result<(), Problem> {
    if v.is_finite() && v > 0.0 {
        Ok(())
    } else {
        Err(Problem::new(
            key,
            format!("{v} is not a positive number"),
            expected,
        ))
    }
}

fn non_negative(key: &str, v: f64, expected: &str) -> Result<(), Problem> {
    if v.is_finite() && v >= 0.0 {
        Ok(())
    } else {
        Err(Problem::new(
            key,
            format!("{v} is negative or not a number"),
            expected,
        ))
    }
}

fn cache(key: &str, c: &CacheGeom) -> Result<(), Problem> {
    if c.bytes < 64 || c.bytes & 63 != 0 {
        return Err(Problem::new(
            format!("{key}.bytes"),
            format!("{} bytes is not a whole number of 64-byte lines", c.bytes),
            "a cache size in bytes, a positive multiple of 64",
        ));
    }
    if c.ways == 0 || u64::from(c.ways) > c.bytes / 64 {
        return Err(Problem::new(
            format!("{key}.ways"),
            format!("{} ways for {} lines", c.ways, c.bytes / 64),
            "an associativity between 1 and the number of lines (lines = fully associative)",
        ));
    }
    Ok(())
}

pub(crate) fn curve(key: &str, c: &Curve) -> Result<(), Problem> {
    c.validate().map_err(|e| {
        Problem::new(key, e.to_string(), "[[utilisation %, value], ...] with increasing utilisations in 0..=100 and non-decreasing values")
    })?;
    if let Some(&(_, v)) = c.points.iter().find(|(_, v)| !(v.is_finite() && *v > 0.0)) {
        return Err(Problem::new(
            key,
            format!("value {v} is not positive"),
            "positive latencies (ns) or ratios",
        ));
    }
    Ok(())
}

fn tlb_pools(key: &str, pools: &[TlbPool]) -> Result<(), Problem> {
    let mut seen: Vec<PageSize> = Vec::new();
    for (i, p) in pools.iter().enumerate() {
        let k = format!("{key}[{i}]");
        if p.entries == 0 {
            return Err(Problem::new(
                format!("{k}.entries"),
                "0 entries",
                "a pool with at least one entry",
            ));
        }
        if p.ways == 0 || p.ways > p.entries || p.entries % p.ways != 0 {
            return Err(Problem::new(
                format!("{k}.ways"),
                format!("{} ways for {} entries", p.ways, p.entries),
                "ways dividing entries (ways = entries: fully associative)",
            ));
        }
        if p.sizes.is_empty() {
            return Err(Problem::new(
                format!("{k}.sizes"),
                "no page sizes",
                "one or more of \"4K\", \"2M\", \"1G\"",
            ));
        }
        for s in &p.sizes {
            if seen.contains(s) {
                return Err(Problem::new(
                    format!("{k}.sizes"),
                    format!("{s} pages are cached by two pools of this level"),
                    "each page size in at most one pool per TLB level",
                ));
            }
            seen.push(*s);
        }
    }
    Ok(())
}

fn topology_problem(e: TopologyError) -> Problem {
    let text = e.to_string();
    match e {
        TopologyError::NoNodes => Problem::new("node", text, "at least one [[node]] table"),
        TopologyError::NodeOrder { pos, .. } => Problem::new(
            format!("node[{pos}].id"),
            text,
            format!("id = {pos}: nodes listed in id order 0, 1, 2, ..."),
        ),
        TopologyError::DistanceShape { nodes, .. } => Problem::new(
            "distances.matrix",
            text,
            format!("a {nodes}×{nodes} matrix, one row per node"),
        ),
        TopologyError::DistanceDiagonal(i) => Problem::new(
            format!("distances.matrix[{i}]"),
            text,
            "the diagonal (local) entry, usually 10, to be the smallest of its row",
        ),
        TopologyError::DuplicateCpu { b, .. } => Problem::new(
            format!("node[{b}].cpus"),
            text,
            "every CPU on exactly one node",
        ),
        TopologyError::NoCpus => Problem::new("node[*].cpus", text, "at least one node with CPUs"),
    }
}

/// Check an imported machine whose distance matrix is the OS's as reported (hwloc XML, the
/// kernel's SLIT): every rule of [`check`] but one, the local distance being the smallest of
/// its row. Reported matrices break it (hwloc's `8ia64-2n2s2c+1n` file: rows of three nodes
/// read from a larger machine's SLIT) and are kept as the OS gives them; the fallback order
/// starts at the local node regardless (`Topology::nodes_by_distance`). A matrix written in a
/// machine file is checked whole: there a large local distance is a mistake.
pub(crate) fn check_reported(m: &Machine) -> Result<(), Problem> {
    if !local_distance_not_smallest(m).is_empty() {
        let mut probe = m.clone();
        for (i, row) in probe.topology.distances.iter_mut().enumerate() {
            if let Some(&min) = row.iter().min() {
                if i < row.len() {
                    row[i] = row[i].min(min);
                }
            }
        }
        return check(&probe);
    }
    check(m)
}

/// Nodes (dense ids) whose local distance is larger than another entry of their row.
pub(crate) fn local_distance_not_smallest(m: &Machine) -> Vec<usize> {
    m.topology
        .distances
        .iter()
        .enumerate()
        .filter(|(i, row)| row.get(*i).is_some_and(|l| row.iter().any(|d| d < l)))
        .map(|(i, _)| i)
        .collect()
}

/// Check a whole machine; the first problem found is returned.
pub(crate) fn check(m: &Machine) -> Result<(), Problem> {
    if m.id.trim().is_empty() {
        return Err(Problem::new(
            "id",
            "the id is empty",
            "a short name such as \"xeon-gold6130-2n\"",
        ));
    }
    let topo = &m.topology;
    topo.validate().map_err(topology_problem)?;
    if topo.smt == 0 {
        return Err(Problem::new(
            "core.threads_per_core",
            "0",
            "1 (no SMT) or more hardware threads per core",
        ));
    }
    let n = topo.num_nodes();
    if m.nodes.len() != n {
        return Err(Problem::new(
            "node",
            format!("{} hardware entries for {} nodes", m.nodes.len(), n),
            "one [[node]] per node",
        ));
    }
    for (i, row) in topo.distances.iter().enumerate() {
        if row.contains(&0) {
            return Err(Problem::new(
                format!("distances.matrix[{i}]"),
                "a distance of 0",
                "SLIT-like distances: 10 local, larger remote",
            ));
        }
    }

    let c = &m.core;
    positive("core.ghz", c.ghz, "the core clock in GHz")?;
    // no CPU has run a core above ~9 GHz even overclocked; a value past that is a unit slip
    // (MHz for GHz) or a typo, and would make every cycle count as nothing
    if c.ghz > 10.0 {
        return Err(Problem::new(
            "core.ghz",
            format!(
                "{} GHz is not a core clock",
                if c.ghz >= 1e6 {
                    format!("{:e}", c.ghz)
                } else {
                    c.ghz.to_string()
                }
            ),
            "the core clock in GHz, between 0 and 10 (e.g. 2.2)",
        ));
    }
    if !(c.concurrency_lines.is_finite() && c.concurrency_lines >= 1.0) {
        return Err(Problem::new(
            "core.concurrency_lines",
            format!("{}", c.concurrency_lines),
            "misses one core keeps in flight, at least 1 (reference/machines.md §5.4)",
        ));
    }
    if !(1..=4096).contains(&c.rob_entries) {
        return Err(Problem::new(
            "core.rob_entries",
            format!("{}", c.rob_entries),
            "reorder-buffer entries per core, 1 to 4096 (72 on K10, 224 on Skylake-SP)",
        ));
    }
    if !(1..=256).contains(&c.store_buffer_entries) {
        return Err(Problem::new(
            "core.store_buffer_entries",
            format!("{}", c.store_buffer_entries),
            "store-buffer entries per core, 1 to 256 (24 on Bulldozer, 56 on Skylake-SP)",
        ));
    }
    if !(1..=10_000).contains(&c.locked_op_cycles) {
        return Err(Problem::new(
            "core.locked_op_cycles",
            format!("{}", c.locked_op_cycles),
            "cycles of a locked read-modify-write on a line in the L1, 1 to 10000 (about 20 on most x86 cores)",
        ));
    }
    cache("core.private_cache", &c.private_cache)?;
    if !(1..=16).contains(&c.private_cache_cores) {
        return Err(Problem::new(
            "core.private_cache_cores",
            format!("{}", c.private_cache_cores),
            "the cores that share one private cache, 1 to 16 (2 on Bulldozer modules)",
        ));
    }
    positive(
        "core.private_hit_ns",
        c.private_hit_ns,
        "the private-cache (L2) load-to-use latency in ns",
    )?;
    positive(
        "core.llc_hit_ns",
        c.llc_hit_ns,
        "the LLC load-to-use latency in ns",
    )?;
    if c.llc_hit_ns < c.private_hit_ns {
        return Err(Problem::new(
            "core.llc_hit_ns",
            format!(
                "{} ns is below core.private_hit_ns = {} ns",
                c.llc_hit_ns, c.private_hit_ns
            ),
            "an LLC hit no faster than a private-cache hit",
        ));
    }
    if c.tlb.l1.is_empty() {
        return Err(Problem::new(
            "core.tlb.l1",
            "no L1 DTLB pools",
            "at least one pool, e.g. { entries = 64, ways = 4, sizes = [\"4K\"] }",
        ));
    }
    tlb_pools("core.tlb.l1", &c.tlb.l1)?;
    tlb_pools("core.tlb.l2", &c.tlb.l2)?;
    non_negative(
        "core.tlb.l2_hit_ns",
        c.tlb.l2_hit_ns,
        "the extra latency of an L2 TLB hit in ns, 0 or more",
    )?;
    non_negative(
        "core.tlb.walk_base_ns",
        c.tlb.walk_base_ns,
        "the fixed page-walk cost in ns, 0 or more",
    )?;
    if !(1..=16).contains(&c.tlb.page_walkers) {
        return Err(Problem::new(
            "core.tlb.page_walkers",
            format!("{} page walkers", c.tlb.page_walkers),
            "the page walks a core has in flight at once, 1 to 16 (1 up to Haswell, 2 from Skylake)",
        ));
    }
    let psc_entries = match c.tlb.psc {
        crate::PscConfig::Split {
            pde_entries,
            pdpte_entries,
        } => [pde_entries, pdpte_entries],
        crate::PscConfig::Unified { entries } => [entries, 0],
    };
    if psc_entries.iter().any(|&e| e > 4096) {
        return Err(Problem::new(
            "core.tlb.psc",
            format!("{psc_entries:?} entries"),
            "at most 4096 entries per paging-structure cache (0: none; real ones hold 2-64)",
        ));
    }

    for (i, (hw, info)) in m.nodes.iter().zip(&topo.nodes).enumerate() {
        let k = |s: &str| format!("node[{i}].{s}");
        positive(
            &k("ctrl_peak_gbps"),
            hw.ctrl_peak_gbps,
            "the sustained controller peak in GB/s",
        )?;
        positive(
            &k("idle_local_ns"),
            hw.idle_local_ns,
            "the idle local DRAM latency in ns",
        )?;
        curve(&k("curve"), &hw.curve)?;
        let idle = hw.curve.idle();
        if (idle - hw.idle_local_ns).abs() > CURVE_IDLE_TOLERANCE * hw.idle_local_ns {
            return Err(Problem::new(
                k("curve"),
                format!("the curve starts at {idle} ns but idle_local_ns is {} ns", hw.idle_local_ns),
                "a curve of local latencies in ns that starts near idle_local_ns (or curve_shape = \"intel\" / \"amd\")",
            ));
        }
        match (&hw.llc, info.cpus.is_empty()) {
            (Some(_), true) => {
                return Err(Problem::new(
                    k("llc"),
                    "a CPU-less node has an LLC",
                    "llc = \"none\" on a node without CPUs",
                ));
            }
            (Some(g), false) => cache(&k("llc"), g)?,
            (None, _) => {}
        }
        if info.cpus.is_empty() && info.mem_bytes == 0 {
            return Err(Problem::new(
                k("mem_bytes"),
                "a node with neither CPUs nor memory",
                "memory in bytes on a CPU-less node",
            ));
        }
    }
    if topo.total_mem_bytes() == 0 {
        return Err(Problem::new(
            "node[*].mem_bytes",
            "no node has memory",
            "memory in bytes on at least one node",
        ));
    }

    curve("link_shape", &m.link_shape)?;
    if (m.link_shape.idle() - 1.0).abs() > 1e-9 {
        return Err(Problem::new(
            "link_shape",
            format!("the shape starts at {}", m.link_shape.idle()),
            "a normalised shape (latency ÷ idle) starting at 1.0, or \"intel\" / \"amd\"",
        ));
    }
    non_negative(
        "link_coherence_overhead",
        m.link_coherence_overhead,
        "a fraction of payload, e.g. 0.1 for +10 %",
    )?;
    let mut pairs = std::collections::HashSet::new();
    for (i, l) in m.links.iter().enumerate() {
        let k = |s: &str| format!("link[{i}].{s}");
        let (a, b) = (l.a.index(), l.b.index());
        if a >= n || b >= n {
            return Err(Problem::new(
                k(if a >= n { "a" } else { "b" }),
                format!("node {} does not exist", a.max(b)),
                format!("a node id below {n}"),
            ));
        }
        if a == b {
            return Err(Problem::new(
                k("b"),
                format!("the link joins node {a} to itself"),
                "two different nodes",
            ));
        }
        if !pairs.insert((a.min(b), a.max(b))) {
            return Err(Problem::new(
                k("b"),
                format!("a second link between nodes {} and {}", a.min(b), a.max(b)),
                "one link per pair: give it the total bandwidth of the physical links",
            ));
        }
        positive(
            &k("gbps_per_dir"),
            l.gbps_per_dir,
            "the effective bandwidth per direction in GB/s",
        )?;
        non_negative(&k("hop_ns"), l.hop_ns, "the latency the hop adds in ns")?;
        if let Some(v) = l.next_hop_ns {
            non_negative(
                &k("next_hop_ns"),
                v,
                "the latency the link adds as a later hop in ns",
            )?;
        }
    }
    m.routes().map_err(|e| match e {
        RouteError::Unreachable { .. } => Problem::new(
            "link",
            e.to_string(),
            "links that connect every node to every other",
        ),
        RouteError::BadNode { index, .. } => Problem::new(
            format!("link[{index}]"),
            e.to_string(),
            format!("node ids below {n}"),
        ),
    })?;

    let o = &m.os;
    for (key, v) in [
        ("os.fault_4k_ns", o.fault_4k_ns),
        ("os.fault_2m_ns", o.fault_2m_ns),
        ("os.fault_1g_ns", o.fault_1g_ns),
        ("os.fault_file_4k_ns", o.fault_file_4k_ns),
        ("os.move_pages_base_ns", o.move_pages_base_ns),
        ("os.migrate_pages_base_ns", o.migrate_pages_base_ns),
        ("os.split_ns", o.split_ns),
        ("os.tlb_shootdown_ns", o.tlb_shootdown_ns),
        ("os.tlb_shootdown_per_cpu_ns", o.tlb_shootdown_per_cpu_ns),
        ("os.tlb_flush_ipi_ns", o.tlb_flush_ipi_ns),
        ("os.context_switch_ns", o.context_switch_ns),
        ("os.sample_ns", o.sample_ns),
        ("os.signal_ns", o.signal_ns),
        ("os.mprotect_ns", o.mprotect_ns),
    ] {
        non_negative(key, v, "a cost in ns, 0 or more")?;
    }
    if crate::parse_linux_version(&o.linux).is_none() {
        return Err(Problem::new(
            "os.linux",
            format!("{:?} is not a Linux release", o.linux),
            "MAJOR.MINOR, e.g. \"3.9\" or \"6.1\"",
        ));
    }
    non_negative(
        "os.thp_migrate_mbps",
        o.thp_migrate_mbps,
        "a throughput in MB/s, or 0 for huge folios at the base-page rates",
    )?;
    for (key, v) in [
        ("os.move_pages_mbps", o.move_pages_mbps),
        ("os.migrate_pages_mbps", o.migrate_pages_mbps),
        ("os.kernel_copy_mbps", o.kernel_copy_mbps),
    ] {
        positive(key, v, "a throughput in MB/s (10^6 B/s)")?;
    }
    Ok(())
}
