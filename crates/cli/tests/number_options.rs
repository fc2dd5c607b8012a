//! Whole-number options refuse a negative number, 0 where it means nothing, and words with a
//! message naming the option, the value and what is accepted (not clap's "invalid digit found
//! in string"), exit non-zero, and never panic.

use std::process::{Command, Output};

fn numalab(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .env_remove("RUST_BACKTRACE")
        .output()
        .unwrap()
}

/// `args` is refused with exit status `code`, its message containing each of `says`.
fn refused(args: &[&str], code: i32, says: &[&str]) {
    let o = numalab(args);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(code), "{args:?}: {err}");
    for s in says {
        assert!(err.contains(s), "{args:?} should say {s:?}: {err}");
    }
    assert!(!err.contains("invalid digit"), "{args:?}: {err}");
    assert!(!err.contains("unexpected argument"), "{args:?}: {err}");
    assert!(!err.contains("panicked"), "{args:?}: {err}");
}

#[test]
fn negative_numbers_zero_and_words_are_refused_saying_what_is_accepted() {
    // (arguments, the option and value as clap names them, what is accepted)
    let cases: &[(&[&str], &str, &str)] = &[
        (
            &["sim", "--sample-period", "-1"],
            "invalid value '-1' for '--sample-period <SAMPLE_PERIOD>'",
            "expected a whole number of memory references per sample, 0 or more (got '-1')",
        ),
        (
            &["sim", "--sample-period", "abc"],
            "'--sample-period <SAMPLE_PERIOD>'",
            "0 or more (got 'abc')",
        ),
        (
            &["sim", "--seed", "-1"],
            "'--seed <SEED>'",
            "expected a whole-number seed, 0 or more (got '-1')",
        ),
        (
            &["sim", "--jobs", "-1"],
            "'--jobs <JOBS>'",
            "expected a whole number of threads, at least 1 (got '-1')",
        ),
        (
            &["analyze", "x.arrows", "--top", "0"],
            "'--top <TOP>'",
            "expected a whole number of entries per list, at least 1 (got '0')",
        ),
        (
            &["analyze", "x.arrows", "--top", "-1"],
            "'--top <TOP>'",
            "at least 1 (got '-1')",
        ),
        (
            &["memhog", "--writers", "-1"],
            "'--writers <WRITERS>'",
            "expected a whole number of writer threads, at least 1 (got '-1')",
        ),
        (
            &["memhog", "--writers", "0"],
            "'--writers <WRITERS>'",
            "at least 1 (got '0')",
        ),
        (
            &["bench", "analyze", "--samples", "-1"],
            "'--samples <SAMPLES>'",
            "expected a whole number of samples, at least 1 (got '-1')",
        ),
        (
            &["bench", "analyze", "--repeat", "0"],
            "'--repeat <REPEAT>'",
            "expected a whole number of runs per command, at least 1 (got '0')",
        ),
        (
            &["bench", "sim", "--repeat", "0"],
            "'--repeat <REPEAT>'",
            "expected a whole number of repetitions, at least 1 (got '0')",
        ),
        (
            &["bench", "migrate", "--batches", "1,-1,16"],
            "'--batches <BATCHES>'",
            "expected a whole number of pages per batch, at least 1 (got '-1')",
        ),
        (
            &["bench", "migrate", "--from", "70000"],
            "'--from <FROM>'",
            "expected a node number, 0 or more, at most 65535 (got '70000')",
        ),
        (
            &["migrate", "--pid", "1", "--to", "0", "--batch-pages", "-1"],
            "'--batch-pages <BATCH_PAGES>'",
            "expected a whole number of pages per move_pages call, at least 1 (got '-1')",
        ),
        (
            &["migrate", "--pid", "-1", "--to", "0"],
            "'--pid <PID>'",
            "expected the pid of a running process (see ps or pgrep), at least 1 (got '-1')",
        ),
        (
            &[
                "balance",
                "--pid",
                "1",
                "--policy",
                "carrefour",
                "--samples",
                "x",
                "--ticks",
                "0",
            ],
            "'--ticks <TICKS>'",
            "expected a whole number of ticks, at least 1 (got '0')",
        ),
        (
            &["record", "--ldlat", "1", "--", "true"],
            "'--ldlat <LDLAT>'",
            "expected a whole number of cycles, 3 to 65535 (got '1')",
        ),
        (
            &["record", "--snapshot-ms", "-5", "--", "true"],
            "'--snapshot-ms <SNAPSHOT_MS>'",
            "expected a whole number of milliseconds, at least 1 (got '-5')",
        ),
        (
            &["record", "--period", "abc", "--", "true"],
            "'--period <PERIOD>'",
            "expected a whole number of events per sample, at least 1 (got 'abc')",
        ),
        (
            &["calibrate", "-o", "c.toml", "--buffer-mib", "0"],
            "'--buffer-mib <MIB>'",
            "expected a whole number of MiB, 1 to 1048576 (got '0')",
        ),
        (
            &["study", "shard", "d", "--index", "-1", "--of", "2"],
            "'--index <INDEX>'",
            "expected a shard number, 0 or more (got '-1')",
        ),
        (
            &["study", "run", "s.toml", "-o", "d", "--jobs", "0"],
            "'--jobs <JOBS>'",
            "expected a whole number of simulations at once, at least 1 (got '0')",
        ),
        (
            &["validate", "--repeats", "-1", "--list"],
            "'--repeats <N|auto>'",
            "expected `auto` or a number of runs of at least 1 (got '-1')",
        ),
    ];
    for (args, option, accepted) in cases {
        refused(args, 2, &[option, accepted]);
    }
    // `numalab run` is numactl: its usage errors exit 1
    refused(
        &["run", "--placement-period-ms", "0", "--", "true"],
        1,
        &[
            "'--placement-period-ms <MS>'",
            "expected a whole number of milliseconds, at least 1 (got '0')",
        ],
    );
}

#[test]
fn a_number_past_the_types_end_says_the_largest_accepted() {
    refused(
        &["sim", "--seed", "18446744073709551616"],
        2,
        &["at most 18446744073709551615 (got '18446744073709551616')"],
    );
}

#[test]
fn a_sample_period_of_0_turns_sampling_off_and_is_accepted() {
    let o = numalab(&[
        "sim",
        "-q",
        "-m",
        "xeon-x5650-2n",
        "-w",
        "stream:n=1000",
        "--sample-period",
        "0",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = String::from_utf8_lossy(&o.stdout);
    let row = table
        .lines()
        .find(|l| l.starts_with("samples kept / taken"))
        .expect("a samples row");
    assert!(row.trim_end().ends_with(" 0/0"), "{row}");
}
