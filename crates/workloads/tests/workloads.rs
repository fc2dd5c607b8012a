//! Behaviour of every workload, checked by draining its thread programs against a bump
//! allocator: ops stay inside the mappings, barriers match within a task, and the line counts
//! are those of the algorithm.

use numalab_core::workload::{AccessKind, Op};
use numalab_core::{MemPolicy, NodeId, NodeMask, PageSize, TaskId};
use numalab_workloads::inspect::summarize;
use numalab_workloads::npb_cg::{self, CgMatrix};
use numalab_workloads::{by_spec, gups, list, mlc_loaded, ptrchase, stream, WorkloadError};

mod common;

use common::{build, drain, run_all};

// --- specs ---------------------------------------------------------------------------------

#[test]
fn spec_errors_name_the_valid_choices() {
    let e = by_spec("strem", 4).err().unwrap();
    assert!(matches!(e, WorkloadError::UnknownWorkload { .. }));
    let msg = e.to_string();
    for name in ["stream", "ptrchase", "mlc-loaded", "gups", "npb-cg"] {
        assert!(msg.contains(name), "{msg}");
    }
    let msg = by_spec("npb-cg:klass=B", 4).err().unwrap().to_string();
    assert!(
        msg.contains("klass") && msg.contains("class, niter, scale"),
        "{msg}"
    );
    let msg = by_spec("npb-cg:class=Q", 4).err().unwrap().to_string();
    assert!(msg.contains("S, W, A, B, C, D"), "{msg}");
    let msg = by_spec("stream:kernel=quad", 4).err().unwrap().to_string();
    assert!(msg.contains("all, copy, scale, add, triad"), "{msg}");
    let msg = by_spec("ptrchase:bytes=lots", 1).err().unwrap().to_string();
    assert!(msg.contains("256M"), "{msg}");
    let msg = by_spec("ptrchase:page=3M", 1).err().unwrap().to_string();
    assert!(msg.contains("4K, 2M, 1G"), "{msg}");
    let msg = by_spec("mlc-loaded:mix=5:1", 4).err().unwrap().to_string();
    assert!(msg.contains("r, 3:1, 2:1, 1:1"), "{msg}");
    let msg = by_spec("npb-cg:scale=2", 4).err().unwrap().to_string();
    assert!(msg.contains("(0, 1]"), "{msg}");
    assert!(matches!(
        by_spec("ptrchase", 4),
        Err(WorkloadError::Threads { .. })
    ));
    assert!(matches!(
        by_spec("gups:updates=1,updates=2", 4),
        Err(WorkloadError::DuplicateKey { .. })
    ));
    assert!(matches!(
        by_spec("stream:n", 4),
        Err(WorkloadError::Malformed { .. })
    ));
    assert!(matches!(
        by_spec("npb-cg:class=S,scale=0.01", 4),
        Err(WorkloadError::BadValue { .. })
    ));
    // every listed workload builds from its bare name (a mix needs its programs)
    let names: Vec<&str> = list().iter().map(|(n, _)| *n).collect();
    for name in [
        "stream",
        "ptrchase",
        "mlc-loaded",
        "gups",
        "npb-cg",
        "npb-is",
        "lbm-like",
        "mix",
    ] {
        assert!(names.contains(&name), "{name} listed");
    }
    for (name, desc) in list() {
        assert!(desc.contains("keys:"), "{name}: {desc}");
        let threads = if matches!(name, "ptrchase" | "randrw") {
            1
        } else {
            2
        };
        let spec = if name == "mix" {
            "mix:gcc-like*2"
        } else {
            name
        };
        by_spec(spec, threads).unwrap();
    }
}

#[test]
fn names_round_trip() {
    for (spec, threads) in [
        ("stream:kernel=triad,n=4000000,ntimes=2", 4),
        ("ptrchase:bytes=256M,steps=200000,page=2M,mem_node=1", 1),
        ("mlc-loaded:bytes=64M,delay=100,mix=3:1", 3),
        ("gups:log2_words=20", 2),
        ("npb-cg:class=B,niter=1", 16),
        ("npb-cg:class=D,scale=0.05", 8),
    ] {
        let w = by_spec(spec, threads).unwrap();
        let again = by_spec(&w.name(), threads).unwrap();
        assert_eq!(again.name(), w.name(), "{spec}");
    }
    assert_eq!(
        by_spec("npb-cg:class=D,scale=0.05", 8).unwrap().name(),
        "npb-cg:class=D,niter=100,scale=0.05"
    );
}

