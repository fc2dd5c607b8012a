//! Study files, grids, resumable runs and the results table.

use arrow_array::{Array, Float64Array, StringArray};
use numalab_study::{run, Grid, RunOptions, StudyFile};
use std::path::{Path, PathBuf};

fn temp_dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-study-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    d
}

/// A small grid: STREAM on the 2-node Westmere, 2 thread counts × 2 memory policies, where
/// 100 000 threads is refused by the machine (a failed configuration among good ones).
const SMALL: &str = r#"
[defaults]
machine = "xeon-x5650-2n"
workload = "stream:n=20000,ntimes=1"
pin = "sequential"

[[axis]]
key = "threads"
values = [2, 100000]

[[axis]]
key = "mempolicy"
values = ["default", "interleave:all"]
labels = ["local", "interleaved"]
"#;

fn quiet(_: usize, _: usize) {}

/// The results file read back by the parquet crate's own reader (one row group: the writer
/// writes one batch).
fn read_parquet(p: &Path) -> arrow_array::RecordBatch {
    let f = std::fs::File::open(p).unwrap();
    let reader = parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(f)
        .unwrap()
        .build()
        .unwrap();
    let mut batches: Vec<_> = reader.map(Result::unwrap).collect();
    assert_eq!(batches.len(), 1);
    batches.pop().unwrap()
}

#[test]
fn the_grid_is_the_axes_product_with_the_last_axis_fastest() {
    let s = StudyFile::parse(SMALL).unwrap();
    let g = Grid::new(&s).unwrap();
    let labels: Vec<&str> = g.configs.iter().map(|c| c.label.as_str()).collect();
    assert_eq!(
        labels,
        [
            "threads=2 mempolicy=local",
            "threads=2 mempolicy=interleaved",
            "threads=100000 mempolicy=local",
            "threads=100000 mempolicy=interleaved",
        ]
    );
    assert_eq!(g.axis_keys, ["threads", "mempolicy"]);
    // defaults, then sim's own defaults for what neither sets
    let c = &g.configs[1];
    let get = |k: &str| {
        c.settings
            .iter()
            .find(|(s, _)| s == k)
            .map(|(_, v)| v.as_str())
    };
    assert_eq!(get("machine"), Some("xeon-x5650-2n"));
    assert_eq!(get("mempolicy"), Some("interleave:all"));
    assert_eq!(get("thp"), Some("never"));
    assert_eq!(get("threads"), Some("2"));
}

#[test]
fn bad_study_files_are_refused_naming_the_problem() {
    let cases = [
        ("repeats = 0", "repeats = 0"),
        ("epoch_us = -1.0", "epoch_us = -1"),
        ("colour = \"red\"", "unknown field `colour`"),
        ("[defaults]\nflavour = \"x\"", "unknown setting 'flavour'"),
        ("[[axis]]\nkey = \"cpu\"\nvalues = [\"a\"]", "unknown setting 'cpu'"),
        ("[[axis]]\nkey = \"thp\"\nvalues = []", "has no values"),
        ("[[axis]]\nkey = \"thp\"\nvalues = [\"never\", \"never\"]", "given twice"),
        ("[[axis]]\nkey = \"thp\"\nvalues = [\"never\", \"always\"]\nlabels = [\"4K\"]", "1 labels for 2 values"),
        ("[[axis]]\nkey = \"thp\"\nvalues = [1.5]", "expected a string"),
        (
            "[[axis]]\nkey = \"thp\"\nvalues = [\"never\"]\n[[axis]]\nkey = \"thp\"\nvalues = [\"always\"]",
            "two axes",
        ),
        // real-run studies (kind = "real")
        ("warmups = 2", "warm-up runs are for real runs"),
        ("kind = \"live\"", "unknown variant `live`"),
        ("kind = \"real\"\n[defaults]\nthp = \"never\"", "needs a command"),
        ("kind = \"real\"\n[defaults]\ncommand = \"true\"\nnuma_balancing = \"yes\"", "expected 0 or 1"),
        ("kind = \"real\"\n[defaults]\ncommand = \"true\"\nthp = \"sometimes\"", "expected one of never, madvise, always"),
        ("kind = \"real\"\n[defaults]\ncommand = \"sh -c 'true\"", "unclosed quote"),
        ("kind = \"real\"\n[defaults]\ncommand = \"true\"\npin = \"none\"", "a simulation setting"),
        ("[defaults]\ncommand = \"true\"", "a real-run setting: write kind = \"real\""),
        // policies deciding from samples, with the sampler off
        (
            "sample_period = 0\n[defaults]\npolicy = \"carrefour\"",
            "configuration 'default': sample_period = 0 turns the sampler off, but policy carrefour decides from access samples",
        ),
        (
            "sample_period = 0\n[[axis]]\nkey = \"thp\"\nvalues = [\"never\", \"always\"]\n[[axis]]\nkey = \"policy\"\nvalues = [\"autonuma\", \"carrefour-lp:period_ms=500\"]",
            "configuration 'thp=never policy=carrefour-lp:period_ms=500': sample_period = 0",
        ),
    ];
    for (text, want) in cases {
        let err = format!("{:#}", StudyFile::parse(text).expect_err(text));
        assert!(err.contains(want), "{text}: {err}");
    }
    let huge = "[[axis]]\nkey = \"threads\"\nvalues = [".to_string()
        + &(1..=400)
            .map(|i| i.to_string())
            .collect::<Vec<_>>()
            .join(",")
        + "]\n[[axis]]\nkey = \"workload\"\nvalues = ["
        + &(1..=400)
            .map(|i| format!("\"w{i}\""))
            .collect::<Vec<_>>()
            .join(",")
        + "]";
    let err = format!("{:#}", StudyFile::parse(&huge).unwrap_err());
    assert!(err.contains("more than 100000 runs"), "{err}");
    // the sampler off is fine for policies that do not sample
    StudyFile::parse(
        "sample_period = 0\n[[axis]]\nkey = \"policy\"\nvalues = [\"none\", \"autonuma\"]",
    )
    .unwrap();
}

