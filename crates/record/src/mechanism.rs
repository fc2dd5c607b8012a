//! Which sampling mechanism gives data addresses on this machine, best first:
//!
//! 1. Intel PEBS load latency (`cpu/mem-loads,ldlat=N/P`) plus PEBS stores (`cpu/mem-stores/P`):
//!    sampled loads and stores with data address, data source (cache level, local or remote
//!    DRAM) and, for loads, latency in cycles;
//! 2. AMD IBS op (`ibs_op//`): sampled micro-ops, memory ones with data address and, from
//!    Linux 6.1, data source;
//! 3. the software event `page-faults` with PERF_SAMPLE_ADDR: every fault (period 1) or one
//!    in N, with the faulting address. It sees first touches (where first-touch placement
//!    decides), copy-on-write and, with automatic NUMA balancing on, NUMA hinting faults, so it
//!    shows who touches which page even where the CPU has no memory sampling (most VMs).
//!
//! The event encodings are read from sysfs (`/sys/bus/event_source/devices/PMU/{type,
//! events/*,format/*}`), as perf does, never hard-coded per CPU model.

use crate::perf_event::{paranoid_level, EventSpec};
use crate::Error;
use std::path::{Path, PathBuf};

/// Where the kernel lists its PMUs.
pub const EVENT_SOURCE_DIR: &str = "/sys/bus/event_source/devices";

/// `perf_event_attr.type` of software events, and the page-fault event.
const PERF_TYPE_SOFTWARE: u32 = 1;
const PERF_COUNT_SW_PAGE_FAULTS: u64 = 2;

/// A sampling mechanism.
#[derive(Copy, Clone, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Mechanism {
    Pebs,
    Ibs,
    PageFaults,
}

impl Mechanism {
    pub fn name(self) -> &'static str {
        match self {
            Mechanism::Pebs => "pebs",
            Mechanism::Ibs => "ibs",
            Mechanism::PageFaults => "page-faults",
        }
    }
    pub fn describe(self) -> &'static str {
        match self {
            Mechanism::Pebs => "Intel PEBS load latency + stores",
            Mechanism::Ibs => "AMD IBS op",
            Mechanism::PageFaults => "software page-fault event with fault addresses",
        }
    }
}

/// `--event`: automatic choice, or one mechanism forced.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum EventChoice {
    Auto,
    Only(Mechanism),
}

impl std::str::FromStr for EventChoice {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self, Error> {
        Ok(match s {
            "auto" => EventChoice::Auto,
            "pebs" => EventChoice::Only(Mechanism::Pebs),
            "ibs" => EventChoice::Only(Mechanism::Ibs),
            "page-faults" | "faults" => EventChoice::Only(Mechanism::PageFaults),
            other => {
                return Err(Error::Usage(format!(
                    "--event {other}: expected auto, pebs, ibs or page-faults"
                )))
            }
        })
    }
}

/// Settings that shape the events.
#[derive(Clone, Debug)]
pub struct EventSettings {
    /// Sample period; None = the mechanism's default (PEBS 2000, IBS 65536 ops, faults 1).
    pub period: Option<u64>,
    /// PEBS load-latency threshold in cycles (perf mem's default is 30).
    pub ldlat: u32,
    /// Leave kernel-mode events out (unprivileged users at paranoid 2 must).
    pub exclude_kernel: bool,
    /// Ask for physical addresses (needs privileges; dropped again if refused).
    pub phys_addr: bool,
}

impl EventSettings {
    /// Defaults for the current user: kernel events and physical addresses only when
    /// privileged (root or a permissive perf_event_paranoid).
    pub fn for_current_user(period: Option<u64>, ldlat: u32) -> EventSettings {
        // SAFETY: geteuid has no preconditions.
        let root = unsafe { libc::geteuid() } == 0;
        let paranoid = paranoid_level().unwrap_or(2);
        EventSettings {
            period,
            ldlat,
            exclude_kernel: !root && paranoid >= 2,
            phys_addr: root || paranoid <= 0,
        }
    }
}

/// A mechanism that looks available, with its events.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub mechanism: Mechanism,
    pub events: Vec<EventSpec>,
    /// Where its encoding came from.
    pub source: String,
}

