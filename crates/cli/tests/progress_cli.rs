//! Progress bars go to standard error, and only to a terminal: with standard error on a
//! pseudo-terminal, `sim --compare` draws its bar over the configurations there (with the share
//! done), `-q` draws nothing, and the JSON of `--json -` on standard output stays pure JSON.

use std::fs::File;
use std::io::Read;
use std::os::fd::FromRawFd;
use std::process::{Command, Output, Stdio};

/// A pseudo-terminal of 160 columns: (master, slave).
fn pty() -> (File, File) {
    // SAFETY: plain libc calls on a descriptor this function owns; the name buffer is sized.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt");
        assert_eq!(libc::grantpt(m), 0);
        assert_eq!(libc::unlockpt(m), 0);
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let ws = libc::winsize {
            ws_row: 40,
            ws_col: 160,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        libc::ioctl(m, libc::TIOCSWINSZ, &ws);
        let s = libc::open(name.as_ptr(), libc::O_RDWR | libc::O_NOCTTY);
        assert!(s >= 0, "opening the pty's slave");
        (File::from_raw_fd(m), File::from_raw_fd(s))
    }
}

/// Run numalab with standard error on a terminal: (its output, what the terminal showed).
fn on_terminal(args: &[&str]) -> (Output, String) {
    let (mut master, slave) = pty();
    let child = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .env("TERM", "xterm")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::from(slave))
        .spawn()
        .unwrap();
    // the terminal is read as it is written (a full one would stall the child); the read
    // ends with an error once the child, the slave's last holder, has exited
    let reader = std::thread::spawn(move || {
        let mut shown = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n) = master.read(&mut buf) {
            if n == 0 {
                break;
            }
            shown.extend_from_slice(&buf[..n]);
        }
        String::from_utf8_lossy(&shown).into_owned()
    });
    let out = child.wait_with_output().unwrap();
    (out, reader.join().unwrap())
}

const COMPARE: &[&str] = &[
    "sim",
    "-m",
    "xeon-x5650-2n",
    "-w",
    "stream:n=100000",
    "--compare",
    "first-touch,interleave",
    "--json",
    "-",
];

#[test]
fn a_comparison_draws_its_bar_on_standard_error_and_keeps_the_json_pure() {
    let (out, shown) = on_terminal(COMPARE);
    assert!(out.status.success(), "{shown}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("standard output is not pure JSON ({e}): {:?}", out.stdout));
    assert_eq!(json.as_array().map(Vec::len), Some(2));
    assert!(shown.contains("sim: "), "{shown}");
    assert!(shown.contains("/2 configurations ("), "{shown}");
    assert!(shown.contains("%)"), "{shown}");
    // the table, moved off standard output by `--json -`, is there too
    assert!(shown.contains("simulated time (ms)"), "{shown}");
}

#[test]
fn quiet_draws_no_bar() {
    let args: Vec<&str> = COMPARE.iter().copied().chain(["-q"]).collect();
    let (out, shown) = on_terminal(&args);
    assert!(out.status.success(), "{shown}");
    serde_json::from_slice::<serde_json::Value>(&out.stdout).expect("pure JSON");
    assert!(!shown.contains("configurations"), "{shown}");
}

#[test]
fn analyze_json_to_standard_output_stays_pure_with_progress_on() {
    let dir = std::env::temp_dir().join(format!("numalab-progress-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // braces in the name: it labels the bar, and in a bar's template it would be a key
    let file = dir.join("s{a:b}{.arrows");
    let made = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["sim", "-q", "-w", "stream:n=100000", "--sample-period", "7"])
        .arg("--samples-out")
        .arg(&file)
        .output()
        .unwrap();
    assert!(made.status.success());
    let (out, shown) = on_terminal(&["analyze", file.to_str().unwrap(), "--json", "-"]);
    assert!(out.status.success(), "{shown}");
    let json: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("standard output is not pure JSON ({e}): {:?}", out.stdout));
    assert!(json.is_object());
    let quiet = Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(["analyze", "-q"])
        .arg(&file)
        .output()
        .unwrap();
    assert!(
        quiet.status.success(),
        "{}",
        String::from_utf8_lossy(&quiet.stderr)
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
