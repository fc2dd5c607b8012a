//! `numalab record` on the host: a child (this binary again, see tests/common) touches known
//! pages while it is recorded with the page-fault event, which every Linux has; the samples
//! must name exactly those pages, the right threads and process, and come back through
//! numalab-analyze's reader and analysis. Then the failures: nothing may be written.
//!
//! Where perf_event_open is refused by permissions (perf_event_paranoid, no CAP_PERFMON), the
//! tests that sample print why and return; every other failure fails.

mod common;

use common::*;
use numalab_analyze::format::placement_path_for;
use numalab_analyze::{PlacementReader, Record, SampleReader, SampleSource};
use numalab_record::{record, EventChoice, Mechanism, RecordOptions, RecordSummary, Target};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The child's entry point: ignored in normal runs, run by the recorded re-execution.
#[test]
#[ignore = "the recorded child process (runs only with NUMALAB_RECORD_CHILD set)"]
fn child_entry() {
    if let Ok(spec) = std::env::var(CHILD_ENV) {
        child_main(&spec);
    }
}

/// False (after saying why) when this user may not sample its own processes.
fn may_sample() -> bool {
    match numalab_record::probe_page_faults() {
        Ok(()) => true,
        Err(e) if e.is_permission() => {
            eprintln!("SKIPPED: perf_event_open refused by permissions: {e}");
            false
        }
        Err(e) => panic!("page-fault event unavailable for another reason: {e}"),
    }
}

fn read_all(path: &Path) -> Vec<Record> {
    let mut r = SampleReader::open(path).expect("readable by SampleReader");
    let mut out = Vec::new();
    while let Some(b) = r.next_batch().unwrap() {
        out.extend(b.records);
    }
    out
}

fn record_child(name: &str, spec: &str) -> (RecordSummary, Vec<Region>, std::path::PathBuf) {
    let dir = scratch(name);
    let info = dir.join("regions");
    let out = dir.join("run.arrows");
    let mut opts = RecordOptions::new(Target::Command(child_argv()), &out);
    opts.event = EventChoice::Only(Mechanism::PageFaults);
    opts.env = vec![(
        CHILD_ENV.into(),
        format!("{spec},info={}", info.display()).into(),
    )];
    let mut messages = Vec::new();
    let s = record(&opts, &mut |e| {
        if let numalab_record::Event::Message(m) = e {
            messages.push(m)
        }
    })
    .expect("recording succeeds");
    assert!(
        messages[0].starts_with("mechanism: page-faults"),
        "{messages:?}"
    );
    assert_eq!(s.exit_code, Some(0), "the child ran to completion");
    let regions = read_regions(&info);
    assert!(!regions.is_empty(), "the child wrote its regions");
    (s, regions, out)
}

#[test]
fn page_faults_of_a_child_name_its_pages() {
    if !may_sample() {
        return;
    }
    let pages = 300u64;
    let (s, regions, out) = record_child("one", &format!("pages={pages}"));
    assert_eq!(s.mechanism, Mechanism::PageFaults);
    assert_eq!(s.lost, 0);
    let recs = read_all(&out);
    assert_eq!(recs.len() as u64, s.samples);
    let r = regions[0];
    let inside: Vec<&Record> = recs.iter().filter(|x| r.contains(x.sample.addr)).collect();
    // Period 1: one write fault per 4 KiB page, each page once.
    let mut distinct: Vec<u64> = inside.iter().map(|x| x.sample.addr >> 12).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(
        distinct.len() as u64,
        pages,
        "every touched page was sampled"
    );
    assert!(
        inside.len() as u64 >= pages && inside.len() as u64 <= pages + pages / 10,
        "{} samples for {pages} pages",
        inside.len()
    );
    for x in &inside {
        assert_eq!(x.sample.thread.0, r.tid, "sample of the touching thread");
        assert_eq!(
            x.sample.task.0 as i32, s.pid,
            "samples of the command's process"
        );
        assert!(x.cpu_node().is_some(), "CPU → node from sysfs");
        // The child stops at exit with its memory mapped: every page's node is known.
        assert!(
            x.page_node().is_some(),
            "page node filled from the snapshots"
        );
        assert_eq!(x.event, 0);
        assert!(x.source().is_none(), "page faults have no data source");
    }
    // Samples are in time order per ring and timestamps are CLOCK_MONOTONIC.
    assert!(inside
        .windows(2)
        .all(|w| w[0].sample.time_ns <= w[1].sample.time_ns));
    // The placement stream knows the region's pages.
    let placement = PlacementReader::open(placement_path_for(&out)).unwrap();
    let known: u64 = placement
        .entries()
        .filter(|e| e.start >= r.start && e.end() <= r.end)
        .map(|e| e.pages as u64)
        .sum();
    assert!(
        known >= pages,
        "placement covers the region ({known} pages)"
    );
    // Metadata: the events, the origin, the mappings (the region is an anonymous mapping).
    let reader = SampleReader::open(&out).unwrap();
    let meta = reader.meta();
    assert_eq!(meta.events, vec!["page-faults".to_string()]);
    assert_eq!(meta.origin, "numalab-record");
    assert_eq!(meta.sample_period, 1);
    assert!(
        meta.mappings
            .iter()
            .any(|m| m.start <= r.start && m.start + m.len_bytes >= r.end),
        "a mapping covers the region"
    );
    // Build ids: the child's executable (this test binary, run again) with the id its ELF note
    // holds, as perf's HEADER_BUILD_ID lists it when the file is exported to perf.data.
    let exe = std::fs::canonicalize(std::env::current_exe().unwrap()).unwrap();
    let id = numalab_record::build_id::of_elf_file(&exe).expect("the test binary has a build id");
    let hex: String = id.iter().map(|b| format!("{b:02x}")).collect();
    assert!(
        meta.build_ids
            .iter()
            .any(|b| Path::new(&b.path) == exe && b.id_hex == hex && !b.kernel),
        "{} {hex} among {:?}",
        exe.display(),
        meta.build_ids
    );
}

