//! One run's world: kube-sim clusters served in-process (no sockets), the
//! host's engine over them exactly as `rekon run` assembles it (cluster
//! registry, shared caches, writer, controller manager, health probes),
//! the scenario's steps, and snapshots of what the clusters hold.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use kube::discovery::Scope as KubeScope;
use kube_sim::{SimCluster, SimConfig};
use parking_lot::Mutex;
use serde_json::Value;

use crate::action::Resource;
use crate::cache::{CacheManager, Resolver};
use crate::cluster::ClusterRegistry;
use crate::controller::{ControllerConfig, Manager, Reconciler};
use crate::writer::{Writer, WriterConfig};

use super::scenario::{Scenario, Step, Target};
use super::wire::{Switchboard, Wire};

/// Why a scenario's apply failed.
enum ApplyError {
    /// Refused as invalid or forbidden (422, 403): the API server's message.
    Refused(String),
    /// Anything else.
    Failed(String),
}

impl From<String> for ApplyError {
    fn from(message: String) -> Self {
        Self::Failed(message)
    }
}

impl From<ApplyError> for String {
    fn from(e: ApplyError) -> Self {
        match e {
            ApplyError::Refused(m) | ApplyError::Failed(m) => m,
        }
    }
}

/// The field manager of the scenario's own writes.
pub const SCENARIO_MANAGER: &str = "explore-scenario";

/// Why a world could not be built or a step not applied.
#[derive(Debug, thiserror::Error)]
pub enum WorldError {
    /// The cluster registry refused a cluster.
    #[error("failed to engage cluster {cluster}: {message}")]
    Engage {
        /// The cluster.
        cluster: String,
        /// Why.
        message: String,
    },
    /// A step failed against the cluster.
    #[error("step {step} ({label}) failed: {message}")]
    Step {
        /// The step, from 1 (0: the scenario's CRDs and the plugin's).
        step: usize,
        /// Its label.
        label: String,
        /// The API server's answer.
        message: String,
    },
    /// The API server refused a step's write as invalid (422) or
    /// forbidden (403): an input the system does not accept (a CRD's
    /// transition rule, a value out of its schema), not a failure of the
    /// plugin. A generated step refused so is left out of the campaign
    /// ([`super::run::RunOutcome::refused`]).
    #[error("step {step} ({label}) refused by the API server: {message}")]
    Refused {
        /// The step, from 1.
        step: usize,
        /// Its label.
        label: String,
        /// The API server's message.
        message: String,
    },
}

impl WorldError {
    /// A machine-readable reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Engage { .. } => "EngageFailed",
            Self::Step { .. } => "StepFailed",
            Self::Refused { .. } => "StepRefused",
        }
    }
}

type KindKey = (String, String, String);

/// The clusters and the engine of one run.
pub struct World {
    /// The clusters by name.
    pub sims: BTreeMap<String, Arc<SimCluster>>,
    /// Faults and the write log.
    pub board: Switchboard,
    /// The controller manager running the plugin.
    pub manager: Manager,
    scenario_clients: BTreeMap<String, kube::Client>,
    /// (cluster, apiVersion, kind) → the resource and whether namespaced.
    kinds: Mutex<HashMap<KindKey, (ApiResource, bool)>>,
    probes: tokio::task::JoinHandle<()>,
}

