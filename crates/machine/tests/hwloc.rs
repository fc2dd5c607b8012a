//! hwloc XML import: one test per real file in tests/data/hwloc/ (copies of
//! /work/shared/data/hwloc-xml, see its README), plus hand-made fixtures in tests/data/fixtures/.

use numalab_core::{CpuId, NodeId};
use numalab_machine::hwloc::{import_file, import_str, HwlocDefaults};
use numalab_machine::{load, Curve, Machine, MachineError, SiblingNumbering};
use std::path::PathBuf;

const GIB: u64 = 1 << 30;

fn path(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn import(rel: &str) -> Machine {
    let m =
        import_file(&path(rel), &HwlocDefaults::default()).unwrap_or_else(|e| panic!("{rel}: {e}"));
    m.validate().unwrap();
    // The CLI path gives the same machine.
    assert_eq!(load(path(rel).to_str().unwrap()).unwrap(), m);
    m
}

fn cpus(m: &Machine, node: usize) -> Vec<u32> {
    m.topology.nodes[node].cpus.iter().map(|c| c.0).collect()
}

fn idle(m: &Machine, from: u16, to: u16) -> f64 {
    m.idle_latency_ns(&m.routes().unwrap(), NodeId(from), NodeId(to))
}

fn link(m: &Machine, a: u16, b: u16) -> &numalab_machine::Link {
    m.links
        .iter()
        .find(|l| (l.a.0, l.b.0) == (a, b) || (l.a.0, l.b.0) == (b, a))
        .unwrap_or_else(|| panic!("no link {a}-{b} in {:?}", m.links))
}

#[test]
fn every_real_file_imports() {
    let mut n = 0;
    for entry in std::fs::read_dir(path("hwloc")).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "xml") {
            let m = import_file(&p, &HwlocDefaults::default())
                .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            assert!(m.topology.num_cpus() > 0);
            assert!(m.id.starts_with("hwloc-"));
            n += 1;
        }
    }
    assert_eq!(n, 6);
}

#[test]
fn amd64_8n2c_cpusets_leaves_out_disallowed_cpus_and_nodes() {
    let m = import("hwloc/16amd64-8n2c-cpusets.xml");
    // allowed_nodeset 0x3e: OS nodes 1-5, renumbered 0-4 with their OS index kept.
    assert_eq!(m.topology.num_nodes(), 5);
    assert_eq!(
        m.nodes.iter().map(|n| n.os_index).collect::<Vec<_>>(),
        vec![Some(1), Some(2), Some(3), Some(4), Some(5)]
    );
    // allowed_cpuset 0xf06f: PUs 0-3, 5-6, 12-15; PUs 0-1 and 12-15 sit on disallowed nodes
    // 0, 6, 7, so they have no local memory and are left out.
    assert_eq!(cpus(&m, 0), vec![2, 3]);
    assert_eq!(cpus(&m, 1), vec![5]);
    assert_eq!(cpus(&m, 2), vec![6]);
    assert_eq!(m.topology.num_cpus(), 4);
    for c in [0, 1, 4, 7, 12, 15] {
        assert_eq!(m.topology.node_of_cpu(CpuId(c)), None, "CPU {c}");
    }
    // OS nodes 4 and 5 have memory and no CPUs.
    for i in [3, 4] {
        assert!(m.topology.nodes[i].cpus.is_empty());
        assert!(m.nodes[i].llc.is_none());
    }
    assert!(m.topology.nodes.iter().all(|n| n.mem_bytes == 8 * GIB));
    // The matrix over OS nodes 1-5 is 10 / 20: a full mesh of the CPU nodes, the memory-only
    // nodes linked to every (equally near) CPU node.
    for i in 0..5 {
        for j in 0..5 {
            assert_eq!(m.topology.distances[i][j], if i == j { 10 } else { 20 });
        }
    }
    assert_eq!(m.links.len(), 3 + 2 * 3);
    assert_eq!(m.topology.smt, 1);
    // K8-era Opteron: a 1 MiB L2 per core (associativity unknown: the default 16 ways), no L3.
    assert_eq!(
        (m.core.private_cache.bytes, m.core.private_cache.ways),
        (1 << 20, 16)
    );
    assert!(m.nodes[..3].iter().all(|n| n.llc.is_none()));
    let d = &m.description;
    assert!(d.contains("NUMA nodes") || d.contains("renumbered"), "{d}");
    assert!(d.contains("0-1,12-15"), "{d}");
    assert!(d.contains("0=1") && d.contains("4=5"), "{d}");
}