#[test]
fn threads_get_their_own_tids_and_analyze_reads_the_file() {
    if !may_sample() {
        return;
    }
    let pages = 128u64;
    let (s, regions, out) = record_child("threads", &format!("pages={pages},threads=3"));
    assert_eq!(regions.len(), 3);
    let tids: std::collections::HashSet<u32> = regions.iter().map(|r| r.tid).collect();
    assert_eq!(tids.len(), 3, "three distinct threads");
    assert!(s.threads >= 3);
    let recs = read_all(&out);
    let pid = s.pid as u32;
    for r in &regions {
        let inside: Vec<&Record> = recs.iter().filter(|x| r.contains(x.sample.addr)).collect();
        let mut distinct: Vec<u64> = inside.iter().map(|x| x.sample.addr >> 12).collect();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len() as u64, pages);
        // Threads created after the start are sampled through `inherit`.
        assert!(inside.iter().all(|x| x.sample.thread.0 == r.tid));
        assert!(inside.iter().all(|x| x.sample.task.0 == pid));
    }
    // The analysis reads it: every sample counted, LAR from the page and CPU nodes.
    let mut src = SampleReader::open(&out).unwrap();
    let report = numalab_analyze::analyze(&mut src, &numalab_analyze::Options::default()).unwrap();
    assert_eq!(report.samples.total, recs.len() as u64);
    assert_eq!(report.samples.with_page_node, s.samples_with_page_node);
    let both: Vec<&Record> = recs
        .iter()
        .filter(|x| x.page_node().is_some() && x.cpu_node().is_some())
        .collect();
    let local = both
        .iter()
        .filter(|x| x.page_node() == x.cpu_node())
        .count();
    let lar = report.lar_percent.expect("LAR with page nodes known");
    assert!((lar - 100.0 * local as f64 / both.len() as f64).abs() < 1e-9);
}

