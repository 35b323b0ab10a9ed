//! Shared caches: one watch and one store per (cluster, resource), however
//! many plugins need it. [`CacheManager`] starts and shares them,
//! [`SharedCache`] is one of them, and subscribers get its contents and every
//! change in their [`Inbox`]; objects are kept as the JSON text the server
//! sent ([`RawObject`]).

pub mod error;
pub mod event;
pub mod filter;
pub mod inbox;
pub mod raw;
pub mod resource;
pub mod store;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::core::TypeMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use parking_lot::{Mutex, RwLock};
use tracing::{debug, info, warn};

use crate::cluster::{Cluster, ClusterRegistry, is_connectivity_error};
use crate::telemetry::metrics::Metrics;
pub use error::{Error, Result};
pub use event::{CacheEvent, Change};
pub use filter::ShardFilter;
pub use inbox::Inbox;
pub use raw::RawObject;
pub use resource::{Resolved, Resolver, ResourceId};
pub use store::{CachedObject, ObjectKey, Store};

struct Subscriber {
    id: u64,
    tag: u64,
    inbox: Arc<Inbox>,
}

/// Why a watch cannot serve, other than connectivity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchFailure {
    /// HTTP status of the API's answer, when there was one (403, 404, ...).
    pub code: Option<u16>,
    /// The API's reason and message, or discovery's.
    pub reason: String,
}

impl std::fmt::Display for WatchFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(code) => write!(f, "HTTP {code}: {}", self.reason),
            None => f.write_str(&self.reason),
        }
    }
}

/// Where a cache stands.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WatchStatus {
    /// Resolving the kind or listing for the first time.
    Starting,
    /// Listed; events flow.
    Synced,
    /// Failing for a reason other than connectivity (403 from RBAC, 404
    /// for a CRD not installed, 401, 400; in the watch or the discovery
    /// before it): logged once per change, counted in `rekon_watch_failed`,
    /// announced on [`CacheManager::failures`], and *not* counted against
    /// the cluster's health. Retried with backoff; it recovers by itself
    /// when the cause goes away. What was cached before stays readable.
    Failed(WatchFailure),
}

/// A change of a watch's failure state, as announced on
/// [`CacheManager::failures`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WatchFailureChange {
    /// The cluster.
    pub cluster: String,
    /// The resource (`group/version/Kind`).
    pub resource: ResourceId,
    /// The failure, or `None` once the watch serves again.
    pub failure: Option<WatchFailure>,
}

struct State {
    cluster: Arc<Cluster>,
    resource: Arc<ResourceId>,
    store: RwLock<Store>,
    /// Which objects this cache keeps (all of them when `None`).
    filter: Option<ShardFilter>,
    subscribers: Mutex<Vec<Subscriber>>,
    status: tokio::sync::watch::Sender<WatchStatus>,
    /// Whether this cache still counts against its cluster's health as
    /// "not synced yet" (until it first syncs or fails).
    counted_unsynced: std::sync::atomic::AtomicBool,
    next_sub: AtomicU64,
    /// What discovery resolved the kind to, once it has.
    resolution: std::sync::OnceLock<Resolution>,
    failures: tokio::sync::broadcast::Sender<WatchFailureChange>,
    /// The cluster registry's metrics.
    metrics: Metrics,
}

/// A cache's kind as discovery resolved it, with what follows from it.
struct Resolution {
    resolved: Resolved,
    /// apiVersion and kind (list items omit them).
    types: TypeMeta,
    /// `apiVersion/plural`: the metrics label.
    label: String,
}

impl Resolution {
    fn of(resolved: Resolved) -> Self {
        Self {
            types: TypeMeta {
                api_version: resolved.api.api_version.clone(),
                kind: resolved.api.kind.clone(),
            },
            label: format!("{}/{}", resolved.api.api_version, resolved.api.plural),
            resolved,
        }
    }
}