/// The outcome of detection: candidates best first, and why better ones were left out.
#[derive(Clone, Debug, Default)]
pub struct Detection {
    pub candidates: Vec<Candidate>,
    pub unavailable: Vec<(Mechanism, String)>,
}

/// Looks at the PMUs under `dir` (normally [`EVENT_SOURCE_DIR`]).
pub fn detect(dir: &Path, choice: EventChoice, s: &EventSettings) -> Result<Detection, Error> {
    let mut d = Detection::default();
    let wanted = |m: Mechanism| match choice {
        EventChoice::Auto => true,
        EventChoice::Only(x) => x == m,
    };
    for m in [Mechanism::Pebs, Mechanism::Ibs, Mechanism::PageFaults] {
        if !wanted(m) {
            continue;
        }
        let r = match m {
            Mechanism::Pebs => pebs(dir, s),
            Mechanism::Ibs => ibs(dir, s),
            Mechanism::PageFaults => Ok(page_faults(s)),
        };
        match r {
            Ok(c) => d.candidates.push(c),
            Err(why) => d.unavailable.push((m, why)),
        }
    }
    if let (EventChoice::Only(m), true) = (choice, d.candidates.is_empty()) {
        let why = d.unavailable.first().map_or(String::new(), |u| u.1.clone());
        return Err(Error::Unavailable {
            mechanism: m.name().into(),
            why,
        });
    }
    Ok(d)
}

fn page_faults(s: &EventSettings) -> Candidate {
    Candidate {
        mechanism: Mechanism::PageFaults,
        events: vec![EventSpec {
            name: "page-faults".into(),
            type_: PERF_TYPE_SOFTWARE,
            config: PERF_COUNT_SW_PAGE_FAULTS,
            config1: 0,
            config2: 0,
            period: s.period.unwrap_or(1),
            precise_ip: 0,
            memory_fields: false,
            // A fault's physical address is that of the page before the fault: meaningless.
            phys_addr: false,
            exclude_kernel: s.exclude_kernel,
            is_store: None,
            cpus: None,
        }],
        source: "software event PERF_COUNT_SW_PAGE_FAULTS".into(),
    }
}

fn read_trim(p: &Path) -> Option<String> {
    std::fs::read_to_string(p)
        .ok()
        .map(|s| s.trim().to_string())
}

fn pmu_type(pmu: &Path) -> Result<u32, String> {
    let t = pmu.join("type");
    read_trim(&t)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{} is missing or not a number", t.display()))
}

fn pebs(dir: &Path, s: &EventSettings) -> Result<Candidate, String> {
    // Hybrid Intel CPUs name the big cores' PMU cpu_core; the others call it cpu.
    let pmu: PathBuf = ["cpu", "cpu_core"]
        .iter()
        .map(|p| dir.join(p))
        .find(|p| p.join("events/mem-loads").exists())
        .ok_or_else(|| {
            if dir.join("cpu").exists() {
                format!("{}/cpu/events/mem-loads does not exist: this CPU's PMU has no PEBS load-latency event (not an Intel CPU, or a VM without PEBS virtualisation)", dir.display())
            } else {
                format!("{}/cpu does not exist: no hardware PMU is exposed (a VM without a virtual PMU, or an emulated CPU)", dir.display())
            }
        })?;
    if let Some(p) = read_trim(&pmu.join("caps/max_precise")) {
        if p == "0" {
            return Err(format!(
                "{}/caps/max_precise is 0: PEBS is not usable",
                pmu.display()
            ));
        }
    }
    let precise = read_trim(&pmu.join("caps/max_precise"))
        .and_then(|p| p.parse::<u8>().ok())
        .unwrap_or(2)
        .clamp(1, 3);
    let ty = pmu_type(&pmu)?;
    // Hybrid CPUs: the core PMU covers only its CPUs.
    let pmu_cpus: Option<Vec<u32>> = read_trim(&pmu.join("cpus")).and_then(|t| {
        numalab_linux::parse::parse_cpu_list(&t, "cpus")
            .ok()
            .map(|v| v.into_iter().map(|c| c.0).collect())
    });
    let pmu_name = pmu.file_name().unwrap().to_string_lossy().to_string();
    let mut events = Vec::new();
    for (ev, store) in [("mem-loads", false), ("mem-stores", true)] {
        let path = pmu.join("events").join(ev);
        let Some(text) = read_trim(&path) else {
            if store {
                continue; // Loads alone still tell who reads which page.
            }
            return Err(format!("{} is not readable", path.display()));
        };
        let mut terms = parse_terms(&text).map_err(|e| format!("{}: {e}", path.display()))?;
        if !store {
            match terms.iter_mut().find(|(k, _)| k == "ldlat") {
                Some(t) => t.1 = s.ldlat as u64,
                None => terms.push(("ldlat".into(), s.ldlat as u64)),
            }
        }
        let cfg = encode(&pmu, &terms)?;
        events.push(EventSpec {
            name: if store {
                format!("{pmu_name}/mem-stores/P")
            } else {
                format!("{pmu_name}/mem-loads,ldlat={}/P", s.ldlat)
            },
            type_: ty,
            config: cfg[0],
            config1: cfg[1],
            config2: cfg[2],
            period: s.period.unwrap_or(2000),
            precise_ip: precise,
            memory_fields: true,
            phys_addr: s.phys_addr,
            exclude_kernel: s.exclude_kernel,
            is_store: Some(store),
            cpus: pmu_cpus.clone(),
        });
    }
    Ok(Candidate {
        mechanism: Mechanism::Pebs,
        events,
        source: format!("{}/events/mem-loads and mem-stores", pmu.display()),
    })
}

