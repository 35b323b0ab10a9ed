//! The manager: one controller per loaded plugin, following the plugin
//! registry (load, swap, removal) and the cluster registry (engage,
//! disengage, health changes), and reporting watches that degrade plugins.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use parking_lot::Mutex;
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;
use tracing::{error, info, warn};

use super::config::{ControllerConfig, QueueStats};
use super::health::{HEALTH_DEBOUNCE, HealthDebounce};
use super::reads::cluster_infos;
use super::reconciler::{Layer, Reconciler};
use super::routing::run_events;
use super::runner::{Ctx, Shared, run_queue, sleep_until};
use super::scope::WatchKey;
use super::scope::covers;
use crate::action::Registration;
use crate::cache::{CacheManager, WatchFailure, WatchFailureChange};
use crate::cluster::ClusterEvent;
use crate::plugin::{LoadedPlugin, PluginRegistry, RegistryEvent};
use crate::writer::Writer;

/// A plugin degraded in one cluster because a watch it needs fails for a
/// reason other than connectivity (RBAC, CRD not installed, ...).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Degraded {
    /// The plugin.
    pub plugin: String,
    /// The cluster.
    pub cluster: String,
    /// The resource (`group/version/Kind`).
    pub resource: String,
    /// The API's reason.
    pub failure: WatchFailure,
}

impl std::fmt::Display for Degraded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "plugin {} degraded in cluster {}: cannot watch {}: {}",
            self.plugin, self.cluster, self.resource, self.failure
        )
    }
}

struct Controller {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    runner: tokio::task::JoinHandle<()>,
    events: tokio::task::JoinHandle<()>,
}

fn max_concurrent(reg: &Registration, default: usize) -> usize {
    reg.max_concurrent_reconciles
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
        .max(1)
}

impl Controller {
    fn start(plugin: Arc<dyn Reconciler>, ctx: Ctx, suspended: bool) -> Self {
        let max = max_concurrent(plugin.registration(), ctx.config.max_concurrent_reconciles);
        let name = plugin.name().to_owned();
        ctx.metrics
            .set_max_concurrent_reconciles(&name, u32::try_from(max).unwrap_or(u32::MAX));
        let shared = Arc::new(Shared::new(plugin, ctx, max));
        shared.set_suspended(suspended);
        let (stop, stop_rx) = watch::channel(false);
        let events = tokio::spawn(run_events(
            Arc::clone(&shared),
            Arc::clone(&shared.inbox),
            Arc::clone(&shared.custom_inbox),
        ));
        shared.sync_watches();
        shared.begin_settling();
        let runner = tokio::spawn(run_queue(Arc::clone(&shared), stop_rx));
        info!(plugin = %shared.name, max_concurrent = max, "controller started");
        Self {
            shared,
            stop,
            runner,
            events,
        }
    }

    /// Swap in a new version: watches follow its registration, reconciles
    /// wait until they settled, every primary is requeued once. The queue
    /// stays: keys running on the old version finish there and are known to
    /// the queue until then, so none runs twice at once.
    fn replace(&self, plugin: Arc<dyn Reconciler>) {
        let old_primary = self.shared.scope().resource.clone();
        let max = max_concurrent(
            plugin.registration(),
            self.shared.ctx.config.max_concurrent_reconciles,
        );
        self.shared.set_plugin(plugin);
        self.shared.max_concurrent.store(max, Ordering::Relaxed);
        self.shared.ctx.metrics.set_max_concurrent_reconciles(
            &self.shared.name,
            u32::try_from(max).unwrap_or(u32::MAX),
        );
        self.shared.sync_watches();
        if !self.shared.scope().resource.same_type(&old_primary) {
            // Keys of the old primary kind mean nothing now; running ones
            // stay known until they finish.
            self.shared.queue.lock().forget_pending();
        }
        self.shared.begin_settling();
        self.shared.requeue_all("plugin replaced");
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.runner.await;
        self.shared.release_watches();
        let _ = self.events.await;
        self.shared.ctx.metrics.forget_controller(&self.shared.name);
        info!(plugin = %self.shared.name, "controller stopped");
    }
}

