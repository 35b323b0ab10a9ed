//! The writer: performs a plugin's actions against the right cluster.
//!
//! - `apply`: server-side apply with field manager `rekon.<plugin>` (force as
//!   requested), on the object or its `/status`;
//! - `patch`: JSON merge patch (a resourceVersion precondition is written
//!   into `metadata.resourceVersion` of the patch) or JSON patch (the
//!   precondition becomes a leading `test` operation), on the object or `/status`;
//! - `delete`: an absent object is success; propagation policy and UID
//!   precondition (a UID mismatch means the object we meant is gone: success);
//! - `create`: create-if-absent (409 AlreadyExists is success);
//! - `event`: an events.k8s.io/v1 Event through kube-runtime's
//!   [`Recorder`], reporting controller `rekon.<plugin>`.
//!
//! Actions are grouped by cluster: each cluster's actions run in order and
//! stop at the first failure, clusters run concurrently. So a stalled or
//! failing cluster does not keep the others from converging; the reconcile
//! still fails (and is requeued with backoff) until every cluster succeeded.
//! Actions are idempotent, so a replay of the ones that did succeed is harmless.
//!
//! Every request is bounded by a timeout. 429 and 5xx answers are retried a
//! few times inside the writer, honouring `retryAfterSeconds`; a 409 Conflict
//! is retried only for actions without a precondition (a precondition that
//! failed means the plugin decided on stale state: the reconcile is re-run).
//!
//! A cluster known to be unreachable is not written to at all (the action
//! fails at once, retryable), and a request in flight when its cluster goes
//! unreachable gives up at once: a stalled cluster never holds the workers
//! that other clusters' keys need. Events are best-effort: a failed Event is
//! logged and counted, and the outcome goes on. Every successful response is
//! handed to the caches ([`CacheManager::observe_write`]) so the next
//! reconcile reads what this one wrote.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::api::{
    Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams, Preconditions,
    PropagationPolicy,
};
use kube::runtime::events::{Event as KubeEvent, EventType as KubeEventType, Recorder, Reporter};
use parking_lot::Mutex;
use serde_json::Value;
use tracing::{debug, warn};

use crate::cache::{CacheManager, Resolver, ResourceId};
use crate::cluster::{Cluster, ClusterRegistry, Health, is_connectivity_error};
use crate::plugin::{
    Action, ApplyAction, CreateAction, DeleteAction, EventAction, EventType, PatchAction,
    PatchType, Propagation, Resource, Scope,
};

/// Why an action failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// This replica does not hold the leader lease: nothing is written.
    #[error(
        "failed to write for plugin {plugin} in cluster {cluster} ({action}): this replica is not the leader"
    )]
    NotLeader {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
    },
    /// The action names a cluster that is not engaged.
    #[error("failed to {action} {object} for plugin {plugin}: cluster {cluster} is not engaged")]
    UnknownCluster {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
    },
    /// The action itself is malformed (bad JSON, no name, ...). Terminal.
    #[error(
        "failed to {action} for plugin {plugin} in cluster {cluster}: invalid action: {reason}"
    )]
    Invalid {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// What is wrong.
        reason: String,
    },
    /// The kind could not be resolved in the cluster.
    #[error("failed to {action} {object} for plugin {plugin}")]
    Resolve {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Object.
        object: String,
        /// Cause.
        #[source]
        source: Box<crate::cache::Error>,
    },
    /// The API server refused or the request failed.
    #[error(
        "failed to {action} {object} in cluster {cluster} for plugin {plugin}: {}",
        describe_kube_error(source)
    )]
    Api {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
    /// The cluster is unreachable (known before the request, or it went
    /// unreachable while the request was in flight): nothing was sent or
    /// the answer was not awaited.
    #[error(
        "failed to {action} {object} in cluster {cluster} for plugin {plugin}: the cluster is unreachable"
    )]
    Unreachable {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
    },
    /// The capability gate refused the action: outside the plugin's
    /// declared permissions or the operator policy. Nothing was sent.
    #[error("refused to {action} in cluster {cluster} for plugin {plugin}: {reason}")]
    Forbidden {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Why.
        reason: String,
    },
    /// The request did not complete in time.
    #[error(
        "failed to {action} {object} in cluster {cluster} for plugin {plugin}: timed out after {timeout:?}"
    )]
    Timeout {
        /// Plugin.
        plugin: String,
        /// Action kind.
        action: &'static str,
        /// Cluster.
        cluster: String,
        /// Object.
        object: String,
        /// The limit.
        timeout: Duration,
    },
}

