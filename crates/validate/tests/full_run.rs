//! `full_run`: a shrunk run's repeated part weighted back to the published run's length
//! (crates/validate/src/full_run.rs).

use numalab_core::CpuId;
use numalab_sim::{simulate, Pinning, SimConfig, SimResult};
use numalab_validate::full_run::FullRun;
use numalab_validate::{case, run, Options};

/// lbm-like on one CPU: an `init` phase that first-touches both grids, then `steps` steps.
fn lbm(steps: u64) -> SimResult {
    let m = numalab_machine::preset("xeon-x5650-2n").unwrap();
    let w = numalab_workloads::by_spec(&format!("lbm-like:nz=8,steps={steps}"), 1).unwrap();
    let cfg = SimConfig {
        pinning: Pinning::Cpus(vec![CpuId(0)]),
        sample_period: 0,
        ..Default::default()
    };
    simulate(&m, w.as_ref(), cfg).unwrap()
}

fn step_start(r: &SimResult) -> f64 {
    r.phase("step").unwrap().start_ns
}

#[test]
fn the_repeated_part_counts_times_over_and_its_faults_once() {
    let r = lbm(2);
    let one = FullRun {
        from_phase: "step".into(),
        times: 1,
    }
    .weigh(&r)
    .unwrap();
    assert_eq!(one.time_ns, r.sim_time_ns, "times = 1 is the run itself");
    assert_eq!(one.metrics.lar_percent, r.metrics.lar_percent);

    let w = FullRun {
        from_phase: "step".into(),
        times: 50,
    }
    .weigh(&r)
    .unwrap();
    let steps_ns = r.sim_time_ns - step_start(&r);
    assert!((w.time_ns - (r.sim_time_ns + 49.0 * steps_ns)).abs() < 1e-6 * w.time_ns);
    // the first touch happened once: its share of the weighted run is 1/50-ish of the run's
    let share = r.metrics.max_page_fault_time_share_percent.unwrap();
    let weighted = w.metrics.max_page_fault_time_share_percent.unwrap();
    assert!(
        share > 1.0,
        "the shrunk run faults for {share} % of its time"
    );
    assert!(
        (weighted - share * r.sim_time_ns / w.time_ns).abs() < 1e-9 + 1e-6 * share,
        "{weighted} % against {share} % × {} / {}",
        r.sim_time_ns,
        w.time_ns
    );
}

#[test]
fn weighting_two_steps_by_ten_predicts_a_run_of_twenty() {
    // The weighted figures of a 2-step run stand for a 20-step run: its time within a few %
    // (the steps after the first find warm caches in both).
    let short = lbm(2);
    let long = lbm(20);
    let w = FullRun {
        from_phase: "step".into(),
        times: 10,
    }
    .weigh(&short)
    .unwrap();
    let err = (w.time_ns / long.sim_time_ns - 1.0).abs();
    assert!(
        err < 0.05,
        "{} ns weighted, {} ns simulated",
        w.time_ns,
        long.sim_time_ns
    );
    let share = |x: f64, y: f64| (x - y).abs() < 0.1 * y.max(0.01);
    assert!(share(
        w.metrics.max_page_fault_time_share_percent.unwrap(),
        long.metrics.max_page_fault_time_share_percent.unwrap()
    ));
}

#[test]
fn an_unknown_phase_is_an_error_that_lists_the_run_s_phases() {
    let r = lbm(1);
    let e = FullRun {
        from_phase: "iterate".into(),
        times: 3,
    }
    .weigh(&r)
    .err()
    .unwrap();
    assert!(e.contains("'iterate'") && e.contains("init, step"), "{e}");
}

const CASE: &str = r#"
[source]
id = "T"
citation = "a test"

[[case]]
id = "T.remote-lbm"
cite = "test"
what = "lbm on remote memory"
machine = "xeon-x5650-2n"
workload = "lbm-like:nz=8,steps=2"
threads = 1
pin = "0"
base = "mempolicy=bind:0"
config = "mempolicy=bind:1"
metric = "time_increase_percent"
published = 40
"#;

#[test]
fn a_case_with_full_run_scores_the_weighted_times() {
    let plain = case::parse("t.toml", CASE).unwrap();
    let weighted = case::parse(
        "t.toml",
        &CASE.replace(
            "pin = \"0\"",
            "pin = \"0\"\nfull_run = { from_phase = \"step\", times = 100 }",
        ),
    )
    .unwrap();
    let opts = Options::default();
    let (p, w) = (
        run(&plain, &opts, &|_, _| {}).unwrap(),
        run(&weighted, &opts, &|_, _| {}).unwrap(),
    );
    let (p, w) = (&p.rows[0], &w.rows[0]);
    // the weighted run is about 50 × longer, and its remote penalty is the steps' alone
    assert!(w.config_ms.unwrap() > 30.0 * p.config_ms.unwrap());
    assert_ne!(w.simulated, p.simulated);
}

#[test]
fn full_run_is_checked_with_the_case() {
    let bad = |extra: &str| {
        case::parse(
            "t.toml",
            &CASE.replace("pin = \"0\"", &format!("pin = \"0\"\n{extra}")),
        )
        .err()
        .map(|e| format!("{e:#}"))
        .unwrap_or_default()
    };
    assert!(bad("full_run = { from_phase = \"step\", times = 0 }").contains("at least 1"));
    assert!(
        bad("full_run = { from_phase = \"step\", times = 2 }\nregion = \"step\"")
            .contains("not both")
    );
    assert!(bad("full_run = { from_phase = \"step\" }").contains("times"));
}

#[test]
fn a_repeated_part_s_first_touch_faults_are_not_repeated_in_its_time() {
    // weighting the whole lbm run (from `init`, where both grids are first-touched): the
    // repetitions leave out the faults' time
    let r = lbm(2);
    let faults_ns = r.per_thread[0].fault_ns;
    assert!(faults_ns > 0.0);
    let w = FullRun {
        from_phase: "init".into(),
        times: 3,
    }
    .weigh(&r)
    .unwrap();
    let expected =
        r.sim_time_ns + 2.0 * (r.sim_time_ns - r.phase("init").unwrap().start_ns - faults_ns);
    assert!(
        (w.time_ns - expected).abs() < 1e-6 * expected,
        "{} against {expected}",
        w.time_ns
    );
}
