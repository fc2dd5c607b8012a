//! `numalab record` on the 5-node VM (docs/testing.md): a child binds a region to node 2,
//! pins itself to one CPU and touches every page, recorded with the page-fault event (the VM's
//! emulated CPU has no PEBS or IBS). Every sample of the region must say page node 2 and the
//! CPU's node, and the analysis must find the locality this implies: all remote from node 0,
//! all local from node 2.

mod common;

use common::*;
use numalab_analyze::{Record, SampleReader, SampleSource};
use numalab_record::{record, EventChoice, Mechanism, RecordOptions, Target};

/// The child's entry point, run by the recorded re-execution only.
#[test]
#[ignore = "the recorded child process (runs only with NUMALAB_RECORD_CHILD set)"]
fn child_entry() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child_main(&spec);
    }
}

/// The first CPU of `node`, from sysfs.
fn cpu_of(node: u16) -> Option<u32> {
    let t = numalab_linux::node::read_node_tree(&numalab_linux::SysRoot::host()).ok()?;
    t.node(numalab_core::NodeId(node))?
        .cpus
        .first()
        .map(|c| c.0)
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_page_fault_samples_know_node_2_and_the_locality() {
    let pages = 2000u64;
    for (cpu_node, local) in [(0u16, false), (2u16, true)] {
        let Some(cpu) = cpu_of(cpu_node) else {
            eprintln!("SKIPPED: node {cpu_node} has no CPU here (not the 5-node VM?)");
            return;
        };
        let dir = scratch(&format!("vm-{cpu_node}"));
        let info = dir.join("regions");
        let out = dir.join("vm.arrows");
        let mut opts = RecordOptions::new(Target::Command(child_argv()), &out);
        opts.event = EventChoice::Only(Mechanism::PageFaults);
        opts.env = vec![(
            CHILD_ENV.into(),
            format!("pages={pages},bind=2,cpu={cpu},info={}", info.display()).into(),
        )];
        let s = record(&opts, &mut |e| {
            if let numalab_record::Event::Message(m) = e {
                println!("{m}");
            }
        })
        .expect("recording on the VM");
        assert_eq!(s.exit_code, Some(0));
        assert_eq!(s.lost, 0);
        let r = read_regions(&info)[0];
        let mut src = SampleReader::open(&out).unwrap();
        assert_eq!(src.meta().nodes, 5, "the VM's nodes, from sysfs");
        let mut recs: Vec<Record> = Vec::new();
        while let Some(b) = src.next_batch().unwrap() {
            recs.extend(b.records);
        }
        let inside: Vec<&Record> = recs.iter().filter(|x| r.contains(x.sample.addr)).collect();
        let mut distinct: Vec<u64> = inside.iter().map(|x| x.sample.addr >> 12).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(
            distinct.len() as u64,
            pages,
            "every page sampled once at least"
        );
        for x in &inside {
            assert_eq!(
                x.page_node().map(|n| n.0),
                Some(2),
                "mbind put it on node 2"
            );
            assert_eq!(
                x.cpu_node().map(|n| n.0),
                Some(cpu_node),
                "pinned to CPU {cpu}"
            );
            assert_eq!(x.sample.thread.0, r.tid);
        }
        // The analysis: overall LAR as the samples imply, and the region's mapping all
        // remote (from node 0) or all local (from node 2).
        let mut src = SampleReader::open(&out).unwrap();
        let rep = numalab_analyze::analyze(&mut src, &numalab_analyze::Options::default()).unwrap();
        let both: Vec<&Record> = recs
            .iter()
            .filter(|x| x.page_node().is_some() && x.cpu_node().is_some())
            .collect();
        let local_n = both
            .iter()
            .filter(|x| x.page_node() == x.cpu_node())
            .count();
        let lar = rep.lar_percent.expect("LAR known");
        assert!((lar - 100.0 * local_n as f64 / both.len() as f64).abs() < 1e-9);
        println!(
            "CPU node {cpu_node}: {} samples, {} in the region, LAR {lar:.1} %",
            recs.len(),
            inside.len()
        );
        // The region is most of the samples; the rest (binary, libc, stack) may sit anywhere.
        if local {
            assert!(lar > 80.0, "LAR {lar}");
        } else {
            assert!(lar < 20.0, "LAR {lar}");
        }
        let m = rep
            .mappings
            .iter()
            .find(|m| m.start <= r.start && m.start + m.len_bytes >= r.end)
            .expect("the region's mapping in the report");
        let n = inside.len() as u64;
        if local {
            assert_eq!((m.dram_local, m.dram_remote), (n, 0));
        } else {
            assert_eq!((m.dram_local, m.dram_remote), (0, n));
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_auto_picks_page_faults_on_the_emulated_cpu() {
    // TCG emulates no PEBS or IBS: auto must fall back and say why for both.
    let dir = scratch("vm-auto");
    let info = dir.join("regions");
    let out = dir.join("auto.arrows");
    let mut opts = RecordOptions::new(Target::Command(child_argv()), &out);
    opts.env = vec![(
        CHILD_ENV.into(),
        format!("pages=64,info={}", info.display()).into(),
    )];
    let s = record(&opts, &mut |_| {}).expect("recording");
    println!("mechanism {:?}, not used: {:?}", s.mechanism, s.unavailable);
    if std::path::Path::new("/sys/bus/event_source/devices/cpu/events/mem-loads").exists() {
        eprintln!("SKIPPED: this VM exposes PEBS");
        return;
    }
    assert_eq!(s.mechanism, Mechanism::PageFaults);
    assert!(s.unavailable.iter().any(|u| u.starts_with("pebs: ")));
    assert!(s.unavailable.iter().any(|u| u.starts_with("ibs: ")));
    assert!(s.samples_with_page_node > 0);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_cli_record_then_analyze() {
    let Some(bin) = std::env::var_os("NUMALAB_BIN") else {
        eprintln!("SKIPPED: NUMALAB_BIN is not set (the VM sets it)");
        return;
    };
    let dir = scratch("vm-cli");
    let info = dir.join("regions");
    let out = dir.join("cli.arrows");
    let argv = child_argv();
    let r = std::process::Command::new(&bin)
        .args(["record", "-q", "--event", "page-faults", "-o"])
        .arg(&out)
        .arg("--")
        .args(&argv)
        .env(
            CHILD_ENV,
            format!("pages=500,bind=1,info={}", info.display()),
        )
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&r.stderr);
    assert!(r.status.success(), "{err}");
    assert!(err.contains("mechanism: page-faults"), "{err}");
    assert!(err.contains("recorded "), "{err}");
    assert!(out.exists());
    let a = std::process::Command::new(&bin)
        .arg("analyze")
        .arg(&out)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&a.stdout);
    assert!(a.status.success(), "{}", String::from_utf8_lossy(&a.stderr));
    assert!(text.contains("LAR"), "{text}");
    // Errors: exit status 2, a message, no file.
    let bad = dir.join("bad.arrows");
    let pid = std::process::Command::new(&bin)
        .args(["record", "--pid", "999999", "-o"])
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(pid.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&pid.stderr).contains("does not exist"));
    let pebs = std::process::Command::new(&bin)
        .args(["record", "--event", "pebs", "-o"])
        .arg(&bad)
        .arg("--")
        .args(&argv)
        .output()
        .unwrap();
    assert_eq!(pebs.status.code(), Some(2));
    let msg = String::from_utf8_lossy(&pebs.stderr);
    if !std::path::Path::new("/sys/bus/event_source/devices/cpu/events/mem-loads").exists() {
        assert!(msg.contains("--event pebs: not available"), "{msg}");
    }
    assert!(!bad.exists());
    let r = std::process::Command::new(&bin)
        .args(["record", "-o"])
        .arg(&bad)
        .args(["--", "numalab-no-such-command"])
        .output()
        .unwrap();
    assert_eq!(r.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&r.stderr).contains("command not found"));
    assert!(!bad.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
