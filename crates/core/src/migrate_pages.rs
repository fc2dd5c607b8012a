//! The node map of `migrate_pages(2)` (mm/mempolicy.c, `do_migrate_pages`), shared by the
//! simulator's whole-process migration and `numalab balance`'s account of a real call.
//!
//! The call names two node sets. Each node of `from` maps to the node at the same position in
//! `to` (`node_remap`, position modulo `to`'s weight), and the kernel then moves the task's
//! pages one source node at a time (`migrate_to_node`, each a walk of the whole address space),
//! in an order that empties a node before it receives pages where it can: a chain
//! 2 → 3, 3 → 4, 4 → 5 runs 4 → 5 first. When the sets differ in weight, a source node that
//! is also in `to` keeps its pages ("[0-7] → [3,4,5] moves only 0, 1, 2, 6, 7").

use crate::ids::NodeId;
use crate::nodemask::NodeMask;

/// The node `s` of `from` maps to: the node of `to` at `s`'s position in `from`, modulo `to`'s
/// weight (the kernel's `node_remap`, i.e. `bitmap_bitremap`). A node outside `from`, or an
/// empty `to`, maps to itself.
pub fn node_remap(s: NodeId, from: &NodeMask, to: &NodeMask) -> NodeId {
    let Some(pos) = from.iter().position(|n| n == s) else {
        return s;
    };
    match to.weight() {
        0 => s,
        w => to.nth(pos % w).unwrap_or(s),
    }
}

/// The (source, destination) pairs `do_migrate_pages` migrates, in its order: each round it
/// scans the source nodes left and takes the first pair whose destination is no longer a
/// source left, else the last pair that moves at all; it stops when no pair moves.
pub fn migration_steps(from: &NodeMask, to: &NodeMask) -> Vec<(NodeId, NodeId)> {
    let skip_destinations = from.weight() != to.weight();
    let mut left = *from;
    let mut steps = Vec::new();
    while !left.is_empty() {
        let mut pick = None;
        for s in left.iter() {
            if skip_destinations && to.contains(s) {
                continue;
            }
            let d = node_remap(s, from, to);
            if s == d {
                continue;
            }
            pick = Some((s, d));
            if !left.contains(d) {
                break;
            }
        }
        let Some((s, d)) = pick else { break };
        left.clear(s);
        steps.push((s, d));
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mask(nodes: &[u16]) -> NodeMask {
        NodeMask::from_nodes(nodes.iter().map(|&n| NodeId(n)))
    }

    fn pairs(steps: &[(NodeId, NodeId)]) -> Vec<(u16, u16)> {
        steps.iter().map(|(s, d)| (s.0, d.0)).collect()
    }

    #[test]
    fn remap_keeps_positions_and_wraps() {
        let (from, to) = (mask(&[0, 2, 5]), mask(&[1, 3]));
        assert_eq!(node_remap(NodeId(0), &from, &to), NodeId(1));
        assert_eq!(node_remap(NodeId(2), &from, &to), NodeId(3));
        assert_eq!(node_remap(NodeId(5), &from, &to), NodeId(1));
        // outside `from`, or nothing to map to: unchanged
        assert_eq!(node_remap(NodeId(4), &from, &to), NodeId(4));
        assert_eq!(node_remap(NodeId(0), &from, &mask(&[])), NodeId(0));
    }

    #[test]
    fn steps_follow_the_kernels_examples() {
        // "[2,3,4] -> [3,4,5] moves everything", a node emptied before it is filled
        assert_eq!(
            pairs(&migration_steps(&mask(&[2, 3, 4]), &mask(&[3, 4, 5]))),
            [(4, 5), (3, 4), (2, 3)]
        );
        // "[0-7] -> [3,4,5] moves only 0,1,2,6,7"; the destinations stay sources left, so
        // each round falls back to its last pair
        assert_eq!(
            pairs(&migration_steps(
                &mask(&[0, 1, 2, 3, 4, 5, 6, 7]),
                &mask(&[3, 4, 5])
            )),
            [(7, 4), (6, 3), (2, 5), (1, 4), (0, 3)]
        );
        // every other node to one home
        assert_eq!(
            pairs(&migration_steps(&mask(&[0, 1, 3]), &mask(&[2]))),
            [(0, 2), (1, 2), (3, 2)]
        );
        // the same set: nothing moves
        assert!(migration_steps(&mask(&[0, 1]), &mask(&[0, 1])).is_empty());
    }
}
