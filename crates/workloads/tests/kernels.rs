//! The workloads of the literature policies (reference/workloads.md §3.3, §3.6, §4, §5):
//! emitted references checked against the algorithms, plus one short simulation each.

use numalab_core::workload::{AccessKind, Op};
use numalab_core::TaskId;
use numalab_workloads::{by_spec, npb_is};
use std::collections::HashMap;

mod common;

use common::{build, drain, run_all};

/// Ops of one thread between entering phase `id` and the next phase op.
fn phase_ops(ops: &[Op], id: u16) -> Vec<Op> {
    let mut cur = None;
    ops.iter()
        .filter(|op| {
            if let Op::Phase { id: p } = op {
                cur = Some(*p);
                return false;
            }
            cur == Some(id)
        })
        .copied()
        .collect()
}

// --- NAS IS ----------------------------------------------------------------------------------

#[test]
fn is_keys_pass_npb_partial_verification() {
    // NPB's own check: after rank(it), key_buff1[k−1] (keys below k) of each test key k equals
    // test_rank ± it; it holds only if the keys are exactly NPB's
    for c in ['S', 'W'] {
        let class = npb_is::class(c).unwrap();
        let n = 1u64 << class.total_keys_log2;
        let d = npb_is::IsData::new(class, n, 3, 2);
        for it in 1..=2 {
            let keys: Vec<u32> = (0..n).map(|i| d.key_at(i, it)).collect();
            let mut below = vec![0u64; d.max_key as usize + 1];
            for &k in &keys {
                below[k as usize + 1] += 1;
            }
            for v in 1..below.len() {
                below[v] += below[v - 1];
            }
            for i in 0..5 {
                let k = keys[class.test_index[i] as usize] as usize;
                assert!(k > 0 && (k as u64) < n);
                assert_eq!(
                    below[k] as i64,
                    class.expected_rank(i, it),
                    "class {c}, iteration {it}, test key {i}"
                );
            }
        }
    }
}

#[test]
fn is_jump_ahead_matches_the_serial_sequence() {
    let serial = npb_is::create_seq(10_000, 1 << 11, 1);
    for t in [2, 3, 7] {
        assert_eq!(
            npb_is::create_seq(10_000, 1 << 11, t),
            serial,
            "{t} threads"
        );
    }
    // bell-shaped around MAX_KEY/2: the middle quarter of the key range holds most keys
    let mid = serial.iter().filter(|&&k| (768..1280).contains(&k)).count();
    assert!(mid > 5_000, "{mid}");
}

#[test]
fn is_counts_every_key_once_and_sorts_them() {
    let threads = 3;
    let (w, space, mut specs) = build("npb-is:class=S,niter=1", threads);
    assert_eq!(w.name(), "npb-is:class=S,niter=1");
    let class = npb_is::class('S').unwrap();
    let n = 1u64 << class.total_keys_log2;
    let d = npb_is::IsData::new(class, n, threads, 1);
    let map = |name: &str| {
        let m = space.by_name(name).unwrap();
        (m.start, m.start + m.bytes)
    };
    let (kb1, kb1_end) = map("is.key_buff1");
    let (kb2, kb2_end) = map("is.key_buff2");
    let (ka, ka_end) = map("is.key_array");
    let (bs, bs_end) = map("is.bucket_size");
    let mut ranked = Vec::new();
    let mut scattered = Vec::new();
    let mut counted = 0u64;
    let mut placed = vec![u32::MAX; n as usize];
    for s in specs.iter_mut() {
        let ops = drain(s);
        for op in phase_ops(&ops, npb_is::PHASE_TIMED) {
            match op {
                Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                } if (kb1..kb1_end).contains(&addr) => ranked.push(((addr - kb1) / 4) as u32),
                Op::Access {
                    addr,
                    kind: AccessKind::Write,
                } if (kb2..kb2_end).contains(&addr) => scattered.push((addr - kb2) / 4),
                Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                } if (bs..bs_end).contains(&addr) => counted += 1,
                _ => {}
            }
        }
        // full_verify: key_buff1[k] decremented, then key_array[that rank] = k
        let mut key = None;
        for op in phase_ops(&ops, npb_is::PHASE_VERIFY) {
            match op {
                Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                } if (kb1..kb1_end).contains(&addr) => key = Some(((addr - kb1) / 4) as u32),
                Op::Access {
                    addr,
                    kind: AccessKind::Write,
                } if (ka..ka_end).contains(&addr) => {
                    let pos = ((addr - ka) / 4) as usize;
                    assert_eq!(placed[pos], u32::MAX, "position {pos} written twice");
                    placed[pos] = key.take().expect("a rank decrement before each placement");
                }
                _ => {}
            }
        }
    }
    let mut keys: Vec<u32> = (0..n).map(|i| d.key_at(i, 1)).collect();
    keys.sort_unstable();
    assert_eq!(counted, n, "one bucket_size increment per key");
    ranked.sort_unstable();
    assert_eq!(ranked, keys, "each key ranked exactly once in key_buff1");
    scattered.sort_unstable();
    assert_eq!(
        scattered,
        (0..n).collect::<Vec<_>>(),
        "key_buff2 written once per slot"
    );
    assert_eq!(placed, keys, "full_verify places the keys in sorted order");
}

#[test]
fn is_first_touch_and_phases() {
    let (_, space, sums) = run_all("npb-is:class=S,niter=2", 4);
    let n = 1u64 << 16;
    for (t, (_, s)) in sums.iter().enumerate() {
        assert_eq!(
            s.phases,
            vec![
                npb_is::PHASE_CREATE,
                npb_is::PHASE_ALLOC,
                npb_is::PHASE_UNTIMED,
                npb_is::PHASE_TIMED,
                npb_is::PHASE_VERIFY
            ]
        );
        // create_seq, alloc, 4 per rank × 3, full_verify, check loop
        assert_eq!(s.barriers, 2 + 4 * 3 + 2, "thread {t}");
        // create_seq: thread t writes its ⌈n/T⌉ block of key_array (n/4 keys = 256 lines)
        assert_eq!(s.lines_per_phase[&npb_is::PHASE_CREATE], n * 4 / 4 / 64);
    }
    assert_eq!(space.by_name("is.key_array").unwrap().bytes, n * 4);
    assert_eq!(space.by_name("is.key_buff1").unwrap().bytes, (1 << 11) * 4);
    assert_eq!(space.by_name("is.bucket_size").unwrap().bytes, 4 * 512 * 4);
}

// --- SPEC CPU-like kernels (§5) --------------------------------------------------------------

/// Lines referenced by `ops` with each access kind: (read lines, written lines), as sets.
fn line_sets(
    ops: &[Op],
) -> (
    std::collections::HashSet<u64>,
    std::collections::HashSet<u64>,
) {
    let (mut r, mut w) = (
        std::collections::HashSet::new(),
        std::collections::HashSet::new(),
    );
    let mut add = |addr: u64, kind: AccessKind| {
        let l = addr / 64;
        if kind != AccessKind::Write {
            r.insert(l);
        }
        if kind.writes() {
            w.insert(l);
        }
    };
    for op in ops {
        match *op {
            Op::Access { addr, kind } => add(addr, kind),
            Op::Run {
                base,
                lines,
                stride_bytes,
                kind,
            } => {
                for i in 0..lines as u64 {
                    add(base + i * stride_bytes as u64, kind)
                }
            }
            _ => {}
        }
    }
    (r, w)
}

#[test]
fn lbm_streams_19_writes_per_20_reads_into_the_other_grid() {
    let (nx, ny, nz) = (20u64, 10u64, 8u64);
    let (_, space, mut specs) = build(&format!("lbm-like:nx={nx},ny={ny},nz={nz},steps=2"), 1);
    let cells = nx * ny * nz;
    let grid = space.by_name("lbm.grid0").unwrap();
    assert_eq!(
        grid.bytes,
        nx * ny * (nz + 4) * 160,
        "20 doubles per cell, 2 margin planes each side"
    );
    let g1 = space.by_name("lbm.grid1").unwrap().start;
    let ops = drain(&mut specs[0]);
    let step = phase_ops(&ops, numalab_workloads::lbm::PHASE_STEP);
    let (mut reads, mut writes) = ([0u64; 2], [0u64; 2]);
    for op in &step {
        if let Op::Run {
            base, lines, kind, ..
        } = *op
        {
            let g = (base >= g1) as usize;
            match kind {
                AccessKind::Read => reads[g] += lines as u64,
                AccessKind::Write => writes[g] += lines as u64,
                _ => panic!("lbm has no read-modify-write"),
            }
        }
    }
    // step 0 reads grid0 and writes grid1; step 1 the other way round
    assert_eq!(reads, [20 * cells, 20 * cells]);
    assert_eq!(writes, [19 * cells, 19 * cells]);
    // the first step's writes cover every interior cell's 19 distributions: all lines of the
    // interior planes of grid1 except none (19 of 20 doubles per cell, each line touched)
    let first: Vec<Op> = step[..step.len() / 2].to_vec();
    let (_, w) = line_sets(&first);
    let interior = (g1 + 2 * nx * ny * 160) / 64..(g1 + (2 + nz) * nx * ny * 160) / 64;
    assert!(
        w.iter().filter(|l| interior.contains(l)).count() as u64 >= cells * 160 / 64 - 2 * nx * ny
    );
}

#[test]
fn gems_reads_six_arrays_per_three_written() {
    let (n, steps) = (16u64, 2u64);
    let (_, space, mut specs) = build(
        &format!("gems-like:nx={n},ny={n},nz={n},pml=0,steps={steps}"),
        1,
    );
    let field_lines = n * n * n * 8 / 64;
    for f in numalab_workloads::gems::FIELDS {
        assert_eq!(space.by_name(f).unwrap().bytes, n * n * n * 8);
    }
    let ops = drain(&mut specs[0]);
    for (phase, updated) in [
        (numalab_workloads::gems::PHASE_H, "gems.hx"),
        (numalab_workloads::gems::PHASE_E, "gems.ex"),
    ] {
        let p = phase_ops(&ops, phase);
        let (r, w) = line_sets(&p);
        // per half step: the three updated arrays rewritten, all six read (distinct lines)
        assert_eq!(w.len() as u64, 3 * field_lines, "phase {phase}");
        assert_eq!(r.len() as u64, 6 * field_lines, "phase {phase}");
        let start = space.by_name(updated).unwrap().start / 64;
        assert!(w.contains(&start) && w.contains(&(start + field_lines - 1)));
    }
    // the +1 neighbour rows make reads of E exceed one pass: reuse of 2-3 planes
    let h = phase_ops(&ops, numalab_workloads::gems::PHASE_H);
    let refs: u64 = h
        .iter()
        .map(|op| match op {
            Op::Run { lines, .. } => *lines as u64,
            _ => 0,
        })
        .sum();
    assert!(refs > 9 * field_lines * steps, "{refs}");
    // PML layers add read-modify-write passes over the faces and the auxiliary arrays
    let (_, _, sums) = run_all(&format!("gems-like:nx={n},ny={n},nz={n},pml=2,steps=1"), 1);
    let s = &sums[0].1;
    assert!(s.lines_per_mapping["gems.pml-h"] > 0 && s.lines_per_mapping["gems.pml-e"] > 0);
}

