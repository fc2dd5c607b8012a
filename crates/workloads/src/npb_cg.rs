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
    AccessKind, AddressSpace, GatherTable, MapOptions, Op, ThreadProgram, ThreadSpec, Workload,
    LINE_BYTES,
};
use numalab_core::TaskId;
use std::sync::{Arc, OnceLock};

pub const NAME: &str = "npb-cg";
pub const KEYS: &[&str] = &["class", "niter", "scale"];
pub const DESCRIPTION: &str =
    "NAS CG (NPB 3.4 OpenMP) with NPB's exact sparse matrix, static row split (§3.1). \
keys: class=S|W|A|B|C|D (A), niter=outer iterations (the class's: S/W/A 15, B/C 75, D 100), \
scale=factor in (0,1] shrinking na and thus nz (1)";

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
}

impl CgMatrix {
    /// Run `makea` (`sprnvc`, `vecset`, `sparse`) for an n × n matrix with `nonzer` random
    /// entries per generated vector. Values (which need `shift`) are kept only if asked for,
    /// since the emitter needs the structure alone.
    pub fn generate(n: usize, nonzer: usize, shift: f64, with_values: bool) -> CgMatrix {
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
        // count the triples of each row: vector i adds |v_i| entries to each row it touches
        let mut rowstr_pre = vec![0u64; n + 1];
        for i in 0..n {
            let v = &vec_cols[vec_start[i] as usize..vec_start[i + 1] as usize];
            for &j in v {
                rowstr_pre[j as usize + 1] += v.len() as u64;
            }
        }
        for j in 0..n {
            rowstr_pre[j + 1] += rowstr_pre[j];
        }
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
        CgMatrix {
            n,
            nonzer,
            rowstr,
            colidx: cols.into(),
            values: with_values.then_some(values),
            rowstr_pre,
            vec_start,
            vec_cols,
            rng_calls,
        }
    }

    /// Nonzeros of the assembled matrix.
    pub fn nonzeros(&self) -> u64 {
        self.rowstr[self.n]
    }