#[test]
fn running_process_by_pid() {
    if !may_sample() {
        return;
    }
    let dir = scratch("pid");
    let info = dir.join("regions");
    let go = dir.join("go");
    let pages = 200u64;
    let mut child = std::process::Command::new(&child_argv()[0])
        .args(&child_argv()[1..])
        .env(
            CHILD_ENV,
            format!(
                "pages={pages},info={},go={},hold_ms=30000",
                info.display(),
                go.display()
            ),
        )
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = dir.join("pid.arrows");
    let stop = Arc::new(AtomicBool::new(false));
    let mut opts = RecordOptions::new(Target::Pid(child.id() as i32), &out);
    opts.event = EventChoice::Only(Mechanism::PageFaults);
    opts.duration = Some(Duration::from_secs(60));
    opts.stop = Some(stop.clone());
    // The events are open once progress is reported: then let the child touch, and stop
    // once it says it is done (it stays alive, so the last snapshot sees its pages).
    let (go2, info2, stop2) = (go.clone(), info.clone(), stop.clone());
    let s = record(&opts, &mut move |e| {
        if let numalab_record::Event::Progress(_) = e {
            if !go2.exists() {
                std::fs::write(&go2, b"go").unwrap();
            } else if info2.exists() {
                stop2.store(true, Ordering::Relaxed);
            }
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    let s = s.expect("recording by pid");
    assert_eq!(s.exit_code, None);
    let r = read_regions(&info)[0];
    let recs = read_all(&out);
    let inside: Vec<&Record> = recs.iter().filter(|x| r.contains(x.sample.addr)).collect();
    let mut distinct: Vec<u64> = inside.iter().map(|x| x.sample.addr >> 12).collect();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len() as u64, pages);
    assert!(inside.iter().all(|x| x.sample.task.0 == child.id()));
    assert!(inside.iter().all(|x| x.page_node().is_some()));
}

#[test]
fn missing_command_writes_nothing() {
    let dir = scratch("missing");
    let out = dir.join("x.arrows");
    let opts = RecordOptions::new(
        Target::Command(vec!["numalab-no-such-command-xyz".into()]),
        &out,
    );
    let e = record(&opts, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("command not found"), "{e}");
    let opts = RecordOptions::new(Target::Command(vec!["/nonexistent/prog".into()]), &out);
    assert!(record(&opts, &mut |_| {}).is_err());
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn non_executable_command_writes_nothing() {
    let dir = scratch("noexec");
    let prog = dir.join("not-a-program");
    std::fs::write(&prog, b"data").unwrap();
    let out = dir.join("x.arrows");
    let opts = RecordOptions::new(Target::Command(vec![prog.clone().into()]), &out);
    let e = record(&opts, &mut |_| {}).unwrap_err();
    assert!(e.to_string().contains("cannot execute"), "{e}");
    assert!(!out.exists());
    assert!(!placement_path_for(&out).exists());
    // Executable but not a program: execve fails in the started child (ENOEXEC), after the
    // events were opened; the error still says so and nothing is left.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&prog, std::fs::Permissions::from_mode(0o755)).unwrap();
    let mut opts = RecordOptions::new(Target::Command(vec![prog.clone().into()]), &out);
    opts.event = EventChoice::Only(Mechanism::PageFaults);
    match record(&opts, &mut |_| {}) {
        Err(e) if e.is_permission() => eprintln!("SKIPPED the exec part: {e}"),
        Err(e) => assert!(e.to_string().contains("cannot execute"), "{e}"),
        Ok(s) => panic!("recorded a non-program: {s:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, vec![std::ffi::OsString::from("not-a-program")]);
}

#[test]
fn dead_pid_writes_nothing() {
    let dir = scratch("dead");
    let mut c = std::process::Command::new("/bin/sh")
        .args(["-c", "exit 0"])
        .spawn()
        .or_else(|_| {
            std::process::Command::new(&child_argv()[0])
                .arg("--list")
                .spawn()
        })
        .unwrap();
    let pid = c.id() as i32;
    c.wait().unwrap();
    let out = dir.join("x.arrows");
    let e = record(&RecordOptions::new(Target::Pid(pid), &out), &mut |_| {}).unwrap_err();
    assert!(
        e.to_string()
            .contains(&format!("process {pid} does not exist")),
        "{e}"
    );
    let e = record(&RecordOptions::new(Target::Pid(-5), &out), &mut |_| {}).unwrap_err();
    assert!(matches!(e, numalab_record::Error::NoSuchProcess(-5)));
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn bad_or_unavailable_event_is_a_clear_error() {
    assert!("bogus".parse::<EventChoice>().is_err());
    assert_eq!(
        "page-faults".parse::<EventChoice>().unwrap(),
        EventChoice::Only(Mechanism::PageFaults)
    );
    // A machine without PMUs (an empty event_source tree): PEBS and IBS are refused by name,
    // before anything starts or is written.
    let dir = scratch("noevent");
    let pmus = dir.join("pmus");
    std::fs::create_dir_all(&pmus).unwrap();
    let out = dir.join("x.arrows");
    for (m, word) in [(Mechanism::Pebs, "pebs"), (Mechanism::Ibs, "ibs_op")] {
        let mut opts = RecordOptions::new(Target::Command(child_argv()), &out);
        opts.event = EventChoice::Only(m);
        opts.event_source_dir = pmus.clone();
        let e = record(&opts, &mut |_| {}).unwrap_err();
        assert!(
            matches!(e, numalab_record::Error::Unavailable { .. }),
            "{e}"
        );
        assert!(e.to_string().contains(word), "{e}");
    }
    assert!(!out.exists());
    // On this machine, where sysfs has no PEBS event, forcing it fails the same way.
    if !Path::new("/sys/bus/event_source/devices/cpu/events/mem-loads").exists() {
        let mut opts = RecordOptions::new(Target::Command(child_argv()), &out);
        opts.event = EventChoice::Only(Mechanism::Pebs);
        assert!(record(&opts, &mut |_| {}).is_err());
        assert!(!out.exists());
    }
}

#[test]
fn auto_falls_back_to_page_faults_and_says_why() {
    if !may_sample() {
        return;
    }
    // With no PMU in the tree, auto must pick page faults and give a reason for each of the
    // better mechanisms.
    let dir = scratch("auto");
    let pmus = dir.join("pmus");
    std::fs::create_dir_all(&pmus).unwrap();
    let info = dir.join("regions");
    let out = dir.join("auto.arrows");
    let mut opts = RecordOptions::new(Target::Command(child_argv()), &out);
    opts.event_source_dir = pmus;
    opts.env = vec![(
        CHILD_ENV.into(),
        format!("pages=16,info={}", info.display()).into(),
    )];
    let s = record(&opts, &mut |_| {}).unwrap();
    assert_eq!(s.mechanism, Mechanism::PageFaults);
    assert_eq!(s.unavailable.len(), 2, "{:?}", s.unavailable);
    assert!(s.unavailable[0].starts_with("pebs: "));
    assert!(s.unavailable[1].starts_with("ibs: "));
    assert!(s.uncore.status.starts_with("not available"));
    assert!(out.exists());
}
