//! `mix`: multiprogrammed runs of the single-threaded §5 kernels, as the seed studies ran them
//! (reference/workloads.md §5, §7.3 workload A/B, §7.5: N copies of a program side by side).
//!
//! `mix:lbm-like*22` is 22 copies of lbm-like; `mix:lbm-like*4+mcf-like*4` mixes programs;
//! a program may carry its own keys in parentheses, separated by `;`:
//! `mix:mcf-like(nodes=100000;pivots=5000)*2+libquantum-like*2`. Keys after the programs apply
//! to the whole mix (`,scale=0.1` goes to every program that does not set its own scale).
//!
//! Every copy is a separate process: its own [`TaskId`] (copies numbered in spec order from 0)
//! and its own mappings, first-touched by itself, so placements and memory policies pin and
//! place each copy independently. The mix sets its own thread count (the number of copies).

use crate::gcc::Gcc;
use crate::gems::Gems;
use crate::kernel::SingleKernel;
use crate::lbm::Lbm;
use crate::libquantum::Libquantum;
use crate::mcf::Mcf;
use crate::omnetpp::Omnetpp;
use crate::spec::{self, Params, WorkloadError};
use numalab_core::workload::{AddressSpace, ThreadSpec, Workload};
use numalab_core::TaskId;
use std::sync::Arc;

pub const NAME: &str = "mix";
pub const KEYS: &[&str] = &["scale"];
pub const DESCRIPTION: &str = "multiprogrammed mix of single-threaded §5 kernels, one task (process) per copy: mix:PROG*N+PROG*N..., PROG = name or name(key=value;...), e.g. mix:lbm-like*4+mcf-like*4 (§5, §7.3, §7.5); the copy count sets the threads. \
keys: scale=factor in (0,1] for every program without its own scale (1). programs: lbm-like, gems-like, mcf-like, omnetpp-like, libquantum-like, gcc-like";

/// The programs a mix may contain: (name, keys).
pub const PROGRAMS: &[(&str, &[&str])] = &[
    (crate::lbm::NAME, crate::lbm::KEYS),
    (crate::gems::NAME, crate::gems::KEYS),
    (crate::mcf::NAME, crate::mcf::KEYS),
    (crate::omnetpp::NAME, crate::omnetpp::KEYS),
    (crate::libquantum::NAME, crate::libquantum::KEYS),
    (crate::gcc::NAME, crate::gcc::KEYS),
];

/// Most copies a mix may hold.
pub const MAX_COPIES: usize = 1 << 16;

/// One single-threaded program from `name` or `name:key=value,...`.
pub fn single_by_spec(s: &str) -> Result<Arc<dyn SingleKernel>, WorkloadError> {
    let (name, pairs) = spec::split(s)?;
    let (pname, keys) = PROGRAMS.iter().find(|(n, _)| *n == name).ok_or_else(|| {
        WorkloadError::UnknownWorkload {
            name: name.to_string(),
            valid: PROGRAMS
                .iter()
                .map(|(n, _)| *n)
                .collect::<Vec<_>>()
                .join(", "),
        }
    })?;
    let p = Params::new(pname, keys, pairs)?;
    Ok(match *pname {
        crate::lbm::NAME => Arc::new(Lbm::from_params(&p)?),
        crate::gems::NAME => Arc::new(Gems::from_params(&p)?),
        crate::mcf::NAME => Arc::new(Mcf::from_params(&p)?),
        crate::omnetpp::NAME => Arc::new(Omnetpp::from_params(&p)?),
        crate::libquantum::NAME => Arc::new(Libquantum::from_params(&p)?),
        crate::gcc::NAME => Arc::new(Gcc::from_params(&p)?),
        _ => unreachable!("every entry of PROGRAMS is matched"),
    })
}

/// A mix of programs, each with its number of copies.
pub struct Mix {
    pub programs: Vec<(Arc<dyn SingleKernel>, usize)>,
}

impl Mix {
    /// Parse what follows `mix:`.
    pub fn parse(body: &str) -> Result<Mix, WorkloadError> {
        let malformed = |why: String| WorkloadError::Malformed {
            spec: format!("{NAME}:{body}"),
            why,
        };
        let mut parts = body.split(',');
        let programs_part = parts.next().unwrap_or("").trim();
        if programs_part.is_empty() {
            return Err(malformed(
                "no programs: expected mix:PROG*N+PROG*N, e.g. mix:lbm-like*4+mcf-like*4".into(),
            ));
        }
        let rest: Vec<&str> = parts.collect();
        let keys_spec = format!("{NAME}:{}", rest.join(","));
        let (_, pairs) = spec::split(&keys_spec)?;
        let params = Params::new(NAME, KEYS, pairs)?;
        let scale = params.get("scale");
        if scale.is_some() {
            params.float_in("scale", 1.0, 0.0, 1.0)?;
        }
        let mut programs = Vec::new();
        let mut total = 0usize;
        for item in programs_part.split('+') {
            let item = item.trim();
            let (prog, count) = match item.rsplit_once('*') {
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
            let (name, keys) = match prog.split_once('(') {
                Some((n, k)) => {
                    let k = k.strip_suffix(')').ok_or_else(|| {
                        malformed(format!("'{prog}': keys in parentheses must end with ')'"))
                    })?;
                    (n.trim(), k.split(';').map(str::trim).collect::<Vec<_>>())
                }
                None => (prog, Vec::new()),
            };
            let mut keys: Vec<String> = keys
                .into_iter()
                .filter(|k| !k.is_empty())
                .map(String::from)
                .collect();
            if let Some(s) = scale {
                if !keys
                    .iter()
                    .any(|k| k.split('=').next().map(str::trim) == Some("scale"))
                {
                    keys.push(format!("scale={s}"));
                }
            }
            let single = if keys.is_empty() {
                name.to_string()
            } else {
                format!("{name}:{}", keys.join(","))
            };
            total += count;
            if total > MAX_COPIES {
                return Err(malformed(format!("more than {MAX_COPIES} copies")));
            }
            programs.push((single_by_spec(&single)?, count));
        }
        Ok(Mix { programs })
    }

    /// Copies in spec order: (program index, task id).
    pub fn copies(&self) -> impl Iterator<Item = (usize, TaskId)> + '_ {
        self.programs
            .iter()
            .enumerate()
            .flat_map(|(i, (_, n))| std::iter::repeat_n(i, *n))
            .enumerate()
            .map(|(t, i)| (i, TaskId(t as u32)))
    }
}

impl Workload for Mix {
    fn name(&self) -> String {
        let progs: Vec<String> = self
            .programs
            .iter()
            .map(|(k, n)| {
                let s = k.spec();
                let s = match s.split_once(':') {
                    Some((name, keys)) => format!("{name}({})", keys.replace(',', ";")),
                    None => s,
                };
                format!("{s}*{n}")
            })
            .collect();
        format!("{NAME}:{}", progs.join("+"))
    }

    fn threads(&self) -> usize {
        self.programs.iter().map(|(_, n)| n).sum()
    }

    fn build(&self, mem: &mut dyn AddressSpace) -> Vec<ThreadSpec> {
        self.copies()
            .map(|(i, task)| ThreadSpec {
                task,
                program: self.programs[i].0.build_copy(mem, task),
            })
            .collect()
    }
}
