//! The built-in machines of reference/machines.md §1. Each is a TOML file under
//! `crates/machine/presets/`, embedded in the binary and parsed by the same loader as user
//! files, so every preset exercises the format and a user can copy one as a starting point.

use crate::{format, Machine};

/// (id, file text), in the order of reference/machines.md §1.
const PRESETS: &[(&str, &str)] = &[
    (
        "opteron6164he-4n",
        include_str!("../presets/opteron6164he-4n.toml"),
    ),
    (
        "opteron6272-8n",
        include_str!("../presets/opteron6272-8n.toml"),
    ),
    (
        "opteron8347he-4n",
        include_str!("../presets/opteron8347he-4n.toml"),
    ),
    (
        "xeon-x5650-2n",
        include_str!("../presets/xeon-x5650-2n.toml"),
    ),
    (
        "xeon-e5-2699v4-2n",
        include_str!("../presets/xeon-e5-2699v4-2n.toml"),
    ),
    (
        "xeon-e5-2699v4-2n-vm",
        include_str!("../presets/xeon-e5-2699v4-2n-vm.toml"),
    ),
    (
        "xeon-gold6130-2n",
        include_str!("../presets/xeon-gold6130-2n.toml"),
    ),
    (
        "xeon-gold6130-4n",
        include_str!("../presets/xeon-gold6130-4n.toml"),
    ),
    (
        "xeon-gold6140-2n",
        include_str!("../presets/xeon-gold6140-2n.toml"),
    ),
    (
        "xeon-platinum8180-2n",
        include_str!("../presets/xeon-platinum8180-2n.toml"),
    ),
    (
        "xeon-clx24-2n",
        include_str!("../presets/xeon-clx24-2n.toml"),
    ),
    (
        "xeon-e5-2699v3-2n",
        include_str!("../presets/xeon-e5-2699v3-2n.toml"),
    ),
    (
        "xeon-e5520-2n",
        include_str!("../presets/xeon-e5520-2n.toml"),
    ),
];

/// Ids of every built-in preset, in the order of reference/machines.md §1.
pub fn preset_ids() -> Vec<&'static str> {
    PRESETS.iter().map(|(id, _)| *id).collect()
}

/// A built-in preset by id; None for an unknown id (see [`crate::load`] for an error that
/// lists the ids).
///
/// Presets are parsed on each call (a few hundred microseconds) rather than cached, so a
/// preset may itself start from another one (`base = "..."`) without re-entering a cache.
pub fn preset(id: &str) -> Option<Machine> {
    let (id, text) = PRESETS.iter().find(|(p, _)| *p == id)?;
    let origin = format!("preset '{id}' (crates/machine/presets/{id}.toml)");
    match format::parse_str(text, &origin, None) {
        Ok(m) => Some(m),
        // The presets are part of the crate and tested; a failure here is a bug in a file.
        Err(e) => panic!("built-in preset is invalid: {e}"),
    }
}

/// Every built-in preset, parsed.
pub fn presets() -> Vec<Machine> {
    preset_ids().into_iter().filter_map(preset).collect()
}
