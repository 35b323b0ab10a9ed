//! controller-runtime's metric families, under its names so its dashboards
//! and alerts work unchanged: `controller_runtime_*` per reconcile and
//! controller, the `workqueue_*` family, `leader_election_master_status`.
//! The `controller` label is the plugin name; rekon adds a `cluster` label
//! to the per-reconcile series (a request names its cluster;
//! controller-runtime has one cluster per manager).

use super::registered::registered;
use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// How a reconcile ended (controller-runtime's `result` label values).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum ReconcileResult {
    /// Finished without error and without a requeue.
    Success,
    /// Failed; will be retried with backoff.
    Error,
    /// Asked to be requeued (rate limited).
    Requeue,
    /// Asked to be requeued after a delay.
    RequeueAfter,
    /// Failed terminally; counted, never retried. Reported with result `error`
    /// plus `controller_runtime_terminal_reconcile_errors_total`.
    TerminalError,
}

impl ReconcileResult {
    /// The `result` label value.
    #[must_use]
    pub fn as_label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Error | Self::TerminalError => "error",
            Self::Requeue => "requeue",
            Self::RequeueAfter => "requeue_after",
        }
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReconcileLabels {
    controller: String,
    cluster: String,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerClusterLabels {
    controller: String,
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabels {
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct QueueLabels {
    name: String,
    controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub(super) struct NameLabels {
    pub(super) name: String,
}

/// A family of histograms with one bucket layout.
pub(super) type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// controller-runtime's reconcile-time buckets (5 ms .. 60 s).
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

pub(super) fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// client-go's workqueue buckets: 10 ns .. 1000 s, factor 10.
fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// controller-runtime's families, registered in its order.
pub(super) struct RuntimeFamilies {
    reconcile_total: Family<ReconcileLabels, Counter>,
    reconcile_errors: Family<ControllerClusterLabels, Counter>,
    terminal_errors: Family<ControllerClusterLabels, Counter>,
    reconcile_time: HistogramFamily<ControllerClusterLabels>,
    active_workers: Family<ControllerLabels, Gauge>,
    max_concurrent: Family<ControllerLabels, Gauge>,
    queue_depth: Family<QueueLabels, Gauge>,
    queue_adds: Family<QueueLabels, Counter>,
    queue_duration: HistogramFamily<QueueLabels>,
    work_duration: HistogramFamily<QueueLabels>,
    queue_retries: Family<QueueLabels, Counter>,
    queue_unfinished: Family<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    queue_longest: Family<QueueLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    leader: Family<NameLabels, Gauge>,
}

impl std::fmt::Debug for RuntimeFamilies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeFamilies").finish_non_exhaustive()
    }
}

impl RuntimeFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        Self {
            reconcile_total: registered(
                registry,
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default(),
            ),
            reconcile_errors: registered(
                registry,
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default(),
            ),
            terminal_errors: registered(
                registry,
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                Family::default(),
            ),
            reconcile_time: registered(
                registry,
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                HistogramFamily::new_with_constructor(reconcile_histogram as fn() -> Histogram),
            ),
            active_workers: registered(
                registry,
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                Family::default(),
            ),
            max_concurrent: registered(
                registry,
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                Family::default(),
            ),
            queue_depth: registered(
                registry,
                "workqueue_depth",
                "Current depth of workqueue",
                Family::default(),
            ),
            queue_adds: registered(
                registry,
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default(),
            ),
            queue_duration: registered(
                registry,
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                HistogramFamily::new_with_constructor(workqueue_histogram as fn() -> Histogram),
            ),
            work_duration: registered(
                registry,
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                HistogramFamily::new_with_constructor(workqueue_histogram as fn() -> Histogram),
            ),
            queue_retries: registered(
                registry,
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default(),
            ),
            queue_unfinished: registered(
                registry,
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                Family::default(),
            ),
            queue_longest: registered(
                registry,
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                Family::default(),
            ),
            leader: registered(
                registry,
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
                Family::default(),
            ),
        }
    }

    pub(super) fn reconcile_started(
        self: &Arc<Self>,
        controller: &str,
        cluster: &str,
    ) -> ReconcileTimer {
        self.active_workers(controller).inc();
        ReconcileTimer {
            families: Arc::clone(self),
            controller: controller.to_owned(),
            cluster: cluster.to_owned(),
            started: Instant::now(),
        }
    }

    pub(super) fn observe_reconcile(
        &self,
        controller: &str,
        cluster: &str,
        result: ReconcileResult,
        duration: Duration,
    ) {
        let labels = ControllerClusterLabels {
            controller: controller.to_owned(),
            cluster: cluster.to_owned(),
        };
        self.reconcile_total
            .get_or_create(&ReconcileLabels {
                controller: labels.controller.clone(),
                cluster: labels.cluster.clone(),
                result: result.as_label(),
            })
            .inc();
        match result {
            ReconcileResult::Error => {
                self.reconcile_errors.get_or_create(&labels).inc();
            }
            ReconcileResult::TerminalError => {
                self.reconcile_errors.get_or_create(&labels).inc();
                self.terminal_errors.get_or_create(&labels).inc();
            }
            _ => {}
        }
        self.reconcile_time
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    pub(super) fn active_workers(
        &self,
        controller: &str,
    ) -> prometheus_client::metrics::gauge::Gauge {
        self.active_workers
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .clone()
    }

    pub(super) fn set_max_concurrent_reconciles(&self, controller: &str, max: u32) {
        self.max_concurrent
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .set(i64::from(max));
    }

    pub(super) fn queue(&self, controller: &str) -> QueueMetrics {
        let labels = QueueLabels {
            name: controller.to_owned(),
            controller: controller.to_owned(),
        };
        QueueMetrics {
            depth: self.queue_depth.get_or_create(&labels).clone(),
            adds: self.queue_adds.get_or_create(&labels).clone(),
            queue_duration: self.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.work_duration.get_or_create(&labels).clone(),
            retries: self.queue_retries.get_or_create(&labels).clone(),
            unfinished: self.queue_unfinished.get_or_create(&labels).clone(),
            longest: self.queue_longest.get_or_create(&labels).clone(),
        }
    }

    pub(super) fn forget_controller(&self, controller: &str) {
        let c = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.active_workers.remove(&c);
        self.max_concurrent.remove(&c);
        let q = QueueLabels {
            name: controller.to_owned(),
            controller: controller.to_owned(),
        };
        self.queue_depth.remove(&q);
        self.queue_unfinished.remove(&q);
        self.queue_longest.remove(&q);
    }

    /// Sets the leader gauge of lease `name`; whether it changed.
    pub(super) fn set_leader(&self, name: &str, leader: bool) -> bool {
        let new = i64::from(leader);
        self.leader
            .get_or_create(&NameLabels {
                name: name.to_owned(),
            })
            .set(new)
            != new
    }
}

/// Measures one reconcile; see [`super::Metrics::reconcile_started`].
#[derive(Debug)]
pub struct ReconcileTimer {
    families: Arc<RuntimeFamilies>,
    controller: String,
    cluster: String,
    started: Instant,
}

impl ReconcileTimer {
    /// Record the reconcile's result and duration.
    pub fn finish(self, result: ReconcileResult) {
        self.families.observe_reconcile(
            &self.controller,
            &self.cluster,
            result,
            self.started.elapsed(),
        );
    }
}

impl Drop for ReconcileTimer {
    fn drop(&mut self) {
        // A dropped (cancelled) reconcile frees its worker but records no result.
        self.families.active_workers(&self.controller).dec();
    }
}

/// The work-queue series of one controller; cheap to clone.
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    depth: Gauge,
    adds: Counter,
    queue_duration: Histogram,
    work_duration: Histogram,
    retries: Counter,
    unfinished: Gauge<f64, std::sync::atomic::AtomicU64>,
    longest: Gauge<f64, std::sync::atomic::AtomicU64>,
}

