//! `/proc/sys/kernel/numa_balancing`: automatic NUMA balancing's switch
//! (reference/policies.md section 2.1). Bit 0 = NUMA_BALANCING_NORMAL, bit 1 =
//! NUMA_BALANCING_MEMORY_TIERING (5.18+).

use crate::error::{Error, ParseError};
use crate::sysroot::SysRoot;
use serde::Serialize;

/// The sysctl, relative to a [`SysRoot`].
pub const NUMA_BALANCING: &str = "proc/sys/kernel/numa_balancing";

/// The balancing mode.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub enum NumaBalancing {
    /// 0: off.
    Off,
    /// 1: move pages and tasks towards the nodes that use them.
    Normal,
    /// 2: promote hot pages from slow tiers only.
    MemoryTiering,
    /// 3: both.
    NormalAndTiering,
}

impl NumaBalancing {
    /// The sysctl value.
    pub fn value(self) -> u8 {
        match self {
            NumaBalancing::Off => 0,
            NumaBalancing::Normal => 1,
            NumaBalancing::MemoryTiering => 2,
            NumaBalancing::NormalAndTiering => 3,
        }
    }
}

/// Parse the sysctl's text.
pub fn parse_numa_balancing(text: &str, file: &str) -> Result<NumaBalancing, ParseError> {
    match text.trim() {
        "0" => Ok(NumaBalancing::Off),
        "1" => Ok(NumaBalancing::Normal),
        "2" => Ok(NumaBalancing::MemoryTiering),
        "3" => Ok(NumaBalancing::NormalAndTiering),
        other => Err(ParseError::new(file, 1, "0, 1, 2 or 3", other)),
    }
}

/// Read the mode; `Ok(None)` when the kernel lacks CONFIG_NUMA_BALANCING (no file).
pub fn read_numa_balancing(root: &SysRoot) -> Result<Option<NumaBalancing>, Error> {
    match root.read_optional(NUMA_BALANCING)? {
        None => Ok(None),
        Some(t) => Ok(Some(
            parse_numa_balancing(&t, NUMA_BALANCING)
                .map_err(|e| e.in_file(root.path(NUMA_BALANCING).display()))?,
        )),
    }
}

/// Set the mode (needs root; values 2 and 3 need Linux 5.18+).
pub fn write_numa_balancing(root: &SysRoot, mode: NumaBalancing) -> Result<(), Error> {
    root.write(NUMA_BALANCING, &mode.value().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes() {
        for m in [
            NumaBalancing::Off,
            NumaBalancing::Normal,
            NumaBalancing::MemoryTiering,
            NumaBalancing::NormalAndTiering,
        ] {
            assert_eq!(
                parse_numa_balancing(&format!("{}\n", m.value()), "x").unwrap(),
                m
            );
        }
        assert!(parse_numa_balancing("4", "x").is_err());
        assert!(parse_numa_balancing("", "x").is_err());
    }
}
