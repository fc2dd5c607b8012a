//! numalab's profiler: memory-access samples in, NUMA findings out (DESIGN.md, "profile").
//!
//! - [`format`]: numalab's own sample files, Apache Arrow IPC streams (one row per
//!   [`AccessSample`](numalab_core::AccessSample)), plus an optional placement stream;
//! - [`perf`]: `perf.data` ingestion (`perf mem record`, `perf record -d`, `perf c2c record`),
//!   decoding the sample fields `linux-perf-data` skips (weight, data_src, phys_addr, page sizes);
//! - [`perf_write`]: any sample stream out as perf.data for `perf script` / `perf mem report`;
//! - [`bench`]: the seeded synthetic stream `numalab bench analyze` measures with;
//! - [`analyze`](mod@analyze): LAR, imbalance, access rate, hot pages, page sharing, mapping
//!   attribution, huge-page false sharing and what-if placement estimates, in one streaming pass.
//!
//! Every reader hands out [`Batch`]es through [`SampleSource`], so the analysis runs in memory
//! bounded by the number of distinct sampled pages, not by the number of samples.
//! File format and CLI use: docs/analyze.md.

pub mod analyze;
pub mod bench;
pub mod error;
pub mod format;
pub mod perf;
pub mod perf_write;
pub mod plot;
pub mod record;

pub use analyze::{analyze, render_text, Options, Report};
pub use error::Error;
pub use format::{PlacementReader, PlacementWriter, SampleReader, SampleWriter};
pub use perf::PerfReader;
pub use record::{
    Batch, BuildId, FileMeta, Known, Mapping, MappingKind, Placement, PlacementEntry, Record, Row,
    SampleSource, ThreadName,
};
