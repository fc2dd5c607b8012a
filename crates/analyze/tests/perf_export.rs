//! perf.data export against the real `perf` (6.1 in CI: `.ci/run` installs linux-perf) and
//! against numalab's own reader: a hand-built set covering every data source, load/store/
//! unknown, page sizes and unknown fields, and a simulator run (THP false sharing, 4 nodes).
//! Every sample's address, CPU, tid, time and data source is compared with `perf script`;
//! the local/remote split with `perf mem report`.

use numalab_analyze::perf::{PerfOptions, PerfReader};
use numalab_analyze::perf_write::{export, PerfWriter};
use numalab_analyze::record::MemorySource;
use numalab_analyze::{
    analyze, FileMeta, Known, Mapping, MappingKind, Options, Record, SampleSource,
};
use numalab_core::{
    AccessSample, CpuId, DataSource, NodeId, NodeInfo, PageSize, TaskId, ThreadId, Topology,
};
use numalab_sim::ThpMode;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

mod common;

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("numalab-export-{name}-{}.data", std::process::id()))
}

/// Runs `perf ARGS -i FILE`; fails the test with a clear message when perf is missing.
fn perf(args: &[&str], file: &Path) -> String {
    let out = Command::new("perf")
        .args(args)
        .arg("-i")
        .arg(file)
        // perf refuses files not owned by the caller unless forced.
        .arg("--force")
        .output()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run `perf` ({e}): these tests need the real perf tool (Debian/Ubuntu: \
                 apt-get install linux-perf / linux-tools-common)"
            )
        });
    assert!(
        out.status.success(),
        "perf {args:?} -i {} failed: {}",
        file.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    // a file numalab wrote gives perf nothing to warn about (it warned that kernel address
    // maps "were restricted" while the attribute did not say the samples are user space only)
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(
        !said.contains("Warning") && !said.contains("were restricted"),
        "perf {args:?} warned: {said}"
    );
    String::from_utf8(out.stdout).expect("perf prints UTF-8")
}

fn read_back(path: &Path) -> (Vec<Record>, Vec<Mapping>, FileMeta) {
    let mut r = PerfReader::open(path, PerfOptions::default()).unwrap();
    let mut recs = Vec::new();
    let mut maps = Vec::new();
    while let Some(b) = r.next_batch().unwrap() {
        recs.extend(b.records);
        maps.extend(b.mappings);
    }
    assert_eq!(r.malformed_samples, 0, "{:?}", r.first_error);
    (recs, maps, r.meta().clone())
}

/// The sample as a perf round trip keeps it: latency in whole ns.
fn kept(r: &Record) -> (AccessSample, Known) {
    let mut s = r.sample;
    s.latency_ns = s.latency_ns.round();
    (s, r.known)
}

fn sort_key(r: &Record) -> (u64, u32, u32, u64, u32) {
    let s = &r.sample;
    (s.time_ns, s.task.0, s.thread.0, s.addr, s.cpu.0)
}

/// What perf's data_src decoding says: "LOAD"/"STORE"/"N/A" and the level text.
fn perf_level(source: Option<DataSource>) -> &'static str {
    match source {
        None => "N/A",
        Some(DataSource::PrivateCache) => "L1 hit",
        Some(DataSource::LocalLlc) => "L3 hit",
        Some(DataSource::RemoteCache) => "Remote Cache (1 hop) hit",
        Some(DataSource::LocalDram) => "Local RAM hit",
        Some(DataSource::RemoteDram) => "Remote RAM (1 hop) hit",
    }
}

