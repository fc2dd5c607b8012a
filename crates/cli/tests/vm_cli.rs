//! `numalab run` and `numalab migrate` on a real multi-node kernel. These run inside the test
//! VM (4 nodes with CPU i on node i, ring distances 10/16/22, node 4 CPU-less; see
//! docs/testing.md), where the harness runs every `vm_*` test binary with `--ignored`.
//! Placement is checked with move_pages queries (numalab memhog's report) and
//! /proc/self/status; data with memhog's per-word verification.

use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

fn numalab() -> PathBuf {
    std::env::var_os("NUMALAB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_numalab")))
}

fn run(args: &[&str]) -> Output {
    let out = Command::new(numalab())
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

/// `numalab run --thp=never OPTS -- numalab memhog SIZE --json ...`: the JSON report. THP is
/// off (Debian boots with THP "always") so that placement is counted in 4 KiB pages, the unit
/// every policy here places.
fn memhog_under(opts: &[&str], memhog: &[&str]) -> Value {
    let bin = numalab();
    let bin = bin.to_str().unwrap();
    let mut args: Vec<&str> = vec!["run", "--thp=never"];
    args.extend_from_slice(opts);
    args.extend_from_slice(&["--", bin, "memhog", "--json"]);
    args.extend_from_slice(memhog);
    let out = run(&args);
    assert!(out.status.success(), "memhog under {opts:?} failed");
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text).expect("stdout is the JSON report alone")
}

fn nodes(v: &Value, key: &str) -> [u64; 5] {
    let mut out = [0u64; 5];
    for (n, c) in v[key].as_object().expect("node map") {
        out[n.parse::<usize>().unwrap()] = c.as_u64().unwrap();
    }
    out
}

