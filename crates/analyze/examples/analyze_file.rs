//! Analyse a perf.data or numalab sample file and print the text report:
//! `cargo run -p numalab-analyze --example analyze_file -- FILE [--json]`.

use numalab_analyze::perf::{PerfOptions, PerfReader};
use numalab_analyze::{analyze, render_text, Options, SampleReader, SampleSource};

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let Some(path) = args.get(1) else {
        eprintln!("usage: analyze_file FILE [--json]");
        std::process::exit(2);
    };
    let mut source: Box<dyn SampleSource> = if numalab_analyze::perf::is_perf_file(path) {
        Box::new(PerfReader::open(path, PerfOptions::default()).unwrap_or_else(|e| fail(e)))
    } else {
        Box::new(SampleReader::open(path).unwrap_or_else(|e| fail(e)))
    };
    let report = analyze(source.as_mut(), &Options::default()).unwrap_or_else(|e| fail(e));
    if args.iter().any(|a| a == "--json") {
        println!(
            "{}",
            serde_json::to_string_pretty(&report).expect("report serialises")
        );
    } else {
        print!("{}", render_text(&report));
    }
}

fn fail(e: numalab_analyze::Error) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1)
}
