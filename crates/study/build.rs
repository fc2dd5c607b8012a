// The commit numalab is built from, for the study's environment snapshot (none outside git).
fn main() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    for p in [".git/HEAD", ".git/refs/heads", ".git/packed-refs"] {
        println!("cargo:rerun-if-changed={}", root.join(p).display());
    }
    let out = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(&root)
        .output();
    if let Ok(o) = out {
        let commit = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if o.status.success() && !commit.is_empty() {
            println!("cargo:rustc-env=NUMALAB_COMMIT={commit}");
        }
    }
}
