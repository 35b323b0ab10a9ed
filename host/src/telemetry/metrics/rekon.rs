//! rekon's own metric families, prefixed `rekon_`: leadership transitions
//! and shards, watch restarts and cache object counts per cluster and
//! resource, engaged and reachable clusters, plugin loads, load failures
//! and the loaded version, per-call WASM time and failures, recording and
//! shadow reconciles, plugin fetches from OCI registries and signature
//! checks by outcome, and the writer's actions.

use super::registered::registered;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::runtime_families::{HistogramFamily, NameLabels, reconcile_histogram};

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
struct CodePathLabels {
    path: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginReasonLabels {
    plugin: String,
    reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PluginKindLabels {
    plugin: String,
    kind: String,
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

/// rekon's own families, registered after controller-runtime's.
pub(super) struct RekonFamilies {
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
    plugin_contained: Family<PluginReasonLabels, Counter>,
    plugin_backoff: Family<PluginLabels, Counter>,
    plugin_backoff_seconds: Family<PluginLabels, Gauge<f64, std::sync::atomic::AtomicU64>>,
    writer_actions: Family<ActionLabels, Counter>,
    record_cases: Family<PluginLabels, Counter>,
    record_dropped: Family<PluginKindLabels, Counter>,
    shadow_reconciles: Family<PluginKindLabels, Counter>,
    shadow_dropped: Family<PluginLabels, Counter>,
    shadow_call_time: HistogramFamily<PluginLabels>,
    plugin_fetches: Family<OutcomeLabels, Counter>,
    plugin_fetch_time: Histogram,
    plugin_verifications: Family<OutcomeLabels, Counter>,
    plugin_code_time: HistogramFamily<CodePathLabels>,
    precompiled_refused: Family<OutcomeLabels, Counter>,
    /// Loaded version per plugin, to remove a replaced version's
    /// `rekon_plugin_info` series (a `Family` cannot be iterated).
    plugin_versions: parking_lot::Mutex<std::collections::BTreeMap<String, String>>,
    /// The last few shadow divergences per plugin, for the Plugin object's
    /// status (`shadow.recent`).
    recent_divergences: parking_lot::Mutex<
        std::collections::BTreeMap<String, std::collections::VecDeque<Divergence>>,
    >,
}

impl RekonFamilies {
    pub(super) fn register(registry: &mut Registry) -> Self {
        Self {
            leader_transitions: registered(
                registry,
                "rekon_leader_election_transitions",
                "Number of times this process gained or lost leadership of the lease",
                Family::default(),
            ),
            leaderless: registered(
                registry,
                "rekon_leader_election_leaderless_seconds",
                "When this process acquired the lease: how long it had been without a valid holder, as this process observed it (expired or released until acquired)",
                HistogramFamily::new_with_constructor(reconcile_histogram as fn() -> Histogram),
            ),
            shards_held: registered(
                registry,
                "rekon_shards_held",
                "Number of shard Leases this replica holds (sharded mode)",
                Gauge::default(),
            ),
            watch_restarts: registered(
                registry,
                "rekon_watch_restarts",
                "Number of times a watch was restarted (error, expiry, reconnect) per cluster and resource",
                Family::default(),
            ),
            cache_objects: registered(
                registry,
                "rekon_cache_objects",
                "Objects in the shared cache per cluster and resource",
                Family::default(),
            ),
            watch_failed: registered(
                registry,
                "rekon_watch_failed",
                "1 while the watch of a resource in a cluster fails for a reason other than connectivity (403 RBAC, 404 CRD not installed, ...); the plugins that need it are degraded",
                Family::default(),
            ),
            cluster_engaged: registered(
                registry,
                "rekon_cluster_engaged",
                "1 for each cluster the host is engaged with",
                Family::default(),
            ),
            cluster_reachable: registered(
                registry,
                "rekon_cluster_reachable",
                "1 when the cluster answers, 0 when its requests are failing",
                Family::default(),
            ),
            plugin_loads: registered(
                registry,
                "rekon_plugin_loads",
                "Number of successful plugin loads (including replacements)",
                Family::default(),
            ),
            plugin_load_failures: registered(
                registry,
                "rekon_plugin_load_failures",
                "Number of plugin files that failed to load (label: plugin name or file stem)",
                Family::default(),
            ),
            plugin_info: registered(
                registry,
                "rekon_plugin_info",
                "1 for the version of each loaded plugin",
                Family::default(),
            ),
            wasm_call_time: registered(
                registry,
                "rekon_wasm_call_duration_seconds",
                "Wall time of one call into a plugin (register, reconcile, map)",
                HistogramFamily::new_with_constructor(wasm_histogram as fn() -> Histogram),
            ),
            wasm_call_failures: registered(
                registry,
                "rekon_wasm_call_failures",
                "Calls into a plugin that trapped, timed out or ran out of memory",
                Family::default(),
            ),
            plugin_contained: registered(
                registry,
                "rekon_plugin_contained",
                "Plugin calls the host stopped at a bound, per plugin and reason (TooManyActions, ObjectTooLarge, OutcomeTooLarge, TooDeep, InvalidJson, Timeout, OutOfMemory)",
                Family::default(),
            ),
            plugin_backoff: registered(
                registry,
                "rekon_plugin_backoff",
                "Times a plugin was backed off for hitting its bounds again and again (its calls admitted at a reduced rate)",
                Family::default(),
            ),
            plugin_backoff_seconds: registered(
                registry,
                "rekon_plugin_backoff_seconds",
                "The interval between two admitted calls of a backed-off plugin (0: not backed off)",
                Family::default(),
            ),
            writer_actions: registered(
                registry,
                "rekon_writer_actions",
                "Actions executed by the writer per plugin, cluster, action kind and result",
                Family::default(),
            ),
            record_cases: registered(
                registry,
                "rekon_record_cases",
                "Reconciles recorded as case files (rekon run --record)",
                Family::default(),
            ),
            record_dropped: registered(
                registry,
                "rekon_record_dropped",
                "Reconciles not recorded (kind: queue_full, size_cap, write_error)",
                Family::default(),
            ),
            shadow_reconciles: registered(
                registry,
                "rekon_shadow_reconciles",
                "Shadow reconciles per plugin by result (kind: identical, or the divergence: actions, outcome, error, timeout, memory)",
                Family::default(),
            ),
            shadow_dropped: registered(
                registry,
                "rekon_shadow_dropped",
                "Shadow reconciles skipped because the shadow queue was full",
                Family::default(),
            ),
            shadow_call_time: registered(
                registry,
                "rekon_shadow_call_duration_seconds",
                "Time of one shadow reconcile (a synchronous wasm call: its CPU time)",
                HistogramFamily::new_with_constructor(wasm_histogram as fn() -> Histogram),
            ),
            plugin_fetches: registered(
                registry,
                "rekon_plugin_fetch",
                "Plugin fetches from OCI registries by outcome: pulled, cached (served from the disk cache), or the failure's reason (registry_unreachable, not_found, unauthorized, digest_mismatch, too_large, not_a_wasm_artifact, invalid_reference, cache_io)",
                Family::default(),
            ),
            plugin_fetch_time: registered(
                registry,
                "rekon_plugin_fetch_duration_seconds",
                "Wall time of one plugin fetch from an OCI registry (retries included)",
                fetch_histogram(),
            ),
            plugin_verifications: registered(
                registry,
                "rekon_plugin_verification",
                "Signature checks of plugin modules (Plugin objects and --plugins files) by outcome: verified, or why not (signature_missing, signature_invalid, untrusted_key, key_unavailable, registry_error, verification_required)",
                Family::default(),
            ),
            plugin_code_time: registered(
                registry,
                "rekon_plugin_code_load_duration_seconds",
                "Time to get a plugin module's native code, by path: compiled (Cranelift on this host), cached (mapped from the compiled-plugin cache), precompiled (an artifact shipped with the module and verified with it)",
                HistogramFamily::new_with_constructor(fetch_histogram as fn() -> Histogram),
            ),
            precompiled_refused: registered(
                registry,
                "rekon_plugin_precompiled_refused",
                "Precompiled plugin code not used (the module was compiled instead) by outcome: unverified (not covered by a verified signature), engine_mismatch, source_mismatch, too_large, digest_mismatch, download_failed, invalid",
                Family::default(),
            ),
            plugin_versions: parking_lot::Mutex::default(),
            recent_divergences: parking_lot::Mutex::default(),
        }
    }

    pub(super) fn leader_transition(&self, name: &str) {
        self.leader_transitions
            .get_or_create(&NameLabels {
                name: name.to_owned(),
            })
            .inc();
    }

    pub(super) fn observe_leaderless(&self, name: &str, leaderless: Duration) {
        self.leaderless
            .get_or_create(&NameLabels {
                name: name.to_owned(),
            })
            .observe(leaderless.as_secs_f64());
    }

    pub(super) fn set_shards_held(&self, held: usize) {
        self.shards_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    pub(super) fn watch_restarted(&self, cluster: &str, resource: &str) {
        self.watch_restarts
            .get_or_create(&ClusterResourceLabels {
                cluster: cluster.to_owned(),
                resource: resource.to_owned(),
            })
            .inc();
    }

    pub(super) fn set_cache_objects(&self, cluster: &str, resource: &str, count: usize) {
        self.cache_objects
            .get_or_create(&ClusterResourceLabels {
                cluster: cluster.to_owned(),
                resource: resource.to_owned(),
            })
            .set(i64::try_from(count).unwrap_or(i64::MAX));
    }

    pub(super) fn forget_cache(&self, cluster: &str, resource: &str) {
        let labels = ClusterResourceLabels {
            cluster: cluster.to_owned(),
            resource: resource.to_owned(),
        };
        self.cache_objects.remove(&labels);
        self.watch_failed.remove(&labels);
    }

    pub(super) fn set_watch_failed(&self, cluster: &str, resource: &str, failed: bool) {
        self.watch_failed
            .get_or_create(&ClusterResourceLabels {
                cluster: cluster.to_owned(),
                resource: resource.to_owned(),
            })
            .set(i64::from(failed));
    }

    pub(super) fn set_cluster_engaged(&self, cluster: &str, engaged: bool) {
        let labels = ClusterLabels {
            cluster: cluster.to_owned(),
        };
        if engaged {
            self.cluster_engaged.get_or_create(&labels).set(1);
            self.cluster_reachable.get_or_create(&labels).set(1);
        } else {
            self.cluster_engaged.remove(&labels);
            self.cluster_reachable.remove(&labels);
        }
    }

    pub(super) fn set_cluster_reachable(&self, cluster: &str, reachable: bool) {
        self.cluster_reachable
            .get_or_create(&ClusterLabels {
                cluster: cluster.to_owned(),
            })
            .set(i64::from(reachable));
    }

    pub(super) fn plugin_loaded(&self, plugin: &str, version: &str) {
        let labels = PluginVersionLabels {
            plugin: plugin.to_owned(),
            version: version.to_owned(),
        };
        self.plugin_loads.get_or_create(&labels).inc();
        self.set_plugin_info(plugin, Some(version));
    }

    pub(super) fn plugin_load_failed(&self, plugin: &str) {
        self.plugin_load_failures
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    pub(super) fn set_plugin_info(&self, plugin: &str, version: Option<&str>) {
        // Exactly one series per loaded plugin: drop the replaced version's.
        let family = &self.plugin_info;
        let old = {
            let mut loaded = self.plugin_versions.lock();
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

    pub(super) fn observe_wasm_call(&self, plugin: &str, function: &str, duration: Duration) {
        self.wasm_call_time
            .get_or_create(&PluginFunctionLabels {
                plugin: plugin.to_owned(),
                function: function.to_owned(),
            })
            .observe(duration.as_secs_f64());
    }

    pub(super) fn wasm_call_failed(&self, plugin: &str, function: &str, reason: &str) {
        self.wasm_call_failures
            .get_or_create(&WasmFailureLabels {
                plugin: plugin.to_owned(),
                function: function.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(super) fn plugin_contained(&self, plugin: &str, reason: &str) {
        self.plugin_contained
            .get_or_create(&PluginReasonLabels {
                plugin: plugin.to_owned(),
                reason: reason.to_owned(),
            })
            .inc();
    }

    pub(super) fn plugin_backoff(
        &self,
        plugin: &str,
        interval: std::time::Duration,
        entered: bool,
    ) {
        let labels = PluginLabels {
            plugin: plugin.to_owned(),
        };
        if entered {
            self.plugin_backoff.get_or_create(&labels).inc();
        }
        self.plugin_backoff_seconds
            .get_or_create(&labels)
            .set(interval.as_secs_f64());
    }

    pub(super) fn record_case(&self, plugin: &str) {
        self.record_cases
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    pub(super) fn record_dropped(&self, plugin: &str, reason: &str) {
        self.record_dropped
            .get_or_create(&PluginKindLabels {
                plugin: plugin.to_owned(),
                kind: reason.to_owned(),
            })
            .inc();
    }

    pub(super) fn shadow_reconciled(&self, plugin: &str, kind: &str, took: Duration) {
        let labels = PluginLabels {
            plugin: plugin.to_owned(),
        };
        self.shadow_call_time
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.shadow_reconciles
            .get_or_create(&PluginKindLabels {
                plugin: plugin.to_owned(),
                kind: kind.to_owned(),
            })
            .inc();
    }

    pub(super) fn note_shadow_divergence(&self, plugin: &str, mut divergence: Divergence) {
        if divergence.diff.len() > DIVERGENCE_DIFF_BYTES {
            let mut cut = DIVERGENCE_DIFF_BYTES;
            while !divergence.diff.is_char_boundary(cut) {
                cut -= 1;
            }
            let cut = divergence.diff[..cut].rfind('\n').map_or(cut, |i| i + 1);
            divergence.diff.truncate(cut);
            divergence.diff.push_str("…\n");
        }
        let mut recent = self.recent_divergences.lock();
        let list = recent.entry(plugin.to_owned()).or_default();
        list.push_back(divergence);
        while list.len() > RECENT_DIVERGENCES {
            list.pop_front();
        }
    }

    pub(super) fn recent_shadow_divergences(&self, plugin: &str) -> Vec<Divergence> {
        self.recent_divergences
            .lock()
            .get(plugin)
            .map(|l| l.iter().cloned().collect())
            .unwrap_or_default()
    }

    pub(super) fn clear_recent_shadow_divergences(&self, plugin: &str) {
        self.recent_divergences.lock().remove(plugin);
    }

    pub(super) fn shadow_counts(&self, plugin: &str) -> (u64, u64) {
        const KINDS: &[&str] = &[
            "identical",
            "actions",
            "outcome",
            "error",
            "timeout",
            "memory",
        ];
        let count = |kind: &str| {
            self.shadow_reconciles
                .get_or_create(&PluginKindLabels {
                    plugin: plugin.to_owned(),
                    kind: kind.to_owned(),
                })
                .get()
        };
        let total: u64 = KINDS.iter().map(|k| count(k)).sum();
        (total, total - count("identical"))
    }

    pub(super) fn shadow_dropped(&self, plugin: &str) {
        self.shadow_dropped
            .get_or_create(&PluginLabels {
                plugin: plugin.to_owned(),
            })
            .inc();
    }

    pub(super) fn plugin_fetched(&self, outcome: &str, took: Duration) {
        self.plugin_fetches
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
        self.plugin_fetch_time.observe(took.as_secs_f64());
    }

    pub(super) fn plugin_code_loaded(&self, path: &str, took: Duration) {
        self.plugin_code_time
            .get_or_create(&CodePathLabels {
                path: path.to_owned(),
            })
            .observe(took.as_secs_f64());
    }

    pub(super) fn plugin_precompiled_refused(&self, outcome: &str) {
        self.precompiled_refused
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub(super) fn plugin_verified(&self, outcome: &str) {
        self.plugin_verifications
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
    }

    pub(super) fn writer_action(&self, plugin: &str, cluster: &str, action: &str, result: &str) {
        self.writer_actions
            .get_or_create(&ActionLabels {
                plugin: plugin.to_owned(),
                cluster: cluster.to_owned(),
                action: action.to_owned(),
                result: result.to_owned(),
            })
            .inc();
    }
}
