//! The [`Writer`] and how one request is sent: the target resolved, every
//! attempt fenced and bounded by a timeout, 429/5xx (and safe 409s) retried
//! a few times, the cluster's health kept up to date.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use kube::api::Api;
use kube::runtime::events::Recorder;
use parking_lot::Mutex;
use tracing::debug;

use super::config::{Error, WriterConfig, describe_kube_error};
use super::fence::{FENCE, Gate};
use crate::action::{Resource, Scope};
use crate::cache::{CacheManager, RawObject, Resolved, Resolver, ResourceId};
use crate::cluster::{Cluster, ClusterRegistry, Health, is_connectivity_error};
use crate::lease::LeaderGate;
use crate::queue::Backoff;

/// (cluster, plugin) of an Event recorder.
type RecorderKey = (String, String);
/// A recorder and the engaged cluster (client) it was made for.
type ClusterRecorder = (Arc<Cluster>, Recorder);

/// Performs actions. Cheap to clone.
///
/// Every request is bounded by a timeout. 429 and 5xx answers are retried a
/// few times inside the writer, honouring `retryAfterSeconds`; a 409
/// Conflict is retried only for actions without a precondition (a
/// precondition that failed means the plugin decided on stale state: the
/// reconcile is re-run). A cluster known to be unreachable is not written to
/// at all (the action fails at once, retryable), and a request in flight
/// when its cluster goes unreachable gives up at once: a stalled cluster
/// never holds the workers that other clusters' keys need.
#[derive(Clone)]
pub struct Writer {
    pub(super) clusters: ClusterRegistry,
    pub(super) resolver: Resolver,
    pub(super) config: WriterConfig,
    /// Event recorders per (cluster, plugin), with the cluster they were
    /// made for: a re-engaged cluster (new credentials) gets a new one.
    pub(super) recorders: Arc<Mutex<HashMap<RecorderKey, ClusterRecorder>>>,
    /// Read-your-writes: where successful responses go.
    pub(super) caches: Option<CacheManager>,
    /// The last gate: per plugin, whether it may perform an action.
    pub(super) gates: Arc<parking_lot::RwLock<HashMap<String, Gate>>>,
    /// Leader election: nothing is written unless the gate is open (ops hook).
    pub(super) leader: LeaderGate,
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

/// What a successful write left behind, for read-your-writes.
pub(super) enum Written {
    /// The object as the API server answered.
    Object(ResourceId, Box<RawObject>),
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
pub(super) struct PatchOn<'a> {
    pub(super) plugin: &'a str,
    pub(super) action: &'static str,
    pub(super) cluster: &'a Cluster,
    pub(super) target: &'a Target,
    pub(super) status: bool,
    pub(super) retry_conflict: bool,
}

pub(super) struct Target {
    pub(super) api: Api<RawObject>,
    pub(super) name: String,
    pub(super) describe: String,
    /// What the server said the kind is: the request is built from this
    /// alone.
    pub(super) resolved: Resolved,
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
            leader: LeaderGate::always_leader(),
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

    /// Write only while `gate` is open (leader election; see `crate::lease`).
    #[must_use]
    pub fn with_leader_gate(mut self, gate: LeaderGate) -> Self {
        self.leader = gate;
        self
    }

    /// The fence of this task's writes: [`FENCE`] if set, else the leader gate.
    pub(super) fn fence(&self) -> LeaderGate {
        FENCE
            .try_with(Clone::clone)
            .unwrap_or_else(|_| self.leader.clone())
    }

    /// The gate every write checks; the controllers reconcile only while it is open.
    #[must_use]
    pub fn leader_gate(&self) -> &LeaderGate {
        &self.leader
    }

    pub(super) fn cluster(
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

    pub(super) async fn target(
        &self,
        plugin: &str,
        action: &'static str,
        cluster: &Cluster,
        id: &ResourceId,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Target, Error> {
        let describe = describe(id, namespace, name);
        // A name or namespace is one segment of the request's path: never
        // a way to a subresource or to another resource (the API server's
        // own first check on every name, `ValidatePathSegmentName`).
        let bad_segment = name_problem("name", name).or_else(|| {
            namespace.and_then(|ns| {
                (!rekon_rules::registration::is_dns_label(ns))
                    .then(|| format!("namespace {ns:?} is not a DNS label"))
            })
        });
        if let Some(reason) = bad_segment {
            return Err(Error::Forbidden {
                plugin: plugin.to_owned(),
                action,
                cluster: cluster.name().to_owned(),
                reason: format!("{describe}: {reason}"),
            });
        }
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
            resolved,
        })
    }

    /// Refuses a target whose declared plural or scope (an action's
    /// `resource`) disagrees with what the server serves for its kind:
    /// the request would go where the server says, but the plugin meant
    /// something else, so nothing is sent.
    pub(super) fn check_declared(
        plugin: &str,
        action: &'static str,
        cluster: &Cluster,
        id: &ResourceId,
        target: &Target,
    ) -> Result<(), Error> {
        match target.resolved.disagreement(id) {
            None => Ok(()),
            Some(reason) => Err(Error::Forbidden {
                plugin: plugin.to_owned(),
                action,
                cluster: cluster.name().to_owned(),
                reason: format!("{}: {reason}", target.describe),
            }),
        }
    }

    /// Run `op` with the writer's timeout and bounded retries, keeping the
    /// cluster's health up to date. `retry_conflict`: a 409 may be retried.
    pub(super) async fn call<T, F, Fut>(
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
}

pub(super) fn api_status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// Why `name` cannot be sent as a path segment, if it cannot.
fn name_problem(what: &str, name: &str) -> Option<String> {
    rekon_rules::registration::path_segment_problem(name)
        .map(|why| format!("{what} {name:?} {why}"))
}

pub(super) fn describe(id: &ResourceId, namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{} {ns}/{name}", id.kind),
        None => format!("{} {name}", id.kind),
    }
}

/// The writer's retries inside one request: 50 ms doubling, at most 3.2 s.
const WRITE_RETRY: Backoff = Backoff::new(Duration::from_millis(50), Duration::from_millis(3200));

/// How long to wait before retrying after `err`, or `None` if it must not be
/// retried inside the writer.
fn retry_wait(err: &kube::Error, attempt: u32, retry_conflict: bool) -> Option<Duration> {
    let backoff = WRITE_RETRY.delay(attempt + 1);
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

#[cfg(test)]
mod tests {
    use super::*;
    use kube::core::Status;
    use serde_json::json;

    fn api_error(code: u16, reason: &str, retry_after: u32) -> kube::Error {
        let mut s = Status::failure("x", reason).with_code(code);
        if retry_after > 0 {
            s.details =
                Some(serde_json::from_value(json!({ "retryAfterSeconds": retry_after })).unwrap());
        }
        kube::Error::Api(s.boxed())
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
