//! The coherence protocols' link traffic (src/coherence.rs) against AMD's measurements of a
//! 4-socket Opteron square (pub. 40555, "Performance Guidelines for AMD Athlon 64 and AMD
//! Opteron ccNUMA Multiprocessor Systems", rev. 3.00, 2006, §A.2.1), QPI's flits on the Intel
//! presets, and the machine-file key that selects a protocol.

use numalab_core::NodeId;
use numalab_machine::{preset, Coherence, LinkDir, Machine, Routes};

fn node(i: u16) -> NodeId {
    NodeId(i)
}

/// The slot of the direction `from → to` of the link joining them.
fn slot(m: &Machine, from: u16, to: u16) -> usize {
    let k = m
        .links
        .iter()
        .position(|l| (l.a.0, l.b.0) == (from, to) || (l.a.0, l.b.0) == (to, from))
        .expect("a link between the nodes");
    LinkDir {
        link: k,
        forward: m.links[k].a.0 == from,
    }
    .slot()
}

fn bytes_on(w: &[(usize, f64)], slot: usize) -> f64 {
    w.iter().filter(|&&(s, _)| s == slot).map(|&(_, b)| b).sum()
}

fn square() -> (Machine, Routes) {
    let m = preset("opteron8347he-4n").unwrap();
    assert_eq!(m.coherence, Coherence::HtBroadcast);
    let r = m.routes().unwrap();
    (m, r)
}

#[test]
fn a_remote_read_loads_the_outgoing_link_a_third_of_the_incoming_as_amd_measured() {
    // 40555 §A.2.1: a thread on node 0 reading node 1's memory puts 752 MB/s of non-data
    // traffic on the outgoing link and 2.2 GB/s on the incoming one: 0.34
    let (m, r) = square();
    let w = m.read_wire(&r, node(0), node(1));
    let (out, inc) = (bytes_on(&w, slot(&m, 0, 1)), bytes_on(&w, slot(&m, 1, 0)));
    let ratio = out / inc;
    assert!(
        (0.27..=0.41).contains(&ratio),
        "out {out} B, in {inc} B a line: {ratio}"
    );
    // the data and its header dominate the incoming direction
    assert!((68.0..110.0).contains(&inc), "{inc}");
    // "some non-data traffic" on the other links: probes to nodes 2 and 3, their answers
    for (a, b) in [(1, 3), (3, 1), (0, 2), (2, 0)] {
        assert!(bytes_on(&w, slot(&m, a, b)) > 0.0, "{a} -> {b}: {w:?}");
    }
}

#[test]
fn a_remote_store_loads_both_directions_alike_as_amd_measured() {
    // 40555 §A.2.1: a thread on node 0 writing node 1's memory sees as much traffic on the
    // incoming link as on the outgoing one (2.2 GB/s each): a store miss reads the line for
    // ownership, and its write-back carries it back
    let (m, r) = square();
    let rfo = m.read_wire(&r, node(0), node(1));
    let wb = m.write_back_wire(&r, node(0), node(1));
    let out = bytes_on(&rfo, slot(&m, 0, 1)) + bytes_on(&wb, slot(&m, 0, 1));
    let inc = bytes_on(&rfo, slot(&m, 1, 0)) + bytes_on(&wb, slot(&m, 1, 0));
    let ratio = out / inc;
    assert!(
        (0.85..=1.2).contains(&ratio),
        "out {out} B, in {inc} B: {ratio}"
    );
}

#[test]
fn broadcast_probes_load_the_links_for_local_reads_and_a_probe_filter_does_not() {
    let (m, r) = square();
    let local = m.read_wire(&r, node(0), node(0));
    // probes to nodes 1, 2, 3 and their answers: both of node 0's links, both ways
    for (a, b) in [(0, 1), (1, 0), (0, 2), (2, 0)] {
        assert!(
            bytes_on(&local, slot(&m, a, b)) > 0.0,
            "{a} -> {b}: {local:?}"
        );
    }
    let mut pf = m.clone();
    pf.coherence = Coherence::HtProbeFilter;
    assert!(pf.read_wire(&r, node(0), node(0)).is_empty());
    // a remote read with the filter: request, data and completion, and their NOPs
    let w = pf.read_wire(&r, node(0), node(1));
    assert_eq!(bytes_on(&w, slot(&m, 1, 0)), 4.0 + 64.0 + 4.0 + 4.0);
    assert_eq!(bytes_on(&w, slot(&m, 0, 1)), 8.0 + 4.0 + 4.0);
    assert_eq!(w.len(), 2, "{w:?}");
}

#[test]
fn the_flat_protocol_puts_the_payload_and_its_overhead_on_the_data_route() {
    let m = Machine::from_toml_str(
        "base = \"xeon-x5650-2n\"\ncoherence = \"flat\"\nlink_coherence_overhead = 0.1\n",
        "flat.toml",
    )
    .unwrap();
    let r = m.routes().unwrap();
    let wire = 64.0 * 1.1;
    assert!(m.read_wire(&r, node(0), node(0)).is_empty());
    assert_eq!(
        m.read_wire(&r, node(0), node(1)),
        vec![(slot(&m, 1, 0), wire)]
    );
    assert_eq!(
        m.write_back_wire(&r, node(0), node(1)),
        vec![(slot(&m, 0, 1), wire)]
    );
    assert_eq!(m.read_wire_factor(&r, node(0), node(1)), 1.1);
}

