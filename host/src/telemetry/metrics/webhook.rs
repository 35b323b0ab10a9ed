//! The admission webhook server's series: controller-runtime's webhook
//! families under its names (`controller_runtime_webhook_*`, the `webhook`
//! label is the path served), rekon's verdicts per plugin, and a shadow
//! version's verdicts compared with the serving one's.

use std::time::Instant;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use super::registered::registered;
use super::runtime_families::HistogramFamily;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookLabels {
    webhook: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WebhookCodeLabels {
    webhook: String,
    code: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ShadowLabels {
    plugin: String,
    kind: &'static str,
    result: &'static str,
}

/// What a shadow version's admission verdict was beside the serving
/// version's (`rekon_admission_shadow_verdicts_total{result}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShadowVerdict {
    /// The same answer.
    Identical,
    /// The shadow denies what the serving version admitted.
    WouldDeny,
    /// The shadow admits what the serving version denied.
    WouldAllow,
    /// Both admit or both deny, with other messages, warnings or defaults.
    Differs,
    /// The shadow's call failed.
    Failed,
    /// Not shadowed: too many shadow calls in flight.
    Dropped,
}

impl ShadowVerdict {
    const ALL: [Self; 6] = [
        Self::Identical,
        Self::WouldDeny,
        Self::WouldAllow,
        Self::Differs,
        Self::Failed,
        Self::Dropped,
    ];

    /// The metric label (`identical`, `would_deny`, ...).
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Identical => "identical",
            Self::WouldDeny => "would_deny",
            Self::WouldAllow => "would_allow",
            Self::Differs => "differs",
            Self::Failed => "failed",
            Self::Dropped => "dropped",
        }
    }
}

/// One difference between a shadow's admission verdict and the serving
/// version's, as a Plugin object's status shows it.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionDivergence {
    /// The object reviewed: `namespace/name` (`name` when cluster-scoped),
    /// with its kind: `Widget default/big`.
    pub object: String,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operation: String,
    /// `wouldDeny`, `wouldAllow`, `differs`, `failed`.
    pub result: String,
    /// The denial's message (the shadow's for `wouldDeny`, the serving
    /// version's for `wouldAllow`), or what differs; at most 512 bytes.
    pub message: String,
    /// When (RFC 3339).
    pub observed_at: String,
}

/// How many admission divergences per plugin are kept for the status.
pub const RECENT_ADMISSION_DIVERGENCES: usize = 3;
const DIVERGENCE_MESSAGE_BYTES: usize = 512;

/// A shadow's admission verdicts of one plugin so far, per result.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ShadowVerdictCounts {
    /// `identical`.
    pub identical: u64,
    /// `would_deny`.
    pub would_deny: u64,
    /// `would_allow`.
    pub would_allow: u64,
    /// `differs`.
    pub differs: u64,
    /// `failed`.
    pub failed: u64,
    /// `dropped`.
    pub dropped: u64,
}

impl ShadowVerdictCounts {
    /// Reviews the shadow answered (or failed): all but `dropped`.
    #[must_use]
    pub fn reviews(&self) -> u64 {
        self.identical + self.would_deny + self.would_allow + self.differs + self.failed
    }

    /// These counts less `base` (the counts when a candidate was loaded).
    #[must_use]
    pub fn since(&self, base: &Self) -> Self {
        Self {
            identical: self.identical.saturating_sub(base.identical),
            would_deny: self.would_deny.saturating_sub(base.would_deny),
            would_allow: self.would_allow.saturating_sub(base.would_allow),
            differs: self.differs.saturating_sub(base.differs),
            failed: self.failed.saturating_sub(base.failed),
            dropped: self.dropped.saturating_sub(base.dropped),
        }
    }

    fn slot(&mut self, verdict: ShadowVerdict) -> &mut u64 {
        match verdict {
            ShadowVerdict::Identical => &mut self.identical,
            ShadowVerdict::WouldDeny => &mut self.would_deny,
            ShadowVerdict::WouldAllow => &mut self.would_allow,
            ShadowVerdict::Differs => &mut self.differs,
            ShadowVerdict::Failed => &mut self.failed,
            ShadowVerdict::Dropped => &mut self.dropped,
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct VerdictLabels {
    plugin: String,
    kind: &'static str,
    verdict: &'static str,
}

/// Prometheus' default buckets, as controller-runtime's webhook latency
/// histogram uses (5 ms .. 10 s).
const WEBHOOK_BUCKETS: [f64; 11] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
];

fn webhook_histogram() -> Histogram {
    Histogram::new(WEBHOOK_BUCKETS)
}

/// The webhook families.
pub(super) struct WebhookFamilies {
    requests: Family<WebhookCodeLabels, Counter>,
    latency: HistogramFamily<WebhookLabels>,
    in_flight: Family<WebhookLabels, Gauge>,
    verdicts: Family<VerdictLabels, Counter>,
    shadow_verdicts: Family<ShadowLabels, Counter>,
    /// The last few shadow differences per plugin, for the Plugin object's
    /// status (`shadow.admission.recent`).
    recent: parking_lot::Mutex<
        std::collections::BTreeMap<String, std::collections::VecDeque<AdmissionDivergence>>,
    >,
}

impl std::fmt::Debug for WebhookFamilies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookFamilies").finish_non_exhaustive()
    }
}