#[test]
fn em64t_4s2c2t_is_one_node_with_smt_and_four_llcs() {
    let m = import("hwloc/16em64t-4s2c2t.xml");
    assert_eq!(m.topology.num_nodes(), 1);
    assert_eq!(cpus(&m, 0), (0..16).collect::<Vec<_>>());
    assert_eq!(m.topology.smt, 2);
    // No local_memory in the file: the documented default, said in the description.
    assert_eq!(
        m.topology.nodes[0].mem_bytes,
        HwlocDefaults::default().mem_bytes_when_missing
    );
    assert!(
        m.description.contains("no local_memory"),
        "{}",
        m.description
    );
    // One node spanning 4 packages: their four 4 MiB L3s.
    assert_eq!(m.nodes[0].llc.as_ref().unwrap().bytes, 16 << 20);
    assert_eq!(m.core.private_cache.bytes, 1 << 20);
    assert_eq!(m.topology.distances, vec![vec![10]]);
    assert!(m.links.is_empty());
}

#[test]
fn em64t_2n6c2t_pci_westmere_like() {
    let m = import("hwloc/24em64t-2n6c2t-pci.xml");
    assert_eq!(m.topology.num_nodes(), 2);
    assert_eq!(cpus(&m, 0), (0..24).step_by(2).collect::<Vec<_>>());
    assert_eq!(cpus(&m, 1), (1..24).step_by(2).collect::<Vec<_>>());
    // Core objects pair PU 0 with 12, 2 with 14, ...: Linux's spread numbering
    assert_eq!(m.core.siblings, SiblingNumbering::Spread);
    let core: std::collections::BTreeMap<u32, usize> = m
        .cores_of_cpus()
        .into_iter()
        .map(|(c, k)| (c.0, k))
        .collect();
    assert_eq!(core[&0], core[&12]);
    assert_eq!(core[&2], core[&14]);
    assert_ne!(core[&0], core[&2]);
    assert_eq!(core[&1], core[&13]);
    assert_eq!(m.topology.nodes[0].mem_bytes, 19_316_633_600);
    assert_eq!(m.topology.nodes[1].mem_bytes, 19_327_348_736);
    assert_eq!(m.topology.smt, 2);
    assert_eq!(m.topology.distances, vec![vec![10, 20], vec![20, 10]]);
    let llc = m.nodes[1].llc.as_ref().unwrap();
    assert_eq!((llc.bytes, llc.ways), (12 << 20, 16));
    assert_eq!(
        (m.core.private_cache.bytes, m.core.private_cache.ways),
        (256 << 10, 8)
    );
    assert_eq!(m.links.len(), 1);
    let d = HwlocDefaults::default();
    assert_eq!(idle(&m, 0, 1), d.idle_local_ns + d.hop_ns);
    assert_eq!(m.nodes[0].curve, d.curve_shape.scaled(d.idle_local_ns));
}

#[test]
fn intel64_4n2t_memattrs_bandwidth_attribute() {
    let m = import("hwloc/8intel64-4n2t-memattrs.xml");
    assert_eq!(m.topology.num_nodes(), 4);
    for n in 0..4 {
        assert_eq!(cpus(&m, n), vec![2 * n as u32, 2 * n as u32 + 1]);
        assert_eq!(m.topology.nodes[n].mem_bytes, GIB);
    }
    // No distance matrix: 10 / 20 and a full mesh.
    assert_eq!(m.topology.distances[0][3], 20);
    assert_eq!(m.links.len(), 6);
    // The file's one standard attribute: Bandwidth 20 MiB/s to OS node 1 (gp_index 8) from
    // initiator cpuset 0xff, i.e. from every node: no memory is that slow, so it is reported
    // and left out, and node 1's controller and links keep the defaults; the custom
    // attributes (foobar, barnoinit) are ignored.
    let d = HwlocDefaults::default();
    assert_eq!(m.nodes[1].ctrl_peak_gbps, d.ctrl_peak_gbps);
    assert_eq!(link(&m, 0, 1).gbps_per_dir, d.link_gbps_per_dir);
    assert_eq!(link(&m, 1, 3).gbps_per_dir, d.link_gbps_per_dir);
    assert!(
        m.description
            .contains("memory attribute bandwidth: 4 value(s) not plausible for memory (expected 1-2000 GB/s), e.g. 0.021 GB/s"),
        "{}",
        m.description
    );
    assert_eq!(m.nodes[0].ctrl_peak_gbps, d.ctrl_peak_gbps);
    assert_eq!(link(&m, 0, 2).gbps_per_dir, d.link_gbps_per_dir);
    // No Latency attribute in this file: latencies are the defaults.
    assert!(m.nodes.iter().all(|n| n.idle_local_ns == d.idle_local_ns));
    assert_eq!(idle(&m, 2, 3), d.idle_local_ns + d.hop_ns);
    assert!(
        m.description.contains("'Bandwidth' memory attribute"),
        "{}",
        m.description
    );
}

