//! hwloc XML (`lstopo --of xml`, `--machine-file`): any text is imported to a validated
//! machine or refused with an error, never a panic; an imported machine validates again.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_machine::{hwloc, HwlocDefaults};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = hwloc::import_str(&text, "fuzz.xml", "fuzz", &HwlocDefaults::default()) {
        hwloc::validate_imported(&m).expect("an imported machine is valid");
    }
});
