//! The per-plugin runner: the controller's shared state, the loop that hands
//! queued keys to reconcile tasks, and one reconcile of one key.
//!
//! One [`WorkQueue`] lives as long as the controller, across plugin swaps
//! (even of the primary kind) and cluster disengage/re-engage: a running
//! key stays known to the queue until its reconcile reports `done`, so a
//! key is never reconciled twice at once. After a start or a swap the
//! runner hands out nothing until the new version's watches have settled
//! (synced, failed, or their cluster unreachable; bounded by
//! `sync_timeout`), like controller-runtime's `WaitForCacheSync`.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use parking_lot::{Mutex, RwLock};
use rekon_rules::Step;
use tokio::sync::{Notify, watch};
use tokio::task::JoinSet;
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::config::{ControllerConfig, QueueStats};
use super::finalizer;
use super::reads::{CacheMap, PluginReads};
use super::reconciler::Reconciler;
use super::scope::{PrimaryScope, Route, WatchKey, desired_watches};
use crate::action::{ObjectRef, Request};
use crate::cache::{CacheManager, Inbox, SharedCache, Subscription};
use crate::cluster::{ClusterRegistry, Health};
use crate::plugin::HostReads;
use crate::queue::{Done, ReqKey, WorkQueue};
use crate::telemetry::metrics::{Metrics, QueueMetrics, ReconcileResult};
use crate::writer::Writer;

/// Sharding by cluster (`--shard-by=cluster`): keep only the watches this
/// replica needs for the shards it holds.
///
/// - The primary kind in a primary cluster is watched only where this
///   replica holds that cluster's shard: the primaries of another cluster
///   are never reconciled here, so caching them would only cost memory.
/// - Every other watch (children, secondaries, in any cluster) is kept as
///   long as this replica holds at least one of the plugin's primary
///   clusters, and dropped when it holds none. They must stay global: a
///   reconcile of a primary may read any cluster the plugin watches (a
///   fan-out's Test in the primary cluster reads its Job in every cluster;
///   the contract has no "this cluster only" watch), so a secondary cache of
///   a cluster this replica does not hold can still be read by the
///   primaries it does hold.
///
/// With `--shard-by=key` every replica keeps every watch: each cluster's
/// keys are spread over all shards. Either way the caches of owned children
/// keep only this replica's share ([`shard_filter`]).
fn retain_held(
    desired: &mut std::collections::BTreeMap<WatchKey, super::scope::DesiredWatch>,
    scope: &PrimaryScope,
    shards: &crate::lease::shard::Shards,
) {
    if shards.by() != crate::lease::shard::ShardBy::Cluster {
        return;
    }
    let holds = |cluster: &str| shards.holds_cluster(cluster) == Some(true);
    let any_primary_held = scope.clusters.iter().any(|c| holds(c));
    desired.retain(|key, want| {
        let is_primary = scope.covers_cluster(&key.cluster) && want.id.same_type(&scope.resource);
        let is_secondary = want
            .route
            .mappings
            .iter()
            .any(|m| !matches!(m.mapping, crate::action::Mapping::Itself));
        (is_primary && holds(&key.cluster)) || (is_secondary && any_primary_held)
    });
}

