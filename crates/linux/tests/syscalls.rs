//! The syscalls on the host. These work on a single-node machine (node 0 only); what needs
//! several nodes is in vm_syscalls.rs.

mod common;

use common::{dead_pid, in_thread, numa_syscalls_available, Region};
use numalab_core::{MemPolicy, NodeId, NodeMask};
use numalab_linux::*;

fn node0() -> NodeMask {
    NodeMask::single(NodeId(0))
}

#[test]
fn set_get_mempolicy_round_trip_on_node0() {
    if !numa_syscalls_available() {
        return;
    }
    in_thread(|| {
        let before = get_mempolicy().unwrap();
        for p in [
            MemPolicy::Bind {
                nodes: node0(),
                numa_balancing: false,
            },
            MemPolicy::Bind {
                nodes: node0(),
                numa_balancing: true,
            },
            MemPolicy::Preferred { node: NodeId(0) },
            MemPolicy::Interleave { nodes: node0() },
            MemPolicy::Local,
            MemPolicy::Default,
        ] {
            set_mempolicy(&p).unwrap();
            assert_eq!(
                get_mempolicy().unwrap().to_mempolicy(),
                p,
                "round trip of {p}"
            );
        }
        set_mempolicy_flags(
            &MemPolicy::Interleave { nodes: node0() },
            ModeFlags::STATIC_NODES,
        )
        .unwrap();
        let k = get_mempolicy().unwrap();
        assert_eq!(
            (k.mode, k.flags, k.nodes),
            (KernelMode::Interleave, ModeFlags::STATIC_NODES, node0())
        );
        set_kernel_mempolicy(&before).unwrap();
        assert_eq!(get_mempolicy().unwrap(), before);
    });
}

#[test]
fn weighted_interleave_checks_the_system_wide_weights() {
    if !numa_syscalls_available() {
        return;
    }
    if !std::path::Path::new("/sys/kernel/mm/mempolicy/weighted_interleave").exists() {
        eprintln!("kernel without MPOL_WEIGHTED_INTERLEAVE (before 6.9): skipped");
        return;
    }
    in_thread(|| {
        let w = numalab_linux::weighted_interleave::read_weights(&SysRoot::host())
            .unwrap()
            .unwrap();
        let current = w.weight(NodeId(0)).unwrap();
        // Empty weights: whatever is in force.
        let p = MemPolicy::WeightedInterleave {
            nodes: node0(),
            weights: vec![],
        };
        set_mempolicy(&p).unwrap();
        assert_eq!(get_mempolicy().unwrap().to_mempolicy(), p);
        // Weights equal to sysfs pass; different ones are refused before the call.
        set_mempolicy(&MemPolicy::WeightedInterleave {
            nodes: node0(),
            weights: vec![current],
        })
        .unwrap();
        let other = if current == 255 { 1 } else { current + 1 };
        let e = set_mempolicy(&MemPolicy::WeightedInterleave {
            nodes: node0(),
            weights: vec![other],
        })
        .unwrap_err();
        assert!(matches!(e, Error::Argument { .. }), "{e}");
        assert!(e.to_string().contains("system-wide"), "{e}");
        set_mempolicy(&MemPolicy::Default).unwrap();
    });
}

#[test]
fn remote_percent_is_refused_with_advice() {
    let e = set_mempolicy(&MemPolicy::RemotePercent {
        percent: 30,
        remote: NodeMask::empty(),
    })
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::NotAKernelPolicy {
                syscall: "set_mempolicy",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("numalab's placement runtime"), "{e}");
}

