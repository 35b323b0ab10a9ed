//! A plugin's view of the caches ([`HostReads`]): only the resources it
//! watches, in the clusters it watches them in.

use std::collections::HashMap;
use std::sync::Arc;

use super::scope::WatchKey;
use crate::action::{ClusterHealth, ClusterInfo, Resource};
use crate::cache::SharedCache;
use crate::cluster::{ClusterRegistry, Health};
use crate::plugin::{HostReads, ReadError};
use rekon_rules::LabelSelector;

/// The caches of one controller, by watch.
pub(crate) type CacheMap = HashMap<WatchKey, Arc<SharedCache>>;

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
        let cache = self.caches.get(&WatchKey::of(cluster, r)).ok_or_else(|| {
            let api = r.api_version();
            ReadError::NotWatched(format!(
                "{api} {} is not watched by this plugin in cluster {cluster}",
                r.kind
            ))
        })?;
        // The cache serves what the server calls the kind; a read naming
        // another plural or scope for it means another resource.
        if let Some(why) = cache
            .resolved()
            .and_then(|res| res.disagreement(&crate::writer::resource_id(r)))
        {
            return Err(ReadError::NotWatched(format!("refused: {why}")));
        }
        Ok(cache)
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
        let namespace = if cache.namespaced() { namespace } else { None };
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
            .map(LabelSelector::parse)
            .transpose()
            .map_err(|e| ReadError::InvalidSelector(e.to_string()))?;
        let namespace = if cache.namespaced() { namespace } else { None };
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::Scope;
    use crate::cache::{CacheManager, Resolver};

    fn resource(kind: &str) -> Resource {
        Resource {
            group: String::new(),
            version: "v1".into(),
            kind: kind.into(),
            plural: format!("{}s", kind.to_lowercase()),
            scope: Scope::Namespaced,
        }
    }

    #[tokio::test]
    async fn reads_are_scoped_to_watched_resources_and_engaged_clusters() {
        // A client that is never reached: nothing here needs the cluster.
        let client =
            kube::Client::try_from(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
                .unwrap();
        let clusters = ClusterRegistry::new("main", client);
        let caches = CacheManager::new(clusters.clone(), Resolver::default());
        let cm = resource("ConfigMap");
        let cache = caches
            .acquire("main", &crate::writer::resource_id(&cm))
            .unwrap();
        let mut map = CacheMap::new();
        map.insert(WatchKey::of("main", &cm), cache);
        let reads = PluginReads {
            caches: Arc::new(map),
            clusters,
        };
        assert_eq!(reads.get("main", &cm, Some("default"), "x"), Ok(None));
        assert_eq!(reads.list("main", &cm, None, Some("app=web")), Ok(vec![]));
        assert!(matches!(
            reads.list("main", &cm, None, Some("app in (web")),
            Err(ReadError::InvalidSelector(_))
        ));
        assert!(matches!(
            reads.get("main", &resource("Secret"), Some("default"), "x"),
            Err(ReadError::NotWatched(_))
        ));
        assert!(matches!(
            reads.get("elsewhere", &cm, Some("default"), "x"),
            Err(ReadError::UnknownCluster(c)) if c == "elsewhere"
        ));
        let infos = reads.clusters();
        assert_eq!(infos.len(), 1);
        assert!(infos[0].primary && infos[0].name == "main");
        // Unsynced cache: the cluster reports Syncing, not Ready.
        assert_eq!(infos[0].health, ClusterHealth::Syncing);
    }
}
