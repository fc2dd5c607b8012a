//! Folios being migrated: the kernel's migration entries (mm/migrate.c).
//!
//! Linux migrates a folio by locking it, replacing its page-table entries with migration
//! entries, copying it and mapping the copy. A thread that touches the folio meanwhile faults
//! and sleeps in `migration_entry_wait` until the copy is mapped. Here a migrated folio keeps
//! a `MIGRATING` page-table flag (which sends its references to the slow path) and a window
//! of simulated time `[from_ns, until_ns)` in which its copy runs: a touch inside the window
//! waits for `until_ns`; a touch before it (the migrating thread has not reached this folio
//! yet) or after it does not wait. Windows are dropped, and their flags cleared, at the first
//! epoch end past them (docs/model.md, "Migration").

use std::collections::HashMap;

use numalab_core::PageSize;

/// When one folio's copy runs, ns of simulated time.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct CopyWindow {
    pub size: PageSize,
    pub from_ns: f64,
    pub until_ns: f64,
}

impl CopyWindow {
    /// How long a touch at `now_ns` waits for the copy (0 outside the window).
    pub fn wait_ns(&self, now_ns: f64) -> f64 {
        if now_ns >= self.from_ns && now_ns < self.until_ns {
            self.until_ns - now_ns
        } else {
            0.0
        }
    }
}

/// The folios under migration entries, by folio start.
#[derive(Default)]
pub struct MigrationEntries {
    windows: HashMap<u64, CopyWindow>,
}

impl MigrationEntries {
    pub fn is_empty(&self) -> bool {
        self.windows.is_empty()
    }

    /// Note that the folio at `start` is copied during `window` (a later migration of the
    /// same folio replaces the earlier window).
    pub fn insert(&mut self, start: u64, window: CopyWindow) {
        self.windows.insert(start, window);
    }

    /// The window of the folio holding `addr`, if one is being migrated. A folio split
    /// since it was marked is found under the start it had.
    pub fn window(&self, addr: u64) -> Option<CopyWindow> {
        [PageSize::Base4K, PageSize::Huge2M, PageSize::Giant1G]
            .into_iter()
            .find_map(|size| {
                self.windows
                    .get(&size.align_down(addr))
                    .filter(|w| w.size == size)
                    .copied()
            })
    }

    /// Drop the windows that ended by `now_ns`; returns the folios whose flags to clear.
    pub fn expire(&mut self, now_ns: f64) -> Vec<(u64, PageSize)> {
        let mut done = Vec::new();
        self.windows.retain(|&start, w| {
            let over = w.until_ns <= now_ns;
            if over {
                done.push((start, w.size));
            }
            !over
        });
        done.sort_unstable_by_key(|d| d.0);
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_touch_waits_only_inside_the_copy_window() {
        let w = CopyWindow {
            size: PageSize::Huge2M,
            from_ns: 100.0,
            until_ns: 300.0,
        };
        assert_eq!(w.wait_ns(50.0), 0.0);
        assert_eq!(w.wait_ns(100.0), 200.0);
        assert_eq!(w.wait_ns(250.0), 50.0);
        assert_eq!(w.wait_ns(300.0), 0.0);
    }

    #[test]
    fn windows_are_found_from_any_address_of_the_folio_and_expire() {
        let mut m = MigrationEntries::default();
        let huge = 1u64 << 33;
        m.insert(
            huge,
            CopyWindow {
                size: PageSize::Huge2M,
                from_ns: 0.0,
                until_ns: 10.0,
            },
        );
        m.insert(
            huge + (4 << 20),
            CopyWindow {
                size: PageSize::Base4K,
                from_ns: 0.0,
                until_ns: 30.0,
            },
        );
        assert!(m.window(huge + 12345).is_some());
        assert!(m.window(huge + (4 << 20) + 100).is_some());
        assert!(m.window(huge + (4 << 20) + 8192).is_none());
        assert_eq!(m.expire(20.0), vec![(huge, PageSize::Huge2M)]);
        assert!(m.window(huge).is_none());
        assert!(!m.is_empty());
        assert_eq!(m.expire(30.0).len(), 1);
        assert!(m.is_empty());
    }
}