fn ibs(dir: &Path, s: &EventSettings) -> Result<Candidate, String> {
    let pmu = dir.join("ibs_op");
    if !pmu.exists() {
        return Err(format!(
            "{} does not exist: not an AMD CPU with IBS, or a VM without it",
            pmu.display()
        ));
    }
    let ty = pmu_type(&pmu)?;
    // IBS op periods count ops in units of 16; the kernel wants at least 0x90.
    let period = (s.period.unwrap_or(65536).max(0x90) + 15) & !15;
    Ok(Candidate {
        mechanism: Mechanism::Ibs,
        events: vec![EventSpec {
            name: "ibs_op//".into(),
            type_: ty,
            config: 0,
            config1: 0,
            config2: 0,
            period,
            precise_ip: 0,
            memory_fields: true,
            phys_addr: s.phys_addr,
            // IBS filtered by privilege level only from Linux 6.13 (swfilt); older kernels
            // refuse exclude_kernel, so it is left off and kernel ops are dropped when read.
            exclude_kernel: false,
            is_store: None,
            cpus: None,
        }],
        source: format!("{}/type", pmu.display()),
    })
}

/// `event=0xcd,umask=0x1,ldlat=3` → [(event, 0xcd), (umask, 1), (ldlat, 3)]; a bare term is 1.
pub fn parse_terms(text: &str) -> Result<Vec<(String, u64)>, String> {
    let mut out = Vec::new();
    for t in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
        let (k, v) = match t.split_once('=') {
            Some((k, v)) => (k.trim(), v.trim()),
            None => (t, "1"),
        };
        let v = match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
            Some(h) => u64::from_str_radix(h, 16),
            None => v.parse(),
        }
        .map_err(|_| format!("term '{t}' has no number"))?;
        out.push((k.to_string(), v));
    }
    Ok(out)
}

/// Places each term's value into config/config1/config2 by the PMU's `format/TERM` file
/// (`config:0-7`, `config1:0-15`, `config:0-7,32-35`).
pub fn encode(pmu: &Path, terms: &[(String, u64)]) -> Result<[u64; 3], String> {
    let mut cfg = [0u64; 3];
    for (k, v) in terms {
        let f = pmu.join("format").join(k);
        let spec = read_trim(&f).ok_or_else(|| format!("{} is missing", f.display()))?;
        place_bits(&spec, *v, &mut cfg).map_err(|e| format!("{}: {e}", f.display()))?;
    }
    Ok(cfg)
}

