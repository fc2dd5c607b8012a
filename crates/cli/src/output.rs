//! Readable tables, JSON and CSV.

use anyhow::{bail, Context, Result};
use indicatif::{
    MultiProgress, ProgressBar, ProgressDrawTarget, ProgressFinish, ProgressState, ProgressStyle,
};
use numalab_sim::SimResult;
use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

/// `--json -`: the JSON goes to standard output, for a pipe into jq or a notebook.
pub fn json_to_stdout(p: Option<&Path>) -> bool {
    p.is_some_and(is_stdout)
}

fn is_stdout(p: &Path) -> bool {
    p.as_os_str() == "-"
}

/// Print the human-readable report: on standard output, or on standard error where standard
/// output carries the JSON (`--json -`), so that the two never mix.
pub fn print_report(text: &str, json_to_stdout: bool) {
    if json_to_stdout {
        eprint!("{text}");
    } else {
        print!("{text}");
    }
}

/// Write JSON `text` to `p` (whole or not at all: a temporary file renamed), or to standard
/// output for `-`; a file written is named on standard error.
pub fn write_json_text(p: &Path, text: &str) -> Result<()> {
    if is_stdout(p) {
        use std::io::Write as _;
        let mut out = std::io::stdout().lock();
        out.write_all(text.as_bytes())?;
        out.write_all(b"\n")?;
        out.flush()?;
    } else {
        write_atomic(p, text.as_bytes())?;
        eprintln!("wrote {}", p.display());
    }
    Ok(())
}

/// [`check_writable`] for a `--json` path that may be `-` (standard output).
pub fn check_json_out(p: Option<&Path>) -> Result<()> {
    match p {
        Some(p) if is_stdout(p) => Ok(()),
        p => check_writable(p),
    }
}