#[test]
fn a_study_runs_records_failures_resumes_and_writes_parquet_and_csv() {
    let out = temp_dir("run");
    let s = StudyFile::parse(SMALL).unwrap();
    let opts = RunOptions {
        jobs: 2,
        numalab: None,
    };
    let o = run(&s, &out, &opts, &quiet).unwrap();
    assert_eq!((o.ran, o.skipped), (4, 0));
    assert_eq!(o.rows.len(), 4);
    let failed = o.failed();
    assert_eq!(failed.len(), 2, "the 100000-thread configurations fail");
    for r in &failed {
        assert!(r.config.starts_with("threads=100000"));
        assert!(
            r.error.as_deref().unwrap().contains("100000"),
            "{:?}",
            r.error
        );
        assert!(r.metrics.is_none());
    }
    let ok: Vec<_> = o.rows.iter().filter(|r| r.status == "ok").collect();
    let local = ok[0].metrics.as_ref().unwrap();
    let inter = ok[1].metrics.as_ref().unwrap();
    assert!(local.sim_time_ms > 0.0);
    assert!(local.lar_percent.unwrap() > 90.0, "{local:?}");
    assert!(inter.lar_percent.unwrap() < 70.0, "{inter:?}");

    // the Parquet file holds the same rows: every axis and metric a column
    let b = read_parquet(&o.results_parquet);
    assert_eq!(b.num_rows(), 4);
    let col = |name: &str| {
        b.column_by_name(name)
            .unwrap_or_else(|| panic!("column {name}"))
    };
    let mp = col("mempolicy")
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(mp.value(1), "interleave:all");
    let lar = col("lar_percent")
        .as_any()
        .downcast_ref::<Float64Array>()
        .unwrap();
    assert_eq!(lar.value(0), local.lar_percent.unwrap());
    assert!(lar.is_null(2), "a failed run has no metrics");
    let status = col("status")
        .as_any()
        .downcast_ref::<StringArray>()
        .unwrap();
    assert_eq!(status.value(3), "failed");
    // and the CSV too
    let csv = std::fs::read_to_string(&o.results_csv).unwrap();
    let mut lines = csv.lines();
    assert!(lines
        .next()
        .unwrap()
        .starts_with("config,threads,mempolicy,repeat,seed,status,error,sim_time_ms,lar_percent"));
    assert_eq!(lines.count(), 4);
    assert!(out.join("environment.json").is_file() && out.join("study.toml").is_file());

    // a rerun skips what succeeded and tries the failures again
    let again = run(&s, &out, &opts, &quiet).unwrap();
    assert_eq!((again.ran, again.skipped), (2, 2));
    assert_eq!(again.rows[0], o.rows[0]);

    // a changed simulation option is a different run
    let longer = SMALL.replace("[defaults]", "epoch_us = 10.0\n[defaults]");
    let s2 = StudyFile::parse(&longer).unwrap();
    let third = run(&s2, &out, &opts, &quiet).unwrap();
    assert_eq!((third.ran, third.skipped), (4, 0));
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn repeats_run_with_seeds_and_differ_by_their_start_skew() {
    let text = r#"
repeats = 3
[defaults]
machine = "xeon-x5650-2n"
workload = "stream:n=20000,ntimes=1"
threads = 4
pin = "sequential"
"#;
    let out = temp_dir("repeats");
    let s = StudyFile::parse(text).unwrap();
    let o = run(
        &s,
        &out,
        &RunOptions {
            jobs: 2,
            numalab: None,
        },
        &quiet,
    )
    .unwrap();
    assert_eq!(o.rows.len(), 3);
    let seeds: Vec<u64> = o.rows.iter().map(|r| r.seed).collect();
    assert_eq!(seeds, [1, 2, 3]);
    assert!(o
        .rows
        .iter()
        .all(|r| r.config == "default" && r.status == "ok"));
    let times: Vec<f64> = o
        .rows
        .iter()
        .map(|r| r.metrics.as_ref().unwrap().sim_time_ms)
        .collect();
    assert!(times[0] != times[1] || times[1] != times[2], "{times:?}");
    std::fs::remove_dir_all(&out).unwrap();
}

#[test]
fn an_output_path_that_is_a_file_is_refused() {
    let f = temp_dir("file");
    std::fs::write(&f, "x").unwrap();
    let s = StudyFile::parse(SMALL).unwrap();
    let err = run(&s, &f, &RunOptions::default(), &quiet)
        .unwrap_err()
        .to_string();
    assert!(err.contains("is a file"), "{err}");
    std::fs::remove_file(&f).unwrap();
}