// --- STREAM --------------------------------------------------------------------------------

#[test]
fn stream_triad_line_counts() {
    let n = 4_000_000u64;
    let (_, space, sums) = run_all(&format!("stream:kernel=triad,n={n},ntimes=2"), 4);
    let triad = stream::Kernel::Triad.phase();
    let total: u64 = sums.iter().map(|(_, s)| s.lines_per_phase[&triad]).sum();
    // n is a multiple of 8 per thread: no line is shared between slices
    assert_eq!(total, 2 * 3 * n * 8 / 64);
    for (_, s) in &sums {
        assert_eq!(s.barriers, 2 + 2, "init, the a = 2a loop, one per triad");
        assert_eq!(s.phases, vec![0, triad, triad]);
    }
    assert_eq!(space.mappings.len(), 3);
    assert_eq!(stream::counted_bytes(stream::Kernel::Triad, n), 24 * n);
    assert_eq!(stream::counted_bytes(stream::Kernel::Copy, n), 16 * n);
}

#[test]
fn stream_all_kernels_and_first_touch() {
    let n = 1 << 20;
    let (w, space, sums) = run_all(&format!("stream:n={n},ntimes=3"), 3);
    assert_eq!(w.threads(), 3);
    for k in stream::Kernel::ALL {
        let per_elem = k.counted_bytes_per_element() / 8; // arrays touched
        let lines: u64 = sums
            .iter()
            .map(|(_, s)| s.lines_per_phase[&k.phase()])
            .sum();
        // 3 repetitions; slices of 349525/349526 elements share one line per boundary (2) per
        // array and repetition
        let exact = 3 * per_elem * n * 8 / 64;
        assert!(
            lines >= exact && lines <= exact + 3 * 2 * per_elem,
            "{k:?}: {lines} vs {exact}"
        );
    }
    // each thread writes its own slice of a, b, c during init (parallel first touch), then
    // updates its slice of a (a = 2a); thread 0 has 349526 elements = 43691 lines per array
    assert_eq!(space.by_name("stream.a").unwrap().bytes, n * 8);
    assert_eq!(sums[0].1.lines_per_phase[&0], 4 * 43691);
    // serial init: the master writes all three arrays, the others only their slice of a
    let (_, _, sums) = run_all(&format!("stream:n={n},ntimes=1,init=serial"), 3);
    assert_eq!(sums[0].1.lines_per_phase[&0], 3 * n / 8 + 43691);
    assert!(
        sums[1].1.lines_per_phase[&0] <= 43692,
        "its slice of a, boundary lines included"
    );
}

#[test]
fn stream_processes_are_separate_tasks() {
    let (_, space, sums) = run_all("stream:mode=processes,n=100000,ntimes=2", 4);
    assert_eq!(space.mappings.len(), 12);
    for (t, (task, s)) in sums.iter().enumerate() {
        assert_eq!(*task, TaskId(t as u32));
        let triad = stream::Kernel::Triad.phase();
        assert_eq!(s.lines_per_phase[&triad], 2 * 3 * 100_000 * 8 / 64);
        assert_eq!(s.lines_per_mapping.len(), 3);
    }
}

// --- pointer chase ---------------------------------------------------------------------------

#[test]
fn ptrchase_phases_and_mapping() {
    let (w, space, sums) = run_all("ptrchase:bytes=4M,steps=200000,page=2M,mem_node=1", 1);
    let m = &space.mappings[0];
    assert_eq!(m.opts.hugetlb, Some(PageSize::Huge2M));
    assert_eq!(
        m.opts.policy,
        Some(MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(1)),
            numa_balancing: false
        })
    );
    let s = &sums[0].1;
    let lines = 4 << 20 >> 6;
    assert_eq!(
        s.phases,
        vec![
            ptrchase::PHASE_INIT,
            ptrchase::PHASE_WARMUP,
            ptrchase::PHASE_CHASE
        ]
    );
    assert_eq!(s.lines_per_phase[&0], lines);
    assert_eq!(s.lines_per_phase[&1], lines);
    assert_eq!(s.lines_per_phase[&2], 200_000);
    assert_eq!(s.dependent_reads, lines + 200_000);
    assert_eq!(s.compute_cycles, 0);
    assert!(w.name().contains("page=2M") && w.name().contains("mem_node=1"));

    let (_, _, sums) = run_all(
        "ptrchase:bytes=1M,steps=1000,warmup=0,variant=page-local,page=4K",
        1,
    );
    assert_eq!(sums[0].1.phases, vec![0, 2]);
    assert_eq!(sums[0].1.dependent_reads, 1000);
}