impl State {
    /// The metrics label, once resolved.
    fn label(&self) -> Option<&str> {
        self.resolution.get().map(|r| r.label.as_str())
    }

    fn report_size(&self, size: usize) {
        if let Some(label) = self.label() {
            self.metrics
                .set_cache_objects(self.cluster.name(), label, size);
        }
    }

    /// Whether the cache's filter keeps `obj`.
    fn keeps(&self, obj: &CachedObject) -> bool {
        self.filter
            .as_ref()
            .is_none_or(|f| f.keeps(self.cluster.name(), obj))
    }

    /// An object the filter does not keep arrived: if the store held it
    /// (its owner labels changed to another shard's primary), it leaves.
    fn drop_filtered(&self, store: &mut Store, key: &ObjectKey) {
        if let Some(old) = store.remove(key) {
            self.emit(Change::Deleted, old, None);
        }
    }

    fn metric_label(&self) -> String {
        self.label()
            .map_or_else(|| self.resource.to_string(), str::to_owned)
    }

    /// Stop counting against the cluster's health (synced or failed).
    fn uncount(&self) {
        if self.counted_unsynced.swap(false, Ordering::Relaxed) {
            self.cluster.cache_synced();
        }
    }

    fn set_failed(&self, failure: WatchFailure) {
        let changed = self.status.send_if_modified(|s| {
            let next = WatchStatus::Failed(failure.clone());
            (*s != next).then(|| *s = next).is_some()
        });
        self.uncount();
        if changed {
            warn!(
                cluster = %self.cluster.name(),
                resource = %self.resource,
                code = ?failure.code,
                reason = %failure.reason,
                "watch failed for a reason other than connectivity; the plugins that need it are degraded in this cluster (retrying with backoff)"
            );
            self.metrics
                .set_watch_failed(self.cluster.name(), &self.metric_label(), true);
            let _ = self.failures.send(WatchFailureChange {
                cluster: self.cluster.name().to_owned(),
                resource: (*self.resource).clone(),
                failure: Some(failure),
            });
        }
    }

    fn set_synced(&self) {
        let previous = self.status.send_replace(WatchStatus::Synced);
        self.uncount();
        match previous {
            WatchStatus::Synced => {}
            WatchStatus::Starting => {
                debug!(cluster = %self.cluster.name(), resource = %self.resource, "cache synced");
            }
            WatchStatus::Failed(_) => {
                info!(cluster = %self.cluster.name(), resource = %self.resource, "watch recovered");
                self.metrics
                    .set_watch_failed(self.cluster.name(), &self.metric_label(), false);
                let _ = self.failures.send(WatchFailureChange {
                    cluster: self.cluster.name().to_owned(),
                    resource: (*self.resource).clone(),
                    failure: None,
                });
            }
        }
    }

    fn emit(&self, change: Change, object: Arc<CachedObject>, old: Option<Arc<CachedObject>>) {
        let event = Arc::new(CacheEvent {
            cluster: Arc::from(self.cluster.name()),
            resource: Arc::clone(&self.resource),
            change,
            object,
            old,
        });
        for s in self.subscribers.lock().iter() {
            s.inbox.push(s.tag, Arc::clone(&event));
        }
    }

    /// Upsert `obj` and tell subscribers (with the state it replaced) if
    /// it changed the store: the watch and read-your-writes share this.
    fn apply(&self, store: &mut Store, obj: Arc<CachedObject>) {
        let old = store.get(&obj.key);
        if store.upsert(Arc::clone(&obj)) == store::Upsert::Changed {
            self.emit(Change::Applied, obj, old);
        }
    }

    /// Put a write's response into the store (read-your-writes).
    fn observe(&self, obj: Arc<CachedObject>) {
        let mut store = self.store.write();
        if self.keeps(&obj) {
            self.apply(&mut store, obj);
        } else {
            self.drop_filtered(&mut store, &obj.key);
        }
        self.report_size(store.len());
    }

