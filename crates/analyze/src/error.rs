//! The one error of this crate: which file, and what is wrong with it.

use std::fmt;
use std::path::{Path, PathBuf};

/// An error reading or writing a sample file; `path` is the file concerned (empty for an
/// in-memory source), `what` says what was wrong and, where it helps, what was expected.
#[derive(Debug)]
pub struct Error {
    pub path: PathBuf,
    pub what: String,
}

impl Error {
    pub fn new(path: impl AsRef<Path>, what: impl Into<String>) -> Error {
        Error {
            path: path.as_ref().to_path_buf(),
            what: what.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.path.as_os_str().is_empty() {
            f.write_str(&self.what)
        } else {
            write!(f, "{}: {}", self.path.display(), self.what)
        }
    }
}

impl std::error::Error for Error {}