/// With sharding, the filter of a watch mapped only by owner labels (one
/// set of keys) that is not the primary kind in a primary cluster: its cache
/// keeps the children of the primaries of the shards this replica holds,
/// and what names no primary ([`crate::cache::filter`]). A reconcile reads
/// its own primary's children; another shard's are another replica's.
/// Any other watch (the primaries, label-key prefixes, owner references,
/// all-primaries, custom) keeps every object: nothing in the object says
/// whose it is without asking the plugin.
fn shard_filter(
    key: &WatchKey,
    want: &super::scope::DesiredWatch,
    scope: &PrimaryScope,
    shards: &crate::lease::shard::Shards,
) -> Option<crate::cache::ShardFilter> {
    if scope.covers_cluster(&key.cluster) && want.id.same_type(&scope.resource) {
        return None;
    }
    let mut owner: Option<&crate::action::OwnerLabels> = None;
    for m in &want.route.mappings {
        match &m.mapping {
            crate::action::Mapping::OwnerLabels(o) if owner.is_none_or(|x| x == o) => {
                owner = Some(o);
            }
            _ => return None,
        }
    }
    let mut held: std::collections::BTreeSet<u32> = shards.held().into_iter().collect();
    if shards.by() == crate::lease::shard::ShardBy::Cluster {
        // Only the primary clusters' shards decide what is kept: a shard of
        // another cluster moving must not re-list every child.
        let relevant: std::collections::BTreeSet<u32> = scope
            .clusters
            .iter()
            .map(|c| shards.shard_of(c, None, ""))
            .collect();
        held.retain(|s| relevant.contains(s));
    }
    Some(crate::cache::ShardFilter {
        owner: owner?.clone(),
        primary_namespaced: scope.resource.namespaced,
        by: shards.by(),
        shards: shards.count(),
        held,
    })
}

/// What every controller shares with the manager.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) clusters: ClusterRegistry,
    pub(crate) caches: CacheManager,
    pub(crate) writer: Writer,
    pub(crate) config: ControllerConfig,
    /// The cluster registry's metrics.
    pub(crate) metrics: Metrics,
}

struct WatchEntry {
    tag: u64,
    sub: Subscription,
}

/// The state of one plugin's controller, shared by its runner, its event
/// pump and the manager.
pub(crate) struct Shared {
    pub(crate) name: String,
    plugin: RwLock<Arc<dyn Reconciler>>,
    scope: RwLock<Arc<PrimaryScope>>,
    watches: Mutex<HashMap<WatchKey, WatchEntry>>,
    snapshot: RwLock<Arc<CacheMap>>,
    routes: RwLock<HashMap<u64, Arc<Route>>>,
    pub(crate) queue: Mutex<WorkQueue>,
    pub(crate) wake: Notify,
    pub(crate) inbox: Arc<Inbox>,
    /// Events waiting for the plugin's `map` (custom mappings).
    pub(crate) custom_inbox: Arc<Inbox>,
    pub(crate) max_concurrent: AtomicUsize,
    next_tag: AtomicU64,
    /// True while the current version's watches settle (nothing is handed
    /// out meanwhile); `generation` tells a stale settle task apart.
    settling: AtomicBool,
    generation: AtomicU64,
    /// Suspended: watches and queue run, nothing is handed out.
    suspended: AtomicBool,
    pub(crate) metrics: QueueMetrics,
    pub(crate) ctx: Ctx,
}

impl Shared {
    pub(crate) fn new(plugin: Arc<dyn Reconciler>, ctx: Ctx, max: usize) -> Self {
        let name = plugin.name().to_owned();
        Self {
            metrics: ctx.metrics.queue(&name),
            scope: RwLock::new(Arc::new(PrimaryScope::of(
                &name,
                plugin.registration(),
                &ctx.clusters,
            ))),
            name,
            plugin: RwLock::new(plugin),
            watches: Mutex::new(HashMap::new()),
            snapshot: RwLock::new(Arc::new(CacheMap::new())),
            routes: RwLock::new(HashMap::new()),
            queue: Mutex::new(WorkQueue::new()),
            wake: Notify::new(),
            inbox: Inbox::new(),
            custom_inbox: Inbox::new(),
            max_concurrent: AtomicUsize::new(max),
            next_tag: AtomicU64::new(0),
            settling: AtomicBool::new(false),
            generation: AtomicU64::new(0),
            suspended: AtomicBool::new(false),
            ctx,
        }
    }

    pub(crate) fn plugin(&self) -> Arc<dyn Reconciler> {
        Arc::clone(&self.plugin.read())
    }

    pub(crate) fn set_plugin(&self, plugin: Arc<dyn Reconciler>) {
        *self.plugin.write() = plugin;
    }

    pub(crate) fn scope(&self) -> Arc<PrimaryScope> {
        Arc::clone(&self.scope.read())
    }

