//! `numalab study run --backend slurm` against a real Slurm: the test starts a one-node
//! cluster on localhost (Debian's munge, slurmctld and slurmd, in the foreground, with a key,
//! a configuration and state of its own in a temporary folder, on ports of its own), runs the
//! documented grid study (docs/studies/cg-grid.toml: 3 machines × 3 placements × 2 page
//! sizes) as a job array of shards, resumes after a lost record, and stops the daemons.
//!
//! Needs root (slurmd starts jobs as their users) and Slurm's programs. Without them the test
//! says so and passes, unless `NUMALAB_REQUIRE_SLURM=1` (CI sets it after installing slurmctld,
//! slurmd, slurm-client and munge).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

fn find(program: &str) -> Option<PathBuf> {
    let path = std::env::var("PATH").unwrap_or_default();
    let found = path
        .split(':')
        .chain(["/usr/sbin", "/usr/bin", "/sbin"])
        .map(|d| Path::new(d).join(program))
        .find(|p| p.is_file());
    found
}

/// The daemons of the test cluster, killed when dropped.
struct Cluster {
    dir: PathBuf,
    conf: PathBuf,
    daemons: Vec<Child>,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        for d in self.daemons.iter_mut().rev() {
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn log(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_default()
}

impl Cluster {
    fn start() -> Cluster {
        let dir = std::env::temp_dir().join(format!("numalab-slurm-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["state", "spool"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        // a key of the test's own: munged wants it private to its user
        let key = dir.join("munge.key");
        let mut random = vec![0u8; 1024];
        use std::io::Read;
        std::fs::File::open("/dev/urandom")
            .unwrap()
            .read_exact(&mut random)
            .unwrap();
        std::fs::write(&key, &random).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&key, std::fs::Permissions::from_mode(0o600)).unwrap();
        let socket = dir.join("munge.sock");
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap();
        let host = host.trim().split('.').next().unwrap().to_string();
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        // ports of this test's own, so a cluster already on the machine is left alone; the
        // daemons reach each other at 127.0.0.1, whatever the host name resolves to
        let port = 20000 + (std::process::id() % 20000) as u16;
        let d = dir.display();
        let conf = dir.join("slurm.conf");
        std::fs::write(
            &conf,
            format!(
                "ClusterName=numalab-test\nSlurmctldHost={host}(127.0.0.1)\nSlurmctldPort={port}\nSlurmdPort={}\n\
AuthType=auth/munge\nAuthInfo=socket={}\nCredType=cred/munge\nSlurmUser=root\nSlurmdUser=root\n\
StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool\nSlurmctldPidFile={d}/slurmctld.pid\n\
SlurmdPidFile={d}/slurmd.pid\nSlurmctldLogFile={d}/slurmctld.log\nSlurmdLogFile={d}/slurmd.log\n\
ProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none\n\
SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nReturnToService=2\nMpiDefault=none\n\
NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} State=UNKNOWN\nPartitionName=test Nodes={host} Default=YES MaxTime=INFINITE State=UP\n",
                port + 1,
                socket.display()
            ),
        )
        .unwrap();
        let mut c = Cluster {
            dir: dir.clone(),
            conf: conf.clone(),
            daemons: Vec::new(),
        };
        let spawn = |prog: &str, args: Vec<String>, logname: &str| -> Child {
            Command::new(find(prog).unwrap())
                .args(args)
                .env("SLURM_CONF", &conf)
                .stdin(Stdio::null())
                .stdout(std::fs::File::create(dir.join(logname)).unwrap())
                .stderr(Stdio::null())
                .spawn()
                .unwrap_or_else(|e| panic!("starting {prog}: {e}"))
        };
        c.daemons.push(spawn(
            "munged",
            vec![
                "--foreground".into(),
                "--force".into(),
                format!("--socket={}", socket.display()),
                format!("--key-file={}", key.display()),
                format!("--pid-file={d}/munged.pid"),
                format!("--log-file={d}/munged.log"),
                format!("--seed-file={d}/munge.seed"),
            ],
            "munged.out",
        ));
        wait_for(|| socket.exists(), "munged's socket", &dir);
        let conf_arg = conf.display().to_string();
        c.daemons.push(spawn(
            "slurmctld",
            vec!["-D".into(), "-f".into(), conf_arg.clone()],
            "slurmctld.out",
        ));
        c.daemons.push(spawn(
            "slurmd",
            vec!["-D".into(), "-f".into(), conf_arg],
            "slurmd.out",
        ));
        let conf2 = conf.clone();
        wait_for(
            move || {
                Command::new(find("sinfo").unwrap())
                    .args(["-h", "-o", "%t"])
                    .env("SLURM_CONF", &conf2)
                    .output()
                    .map(|o| String::from_utf8_lossy(&o.stdout).trim() == "idle")
                    .unwrap_or(false)
            },
            "the node to be idle in sinfo",
            &dir,
        );
        c
    }

    fn numalab(&self, args: &[&str]) -> Output {
        let o = Command::new(env!("CARGO_BIN_EXE_numalab"))
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .output()
            .unwrap();
        eprintln!(
            "numalab {}\n  -> {}\n{}{}",
            args.join(" "),
            o.status,
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        o
    }
}

fn wait_for(mut ready: impl FnMut() -> bool, what: &str, dir: &Path) {
    let start = Instant::now();
    while !ready() {
        if start.elapsed() > Duration::from_secs(60) {
            panic!(
                "the test cluster did not come up: waited 60 s for {what}\nmunged: {}\nslurmctld: {}\nslurmd: {}",
                log(dir, "munged.log"),
                log(dir, "slurmctld.log"),
                log(dir, "slurmd.log")
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

fn have_slurm() -> bool {
    // SAFETY: geteuid has no preconditions
    let root = unsafe { libc::geteuid() } == 0;
    let programs = ["munged", "slurmctld", "slurmd", "sbatch", "sinfo"]
        .iter()
        .all(|p| find(p).is_some());
    if root && programs {
        return true;
    }
    let why = if root {
        "Slurm's programs are missing (apt-get install slurmctld slurmd slurm-client munge)"
    } else {
        "not root (slurmd starts jobs as their users)"
    };
    if std::env::var("NUMALAB_REQUIRE_SLURM").as_deref() == Ok("1") {
        panic!("NUMALAB_REQUIRE_SLURM=1 but {why}");
    }
    eprintln!("skipped: {why}");
    false
}

#[test]
fn a_study_runs_as_a_slurm_job_array_and_resumes() {
    if !have_slurm() {
        return;
    }
    let cluster = Cluster::start();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/studies/cg-grid.toml");
    let out = cluster.dir.join("study");
    let args = [
        "study",
        "run",
        example.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--backend",
        "slurm",
        "--shards",
        "3",
        "-q",
    ];
    let o = cluster.numalab(&args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{stdout}");
    assert!(stdout.contains("3 array tasks for 18 runs"), "{stdout}");
    assert!(
        stdout.contains("18 runs: 18 with a successful record"),
        "{stdout}"
    );
    // every task ran its shard and wrote its Parquet part; the tables hold every run
    for k in 0..3 {
        assert!(out.join(format!("parts/part-{k:04}.parquet")).is_file());
    }
    let logs: Vec<String> = std::fs::read_dir(out.join("slurm"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().ends_with(".out"))
        .map(|e| std::fs::read_to_string(e.path()).unwrap())
        .collect();
    assert_eq!(logs.len(), 3, "{logs:?}");
    for k in 0..3 {
        assert!(
            logs.iter().any(|l| l.contains(&format!("shard {k} of 3:"))),
            "{logs:?}"
        );
    }
    let csv = std::fs::read_to_string(out.join("results.csv")).unwrap();
    assert_eq!(csv.lines().count(), 19, "{csv}");
    assert_eq!(
        csv.lines().filter(|l| l.contains(",ok,")).count(),
        18,
        "{csv}"
    );

    // a lost record (a task that failed or was cancelled): a rerun submits only that run
    let lost = std::fs::read_dir(out.join("runs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::remove_file(&lost).unwrap();
    let o = cluster.numalab(&["study", "collect", out.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(2),
        "a missing run fails the collection"
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("not run: no record"));
    let o = cluster.numalab(&args);
    let stdout = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{stdout}");
    assert!(stdout.contains("1 array task for 1 run"), "{stdout}");
    assert!(lost.is_file());
    // and once all is done, nothing is submitted
    let o = cluster.numalab(&args);
    assert!(String::from_utf8_lossy(&o.stdout).contains("nothing to submit"));
}
