//! Per-plugin controllers and the manager that starts, swaps and stops them.
//!
//! One controller per loaded plugin:
//!
//! 1. its registration is resolved against the engaged clusters into a set of
//!    watches ([`routing`]: one [`WatchKey`] per resource and cluster, each
//!    with the mappings that apply) and a [`PrimaryScope`] (its primaries:
//!    the primary kind, in the primary clusters, matching the primary
//!    selector); the caches are shared with other plugins
//!    ([`crate::cache::CacheManager`]);
//! 2. cache events arrive in the controller's inbox (coalesced per object)
//!    and are mapped ([`mapping`]) to request keys that always name their
//!    cluster, and queued ([`queue::WorkQueue`]); `custom` mappings are
//!    called off the event pump;
//! 3. the runner ([`runner`]) hands keys to up to
//!    `max-concurrent-reconciles` reconcile tasks once the watches have
//!    settled; each reads the primary from the cache, takes the step the
//!    shared scope rule gives ([`finalizer`]: add the finalizer, reconcile
//!    live / deleting / leaving, release the finalizer), calls the plugin,
//!    and gives the outcome's actions to the [`crate::writer::Writer`];
//!    errors back off, `requeue-after` sets a timer.
//!
//! The [`Manager`] follows the plugin registry (load, replace, remove) and the
//! cluster registry (engage, disengage, health changes): each of these
//! requeues the primaries of the plugins whose `clusters` cover the cluster
//! (health changes coalesced per cluster over [`HEALTH_DEBOUNCE`], see
//! [`health`]). It also names the plugins a failing watch degrades.
//!
//! ```no_run
//! # async fn demo(main: kube::Client, edge: kube::Client, plugins: rekon::plugin::PluginRegistry) -> anyhow::Result<()> {
//! use rekon::cache::{CacheManager, Resolver};
//! use rekon::cluster::ClusterRegistry;
//! use rekon::controller::{ControllerConfig, Manager};
//! use rekon::writer::{Writer, WriterConfig};
//!
//! let clusters = ClusterRegistry::new("main", main);
//! clusters.add("edge", edge)?;
//! let resolver = Resolver::default();
//! let caches = CacheManager::new(clusters.clone(), resolver.clone());
//! let writer = Writer::new(clusters.clone(), resolver, WriterConfig::default());
//! let manager = Manager::new(caches, writer, ControllerConfig::default());
//! // Follows plugin loads, swaps and removals until the future resolves,
//! // then lets in-flight reconciles finish.
//! manager.run(&plugins, async { let _ = tokio::signal::ctrl_c().await; }).await;
//! # Ok(()) }
//! ```

pub mod finalizer;
pub mod health;
pub mod manager;
pub mod mapping;
pub mod queue;
pub mod reads;
pub mod routing;
pub mod runner;

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;

use crate::cluster::ClusterRegistry;
use crate::plugin::{
    Action, CallError, ClusterInfo, ClusterSet, HostReads, LoadedPlugin, Outcome, Phase,
    Registration, Request, Resource,
};

pub use health::HEALTH_DEBOUNCE;
pub use manager::{Degraded, Manager};
pub use routing::{PrimaryScope, WatchKey};

/// What the controller needs from a plugin. [`LoadedPlugin`] is the real
/// one; tests and benchmarks can drive the engine with native code.
pub trait Reconciler: Send + Sync + 'static {
    /// Plugin name (by default the registration's).
    fn name(&self) -> &str {
        &self.registration().name
    }
    /// Its registration.
    fn registration(&self) -> &Registration;
    /// Hex sha256 of the build, where there is one (recorded cases name it).
    fn digest(&self) -> &str {
        ""
    }
    /// Reconcile one request in `phase` (live, deleting, leaving).
    fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>>;
    /// Whether the plugin may perform `action`: the writer's last gate,
    /// checked before every write done for the plugin (the host's own
    /// finalizer patches included). By default everything (native
    /// reconcilers in tests and benchmarks are trusted code).
    ///
    /// # Errors
    /// Why the action is refused.
    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        let _ = (action, clusters);
        Ok(())
    }

    /// The `custom` mapping. By default nothing: only plugins that declare a
    /// watch with the `custom` mapping are ever asked.
    fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object: String,
        reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        let _ = (cluster, resource, object, reads);
        async { Ok(Vec::new()) }.boxed()
    }
}

