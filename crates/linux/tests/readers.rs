//! The readers on fixture trees: one recorded from a real host (`host-6.18-1node`) and two
//! hand-written ones (`handwritten-*`, see tests/data/README.md) standing in for multi-node and
//! old-kernel machines until recordings from the multi-node VM exist.

use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use numalab_linux::balancing::{read_numa_balancing, NumaBalancing};
use numalab_linux::node::read_node_tree;
use numalab_linux::numa_maps::{bytes_per_node, read_numa_maps};
use numalab_linux::smaps::read_smaps;
use numalab_linux::thp::{read_thp, ShmemEnabled, ThpDefrag, ThpEnabled};
use numalab_linux::tiers::read_memory_tiers;
use numalab_linux::vmstat::read_vmstat;
use numalab_linux::weighted_interleave::read_weights;
use numalab_linux::{Error, KernelMode, ModeFlags, Pid, SysRoot};
use std::path::PathBuf;

fn fixture(name: &str) -> SysRoot {
    SysRoot::new(
        PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(name),
    )
}

fn mask(s: &str) -> NodeMask {
    numalab_linux::parse::parse_node_list(s, "test").unwrap()
}

// ---- recorded host: Linux 6.18, one node, two CPUs ----

#[test]
fn host_node_tree() {
    let t = read_node_tree(&fixture("host-6.18-1node")).unwrap();
    assert_eq!(t.possible, mask("0"));
    assert_eq!(t.online, mask("0"));
    assert_eq!(t.has_cpu, Some(mask("0")));
    assert_eq!(t.has_memory, Some(mask("0")));
    assert_eq!(t.has_generic_initiator, Some(NodeMask::empty()));
    assert_eq!(t.nodes.len(), 1);
    let n0 = &t.nodes[0];
    assert_eq!(n0.cpus, vec![CpuId(0), CpuId(1)]);
    assert_eq!(n0.distances, vec![(NodeId(0), 10)]);
    let mi = n0.meminfo.as_ref().unwrap();
    assert_eq!(mi.node, NodeId(0));
    assert_eq!(mi.mem_total_kb, 8_480_972);
    assert_eq!(mi.mem_free_kb, 3_733_276);
    assert_eq!(mi.fields["HugePages_Total"], 0);
    assert!(n0.numastat.as_ref().unwrap().contains_key("interleave_hit"));
    assert_eq!(n0.access, [None, None]);
    let topo = t.to_topology(1).unwrap();
    assert_eq!(topo.distances, vec![vec![10]]);
    assert_eq!(topo.nodes[0].mem_bytes, 8_480_972 * 1024);
    topo.validate().unwrap();
}

#[test]
fn host_tiers_weights_thp_balancing() {
    let root = fixture("host-6.18-1node");
    let tiers = read_memory_tiers(&root).unwrap().unwrap();
    assert_eq!(tiers.len(), 1);
    assert_eq!((tiers[0].id, tiers[0].nodes), (4, mask("0")));

    let w = read_weights(&root).unwrap().unwrap();
    assert_eq!(w.weight(NodeId(0)), Some(1));
    // Recorded as `__auto_type` on this 6.18 build.
    assert_eq!(w.auto, Some(true));

    let thp = read_thp(&root).unwrap().unwrap();
    assert_eq!(thp.enabled, ThpEnabled::Madvise);
    assert_eq!(thp.defrag, ThpDefrag::Madvise);
    assert_eq!(thp.shmem_enabled, Some(ShmemEnabled::Never));
    assert_eq!(thp.hpage_pmd_size_bytes, Some(2 << 20));
    assert_eq!(thp.use_zero_page, Some(true));
    assert_eq!(thp.khugepaged.max_ptes_none, Some(511));
    assert_eq!(thp.khugepaged.scan_sleep_ms, Some(10_000));
    assert_eq!(thp.per_size_enabled.len(), 8);
    assert_eq!(thp.per_size_enabled[&2048], ThpEnabled::Inherit);

    assert_eq!(
        read_numa_balancing(&root).unwrap(),
        Some(NumaBalancing::Off)
    );
}

