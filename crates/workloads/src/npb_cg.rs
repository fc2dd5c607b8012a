//! NAS CG (NPB 3.4 OpenMP), reference/workloads.md §3.1.
//!
//! The matrix is NPB's, not a look-alike: [`randlc`], `sprnvc`, `vecset` and `sparse` are
//! reproduced so that `rowstr` and `colidx` (after duplicate merging) are exactly those of the
//! benchmark, and the SpMV gathers `p(colidx(k))` from the real `colidx`. The real numerics are
//! kept for verification ([`zeta`] reproduces NPB's verification value for classes S and W).
//!
//! Emission follows the OpenMP code (one `omp parallel` region per phase of the program):
//!
//! * setup (untimed): `makea` — each thread replays the generator over rows 1..ihigh and writes
//!   its rows of arow/acol/aelt (ceil-sized row blocks, as NPB computes `ilow`/`ihigh`);
//!   `sparse` — every thread reads all generated vectors twice (count, then values), zeroes
//!   its rows of the v/iv workspace (first touch of the workspace) and inserts the entries of its
//!   rows; then static `omp do` loops copy v/iv into a/colidx (so **a and colidx are
//!   first-touched by the thread that multiplies those rows**), fix `rowstr`, shift colidx and
//!   set x = 1, q = z = r = p = 0 (each vector first-touched in static index blocks);
//! * one untimed `conj_grad` plus normalisation, x reset to 1;
//! * `niter` timed iterations: `conj_grad` (init loop, ρ = r·r, 25 × {SpMV q = A·p; p·q;
//!   z += αp, r −= αq, ρ = r·r; p = r + βp}, then r = A·z and ‖x − r‖), x·z and z·z, x = z/‖z‖.
//!
//! Every `omp do` is static over rows or vector indices (libgomp split) and ends with a barrier
//! unless NPB says `nowait`; the master section at the top of each CG iteration adds one more,
//! so a CG iteration has 5 barriers.

use crate::emit::{line_of, static_range, Gen, Script, Span, Status, CHUNK_OPS};
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{
    map_static, AccessKind, AddressSpace, GatherTable, MapOptions, Op, StaticArray, ThreadProgram,
    ThreadSpec, Workload, LINE_BYTES,
};
use numalab_core::TaskId;
use std::sync::{Arc, OnceLock};

pub const NAME: &str = "npb-cg";
pub const KEYS: &[&str] = &["class", "niter", "scale", "rows"];
pub const DESCRIPTION: &str =
    "NAS CG (NPB 3.4 OpenMP) with NPB's exact sparse matrix, static row split (§3.1). \
keys: class=S|W|A|B|C|D (A), niter=outer iterations (the class's: S/W/A 15, B/C 75, D 100), \
scale=factor in (0,1] shrinking na and thus nz and the vectors (1), \
rows=fraction in (0,1] of each thread's rows simulated, in blocks of 64, with the vectors at full length (1)";

/// Phase names: `setup` (makea, sparse, vector init), `untimed-cg` (NPB's untimed warm-up
/// iteration), `timed` (the benchmark's timed loop).
pub const PHASES: &[&str] = &["setup", "untimed-cg", "timed"];
pub const PHASE_SETUP: u16 = 0;
pub const PHASE_UNTIMED: u16 = 1;
pub const PHASE_TIMED: u16 = 2;

/// `rcond` of every class.
pub const RCOND: f64 = 0.1;
/// Inner CG iterations per `conj_grad` call (`cgitmax`).
pub const CG_ITERATIONS: usize = 25;

/// Compute per nonzero of the SpMV, in cycles (2 flops, §3.1: ≈ 2 cycles, E).
pub const SPMV_CYCLES_PER_NONZERO: u64 = 2;
/// Compute per element of a vector loop (dot product or axpy), in cycles (E).
pub const VECTOR_CYCLES_PER_ELEMENT: u64 = 1;
/// One `randlc` call: a chain of about a dozen dependent floating-point operations (E).
pub const RANDLC_CYCLES: u64 = 40;
/// Per entry inserted by `sparse`: NPB scans the row's filled slots for the insertion point and
/// shifts the tail, about one cycle per filled slot (E); we charge the merged row length.
pub const SPARSE_CYCLES_PER_SLOT: u64 = 1;

/// One NPB CG class (reference/workloads.md §3.1 table; verification values from NPB 3.4).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CgClass {
    pub class: char,
    pub na: usize,
    pub nonzer: usize,
    pub niter: usize,
    pub shift: f64,
    /// NPB's verification value of zeta after `niter` iterations.
    pub zeta_verify: f64,
}

pub const CLASSES: [CgClass; 6] = [
    CgClass {
        class: 'S',
        na: 1_400,
        nonzer: 7,
        niter: 15,
        shift: 10.0,
        zeta_verify: 8.597_177_507_864_8,
    },
    CgClass {
        class: 'W',
        na: 7_000,
        nonzer: 8,
        niter: 15,
        shift: 12.0,
        zeta_verify: 10.362_595_087_124,
    },
    CgClass {
        class: 'A',
        na: 14_000,
        nonzer: 11,
        niter: 15,
        shift: 20.0,
        zeta_verify: 17.130_235_054_029,
    },
    CgClass {
        class: 'B',
        na: 75_000,
        nonzer: 13,
        niter: 75,
        shift: 60.0,
        zeta_verify: 22.712_745_482_631,
    },
    CgClass {
        class: 'C',
        na: 150_000,
        nonzer: 15,
        niter: 75,
        shift: 110.0,
        zeta_verify: 28.973_605_592_845,
    },
    CgClass {
        class: 'D',
        na: 1_500_000,
        nonzer: 21,
        niter: 100,
        shift: 500.0,
        zeta_verify: 52.514_532_105_794,
    },
];

/// The class called `c` (case-insensitive).
pub fn class(c: char) -> Option<&'static CgClass> {
    CLASSES.iter().find(|k| k.class == c.to_ascii_uppercase())
}

/// NPB's `randlc`: x ← a·x mod 2^46, returning x·2^-46, with the reference's splitting of both
/// operands into 23-bit halves held in doubles. Every intermediate is an integer below 2^53,
/// so the double arithmetic is exact and the sequence is bit-identical to NPB's.
pub fn randlc(x: &mut f64, a: f64) -> f64 {
    const R23: f64 = 1.0 / 8_388_608.0; // 0.5^23
    const R46: f64 = R23 * R23;
    const T23: f64 = 8_388_608.0; // 2^23
    const T46: f64 = T23 * T23;
    // Fortran int() truncates towards zero
    let t1 = R23 * a;
    let a1 = t1.trunc();
    let a2 = a - T23 * a1;
    let t1 = R23 * *x;
    let x1 = t1.trunc();
    let x2 = *x - T23 * x1;
    let t1 = a1 * x2 + a2 * x1;
    let t2 = (R23 * t1).trunc();
    let z = t1 - T23 * t2;
    let t3 = T23 * z + a2 * x2;
    let t4 = (R46 * t3).trunc();
    *x = t3 - T46 * t4;
    R46 * *x
}

/// Rows in one block of a [`RowSample`]: 64 rows = 512 bytes of each vector, 8 lines.
pub const ROW_BLOCK: u64 = 64;

/// Which rows a shrunk CG simulates (`rows=F`): the blocks of [`ROW_BLOCK`] rows whose index
/// is a multiple of `stride` (= round(1/F)), with the vectors kept at their full length. The
/// matrix keeps NPB's rows (their columns, so the gathers' spread over p, are exact); rows
/// left out have no entries, and every loop over rows or vector elements visits the kept
/// blocks only, so the work shrinks by `stride` while the vectors' relation to the caches,
/// their page placement and the iteration structure stay the full class's.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RowSample {
    pub stride: u64,
}

