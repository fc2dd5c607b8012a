//! `numalab record`: samples the memory accesses of a real process with `perf_event_open` and
//! writes numalab's own sample file (an Arrow IPC stream, `numalab_analyze::format`) plus the
//! placement stream beside it, for `numalab analyze FILE`.
//!
//! - [`build_id`]: the build ids of the binaries it mapped, for perf.data's HEADER_BUILD_ID;
//! - [`mechanism`]: which event gives data addresses here (Intel PEBS, AMD IBS, or the
//!   software page-fault event) and why the better ones are not available;
//! - [`perf_event`]: the syscall, the ring buffer and its records;
//! - [`snapshot`]: where the sampled pages are (`move_pages` queries, numa_maps, maps);
//! - [`uncore`]: per-node memory-controller traffic where the PMU counts it;
//! - [`session`]: the recording loop, for a command it starts or a running process.
//!
//! Use and limits: docs/record.md.

pub mod build_id;
pub mod mechanism;
pub mod perf_event;
pub mod session;
pub mod snapshot;
pub mod uncore;

pub use mechanism::{EventChoice, Mechanism};
pub use session::{record, Event, Progress, RecordOptions, RecordSummary, Target};

/// Everything that can stop a recording. Each names what to do where there is a remedy.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("{program}: command not found{where_}")]
    CommandNotFound { program: String, where_: String },
    #[error("cannot execute {program}: {err}")]
    Exec {
        program: String,
        err: std::io::Error,
    },
    #[error("process {0} does not exist (or has already exited)")]
    NoSuchProcess(i32),
    #[error("perf_event_open of {event} on {target}: {what} (errno {errno})")]
    PerfOpen {
        event: String,
        target: String,
        errno: i32,
        what: String,
        paranoid: Option<i32>,
    },
    #[error("--event {mechanism}: not available on this machine: {why}")]
    Unavailable { mechanism: String, why: String },
    #[error("no sampling mechanism could be opened: {0}")]
    NothingWorks(String),
    #[error("{0}")]
    Analyze(#[from] numalab_analyze::Error),
    #[error("{what}: {err}")]
    Io { what: String, err: std::io::Error },
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// The open was refused by permissions (perf_event_paranoid, ptrace access), not by a
    /// missing feature: tests skip on this, and only on this.
    pub fn is_permission(&self) -> bool {
        matches!(self, Error::PerfOpen { errno, .. } if *errno == libc::EACCES || *errno == libc::EPERM)
            || matches!(self, Error::NothingWorks(s) if s.contains("permission denied"))
    }
}

/// Opens a page-fault sampling event on the calling thread and closes it again: `Ok` when this
/// user may sample its own processes (what `numalab record -- CMD` needs at the least).
pub fn probe_page_faults() -> Result<(), Error> {
    let s = mechanism::EventSettings::for_current_user(None, 30);
    let d = mechanism::detect(
        std::path::Path::new(mechanism::EVENT_SOURCE_DIR),
        EventChoice::Only(Mechanism::PageFaults),
        &s,
    )?;
    let spec = &d.candidates[0].events[0];
    perf_event::Counter::open(spec, 0, 0, -1, false)
        .map(|_| ())
        .map_err(|errno| perf_event::open_error(spec, "this process", errno))
}