    /// NPB's allocation bound `nz = na·(nonzer+1)²`.
    pub fn nz_alloc(&self) -> u64 {
        self.n as u64 * ((self.nonzer + 1) * (self.nonzer + 1)) as u64
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
        Self::new(class, niter, scale, threads)
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
            threads,
            matrix: OnceLock::new(),
        })
    }

    /// The matrix structure (generated on first use, then shared).
    pub fn matrix(&self) -> Arc<CgMatrix> {
        self.matrix
            .get_or_init(|| {
                Arc::new(CgMatrix::generate(
                    self.na,
                    self.class.nonzer,
                    self.class.shift,
                    false,
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
        let task = TaskId(0);
        let mut map = |name: &str, bytes: u64| mem.mmap(task, name, bytes, MapOptions::default());
        let colidx = map("cg.colidx", nz * 4);
        let rowstr = map("cg.rowstr", (n + 1) * rowstr_bytes);
        let iv = map("cg.iv", (nz + n) * 4);
        let arow = map("cg.arow", n * 4);
        let acol = map("cg.acol", naz * 4);
        let v = map("cg.v", nz * 8);
        let aelt = map("cg.aelt", naz * 8);
        let a = map("cg.a", nz * 8);
        let vec = (n + 2) * 8;
        let x = map("cg.x", vec);
        let z = map("cg.z", vec);
        let p = map("cg.p", vec);
        let q = map("cg.q", vec);
        let r = map("cg.r", vec);
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
    let mut s = Script::new(PHASES);
    s.phase(PHASE_SETUP);

    // makea: replay the generator up to ilow, then generate and store rows ilow..ihigh
    let replay = m.rng_calls[ilow as usize] * RANDLC_CYCLES;
    s.compute(replay, replay);
    let own = (m.rng_calls[ihigh as usize] - m.rng_calls[ilow as usize]) * RANDLC_CYCLES;
    s.streams(
        &[
            Span::elems(l.arow, ilow, ihigh, 4, W),
            Span::elems(l.acol, ilow * nz1, ihigh * nz1, 4, W),
            Span::elems(l.aelt, ilow * nz1, ihigh * nz1, 8, W),
        ],
        own,
        own,
    );
    s.barrier();

    // sparse: zero rowstr(ilow+1..ihigh+1) (and rowstr(1) on the master), count the triples of
    // own rows over every vector, prefix sums across threads
    let rs_lo = if t == 0 { 0 } else { ilow + 1 };
    s.streams(&[Span::elems(l.rowstr, rs_lo, ihigh + 1, rb, W)], 0, 0);
    let own_rowstr = |kind| Span::elems(l.rowstr, ilow + 1, ihigh + 1, rb, kind);
    s.streams(
        &[
            Span::elems(l.arow, 0, n, 4, R),
            Span::elems(l.acol, 0, l.naz, 4, R),
            own_rowstr(M),
        ],
        2 * l.naz,
        2 * l.naz,
    );
    s.streams(&[own_rowstr(M)], ihigh - ilow, ihigh - ilow);
    s.barrier();
    if t > 0 {
        s.streams(&[own_rowstr(M)], ihigh - ilow, ihigh - ilow);
    }
    s.barrier();
    // preload: v(k) = 0, iv(k) = 0 over own rows' slots, nzloc(j) = 0 (first touch of the
    // workspace); nzloc lives in iv's tail, iv(nz+1..nz+n)
    let (klo, khi) = (pre[ilow as usize], pre[ihigh as usize]);
    let nzloc = |lo: u64, hi: u64, kind| Span::elems(l.iv, l.nz + lo, l.nz + hi, 4, kind);
    s.streams(
        &[
            Span::elems(l.v, klo, khi, 8, W),
            Span::elems(l.iv, klo, khi, 4, W),
            nzloc(ilow, ihigh, W),
        ],
        khi - klo,
        khi - klo,
    );
    // insert every triple of own rows (reading every generated vector again)
    s.gen(SparseFill::new(m.clone(), l, ilow as usize, ihigh as usize));
    s.barrier();
    // nzloc prefix sums across threads
    s.streams(&[nzloc(ilow, ihigh, M)], ihigh - ilow, ihigh - ilow);
    s.barrier();
    if t > 0 {
        s.streams(&[nzloc(ilow, ihigh, M)], ihigh - ilow, ihigh - ilow);
    }
    s.barrier();
    // omp do over rows: a(k) = v(nza), colidx(k) = iv(nza) — the first touch of a and colidx,
    // row block by row block with the SpMV's split
    let (fk_lo, fk_hi) = (fin[slo as usize], fin[shi as usize]);
    let (pk_lo, pk_hi) = (pre[slo as usize], pre[shi as usize]);
    let copied = fk_hi - fk_lo;
    s.streams(
        &[
            Span::elems(l.rowstr, slo, shi + 1, rb, R),
            nzloc(slo.saturating_sub(1), shi, R),
            Span::elems(l.v, pk_lo, pk_hi, 8, R),
            Span::elems(l.iv, pk_lo, pk_hi, 4, R),
            Span::elems(l.a, fk_lo, fk_hi, 8, W),
            Span::elems(l.colidx, fk_lo, fk_hi, 4, W),
        ],
        copied,
        copied,
    );
    s.barrier();
    // omp do j = 2..nrows+1: rowstr(j) -= nzloc(j-1)
    s.streams(
        &[
            Span::elems(l.rowstr, slo + 1, shi + 1, rb, M),
            nzloc(slo, shi, R),
        ],
        shi - slo,
        shi - slo,
    );
    s.barrier();
    // main program: barrier after makea
    s.barrier();
    // omp do (nowait): colidx(k) = colidx(k) - firstcol + 1
    s.streams(
        &[
            Span::elems(l.rowstr, slo, shi + 1, rb, R),
            Span::elems(l.colidx, fk_lo, fk_hi, 4, M),
        ],
        copied,
        copied,
    );
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
    push_normalise(&mut s, l, slo, shi);
    // omp parallel do: x(i) = 1 for i = 1..na+1
    s.streams(&[dv(l.x, xlo, xhi, W)], xhi - xlo, xhi - xlo);
    s.barrier();
    s
}

/// One `conj_grad` call of thread t.
fn push_conj_grad(s: &mut Script, m: &Arc<CgMatrix>, l: &Layout, t: usize, threads: usize) {
    let n = m.n as u64;
    let (lo, hi) = static_range(n, threads, t);
    let (xlo, xhi) = static_range(n + 1, threads, t);
    let w = (hi - lo) * VECTOR_CYCLES_PER_ELEMENT;
    let wx = (xhi - xlo) * VECTOR_CYCLES_PER_ELEMENT;
    // q = z = 0, r = x, p = r over 1..na+1
    s.streams(
        &[
            dv(l.q, xlo, xhi, W),
            dv(l.z, xlo, xhi, W),
            dv(l.x, xlo, xhi, R),
            dv(l.r, xlo, xhi, W),
            dv(l.p, xlo, xhi, W),
        ],
        wx,
        wx,
    );
    s.barrier();
    // rho = r·r
    s.streams(&[dv(l.r, lo, hi, R)], w, w);
    s.barrier();
    for _ in 0..CG_ITERATIONS {
        s.barrier(); // master saves rho0 and resets d, rho
        s.gen(Spmv::new(m.clone(), l, lo as usize, hi as usize, l.p, l.q));
        s.barrier();
        // d = p·q
        s.streams(&[dv(l.p, lo, hi, R), dv(l.q, lo, hi, R)], w, w);
        s.barrier();
        // z = z + alpha·p; r = r - alpha·q; rho = r·r
        s.streams(
            &[
                dv(l.z, lo, hi, M),
                dv(l.p, lo, hi, R),
                dv(l.r, lo, hi, M),
                dv(l.q, lo, hi, R),
            ],
            2 * w,
            2 * w,
        );
        s.barrier();
        // p = r + beta·p
        s.streams(&[dv(l.r, lo, hi, R), dv(l.p, lo, hi, M)], w, w);
        s.barrier();
    }
    // r = A·z, then ||x - r||
    s.gen(Spmv::new(m.clone(), l, lo as usize, hi as usize, l.z, l.r));
    s.barrier();
    s.streams(&[dv(l.x, lo, hi, R), dv(l.r, lo, hi, R)], w, w);
    s.barrier(); // nowait, then the end of the parallel region
}

/// x·z and z·z, then x = z/‖z‖ (a parallel region of the main program).
fn push_normalise(s: &mut Script, l: &Layout, lo: u64, hi: u64) {
    let w = (hi - lo) * VECTOR_CYCLES_PER_ELEMENT;
    s.streams(&[dv(l.x, lo, hi, R), dv(l.z, lo, hi, R)], w, w);
    s.barrier();
    s.streams(&[dv(l.z, lo, hi, R), dv(l.x, lo, hi, W)], w, w);
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
            push_normalise(&mut s, &self.l, lo, hi);
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
    fn new(m: Arc<CgMatrix>, l: &Layout, row: usize, end: usize, src: u64, dst: u64) -> Spmv {
        let none = u64::MAX;
        Spmv {
            m,
            row,
            end,
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
        while self.row < self.end {
            if out.len() >= CHUNK_OPS {
                return Status::More;
            }
            let j = self.row;
            let (ks, ke) = (m.rowstr[j], m.rowstr[j + 1]);
            let rb = self.rowstr_bytes;
            emit_new_lines(
                out,
                &mut self.last_rs,
                self.rowstr + j as u64 * rb,
                self.rowstr + (j as u64 + 2) * rb,
                R,
            );
            emit_new_lines(out, &mut self.last_a, self.a + ks * 8, self.a + ke * 8, R);
            emit_new_lines(
                out,
                &mut self.last_c,
                self.colidx + ks * 4,
                self.colidx + ke * 4,
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
        SparseFill {
            m,
            ilow,
            ihigh,
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
        while self.i < m.n {
            if out.len() >= CHUNK_OPS {
                flush_compute(out, &mut self.cycles);
                return Status::More;
            }
            let i = self.i;
            let (s, e) = (m.vec_start[i] as usize, m.vec_start[i + 1] as usize);
            let len = (e - s) as u64;
            let col0 = i as u64 * self.nz1;
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
            // The rows this thread fills for the vector PREFETCH_VECTORS_AHEAD later: the
            // binary searches below are chains of dependent loads into colidx, whose rows the
            // host's caches do not hold (most of the emitter's time went waiting on them).
            if let Some(&e2) = m.vec_start.get(i + PREFETCH_VECTORS_AHEAD + 1) {
                let s2 = m.vec_start[i + PREFETCH_VECTORS_AHEAD] as usize;
                for &j in &m.vec_cols[s2..e2 as usize] {
                    let j = j as usize;
                    if j >= self.ilow && j < self.ihigh {
                        prefetch_slice(m.row(j));
                    }
                }
            }
            let vec = &m.vec_cols[s..e];
            for &j in vec {
                let j = j as usize;
                if j < self.ilow || j >= self.ihigh {
                    continue;
                }
                let row = m.row(j);
                let base = m.rowstr_pre[j];
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