impl RowSample {
    pub const ALL: RowSample = RowSample { stride: 1 };

    pub fn keeps(self, row: u64) -> bool {
        (row / ROW_BLOCK).is_multiple_of(self.stride)
    }

    /// The kept sub-ranges of rows `[lo, hi)`, in order (all of it for `ALL`).
    pub fn ranges(self, lo: u64, hi: u64) -> Vec<(u64, u64)> {
        if lo >= hi {
            return Vec::new();
        }
        if self.stride == 1 {
            return vec![(lo, hi)];
        }
        let mut out = Vec::new();
        let mut b = (lo / ROW_BLOCK).div_ceil(self.stride) * self.stride;
        if (lo / ROW_BLOCK).is_multiple_of(self.stride) {
            b = lo / ROW_BLOCK;
        }
        while b * ROW_BLOCK < hi {
            let (s, e) = ((b * ROW_BLOCK).max(lo), ((b + 1) * ROW_BLOCK).min(hi));
            if s < e {
                out.push((s, e));
            }
            b += self.stride;
        }
        out
    }

    /// Kept rows in `[lo, hi)`.
    pub fn count(self, lo: u64, hi: u64) -> u64 {
        self.ranges(lo, hi).iter().map(|(a, b)| b - a).sum()
    }
}

/// Seed and multiplier of CG's generator (`tran`, `amult`).
pub const TRAN_SEED: f64 = 314_159_265.0;
pub const AMULT: f64 = 1_220_703_125.0; // 5^13

/// NPB's matrix, with what the emitter needs to replay `makea`/`sparse`.
///
/// Indices are 0-based (NPB's row j, column c, entry k are j−1, c−1, k−1 here).
#[derive(Clone, Debug)]
pub struct CgMatrix {
    pub n: usize,
    pub nonzer: usize,
    /// Final row pointers (n + 1), as NPB's `rowstr` after duplicate removal.
    pub rowstr: Vec<u64>,
    /// Final column indices, sorted within each row, as NPB's `colidx` (shared: it is also
    /// the gather table of every thread's SpMV).
    pub colidx: Arc<[u32]>,
    /// Matrix values `a`, only when generated for verification.
    pub values: Option<Vec<f64>>,
    /// Row pointers of `sparse`'s workspace before duplicates are removed (n + 1).
    pub rowstr_pre: Vec<u64>,
    /// The generated sparse vectors (NPB's arow/acol): vector i is
    /// `vec_cols[vec_start[i]..vec_start[i + 1]]`.
    pub vec_start: Vec<u32>,
    pub vec_cols: Vec<u32>,
    /// `randlc` calls made before row i's vector was complete (n + 1 prefix counts): the cost
    /// of replaying the generator up to a thread's first row.
    pub rng_calls: Vec<u64>,
    /// The rows that have entries (all but for a `rows=` shrink).
    pub sample: RowSample,
    /// With a row sample: for each row, the generated vectors with an entry in it (CSR over
    /// `row_vectors_start`, empty for rows left out), so that a thread's `sparse` finds the
    /// vectors that fill its kept rows without walking all of them. Empty without a sample.
    pub row_vectors_start: Vec<u64>,
    pub row_vectors: Vec<u32>,
    /// With a row sample: where each row starts in NPB's arrays of the *full* matrix, in
    /// the pre-merge workspace v/iv (exact: the full pre-merge counts) and in a/colidx (the
    /// pre-merge position scaled by the kept rows' merged / pre-merge ratio). A thread's rows
    /// then sit in the address range, and the huge pages, that they occupy in the full
    /// program rather than packed together. Empty without a sample ([`pre_pos`] and
    /// [`fin_pos`] are `rowstr_pre` and `rowstr` then).
    ///
    /// [`pre_pos`]: CgMatrix::pre_pos
    /// [`fin_pos`]: CgMatrix::fin_pos
    pub full_pre: Vec<u64>,
    pub full_fin: Vec<u64>,
}

impl CgMatrix {
    /// Run `makea` (`sprnvc`, `vecset`, `sparse`) for an n × n matrix with `nonzer` random
    /// entries per generated vector. Values (which need `shift`) are kept only if asked for,
    /// since the emitter needs the structure alone.
    pub fn generate(n: usize, nonzer: usize, shift: f64, with_values: bool) -> CgMatrix {
        Self::generate_sampled(n, nonzer, shift, with_values, RowSample::ALL)
    }

