//! Small parsers shared by the readers: the kernel's list format (`0-3,6`), numbers, and
//! `key value` lines. All of them return errors, never panic, whatever the input.

use crate::error::ParseError;
use numalab_core::nodemask::MAX_NODES;
use numalab_core::{CpuId, NodeId, NodeMask};

pub use numalab_core::ids::MAX_CPU_ID;

/// Split a kernel list (`0-3,6`) into inclusive ranges, checking each bound against `limit`.
fn parse_ranges(
    text: &str,
    file: &str,
    what: &str,
    limit: u64,
) -> Result<Vec<(u64, u64)>, ParseError> {
    let s = text.trim();
    let mut out = Vec::new();
    if s.is_empty() {
        return Ok(out);
    }
    let expected = || format!("a {what} list such as 0-3,6 ({what}s below {limit})");
    for part in s.split(',') {
        let part_t = part.trim();
        let (lo, hi) = match part_t.split_once('-') {
            Some((a, b)) => (a, b),
            None => (part_t, part_t),
        };
        let lo: u64 = lo
            .parse()
            .map_err(|_| ParseError::new(file, 1, expected(), part_t))?;
        let hi: u64 = hi
            .parse()
            .map_err(|_| ParseError::new(file, 1, expected(), part_t))?;
        if lo > hi || hi >= limit {
            return Err(ParseError::new(file, 1, expected(), part_t));
        }
        out.push((lo, hi));
    }
    Ok(out)
}

/// Parse a node list as sysfs prints it (`0-3,6`; an empty file is the empty mask).
pub fn parse_node_list(text: &str, file: &str) -> Result<NodeMask, ParseError> {
    let mut m = NodeMask::empty();
    for (lo, hi) in parse_ranges(text, file, "node", MAX_NODES as u64)? {
        for n in lo..=hi {
            // Bounded by MAX_NODES above, so NodeMask::set cannot panic.
            m.set(NodeId(n as u16));
        }
    }
    Ok(m)
}

/// Parse a CPU list (`cpulist`, `thread_siblings_list`): ids in increasing order, no duplicates.
pub fn parse_cpu_list(text: &str, file: &str) -> Result<Vec<CpuId>, ParseError> {
    // A bitmap bounds memory whatever the input repeats (`0-65535,0-65535,...`).
    let mut bits = vec![0u64; (MAX_CPU_ID as usize).div_ceil(64)];
    for (lo, hi) in parse_ranges(text, file, "CPU", MAX_CPU_ID as u64)? {
        for c in lo..=hi {
            bits[(c / 64) as usize] |= 1 << (c % 64);
        }
    }
    let mut cpus = Vec::new();
    for (w, word) in bits.iter().enumerate() {
        let mut x = *word;
        while x != 0 {
            let b = x.trailing_zeros();
            cpus.push(CpuId(w as u32 * 64 + b));
            x &= x - 1;
        }
    }
    Ok(cpus)
}

/// Parse an unsigned decimal number.
pub(crate) fn parse_u64(tok: &str, file: &str, line: usize, what: &str) -> Result<u64, ParseError> {
    tok.trim()
        .parse()
        .map_err(|_| ParseError::new(file, line, format!("{what} (an unsigned integer)"), tok))
}

/// Parse `key value` lines (`/proc/vmstat`, `nodeN/numastat`) in file order.
pub(crate) fn parse_key_values(text: &str, file: &str) -> Result<Vec<(String, u64)>, ParseError> {
    Ok(parse_key_value_lines(text, file)?
        .into_iter()
        .map(|(_, k, v)| (k, v))
        .collect())
}

/// As [`parse_key_values`], with each pair's 1-based line number.
pub(crate) fn parse_key_value_lines(
    text: &str,
    file: &str,
) -> Result<Vec<(usize, String, u64)>, ParseError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let ln = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let mut it = line.split_whitespace();
        let (Some(k), Some(v), None) = (it.next(), it.next(), it.next()) else {
            return Err(ParseError::new(file, ln, "'name value'", line));
        };
        out.push((
            ln,
            k.to_string(),
            parse_u64(v, file, ln, &format!("the value of {k}"))?,
        ));
    }
    Ok(out)
}

/// Parse a file holding one unsigned number.
pub(crate) fn parse_single_u64(text: &str, file: &str, what: &str) -> Result<u64, ParseError> {
    parse_u64(text.trim(), file, 1, what)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_lists() {
        assert_eq!(
            parse_node_list("0-3,6\n", "online").unwrap().to_string(),
            "0-3,6"
        );
        assert!(parse_node_list("\n", "has_cpu").unwrap().is_empty());
        let e = parse_node_list("0-300", "online").unwrap_err();
        assert_eq!(e.file, "online");
        assert!(e.expected.contains("node list"), "{e}");
        assert!(parse_node_list("3-1", "online").is_err());
        assert!(parse_node_list("0,,1", "online").is_err());
        assert!(parse_node_list("-1", "online").is_err());
    }

    #[test]
    fn cpu_lists() {
        let c = parse_cpu_list("0-1,4,3\n", "cpulist").unwrap();
        assert_eq!(c, vec![CpuId(0), CpuId(1), CpuId(3), CpuId(4)]);
        assert!(parse_cpu_list("", "cpulist").unwrap().is_empty());
        assert!(parse_cpu_list("0-4294967295", "cpulist").is_err());
    }

    #[test]
    fn key_values() {
        let kv = parse_key_values("numa_hit 5\nnuma_miss 0\n", "vmstat").unwrap();
        assert_eq!(kv, vec![("numa_hit".into(), 5), ("numa_miss".into(), 0)]);
        let e = parse_key_values("numa_hit 5\nnuma_miss x\n", "vmstat").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse_key_values("a 1 2\n", "vmstat").is_err());
    }
}
