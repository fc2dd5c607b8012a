//! CPU lists in the kernel's list syntax (`0-11,24-35`), as `/sys/devices/system/node/nodeN/cpulist`
//! and `numactl -H` print them, so node tables can be copied from a real machine.

use numalab_core::ids::MAX_CPU_ID;
use numalab_core::CpuId;

/// Parse `0-11,24-35`, `0,2,4` or the empty string (a CPU-less node). The result is sorted
/// and free of duplicates. The error says which part is wrong.
pub fn parse(spec: &str) -> Result<Vec<CpuId>, String> {
    let mut cpus = Vec::new();
    for part in spec.split(',') {
        let part = part.trim();
        if part.is_empty() {
            if spec.trim().is_empty() {
                continue;
            }
            return Err(format!("'{spec}' has an empty element"));
        }
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let num = |s: &str| {
            s.trim()
                .parse::<u32>()
                .map_err(|_| format!("'{part}' is not a CPU number or a range a-b"))
        };
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err(format!("range '{part}' is reversed"));
        }
        if hi >= MAX_CPU_ID {
            return Err(format!(
                "CPU {hi} in '{part}' is beyond the largest CPU id accepted ({})",
                MAX_CPU_ID - 1
            ));
        }
        // every id is below MAX_CPU_ID, so a list longer than that repeats one: said before
        // expanding a spec that repeats a wide range (a fuzzer's 24 million ids in 3 kB)
        if cpus.len() + (hi - lo) as usize >= MAX_CPU_ID as usize {
            return Err(format!("'{spec}' lists a CPU twice"));
        }
        cpus.extend((lo..=hi).map(CpuId));
    }
    cpus.sort();
    let before = cpus.len();
    cpus.dedup();
    if cpus.len() != before {
        return Err(format!("'{spec}' lists a CPU twice"));
    }
    Ok(cpus)
}

/// Format CPUs in list syntax, runs of consecutive ids as ranges: `0-21,44-65`.
pub fn format(cpus: &[CpuId]) -> String {
    let mut ids: Vec<u32> = cpus.iter().map(|c| c.0).collect();
    ids.sort_unstable();
    ids.dedup();
    let mut out = Vec::new();
    let mut i = 0;
    while i < ids.len() {
        let mut j = i;
        while j + 1 < ids.len() && ids[j + 1] == ids[j] + 1 {
            j += 1;
        }
        out.push(if i == j {
            ids[i].to_string()
        } else {
            format!("{}-{}", ids[i], ids[j])
        });
        i = j + 1;
    }
    out.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_list_longer_than_every_id_is_a_repeat_said_before_expanding_it() {
        assert_eq!(parse("0-65535").unwrap().len(), 65536);
        let wide = vec!["0-65535"; 375].join(",");
        assert!(parse(&wide).unwrap_err().contains("lists a CPU twice"));
        assert!(parse("0-65535,7")
            .unwrap_err()
            .contains("lists a CPU twice"));
    }

    #[test]
    fn round_trip() {
        let c = parse("0-21, 44-65").unwrap();
        assert_eq!(c.len(), 44);
        assert_eq!(format(&c), "0-21,44-65");
        assert_eq!(format(&parse("0,2,4").unwrap()), "0,2,4");
        assert!(parse("").unwrap().is_empty());
        assert!(parse("3-1").is_err());
        assert!(parse("0-x").is_err());
        assert!(parse("0,,1").is_err());
        assert!(parse("0-3,2").is_err());
    }

    #[test]
    fn ids_beyond_the_largest_accepted_are_refused_before_anything_is_allocated() {
        // found by fuzz/node_cpu_specs: this list asked for 9 GB of CPU ids
        let e = parse("0,16-2301623004").unwrap_err();
        assert!(e.contains("2301623004") && e.contains("65535"), "{e}");
        assert_eq!(parse("65535").unwrap(), vec![CpuId(65535)]);
    }
}