    /// As [`generate`](Self::generate), but `sparse` assembles only the rows `sample` keeps
    /// (the others stay empty); every generated vector is kept.
    pub fn generate_sampled(
        n: usize,
        nonzer: usize,
        shift: f64,
        with_values: bool,
        sample: RowSample,
    ) -> CgMatrix {
        assert!(n > nonzer + 1, "n = {n} is too small for nonzer = {nonzer}");
        let nz1 = nonzer + 1;
        assert!(
            (n as u64) * (nz1 as u64) < u32::MAX as u64,
            "too many generated entries"
        );

        // --- makea: one sparse vector per outer row -------------------------------------
        let mut tran = TRAN_SEED;
        randlc(&mut tran, AMULT); // the `zeta = randlc(tran, amult)` call before makea
        let mut nn1 = 1usize; // smallest power of two not less than n (NPB's loop doubles first)
        loop {
            nn1 *= 2;
            if nn1 >= n {
                break;
            }
        }
        let nn1f = nn1 as f64;
        let mut vec_start = Vec::with_capacity(n + 1);
        vec_start.push(0u32);
        let mut vec_cols: Vec<u32> = Vec::with_capacity(n * nz1);
        let mut vec_vals: Vec<f64> = Vec::with_capacity(if with_values { n * nz1 } else { 0 });
        let mut rng_calls = Vec::with_capacity(n + 1);
        rng_calls.push(0u64);
        let mut calls = 0u64;
        let mut ivc: Vec<u32> = Vec::with_capacity(nz1);
        let mut vc: Vec<f64> = Vec::with_capacity(nz1);
        for iouter in 0..n {
            // sprnvc: nonzer distinct positions, each with a random value
            ivc.clear();
            vc.clear();
            while ivc.len() < nonzer {
                let vecelt = randlc(&mut tran, AMULT);
                let vecloc = randlc(&mut tran, AMULT);
                calls += 2;
                // icnvrt: int(nn1 * vecloc), 1-based after + 1; rejected if beyond n
                let i = (nn1f * vecloc) as usize;
                if i >= n || ivc.contains(&(i as u32)) {
                    continue;
                }
                ivc.push(i as u32);
                vc.push(vecelt);
            }
            // vecset: the diagonal element gets 0.5, appended if absent
            let me = iouter as u32;
            let mut set = false;
            for (c, v) in ivc.iter().zip(vc.iter_mut()) {
                if *c == me {
                    *v = 0.5;
                    set = true;
                }
            }
            if !set {
                ivc.push(me);
                vc.push(0.5);
            }
            vec_cols.extend_from_slice(&ivc);
            if with_values {
                vec_vals.extend_from_slice(&vc);
            }
            vec_start.push(vec_cols.len() as u32);
            rng_calls.push(calls);
        }

        // --- sparse: the outer products of the vectors, duplicates summed ---------------
        // count the triples of each row: vector i adds |v_i| entries to each row it touches.
        // One pass over the vectors for every row; a row sample keeps the counts of its rows
        // for the matrix and the full prefix sums too (where rows start, for the addresses).
        let mut counts = vec![0u64; n + 1];
        for i in 0..n {
            let v = &vec_cols[vec_start[i] as usize..vec_start[i + 1] as usize];
            for &j in v {
                counts[j as usize + 1] += v.len() as u64;
            }
        }
        let prefix = |mut c: Vec<u64>| {
            for j in 0..n {
                c[j + 1] += c[j];
            }
            c
        };
        let (rowstr_pre, full_pre) = if sample == RowSample::ALL {
            (prefix(counts), Vec::new())
        } else {
            let kept = (0..=n)
                .map(|k| match k {
                    0 => 0,
                    k if sample.keeps(k as u64 - 1) => counts[k],
                    _ => 0,
                })
                .collect();
            (prefix(kept), prefix(counts))
        };
        let nza_pre = rowstr_pre[n] as usize;
        assert!(
            nza_pre as u64 <= (n * nz1 * nz1) as u64,
            "space for matrix elements exceeded in sparse"
        );

        // place the triples row by row, in NPB's order (vector i ascending, then nzrow)
        let mut cols = vec![0u32; nza_pre];
        let mut vals = vec![0f64; if with_values { nza_pre } else { 0 }];
        let mut cursor: Vec<u64> = rowstr_pre[..n].to_vec();
        let ratio = RCOND.powf(1.0 / n as f64);
        let mut size = 1.0f64;
        for i in 0..n {
            let (s, e) = (vec_start[i] as usize, vec_start[i + 1] as usize);
            let len = e - s;
            for nza in s..e {
                let j = vec_cols[nza] as usize;
                if !sample.keeps(j as u64) {
                    continue;
                }
                let c = cursor[j] as usize;
                cols[c..c + len].copy_from_slice(&vec_cols[s..e]);
                if with_values {
                    let scale = size * vec_vals[nza];
                    for (m, nzrow) in (s..e).enumerate() {
                        let jcol = vec_cols[nzrow] as usize;
                        let mut va = vec_vals[nzrow] * scale;
                        if jcol == j && j == i {
                            va = va + RCOND - shift;
                        }
                        vals[c + m] = va;
                    }
                }
                cursor[j] += len as u64;
            }
            size *= ratio;
        }
        drop(cursor);

        // sort each row by column and merge duplicates; NPB's sorted insertion sums a
        // duplicate's contributions in the order of i, starting from 0
        let mut rowstr = vec![0u64; n + 1];
        let mut values = Vec::with_capacity(if with_values { nza_pre } else { 0 });
        let mut out = 0usize;
        let mut scratch: Vec<(u32, u32)> = Vec::new();
        for j in 0..n {
            let (s, e) = (rowstr_pre[j] as usize, rowstr_pre[j + 1] as usize);
            rowstr[j] = out as u64;
            if with_values {
                scratch.clear();
                scratch.extend((s..e).map(|k| (cols[k], (k - s) as u32)));
                scratch.sort_unstable(); // keys are unique: same as a stable sort by column
                let mut g = 0;
                while g < scratch.len() {
                    let col = scratch[g].0;
                    let mut acc = 0.0f64;
                    while g < scratch.len() && scratch[g].0 == col {
                        acc += vals[s + scratch[g].1 as usize];
                        g += 1;
                    }
                    cols[out] = col; // out <= s + groups so far: the segment was copied
                    values.push(acc);
                    out += 1;
                }
            } else {
                cols[s..e].sort_unstable();
                let mut last = u32::MAX;
                for k in s..e {
                    let c = cols[k];
                    if c != last {
                        cols[out] = c; // out <= k: compaction never overwrites unread entries
                        out += 1;
                        last = c;
                    }
                }
            }
        }
        rowstr[n] = out as u64;
        cols.truncate(out);
        let full_fin = if sample == RowSample::ALL {
            Vec::new()
        } else {
            let ratio = rowstr[n] as f64 / rowstr_pre[n].max(1) as f64;
            full_pre
                .iter()
                .map(|&p| (p as f64 * ratio).round() as u64)
                .collect()
        };
        let (row_vectors_start, row_vectors) = if sample == RowSample::ALL {
            (Vec::new(), Vec::new())
        } else {
            let mut start = vec![0u64; n + 1];
            for &j in &vec_cols {
                if sample.keeps(j as u64) {
                    start[j as usize + 1] += 1;
                }
            }
            for j in 0..n {
                start[j + 1] += start[j];
            }
            let mut at = start[..n].to_vec();
            let mut list = vec![0u32; start[n] as usize];
            for i in 0..n {
                for &j in &vec_cols[vec_start[i] as usize..vec_start[i + 1] as usize] {
                    if sample.keeps(j as u64) {
                        list[at[j as usize] as usize] = i as u32;
                        at[j as usize] += 1;
                    }
                }
            }
            (start, list)
        };
        CgMatrix {
            n,
            nonzer,
            rowstr,
            colidx: cols.into(),
            values: with_values.then_some(values),
            rowstr_pre,
            row_vectors_start,
            row_vectors,
            full_pre,
            full_fin,
            vec_start,
            vec_cols,
            rng_calls,
            sample,
        }
    }

    /// Nonzeros of the assembled matrix.
    pub fn nonzeros(&self) -> u64 {
        self.rowstr[self.n]
    }

    /// NPB's allocation bound `nz = na·(nonzer+1)²` (a row sample maps the full arrays too:
    /// its rows sit where the full program's do).
    pub fn nz_alloc(&self) -> u64 {
        self.n as u64 * ((self.nonzer + 1) * (self.nonzer + 1)) as u64
    }

    /// Index in NPB's v/iv workspace of row j's first pre-merge slot.
    pub fn pre_pos(&self, j: usize) -> u64 {
        if self.full_pre.is_empty() {
            self.rowstr_pre[j]
        } else {
            self.full_pre[j]
        }
    }

    /// Index in NPB's a/colidx of row j's first entry.
    pub fn fin_pos(&self, j: usize) -> u64 {
        if self.full_fin.is_empty() {
            self.rowstr[j]
        } else {
            self.full_fin[j]
        }
    }

    /// Size of arow/acol/aelt's column dimension: `naz = na·(nonzer+1)`.
    pub fn naz(&self) -> u64 {
        self.n as u64 * (self.nonzer + 1) as u64
    }

    /// Columns of row j.
    pub fn row(&self, j: usize) -> &[u32] {
        &self.colidx[self.rowstr[j] as usize..self.rowstr[j + 1] as usize]
    }
}

/// Run NPB CG's numerics on `m` (which must carry values) and return zeta after `niter` timed
/// iterations, exactly as the benchmark's main program computes it (one untimed `conj_grad`,
/// x reset to 1, then `niter` × [conj_grad; zeta = shift + 1/(x·z); x = z/‖z‖]).
pub fn zeta(m: &CgMatrix, shift: f64, niter: usize) -> f64 {
    let a = m
        .values
        .as_ref()
        .expect("zeta needs a matrix generated with values");
    let n = m.n;
    let mut v = CgVectors {
        x: vec![1.0; n + 2],
        z: vec![0.0; n + 2],
        p: vec![0.0; n + 2],
        q: vec![0.0; n + 2],
        r: vec![0.0; n + 2],
    };
    // untimed iteration
    conj_grad(m, a, &mut v);
    normalise(&mut v, n);
    v.x[..=n].fill(1.0);
    let mut zeta = 0.0;
    for _ in 0..niter {
        conj_grad(m, a, &mut v);
        let nt1 = normalise(&mut v, n);
        zeta = shift + 1.0 / nt1;
    }
    zeta
}

