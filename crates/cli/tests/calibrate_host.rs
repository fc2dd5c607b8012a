//! `numalab calibrate` on this host (one node here and on CI; the multi-node run is vm_cli's
//! `calibrate_measures_every_node_pair`): the file it writes loads, says how each figure was
//! measured and holds what was measured; bad input is refused before anything is written.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn numalab(args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .expect("starting numalab");
    eprintln!(
        "numalab {}\n  -> {:?}\n  stdout: {}\n  stderr: {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn fresh_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-calibrate-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn files_in(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

fn has_numa_sysfs() -> bool {
    Path::new("/sys/devices/system/node/online").exists()
}

#[test]
fn a_quick_calibration_writes_a_machine_that_loads_and_holds_what_was_measured() {
    if !has_numa_sysfs() {
        eprintln!("SKIPPED: no /sys/devices/system/node (not a NUMA-enabled Linux kernel)");
        return;
    }
    let d = fresh_dir("quick");
    let out_path = d.join("here.toml");
    let json_path = d.join("m.json");
    let out = numalab(&[
        "calibrate",
        "--quick",
        "-o",
        out_path.to_str().unwrap(),
        "--json",
        json_path.to_str().unwrap(),
    ]);
    assert!(out.status.success());
    assert_eq!(files_in(&d), ["here-topology.toml", "here.toml", "m.json"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("idle latency, ns: measured / model"),
        "{stdout}"
    );
    assert!(stdout.contains("wrote machine 'here'"), "{stdout}");

    let m: Value = serde_json::from_str(&std::fs::read_to_string(&json_path).unwrap()).unwrap();
    let nodes = m["nodes"].as_array().unwrap().len();
    let lat = m["latency_ns"].as_array().unwrap();
    let bw = m["bandwidth_gbps"].as_array().unwrap();
    assert_eq!(lat.len(), nodes);
    assert!(lat
        .iter()
        .chain(bw)
        .all(|r| r.as_array().unwrap().len() == nodes));
    let l00 = lat[0][0].as_f64().expect("node 0 has CPUs here");
    assert!(
        l00.is_finite() && l00 > 1.0 && l00 < 5000.0,
        "latency {l00} ns"
    );
    let b00 = bw[0][0].as_f64().unwrap();
    assert!(b00 > 0.01 && b00 < 2000.0, "bandwidth {b00} GB/s");
    assert!(m["fault_4k"]["ns"].as_f64().unwrap() > 0.0);
    // a read fault on a cached file allocates and clears nothing: cheaper than a first touch
    let file_ns = m["fault_file_4k"]["ns"].as_f64().unwrap();
    assert!(file_ns > 0.0 && file_ns < m["fault_4k"]["ns"].as_f64().unwrap());

    // The machine loads as `sim --machine` loads it, with the measured figures in it.
    let shown = numalab(&["machine", "show", "--json", out_path.to_str().unwrap()]);
    assert!(shown.status.success());
    let machine: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let idle = machine["nodes"][0]["idle_local_ns"].as_f64().unwrap();
    assert!(
        (idle - l00).abs() < 0.06,
        "idle_local_ns {idle} vs measured {l00}"
    );
    let peak = machine["nodes"][0]["ctrl_peak_gbps"].as_f64().unwrap();
    assert!(
        (peak - b00).abs() < 0.006,
        "ctrl_peak_gbps {peak} vs measured {b00}"
    );
    assert_eq!(machine["id"], "here");

    // Each figure says how it was measured, on the line above it.
    let text = std::fs::read_to_string(&out_path).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for key in [
        "idle_local_ns =",
        "ctrl_peak_gbps =",
        "fault_4k_ns =",
        "fault_file_4k_ns =",
        "concurrency_lines =",
    ] {
        let i = lines
            .iter()
            .position(|l| l.starts_with(key))
            .unwrap_or_else(|| panic!("no {key} in\n{text}"));
        assert!(
            lines[i - 1].starts_with("# "),
            "{key} has no comment above it"
        );
    }
    assert!(text.contains("base = \"here-topology.toml\""), "{text}");

    // And a simulation runs on it.
    let sim = numalab(&[
        "sim",
        "-q",
        "--machine",
        out_path.to_str().unwrap(),
        "-w",
        "stream:n=200000,ntimes=2",
        "-t",
        "1",
    ]);
    assert!(sim.status.success());
    let _ = std::fs::remove_dir_all(&d);
}

#[test]
fn bad_input_is_refused_and_nothing_is_written() {
    if !has_numa_sysfs() {
        eprintln!("SKIPPED: no /sys/devices/system/node");
        return;
    }
    let d = fresh_dir("bad");
    let o = |name: &str| d.join(name).to_str().unwrap().to_string();

    let out = numalab(&["calibrate", "--quick", "-o", &o("x.txt")]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("must end in .toml"));

    // A base that describes another machine: its nodes and CPUs are not this host's.
    let preset = d.join("other.toml");
    let shown = numalab(&["machine", "show", "--json", "opteron6272-8n"]);
    assert!(shown.status.success());
    let m: Value = serde_json::from_slice(&shown.stdout).unwrap();
    assert_eq!(m["topology"]["nodes"].as_array().unwrap().len(), 8);
    std::fs::write(&preset, "base = \"opteron6272-8n\"\n").unwrap();
    let out = numalab(&[
        "calibrate",
        "--quick",
        "-o",
        &o("c.toml"),
        "--base",
        preset.to_str().unwrap(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("describes 8 node(s)") && err.contains("topo --machine-file"),
        "{err}"
    );

    // Buffers larger than any node's free memory: refused before anything is bound or touched.
    let out = numalab(&["calibrate", "-o", &o("c.toml"), "--buffer-mib", "1048576"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("MiB free") && err.contains("--buffer-mib"),
        "{err}"
    );

    let out = numalab(&["calibrate", "-o", &o("c.toml"), "--buffer-mib", "0"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--buffer-mib"));

    let out = numalab(&[
        "calibrate",
        "-o",
        &d.join("no/such/dir/c.toml").to_string_lossy(),
    ]);
    assert!(!out.status.success());

    assert_eq!(
        files_in(&d),
        ["other.toml"],
        "nothing but the test's own file"
    );
    let _ = std::fs::remove_dir_all(&d);
}
