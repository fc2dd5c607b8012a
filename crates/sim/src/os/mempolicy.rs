//! Page placement at fault time under a memory policy (mm/mempolicy.c's policy_node /
//! interleave_nid / weighted_interleave_nid, plus numalab's remote percentage, §5 [fix]).

use numalab_core::{MemPolicy, NodeId, NodeMask, Topology};

/// Per-policy allocation state: the task's interleave cursor (il_prev / il_weight) and the
/// remote-percentage counters (one counter per policy shared by the task's threads [nl]).
#[derive(Clone, Debug, Default)]
pub struct PolicyState {
    il_next: usize,
    il_weight_left: u32,
    pct_units: u64,
    pct_remote_units: u64,
    /// Units that should have gone remote but had no remote candidate.
    pub pct_shortfall_units: u64,
}

/// Where a fault wants its page: the intended node and the order to try when it is full.
#[derive(Clone, Debug, PartialEq)]
pub struct Placement {
    pub intended: NodeId,
    /// Nodes to try in order (starts with `intended`).
    pub order: Vec<NodeId>,
    /// True when allocation must not leave `order` (MPOL_BIND): a full mask is an OOM.
    pub strict: bool,
    /// Whether this was an interleave allocation (for the numa_interleave counter).
    pub interleave: bool,
}

pub struct PlaceCtx<'a> {
    pub topo: &'a Topology,
    pub zonelists: &'a [Vec<NodeId>],
    /// Node of the faulting CPU.
    pub local: NodeId,
    /// For a range policy: offset of the folio inside the mapping, in folio-size units
    /// (what interleave_nid() computes from vm_pgoff). None for a task policy.
    pub vma_offset: Option<u64>,
    /// Size of the allocation in 4 KiB units (a THP counts 512).
    pub units: u64,
}

fn nodes_near(ctx: &PlaceCtx, from: NodeId, mask: Option<&NodeMask>) -> Vec<NodeId> {
    ctx.zonelists[from.index()]
        .iter()
        .copied()
        .filter(|n| mask.is_none_or(|m| m.contains(*n)))
        .collect()
}

fn weighted_pick(nodes: &NodeMask, weights: &[u8], mut r: u64) -> NodeId {
    for n in nodes.iter() {
        let w = MemPolicy::weight_of(weights, n) as u64;
        if r < w {
            return n;
        }
        r -= w;
    }
    nodes.first().expect("validated non-empty mask")
}