/// zeta for `class` after its own `niter`, and its relative error against NPB's value.
pub fn verify(class: &CgClass) -> (f64, f64) {
    let m = CgMatrix::generate(class.na, class.nonzer, class.shift, true);
    let z = zeta(&m, class.shift, class.niter);
    (z, ((z - class.zeta_verify) / class.zeta_verify).abs())
}

struct CgVectors {
    x: Vec<f64>,
    z: Vec<f64>,
    p: Vec<f64>,
    q: Vec<f64>,
    r: Vec<f64>,
}

/// x·z and z·z, then x = z/‖z‖; returns x·z (computed before x changes).
fn normalise(v: &mut CgVectors, n: usize) -> f64 {
    let mut nt1 = 0.0;
    let mut nt2 = 0.0;
    for j in 0..n {
        nt1 += v.x[j] * v.z[j];
        nt2 += v.z[j] * v.z[j];
    }
    let nt3 = 1.0 / nt2.sqrt();
    for j in 0..n {
        v.x[j] = nt3 * v.z[j];
    }
    nt1
}

fn spmv(m: &CgMatrix, a: &[f64], src: &[f64], dst: &mut [f64]) {
    for (j, d) in dst[..m.n].iter_mut().enumerate() {
        let mut suml = 0.0;
        for k in m.rowstr[j] as usize..m.rowstr[j + 1] as usize {
            suml += a[k] * src[m.colidx[k] as usize];
        }
        *d = suml;
    }
}

fn conj_grad(m: &CgMatrix, a: &[f64], v: &mut CgVectors) -> f64 {
    let n = m.n;
    for j in 0..=n {
        v.q[j] = 0.0;
        v.z[j] = 0.0;
        v.r[j] = v.x[j];
        v.p[j] = v.r[j];
    }
    let mut rho: f64 = v.r[..n].iter().map(|r| r * r).sum();
    for _ in 0..CG_ITERATIONS {
        let rho0 = rho;
        spmv(m, a, &v.p, &mut v.q);
        let mut d = 0.0;
        for j in 0..n {
            d += v.p[j] * v.q[j];
        }
        let alpha = rho0 / d;
        rho = 0.0;
        for j in 0..n {
            v.z[j] += alpha * v.p[j];
            v.r[j] -= alpha * v.q[j];
            rho += v.r[j] * v.r[j];
        }
        let beta = rho / rho0;
        for j in 0..n {
            v.p[j] = v.r[j] + beta * v.p[j];
        }
    }
    spmv(m, a, &v.z, &mut v.r);
    let mut sum = 0.0;
    for j in 0..n {
        let d = v.x[j] - v.r[j];
        sum += d * d;
    }
    sum.sqrt()
}

// ---------------------------------------------------------------------------------------------
// The workload
// ---------------------------------------------------------------------------------------------

/// The `npb-cg` workload; see the module documentation.
#[derive(Debug)]
pub struct NpbCg {
    pub class: CgClass,
    /// Rows after scaling: `round(class.na · scale)`.
    pub na: usize,
    pub niter: usize,
    pub scale: f64,
    /// The `rows=` fraction and the sample it gives.
    pub rows: f64,
    pub sample: RowSample,
    pub threads: usize,
    matrix: OnceLock<Arc<CgMatrix>>,
}

impl NpbCg {
    /// Default class: A (a 24 MB matrix, larger than one node's LLC on most presets, and fast
    /// to simulate); B and C are the seed studies' sizes, usually with `niter=` shortened.
    pub const DEFAULT_CLASS: char = 'A';

    pub fn from_params(p: &Params, threads: usize) -> Result<NpbCg, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "CG needs at least one thread".into(),
            });
        }
        let names: Vec<String> = CLASSES.iter().map(|c| c.class.to_string()).collect();
        let names: Vec<&str> = names.iter().map(|s| s.as_str()).collect();
        let default = CLASSES
            .iter()
            .position(|c| c.class == Self::DEFAULT_CLASS)
            .unwrap();
        let class = CLASSES[p.choice("class", &names, default)?];
        let niter = p.uint_in("niter", class.niter as u64, 0, 100_000)? as usize;
        let scale = p.float_in("scale", 1.0, 0.0, 1.0)?;
        let rows = p.float_in("rows", 1.0, 0.0, 1.0)?;
        Self::new(class, niter, scale, threads)?.with_rows(rows)
    }

    /// Simulate `rows` of each thread's rows (a [`RowSample`] of stride round(1/rows)).
    pub fn with_rows(mut self, rows: f64) -> Result<NpbCg, WorkloadError> {
        let n = self.na as u64;
        // a stride past the last block keeps block 0 alone, as any larger one would (and
        // `rows=1e-300` must not overflow: found by fuzz/workload_spec)
        let stride = (1.0 / rows).round().clamp(1.0, (n / ROW_BLOCK + 1) as f64) as u64;
        let sample = RowSample { stride };
        let starved = (0..self.threads).find(|&t| {
            let (lo, hi) = static_range(n, self.threads, t);
            sample.count(lo, hi) == 0
        });
        if let Some(t) = starved {
            return Err(WorkloadError::BadValue {
                workload: NAME,
                key: "rows",
                value: rows.to_string(),
                expected: format!(
                    "a fraction leaving every thread rows to simulate (thread {t} of {} gets none of its {} rows at 1 block of {ROW_BLOCK} in {stride}); try rows={}",
                    self.threads,
                    n / self.threads as u64,
                    (2.0 * ROW_BLOCK as f64 * self.threads as f64 / n as f64).min(1.0)
                ),
            });
        }
        self.rows = rows;
        self.sample = sample;
        Ok(self)
    }

    pub fn new(
        class: CgClass,
        niter: usize,
        scale: f64,
        threads: usize,
    ) -> Result<NpbCg, WorkloadError> {
        let na = (class.na as f64 * scale).round() as usize;
        let min_na = 8 * (class.nonzer + 1);
        if na < min_na {
            return Err(WorkloadError::BadValue {
                workload: NAME,
                key: "scale",
                value: scale.to_string(),
                expected: format!(
                    "a factor leaving at least {min_na} rows for class {} (na = {})",
                    class.class, class.na
                ),
            });
        }
        Ok(NpbCg {
            class,
            na,
            niter,
            scale,
            rows: 1.0,
            sample: RowSample::ALL,
            threads,
            matrix: OnceLock::new(),
        })
    }

    /// The matrix structure (generated on first use, then shared).
    pub fn matrix(&self) -> Arc<CgMatrix> {
        self.matrix
            .get_or_init(|| {
                Arc::new(CgMatrix::generate_sampled(
                    self.na,
                    self.class.nonzer,
                    self.class.shift,
                    false,
                    self.sample,
                ))
            })
            .clone()
    }

    /// Bytes of NPB's `rowstr` elements: `integer(kz)` with kz = 8 from na ≥ 9 000 000 (class E
    /// up, NPB 3.4 setparams), else 4.
    pub fn rowstr_bytes(&self) -> u64 {
        if self.na >= 9_000_000 {
            8
        } else {
            4
        }
    }
}

