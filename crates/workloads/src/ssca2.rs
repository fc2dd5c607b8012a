//! `ssca2`: SSCA2 v2.2 graph analysis, reference/workloads.md §4.3.
//!
//! A directed R-MAT graph of N = 2^`log2_vertices` vertices and `edgefactor`·N edges
//! (a = 0.55, b = 0.1, c = 0.1, d = 0.25; integer weights up to N), generated for real (seeded),
//! then:
//!
//! * **generation**: each thread writes its static block of the start / end / weight tuples;
//! * **K1** (build the CSR graph): out-degrees counted with atomic increments at random
//!   vertices, a two-pass parallel prefix sum over `numEdges`, then each edge is placed with an
//!   atomic slot reservation (`pos[u]++`) and written to `endV` / `weight` at that slot (random
//!   writes); the CSR arrays are zeroed first by static loops (their first touch, in blocks);
//! * **K2**: a static scan of `weight` for the maximum;
//! * **K4** (betweenness centrality, which dominates): for each of `sources` sources
//!   (2^K4approx = 256 by default), a level-synchronous BFS whose frontier is split statically
//!   (a barrier per level): per edge (v, w) read `d[w]` at a random w; the first discoverer
//!   sets it (read-modify-write) and queues w in its local buffer, copied to the BFS order `S`
//!   at the level's end; when w is one level below v, `sigma[w]` is updated and v appended to
//!   w's predecessor list (atomics); then the backward sweep level by level: for each w, for
//!   each predecessor v, `delta[v]` updated (atomic) from `sigma[v]`, and `BC[w]` updated.
//!
//! BFS levels, discoverers and predecessor lists come from a real BFS of the generated graph
//! (the discoverer of a vertex is the first edge to reach it in frontier order). K3 (subgraph
//! extraction, small) is left out.

