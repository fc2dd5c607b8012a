//! NAS UA (NPB 3.4 OpenMP), reference/workloads.md §3.2: unstructured adaptive heat transfer
//! on spectral elements of 5 × 5 × 5 points, refined around a moving heat source.
//!
//! The mesh is a real octree: the cube starts at a uniform level, leaves intersecting a sphere
//! around the source are refined (the parent keeps its index, its 7 other children are
//! appended at nelt+1..), complete groups of 8 siblings far from the source are merged, and
//! `move` renumbers all elements in Morton order by copying every element's data to its new
//! index. The source moves along the cube's diagonal, so the refined region and nelt change
//! over the run. Faces shared by two elements share mortar points (a face between a coarse and
//! a fine element is keyed on the coarse side: one mortar per coarse face, E).
//!
//! Data: [`FIELDS`] element fields of 125 doubles (1000 B) per element, dimensioned for lelt;
//! per-element metadata and mortar index tables; mortar arrays of lmor doubles. Per time step
//! (static split of the current 0..nelt, a barrier after each loop):
//!
//! * convect: element-local work on t, ta1, ta2 plus a mortar exchange (transfb scatter-add,
//!   each point's update between the point's `omp_set_lock` and `omp_unset_lock`, two locked
//!   instructions; transf gather);
//! * laplacian and residual: two element loops (local);
//! * diffusion: `nmxh` = 10 preconditioned CG iterations, each a laplacian per element, a
//!   transfb scatter, a transf gather and two dot products (reductions);
//! * add2; every `fre` = 5 steps, adaptation: marking, refine / coarsen copies, `move` (each
//!   field copied to a temporary by old index, back by new index), and the mortar tables
//!   rebuilt. After each renumbering the same thread gets other elements while the pages stay
//!   where they were first touched: the locality decay §3.2 describes.

use crate::emit::{static_range, Gen, Script, Span, Status, CHUNK_OPS};
use crate::kernel::compute;
use crate::spec::{Params, WorkloadError};
use numalab_core::workload::{
    AccessKind, AddressSpace, MapOptions, Op, StaticArray, ThreadSpec, Workload, LINE_BYTES,
};
use numalab_core::TaskId;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

pub const NAME: &str = "npb-ua";
pub const KEYS: &[&str] = &["class", "niter"];
pub const DESCRIPTION: &str = "NAS UA (NPB 3.4 OpenMP): spectral elements on an adaptive octree around a moving heat source, element loops, mortar gather/scatter, CG diffusion, Morton renumbering every 5 steps (§3.2). \
keys: class=S|W|A|B|C|D (A), niter=time steps (the class's: S 50, W 100, A-C 200, D 250)";

pub const PHASES: &[&str] = &["setup", "convect", "laplacian", "diffusion", "adapt"];
pub const PHASE_SETUP: u16 = 0;
pub const PHASE_CONVECT: u16 = 1;
pub const PHASE_LAPLACIAN: u16 = 2;
pub const PHASE_DIFFUSION: u16 = 3;
pub const PHASE_ADAPT: u16 = 4;

/// Element fields (t, ta1, ta2, trhs, tmult, CG vectors, preconditioner and geometry), E.
pub const FIELDS: usize = 20;
/// One element field: 125 doubles.
pub const ELEM_FIELD_BYTES: u64 = 1000;
/// Per element: coordinates, neighbour table, face flags, tree code, Morton maps (E).
pub const ELEM_META_BYTES: u64 = 256;
/// Mortar index table per element: 6 faces × 25 points (int).
pub const IDMO_BYTES: u64 = 600;
/// Mortar points per face after sharing of edges and vertices (≈ lmor/lelt/3, E).
pub const MORTAR_POINTS_PER_FACE: u64 = 12;
/// Mortar arrays (tmort, rmor, tmmor and CG work, E).
pub const MORTAR_ARRAYS: usize = 6;
/// transfb's updates of one face's mortar points, each between NPB's
/// `omp_set_lock(tlock(ig))` and `omp_unset_lock(tlock(ig))` (transfer.f): a conforming
/// face's 5 × 5 collocation points (lx1 = 5), its 4 corners, 9 interior points and 3 on each
/// of its 4 edges. A nonconforming face (cbc = 3) updates its four quarter mortars, about
/// five times as many; the model gives every face the conforming count (E, a lower bound).
pub const UPDATES_PER_FACE: u64 = 25;
/// One `tlock` entry: libgomp's `omp_lock_t` on Linux is an `int` (config/linux/omp-lock.h),
/// and gfortran's `omp_lock_kind` its size.
pub const OMP_LOCK_BYTES: u64 = 4;
/// Adaptation frequency and CG iterations per diffusion solve (all classes).
pub const FRE: u64 = 5;
pub const NMXH: u64 = 10;
/// Dense 5 × 5 × 5 tensor products per element laplacian (≈ 3·125·5·2 flops, E).
pub const LAPLACIAN_CYCLES: u64 = 2000;
/// Heat-source radius for refinement (coarsening beyond twice it), in cube units (E).
pub const SOURCE_RADIUS: f64 = 0.12;