    pub(crate) fn route(&self, tag: u64) -> Option<Arc<Route>> {
        self.routes.read().get(&tag).cloned()
    }

    pub(crate) fn reads(&self) -> Arc<dyn HostReads> {
        Arc::new(PluginReads {
            caches: Arc::clone(&self.snapshot.read()),
            clusters: self.ctx.clusters.clone(),
        })
    }

    /// The caches this controller reads, with their keys.
    pub(crate) fn snapshot(&self) -> Arc<CacheMap> {
        Arc::clone(&self.snapshot.read())
    }

    /// Bring the watches and the primary scope in line with the
    /// registration, the engaged clusters and the shards held. Returns
    /// whether a cache was acquired (it must sync before reconciling).
    pub(crate) fn sync_watches(&self) -> bool {
        let plugin = self.plugin();
        let reg = plugin.registration();
        let mut desired = desired_watches(&self.name, reg, &self.ctx.clusters);
        let scope = PrimaryScope::of(&self.name, reg, &self.ctx.clusters);
        if let Some(shards) = &self.ctx.config.shards {
            retain_held(&mut desired, &scope, shards);
        }
        let mut watches = self.watches.lock();
        let mut routes = self.routes.write();
        watches.retain(|key, entry| {
            let keep = desired.contains_key(key);
            if !keep {
                routes.remove(&entry.tag);
                self.inbox.forget(entry.tag);
                debug!(plugin = %self.name, cluster = %key.cluster, kind = %key.kind, "watch released");
            }
            keep
        });
        let mut snapshot = CacheMap::new();
        let mut acquired = false;
        for (key, want) in desired {
            let filter = self
                .ctx
                .config
                .shards
                .as_ref()
                .and_then(|shards| shard_filter(&key, &want, &scope, shards));
            let route = Arc::new(want.route);
            if let Some(entry) = watches.get(&key)
                && entry.sub.cache().filter() == filter.as_ref()
            {
                routes.insert(entry.tag, route);
                snapshot.insert(key, Arc::clone(entry.sub.cache()));
                continue;
            }
            let cache: Arc<SharedCache> =
                match self
                    .ctx
                    .caches
                    .acquire_filtered(&key.cluster, &want.id, filter)
                {
                    Ok(c) => c,
                    Err(e) => {
                        warn!(plugin = %self.name, error = %e, "failed to start a watch");
                        continue;
                    }
                };
            let tag = self.next_tag.fetch_add(1, Ordering::Relaxed);
            routes.insert(tag, route);
            let sub = cache.subscribe(tag, Arc::clone(&self.inbox));
            debug!(plugin = %self.name, cluster = %key.cluster, kind = %key.kind, filter = ?cache.filter().map(|f| &f.held), "watch acquired");
            snapshot.insert(key.clone(), cache);
            acquired = true;
            // A cache with another filter (the shards held changed) is
            // replaced: the new one's first list replays every object it
            // keeps, so what the old one's inbox still held is not needed.
            if let Some(old) = watches.insert(key, WatchEntry { tag, sub }) {
                routes.remove(&old.tag);
                self.inbox.forget(old.tag);
            }
        }
        *self.snapshot.write() = Arc::new(snapshot);
        *self.scope.write() = Arc::new(scope);
        acquired
    }

    /// Drop every watch (the controller stops).
    pub(crate) fn release_watches(&self) {
        self.watches.lock().clear();
        self.routes.write().clear();
        *self.snapshot.write() = Arc::new(CacheMap::new());
        self.inbox.close();
    }