    /// An object is gone (a delete answered with a Status).
    fn observe_gone(&self, key: &ObjectKey) {
        let mut store = self.store.write();
        if let Some(old) = store.remove(key) {
            self.emit(Change::Deleted, old, None);
            self.report_size(store.len());
        }
    }
}

/// One (cluster, resource) watch and store. Dropping the last handle stops the watch.
pub struct SharedCache {
    state: Arc<State>,
    task: tokio::task::AbortHandle,
}

impl std::fmt::Debug for SharedCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedCache")
            .field("cluster", &self.state.cluster.name())
            .field("resource", &self.state.resource)
            .finish_non_exhaustive()
    }
}

impl Drop for SharedCache {
    fn drop(&mut self) {
        self.task.abort();
        self.state.uncount();
        if let Some(label) = self.state.label() {
            self.state
                .metrics
                .forget_cache(self.state.cluster.name(), label);
        }
        debug!(cluster = %self.state.cluster.name(), resource = %self.state.resource, "cache stopped");
    }
}

impl SharedCache {
    /// The cluster.
    #[must_use]
    pub fn cluster(&self) -> &Arc<Cluster> {
        &self.state.cluster
    }

    /// The resource (as first acquired; its plural is never kept).
    #[must_use]
    pub fn resource(&self) -> &ResourceId {
        &self.state.resource
    }

    /// Whether the kind is namespaced: the server's answer once discovery
    /// resolved it, the first acquirer's declaration until then.
    #[must_use]
    pub fn namespaced(&self) -> bool {
        self.resolved()
            .map_or(self.state.resource.namespaced, |r| r.namespaced)
    }

    /// What discovery resolved the kind to in this cache's cluster, once
    /// it has ([`Resolved::disagreement`] compares a declaration with it).
    #[must_use]
    pub fn resolved(&self) -> Option<&Resolved> {
        self.state.resolution.get().map(|r| &r.resolved)
    }

    /// Which objects the cache keeps (`None`: all of them).
    #[must_use]
    pub fn filter(&self) -> Option<&ShardFilter> {
        self.state.filter.as_ref()
    }

    /// Whether the cache is synced (listed, events flowing).
    #[must_use]
    pub fn is_synced(&self) -> bool {
        *self.state.status.borrow() == WatchStatus::Synced
    }

    /// Where the cache stands.
    #[must_use]
    pub fn status(&self) -> WatchStatus {
        self.state.status.borrow().clone()
    }

    /// The failure of the watch, if it currently fails.
    #[must_use]
    pub fn failure(&self) -> Option<WatchFailure> {
        match &*self.state.status.borrow() {
            WatchStatus::Failed(f) => Some(f.clone()),
            _ => None,
        }
    }

    /// Wait until the cache synced or its watch failed (a failed watch is
    /// not waited for: the plugins that need it are degraded, not stalled).
    pub async fn wait_settled(&self) {
        let mut rx = self.state.status.subscribe();
        let _ = rx.wait_for(|s| *s != WatchStatus::Starting).await;
    }

    /// Read access to the store.
    pub fn read<T>(&self, f: impl FnOnce(&Store) -> T) -> T {
        f(&self.state.store.read())
    }

    /// The object `name` in `namespace`.
    #[must_use]
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<CachedObject>> {
        self.state
            .store
            .read()
            .get(&ObjectKey::new(namespace, name))
    }

    /// Subscribe: `inbox` receives `(tag, event)` for every current object
    /// (as [`Change::Applied`]) and then every change, until the returned
    /// guard is dropped.
    #[must_use]
    pub fn subscribe(self: &Arc<Self>, tag: u64, inbox: Arc<Inbox>) -> Subscription {
        let id = self.state.next_sub.fetch_add(1, Ordering::Relaxed);
        {
            let store = self.state.store.read();
            let mut subs = self.state.subscribers.lock();
            for obj in store.objects() {
                let event = Arc::new(CacheEvent {
                    cluster: Arc::from(self.state.cluster.name()),
                    resource: Arc::clone(&self.state.resource),
                    change: Change::Applied,
                    object: Arc::clone(obj),
                    old: None,
                });
                inbox.push(tag, event);
            }
            subs.push(Subscriber { id, tag, inbox });
        }
        Subscription {
            cache: Arc::clone(self),
            id,
        }
    }
}

