//! `Op::Gather` (an indexed gather over the program's gather table) must simulate exactly
//! what the same references emitted one `Op::Access` each do, also when an epoch's end
//! interrupts a gather half-way (the engine keeps its rest and goes on there).

use numalab_core::workload::{AddressSpace, GatherTable, ThreadProgram, ThreadSpec};
use numalab_core::{AccessKind, MapOptions, Op, TaskId, Workload};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};

/// Rows of random indices into a vector of `elems` f64, gathered by every thread; each row
/// is followed by some compute, and by a write of the thread's own line.
struct Sparse {
    threads: usize,
    elems: u32,
    rows: usize,
    row_len: usize,
    as_gathers: bool,
}

struct Program {
    table: GatherTable,
    ops: Vec<Op>,
}

impl ThreadProgram for Program {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        out.append(&mut self.ops);
        false
    }
    fn gather_table(&self) -> Option<GatherTable> {
        Some(self.table.clone())
    }
}

impl Workload for Sparse {
    fn name(&self) -> String {
        format!("sparse-test:gathers={}", self.as_gathers)
    }
    fn threads(&self) -> usize {
        self.threads
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let v = mem.mmap(TaskId(0), "v", self.elems as u64 * 8, MapOptions::default());
        let out = mem.mmap(
            TaskId(0),
            "out",
            self.threads as u64 * 64,
            MapOptions::default(),
        );
        // splitmix64: a fixed pseudo-random index table, sorted within rows like colidx
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
            let mut z = x;
            z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            z ^ (z >> 31)
        };
        let mut index = Vec::new();
        for _ in 0..self.rows {
            let mut row: Vec<u32> = (0..self.row_len)
                .map(|_| (next() % self.elems as u64) as u32)
                .collect();
            row.sort_unstable();
            index.extend(row);
        }
        let table = GatherTable {
            index: index.into(),
            elem_shift: 3,
        };
        (0..self.threads)
            .map(|t| {
                let mut ops = Vec::new();
                for r in 0..self.rows {
                    let first = (r * self.row_len) as u32;
                    let g = Op::Gather {
                        base: v,
                        first,
                        count: self.row_len as u16,
                        kind: AccessKind::Read,
                    };
                    if self.as_gathers {
                        ops.push(g);
                    } else {
                        ops.extend(
                            g.accesses(Some(&table))
                                .map(|(addr, kind)| Op::Access { addr, kind }),
                        );
                    }
                    ops.push(Op::Compute {
                        cycles: 50,
                        instructions: 40,
                    });
                    ops.push(Op::Access {
                        addr: out + t as u64 * 64,
                        kind: AccessKind::Write,
                    });
                }
                ThreadSpec {
                    task: TaskId(0),
                    program: Box::new(Program {
                        table: table.clone(),
                        ops,
                    }),
                }
            })
            .collect()
    }
}

fn run(as_gathers: bool, epoch_ns: f64, thp: ThpMode) -> SimResult {
    let m = numalab_machine::preset("opteron6272-8n").expect("preset exists");
    let w = Sparse {
        threads: 4,
        elems: 200_000,
        rows: 300,
        row_len: 150,
        as_gathers,
    };
    let cfg = SimConfig {
        pinning: Pinning::Sockorder,
        epoch_ns,
        thp,
        sample_period: 97,
        ..Default::default()
    };
    let mut r = simulate(&m, &w, cfg).expect("simulation runs");
    r.host_seconds = 0.0;
    r.workload.clear();
    r
}

#[test]
fn gathers_simulate_like_their_accesses() {
    // short epochs: many gathers are cut by an epoch's end and resumed in the next one;
    // with THP the gathers' "same page as the last translation" shortcut spans 2 MiB
    for thp in [ThpMode::Never, ThpMode::Always] {
        for epoch_ns in [20_000.0, 700.0] {
            let g = run(true, epoch_ns, thp);
            let a = run(false, epoch_ns, thp);
            assert_eq!(g.memory_references, 4 * 300 * (150 + 1));
            assert!(g.per_thread.iter().all(|t| t.faults > 0));
            assert_eq!(
                serde_json::to_string(&g).unwrap(),
                serde_json::to_string(&a).unwrap(),
                "epoch {epoch_ns} ns, THP {thp:?}: Gather ops and Access ops differ"
            );
        }
    }
}
