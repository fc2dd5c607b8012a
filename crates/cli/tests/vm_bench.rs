//! `numalab bench migrate` inside the multi-node VM: it must run, move what it says, and show
//! the per-call cost of move_pages (single-page calls cost more per page than big batches).
//! The table goes to the console unbuffered so the harness log keeps the ratios for
//! docs/PERFORMANCE.md.

use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::process::Command;

fn numalab() -> PathBuf {
    std::env::var_os("NUMALAB_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_numalab")))
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn bench_migrate_reports_batches_and_tools() {
    let json = "/tmp/numalab-bench-migrate.json";
    let out = Command::new(numalab())
        .args([
            "bench", "migrate", "--from", "0", "--to", "2", "--size", "16M", "--repeat", "2",
        ])
        .args(["--batches", "1,16,256,4096", "--json", json])
        .output()
        .unwrap();
    // Not eprintln!: libtest captures the print macros, not direct writes.
    let mut err = std::io::stderr().lock();
    writeln!(
        err,
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
    .unwrap();
    assert!(out.status.success());
    let r: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    let b = r["batches"].as_array().unwrap();
    assert_eq!(b.len(), 4);
    let cost = |i: usize| b[i]["relative_cost"].as_f64().unwrap();
    assert!(
        (cost(3) - 1.0).abs() < 1e-9,
        "the largest batch is the reference"
    );
    assert!(
        cost(0) > 1.0,
        "one page per call must cost more per page than 4096: {}",
        cost(0)
    );
    let tools = r["tools"].as_array().unwrap();
    assert_eq!(
        tools.len(),
        3,
        "migratepages, numalab migrate --whole-process and move_pages"
    );
    for t in tools {
        let moved = t["pages_moved"].as_u64().unwrap();
        assert!(moved >= 4096 * 9 / 10, "{t}");
    }
    assert!(tools[0]["tool"].as_str().unwrap().contains("migratepages"));
}
