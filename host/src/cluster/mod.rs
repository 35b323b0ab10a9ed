//! The cluster registry ([`ClusterRegistry`]): the clusters the host is
//! engaged with, each a name, a [`kube::Client`] and a [`Health`] derived
//! from what the host observes; [`provider`]s engage and disengage clusters
//! at runtime (controller-runtime's multi-cluster Engage/Disengage).

pub mod provider;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use parking_lot::{Mutex, RwLock};
use tokio::sync::broadcast;
use tracing::{debug, info, warn};

use crate::telemetry::metrics::Metrics;

/// Errors of the cluster registry.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The kubeconfig file could not be read or parsed.
    #[error("failed to read kubeconfig {path}")]
    ReadKubeconfig {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// A context could not be turned into a client configuration.
    #[error("failed to load context {context} for cluster {cluster}")]
    LoadContext {
        /// Cluster name.
        cluster: String,
        /// Context name.
        context: String,
        /// Cause.
        #[source]
        source: kube::config::KubeconfigError,
    },
    /// The default configuration (KUBECONFIG, ~/.kube/config, in-cluster) failed.
    #[error("failed to infer a client configuration for cluster {cluster}")]
    Infer {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: kube::config::InferConfigError,
    },
    /// The in-cluster configuration failed.
    #[error("failed to load the in-cluster configuration for cluster {cluster}")]
    InCluster {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: kube::config::InClusterError,
    },
    /// The client could not be built from its configuration.
    #[error("failed to build a client for cluster {cluster}")]
    Client {
        /// Cluster name.
        cluster: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Two clusters with one name.
    #[error("cluster {0} is already engaged")]
    Duplicate(String),
    /// Removing the primary cluster is refused.
    #[error("cluster {0} is the primary cluster and cannot be removed")]
    RemovePrimary(String),
    /// `--cluster` must be `NAME=CONTEXT`.
    #[error("invalid cluster spec {0:?}: expected NAME=CONTEXT")]
    InvalidSpec(String),
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Health of a cluster as the host sees it (mirrors the WIT `cluster-health`):
/// request and watch failures mark a cluster unreachable, a success marks
/// it reachable again, and a reachable cluster is `Syncing` until every
/// cache the host keeps for it has listed. The probes
/// ([`ClusterRegistry::run_probes`]) notice a silent stall too (a
/// connection that hangs rather than fails).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Health {
    /// Reachable and every cache synced.
    Ready,
    /// Reachable, caches still listing.
    Syncing,
    /// Requests are failing.
    Unreachable,
}

/// A change of an engaged cluster's [`Health`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HealthChange {
    /// The cluster.
    pub cluster: String,
    /// Its health before.
    pub from: Health,
    /// Its health now.
    pub to: Health,
}

/// One engaged cluster.
pub struct Cluster {
    name: String,
    client: kube::Client,
    primary: bool,
    unreachable: AtomicBool,
    /// Number of times the cluster went unreachable.
    outages: AtomicU64,
    /// Caches of this cluster that have not listed yet (maintained by `cache`).
    unsynced: AtomicU64,
    /// Bumped each time the cluster becomes reachable again; caches restart
    /// their watches on a change so a stalled connection cannot linger.
    recoveries: tokio::sync::watch::Sender<u64>,
    /// Bumped each time the cluster becomes unreachable; writes in flight
    /// give up at once so they do not hold workers other clusters need.
    outage_events: tokio::sync::watch::Sender<u64>,
    /// The health last published on `health_events`.
    reported: Mutex<Health>,
    /// Where health changes go (the registry's channel).
    health_events: Option<broadcast::Sender<HealthChange>>,
    /// Where reachability is reported (the registry's metrics).
    metrics: Option<Metrics>,
}

impl std::fmt::Debug for Cluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cluster")
            .field("name", &self.name)
            .field("primary", &self.primary)
            .field("health", &self.health())
            .finish_non_exhaustive()
    }
}

impl Cluster {
    /// A cluster named `name` reached through `client`.
    #[must_use]
    pub fn new(name: impl Into<String>, client: kube::Client, primary: bool) -> Self {
        Self::with_health_events(name.into(), client, primary, None, None)
    }

