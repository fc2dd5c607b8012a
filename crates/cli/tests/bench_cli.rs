//! `numalab bench`: every option of `bench sim` is described in its help, and `bench analyze
//! --keep DIR` leaves no half-written sample file when it fails.

use std::path::Path;
use std::process::{Command, Output};

fn numalab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-bench-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// An option line's description, without clap's `[default: ...]` and `[possible values: ...]`
/// (which it shows for an option without one too).
fn description(text: &str) -> String {
    let mut t = text.to_string();
    for tag in ["[default: ", "[possible values: "] {
        while let Some(at) = t.find(tag) {
            let end = t[at..].find(']').map_or(t.len(), |e| at + e + 1);
            t.replace_range(at..end, "");
        }
    }
    t.trim().to_string()
}

#[test]
fn every_bench_sim_option_has_a_description_in_its_help() {
    for help in ["--help", "-h"] {
        let o = numalab(&["bench", "sim", help]);
        assert!(o.status.success());
        let text = String::from_utf8(o.stdout).unwrap();
        let lines: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.starts_with("Options:"))
            .skip(1)
            .collect();
        let mut seen = Vec::new();
        for (i, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            if !t.starts_with('-') {
                continue;
            }
            // the flags and value name, then two spaces and the description on the same line,
            // or (clap's long layout) the description on the lines below, indented further
            let (flags, same_line) = t.split_once("  ").unwrap_or((t, ""));
            let below = lines
                .get(i + 1)
                .filter(|n| !n.trim_start().starts_with('-'))
                .map_or("", |n| n.trim());
            let said = description(same_line) + &description(below);
            assert!(
                !said.is_empty(),
                "bench sim {help}: {flags} has no description:\n{text}"
            );
            seen.extend(
                flags
                    .split([',', ' '])
                    .filter(|f| f.starts_with("--"))
                    .map(str::to_string),
            );
        }
        for option in [
            "--machine",
            "--workload",
            "--threads",
            "--thp",
            "--repeat",
            "--policy",
            "--host-isa",
            "--quiet",
            "--help",
        ] {
            assert!(
                seen.iter().any(|s| s == option),
                "bench sim {help} lists {option}:\n{text}"
            );
        }
    }
}

/// The names in `dir`.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_failed_bench_analyze_leaves_no_half_file_in_the_kept_folder() {
    let dir = temp("keep-fail");
    // bench.data cannot be written where a folder has its name: the run fails part way
    std::fs::create_dir(dir.join("bench.data")).unwrap();
    let o = numalab(&[
        "bench",
        "analyze",
        "-q",
        "--samples",
        "2000",
        "--keep",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("bench.data"), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    // neither bench.arrows (complete, but without its twin) nor a temporary file
    assert_eq!(names(&dir), ["bench.data"], "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn bench_analyze_keeps_both_complete_files_and_no_temporary() {
    let dir = temp("keep");
    // the comparison needs the real perf tool; with or without it, the files are made first
    let o = numalab(&[
        "bench",
        "analyze",
        "-q",
        "--samples",
        "2000",
        "--no-perf-default",
        "--keep",
        dir.to_str().unwrap(),
    ]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("generated 2000 samples"), "{err}");
    assert_eq!(names(&dir), ["bench.arrows", "bench.data"], "{err}");
    for f in ["bench.arrows", "bench.data"] {
        let a = numalab(&["analyze", "-q", dir.join(f).to_str().unwrap()]);
        assert!(
            a.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&a.stderr)
        );
        let report = String::from_utf8_lossy(&a.stdout);
        assert!(report.contains("2000"), "{f}: {report}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}
