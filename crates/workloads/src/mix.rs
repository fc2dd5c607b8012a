//! `mix`: multiprogrammed runs, as the seed studies ran them (reference/workloads.md §5, §7.3
//! workload A/B, §7.5: N copies of a program side by side, each a process of its own).
//!
//! `mix:lbm-like*22` is 22 copies of lbm-like; `mix:lbm-like*4+mcf-like*4` mixes programs. A
//! program is any workload (`stream`, `npb-cg`, the §5 kernels, ...) and may carry keys in
//! parentheses, separated by `;`: its own keys (`mcf-like(nodes=100000;pivots=5000)*2`) and
//! three placement keys that are not the workload's:
//!
//! * `threads=N`: threads of one copy (1 by default; the §5 kernels are single-threaded);
//! * `mempolicy=POLICY`: the copy's task policy, as `--mempolicy` writes it
//!   (`lbm-like(mempolicy=remote-percent:40)*11`);
//! * `cpus=LIST`: the CPUs the program's threads run on, every copy's threads taking the
//!   list's CPUs in turn (`stream(threads=6;cpus=6-11)`), as `taskset -c` with one thread per
//!   CPU.
//!
//! Keys after the programs apply to the whole mix (`,scale=0.1` goes to every program that has
//! a `scale` key and does not set its own).
//!
//! Every copy is a separate process: its own [`TaskId`]s (numbered in spec order from 0; a
//! workload with several tasks of its own, such as `stream:mode=processes`, takes as many) and
//! its own mappings, first-touched by itself. The mix sets its own thread count. More threads
//! than CPUs (or a `cpus=` list shorter than its copies' threads) take turns on the CPUs they
//! share (the simulator's `sched.rs`: slices, context switches).

use crate::spec::{self, Params, WorkloadError};
use numalab_core::workload::{
    AddressSpace, MapOptions, Placements, StaticArray, ThreadSpec, Workload,
};
use numalab_core::TaskId;
use std::sync::Mutex;

pub const NAME: &str = "mix";
pub const KEYS: &[&str] = &["scale"];
/// Keys a program of the mix takes beside its own.
pub const PLACEMENT_KEYS: &[&str] = &["threads", "mempolicy", "cpus"];
pub const DESCRIPTION: &str = "multiprogrammed mix, one task (process) per copy: mix:PROG*N+PROG*N..., PROG = a workload name or name(key=value;...), e.g. mix:lbm-like*4+mcf-like*4 or mix:stream(threads=6;cpus=0-5)+lbm-like(mempolicy=bind:1)*6 (§5, §7.3, §7.5); the copies set the threads. \
program keys beside the workload's own: threads=N per copy (1), mempolicy=POLICY (the copy's task policy), cpus=LIST (its threads' CPUs, copies in turn). \
mix keys: scale=factor in (0,1] for every program with a scale key and none of its own (1)";

/// The §5 single-threaded kernels (one copy is one thread).
pub const SINGLE_THREADED: &[&str] = &[
    crate::lbm::NAME,
    crate::gems::NAME,
    crate::mcf::NAME,
    crate::omnetpp::NAME,
    crate::libquantum::NAME,
    crate::gcc::NAME,
    crate::perlbench::NAME,
    crate::bzip2::NAME,
    crate::gobmk::NAME,
    crate::hmmer::NAME,
    crate::h264ref::NAME,
    crate::astar::NAME,
];

/// Most threads a mix may hold.
pub const MAX_COPIES: usize = 1 << 16;

/// One program of a mix: a workload and how many copies of it run, where.
pub struct MixItem {
    pub copies: usize,
    pub mempolicy: Option<String>,
    pub cpus: Option<String>,
    workload: Box<dyn Workload>,
}

impl MixItem {
    /// Threads of one copy.
    pub fn threads(&self) -> usize {
        self.workload.threads()
    }
}

/// A mix of programs, each with its number of copies.
pub struct Mix {
    pub items: Vec<MixItem>,
    /// The placements of the last `build` (task ids are known only once built).
    placed: Mutex<Placements>,
}

