//! Watch routing: what a registration asks to watch, which objects are the
//! plugin's primaries, and the event pump that turns cache events into
//! requests.
//!
//! - [`desired_watches`] resolves a registration against the engaged
//!   clusters into one [`DesiredWatch`] per [`WatchKey`] (a resource in a
//!   cluster) with the mappings of its events; the primary kind in the
//!   primary clusters maps `itself`.
//! - [`PrimaryScope`] is the plugin's primaries: the primary kind, in the
//!   primary clusters, matching the primary selector. Everything that
//!   enqueues and the finalizer protocol ask it, through the shared rule
//!   [`rekon_rules::step`].
//! - [`run_events`] drains the controller's [`Inbox`] (coalesced per
//!   object, so bounded), maps each event natively and queues the keys;
//!   events with the `custom` mapping go to a second inbox drained by a few
//!   workers that call the plugin's `map`, so a slow `map` never holds up the
//!   pump.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use rekon_rules::{LabelSelector, PrimaryState, Step};
use tokio::task::JoinSet;
use tracing::{error, warn};

use super::mapping::{Mapped, map_event};
use super::queue::ReqKey;
use super::resolve_set;
use super::runner::Shared;
use crate::cache::{CacheEvent, CachedObject, Change, Inbox, ResourceId};
use crate::cluster::ClusterRegistry;
use crate::plugin::{Mapping, Registration, Resource};
use crate::writer::resource_id;

/// One watch of a controller: a resource in a cluster.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct WatchKey {
    /// The cluster.
    pub cluster: String,
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
}

impl WatchKey {
    /// The key of `resource` in `cluster`.
    #[must_use]
    pub fn new(cluster: &str, resource: &ResourceId) -> Self {
        Self {
            cluster: cluster.to_owned(),
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
        }
    }

    /// The key of a WIT resource in `cluster`.
    #[must_use]
    pub fn of(cluster: &str, resource: &Resource) -> Self {
        Self {
            cluster: cluster.to_owned(),
            group: resource.group.clone(),
            version: resource.version.clone(),
            kind: resource.kind.clone(),
        }
    }
}

/// One mapping of a watch's events, narrowed by the watch's label selector.
#[derive(Clone, Debug)]
pub(crate) struct RouteMapping {
    pub(crate) mapping: Mapping,
    pub(crate) selector: Option<LabelSelector>,
}

/// What a registration asks of one watch.
#[derive(Debug)]
pub(crate) struct DesiredWatch {
    pub(crate) id: ResourceId,
    pub(crate) route: Route,
}

/// How the events of one subscription become requests.
#[derive(Clone, Debug)]
pub(crate) struct Route {
    pub(crate) resource: Resource,
    pub(crate) mappings: Vec<RouteMapping>,
}

/// The watches `reg` asks for, resolved against the engaged clusters.
/// A watch with a label selector that does not parse is left out (and
/// logged); the SDK refuses such a registration before it leaves a plugin.
pub(crate) fn desired_watches(
    plugin: &str,
    reg: &Registration,
    clusters: &ClusterRegistry,
) -> BTreeMap<WatchKey, DesiredWatch> {
    let mut desired: BTreeMap<WatchKey, DesiredWatch> = BTreeMap::new();
    let mut add = |cluster: &str, resource: &Resource, mapping: RouteMapping| {
        let id = resource_id(resource);
        desired
            .entry(WatchKey::new(cluster, &id))
            .or_insert_with(|| DesiredWatch {
                id,
                route: Route {
                    resource: resource.clone(),
                    mappings: Vec::new(),
                },
            })
            .route
            .mappings
            .push(mapping);
    };
    for c in resolve_set(&reg.primary_clusters, clusters) {
        add(
            &c,
            &reg.primary,
            RouteMapping {
                mapping: Mapping::Itself,
                selector: None,
            },
        );
    }
    for w in &reg.watches {
        let sel = match w
            .label_selector
            .as_deref()
            .map(LabelSelector::parse)
            .transpose()
        {
            Ok(sel) => sel,
            Err(e) => {
                error!(%plugin, error = %e, "watch ignored: invalid label selector");
                continue;
            }
        };
        for c in resolve_set(&w.clusters, clusters) {
            add(
                &c,
                &w.resource,
                RouteMapping {
                    mapping: w.mapping.clone(),
                    selector: sel.clone(),
                },
            );
        }
    }
    desired
}

/// A plugin's primaries: the objects of `resource`, in `clusters`, whose
/// labels match `selector`, and the finalizer it puts on them.
#[derive(Clone, Debug)]
pub struct PrimaryScope {
    /// The primary kind.
    pub resource: ResourceId,
    /// The primary clusters (resolved against the engaged clusters).
    pub clusters: HashSet<String>,
    /// The primary selector; `None` selects every object.
    pub selector: Option<LabelSelector>,
    /// The plugin's finalizer.
    pub finalizer: Option<String>,
}