fn params<'a>(
    name: &'static str,
    keys: &[&'static str],
    spec: &'a str,
) -> numalab_workloads::spec::Params<'a> {
    let (_, pairs) = numalab_workloads::spec::split(spec).unwrap();
    numalab_workloads::spec::Params::new(name, keys, pairs).unwrap()
}

#[test]
fn mcf_pivots_keep_a_valid_spanning_tree() {
    use numalab_workloads::kernel::Backlog;
    use numalab_workloads::mcf::{Mcf, KEYS, NAME};
    let spec = "mcf-like:nodes=2000,arcs=20000";
    let m = Mcf::from_params(&params(NAME, KEYS, spec)).unwrap();
    let mut s = m.solver(1 << 32, 1 << 36, 1 << 40);
    let mut out = Vec::new();
    let mut backlog = Backlog::default();
    let mut pivots = 0;
    let mut moved = 0;
    while pivots < 500 {
        out.clear();
        if let Some((rc, a)) = s.price(500, &mut out) {
            assert!(rc < 0 && !s.is_basic(a));
            moved += s.pivot(a, rc, &mut backlog);
            pivots += 1;
            assert!(
                s.is_basic(a) && s.reduced_cost(a) == 0,
                "the entering arc becomes basic with rc 0"
            );
        }
    }
    assert!(moved > 500, "subtrees are re-hung: {moved} nodes moved");
    let n = 2000;
    let mut basic = 0;
    for v in 1..n {
        // every node reaches the root, with consistent depths
        let mut x = v as u32;
        let mut steps = 0;
        while x != 0 {
            let p = s.parent[x as usize];
            assert_eq!(s.depth[x as usize], s.depth[p as usize] + 1, "depth of {x}");
            x = p;
            steps += 1;
            assert!(steps < n, "cycle in the tree");
        }
        // child / sibling lists hold exactly the parent's children
        let p = s.parent[v];
        let mut c = s.child[p as usize];
        let mut found = false;
        while c != u32::MAX {
            found |= c == v as u32;
            c = s.next[c as usize];
        }
        assert!(found, "{v} missing from its parent's children");
        // basic arcs have zero reduced cost (potentials are consistent)
        let a = s.pred[v];
        if a != u32::MAX {
            basic += 1;
            assert!(s.is_basic(a as usize));
            assert_eq!(s.reduced_cost(a as usize), 0, "basic arc {a}");
            let (t, h) = (
                s.net.tail[a as usize] as usize,
                s.net.head[a as usize] as usize,
            );
            assert!((t == v && h == p as usize) || (h == v && t == p as usize));
        }
    }
    assert!(basic > 100 && basic <= 500);
    assert!(s.flow.iter().all(|&f| f >= 0), "flows stay feasible");
}

#[test]
fn mcf_emission_is_read_mostly_and_latency_bound() {
    let (_, space, sums) = run_all("mcf-like:nodes=20000,arcs=200000,pivots=300", 1);
    let s = &sums[0].1;
    assert_eq!(space.by_name("mcf.nodes").unwrap().bytes, 20000 * 96);
    assert_eq!(space.by_name("mcf.arcs").unwrap().bytes, 200000 * 64);
    let reads = s.reads + s.dependent_reads + s.rmws;
    let writes = s.writes + s.rmws;
    let ratio = reads as f64 / writes as f64;
    // §5: ≈ 3 : 1 (bytes); line references here: pricing reads dominate
    assert!((2.0..=12.0).contains(&ratio), "read/write {ratio:.2}");
    assert!(
        s.dependent_reads > 300,
        "tree walks are dependent loads: {}",
        s.dependent_reads
    );
    // the cycle's two ends climb in step: the second end's parent loads are siblings
    assert!(
        s.sibling_reads > 0 && s.sibling_reads * 2 < s.dependent_reads,
        "sibling reads {} of {} dependent",
        s.sibling_reads,
        s.dependent_reads
    );
}

#[test]
fn omnetpp_events_touch_heap_messages_and_modules() {
    let events = 20_000;
    let (_, space, sums) = run_all(
        &format!("omnetpp-like:modules=1000,queue=4096,events={events}"),
        1,
    );
    let s = &sums[0].1;
    assert_eq!(space.by_name("omnetpp.modules").unwrap().bytes, 1000 * 2048);
    assert_eq!(space.by_name("omnetpp.fes").unwrap().bytes, 4096 * 8);
    // each event: a compute op of CYCLES_PER_EVENT
    let per_event = numalab_workloads::omnetpp::CYCLES_PER_EVENT;
    assert!(s.compute_cycles >= events * per_event);
    // heap: log2(4096) = 12 levels, two children compared per level on the way down
    let fes = s.lines_per_mapping["omnetpp.fes"];
    assert!(fes > events * 12 && fes < events * 60, "{fes}");
    let reads = s.reads + s.dependent_reads + s.rmws;
    let writes = s.writes + s.rmws;
    let ratio = reads as f64 / writes as f64;
    assert!((1.5..=4.5).contains(&ratio), "§5: ≈ 2 : 1, got {ratio:.2}");
    assert!(s.dependent_reads * 3 > reads, "pointer chasing dominates");
    // the right child's message is loaded with the left's: one sibling per level of a
    // sift-down (at most 12 levels); and where the one-bit predictor guessed the last
    // level's direction (about half the levels of a heap of random keys), the left one
    // is a sibling of the level above too: more than one sibling a level, fewer than two
    assert!(
        s.sibling_reads > events * 12 && s.sibling_reads < events * 22,
        "sibling reads {} for {events} events",
        s.sibling_reads
    );
}

// --- the other SPEC CPU2006 INT programs of M13's mix (§5) ------------------------------------

#[test]
fn perlbench_statements_chase_ops_and_mostly_hot_heap_data() {
    use numalab_workloads::perlbench::*;
    let n = 20_000;
    let (_, space, sums) = run_all(&format!("perlbench-like:statements={n},heap_mb=64"), 1);
    let s = &sums[0].1;
    assert_eq!(space.by_name("perl.heap").unwrap().bytes, 64 << 20);
    assert!(s.compute_instructions >= n * INSTRUCTIONS_PER_STATEMENT);
    // every statement: its ops and the hash chain are dependent loads
    assert_eq!(s.dependent_reads, n * (OPS_PER_STATEMENT + 3));
    assert_eq!(
        s.lines_per_mapping["perl.optree"],
        n * OPS_PER_STATEMENT + (OPTREE_BYTES / 64)
    );
    // the string appends stay in the output ring
    assert!(s.lines_per_mapping["perl.output"] >= n * STRING_BYTES / 64);
}

#[test]
fn bzip2_sorts_inside_the_block_and_streams_input_and_output() {
    use numalab_workloads::bzip2::*;
    let (_, space, sums) = run_all("bzip2-like:input_mb=2,block_kb=900,passes=1", 1);
    let s = &sums[0].1;
    let input = 2u64 << 20;
    assert_eq!(
        space.by_name("bzip2.sort").unwrap().bytes,
        900_000 * SORT_BYTES_PER_BYTE
    );
    // the input read once (plus its load), the output written once
    assert!(s.lines_per_mapping["bzip2.input"] >= 2 * input / 64);
    assert!(s.lines_per_mapping["bzip2.output"] >= input / 64);
    assert_eq!(s.phases, vec![PHASE_INIT, PHASE_COMPRESS, PHASE_DECOMPRESS]);
    // the inverse BWT follows tt: dependent reads, one per 16 bytes
    assert_eq!(s.dependent_reads, input / 16);
    assert!(
        s.compute_instructions
            >= input * (INSTRUCTIONS_PER_BYTE_COMPRESS + INSTRUCTIONS_PER_BYTE_DECOMPRESS)
    );
}

#[test]
fn gobmk_nodes_read_patterns_and_probe_the_hash_table() {
    use numalab_workloads::gobmk::*;
    let n = 10_000;
    let (_, _, sums) = run_all(&format!("gobmk-like:nodes={n},hash_mb=8"), 1);
    let s = &sums[0].1;
    let hash_lines = (8u64 << 20) / 64;
    assert_eq!(
        s.lines_per_mapping["gobmk.patterns"],
        n * PATTERN_READS + PATTERN_BYTES / 64
    );
    let probes = s.lines_per_mapping["gobmk.hash"] - hash_lines;
    assert!(probes >= n && probes <= 2 * n, "{probes}");
    assert_eq!(s.compute_cycles, n * CYCLES_PER_NODE);
}

#[test]
fn hmmer_fills_one_dp_row_per_residue_from_the_previous_one() {
    use numalab_workloads::hmmer::*;
    let (states, seqs) = (200u64, 5u64);
    let (_, _, sums) = run_all(
        &format!("hmmer-like:states={states},sequences={seqs},db_mb=1"),
        1,
    );
    let s = &sums[0].1;
    // one row's compute per residue: between MIN_LEN and MAX_LEN rows per sequence
    let rows = s.compute_cycles / (states * CYCLES_PER_CELL);
    assert!((seqs * MIN_LEN..seqs * MAX_LEN).contains(&rows), "{rows}");
    // each row reads the previous row and writes its own: the matrix's lines ≈ 2 rows' per row
    let row_lines = ((states + 1) * CELL_BYTES).div_ceil(64);
    let m = s.lines_per_mapping["hmmer.dpmatrix"];
    assert!(
        m >= 2 * rows * row_lines && m <= 2 * (rows + seqs) * (row_lines + 1),
        "{m}"
    );
}