/// `perf script -F tid,cpu,time,addr,data_src` against every written record.
fn check_perf_script(path: &Path, written: &[Record]) {
    let text = perf(
        &[
            "script",
            "--ns",
            "-F",
            "pid,tid,cpu,time,addr,data_src,phys_addr",
        ],
        path,
    );
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    assert_eq!(
        lines.len(),
        written.len(),
        "one perf script line per sample"
    );
    let mut want: Vec<&Record> = written.iter().collect();
    want.sort_by_key(|r| sort_key(r));
    for (i, (l, r)) in lines.iter().zip(&want).enumerate() {
        let s = &r.sample;
        let what = format!("sample {i}: {l}");
        // "PID/TID [CPU] SECS.NANOS: ADDR DATA_SRC |OP LOAD|LVL ...|SNP ...|... PHYS"
        let t: Vec<&str> = l.split_whitespace().collect();
        // Ids are shifted so that no sample is pid/tid 0, perf's idle task.
        let off = numalab_analyze::perf_write::ID_OFFSET;
        assert_eq!(
            t[0],
            format!("{}/{}", s.task.0 + off, s.thread.0 + off),
            "{what}"
        );
        assert!(!t[0].starts_with("0/") && !t[0].ends_with("/0"), "{what}");
        assert_eq!(t[1], format!("[{:03}]", s.cpu.0), "{what}");
        assert_eq!(
            t[2],
            format!(
                "{}.{:09}:",
                s.time_ns / 1_000_000_000,
                s.time_ns % 1_000_000_000
            ),
            "{what}"
        );
        assert_eq!(u64::from_str_radix(t[3], 16).unwrap(), s.addr, "{what}");
        let bars: Vec<&str> = l.split('|').map(str::trim).collect();
        let op = match r.write() {
            Some(true) => "OP STORE",
            Some(false) => "OP LOAD",
            None => "OP N/A",
        };
        assert_eq!(bars[1], op, "{what}");
        assert_eq!(bars[2], format!("LVL {}", perf_level(r.source())), "{what}");
    }
}

/// `perf mem report --stdio --sort=mem`: samples per memory level, as perf counts them.
fn perf_mem_levels(path: &Path) -> BTreeMap<String, u64> {
    let text = perf(
        &["mem", "report", "--stdio", "--sort=mem", "-n", "-T"],
        path,
    );
    let mut by = BTreeMap::new();
    for l in text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        // "  45.31%  1234  Local RAM hit"
        let t: Vec<&str> = l.split_whitespace().collect();
        if t.len() < 3 || !t[0].ends_with('%') {
            continue;
        }
        let Ok(n) = t[1].parse::<u64>() else { continue };
        *by.entry(t[2..].join(" ")).or_default() += n;
    }
    by
}

fn levels_of(recs: &[Record]) -> BTreeMap<String, u64> {
    let mut by = BTreeMap::new();
    for r in recs {
        *by.entry(perf_level(r.source()).to_string()).or_default() += 1;
    }
    by
}

fn two_nodes() -> Topology {
    Topology {
        nodes: (0..2)
            .map(|n| NodeInfo {
                id: NodeId(n),
                cpus: (0..4).map(|c| CpuId(n as u32 * 4 + c)).collect(),
                mem_bytes: 8 << 30,
            })
            .collect(),
        distances: vec![vec![10, 21], vec![21, 10]],
        smt: 1,
    }
}

/// Every source, load/store/unknown, 4K/2M/unknown page sizes and page nodes, two tasks.
fn hand_built() -> (FileMeta, Vec<Record>, Vec<Mapping>) {
    let sources = [
        Some(DataSource::PrivateCache),
        Some(DataSource::LocalLlc),
        Some(DataSource::RemoteCache),
        Some(DataSource::LocalDram),
        Some(DataSource::RemoteDram),
        None,
    ];
    let mut recs = Vec::new();
    for i in 0..600u64 {
        let task = 4000 + (i % 2) as u32;
        let thread = task + 10 * (i % 3) as u32;
        let cpu = (i * 7 % 8) as u32;
        let page_node = (i / 5 % 2) as u16;
        let src = sources[(i % 6) as usize];
        let write = [Some(true), Some(false), None][(i / 6 % 3) as usize];
        let page = [Some(PageSize::Base4K), Some(PageSize::Huge2M), None][(i / 18 % 3) as usize];
        let mut known = Known::CPU
            .with(Known::CPU_NODE)
            .with(Known::PAGE_NODE)
            .with(Known::LATENCY);
        if src.is_some() {
            known = known.with(Known::SOURCE);
        }
        if write.is_some() {
            known = known.with(Known::WRITE);
        }
        if page.is_some() {
            known = known.with(Known::PAGE_SIZE);
        }
        recs.push(Record {
            sample: AccessSample {
                time_ns: 1_500_000_000 + i * 1013,
                task: TaskId(task),
                thread: ThreadId(thread),
                cpu: CpuId(cpu),
                cpu_node: NodeId((cpu / 4) as u16),
                addr: 0x7f00_0000_0000 + i * 0x1_2345 % (64 << 20),
                page_node: NodeId(page_node),
                page_size: page.unwrap_or(PageSize::Base4K),
                source: src.unwrap_or(DataSource::LocalDram),
                latency_ns: (40 + i % 300) as f32,
                write: write.unwrap_or(false),
            },
            known,
            event: 0,
            ip: None,
            phys_addr: None,
            weight: None,
            data_src: None,
            period: None,
        });
    }
    let maps = vec![
        Mapping {
            task: 4000,
            start: 0x40_0000,
            len_bytes: 0x2000,
            name: "/usr/bin/halves".into(),
            kind: MappingKind::Binary,
            pgoff: 0,
        },
        Mapping {
            task: 4000,
            start: 0x7f00_0000_0000,
            len_bytes: 64 << 20,
            name: String::new(),
            kind: MappingKind::Anonymous,
            pgoff: 0,
        },
        Mapping {
            task: 4001,
            start: 0x7f00_0000_0000,
            len_bytes: 64 << 20,
            name: "[heap]".into(),
            kind: MappingKind::Heap,
            pgoff: 0,
        },
    ];
    let meta = FileMeta {
        machine: "hand-built-2n".into(),
        workload: "hand-built".into(),
        origin: "sim".into(),
        sample_period: 997,
        page_size: Some(PageSize::Base4K),
        nodes: 2,
        topology: Some(two_nodes()),
        events: vec![],
        mappings: maps.clone(),
        samples_dropped: 0,
        ..Default::default()
    };
    (meta, recs, maps)
}

