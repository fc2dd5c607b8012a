//! `ssca2`: SSCA2 v2.2 graph analysis, reference/workloads.md §4.3, following the benchmark's
//! OpenMP source (genScalData.c, computeGraph.c, betweennessCentrality.c, defs.h of v2.2).
//!
//! A directed R-MAT graph of N = 2^`log2_vertices` vertices and `edgefactor`·N edges
//! (a = 0.55, b = 0.1, c = 0.1, d = 0.25; integer weights uniform in 1..=2^SCALE), generated for
//! real (seeded), its vertex ids randomly permuted as v2.2 does (so R-MAT's hubs are spread over
//! the id space, not packed at its start), then:
//!
//! * **generation**: each thread writes its static block of the start / end / weight tuples,
//!   then relabels them through the permutation (two random reads of `permV` per edge);
//! * **K1** (`computeGraph`): a count pass over static blocks of tuples (`pos[i] =
//!   degree[u]++` under the per-vertex `omp_lock_t` of u: random lock and counter updates,
//!   `pos` written in order), a two-pass prefix sum of `degree` into `numEdges`, and a scatter
//!   pass writing each edge to `endV` / `weight` at `numEdges[u] + pos[i]` (random writes:
//!   the arrays are malloc'd and not zeroed, so this pass first-touches them);
//! * **K2**: a static scan of `weight` for the maximum;
//! * **K4** (betweenness centrality, which dominates): `d` set to −1 and the per-vertex locks
//!   and predecessor-list headers initialised once by static loops; then for each of `sources`
//!   sources (2^K4approx = 256 by default) a level-synchronous BFS whose frontier is handed out
//!   by `schedule(dynamic)`: per edge (v, w) read `weight` (edges with a weight divisible by 8
//!   are skipped, as v2.2 filters them) and `endV`, take w's lock (`omp_test_lock`), read
//!   `d[w]`; the first discoverer sets it and queues w in its local stack, and when w is one
//!   level below v `sigma[w]` is updated and v appended to w's predecessor list (its `plist`
//!   header, then the slot in `pListMem`); the lock is released. Then the backward sweep level
//!   by level (static split): for each w, for each predecessor v, under v's lock, `delta[v]`
//!   updated from `sigma[v]`, then `BC[w]`. Last, the vertices the source reached are reset
//!   (`d`, `delta`, the list's count) by a static loop with chunk N/T over the BFS order.
//!
//! BFS levels, discoverers and predecessor lists come from a real BFS of the generated graph
//! (the discoverer of a vertex is the first edge to reach it in frontier order). The dynamic
//! schedule is the greedy list schedule it tends to when every edge costs the same: each
//! frontier vertex, in order, goes to the thread with the fewest edges handed out so far in
//! the level. Left out: K3 (subgraph extraction, small), the permutation's own swap loop and
//! K4's once-per-run in-degree count (a few passes over N or M, against 2^K4approx BFS), the
//! dynamic schedule's shared counter and contended locks (the model has no cache coherence
//! between cores: docs/model.md, "Not modelled"), and R-MAT's ±10 % noise on a, b, c, d.

