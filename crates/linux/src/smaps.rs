//! `/proc/PID/smaps` (and `smaps_rollup`): per-VMA memory accounting, notably huge pages
//! (`AnonHugePages`, `THPeligible`, `KernelPageSize`).
//!
//! ```text
//! 7f0000000000-7f0000400000 rw-p 00000000 00:00 0
//! Size:               4096 kB
//! KernelPageSize:        4 kB
//! AnonHugePages:      2048 kB
//! THPeligible:           1
//! VmFlags: rd wr mr mw me ac hg
//! ```

use crate::error::{Error, ParseError};
use crate::parse::parse_u64;
use crate::sysroot::{Pid, SysRoot};
use serde::Serialize;
use std::collections::BTreeMap;

/// One VMA of smaps.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct SmapsVma {
    /// First address.
    pub start: u64,
    /// One past the last address.
    pub end: u64,
    /// `rw-p` etc.
    pub perms: String,
    /// File offset of `start`.
    pub offset: u64,
    /// `major:minor` of the backing device.
    pub dev: String,
    /// Inode of the backing file (0 for anonymous memory).
    pub inode: u64,
    /// Path or pseudo-name (`[heap]`, `[stack]`, `[anon:...]`), as printed.
    pub path: Option<String>,
    /// `Size`: the VMA's length.
    pub size_kb: Option<u64>,
    /// `KernelPageSize`.
    pub kernel_page_size_kb: Option<u64>,
    /// `MMUPageSize`.
    pub mmu_page_size_kb: Option<u64>,
    /// `Rss`: resident.
    pub rss_kb: Option<u64>,
    /// `Pss`: proportional share of resident.
    pub pss_kb: Option<u64>,
    /// `Anonymous`.
    pub anonymous_kb: Option<u64>,
    /// Anonymous memory mapped by PMD-sized THPs.
    pub anon_huge_pages_kb: Option<u64>,
    /// `Swap`.
    pub swap_kb: Option<u64>,
    /// Whether the VMA may get THPs (`THPeligible`, 4.20+).
    pub thp_eligible: Option<bool>,
    /// `VmFlags` mnemonics (`hg` = MADV_HUGEPAGE, `nh` = MADV_NOHUGEPAGE, ...).
    pub vm_flags: Vec<String>,
    /// Every `Name: value kB` line, by name.
    pub fields_kb: BTreeMap<String, u64>,
    /// Other `Name: value` lines (`ProtectionKey`, ...), as printed.
    pub other: BTreeMap<String, String>,
}

impl SmapsVma {
    /// Length of the VMA in bytes, from its address range.
    pub fn len_bytes(&self) -> u64 {
        self.end.saturating_sub(self.start)
    }

    /// Whether `addr` falls in the VMA.
    pub fn contains(&self, addr: u64) -> bool {
        (self.start..self.end).contains(&addr)
    }

    /// A kernel-provided mapping whose pages are not the process's to move: vsyscall, vdso,
    /// vvar, uprobes, and I/O or raw-PFN mappings (VmFlags `io`, `pf`).
    pub fn is_kernel_special(&self) -> bool {
        matches!(
            self.path.as_deref(),
            Some("[vsyscall]" | "[vdso]" | "[vvar]" | "[vvar_vclock]" | "[uprobes]")
        ) || self.vm_flags.iter().any(|f| f == "io" || f == "pf")
    }
}

fn parse_header(line: &str, file: &str, ln: usize) -> Result<SmapsVma, ParseError> {
    let expected = "a VMA header 'start-end perms offset dev inode [path]'";
    let mut it = line.splitn(6, ' ');
    let range = it.next().unwrap_or("");
    let (Some(perms), Some(offset), Some(dev), Some(inode)) =
        (it.next(), it.next(), it.next(), it.next())
    else {
        return Err(ParseError::new(file, ln, expected, line));
    };
    let (s, e) = range
        .split_once('-')
        .ok_or_else(|| ParseError::new(file, ln, expected, line))?;
    let hex =
        |t: &str| u64::from_str_radix(t, 16).map_err(|_| ParseError::new(file, ln, expected, line));
    let (start, end, offset) = (hex(s)?, hex(e)?, hex(offset)?);
    if end < start || perms.len() != 4 || !dev.contains(':') {
        return Err(ParseError::new(file, ln, expected, line));
    }
    let inode = parse_u64(inode, file, ln, "the inode number")?;
    let path = it
        .next()
        .map(|p| p.trim_start().to_string())
        .filter(|p| !p.is_empty());
    Ok(SmapsVma {
        start,
        end,
        perms: perms.to_string(),
        offset,
        dev: dev.to_string(),
        inode,
        path,
        ..Default::default()
    })
}