    fn with_health_events(
        name: String,
        client: kube::Client,
        primary: bool,
        health_events: Option<broadcast::Sender<HealthChange>>,
        metrics: Option<Metrics>,
    ) -> Self {
        Self {
            name,
            client,
            primary,
            unreachable: AtomicBool::new(false),
            outages: AtomicU64::new(0),
            unsynced: AtomicU64::new(0),
            recoveries: tokio::sync::watch::channel(0).0,
            outage_events: tokio::sync::watch::channel(0).0,
            reported: Mutex::new(Health::Ready),
            health_events,
            metrics,
        }
    }

    /// Publish the current health if it differs from the last one published.
    /// Called after every change of the state health derives from; the health
    /// is read under the lock so that concurrent callers publish in order and
    /// the last one leaves the current health published.
    fn publish_health(&self) {
        let mut reported = self.reported.lock();
        let now = self.health();
        if *reported == now {
            return;
        }
        let from = std::mem::replace(&mut *reported, now);
        debug!(cluster = %self.name, ?from, to = ?now, "cluster health changed");
        if let Some(tx) = &self.health_events {
            // No receiver (no manager running) is fine.
            let _ = tx.send(HealthChange {
                cluster: self.name.clone(),
                from,
                to: now,
            });
        }
    }

    /// The cluster's name, as used in requests and actions.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// A client for the cluster (cheap to clone).
    #[must_use]
    pub fn client(&self) -> kube::Client {
        self.client.clone()
    }

    /// Whether this is the primary cluster.
    #[must_use]
    pub fn is_primary(&self) -> bool {
        self.primary
    }

    /// Current health.
    #[must_use]
    pub fn health(&self) -> Health {
        if self.unreachable.load(Ordering::Relaxed) {
            Health::Unreachable
        } else if self.unsynced.load(Ordering::Relaxed) > 0 {
            Health::Syncing
        } else {
            Health::Ready
        }
    }

    /// Record a failed request or watch that indicates the cluster cannot be reached.
    pub fn mark_unreachable(&self, why: &dyn std::fmt::Display) {
        if !self.unreachable.swap(true, Ordering::Relaxed) {
            self.outages.fetch_add(1, Ordering::Relaxed);
            if let Some(metrics) = &self.metrics {
                metrics.set_cluster_reachable(&self.name, false);
            }
            warn!(cluster = %self.name, error = %why, "cluster unreachable");
            self.outage_events.send_modify(|n| *n += 1);
            self.publish_health();
        }
    }

    /// Record a successful request.
    pub fn mark_reachable(&self) {
        if self.unreachable.swap(false, Ordering::Relaxed) {
            if let Some(metrics) = &self.metrics {
                metrics.set_cluster_reachable(&self.name, true);
            }
            info!(cluster = %self.name, "cluster reachable again");
            self.recoveries.send_modify(|n| *n += 1);
            self.publish_health();
        }
    }

    /// How many times the cluster became unreachable so far.
    #[must_use]
    pub fn outages(&self) -> u64 {
        self.outages.load(Ordering::Relaxed)
    }

    /// A receiver that changes each time the cluster becomes unreachable.
    #[must_use]
    pub fn outage_events(&self) -> tokio::sync::watch::Receiver<u64> {
        self.outage_events.subscribe()
    }

    /// A receiver that changes each time the cluster recovers from unreachable.
    #[must_use]
    pub fn recoveries(&self) -> tokio::sync::watch::Receiver<u64> {
        self.recoveries.subscribe()
    }

    pub(crate) fn cache_unsynced(&self) {
        self.unsynced.fetch_add(1, Ordering::Relaxed);
        self.publish_health();
    }

    pub(crate) fn cache_synced(&self) {
        // Saturating: a cache that stops before syncing and one that synced
        // both call this exactly once per `cache_unsynced`.
        let _ = self
            .unsynced
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        self.publish_health();
    }
}

/// A change of the set of engaged clusters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    /// A cluster was engaged.
    Added(String),
    /// A cluster was disengaged.
    Removed(String),
}