use crate::emit::{static_range, Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;
use std::sync::{Arc, Mutex, OnceLock};

pub const NAME: &str = "ssca2";
pub const KEYS: &[&str] = &["log2_vertices", "edgefactor", "k4approx", "sources", "seed"];
pub const DESCRIPTION: &str = "SSCA2 v2.2: R-MAT generation, CSR build with atomic slot reservation (K1), weight scan (K2), betweenness centrality by level-synchronous BFS and backward sweeps (K4) (§4.3). \
keys: log2_vertices=SCALE (20), edgefactor=8, k4approx=8 (2^8 BC sources), sources=sources actually run (2^k4approx), seed=1";

pub const PHASES: &[&str] = &["generate", "k1-build", "k2-max-weight", "k4-bc"];
pub const PHASE_GENERATE: u16 = 0;
pub const PHASE_K1: u16 = 1;
pub const PHASE_K2: u16 = 2;
pub const PHASE_K4: u16 = 3;

/// R-MAT quadrant probabilities (§4.3, E).
pub const RMAT: [f64; 4] = [0.55, 0.1, 0.1, 0.25];
/// 64-bit tuples and CSR entries (§4.3, E); vertex ints 4 B, doubles 8 B.
pub const LONG: u64 = 8;
pub const INT: u64 = 4;
/// Work per edge visited in K4 (E).
pub const CYCLES_PER_EDGE: u64 = 6;
const EDGES_PER_UNIT: u64 = 1024;

/// The generated graph in CSR form (out-edges) plus in-degree offsets for predecessor lists.
#[derive(Debug)]
pub struct Graph {
    pub n: u64,
    pub start: Vec<u32>,
    pub end: Vec<u32>,
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
    pub in_offsets: Vec<u32>,
}

impl Graph {
    pub fn rmat(log2_n: u32, edges: u64, seed: u64) -> Graph {
        let n = 1u64 << log2_n;
        let mut r = SplitMix64::new(seed ^ 0x0005_5ca2);
        let (mut start, mut end) = (
            Vec::with_capacity(edges as usize),
            Vec::with_capacity(edges as usize),
        );
        let cut = [RMAT[0], RMAT[0] + RMAT[1], RMAT[0] + RMAT[1] + RMAT[2]];
        for _ in 0..edges {
            let (mut u, mut v) = (0u64, 0u64);
            for _ in 0..log2_n {
                let x = (r.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                let q = cut.iter().filter(|&&c| x >= c).count() as u64;
                u = u << 1 | (q >> 1);
                v = v << 1 | (q & 1);
            }
            start.push(u as u32);
            end.push(v as u32);
        }
        let mut offsets = vec![0u32; n as usize + 1];
        let mut in_offsets = vec![0u32; n as usize + 1];
        for (&u, &v) in start.iter().zip(&end) {
            offsets[u as usize + 1] += 1;
            in_offsets[v as usize + 1] += 1;
        }
        for i in 0..n as usize {
            offsets[i + 1] += offsets[i];
            in_offsets[i + 1] += in_offsets[i];
        }
        let mut fill = offsets.clone();
        let mut targets = vec![0u32; edges as usize];
        for (&u, &v) in start.iter().zip(&end) {
            targets[fill[u as usize] as usize] = v;
            fill[u as usize] += 1;
        }
        Graph {
            n,
            start,
            end,
            offsets,
            targets,
            in_offsets,
        }
    }

    pub fn out(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize]
    }
}

/// One source's BFS: visit order, level boundaries, distances, discoverer edge of each vertex.
#[derive(Debug)]
pub struct Bfs {
    pub order: Vec<u32>,
    pub levels: Vec<usize>,
    pub dist: Vec<u32>,
    /// Index of each reached vertex in `order`.
    pub pos: Vec<u32>,
    /// Predecessors of each reached vertex, in discovery order of the edges.
    pub preds: Vec<Vec<u32>>,
}

impl Bfs {
    pub fn run(g: &Graph, s: u32) -> Bfs {
        let n = g.n as usize;
        let mut dist = vec![u32::MAX; n];
        let mut preds = vec![Vec::new(); n];
        let mut order = vec![s];
        let mut levels = vec![0, 1];
        dist[s as usize] = 0;
        loop {
            let (lo, hi) = (levels[levels.len() - 2], levels[levels.len() - 1]);
            for i in lo..hi {
                let v = order[i];
                for &w in g.out(v) {
                    if dist[w as usize] == u32::MAX {
                        dist[w as usize] = dist[v as usize] + 1;
                        order.push(w);
                    }
                    if dist[w as usize] == dist[v as usize] + 1 {
                        preds[w as usize].push(v);
                    }
                }
            }
            if order.len() == hi {
                // no new level: the last boundary closes the deepest level
                let mut pos = vec![u32::MAX; n];
                for (i, &v) in order.iter().enumerate() {
                    pos[v as usize] = i as u32;
                }
                return Bfs {
                    order,
                    levels,
                    dist,
                    pos,
                    preds,
                };
            }
            levels.push(order.len());
        }
    }
}

#[derive(Clone, Debug)]
pub struct Ssca2 {
    pub log2_vertices: u32,
    pub edgefactor: u64,
    pub k4approx: u32,
    pub sources: u64,
    pub seed: u64,
    pub threads: usize,
    graph: Arc<OnceLock<Arc<Graph>>>,
    bfs: Arc<Mutex<BfsCache>>,
}

/// The last few sources' BFS results, by source index.
type BfsCache = Vec<(u64, Arc<Bfs>)>;

/// Addresses of the arrays.
#[derive(Copy, Clone, Debug)]
struct Maps {
    start: u64,
    end: u64,
    wtup: u64,
    num_edges: u64,
    pos: u64,
    end_v: u64,
    weight: u64,
    d: u64,
    sigma: u64,
    delta: u64,
    bc: u64,
    p_count: u64,
    s: u64,
    p: u64,
    local: u64,
    local_bytes: u64,
}

impl Ssca2 {
    pub fn from_params(p: &Params, threads: usize) -> Result<Ssca2, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "SSCA2 needs at least one thread".into(),
            });
        }
        let log2_vertices = p.uint_in("log2_vertices", 20, 4, 28)? as u32;
        let edgefactor = p.uint_in("edgefactor", 8, 1, 64)?;
        let k4approx = p.uint_in("k4approx", 8, 0, log2_vertices as u64)? as u32;
        let sources = p.uint_in("sources", 1 << k4approx, 0, 1 << k4approx)?;
        let seed = p.uint("seed", 1)?;
        if (edgefactor << log2_vertices) > u32::MAX as u64 {
            return Err(WorkloadError::Invalid {
                workload: NAME,
                why: "more than 2^32 edges".into(),
            });
        }
        Ok(Ssca2 {
            log2_vertices,
            edgefactor,
            k4approx,
            sources,
            seed,
            threads,
            graph: Arc::new(OnceLock::new()),
            bfs: Arc::new(Mutex::new(Vec::new())),
        })
    }

    pub fn vertices(&self) -> u64 {
        1 << self.log2_vertices
    }

    pub fn edges(&self) -> u64 {
        self.edgefactor << self.log2_vertices
    }

    pub fn graph(&self) -> Arc<Graph> {
        self.graph
            .get_or_init(|| Arc::new(Graph::rmat(self.log2_vertices, self.edges(), self.seed)))
            .clone()
    }

    /// The `i`-th BC source: a seeded pick among vertices with out-edges.
    pub fn source(&self, i: u64) -> u32 {
        let g = self.graph();
        let mut r = SplitMix64::new(self.seed ^ 0xbc00 ^ i.wrapping_mul(0x9E37_79B9));
        loop {
            let v = r.below(g.n) as u32;
            if !g.out(v).is_empty() {
                return v;
            }
        }
    }

    /// BFS of source `i`, shared by the threads (they run it together, level by level).
    pub fn bfs(&self, i: u64) -> Arc<Bfs> {
        let mut cache = self.bfs.lock().expect("no thread panics while holding it");
        if let Some((_, b)) = cache.iter().find(|(k, _)| *k == i) {
            return b.clone();
        }
        let b = Arc::new(Bfs::run(&self.graph(), self.source(i)));
        cache.push((i, b.clone()));
        if cache.len() > 3 {
            cache.remove(0);
        }
        b
    }

    fn program(&self, m: Maps, t: usize) -> Script {
        let (n, e) = (self.vertices(), self.edges());
        let nt = self.threads;
        let mut s = Script::new(PHASES);
        let (elo, ehi) = static_range(e, nt, t);
        let (vlo, vhi) = static_range(n, nt, t);
        s.phase(PHASE_GENERATE);
        s.streams(
            &[
                Span::elems(m.start, elo, ehi, LONG, AccessKind::Write),
                Span::elems(m.end, elo, ehi, LONG, AccessKind::Write),
                Span::elems(m.wtup, elo, ehi, LONG, AccessKind::Write),
            ],
            (ehi - elo) * self.log2_vertices as u64 * 8,
            (ehi - elo) * self.log2_vertices as u64 * 12,
        );
        s.barrier();
        s.phase(PHASE_K1);
        // CSR arrays zeroed by static loops (first touch in blocks)
        s.streams(
            &[
                Span::elems(m.num_edges, vlo, vhi, LONG, AccessKind::Write),
                Span::elems(m.pos, vlo, vhi, LONG, AccessKind::Write),
            ],
            vhi - vlo,
            vhi - vlo,
        );
        s.streams(
            &[
                Span::elems(m.end_v, elo, ehi, LONG, AccessKind::Write),
                Span::elems(m.weight, elo, ehi, LONG, AccessKind::Write),
            ],
            ehi - elo,
            ehi - elo,
        );
        s.barrier();
        s.gen(K1 {
            w: self.clone(),
            m,
            pos: elo,
            hi: ehi,
            scatter: false,
            seen: Vec::new(),
        });
        s.barrier();
        // prefix sum: own block, then the block totals, then the fix-up pass
        s.streams(
            &[Span::elems(
                m.num_edges,
                vlo,
                vhi,
                LONG,
                AccessKind::ReadModifyWrite,
            )],
            vhi - vlo,
            vhi - vlo,
        );
        s.barrier();
        s.streams(
            &[
                Span::elems(m.num_edges, vlo, vhi, LONG, AccessKind::ReadModifyWrite),
                Span::elems(m.pos, vlo, vhi, LONG, AccessKind::Write),
            ],
            vhi - vlo,
            vhi - vlo,
        );
        s.barrier();
        s.gen(K1 {
            w: self.clone(),
            m,
            pos: elo,
            hi: ehi,
            scatter: true,
            seen: Vec::new(),
        });
        s.barrier();
        s.phase(PHASE_K2);
        s.streams(
            &[Span::elems(m.weight, elo, ehi, LONG, AccessKind::Read)],
            ehi - elo,
            ehi - elo,
        );
        s.barrier();
        s.phase(PHASE_K4);
        // BC[] = 0 once
        s.streams(
            &[Span::elems(m.bc, vlo, vhi, LONG, AccessKind::Write)],
            vhi - vlo,
            vhi - vlo,
        );
        s.barrier();
        for src in 0..self.sources {
            s.streams(
                &[
                    Span::elems(m.d, vlo, vhi, INT, AccessKind::Write),
                    Span::elems(m.sigma, vlo, vhi, LONG, AccessKind::Write),
                    Span::elems(m.delta, vlo, vhi, LONG, AccessKind::Write),
                    Span::elems(m.p_count, vlo, vhi, INT, AccessKind::Write),
                ],
                vhi - vlo,
                vhi - vlo,
            );
            s.barrier();
            s.gen(K4 {
                w: self.clone(),
                m,
                t,
                src,
                bfs: None,
                level: 0,
                backward: false,
                cursor: None,
                mine: std::collections::HashSet::new(),
                pred_seen: std::collections::HashMap::new(),
            });
        }
        s
    }
}