/// A live subscription; also keeps the cache alive. Drop to unsubscribe.
#[derive(Debug)]
pub struct Subscription {
    cache: Arc<SharedCache>,
    id: u64,
}

impl Subscription {
    /// The cache subscribed to.
    #[must_use]
    pub fn cache(&self) -> &Arc<SharedCache> {
        &self.cache
    }
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.cache
            .state
            .subscribers
            .lock()
            .retain(|s| s.id != self.id);
    }
}

/// The caches of one (cluster, resource), one per filter (one, or two
/// across a shard hand-over): a write's answer finds them without walking
/// every cache of every cluster.
type CacheKey = (String, resource::TypeKey);
type Variants = Vec<(Option<ShardFilter>, std::sync::Weak<SharedCache>)>;

/// Starts and shares caches. Cheap to clone.
#[derive(Clone)]
pub struct CacheManager {
    inner: Arc<ManagerInner>,
}

struct ManagerInner {
    clusters: ClusterRegistry,
    resolver: Resolver,
    caches: Mutex<HashMap<CacheKey, Variants>>,
    failures: tokio::sync::broadcast::Sender<WatchFailureChange>,
}

impl std::fmt::Debug for CacheManager {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CacheManager")
            .field("active", &self.active())
            .finish_non_exhaustive()
    }
}

impl CacheManager {
    /// A manager for the clusters of `clusters`, resolving kinds with `resolver`.
    #[must_use]
    pub fn new(clusters: ClusterRegistry, resolver: Resolver) -> Self {
        Self {
            inner: Arc::new(ManagerInner {
                clusters,
                resolver,
                caches: Mutex::new(HashMap::new()),
                failures: tokio::sync::broadcast::channel(256).0,
            }),
        }
    }

    /// Changes of watches' failure states (a watch failing for a reason
    /// other than connectivity, and recovering).
    #[must_use]
    pub fn failures(&self) -> tokio::sync::broadcast::Receiver<WatchFailureChange> {
        self.inner.failures.subscribe()
    }

    /// Every watch that currently fails, with its failure.
    #[must_use]
    pub fn failing(&self) -> Vec<(String, ResourceId, WatchFailure)> {
        let mut v: Vec<_> = self
            .inner
            .caches
            .lock()
            .values()
            .flatten()
            .filter_map(|(_, w)| w.upgrade())
            .filter_map(|c| {
                c.failure()
                    .map(|f| (c.cluster().name().to_owned(), c.resource().clone(), f))
            })
            .collect();
        v.sort_by(|a, b| (&a.0, &a.1).cmp(&(&b.0, &b.1)));
        v
    }

    /// The running unfiltered cache of `resource` in `cluster`, if any.
    #[must_use]
    pub fn running(&self, cluster: &str, resource: &ResourceId) -> Option<Arc<SharedCache>> {
        self.inner
            .caches
            .lock()
            .get(&(cluster.to_owned(), resource.type_key()))?
            .iter()
            .find(|(f, _)| f.is_none())
            .and_then(|(_, w)| w.upgrade())
    }

    /// Every running cache of `resource` in `cluster`, whatever its filter.
    #[must_use]
    pub fn running_all(&self, cluster: &str, resource: &ResourceId) -> Vec<Arc<SharedCache>> {
        self.inner
            .caches
            .lock()
            .get(&(cluster.to_owned(), resource.type_key()))
            .into_iter()
            .flatten()
            .filter_map(|(_, w)| w.upgrade())
            .collect()
    }

