//! Records the VM kernel's NUMA files (tests/data/record.sh, run by busybox sh) as fixtures
//! for the readers' tests: real multi-node trees with a CPU-less node, HMAT attributes and
//! memory tiers. The tree is printed on the console as base64 between markers;
//! tests/data/extract-vm-record.sh turns a harness log back into a fixture directory.
//! It also checks that the recording is complete, so a broken recorder fails here.

use std::io::Write;
use std::process::Command;

const RECORD_SH: &str = include_str!("data/record.sh");

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn record_numa_files_for_fixtures() {
    let dir = "/tmp/numalab-record";
    let _ = std::fs::remove_dir_all(dir);
    std::fs::write("/tmp/record.sh", RECORD_SH).unwrap();
    // Interleaved memory of this process, so numa_maps shows pages on every node.
    let len = 64 * 4096;
    // SAFETY: anonymous private mapping; set_mempolicy only affects later faults of this thread.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    assert_ne!(p, libc::MAP_FAILED);
    numalab_linux::mbind(
        p as usize,
        len,
        &numalab_core::MemPolicy::Interleave {
            nodes: numalab_core::NodeMask::first_n(4),
        },
        numalab_linux::ModeFlags::empty(),
        numalab_linux::MbindFlags::empty(),
    )
    .unwrap();
    // SAFETY: writing within the mapping.
    unsafe { std::ptr::write_bytes(p as *mut u8, 1, len) };
    let out = Command::new("sh")
        .args(["/tmp/record.sh", dir])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // record.sh took /proc/self of its own shell; this process's maps carry the interleave.
    for name in ["numa_maps", "smaps"] {
        std::fs::copy(
            format!("/proc/self/{name}"),
            format!("{dir}/proc/self/{name}"),
        )
        .unwrap();
    }
    for must in [
        "sys/devices/system/node/online",
        "sys/devices/system/node/node4/distance",
        "sys/devices/system/node/node3/cpulist",
        "proc/vmstat",
    ] {
        assert!(
            std::path::Path::new(dir).join(must).exists(),
            "{must} was not recorded"
        );
    }
    let numa_maps = std::fs::read_to_string(format!("{dir}/proc/self/numa_maps")).unwrap();
    assert!(numa_maps.contains("interleave:0-3"), "{numa_maps}");
    let tar = Command::new("sh")
        .args(["-c", &format!("cd {dir} && tar cf - . | gzip -9 | base64")])
        .output()
        .unwrap();
    assert!(tar.status.success());
    let release = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap();
    // Direct writes: libtest captures only the print macros.
    let mut err = std::io::stderr().lock();
    writeln!(err, "VMREC-BEGIN release={}", release.trim()).unwrap();
    err.write_all(&tar.stdout).unwrap();
    writeln!(err, "VMREC-END").unwrap();
}
