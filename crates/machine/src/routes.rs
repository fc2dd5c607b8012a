//! Routes between nodes over the link graph.
//!
//! HyperTransport and QPI routing tables are static, so every ordered pair gets one fixed
//! route for the whole run (reference/machines.md §3.2): fewest hops first, then the route
//! whose narrowest link is widest, then the lowest next-hop node id.

use crate::Link;
use numalab_core::NodeId;
use serde::{Deserialize, Serialize};

/// One link traversed in one direction; `forward` means from `link.a` to `link.b`.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkDir {
    pub link: usize,
    pub forward: bool,
}

impl LinkDir {
    /// Index of this direction in a per-direction array of 2 × links entries.
    #[inline]
    pub fn slot(self) -> usize {
        self.link * 2 + usize::from(!self.forward)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Routes {
    n: usize,
    /// `routes[from * n + to]`, the links from `from` to `to` in travel order.
    routes: Vec<Vec<LinkDir>>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("node {from} cannot reach node {to} over the links given: add a link (a = {from}, b = {to}) or through a common neighbour")]
    Unreachable { from: usize, to: usize },
    #[error("link {index} names node {node}, but the machine has {nodes} nodes")]
    BadNode {
        index: usize,
        node: usize,
        nodes: usize,
    },
}

impl Routes {
    pub fn compute(num_nodes: usize, links: &[Link]) -> Result<Routes, RouteError> {
        let n = num_nodes;
        // adjacency: (neighbour, link index, forward)
        let mut adj: Vec<Vec<(usize, usize, bool)>> = vec![Vec::new(); n];
        for (i, l) in links.iter().enumerate() {
            for node in [l.a.index(), l.b.index()] {
                if node >= n {
                    return Err(RouteError::BadNode {
                        index: i,
                        node,
                        nodes: n,
                    });
                }
            }
            adj[l.a.index()].push((l.b.index(), i, true));
            adj[l.b.index()].push((l.a.index(), i, false));
        }
        for a in adj.iter_mut() {
            a.sort();
        }
        let mut routes = vec![Vec::new(); n * n];
        for to in 0..n {
            // hop distance of every node to `to` (BFS)
            let mut hops = vec![usize::MAX; n];
            hops[to] = 0;
            let mut queue = std::collections::VecDeque::from([to]);
            while let Some(v) = queue.pop_front() {
                for &(w, _, _) in &adj[v] {
                    if hops[w] == usize::MAX {
                        hops[w] = hops[v] + 1;
                        queue.push_back(w);
                    }
                }
            }
            // widest bottleneck over shortest paths, by increasing hop count (a DP on the DAG)
            let mut best_bw = vec![f64::INFINITY; n];
            let mut next: Vec<Option<(usize, usize, bool)>> = vec![None; n];
            let mut order: Vec<usize> = (0..n).filter(|&v| hops[v] != usize::MAX).collect();
            order.sort_by_key(|&v| hops[v]);
            for &v in &order {
                if v == to {
                    continue;
                }
                let mut chosen: Option<(f64, (usize, usize, bool))> = None;
                for &(w, li, fwd) in &adj[v] {
                    if hops[w] != usize::MAX && hops[w] + 1 == hops[v] {
                        let bw = links[li].gbps_per_dir.min(best_bw[w]);
                        let wider = match chosen {
                            Some((b, _)) => bw > b,
                            None => true,
                        };
                        if wider {
                            chosen = Some((bw, (w, li, fwd)));
                        }
                    }
                }
                let (bw, hop) = chosen.expect("a node at finite distance has a closer neighbour");
                best_bw[v] = bw;
                next[v] = Some(hop);
            }
            for from in 0..n {
                if from == to {
                    continue;
                }
                if hops[from] == usize::MAX {
                    return Err(RouteError::Unreachable { from, to });
                }
                let mut path = Vec::new();
                let mut v = from;
                while v != to {
                    let (w, li, fwd) = next[v].unwrap();
                    path.push(LinkDir {
                        link: li,
                        forward: fwd,
                    });
                    v = w;
                }
                routes[from * n + to] = path;
            }
        }
        Ok(Routes { n, routes })
    }

    #[inline]
    pub fn route(&self, from: NodeId, to: NodeId) -> &[LinkDir] {
        &self.routes[from.index() * self.n + to.index()]
    }

    pub fn hops(&self, from: NodeId, to: NodeId) -> usize {
        self.route(from, to).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(a: u16, b: u16, bw: f64) -> Link {
        Link {
            a: NodeId(a),
            b: NodeId(b),
            gbps_per_dir: bw,
            hop_ns: 40.0,
            next_hop_ns: None,
        }
    }

    #[test]
    fn square_routes_prefer_wide_links() {
        // 0-1 wide, 1-3 wide, 0-2 narrow, 2-3 narrow: 0 -> 3 must go through 1.
        let links = vec![
            link(0, 1, 10.0),
            link(1, 3, 10.0),
            link(0, 2, 5.0),
            link(2, 3, 5.0),
        ];
        let r = Routes::compute(4, &links).unwrap();
        let p = r.route(NodeId(0), NodeId(3));
        assert_eq!(
            p,
            &[
                LinkDir {
                    link: 0,
                    forward: true
                },
                LinkDir {
                    link: 1,
                    forward: true
                }
            ]
        );
        assert_eq!(
            r.route(NodeId(3), NodeId(0)),
            &[
                LinkDir {
                    link: 1,
                    forward: false
                },
                LinkDir {
                    link: 0,
                    forward: false
                }
            ]
        );
        assert_eq!(r.hops(NodeId(1), NodeId(2)), 2);
    }

    #[test]
    fn unreachable_is_an_error() {
        assert_eq!(
            Routes::compute(3, &[link(0, 1, 1.0)]),
            Err(RouteError::Unreachable { from: 2, to: 0 })
        );
    }
}