/// Parse the whole file.
pub fn parse_smaps(text: &str, file: &str) -> Result<Vec<SmapsVma>, ParseError> {
    let mut out: Vec<SmapsVma> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let first = line.split_whitespace().next().unwrap_or("");
        if !first.ends_with(':') {
            out.push(parse_header(line, file, ln)?);
            continue;
        }
        let Some(vma) = out.last_mut() else {
            return Err(ParseError::new(
                file,
                ln,
                "a VMA header before its fields",
                line,
            ));
        };
        let name = first.trim_end_matches(':');
        let value = line[line.find(':').map_or(0, |p| p + 1)..].trim();
        if name == "VmFlags" {
            vma.vm_flags = value.split_whitespace().map(str::to_string).collect();
            continue;
        }
        if let Some(num) = value
            .strip_suffix(" kB")
            .or_else(|| (value == "kB").then_some(""))
        {
            let kb = parse_u64(num, file, ln, &format!("the value of {name} in kB"))?;
            vma.fields_kb.insert(name.to_string(), kb);
            let slot = match name {
                "Size" => &mut vma.size_kb,
                "KernelPageSize" => &mut vma.kernel_page_size_kb,
                "MMUPageSize" => &mut vma.mmu_page_size_kb,
                "Rss" => &mut vma.rss_kb,
                "Pss" => &mut vma.pss_kb,
                "Anonymous" => &mut vma.anonymous_kb,
                "AnonHugePages" => &mut vma.anon_huge_pages_kb,
                "Swap" => &mut vma.swap_kb,
                _ => continue,
            };
            *slot = Some(kb);
        } else if name == "THPeligible" {
            vma.thp_eligible = Some(match value {
                "0" => false,
                "1" => true,
                _ => return Err(ParseError::new(file, ln, "THPeligible 0 or 1", value)),
            });
        } else {
            vma.other.insert(name.to_string(), value.to_string());
        }
    }
    Ok(out)
}

/// Read `/proc/PID/smaps` under `root`.
pub fn read_smaps(root: &SysRoot, pid: Pid) -> Result<Vec<SmapsVma>, Error> {
    let rel = format!("proc/{}/smaps", pid.proc_dir());
    let t = root.read(&rel)?;
    parse_smaps(&t, &rel).map_err(|e| e.in_file(root.path(&rel).display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_special_mappings() {
        let vma = |path: Option<&str>, flags: &[&str]| SmapsVma {
            path: path.map(str::to_string),
            vm_flags: flags.iter().map(|f| f.to_string()).collect(),
            ..Default::default()
        };
        assert!(vma(Some("[vdso]"), &["rd", "ex"]).is_kernel_special());
        assert!(vma(Some("[vvar]"), &["rd"]).is_kernel_special());
        assert!(vma(None, &["rd", "wr", "io", "pf"]).is_kernel_special());
        assert!(!vma(Some("[heap]"), &["rd", "wr"]).is_kernel_special());
        assert!(!vma(None, &["rd", "wr", "mr"]).is_kernel_special());
    }

    #[test]
    fn vmas_and_fields() {
        let t = "\
7f0000000000-7f0000400000 rw-p 00000000 00:00 0 
Size:               4096 kB
KernelPageSize:        4 kB
AnonHugePages:      2048 kB
THPeligible:           1
ProtectionKey:         0
VmFlags: rd wr mr mw me ac hg
563f739eb000-563f739ed000 r--p 00001000 fe:00 247026                     /usr/bin/my cat
Size:                  8 kB
THPeligible:    0
";
        let v = parse_smaps(t, "smaps").unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!(v[0].len_bytes(), 4 << 20);
        assert_eq!(v[0].anon_huge_pages_kb, Some(2048));
        assert_eq!(v[0].thp_eligible, Some(true));
        assert!(v[0].vm_flags.iter().any(|f| f == "hg"));
        assert_eq!(v[0].path, None);
        assert_eq!(v[0].other["ProtectionKey"], "0");
        assert_eq!(v[1].path.as_deref(), Some("/usr/bin/my cat"));
        assert_eq!((v[1].offset, v[1].inode), (0x1000, 247026));
        assert_eq!(v[1].thp_eligible, Some(false));
    }

    #[test]
    fn malformed() {
        let e = parse_smaps("Size: 4 kB\n", "smaps").unwrap_err();
        assert_eq!(e.line, 1);
        assert!(parse_smaps("1000-0 rw-p 0 00:00 0\n", "smaps").is_err());
        let e = parse_smaps("1000-2000 rw-p 0 00:00 0\nSize: x kB\n", "smaps").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse_smaps("1000-2000 rw-p 0 00:00 0\nTHPeligible: 2\n", "smaps").is_err());
        assert!(parse_smaps("garbage\n", "smaps").is_err());
    }
}
