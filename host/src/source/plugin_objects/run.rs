//! [`PluginObjects`]: follows the Plugin objects of the primary cluster and
//! schedules a pass ([`super::reconcile`]) per object through a
//! [`WorkQueue`]: one pass per object at a time, an object changed while
//! its pass runs passed over again after it, a failed pass retried with
//! backoff (transient failures only: 1 s doubling to
//! [`PluginObjectsConfig::max_backoff`]), reset by a new spec.

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kube::ResourceExt;
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{Instrument, debug, info, info_span, warn};

use super::contained::refresh_contained;
use super::context::{Context, PluginObjectsConfig, origin, shadow_origin};
use super::drift::{drift_events, on_drift};
use super::error::PluginObjectError;
use super::module_source::ModuleSource;
use super::reconcile::reconcile;
use super::status::{publish_report, refresh_consistency, refresh_shadow_counts};
use super::webhooks::{refresh_webhooks, remove_webhooks};
use crate::lease::LeaderGate;
use crate::lease::reports::ReportBoard;
use crate::lease::shard::Shards;
use crate::plugin::PluginRegistry;
use crate::queue::{Action, Done, WorkQueue};
use crate::source::plugin_crd::Plugin;
use crate::telemetry::metrics::Metrics;

/// Follows the Plugin objects of the primary cluster. Cheap to clone.
#[derive(Clone)]
pub struct PluginObjects {
    ctx: Arc<Context>,
}

impl std::fmt::Debug for PluginObjects {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginObjects")
            .field("config", &self.ctx.config)
            .finish_non_exhaustive()
    }
}

/// A finished pass: the object's name and what the queue makes of it.
type Finished = (String, Done);

impl PluginObjects {
    /// Plugin objects read through `client` (the primary cluster's), their
    /// modules from `source`, loaded into `registry`; shadow counts read
    /// from `metrics`. Statuses are written only while `status_gate` is
    /// open (`None`: always).
    #[must_use]
    pub fn new(
        client: kube::Client,
        registry: PluginRegistry,
        source: Arc<dyn ModuleSource>,
        status_gate: Option<LeaderGate>,
        config: PluginObjectsConfig,
        metrics: Metrics,
    ) -> Self {
        Self {
            ctx: Arc::new(Context {
                webhooks: config.webhooks.clone().map(|target| {
                    crate::source::managed_webhooks::ManagedWebhooks::new(
                        client.clone(),
                        target,
                        &config.field_manager,
                    )
                }),
                api: Api::all(client.clone()),
                secrets: Api::namespaced(client.clone(), &config.namespace),
                config_maps: Api::namespaced(client.clone(), &config.namespace),
                events: super::context::recorder(client),
                registry,
                source,
                status_gate,
                queue: Mutex::new(WorkQueue::with_backoff(config.backoff())),
                config,
                metrics,
                entries: Mutex::new(HashMap::new()),
                status_writes: tokio::sync::Mutex::new(()),
                reports: ReportBoard::local(crate::lease::default_identity()),
                shards: None,
                orphan_sweep: super::context::OrphanSweep::default(),
            }),
        }
    }

    /// Publish what this replica serves on `reports` (shared with the other
    /// replicas), with the shards it holds when sharding. Without it, the
    /// host is taken to be the only replica.
    #[must_use]
    pub fn with_reports(mut self, reports: ReportBoard, shards: Option<Shards>) -> Self {
        if let Some(ctx) = Arc::get_mut(&mut self.ctx) {
            ctx.reports = reports;
            ctx.shards = shards;
        }
        self
    }

    /// Follow the Plugin objects until `shutdown` resolves.
    pub async fn run(self, shutdown: impl std::future::Future<Output = ()> + Send) {
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<Finished>();
        let mut events = watcher(self.ctx.api.clone(), watcher::Config::default())
            .default_backoff()
            .boxed();
        let mut drifts = drift_events(&self.ctx);
        let mut seen: BTreeSet<String> = BTreeSet::new();
        let mut tick = tokio::time::interval(Duration::from_millis(500));
        let mut refresh = tokio::time::interval(self.ctx.config.status_period);
        tokio::pin!(shutdown);
        info!("following Plugin objects (plugins.rekon.dev) in the primary cluster");
        loop {
            self.start_ready(&done_tx);
            let next_retry = self.ctx.queue.lock().next_deadline();
            tokio::select! {
                () = &mut shutdown => break,
                event = events.next() => match event {
                    None => break,
                    Some(Ok(event)) => self.on_event(event, &mut seen),
                    Some(Err(e)) => warn!(error = %e, "watch of Plugin objects failed; retrying"),
                },
                Some((name, done)) = done_rx.recv() => self.finished(&name, done),
                Some(drift) = drifts.next() => {
                    on_drift(&self.ctx, drift);
                }
                () = until(next_retry) => self.ctx.queue.lock().fire_due(Instant::now()),
                _ = tick.tick() => {
                    publish_report(&self.ctx);
                    refresh_consistency(&self.ctx).await;
                }
                _ = refresh.tick() => {
                    refresh_shadow_counts(&self.ctx).await;
                    refresh_contained(&self.ctx).await;
                    refresh_webhooks(&self.ctx).await;
                }
            }
        }
        debug!("stopped following Plugin objects");
    }

