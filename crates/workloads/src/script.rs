//! A scripted workload: mappings plus one op list per thread, built from the mappings' start
//! addresses. For hand-built scenarios that pin a mechanism (the simulator's and the policies'
//! tests) and small experiments; the mappings are named `m0`, `m1`, ... in task 0.

use numalab_core::workload::{AddressSpace, MapOptions, Op, ThreadProgram, ThreadSpec, Workload};
use numalab_core::TaskId;

/// `ops` builds thread `t`'s ops from the mappings' start addresses: a fn, a closure or a boxed
/// closure.
pub struct Script<F> {
    /// (length in bytes, options) of each mapping, in order.
    pub maps: Vec<(u64, MapOptions)>,
    pub threads: usize,
    pub ops: F,
}

/// A thread's whole op list, handed over in one fill.
struct Fixed(Vec<Op>);

impl ThreadProgram for Fixed {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        out.append(&mut self.0);
        false
    }
}

impl<F: Fn(&[u64], usize) -> Vec<Op> + Send + Sync> Workload for Script<F> {
    fn name(&self) -> String {
        "script".into()
    }
    fn threads(&self) -> usize {
        self.threads
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let bases: Vec<u64> = self
            .maps
            .iter()
            .enumerate()
            .map(|(i, (len, o))| mem.mmap(TaskId(0), &format!("m{i}"), *len, o.clone()))
            .collect();
        (0..self.threads)
            .map(|t| ThreadSpec {
                task: TaskId(0),
                program: Box::new(Fixed((self.ops)(&bases, t))),
            })
            .collect()
    }
}
