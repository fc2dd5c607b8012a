//! `numalab run`: turn numactl's options into a launch plan, checked against the host before
//! anything is applied. numactl's spelling and meaning (numactl(8)); numalab adds
//! `--remote-percent=P[:NODES]`, `--thp` and `--next-touch`.
//!
//! Planning is pure (this file); carrying a plan out is `exec.rs`. Every error is found here,
//! so a bad option never leaves a half-applied state (weights written, a child started).

use crate::nodespec::{parse_cpus, parse_nodes, SpecContext, SpecError};
use crate::percent::{weighted_interleave_weights, PercentError, PercentSplit};
use numalab_core::{CpuId, MemPolicy, NodeId, NodeMask};
use std::path::PathBuf;
use thiserror::Error;

/// The options as the user gave them (numactl's long names).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RunOptions {
    pub interleave: Option<String>,
    pub membind: Option<String>,
    pub preferred: Option<String>,
    pub preferred_many: Option<String>,
    pub weighted_interleave: Option<String>,
    pub localalloc: bool,
    pub cpunodebind: Option<String>,
    pub physcpubind: Option<String>,
    pub balancing: bool,
    /// `P` or `P:NODES`.
    pub remote_percent: Option<String>,
    /// `never`, `madvise` or `always`.
    pub thp: Option<String>,
    pub next_touch: bool,
    /// How often the placement thread of `--remote-percent` re-checks pages.
    pub placement_period_ms: u64,
    /// A file holding P, re-read by the placement thread every period: writing a new P moves
    /// only the pages whose side changes.
    pub remote_percent_control: Option<PathBuf>,
}

/// The system-wide THP mode (`/sys/kernel/mm/transparent_hugepage/enabled`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ThpMode {
    Always,
    Madvise,
    Never,
}

impl ThpMode {
    pub fn name(self) -> &'static str {
        match self {
            ThpMode::Always => "always",
            ThpMode::Madvise => "madvise",
            ThpMode::Never => "never",
        }
    }
}

/// What the planner needs to know about the host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostInfo {
    pub spec: SpecContext,
    /// CPUs of each online node.
    pub node_cpus: Vec<(NodeId, Vec<CpuId>)>,
    /// Node of the CPU numalab runs on (the local node when nothing binds the child).
    pub current_node: NodeId,
    /// `/sys/kernel/mm/mempolicy/weighted_interleave` exists (Linux 6.9+).
    pub has_weighted_interleave: bool,
    /// ... and numalab may write it (root).
    pub weights_writable: bool,
    pub thp_system: Option<ThpMode>,
}

impl HostInfo {
    fn node_of_cpu(&self, cpu: CpuId) -> Option<NodeId> {
        self.node_cpus
            .iter()
            .find(|(_, cpus)| cpus.contains(&cpu))
            .map(|(n, _)| *n)
    }
}

/// How the child's THP use is changed.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ThpAction {
    /// Leave the system setting.
    Inherit,
    /// prctl(PR_SET_THP_DISABLE): no THP for the child and its descendants.
    Disable,
}

