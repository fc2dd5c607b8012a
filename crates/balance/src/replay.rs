//! The sample file, cut into policy periods. Sample times are taken relative to the file's
//! first sample: period k (k = 1, 2, ...) hands out the samples with relative time in
//! `[(k-1)·P, k·P)`; a sample older than the current window (a file not sorted by time) goes
//! to the current window rather than being lost.

use crate::Error;
use numalab_analyze::perf::{is_perf_file, topology_from_sysfs, PerfOptions, PerfReader};
use numalab_analyze::{FileMeta, Record, SampleReader, SampleSource};
use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};

/// Which samples of the file belong to the balanced process.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum PidFilter {
    /// Only samples whose task is this pid (the file has samples of it).
    Only(u32),
    /// Every sample, whatever its task says (a recording of an earlier run, a hand-written
    /// or simulated file): the samples are taken as the balanced process's.
    All,
}

pub struct Replay {
    path: PathBuf,
    source: Box<dyn SampleSource>,
    meta: FileMeta,
    ahead: VecDeque<Record>,
    source_done: bool,
    first_ns: Option<u64>,
    filter: PidFilter,
    /// Samples dropped because they belong to another pid.
    pub other_pid_samples: u64,
    /// Samples read from the file so far.
    pub read: u64,
}

impl Replay {
    /// Opens a perf.data file (by its magic) or a numalab Arrow sample file. perf samples get
    /// their CPU's node from this host's sysfs (the recording is of a process running here),
    /// else from the file's own topology section.
    pub fn open(path: &Path) -> Result<Replay, Error> {
        std::fs::File::open(path).map_err(|e| {
            Error(format!(
                "{}: cannot read the sample file: {e}",
                path.display()
            ))
        })?;
        let source: Box<dyn SampleSource> = if is_perf_file(path) {
            let topology = topology_from_sysfs("/sys/devices/system/node").ok();
            Box::new(PerfReader::open(
                path,
                PerfOptions {
                    topology,
                    ..Default::default()
                },
            )?)
        } else {
            Box::new(SampleReader::open(path)?)
        };
        Ok(Replay::new(source, path))
    }

    /// Any sample source; `path` names it in messages.
    pub fn new(source: Box<dyn SampleSource>, path: &Path) -> Replay {
        Replay {
            path: path.to_path_buf(),
            meta: source.meta().clone(),
            source,
            ahead: VecDeque::new(),
            source_done: false,
            first_ns: None,
            filter: PidFilter::All,
            other_pid_samples: 0,
            read: 0,
        }
    }

    pub fn meta(&self) -> &FileMeta {
        &self.meta
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Events per sample (the recording's sample period; 1 when the file does not say).
    pub fn sample_period(&self) -> u64 {
        self.meta.sample_period.max(1)
    }

    fn fill(&mut self) -> Result<(), Error> {
        while self.ahead.is_empty() && !self.source_done {
            match self.source.next_batch()? {
                None => self.source_done = true,
                Some(b) => {
                    self.read += b.records.len() as u64;
                    self.ahead.extend(b.records);
                }
            }
        }
        if self.first_ns.is_none() {
            self.first_ns = self.ahead.front().map(|r| r.sample.time_ns);
        }
        Ok(())
    }

    /// Reads the first batch and counts its samples per pid (task), without consuming them.
    pub fn probe(&mut self) -> Result<BTreeMap<u32, u64>, Error> {
        self.fill()?;
        let mut pids = BTreeMap::new();
        for r in &self.ahead {
            *pids.entry(r.sample.task.0).or_insert(0) += 1;
        }
        Ok(pids)
    }

    pub fn set_filter(&mut self, f: PidFilter) {
        self.filter = f;
    }

    pub fn filter(&self) -> PidFilter {
        self.filter
    }

    /// The samples of the window ending at `end_rel_ns` (relative to the first sample),
    /// those of other pids dropped (counted in `other_pid_samples`).
    pub fn window(&mut self, end_rel_ns: u64) -> Result<Vec<Record>, Error> {
        let mut out = Vec::new();
        loop {
            self.fill()?;
            if self.ahead.is_empty() {
                return Ok(out); // end of the file
            }
            let first = self.first_ns.unwrap_or(0);
            while let Some(r) = self.ahead.front() {
                if r.sample.time_ns.saturating_sub(first) >= end_rel_ns {
                    return Ok(out); // the next sample belongs to a later window
                }
                let r = self.ahead.pop_front().expect("front");
                match self.filter {
                    PidFilter::Only(p) if r.sample.task.0 != p => self.other_pid_samples += 1,
                    _ => out.push(r),
                }
            }
        }
    }

    /// Every sample has been handed out.
    pub fn exhausted(&self) -> bool {
        self.source_done && self.ahead.is_empty()
    }
}
