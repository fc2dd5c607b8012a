//! The fit, without a machine: measurements made from a known machine's own model must give
//! back a machine file whose model is that machine's (latency and bandwidth between every pair
//! of nodes, curves, concurrency, OS costs).

use numalab_calibrate::fit::fit;
use numalab_calibrate::loaded::LoadedPoint;
use numalab_calibrate::oscosts::{FaultCost, Measured, MovePagesCost, ThpMove};
use numalab_calibrate::write::{override_text, summary};
use numalab_calibrate::{LoadedSweep, Measurements, NodeUsed, Options};
use numalab_core::NodeId;
use numalab_machine::Machine;

fn id(i: usize) -> NodeId {
    NodeId(i as u16)
}

/// Payload bandwidth of CPUs on `s` streaming from `d` in the model: the controller peak, or
/// the narrowest link less its coherence share (docs/model.md, "Memory system").
fn model_gbps(m: &Machine, s: usize, d: usize) -> f64 {
    let r = m.routes().unwrap();
    m.read_payload_gbps(&r, id(s), id(d))
        .min(m.nodes[d].ctrl_peak_gbps)
}

/// What a perfect calibration run on `m` would measure.
fn measured_on(m: &Machine) -> Measurements {
    let n = m.topology.num_nodes();
    let routes = m.routes().unwrap();
    let has_cpus = |s: usize| !m.topology.nodes[s].cpus.is_empty();
    let matrix = |f: &dyn Fn(usize, usize) -> f64| -> Vec<Vec<Option<f64>>> {
        (0..n)
            .map(|s| (0..n).map(|d| has_cpus(s).then(|| f(s, d))).collect())
            .collect()
    };
    let loaded = (0..n)
        .map(|d| {
            let peak = m.nodes[d].ctrl_peak_gbps;
            Some(LoadedSweep {
                chaser_cpu: 0,
                injector_cpus: vec![1, 2],
                injectors_local: true,
                points: [25.0, 50.0, 75.0, 95.0, 100.0]
                    .iter()
                    .map(|u| LoadedPoint {
                        delay_iters: 0,
                        served_gbps: u / 100.0 * peak,
                        latency_ns: m.nodes[d].curve.at(u / 100.0),
                    })
                    .collect(),
            })
        })
        .collect();
    let os = &m.os;
    let pages = 4096;
    let page_ns = 4096.0 / os.move_pages_mbps * 1e3;
    let fault = |ns: f64| {
        Measured::Value(FaultCost {
            ns,
            pages: 100,
            runs: 3,
        })
    };
    Measurements {
        date: "2026-11-29".into(),
        kernel: Some("6.12.0-test".into()),
        options: Options::quick(0),
        nodes: (0..n)
            .map(|i| NodeUsed {
                id: i,
                os_node: i as u32,
                cpus: m.topology.nodes[i].cpus.iter().map(|c| c.0).collect(),
                memory_allowed: true,
            })
            .collect(),
        chase_huge_fraction: vec![Some(1.0); n],
        latency_ns: matrix(&|s, d| m.idle_latency_ns(&routes, id(s), id(d))),
        bandwidth_gbps: matrix(&|s, d| model_gbps(m, s, d)),
        single_thread_gbps: Some(m.core.concurrency_lines * 64.0 / m.nodes[0].idle_local_ns),
        single_thread_node: Some(0),
        loaded,
        fault_4k: fault(os.fault_4k_ns),
        fault_2m: fault(os.fault_2m_ns),
        fault_1g: Measured::skipped("no free 1 GiB page"),
        fault_file_4k: fault(os.fault_file_4k_ns),
        move_pages: Measured::Value(MovePagesCost {
            from_node: 0,
            to_node: 1,
            one_page_call_ns: os.move_pages_base_ns + page_ns,
            batch_call_ns: os.move_pages_base_ns + pages as f64 * page_ns,
            pages,
            thp: Measured::Value(ThpMove {
                huge_pages: 8,
                call_ns: 16.0 * 1048576.0 / 3500.0 * 1e3,
                mbps: 3500.0,
                huge_after: 1.0,
            }),
        }),
    }
}

fn close(a: f64, b: f64, tol: f64, what: &str) {
    assert!((a - b).abs() <= tol, "{what}: {a} against {b}");
}

