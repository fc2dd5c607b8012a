//! `/sys/devices/system/node`: node lists, per-node CPUs, SLIT distances, meminfo, numastat and
//! the heterogeneous-memory access attributes (`accessN/initiators`).

use crate::error::{Error, ParseError};
use crate::parse::{
    parse_cpu_list, parse_key_values, parse_node_list, parse_single_u64, parse_u64,
};
use crate::sysroot::SysRoot;
use numalab_core::nodemask::MAX_NODES;
use numalab_core::{CpuId, NodeId, NodeInfo, NodeMask, Topology};
use serde::Serialize;
use std::collections::BTreeMap;

/// The node directory, relative to a [`SysRoot`].
pub const NODE_DIR: &str = "sys/devices/system/node";
/// Online nodes (N_ONLINE).
pub const ONLINE: &str = "sys/devices/system/node/online";
/// Nodes with memory (N_MEMORY): the only valid targets of policies and migrations.
pub const HAS_MEMORY: &str = "sys/devices/system/node/has_memory";

/// One `accessN` class of a memory node (kernel Documentation/admin-guide/mm/numaperf.rst):
/// the best performance from the initiator nodes listed, as the firmware's HMAT reports it.
/// access0 is for any initiator, access1 for CPU initiators only.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct AccessClass {
    /// Initiator nodes (the `nodeM` links in `accessN/initiators/`).
    pub initiators: NodeMask,
    /// `read_bandwidth`, MB/s.
    pub read_bandwidth_mb_per_s: Option<u64>,
    /// `write_bandwidth`, MB/s.
    pub write_bandwidth_mb_per_s: Option<u64>,
    /// `read_latency`, nanoseconds.
    pub read_latency_ns: Option<u64>,
    /// `write_latency`, nanoseconds.
    pub write_latency_ns: Option<u64>,
}

/// `nodeN/meminfo`. Values are as the kernel prints them: kB for the `... kB` lines, counts for
/// `HugePages_*`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeMeminfo {
    /// The node the lines name.
    pub node: NodeId,
    /// `MemTotal`, kB.
    pub mem_total_kb: u64,
    /// `MemFree`, kB.
    pub mem_free_kb: u64,
    /// Every line, by name (`MemTotal`, `AnonHugePages`, `HugePages_Total`, ...).
    pub fields: BTreeMap<String, u64>,
}

impl NodeMeminfo {
    /// A field in kB (None for a missing one or a count like `HugePages_Free`).
    pub fn kb(&self, name: &str) -> Option<u64> {
        if name.starts_with("HugePages_") {
            return None;
        }
        self.fields.get(name).copied()
    }

    /// MemTotal in bytes.
    pub fn mem_total_bytes(&self) -> u64 {
        self.mem_total_kb.saturating_mul(1024)
    }
}

/// One online node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeEntry {
    /// The node.
    pub id: NodeId,
    /// `cpulist`; empty for a CPU-less (memory-only) node.
    pub cpus: Vec<CpuId>,
    /// `distance`: SLIT distance to each online node, in online order (10 = local).
    pub distances: Vec<(NodeId, u32)>,
    /// `meminfo`, if present.
    pub meminfo: Option<NodeMeminfo>,
    /// `numastat` (numa_hit, numa_miss, numa_foreign, interleave_hit, local_node, other_node).
    pub numastat: Option<BTreeMap<String, u64>>,
    /// `access0` (any initiator) and `access1` (CPU initiators); None where firmware gives no HMAT.
    pub access: [Option<AccessClass>; 2],
}

/// The whole node tree.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct NodeTree {
    /// `possible`: nodes that may ever come online.
    pub possible: NodeMask,
    /// `online`: nodes present now (N_ONLINE).
    pub online: NodeMask,
    /// N_CPU; the optional lists are None when a kernel lacks the file.
    pub has_cpu: Option<NodeMask>,
    /// `has_memory` (N_MEMORY): valid policy and migration targets.
    pub has_memory: Option<NodeMask>,
    /// `has_normal_memory` (N_NORMAL_MEMORY).
    pub has_normal_memory: Option<NodeMask>,
    /// `has_generic_initiator` (5.10+): nodes with non-CPU initiators.
    pub has_generic_initiator: Option<NodeMask>,
    /// Online nodes in increasing id order.
    pub nodes: Vec<NodeEntry>,
}

impl NodeTree {
    /// The entry of `node`, if online.
    pub fn node(&self, node: NodeId) -> Option<&NodeEntry> {
        self.nodes.iter().find(|n| n.id == node)
    }

    /// SLIT distance from `from` to `to`.
    pub fn distance(&self, from: NodeId, to: NodeId) -> Option<u32> {
        self.node(from)?
            .distances
            .iter()
            .find(|(n, _)| *n == to)
            .map(|(_, d)| *d)
    }