/// How a remote percentage is enforced.
#[derive(Clone, Debug, PartialEq)]
pub enum PercentMechanism {
    /// MPOL_WEIGHTED_INTERLEAVE over local + remote with these system-wide weights, restored
    /// when the child exits.
    WeightedInterleave { weights: Vec<(NodeId, u8)> },
    /// A placement thread moving pages with batched move_pages every `period_ms`, re-reading
    /// P from `control` if given.
    PlacementThread {
        period_ms: u64,
        control: Option<PathBuf>,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct PercentPlan {
    pub split: PercentSplit,
    pub remote: NodeMask,
    pub mechanism: PercentMechanism,
}

/// Everything `exec` does, decided up front.
#[derive(Clone, Debug, PartialEq)]
pub struct LaunchPlan {
    /// Task policy set in the child before exec (None: inherit numalab's).
    pub policy: Option<MemPolicy>,
    /// CPU affinity of the child (None: inherit).
    pub cpus: Option<Vec<CpuId>>,
    pub thp: ThpAction,
    pub percent: Option<PercentPlan>,
    /// The next-touch preload library, for `LD_PRELOAD`.
    pub preload: Option<PathBuf>,
}

impl LaunchPlan {
    /// Whether numalab must stay alive next to the child (placement thread, weights to
    /// restore); otherwise it execs the command in place, as numactl does.
    pub fn needs_supervisor(&self) -> bool {
        self.percent.is_some()
    }
}

#[derive(Debug, Error, PartialEq)]
pub enum LaunchError {
    #[error("--{option}: {err}")]
    Spec {
        option: &'static str,
        err: SpecError,
    },
    #[error("--{first} and --{second} both set the memory policy: give one")]
    TwoPolicies {
        first: &'static str,
        second: &'static str,
    },
    #[error("--cpunodebind and --physcpubind both set the CPUs: give one")]
    TwoCpuSets,
    #[error("--preferred takes a single node, '{0}' names several (use --preferred-many)")]
    PreferredSeveral(String),
    #[error(
        "--balancing works with --membind only (MPOL_F_NUMA_BALANCING is a flag of MPOL_BIND)"
    )]
    BalancingWithoutMembind,
    #[error("--remote-percent: '{0}' is not P or P:NODES with P a whole number from 0 to 100")]
    PercentSyntax(String),
    #[error("--remote-percent: {0}")]
    Percent(PercentError),
    #[error("--remote-percent needs the child's CPUs on one node to know what is local, but {what} spans nodes {nodes}: bind to one node with --cpunodebind=N")]
    LocalNotSingle { what: &'static str, nodes: NodeMask },
    #[error("--weighted-interleave needs MPOL_WEIGHTED_INTERLEAVE (Linux 6.9 or newer); this kernel has no /sys/kernel/mm/mempolicy/weighted_interleave")]
    NoWeightedInterleave,
    #[error("--thp='{0}': expected never, madvise or always")]
    ThpSyntax(String),
    #[error("--thp={wanted}: the system THP mode is '{system}' and a process can only opt out (PR_SET_THP_DISABLE); set /sys/kernel/mm/transparent_hugepage/enabled to {wanted} for this")]
    ThpNotPerProcess {
        wanted: &'static str,
        system: String,
    },
    #[error("--remote-percent-control needs --remote-percent")]
    ControlWithoutPercent,
    #[error("--next-touch needs the preload library {0}: build it with `cargo build --release -p numalab-nexttouch`")]
    NoPreload(PathBuf),
}

// Not `#[from]`: that would make the inner error a `source` too, and `{e:#}` would print
// its message twice.
impl From<PercentError> for LaunchError {
    fn from(e: PercentError) -> Self {
        LaunchError::Percent(e)
    }
}

fn spec_err(option: &'static str) -> impl Fn(SpecError) -> LaunchError {
    move |err| LaunchError::Spec { option, err }
}

/// Decide everything, check everything; apply nothing.
pub fn plan(
    opts: &RunOptions,
    host: &HostInfo,
    preload: Option<PathBuf>,
) -> Result<LaunchPlan, LaunchError> {
    let ctx = &host.spec;
    // One memory policy option at most, as numactl's modes are exclusive.
    let given: Vec<&'static str> = [
        ("interleave", opts.interleave.is_some()),
        ("membind", opts.membind.is_some()),
        ("preferred", opts.preferred.is_some()),
        ("preferred-many", opts.preferred_many.is_some()),
        ("weighted-interleave", opts.weighted_interleave.is_some()),
        ("localalloc", opts.localalloc),
        ("remote-percent", opts.remote_percent.is_some()),
    ]
    .into_iter()
    .filter(|(_, set)| *set)
    .map(|(n, _)| n)
    .collect();
    if given.len() > 1 {
        return Err(LaunchError::TwoPolicies {
            first: given[0],
            second: given[1],
        });
    }
    if opts.cpunodebind.is_some() && opts.physcpubind.is_some() {
        return Err(LaunchError::TwoCpuSets);
    }
    if opts.balancing && opts.membind.is_none() {
        return Err(LaunchError::BalancingWithoutMembind);
    }
    if opts.remote_percent_control.is_some() && opts.remote_percent.is_none() {
        return Err(LaunchError::ControlWithoutPercent);
    }

    let cpus = if let Some(s) = &opts.cpunodebind {
        let nodes = parse_nodes(s, ctx).map_err(spec_err("cpunodebind"))?;
        // every CPU of the nodes, whatever the current affinity, as libnuma's
        // numa_run_on_node_mask_all gives them (the kernel keeps the cpuset's part)
        let mut cpus: Vec<CpuId> = host
            .node_cpus
            .iter()
            .filter(|(n, _)| nodes.contains(*n))
            .flat_map(|(_, c)| c.iter().copied())
            .collect();
        cpus.sort_unstable();
        if cpus.is_empty() {
            // A CPU-less memory node: numactl refuses too.
            return Err(LaunchError::Spec {
                option: "cpunodebind",
                err: SpecError::Empty {
                    spec: format!("{s}' (node(s) {nodes} have no CPUs)"),
                    what: "CPU",
                },
            });
        }
        Some(cpus)
    } else if let Some(s) = &opts.physcpubind {
        Some(parse_cpus(s, ctx).map_err(spec_err("physcpubind"))?)
    } else {
        None
    };

