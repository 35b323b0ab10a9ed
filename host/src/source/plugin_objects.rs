//! Plugins from `Plugin` objects in the primary cluster (`rekon run
//! --plugin-objects`): each object names a module by OCI reference; the
//! module is fetched, verified, loaded and checked against the grant, then
//! swapped in through the plugin registry like a changed file; the object's
//! status says what serves and what went wrong.
//!
//! # Per object (level-based)
//!
//! 1. The watch delivers the object; a spec that already serves (same
//!    generation applied) only refreshes the status.
//! 2. The module is fetched ([`ModuleSource`]: the OCI fetcher, digest
//!    verified before anything is compiled). A failure sets `Fetched=False`
//!    with the fetcher's reason and is retried with backoff (1 s doubling
//!    to 5 min); whatever served keeps serving (`Degraded=True`).
//! 3. The module is loaded under the origin `plugins.rekon.dev/NAME.wasm`
//!    ([`crate::plugin::PluginRegistry::apply_module`]): compiled, checked
//!    against the contract, registered with `spec.settings` (the plugin
//!    validates them in `register`: `InvalidSettings` with its own
//!    message), then accepted only if it declares nothing beyond the
//!    granted `spec.permissions` (`PermissionsExceedGrant`, naming what
//!    exceeds). A module from a registry never widens its own powers. It
//!    runs as the plugin named after the object: a module that registers
//!    another name runs as an *instance* of itself under the object's name
//!    (field manager, queue, metrics and policy follow that name; its
//!    finalizer gets the name appended, see
//!    [`crate::plugin::LoadOptions::instance`]), so one module can back
//!    several Plugin objects with different settings. A name the plugin
//!    directory already serves is refused (`NameConflict`), and the other
//!    way round: whichever came first keeps it, loudly. New settings are a
//!    new generation: a live swap that requeues every primary.
//! 4. `spec.shadow.module` goes through the same steps under
//!    `plugins.rekon.dev/NAME.shadow.wasm`: it runs beside the serving
//!    version (when `rekon run` shadows) and writes nothing; the status
//!    counts its reconciles and divergences.
//! 5. `spec.suspend` keeps the plugin loaded (watches, queue, finalizers)
//!    but reconciles nothing ([`crate::plugin::PluginRegistry::set_suspended`],
//!    followed by the controller manager); `Ready=False`, reason
//!    `Suspended`. Toggling it alone reloads nothing.
//! 6. Deleting the object unloads its plugin (finalizers stay on its
//!    primaries; `rekon plugin release` frees them).
//!
//! # Replicas and shards
//! Every replica loads what the objects say and publishes what it serves
//! of each (digest, shadow digest, the generation it worked on, why the
//! desired version does not serve there) as its report
//! ([`crate::lease::reports`], renewed every retry period). Only the replica
//! whose status gate is open writes statuses (the leader; with `--shards`
//! the holder of shard 0); it reads the live reports and sets `Consistent`:
//! true only when every live replica serves the desired digest (and shadow
//! digest), false naming each replica that lags and why, with
//! `status.replicas` listing what each serves. A replica that cannot fetch
//! keeps its serving version and says so in its report. The desired digest
//! is the one the status writer resolved for the current generation.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::ResourceExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use parking_lot::Mutex;
use serde_json::json;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use super::plugin_crd::{
    CONSISTENT, DEGRADED, FETCHED, Plugin, PluginObjectStatus, PluginSpec, PullPolicy, READY,
    ReplicaStatus, ShadowStatus, exceeding,
};
use crate::action::Permission;
use crate::lease::LeaderGate;
use crate::lease::reports::ReportBoard;
use crate::lease::shard::Shards;
use crate::plugin::{LoadOptions, LoadedPlugin, PluginRegistry, Refusal};
use crate::telemetry::metrics::Metrics;

/// What a module fetch is asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FetchRequest {
    /// OCI reference.
    pub reference: String,
    /// Expected manifest digest, if pinned.
    pub digest: Option<String>,
    /// Resolve the reference again even if the cache has it.
    pub always: bool,
    /// `.dockerconfigjson` of the pull Secret, if any.
    pub docker_config: Option<Vec<u8>>,
}

/// A fetched, verified module.
#[derive(Clone, Debug)]
pub struct Module {
    /// Manifest digest (`sha256:…`), what the status records.
    pub digest: String,
    /// The component's bytes.
    pub bytes: Arc<[u8]>,
    /// Served from the host's disk cache (nothing pulled).
    pub from_cache: bool,
}

/// Why a fetch failed: a condition reason (`RegistryUnreachable`,
/// `DigestMismatch`, …) and a message naming the reference.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct FetchFailure {
    /// CamelCase condition reason.
    pub reason: String,
    /// For humans.
    pub message: String,
    /// Worth trying again as is (an unreachable registry, a missing pull
    /// Secret); a digest mismatch or a wrong artifact waits for an edit.
    pub transient: bool,
}

/// Where modules come from: the OCI fetcher in production.
pub trait ModuleSource: Send + Sync + 'static {
    /// Fetch and verify one module.
    fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>>;
    /// The module with manifest digest `digest` if the local cache holds
    /// it; never asks a registry.
    fn cached(&self, digest: &str) -> BoxFuture<'static, Option<Module>>;
}

