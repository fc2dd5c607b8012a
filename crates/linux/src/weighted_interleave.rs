//! MPOL_WEIGHTED_INTERLEAVE weights (Linux 6.9+): `/sys/kernel/mm/mempolicy/weighted_interleave/nodeN`.
//!
//! The weights are system-wide settings, not a syscall argument: every task using weighted
//! interleave shares them. Each is 1..=255 (default 1). Linux 6.16 added an `auto` switch (the
//! kernel then derives weights from bandwidth data; writing a weight turns it off). Some 6.18
//! builds show that file as `__auto_type` (a C23 `auto` macro leaked into the attribute name), so
//! both names are read.

use crate::error::{Error, ParseError};
use crate::node::node_of_name;
use crate::sysroot::SysRoot;
use numalab_core::NodeId;
use serde::Serialize;
use std::collections::BTreeMap;

/// The weights directory, relative to a [`SysRoot`].
pub const DIR: &str = "sys/kernel/mm/mempolicy/weighted_interleave";

/// The system-wide weights.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Weights {
    /// Weight of each node that has a `nodeN` file.
    pub weights: BTreeMap<NodeId, u8>,
    /// The `auto` mode (6.16+): None on kernels without it.
    pub auto: Option<bool>,
}

impl Weights {
    /// The weight of `node`, if it has a file.
    pub fn weight(&self, node: NodeId) -> Option<u8> {
        self.weights.get(&node).copied()
    }

    /// As `MemPolicy::WeightedInterleave::weights` wants them: index = node id, 1 where unset.
    pub fn to_weight_vec(&self) -> Vec<u8> {
        let len = self.weights.keys().last().map_or(0, |n| n.index() + 1);
        let mut v = vec![1; len];
        for (n, w) in &self.weights {
            v[n.index()] = *w;
        }
        v
    }
}

/// Parse one `nodeN` file: a weight in 1..=255.
pub fn parse_weight(text: &str, file: &str) -> Result<u8, ParseError> {
    text.trim()
        .parse::<u8>()
        .ok()
        .filter(|w| *w >= 1)
        .ok_or_else(|| ParseError::new(file, 1, "a weight in 1..=255", text.trim()))
}

/// Parse the `auto` file: `true` or `false` (also `1`/`0`/`Y`/`N`, which the kernel accepts).
pub fn parse_auto(text: &str, file: &str) -> Result<bool, ParseError> {
    match text.trim() {
        "true" | "1" | "Y" | "y" => Ok(true),
        "false" | "0" | "N" | "n" => Ok(false),
        other => Err(ParseError::new(file, 1, "true or false", other)),
    }
}

/// Read the weights; `Ok(None)` on kernels before 6.9 (no directory).
pub fn read_weights(root: &SysRoot) -> Result<Option<Weights>, Error> {
    let Some(names) = root.list_dir(DIR)? else {
        return Ok(None);
    };
    let mut w = Weights::default();
    for name in &names {
        let rel = format!("{DIR}/{name}");
        if let Some(node) = node_of_name(name) {
            let t = root.read(&rel)?;
            w.weights.insert(
                node,
                parse_weight(&t, &rel).map_err(|e| e.in_file(root.path(&rel).display()))?,
            );
        } else if name == "auto" || name == "__auto_type" {
            let t = root.read(&rel)?;
            w.auto = Some(parse_auto(&t, &rel).map_err(|e| e.in_file(root.path(&rel).display()))?);
        }
    }
    Ok(Some(w))
}

/// Write the weight of `node` (needs root; on 6.16+ this also switches `auto` off).
pub fn write_weight(root: &SysRoot, node: NodeId, weight: u8) -> Result<(), Error> {
    if weight == 0 {
        return Err(Error::Argument {
            syscall: "weighted_interleave",
            problem: format!("weight 0 for node {}", node.0),
            remedy: "weights are 1..=255; leave a node out of the policy's nodemask instead".into(),
        });
    }
    let rel = format!("{DIR}/node{}", node.0);
    if !root.path(&rel).exists() {
        return Err(Error::Argument {
            syscall: "weighted_interleave",
            problem: format!("{} does not exist", root.path(&rel).display()),
            remedy: "the node must be possible and the kernel 6.9+ (MPOL_WEIGHTED_INTERLEAVE)"
                .into(),
        });
    }
    root.write(&rel, &weight.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights() {
        assert_eq!(parse_weight("3\n", "node0").unwrap(), 3);
        assert!(parse_weight("0\n", "node0").is_err());
        assert!(parse_weight("256\n", "node0").is_err());
        assert!(parse_auto("maybe", "auto").is_err());
        let mut w = Weights::default();
        w.weights.insert(NodeId(0), 3);
        w.weights.insert(NodeId(2), 2);
        assert_eq!(w.to_weight_vec(), vec![3, 1, 2]);
    }
}