impl Workload for NpbCg {
    fn name(&self) -> String {
        let mut s = format!("{NAME}:class={},niter={}", self.class.class, self.niter);
        if self.scale < 1.0 {
            s.push_str(&format!(",scale={}", self.scale));
        }
        if self.sample != RowSample::ALL {
            s.push_str(&format!(",rows={}", self.rows));
        }
        s
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let m = self.matrix();
        let l = Arc::new(Layout::map(mem, &m, self.rowstr_bytes()));
        (0..self.threads)
            .map(|t| {
                let setup = setup_script(&m, &l, t, self.threads);
                let program = CgProgram {
                    current: setup,
                    m: m.clone(),
                    l: l.clone(),
                    t,
                    threads: self.threads,
                    iterations_left: self.niter,
                    timed_started: false,
                };
                ThreadSpec {
                    task: TaskId(0),
                    program: Box::new(program),
                }
            })
            .collect()
    }
}

/// Addresses of NPB's arrays, mapped in `alloc_space`'s order, one mapping each.
#[derive(Clone, Debug)]
struct Layout {
    colidx: u64,
    rowstr: u64,
    iv: u64,
    arow: u64,
    acol: u64,
    v: u64,
    aelt: u64,
    a: u64,
    x: u64,
    z: u64,
    p: u64,
    q: u64,
    r: u64,
    /// NPB's `nz` (allocation bound) and `naz`.
    nz: u64,
    naz: u64,
    rowstr_bytes: u64,
}

impl Layout {
    fn map(mem: &mut dyn AddressSpace, m: &CgMatrix, rowstr_bytes: u64) -> Layout {
        let (n, nz, naz) = (m.n as u64, m.nz_alloc(), m.naz());
        // NPB's static arrays, its two COMMON blocks in declaration order in one .bss:
        // main_int_mem (colidx, rowstr, iv, arow, acol), then main_flt_mem (v, aelt, a, x,
        // z, p, q, r). Every array starts on a cache line: the workload emits whole lines,
        // and NPB's packing would move an array by less than one.
        let vec = (n + 2) * 8;
        let arrays = [
            StaticArray::new("cg.colidx", nz * 4, LINE_BYTES),
            StaticArray::new("cg.rowstr", (n + 1) * rowstr_bytes, LINE_BYTES),
            StaticArray::new("cg.iv", (nz + n) * 4, LINE_BYTES),
            StaticArray::new("cg.arow", n * 4, LINE_BYTES),
            StaticArray::new("cg.acol", naz * 4, LINE_BYTES),
            StaticArray::new("cg.v", nz * 8, LINE_BYTES),
            StaticArray::new("cg.aelt", naz * 8, LINE_BYTES),
            StaticArray::new("cg.a", nz * 8, LINE_BYTES),
            StaticArray::new("cg.x", vec, LINE_BYTES),
            StaticArray::new("cg.z", vec, LINE_BYTES),
            StaticArray::new("cg.p", vec, LINE_BYTES),
            StaticArray::new("cg.q", vec, LINE_BYTES),
            StaticArray::new("cg.r", vec, LINE_BYTES),
        ];
        let [colidx, rowstr, iv, arow, acol, v, aelt, a, x, z, p, q, r] =
            map_static(mem, TaskId(0), "cg.bss", &arrays, MapOptions::default());
        Layout {
            colidx,
            rowstr,
            iv,
            arow,
            acol,
            v,
            aelt,
            a,
            x,
            z,
            p,
            q,
            r,
            nz,
            naz,
            rowstr_bytes,
        }
    }
}

/// NPB's own row block for makea/sparse: `work = ⌈n/T⌉`, rows [work·t, min(work·(t+1), n)).
fn ceil_block(n: u64, threads: usize, t: usize) -> (u64, u64) {
    let work = n.div_ceil(threads as u64);
    let lo = (work * t as u64).min(n);
    (lo, (lo + work).min(n))
}

use AccessKind::{Read as R, ReadModifyWrite as M, Write as W};

/// One element of each of NPB's double vectors, elements [lo, hi).
fn dv(base: u64, lo: u64, hi: u64, kind: AccessKind) -> Span {
    Span::elems(base, lo, hi, 8, kind)
}

