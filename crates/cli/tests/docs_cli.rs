//! `numalab completions` and `numalab man`: generated from the parser's own definition, so
//! every subcommand and option appears in them.

use std::process::Command;

fn numalab(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_numalab"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn completion_scripts_name_every_subcommand_and_their_options() {
    for shell in ["bash", "zsh", "fish"] {
        let out = numalab(&["completions", shell]);
        assert!(out.status.success(), "{shell}: {:?}", out);
        let script = String::from_utf8(out.stdout).unwrap();
        for word in ["sim", "validate", "migrate", "epoch-us", "expect-passing"] {
            assert!(script.contains(word), "{shell} script lacks {word}");
        }
    }
    let bad = numalab(&["completions", "tcsh"]);
    assert!(!bad.status.success());
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("tcsh") && err.contains("bash"), "{err}");
}

#[test]
fn man_pages_are_written_for_every_subcommand() {
    let dir = std::env::temp_dir().join(format!("numalab-man-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let out = numalab(&["man", "--out", dir.to_str().unwrap()]);
    assert!(out.status.success(), "{:?}", out);
    for page in [
        "numalab.1",
        "numalab-sim.1",
        "numalab-machine-show.1",
        "numalab-validate.1",
    ] {
        let text =
            std::fs::read_to_string(dir.join(page)).unwrap_or_else(|e| panic!("{page}: {e}"));
        assert!(text.contains(".TH"), "{page} is not roff");
    }
    let sim = std::fs::read_to_string(dir.join("numalab-sim.1")).unwrap();
    assert!(sim.contains("epoch\\-us"), "the sim page lists its options");
    // no temporary files left behind
    assert!(std::fs::read_dir(&dir).unwrap().all(|e| e
        .unwrap()
        .file_name()
        .to_string_lossy()
        .ends_with(".1")));
    std::fs::remove_dir_all(&dir).unwrap();

    // --out naming a file is refused, and the file is left as it was
    let file = std::env::temp_dir().join(format!("numalab-man-file-{}", std::process::id()));
    std::fs::write(&file, b"keep").unwrap();
    let out = numalab(&["man", "--out", file.to_str().unwrap()]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a directory"), "{err}");
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
    std::fs::remove_file(&file).unwrap();
}
