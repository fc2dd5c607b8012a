//! The NUMA, migration, THP and tiering counters of `/proc/vmstat`
//! (reference/policies.md section 2.11). Counters a kernel lacks stay None; keys numalab does
//! not name are kept in [`VmStat::other`].

use crate::error::{Error, ParseError};
use crate::parse::parse_key_value_lines;
use crate::sysroot::SysRoot;
use serde::Serialize;
use std::collections::BTreeMap;

/// `/proc/vmstat`, relative to a [`SysRoot`].
pub const VMSTAT: &str = "proc/vmstat";

macro_rules! vmstat {
    ($($(#[$m:meta])* $field:ident,)*) => {
        /// Counters of `/proc/vmstat` (each a count since boot).
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct VmStat {
            $($(#[$m])* pub $field: Option<u64>,)*
            /// `thp_*` counters (fault_alloc, collapse_alloc, split_page, migration_*, ...).
            pub thp: BTreeMap<String, u64>,
            /// `pgpromote_*` counters (success, candidate, ...).
            pub pgpromote: BTreeMap<String, u64>,
            /// `pgdemote_*` counters (kswapd, direct, khugepaged, ...).
            pub pgdemote: BTreeMap<String, u64>,
            /// Every other key.
            pub other: BTreeMap<String, u64>,
        }

        impl VmStat {
            /// Any counter by its /proc/vmstat name.
            pub fn get(&self, name: &str) -> Option<u64> {
                match name {
                    $(stringify!($field) => self.$field,)*
                    _ => {
                        if let Some(k) = name.strip_prefix("thp_") {
                            self.thp.get(k).copied()
                        } else if let Some(k) = name.strip_prefix("pgpromote_") {
                            self.pgpromote.get(k).copied()
                        } else if let Some(k) = name.strip_prefix("pgdemote_") {
                            self.pgdemote.get(k).copied()
                        } else {
                            self.other.get(name).copied()
                        }
                    }
                }
            }

            fn set(&mut self, name: &str, v: u64) {
                match name {
                    $(stringify!($field) => self.$field = Some(v),)*
                    _ => {
                        if let Some(k) = name.strip_prefix("thp_") {
                            self.thp.insert(k.to_string(), v);
                        } else if let Some(k) = name.strip_prefix("pgpromote_") {
                            self.pgpromote.insert(k.to_string(), v);
                        } else if let Some(k) = name.strip_prefix("pgdemote_") {
                            self.pgdemote.insert(k.to_string(), v);
                        } else {
                            self.other.insert(name.to_string(), v);
                        }
                    }
                }
            }

            /// Every counter as (name, value), named ones first.
            pub fn iter(&self) -> Vec<(String, u64)> {
                let mut v = Vec::new();
                $(if let Some(x) = self.$field { v.push((stringify!($field).to_string(), x)); })*
                v.extend(self.thp.iter().map(|(k, x)| (format!("thp_{k}"), *x)));
                v.extend(self.pgpromote.iter().map(|(k, x)| (format!("pgpromote_{k}"), *x)));
                v.extend(self.pgdemote.iter().map(|(k, x)| (format!("pgdemote_{k}"), *x)));
                v.extend(self.other.iter().map(|(k, x)| (k.clone(), *x)));
                v
            }
        }
    };
}

vmstat!(
    /// Allocations that got the intended node.
    numa_hit,
    /// Allocations that landed here although another node was intended.
    numa_miss,
    /// Allocations intended here that landed elsewhere.
    numa_foreign,
    /// Interleave allocations on their intended node.
    numa_interleave,
    /// Allocations on the allocating CPU's node.
    numa_local,
    /// Allocations here for a CPU of another node.
    numa_other,
    /// PTEs made inaccessible by the balancing scanner (a THP counts 512).
    numa_pte_updates,
    /// PMDs made inaccessible by the balancing scanner.
    numa_huge_pte_updates,
    /// NUMA hinting faults.
    numa_hint_faults,
    /// Hinting faults on pages already local.
    numa_hint_faults_local,
    /// Pages migrated by automatic balancing.
    numa_pages_migrated,
    /// Pages migrated by any path.
    pgmigrate_success,
    /// Pages that failed to migrate.
    pgmigrate_fail,
);

impl VmStat {
    /// Counters that grew between `earlier` and `self` (saturating at 0 if one went backwards).
    pub fn since(&self, earlier: &VmStat) -> Vec<(String, u64)> {
        self.iter()
            .into_iter()
            .map(|(k, v)| {
                let before = earlier.get(&k).unwrap_or(0);
                (k, v.saturating_sub(before))
            })
            .collect()
    }
}

/// Parse `/proc/vmstat` text. A key given twice is malformed.
pub fn parse_vmstat(text: &str, file: &str) -> Result<VmStat, ParseError> {
    let mut s = VmStat::default();
    let mut seen = std::collections::HashSet::new();
    for (ln, k, v) in parse_key_value_lines(text, file)? {
        if !seen.insert(k.clone()) {
            return Err(ParseError::new(file, ln, format!("{k} only once"), &k));
        }
        s.set(&k, v);
    }
    Ok(s)
}

/// Read `/proc/vmstat` under `root`.
pub fn read_vmstat(root: &SysRoot) -> Result<VmStat, Error> {
    let t = root.read(VMSTAT)?;
    parse_vmstat(&t, VMSTAT).map_err(|e| e.in_file(root.path(VMSTAT).display()).into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn named_grouped_and_other() {
        let t = "nr_free_pages 10\nnuma_hit 5\nthp_fault_alloc 2\npgpromote_success 1\npgdemote_kswapd 3\npgmigrate_fail 0\n";
        let s = parse_vmstat(t, "vmstat").unwrap();
        assert_eq!(s.numa_hit, Some(5));
        assert_eq!(s.numa_miss, None);
        assert_eq!(s.pgmigrate_fail, Some(0));
        assert_eq!(s.thp["fault_alloc"], 2);
        assert_eq!(s.get("thp_fault_alloc"), Some(2));
        assert_eq!(s.get("pgdemote_kswapd"), Some(3));
        assert_eq!(s.get("nr_free_pages"), Some(10));
        assert_eq!(s.iter().len(), 6);
        let later = parse_vmstat("numa_hit 9\nnr_free_pages 4\n", "vmstat").unwrap();
        let d: BTreeMap<_, _> = later.since(&s).into_iter().collect();
        assert_eq!(d["numa_hit"], 4);
        assert_eq!(d["nr_free_pages"], 0);
    }

    #[test]
    fn malformed() {
        let e = parse_vmstat("numa_hit 5\nnuma_hit 6\n", "vmstat").unwrap_err();
        assert_eq!(e.line, 2);
        assert!(parse_vmstat("numa_hit -1\n", "vmstat").is_err());
        assert!(parse_vmstat("numa_hit\n", "vmstat").is_err());
    }
}