/// Program of thread t up to the start of the timed loop.
fn setup_script(m: &Arc<CgMatrix>, l: &Layout, t: usize, threads: usize) -> Script {
    let n = m.n as u64;
    let nz1 = (m.nonzer + 1) as u64;
    let rb = l.rowstr_bytes;
    let (ilow, ihigh) = ceil_block(n, threads, t);
    let (slo, shi) = static_range(n, threads, t);
    let (xlo, xhi) = static_range(n + 1, threads, t);
    let pre = &m.rowstr_pre;
    let fin = &m.rowstr;
    let sample = m.sample;
    let kept = |lo: u64, hi: u64| sample.ranges(lo, hi);
    let mut s = Script::new(PHASES);
    s.phase(PHASE_SETUP);

    // makea: replay the generator up to ilow, then generate and store rows ilow..ihigh (with
    // a row sample, a `stride`-th of the replay and of the own rows)
    let replay = m.rng_calls[ilow as usize] * RANDLC_CYCLES / sample.stride;
    s.compute(replay, replay);
    for (a, b) in kept(ilow, ihigh) {
        let own = (m.rng_calls[b as usize] - m.rng_calls[a as usize]) * RANDLC_CYCLES;
        s.streams(
            &[
                Span::elems(l.arow, a, b, 4, W),
                Span::elems(l.acol, a * nz1, b * nz1, 4, W),
                Span::elems(l.aelt, a * nz1, b * nz1, 8, W),
            ],
            own,
            own,
        );
    }
    s.barrier();

    // sparse: zero rowstr(ilow+1..ihigh+1) (and rowstr(1) on the master), count the triples of
    // own rows over every vector, prefix sums across threads
    let rs_lo = if t == 0 { 0 } else { ilow + 1 };
    for (a, b) in kept(rs_lo, ihigh + 1) {
        s.streams(&[Span::elems(l.rowstr, a, b, rb, W)], 0, 0);
    }
    let own_rows = kept(ilow, ihigh);
    let own_rowstr = |a: u64, b: u64, kind| Span::elems(l.rowstr, a + 1, b + 1, rb, kind);
    // every generated vector is read, with the own rows' counters (a row sample: the vectors
    // of kept blocks, then the kept rows' counters)
    if sample == RowSample::ALL {
        s.streams(
            &[
                Span::elems(l.arow, 0, n, 4, R),
                Span::elems(l.acol, 0, l.naz, 4, R),
                own_rowstr(ilow, ihigh, M),
            ],
            2 * l.naz,
            2 * l.naz,
        );
    } else {
        for (a, b) in kept(0, n) {
            let e = (b - a) * nz1 * 2;
            s.streams(
                &[
                    Span::elems(l.arow, a, b, 4, R),
                    Span::elems(l.acol, a * nz1, b * nz1, 4, R),
                ],
                e,
                e,
            );
        }
        for &(a, b) in &own_rows {
            s.streams(&[own_rowstr(a, b, M)], 0, 0);
        }
    }
    for &(a, b) in &own_rows {
        s.streams(&[own_rowstr(a, b, M)], b - a, b - a);
    }
    s.barrier();
    if t > 0 {
        for &(a, b) in &own_rows {
            s.streams(&[own_rowstr(a, b, M)], b - a, b - a);
        }
    }
    s.barrier();
    // preload: v(k) = 0, iv(k) = 0 over own rows' slots, nzloc(j) = 0 (first touch of the
    // workspace); nzloc lives in iv's tail, iv(nz+1..nz+n)
    let nzloc = |lo: u64, hi: u64, kind| Span::elems(l.iv, l.nz + lo, l.nz + hi, 4, kind);
    // (a row sample: each kept range's slots at the full matrix's positions)
    for &(a, b) in &own_rows {
        let slots = pre[b as usize] - pre[a as usize];
        let klo = m.pre_pos(a as usize);
        s.streams(
            &[
                Span::elems(l.v, klo, klo + slots, 8, W),
                Span::elems(l.iv, klo, klo + slots, 4, W),
                nzloc(a, b, W),
            ],
            slots,
            slots,
        );
    }
    // insert every triple of own rows (reading every generated vector again)
    s.gen(SparseFill::new(m.clone(), l, ilow as usize, ihigh as usize));
    s.barrier();
    // nzloc prefix sums across threads
    for &(a, b) in &own_rows {
        s.streams(&[nzloc(a, b, M)], b - a, b - a);
    }
    s.barrier();
    if t > 0 {
        for &(a, b) in &own_rows {
            s.streams(&[nzloc(a, b, M)], b - a, b - a);
        }
    }
    s.barrier();
    // omp do over rows: a(k) = v(nza), colidx(k) = iv(nza) — the first touch of a and colidx,
    // row block by row block with the SpMV's split
    let split_rows = kept(slo, shi);
    for &(a, b) in &split_rows {
        let copied = fin[b as usize] - fin[a as usize];
        let slots = pre[b as usize] - pre[a as usize];
        let (fk_lo, pk_lo) = (m.fin_pos(a as usize), m.pre_pos(a as usize));
        s.streams(
            &[
                Span::elems(l.rowstr, a, b + 1, rb, R),
                nzloc(a.saturating_sub(1), b, R),
                Span::elems(l.v, pk_lo, pk_lo + slots, 8, R),
                Span::elems(l.iv, pk_lo, pk_lo + slots, 4, R),
                Span::elems(l.a, fk_lo, fk_lo + copied, 8, W),
                Span::elems(l.colidx, fk_lo, fk_lo + copied, 4, W),
            ],
            copied,
            copied,
        );
    }
    s.barrier();
    // omp do j = 2..nrows+1: rowstr(j) -= nzloc(j-1)
    for &(a, b) in &split_rows {
        s.streams(
            &[Span::elems(l.rowstr, a + 1, b + 1, rb, M), nzloc(a, b, R)],
            b - a,
            b - a,
        );
    }
    s.barrier();
    // main program: barrier after makea
    s.barrier();
    // omp do (nowait): colidx(k) = colidx(k) - firstcol + 1
    for &(a, b) in &split_rows {
        let copied = fin[b as usize] - fin[a as usize];
        let fk_lo = m.fin_pos(a as usize);
        s.streams(
            &[
                Span::elems(l.rowstr, a, b + 1, rb, R),
                Span::elems(l.colidx, fk_lo, fk_lo + copied, 4, M),
            ],
            copied,
            copied,
        );
    }
    // The vectors' first touch keeps its full length with a row sample: their pages land
    // where the full program puts them (the gathers read every column).
    // omp do (nowait): x(i) = 1 for i = 1..na+1
    s.streams(&[dv(l.x, xlo, xhi, W)], xhi - xlo, xhi - xlo);
    // omp do (nowait): q = z = r = p = 0 for j = 1..na
    let w = (shi - slo) * VECTOR_CYCLES_PER_ELEMENT;
    s.streams(
        &[
            dv(l.q, slo, shi, W),
            dv(l.z, slo, shi, W),
            dv(l.r, slo, shi, W),
            dv(l.p, slo, shi, W),
        ],
        w,
        w,
    );
    s.barrier(); // end parallel

    s.phase(PHASE_UNTIMED);
    push_conj_grad(&mut s, m, l, t, threads);
    push_normalise(&mut s, l, sample, slo, shi);
    // omp parallel do: x(i) = 1 for i = 1..na+1
    for (a, b) in kept(xlo, xhi) {
        s.streams(&[dv(l.x, a, b, W)], b - a, b - a);
    }
    s.barrier();
    s
}

/// One `conj_grad` call of thread t.
/// (With a row sample, every loop visits the kept blocks of the thread's range only.)
fn push_conj_grad(s: &mut Script, m: &Arc<CgMatrix>, l: &Layout, t: usize, threads: usize) {
    let n = m.n as u64;
    let (lo, hi) = static_range(n, threads, t);
    let (xlo, xhi) = static_range(n + 1, threads, t);
    let rows = m.sample.ranges(lo, hi);
    let w = |a: u64, b: u64| (b - a) * VECTOR_CYCLES_PER_ELEMENT;
    // q = z = 0, r = x, p = r over 1..na+1
    for (a, b) in m.sample.ranges(xlo, xhi) {
        s.streams(
            &[
                dv(l.q, a, b, W),
                dv(l.z, a, b, W),
                dv(l.x, a, b, R),
                dv(l.r, a, b, W),
                dv(l.p, a, b, W),
            ],
            w(a, b),
            w(a, b),
        );
    }
    s.barrier();
    // rho = r·r
    for &(a, b) in &rows {
        s.streams(&[dv(l.r, a, b, R)], w(a, b), w(a, b));
    }
    s.barrier();
    for _ in 0..CG_ITERATIONS {
        s.barrier(); // master saves rho0 and resets d, rho
        s.gen(Spmv::new(m.clone(), l, rows.clone(), l.p, l.q));
        s.barrier();
        // d = p·q
        for &(a, b) in &rows {
            s.streams(&[dv(l.p, a, b, R), dv(l.q, a, b, R)], w(a, b), w(a, b));
        }
        s.barrier();
        // z = z + alpha·p; r = r - alpha·q; rho = r·r
        for &(a, b) in &rows {
            s.streams(
                &[
                    dv(l.z, a, b, M),
                    dv(l.p, a, b, R),
                    dv(l.r, a, b, M),
                    dv(l.q, a, b, R),
                ],
                2 * w(a, b),
                2 * w(a, b),
            );
        }
        s.barrier();
        // p = r + beta·p
        for &(a, b) in &rows {
            s.streams(&[dv(l.r, a, b, R), dv(l.p, a, b, M)], w(a, b), w(a, b));
        }
        s.barrier();
    }
    // r = A·z, then ||x - r||
    s.gen(Spmv::new(m.clone(), l, rows.clone(), l.z, l.r));
    s.barrier();
    for &(a, b) in &rows {
        s.streams(&[dv(l.x, a, b, R), dv(l.r, a, b, R)], w(a, b), w(a, b));
    }
    s.barrier(); // nowait, then the end of the parallel region
}

/// x·z and z·z, then x = z/‖z‖ (a parallel region of the main program), over the kept
/// blocks of [lo, hi).
fn push_normalise(s: &mut Script, l: &Layout, sample: RowSample, lo: u64, hi: u64) {
    let rows = sample.ranges(lo, hi);
    let w = |a: u64, b: u64| (b - a) * VECTOR_CYCLES_PER_ELEMENT;
    for &(a, b) in &rows {
        s.streams(&[dv(l.x, a, b, R), dv(l.z, a, b, R)], w(a, b), w(a, b));
    }
    s.barrier();
    for &(a, b) in &rows {
        s.streams(&[dv(l.z, a, b, R), dv(l.x, a, b, W)], w(a, b), w(a, b));
    }
    s.barrier();
}

/// The whole program of one thread: the setup script, then one script per timed iteration,
/// built when the previous one is exhausted (so a long run never holds all its steps).
struct CgProgram {
    current: Script,
    m: Arc<CgMatrix>,
    l: Arc<Layout>,
    t: usize,
    threads: usize,
    iterations_left: usize,
    timed_started: bool,
}

