//! The TOML machine format: round trips, override files, and errors that name the key.

use numalab_core::{CpuId, NodeId};
use numalab_machine::{preset, preset_ids, Curve, Machine, MachineError, SiblingNumbering};
use std::path::PathBuf;

/// A fresh folder for files of one test.
fn scratch_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-machine-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(rel)
}

fn err(text: &str) -> String {
    Machine::from_toml_str(text, "test.toml")
        .unwrap_err()
        .to_string()
}

#[test]
fn every_preset_round_trips_through_toml() {
    for id in preset_ids() {
        let m = preset(id).unwrap();
        let text = m.to_toml();
        let back =
            Machine::from_toml_str(&text, id).unwrap_or_else(|e| panic!("{id}: {e}\n{text}"));
        assert_eq!(back, m, "{id} changed in the round trip:\n{text}");
        assert!(!text.contains("base ="), "to_toml writes a complete file");
    }
}

#[test]
fn paging_structure_caches_and_rob_parse_and_refuse_mixed_forms() {
    let amd = Machine::from_toml_str(
        "base = \"xeon-gold6130-2n\"\n[core]\nrob_entries = 72\n[core.tlb]\npsc = { unified_entries = 24 }\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(amd.core.rob_entries, 72);
    assert_eq!(
        amd.core.tlb.psc,
        numalab_machine::PscConfig::Unified { entries: 24 }
    );
    // one level named: the other keeps the base's size
    let intel = Machine::from_toml_str(
        "base = \"xeon-gold6130-2n\"\n[core.tlb]\npsc = { pde_entries = 64 }\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(
        intel.core.tlb.psc,
        numalab_machine::PscConfig::Split {
            pde_entries: 64,
            pdpte_entries: 4
        }
    );
    let e = err(
        "base = \"xeon-gold6130-2n\"\n[core.tlb]\npsc = { pde_entries = 8, unified_entries = 4 }\n",
    );
    assert!(e.contains("core.tlb.psc"), "{e}");
    let e = err("base = \"xeon-gold6130-2n\"\n[core]\nrob_entries = 0\n");
    assert!(e.contains("core.rob_entries"), "{e}");
}

#[test]
fn locked_op_cycles_parse_round_trip_and_refuse_absurd_values() {
    let m = Machine::from_toml_str(
        "base = \"opteron6272-8n\"\n[core]\nlocked_op_cycles = 50\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(m.core.locked_op_cycles, 50);
    let back = Machine::from_toml_str(&m.to_toml(), "t.toml").unwrap();
    assert_eq!(back.core.locked_op_cycles, 50, "written and read back");
    // absent: the base's, or the default where the file names no base
    let base = Machine::from_toml_str("base = \"opteron6272-8n\"\n", "t.toml").unwrap();
    assert_eq!(
        base.core.locked_op_cycles,
        numalab_machine::DEFAULT_LOCKED_OP_CYCLES
    );
    for bad in ["0", "20000"] {
        let e = err(&format!(
            "base = \"opteron6272-8n\"\n[core]\nlocked_op_cycles = {bad}\n"
        ));
        assert!(e.contains("core.locked_op_cycles"), "{bad}: {e}");
    }
}

#[test]
fn page_walkers_parse_round_trip_and_refuse_absurd_counts() {
    let m = Machine::from_toml_str(
        "base = \"xeon-x5650-2n\"\n[core.tlb]\npage_walkers = 4\n",
        "t.toml",
    )
    .unwrap();
    assert_eq!(m.core.tlb.page_walkers, 4);
    let back = Machine::from_toml_str(&m.to_toml(), "t.toml").unwrap();
    assert_eq!(back.core.tlb.page_walkers, 4, "written and read back");
    // absent: the base's
    let base = Machine::from_toml_str("base = \"xeon-gold6130-2n\"\n", "t.toml").unwrap();
    assert_eq!(base.core.tlb.page_walkers, 2);
    for bad in ["0", "17"] {
        let e = err(&format!(
            "base = \"xeon-x5650-2n\"\n[core.tlb]\npage_walkers = {bad}\n"
        ));
        assert!(e.contains("core.tlb.page_walkers"), "{bad}: {e}");
    }
}

#[test]
fn round_trip_keeps_optional_fields() {
    let mut m = preset("opteron8347he-4n").unwrap();
    m.nodes[2].os_index = Some(7);
    m.description = "quotes \" and\nnewlines".into();
    let back = Machine::from_toml_str(&m.to_toml(), "x").unwrap();
    assert_eq!(back, m);
    assert_eq!(back.links[0].next_hop_ns, Some(25.0));
}

#[test]
fn override_file_changes_only_what_it_names() {
    let dir = scratch_dir("override");
    let path = dir.join("my-6272.toml");
    std::fs::write(
        &path,
        r#"
base = "opteron6272-8n"

[core]
concurrency_lines = 10.0

[[node]]
id = 2
ctrl_peak_gbps = 18.0

[[link]]        # widen one existing link
a = 1
b = 0
gbps_per_dir = 12.0
"#,
    )
    .unwrap();
    let m = Machine::from_toml_file(&path).unwrap();
    let base = preset("opteron6272-8n").unwrap();
    assert_eq!(
        m.id, "my-6272",
        "an override without an id is named after its file"
    );
    assert_eq!(m.nodes[2].ctrl_peak_gbps, 18.0);
    assert_eq!(m.nodes[1].ctrl_peak_gbps, 15.5);
    assert_eq!(m.core.concurrency_lines, 10.0);
    assert_eq!(m.links[0].gbps_per_dir, 12.0);
    assert_eq!(m.links.len(), 17);
    // Everything else is the preset's.
    assert_eq!(m.topology, base.topology);
    assert_eq!(m.nodes[2].curve, base.nodes[2].curve);
    assert_eq!(m.core.tlb, base.core.tlb);
    assert_eq!(m.os, base.os);
    assert!(m.source.contains(&path.display().to_string()));
    // ... and loadable by path through `load`.
    assert_eq!(numalab_machine::load(path.to_str().unwrap()).unwrap(), m);
}

#[test]
fn override_of_idle_latency_rescales_the_curve_and_shapes_apply() {
    let m = Machine::from_toml_str(
        r#"
base = "xeon-x5650-2n"
id = "x5650-slow"

[all_nodes]
idle_local_ns = 100.0

[[node]]
id = 1
curve_shape = "amd"

[all_links]
hop_ns = 40.0
"#,
        "slow.toml",
    )
    .unwrap();
    assert_eq!(m.id, "x5650-slow");
    // Node 0 keeps the Intel-shaped curve, scaled by 100/87.
    let c0 = &m.nodes[0].curve;
    assert!((c0.idle() - 100.0).abs() < 1e-9);
    assert!((c0.points.last().unwrap().1 - 252.0 * 100.0 / 87.0).abs() < 1e-9);
    assert_eq!(m.nodes[1].curve, Curve::amd_shape().scaled(100.0));
    let r = m.routes().unwrap();
    assert_eq!(m.idle_latency_ns(&r, NodeId(0), NodeId(1)), 140.0);
}

#[test]
fn smt_can_be_switched_on_by_an_override() {
    // dahu with SMT enabled: 64 CPUs, CPU c and c + 32 siblings on node c mod 2.
    let evens: Vec<String> = (0..64)
        .filter(|c| c % 2 == 0)
        .map(|c| c.to_string())
        .collect();
    let odds: Vec<String> = (0..64)
        .filter(|c| c % 2 == 1)
        .map(|c| c.to_string())
        .collect();
    let text = format!(
        "base = \"xeon-gold6130-2n\"\nid = \"dahu-smt\"\n[core]\nthreads_per_core = 2\n\
         [[node]]\nid = 0\ncpus = \"{}\"\n[[node]]\nid = 1\ncpus = [{}]\n",
        evens.join(","),
        odds.join(", ")
    );
    let m = Machine::from_toml_str(&text, "dahu-smt.toml").unwrap();
    assert_eq!((m.topology.smt, m.topology.num_cpus()), (2, 64));
    assert_eq!(m.topology.node_of_cpu(CpuId(33)), Some(NodeId(1)));
    // Linux's numbering: CPU c and c + 32 are one core
    let core = |m: &Machine, cpu: u32| {
        m.cores_of_cpus()
            .into_iter()
            .find(|(c, _)| c.0 == cpu)
            .map(|(_, k)| k)
            .unwrap()
    };
    assert_eq!(m.core.siblings, SiblingNumbering::Spread);
    assert_eq!(core(&m, 0), core(&m, 32));
    assert_ne!(core(&m, 0), core(&m, 2));
    assert_eq!(core(&m, 33), core(&m, 1));
    // numbered adjacently instead: CPUs 0 and 2 (node 0's first two) are one core
    let adjacent = text.replace(
        "threads_per_core = 2",
        "threads_per_core = 2\nsiblings = \"adjacent\"",
    );
    let a = Machine::from_toml_str(&adjacent, "dahu-smt.toml").unwrap();
    assert_eq!(a.core.siblings, SiblingNumbering::Adjacent);
    assert_eq!(core(&a, 0), core(&a, 2));
    assert_ne!(core(&a, 0), core(&a, 32));
    assert_eq!(Machine::from_toml_str(&a.to_toml(), "again").unwrap(), a);
    let bad = text.replace(
        "threads_per_core = 2",
        "threads_per_core = 2\nsiblings = \"paired\"",
    );
    let e = Machine::from_toml_str(&bad, "dahu-smt.toml")
        .unwrap_err()
        .to_string();
    assert!(e.contains("siblings") || e.contains("paired"), "{e}");
}

#[test]
fn override_may_add_a_cpu_less_node() {
    // A CXL expander behind node 0 of the Gold 6130 machine.
    let m = Machine::from_toml_str(
        r#"
base = "xeon-gold6130-2n"
id = "dahu-cxl"

[distances]
matrix = [[10, 21, 14], [21, 10, 24], [14, 24, 10]]

[[node]]
id = 2
cpus = ""
mem_bytes = 68719476736
ctrl_peak_gbps = 30.0
idle_local_ns = 90.0
curve_shape = "intel"

[[link]]
a = 0
b = 2
gbps_per_dir = 25.0
hop_ns = 80.0
"#,
        "cxl.toml",
    )
    .unwrap();
    assert_eq!(m.topology.num_nodes(), 3);
    assert!(m.topology.nodes[2].cpus.is_empty() && m.nodes[2].llc.is_none());
    let r = m.routes().unwrap();
    assert_eq!(
        m.idle_latency_ns(&r, NodeId(1), NodeId(2)),
        90.0 + 54.0 + 80.0
    );
    assert_eq!(m.peak_bandwidth_gbps(&r, NodeId(1), NodeId(2)), 25.0);
}

#[test]
fn base_may_be_another_file_relative_to_this_one() {
    let dir = scratch_dir("chain");
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(
        dir.join("sub/a.toml"),
        "base = \"xeon-e5520-2n\"\nid = \"a\"\n[[node]]\nid = 0\nctrl_peak_gbps = 17.0\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.toml"),
        "base = \"sub/a.toml\"\nid = \"b\"\n[[node]]\nid = 1\nctrl_peak_gbps = 15.0\n",
    )
    .unwrap();
    let m = Machine::from_toml_file(dir.join("b.toml")).unwrap();
    assert_eq!(
        (m.nodes[0].ctrl_peak_gbps, m.nodes[1].ctrl_peak_gbps),
        (17.0, 15.0)
    );
    // A cycle is stopped.
    std::fs::write(dir.join("c.toml"), "base = \"c.toml\"\n").unwrap();
    let e = Machine::from_toml_file(dir.join("c.toml"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("`base`") && e.contains("deeper"), "{e}");
}

#[test]
fn hwloc_file_with_overrides() {
    let dir = scratch_dir("hwloc");
    let xml = fixture("hwloc/24em64t-2n6c2t-pci.xml");
    std::fs::copy(&xml, dir.join("westmere.xml")).unwrap();
    std::fs::write(
        dir.join("westmere.toml"),
        r#"
hwloc = "westmere.xml"
id = "sl390s"
description = "HP ProLiant SL390s G7, calibrated"

[core]
ghz = 2.66
concurrency_lines = 11.4

[all_nodes]
ctrl_peak_gbps = 20.0
idle_local_ns = 87.0
curve_shape = "intel"

[all_links]
gbps_per_dir = 10.7
hop_ns = 38.0
"#,
    )
    .unwrap();
    let m = Machine::from_toml_file(dir.join("westmere.toml")).unwrap();
    assert_eq!(m.id, "sl390s");
    assert_eq!(m.topology.num_cpus(), 24);
    assert_eq!(m.nodes[1].ctrl_peak_gbps, 20.0);
    assert_eq!(m.nodes[0].curve, Curve::intel_shape().scaled(87.0));
    let r = m.routes().unwrap();
    assert_eq!(m.idle_latency_ns(&r, NodeId(0), NodeId(1)), 125.0);
    assert_eq!(m.core.ghz, 2.66);
}

#[test]
fn hand_written_links_replace_the_links_derived_from_distances() {
    // The XML alone: the matrix does not determine one-hop links, so every pair is linked
    // (the derived model) and the description says so.
    let m = numalab_machine::load(fixture("fixtures/4n-line.xml").to_str().unwrap()).unwrap();
    assert_eq!(m.links.len(), 6);
    assert!(
        m.description
            .contains("links derived from the distance matrix")
            && m.description.contains("no common one-hop neighbour")
            && m.description.contains("[[link]]"),
        "{}",
        m.description
    );
    // A TOML file with replace_links gives the real ones.
    let m = Machine::from_toml_file(fixture("fixtures/4n-line-links.toml")).unwrap();
    assert_eq!(m.links.len(), 4);
    let r = m.routes().unwrap();
    assert_eq!(r.hops(NodeId(0), NodeId(3)), 1);
    assert_eq!(m.idle_latency_ns(&r, NodeId(3), NodeId(0)), 90.0 + 60.0);
    // Without [[link]] tables an override keeps the derived links, [all_links] changing them.
    let dir = scratch_dir("line");
    std::fs::copy(fixture("fixtures/4n-line.xml"), dir.join("l.xml")).unwrap();
    std::fs::write(
        dir.join("l.toml"),
        "hwloc = \"l.xml\"\n[all_links]\nhop_ns = 40.0\n",
    )
    .unwrap();
    let m = Machine::from_toml_file(dir.join("l.toml")).unwrap();
    assert_eq!(m.links.len(), 6);
    assert!(m.links.iter().all(|l| l.hop_ns == 40.0));
}

#[test]
fn syntax_errors_and_unknown_keys_name_the_file_and_key() {
    let e = err("base = \"xeon-e5520-2n\"\n[[node]]\nid = 0\nctrl_peak = 3.0\n");
    assert!(e.contains("test.toml") && e.contains("ctrl_peak"), "{e}");
    let e = err("base = \"xeon-e5520-2n\"\n[core]\nghz = \"fast\"\n");
    assert!(e.contains("test.toml") && e.contains("ghz"), "{e}");
    let e = err("base = \"xeon-e5520-2n\"\n[core]\nghz = 1e308\n");
    assert!(
        e.contains("1e308 GHz is not a core clock") && e.contains("between 0 and 10"),
        "{e}"
    );
    let e = err("base = \"xeon-e5520-2n\"\n[core\n");
    assert!(e.contains("test.toml") && e.contains("line 2"), "{e}");
}

#[test]
fn invalid_figures_name_the_key_and_what_was_expected() {
    let cases: &[(&str, &str)] = &[
        (
            "[[node]]\nid = 1\nctrl_peak_gbps = -3.0\n",
            "`node[1].ctrl_peak_gbps`",
        ),
        (
            "[[node]]\nid = 0\nidle_local_ns = 0.0\n",
            "`node[0].idle_local_ns`",
        ),
        (
            "[[node]]\nid = 0\ncurve = [[0, 84], [50, 80]]\n",
            "`node[0].curve`",
        ),
        (
            "[[node]]\nid = 0\ncurve = [[0, 300], [50, 400]]\n",
            "`node[0].curve`",
        ),
        ("[[node]]\nid = 0\ncpus = \"0-3,x\"\n", "`node[0].cpus`"),
        ("[[node]]\nid = 1\ncpus = \"0-3\"\n", "`node[1].cpus`"),
        ("[[node]]\nid = 3\ncpus = \"20\"\n", "`node[3].id`"),
        (
            "[[node]]\nid = 0\ncurve_shape = \"sparc\"\n",
            "`node[0].curve_shape`",
        ),
        (
            "[[link]]\na = 0\nb = 1\ngbps_per_dir = 0.0\n",
            "`link[0].gbps_per_dir`",
        ),
        (
            "[[link]]\na = 0\nb = 5\ngbps_per_dir = 1.0\nhop_ns = 1.0\n",
            "`link[1].b`",
        ),
        ("replace_links = true\n", "`link`"),
        (
            "[core]\nconcurrency_lines = 0.5\n",
            "`core.concurrency_lines`",
        ),
        ("[core]\nllc_hit_ns = 1.0\n", "`core.llc_hit_ns`"),
        (
            "[core]\nprivate_cache = { bytes = 1000 }\n",
            "`core.private_cache.bytes`",
        ),
        ("[core.tlb]\nl1 = []\n", "`core.tlb.l1`"),
        (
            "[core.tlb]\nl1 = [{ entries = 64, ways = 5, sizes = [\"4K\"] }]\n",
            "`core.tlb.l1[0].ways`",
        ),
        (
            "[core.tlb]\nl1 = [{ entries = 64, sizes = [\"3M\"] }]\n",
            "`core.tlb.l1[0].sizes`",
        ),
        (
            "[core.tlb]\nl2 = [{ entries = 0, sizes = [\"4K\"] }]\n",
            "`core.tlb.l2[0].entries`",
        ),
        (
            "[distances]\nmatrix = [[10, 20], [20]]\n",
            "`distances.matrix`",
        ),
        (
            "[distances]\nmatrix = [[30, 20], [20, 10]]\n",
            "`distances.matrix[0]`",
        ),
        ("link_shape = [[0, 2.0], [100, 3.0]]\n", "`link_shape`"),
        ("[os]\nmove_pages_mbps = 0.0\n", "`os.move_pages_mbps`"),
        ("[os]\nlinux = \"six\"\n", "`os.linux`"),
        ("[os]\nlinux = \"6\"\n", "`os.linux`"),
        ("[os]\ntlb_flush_ipi_ns = -1.0\n", "`os.tlb_flush_ipi_ns`"),
    ];
    for (body, key) in cases {
        let e = err(&format!("base = \"xeon-e5520-2n\"\n{body}"));
        assert!(
            e.contains("test.toml") && e.contains(key) && e.contains("expected"),
            "for {body:?}: {e}"
        );
    }
}

#[test]
fn a_full_file_needs_every_figure() {
    let text = preset("xeon-e5520-2n").unwrap().to_toml();
    for (key, needle) in [
        (
            "ctrl_peak_gbps = 16.0\n",
            "`node[0].ctrl_peak_gbps`: missing",
        ),
        ("ghz = 2.26\n", "`core.ghz`: missing"),
        ("id = \"xeon-e5520-2n\"\n", "`id`: missing"),
        (
            "llc = { bytes = 8388608, ways = 16 }\n",
            "`node[0].llc`: missing",
        ),
    ] {
        let e = err(&text.replacen(key, "", 1));
        assert!(e.contains(needle), "removing {key:?}: {e}");
    }
    let e = err("base = \"nonesuch\"\n");
    assert!(e.contains("`base`") && e.contains("opteron6272-8n"), "{e}");
    let e = err("base = \"xeon-e5520-2n\"\nhwloc = \"x.xml\"\n");
    assert!(e.contains("`hwloc`"), "{e}");
}

#[test]
fn a_minimal_single_node_file() {
    let m = Machine::from_toml_str(
        r#"
id = "laptop"
link_shape = "intel"
link_coherence_overhead = 0.0

[core]
ghz = 3.0
threads_per_core = 2
concurrency_lines = 12.0
private_cache = { bytes = 524288, ways = 8 }
private_hit_ns = 4.0
llc_hit_ns = 15.0

[core.tlb]
l2_hit_ns = 2.0
walk_base_ns = 4.0
l1 = [{ entries = 64, ways = 4, sizes = ["4K"] }]
l2 = [{ entries = 2048, ways = 16, sizes = ["4k", "2m"] }]

[[node]]
id = 0
cpus = "0-7"
mem_bytes = 17179869184
llc = { bytes = 16777216, ways = 16 }
ctrl_peak_gbps = 40.0
idle_local_ns = 80.0
curve_shape = "intel"
"#,
        "laptop.toml",
    )
    .unwrap();
    assert_eq!(m.topology.distances, vec![vec![10]]);
    assert!(m.links.is_empty());
    assert_eq!(
        m.os,
        numalab_machine::OsCosts::reference(),
        "[os] defaults to policies.md §10"
    );
    assert_eq!(m.core.tlb.l2[0].sizes.len(), 2);
}

#[test]
fn validate_reports_machine_errors_by_key() {
    let mut m = preset("xeon-e5520-2n").unwrap();
    m.links.clear();
    let e = m.validate().unwrap_err();
    match &e {
        MachineError::Invalid { origin, key, .. } => {
            assert_eq!(origin, "machine 'xeon-e5520-2n'");
            assert_eq!(key, "link");
        }
        other => panic!("{other}"),
    }
}

/// The examples of docs/machine-format.md parse (skipped where the docs are not checked out
/// next to the crate).
#[test]
fn documentation_examples_parse() {
    let doc = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/machine-format.md");
    let Ok(text) = std::fs::read_to_string(&doc) else {
        return;
    };
    let blocks: Vec<&str> = text
        .split("```toml\n")
        .skip(1)
        .map(|b| b.split("```").next().unwrap())
        .collect();
    assert!(blocks.len() >= 3);
    let mut parsed = 0;
    for b in blocks {
        // The hwloc example names a file that does not exist here.
        if b.contains("hwloc = ") {
            continue;
        }
        let m = Machine::from_toml_str(b, "docs/machine-format.md")
            .unwrap_or_else(|e| panic!("{e}\n{b}"));
        m.validate().unwrap();
        parsed += 1;
    }
    assert!(parsed >= 2);
}
