//! Workload spec strings (`-w name:key=value,...`, mixes included): accepted or refused with
//! an error, never a panic. The first byte picks the thread count (1-64); building is left out
//! (a spec is validated without it: `by_spec`'s contract).
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&t, rest)) = data.split_first() else {
        return;
    };
    let spec = String::from_utf8_lossy(rest);
    let _ = numalab_workloads::by_spec(&spec, 1 + (t % 64) as usize);
});
