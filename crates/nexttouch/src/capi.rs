//! The C ABI (include/numalab_nexttouch.h). Every function returns 0 or a negative errno.

use crate::{Granularity, Stats};
use std::ffi::c_void;

/// Mark `len` bytes from `addr` next-touch; `granularity` is NUMALAB_NT_PAGE (0) or
/// NUMALAB_NT_AREA (1).
#[no_mangle]
pub extern "C" fn numalab_nt_mark(
    addr: *mut c_void,
    len: usize,
    granularity: libc::c_int,
) -> libc::c_int {
    let Some(g) = Granularity::from_c(granularity) else {
        return -libc::EINVAL;
    };
    match crate::mark(addr as *mut u8, len, g) {
        Ok(_) => 0,
        Err(e) => -e.errno(),
    }
}

/// Unmark the area that contains `addr`.
#[no_mangle]
pub extern "C" fn numalab_nt_unmark(addr: *mut c_void) -> libc::c_int {
    match crate::unmark_at(addr as *const u8) {
        Ok(()) => 0,
        Err(e) => -e.errno(),
    }
}

/// A phase boundary. Under preload mode (NUMALAB_NEXT_TOUCH=1) this wakes the helper thread and
/// returns at once; otherwise it marks synchronously with NUMALAB_NEXT_TOUCH_GRANULARITY.
#[no_mangle]
pub extern "C" fn numalab_nt_phase() -> libc::c_int {
    if crate::preload::signal_helper() {
        return 0;
    }
    match crate::phase(crate::preload::env_granularity()) {
        Ok(_) => 0,
        Err(e) => -e.errno(),
    }
}

/// Copy the process-wide counters into `*out`.
///
/// # Safety
/// `out` must be NULL (-EINVAL) or point to a writable `struct numalab_nt_stats`.
#[no_mangle]
pub unsafe extern "C" fn numalab_nt_get_stats(out: *mut Stats) -> libc::c_int {
    if out.is_null() {
        return -libc::EINVAL;
    }
    out.write(crate::stats());
    0
}
