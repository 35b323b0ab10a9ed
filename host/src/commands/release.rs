//! `rekon plugin release NAME`: the objects that still carry a removed
//! plugin's finalizer, and (when asked) removing it from them.
//!
//! Removing a plugin never strips its finalizer (its cleanup would be
//! skipped): objects that carry it cannot finish deleting until the plugin
//! is loaded again and cleans up, or an operator releases them here. The
//! finalizer comes from the plugin file (`--from FILE.wasm`, whose
//! registration must be named NAME) or is given (`--finalizer`); the objects
//! are searched in the plugin's primary kind, or with `--finalizer` alone in
//! every listable resource type (discovery, metadata-only lists). A type
//! that cannot be listed (RBAC) is reported, not fatal. Removal is a JSON
//! patch guarded by a `test` that the finalizer is still where it was seen;
//! an object already gone counts as released.

use std::path::PathBuf;

use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::core::{DynamicObject, GroupVersionKind};
use kube::discovery::{ApiResource, Discovery, Scope, verbs};
use serde::Serialize;

use crate::app::{AppError, Config, connect_clusters};
use crate::cluster::ClusterRegistry;
use crate::controller::finalizer;
use crate::controller::scope::resolve_set;
use crate::plugin::{PluginRuntime, RuntimeConfig};

/// Errors of a release.
#[derive(Debug, thiserror::Error)]
pub enum ReleaseError {
    /// The clusters could not be connected.
    #[error("failed to connect the clusters")]
    Clusters(#[source] Box<AppError>),
    /// The plugin file could not be loaded.
    #[error("failed to load plugin {path}: {source}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: crate::plugin::LoadOneError,
    },
    /// The file's plugin is not the one named.
    #[error("plugin file {path} registers plugin {found}, not {name}")]
    WrongPlugin {
        /// The file.
        path: PathBuf,
        /// Its plugin.
        found: String,
        /// The name asked for.
        name: String,
    },
    /// Nothing says which finalizer to look for.
    #[error(
        "plugin {0} declares no finalizer, or none was given: pass --from PLUGIN.wasm or --finalizer NAME"
    )]
    NoFinalizer(String),
}

/// What to release.
#[derive(Clone, Debug)]
pub struct ReleaseConfig {
    /// The plugin's name.
    pub name: String,
    /// Its file, to read the finalizer and primary kind from.
    pub from: Option<PathBuf>,
    /// The finalizer, when no file is given (or to override it).
    pub finalizer: Option<String>,
    /// Clusters, as for `rekon run` (cluster fields and compiled cache only).
    pub clusters: Config,
    /// Remove the finalizer (otherwise only list).
    pub remove: bool,
}

