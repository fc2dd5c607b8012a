//! `numalab migrate`: which pages move where, decided from a query of their current nodes.
//! The syscalls (move_pages query and move, migrate_pages) are in `migrate.rs`; this file is
//! the pure part, so selection and accounting are tested without a multi-node kernel.

use numalab_core::{NodeId, NodeMask};
use serde::Serialize;
use thiserror::Error;

pub const PAGE_BYTES: u64 = 4096;

#[derive(Debug, Error, PartialEq)]
pub enum PlanError {
    #[error("--range '{0}': expected START-END in hex as /proc/PID/maps prints it (e.g. 7f1c2a000000-7f1c2a400000)")]
    RangeSyntax(String),
    #[error("--range '{0}': END must be above START")]
    RangeEmpty(String),
    #[error("--fraction {0}: expected a number in (0, 1]")]
    Fraction(f64),
}

/// Parse `START-END` in hex (with or without 0x), the format of /proc/PID/maps; the range is
/// widened to whole pages.
pub fn parse_range(s: &str) -> Result<(u64, u64), PlanError> {
    let err = || PlanError::RangeSyntax(s.to_string());
    let (a, b) = s.trim().split_once('-').ok_or_else(err)?;
    let hex = |t: &str| {
        let t = t.trim();
        let t = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        u64::from_str_radix(t, 16).map_err(|_| err())
    };
    let (start, end) = (hex(a)?, hex(b)?);
    if end <= start {
        return Err(PlanError::RangeEmpty(s.to_string()));
    }
    Ok((
        start & !(PAGE_BYTES - 1),
        end.div_ceil(PAGE_BYTES) * PAGE_BYTES,
    ))
}

pub fn check_fraction(f: f64) -> Result<f64, PlanError> {
    if f > 0.0 && f <= 1.0 {
        Ok(f)
    } else {
        Err(PlanError::Fraction(f))
    }
}

/// What the user selected.
#[derive(Clone, Debug, PartialEq)]
pub struct Selection {
    pub to: NodeMask,
    /// Only pages currently on these nodes (None: any node).
    pub from: Option<NodeMask>,
    /// Only pages in `[start, end)`.
    pub range: Option<(u64, u64)>,
    /// Only this share of the selected pages, picked by a stable hash of the address.
    pub fraction: Option<f64>,
}

/// Stable per-page hash in [0, 1): the same pages are picked on every run.
fn page_unit(addr: u64) -> f64 {
    let mut z = (addr / PAGE_BYTES).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
}

/// The outcome of one page, the categories of the report.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Moved,
    AlreadyThere,
    Busy,
    NotPresent,
    Denied,
    Failed,
}

/// The moves for pages `(addr, current node or None if not present)` in address order:
/// each selected page goes to the nodes of `to` round robin by page index (as
/// MPOL_INTERLEAVE spreads them), and a page already on a node of `to` stays.
/// Returns the moves and the outcome of the pages that need no move.
pub fn plan(sel: &Selection, pages: &[(u64, Option<NodeId>)]) -> (Vec<(u64, NodeId)>, Counts) {
    let targets: Vec<NodeId> = sel.to.iter().collect();
    let mut counts = Counts::default();
    let mut moves = Vec::new();
    for &(addr, node) in pages {
        if let Some((s, e)) = sel.range {
            if addr < s || addr >= e {
                continue;
            }
        }
        let Some(node) = node else {
            // Unpopulated pages are reported only when no node filter applies: with --from
            // they are not on a from-node, so they are not selected.
            if sel.from.is_none() && !matches!(sel.fraction, Some(f) if page_unit(addr) >= f) {
                counts.add(Outcome::NotPresent);
            }
            continue;
        };
        if let Some(from) = sel.from {
            if !from.contains(node) {
                continue;
            }
        }
        if let Some(f) = sel.fraction {
            if page_unit(addr) >= f {
                continue;
            }
        }
        if sel.to.contains(node) {
            counts.add(Outcome::AlreadyThere);
            continue;
        }
        let target = targets[((addr / PAGE_BYTES) % targets.len() as u64) as usize];
        moves.push((addr, target));
    }
    (moves, counts)
}