impl Workload for Ssca2 {
    fn name(&self) -> String {
        format!(
            "{NAME}:log2_vertices={},edgefactor={},k4approx={},sources={},seed={}",
            self.log2_vertices, self.edgefactor, self.k4approx, self.sources, self.seed
        )
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let (n, e) = (self.vertices(), self.edges());
        let local_bytes = (n * INT).div_ceil(4096) * 4096;
        let mut map = |name: &str, bytes: u64| mem.mmap(task, name, bytes, o());
        let m = Maps {
            start: map("ssca2.start", e * LONG),
            end: map("ssca2.end", e * LONG),
            wtup: map("ssca2.wtuple", e * LONG),
            num_edges: map("ssca2.numEdges", (n + 1) * LONG),
            pos: map("ssca2.pos", n * LONG),
            end_v: map("ssca2.endV", e * LONG),
            weight: map("ssca2.weight", e * LONG),
            d: map("ssca2.d", n * INT),
            sigma: map("ssca2.sigma", n * LONG),
            delta: map("ssca2.delta", n * LONG),
            bc: map("ssca2.BC", n * LONG),
            p_count: map("ssca2.pCount", n * INT),
            s: map("ssca2.S", n * INT),
            p: map("ssca2.P", e * INT),
            local: map("ssca2.local", self.threads as u64 * local_bytes),
            local_bytes,
        };
        (0..self.threads)
            .map(|t| ThreadSpec {
                task,
                program: Box::new(self.program(m, t)),
            })
            .collect()
    }
}