impl PrimaryScope {
    /// The scope `reg` declares, with its primary clusters resolved. A
    /// primary selector that does not parse selects nothing (logged): an
    /// invalid scope must never put finalizers on everything.
    #[must_use]
    pub fn of(plugin: &str, reg: &Registration, clusters: &ClusterRegistry) -> Self {
        let selector = reg.primary_selector.as_deref().map(|s| {
            LabelSelector::parse(s).unwrap_or_else(|e| {
                error!(%plugin, error = %e, "invalid primary selector: no object is a primary");
                // `!k, k` matches nothing.
                LabelSelector {
                    requirements: vec![
                        rekon_rules::Requirement::NotExists("rekon.dev/invalid".into()),
                        rekon_rules::Requirement::Exists("rekon.dev/invalid".into()),
                    ],
                }
            })
        });
        Self {
            resource: resource_id(&reg.primary),
            clusters: resolve_set(&reg.primary_clusters, clusters)
                .into_iter()
                .collect(),
            selector,
            finalizer: reg.finalizer.clone(),
        }
    }

    /// Whether `cluster` is one of the primary clusters.
    #[must_use]
    pub fn covers_cluster(&self, cluster: &str) -> bool {
        self.clusters.contains(cluster)
    }

    /// Whether `obj`'s labels match the primary selector.
    #[must_use]
    pub fn selects(&self, obj: &CachedObject) -> bool {
        self.selector
            .as_ref()
            .is_none_or(|s| s.matches(&obj.labels))
    }

    /// Whether `obj` carries the plugin's finalizer.
    #[must_use]
    pub fn has_finalizer(&self, obj: &CachedObject) -> bool {
        self.finalizer
            .as_ref()
            .is_some_and(|f| obj.finalizers.iter().any(|x| x == f))
    }

    /// What the host does with `obj` (of the primary kind) in `cluster`:
    /// the shared rule, fed this scope.
    #[must_use]
    pub fn step(&self, cluster: &str, obj: &CachedObject) -> Step {
        if !self.covers_cluster(cluster) {
            return Step::Ignore;
        }
        rekon_rules::step(
            self.finalizer.is_some(),
            PrimaryState {
                in_scope: self.selects(obj),
                deleting: obj.deleting,
                has_finalizer: self.has_finalizer(obj),
            },
        )
    }
}

/// Concurrent `map` calls per controller.
const CUSTOM_MAP_WORKERS: usize = 2;

/// Route cache events through the mappings into the queue until the inbox
/// closes. `custom` mappings go to `custom` (drained by
/// [`CUSTOM_MAP_WORKERS`] workers), never called inline.
pub(crate) async fn run_events(shared: Arc<Shared>, inbox: Arc<Inbox>, custom: Arc<Inbox>) {
    let mut workers = JoinSet::new();
    for _ in 0..CUSTOM_MAP_WORKERS {
        workers.spawn(run_custom_maps(Arc::clone(&shared), Arc::clone(&custom)));
    }
    while let Some((tag, events)) = inbox.take().await {
        let Some(route) = shared.route(tag) else {
            continue;
        };
        for event in events {
            route_event(&shared, &route, tag, &event, &custom);
        }
    }
    custom.close();
    while workers.join_next().await.is_some() {}
}

fn reason(event: &CacheEvent) -> String {
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
}

fn route_event(shared: &Shared, route: &Route, tag: u64, event: &Arc<CacheEvent>, custom: &Inbox) {
    let scope = shared.scope();
    for m in &route.mappings {
        if m.selector
            .as_ref()
            .is_some_and(|s| !s.matches(&event.object.labels))
        {
            continue;
        }
        match map_event(&m.mapping, event, &scope.resource) {
            Mapped::Keys(keys) => {
                // The primary itself: only what the scope says is ours
                // (a primary, or an object still carrying our finalizer).
                if matches!(m.mapping, Mapping::Itself)
                    && event.change == Change::Applied
                    && scope.step(&event.cluster, &event.object) == Step::Ignore
                {
                    continue;
                }
                for key in keys {
                    shared.enqueue(key, &reason(event));
                }
            }
            Mapped::AllPrimaries => shared.requeue_all(&reason(event)),
            Mapped::Custom => custom.push(tag, Arc::clone(event)),
        }
    }
}

async fn run_custom_maps(shared: Arc<Shared>, custom: Arc<Inbox>) {
    while let Some((tag, events)) = custom.take().await {
        let Some(route) = shared.route(tag) else {
            continue;
        };
        for event in events {
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
                            &reason(&event),
                        );
                    }
                }
                Err(e) => {
                    warn!(plugin = %shared.name, cluster = %event.cluster, object = %event.object.key.name, error = %e, "custom mapping failed; event dropped");
                }
            }
        }
    }
}