fn status_line(out: &Output, key: &str) -> String {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} line"))
        .split_once(':')
        .unwrap()
        .1
        .trim()
        .to_string()
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn membind_puts_every_page_on_the_bound_node() {
    let r = memhog_under(&["--membind=2"], &["8M"]);
    let n = nodes(&r, "nodes_after_touch");
    assert_eq!(n[2], r["pages"].as_u64().unwrap(), "{n:?}");
    // The CPU-less node takes memory too.
    let r = memhog_under(&["--membind=4"], &["4M"]);
    assert_eq!(
        nodes(&r, "nodes_after_touch")[4],
        r["pages"].as_u64().unwrap()
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn interleave_spreads_pages_evenly() {
    let r = memhog_under(&["--interleave=0-3"], &["16M"]);
    let n = nodes(&r, "nodes_after_touch");
    let pages = r["pages"].as_u64().unwrap();
    for (node, count) in n.iter().enumerate().take(4) {
        let expect = pages / 4;
        assert!(
            count.abs_diff(expect) <= 2,
            "node {node}: {count} of {pages} ({n:?})"
        );
    }
    assert_eq!(n[4], 0);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn preferred_local_and_preferred_many_follow_distances() {
    let r = memhog_under(&["--preferred=3"], &["4M"]);
    assert_eq!(
        nodes(&r, "nodes_after_touch")[3],
        r["pages"].as_u64().unwrap()
    );
    let r = memhog_under(&["--cpunodebind=1", "--localalloc"], &["4M"]);
    assert_eq!(
        nodes(&r, "nodes_after_touch")[1],
        r["pages"].as_u64().unwrap()
    );
    // From node 0, node 1 is a neighbour (16) and node 2 opposite (22): the nearest of {1, 2}.
    let r = memhog_under(&["--cpunodebind=0", "--preferred-many=1-2"], &["4M"]);
    assert_eq!(
        nodes(&r, "nodes_after_touch")[1],
        r["pages"].as_u64().unwrap()
    );
    // Relative node numbers index the cpuset's nodes.
    let r = memhog_under(&["--membind=+3"], &["4M"]);
    assert_eq!(
        nodes(&r, "nodes_after_touch")[3],
        r["pages"].as_u64().unwrap()
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn cpu_binding_options_set_the_affinity() {
    let out = run(&["run", "--cpunodebind=2", "--", "cat", "/proc/self/status"]);
    assert!(out.status.success());
    assert_eq!(status_line(&out, "Cpus_allowed_list"), "2");
    let out = run(&[
        "run",
        "--physcpubind=!0-1",
        "--",
        "cat",
        "/proc/self/status",
    ]);
    assert_eq!(status_line(&out, "Cpus_allowed_list"), "2-3");
    let out = run(&["run", "--thp=never", "--", "cat", "/proc/self/status"]);
    assert_eq!(status_line(&out, "THP_enabled"), "0");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn balancing_show_and_hardware() {
    // MPOL_F_NUMA_BALANCING shows in numa_maps as bind=balancing.
    let out = run(&[
        "run",
        "--membind=1-2",
        "--balancing",
        "--",
        "cat",
        "/proc/self/numa_maps",
    ]);
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("bind=balancing:1-2"),
        "numa_maps lacks the flag"
    );
    // --show reports what the parent set, as numactl --show does.
    let bin = numalab();
    let bin = bin.to_str().unwrap();
    let out = run(&[
        "run",
        "--membind=2",
        "--cpunodebind=3",
        "--",
        bin,
        "run",
        "--show",
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("policy: bind"), "{text}");
    assert!(text.contains("membind: 2 \n"), "{text}");
    assert!(
        text.contains("physcpubind: 3 \n") && text.contains("nodebind: 3 \n"),
        "{text}"
    );
    let out = run(&["run", "--preferred=4", "--", bin, "run", "--show"]);
    assert!(String::from_utf8_lossy(&out.stdout).contains("preferred node: 4"));
    // --hardware is numactl -H's layout (tests/vm_numactl_show.rs compares it with numactl's)
    // with the CPU-less node and the ring; `topo` starts the same and adds the rest.
    let out = run(&["run", "--hardware"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.starts_with("available: 5 nodes (0-4)\n"), "{text}");
    assert!(text.contains("node 4 cpus:\n"), "{text}");
    assert!(text.contains("  0:  10  16  22  16  28 \n"), "{text}");
    assert!(!text.contains("memory-only"), "{text}");
    let topo = run(&["topo"]);
    let topo = String::from_utf8_lossy(&topo.stdout);
    assert!(
        topo.starts_with(text.split("node 0 free").next().unwrap()),
        "{topo}"
    );
    assert!(topo.contains("memory-only (CPU-less) nodes: 4"), "{topo}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn weighted_interleave_follows_the_system_weights() {
    let dir = std::path::Path::new("/sys/kernel/mm/mempolicy/weighted_interleave");
    if !dir.is_dir() {
        // Linux < 6.9: numalab must refuse, naming the kernel feature.
        let out = run(&["run", "--weighted-interleave=0-1", "--", "true"]);
        assert!(!out.status.success());
        assert!(String::from_utf8_lossy(&out.stderr).contains("Linux 6.9"));
        return;
    }
    let old: Vec<String> = (0..2)
        .map(|n| {
            std::fs::read_to_string(dir.join(format!("node{n}")))
                .unwrap()
                .trim()
                .to_string()
        })
        .collect();
    std::fs::write(dir.join("node0"), "3").unwrap();
    std::fs::write(dir.join("node1"), "1").unwrap();
    let r = memhog_under(&["--weighted-interleave=0-1"], &["16M"]);
    for (n, w) in old.iter().enumerate() {
        std::fs::write(dir.join(format!("node{n}")), w).unwrap();
    }
    let n = nodes(&r, "nodes_after_touch");
    let share0 = n[0] as f64 / (n[0] + n[1]) as f64;
    assert!((share0 - 0.75).abs() < 0.01, "{n:?}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn remote_percent_places_p_percent_remotely() {
    // Hold long enough for the placement thread (old kernels) to finish its passes.
    let r = memhog_under(
        &[
            "--cpunodebind=0",
            "--remote-percent=40:1-3",
            "--placement-period-ms=100",
        ],
        &["16M", "--hold-s=3"],
    );
    let n = nodes(&r, "nodes_at_end");
    let total: u64 = n.iter().sum();
    let remote = (n[1] + n[2] + n[3]) as f64 / total as f64 * 100.0;
    assert!((remote - 40.0).abs() < 2.0, "remote {remote:.1} % ({n:?})");
    assert_eq!(n[4], 0, "node 4 was not named");
    for (node, count) in n.iter().enumerate().skip(1).take(3) {
        let share = *count as f64 / total as f64 * 100.0;
        assert!(
            (share - 40.0 / 3.0).abs() < 2.0,
            "node {node}: {share:.1} %"
        );
    }
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn changing_p_at_run_time_moves_only_the_difference() {
    let control = "/tmp/numalab-percent";
    std::fs::write(control, "20\n").unwrap();
    let bin = numalab();
    let child = Command::new(&bin)
        .args([
            "run",
            "--thp=never",
            "--cpunodebind=0",
            "--remote-percent=20:1-3",
            "--placement-period-ms=100",
        ])
        .args(["--remote-percent-control", control, "--"])
        .arg(&bin)
        .args(["memhog", "8M", "--hold-s=5", "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Let the thread place 20 %, then ask for 50 %.
    std::thread::sleep(std::time::Duration::from_millis(2000));
    std::fs::write(control, "50\n").unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r: Value =
        serde_json::from_str(String::from_utf8_lossy(&out.stdout).lines().last().unwrap()).unwrap();
    let n = nodes(&r, "nodes_at_end");
    let total: u64 = n.iter().sum();
    let remote = (n[1] + n[2] + n[3]) as f64 / total as f64 * 100.0;
    assert!(
        (remote - 50.0).abs() < 3.0,
        "remote {remote:.1} % after raising P to 50 ({n:?})"
    );
    // The summary: pages moved is about 50 % of the pages (20 % then 30 % more), not 70 %.
    let err = String::from_utf8_lossy(&out.stderr);
    let line = err
        .lines()
        .find(|l| l.contains("remote-percent 50 %"))
        .unwrap_or_else(|| panic!("no summary: {err}"));
    let moved: f64 = line
        .split(" pages moved")
        .next()
        .unwrap()
        .rsplit(' ')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let share = moved / r["pages"].as_f64().unwrap() * 100.0;
    assert!(
        (share - 50.0).abs() < 6.0,
        "moved {share:.1} % of the pages: {line}"
    );
    assert!(line.contains("1 change(s) of P"), "{line}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn exit_status_and_signals_pass_through() {
    use std::os::unix::process::ExitStatusExt;
    let out = run(&["run", "--membind=1", "--", "sh", "-c", "exit 7"]);
    assert_eq!(out.status.code(), Some(7));
    let out = run(&["run", "--membind=1", "--", "sh", "-c", "kill -TERM $$"]);
    assert_eq!(out.status.signal(), Some(libc_sigterm()));
    // The supervised path (a placement thread) passes them on too.
    let sup = ["run", "--cpunodebind=0", "--remote-percent=20:1", "--"];
    let out = run(&[&sup[..], &["sh", "-c", "exit 9"]].concat());
    assert_eq!(out.status.code(), Some(9));
    let out = run(&[&sup[..], &["sh", "-c", "kill -TERM $$"]].concat());
    assert_eq!(out.status.signal(), Some(libc_sigterm()));
    let out = run(&["run", "--", "/no/such/program"]);
    assert_eq!(out.status.code(), Some(127));
}

fn libc_sigterm() -> i32 {
    15
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn bad_specs_fail_clearly_and_run_nothing() {
    let marker = "/tmp/numalab-should-not-exist";
    let _ = std::fs::remove_file(marker);
    for (opts, says) in [
        (vec!["--membind=7"], "node 7 does not exist"),
        (vec!["--interleave=0-9"], "node 5 does not exist"),
        (vec!["--cpunodebind=4"], "have no CPUs"),
        (vec!["--physcpubind=9"], "CPU 9 does not exist"),
        (vec!["--preferred=1-2"], "single node"),
        (
            vec!["--membind=1", "--interleave=2"],
            "both set the memory policy",
        ),
        (vec!["--membind=+5"], "relative node +5"),
        (
            vec!["--remote-percent=40:0", "--cpunodebind=0"],
            "must not include the local node",
        ),
    ] {
        let mut args = vec!["run"];
        args.extend(opts.iter().copied());
        args.extend(["--", "touch", marker]);
        let out = run(&args);
        assert!(!out.status.success(), "{opts:?} must fail");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{opts:?}: '{err}' should say '{says}'");
        assert!(
            !std::path::Path::new(marker).exists(),
            "{opts:?} ran the command"
        );
    }
}

/// memhog running on node 0 with writers, and what it announced.
struct Memhog {
    child: std::process::Child,
    range: String,
    pid: String,
    /// Reads the rest of stdout; the report is the last line.
    report: std::thread::JoinHandle<String>,
}

fn start_memhog(size: &str, hold_s: &str) -> Memhog {
    let bin = numalab();
    let mut child = Command::new(&bin)
        .args(["run", "--cpunodebind=0", "--membind=0-3", "--"])
        .arg(&bin)
        .args([
            "memhog",
            size,
            "--writers=2",
            &format!("--hold-s={hold_s}"),
            "--json",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // with --json the announcement goes to stderr: stdout is the JSON report alone
    let first = BufReader::new(child.stderr.take().unwrap())
        .lines()
        .next()
        .unwrap()
        .unwrap();
    let lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let parts: Vec<&str> = first.split_whitespace().collect();
    assert!(
        parts.len() == 4 && parts[0] == "buffer" && parts[2] == "pid",
        "{first}"
    );
    let (range, pid) = (parts[1].to_string(), parts[3].to_string());
    let report = std::thread::spawn(move || lines.map(|l| l.unwrap()).last().unwrap_or_default());
    Memhog {
        child,
        range,
        pid,
        report,
    }
}

fn finish_memhog(mut m: Memhog) -> Value {
    assert!(
        m.child.wait().unwrap().success(),
        "memhog failed (data corrupted?)"
    );
    serde_json::from_str(&m.report.join().unwrap()).unwrap()
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn migrate_moves_a_written_buffer_and_keeps_its_data() {
    let m = start_memhog("16M", "4");
    let (range, pid) = (m.range.clone(), m.pid.clone());
    let json = "/tmp/numalab-migrate.json";
    let out = run(&[
        "migrate", "--pid", &pid, "--to", "3", "--range", &range, "--json", json,
    ]);
    assert!(out.status.success());
    let rep: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let moved = rep["counts"]["moved"].as_u64().unwrap();
    assert!(moved >= 4096 - 8, "moved {moved}");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("pages/s") && text.contains("MB/s"), "{text}");
    let r = finish_memhog(m);
    assert_eq!(r["corrupt_words"].as_u64(), Some(0));
    let n = nodes(&r, "nodes_at_end");
    assert!(n[3] >= r["pages"].as_u64().unwrap() - 2, "{n:?}");
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn migrate_fraction_dry_run_and_whole_process() {
    let m = start_memhog("8M", "5");
    let (range, pid) = (m.range.clone(), m.pid.clone());
    // Dry run: reports, moves nothing.
    let out = run(&[
        "migrate",
        "--pid",
        &pid,
        "--to",
        "2",
        "--range",
        &range,
        "--dry-run",
    ]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("moved                    0"));
    // Half of the buffer.
    let json = "/tmp/numalab-migrate-half.json";
    let out = run(&[
        "migrate",
        "--pid",
        &pid,
        "--to",
        "2",
        "--range",
        &range,
        "--fraction",
        "0.5",
        "--json",
        json,
    ]);
    assert!(out.status.success());
    let rep: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let moved = rep["counts"]["moved"].as_u64().unwrap() as f64;
    assert!((moved / 2048.0 - 0.5).abs() < 0.05, "moved {moved} of 2048");
    // Everything on node 0 to node 1 in one migrate_pages call.
    let out = run(&[
        "migrate",
        "--pid",
        &pid,
        "--from",
        "0",
        "--to",
        "1",
        "--whole-process",
    ]);
    assert!(out.status.success());
    let r = finish_memhog(m);
    assert_eq!(r["corrupt_words"].as_u64(), Some(0));
    let n = nodes(&r, "nodes_at_end");
    assert_eq!(n[0], 0, "nothing left on node 0: {n:?}");
    assert!(
        n[2] as f64 >= 0.45 * r["pages"].as_u64().unwrap() as f64,
        "{n:?}"
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn migrate_errors_name_the_problem() {
    let out = run(&["migrate", "--pid", "999999", "--to", "1"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no process with pid 999999"));
    let me = std::process::id().to_string();
    let out = run(&["migrate", "--pid", &me, "--to", "6"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("node 6 does not exist"));
    let out = run(&[
        "migrate",
        "--pid",
        &me,
        "--to",
        "1",
        "--whole-process",
        "--fraction",
        "0.5",
    ]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("cannot be combined"));
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn a_real_run_study_sets_and_restores_the_kernel_settings() {
    let balancing = "/proc/sys/kernel/numa_balancing";
    let thp = "/sys/kernel/mm/transparent_hugepage/enabled";
    let read = |p: &str| std::fs::read_to_string(p).unwrap();
    let (bal0, thp0) = (read(balancing), read(thp));
    let dir = std::env::temp_dir().join("numalab-real-study");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    // the command records the settings it ran under, so the test sees what each run saw
    let probe = dir.join("probe.sh");
    std::fs::write(
        &probe,
        format!(
            "#!/bin/sh\necho \"$(cat {balancing}) $(cat {thp})\" >> {}\nexec {} memhog 8M\n",
            dir.join("seen").display(),
            numalab().display()
        ),
    )
    .unwrap();
    let file = dir.join("study.toml");
    std::fs::write(
        &file,
        format!(
            r#"kind = "real"
repeats = 3
warmups = 1

[defaults]
command = "sh {}"
run = "--cpunodebind=0 --membind=1"

[[axis]]
key = "numa_balancing"
values = ["0", "1"]

[[axis]]
key = "thp"
values = ["never", "always"]
"#,
            probe.display()
        ),
    )
    .unwrap();
    let study_run = |out: &str| {
        run(&[
            "study",
            "run",
            file.to_str().unwrap(),
            "-o",
            dir.join(out).to_str().unwrap(),
            "-q",
        ])
    };
    let out = study_run("out");
    assert!(out.status.success());
    assert_eq!(read(balancing), bal0, "numa_balancing restored");
    assert_eq!(read(thp), thp0, "THP mode restored");
    // 4 configurations × (1 warm-up + 3 timed runs), each under its own settings
    let seen = std::fs::read_to_string(dir.join("seen")).unwrap();
    let lines: Vec<&str> = seen.lines().collect();
    assert_eq!(lines.len(), 16, "{seen}");
    for (i, (bal, mode)) in [
        ("0", "never"),
        ("0", "always"),
        ("1", "never"),
        ("1", "always"),
    ]
    .iter()
    .enumerate()
    {
        for l in &lines[i * 4..i * 4 + 4] {
            assert!(
                l.starts_with(bal) && l.contains(&format!("[{mode}]")),
                "{seen}"
            );
        }
    }
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("numa_balancing=1 thp=always") && stdout.contains("3/3"),
        "{stdout}"
    );
    // a configuration whose placement fails fails alone, and the setting it changed (the
    // opposite of the current one) is put back
    let other = if bal0.trim() == "0" { "1" } else { "0" };
    std::fs::write(
        &file,
        format!("kind = \"real\"\n[defaults]\ncommand = \"true\"\nrun = \"--membind=9\"\nnuma_balancing = \"{other}\"\n"),
    )
    .unwrap();
    let out = study_run("out2");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        read(balancing),
        bal0,
        "numa_balancing restored after a failed run"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn calibrate_measures_every_node_pair() {
    let dir = std::env::temp_dir().join("numalab-calibrate");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (file, json) = (dir.join("vm.toml"), dir.join("m.json"));
    // 16 MiB buffers: the VM's nodes have 384 MiB, and TCG runs every vCPU on one host thread.
    let out = run(&[
        "calibrate",
        "--quick",
        "--buffer-mib",
        "16",
        "-o",
        file.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]);
    assert!(out.status.success(), "calibrate failed");
    let m: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for key in ["latency_ns", "bandwidth_gbps"] {
        let rows = m[key].as_array().unwrap();
        assert_eq!(rows.len(), 5, "{key}: a row per node");
        for (s, row) in rows.iter().enumerate() {
            let row = row.as_array().unwrap();
            assert_eq!(row.len(), 5, "{key}: a column per node");
            if s < 4 {
                assert!(
                    row.iter()
                        .all(|v| v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0)),
                    "{key}: node {s} measured to every node: {row:?}"
                );
            } else {
                assert!(
                    row.iter().all(Value::is_null),
                    "{key}: node 4 has no CPU to measure from"
                );
            }
        }
    }
    // One CPU per node: every sweep borrows other nodes' CPUs as injectors, node 4's too.
    let loaded = m["loaded"].as_array().unwrap();
    assert_eq!(loaded.len(), 5);
    for (d, l) in loaded.iter().enumerate() {
        assert_eq!(l["injectors_local"], false, "node {d}");
        assert_eq!(l["injector_cpus"].as_array().unwrap().len(), 3, "node {d}");
        assert_eq!(l["points"].as_array().unwrap().len(), 3, "node {d}");
    }
    let mp = &m["move_pages"];
    assert_eq!(
        (mp["from_node"].as_u64(), mp["to_node"].as_u64()),
        (Some(0), Some(1)),
        "{mp}"
    );
    assert!(mp["batch_call_ns"].as_f64().unwrap() > mp["one_page_call_ns"].as_f64().unwrap());

    let shown = run(&["machine", "show", "--json", file.to_str().unwrap()]);
    assert!(shown.status.success(), "the calibrated machine loads");
    let machine: Value = serde_json::from_slice(&shown.stdout).unwrap();
    let nodes = machine["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 5);
    let diag: Vec<f64> = (0..4)
        .map(|i| m["latency_ns"][i][i].as_f64().unwrap())
        .collect();
    for (i, &v) in diag.iter().enumerate() {
        let idle = nodes[i]["idle_local_ns"].as_f64().unwrap();
        assert!(
            (idle - v).abs() < 0.06,
            "node {i}: {idle} written, {v} measured"
        );
    }
    let far = nodes[4]["idle_local_ns"].as_f64().unwrap();
    assert!(
        diag.iter().any(|v| (v - far).abs() < 0.06),
        "node 4 takes its nearest CPU node's idle latency: {far} among {diag:?}"
    );
    let text = std::fs::read_to_string(&file).unwrap();
    assert_eq!(
        text.matches("[[link]]").count(),
        8,
        "every link calibrated:\n{text}"
    );
    assert!(text.contains("move_pages_base_ns ="), "{text}");
    let _ = std::fs::remove_dir_all(&dir);
}
