//! Per-thread hardware counters of the balanced process (reference/policies.md §8: "On Linux,
//! per-thread perf_event_open does the same"): one counting event per thread and counter,
//! opened when the thread is first seen, read every tick, scaled for multiplexing.
//!
//! Where the PMU has no hardware events (a VM without a virtual PMU: `perf_event_open` says
//! ENOENT or EOPNOTSUPP) or perf is not allowed, nothing is opened and the view keeps the
//! counters it derives from the samples; [`CounterReport`] says which fields are measured,
//! which estimated from the samples and which are zero.

use perf_event_open_sys as sys;
use serde::Serialize;
use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use sys::bindings as b;

/// One counter of [`numalab_core::view::ThreadCounters`] that perf can count.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Field {
    Instructions,
    Cycles,
    LlcMisses,
    PageWalks,
}

impl Field {
    pub fn name(self) -> &'static str {
        match self {
            Field::Instructions => "instructions",
            Field::Cycles => "cycles",
            Field::LlcMisses => "llc_misses",
            Field::PageWalks => "page_walks",
        }
    }
}

const fn cache(id: u32, op: u32, result: u32) -> u64 {
    id as u64 | (op as u64) << 8 | (result as u64) << 16
}

/// The events tried for each field, best first: LLC *read* misses are what Müller's MPKI
/// counts (demand loads that go to memory); the generic cache-misses where the CPU lacks the
/// cache event. dTLB load misses stand for page walks (on Intel they are the misses that
/// cause a walk).
/// perf_event_attr type, config, and the name perf gives the event.
type Event = (u32, u64, &'static str);

const EVENTS: &[(Field, &[Event])] = &[
    (
        Field::Instructions,
        &[(
            b::PERF_TYPE_HARDWARE,
            b::PERF_COUNT_HW_INSTRUCTIONS as u64,
            "instructions",
        )],
    ),
    (
        Field::Cycles,
        &[(
            b::PERF_TYPE_HARDWARE,
            b::PERF_COUNT_HW_CPU_CYCLES as u64,
            "cycles",
        )],
    ),
    (
        Field::LlcMisses,
        &[
            (
                b::PERF_TYPE_HW_CACHE,
                cache(
                    b::PERF_COUNT_HW_CACHE_LL,
                    b::PERF_COUNT_HW_CACHE_OP_READ,
                    b::PERF_COUNT_HW_CACHE_RESULT_MISS,
                ),
                "LLC-load-misses",
            ),
            (
                b::PERF_TYPE_HARDWARE,
                b::PERF_COUNT_HW_CACHE_MISSES as u64,
                "cache-misses",
            ),
        ],
    ),
    (
        Field::PageWalks,
        &[(
            b::PERF_TYPE_HW_CACHE,
            cache(
                b::PERF_COUNT_HW_CACHE_DTLB,
                b::PERF_COUNT_HW_CACHE_OP_READ,
                b::PERF_COUNT_HW_CACHE_RESULT_MISS,
            ),
            "dTLB-load-misses",
        )],
    ),
];

/// Fields of `ThreadCounters` the samples give (loads, stores and remote loads always; LLC
/// misses when no hardware event counts them).
const FROM_SAMPLES: &[&str] = &["loads", "stores", "remote_loads"];
/// Fields nothing here measures: Carrefour-LP's walk-miss and fault-time shares need
/// model-specific events (L2 misses of walks) and fault tracing.
const NEVER: &[&str] = &["private_misses", "page_walk_private_misses", "fault_ns"];

/// A counting event's value scaled to the whole time it was enabled: when more events are
/// open than the PMU has counters, the kernel multiplexes them and each counts only while
/// `running`; `value · enabled / running` estimates the full count. Never counted: 0.
pub fn scale(value: u64, enabled: u64, running: u64) -> u64 {
    if running == 0 {
        return 0;
    }
    if running >= enabled {
        return value;
    }
    (value as u128 * enabled as u128 / running as u128).min(u64::MAX as u128) as u64
}

/// Where each thread counter of the view comes from, for the run's first words and `--json`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct CounterReport {
    /// "perf" (hardware counters per thread) or "samples" (no hardware counters).
    pub source: &'static str,
    /// Counted by perf_event_open, with the event used (`instructions=instructions`).
    pub hardware: Vec<String>,
    /// Derived from the sample file (samples × sample period).
    pub estimated: Vec<String>,
    /// Always 0 here.
    pub zero: Vec<String>,
    /// Why hardware counting is not done (the first refusal), when it is not.
    pub note: Option<String>,
}