#[test]
fn hand_built_set_round_trips_and_perf_reads_it() {
    let (meta, recs, maps) = hand_built();
    let path = tmp("hand");
    let mut w = PerfWriter::create(&path, &meta).unwrap();
    for r in &recs {
        w.push(r).unwrap();
    }
    let sum = w.finish().unwrap();
    assert_eq!(sum.samples, recs.len() as u64);
    assert_eq!(sum.threads, 6);
    assert!(sum.page_nodes && sum.latency_weights);

    // numalab's reader: the same samples, fields and marks.
    let (back, back_maps, back_meta) = read_back(&path);
    assert_eq!(back.len(), recs.len());
    for (a, b) in back.iter().zip(&recs) {
        assert_eq!(kept(a), kept(b));
        assert_eq!(a.weight, Some(b.sample.latency_ns as u64));
    }
    // An unnamed mapping is written as perf names anonymous memory.
    let mut want_maps = maps.clone();
    want_maps[1].name = "//anon".into();
    assert_eq!(back_maps, want_maps);
    assert_eq!(back_meta.machine, "hand-built-2n");
    assert_eq!(back_meta.workload, "hand-built");
    assert_eq!(back_meta.sample_period, 997);
    assert_eq!(back_meta.nodes, 2);
    let t = back_meta.topology.unwrap();
    assert_eq!(t.nodes[1].cpus, two_nodes().nodes[1].cpus);

    // The real perf: every sample, and the level split.
    check_perf_script(&path, &recs);
    assert_eq!(perf_mem_levels(&path), levels_of(&recs));
    let header = perf(&["report", "--header-only", "-I"], &path);
    assert!(header.contains("hand-built-2n"), "{header}");
    assert!(
        header.contains("node1 meminfo") || header.contains("node1"),
        "{header}"
    );
    std::fs::remove_file(&path).ok();
}

/// The file metadata of a simulated run's samples (common::machine, common::SAMPLE_PERIOD).
fn sim_meta(res: &numalab_sim::SimResult) -> FileMeta {
    let m = common::machine();
    FileMeta {
        machine: res.machine.clone(),
        workload: res.workload.clone(),
        origin: "sim".into(),
        sample_period: common::SAMPLE_PERIOD,
        page_size: Some(PageSize::Base4K),
        nodes: m.topology.num_nodes() as u16,
        topology: Some(m.topology.clone()),
        events: vec!["memory-reference".into()],
        mappings: Vec::new(),
        samples_dropped: 0,
        ..Default::default()
    }
}

