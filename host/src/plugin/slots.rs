//! Instance slots reserved per plugin: the runtime's pool holds a fixed
//! number of live instances (`RuntimeConfig::max_concurrent_instances`),
//! and without a book one plugin declaring the whole pool as its
//! concurrency, spinning or sleeping on that many objects, left none for
//! its neighbours (their calls failed with wasmtime's "maximum concurrent
//! limit ... reached"). Here every plugin the runtime has served keeps a
//! reserve of slots the others cannot take: a plugin gets a slot only when
//! what stays free still covers every other plugin's unmet reserve. The
//! reserve is `RESERVE` slots, less when the plugins are too many for the
//! pool (`total / plugins`, so the reserves never exceed it). A call
//! waits for its slot at most its deadline, then fails with
//! `CallError::NoSlot`, counted as contained (`InstanceSlots`).
//!
//! Written here rather than with a semaphore per plugin: the rule couples
//! the plugins (one's grant depends on the others' use), which one
//! counting lock and a condition variable state directly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use super::containment::Containment;
use super::error::CallError;

/// Slots each plugin keeps for itself, when the pool is large enough.
pub const RESERVE: usize = 2;

#[derive(Default)]
struct Use {
    /// Slots in use, per plugin (every plugin served so far has an entry).
    by_plugin: HashMap<Arc<str>, usize>,
    /// Most slots a plugin holds at once, where narrower than the book's
    /// (its own memory budget: `limits.rs`).
    caps: HashMap<Arc<str>, usize>,
    total: usize,
}

/// The book of a runtime's instance slots.
pub(crate) struct Slots {
    capacity: usize,
    /// Most slots one plugin holds at once (its memory budget).
    per_plugin: usize,
    used: Mutex<Use>,
    freed: Condvar,
}

/// A slot held for one call (or session); given back when dropped.
pub(crate) struct Slot {
    book: Arc<Slots>,
    plugin: Arc<str>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut used = self.book.used.lock();
        if let Some(n) = used.by_plugin.get_mut(&self.plugin) {
            *n = n.saturating_sub(1);
        }
        used.total = used.total.saturating_sub(1);
        drop(used);
        self.book.freed.notify_all();
    }
}

impl Slots {
    /// A book of `capacity` slots, at most `per_plugin` for one plugin.
    pub(crate) fn new(capacity: usize, per_plugin: usize) -> Self {
        Self {
            capacity: capacity.max(1),
            per_plugin: per_plugin.max(1),
            used: Mutex::new(Use::default()),
            freed: Condvar::new(),
        }
    }

    /// Most slots one plugin holds at once.
    pub(crate) fn per_plugin(&self) -> usize {
        self.per_plugin
    }

    /// Whether `plugin` may take one more slot now.
    fn grantable(&self, used: &Use, plugin: &str) -> bool {
        let cap = used.caps.get(plugin).copied().unwrap_or(self.per_plugin);
        if used.total >= self.capacity || used.by_plugin.get(plugin).copied().unwrap_or(0) >= cap {
            return false;
        }
        let plugins = used.by_plugin.len().max(1);
        let reserve = RESERVE.min(self.capacity / plugins);
        let others_unmet: usize = used
            .by_plugin
            .iter()
            .filter(|(name, _)| &***name != plugin)
            .map(|(_, n)| reserve.saturating_sub(*n))
            .sum();
        self.capacity - used.total > others_unmet
    }

    /// Book `plugin` (loaded, maybe not called yet): its reserve holds
    /// from now on, so a neighbour already taking the pool leaves it room.
    /// It holds at most `instances` slots at once (its memory budget).
    pub(crate) fn know(&self, plugin: &Arc<str>, instances: usize) {
        let mut used = self.used.lock();
        used.by_plugin.entry(Arc::clone(plugin)).or_insert(0);
        if instances < self.per_plugin {
            used.caps.insert(Arc::clone(plugin), instances.max(1));
        } else {
            used.caps.remove(plugin);
        }
    }

    /// A slot for `plugin`, waiting at most `wait` for one.
    ///
    /// # Errors
    /// How many slots `plugin` and all plugins held when `wait` ran out.
    pub(crate) fn take(
        self: &Arc<Self>,
        plugin: &Arc<str>,
        wait: Duration,
    ) -> Result<Slot, (usize, usize)> {
        let deadline = Instant::now() + wait;
        let mut used = self.used.lock();
        used.by_plugin.entry(Arc::clone(plugin)).or_insert(0);
        while !self.grantable(&used, plugin) {
            if self.freed.wait_until(&mut used, deadline).timed_out()
                && !self.grantable(&used, plugin)
            {
                let mine = used.by_plugin.get(plugin).copied().unwrap_or(0);
                return Err((mine, used.total));
            }
        }
        *used.by_plugin.entry(Arc::clone(plugin)).or_insert(0) += 1;
        used.total += 1;
        Ok(Slot {
            book: Arc::clone(self),
            plugin: Arc::clone(plugin),
        })
    }

