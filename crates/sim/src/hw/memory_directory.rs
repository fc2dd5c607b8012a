//! The memory directory of Intel's multi-socket Xeons (docs/model.md, "Memory directory").
//!
//! Sockets that keep coherence with a directory (Broadwell-EP in its default home-snoop mode,
//! every Skylake-SP and later) store, in spare ECC bits of each line in DRAM, whether another
//! socket may hold the line ("A", snoop-all) or not ("I"). The home agent consults it instead
//! of snooping, and must keep it true:
//!
//! - a read from another socket that misses its caches is granted the line in the Exclusive
//!   state, so the home sets the line's state to A, and since the bits live in the line's ECC
//!   it writes the whole line back to DRAM: a 64 B write on the home controller for a read;
//! - a remote read of a line already in state A changes nothing;
//! - a write-back, local or remote, comes from the only socket that held the line modified,
//!   so it stores the state I with the data at no extra cost;
//! - local reads do not change the bits; on the hardware a local read of a line in state A
//!   snoops the other sockets first, which the model leaves out (docs/model.md, "Links and
//!   coherence traffic": no measured figure for its wait).
//!
//! So streaming over remote data that is also written (every line written back between two
//! reads) costs one extra write per line read, while re-reading remote read-only data costs
//! it once. Sources: J. McCalpin, "Memory directories in Intel processors" (blog, August 2023)
//! and his answers on the Intel community forum ("For remote reads of data that is not in any
//! cache, the default response is to provide the data in the Exclusive state ... the memory
//! directory bit must be set ... and the entire cache line must be written back to DRAM");
//! the uncore performance monitoring guides' `DIRECTORY_UPDATE` events ("directory updates ...
//! result in writes to the memory controller").
//!
//! Approximations: one bit per line (the hardware's third state, S, behaves as A here); the
//! directory caches (HitME, Haswell and later: a few thousand entries for lines moving
//! between sockets) are left out, since they matter for lines bounced between caches rather
//! than streamed from DRAM. The simulator has no physical frames, so the bits are kept per
//! virtual line with the node their page was on: a page that moved to another node starts
//! with every line in state I, as its new frame does.

use crate::os::pagetable::VA_BASE;

/// One word of directory bits per 4 KiB page: bit `i` is line `i` of the page.
pub struct MemoryDirectory {
    /// Pages at or above this index are the page-table lines the engine numbers above the
    /// mapped space (`PtLines`): they have no node of their own, so no directory state.
    pages: u64,
    /// Lines in state A, per page (indexed as the page table is).
    remote_bits: Vec<u64>,
    /// Per page, 1 + the node the bits describe (0: none yet).
    home_plus_one: Vec<u16>,
}

const LINES_PER_PAGE_SHIFT: u32 = 6; // 64 lines of 64 B in 4 KiB
const FIRST_PAGE: u64 = VA_BASE >> 12;

impl MemoryDirectory {
    /// A directory for the data lines below the virtual address `va_end`.
    pub fn new(va_end: u64) -> MemoryDirectory {
        MemoryDirectory {
            pages: (va_end >> 12).saturating_sub(FIRST_PAGE),
            remote_bits: Vec::new(),
            home_plus_one: Vec::new(),
        }
    }

    /// A read of `line` (its 64 B address ÷ 64), homed on node `home`, by a socket other than
    /// `home`, that missed the reader's caches. True when the home must write the line back
    /// to update its directory state (I → A).
    #[inline]
    pub fn remote_read(&mut self, line: u64, home: usize) -> bool {
        let page = (line >> LINES_PER_PAGE_SHIFT).wrapping_sub(FIRST_PAGE);
        if page >= self.pages {
            return false; // a page-table line
        }
        let page = page as usize;
        if page >= self.remote_bits.len() {
            self.remote_bits.resize(page + 1, 0);
            self.home_plus_one.resize(page + 1, 0);
        }
        let tag = home as u16 + 1;
        if self.home_plus_one[page] != tag {
            // a new frame (first remote read of the page, or the page moved): all lines in I
            self.home_plus_one[page] = tag;
            self.remote_bits[page] = 0;
        }
        let bit = 1u64 << (line & 63);
        let word = &mut self.remote_bits[page];
        let update = *word & bit == 0;
        *word |= bit;
        update
    }

    /// `line` was written back to its home: the writer held the only copy, state I.
    #[inline]
    pub fn write_back(&mut self, line: u64) {
        let page = (line >> LINES_PER_PAGE_SHIFT).wrapping_sub(FIRST_PAGE) as usize;
        if let Some(word) = self.remote_bits.get_mut(page) {
            *word &= !(1u64 << (line & 63));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L0: u64 = VA_BASE >> 6;

    #[test]
    fn a_remote_read_updates_the_directory_once_until_the_line_is_written_back() {
        let mut d = MemoryDirectory::new(VA_BASE + (1 << 30));
        assert!(d.remote_read(L0 + 3, 1), "I → A: the home writes the line");
        assert!(!d.remote_read(L0 + 3, 1), "already A: nothing to write");
        assert!(d.remote_read(L0 + 4, 1), "each line has its own state");
        d.write_back(L0 + 3);
        assert!(d.remote_read(L0 + 3, 1), "written back (I), read again (A)");
        assert!(!d.remote_read(L0 + 4, 1));
    }

    #[test]
    fn a_page_on_another_node_starts_with_every_line_in_state_i() {
        let mut d = MemoryDirectory::new(VA_BASE + (1 << 30));
        assert!(d.remote_read(L0 + 64 * 10, 1));
        assert!(!d.remote_read(L0 + 64 * 10, 1));
        // the page migrated to node 0: its new frame's directory says I everywhere
        assert!(d.remote_read(L0 + 64 * 10, 0));
    }

    #[test]
    fn a_write_back_of_a_line_never_read_remotely_is_harmless() {
        let mut d = MemoryDirectory::new(VA_BASE + (1 << 30));
        d.write_back(L0 + 1_000_000);
        d.write_back(0); // below the mapped space: ignored
        assert!(d.remote_read(L0, 1));
    }

    #[test]
    fn page_table_lines_above_the_mapped_space_have_no_directory_state() {
        let mut d = MemoryDirectory::new(VA_BASE + (1 << 30));
        let pt_line = (VA_BASE + (1 << 30)) >> 6;
        assert!(!d.remote_read(pt_line, 1));
        assert!(!d.remote_read(0, 1), "below the mapped space");
    }
}
