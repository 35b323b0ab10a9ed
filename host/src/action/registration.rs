//! What a plugin declares (its registration) and the request it is asked
//! about. The fields' meaning is the contract's: `wit/types.wit`.

use serde::{Deserialize, Serialize};

use super::resource::{ClusterSet, Resource};

/// A request: one primary object, in a named cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Request {
    /// The cluster of the primary.
    pub cluster: String,
    /// Its namespace (`None` for a cluster-scoped primary).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// Why a primary is reconciled (the shared rule `rekon_rules::step`
/// decides).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Phase {
    /// Exists and is in scope.
    Live,
    /// Being deleted: clean up.
    Deleting,
    /// Left the primary scope (e.g. label removed): clean up.
    Leaving,
}

impl From<rekon_rules::Phase> for Phase {
    fn from(p: rekon_rules::Phase) -> Self {
        match p {
            rekon_rules::Phase::Live => Self::Live,
            rekon_rules::Phase::Deleting => Self::Deleting,
            rekon_rules::Phase::Leaving => Self::Leaving,
        }
    }
}

/// Owner labels naming a primary, possibly in another cluster.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct OwnerLabels {
    /// Label holding the owner's cluster.
    pub cluster: String,
    /// Label holding the owner's namespace.
    pub namespace: String,
    /// Label holding the owner's name.
    pub name: String,
}

impl OwnerLabels {
    /// The primary an object with `labels` names, if any: the name label
    /// (required, non-empty), the cluster label (else the object's own
    /// `cluster`), and for a namespaced primary the namespace label (else
    /// the object's own `namespace`; none at all names nothing). The one
    /// rule for the owner-labels mapping and for the shard-scoped caches
    /// of owned objects, so both always agree on whose an object is.
    #[must_use]
    pub fn primary_of(
        &self,
        labels: &std::collections::BTreeMap<String, String>,
        cluster: &str,
        namespace: Option<&str>,
        primary_namespaced: bool,
    ) -> Option<Request> {
        let name = labels.get(&self.name).filter(|n| !n.is_empty())?;
        let cluster = labels
            .get(&self.cluster)
            .filter(|c| !c.is_empty())
            .map_or(cluster, String::as_str);
        let namespace = if primary_namespaced {
            Some(
                labels
                    .get(&self.namespace)
                    .map(String::as_str)
                    .filter(|n| !n.is_empty())
                    .or(namespace)?
                    .to_owned(),
            )
        } else {
            None
        };
        Some(Request {
            cluster: cluster.to_owned(),
            namespace,
            name: name.clone(),
        })
    }
}

/// How a watched object's events become requests.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Mapping {
    /// The watched object is a primary.
    Itself,
    /// Its controller owner reference, in the same cluster.
    OwnerReference,
    /// Owner labels naming a primary, possibly in another cluster.
    OwnerLabels(OwnerLabels),
    /// Label keys with these prefixes name primaries.
    LabelKeyPrefixes(Vec<String>),
    /// Every primary of the plugin.
    AllPrimaries,
    /// The plugin's exported `map`.
    Custom,
}

/// A watch of another resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Watch {
    /// The resource to watch.
    pub resource: Resource,
    /// Which clusters to watch it in.
    pub clusters: ClusterSet,
    /// How its events become requests.
    pub mapping: Mapping,
    /// Filters which events are mapped (never the cache or reads).
    pub label_selector: Option<String>,
}

/// What a plugin may do to a resource.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Permission {
    /// The resource.
    pub resource: Resource,
    /// Kubernetes verbs (`get`, `list`, `watch`, `patch`, ...).
    pub verbs: Vec<String>,
    /// Whether they extend to the status subresource.
    pub status: bool,
    /// In which clusters.
    pub clusters: ClusterSet,
}

/// What a plugin declares once per load.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Registration {
    /// Unique plugin name (DNS label).
    pub name: String,
    /// The plugin's own version (semver).
    pub version: String,
    /// The primary resource.
    pub primary: Resource,
    /// Clusters whose primaries are reconciled.
    pub primary_clusters: ClusterSet,
    /// Label selector narrowing the primaries.
    pub primary_selector: Option<String>,
    /// Clusters whose engagement, disengagement and health requeue every
    /// primary (grants nothing).
    pub clusters: ClusterSet,
    /// Other resources to watch.
    pub watches: Vec<Watch>,
    /// Finalizer put on every primary.
    pub finalizer: Option<String>,
    /// Everything the plugin may write (and read).
    pub permissions: Vec<Permission>,
    /// CRD manifests (JSON) the plugin owns.
    pub crds: Vec<String>,
    /// Upper bound of concurrent reconciles.
    pub max_concurrent_reconciles: Option<u32>,
}

/// A point in time (the request time plugins see instead of a clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Timestamp {
    /// Seconds since the Unix epoch.
    pub seconds: i64,
    /// Nanoseconds within the second.
    pub nanoseconds: u32,
}

impl Timestamp {
    /// The time since the Unix epoch (a negative `seconds` clamps to zero).
    #[must_use]
    pub fn since_epoch(self) -> std::time::Duration {
        std::time::Duration::new(u64::try_from(self.seconds).unwrap_or(0), self.nanoseconds)
    }

    /// The point in time: the inverse of [`timestamp`].
    #[must_use]
    pub fn system_time(self) -> std::time::SystemTime {
        std::time::UNIX_EPOCH + self.since_epoch()
    }
}

/// Converts a [`std::time::SystemTime`] into a [`Timestamp`] (times before
/// the Unix epoch clamp to zero).
#[must_use]
pub fn timestamp(time: std::time::SystemTime) -> Timestamp {
    let since = time
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    Timestamp {
        seconds: i64::try_from(since.as_secs()).unwrap_or(i64::MAX),
        nanoseconds: since.subsec_nanos(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, UNIX_EPOCH};

    #[test]
    fn a_timestamp_converts_back_to_the_time_it_came_from() {
        let t = UNIX_EPOCH + Duration::new(1_795_586_987, 31_483_460);
        assert_eq!(timestamp(t).system_time(), t);
        let before_the_epoch = Timestamp {
            seconds: -5,
            nanoseconds: 7,
        };
        assert_eq!(before_the_epoch.since_epoch(), Duration::new(0, 7));
    }
}