/// One object carrying the finalizer.
#[derive(Clone, Debug, Serialize, PartialEq, Eq, PartialOrd, Ord)]
pub struct Held {
    /// Cluster.
    pub cluster: String,
    /// `apiVersion`.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Namespace.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Name.
    pub name: String,
    /// Whether it is being deleted (and waits for the finalizer).
    pub deleting: bool,
    /// Whether the finalizer was removed by this run.
    pub released: bool,
    /// Why removal failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The result of a release.
#[derive(Clone, Debug, Serialize)]
pub struct Release {
    /// The plugin.
    pub plugin: String,
    /// The finalizer looked for.
    pub finalizer: String,
    /// Every object found carrying it.
    pub objects: Vec<Held>,
    /// Resource types that could not be searched, with why.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<String>,
}

/// Find (and with `remove`, release) the objects carrying the finalizer.
///
/// # Errors
/// When the clusters cannot be connected, the plugin file cannot be loaded
/// or names another plugin, or no finalizer is known.
pub async fn release(config: ReleaseConfig) -> Result<Release, ReleaseError> {
    let clusters = connect_clusters(&config.clusters)
        .await
        .map_err(|e| ReleaseError::Clusters(Box::new(e)))?;
    // From the file: the finalizer, the primary kind and primary clusters.
    let mut finalizer = config.finalizer.clone();
    let mut primary: Option<(GroupVersionKind, Vec<String>)> = None;
    if let Some(path) = &config.from {
        let runtime_config = RuntimeConfig {
            cache_dir: config.clusters.cache_dir.clone(),
            ..RuntimeConfig::default()
        };
        let plugin = PluginRuntime::load_one(runtime_config, path)
            .await
            .map_err(|source| ReleaseError::Load {
                path: path.clone(),
                source,
            })?;
        let reg = plugin.registration();
        if reg.name != config.name {
            return Err(ReleaseError::WrongPlugin {
                path: path.clone(),
                found: reg.name.clone(),
                name: config.name.clone(),
            });
        }
        finalizer = finalizer.or_else(|| reg.finalizer.clone());
        primary = Some((
            GroupVersionKind::gvk(&reg.primary.group, &reg.primary.version, &reg.primary.kind),
            resolve_set(&reg.primary_clusters, &clusters),
        ));
    }
    let finalizer = finalizer.ok_or_else(|| ReleaseError::NoFinalizer(config.name.clone()))?;
    let mut objects = Vec::new();
    let mut skipped = Vec::new();
    let targets = match &primary {
        Some((_, names)) => names.clone(),
        None => clusters.names(),
    };
    for cluster in targets {
        let types = match &primary {
            Some((gvk, _)) => resolve_one(&clusters, &cluster, gvk).await,
            None => discover_all(&clusters, &cluster).await,
        };
        let types = match types {
            Ok(t) => t,
            Err(e) => {
                skipped.push(format!("cluster {cluster}: {e}"));
                continue;
            }
        };
        let Some(c) = clusters.get(&cluster) else {
            continue;
        };
        for (ar, namespaced) in types {
            let api: Api<DynamicObject> = Api::all_with(c.client(), &ar);
            let list = match api.list_metadata(&ListParams::default()).await {
                Ok(l) => l,
                Err(e) => {
                    skipped.push(format!(
                        "{} in cluster {cluster}: {}",
                        ar.plural,
                        crate::writer::describe_kube_error(&e)
                    ));
                    continue;
                }
            };
            for item in list.items {
                let meta = item.metadata;
                let finalizers = meta.finalizers.unwrap_or_default();
                let Some(index) = finalizers.iter().position(|f| *f == finalizer) else {
                    continue;
                };
                let name = meta.name.unwrap_or_default();
                let namespace = if namespaced { meta.namespace } else { None };
                let mut held = Held {
                    cluster: cluster.clone(),
                    api_version: ar.api_version.clone(),
                    kind: ar.kind.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    deleting: meta.deletion_timestamp.is_some(),
                    released: false,
                    error: None,
                };
                if config.remove {
                    let api: Api<DynamicObject> = match &namespace {
                        Some(ns) => Api::namespaced_with(c.client(), ns, &ar),
                        None => Api::all_with(c.client(), &ar),
                    };
                    let ops: kube_json_patch::Patch =
                        match serde_json::from_value(finalizer::remove_patch(index, &finalizer)) {
                            Ok(p) => p,
                            Err(e) => {
                                held.error = Some(e.to_string());
                                objects.push(held);
                                continue;
                            }
                        };
                    match api
                        .patch(&name, &PatchParams::default(), &Patch::Json::<()>(ops))
                        .await
                    {
                        Ok(_) => held.released = true,
                        Err(kube::Error::Api(s)) if s.code == 404 => held.released = true,
                        Err(e) => held.error = Some(crate::writer::describe_kube_error(&e)),
                    }
                }
                objects.push(held);
            }
        }
    }
    objects.sort();
    Ok(Release {
        plugin: config.name,
        finalizer,
        objects,
        skipped,
    })
}

async fn resolve_one(
    clusters: &ClusterRegistry,
    cluster: &str,
    gvk: &GroupVersionKind,
) -> Result<Vec<(ApiResource, bool)>, String> {
    let c = clusters
        .get(cluster)
        .ok_or_else(|| format!("cluster {cluster} not engaged"))?;
    let (ar, caps) = kube::discovery::oneshot::pinned_kind(&c.client(), gvk)
        .await
        .map_err(|e| crate::writer::describe_kube_error(&e))?;
    Ok(vec![(ar, caps.scope == Scope::Namespaced)])
}

async fn discover_all(
    clusters: &ClusterRegistry,
    cluster: &str,
) -> Result<Vec<(ApiResource, bool)>, String> {
    let c = clusters
        .get(cluster)
        .ok_or_else(|| format!("cluster {cluster} not engaged"))?;
    let discovery = Discovery::new(c.client())
        .run()
        .await
        .map_err(|e| crate::writer::describe_kube_error(&e))?;
    let mut out = Vec::new();
    for group in discovery.groups() {
        for (ar, caps) in group.recommended_resources() {
            if caps.supports_operation(verbs::LIST) && !ar.plural.contains('/') {
                out.push((ar, caps.scope == Scope::Namespaced));
            }
        }
    }
    Ok(out)
}