/// The OCI fetcher as the module source of Plugin objects: the pull
/// Secret's credentials for the reference's registry, `pullPolicy: Always`
/// as [`super::oci::PullPolicy::Always`].
impl ModuleSource for super::oci::Fetcher {
    fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>> {
        use super::oci::{PullPolicy as Policy, RegistryAuth};
        let fetcher = self.clone();
        Box::pin(async move {
            let auth = match &request.docker_config {
                None => RegistryAuth::Anonymous,
                Some(json) => {
                    let registry = request
                        .reference
                        .parse::<oci_client::Reference>()
                        .map(|r| r.registry().to_owned())
                        .unwrap_or_default();
                    RegistryAuth::from_docker_config_json(json, &registry).map_err(|e| {
                        FetchFailure {
                            reason: "PullSecretUnavailable".to_owned(),
                            message: format!("the pull Secret is unusable: {e}"),
                            transient: false,
                        }
                    })?
                }
            };
            let policy = if request.always {
                Policy::Always
            } else {
                Policy::IfNotPresent
            };
            fetcher
                .fetch(&request.reference, request.digest.as_deref(), policy, &auth)
                .await
                .map(|f| Module {
                    digest: f.manifest_digest,
                    bytes: f.bytes,
                    from_cache: f.from_cache,
                })
                .map_err(|e| FetchFailure {
                    reason: e.reason().to_owned(),
                    message: e.to_string(),
                    transient: e.is_transient(),
                })
        })
    }

    fn cached(&self, digest: &str) -> BoxFuture<'static, Option<Module>> {
        let (fetcher, digest) = (self.clone(), digest.to_owned());
        Box::pin(async move {
            let (_, bytes) = fetcher.cached(&digest).await?;
            Some(Module {
                digest,
                bytes,
                from_cache: true,
            })
        })
    }
}

/// Settings of the Plugin-object source.
#[derive(Clone, Debug)]
pub struct PluginObjectsConfig {
    /// Namespace of pull Secrets (the host's own).
    pub namespace: String,
    /// Longest wait between retries of a failed fetch.
    pub max_backoff: Duration,
    /// How often shadow counts are written to the status.
    pub status_period: Duration,
    /// Field manager of the status writes.
    pub field_manager: String,
}