/// Puts `value`'s low bits into the bit ranges of one format spec, lowest range first.
pub fn place_bits(spec: &str, mut value: u64, cfg: &mut [u64; 3]) -> Result<(), String> {
    let (field, ranges) = spec
        .split_once(':')
        .ok_or_else(|| format!("'{spec}' is not FIELD:BITS"))?;
    let i = match field {
        "config" => 0,
        "config1" => 1,
        "config2" => 2,
        other => return Err(format!("unknown field '{other}'")),
    };
    for r in ranges.split(',') {
        let (lo, hi) = match r.split_once('-') {
            Some((a, b)) => (a.trim().parse::<u32>(), b.trim().parse::<u32>()),
            None => (r.trim().parse::<u32>(), r.trim().parse::<u32>()),
        };
        let (lo, hi) = match (lo, hi) {
            (Ok(l), Ok(h)) if l <= h && h < 64 => (l, h),
            _ => return Err(format!("bad bit range '{r}'")),
        };
        let width = hi - lo + 1;
        let mask = if width == 64 {
            u64::MAX
        } else {
            (1u64 << width) - 1
        };
        cfg[i] |= (value & mask) << lo;
        value = if width == 64 { 0 } else { value >> width };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pmu_tree(dir: &Path) {
        let cpu = dir.join("cpu");
        std::fs::create_dir_all(cpu.join("events")).unwrap();
        std::fs::create_dir_all(cpu.join("format")).unwrap();
        std::fs::write(cpu.join("type"), "4\n").unwrap();
        std::fs::write(
            cpu.join("events/mem-loads"),
            "event=0xcd,umask=0x1,ldlat=3\n",
        )
        .unwrap();
        std::fs::write(cpu.join("events/mem-stores"), "event=0xd0,umask=0x82\n").unwrap();
        std::fs::write(cpu.join("format/event"), "config:0-7\n").unwrap();
        std::fs::write(cpu.join("format/umask"), "config:8-15\n").unwrap();
        std::fs::write(cpu.join("format/ldlat"), "config1:0-15\n").unwrap();
    }

    fn settings() -> EventSettings {
        EventSettings {
            period: None,
            ldlat: 30,
            exclude_kernel: true,
            phys_addr: false,
        }
    }

    #[test]
    fn pebs_encoding_from_sysfs() {
        let dir = std::env::temp_dir().join(format!("numalab-mech-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        pmu_tree(&dir);
        let d = detect(&dir, EventChoice::Auto, &settings()).unwrap();
        assert_eq!(d.candidates[0].mechanism, Mechanism::Pebs);
        let ev = &d.candidates[0].events;
        assert_eq!(ev.len(), 2);
        assert_eq!((ev[0].type_, ev[0].config, ev[0].config1), (4, 0x1cd, 30));
        assert_eq!((ev[1].config, ev[1].config1), (0x82d0, 0));
        assert_eq!(ev[0].name, "cpu/mem-loads,ldlat=30/P");
        // No IBS here: its reason is kept, and page faults remain the last resort.
        assert_eq!(d.unavailable[0].0, Mechanism::Ibs);
        assert_eq!(d.candidates[1].mechanism, Mechanism::PageFaults);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn forced_mechanism_unavailable_is_an_error() {
        let dir = std::env::temp_dir().join(format!("numalab-mech-empty-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = detect(&dir, EventChoice::Only(Mechanism::Pebs), &settings()).unwrap_err();
        assert!(e.to_string().contains("pebs"), "{e}");
        let e = detect(&dir, EventChoice::Only(Mechanism::Ibs), &settings()).unwrap_err();
        assert!(e.to_string().contains("ibs_op"), "{e}");
        let d = detect(&dir, EventChoice::Auto, &settings()).unwrap();
        assert_eq!(d.candidates.len(), 1);
        assert_eq!(d.unavailable.len(), 2);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bit_placement() {
        let mut c = [0u64; 3];
        place_bits("config:0-3,32-35", 0xab, &mut c).unwrap();
        assert_eq!(c[0], 0xb | (0xa << 32));
        assert!(place_bits("config9:0-3", 1, &mut c).is_err());
        assert!(place_bits("config:5-2", 1, &mut c).is_err());
        assert_eq!(
            parse_terms("event=0xcd,umask=0x1,ldlat=3,any").unwrap()[3],
            ("any".to_string(), 1)
        );
    }
}
