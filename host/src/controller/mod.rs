//! Per-plugin controllers and the manager that starts, swaps and stops them.
//!
//! One controller per loaded plugin:
//!
//! 1. its registration is resolved against the engaged clusters into a set of
//!    (cluster, resource) watches, each with the mappings that apply; the
//!    caches are shared with other plugins ([`crate::cache::CacheManager`]);
//! 2. cache events are mapped ([`mapping`]) to request keys that always name
//!    their cluster, and queued ([`queue::WorkQueue`]);
//! 3. the runner hands keys to up to `max-concurrent-reconciles` reconcile
//!    tasks; each reads the primary from the cache, handles the finalizer,
//!    calls the plugin, and gives the outcome's actions to the
//!    [`crate::writer::Writer`]; errors back off, `requeue-after` sets a timer.
//!
//! The [`Manager`] follows the plugin registry (load, replace, remove) and the
//! cluster registry (engage, disengage, health changes): each of these
//! requeues every primary of the plugins whose `clusters` cover the cluster
//! (health changes coalesced per cluster over [`HEALTH_DEBOUNCE`]).
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

pub mod mapping;
pub mod queue;
pub mod reads;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use kube::core::{Selector, SelectorExt};
use parking_lot::{Mutex, RwLock};
use tokio::sync::{Notify, mpsc, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span, warn};

use crate::cache::{
    CacheEvent, CacheManager, Change, ResourceId, SharedCache, Subscription, selector,
};
use crate::cluster::{ClusterEvent, ClusterRegistry, Health};
use crate::ops::metrics::{Metrics, QueueMetrics, ReconcileResult};
use crate::plugin::{
    Action, CallError, ClusterSet, HostReads, LoadedPlugin, Mapping, ObjectRef, Outcome,
    PatchAction, PatchType, PluginRegistry, Registration, RegistryEvent, Request, Resource,
};
use crate::writer::{Writer, resource_id};
use mapping::{Mapped, map_event};
use queue::{Done, ReqKey, WorkQueue};
use reads::{CacheMap, PluginReads};

