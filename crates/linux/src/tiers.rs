//! Memory tiers (`/sys/devices/virtual/memory_tiering/memory_tierN/nodelist`, Linux 6.1+).
//!
//! A tier's number is its abstract distance divided into chunks: lower is faster. DRAM nodes
//! with CPUs sit in the default tier (4 on current kernels); slower memory (CXL, PMEM) in higher
//! ones. Kernels before 6.1, or without CONFIG_NUMA, have no `memory_tiering` directory.

use crate::error::{Error, ParseError};
use crate::parse::parse_node_list;
use crate::sysroot::SysRoot;
use numalab_core::NodeMask;
use serde::Serialize;

/// The memory-tiering directory, relative to a [`SysRoot`].
pub const TIERS_DIR: &str = "sys/devices/virtual/memory_tiering";

/// One memory tier.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct MemoryTier {
    /// N of `memory_tierN` (lower = faster).
    pub id: u32,
    /// The tier's `nodelist`.
    pub nodes: NodeMask,
}

/// N of a `memory_tierN` name, or None for other entries (`power`, `uevent`).
pub fn parse_tier_name(name: &str) -> Option<u32> {
    name.strip_prefix("memory_tier")?.parse().ok()
}

/// Parse `(directory name, nodelist text)` pairs into tiers sorted by id. Entries whose name is
/// not `memory_tierN` are skipped; a malformed nodelist or a node in two tiers is an error.
pub fn parse_memory_tiers(entries: &[(&str, &str)]) -> Result<Vec<MemoryTier>, ParseError> {
    let mut tiers: Vec<MemoryTier> = Vec::new();
    for (name, text) in entries {
        let Some(id) = parse_tier_name(name) else {
            continue;
        };
        let file = format!("{name}/nodelist");
        let nodes = parse_node_list(text, &file)?;
        if tiers.iter().any(|t| t.id == id) {
            return Err(ParseError::new(&file, 0, "one directory per tier", name));
        }
        if let Some(t) = tiers.iter().find(|t| !t.nodes.and(&nodes).is_empty()) {
            return Err(ParseError::new(
                &file,
                1,
                format!("nodes not already in memory_tier{} ({})", t.id, t.nodes),
                text.trim(),
            ));
        }
        tiers.push(MemoryTier { id, nodes });
    }
    tiers.sort_by_key(|t| t.id);
    Ok(tiers)
}

/// Read the tiers; `Ok(None)` when the kernel has no memory tiering.
pub fn read_memory_tiers(root: &SysRoot) -> Result<Option<Vec<MemoryTier>>, Error> {
    let Some(names) = root.list_dir(TIERS_DIR)? else {
        return Ok(None);
    };
    let mut texts = Vec::new();
    for name in names.iter().filter(|n| parse_tier_name(n).is_some()) {
        let rel = format!("{TIERS_DIR}/{name}/nodelist");
        texts.push((name.as_str(), root.read(&rel)?));
    }
    let pairs: Vec<(&str, &str)> = texts.iter().map(|(n, t)| (*n, t.as_str())).collect();
    parse_memory_tiers(&pairs).map(Some).map_err(|e| {
        let f = e.file.clone();
        e.in_file(root.path(TIERS_DIR).join(f).display()).into()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiers_sorted_and_disjoint() {
        let t = parse_memory_tiers(&[
            ("memory_tier22", "4\n"),
            ("power", ""),
            ("memory_tier4", "0-3\n"),
        ])
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!(t[0].id, 4);
        assert_eq!(t[0].nodes.to_string(), "0-3");
        assert_eq!(t[1].nodes.to_string(), "4");
        let e = parse_memory_tiers(&[("memory_tier4", "0-3"), ("memory_tier5", "3")]).unwrap_err();
        assert!(e.to_string().contains("memory_tier4"), "{e}");
        assert!(parse_memory_tiers(&[("memory_tier4", "x")]).is_err());
    }
}