/// K1's degree count (atomic increments) or scatter (slot reservation + placement) over a
/// thread's block of tuples.
struct K1 {
    w: Ssca2,
    m: Maps,
    pos: u64,
    hi: u64,
    scatter: bool,
    /// Scatter: per vertex, slots taken so far by this thread's earlier edges (lazily sized).
    seen: Vec<u32>,
}

impl Gen for K1 {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let g = self.w.graph();
        if self.scatter && self.seen.is_empty() {
            // slots before this block: edges of each vertex in earlier blocks (index order)
            self.seen = vec![0; g.n as usize];
            for &u in &g.start[..self.pos as usize] {
                self.seen[u as usize] += 1;
            }
        }
        let m = self.m;
        while self.pos < self.hi {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let (lo, hi) = (self.pos, (self.pos + EDGES_PER_UNIT).min(self.hi));
            let mut arrays = vec![m.start];
            if self.scatter {
                arrays.extend([m.end, m.wtup]);
            }
            for a in arrays {
                let sp = Span::elems(a, lo, hi, LONG, AccessKind::Read);
                out.push(Op::Run {
                    base: sp.addr,
                    lines: sp.lines as u32,
                    stride_bytes: 64,
                    kind: sp.kind,
                });
            }
            for i in lo..hi {
                let u = g.start[i as usize] as u64;
                if !self.scatter {
                    out.push(Op::Access {
                        addr: m.num_edges + (u + 1) * LONG,
                        kind: AccessKind::ReadModifyWrite,
                    });
                    continue;
                }
                let slot = g.offsets[u as usize] as u64 + self.seen[u as usize] as u64;
                self.seen[u as usize] += 1;
                out.push(Op::Access {
                    addr: m.pos + u * LONG,
                    kind: AccessKind::ReadModifyWrite,
                });
                out.push(Op::Access {
                    addr: m.end_v + slot * LONG,
                    kind: AccessKind::Write,
                });
                out.push(Op::Access {
                    addr: m.weight + slot * LONG,
                    kind: AccessKind::Write,
                });
            }
            out.push(compute((hi - lo) * 4, (hi - lo) * 8));
            self.pos = hi;
        }
        Status::Done
    }
}