    /// Hold reconciles until the current watches have settled (synced,
    /// failed, or their cluster unreachable), at most `sync_timeout`.
    pub(crate) fn begin_settling(self: &Arc<Self>) {
        let generation = self.generation.fetch_add(1, Ordering::SeqCst) + 1;
        self.settling.store(true, Ordering::SeqCst);
        let caches: Vec<Arc<SharedCache>> = self.snapshot().values().cloned().collect();
        let deadline = Instant::now() + self.ctx.config.sync_timeout;
        let me = Arc::downgrade(self);
        tokio::spawn(async move {
            for cache in caches {
                if cache.cluster().health() != Health::Unreachable {
                    let _ = tokio::time::timeout_at(deadline, cache.wait_settled()).await;
                }
            }
            if let Some(me) = me.upgrade()
                && me.generation.load(Ordering::SeqCst) == generation
            {
                for (key, why) in me.declaration_disagreements() {
                    warn!(plugin = %me.name, cluster = %key.cluster, kind = %key.kind, reason = %why, "declaration refused: the plugin declared this resource otherwise than the server serves it; its reads and writes of it are refused");
                }
                me.settling.store(false, Ordering::SeqCst);
                debug!(plugin = %me.name, "watches settled; reconciling");
                me.wake.notify_one();
            }
        });
    }

    /// The watches whose declared plural or scope disagrees with what the
    /// server serves for the kind (once the cache resolved it), with why.
    /// The cache itself serves the server's resource; the plugin's reads
    /// and writes naming the declaration are refused (`reads.rs`, the
    /// writer), and [`super::Manager::degraded`] lists these.
    pub(crate) fn declaration_disagreements(&self) -> Vec<(WatchKey, String)> {
        let plugin = self.plugin();
        let desired = desired_watches(&self.name, plugin.registration(), &self.ctx.clusters);
        let snapshot = self.snapshot();
        desired
            .into_iter()
            .filter_map(|(key, want)| {
                let why = snapshot.get(&key)?.resolved()?.disagreement(&want.id)?;
                Some((key, why))
            })
            .collect()
    }

    fn settling(&self) -> bool {
        self.settling.load(Ordering::SeqCst)
    }

    /// Suspend or resume reconciling (the queue keeps what arrives).
    pub(crate) fn set_suspended(&self, suspended: bool) {
        if self.suspended.swap(suspended, Ordering::SeqCst) != suspended {
            info!(plugin = %self.name, suspended, queued = self.queue.lock().ready(), "{}", if suspended {
                "controller suspended: events are queued, nothing is reconciled"
            } else {
                "controller resumed: reconciling what queued up"
            });
            self.wake.notify_one();
        }
    }

    pub(crate) fn suspended(&self) -> bool {
        self.suspended.load(Ordering::SeqCst)
    }

