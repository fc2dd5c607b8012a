//! /proc/self/maps, read on the marking path (never in the signal handler).

use std::io;

/// One line of /proc/self/maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mapping {
    pub start: usize,
    pub end: usize,
    /// `rwxp` / `rw-s` ...
    pub perms: [u8; 4],
    /// Path or pseudo-name (`[heap]`, `[stack]`); empty for anonymous memory.
    pub path: String,
}

impl Mapping {
    pub fn readable(&self) -> bool {
        self.perms[0] == b'r'
    }
    pub fn writable(&self) -> bool {
        self.perms[1] == b'w'
    }
    pub fn executable(&self) -> bool {
        self.perms[2] == b'x'
    }
    /// The protection bits of this mapping, as mprotect takes them.
    pub fn prot(&self) -> libc::c_int {
        let mut p = libc::PROT_NONE;
        if self.readable() {
            p |= libc::PROT_READ;
        }
        if self.writable() {
            p |= libc::PROT_WRITE;
        }
        if self.executable() {
            p |= libc::PROT_EXEC;
        }
        p
    }
    pub fn perms_str(&self) -> String {
        String::from_utf8_lossy(&self.perms).into_owned()
    }
}

/// Parse the text of a maps file. Lines that do not parse are skipped (the kernel's format has
/// been stable since 2.6; skipping keeps a new pseudo-file from breaking marking).
pub fn parse(text: &str) -> Vec<Mapping> {
    text.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Mapping> {
    let mut it = line.splitn(6, ' ');
    let range = it.next()?;
    let perms = it.next()?.as_bytes();
    let (_offset, _dev, _inode) = (it.next()?, it.next()?, it.next()?);
    let path = it.next().unwrap_or("").trim_start().to_string();
    let (a, b) = range.split_once('-')?;
    if perms.len() < 4 {
        return None;
    }
    Some(Mapping {
        start: usize::from_str_radix(a, 16).ok()?,
        end: usize::from_str_radix(b, 16).ok()?,
        perms: [perms[0], perms[1], perms[2], perms[3]],
        path,
    })
}

/// The calling process's mappings, in address order.
pub fn read_self() -> io::Result<Vec<Mapping>> {
    Ok(parse(&std::fs::read_to_string("/proc/self/maps")?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_anonymous_named_and_file_lines() {
        let text = "55d4c8a00000-55d4c8a21000 rw-p 00000000 00:00 0                          [heap]\n\
                    7f1200000000-7f1200021000 rw-p 00000000 00:00 0 \n\
                    7f1300000000-7f1300001000 r-xp 00001000 08:01 1234                       /usr/lib/libc.so.6\n\
                    garbage\n";
        let m = parse(text);
        assert_eq!(m.len(), 3);
        assert_eq!(m[0].start, 0x55d4c8a00000);
        assert_eq!(m[0].end, 0x55d4c8a21000);
        assert_eq!(m[0].path, "[heap]");
        assert_eq!(m[0].prot(), libc::PROT_READ | libc::PROT_WRITE);
        assert_eq!(m[1].path, "");
        assert_eq!(&m[1].perms, b"rw-p");
        assert_eq!(m[2].path, "/usr/lib/libc.so.6");
        assert_eq!(m[2].prot(), libc::PROT_READ | libc::PROT_EXEC);
    }
}