#[test]
fn memattr_latencies_set_idle_and_hop_figures() {
    let m = import("fixtures/4n-square-memattrs.xml");
    // Latency (ns): local 80 on node 0, 85 elsewhere; one hop +40.
    assert_eq!(m.nodes[0].idle_local_ns, 80.0);
    assert_eq!(m.nodes[3].idle_local_ns, 85.0);
    assert_eq!(m.nodes[3].curve, Curve::intel_shape().scaled(85.0));
    assert_eq!(
        m.links.len(),
        4,
        "a square: the 16s are links, the 22s 2 hops"
    );
    assert!(m.links.iter().all(|l| (l.hop_ns - 40.0).abs() < 1e-9));
    assert_eq!(idle(&m, 1, 0), 120.0);
    assert_eq!(idle(&m, 0, 3), 85.0 + 80.0);
    // Bandwidth (MiB/s): 60 000 local, 19 073 remote.
    assert!((m.nodes[2].ctrl_peak_gbps - 60_000.0 * 1_048_576.0 / 1e9).abs() < 1e-9);
    assert!((link(&m, 0, 1).gbps_per_dir - 20.0).abs() < 1e-3);
    assert!(m.description.contains("'Latency' memory attribute"));
}

#[test]
fn cxl_memory_node_is_cpu_less_and_linked_to_its_package() {
    let m = import("fixtures/2s-cxl-memattrs.xml");
    assert_eq!(m.topology.num_nodes(), 3);
    assert_eq!(cpus(&m, 0), vec![0, 1, 2, 3]);
    assert_eq!(cpus(&m, 1), vec![4, 5, 6, 7]);
    assert!(
        m.topology.nodes[2].cpus.is_empty(),
        "the CXL node shares package 0's locality but gets no CPUs"
    );
    assert!(m.nodes[2].llc.is_none());
    assert_eq!(m.topology.nodes[2].mem_bytes, 64 * GIB);
    assert_eq!(m.links.len(), 2);
    assert_eq!(link(&m, 0, 2).hop_ns, 160.0);
    assert_eq!(idle(&m, 0, 2), 250.0);
    assert_eq!(idle(&m, 1, 2), 300.0);
    assert_eq!(idle(&m, 0, 1), 140.0);
    let r = m.routes().unwrap();
    let gb = |mib: f64| mib * 1_048_576.0 / 1e9;
    assert_eq!(m.nodes[2].ctrl_peak_gbps, gb(20_000.0));
    assert_eq!(
        m.peak_bandwidth_gbps(&r, NodeId(1), NodeId(2)),
        gb(20_000.0)
    );
    assert_eq!(
        m.peak_bandwidth_gbps(&r, NodeId(1), NodeId(0)),
        gb(32_000.0)
    );
}

#[test]
fn cxlmem_dax_v2_devices_are_not_numa_nodes() {
    // The CXL memory devices (mem0-mem3) and the DAX region dax0.0 of this file are not
    // onlined as system RAM, so the OS has one NUMA node; the description lists the devices.
    let m = import("hwloc/cxlmem+dax.v2.xml");
    assert_eq!(m.topology.num_nodes(), 1);
    assert_eq!(cpus(&m, 0), vec![0, 1, 2, 3]);
    assert_eq!(m.topology.nodes[0].mem_bytes, 3_061_719_040);
    assert_eq!(m.nodes[0].llc.as_ref().unwrap().bytes, 16 << 20);
    assert_eq!(m.core.private_cache.bytes, 4 << 20);
    for dev in [
        "mem0",
        "mem1",
        "mem2",
        "mem3",
        "dax0.0",
        "CXLRAMSize 262144KiB",
    ] {
        assert!(
            m.description.contains(dev),
            "{dev} missing from: {}",
            m.description
        );
    }
}

