//! Inputs the fuzz targets (fuzz/, scripts/fuzz.sh) found crashing the readers, kept as
//! regression tests: each is refused with an error naming the file and the problem.

use numalab_analyze::format::SampleReader;
use numalab_analyze::perf::{PerfOptions, PerfReader};
use numalab_analyze::record::SampleSource;
use std::path::Path;

fn data(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/fuzz")
        .join(name)
}

/// Open an Arrow sample file and read all its batches.
fn read_samples(path: &Path) -> Result<(), numalab_analyze::Error> {
    let bytes = std::fs::read(path).unwrap();
    let mut r = SampleReader::new(std::io::Cursor::new(bytes), path)?;
    while r.next_batch()?.is_some() {}
    Ok(())
}

/// Open a perf.data file and read it to its end as `numalab analyze` (and the fuzz target)
/// does; an error is fine, a panic or an abort fails the test.
fn read_perf(path: &Path) {
    if let Ok(mut r) = PerfReader::open(path, PerfOptions::default()) {
        let (mut rows, mut maps) = (Vec::new(), Vec::new());
        while let Ok(true) = r.next_rows(&mut rows, &mut maps) {}
    }
}

#[test]
fn a_perf_data_feature_section_claiming_terabytes_is_refused() {
    // linux-perf-data allocated the 10 TB the section claims and the process aborted
    let path = data("perf-feature-section-10tb.data");
    let err = PerfReader::open(&path, PerfOptions::default())
        .err()
        .expect("refused")
        .to_string();
    // (its attrs entry is out of the file too, which is found first)
    assert!(
        err.contains("perf-feature-section-10tb.data")
            && err.contains("not a readable perf.data file")
            && err.contains("beyond the file's end"),
        "{err}"
    );
}

#[test]
fn an_arrow_stream_with_a_malformed_schema_is_refused() {
    // arrow-ipc unwrapped the schema's missing parts and panicked
    let path = data("arrow-malformed-schema.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(
        err.contains("arrow-malformed-schema.arrows") && err.contains("not an Arrow IPC stream"),
        "{err}"
    );
}

#[test]
fn a_perf_data_command_line_claiming_a_billion_strings_is_left_out() {
    // linux-perf-data reserved 32 GB for the strings the count claims
    let path = data("perf-cmdline-count-1e9.data");
    if let Ok(r) = PerfReader::open(&path, PerfOptions::default()) {
        assert_eq!(
            r.meta().workload,
            "",
            "the malformed command line is left out"
        );
    }
}

#[test]
fn an_arrow_message_claiming_a_petabyte_body_is_refused() {
    // arrow-ipc allocated the body length the message claims and the process aborted
    let path = data("arrow-body-2pow53.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(err.contains("claims a body of"), "{err}");
}

#[test]
fn perf_data_event_descriptions_claiming_more_than_their_section_are_refused() {
    // linux-perf-data reserved 14 GB for the events the count claims (its attrs entries are
    // out of the file as well, which is found first; perf.rs's unit tests check the event
    // descriptions alone)
    let path = data("perf-event-desc-count.data");
    let err = PerfReader::open(&path, PerfOptions::default())
        .err()
        .expect("refused")
        .to_string();
    assert!(err.contains("not a readable perf.data file"), "{err}");
}

#[test]
fn an_arrow_buffer_outside_its_batch_body_is_refused() {
    // arrow-ipc sliced the body by the buffer's claimed offset and length and panicked
    let path = data("arrow-buffer-outside-body.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(err.contains("outside its"), "{err}");
}

#[test]
fn an_arrow_dictionary_batch_without_data_is_refused() {
    // arrow-ipc unwrapped the missing data and panicked
    let path = data("arrow-dictionary-without-data.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(
        err.contains("not an Arrow IPC stream") || err.contains("without its data"),
        "{err}"
    );
}

#[test]
fn an_arrow_buffer_of_a_length_no_value_size_divides_is_refused() {
    // arrow-ipc asserted that the typed buffer holds whole values and panicked
    let path = data("arrow-buffer-length-not-whole.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(err.contains("whole") && err.contains("values"), "{err}");
}

#[test]
fn a_perf_data_mmap2_record_with_an_oversized_build_id_is_counted_as_malformed() {
    // linux-perf-event-reader asserted the build id's length and panicked
    let path = data("perf-mmap2-build-id-200.data");
    read_perf(&path);
}

#[test]
fn an_arrow_stream_with_a_second_schema_is_refused() {
    // arrow-ipc decoded the later schema unchecked and panicked on a field of type NONE
    let path = data("arrow-second-schema.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(err.contains("second schema"), "{err}");
}

#[test]
fn a_perf_data_node_claiming_zettabytes_of_memory_is_refused() {
    // numalab's own NUMA-topology decoding multiplied the KiB count to bytes and overflowed
    let path = data("perf-node-memory-overflow.data");
    read_perf(&path);
}

#[test]
fn an_arrow_column_with_nulls_and_a_short_validity_bitmap_is_refused() {
    // arrow-data read the bitmap, one bit per value, unchecked and panicked (found by
    // fuzz/arrow_samples with 261 values over 1 byte; this file: a column of 832 values
    // claims a null and its bitmap is empty)
    let path = data("arrow-validity-bitmap-short.arrows");
    let err = read_samples(&path).expect_err("refused").to_string();
    assert!(
        err.contains("arrow-validity-bitmap-short.arrows")
            && err.contains("validity bitmap")
            && err.contains("104 bytes needed"),
        "{err}"
    );
}
