//! What a plugin call may read: the host's caches, scoped per plugin.

use crate::action::{ClusterInfo, Resource, describe_resource};

use super::bindings::types::ReadError;

/// Read access to the host's caches, given to a plugin for one call.
///
/// Implemented by the engine's caches, scoped per plugin (a plugin only sees
/// the resources it watches, in the clusters it covers). Called from a
/// blocking thread while the guest runs: implementations must not block on
/// the async runtime.
pub trait HostReads: Send + Sync + 'static {
    /// The object `name` (in `namespace` for namespaced resources) of
    /// `resource` in `cluster`, as JSON; `None` if the cache has no such object.
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError>;

    /// Objects of `resource` in `cluster` as JSON, optionally limited to a
    /// namespace and a Kubernetes label selector.
    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError>;

    /// The engaged clusters and their health. Also used to resolve
    /// [`ClusterSet::Primary`] when checking a plugin's actions.
    fn clusters(&self) -> Vec<ClusterInfo>;
}

/// A [`HostReads`] that sees nothing: every read fails with
/// [`ReadError::NotWatched`] and no cluster is engaged. Used for `register`
/// (which runs before any watch exists) and `rekon plugin inspect`.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoReads;

impl HostReads for NoReads {
    fn get(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        _name: &str,
    ) -> Result<Option<String>, ReadError> {
        Err(ReadError::NotWatched(format!(
            "no cache is available here (reading {})",
            describe_resource(resource)
        )))
    }

    fn list(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        Err(ReadError::NotWatched(format!(
            "no cache is available here (listing {})",
            describe_resource(resource)
        )))
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        Vec::new()
    }
}