/// Refuse an output path whose folder does not exist, before any simulation runs, so an
/// error never leaves half the outputs written. `-` is refused here: the commands that can
/// write to standard output check with [`check_json_out`].
pub fn check_writable(p: Option<&Path>) -> Result<()> {
    if let Some(p) = p {
        if is_stdout(p) {
            bail!(
                "cannot write to standard output ('-') here: `--json -` works for sim, analyze and validate; give a file name"
            );
        }
        let dir = p
            .parent()
            .filter(|d| !d.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        if !dir.is_dir() {
            bail!(
                "cannot write {}: folder {} does not exist",
                p.display(),
                dir.display()
            );
        }
        if p.is_dir() {
            bail!("cannot write {}: it is a folder", p.display());
        }
    }
    Ok(())
}

fn opt(v: Option<f64>, digits: usize) -> String {
    v.map_or("-".into(), |v| format!("{v:.digits$}"))
}

fn gb(bytes: f64) -> String {
    format!("{:.2}", bytes / 1e9)
}

/// The mean time of one dependent load in the run's `chase` phase (ptrchase, mlc-loaded's
/// latency thread): the phase's time over its loads, summed over the threads that chased.
pub fn chase_ns_per_load(r: &SimResult) -> Option<f64> {
    let p = r.phase("chase")?;
    let (ns, loads) = p
        .per_thread
        .iter()
        .filter(|t| t.loads > 0)
        .fold((0.0, 0u64), |(ns, n), t| (ns + t.time_ns, n + t.loads));
    (loads > 0).then(|| ns / loads as f64)
}

/// Rows of (metric, value per result).
fn rows(rs: &[SimResult]) -> Vec<(String, Vec<String>)> {
    let base = rs[0].sim_time_ns;
    let n = rs[0].per_node.len();
    let mut out: Vec<(String, Vec<String>)> = vec![
        (
            "simulated time (ms)".into(),
            rs.iter()
                .map(|r| format!("{:.3}", r.sim_time_ns / 1e6))
                .collect(),
        ),
        (
            "speedup vs first".into(),
            rs.iter()
                .map(|r| format!("{:.2}x", base / r.sim_time_ns.max(1e-9)))
                .collect(),
        ),
        (
            "LAR (%)".into(),
            rs.iter().map(|r| opt(r.metrics.lar_percent, 1)).collect(),
        ),
        (
            "imbalance (%)".into(),
            rs.iter()
                .map(|r| opt(r.metrics.imbalance_percent, 1))
                .collect(),
        ),
        (
            "MAPTU (DRAM acc/us)".into(),
            rs.iter()
                .map(|r| format!("{:.1}", r.metrics.maptu))
                .collect(),
        ),
    ];
    // a pointer chase's figure is its latency: ptrchase and mlc-loaded time a `chase` phase
    if rs.iter().any(|r| chase_ns_per_load(r).is_some()) {
        out.insert(
            2,
            (
                "ns per load (chase)".into(),
                rs.iter().map(|r| opt(chase_ns_per_load(r), 1)).collect(),
            ),
        );
    }
    for d in 0..n {
        out.push((
            format!("node {d} traffic (GB r+w)"),
            rs.iter()
                .map(|r| {
                    r.per_node.get(d).map_or("-".into(), |p| {
                        gb((p.ctrl_read_bytes + p.ctrl_write_bytes) as f64)
                    })
                })
                .collect(),
        ));
    }
    out.extend([
        (
            "max link util (%)".into(),
            rs.iter()
                .map(|r| {
                    format!(
                        "{:.1}",
                        r.links
                            .iter()
                            .map(|l| l.avg_utilisation)
                            .fold(0.0, f64::max)
                            * 100.0
                    )
                })
                .collect(),
        ),
        (
            "TLB misses (walks)".into(),
            rs.iter()
                .map(|r| {
                    r.per_thread
                        .iter()
                        .map(|t| t.page_walks.iter().sum::<u64>())
                        .sum::<u64>()
                        .to_string()
                })
                .collect(),
        ),
        (
            "page-walk L2-miss share (%)".into(),
            rs.iter()
                .map(|r| opt(r.metrics.pagewalk_l2_miss_share_percent, 2))
                .collect(),
        ),
        (
            "fault time (ms, all threads)".into(),
            rs.iter()
                .map(|r| {
                    format!(
                        "{:.3}",
                        r.per_thread.iter().map(|t| t.fault_ns).sum::<f64>() / 1e6
                    )
                })
                .collect(),
        ),
        (
            "max fault time share (%)".into(),
            rs.iter()
                .map(|r| opt(r.metrics.max_page_fault_time_share_percent, 2))
                .collect(),
        ),
        (
            "PAMUP (%)".into(),
            rs.iter().map(|r| opt(r.metrics.pamup_percent, 2)).collect(),
        ),
        (
            "NHP".into(),
            rs.iter()
                .map(|r| r.metrics.nhp.map_or("-".into(), |v| v.to_string()))
                .collect(),
        ),
        (
            "PSP (%)".into(),
            rs.iter().map(|r| opt(r.metrics.psp_percent, 1)).collect(),
        ),
        (
            "MPKI".into(),
            rs.iter().map(|r| opt(r.metrics.mpki, 2)).collect(),
        ),
        (
            // the out-of-order window (docs/model.md, "Compute and memory overlap")
            "compute under misses (%)".into(),
            rs.iter()
                .map(|r| {
                    let (c, o) = r
                        .per_thread
                        .iter()
                        .fold((0.0, 0.0), |(c, o), t| (c + t.compute_ns, o + t.overlap_ns));
                    if c > 0.0 {
                        format!("{:.1}", 100.0 * o / c)
                    } else {
                        "-".into()
                    }
                })
                .collect(),
        ),
        (
            "faults 4K / 2M / 1G".into(),
            rs.iter()
                .map(|r| {
                    format!(
                        "{}/{}/{}",
                        r.vmstat.pgfault_4k, r.vmstat.pgfault_2m, r.vmstat.pgfault_1g
                    )
                })
                .collect(),
        ),
        (
            "pages migrated".into(),
            rs.iter().map(|r| r.migrated_pages.to_string()).collect(),
        ),
        (
            "next-touch faults kernel / user / lazy".into(),
            rs.iter()
                .map(|r| {
                    let n = &r.next_touch;
                    format!("{}/{}/{}", n.kernel_faults, n.user_faults, n.lazy_faults)
                })
                .collect(),
        ),
        (
            "huge-page splits".into(),
            rs.iter().map(|r| r.splits.to_string()).collect(),
        ),
        (
            "TLB shootdowns sent / CPUs reached".into(),
            rs.iter()
                .map(|r| {
                    let v = &r.vmstat;
                    format!(
                        "{}/{}",
                        v.nr_tlb_remote_flush, v.nr_tlb_remote_flush_received
                    )
                })
                .collect(),
        ),
        (
            "context switches (run delay ms)".into(),
            rs.iter()
                .map(|r| {
                    let n: u64 = r.per_thread.iter().map(|t| t.context_switches).sum();
                    let ms: f64 = r.per_thread.iter().map(|t| t.run_delay_ns).sum::<f64>() / 1e6;
                    format!("{n} ({ms:.1})")
                })
                .collect(),
        ),
        (
            "promotions (khugepaged)".into(),
            rs.iter().map(|r| r.promotions.to_string()).collect(),
        ),
        (
            "policy decisions".into(),
            rs.iter().map(decision_summary).collect(),
        ),
        (
            "memory references".into(),
            rs.iter().map(|r| r.memory_references.to_string()).collect(),
        ),
        (
            "samples kept / taken".into(),
            rs.iter()
                .map(|r| {
                    if r.samples_kept < r.samples_taken {
                        // the in-memory cap was reached: say it, never drop silently
                        format!("{}/{} (cap)", r.samples_kept, r.samples_taken)
                    } else {
                        format!("{}/{}", r.samples_kept, r.samples_taken)
                    }
                })
                .collect(),
        ),
        (
            "host seconds".into(),
            rs.iter()
                .map(|r| format!("{:.2}", r.host_seconds))
                .collect(),
        ),
    ]);
    out
}

pub fn table(rs: &[SimResult]) -> String {
    let mut s = String::new();
    let r0 = &rs[0];
    let _ = writeln!(
        s,
        "machine {}  workload {}  threads {}  pinning {}",
        r0.machine, r0.workload, r0.threads, r0.pinning
    );
    let heads: Vec<String> = rs.iter().map(|r| r.label.clone()).collect();
    let rows = rows(rs);
    let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(6);
    let widths: Vec<usize> = (0..rs.len())
        .map(|i| {
            rows.iter()
                .map(|r| r.1[i].len())
                .chain([heads[i].len()])
                .max()
                .unwrap_or(4)
        })
        .collect();
    let _ = write!(s, "{:<w0$}", "");
    for (h, w) in heads.iter().zip(&widths) {
        let _ = write!(s, "  {h:>w$}");
    }
    s.push('\n');
    for (name, vals) in &rows {
        let _ = write!(s, "{name:<w0$}");
        for (v, w) in vals.iter().zip(&widths) {
            let _ = write!(s, "  {v:>w$}");
        }
        s.push('\n');
    }
    if rs.len() == 1 {
        s.push_str(&detail(r0));
    }
    s
}

/// Per-node and per-link detail of a single run.
/// Each kind of decision in the run's policy log with its total count, in first-seen order
/// (`migrate 1200, interleave 320`), or `-`.
fn decision_totals(r: &SimResult) -> Vec<(String, u64, String)> {
    let mut out: Vec<(String, u64, String)> = Vec::new();
    for d in r.policy_log.iter().flat_map(|e| &e.decisions) {
        match out.iter_mut().find(|(w, _, _)| *w == d.what) {
            Some(t) => {
                t.1 += d.count;
                t.2.clone_from(&d.reason);
            }
            None => out.push((d.what.clone(), d.count, d.reason.clone())),
        }
    }
    out
}

fn decision_summary(r: &SimResult) -> String {
    let totals = decision_totals(r);
    if totals.is_empty() {
        return "-".into();
    }
    totals
        .iter()
        .map(|(w, n, _)| format!("{w} {n}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn detail(r: &SimResult) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "\nnode  read GB  write GB  avg util %  peak util %  resident MiB  served from node 0..n (requests)");
    for p in &r.per_node {
        let _ = writeln!(
            s,
            "{:>4}  {:>7}  {:>8}  {:>10.1}  {:>11.1}  {:>12.1}  {:?}",
            p.node,
            gb(p.ctrl_read_bytes as f64),
            gb(p.ctrl_write_bytes as f64),
            p.avg_utilisation * 100.0,
            p.peak_utilisation * 100.0,
            p.resident_bytes as f64 / (1 << 20) as f64,
            p.served_from
        );
    }
    if !r.links.is_empty() {
        let _ = writeln!(s, "\nlink    GB/s cap  moved GB  avg util %  peak util %");
        for l in &r.links {
            let _ = writeln!(
                s,
                "{:>2}->{:<2} {:>8.1}  {:>8}  {:>10.1}  {:>11.1}",
                l.from,
                l.to,
                l.gbps_per_dir,
                gb(l.bytes),
                l.avg_utilisation * 100.0,
                l.peak_utilisation * 100.0
            );
        }
    }
    let totals = decision_totals(r);
    if !totals.is_empty() {
        let hooks = r.policy_log.len();
        let _ = writeln!(
            s,
            "\npolicy decisions ({hooks} hooks acted; each line: total, then the last reason given; all in the JSON's policy_log)"
        );
        for (what, n, reason) in &totals {
            let _ = writeln!(s, "{what:<22} {n:>9}  {reason}");
        }
    }
    if !r.phases.is_empty() {
        let _ = writeln!(
            s,
            "\nphase            start ms    end ms   references   LAR %  imbal %    MPKI  walk %  fault %"
        );
        for p in &r.phases {
            let m = &p.metrics;
            let _ = writeln!(
                s,
                "{:<14} {:>10.3} {:>9.3} {:>12} {:>7} {:>8} {:>7} {:>7} {:>8}",
                p.name,
                p.start_ns / 1e6,
                p.end_ns / 1e6,
                p.accesses,
                opt(m.lar_percent, 1),
                opt(m.imbalance_percent, 1),
                opt(m.mpki, 2),
                opt(m.pagewalk_l2_miss_share_percent, 2),
                opt(m.max_page_fault_time_share_percent, 2),
            );
        }
    }
    s
}

pub fn write_json(p: &Path, rs: &[SimResult]) -> Result<()> {
    write_json_text(p, &serde_json::to_string_pretty(rs)?)
}

pub fn write_csv(p: &Path, rs: &[SimResult]) -> Result<()> {
    with_temp(p, |tmp| write_csv_to(tmp, rs))
}

fn write_csv_to(p: &Path, rs: &[SimResult]) -> Result<()> {
    let mut w = csv::Writer::from_path(p).with_context(|| format!("writing {}", p.display()))?;
    let rows = rows(rs);
    let mut head = vec![
        "label".to_string(),
        "machine".into(),
        "workload".into(),
        "threads".into(),
    ];
    head.extend(rows.iter().map(|r| r.0.clone()));
    w.write_record(&head)?;
    for (i, r) in rs.iter().enumerate() {
        let mut rec = vec![
            r.label.clone(),
            r.machine.clone(),
            r.workload.clone(),
            r.threads.to_string(),
        ];
        rec.extend(rows.iter().map(|row| row.1[i].clone()));
        w.write_record(&rec)?;
    }
    w.flush()?;
    Ok(())
}

/// Write a whole file under a temporary name beside it and rename it into place
/// (`numalab_core::atomic_file`), so that a failure never leaves a partial file.
pub fn write_atomic(p: &Path, bytes: &[u8]) -> Result<()> {
    Ok(numalab_core::atomic_file::write_atomic(p, bytes)?)
}

/// Run `write` on a temporary path beside `p` and rename the result into place when it
/// succeeds; when it fails, the temporary file is removed and `p` left as it was.
pub fn with_temp<T>(p: &Path, write: impl FnOnce(&Path) -> Result<T>) -> Result<T> {
    numalab_core::atomic_file::with_temp(p, write)
}

/// Where a bar draws: standard error, or nowhere with `-q`. indicatif draws nothing on a
/// standard error that is not a terminal, so bars never reach a pipe or a log file, and
/// standard output (a report, or the JSON of `--json -`) never carries them.
fn bar_target(quiet: bool) -> ProgressDrawTarget {
    if quiet {
        ProgressDrawTarget::hidden()
    } else {
        ProgressDrawTarget::stderr()
    }
}

// What a bar is about goes in its prefix, never into its template: a label holding a `{`
// (a file name) would make the template invalid.
fn count_style(unit: &str) -> ProgressStyle {
    ProgressStyle::with_template(&format!(
        "{{spinner}} {{prefix}}: {{pos}}/{{len}} {unit} ({{percent}}%) [{{elapsed_precise}}, about {{eta}} left] {{wide_bar}} {{msg}}"
    ))
    .expect("a valid template")
}

/// A bar counting `unit` done out of a total set later (`set_length`), with the share done,
/// the time spent, an estimate of the time left and the step under way (`set_message`, if
/// any), hidden when `quiet` (validate's simulations, a study's runs, calibrate's
/// measurements, sim's configurations, bench's runs). Like every bar here, it clears itself
/// when dropped unfinished, so that an error is not printed after a stale bar.
pub fn count_bar(what: &str, unit: &str, quiet: bool) -> ProgressBar {
    // no length until the caller knows it: a length of 0 would read as 100 % done
    let bar = ProgressBar::with_draw_target(None, bar_target(quiet))
        .with_finish(ProgressFinish::AndClear);
    bar.set_style(count_style(unit));
    bar.set_prefix(what.to_string());
    if !quiet {
        bar.enable_steady_tick(Duration::from_millis(200));
    }
    bar
}

fn bytes_style() -> ProgressStyle {
    ProgressStyle::with_template(
        "{spinner} {prefix}: {bytes} of {total_bytes} ({percent}%) [{elapsed_precise}, about {eta} left] {wide_bar} {msg}",
    )
    .expect("a valid template")
}

/// A bar over `total` bytes read (`set_position`), hidden until [`SlowBar::poke`] finds that
/// the work has gone on for a while.
pub fn bytes_bar(what: &str, total: u64) -> ProgressBar {
    let bar = ProgressBar::hidden().with_finish(ProgressFinish::AndClear);
    bar.set_length(total);
    bar.set_style(bytes_style());
    bar.set_prefix(what.to_string());
    bar
}

fn duration_style() -> ProgressStyle {
    // position and length are milliseconds: the times shown come from them, so that the time
    // done, the time left and the percentage always agree
    let ms = |f: fn(&ProgressState) -> u64| {
        move |s: &ProgressState, w: &mut dyn std::fmt::Write| {
            let _ = write!(
                w,
                "{}",
                indicatif::FormattedDuration(Duration::from_millis(f(s)))
            );
        }
    };
    ProgressStyle::with_template(
        "{spinner} {prefix}: {done} of {total} ({percent}%), {left} left {wide_bar} {msg}",
    )
    .expect("a valid template")
    .with_key("done", ms(|s| s.pos()))
    .with_key("total", ms(|s| s.len().unwrap_or(0)))
    .with_key("left", ms(|s| s.len().unwrap_or(0).saturating_sub(s.pos())))
}

/// A bar over a known span of time (`record --duration`), moved with [`duration_position`].
pub fn duration_bar(what: &str, total: Duration, quiet: bool) -> ProgressBar {
    let bar = ProgressBar::with_draw_target(Some(millis(total)), bar_target(quiet))
        .with_finish(ProgressFinish::AndClear);
    bar.set_style(duration_style());
    bar.set_prefix(what.to_string());
    bar
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// The position of a [`duration_bar`] over `total` after `elapsed`: milliseconds, never past
/// the end (the last drain of a recording comes a little after its duration).
pub fn duration_position(elapsed: Duration, total: Duration) -> u64 {
    millis(elapsed.min(total))
}

/// A spinner for work whose total is not known in advance: what it has done so far is its
/// message. Hidden until [`SlowBar::poke`] finds that the work has gone on for a while.
/// `template` is a fixed string; what varies (a file name) goes in `{prefix}`.
pub fn spinner(template: &'static str) -> ProgressBar {
    let bar = ProgressBar::hidden().with_finish(ProgressFinish::AndClear);
    bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
    bar
}

/// How long work goes on before its bar appears: a quick run prints nothing that would only
/// flash, a long one shows where it is.
const SLOW: Duration = Duration::from_secs(1);

/// A bar that starts hidden and is shown (unless quiet) the first time it is poked after
/// [`SLOW`]: on standard error, or as a line of a [`MultiProgress`].
pub struct SlowBar {
    pub bar: ProgressBar,
    multi: Option<MultiProgress>,
    started: Instant,
    quiet: bool,
    shown: bool,
}

impl SlowBar {
    pub fn new(bar: ProgressBar, quiet: bool) -> SlowBar {
        SlowBar {
            bar,
            multi: None,
            started: Instant::now(),
            quiet,
            shown: false,
        }
    }

    /// A bar shown as a line of `multi` (added to it only when shown, so that quick runs take
    /// no line).
    pub fn in_multi(bar: ProgressBar, multi: &MultiProgress, quiet: bool) -> SlowBar {
        SlowBar {
            multi: Some(multi.clone()),
            ..SlowBar::new(bar, quiet)
        }
    }

    /// Whether the bar is never to be shown (`-q`): its position need not be worked out.
    pub fn quiet(&self) -> bool {
        self.quiet
    }

    /// Show the bar if the work has gone on for long enough; once only (a bar whose standard
    /// error is not a terminal stays hidden, and must not be set up again at every poke).
    pub fn poke(&mut self) {
        if self.quiet || self.shown || self.started.elapsed() <= SLOW {
            return;
        }
        self.shown = true;
        match &self.multi {
            Some(m) => {
                m.add(self.bar.clone());
            }
            None => self.bar.set_draw_target(ProgressDrawTarget::stderr()),
        }
        self.bar.enable_steady_tick(Duration::from_millis(200));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// A terminal that keeps what is drawn on it.
    #[derive(Debug, Clone, Default)]
    struct Screen(Arc<Mutex<Vec<String>>>);

    impl indicatif::TermLike for Screen {
        fn width(&self) -> u16 {
            160
        }
        fn move_cursor_up(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_down(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_right(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn move_cursor_left(&self, _: usize) -> std::io::Result<()> {
            Ok(())
        }
        fn write_line(&self, s: &str) -> std::io::Result<()> {
            self.0.lock().unwrap().push(s.to_string());
            Ok(())
        }
        fn write_str(&self, s: &str) -> std::io::Result<()> {
            self.write_line(s)
        }
        fn clear_line(&self) -> std::io::Result<()> {
            Ok(())
        }
        fn flush(&self) -> std::io::Result<()> {
            Ok(())
        }
    }

    /// What `style` draws for a bar about `what` at `pos` of `len`.
    fn drawn((style, what): (ProgressStyle, &str), pos: u64, len: u64) -> String {
        let screen = Screen::default();
        let bar = ProgressBar::with_draw_target(
            Some(len),
            ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        bar.set_style(style);
        bar.set_prefix(what.to_string());
        bar.set_position(pos);
        bar.abandon();
        let text = screen.0.lock().unwrap().concat();
        text
    }

    #[test]
    fn a_count_bar_shows_the_count_the_share_done_and_the_time_left() {
        let line = drawn((count_style("simulations"), "validate"), 30, 120);
        assert!(
            line.contains("validate: 30/120 simulations (25%)"),
            "{line}"
        );
        assert!(line.contains(" left]"), "{line}");
    }

    #[test]
    fn a_bytes_bar_shows_the_bytes_read_and_the_share_done() {
        let line = drawn((bytes_style(), "reading x.data"), 3 << 20, 12 << 20);
        assert!(
            line.contains("reading x.data: 3.00 MiB of 12.00 MiB (25%)"),
            "{line}"
        );
        // a file name with braces is shown as it is (in a template it would be a key)
        let line = drawn((bytes_style(), "reading x{a:b}{.data"), 1, 4);
        assert!(line.contains("reading x{a:b}{.data: "), "{line}");
        assert!(line.contains(" left]"), "{line}");
    }

    #[test]
    fn a_duration_bar_shows_the_time_done_the_time_left_and_the_share() {
        let total = Duration::from_secs(60);
        let pos = duration_position(Duration::from_secs(15), total);
        let line = drawn((duration_style(), "recording"), pos, millis(total));
        assert!(
            line.contains("recording: 00:00:15 of 00:01:00 (25%), 00:00:45 left"),
            "{line}"
        );
        // the last progress report comes a little after the duration: the bar stops at its end
        let late = duration_position(Duration::from_millis(60_250), total);
        assert_eq!(late, 60_000);
        let line = drawn((duration_style(), "recording"), late, millis(total));
        assert!(line.contains("(100%), 00:00:00 left"), "{line}");
    }

    #[test]
    fn a_count_bar_without_its_length_yet_is_not_shown_done() {
        let screen = Screen::default();
        let bar = ProgressBar::with_draw_target(
            None,
            ProgressDrawTarget::term_like(Box::new(screen.clone())),
        );
        bar.set_style(count_style("runs"));
        bar.set_prefix("study");
        bar.tick();
        bar.abandon();
        let text = screen.0.lock().unwrap().concat();
        assert!(text.contains("study: 0/0 runs (0%)"), "{text}");
    }
}