/// Calibrate `base` from its own model and check the calibrated machine models the same.
fn round_trip(base: &Machine, base_ref: &str) -> (Machine, String) {
    let meas = measured_on(base);
    let f = fit(base, &meas).unwrap();
    let text = override_text(base_ref, "calibrated", base, &meas, &f);
    let c = Machine::from_toml_str(&text, "the calibrated text")
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    let (rb, rc) = (base.routes().unwrap(), c.routes().unwrap());
    let n = base.topology.num_nodes();
    for s in (0..n).filter(|&s| !base.topology.nodes[s].cpus.is_empty()) {
        for d in 0..n {
            close(
                c.idle_latency_ns(&rc, id(s), id(d)),
                base.idle_latency_ns(&rb, id(s), id(d)),
                0.11,
                &format!("latency {s} → {d}"),
            );
            close(
                model_gbps(&c, s, d),
                model_gbps(base, s, d),
                0.02,
                &format!("bandwidth {s} → {d}"),
            );
        }
    }
    for d in 0..n {
        for u in [0.25, 0.5, 0.75, 0.95, 1.0] {
            close(
                c.nodes[d].curve.at(u),
                base.nodes[d].curve.at(u),
                0.06,
                &format!("node {d} curve at {u}"),
            );
        }
    }
    close(
        c.core.concurrency_lines,
        base.core.concurrency_lines,
        0.006,
        "concurrency_lines",
    );
    close(c.os.fault_4k_ns, base.os.fault_4k_ns, 0.06, "fault_4k_ns");
    close(c.os.fault_2m_ns, base.os.fault_2m_ns, 0.06, "fault_2m_ns");
    close(
        c.os.fault_file_4k_ns,
        base.os.fault_file_4k_ns,
        0.06,
        "fault_file_4k_ns",
    );
    close(
        c.os.move_pages_base_ns,
        base.os.move_pages_base_ns,
        0.06,
        "move_pages_base_ns",
    );
    close(
        c.os.move_pages_mbps,
        base.os.move_pages_mbps,
        0.06,
        "move_pages_mbps",
    );
    assert_eq!(
        c.os.fault_1g_ns, base.os.fault_1g_ns,
        "not measured: the base's value"
    );
    assert_eq!(c.os.thp_migrate_mbps, 3500.0);
    assert_eq!(c.id, "calibrated");
    let s = summary(&meas, &c, &f);
    assert!(s.contains("largest difference: 0.0 %"), "{s}");
    (c, text)
}

#[test]
fn a_multi_hop_machine_comes_back_from_its_own_measurements() {
    // Barcelona's square: two-hop pairs, a second hop cheaper than the first (next_hop_ns).
    let base = numalab_machine::load("opteron8347he-4n").unwrap();
    let (_, text) = round_trip(&base, "opteron8347he-4n");
    // Every figure says how it was measured.
    let lines: Vec<&str> = text.lines().collect();
    for (i, l) in lines.iter().enumerate() {
        if l.starts_with("hop_ns") || l.starts_with("idle_local_ns") || l.starts_with("curve") {
            assert!(lines[i - 1].starts_with("# "), "no comment above '{l}'");
        }
    }
    assert!(
        text.contains("fault_1g_ns: no free 1 GiB page"),
        "what was not measured is said"
    );
}

#[test]
fn a_cpu_less_node_gets_its_nearest_cpu_node_latency_and_the_links_carry_the_rest() {
    let gold = numalab_machine::load("xeon-gold6130-2n").unwrap();
    let dir = std::env::temp_dir().join(format!("numalab-fit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("cxl.toml");
    std::fs::write(
        &file,
        format!(
            r#"base = "xeon-gold6130-2n"
id = "gold-cxl"
[distances]
matrix = [[10, 21, 24], [21, 10, 26], [24, 26, 10]]
[[node]]
id = 2
cpus = ""
mem_bytes = 68719476736
llc = "none"
ctrl_peak_gbps = 20.0
idle_local_ns = {}
curve_shape = "intel"
[[link]]
a = 0
b = 2
gbps_per_dir = 25.0
hop_ns = 80.0
[[link]]
a = 1
b = 2
gbps_per_dir = 12.0
hop_ns = 130.0
"#,
            gold.nodes[0].idle_local_ns
        ),
    )
    .unwrap();
    let base = Machine::from_toml_file(&file).unwrap();
    let (c, _) = round_trip(&base, file.to_str().unwrap());
    close(
        c.nodes[2].idle_local_ns,
        gold.nodes[0].idle_local_ns,
        0.06,
        "node 2's idle latency",
    );
    let hop = |a: usize, b: usize| {
        c.links
            .iter()
            .find(|l| l.a.index() == a && l.b.index() == b)
            .unwrap()
            .hop_ns
    };
    close(hop(0, 2), 80.0, 0.11, "hop to the CPU-less node");
    close(hop(1, 2), 130.0, 0.11, "the other hop");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn measurements_of_another_machine_are_refused() {
    let a = numalab_machine::load("xeon-gold6130-2n").unwrap();
    let b = numalab_machine::load("opteron8347he-4n").unwrap();
    let err = fit(&a, &measured_on(&b)).unwrap_err();
    assert!(err.contains("4 nodes") && err.contains("2"), "{err}");
}
