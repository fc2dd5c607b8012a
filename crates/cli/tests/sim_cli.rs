//! `numalab sim` from the command line: samples are never dropped silently.

use std::process::Command;

#[test]
fn a_reached_sample_cap_is_reported_in_the_table_the_file_and_the_analysis() {
    let dir = std::env::temp_dir().join(format!("numalab-sim-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("s.arrows");
    let exe = env!("CARGO_BIN_EXE_numalab");
    // one sample per reference: ~2.1 M samples against the 1 M the simulator keeps
    let out = Command::new(exe)
        .args([
            "sim",
            "-q",
            "-m",
            "xeon-x5650-2n",
            "-w",
            "ptrchase:bytes=64M,steps=20000",
            "--sample-period",
            "1",
            "--samples-out",
        ])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = String::from_utf8_lossy(&out.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("samples kept / taken"))
        .expect("the table has a samples row");
    assert!(row.contains("1000000/") && row.contains("(cap)"), "{row}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("more were taken but not kept"), "{err}");
    let out = Command::new(exe)
        .arg("analyze")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success());
    let report = String::from_utf8_lossy(&out.stdout);
    assert!(report.contains("taken but are not in the file"), "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
