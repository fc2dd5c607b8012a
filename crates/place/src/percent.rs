//! Remote-percentage placement (reference/policies.md §5): keep P % of a process's pages on
//! remote nodes and the rest on the local node. Which pages are remote is decided by the page's
//! address alone, through a low-discrepancy (Kronecker) sequence over the page index, so:
//! - the decision is stable: a placed page stays placed, and raising P from 30 to 40 moves
//!   exactly the pages whose value falls in [30 %, 40 %), never a reshuffle;
//! - the split is exact on any run of pages, not only on average: n consecutive pages hold
//!   P % remote to within a few pages, as the reference's fix asks ("spread remote choices
//!   evenly"). A hash would only give P % in expectation (±0.8 points on a 16 MiB buffer).
use numalab_core::{NodeId, NodeMask};
use thiserror::Error;

/// Hash buckets per percent: the split has a resolution of 0.01 %.
const BUCKETS_PER_PERCENT: u64 = 100;

#[derive(Debug, Error, PartialEq)]
pub enum PercentError {
    #[error("remote percentage {0} is out of range: give 0 to 100")]
    OutOfRange(u32),
    #[error("the remote nodes must not include the local node {local} (remote: {remote})")]
    LocalInRemote { local: NodeId, remote: NodeMask },
    #[error("no remote node to place {percent} % of the pages on: give remote nodes, e.g. --remote-percent={percent}:1-3")]
    NoRemote { percent: u8 },
}

/// The target node of every page under a P % remote split.
#[derive(Clone, Debug, PartialEq)]
pub struct PercentSplit {
    percent: u8,
    local: NodeId,
    remote: Vec<NodeId>,
}

/// 2^64 / φ and 2^64·(√2 − 1): the fractional parts {i/φ} and {i·√2} of two irrationals
/// that are rationally independent with 1, so the pairs are jointly equidistributed (Weyl's
/// theorem) and every run of consecutive indices covers [0, 1)² evenly. The first decides
/// remote or local, the second which remote node.
const WEYL_SPLIT: u64 = 0x9e37_79b9_7f4a_7c15;
const WEYL_NODE: u64 = 0x6a09_e667_f3bc_c908;

/// The fraction {i·c} in 64-bit fixed point, scaled to `0..n`.
fn weyl_scaled(index: u64, step: u64, n: u64) -> u64 {
    ((index.wrapping_mul(step) as u128 * n as u128) >> 64) as u64
}

impl PercentSplit {
    pub fn new(percent: u32, local: NodeId, remote: &NodeMask) -> Result<Self, PercentError> {
        if percent > 100 {
            return Err(PercentError::OutOfRange(percent));
        }
        if remote.contains(local) {
            return Err(PercentError::LocalInRemote {
                local,
                remote: *remote,
            });
        }
        if percent > 0 && remote.is_empty() {
            return Err(PercentError::NoRemote {
                percent: percent as u8,
            });
        }
        Ok(PercentSplit {
            percent: percent as u8,
            local,
            remote: remote.iter().collect(),
        })
    }

    pub fn percent(&self) -> u8 {
        self.percent
    }

    pub fn local(&self) -> NodeId {
        self.local
    }

    /// Change P; pages already placed move only if their bucket crosses the new threshold.
    pub fn set_percent(&mut self, percent: u32) -> Result<(), PercentError> {
        *self = PercentSplit::new(
            percent,
            self.local,
            &NodeMask::from_nodes(self.remote.clone()),
        )?;
        Ok(())
    }

    /// Where the page whose placement unit starts at `unit_addr` belongs. The unit is the
    /// folio: a 4 KiB page, or the 2 MiB huge page, which the kernel migrates whole.
    pub fn target(&self, unit_addr: u64) -> NodeId {
        let index = unit_addr >> 12;
        let bucket = weyl_scaled(index, WEYL_SPLIT, 100 * BUCKETS_PER_PERCENT);
        if bucket < self.percent as u64 * BUCKETS_PER_PERCENT {
            // An independent sequence picks among remote nodes, so raising P does not move
            // pages between remote nodes.
            let k = self.remote.len() as u64;
            self.remote[weyl_scaled(index, WEYL_NODE, k) as usize]
        } else {
            self.local
        }
    }

    /// The moves that bring `pages` (unit address, current node or None if not present) to
    /// the split: only pages that are present and on another node than their target.
    pub fn plan_moves(&self, pages: &[(u64, Option<NodeId>)]) -> Vec<(u64, NodeId)> {
        pages
            .iter()
            .filter_map(|&(addr, node)| {
                let node = node?;
                let want = self.target(addr);
                (want != node).then_some((addr, want))
            })
            .collect()
    }
}