impl std::fmt::Debug for World {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("World")
            .field("clusters", &self.sims.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

/// The engine's settings in a world: short timeouts, one reconcile at a
/// time, a resync every 20 (virtual) seconds so a settle also proves the
/// plugin stays quiet when asked again.
fn controller_config() -> ControllerConfig {
    ControllerConfig {
        max_concurrent_reconciles: 1,
        sync_timeout: Duration::from_secs(5),
        resync_period: Some(Duration::from_secs(20)),
        shards: None,
    }
}

impl World {
    /// Starts the scenario's clusters, installs `crds` (the scenario's and
    /// the plugin's) and connects an engine to them.
    ///
    /// # Errors
    /// When a CRD does not install or a cluster is refused.
    pub async fn start(scenario: &Scenario, crds: &[Value]) -> Result<Self, WorldError> {
        let board = Switchboard::default();
        let mut sims = BTreeMap::new();
        let mut scenario_clients = BTreeMap::new();
        for name in &scenario.clusters {
            let sim = Arc::new(SimCluster::detached(SimConfig::new(name)));
            scenario_clients.insert(name.clone(), kube::Client::new(sim.router(), "default"));
            sims.insert(name.clone(), sim);
        }
        let engine_client = |name: &str| {
            kube::Client::new(Wire::new(Arc::clone(&sims[name]), board.clone()), "default")
        };
        let primary = scenario.primary();
        let clusters = ClusterRegistry::new(primary, engine_client(primary));
        for name in scenario.clusters.iter().skip(1) {
            clusters
                .add(name.clone(), engine_client(name))
                .map_err(|e| WorldError::Engage {
                    cluster: name.clone(),
                    message: e.to_string(),
                })?;
        }
        let resolver = Resolver::default();
        let caches = CacheManager::new(clusters.clone(), resolver.clone());
        let writer = Writer::new(
            clusters.clone(),
            resolver,
            WriterConfig {
                request_timeout: Duration::from_secs(5),
                max_attempts: 3,
                max_retry_wait: Duration::from_secs(2),
            },
        );
        let manager = Manager::new(caches, writer, controller_config());
        let probes = tokio::spawn(clusters.run_probes(
            Duration::from_secs(5),
            Duration::from_secs(1),
            std::future::pending(),
        ));
        let world = Self {
            sims,
            board,
            manager,
            scenario_clients,
            kinds: Mutex::new(HashMap::new()),
            probes,
        };
        for name in &scenario.clusters {
            for crd in crds {
                world
                    .apply(name, crd, false)
                    .await
                    .map_err(|e| WorldError::Step {
                        step: 0,
                        label: format!(
                            "install CRD {}",
                            crd["metadata"]["name"].as_str().unwrap_or("?")
                        ),
                        message: e.into(),
                    })?;
            }
        }
        Ok(world)
    }

    /// Runs `plugin` (its controller starts, lists and reconciles).
    pub fn start_plugin(&self, plugin: Arc<dyn Reconciler>) {
        self.manager.upsert(plugin);
    }

    /// Stops the plugin's controller and starts it again from a fresh list
    /// (what a crash and a restart of the host do).
    pub async fn restart_plugin(&self, plugin: Arc<dyn Reconciler>) {
        self.manager.remove(plugin.name()).await;
        self.manager.upsert(plugin);
    }

    /// Stops everything.
    pub async fn stop(self) {
        self.manager.shutdown().await;
        self.probes.abort();
    }

    async fn kind(
        &self,
        cluster: &str,
        api_version: &str,
        kind: &str,
    ) -> Result<(ApiResource, bool), String> {
        let key = (cluster.to_owned(), api_version.to_owned(), kind.to_owned());
        if let Some(found) = self.kinds.lock().get(&key) {
            return Ok(found.clone());
        }
        let (group, version) = match api_version.split_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        let gvk = GroupVersionKind::gvk(group, version, kind);
        let client = self.scenario_clients[cluster].clone();
        let (ar, caps) = kube::discovery::pinned_kind(&client, &gvk)
            .await
            .map_err(|e| format!("{api_version} {kind} is not served in cluster {cluster}: {e}"))?;
        let namespaced = caps.scope == KubeScope::Namespaced;
        self.kinds.lock().insert(key, (ar.clone(), namespaced));
        Ok((ar, namespaced))
    }

    async fn api(
        &self,
        cluster: &str,
        object: &Value,
    ) -> Result<(Api<DynamicObject>, String), String> {
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (ar, namespaced) = self.kind(cluster, api_version, kind).await?;
        let client = self.scenario_clients[cluster].clone();
        let api = if namespaced {
            let ns = object["metadata"]["namespace"]
                .as_str()
                .unwrap_or("default");
            Api::namespaced_with(client, ns, &ar)
        } else {
            Api::all_with(client, &ar)
        };
        Ok((api, name))
    }

    /// Server-side applies `object` (or its status) as the scenario.
    /// Applies `object`; whether the object answered is terminating (the
    /// apply updated an object being deleted rather than making a new one).
    async fn apply(&self, cluster: &str, object: &Value, status: bool) -> Result<bool, ApplyError> {
        let (api, name) = self.api(cluster, object).await?;
        let pp = PatchParams::apply(SCENARIO_MANAGER).force();
        let result = if status {
            api.patch_status(&name, &pp, &Patch::Apply(object)).await
        } else {
            api.patch(&name, &pp, &Patch::Apply(object)).await
        };
        result
            .map(|o| o.metadata.deletion_timestamp.is_some())
            .map_err(|e| match e {
                kube::Error::Api(s) if matches!(s.code, 403 | 422) => {
                    ApplyError::Refused(s.message)
                }
                e => ApplyError::Failed(e.to_string()),
            })
    }

    /// Whether `object` exists in `cluster` and is being deleted (held by
    /// a finalizer).
    pub async fn terminating(&self, cluster: &str, object: &Value) -> bool {
        let Ok((api, name)) = self.api(cluster, object).await else {
            return false;
        };
        api.get_opt(&name)
            .await
            .ok()
            .flatten()
            .is_some_and(|o| o.metadata.deletion_timestamp.is_some())
    }

    async fn delete(&self, t: &Target) -> Result<(), String> {
        let (ar, namespaced) = self.kind(&t.cluster, &t.api_version, &t.kind).await?;
        let client = self.scenario_clients[&t.cluster].clone();
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client, t.namespace.as_deref().unwrap_or("default"), &ar)
        } else {
            Api::all_with(client, &ar)
        };
        match api.delete(&t.name, &DeleteParams::default()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Performs a mutating or cluster step (`settle` is the runner's).
    /// With `strict` off (a plan's run), a step on an object that is not
    /// there (a Job to mark complete that the plugin has not created under
    /// this fault) is skipped: the fault, not the scenario, made it absent.
    ///
    /// # Errors
    /// When the API server refuses the step's write.
    /// Performs scenario step `index`; whether an object it applied was
    /// terminating (see [`super::run::RunOutcome::applied_on_terminating`]).
    ///
    /// # Errors
    /// A step the API server refused (`strict`: also a NotFound).
    pub async fn perform(
        &self,
        index: usize,
        step: &Step,
        strict: bool,
    ) -> Result<bool, WorldError> {
        let err = |message: String| WorldError::Step {
            step: index + 1,
            label: step.label(),
            message,
        };
        let err = |message: String| {
            if !strict && message.contains("NotFound") {
                return Ok(());
            }
            Err(err(message))
        };
        match step {
            Step::Apply { cluster, objects } | Step::ApplyStatus { cluster, objects } => {
                let status = matches!(step, Step::ApplyStatus { .. });
                let mut on_terminating = false;
                for o in objects {
                    match self.apply(cluster, o, status).await {
                        Ok(terminating) => on_terminating |= terminating,
                        Err(ApplyError::Refused(message)) => {
                            return Err(WorldError::Refused {
                                step: index + 1,
                                label: step.label(),
                                message,
                            });
                        }
                        Err(ApplyError::Failed(e)) => err(e)?,
                    }
                }
                return Ok(on_terminating);
            }
            Step::Delete(t) => {
                if let Err(e) = self.delete(t).await {
                    err(e)?;
                }
            }
            Step::ClusterDown(c) => self.set_down(c, true),
            Step::ClusterUp(c) => self.set_down(c, false),
            Step::Settle => {}
        }
        Ok(false)
    }

    /// Takes `cluster` down (open watches end, every request is refused)
    /// or brings it back.
    pub fn set_down(&self, cluster: &str, down: bool) {
        self.board.set_down(cluster, down);
        if down {
            self.sims[cluster].close_watches();
        }
    }

    /// `cluster`'s caches must re-list and cannot (watches closed, history
    /// compacted, lists failing) — or can again.
    pub fn set_unsynced(&self, cluster: &str, unsynced: bool) {
        self.board.set_lists_failing(cluster, unsynced);
        if unsynced {
            self.sims[cluster].compact();
            self.sims[cluster].close_watches();
        }
    }

    /// Every object of `resources` in every cluster, as stored (Events
    /// never: they are a log, not state).
    pub async fn snapshot(&self, resources: &[Resource]) -> BTreeMap<String, Vec<Value>> {
        let mut out = BTreeMap::new();
        for (name, sim) in &self.sims {
            let mut objects = Vec::new();
            for r in resources {
                if r.kind == "Event" {
                    continue;
                }
                let api_version = r.api_version();
                let Ok((ar, _)) = self.kind(name, &api_version, &r.kind).await else {
                    continue;
                };
                if let Ok(items) = sim.list(&api_version, &ar.plural, None, "") {
                    objects.extend(items);
                }
            }
            out.insert(name.clone(), objects);
        }
        out
    }
}