#[test]
fn this_ci_machine_one_node_two_cores() {
    let m = import("hwloc/this-ci-machine-1n2c.xml");
    assert_eq!(m.topology.num_nodes(), 1);
    assert_eq!(cpus(&m, 0), vec![0, 1]);
    assert_eq!(m.topology.nodes[0].mem_bytes, 6_671_249_408);
    assert_eq!(m.topology.smt, 1);
    let llc = m.nodes[0].llc.as_ref().unwrap();
    assert_eq!((llc.bytes, llc.ways), (110_100_480, 15));
    assert_eq!(
        (m.core.private_cache.bytes, m.core.private_cache.ways),
        (2 << 20, 16)
    );
    assert!(m.links.is_empty());
    assert!(m.description.contains("Intel(R) Xeon(R) Processor"));
}

#[test]
fn hwloc1_file_with_two_hop_tiers() {
    let m = import("fixtures/v1-opteron6272-8n.xml");
    assert_eq!(m.topology.num_nodes(), 8);
    assert_eq!(cpus(&m, 6), vec![12, 13]);
    assert_eq!(m.topology.nodes[0].mem_bytes, 64 * GIB);
    // The NYU matrix: every pair at 16 is a link (18 of them, 5–7 included), every pair at 22
    // has a common neighbour and is routed over 2 hops.
    assert_eq!(m.topology.distances[0][3], 22);
    assert_eq!(m.topology.distances[2][5], 16);
    assert_eq!(m.links.len(), 18);
    let d = HwlocDefaults::default();
    let r = m.routes().unwrap();
    for i in 0..8u16 {
        for j in 0..8u16 {
            let want = match m.topology.distances[i as usize][j as usize] {
                10 => 0,
                16 => 1,
                _ => 2,
            };
            assert_eq!(r.hops(NodeId(i), NodeId(j)), want, "{i}->{j}");
        }
    }
    assert_eq!(idle(&m, 0, 3), d.idle_local_ns + 2.0 * d.hop_ns);
    // A module's shared 2 MiB L2 is each core's private cache; the L3 is the LLC.
    assert_eq!(
        (m.core.private_cache.bytes, m.core.private_cache.ways),
        (2 << 20, 16)
    );
    let llc = m.nodes[0].llc.as_ref().unwrap();
    assert_eq!((llc.bytes, llc.ways), (6 << 20, 48));
    assert!(m.description.contains("format 1.x"));
}

#[test]
fn links_are_derived_from_distances_where_one_hop_links_do_not_fit() {
    // 16/22 where nodes 0 and 3 (22 apart) have no common one-hop neighbour: every pair is
    // linked, each link's hop proportional to its distance, 16 getting the one-hop 50 ns.
    let m = import("fixtures/4n-line.xml");
    let d = HwlocDefaults::default();
    assert_eq!(m.links.len(), 6);
    assert_eq!(link(&m, 0, 1).hop_ns, d.hop_ns);
    assert_eq!(link(&m, 0, 3).hop_ns, d.hop_ns * 22.0 / 16.0);
    assert!(m
        .links
        .iter()
        .all(|l| l.gbps_per_dir == d.link_gbps_per_dir));
    assert_eq!(m.routes().unwrap().hops(NodeId(0), NodeId(3)), 1);
    assert!(
        m.description
            .contains("links derived from the distance matrix")
            && m.description.contains("OS nodes 0 and 3")
            && m.description.contains("replace_links"),
        "{}",
        m.description
    );
}