/// Split `s` at `sep` where no parenthesis is open.
fn split_top(s: &str, sep: char) -> Vec<&str> {
    let (mut depth, mut start, mut out) = (0i32, 0, Vec::new());
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

impl Mix {
    /// Parse what follows `mix:`.
    pub fn parse(body: &str) -> Result<Mix, WorkloadError> {
        let malformed = |why: String| WorkloadError::Malformed {
            spec: format!("{NAME}:{body}"),
            why,
        };
        let parts = split_top(body, ',');
        let programs_part = parts[0].trim();
        if programs_part.is_empty() {
            return Err(malformed(
                "no programs: expected mix:PROG*N+PROG*N, e.g. mix:lbm-like*4+mcf-like*4".into(),
            ));
        }
        let keys_spec = format!("{NAME}:{}", parts[1..].join(","));
        let (_, pairs) = spec::split(&keys_spec)?;
        let params = Params::new(NAME, KEYS, pairs)?;
        let scale = params.get("scale");
        if scale.is_some() {
            params.float_in("scale", 1.0, 0.0, 1.0)?;
        }
        let mut items = Vec::new();
        let mut total = 0usize;
        for item in split_top(programs_part, '+') {
            let item = item.trim();
            let (prog, count) = match item.rsplit_once('*').filter(|(_, n)| !n.contains(')')) {
                Some((p, n)) => {
                    let n: usize = n.trim().parse().map_err(|_| {
                        malformed(format!(
                            "'{item}': the copy count after '*' must be a number"
                        ))
                    })?;
                    (p.trim(), n)
                }
                None => (item, 1),
            };
            if count == 0 {
                return Err(malformed(format!("'{item}': at least one copy is needed")));
            }
            let it = parse_item(prog, count, scale, &malformed)?;
            total = it
                .threads()
                .checked_mul(count)
                .and_then(|n| n.checked_add(total))
                .unwrap_or(usize::MAX);
            if total > MAX_COPIES {
                return Err(malformed(format!("more than {MAX_COPIES} threads")));
            }
            items.push(it);
        }
        Ok(Mix {
            items,
            placed: Mutex::new(Placements::default()),
        })
    }
}

/// One `name(keys)` of a mix with its copy count: the placement keys taken out, the rest
/// (and the mix's scale, where the workload has that key) given to the workload.
fn parse_item(
    prog: &str,
    copies: usize,
    scale: Option<&str>,
    malformed: &dyn Fn(String) -> WorkloadError,
) -> Result<MixItem, WorkloadError> {
    let (name, keys) = match prog.split_once('(') {
        Some((n, k)) => {
            let k = k.strip_suffix(')').ok_or_else(|| {
                malformed(format!("'{prog}': keys in parentheses must end with ')'"))
            })?;
            (n.trim(), k.split(';').map(str::trim).collect::<Vec<_>>())
        }
        None => (prog.trim(), Vec::new()),
    };
    if name == NAME {
        return Err(malformed("a mix cannot hold a mix".into()));
    }
    let workload_keys = crate::keys_of(name).ok_or_else(|| WorkloadError::UnknownWorkload {
        name: name.to_string(),
        valid: crate::names().join(", "),
    })?;
    let (mut threads, mut mempolicy, mut cpus) = (None, None, None);
    let mut own: Vec<String> = Vec::new();
    for k in keys.into_iter().filter(|k| !k.is_empty()) {
        let (key, value) = k
            .split_once('=')
            .map(|(a, b)| (a.trim(), b.trim()))
            .ok_or_else(|| malformed(format!("'{k}' in '{prog}' is not key=value")))?;
        let slot = match key {
            "threads" => &mut threads,
            "mempolicy" => &mut mempolicy,
            "cpus" => &mut cpus,
            _ => {
                own.push(format!("{key}={value}"));
                continue;
            }
        };
        if slot.replace(value.to_string()).is_some() {
            return Err(malformed(format!("'{prog}': {key} is given twice")));
        }
    }
    let threads = match threads {
        None => 1,
        Some(t) => t
            .parse::<usize>()
            .ok()
            .filter(|t| (1..=MAX_COPIES).contains(t))
            .ok_or_else(|| {
                malformed(format!(
                    "'{prog}': threads={t} is not valid: expected a whole number from 1 to {MAX_COPIES}"
                ))
            })?,
    };
    if threads > 1 && SINGLE_THREADED.contains(&name) {
        return Err(malformed(format!(
            "'{prog}': {name} is single-threaded (one copy is one process): write {name}*{threads} for {threads} copies"
        )));
    }
    if let Some(s) = scale {
        let has_own = own.iter().any(|k| k.starts_with("scale="));
        if workload_keys.contains(&"scale") && !has_own {
            own.push(format!("scale={s}"));
        }
    }
    let spec = if own.is_empty() {
        name.to_string()
    } else {
        format!("{name}:{}", own.join(","))
    };
    let workload = crate::by_spec(&spec, threads)?;
    Ok(MixItem {
        copies,
        mempolicy,
        cpus,
        workload,
    })
}

/// The address space as one copy sees it: its tasks 0, 1, ... are the mix's `base`, `base+1`...
struct Shifted<'a> {
    inner: &'a mut dyn AddressSpace,
    base: u32,
    /// Highest task the copy mapped for, shifted.
    top: Option<u32>,
}