/// What the controller needs from a plugin. [`LoadedPlugin`] is the real
/// one; tests and benchmarks can drive the engine with native code.
pub trait Reconciler: Send + Sync + 'static {
    /// Plugin name (by default the registration's).
    fn name(&self) -> &str {
        &self.registration().name
    }
    /// Its registration.
    fn registration(&self) -> &Registration;
    /// Reconcile one request.
    fn reconcile(
        &self,
        req: Request,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>>;
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

    fn reconcile(
        &self,
        req: Request,
        reads: Arc<dyn HostReads>,
        time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let this = self.clone();
        async move { LoadedPlugin::reconcile(&this, req, reads, time).await }.boxed()
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
}

impl Default for ControllerConfig {
    fn default() -> Self {
        Self {
            max_concurrent_reconciles: 4,
            sync_timeout: Duration::from_secs(30),
            resync_period: Some(Duration::from_secs(600)),
        }
    }
}

/// Health changes of one cluster within this long of the first one are
/// coalesced into (at most) one requeue of the primaries covering it.
pub const HEALTH_DEBOUNCE: Duration = Duration::from_secs(1);

/// Coalesces cluster health changes per cluster. Hand-written because the
/// window belongs to a side channel (kube-runtime's debounce works on the
/// reconciler's own trigger stream): a window opens with a cluster's first
/// change and closes [`HEALTH_DEBOUNCE`] later; the cluster is then requeued
/// once, with its health at that moment, if it is still engaged. Every
/// change passes through Syncing or Unreachable, which a plugin may have
/// read and acted on (a Test reports a Syncing cluster and waits), so even
/// a flap that ends where it started, or a short `Ready → Syncing → Ready`
/// blip of a new watch listing, requeues once. Blips are rare: they come
/// from caches starting in that cluster (a plugin load or swap).
#[derive(Debug)]
struct HealthDebounce {
    window: Duration,
    /// Cluster → when its window closes.
    pending: BTreeMap<String, Instant>,
}

impl HealthDebounce {
    fn new(window: Duration) -> Self {
        Self {
            window,
            pending: BTreeMap::new(),
        }
    }

    /// `cluster` changed health (or its changes were missed because the
    /// channel lagged): requeue it when its window closes.
    fn record(&mut self, cluster: &str, now: Instant) {
        let window = self.window;
        self.pending
            .entry(cluster.to_owned())
            .or_insert_with(|| now + window);
    }

    fn next_due(&self) -> Option<Instant> {
        self.pending.values().min().copied()
    }

    /// Close the windows due at `now`; returns the clusters to requeue with
    /// their current health (`current`: `None` once disengaged, which has
    /// its own requeue).
    fn take_due(
        &mut self,
        now: Instant,
        current: impl Fn(&str) -> Option<Health>,
    ) -> Vec<(String, Health)> {
        let due: Vec<String> = self
            .pending
            .iter()
            .filter(|(_, due)| **due <= now)
            .map(|(c, _)| c.clone())
            .collect();
        due.into_iter()
            .filter_map(|cluster| {
                self.pending.remove(&cluster);
                current(&cluster).map(|health| (cluster, health))
            })
            .collect()
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
        ClusterSet::All => true,
        ClusterSet::Named(names) => names.iter().any(|n| n == cluster),
    }
}

pub(crate) fn resolve_set(set: &ClusterSet, clusters: &ClusterRegistry) -> Vec<String> {
    match set {
        ClusterSet::Primary => vec![clusters.primary().to_owned()],
        ClusterSet::All => clusters.names(),
        ClusterSet::Named(names) => names
            .iter()
            .filter(|n| clusters.get(n).is_some())
            .cloned()
            .collect(),
    }
}

type WatchKey = (String, String, String, String);

fn watch_key(cluster: &str, r: &ResourceId) -> WatchKey {
    (
        cluster.to_owned(),
        r.group.clone(),
        r.version.clone(),
        r.kind.clone(),
    )
}

/// A watch a registration asks for: the resource and the mappings of its events.
type DesiredWatch = (ResourceId, Resource, Vec<(Mapping, Option<Selector>)>);

struct Route {
    resource: Resource,
    mappings: Vec<(Mapping, Option<Selector>)>,
}

struct WatchEntry {
    tag: u64,
    _sub: Subscription,
}

#[derive(Clone)]
struct Ctx {
    clusters: ClusterRegistry,
    caches: CacheManager,
    writer: Writer,
    config: ControllerConfig,
}

struct Shared {
    name: String,
    plugin: RwLock<Arc<dyn Reconciler>>,
    primary: RwLock<ResourceId>,
    watches: Mutex<HashMap<WatchKey, WatchEntry>>,
    snapshot: RwLock<Arc<CacheMap>>,
    primary_clusters: RwLock<HashSet<String>>,
    routes: RwLock<HashMap<u64, Arc<Route>>>,
    queue: Mutex<WorkQueue>,
    wake: Notify,
    events_tx: mpsc::UnboundedSender<(u64, Arc<CacheEvent>)>,
    max_concurrent: AtomicUsize,
    next_tag: AtomicU64,
    metrics: QueueMetrics,
    ctx: Ctx,
}

impl Shared {
    fn plugin(&self) -> Arc<dyn Reconciler> {
        Arc::clone(&self.plugin.read())
    }

    fn reads(&self) -> Arc<dyn HostReads> {
        Arc::new(PluginReads {
            caches: Arc::clone(&self.snapshot.read()),
            clusters: self.ctx.clusters.clone(),
        })
    }

    /// Bring the watches in line with the registration and the engaged clusters.
    fn sync_watches(&self) {
        let plugin = self.plugin();
        let reg = plugin.registration();
        let primary = resource_id(&reg.primary);
        let mut desired: BTreeMap<WatchKey, DesiredWatch> = BTreeMap::new();
        let primary_clusters = resolve_set(&reg.primary_clusters, &self.ctx.clusters);
        for c in &primary_clusters {
            desired
                .entry(watch_key(c, &primary))
                .or_insert_with(|| (primary.clone(), reg.primary.clone(), Vec::new()))
                .2
                .push((Mapping::Itself, None));
        }
        for w in &reg.watches {
            let sel = match w.label_selector.as_deref().map(selector::parse).transpose() {
                Ok(sel) => sel,
                Err(e) => {
                    error!(plugin = %self.name, error = %e, "watch ignored: invalid label selector");
                    continue;
                }
            };
            let rid = resource_id(&w.resource);
            for c in resolve_set(&w.clusters, &self.ctx.clusters) {
                desired
                    .entry(watch_key(&c, &rid))
                    .or_insert_with(|| (rid.clone(), w.resource.clone(), Vec::new()))
                    .2
                    .push((w.mapping.clone(), sel.clone()));
            }
        }
        let mut watches = self.watches.lock();
        let mut routes = self.routes.write();
        watches.retain(|key, entry| {
            let keep = desired.contains_key(key);
            if !keep {
                routes.remove(&entry.tag);
                debug!(plugin = %self.name, cluster = %key.0, kind = %key.3, "watch released");
            }
            keep
        });
        let mut snapshot = CacheMap::new();
        for (key, (rid, resource, mappings)) in desired {
            let route = Arc::new(Route { resource, mappings });
            if let Some(entry) = watches.get(&key) {
                routes.insert(entry.tag, route);
                snapshot.insert(key, Arc::clone(entry._sub.cache()));
                continue;
            }
            let cache: Arc<SharedCache> = match self.ctx.caches.acquire(&key.0, &rid) {
                Ok(c) => c,
                Err(e) => {
                    warn!(plugin = %self.name, error = %e, "failed to start a watch");
                    continue;
                }
            };
            let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
            routes.insert(tag, route);
            let sub = cache.subscribe(tag, self.events_tx.clone());
            debug!(plugin = %self.name, cluster = %key.0, kind = %key.3, "watch acquired");
            snapshot.insert(key.clone(), cache);
            watches.insert(key, WatchEntry { tag, _sub: sub });
        }
        *self.snapshot.write() = Arc::new(snapshot);
        *self.primary_clusters.write() = primary_clusters.into_iter().collect();
        *self.primary.write() = primary;
    }

    fn enqueue(&self, key: ReqKey, reason: &str) {
        if !self.primary_clusters.read().contains(&key.cluster) {
            debug!(plugin = %self.name, request = %key, "request for a cluster whose primaries the plugin does not reconcile; dropped");
            return;
        }
        self.metrics.add();
        let mut queue = self.queue.lock();
        if queue.add(key, reason) {
            self.metrics.set_depth(queue.ready());
            drop(queue);
            self.wake.notify_one();
        }
    }

    fn requeue_all(&self, reason: &str) {
        let primary = self.primary.read().clone();
        let snapshot = Arc::clone(&self.snapshot.read());
        let mut added = 0_usize;
        {
            let mut queue = self.queue.lock();
            for ((cluster, ..), cache) in snapshot
                .iter()
                .filter(|(_, c)| c.resource().same_type(&primary))
            {
                cache.read(|store| {
                    for k in store.keys() {
                        queue.add(
                            ReqKey {
                                cluster: cluster.clone(),
                                namespace: k.namespace().map(str::to_owned),
                                name: k.name.clone(),
                            },
                            reason,
                        );
                        added += 1;
                    }
                });
            }
        }
        self.metrics.set_depth(self.queue.lock().ready());
        debug!(plugin = %self.name, count = added, %reason, "requeued every primary");
        self.wake.notify_one();
    }

    fn primary_cache(&self, cluster: &str) -> Option<Arc<SharedCache>> {
        let primary = self.primary.read().clone();
        self.snapshot
            .read()
            .get(&watch_key(cluster, &primary))
            .cloned()
    }

    fn stats(&self) -> QueueStats {
        let q = self.queue.lock();
        QueueStats {
            ready: q.ready(),
            running: q.running(),
            delayed: q.delayed(),
        }
    }
}

fn max_concurrent(reg: &Registration, default: usize) -> usize {
    reg.max_concurrent_reconciles
        .and_then(|n| usize::try_from(n).ok())
        .filter(|n| *n > 0)
        .unwrap_or(default)
        .max(1)
}

/// Route cache events through the mappings into the queue.
async fn run_events(shared: Arc<Shared>, mut rx: mpsc::UnboundedReceiver<(u64, Arc<CacheEvent>)>) {
    while let Some((tag, event)) = rx.recv().await {
        let Some(route) = shared.routes.read().get(&tag).cloned() else {
            continue;
        };
        let primary = shared.primary.read().clone();
        let reason = || {
            let change = match event.change {
                Change::Applied => "changed",
                Change::Deleted => "deleted",
            };
            let obj = &event.object.key;
            match obj.namespace() {
                Some(ns) => format!(
                    "{} {ns}/{} {change} in {}",
                    event.resource.kind, obj.name, event.cluster
                ),
                None => format!(
                    "{} {} {change} in {}",
                    event.resource.kind, obj.name, event.cluster
                ),
            }
        };
        for (mapping, sel) in &route.mappings {
            if sel
                .as_ref()
                .is_some_and(|s| !s.matches(&event.object.labels))
            {
                continue;
            }
            match map_event(mapping, &event, &primary) {
                Mapped::Keys(keys) => {
                    for key in keys {
                        shared.enqueue(key, &reason());
                    }
                }
                Mapped::AllPrimaries => shared.requeue_all(&reason()),
                Mapped::Custom => {
                    let plugin = shared.plugin();
                    let result = plugin
                        .map(
                            &event.cluster,
                            &route.resource,
                            event.object.json.to_string(),
                            shared.reads(),
                        )
                        .await;
                    match result {
                        Ok(requests) => {
                            for r in requests {
                                shared.enqueue(
                                    ReqKey {
                                        cluster: r.cluster,
                                        namespace: r.namespace,
                                        name: r.name,
                                    },
                                    &reason(),
                                );
                            }
                        }
                        Err(e) => {
                            warn!(plugin = %shared.name, error = %e, "custom mapping failed; event dropped")
                        }
                    }
                }
            }
        }
    }
}

/// Hand keys to reconcile tasks, bounded, until `stop`; then finish in-flight work.
async fn run_queue(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    // Wait (bounded) for the caches of reachable clusters to list, like
    // controller-runtime's WaitForCacheSync, so the first reconciles see a
    // complete world.
    let sync_deadline = Instant::now() + shared.ctx.config.sync_timeout;
    let caches: Vec<_> = shared.snapshot.read().values().cloned().collect();
    let wait_all = async {
        for cache in caches {
            if cache.cluster().health() != Health::Unreachable {
                let _ = tokio::time::timeout_at(sync_deadline, cache.wait_synced()).await;
            }
        }
    };
    tokio::select! {
        () = wait_all => {}
        _ = stop.wait_for(|s| *s) => return,
    }
    debug!(plugin = %shared.name, "caches synced; reconciling");

    let mut tasks: JoinSet<(ReqKey, Done)> = JoinSet::new();
    // ops hook (leader election): only the leader reconciles; a follower
    // keeps its caches warm and its requests queued until it leads.
    let leader = shared.ctx.writer.leader_gate().clone();
    let mut leader_changes = leader.subscribe();
    let mut leader_alive = true;
    let resync_every = shared.ctx.config.resync_period.filter(|d| !d.is_zero());
    let mut next_resync = resync_every.map(|d| Instant::now() + d);
    loop {
        let limit = shared.max_concurrent.load(Ordering::Relaxed);
        let leading = leader.is_leader();
        while leading && tasks.len() < limit {
            let Some((key, reason, waited)) = shared.queue.lock().pop_timed() else {
                break;
            };
            shared.metrics.observe_queue_duration(waited);
            let fut = reconcile_key(Arc::clone(&shared), key.clone(), reason);
            tasks.spawn(async move {
                let done = AssertUnwindSafe(fut)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| {
                        error!(request = %key, "reconcile task panicked");
                        Done::Retry
                    });
                (key, done)
            });
        }
        let deadline = shared.queue.lock().next_deadline();
        tokio::select! {
            Some(joined) = tasks.join_next(), if !tasks.is_empty() => {
                if let Ok((key, done)) = joined {
                    let mut queue = shared.queue.lock();
                    queue.done(&key, done, Instant::now());
                    shared.metrics.set_depth(queue.ready());
                }
            }
            changed = leader_changes.changed(), if leader_alive => {
                // Leadership gained or lost: re-evaluate. An error means the
                // elector stopped (the host is shutting down).
                leader_alive = changed.is_ok();
            }
            () = shared.wake.notified() => {}
            () = sleep_until(deadline) => {
                shared.queue.lock().fire_due(Instant::now());
            }
            () = sleep_until(next_resync) => {
                shared.requeue_all("periodic resync");
                next_resync = resync_every.map(|d| Instant::now() + d);
            }
            _ = stop.wait_for(|s| *s) => break,
        }
    }
    let in_flight = tasks.len();
    if in_flight > 0 {
        info!(plugin = %shared.name, in_flight, "stopping: finishing in-flight reconciles");
    }
    while let Some(joined) = tasks.join_next().await {
        if let Ok((key, done)) = joined {
            shared.queue.lock().done(&key, done, Instant::now());
        }
    }
}