impl QueueMetrics {
    /// A request was added (a duplicate that was merged counts too, as in client-go).
    pub fn add(&self) {
        self.adds.inc();
    }

    /// The work in progress, from the start times of the requests being
    /// processed now: the sum of their ages (`workqueue_unfinished_work_seconds`)
    /// and the oldest's (`workqueue_longest_running_processor_seconds`), as
    /// client-go's metrics updater reports them.
    pub fn set_in_flight(&self, started: impl IntoIterator<Item = Instant>, now: Instant) {
        let (mut total, mut longest) = (0.0_f64, 0.0_f64);
        for at in started {
            let age = now.saturating_duration_since(at).as_secs_f64();
            total += age;
            longest = longest.max(age);
        }
        self.unfinished.set(total);
        self.longest.set(longest);
    }

    /// The number of requests waiting now.
    pub fn set_depth(&self, depth: usize) {
        self.depth.set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// A request waited `waited` between being added and being handed to a worker.
    pub fn observe_queue_duration(&self, waited: Duration) {
        self.queue_duration.observe(waited.as_secs_f64());
    }

    /// A worker spent `took` on one request.
    pub fn observe_work_duration(&self, took: Duration) {
        self.work_duration.observe(took.as_secs_f64());
    }

    /// A request was requeued with backoff after an error.
    pub fn retry(&self) {
        self.retries.inc();
    }
}