    /// Read-your-writes: `object` (JSON) is what the API server answered to
    /// a successful write of `resource` in `cluster`; the cache (if one
    /// runs) takes it at once unless it already holds a newer version. The
    /// store never goes back to an older resourceVersion, so the watch
    /// event that follows changes nothing and a late one cannot roll the
    /// write back.
    pub fn observe_write(&self, cluster: &str, resource: &ResourceId, object: RawObject) {
        let caches = self.running_all(cluster, resource);
        let Some(types) = caches
            .iter()
            .find_map(|c| c.state.resolution.get().map(|r| &r.types))
        else {
            return;
        };
        match CachedObject::from_raw(object, types) {
            Ok(obj) => {
                let obj = Arc::new(obj);
                for cache in caches.iter().filter(|c| c.state.resolution.get().is_some()) {
                    cache.state.observe(Arc::clone(&obj));
                }
            }
            Err(e) => debug!(%cluster, %resource, error = %e, "write response not cached"),
        }
    }

    /// Read-your-writes for a delete that answered with a Status: the
    /// object is gone.
    pub fn observe_gone(
        &self,
        cluster: &str,
        resource: &ResourceId,
        namespace: Option<&str>,
        name: &str,
    ) {
        for cache in self.running_all(cluster, resource) {
            cache.state.observe_gone(&ObjectKey::new(namespace, name));
        }
    }

    /// The resolver shared with the writer.
    #[must_use]
    pub fn resolver(&self) -> &Resolver {
        &self.inner.resolver
    }

    /// The cluster registry.
    #[must_use]
    pub fn clusters(&self) -> &ClusterRegistry {
        &self.inner.clusters
    }

    /// `(cluster, resource)` of every running cache (for tests and metrics).
    #[must_use]
    pub fn active(&self) -> Vec<(String, String)> {
        let mut v: Vec<_> = self
            .inner
            .caches
            .lock()
            .iter()
            .flat_map(|((c, (g, v, k)), variants)| {
                variants
                    .iter()
                    .filter(|(_, w)| w.strong_count() > 0)
                    .map(move |_| (c.clone(), format!("{g}/{v}/{k}")))
            })
            .collect();
        v.sort();
        v
    }

    /// The cache of `resource` in `cluster`, started if nobody holds it yet.
    /// The watch starts with the first handle and stops when the last one
    /// is dropped (the manager keeps only weak references).
    ///
    /// # Errors
    /// When the cluster is not engaged.
    pub fn acquire(&self, cluster: &str, resource: &ResourceId) -> Result<Arc<SharedCache>> {
        self.acquire_filtered(cluster, resource, None)
    }

    /// The cache of `resource` in `cluster` keeping what `filter` keeps,
    /// started if nobody holds it yet. Like any cache it counts against its
    /// cluster's health (syncing) until it has listed, also when it is
    /// acquired again at a shard hand-over: this replica's view of the
    /// cluster is incomplete until then.
    ///
    /// # Errors
    /// When the cluster is not engaged.
    pub fn acquire_filtered(
        &self,
        cluster: &str,
        resource: &ResourceId,
        filter: Option<ShardFilter>,
    ) -> Result<Arc<SharedCache>> {
        let key = (cluster.to_owned(), resource.type_key());
        let mut caches = self.inner.caches.lock();
        if let Some(existing) = caches
            .get(&key)
            .into_iter()
            .flatten()
            .find(|(f, _)| *f == filter)
            .and_then(|(_, w)| w.upgrade())
        {
            return Ok(existing);
        }
        caches.retain(|_, variants| {
            variants.retain(|(_, w)| w.strong_count() > 0);
            !variants.is_empty()
        });
        let cluster = self
            .inner
            .clusters
            .get(cluster)
            .ok_or_else(|| Error::UnknownCluster(cluster.to_owned()))?;
        cluster.cache_unsynced();
        let state = Arc::new(State {
            cluster: Arc::clone(&cluster),
            // The cache is shared by every plugin watching the type: it
            // keeps no plugin's declared plural (the server names it).
            resource: Arc::new(ResourceId {
                plural: String::new(),
                ..resource.clone()
            }),
            store: RwLock::new(Store::default()),
            filter: filter.clone(),
            subscribers: Mutex::new(Vec::new()),
            status: tokio::sync::watch::channel(WatchStatus::Starting).0,
            counted_unsynced: std::sync::atomic::AtomicBool::new(true),
            next_sub: AtomicU64::new(0),
            resolution: std::sync::OnceLock::new(),
            failures: self.inner.failures.clone(),
            metrics: self.inner.clusters.metrics().clone(),
        });
        let task = tokio::spawn(run_cache(Arc::clone(&state), self.inner.resolver.clone()));
        let cache = Arc::new(SharedCache {
            state,
            task: task.abort_handle(),
        });
        caches
            .entry(key)
            .or_default()
            .push((filter, Arc::downgrade(&cache)));
        debug!(cluster = %cluster.name(), %resource, "cache started");
        Ok(cache)
    }
}

