//! Resource types, cluster sets and the engaged clusters.

use serde::{Deserialize, Serialize};

/// Whether a resource lives in a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Scope {
    /// Namespaced (Jobs, ConfigMaps).
    Namespaced,
    /// Cluster-scoped (Nodes, RuntimeClasses).
    Cluster,
}

/// A resource type: group, version, kind, plural and scope.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Resource {
    /// API group; empty for the core group.
    pub group: String,
    /// API version (`v1`).
    pub version: String,
    /// Kind (`Job`).
    pub kind: String,
    /// Plural (`jobs`); empty when the host should discover it.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub scope: Scope,
}

impl Resource {
    /// Its `apiVersion`: `v1`, `batch/v1`.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }
}

/// A set of clusters, resolved against the engaged ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClusterSet {
    /// The primary cluster.
    Primary,
    /// Every engaged cluster.
    All,
    /// Every engaged cluster but the primary.
    Others,
    /// These clusters, by name.
    Named(Vec<String>),
}

impl ClusterSet {
    /// Whether `cluster` belongs to the set, with the primary resolved from
    /// `clusters`.
    #[must_use]
    pub fn contains(&self, cluster: &str, clusters: &[ClusterInfo]) -> bool {
        match self {
            Self::All => true,
            Self::Primary => clusters.iter().any(|c| c.primary && c.name == cluster),
            Self::Others => clusters.iter().any(|c| !c.primary && c.name == cluster),
            Self::Named(names) => names.iter().any(|n| n == cluster),
        }
    }
}

/// An engaged cluster's health as plugins see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ClusterHealth {
    /// Reachable, caches synced.
    Ready,
    /// Reachable, caches still listing.
    Syncing,
    /// Not reachable.
    Unreachable,
}

/// An engaged cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ClusterInfo {
    /// Its name.
    pub name: String,
    /// Whether it is the primary cluster.
    pub primary: bool,
    /// Its health.
    pub health: ClusterHealth,
}

/// `Node`, `Job.batch`, `NodePool.nodes.lailin.xyz`.
#[must_use]
pub fn describe_resource(r: &Resource) -> String {
    let kind = if r.kind.is_empty() {
        &r.plural
    } else {
        &r.kind
    };
    if r.group.is_empty() {
        kind.to_string()
    } else {
        format!("{kind}.{}", r.group)
    }
}

/// Same resource type: same group and same non-empty kind. Versions are
/// not compared (permissions hold for every version of a type, like RBAC),
/// and neither are plurals or scopes: a plugin names a type by its kind
/// alone, and the server says which resource that is
/// (`crate::cache::Resolver`), so a declared plural can never make two
/// types the same.
#[must_use]
pub fn same_resource(declared: &Resource, wanted: &Resource) -> bool {
    declared.group == wanted.group && !declared.kind.is_empty() && declared.kind == wanted.kind
}

/// The resource type of a JSON object, from `apiVersion` and `kind` (no
/// plural; the scope is a placeholder, it takes no part in comparisons).
///
/// # Errors
/// The object is not JSON, or has no `apiVersion` and `kind`.
pub fn resource_of_object(object: &str) -> Result<Resource, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct TypeMeta {
        api_version: Option<String>,
        kind: Option<String>,
    }
    let meta: TypeMeta =
        serde_json::from_str(object).map_err(|e| format!("object is not a JSON object: {e}"))?;
    let (Some(api_version), Some(kind)) = (meta.api_version, meta.kind) else {
        return Err("object has no apiVersion and kind".to_string());
    };
    let (group, version) = match api_version.split_once('/') {
        Some((g, v)) => (g.to_string(), v.to_string()),
        None => (String::new(), api_version),
    };
    Ok(Resource {
        group,
        version,
        kind,
        plural: String::new(),
        scope: Scope::Namespaced,
    })
}