    /// Nodes without CPUs (memory-only nodes such as CXL or PMEM expanders).
    pub fn cpuless(&self) -> NodeMask {
        NodeMask::from_nodes(
            self.nodes
                .iter()
                .filter(|n| n.cpus.is_empty())
                .map(|n| n.id),
        )
    }

    /// numalab's [`Topology`] (nodes, CPUs, MemTotal, distances), when node ids are dense
    /// `0..n` as `Topology` requires; `smt` is not in the node tree, so the caller gives it.
    pub fn to_topology(&self, smt: u32) -> Option<Topology> {
        if self
            .nodes
            .iter()
            .enumerate()
            .any(|(i, n)| n.id.index() != i)
        {
            return None;
        }
        let nodes = self
            .nodes
            .iter()
            .map(|n| NodeInfo {
                id: n.id,
                cpus: n.cpus.clone(),
                mem_bytes: n.meminfo.as_ref().map_or(0, |m| m.mem_total_bytes()),
            })
            .collect();
        let distances = self
            .nodes
            .iter()
            .map(|from| {
                self.nodes
                    .iter()
                    .map(|to| self.distance(from.id, to.id).unwrap_or(0))
                    .collect()
            })
            .collect();
        Some(Topology {
            nodes,
            distances,
            smt,
        })
    }
}

/// Parse a `distance` row: space-separated SLIT distances.
pub fn parse_distance(text: &str, file: &str) -> Result<Vec<u32>, ParseError> {
    let mut out = Vec::new();
    for tok in text.split_whitespace() {
        let d: u32 = tok.parse().map_err(|_| {
            ParseError::new(
                file,
                1,
                "space-separated SLIT distances (unsigned integers)",
                tok,
            )
        })?;
        out.push(d);
    }
    if out.is_empty() {
        return Err(ParseError::new(
            file,
            1,
            "at least one distance",
            text.trim(),
        ));
    }
    Ok(out)
}

/// Parse `nodeN/meminfo` (`Node 0 MemTotal:  6383820 kB` lines).
pub fn parse_meminfo(text: &str, file: &str) -> Result<NodeMeminfo, ParseError> {
    let mut node: Option<u16> = None;
    let mut fields = BTreeMap::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let expected = "'Node N Name: value [kB]'";
        let toks: Vec<&str> = line.split_whitespace().collect();
        if toks.len() < 4 || toks.len() > 5 || toks[0] != "Node" || !toks[2].ends_with(':') {
            return Err(ParseError::new(file, ln, expected, line));
        }
        if toks.len() == 5 && toks[4] != "kB" {
            return Err(ParseError::new(file, ln, "the unit 'kB'", toks[4]));
        }
        let n: u16 = toks[1]
            .parse()
            .ok()
            .filter(|n| (*n as usize) < MAX_NODES)
            .ok_or_else(|| {
                ParseError::new(
                    file,
                    ln,
                    format!("a node number below {MAX_NODES}"),
                    toks[1],
                )
            })?;
        match node {
            None => node = Some(n),
            Some(prev) if prev != n => {
                return Err(ParseError::new(
                    file,
                    ln,
                    format!("node {prev} on every line"),
                    line,
                ));
            }
            _ => {}
        }
        let name = toks[2].trim_end_matches(':');
        let v = parse_u64(toks[3], file, ln, name)?;
        fields.insert(name.to_string(), v);
    }
    let Some(node) = node else {
        return Err(ParseError::new(file, 0, "meminfo lines", ""));
    };
    let need = |k: &str| {
        fields
            .get(k)
            .copied()
            .ok_or_else(|| ParseError::new(file, 0, format!("a {k} line"), "none"))
    };
    Ok(NodeMeminfo {
        node: NodeId(node),
        mem_total_kb: need("MemTotal")?,
        mem_free_kb: need("MemFree")?,
        fields,
    })
}

/// Parse `nodeN/numastat`.
pub fn parse_numastat(text: &str, file: &str) -> Result<BTreeMap<String, u64>, ParseError> {
    Ok(parse_key_values(text, file)?.into_iter().collect())
}

fn read_mask(root: &SysRoot, name: &str) -> Result<Option<NodeMask>, Error> {
    let rel = format!("{NODE_DIR}/{name}");
    match root.read_optional(&rel)? {
        None => Ok(None),
        Some(t) => Ok(Some(
            parse_node_list(&t, &rel).map_err(|e| e.in_file(root.path(&rel).display()))?,
        )),
    }
}

/// Node number of a `nodeN` directory entry name.
pub(crate) fn node_of_name(name: &str) -> Option<NodeId> {
    let n: u16 = name.strip_prefix("node")?.parse().ok()?;
    ((n as usize) < MAX_NODES).then_some(NodeId(n))
}

