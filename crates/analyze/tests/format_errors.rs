//! Sample and placement files: round trips, bounded batches, and clear errors on bad input.

use numalab_analyze::format::{placement_path_for, PlacementWriter, SampleWriter, WriterOptions};
use numalab_analyze::{
    FileMeta, Known, PlacementEntry, PlacementReader, Record, SampleReader, SampleSource,
};
use numalab_core::{AccessSample, CpuId, DataSource, NodeId, PageSize, TaskId, ThreadId};
use std::io::Cursor;

fn sample(i: u64) -> AccessSample {
    AccessSample {
        time_ns: 1000 + i,
        task: TaskId(7),
        thread: ThreadId((i % 3) as u32),
        cpu: CpuId((i % 4) as u32),
        cpu_node: NodeId((i % 2) as u16),
        addr: 0x10_0000 + 4096 * i,
        page_node: NodeId(1),
        page_size: PageSize::Huge2M,
        source: DataSource::RemoteDram,
        latency_ns: 180.5,
        write: i & 1 == 0,
    }
}

fn write(records: &[Record], batch_rows: usize) -> Vec<u8> {
    let meta = FileMeta {
        machine: "m".into(),
        sample_period: 100,
        nodes: 2,
        ..Default::default()
    };
    let mut w = SampleWriter::new(
        Vec::new(),
        "mem",
        &meta,
        WriterOptions {
            perf_columns: true,
            batch_rows,
        },
    )
    .unwrap();
    for r in records {
        w.push(r).unwrap();
    }
    w.finish().unwrap()
}

#[test]
fn unknown_fields_stay_unknown_and_batches_are_bounded() {
    let mut recs: Vec<Record> = (0..10).map(|i| Record::from_sample(sample(i))).collect();
    // Record 3 as perf delivers a page-fault sample recorded per thread: no CPU (perf record
    // leaves PERF_SAMPLE_CPU out), page node, size, source, latency or direction, and not a
    // memory access at all.
    recs[3].known = Known::CPU_NODE.with(Known::NOT_ACCESS);
    recs[3].sample.cpu = CpuId(0);
    recs[3].sample.page_node = NodeId(0);
    recs[3].sample.page_size = PageSize::Base4K;
    recs[3].sample.source = DataSource::LocalDram;
    recs[3].sample.latency_ns = 0.0;
    recs[3].sample.write = false;
    recs[3].weight = Some(33);
    recs[3].data_src = Some(0x1e05080021);
    let bytes = write(&recs, 4);
    let mut r = SampleReader::new(Cursor::new(bytes), "mem").unwrap();
    assert_eq!(r.meta().sample_period, 100);
    let mut sizes = Vec::new();
    let mut back = Vec::new();
    while let Some(b) = r.next_batch().unwrap() {
        sizes.push(b.records.len());
        back.extend(b.records);
    }
    assert_eq!(sizes, vec![4, 4, 2]);
    assert_eq!(back, recs);
    assert_eq!(back[3].page_node(), None);
    assert_eq!(back[3].source(), None);
    assert_eq!(back[3].cpu(), None, "no CPU is invented");
    assert!(!back[3].is_access());
    assert_eq!(back[2].cpu(), Some(recs[2].sample.cpu));
    assert!(back[2].is_access());
    assert_eq!(back[2].page_node(), Some(NodeId(1)));
}

#[test]
fn a_stream_without_its_end_of_stream_marker_is_reported_cut() {
    let recs: Vec<Record> = (0..100).map(|i| Record::from_sample(sample(i))).collect();
    let bytes = write(&recs, 10);
    assert_eq!(
        bytes[bytes.len() - 8..],
        [0xff, 0xff, 0xff, 0xff, 0, 0, 0, 0]
    );
    let read_all = |b: &[u8], path: &std::path::Path| {
        let mut r = SampleReader::new(Cursor::new(b.to_vec()), path).unwrap();
        let mut n = 0;
        while let Some(b) = r.next_batch().unwrap() {
            n += b.records.len();
        }
        (n, r.truncated())
    };
    // Every batch is whole, but the writer never finished: the file was cut between
    // messages. The records are read, and the reader says so.
    let missing = &bytes[..bytes.len() - 8];
    let path = std::env::temp_dir().join(format!("numalab-no-eos-{}.arrows", std::process::id()));
    std::fs::write(&path, missing).unwrap();
    assert_eq!(
        read_all(missing, &path),
        (
            100,
            Some(format!(
                "truncated at byte {}: 100 records read (the stream lacks its end-of-stream marker)",
                missing.len()
            ))
        )
    );
    std::fs::remove_file(&path).ok();
    // part of the marker left, and no file to take a size from
    for keep in [2, 5] {
        let cut = &bytes[..bytes.len() - 8 + keep];
        let (n, t) = read_all(cut, std::path::Path::new("cut.arrows"));
        assert_eq!(n, 100);
        let t = t.unwrap_or_else(|| panic!("{keep} bytes of the marker: not said to be cut"));
        assert!(t.starts_with("truncated: 100 records read"), "{t}");
    }
    // the whole marker: complete
    assert_eq!(
        read_all(&bytes, std::path::Path::new("whole.arrows")),
        (100, None)
    );
}

