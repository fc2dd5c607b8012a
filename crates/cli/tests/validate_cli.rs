//! `numalab validate` and `numalab sim --epoch-us` from the command line: listing, selection,
//! the scorecard, JSON, the regression check, and refused input.

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

#[test]
fn epoch_lengths_that_would_never_end_are_refused() {
    for bad in ["0", "NaN", "-1", "inf"] {
        let arg = format!("--epoch-us={bad}");
        if bad == "-1" {
            // also as a separate value: our message, not clap's "unexpected argument"
            let out = numalab(&[
                "sim",
                "-q",
                "-w",
                "ptrchase:bytes=1M,steps=10",
                "--epoch-us",
                bad,
            ]);
            assert!(text(&out.stderr)
                .contains("expected a number of simulated microseconds in 0.1..=1000"));
        }
        let out = numalab(&["sim", "-q", "-w", "ptrchase:bytes=1M,steps=10", &arg]);
        assert!(!out.status.success(), "--epoch-us {bad} was accepted");
        let err = text(&out.stderr);
        assert!(err.contains("--epoch-us"), "{bad}: {err}");
        let out = numalab(&["validate", "--case", "M13.read-factor", &arg]);
        assert!(
            !out.status.success(),
            "validate --epoch-us {bad} was accepted"
        );
    }
}

#[test]
fn max_seeds_out_of_range_is_refused_before_anything_runs() {
    for bad in ["0", "1", "-3", "1001"] {
        let out = numalab(&["validate", "--case", "M13.read-factor", "--max-seeds", bad]);
        assert!(!out.status.success(), "--max-seeds {bad} was accepted");
        let err = text(&out.stderr);
        assert!(
            err.contains(&format!("--max-seeds {bad}: expected 2 to 1000")),
            "{err}"
        );
    }
}

#[test]
fn list_shows_the_cases_and_their_shrinks_and_a_bad_pattern_is_an_error() {
    let out = numalab(&["validate", "--list", "--case", "G14.T1.CG*"]);
    assert!(out.status.success());
    let s = text(&out.stdout);
    assert!(
        s.contains("G14.T1.CG.D.B.time") && s.contains("shrink:"),
        "{s}"
    );
    assert!(!s.contains("Mi21"), "{s}");
    let out = numalab(&["validate", "--list", "--case", "nothing-like-this"]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("nothing-like-this"));
}

#[test]
fn a_case_file_runs_scores_writes_json_and_catches_a_regression() {
    let dir = std::env::temp_dir().join(format!("numalab-validate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cases = dir.join("cases.toml");
    std::fs::write(
        &cases,
        r#"
[source]
id = "T"
citation = "a test"

[[case]]
id = "T.chase"
cite = "test"
what = "a remote chase is slower"
machine = "xeon-x5650-2n"
workload = "ptrchase:bytes=64M,steps=20000,page=4K"
pin = "0"
base = "mempolicy=bind:0"
config = "mempolicy=bind:1"
metric = "time_increase_percent"
expect = "slower"

[[case]]
id = "T.backwards"
cite = "test"
what = "published the wrong way round"
machine = "xeon-x5650-2n"
workload = "ptrchase:bytes=64M,steps=20000,page=4K"
pin = "0"
base = "mempolicy=bind:0"
config = "mempolicy=bind:1"
metric = "time_increase_percent"
expect = "faster"
"#,
    )
    .unwrap();
    let json = dir.join("card.json");
    let passing = dir.join("passing.txt");
    let (c, j, p) = (
        cases.to_str().unwrap(),
        json.to_str().unwrap(),
        passing.to_str().unwrap(),
    );
    let out = numalab(&[
        "validate",
        "-q",
        "--cases",
        c,
        "--json",
        j,
        "--write-passing",
        p,
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.contains("T.chase") && table.contains("pass"),
        "{table}"
    );
    assert!(
        table.contains("T.backwards") && table.contains("miss"),
        "{table}"
    );
    let card: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
        .expect("the scorecard is JSON");
    assert_eq!(card["overall"]["cases"], 2);
    assert_eq!(card["overall"]["pass"], 1);
    let listed = std::fs::read_to_string(&passing).unwrap();
    assert!(listed.contains("T.chase") && !listed.contains("T.backwards"));
    // `--json -`: the scorecard alone on standard output, the table on standard error
    let out = numalab(&[
        "validate", "-q", "--cases", c, "--case", "T.chase", "--json", "-",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let card: serde_json::Value =
        serde_json::from_slice(&out.stdout).expect("standard output is the scorecard");
    assert_eq!(card["overall"]["cases"], 1);
    assert!(text(&out.stderr).contains("T.chase"));

    // a case listed as passing that misses is a regression: non-zero exit, named
    std::fs::write(&passing, "T.chase\nT.backwards # claimed\n").unwrap();
    let out = numalab(&["validate", "-q", "--cases", c, "--expect-passing", p]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("T.backwards") && !err.contains("T.chase,"),
        "{err}"
    );
    // an id no case has is refused before anything runs
    std::fs::write(&passing, "T.nonexistent\n").unwrap();
    let out = numalab(&["validate", "-q", "--cases", c, "--expect-passing", p]);
    assert!(!out.status.success());
    assert!(text(&out.stderr).contains("T.nonexistent"));
    let _ = std::fs::remove_dir_all(&dir);
}