/// One UA class (§3.2 table).
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct UaClass {
    pub class: char,
    pub lelt: u64,
    pub lmor: u64,
    pub refine_max: u32,
    pub niter: u64,
}

pub const CLASSES: [UaClass; 6] = [
    UaClass {
        class: 'S',
        lelt: 250,
        lmor: 11_600,
        refine_max: 4,
        niter: 50,
    },
    UaClass {
        class: 'W',
        lelt: 700,
        lmor: 26_700,
        refine_max: 5,
        niter: 100,
    },
    UaClass {
        class: 'A',
        lelt: 2_400,
        lmor: 92_700,
        refine_max: 6,
        niter: 200,
    },
    UaClass {
        class: 'B',
        lelt: 8_800,
        lmor: 334_600,
        refine_max: 7,
        niter: 200,
    },
    UaClass {
        class: 'C',
        lelt: 33_500,
        lmor: 1_262_100,
        refine_max: 8,
        niter: 200,
    },
    UaClass {
        class: 'D',
        lelt: 514_400,
        lmor: 19_134_400,
        refine_max: 10,
        niter: 250,
    },
];

/// A leaf of the octree: level and integer coordinates at that level.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cell {
    pub level: u32,
    pub x: u32,
    pub y: u32,
    pub z: u32,
}

impl Cell {
    fn morton(&self, rmax: u32) -> u128 {
        let s = rmax - self.level;
        let (x, y, z) = (
            (self.x as u64) << s,
            (self.y as u64) << s,
            (self.z as u64) << s,
        );
        let mut m = 0u128;
        for b in (0..rmax).rev() {
            m = m << 3 | ((x >> b & 1) << 2 | (y >> b & 1) << 1 | (z >> b & 1)) as u128;
        }
        m
    }

    fn size(&self) -> f64 {
        1.0 / (1u64 << self.level) as f64
    }

    fn near(&self, c: [f64; 3], r: f64) -> bool {
        let h = self.size();
        let lo = [self.x as f64 * h, self.y as f64 * h, self.z as f64 * h];
        let d2: f64 = (0..3)
            .map(|a| {
                let d = (lo[a] - c[a]).max(0.0).max(c[a] - (lo[a] + h));
                d * d
            })
            .sum();
        d2 <= r * r
    }

    fn parent(&self) -> Cell {
        Cell {
            level: self.level - 1,
            x: self.x / 2,
            y: self.y / 2,
            z: self.z / 2,
        }
    }

    fn children(&self) -> [Cell; 8] {
        let mut c = [*self; 8];
        for (i, ch) in c.iter_mut().enumerate() {
            *ch = Cell {
                level: self.level + 1,
                x: self.x * 2 + (i as u32 >> 2 & 1),
                y: self.y * 2 + (i as u32 >> 1 & 1),
                z: self.z * 2 + (i as u32 & 1),
            };
        }
        c
    }
}

/// One mesh (between two adaptations): elements in index order and their mortar faces.
#[derive(Debug, Clone)]
pub struct Mesh {
    pub cells: Vec<Cell>,
    /// Mortar face of each of the 6 faces (u32::MAX on the domain boundary).
    pub faces: Vec<[u32; 6]>,
    pub nfaces: u64,
}

