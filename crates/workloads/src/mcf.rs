//! `mcf-like`: the network simplex of 429.mcf / 505.mcf_r, reference/workloads.md §5.
//!
//! A node array (records of [`NODE_BYTES`]: potential, parent / first child / sibling pointers,
//! basic arc, depth, flow) and an arc array (records of [`ARC_BYTES`]: tail, head, cost, flow).
//! The program is a real primal network simplex on a spanning tree rooted at an artificial
//! node (mcf's big-M start: every node hangs from the root by an artificial arc):
//!
//! * **pricing** (`primal_bea_mpp`): scan the arc array in blocks, sequentially, computing each
//!   non-basic arc's reduced cost `cost + π(tail) − π(head)` from the tail's and head's
//!   potentials (two random gathers per arc); the most negative arc of the block enters;
//! * **ratio test**: walk from both ends of the entering arc up to their common ancestor by
//!   parent pointers (dependent loads), take the cycle arc with the least flow as the leaving
//!   arc and push the flow around the cycle (read-modify-write of the cycle's nodes);
//! * **tree update** (`update_tree`): re-hang the subtree cut off by the leaving arc below the
//!   entering arc, reversing the parent pointers on the path between them, then walk that whole
//!   subtree through child and sibling pointers (dependent loads, low memory-level parallelism)
//!   shifting its potentials so the entering arc's reduced cost becomes 0, and fixing depths.
//!
//! The tree mechanics are exact (the tests check the tree and the potentials after pivots);
//! the input network is a seeded random sparse graph standing for mcf's timetable network.
//! Copies share the input (same arcs, as SPEC copies read the same input file) and keep their
//! own tree.

use crate::emit::SplitMix64;
use crate::kernel::{
    compute, scale, scale_suffix, scaled, Backlog, Copies, SingleKernel, Unit, UnitProgram,
};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadProgram};
use numalab_core::TaskId;
use std::sync::{Arc, OnceLock};

pub const NAME: &str = "mcf-like";
pub const KEYS: &[&str] = &["nodes", "arcs", "block", "pivots", "seed", "scale"];
pub const DESCRIPTION: &str = "429.mcf-like network simplex: block pricing with random potential gathers, cycle walk, subtree re-hang and potential update by pointer chasing, one copy per thread (§5). \
keys: nodes=500000, arcs=6000000 (0.43 GB), block=arcs priced per pivot (3000), pivots=2000000, seed=1, scale=factor in (0,1] on nodes and arcs (1)";

pub const PHASES: &[&str] = &["init", "simplex"];
pub const PHASE_INIT: u16 = 0;
pub const PHASE_SIMPLEX: u16 = 1;

/// Node record: ≈ 60-100 B in §5 (potential, 4 tree pointers, basic arc, orientation, depth,
/// flow, time fields); 96 B here.
pub const NODE_BYTES: u64 = 96;
/// Arc record: ≈ 60-70 B in §5 (tail, head, cost, flow, ident, next pointers); 64 B here.
pub const ARC_BYTES: u64 = 64;
/// Compute per priced arc (reduced cost, sign test, best-candidate bookkeeping) and per node
/// visited by a tree walk. Set from 429.mcf's measured APKI 75.8 (L2 misses per 1000
/// instructions) and CPI 2.75 on a Xeon Gold 5120 (NT19, see `crate::kernel`): instructions
/// scaled together so that the pricing scans' and tree walks' L2 misses (this kernel on
/// `xeon-gold6130-2n`) make that APKI; cycles so that CPI holds, the compute beyond what the
/// misses hide standing for the program's other stalls (mcf's branch mispredictions among
/// them). The measured MPKI (27.7) is not reproduced: the kernel misses the LLC 56 times per
/// 1000 instructions (docs/VALIDATION.md). Before: 12 and 10 instructions (E), MPKI 139.
pub const CYCLES_PER_ARC: u64 = 110;
pub const INSTRUCTIONS_PER_ARC: u64 = 35;
pub const CYCLES_PER_NODE: u64 = 80;
pub const INSTRUCTIONS_PER_NODE: u64 = 29;
/// Arcs priced per unit of emission (bounded so a chunk stays near CHUNK_OPS).
const PRICE_CHUNK: u64 = 512;
const NONE: u32 = u32::MAX;
/// Candidate basket of the pricing (mcf's `perm`, B + K entries of 16 B: 350, E).
pub const BASKET: u64 = 350;
pub const BASKET_ENTRY_BYTES: u64 = 16;