/// Where a cluster's client configuration comes from.
#[derive(Clone, Debug)]
pub enum Source {
    /// A context of a kubeconfig file (`None` = the default kubeconfig).
    Context {
        /// Kubeconfig file; `None` uses `KUBECONFIG` / `~/.kube/config`.
        kubeconfig: Option<std::path::PathBuf>,
        /// Context name; `None` = the file's current context.
        context: Option<String>,
    },
    /// The Pod's service account.
    InCluster,
    /// `Config::infer()`: kubeconfig if present, else in-cluster.
    Infer,
}

/// Build a client for `cluster` from `source`.
///
/// # Errors
/// When the configuration cannot be loaded or the client cannot be built.
pub async fn connect(cluster: &str, source: &Source, user_agent: &str) -> Result<kube::Client> {
    let mut config = match source {
        Source::Context {
            kubeconfig,
            context,
        } => {
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            let load = |source| Error::LoadContext {
                cluster: cluster.to_owned(),
                context: context.clone().unwrap_or_default(),
                source,
            };
            match kubeconfig {
                Some(path) => {
                    let file = read_kubeconfig(path)?;
                    kube::Config::from_custom_kubeconfig(file, &options)
                        .await
                        .map_err(load)?
                }
                None => kube::Config::from_kubeconfig(&options)
                    .await
                    .map_err(load)?,
            }
        }
        Source::InCluster => kube::Config::incluster().map_err(|source| Error::InCluster {
            cluster: cluster.to_owned(),
            source,
        })?,
        Source::Infer => kube::Config::infer().await.map_err(|source| Error::Infer {
            cluster: cluster.to_owned(),
            source,
        })?,
    };
    set_user_agent(&mut config, user_agent);
    kube::Client::try_from(config).map_err(|source| Error::Client {
        cluster: cluster.to_owned(),
        source,
    })
}

/// The `User-Agent` of every request this process sends when no identity
/// is configured: `rekon/<version>`.
#[must_use]
pub fn default_user_agent() -> String {
    format!("rekon/{}", env!("CARGO_PKG_VERSION"))
}

/// `rekon/<version> (<identity>)`: the `User-Agent` of a replica, so an API
/// server's audit log (and kube-sim's request log) tells replicas apart.
#[must_use]
pub fn user_agent_for(identity: &str) -> String {
    format!("{} ({identity})", default_user_agent())
}

/// Send `user_agent` with every request of clients built from `config`
/// (kube-rs sends none of its own). A value that is not a valid header is
/// replaced by [`default_user_agent`].
pub fn set_user_agent(config: &mut kube::Config, user_agent: &str) {
    let value = http::HeaderValue::from_str(user_agent).unwrap_or_else(|_| {
        http::HeaderValue::from_str(&default_user_agent()).expect("ASCII header value")
    });
    config
        .headers
        .retain(|(name, _)| name != http::header::USER_AGENT);
    config.headers.push((http::header::USER_AGENT, value));
}

fn read_kubeconfig(path: &Path) -> Result<Kubeconfig> {
    Kubeconfig::read_from(path).map_err(|source| Error::ReadKubeconfig {
        path: path.display().to_string(),
        source,
    })
}

/// Parse `NAME=CONTEXT`.
///
/// # Errors
/// When there is no `=` or either side is empty.
pub fn parse_cluster_spec(spec: &str) -> Result<(String, String)> {
    match spec.split_once('=') {
        Some((name, ctx)) if !name.is_empty() && !ctx.is_empty() => {
            Ok((name.to_owned(), ctx.to_owned()))
        }
        _ => Err(Error::InvalidSpec(spec.to_owned())),
    }
}

/// The engaged clusters: the primary (from a kubeconfig context or the
/// in-cluster service account) and others added and removed at runtime.
/// Subscribers ([`ClusterRegistry::subscribe`]) start and stop watches and
/// requeue work in response; every change of a cluster's health is
/// published ([`ClusterRegistry::health_changes`]). Cheap to clone (shared
/// state).
#[derive(Clone)]
pub struct ClusterRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    primary: String,
    user_agent: RwLock<String>,
    clusters: RwLock<BTreeMap<String, Arc<Cluster>>>,
    events: broadcast::Sender<ClusterEvent>,
    health: broadcast::Sender<HealthChange>,
    metrics: Metrics,
}

