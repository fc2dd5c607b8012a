//! `numalab study report` in a real browser: Debian's Chromium, headless, loads the page
//! without console errors and finds its table and charts.
//!
//! Chromium is found as `chromium` (Debian's package) or `$NUMALAB_CHROMIUM`. Without it the
//! test says so and passes, unless `NUMALAB_REQUIRE_BROWSER=1` (CI sets it after installing
//! the package), where a missing browser fails it.

use std::path::{Path, PathBuf};
use std::process::Command;

fn numalab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .unwrap()
}

fn chromium() -> Option<PathBuf> {
    let candidates = std::env::var("NUMALAB_CHROMIUM")
        .ok()
        .into_iter()
        .chain(["chromium", "chromium-browser"].map(String::from));
    for c in candidates {
        let ok = Command::new(&c)
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success());
        if ok {
            return Some(PathBuf::from(c));
        }
    }
    None
}

fn temp(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("numalab-report-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

const STUDY: &str = r#"
repeats = 2
[defaults]
machine = "xeon-x5650-2n"
workload = "stream:n=200000,ntimes=2"
threads = 4
pin = "sequential"

[[axis]]
key = "mempolicy"
values = ["default", "interleave:all", "bind:1"]
labels = ["local", "interleaved", "remote"]
"#;

/// The table of the page with id `id`, from its id to its end.
fn table<'a>(page: &'a str, id: &str) -> &'a str {
    page.split(&format!("id=\"{id}\""))
        .nth(1)
        .unwrap_or_else(|| panic!("no table {id}"))
        .split("</table>")
        .next()
        .unwrap()
}

/// Run the study and write its report; the report's path.
fn report(dir: &Path) -> PathBuf {
    let file = dir.join("s.toml");
    std::fs::write(&file, STUDY).unwrap();
    run_and_report(dir, &file, Some("mempolicy=local"))
}

