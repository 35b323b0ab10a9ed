//! A plugin's view of the caches ([`HostReads`]): only the resources it
//! watches, in the clusters it watches them in.

use std::collections::HashMap;
use std::sync::Arc;

use crate::cache::{SharedCache, selector};
use crate::cluster::{ClusterRegistry, Health};
use crate::plugin::{ClusterHealth, ClusterInfo, HostReads, ReadError, Resource};

/// (cluster, group, version, kind) → cache.
pub(crate) type CacheMap = HashMap<(String, String, String, String), Arc<SharedCache>>;

/// The caches one plugin may read, snapshotted for one call.
pub struct PluginReads {
    pub(crate) caches: Arc<CacheMap>,
    pub(crate) clusters: ClusterRegistry,
}

impl std::fmt::Debug for PluginReads {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PluginReads")
            .field("caches", &self.caches.len())
            .finish_non_exhaustive()
    }
}

impl PluginReads {
    fn cache(&self, cluster: &str, r: &Resource) -> Result<&Arc<SharedCache>, ReadError> {
        if self.clusters.get(cluster).is_none() {
            return Err(ReadError::UnknownCluster(cluster.to_owned()));
        }
        let key = (
            cluster.to_owned(),
            r.group.clone(),
            r.version.clone(),
            r.kind.clone(),
        );
        self.caches.get(&key).ok_or_else(|| {
            let api = if r.group.is_empty() {
                r.version.clone()
            } else {
                format!("{}/{}", r.group, r.version)
            };
            ReadError::NotWatched(format!(
                "{api} {} is not watched by this plugin in cluster {cluster}",
                r.kind
            ))
        })
    }
}

impl HostReads for PluginReads {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        let cache = self.cache(cluster, resource)?;
        let namespace = if cache.resource().namespaced {
            namespace
        } else {
            None
        };
        Ok(cache.get(namespace, name).map(|o| o.json.to_string()))
    }

    fn list(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        let cache = self.cache(cluster, resource)?;
        let selector = label_selector
            .filter(|s| !s.trim().is_empty())
            .map(selector::parse)
            .transpose()
            .map_err(|e| ReadError::InvalidSelector(e.to_string()))?;
        let namespace = if cache.resource().namespaced {
            namespace
        } else {
            None
        };
        Ok(cache.read(|store| {
            store
                .list(namespace, selector.as_ref())
                .into_iter()
                .map(|o| o.json.to_string())
                .collect()
        }))
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        cluster_infos(&self.clusters)
    }
}

/// Every engaged cluster with its health, as the WIT type.
#[must_use]
pub fn cluster_infos(clusters: &ClusterRegistry) -> Vec<ClusterInfo> {
    clusters
        .all()
        .iter()
        .map(|c| ClusterInfo {
            name: c.name().to_owned(),
            primary: c.is_primary(),
            health: match c.health() {
                Health::Ready => ClusterHealth::Ready,
                Health::Syncing => ClusterHealth::Syncing,
                Health::Unreachable => ClusterHealth::Unreachable,
            },
        })
        .collect()
}