#[test]
fn h264ref_searches_every_reference_window_per_macroblock() {
    use numalab_workloads::h264ref::*;
    let (w, h, frames) = (64u64, 48u64, 7u64);
    let spec = format!("h264ref-like:width={w},height={h},frames={frames}");
    let (_, _, sums) = run_all(&spec, 1);
    let s = &sums[0].1;
    let k = H264ref::from_params(&params(NAME, KEYS, &spec)).unwrap();
    let mbs = (w / 16) * (h / 16);
    // frame f searches min(REFS, max(f, 1)) references per macroblock
    let searches: u64 = (0..frames).map(|f| REFS.min(f.max(1))).sum::<u64>() * mbs;
    // compute: the searches, the first frames' interpolation, each finished frame's
    let lines = |bytes: u64| bytes.div_ceil(64);
    let expected = searches * CYCLES_PER_MB_REF
        + lines((REFS + 1) * k.frame_bytes()) * 64
        + frames * lines(k.frame_bytes()) * 64;
    assert_eq!(s.compute_cycles, expected);
    // each search reads the full-pel window's rows and three sub-pel planes' rows
    let window_rows = 16 + 2 * SEARCH;
    assert!(
        s.reads >= searches * (window_rows + 3 * REFINE_ROWS),
        "{}",
        s.reads
    );
}

#[test]
fn astar_expands_cells_once_per_search_and_reads_their_neighbour_rows() {
    use numalab_workloads::astar::*;
    let (side, queries, region) = (128u64, 10u64, 500u64);
    let (_, space, sums) = run_all(
        &format!("astar-like:side={side},queries={queries},region={region}"),
        1,
    );
    let s = &sums[0].1;
    assert_eq!(
        space.by_name("astar.waymap").unwrap().bytes,
        side * side * CELL_BYTES
    );
    // compute: the map's initialisation (8 cycles a line), then one unit per expanded cell
    let expanded = (s.compute_cycles - side * side * CELL_BYTES / 64 * 8) / CYCLES_PER_CELL;
    assert!(
        expanded <= queries * region && expanded >= queries,
        "{expanded}"
    );
    // a reached cell is written once per search: never more writes than expansions × 8
    assert!(s.writes - side * side * CELL_BYTES / 64 <= expanded * 8);
    // each expansion reads the three records of up to three rows (a line each: 64-byte
    // records), fewer at the map's edges
    assert!(
        s.reads >= expanded * 4 && s.reads <= expanded * 9,
        "{} for {expanded}",
        s.reads
    );
}

#[test]
fn libquantum_writes_exactly_the_lines_whose_states_change() {
    use numalab_workloads::libquantum::{Libquantum, KEYS, NAME};
    let spec = "libquantum-like:log2_states=12,gates=30,seed=3";
    let k = Libquantum::from_params(&params(NAME, KEYS, spec)).unwrap();
    let mut reg: Vec<u32> = (0..k.states as u32).collect();
    let mut written = 0u64;
    for g in k.circuit() {
        for line in reg.chunks_mut(4) {
            let mut changed = false;
            for s in line.iter_mut() {
                let (n, c) = g.apply(*s);
                *s = n;
                changed |= c;
            }
            written += changed as u64;
        }
    }
    let (_, space, sums) = run_all(spec, 1);
    let s = &sums[0].1;
    let lines = 4096 * 16 / 64;
    assert_eq!(space.by_name("libquantum.reg").unwrap().bytes, 4096 * 16);
    assert_eq!(
        s.lines_per_phase[&numalab_workloads::libquantum::PHASE_GATES],
        30 * lines,
        "one pass per gate"
    );
    assert_eq!(s.rmws, written);
    let ratio = (s.reads + s.rmws) as f64 / s.rmws as f64;
    assert!(
        (1.0..=3.0).contains(&ratio),
        "§5: ≈ 1 : 1 streaming, got {ratio:.2}"
    );
}

#[test]
fn gcc_runs_each_invocation_through_its_passes() {
    let (nodes, inputs, passes) = (5000u64, 3u64, 4u64);
    let (_, space, sums) = run_all(
        &format!("gcc-like:nodes={nodes},inputs={inputs},passes={passes}"),
        1,
    );
    let s = &sums[0].1;
    assert_eq!(s.phases, [0u16, 1, 2].repeat(inputs as usize));
    assert_eq!(space.by_name("gcc.tree").unwrap().bytes, nodes * 64);
    let insns = nodes * 2;
    // each pass walks every instruction with a dependent load
    assert!(s.dependent_reads >= inputs * (passes * insns + nodes));
    assert_eq!(
        s.lines_per_mapping["gcc.rtl"] % inputs,
        0,
        "invocations repeat the same work"
    );
    let reads = s.reads + s.dependent_reads + s.rmws;
    let writes = s.writes + s.rmws;
    let ratio = reads as f64 / writes as f64;
    assert!((1.3..=4.0).contains(&ratio), "§5: ≈ 2 : 1, got {ratio:.2}");
}

#[test]
fn spec_kernels_run_one_task_per_copy() {
    let (_, space, sums) = run_all("libquantum-like:log2_states=10,gates=2", 3);
    for (t, (task, s)) in sums.iter().enumerate() {
        assert_eq!(*task, TaskId(t as u32));
        assert_eq!(s.lines_per_mapping.len(), 1);
    }
    assert_eq!(
        space
            .mappings
            .iter()
            .filter(|m| m.task == TaskId(2))
            .count(),
        1
    );
}

// --- mixes -----------------------------------------------------------------------------------

#[test]
fn mix_gives_each_copy_its_own_task_and_address_space() {
    let spec = "mix:lbm-like(nx=10;ny=10;nz=4;steps=1)*2+mcf-like(nodes=300;arcs=3000;pivots=20)*2+libquantum-like(gates=3)*1,scale=0.01";
    let (w, space, sums) = run_all(spec, 99);
    assert_eq!(w.threads(), 5, "the copies set the thread count");
    let tasks: Vec<TaskId> = sums.iter().map(|(t, _)| *t).collect();
    assert_eq!(tasks, (0..5).map(TaskId).collect::<Vec<_>>());
    // run_all checked that every reference of a copy falls in its own task's mappings; the
    // mappings of different tasks are disjoint ranges
    let mut ranges: Vec<(u64, u64, TaskId)> = space
        .mappings
        .iter()
        .map(|m| (m.start, m.start + m.bytes, m.task))
        .collect();
    ranges.sort();
    for p in ranges.windows(2) {
        assert!(p[0].1 <= p[1].0);
    }
    for t in 0..5 {
        assert!(
            space.mappings.iter().any(|m| m.task == TaskId(t)),
            "task {t} maps its data"
        );
    }
    assert_eq!(
        sums[0].1.lines_per_mapping.keys().collect::<Vec<_>>(),
        ["lbm.grid0", "lbm.grid1"]
    );
    assert!(sums[2].1.lines_per_mapping.contains_key("mcf.arcs"));
    // the mix-level scale reaches the programs without their own
    let name = w.name();
    assert!(
        name.starts_with("mix:lbm-like(nx=10;ny=10;nz=4;steps=1;scale=0.01)*2+mcf-like("),
        "{name}"
    );
    assert!(
        name.ends_with("libquantum-like(log2_states=22;gates=3;seed=1;scale=0.01)*1"),
        "{name}"
    );
    let again = by_spec(&name, 1).unwrap();
    assert_eq!(again.name(), name);
    assert_eq!(by_spec("mix:lbm-like*22", 4).unwrap().threads(), 22);
}

#[test]
fn mix_errors_name_what_is_valid() {
    let msg = by_spec("mix:lbm*2", 1).err().unwrap().to_string();
    assert!(
        msg.contains("unknown workload 'lbm'")
            && msg.contains("lbm-like")
            && msg.contains("stream"),
        "{msg}"
    );
    let msg = by_spec("mix:lbm-like(threads=2)*3", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("single-threaded") && msg.contains("lbm-like*2"),
        "{msg}"
    );
    let msg = by_spec("mix:stream(threads=0)", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("threads=0"), "{msg}");
    // found by fuzz/workload_spec: threads × copies overflowed
    let msg = by_spec("mix:stream(threads=1128722783792398336)*161", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("from 1 to 65536"), "{msg}");
    let msg = by_spec("mix:stream(threads=65536)*2", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("more than 65536 threads"), "{msg}");
    let msg = by_spec("mix:stream(cpus=1;cpus=2)", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("cpus is given twice"), "{msg}");
    let msg = by_spec("mix:mix(x=1)", 1).err().unwrap().to_string();
    assert!(msg.contains("cannot hold a mix"), "{msg}");
    let msg = by_spec("mix:lbm-like(nx=10;size=3)*2", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(
        msg.contains("size") && msg.contains("nx, ny, nz, steps, scale"),
        "{msg}"
    );
    let msg = by_spec("mix:lbm-like*two", 1).err().unwrap().to_string();
    assert!(msg.contains("copy count"), "{msg}");
    let msg = by_spec("mix:lbm-like*0", 1).err().unwrap().to_string();
    assert!(msg.contains("at least one copy"), "{msg}");
    let msg = by_spec("mix:lbm-like*2,steps=3", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("valid keys are scale"), "{msg}");
    let msg = by_spec("mix:", 1).err().unwrap().to_string();
    assert!(msg.contains("no programs"), "{msg}");
    let msg = by_spec("mix:gems-like(pml=40;nx=16)", 1)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("pml=40"), "{msg}");
}

// --- NAS FT ----------------------------------------------------------------------------------

#[test]
fn ft_passes_touch_every_element_once() {
    use numalab_workloads::npb_ft::{self, PHASE_FFT_X, PHASE_FFT_Y, PHASE_FFT_Z};
    let threads = 3;
    let (w, space, mut specs) = build("npb-ft:class=S,niter=1", threads);
    assert_eq!(w.name(), "npb-ft:class=S,niter=1");
    let (nx, ny, nz) = (64u64, 64u64, 64u64);
    let u1 = space.by_name("ft.u1").unwrap();
    assert_eq!(
        u1.bytes,
        (nx + 1) * ny * nz * 16,
        "complex, x padded by one (NXP)"
    );
    let in_u1 = |a: u64| (u1.start..u1.start + u1.bytes).contains(&a);
    let mut per_phase: HashMap<(u16, bool), Vec<u64>> = HashMap::new();
    let mut runs: HashMap<(u16, bool), u64> = HashMap::new();
    for s in specs.iter_mut() {
        let ops = drain(s);
        for ph in [PHASE_FFT_Z, PHASE_FFT_Y, PHASE_FFT_X] {
            for op in phase_ops(&ops, ph) {
                if let Op::Run {
                    base, lines, kind, ..
                } = op
                {
                    if in_u1(base) {
                        let key = (ph, kind == AccessKind::Write);
                        *runs.entry(key).or_default() += 1;
                        let v = per_phase.entry(key).or_default();
                        v.extend((0..lines as u64).map(|l| (base - u1.start) / 64 + l));
                    }
                }
            }
        }
    }
    // every line holding data is read and written back in each pass; lines are shared by at
    // most two 256-byte pieces (x-rows of 65 values are not line-aligned)
    let data_lines: std::collections::BTreeSet<u64> = (0..nz)
        .flat_map(|k| (0..ny).map(move |j| (k, j)))
        .flat_map(|(k, j)| {
            let first = (k * ny + j) * (nx + 1) * 16;
            (first / 64..=(first + nx * 16 - 1) / 64).collect::<Vec<_>>()
        })
        .collect();
    for ((ph, write), lines) in &per_phase {
        let mut count: HashMap<u64, u32> = HashMap::new();
        for l in lines {
            *count.entry(*l).or_default() += 1;
        }
        for l in &data_lines {
            assert!(
                count.contains_key(l),
                "phase {ph} write={write}: line {l} not touched"
            );
        }
        assert!(
            count.values().all(|&c| c <= 2),
            "phase {ph}: a line touched more than twice"
        );
    }
    // the z and y passes gather one 16-value piece per plane (per row): nx/16 · ny · nz pieces
    for ph in [PHASE_FFT_Z, PHASE_FFT_Y] {
        assert_eq!(runs[&(ph, false)], nx / 16 * ny * nz, "phase {ph}");
        assert_eq!(runs[&(ph, true)], nx / 16 * ny * nz, "phase {ph}");
    }
    // x pass: one contiguous run per block of 16 rows
    assert_eq!(runs[&(PHASE_FFT_X, false)], ny / 16 * nz);
    let _ = npb_ft::FFTBLOCK;
}