/// One adaptation: which copies it made.
#[derive(Debug, Clone, Default)]
pub struct Adaptation {
    /// (parent index, new child slots) of each refinement.
    pub refined: Vec<(u32, [u32; 7])>,
    /// (kept slot, merged slots) of each coarsening.
    pub coarsened: Vec<(u32, [u32; 7])>,
    /// Pre-move slot of each element of the new mesh (in new index order).
    pub moved_from: Vec<u32>,
}

/// The whole run's meshes: mesh e is used between adaptation e−1 and e.
#[derive(Debug)]
pub struct History {
    pub meshes: Vec<Mesh>,
    pub adaptations: Vec<Adaptation>,
}

fn source_at(step: u64, niter: u64) -> [f64; 3] {
    // along the diagonal, from 0.15 to 0.85 of the cube (E)
    let s = 0.15 + 0.7 * step as f64 / niter.max(1) as f64;
    [s, s, s]
}

fn leaf_at(map: &HashMap<Cell, u32>, p: [f64; 3], rmax: u32) -> Option<u32> {
    if p.iter().any(|&v| !(0.0..1.0).contains(&v)) {
        return None;
    }
    for level in (0..=rmax).rev() {
        let n = (1u64 << level) as f64;
        let c = Cell {
            level,
            x: (p[0] * n) as u32,
            y: (p[1] * n) as u32,
            z: (p[2] * n) as u32,
        };
        if let Some(&i) = map.get(&c) {
            return Some(i);
        }
    }
    None
}

fn mesh_of(cells: Vec<Cell>, rmax: u32) -> Mesh {
    let map: HashMap<Cell, u32> = cells
        .iter()
        .enumerate()
        .map(|(i, c)| (*c, i as u32))
        .collect();
    let mut keys: HashMap<(u32, u32, u32, u32, u32), u32> = HashMap::new();
    let faces = cells
        .iter()
        .map(|c| {
            let h = c.size();
            let mid = [
                (c.x as f64 + 0.5) * h,
                (c.y as f64 + 0.5) * h,
                (c.z as f64 + 0.5) * h,
            ];
            let mut f = [u32::MAX; 6];
            for (side, slot) in f.iter_mut().enumerate() {
                let axis = side / 2;
                let dir = if side % 2 == 0 { -1.0 } else { 1.0 };
                let mut p = mid;
                p[axis] += dir * (h / 2.0 + 1e-9);
                let Some(nb) = leaf_at(&map, p, rmax) else {
                    continue;
                };
                // keyed on the coarser side's face: both elements find the same key
                let coarse = if cells[nb as usize].level < c.level {
                    cells[nb as usize]
                } else {
                    *c
                };
                let s = rmax - coarse.level;
                let coord = [c.x, c.y, c.z][axis];
                let plane = if dir > 0.0 { coord + 1 } else { coord } << (rmax - c.level);
                let co = [coarse.x << s, coarse.y << s, coarse.z << s];
                let (a, b) = match axis {
                    0 => (co[1], co[2]),
                    1 => (co[0], co[2]),
                    _ => (co[0], co[1]),
                };
                let key = (axis as u32, coarse.level, plane, a, b);
                let n = keys.len() as u32;
                *slot = *keys.entry(key).or_insert(n);
            }
            f
        })
        .collect();
    Mesh {
        cells,
        faces,
        nfaces: keys.len() as u64,
    }
}

impl History {
    pub fn run(c: &UaClass, niter: u64) -> History {
        let rmax = c.refine_max;
        // a uniform start at the deepest level whose 8-fold refinement still fits lelt
        let mut base = 0;
        while 8u64.pow(base + 1) * 8 <= c.lelt && base + 1 < rmax {
            base += 1;
        }
        let n = 1u32 << base;
        let mut cells: Vec<Cell> = (0..n)
            .flat_map(|x| {
                (0..n).flat_map(move |y| {
                    (0..n).map(move |z| Cell {
                        level: base,
                        x,
                        y,
                        z,
                    })
                })
            })
            .collect();
        cells.sort_by_key(|c| c.morton(rmax));
        let mut meshes = Vec::new();
        let mut adaptations = Vec::new();
        // step 0: refine around the source until it stops changing
        for _ in 0..rmax {
            let (next, _) = Self::adapt(&cells, source_at(0, niter), c, base);
            if next == cells {
                break;
            }
            cells = next;
        }
        meshes.push(mesh_of(cells.clone(), rmax));
        for step in (FRE..=niter).step_by(FRE as usize) {
            if step == niter {
                break;
            }
            let (next, a) = Self::adapt(&cells, source_at(step, niter), c, base);
            cells = next;
            adaptations.push(a);
            meshes.push(mesh_of(cells.clone(), rmax));
        }
        History {
            meshes,
            adaptations,
        }
    }