    /// Queue `key` if it names a primary cluster of the plugin.
    pub(crate) fn enqueue(&self, key: ReqKey, reason: &str) {
        if !self.scope().covers_cluster(&key.cluster) {
            debug!(plugin = %self.name, request = %key, "request for a cluster whose primaries the plugin does not reconcile; dropped");
            return;
        }
        // Sharding: another replica's key (gaining its shard requeues it).
        if let Some(shards) = &self.ctx.config.shards
            && !shards.owns_key(&key.cluster, key.namespace.as_deref(), &key.name)
        {
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

    /// Queue every object the primary scope says is ours: the primaries, and
    /// the objects still carrying the finalizer (deleting or leaving).
    pub(crate) fn requeue_all(&self, reason: &str) {
        let scope = self.scope();
        let snapshot = self.snapshot();
        let mut added = 0_usize;
        {
            let mut queue = self.queue.lock();
            for cluster in &scope.clusters {
                let Some(cache) = snapshot.get(&WatchKey::new(cluster, &scope.resource)) else {
                    continue;
                };
                cache.read(|store| {
                    for obj in store.objects() {
                        if scope.step(cluster, obj) == Step::Ignore {
                            continue;
                        }
                        if let Some(shards) = &self.ctx.config.shards
                            && !shards.owns_key(cluster, obj.key.namespace(), &obj.key.name)
                        {
                            continue;
                        }
                        queue.add(
                            ReqKey {
                                cluster: cluster.clone(),
                                namespace: obj.key.namespace().map(str::to_owned),
                                name: obj.key.name.to_string(),
                            },
                            reason,
                        );
                        added += 1;
                    }
                });
            }
            self.metrics.set_depth(queue.ready());
        }
        debug!(plugin = %self.name, count = added, %reason, "requeued every primary");
        self.wake.notify_one();
    }

    /// Objects in the primary caches that carry the plugin's finalizer.
    pub(crate) fn finalized_objects(&self) -> Vec<String> {
        let scope = self.scope();
        let snapshot = self.snapshot();
        let mut out = Vec::new();
        for (key, cache) in snapshot.iter() {
            if !cache.resource().same_type(&scope.resource) {
                continue;
            }
            cache.read(|store| {
                for obj in store.objects().filter(|o| scope.has_finalizer(o)) {
                    out.push(format!("{}:{}", key.cluster, describe_key(&obj.key)));
                }
            });
        }
        out.sort();
        out
    }

    fn primary_cache(&self, cluster: &str) -> Option<Arc<SharedCache>> {
        let scope = self.scope();
        if !scope.covers_cluster(cluster) {
            return None;
        }
        self.snapshot
            .read()
            .get(&WatchKey::new(cluster, &scope.resource))
            .cloned()
    }

    /// Objects with events waiting in the inboxes (routing and `map`).
    pub(crate) fn pending_events(&self) -> usize {
        self.inbox.len() + self.custom_inbox.len()
    }

    pub(crate) fn stats(&self) -> QueueStats {
        let q = self.queue.lock();
        QueueStats {
            ready: q.ready(),
            running: q.running(),
            delayed: q.delayed(),
        }
    }
}

fn describe_key(key: &crate::cache::ObjectKey) -> String {
    match key.namespace() {
        Some(ns) => format!("{ns}/{}", key.name),
        None => key.name.to_string(),
    }
}

/// Hand keys to reconcile tasks, bounded, until `stop`; then finish in-flight work.
pub(crate) async fn run_queue(shared: Arc<Shared>, mut stop: watch::Receiver<bool>) {
    let mut tasks: JoinSet<(ReqKey, Done)> = JoinSet::new();
    // ops hook (leader election): only the leader reconciles; a follower
    // keeps its caches warm and its requests queued until it leads.
    let leader = shared.ctx.writer.leader_gate().clone();
    let mut leader_changes = leader.subscribe();
    let mut leader_alive = true;
    // Sharding: only keys of held shards are reconciled; gaining a shard
    // requeues its primaries (see `crate::lease::shard`).
    let shards = shared.ctx.config.shards.clone();
    let mut shard_changes = shards.as_ref().map(crate::lease::shard::Shards::changes);
    let mut held = shards
        .as_ref()
        .map(crate::lease::shard::Shards::held)
        .unwrap_or_default();
    let resync_every = shared.ctx.config.resync_period.filter(|d| !d.is_zero());
    let mut next_resync = resync_every.map(|d| Instant::now() + d);
    // When each in-flight reconcile started, for the in-progress gauges
    // (updated every half second, as client-go's metrics updater does).
    let mut started: HashMap<ReqKey, std::time::Instant> = HashMap::new();
    let mut in_flight_tick = tokio::time::interval(Duration::from_millis(500));
    in_flight_tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        let limit = shared.max_concurrent.load(Ordering::Relaxed);
        let open = leader.is_leader() && !shared.settling() && !shared.suspended();
        while open && tasks.len() < limit {
            let Some((key, reason, waited)) = shared.queue.lock().pop_timed() else {
                break;
            };
            let fence = match &shards {
                Some(shards) => {
                    let shard = shards.shard_of(&key.cluster, key.namespace.as_deref(), &key.name);
                    if !shards.owns(shard) {
                        // Another replica's key (or a shard just handed over):
                        // dropped here; requeued if this replica gains the shard.
                        shared
                            .queue
                            .lock()
                            .done(&key, Done::Success(None), Instant::now());
                        continue;
                    }
                    Some((shards.gate(shard).clone(), shards.enter(shard)))
                }
                None => None,
            };
            shared.metrics.observe_queue_duration(waited);
            started.insert(key.clone(), std::time::Instant::now());
            let fut = reconcile_key(Arc::clone(&shared), key.clone(), reason, fence);
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
                    started.remove(&key);
                    let mut queue = shared.queue.lock();
                    queue.done(&key, done, Instant::now());
                    shared.metrics.set_depth(queue.ready());
                }
            }
            _ = in_flight_tick.tick() => {
                shared
                    .metrics
                    .set_in_flight(started.values().copied(), std::time::Instant::now());
            }
            Some(changed) = async {
                match shard_changes.as_mut() {
                    Some(rx) => Some(rx.changed().await),
                    None => std::future::pending().await,
                }
            } => {
                if changed.is_err() {
                    shard_changes = None;
                }
                let now: Vec<u32> = shards
                    .as_ref()
                    .map(crate::lease::shard::Shards::held)
                    .unwrap_or_default();
                let gained: Vec<u32> = now.iter().copied().filter(|s| !held.contains(s)).collect();
                // Watches follow the shards held: by cluster, a gained
                // cluster's caches start and a lost one's stop; the caches
                // of owned children (either way) are acquired again with
                // the new shards' filter. A new cache's first list replays
                // every object it keeps as an event, so nothing of the
                // hand-over is lost, and nothing is handed out until the
                // new caches have synced: no reconcile on a cold cache.
                let relisted = now != held && shared.sync_watches();
                if relisted {
                    shared.begin_settling();
                }
                if !gained.is_empty() {
                    shared.requeue_all(&format!("shards {gained:?} acquired"));
                } else if relisted {
                    // A replaced cache's inbox was forgotten: a change it
                    // still held (a child deleted just before) must not be
                    // lost for the primaries this replica keeps.
                    shared.requeue_all("caches re-listed after a shard move");
                }
                held = now;
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
    shared
        .metrics
        .set_in_flight(std::iter::empty(), std::time::Instant::now());
}

pub(crate) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

/// A shard's write fence and the in-flight guard a hand-over waits for.
type ShardFence = (crate::lease::LeaderGate, crate::lease::shard::InFlight);

/// One reconcile of one key, inside its span; with sharding, every write of
/// it is fenced by its shard's Lease.
async fn reconcile_key(
    shared: Arc<Shared>,
    key: ReqKey,
    reason: String,
    fence: Option<ShardFence>,
) -> Done {
    let span = info_span!(
        "reconcile",
        plugin = %shared.name,
        cluster = %key.cluster,
        namespace = key.namespace.as_deref().unwrap_or(""),
        name = %key.name,
        reason = %reason,
    );
    let timer = shared
        .ctx
        .metrics
        .reconcile_started(&shared.name, &key.cluster);
    let started = std::time::Instant::now();
    let metrics = shared.metrics.clone();
    let started_at = unix_micros();
    // The in-flight guard lives until the line below is logged: a hand-over
    // of the shard waits for it, so the next holder starts after it.
    let (gate, in_flight) = fence.unzip();
    let done = match gate {
        Some(gate) => {
            crate::writer::FENCE
                .scope(gate, reconcile_inner(shared, key).instrument(span.clone()))
                .await
        }
        None => reconcile_inner(shared, key).instrument(span.clone()).await,
    };
    // One line per reconcile with wall-clock bounds: lets an operator (and
    // the sharding test) prove which replica reconciled what, and when.
    span.in_scope(|| {
        debug!(
            started_us = started_at,
            finished_us = unix_micros(),
            outcome = ?done,
            "reconciled"
        );
    });
    drop(in_flight);
    metrics.observe_work_duration(started.elapsed());
    timer.finish(match done {
        Done::Success(None) => ReconcileResult::Success,
        Done::Success(Some(_)) | Done::Defer(_) => ReconcileResult::RequeueAfter,
        Done::Retry => {
            metrics.retry();
            ReconcileResult::Error
        }
        Done::Terminal => ReconcileResult::TerminalError,
    });
    done
}

fn unix_micros() -> u128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros())
}