use crate::emit::{static_range, Gen, Script, Span, SplitMix64, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{AccessKind, AddressSpace, MapOptions, Op, ThreadSpec, Workload};
use numalab_core::TaskId;
use std::sync::{Arc, Mutex, OnceLock};

pub const NAME: &str = "ssca2";
pub const KEYS: &[&str] = &["log2_vertices", "edgefactor", "k4approx", "sources", "seed"];
pub const DESCRIPTION: &str = "SSCA2 v2.2: R-MAT generation with permuted vertex ids, CSR build under per-vertex locks (K1), weight scan (K2), betweenness centrality by level-synchronous BFS (dynamic schedule, per-vertex locks, weight filter) and backward sweeps (K4) (§4.3). \
keys: log2_vertices=SCALE (20), edgefactor=8, k4approx=8 (2^8 BC sources), sources=sources actually run (2^k4approx), seed=1";

pub const PHASES: &[&str] = &["generate", "k1-build", "k2-max-weight", "k4-bc"];
pub const PHASE_GENERATE: u16 = 0;
pub const PHASE_K1: u16 = 1;
pub const PHASE_K2: u16 = 2;
pub const PHASE_K4: u16 = 3;

/// R-MAT quadrant probabilities (§4.3, E).
pub const RMAT: [f64; 4] = [0.55, 0.1, 0.1, 0.25];
/// v2.2's defs.h: `VERT_T` (vertex ids, and `WEIGHT_T`, which is `VERT_T`) is `int`; `LONG_T`
/// (counts, offsets, `d`, `pListMem`) is `int` too unless built with `-DLARGE_GRAPH`, which its
/// Makefile asks for above SCALE 27 (then `long`): see [`Ssca2::long_bytes`].
pub const VERT: u64 = 4;
pub const DOUBLE: u64 = 8;
/// libgomp's `omp_lock_t` on Linux: one futex word. Taking it (`omp_set_lock`,
/// `omp_test_lock`) is a `lock cmpxchg` and releasing it (`omp_unset_lock`, libgomp's
/// `gomp_mutex_unlock`) an `xchg`: both locked instructions, so both are
/// [`AccessKind::Atomic`] here, and the edge's other references wait for them.
pub const OMP_LOCK: u64 = 4;
/// `plist { VERT_T *list; VERT_T count; LONG_T degree; }`: 16 B with an `int` LONG_T.
pub const PLIST_BYTES: u64 = 16;
/// Work per edge visited in K4 (E).
pub const CYCLES_PER_EDGE: u64 = 6;
const EDGES_PER_UNIT: u64 = 1024;

/// v2.2 skips, in K4, the edges whose weight is divisible by 8 (`(weight & 7) != 0` keeps one).
pub fn k4_keeps(weight: u32) -> bool {
    weight & 7 != 0
}

/// The generated graph in CSR form (out-edges, each with its weight) plus in-degree offsets for
/// predecessor lists.
#[derive(Debug)]
pub struct Graph {
    pub n: u64,
    pub start: Vec<u32>,
    pub end: Vec<u32>,
    pub offsets: Vec<u32>,
    pub targets: Vec<u32>,
    /// Weight of each CSR edge (same index as `targets`), uniform in 1..=n.
    pub weights: Vec<u32>,
    pub in_offsets: Vec<u32>,
    /// R-MAT's id of each (permuted) vertex: where generation's relabelling reads `permV`.
    pub rmat_id: Vec<u32>,
}

impl Graph {
    pub fn rmat(log2_n: u32, edges: u64, seed: u64) -> Graph {
        let n = 1u64 << log2_n;
        let mut r = SplitMix64::new(seed ^ 0x0005_5ca2);
        // genScalData permutes the vertex ids after drawing the edges
        let mut perm: Vec<u32> = (0..n as u32).collect();
        for i in (1..n as usize).rev() {
            perm.swap(i, r.below(i as u64 + 1) as usize);
        }
        let (mut start, mut end, mut weight) = (
            Vec::with_capacity(edges as usize),
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
            start.push(perm[u as usize]);
            end.push(perm[v as usize]);
            // wt = 1 + MaxIntWeight·sprng(), MaxIntWeight = 2^SCALE
            weight.push(1 + r.below(n) as u32);
        }
        let mut rmat_id = vec![0u32; n as usize];
        for (orig, &p) in perm.iter().enumerate() {
            rmat_id[p as usize] = orig as u32;
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
        let mut weights = vec![0u32; edges as usize];
        for ((&u, &v), &wt) in start.iter().zip(&end).zip(&weight) {
            targets[fill[u as usize] as usize] = v;
            weights[fill[u as usize] as usize] = wt;
            fill[u as usize] += 1;
        }
        Graph {
            n,
            start,
            end,
            offsets,
            targets,
            weights,
            in_offsets,
            rmat_id,
        }
    }

    pub fn out(&self, v: u32) -> &[u32] {
        &self.targets[self.offsets[v as usize] as usize..self.offsets[v as usize + 1] as usize]
    }

    /// The out-edges of `v` that K4 follows: weight not divisible by 8, not a self-loop.
    pub fn k4_out(&self, v: u32) -> impl Iterator<Item = u32> + '_ {
        let (lo, hi) = (
            self.offsets[v as usize] as usize,
            self.offsets[v as usize + 1] as usize,
        );
        (lo..hi)
            .filter(move |&j| k4_keeps(self.weights[j]) && self.targets[j] != v)
            .map(move |j| self.targets[j])
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
    /// Thread that expands each entry of `order` under the dynamic schedule (empty until
    /// [`Bfs::schedule_dynamic`]).
    pub owner: Vec<u16>,
}

impl Bfs {
    /// The BFS over the edges K4 follows ([`Graph::k4_out`]).
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
                for w in g.k4_out(v) {
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
                    owner: Vec::new(),
                };
            }
            levels.push(order.len());
        }
    }

    /// `schedule(dynamic)` (chunk 1) over each level's frontier among `threads` threads: every
    /// vertex in frontier order goes to the thread that has been handed the fewest edges of the
    /// level so far (the lowest-numbered of equals), each vertex costing 1 + its out-degree, as
    /// threads that run every edge at the same pace take them.
    pub fn schedule_dynamic(&mut self, g: &Graph, threads: usize) {
        use std::cmp::Reverse;
        use std::collections::BinaryHeap;
        let nt = threads.max(1);
        self.owner = vec![0; self.order.len()];
        for l in 0..self.levels.len() - 1 {
            let mut free: BinaryHeap<Reverse<(u64, u16)>> =
                (0..nt as u16).map(|t| Reverse((0, t))).collect();
            for i in self.levels[l]..self.levels[l + 1] {
                let Reverse((busy, t)) = free.pop().expect("one entry per thread");
                self.owner[i] = t;
                free.push(Reverse((busy + 1 + g.out(self.order[i]).len() as u64, t)));
            }
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

/// Addresses of the arrays, and the size of `LONG_T`.
#[derive(Copy, Clone, Debug)]
struct Maps {
    start: u64,
    end: u64,
    wtup: u64,
    perm_v: u64,
    k1_lock: u64,
    pos: u64,
    degree: u64,
    num_edges: u64,
    end_v: u64,
    weight: u64,
    lock: u64,
    plist: u64,
    d: u64,
    sigma: u64,
    delta: u64,
    bc: u64,
    s: u64,
    p: u64,
    local: u64,
    local_bytes: u64,
    long: u64,
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

    /// Bytes of `LONG_T`: `int` up to SCALE 27, `long` above (v2.2's `-DLARGE_GRAPH`).
    pub fn long_bytes(&self) -> u64 {
        if self.log2_vertices > 27 {
            8
        } else {
            4
        }
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

    /// BFS of source `i` with its dynamic schedule, shared by the threads (they run it
    /// together, level by level).
    pub fn bfs(&self, i: u64) -> Arc<Bfs> {
        let mut cache = self.bfs.lock().expect("no thread panics while holding it");
        if let Some((_, b)) = cache.iter().find(|(k, _)| *k == i) {
            return b.clone();
        }
        let g = self.graph();
        let mut b = Bfs::run(&g, self.source(i));
        b.schedule_dynamic(&g, self.threads);
        let b = Arc::new(b);
        cache.push((i, b.clone()));
        if cache.len() > 3 {
            cache.remove(0);
        }
        b
    }

    fn program(&self, m: Maps, t: usize) -> Script {
        let (n, e) = (self.vertices(), self.edges());
        let nt = self.threads;
        let long = m.long;
        let mut s = Script::new(PHASES);
        let (elo, ehi) = static_range(e, nt, t);
        let (vlo, vhi) = static_range(n, nt, t);
        let (edges, verts) = (ehi - elo, vhi - vlo);
        s.phase(PHASE_GENERATE);
        s.streams(
            &[
                Span::elems(m.start, elo, ehi, VERT, AccessKind::Write),
                Span::elems(m.end, elo, ehi, VERT, AccessKind::Write),
            ],
            edges * self.log2_vertices as u64 * 8,
            edges * self.log2_vertices as u64 * 12,
        );
        s.barrier();
        s.streams(
            &[Span::elems(m.perm_v, vlo, vhi, VERT, AccessKind::Write)],
            verts,
            verts,
        );
        s.barrier();
        s.gen(EdgePass::new(self, m, Pass::Relabel, (elo, ehi)));
        s.barrier();
        s.streams(
            &[Span::elems(m.wtup, elo, ehi, VERT, AccessKind::Write)],
            edges * 20,
            edges * 20,
        );
        s.barrier();
        s.phase(PHASE_K1);
        // omp_init_lock over schedule(static, N/T) (T divides N: libgomp's plain blocks)
        s.streams(
            &[Span::elems(
                m.k1_lock,
                vlo,
                vhi,
                OMP_LOCK,
                AccessKind::Write,
            )],
            verts,
            verts,
        );
        s.barrier();
        s.gen(EdgePass::new(self, m, Pass::Count, (elo, ehi)));
        s.barrier();
        // prefix_sums(degree, numEdges): own block's sum, then (after the block totals) the
        // block's offsets
        s.streams(
            &[Span::elems(m.degree, vlo, vhi, long, AccessKind::Read)],
            verts,
            verts,
        );
        s.barrier();
        s.streams(
            &[
                Span::elems(m.degree, vlo, vhi, long, AccessKind::Read),
                Span::elems(m.num_edges, vlo, vhi, long, AccessKind::Write),
            ],
            verts,
            verts,
        );
        s.barrier();
        s.gen(EdgePass::new(self, m, Pass::Scatter, (elo, ehi)));
        s.barrier();
        s.phase(PHASE_K2);
        s.streams(
            &[Span::elems(m.weight, elo, ehi, VERT, AccessKind::Read)],
            edges,
            edges,
        );
        s.barrier();
        s.phase(PHASE_K4);
        // once: the locks initialised, the predecessor lists' headers set, d = −1 (static loops)
        s.streams(
            &[
                Span::elems(m.lock, vlo, vhi, OMP_LOCK, AccessKind::Write),
                Span::elems(m.plist, vlo, vhi, PLIST_BYTES, AccessKind::Write),
                Span::elems(m.d, vlo, vhi, long, AccessKind::Write),
            ],
            verts,
            verts,
        );
        s.barrier();
        for src in 0..self.sources {
            s.gen(K4 {
                w: self.clone(),
                m,
                t,
                src,
                bfs: None,
                step: K4Step::Start,
                level: 0,
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
        let long = self.long_bytes();
        // myS: 2N/T LONG_T entries per thread, as v2.2 allocates it; it doubles a stack that
        // fills up, which a level almost never does (its share of a frontier is far below
        // 2N/T), so here a fuller one wraps around instead
        let local_bytes = ((2 * n / self.threads as u64).max(1) * long).div_ceil(4096) * 4096;
        let mut map = |name: &str, bytes: u64| mem.mmap(task, name, bytes, o());
        let m = Maps {
            start: map("ssca2.start", e * VERT),
            end: map("ssca2.end", e * VERT),
            wtup: map("ssca2.wtuple", e * VERT),
            perm_v: map("ssca2.permV", n * VERT),
            k1_lock: map("ssca2.k1.vLock", n * OMP_LOCK),
            pos: map("ssca2.pos", e * long),
            degree: map("ssca2.degree", n * long),
            num_edges: map("ssca2.numEdges", (n + 1) * long),
            end_v: map("ssca2.endV", e * VERT),
            weight: map("ssca2.weight", e * VERT),
            lock: map("ssca2.vLock", n * OMP_LOCK),
            plist: map("ssca2.P", n * PLIST_BYTES),
            d: map("ssca2.d", n * long),
            sigma: map("ssca2.sigma", n * DOUBLE),
            delta: map("ssca2.delta", n * DOUBLE),
            bc: map("ssca2.BC", n * DOUBLE),
            s: map("ssca2.S", n * VERT),
            p: map("ssca2.pListMem", e * long),
            local: map("ssca2.myS", self.threads as u64 * local_bytes),
            local_bytes,
            long,
        };
        (0..self.threads)
            .map(|t| ThreadSpec {
                task,
                program: Box::new(self.program(m, t)),
            })
            .collect()
    }
}

/// The loops of v2.2 over a thread's static block of tuples.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Pass {
    /// Generation's relabelling: `src[i] = permV[src[i]]; dest[i] = permV[dest[i]]`.
    Relabel,
    /// K1's count: `pos[i] = degree[u]++` under u's lock.
    Count,
    /// K1's scatter: each edge to `endV` / `weight` at `numEdges[u] + pos[i]`.
    Scatter,
}

/// One [`Pass`] over a thread's block of tuples, [`EDGES_PER_UNIT`] at a time.
struct EdgePass {
    w: Ssca2,
    m: Maps,
    pass: Pass,
    pos: u64,
    hi: u64,
    /// Scatter: per vertex, slots taken so far by this thread's earlier edges (lazily sized).
    seen: Vec<u32>,
}

impl EdgePass {
    fn new(w: &Ssca2, m: Maps, pass: Pass, (pos, hi): (u64, u64)) -> EdgePass {
        EdgePass {
            w: w.clone(),
            m,
            pass,
            pos,
            hi,
            seen: Vec::new(),
        }
    }

    fn relabel(&self, g: &Graph, lo: u64, hi: u64, out: &mut Vec<Op>) {
        let m = self.m;
        for a in [m.start, m.end] {
            Span::elems(a, lo, hi, VERT, AccessKind::ReadModifyWrite).push_run(out);
        }
        for i in lo..hi {
            for v in [g.start[i as usize], g.end[i as usize]] {
                out.push(Op::Access {
                    addr: m.perm_v + g.rmat_id[v as usize] as u64 * VERT,
                    kind: AccessKind::Read,
                });
            }
        }
    }

    fn count(&self, g: &Graph, lo: u64, hi: u64, out: &mut Vec<Op>) {
        let (m, long) = (self.m, self.m.long);
        Span::elems(m.start, lo, hi, VERT, AccessKind::Read).push_run(out);
        Span::elems(m.pos, lo, hi, long, AccessKind::Write).push_run(out);
        for i in lo..hi {
            let u = g.start[i as usize] as u64;
            let lock = m.k1_lock + u * OMP_LOCK;
            for (addr, kind) in [
                (lock, AccessKind::Atomic),
                (m.degree + u * long, AccessKind::ReadModifyWrite),
                (lock, AccessKind::Atomic),
            ] {
                out.push(Op::Access { addr, kind });
            }
        }
    }

    fn scatter(&mut self, g: &Graph, lo: u64, hi: u64, out: &mut Vec<Op>) {
        let (m, long) = (self.m, self.m.long);
        for a in [m.start, m.end, m.wtup] {
            Span::elems(a, lo, hi, VERT, AccessKind::Read).push_run(out);
        }
        Span::elems(m.pos, lo, hi, long, AccessKind::Read).push_run(out);
        for i in lo..hi {
            let u = g.start[i as usize] as u64;
            let slot = g.offsets[u as usize] as u64 + self.seen[u as usize] as u64;
            self.seen[u as usize] += 1;
            for (addr, kind) in [
                (m.num_edges + u * long, AccessKind::Read),
                (m.end_v + slot * VERT, AccessKind::Write),
                (m.weight + slot * VERT, AccessKind::Write),
            ] {
                out.push(Op::Access { addr, kind });
            }
        }
    }
}

impl Gen for EdgePass {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let g = self.w.graph();
        if self.pass == Pass::Scatter && self.seen.is_empty() {
            // slots before this block: edges of each vertex in earlier blocks (index order)
            self.seen = vec![0; g.n as usize];
            for &u in &g.start[..self.pos as usize] {
                self.seen[u as usize] += 1;
            }
        }
        while self.pos < self.hi {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let (lo, hi) = (self.pos, (self.pos + EDGES_PER_UNIT).min(self.hi));
            match self.pass {
                Pass::Relabel => self.relabel(&g, lo, hi, out),
                Pass::Count => self.count(&g, lo, hi, out),
                Pass::Scatter => self.scatter(&g, lo, hi, out),
            }
            out.push(compute((hi - lo) * 4, (hi - lo) * 8));
            self.pos = hi;
        }
        Status::Done
    }
}

/// Where a source's K4 is.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum K4Step {
    /// Thread 0 seeds the source (`sigma`, `d`, `S[0]`), a barrier.
    Start,
    /// BFS level `level` forward.
    Forward,
    /// Backward sweep, `level` counting levels done from the deepest.
    Backward,
    /// The reached vertices reset.
    Reset,
    Done,
}

/// One BC source: BFS levels forward, the backward sweep, the reset.
struct K4 {
    w: Ssca2,
    m: Maps,
    t: usize,
    src: u64,
    bfs: Option<Arc<Bfs>>,
    step: K4Step,
    level: usize,
    /// (frontier index, edge index) inside the current level.
    cursor: Option<(usize, usize)>,
    /// Vertices this thread discovered in the current level.
    mine: std::collections::HashSet<u32>,
    /// Predecessor-list entries this thread wrote per vertex (for their slots).
    pred_seen: std::collections::HashMap<u32, u32>,
}

impl Gen for K4 {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let bfs = self.bfs.get_or_insert_with(|| self.w.bfs(self.src)).clone();
        let nlev = bfs.levels.len() - 1;
        loop {
            match self.step {
                K4Step::Start => {
                    if self.t == 0 {
                        let s = bfs.order[0] as u64;
                        let m = self.m;
                        for (addr, kind) in [
                            (m.sigma + s * DOUBLE, AccessKind::Write),
                            (m.d + s * m.long, AccessKind::Write),
                            (m.s, AccessKind::Write),
                        ] {
                            out.push(Op::Access { addr, kind });
                        }
                    }
                    out.push(Op::Barrier);
                    self.step = K4Step::Forward;
                    self.level = 0;
                }
                K4Step::Forward => {
                    if self.forward_level(&bfs, out) == Status::More {
                        return Status::More;
                    }
                    self.level += 1;
                    if self.level == nlev {
                        // the backward sweep runs from the deepest level up to level 1
                        self.step = if nlev > 1 {
                            K4Step::Backward
                        } else {
                            K4Step::Reset
                        };
                        self.level = 0;
                    }
                }
                K4Step::Backward => {
                    if self.backward_level(&bfs, nlev - 1 - self.level, out) == Status::More {
                        return Status::More;
                    }
                    self.level += 1;
                    if self.level == nlev - 1 {
                        self.step = K4Step::Reset;
                    }
                }
                K4Step::Reset => {
                    self.reset(&bfs, out);
                    self.step = K4Step::Done;
                }
                K4Step::Done => return Status::Done,
            }
        }
    }
}

impl K4 {
    /// Level `self.level` forward: this thread's vertices of the frontier (dynamic schedule),
    /// then the merge of the local stacks into S. `More` when the chunk is full.
    fn forward_level(&mut self, bfs: &Bfs, out: &mut Vec<Op>) -> Status {
        let g = self.w.graph();
        let m = self.m;
        let (long, me) = (m.long, self.t as u16);
        let l = self.level;
        let (flo, fhi) = (bfs.levels[l], bfs.levels[l + 1]);
        let (mut i, mut k) = self.cursor.unwrap_or_else(|| {
            out.push(Op::Barrier); // `omp barrier` before the `omp for`
            (flo, 0)
        });
        let mut queued = self.mine.len() as u64;
        let mut scanned = 0u64;
        while i < fhi {
            if bfs.owner[i] != me {
                i += 1;
                continue;
            }
            if out.len() >= CHUNK_OPS {
                self.cursor = Some((i, k));
                out.push(compute(scanned * CYCLES_PER_EDGE, scanned * 12));
                return Status::More;
            }
            let v = bfs.order[i];
            let vu = v as u64;
            if k == 0 {
                // v = S[vert]; its CSR row bounds; d[v] and sigma[v], read for every edge
                // (cached after the first)
                for (addr, kind) in [
                    (m.s + i as u64 * VERT, AccessKind::Read),
                    (m.num_edges + vu * long, AccessKind::Read),
                    (m.num_edges + (vu + 1) * long, AccessKind::Read),
                    (m.d + vu * long, AccessKind::Read),
                    (m.sigma + vu * DOUBLE, AccessKind::Read),
                ] {
                    out.push(Op::Access { addr, kind });
                }
            }
            let off = g.offsets[v as usize] as u64;
            let deg = g.out(v).len();
            let end = (k + EDGES_PER_UNIT as usize).min(deg);
            for a in [m.weight, m.end_v] {
                Span::elems(a, off + k as u64, off + end as u64, VERT, AccessKind::Read)
                    .push_run(out);
            }
            for j in off as usize + k..off as usize + end {
                let w = g.targets[j];
                if !k4_keeps(g.weights[j]) || w == v {
                    continue;
                }
                let wu = w as u64;
                let dw = bfs.dist[w as usize];
                let next = dw == bfs.dist[v as usize] + 1;
                let first =
                    next && bfs.preds[w as usize].first() == Some(&v) && self.mine.insert(w);
                let lock = m.lock + wu * OMP_LOCK;
                out.push(Op::Access {
                    addr: lock,
                    kind: AccessKind::Atomic,
                });
                out.push(Op::Access {
                    addr: m.d + wu * long,
                    kind: if first {
                        AccessKind::ReadModifyWrite
                    } else {
                        AccessKind::Read
                    },
                });
                if first {
                    out.push(Op::Access {
                        addr: m.local
                            + self.t as u64 * m.local_bytes
                            + (queued * long) % m.local_bytes,
                        kind: AccessKind::Write,
                    });
                    queued += 1;
                }
                if next {
                    // sigma[w] += sigma[v]; P[w].list[P[w].count++] = v: the slots are
                    // handed out in arrival order, so this thread's c-th entry for w is
                    // placed at c·T + t (mod the list's length)
                    let c = self.pred_seen.entry(w).or_insert(0);
                    let len = bfs.preds[w as usize].len() as u64;
                    let slot = (*c as u64 * self.w.threads as u64 + self.t as u64) % len;
                    *c += 1;
                    for (addr, kind) in [
                        (m.sigma + wu * DOUBLE, AccessKind::ReadModifyWrite),
                        (m.plist + wu * PLIST_BYTES, AccessKind::ReadModifyWrite),
                        (
                            m.p + (g.in_offsets[w as usize] as u64 + slot) * long,
                            AccessKind::Write,
                        ),
                    ] {
                        out.push(Op::Access { addr, kind });
                    }
                }
                out.push(Op::Access {
                    addr: lock,
                    kind: AccessKind::Atomic,
                });
            }
            scanned += (end - k) as u64;
            if end < deg {
                k = end;
            } else {
                k = 0;
                i += 1;
            }
        }
        out.push(compute(scanned * CYCLES_PER_EDGE, scanned * 12));
        // the `omp for`'s barrier; psCount written, a barrier; thread 0's prefix, a barrier;
        // then the local stack copied into S at this thread's offset, a barrier
        out.extend([Op::Barrier, Op::Barrier, Op::Barrier]);
        if l + 1 < bfs.levels.len() - 1 {
            let next_lo = bfs.levels[l + 1];
            let counts = self.discovered(bfs, l);
            let before: u64 = counts[..self.t].iter().sum();
            let mine = counts[self.t];
            let local = m.local + self.t as u64 * m.local_bytes;
            let stacked = mine.min(m.local_bytes / long);
            Span::elems(local, 0, stacked, long, AccessKind::Read).push_run(out);
            let at = next_lo as u64 + before;
            Span::elems(m.s, at, at + mine, VERT, AccessKind::Write).push_run(out);
        }
        out.push(Op::Barrier);
        self.cursor = None;
        self.mine.clear();
        self.pred_seen.clear();
        Status::Done
    }

    /// Backward over level `l` (static split): delta of every predecessor, then BC.
    fn backward_level(&mut self, bfs: &Bfs, l: usize, out: &mut Vec<Op>) -> Status {
        let m = self.m;
        let long = m.long;
        let (flo, fhi) = (bfs.levels[l], bfs.levels[l + 1]);
        let (a, b) = static_range((fhi - flo) as u64, self.w.threads, self.t);
        let (lo, hi) = (flo + a as usize, flo + b as usize);
        let (mut i, mut k) = self.cursor.unwrap_or_else(|| {
            Span::elems(m.s, lo as u64, hi as u64, VERT, AccessKind::Read).push_run(out);
            (lo, 0)
        });
        let g = self.w.graph();
        let mut visited = 0u64;
        while i < hi {
            if out.len() >= CHUNK_OPS {
                self.cursor = Some((i, k));
                out.push(compute(visited * CYCLES_PER_EDGE, visited * 12));
                return Status::More;
            }
            let w = bfs.order[i];
            let wu = w as u64;
            if k == 0 {
                for (addr, kind) in [
                    (m.plist + wu * PLIST_BYTES, AccessKind::Read),
                    (m.sigma + wu * DOUBLE, AccessKind::Read),
                    (m.delta + wu * DOUBLE, AccessKind::Read),
                ] {
                    out.push(Op::Access { addr, kind });
                }
            }
            let preds = &bfs.preds[w as usize];
            let end = (k + EDGES_PER_UNIT as usize).min(preds.len());
            let base = g.in_offsets[w as usize] as u64;
            Span::elems(
                m.p,
                base + k as u64,
                base + end as u64,
                long,
                AccessKind::Read,
            )
            .push_run(out);
            for &p in &preds[k..end] {
                let pu = p as u64;
                let lock = m.lock + pu * OMP_LOCK;
                for (addr, kind) in [
                    (lock, AccessKind::Atomic),
                    (m.delta + pu * DOUBLE, AccessKind::ReadModifyWrite),
                    (m.sigma + pu * DOUBLE, AccessKind::Read),
                    (lock, AccessKind::Atomic),
                ] {
                    out.push(Op::Access { addr, kind });
                }
            }
            visited += (end - k) as u64;
            if end < preds.len() {
                k = end;
            } else {
                out.push(Op::Access {
                    addr: m.bc + wu * DOUBLE,
                    kind: AccessKind::ReadModifyWrite,
                });
                k = 0;
                i += 1;
            }
        }
        out.push(compute(visited * CYCLES_PER_EDGE, visited * 12));
        // the `omp for`'s barrier, then the explicit one
        out.extend([Op::Barrier, Op::Barrier]);
        self.cursor = None;
        Status::Done
    }

    /// The reset of the reached vertices: `schedule(static, N/T)` over the BFS order, so
    /// thread t takes chunks t, t + T, ... of N/T entries (only the first threads have work
    /// when the source reached fewer than N vertices).
    fn reset(&mut self, bfs: &Bfs, out: &mut Vec<Op>) {
        let m = self.m;
        let nt = self.w.threads as u64;
        let count = bfs.order.len() as u64;
        let chunk = (self.w.vertices() / nt).max(1);
        let mut c = self.t as u64;
        while c * chunk < count {
            let (lo, hi) = (c * chunk, ((c + 1) * chunk).min(count));
            Span::elems(m.s, lo, hi, VERT, AccessKind::Read).push_run(out);
            for &w in &bfs.order[lo as usize..hi as usize] {
                let wu = w as u64;
                for addr in [
                    m.d + wu * m.long,
                    m.delta + wu * DOUBLE,
                    m.plist + wu * PLIST_BYTES,
                ] {
                    out.push(Op::Access {
                        addr,
                        kind: AccessKind::Write,
                    });
                }
            }
            out.push(compute((hi - lo) * 4, (hi - lo) * 8));
            c += nt;
        }
        out.extend([Op::Barrier, Op::Barrier]);
    }

    /// Per thread: vertices of level l+1 first reached from the vertices it expanded in level l.
    fn discovered(&self, bfs: &Bfs, l: usize) -> Vec<u64> {
        let mut counts = vec![0u64; self.w.threads];
        let (nlo, nhi) = (bfs.levels[l + 1], bfs.levels[l + 2]);
        for &w in &bfs.order[nlo..nhi] {
            let p = bfs.preds[w as usize][0];
            counts[bfs.owner[bfs.pos[p as usize] as usize] as usize] += 1;
        }
        counts
    }
}
