//! The admission webhook server's series: controller-runtime's webhook
//! families under its names (`controller_runtime_webhook_*`, the `webhook`
//! label is the path served), and rekon's verdicts per plugin.

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
        }
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
