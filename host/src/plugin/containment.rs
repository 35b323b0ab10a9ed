//! Where every containment of a runtime goes, once: the metric
//! (`rekon_plugin_contained_total{plugin,reason}`), the per-plugin record
//! the Plugin object's status shows (`status.contained`), and the fair
//! share of CPU ([`super::fair_share`]) whose transitions are logged once
//! each and measured (`rekon_plugin_backoff_total`,
//! `rekon_plugin_backoff_seconds`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;

use super::fair_share::{FairShare, FairShareConfig, Transition};
use crate::telemetry::metrics::Metrics;

/// Containments of one plugin since the host started.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainedRecord {
    /// Count per reason (`Timeout`, `OutOfMemory`, `InstanceSlots`,
    /// `TooManyActions`, …).
    pub counts: BTreeMap<String, u64>,
    /// The reason of the latest.
    pub last_reason: String,
    /// What the latest said (plugin, bound, numbers).
    pub last_message: String,
    /// When the latest happened.
    pub last_time: Option<SystemTime>,
}

/// Reasons that are not the plugin's own doing on the CPU: they are
/// counted and shown, never backed off for (a call that waited for an
/// instance slot took nothing from anyone).
/// A refused action took no CPU from anyone either: it fails terminally,
/// and is retried only when its object changes.
const NOT_BACKED_OFF: &[&str] = &["InstanceSlots", FORBIDDEN];

/// The reason an outcome with an action outside the plugin's permissions
/// (or its operator policy) is counted under.
pub(crate) const FORBIDDEN: &str = "Forbidden";

/// The runtime's containment sink.
pub(crate) struct Containment {
    metrics: Metrics,
    share: Mutex<FairShare>,
    records: Mutex<HashMap<Arc<str>, ContainedRecord>>,
}

impl Containment {
    pub(crate) fn new(metrics: Metrics, fair_share: FairShareConfig) -> Self {
        Self {
            metrics,
            share: Mutex::new(FairShare::new(fair_share)),
            records: Mutex::new(HashMap::new()),
        }
    }

    /// The host stopped a call of `plugin` at the bound `reason`;
    /// `message` says which and how far.
    pub(crate) fn contained(&self, plugin: &Arc<str>, reason: &'static str, message: &str) {
        self.metrics.plugin_contained(plugin, reason);
        {
            let mut records = self.records.lock();
            let record = records.entry(Arc::clone(plugin)).or_default();
            *record.counts.entry(reason.to_owned()).or_insert(0) += 1;
            reason.clone_into(&mut record.last_reason);
            message.clone_into(&mut record.last_message);
            record.last_time = Some(SystemTime::now());
        }
        if NOT_BACKED_OFF.contains(&reason) {
            return;
        }
        let transition = self.share.lock().contained(plugin, Instant::now());
        match transition {
            Some(Transition::Entered(interval)) => {
                tracing::warn!(%plugin, reason, ?interval, "plugin backed off: it keeps hitting its bounds; its calls are admitted one per interval until it stays within them (its neighbours are not held)");
                self.metrics.plugin_backoff(plugin, interval, true);
            }
            Some(Transition::Escalated(interval)) => {
                tracing::debug!(%plugin, reason, ?interval, "plugin backed off further");
                self.metrics.plugin_backoff(plugin, interval, false);
            }
            Some(Transition::Lifted) | None => {}
        }
    }

    /// A call of `plugin`'s shadow (`*.shadow.wasm`, same name) was stopped
    /// at `reason`: counted, but neither recorded for the Plugin object nor
    /// backed off for: the serving version is not the one misbehaving.
    pub(crate) fn shadow_contained(&self, plugin: &str, reason: &'static str) {
        self.metrics.plugin_contained(plugin, reason);
    }

    /// A call of `plugin` ended within its bounds.
    pub(crate) fn within_bounds(&self, plugin: &str) {
        if self.share.lock().within_bounds(plugin) == Some(Transition::Lifted) {
            tracing::info!(%plugin, "plugin backoff lifted: its calls stay within bounds again");
            self.metrics.plugin_backoff(plugin, Duration::ZERO, false);
        }
    }

    /// Whether a call of `plugin` may start now; if not, how long until it
    /// may ([`FairShare::admit`]).
    pub(crate) fn admit(&self, plugin: &str) -> Result<(), Duration> {
        self.share.lock().admit(plugin, Instant::now())
    }

    /// `plugin`'s interval between admitted calls (zero: not backed off).
    pub(crate) fn backoff(&self, plugin: &str) -> Duration {
        self.share.lock().backoff(plugin)
    }

    /// `plugin`'s containments so far (`None`: none).
    pub(crate) fn record(&self, plugin: &str) -> Option<ContainedRecord> {
        self.records.lock().get(plugin).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_containment_is_recorded_and_repeated_ones_back_the_plugin_off() {
        let metrics = Metrics::new();
        let sink = Containment::new(metrics.clone(), FairShareConfig::default());
        let hog: Arc<str> = Arc::from("hog");
        sink.contained(&hog, "InstanceSlots", "no slot");
        for _ in 0..3 {
            sink.contained(&hog, "Timeout", "timed out after 2s");
        }
        let record = sink.record("hog").expect("recorded");
        assert_eq!(record.counts.get("Timeout"), Some(&3));
        assert_eq!(record.counts.get("InstanceSlots"), Some(&1));
        assert_eq!(record.last_reason, "Timeout");
        assert!(sink.admit("hog").is_err(), "backed off");
        assert!(sink.admit("nodepool").is_ok());
        assert!(sink.record("nodepool").is_none());
        let text = metrics.encode();
        assert!(
            text.contains("rekon_plugin_backoff_total{plugin=\"hog\"} 1"),
            "{text}"
        );
        assert!(text.contains("rekon_plugin_backoff_seconds{plugin=\"hog\"} 4"));
        for _ in 0..3 {
            sink.within_bounds("hog");
        }
        assert!(sink.admit("hog").is_ok(), "lifted");
        assert!(
            metrics
                .encode()
                .contains("rekon_plugin_backoff_seconds{plugin=\"hog\"} 0")
        );
    }

    #[test]
    fn a_shadows_containments_are_counted_but_never_back_off_the_serving_version() {
        let metrics = Metrics::new();
        let sink = Containment::new(metrics.clone(), FairShareConfig::default());
        for _ in 0..5 {
            sink.shadow_contained("pools", "Timeout");
        }
        assert!(sink.admit("pools").is_ok());
        assert!(sink.record("pools").is_none(), "not the serving version's");
        assert!(
            metrics
                .encode()
                .contains("rekon_plugin_contained_total{plugin=\"pools\",reason=\"Timeout\"} 5")
        );
    }

    #[test]
    fn slot_waits_alone_never_back_off() {
        let sink = Containment::new(Metrics::new(), FairShareConfig::default());
        let p: Arc<str> = Arc::from("p");
        for _ in 0..10 {
            sink.contained(&p, "InstanceSlots", "no slot");
        }
        assert!(sink.admit("p").is_ok());
    }
}
