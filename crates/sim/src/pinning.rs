//! Thread pinning: explicit CPU lists and the OpenMP-style configurations of
//! reference/policies.md §9, built from the topology rather than from numbering assumptions.

use numalab_core::{CpuId, Topology};
use std::fmt;
use std::str::FromStr;

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pinning {
    /// Unpinned. The simulator places threads as the Linux load balancer spreads a fresh
    /// parallel program: round robin over nodes, idle CPUs first (the same layout as
    /// `sequential`); later scheduler migrations are not modelled.
    None,
    /// Core (t mod C) of node ⌊t / C⌋, one CPU per thread (OMP_PLACES={0}{4}...).
    Sockorder,
    /// Node ⌊t / C⌋, free inside the node; placed like `sockorder` within the node.
    Sockets,
    /// Core ⌊t / N⌋ of node (t mod N): round robin over nodes.
    Sequential,
    /// Thread t on `cpus[t mod len]`.
    Cpus(Vec<CpuId>),
}

pub const PINNING_NAMES: &[&str] = &[
    "none",
    "sockorder",
    "sockets",
    "sequential",
    "CPU list such as 0-7,16",
];

impl FromStr for Pinning {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim() {
            "none" => Ok(Pinning::None),
            "sockorder" => Ok(Pinning::Sockorder),
            "sockets" => Ok(Pinning::Sockets),
            "sequential" => Ok(Pinning::Sequential),
            other => {
                let mut cpus = Vec::new();
                for part in other.split(',') {
                    let part = part.trim();
                    let (a, b) = part.split_once('-').unwrap_or((part, part));
                    let err = || {
                        format!(
                            "unknown pinning '{s}': expected one of {}",
                            PINNING_NAMES.join(", ")
                        )
                    };
                    let a: u32 = a.trim().parse().map_err(|_| err())?;
                    let b: u32 = b.trim().parse().map_err(|_| err())?;
                    if a > b {
                        return Err(format!("CPU range '{part}' is reversed"));
                    }
                    cpus.extend((a..=b).map(CpuId));
                }
                Ok(Pinning::Cpus(cpus))
            }
        }
    }
}

impl fmt::Display for Pinning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pinning::None => f.write_str("none"),
            Pinning::Sockorder => f.write_str("sockorder"),
            Pinning::Sockets => f.write_str("sockets"),
            Pinning::Sequential => f.write_str("sequential"),
            Pinning::Cpus(c) => {
                let v: Vec<String> = c.iter().map(|c| c.0.to_string()).collect();
                f.write_str(&v.join(","))
            }
        }
    }
}

/// Threads a run may have: as many as a mix's copies (`mix::MAX_COPIES`). More threads than
/// CPUs take turns on them (sched.rs), so the machine does not bound them.
pub const MAX_THREADS: usize = 1 << 16;

impl Pinning {
    /// The CPUs a thread placed on `cpu` may run on (its affinity mask, as the OpenMP runtime
    /// or numactl sets it): every CPU when unpinned (`None`), the node's CPUs for `sockets`
    /// (OMP_PLACES=sockets), the one CPU otherwise (cores, or an explicit CPU list).
    pub fn cpus_allowed(&self, topo: &Topology, cpu: CpuId) -> Option<Vec<CpuId>> {
        match self {
            Pinning::None => None,
            Pinning::Sockets => topo
                .nodes
                .iter()
                .find(|n| n.cpus.contains(&cpu))
                .map(|n| n.cpus.clone()),
            Pinning::Sockorder | Pinning::Sequential | Pinning::Cpus(_) => Some(vec![cpu]),
        }
    }