impl Shifted<'_> {
    fn task(&mut self, t: TaskId) -> TaskId {
        let shifted = t.0 + self.base;
        self.top = Some(self.top.map_or(shifted, |m| m.max(shifted)));
        TaskId(shifted)
    }
}

impl AddressSpace for Shifted<'_> {
    fn mmap(&mut self, task: TaskId, name: &str, bytes: u64, opts: MapOptions) -> u64 {
        let t = self.task(task);
        self.inner.mmap(t, name, bytes, opts)
    }

    fn mmap_file(&mut self, task: TaskId, name: &str, bytes: u64) -> u64 {
        let t = self.task(task);
        self.inner.mmap_file(t, name, bytes)
    }

    fn mmap_static(
        &mut self,
        task: TaskId,
        segment: &str,
        arrays: &[StaticArray],
        opts: MapOptions,
    ) -> Vec<u64> {
        let t = self.task(task);
        self.inner.mmap_static(t, segment, arrays, opts)
    }

    fn refused(&self) -> bool {
        self.inner.refused()
    }

    fn host_memory_refused(&mut self, what: &str, bytes: u64) {
        self.inner.host_memory_refused(what, bytes)
    }
}

impl Workload for Mix {
    fn name(&self) -> String {
        let progs: Vec<String> = self
            .items
            .iter()
            .map(|it| {
                let spec = it.workload.name();
                let (name, keys) = match spec.split_once(':') {
                    Some((n, k)) => (n, k.replace(',', ";")),
                    None => (spec.as_str(), String::new()),
                };
                let mut keys: Vec<String> = keys
                    .split(';')
                    .filter(|k| !k.is_empty())
                    .map(String::from)
                    .collect();
                if it.threads() > 1 {
                    keys.push(format!("threads={}", it.threads()));
                }
                if let Some(p) = &it.mempolicy {
                    keys.push(format!("mempolicy={p}"));
                }
                if let Some(c) = &it.cpus {
                    keys.push(format!("cpus={c}"));
                }
                if keys.is_empty() {
                    format!("{name}*{}", it.copies)
                } else {
                    format!("{name}({})*{}", keys.join(";"), it.copies)
                }
            })
            .collect();
        format!("{NAME}:{}", progs.join("+"))
    }

    fn threads(&self) -> usize {
        self.items.iter().map(|it| it.threads() * it.copies).sum()
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        let mut out: Vec<ThreadSpec> = Vec::new();
        let mut placed = Placements::default();
        let mut next_task = 0u32;
        for it in &self.items {
            let mut k = 0;
            for _ in 0..it.copies {
                let mut space = Shifted {
                    inner: &mut *mem,
                    base: next_task,
                    top: None,
                };
                let specs = it.workload.build(&mut space);
                // a program that places itself (Metis pins its threads) keeps its placements
                // unless the mix gives it CPUs of its own
                let own = it.workload.placements();
                if it.cpus.is_none() {
                    for (t, list, k) in own.thread_cpus {
                        placed.thread_cpus.push((out.len() + t, list, k));
                    }
                }
                if it.mempolicy.is_none() {
                    for (task, p) in own.task_policies {
                        placed.task_policies.push((TaskId(task.0 + next_task), p));
                    }
                }
                let top = specs
                    .iter()
                    .map(|s| s.task.0 + next_task)
                    .chain(space.top)
                    .max()
                    .unwrap_or(next_task);
                for s in specs {
                    if let Some(c) = &it.cpus {
                        placed.thread_cpus.push((out.len(), c.clone(), k));
                        k += 1;
                    }
                    out.push(ThreadSpec {
                        task: TaskId(s.task.0 + next_task),
                        program: s.program,
                    });
                }
                if let Some(p) = &it.mempolicy {
                    for t in next_task..=top {
                        placed.task_policies.push((TaskId(t), p.clone()));
                    }
                }
                next_task = top + 1;
            }
        }
        *self.placed.lock().expect("placements") = placed;
        out
    }

    fn placements(&self) -> Placements {
        self.placed.lock().expect("placements").clone()
    }
}