#[test]
fn ft_z_pass_splits_rows_and_crosses_every_plane() {
    let (_, space, mut specs) = build("npb-ft:class=W,niter=1", 4);
    let u1 = space.by_name("ft.u1").unwrap();
    let plane_bytes = 129 * 128 * 16;
    // thread 1 of 4 owns j rows 32..64 in the z pass; it reads from all 32 planes
    let ops = drain(&mut specs[1]);
    let mut planes = std::collections::BTreeSet::new();
    for op in phase_ops(&ops, numalab_workloads::npb_ft::PHASE_FFT_Z) {
        if let Op::Run {
            base,
            kind: AccessKind::Read,
            ..
        } = op
        {
            if (u1.start..u1.start + u1.bytes).contains(&base) {
                let off = base - u1.start;
                planes.insert(off / plane_bytes);
                let j = off % plane_bytes / (129 * 16);
                assert!((32..64).contains(&j), "row {j}");
            }
        }
    }
    assert_eq!(planes.len(), 32);
    let (_, _, sums) = run_all("npb-ft:class=S,niter=2", 3);
    for (_, s) in &sums {
        // setup: 3 loops + forward FFT (3); per iteration evolve, 3 passes, checksum
        assert_eq!(s.barriers, 6 + 2 * 5);
    }
}

// --- matrix multiply -------------------------------------------------------------------------

#[test]
fn matmul_tasks_cover_c_once_and_read_all_of_b() {
    let (n, rows, kblock) = (256u64, 16u64, 32u64);
    let (_, space, sums) = run_all(&format!("matmul:n={n},rows={rows},kblock={kblock}"), 3);
    let lines = n * n * 4 / 64;
    assert_eq!(space.by_name("mm.b").unwrap().bytes, n * n * 4);
    let tasks = n / rows;
    let total = |name: &str| -> u64 {
        sums.iter()
            .map(|(_, s)| s.lines_per_mapping.get(name).copied().unwrap_or(0))
            .sum()
    };
    // master init writes A and B; each task reads all of B
    assert_eq!(total("mm.b"), lines + tasks * lines);
    // A: written once, each line read once by its task
    assert_eq!(total("mm.a"), 2 * lines);
    // C: zeroed once by its task, then one update per k block
    assert_eq!(total("mm.c"), lines + (n / kblock) * lines);
    assert_eq!(
        sums[0].1.lines_per_phase[&0],
        2 * lines,
        "the master initialises A and B"
    );
    assert!(!sums[1].1.lines_per_phase.contains_key(&0));
    // the task queue spreads the tasks
    for (t, (_, s)) in sums.iter().enumerate() {
        assert!(s.lines_per_phase[&1] > 0, "thread {t} got tasks");
    }
}

// --- blocked LU (GF09) -----------------------------------------------------------------------

#[test]
fn lu_blocked_steps_touch_the_right_blocks() {
    use numalab_core::{MemPolicy, NodeMask};
    use numalab_workloads::lu_blocked::{NEXT_TOUCH_HOOK, PHASE_GEMM};
    let (n, b) = (256u64, 32u64);
    let nb = n / b;
    let (_, space, sums) = run_all(&format!("lu-blocked:n={n},b={b},interleave=2"), 3);
    let m = space.by_name("lu.matrix").unwrap();
    assert_eq!(
        m.opts.policy,
        Some(MemPolicy::Interleave {
            nodes: NodeMask::first_n(2)
        })
    );
    let block_lines = b * b * 8 / 64;
    // gemm at step k updates (nb−k−1)² blocks, reading two and rewriting one each
    let gemm_blocks: u64 = (0..nb).map(|k| (nb - k - 1).pow(2)).sum();
    let gemm: u64 = sums
        .iter()
        .map(|(_, s)| s.lines_per_phase.get(&PHASE_GEMM).copied().unwrap_or(0))
        .sum();
    assert_eq!(gemm, 3 * block_lines * gemm_blocks);
    let rmw: u64 = sums.iter().map(|(_, s)| s.rmws).sum();
    let trsm_blocks: u64 = (0..nb).map(|k| 2 * (nb - k - 1)).sum();
    assert_eq!(
        rmw,
        block_lines * (gemm_blocks + trsm_blocks + nb),
        "gemm, trsm and getrf updates"
    );
    for (_, s) in &sums {
        // the hook phase opens every step; 4 barriers per step after init
        assert_eq!(
            s.phases.iter().filter(|&&p| p == NEXT_TOUCH_HOOK).count() as u64,
            nb
        );
        assert_eq!(s.barriers, 1 + 4 * nb);
    }
    // static and random maps give the same totals, different owners
    let (_, _, r) = run_all(
        &format!("lu-blocked:n={n},b={b},map=random,interleave=0"),
        3,
    );
    let rg: u64 = r
        .iter()
        .map(|(_, s)| s.lines_per_phase.get(&PHASE_GEMM).copied().unwrap_or(0))
        .sum();
    assert_eq!(rg, gemm);
    let owned = |spec: &str| {
        let (_, _, mut specs) = build(spec, 3);
        let ops = drain(&mut specs[1]);
        phase_ops(&ops, PHASE_GEMM)
            .iter()
            .filter_map(|op| match op {
                Op::Run {
                    base,
                    kind: AccessKind::ReadModifyWrite,
                    ..
                } => Some(*base),
                _ => None,
            })
            .collect::<Vec<_>>()
    };
    assert_ne!(
        owned(&format!("lu-blocked:n={n},b={b},map=random")),
        owned(&format!("lu-blocked:n={n},b={b},map=static")),
        "the random map gives thread 1 other blocks"
    );
    let msg = by_spec("lu-blocked:n=100,b=64", 2)
        .err()
        .unwrap()
        .to_string();
    assert!(msg.contains("must divide"), "{msg}");
}

// --- streamcluster ---------------------------------------------------------------------------

#[test]
fn streamcluster_master_generates_and_threads_stream_their_points() {
    let (dim, n) = (32u64, 4096u64);
    let pgains = 5;
    let (_, space, sums) = run_all(
        &format!("streamcluster:input=simsmall,pgains={pgains},speedy=2"),
        4,
    );
    assert_eq!(space.by_name("sc.block").unwrap().bytes, n * dim * 4);
    let block_lines = n * dim * 4 / 64;
    // the master writes the whole chunk; the others generate nothing
    assert_eq!(
        sums[0].1.lines_per_phase[&0],
        block_lines + n * 32 / 64 + n / 64 + n * 4 / 64 + n / 64
    );
    assert!(!sums[1].1.lines_per_phase.contains_key(&0));
    // each pgain call streams every thread's own coordinates once
    let block: u64 = sums
        .iter()
        .map(|(_, s)| s.lines_per_mapping["sc.block"])
        .sum();
    let passes = pgains + 2;
    assert!(
        block >= block_lines * (passes + 1)
            && block <= block_lines * (passes + 1) + 4 * passes * 2 * 4 * 8,
        "{block}"
    );
    let (_, _, par) = run_all(
        "streamcluster:input=simsmall,pgains=1,speedy=0,init=parallel",
        4,
    );
    for (t, (_, s)) in par.iter().enumerate() {
        // init=parallel: each thread first-touches its own quarter of every array
        assert_eq!(
            s.lines_per_phase[&0],
            (block_lines + n * 32 / 64 + n * 6 / 64) / 4,
            "thread {t}"
        );
    }
}

// --- Metis -----------------------------------------------------------------------------------

