//! `numalab balance`: a placement policy of `numalab-policies` (Carrefour, Carrefour-LP, ...)
//! run unchanged on a live Linux process, through the same `core::view` interface the
//! simulator implements (DESIGN.md: "one policy code path for simulation and for the real
//! kernel"). Until a live sampler exists, the samples come from a file (numalab's Arrow
//! samples or perf.data), replayed one policy period at a time. docs/balance.md.
//!
//! | module | what |
//! |---|---|
//! | [`replay`] | the sample file cut into policy periods; pid matching |
//! | [`counters`] | per-thread perf counting events (instructions, cycles, LLC misses), or why not |
//! | [`view`] | [`LinuxView`]: `MemoryView` of a pid from sysfs, procfs and move_pages |
//! | [`exec`] | [`Executor`]: each `Action` carried out on the process, or skipped with the reason |
//! | [`balance`] | validation of everything up front, then the tick loop and its reports |

pub mod balance;
pub mod counters;
pub mod exec;
pub mod replay;
pub mod view;

pub use balance::{BalanceOptions, Balancer, StopReason, TickReport};
pub use counters::CounterReport;
pub use exec::{Executor, Outcome, OutcomeKind};
pub use replay::Replay;
pub use view::{HostTopology, LinuxView};

/// Every error of this crate: one line saying what is wrong and, where it helps, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Error {}

impl From<numalab_linux::Error> for Error {
    fn from(e: numalab_linux::Error) -> Self {
        Error(e.to_string())
    }
}

impl From<numalab_analyze::Error> for Error {
    fn from(e: numalab_analyze::Error) -> Self {
        Error(e.to_string())
    }
}

/// Whether `pid` names a live (not zombie) process.
pub fn pid_alive(pid: i32) -> bool {
    if pid <= 0 {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // the state is the first field after the parenthesised command name
        Ok(s) => s
            .rfind(')')
            .and_then(|i| s[i + 1..].split_whitespace().next())
            .is_some_and(|st| st != "Z" && st != "X"),
        Err(_) => false,
    }
}
