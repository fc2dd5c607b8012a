//! The analyzer against the simulator's own metrics and placement, on the THP false-sharing
//! scenario: two threads on nodes 0 and 1 write disjoint halves of each 2 MiB region.
//! Samples go through a sample file and back (round trip) before analysis.

use numalab_analyze::format::{SampleWriter, WriterOptions};
use numalab_analyze::record::MemorySource;
use numalab_analyze::{
    analyze, render_text, FileMeta, Options, Record, SampleReader, SampleSource,
};
use numalab_core::metrics::{lar_percent_from_samples, PageAccessStats, HOT_PAGE_THRESHOLD_PCT};
use numalab_core::PageSize;
use numalab_sim::{SimResult, ThpMode};

mod common;

use common::{machine, run, REGIONS};

fn meta(r: &SimResult) -> FileMeta {
    let m = machine();
    FileMeta {
        machine: r.machine.clone(),
        workload: r.workload.clone(),
        origin: "sim".into(),
        sample_period: common::SAMPLE_PERIOD,
        page_size: Some(PageSize::Base4K),
        nodes: m.topology.num_nodes() as u16,
        topology: Some(m.topology.clone()),
        ..Default::default()
    }
}

/// Writes the samples to a file in small batches and reads them back.
fn round_trip(r: &SimResult, name: &str) -> (Vec<Record>, std::path::PathBuf) {
    let path = std::env::temp_dir().join(format!("numalab-{name}-{}.arrows", std::process::id()));
    let mut w = SampleWriter::create(
        &path,
        &meta(r),
        WriterOptions {
            batch_rows: 1000,
            ..Default::default()
        },
    )
    .unwrap();
    for s in &r.samples {
        w.push_sample(s).unwrap();
    }
    w.finish().unwrap();
    let mut rd = SampleReader::open(&path).unwrap();
    let mut back = Vec::new();
    while let Some(b) = rd.next_batch().unwrap() {
        back.extend(b.records);
    }
    (back, path)
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol
}