#[test]
fn metis_wc_counts_every_word_and_reduces_each_distinct_word_once() {
    use numalab_workloads::metis::{App, Metis, KEYS, PHASE_MAP, PHASE_REDUCE};
    let spec = "metis-wc:input=256K,vocab=5000,split=16K,buckets=64";
    let threads = 4;
    let m = Metis::from_params(App::Wc, &params("metis-wc", KEYS, spec), threads).unwrap();
    let words = m.words();
    let res = m.result();
    let counted: u64 = res
        .cells
        .iter()
        .flatten()
        .flatten()
        .map(|(_, c)| *c as u64)
        .sum();
    assert_eq!(counted, words, "every input word lands in one cell");
    let distinct: std::collections::HashSet<u32> = (0..words).map(|w| m.word(w)).collect();
    assert_eq!(res.out_len.iter().sum::<u64>(), distinct.len() as u64);
    // Zipf-like: the most common word is far above the mean
    let mut freq: HashMap<u32, u64> = HashMap::new();
    for w in 0..words {
        *freq.entry(m.word(w)).or_default() += 1;
    }
    assert!(*freq.values().max().unwrap() > 50 * words / distinct.len() as u64);
    // every split is mapped once
    let mut splits: Vec<u32> = res.splits.iter().flatten().copied().collect();
    splits.sort_unstable();
    assert_eq!(splits, (0..16).collect::<Vec<_>>());

    let (_, space, mut specs) = build(spec, threads);
    let out = space.by_name("metis.out").unwrap();
    let arena = space.by_name("metis.arena").unwrap();
    let input = space.by_name("metis.input").unwrap();
    assert!(
        input.file,
        "wc.c mmaps its input file: the page cache, not fresh memory"
    );
    let buckets = space.by_name("metis.buckets").unwrap();
    let mut out_writes = 0;
    let mut remote_arena_reads = 0;
    let arena_per_thread = arena.bytes / threads as u64;
    for (t, s) in specs.iter_mut().enumerate() {
        let ops = drain(s);
        // nobody writes the file: no master phase reading it into a buffer
        let writes_input = |op: &Op| match *op {
            Op::Access {
                addr,
                kind: AccessKind::Write,
            } => (input.start..input.start + input.bytes).contains(&addr),
            Op::Run {
                base,
                lines,
                stride_bytes,
                kind: AccessKind::Write,
            } => {
                let end = base + lines as u64 * stride_bytes.max(1) as u64;
                base < input.start + input.bytes && end > input.start
            }
            _ => false,
        };
        assert!(!ops.iter().any(writes_input));
        // the master initialises every row of the bucket matrix before the map (mr_setup)
        let in_buckets = |op: &Op| {
            matches!(op,
            Op::Run { base, kind: AccessKind::Write, .. } if (buckets.start..buckets.start + buckets.bytes).contains(base))
        };
        let setup_writes = phase_ops(&ops, 0)
            .iter()
            .filter(|op| in_buckets(op))
            .count();
        assert_eq!(setup_writes > 0, t == 0, "thread {t}");
        assert!(!phase_ops(&ops, PHASE_MAP).iter().any(in_buckets));
        for op in phase_ops(&ops, PHASE_REDUCE) {
            if let Op::Access { addr, kind } = op {
                if (out.start..out.start + out.bytes).contains(&addr) && kind == AccessKind::Write {
                    out_writes += 1;
                }
                if (arena.start..arena.start + arena.bytes).contains(&addr)
                    && (addr - arena.start) / arena_per_thread != t as u64
                {
                    remote_arena_reads += 1;
                }
            }
        }
        // map threads read only the input and their own row and arena
        for op in phase_ops(&ops, PHASE_MAP) {
            if let Op::Access { addr, .. } = op {
                if (arena.start..arena.start + arena.bytes).contains(&addr) {
                    assert_eq!((addr - arena.start) / arena_per_thread, t as u64);
                }
            }
            if let Op::Run { base, .. } = op {
                assert!(
                    (input.start..input.start + input.bytes).contains(&base)
                        || base >= input.start + input.bytes
                );
            }
        }
    }
    assert_eq!(
        out_writes,
        distinct.len() as u64,
        "one output pair per distinct word"
    );
    assert!(
        remote_arena_reads > 0,
        "reducers read every mapper's tables"
    );
}

/// Deep trees (one bucket per cell) and shallow ones: every thread stays inside the mappings,
/// each fill stays small (`run_all` checks both), and a map thread writes only below the top
/// of its heap that the shared replay found, so the reducers read what the mappers wrote.
#[test]
fn metis_threads_stay_in_their_heaps_and_fill_in_small_chunks() {
    use numalab_workloads::metis::{App, Metis, KEYS, PHASE_MAP};
    for (app, spec) in [
        (
            App::Wc,
            "metis-wc:input=256K,vocab=5000,split=16K,buckets=1",
        ),
        (
            App::Wr,
            "metis-wr:input=256K,vocab=3000,split=16K,buckets=2",
        ),
        (App::Wc, "metis-wc:input=512K,vocab=20000,split=16K"),
    ] {
        let threads = 3;
        run_all(spec, threads);
        let name = spec.split(':').next().unwrap();
        let m = Metis::from_params(app, &params(name, KEYS, spec), threads).unwrap();
        let res = m.result();
        let (_, space, mut specs) = build(spec, threads);
        let arena = space.by_name("metis.arena").unwrap();
        let stride = arena.bytes / threads as u64;
        for (t, s) in specs.iter_mut().enumerate() {
            let top = res.tables[t].heap_bytes();
            let ops = drain(s);
            let highest = phase_ops(&ops, PHASE_MAP)
                .iter()
                .flat_map(|op| op.accesses(None).collect::<Vec<_>>())
                .filter(|&(a, _)| (arena.start..arena.start + arena.bytes).contains(&a))
                .map(|(a, _)| a - arena.start - t as u64 * stride)
                .max()
                .unwrap_or(0);
            // a chunk's user data reaches 8 bytes into the next chunk's `prev_size`: at the
            // top, the top chunk's
            assert!(
                highest < top + 8,
                "{spec}: thread {t} touched {highest} of a {top}-byte heap"
            );
            assert!(top > 0);
        }
    }
}

#[test]
fn metis_wr_appends_every_position_and_master_owns_the_input() {
    let (_, space, sums) = run_all("metis-wrmem:input=128K,vocab=2000,split=8K,buckets=32", 3);
    let words = 128 * 1024 / 8;
    let input_lines = 128 * 1024 / 64;
    // three rows of 3 cells × 32 buckets, `btree_t`s of 24 B: 2 304 B a row, malloc'd one
    // after another (2 320-byte chunks, user data 16 B in), 37 lines each; then `map_out`,
    // 288 `keyvals_arr_t`s of 16 B (4 608 B from byte 16: 73 lines), all initialised by the
    // master too (mr_setup)
    let bucket_lines = 3 * 37 + 73;
    assert_eq!(
        sums[0].1.lines_per_phase[&0],
        input_lines + bucket_lines,
        "the master generates the input and sets up the buckets"
    );
    assert!(!sums[1].1.lines_per_phase.contains_key(&0));
    let map_reads: u64 = sums
        .iter()
        .map(|(_, s)| s.lines_per_mapping["metis.input"])
        .sum();
    assert_eq!(
        map_reads,
        2 * input_lines,
        "written once, each split streamed once"
    );
    // each word: one position write into a value block (plus node writes for new words)
    let arena_writes: u64 = sums.iter().map(|(_, s)| s.writes).sum();
    assert!(arena_writes >= words, "{arena_writes}");
    assert!(space.by_name("metis.arena").is_some());
    assert!(
        !space.by_name("metis.input").unwrap().file,
        "wrmem generates its input in memory"
    );
    for (_, s) in &sums {
        assert_eq!(s.phases, vec![0, 1, 2, 3]);
    }
}

// --- SSCA2 -----------------------------------------------------------------------------------

#[test]
fn ssca2_builds_the_csr_and_runs_real_bfs() {
    use numalab_workloads::ssca2::{Bfs, Graph, PHASE_K1, PHASE_K4};
    let g = Graph::rmat(10, 8 << 10, 1);
    assert_eq!(g.targets.len(), 8 << 10);
    assert_eq!(*g.offsets.last().unwrap() as usize, 8 << 10);
    // R-MAT skew: hubs far above the mean out-degree of 8
    let max_deg = (0..1024).map(|v| g.out(v).len()).max().unwrap();
    assert!(max_deg > 60, "{max_deg}");
    let b = Bfs::run(&g, 0);
    assert_eq!(
        *b.levels.last().unwrap(),
        b.order.len(),
        "levels cover every reached vertex"
    );
    for v in 0..1024u32 {
        let dv = b.dist[v as usize];
        if dv == u32::MAX {
            continue;
        }
        for w in g.k4_out(v) {
            assert!(b.dist[w as usize] <= dv + 1, "BFS distances are shortest");
        }
    }

    let threads = 3;
    let spec = "ssca2:log2_vertices=10,sources=2";
    let (_, space, mut specs) = build(spec, threads);
    let end_v = space.by_name("ssca2.endV").unwrap();
    let d = space.by_name("ssca2.d").unwrap();
    let delta = space.by_name("ssca2.delta").unwrap();
    let lock = space.by_name("ssca2.vLock").unwrap();
    let k1_lock = space.by_name("ssca2.k1.vLock").unwrap();
    let mut k1_locked = 0u64;
    let mut slots = Vec::new();
    let (mut discovered, mut delta_updates) = (0u64, 0u64);
    // libgomp's lock and unlock are locked instructions (`lock cmpxchg`, `xchg`)
    let (mut lock_atomics, mut lock_plain, mut other_atomics) = (0u64, 0u64, 0u64);
    for s in specs.iter_mut() {
        let ops = drain(s);
        for op in phase_ops(&ops, PHASE_K1) {
            if let Op::Access {
                addr,
                kind: AccessKind::Atomic,
            } = op
            {
                if (k1_lock.start..k1_lock.start + k1_lock.bytes).contains(&addr) {
                    k1_locked += 1;
                }
            }
            if let Op::Access {
                addr,
                kind: AccessKind::Write,
            } = op
            {
                if (end_v.start..end_v.start + end_v.bytes).contains(&addr) {
                    slots.push((addr - end_v.start) / 4);
                }
            }
        }
        for op in phase_ops(&ops, PHASE_K4) {
            if let Op::Access { addr, kind } = op {
                match (lock.start..lock.start + lock.bytes).contains(&addr) {
                    true if kind == AccessKind::Atomic => lock_atomics += 1,
                    true => lock_plain += 1,
                    false if kind == AccessKind::Atomic => other_atomics += 1,
                    false => {}
                }
            }
            match op {
                Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                } if (d.start..d.start + d.bytes).contains(&addr) => discovered += 1,
                Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                } if (delta.start..delta.start + delta.bytes).contains(&addr) => delta_updates += 1,
                _ => {}
            }
        }
    }
    slots.sort_unstable();
    assert_eq!(
        slots,
        (0..8 << 10).collect::<Vec<u64>>(),
        "every edge placed in its own CSR slot"
    );
    // K1's count pass: u's lock taken and released around each edge's degree update
    assert_eq!(
        k1_locked,
        2 * (8 << 10),
        "two locked instructions per edge in K1"
    );
    let w = numalab_workloads::ssca2::Ssca2::from_params(
        &params("ssca2", numalab_workloads::ssca2::KEYS, spec),
        threads,
    )
    .unwrap();
    let (mut reached, mut preds) = (0u64, 0u64);
    for i in 0..2 {
        let b = w.bfs(i);
        reached += b.order.len() as u64 - 1;
        preds += b.order[b.levels[1]..]
            .iter()
            .map(|&v| b.preds[v as usize].len() as u64)
            .sum::<u64>();
    }
    assert_eq!(
        discovered, reached,
        "each reached vertex discovered once per source"
    );
    assert_eq!(
        delta_updates, preds,
        "one delta update per predecessor edge of every level below the source"
    );
    // each backward update takes and releases its predecessor's lock; each forward edge
    // its target's (one per kept edge, at least one per reached vertex)
    assert!(
        lock_atomics % 2 == 0 && lock_atomics >= 2 * (preds + reached),
        "{lock_atomics} locked operations on the vertex locks, {preds} predecessor edges, {reached} reached"
    );
    assert_eq!(lock_plain, 0, "the locks are only taken and released");
    assert_eq!(other_atomics, 0, "no other locked operations in K4");
    let (_, _, _) = run_all(spec, threads);
}