impl WebhookFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        Self {
            requests: registered(
                registry,
                "controller_runtime_webhook_requests",
                "Total number of admission requests by HTTP status code.",
                Family::default(),
            ),
            latency: registered(
                registry,
                "controller_runtime_webhook_latency_seconds",
                "Histogram of the latency of processing admission requests",
                HistogramFamily::new_with_constructor(webhook_histogram as fn() -> Histogram),
            ),
            in_flight: registered(
                registry,
                "controller_runtime_webhook_requests_in_flight",
                "Current number of admission requests being served.",
                Family::default(),
            ),
            verdicts: registered(
                registry,
                "rekon_admission_verdicts",
                "Admission verdicts per plugin, kind (validate, mutate) and verdict (allowed, patched, denied, failed)",
                Family::default(),
            ),
            shadow_verdicts: registered(
                registry,
                "rekon_admission_shadow_verdicts",
                "A shadow version's admission verdicts beside the serving version's, per plugin, kind and result (identical, would_deny, would_allow, differs, failed, dropped); never enforced",
                Family::default(),
            ),
            recent: parking_lot::Mutex::default(),
        }
    }

    pub(super) fn shadow_verdict(
        &self,
        plugin: &str,
        kind: &'static str,
        verdict: ShadowVerdict,
        divergence: Option<AdmissionDivergence>,
    ) {
        self.shadow_verdicts
            .get_or_create(&ShadowLabels {
                plugin: plugin.to_owned(),
                kind,
                result: verdict.label(),
            })
            .inc();
        let Some(mut divergence) = divergence else {
            return;
        };
        if divergence.message.len() > DIVERGENCE_MESSAGE_BYTES {
            let mut cut = DIVERGENCE_MESSAGE_BYTES;
            while !divergence.message.is_char_boundary(cut) {
                cut -= 1;
            }
            divergence.message.truncate(cut);
            divergence.message.push('…');
        }
        let mut recent = self.recent.lock();
        let list = recent.entry(plugin.to_owned()).or_default();
        list.push_back(divergence);
        while list.len() > RECENT_ADMISSION_DIVERGENCES {
            list.pop_front();
        }
    }

    pub(super) fn shadow_verdict_counts(&self, plugin: &str) -> ShadowVerdictCounts {
        let mut counts = ShadowVerdictCounts::default();
        for kind in ["validate", "mutate"] {
            for verdict in ShadowVerdict::ALL {
                *counts.slot(verdict) += self
                    .shadow_verdicts
                    .get_or_create(&ShadowLabels {
                        plugin: plugin.to_owned(),
                        kind,
                        result: verdict.label(),
                    })
                    .get();
            }
        }
        counts
    }

    pub(super) fn recent_shadow_divergences(&self, plugin: &str) -> Vec<AdmissionDivergence> {
        self.recent
            .lock()
            .get(plugin)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn clear_recent_shadow_divergences(&self, plugin: &str) {
        self.recent.lock().remove(plugin);
    }

    pub(super) fn started(&self, webhook: &str) -> (Gauge, Histogram) {
        let labels = WebhookLabels {
            webhook: webhook.to_owned(),
        };
        let gauge = self.in_flight.get_or_create(&labels).clone();
        gauge.inc();
        (gauge, self.latency.get_or_create(&labels).clone())
    }

    pub(super) fn answered(&self, webhook: &str, code: u16) {
        self.requests
            .get_or_create(&WebhookCodeLabels {
                webhook: webhook.to_owned(),
                code: code.to_string(),
            })
            .inc();
    }

    pub(super) fn verdict(&self, plugin: &str, kind: &'static str, verdict: &'static str) {
        self.verdicts
            .get_or_create(&VerdictLabels {
                plugin: plugin.to_owned(),
                kind,
                verdict,
            })
            .inc();
    }
}

/// One webhook request being served: in flight until finished or dropped.
#[derive(Debug)]
#[must_use = "finish the request with its HTTP code"]
pub struct WebhookTimer {
    pub(super) webhook: String,
    pub(super) in_flight: Gauge,
    pub(super) latency: Histogram,
    pub(super) started: Instant,
    pub(super) metrics: super::Metrics,
}

impl WebhookTimer {
    /// The request was answered with HTTP `code`.
    pub fn finish(self, code: u16) {
        self.latency.observe(self.started.elapsed().as_secs_f64());
        self.metrics.inner.webhook.answered(&self.webhook, code);
    }
}

impl Drop for WebhookTimer {
    fn drop(&mut self) {
        self.in_flight.dec();
    }
}
