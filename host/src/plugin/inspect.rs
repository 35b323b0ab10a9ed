//! `rekon plugin inspect FILE [--policy F]`: load a plugin file and
//! describe it (with its permissions narrowed by an operator policy).

use std::path::Path;
use std::sync::Arc;

use super::bindings::types::{ClusterSet, Permission, Resource, Watch};
use super::error::LoadError;
use super::policy::{Policy, PolicyEntry};
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
    /// Permissions: the effective ones when an operator policy applies.
    pub permissions: Vec<Permission>,
    /// What the plugin declared, when an operator policy narrowed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared_permissions: Option<Vec<Permission>>,
    /// The operator policy entries that apply (`"*"` and the plugin's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<InspectPolicy>,
    /// Concurrency bound.
    pub max_concurrent_reconciles: Option<u32>,
    /// CRD manifests, decoded.
    pub crds: Vec<serde_json::Value>,
}

/// The operator policy as it applies to one plugin.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InspectPolicy {
    /// The policy file.
    pub source: String,
    /// The clusters the plugin may write in (`None`: any).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub clusters: Option<Vec<String>>,
    /// The entries that apply, by key (`*` and/or the plugin's name).
    pub entries: std::collections::BTreeMap<String, PolicyEntry>,
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
    inspect_file_with_policy(file, format, None)
}

/// [`inspect_file`] with the operator `policy` applied: `permissions` are
/// the effective ones, `declaredPermissions` what the plugin declared.
pub fn inspect_file_with_policy(
    file: &Path,
    format: OutputFormat,
    policy: Option<Arc<Policy>>,
) -> Result<String, InspectError> {
    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        policy: policy.clone(),
        ..RuntimeConfig::default()
    })?;
    let plugin = runtime.load_file(file)?;
    let reg = plugin.effective_registration().clone();
    let narrowed = plugin.policy().is_some();
    let declared_permissions = narrowed.then(|| plugin.registration().permissions.clone());
    let policy = plugin
        .policy()
        .zip(policy.as_deref())
        .map(|(p, full)| InspectPolicy {
            source: full.source().to_string(),
            clusters: p.clusters(),
            entries: full
                .entries()
                .iter()
                .filter(|(key, _)| *key == "*" || **key == reg.name)
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        });
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
        declared_permissions,
        policy,
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
