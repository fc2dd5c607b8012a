//! `numalab topo --machine-file`: the machine made from the kernel's view, on this host and on
//! the recorded five-node tree, through the TOML round trip and the simulator.

mod machine_file_common;

use machine_file_common::{assert_latency_follows_distances, round_trip};
use numalab_core::NodeId;
use numalab_linux::node::read_node_tree;
use numalab_linux::SysRoot;
use numalab_machine::HwlocDefaults;
use numalab_place::machine_file::{
    machine_from_facts, machine_from_host, read_cpu_facts, read_host_facts, CpuCache, CpuFacts,
    HostFacts, MachineFileError,
};
use numalab_sim::{simulate, Pinning, SimConfig};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

const GIB: u64 = 1 << 30;
const MIB: u64 = 1 << 20;

fn ring_root() -> SysRoot {
    SysRoot::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../linux/tests/data/handwritten-5node-ring"),
    )
}

/// The recorded five-node tree, dated for a stable description.
fn ring_facts() -> HostFacts {
    let mut f = read_host_facts(&ring_root()).unwrap();
    f.date = "2025-01-02".to_string();
    f
}

fn set(v: &[u32]) -> BTreeSet<u32> {
    v.iter().copied().collect()
}

fn link(m: &numalab_machine::Machine, a: u16, b: u16) -> &numalab_machine::Link {
    m.links
        .iter()
        .find(|l| (l.a.0, l.b.0) == (a, b) || (l.a.0, l.b.0) == (b, a))
        .unwrap_or_else(|| panic!("no link {a}-{b} in {:?}", m.links))
}

#[test]
fn this_host_round_trips_and_simulates_stream() {
    let host = SysRoot::host();
    let m = machine_from_host(&host).unwrap();
    let tree = read_node_tree(&host).unwrap();
    assert_eq!(m.topology.num_nodes(), tree.nodes.len());
    for (i, n) in tree.nodes.iter().enumerate() {
        assert_eq!(m.topology.nodes[i].cpus, n.cpus, "node {}", n.id.0);
        let mem = n.meminfo.as_ref().unwrap().mem_total_bytes();
        assert_eq!(m.topology.nodes[i].mem_bytes, mem, "node {}", n.id.0);
    }
    assert!(m.id.starts_with("host"), "{}", m.id);
    assert!(
        m.description.contains("the running kernel") && m.description.contains("HwlocDefaults"),
        "{}",
        m.description
    );
    // Where sysfs describes caches, the private cache is the per-core L2 it lists.
    let facts = read_host_facts(&host).unwrap();
    let l2 = facts.cpus[0]
        .caches
        .iter()
        .find(|c| c.level == 2 && c.kind != "Instruction" && c.size_bytes.is_some());
    if let Some(l2) = l2 {
        if l2.shared_cpus.len() == 1 || Some(&l2.shared_cpus) == facts.cpus[0].core_cpus.as_ref() {
            assert_eq!(Some(m.core.private_cache.bytes), l2.size_bytes);
        }
    }

    let loaded = round_trip(&m, "host");
    // `numalab sim --machine FILE --workload stream:... --threads 2`, as the CLI runs it.
    let threads = loaded.topology.num_cpus().min(2);
    let w = numalab_workloads::by_spec("stream:kernel=triad,n=200000,ntimes=2", threads).unwrap();
    let cfg = SimConfig {
        pinning: Pinning::Sockorder,
        ..Default::default()
    };
    let r = simulate(&loaded, w.as_ref(), cfg).unwrap();
    assert_eq!(r.threads, threads);
    assert!(r.memory_references > 0 && r.sim_time_ns > 0.0);
}

