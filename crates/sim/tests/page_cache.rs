//! A file mapped from the page cache (os/page_cache.rs, docs/model.md "OS model", Page cache):
//! its pages are on the node of the task's first thread before anything runs, a first read
//! maps one (or, from Linux 3.15, its 16-page fault-around window) for `fault_file_4k_ns`
//! without allocating or clearing anything, and THP never backs it.

use numalab_core::workload::{AddressSpace, ThreadProgram, ThreadSpec, Workload};
use numalab_core::{AccessKind, CpuId, Op, PageSize, TaskId};
use numalab_machine::Machine;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult, ThpMode};

const PAGES: u64 = 64;

/// One file mapping of `pages` pages; every thread reads one line of each page from `first`
/// on, in order, then (with `anon`) writes one line of a 4 KiB anonymous mapping made after
/// the file.
struct ReadFile {
    threads: usize,
    pages: u64,
    first: u64,
    anon: bool,
}

fn read_file(threads: usize) -> ReadFile {
    ReadFile {
        threads,
        pages: PAGES,
        first: 0,
        anon: false,
    }
}

struct Fixed(Vec<Op>);

impl ThreadProgram for Fixed {
    fn fill(&mut self, out: &mut Vec<Op>) -> bool {
        out.append(&mut self.0);
        false
    }
}

impl Workload for ReadFile {
    fn name(&self) -> String {
        "read-file".into()
    }
    fn threads(&self) -> usize {
        self.threads
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let base = mem.mmap_file(TaskId(0), "input", self.pages * 4096);
        let anon = mem.mmap(TaskId(0), "anon", 4096, Default::default());
        (0..self.threads)
            .map(|_| {
                let mut ops: Vec<Op> = (self.first..self.pages)
                    .map(|p| Op::Access {
                        addr: base + p * 4096,
                        kind: AccessKind::Read,
                    })
                    .collect();
                if self.anon {
                    ops.push(Op::Access {
                        addr: anon,
                        kind: AccessKind::Write,
                    });
                }
                ThreadSpec {
                    task: TaskId(0),
                    program: Box::new(Fixed(ops)),
                }
            })
            .collect()
    }
}

/// The 8-node Opteron (Linux 3.9: no fault-around), or the same machine told it runs `linux`.
fn machine(linux: Option<&str>) -> Machine {
    let mut m = numalab_machine::preset("opteron6272-8n").unwrap();
    if let Some(v) = linux {
        m.os.linux = v.to_string();
    }
    m
}

fn run(m: &Machine, cpus: &[u32], thp: ThpMode) -> SimResult {
    run_with(m, cpus, thp, None)
}

fn run_with(m: &Machine, cpus: &[u32], thp: ThpMode, hugetlb: Option<PageSize>) -> SimResult {
    run_workload(m, cpus, thp, hugetlb, &read_file(cpus.len()))
}

fn run_workload(
    m: &Machine,
    cpus: &[u32],
    thp: ThpMode,
    hugetlb: Option<PageSize>,
    w: &ReadFile,
) -> SimResult {
    let cfg = SimConfig {
        pinning: Pinning::Cpus(cpus.iter().map(|&c| CpuId(c)).collect()),
        sample_period: 0,
        thp,
        hugetlb,
        ..Default::default()
    };
    simulate(m, w, cfg).unwrap()
}

#[test]
fn a_read_fault_maps_the_cached_page_on_the_readers_node_without_clearing_it() {
    let m = machine(None);
    // the task's first thread, on node 2, read the file there
    let cpu = m.topology.nodes[2].cpus[0].0;
    let node = 2;
    for thp in [ThpMode::Never, ThpMode::Always] {
        let r = run(&m, &[cpu], thp);
        let t = &r.per_thread[0];
        assert_eq!(
            t.faults, PAGES,
            "{thp:?}: one fault per page before Linux 3.15"
        );
        assert_eq!(r.vmstat.pgfault_4k, PAGES, "{thp:?}: base pages only");
        assert_eq!(r.vmstat.pgfault_2m + r.vmstat.thp_fault_alloc, 0, "{thp:?}");
        assert!(
            (t.fault_ns - PAGES as f64 * m.os.fault_file_4k_ns).abs() < 1e-6,
            "{thp:?}: {} ns in faults, {} each",
            t.fault_ns,
            m.os.fault_file_4k_ns
        );
        assert!(m.os.fault_file_4k_ns < m.os.fault_4k_ns);
        // the reads went to the reader's node, and nothing was written (no zeroing)
        assert_eq!(t.dram_by_node.iter().sum::<u64>(), t.dram_by_node[node]);
        assert!(t.dram_by_node[node] > 0);
        assert!(
            r.per_node.iter().all(|n| n.ctrl_write_bytes == 0),
            "{thp:?}"
        );
        assert_eq!(r.per_node[node].resident_bytes, PAGES * 4096);
    }
}

