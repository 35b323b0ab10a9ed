//! A host-wide memory budget for plugins: the per-plugin budgets
//! (`slots.rs`) bound each plugin, this bounds their sum, so that the
//! plugins together stay within the container's memory limit less a
//! headroom for the caches and the host itself. The limit is read from
//! the cgroup at start ([`cgroup_memory_limit`]: v2 `memory.max`, v1
//! `memory/memory.limit_in_bytes`); `rekon run --host-memory-budget`
//! overrides it. Every loaded plugin books what it may hold at once (its
//! memory cap × the instances it may run: its declared concurrency within
//! its per-plugin budget); a load whose booking would pass the budget is
//! refused with the numbers (`LoadError::HostMemoryBudget`), and whatever
//! served under that name keeps serving. A booking is given back when the
//! last handle of its plugin version is dropped, or replaced by the next
//! version loaded from the same origin.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Where the cgroup file system is mounted in a container.
pub const CGROUP_ROOT: &str = "/sys/fs/cgroup";

/// Share of the container's limit kept for the caches and the host itself
/// by default (percent).
pub const DEFAULT_HEADROOM_PERCENT: u8 = 40;

/// A cgroup v1 "no limit" is the largest page-aligned i64; anything this
/// large is no limit.
const V1_UNLIMITED: u64 = 1 << 60;

/// The memory limit of the cgroup mounted at `root` (cgroup v2's
/// `memory.max`, else v1's `memory/memory.limit_in_bytes`); `None`: no
/// limit, or no cgroup to read.
#[must_use]
pub fn cgroup_memory_limit(root: &Path) -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string(root.join("memory.max")) {
        return text.trim().parse().ok(); // "max": no limit
    }
    let text = std::fs::read_to_string(root.join("memory/memory.limit_in_bytes")).ok()?;
    text.trim().parse().ok().filter(|n| *n < V1_UNLIMITED)
}

/// The host-wide budget and where it came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMemoryBudget {
    /// Bytes all loaded plugins may book together.
    pub bytes: usize,
    /// How it was decided, for the log and the refusals.
    pub source: String,
}

impl HostMemoryBudget {
    /// The budget: `override_mib` when given, else the cgroup limit under
    /// `cgroup_root` less `headroom_percent` of it; `None` when neither
    /// (no host-wide bound; each plugin is still bound by its own).
    #[must_use]
    pub fn decide(
        override_mib: Option<u64>,
        headroom_percent: u8,
        cgroup_root: &Path,
    ) -> Option<Self> {
        if let Some(mib) = override_mib {
            return Some(Self {
                bytes: usize::try_from(mib << 20).unwrap_or(usize::MAX),
                source: format!("--host-memory-budget {mib} MiB"),
            });
        }
        let limit = cgroup_memory_limit(cgroup_root)?;
        let keep = 100 - u64::from(headroom_percent.min(100));
        let bytes = limit / 100 * keep;
        Some(Self {
            bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
            source: format!(
                "the container's memory limit {} MiB less {headroom_percent}% headroom",
                limit >> 20
            ),
        })
    }
}

/// Why a plugin cannot be booked: what it needs, what others hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OverBudget {
    pub(crate) need: usize,
    pub(crate) booked: usize,
    pub(crate) budget: usize,
    pub(crate) source: String,
}

#[derive(Default)]
struct Booked {
    /// By origin: the booking's id and bytes.
    by_origin: HashMap<String, (u64, usize)>,
}

/// The book of the host-wide budget (none: nothing is refused).
pub(crate) struct HostBook {
    budget: Option<HostMemoryBudget>,
    booked: Mutex<Booked>,
    ids: AtomicU64,
}

/// One plugin version's booking; given back when dropped (unless a newer
/// version of the same origin replaced it).
pub(crate) struct Booking {
    book: Arc<HostBook>,
    origin: String,
    id: u64,
}

impl Drop for Booking {
    fn drop(&mut self) {
        let mut booked = self.book.booked.lock();
        if booked
            .by_origin
            .get(&self.origin)
            .is_some_and(|(id, _)| *id == self.id)
        {
            booked.by_origin.remove(&self.origin);
        }
    }
}

impl HostBook {
    pub(crate) fn new(budget: Option<HostMemoryBudget>) -> Self {
        Self {
            budget,
            booked: Mutex::new(Booked::default()),
            ids: AtomicU64::new(1),
        }
    }

    /// Books `bytes` for the plugin loaded from `origin` (replacing what
    /// an earlier version from there booked).
    ///
    /// # Errors
    /// [`OverBudget`] when the other origins' bookings and `bytes` pass
    /// the budget.
    pub(crate) fn book(
        self: &Arc<Self>,
        origin: &str,
        bytes: usize,
    ) -> Result<Booking, OverBudget> {
        let mut booked = self.booked.lock();
        let others: usize = booked
            .by_origin
            .iter()
            .filter(|(o, _)| *o != origin)
            .map(|(_, (_, b))| *b)
            .sum();
        if let Some(budget) = &self.budget
            && others.saturating_add(bytes) > budget.bytes
        {
            return Err(OverBudget {
                need: bytes,
                booked: others,
                budget: budget.bytes,
                source: budget.source.clone(),
            });
        }
        let id = self.ids.fetch_add(1, Ordering::Relaxed);
        booked.by_origin.insert(origin.to_owned(), (id, bytes));
        Ok(Booking {
            book: Arc::clone(self),
            origin: origin.to_owned(),
            id,
        })
    }

