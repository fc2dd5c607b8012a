//! Carrying out a [`LaunchPlan`]: the host facts the planner needs, then either exec in place
//! (numactl's way: the command replaces numalab, so its exit status and signals are its own)
//! or, when numalab must stay (a placement thread, weights to restore), a supervised child
//! whose exit status and terminating signal numalab passes on as its own.

use crate::launch::{HostInfo, LaunchPlan, PercentMechanism, ThpAction, ThpMode};
use crate::nodespec::SpecContext;
use crate::percent_thread::PercentThread;
use numalab_core::{CpuId, NodeId};
use numalab_linux::sysroot::{Pid, SysRoot};
use std::ffi::OsString;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use thiserror::Error;

#[derive(Debug, Error)]
pub enum ExecError {
    #[error(transparent)]
    Linux(#[from] numalab_linux::Error),
    #[error("sched_setaffinity to CPUs {cpus}: {err}")]
    Affinity { cpus: String, err: std::io::Error },
    #[error("prctl(PR_SET_THP_DISABLE): {0}")]
    ThpDisable(std::io::Error),
    #[error("cannot run '{cmd}': {err}")]
    Spawn { cmd: String, err: std::io::Error },
    #[error("no command given: numalab run [OPTIONS] -- COMMAND [ARGS...]")]
    NoCommand,
    #[error("reading the host's NUMA state: {0}")]
    Host(String),
}

impl ExecError {
    /// The exit status a shell gives when it cannot run a command: 127 not found, 126 found
    /// but not executable; None for other errors.
    pub fn shell_status(&self) -> Option<i32> {
        match self {
            ExecError::Spawn { err, .. } if err.kind() == std::io::ErrorKind::NotFound => Some(127),
            ExecError::Spawn { .. } => Some(126),
            _ => None,
        }
    }
}

/// Read what [`crate::launch::plan`] checks against from the running kernel.
pub fn host_info(root: &SysRoot) -> Result<HostInfo, ExecError> {
    let tree = numalab_linux::node::read_node_tree(root)?;
    let allowed_nodes = numalab_linux::syscalls::mems_allowed()?;
    let online_cpus: Vec<CpuId> = {
        let mut v: Vec<CpuId> = tree
            .nodes
            .iter()
            .flat_map(|n| n.cpus.iter().copied())
            .collect();
        v.sort_unstable();
        v
    };
    let allowed_cpus = numalab_linux::syscalls::cpu_affinity()
        .map_err(|e| ExecError::Host(format!("sched_getaffinity: {e}")))?;
    let current_cpu = CpuId(unsafe { libc::sched_getcpu() }.max(0) as u32);
    let node_cpus: Vec<(NodeId, Vec<CpuId>)> =
        tree.nodes.iter().map(|n| (n.id, n.cpus.clone())).collect();
    let current_node = node_cpus
        .iter()
        .find(|(_, c)| c.contains(&current_cpu))
        .map(|(n, _)| *n)
        .unwrap_or(NodeId(0));
    let wi_dir = root.path(WEIGHTS_DIR);
    let has_weighted_interleave = wi_dir.is_dir();
    let weights_writable =
        has_weighted_interleave && writable(&wi_dir.join(format!("node{}", current_node.0)));
    let thp_system = root
        .read_optional("sys/kernel/mm/transparent_hugepage/enabled")?
        .and_then(|s| thp_choice(&s));
    Ok(HostInfo {
        spec: SpecContext {
            online_nodes: tree.online,
            allowed_nodes,
            online_cpus,
            allowed_cpus,
            devices: Some(root.clone()),
        },
        node_cpus,
        current_node,
        has_weighted_interleave,
        weights_writable,
        thp_system,
    })
}

const WEIGHTS_DIR: &str = "sys/kernel/mm/mempolicy/weighted_interleave";

fn writable(p: &std::path::Path) -> bool {
    use std::os::unix::ffi::OsStrExt;
    let Ok(c) = std::ffi::CString::new(p.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: c is a valid NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::W_OK) == 0 }
}

/// The bracketed choice of `always [madvise] never`.
fn thp_choice(s: &str) -> Option<ThpMode> {
    let chosen = s.split_whitespace().find(|w| w.starts_with('['))?;
    match chosen.trim_matches(|c| c == '[' || c == ']') {
        "always" => Some(ThpMode::Always),
        "madvise" => Some(ThpMode::Madvise),
        "never" => Some(ThpMode::Never),
        _ => None,
    }
}

fn set_affinity(cpus: &[CpuId]) -> Result<(), ExecError> {
    numalab_linux::syscalls::set_cpu_affinity(0, cpus).map_err(|err| ExecError::Affinity {
        cpus: numalab_machine::cpulist::format(cpus),
        err,
    })
}

/// Apply the plan's per-process parts to the calling process (inherited over fork and exec).
fn apply_to_self(plan: &LaunchPlan) -> Result<(), ExecError> {
    if let Some(cpus) = &plan.cpus {
        set_affinity(cpus)?;
    }
    if let Some(p) = &plan.policy {
        numalab_linux::syscalls::set_mempolicy(p)?;
    }
    if plan.thp == ThpAction::Disable {
        // SAFETY: prctl with integer arguments.
        if unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) } != 0 {
            return Err(ExecError::ThpDisable(std::io::Error::last_os_error()));
        }
    }
    Ok(())
}

