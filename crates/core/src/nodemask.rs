//! `NodeMask`: a set of NUMA nodes, as the kernel's `nodemask_t`, printed in the kernel's list
//! format (`0-3,6`). Up to 256 nodes, which covers every machine Linux ships a SLIT for today.

use crate::ids::NodeId;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

pub const MAX_NODES: usize = 256;
const WORDS: usize = MAX_NODES / 64;

#[derive(Copy, Clone, PartialEq, Eq, Hash, Default)]
pub struct NodeMask {
    bits: [u64; WORDS],
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NodeMaskError {
    #[error("malformed node list '{spec}': {why} (expected e.g. 0-3,5 or all or !1)")]
    Malformed { spec: String, why: String },
    #[error("node {node} does not exist: this machine has nodes {online}")]
    UnknownNode { node: usize, online: String },
    #[error("node list '{0}' selects no node")]
    Empty(String),
}

impl NodeMask {
    pub const fn empty() -> Self {
        NodeMask { bits: [0; WORDS] }
    }

    /// Nodes 0..n.
    pub fn first_n(n: usize) -> Self {
        let mut m = Self::empty();
        for i in 0..n.min(MAX_NODES) {
            m.set(NodeId(i as u16));
        }
        m
    }

    pub fn single(node: NodeId) -> Self {
        let mut m = Self::empty();
        m.set(node);
        m
    }

    pub fn from_nodes<I: IntoIterator<Item = NodeId>>(it: I) -> Self {
        let mut m = Self::empty();
        for n in it {
            m.set(n);
        }
        m
    }

    #[inline]
    pub fn set(&mut self, node: NodeId) {
        let i = node.index();
        assert!(i < MAX_NODES, "node {i} beyond MAX_NODES");
        self.bits[i / 64] |= 1 << (i % 64);
    }

    #[inline]
    pub fn clear(&mut self, node: NodeId) {
        let i = node.index();
        if i < MAX_NODES {
            self.bits[i / 64] &= !(1 << (i % 64));
        }
    }

    #[inline]
    pub fn contains(&self, node: NodeId) -> bool {
        let i = node.index();
        i < MAX_NODES && self.bits[i / 64] & (1 << (i % 64)) != 0
    }

    pub fn is_empty(&self) -> bool {
        self.bits.iter().all(|w| *w == 0)
    }

    pub fn weight(&self) -> usize {
        self.bits.iter().map(|w| w.count_ones() as usize).sum()
    }

    pub fn and(&self, other: &NodeMask) -> NodeMask {
        let mut m = *self;
        for (a, b) in m.bits.iter_mut().zip(other.bits.iter()) {
            *a &= *b;
        }
        m
    }

    pub fn or(&self, other: &NodeMask) -> NodeMask {
        let mut m = *self;
        for (a, b) in m.bits.iter_mut().zip(other.bits.iter()) {
            *a |= *b;
        }
        m
    }

    pub fn and_not(&self, other: &NodeMask) -> NodeMask {
        let mut m = *self;
        for (a, b) in m.bits.iter_mut().zip(other.bits.iter()) {
            *a &= !*b;
        }
        m
    }

    pub fn is_subset_of(&self, other: &NodeMask) -> bool {
        self.and_not(other).is_empty()
    }

    /// Nodes in increasing order.
    pub fn iter(&self) -> impl Iterator<Item = NodeId> + '_ {
        (0..MAX_NODES)
            .filter(move |&i| self.bits[i / 64] & (1 << (i % 64)) != 0)
            .map(|i| NodeId(i as u16))
    }

    pub fn first(&self) -> Option<NodeId> {
        self.iter().next()
    }

    /// The k-th node of the mask (0-based), as MPOL_INTERLEAVE's offset lookup does.
    pub fn nth(&self, k: usize) -> Option<NodeId> {
        self.iter().nth(k)
    }