#[test]
fn simulator_samples_export_to_perf() {
    let res = common::run(ThpMode::Always);
    let meta = sim_meta(&res);
    assert!(res.samples.len() > 2000);
    let path = tmp("sim");
    let sum = export(&mut MemorySource::new(meta.clone(), &res.samples), &path).unwrap();
    assert_eq!(sum.samples, res.samples.len() as u64);

    // The reader orders by time; the simulator hands out samples thread by thread per epoch.
    let originals: Vec<Record> = res
        .samples
        .iter()
        .map(|s| Record::from_sample(*s))
        .collect();
    let mut want = originals.clone();
    want.sort_by_key(sort_key);
    let (mut back, _, _) = read_back(&path);
    back.sort_by_key(sort_key);
    assert_eq!(back.len(), want.len());
    for (a, b) in back.iter().zip(&want) {
        assert_eq!(kept(a), kept(b));
        assert!((a.sample.latency_ns - b.sample.latency_ns).abs() <= 0.5);
    }

    // The analysis of the perf file equals that of the samples in memory (latency aside, it
    // uses none of what the round trip rounds).
    let from_perf = analyze(
        &mut PerfReader::open(&path, PerfOptions::default()).unwrap(),
        &Options::default(),
    )
    .unwrap();
    let direct = analyze(
        &mut MemorySource::new(meta, &res.samples),
        &Options::default(),
    )
    .unwrap();
    assert_eq!(from_perf.lar_percent, direct.lar_percent);
    assert_eq!(from_perf.imbalance_percent, direct.imbalance_percent);
    assert_eq!(from_perf.pages.distinct_pages, direct.pages.distinct_pages);
    assert_eq!(
        from_perf.false_sharing.falsely_shared,
        direct.false_sharing.falsely_shared
    );
    assert_eq!(from_perf.samples.total, direct.samples.total);

    // perf: every sample, and the local/remote DRAM split of the simulator.
    check_perf_script(&path, &originals);
    let levels = perf_mem_levels(&path);
    assert_eq!(levels, levels_of(&originals));
    let remote = res
        .samples
        .iter()
        .filter(|s| s.source == DataSource::RemoteDram)
        .count() as u64;
    assert!(remote > 0);
    assert_eq!(
        levels.get("Remote RAM (1 hop) hit").copied().unwrap_or(0),
        remote
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn bad_event_index_is_an_error_naming_the_file() {
    let (meta, mut recs, _) = hand_built();
    recs[3].event = 2;
    let path = tmp("bad");
    let mut w = PerfWriter::create(&path, &meta).unwrap();
    w.push(&recs[0]).unwrap();
    let e = w.push(&recs[3]).unwrap_err();
    assert_eq!(e.path, path);
    assert!(e.what.contains("event 2"), "{e}");
    std::fs::remove_file(&path).ok();
}

/// The direct data-section reader gives the same batches' contents, in the same order, as
/// linux-perf-data's iterator: on real recordings (two events, callchains) and on exports.
#[test]
fn direct_reader_matches_the_library_reader() {
    let data = |n: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(n)
    };
    let (meta, recs, _) = hand_built();
    let exported = tmp("direct");
    let mut w = PerfWriter::create(&exported, &meta).unwrap();
    // Out of time order within rounds, as the simulator writes them.
    for r in recs.iter().rev() {
        w.push(r).unwrap();
    }
    w.finish().unwrap();
    for path in [
        data("faults-full.data"),
        data("faults-callchain.data"),
        exported.clone(),
    ] {
        let all = |mut r: PerfReader| {
            let mut recs = Vec::new();
            let mut maps = Vec::new();
            while let Some(b) = r.next_batch().unwrap() {
                recs.extend(b.records);
                maps.extend(b.mappings);
            }
            (recs, maps, r.malformed_samples)
        };
        let direct = PerfReader::open(&path, PerfOptions::default()).unwrap();
        assert!(direct.direct_reader(), "{}", path.display());
        let lib = PerfReader::open(&path, PerfOptions::default())
            .unwrap()
            .with_library_reader();
        let (a, b) = (all(direct), all(lib));
        assert!(!a.0.is_empty());
        assert_eq!(a, b, "{}", path.display());
    }
    std::fs::remove_file(&exported).ok();
}

/// `next_rows` (what the analysis reads: samples decoded straight into rows) gives the rows of
/// `next_batch`'s records and the same mappings, in the same order, with the direct reader and
/// with the library's; on real recordings, on an out-of-order export (whose ids are shifted by
/// `ID_OFFSET` in the file) and with a placement.
#[test]
fn rows_match_records() {
    use numalab_analyze::{Placement, PlacementEntry, Row};
    let data = |n: &str| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data")
            .join(n)
    };
    let (meta, recs, maps) = hand_built();
    let exported = tmp("rows");
    let mut w = PerfWriter::create(&exported, &meta).unwrap();
    w.push_mappings(&maps, 0).unwrap();
    for r in recs.iter().rev() {
        w.push(r).unwrap();
    }
    w.finish().unwrap();
    let placement = Placement::from_entries(vec![PlacementEntry {
        time_ns: 0,
        task: recs[0].sample.task,
        start: recs[0].sample.addr & !0xfff,
        page_size: PageSize::Base4K,
        pages: 4,
        node: NodeId(1),
    }]);
    for (path, placement) in [
        (data("faults-full.data"), None),
        (data("faults-callchain.data"), None),
        (exported.clone(), None),
        (exported.clone(), Some(placement)),
    ] {
        let open = |library: bool| {
            let r = PerfReader::open(
                &path,
                PerfOptions {
                    placement: placement.clone(),
                    batch_rows: 7,
                    ..Default::default()
                },
            )
            .unwrap();
            if library {
                r.with_library_reader()
            } else {
                r
            }
        };
        let mut records = (Vec::new(), Vec::new());
        let mut r = open(false);
        while let Some(b) = r.next_batch().unwrap() {
            records.0.extend(b.records.iter().map(Row::from_record));
            records.1.extend(b.mappings);
        }
        for library in [false, true] {
            let mut r = open(library);
            let (mut rows, mut maps) = (Vec::new(), Vec::new());
            while r.next_rows(&mut rows, &mut maps).unwrap() {}
            assert!(!rows.is_empty());
            assert_eq!((rows, maps), records, "{} {library}", path.display());
        }
    }
    // The export's tasks read back as written.
    let mut r = PerfReader::open(&exported, PerfOptions::default()).unwrap();
    let (mut rows, mut back) = (Vec::new(), Vec::new());
    while r.next_rows(&mut rows, &mut back).unwrap() {}
    let mut tasks: Vec<u32> = rows.iter().map(|r| r.task).collect();
    let mut want: Vec<u32> = recs.iter().map(|r| r.sample.task.0).collect();
    tasks.sort();
    want.sort();
    assert_eq!(tasks, want);
    // (The writer also writes `meta`'s mappings: each comes back at least once.)
    assert!(!back.is_empty());
    for m in &maps {
        assert!(back.contains(m) || back.iter().any(|b| (b.task, b.start) == (m.task, m.start)));
    }
    for b in &back {
        assert!(
            maps.iter().any(|m| (b.task, b.start) == (m.task, m.start)),
            "{b:?}"
        );
    }
    std::fs::remove_file(&exported).ok();
}