impl ThreadProgram for CgProgram {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        loop {
            if self.current.fill(out) {
                return true;
            }
            if self.iterations_left == 0 {
                return false;
            }
            self.iterations_left -= 1;
            let mut s = Script::new(PHASES);
            if !self.timed_started {
                s.phase(PHASE_TIMED);
                self.timed_started = true;
            }
            push_conj_grad(&mut s, &self.m, &self.l, self.t, self.threads);
            let (lo, hi) = static_range(self.m.n as u64, self.threads, self.t);
            push_normalise(&mut s, &self.l, self.m.sample, lo, hi);
            self.current = s;
            if out.len() >= CHUNK_OPS {
                return true;
            }
        }
    }

    fn gather_table(&self) -> Option<GatherTable> {
        Some(GatherTable {
            index: self.m.colidx.clone(),
            elem_shift: 3, // the gathered vectors hold f64
        })
    }

    fn phase_names(&self) -> &'static [&'static str] {
        PHASES
    }
}

/// Lines of `[lo_addr, hi_addr)` not yet emitted by a stream that only moves forward.
#[inline]
fn emit_new_lines(out: &mut Vec<Op>, last: &mut u64, lo_addr: u64, hi_addr: u64, kind: AccessKind) {
    if hi_addr <= lo_addr {
        return;
    }
    let mut first = line_of(lo_addr);
    if *last != u64::MAX && first <= *last {
        first = *last + LINE_BYTES;
    }
    let end = line_of(hi_addr - 1);
    if first > end {
        return;
    }
    let lines = (end - first) / LINE_BYTES + 1;
    if lines == 1 {
        out.push(Op::Access { addr: first, kind });
    } else {
        out.push(Op::Run {
            base: first,
            lines: lines as u32,
            stride_bytes: LINE_BYTES as u16,
            kind,
        });
    }
    *last = end;
}

/// SpMV `dst = A·src` over rows [row, end): per row, the new lines of the a and colidx streams
/// (and of rowstr), one gather of src(colidx(k)) per nonzero, compute, and the write of dst(j)
/// once per line of dst.
struct Spmv {
    m: Arc<CgMatrix>,
    /// The row ranges still to do, last first (popped from the back), and the current one.
    ranges: Vec<(u64, u64)>,
    row: usize,
    end: usize,
    a: u64,
    colidx: u64,
    rowstr: u64,
    rowstr_bytes: u64,
    src: u64,
    dst: u64,
    last_a: u64,
    last_c: u64,
    last_rs: u64,
    last_dst: u64,
}

impl Spmv {
    fn new(m: Arc<CgMatrix>, l: &Layout, mut ranges: Vec<(u64, u64)>, src: u64, dst: u64) -> Spmv {
        let none = u64::MAX;
        ranges.reverse();
        Spmv {
            m,
            ranges,
            row: 0,
            end: 0,
            a: l.a,
            colidx: l.colidx,
            rowstr: l.rowstr,
            rowstr_bytes: l.rowstr_bytes,
            src,
            dst,
            last_a: none,
            last_c: none,
            last_rs: none,
            last_dst: none,
        }
    }
}

impl Gen for Spmv {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let m = &*self.m;
        loop {
            if self.row >= self.end {
                match self.ranges.pop() {
                    Some((a, b)) => (self.row, self.end) = (a as usize, b as usize),
                    None => break,
                }
                continue;
            }
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let j = self.row;
            let (ks, ke) = (m.rowstr[j], m.rowstr[j + 1]);
            // the gathers index the (compact) table; a and colidx are read where the row
            // sits in NPB's arrays (the same place without a row sample)
            let at = m.fin_pos(j);
            let rb = self.rowstr_bytes;
            emit_new_lines(
                out,
                &mut self.last_rs,
                self.rowstr + j as u64 * rb,
                self.rowstr + (j as u64 + 2) * rb,
                R,
            );
            let (as_, ae) = (at, at + (ke - ks));
            emit_new_lines(out, &mut self.last_a, self.a + as_ * 8, self.a + ae * 8, R);
            emit_new_lines(
                out,
                &mut self.last_c,
                self.colidx + as_ * 4,
                self.colidx + ae * 4,
                R,
            );
            // the gathers of src(colidx(k)) read the program's gather table (colidx itself):
            // one op per row, not one per nonzero
            let mut k = ks;
            while k < ke {
                let count = (ke - k).min(u16::MAX as u64);
                out.push(Op::Gather {
                    base: self.src,
                    first: k as u32,
                    count: count as u16,
                    kind: R,
                });
                k += count;
            }
            let cy = (ke - ks) * SPMV_CYCLES_PER_NONZERO;
            if cy > 0 {
                out.push(Op::Compute {
                    cycles: cy as u32,
                    instructions: cy as u32,
                });
            }
            let dl = line_of(self.dst + j as u64 * 8);
            if dl != self.last_dst {
                out.push(Op::Access { addr: dl, kind: W });
                self.last_dst = dl;
            }
            self.row += 1;
        }
        Status::Done
    }
}

/// `sparse`'s value loop for rows [ilow, ihigh): every thread walks all generated vectors
/// (reading arow, acol, aelt) and, for each vector element in its rows, inserts the vector's
/// entries into that row of the v/iv workspace: one read-modify-write of iv and of v per entry,
/// at the slot the entry finally occupies.
struct SparseFill {
    m: Arc<CgMatrix>,
    ilow: usize,
    ihigh: usize,
    /// With a row sample, the vectors to visit in order (those of kept blocks, whose reads
    /// stand for all, and those with an entry in a kept own row); None: all of them.
    order: Option<Vec<u32>>,
    /// Position in `order` (or the vector itself without one).
    i: usize,
    nz1: u64,
    arow: u64,
    acol: u64,
    aelt: u64,
    iv: u64,
    v: u64,
    last_arow: u64,
    last_acol: u64,
    last_aelt: u64,
    cycles: u64,
}

impl SparseFill {
    fn new(m: Arc<CgMatrix>, l: &Layout, ilow: usize, ihigh: usize) -> SparseFill {
        let nz1 = (m.nonzer + 1) as u64;
        let none = u64::MAX;
        let order = (m.sample != RowSample::ALL).then(|| {
            let mut v: Vec<u32> = Vec::new();
            for (a, b) in m.sample.ranges(0, m.n as u64) {
                v.extend(a as u32..b as u32);
            }
            for (a, b) in m.sample.ranges(ilow as u64, ihigh as u64) {
                let (s, e) = (
                    m.row_vectors_start[a as usize],
                    m.row_vectors_start[b as usize],
                );
                v.extend_from_slice(&m.row_vectors[s as usize..e as usize]);
            }
            v.sort_unstable();
            v.dedup();
            v
        });
        SparseFill {
            m,
            ilow,
            ihigh,
            order,
            i: 0,
            nz1,
            arow: l.arow,
            acol: l.acol,
            aelt: l.aelt,
            iv: l.iv,
            v: l.v,
            last_arow: none,
            last_acol: none,
            last_aelt: none,
            cycles: 0,
        }
    }
}

/// How many generated vectors ahead `SparseFill` prefetches the rows it will search.
const PREFETCH_VECTORS_AHEAD: usize = 4;