#[test]
fn ssca2_follows_v2_2_ids_weights_and_schedule() {
    use numalab_workloads::ssca2::{k4_keeps, Bfs, Graph};
    let g = Graph::rmat(12, 8 << 12, 3);
    let n = g.n as usize;
    // genScalData permutes the ids: R-MAT's hubs are not packed at the start of the id space
    let mut by_degree: Vec<usize> = (0..n).collect();
    by_degree.sort_by_key(|&v| std::cmp::Reverse(g.out(v as u32).len()));
    let low = by_degree[..32].iter().filter(|&&v| v < n / 16).count();
    assert!(
        low < 16,
        "{low} of the 32 largest out-degrees in the first 16th of the ids"
    );
    // weights uniform in 1..=N; K4 keeps the ones not divisible by 8
    assert!(g.weights.iter().all(|&w| (1..=n as u32).contains(&w)));
    let kept = g.weights.iter().filter(|&&w| k4_keeps(w)).count() as f64 / g.weights.len() as f64;
    assert!((kept - 7.0 / 8.0).abs() < 0.02, "kept {kept}");
    // the BFS follows kept edges only: every predecessor edge is a kept one
    let mut b = Bfs::run(&g, by_degree[0] as u32);
    for &w in &b.order[1..] {
        for &v in &b.preds[w as usize] {
            assert!(g.k4_out(v).any(|x| x == w), "{v} -> {w} is not a kept edge");
        }
    }
    // schedule(dynamic): a big level's edges spread within one vertex's cost of each other
    let threads = 6;
    b.schedule_dynamic(&g, threads);
    let l = (0..b.levels.len() - 1)
        .max_by_key(|&l| b.levels[l + 1] - b.levels[l])
        .unwrap();
    let mut load = vec![0usize; threads];
    let mut biggest = 0;
    for i in b.levels[l]..b.levels[l + 1] {
        let cost = 1 + g.out(b.order[i]).len();
        load[b.owner[i] as usize] += cost;
        biggest = biggest.max(cost);
    }
    let (lo, hi) = (load.iter().min().unwrap(), load.iter().max().unwrap());
    assert!(
        hi - lo <= biggest,
        "loads {load:?}, largest vertex {biggest}"
    );
}

#[test]
fn ssca2_k4_locks_every_update_and_resets_in_static_chunks() {
    use numalab_workloads::ssca2::PHASE_K4;
    let threads = 4;
    let spec = "ssca2:log2_vertices=10,sources=1";
    let (_, space, mut specs) = build(spec, threads);
    let lock = space.by_name("ssca2.vLock").unwrap();
    let d = space.by_name("ssca2.d").unwrap();
    let w = numalab_workloads::ssca2::Ssca2::from_params(
        &params("ssca2", numalab_workloads::ssca2::KEYS, spec),
        threads,
    )
    .unwrap();
    let reached = w.bfs(0).order.len() as u64;
    let chunk = 1024 / threads as u64;
    for (t, s) in specs.iter_mut().enumerate() {
        let ops = phase_ops(&drain(s), PHASE_K4);
        let in_lock = |a: u64| (lock.start..lock.start + lock.bytes).contains(&a);
        // omp_test_lock / omp_set_lock (`lock cmpxchg`) then omp_unset_lock (`xchg`), both
        // locked instructions, in pairs on the same lock
        let locked: Vec<u64> = ops
            .iter()
            .filter_map(|op| match op {
                Op::Access {
                    addr,
                    kind: AccessKind::Atomic,
                } if in_lock(*addr) => Some(*addr),
                Op::Access { addr, .. } if in_lock(*addr) => {
                    panic!("thread {t}: a lock accessed other than by a locked instruction")
                }
                _ => None,
            })
            .collect();
        assert!(!locked.is_empty(), "thread {t} took no lock");
        assert!(
            locked.chunks(2).all(|p| p.len() == 2 && p[0] == p[1]),
            "thread {t}: every lock taken is released"
        );
        // the reset after the source, between the backward sweep's last barrier and its own
        // two: d written for the vertices of this thread's chunks of the BFS order
        // (schedule(static, N/T)), none for a thread whose chunk starts past the reached ones
        let bars: Vec<usize> = (0..ops.len())
            .filter(|&i| matches!(ops[i], Op::Barrier))
            .collect();
        let reset = &ops[bars[bars.len() - 3]..bars[bars.len() - 2]];
        let d_writes = reset
            .iter()
            .filter(|op| {
                matches!(op, Op::Access { addr, kind: AccessKind::Write }
                    if (d.start..d.start + d.bytes).contains(addr))
            })
            .count() as u64;
        let mine = reached
            .min((t as u64 + 1) * chunk)
            .saturating_sub(t as u64 * chunk);
        assert_eq!(d_writes, mine, "thread {t}: reached {reached}");
    }
}

// --- SPECjbb-like ------------------------------------------------------------------------------

/// Every op of each thread, the threads' fills taken in turn (one fill each per round), as
/// the engine asks for them when threads advance together.
fn interleave(specs: &mut [numalab_core::workload::ThreadSpec]) -> Vec<Vec<Op>> {
    let mut all = vec![Vec::new(); specs.len()];
    let mut live = vec![true; specs.len()];
    let mut buf = Vec::new();
    while live.iter().any(|l| *l) {
        for (t, s) in specs.iter_mut().enumerate() {
            if live[t] {
                buf.clear();
                live[t] = s.program.fill(&mut buf);
                all[t].extend_from_slice(&buf);
            }
        }
    }
    all
}

/// The PLABs thread ops wrote in the warehouses' area of the old generation (the load's
/// promotion), as offsets in PLABs from its start.
fn jbb_load_plabs(ops: &[Op], old: u64, area: u64) -> Vec<u64> {
    use numalab_workloads::jbb::OLD_PLAB_BYTES;
    ops.iter()
        .filter_map(|op| match *op {
            Op::Run {
                base,
                kind: AccessKind::Write,
                ..
            } if (old..old + area).contains(&base) => {
                assert_eq!((base - old) % OLD_PLAB_BYTES, 0, "PLABs are aligned");
                Some((base - old) / OLD_PLAB_BYTES)
            }
            _ => None,
        })
        .collect()
}

#[test]
fn jbb_buffers_are_taken_at_the_tops_in_the_order_threads_ask() {
    use numalab_workloads::jbb::{OLD_PLAB_BYTES, PHASE_GC, PHASE_LOAD, PHASE_TXN};
    let spec =
        "jbb:eden=4M,survivor=1M,warehouse=1M,items=1000,tlab=64K,alloc=2K,transactions=3000,rampup=0";
    let threads = 2;
    let (w, space, sums) = run_all(spec, threads);
    assert!(by_spec(&w.name(), threads).is_ok());
    // 64 TLABs of 64K, 32 per worker, 32 transactions each: a collection every 1024
    for (_, s) in &sums {
        assert_eq!(
            s.barriers,
            2 + 2 + 2 * 2,
            "load, the collection that promotes the warehouses, then two young collections"
        );
        assert!(s.lines_per_phase[&PHASE_GC] > 0);
        let reads = s.reads + s.dependent_reads + s.rmws;
        assert!(reads > s.writes, "transactions are read-mostly");
    }
    let eden = space.by_name("jbb.eden").unwrap().start;
    let shared = space.by_name("jbb.shared").unwrap().start;
    let s0 = space.by_name("jbb.survivor0").unwrap();
    let old = space.by_name("jbb.old").unwrap().start;
    let area = 2 * (1 << 20);
    let plabs_each = (1 << 20) / OLD_PLAB_BYTES;

    // threads advancing together: the old generation's top hands the PLABs out as they are
    // asked for, so the two GC threads' PLABs alternate through the warehouses' area
    let (_, _, mut specs) = build(spec, threads);
    let ops = interleave(&mut specs);
    let mut owner = vec![usize::MAX; 2 * plabs_each as usize];
    for (t, ops) in ops.iter().enumerate() {
        let plabs = jbb_load_plabs(ops, old, area);
        assert_eq!(plabs.len() as u64, plabs_each, "a warehouse's worth each");
        for k in plabs {
            assert_eq!(owner[k as usize], usize::MAX, "PLAB {k} taken twice");
            owner[k as usize] = t;
        }
    }
    let switches = owner.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches > owner.len() / 2,
        "PLABs alternate between the threads: {switches} switches in {}",
        owner.len()
    );
    // per worker, per cycle since the load: the eden TLABs it allocated in
    let mut tlabs: Vec<std::collections::BTreeMap<u64, std::collections::BTreeSet<u64>>> =
        vec![Default::default(); threads];
    let warehouses = old..old + area;
    for (t, ops) in ops.iter().enumerate() {
        // the worker never writes its warehouse in place: it allocates it in eden, and the
        // promoting collection (the load's last step) copies it, each GC thread a whole PLAB
        // at a time into its own PLABs
        assert!(phase_ops(ops, PHASE_LOAD).iter().all(|op| match *op {
            Op::Run {
                base, lines, kind, ..
            } if warehouses.contains(&base) => {
                kind == AccessKind::Write
                    && lines as u64 == OLD_PLAB_BYTES / 64
                    && (base - old) % OLD_PLAB_BYTES == 0
            }
            Op::Access { addr, .. } => !warehouses.contains(&addr),
            _ => true,
        }));
        // cycles of transactions begun: each pause (the load's collection, then every young
        // one) ends by entering the transactions phase again
        let (mut company, mut cycle, mut phase) = (0, 0u64, PHASE_LOAD);
        for op in ops {
            match *op {
                Op::Phase { id } => {
                    phase = id;
                    cycle += (id == PHASE_TXN) as u64;
                }
                Op::Run {
                    base,
                    kind: AccessKind::Write,
                    ..
                } if warehouses.contains(&base) => {
                    assert_eq!(
                        (cycle, phase),
                        (0, PHASE_LOAD),
                        "written by the collection that ends the load, part of the load"
                    )
                }
                Op::Run {
                    base,
                    kind: AccessKind::Write,
                    ..
                } if cycle >= 1 && (eden..eden + (4 << 20)).contains(&base) => {
                    let tlab = (base - eden) / (64 << 10);
                    tlabs[t].entry(cycle).or_default().insert(tlab);
                }
                Op::Access {
                    addr,
                    kind: AccessKind::ReadModifyWrite,
                } if addr == shared + 64 => company += 1,
                _ => {}
            }
        }
        assert!(
            company > 3000 / 3,
            "payments lock the shared company object: {company}"
        );
        // the monitor is taken and released by compare-and-swap around each update, and
        // every TLAB is bumped off eden's top by one
        let on = |a: u64, k: AccessKind| Op::Access { addr: a, kind: k };
        let locked_updates = ops
            .windows(3)
            .filter(|w| {
                w == &[
                    on(shared + 64, AccessKind::Atomic),
                    on(shared + 64, AccessKind::ReadModifyWrite),
                    on(shared + 64, AccessKind::Atomic),
                ]
            })
            .count();
        assert_eq!(
            locked_updates, company,
            "each company update under its monitor"
        );
        let bumps = ops
            .iter()
            .filter(|op| **op == on(shared, AccessKind::Atomic))
            .count();
        assert!(bumps > 0, "TLABs taken by an atomic bump of eden's top");
        let gc = phase_ops(ops, PHASE_GC);
        assert!(gc.iter().any(|op| matches!(op, Op::Access { addr, kind: AccessKind::Write } if (s0.start..s0.start + s0.bytes).contains(addr))));
    }
    // two workers never get the same TLAB in a cycle, and together they use every TLAB of
    // eden once in each full cycle (the last, 952 transactions each, is not)
    for (cycle, mine) in &tlabs[0] {
        let theirs = &tlabs[1][cycle];
        assert!(mine.is_disjoint(theirs), "cycle {cycle}");
        if *cycle < 3 {
            assert_eq!(mine.len() + theirs.len(), 64, "cycle {cycle}");
        }
    }

    // a thread that runs ahead of the other takes the buffers at the top: drained first,
    // thread 0 gets the warehouses' first half, thread 1 the rest (no buffer is reserved for
    // a thread that has not asked yet)
    let (_, _, mut specs) = build(spec, threads);
    let first = jbb_load_plabs(&drain(&mut specs[0]), old, area);
    let second = jbb_load_plabs(&drain(&mut specs[1]), old, area);
    assert_eq!(first, (0..plabs_each).collect::<Vec<_>>());
    assert_eq!(second, (plabs_each..2 * plabs_each).collect::<Vec<_>>());

    let msg = by_spec("jbb:tlab=1K", 2).err().unwrap().to_string();
    assert!(msg.contains("4K <= tlab"), "{msg}");
}

