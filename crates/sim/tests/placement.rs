//! Placement mechanisms pinned by hand-built scenarios: THP false sharing, weighted and
//! percentage placement, fault counts per page size.

use numalab_core::{AccessKind, MapOptions, MemPolicy, NodeMask, Op, TaskId, Workload};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};

use numalab_workloads::script::Script;

fn machine() -> Machine {
    numalab_machine::preset("opteron6272-8n").expect("preset exists")
}

fn run(w: &dyn Workload, pin: Pinning, thp: ThpMode, policy: MemPolicy) -> SimResult {
    let cfg = SimConfig {
        pinning: pin,
        thp,
        task_policy: policy,
        ..Default::default()
    };
    simulate(&machine(), w, cfg).unwrap()
}

/// Each line of `[start, start+len)` once, as a write run.
fn write_lines(start: u64, len: u64) -> Op {
    Op::Run {
        base: start,
        lines: (len / 64) as u32,
        stride_bytes: 64,
        kind: AccessKind::Write,
    }
}

#[test]
fn thp_false_sharing_halves_locality() {
    // Two threads on different nodes each write their own half of one 2 MB region, many times.
    let w = Script {
        maps: vec![(2 << 20, MapOptions::default())],
        threads: 2,
        ops: |b: &[u64], t: usize| {
            let half = 1u64 << 20;
            let mut v = Vec::new();
            for _ in 0..40 {
                v.push(write_lines(b[0] + t as u64 * half, half));
            }
            v
        },
    };
    let cpus = Pinning::Cpus(vec![numalab_core::CpuId(0), numalab_core::CpuId(8)]); // nodes 0 and 1
    let small = run(&w, cpus.clone(), ThpMode::Never, MemPolicy::Default);
    let huge = run(&w, cpus, ThpMode::Always, MemPolicy::Default);
    let lar_small = small.metrics.lar_percent.unwrap();
    let lar_huge = huge.metrics.lar_percent.unwrap();
    // (the region's one PTE page is on the node of the thread that faulted first, so the
    // other thread's walks that miss the caches are remote: os/pt_pages.rs)
    assert!(
        lar_small > 99.5,
        "4 KB pages: every thread's half is local, LAR {lar_small}"
    );
    assert!(
        (lar_huge - 50.0).abs() < 5.0,
        "2 MB page on one node: about half the accesses are remote, LAR {lar_huge}"
    );
    assert_eq!(huge.vmstat.pgfault_2m, 1);
    assert_eq!(small.vmstat.pgfault_4k, 512);
}

fn touch_all(b: &[u64], _t: usize) -> Vec<Op> {
    vec![write_lines(b[0], 64 << 20)]
}

fn resident_share(r: &SimResult) -> Vec<f64> {
    let total: u64 = r.per_node.iter().map(|n| n.resident_bytes).sum();
    r.per_node
        .iter()
        .map(|n| 100.0 * n.resident_bytes as f64 / total as f64)
        .collect()
}

#[test]
fn weighted_interleave_3_to_1_hits_its_target() {
    let w = Script {
        maps: vec![(64 << 20, MapOptions::default())],
        threads: 1,
        ops: touch_all,
    };
    let online = machine().topology.online();
    let p = MemPolicy::parse("weighted-interleave:0=3,1=1", &online).unwrap();
    let r = run(
        &w,
        Pinning::Cpus(vec![numalab_core::CpuId(0)]),
        ThpMode::Never,
        p,
    );
    let s = resident_share(&r);
    assert!(
        (s[0] - 75.0).abs() <= 1.0 && (s[1] - 25.0).abs() <= 1.0,
        "shares {s:?}"
    );
}

#[test]
fn remote_percent_40_hits_its_target() {
    let w = Script {
        maps: vec![(64 << 20, MapOptions::default())],
        threads: 1,
        ops: touch_all,
    };
    let p = MemPolicy::RemotePercent {
        percent: 40,
        remote: NodeMask::single(numalab_core::NodeId(1)),
    };
    let r = run(
        &w,
        Pinning::Cpus(vec![numalab_core::CpuId(0)]),
        ThpMode::Never,
        p,
    );
    let s = resident_share(&r);
    assert!(
        (s[0] - 60.0).abs() <= 1.0 && (s[1] - 40.0).abs() <= 1.0,
        "shares {s:?}"
    );
    // with THP the unit of placement is 2 MB, and the split still lands within a point
    let r = run(
        &w,
        Pinning::Cpus(vec![numalab_core::CpuId(0)]),
        ThpMode::Always,
        MemPolicy::RemotePercent {
            percent: 40,
            remote: NodeMask::empty(),
        },
    );
    let remote: f64 = resident_share(&r)[1..].iter().sum();
    assert!(
        (remote - 40.0).abs() <= 1.0 + 100.0 / 32.0,
        "THP remote share {remote}"
    );
}