#[test]
fn other_threads_read_the_cache_where_the_first_thread_put_it() {
    let m = machine(None);
    // thread 0 on node 0 read the file; thread 1 runs on node 7
    let (near, far_cpu) = (m.topology.nodes[0].cpus[0].0, m.topology.nodes[7].cpus[0].0);
    let r = run(&m, &[near, far_cpu], ThpMode::Never);
    let far = &r.per_thread[1];
    assert_eq!(far.node, 7);
    assert!(far.dram_by_node[0] > 0);
    assert_eq!(far.dram_by_node.iter().sum::<u64>(), far.dram_by_node[0]);
    // each page is mapped once, by whichever thread touched it first
    assert_eq!(r.vmstat.pgfault_4k, PAGES);
    assert_eq!(r.per_thread.iter().map(|t| t.faults).sum::<u64>(), PAGES);
}

#[test]
fn from_linux_3_15_a_fault_maps_its_sixteen_page_window() {
    let old = run(&machine(Some("3.14")), &[0], ThpMode::Never);
    let new = run(&machine(Some("3.15")), &[0], ThpMode::Never);
    assert_eq!(old.per_thread[0].faults, PAGES);
    assert_eq!(new.per_thread[0].faults, PAGES / 16);
    assert!(new.per_thread[0].fault_ns < old.per_thread[0].fault_ns / 15.0);
}

#[test]
fn a_hugetlbfs_heap_does_not_take_the_file() {
    // libhugetlbfs backs malloc, not a file the program maps: the file keeps its cached 4 KiB
    // pages and the anonymous mapping made after it comes from the heap, a huge page
    let m = machine(None);
    let w = ReadFile {
        anon: true,
        ..read_file(1)
    };
    for heap in [PageSize::Huge2M, PageSize::Giant1G] {
        let r = run_workload(&m, &[0], ThpMode::Always, Some(heap), &w);
        assert_eq!(r.per_thread[0].faults, PAGES + 1, "{heap:?}");
        assert_eq!(r.vmstat.pgfault_4k, PAGES, "{heap:?}");
        assert_eq!(r.vmstat.pgfault_2m + r.vmstat.pgfault_1g, 1, "{heap:?}");
        // the heap page was cleared, the file's pages were not
        assert!(r.per_thread[0].fault_ns > PAGES as f64 * m.os.fault_file_4k_ns + 1000.0);
    }
}

#[test]
fn fault_around_stays_inside_its_window_and_the_mapping() {
    // 40 pages read from page 5: the window of page 5 maps pages 0-15, then page 16's maps
    // 16-31, then page 32's the mapping's last 8
    let w = ReadFile {
        pages: 40,
        first: 5,
        ..read_file(1)
    };
    let r = run_workload(&machine(Some("6.1")), &[0], ThpMode::Never, None, &w);
    assert_eq!(r.per_thread[0].faults, 3);
    assert_eq!(r.vmstat.pgfault_4k, 3);
    assert_eq!(r.per_node[0].resident_bytes, 40 * 4096);
}

/// Two files of `mib` MiB each, read by one thread.
struct TwoFiles {
    mib: u64,
}

impl Workload for TwoFiles {
    fn name(&self) -> String {
        "two-files".into()
    }
    fn threads(&self) -> usize {
        1
    }
    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let a = mem.mmap_file(TaskId(0), "first", self.mib << 20);
        let b = mem.mmap_file(TaskId(0), "second", self.mib << 20);
        vec![ThreadSpec {
            task: TaskId(0),
            program: Box::new(Fixed(
                [a, b]
                    .into_iter()
                    .map(|addr| Op::Access {
                        addr,
                        kind: AccessKind::Read,
                    })
                    .collect(),
            )),
        }]
    }
}

#[test]
fn files_larger_than_memory_are_an_error_naming_the_file() {
    // 8 nodes of 16 MiB: the first 80 MiB file fits, the second does not
    let mut m = machine(None);
    for n in &mut m.topology.nodes {
        n.mem_bytes = 16 << 20;
    }
    let cfg = || SimConfig {
        sample_period: 0,
        ..Default::default()
    };
    let e = simulate(&m, &TwoFiles { mib: 80 }, cfg())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("out of memory") && e.contains("file mapping 'second'"),
        "{e}"
    );
    assert!(simulate(&m, &TwoFiles { mib: 40 }, cfg()).is_ok());
    // under a bind policy the error names the nodes, as a fault's does
    let bound = SimConfig {
        task_policy: numalab_core::MemPolicy::Bind {
            nodes: numalab_core::NodeMask::from_nodes([numalab_core::NodeId(0)]),
            numa_balancing: false,
        },
        ..cfg()
    };
    let e = simulate(&m, &TwoFiles { mib: 10 }, bound)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("MPOL_BIND") && e.contains("file mapping 'second'"),
        "{e}"
    );
}