impl Error {
    /// Whether a re-run of the reconcile may succeed (false for malformed actions).
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        !matches!(self, Self::Invalid { .. } | Self::Forbidden { .. })
    }

    /// HTTP status of an API error.
    #[must_use]
    pub fn status(&self) -> Option<u16> {
        match self {
            Self::Api { source, .. } => match source.as_ref() {
                kube::Error::Api(s) => Some(s.code),
                _ => None,
            },
            _ => None,
        }
    }
}

/// A client error as a user reads it: the HTTP status, reason and message
/// of an API answer, or the transport error.
#[must_use]
pub fn describe_kube_error(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => {
            let reason = if s.reason.is_empty() {
                String::new()
            } else {
                format!(" {}", s.reason)
            };
            format!("HTTP {}{reason}: {}", s.code, s.message)
        }
        other => other.to_string(),
    }
}

/// The failures of one outcome (at most one per cluster).
#[derive(Debug, thiserror::Error)]
#[error("failed to perform {} of {total} actions: {}", failed.len(), list(failed))]
pub struct Failed {
    /// Number of actions in the outcome.
    pub total: usize,
    /// One error per cluster that failed.
    pub failed: Vec<Error>,
}

impl Failed {
    /// Whether any failure may go away on retry.
    #[must_use]
    pub fn is_retryable(&self) -> bool {
        self.failed.iter().any(Error::is_retryable)
    }
}

