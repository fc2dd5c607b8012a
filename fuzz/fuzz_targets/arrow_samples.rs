//! numalab's Arrow sample files (`.arrows`, `sim --samples-out`): any bytes are read to their
//! last whole batch or refused with an error, never a panic.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_analyze::format::SampleReader;
use numalab_analyze::record::SampleSource;
use std::io::Cursor;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut r) = SampleReader::new(Cursor::new(data), "fuzz.arrows") {
        while let Ok(Some(_)) = r.next_batch() {}
        let _ = r.truncated();
    }
});
