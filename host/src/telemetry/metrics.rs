//! Prometheus metrics of the host, served on `/metrics`.
//!
//! Names follow controller-runtime where a counterpart exists, so existing
//! dashboards and alerts work unchanged: `controller_runtime_reconcile_total`,
//! `controller_runtime_reconcile_errors_total`,
//! `controller_runtime_terminal_reconcile_errors_total`,
//! `controller_runtime_reconcile_time_seconds`,
//! `controller_runtime_active_workers`,
//! `controller_runtime_max_concurrent_reconciles`, the `workqueue_*` family
//! and `leader_election_master_status`. The `controller` label is the plugin
//! name. rekon adds a `cluster` label to the per-reconcile series (a request
//! names its cluster; controller-runtime has one cluster per manager).
//!
//! rekon's own series are prefixed `rekon_`: watch restarts and cache object
//! counts per cluster and resource, engaged clusters, plugin loads, load
//! failures and the loaded version, per-call WASM time and failures, the
//! writer's actions, and plugin fetches from OCI registries by outcome.
//!
//! [`Metrics`] is cheap to clone (one `Arc`); every method takes `&self` and
//! only touches atomics behind a read lock, so the engine and the plugin
//! runtime call it on their hot paths.
//!
//! ```
//! use std::time::Duration;
//! use rekon::telemetry::metrics::{Metrics, ReconcileResult};
//!
//! let metrics = Metrics::new();
//! let timer = metrics.reconcile_started("test-fanout", "main");
//! timer.finish(ReconcileResult::Success);
//! metrics.queue("test-fanout").add();
//! assert!(metrics.encode().contains("controller_runtime_reconcile_total{controller=\"test-fanout\",cluster=\"main\",result=\"success\"} 1"));
//! ```

