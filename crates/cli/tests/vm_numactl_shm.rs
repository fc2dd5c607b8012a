//! numactl's shared-memory policies (`--shm`, `--file`, `--length`, `--offset`, `--shmmode`,
//! `--shmid`, `--huge`, `--strict`, `--touch`, `--dump`, `--dump-nodes`, `--verify`) on the
//! 5-node test VM: the same sequences of commands run with the real numactl 2.0.16
//! (/numactl-suite/numactl, staged by vm/lib/build.sh) and with `numalab run`, each tool on
//! segments and files of its own, and every command must end with the same exit status,
//! print the same standard output (dumps, node runs, verify reports) and the same message
//! on standard error (numalab prints its own usage text where numactl prints its usage).
//! Processes are pinned to CPU 0, so pages that no policy places land on node 0 for both.
//! The device node specs (`netdev:`, `pci:`, ...) are compared here too.

use std::path::{Path, PathBuf};
use std::process::Command;

const NUMACTL: &str = "/numactl-suite/numactl";

fn numalab() -> PathBuf {
    std::env::var_os("NUMALAB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_numalab")))
}

fn say(msg: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{msg}");
}

/// What one command did, normalised for the comparison: the exit status, standard output
/// with the addresses of verify reports blanked, standard error up to the usage text, with
/// the tool's own file-name tag replaced.
#[derive(Debug, PartialEq)]
struct Ended {
    code: Option<i32>,
    out: String,
    err: String,
}

fn run_one(tool: &str, args: &[String], cwd: &Path, tag: &str) -> Ended {
    let mut cmd = if tool == "numactl" {
        Command::new(NUMACTL)
    } else {
        let mut c = Command::new(numalab());
        c.arg("run");
        c
    };
    let o = cmd.args(args).current_dir(cwd).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout)
        .lines()
        .map(|l| match l.strip_prefix("numactl verify ") {
            // "numactl verify ADDR(OFFSET): ..." : the address differs, the offset does not
            Some(rest) => format!(
                "numactl verify #{}",
                rest.find('(').map_or(rest, |i| &rest[i..])
            ),
            None => l.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n");
    let err = String::from_utf8_lossy(&o.stderr);
    let err = err
        .split("usage: ")
        .next()
        .unwrap_or("")
        .replace(tag, "TAG");
    Ended {
        code: o.status.code(),
        out,
        err,
    }
}

/// Where two runs of a command differ: the exit statuses, and the first differing line of
/// each stream with the lines around it (dumps run to thousands of lines).
fn difference(real: &Ended, ours: &Ended) -> String {
    let mut s = format!(
        "exit status: numactl {:?}, numalab {:?}\n",
        real.code, ours.code
    );
    for (what, a, b) in [
        ("stdout", &real.out, &ours.out),
        ("stderr", &real.err, &ours.err),
    ] {
        let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
        let Some(i) = (0..a.len().max(b.len())).find(|&i| a.get(i) != b.get(i)) else {
            continue;
        };
        let around = |v: &[&str]| {
            let lo = i.saturating_sub(2).min(v.len());
            v[lo..(i + 3).min(v.len())].join("\n    ")
        };
        s += &format!(
            "{what} differs at line {} of {} (numactl) / {} (numalab):\n  numactl:\n    {}\n  numalab:\n    {}\n",
            i + 1,
            a.len(),
            b.len(),
            around(&a),
            around(&b)
        );
    }
    s
}

/// Run `script` (numactl's arguments per line, `@` standing for the tool's tag) with the
/// real numactl, then with numalab, each in a directory of its own (so the System V keys,
/// which ftok takes from the key file's inode, differ); compare command by command.
fn compare(name: &str, script: &[&str]) {
    let base = std::env::temp_dir().join(format!("numactl-shm-{}", std::process::id()));
    let mut runs = Vec::new();
    for (tool, tag) in [("numactl", "real"), ("numalab", "ours")] {
        let cwd = base.join(format!("{name}-{tag}"));
        std::fs::create_dir_all(&cwd).unwrap();
        let ended: Vec<Ended> = script
            .iter()
            .map(|line| {
                let args: Vec<String> = line
                    .split_whitespace()
                    .map(|a| a.replace('@', tag))
                    .collect();
                run_one(tool, &args, &cwd, tag)
            })
            .collect();
        runs.push(ended);
    }
    for (i, line) in script.iter().enumerate() {
        let (real, ours) = (&runs[0][i], &runs[1][i]);
        assert!(
            ours == real,
            "{name}, command {}: numactl {line}\n{}",
            i + 1,
            difference(real, ours)
        );
    }
    // what was compared, in the log: each command and what the real numactl did
    for (line, e) in script.iter().zip(&runs[0]) {
        say(&format!("$ numactl {line}  [exit {:?}]", e.code));
        for l in e.out.lines().chain(e.err.lines()) {
            say(&format!("  {l}"));
        }
    }
    let lines: usize = runs[0].iter().map(|e| e.out.lines().count()).sum();
    say(&format!(
        "numactl shm {name}: {} commands, {lines} lines of output, the same with numalab",
        script.len()
    ));
}

/// Pin this test (and so every command it starts) to CPU 0, on node 0.
fn pin_to_cpu0() {
    // SAFETY: cpu_set_t is plain data; CPU_ZERO/CPU_SET write inside it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(0, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0
        );
    }
}