    /// Whether a leaf coarser than `x` lies across one of its faces.
    fn coarser_neighbour(
        x: &Cell,
        map: &HashMap<Cell, u32>,
        slots: &[Option<Cell>],
        rmax: u32,
    ) -> bool {
        let h = x.size();
        let mid = [
            (x.x as f64 + 0.5) * h,
            (x.y as f64 + 0.5) * h,
            (x.z as f64 + 0.5) * h,
        ];
        (0..6).any(|side| {
            let mut p = mid;
            p[side / 2] += if side % 2 == 0 { -1.0 } else { 1.0 } * (h / 2.0 + 1e-9);
            leaf_at(map, p, rmax)
                .is_some_and(|n| slots[n as usize].is_some_and(|c| c.level < x.level))
        })
    }

    /// Whether a leaf two or more levels finer than `x` lies across one of its faces.
    fn finer_neighbour(
        x: &Cell,
        map: &HashMap<Cell, u32>,
        slots: &[Option<Cell>],
        rmax: u32,
    ) -> bool {
        let h = x.size();
        let lo = [x.x as f64 * h, x.y as f64 * h, x.z as f64 * h];
        for side in 0..6 {
            let axis = side / 2;
            for u in 0..4 {
                for v in 0..4 {
                    let mut p = [0.0; 3];
                    let (a, b) = ((axis + 1) % 3, (axis + 2) % 3);
                    p[a] = lo[a] + (u as f64 + 0.5) * h / 4.0;
                    p[b] = lo[b] + (v as f64 + 0.5) * h / 4.0;
                    p[axis] = if side % 2 == 0 {
                        lo[axis] - 1e-9
                    } else {
                        lo[axis] + h + 1e-9
                    };
                    if let Some(n) = leaf_at(map, p, rmax) {
                        if slots[n as usize].is_some_and(|c| c.level >= x.level + 2) {
                            return true;
                        }
                    }
                }
            }
        }
        false
    }

    /// One adaptation: refine near the source, coarsen far from it, renumber in Morton order.
    fn adapt(old: &[Cell], src: [f64; 3], c: &UaClass, base: u32) -> (Vec<Cell>, Adaptation) {
        let rmax = c.refine_max;
        let mut slots: Vec<Option<Cell>> = old.iter().map(|&x| Some(x)).collect();
        let mut a = Adaptation::default();
        // coarsen: complete sibling groups far from the source
        let index: HashMap<Cell, usize> = old.iter().enumerate().map(|(i, x)| (*x, i)).collect();
        let mut done = std::collections::HashSet::new();
        let cur: HashMap<Cell, u32> = index.iter().map(|(c, &i)| (*c, i as u32)).collect();
        let cur_slots: Vec<Option<Cell>> = old.iter().map(|&x| Some(x)).collect();
        for x in old {
            if x.level <= base || done.contains(&x.parent()) {
                continue;
            }
            let p = x.parent();
            let kids = p.children();
            let idx: Vec<usize> = kids.iter().filter_map(|k| index.get(k).copied()).collect();
            // the merged parent must keep the 2:1 balance with its neighbours
            if idx.len() == 8
                && !p.near(src, 2.0 * SOURCE_RADIUS)
                && !Self::finer_neighbour(&p, &cur, &cur_slots, rmax)
            {
                done.insert(p);
                let keep = *idx.iter().min().expect("8 siblings");
                let mut merged = [0u32; 7];
                for (m, &i) in merged.iter_mut().zip(idx.iter().filter(|&&i| i != keep)) {
                    *m = i as u32;
                    slots[i] = None;
                }
                slots[keep] = Some(p);
                a.coarsened.push((keep as u32, merged));
            }
        }
        // refine: leaves near the source, while the capacity allows
        // (children are appended after the last slot, so the slot count must fit lelt too)
        let kept: std::collections::HashSet<u32> = a.coarsened.iter().map(|g| g.0).collect();
        for i in 0..old.len() {
            let Some(x) = slots[i] else { continue };
            // 2:1 balance ("repeat until consistent"): refine only where no face neighbour is
            // coarser, so the fine region grows by one level per adaptation
            if x.level < rmax
                && x.near(src, SOURCE_RADIUS)
                && slots.len() as u64 + 7 <= c.lelt
                && !kept.contains(&(i as u32))
                && !Self::coarser_neighbour(&x, &cur, &cur_slots, rmax)
            {
                let kids = x.children();
                slots[i] = Some(kids[0]);
                let mut new = [0u32; 7];
                for (n, k) in new.iter_mut().zip(&kids[1..]) {
                    *n = slots.len() as u32;
                    slots.push(Some(*k));
                }
                a.refined.push((i as u32, new));
            }
        }
        // move: Morton order
        let mut order: Vec<(u128, u32, Cell)> = slots
            .iter()
            .enumerate()
            .filter_map(|(i, x)| x.map(|x| (x.morton(rmax), i as u32, x)))
            .collect();
        order.sort_by_key(|o| o.0);
        a.moved_from = order.iter().map(|o| o.1).collect();
        (order.into_iter().map(|o| o.2).collect(), a)
    }
}

