//! Resource types as the caches know them ([`ResourceId`]) and their
//! resolution to API endpoints through the server's discovery alone
//! ([`Resolver`]).

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
    /// The plural a plugin declared (empty: none). Never used to build a
    /// request: [`Resolver::resolve`] asks the server; see
    /// [`Resolved::disagreement`].
    pub plural: String,
    /// Namespaced or cluster-scoped, as declared (the server's answer is
    /// [`Resolved::namespaced`]).
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

impl Resolved {
    /// Where what a plugin declared of `id` (a plural, a scope) disagrees
    /// with what the server serves, naming the field; `None` when it agrees
    /// or declared nothing. A declared plural or scope never builds a
    /// request, but a disagreement is a plugin that means another resource
    /// than the one its kind names, so it is refused, not corrected.
    #[must_use]
    pub fn disagreement(&self, id: &ResourceId) -> Option<String> {
        if !id.plural.is_empty() && id.plural != self.api.plural {
            return Some(format!(
                "declared plural {:?} of {id} disagrees with the server, which serves it as {:?}",
                id.plural, self.api.plural
            ));
        }
        if id.namespaced != self.namespaced {
            let word = |n: bool| if n { "Namespaced" } else { "Cluster" };
            return Some(format!(
                "declared scope {} of {id} disagrees with the server, which serves it {}",
                word(id.namespaced),
                word(self.namespaced)
            ));
        }
        None
    }
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
    /// Resolve `group/version/kind` in `cluster` through the cluster's
    /// discovery: the server names the resource (plural, scope). What the
    /// caller's `id` says of its plural and scope is never used to build a
    /// request: a plugin declaring a made-up kind with a real plural must
    /// not reach that plural (the security issue #40). Answers are cached
    /// per cluster and type, and the cache holds only what a server said,
    /// so nothing one plugin declares changes what another resolves.
    ///
    /// # Errors
    /// When discovery fails or does not know the kind (yet).
    pub async fn resolve(&self, cluster: &Cluster, id: &ResourceId) -> Result<Resolved> {
        let key = (cluster.name().to_owned(), id.type_key());
        if let Some(r) = self.known.read().get(&key) {
            return Ok(r.clone());
        }
        let gvk = GroupVersionKind::gvk(&id.group, &id.version, &id.kind);
        let (api, caps) = kube::discovery::oneshot::pinned_kind(&cluster.client(), &gvk)
            .await
            .map_err(|source| Error::Discovery {
                cluster: cluster.name().to_owned(),
                api_version: id.api_version(),
                kind: id.kind.clone(),
                source: Box::new(source),
            })?;
        let resolved = Resolved {
            api,
            namespaced: caps.scope == Scope::Namespaced,
        };
        self.known.write().insert(key, resolved.clone());
        Ok(resolved)
    }

    /// Forget what was resolved for `cluster` (it was removed).
    pub fn forget_cluster(&self, cluster: &str) {
        self.known.write().retain(|(c, _), _| c != cluster);
    }
}