impl PluginObjectsConfig {
    /// Defaults, pull Secrets in `namespace`.
    #[must_use]
    pub fn new(namespace: impl Into<String>) -> Self {
        Self {
            namespace: namespace.into(),
            max_backoff: Duration::from_secs(300),
            status_period: Duration::from_secs(10),
            field_manager: "rekon.dev/host".to_owned(),
        }
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

/// Follows the Plugin objects of the primary cluster. Cheap to clone.
#[derive(Clone)]
pub struct PluginObjects {
    inner: Arc<Inner>,
}

struct Inner {
    api: Api<Plugin>,
    secrets: Api<Secret>,
    registry: PluginRegistry,
    source: Arc<dyn ModuleSource>,
    status_gate: Option<LeaderGate>,
    config: PluginObjectsConfig,
    entries: Mutex<HashMap<String, Entry>>,
    /// This replica's report and everyone's.
    reports: ReportBoard,
    /// The shards this replica holds go into its report.
    shards: Option<Shards>,
}

#[derive(Default)]
struct Entry {
    latest: Option<Arc<Plugin>>,
    /// The spec (and generation) that serves, once one did.
    applied: Option<(Option<i64>, PluginSpec)>,
    running: bool,
    dirty: bool,
    failures: u32,
    retry_at: Option<Instant>,
    /// Last status written (to skip identical writes).
    written: Option<PluginObjectStatus>,
    /// What this replica serves, for its report.
    here: Here,
    /// The shadow candidate now counted (its digest and settings) and the
    /// process's shadow counters when it was loaded: the counters are per
    /// plugin name and cumulative, the status counts one candidate.
    shadow_base: Option<(String, (u64, u64))>,
}

/// What this replica serves of one Plugin object.
#[derive(Clone, Debug, Default)]
struct Here {
    /// The generation the last finished pass worked on.
    generation: Option<i64>,
    digest: Option<String>,
    shadow_digest: Option<String>,
    /// Why the desired version does not serve here (reason, message).
    problem: Option<(String, String)>,
}

/// What one pass over an object ended with.
#[derive(Default)]
struct Pass {
    /// The status to write; `None` when the pass found nothing to do (the
    /// spec already serves): a stale copy of the object must never bring
    /// back an older status.
    status: Option<PluginObjectStatus>,
    /// Retry after a transient failure (a fetch).
    retry: bool,
    /// The digest of the module this pass made serve.
    loaded: Option<String>,
    /// The shadow this pass made run (`Some(None)`: none any more).
    shadow_loaded: Option<Option<String>>,
}

impl std::fmt::Debug for PluginObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginObjects")
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

impl PluginObjects {
    /// Plugin objects read through `client` (the primary cluster's), their
    /// modules from `source`, loaded into `registry`. Statuses are written
    /// only while `status_gate` is open (`None`: always).
    #[must_use]
    pub fn new(
        client: kube::Client,
        registry: PluginRegistry,
        source: Arc<dyn ModuleSource>,
        status_gate: Option<LeaderGate>,
        config: PluginObjectsConfig,
    ) -> Self {
        Self {
            inner: Arc::new(Inner {
                api: Api::all(client.clone()),
                secrets: Api::namespaced(client, &config.namespace),
                registry,
                source,
                status_gate,
                config,
                entries: Mutex::default(),
                reports: ReportBoard::local(crate::lease::default_identity()),
                shards: None,
            }),
        }
    }

    /// Publish what this replica serves on `reports` (shared with the other
    /// replicas), with the shards it holds when sharding. Without it, the
    /// host is taken to be the only replica.
    #[must_use]
    pub fn with_reports(mut self, reports: ReportBoard, shards: Option<Shards>) -> Self {
        if let Some(inner) = Arc::get_mut(&mut self.inner) {
            inner.reports = reports;
            inner.shards = shards;
        }
        self
    }

    /// Follow the Plugin objects until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<(String, Pass)>();
        let mut events = watcher(self.inner.api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut refresh = tokio::time::interval(self.inner.config.status_period);
        tokio::pin!(shutdown);
        info!("following Plugin objects (plugins.rekon.dev) in the primary cluster");
        loop {
            tokio::select! {
                () = &mut shutdown => break,
                event = events.next() => match event {
                    None => break,
                    Some(Ok(event)) => self.on_event(event, &mut seen, &done_tx),
                    Some(Err(e)) => warn!(error = %e, "watch of Plugin objects failed; retrying"),
                },
                Some((name, pass)) = done_rx.recv() => self.finished(&name, pass, &done_tx).await,
                _ = tick.tick() => {
                    self.retry_due(&done_tx);
                    self.publish_report();
                    self.refresh_consistency().await;
                }
                _ = refresh.tick() => self.refresh_shadow_counts().await,
            }
        }
        debug!("stopped following Plugin objects");
    }

    fn on_event(
        &self,
        event: watcher::Event<Plugin>,
        seen: &mut BTreeSet<String>,
        done: &mpsc::UnboundedSender<(String, Pass)>,
    ) {
        match event {
            watcher::Event::Init => seen.clear(),
            watcher::Event::InitApply(obj) => {
                seen.insert(obj.name_any());
                self.changed(obj, done);
            }
            watcher::Event::Apply(obj) => self.changed(obj, done),
            watcher::Event::InitDone => {
                let gone: Vec<String> = self
                    .inner
                    .entries
                    .lock()
                    .keys()
                    .filter(|n| !seen.contains(*n))
                    .cloned()
                    .collect();
                for name in gone {
                    self.deleted(&name);
                }
            }
            watcher::Event::Delete(obj) => self.deleted(&obj.name_any()),
        }
    }

    fn changed(&self, obj: Plugin, done: &mpsc::UnboundedSender<(String, Pass)>) {
        let name = obj.name_any();
        let new_spec = {
            let mut entries = self.inner.entries.lock();
            let entry = entries.entry(name.clone()).or_default();
            // A new object or a new generation is work; an event for a
            // status or metadata change (our own status writes among them)
            // is not, and keeps a failed fetch's backoff.
            let version = |o: &Plugin| (o.metadata.uid.clone(), o.metadata.generation);
            let new_spec = entry
                .latest
                .as_deref()
                .is_none_or(|old| version(old) != version(&obj));
            entry.latest = Some(Arc::new(obj));
            if new_spec {
                entry.retry_at = None;
                entry.failures = 0;
            }
            new_spec
        };
        if new_spec {
            self.trigger(&name, done);
        }
    }

    fn deleted(&self, name: &str) {
        if self.inner.entries.lock().remove(name).is_none() {
            return;
        }
        info!(plugin = %name, "Plugin object deleted: unloading its plugin (finalizers stay on its objects)");
        self.inner.registry.set_suspended(name, false);
        self.inner.registry.remove_module(&origin(name));
        self.inner.registry.remove_module(&shadow_origin(name));
    }

    fn trigger(&self, name: &str, done: &mpsc::UnboundedSender<(String, Pass)>) {
        let obj = {
            let mut entries = self.inner.entries.lock();
            let Some(entry) = entries.get_mut(name) else {
                return;
            };
            if entry.running {
                entry.dirty = true;
                return;
            }
            let Some(obj) = entry.latest.clone() else {
                return;
            };
            entry.running = true;
            entry.dirty = false;
            obj
        };
        let this = self.clone();
        let done = done.clone();
        let name = name.to_owned();
        tokio::spawn(async move {
            let pass = this.pass(&obj).await;
            let _ = done.send((name, pass));
        });
    }

    async fn finished(&self, name: &str, pass: Pass, done: &mpsc::UnboundedSender<(String, Pass)>) {
        let (obj, rerun) = {
            let mut entries = self.inner.entries.lock();
            let Some(entry) = entries.get_mut(name) else {
                // Deleted while the pass ran: what it may have loaded goes.
                drop(entries);
                self.inner.registry.remove_module(&origin(name));
                self.inner.registry.remove_module(&shadow_origin(name));
                return;
            };
            entry.running = false;
            if pass.retry {
                entry.failures += 1;
                let wait = Duration::from_secs(1)
                    .saturating_mul(1 << (entry.failures - 1).min(16))
                    .min(self.inner.config.max_backoff);
                entry.retry_at = Some(Instant::now() + wait);
                debug!(plugin = %name, ?wait, "Plugin object will be tried again");
            } else {
                entry.failures = 0;
                entry.retry_at = None;
            }
            if let Some(status) = &pass.status {
                let here = &mut entry.here;
                here.generation = status.observed_generation;
                if let Some(d) = &pass.loaded {
                    here.digest = Some(d.clone());
                }
                if let Some(d) = &pass.shadow_loaded {
                    here.shadow_digest.clone_from(d);
                }
                here.problem = status
                    .conditions
                    .iter()
                    .find(|c| c.type_ == DEGRADED && c.status == "True")
                    .map(|c| (c.reason.clone(), c.message.clone()));
            }
            if self.inner.registry.serving(&origin(name)).is_none() {
                entry.here.digest = None;
            }
            if self.inner.registry.serving(&shadow_origin(name)).is_none() {
                entry.here.shadow_digest = None;
            }
            (entry.latest.clone(), entry.dirty)
        };
        self.publish_report();
        if let (Some(obj), Some(status)) = (obj, pass.status) {
            self.write_status(&obj, status).await;
        }
        if rerun {
            self.trigger(name, done);
        }
    }

    fn retry_due(&self, done: &mpsc::UnboundedSender<(String, Pass)>) {
        let now = Instant::now();
        let due: Vec<String> = self
            .inner
            .entries
            .lock()
            .iter()
            .filter(|(_, e)| !e.running && e.retry_at.is_some_and(|t| t <= now))
            .map(|(n, _)| n.clone())
            .collect();
        for name in due {
            if let Some(e) = self.inner.entries.lock().get_mut(&name) {
                e.retry_at = None;
                // Force a new attempt of the same spec.
                e.applied = None;
            }
            self.trigger(&name, done);
        }
    }

    /// One pass over an object: fetch, load, accept, swap; the status it
    /// leads to.
    async fn pass(&self, obj: &Plugin) -> Pass {
        let name = obj.name_any();
        let generation = obj.metadata.generation;
        let spec = &obj.spec;
        // What this host wrote last is newer than what a watch event may
        // carry.
        let (already, only_suspend_changed, written, digest_here) = self
            .inner
            .entries
            .lock()
            .get(&name)
            .map(|e| {
                let already = e
                    .applied
                    .as_ref()
                    .is_some_and(|(g, s)| *g == generation && s == spec);
                let only_suspend = e.applied.as_ref().is_some_and(|(_, s)| {
                    PluginSpec {
                        suspend: spec.suspend,
                        ..s.clone()
                    } == *spec
                }) && e.here.problem.is_none();
                (
                    already,
                    only_suspend,
                    e.written.clone(),
                    e.here.digest.clone(),
                )
            })
            .unwrap_or_default();
        let serving = self.inner.registry.serving(&origin(&name));
        if already && serving.is_some() {
            return Pass::default();
        }
        let mut status = PluginObjectStatus {
            observed_generation: generation,
            ..written.or_else(|| obj.status.clone()).unwrap_or_default()
        };
        let keeps = |serving: &Option<LoadedPlugin>| match serving {
            Some(p) => format!("; version {} keeps serving", p.version()),
            None => String::new(),
        };
        // Suspended: the plugin stays loaded (watches, queue, finalizers),
        // nothing is reconciled; set before any load so that a version
        // loaded now starts suspended.
        self.inner.registry.set_suspended(&name, spec.suspend);
        if let Some(loaded) = &serving
            && only_suspend_changed
        {
            // Nothing else changed: no fetch, no reload (a reload would
            // requeue every primary for nothing).
            set_ready(
                &mut status,
                spec,
                &serving_message(loaded, digest_here.as_deref()),
            );
            self.mark_applied(&name, generation, spec);
            return Pass {
                status: Some(status),
                ..Pass::default()
            };
        }
        let grant = match spec
            .permissions
            .iter()
            .map(super::plugin_crd::GrantedPermission::to_permission)
            .collect::<Result<Vec<Permission>, String>>()
        {
            Ok(grant) => grant,
            Err(e) => {
                let message = format!("spec.permissions: {e}{}", keeps(&serving));
                return refused(status, &serving, "InvalidGrant", message, false);
            }
        };
        // The serving module.
        let (module, unresolved) =
            match self.fetch(&spec.module, spec.digest.as_deref(), spec).await {
                Ok(m) => (m, None),
                Err(f) => match self.last_resolved(obj, &serving, &f).await {
                    Some(m) => (m, Some(f)),
                    None => {
                        set(&mut status, FETCHED, false, &f.reason, &f.message);
                        let message = format!("{}{}", f.message, keeps(&serving));
                        return refused(status, &serving, &f.reason, message, f.transient);
                    }
                },
            };
        match &unresolved {
            None => set(
                &mut status,
                FETCHED,
                true,
                "Fetched",
                &format!(
                    "{} ({}){}",
                    spec.module,
                    module.digest,
                    if module.from_cache {
                        ", from the cache"
                    } else {
                        ""
                    }
                ),
            ),
            Some(f) => set(
                &mut status,
                FETCHED,
                false,
                &f.reason,
                &format!(
                    "{}; serving the last resolved digest {} from the cache until the registry answers",
                    f.message, module.digest
                ),
            ),
        }
        let options = LoadOptions::default()
            .with_settings(spec.settings.as_ref())
            .with_instance(Some(&name));
        let loaded = match self.load(&origin(&name), &module, &grant, &options).await {
            Ok(p) => p,
            Err((reason, message)) => {
                let serving = self.inner.registry.serving(&origin(&name));
                let message = format!("{message}{}", keeps(&serving));
                return refused(status, &serving, reason, message, false);
            }
        };
        status.digest = Some(module.digest.clone());
        status.version = Some(loaded.version().to_owned());
        if let Some(f) = unresolved {
            // The last resolved version serves; the desired one is tried
            // again (the shadow too, once the registry answers).
            set_ready(
                &mut status,
                spec,
                &serving_message(&loaded, Some(&module.digest)),
            );
            let message = format!(
                "{}; the last resolved digest {} serves from the cache meanwhile",
                f.message, module.digest
            );
            set(&mut status, DEGRADED, true, &f.reason, &message);
            return Pass {
                status: Some(status),
                retry: true,
                loaded: Some(module.digest),
                shadow_loaded: None,
            };
        }
        // The shadow, if any.
        let shadow_loaded;
        match &spec.shadow {
            None => {
                self.inner.registry.remove_module(&shadow_origin(&name));
                if let Some(e) = self.inner.entries.lock().get_mut(&name) {
                    e.shadow_base = None;
                }
                status.shadow = None;
                shadow_loaded = Some(None);
            }
            Some(shadow) => {
                let outcome = match self
                    .fetch(&shadow.module, shadow.digest.as_deref(), spec)
                    .await
                {
                    Err(f) => Err((
                        f.reason.clone(),
                        format!("shadow: {}", f.message),
                        f.transient,
                    )),
                    Ok(m) => self
                        .load(
                            &shadow_origin(&name),
                            &m,
                            &grant,
                            &LoadOptions::default()
                                .with_settings(shadow.settings.as_ref().or(spec.settings.as_ref()))
                                .with_instance(Some(&name)),
                        )
                        .await
                        .map(|_| m.digest)
                        .map_err(|(r, msg)| (r.to_owned(), format!("shadow: {msg}"), false)),
                };
                match outcome {
                    Ok(digest) => {
                        let settings = shadow.settings.as_ref().or(spec.settings.as_ref());
                        self.count_candidate(&name, &digest, settings);
                        shadow_loaded = Some(Some(digest.clone()));
                        status.shadow = Some(ShadowStatus {
                            digest: Some(digest),
                            ..self.shadow_counts(&name)
                        });
                    }
                    Err((reason, message, retry)) => {
                        set_ready(
                            &mut status,
                            spec,
                            &serving_message(&loaded, Some(&module.digest)),
                        );
                        set(&mut status, DEGRADED, true, &reason, &message);
                        return Pass {
                            status: Some(status),
                            retry,
                            loaded: Some(module.digest),
                            shadow_loaded: None,
                        };
                    }
                }
            }
        }
        set_ready(
            &mut status,
            spec,
            &serving_message(&loaded, Some(&module.digest)),
        );
        set(
            &mut status,
            DEGRADED,
            false,
            "Serving",
            "the desired version serves",
        );
        self.mark_applied(&name, generation, spec);
        Pass {
            status: Some(status),
            retry: false,
            loaded: Some(module.digest),
            shadow_loaded,
        }
    }

    /// After a restart with the registry out of reach, nothing serves here
    /// yet: the digest this object last resolved to (its `status.digest`),
    /// when the host's module cache holds it, serves until the desired
    /// reference can be fetched. A transient failure only (an unreachable
    /// registry, a pull Secret not there yet): a wrong digest or a module
    /// that is not there waits for an edit. Never used while something
    /// serves: a running host keeps what it serves.
    async fn last_resolved(
        &self,
        obj: &Plugin,
        serving: &Option<LoadedPlugin>,
        failure: &FetchFailure,
    ) -> Option<Module> {
        if serving.is_some() || !failure.transient {
            return None;
        }
        let digest = obj.status.as_ref()?.digest.as_deref()?;
        // The registry just failed: the cache alone, no second attempt.
        self.inner.source.cached(digest).await
    }

    /// Starts counting a shadow candidate from zero unless it is the one
    /// already counted (same digest, same settings).
    fn count_candidate(&self, name: &str, digest: &str, settings: Option<&serde_json::Value>) {
        let key = format!(
            "{digest} {}",
            settings.map(ToString::to_string).unwrap_or_default()
        );
        let mut entries = self.inner.entries.lock();
        let Some(entry) = entries.get_mut(name) else {
            return;
        };
        if entry.shadow_base.as_ref().is_some_and(|(k, _)| *k == key) {
            return;
        }
        let metrics = Metrics::global();
        entry.shadow_base = Some((key, metrics.shadow_counts(name)));
        metrics.clear_recent_shadow_divergences(name);
    }

    /// The counts of the shadow candidate now counted.
    fn shadow_counts(&self, name: &str) -> ShadowStatus {
        let metrics = Metrics::global();
        let (reconciles, divergences) = metrics.shadow_counts(name);
        let (base_reconciles, base_divergences) = self
            .inner
            .entries
            .lock()
            .get(name)
            .and_then(|e| e.shadow_base.as_ref().map(|(_, base)| *base))
            .unwrap_or_default();
        let reconciles = reconciles.saturating_sub(base_reconciles);
        let divergences = divergences.saturating_sub(base_divergences);
        ShadowStatus {
            digest: None,
            reconciles,
            identical: reconciles.saturating_sub(divergences),
            divergences,
            recent: metrics.recent_shadow_divergences(name),
        }
    }

    fn mark_applied(&self, name: &str, generation: Option<i64>, spec: &PluginSpec) {
        if let Some(e) = self.inner.entries.lock().get_mut(name) {
            e.applied = Some((generation, spec.clone()));
        }
    }

    async fn fetch(
        &self,
        reference: &str,
        digest: Option<&str>,
        spec: &PluginSpec,
    ) -> Result<Module, FetchFailure> {
        let docker_config = match &spec.pull_secret {
            None => None,
            Some(secret) => Some(self.pull_secret(secret).await?),
        };
        self.inner
            .source
            .fetch(FetchRequest {
                reference: reference.to_owned(),
                digest: digest.map(str::to_owned),
                always: spec.pull_policy == Some(PullPolicy::Always),
                docker_config,
            })
            .await
    }

    async fn pull_secret(&self, name: &str) -> Result<Vec<u8>, FetchFailure> {
        // The Secret may yet be created or fixed: tried again.
        let fail = |message: String| FetchFailure {
            reason: "PullSecretUnavailable".to_owned(),
            message,
            transient: true,
        };
        let ns = &self.inner.config.namespace;
        let secret = self
            .inner
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| fail(format!("failed to read pull Secret {ns}/{name}: {e}")))?
            .ok_or_else(|| fail(format!("pull Secret {ns}/{name} does not exist")))?;
        if secret.type_.as_deref() != Some("kubernetes.io/dockerconfigjson") {
            return Err(fail(format!(
                "pull Secret {ns}/{name} is of type {}, not kubernetes.io/dockerconfigjson",
                secret.type_.as_deref().unwrap_or("Opaque")
            )));
        }
        secret
            .data
            .and_then(|d| d.get(".dockerconfigjson").map(|b| b.0.clone()))
            .ok_or_else(|| fail(format!("pull Secret {ns}/{name} has no .dockerconfigjson")))
    }

    /// Compile, register and accept `module` under `origin` (blocking pool):
    /// as the plugin named after the Plugin object (`options.instance`),
    /// with its settings, declaring nothing beyond `grant`.
    async fn load(
        &self,
        origin: &std::path::Path,
        module: &Module,
        grant: &[Permission],
        options: &LoadOptions,
    ) -> Result<LoadedPlugin, (&'static str, String)> {
        let registry = self.inner.registry.clone();
        let origin = origin.to_path_buf();
        let bytes = Arc::clone(&module.bytes);
        let grant = grant.to_vec();
        let options = options.clone();
        let result = tokio::task::spawn_blocking(move || {
            registry.apply_module(&origin, &bytes, &options, |plugin| {
                let exceeds = exceeding(&plugin.registration().permissions, &grant);
                if exceeds.is_empty() {
                    Ok(())
                } else {
                    Err(Refusal {
                        reason: "PermissionsExceedGrant",
                        message: format!(
                            "the module declares more than spec.permissions grants: {}",
                            exceeds.join("; ")
                        ),
                    })
                }
            })
        })
        .await
        .map_err(|e| ("LoadFailed", format!("the load task failed: {e}")))?;
        result.map_err(|r| (r.reason, r.message))
    }

    fn writes_status(&self) -> bool {
        self.inner
            .status_gate
            .as_ref()
            .is_none_or(LeaderGate::is_leader)
    }

    /// What this replica serves of each Plugin object, as its report.
    fn report(&self) -> serde_json::Value {
        let shards = self.inner.shards.as_ref().map(Shards::held);
        let identity = self.inner.reports.identity().to_owned();
        let plugins: BTreeMap<String, ReplicaStatus> = self
            .inner
            .entries
            .lock()
            .iter()
            .map(|(name, e)| {
                let here = &e.here;
                let status = ReplicaStatus {
                    identity: identity.clone(),
                    digest: here.digest.clone(),
                    shadow_digest: here.shadow_digest.clone(),
                    observed_generation: here.generation,
                    suspended: e.latest.as_ref().is_some_and(|o| o.spec.suspend),
                    shards: shards.clone(),
                    reason: here.problem.as_ref().map(|p| p.0.clone()),
                    message: here.problem.as_ref().map(|p| p.1.clone()),
                };
                (name.clone(), status)
            })
            .collect();
        json!({ "plugins": plugins })
    }

    fn publish_report(&self) {
        self.inner.reports.set_own(self.report());
    }

    /// `status` with `Consistent` and `status.replicas` from the live
    /// reports: every live replica must serve the digest (and shadow
    /// digest) this replica serves for the current generation.
    fn with_consistency(&self, name: &str, mut status: PluginObjectStatus) -> PluginObjectStatus {
        let here = self
            .inner
            .entries
            .lock()
            .get(name)
            .map(|e| e.here.clone())
            .unwrap_or_default();
        let replicas: Vec<ReplicaStatus> = self
            .inner
            .reports
            .live()
            .into_iter()
            .map(|r| {
                r.report
                    .get("plugins")
                    .and_then(|p| p.get(name))
                    .and_then(|v| serde_json::from_value::<ReplicaStatus>(v.clone()).ok())
                    .map_or_else(
                        || ReplicaStatus {
                            identity: r.identity.clone(),
                            reason: Some("NotLoaded".to_owned()),
                            message: Some("has not taken up this Plugin yet".to_owned()),
                            ..ReplicaStatus::default()
                        },
                        |s| ReplicaStatus {
                            identity: r.identity.clone(),
                            ..s
                        },
                    )
            })
            .collect();
        let generation = status.observed_generation;
        let (value, reason, message) = match (&here.digest, &here.problem) {
            (_, Some((why, what))) if here.generation == generation => (
                false,
                "DesiredUnresolved".to_owned(),
                format!(
                    "the desired version does not serve on the replica writing this status ({}): {why}: {what}",
                    self.inner.reports.identity()
                ),
            ),
            (None, _) => (
                false,
                "DesiredUnresolved".to_owned(),
                format!(
                    "nothing serves on the replica writing this status ({})",
                    self.inner.reports.identity()
                ),
            ),
            (Some(desired), _) => {
                let lagging: Vec<String> = replicas
                    .iter()
                    .filter(|r| {
                        r.digest.as_ref() != Some(desired) || r.shadow_digest != here.shadow_digest
                    })
                    .map(|r| {
                        let serves = match (&r.digest, &r.shadow_digest) {
                            (None, _) => "serves nothing".to_owned(),
                            (Some(d), None) => format!("serves {d}"),
                            (Some(d), Some(s)) => format!("serves {d} (shadow {s})"),
                        };
                        match (&r.reason, &r.message) {
                            (Some(why), Some(what)) => {
                                format!("{} {serves}: {why}: {what}", r.identity)
                            }
                            (Some(why), None) => format!("{} {serves}: {why}", r.identity),
                            _ => format!("{} {serves}", r.identity),
                        }
                    })
                    .collect();
                let shadow = here
                    .shadow_digest
                    .as_ref()
                    .map(|s| format!(" (shadow {s})"))
                    .unwrap_or_default();
                if lagging.is_empty() {
                    (
                        true,
                        "AllReplicasServing".to_owned(),
                        format!(
                            "all {} live replicas serve {desired}{shadow}",
                            replicas.len()
                        ),
                    )
                } else {
                    (
                        false,
                        "ReplicasLag".to_owned(),
                        format!(
                            "{} of {} live replicas do not serve {desired}{shadow}: {}",
                            lagging.len(),
                            replicas.len(),
                            lagging.join("; ")
                        ),
                    )
                }
            }
        };
        status.replicas = replicas;
        set(&mut status, CONSISTENT, value, &reason, &message);
        status
    }

    /// The status writer brings `Consistent` up to date with the reports
    /// (objects whose current generation this replica has worked on).
    async fn refresh_consistency(&self) {
        if !self.writes_status() {
            return;
        }
        let objects: Vec<(Arc<Plugin>, PluginObjectStatus)> = self
            .inner
            .entries
            .lock()
            .values()
            .filter(|e| !e.running)
            .filter_map(|e| {
                let obj = e.latest.clone()?;
                let status = e.written.clone().or_else(|| obj.status.clone())?;
                (e.here.generation.is_some()
                    && e.here.generation == obj.metadata.generation
                    && status.observed_generation == obj.metadata.generation)
                    .then_some((obj, status))
            })
            .collect();
        for (obj, status) in objects {
            self.write_status(&obj, status).await;
        }
    }

    async fn write_status(&self, obj: &Plugin, status: PluginObjectStatus) {
        let name = obj.name_any();
        if !self.writes_status() {
            return;
        }
        let status = self.with_consistency(&name, status);
        let unchanged = self
            .inner
            .entries
            .lock()
            .get(&name)
            .and_then(|e| e.written.as_ref())
            .is_some_and(|w| *w == status);
        if unchanged || obj.status.as_ref() == Some(&status) {
            return;
        }
        // A merge patch leaves out what is absent: clear what is gone.
        let mut body = serde_json::to_value(&status).unwrap_or_else(|_| json!({}));
        if let Some(map) = body.as_object_mut() {
            for key in ["digest", "version", "shadow", "replicas"] {
                map.entry(key).or_insert(serde_json::Value::Null);
            }
            if let Some(shadow) = map.get_mut("shadow").and_then(|s| s.as_object_mut()) {
                for key in ["digest", "recent"] {
                    shadow.entry(key).or_insert(serde_json::Value::Null);
                }
            }
        }
        let patch = Patch::Merge(json!({ "status": body }));
        let params = PatchParams::default();
        match self.inner.api.patch_status(&name, &params, &patch).await {
            Ok(_) => {
                if let Some(e) = self.inner.entries.lock().get_mut(&name) {
                    e.written = Some(status);
                }
            }
            Err(e) => {
                warn!(plugin = %name, error = %e, "failed to write the status of a Plugin object")
            }
        }
    }

    /// Writes the shadow counts of every object with a serving shadow.
    async fn refresh_shadow_counts(&self) {
        let objects: Vec<Arc<Plugin>> = self
            .inner
            .entries
            .lock()
            .values()
            .filter(|e| !e.running)
            .filter_map(|e| e.latest.clone())
            .filter(|o| o.spec.shadow.is_some())
            .collect();
        for obj in objects {
            let name = obj.name_any();
            let Some(mut status) = self
                .inner
                .entries
                .lock()
                .get(&name)
                .and_then(|e| e.written.clone().or_else(|| obj.status.clone()))
            else {
                continue;
            };
            let Some(shadow) = status.shadow.as_mut() else {
                continue;
            };
            let now = ShadowStatus {
                digest: shadow.digest.clone(),
                ..self.shadow_counts(&name)
            };
            if *shadow == now {
                continue;
            }
            *shadow = now;
            self.write_status(&obj, status).await;
        }
    }
}

fn serving_message(plugin: &LoadedPlugin, digest: Option<&str>) -> String {
    format!(
        "plugin {} version {} ({}) serves",
        plugin.name(),
        plugin.version(),
        digest.unwrap_or("digest unknown")
    )
}

/// `Ready`: `Serving`, or `Suspended` (loaded, not reconciling) while
/// `spec.suspend` is set.
fn set_ready(status: &mut PluginObjectStatus, spec: &PluginSpec, serving: &str) {
    if spec.suspend {
        let message = format!(
            "spec.suspend is set: {} but stays loaded with its watches and queue; events are kept, nothing is reconciled or written until it is resumed; finalizers stay",
            serving.trim_end_matches(" serves")
        );
        set(status, READY, false, "Suspended", &message);
    } else {
        set(status, READY, true, "Serving", serving);
    }
}

/// A pass that did not make the desired version serve: `Ready` says
/// whether something older still serves, `Degraded` why the desired one
/// does not.
fn refused(
    mut status: PluginObjectStatus,
    serving: &Option<LoadedPlugin>,
    reason: &str,
    message: String,
    retry: bool,
) -> Pass {
    match serving {
        Some(p) => set(
            &mut status,
            READY,
            true,
            "Serving",
            &format!("an earlier version ({}) serves", p.version()),
        ),
        None => set(&mut status, READY, false, reason, &message),
    }
    set(&mut status, DEGRADED, true, reason, &message);
    Pass {
        status: Some(status),
        retry,
        ..Pass::default()
    }
}

/// Sets a condition, keeping its transition time when its status did not
/// change.
fn set(status: &mut PluginObjectStatus, kind: &str, value: bool, reason: &str, message: &str) {
    let value = if value { "True" } else { "False" };
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    let previous = status.conditions.iter().position(|c| c.type_ == kind);
    let transition = previous
        .map(|i| &status.conditions[i])
        .filter(|c| c.status == value)
        .map_or(now, |c| c.last_transition_time.clone());
    let condition = Condition {
        type_: kind.to_owned(),
        status: value.to_owned(),
        reason: reason.to_owned(),
        message: message.to_owned(),
        observed_generation: status.observed_generation,
        last_transition_time: transition,
    };
    match previous {
        Some(i) => status.conditions[i] = condition,
        None => status.conditions.push(condition),
    }
    // A stable order, whatever order they were first set in.
    let order: BTreeMap<&str, usize> =
        [(FETCHED, 0), (READY, 1), (DEGRADED, 2), (CONSISTENT, 3)].into();
    status
        .conditions
        .sort_by_key(|c| order.get(c.type_.as_str()).copied().unwrap_or(usize::MAX));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conditions_keep_their_transition_time_and_order() {
        let mut status = PluginObjectStatus::default();
        set(&mut status, READY, true, "Serving", "a");
        set(&mut status, FETCHED, true, "Fetched", "b");
        let first = status.conditions[1].last_transition_time.clone();
        std::thread::sleep(Duration::from_millis(5));
        set(&mut status, READY, true, "Serving", "c");
        assert_eq!(status.conditions[1].last_transition_time, first);
        assert_eq!(status.conditions[1].message, "c");
        assert_eq!(
            status
                .conditions
                .iter()
                .map(|c| c.type_.as_str())
                .collect::<Vec<_>>(),
            [FETCHED, READY]
        );
        set(&mut status, READY, false, "LoadFailed", "d");
        assert_ne!(status.conditions[1].last_transition_time, first);
    }

    #[test]
    fn origins_are_not_files_of_any_directory() {
        assert_eq!(
            origin("nodepool"),
            PathBuf::from("plugins.rekon.dev/nodepool.wasm")
        );
        assert!(crate::plugin::is_shadow_file(&shadow_origin("nodepool")));
        assert!(!crate::plugin::is_shadow_file(&origin("nodepool")));
    }
}
