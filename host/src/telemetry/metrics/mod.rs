//! Prometheus metrics of the host, served on `/metrics`: controller-runtime's
//! families under its names (`runtime_families.rs`), so existing dashboards
//! and alerts work unchanged, and rekon's own, prefixed `rekon_`
//! (`rekon.rs`). [`Metrics`] is one registry holding both; it is cheap to
//! clone (one `Arc`) and every method only touches atomics behind a read
//! lock, so the engine and the plugin runtime call it on their hot paths.
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

mod registered;
mod rekon;
mod runtime_families;
mod webhook;

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::registry::Registry;

pub use rekon::{Divergence, RECENT_DIVERGENCES};
pub use runtime_families::{QueueMetrics, ReconcileResult, ReconcileTimer};
pub use webhook::{
    AdmissionDivergence, RECENT_ADMISSION_DIVERGENCES, ShadowVerdict, ShadowVerdictCounts,
    WebhookTimer,
};

use rekon::RekonFamilies;
use runtime_families::RuntimeFamilies;
use webhook::WebhookFamilies;

/// Content type of [`Metrics::encode`] (OpenMetrics text, which Prometheus scrapes).
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

struct Inner {
    registry: Registry,
    /// Shared with every [`ReconcileTimer`], which reports to it when done.
    runtime: Arc<RuntimeFamilies>,
    rekon: RekonFamilies,
    webhook: WebhookFamilies,
}

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
        let runtime = Arc::new(RuntimeFamilies::register(&mut registry));
        let rekon = RekonFamilies::register(&mut registry);
        let webhook = WebhookFamilies::register(&mut registry);
        Self {
            inner: Arc::new(Inner {
                registry,
                runtime,
                rekon,
                webhook,
            }),
        }
    }

    /// Encode every series in the OpenMetrics text format ([`CONTENT_TYPE`]).
    #[must_use]
    pub fn encode(&self) -> String {
        let mut out = String::with_capacity(8 * 1024);
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.inner.registry);
        out
    }

    // ----- controller-runtime's families ----------------------------------

    /// A reconcile of `controller` (plugin) in `cluster` starts: counts an
    /// active worker until the returned timer is finished or dropped.
    #[must_use = "finish the timer with the reconcile's result"]
    pub fn reconcile_started(&self, controller: &str, cluster: &str) -> ReconcileTimer {
        self.inner.runtime.reconcile_started(controller, cluster)
    }

    /// Record a finished reconcile whose duration was measured elsewhere.
    pub fn observe_reconcile(
        &self,
        controller: &str,
        cluster: &str,
        result: ReconcileResult,
        duration: Duration,
    ) {
        self.inner
            .runtime
            .observe_reconcile(controller, cluster, result, duration)
    }

    /// The concurrency limit of `controller`.
    pub fn set_max_concurrent_reconciles(&self, controller: &str, max: u32) {
        self.inner
            .runtime
            .set_max_concurrent_reconciles(controller, max)
    }

    /// The work-queue metrics of `controller` (a cheap handle; keep it).
    #[must_use]
    pub fn queue(&self, controller: &str) -> QueueMetrics {
        self.inner.runtime.queue(controller)
    }

    /// A plugin was removed: drop its per-controller series so stale values
    /// (active workers, depth, loaded version) do not linger.
    pub fn forget_controller(&self, controller: &str) {
        self.inner.runtime.forget_controller(controller)
    }

    /// Whether this process leads the lease `name` (`namespace/name`).
    pub fn set_leader(&self, name: &str, leader: bool) {
        if self.inner.runtime.set_leader(name, leader) {
            self.inner.rekon.leader_transition(name);
        }
    }

    /// An admission request on `webhook` (the path served) starts: in
    /// flight until the returned timer is finished with its HTTP code.
    pub fn webhook_started(&self, webhook: &str) -> WebhookTimer {
        let (in_flight, latency) = self.inner.webhook.started(webhook);
        WebhookTimer {
            webhook: webhook.to_owned(),
            in_flight,
            latency,
            started: std::time::Instant::now(),
            metrics: self.clone(),
        }
    }

    /// `plugin`'s `kind` webhook (`validate`, `mutate`) answered with
    /// `verdict` (`allowed`, `patched`, `denied`, `failed`).
    pub fn admission_verdict(&self, plugin: &str, kind: &'static str, verdict: &'static str) {
        self.inner.webhook.verdict(plugin, kind, verdict)
    }

    /// The shadow of `plugin` answered a `kind` review beside the serving
    /// version with `verdict`; a difference is kept among the last
    /// [`RECENT_ADMISSION_DIVERGENCES`] (its message cut to 512 bytes).
    pub fn admission_shadow_verdict(
        &self,
        plugin: &str,
        kind: &'static str,
        verdict: ShadowVerdict,
        divergence: Option<AdmissionDivergence>,
    ) {
        self.inner
            .webhook
            .shadow_verdict(plugin, kind, verdict, divergence)
    }

    /// The shadow admission verdicts of `plugin` so far, per result.
    #[must_use]
    pub fn admission_shadow_counts(&self, plugin: &str) -> ShadowVerdictCounts {
        self.inner.webhook.shadow_verdict_counts(plugin)
    }

    /// The last few admission differences of `plugin`'s shadow, oldest first.
    #[must_use]
    pub fn recent_admission_divergences(&self, plugin: &str) -> Vec<AdmissionDivergence> {
        self.inner.webhook.recent_shadow_divergences(plugin)
    }

    /// Forgets the recent admission differences of `plugin` (a new candidate).
    pub fn clear_recent_admission_divergences(&self, plugin: &str) {
        self.inner.webhook.clear_recent_shadow_divergences(plugin)
    }

    // ----- rekon's own ------------------------------------------------------

    /// This process acquired lease `name` after it had been without a valid
    /// holder for `leaderless` (as observed here).
    pub fn observe_leaderless(&self, name: &str, leaderless: Duration) {
        self.inner.rekon.observe_leaderless(name, leaderless)
    }

    /// How many shard Leases this replica holds.
    pub fn set_shards_held(&self, held: usize) {
        self.inner.rekon.set_shards_held(held)
    }

    /// A watch of `resource` (e.g. `batch/v1/jobs`) in `cluster` restarted.
    pub fn watch_restarted(&self, cluster: &str, resource: &str) {
        self.inner.rekon.watch_restarted(cluster, resource)
    }

    /// The cache of `resource` in `cluster` now holds `count` objects.
    pub fn set_cache_objects(&self, cluster: &str, resource: &str, count: usize) {
        self.inner.rekon.set_cache_objects(cluster, resource, count)
    }

    /// The cache of `resource` in `cluster` was dropped.
    pub fn forget_cache(&self, cluster: &str, resource: &str) {
        self.inner.rekon.forget_cache(cluster, resource)
    }

    /// The watch of `resource` in `cluster` fails for a non-connectivity
    /// reason (`true`) or serves again (`false`).
    pub fn set_watch_failed(&self, cluster: &str, resource: &str, failed: bool) {
        self.inner.rekon.set_watch_failed(cluster, resource, failed)
    }

    /// `cluster` was engaged (`true`) or disengaged (`false`).
    pub fn set_cluster_engaged(&self, cluster: &str, engaged: bool) {
        self.inner.rekon.set_cluster_engaged(cluster, engaged)
    }

    /// Whether `cluster` currently answers.
    pub fn set_cluster_reachable(&self, cluster: &str, reachable: bool) {
        self.inner.rekon.set_cluster_reachable(cluster, reachable)
    }

    /// `plugin` at `version` was loaded (first load or replacement).
    pub fn plugin_loaded(&self, plugin: &str, version: &str) {
        self.inner.rekon.plugin_loaded(plugin, version)
    }

    /// Loading `plugin` (its name, or the file stem when the name is unknown) failed.
    pub fn plugin_load_failed(&self, plugin: &str) {
        self.inner.rekon.plugin_load_failed(plugin)
    }

    /// `plugin` was removed.
    pub fn plugin_removed(&self, plugin: &str) {
        self.inner.rekon.set_plugin_info(plugin, None);
        self.inner.runtime.forget_controller(plugin);
    }

    /// One call into `plugin`'s exported `function` took `duration`.
    pub fn observe_wasm_call(&self, plugin: &str, function: &str, duration: Duration) {
        self.inner
            .rekon
            .observe_wasm_call(plugin, function, duration)
    }

    /// A call into `plugin` failed in the sandbox (`reason`: `trap`, `timeout`, `oom`, ...).
    pub fn wasm_call_failed(&self, plugin: &str, function: &str, reason: &str) {
        self.inner.rekon.wasm_call_failed(plugin, function, reason)
    }

    /// The host stopped a call of `plugin` at a bound (`reason`:
    /// `TooManyActions`, `ObjectTooLarge`, `OutcomeTooLarge`, `TooDeep`,
    /// `InvalidJson`, `Timeout`, `OutOfMemory`, `InstanceSlots`, `Forbidden`).
    pub fn plugin_contained(&self, plugin: &str, reason: &str) {
        self.inner.rekon.plugin_contained(plugin, reason)
    }

    /// `plugin`'s calls are now admitted one per `interval` (zero: its
    /// backoff lifted); `entered`: it was not backed off before (counted
    /// in `rekon_plugin_backoff_total`).
    pub fn plugin_backoff(&self, plugin: &str, interval: std::time::Duration, entered: bool) {
        self.inner.rekon.plugin_backoff(plugin, interval, entered)
    }

    /// A reconcile of `plugin` was written as a case file.
    pub fn record_case(&self, plugin: &str) {
        self.inner.rekon.record_case(plugin)
    }

    /// A reconcile of `plugin` was not recorded (`reason`: `queue_full`,
    /// `size_cap`, `write_error`).
    pub fn record_dropped(&self, plugin: &str, reason: &str) {
        self.inner.rekon.record_dropped(plugin, reason)
    }

    /// A shadow reconcile of `plugin` ran: `kind` is `identical` or the
    /// divergence (`actions`, `outcome`, `error`, `timeout`, `memory`).
    pub fn shadow_reconciled(&self, plugin: &str, kind: &str, took: Duration) {
        self.inner.rekon.shadow_reconciled(plugin, kind, took)
    }

    /// Keeps `divergence` among the last [`RECENT_DIVERGENCES`] of
    /// `plugin`'s shadow (its diff cut to 2 KiB at a line end).
    pub fn note_shadow_divergence(&self, plugin: &str, divergence: Divergence) {
        self.inner.rekon.note_shadow_divergence(plugin, divergence)
    }

    /// The last few divergences of `plugin`'s shadow, oldest first.
    #[must_use]
    pub fn recent_shadow_divergences(&self, plugin: &str) -> Vec<Divergence> {
        self.inner.rekon.recent_shadow_divergences(plugin)
    }

    /// Forgets the recent divergences of `plugin` (a new candidate).
    pub fn clear_recent_shadow_divergences(&self, plugin: &str) {
        self.inner.rekon.clear_recent_shadow_divergences(plugin)
    }

    /// Shadow reconciles of `plugin` so far, and how many of them diverged
    /// (every kind but `identical`), as counted by [`Self::shadow_reconciled`].
    #[must_use]
    pub fn shadow_counts(&self, plugin: &str) -> (u64, u64) {
        self.inner.rekon.shadow_counts(plugin)
    }

    /// A shadow reconcile of `plugin` was skipped (the shadow queue was full).
    pub fn shadow_dropped(&self, plugin: &str) {
        self.inner.rekon.shadow_dropped(plugin)
    }

    /// One plugin fetch from an OCI registry ended with `outcome` (`pulled`,
    /// `cached`, or a failure's reason) after `took`.
    pub fn plugin_fetched(&self, outcome: &str, took: Duration) {
        self.inner.rekon.plugin_fetched(outcome, took)
    }

    /// A plugin module's native code was had by `path` (`compiled`,
    /// `cached`, `precompiled`) in `took`.
    pub fn plugin_code_loaded(&self, path: &str, took: Duration) {
        self.inner.rekon.plugin_code_loaded(path, took)
    }

    /// Precompiled code shipped with a module was not used: `unverified`,
    /// `engine_mismatch`, `source_mismatch` or `invalid`.
    pub fn plugin_precompiled_refused(&self, outcome: &str) {
        self.inner.rekon.plugin_precompiled_refused(outcome)
    }

    /// A plugin module's signatures were checked: `verified`, or the
    /// failure's outcome (`signature_missing`, `untrusted_key`, …).
    pub fn plugin_verified(&self, outcome: &str) {
        self.inner.rekon.plugin_verified(outcome)
    }

    /// The writer executed an `action` (`apply`, `patch`, `delete`, `create`,
    /// `event`) of `plugin` in `cluster`; `result` is `success`, `error`,
    /// `denied` (capability check), `not_leader` or `unreachable` (refused
    /// without a request: the cluster is known to be down).
    pub fn writer_action(&self, plugin: &str, cluster: &str, action: &str, result: &str) {
        self.inner
            .rekon
            .writer_action(plugin, cluster, action, result)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

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
    fn plugin_verifications_are_counted_by_outcome() {
        let m = Metrics::new();
        m.plugin_verified("verified");
        m.plugin_verified("untrusted_key");
        m.plugin_verified("untrusted_key");
        let text = m.encode();
        assert!(text.contains("rekon_plugin_verification_total{outcome=\"verified\"} 1\n"));
        assert!(text.contains("rekon_plugin_verification_total{outcome=\"untrusted_key\"} 2\n"));
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
        m.plugin_contained("nodepool", "TooManyActions");
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
        assert!(text.contains(
            "rekon_plugin_contained_total{plugin=\"nodepool\",reason=\"TooManyActions\"} 1\n"
        ));
        m.set_cluster_engaged("edge", false);
        assert!(line(&m.encode(), "rekon_cluster_engaged{cluster=\"edge\"}").is_none());
    }
}