#[test]
fn ptrchase_visits_every_line_once_per_lap() {
    let (_, space, mut specs) = build("ptrchase:bytes=256K,steps=4096,warmup=0", 1);
    let base = space.mappings[0].start;
    let ops = drain(&mut specs[0]);
    let chase: Vec<u64> = ops
        .iter()
        .filter_map(|op| match op {
            Op::Access {
                addr,
                kind: AccessKind::DependentRead,
            } => Some((addr - base) / 64),
            _ => None,
        })
        .collect();
    assert_eq!(chase.len(), 4096);
    let mut sorted = chase.clone();
    sorted.sort_unstable();
    assert_eq!(
        sorted,
        (0..4096).collect::<Vec<_>>(),
        "one lap touches each of the 4096 lines once"
    );
}

// --- MLC loaded latency ----------------------------------------------------------------------

#[test]
fn mlc_injectors_stop_when_the_chase_ends() {
    let (w, space, mut specs) = build(
        "mlc-loaded:bytes=1M,steps=5000,inject_bytes=256K,inject_node=1,delay=50,mix=3:1",
        3,
    );
    assert_eq!(w.threads(), 3);
    assert_eq!(space.mappings.len(), 3);
    assert_eq!(
        space.mappings[0].opts.policy,
        Some(MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(0)),
            numa_balancing: false
        })
    );
    assert_eq!(
        space.mappings[1].opts.policy,
        Some(MemPolicy::Bind {
            nodes: NodeMask::single(NodeId(1)),
            numa_balancing: false
        })
    );
    // injectors run while the chase has not finished
    let (lat, inj) = specs.split_at_mut(1);
    let before = summarize(&mut inj[0], &space, Some(40_000));
    let injected = before.lines_per_phase[&mlc_loaded::PHASE_INJECT];
    assert!(injected > 15_000, "{injected}");
    assert_eq!(
        before.lines_per_phase[&0], 4096,
        "pre-fault of its own buffer"
    );
    assert_eq!(before.out_of_range, 0);
    assert!(
        (before.reads as i64 - 3 * injected as i64 / 4).abs() <= 3,
        "3:1 mix: {} reads of {injected}",
        before.reads
    );
    assert_eq!(
        before.compute_cycles,
        50 * injected,
        "delay after each line"
    );
    // the latency thread runs to its end and raises the flag; then injectors finish
    let l = summarize(&mut lat[0], &space, None);
    assert_eq!(l.barriers, 1);
    assert_eq!(l.lines_per_phase[&2], 5000);
    let after = summarize(&mut inj[0], &space, None);
    assert!(
        after.ops < 5000,
        "stops at its next fill: {} ops",
        after.ops
    );
    let other = summarize(&mut inj[1], &space, None);
    assert_eq!(other.barriers, 1);
    assert_eq!(other.out_of_range, 0);
    assert_eq!(mlc_loaded::MLC_DELAYS.len(), 19);
    assert_eq!(mlc_loaded::MLC_DELAYS[18], 20_000);
}

// --- GUPS ------------------------------------------------------------------------------------

#[test]
fn gups_updates_follow_the_hpcc_stream() {
    let (_, space, sums) = run_all("gups:log2_words=16,updates=100000", 3);
    let total: u64 = sums.iter().map(|(_, s)| s.rmws).sum();
    assert_eq!(total, 100_000);
    // static blocks of 21846/21845 words: the two inner boundaries share a line
    let init: u64 = sums.iter().map(|(_, s)| s.lines_per_phase[&0]).sum();
    assert_eq!(init, (1 << 16) * 8 / 64 + 2);
    assert_eq!(space.mappings[0].bytes, 8 << 16);

    // the union of the threads' updates is the serial sequence
    let (_, space, mut specs) = build("gups:log2_words=10,updates=1000", 4);
    let base = space.mappings[0].start;
    let mut seen = Vec::new();
    for s in specs.iter_mut() {
        let ops = drain(s);
        seen.extend(ops.iter().filter_map(|op| match op {
            Op::Access {
                addr,
                kind: AccessKind::ReadModifyWrite,
            } => Some((addr - base) / 8),
            _ => None,
        }));
    }
    let mut ran = 1u64;
    let serial: Vec<u64> = (0..1000)
        .map(|_| {
            ran = gups::hpcc_next(ran);
            ran & 1023
        })
        .collect();
    assert_eq!(seen, serial);
}

