//! `numalab study run` from the command line: the example study, the summary, resuming, and
//! a failed configuration's exit status.

use std::path::Path;
use std::process::{Command, Output};

fn numalab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn temp(name: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-study-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

#[test]
fn the_documented_example_study_runs_and_resumes() {
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/studies/cg-thp.toml");
    let out = temp("example");
    let o = numalab(&[
        "study",
        "run",
        example.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", text(&o.stderr));
    // one line per configuration, with the mean and deviation of its two runs
    for label in [
        "thp=4K mempolicy=first-touch",
        "thp=THP mempolicy=interleave",
    ] {
        let line = stdout.lines().find(|l| l.starts_with(label)).expect(label);
        assert!(line.contains("2/2") && line.contains('±'), "{line}");
    }
    assert!(
        stdout.contains("8 runs: 8 simulated now, 0 already done"),
        "{stdout}"
    );
    let again = numalab(&[
        "study",
        "run",
        example.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(text(&again.stdout).contains("8 runs: 0 simulated now, 8 already done"));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn a_failed_configuration_fails_the_command_after_the_others_ran() {
    let dir = temp("failed");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.toml");
    std::fs::write(
        &file,
        "[defaults]\nmachine = \"xeon-x5650-2n\"\nworkload = \"stream:n=20000,ntimes=1\"\n\
         [[axis]]\nkey = \"pin\"\nvalues = [\"sequential\", \"node:7\"]\n",
    )
    .unwrap();
    let out = dir.join("out");
    let o = numalab(&[
        "study",
        "run",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert_eq!(o.status.code(), Some(2), "numalab's exit status for errors");
    let err = text(&o.stderr);
    assert!(
        err.contains("failed: pin=node:7") && err.contains("1 of 2 runs failed"),
        "{err}"
    );
    assert!(text(&o.stdout).contains("pin=sequential"));
    assert!(out.join("results.parquet").is_file());
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_missing_or_malformed_study_file_is_an_error_naming_it() {
    let o = numalab(&["study", "run", "/nonexistent/s.toml", "-o", "/tmp/x"]);
    assert_eq!(o.status.code(), Some(2), "numalab's exit status for errors");
    assert!(text(&o.stderr).contains("cannot read study file /nonexistent/s.toml"));
    let dir = temp("bad");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("bad.toml");
    std::fs::write(&file, "[[axis]]\nkey = \"thp\"\n").unwrap();
    let o = numalab(&[
        "study",
        "run",
        file.to_str().unwrap(),
        "-o",
        dir.join("o").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "numalab's exit status for errors");
    let err = text(&o.stderr);
    assert!(err.contains("bad.toml") && err.contains("values"), "{err}");
    assert!(!dir.join("o").exists(), "nothing written for a bad file");
    std::fs::remove_dir_all(&dir).unwrap();
}