    /// Bytes booked now.
    pub(crate) fn booked(&self) -> usize {
        self.booked.lock().by_origin.values().map(|(_, b)| *b).sum()
    }
}

/// Books what a plugin may hold at once (its memory cap and what one call
/// may copy out of it, × the instances it may run: its declared
/// concurrency within its per-plugin budget) in the host-wide budget.
pub(super) fn book_memory(
    runtime: &Arc<super::runtime::RuntimeInner>,
    origin: &str,
    registration: &crate::action::Registration,
    per_plugin: usize,
) -> Result<Booking, super::LoadError> {
    let instances = registration
        .max_concurrent_reconciles
        .map_or(per_plugin, |n| {
            usize::try_from(n).unwrap_or(usize::MAX).min(per_plugin)
        })
        .max(1);
    // Each instance: its linear memory, and what one call may copy out of
    // it into the host while it is alive (`OutcomeBounds::lift_bytes`).
    let lift = runtime.config.outcome_bounds.lift_bytes();
    let bytes = instances.saturating_mul(runtime.config.memory_limit_bytes.saturating_add(lift));
    runtime.host_book.book(origin, bytes).map_err(|over| {
        tracing::error!(plugin = %registration.name, %origin, need_mib = over.need >> 20, booked_mib = over.booked >> 20, budget_mib = over.budget >> 20, source = %over.source, "plugin refused: the host-wide memory budget is spent; whatever served keeps serving");
        super::LoadError::HostMemoryBudget {
            origin: origin.to_owned(),
            message: format!(
                "it may hold {} MiB ({instances} instances of {} MiB, each with up to {} MiB copied out of it), the plugins loaded hold {} MiB of the host's {} MiB ({})",
                over.need >> 20,
                runtime.config.memory_limit_bytes >> 20,
                lift >> 20,
                over.booked >> 20,
                over.budget >> 20,
                over.source
            ),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cgroup(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().expect("a directory");
        for (path, text) in files {
            let path = dir.path().join(path);
            std::fs::create_dir_all(path.parent().expect("a parent")).expect("mkdir");
            std::fs::write(path, text).expect("written");
        }
        dir
    }

    #[test]
    fn the_limit_comes_from_cgroup_v2_or_v1_and_no_limit_is_none() {
        let v2 = cgroup(&[("memory.max", "536870912\n")]);
        assert_eq!(cgroup_memory_limit(v2.path()), Some(512 << 20));
        let v2_unlimited = cgroup(&[("memory.max", "max\n")]);
        assert_eq!(cgroup_memory_limit(v2_unlimited.path()), None);
        let v1 = cgroup(&[("memory/memory.limit_in_bytes", "1073741824\n")]);
        assert_eq!(cgroup_memory_limit(v1.path()), Some(1 << 30));
        let v1_unlimited = cgroup(&[("memory/memory.limit_in_bytes", "9223372036854771712\n")]);
        assert_eq!(cgroup_memory_limit(v1_unlimited.path()), None);
        let none = cgroup(&[]);
        assert_eq!(cgroup_memory_limit(none.path()), None);
    }

    #[test]
    fn the_budget_is_the_limit_less_headroom_unless_overridden() {
        let v2 = cgroup(&[("memory.max", "1073741824")]);
        let budget = HostMemoryBudget::decide(None, 40, v2.path()).expect("a budget");
        assert_eq!(budget.bytes, (1usize << 30) / 100 * 60);
        assert!(
            budget.source.contains("1024 MiB less 40%"),
            "{}",
            budget.source
        );
        let over = HostMemoryBudget::decide(Some(300), 40, v2.path()).expect("a budget");
        assert_eq!(over.bytes, 300 << 20);
        assert_eq!(HostMemoryBudget::decide(None, 40, cgroup(&[]).path()), None);
    }

    #[test]
    fn bookings_beyond_the_budget_are_refused_and_given_back_when_dropped() {
        let book = Arc::new(HostBook::new(Some(HostMemoryBudget {
            bytes: 600,
            source: "test".into(),
        })));
        let a = book.book("a.wasm", 256).expect("fits");
        let b = book.book("b.wasm", 256).expect("fits");
        let refused = book.book("c.wasm", 256).err().expect("over the budget");
        assert_eq!(
            (refused.need, refused.booked, refused.budget),
            (256, 512, 600)
        );
        // A new version of a booked origin replaces its booking.
        let a2 = book.book("a.wasm", 300).expect("replaces a's 256");
        assert_eq!(book.booked(), 556);
        drop(a); // the old version's handle goes: a2 stays booked
        assert_eq!(book.booked(), 556);
        drop((a2, b));
        assert_eq!(book.booked(), 0);
        assert!(book.book("c.wasm", 256).is_ok());
    }

    #[test]
    fn without_a_budget_nothing_is_refused() {
        let book = Arc::new(HostBook::new(None));
        let held: Vec<_> = (0..10)
            .map(|i| book.book(&format!("{i}.wasm"), 1 << 30).expect("no bound"))
            .collect();
        assert_eq!(held.len(), 10);
    }
}