/// Runs one controller per plugin. It follows the plugin registry (load,
/// replace, remove) and the cluster registry (engage, disengage, health
/// changes): each of these requeues the primaries of the plugins whose
/// `clusters` cover the cluster (health changes coalesced per cluster over
/// [`HEALTH_DEBOUNCE`](super::HEALTH_DEBOUNCE)). It also names the plugins
/// a failing watch degrades ([`Manager::degraded`]). Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<ManagerInner>,
}

struct ManagerInner {
    ctx: Ctx,
    /// Wrapped around every plugin started or swapped in (recording and
    /// shadowing, `crate::change`).
    layer: parking_lot::RwLock<Option<Arc<dyn Layer>>>,
    controllers: Mutex<HashMap<String, Controller>>,
    /// Suspended plugins (their controllers start suspended too).
    suspended: Mutex<std::collections::BTreeSet<String>>,
    degraded: broadcast::Sender<Degraded>,
    _stop_background: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("plugins", &self.plugins())
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager over `caches` (and their clusters), writing with `writer`
    /// (whose successful responses go into `caches`: read-your-writes).
    /// Must be called inside a tokio runtime: it follows cluster changes and
    /// watch failures in a task.
    #[must_use]
    pub fn new(caches: CacheManager, writer: Writer, config: ControllerConfig) -> Self {
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel();
        let clusters = caches.clusters().clone();
        let mut failures = caches.failures();
        let writer = writer.observing(caches.clone());
        let inner = Arc::new(ManagerInner {
            ctx: Ctx {
                metrics: clusters.metrics().clone(),
                clusters: clusters.clone(),
                caches,
                writer,
                config,
            },
            layer: parking_lot::RwLock::default(),
            controllers: Mutex::new(HashMap::new()),
            suspended: Mutex::default(),
            degraded: broadcast::channel(256).0,
            _stop_background: stop_tx,
        });
        let weak = Arc::downgrade(&inner);
        let mut events = clusters.subscribe();
        let mut health = clusters.health_changes();
        let mut health_open = true;
        let mut failures_open = true;
        let mut debounce = HealthDebounce::new(HEALTH_DEBOUNCE);
        tokio::spawn(async move {
            loop {
                let due = debounce.next_due();
                tokio::select! {
                    ev = events.recv() => {
                        let event = match ev {
                            Ok(e) => e,
                            Err(broadcast::error::RecvError::Lagged(n)) => {
                                error!(missed = n, "missed cluster events");
                                continue;
                            }
                            Err(broadcast::error::RecvError::Closed) => return,
                        };
                        let Some(inner) = weak.upgrade() else { return };
                        Self { inner }.on_cluster_event(&event);
                    }
                    change = health.recv(), if health_open => match change {
                        Ok(change) => debounce.record(&change.cluster, Instant::now()),
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            warn!(missed = n, "missed cluster health changes; requeueing every cluster");
                            for name in clusters.names() {
                                debounce.record(&name, Instant::now());
                            }
                        }
                        Err(broadcast::error::RecvError::Closed) => health_open = false,
                    },
                    change = failures.recv(), if failures_open => match change {
                        Ok(change) => {
                            let Some(inner) = weak.upgrade() else { return };
                            Self { inner }.on_watch_failure(&change);
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            warn!(missed = n, "missed watch failure changes");
                        }
                        Err(broadcast::error::RecvError::Closed) => failures_open = false,
                    },
                    () = sleep_until(due) => {
                        let requeue = debounce.take_due(Instant::now(), |name| {
                            clusters.get(name).map(|c| c.health())
                        });
                        let Some(inner) = weak.upgrade() else { return };
                        let manager = Self { inner };
                        for (cluster, health) in requeue {
                            info!(%cluster, ?health, "cluster health changed; requeueing the primaries of the plugins covering it");
                            manager.requeue_covering(&cluster, &format!("cluster-health:{cluster}"));
                        }
                    }
                    _ = &mut stop_rx => return,
                }
            }
        });
        Self { inner }
    }

    fn on_cluster_event(&self, event: &ClusterEvent) {
        {
            let controllers = self.inner.controllers.lock();
            for ctl in controllers.values() {
                ctl.shared.sync_watches();
                if let ClusterEvent::Removed(c) = event {
                    ctl.shared.queue.lock().forget_cluster(c);
                }
            }
        }
        match event {
            ClusterEvent::Added(c) => self.requeue_covering(c, &format!("cluster {c} engaged")),
            ClusterEvent::Removed(c) => {
                self.requeue_covering(c, &format!("cluster {c} disengaged"));
                self.inner.ctx.caches.resolver().forget_cluster(c);
            }
        }
    }

    /// A watch failed or recovered: name the plugins it degrades (a warning
    /// per change), tell subscribers, and requeue those plugins' primaries
    /// on recovery (they may have acted on a partial view).
    /// The controllers that read the watch `key`.
    fn watching(&self, key: &WatchKey) -> Vec<Arc<Shared>> {
        self.inner
            .controllers
            .lock()
            .values()
            .filter(|c| c.shared.snapshot().contains_key(key))
            .map(|c| Arc::clone(&c.shared))
            .collect()
    }

    fn on_watch_failure(&self, change: &WatchFailureChange) {
        let affected = self.watching(&WatchKey::new(&change.cluster, &change.resource));
        let names: Vec<&str> = affected.iter().map(|s| s.name.as_str()).collect();
        match &change.failure {
            Some(failure) => {
                warn!(
                    cluster = %change.cluster,
                    resource = %change.resource,
                    plugins = ?names,
                    code = ?failure.code,
                    reason = %failure.reason,
                    "plugins degraded: a watch they need fails (other plugins and the cluster's health are unaffected; recovers by itself)"
                );
                for s in &affected {
                    let _ = self.inner.degraded.send(Degraded {
                        plugin: s.name.clone(),
                        cluster: change.cluster.clone(),
                        resource: change.resource.to_string(),
                        failure: failure.clone(),
                    });
                }
            }
            None => {
                info!(cluster = %change.cluster, resource = %change.resource, plugins = ?names, "watch recovered; plugins no longer degraded");
                for s in &affected {
                    s.requeue_all(&format!("watch of {} recovered", change.resource));
                }
            }
        }
    }

    /// Plugins degraded now, one entry per (plugin, cluster, resource).
    #[must_use]
    pub fn degraded(&self) -> Vec<Degraded> {
        let mut out = Vec::new();
        for (cluster, resource, failure) in self.inner.ctx.caches.failing() {
            for shared in self.watching(&WatchKey::new(&cluster, &resource)) {
                out.push(Degraded {
                    plugin: shared.name.clone(),
                    cluster: cluster.clone(),
                    resource: resource.to_string(),
                    failure: failure.clone(),
                });
            }
        }
        for ctl in self.inner.controllers.lock().values() {
            for (key, reason) in ctl.shared.declaration_disagreements() {
                out.push(Degraded {
                    plugin: ctl.shared.name.clone(),
                    cluster: key.cluster.clone(),
                    resource: if key.group.is_empty() {
                        format!("{}/{}", key.version, key.kind)
                    } else {
                        format!("{}/{}/{}", key.group, key.version, key.kind)
                    },
                    failure: WatchFailure { code: None, reason },
                });
            }
        }
        out.sort_by(|a, b| {
            (&a.plugin, &a.cluster, &a.resource).cmp(&(&b.plugin, &b.cluster, &b.resource))
        });
        out
    }

    /// Plugins becoming degraded (one message per plugin and failure change).
    #[must_use]
    pub fn degraded_changes(&self) -> broadcast::Receiver<Degraded> {
        self.inner.degraded.subscribe()
    }

    /// Requeue every primary of each plugin whose registration `clusters`
    /// cover `cluster`.
    fn requeue_covering(&self, cluster: &str, reason: &str) {
        let primary = self.inner.ctx.clusters.primary().to_owned();
        let controllers = self.inner.controllers.lock();
        for ctl in controllers.values() {
            let shared = &ctl.shared;
            if covers(&shared.plugin().registration().clusters, cluster, &primary) {
                shared.requeue_all(reason);
            }
        }
    }

    /// Names of the plugins with a running controller.
    #[must_use]
    pub fn plugins(&self) -> Vec<String> {
        let mut v: Vec<_> = self.inner.controllers.lock().keys().cloned().collect();
        v.sort();
        v
    }

    /// What plugin `plugin`'s calls outside a reconcile (its admission
    /// webhooks) may read: the caches its controller reads, as a reconcile
    /// would. `None` while it has no controller.
    #[must_use]
    pub fn reads(&self, plugin: &str) -> Option<Arc<dyn crate::plugin::HostReads>> {
        self.inner
            .controllers
            .lock()
            .get(plugin)
            .map(|c| c.shared.reads())
    }

    /// Queue figures of a plugin's controller.
    #[must_use]
    pub fn queue_stats(&self, plugin: &str) -> Option<QueueStats> {
        self.inner
            .controllers
            .lock()
            .get(plugin)
            .map(|c| c.shared.stats())
    }

    /// Objects with cache events not yet routed (or waiting for the
    /// plugin's `map`) in a plugin's controller: at most two events each,
    /// so bounded by the watched objects, whatever the event rate.
    #[must_use]
    pub fn pending_events(&self, plugin: &str) -> Option<usize> {
        self.inner
            .controllers
            .lock()
            .get(plugin)
            .map(|c| c.shared.pending_events())
    }

    /// Objects (`cluster:namespace/name`) in a plugin's primary caches that
    /// carry its finalizer.
    #[must_use]
    pub fn finalized_objects(&self, plugin: &str) -> Vec<String> {
        self.inner
            .controllers
            .lock()
            .get(plugin)
            .map(|c| c.shared.finalized_objects())
            .unwrap_or_default()
    }

    /// Start the controller of `plugin`, or swap the plugin of a running one
    /// (watches follow the new registration, every primary is requeued once;
    /// in-flight reconciles finish on the version that started them).
    pub fn upsert(&self, plugin: Arc<dyn Reconciler>) {
        let plugin = match &*self.inner.layer.read() {
            Some(layer) => layer.wrap(plugin),
            None => plugin,
        };
        // The writer's last gate for this plugin: every write done for it,
        // the host's finalizer patches included, must be one it may do.
        let gate_plugin = Arc::clone(&plugin);
        let clusters = self.inner.ctx.clusters.clone();
        self.inner.ctx.writer.set_gate(
            plugin.name(),
            Arc::new(move |action| {
                gate_plugin
                    .check_action(action, &cluster_infos(&clusters))
                    .map_err(|e| e.to_string())
            }),
        );
        let mut controllers = self.inner.controllers.lock();
        match controllers.get(plugin.name()) {
            Some(ctl) => {
                info!(plugin = %plugin.name(), version = %plugin.registration().version, "plugin replaced");
                ctl.replace(plugin);
            }
            None => {
                let name = plugin.name().to_owned();
                let suspended = self.inner.suspended.lock().contains(&name);
                controllers.insert(
                    name,
                    Controller::start(plugin, self.inner.ctx.clone(), suspended),
                );
            }
        }
    }

    /// Suspend or resume the controller of `plugin` (now, or when it
    /// starts): suspended, its watches and queue keep running and events
    /// are kept (deduplicated per key) but nothing is reconciled or
    /// written; resumed, it reconciles what queued up.
    pub fn set_suspended(&self, plugin: &str, suspended: bool) {
        {
            let mut set = self.inner.suspended.lock();
            if suspended {
                set.insert(plugin.to_owned());
            } else {
                set.remove(plugin);
            }
        }
        if let Some(ctl) = self.inner.controllers.lock().get(plugin) {
            ctl.shared.set_suspended(suspended);
        }
    }

    /// Whether `plugin`'s controller is suspended.
    #[must_use]
    pub fn is_suspended(&self, plugin: &str) -> bool {
        self.inner.suspended.lock().contains(plugin)
    }

    fn follow_suspensions(&self, wanted: &std::collections::BTreeSet<String>) {
        let current = self.inner.suspended.lock().clone();
        for name in current.difference(wanted) {
            self.set_suspended(name, false);
        }
        for name in wanted.difference(&current) {
            self.set_suspended(name, true);
        }
    }

    /// Wrap every plugin started or swapped in from now on with `layer`
    /// (recording and shadowing; set it before [`Self::run`]).
    pub fn set_layer(&self, layer: Arc<dyn Layer>) {
        *self.inner.layer.write() = Some(layer);
    }

    /// Stop a plugin's controller (in-flight reconciles finish) and release
    /// its watches. Its finalizer stays on the objects that carry it (their
    /// cleanup would otherwise be skipped): how many is logged, with the
    /// command that releases them.
    pub async fn remove(&self, plugin: &str) {
        let ctl = self.inner.controllers.lock().remove(plugin);
        if let Some(ctl) = ctl {
            let finalizer = ctl.shared.scope().finalizer.clone();
            ctl.stop_and_report(finalizer).await;
        }
        self.inner.ctx.writer.remove_gate(plugin);
    }

    /// Stop every controller gracefully.
    pub async fn shutdown(&self) {
        let all: Vec<Controller> = self
            .inner
            .controllers
            .lock()
            .drain()
            .map(|(_, c)| c)
            .collect();
        futures::future::join_all(all.into_iter().map(Controller::stop)).await;
    }

    /// Follow `registry` until `shutdown` resolves, then stop every controller
    /// gracefully.
    pub async fn run(
        &self,
        registry: &PluginRegistry,
        shutdown: impl std::future::Future<Output = ()>,
    ) {
        let mut events = registry.subscribe();
        let mut suspensions = registry.suspensions();
        let mut suspensions_open = true;
        self.follow_suspensions(&suspensions.borrow_and_update().clone());
        // What this loop started, to skip `Loaded` events that repeat the
        // initial `plugins()` snapshot.
        let mut started: HashMap<String, LoadedPlugin> = HashMap::new();
        for plugin in registry.plugins() {
            started.insert(plugin.name().to_owned(), plugin.clone());
            self.upsert(Arc::new(plugin));
        }
        tokio::pin!(shutdown);
        loop {
            let event = tokio::select! {
                ev = events.recv() => ev,
                changed = suspensions.changed(), if suspensions_open => {
                    if changed.is_err() {
                        suspensions_open = false;
                    } else {
                        let wanted = suspensions.borrow_and_update().clone();
                        self.follow_suspensions(&wanted);
                    }
                    continue;
                }
                () = &mut shutdown => break,
            };
            // A plugin suspended before it loads starts suspended: the
            // registry's set is current whatever order events come in.
            let wanted = suspensions.borrow_and_update().clone();
            self.follow_suspensions(&wanted);
            match event {
                Ok(RegistryEvent::Loaded(p)) => {
                    if !started.get(p.name()).is_some_and(|s| s.same_load(&p)) {
                        started.insert(p.name().to_owned(), p.clone());
                        self.upsert(Arc::new(p));
                    }
                }
                Ok(RegistryEvent::Replaced { new, .. }) => {
                    started.insert(new.name().to_owned(), new.clone());
                    self.upsert(Arc::new(new));
                }
                Ok(RegistryEvent::Removed { name }) => {
                    started.remove(&name);
                    self.remove(&name).await;
                }
                // Reported (once per change, with whether a version keeps
                // serving) by the registry and the ops status reporter.
                Ok(RegistryEvent::Failed { .. }) => {}
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    // Resynchronize from the registry's current state.
                    warn!(missed = n, "missed plugin registry events; resynchronizing");
                    let loaded: HashMap<String, LoadedPlugin> = registry
                        .plugins()
                        .into_iter()
                        .map(|p| (p.name().to_owned(), p))
                        .collect();
                    for name in self.plugins() {
                        if !loaded.contains_key(&name) {
                            self.remove(&name).await;
                        }
                    }
                    for p in loaded.into_values() {
                        started.insert(p.name().to_owned(), p.clone());
                        self.upsert(Arc::new(p));
                    }
                }
                Err(broadcast::error::RecvError::Closed) => break,
            }
        }
        self.shutdown().await;
    }
}

impl Controller {
    async fn stop_and_report(self, finalizer: Option<String>) {
        let name = self.shared.name.clone();
        let held = self.shared.finalized_objects();
        self.stop().await;
        let Some(finalizer) = finalizer else { return };
        if held.is_empty() {
            return;
        }
        let mut per_cluster: BTreeMap<&str, usize> = BTreeMap::new();
        for o in &held {
            *per_cluster
                .entry(o.split_once(':').map_or(o.as_str(), |(c, _)| c))
                .or_default() += 1;
        }
        warn!(
            plugin = %name,
            %finalizer,
            objects = held.len(),
            per_cluster = ?per_cluster,
            examples = ?held.iter().take(5).collect::<Vec<_>>(),
            "plugin removed while objects still carry its finalizer: they cannot be deleted until it is removed; reload the plugin to let it clean up, or run `rekon plugin release {name}` to list them and `--remove` to strip the finalizer without cleanup"
        );
    }
}
