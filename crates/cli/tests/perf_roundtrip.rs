//! perf.data → Arrow → perf.data with `numalab convert`, checked with the real perf: a
//! page-fault recording made without CPUs (`perf record -e page-faults -d` of `sh -c 'ls;
//! cat'`, crates/analyze/tests/data/README.md) comes back with the same processes, thread
//! names, build ids, symbols (the kernel's too) and per-sample periods, no CPU invented, and
//! its samples are not counted as DRAM accesses.

use numalab_analyze::{SampleReader, SampleSource};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../analyze/tests/data/pagefaults-nocpu.data"
);

fn numalab(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "numalab {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The build id of the kernel the fixture was recorded on (`perf buildid-list -i`).
const FIXTURE_KERNEL_BUILD_ID: &str = "4a5a9b0affb66c437abcd455d2738af879985fa9";

/// A perf build-id cache holding a kallsyms for the fixture's kernel, with made-up symbols
/// covering its text: perf resolves the recording's kernel addresses against it on any host
/// (a host running that very kernel uses its /proc/kallsyms instead), so the comparison below
/// covers kernel symbols everywhere, and they resolve only when the file names its kernel's
/// build id.
/// Written once per test process; every `perf` call below reads it.
fn kernel_buildid_cache() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(write_kernel_buildid_cache)
}

fn write_kernel_buildid_cache() -> PathBuf {
    let dir = tmp("buildid-cache");
    let kdir = dir.join("[kernel.kallsyms]").join(FIXTURE_KERNEL_BUILD_ID);
    std::fs::create_dir_all(&kdir).unwrap();
    // _text where the recording's kernel map starts (its MMAP record's pgoff)
    std::fs::write(
        kdir.join("kallsyms"),
        "ffffffff81000000 T _text\n\
         ffffffff81000000 T _stext\n\
         ffffffff81400000 T numalab_test_text_a\n\
         ffffffff81800000 T numalab_test_text_b\n\
         ffffffff81c00000 T numalab_test_text_c\n\
         ffffffff82200000 T _etext\n",
    )
    .unwrap();
    dir
}

/// `perf ARGS -i FILE`: (success, stdout, stderr).
fn perf(args: &[&str], file: &Path) -> (bool, String, String) {
    let out = Command::new("perf")
        .arg("--buildid-dir")
        .arg(kernel_buildid_cache())
        .args(args)
        .arg("-i")
        .arg(file)
        // the fixture and the outputs may belong to another user than the caller
        .arg("--force")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `perf` ({e}): this test needs the real perf tool (Debian: apt-get \
                 install linux-perf)"
            )
        });
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn tmp(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("numalab-perf-rt-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

#[test]
fn a_page_fault_recording_survives_arrow_and_back() {
    let original = Path::new(FIXTURE);
    let arrows = tmp("faults.arrows");
    let back = tmp("faults.data");
    numalab(&["convert", FIXTURE, arrows.to_str().unwrap()]);
    numalab(&["convert", arrows.to_str().unwrap(), back.to_str().unwrap()]);

    // The Arrow file: no CPU (a null column, not CPU 0), no access, and the thread names.
    let mut r = SampleReader::open(&arrows).unwrap();
    let meta = r.meta().clone();
    assert!(meta.samples_without_cpu);
    let mut n = 0;
    while let Some(b) = r.next_batch().unwrap() {
        for rec in &b.records {
            assert_eq!(rec.cpu(), None, "{rec:?}");
            assert!(!rec.is_access(), "{rec:?}");
            assert!(rec.period.is_some(), "{rec:?}");
        }
        n += b.records.len();
    }
    assert!(n >= 10, "{n} samples");
    let comms: Vec<&str> = meta.thread_names.iter().map(|t| t.comm.as_str()).collect();
    for c in ["sh", "ls", "cat"] {
        assert!(comms.contains(&c), "{comms:?}");
    }

    // perf sees the same samples: process, thread, name, address, ip and the symbol and
    // object each resolves to.
    let fields = ["script", "-F", "comm,pid,tid,event,addr,ip,sym,dso"];
    let (ok_a, script_a, err_a) = perf(&fields, original);
    let (ok_b, script_b, err_b) = perf(&fields, &back);
    assert!(ok_a && ok_b, "{err_a}\n{err_b}");
    assert_eq!(script_b, script_a);
    assert!(
        script_a
            .lines()
            .any(|l| l.contains(" _dl_start (") || l.contains(" dl_main (")),
        "some user-space symbol resolves: {script_a}"
    );
    assert!(
        script_b
            .lines()
            .any(|l| l.contains(" ffffffff8") && !l.contains("[unknown] ([kernel.kallsyms])")),
        "some kernel address resolves: {script_b}"
    );
    // ... because the file names the binaries' build ids, as the recording does.
    let (ok_a, ids_a, _) = perf(&["buildid-list"], original);
    let (ok_b, ids_b, err_b) = perf(&["buildid-list"], &back);
    assert!(ok_a && ok_b, "{err_b}");
    assert!(ids_a.contains(FIXTURE_KERNEL_BUILD_ID), "{ids_a}");
    // the same ids; their order in the table means nothing to perf
    let sorted = |s: &str| {
        let mut v: Vec<&str> = s.lines().collect();
        v.sort_unstable();
        v.join("\n")
    };
    assert_eq!(sorted(&ids_b), sorted(&ids_a));
    for c in ["sh", "ls", "cat"] {
        assert!(
            script_b
                .lines()
                .any(|l| l.split_whitespace().next() == Some(c)),
            "{c}: {script_b}"
        );
    }
    // The same report: overheads weigh samples by their periods, which the file keeps.
    let report = ["report", "--stdio", "--sort", "comm,pid,dso,sym"];
    let rows = |s: &str| -> Vec<String> {
        s.lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(str::to_string)
            .collect()
    };
    let (ok_a, rep_a, _) = perf(&report, original);
    let (ok_b, rep_b, err_b) = perf(&report, &back);
    assert!(ok_a && ok_b, "{err_b}");
    assert_eq!(rows(&rep_b), rows(&rep_a));
    assert!(!rows(&rep_b).is_empty());
    assert!(
        !err_b.contains("Warning") && !err_b.contains("WARNING"),
        "perf warns about the written file: {err_b}"
    );
    // No CPU invented: perf finds none in either file.
    let (ok, _, err) = perf(&["script", "-F", "cpu"], &back);
    assert!(!ok && err.contains("CPU attribute"), "{err}");

    // The analysis: page faults are not DRAM accesses, and no sample has a CPU node.
    for file in [FIXTURE, arrows.to_str().unwrap(), back.to_str().unwrap()] {
        let json: serde_json::Value =
            serde_json::from_str(&numalab(&["analyze", file, "--json", "-"])).unwrap();
        let s = &json["samples"];
        assert_eq!(s["not_accesses"], s["total"], "{file}: {s}");
        assert_eq!(s["dram"], 0, "{file}: {s}");
        assert_eq!(s["with_cpu_node"], 0, "{file}: {s}");
        assert_eq!(json["lar_percent"], serde_json::Value::Null, "{file}");
    }
    std::fs::remove_dir_all(arrows.parent().unwrap()).ok();
}
