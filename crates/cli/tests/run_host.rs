//! `numalab run` on the host (one node): what works anywhere. Multi-node placement is in
//! vm_cli.rs, run inside the test VM.

use std::path::PathBuf;
use std::process::Command;

fn numalab() -> Command {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
}

fn preload_beside_binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_numalab")).with_file_name("libnumalab_nexttouch.so")
}

#[test]
fn next_touch_preloads_the_library_into_the_child_only() {
    let lib = preload_beside_binary();
    if !lib.exists() {
        // `cargo test -p numalab` alone does not build the cdylib; the workspace run does.
        eprintln!(
            "skipped: {} not built (run cargo test --workspace)",
            lib.display()
        );
        return;
    }
    let out = numalab()
        .args([
            "run",
            "--next-touch",
            "--",
            "sh",
            "-c",
            "echo \"$LD_PRELOAD|$NUMALAB_NEXT_TOUCH\"; exit 3",
        ])
        .env_remove("NUMALAB_NEXT_TOUCH")
        .output()
        .unwrap();
    // The child ran with the library loaded (its constructor ran in sh) and its status is ours.
    assert_eq!(
        out.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let (preload, flag) = line.split_once('|').unwrap();
    assert!(preload.starts_with(lib.to_str().unwrap()), "{line}");
    assert_eq!(flag, "1");
}

#[test]
fn next_touch_without_the_library_fails_before_running_anything() {
    let marker = std::env::temp_dir().join(format!("numalab-nt-{}", std::process::id()));
    let out = numalab()
        .args(["run", "--next-touch", "--", "touch"])
        .arg(&marker)
        .env(
            "NUMALAB_NEXT_TOUCH_LIB",
            "/nonexistent/libnumalab_nexttouch.so",
        )
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("needs the preload library /nonexistent/libnumalab_nexttouch.so"),
        "{err}"
    );
    assert!(!marker.exists());
}