    let nodes =
        |opt: &Option<String>, name: &'static str| -> Result<Option<NodeMask>, LaunchError> {
            opt.as_deref()
                .map(|s| parse_nodes(s, ctx).map_err(spec_err(name)))
                .transpose()
        };
    let mut policy = None;
    if let Some(m) = nodes(&opts.interleave, "interleave")? {
        policy = Some(MemPolicy::Interleave { nodes: m });
    }
    if let Some(m) = nodes(&opts.membind, "membind")? {
        policy = Some(MemPolicy::Bind {
            nodes: m,
            numa_balancing: opts.balancing,
        });
    }
    if let Some(m) = nodes(&opts.preferred, "preferred")? {
        if m.weight() != 1 {
            return Err(LaunchError::PreferredSeveral(
                opts.preferred.clone().unwrap_or_default(),
            ));
        }
        policy = Some(MemPolicy::Preferred {
            node: m.first().expect("non-empty"),
        });
    }
    if let Some(m) = nodes(&opts.preferred_many, "preferred-many")? {
        policy = Some(MemPolicy::PreferredMany { nodes: m });
    }
    if let Some(m) = nodes(&opts.weighted_interleave, "weighted-interleave")? {
        if !host.has_weighted_interleave {
            return Err(LaunchError::NoWeightedInterleave);
        }
        // Empty weights: the kernel uses the system-wide sysfs weights.
        policy = Some(MemPolicy::WeightedInterleave {
            nodes: m,
            weights: Vec::new(),
        });
    }
    if opts.localalloc {
        policy = Some(MemPolicy::Local);
    }

    let mut percent = None;
    let mut cpus = cpus;
    if let Some(spec) = &opts.remote_percent {
        let (p, remote_spec) = match spec.split_once(':') {
            Some((p, n)) => (p, Some(n)),
            None => (spec.as_str(), None),
        };
        let p: u32 = p
            .trim()
            .parse()
            .map_err(|_| LaunchError::PercentSyntax(spec.clone()))?;
        // The local node: where the child's CPUs are; unbound children are bound to the node
        // numalab runs on, since a percentage of "remote" means nothing for a wandering task.
        let local = match &cpus {
            Some(c) => {
                let on: NodeMask =
                    NodeMask::from_nodes(c.iter().filter_map(|c| host.node_of_cpu(*c)));
                if on.weight() != 1 {
                    let what = if opts.cpunodebind.is_some() {
                        "--cpunodebind"
                    } else {
                        "--physcpubind"
                    };
                    return Err(LaunchError::LocalNotSingle { what, nodes: on });
                }
                on.first().expect("one node")
            }
            None => {
                let local = host.current_node;
                cpus = host
                    .node_cpus
                    .iter()
                    .find(|(n, _)| *n == local)
                    .map(|(_, c)| {
                        c.iter()
                            .copied()
                            .filter(|c| ctx.allowed_cpus.contains(c))
                            .collect()
                    });
                local
            }
        };
        let remote = match remote_spec {
            Some(s) => parse_nodes(s, ctx).map_err(spec_err("remote-percent"))?,
            None => ctx.allowed_nodes.and_not(&NodeMask::single(local)),
        };
        let split = PercentSplit::new(p, local, &remote)?;
        // Weights only shape new allocations, so a P that changes at run time needs the thread.
        let weights = (host.has_weighted_interleave
            && host.weights_writable
            && opts.remote_percent_control.is_none())
        .then(|| weighted_interleave_weights(p as u8, remote.weight()))
        .flatten();
        let mechanism = match weights {
            Some((wl, wr)) => {
                let mut all = NodeMask::single(local);
                let mut w = vec![(local, wl)];
                for r in remote.iter() {
                    all.set(r);
                    w.push((r, wr));
                }
                policy = Some(MemPolicy::WeightedInterleave {
                    nodes: all,
                    weights: Vec::new(),
                });
                PercentMechanism::WeightedInterleave { weights: w }
            }
            None => {
                // First touch lands locally (CPUs are bound); the thread moves P % away.
                policy = Some(if p == 100 {
                    MemPolicy::Bind {
                        nodes: remote,
                        numa_balancing: false,
                    }
                } else {
                    MemPolicy::Local
                });
                PercentMechanism::PlacementThread {
                    period_ms: opts.placement_period_ms.max(1),
                    control: opts.remote_percent_control.clone(),
                }
            }
        };
        percent = Some(PercentPlan {
            split,
            remote,
            mechanism,
        });
    }

    let thp = match opts.thp.as_deref() {
        None => ThpAction::Inherit,
        Some("never") => ThpAction::Disable,
        Some(w @ ("always" | "madvise")) => {
            let wanted = if w == "always" {
                ThpMode::Always
            } else {
                ThpMode::Madvise
            };
            match host.thp_system {
                Some(s) if s == wanted => ThpAction::Inherit,
                s => {
                    return Err(LaunchError::ThpNotPerProcess {
                        wanted: wanted.name(),
                        system: s
                            .map(|s| s.name().to_string())
                            .unwrap_or_else(|| "unavailable (no THP support)".into()),
                    })
                }
            }
        }
        Some(other) => return Err(LaunchError::ThpSyntax(other.to_string())),
    };

    let preload = if opts.next_touch {
        match preload {
            Some(p) if p.exists() => Some(p),
            Some(p) => return Err(LaunchError::NoPreload(p)),
            None => {
                return Err(LaunchError::NoPreload(PathBuf::from(
                    "libnumalab_nexttouch.so",
                )))
            }
        }
    } else {
        None
    };

    Ok(LaunchPlan {
        policy,
        cpus,
        thp,
        percent,
        preload,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The test VM's shape: nodes 0-3 with CPU i on node i, node 4 CPU-less.
    fn host() -> HostInfo {
        HostInfo {
            spec: SpecContext {
                online_nodes: NodeMask::first_n(5),
                allowed_nodes: NodeMask::first_n(5),
                online_cpus: (0..4).map(CpuId).collect(),
                allowed_cpus: (0..4).map(CpuId).collect(),
                devices: None,
            },
            node_cpus: (0..4)
                .map(|i| (NodeId(i), vec![CpuId(i as u32)]))
                .chain([(NodeId(4), vec![])])
                .collect(),
            current_node: NodeId(1),
            has_weighted_interleave: true,
            weights_writable: true,
            thp_system: Some(ThpMode::Madvise),
        }
    }

    fn p(o: RunOptions) -> Result<LaunchPlan, LaunchError> {
        plan(&o, &host(), None)
    }

    #[test]
    fn numactl_modes_map_to_kernel_policies() {
        let pl = p(RunOptions {
            interleave: Some("all".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            pl.policy,
            Some(MemPolicy::Interleave {
                nodes: NodeMask::first_n(5)
            })
        );
        assert!(!pl.needs_supervisor());
        let pl = p(RunOptions {
            membind: Some("1-2".into()),
            balancing: true,
            ..Default::default()
        })
        .unwrap();
        assert_eq!(
            pl.policy,
            Some(MemPolicy::Bind {
                nodes: NodeMask::from_nodes([NodeId(1), NodeId(2)]),
                numa_balancing: true
            })
        );
        let pl = p(RunOptions {
            preferred: Some("+2".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(pl.policy, Some(MemPolicy::Preferred { node: NodeId(2) }));
        let pl = p(RunOptions {
            localalloc: true,
            cpunodebind: Some("3".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(pl.policy, Some(MemPolicy::Local));
        assert_eq!(pl.cpus, Some(vec![CpuId(3)]));
        let pl = p(RunOptions {
            physcpubind: Some("!0".into()),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(pl.cpus, Some(vec![CpuId(1), CpuId(2), CpuId(3)]));
        assert_eq!(pl.policy, None, "no memory option: inherit");
    }

    #[test]
    fn conflicts_and_bad_specs_are_refused() {
        let e = p(RunOptions {
            interleave: Some("0".into()),
            membind: Some("1".into()),
            ..Default::default()
        });
        assert_eq!(
            e,
            Err(LaunchError::TwoPolicies {
                first: "interleave",
                second: "membind"
            })
        );
        let e = p(RunOptions {
            cpunodebind: Some("0".into()),
            physcpubind: Some("1".into()),
            ..Default::default()
        });
        assert_eq!(e, Err(LaunchError::TwoCpuSets));
        assert_eq!(
            p(RunOptions {
                balancing: true,
                ..Default::default()
            }),
            Err(LaunchError::BalancingWithoutMembind)
        );
        let e = p(RunOptions {
            preferred: Some("1-2".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("--preferred-many"), "{e}");
        let e = p(RunOptions {
            membind: Some("9".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "--membind: '9': node 9 does not exist (online nodes: 0-4)"
        );
        let e = p(RunOptions {
            cpunodebind: Some("4".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(e.to_string().contains("have no CPUs"), "{e}");
        let e = p(RunOptions {
            thp: Some("sometimes".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(e, LaunchError::ThpSyntax(_)));
        let e = p(RunOptions {
            thp: Some("always".into()),
            ..Default::default()
        })
        .unwrap_err();
        assert!(
            e.to_string().contains("system THP mode is 'madvise'"),
            "{e}"
        );
        assert_eq!(
            p(RunOptions {
                thp: Some("never".into()),
                ..Default::default()
            })
            .unwrap()
            .thp,
            ThpAction::Disable
        );
        assert_eq!(
            p(RunOptions {
                thp: Some("madvise".into()),
                ..Default::default()
            })
            .unwrap()
            .thp,
            ThpAction::Inherit
        );
        let e = p(RunOptions {
            next_touch: true,
            ..Default::default()
        })
        .unwrap_err();
        assert!(matches!(e, LaunchError::NoPreload(_)));
    }

    #[test]
    fn weighted_interleave_needs_a_new_kernel() {
        let mut h = host();
        h.has_weighted_interleave = false;
        let o = RunOptions {
            weighted_interleave: Some("0-3".into()),
            ..Default::default()
        };
        assert_eq!(plan(&o, &h, None), Err(LaunchError::NoWeightedInterleave));
        assert!(plan(&o, &host(), None).is_ok());
    }

    #[test]
    fn remote_percent_picks_weights_or_the_placement_thread() {
        let o = RunOptions {
            remote_percent: Some("40:2-3".into()),
            cpunodebind: Some("0".into()),
            placement_period_ms: 100,
            ..Default::default()
        };
        let pl = plan(&o, &host(), None).unwrap();
        let pp = pl.percent.clone().unwrap();
        assert_eq!(pp.split.local(), NodeId(0));
        // 60 : 40 over two remote nodes -> local 3, each remote 1.
        assert_eq!(
            pp.mechanism,
            PercentMechanism::WeightedInterleave {
                weights: vec![(NodeId(0), 3), (NodeId(2), 1), (NodeId(3), 1)]
            }
        );
        assert!(matches!(
            pl.policy,
            Some(MemPolicy::WeightedInterleave { .. })
        ));
        assert!(
            pl.needs_supervisor(),
            "weights are restored when the child exits"
        );

        let mut old = host();
        old.has_weighted_interleave = false;
        let pl = plan(&o, &old, None).unwrap();
        assert_eq!(
            pl.percent.unwrap().mechanism,
            PercentMechanism::PlacementThread {
                period_ms: 100,
                control: None
            }
        );
        assert_eq!(pl.policy, Some(MemPolicy::Local));
        // A control file (P changing at run time) always takes the placement thread.
        let oc = RunOptions {
            remote_percent_control: Some("/tmp/p".into()),
            ..o.clone()
        };
        let pl = plan(&oc, &host(), None).unwrap();
        assert!(matches!(
            pl.percent.unwrap().mechanism,
            PercentMechanism::PlacementThread {
                control: Some(_),
                ..
            }
        ));
        let bad = RunOptions {
            remote_percent_control: Some("/tmp/p".into()),
            ..Default::default()
        };
        assert_eq!(
            plan(&bad, &host(), None),
            Err(LaunchError::ControlWithoutPercent)
        );

        // Unbound: bound to the node numalab runs on; remote defaults to every other node.
        let o = RunOptions {
            remote_percent: Some("25".into()),
            ..Default::default()
        };
        let pl = plan(&o, &host(), None).unwrap();
        assert_eq!(pl.cpus, Some(vec![CpuId(1)]));
        let pp = pl.percent.unwrap();
        assert_eq!(pp.split.local(), NodeId(1));
        assert_eq!(pp.remote.to_string(), "0,2-4");

        let o = RunOptions {
            remote_percent: Some("25".into()),
            physcpubind: Some("0-1".into()),
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, &host(), None),
            Err(LaunchError::LocalNotSingle { .. })
        ));
        let o = RunOptions {
            remote_percent: Some("x".into()),
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, &host(), None),
            Err(LaunchError::PercentSyntax(_))
        ));
        let o = RunOptions {
            remote_percent: Some("140".into()),
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, &host(), None),
            Err(LaunchError::Percent(PercentError::OutOfRange(140)))
        ));
        let o = RunOptions {
            remote_percent: Some("10:1".into()),
            cpunodebind: Some("1".into()),
            ..Default::default()
        };
        assert!(matches!(
            plan(&o, &host(), None),
            Err(LaunchError::Percent(PercentError::LocalInRemote { .. }))
        ));
    }
}
