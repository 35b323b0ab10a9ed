//! `rekon plugin inspect FILE`: load a plugin file and describe it.

use std::path::Path;

use super::bindings::types::{ClusterSet, Permission, Resource, Watch};
use super::error::LoadError;
use super::runtime::{PluginRuntime, RuntimeConfig, RuntimeError};

/// Output format of `plugin inspect`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum OutputFormat {
    /// YAML (default).
    #[default]
    Yaml,
    /// JSON.
    Json,
}

/// What `plugin inspect` reports: the registration with the CRDs decoded,
/// plus the file's digest and the contract it was checked against.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InspectReport {
    /// Plugin name.
    pub name: String,
    /// Plugin version.
    pub version: String,
    /// sha256 of the file.
    pub digest: String,
    /// The contract the plugin was checked against.
    pub contract: String,
    /// Primary resource.
    pub primary: Resource,
    /// Clusters whose primaries are reconciled.
    pub primary_clusters: ClusterSet,
    /// Clusters the plugin covers.
    pub clusters: ClusterSet,
    /// Watches and their mappings.
    pub watches: Vec<Watch>,
    /// Finalizer, if any.
    pub finalizer: Option<String>,
    /// Permissions.
    pub permissions: Vec<Permission>,
    /// Concurrency bound.
    pub max_concurrent_reconciles: Option<u32>,
    /// CRD manifests, decoded.
    pub crds: Vec<serde_json::Value>,
}

/// Why `plugin inspect` failed.
#[derive(Debug, thiserror::Error)]
pub enum InspectError {
    /// The runtime could not start.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// The plugin did not load.
    #[error(transparent)]
    Load(#[from] LoadError),
    /// Rendering failed.
    #[error("failed to render the registration: {0}")]
    Render(String),
}

/// Loads `file` in a throwaway runtime (no cache, no pool) and renders its
/// registration in `format`.
pub fn inspect_file(file: &Path, format: OutputFormat) -> Result<String, InspectError> {
    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })?;
    let plugin = runtime.load_file(file)?;
    let reg = plugin.registration().clone();
    let report = InspectReport {
        name: reg.name,
        version: reg.version,
        digest: plugin.digest().to_string(),
        contract: super::contract::host_range(),
        primary: reg.primary,
        primary_clusters: reg.primary_clusters,
        clusters: reg.clusters,
        watches: reg.watches,
        finalizer: reg.finalizer,
        permissions: reg.permissions,
        max_concurrent_reconciles: reg.max_concurrent_reconciles,
        crds: reg
            .crds
            .iter()
            .map(|c| serde_json::from_str(c).unwrap_or(serde_json::Value::String(c.clone())))
            .collect(),
    };
    match format {
        OutputFormat::Yaml => {
            serde_yaml::to_string(&report).map_err(|e| InspectError::Render(e.to_string()))
        }
        OutputFormat::Json => serde_json::to_string_pretty(&report)
            .map(|mut s| {
                s.push('\n');
                s
            })
            .map_err(|e| InspectError::Render(e.to_string())),
    }
}