fn read_access(root: &SysRoot, node: NodeId, class: usize) -> Result<Option<AccessClass>, Error> {
    let dir = format!("{NODE_DIR}/node{}/access{class}/initiators", node.0);
    let Some(names) = root.list_dir(&dir)? else {
        return Ok(None);
    };
    let mut a = AccessClass {
        initiators: NodeMask::from_nodes(names.iter().filter_map(|n| node_of_name(n))),
        ..Default::default()
    };
    for (name, slot) in [
        ("read_bandwidth", &mut a.read_bandwidth_mb_per_s),
        ("write_bandwidth", &mut a.write_bandwidth_mb_per_s),
        ("read_latency", &mut a.read_latency_ns),
        ("write_latency", &mut a.write_latency_ns),
    ] {
        let rel = format!("{dir}/{name}");
        if let Some(t) = root.read_optional(&rel)? {
            *slot = Some(
                parse_single_u64(&t, &rel, name)
                    .map_err(|e| e.in_file(root.path(&rel).display()))?,
            );
        }
    }
    Ok(Some(a))
}

/// Read the node tree under `root`. Optional files (has_* lists, meminfo, numastat, access
/// classes) may be missing; `possible`, `online` and each online node's `cpulist` and
/// `distance` must be there.
pub fn read_node_tree(root: &SysRoot) -> Result<NodeTree, Error> {
    let need = |name: &str| -> Result<NodeMask, Error> {
        read_mask(root, name)?.ok_or_else(|| {
            Error::io(
                root.path(&format!("{NODE_DIR}/{name}")),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "missing: is this a NUMA kernel (CONFIG_NUMA)?",
                ),
            )
        })
    };
    let mut tree = NodeTree {
        possible: need("possible")?,
        online: need("online")?,
        has_cpu: read_mask(root, "has_cpu")?,
        has_memory: read_mask(root, "has_memory")?,
        has_normal_memory: read_mask(root, "has_normal_memory")?,
        has_generic_initiator: read_mask(root, "has_generic_initiator")?,
        nodes: Vec::new(),
    };
    let online: Vec<NodeId> = tree.online.iter().collect();
    for &id in &online {
        let dir = format!("{NODE_DIR}/node{}", id.0);
        let full = |rel: &str| root.path(rel).display().to_string();
        let rel = format!("{dir}/cpulist");
        let cpus = parse_cpu_list(&root.read(&rel)?, &rel).map_err(|e| e.in_file(full(&rel)))?;
        let rel = format!("{dir}/distance");
        let row = parse_distance(&root.read(&rel)?, &rel).map_err(|e| e.in_file(full(&rel)))?;
        if row.len() != online.len() {
            return Err(ParseError::new(
                &full(&rel),
                1,
                format!(
                    "{} distances, one per online node ({})",
                    online.len(),
                    tree.online
                ),
                &row.len().to_string(),
            )
            .into());
        }
        let distances = online.iter().copied().zip(row).collect();
        let rel = format!("{dir}/meminfo");
        let meminfo = match root.read_optional(&rel)? {
            Some(t) => Some(parse_meminfo(&t, &rel).map_err(|e| e.in_file(full(&rel)))?),
            None => None,
        };
        let rel = format!("{dir}/numastat");
        let numastat = match root.read_optional(&rel)? {
            Some(t) => Some(parse_numastat(&t, &rel).map_err(|e| e.in_file(full(&rel)))?),
            None => None,
        };
        tree.nodes.push(NodeEntry {
            id,
            cpus,
            distances,
            meminfo,
            numastat,
            access: [read_access(root, id, 0)?, read_access(root, id, 1)?],
        });
    }
    Ok(tree)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distance_rows() {
        assert_eq!(
            parse_distance("10 16 22 16\n", "distance").unwrap(),
            vec![10, 16, 22, 16]
        );
        assert!(parse_distance("\n", "distance").is_err());
        let e = parse_distance("10 x", "node0/distance").unwrap_err();
        assert_eq!(e.found, "x");
        assert!(
            e.to_string().starts_with("node0/distance:1: expected"),
            "{e}"
        );
    }

    #[test]
    fn meminfo_lines() {
        let t =
            "Node 2 MemTotal:  1024 kB\nNode 2 MemFree:  512 kB\nNode 2 HugePages_Total:     3\n";
        let m = parse_meminfo(t, "meminfo").unwrap();
        assert_eq!(m.node, NodeId(2));
        assert_eq!(m.mem_total_kb, 1024);
        assert_eq!(m.mem_total_bytes(), 1024 * 1024);
        assert_eq!(m.fields["HugePages_Total"], 3);
        assert_eq!(m.kb("HugePages_Total"), None);
        let e =
            parse_meminfo("Node 2 MemTotal: 1 kB\nNode 3 MemFree: 1 kB\n", "meminfo").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_meminfo("Node 2 MemTotal: 1 kB\n", "meminfo").unwrap_err();
        assert!(e.expected.contains("MemFree"), "{e}");
        assert!(parse_meminfo("Node 999 MemTotal: 1 kB", "meminfo").is_err());
        assert!(parse_meminfo("Node 0 MemTotal: 1 MB", "meminfo").is_err());
        assert!(parse_meminfo("", "meminfo").is_err());
    }
}