fn command(plan: &LaunchPlan, cmd: &[OsString]) -> Result<Command, ExecError> {
    let (prog, args) = cmd.split_first().ok_or(ExecError::NoCommand)?;
    let mut c = Command::new(prog);
    c.args(args);
    if let Some(lib) = &plan.preload {
        let mut v = OsString::from(lib.as_os_str());
        if let Some(old) = std::env::var_os("LD_PRELOAD") {
            v.push(":");
            v.push(old);
        }
        c.env("LD_PRELOAD", v).env("NUMALAB_NEXT_TOUCH", "1");
    }
    Ok(c)
}

/// Run the command under the plan. Returns only on error or, for a supervised child, with the
/// exit code numalab should exit with (a child killed by a signal is re-raised first).
pub fn run(plan: &LaunchPlan, cmd: &[OsString]) -> Result<i32, ExecError> {
    let mut c = command(plan, cmd)?;
    let name = cmd[0].to_string_lossy().into_owned();
    if !plan.needs_supervisor() {
        apply_to_self(plan)?;
        let e = c.exec();
        return Err(ExecError::Spawn { cmd: name, err: e });
    }
    supervise(plan, c, name)
}

/// Pid of the supervised child, for the forwarding signal handler.
static CHILD: AtomicI32 = AtomicI32::new(0);

extern "C" fn forward(sig: libc::c_int) {
    let pid = CHILD.load(Ordering::Relaxed);
    if pid > 0 {
        // SAFETY: kill is async-signal-safe.
        unsafe { libc::kill(pid, sig) };
    }
}

fn supervise(plan: &LaunchPlan, mut c: Command, name: String) -> Result<i32, ExecError> {
    let percent = plan
        .percent
        .as_ref()
        .expect("supervised plans have a percentage");
    // Weights first (system-wide, root): restored below whatever happens to the child.
    let mut saved = Vec::new();
    if let PercentMechanism::WeightedInterleave { weights } = &percent.mechanism {
        let root = SysRoot::host();
        for (node, w) in weights {
            let rel = format!("{WEIGHTS_DIR}/node{}", node.0);
            let old = root.read(&rel)?;
            if let Err(e) = root.write(&rel, &w.to_string()) {
                restore(&saved);
                return Err(e.into());
            }
            saved.push((rel, old.trim().to_string()));
        }
    }
    let child_plan = plan.clone();
    // SAFETY: numalab is single-threaded here (the placement thread starts after the spawn),
    // so the closure may allocate between fork and exec.
    unsafe {
        c.pre_exec(move || {
            apply_to_self(&child_plan).map_err(|e| std::io::Error::other(e.to_string()))
        });
    }
    let mut child = match c.spawn() {
        Ok(ch) => ch,
        Err(e) => {
            restore(&saved);
            return Err(ExecError::Spawn { cmd: name, err: e });
        }
    };
    CHILD.store(child.id() as i32, Ordering::Relaxed);
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT] {
        // SAFETY: `forward` only calls kill.
        unsafe { libc::signal(sig, forward as *const () as libc::sighandler_t) };
    }
    let thread = match &percent.mechanism {
        PercentMechanism::PlacementThread { period_ms, control } => Some(PercentThread::start(
            Pid(child.id() as i32),
            percent.split.clone(),
            *period_ms,
            control.clone(),
        )),
        PercentMechanism::WeightedInterleave { .. } => None,
    };
    let status = child.wait();
    if let Some(t) = thread {
        let summary = t.stop();
        eprintln!("numalab: {summary}");
    }
    restore(&saved);
    let status = status.map_err(|e| ExecError::Spawn { cmd: name, err: e })?;
    if let Some(sig) = status.signal() {
        // Die the same way, so the shell sees the child's signal.
        // SAFETY: resetting a disposition and raising a signal on ourselves.
        unsafe {
            libc::signal(sig, libc::SIG_DFL);
            libc::raise(sig);
        }
        return Ok(128 + sig);
    }
    Ok(status.code().unwrap_or(1))
}

fn restore(saved: &[(String, String)]) {
    let root = SysRoot::host();
    for (rel, old) in saved {
        if let Err(e) = root.write(rel, old) {
            eprintln!("numalab: could not restore {rel} to {old}: {e}");
        }
    }
}

/// `numalab run --show`: the calling process's policy and binding, as `numactl --show` prints
/// (crate::numactl_show).
pub fn show() -> Result<String, ExecError> {
    let k = numalab_linux::syscalls::get_mempolicy()?;
    let cpus = numalab_linux::syscalls::cpu_affinity()
        .map_err(|e| ExecError::Host(format!("sched_getaffinity: {e}")))?;
    let tree = numalab_linux::node::read_node_tree(&SysRoot::host())?;
    let st = crate::numactl_show::ShowState {
        raw_mode: k.raw_mode(),
        nodes: k.nodes.iter().collect(),
        interleave_next: numalab_linux::syscalls::interleave_next_node().unwrap_or(0),
        cpus,
        mems_allowed: numalab_linux::syscalls::mems_allowed()?.iter().collect(),
    };
    Ok(crate::numactl_show::show(&st, &tree))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thp_bracket_is_the_choice() {
        assert_eq!(
            thp_choice("always [madvise] never\n"),
            Some(ThpMode::Madvise)
        );
        assert_eq!(thp_choice("[always] madvise never"), Some(ThpMode::Always));
        assert_eq!(thp_choice("always madvise never"), None);
    }

    #[test]
    fn host_info_reads_this_machine() {
        let h = host_info(&SysRoot::host()).unwrap();
        assert!(h.spec.online_nodes.contains(NodeId(0)));
        assert!(!h.spec.allowed_cpus.is_empty());
        assert!(h
            .spec
            .allowed_cpus
            .iter()
            .all(|c| h.spec.online_cpus.contains(c)));
        assert!(h.node_cpus.iter().any(|(n, _)| *n == h.current_node));
    }
}