impl Reconciler for LoadedPlugin {
    fn name(&self) -> &str {
        LoadedPlugin::name(self)
    }

    fn registration(&self) -> &Registration {
        LoadedPlugin::registration(self)
    }

    fn digest(&self) -> &str {
        LoadedPlugin::digest(self)
    }

    fn reconcile(
        &self,
        req: Request,
        phase: Phase,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let this = self.clone();
        async move { LoadedPlugin::reconcile(&this, req, phase, reads, time).await }.boxed()
    }

    fn check_action(&self, action: &Action, clusters: &[ClusterInfo]) -> Result<(), CallError> {
        LoadedPlugin::check_action(self, action, clusters)
    }

    fn map(
        &self,
        cluster: &str,
        resource: &Resource,
        object: String,
        reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        let this = self.clone();
        let cluster = cluster.to_owned();
        let resource = resource.clone();
        async move { LoadedPlugin::map(&this, &cluster, &resource, object, reads).await }.boxed()
    }
}

/// Controller settings.
#[derive(Clone, Debug)]
pub struct ControllerConfig {
    /// Concurrent reconciles per plugin when its registration says none.
    pub max_concurrent_reconciles: usize,
    /// How long a controller waits for its caches to list before it starts
    /// reconciling anyway (unreachable clusters are not waited for).
    pub sync_timeout: Duration,
    /// Requeue every primary this often even if nothing changed, so drift
    /// that no watch reported (an object created and deleted while a watch
    /// was down) is repaired (controller-runtime's `SyncPeriod`). `None`: never.
    pub resync_period: Option<Duration>,
    /// Sharding across replicas: reconcile only the keys of the shards this
    /// replica holds, each write fenced by its shard's Lease. `None`: every key.
    pub shards: Option<crate::ops::shard::Shards>,
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            max_concurrent_reconciles: 4,
            sync_timeout: Duration::from_secs(30),
            resync_period: Some(Duration::from_secs(600)),
            shards: None,
        }
    }
}

/// Queue figures of one controller.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QueueStats {
    /// Ready keys.
    pub ready: usize,
    /// Running reconciles.
    pub running: usize,
    /// Keys waiting on a timer.
    pub delayed: usize,
}

/// Whether `cluster` belongs to `set`.
#[must_use]
pub fn covers(set: &ClusterSet, cluster: &str, primary: &str) -> bool {
    match set {
        ClusterSet::Primary => cluster == primary,
        ClusterSet::Others => cluster != primary,
        ClusterSet::All => true,
        ClusterSet::Named(names) => names.iter().any(|n| n == cluster),
    }
}

pub(crate) fn resolve_set(set: &ClusterSet, clusters: &ClusterRegistry) -> Vec<String> {
    match set {
        ClusterSet::Primary => vec![clusters.primary().to_owned()],
        ClusterSet::All => clusters.names(),
        ClusterSet::Others => {
            let primary = clusters.primary();
            let mut names = clusters.names();
            names.retain(|n| n != primary);
            names
        }
        ClusterSet::Named(names) => names
            .iter()
            .filter(|n| clusters.get(n).is_some())
            .cloned()
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cluster_sets() {
        assert!(covers(&ClusterSet::Primary, "main", "main"));
        assert!(!covers(&ClusterSet::Primary, "edge", "main"));
        assert!(covers(&ClusterSet::All, "edge", "main"));
        assert!(covers(
            &ClusterSet::Named(vec!["edge".into()]),
            "edge",
            "main"
        ));
        assert!(!covers(
            &ClusterSet::Named(vec!["edge".into()]),
            "sub",
            "main"
        ));
    }
}