// --- NAS SP and LU ---------------------------------------------------------------------------

/// (j, k) of the rows of the field at `m` touched by `ops` with kind `kind` (rows of
/// `row_bytes`, ny per plane; a run starting in the line before a row belongs to that row).
fn rows_of(
    ops: &[Op],
    m: &numalab_workloads::inspect::Mapping,
    row_bytes: u64,
    ny: u64,
    kind: AccessKind,
) -> Vec<(u64, u64)> {
    let start = m.start;
    ops.iter()
        .filter_map(|op| match *op {
            Op::Run { base, kind: k, .. }
                if k == kind && base + 63 >= start && base < start + m.bytes =>
            {
                let row = (base.max(start) - start + 63) / row_bytes;
                Some((row % ny, row / ny))
            }
            _ => None,
        })
        .collect()
}

/// SPECjbb measures after a ramp-up: by default two collections' worth of transactions, phase
/// `rampup` with their collections, so that every page of the survivor spaces the measured
/// interval's collections copy into was written before it (a real interval follows dozens of
/// collections); the measured phase holds exactly `transactions` per worker.
#[test]
fn jbb_measures_after_a_rampup_that_has_used_every_young_space() {
    use numalab_workloads::jbb::{PHASE_GC, PHASE_RAMPUP, PHASE_TXN};
    let spec =
        "jbb:eden=4M,survivor=1M,warehouse=1M,items=1000,tlab=64K,alloc=2K,transactions=3000";
    let threads = 2;
    let (w, space, _) = build(spec, threads);
    // 64 TLABs of 64K, 32 per worker, 32 transactions each: a collection every 1024
    assert!(w.name().contains("rampup=2048"), "{}", w.name());
    let survivors: Vec<_> = ["jbb.survivor0", "jbb.survivor1"]
        .iter()
        .map(|n| space.by_name(n).unwrap())
        .collect();
    let page_of = |a: u64| -> Option<(usize, u64)> {
        survivors
            .iter()
            .position(|m| (m.start..m.start + m.bytes).contains(&a))
            .map(|k| (k, (a - survivors[k].start) / 4096))
    };
    let (_, _, mut specs) = build(spec, threads);
    let ops = interleave(&mut specs);
    for (t, ops) in ops.iter().enumerate() {
        let (mut phase, mut txn_entries, mut rampup_gcs, mut gcs) = (0, 0, 0, 0);
        let mut warm = std::collections::HashSet::new();
        let mut measured_pages = std::collections::HashSet::new();
        // transactions: one allocation Run in eden each, counted per phase
        let eden = space.by_name("jbb.eden").unwrap();
        let mut allocs = std::collections::HashMap::<u16, u64>::new();
        let mut last = None;
        for op in ops {
            match *op {
                Op::Phase { id } => {
                    if last == Some(Op::Barrier) && id == PHASE_RAMPUP && phase != 0 {
                        rampup_gcs += 1;
                    }
                    if id == PHASE_GC {
                        gcs += 1;
                    }
                    if id == PHASE_TXN {
                        txn_entries += 1;
                    }
                    phase = id;
                }
                Op::Access {
                    addr,
                    kind: AccessKind::Write,
                } => {
                    if let Some(p) = page_of(addr) {
                        if phase == PHASE_RAMPUP {
                            warm.insert(p);
                        } else if phase == PHASE_GC {
                            measured_pages.insert(p);
                        }
                    }
                }
                Op::Run {
                    base,
                    kind: AccessKind::Write,
                    ..
                } if (eden.start..eden.start + eden.bytes).contains(&base)
                    && (phase == PHASE_RAMPUP || phase == PHASE_TXN) =>
                {
                    *allocs.entry(phase).or_default() += 1;
                }
                _ => {}
            }
            last = Some(*op);
        }
        // the load's collection ends in the ramp-up; then the ramp-up's two collections (each
        // a pause entered and left in phase `rampup`), then the interval's
        assert!(rampup_gcs >= 2, "thread {t}: {rampup_gcs} ramp-up pauses");
        assert_eq!(gcs, 2, "thread {t}: collections at 3072 and 4096 of 5048");
        assert!(txn_entries >= 1);
        assert_eq!(
            allocs[&PHASE_TXN], 3000,
            "thread {t}: measured transactions"
        );
        assert_eq!(
            allocs[&PHASE_RAMPUP], 2048,
            "thread {t}: ramp-up transactions"
        );
        assert!(
            !measured_pages.is_empty(),
            "thread {t}: the interval copies"
        );
        // both survivors were in use before the interval
        for k in 0..2 {
            assert!(
                warm.iter().any(|p| p.0 == k),
                "thread {t}: survivor {k} unused"
            );
        }
    }
    // over both threads: every survivor page the interval's collections write was written by
    // the ramp-up's (the interval has no first touch of the young spaces)
    let warm: std::collections::HashSet<_> = ops
        .iter()
        .flat_map(|o| {
            let mut phase = 0;
            o.iter()
                .filter_map(move |op| match *op {
                    Op::Phase { id } => {
                        phase = id;
                        None
                    }
                    Op::Access {
                        addr,
                        kind: AccessKind::Write,
                    } => Some((phase, addr)),
                    _ => None,
                })
                .collect::<Vec<_>>()
        })
        .filter_map(|(ph, a)| page_of(a).map(|p| (ph, p)))
        .collect();
    let before: std::collections::HashSet<_> = warm
        .iter()
        .filter(|(ph, _)| *ph == PHASE_RAMPUP)
        .map(|x| x.1)
        .collect();
    for (ph, p) in &warm {
        if *ph == PHASE_GC {
            assert!(
                before.contains(p),
                "survivor page {p:?} first written in the interval"
            );
        }
    }

    // rampup=0 measures from the load's end, as before the ramp-up existed
    let (w0, _, _) = build(&format!("{spec},rampup=0"), threads);
    assert!(w0.name().contains("rampup=0"));
}

#[test]
fn sp_z_solve_crosses_every_slab_while_the_rest_stays_local() {
    use numalab_workloads::npb_sp::PHASE_Z_SOLVE;
    let threads = 4;
    let (_, space, mut specs) = build("npb-sp:class=S,niter=1", threads);
    let (nx, ny, nz) = (13u64, 13u64, 12u64);
    let total: u64 = space.mappings.iter().map(|m| m.bytes).sum();
    assert_eq!(total, 176 * nx * ny * nz, "176 B per point (§3.5)");
    let rhs = space.by_name("sp.rhs").unwrap();
    let row_bytes = nx * 5 * 8;
    let ops = drain(&mut specs[1]);
    let z = rows_of(
        &phase_ops(&ops, PHASE_Z_SOLVE),
        rhs,
        row_bytes,
        ny,
        AccessKind::ReadModifyWrite,
    );
    let planes: std::collections::BTreeSet<u64> = z.iter().map(|r| r.1).collect();
    assert_eq!(planes.len() as u64, nz, "z-lines run through every plane");
    assert!(
        z.iter().all(|&(j, _)| (4..7).contains(&j)),
        "j-band 4..7 of thread 1"
    );
    // x_solve: only the thread's own (k, j) rows
    let x = rows_of(
        &phase_ops(&ops, 3),
        rhs,
        row_bytes,
        ny,
        AccessKind::ReadModifyWrite,
    );
    let (lo, hi) = numalab_workloads::emit::static_range(ny * nz, threads, 1);
    assert!(x.iter().all(|&(j, k)| (lo..hi).contains(&(k * ny + j))));
    let (_, _, _) = run_all("npb-sp:class=S,niter=2", 3);
}

#[test]
fn lu_sweeps_follow_the_wavefront_plane_by_plane() {
    use numalab_workloads::npb_lu::{PHASE_LOWER, PHASE_UPPER};
    let threads = 3;
    let (_, space, mut specs) = build("npb-lu:class=S,itmax=1", threads);
    let (nx, ny) = (13u64, 13u64);
    let total: u64 = space.mappings.iter().map(|m| m.bytes).sum();
    assert_eq!(total, 136 * nx * ny * 12, "136 B per point (§3.4)");
    let rsd = space.by_name("lu.rsd").unwrap();
    let row_bytes = nx * 40;
    for (t, s) in specs.iter_mut().enumerate() {
        let ops = drain(s);
        for (phase, ascending) in [(PHASE_LOWER, true), (PHASE_UPPER, false)] {
            let p = phase_ops(&ops, phase);
            // barriers before the thread's first plane: it trails thread t−1 by one step
            let lead = p
                .iter()
                .take_while(|op| !matches!(op, Op::Run { .. }))
                .filter(|op| matches!(op, Op::Barrier))
                .count();
            assert_eq!(lead, t, "thread {t} starts {t} steps late");
            let rows = rows_of(&p, rsd, row_bytes, ny, AccessKind::ReadModifyWrite);
            let mut planes: Vec<u64> = rows.iter().map(|r| r.1).collect();
            planes.dedup();
            let mut want: Vec<u64> = (1..11).collect();
            if !ascending {
                want.reverse();
            }
            assert_eq!(
                planes, want,
                "thread {t} phase {phase}: interior planes in order"
            );
            let (jlo, jhi) = numalab_workloads::emit::static_range(ny, threads, t);
            assert!(
                rows.iter().all(|&(j, _)| (jlo..jhi).contains(&j)),
                "its j-band"
            );
        }
    }
    let (_, _, sums) = run_all("npb-lu:class=S,itmax=2", 3);
    // init 2, per iteration: rsd 1, two sweeps of 10 + 2 steps, update 1, rhs 3
    assert_eq!(sums[0].1.barriers, 2 + 2 * (1 + 2 * 12 + 1 + 3));
}

