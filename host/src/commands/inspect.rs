//! `rekon plugin inspect FILE|REF [--policy F]`: load a plugin file (or a
//! component fetched from a registry) and describe it (with its
//! permissions narrowed by an operator policy).

use std::path::Path;
use std::sync::Arc;

use crate::action::{ClusterSet, Mapping, Permission, Resource, Scope, Watch};
use crate::plugin::{
    LoadError, LoadOptions, LoadedPlugin, PluginRuntime, Policy, PolicyEntry, RuntimeConfig,
    RuntimeError,
};

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
    pub primary: ResourceView,
    /// Label selector narrowing the primaries.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub primary_selector: Option<String>,
    /// Clusters whose primaries are reconciled.
    pub primary_clusters: ClustersView,
    /// Clusters whose engagement requeues every primary.
    pub clusters: ClustersView,
    /// Watches and their mappings.
    pub watches: Vec<WatchView>,
    /// Finalizer, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finalizer: Option<String>,
    /// Permissions: the effective ones when an operator policy applies.
    pub permissions: Vec<PermissionView>,
    /// What the plugin declared, when an operator policy narrowed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub declared_permissions: Option<Vec<PermissionView>>,
    /// The operator policy entries that apply (`"*"` and the plugin's own).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub policy: Option<InspectPolicy>,
    /// Concurrency bound.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_concurrent_reconciles: Option<u32>,
    /// CRD manifests, decoded.
    pub crds: Vec<serde_json::Value>,
    /// The JSON Schema of the settings the plugin accepts (what it declared
    /// in `register`), if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings_schema: Option<serde_json::Value>,
    /// The settings it was inspected with (`--settings`), which it accepted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub settings: Option<serde_json::Value>,
    /// Its admission webhooks (`rules()`), if it admits.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub admission: Vec<AdmissionView>,
    /// The CRDs it converts (`conversions()`), if it converts.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub conversion: Vec<crate::plugin::ConversionRule>,
    /// Its CEL admission policies (`policies()`), each compiled with
    /// kube-cel at load; as `rekon policies` writes them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub policies: Vec<crate::plugin::CelPolicy>,
}

/// One admission webhook, as `rekon webhooks` configures it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionView {
    /// The webhook's name (`<rule>.<plugin>.rekon.dev`).
    pub name: String,
    /// `validate` or `mutate`.
    pub kind: &'static str,
    /// The resources admitted.
    pub resources: Vec<ResourceView>,
    /// `CREATE`, `UPDATE`, `DELETE`, `CONNECT`.
    pub operations: Vec<&'static str>,
    /// `Fail` or `Ignore`.
    pub failure_policy: &'static str,
    /// The API server's timeout for one call.
    pub timeout_seconds: u64,
    /// CEL match conditions, by name.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub match_conditions: Vec<(String, String)>,
}

fn admission_view(plugin: &str, rule: &crate::plugin::AdmissionRule) -> AdmissionView {
    use crate::plugin::{AdmissionKind, FailurePolicy, Operation};
    AdmissionView {
        name: rekon_rules::admission::webhook_name(&rule.name, plugin),
        kind: match rule.kind {
            AdmissionKind::Validate => "validate",
            AdmissionKind::Mutate => "mutate",
        },
        resources: rule.resources.iter().map(ResourceView::from).collect(),
        operations: rule
            .operations
            .iter()
            .map(|o| match o {
                Operation::Create => "CREATE",
                Operation::Update => "UPDATE",
                Operation::Delete => "DELETE",
                Operation::Connect => "CONNECT",
            })
            .collect(),
        failure_policy: match rule.failure_policy {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        },
        timeout_seconds: rule.timeout().as_secs(),
        match_conditions: rule
            .match_conditions
            .iter()
            .map(|c| (c.name.clone(), c.expression.clone()))
            .collect(),
    }
}

/// A resource type, Kubernetes style.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ResourceView {
    /// `group/version`, or `version` for the core group.
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Plural, when the plugin named it.
    #[serde(skip_serializing_if = "String::is_empty")]
    pub plural: String,
    /// `Namespaced` or `Cluster`.
    pub scope: &'static str,
}