async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// One reconcile of one key, inside its span.
async fn reconcile_key(shared: Arc<Shared>, key: ReqKey, reason: String) -> Done {
    let span = info_span!(
        "reconcile",
        plugin = %shared.name,
        cluster = %key.cluster,
        object = %match &key.namespace { Some(ns) => format!("{ns}/{}", key.name), None => key.name.clone() },
        reason = %reason,
    );
    let timer = Metrics::global().reconcile_started(&shared.name, &key.cluster);
    let started = std::time::Instant::now();
    let metrics = shared.metrics.clone();
    let done = reconcile_inner(shared, key).instrument(span).await;
    metrics.observe_work_duration(started.elapsed());
    timer.finish(match done {
        Done::Success(None) => ReconcileResult::Success,
        Done::Success(Some(_)) => ReconcileResult::RequeueAfter,
        Done::Retry => {
            metrics.retry();
            ReconcileResult::Error
        }
        Done::Terminal => ReconcileResult::TerminalError,
    });
    done
}

async fn reconcile_inner(shared: Arc<Shared>, key: ReqKey) -> Done {
    let plugin = shared.plugin();
    let reg = plugin.registration();
    let Some(cache) = shared.primary_cache(&key.cluster) else {
        debug!("primary cache gone (cluster disengaged or plugin changed); dropped");
        return Done::Success(None);
    };
    let Some(obj) = cache.get(key.namespace.as_deref(), &key.name) else {
        debug!("primary not found; nothing to do");
        return Done::Success(None);
    };
    let target = ObjectRef {
        cluster: key.cluster.clone(),
        resource: reg.primary.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    if let Some(finalizer) = &reg.finalizer {
        let has = obj.finalizers.iter().any(|f| f == finalizer);
        if !obj.deleting && !has {
            let ops =
                add_finalizer_patch(&obj.finalizers, obj.resource_version.as_deref(), finalizer);
            return match shared
                .ctx
                .writer
                .perform(&shared.name, &json_patch_action(target, &ops))
                .await
            {
                Ok(()) => {
                    debug!(%finalizer, "finalizer added; reconciling on the resulting change");
                    Done::Success(None)
                }
                Err(e) => {
                    warn!(error = %e, "failed to add the finalizer");
                    Done::Retry
                }
            };
        }
        if obj.deleting && !has {
            debug!("being deleted and our finalizer is gone; nothing to do");
            return Done::Success(None);
        }
    }
    let request = Request {
        cluster: key.cluster.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    let started = std::time::Instant::now();
    let outcome = match plugin
        .reconcile(request, shared.reads(), SystemTime::now())
        .await
    {
        Ok(o) => o,
        Err(e) => {
            let retry = e.is_retryable();
            warn!(error = %e, kind = e.kind(), retry, "reconcile failed");
            return if retry { Done::Retry } else { Done::Terminal };
        }
    };
    let call = started.elapsed();
    if let Err(e) = shared
        .ctx
        .writer
        .execute(&shared.name, &outcome.actions)
        .await
    {
        warn!(error = %e, "failed to perform the outcome; will retry");
        return if e.is_retryable() {
            Done::Retry
        } else {
            Done::Terminal
        };
    }
    if let Some(finalizer) = &reg.finalizer
        && obj.deleting
        && outcome.finalized
        && let Some(index) = obj.finalizers.iter().position(|f| f == finalizer)
    {
        let ops = remove_finalizer_patch(index, finalizer);
        if let Err(e) = shared
            .ctx
            .writer
            .perform(&shared.name, &json_patch_action(target, &ops))
            .await
        {
            warn!(error = %e, "failed to remove the finalizer");
            return Done::Retry;
        }
        info!(%finalizer, "cleanup done; finalizer removed");
    }
    debug!(actions = outcome.actions.len(), call_ms = call.as_millis(), requeue_after_ms = ?outcome.requeue_after_ms, "reconciled");
    Done::Success(outcome.requeue_after_ms.map(Duration::from_millis))
}

fn json_patch_action(target: ObjectRef, ops: &serde_json::Value) -> Action {
    Action::Patch(PatchAction {
        target,
        patch_type: PatchType::Json,
        patch: ops.to_string(),
        resource_version: None,
        status: false,
    })
}

/// JSON patch adding `finalizer`, guarded by the resourceVersion the decision
/// was made on (kube-runtime's finalizer helper guards with the list itself).
fn add_finalizer_patch(
    current: &[String],
    resource_version: Option<&str>,
    finalizer: &str,
) -> serde_json::Value {
    let mut ops = Vec::new();
    if let Some(rv) = resource_version {
        ops.push(
            serde_json::json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}),
        );
    }
    if current.is_empty() {
        ops.push(
            serde_json::json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}),
        );
    } else {
        ops.push(
            serde_json::json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}),
        );
    }
    serde_json::Value::Array(ops)
}