#[derive(Clone, Debug)]
pub struct NpbUa {
    pub class: UaClass,
    pub niter: u64,
    pub threads: usize,
    history: Arc<OnceLock<Arc<History>>>,
}

/// Addresses of the UA arrays.
#[derive(Copy, Clone, Debug)]
struct Maps {
    fields: [u64; FIELDS],
    tmp: u64,
    meta: u64,
    idmo: u64,
    mortar: [u64; MORTAR_ARRAYS],
    locks: u64,
    lmor: u64,
}

impl NpbUa {
    pub fn from_params(p: &Params, threads: usize) -> Result<NpbUa, WorkloadError> {
        if threads == 0 {
            return Err(WorkloadError::Threads {
                workload: NAME,
                threads,
                why: "UA needs at least one thread".into(),
            });
        }
        let names: Vec<String> = CLASSES.iter().map(|c| c.class.to_string()).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let class = CLASSES[p.choice("class", &names, 2)?];
        let niter = p.uint_in("niter", class.niter, 0, 1 << 20)?;
        Ok(NpbUa {
            class,
            niter,
            threads,
            history: Arc::new(OnceLock::new()),
        })
    }

    pub fn history(&self) -> Arc<History> {
        self.history
            .get_or_init(|| Arc::new(History::run(&self.class, self.niter)))
            .clone()
    }
}

