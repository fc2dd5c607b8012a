//! Transparent huge page settings (`/sys/kernel/mm/transparent_hugepage`).
//!
//! Choice files print every option with the selected one in brackets:
//! `always [madvise] never`.

use crate::error::{Error, ParseError};
use crate::parse::parse_single_u64;
use crate::sysroot::SysRoot;
use serde::Serialize;
use std::collections::BTreeMap;

/// The THP directory, relative to a [`SysRoot`].
pub const THP_DIR: &str = "sys/kernel/mm/transparent_hugepage";

/// A bracketed choice: the options in file order and the selected one.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Choice {
    /// The bracketed option.
    pub selected: String,
    /// Every option, in file order.
    pub options: Vec<String>,
}

/// Parse `always [madvise] never`: exactly one bracketed option.
pub fn parse_choice(text: &str, file: &str) -> Result<Choice, ParseError> {
    let mut selected = None;
    let mut options = Vec::new();
    let expected = "options with exactly one in brackets, e.g. 'always [madvise] never'";
    for tok in text.split_whitespace() {
        let opt = if let Some(inner) = tok.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
            if selected.is_some() || inner.is_empty() {
                return Err(ParseError::new(file, 1, expected, text.trim()));
            }
            selected = Some(inner.to_string());
            inner
        } else {
            tok
        };
        if opt.contains('[') || opt.contains(']') {
            return Err(ParseError::new(file, 1, expected, text.trim()));
        }
        options.push(opt.to_string());
    }
    let selected = selected.ok_or_else(|| ParseError::new(file, 1, expected, text.trim()))?;
    Ok(Choice { selected, options })
}

