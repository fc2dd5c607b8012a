//! Page (folio) sizes of x86-64: base pages, PMD-mapped huge pages, PUD-mapped giant pages.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The discriminant is the size's index (0, 1, 2) and each size is 2^9 times the one
/// before, so `index` and `shift` are arithmetic, not matches (the simulator asks on every
/// reference).
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[repr(u8)]
pub enum PageSize {
    #[serde(rename = "4K")]
    Base4K = 0,
    #[serde(rename = "2M")]
    Huge2M = 1,
    #[serde(rename = "1G")]
    Giant1G = 2,
}

impl PageSize {
    pub const ALL: [PageSize; 3] = [PageSize::Base4K, PageSize::Huge2M, PageSize::Giant1G];

    #[inline]
    pub const fn shift(self) -> u32 {
        12 + 9 * self as u32
    }

    #[inline]
    pub const fn bytes(self) -> u64 {
        1u64 << self.shift()
    }

    /// Number of 4 KiB base pages in one page of this size (a THP counts 512).
    #[inline]
    pub const fn base_pages(self) -> u64 {
        1u64 << (self.shift() - 12)
    }

    /// Page-table levels a TLB miss walks for this size (4-level paging): PTE 4, PMD 3, PUD 2.
    #[inline]
    pub const fn walk_levels(self) -> u32 {
        match self {
            PageSize::Base4K => 4,
            PageSize::Huge2M => 3,
            PageSize::Giant1G => 2,
        }
    }

    /// Index 0, 1, 2 for per-size arrays.
    #[inline]
    pub const fn index(self) -> usize {
        self as usize
    }

    /// Start of the page of this size containing `addr`.
    #[inline]
    pub const fn align_down(self, addr: u64) -> u64 {
        addr & !(self.bytes() - 1)
    }
}

impl fmt::Display for PageSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            PageSize::Base4K => "4K",
            PageSize::Huge2M => "2M",
            PageSize::Giant1G => "1G",
        })
    }
}

impl FromStr for PageSize {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_uppercase().as_str() {
            "4K" | "4KB" | "4KIB" | "4096" => Ok(PageSize::Base4K),
            "2M" | "2MB" | "2MIB" => Ok(PageSize::Huge2M),
            "1G" | "1GB" | "1GIB" => Ok(PageSize::Giant1G),
            _ => Err(format!("unknown page size '{s}': expected 4K, 2M or 1G")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_and_alignment() {
        assert_eq!(PageSize::Huge2M.base_pages(), 512);
        assert_eq!(PageSize::Giant1G.bytes(), 1 << 30);
        assert_eq!(PageSize::Huge2M.align_down(0x40_1234), 0x40_0000);
        assert_eq!("2m".parse::<PageSize>().unwrap(), PageSize::Huge2M);
        assert!("3M".parse::<PageSize>().is_err());
        let shifts: Vec<u32> = PageSize::ALL.iter().map(|s| s.shift()).collect();
        assert_eq!(shifts, [12, 21, 30]);
        let idx: Vec<usize> = PageSize::ALL.iter().map(|s| s.index()).collect();
        assert_eq!(idx, [0, 1, 2]);
    }
}