/// Delay between discovery attempts for a kind that is not served (yet).
const DISCOVERY_RETRY: Duration = Duration::from_secs(2);

/// A non-connectivity failure of discovery or of a watch request: an answer
/// from the API server that the plugins needing the watch must be told of
/// (403 RBAC, 404 CRD not installed, 401, 400, ...), or discovery not
/// knowing the kind.
fn watch_failure(e: &kube::Error) -> Option<WatchFailure> {
    match e {
        kube::Error::Api(s) if (400..500).contains(&s.code) && s.code != 429 && s.code != 410 => {
            let text = if s.reason.is_empty() {
                s.message.clone()
            } else {
                format!("{}: {}", s.reason, s.message)
            };
            Some(WatchFailure {
                code: Some(s.code),
                reason: match s.code {
                    404 => format!("resource not served (CRD not installed?): {text}"),
                    401 => format!("unauthorized (credentials rejected): {text}"),
                    403 => format!("forbidden (RBAC does not allow it): {text}"),
                    _ => text,
                },
            })
        }
        kube::Error::Discovery(d) => Some(WatchFailure {
            code: None,
            reason: format!("not served by the API server (CRD not installed?): {d}"),
        }),
        _ => None,
    }
}

/// One cache's task. An empty plural is resolved through discovery, retried
/// with backoff until the kind appears, so a CRD installed after start is
/// picked up. The watch is kube-runtime's `watcher` with its default
/// backoff; it re-lists on a dropped watch or a 410 Gone, and a re-list is
/// diffed against the store so subscribers see every change they missed
/// and nothing else. The watch also restarts when its cluster recovers from
/// an outage during which it saw nothing, so a stalled connection cannot
/// linger.
async fn run_cache(state: Arc<State>, resolver: Resolver) {
    let cluster = Arc::clone(&state.cluster);
    let resolved = loop {
        match resolver.resolve(&cluster, &state.resource).await {
            Ok(r) => break r,
            Err(e) => {
                if let Error::Discovery { source, .. } = &e {
                    if is_connectivity_error(source) {
                        cluster.mark_unreachable(source);
                    } else if let Some(failure) = watch_failure(source) {
                        state.set_failed(failure);
                    }
                }
                debug!(cluster = %cluster.name(), resource = %state.resource, error = %e, "discovery failed; retrying");
                tokio::time::sleep(DISCOVERY_RETRY).await;
            }
        }
    };
    let resolution = Resolution::of(resolved.clone());
    let types = resolution.types.clone();
    let _ = state.resolution.set(resolution);
    let mut recoveries = cluster.recoveries();
    loop {
        recoveries.mark_unchanged();
        let api: Api<RawObject> = Api::all_with(cluster.client(), &resolved.api);
        let mut stream = watcher(api, watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut relist: Option<Vec<ObjectKey>> = None;
        // Outage count at the last event this stream delivered.
        let mut seen_outages = cluster.outages();
        loop {
            tokio::select! {
                ev = stream.next() => {
                    let Some(ev) = ev else { break };
                    match ev {
                        Ok(ev) => {
                            cluster.mark_reachable();
                            seen_outages = cluster.outages();
                            handle_event(&state, &types, ev, &mut relist);
                        }
                        Err(e) => {
                            let cause = match &e {
                                watcher::Error::InitialListFailed(c)
                                | watcher::Error::WatchStartFailed(c)
                                | watcher::Error::WatchFailed(c) => Some(c),
                                _ => None,
                            };
                            if let Some(c) = cause {
                                if is_connectivity_error(c) {
                                    cluster.mark_unreachable(&e);
                                } else if let Some(failure) = watch_failure(c) {
                                    // The API answered: the cluster is up.
                                    cluster.mark_reachable();
                                    state.set_failed(failure);
                                }
                            }
                            if let Some(label) = state.label() {
                                state.metrics.watch_restarted(cluster.name(), label);
                            }
                            debug!(cluster = %cluster.name(), resource = %state.resource, error = %e, "watch error; the watcher retries with backoff");
                        }
                    }
                }
                changed = recoveries.changed() => {
                    if changed.is_err() { return; }
                    if cluster.outages() > seen_outages {
                        if let Some(label) = state.label() {
                            state.metrics.watch_restarted(cluster.name(), label);
                        }
                        info!(cluster = %cluster.name(), resource = %state.resource, "restarting watch after the cluster recovered");
                        break;
                    }
                }
            }
        }
    }
}

fn handle_event(
    state: &State,
    types: &TypeMeta,
    ev: watcher::Event<RawObject>,
    relist: &mut Option<Vec<ObjectKey>>,
) {
    let convert = |obj: RawObject| match CachedObject::from_raw(obj, types) {
        Ok(o) => Some(Arc::new(o)),
        Err(e) => {
            warn!(cluster = %state.cluster.name(), resource = %state.resource, error = %e, "failed to serialize a watched object; skipped");
            None
        }
    };
    match ev {
        watcher::Event::Init => *relist = Some(Vec::new()),
        watcher::Event::InitApply(obj) | watcher::Event::Apply(obj) => {
            let Some(obj) = convert(obj) else { return };
            if !state.keeps(&obj) {
                // Another replica's share (a re-list's diff drops it if it
                // was held before; a live event drops it here).
                state.drop_filtered(&mut state.store.write(), &obj.key);
                return;
            }
            if let Some(seen) = relist.as_mut() {
                seen.push(obj.key.clone());
            }
            let mut store = state.store.write();
            state.apply(&mut store, obj);
            if relist.is_none() {
                state.report_size(store.len());
            }
        }
        watcher::Event::Delete(obj) => {
            let Some(obj) = convert(obj) else { return };
            let mut store = state.store.write();
            // Emitted only when the store held it: a delete the writer
            // already observed (read-your-writes) is not reported twice.
            if store
                .remove_deleted(&obj.key, obj.resource_version.as_deref())
                .is_some()
            {
                state.emit(Change::Deleted, obj, None);
            }
            state.report_size(store.len());
        }
        watcher::Event::InitDone => {
            let seen: std::collections::HashSet<ObjectKey> =
                relist.take().unwrap_or_default().into_iter().collect();
            {
                let mut store = state.store.write();
                let gone: Vec<ObjectKey> = store
                    .keys()
                    .filter(|k| !seen.contains(*k))
                    .cloned()
                    .collect();
                for key in gone {
                    if let Some(old) = store.remove(&key) {
                        state.emit(Change::Deleted, old, None);
                    }
                }
                state.report_size(store.len());
            }
            state.set_synced();
        }
    }
}