impl CounterReport {
    /// One line for the run's start.
    pub fn line(&self) -> String {
        let mut s = match &self.note {
            Some(n) => format!("no per-thread hardware counters ({n}): "),
            None => format!("per-thread perf counters: {}; ", self.hardware.join(", ")),
        };
        s += &format!(
            "thread counters estimated from the samples: {}; zero: {}",
            self.estimated.join(", "),
            self.zero.join(", ")
        );
        s
    }
}

struct Opened {
    field: Field,
    fd: OwnedFd,
}

/// The counting events of every thread of one process.
pub struct ThreadPerf {
    pid: i32,
    /// The event chosen per field (type, config, name) on the first thread; fields whose
    /// every event was refused there are left out for all threads.
    chosen: Vec<(Field, u32, u64, &'static str)>,
    threads: HashMap<u32, Vec<Opened>>,
    /// Why no hardware counting is done (None: it is).
    pub unavailable: Option<String>,
}

fn attr(type_: u32, config: u64) -> b::perf_event_attr {
    // SAFETY: perf_event_attr is plain data; all-zero is its documented default.
    let mut a: b::perf_event_attr = unsafe { std::mem::zeroed() };
    a.type_ = type_;
    a.size = std::mem::size_of::<b::perf_event_attr>() as u32;
    a.config = config;
    a.read_format = (b::PERF_FORMAT_TOTAL_TIME_ENABLED | b::PERF_FORMAT_TOTAL_TIME_RUNNING) as u64;
    // user space only: what an unprivileged user may count on its own processes
    // (perf_event_paranoid 2); counting starts at once
    a.set_exclude_kernel(1);
    a.set_exclude_hv(1);
    a
}

/// perf_event_open of one counting event on thread `tid`, any CPU: the fd or the errno.
fn open(type_: u32, config: u64, tid: i32) -> Result<OwnedFd, i32> {
    let mut a = attr(type_, config);
    // SAFETY: `a` is a valid attribute that lives across the call; the fd returned is ours.
    let fd = unsafe { sys::perf_event_open(&mut a, tid, -1, -1, b::PERF_FLAG_FD_CLOEXEC as _) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    // SAFETY: a fresh fd owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn errno_text(e: i32) -> String {
    let what = match e {
        libc::ENOENT | libc::EOPNOTSUPP | libc::ENODEV => {
            "the PMU has no such hardware event (a VM without a virtual PMU?)"
        }
        libc::EACCES | libc::EPERM => {
            "not allowed (perf_event_paranoid, or the process is not ours to trace)"
        }
        libc::ESRCH => "the thread has exited",
        libc::EMFILE | libc::ENFILE => "too many open files (one per thread and counter)",
        _ => "refused",
    };
    let err = std::io::Error::from_raw_os_error(e).to_string();
    // "No such file or directory (os error 2)" → "No such file or directory"
    let err = err.split(" (os error").next().unwrap_or(&err).to_string();
    format!("{err}: {what}")
}

/// value, time enabled, time running of one counting event.
fn read3(fd: &OwnedFd) -> Option<(u64, u64, u64)> {
    let mut buf = [0u64; 3];
    // SAFETY: reads at most 24 bytes into a 24-byte buffer.
    let n = unsafe { libc::read(fd.as_raw_fd(), buf.as_mut_ptr().cast(), 24) };
    (n == 24).then_some((buf[0], buf[1], buf[2]))
}

impl ThreadPerf {
    /// Tries the events on `first` (a thread of `pid`): the first field's refusal means no
    /// hardware counting for the run (said once, in `unavailable`).
    pub fn new(pid: i32, first: u32) -> ThreadPerf {
        let mut chosen = Vec::new();
        let mut refusal: Option<String> = None;
        for (field, events) in EVENTS {
            for (type_, config, name) in events.iter() {
                match open(*type_, *config, first as i32) {
                    Ok(_) => {
                        chosen.push((*field, *type_, *config, *name));
                        break;
                    }
                    Err(e) => {
                        refusal.get_or_insert_with(|| {
                            format!(
                                "perf_event_open of {name} on thread {first}: {}",
                                errno_text(e)
                            )
                        });
                    }
                }
            }
        }
        // without instructions there is no MPKI: counting the rest alone is not worth it
        let usable = chosen.iter().any(|c| c.0 == Field::Instructions);
        ThreadPerf {
            pid,
            unavailable: if usable {
                None
            } else {
                Some(refusal.unwrap_or_else(|| "no event could be opened".into()))
            },
            chosen: if usable { chosen } else { Vec::new() },
            threads: HashMap::new(),
        }
    }

    pub fn pid(&self) -> i32 {
        self.pid
    }

    pub fn available(&self) -> bool {
        self.unavailable.is_none()
    }

    /// Opens the events of threads not seen before and forgets threads that are gone.
    pub fn track(&mut self, tids: &[u32]) {
        if !self.available() {
            return;
        }
        self.threads.retain(|t, _| tids.contains(t));
        for tid in tids {
            if self.threads.contains_key(tid) {
                continue;
            }
            // a thread that exits meanwhile, or a refused event, leaves that counter at 0
            let opened = self
                .chosen
                .iter()
                .filter_map(|(f, t, c, _)| {
                    open(*t, *c, *tid as i32)
                        .ok()
                        .map(|fd| Opened { field: *f, fd })
                })
                .collect();
            self.threads.insert(*tid, opened);
        }
    }

    /// The scaled counts of one thread since its events were opened.
    pub fn read(&self, tid: u32) -> Vec<(Field, u64)> {
        let Some(evs) = self.threads.get(&tid) else {
            return Vec::new();
        };
        evs.iter()
            .filter_map(|o| read3(&o.fd).map(|(v, e, r)| (o.field, scale(v, e, r))))
            .collect()
    }

    pub fn counts(&self, field: Field) -> bool {
        self.chosen.iter().any(|c| c.0 == field)
    }

    /// Which fields are counted, estimated or zero.
    pub fn report(&self) -> CounterReport {
        let hardware: Vec<String> = self
            .chosen
            .iter()
            .map(|(f, _, _, n)| format!("{}={n}", f.name()))
            .collect();
        let mut estimated: Vec<String> = FROM_SAMPLES.iter().map(|s| s.to_string()).collect();
        if !self.counts(Field::LlcMisses) {
            // DRAM samples × period: the accesses that missed the LLC, as sampled
            estimated.push("llc_misses".into());
        }
        let mut zero: Vec<String> = [Field::Instructions, Field::Cycles, Field::PageWalks]
            .into_iter()
            .filter(|f| !self.counts(*f))
            .map(|f| f.name().to_string())
            .collect();
        zero.extend(NEVER.iter().map(|s| s.to_string()));
        CounterReport {
            source: if self.available() { "perf" } else { "samples" },
            hardware,
            estimated,
            zero,
            note: self.unavailable.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn multiplexed_counts_are_scaled_to_the_enabled_time() {
        assert_eq!(scale(1000, 10, 10), 1000);
        // counted a quarter of the time
        assert_eq!(scale(1000, 400, 100), 4000);
        // never scheduled on the PMU: nothing known
        assert_eq!(scale(0, 400, 0), 0);
        // running never exceeds enabled; if the kernel rounds so, no shrinking
        assert_eq!(scale(7, 5, 6), 7);
        // no overflow on long runs
        assert_eq!(scale(u64::MAX / 2, 4, 2), u64::MAX - 1);
        assert_eq!(scale(u64::MAX, 4, 1), u64::MAX);
    }

    #[test]
    fn without_hardware_events_the_report_says_what_is_estimated() {
        let p = ThreadPerf {
            pid: 1,
            chosen: Vec::new(),
            threads: HashMap::new(),
            unavailable: Some(format!(
                "perf_event_open of instructions on thread 1: {}",
                errno_text(libc::ENOENT)
            )),
        };
        let r = p.report();
        assert_eq!(r.source, "samples");
        assert!(r.hardware.is_empty());
        assert!(r.estimated.contains(&"llc_misses".to_string()));
        for f in ["instructions", "cycles", "page_walks", "fault_ns"] {
            assert!(r.zero.contains(&f.to_string()), "{f}: {r:?}");
        }
        let line = r.line();
        assert!(line.contains("no per-thread hardware counters"), "{line}");
        assert!(line.contains("no such hardware event"), "{line}");
        assert!(p.read(1).is_empty());

        // with every event: only the sample-only fields are estimated
        let p = ThreadPerf {
            pid: 1,
            chosen: EVENTS
                .iter()
                .map(|(f, e)| (*f, e[0].0, e[0].1, e[0].2))
                .collect(),
            threads: HashMap::new(),
            unavailable: None,
        };
        let r = p.report();
        assert_eq!(r.source, "perf");
        assert_eq!(r.hardware.len(), 4);
        assert_eq!(r.estimated, vec!["loads", "stores", "remote_loads"]);
        assert_eq!(
            r.zero,
            vec!["private_misses", "page_walk_private_misses", "fault_ns"]
        );
    }
}