impl Workload for NpbUa {
    fn name(&self) -> String {
        format!("{NAME}:class={},niter={}", self.class.class, self.niter)
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let task = TaskId(0);
        let o = MapOptions::default;
        let lelt = self.class.lelt;
        // NPB's static arrays in one .bss (ua.h's COMMON blocks), in the model's order:
        // the element fields, the mortar arrays, the scratch field, the per-element records,
        // the element → mortar table, the locks; each on a cache line (the workload emits
        // whole lines), so huge pages straddle neighbouring arrays.
        let field_names: Vec<String> = (0..FIELDS).map(|i| format!("ua.field{i}")).collect();
        let mortar_names: Vec<String> = (0..MORTAR_ARRAYS)
            .map(|i| format!("ua.mortar{i}"))
            .collect();
        let mut arrays: Vec<StaticArray> = field_names
            .iter()
            .map(|name| StaticArray::new(name, lelt * ELEM_FIELD_BYTES, LINE_BYTES))
            .collect();
        arrays.extend(
            mortar_names
                .iter()
                .map(|name| StaticArray::new(name, self.class.lmor * 8, LINE_BYTES)),
        );
        // tlock(lmor): one lock per mortar point
        let locks_bytes = self.class.lmor * OMP_LOCK_BYTES;
        arrays.extend([
            StaticArray::new("ua.tmp", lelt * ELEM_FIELD_BYTES, LINE_BYTES),
            StaticArray::new("ua.elements", lelt * ELEM_META_BYTES, LINE_BYTES),
            StaticArray::new("ua.idmo", lelt * IDMO_BYTES, LINE_BYTES),
            StaticArray::new("ua.locks", locks_bytes, LINE_BYTES),
        ]);
        let starts = mem.mmap_static(task, "ua.bss", &arrays, o());
        let mut fields = [0u64; FIELDS];
        fields.copy_from_slice(&starts[..FIELDS]);
        let mut mortar = [0u64; MORTAR_ARRAYS];
        mortar.copy_from_slice(&starts[FIELDS..FIELDS + MORTAR_ARRAYS]);
        let [tmp, meta, idmo, locks] = [0, 1, 2, 3].map(|i| starts[FIELDS + MORTAR_ARRAYS + i]);
        let maps = Maps {
            fields,
            tmp,
            meta,
            idmo,
            mortar,
            locks,
            lmor: self.class.lmor,
        };
        (0..self.threads)
            .map(|t| {
                let mut s = Script::new(PHASES);
                s.gen(UaRun {
                    ua: self.clone(),
                    m: maps,
                    t,
                    hist: None,
                    step: 0,
                    stage: 0,
                    item: 0,
                    pending: Vec::new(),
                });
                ThreadSpec {
                    task,
                    program: Box::new(s),
                }
            })
            .collect()
    }
}

/// One element-loop body, applied to each element of the thread's share.
#[derive(Copy, Clone, Debug)]
enum Body {
    /// First touch of everything an element owns.
    Init,
    /// Element-local: read `reads` fields, read-modify-write `rmw` fields.
    Local {
        reads: &'static [usize],
        rmw: &'static [usize],
        cycles: u64,
    },
    /// transfb: scatter-add the element's faces into the mortar array, under locks.
    Scatter(usize),
    /// transf: gather the element's faces from the mortar array into field `to`.
    Gather { mortar: usize, to: usize },
    /// move, pass 1 (old index: field → tmp) or pass 2 (new index: tmp → field).
    Move { field: usize, to_tmp: bool },
    /// Rebuild the element's mortar table and metadata.
    Tables,
}

/// The run of one thread: a queue of loops, expanded element by element.
struct UaRun {
    ua: NpbUa,
    m: Maps,
    t: usize,
    hist: Option<Arc<History>>,
    /// Time step, and the stage within it (an index into the loops of the step).
    step: u64,
    stage: usize,
    /// Next element of the current loop.
    item: u64,
    /// Loops of the current step: (phase, body, element count, mesh index, barrier after).
    pending: Vec<(u16, Body, u64, usize, bool)>,
}

const T: usize = 0;
const TA1: usize = 1;
const TA2: usize = 2;
const TRHS: usize = 3;
const TMULT: usize = 4;
const R: usize = 5;
const P: usize = 6;
const Q: usize = 7;
const Z: usize = 8;

impl UaRun {
    fn span(&self, base: u64, e: u64, bytes: u64, kind: AccessKind, out: &mut Vec<Op>) {
        let sp = Span::covering(base + e * bytes, 0, bytes, kind);
        out.push(Op::Run {
            base: sp.addr,
            lines: sp.lines as u32,
            stride_bytes: 64,
            kind,
        });
    }

    fn face(&self, mortar: usize, f: u32, kind: AccessKind, out: &mut Vec<Op>) {
        let points = self.m.lmor / MORTAR_POINTS_PER_FACE;
        let f = (f as u64) % points.max(1);
        self.span(
            self.m.mortar[mortar],
            f,
            MORTAR_POINTS_PER_FACE * 8,
            kind,
            out,
        );
    }