impl std::fmt::Debug for ClusterRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClusterRegistry")
            .field("primary", &self.inner.primary)
            .field("clusters", &self.names())
            .finish()
    }
}

impl ClusterRegistry {
    /// A registry whose primary cluster is `name`, reached through
    /// `client`, with metrics of its own (reported nowhere; see
    /// [`ClusterRegistry::with_metrics`]).
    #[must_use]
    pub fn new(primary: impl Into<String>, client: kube::Client) -> Self {
        Self::with_metrics(primary, client, Metrics::new())
    }

    /// A registry whose primary cluster is `name`, reached through
    /// `client`, reporting to `metrics`: engaged and reachable clusters
    /// here, and, through [`ClusterRegistry::metrics`], everything built on
    /// the registry (caches, writer, controllers, ops).
    #[must_use]
    pub fn with_metrics(
        primary: impl Into<String>,
        client: kube::Client,
        metrics: Metrics,
    ) -> Self {
        let primary = primary.into();
        metrics.set_cluster_engaged(&primary, true);
        metrics.set_cluster_reachable(&primary, true);
        let health = broadcast::channel(256).0;
        let mut clusters = BTreeMap::new();
        clusters.insert(
            primary.clone(),
            Arc::new(Cluster::with_health_events(
                primary.clone(),
                client,
                true,
                Some(health.clone()),
                Some(metrics.clone()),
            )),
        );
        Self {
            inner: Arc::new(Inner {
                primary,
                user_agent: RwLock::new(default_user_agent()),
                clusters: RwLock::new(clusters),
                events: broadcast::channel(256).0,
                health,
                metrics,
            }),
        }
    }

    /// The metrics this registry and everything built on it report to.
    #[must_use]
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// Set the `User-Agent` of clients this registry builds from a
    /// `kube::Config` (clusters engaged by providers).
    pub fn set_user_agent(&self, user_agent: impl Into<String>) {
        *self.inner.user_agent.write() = user_agent.into();
    }

    /// The `User-Agent` of clients this registry builds.
    #[must_use]
    pub fn user_agent(&self) -> String {
        self.inner.user_agent.read().clone()
    }

    /// Name of the primary cluster.
    #[must_use]
    pub fn primary(&self) -> &str {
        &self.inner.primary
    }

    /// The cluster named `name`, if engaged.
    #[must_use]
    pub fn get(&self, name: &str) -> Option<Arc<Cluster>> {
        self.inner.clusters.read().get(name).cloned()
    }

    /// Names of the engaged clusters, sorted.
    #[must_use]
    pub fn names(&self) -> Vec<String> {
        self.inner.clusters.read().keys().cloned().collect()
    }

    /// All engaged clusters, sorted by name.
    #[must_use]
    pub fn all(&self) -> Vec<Arc<Cluster>> {
        self.inner.clusters.read().values().cloned().collect()
    }

    /// Engage a cluster. Subscribers start its watches and requeue the
    /// primaries of plugins that cover it.
    ///
    /// # Errors
    /// When a cluster with that name is already engaged.
    pub fn add(&self, name: impl Into<String>, client: kube::Client) -> Result<()> {
        let name = name.into();
        {
            let mut clusters = self.inner.clusters.write();
            if clusters.contains_key(&name) {
                return Err(Error::Duplicate(name));
            }
            clusters.insert(
                name.clone(),
                Arc::new(Cluster::with_health_events(
                    name.clone(),
                    client,
                    false,
                    Some(self.inner.health.clone()),
                    Some(self.inner.metrics.clone()),
                )),
            );
        }
        self.inner.metrics.set_cluster_engaged(&name, true);
        self.inner.metrics.set_cluster_reachable(&name, true);
        info!(cluster = %name, "cluster engaged");
        let _ = self.inner.events.send(ClusterEvent::Added(name));
        Ok(())
    }