fn list(errors: &[Error]) -> String {
    errors
        .iter()
        .map(|e| {
            let mut s = e.to_string();
            // The API error's text is already in the message.
            if !matches!(e, Error::Api { .. }) {
                let mut src = std::error::Error::source(e);
                while let Some(cause) = src {
                    s.push_str(": ");
                    s.push_str(&cause.to_string());
                    src = cause.source();
                }
            }
            s
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// Writer settings.
#[derive(Clone, Debug)]
pub struct WriterConfig {
    /// Bound of one API request.
    pub request_timeout: Duration,
    /// Attempts per action for 429/5xx/safe-409 answers.
    pub max_attempts: u32,
    /// Longest wait between attempts (a longer Retry-After gives up and requeues).
    pub max_retry_wait: Duration,
}

impl Default for WriterConfig {
    fn default() -> Self {
        Self {
            request_timeout: Duration::from_secs(10),
            max_attempts: 4,
            max_retry_wait: Duration::from_secs(5),
        }
    }
}

/// (cluster, plugin) of an Event recorder.
type RecorderKey = (String, String);
/// A recorder and the engaged cluster (client) it was made for.
type ClusterRecorder = (Arc<Cluster>, Recorder);

tokio::task_local! {
    /// The write fence of the reconcile running in this task (its shard's
    /// Lease when sharding, see `ops::shard`); the writer's leader gate when
    /// unset. A task-local rather than a parameter so every write of a
    /// reconcile — actions, finalizer patches, retries — is fenced by the
    /// same Lease without threading it through each call.
    pub static FENCE: crate::ops::leader::LeaderGate;
}

/// Performs actions. Cheap to clone.
#[derive(Clone)]
pub struct Writer {
    clusters: ClusterRegistry,
    resolver: Resolver,
    config: WriterConfig,
    /// Event recorders per (cluster, plugin), with the cluster they were
    /// made for: a re-engaged cluster (new credentials) gets a new one.
    recorders: Arc<Mutex<HashMap<RecorderKey, ClusterRecorder>>>,
    /// Read-your-writes: where successful responses go.
    caches: Option<CacheManager>,
    /// The last gate: per plugin, whether it may perform an action.
    gates: Arc<parking_lot::RwLock<HashMap<String, Gate>>>,
    /// Leader election: nothing is written unless the gate is open (ops hook).
    leader: crate::ops::leader::LeaderGate,
}

impl std::fmt::Debug for Writer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Writer")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

/// The engine's resource type for a WIT resource.
#[must_use]
pub fn resource_id(r: &Resource) -> ResourceId {
    ResourceId {
        group: r.group.clone(),
        version: r.version.clone(),
        kind: r.kind.clone(),
        plural: r.plural.clone(),
        namespaced: matches!(r.scope, Scope::Namespaced),
    }
}

/// The cluster an action writes to.
#[must_use]
pub fn action_cluster(action: &Action) -> &str {
    match action {
        Action::Apply(a) => &a.cluster,
        Action::Create(c) => &c.cluster,
        Action::Patch(p) => &p.target.cluster,
        Action::Delete(d) => &d.target.cluster,
        Action::Event(e) => &e.regarding.cluster,
    }
}

/// A short name of an action's kind, for errors and logs.
#[must_use]
pub fn action_kind(action: &Action) -> &'static str {
    match action {
        Action::Apply(a) if a.status => "apply status of",
        Action::Apply(_) => "apply",
        Action::Patch(p) if p.status => "patch status of",
        Action::Patch(_) => "patch",
        Action::Delete(_) => "delete",
        Action::Create(_) => "create",
        Action::Event(_) => "record an event on",
    }
}

/// A plugin's capability check, as the writer's last gate: `Err(reason)`
/// refuses the action.
pub type Gate = Arc<dyn Fn(&Action) -> Result<(), String> + Send + Sync>;

/// What a successful write left behind, for read-your-writes.
enum Written {
    /// The object as the API server answered.
    Object(ResourceId, Box<DynamicObject>),
    /// The object no longer exists.
    Gone {
        id: ResourceId,
        namespace: Option<String>,
        name: String,
    },
    /// Nothing to cache (an Event, an existing object left untouched).
    Nothing,
}

/// Where a PATCH goes and how it is retried.
#[derive(Clone, Copy)]
struct PatchOn<'a> {
    plugin: &'a str,
    action: &'static str,
    cluster: &'a Cluster,
    target: &'a Target,
    status: bool,
    retry_conflict: bool,
}

struct Target {
    api: Api<DynamicObject>,
    name: String,
    describe: String,
}

impl Writer {
    /// A writer for `clusters`, resolving kinds with `resolver`.
    #[must_use]
    pub fn new(clusters: ClusterRegistry, resolver: Resolver, config: WriterConfig) -> Self {
        Self {
            clusters,
            resolver,
            config,
            recorders: Arc::default(),
            caches: None,
            gates: Arc::default(),
            leader: crate::ops::leader::LeaderGate::always_leader(),
        }
    }

    /// Check every write for `plugin` with `gate` first (its declared
    /// permissions and the operator policy); replaces an earlier gate.
    pub fn set_gate(&self, plugin: &str, gate: Gate) {
        self.gates.write().insert(plugin.to_owned(), gate);
    }

    /// Forget the gate of a removed plugin.
    pub fn remove_gate(&self, plugin: &str) {
        self.gates.write().remove(plugin);
    }

    /// Hand every successful response to `caches` (read-your-writes). The
    /// controller [`Manager`](crate::controller::Manager) sets this on the
    /// writer it is given.
    #[must_use]
    pub fn observing(mut self, caches: CacheManager) -> Self {
        self.caches = Some(caches);
        self
    }

    /// Write only while `gate` is open (leader election; see `ops::leader`).
    #[must_use]
    pub fn with_leader_gate(mut self, gate: crate::ops::leader::LeaderGate) -> Self {
        self.leader = gate;
        self
    }

    /// The fence of this task's writes: [`FENCE`] if set, else the leader gate.
    fn fence(&self) -> crate::ops::leader::LeaderGate {
        FENCE
            .try_with(Clone::clone)
            .unwrap_or_else(|_| self.leader.clone())
    }

    /// The gate every write checks; the controllers reconcile only while it is open.
    #[must_use]
    pub fn leader_gate(&self) -> &crate::ops::leader::LeaderGate {
        &self.leader
    }

    /// Perform `actions` for `plugin`: in order per cluster, clusters concurrently.
    ///
    /// # Errors
    /// One error per cluster whose actions did not all succeed.
    pub async fn execute(&self, plugin: &str, actions: &[Action]) -> Result<(), Failed> {
        let mut per_cluster: Vec<(&str, Vec<&Action>)> = Vec::new();
        for action in actions {
            let cluster = action_cluster(action);
            match per_cluster.iter_mut().find(|(c, _)| *c == cluster) {
                Some((_, list)) => list.push(action),
                None => per_cluster.push((cluster, vec![action])),
            }
        }
        let runs = per_cluster.into_iter().map(|(_, list)| async move {
            for action in list {
                match self.perform(plugin, action).await {
                    Ok(()) => {}
                    // Events are best-effort: logged and counted (in
                    // `perform`), never a failure of the outcome.
                    Err(e) if matches!(action, Action::Event(_)) => {
                        warn!(%plugin, cluster = %action_cluster(action), status = ?e.status(), error = %e, "failed to record event (best-effort; the reconcile goes on)");
                    }
                    Err(e) => return Err(e),
                }
            }
            Ok::<(), Error>(())
        });
        let failed: Vec<Error> = futures::future::join_all(runs)
            .await
            .into_iter()
            .filter_map(Result::err)
            .collect();
        if failed.is_empty() {
            Ok(())
        } else {
            Err(Failed {
                total: actions.len(),
                failed,
            })
        }
    }

    /// Perform one action for `plugin`.
    ///
    /// # Errors
    /// When the action fails after the writer's own bounded retries.
    pub async fn perform(&self, plugin: &str, action: &Action) -> Result<(), Error> {
        let metrics = crate::ops::metrics::Metrics::global();
        let cluster = action_cluster(action);
        let label = match action {
            Action::Apply(a) if a.status => "apply_status",
            Action::Apply(_) => "apply",
            Action::Patch(p) if p.status => "patch_status",
            Action::Patch(_) => "patch",
            Action::Delete(_) => "delete",
            Action::Create(_) => "create",
            Action::Event(_) => "event",
        };
        if !self.fence().is_leader() {
            metrics.writer_action(plugin, cluster, label, "not_leader");
            return Err(Error::NotLeader {
                plugin: plugin.to_owned(),
                action: action_kind(action),
                cluster: cluster.to_owned(),
            });
        }
        let gate = self.gates.read().get(plugin).cloned();
        if let Some(gate) = gate
            && let Err(reason) = gate(action)
        {
            metrics.writer_action(plugin, cluster, label, "denied");
            return Err(Error::Forbidden {
                plugin: plugin.to_owned(),
                action: action_kind(action),
                cluster: cluster.to_owned(),
                reason,
            });
        }
        let result = match action {
            Action::Apply(a) => self.apply(plugin, a).await,
            Action::Patch(p) => self.patch(plugin, p).await,
            Action::Delete(d) => self.delete(plugin, d).await,
            Action::Create(c) => self.create(plugin, c).await,
            Action::Event(e) => self.event(plugin, e).await.map(|()| Written::Nothing),
        };
        let outcome = match &result {
            Ok(_) => "success",
            Err(Error::Unreachable { .. }) => "unreachable",
            Err(Error::NotLeader { .. }) => "not_leader",
            Err(_) => "error",
        };
        metrics.writer_action(plugin, cluster, label, outcome);
        let written = result?;
        if let Some(caches) = &self.caches {
            match written {
                Written::Object(id, obj) => caches.observe_write(cluster, &id, *obj),
                Written::Gone {
                    id,
                    namespace,
                    name,
                } => caches.observe_gone(cluster, &id, namespace.as_deref(), &name),
                Written::Nothing => {}
            }
        }
        Ok(())
    }

    fn cluster(
        &self,
        plugin: &str,
        action: &'static str,
        cluster: &str,
        object: &str,
    ) -> Result<Arc<Cluster>, Error> {
        self.clusters
            .get(cluster)
            .ok_or_else(|| Error::UnknownCluster {
                plugin: plugin.to_owned(),
                action,
                cluster: cluster.to_owned(),
                object: object.to_owned(),
            })
    }

    async fn target(
        &self,
        plugin: &str,
        action: &'static str,
        cluster: &Cluster,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Target, Error> {
        let describe = describe(id, namespace, name);
        let resolved =
            self.resolver
                .resolve(cluster, id)
                .await
                .map_err(|source| Error::Resolve {
                    plugin: plugin.to_owned(),
                    action,
                    object: describe.clone(),
                    source: Box::new(source),
                })?;
        let api = if resolved.namespaced {
            let ns = namespace.ok_or_else(|| Error::Invalid {
                plugin: plugin.to_owned(),
                action,
                cluster: cluster.name().to_owned(),
                reason: format!("{describe}: namespaced kind without a namespace"),
            })?;
            Api::namespaced_with(cluster.client(), ns, &resolved.api)
        } else {
            Api::all_with(cluster.client(), &resolved.api)
        };
        Ok(Target {
            api,
            name: name.to_owned(),
            describe,
        })
    }

    /// Run `op` with the writer's timeout and bounded retries, keeping the
    /// cluster's health up to date. `retry_conflict`: a 409 may be retried.
    async fn call<T, F, Fut>(
        &self,
        plugin: &str,
        action: &'static str,
        cluster: &Cluster,
        object: &str,
        retry_conflict: bool,
        mut op: F,
    ) -> Result<T, Error>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<T, kube::Error>>,
    {
        let unreachable = || Error::Unreachable {
            plugin: plugin.to_owned(),
            action,
            cluster: cluster.name().to_owned(),
            object: object.to_owned(),
        };
        let not_leader = || Error::NotLeader {
            plugin: plugin.to_owned(),
            action,
            cluster: cluster.name().to_owned(),
        };
        let fence = self.fence();
        let mut attempt = 0_u32;
        loop {
            attempt += 1;
            // Fencing: every attempt, retries included, is sent only while
            // this replica holds the lease, and waited for no longer than
            // its renew deadline; losing the lease abandons it.
            let timeout = match fence.remaining() {
                Some(left) if left.is_zero() => return Err(not_leader()),
                Some(left) => left.min(self.config.request_timeout),
                None => self.config.request_timeout,
            };
            if cluster.health() == Health::Unreachable {
                return Err(unreachable());
            }
            let mut outages = cluster.outage_events();
            outages.mark_unchanged();
            let mut leadership = fence.subscribe();
            leadership.mark_unchanged();
            let result = tokio::select! {
                r = tokio::time::timeout(timeout, op()) => r,
                // The cluster went unreachable meanwhile (probe, watch or
                // another request): stop waiting; the reconcile is retried.
                _ = outages.changed() => return Err(unreachable()),
                _ = leadership.changed() => {
                    if !fence.is_leader() {
                        return Err(not_leader());
                    }
                    continue;
                }
            };
            if result.is_err() && !fence.is_leader() {
                return Err(not_leader());
            }
            let err = match result {
                Ok(Ok(v)) => {
                    cluster.mark_reachable();
                    return Ok(v);
                }
                Ok(Err(e)) => e,
                Err(_) => {
                    cluster.mark_unreachable(&"request timed out");
                    return Err(Error::Timeout {
                        plugin: plugin.to_owned(),
                        action,
                        cluster: cluster.name().to_owned(),
                        object: object.to_owned(),
                        timeout: self.config.request_timeout,
                    });
                }
            };
            if is_connectivity_error(&err) && !matches!(&err, kube::Error::Api(_)) {
                cluster.mark_unreachable(&err);
            }
            let wait = retry_wait(&err, attempt, retry_conflict);
            match wait {
                Some(wait)
                    if attempt < self.config.max_attempts && wait <= self.config.max_retry_wait =>
                {
                    debug!(%plugin, cluster = %cluster.name(), %object, attempt, ?wait, status = ?api_status(&err), error = %describe_kube_error(&err), "retrying {action}");
                    tokio::time::sleep(wait).await;
                }
                _ => {
                    return Err(Error::Api {
                        plugin: plugin.to_owned(),
                        action,
                        cluster: cluster.name().to_owned(),
                        object: object.to_owned(),
                        source: Box::new(err),
                    });
                }
            }
        }
    }

    async fn apply(&self, plugin: &str, a: &ApplyAction) -> Result<Written, Error> {
        let action = if a.status { "apply status of" } else { "apply" };
        let cluster = self.cluster(plugin, action, &a.cluster, "object")?;
        let invalid = |reason: String| Error::Invalid {
            plugin: plugin.to_owned(),
            action,
            cluster: a.cluster.clone(),
            reason,
        };
        let (obj, id, ns, name) = parse_object(&a.object).map_err(invalid)?;
        let target = self
            .target(plugin, action, &cluster, &id, ns.as_deref(), &name)
            .await?;
        let mut params = PatchParams::apply(&field_manager(plugin));
        if a.force {
            params = params.force();
        }
        let patch = Patch::Apply(&obj);
        let on = PatchOn {
            plugin,
            action,
            cluster: &cluster,
            target: &target,
            status: a.status,
            retry_conflict: false,
        };
        let written = self.send_patch(on, &params, &patch).await?;
        Ok(Written::Object(id, Box::new(written)))
    }

    /// PATCH the object or its `/status`, through [`Writer::call`].
    async fn send_patch<P: serde::Serialize + std::fmt::Debug>(
        &self,
        on: PatchOn<'_>,
        params: &PatchParams,
        patch: &Patch<P>,
    ) -> Result<DynamicObject, Error> {
        let t = on.target;
        self.call(
            on.plugin,
            on.action,
            on.cluster,
            &t.describe,
            on.retry_conflict,
            || async {
                if on.status {
                    t.api.patch_status(&t.name, params, patch).await
                } else {
                    t.api.patch(&t.name, params, patch).await
                }
            },
        )
        .await
    }

    async fn patch(&self, plugin: &str, p: &PatchAction) -> Result<Written, Error> {
        let action = if p.status { "patch status of" } else { "patch" };
        let t = &p.target;
        let cluster = self.cluster(plugin, action, &t.cluster, &t.name)?;
        let invalid = |reason: String| Error::Invalid {
            plugin: plugin.to_owned(),
            action,
            cluster: t.cluster.clone(),
            reason,
        };
        let body: Value = serde_json::from_str(&p.patch)
            .map_err(|e| invalid(format!("patch is not JSON: {e}")))?;
        let id = resource_id(&t.resource);
        let target = self
            .target(
                plugin,
                action,
                &cluster,
                &id,
                t.namespace.as_deref(),
                &t.name,
            )
            .await?;
        let params = PatchParams::default();
        let precondition = p.resource_version.is_some();
        // One call for both patch types: `Patch::Json` carries its operations
        // whatever the type parameter, so both fit `Patch<Value>`.
        let patch: Patch<serde_json::Value> = match p.patch_type {
            PatchType::Merge => {
                Patch::Merge(merge_patch(body, p.resource_version.as_deref()).map_err(invalid)?)
            }
            PatchType::Json => {
                Patch::Json(json_patch(body, p.resource_version.as_deref()).map_err(invalid)?)
            }
        };
        let on = PatchOn {
            plugin,
            action,
            cluster: &cluster,
            target: &target,
            status: p.status,
            retry_conflict: !precondition,
        };
        let written = self.send_patch(on, &params, &patch).await?;
        Ok(Written::Object(id, Box::new(written)))
    }

    async fn delete(&self, plugin: &str, d: &DeleteAction) -> Result<Written, Error> {
        let action = "delete";
        let t = &d.target;
        let cluster = self.cluster(plugin, action, &t.cluster, &t.name)?;
        let id = resource_id(&t.resource);
        let target = self
            .target(
                plugin,
                action,
                &cluster,
                &id,
                t.namespace.as_deref(),
                &t.name,
            )
            .await?;
        let params = delete_params(d.uid.as_deref(), d.propagation);
        let result = self
            .call(
                plugin,
                action,
                &cluster,
                &target.describe,
                d.uid.is_none(),
                || async { target.api.delete(&target.name, &params).await },
            )
            .await;
        let gone = || Written::Gone {
            id: id.clone(),
            namespace: t.namespace.clone(),
            name: t.name.clone(),
        };
        match result {
            // Still there (finalizers, foreground deletion): cache its
            // deletionTimestamp.
            Ok(answer) => Ok(match answer.left() {
                Some(obj) => Written::Object(id.clone(), Box::new(obj)),
                None => gone(),
            }),
            // Already gone: done, not retried.
            Err(e) if e.status() == Some(404) => Ok(gone()),
            // The UID precondition failed: the object we meant no longer exists.
            Err(e) if e.status() == Some(409) && d.uid.is_some() => {
                debug!(%plugin, object = %target.describe, "delete skipped: the object was replaced (uid mismatch)");
                Ok(Written::Nothing)
            }
            Err(e) => Err(e),
        }
    }

    async fn create(&self, plugin: &str, c: &CreateAction) -> Result<Written, Error> {
        let action = "create";
        let cluster = self.cluster(plugin, action, &c.cluster, "object")?;
        let invalid = |reason: String| Error::Invalid {
            plugin: plugin.to_owned(),
            action,
            cluster: c.cluster.clone(),
            reason,
        };
        let (obj, id, ns, name) = parse_object(&c.object).map_err(invalid)?;
        let obj: DynamicObject =
            serde_json::from_value(obj).map_err(|e| invalid(format!("not an object: {e}")))?;
        let target = self
            .target(plugin, action, &cluster, &id, ns.as_deref(), &name)
            .await?;
        let result = self
            .call(
                plugin,
                action,
                &cluster,
                &target.describe,
                false,
                || async { target.api.create(&PostParams::default(), &obj).await },
            )
            .await;
        match result {
            Ok(obj) => Ok(Written::Object(id, Box::new(obj))),
            Err(Error::Api { source, .. }) if matches!(source.as_ref(), kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists") => {
                Ok(Written::Nothing)
            }
            Err(e) => Err(e),
        }
    }

    async fn event(&self, plugin: &str, e: &EventAction) -> Result<(), Error> {
        let action = "record an event on";
        let r = &e.regarding;
        let cluster = self.cluster(plugin, action, &r.cluster, &r.name)?;
        let id = resource_id(&r.resource);
        let recorder = {
            let mut recorders = self.recorders.lock();
            let entry = recorders
                .entry((r.cluster.clone(), plugin.to_owned()))
                .or_insert_with(|| (Arc::clone(&cluster), recorder_for(&cluster, plugin)));
            // Re-engaged since (new client, maybe new credentials).
            if !Arc::ptr_eq(&entry.0, &cluster) {
                *entry = (Arc::clone(&cluster), recorder_for(&cluster, plugin));
            }
            entry.1.clone()
        };
        let reference = ObjectReference {
            api_version: Some(id.api_version()),
            kind: Some(id.kind.clone()),
            name: Some(r.name.clone()),
            namespace: r.namespace.clone(),
            ..ObjectReference::default()
        };
        let event = KubeEvent {
            type_: match e.event_type {
                EventType::Normal => KubeEventType::Normal,
                EventType::Warning => KubeEventType::Warning,
            },
            reason: e.reason.clone(),
            note: Some(e.note.clone()),
            action: e.action.clone(),
            secondary: None,
        };
        let object = describe(&id, r.namespace.as_deref(), &r.name);
        self.call(plugin, action, &cluster, &object, true, || {
            recorder.publish(&event, &reference)
        })
        .await
    }
}

fn recorder_for(cluster: &Cluster, plugin: &str) -> Recorder {
    Recorder::new(
        cluster.client(),
        Reporter {
            controller: field_manager(plugin),
            instance: std::env::var("POD_NAME").ok(),
        },
    )
}

fn api_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// `rekon.<plugin>`: the field manager and reporting controller of a plugin.
#[must_use]
pub fn field_manager(plugin: &str) -> String {
    format!("rekon.{plugin}")
}

fn describe(id: &ResourceId, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{} {ns}/{name}", id.kind),
        None => format!("{} {name}", id.kind),
    }
}

/// How long to wait before retrying after `err`, or `None` if it must not be
/// retried inside the writer.
fn retry_wait(err: &kube::Error, attempt: u32, retry_conflict: bool) -> Option<Duration> {
    let backoff = Duration::from_millis(50).saturating_mul(1 << attempt.min(6));
    match err {
        kube::Error::Api(s) if s.code == 429 || s.code >= 500 => Some(
            s.details
                .as_ref()
                .map(|d| d.retry_after_seconds)
                .filter(|s| *s > 0)
                .map_or(backoff, |s| Duration::from_secs(u64::from(s))),
        ),
        kube::Error::Api(s) if s.code == 409 && retry_conflict && s.reason != "AlreadyExists" => {
            Some(backoff)
        }
        kube::Error::HyperError(_) | kube::Error::Service(_) => Some(backoff),
        _ => None,
    }
}

/// Parse an object of an apply/create action: its JSON, type, namespace, name.
fn parse_object(json: &str) -> Result<(Value, ResourceId, Option<String>, String), String> {
    let obj: Value = serde_json::from_str(json).map_err(|e| format!("object is not JSON: {e}"))?;
    let api_version = obj["apiVersion"]
        .as_str()
        .ok_or("object has no apiVersion")?;
    let kind = obj["kind"].as_str().ok_or("object has no kind")?;
    let name = obj["metadata"]["name"]
        .as_str()
        .filter(|n| !n.is_empty())
        .ok_or("object has no metadata.name")?
        .to_owned();
    let namespace = obj["metadata"]["namespace"].as_str().map(str::to_owned);
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_owned(), v.to_owned()),
        None => (String::new(), api_version.to_owned()),
    };
    let id = ResourceId {
        group,
        version,
        kind: kind.to_owned(),
        plural: String::new(),
        namespaced: namespace.is_some(),
    };
    Ok((obj, id, namespace, name))
}

