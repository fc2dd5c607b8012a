//! numastat's tables from a small recorded-style tree (two nodes, one process). The byte-for-
//! byte comparison with numactl's numastat itself runs in the VM
//! (crates/cli/tests/vm_numastat.rs); these pin the readings and units on any host.

use numalab_linux::numastat::{numastat, Options, Target};
use numalab_linux::SysRoot;
use std::path::{Path, PathBuf};

fn write(root: &Path, rel: &str, text: &str) {
    let p = root.join(rel);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

/// Two nodes (0 and 1), and process 4242 ("hog") with memory on both.
fn tree(name: &str) -> PathBuf {
    let root = std::env::temp_dir().join(format!("numastat-{name}-{}", std::process::id()));
    std::fs::remove_dir_all(&root).ok();
    let node = "sys/devices/system/node";
    write(&root, &format!("{node}/online"), "0-1\n");
    write(
        &root,
        &format!("{node}/node0/numastat"),
        "numa_hit 262144\nnuma_miss 0\nnuma_foreign 0\ninterleave_hit 256\nlocal_node 262144\nother_node 0\n",
    );
    write(
        &root,
        &format!("{node}/node1/numastat"),
        "numa_hit 131072\nnuma_miss 512\nnuma_foreign 0\ninterleave_hit 256\nlocal_node 130560\nother_node 1024\n",
    );
    for n in 0..2 {
        write(
            &root,
            &format!("{node}/node{n}/meminfo"),
            &format!(
                "Node {n} MemTotal:        2097152 kB\nNode {n} MemFree:         1048576 kB\nNode {n} MemUsed:         1048576 kB\nNode {n} SwapCached:            0 kB\nNode {n} HugePages_Total:     {}\n",
                4 * n
            ),
        );
    }
    write(
        &root,
        "proc/meminfo",
        "MemTotal: 4194304 kB\nHugepagesize:       2048 kB\n",
    );
    write(&root, "proc/4242/status", "Name:\thog\nUmask:\t0022\n");
    write(&root, "proc/4242/cmdline", "hog\0--size\x0064M\0");
    write(
        &root,
        "proc/4242/numa_maps",
        "55d0 default file=/usr/bin/hog mapped=16 N0=16 kernelpagesize_kB=4\n\
         55e0 default heap anon=256 dirty=256 N1=256 kernelpagesize_kB=4\n\
         7f00 interleave:0-1 anon=16384 dirty=16384 N0=8192 N1=8192 kernelpagesize_kB=4\n\
         7f80 default file=/anon_hugepage\\040(deleted) huge dirty=2 N1=2 kernelpagesize_kB=2048\n\
         7ffd default stack anon=8 dirty=8 N0=8 kernelpagesize_kB=4\n",
    );
    root
}

fn opts() -> Options {
    Options {
        screen_width: 10_000_000,
        own_pid: 1,
        page_size: 4096,
        ..Default::default()
    }
}

#[test]
fn without_options_the_counters_come_in_pages_as_the_perl_numastat_printed_them() {
    let root = tree("compat");
    let out = numastat(
        &SysRoot::new(&root),
        &Options {
            compatible: true,
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(
        out.stdout,
        "                           node0           node1\n\
         numa_hit                  262144          131072\n\
         numa_miss                      0             512\n\
         numa_foreign                   0               0\n\
         interleave_hit               256             256\n\
         local_node                262144          130560\n\
         other_node                     0            1024\n"
    );
    std::fs::remove_dir_all(root).ok();
}

#[test]
fn n_gives_megabytes_and_m_the_meminfo_rows_numastat_knows() {
    let root = tree("nm");
    let out = numastat(
        &SysRoot::new(&root),
        &Options {
            numastat: true,
            meminfo: true,
            skip_zeros: true,
            ..opts()
        },
    )
    .unwrap();
    // numa_hit: 262144 pages of 4 KiB = 1024 MB on node 0, 512 MB on node 1.
    assert!(
        out.stdout
            .contains("Numa_Hit                 1024.00          512.00         1536.00\n"),
        "{}",
        out.stdout
    );
    // -z: the all-zero Numa_Foreign row goes; a field numastat does not know is reported.
    assert!(!out.stdout.contains("Numa_Foreign"), "{}", out.stdout);
    assert_eq!(
        out.stdout
            .matches("Token SwapCached not in hash table.")
            .count(),
        2
    );
    // HugePages_Total counts 2 MiB pages: 4 on node 1 = 8 MB.
    assert!(
        out.stdout
            .contains("HugePages_Total             0.00            8.00            8.00\n"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("MemTotal                 2048.00         2048.00         4096.00\n"),
        "{}",
        out.stdout
    );
    std::fs::remove_dir_all(root).ok();
}

#[test]
fn a_process_table_splits_huge_heap_stack_and_private_memory_by_node() {
    let root = tree("proc");
    let out = numastat(
        &SysRoot::new(&root),
        &Options {
            targets: vec![Target::Pid(4242)],
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(
        out.stdout,
        "\nPer-node process memory usage (in MBs) for PID 4242 (hog)\n\
         \x20                          Node 0          Node 1           Total\n\
         \x20                 --------------- --------------- ---------------\n\
         Huge                         0.00            4.00            4.00\n\
         Heap                         0.00            1.00            1.00\n\
         Stack                        0.03            0.00            0.03\n\
         Private                     32.06           32.00           64.06\n\
         ----------------  --------------- --------------- ---------------\n\
         Total                       32.09           37.00           69.09\n"
    );
    assert!(out.stderr.is_empty() && !out.unreadable_pid);
    // A pattern finds it by name or command line, never the process running numastat.
    let by_pattern = numastat(
        &SysRoot::new(&root),
        &Options {
            targets: vec![Target::Pattern("--size".into())],
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(by_pattern.stdout, out.stdout);
    let itself = numastat(
        &SysRoot::new(&root),
        &Options {
            targets: vec![Target::Pattern("hog".into())],
            own_pid: 4242,
            ..opts()
        },
    )
    .unwrap();
    assert!(
        itself
            .stdout
            .starts_with("Found no processes containing pattern: \"hog\"\n"),
        "{}",
        itself.stdout
    );
    // A process that is gone: numastat's perror line, and the mark numalab exits 1 on.
    let gone = numastat(
        &SysRoot::new(&root),
        &Options {
            targets: vec![Target::Pid(99)],
            ..opts()
        },
    )
    .unwrap();
    assert_eq!(
        gone.stderr,
        "Can't read /proc/99/numa_maps: No such file or directory\n"
    );
    assert!(
        gone.stdout.contains("for PID 99 ((null))"),
        "{}",
        gone.stdout
    );
    assert!(gone.unreadable_pid);
    std::fs::remove_dir_all(root).ok();
}

#[test]
fn a_tree_without_node_directories_is_an_error_that_says_so() {
    let root = std::env::temp_dir().join(format!("numastat-none-{}", std::process::id()));
    std::fs::create_dir_all(root.join("sys/devices/system/node")).unwrap();
    let e = numastat(&SysRoot::new(&root), &opts())
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("no node<N> directories") && e.contains("CONFIG_NUMA"),
        "{e}"
    );
    std::fs::remove_dir_all(root).ok();
}
