//! The crate's one error type. Every message names the syscall or file, the argument or line at
//! fault, the errno where there is one, and what to do about it.

use std::fmt;
use std::path::PathBuf;

/// Everything that can go wrong in `numalab-linux`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kernel refused a syscall. `problem` names the argument at fault as far as it could be
    /// diagnosed; `remedy` says what to do.
    #[error("{syscall}: {problem} ({errname}, errno {errno}): {remedy}")]
    Syscall {
        /// The syscall (or sysfs file) refused.
        syscall: &'static str,
        /// What was wrong, naming the argument at fault.
        problem: String,
        /// The errno.
        errno: i32,
        /// Its symbolic name (EINVAL, ...).
        errname: &'static str,
        /// What to do about it.
        remedy: String,
    },
    /// An argument rejected before calling the kernel, so nothing was applied.
    #[error("{syscall}: {problem}: {remedy}")]
    Argument {
        /// The syscall (or sysfs file) refused.
        syscall: &'static str,
        /// What was wrong, naming the argument at fault.
        problem: String,
        /// What to do about it.
        remedy: String,
    },
    /// A numalab policy that no kernel mode implements (remote percentage).
    #[error("{syscall}: '{policy}' is not a kernel memory policy mode: the kernel has no remote-percentage mode; use numalab's placement runtime (or, on Linux 6.9+, MPOL_WEIGHTED_INTERLEAVE with weights 100-p : p, see reference/policies.md section 5)")]
    NotAKernelPolicy {
        /// The syscall (or sysfs file) refused.
        syscall: &'static str,
        /// The policy, in numalab syntax.
        policy: String,
    },
    /// Malformed text in a sysfs/procfs file.
    #[error(transparent)]
    Parse(#[from] ParseError),
    /// A file could not be read or written.
    #[error("{path}: {source}{hint}", path = path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
        /// Extra advice (empty when there is none), e.g. "writing needs root".
        hint: String,
    },
}

impl Error {
    /// The errno of a failed syscall or I/O operation, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Syscall { errno, .. } => Some(*errno),
            Error::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    pub(crate) fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Error {
        let hint = match source.raw_os_error() {
            Some(libc::EACCES) | Some(libc::EPERM) => {
                ": permission denied (writing sysfs/procfs tunables needs root)".to_string()
            }
            _ => String::new(),
        };
        Error::Io {
            path: path.into(),
            source,
            hint,
        }
    }
}

/// Malformed input: the file, the 1-based line (0 when the whole file is at fault), what was
/// expected and (a prefix of) what was found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The file (its kind, e.g. `numa_maps`, for a pure parser; its path for a reader).
    pub file: String,
    /// 1-based line; 0 when the whole file is at fault.
    pub line: usize,
    /// What was expected there.
    pub expected: String,
    /// What was found (at most 80 characters).
    pub found: String,
}

/// At most this many characters of the offending text go into a message.
const FOUND_MAX_CHARS: usize = 80;

impl ParseError {
    pub(crate) fn new(file: &str, line: usize, expected: impl Into<String>, found: &str) -> Self {
        let mut f: String = found.chars().take(FOUND_MAX_CHARS).collect();
        if found.chars().count() > FOUND_MAX_CHARS {
            f.push_str("...");
        }
        ParseError {
            file: file.to_string(),
            line,
            expected: expected.into(),
            found: f,
        }
    }

    /// Replace the file name (a pure parser only knows the file's kind) with its full path.
    pub fn in_file(mut self, path: impl fmt::Display) -> Self {
        self.file = path.to_string();
        self
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line > 0 {
            write!(f, "{}:{}: ", self.file, self.line)?;
        } else {
            write!(f, "{}: ", self.file)?;
        }
        write!(f, "expected {}, found '{}'", self.expected, self.found)
    }
}

impl std::error::Error for ParseError {}

/// The symbolic name of an errno, for messages (strerror's text is added by callers).
pub fn errno_name(errno: i32) -> &'static str {
    match errno {
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ESRCH => "ESRCH",
        libc::EINTR => "EINTR",
        libc::EIO => "EIO",
        libc::E2BIG => "E2BIG",
        libc::ENOMEM => "ENOMEM",
        libc::EACCES => "EACCES",
        libc::EFAULT => "EFAULT",
        libc::EBUSY => "EBUSY",
        libc::EXDEV => "EXDEV",
        libc::ENODEV => "ENODEV",
        libc::EINVAL => "EINVAL",
        libc::ENOSPC => "ENOSPC",
        libc::ENOSYS => "ENOSYS",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        _ => "errno",
    }
}
