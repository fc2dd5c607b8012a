//! Where the readers find `/sys` and `/proc`: the real root, or a recorded tree in tests.

use crate::error::Error;
use std::fmt;
use std::path::{Path, PathBuf};

/// A path prefix under which `sys/...` and `proc/...` are looked up. `SysRoot::host()` is `/`;
/// tests point it at a recorded tree such as `tests/data/host-1node-6.18`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysRoot {
    root: PathBuf,
}

impl Default for SysRoot {
    fn default() -> Self {
        SysRoot::host()
    }
}

impl SysRoot {
    /// The running system.
    pub fn host() -> Self {
        SysRoot {
            root: PathBuf::from("/"),
        }
    }

    /// A recorded tree (its `sys/` and `proc/` directories sit directly under `root`).
    pub fn new(root: impl Into<PathBuf>) -> Self {
        SysRoot { root: root.into() }
    }

    /// The prefix itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `rel` (written without a leading `/`, e.g. `sys/devices/system/node/online`) under the root.
    pub fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel.trim_start_matches('/'))
    }

    /// Read a file that must exist. Invalid UTF-8 (a file name in numa_maps or smaps may hold
    /// any bytes) becomes U+FFFD rather than an error.
    pub fn read(&self, rel: &str) -> Result<String, Error> {
        let p = self.path(rel);
        match std::fs::read(&p) {
            Ok(b) => Ok(String::from_utf8_lossy(&b).into_owned()),
            Err(e) => Err(Error::io(p, e)),
        }
    }

    /// Read a file that older kernels or other configurations may lack: `Ok(None)` when absent.
    pub fn read_optional(&self, rel: &str) -> Result<Option<String>, Error> {
        let p = self.path(rel);
        match std::fs::read(&p) {
            Ok(b) => Ok(Some(String::from_utf8_lossy(&b).into_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(p, e)),
        }
    }

    /// Write a tunable (sysfs/procfs files take the whole value in one write).
    pub fn write(&self, rel: &str, value: &str) -> Result<(), Error> {
        let p = self.path(rel);
        std::fs::write(&p, value).map_err(|e| Error::io(p, e))
    }

    /// Names of the entries of a directory, sorted; `Ok(None)` when it does not exist.
    pub fn list_dir(&self, rel: &str) -> Result<Option<Vec<String>>, Error> {
        let p = self.path(rel);
        let rd = match std::fs::read_dir(&p) {
            Ok(rd) => rd,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(p, e)),
        };
        let mut names = Vec::new();
        for ent in rd {
            let ent = ent.map_err(|e| Error::io(&p, e))?;
            if let Some(n) = ent.file_name().to_str() {
                names.push(n.to_string());
            }
        }
        names.sort();
        Ok(Some(names))
    }
}

/// A process id as the NUMA syscalls take it; `Pid::SELF` (0) is the calling process.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub struct Pid(pub libc::pid_t);

impl Pid {
    /// The calling process (the kernel's convention for pid 0).
    pub const SELF: Pid = Pid(0);

    /// The calling process's real pid.
    pub fn current() -> Pid {
        Pid(std::process::id() as libc::pid_t)
    }

    /// The `/proc` directory name: `self` for `Pid::SELF`.
    pub fn proc_dir(self) -> String {
        if self.0 == 0 {
            "self".to_string()
        } else {
            self.0.to_string()
        }
    }
}

impl fmt::Display for Pid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0 == 0 {
            f.write_str("the calling process")
        } else {
            write!(f, "pid {}", self.0)
        }
    }
}