/// The weighted-interleave weights that give a P % remote split where the kernel has
/// MPOL_WEIGHTED_INTERLEAVE (Linux 6.9+): local weight : sum of remote weights = (100-P) : P,
/// reduced to the smallest integers and kept within the kernel's 1..=255 per node.
/// Returns (local weight, weight of each remote node), or None where P is 0 or 100 (plain
/// bind does it) or where no weights within 1..=255 come within half a point of P (1 % over
/// six remote nodes needs a local weight of 594): the caller then uses the placement thread.
pub fn weighted_interleave_weights(percent: u8, remote_nodes: usize) -> Option<(u8, u8)> {
    if percent == 0 || percent >= 100 || remote_nodes == 0 {
        return None;
    }
    let k = remote_nodes as u64;
    // local : each remote = (100 - P) * k : P
    let (mut l, mut r) = ((100 - percent as u64) * k, percent as u64);
    let g = gcd(l, r);
    l /= g;
    r /= g;
    if l > 255 || r > 255 {
        // Scale down; rounding moves the split by well under one point for P in 1..99.
        let s = l.max(r) as f64 / 255.0;
        l = ((l as f64 / s).round() as u64).max(1);
        r = ((r as f64 / s).round() as u64).max(1);
    }
    let remote_share = (r * k) as f64 / (l + r * k) as f64 * 100.0;
    ((remote_share - percent as f64).abs() <= 0.5).then_some((l as u8, r as u8))
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn remote() -> NodeMask {
        NodeMask::from_nodes([NodeId(1), NodeId(2), NodeId(3)])
    }

    #[test]
    fn split_is_within_half_a_point_and_even_over_remote_nodes() {
        let s = PercentSplit::new(40, NodeId(0), &remote()).unwrap();
        let n = 200_000u64;
        let mut per_node = [0u64; 4];
        for i in 0..n {
            per_node[s.target(0x7f00_0000_0000 + i * 4096).index()] += 1;
        }
        let remote_share = (n - per_node[0]) as f64 / n as f64 * 100.0;
        assert!(
            (remote_share - 40.0).abs() < 0.5,
            "remote share {remote_share}"
        );
        for (r, count) in per_node.iter().enumerate().skip(1) {
            let share = *count as f64 / n as f64 * 100.0;
            assert!((share - 40.0 / 3.0).abs() < 0.5, "node {r}: {share}");
        }
    }

    #[test]
    fn every_run_of_pages_holds_the_split_not_only_the_average() {
        // A 16 MiB buffer (4096 pages) wherever mmap puts it, and a 2 MiB one.
        let s = PercentSplit::new(40, NodeId(0), &remote()).unwrap();
        // (run length, tolerance on the remote share, on each remote node's share), points.
        for (run, remote_tol, node_tol) in [(4096u64, 0.1, 0.25), (512, 0.5, 1.5)] {
            let mut worst = (0.0f64, 0.0f64);
            for start in 0..2000u64 {
                let base = 0x7f00_0000_0000 + start * 0x1_2345_6000;
                let mut per_node = [0u64; 4];
                for i in 0..run {
                    per_node[s.target(base + i * 4096).index()] += 1;
                }
                let remote = (run - per_node[0]) as f64 / run as f64 * 100.0;
                worst.0 = worst.0.max((remote - 40.0).abs());
                for count in &per_node[1..] {
                    let share = *count as f64 / run as f64 * 100.0;
                    worst.1 = worst.1.max((share - 40.0 / 3.0).abs());
                }
            }
            assert!(
                worst.0 < remote_tol,
                "{run} pages: remote share off by {:.2}",
                worst.0
            );
            assert!(
                worst.1 < node_tol,
                "{run} pages: a node off by {:.2}",
                worst.1
            );
        }
    }

    #[test]
    fn raising_p_moves_only_the_difference() {
        let pages: Vec<u64> = (0..100_000u64).map(|i| i * 4096).collect();
        let s30 = PercentSplit::new(30, NodeId(0), &remote()).unwrap();
        // Pages placed at P = 30.
        let placed: Vec<(u64, Option<NodeId>)> =
            pages.iter().map(|&a| (a, Some(s30.target(a)))).collect();
        assert!(
            s30.plan_moves(&placed).is_empty(),
            "a placed split is stable"
        );
        let mut s40 = s30.clone();
        s40.set_percent(40).unwrap();
        let moves = s40.plan_moves(&placed);
        let share = moves.len() as f64 / pages.len() as f64 * 100.0;
        assert!((share - 10.0).abs() < 0.5, "moved {share} %");
        // Every move goes local -> remote: no page that was remote at 30 % moves again.
        for (a, to) in &moves {
            assert_eq!(s30.target(*a), NodeId(0));
            assert_ne!(*to, NodeId(0));
        }
    }

    #[test]
    fn absent_pages_are_not_moved_and_bad_input_is_refused() {
        let s = PercentSplit::new(100, NodeId(0), &remote()).unwrap();
        assert!(s.plan_moves(&[(0, None), (4096, None)]).is_empty());
        assert_eq!(
            PercentSplit::new(101, NodeId(0), &remote()),
            Err(PercentError::OutOfRange(101))
        );
        assert!(matches!(
            PercentSplit::new(10, NodeId(1), &remote()),
            Err(PercentError::LocalInRemote { .. })
        ));
        assert_eq!(
            PercentSplit::new(10, NodeId(0), &NodeMask::empty()),
            Err(PercentError::NoRemote { percent: 10 })
        );
        assert!(PercentSplit::new(0, NodeId(0), &NodeMask::empty()).is_ok());
    }

    #[test]
    fn weights_give_the_split() {
        // 40 % over 3 remote nodes: local 60*3 : remote 40 each -> 9 : 2 ; 9/(9+6) = 60 %.
        assert_eq!(weighted_interleave_weights(40, 3), Some((9, 2)));
        assert_eq!(weighted_interleave_weights(50, 1), Some((1, 1)));
        assert_eq!(weighted_interleave_weights(0, 3), None);
        assert_eq!(weighted_interleave_weights(100, 3), None);
        assert_eq!(
            weighted_interleave_weights(1, 6),
            None,
            "needs a local weight of 594"
        );
        let mut representable = 0;
        for p in 1..100u8 {
            for k in 1..8usize {
                let Some((l, r)) = weighted_interleave_weights(p, k) else {
                    continue;
                };
                representable += 1;
                let remote = (r as f64 * k as f64) / (l as f64 + r as f64 * k as f64) * 100.0;
                assert!(
                    (remote - p as f64).abs() <= 0.5,
                    "P={p} k={k}: {l}:{r} gives {remote}"
                );
            }
        }
        assert!(
            representable > 600,
            "only {representable} of 693 (P, k) pairs representable"
        );
    }
}