// --- NAS CG ----------------------------------------------------------------------------------

#[test]
fn cg_zeta_verifies_class_s_and_w() {
    for c in ['S', 'W'] {
        let class = npb_cg::class(c).unwrap();
        let (zeta, err) = npb_cg::verify(class);
        assert!(
            err <= 1e-10,
            "class {c}: zeta {zeta} vs {} (relative error {err:e})",
            class.zeta_verify
        );
    }
}

#[test]
fn cg_class_s_structure() {
    let c = npb_cg::class('S').unwrap();
    let m = CgMatrix::generate(c.na, c.nonzer, c.shift, false);
    assert_eq!(m.nonzeros(), CLASS_S_NONZEROS);
    assert!(m.nonzeros() < m.nz_alloc());
    // same structure with and without values
    let mv = CgMatrix::generate(c.na, c.nonzer, c.shift, true);
    assert_eq!(mv.rowstr, m.rowstr);
    assert_eq!(mv.colidx, m.colidx);
    // rows sorted, diagonal present, structure symmetric
    for j in 0..m.n {
        let row = m.row(j);
        assert!(
            row.windows(2).all(|w| w[0] < w[1]),
            "row {j} sorted without duplicates"
        );
        assert!(
            row.binary_search(&(j as u32)).is_ok(),
            "diagonal of row {j}"
        );
        for &c in row {
            assert!(
                m.row(c as usize).binary_search(&(j as u32)).is_ok(),
                "({j},{c}) without ({c},{j})"
            );
        }
    }
    assert_eq!(
        m.rowstr_pre[m.n],
        m.vec_start
            .windows(2)
            .map(|w| ((w[1] - w[0]) as u64).pow(2))
            .sum::<u64>()
    );
}

/// Nonzeros of NPB CG class S after duplicate merging, as produced by the exact makea whose
/// numerics reproduce NPB's verification zeta (`cg_zeta_verifies_class_s_and_w`).
const CLASS_S_NONZEROS: u64 = 78_148;

#[test]
fn cg_emission_class_s() {
    for threads in [1, 3, 4] {
        let (_, _, sums) = run_all("npb-cg:class=S,niter=2", threads);
        let c = npb_cg::class('S').unwrap();
        let m = CgMatrix::generate(c.na, c.nonzer, c.shift, false);
        let nnz = m.nonzeros();
        // barriers: setup 10 (makea 1, sparse 7, after makea 1, end of region 1), untimed cg
        // 129 + normalise 2 + x reset 1, each timed iteration 129 + 2
        let per_cg = 2 + 5 * npb_cg::CG_ITERATIONS as u64 + 2;
        for (_, s) in &sums {
            assert_eq!(
                s.barriers,
                10 + per_cg + 2 + 1 + 2 * (per_cg + 2),
                "{threads} threads"
            );
            assert_eq!(
                s.phases,
                vec![
                    npb_cg::PHASE_SETUP,
                    npb_cg::PHASE_UNTIMED,
                    npb_cg::PHASE_TIMED
                ]
            );
        }
        // p: one gather per nonzero in 25 SpMVs of each of the 3 conj_grad calls, plus 76
        // passes of vector loops per call and the setup's p = 0 (175 lines each, threads
        // sharing at most one boundary line per pass)
        let p_lines: u64 = sums.iter().map(|(_, s)| s.lines_per_mapping["cg.p"]).sum();
        let vec_lines = p_lines - 75 * nnz;
        assert!(
            (229 * 175..=229 * (175 + threads as u64)).contains(&vec_lines),
            "{vec_lines}"
        );
        let a_lines: u64 = sums.iter().map(|(_, s)| s.lines_per_mapping["cg.a"]).sum();
        let a_stream = nnz * 8 / 64;
        // a is written once (copy), read by 78 SpMVs; thread boundaries may share a line
        assert!(
            a_lines >= 79 * a_stream && a_lines <= 79 * (a_stream + 2 * threads as u64),
            "{a_lines} vs {}",
            79 * a_stream
        );
        let timed: u64 = sums
            .iter()
            .map(|(_, s)| s.lines_per_phase[&npb_cg::PHASE_TIMED])
            .sum();
        assert!(
            timed > 2 * 26 * nnz,
            "gathers alone are 26 per nonzero per iteration"
        );
    }
}

