//! What a plugin's controller watches and which objects are its primaries.
//!
//! - [`desired_watches`] resolves a registration against the engaged
//!   clusters into one [`DesiredWatch`] per [`WatchKey`] (a resource in a
//!   cluster) with the mappings of its events; the primary kind in the
//!   primary clusters maps `itself`.
//! - [`PrimaryScope`] is the plugin's primaries: the primary kind, in the
//!   primary clusters, matching the primary selector. Everything that
//!   enqueues and the finalizer protocol ask it, through the shared rule
//!   [`rekon_rules::step`].
//! - [`covers`] and [`resolve_set`]: cluster sets against the engaged
//!   clusters.

use std::collections::{BTreeMap, HashSet};

use rekon_rules::{LabelSelector, PrimaryState, Step};
use tracing::error;

use crate::action::ClusterSet;
use crate::action::{Mapping, Registration, Resource};
use crate::cache::{CachedObject, ResourceId};
use crate::cluster::ClusterRegistry;
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