    /// The CPU of each of `threads` threads (at most [`MAX_THREADS`]). The named pinnings
    /// give each thread a CPU of its own up to the machine's CPUs; threads beyond them share the CPU of thread `t mod C`
    /// and take turns on it (sched.rs), and a CPU list shorter than the threads is used
    /// round robin, as `taskset -c` runs every thread on its CPUs. Errors name unknown CPUs, or
    /// a named pinning that cannot give the first `C` threads CPUs of their own.
    pub fn resolve(&self, topo: &Topology, threads: usize) -> Result<Vec<CpuId>, String> {
        if threads > MAX_THREADS {
            return Err(format!(
                "{threads} threads: the simulator runs at most {MAX_THREADS} (each keeps its own TLBs, store buffer and counters); use fewer threads"
            ));
        }
        let total = topo.num_cpus();
        if total == 0 && threads > 0 {
            return Err("the machine has no CPU to run threads on".into());
        }
        let placed = threads.min(total);
        let nodes: Vec<&Vec<CpuId>> = topo
            .nodes
            .iter()
            .map(|n| &n.cpus)
            .filter(|c| !c.is_empty())
            .collect();
        let per_node = nodes.iter().map(|c| c.len()).min().unwrap_or(0).max(1);
        let n = nodes.len();
        let out: Vec<CpuId> = match self {
            Pinning::Sockorder | Pinning::Sockets => (0..placed)
                .map(|t| {
                    let node = (t / per_node) % n;
                    nodes[node][t % per_node]
                })
                .collect(),
            Pinning::Sequential | Pinning::None => (0..placed)
                .map(|t| {
                    let node = t % n;
                    let core = t / n;
                    let c = nodes[node];
                    c[core % c.len()]
                })
                .collect(),
            Pinning::Cpus(list) => {
                if list.is_empty() {
                    return Err("empty CPU list".into());
                }
                let all = topo.cpus();
                if let Some(bad) = list.iter().find(|c| !all.contains(c)) {
                    return Err(format!(
                        "CPU {} does not exist: this machine has CPUs {}",
                        bad.0,
                        numalab_machine::cpulist::format(&all)
                    ));
                }
                return Ok((0..threads).map(|t| list[t % list.len()]).collect());
            }
        };
        let mut seen = std::collections::HashSet::new();
        if let Some(dup) = out.iter().find(|c| !seen.insert(**c)) {
            return Err(format!(
                "pinning '{self}' puts two of the {threads} threads on CPU {} while other CPUs are free (nodes of unequal sizes); give a CPU list with --pin",
                dup.0
            ));
        }
        let mut out = out;
        for t in placed..threads {
            out.push(out[t % placed]);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use numalab_core::{NodeId, NodeInfo};

    /// 4 nodes × 2 cores, node k has cores k and k+4 (the §9 example).
    fn example() -> Topology {
        Topology {
            nodes: (0..4u32)
                .map(|k| NodeInfo {
                    id: NodeId(k as u16),
                    cpus: vec![CpuId(k), CpuId(k + 4)],
                    mem_bytes: 1 << 30,
                })
                .collect(),
            distances: (0..4)
                .map(|i| (0..4).map(|j| if i == j { 10 } else { 20 }).collect())
                .collect(),
            smt: 1,
        }
    }

    fn ids(v: Vec<CpuId>) -> Vec<u32> {
        v.into_iter().map(|c| c.0).collect()
    }

    #[test]
    fn configurations_match_the_reference_example() {
        let t = example();
        assert_eq!(
            ids(Pinning::Sockorder.resolve(&t, 8).unwrap()),
            vec![0, 4, 1, 5, 2, 6, 3, 7]
        );
        assert_eq!(
            ids(Pinning::Sequential.resolve(&t, 8).unwrap()),
            vec![0, 1, 2, 3, 4, 5, 6, 7]
        );
        assert_eq!(
            ids("3,5".parse::<Pinning>().unwrap().resolve(&t, 2).unwrap()),
            vec![3, 5]
        );
    }

    #[test]
    fn more_threads_than_cpus_share_them_in_turn() {
        let t = example();
        // the ninth thread shares the first one's CPU (sched.rs time-shares them)
        let sockorder = Pinning::Sockorder.resolve(&t, 9).unwrap();
        assert_eq!(sockorder[8], sockorder[0]);
        assert_eq!(
            sockorder[..8]
                .iter()
                .collect::<std::collections::HashSet<_>>()
                .len(),
            8
        );
        // a CPU list is used round robin, as taskset runs every thread on its CPUs
        let one = "0".parse::<Pinning>().unwrap().resolve(&t, 2).unwrap();
        assert_eq!(one, [CpuId(0), CpuId(0)]);
    }

    #[test]
    fn bad_pinning_is_refused() {
        let t = example();
        let e = Pinning::None.resolve(&t, 100_000).unwrap_err();
        assert!(e.contains("100000 threads") && e.contains("65536"), "{e}");
        assert!("0-9"
            .parse::<Pinning>()
            .unwrap()
            .resolve(&t, 2)
            .unwrap_err()
            .contains("CPU 8 does not exist"));
        assert!("spread"
            .parse::<Pinning>()
            .unwrap_err()
            .contains("sockorder"));
    }
}