/// `rows=F`: a quarter of each thread's rows, the vectors and arrays at full size.
#[test]
fn cg_row_sample_shrinks_the_work_and_keeps_the_vectors() {
    let (_, full_space, full) = run_all("npb-cg:class=A,niter=1", 4);
    let (w, space, part) = run_all("npb-cg:class=A,niter=1,rows=0.25", 4);
    assert_eq!(w.name(), "npb-cg:class=A,niter=1,rows=0.25");
    for name in ["cg.p", "cg.a", "cg.colidx", "cg.x"] {
        assert_eq!(
            space.by_name(name).unwrap().bytes,
            full_space.by_name(name).unwrap().bytes,
            "{name} keeps its full size"
        );
    }
    let timed = |sums: &[(TaskId, numalab_workloads::inspect::ThreadSummary)]| -> u64 {
        sums.iter()
            .map(|(_, s)| s.lines_per_phase[&npb_cg::PHASE_TIMED])
            .sum()
    };
    let ratio = timed(&part) as f64 / timed(&full) as f64;
    assert!(
        (0.2..0.3).contains(&ratio),
        "timed references {ratio:.3} of the full run's"
    );
    for (_, s) in &part {
        assert_eq!(s.out_of_range, 0);
    }
    // a fraction that leaves a thread nothing to do is refused, naming rows=
    let e = by_spec("npb-cg:class=S,rows=0.001", 4)
        .err()
        .unwrap()
        .to_string();
    assert!(e.contains("rows"), "{e}");
    // found by fuzz/workload_spec: a tiny fraction overflowed the block arithmetic
    let e = by_spec(
        &format!("npb-cg:class=D,niter=0,rows=0.{}4", "0".repeat(150)),
        4,
    )
    .err()
    .unwrap()
    .to_string();
    assert!(e.contains("rows"), "{e}");
}

#[test]
fn cg_gathers_use_the_real_colidx() {
    let (_, space, mut specs) = build("npb-cg:class=S,niter=0", 2);
    let c = npb_cg::class('S').unwrap();
    let m = CgMatrix::generate(c.na, c.nonzer, c.shift, false);
    let p = space.by_name("cg.p").unwrap().start;
    // thread 1 of 2 multiplies rows [700, 1400): its first gathers after its first read of a
    // in the untimed phase are p(colidx(k)) of row 700
    let table = specs[1]
        .program
        .gather_table()
        .expect("CG's SpMV gathers through colidx");
    assert_eq!(
        &*table.index, &*m.colidx,
        "the gather table is colidx itself"
    );
    let mut ops = Vec::new();
    let mut phase = 0;
    let mut gathers = Vec::new();
    'outer: loop {
        ops.clear();
        let more = specs[1].program.fill(&mut ops);
        for op in &ops {
            match *op {
                Op::Phase { id } => phase = id,
                Op::Gather { .. } if phase == npb_cg::PHASE_UNTIMED => {
                    for (addr, kind) in op.accesses(Some(&table)) {
                        assert_eq!(kind, AccessKind::Read);
                        assert!(addr >= p && addr < p + 8 * 1402, "gather outside p");
                        gathers.push((addr - p) / 8);
                    }
                    if gathers.len() >= m.row(700).len() {
                        break 'outer;
                    }
                }
                _ => {}
            }
        }
        assert!(more);
    }
    assert_eq!(
        gathers,
        m.row(700).iter().map(|&c| c as u64).collect::<Vec<_>>()
    );
}

#[test]
fn cg_scale_shrinks_rows() {
    let w = npb_cg::NpbCg::new(*npb_cg::class('D').unwrap(), 1, 0.01, 4).unwrap();
    assert_eq!(w.na, 15_000);
    let m = w.matrix();
    assert_eq!(m.n, 15_000);
    assert!(m.nonzeros() > 15_000 * 300);
}

