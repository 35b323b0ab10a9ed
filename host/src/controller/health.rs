//! The health debounce: cluster health changes coalesced per cluster into
//! one requeue of the primaries covering it.

use std::collections::BTreeMap;
use std::time::Duration;

use tokio::time::Instant;

use crate::cluster::Health;

/// Health changes of one cluster within this long of the first one are
/// coalesced into (at most) one requeue of the primaries covering it.
pub const HEALTH_DEBOUNCE: Duration = Duration::from_secs(1);

/// Coalesces cluster health changes per cluster. Hand-written because the
/// window belongs to a side channel (kube-runtime's debounce works on the
/// reconciler's own trigger stream): a window opens with a cluster's first
/// change and closes [`HEALTH_DEBOUNCE`] later; the cluster is then requeued
/// once, with its health at that moment, if it is still engaged. Every
/// change passes through Syncing or Unreachable, which a plugin may have
/// read and acted on (a Test reports a Syncing cluster and waits), so even
/// a flap that ends where it started, or a short `Ready → Syncing → Ready`
/// blip of a new watch listing, requeues once. Blips are rare: they come
/// from caches starting in that cluster (a plugin load or swap).
#[derive(Debug)]
pub(crate) struct HealthDebounce {
    window: Duration,
    /// Cluster → when its window closes.
    pending: BTreeMap<String, Instant>,
}

impl HealthDebounce {
    pub(crate) fn new(window: Duration) -> Self {
        Self {
            window,
            pending: BTreeMap::new(),
        }
    }

    /// `cluster` changed health (or its changes were missed because the
    /// channel lagged): requeue it when its window closes.
    pub(crate) fn record(&mut self, cluster: &str, now: Instant) {
        let window = self.window;
        self.pending
            .entry(cluster.to_owned())
            .or_insert_with(|| now + window);
    }

    pub(crate) fn next_due(&self) -> Option<Instant> {
        self.pending.values().min().copied()
    }

    /// Close the windows due at `now`; returns the clusters to requeue with
    /// their current health (`current`: `None` once disengaged, which has
    /// its own requeue).
    pub(crate) fn take_due(
        &mut self,
        now: Instant,
        current: impl Fn(&str) -> Option<Health>,
    ) -> Vec<(String, Health)> {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, due)| **due <= now)
            .map(|(c, _)| c.clone())
            .collect();
        due.into_iter()
            .filter_map(|cluster| {
                self.pending.remove(&cluster);
                current(&cluster).map(|health| (cluster, health))
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn health_changes_are_coalesced_per_cluster() {
        use Health::{Ready, Syncing, Unreachable};
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = HealthDebounce::new(HEALTH_DEBOUNCE);
        assert_eq!(d.next_due(), None);
        // edge flaps three times within the window; sub blips to Syncing.
        d.record("edge", t0);
        d.record("edge", t0 + ms(200));
        d.record("edge", t0 + ms(400));
        d.record("sub", t0 + ms(300));
        d.record("sub", t0 + ms(500));
        assert_eq!(d.next_due(), Some(t0 + HEALTH_DEBOUNCE));
        let now = |c: &str| match c {
            "edge" => Some(Unreachable),
            "sub" => Some(Ready),
            _ => None,
        };
        assert!(
            d.take_due(t0 + ms(999), now).is_empty(),
            "window still open"
        );
        // One requeue for edge; one for sub too: a plugin may have read
        // Syncing during its blip and must see it Ready again.
        assert_eq!(
            d.take_due(t0 + HEALTH_DEBOUNCE, now),
            vec![("edge".to_owned(), Unreachable)]
        );
        assert_eq!(d.next_due(), Some(t0 + ms(300) + HEALTH_DEBOUNCE));
        assert_eq!(
            d.take_due(t0 + ms(1300), now),
            vec![("sub".to_owned(), Ready)]
        );
        assert_eq!(d.next_due(), None);

        // A flap that ends where it started still requeues once: plugins
        // may have seen the cluster unreachable.
        let t1 = t0 + ms(5000);
        d.record("edge", t1);
        d.record("edge", t1 + ms(100));
        assert_eq!(
            d.take_due(t1 + HEALTH_DEBOUNCE, now),
            vec![("edge".to_owned(), Unreachable)]
        );
        // A lasting move to Syncing requeues; a disengaged cluster does not.
        let t2 = t1 + ms(5000);
        d.record("sub", t2);
        d.record("gone", t2);
        let syncing = |c: &str| (c == "sub").then_some(Syncing);
        assert_eq!(
            d.take_due(t2 + HEALTH_DEBOUNCE, syncing),
            vec![("sub".to_owned(), Syncing)]
        );
        // Missed changes requeue whatever the health.
        d.record("sub", t2);
        assert_eq!(
            d.take_due(t2 + HEALTH_DEBOUNCE, syncing),
            vec![("sub".to_owned(), Syncing)]
        );
    }
}
