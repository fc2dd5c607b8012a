//! The one error type of this crate. Every variant names where the problem is (a file, a
//! preset, a machine id) and, for a bad figure, the key of the TOML format and what it expects.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum MachineError {
    /// A file could not be read. The OS error is part of the message and not a `source`, so
    /// that a report printing the whole chain (`{:#}`) says it once.
    #[error("cannot read {}: {err}", path.display())]
    Io { path: PathBuf, err: std::io::Error },

    /// TOML or XML that does not parse, or TOML with unknown keys or wrong value types. The
    /// message comes from the parser and points at the line and key.
    #[error("{origin}: {message}")]
    Parse { origin: String, message: String },

    /// A figure or a structure that is present but wrong (or missing where required).
    #[error("{origin}: `{key}`: {problem}; expected {expected}")]
    Invalid {
        origin: String,
        key: String,
        problem: String,
        expected: String,
    },

    /// An hwloc XML file that parses but cannot make a machine.
    #[error("{origin}: {problem}")]
    Hwloc { origin: String, problem: String },

    /// A name that is neither a preset id nor a .toml / .xml path.
    #[error(
        "unknown machine '{name}': it is not a built-in preset id and not a path ending in .toml \
         or .xml. Built-in presets: {}. A path to a machine file (.toml, see \
         docs/machine-format.md) or to an hwloc topology (.xml, from `lstopo --of xml`) is also \
         accepted",
        presets.join(", ")
    )]
    Unknown { name: String, presets: Vec<String> },
}
