//! perf.data files with a corrupt header, and files that are neither perf.data nor Arrow
//! samples: each is refused with an error naming the file, the field and its value, never
//! an I/O error from deep inside the parser; a recording cut short is still read.

use numalab_analyze::format::SampleReader;
use numalab_analyze::perf::{is_perf_file, PerfOptions, PerfReader};
use numalab_analyze::perf_write::export;
use numalab_analyze::record::{MemorySource, SampleSource};
use numalab_analyze::FileMeta;
use numalab_core::{AccessSample, CpuId, DataSource, NodeId, PageSize, TaskId, ThreadId};
use std::path::PathBuf;

/// perf.data header: the data section's offset and size (perf_file_header.data).
const DATA_OFFSET: usize = 40;
const DATA_SIZE: usize = 48;
const SAMPLES: usize = 50;

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("numalab-header-{name}-{}.data", std::process::id()))
}

/// The bytes of a valid perf.data file of [`SAMPLES`] samples, as `numalab convert` writes.
fn valid_perf_data() -> Vec<u8> {
    let samples: Vec<AccessSample> = (0..SAMPLES as u64)
        .map(|i| AccessSample {
            time_ns: 1000 + i,
            task: TaskId(7),
            thread: ThreadId((i % 3) as u32),
            cpu: CpuId((i % 4) as u32),
            cpu_node: NodeId((i % 2) as u16),
            addr: 0x10_0000 + 4096 * i,
            page_node: NodeId(1),
            page_size: PageSize::Base4K,
            source: DataSource::RemoteDram,
            latency_ns: 180.0,
            write: i & 1 == 0,
        })
        .collect();
    let meta = FileMeta {
        machine: "m".into(),
        sample_period: 100,
        nodes: 2,
        ..Default::default()
    };
    // one file per call: the tests run in parallel, and each removes its own
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = tmp(&format!("valid{n}"));
    export(&mut MemorySource::new(meta, &samples), &path).unwrap();
    let bytes = std::fs::read(&path).unwrap();
    std::fs::remove_file(&path).ok();
    bytes
}

/// `bytes` with the little-endian word at `at` set to `v`, written to a file named `name`.
fn patched(bytes: &[u8], name: &str, at: usize, v: u64) -> PathBuf {
    let mut b = bytes.to_vec();
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
    let path = tmp(name);
    std::fs::write(&path, &b).unwrap();
    path
}

fn open_err(path: &PathBuf) -> String {
    PerfReader::open(path, PerfOptions::default())
        .err()
        .expect("refused")
        .to_string()
}

#[test]
fn a_data_section_starting_beyond_the_file_names_its_offset() {
    let bytes = valid_perf_data();
    let len = bytes.len();
    // 2^40 made the parser fail to fill a buffer, 2^63 + 5 made a seek fail with EINVAL
    for (name, offset) in [("beyond", 1u64 << 40), ("beyond-i64", (1u64 << 63) + 5)] {
        let path = patched(&bytes, name, DATA_OFFSET, offset);
        let e = open_err(&path);
        assert!(
            e.contains(&path.display().to_string())
                && e.contains(&format!(
                    "data section starts at data.offset {offset}, beyond the file's end ({len} bytes)"
                ))
                && !e.contains("I/O error"),
            "{e}"
        );
        std::fs::remove_file(&path).ok();
    }
}

#[test]
fn a_data_section_whose_end_overflows_is_refused() {
    let bytes = valid_perf_data();
    let offset = u64::from_le_bytes(bytes[DATA_OFFSET..DATA_OFFSET + 8].try_into().unwrap());
    let size = u64::MAX - 10;
    let path = patched(&bytes, "overflow", DATA_SIZE, size);
    let e = open_err(&path);
    assert!(
        e.contains(&format!(
            "data section (data.offset {offset} + data.size {size} bytes) overflows a 64-bit file offset"
        )),
        "{e}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_data_section_running_past_the_file_is_read_as_a_cut_recording() {
    // the end beyond the file is what a cut leaves: every record there is read, and said cut
    let bytes = valid_perf_data();
    let size = u64::from_le_bytes(bytes[DATA_SIZE..DATA_SIZE + 8].try_into().unwrap());
    let path = patched(&bytes, "longer", DATA_SIZE, size + (1 << 40));
    let mut r = PerfReader::open(&path, PerfOptions::default()).unwrap();
    let mut n = 0;
    while let Some(b) = r.next_batch().unwrap() {
        n += b.records.len();
    }
    assert_eq!(n, SAMPLES);
    let t = r.truncated().expect("said to be cut");
    assert!(
        t.starts_with(&format!(
            "truncated at byte {}: {SAMPLES} records read",
            bytes.len()
        )),
        "{t}"
    );
    std::fs::remove_file(&path).ok();
}

#[test]
fn a_file_with_a_damaged_perf_magic_is_said_to_be_neither_format() {
    let bytes = valid_perf_data();
    for (name, magic, shown) in [
        // zeros read as an Arrow end-of-stream marker: "ends inside its first message"
        ("zeroed", *b"\0\0\0\0\0\0\0\0", "00 00 00 00 00 00 00 00"),
        (
            "perfile3",
            *b"PERFILE3",
            "50 45 52 46 49 4C 45 33 (\"PERFILE3\")",
        ),
    ] {
        let path = patched(&bytes, name, 0, u64::from_le_bytes(magic));
        // the readers are picked by the magic: this one goes to the Arrow reader
        assert!(!is_perf_file(&path));
        let e = SampleReader::open(&path)
            .err()
            .expect("refused")
            .to_string();
        assert!(
            e.contains(&format!(
                "{}: not an Arrow IPC stream nor a perf.data file: neither numalab's Arrow samples \
                 (which start with an Arrow message, FF FF FF FF) nor perf.data (no PERFILE2 \
                 magic); it starts with {shown}",
                path.display()
            )) && !e.contains("first message"),
            "{e}"
        );
        std::fs::remove_file(&path).ok();
    }
}