/// A merge patch with an optional resourceVersion precondition in its metadata.
fn merge_patch(mut body: Value, resource_version: Option<&str>) -> Result<Value, String> {
    let Some(rv) = resource_version else {
        return Ok(body);
    };
    let obj = body
        .as_object_mut()
        .ok_or("a merge patch with a resourceVersion precondition must be a JSON object")?;
    let meta = obj
        .entry("metadata")
        .or_insert_with(|| Value::Object(serde_json::Map::new()));
    let meta = meta
        .as_object_mut()
        .ok_or("metadata of a merge patch must be an object")?;
    meta.insert("resourceVersion".into(), Value::String(rv.to_owned()));
    Ok(body)
}

/// A JSON patch with an optional resourceVersion precondition as a leading `test`.
fn json_patch(
    body: Value,
    resource_version: Option<&str>,
) -> Result<kube_json_patch::Patch, String> {
    let mut ops = match body {
        Value::Array(ops) => ops,
        _ => return Err("a JSON patch must be an array of operations".into()),
    };
    if let Some(rv) = resource_version {
        ops.insert(
            0,
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        );
    }
    serde_json::from_value(Value::Array(ops)).map_err(|e| format!("invalid JSON patch: {e}"))
}

fn delete_params(uid: Option<&str>, propagation: Option<Propagation>) -> DeleteParams {
    DeleteParams {
        propagation_policy: propagation.map(|p| match p {
            Propagation::Background => PropagationPolicy::Background,
            Propagation::Foreground => PropagationPolicy::Foreground,
            Propagation::Orphan => PropagationPolicy::Orphan,
        }),
        preconditions: uid.map(|uid| Preconditions {
            uid: Some(uid.to_owned()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use serde_json::json;

    #[test]
    fn merge_patch_carries_the_resource_version() {
        let p = merge_patch(json!({"spec": {"a": 1}}), Some("42")).unwrap();
        assert_eq!(
            p,
            json!({"spec": {"a": 1}, "metadata": {"resourceVersion": "42"}})
        );
        let p = merge_patch(json!({"metadata": {"labels": {"x": "y"}}}), Some("7")).unwrap();
        assert_eq!(
            p,
            json!({"metadata": {"labels": {"x": "y"}, "resourceVersion": "7"}})
        );
        assert_eq!(merge_patch(json!({"a": 1}), None).unwrap(), json!({"a": 1}));
        assert!(merge_patch(json!([1]), Some("1")).is_err());
    }

    #[test]
    fn json_patch_gets_a_leading_test() {
        let p = json_patch(
            json!([{"op": "remove", "path": "/metadata/labels/x"}]),
            Some("9"),
        )
        .unwrap();
        let v = serde_json::to_value(&p).unwrap();
        assert_eq!(
            v,
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "9"},
                {"op": "remove", "path": "/metadata/labels/x"}
            ])
        );
        assert!(json_patch(json!({"op": "add"}), None).is_err());
        assert!(json_patch(json!([{"op": "frobnicate", "path": "/a"}]), None).is_err());
    }

    #[test]
    fn delete_params_carry_uid_and_propagation() {
        let p = delete_params(Some("u1"), Some(Propagation::Foreground));
        assert_eq!(p.preconditions.unwrap().uid.as_deref(), Some("u1"));
        assert!(matches!(
            p.propagation_policy,
            Some(PropagationPolicy::Foreground)
        ));
        let p = delete_params(None, None);
        assert!(p.preconditions.is_none() && p.propagation_policy.is_none());
    }

    #[test]
    fn objects_name_their_type() {
        let (_, id, ns, name) = parse_object(
            r#"{"apiVersion":"batch/v1","kind":"Job","metadata":{"name":"j","namespace":"d"}}"#,
        )
        .unwrap();
        assert_eq!(
            (id.group.as_str(), id.version.as_str(), id.kind.as_str()),
            ("batch", "v1", "Job")
        );
        assert_eq!((ns.as_deref(), name.as_str()), (Some("d"), "j"));
        let (_, id, ns, _) =
            parse_object(r#"{"apiVersion":"v1","kind":"Node","metadata":{"name":"n"}}"#).unwrap();
        assert_eq!((id.group.as_str(), ns), ("", None));
        assert!(parse_object(r#"{"apiVersion":"v1","kind":"Node","metadata":{}}"#).is_err());
        assert!(parse_object("nope").is_err());
    }

    fn api_error(code: u16, reason: &str, retry_after: u32) -> kube::Error {
        let mut s = Status::failure("x", reason).with_code(code);
        if retry_after > 0 {
            s.details =
                Some(serde_json::from_value(json!({ "retryAfterSeconds": retry_after })).unwrap());
        }
        kube::Error::Api(s.boxed())
    }

    #[tokio::test]
    async fn the_gate_refuses_before_anything_is_sent() {
        // Nothing listens there: a request would fail differently.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let clusters = ClusterRegistry::new("main", client);
        let writer = Writer::new(clusters, Resolver::default(), WriterConfig::default());
        writer.set_gate("p", Arc::new(|_| Err("not declared".to_owned())));
        let action = Action::Delete(DeleteAction {
            target: crate::plugin::ObjectRef {
                cluster: "main".into(),
                resource: Resource {
                    group: String::new(),
                    version: "v1".into(),
                    kind: "Secret".into(),
                    plural: "secrets".into(),
                    scope: Scope::Namespaced,
                },
                namespace: Some("default".into()),
                name: "x".into(),
            },
            uid: None,
            propagation: None,
        });
        let err = writer.perform("p", &action).await.unwrap_err();
        assert!(matches!(err, Error::Forbidden { .. }), "{err}");
        assert!(!err.is_retryable());
        assert_eq!(
            err.to_string(),
            "refused to delete in cluster main for plugin p: not declared"
        );
    }

    #[test]
    fn retry_policy() {
        assert_eq!(
            retry_wait(&api_error(429, "TooManyRequests", 2), 1, false),
            Some(Duration::from_secs(2))
        );
        assert_eq!(
            retry_wait(&api_error(500, "InternalError", 0), 1, false),
            Some(Duration::from_millis(100))
        );
        assert_eq!(
            retry_wait(&api_error(503, "ServiceUnavailable", 0), 2, false),
            Some(Duration::from_millis(200))
        );
        assert_eq!(retry_wait(&api_error(409, "Conflict", 0), 1, false), None);
        assert!(retry_wait(&api_error(409, "Conflict", 0), 1, true).is_some());
        assert_eq!(
            retry_wait(&api_error(409, "AlreadyExists", 0), 1, true),
            None
        );
        assert_eq!(retry_wait(&api_error(404, "NotFound", 0), 1, true), None);
        assert_eq!(retry_wait(&api_error(422, "Invalid", 0), 1, true), None);
    }
}
