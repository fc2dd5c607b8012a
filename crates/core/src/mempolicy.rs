//! Memory policies, with the kernel's modes (`include/uapi/linux/mempolicy.h`) plus numalab's
//! remote-percentage mode (reference/policies.md §5, with the [fix]es listed there).
//!
//! The same value describes a task policy (`set_mempolicy`) and a range (VMA) policy (`mbind`);
//! where it applies is the caller's business. How a page is actually chosen lives with the
//! allocator that owns the state (the simulator's OS model, or the kernel).

use crate::ids::NodeId;
use crate::nodemask::{NodeMask, NodeMaskError};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "kebab-case")]
pub enum MemPolicy {
    /// MPOL_DEFAULT: no specific policy; the system default is local allocation.
    Default,
    /// MPOL_LOCAL: the allocating CPU's node, fallback by distance.
    Local,
    /// MPOL_PREFERRED: one node first, then fallback by distance.
    Preferred { node: NodeId },
    /// MPOL_PREFERRED_MANY: the nearest node of the set (seen from the local node), then any.
    PreferredMany { nodes: NodeMask },
    /// MPOL_BIND: only these nodes, nearest first; allocation fails when all are full.
    /// `numa_balancing` is MPOL_F_NUMA_BALANCING (balancing may move pages within the mask).
    Bind {
        nodes: NodeMask,
        numa_balancing: bool,
    },
    /// MPOL_INTERLEAVE: page-granular round robin over the mask.
    Interleave { nodes: NodeMask },
    /// MPOL_WEIGHTED_INTERLEAVE: node n takes `weight(n)` consecutive pages per round.
    /// `weights[n]` for node n; missing entries weigh 1 (the kernel's default).
    WeightedInterleave { nodes: NodeMask, weights: Vec<u8> },
    /// numalab's remote percentage: `percent` % of the task's allocations (in 4 KiB units) go
    /// to a node of `remote` other than the local one (empty = every other node).
    RemotePercent { percent: u8, remote: NodeMask },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MemPolicyError {
    #[error("unknown memory policy '{0}': expected one of default, local, preferred:N, preferred-many:NODES, bind:NODES, interleave:NODES, weighted-interleave:N=W,..., remote-percent:P[:NODES]")]
    UnknownMode(String),
    #[error("memory policy '{spec}' needs {what}")]
    MissingArgument { spec: String, what: &'static str },
    #[error("memory policy '{spec}': {source}")]
    Nodes { spec: String, source: NodeMaskError },
    #[error("memory policy '{spec}': {why}")]
    Invalid { spec: String, why: String },
}

impl MemPolicy {
    /// Weight of `node` under weighted interleave (1 if unset, as the kernel's default).
    pub fn weight_of(weights: &[u8], node: NodeId) -> u32 {
        weights
            .get(node.index())
            .copied()
            .filter(|w| *w > 0)
            .unwrap_or(1) as u32
    }

    /// Nodes the policy names, if any (used to validate against a topology).
    pub fn nodes(&self) -> Option<NodeMask> {
        match self {
            MemPolicy::Default | MemPolicy::Local => None,
            MemPolicy::Preferred { node } => Some(NodeMask::single(*node)),
            MemPolicy::PreferredMany { nodes }
            | MemPolicy::Bind { nodes, .. }
            | MemPolicy::Interleave { nodes }
            | MemPolicy::WeightedInterleave { nodes, .. } => Some(*nodes),
            MemPolicy::RemotePercent { remote, .. } => Some(*remote),
        }
    }

    /// Check that every node named exists in `online` and that arguments are in range.
    pub fn validate(&self, online: &NodeMask) -> Result<(), MemPolicyError> {
        let spec = self.to_string();
        if let Some(m) = self.nodes() {
            if let Some(bad) = m.and_not(online).first() {
                return Err(MemPolicyError::Nodes {
                    spec,
                    source: NodeMaskError::UnknownNode {
                        node: bad.index(),
                        online: online.to_string(),
                    },
                });
            }
        }
        match self {
            MemPolicy::RemotePercent { percent, .. } if *percent > 100 => {
                Err(MemPolicyError::Invalid {
                    spec,
                    why: format!("percentage {percent} is outside 0..=100"),
                })
            }
            MemPolicy::WeightedInterleave { nodes, .. }
            | MemPolicy::Interleave { nodes }
            | MemPolicy::Bind { nodes, .. }
            | MemPolicy::PreferredMany { nodes }
                if nodes.is_empty() =>
            {
                Err(MemPolicyError::Invalid {
                    spec,
                    why: "empty nodemask".into(),
                })
            }
            _ => Ok(()),
        }
    }

    /// Parse numalab's policy syntax, validating nodes against `online`:
    /// `default`, `local`, `preferred:N`, `preferred-many:NODES`, `bind:NODES`,
    /// `interleave:NODES`, `weighted-interleave:NODES` or `weighted-interleave:0=3,1=1`,
    /// `remote-percent:P` or `remote-percent:P:NODES`. NODES uses the kernel list syntax
    /// (`0-3,5`, `all`, `!1`).
    pub fn parse(spec: &str, online: &NodeMask) -> Result<MemPolicy, MemPolicyError> {
        let s = spec.trim();
        let (mode, arg) = match s.split_once(':') {
            Some((m, a)) => (m, Some(a)),
            None => (s, None),
        };
        let need = |what: &'static str| MemPolicyError::MissingArgument {
            spec: spec.to_string(),
            what,
        };
        let nodes = |a: &str| {
            NodeMask::parse(a, online).map_err(|e| MemPolicyError::Nodes {
                spec: spec.to_string(),
                source: e,
            })
        };
        let p = match mode {
            "default" | "firsttouch" | "first-touch" => MemPolicy::Default,
            "local" | "localalloc" => MemPolicy::Local,
            "preferred" => {
                let m = nodes(arg.ok_or_else(|| need("one node, e.g. preferred:1"))?)?;
                if m.weight() != 1 {
                    return Err(MemPolicyError::Invalid {
                        spec: spec.into(),
                        why: "preferred takes exactly one node (use preferred-many for a set)"
                            .into(),
                    });
                }
                MemPolicy::Preferred {
                    node: m.first().unwrap(),
                }
            }
            "preferred-many" => MemPolicy::PreferredMany {
                nodes: nodes(arg.ok_or_else(|| need("a node list"))?)?,
            },
            "bind" | "membind" => MemPolicy::Bind {
                nodes: nodes(arg.ok_or_else(|| need("a node list"))?)?,
                numa_balancing: false,
            },
            "interleave" => MemPolicy::Interleave {
                nodes: nodes(arg.unwrap_or("all"))?,
            },
            "weighted-interleave" => {
                let a = arg.unwrap_or("all");
                if a.contains('=') {
                    let mut mask = NodeMask::empty();
                    let mut weights = Vec::new();
                    for part in a.split(',') {
                        let (n, w) =
                            part.split_once('=')
                                .ok_or_else(|| MemPolicyError::Invalid {
                                    spec: spec.into(),
                                    why: format!("'{part}' is not NODE=WEIGHT"),
                                })?;
                        let node = nodes(n)?;
                        let w: u8 = w.trim().parse().ok().filter(|w| *w >= 1).ok_or_else(|| {
                            MemPolicyError::Invalid {
                                spec: spec.into(),
                                why: format!("weight '{w}' is not in 1..=255"),
                            }
                        })?;
                        for n in node.iter() {
                            if weights.len() <= n.index() {
                                weights.resize(n.index() + 1, 1);
                            }
                            weights[n.index()] = w;
                        }
                        mask = mask.or(&node);
                    }
                    MemPolicy::WeightedInterleave {
                        nodes: mask,
                        weights,
                    }
                } else {
                    MemPolicy::WeightedInterleave {
                        nodes: nodes(a)?,
                        weights: Vec::new(),
                    }
                }
            }
            "remote-percent" | "percentage" => {
                let a = arg.ok_or_else(|| need("a percentage, e.g. remote-percent:40"))?;
                let (pct, remote) = match a.split_once(':') {
                    Some((p, n)) => (p, Some(nodes(n)?)),
                    None => (a, None),
                };
                let percent: u8 =
                    pct.trim()
                        .parse()
                        .ok()
                        .filter(|p| *p <= 100)
                        .ok_or_else(|| MemPolicyError::Invalid {
                            spec: spec.into(),
                            why: format!("percentage '{pct}' is not an integer in 0..=100"),
                        })?;
                MemPolicy::RemotePercent {
                    percent,
                    remote: remote.unwrap_or_default(),
                }
            }
            _ => return Err(MemPolicyError::UnknownMode(spec.to_string())),
        };
        p.validate(online)?;
        Ok(p)
    }

    /// Short kernel-style mode name.
    pub fn mode_name(&self) -> &'static str {
        match self {
            MemPolicy::Default => "default",
            MemPolicy::Local => "local",
            MemPolicy::Preferred { .. } => "preferred",
            MemPolicy::PreferredMany { .. } => "preferred-many",
            MemPolicy::Bind { .. } => "bind",
            MemPolicy::Interleave { .. } => "interleave",
            MemPolicy::WeightedInterleave { .. } => "weighted-interleave",
            MemPolicy::RemotePercent { .. } => "remote-percent",
        }
    }
}