fn require_numactl() {
    assert!(
        Path::new(NUMACTL).exists(),
        "{NUMACTL} is not in the VM: run `bash scripts/numactl-suite.sh` before vm/run-tests.sh \
         (.ci/run does)"
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn system_v_segments_get_numactls_policies_dumps_and_reports() {
    require_numactl();
    pin_to_cpu0();
    compare(
        "sysv",
        &[
            // created; no policy yet, so nothing to dump
            "--length=20m --shm=A --dump",
            // a policy on [2m, 6m), touched and verified
            "--offset=2m --length=4m --shm=A --strict --interleave=0,1 --verify --dump",
            "--shm=A --dump",
            "--offset 8m --length=10m --shm=A --strict --membind=1 --verify --dump",
            // over the two above: numactl prints each run with the next run's mask
            "--offset 4m --length 6m --shm=A --localalloc --touch --dump",
            "--shm=A --dump",
            // touched local pages (node 0), bound ones (node 1), untouched ones faulted in
            // by the dump on this CPU's node. Not the interleaved pages: the kernel starts a
            // shared object's interleave round at a node biased by its inode number, which
            // differs between the two tools' segments (--verify checks the round instead)
            "--offset 6m --length 14m --shm=A --dump-nodes",
            // pages already placed: verify reports the first one off the interleave round
            "--offset 6m --length 14m --shm=A --interleave=0,2 --verify",
            "--shm=A --strict --membind=2",
            // numactl's --preferred on shm: libnuma's preferred mode with no node
            "--offset 0 --length 2m --shm=A --preferred=1 --dump",
            "--shm=A --dump",
            // another project id is another segment
            "--shmid 1 --shmmode 0640 --length 4m --shm=A --membind=3 --touch --dump --dump-nodes",
            "-I 1 -S A -D",
            // all nodes, the CPU-less node 4 included
            "-L 8m -S B -i all -V -d",
        ],
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn tmpfs_files_get_numactls_policies() {
    require_numactl();
    pin_to_cpu0();
    compare(
        "tmpfs",
        &[
            "--length 8m --file /dev/shm/@F --interleave all --verify --dump",
            "--file /dev/shm/@F --dump",
            "--offset 4m --length 2m --file /dev/shm/@F --membind 3 --dump",
            "--file /dev/shm/@F --dump",
            "--length 4m --file /dev/shm/@G --membind 3 --touch --dump-nodes",
            "--offset 2m --length 2m --file /dev/shm/@G --localalloc --dump --dump-nodes",
            "--length 4m --file /dev/shm/@K --localalloc --touch --dump-nodes",
            // a missing file needs a length; an offset off the page cannot be mapped
            "--file /dev/shm/@nothere --dump",
            "--length 1m --offset 100 --file /dev/shm/@H --dump",
        ],
    );
    for tag in ["real", "ours"] {
        for f in ["F", "G", "H", "K"] {
            std::fs::remove_file(format!("/dev/shm/{tag}{f}")).ok();
        }
    }
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn huge_page_segments_and_misuse_end_as_with_numactl() {
    require_numactl();
    pin_to_cpu0();
    let nr = "/proc/sys/vm/nr_hugepages";
    let before = std::fs::read_to_string(nr).unwrap();
    // 8 per node: each tool's segments fit on the nodes their policies name
    std::fs::write(nr, "40").unwrap();
    let restore = || std::fs::write(nr, before.trim()).unwrap();
    let result = std::panic::catch_unwind(|| {
        compare(
            "huge",
            &[
                "--length 8m --huge --shm=H --interleave 0,1 --touch --dump --dump-nodes",
                "--huge --shm=H --dump",
                // not a multiple of the huge page: created, then refused
                "--length 3m --huge --shm=J --dump",
            ],
        );
        compare(
            "misuse",
            &[
                "--dump",
                "--dump-nodes",
                "--length 2m true",
                "--shm A --length 2m",
                "--length 2m --shm A true",
                "--interleave 0 --shm A",
                "--touch --shm A",
                "--shm A --verify",
                "--shm A --membind 1 -a",
                "--shm A --membind same",
                "--length 2m --cpunodebind 0 true",
                "--cpunodebind 0 --shm A",
                "--shmmode 9 --shm A",
                "--shmid x --shm A",
                "--shm nosuch",
                "--file /dev/shm/@nothere --dump",
                "--offset 2m --length 2m --shm A --membind 0 --verify",
                "--length 1m --file /nonexistent/dir/x",
            ],
        );
    });
    restore();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// numactl's device node specs on the VM, whose devices are all of unknown node (QEMU's PCI
/// functions have numa_node -1, the only network device is lo, there is no block device):
/// numalab refuses each where numactl refuses it, exit status 1, and names the device. The
/// successful lookups are tested on a fake sysfs (place's device_node.rs and nodespec.rs).
#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn device_node_specs_fail_where_numactl_fails() {
    require_numactl();
    for (spec, names) in [
        ("netdev:lo", "'lo'"),
        ("netdev:eth0", "'eth0'"),
        ("pci:0:1", "'0:1'"),
        ("pci:0000:00:01.0", "'0000:00:01.0'"),
        ("file:/dev/shm", "'/dev/shm'"),
        ("ip:127.0.0.1", "'lo'"),
        ("block:vda", "'vda'"),
        ("0,netdev:lo", "'lo'"),
    ] {
        let real = Command::new(NUMACTL)
            .args(["--membind", spec, "true"])
            .output()
            .unwrap();
        let ours = Command::new(numalab())
            .args(["run", "--membind", spec, "true"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&ours.stderr);
        say(&format!(
            "device spec {spec}: numactl {:?} ({}), numalab {:?} ({})",
            real.status.code(),
            String::from_utf8_lossy(&real.stderr)
                .lines()
                .next()
                .unwrap_or(""),
            ours.status.code(),
            err.trim()
        ));
        assert_eq!(ours.status.code(), real.status.code(), "{spec}: {err}");
        assert!(err.contains(names), "{spec}: {err}");
    }
}