#[test]
fn host_vmstat() {
    let s = read_vmstat(&fixture("host-6.18-1node")).unwrap();
    assert_eq!(s.numa_hit, Some(48_453_576));
    assert_eq!(s.numa_interleave, Some(1136));
    assert_eq!(s.numa_miss, Some(0));
    assert_eq!(s.pgmigrate_success, Some(0));
    assert_eq!(s.thp["fault_alloc"], 127);
    assert_eq!(s.pgpromote["success"], 0);
    assert!(s.pgdemote.contains_key("kswapd"));
    assert!(s.other.contains_key("nr_free_pages"));
    assert_eq!(
        s.iter().len(),
        192,
        "every line of the recorded file is kept"
    );
}

#[test]
fn host_numa_maps_and_smaps_agree_on_the_thp_region() {
    let root = fixture("host-6.18-1node");
    let maps = read_numa_maps(&root, Pid::SELF).unwrap();
    assert_eq!(maps.len(), 109);
    assert!(maps
        .iter()
        .all(|e| e.policy.mode == Some(KernelMode::Default)));
    assert_eq!(maps.iter().filter(|e| e.heap).count(), 1);
    assert_eq!(maps.iter().filter(|e| e.stack).count(), 1);
    assert!(maps
        .iter()
        .all(|e| e.pages_per_node.keys().all(|n| *n == NodeId(0))));

    let smaps = read_smaps(&root, Pid::SELF).unwrap();
    // The recording process's 8 MiB MADV_HUGEPAGE mapping, half touched: 4 MiB of THPs.
    let thp: Vec<_> = smaps
        .iter()
        .filter(|v| v.vm_flags.iter().any(|f| f == "hg"))
        .collect();
    assert_eq!(thp.len(), 1);
    let v = thp[0];
    assert_eq!(v.anon_huge_pages_kb, Some(4096));
    assert_eq!(v.thp_eligible, Some(true));
    assert_eq!(v.kernel_page_size_kb, Some(4));
    let e = maps
        .iter()
        .find(|e| e.start == v.start)
        .expect("numa_maps line of the THP VMA");
    assert_eq!(e.anon, Some(1024));
    assert_eq!(e.bytes_on(NodeId(0)), 4 << 20);
    assert!(smaps.iter().any(|v| v.path.as_deref() == Some("[stack]")));
}

// ---- hand-written: the 4+1-node ring of the test VM ----

#[test]
fn ring_node_tree() {
    let t = read_node_tree(&fixture("handwritten-5node-ring")).unwrap();
    assert_eq!(t.online, mask("0-4"));
    assert_eq!(t.has_cpu, Some(mask("0-3")));
    assert_eq!(t.cpuless(), mask("4"));
    assert_eq!(t.node(NodeId(4)).unwrap().cpus, Vec::<CpuId>::new());
    for i in 0..4u16 {
        assert_eq!(t.node(NodeId(i)).unwrap().cpus, vec![CpuId(i as u32)]);
        for j in 0..4u16 {
            let want = match (i as i32 - j as i32).rem_euclid(4) {
                0 => 10,
                2 => 22,
                _ => 16,
            };
            assert_eq!(t.distance(NodeId(i), NodeId(j)), Some(want), "{i}->{j}");
        }
        assert_eq!(t.distance(NodeId(i), NodeId(4)), Some(28));
    }
    let a = t.node(NodeId(4)).unwrap().access[0].as_ref().unwrap();
    assert_eq!(a.initiators, mask("0"));
    assert_eq!(a.read_latency_ns, Some(250));
    assert_eq!(a.write_bandwidth_mb_per_s, Some(6000));
    assert!(t.node(NodeId(1)).unwrap().access[0].is_none());
    let topo = t.to_topology(1).unwrap();
    topo.validate().unwrap();
    assert_eq!(topo.nodes[4].mem_bytes, 2 << 30);
    assert_eq!(topo.distances[1][3], 22);
}