    /// transfb's updates of face `f`'s points in mortar array `mortar`: for each of the
    /// [`UPDATES_PER_FACE`], the point's lock taken (`lock cmpxchg`), `tmor(ig)` updated,
    /// the lock released (`xchg`), over the face's [`MORTAR_POINTS_PER_FACE`] points.
    fn locked_updates(&self, mortar: usize, f: u32, out: &mut Vec<Op>) {
        let faces = (self.m.lmor / MORTAR_POINTS_PER_FACE).max(1);
        let first = (f as u64 % faces) * MORTAR_POINTS_PER_FACE;
        for k in 0..UPDATES_PER_FACE {
            let ig = first + k % MORTAR_POINTS_PER_FACE;
            let lock = self.m.locks + ig * OMP_LOCK_BYTES;
            out.extend([
                Op::Access {
                    addr: lock,
                    kind: AccessKind::Atomic,
                },
                Op::Access {
                    addr: self.m.mortar[mortar] + ig * 8,
                    kind: AccessKind::ReadModifyWrite,
                },
                Op::Access {
                    addr: lock,
                    kind: AccessKind::Atomic,
                },
            ]);
        }
    }

    /// The loops of step `step` (step 0 is the set-up), for the thread's shares.
    fn plan(&self, h: &History, step: u64) -> Vec<(u16, Body, u64, usize, bool)> {
        let mut v = Vec::new();
        if step == 0 {
            v.push((PHASE_SETUP, Body::Init, self.ua.class.lelt, 0, true));
            return v;
        }
        // steps 1..=FRE use mesh 0; the adaptation ending step s·FRE makes mesh s
        let mesh = (((step - 1) / FRE) as usize).min(h.meshes.len() - 1);
        let nelt = h.meshes[mesh].cells.len() as u64;
        let local = |reads, rmw, cycles| Body::Local { reads, rmw, cycles };
        v.push((
            PHASE_CONVECT,
            local(&[TA1, 9, 10], &[T, TA2], LAPLACIAN_CYCLES),
            nelt,
            mesh,
            true,
        ));
        v.push((PHASE_CONVECT, Body::Scatter(0), nelt, mesh, true));
        v.push((
            PHASE_CONVECT,
            Body::Gather { mortar: 0, to: TA1 },
            nelt,
            mesh,
            true,
        ));
        v.push((
            PHASE_LAPLACIAN,
            local(&[T, 11, 12, 13], &[TA1], LAPLACIAN_CYCLES),
            nelt,
            mesh,
            true,
        ));
        v.push((
            PHASE_LAPLACIAN,
            local(&[TA1, TMULT, 14], &[TRHS], 200),
            nelt,
            mesh,
            true,
        ));
        for _ in 0..NMXH {
            v.push((
                PHASE_DIFFUSION,
                local(&[P, 11, 12, 13, 15], &[Q], LAPLACIAN_CYCLES),
                nelt,
                mesh,
                true,
            ));
            v.push((PHASE_DIFFUSION, Body::Scatter(1), nelt, mesh, true));
            v.push((
                PHASE_DIFFUSION,
                Body::Gather { mortar: 1, to: Q },
                nelt,
                mesh,
                true,
            ));
            v.push((
                PHASE_DIFFUSION,
                local(&[P, Q, TMULT], &[], 250),
                nelt,
                mesh,
                true,
            ));
            v.push((
                PHASE_DIFFUSION,
                local(&[Q, 16], &[R, Z, P, TRHS], 500),
                nelt,
                mesh,
                true,
            ));
        }
        v.push((PHASE_DIFFUSION, local(&[TRHS], &[T], 125), nelt, mesh, true));
        if step.is_multiple_of(FRE) && ((step / FRE) as usize) < h.meshes.len() {
            // adaptation into mesh+1: marking, refine / coarsen, move, tables
            let next = h.meshes[mesh + 1].cells.len() as u64;
            v.push((PHASE_ADAPT, local(&[17], &[], 50), nelt, mesh, true));
            for f in 0..FIELDS {
                v.push((
                    PHASE_ADAPT,
                    Body::Move {
                        field: f,
                        to_tmp: true,
                    },
                    next,
                    mesh + 1,
                    true,
                ));
                v.push((
                    PHASE_ADAPT,
                    Body::Move {
                        field: f,
                        to_tmp: false,
                    },
                    next,
                    mesh + 1,
                    true,
                ));
            }
            v.push((PHASE_ADAPT, Body::Tables, next, mesh + 1, true));
        }
        v
    }