use std::sync::Arc;
use std::time::{Duration, Instant};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// Content type of [`Metrics::encode`] (OpenMetrics text, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

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
struct NameLabels {
    name: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterResourceLabels {
    cluster: String,
    resource: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClusterLabels {
    cluster: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginLabels {
    plugin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginVersionLabels {
    plugin: String,
    version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginFunctionLabels {
    plugin: String,
    function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct WasmFailureLabels {
    plugin: String,
    function: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ActionLabels {
    plugin: String,
    cluster: String,
    action: String,
    result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginKindLabels {
    plugin: String,
    kind: String,
}

type HistogramFamily<L> = Family<L, Histogram, fn() -> Histogram>;

/// controller-runtime's reconcile-time buckets (5 ms .. 60 s).
const RECONCILE_BUCKETS: [f64; 40] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9,
    1.0, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 15.0, 20.0,
    25.0, 30.0, 40.0, 50.0, 60.0,
];

fn reconcile_histogram() -> Histogram {
    Histogram::new(RECONCILE_BUCKETS)
}

/// client-go's workqueue buckets: 10 ns .. 1000 s, factor 10.
fn workqueue_histogram() -> Histogram {
    Histogram::new(exponential_buckets(10e-9, 10.0, 12))
}

/// WASM calls: 50 µs .. ~13 s, factor 2 (a call is bounded by the epoch deadline).
fn wasm_histogram() -> Histogram {
    Histogram::new(exponential_buckets(50e-6, 2.0, 19))
}

/// Plugin fetches: 1 ms .. ~131 s, factor 2 (a cache hit takes
/// milliseconds, a pull from a slow registry seconds).
fn fetch_histogram() -> Histogram {
    Histogram::new(exponential_buckets(1e-3, 2.0, 18))
}

struct Inner {
    registry: Registry,
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
    leader_transitions: Family<NameLabels, Counter>,
    leaderless: HistogramFamily<NameLabels>,
    shards_held: Gauge,
    watch_restarts: Family<ClusterResourceLabels, Counter>,
    cache_objects: Family<ClusterResourceLabels, Gauge>,
    watch_failed: Family<ClusterResourceLabels, Gauge>,
    cluster_engaged: Family<ClusterLabels, Gauge>,
    cluster_reachable: Family<ClusterLabels, Gauge>,
    plugin_loads: Family<PluginVersionLabels, Counter>,
    plugin_load_failures: Family<PluginLabels, Counter>,
    plugin_info: Family<PluginVersionLabels, Gauge>,
    wasm_call_time: HistogramFamily<PluginFunctionLabels>,
    wasm_call_failures: Family<WasmFailureLabels, Counter>,
    writer_actions: Family<ActionLabels, Counter>,
    record_cases: Family<PluginLabels, Counter>,
    record_dropped: Family<PluginKindLabels, Counter>,
    shadow_reconciles: Family<PluginKindLabels, Counter>,
    shadow_dropped: Family<PluginLabels, Counter>,
    shadow_call_time: HistogramFamily<PluginLabels>,
    plugin_fetches: Family<OutcomeLabels, Counter>,
    plugin_fetch_time: Histogram,
    /// Loaded version per plugin, to remove a replaced version's
    /// `rekon_plugin_info` series (a `Family` cannot be iterated).
    plugin_versions: parking_lot::Mutex<std::collections::BTreeMap<String, String>>,
    /// The last few shadow divergences per plugin, for the Plugin object's
    /// status (`shadow.recent`).
    recent_divergences: parking_lot::Mutex<
        std::collections::BTreeMap<String, std::collections::VecDeque<Divergence>>,
    >,
}

/// One shadow divergence, as a Plugin object's status shows it.
#[derive(
    Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "camelCase")]
pub struct Divergence {
    /// The primary: `cluster/namespace/name` (`cluster/name` when
    /// cluster-scoped).
    pub object: String,
    /// How the decisions differ (`actions`, `outcome`, `error`, `timeout`,
    /// `memory`).
    pub kind: String,
    /// When (RFC 3339).
    pub observed_at: String,
    /// The serving decision against the shadow's, as a line diff of YAML
    /// (at most 2 KiB; the whole case is kept with `--shadow-cases`).
    pub diff: String,
}

/// How many divergences per plugin are kept for the status.
pub const RECENT_DIVERGENCES: usize = 3;
const DIVERGENCE_DIFF_BYTES: usize = 2048;

/// The host's metrics. Cheap to clone; see the [module docs](self).
#[derive(Clone)]
pub struct Metrics {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Metrics").finish_non_exhaustive()
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh set of metrics in its own registry.
    #[must_use]
    pub fn new() -> Self {
        let mut registry = Registry::default();
        macro_rules! reg {
            ($name:literal, $help:literal, $metric:expr) => {{
                let metric = $metric;
                registry.register($name, $help, metric.clone());
                metric
            }};
        }
        // Counters are registered without `_total`: the encoder appends it.
        let inner = Inner {
            reconcile_total: reg!(
                "controller_runtime_reconcile",
                "Total number of reconciliations per controller",
                Family::default()
            ),
            reconcile_errors: reg!(
                "controller_runtime_reconcile_errors",
                "Total number of reconciliation errors per controller",
                Family::default()
            ),
            terminal_errors: reg!(
                "controller_runtime_terminal_reconcile_errors",
                "Total number of terminal reconciliation errors per controller",
                Family::default()
            ),
            reconcile_time: reg!(
                "controller_runtime_reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                HistogramFamily::new_with_constructor(reconcile_histogram as fn() -> Histogram)
            ),
            active_workers: reg!(
                "controller_runtime_active_workers",
                "Number of currently used workers per controller",
                Family::default()
            ),
            max_concurrent: reg!(
                "controller_runtime_max_concurrent_reconciles",
                "Maximum number of concurrent reconciles per controller",
                Family::default()
            ),
            queue_depth: reg!(
                "workqueue_depth",
                "Current depth of workqueue",
                Family::default()
            ),
            queue_adds: reg!(
                "workqueue_adds",
                "Total number of adds handled by workqueue",
                Family::default()
            ),
            queue_duration: reg!(
                "workqueue_queue_duration_seconds",
                "How long in seconds an item stays in workqueue before being requested",
                HistogramFamily::new_with_constructor(workqueue_histogram as fn() -> Histogram)
            ),
            work_duration: reg!(
                "workqueue_work_duration_seconds",
                "How long in seconds processing an item from workqueue takes",
                HistogramFamily::new_with_constructor(workqueue_histogram as fn() -> Histogram)
            ),
            queue_retries: reg!(
                "workqueue_retries",
                "Total number of retries handled by workqueue",
                Family::default()
            ),
            queue_unfinished: reg!(
                "workqueue_unfinished_work_seconds",
                "How many seconds of work has been done that is in progress and hasn't been observed by work_duration. Large values indicate stuck threads. One can deduce the number of stuck threads by observing the rate at which this increases.",
                Family::default()
            ),
            queue_longest: reg!(
                "workqueue_longest_running_processor_seconds",
                "How many seconds has the longest running processor for workqueue been running.",
                Family::default()
            ),
            leader: reg!(
                "leader_election_master_status",
                "Gauge of if the reporting system is master of the relevant lease, 0 indicates backup, 1 indicates master. 'name' is the string used to identify the lease",
                Family::default()
            ),
            leader_transitions: reg!(
                "rekon_leader_election_transitions",
                "Number of times this process gained or lost leadership of the lease",
                Family::default()
            ),
            leaderless: reg!(
                "rekon_leader_election_leaderless_seconds",
                "When this process acquired the lease: how long it had been without a valid holder, as this process observed it (expired or released until acquired)",
                HistogramFamily::new_with_constructor(reconcile_histogram as fn() -> Histogram)
            ),
            shards_held: reg!(
                "rekon_shards_held",
                "Number of shard Leases this replica holds (sharded mode)",
                Gauge::default()
            ),
            watch_restarts: reg!(
                "rekon_watch_restarts",
                "Number of times a watch was restarted (error, expiry, reconnect) per cluster and resource",
                Family::default()
            ),
            cache_objects: reg!(
                "rekon_cache_objects",
                "Objects in the shared cache per cluster and resource",
                Family::default()
            ),
            watch_failed: reg!(
                "rekon_watch_failed",
                "1 while the watch of a resource in a cluster fails for a reason other than connectivity (403 RBAC, 404 CRD not installed, ...); the plugins that need it are degraded",
                Family::default()
            ),
            cluster_engaged: reg!(
                "rekon_cluster_engaged",
                "1 for each cluster the host is engaged with",
                Family::default()
            ),
            cluster_reachable: reg!(
                "rekon_cluster_reachable",
                "1 when the cluster answers, 0 when its requests are failing",
                Family::default()
            ),
            plugin_loads: reg!(
                "rekon_plugin_loads",
                "Number of successful plugin loads (including replacements)",
                Family::default()
            ),
            plugin_load_failures: reg!(
                "rekon_plugin_load_failures",
                "Number of plugin files that failed to load (label: plugin name or file stem)",
                Family::default()
            ),
            plugin_info: reg!(
                "rekon_plugin_info",
                "1 for the version of each loaded plugin",
                Family::default()
            ),
            wasm_call_time: reg!(
                "rekon_wasm_call_duration_seconds",
                "Wall time of one call into a plugin (register, reconcile, map)",
                HistogramFamily::new_with_constructor(wasm_histogram as fn() -> Histogram)
            ),
            wasm_call_failures: reg!(
                "rekon_wasm_call_failures",
                "Calls into a plugin that trapped, timed out or ran out of memory",
                Family::default()
            ),
            writer_actions: reg!(
                "rekon_writer_actions",
                "Actions executed by the writer per plugin, cluster, action kind and result",
                Family::default()
            ),
            record_cases: reg!(
                "rekon_record_cases",
                "Reconciles recorded as case files (rekon run --record)",
                Family::default()
            ),
            record_dropped: reg!(
                "rekon_record_dropped",
                "Reconciles not recorded (kind: queue_full, size_cap, write_error)",
                Family::default()
            ),
            shadow_reconciles: reg!(
                "rekon_shadow_reconciles",
                "Shadow reconciles per plugin by result (kind: identical, or the divergence: actions, outcome, error, timeout, memory)",
                Family::default()
            ),
            shadow_dropped: reg!(
                "rekon_shadow_dropped",
                "Shadow reconciles skipped because the shadow queue was full",
                Family::default()
            ),
            shadow_call_time: reg!(
                "rekon_shadow_call_duration_seconds",
                "Time of one shadow reconcile (a synchronous wasm call: its CPU time)",
                HistogramFamily::new_with_constructor(wasm_histogram as fn() -> Histogram)
            ),
            plugin_fetches: reg!(
                "rekon_plugin_fetch",
                "Plugin fetches from OCI registries by outcome: pulled, cached (served from the disk cache), or the failure's reason (registry_unreachable, not_found, unauthorized, digest_mismatch, too_large, not_a_wasm_artifact, invalid_reference, cache_io)",
                Family::default()
            ),
            plugin_fetch_time: reg!(
                "rekon_plugin_fetch_duration_seconds",
                "Wall time of one plugin fetch from an OCI registry (retries included)",
                fetch_histogram()
            ),
            plugin_versions: parking_lot::Mutex::default(),
            recent_divergences: parking_lot::Mutex::default(),
            registry,
        };
        Self {
            inner: Arc::new(inner),
        }
    }

    /// The process-wide metrics: what `rekon run` serves on `/metrics`, and
    /// what the engine's hot paths (queue, writer, caches, plugin calls)
    /// report to without a handle being passed through every constructor
    /// (controller-runtime's global registry, same reason). Tests that need
    /// isolated figures use [`Metrics::new`].
    #[must_use]
    pub fn global() -> &'static Metrics {
        static GLOBAL: std::sync::OnceLock<Metrics> = std::sync::OnceLock::new();
        GLOBAL.get_or_init(Metrics::new)
    }

    /// Encode every series in the OpenMetrics text format ([`CONTENT_TYPE`]).
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }

    // ----- controller ------------------------------------------------------

    /// A reconcile of `controller` (plugin) in `cluster` starts: counts an
    /// active worker until the returned timer is finished or dropped.
    #[must_use = "finish the timer with the reconcile's result"]
    pub fn reconcile_started(&self, controller: &str, cluster: &str) -> ReconcileTimer {
        self.active_workers(controller).inc();
        ReconcileTimer {
            metrics: self.clone(),
            controller: controller.to_owned(),
            cluster: cluster.to_owned(),
            started: Instant::now(),
        }
    }

    /// Record a finished reconcile whose duration was measured elsewhere.
    pub fn observe_reconcile(
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
        self.inner
            .reconcile_total
            .get_or_create(&ReconcileLabels {
                controller: labels.controller.clone(),
                cluster: labels.cluster.clone(),
                result: result.as_label(),
            })
            .inc();
        match result {
            ReconcileResult::Error => {
                self.inner.reconcile_errors.get_or_create(&labels).inc();
            }
            ReconcileResult::TerminalError => {
                self.inner.reconcile_errors.get_or_create(&labels).inc();
                self.inner.terminal_errors.get_or_create(&labels).inc();
            }
            _ => {}
        }
        self.inner
            .reconcile_time
            .get_or_create(&labels)
            .observe(duration.as_secs_f64());
    }

    fn active_workers(&self, controller: &str) -> prometheus_client::metrics::gauge::Gauge {
        self.inner
            .active_workers
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .clone()
    }

    /// The concurrency limit of `controller`.
    pub fn set_max_concurrent_reconciles(&self, controller: &str, max: u32) {
        self.inner
            .max_concurrent
            .get_or_create(&ControllerLabels {
                controller: controller.to_owned(),
            })
            .set(i64::from(max));
    }

    /// The work-queue metrics of `controller` (a cheap handle; keep it).
    #[must_use]
    pub fn queue(&self, controller: &str) -> QueueMetrics {
        let labels = QueueLabels {
            name: controller.to_owned(),
            controller: controller.to_owned(),
        };
        QueueMetrics {
            depth: self.inner.queue_depth.get_or_create(&labels).clone(),
            adds: self.inner.queue_adds.get_or_create(&labels).clone(),
            queue_duration: self.inner.queue_duration.get_or_create(&labels).clone(),
            work_duration: self.inner.work_duration.get_or_create(&labels).clone(),
            retries: self.inner.queue_retries.get_or_create(&labels).clone(),
            unfinished: self.inner.queue_unfinished.get_or_create(&labels).clone(),
            longest: self.inner.queue_longest.get_or_create(&labels).clone(),
        }
    }

    /// A plugin was removed: drop its per-controller series so stale values
    /// (active workers, depth, loaded version) do not linger.
    pub fn forget_controller(&self, controller: &str) {
        let c = ControllerLabels {
            controller: controller.to_owned(),
        };
        self.inner.active_workers.remove(&c);
        self.inner.max_concurrent.remove(&c);
        let q = QueueLabels {
            name: controller.to_owned(),
            controller: controller.to_owned(),
        };
        self.inner.queue_depth.remove(&q);
        self.inner.queue_unfinished.remove(&q);
        self.inner.queue_longest.remove(&q);
    }

    // ----- leader election -------------------------------------------------

    /// Whether this process leads the lease `name` (`namespace/name`).
    pub fn set_leader(&self, name: &str, leader: bool) {
        let labels = NameLabels {
            name: name.to_owned(),
        };
        let gauge = self.inner.leader.get_or_create(&labels);
        let new = i64::from(leader);
        if gauge.set(new) != new {
            self.inner.leader_transitions.get_or_create(&labels).inc();
        }
    }

    /// This process acquired lease `name` after it had been without a valid
    /// holder for `leaderless` (as observed here).
    pub fn observe_leaderless(&self, name: &str, leaderless: Duration) {
        self.inner
            .leaderless
            .get_or_create(&NameLabels {
                name: name.to_owned(),
            })
            .observe(leaderless.as_secs_f64());
    }

    /// How many shard Leases this replica holds.
    pub fn set_shards_held(&self, held: usize) {
        self.inner
            .shards_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    // ----- clusters and caches ---------------------------------------------

    /// A watch of `resource` (e.g. `batch/v1/jobs`) in `cluster` restarted.
    pub fn watch_restarted(&self, cluster: &str, resource: &str) {
        self.inner
            .watch_restarts
            .get_or_create(&ClusterResourceLabels {
                cluster: cluster.to_owned(),
                resource: resource.to_owned(),
            })
            .inc();
    }

    /// The cache of `resource` in `cluster` now holds `count` objects.
    pub fn set_cache_objects(&self, cluster: &str, resource: &str, count: usize) {
        self.inner
            .cache_objects
            .get_or_create(&ClusterResourceLabels {
                cluster: cluster.to_owned(),
                resource: resource.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    /// The cache of `resource` in `cluster` was dropped.
    pub fn forget_cache(&self, cluster: &str, resource: &str) {
        let labels = ClusterResourceLabels {
            cluster: cluster.to_owned(),
            resource: resource.to_owned(),
        };
        self.inner.cache_objects.remove(&labels);
        self.inner.watch_failed.remove(&labels);
    }

    /// The watch of `resource` in `cluster` fails for a non-connectivity
    /// reason (`true`) or serves again (`false`).
    pub fn set_watch_failed(&self, cluster: &str, resource: &str, failed: bool) {
        self.inner
            .watch_failed
            .get_or_create(&ClusterResourceLabels {
                cluster: cluster.to_owned(),
                resource: resource.to_owned(),
            })
            .set(i64::from(failed));
    }

    /// `cluster` was engaged (`true`) or disengaged (`false`).
    pub fn set_cluster_engaged(&self, cluster: &str, engaged: bool) {
        let labels = ClusterLabels {
            cluster: cluster.to_owned(),
        };
        if engaged {
            self.inner.cluster_engaged.get_or_create(&labels).set(1);
            self.inner.cluster_reachable.get_or_create(&labels).set(1);
        } else {
            self.inner.cluster_engaged.remove(&labels);
            self.inner.cluster_reachable.remove(&labels);
        }
    }

    /// Whether `cluster` currently answers.
    pub fn set_cluster_reachable(&self, cluster: &str, reachable: bool) {
        self.inner
            .cluster_reachable
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(reachable));
    }

    // ----- plugins ---------------------------------------------------------

    /// `plugin` at `version` was loaded (first load or replacement).
    pub fn plugin_loaded(&self, plugin: &str, version: &str) {
        let labels = PluginVersionLabels {
            plugin: plugin.to_owned(),
            version: version.to_owned(),
        };
        self.inner.plugin_loads.get_or_create(&labels).inc();
        self.set_plugin_info(plugin, Some(version));
    }

    /// Loading `plugin` (its name, or the file stem when the name is unknown) failed.
    pub fn plugin_load_failed(&self, plugin: &str) {
        self.inner
            .plugin_load_failures
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    /// `plugin` was removed.
    pub fn plugin_removed(&self, plugin: &str) {
        self.set_plugin_info(plugin, None);
        self.forget_controller(plugin);
    }

    fn set_plugin_info(&self, plugin: &str, version: Option<&str>) {
        // Exactly one series per loaded plugin: drop the replaced version's.
        let family = &self.inner.plugin_info;
        let old = {
            let mut loaded = self.inner.plugin_versions.lock();
            match version {
                Some(v) => loaded.insert(plugin.to_owned(), v.to_owned()),
                None => loaded.remove(plugin),
            }
        };
        let stale =
            old.filter(|old| Some(old.as_str()) != version)
                .map(|old| PluginVersionLabels {
                    plugin: plugin.to_owned(),
                    version: old,
                });
        if let Some(labels) = stale {
            family.remove(&labels);
        }
        if let Some(version) = version {
            family
                .get_or_create(&PluginVersionLabels {
                    plugin: plugin.to_owned(),
                    version: version.to_owned(),
                })
                .set(1);
        }
    }

    /// One call into `plugin`'s exported `function` took `duration`.
    pub fn observe_wasm_call(&self, plugin: &str, function: &str, duration: Duration) {
        self.inner
            .wasm_call_time
            .get_or_create(&PluginFunctionLabels {
                plugin: plugin.to_owned(),
                function: function.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    /// A call into `plugin` failed in the sandbox (`reason`: `trap`, `timeout`, `oom`, ...).
    pub fn wasm_call_failed(&self, plugin: &str, function: &str, reason: &str) {
        self.inner
            .wasm_call_failures
            .get_or_create(&WasmFailureLabels {
                plugin: plugin.to_owned(),
                function: function.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    // ----- record and shadow -----------------------------------------------

    /// A reconcile of `plugin` was written as a case file.
    pub fn record_case(&self, plugin: &str) {
        self.inner
            .record_cases
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    /// A reconcile of `plugin` was not recorded (`reason`: `queue_full`,
    /// `size_cap`, `write_error`).
    pub fn record_dropped(&self, plugin: &str, reason: &str) {
        self.inner
            .record_dropped
            .get_or_create(&PluginKindLabels {
                plugin: plugin.to_owned(),
                kind: reason.to_owned(),
            })
            .inc();
    }

    /// A shadow reconcile of `plugin` ran: `kind` is `identical` or the
    /// divergence (`actions`, `outcome`, `error`, `timeout`, `memory`).
    pub fn shadow_reconciled(&self, plugin: &str, kind: &str, took: Duration) {
        let labels = PluginLabels {
            plugin: plugin.to_owned(),
        };
        self.inner
            .shadow_call_time
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.inner
            .shadow_reconciles
            .get_or_create(&PluginKindLabels {
                plugin: plugin.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    /// Keeps `divergence` among the last [`RECENT_DIVERGENCES`] of
    /// `plugin`'s shadow (its diff cut to 2 KiB at a line end).
    pub fn note_shadow_divergence(&self, plugin: &str, mut divergence: Divergence) {
        if divergence.diff.len() > DIVERGENCE_DIFF_BYTES {
            let mut cut = DIVERGENCE_DIFF_BYTES;
            while !divergence.diff.is_char_boundary(cut) {
                cut -= 1;
            }
            let cut = divergence.diff[..cut].rfind('\n').map_or(cut, |i| i + 1);
            divergence.diff.truncate(cut);
            divergence.diff.push_str("…\n");
        }
        let mut recent = self.inner.recent_divergences.lock();
        let list = recent.entry(plugin.to_owned()).or_default();
        list.push_back(divergence);
        while list.len() > RECENT_DIVERGENCES {
            list.pop_front();
        }
    }

    /// The last few divergences of `plugin`'s shadow, oldest first.
    #[must_use]
    pub fn recent_shadow_divergences(&self, plugin: &str) -> Vec<Divergence> {
        self.inner
            .recent_divergences
            .lock()
            .get(plugin)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Forgets the recent divergences of `plugin` (a new candidate).
    pub fn clear_recent_shadow_divergences(&self, plugin: &str) {
        self.inner.recent_divergences.lock().remove(plugin);
    }

    /// Shadow reconciles of `plugin` so far, and how many of them diverged
    /// (every kind but `identical`), as counted by [`Self::shadow_reconciled`].
    #[must_use]
    pub fn shadow_counts(&self, plugin: &str) -> (u64, u64) {
        const KINDS: &[&str] = &[
            "identical",
            "actions",
            "outcome",
            "error",
            "timeout",
            "memory",
        ];
        let count = |kind: &str| {
            self.inner
                .shadow_reconciles
                .get_or_create(&PluginKindLabels {
                    plugin: plugin.to_owned(),
                    kind: kind.to_owned(),
                })
                .get()
        };
        let total: u64 = KINDS.iter().map(|k| count(k)).sum();
        (total, total - count("identical"))
    }

    /// A shadow reconcile of `plugin` was skipped (the shadow queue was full).
    pub fn shadow_dropped(&self, plugin: &str) {
        self.inner
            .shadow_dropped
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    // ----- plugin sources --------------------------------------------------

    /// One plugin fetch from an OCI registry ended with `outcome` (`pulled`,
    /// `cached`, or a failure's reason) after `took`.
    pub fn plugin_fetched(&self, outcome: &str, took: Duration) {
        self.inner
            .plugin_fetches
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
        self.inner.plugin_fetch_time.observe(took.as_secs_f64());
    }

    // ----- writer ----------------------------------------------------------

    /// The writer executed an `action` (`apply`, `patch`, `delete`, `create`,
    /// `event`) of `plugin` in `cluster`; `result` is `success`, `error`,
    /// `denied` (capability check), `not_leader` or `unreachable` (refused
    /// without a request: the cluster is known to be down).
    pub fn writer_action(&self, plugin: &str, cluster: &str, action: &str, result: &str) {
        self.inner
            .writer_actions
            .get_or_create(&ActionLabels {
                plugin: plugin.to_owned(),
                cluster: cluster.to_owned(),
                action: action.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }
}

/// Measures one reconcile; see [`Metrics::reconcile_started`].
#[derive(Debug)]
pub struct ReconcileTimer {
    metrics: Metrics,
    controller: String,
    cluster: String,
    started: Instant,
}

impl ReconcileTimer {
    /// Record the reconcile's result and duration.
    pub fn finish(self, result: ReconcileResult) {
        self.metrics.observe_reconcile(
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
        self.metrics.active_workers(&self.controller).dec();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn line<'a>(text: &'a str, prefix: &str) -> Option<&'a str> {
        text.lines().find(|l| l.starts_with(prefix))
    }

    #[test]
    fn reconcile_series_use_controller_runtime_names() {
        let m = Metrics::new();
        m.reconcile_started("nodepool", "main")
            .finish(ReconcileResult::Success);
        m.reconcile_started("nodepool", "main")
            .finish(ReconcileResult::Error);
        m.reconcile_started("nodepool", "edge")
            .finish(ReconcileResult::TerminalError);
        m.set_max_concurrent_reconciles("nodepool", 4);
        let text = m.encode();
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"nodepool\",cluster=\"main\",result=\"success\"} 1\n"
        ));
        assert!(text.contains(
            "controller_runtime_reconcile_total{controller=\"nodepool\",cluster=\"main\",result=\"error\"} 1\n"
        ));
        assert!(text.contains(
            "controller_runtime_reconcile_errors_total{controller=\"nodepool\",cluster=\"edge\"} 1\n"
        ));
        assert!(text.contains(
            "controller_runtime_terminal_reconcile_errors_total{controller=\"nodepool\",cluster=\"edge\"} 1\n"
        ));
        assert!(text.contains(
            "controller_runtime_reconcile_time_seconds_count{controller=\"nodepool\",cluster=\"main\"} 2\n"
        ));
        assert!(
            text.contains(
                "controller_runtime_max_concurrent_reconciles{controller=\"nodepool\"} 4\n"
            )
        );
        // Every timer finished or dropped: no active worker left.
        assert!(text.contains("controller_runtime_active_workers{controller=\"nodepool\"} 0\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn active_workers_count_running_reconciles() {
        let m = Metrics::new();
        let a = m.reconcile_started("p", "main");
        let _b = m.reconcile_started("p", "main");
        assert!(
            m.encode()
                .contains("controller_runtime_active_workers{controller=\"p\"} 2\n")
        );
        a.finish(ReconcileResult::Requeue);
        assert!(
            m.encode()
                .contains("controller_runtime_active_workers{controller=\"p\"} 1\n")
        );
    }

    #[test]
    fn workqueue_series() {
        let m = Metrics::new();
        let q = m.queue("test-fanout");
        q.add();
        q.add();
        q.set_depth(1);
        q.retry();
        q.observe_queue_duration(Duration::from_millis(3));
        let text = m.encode();
        assert!(
            text.contains(
                "workqueue_adds_total{name=\"test-fanout\",controller=\"test-fanout\"} 2\n"
            )
        );
        assert!(
            text.contains("workqueue_depth{name=\"test-fanout\",controller=\"test-fanout\"} 1\n")
        );
        assert!(text.contains(
            "workqueue_retries_total{name=\"test-fanout\",controller=\"test-fanout\"} 1\n"
        ));
        assert!(text.contains(
            "workqueue_queue_duration_seconds_count{name=\"test-fanout\",controller=\"test-fanout\"} 1\n"
        ));
        // Two reconciles in flight, started 3 s and 1 s ago.
        let now = Instant::now();
        q.set_in_flight(
            [now - Duration::from_secs(3), now - Duration::from_secs(1)],
            now,
        );
        let text = m.encode();
        assert!(text.contains(
            "workqueue_longest_running_processor_seconds{name=\"test-fanout\",controller=\"test-fanout\"} 3.0\n"
        ), "{text}");
        assert!(text.contains(
            "workqueue_unfinished_work_seconds{name=\"test-fanout\",controller=\"test-fanout\"} 4.0\n"
        ));
        q.set_in_flight(std::iter::empty(), now);
        assert!(m.encode().contains(
            "workqueue_longest_running_processor_seconds{name=\"test-fanout\",controller=\"test-fanout\"} 0.0\n"
        ));
    }

    #[test]
    fn leader_gauge_and_transitions() {
        let m = Metrics::new();
        m.set_leader("rekon-system/rekon", true);
        m.set_leader("rekon-system/rekon", true);
        m.set_leader("rekon-system/rekon", false);
        let text = m.encode();
        assert!(text.contains("leader_election_master_status{name=\"rekon-system/rekon\"} 0\n"));
        assert!(
            text.contains(
                "rekon_leader_election_transitions_total{name=\"rekon-system/rekon\"} 2\n"
            )
        );
    }

    #[test]
    fn plugin_fetches_by_outcome() {
        let m = Metrics::new();
        m.plugin_fetched("pulled", Duration::from_millis(120));
        m.plugin_fetched("cached", Duration::from_millis(2));
        m.plugin_fetched("registry_unreachable", Duration::from_secs(3));
        m.plugin_fetched("registry_unreachable", Duration::from_secs(3));
        let text = m.encode();
        assert!(text.contains("rekon_plugin_fetch_total{outcome=\"pulled\"} 1\n"));
        assert!(text.contains("rekon_plugin_fetch_total{outcome=\"cached\"} 1\n"));
        assert!(text.contains("rekon_plugin_fetch_total{outcome=\"registry_unreachable\"} 2\n"));
        assert!(text.contains("rekon_plugin_fetch_duration_seconds_count 4\n"));
    }

    #[test]
    fn plugin_info_keeps_only_the_loaded_version() {
        let m = Metrics::new();
        m.plugin_loaded("nodepool", "0.1.0");
        m.plugin_loaded("nodepool", "0.2.0");
        m.plugin_load_failed("broken");
        let text = m.encode();
        assert!(text.contains("rekon_plugin_info{plugin=\"nodepool\",version=\"0.2.0\"} 1\n"));
        assert!(
            line(
                &text,
                "rekon_plugin_info{plugin=\"nodepool\",version=\"0.1.0\"}"
            )
            .is_none()
        );
        assert!(
            text.contains("rekon_plugin_loads_total{plugin=\"nodepool\",version=\"0.1.0\"} 1\n")
        );
        assert!(text.contains("rekon_plugin_load_failures_total{plugin=\"broken\"} 1\n"));
        m.plugin_removed("nodepool");
        assert!(line(&m.encode(), "rekon_plugin_info{plugin=\"nodepool\"").is_none());
    }

    #[test]
    fn cluster_and_cache_series() {
        let m = Metrics::new();
        m.set_cluster_engaged("edge", true);
        m.set_cache_objects("edge", "batch/v1/jobs", 3);
        m.watch_restarted("edge", "batch/v1/jobs");
        m.observe_wasm_call("nodepool", "reconcile", Duration::from_micros(700));
        m.wasm_call_failed("nodepool", "reconcile", "timeout");
        let text = m.encode();
        assert!(text.contains("rekon_cluster_engaged{cluster=\"edge\"} 1\n"));
        assert!(
            text.contains("rekon_cache_objects{cluster=\"edge\",resource=\"batch/v1/jobs\"} 3\n")
        );
        assert!(text.contains(
            "rekon_watch_restarts_total{cluster=\"edge\",resource=\"batch/v1/jobs\"} 1\n"
        ));
        assert!(text.contains(
            "rekon_wasm_call_duration_seconds_count{plugin=\"nodepool\",function=\"reconcile\"} 1\n"
        ));
        assert!(text.contains(
            "rekon_wasm_call_failures_total{plugin=\"nodepool\",function=\"reconcile\",reason=\"timeout\"} 1\n"
        ));
        m.set_cluster_engaged("edge", false);
        assert!(line(&m.encode(), "rekon_cluster_engaged{cluster=\"edge\"}").is_none());
    }
}
