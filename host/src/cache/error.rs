//! Errors of the caches.

/// Errors of the cache layer.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The cluster is not engaged.
    #[error("failed to start a cache: cluster {0} is not engaged")]
    UnknownCluster(String),
    /// Discovery could not resolve a kind.
    #[error("failed to resolve {api_version}/{kind} in cluster {cluster}")]
    Discovery {
        /// Cluster.
        cluster: String,
        /// Group/version.
        api_version: String,
        /// Kind.
        kind: String,
        /// Cause.
        #[source]
        source: Box<kube::Error>,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;
