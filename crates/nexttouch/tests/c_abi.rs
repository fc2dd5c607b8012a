//! The C ABI and LD_PRELOAD mode, from C programs compiled here with the system `cc` and run
//! against the cdylib cargo built next to this test binary. (Not a vm_* test: the VM has no cc.)

use std::path::{Path, PathBuf};
use std::process::Command;

/// The directory holding libnumalab_nexttouch.so (cargo puts the cdylib beside the test binary).
fn lib_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap().to_path_buf();
    for d in [deps.clone(), deps.parent().unwrap().to_path_buf()] {
        if d.join("libnumalab_nexttouch.so").exists() {
            return d;
        }
    }
    panic!("libnumalab_nexttouch.so not found beside {}", exe.display());
}

fn have_cc() -> bool {
    Command::new("cc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Compile tests/c/`src` into the test's tmp dir as `name` (one name per test: tests run in
/// parallel); `link` links the library.
fn compile(src: &str, name: &str, link: bool) -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    let out = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let lib = lib_dir();
    let mut cmd = Command::new("cc");
    cmd.args(["-O2", "-Wall", "-Werror", "-o"])
        .arg(&out)
        .arg(here.join("tests/c").join(src));
    cmd.arg("-I").arg(here.join("include"));
    if link {
        cmd.arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lnumalab_nexttouch");
    }
    cmd.args(["-pthread", "-ldl"]);
    let o = cmd.output().unwrap();
    assert!(
        o.status.success(),
        "cc {src}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn c_program_marks_touches_and_checks_errors() {
    if !have_cc() {
        eprintln!("skipped: no cc on this machine");
        return;
    }
    let exe = compile("nt_test.c", "nt_test", true);
    let o = Command::new(&exe).output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{:?}\n{out}\n{err}", o.status);
    assert!(out.contains("nt_test ok"), "{out}");
}

/// Run nt_preload under LD_PRELOAD with `envs`; returns the counters it printed.
fn preload_run(
    name: &str,
    sig: i32,
    envs: &[(&str, &str)],
) -> std::collections::HashMap<String, u64> {
    let exe = compile("nt_preload.c", name, false);
    let mut cmd = Command::new(&exe);
    cmd.arg(sig.to_string())
        .env("LD_PRELOAD", lib_dir().join("libnumalab_nexttouch.so"))
        .env("NUMALAB_NEXT_TOUCH", "1");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let o = cmd.output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{:?}\n{out}\n{err}", o.status);
    eprintln!("{name}: {out}{err}");
    out.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.parse().unwrap()))
        .collect()
}

#[test]
fn preload_page_granularity_on_sigusr2() {
    if !have_cc() {
        eprintln!("skipped: no cc on this machine");
        return;
    }
    let s = preload_run(
        "nt_preload_page",
        libc::SIGUSR2,
        &[("NUMALAB_NEXT_TOUCH_VERBOSE", "1")],
    );
    assert_eq!(s["bad"], 0);
    assert_eq!(s["phases"], 1);
    assert!(s["live_areas"] >= 1, "{s:?}");
    // Every page of the program's buffer was marked and touched once (plus heap pages).
    assert!(s["touches"] >= s["pages"], "{s:?}");
    assert!(s["pages_moved"] >= s["pages"], "{s:?}");
}

#[test]
fn preload_area_granularity_on_configured_signal() {
    if !have_cc() {
        eprintln!("skipped: no cc on this machine");
        return;
    }
    let s = preload_run(
        "nt_preload_area",
        libc::SIGUSR1,
        &[
            ("NUMALAB_NEXT_TOUCH_SIGNAL", "10"),
            ("NUMALAB_NEXT_TOUCH_GRANULARITY", "area"),
        ],
    );
    assert_eq!(s["bad"], 0);
    assert_eq!(s["phases"], 1);
    // The buffer's area moved whole on its first touch: far fewer touches than pages.
    assert!(s["pages_moved"] >= s["pages"], "{s:?}");
    assert!(s["touches"] < s["pages"], "{s:?}");
}