macro_rules! choice_enum {
    ($(#[$m:meta])* $name:ident { $($(#[$vm:meta])* $var:ident = $s:literal,)* }) => {
        $(#[$m])*
        #[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
        pub enum $name { $(#[doc = concat!("`", $s, "`")] $(#[$vm])* $var,)* }

        impl $name {
            /// The kernel's spelling.
            pub fn as_str(self) -> &'static str {
                match self { $($name::$var => $s,)* }
            }

            /// From the kernel's spelling.
            pub fn from_kernel(s: &str) -> Option<Self> {
                match s { $($s => Some($name::$var),)* _ => None }
            }

            /// Parse a choice file of this kind.
            pub fn parse(text: &str, file: &str) -> Result<Self, ParseError> {
                let c = parse_choice(text, file)?;
                Self::from_kernel(&c.selected).ok_or_else(|| {
                    ParseError::new(file, 1, concat!("one of:" $(, " ", $s)*), &c.selected)
                })
            }
        }
    };
}

choice_enum!(
    /// `enabled` (and mTHP `hugepages-<size>kB/enabled`).
    ThpEnabled {
        /// THP for every eligible anonymous mapping.
        Always = "always",
        /// Only for ranges with madvise(MADV_HUGEPAGE).
        Madvise = "madvise",
        Never = "never",
        /// mTHP sizes only: follow the top-level setting.
        Inherit = "inherit",
    }
);

choice_enum!(
    /// `defrag`: how hard a fault tries to get a huge page.
    ThpDefrag {
        Always = "always",
        Defer = "defer",
        DeferMadvise = "defer+madvise",
        Madvise = "madvise",
        Never = "never",
    }
);

choice_enum!(
    /// `shmem_enabled`: THP for shmem/tmpfs.
    ShmemEnabled {
        Always = "always",
        WithinSize = "within_size",
        Advise = "advise",
        Never = "never",
        Deny = "deny",
        Force = "force",
        Inherit = "inherit",
    }
);

/// `khugepaged/*` (each None where the kernel lacks the file).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Khugepaged {
    /// `khugepaged/defrag`: whether khugepaged compacts memory to collapse.
    pub defrag: Option<bool>,
    /// `khugepaged/pages_to_scan`: pages scanned per wake-up.
    pub pages_to_scan: Option<u64>,
    /// `khugepaged/scan_sleep_millisecs`.
    pub scan_sleep_ms: Option<u64>,
    /// `khugepaged/alloc_sleep_millisecs`: back-off after a failed huge page allocation.
    pub alloc_sleep_ms: Option<u64>,
    /// `khugepaged/max_ptes_none`: empty PTEs a collapse may fill.
    pub max_ptes_none: Option<u64>,
    /// `khugepaged/max_ptes_swap`: swapped-out PTEs a collapse may read back.
    pub max_ptes_swap: Option<u64>,
    /// `khugepaged/max_ptes_shared`: shared PTEs a collapse may include.
    pub max_ptes_shared: Option<u64>,
    /// `khugepaged/full_scans`: completed passes (a counter).
    pub full_scans: Option<u64>,
    /// `khugepaged/pages_collapsed`: huge pages made (a counter).
    pub pages_collapsed: Option<u64>,
}

/// The THP settings.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ThpSettings {
    /// `enabled`: THP for anonymous memory.
    pub enabled: ThpEnabled,
    /// `defrag`: direct compaction on fault.
    pub defrag: ThpDefrag,
    /// `shmem_enabled`: THP for shmem/tmpfs.
    pub shmem_enabled: Option<ShmemEnabled>,
    /// `use_zero_page`: read faults map the huge zero page.
    pub use_zero_page: Option<bool>,
    /// `hpage_pmd_size`: the PMD huge page size (2 MiB on x86-64).
    pub hpage_pmd_size_bytes: Option<u64>,
    /// `khugepaged/*`.
    pub khugepaged: Khugepaged,
    /// Multi-size THP (6.8+): `hugepages-<size>kB/enabled`, by size in kB.
    pub per_size_enabled: BTreeMap<u64, ThpEnabled>,
}

/// Read the settings; `Ok(None)` for a kernel without THP (no directory).
pub fn read_thp(root: &SysRoot) -> Result<Option<ThpSettings>, Error> {
    let Some(names) = root.list_dir(THP_DIR)? else {
        return Ok(None);
    };
    let full = |rel: &str| root.path(rel).display().to_string();
    let num = |name: &str| -> Result<Option<u64>, Error> {
        let rel = format!("{THP_DIR}/{name}");
        match root.read_optional(&rel)? {
            None => Ok(None),
            Some(t) => Ok(Some(
                parse_single_u64(&t, &rel, name).map_err(|e| e.in_file(full(&rel)))?,
            )),
        }
    };
    let rel = format!("{THP_DIR}/enabled");
    let enabled = ThpEnabled::parse(&root.read(&rel)?, &rel).map_err(|e| e.in_file(full(&rel)))?;
    let rel = format!("{THP_DIR}/defrag");
    let defrag = ThpDefrag::parse(&root.read(&rel)?, &rel).map_err(|e| e.in_file(full(&rel)))?;
    let rel = format!("{THP_DIR}/shmem_enabled");
    let shmem_enabled = match root.read_optional(&rel)? {
        Some(t) => Some(ShmemEnabled::parse(&t, &rel).map_err(|e| e.in_file(full(&rel)))?),
        None => None,
    };
    let mut per_size_enabled = BTreeMap::new();
    for name in &names {
        let Some(kb) = name
            .strip_prefix("hugepages-")
            .and_then(|s| s.strip_suffix("kB"))
            .and_then(|s| s.parse::<u64>().ok())
        else {
            continue;
        };
        let rel = format!("{THP_DIR}/{name}/enabled");
        if let Some(t) = root.read_optional(&rel)? {
            per_size_enabled.insert(
                kb,
                ThpEnabled::parse(&t, &rel).map_err(|e| e.in_file(full(&rel)))?,
            );
        }
    }
    Ok(Some(ThpSettings {
        enabled,
        defrag,
        shmem_enabled,
        use_zero_page: num("use_zero_page")?.map(|v| v != 0),
        hpage_pmd_size_bytes: num("hpage_pmd_size")?,
        khugepaged: Khugepaged {
            defrag: num("khugepaged/defrag")?.map(|v| v != 0),
            pages_to_scan: num("khugepaged/pages_to_scan")?,
            scan_sleep_ms: num("khugepaged/scan_sleep_millisecs")?,
            alloc_sleep_ms: num("khugepaged/alloc_sleep_millisecs")?,
            max_ptes_none: num("khugepaged/max_ptes_none")?,
            max_ptes_swap: num("khugepaged/max_ptes_swap")?,
            max_ptes_shared: num("khugepaged/max_ptes_shared")?,
            full_scans: num("khugepaged/full_scans")?,
            pages_collapsed: num("khugepaged/pages_collapsed")?,
        },
        per_size_enabled,
    }))
}

/// Set `enabled` (needs root).
pub fn write_enabled(root: &SysRoot, v: ThpEnabled) -> Result<(), Error> {
    if v == ThpEnabled::Inherit {
        return Err(Error::Argument {
            syscall: "transparent_hugepage/enabled",
            problem: "'inherit' is only valid for a hugepages-<size>kB/enabled file".into(),
            remedy: "use always, madvise or never".into(),
        });
    }
    root.write(&format!("{THP_DIR}/enabled"), v.as_str())
}

/// Set `defrag` (needs root).
pub fn write_defrag(root: &SysRoot, v: ThpDefrag) -> Result<(), Error> {
    root.write(&format!("{THP_DIR}/defrag"), v.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn choices() {
        let c = parse_choice("always [madvise] never\n", "enabled").unwrap();
        assert_eq!(c.selected, "madvise");
        assert_eq!(c.options, vec!["always", "madvise", "never"]);
        assert_eq!(
            ThpDefrag::parse("always defer [defer+madvise] madvise never", "defrag").unwrap(),
            ThpDefrag::DeferMadvise
        );
        assert!(parse_choice("always madvise never", "enabled").is_err());
        assert!(parse_choice("[always] [madvise]", "enabled").is_err());
        assert!(parse_choice("[]", "enabled").is_err());
        assert!(parse_choice("[[x]]", "enabled").is_err());
        let e = ThpEnabled::parse("[sometimes] never", "enabled").unwrap_err();
        assert!(e.expected.contains("madvise"), "{e}");
    }
}
