//! `numalab sim` from the command line: samples are never dropped silently.

use std::process::Command;

#[test]
fn a_reached_sample_cap_is_reported_in_the_table_the_file_and_the_analysis() {
    let dir = std::env::temp_dir().join(format!("numalab-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.arrows");
    let exe = env!("CARGO_BIN_EXE_numalab");
    // one sample per reference: ~2.1 M samples against the 1 M the simulator keeps
    let out = Command::new(exe)
        .args([
            "sim",
            "-q",
            "-m",
            "xeon-x5650-2n",
            "-w",
            "ptrchase:bytes=64M,steps=20000",
            "--sample-period",
            "1",
            "--samples-out",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("samples kept / taken"))
        .expect("the table has a samples row");
    assert!(row.contains("1000000/") && row.contains("(cap)"), "{row}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("more were taken but not kept"), "{err}");
    let out = Command::new(exe)
        .arg("analyze")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("taken but are not in the file"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn senseless_values_are_refused_naming_the_option_and_what_is_accepted() {
    let exe = env!("CARGO_BIN_EXE_numalab");
    let (dir, samples) = small_sample_file("bad");
    let missing = dir.join("no-such-dir");
    let samples = samples.to_str().unwrap();
    for (args, says) in [
        (
            vec!["sim", "-q", "--threads=-5"],
            "expected a whole number of threads, at least 1 (got '-5')",
        ),
        (vec!["sim", "-q", "-t", "0"], "at least 1 (got '0')"),
        (
            vec![
                "sim",
                "-q",
                "-w",
                "stream:n=1000",
                "--policy",
                "carrefour",
                "--sample-period",
                "0",
            ],
            "policy carrefour decides from access samples",
        ),
        (
            vec!["analyze", "--hot-page-percent=-1", samples],
            "--hot-page-percent -1: expected a share",
        ),
        (
            vec!["analyze", "--hot-page-percent=NaN", samples],
            "--hot-page-percent NaN",
        ),
        (
            vec!["analyze", "--hot-page-percent=1000", samples],
            "at most 100",
        ),
        (
            vec!["analyze", "-m", "nosuch", samples],
            "unknown machine 'nosuch'",
        ),
        (
            vec![
                "bench",
                "analyze",
                "--samples",
                "10",
                "--keep",
                missing.to_str().unwrap(),
            ],
            "no such directory",
        ),
    ] {
        let out = Command::new(exe).args(&args).output().unwrap();
        assert!(!out.status.success(), "{args:?} succeeded");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    assert!(!missing.exists(), "--keep created the directory");
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn a_truncated_file_is_read_to_its_last_record_and_a_corrupt_one_leaves_no_output() {
    let exe = env!("CARGO_BIN_EXE_numalab");
    let dir = std::env::temp_dir().join(format!("numalab-sim-cli-cut-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // about 200 000 samples: several record batches of 65 536
    let full = dir.join("s.arrows");
    let out = Command::new(exe)
        .args(["sim", "-q", "-w", "stream:n=200000,ntimes=2", "-t", "4"])
        .args(["--sample-period", "7", "--samples-out"])
        .arg(&full)
        .output()
        .unwrap();
    assert!(out.status.success());
    let bytes = std::fs::read(&full).unwrap();
    let whole = Command::new(exe)
        .arg("analyze")
        .arg(&full)
        .output()
        .unwrap();
    let samples: u64 = String::from_utf8_lossy(&whole.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|n| n.parse().ok())
        .expect("samples: N on the first line");
    // every batch but the last is complete when the last 1000 bytes are cut
    let complete = (samples - 1) / 65_536 * 65_536;
    assert!(complete > 0, "{samples} samples: one batch only");
    // cut inside the last batch: the complete batches are read, and the reader says so
    let cut = dir.join("cut.arrows");
    std::fs::write(&cut, &bytes[..bytes.len() - 1000]).unwrap();
    let out = Command::new(exe).arg("analyze").arg(&cut).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let note = format!(
        "truncated at byte {}: {complete} records read",
        bytes.len() - 1000
    );
    assert!(text.contains(&note), "{text}");
    let converted = dir.join("cut.data");
    let out = Command::new(exe)
        .arg("convert")
        .arg(&cut)
        .arg(&converted)
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&note) && err.contains(&format!("({complete} samples")),
        "{err}"
    );
    // cut inside the schema: not readable at all, so nothing is written
    let broken = dir.join("broken.arrows");
    std::fs::write(&broken, &bytes[..60]).unwrap();
    let fresh = dir.join("fresh.data");
    let existing = dir.join("existing.data");
    std::fs::write(&existing, b"previous complete file").unwrap();
    for target in [&fresh, &existing] {
        let out = Command::new(exe)
            .arg("convert")
            .arg(&broken)
            .arg(target)
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("not an Arrow IPC stream"));
    }
    assert!(!fresh.exists(), "no partial perf.data");
    assert_eq!(std::fs::read(&existing).unwrap(), b"previous complete file");
    let leftovers: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    std::fs::remove_dir_all(&dir).ok();
}

/// A fresh directory for test `tag` holding `s.arrows`, the samples of a short STREAM run.
fn small_sample_file(tag: &str) -> (std::path::PathBuf, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("numalab-sim-cli-{tag}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.arrows");
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "sim",
            "-q",
            "-w",
            "stream:n=100000",
            "-t",
            "2",
            "--samples-out",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (dir, file)
}

/// The row of `name` in a `numalab sim` table: its values, one per configuration.
fn table_row(table: &str, name: &str) -> Option<Vec<f64>> {
    let line = table.lines().find(|l| l.starts_with(name))?;
    Some(
        line[name.len()..]
            .split_whitespace()
            .map(|v| v.parse().unwrap())
            .collect(),
    )
}

#[test]
fn a_pointer_chase_reports_its_latency_per_load() {
    let exe = env!("CARGO_BIN_EXE_numalab");
    let sim = |w: &str, compare: &str| {
        let out = Command::new(exe)
            .args([
                "sim",
                "-q",
                "-m",
                "xeon-x5650-2n",
                "-w",
                w,
                "-t",
                "1",
                "--pin",
                "0",
            ])
            .args(["--compare", compare])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let chase = sim(
        "ptrchase:bytes=64M,steps=20000",
        "mempolicy=bind:0,mempolicy=bind:1",
    );
    let ns = table_row(&chase, "ns per load (chase)").expect("a chase reports ns per load");
    // the X5650 preset: ≈ 100 ns local, M13's factor ≈ 1.42 remote
    assert!(ns[0] > 80.0 && ns[0] < 130.0, "{chase}");
    assert!(ns[1] / ns[0] > 1.2 && ns[1] / ns[0] < 1.6, "{chase}");
    // a workload without a chase has no such row
    let stream = sim("stream:n=100000,ntimes=2", "mempolicy=bind:0");
    assert!(table_row(&stream, "ns per load").is_none(), "{stream}");
    // MLC's loaded latency: the chase of thread 0 beside injectors reports it too, and the
    // injectors' load makes it no faster than the idle chase
    let out = Command::new(exe)
        .args([
            "sim",
            "-q",
            "-m",
            "xeon-x5650-2n",
            "-t",
            "4",
            "--pin",
            "0-3",
        ])
        .args([
            "-w",
            "mlc-loaded:bytes=64M,steps=20000,inject_bytes=16M",
            "--compare",
            "mempolicy=bind:0",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let loaded = String::from_utf8(out.stdout).unwrap();
    let ns_loaded =
        table_row(&loaded, "ns per load (chase)").expect("mlc-loaded reports ns per load");
    assert!(
        ns_loaded[0] >= ns[0] * 0.95 && ns_loaded[0] < 1000.0,
        "{loaded}"
    );
}

/// `--json -` puts the JSON alone on standard output (for jq or a notebook) and the table on
/// standard error; commands that cannot do that refuse `-` instead of writing a file named `-`.
#[test]
fn json_to_standard_output_with_a_dash() {
    let (dir, samples) = small_sample_file("stdout");
    let samples = samples.to_str().unwrap();
    // numalab with `args` in `dir`, where a file named `-` would land
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
            .current_dir(&dir)
            .args(args)
            .output()
            .unwrap();
        assert!(!dir.join("-").exists(), "{args:?} wrote a file named '-'");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        (out.status.success(), out.stdout, err)
    };
    let (ok, stdout, err) = run(&[
        "sim",
        "-q",
        "-w",
        "stream:n=20000",
        "-t",
        "2",
        "--json",
        "-",
    ]);
    assert!(ok, "{err}");
    let runs: serde_json::Value = serde_json::from_slice(&stdout).expect("stdout is JSON");
    assert!(runs[0]["sim_time_ns"].as_f64().unwrap() > 0.0, "{runs}");
    assert!(
        err.contains("simulated time (ms)"),
        "the table on stderr: {err}"
    );
    let (ok, stdout, err) = run(&["analyze", "--json", "-", samples]);
    assert!(ok, "{err}");
    let report: serde_json::Value = serde_json::from_slice(&stdout).expect("stdout is JSON");
    assert!(report.is_object() && !err.is_empty(), "{report} / {err}");
    // balance writes JSON to files only: it says so
    let balance = [
        "balance",
        "--pid",
        "1",
        "--policy",
        "carrefour",
        "--json",
        "-",
    ];
    let (ok, _, err) = run(&[&balance[..], &["--samples", samples]].concat());
    assert!(!ok);
    assert!(
        err.contains("`--json -` works for sim, analyze and validate"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// A workload that pins its own threads (Metis) keeps its CPUs whatever `--pin` says, and the
/// user is told so: a note on standard error, and the table's pinning names the override.
#[test]
fn a_pin_the_workload_overrides_is_noted() {
    let exe = env!("CARGO_BIN_EXE_numalab");
    let run = |pin: &str| {
        Command::new(exe)
            .args([
                "sim",
                "-q",
                "-m",
                "xeon-x5650-2n",
                "-w",
                "metis-wc:input=128K,vocab=2000,split=16K",
                "-t",
                "4",
                "--pin",
                pin,
            ])
            .output()
            .unwrap()
    };
    let out = run("sockets");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("note: --pin sockets") && err.contains("places 4 of its 4 threads itself"),
        "{err}"
    );
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        table.contains("pinning sockets (4 threads placed by the workload)"),
        "{table}"
    );
    let out = run("none");
    assert!(out.status.success());
    assert!(!String::from_utf8_lossy(&out.stderr).contains("note:"));
}
