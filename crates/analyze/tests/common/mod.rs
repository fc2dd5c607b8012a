//! The THP false-sharing scenario shared by the simulator-backed tests: two threads on nodes 0
//! and 1 write disjoint halves of each of 4 regions of 2 MiB, on a 4-node machine.

#![allow(dead_code)]

use numalab_core::{
    AccessKind, AddressSpace, CpuId, MapOptions, Op, TaskId, ThreadProgram, ThreadSpec, Workload,
};
use numalab_machine::{CacheGeom, Machine};
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};

pub const MB2: u64 = 2 << 20;
pub const REGIONS: u64 = 4;
/// One sample every this many references.
pub const SAMPLE_PERIOD: u64 = 61;

pub struct Halves;
struct Fixed(Vec<Op>);

impl ThreadProgram for Fixed {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        out.append(&mut self.0);
        false
    }
}

impl Workload for Halves {
    fn name(&self) -> String {
        "halves".into()
    }
    fn threads(&self) -> usize {
        2
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let base = mem.mmap(TaskId(0), "data", REGIONS * MB2, MapOptions::default());
        (0..2u64)
            .map(|t| {
                let mut ops = Vec::new();
                for _ in 0..20 {
                    for r in 0..REGIONS {
                        ops.push(Op::Run {
                            base: base + r * MB2 + t * MB2 / 2,
                            lines: (MB2 / 2 / 64) as u32,
                            stride_bytes: 64,
                            kind: AccessKind::Write,
                        });
                    }
                }
                ThreadSpec {
                    task: TaskId(0),
                    program: Box::new(Fixed(ops)),
                }
            })
            .collect()
    }
}

/// The 4-node Opteron preset with caches shrunk (32 KiB private, 256 KiB LLC) so that the
/// 8 MiB working set misses them, as policies' scenarios do.
pub fn machine() -> Machine {
    let mut m = numalab_machine::preset("opteron6164he-4n").expect("preset exists");
    m.core.private_cache = CacheGeom {
        bytes: 32 << 10,
        ways: 8,
    };
    for n in &mut m.nodes {
        n.llc = Some(CacheGeom {
            bytes: 256 << 10,
            ways: 16,
        });
    }
    m
}

/// The scenario simulated with `thp`, CPUs 0 and 6 (nodes 0 and 1).
pub fn run(thp: ThpMode) -> SimResult {
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(0), CpuId(6)]),
        thp,
        sample_period: SAMPLE_PERIOD,
        ..Default::default()
    };
    simulate(&machine(), &Halves, cfg).unwrap()
}
