//! Syscall tests that need several NUMA nodes. They run in the test VM: QEMU with nodes 0-3
//! (one CPU each, ring distances 10/16/22) and node 4 (memory, no CPU). The harness runs every
//! `vm_*` test binary with `--ignored`; on a one-node host they are skipped.
//!
//! The tests take one lock: `migrate_pages` moves the whole process, and page counts per node
//! must not see another test's pages move underneath.

mod common;

use common::{in_thread, Region};
use numalab_core::{MemPolicy, NodeId, NodeMask};
use numalab_linux::node::read_node_tree;
use numalab_linux::numa_maps::read_numa_maps;
use numalab_linux::*;
use std::sync::Mutex;

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|p| p.into_inner())
}

fn nodes(list: &str) -> NodeMask {
    numalab_linux::parse::parse_node_list(list, "test").unwrap()
}

fn bind(list: &str) -> MemPolicy {
    MemPolicy::Bind {
        nodes: nodes(list),
        numa_balancing: false,
    }
}

fn query(r: &Region) -> Vec<PageStatus> {
    move_pages_query(Pid::SELF, &r.page_addrs(), &MovePagesOptions::default()).unwrap()
}

fn count_on(st: &[PageStatus], node: u16) -> usize {
    st.iter()
        .filter(|s| **s == PageStatus::OnNode(NodeId(node)))
        .count()
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_node_tree_is_the_ring_plus_a_cpuless_node() {
    let t = read_node_tree(&SysRoot::host()).unwrap();
    assert_eq!(t.online, nodes("0-4"));
    assert_eq!(t.nodes.len(), 5);
    assert_eq!(t.cpuless(), nodes("4"));
    assert!(t.has_memory.unwrap().contains(NodeId(4)));
    assert_eq!(t.has_cpu, Some(nodes("0-3")));
    for i in 0..4u16 {
        assert_eq!(
            t.node(NodeId(i)).unwrap().cpus.len(),
            1,
            "node {i} has one CPU"
        );
        for j in 0..4u16 {
            let want = match (i as i32 - j as i32).rem_euclid(4) {
                0 => 10,
                2 => 22,
                _ => 16,
            };
            assert_eq!(
                t.distance(NodeId(i), NodeId(j)),
                Some(want),
                "distance {i}->{j}"
            );
        }
        let d = t.distance(NodeId(i), NodeId(4)).unwrap();
        assert!(
            d > 10 && t.distance(NodeId(4), NodeId(i)) == Some(d),
            "node 4 distance {d} from {i}"
        );
    }
    assert_eq!(t.distance(NodeId(4), NodeId(4)), Some(10));
    assert!(
        t.node(NodeId(4))
            .unwrap()
            .meminfo
            .as_ref()
            .unwrap()
            .mem_total_kb
            > 0
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_bind_to_node2_then_fault() {
    let _g = serial();
    let mut r = Region::new(16);
    mbind(
        r.addr(),
        r.len_bytes(),
        &bind("2"),
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    r.touch_all();
    assert_eq!(query(&r), vec![PageStatus::OnNode(NodeId(2)); 16]);
    assert_eq!(node_of_address(r.page_addr(5)).unwrap(), NodeId(2));
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_thread_bind_policy_places_new_pages() {
    let _g = serial();
    in_thread(|| {
        set_mempolicy(&bind("1")).unwrap();
        let mut r = Region::new(8);
        r.touch_all();
        let st = query(&r);
        set_mempolicy(&MemPolicy::Default).unwrap();
        assert_eq!(count_on(&st, 1), 8, "{st:?}");
    });
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_interleave_64_pages_over_4_nodes() {
    let _g = serial();
    let mut r = Region::new(64);
    mbind(
        r.addr(),
        r.len_bytes(),
        &MemPolicy::Interleave {
            nodes: nodes("0-3"),
        },
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    r.touch_all();
    let st = query(&r);
    for n in 0..4 {
        assert_eq!(count_on(&st, n), 16, "node {n}: {st:?}");
    }
    // A VMA interleave is offset-based: consecutive pages go to consecutive nodes of the mask.
    let first = st[0].node().unwrap().0;
    for (i, s) in st.iter().enumerate() {
        assert_eq!(s.node().unwrap().0, (first + i as u16) % 4, "page {i}");
    }
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_weighted_interleave_follows_the_sysfs_weights() {
    let _g = serial();
    let Some(w) = numalab_linux::weighted_interleave::read_weights(&SysRoot::host()).unwrap()
    else {
        eprintln!("kernel before 6.9: no MPOL_WEIGHTED_INTERLEAVE, skipped");
        return;
    };
    let (w0, w1) = (
        w.weight(NodeId(0)).unwrap() as usize,
        w.weight(NodeId(1)).unwrap() as usize,
    );
    let rounds = 4;
    let mut r = Region::new((w0 + w1) * rounds);
    let p = MemPolicy::WeightedInterleave {
        nodes: nodes("0-1"),
        weights: vec![],
    };
    mbind(
        r.addr(),
        r.len_bytes(),
        &p,
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    r.touch_all();
    let st = query(&r);
    assert_eq!(
        (count_on(&st, 0), count_on(&st, 1)),
        (w0 * rounds, w1 * rounds),
        "{st:?}"
    );
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_move_pages_0_to_3_keeps_data() {
    let _g = serial();
    let mut r = Region::new(64);
    mbind(
        r.addr(),
        r.len_bytes(),
        &bind("0"),
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    r.fill(0xdead_beef);
    let sum = r.checksum();
    assert_eq!(count_on(&query(&r), 0), 64);
    // Moving does not need the range policy to agree (move_pages ignores it); batches of 10.
    let opts = MovePagesOptions {
        batch_pages: 10,
        ..Default::default()
    };
    let rep = move_pages_to(Pid::SELF, &r.page_addrs(), NodeId(3), &opts).unwrap();
    assert_eq!(rep.count_on(NodeId(3)), 64, "{rep:?}");
    assert_eq!(rep.not_moved, 0);
    assert_eq!(count_on(&query(&r), 3), 64);
    assert_eq!(r.checksum(), sum);
    // Per-page targets, including the CPU-less node 4.
    let targets: Vec<NodeId> = (0..64).map(|i| NodeId([1, 4][i % 2])).collect();
    let rep = move_pages(Pid::SELF, &r.page_addrs(), &targets, &opts).unwrap();
    assert_eq!((rep.count_on(NodeId(1)), rep.count_on(NodeId(4))), (32, 32));
    assert_eq!(r.checksum(), sum);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_migrate_pages_of_own_process() {
    let _g = serial();
    let mut r = Region::new(32);
    r.fill(3);
    let sum = r.checksum();
    move_pages_to(
        Pid::SELF,
        &r.page_addrs(),
        NodeId(1),
        &MovePagesOptions::default(),
    )
    .unwrap();
    assert_eq!(count_on(&query(&r), 1), 32);
    // Shared pages (libraries) may stay behind; the region is private and must move.
    let _left = migrate_pages(Pid::SELF, &nodes("1"), &nodes("3")).unwrap();
    assert_eq!(count_on(&query(&r), 3), 32);
    assert_eq!(r.checksum(), sum);
    // By the real pid too.
    migrate_pages(Pid::current(), &nodes("3"), &nodes("2")).unwrap();
    assert_eq!(count_on(&query(&r), 2), 32);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_get_mempolicy_of_an_address() {
    let _g = serial();
    let mut r = Region::new(8);
    let other = Region::new(1);
    let il = MemPolicy::Interleave {
        nodes: nodes("1-2"),
    };
    mbind(
        r.addr(),
        r.len_bytes(),
        &il,
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    assert_eq!(get_range_policy(r.page_addr(7)).unwrap().to_mempolicy(), il);
    assert_eq!(
        get_range_policy(other.addr()).unwrap().mode,
        KernelMode::Default
    );
    r.touch_all();
    for i in 0..8 {
        let n = node_of_address(r.page_addr(i)).unwrap();
        assert!(n == NodeId(1) || n == NodeId(2), "page {i} on {n}");
    }
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_preferred_many() {
    let _g = serial();
    in_thread(|| {
        let p = MemPolicy::PreferredMany {
            nodes: nodes("2-3"),
        };
        set_mempolicy(&p).unwrap();
        assert_eq!(get_mempolicy().unwrap().to_mempolicy(), p);
        let mut r = Region::new(16);
        r.touch_all();
        let st = query(&r);
        set_mempolicy(&MemPolicy::Default).unwrap();
        assert_eq!(count_on(&st, 2) + count_on(&st, 3), 16, "{st:?}");
    });
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_home_node_picks_the_first_choice() {
    let _g = serial();
    let mut r = Region::new(16);
    mbind(
        r.addr(),
        r.len_bytes(),
        &bind("1-3"),
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    set_mempolicy_home_node(r.addr(), r.len_bytes(), NodeId(3)).unwrap();
    r.touch_all();
    assert_eq!(count_on(&query(&r), 3), 16);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_numa_maps_of_self_shows_n2() {
    let _g = serial();
    let mut r = Region::new(32);
    mbind(
        r.addr(),
        r.len_bytes(),
        &bind("2"),
        ModeFlags::empty(),
        MbindFlags::empty(),
    )
    .unwrap();
    r.touch_all();
    let maps = read_numa_maps(&SysRoot::host(), Pid::SELF).unwrap();
    let e = maps
        .iter()
        .find(|e| e.start == r.addr() as u64)
        .expect("numa_maps line of the region");
    assert_eq!(e.policy.to_mempolicy(), Some(bind("2")));
    assert_eq!(e.pages_per_node.get(&NodeId(2)), Some(&32));
    assert_eq!(e.pages(), 32);
    assert_eq!(e.bytes_on(NodeId(2)), 32 * common::page_bytes() as u64);
}

#[test]
#[ignore = "needs the multi-node VM: see docs/testing.md"]
fn vm_errors_name_the_online_nodes() {
    let e = in_thread(|| set_mempolicy(&bind("7")).unwrap_err());
    assert!(
        e.to_string()
            .contains("node 7 does not exist: online nodes are 0-4"),
        "{e}"
    );
    let r = Region::new(1);
    let e = move_pages_to(
        Pid::SELF,
        &r.page_addrs(),
        NodeId(9),
        &MovePagesOptions::default(),
    )
    .unwrap_err();
    assert!(
        e.to_string()
            .contains("node 9 does not exist: online nodes are 0-4"),
        "{e}"
    );
}