    fn on_event(&self, event: watcher::Event<Plugin>, seen: &mut BTreeSet<String>) {
        match event {
            watcher::Event::Init => seen.clear(),
            watcher::Event::InitApply(obj) => {
                seen.insert(obj.name_any());
                self.changed(obj);
            }
            watcher::Event::Apply(obj) => self.changed(obj),
            watcher::Event::InitDone => {
                self.ctx
                    .orphan_sweep
                    .listed
                    .store(true, std::sync::atomic::Ordering::Release);
                let gone: Vec<String> = self
                    .ctx
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

    fn changed(&self, obj: Plugin) {
        let name = obj.name_any();
        let new_spec = {
            let mut entries = self.ctx.entries.lock();
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
            new_spec
        };
        if new_spec {
            let mut queue = self.ctx.queue.lock();
            queue.reset_backoff(&name);
            queue.add(name, "spec changed");
        }
    }

    fn deleted(&self, name: &str) {
        if self.ctx.entries.lock().remove(name).is_none() {
            return;
        }
        self.ctx.queue.lock().forget(&name.to_owned());
        info!(plugin = %name, "Plugin object deleted: unloading its plugin (finalizers stay on its objects)");
        self.ctx.registry.set_suspended(name, false);
        self.unload(name);
        let ctx = Arc::clone(&self.ctx);
        let name = name.to_owned();
        tokio::spawn(async move { remove_webhooks(&ctx, &name).await });
    }

    fn unload(&self, name: &str) {
        self.ctx.registry.remove_module(&origin(name));
        self.ctx.registry.remove_module(&shadow_origin(name));
    }

    /// Starts a pass for every object ready in the queue.
    fn start_ready(&self, done: &mpsc::UnboundedSender<Finished>) {
        loop {
            let Some((name, why)) = self.ctx.queue.lock().pop() else {
                return;
            };
            let latest = self
                .ctx
                .entries
                .lock()
                .get(&name)
                .and_then(|e| e.latest.clone());
            let Some(obj) = latest else {
                self.ctx
                    .queue
                    .lock()
                    .done(&name, Done::Terminal, Instant::now());
                continue;
            };
            let ctx = Arc::clone(&self.ctx);
            let done = done.clone();
            let span = info_span!("reconciling object", "object.ref" = %name, reason = %why);
            tokio::spawn(
                async move {
                    let result = reconcile(obj, ctx).await;
                    let _ = done.send((name, error_policy(result)));
                }
                .instrument(span),
            );
        }
    }

    fn finished(&self, name: &str, done: Done) {
        if !self.ctx.entries.lock().contains_key(name) {
            // Deleted while the pass ran: what it may have loaded goes.
            self.unload(name);
        }
        let name = name.to_owned();
        let mut queue = self.ctx.queue.lock();
        queue.done(&name, done, Instant::now());
        if done == Done::Retry {
            let failures = queue.failures(&name);
            let wait = self.ctx.config.backoff().delay(failures);
            debug!(plugin = %name, ?wait, "Plugin object will be tried again");
        }
    }
}

/// What the queue makes of a pass (kube-runtime's `error_policy`): a
/// transient failure is retried with backoff, any other waits for a change
/// of the object.
fn error_policy(result: Result<Action, PluginObjectError>) -> Done {
    match result {
        Ok(action) => action.into(),
        Err(e) if e.is_transient() => {
            debug!(reason = e.reason(), error = %e, "Plugin object pass failed; retrying");
            Done::Retry
        }
        Err(e) => {
            debug!(reason = e.reason(), error = %e, "Plugin object pass failed");
            Done::Terminal
        }
    }
}

/// Resolves at `deadline`, never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