#[test]
fn ring_fixture_has_five_nodes_slit_and_hmat() {
    let m = machine_from_facts(&ring_facts(), &HwlocDefaults::default()).unwrap();
    let d = HwlocDefaults::default();
    assert_eq!(m.topology.num_nodes(), 5);
    for i in 0..4 {
        assert_eq!(m.topology.nodes[i].cpus.len(), 1);
        assert_eq!(m.topology.nodes[i].cpus[0].0, i as u32);
        assert_eq!(m.topology.nodes[i].mem_bytes, GIB);
    }
    assert!(m.topology.nodes[4].cpus.is_empty(), "node 4 has no CPUs");
    assert!(m.nodes[4].llc.is_none());
    assert_eq!(m.topology.nodes[4].mem_bytes, 2 * GIB);
    assert_eq!(
        m.topology.distances,
        vec![
            vec![10, 16, 22, 16, 28],
            vec![16, 10, 16, 22, 28],
            vec![22, 16, 10, 16, 28],
            vec![16, 22, 16, 10, 28],
            vec![28, 28, 28, 28, 10],
        ]
    );
    // The ring's 16s are links, its 22s two hops; node 4 hangs off every CPU node (all at 28).
    assert_eq!(m.links.len(), 8);
    let r = m.routes().unwrap();
    assert_eq!(r.hops(NodeId(0), NodeId(2)), 2);
    assert_eq!(r.hops(NodeId(1), NodeId(4)), 1);
    // HMAT: node 0's access class (itself, 90 ns, 20000 MiB/s) sets its local figures; nodes
    // 1-3 have none and keep the defaults.
    assert_eq!(m.nodes[0].idle_local_ns, 90.0);
    assert!((m.nodes[0].ctrl_peak_gbps - 20_000.0 * MIB as f64 / 1e9).abs() < 1e-9);
    assert_eq!(m.nodes[1].ctrl_peak_gbps, d.ctrl_peak_gbps);
    // Node 4: 250 ns and 8000 MiB/s from node 0, its best initiator; the other CPU nodes are
    // no faster, so every link to node 4 carries the same 160 ns.
    for c in 0..4 {
        assert_eq!(link(&m, c, 4).hop_ns, 160.0, "link {c}-4");
        assert!((link(&m, c, 4).gbps_per_dir - 8_000.0 * MIB as f64 / 1e9).abs() < 1e-9);
    }
    assert_eq!(m.idle_latency_ns(&r, NodeId(3), NodeId(4)), 250.0);
    assert_eq!(
        m.idle_latency_ns(&r, NodeId(1), NodeId(3)),
        90.0 + 2.0 * d.hop_ns
    );
    // No hostname in the tree; the description names the tree, the date and the defaults.
    assert_eq!(m.id, "host");
    for want in [
        "handwritten-5node-ring",
        "2025-01-02",
        "HMAT access classes",
        "HwlocDefaults",
        "idle local latency 90 ns of nodes 1,2,3",
        "links between CPU nodes (50 ns per hop",
        "no CPU caches in sysfs",
    ] {
        assert!(
            m.description.contains(want),
            "'{want}' missing: {}",
            m.description
        );
    }
    round_trip(&m, "ring");
}

#[test]
fn ring_fixture_latencies_follow_distances_in_the_simulator() {
    let m = machine_from_facts(&ring_facts(), &HwlocDefaults::default()).unwrap();
    assert_latency_follows_distances(&m);
}