#[test]
fn ring_tiers_weights_thp_balancing_vmstat() {
    let root = fixture("handwritten-5node-ring");
    let tiers = read_memory_tiers(&root).unwrap().unwrap();
    assert_eq!(
        tiers.iter().map(|t| (t.id, t.nodes)).collect::<Vec<_>>(),
        vec![(4, mask("0-3")), (22, mask("4"))]
    );
    let w = read_weights(&root).unwrap().unwrap();
    assert_eq!(w.to_weight_vec(), vec![3, 3, 3, 3, 1]);
    assert_eq!(w.auto, Some(false));
    let thp = read_thp(&root).unwrap().unwrap();
    assert_eq!(thp.enabled, ThpEnabled::Always);
    assert_eq!(thp.defrag, ThpDefrag::DeferMadvise);
    assert_eq!(thp.per_size_enabled[&64], ThpEnabled::Never);
    assert_eq!(thp.khugepaged.pages_collapsed, Some(12));
    assert_eq!(
        read_numa_balancing(&root).unwrap(),
        Some(NumaBalancing::NormalAndTiering)
    );
    let s = read_vmstat(&root).unwrap();
    assert_eq!(s.numa_hint_faults_local, Some(600));
    assert_eq!(s.pgpromote["success"], 42);
    assert_eq!(s.thp["migration_success"], 1);
    assert_eq!(s.other["nr_future_counter"], 9);
}

#[test]
fn ring_numa_maps_policies_and_nodes() {
    let root = fixture("handwritten-5node-ring");
    let maps = read_numa_maps(&root, Pid::SELF).unwrap();
    assert_eq!(maps.len(), 9);
    let il = &maps[2];
    assert_eq!(
        il.policy.to_mempolicy(),
        Some(MemPolicy::Interleave { nodes: mask("0-3") })
    );
    assert_eq!(
        il.pages_per_node.values().copied().collect::<Vec<_>>(),
        vec![16; 4]
    );
    assert_eq!(
        maps[3].policy.to_mempolicy(),
        Some(MemPolicy::Bind {
            nodes: mask("2"),
            numa_balancing: false
        })
    );
    assert_eq!(maps[4].policy.mode, Some(KernelMode::WeightedInterleave));
    assert_eq!(
        maps[5].policy.to_mempolicy(),
        Some(MemPolicy::PreferredMany { nodes: mask("2-3") })
    );
    assert_eq!(
        maps[6].policy.flags,
        ModeFlags::STATIC_NODES | ModeFlags::NUMA_BALANCING
    );
    assert_eq!(maps[6].pages(), 0);
    let per_node = bytes_per_node(&maps);
    assert_eq!(per_node[&NodeId(2)], (16 + 1024 + 30 + 8) * 4096);
    assert_eq!(per_node[&NodeId(4)], 512 * 4096);
    let smaps = read_smaps(&root, Pid::SELF).unwrap();
    assert_eq!(smaps[0].start, maps[3].start);
    assert_eq!(smaps[0].anon_huge_pages_kb, Some(4096));
}

// ---- hand-written: two nodes on an old kernel, optional files missing ----

