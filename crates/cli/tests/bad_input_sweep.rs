//! The bad-input sweep (issue 20): numalab run as a new user would run it, with a hundred bad
//! inputs across the commands. Every one must end within a minute (no hang), with a non-zero
//! exit and no signal (no abort), with an error on standard error that names the problem (no
//! backtrace), and with the folder it ran in exactly as it was: no partial file, no created
//! folder, no existing output overwritten.
//!
//! Only inputs refused before anything touches the host's memory policy are here; the
//! refusals of the commands that place or move memory are also tested inside the multi-node VM
//! (`vm_cli.rs`, `vm_numactl_shm.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

/// Longer than any refusal needs by far (they take milliseconds): a run still going after this
/// is a hang.
const HANG: Duration = Duration::from_secs(60);

/// Every file and folder under `dir`, with size and modification time.
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, (u64, Option<SystemTime>)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let e = e.unwrap();
            let m = e.metadata().unwrap();
            if m.is_dir() {
                stack.push(e.path());
            }
            out.insert(e.path(), (m.len(), m.modified().ok()));
        }
    }
    out
}

struct Outcome {
    code: Option<i32>,
    stderr: String,
}

/// Run numalab in `dir` with `args`, killing it after [`HANG`].
fn run_in(dir: &Path, args: &[&str]) -> Outcome {
    let mut child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .current_dir(dir)
        .env_remove("RUST_BACKTRACE")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if start.elapsed() > HANG {
            child.kill().ok();
            child.wait().ok();
            panic!(
                "`numalab {}` hangs: still running after {HANG:?}",
                args.join(" ")
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    Outcome {
        code: out.status.code(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The sweep's folder: a short run's samples (Arrow and perf.data), cut and garbled copies,
/// broken machine, case and study files, and outputs that a failed command must leave alone.
fn prepare() -> PathBuf {
    let dir = std::env::temp_dir().join(format!("numalab-sweep-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("adir")).unwrap();
    let ok = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_numalab"))
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    ok(&[
        "sim",
        "-q",
        "-m",
        "opteron6164he-4n",
        "-t",
        "2",
        "-w",
        "stream:n=100000",
        "--sample-period",
        "97",
        "--samples-out",
        "good.arrows",
    ]);
    ok(&["convert", "good.arrows", "good.data"]);
    let w = |name: &str, bytes: &[u8]| std::fs::write(dir.join(name), bytes).unwrap();
    let perf = std::fs::read(dir.join("good.data")).unwrap();
    let arrow = std::fs::read(dir.join("good.arrows")).unwrap();
    w("head.data", &perf[..40]);
    w("head.arrows", &arrow[..30]);
    w("empty.data", b"");
    w("empty.arrows", b"");
    // bytes no writer would produce: a fixed pseudo-random stream
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    let garbage: Vec<u8> = (0..5000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    w("garbage.data", &garbage);
    w("garbage.arrows", &garbage);
    let mut corrupt = perf.clone();
    for b in corrupt.iter_mut().skip(200).step_by(7).take(700) {
        *b ^= 0xff;
    }
    w("corrupt.data", &corrupt);
    let deep = format!(
        "<topology>{}{}</topology>",
        "<object type=\"Group\">".repeat(20_000),
        "</object>".repeat(20_000)
    );
    w("deep.xml", deep.as_bytes());
    // the same nesting with a closing tag hidden where it closes nothing
    for (name, hide) in [
        ("deep-comment.xml", "<!--</x>-->"),
        ("deep-cdata.xml", "<![CDATA[</x>]]>"),
        ("deep-pi.xml", "<?pi </x>?>"),
    ] {
        let open = format!("<object type=\"Group\">{hide}");
        let hidden = format!(
            "<topology>{}{}</topology>",
            open.repeat(20_000),
            "</object>".repeat(20_000)
        );
        w(name, hidden.as_bytes());
    }
    // a perf.data header whose data section starts far beyond the file (data.offset, the
    // u64 at byte 40 of the 104-byte header)
    let mut far = perf.clone();
    far[40..48].copy_from_slice(&(1u64 << 40).to_le_bytes());
    w("far.data", &far);
    w(
        "nosampler.toml",
        b"sample_period = 0\n[defaults]\nworkload = \"stream:n=1000\"\n[[axis]]\nkey = \"policy\"\nvalues = [\"carrefour\"]\n",
    );
    w("open.xml", b"<topology><object type=\"Machine\">");
    w("notxml.xml", b"hello");
    w("bad.toml", b"id = \"x\"\n[[nodes]\n");
    w("empty.toml", b"");
    w("case.toml", b"id = \"x\"\nmetric = \"nonsense\"\n");
    w("keep.json", b"keep");
    w("keep.csv", b"keep");
    w("keep.arrows", b"keep");
    w("keep.toml", b"keep");
    dir
}

#[test]
fn a_hundred_bad_inputs_are_refused_cleanly_and_leave_nothing_behind() {
    let dir = prepare();
    let sim = ["sim", "-q", "-m", "opteron6164he-4n", "-t", "4"];
    let s = |rest: &[&'static str]| -> Vec<&'static str> {
        sim.iter().chain(rest.iter()).copied().collect()
    };
    let w = ["-w", "stream:n=1000"];
    let sw = |rest: &[&'static str]| -> Vec<&'static str> {
        sim.iter()
            .chain(w.iter())
            .chain(rest.iter())
            .copied()
            .collect()
    };
    // (arguments, what the error must say)
    let cases: Vec<(Vec<&str>, &str)> = vec![
        // sim: numbers
        (
            sw(&["--epoch-us", "0"]),
            "--epoch-us 0: expected a number of simulated microseconds in 0.1..=1000",
        ),
        (sw(&["--epoch-us", "-1"]), "--epoch-us -1"),
        (sw(&["--epoch-us", "NaN"]), "--epoch-us NaN"),
        (sw(&["--epoch-us", "inf"]), "--epoch-us inf"),
        (sw(&["--epoch-us", "1e-30"]), "--epoch-us 1e-30: expected"),
        (sw(&["--epoch-us", "1e300"]), "--epoch-us 1e300: expected"),
        (sw(&["--start-skew-us", "-3"]), "--start-skew-us -3"),
        (sw(&["--start-skew-us", "NaN"]), "--start-skew-us NaN"),
        (
            sw(&["--start-skew-us", "1e300"]),
            "--start-skew-us 1e300: expected a number of simulated microseconds in 0..=1000000",
        ),
        (sw(&["--seed", "abc"]), "invalid value 'abc' for '--seed"),
        (
            sw(&["--jobs", "0"]),
            "'--jobs <JOBS>': expected a whole number of threads, at least 1",
        ),
        (
            vec!["sim", "-q", "-w", "stream:n=1000", "--threads=-5"],
            "at least 1 (got '-5')",
        ),
        // sim: workload specs
        (s(&["-w", "stream:n=10^12"]), "n=10^12 is not valid"),
        (
            s(&["-w", "stream:n=0"]),
            "n=0 is not valid: expected an integer in 1..",
        ),
        (s(&["-w", "stream:n="]), "'n=' has an empty key or value"),
        (
            s(&["-w", "stream:nosuch=3"]),
            "unknown key 'nosuch': valid keys are",
        ),
        (
            s(&["-w", "stream:kernel=foo"]),
            "kernel=foo is not valid: expected one of all, copy",
        ),
        (s(&["-w", "nosuch"]), "unknown workload 'nosuch'"),
        (s(&["-w", ""]), "the workload name is empty"),
        (
            s(&["-w", "gups:log2_words=200"]),
            "log2_words=200 is not valid",
        ),
        (
            s(&["-w", "npb-cg:class=Z"]),
            "class=Z is not valid: expected one of S, W, A, B, C, D",
        ),
        (s(&["-w", "mix:"]), "no programs"),
        (s(&["-w", "mix:stream*0"]), "at least one copy is needed"),
        (s(&["-w", "mix:stream*1000000"]), "more than 65536 threads"),
        (s(&["-w", "mix:stream(n=-1)*2"]), "n=-1 is not valid"),
        (
            vec![
                "sim",
                "-q",
                "-m",
                "opteron6164he-4n",
                "-w",
                "ptrchase:bytes=128G",
            ],
            "mmap of 'ptrchase.buffer' refused: 128.0 GiB is more than the machine's 64.0 GiB",
        ),
        (
            vec![
                "sim",
                "-q",
                "-m",
                "opteron6164he-4n",
                "-w",
                "stream:n=100000000000",
            ],
            "745.1 GiB is more than the machine's 64.0 GiB of memory",
        ),
        // sim: placement
        (
            sw(&["--pin", "0-999"]),
            "CPU 24 does not exist: this machine has CPUs 0-23",
        ),
        (sw(&["--pin", "foo"]), "unknown pinning 'foo'"),
        // (--pin 3,3,3,3 is no longer an error: the four threads take turns on CPU 3)
        (sw(&["--pin", "3,,4"]), "unknown pinning '3,,4'"),
        (sw(&["--pin", "5-2"]), "CPU range '5-2' is reversed"),
        (
            sw(&["--mempolicy", "bind:9"]),
            "node 9 does not exist: this machine has nodes 0-3",
        ),
        (
            sw(&["--mempolicy", "interleave:"]),
            "malformed node list ''",
        ),
        (
            sw(&["--mempolicy", "weird"]),
            "unknown memory policy 'weird'",
        ),
        (sw(&["--thp", "sometimes"]), "unknown THP mode 'sometimes'"),
        (sw(&["--hugetlb", "4M"]), "hugetlb=4M is not a page size"),
        (sw(&["--policy", "nosuch"]), "unknown policy 'nosuch'"),
        (
            sw(&["--policy", "carrefour:period_ms=0"]),
            "period_ms=0 is not valid: expected a number in 0.001..=3600000 ms",
        ),
        (
            sw(&["--policy", "carrefour:period_ms=NaN"]),
            "period_ms=NaN is not valid",
        ),
        (
            sw(&["--policy", "carrefour:nosuch=1"]),
            "unknown key 'nosuch'",
        ),
        (
            sw(&["--policy", "autonuma:scan_period_min_ms=1e308"]),
            "scan_period_min_ms (1e308)",
        ),
        (
            sw(&["--policy", "carrefour", "--sample-period", "0"]),
            "policy carrefour decides from access samples",
        ),
        (
            sw(&["--compare", "foo"]),
            "configuration 'foo' is neither key=value nor a shorthand",
        ),
        (sw(&["--compare", "thp=bogus"]), "unknown THP mode 'bogus'"),
        // sim: machines
        (
            vec!["sim", "-q", "-m", "nosuch", "-w", "stream:n=1000"],
            "unknown machine 'nosuch'",
        ),
        (
            vec!["sim", "-q", "-m", "bad.toml", "-w", "stream:n=1000"],
            "bad.toml: TOML parse error at line 2",
        ),
        (
            vec!["sim", "-q", "-m", "empty.toml", "-w", "stream:n=1000"],
            "empty.toml: `id`: missing",
        ),
        (
            vec!["sim", "-q", "-m", "deep.xml", "-w", "stream:n=1000"],
            "nested more than 256 deep",
        ),
        (
            vec!["sim", "-q", "-m", "open.xml", "-w", "stream:n=1000"],
            "open.xml: not well-formed XML",
        ),
        (
            vec!["sim", "-q", "-m", "notxml.xml", "-w", "stream:n=1000"],
            "notxml.xml: not well-formed XML",
        ),
        (
            vec!["sim", "-q", "-m", "missing.toml", "-w", "stream:n=1000"],
            "cannot read missing.toml",
        ),
        (
            vec!["sim", "-q", "-m", "adir", "-w", "stream:n=1000"],
            "unknown machine 'adir'",
        ),
        // sim: outputs
        (sw(&["--json", "adir"]), "cannot write adir: it is a folder"),
        (
            sw(&["--json", "nodir/x.json"]),
            "cannot write nodir/x.json: folder nodir does not exist",
        ),
        (sw(&["--csv", "nodir/x.csv"]), "folder nodir does not exist"),
        (
            sw(&["--samples-out", "nodir/s.arrows"]),
            "folder nodir does not exist",
        ),
        (
            sw(&["--epoch-us", "0", "--json", "keep.json"]),
            "--epoch-us 0",
        ),
        (
            s(&[
                "-w",
                "nosuch",
                "--csv",
                "keep.csv",
                "--samples-out",
                "keep.arrows",
            ]),
            "unknown workload 'nosuch'",
        ),
        // machine show
        (
            vec!["machine", "show", "nosuch"],
            "unknown machine 'nosuch'",
        ),
        (
            vec!["machine", "show", "deep.xml"],
            "nested more than 256 deep",
        ),
        (vec!["machine", "show", "bad.toml"], "TOML parse error"),
        (
            vec!["machine", "show", "garbage.data"],
            "unknown machine 'garbage.data'",
        ),
        // analyze
        (
            vec!["analyze", "missing.data"],
            "missing.data: no such file",
        ),
        (
            vec!["analyze", "empty.data"],
            "empty.data: the file is empty (0 bytes)",
        ),
        (
            vec!["analyze", "empty.arrows"],
            "empty.arrows: the file is empty (0 bytes)",
        ),
        (
            vec!["analyze", "garbage.data"],
            "garbage.data: not an Arrow IPC stream",
        ),
        (
            vec!["analyze", "garbage.arrows"],
            "garbage.arrows: not an Arrow IPC stream",
        ),
        (
            vec!["analyze", "corrupt.data"],
            "corrupt.data: not a readable perf.data file: its attrs entry 0",
        ),
        (
            vec!["analyze", "head.data"],
            "head.data: a perf.data file cut short inside its header: 40 bytes, less than the 104-byte perf.data header",
        ),
        (
            vec!["analyze", "head.arrows"],
            "the file ends inside its first message",
        ),
        (vec!["analyze", "adir"], "adir"),
        (
            vec!["analyze", "--hot-page-percent=-1", "good.arrows"],
            "--hot-page-percent -1",
        ),
        (
            vec!["analyze", "--hot-page-percent=NaN", "good.arrows"],
            "--hot-page-percent NaN",
        ),
        (
            vec!["analyze", "--hot-page-percent", "1000", "good.arrows"],
            "at most 100",
        ),
        (
            vec!["analyze", "-m", "nosuch", "good.arrows"],
            "unknown machine 'nosuch'",
        ),
        (
            vec![
                "analyze",
                "--plot-format",
                "gif",
                "--plot-dir",
                "pd",
                "good.arrows",
            ],
            "invalid value 'gif'",
        ),
        (
            vec!["analyze", "--plot-dir", "nodir/x", "good.arrows"],
            "folder nodir does not exist",
        ),
        (
            vec!["analyze", "--plot-dir", "keep.json", "good.arrows"],
            "keep.json",
        ),
        (
            vec!["analyze", "--json", "nodir/x.json", "good.arrows"],
            "folder nodir does not exist",
        ),
        (
            vec!["analyze", "--json", "keep.json", "garbage.data"],
            "not an Arrow IPC stream",
        ),
        // convert
        (
            vec!["convert", "missing.data", "out.arrows"],
            "missing.data: no such file",
        ),
        (
            vec!["convert", "empty.data", "out.arrows"],
            "the file is empty",
        ),
        (
            vec!["convert", "garbage.data", "out.arrows"],
            "not an Arrow IPC stream",
        ),
        (
            vec!["convert", "garbage.arrows", "out.data"],
            "not an Arrow IPC stream",
        ),
        (
            vec!["convert", "head.data", "out.arrows"],
            "head.data: a perf.data file cut short inside its header: 40 bytes, less than the 104-byte perf.data header",
        ),
        (
            vec!["convert", "corrupt.data", "out.arrows"],
            "beyond the file's end",
        ),
        (
            vec!["convert", "good.arrows", "out.txt"],
            "cannot tell the output format from the name",
        ),
        (
            vec!["convert", "good.arrows", "nodir/out.data"],
            "cannot write nodir/out.data: folder nodir does not exist",
        ),
        (
            vec!["convert", "good.arrows", "good.arrows"],
            "input and output are the same file",
        ),
        (
            vec!["convert", "garbage.data", "keep.arrows"],
            "not an Arrow IPC stream",
        ),
        (
            vec!["convert", "good.data", "out.arrows", "-m", "nosuch"],
            "unknown machine 'nosuch'",
        ),
        // validate
        (
            vec!["validate", "--case", "nosuchcase"],
            "no case matches 'nosuchcase'",
        ),
        (
            vec!["validate", "--cases", "case.toml"],
            "case file case.toml",
        ),
        (vec!["validate", "--cases", "missing.toml"], "missing.toml"),
        (
            vec!["validate", "--cases", "adir"],
            "case folder adir holds no .toml file",
        ),
        (
            vec!["validate", "--epoch-us", "0", "--list"],
            "--epoch-us 0",
        ),
        (
            vec!["validate", "--jobs", "0", "--list"],
            "expected a whole number of threads, at least 1",
        ),
        (
            vec!["validate", "--repeats", "0", "--list"],
            "a number of runs of at least 1",
        ),
        (
            vec!["validate", "--start-skew-us", "-1", "--list"],
            "--start-skew-us -1",
        ),
        (
            vec![
                "validate",
                "--json",
                "nodir/x.json",
                "--case",
                "Mi21.519.lbm_r.P10",
            ],
            "folder nodir does not exist",
        ),
        // study
        (
            vec!["study", "collect", "adir"],
            "adir is not a study folder",
        ),
        (
            vec!["study", "run", "--out", "st", "missing.toml"],
            "missing.toml",
        ),
        (vec!["study", "run", "--out", "st", "bad.toml"], "bad.toml"),
        // bench
        (
            vec!["bench", "analyze", "--samples", "0"],
            "expected a whole number of samples, at least 1 (got '0')",
        ),
        (
            vec!["bench", "analyze", "--keep", "nodir", "--samples", "10"],
            "--keep nodir: no such directory",
        ),
        // commands on live processes, refused before anything moves
        (
            vec!["migrate", "--pid", "0", "--to", "0"],
            "expected the pid of a running process (see ps or pgrep), at least 1",
        ),
        (
            vec!["migrate", "--pid", "4194303", "--to", "0"],
            "no process with pid 4194303",
        ),
        (
            vec!["migrate", "--pid", "1", "--to", "foo"],
            "'foo' is not a number or a range a-b",
        ),
        (
            vec!["migrate", "--pid", "1", "--to", "0", "--batch-pages", "0"],
            "'--batch-pages <BATCH_PAGES>': expected a whole number of pages per move_pages call",
        ),
        (
            vec!["migrate", "--pid", "1", "--to", "0", "--fraction", "NaN"],
            "--fraction NaN: expected a number in (0, 1]",
        ),
        (
            vec!["migrate", "--pid", "1", "--to", "0", "--range", "5000-1000"],
            "END must be above START",
        ),
        (
            vec![
                "migrate",
                "--pid",
                "1",
                "--to",
                "0",
                "--json",
                "nodir/x.json",
            ],
            "folder nodir does not exist",
        ),
        (vec!["memhog", "0"], "size 0: expected at least one page"),
        (vec!["memhog", "foo"], "size 'foo'"),
        (
            vec!["memhog", "10M", "--hold-s", "1e300"],
            "--hold-s 1e300: too long a time",
        ),
        (
            vec!["record", "--duration", "1e300", "-o", "r.arrows", "--", "true"],
            "--duration 1e300: too long a time",
        ),
        (
            vec!["memhog", "10M", "--writers", "100000"],
            "--writers 100000: expected 1 to 2560",
        ),
        (vec!["memhog", "10M", "--hold-s", "NaN"], "--hold-s NaN"),
        (
            vec!["run", "--membind", "foo", "--", "true"],
            "--membind: 'foo'",
        ),
        (
            vec!["run", "--interleave", "0-99999999", "--", "true"],
            "beyond the largest node or CPU id accepted",
        ),
        (
            vec!["run", "--remote-percent", "150", "--", "true"],
            "remote percentage 150 is out of range",
        ),
        (
            vec!["run", "--thp", "sometimes", "--", "true"],
            "--thp='sometimes'",
        ),
        (
            vec![
                "run",
                "--offset",
                "99",
                "--length",
                "10",
                "--file",
                "made-by-run",
            ],
            "policy region not page aligned",
        ),
        (
            vec![
                "run",
                "--offset",
                "99",
                "--length",
                "10",
                "--file",
                "keep.toml",
            ],
            "policy region not page aligned",
        ),
        (
            vec![
                "record",
                "--duration",
                "NaN",
                "-o",
                "r.arrows",
                "--",
                "true",
            ],
            "--duration NaN",
        ),
        (
            vec!["record", "--period", "0", "-o", "r.arrows", "--", "true"],
            "'--period <PERIOD>': expected a whole number of events per sample",
        ),
        (
            vec!["record", "--event", "foo", "-o", "r.arrows", "--", "true"],
            "--event foo",
        ),
        (
            vec!["record", "-o", "nodir/r.arrows", "--", "true"],
            "folder nodir does not exist",
        ),
        (
            vec!["record", "-o", "r.arrows", "--", "/nonexistent/cmd"],
            "/nonexistent/cmd: command not found",
        ),
        (
            vec![
                "balance",
                "--pid",
                "4194303",
                "--policy",
                "carrefour",
                "--samples",
                "good.arrows",
            ],
            "process 4194303 does not exist",
        ),
        (
            vec![
                "balance",
                "--pid",
                "1",
                "--policy",
                "nosuch",
                "--samples",
                "good.arrows",
            ],
            "unknown policy 'nosuch'",
        ),
        (
            vec![
                "balance",
                "--pid",
                "1",
                "--policy",
                "carrefour",
                "--samples",
                "garbage.data",
            ],
            "not an Arrow IPC stream",
        ),
        (
            vec![
                "balance",
                "--pid",
                "1",
                "--policy",
                "carrefour",
                "--samples",
                "good.arrows",
                "--period-ms",
                "NaN",
            ],
            "--period-ms NaN",
        ),
        // host description and documents
        (
            vec!["calibrate", "-o", "nodir/m.toml", "--quick"],
            "folder nodir does not exist",
        ),
        (
            vec!["calibrate", "-o", "keep.json", "--quick"],
            "the name must end in .toml",
        ),
        (
            vec!["calibrate", "--base", "missing.toml", "-o", "c.toml"],
            "cannot read missing.toml",
        ),
        (
            vec!["topo", "--machine-file", "nodir/t.toml"],
            "folder nodir does not exist",
        ),
        (
            vec!["man", "--out", "keep.json"],
            "exists and is not a directory",
        ),
        (vec!["completions", "tcsh"], "invalid value 'tcsh'"),
        // whole-number options: the option, what it counts and the range
        (
            vec!["sim", "-q", "--sample-period", "-1", "-w", "stream:n=1000"],
            "0 or more (got '-1')",
        ),
        (
            vec!["analyze", "good.arrows", "--top", "0"],
            "entries per list, at least 1",
        ),
        (vec!["memhog", "1M", "--writers", "-1"], "writer threads, at least 1"),
        (
            vec!["record", "--ldlat", "1", "-o", "r.arrows", "--", "true"],
            "3 to 65535",
        ),
        (
            vec!["calibrate", "-o", "c.toml", "--buffer-mib", "abc"],
            "1 to 1048576 (got 'abc')",
        ),
        (
            vec!["study", "shard", "st", "--index", "0", "--of", "0"],
            "whole number of shards, at least 1",
        ),
        (
            vec!["run", "--placement-period-ms", "0", "--", "true"],
            "milliseconds, at least 1",
        ),
        // nesting hidden from a naive depth count
        (vec!["machine", "show", "deep-comment.xml"], "nested more than 256 deep"),
        (vec!["machine", "show", "deep-cdata.xml"], "nested more than 256 deep"),
        (vec!["machine", "show", "deep-pi.xml"], "nested more than 256 deep"),
        // a header pointing past the file
        (vec!["analyze", "far.data"], "beyond the file's end"),
        (vec!["convert", "far.data", "far.arrows"], "beyond the file's end"),
        // a sample-driven policy with the sampler off
        (
            vec!["study", "run", "--out", "st", "nosampler.toml"],
            "sample_period = 0 turns the sampler off",
        ),
    ];
    let mut cases = cases;
    // beyond the host's memory: refused from the nodes' MemTotal, which a kernel without node
    // directories does not show (then the allocation decides, and under overcommit_memory=1
    // only the OOM killer would)
    if Path::new("/sys/devices/system/node/node0/meminfo").exists() {
        cases.push((vec!["memhog", "64T"], "is more than this host's memory"));
    }
    assert!(cases.len() >= 100, "{} cases", cases.len());
    eprintln!("{} bad inputs", cases.len());
    let mut failures = Vec::new();
    for (args, says) in &cases {
        let before = snapshot(&dir);
        let o = run_in(&dir, args);
        let after = snapshot(&dir);
        let shown = format!("`numalab {}`", args.join(" "));
        match o.code {
            None => failures.push(format!("{shown}: killed by a signal\n{}", o.stderr)),
            Some(0) => failures.push(format!("{shown}: succeeded")),
            Some(_) => {}
        }
        if o.stderr.contains("panicked") || o.stderr.contains("backtrace") {
            failures.push(format!("{shown}: panics\n{}", o.stderr));
        }
        // a message's first line names the problem; one repeated (a cause printed twice) does not
        if !o.stderr.contains(says) {
            failures.push(format!(
                "{shown}: the error does not say '{says}':\n{}",
                o.stderr
            ));
        }
        if o.stderr
            .contains("(os error 2): No such file or directory (os error 2)")
        {
            failures.push(format!("{shown}: says its cause twice\n{}", o.stderr));
        }
        if before != after {
            let changed: Vec<_> = after
                .keys()
                .chain(before.keys())
                .filter(|k| before.get(*k) != after.get(*k))
                .collect();
            failures.push(format!("{shown}: changed the folder: {changed:?}"));
            // put the folder back, so the next case starts from the same state
            for k in changed {
                if !before.contains_key(k) {
                    let _ = std::fs::remove_dir_all(k).or_else(|_| std::fs::remove_file(k));
                }
            }
        }
    }
    // outputs that existed are as they were
    for keep in ["keep.json", "keep.csv", "keep.arrows", "keep.toml"] {
        assert_eq!(std::fs::read(dir.join(keep)).unwrap(), b"keep", "{keep}");
    }
    assert!(
        failures.is_empty(),
        "{} of {} cases:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n\n")
    );
    std::fs::remove_dir_all(&dir).ok();
}
