//! Which ranges of a process numalab looks at, from /proc/PID/smaps.

use numalab_linux::smaps::{read_smaps, SmapsVma};
use numalab_linux::sysroot::{Pid, SysRoot};

pub const HUGE_BYTES: u64 = 2 << 20;

/// A range of pages numalab may query and move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Range {
    pub start: u64,
    pub end: u64,
    /// Some of the range is backed by transparent huge pages (AnonHugePages > 0).
    pub thp: bool,
}

fn to_range(v: &SmapsVma) -> Range {
    Range {
        start: v.start,
        end: v.end,
        thp: v.anon_huge_pages_kb.unwrap_or(0) > 0,
    }
}

/// Every mapping whose pages move_pages may report or move (`numalab migrate`): shared and
/// file pages included (the kernel then answers per page, e.g. EACCES for shared ones).
pub fn migratable_ranges(pid: Pid) -> Result<Vec<Range>, numalab_linux::Error> {
    Ok(read_smaps(&SysRoot::host(), pid)?
        .iter()
        .filter(|v| !v.is_kernel_special())
        .map(to_range)
        .collect())
}

/// The process's private, writable, anonymous memory (heap, stacks, anonymous mmaps): what
/// remote-percentage placement splits. Program text and shared files stay where they are.
pub fn placeable_ranges(pid: Pid) -> Result<Vec<Range>, numalab_linux::Error> {
    Ok(read_smaps(&SysRoot::host(), pid)?
        .iter()
        .filter(|v| {
            let p = v.perms.as_bytes();
            let private_writable = p.len() >= 4 && p[1] == b'w' && p[3] == b'p';
            let anonymous = matches!(v.path.as_deref(), None | Some("[heap]" | "[stack]"))
                || v.inode == 0 && v.path.as_deref().is_some_and(|s| s.starts_with("[anon"));
            private_writable && anonymous && !v.is_kernel_special()
        })
        .map(to_range)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_heap_is_placeable_and_text_is_only_migratable() {
        let buf = vec![7u8; 8 << 20];
        let addr = buf.as_ptr() as u64;
        let p = placeable_ranges(Pid::SELF).unwrap();
        assert!(
            p.iter().any(|r| r.start <= addr && addr < r.end),
            "the 8 MiB buffer is anonymous private memory"
        );
        let text = own_ranges_contains as *const () as u64;
        assert!(
            !p.iter().any(|r| r.start <= text && text < r.end),
            "program text is not placed"
        );
        let m = migratable_ranges(Pid::SELF).unwrap();
        assert!(m.iter().any(|r| r.start <= text && text < r.end));
        assert!(m.len() >= p.len());
        drop(buf);
    }

    fn own_ranges_contains() {}
}