#[test]
fn thp_false_sharing_matches_simulator_truth() {
    let huge = run(ThpMode::Always);
    let small = run(ThpMode::Never);
    assert!(
        huge.samples.len() > 2000,
        "enough samples: {}",
        huge.samples.len()
    );
    assert_eq!(huge.vmstat.pgfault_2m, REGIONS);

    // Round trip: every field of every sample survives the file.
    let (back, path) = round_trip(&huge, "thp");
    let originals: Vec<Record> = huge
        .samples
        .iter()
        .map(|s| Record::from_sample(*s))
        .collect();
    assert_eq!(back, originals);
    let rep = analyze(&mut SampleReader::open(&path).unwrap(), &Options::default()).unwrap();
    std::fs::remove_file(&path).ok();
    println!("{}", render_text(&rep));
    assert_eq!(rep.samples.total, huge.samples.len() as u64);
    assert_eq!(rep.nodes, 4);

    // LAR: the same formula as core's over the same samples, and close to the simulator's
    // controller counters (samples are a 1/61 subset).
    let lar = rep.lar_percent.unwrap();
    assert!(close(
        lar,
        lar_percent_from_samples(&huge.samples).unwrap(),
        1e-9
    ));
    let sim_lar = huge.metrics.lar_percent.unwrap();
    assert!(
        close(lar, sim_lar, 5.0),
        "LAR samples {lar} vs counters {sim_lar}"
    );
    assert!(
        close(lar, 50.0, 6.0),
        "one node holds each region, half the writes are remote: {lar}"
    );

    // Imbalance: all regions sit on the nodes of the two threads; compare with the
    // simulator's controller counters.
    let imb = rep.imbalance_percent.unwrap();
    let sim_imb = huge.metrics.imbalance_percent.unwrap();
    assert!(
        close(imb, sim_imb, 10.0),
        "imbalance samples {imb} vs counters {sim_imb}"
    );

    // Page metrics: the same as core's PageAccessStats on the same samples.
    let st = PageAccessStats::by_mapping(&huge.samples);
    assert_eq!(rep.pages.distinct_pages, st.page_count());
    assert!(close(
        rep.pages.pamup_percent.unwrap(),
        st.pamup_percent().unwrap(),
        1e-9
    ));
    assert!(close(
        rep.pages.psp_percent.unwrap(),
        st.psp_percent().unwrap(),
        1e-9
    ));
    assert_eq!(rep.pages.nhp, st.nhp(HOT_PAGE_THRESHOLD_PCT));
    assert_eq!(rep.pages.distinct_pages, REGIONS as usize, "four THPs");
    assert!(
        close(rep.pages.psp_percent.unwrap(), 100.0, 1e-9),
        "each THP has two threads"
    );

    // False sharing: every region is a THP used disjointly by nodes 0 and 1.
    let fs = &rep.false_sharing;
    assert_eq!(fs.regions_examined, REGIONS as usize);
    assert_eq!(fs.falsely_shared, REGIONS as usize);
    assert_eq!(fs.regions.len(), REGIONS as usize);
    for g in &fs.regions {
        assert!(g.mapped_huge);
        assert_eq!(g.shared_subpages, 0);
        assert!(close(g.disjoint_percent, 100.0, 1e-9));
        // Subpages 0-255 written by node 0, 256-511 by node 1; most are sampled.
        assert!(
            g.single_node_subpages[0] > 200 && g.single_node_subpages[0] <= 256,
            "{g:?}"
        );
        assert!(
            g.single_node_subpages[1] > 200 && g.single_node_subpages[1] <= 256,
            "{g:?}"
        );
        assert_eq!(g.single_node_subpages[2] + g.single_node_subpages[3], 0);
        // True placement: the simulator's samples put the whole THP on one node.
        assert_eq!(g.page_nodes.len(), 1, "{g:?}");
        // The remote half of the traffic, gone after a split.
        let remote = g.remote_dram.unwrap() as f64;
        assert!(close(remote / g.dram_samples as f64, 0.5, 0.1), "{g:?}");
        assert!(close(g.remote_dram_after_split, 0.0, 1e-9));
    }

    // What-if: splitting gives what the 4 KiB run really gets; interleaving everything over
    // 4 nodes gives 25 %.
    let sc = |n: &str| rep.what_if.iter().find(|s| s.name == n).unwrap();
    assert!(close(sc("as-is").lar_percent.unwrap(), lar, 1e-9));
    assert!(close(sc("as-is").imbalance_percent.unwrap(), imb, 1e-9));
    let split = sc("split-shared-2m").lar_percent.unwrap();
    let small_lar = small.metrics.lar_percent.unwrap();
    assert!(close(split, 100.0, 1e-9), "{split}");
    assert!(
        close(split, small_lar, 1.0),
        "what-if split {split} vs the 4K run {small_lar}"
    );
    assert!(close(sc("carrefour").lar_percent.unwrap(), 25.0, 1e-9));
    assert!(close(sc("interleave-all").lar_percent.unwrap(), 25.0, 1e-9));
    assert!(close(
        sc("interleave-all").imbalance_percent.unwrap(),
        0.0,
        1e-9
    ));
    // P = 25 % with each THP homed on its main user: that node is local 75 % of the time, the
    // other accessing node 25 % / 3 (one of three remote controllers is its own), so about
    // (75 + 8.33) / 2 = 41.7 %.
    assert!(close(sc("percent-25").lar_percent.unwrap(), 41.67, 0.5));

    // The same estimates as Carrefour-LP's own what-if (§7) on the same samples.
    let lp = numalab_policies::carrefour_lp::estimate_lar(&huge.samples, 4).unwrap();
    assert!(close(lp.current_percent, lar, 1e-9));
    assert!(close(
        lp.huge_percent,
        sc("carrefour").lar_percent.unwrap(),
        1e-9
    ));
    assert!(close(lp.base_percent, split, 1e-9));
}

#[test]
fn small_pages_show_no_false_sharing() {
    let small = run(ThpMode::Never);
    let mut src = MemorySource::new(meta(&small), &small.samples);
    let rep = analyze(&mut src, &Options::default()).unwrap();
    let lar = rep.lar_percent.unwrap();
    let sim_lar = small.metrics.lar_percent.unwrap();
    assert!(close(lar, sim_lar, 2.0) && lar > 99.0, "{lar} vs {sim_lar}");
    // The 2 MiB virtual ranges are still used disjointly (the detector looks at virtual
    // ranges, §9), but no sample says they are THPs and nothing is remote.
    for g in &rep.false_sharing.regions {
        assert!(!g.mapped_huge);
        assert_eq!(g.remote_dram, Some(0));
    }
    let st = PageAccessStats::by_mapping(&small.samples);
    assert_eq!(rep.pages.distinct_pages, st.page_count());
    assert!(close(
        rep.pages.psp_percent.unwrap(),
        st.psp_percent().unwrap(),
        1e-9
    ));
    assert!(close(
        rep.pages.pamup_percent.unwrap(),
        st.pamup_percent().unwrap(),
        1e-9
    ));
}