    /// Disengage a cluster: its watches stop and its pending requests are
    /// dropped. Returns whether it was engaged.
    ///
    /// # Errors
    /// When `name` is the primary cluster.
    pub fn remove(&self, name: &str) -> Result<bool> {
        if name == self.inner.primary {
            return Err(Error::RemovePrimary(name.to_owned()));
        }
        let removed = self.inner.clusters.write().remove(name).is_some();
        if removed {
            self.inner.metrics.set_cluster_engaged(name, false);
            info!(cluster = %name, "cluster disengaged");
            let _ = self
                .inner
                .events
                .send(ClusterEvent::Removed(name.to_owned()));
        }
        Ok(removed)
    }

    /// Changes of the engaged set from now on.
    #[must_use]
    pub fn subscribe(&self) -> broadcast::Receiver<ClusterEvent> {
        self.inner.events.subscribe()
    }

    /// Health changes of engaged clusters from now on (each a change of
    /// [`Cluster::health`]; not debounced).
    #[must_use]
    pub fn health_changes(&self) -> broadcast::Receiver<HealthChange> {
        self.inner.health.subscribe()
    }

    /// Probe every engaged cluster every `interval` (a version request bounded
    /// by `timeout`) and update its health, until `shutdown` resolves.
    pub async fn run_probes(
        self,
        interval: Duration,
        timeout: Duration,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let probe_all = async {
            let mut tick = tokio::time::interval(interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let probes = self.all().into_iter().map(|cluster| async move {
                    match tokio::time::timeout(timeout, cluster.client.apiserver_version()).await {
                        Ok(Ok(_)) => cluster.mark_reachable(),
                        Ok(Err(e)) => {
                            debug!(cluster = %cluster.name, error = %e, "probe failed");
                            cluster.mark_unreachable(&e);
                        }
                        Err(_) => cluster.mark_unreachable(&"probe timed out"),
                    }
                });
                futures::future::join_all(probes).await;
            }
        };
        tokio::select! {
            () = probe_all => {}
            () = shutdown => {}
        }
    }
}

/// Whether a client error says the cluster could not be reached (as opposed
/// to an answer from the API server).
#[must_use]
pub fn is_connectivity_error(e: &kube::Error) -> bool {
    match e {
        kube::Error::Api(status) => status.code >= 500,
        kube::Error::HyperError(_) | kube::Error::Service(_) => true,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_spec_parses() {
        assert_eq!(
            parse_cluster_spec("edge=kind-edge").unwrap(),
            ("edge".to_owned(), "kind-edge".to_owned())
        );
        assert!(parse_cluster_spec("edge").is_err());
        assert!(parse_cluster_spec("=ctx").is_err());
        assert!(parse_cluster_spec("edge=").is_err());
    }

    #[tokio::test]
    async fn every_health_change_is_published_once() {
        let client = kube::Client::try_from(kube::Config::new(
            "http://127.0.0.1:9".parse().expect("static URL"),
        ))
        .expect("client");
        let registry = ClusterRegistry::new("main", client.clone());
        let mut changes = registry.health_changes();
        registry.add("edge", client).expect("add edge");
        let edge = registry.get("edge").expect("edge engaged");
        edge.cache_unsynced();
        edge.cache_unsynced(); // still syncing: no change
        edge.mark_unreachable(&"test");
        edge.mark_unreachable(&"test"); // already unreachable
        edge.mark_reachable(); // two caches still listing
        edge.cache_synced();
        edge.cache_synced();
        edge.mark_reachable(); // already reachable
        let mut got = Vec::new();
        while let Ok(c) = changes.try_recv() {
            got.push((c.cluster, c.from, c.to));
        }
        let edge = |from, to| ("edge".to_owned(), from, to);
        assert_eq!(
            got,
            vec![
                edge(Health::Ready, Health::Syncing),
                edge(Health::Syncing, Health::Unreachable),
                edge(Health::Unreachable, Health::Syncing),
                edge(Health::Syncing, Health::Ready),
            ]
        );
    }
}