/// Run the study file into `dir/out` and write its report (against `baseline`, else the
/// first configuration) as `dir/report.html`; the report's path.
fn run_and_report(dir: &Path, study: &Path, baseline: Option<&str>) -> PathBuf {
    let out = dir.join("out");
    let o = numalab(&[
        "study",
        "run",
        study.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let html = dir.join("report.html");
    let mut args = vec![
        "study",
        "report",
        out.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ];
    if let Some(b) = baseline {
        args.extend(["--baseline", b]);
    }
    let o = numalab(&args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    html
}

#[test]
fn the_report_is_one_self_contained_page_with_its_charts() {
    let dir = temp("static");
    let html = std::fs::read_to_string(report(&dir)).unwrap();
    // 8 metric charts and one timeline per configuration
    assert_eq!(
        html.matches("<svg class=\"chart\"").count(),
        8,
        "bar charts"
    );
    assert_eq!(
        html.matches("<svg class=\"chart timeline\"").count(),
        3,
        "timelines"
    );
    // 3 configurations × 2 repeats in the runs table, error bars where repeats differ
    let runs = table(&html, "runs");
    assert_eq!(runs.matches("<tr>").count(), 7, "a header and six runs");
    assert!(html.contains("baseline <b>mempolicy=local</b>"));
    assert!(html.contains("id=\"correlation\"") && html.contains("id=\"environment\""));
    // nothing fetched from elsewhere
    assert!(!html.contains("src=\"http") && !html.contains("href=\"http"));
    // an unknown baseline is refused, naming the labels
    let o = numalab(&[
        "study",
        "report",
        dir.join("out").to_str().unwrap(),
        "-o",
        dir.join("x.html").to_str().unwrap(),
        "--baseline",
        "nosuch",
    ]);
    assert_eq!(o.status.code(), Some(2));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("nosuch") && err.contains("mempolicy=interleaved"),
        "{err}"
    );
    assert!(!dir.join("x.html").exists());
    // a folder that is not a study's
    let o = numalab(&[
        "study",
        "report",
        dir.to_str().unwrap(),
        "-o",
        dir.join("y.html").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("not a study folder"));
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Load `html` in headless Chromium: the DOM after its script ran, and the browser's log,
/// which must hold no console error (uncaught exceptions, failed loads).
fn load(browser: &Path, html: &Path, profile: &Path) -> (String, String) {
    let url = format!("file://{}", html.display());
    let o = Command::new(browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--enable-logging=stderr",
            "--v=0",
            "--virtual-time-budget=2000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(["--dump-dom", &url])
        .output()
        .unwrap();
    let dom = String::from_utf8_lossy(&o.stdout).into_owned();
    let log = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "chromium failed: {log}");
    let errors: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("CONSOLE") || l.contains("Uncaught") || l.contains("Failed to load"))
        .collect();
    assert!(errors.is_empty(), "console errors: {errors:?}");
    (dom, log)
}

/// Chromium, or None after saying why the test is skipped (a panic where CI requires it).
fn browser_or_skip() -> Option<PathBuf> {
    let b = chromium();
    if b.is_none() {
        if std::env::var("NUMALAB_REQUIRE_BROWSER").as_deref() == Ok("1") {
            panic!("NUMALAB_REQUIRE_BROWSER=1 but no chromium found (apt-get install chromium)");
        }
        eprintln!("skipped: no chromium (apt-get install chromium, or set NUMALAB_CHROMIUM)");
    }
    b
}

#[test]
fn the_grid_studys_report_opens_in_chromium() {
    // issue 21's grid (docs/studies/cg-grid.toml: 3 machines × 3 placements × 2 page sizes)
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let dir = temp("grid");
    let grid = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/studies/cg-grid.toml");
    let html = run_and_report(&dir, &grid, None);
    let (dom, log) = load(&browser, &html, &dir.join("profile"));
    assert_eq!(dom.matches("<svg class=\"chart\"").count(), 8, "{log}");
    assert_eq!(
        dom.matches("class=\"chart timeline\"").count(),
        18,
        "one per configuration"
    );
    let runs = table(&dom, "runs");
    assert_eq!(runs.matches("<tr").count(), 19, "a header and 18 runs");
    for machine in [
        "machine=6164HE-4n",
        "machine=6272-8n",
        "machine=gold6130-4n",
    ] {
        assert!(runs.contains(machine), "{machine}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn headless_chromium_loads_the_report_without_console_errors() {
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let dir = temp("browser");
    let html = report(&dir);
    let url = format!("file://{}", html.display());
    let profile = dir.join("profile");
    let (dom, log) = load(&browser, &html, &profile);
    // the page's script ran: the DOM is the page's, its charts and tables are there
    assert_eq!(dom.matches("<svg class=\"chart\"").count(), 8, "{log}");
    assert_eq!(dom.matches("class=\"chart timeline\"").count(), 3);
    assert!(dom.contains("id=\"runs\"") && dom.contains("id=\"correlation\""));
    // a screenshot, for people to look at (docs/study.md shows one)
    let shot = dir.join("report.png");
    let o = Command::new(&browser)
        .args([
            "--headless=new",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1000,1400",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::metadata(&shot).unwrap().len() > 10_000,
        "a real picture"
    );
    if let Ok(keep) = std::env::var("NUMALAB_KEEP_SCREENSHOT") {
        std::fs::copy(&shot, keep).unwrap();
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_real_run_studys_report_opens_in_chromium() {
    // real runs on this host (a command axis only: no kernel setting changes); their wall,
    // user and system times charted against the baseline and correlated with the wall time
    let Some(browser) = browser_or_skip() else {
        return;
    };
    let dir = temp("real");
    let file = dir.join("real.toml");
    std::fs::write(
        &file,
        r#"kind = "real"
repeats = 3
[[axis]]
key = "command"
values = ["sleep 0.02", "sleep 0.08", "sh -c 'i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done'"]
labels = ["short", "long", "busy"]
"#,
    )
    .unwrap();
    let html = run_and_report(&dir, &file, Some("command=short"));
    let (dom, log) = load(&browser, &html, &dir.join("profile"));
    assert_eq!(
        dom.matches("<svg class=\"chart\"").count(),
        3,
        "wall, user, system: {log}"
    );
    for t in ["wall_ms", "user_ms", "sys_ms"] {
        assert!(dom.contains(&format!("aria-label=\"{t}\"")), "{t} chart");
    }
    assert!(
        !dom.contains("class=\"chart timeline\""),
        "real runs have no timeline"
    );
    assert!(dom.contains("Real runs, timed as hyperfine does"));
    let runs = table(&dom, "runs");
    assert_eq!(runs.matches("<tr").count(), 10, "a header and 9 runs");
    let corr = table(&dom, "correlation");
    assert!(corr.contains("user_ms") && corr.contains("sys_ms") && !corr.contains(">wall_ms<"));
    std::fs::remove_dir_all(&dir).unwrap();
}
