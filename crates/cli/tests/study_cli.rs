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

#[test]
fn a_sample_based_policy_with_the_sampler_off_is_refused_naming_the_file_and_configuration() {
    let dir = temp("nosampler");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nosampler.toml");
    // the baseline alone would run; carrefour-lp would run and never act
    std::fs::write(
        &file,
        r#"sample_period = 0

[defaults]
workload = "stream:n=1000"

[[axis]]
key = "policy"
values = ["none", "carrefour-lp"]
labels = ["baseline", "LP"]
"#,
    )
    .unwrap();
    let out = dir.join("o");
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
        err.contains(&format!(
            "{}: configuration 'policy=LP': sample_period = 0 turns the sampler off, but policy carrefour-lp decides from access samples: give a period (default 4099)",
            file.display()
        )),
        "{err}"
    );
    assert!(!out.exists(), "nothing run or written");
    // with a period it runs
    std::fs::write(
        &file,
        std::fs::read_to_string(&file)
            .unwrap()
            .replace("sample_period = 0", "sample_period = 4099"),
    )
    .unwrap();
    let o = numalab(&[
        "study",
        "run",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_real_run_study_times_each_configuration_and_resumes() {
    // real runs on this host: a command axis only, so no kernel setting changes (the VM test
    // vm_cli::a_real_run_study_sets_and_restores_the_kernel_settings covers those)
    let dir = temp("real");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("real.toml");
    std::fs::write(
        &file,
        r#"kind = "real"
repeats = 3
warmups = 1

[[axis]]
key = "command"
values = ["sleep 0.05", "sh -c 'sleep 0.15'", "sh -c 'echo broken >&2; exit 3'"]
labels = ["short", "long", "broken"]
"#,
    )
    .unwrap();
    let out = dir.join("out");
    let args = [
        "study",
        "run",
        file.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ];
    let o = numalab(&args);
    let stdout = text(&o.stdout);
    let stderr = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stdout}{stderr}");
    assert!(
        stdout.contains("9 runs: 9 run now, 0 already done"),
        "{stdout}"
    );
    assert!(
        stderr.contains("command=broken (repeat 0): warm-up run: 'sh -c echo broken >&2; exit 3' ended with exit status: 3: broken"),
        "{stderr}"
    );
    // wall times as timed: each run at least its sleep (a bound that holds however loaded the
    // machine is; durations themselves are not asserted)
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    let mut lines = csv.lines();
    assert_eq!(
        lines.next().unwrap(),
        "config,command,repeat,seed,status,error,wall_ms,user_ms,sys_ms"
    );
    let wall = |label: &str| -> Vec<f64> {
        csv.lines()
            .filter(|l| l.starts_with(&format!("command={label},")))
            .filter_map(|l| l.split(',').nth(6)?.parse().ok())
            .collect()
    };
    let (short, long) = (wall("short"), wall("long"));
    assert_eq!((short.len(), long.len()), (3, 3), "{csv}");
    assert!(short.iter().all(|&t| t >= 50.0), "{short:?}");
    assert!(long.iter().all(|&t| t >= 150.0), "{long:?}");
    assert!(wall("broken").is_empty(), "{csv}");
    // the summary line: mean ± sd, median, range
    let line = stdout
        .lines()
        .find(|l| l.starts_with("command=long"))
        .unwrap();
    assert!(
        line.contains("3/3") && line.contains(" ± ") && line.contains(" … "),
        "{line}"
    );
    // a rerun runs only the failed configuration again
    let o = numalab(&args);
    assert!(
        text(&o.stdout).contains("9 runs: 3 run now, 6 already done"),
        "{}",
        text(&o.stdout)
    );
    // the HTML report charts the times against the first configuration
    let report = dir.join("r.html");
    let o = numalab(&[
        "study",
        "report",
        out.to_str().unwrap(),
        "-o",
        report.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let html = std::fs::read_to_string(&report).unwrap();
    assert_eq!(
        html.matches("<svg class=\"chart\"").count(),
        3,
        "wall, user, system"
    );
    assert!(html.contains("baseline <b>command=short</b>"));
    // settings of the other kind are refused by name
    std::fs::write(
        &file,
        "kind = \"real\"\n[defaults]\ncommand = \"true\"\nworkload = \"stream\"\n",
    )
    .unwrap();
    let o = numalab(&args);
    assert!(
        text(&o.stderr).contains("unknown setting 'workload' (a simulation setting"),
        "{}",
        text(&o.stderr)
    );
    std::fs::write(&file, "kind = \"real\"\n[defaults]\nthp = \"always\"\n").unwrap();
    let o = numalab(&args);
    assert!(
        text(&o.stderr).contains("needs a command"),
        "{}",
        text(&o.stderr)
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_interrupted_real_study_stops_after_the_run_in_progress() {
    let dir = temp("interrupt");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("real.toml");
    std::fs::write(
        &file,
        "kind = \"real\"\nrepeats = 5\n[defaults]\ncommand = \"sleep 0.4\"\n",
    )
    .unwrap();
    let out = dir.join("out");
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args([
            "study",
            "run",
            file.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // during the second run (the first ends at about 0.4 s)
    std::thread::sleep(std::time::Duration::from_millis(600));
    let killed = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let o = child.wait_with_output().unwrap();
    let stderr = text(&o.stderr);
    assert!(!o.status.success(), "{stderr}");
    assert!(
        stderr.contains("interrupted: the kernel settings are restored; 1 of 5 runs finished now"),
        "{stderr}"
    );
    // the finished run is recorded, the interrupted one is not
    let records = std::fs::read_dir(out.join("runs")).unwrap().count();
    assert_eq!(records, 1);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_grid_study_resumes_after_being_killed() {
    // issue 21's grid (3 machines × 3 placements × 2 page sizes), killed once some runs are
    // recorded: the rerun does only the rest
    let grid = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/studies/cg-grid.toml");
    let out = temp("grid");
    let args = [
        "study",
        "run",
        grid.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
        "-j",
        "1",
    ];
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // finished records only (a record being written has a temporary name first)
    let records = || {
        std::fs::read_dir(out.join("runs")).map_or(0, |d| {
            d.filter_map(|e| e.ok())
                .filter(|e| {
                    let n = e.file_name().to_string_lossy().into_owned();
                    n.ends_with(".json") && !n.starts_with('.')
                })
                .count()
        })
    };
    let start = std::time::Instant::now();
    while records() < 3 {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the study ended before it could be interrupted"
        );
        assert!(
            start.elapsed().as_secs() < 600,
            "no run recorded in 10 minutes"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    let done = records();
    assert!((3..18).contains(&done), "{done} records");
    let o = numalab(&args[..6]);
    let stdout = text(&o.stdout);
    assert!(o.status.success(), "{stdout}{}", text(&o.stderr));
    assert!(
        stdout.contains(&format!(
            "18 runs: {} simulated now, {done} already done",
            18 - done
        )),
        "{stdout}"
    );
    for label in [
        "machine=6164HE-4n",
        "machine=6272-8n",
        "machine=gold6130-4n",
    ] {
        assert_eq!(
            stdout.lines().filter(|l| l.starts_with(label)).count(),
            6,
            "{stdout}"
        );
    }
    let _ = std::fs::remove_dir_all(&out);
}