/// JSON patch removing the finalizer at `index`, guarded by a `test` that it is still there.
fn remove_finalizer_patch(index: usize, finalizer: &str) -> serde_json::Value {
    let path = format!("/metadata/finalizers/{index}");
    serde_json::json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ])
}

struct Controller {
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    runner: tokio::task::JoinHandle<()>,
    events: tokio::task::JoinHandle<()>,
}

impl Controller {
    fn start(plugin: Arc<dyn Reconciler>, ctx: Ctx) -> Self {
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let max = max_concurrent(plugin.registration(), ctx.config.max_concurrent_reconciles);
        let name = plugin.name().to_owned();
        Metrics::global()
            .set_max_concurrent_reconciles(&name, u32::try_from(max).unwrap_or(u32::MAX));
        let shared = Arc::new(Shared {
            metrics: Metrics::global().queue(&name),
            name,
            primary: RwLock::new(resource_id(&plugin.registration().primary)),
            plugin: RwLock::new(plugin),
            watches: Mutex::new(HashMap::new()),
            snapshot: RwLock::new(Arc::new(CacheMap::new())),
            primary_clusters: RwLock::new(HashSet::new()),
            routes: RwLock::new(HashMap::new()),
            queue: Mutex::new(WorkQueue::new()),
            wake: Notify::new(),
            events_tx,
            max_concurrent: AtomicUsize::new(max),
            next_tag: AtomicU64::new(0),
            ctx,
        });
        let (stop, stop_rx) = watch::channel(false);
        let events = tokio::spawn(run_events(Arc::clone(&shared), events_rx));
        shared.sync_watches();
        let runner = tokio::spawn(run_queue(Arc::clone(&shared), stop_rx));
        info!(plugin = %shared.name, max_concurrent = max, "controller started");
        Self {
            shared,
            stop,
            runner,
            events,
        }
    }