#[test]
fn cluster_on_die_keeps_the_matrix_latency_order() {
    // 2 packages × 2 cluster-on-die nodes, SLIT 10/21/31: the one-hop model cannot route 31
    // (nodes 0 and 2 share no 21-neighbour), the derived links keep every node's order: its
    // package's other node is nearer than the other package's nodes.
    let m = import("fixtures/4n-cod-2p.xml");
    assert!(m
        .description
        .contains("links derived from the distance matrix"));
    let dist = &m.topology.distances;
    for i in 0..4u16 {
        let same = i ^ 1;
        for other in if i < 2 { [2, 3] } else { [0, 1] } {
            assert_eq!(dist[i as usize][other as usize], 31);
            assert!(
                idle(&m, i, same) < idle(&m, i, other),
                "{i}: same package {same} {} ns, other package {other} {} ns",
                idle(&m, i, same),
                idle(&m, i, other)
            );
        }
        for j in 0..4u16 {
            for k in 0..4u16 {
                if dist[i as usize][j as usize] < dist[i as usize][k as usize] {
                    assert!(idle(&m, i, j) < idle(&m, i, k), "{i}: {j} vs {k}");
                }
            }
        }
    }
    let d = HwlocDefaults::default();
    assert_eq!(idle(&m, 0, 1), d.idle_local_ns + d.hop_ns);
    assert_eq!(idle(&m, 0, 2), d.idle_local_ns + d.hop_ns * 31.0 / 21.0);
}

#[test]
fn sub_numa_clustering_keeps_the_matrix_latency_order() {
    // SNC: 10 within a node, 11 to the package's other cluster, 21 across packages.
    let xml = std::fs::read_to_string(path("fixtures/4n-cod-2p.xml"))
        .unwrap()
        .replace(
            "10 21 31 31 21 10 31 31 31 31 10 21 31 31 21 10 ",
            "10 11 21 21 11 10 21 21 21 21 10 11 21 21 11 10 ",
        );
    let m = import_str(&xml, "snc.xml", "snc", &HwlocDefaults::default()).unwrap();
    let d = HwlocDefaults::default();
    assert!(m
        .description
        .contains("links derived from the distance matrix"));
    assert_eq!(idle(&m, 0, 1), d.idle_local_ns + d.hop_ns);
    assert_eq!(idle(&m, 0, 2), d.idle_local_ns + d.hop_ns * 21.0 / 11.0);
    assert!(idle(&m, 3, 2) < idle(&m, 3, 0));
}

#[test]
fn asymmetric_matrices_link_by_the_mean_of_both_directions() {
    let xml = std::fs::read_to_string(path("fixtures/4n-cod-2p.xml"))
        .unwrap()
        .replace(
            "10 21 31 31 21 10 31 31 31 31 10 21 31 31 21 10 ",
            "10 21 31 41 21 10 31 31 31 31 10 21 31 31 21 10 ",
        );
    let m = import_str(&xml, "asym.xml", "asym", &HwlocDefaults::default()).unwrap();
    let d = HwlocDefaults::default();
    assert_eq!(link(&m, 0, 3).hop_ns, d.hop_ns * 36.0 / 21.0);
    assert_eq!(m.topology.distances[0][3], 41);
    assert_eq!(m.topology.distances[3][0], 31);
}

#[test]
fn hwloc1_matrices_prefer_the_first_with_10_on_its_diagonal() {
    // Two root matrices over 4 objects: the sockets' (1/2/4, first in the file) and the NUMA
    // nodes' (10/20). hwloc 2 keeps both as NUMA matrices; the SLIT-like one is the nodes'.
    let m = import("fixtures/v1-two-matrices.xml");
    for i in 0..4 {
        for j in 0..4 {
            assert_eq!(m.topology.distances[i][j], if i == j { 10 } else { 20 });
        }
    }
    assert_eq!(m.links.len(), 6);
    assert!(
        m.description
            .contains("number 2 used, the first with 10 on its diagonal"),
        "{}",
        m.description
    );
    assert!(!m.description.contains("derived"));
    // As hwloc 2 exports 1.x files: both with 10 on the diagonal, the NUMA one first, its
    // relative_depth one level off (the sockets' says 1, the NUMA nodes' depth): the first.
    let m = import("fixtures/v2tov1-two-matrices.xml");
    assert_eq!(m.topology.distances[0], vec![10, 20, 20, 20]);
}

#[test]
fn unnamed_hwloc2_matrices_prefer_the_one_with_10_on_its_diagonal() {
    // A 1.x file converted by hwloc 2 keeps both matrices unnamed, the package one first.
    let m = import("fixtures/v1tov2-two-unnamed-matrices.xml");
    assert_eq!(m.topology.distances[0], vec![10, 20, 20, 20]);
    assert!(
        m.description.contains("2 unnamed NUMA latency matrices"),
        "{}",
        m.description
    );
}