    /// Parse the kernel/numactl list syntax against the nodes that exist: `all`, `0-3,6`,
    /// `!1` (all but 1), `!0-1`. Unknown nodes are an error, never silently dropped.
    pub fn parse(spec: &str, online: &NodeMask) -> Result<NodeMask, NodeMaskError> {
        let s = spec.trim();
        let malformed = |why: &str| NodeMaskError::Malformed {
            spec: spec.to_string(),
            why: why.to_string(),
        };
        if s.is_empty() {
            return Err(malformed("empty"));
        }
        let (invert, body) = match s.strip_prefix('!') {
            Some(rest) => (true, rest),
            None => (false, s),
        };
        let mut m = NodeMask::empty();
        if body == "all" {
            m = *online;
        } else {
            for part in body.split(',') {
                let part = part.trim();
                let (lo, hi) = match part.split_once('-') {
                    Some((a, b)) => (a, b),
                    None => (part, part),
                };
                let lo: usize = lo
                    .trim()
                    .parse()
                    .map_err(|_| malformed(&format!("'{part}' is not a node number or range")))?;
                let hi: usize = hi
                    .trim()
                    .parse()
                    .map_err(|_| malformed(&format!("'{part}' is not a node number or range")))?;
                if lo > hi {
                    return Err(malformed(&format!("range '{part}' is reversed")));
                }
                for n in lo..=hi {
                    if n >= MAX_NODES || !online.contains(NodeId(n as u16)) {
                        return Err(NodeMaskError::UnknownNode {
                            node: n,
                            online: online.to_string(),
                        });
                    }
                    m.set(NodeId(n as u16));
                }
            }
        }
        if invert {
            m = online.and_not(&m);
        }
        if m.is_empty() {
            return Err(NodeMaskError::Empty(spec.to_string()));
        }
        Ok(m)
    }
}

impl fmt::Display for NodeMask {
    /// Kernel list format: `0-3,6`; an empty mask prints as an empty string, as in sysfs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let nodes: Vec<usize> = self.iter().map(|n| n.index()).collect();
        let mut first = true;
        let mut i = 0;
        while i < nodes.len() {
            let mut j = i;
            while j + 1 < nodes.len() && nodes[j + 1] == nodes[j] + 1 {
                j += 1;
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if j == i {
                write!(f, "{}", nodes[i])?;
            } else {
                write!(f, "{}-{}", nodes[i], nodes[j])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

impl fmt::Debug for NodeMask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "NodeMask({self})")
    }
}

impl Serialize for NodeMask {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

impl<'de> Deserialize<'de> for NodeMask {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s.is_empty() {
            return Ok(NodeMask::empty());
        }
        NodeMask::parse(&s, &NodeMask::first_n(MAX_NODES)).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn list_format_round_trip() {
        let online = NodeMask::first_n(8);
        let m = NodeMask::parse("0-3,6", &online).unwrap();
        assert_eq!(m.to_string(), "0-3,6");
        assert_eq!(m.weight(), 5);
        assert_eq!(m.nth(4), Some(NodeId(6)));
        assert_eq!(NodeMask::parse("all", &online).unwrap(), online);
        assert_eq!(NodeMask::parse("!1", &online).unwrap().to_string(), "0,2-7");
    }

    #[test]
    fn errors_name_the_problem() {
        let online = NodeMask::first_n(4);
        assert_eq!(
            NodeMask::parse("0,7", &online),
            Err(NodeMaskError::UnknownNode {
                node: 7,
                online: "0-3".into()
            })
        );
        assert!(matches!(
            NodeMask::parse("3-1", &online),
            Err(NodeMaskError::Malformed { .. })
        ));
        assert!(matches!(
            NodeMask::parse("x", &online),
            Err(NodeMaskError::Malformed { .. })
        ));
        assert!(matches!(
            NodeMask::parse("!all", &online),
            Err(NodeMaskError::Empty(_))
        ));
    }
}