#[test]
fn old_kernel_missing_optional_files() {
    let root = fixture("handwritten-2node-oldkernel");
    let t = read_node_tree(&root).unwrap();
    assert_eq!(t.online, mask("0-1"));
    assert_eq!(t.has_generic_initiator, None);
    assert_eq!(t.node(NodeId(1)).unwrap().cpus.len(), 16);
    assert_eq!(t.distance(NodeId(0), NodeId(1)), Some(21));
    assert!(t
        .nodes
        .iter()
        .all(|n| n.access == [None, None] && n.numastat.is_none()));
    assert_eq!(read_memory_tiers(&root).unwrap(), None);
    assert_eq!(read_weights(&root).unwrap(), None);
    assert_eq!(read_numa_balancing(&root).unwrap(), None);
    let thp = read_thp(&root).unwrap().unwrap();
    assert_eq!(thp.enabled, ThpEnabled::Madvise);
    assert_eq!(thp.defrag, ThpDefrag::Always);
    assert_eq!(thp.shmem_enabled, None);
    assert_eq!(thp.hpage_pmd_size_bytes, None);
    assert_eq!(thp.khugepaged.max_ptes_shared, None);
    assert!(thp.per_size_enabled.is_empty());
    let s = read_vmstat(&root).unwrap();
    assert_eq!(s.numa_hint_faults, None);
    assert!(s.pgpromote.is_empty());
    let maps = read_numa_maps(&root, Pid::SELF).unwrap();
    assert_eq!(maps[1].policy.flags, ModeFlags::STATIC_NODES);
    assert_eq!(maps[1].policy.mode, Some(KernelMode::Interleave));
    assert!(maps[2].huge);
    assert_eq!(maps[2].bytes_on(NodeId(1)), 2 * (2 << 20));
    assert!(maps[3].stack);
    assert_eq!(maps[0].kernel_page_size_kb, None);
    let smaps = read_smaps(&root, Pid::SELF).unwrap();
    assert_eq!(smaps[0].thp_eligible, None);
    assert_eq!(smaps[0].path.as_deref(), Some("/bin/app"));
}

// ---- errors name the file, the line and the expectation ----

struct TempTree(PathBuf);

impl TempTree {
    fn new(tag: &str) -> TempTree {
        let p = std::env::temp_dir().join(format!("numalab-linux-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        TempTree(p)
    }
    fn write(&self, rel: &str, text: &str) {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }
}

impl Drop for TempTree {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[test]
fn malformed_files_are_named() {
    let t = TempTree::new("malformed");
    let n = "sys/devices/system/node";
    for (f, v) in [("possible", "0-1"), ("online", "0-1")] {
        t.write(&format!("{n}/{f}"), v);
    }
    for i in 0..2 {
        t.write(&format!("{n}/node{i}/cpulist"), "0");
    }
    t.write(&format!("{n}/node0/distance"), "10 20");
    t.write(&format!("{n}/node1/distance"), "20");
    let e = read_node_tree(&SysRoot::new(&t.0)).unwrap_err();
    let msg = e.to_string();
    assert!(matches!(e, Error::Parse(_)), "{msg}");
    assert!(
        msg.contains("node1/distance:1: expected 2 distances"),
        "{msg}"
    );

    t.write(&format!("{n}/node1/distance"), "20 10");
    t.write(
        &format!("{n}/node1/meminfo"),
        "Node 1 MemTotal: 5 kB\nNode 1 MemFree five kB\n",
    );
    let msg = read_node_tree(&SysRoot::new(&t.0)).unwrap_err().to_string();
    assert!(
        msg.contains("node1/meminfo:2: expected 'Node N Name: value [kB]'"),
        "{msg}"
    );

    t.write("proc/vmstat", "numa_hit 1\nnuma_miss lots\n");
    let msg = read_vmstat(&SysRoot::new(&t.0)).unwrap_err().to_string();
    assert!(
        msg.contains("proc/vmstat:2: expected the value of numa_miss"),
        "{msg}"
    );

    t.write("proc/42/numa_maps", "7f00 default N0=1\n7f01 bind:zero\n");
    let msg = read_numa_maps(&SysRoot::new(&t.0), Pid(42))
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("proc/42/numa_maps:2: expected a node list"),
        "{msg}"
    );

    let e = read_vmstat(&SysRoot::new(t.0.join("nowhere"))).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOENT));
    assert!(e.to_string().contains("nowhere/proc/vmstat"), "{e}");
}