/// The input network, shared by every copy.
#[derive(Debug)]
pub struct Net {
    pub nodes: usize,
    pub tail: Vec<u32>,
    pub head: Vec<u32>,
    pub cost: Vec<i32>,
}

impl Net {
    /// `arcs` arcs between random distinct non-root nodes (node 0 is the artificial root),
    /// costs uniform in [−50, 150).
    pub fn generate(nodes: usize, arcs: usize, seed: u64) -> Net {
        let mut r = SplitMix64::new(seed ^ 0x006d_6366);
        let n = nodes as u64 - 1;
        let (mut tail, mut head, mut cost) = (
            Vec::with_capacity(arcs),
            Vec::with_capacity(arcs),
            Vec::with_capacity(arcs),
        );
        for _ in 0..arcs {
            let t = 1 + r.below(n);
            let mut h = 1 + r.below(n - 1);
            if h >= t {
                h += 1;
            }
            tail.push(t as u32);
            head.push(h as u32);
            cost.push(r.below(200) as i32 - 50);
        }
        Net {
            nodes,
            tail,
            head,
            cost,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Mcf {
    pub nodes: u64,
    pub arcs: u64,
    pub nodes_full: u64,
    pub arcs_full: u64,
    pub block: u64,
    pub pivots: u64,
    pub seed: u64,
    pub scale: f64,
    net: Arc<OnceLock<Arc<Net>>>,
}

impl Mcf {
    pub fn from_params(p: &Params) -> Result<Mcf, WorkloadError> {
        let nodes_full = p.uint_in("nodes", 500_000, 3, u32::MAX as u64 - 1)?;
        let arcs_full = p.uint_in("arcs", 6_000_000, 1, u32::MAX as u64 - 1)?;
        let block = p.uint_in("block", 3000, 1, 1 << 30)?;
        let pivots = p.uint("pivots", 2_000_000)?;
        let seed = p.uint("seed", 1)?;
        let scale = scale(p)?;
        Ok(Mcf {
            nodes: scaled(nodes_full, scale, 3),
            arcs: scaled(arcs_full, scale, 1),
            nodes_full,
            arcs_full,
            block,
            pivots,
            seed,
            scale,
            net: Arc::new(OnceLock::new()),
        })
    }

    pub fn workload(p: &Params, threads: usize) -> Result<Copies<Mcf>, WorkloadError> {
        Copies::new(Self::from_params(p)?, threads, NAME)
    }

    pub fn net(&self) -> Arc<Net> {
        self.net
            .get_or_init(|| {
                Arc::new(Net::generate(
                    self.nodes as usize,
                    self.arcs as usize,
                    self.seed,
                ))
            })
            .clone()
    }

    /// A fresh solver state over the shared input (what one copy runs), with its node array,
    /// arc array and candidate basket at the given addresses.
    pub fn solver(&self, nodes_base: u64, arcs_base: u64, basket_base: u64) -> Simplex {
        Simplex::new(self.net(), self.seed, nodes_base, arcs_base, basket_base)
    }
}

impl SingleKernel for Mcf {
    fn spec(&self) -> String {
        format!(
            "{NAME}:nodes={},arcs={},block={},pivots={},seed={}{}",
            self.nodes_full,
            self.arcs_full,
            self.block,
            self.pivots,
            self.seed,
            scale_suffix(self.scale)
        )
    }

    fn build_copy(&self, mem: &mut dyn AddressSpace, task: TaskId) -> Box<dyn ThreadProgram> {
        let nb = mem.mmap(
            task,
            "mcf.nodes",
            self.nodes * NODE_BYTES,
            MapOptions::default(),
        );
        let ab = mem.mmap(
            task,
            "mcf.arcs",
            self.arcs * ARC_BYTES,
            MapOptions::default(),
        );
        let bb = mem.mmap(
            task,
            "mcf.basket",
            BASKET * BASKET_ENTRY_BYTES,
            MapOptions::default(),
        );
        Box::new(UnitProgram::new(
            McfRun {
                s: self.solver(nb, ab, bb),
                block: self.block,
                pivots_left: self.pivots,
                init_done: false,
                scanned: 0,
                since_pivot: 0,
                best: None,
                backlog: Backlog::default(),
            },
            PHASES,
        ))
    }
}

/// The spanning-tree state of one copy and the emission of its accesses.
pub struct Simplex {
    pub net: Arc<Net>,
    pub parent: Vec<u32>,
    /// Basic arc joining a node to its parent (NONE: artificial arc to the root).
    pub pred: Vec<u32>,
    pub child: Vec<u32>,
    pub next: Vec<u32>,
    pub prev: Vec<u32>,
    pub depth: Vec<u32>,
    pub potential: Vec<i64>,
    /// Flow on the node's basic arc.
    pub flow: Vec<i64>,
    basic: Vec<u64>,
    nodes_base: u64,
    arcs_base: u64,
    basket_base: u64,
    basket_fill: u64,
    /// Next arc to price.
    pub cursor: u64,
    pub pivots_done: u64,
}

impl Simplex {
    fn new(net: Arc<Net>, seed: u64, nodes_base: u64, arcs_base: u64, basket_base: u64) -> Simplex {
        let n = net.nodes;
        let mut r = SplitMix64::new(seed ^ 0x7472_6565);
        let mut s = Simplex {
            parent: vec![0; n],
            pred: vec![NONE; n],
            child: vec![NONE; n],
            next: vec![NONE; n],
            prev: vec![NONE; n],
            depth: vec![1; n],
            potential: (0..n).map(|_| r.below(1000) as i64).collect(),
            flow: (0..n).map(|_| 1 + r.below(100) as i64).collect(),
            basic: vec![0; net.tail.len().div_ceil(64)],
            net,
            nodes_base,
            arcs_base,
            basket_base,
            basket_fill: 0,
            cursor: 0,
            pivots_done: 0,
        };
        // big-M start: the root's children are 1..n in order
        s.parent[0] = NONE;
        s.depth[0] = 0;
        s.potential[0] = 0;
        s.child[0] = 1;
        for v in 1..n {
            s.next[v] = if v + 1 < n { (v + 1) as u32 } else { NONE };
            s.prev[v] = if v > 1 { (v - 1) as u32 } else { NONE };
        }
        s
    }

    pub fn is_basic(&self, a: usize) -> bool {
        self.basic[a / 64] >> (a % 64) & 1 != 0
    }

    fn set_basic(&mut self, a: usize, on: bool) {
        if on {
            self.basic[a / 64] |= 1 << (a % 64);
        } else {
            self.basic[a / 64] &= !(1 << (a % 64));
        }
    }

    pub fn reduced_cost(&self, a: usize) -> i64 {
        let net = &self.net;
        net.cost[a] as i64 + self.potential[net.tail[a] as usize]
            - self.potential[net.head[a] as usize]
    }

    fn node(&self, v: u32) -> u64 {
        self.nodes_base + v as u64 * NODE_BYTES
    }

    fn touch(&self, out: &mut Backlog, v: u32, kind: AccessKind) {
        out.push(Op::Access {
            addr: self.node(v),
            kind,
        });
    }

    /// Price arcs [cursor, cursor + n): the arc records stream in, the endpoints' potentials
    /// are gathered; returns the most negative (reduced cost, arc) seen.
    pub fn price(&mut self, n: u64, out: &mut Vec<Op>) -> Option<(i64, usize)> {
        let m = self.net.tail.len() as u64;
        let mut best: Option<(i64, usize)> = None;
        let mut left = n;
        while left > 0 {
            let lo = self.cursor;
            let len = left.min(m - lo);
            out.push(Op::Run {
                base: self.arcs_base + lo * ARC_BYTES,
                lines: len as u32,
                stride_bytes: ARC_BYTES as u16,
                kind: AccessKind::Read,
            });
            for a in lo..lo + len {
                let a = a as usize;
                if self.is_basic(a) {
                    continue;
                }
                for v in [self.net.tail[a], self.net.head[a]] {
                    out.push(Op::Access {
                        addr: self.node(v),
                        kind: AccessKind::Read,
                    });
                }
                let rc = self.reduced_cost(a);
                if rc < 0 {
                    // a candidate joins the basket (mcf's `perm`: arc pointer and |rc|)
                    out.push(Op::Access {
                        addr: self.basket_base + (self.basket_fill % BASKET) * BASKET_ENTRY_BYTES,
                        kind: AccessKind::Write,
                    });
                    self.basket_fill += 1;
                    if best.is_none_or(|(b, _)| rc < b) {
                        best = Some((rc, a));
                    }
                }
            }
            out.push(compute(len * CYCLES_PER_ARC, len * INSTRUCTIONS_PER_ARC));
            self.cursor = (lo + len) % m;
            left -= len;
        }
        best
    }

    fn detach(&mut self, v: u32, out: &mut Backlog) {
        let (p, pv, nx) = (
            self.parent[v as usize],
            self.prev[v as usize],
            self.next[v as usize],
        );
        if pv != NONE {
            self.next[pv as usize] = nx;
            self.touch(out, pv, AccessKind::Write);
        } else {
            self.child[p as usize] = nx;
            self.touch(out, p, AccessKind::Write);
        }
        if nx != NONE {
            self.prev[nx as usize] = pv;
            self.touch(out, nx, AccessKind::Write);
        }
    }

    fn attach(&mut self, v: u32, p: u32, out: &mut Backlog) {
        let first = self.child[p as usize];
        self.next[v as usize] = first;
        self.prev[v as usize] = NONE;
        if first != NONE {
            self.prev[first as usize] = v;
            self.touch(out, first, AccessKind::Write);
        }
        self.child[p as usize] = v;
        self.parent[v as usize] = p;
        self.touch(out, p, AccessKind::Write);
        self.touch(out, v, AccessKind::Write);
    }

    /// Pivot arc `a` (reduced cost `rc` < 0) into the tree; returns the size of the subtree
    /// whose potentials moved.
    pub fn pivot(&mut self, a: usize, rc: i64, out: &mut Backlog) -> u64 {
        let (u, w) = (self.net.tail[a], self.net.head[a]);
        out.push(Op::Access {
            addr: self.arcs_base + a as u64 * ARC_BYTES,
            kind: AccessKind::ReadModifyWrite,
        });
        // the cycle: both ends up to their common ancestor (dependent parent loads)
        let (mut path_u, mut path_w) = (Vec::new(), Vec::new());
        let (mut x, mut y) = (u, w);
        while self.depth[x as usize] > self.depth[y as usize] {
            path_u.push(x);
            self.touch(out, x, AccessKind::DependentRead);
            x = self.parent[x as usize];
        }
        while self.depth[y as usize] > self.depth[x as usize] {
            path_w.push(y);
            self.touch(out, y, AccessKind::DependentRead);
            y = self.parent[y as usize];
        }
        // the two ends climb in step: each parent load depends on its own chain's last one
        // only, so a core has both in flight at once (the second is the first's sibling)
        while x != y {
            path_u.push(x);
            path_w.push(y);
            self.touch(out, x, AccessKind::DependentRead);
            self.touch(out, y, AccessKind::SiblingRead);
            x = self.parent[x as usize];
            y = self.parent[y as usize];
        }
        // ratio test: the cycle arc with the least flow leaves
        let (on_u, li) = path_u
            .iter()
            .enumerate()
            .map(|(i, &v)| (true, i, self.flow[v as usize]))
            .chain(
                path_w
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| (false, i, self.flow[v as usize])),
            )
            .min_by_key(|&(_, _, f)| f)
            .map(|(s, i, _)| (s, i))
            .expect("the ends of a non-basic arc differ, so the cycle has a tree arc");
        let (leave_path, other_path) = if on_u {
            (&path_u, &path_w)
        } else {
            (&path_w, &path_u)
        };
        let delta = self.flow[leave_path[li] as usize];
        for &v in leave_path.iter() {
            self.flow[v as usize] -= delta;
        }
        for &v in other_path.iter() {
            self.flow[v as usize] += delta;
        }
        // the flow lives on the arcs: each cycle arc's record is updated through the node
        for &v in leave_path.iter().chain(other_path.iter()) {
            self.touch(out, v, AccessKind::ReadModifyWrite);
            if self.pred[v as usize] != NONE {
                out.push(Op::Access {
                    addr: self.arcs_base + self.pred[v as usize] as u64 * ARC_BYTES,
                    kind: AccessKind::ReadModifyWrite,
                });
            }
        }
        // re-hang: s (the entering arc's end under the leaving arc) goes below t
        let ys: Vec<u32> = leave_path[..=li].to_vec();
        let (s, t) = if on_u { (u, w) } else { (w, u) };
        let old_pred: Vec<u32> = ys.iter().map(|&v| self.pred[v as usize]).collect();
        let old_flow: Vec<i64> = ys.iter().map(|&v| self.flow[v as usize]).collect();
        if old_pred[li] != NONE {
            self.set_basic(old_pred[li] as usize, false);
        }
        self.detach(ys[li], out);
        for i in 1..ys.len() {
            self.detach(ys[i - 1], out);
        }
        for i in 1..ys.len() {
            self.attach(ys[i], ys[i - 1], out);
            self.pred[ys[i] as usize] = old_pred[i - 1];
            self.flow[ys[i] as usize] = old_flow[i - 1];
        }
        self.attach(s, t, out);
        self.pred[s as usize] = a as u32;
        self.flow[s as usize] = delta;
        self.set_basic(a, true);
        // potentials and depths of the moved subtree (child / sibling walk)
        let shift = if s == u { -rc } else { rc };
        let mut visited = 0u64;
        let mut stack = vec![s];
        while let Some(v) = stack.pop() {
            self.touch(out, v, AccessKind::DependentRead);
            self.touch(out, v, AccessKind::Write);
            self.potential[v as usize] += shift;
            self.depth[v as usize] = self.depth[self.parent[v as usize] as usize] + 1;
            visited += 1;
            let mut c = self.child[v as usize];
            while c != NONE {
                stack.push(c);
                c = self.next[c as usize];
            }
        }
        let touched = visited + (path_u.len() + path_w.len()) as u64;
        out.push(compute(
            touched * CYCLES_PER_NODE,
            touched * INSTRUCTIONS_PER_NODE,
        ));
        self.pivots_done += 1;
        visited
    }
}

struct McfRun {
    s: Simplex,
    block: u64,
    pivots_left: u64,
    init_done: bool,
    /// Arcs priced since the last pivot, and since the last candidate was found.
    scanned: u64,
    since_pivot: u64,
    best: Option<(i64, usize)>,
    backlog: Backlog,
}

impl Unit for McfRun {
    fn unit(&mut self, out: &mut Vec<Op>) -> bool {
        if !self.backlog.is_empty() {
            return self.backlog.drain(out) || self.pivots_left > 0;
        }
        if !self.init_done {
            // read_min: the copy builds its node and arc arrays (first touch)
            out.push(Op::Phase { id: PHASE_INIT });
            let n = self.s.net.nodes as u64;
            let m = self.s.net.tail.len() as u64;
            for (base, lines) in [
                (self.s.nodes_base, (n * NODE_BYTES).div_ceil(64)),
                (self.s.arcs_base, m),
            ] {
                let mut done = 0;
                while done < lines {
                    let l = (lines - done).min(1 << 20);
                    out.push(Op::Run {
                        base: base + done * 64,
                        lines: l as u32,
                        stride_bytes: 64,
                        kind: AccessKind::Write,
                    });
                    done += l;
                }
            }
            out.push(compute(20 * (n + m), 20 * (n + m)));
            out.push(Op::Phase { id: PHASE_SIMPLEX });
            self.init_done = true;
            return self.pivots_left > 0;
        }
        if self.pivots_left == 0 {
            return false;
        }
        let m = self.s.net.tail.len() as u64;
        let n = PRICE_CHUNK.min(self.block - self.scanned % self.block);
        if let Some((rc, a)) = self.s.price(n, out) {
            if self.best.is_none_or(|(b, _)| rc < b) {
                self.best = Some((rc, a));
            }
        }
        self.scanned += n;
        self.since_pivot += n;
        if self.scanned.is_multiple_of(self.block) {
            if let Some((rc, a)) = self.best.take() {
                self.s.pivot(a, rc, &mut self.backlog);
                self.pivots_left -= 1;
                self.since_pivot = 0;
                self.scanned = 0;
                self.backlog.drain(out);
                return true;
            }
        }
        // a whole pass over the arcs without a candidate: optimal, mcf stops
        self.since_pivot < m + self.block
    }
}
