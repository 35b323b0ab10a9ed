//! What every step of a pass shares ([`Context`], kube-runtime's context)
//! and what this replica remembers of each object ([`Entry`]).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::Api;
use kube::runtime::events::Recorder;
use parking_lot::Mutex;

use super::module_source::ModuleSource;
use crate::lease::LeaderGate;
use crate::lease::reports::ReportBoard;
use crate::lease::shard::Shards;
use crate::plugin::PluginRegistry;
use crate::queue::{Backoff, WorkQueue};
use crate::source::plugin_crd::{Plugin, PluginObjectStatus, PluginSpec};
use crate::telemetry::metrics::Metrics;

/// Settings of the Plugin-object source.
#[derive(Clone, Debug)]
pub struct PluginObjectsConfig {
    /// Namespace of pull Secrets and of key Secrets and ConfigMaps (the
    /// host's own).
    pub namespace: String,
    /// Every Plugin must carry `spec.verification` and verify
    /// (`rekon run --require-signatures`); one without is refused.
    pub require_signatures: bool,
    /// Longest wait between retries of a failed fetch.
    pub max_backoff: Duration,
    /// How often shadow counts and containments are written to the
    /// status (and the most often a containment Event is recorded).
    pub status_period: Duration,
    /// Field manager of the status writes (and of the webhook
    /// configurations).
    pub field_manager: String,
    /// Where the webhook configurations the host manages for Plugin
    /// objects that admit point (`--webhook-service`, `--webhook-url-base`);
    /// `None`: the host manages none.
    pub webhooks: Option<crate::source::managed_webhooks::WebhookTarget>,
}

impl PluginObjectsConfig {
    /// Defaults, pull Secrets in `namespace`.
    #[must_use]
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            require_signatures: false,
            max_backoff: Duration::from_secs(300),
            status_period: Duration::from_secs(10),
            field_manager: "rekon.dev/host".to_owned(),
            webhooks: None,
        }
    }

    /// The backoff of a failed pass: 1 s doubling to `max_backoff`.
    #[must_use]
    pub fn backoff(&self) -> Backoff {
        Backoff::new(Duration::from_secs(1), self.max_backoff)
    }
}

/// The origin a Plugin object's module is registered under.
#[must_use]
pub fn origin(name: &str) -> PathBuf {
    PathBuf::from(format!("plugins.rekon.dev/{name}.wasm"))
}

/// The origin of a Plugin object's shadow module.
#[must_use]
pub fn shadow_origin(name: &str) -> PathBuf {
    PathBuf::from(format!("plugins.rekon.dev/{name}.shadow.wasm"))
}

/// The Recorder of Events on Plugin objects.
pub(super) fn recorder(client: kube::Client) -> Recorder {
    let reporter = kube::runtime::events::Reporter {
        controller: crate::telemetry::events::REPORTING_CONTROLLER.to_owned(),
        instance: std::env::var("POD_NAME").ok().filter(|s| !s.is_empty()),
    };
    Recorder::new(client, reporter)
}

/// What every pass shares.
pub(super) struct Context {
    pub(super) api: Api<Plugin>,
    pub(super) secrets: Api<Secret>,
    /// Key ConfigMaps (`spec.verification.keys[].configMapRef`).
    pub(super) config_maps: Api<ConfigMap>,
    /// Events on Plugin objects (verification failures).
    pub(super) events: Recorder,
    pub(super) registry: PluginRegistry,
    pub(super) source: Arc<dyn ModuleSource>,
    pub(super) status_gate: Option<LeaderGate>,
    pub(super) config: PluginObjectsConfig,
    pub(super) metrics: Metrics,
    /// What this replica remembers of each object, by name.
    pub(super) entries: Mutex<HashMap<String, Entry>>,
    /// Object names to pass over: one pass per object at a time, failed
    /// passes retried with [`PluginObjectsConfig::backoff`].
    pub(super) queue: Mutex<WorkQueue<String>>,
    /// Held from reading a status to writing it, so that a refresh never
    /// writes over a newer status a pass wrote meanwhile.
    pub(super) status_writes: tokio::sync::Mutex<()>,
    /// This replica's report and everyone's.
    pub(super) reports: ReportBoard,
    /// The shards this replica holds go into its report.
    pub(super) shards: Option<Shards>,
    /// Writes the webhook configurations of the plugins that admit (when
    /// [`PluginObjectsConfig::webhooks`] says where they point).
    pub(super) webhooks: Option<crate::source::managed_webhooks::ManagedWebhooks>,
    /// When the configurations of Plugin objects deleted while no host ran
    /// may be looked for, and whether they were.
    pub(super) orphan_sweep: OrphanSweep,
}

/// See [`Context::orphan_sweep`].
#[derive(Debug, Default)]
pub(super) struct OrphanSweep {
    /// The watch has listed every Plugin object once.
    pub(super) listed: std::sync::atomic::AtomicBool,
    /// The orphans were removed (once per process).
    pub(super) done: std::sync::atomic::AtomicBool,
}

/// What this replica remembers of one Plugin object.
#[derive(Default)]
pub(super) struct Entry {
    /// The object as last seen.
    pub(super) latest: Option<Arc<Plugin>>,
    /// The spec (and generation) that serves, once one did.
    pub(super) applied: Option<(Option<i64>, PluginSpec)>,
    /// Last status written (to skip identical writes).
    pub(super) written: Option<PluginObjectStatus>,
    /// What this replica serves, for its report.
    pub(super) here: Here,
    /// The shadow candidate now counted (its digest and settings) and the
    /// process's shadow counters when it was loaded: the counters are per
    /// plugin name and cumulative, the status counts one candidate.
    pub(super) shadow_base: Option<(String, (u64, u64))>,
    /// Containments of its plugin told in an Event so far.
    pub(super) contained_evented: u64,
    /// The shadow's admission counts when its candidate was loaded.
    pub(super) admission_base: crate::telemetry::metrics::ShadowVerdictCounts,
    /// The webhook configurations written for it (for its status) and
    /// what they were written from ([`ManagedWebhooks::key`]).
    ///
    /// [`ManagedWebhooks::key`]: crate::source::managed_webhooks::ManagedWebhooks::key
    pub(super) webhooks: Option<(String, crate::source::plugin_crd::WebhooksStatus)>,
}

/// What this replica serves of one Plugin object.
#[derive(Clone, Debug, Default)]
pub(super) struct Here {
    /// The generation the last finished pass worked on.
    pub(super) generation: Option<i64>,
    pub(super) digest: Option<String>,
    pub(super) shadow_digest: Option<String>,
    /// Why the desired version does not serve here (reason, message).
    pub(super) problem: Option<(String, String)>,
}

impl Context {
    /// Whether this replica writes statuses now.
    pub(super) fn writes_status(&self) -> bool {
        self.status_gate.as_ref().is_none_or(LeaderGate::is_leader)
    }

    /// Remembers that `spec` of `generation` serves (`Some`), or that
    /// nothing of this object's spec may be taken as serving (`None`: the
    /// next pass tries again).
    pub(super) fn set_applied(&self, name: &str, applied: Option<(Option<i64>, &PluginSpec)>) {
        if let Some(e) = self.entries.lock().get_mut(name) {
            e.applied = applied.map(|(g, s)| (g, s.clone()));
        }
    }
}