#[test]
fn qpi_source_snoop_sends_a_snoop_for_every_read_and_nine_flits_for_a_line() {
    // Westmere-EP, source snoop: a remote read is a request and a snoop (one flit each) to
    // the home socket and 9 flits of data back; a local read snoops the other socket, which
    // answers with one flit; a write-back is 1 + 9 flits, its completion one
    let m = preset("xeon-x5650-2n").unwrap();
    assert_eq!(m.coherence, Coherence::QpiSnoop);
    let r = m.routes().unwrap();
    let (out, inc) = (slot(&m, 0, 1), slot(&m, 1, 0));
    let remote = m.read_wire(&r, node(0), node(1));
    assert_eq!(
        (bytes_on(&remote, out), bytes_on(&remote, inc)),
        (16.0, 72.0)
    );
    let local = m.read_wire(&r, node(0), node(0));
    assert_eq!((bytes_on(&local, out), bytes_on(&local, inc)), (8.0, 8.0));
    let wb = m.write_back_wire(&r, node(0), node(1));
    assert_eq!((bytes_on(&wb, out), bytes_on(&wb, inc)), (80.0, 8.0));
    assert_eq!(m.bulk_wire_factor(), 72.0 / 64.0);
    // a stream of remote reads fills the data direction at 64 of every 72 bytes
    assert_eq!(m.read_wire_factor(&r, node(0), node(1)), 72.0 / 64.0);
    let cap = m.links[0].gbps_per_dir;
    assert!((m.read_payload_gbps(&r, node(0), node(1)) - cap * 64.0 / 72.0).abs() < 1e-9);
}

#[test]
fn a_qpi_directory_sends_no_snoop_and_a_snooping_four_socket_machine_snoops_all() {
    let m = preset("xeon-gold6130-4n").unwrap();
    assert_eq!(m.coherence, Coherence::QpiDirectory);
    let r = m.routes().unwrap();
    assert!(m.read_wire(&r, node(0), node(0)).is_empty());
    let w = m.read_wire(&r, node(0), node(1));
    assert_eq!(
        w,
        vec![(slot(&m, 0, 1), 8.0), (slot(&m, 1, 0), 72.0)],
        "a request and the data, on the pair's own link"
    );

    let mut snoop = m.clone();
    snoop.coherence = Coherence::QpiSnoop;
    let local = snoop.read_wire(&r, node(0), node(0));
    for k in 1..4 {
        assert_eq!(bytes_on(&local, slot(&m, 0, k)), 8.0, "snoop to {k}");
        assert_eq!(bytes_on(&local, slot(&m, k, 0)), 8.0, "answer from {k}");
    }
    let remote = snoop.read_wire(&r, node(0), node(1));
    assert_eq!(bytes_on(&remote, slot(&m, 0, 1)), 16.0);
    assert_eq!(bytes_on(&remote, slot(&m, 1, 0)), 72.0);
    for k in [2, 3] {
        // the third and fourth sockets are snooped by the requester and answer the home
        assert_eq!(bytes_on(&remote, slot(&m, 0, k)), 8.0, "snoop to {k}");
        assert_eq!(bytes_on(&remote, slot(&m, k, 1)), 8.0, "answer from {k}");
        assert_eq!(bytes_on(&remote, slot(&m, k, 0)), 0.0);
    }
}

#[test]
fn the_machine_file_names_the_protocol_and_refuses_a_flat_overhead_beside_another() {
    let load = |text: &str| Machine::from_toml_str(text, "test.toml");
    let m = load("base = \"opteron6164he-4n\"\ncoherence = \"ht-broadcast\"\n").unwrap();
    assert_eq!(m.coherence, Coherence::HtBroadcast);
    assert_eq!(m.link_coherence_overhead, 0.0);

    let e = load("base = \"opteron6164he-4n\"\ncoherence = \"mesif\"\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("coherence") && e.contains("mesif") && e.contains("ht-probe-filter"),
        "{e}"
    );

    let e = load("base = \"opteron6164he-4n\"\nlink_coherence_overhead = 0.1\n")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("link_coherence_overhead") && e.contains("flat"),
        "{e}"
    );

    // switching an HT preset to the flat factor needs the factor: the base has none
    let e = load("base = \"opteron6164he-4n\"\ncoherence = \"flat\"\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("link_coherence_overhead"), "{e}");

    let m =
        load("base = \"opteron6164he-4n\"\ncoherence = \"flat\"\nlink_coherence_overhead = 0.1\n")
            .unwrap();
    assert_eq!(
        (m.coherence, m.link_coherence_overhead),
        (Coherence::Flat, 0.1)
    );
    // a preset written out and read back keeps its protocol
    let back =
        Machine::from_toml_str(&preset("opteron6272-8n").unwrap().to_toml(), "back.toml").unwrap();
    assert_eq!(back.coherence, Coherence::HtProbeFilter);
}
