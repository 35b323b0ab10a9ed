//! Resource types as the caches know them ([`ResourceId`]) and their
//! resolution to API endpoints through discovery ([`Resolver`]).

use std::collections::HashMap;
use std::sync::Arc;

use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope};
use parking_lot::RwLock;

use super::error::{Error, Result};
use crate::cluster::Cluster;

/// A resource type, independent of the WIT bindings.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ResourceId {
    /// API group ("" for core).
    pub group: String,
    /// Version.
    pub version: String,
    /// Kind.
    pub kind: String,
    /// Plural; empty = resolve through discovery.
    pub plural: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
}

impl ResourceId {
    /// `group/version`, or `version` for the core group.
    #[must_use]
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// Same group, version and kind (plural and scope may be unknown on one side).
    #[must_use]
    pub fn same_type(&self, other: &Self) -> bool {
        self.group == other.group && self.version == other.version && self.kind == other.kind
    }

    pub(super) fn type_key(&self) -> TypeKey {
        (self.group.clone(), self.version.clone(), self.kind.clone())
    }
}

impl std::fmt::Display for ResourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.api_version(), self.kind)
    }
}

pub(super) type TypeKey = (String, String, String);

/// A kind resolved against one cluster.
#[derive(Clone, Debug)]
pub struct Resolved {
    /// The API resource (plural, apiVersion).
    pub api: ApiResource,
    /// Whether it is namespaced.
    pub namespaced: bool,
}

/// Resolves kinds to API resources per cluster (discovery), with a cache.
#[derive(Clone, Default)]
pub struct Resolver {
    known: Arc<RwLock<HashMap<(String, TypeKey), Resolved>>>,
}

impl std::fmt::Debug for Resolver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Resolver").finish_non_exhaustive()
    }
}

impl Resolver {
    /// Resolve `group/version/kind` in `cluster`. A known plural (from a
    /// registration) is trusted as is; otherwise discovery answers.
    ///
    /// # Errors
    /// When discovery fails or does not know the kind (yet).
    pub async fn resolve(&self, cluster: &Cluster, id: &ResourceId) -> Result<Resolved> {
        let key = (cluster.name().to_owned(), id.type_key());
        if let Some(r) = self.known.read().get(&key) {
            return Ok(r.clone());
        }
        let gvk = GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
        let resolved = if id.plural.is_empty() {
            let (api, caps) = kube::discovery::oneshot::pinned_kind(&cluster.client(), &gvk)
                .await
                .map_err(|source| Error::Discovery {
                    cluster: cluster.name().to_owned(),
                    api_version: id.api_version(),
                    kind: id.kind.clone(),
                    source: Box::new(source),
                })?;
            Resolved {
                api,
                namespaced: caps.scope == Scope::Namespaced,
            }
        } else {
            Resolved {
                api: ApiResource::from_gvk_with_plural(&gvk, &id.plural),
                namespaced: id.namespaced,
            }
        };
        self.known.write().insert(key, resolved.clone());
        Ok(resolved)
    }

    /// Forget what was resolved for `cluster` (it was removed).
    pub fn forget_cluster(&self, cluster: &str) {
        self.known.write().retain(|(c, _), _| c != cluster);
    }
}
