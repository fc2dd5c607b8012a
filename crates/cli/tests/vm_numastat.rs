//! `numalab numastat` against numactl's numastat (the host's `/usr/bin/numastat`, copied into
//! the VM by vm/lib/build.sh) on the 5-node test VM (docs/testing.md), option for option.
//! The kernel's counters move with every allocation, so the node directory is frozen for the
//! comparison: a copy of every `nodeN/{numastat,meminfo}` is bind-mounted over
//! /sys/devices/system/node, and the process whose memory `-p` shows is stopped. Then both
//! tools must print the same bytes on standard output and on standard error.

use std::ffi::CString;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

const NODE_DIR: &str = "/sys/devices/system/node";
const NUMASTAT: &str = "/usr/bin/numastat";

fn numalab() -> PathBuf {
    std::env::var_os("NUMALAB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_numalab")))
}

/// The node directory replaced by a frozen copy until dropped.
struct FrozenNodes {
    copy: PathBuf,
}

impl FrozenNodes {
    fn new() -> FrozenNodes {
        let copy = PathBuf::from(format!("/tmp/numastat-nodes-{}", std::process::id()));
        std::fs::create_dir_all(&copy).unwrap();
        for e in std::fs::read_dir(NODE_DIR).unwrap() {
            let e = e.unwrap();
            let name = e.file_name().to_string_lossy().into_owned();
            if !name.starts_with("node") || !name[4..].bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            let dir = copy.join(&name);
            std::fs::create_dir_all(&dir).unwrap();
            for f in ["numastat", "meminfo"] {
                let text = std::fs::read(e.path().join(f)).unwrap();
                std::fs::write(dir.join(f), text).unwrap();
            }
        }
        let (src, dst) = (cstr(&copy), cstr(Path::new(NODE_DIR)));
        // SAFETY: valid NUL-terminated paths; a bind mount takes no fs type or data.
        let rc = unsafe {
            libc::mount(
                src.as_ptr(),
                dst.as_ptr(),
                std::ptr::null(),
                libc::MS_BIND,
                std::ptr::null(),
            )
        };
        assert_eq!(
            rc,
            0,
            "bind mount over {NODE_DIR}: {}",
            std::io::Error::last_os_error()
        );
        FrozenNodes { copy }
    }
}

impl Drop for FrozenNodes {
    fn drop(&mut self) {
        let dst = cstr(Path::new(NODE_DIR));
        // SAFETY: valid path; unmounting what new() mounted.
        unsafe { libc::umount(dst.as_ptr()) };
        std::fs::remove_dir_all(&self.copy).ok();
    }
}

fn cstr(p: &Path) -> CString {
    CString::new(p.to_str().unwrap()).unwrap()
}

/// A process with memory on every node (`numalab run --interleave=all -- numalab memhog`),
/// stopped once all of it is allocated, killed when dropped.
struct Stopped {
    runner: Child,
    /// memhog's pid.
    pid: u32,
}

/// The first child of `pid` (from the parent pids in /proc/*/stat).
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_dir("/proc").ok()?.find_map(|e| {
        let name = e.ok()?.file_name().into_string().ok()?;
        let stat = std::fs::read_to_string(format!("/proc/{name}/stat")).ok()?;
        // "PID (comm) STATE PPID ...": the comm may hold spaces, so read after the last ')'
        let ppid = stat.rsplit_once(')')?.1.split_whitespace().nth(1)?;
        (ppid == pid.to_string()).then(|| name.parse().ok())?
    })
}