    fn replace(&self, plugin: Arc<dyn Reconciler>) {
        let old_primary = self.shared.primary.read().clone();
        let max = max_concurrent(
            plugin.registration(),
            self.shared.ctx.config.max_concurrent_reconciles,
        );
        *self.shared.plugin.write() = plugin;
        self.shared.max_concurrent.store(max, Ordering::Relaxed);
        Metrics::global().set_max_concurrent_reconciles(
            &self.shared.name,
            u32::try_from(max).unwrap_or(u32::MAX),
        );
        self.shared.sync_watches();
        if !self.shared.primary.read().same_type(&old_primary) {
            // Keys of the old primary kind mean nothing now.
            *self.shared.queue.lock() = WorkQueue::new();
        }
        self.shared.requeue_all("plugin replaced");
    }

    async fn stop(self) {
        let _ = self.stop.send(true);
        let _ = self.runner.await;
        self.events.abort();
        self.shared.watches.lock().clear();
        self.shared.routes.write().clear();
        *self.shared.snapshot.write() = Arc::new(CacheMap::new());
        Metrics::global().forget_controller(&self.shared.name);
        info!(plugin = %self.shared.name, "controller stopped");
    }
}

/// Runs one controller per plugin. Cheap to clone.
#[derive(Clone)]
pub struct Manager {
    inner: Arc<ManagerInner>,
}