/// Asks the host to bring `xs` into its caches (one prefetch per 64-byte line); changes
/// nothing.
fn prefetch_slice(xs: &[u32]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        let p = xs.as_ptr().cast::<i8>();
        // from the start of the first line to the end of the slice, one address per line
        let skew = p as usize % 64;
        let end = skew + std::mem::size_of_val(xs);
        for off in (0..end).step_by(64) {
            // SAFETY: SSE is part of the x86_64 baseline; prefetching never faults.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_sub(skew).wrapping_add(off)) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = xs;
}

/// Emit the compute accumulated in `cycles` and reset it.
fn flush_compute(out: &mut Vec<Op>, cycles: &mut u64) {
    if *cycles > 0 {
        let c = (*cycles).min(u32::MAX as u64) as u32;
        out.push(Op::Compute {
            cycles: c,
            instructions: c,
        });
        *cycles = 0;
    }
}

impl Gen for SparseFill {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let m = &*self.m;
        let sample = m.sample;
        let total = self.order.as_ref().map_or(m.n, |o| o.len());
        let vector_at = |order: &Option<Vec<u32>>, pos: usize| -> Option<usize> {
            match order {
                None => (pos < m.n).then_some(pos),
                Some(o) => o.get(pos).map(|&i| i as usize),
            }
        };
        while self.i < total {
            if out.len() >= CHUNK_OPS {
                flush_compute(out, &mut self.cycles);
                return Status::More;
            }
            let i = vector_at(&self.order, self.i).expect("position below total");
            let (s, e) = (m.vec_start[i] as usize, m.vec_start[i + 1] as usize);
            let len = (e - s) as u64;
            let col0 = i as u64 * self.nz1;
            // a row sample reads the vectors of its kept blocks (they stand for all)
            let read = sample.keeps(i as u64);
            if read {
                emit_new_lines(
                    out,
                    &mut self.last_arow,
                    self.arow + i as u64 * 4,
                    self.arow + i as u64 * 4 + 4,
                    R,
                );
                emit_new_lines(
                    out,
                    &mut self.last_acol,
                    self.acol + col0 * 4,
                    self.acol + (col0 + len) * 4,
                    R,
                );
                emit_new_lines(
                    out,
                    &mut self.last_aelt,
                    self.aelt + col0 * 8,
                    self.aelt + (col0 + len) * 8,
                    R,
                );
                self.cycles += 2 * len;
            }
            // The rows this thread fills for the vector PREFETCH_VECTORS_AHEAD later: the
            // binary searches below are chains of dependent loads into colidx, whose rows the
            // host's caches do not hold (most of the emitter's time went waiting on them).
            if let Some(i2) = vector_at(&self.order, self.i + PREFETCH_VECTORS_AHEAD) {
                let (s2, e2) = (m.vec_start[i2] as usize, m.vec_start[i2 + 1] as usize);
                for &j in &m.vec_cols[s2..e2] {
                    let j = j as usize;
                    if j >= self.ilow && j < self.ihigh {
                        prefetch_slice(m.row(j));
                    }
                }
            }
            let vec = &m.vec_cols[s..e];
            for &j in vec {
                let j = j as usize;
                if j < self.ilow || j >= self.ihigh || !sample.keeps(j as u64) {
                    continue;
                }
                let row = m.row(j);
                let base = m.pre_pos(j);
                for &jcol in vec {
                    let rank = row
                        .binary_search(&jcol)
                        .expect("every generated entry is in its row")
                        as u64;
                    out.push(Op::Access {
                        addr: self.iv + (base + rank) * 4,
                        kind: M,
                    });
                    out.push(Op::Access {
                        addr: self.v + (base + rank) * 8,
                        kind: M,
                    });
                }
                self.cycles += len * (2 + row.len() as u64 * SPARSE_CYCLES_PER_SLOT);
            }
            if self.cycles >= 1 << 16 {
                flush_compute(out, &mut self.cycles);
            }
            self.i += 1;
        }
        flush_compute(out, &mut self.cycles);
        Status::Done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn randlc_is_multiplication_mod_2_46() {
        let mut x = TRAN_SEED;
        let mut xi = TRAN_SEED as u64;
        for _ in 0..100_000 {
            let r = randlc(&mut x, AMULT);
            xi = ((xi as u128 * AMULT as u128) % (1u128 << 46)) as u64;
            assert_eq!(x, xi as f64);
            assert_eq!(r, xi as f64 / (1u64 << 46) as f64);
        }
    }

    #[test]
    fn a_row_sample_keeps_one_block_in_stride() {
        let s = RowSample { stride: 4 };
        // blocks 4, 8 and 12 start in [100, 1000); block 0 ends before 100
        assert_eq!(
            s.ranges(100, 1000),
            vec![(256, 320), (512, 576), (768, 832)]
        );
        assert_eq!(s.ranges(0, 70), vec![(0, 64)]);
        assert_eq!(s.ranges(300, 1000)[0], (300, 320), "a kept block cut by lo");
        assert_eq!(s.count(0, 1024), 256);
        assert!(s.keeps(260) && !s.keeps(64));
        assert_eq!(RowSample::ALL.ranges(5, 9), vec![(5, 9)]);
        assert!(RowSample::ALL.ranges(9, 9).is_empty());
    }

    #[test]
    fn a_sampled_matrix_has_npb_rows_exactly_where_it_keeps_them() {
        let c = class('S').unwrap();
        let full = CgMatrix::generate(c.na, c.nonzer, c.shift, false);
        let s = RowSample { stride: 3 };
        let m = CgMatrix::generate_sampled(c.na, c.nonzer, c.shift, false, s);
        for j in 0..c.na {
            if s.keeps(j as u64) {
                assert_eq!(m.row(j), full.row(j), "row {j}");
                assert_eq!(
                    m.pre_pos(j),
                    full.rowstr_pre[j],
                    "workspace position of row {j}"
                );
            } else {
                assert!(m.row(j).is_empty(), "row {j} is left out");
            }
        }
        // the vectors are all there; positions in a/colidx rise with the rows
        assert_eq!(m.vec_cols, full.vec_cols);
        assert!(m.full_fin.windows(2).all(|w| w[0] <= w[1]));
        assert_eq!(m.nz_alloc(), full.nz_alloc());
        // every vector that fills a kept row is listed for that row
        for j in (0..c.na).filter(|&j| s.keeps(j as u64)) {
            let (a, b) = (m.row_vectors_start[j], m.row_vectors_start[j + 1]);
            for &i in &m.row_vectors[a as usize..b as usize] {
                let v = &m.vec_cols
                    [m.vec_start[i as usize] as usize..m.vec_start[i as usize + 1] as usize];
                assert!(v.contains(&(j as u32)));
            }
        }
    }

    #[test]
    fn ceil_blocks_cover_rows() {
        let b: Vec<_> = (0..4).map(|t| ceil_block(10, 4, t)).collect();
        assert_eq!(b, vec![(0, 3), (3, 6), (6, 9), (9, 10)]);
        assert_eq!(ceil_block(3, 4, 3), (3, 3));
    }

    #[test]
    fn new_lines_only_once() {
        let mut out = Vec::new();
        let mut last = u64::MAX;
        emit_new_lines(&mut out, &mut last, 0, 100, R); // lines 0, 64
        emit_new_lines(&mut out, &mut last, 100, 130, R); // line 64 again, then 128
        emit_new_lines(&mut out, &mut last, 130, 140, R); // nothing new
        assert_eq!(
            out,
            vec![
                Op::Run {
                    base: 0,
                    lines: 2,
                    stride_bytes: 64,
                    kind: R
                },
                Op::Access { addr: 128, kind: R }
            ]
        );
    }
}