impl Stopped {
    fn start() -> Stopped {
        let bin = numalab();
        let runner = Command::new(&bin)
            .args(["run", "--interleave=all", "--thp=never", "--"])
            .arg(&bin)
            .args(["memhog", "16M", "--hold-s", "120"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        // 16 MiB = 4096 pages, all touched before the hold: wait for numa_maps to show them
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let pages = |pid: u32| -> u64 {
            std::fs::read_to_string(format!("/proc/{pid}/numa_maps"))
                .unwrap_or_default()
                .split_whitespace()
                .filter_map(|t| t.strip_prefix('N')?.split_once('=')?.1.parse::<u64>().ok())
                .sum()
        };
        let pid = loop {
            // `run` execs memhog in place, or (with a supervisor) runs it as its child
            let found = [Some(runner.id()), child_of(runner.id())]
                .into_iter()
                .flatten()
                .find(|&p| pages(p) >= 4096);
            if let Some(pid) = found {
                break pid;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "memhog never allocated"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        // SAFETY: signalling our own child (or grandchild).
        unsafe { libc::kill(pid as i32, libc::SIGSTOP) };
        std::thread::sleep(std::time::Duration::from_millis(100));
        Stopped { runner, pid }
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        // SAFETY: signalling our own child (or grandchild).
        unsafe { libc::kill(self.pid as i32, libc::SIGKILL) };
        self.runner.kill().ok();
        self.runner.wait().ok();
    }
}

fn run(exe: &Path, pre: &[&str], args: &[String], width: Option<&str>) -> Output {
    let mut c = Command::new(exe);
    c.args(pre).args(args);
    match width {
        Some(w) => c.env("NUMASTAT_WIDTH", w),
        None => c.env_remove("NUMASTAT_WIDTH"),
    };
    c.output().unwrap()
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn numastat_prints_what_numactls_numastat_prints() {
    assert!(
        Path::new(NUMASTAT).exists(),
        "{NUMASTAT} is not in the VM (vm/lib/build.sh copies the host's, from Debian's numactl)"
    );
    let hog = Stopped::start();
    let pid = hog.pid.to_string();
    let _frozen = FrozenNodes::new();
    let cases: Vec<(Vec<String>, Option<&str>)> = [
        (vec![], None),
        (vec!["-n"], None),
        (vec!["-m"], None),
        (vec!["-c"], None),
        (vec!["-z"], None),
        (vec!["-cz"], None),
        (vec!["-s"], None),
        (vec!["-s2", "-m"], None),
        (vec!["-m", "-n"], None),
        (vec!["-mcs"], None),
        (vec!["-p", &pid], None),
        (vec!["-v", "-p", &pid], None),
        (vec!["-c", "-p", &pid], None),
        (vec!["-czs", "-p", &pid, "-m"], None),
        (vec!["-p", "memhog"], None),
        (vec!["-v", "memhog", &pid], None),
        (vec!["-p", "no-such-process-anywhere"], None),
        // folding: 60 columns hold the label and two 16-wide node columns
        (vec!["-m", "-n"], Some("60")),
        (vec![], Some("40")),
        (vec!["-p", &pid], Some("70")),
    ]
    .into_iter()
    .map(|(a, w)| (a.into_iter().map(str::to_string).collect(), w))
    .collect();
    let mut checked = 0;
    for (args, width) in &cases {
        let want = run(Path::new(NUMASTAT), &[], args, *width);
        let got = run(&numalab(), &["numastat"], args, *width);
        let show = |o: &Output| {
            format!(
                "{:?}\n{}{}",
                o.status,
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            )
        };
        assert_eq!(
            (&got.stdout, &got.stderr, got.status.code()),
            (&want.stdout, &want.stderr, want.status.code()),
            "numastat {args:?} (NUMASTAT_WIDTH {width:?})\n--- numastat:\n{}\n--- numalab:\n{}",
            show(&want),
            show(&got)
        );
        checked += 1;
    }
    // A process that is gone: numastat says so on standard error and exits 0; numalab says
    // the same and exits 1 (docs/numastat.md).
    let args = vec!["-p".to_string(), "999999".to_string()];
    let want = run(Path::new(NUMASTAT), &[], &args, None);
    let got = run(&numalab(), &["numastat"], &args, None);
    assert_eq!((&got.stdout, &got.stderr), (&want.stdout, &want.stderr));
    assert_eq!((want.status.code(), got.status.code()), (Some(0), Some(1)));
    let text = String::from_utf8_lossy(&got.stderr);
    assert!(text.contains("Can't read /proc/999999/numa_maps"), "{text}");
    eprintln!("numastat: {} invocations print the same bytes", checked + 1);
}