    /// A slot for one call of `plugin`, waiting at most `wait` (the call's
    /// deadline); none in time is a failed call that names the bound, and
    /// is counted as contained (`InstanceSlots`).
    ///
    /// # Errors
    /// [`CallError::Instantiate`] saying how many slots were held.
    pub(crate) fn take_for_call(
        self: &Arc<Self>,
        plugin: &Arc<str>,
        wait: Duration,
        containment: &Containment,
    ) -> Result<Slot, CallError> {
        self.take(plugin, wait).map_err(|(mine, all)| {
            tracing::warn!(%plugin, held = mine, in_use = all, capacity = self.capacity, "no instance slot within the call's deadline: the rest of the pool is in use or reserved for other plugins");
            let message = format!(
                "no instance slot within {wait:?}: this plugin holds {mine} (its memory budget allows {}) of the pool's {}, {all} in use, the rest reserved for other plugins (InstanceSlots)",
                self.per_plugin, self.capacity
            );
            containment.contained(plugin, "InstanceSlots", &message);
            CallError::Instantiate {
                plugin: plugin.to_string(),
                message,
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plugin_holds_no_more_instances_than_its_memory_budget() {
        // 64 slots, a budget of 4 instances' memory each.
        let book = Arc::new(Slots::new(64, 4));
        let one = name("one");
        let held: Vec<_> = (0..4)
            .map(|_| book.take(&one, Duration::ZERO).unwrap())
            .collect();
        assert_eq!(book.take(&one, Duration::ZERO).err(), Some((4, 4)));
        assert!(
            book.take(&name("two"), Duration::ZERO).is_ok(),
            "others are not held back"
        );
        drop(held);
        assert!(book.take(&one, Duration::ZERO).is_ok());
    }

    #[test]
    fn a_plugin_with_a_smaller_budget_of_its_own_holds_fewer() {
        let book = Arc::new(Slots::new(64, 4));
        let small = name("small");
        book.know(&small, 1);
        let held = book.take(&small, Duration::ZERO).expect("one");
        assert_eq!(book.take(&small, Duration::ZERO).err(), Some((1, 1)));
        drop(held);
        book.know(&small, 8); // wider than the book's: the book's 4
        let held: Vec<_> = (0..4)
            .map(|_| book.take(&small, Duration::ZERO).unwrap())
            .collect();
        assert!(book.take(&small, Duration::ZERO).is_err());
        drop(held);
    }

    fn name(s: &str) -> Arc<str> {
        Arc::from(s)
    }

    #[test]
    fn a_hog_leaves_every_other_plugin_its_reserve() {
        let book = Arc::new(Slots::new(8, 8));
        let (hog, neighbour, third) = (name("hog"), name("nodepool"), name("third"));
        // The neighbours are known (they were served once).
        drop(book.take(&neighbour, Duration::ZERO).unwrap());
        drop(book.take(&third, Duration::ZERO).unwrap());
        let mut held = Vec::new();
        while let Ok(slot) = book.take(&hog, Duration::ZERO) {
            held.push(slot);
        }
        assert_eq!(
            held.len(),
            8 - 2 * RESERVE,
            "the hog keeps out of the reserves"
        );
        let a = book.take(&neighbour, Duration::ZERO).expect("its reserve");
        let b = book.take(&neighbour, Duration::ZERO).expect("its reserve");
        let c = book.take(&third, Duration::ZERO).expect("its reserve");
        // Nothing is left for the hog, nor beyond the third's reserve for
        // the neighbour.
        assert!(book.take(&hog, Duration::ZERO).is_err());
        assert!(book.take(&neighbour, Duration::ZERO).is_err());
        drop((a, b, c));
        held.pop();
        assert!(
            book.take(&hog, Duration::ZERO).is_ok(),
            "a freed slot serves again"
        );
    }

    #[test]
    fn alone_a_plugin_may_use_the_whole_pool_and_a_waiter_gets_a_freed_slot() {
        let book = Arc::new(Slots::new(3, 3));
        let one = name("one");
        let held: Vec<_> = (0..3)
            .map(|_| book.take(&one, Duration::ZERO).unwrap())
            .collect();
        assert_eq!(
            book.take(&one, Duration::from_millis(20)).err(),
            Some((3, 3))
        );
        std::thread::scope(|s| {
            let waiter = s.spawn(|| book.take(&one, Duration::from_secs(5)).map(|_| ()));
            std::thread::sleep(Duration::from_millis(50));
            drop(held);
            assert!(waiter.join().unwrap().is_ok());
        });
    }

    #[test]
    fn more_plugins_than_slots_share_first_come() {
        let book = Arc::new(Slots::new(2, 2));
        for p in ["a", "b", "c"] {
            drop(book.take(&name(p), Duration::ZERO).unwrap());
        }
        let x = book.take(&name("a"), Duration::ZERO).unwrap();
        let y = book.take(&name("b"), Duration::ZERO).unwrap();
        assert!(book.take(&name("c"), Duration::ZERO).is_err());
        drop((x, y));
        assert!(book.take(&name("c"), Duration::ZERO).is_ok());
    }
}
