//! The SPEC CPU2006 INT kernels against the real programs' measured characteristics (issue
//! "Trustworthy simulation I", item 3; docs/VALIDATION.md, "SPEC kernels against measured
//! characteristics").
//!
//! Source of every figure: Navarro-Torres, Alastruey-Benedé, Ibáñez-Marín, Viñals-Yúfera,
//! "Memory hierarchy characterization of SPEC CPU2006 and SPEC CPU2017 on the Intel Xeon
//! Skylake-SP", PLOS ONE 14(8): e0220135, 2019, its data repository
//! (agusnt/Xeon-SP_Memory_Characterization_SPEC-CPU-2K6-2K17,
//! `data/XEON_SKL/2K6/MPKI_APKI_CPI_Prefetch.csv`): one copy on a Xeon Gold 5120 (Skylake-SP,
//! 19.25 MB LLC), hardware prefetchers off (the model has none), the whole LLC; APKI = LLC
//! accesses (L2 misses) and MPKI = LLC misses per 1000 instructions. Each figure here is the
//! mean over the program's SPEC reference inputs.
//!
//! The kernels run on `xeon-gold6130-2n` (the same Skylake-SP core, a 22 MB LLC). Their
//! instructions and compute cycles per unit of work were set from APKI and CPI (the kernels'
//! sources say how), so those two are checked to ±15 %; MPKI was not fitted and is checked
//! against the inputs' range where the kernel's structure reproduces it (perlbench, gobmk,
//! hmmer, h264ref). mcf's, astar's and bzip2's MPKI are above the measured range:
//! docs/VALIDATION.md says what their structure lacks.

use numalab_sim::{simulate, Pinning, SimConfig};

struct Measured {
    /// The kernel spec, as M13's solo cases run it (crates/validate/cases/m13.toml).
    spec: &'static str,
    /// The phases whose counters are summed: the program's steady part.
    phases: &'static [&'static str],
    apki: f64,
    cpi: f64,
    /// MPKI over the inputs (lowest, highest); None: not reproduced (see the module doc).
    mpki_range: Option<(f64, f64)>,
}

const GOLD_5120_LIKE: &str = "xeon-gold6130-2n";

/// The no-prefetch columns of the CSV, mean over the inputs (`.1`, `.2`, ...).
const PROGRAMS: &[Measured] = &[
    // 429.mcf: APKI 75.79, CPI 2.75, MPKI 27.69 (one input)
    Measured {
        spec: "mcf-like:pivots=20000",
        phases: &["simplex"],
        apki: 75.79,
        cpi: 2.75,
        mpki_range: None,
    },
    // 400.perlbench .1-.3: APKI 0.86 / 0.13 / 0.48, CPI 0.38 / 0.36 / 0.32, MPKI 0.01-0.10
    Measured {
        spec: "perlbench-like:statements=800000,scale=0.25",
        phases: &["interpret"],
        apki: 0.49,
        cpi: 0.35,
        mpki_range: Some((0.01, 0.10)),
    },
    // 401.bzip2 .1-.6: APKI 3.53 / 5.90 / 10.19 / 2.08 / 3.56 / 3.90, CPI 0.69 / 0.49 / 0.51
    // / 0.53 / 0.57 / 0.66, MPKI 0.03-0.13
    Measured {
        spec: "bzip2-like:input_mb=8,passes=1",
        phases: &["compress", "decompress"],
        apki: 4.86,
        cpi: 0.575,
        mpki_range: None,
    },
    // 445.gobmk .1-.5: APKI 0.76 / 0.62 / 2.31 / 0.88 / 0.51, CPI 0.77 / 0.73 / 0.71 / 0.76 /
    // 0.71, MPKI 0.11-0.56
    Measured {
        spec: "gobmk-like:nodes=250000",
        phases: &["search"],
        apki: 1.02,
        cpi: 0.736,
        mpki_range: Some((0.11, 0.56)),
    },
    // 456.hmmer .1-.2: APKI 2.38 / 0.90, CPI 0.37 / 0.38, MPKI 0.00-0.01
    Measured {
        spec: "hmmer-like:sequences=300",
        phases: &["viterbi"],
        apki: 1.64,
        cpi: 0.375,
        mpki_range: Some((0.0, 0.01)),
    },
    // 464.h264ref .1-.3: APKI 1.38 / 0.79 / 0.83, CPI 0.34 / 0.40 / 0.39, MPKI 0.00-0.03
    Measured {
        spec: "h264ref-like:frames=8",
        phases: &["encode"],
        apki: 1.0,
        cpi: 0.377,
        mpki_range: Some((0.0, 0.03)),
    },
    // 473.astar .1-.2: APKI 12.45 / 3.46, CPI 1.05 / 0.91, MPKI 0.01-0.54
    Measured {
        spec: "astar-like:queries=200,scale=0.25",
        phases: &["search"],
        apki: 7.96,
        cpi: 0.98,
        mpki_range: None,
    },
];

#[test]
fn spec_int_kernels_have_the_programs_measured_apki_and_cpi() {
    let m = numalab_machine::preset(GOLD_5120_LIKE).unwrap();
    let mut report = Vec::new();
    let mut wrong = Vec::new();
    for p in PROGRAMS {
        let w = numalab_workloads::by_spec(p.spec, 1).unwrap();
        let cfg = SimConfig {
            pinning: Pinning::Cpus(vec![m.topology.nodes[0].cpus[0]]),
            sample_period: 0,
            ..Default::default()
        };
        let r = simulate(&m, w.as_ref(), cfg).unwrap();
        let (mut instr, mut l2_misses, mut llc_misses, mut ns) = (0u64, 0u64, 0u64, 0.0);
        for ph in r
            .phases
            .iter()
            .filter(|ph| p.phases.contains(&ph.name.as_str()))
        {
            let t = &ph.per_thread[0];
            instr += t.instructions;
            l2_misses += t.private_misses;
            llc_misses += t.llc_misses;
            ns += t.time_ns;
        }
        assert!(instr > 0, "{}: no instructions in {:?}", p.spec, p.phases);
        let kilo = instr as f64 / 1000.0;
        let (apki, mpki) = (l2_misses as f64 / kilo, llc_misses as f64 / kilo);
        let cpi = ns * m.core.ghz / instr as f64;
        report.push(format!(
            "{}: APKI {apki:.2} ({}), CPI {cpi:.3} ({}), MPKI {mpki:.3} ({:?})",
            p.spec, p.apki, p.cpi, p.mpki_range
        ));
        if (apki / p.apki - 1.0).abs() > 0.15 || (cpi / p.cpi - 1.0).abs() > 0.15 {
            wrong.push(p.spec);
        }
        if let Some((lo, hi)) = p.mpki_range {
            // half the lowest input to twice the highest: one kernel stands for several inputs
            if mpki < lo / 2.0 || mpki > 2.0 * hi.max(0.005) {
                wrong.push(p.spec);
            }
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}\n{}", report.join("\n"));
}