#[test]
fn a_reported_local_distance_above_a_remote_one_is_kept_as_hwloc_reads_it() {
    // Rows of nodes 0, 2 and 16 holding the first three columns of a 17-node SLIT, as in
    // hwloc's 8ia64-2n2s2c+1n.v1.xml: node 2 is 17 from itself and 10 from node 16.
    let p = path("fixtures/v1-ia64-cut-slit.xml");
    let m = import_file(&p, &HwlocDefaults::default()).unwrap();
    assert_eq!(
        m.topology.distances,
        vec![vec![10, 17, 17], vec![17, 17, 10], vec![14, 14, 14]]
    );
    assert_eq!(cpus(&m, 1), vec![2, 3]);
    assert!(m.topology.nodes[2].cpus.is_empty());
    assert_eq!(m.nodes[2].os_index, Some(16));
    assert!(
        m.description.contains("OS node 2's local distance (17)"),
        "{}",
        m.description
    );
    // Valid as an import; Machine::validate, as machine files, wants the local distance smallest.
    numalab_machine::hwloc::validate_imported(&m).unwrap();
    assert!(m.validate().is_err());
    // The fallback order still starts at home.
    assert_eq!(m.topology.nodes_by_distance(NodeId(1))[0], NodeId(1));
    // The memory-only node hangs off the CPU node nearest to it by the matrix.
    assert_eq!(m.links.len(), 2);
    link(&m, 1, 2);
    // A TOML override starting from the file keeps the matrix ...
    let dir = std::env::temp_dir().join(format!("numalab-hwloc-ia64-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(&p, dir.join("ia64.xml")).unwrap();
    std::fs::write(dir.join("o.toml"), "hwloc = \"ia64.xml\"\nid = \"o\"\n").unwrap();
    let o = Machine::from_toml_file(dir.join("o.toml")).unwrap();
    assert_eq!(o.topology.distances, m.topology.distances);
    // ... but a matrix written in a machine file is checked whole.
    let e = Machine::from_toml_str(&m.to_toml(), "written.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("smallest in its row"), "{e}");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_file_without_numa_nodes_is_one_node() {
    let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE topology SYSTEM "hwloc2.dtd">
<topology version="2.0">
  <object type="Machine" os_index="0" cpuset="0x0000000f" local_memory="8589934592">
    <object type="Package" os_index="0" cpuset="0x0000000f">
      <object type="Core" os_index="0" cpuset="0x00000003">
        <object type="PU" os_index="0" cpuset="0x00000001"/>
        <object type="PU" os_index="1" cpuset="0x00000002"/>
      </object>
      <object type="Core" os_index="1" cpuset="0x0000000c">
        <object type="PU" os_index="2" cpuset="0x00000004"/>
        <object type="PU" os_index="3" cpuset="0x00000008"/>
      </object>
    </object>
  </object>
</topology>"#;
    let m = import_str(xml, "old.xml", "old", &HwlocDefaults::default()).unwrap();
    assert_eq!(m.topology.num_nodes(), 1);
    assert_eq!(cpus(&m, 0), vec![0, 1, 2, 3]);
    assert_eq!(m.topology.smt, 2);
    assert_eq!(m.topology.nodes[0].mem_bytes, 8 * GIB);
    assert_eq!(m.nodes[0].os_index, None);
    assert!(m.description.contains("no NUMANode objects"));
}

#[test]
fn broken_files_give_clear_errors() {
    let d = HwlocDefaults::default();
    let e = import_str(
        "<topology version='2.0'><object type='Machine'>",
        "cut.xml",
        "x",
        &d,
    )
    .unwrap_err();
    assert!(matches!(e, MachineError::Parse { .. }));
    assert!(
        e.to_string().starts_with("cut.xml: not well-formed XML"),
        "{e}"
    );
    let e = import_str(
        "<topology version='2.0'><object type='Machine' cpuset='0x1'/></topology>",
        "empty.xml",
        "x",
        &d,
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("empty.xml") && e.contains("no PU objects"),
        "{e}"
    );
    let e = import_str("<html><body/></html>", "page.xml", "x", &d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("page.xml") && e.contains("<topology>"), "{e}");
    let e = import_str(
        "<topology version='2.0'><object type='Machine' cpuset='0xzz'><object type='PU' os_index='0' cpuset='0x1'/></object></topology>",
        "bits.xml",
        "x",
        &d,
    )
    .unwrap_err()
    .to_string();
    assert!(e.contains("bits.xml") && e.contains("0xzz"), "{e}");
    let bad_dist = r#"<topology version="2.0">
  <object type="Machine" cpuset="0x3">
    <object type="NUMANode" os_index="0" cpuset="0x1" local_memory="1073741824"/>
    <object type="NUMANode" os_index="1" cpuset="0x2" local_memory="1073741824"/>
    <object type="PU" os_index="0" cpuset="0x1"/>
    <object type="PU" os_index="1" cpuset="0x2"/>
  </object>
  <distances2 type="NUMANode" nbobjs="2" kind="5" name="NUMALatency" indexing="os">
    <indexes length="2">0 1</indexes>
    <u64values length="3">10 20 20</u64values>
  </distances2>
</topology>"#;
    let e = import_str(bad_dist, "dist.xml", "x", &d)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("dist.xml")
            && e.contains("NUMALatency")
            && e.contains("expected 2 indexes and 4 values"),
        "{e}"
    );
    let e = import_file(&path("no-such.xml"), &d)
        .unwrap_err()
        .to_string();
    assert!(e.contains("no-such.xml"), "{e}");
}

#[test]
fn a_negative_memory_size_and_absurd_nesting_are_errors() {
    let xml = std::fs::read_to_string(path("fixtures/v1-opteron6272-8n.xml")).unwrap();
    let at = xml
        .find("local_memory=\"")
        .expect("the fixture has local_memory");
    let end = at + xml[at + 14..].find('"').unwrap() + 15;
    let bad = format!("{}local_memory=\"-5\"{}", &xml[..at], &xml[end..]);
    let e = import_str(&bad, "bad.xml", "bad", &HwlocDefaults::default())
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("local_memory=\"-5\"") && e.contains("byte count"),
        "{e}"
    );
    // 20 000 nested groups: refused before any tree is walked (no stack overflow)
    let deep = format!(
        "<?xml version=\"1.0\"?><topology>{}{}</topology>",
        "<object type=\"Group\">".repeat(20_000),
        "</object>".repeat(20_000)
    );
    let e = import_str(&deep, "deep.xml", "deep", &HwlocDefaults::default())
        .expect_err("refused")
        .to_string();
    assert!(e.contains("nested more than 256 deep"), "{e}");
}

/// `depth` groups nested, each followed by `junk` (which holds a closing tag that closes
/// nothing), in a topology.
fn nested_groups(depth: usize, junk: &str) -> String {
    format!(
        "<?xml version=\"1.0\"?><topology>{}{}</topology>",
        format!("<object type=\"Group\">{junk}").repeat(depth),
        "</object>".repeat(depth)
    )
}

#[test]
fn nesting_hidden_behind_closing_tags_in_comments_cdata_or_instructions_is_refused() {
    // Each `</x>` here is text, not a tag: counting it as one let 20 000 levels through to
    // the parser, which recurses per level and overflowed the stack (without the fix this
    // test aborts the test binary).
    let d = HwlocDefaults::default();
    for junk in ["<!--</x>-->", "<![CDATA[</x>]]>", "<?pi </x>?>"] {
        let deep = nested_groups(20_000, junk);
        let e = import_str(&deep, "deep.xml", "deep", &d)
            .expect_err(junk)
            .to_string();
        assert!(
            e.contains("deep.xml") && e.contains("nested more than 256 deep"),
            "{junk}: {e}"
        );
    }
    // an entity's value is parsed where it is referenced, so its nesting counts too
    let value = format!(
        "{}{}",
        "<object type='Group'>".repeat(20_000),
        "</object>".repeat(20_000)
    );
    let deep = format!(
        "<?xml version=\"1.0\"?><!DOCTYPE topology [<!ENTITY g \"{value}\">]><topology>&g;</topology>"
    );
    let e = import_str(&deep, "entity.xml", "deep", &d)
        .expect_err("entity")
        .to_string();
    assert!(e.contains("nested more than 256 deep"), "{e}");
    // 200 levels, with the same junk, is within the limit (and not a topology)
    let e = import_str(&nested_groups(200, "<!--</x>-->"), "ok.xml", "ok", &d)
        .expect_err("no PUs")
        .to_string();
    assert!(e.contains("no PU objects"), "{e}");
}

#[test]
fn a_topology_with_tags_inside_comments_cdata_and_instructions_still_imports() {
    let xml = std::fs::read_to_string(path("fixtures/v1-opteron6272-8n.xml")).unwrap();
    let d = HwlocDefaults::default();
    let plain = import_str(&xml, "t.xml", "t", &d).unwrap();
    // Tags inside a comment, CDATA section, instruction, DOCTYPE or attribute value are
    // text: 300 "opening" ones must not count as nesting (a count of every `<name` refused
    // this), nor closing ones as closes.
    let opens = "<object type=\"Group\">".repeat(300);
    let doctype = format!(
        "<!DOCTYPE topology SYSTEM \"hwloc.dtd\" [<!ENTITY note '<b><b/></b>'> <!-- {opens} </topology> -->]>"
    );
    let noisy = xml
        .replacen("<!DOCTYPE topology SYSTEM \"hwloc.dtd\">", &doctype, 1)
        .replace(
            "<object type=\"PU\"",
            &format!(
                "<!-- {opens} </object> --><![CDATA[{opens}</object>]]><?numalab {opens}?><object type=\"PU\""
            ),
        )
        .replacen("<object type=\"Machine\"", "<object info=\"a > b / c\" type=\"Machine\"", 1);
    assert!(noisy.len() > xml.len() + 100_000);
    let m = import_str(&noisy, "t.xml", "t", &d).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(m, plain);
}

#[test]
fn implausible_memory_attributes_are_reported_and_replaced_by_defaults() {
    let xml = std::fs::read_to_string(path("fixtures/2s-cxl-memattrs.xml")).unwrap();
    // node 0's own bandwidth written as 20 MiB/s, node 1's latency as 1 ns
    let bad = xml
        .replacen(
            r#"target_obj_gp_index="10" value="100000""#,
            r#"target_obj_gp_index="10" value="20""#,
            1,
        )
        .replacen(
            r#"target_obj_gp_index="11" value="90""#,
            r#"target_obj_gp_index="11" value="1""#,
            1,
        );
    assert_ne!(bad, xml);
    let d = HwlocDefaults::default();
    let m = import_str(&bad, "bad.xml", "bad", &d).unwrap();
    m.validate().unwrap();
    assert_eq!(m.nodes[0].ctrl_peak_gbps, d.ctrl_peak_gbps);
    assert_eq!(idle(&m, 1, 1), d.idle_local_ns);
    assert!(
        m.description
            .contains("memory attribute bandwidth: 1 value(s) not plausible")
            && m.description
                .contains("e.g. 0.021 GB/s from node 0 to node 0")
            && m.description
                .contains("memory attribute latency: 1 value(s) not plausible")
            && m.description.contains("e.g. 1 ns from node 1 to node 1"),
        "{}",
        m.description
    );
    // the plausible ones are kept
    assert_eq!(idle(&m, 0, 0), 90.0);
}

#[test]
fn memory_side_caches_are_never_the_llc() {
    // A 2 GiB memory-side cache (hwloc's MemCache, as KNL's MCDRAM in cache mode or a
    // CXL/HBM cache) in front of node 0, at depth 3 like the L3s beside it: imported as
    // node 0's LLC it would make every simulation of it allocate gigabytes of cache state.
    let numa0 = r#"<object type="NUMANode" os_index="0" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="1003" local_memory="4294967296"/>"#;
    let xml = std::fs::read_to_string(path("fixtures/4n-cod-2p.xml")).unwrap();
    assert!(xml.contains(numa0));
    let xml = xml.replace(
        numa0,
        &format!(
            r#"<object type="MemCache" cpuset="0x00000003" complete_cpuset="0x00000003" nodeset="0x00000001" complete_nodeset="0x00000001" gp_index="2000" cache_size="2147483648" depth="3" cache_linesize="64" cache_associativity="0" cache_type="0">{numa0}</object>"#
        ),
    );
    let m = import_str(&xml, "memcache.xml", "memcache", &HwlocDefaults::default()).unwrap();
    let plain = import("fixtures/4n-cod-2p.xml");
    assert_eq!(m.nodes[0].llc, plain.nodes[0].llc);
    assert_eq!(m.nodes[0].llc.as_ref().unwrap().bytes, 16 << 20);
    assert!(
        m.description
            .contains("a 2048 MiB memory-side cache (hwloc MemCache) is not modelled"),
        "{}",
        m.description
    );
}