impl From<&Resource> for ResourceView {
    fn from(r: &Resource) -> Self {
        Self {
            api_version: r.api_version(),
            kind: r.kind.clone(),
            plural: r.plural.clone(),
            scope: match r.scope {
                Scope::Namespaced => "Namespaced",
                Scope::Cluster => "Cluster",
            },
        }
    }
}

/// A cluster set: `Primary`, `All`, or the cluster names.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(untagged)]
pub enum ClustersView {
    /// `Primary` or `All`.
    Keyword(&'static str),
    /// Named clusters.
    Named(Vec<String>),
}

impl From<&ClusterSet> for ClustersView {
    fn from(c: &ClusterSet) -> Self {
        match c {
            ClusterSet::Primary => Self::Keyword("Primary"),
            ClusterSet::All => Self::Keyword("All"),
            ClusterSet::Others => Self::Keyword("Others"),
            ClusterSet::Named(n) => Self::Named(n.clone()),
        }
    }
}

/// A mapping as a Kubernetes discriminated union: `type` names the kind,
/// the member named after it carries its parameters.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct MappingView {
    /// `Itself`, `OwnerReference`, `OwnerLabels`, `LabelKeyPrefixes`,
    /// `AllPrimaries` or `Custom`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The owner label keys, for `OwnerLabels`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner_labels: Option<std::collections::BTreeMap<&'static str, String>>,
    /// The prefixes, for `LabelKeyPrefixes`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_key_prefixes: Option<Vec<String>>,
}

impl From<&Mapping> for MappingView {
    fn from(m: &Mapping) -> Self {
        let plain = |kind| Self {
            kind,
            owner_labels: None,
            label_key_prefixes: None,
        };
        match m {
            Mapping::Itself => plain("Itself"),
            Mapping::OwnerReference => plain("OwnerReference"),
            Mapping::AllPrimaries => plain("AllPrimaries"),
            Mapping::Custom => plain("Custom"),
            Mapping::OwnerLabels(k) => Self {
                owner_labels: Some(
                    [
                        ("cluster", k.cluster.clone()),
                        ("namespace", k.namespace.clone()),
                        ("name", k.name.clone()),
                    ]
                    .into(),
                ),
                ..plain("OwnerLabels")
            },
            Mapping::LabelKeyPrefixes(p) => Self {
                label_key_prefixes: Some(p.clone()),
                ..plain("LabelKeyPrefixes")
            },
        }
    }
}

/// A watch.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct WatchView {
    /// The watched resource.
    pub resource: ResourceView,
    /// Where.
    pub clusters: ClustersView,
    /// How events map to primaries.
    pub mapping: MappingView,
    /// Event filter.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<String>,
}

impl From<&Watch> for WatchView {
    fn from(w: &Watch) -> Self {
        Self {
            resource: (&w.resource).into(),
            clusters: (&w.clusters).into(),
            mapping: (&w.mapping).into(),
            label_selector: w.label_selector.clone(),
        }
    }
}

/// A permission, like an RBAC rule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionView {
    /// The resource.
    pub resource: ResourceView,
    /// RBAC verbs.
    pub verbs: Vec<String>,
    /// `[status]` when the verbs also hold for the status subresource.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<&'static str>,
    /// Where.
    pub clusters: ClustersView,
}

impl From<&Permission> for PermissionView {
    fn from(p: &Permission) -> Self {
        Self {
            resource: (&p.resource).into(),
            verbs: p.verbs.clone(),
            subresources: if p.status { vec!["status"] } else { vec![] },
            clusters: (&p.clusters).into(),
        }
    }
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
    inspect_file_with_policy(file, format, None, None)
}

/// [`inspect_file`] with the operator `policy` applied: `permissions` are
/// the effective ones, `declaredPermissions` what the plugin declared.
/// With `settings`, the plugin registers with them (and refuses them, as in
/// a cluster, with [`LoadError::InvalidSettings`]).
pub fn inspect_file_with_policy(
    file: &Path,
    format: OutputFormat,
    policy: Option<Arc<Policy>>,
    settings: Option<&serde_json::Value>,
) -> Result<String, InspectError> {
    let bytes = std::fs::read(file).map_err(|source| LoadError::Read {
        path: file.to_path_buf(),
        source,
    })?;
    inspect_bytes_with_policy(
        &bytes,
        &file.display().to_string(),
        format,
        policy,
        settings,
    )
}