async fn reconcile_inner(shared: Arc<Shared>, key: ReqKey) -> Done {
    let plugin = shared.plugin();
    let reg = plugin.registration();
    let scope = shared.scope();
    let Some(cache) = shared.primary_cache(&key.cluster) else {
        debug!(
            "not a primary cluster of the plugin (cluster disengaged or plugin changed); dropped"
        );
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
    let (phase, release) = match scope.step(&key.cluster, &obj) {
        Step::Ignore => {
            debug!(
                deleting = obj.deleting,
                "not a primary (outside the primary selector, or deleting without our finalizer); nothing to do"
            );
            return Done::Success(None);
        }
        Step::AddFinalizer => {
            let Some(finalizer) = &scope.finalizer else {
                return Done::Success(None);
            };
            let ops =
                finalizer::add_patch(&obj.finalizers, obj.resource_version.as_deref(), finalizer);
            return match shared
                .ctx
                .writer
                .perform(&shared.name, &finalizer::patch_action(target, &ops))
                .await
            {
                Ok(()) => {
                    debug!(%finalizer, "finalizer added; reconciling on the resulting change");
                    Done::Success(None)
                }
                Err(e) if e.status() == Some(404) => {
                    debug!("primary gone before its finalizer was added");
                    Done::Success(None)
                }
                Err(e) => {
                    warn!(status = ?e.status(), error = %e, "failed to add the finalizer");
                    Done::Retry
                }
            };
        }
        Step::Reconcile { phase, release } => (phase, release),
    };
    let request = Request {
        cluster: key.cluster.clone(),
        namespace: key.namespace.clone(),
        name: key.name.clone(),
    };
    if let Err(wait) = plugin.admit() {
        // Backed off for hitting its bounds again and again: the key waits
        // its turn on the queue, holding nothing (not a failure).
        debug!(?wait, "plugin backed off; reconcile deferred");
        return Done::Defer(wait);
    }
    let started = std::time::Instant::now();
    let outcome = match plugin
        .reconcile(
            request.clone(),
            phase.into(),
            shared.reads(),
            SystemTime::now(),
        )
        .await
    {
        Ok(o) => o,
        Err(e) => {
            let retry = e.is_retryable();
            warn!(error = %e, kind = e.kind(), retry, phase = ?phase, "reconcile failed");
            return if retry { Done::Retry } else { Done::Terminal };
        }
    };
    let call = started.elapsed();
    let performed = shared
        .ctx
        .writer
        .execute(&shared.name, &outcome.actions)
        .await;
    plugin.performed(&request, performed.as_ref().map(drop));
    if let Err(e) = performed {
        let statuses: Vec<u16> = e.failed.iter().filter_map(|f| f.status()).collect();
        warn!(?statuses, error = %e, "failed to perform the outcome; will retry");
        return if e.is_retryable() {
            Done::Retry
        } else {
            Done::Terminal
        };
    }
    if release
        && outcome.finalized
        && let Some(finalizer) = &scope.finalizer
        && let Some(index) = obj.finalizers.iter().position(|f| f == finalizer)
    {
        let ops = finalizer::remove_patch(index, finalizer);
        match shared
            .ctx
            .writer
            .perform(&shared.name, &finalizer::patch_action(target, &ops))
            .await
        {
            Ok(()) => info!(%finalizer, phase = ?phase, "cleanup done; finalizer removed"),
            // Already gone (another finalizer-less deletion finished it).
            Err(e) if e.status() == Some(404) => {
                debug!("primary already gone; finalizer removal not needed");
            }
            Err(e) => {
                warn!(status = ?e.status(), error = %e, "failed to remove the finalizer");
                return Done::Retry;
            }
        }
    }
    debug!(actions = outcome.actions.len(), call_ms = call.as_millis(), requeue_after_ms = ?outcome.requeue_after_ms, phase = ?phase, "reconciled");
    Done::Success(outcome.requeue_after_ms.map(Duration::from_millis))
}