/// Decide the node for one allocation. `rand` draws a uniform integer below its argument.
pub fn place(
    policy: &MemPolicy,
    st: &mut PolicyState,
    ctx: &PlaceCtx,
    rand: &mut dyn FnMut(u64) -> u64,
) -> Placement {
    let zonelist = |n: NodeId| ctx.zonelists[n.index()].clone();
    let interleaved = |n: NodeId| Placement {
        intended: n,
        order: zonelist(n),
        strict: false,
        interleave: true,
    };
    let simple = |n: NodeId| Placement {
        intended: n,
        order: zonelist(n),
        strict: false,
        interleave: false,
    };
    match policy {
        MemPolicy::Default | MemPolicy::Local => simple(ctx.local),
        MemPolicy::Preferred { node } => simple(*node),
        MemPolicy::PreferredMany { nodes } => {
            let mut order = nodes_near(ctx, ctx.local, Some(nodes));
            for n in zonelist(ctx.local) {
                if !order.contains(&n) {
                    order.push(n);
                }
            }
            Placement {
                intended: order[0],
                order,
                strict: false,
                interleave: false,
            }
        }
        MemPolicy::Bind { nodes, .. } => {
            let order = nodes_near(ctx, ctx.local, Some(nodes));
            Placement {
                intended: order[0],
                order,
                strict: true,
                interleave: false,
            }
        }
        MemPolicy::Interleave { nodes } => {
            let w = nodes.weight();
            let n = match ctx.vma_offset {
                Some(off) => nodes.nth((off % w as u64) as usize).unwrap(),
                None => {
                    let n = nodes.nth(st.il_next % w).unwrap();
                    st.il_next = (st.il_next + 1) % w;
                    n
                }
            };
            interleaved(n)
        }
        MemPolicy::WeightedInterleave { nodes, weights } => {
            let n = match ctx.vma_offset {
                Some(off) => {
                    let total: u64 = nodes
                        .iter()
                        .map(|n| MemPolicy::weight_of(weights, n) as u64)
                        .sum();
                    weighted_pick(nodes, weights, off % total)
                }
                None => {
                    let w = nodes.weight();
                    let n = nodes.nth(st.il_next % w).unwrap();
                    if st.il_weight_left == 0 {
                        st.il_weight_left = MemPolicy::weight_of(weights, n);
                    }
                    st.il_weight_left -= 1;
                    if st.il_weight_left == 0 {
                        st.il_next = (st.il_next + 1) % w;
                    }
                    n
                }
            };
            interleaved(n)
        }
        MemPolicy::RemotePercent { percent, remote } => {
            // The k-th 4 KiB unit goes remote iff floor((k+1)·p/100) > floor(k·p/100) ([fix],
            // §5): remote units are spread evenly. A multi-unit folio goes remote when at
            // least half of its units are owed to remote nodes.
            let p = *percent as u64;
            st.pct_units += ctx.units;
            let target = st.pct_units * p / 100;
            let owed = target.saturating_sub(st.pct_remote_units + st.pct_shortfall_units);
            let go_remote = owed > 0 && owed * 2 >= ctx.units;
            if !go_remote {
                return simple(ctx.local);
            }
            let pool = if remote.is_empty() {
                ctx.topo.online()
            } else {
                *remote
            };
            let candidates = pool.and_not(&NodeMask::single(ctx.local));
            if candidates.is_empty() {
                st.pct_shortfall_units += ctx.units;
                return simple(ctx.local);
            }
            st.pct_remote_units += ctx.units;
            let n = candidates
                .nth(rand(candidates.weight() as u64) as usize)
                .unwrap();
            simple(n)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_core::{CpuId, NodeInfo};

    fn topo(n: usize) -> (Topology, Vec<Vec<NodeId>>) {
        let t = Topology {
            nodes: (0..n)
                .map(|i| NodeInfo {
                    id: NodeId(i as u16),
                    cpus: vec![CpuId(i as u32)],
                    mem_bytes: 1 << 30,
                })
                .collect(),
            distances: (0..n)
                .map(|i| (0..n).map(|j| if i == j { 10 } else { 20 }).collect())
                .collect(),
            smt: 1,
        };
        let z = (0..n)
            .map(|i| t.nodes_by_distance(NodeId(i as u16)))
            .collect();
        (t, z)
    }

    fn count(policy: &MemPolicy, n: usize, allocs: usize, vma: bool) -> Vec<usize> {
        let (t, z) = topo(n);
        let mut st = PolicyState::default();
        let mut seed = 1u64;
        let mut rand = |m: u64| {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (seed >> 33) % m
        };
        let mut c = vec![0; n];
        for i in 0..allocs {
            let ctx = PlaceCtx {
                topo: &t,
                zonelists: &z,
                local: NodeId(0),
                vma_offset: vma.then_some(i as u64),
                units: 1,
            };
            c[place(policy, &mut st, &ctx, &mut rand).intended.index()] += 1;
        }
        c
    }

    #[test]
    fn interleave_round_robin() {
        let p = MemPolicy::Interleave {
            nodes: NodeMask::first_n(4),
        };
        assert_eq!(count(&p, 4, 400, false), vec![100; 4]);
        assert_eq!(count(&p, 4, 400, true), vec![100; 4]);
    }

    #[test]
    fn weighted_interleave_3_to_1() {
        let p = MemPolicy::WeightedInterleave {
            nodes: NodeMask::first_n(2),
            weights: vec![3, 1],
        };
        assert_eq!(count(&p, 2, 400, false), vec![300, 100]);
        assert_eq!(count(&p, 2, 400, true), vec![300, 100]);
    }

    #[test]
    fn remote_percent_is_exact_and_even() {
        let p = MemPolicy::RemotePercent {
            percent: 40,
            remote: NodeMask::empty(),
        };
        assert_eq!(count(&p, 2, 1000, false), vec![600, 400]);
        let c = count(&p, 4, 3000, false);
        assert_eq!(c[0], 1800);
        assert!(
            c[1..].iter().all(|&x| x > 300),
            "remote units spread over all remote nodes: {c:?}"
        );
    }

    #[test]
    fn remote_percent_without_candidates_stays_local() {
        let (t, z) = topo(1);
        let mut st = PolicyState::default();
        let p = MemPolicy::RemotePercent {
            percent: 50,
            remote: NodeMask::empty(),
        };
        for _ in 0..10 {
            let ctx = PlaceCtx {
                topo: &t,
                zonelists: &z,
                local: NodeId(0),
                vma_offset: None,
                units: 1,
            };
            assert_eq!(place(&p, &mut st, &ctx, &mut |_| 0).intended, NodeId(0));
        }
        assert_eq!(st.pct_shortfall_units, 5);
    }
}
