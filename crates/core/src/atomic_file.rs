//! Whole files or none: every output is written under a temporary name beside its target and
//! renamed into place only when complete, so that a failure (an error, a full disk, Ctrl-C)
//! never leaves a partial file where a user expects a complete one (rename is atomic within a
//! file system).

use std::path::{Path, PathBuf};

/// The temporary name used for `p`: hidden, beside it, unique per process and per thread (a
/// study writes many files at once from a thread pool).
fn temp_path(p: &Path) -> PathBuf {
    let dir = p
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = p
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let thread = format!("{:?}", std::thread::current().id());
    let thread: String = thread.chars().filter(char::is_ascii_digit).collect();
    dir.join(format!(".{name}.{}-{thread}.tmp", std::process::id()))
}

/// Run `write` on a temporary path beside `p` and rename the result into place when it
/// succeeds; when it fails, remove the temporary file and leave `p` as it was (absent, or the
/// previous complete file).
pub fn with_temp<T, E: From<std::io::Error>>(
    p: &Path,
    write: impl FnOnce(&Path) -> Result<T, E>,
) -> Result<T, E> {
    let tmp = temp_path(p);
    let written = write(&tmp).and_then(|v| {
        std::fs::rename(&tmp, p)
            .map_err(|e| {
                E::from(std::io::Error::new(
                    e.kind(),
                    format!("writing {}: {e}", p.display()),
                ))
            })
            .map(|_| v)
    });
    if written.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    written
}

/// Write `bytes` to `p` whole or not at all.
pub fn write_atomic(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    with_temp(p, |tmp| {
        std::fs::write(tmp, bytes)
            .map_err(|e| std::io::Error::new(e.kind(), format!("writing {}: {e}", p.display())))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_leaves_the_previous_file_and_no_temporary() {
        let dir = std::env::temp_dir().join(format!("numalab-atomic-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("out.txt");
        write_atomic(&p, b"complete").unwrap();
        let r: Result<(), std::io::Error> = with_temp(&p, |tmp| {
            std::fs::write(tmp, b"half")?;
            Err(std::io::Error::other("disk full"))
        });
        assert!(r.is_err());
        assert_eq!(std::fs::read(&p).unwrap(), b"complete");
        let left: Vec<_> = std::fs::read_dir(&dir).unwrap().flatten().collect();
        assert_eq!(left.len(), 1, "only out.txt remains: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
