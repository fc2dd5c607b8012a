//! Per-node DRAM traffic counters where the PMU has them: Intel uncore memory controllers
//! (`uncore_imc_N`, events `cas_count_read` / `cas_count_write`, 64 bytes per CAS) counted on
//! the CPU their `cpumask` names, its node being the socket's. AMD's data fabric PMU
//! (`amd_df`) is listed but has no named DRAM events in sysfs, so it is reported, not counted.
//! Counting uncore events is system wide and needs CAP_PERFMON or perf_event_paranoid <= 0.

use crate::mechanism::{encode, parse_terms};
use numalab_core::{CpuId, NodeId, Topology};
use perf_event_open_sys as sys;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;

/// Traffic of one controller (or the sum of a node's controllers' channel) over the recording.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ImcTraffic {
    pub pmu: String,
    pub cpu: u32,
    pub node: Option<u16>,
    pub read_bytes: u64,
    pub write_bytes: u64,
}

/// What was found and counted.
#[derive(Clone, Debug, Default, serde::Serialize)]
pub struct UncoreReport {
    /// "recorded", or "not available: why".
    pub status: String,
    pub controllers: Vec<ImcTraffic>,
}

struct Counter {
    fd: OwnedFd,
    pmu: String,
    cpu: u32,
    write: bool,
}

/// Open uncore counters, started.
pub struct Uncore {
    counters: Vec<Counter>,
    status: String,
}

fn read_u64(fd: &OwnedFd) -> Option<u64> {
    let mut v = 0u64;
    // SAFETY: reading 8 bytes of a counting event into a u64.
    let n = unsafe { libc::read(fd.as_raw_fd(), &mut v as *mut u64 as *mut libc::c_void, 8) };
    (n == 8).then_some(v)
}

impl Uncore {
    /// Finds memory-controller PMUs under `dir` and starts counting; never fails (the report
    /// says why nothing is counted).
    pub fn start(dir: &Path) -> Uncore {
        let Ok(rd) = std::fs::read_dir(dir) else {
            return Uncore {
                counters: vec![],
                status: format!("not available: {} cannot be listed", dir.display()),
            };
        };
        let mut names: Vec<String> = rd
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        let imcs: Vec<&String> = names
            .iter()
            .filter(|n| n.starts_with("uncore_imc") && !n.contains("free_running"))
            .collect();
        let df = names.iter().any(|n| n.starts_with("amd_df"));
        if imcs.is_empty() {
            return Uncore {
                counters: vec![],
                status: if df {
                    "not available: amd_df is present but has no named DRAM-traffic events".into()
                } else {
                    "not available: no uncore_imc_* or amd_df PMU in /sys/bus/event_source/devices"
                        .into()
                },
            };
        }
        let mut counters = Vec::new();
        let mut errors = Vec::new();
        for name in imcs {
            let pmu = dir.join(name);
            let Some(ty) = std::fs::read_to_string(pmu.join("type"))
                .ok()
                .and_then(|t| t.trim().parse::<u32>().ok())
            else {
                continue;
            };
            let cpus = std::fs::read_to_string(pmu.join("cpumask")).unwrap_or_default();
            let cpus: Vec<u32> = numalab_linux::parse::parse_cpu_list(cpus.trim(), "cpumask")
                .unwrap_or_default()
                .into_iter()
                .map(|c| c.0)
                .collect();
            for (ev, write) in [("cas_count_read", false), ("cas_count_write", true)] {
                let Ok(text) = std::fs::read_to_string(pmu.join("events").join(ev)) else {
                    continue;
                };
                let Ok(cfg) = parse_terms(text.trim()).and_then(|t| encode(&pmu, &t)) else {
                    continue;
                };
                for &cpu in &cpus {
                    // SAFETY: zeroed perf_event_attr is the documented default.
                    let mut a: sys::bindings::perf_event_attr = unsafe { std::mem::zeroed() };
                    a.type_ = ty;
                    a.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
                    a.config = cfg[0];
                    a.config1 = cfg[1];
                    // SAFETY: valid attr; system-wide counting on one CPU.
                    let fd = unsafe {
                        sys::perf_event_open(
                            &mut a,
                            -1,
                            cpu as i32,
                            -1,
                            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
                        )
                    };
                    if fd < 0 {
                        errors.push(format!(
                            "{name}/{ev} on CPU {cpu}: {}",
                            std::io::Error::last_os_error()
                        ));
                        continue;
                    }
                    counters.push(Counter {
                        // SAFETY: a fresh fd from the kernel.
                        fd: unsafe { OwnedFd::from_raw_fd(fd) },
                        pmu: name.clone(),
                        cpu,
                        write,
                    });
                }
            }
        }
        let status = if counters.is_empty() {
            format!(
                "not available: memory-controller PMUs present but not opened ({})",
                errors.first().map_or("no cas_count events", String::as_str)
            )
        } else {
            "recorded".into()
        };
        // Counters start at open; the difference at the end is the recording's traffic.
        let mut u = Uncore { counters, status };
        u.counters.retain(|c| read_u64(&c.fd).is_some());
        u
    }

    /// Reads the counters: bytes since `start`.
    pub fn finish(self, start: &[(usize, u64)], topology: Option<&Topology>) -> UncoreReport {
        let mut out: Vec<ImcTraffic> = Vec::new();
        for (i, c) in self.counters.iter().enumerate() {
            let begin = start.iter().find(|s| s.0 == i).map_or(0, |s| s.1);
            let Some(v) = read_u64(&c.fd) else { continue };
            let bytes = v.saturating_sub(begin).saturating_mul(64);
            let node = topology
                .and_then(|t| t.node_of_cpu(CpuId(c.cpu)))
                .map(|n: NodeId| n.0);
            match out.iter_mut().find(|o| o.pmu == c.pmu && o.cpu == c.cpu) {
                Some(o) => {
                    if c.write {
                        o.write_bytes += bytes
                    } else {
                        o.read_bytes += bytes
                    }
                }
                None => out.push(ImcTraffic {
                    pmu: c.pmu.clone(),
                    cpu: c.cpu,
                    node,
                    read_bytes: if c.write { 0 } else { bytes },
                    write_bytes: if c.write { bytes } else { 0 },
                }),
            }
        }
        UncoreReport {
            status: self.status,
            controllers: out,
        }
    }

    /// Counter values now, to subtract at the end.
    pub fn snapshot(&self) -> Vec<(usize, u64)> {
        self.counters
            .iter()
            .enumerate()
            .filter_map(|(i, c)| read_u64(&c.fd).map(|v| (i, v)))
            .collect()
    }

    pub fn status(&self) -> &str {
        &self.status
    }
}