    /// Element `e` of a loop over `mesh`.
    fn body(&self, h: &History, body: Body, mesh: usize, e: u64, out: &mut Vec<Op>) {
        use AccessKind::{Read as Rd, ReadModifyWrite as Rmw, Write as Wr};
        let m = &self.m;
        match body {
            Body::Init => {
                for f in m.fields {
                    self.span(f, e, ELEM_FIELD_BYTES, Wr, out);
                }
                self.span(m.meta, e, ELEM_META_BYTES, Wr, out);
                self.span(m.idmo, e, IDMO_BYTES, Wr, out);
                // the mortar arrays and locks, in element-proportional slices (init_locks)
                let lmor = m.lmor;
                let lelt = self.ua.class.lelt;
                let (lo, hi) = (lmor * e / lelt, lmor * (e + 1) / lelt);
                for a in m.mortar {
                    Span::elems(a, lo, hi, 8, Wr).push_run(out);
                }
                Span::elems(m.locks, lo, hi, OMP_LOCK_BYTES, Wr).push_run(out);
                out.push(compute(2000, 3000));
            }
            Body::Local { reads, rmw, cycles } => {
                for &f in reads {
                    self.span(m.fields[f], e, ELEM_FIELD_BYTES, Rd, out);
                }
                for &f in rmw {
                    self.span(m.fields[f], e, ELEM_FIELD_BYTES, Rmw, out);
                }
                out.push(compute(cycles, cycles * 2));
            }
            Body::Scatter(a) => {
                self.span(m.idmo, e, IDMO_BYTES, Rd, out);
                self.span(m.fields[TA2], e, ELEM_FIELD_BYTES, Rd, out);
                for &f in &h.meshes[mesh].faces[e as usize] {
                    if f != u32::MAX {
                        self.locked_updates(a, f, out);
                    }
                }
                out.push(compute(300, 500));
            }
            Body::Gather { mortar, to } => {
                self.span(m.idmo, e, IDMO_BYTES, Rd, out);
                for &f in &h.meshes[mesh].faces[e as usize] {
                    if f != u32::MAX {
                        self.face(mortar, f, Rd, out);
                    }
                }
                self.span(m.fields[to], e, ELEM_FIELD_BYTES, Rmw, out);
                out.push(compute(300, 500));
            }
            Body::Move { field, to_tmp } => {
                // mesh is the new one; adaptation mesh−1 made it
                let a = &h.adaptations[mesh - 1];
                let src = a.moved_from[e as usize] as u64;
                if to_tmp {
                    self.span(m.fields[field], src, ELEM_FIELD_BYTES, Rd, out);
                    self.span(m.tmp, e, ELEM_FIELD_BYTES, Wr, out);
                } else {
                    self.span(m.tmp, e, ELEM_FIELD_BYTES, Rd, out);
                    self.span(m.fields[field], e, ELEM_FIELD_BYTES, Wr, out);
                }
                out.push(compute(125, 250));
            }
            Body::Tables => {
                self.span(m.meta, e, ELEM_META_BYTES, Rmw, out);
                self.span(m.idmo, e, IDMO_BYTES, Wr, out);
                out.push(compute(1000, 2000));
            }
        }
    }
}

impl Gen for UaRun {
    fn emit(&mut self, out: &mut Vec<Op>) -> Status {
        let h = self.hist.get_or_insert_with(|| self.ua.history()).clone();
        loop {
            if self.stage >= self.pending.len() {
                if self.step > self.ua.niter {
                    return Status::Done;
                }
                self.pending = self.plan(&h, self.step);
                self.step += 1;
                self.stage = 0;
                self.item = 0;
                continue;
            }
            let (phase, body, n, mesh, barrier) = self.pending[self.stage];
            let (lo, hi) = static_range(n, self.ua.threads, self.t);
            if self.item == 0 {
                out.push(Op::Phase { id: phase });
                // item is 1-based so that 0 means "loop not started"
                self.item = lo + 1;
            }
            while self.item - 1 < hi {
                if out.len() >= CHUNK_OPS {
                    return Status::More;
                }
                let e = self.item - 1;
                self.body(&h, body, mesh, e, out);
                self.item += 1;
            }
            if barrier {
                out.push(Op::Barrier);
            }
            self.stage += 1;
            self.item = 0;
        }
    }
}