/// Pages per outcome.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Counts {
    pub moved: u64,
    pub already_there: u64,
    pub busy: u64,
    pub not_present: u64,
    pub denied: u64,
    pub failed: u64,
}

impl Counts {
    pub fn add(&mut self, o: Outcome) {
        match o {
            Outcome::Moved => self.moved += 1,
            Outcome::AlreadyThere => self.already_there += 1,
            Outcome::Busy => self.busy += 1,
            Outcome::NotPresent => self.not_present += 1,
            Outcome::Denied => self.denied += 1,
            Outcome::Failed => self.failed += 1,
        }
    }

    pub fn total(&self) -> u64 {
        self.moved + self.already_there + self.busy + self.not_present + self.denied + self.failed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(i: u16) -> Option<NodeId> {
        Some(NodeId(i))
    }

    #[test]
    fn ranges_parse_as_maps_prints_them() {
        assert_eq!(parse_range("7f00-7f2000"), Ok((0x7000, 0x7f2000)));
        assert_eq!(parse_range("0x1000-0x1001"), Ok((0x1000, 0x2000)));
        assert!(matches!(
            parse_range("1000"),
            Err(PlanError::RangeSyntax(_))
        ));
        assert!(matches!(
            parse_range("zz-1000"),
            Err(PlanError::RangeSyntax(_))
        ));
        assert!(matches!(
            parse_range("2000-1000"),
            Err(PlanError::RangeEmpty(_))
        ));
        assert!(
            check_fraction(0.0).is_err()
                && check_fraction(1.5).is_err()
                && check_fraction(f64::NAN).is_err()
        );
        assert_eq!(check_fraction(0.25), Ok(0.25));
    }

    #[test]
    fn from_range_and_targets() {
        let pages: Vec<(u64, Option<NodeId>)> = vec![
            (0x1000, n(0)),
            (0x2000, n(1)),
            (0x3000, n(2)),
            (0x4000, None),
            (0x5000, n(0)),
            (0x6000, n(0)),
        ];
        let to = NodeMask::from_nodes([NodeId(2), NodeId(3)]);
        let sel = Selection {
            to,
            from: None,
            range: None,
            fraction: None,
        };
        let (moves, c) = plan(&sel, &pages);
        // Round robin by page index over {2, 3}: page 1 -> 3, page 5 -> 3, page 6 -> 2.
        assert_eq!(
            moves,
            vec![
                (0x1000, NodeId(3)),
                (0x2000, NodeId(2)),
                (0x5000, NodeId(3)),
                (0x6000, NodeId(2))
            ]
        );
        assert_eq!(
            c,
            Counts {
                already_there: 1,
                not_present: 1,
                ..Default::default()
            }
        );

        let sel = Selection {
            to: NodeMask::single(NodeId(3)),
            from: Some(NodeMask::single(NodeId(0))),
            range: Some((0x2000, 0x6000)),
            fraction: None,
        };
        let (moves, c) = plan(&sel, &pages);
        assert_eq!(moves, vec![(0x5000, NodeId(3))]);
        assert_eq!(c.total(), 0);
    }

    #[test]
    fn fraction_is_stable_and_close() {
        let pages: Vec<(u64, Option<NodeId>)> =
            (0..50_000u64).map(|i| (i * PAGE_BYTES, n(0))).collect();
        let sel = Selection {
            to: NodeMask::single(NodeId(1)),
            from: None,
            range: None,
            fraction: Some(0.3),
        };
        let (a, _) = plan(&sel, &pages);
        let (b, _) = plan(&sel, &pages);
        assert_eq!(a, b, "the same pages on every run");
        let share = a.len() as f64 / pages.len() as f64;
        assert!((share - 0.3).abs() < 0.01, "{share}");
        // A larger fraction is a superset: re-running with 0.5 moves only the difference.
        let sel5 = Selection {
            fraction: Some(0.5),
            ..sel
        };
        let (c, _) = plan(&sel5, &pages);
        assert!(a.iter().all(|m| c.contains(m)));
    }
}
