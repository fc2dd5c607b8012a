//! `numalab run --show` and `--hardware` against numactl 2.0.16's `-s` and `-H` (the host's
//! `/usr/bin/numactl`, copied into the 5-node test VM by vm/lib/build.sh). Under every policy
//! and binding below, set once by numactl and once by `numalab run`, both tools print the same
//! lines; the only numbers allowed to differ are the ones that depend on the printing process
//! itself: the next interleave node (each process's own allocations advance it) and the free
//! memory of `--hardware`.

use std::path::PathBuf;
use std::process::{Command, Output};

const NUMACTL: &str = "/usr/bin/numactl";

fn numalab() -> PathBuf {
    std::env::var_os("NUMALAB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_numalab")))
}

fn run(exe: &str, args: &[&str]) -> Output {
    Command::new(exe).args(args).output().unwrap()
}

/// The output with the per-process numbers blanked.
fn comparable(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| {
            if l.ends_with("(interleave next)") {
                "preferred node: N (interleave next)".to_string()
            } else if l.starts_with("interleavenode: ") {
                "interleavenode: N".to_string()
            } else if l.contains(" free: ") {
                format!("{} free: N MB", l.split(" free: ").next().unwrap())
            } else {
                l.to_string()
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn show_and_hardware_print_numactls_lines() {
    assert!(
        std::path::Path::new(NUMACTL).exists(),
        "{NUMACTL} is not in the VM (vm/lib/build.sh copies the host's, from Debian's numactl)"
    );
    let bin = numalab();
    let bin = bin.to_str().unwrap();
    let hw_want = run(NUMACTL, &["-H"]);
    let hw_got = run(bin, &["run", "-H"]);
    assert!(hw_want.status.success() && hw_got.status.success());
    assert_eq!(comparable(&hw_got), comparable(&hw_want), "--hardware");
    let policies: [&[&str]; 11] = [
        &[],
        &["--interleave=all"],
        &["-i", "0,2"],
        &["--membind=1"],
        &["-m", "4"],
        &["--preferred=3"],
        &["--localalloc"],
        &["--cpunodebind=1"],
        &["--physcpubind=2"],
        &["-i", "1,3", "-C", "0-1"],
        &["--preferred-many=0,4"],
    ];
    let mut checked = 0;
    for p in policies {
        // the same policy set by numactl, shown by both
        let mut a: Vec<&str> = p.to_vec();
        a.extend([NUMACTL, "-s"]);
        let want = run(NUMACTL, &a);
        let mut b: Vec<&str> = p.to_vec();
        b.extend([bin, "run", "-s"]);
        let got = run(NUMACTL, &b);
        assert!(want.status.success(), "numactl {a:?}: {:?}", want);
        assert_eq!(
            comparable(&got),
            comparable(&want),
            "shown under numactl {p:?}\n--- numactl -s:\n{}\n--- numalab run -s:\n{}",
            String::from_utf8_lossy(&want.stdout),
            String::from_utf8_lossy(&got.stdout)
        );
        // and set by numalab run, shown by numactl: the same state
        let mut c: Vec<&str> = vec!["run"];
        c.extend(p.iter().copied());
        c.extend(["--", NUMACTL, "-s"]);
        let set_by_us = run(bin, &c);
        assert_eq!(
            comparable(&set_by_us),
            comparable(&want),
            "set by numalab run {p:?}\n--- numactl:\n{}\n--- numalab run:\n{}{}",
            String::from_utf8_lossy(&want.stdout),
            String::from_utf8_lossy(&set_by_us.stdout),
            String::from_utf8_lossy(&set_by_us.stderr)
        );
        checked += 1;
    }
    eprintln!("numactl -s: {checked} policies, -H: the same lines");
}