#[test]
fn truncated_and_foreign_files_give_clear_errors() {
    let recs: Vec<Record> = (0..100).map(|i| Record::from_sample(sample(i))).collect();
    let bytes = write(&recs, 10);
    // Truncated in the middle of a batch: every complete batch is read, then the reader
    // stops and says where and how many records it read (as perf script reads a cut file).
    let cut = bytes[..bytes.len() / 2].to_vec();
    let mut r = SampleReader::new(Cursor::new(cut), "cut.arrows").unwrap();
    let mut read = Vec::new();
    while let Some(b) = r.next_batch().unwrap() {
        read.extend(b.records);
    }
    assert!(
        !read.is_empty() && read.len() < 100 && read.len() % 10 == 0,
        "{}",
        read.len()
    );
    assert_eq!(read[..], recs[..read.len()]);
    assert_eq!(
        r.truncated().as_deref(),
        Some(format!("truncated: {} records read", read.len()).as_str())
    );
    assert!(r.next_batch().unwrap().is_none(), "stays at its end");
    // A complete file is not truncated.
    let mut whole = SampleReader::new(Cursor::new(bytes.clone()), "whole.arrows").unwrap();
    while whole.next_batch().unwrap().is_some() {}
    assert_eq!(whole.truncated(), None);
    // Not Arrow at all.
    let err = SampleReader::new(Cursor::new(b"PERFILE2 not arrow".to_vec()), "x.data")
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("x.data") && err.contains("not an Arrow IPC stream"),
        "{err}"
    );
    // An empty file.
    let err = SampleReader::new(Cursor::new(Vec::new()), "empty")
        .err()
        .unwrap()
        .to_string();
    assert!(err.contains("empty"), "{err}");
    // A placement stream where samples are expected.
    let mut pw = PlacementWriter::new(Vec::new(), "p").unwrap();
    pw.write(&[PlacementEntry {
        time_ns: 0,
        task: TaskId(7),
        start: 0x10_0000,
        page_size: PageSize::Huge2M,
        pages: 1,
        node: NodeId(1),
    }])
    .unwrap();
    let pbytes = pw.finish().unwrap();
    let err = SampleReader::new(Cursor::new(pbytes.clone()), "p.arrows")
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("'placement' stream, expected 'samples'"),
        "{err}"
    );
    // And it reads as placement.
    let p = PlacementReader::read(Cursor::new(pbytes), "p").unwrap();
    assert_eq!(
        p.lookup(TaskId(7), 0x10_0000 + 12345, 5),
        Some((NodeId(1), PageSize::Huge2M))
    );
}

#[test]
fn placement_fills_unknown_page_nodes() {
    let mut rec = Record::from_sample(sample(1));
    rec.known = Known::CPU_NODE;
    let bytes = write(&[rec], 10);
    let mut pw = PlacementWriter::new(Vec::new(), "p").unwrap();
    pw.write(&[PlacementEntry {
        time_ns: 0,
        task: TaskId(7),
        start: 0,
        page_size: PageSize::Base4K,
        pages: 1 << 20,
        node: NodeId(3),
    }])
    .unwrap();
    let p = PlacementReader::read(Cursor::new(pw.finish().unwrap()), "p").unwrap();
    let mut r = SampleReader::new(Cursor::new(bytes), "s")
        .unwrap()
        .with_placement(p);
    let b = r.next_batch().unwrap().unwrap();
    assert_eq!(b.records[0].page_node(), Some(NodeId(3)));
    assert_eq!(b.records[0].page_size(), Some(PageSize::Base4K));
    assert_eq!(
        placement_path_for(std::path::Path::new("run.arrows")),
        std::path::PathBuf::from("run.placement.arrows")
    );
}