/// One BC source: BFS levels forward, then the backward sweep, a barrier per level.
struct K4 {
    w: Ssca2,
    m: Maps,
    t: usize,
    src: u64,
    bfs: Option<Arc<Bfs>>,
    level: usize,
    backward: bool,
    /// (frontier index, edge index) inside the current level's share.
    cursor: Option<(usize, usize)>,
    /// Vertices this thread discovered in the current level.
    mine: std::collections::HashSet<u32>,
    /// Predecessor-list entries this thread wrote per vertex (for their slots).
    pred_seen: std::collections::HashMap<u32, u32>,
}

impl Gen for K4 {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let bfs = self.bfs.get_or_insert_with(|| self.w.bfs(self.src)).clone();
        let g = self.w.graph();
        let m = self.m;
        let nlev = bfs.levels.len() - 1;
        let nt = self.w.threads;
        loop {
            if self.level >= nlev {
                return Status::Done;
            }
            // levels forward 0..nlev, backward nlev−1..1 (level 0 has no predecessors)
            let l = if self.backward {
                nlev - 1 - self.level
            } else {
                self.level
            };
            let (flo, fhi) = (bfs.levels[l], bfs.levels[l + 1]);
            let (lo, hi) = {
                let (a, b) = static_range((fhi - flo) as u64, nt, self.t);
                (flo + a as usize, flo + b as usize)
            };
            let (mut i, mut k) = match self.cursor {
                Some(c) => c,
                None => {
                    // this share of the frontier, read from S
                    if hi > lo {
                        let sp = Span::elems(m.s, lo as u64, hi as u64, INT, AccessKind::Read);
                        out.push(Op::Run {
                            base: sp.addr,
                            lines: sp.lines as u32,
                            stride_bytes: 64,
                            kind: sp.kind,
                        });
                    }
                    (lo, 0)
                }
            };
            let mut queued = 0u64;
            let mut edges = 0u64;
            while i < hi {
                if out.len() >= CHUNK_OPS {
                    self.cursor = Some((i, k));
                    out.push(compute(edges * CYCLES_PER_EDGE, edges * 12));
                    return Status::More;
                }
                let v = bfs.order[i];
                let vu = v as u64;
                if !self.backward {
                    if k == 0 {
                        for a in [m.num_edges + vu * LONG, m.num_edges + (vu + 1) * LONG] {
                            out.push(Op::Access {
                                addr: a,
                                kind: AccessKind::Read,
                            });
                        }
                    }
                    let adj = g.out(v);
                    let off = g.offsets[v as usize] as u64;
                    let end = (k + EDGES_PER_UNIT as usize).min(adj.len());
                    if end > k {
                        let sp = Span::elems(
                            m.end_v,
                            off + k as u64,
                            off + end as u64,
                            LONG,
                            AccessKind::Read,
                        );
                        out.push(Op::Run {
                            base: sp.addr,
                            lines: sp.lines as u32,
                            stride_bytes: 64,
                            kind: sp.kind,
                        });
                    }
                    for &w in &adj[k..end] {
                        let wu = w as u64;
                        let dw = bfs.dist[w as usize];
                        let first = dw == bfs.dist[v as usize] + 1
                            && bfs.preds[w as usize].first() == Some(&v)
                            && self.mine.insert(w);
                        out.push(Op::Access {
                            addr: m.d + wu * INT,
                            kind: if first {
                                AccessKind::ReadModifyWrite
                            } else {
                                AccessKind::Read
                            },
                        });
                        if first {
                            out.push(Op::Access {
                                addr: m.local + self.t as u64 * m.local_bytes + queued * INT,
                                kind: AccessKind::Write,
                            });
                            queued += 1;
                        }
                        if dw == bfs.dist[v as usize] + 1 {
                            // sigma[w] += sigma[v]; P[w][pCount[w]++] = v (atomics)
                            // pCount[w]++ hands out slots in arrival order: this thread's
                            // c-th entry for w is placed at c·T + t (mod the list length)
                            let c = self.pred_seen.entry(w).or_insert(0);
                            let len = bfs.preds[w as usize].len() as u64;
                            let slot = (*c as u64 * nt as u64 + self.t as u64) % len;
                            *c += 1;
                            out.push(Op::Access {
                                addr: m.sigma + wu * LONG,
                                kind: AccessKind::ReadModifyWrite,
                            });
                            out.push(Op::Access {
                                addr: m.p_count + wu * INT,
                                kind: AccessKind::ReadModifyWrite,
                            });
                            out.push(Op::Access {
                                addr: m.p + (g.in_offsets[w as usize] as u64 + slot) * INT,
                                kind: AccessKind::Write,
                            });
                        }
                    }
                    edges += (end - k) as u64;
                    if end < adj.len() {
                        k = end;
                    } else {
                        k = 0;
                        i += 1;
                    }
                } else {
                    // delta[v] += sigma[v]/sigma[w]·(1 + delta[w]) for each predecessor v
                    let w = v;
                    let wu = w as u64;
                    for a in [m.sigma + wu * LONG, m.delta + wu * LONG] {
                        out.push(Op::Access {
                            addr: a,
                            kind: AccessKind::Read,
                        });
                    }
                    let preds = &bfs.preds[w as usize];
                    let end = (k + EDGES_PER_UNIT as usize).min(preds.len());
                    let base = g.in_offsets[w as usize] as u64;
                    if end > k {
                        let sp = Span::elems(
                            m.p,
                            base + k as u64,
                            base + end as u64,
                            INT,
                            AccessKind::Read,
                        );
                        out.push(Op::Run {
                            base: sp.addr,
                            lines: sp.lines as u32,
                            stride_bytes: 64,
                            kind: sp.kind,
                        });
                    }
                    for &p in &preds[k..end] {
                        out.push(Op::Access {
                            addr: m.sigma + p as u64 * LONG,
                            kind: AccessKind::Read,
                        });
                        out.push(Op::Access {
                            addr: m.delta + p as u64 * LONG,
                            kind: AccessKind::ReadModifyWrite,
                        });
                    }
                    edges += (end - k) as u64;
                    if end < preds.len() {
                        k = end;
                    } else {
                        out.push(Op::Access {
                            addr: m.bc + wu * LONG,
                            kind: AccessKind::ReadModifyWrite,
                        });
                        k = 0;
                        i += 1;
                    }
                }
            }
            out.push(compute(edges * CYCLES_PER_EDGE, edges * 12));
            if !self.backward && l + 1 < nlev {
                // copy the local queue into S at this thread's offset of the next level
                let next_lo = bfs.levels[l + 1];
                let counts = self.discovered(&bfs, l);
                let before: u64 = counts[..self.t].iter().sum();
                let mine = counts[self.t];
                if mine > 0 {
                    let sp = Span::elems(
                        m.s,
                        next_lo as u64 + before,
                        next_lo as u64 + before + mine,
                        INT,
                        AccessKind::Write,
                    );
                    out.push(Op::Run {
                        base: sp.addr,
                        lines: sp.lines as u32,
                        stride_bytes: 64,
                        kind: sp.kind,
                    });
                }
            }
            out.push(Op::Barrier);
            self.cursor = None;
            self.mine.clear();
            self.pred_seen.clear();
            self.level += 1;
            if !self.backward && self.level == nlev {
                self.backward = true;
                self.level = 0;
                // the backward sweep stops at level 1
                if nlev <= 1 {
                    return Status::Done;
                }
            } else if self.backward && self.level == nlev - 1 {
                return Status::Done;
            }
        }
    }
}

impl K4 {
    /// Per thread: vertices of level l+1 first reached from its share of level l.
    fn discovered(&self, bfs: &Bfs, l: usize) -> Vec<u64> {
        let nt = self.w.threads;
        let flo = bfs.levels[l];
        let len = (bfs.levels[l + 1] - flo) as u64;
        let bounds: Vec<u64> = (0..nt).map(|t| static_range(len, nt, t).1).collect();
        let (nlo, nhi) = (bfs.levels[l + 1], bfs.levels[l + 2]);
        let mut counts = vec![0u64; nt];
        for &w in &bfs.order[nlo..nhi] {
            let p = bfs.preds[w as usize][0];
            let idx = bfs.pos[p as usize] as u64 - flo as u64;
            counts[bounds.partition_point(|&b| b <= idx)] += 1;
        }
        counts
    }
}
