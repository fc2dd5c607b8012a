//! perf.data (`numalab analyze`, `convert`): any bytes are read to their last whole record or
//! refused with an error naming the file, never a panic. The reader takes a path (it reopens
//! the file for its fast path), so each input is written to a file in the temporary directory.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_analyze::perf::{PerfOptions, PerfReader};
use numalab_analyze::record::SampleSource;
use std::sync::OnceLock;

fn path() -> &'static std::path::Path {
    static PATH: OnceLock<std::path::PathBuf> = OnceLock::new();
    PATH.get_or_init(|| {
        std::env::temp_dir().join(format!("numalab-fuzz-perf-{}.data", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    std::fs::write(path(), data).expect("the temporary directory is writable");
    if let Ok(mut r) = PerfReader::open(path(), PerfOptions::default()) {
        let (mut rows, mut maps) = (Vec::new(), Vec::new());
        while let Ok(true) = r.next_rows(&mut rows, &mut maps) {
            rows.clear();
            maps.clear();
        }
    }
});