struct ManagerInner {
    ctx: Ctx,
    controllers: Mutex<HashMap<String, Controller>>,
    _stop_cluster_events: tokio::sync::oneshot::Sender<()>,
}

impl std::fmt::Debug for Manager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Manager")
            .field("plugins", &self.plugins())
            .finish_non_exhaustive()
    }
}

impl Manager {
    /// A manager over `caches` (and their clusters), writing with `writer`.
    /// Must be called inside a tokio runtime: it follows cluster changes in a task.
    #[must_use]
    pub fn new(caches: CacheManager, writer: Writer, config: ControllerConfig) -> Self {
        let (stop_tx, mut stop_rx) = tokio::sync::oneshot::channel();
        let clusters = caches.clusters().clone();
        let inner = Arc::new(ManagerInner {
            ctx: Ctx {
                clusters: clusters.clone(),
                caches,
                writer,
                config,
            },
            controllers: Mutex::new(HashMap::new()),
            _stop_cluster_events: stop_tx,
        });
        let weak = Arc::downgrade(&inner);
        let mut events = clusters.subscribe();
        let mut health = clusters.health_changes();
        let mut health_open = true;
        let mut debounce = HealthDebounce::new(HEALTH_DEBOUNCE);
        tokio::spawn(async move {
            loop {
                let due = debounce.next_due();
                tokio::select! {
                    ev = events.recv() => {
                        let event = match ev {
                            Ok(e) => e,
                            Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                                error!(missed = n, "missed cluster events");
                                continue;
                            }
                            Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
                        };
                        let Some(inner) = weak.upgrade() else { return };
                        Self { inner }.on_cluster_event(&event);
                    }
                    change = health.recv(), if health_open => match change {
                        Ok(change) => debounce.record(&change.cluster, Instant::now()),
                        Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
                            warn!(missed = n, "missed cluster health changes; requeueing every cluster");
                            for name in clusters.names() {
                                debounce.record(&name, Instant::now());
                            }
                        }
                        Err(tokio::sync::broadcast::error::RecvError::Closed) => health_open = false,
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

    /// Queue figures of a plugin's controller.
    #[must_use]
    pub fn queue_stats(&self, plugin: &str) -> Option<QueueStats> {
        self.inner
            .controllers
            .lock()
            .get(plugin)
            .map(|c| c.shared.stats())
    }

    /// Start the controller of `plugin`, or swap the plugin of a running one
    /// (watches follow the new registration, every primary is requeued once;
    /// in-flight reconciles finish on the version that started them).
    pub fn upsert(&self, plugin: Arc<dyn Reconciler>) {
        let mut controllers = self.inner.controllers.lock();
        match controllers.get(plugin.name()) {
            Some(ctl) => {
                info!(plugin = %plugin.name(), version = %plugin.registration().version, "plugin replaced");
                ctl.replace(plugin);
            }
            None => {
                let name = plugin.name().to_owned();
                controllers.insert(name, Controller::start(plugin, self.inner.ctx.clone()));
            }
        }
    }

    /// Stop a plugin's controller (in-flight reconciles finish) and release its watches.
    pub async fn remove(&self, plugin: &str) {
        let ctl = self.inner.controllers.lock().remove(plugin);
        if let Some(ctl) = ctl {
            ctl.stop().await;
        }
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
                () = &mut shutdown => break,
            };
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
                Ok(RegistryEvent::Failed { path, error }) => {
                    warn!(path = %path.display(), %error, "plugin file refused; the previous version keeps running");
                }
                Err(tokio::sync::broadcast::error::RecvError::Lagged(n)) => {
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
                Err(tokio::sync::broadcast::error::RecvError::Closed) => break,
            }
        }
        self.shutdown().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn finalizer_patches() {
        assert_eq!(
            add_finalizer_patch(&[], Some("5"), "rekon.io/x"),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
                {"op": "add", "path": "/metadata/finalizers", "value": ["rekon.io/x"]}
            ])
        );
        assert_eq!(
            add_finalizer_patch(&["other".into()], Some("6"), "rekon.io/x"),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "rekon.io/x"}
            ])
        );
        assert_eq!(
            remove_finalizer_patch(1, "rekon.io/x"),
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": "rekon.io/x"},
                {"op": "remove", "path": "/metadata/finalizers/1"}
            ])
        );
    }

    #[test]
    fn health_changes_are_coalesced_per_cluster() {
        use Health::{Ready, Syncing, Unreachable};
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        let mut d = HealthDebounce::new(HEALTH_DEBOUNCE);
        assert_eq!(d.next_due(), None);
        // edge flaps three times within the window; sub blips to Syncing.
        d.record("edge", t0);
        d.record("edge", t0 + ms(200));
        d.record("edge", t0 + ms(400));
        d.record("sub", t0 + ms(300));
        d.record("sub", t0 + ms(500));
        assert_eq!(d.next_due(), Some(t0 + HEALTH_DEBOUNCE));
        let now = |c: &str| match c {
            "edge" => Some(Unreachable),
            "sub" => Some(Ready),
            _ => None,
        };
        assert!(
            d.take_due(t0 + ms(999), now).is_empty(),
            "window still open"
        );
        // One requeue for edge; one for sub too: a plugin may have read
        // Syncing during its blip and must see it Ready again.
        assert_eq!(
            d.take_due(t0 + HEALTH_DEBOUNCE, now),
            vec![("edge".to_owned(), Unreachable)]
        );
        assert_eq!(d.next_due(), Some(t0 + ms(300) + HEALTH_DEBOUNCE));
        assert_eq!(
            d.take_due(t0 + ms(1300), now),
            vec![("sub".to_owned(), Ready)]
        );
        assert_eq!(d.next_due(), None);

        // A flap that ends where it started still requeues once: plugins
        // may have seen the cluster unreachable.
        let t1 = t0 + ms(5000);
        d.record("edge", t1);
        d.record("edge", t1 + ms(100));
        assert_eq!(
            d.take_due(t1 + HEALTH_DEBOUNCE, now),
            vec![("edge".to_owned(), Unreachable)]
        );
        // A lasting move to Syncing requeues; a disengaged cluster does not.
        let t2 = t1 + ms(5000);
        d.record("sub", t2);
        d.record("gone", t2);
        let syncing = |c: &str| (c == "sub").then_some(Syncing);
        assert_eq!(
            d.take_due(t2 + HEALTH_DEBOUNCE, syncing),
            vec![("sub".to_owned(), Syncing)]
        );
        // Missed changes requeue whatever the health.
        d.record("sub", t2);
        assert_eq!(
            d.take_due(t2 + HEALTH_DEBOUNCE, syncing),
            vec![("sub".to_owned(), Syncing)]
        );
    }

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
