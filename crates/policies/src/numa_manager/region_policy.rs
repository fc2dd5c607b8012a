//! Müller's static region placement (reference/policies.md §8): where a new region's pages
//! go, decided at allocation (the manager interposes on it), not at first touch.

use numalab_core::view::{MemoryView, RegionInfo, ThreadInfo};
use numalab_core::{MemPolicy, NodeId, NodeMask};

/// Region (memory) policies, in the order of the `memory` parameter's choices.
pub const REGION_POLICIES: &[&str] = &["default", "local", "remote", "interleaved"];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum RegionPolicy {
    /// The node named in the allocation (the region's own policy); none named: Local [nl].
    Default,
    /// The requesting thread's node at allocation time.
    Local,
    /// A node other than the requester's: the farthest, ties by ring order [nl].
    Remote,
    /// Page i on node i mod N; never migrated.
    Interleaved,
}

impl RegionPolicy {
    pub fn from_name(name: &str) -> RegionPolicy {
        match name {
            "default" => RegionPolicy::Default,
            "local" => RegionPolicy::Local,
            "remote" => RegionPolicy::Remote,
            "interleaved" => RegionPolicy::Interleaved,
            other => panic!("unknown region policy '{other}' (the parser checks names)"),
        }
    }

    /// The range policy for `region`, requested by `requester`.
    ///
    /// "On a node" is `Preferred`: the pages go to that node and fall back by distance when
    /// it is full, where an L4 allocation would fail [nl].
    pub fn place(
        self,
        view: &dyn MemoryView,
        region: &RegionInfo,
        requester: &ThreadInfo,
    ) -> MemPolicy {
        let on = |node: NodeId| MemPolicy::Preferred { node };
        match self {
            RegionPolicy::Default => match &region.policy {
                Some(p) if *p != MemPolicy::Default => p.clone(),
                _ => on(requester.node),
            },
            RegionPolicy::Local => on(requester.node),
            RegionPolicy::Remote => on(farthest(view, requester.node)),
            RegionPolicy::Interleaved => MemPolicy::Interleave {
                // every node: the range policy's offset rule puts page i on node i mod N
                nodes: NodeMask::first_n(view.num_nodes()),
            },
        }
    }
}

/// The node farthest from `from` (SLIT distance), ties broken in ring order from `from`
/// (`from + 1`, `from + 2`, ... mod N) [nl]; `from` itself on a one-node machine.
pub fn farthest(view: &dyn MemoryView, from: NodeId) -> NodeId {
    let n = view.num_nodes();
    let mut best: Option<(u32, NodeId)> = None;
    for k in 1..n {
        let node = NodeId(((from.index() + k) % n) as u16);
        let d = view.distance(from, node);
        if best.is_none_or(|(bd, _)| d > bd) {
            best = Some((d, node));
        }
    }
    best.map_or(from, |(_, node)| node)
}

/// Whether the NUMA manager may move a region under `policy`: interleaved regions are not
/// migratable (`migrate` succeeds without action, §8), nor are bound ones (moving them would
/// break the binding).
pub fn migratable(policy: Option<&MemPolicy>) -> bool {
    !matches!(
        policy,
        Some(MemPolicy::Interleave { .. })
            | Some(MemPolicy::WeightedInterleave { .. })
            | Some(MemPolicy::Bind { .. })
    )
}