/// Every record of `path` through both readers (the direct one and linux-perf-data's), with
/// what each says about truncation.
fn read_cut(path: &Path) -> Vec<(usize, Option<String>)> {
    [false, true]
        .into_iter()
        .map(|library| {
            let mut r = PerfReader::open(path, PerfOptions::default()).unwrap();
            if library {
                r = r.with_library_reader();
            }
            let mut n = 0;
            while let Some(b) = r.next_batch().unwrap() {
                n += b.records.len();
            }
            (n, r.truncated())
        })
        .collect()
}

#[test]
fn a_perf_data_file_cut_short_is_read_to_its_last_record() {
    let res = common::run(ThpMode::Never);
    let meta = sim_meta(&res);
    let full = tmp("cut-full");
    export(&mut MemorySource::new(meta, &res.samples), &full).unwrap();
    let bytes = std::fs::read(&full).unwrap();
    let all = res.samples.len();
    for (n, t) in read_cut(&full) {
        assert_eq!((n, t), (all, None), "a complete file");
    }
    // 7 bytes short: the feature sections after the data are cut, every record is there
    let cut7 = tmp("cut7");
    std::fs::write(&cut7, &bytes[..bytes.len() - 7]).unwrap();
    for (n, t) in read_cut(&cut7) {
        assert_eq!(n, all);
        let t = t.expect("says it is truncated");
        assert!(
            t.starts_with(&format!(
                "truncated at byte {}: {all} records read",
                bytes.len() - 7
            )),
            "{t}"
        );
    }
    // half: the records up to the cut, the same through both readers
    let half = tmp("cut-half");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let both = read_cut(&half);
    assert!(both[0].0 > 0 && both[0].0 < all, "{both:?}");
    assert_eq!(both[0], both[1]);
    // a complete-length file with a corrupt feature table is an error, not a "cut"
    let mut bad = bytes.clone();
    let data_end = u64::from_le_bytes(bad[40..48].try_into().unwrap())
        + u64::from_le_bytes(bad[48..56].try_into().unwrap());
    bad[data_end as usize..data_end as usize + 8].copy_from_slice(&u64::MAX.to_le_bytes());
    let corrupt = tmp("corrupt-features");
    std::fs::write(&corrupt, &bad).unwrap();
    if let Ok(mut r) = PerfReader::open(&corrupt, PerfOptions::default()) {
        while r.next_batch().map(|b| b.is_some()).unwrap_or(false) {}
        assert_eq!(r.truncated(), None, "a corrupt file is not reported as cut");
    }
    for p in [full, cut7, half, corrupt] {
        std::fs::remove_file(p).ok();
    }
}
