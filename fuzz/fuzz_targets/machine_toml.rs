//! Machine TOML files (`--machine FILE.toml`): parsed and validated or refused with an error;
//! a machine that loads prints back (`to_toml`) to the same machine.
#![no_main]
use libfuzzer_sys::fuzz_target;
use numalab_machine::Machine;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    if let Ok(m) = Machine::from_toml_str(&text, "fuzz.toml") {
        m.validate().expect("a loaded machine is valid");
    }
});
