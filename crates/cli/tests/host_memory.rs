//! A simulation whose simulated memory fits the machine but whose host-side data does not fit
//! the host is refused with an error naming the size, not aborted by the allocator (issue 20:
//! "turn host allocation failures into errors naming the size"). The host's memory is cut
//! with the shell's `ulimit -v` (RLIMIT_AS), so the test needs no small machine.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// `numalab sim` under an address-space limit of `limit_kib`; killed after a minute (a run
/// that got its memory after all would go on for hours).
fn sim_limited(limit_kib: u64, workload: &str) -> (Option<i32>, String) {
    let script = format!(
        "ulimit -v {limit_kib} && exec \"$0\" sim -m xeon-gold6130-4n -w {workload} -q --jobs 1"
    );
    let mut child = Command::new("sh")
        .args(["-c", &script, env!("CARGO_BIN_EXE_numalab")])
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > Duration::from_secs(60) {
            child.kill().ok();
            panic!("`sim -w {workload}` under ulimit -v {limit_kib} still runs after a minute");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn assert_refused(code: Option<i32>, stderr: &str, what: &str, size: &str) {
    assert_eq!(
        code,
        Some(2),
        "exit status {code:?}, not an error:\n{stderr}"
    );
    assert!(
        !stderr.contains("panicked") && !stderr.contains("backtrace"),
        "{stderr}"
    );
    assert!(
        stderr.contains(&format!("the host cannot allocate {size} GiB for {what}")),
        "{stderr}"
    );
}

#[test]
fn a_pointer_chase_order_beyond_the_host_is_an_error_naming_its_size() {
    // 256 GiB fit the preset's 768 GiB; the chase's visiting order needs 4 bytes a line on
    // the host, 16 GiB, beyond a 1.5 GB address space (the page table's 256 MiB fit)
    let (code, stderr) = sim_limited(1_500_000, "ptrchase:bytes=256G,steps=1000");
    assert_refused(code, &stderr, "the pointer chase's visiting order", "16.0");
}

#[test]
fn a_page_table_beyond_the_host_is_an_error_naming_the_mapping() {
    // three 240 GB arrays fit the preset; their host page table (4 bytes a 4 KiB page,
    // 0.2 GiB an array) does not fit a 400 MB address space
    let (code, stderr) = sim_limited(400_000, "stream:n=30000000000");
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("the host cannot allocate")
            && stderr.contains("for the page table of mapping 'stream."),
        "{stderr}"
    );
}