/// NPB's static arrays sit side by side in one .bss, as the compiler lays out its COMMON
/// blocks (issue "Trustworthy simulation I", item 3): no 2 MiB alignment and no guard gap
/// between arrays, so huge pages straddle neighbours.
#[test]
fn npb_static_arrays_sit_side_by_side() {
    for (spec, first, last) in [
        ("npb-cg:class=S,niter=1", "cg.colidx", "cg.r"),
        ("npb-ua:class=S,niter=1", "ua.field0", "ua.locks"),
        ("npb-lu:class=S,itmax=1", "lu.u", "lu.rho_i"),
        ("npb-sp:class=S,niter=1", "sp.u", "sp.square"),
        ("npb-ft:class=S,niter=1", "ft.u0", "ft.twiddle"),
        ("npb-is:class=S,niter=1", "is.key_array", "is.key_buff2"),
    ] {
        let (_, space, _) = build(spec, 2);
        let from = space
            .mappings
            .iter()
            .position(|m| m.name == first)
            .unwrap_or_else(|| panic!("{spec}: no {first}"));
        let to = space
            .mappings
            .iter()
            .position(|m| m.name == last)
            .unwrap_or_else(|| panic!("{spec}: no {last}"));
        assert!(to > from + 1, "{spec}: several arrays");
        for w in space.mappings[from..=to].windows(2) {
            let end = w[0].start + w[0].bytes;
            assert!(
                w[1].start >= end && w[1].start < end + 64,
                "{spec}: {} starts {} bytes after {} ends",
                w[1].name,
                w[1].start as i64 - end as i64,
                w[0].name
            );
            assert_eq!(w[1].start % 64, 0, "{spec}: {} on a line", w[1].name);
        }
    }
}

/// `randrw`'s warm-up: one untimed lap of draws, a draw per line of the buffer, in its own
/// phase and from its own stream, so the timed draws are the same with or without it.
#[test]
fn randrw_warms_up_with_one_lap_before_timing() {
    use numalab_workloads::randrw::{PHASE_ACCESS, PHASE_WARMUP};
    let accesses_in = |spec: &str, phase: u16| -> Vec<u64> {
        let (_, _, mut specs) = build(spec, 1);
        let ops = drain(&mut specs[0]);
        let mut cur = None;
        ops.iter()
            .filter_map(|o| match *o {
                Op::Phase { id } => {
                    cur = Some(id);
                    None
                }
                Op::Access { addr, .. } if cur == Some(phase) => Some(addr),
                _ => None,
            })
            .collect()
    };
    let warm = "randrw:bytes=1M,accesses=5000,op=write";
    let cold = "randrw:bytes=1M,accesses=5000,op=write,warmup=0";
    assert_eq!(accesses_in(warm, PHASE_WARMUP).len(), (1 << 20) / 64);
    assert!(accesses_in(cold, PHASE_WARMUP).is_empty());
    assert_eq!(
        accesses_in(warm, PHASE_ACCESS),
        accesses_in(cold, PHASE_ACCESS)
    );
    assert_ne!(
        accesses_in(warm, PHASE_WARMUP)[..5000],
        accesses_in(warm, PHASE_ACCESS)[..],
        "the lap draws its own lines"
    );
}

/// `randrw` (§2.4): a pre-fault pass, then independent reads or writes at generator-drawn
/// lines inside the buffer, each after the generator's compute.
#[test]
fn randrw_draws_independent_accesses_inside_its_buffer() {
    for (op, kind) in [("read", AccessKind::Read), ("write", AccessKind::Write)] {
        let (_, space, mut specs) = build(&format!("randrw:bytes=1M,accesses=5000,op={op}"), 1);
        let buf = space.by_name("randrw.buffer").unwrap();
        let ops = drain(&mut specs[0]);
        let after: Vec<&Op> = ops
            .iter()
            .skip_while(|o| !matches!(o, Op::Phase { id } if *id == numalab_workloads::randrw::PHASE_ACCESS))
            .collect();
        let addrs: Vec<u64> = after
            .iter()
            .filter_map(|o| match o {
                Op::Access { addr, kind: k } if *k == kind => Some(*addr),
                _ => None,
            })
            .collect();
        assert_eq!(addrs.len(), 5000, "{op}");
        assert!(addrs
            .iter()
            .all(|a| (buf.start..buf.start + buf.bytes).contains(a) && a % 64 == 0));
        let distinct: std::collections::BTreeSet<u64> = addrs.iter().copied().collect();
        assert!(
            distinct.len() > 4000,
            "{op}: {} distinct lines",
            distinct.len()
        );
        let computes = after
            .iter()
            .filter(|o| matches!(o, Op::Compute { .. }))
            .count();
        assert_eq!(computes, 5000);
    }
    assert!(by_spec("randrw:bytes=3M", 1).is_err(), "not a power of two");
    assert!(by_spec("randrw", 2).is_err(), "one thread");
}