#[test]
fn fresh_gigabyte_faults_512_to_1() {
    let w = Script {
        maps: vec![(1 << 30, MapOptions::default())],
        threads: 1,
        // one write per 4 KB page
        ops: |b: &[u64], _: usize| {
            vec![Op::Run {
                base: b[0],
                lines: (1 << 30) / 4096,
                stride_bytes: 4096,
                kind: AccessKind::Write,
            }]
        },
    };
    let small = run(
        &w,
        Pinning::Cpus(vec![numalab_core::CpuId(0)]),
        ThpMode::Never,
        MemPolicy::Default,
    );
    let huge = run(
        &w,
        Pinning::Cpus(vec![numalab_core::CpuId(0)]),
        ThpMode::Always,
        MemPolicy::Default,
    );
    assert_eq!(small.vmstat.pgfault_4k, 262_144);
    assert_eq!(huge.vmstat.pgfault_2m, 512);
    assert_eq!(small.total_faults(), 512 * huge.total_faults());
    assert!(
        small.per_thread[0].fault_ns > huge.per_thread[0].fault_ns,
        "4 KB faults cost more in total"
    );
}

#[test]
fn bind_to_a_full_node_is_an_error_naming_the_nodes() {
    let w = Script {
        maps: vec![(
            1 << 30,
            MapOptions {
                policy: Some(MemPolicy::Bind {
                    nodes: NodeMask::single(numalab_core::NodeId(3)),
                    numa_balancing: false,
                }),
                ..Default::default()
            },
        )],
        threads: 1,
        ops: |b: &[u64], _: usize| {
            vec![Op::Run {
                base: b[0],
                lines: (1 << 30) / 4096,
                stride_bytes: 4096,
                kind: AccessKind::Write,
            }]
        },
    };
    let mut m = machine();
    m.topology.nodes[3].mem_bytes = 256 << 20;
    let err = simulate(&m, &w, SimConfig::default())
        .unwrap_err()
        .to_string();
    assert!(err.contains("nodes 3 are full"), "{err}");
}

/// A policy that asks once for a batch of single-page moves (page index in mapping "m0", target
/// node), then records where those pages and page 0 are.
struct MoveOnce {
    targets: Vec<(u64, u16)>,
    done: bool,
    seen: std::sync::Arc<std::sync::Mutex<Vec<u16>>>,
}

impl numalab_core::Policy for MoveOnce {
    fn name(&self) -> &str {
        "move-once"
    }
    fn period_ns(&self) -> u64 {
        20_000
    }
    fn tick(&mut self, view: &dyn numalab_core::MemoryView) -> Vec<numalab_core::Action> {
        let Some(base) = view
            .regions()
            .iter()
            .find(|r| r.name == "m0")
            .map(|r| r.start)
        else {
            return Vec::new();
        };
        let node_of = |p: u64| view.page(TaskId(0), base + p * 4096).map(|i| i.node.0);
        if self.done {
            let mut seen = self.seen.lock().unwrap();
            *seen = [0]
                .iter()
                .chain(self.targets.iter().map(|(p, _)| p))
                .filter_map(|p| node_of(*p))
                .collect();
            return Vec::new();
        }
        // Wait until first touch has placed the pages, then move them in one batch.
        if self.targets.iter().any(|(p, _)| node_of(*p).is_none()) {
            return Vec::new();
        }
        self.done = true;
        let pages = self
            .targets
            .iter()
            .map(|(p, n)| (base + p * 4096, numalab_core::NodeId(*n)))
            .collect();
        vec![numalab_core::Action::MovePages {
            task: TaskId(0),
            pages,
        }]
    }
}

#[test]
fn move_pages_action_moves_exactly_the_listed_pages() {
    // One thread on node 0 writes 64 pages many times; the policy moves pages 3, 10 and 40 to
    // nodes 2, 5 and 5 in one batch.
    let w = Script {
        maps: vec![(64 * 4096, MapOptions::default())],
        threads: 1,
        ops: |b: &[u64], _: usize| (0..200).map(|_| write_lines(b[0], 64 * 4096)).collect(),
    };
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let cfg = SimConfig {
        pinning: Pinning::Sequential,
        policies: vec![Box::new(MoveOnce {
            targets: vec![(3, 2), (10, 5), (40, 5)],
            done: false,
            seen: seen.clone(),
        })],
        ..Default::default()
    };
    let r = simulate(&machine(), &w, cfg).unwrap();
    assert_eq!(
        r.vmstat.pgmigrate_success, 3,
        "exactly the three listed pages move"
    );
    assert_eq!(
        *seen.lock().unwrap(),
        vec![0, 2, 5, 5],
        "page 0 stays local; the three are where asked"
    );
}