impl fmt::Display for MemPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MemPolicy::Default | MemPolicy::Local => f.write_str(self.mode_name()),
            MemPolicy::Preferred { node } => write!(f, "preferred:{}", node.0),
            MemPolicy::PreferredMany { nodes } | MemPolicy::Interleave { nodes } => {
                write!(f, "{}:{}", self.mode_name(), nodes)
            }
            MemPolicy::Bind {
                nodes,
                numa_balancing,
            } => {
                write!(f, "bind:{nodes}")?;
                if *numa_balancing {
                    f.write_str("+balancing")?;
                }
                Ok(())
            }
            MemPolicy::WeightedInterleave { nodes, weights } => {
                if weights.is_empty() {
                    write!(f, "weighted-interleave:{nodes}")
                } else {
                    let parts: Vec<String> = nodes
                        .iter()
                        .map(|n| format!("{}={}", n.0, MemPolicy::weight_of(weights, n)))
                        .collect();
                    write!(f, "weighted-interleave:{}", parts.join(","))
                }
            }
            MemPolicy::RemotePercent { percent, remote } => {
                if remote.is_empty() {
                    write!(f, "remote-percent:{percent}")
                } else {
                    write!(f, "remote-percent:{percent}:{remote}")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_mode() {
        let online = NodeMask::first_n(4);
        for s in [
            "default",
            "local",
            "preferred:2",
            "preferred-many:1-2",
            "bind:0,3",
            "interleave:0-3",
            "weighted-interleave:0=3,1=1",
            "remote-percent:40",
            "remote-percent:25:1-3",
        ] {
            let p = MemPolicy::parse(s, &online).unwrap();
            assert_eq!(p.to_string(), s, "round trip of {s}");
        }
        let w = MemPolicy::parse("weighted-interleave:0=3,1=1", &online).unwrap();
        if let MemPolicy::WeightedInterleave { weights, .. } = w {
            assert_eq!(MemPolicy::weight_of(&weights, NodeId(0)), 3);
            assert_eq!(MemPolicy::weight_of(&weights, NodeId(2)), 1);
        } else {
            panic!()
        }
    }

    #[test]
    fn rejects_bad_input() {
        let online = NodeMask::first_n(2);
        assert!(matches!(
            MemPolicy::parse("bind:5", &online),
            Err(MemPolicyError::Nodes { .. })
        ));
        assert!(matches!(
            MemPolicy::parse("remote-percent:140", &online),
            Err(MemPolicyError::Invalid { .. })
        ));
        assert!(matches!(
            MemPolicy::parse("preferred:0-1", &online),
            Err(MemPolicyError::Invalid { .. })
        ));
        assert!(matches!(
            MemPolicy::parse("spread", &online),
            Err(MemPolicyError::UnknownMode(_))
        ));
        assert!(matches!(
            MemPolicy::parse("bind", &online),
            Err(MemPolicyError::MissingArgument { .. })
        ));
        assert!(matches!(
            MemPolicy::parse("weighted-interleave:0=0", &online),
            Err(MemPolicyError::Invalid { .. })
        ));
    }
}