#[test]
fn single_node_runs_and_errors() {
    let out = numalab()
        .args([
            "run",
            "--membind=0",
            "--physcpubind=0",
            "--",
            "sh",
            "-c",
            "exit 5",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(5));
    let out = numalab()
        .args(["run", "--membind=9", "--", "true"])
        .output()
        .unwrap();
    // numactl's exit status for a placement error
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("node 9 does not exist"));
    let out = numalab().args(["run", "--interleave=0"]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no command given"));
    let out = numalab()
        .args(["run", "--", "/no/such/program"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(127));
    let out = numalab().args(["run", "--show"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.starts_with("policy: default\n") && text.contains("membind: 0"),
        "{text}"
    );
}

#[test]
fn topo_prints_numactl_layout_and_json() {
    let out = numalab().arg("topo").output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success());
    assert!(
        text.starts_with("available: ")
            && text.contains("node 0 cpus:")
            && text.contains("node distances:"),
        "{text}"
    );
    let out = numalab().args(["topo", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let nodes = v["nodes"]["nodes"].as_array().unwrap();
    assert!(!nodes.is_empty());
    // the numastat counters of the JSON are in the text too, in numastat's layout
    if nodes[0]["numastat"].is_object() {
        let header = text
            .lines()
            .find(|l| l.starts_with("numastat (pages)"))
            .unwrap_or_else(|| panic!("no numastat table in\n{text}"));
        assert_eq!(
            header.split_whitespace().count(),
            2 + nodes.len(),
            "{header}"
        );
        for row in [
            "numa_hit",
            "numa_miss",
            "numa_foreign",
            "interleave_hit",
            "local_node",
            "other_node",
        ] {
            let line = text
                .lines()
                .find(|l| l.starts_with(row))
                .unwrap_or_else(|| panic!("{row}"));
            assert_eq!(line.split_whitespace().count(), 1 + nodes.len(), "{line}");
        }
    }
}

#[test]
fn memhog_and_migrate_refuse_senseless_values_and_memhog_json_is_json_alone() {
    for (args, says) in [
        (&["memhog", "0"][..], "size 0: expected at least one page"),
        (
            &["memhog", "1M", "--writers", "100000"][..],
            "--writers 100000: expected 1 to 256",
        ),
        (
            &["memhog", "1M", "--writers", "0"][..],
            "'--writers <WRITERS>': expected a whole number of writer threads, at least 1 (got '0')",
        ),
        (
            &["migrate", "--pid", "0", "--to", "0"][..],
            "expected the pid of a running process (see ps or pgrep), at least 1 (got '0')",
        ),
        (
            &["migrate", "--pid", "1", "--to", "0", "--batch-pages", "0"][..],
            "expected a whole number of pages per move_pages call, at least 1 (got '0')",
        ),
    ] {
        let out = numalab().args(args).output().unwrap();
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(says), "{args:?}: {err}");
    }
    // `memhog --json | jq` works: the buffer's announcement goes to stderr
    let out = numalab()
        .args(["memhog", "64K", "--json"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("stdout is JSON");
    assert_eq!(v["corrupt_words"].as_u64(), Some(0));
    assert!(String::from_utf8_lossy(&out.stderr).starts_with("buffer "));
}

#[test]
fn options_read_as_numactl_reads_them_and_a_mistyped_one_runs_nothing() {
    let dir = std::env::temp_dir().join(format!("numalab-run-opts-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let marker = dir.join("ran");
    // a mistyped option is an error (exit 1, as numactl), with the option it resembles, and
    // the command after it does not run
    let out = numalab()
        .args(["run", "--interleaved=all", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("'--interleaved'") && err.contains("'--interleave'"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
    // short options with attached values, numactl's old --cpubind / -c, and --all
    for args in [
        &["-m0", "-N0"][..],
        &["-i0", "-c", "0"],
        &["--cpubind=0", "--localalloc"],
        &["-a", "--membind=0"],
    ] {
        let out = numalab()
            .arg("run")
            .args(args)
            .args(["touch"])
            .arg(&marker)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(marker.exists(), "{args:?}");
        std::fs::remove_file(&marker).unwrap();
    }
    // --all must come before the node and CPU specs, as numactl requires
    let out = numalab()
        .args(["run", "-m0", "--all", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("must be before"));
    // --cpunodebind and --physcpubind together: the later one binds, as numactl applies them
    // in order
    let cpus = |args: &[&str]| {
        let out = numalab()
            .arg("run")
            .args(args)
            .args(["grep", "Cpus_allowed_list", "/proc/self/status"])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    let last_cpu = std::fs::read_to_string("/sys/devices/system/node/node0/cpulist")
        .unwrap()
        .trim()
        .rsplit([',', '-'])
        .next()
        .unwrap()
        .to_string();
    let node0 = cpus(&["-N", "0"]);
    assert_eq!(
        cpus(&["-N", "0", "-C", &last_cpu]),
        format!("Cpus_allowed_list:\t{last_cpu}")
    );
    assert_eq!(cpus(&[&format!("-C{last_cpu}"), "--cpunodebind=0"]), node0);
    // the command's own options stay the command's
    let out = numalab()
        .args(["run", "-l", "echo", "-n", "--x"])
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "--x");
    // --strict concerns shared memory only: numactl's warning, and the command runs
    let out = numalab()
        .args(["run", "--strict", "true"])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "numactl: warning. Strict flag for process ignored.\n"
    );
    std::fs::remove_dir_all(&dir).ok();
}

/// numactl's shared-memory policies on the host's one node: a tmpfs file created, bound,
/// touched, dumped and verified in one command, in the order given; `same`; and the errors
/// numactl gives for options out of order (the comparison with numactl itself, on five
/// nodes, is vm_numactl_shm.rs).
#[test]
fn shared_memory_options_apply_in_order_as_numactl_applies_them() {
    let dir = std::path::Path::new("/dev/shm");
    if !dir.is_dir() {
        eprintln!("skipped: no /dev/shm");
        return;
    }
    let file = dir.join(format!("numalab-run-host-{}", std::process::id()));
    let run = |args: &[&str]| {
        let o = numalab().arg("run").args(args).output().unwrap();
        (
            o.status.code(),
            String::from_utf8_lossy(&o.stdout).into_owned(),
            String::from_utf8_lossy(&o.stderr).into_owned(),
        )
    };
    let f = file.to_str().unwrap();
    let (code, out, err) = run(&[
        "--length",
        "4m",
        "--file",
        f,
        "--strict",
        "--membind",
        "0",
        "--verify",
        "--dump",
        "--dump-nodes",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(
        out,
        "0000000000000000-0000000000400000: bind : 0 \n0000000000000000-0000000000400000: 0\n"
    );
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 4 << 20);
    // tmpfs keeps the policy with the file (its shared policy), for the next command
    let (code, out, _) = run(&["--length", "4m", "--file", f, "--dump"]);
    assert_eq!(
        (code, out.as_str()),
        (Some(0), "0000000000000000-0000000000400000: bind : 0 \n")
    );
    // a policy before the file would be the process's: numactl refuses it
    let (code, _, err) = run(&["--interleave", "0", "--file", f]);
    assert_eq!(code, Some(1));
    assert!(
        err.starts_with("numactl: specify policy after --shm/--file"),
        "{err}"
    );
    // the region's options belong before it
    let (code, _, err) = run(&["--length", "4m", "--file", f, "--offset", "2m"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("--offset must be before shared memory"),
        "{err}"
    );
    // with a segment there is no command to run
    let (code, _, err) = run(&["--length", "4m", "--file", f, "true"]);
    assert_eq!(code, Some(1));
    assert!(err.starts_with("usage: numalab run"), "{err}");
    // shm options for a process are an error, not ignored
    let (code, _, err) = run(&["--length", "2m", "true"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("shm related option --length for process"),
        "{err}"
    );
    std::fs::remove_file(&file).ok();
    // `same`: the previous node spec
    let (code, out, err) = run(&[
        "--cpunodebind",
        "0",
        "--membind",
        "same",
        "cat",
        "/proc/self/status",
    ]);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.lines().any(|l| l.starts_with("Mems_allowed_list:")),
        "{out}"
    );
    let (code, _, err) = run(&["--membind", "same", "true"]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains("same needs previous node specification"),
        "{err}"
    );
}

/// numactl 2.0.17+'s `--version` (long only: `-V` stays `--verify`) and 2.0.19's
/// `--cpu-compress` for `--hardware`.
#[test]
fn version_and_cpu_compress_as_newer_numactls() {
    let o = numalab().args(["run", "--version"]).output().unwrap();
    assert_eq!(o.status.code(), Some(0));
    let v = String::from_utf8_lossy(&o.stdout);
    assert!(v.starts_with("2.0.16 (numalab "), "{v}");
    let o = numalab()
        .args(["run", "--hardware", "--cpu-compress"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0));
    let text = String::from_utf8_lossy(&o.stdout);
    let line = text
        .lines()
        .find(|l| l.contains(" cpus:"))
        .expect("a cpus line");
    // "node 0 cpus: 0-1 (2)": runs, then the count in parentheses
    assert!(line.ends_with(')') && line.contains(" ("), "{line}");
    // -V is still numactl's --verify, which needs a segment
    let o = numalab().args(["run", "-V", "true"]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&o.stderr).contains("--verify must be after shared memory"));
}