/// The pure variant with CPU facts the recorded tree lacks, as `cpuN/cache` would list them: a
/// private L2 per CPU and a 16 MiB L3 per package, each package spanning two nodes.
#[test]
fn cpu_caches_and_siblings_become_private_cache_and_llc() {
    let mut f = ring_facts();
    f.cpus = (0..4)
        .map(|cpu| CpuFacts {
            cpu,
            core_cpus: Some(set(&[cpu])),
            package_cpus: Some(set(&[cpu & !1, cpu | 1])),
            caches: vec![
                CpuCache {
                    level: 1,
                    kind: "Data".into(),
                    size_bytes: Some(48 << 10),
                    ways: Some(12),
                    shared_cpus: set(&[cpu]),
                },
                CpuCache {
                    level: 1,
                    kind: "Instruction".into(),
                    size_bytes: Some(32 << 10),
                    ways: Some(8),
                    shared_cpus: set(&[cpu]),
                },
                CpuCache {
                    level: 2,
                    kind: "Unified".into(),
                    size_bytes: Some(2 * MIB),
                    ways: Some(16),
                    shared_cpus: set(&[cpu]),
                },
                CpuCache {
                    level: 3,
                    kind: "Unified".into(),
                    size_bytes: Some(16 * MIB),
                    ways: Some(0),
                    shared_cpus: set(&[cpu & !1, cpu | 1]),
                },
            ],
        })
        .collect();
    f.cpu_model = Some("Test CPU 9000".into());
    f.hostname = Some("ring box".into());
    let m = machine_from_facts(&f, &HwlocDefaults::default()).unwrap();
    assert_eq!(
        (m.core.private_cache.bytes, m.core.private_cache.ways),
        (2 * MIB, 16)
    );
    for i in 0..4 {
        let llc = m.nodes[i].llc.as_ref().unwrap();
        // Half of its package's L3 (the node's share); ways 0 is "not known": the default.
        assert_eq!(
            (llc.bytes, llc.ways),
            (8 * MIB, HwlocDefaults::default().cache_ways_when_unknown)
        );
    }
    assert_eq!(m.topology.smt, 1);
    assert_eq!(m.id, "host-ring-box");
    assert!(
        m.description.starts_with("Test CPU 9000, "),
        "{}",
        m.description
    );
    assert!(
        m.description.contains("2 packages, 4 cores, 4 CPUs"),
        "{}",
        m.description
    );
    assert!(
        !m.description.contains("the private cache ("),
        "{}",
        m.description
    );
}

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// The cache reader on a made-up `cpuN` directory, and its error naming the file.
#[test]
fn cache_reader_reads_sysfs_files_and_names_bad_ones() {
    let dir = std::env::temp_dir().join(format!("numalab-mf-caches-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let c = "sys/devices/system/cpu/cpu1";
    write(&dir, &format!("{c}/topology/thread_siblings_list"), "0-1\n");
    write(&dir, &format!("{c}/topology/core_siblings_list"), "0-3\n");
    for (idx, level, kind, size, ways, shared) in [
        (0, "1", "Data", "48K", "12", "0-1"),
        (2, "2", "Unified", "2048K", "16", "0-1"),
        (3, "3", "Unified", "107520K", "15", "0-3"),
    ] {
        let d = format!("{c}/cache/index{idx}");
        write(&dir, &format!("{d}/level"), &format!("{level}\n"));
        write(&dir, &format!("{d}/type"), &format!("{kind}\n"));
        write(&dir, &format!("{d}/size"), &format!("{size}\n"));
        write(
            &dir,
            &format!("{d}/ways_of_associativity"),
            &format!("{ways}\n"),
        );
        write(
            &dir,
            &format!("{d}/shared_cpu_list"),
            &format!("{shared}\n"),
        );
    }
    write(&dir, &format!("{c}/cache/uevent"), "");
    let root = SysRoot::new(&dir);
    let f = read_cpu_facts(&root, 1).unwrap();
    assert_eq!(f.core_cpus, Some(set(&[0, 1])));
    assert_eq!(f.package_cpus, Some(set(&[0, 1, 2, 3])));
    assert_eq!(f.caches.len(), 3);
    assert_eq!(f.caches[2].size_bytes, Some(107_520 << 10));
    assert_eq!(f.caches[2].ways, Some(15));
    assert_eq!(f.caches[1].shared_cpus, set(&[0, 1]));

    write(&dir, &format!("{c}/cache/index2/size"), "big\n");
    let e = read_cpu_facts(&root, 1).unwrap_err();
    assert!(matches!(e, MachineFileError::Linux(_)));
    let msg = e.to_string();
    assert!(
        msg.contains("cpu1/cache/index2/size") && msg.contains("big"),
        "{msg}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

/// The trees recorded from the test VM's real 6.12 and 6.1 kernels (HMAT present, CPU caches
/// not recorded, so cache figures are defaults): five nodes, the ring, node 4 CPU-less, and
/// simulated latencies that follow the kernel's distances.
#[test]
fn vm_recordings_make_machines_whose_latency_follows_distances() {
    for k in ["vm-6.12-5node", "vm-6.1-5node"] {
        let root = SysRoot::new(
            PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../linux/tests/data")
                .join(k),
        );
        let mut facts = read_host_facts(&root).unwrap();
        facts.date = "2026-11-21".to_string();
        let m = machine_from_facts(&facts, &HwlocDefaults::default()).unwrap();
        assert_eq!(m.topology.nodes.len(), 5, "{k}");
        assert!(m.topology.nodes[4].cpus.is_empty(), "{k}");
        assert_eq!(m.topology.distances[0], vec![10, 16, 22, 16, 28], "{k}");
        assert_latency_follows_distances(&m);
        round_trip(&m, k);
    }
}