/// [`inspect_file_with_policy`] for a component in memory (one fetched
/// from a registry); `origin` names it in messages.
pub fn inspect_bytes_with_policy(
    bytes: &[u8],
    origin: &str,
    format: OutputFormat,
    policy: Option<Arc<Policy>>,
    settings: Option<&serde_json::Value>,
) -> Result<String, InspectError> {
    let options = LoadOptions::default().with_settings(settings);
    let plugin = throwaway_runtime(policy.clone())?.load_bytes_with(bytes, origin, &options)?;
    render(&plugin, format, policy)
}

/// A runtime without cache or pool, for one load.
fn throwaway_runtime(policy: Option<Arc<Policy>>) -> Result<PluginRuntime, RuntimeError> {
    PluginRuntime::new(RuntimeConfig {
        pooling: false,
        policy,
        ..RuntimeConfig::default()
    })
}

fn render(
    plugin: &LoadedPlugin,
    format: OutputFormat,
    policy: Option<Arc<Policy>>,
) -> Result<String, InspectError> {
    let reg = plugin.effective_registration().clone();
    let narrowed = plugin.policy().is_some();
    let views = |p: &[Permission]| p.iter().map(PermissionView::from).collect::<Vec<_>>();
    let declared_permissions = narrowed.then(|| views(&plugin.registration().permissions));
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
        contract: crate::plugin::host_range(),
        primary: (&reg.primary).into(),
        primary_selector: reg.primary_selector.clone(),
        primary_clusters: (&reg.primary_clusters).into(),
        clusters: (&reg.clusters).into(),
        watches: reg.watches.iter().map(WatchView::from).collect(),
        finalizer: reg.finalizer.clone(),
        permissions: views(&reg.permissions),
        declared_permissions,
        policy,
        max_concurrent_reconciles: reg.max_concurrent_reconciles,
        crds: reg
            .crds
            .iter()
            .map(|c| serde_json::from_str(c).unwrap_or(serde_json::Value::String(c.clone())))
            .collect(),
        settings_schema: plugin.settings_schema().cloned(),
        settings: plugin.settings().and_then(|s| serde_json::from_str(s).ok()),
        admission: plugin
            .admission_rules()
            .iter()
            .map(|r| admission_view(plugin.name(), r))
            .collect(),
        conversion: plugin.conversion_rules().to_vec(),
        policies: plugin.policies().to_vec(),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::OwnerLabels;

    #[test]
    fn views_are_kubernetes_style_yaml() {
        let watch = Watch {
            resource: Resource {
                group: "batch".into(),
                version: "v1".into(),
                kind: "Job".into(),
                plural: String::new(),
                scope: Scope::Namespaced,
            },
            clusters: ClusterSet::Named(vec!["edge".into()]),
            mapping: Mapping::OwnerLabels(OwnerLabels {
                cluster: "o/c".into(),
                namespace: "o/ns".into(),
                name: "o/n".into(),
            }),
            label_selector: None,
        };
        let permission = Permission {
            resource: watch.resource.clone(),
            verbs: vec!["get".into(), "patch".into()],
            status: true,
            clusters: ClusterSet::Primary,
        };
        let yaml =
            serde_yaml::to_string(&(WatchView::from(&watch), PermissionView::from(&permission)))
                .unwrap();
        assert!(!yaml.contains('!'), "no YAML tags:\n{yaml}");
        assert!(!yaml.contains('_'), "no snake_case keys:\n{yaml}");
        for line in [
            "apiVersion: batch/v1",
            "type: OwnerLabels",
            "ownerLabels:",
            "- edge",
            "clusters: Primary",
            "- status",
        ] {
            assert!(yaml.contains(line), "{line:?} missing from\n{yaml}");
        }
    }
}
