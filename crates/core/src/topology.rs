//! The NUMA topology as the OS sees it: nodes, their CPUs and memory, and the SLIT-like
//! distance matrix. Hardware performance figures (latencies, bandwidths, links) belong to the
//! machine description (`numalab-machine`), not here.

use crate::ids::{CpuId, NodeId};
use crate::nodemask::NodeMask;
use serde::{Deserialize, Serialize};

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeInfo {
    pub id: NodeId,
    /// Logical CPUs local to the node, in OS numbering; empty for a CPU-less memory node.
    pub cpus: Vec<CpuId>,
    pub mem_bytes: u64,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Topology {
    /// Indexed by node id: node ids are dense 0..n (an importer renumbers sparse ones).
    pub nodes: Vec<NodeInfo>,
    /// `distances[from][to]`, SLIT units (10 = local).
    pub distances: Vec<Vec<u32>>,
    /// Hardware threads per core (SMT siblings share a core's resources).
    pub smt: u32,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TopologyError {
    #[error("topology has no nodes")]
    NoNodes,
    #[error("node at position {pos} has id {id}: node ids must be dense and in order")]
    NodeOrder { pos: usize, id: usize },
    #[error("distance matrix is {rows}x{cols} but there are {nodes} nodes")]
    DistanceShape {
        rows: usize,
        cols: usize,
        nodes: usize,
    },
    #[error("distance from node {0} to itself must be the smallest in its row")]
    DistanceDiagonal(usize),
    #[error("CPU {cpu} is listed on both node {a} and node {b}")]
    DuplicateCpu { cpu: u32, a: usize, b: usize },
    #[error("no node has CPUs: a machine needs at least one CPU")]
    NoCpus,
}

impl Topology {
    pub fn validate(&self) -> Result<(), TopologyError> {
        let n = self.nodes.len();
        if n == 0 {
            return Err(TopologyError::NoNodes);
        }
        for (pos, node) in self.nodes.iter().enumerate() {
            if node.id.index() != pos {
                return Err(TopologyError::NodeOrder {
                    pos,
                    id: node.id.index(),
                });
            }
        }
        if self.distances.len() != n || self.distances.iter().any(|r| r.len() != n) {
            return Err(TopologyError::DistanceShape {
                rows: self.distances.len(),
                cols: self.distances.first().map_or(0, |r| r.len()),
                nodes: n,
            });
        }
        for (i, row) in self.distances.iter().enumerate() {
            if row.iter().any(|d| *d < row[i]) {
                return Err(TopologyError::DistanceDiagonal(i));
            }
        }
        let mut owner = std::collections::HashMap::new();
        for node in &self.nodes {
            for c in &node.cpus {
                if let Some(a) = owner.insert(c.0, node.id.index()) {
                    return Err(TopologyError::DuplicateCpu {
                        cpu: c.0,
                        a,
                        b: node.id.index(),
                    });
                }
            }
        }
        if owner.is_empty() {
            return Err(TopologyError::NoCpus);
        }
        Ok(())
    }

    pub fn num_nodes(&self) -> usize {
        self.nodes.len()
    }

    pub fn online(&self) -> NodeMask {
        NodeMask::first_n(self.nodes.len())
    }

    /// Nodes that have CPUs.
    pub fn cpu_nodes(&self) -> NodeMask {
        NodeMask::from_nodes(
            self.nodes
                .iter()
                .filter(|n| !n.cpus.is_empty())
                .map(|n| n.id),
        )
    }

    /// All CPUs in increasing id order.
    pub fn cpus(&self) -> Vec<CpuId> {
        let mut v: Vec<CpuId> = self
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .collect();
        v.sort();
        v
    }

    pub fn num_cpus(&self) -> usize {
        self.nodes.iter().map(|n| n.cpus.len()).sum()
    }

    pub fn node_of_cpu(&self, cpu: CpuId) -> Option<NodeId> {
        self.nodes
            .iter()
            .find(|n| n.cpus.contains(&cpu))
            .map(|n| n.id)
    }

    pub fn distance(&self, from: NodeId, to: NodeId) -> u32 {
        self.distances[from.index()][to.index()]
    }

    /// The zonelist order of `from`: `from` itself, then the other nodes by increasing
    /// distance, ties by id, as the kernel's `build_zonelists` orders fallback
    /// (`find_next_best_node` takes the local node first whatever its distance: a reported
    /// matrix whose local entry ties with, or exceeds, a remote one still starts at home).
    pub fn nodes_by_distance(&self, from: NodeId) -> Vec<NodeId> {
        let mut v: Vec<NodeId> = self
            .nodes
            .iter()
            .map(|n| n.id)
            .filter(|&n| n != from)
            .collect();
        v.sort_by_key(|n| (self.distance(from, *n), n.0));
        v.insert(0, from);
        v
    }

    pub fn total_mem_bytes(&self) -> u64 {
        self.nodes.iter().map(|n| n.mem_bytes).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn ring4() -> Topology {
        let d = vec![
            vec![10, 16, 22, 16],
            vec![16, 10, 16, 22],
            vec![22, 16, 10, 16],
            vec![16, 22, 16, 10],
        ];
        Topology {
            nodes: (0..4)
                .map(|i| NodeInfo {
                    id: NodeId(i),
                    cpus: vec![CpuId(i as u32)],
                    mem_bytes: 1 << 30,
                })
                .collect(),
            distances: d,
            smt: 1,
        }
    }

    #[test]
    fn fallback_order_follows_distance() {
        let t = ring4();
        t.validate().unwrap();
        assert_eq!(
            t.nodes_by_distance(NodeId(0)),
            vec![NodeId(0), NodeId(1), NodeId(3), NodeId(2)]
        );
        assert_eq!(t.node_of_cpu(CpuId(2)), Some(NodeId(2)));
        // The local node comes first even where a remote node ties with it or is nearer by
        // the matrix (an OS-reported matrix, as hwloc imports keep it).
        let mut t = ring4();
        t.distances[1] = vec![10, 10, 16, 22];
        assert_eq!(t.nodes_by_distance(NodeId(1))[..2], [NodeId(1), NodeId(0)]);
        t.distances[2] = vec![22, 16, 17, 10];
        assert_eq!(
            t.nodes_by_distance(NodeId(2)),
            vec![NodeId(2), NodeId(3), NodeId(1), NodeId(0)]
        );
    }

    #[test]
    fn validation_catches_bad_matrices() {
        let mut t = ring4();
        t.distances[1][1] = 30;
        assert_eq!(t.validate(), Err(TopologyError::DistanceDiagonal(1)));
        let mut t = ring4();
        t.nodes[1].cpus.push(CpuId(0));
        assert!(matches!(
            t.validate(),
            Err(TopologyError::DuplicateCpu { .. })
        ));
    }
}
