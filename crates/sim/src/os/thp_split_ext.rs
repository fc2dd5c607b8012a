//! The THP false-sharing split extension (reference/policies.md §3, Gachod): on a qualifying
//! hint fault on a transparent huge page, split it and let the 4 KiB subpages be placed one by
//! one. Four independent toggles: `split`, `reapply`, `reset`, `migrate`. numalab's default
//! trigger is *real sharing* (the previous hint fault came from another node) and the split
//! path records the fault as the unsplit path would [fix].

use super::numa_balancing::{Cpupid, HintFault, HintOutcome, NumaBalancing, Tnf};
use super::pagetable::{PageTable, Pte};
use super::Os;
use numalab_core::PageSize;
use serde::{Deserialize, Serialize};

/// When a hint fault on a THP splits it.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SplitTrigger {
    /// The previous hint fault on the THP came from another node than this one [nl].
    #[default]
    Sharing,
    /// Any fault from a node other than the THP's (the final prototype).
    Remote,
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThpSplitParams {
    /// Split a THP on a qualifying hint fault instead of judging the whole folio.
    pub split: bool,
    /// Re-protect every subpage after the split (all but the faulting one).
    pub reapply: bool,
    /// Every subpage's next hint fault migrates it at once (bypasses §2.5).
    pub reset: bool,
    /// Migrate the faulting subpage to the faulting node before returning.
    pub migrate: bool,
    pub trigger: SplitTrigger,
}

/// Keys of the extension inside a `numa-balancing:...` spec.
pub const KEYS: &[&str] = &[
    "thp_split",
    "thp_reapply",
    "thp_reset",
    "thp_migrate",
    "thp_split_all",
    "thp_split_trigger",
];

impl ThpSplitParams {
    /// All four toggles (the thesis' `all` configuration).
    pub fn all() -> ThpSplitParams {
        ThpSplitParams {
            split: true,
            reapply: true,
            reset: true,
            migrate: true,
            trigger: SplitTrigger::Sharing,
        }
    }

    /// Set one key; Ok(false) when the key is not the extension's.
    pub fn set(&mut self, k: &str, v: &str) -> Result<bool, String> {
        let b = || match v {
            "1" | "true" | "on" | "yes" => Ok(true),
            "0" | "false" | "off" | "no" => Ok(false),
            _ => Err(format!("'{k}={v}' expects 1/0, true/false, on/off")),
        };
        match k {
            "thp_split" => self.split = b()?,
            "thp_reapply" => self.reapply = b()?,
            "thp_reset" => self.reset = b()?,
            "thp_migrate" => self.migrate = b()?,
            "thp_split_all" => {
                let on = b()?;
                (self.split, self.reapply, self.reset, self.migrate) = (on, on, on, on);
            }
            "thp_split_trigger" => {
                self.trigger = match v {
                    "sharing" => SplitTrigger::Sharing,
                    "remote" => SplitTrigger::Remote,
                    _ => return Err(format!("'{k}={v}': expected sharing (default) or remote")),
                }
            }
            _ => return Ok(false),
        }
        Ok(true)
    }
}

/// The §3 fault path for a hint fault on a THP; None = not triggered, take the normal path.
#[allow(clippy::too_many_arguments)]
pub(super) fn huge_hint_fault(
    nb: &mut NumaBalancing,
    os: &mut Os,
    f: &HintFault,
    p: usize,
    sp: &ThpSplitParams,
    fs: u64,
    pte: Pte,
    last: Cpupid,
    flags: Tnf,
    out: &mut HintOutcome,
) -> Option<HintOutcome> {
    if !sp.split {
        return None;
    }
    let t_nid = pte.node();
    let cn = f.nid;
    let triggered = match sp.trigger {
        SplitTrigger::Sharing => !last.pid_unset() && nb.cpu_node_of(last.cpu()) != cn,
        SplitTrigger::Remote => cn != t_nid,
    };
    if !triggered {
        return None;
    }
    // anonymous THPs are always splittable here (hugetlb mappings are never scanned)
    os.split(fs)?;
    out.ns += nb.split_cost_ns();
    out.invalidate.push((fs, PageSize::Huge2M));
    let head = PageTable::index(fs);
    // subpages inherit the head's last_cpupid, as the kernel copies it into tail pages
    nb.set_cpupid_range(head, 512, last);
    let fa = PageSize::Base4K.align_down(f.addr);
    if sp.reapply {
        let mut n = 0;
        for i in 0..512u64 {
            let a = fs + (i << 12);
            if a != fa {
                os.pt.set_prot_none(a, PageSize::Base4K, true);
                n += 1;
            }
        }
        os.vm.numa_pte_updates += n;
    }
    if sp.reset {
        nb.set_force_migrate_range(head, 512, true);
    }
    if sp.migrate && cn != t_nid {
        let sub = os.pt.get(fa);
        if nb.migrate_misplaced(os, fa, sub, cn, out) {
            nb.set_force_migrate_range(PageTable::index(fa), 1, false);
            nb.tasks[p].numa_pages_migrated += 1;
        }
    }
    // [fix] accounted as the unsplit path would: the THP's node, 512 pages, same flags
    nb.task_numa_fault(os, p, last, t_nid, 512, flags, f.now_ns * 1e-6);
    Some(std::mem::take(out))
}