#[test]
fn mbind_on_an_mmapped_region() {
    if !numa_syscalls_available() {
        return;
    }
    let mut r = Region::new(16);
    let bind0 = MemPolicy::Bind {
        nodes: node0(),
        numa_balancing: false,
    };
    mbind(
        r.addr(),
        r.len_bytes(),
        &bind0,
        ModeFlags::empty(),
        MbindFlags::STRICT | MbindFlags::MOVE,
    )
    .unwrap();
    assert_eq!(get_range_policy(r.addr()).unwrap().to_mempolicy(), bind0);
    assert_eq!(
        get_range_policy(r.page_addr(15)).unwrap().to_mempolicy(),
        bind0
    );
    r.touch_all();
    assert_eq!(node_of_address(r.page_addr(3)).unwrap(), NodeId(0));
    // Back to the default policy for the range.
    mbind(
        r.addr(),
        r.len_bytes(),
        &MemPolicy::Default,
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    assert_eq!(
        get_range_policy(r.addr()).unwrap().mode,
        KernelMode::Default
    );
    // Misaligned start: refused before the call.
    let e = mbind(
        r.addr() + 1,
        4096,
        &bind0,
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Argument {
                syscall: "mbind",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("not aligned"), "{e}");
}

#[test]
fn home_node_needs_a_bind_or_preferred_many_range() {
    if !numa_syscalls_available() {
        return;
    }
    let r = Region::new(8);
    let bind0 = MemPolicy::Bind {
        nodes: node0(),
        numa_balancing: false,
    };
    mbind(
        r.addr(),
        r.len_bytes(),
        &bind0,
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    set_mempolicy_home_node(r.addr(), r.len_bytes(), NodeId(0)).unwrap();
    mbind(
        r.addr(),
        r.len_bytes(),
        &MemPolicy::Interleave { nodes: node0() },
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    let e = set_mempolicy_home_node(r.addr(), r.len_bytes(), NodeId(0)).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EOPNOTSUPP), "{e}");
    assert!(
        e.to_string()
            .contains("mbind the range with MPOL_BIND or MPOL_PREFERRED_MANY first"),
        "{e}"
    );
}

#[test]
fn mems_allowed_holds_node0() {
    if !numa_syscalls_available() {
        return;
    }
    assert!(mems_allowed().unwrap().contains(NodeId(0)));
}

#[test]
fn move_pages_query_touched_and_untouched() {
    if !numa_syscalls_available() {
        return;
    }
    let mut r = Region::new(10);
    for i in (0..10).step_by(2) {
        r.touch(i);
    }
    let all = move_pages_query(Pid::SELF, &r.page_addrs(), &MovePagesOptions::default()).unwrap();
    let want: Vec<PageStatus> = (0..10)
        .map(|i| {
            if i % 2 == 0 {
                PageStatus::OnNode(NodeId(0))
            } else {
                PageStatus::NotPresent
            }
        })
        .collect();
    assert_eq!(all, want);
    // Batches of 3 give the same answer, in order.
    let opts = MovePagesOptions {
        batch_pages: 3,
        ..Default::default()
    };
    assert_eq!(
        move_pages_query(Pid::SELF, &r.page_addrs(), &opts).unwrap(),
        want
    );
    // The pid itself, rather than 0, names the same process.
    assert_eq!(
        move_pages_query(Pid::current(), &r.page_addrs(), &opts).unwrap(),
        want
    );
    let e = move_pages_query(
        Pid::SELF,
        &r.page_addrs(),
        &MovePagesOptions {
            batch_pages: 0,
            ..Default::default()
        },
    );
    assert!(matches!(e, Err(Error::Argument { .. })));
}

#[test]
fn move_pages_to_node0_keeps_data() {
    if !numa_syscalls_available() {
        return;
    }
    let mut r = Region::new(32);
    r.fill(7);
    let sum = r.checksum();
    let opts = MovePagesOptions {
        batch_pages: 5,
        ..Default::default()
    };
    let rep = move_pages_to(Pid::SELF, &r.page_addrs(), NodeId(0), &opts).unwrap();
    assert_eq!(rep.status.len(), 32);
    assert_eq!(rep.count_on(NodeId(0)), 32);
    assert_eq!(rep.not_moved, 0);
    assert_eq!(r.checksum(), sum);
    let e = move_pages(Pid::SELF, &r.page_addrs(), &[NodeId(0)], &opts).unwrap_err();
    assert!(e.to_string().contains("32 pages but 1 target nodes"), "{e}");
}

#[test]
fn nonexistent_node_errors_say_which_nodes_exist() {
    if !numa_syscalls_available() {
        return;
    }
    let online = numalab_linux::node::read_node_tree(&SysRoot::host())
        .unwrap()
        .online;
    let bad = NodeId(7);
    assert!(
        !online.contains(bad),
        "this test expects a machine without node 7"
    );
    let want = format!("node 7 does not exist: online nodes are {online}");

    let e = in_thread(move || {
        set_mempolicy(&MemPolicy::Bind {
            nodes: NodeMask::single(bad),
            numa_balancing: false,
        })
        .unwrap_err()
    });
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    assert!(e.to_string().contains(&want), "{e}");
    assert!(e.to_string().starts_with("set_mempolicy: "), "{e}");

    let r = Region::new(4);
    let e = mbind(
        r.addr(),
        r.len_bytes(),
        &MemPolicy::Interleave {
            nodes: NodeMask::single(bad),
        },
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    assert!(e.to_string().contains(&want), "{e}");

    let e = move_pages_to(
        Pid::SELF,
        &r.page_addrs(),
        bad,
        &MovePagesOptions::default(),
    )
    .unwrap_err();
    assert!(
        matches!(
            e,
            Error::Argument {
                syscall: "move_pages",
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains(&want), "{e}");

    let e = migrate_pages(Pid::SELF, &node0(), &NodeMask::single(bad)).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EINVAL), "{e}");
    assert!(e.to_string().contains(&want), "{e}");
}

#[test]
fn dead_pid_errors() {
    if !numa_syscalls_available() {
        return;
    }
    let pid = Pid(dead_pid());
    let e = migrate_pages(pid, &node0(), &node0()).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ESRCH), "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("no process with pid {}", pid.0)) && msg.contains("may have exited"),
        "{msg}"
    );

    let r = Region::new(2);
    let e = move_pages_query(pid, &r.page_addrs(), &MovePagesOptions::default()).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ESRCH), "{e}");
    assert!(
        e.to_string().starts_with("move_pages: no process with pid"),
        "{e}"
    );
}

#[test]
fn migrate_pages_of_self_within_node0() {
    if !numa_syscalls_available() {
        return;
    }
    // On one node there is nowhere to go, but the call is valid and leaves nothing behind.
    assert_eq!(migrate_pages(Pid::SELF, &node0(), &node0()).unwrap(), 0);
}