// --- NAS UA ----------------------------------------------------------------------------------

#[test]
fn ua_mesh_adapts_around_the_moving_source() {
    use numalab_workloads::npb_ua::{self, History};
    let class = npb_ua::CLASSES[0];
    let h = History::run(&class, class.niter);
    assert_eq!(h.meshes.len(), h.adaptations.len() + 1);
    assert_eq!(h.adaptations.len() as u64, class.niter / npb_ua::FRE - 1);
    let sizes: Vec<usize> = h.meshes.iter().map(|m| m.cells.len()).collect();
    assert!(sizes.iter().all(|&n| n as u64 <= class.lelt), "{sizes:?}");
    assert!(
        h.meshes[0]
            .cells
            .iter()
            .any(|c| c.level == class.refine_max),
        "refined to refine_max at the source"
    );
    // the refined region moves: some meshes differ from the first
    assert!(h.meshes.iter().any(|m| m.cells != h.meshes[0].cells));
    for (i, a) in h.adaptations.iter().enumerate() {
        let next = &h.meshes[i + 1];
        assert_eq!(a.moved_from.len(), next.cells.len());
        let mut seen = a.moved_from.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(
            seen.len(),
            next.cells.len(),
            "each live slot moves to one new index"
        );
        assert!(a.moved_from.iter().all(|&s| (s as u64) < class.lelt));
    }
    for m in &h.meshes {
        // leaves tile the cube: volumes sum to 1
        let vol: f64 = m.cells.iter().map(|c| 0.125f64.powi(c.level as i32)).sum();
        assert!((vol - 1.0).abs() < 1e-9, "{vol}");
        // a mortar face joins two elements, or a coarse face and up to 4 fine ones
        let mut users = vec![0u32; m.nfaces as usize];
        for f in m.faces.iter().flatten().filter(|&&f| f != u32::MAX) {
            users[*f as usize] += 1;
        }
        let bad: Vec<u32> = users
            .iter()
            .copied()
            .filter(|u| !(2..=5).contains(u))
            .collect();
        assert!(
            bad.is_empty(),
            "{} cells: faces with {bad:?} users",
            m.cells.len()
        );
    }
}

#[test]
fn ua_renumbering_hands_elements_to_other_threads() {
    use numalab_workloads::npb_ua::{PHASE_ADAPT, PHASE_DIFFUSION};
    let (_, space, mut specs) = build("npb-ua:class=S,niter=10", 3);
    let f0 = space.by_name("ua.field0").unwrap();
    let ops = drain(&mut specs[0]);
    // elements of field 0 (t) thread 0 updates in the diffusion phase, before and after the
    // adaptation at step 5
    let mut sets: Vec<std::collections::BTreeSet<u64>> = vec![Default::default()];
    let mut cur = None;
    for op in &ops {
        match *op {
            Op::Phase { id } => {
                if id == PHASE_ADAPT && cur != Some(PHASE_ADAPT) {
                    sets.push(Default::default());
                }
                cur = Some(id);
            }
            Op::Run {
                base,
                kind: AccessKind::ReadModifyWrite,
                ..
            } if cur == Some(PHASE_DIFFUSION)
                && (f0.start..f0.start + f0.bytes).contains(&base) =>
            {
                sets.last_mut().unwrap().insert((base - f0.start) / 1000);
            }
            _ => {}
        }
    }
    assert_eq!(sets.len(), 2, "one adaptation in 10 steps");
    assert!(!sets[0].is_empty() && !sets[1].is_empty());
    let (_, _, sums) = run_all("npb-ua:class=S,niter=6", 3);
    assert!(sums
        .iter()
        .all(|(_, s)| s.lines_per_phase.contains_key(&PHASE_ADAPT)));
}

#[test]
fn ua_transfb_locks_every_mortar_update() {
    // NPB's transfb takes the point's lock, updates tmor(ig) and releases it, for every
    // collocation point of every face (transfer.f): two locked instructions per update
    use numalab_workloads::npb_ua::{
        MORTAR_ARRAYS, OMP_LOCK_BYTES, PHASE_CONVECT, PHASE_DIFFUSION, UPDATES_PER_FACE,
    };
    let (_, space, mut specs) = build("npb-ua:class=S,niter=2", 2);
    let locks = space.by_name("ua.locks").unwrap();
    let mortars: Vec<_> = (0..MORTAR_ARRAYS)
        .map(|i| space.by_name(&format!("ua.mortar{i}")).unwrap())
        .collect();
    let in_locks = |a: u64| (locks.start..locks.start + locks.bytes).contains(&a);
    let (mut updates, mut atomics, mut other, mut initialised) = (0u64, 0u64, 0u64, 0u64);
    for s in specs.iter_mut() {
        let ops = drain(s);
        let mut cur = None;
        for w in ops.windows(3) {
            match w[0] {
                Op::Phase { id } => cur = Some(id),
                // omp_init_lock in the set-up
                Op::Run {
                    base,
                    lines,
                    kind: AccessKind::Write,
                    ..
                } if in_locks(base) => initialised += lines as u64,
                _ => {}
            }
            if !matches!(cur, Some(PHASE_CONVECT) | Some(PHASE_DIFFUSION)) {
                continue;
            }
            if let [Op::Access {
                addr: a,
                kind: AccessKind::Atomic,
            }, Op::Access {
                addr: point,
                kind: AccessKind::ReadModifyWrite,
            }, Op::Access {
                addr: b,
                kind: AccessKind::Atomic,
            }] = *w
            {
                if a == b && in_locks(a) {
                    // the update between them is of the lock's own mortar point
                    let ig = (a - locks.start) / OMP_LOCK_BYTES;
                    assert!(
                        mortars.iter().any(|m| point == m.start + ig * 8),
                        "lock {ig} around an update of another point"
                    );
                    updates += 1;
                }
            }
            if let Op::Access { addr, kind } = w[0] {
                match (in_locks(addr), kind) {
                    (true, AccessKind::Atomic) => atomics += 1,
                    (true, _) => other += 1,
                    _ => {}
                }
            }
        }
    }
    assert!(
        updates > 0 && updates % UPDATES_PER_FACE == 0,
        "{updates} locked updates"
    );
    assert_eq!(
        atomics,
        2 * updates,
        "every lock taken and released once per update"
    );
    assert_eq!(
        other, 0,
        "the locks are only taken and released in the steps"
    );
    assert!(
        initialised * 64 >= locks.bytes - 64,
        "omp_init_lock writes every lock: {initialised} lines of {} bytes",
        locks.bytes
    );
}

#[test]
fn new_workload_names_round_trip() {
    for (spec, threads) in [
        ("npb-is:class=S,niter=2,scale=0.5", 3),
        ("npb-ft:class=W,niter=1,scale=0.5", 2),
        ("npb-ua:class=S,niter=10", 2),
        ("npb-sp:class=S,niter=3", 2),
        ("npb-lu:class=S,itmax=3", 2),
        ("matmul:n=512,elem=double,init=parallel", 2),
        ("lu-blocked:n=1024,b=128,map=random,interleave=0", 2),
        ("streamcluster:input=simlarge,pgains=10", 2),
        ("ssca2:log2_vertices=12,sources=4", 2),
        ("jbb:eden=64M,transactions=100,pretouch=1", 2),
        ("metis-wr:input=16M,vocab=1000", 2),
        ("lbm-like:steps=2,scale=0.5", 2),
        ("gems-like:nx=64,ny=64,nz=64,steps=1", 1),
        ("mcf-like:nodes=1000,arcs=10000,pivots=5", 1),
        ("omnetpp-like:events=10,scale=0.1", 1),
        ("libquantum-like:gates=3", 1),
        ("gcc-like:inputs=1,passes=1,scale=0.1", 1),
        ("perlbench-like:statements=10,scale=0.01", 1),
        ("bzip2-like:input_mb=1,passes=1", 1),
        ("gobmk-like:nodes=10,scale=0.1", 1),
        ("hmmer-like:sequences=2,db_mb=1", 1),
        ("h264ref-like:frames=1,width=64,height=64", 1),
        ("astar-like:queries=2,side=64", 1),
        ("mix:gcc-like(inputs=1)*2+lbm-like*1,scale=0.1", 1),
    ] {
        let w = by_spec(spec, threads).unwrap_or_else(|e| panic!("{spec}: {e}"));
        let again = by_spec(&w.name(), threads).unwrap_or_else(|e| panic!("{}: {e}", w.name()));
        assert_eq!(again.name(), w.name(), "{spec}");
        assert_eq!(again.threads(), w.threads(), "{spec}");
    }
}

#[test]
fn metis_sizes_its_buckets_as_mr_setup_does() {
    use numalab_workloads::metis::metis_buckets_per_cell;
    // few keys: 16 reduce tasks per CPU win, 64 over 4 cells
    assert_eq!(metis_buckets_per_cell(1000, 10, 4), 16);
    // 64 MB of 8-byte words from 100 000 over 64 mappers: ≈ 30 186 keys each, 10 a bucket,
    // 3 018 → the next prime, 3 019 tasks, over 64 cells
    assert_eq!(metis_buckets_per_cell((64 << 20) / 8, 100_000, 64), 48);
    // a vocabulary of billions is summed in no time, and a larger one gives more keys
    let big = metis_buckets_per_cell(1 << 30, u32::MAX as u64, 64);
    assert!(big > metis_buckets_per_cell(1 << 30, 1 << 24, 64), "{big}");
    // more text per mapper, more distinct keys, more buckets
    assert!(
        metis_buckets_per_cell((1 << 30) / 8, 1_000_000, 64)
            > metis_buckets_per_cell((64 << 20) / 8, 1_000_000, 64)
    );
}
