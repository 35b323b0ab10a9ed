//! Manifests derived from plugin registrations: least-privilege RBAC
//! (`rekon rbac DIR`) and the plugins' CRDs (`rekon crds DIR`).
//!
//! Both are generated from what each plugin declares in `register()`, so the
//! checked-in `deploy/` files can be compared with the plugins that ship
//! (`host/tests/ops_manifests.rs` fails when they drift).
//!
//! RBAC is split by scope:
//! - a **ClusterRole** with what the plugins need in the target cluster: the
//!   verbs of every declared permission (and `…/status` when declared), `list`
//!   and `watch` of every watched and primary resource (the shared caches),
//!   `patch` of the primary when the plugin has a finalizer, and `create`/`patch`
//!   of `events.k8s.io` Events (plugins may record Events on any object);
//! - a **Role** in the host's namespace (primary cluster only) with what the
//!   host itself needs there: the leader-election Lease, the kubeconfig
//!   Secrets of the dynamic-cluster provider, and `get` of its own Pod (for
//!   the uid of the Events it records about itself);
//! - the two bindings to the host's ServiceAccount;
//! - with secured metrics (primary cluster): `create` of `tokenreviews` and
//!   `subjectaccessreviews` in the ClusterRole (each scrape is reviewed),
//!   and a ClusterRole `<name>-metrics-reader` (`get` on `/metrics`) for
//!   the operator to bind to the scraper's ServiceAccount.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::rbac::v1::{
    ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding, RoleRef, Subject,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::GroupVersionKind;
use kube::discovery::ApiResource;

use crate::action::{ClusterSet, Registration, Resource};
use crate::plugin::{LoadedPlugin, PluginRuntime, Policy, RuntimeConfig};
use kube::CustomResourceExt;

/// Errors of manifest generation.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugin directory could not be read.
    #[error("failed to read plugin directory {path}")]
    ReadDir {
        /// The directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The plugin runtime could not start.
    #[error("failed to start the plugin runtime")]
    Runtime(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// A plugin failed to load.
    #[error("failed to load plugin file {path}")]
    Load {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: crate::plugin::LoadError,
    },
    /// A CRD manifest is not a CustomResourceDefinition JSON object.
    #[error("plugin {plugin} declares an invalid CRD manifest: {reason}")]
    InvalidCrd {
        /// The plugin.
        plugin: String,
        /// What is wrong.
        reason: String,
    },
    /// Two plugins declare different CRDs of the same name.
    #[error("plugins {first} and {second} declare different CRDs named {name}")]
    ConflictingCrd {
        /// The CRD name.
        name: String,
        /// First plugin.
        first: String,
        /// Second plugin.
        second: String,
    },
    /// Writing a generated file failed.
    #[error("failed to write {path}")]
    Write {
        /// The file or directory.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// YAML encoding failed.
    #[error("failed to encode {what} as YAML")]
    Yaml {
        /// What was encoded.
        what: String,
        /// Cause.
        #[source]
        source: serde_yaml::Error,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Load every `*.wasm` in `dir` (sorted by file name) and return their
/// registrations. Any file that fails to load fails the whole call: a
/// manifest generated from a subset of the plugins would be wrong.
///
/// # Errors
/// When the directory cannot be read or a plugin fails to load.
pub fn load_registrations(dir: &Path) -> Result<Vec<Registration>> {
    load_registrations_with_policy(dir, None, None)
}

/// [`load_registrations`] with the operator `policy` applied: each
/// registration's permissions are narrowed to the effective ones, so RBAC
/// generated from them is least privilege for what the policy lets the
/// plugins do. `primary` names the primary cluster when the RBAC is for it
/// (a `primary` permission is dropped when the policy does not allow that
/// cluster).
///
/// # Errors
/// As [`load_registrations`]; a plugin the policy refuses fails to load.
pub fn load_registrations_with_policy(
    dir: &Path,
    policy: Option<Arc<Policy>>,
    primary: Option<&str>,
) -> Result<Vec<Registration>> {
    Ok(load_plugins(dir, policy)?
        .iter()
        .map(|p| match p.policy() {
            // Narrowed again with the primary known.
            Some(policy) => policy.narrow_registration(p.registration(), primary),
            None => p.registration().clone(),
        })
        .collect())
}

/// Every `*.wasm` of `dir` (sorted by file name), loaded under `policy`
/// on a runtime of its own (what `rekon rbac`, `rekon crds` and
/// `rekon webhooks` read). Any file that fails to load fails the whole
/// call.
///
/// # Errors
/// When the directory cannot be read, the runtime does not start, or a
/// plugin fails to load.
pub fn load_plugins(dir: &Path, policy: Option<Arc<Policy>>) -> Result<Vec<LoadedPlugin>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|source| Error::ReadDir {
            path: dir.to_owned(),
            source,
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "wasm") && p.is_file())
        .collect();
    files.sort();
    let runtime = PluginRuntime::new(RuntimeConfig {
        // A short-lived CLI: no need to reserve the instance pool.
        pooling: false,
        policy,
        ..RuntimeConfig::default()
    })
    .map_err(|e| Error::Runtime(Box::new(e)))?;
    files
        .into_iter()
        .map(|path| {
            runtime
                .load_file(&path)
                .map_err(|source| Error::Load { path, source })
        })
        .collect()
}

/// Which cluster the RBAC is for.
#[derive(Clone, Debug)]
pub struct RbacOptions {
    /// Name of the ClusterRole, Role and bindings.
    pub name: String,
    /// Namespace of the host (Role, RoleBinding, ServiceAccount).
    pub namespace: String,
    /// The host's ServiceAccount.
    pub service_account: String,
    /// Name of the cluster the RBAC is for (matched against `named` cluster sets).
    pub cluster: String,
    /// Whether `cluster` is the primary cluster (host needs; `primary` cluster sets).
    pub primary: bool,
    /// Include read access to kubeconfig Secrets (the dynamic-cluster provider).
    pub secret_provider: bool,
    /// Include what `rekon run --plugin-objects` needs in the primary
    /// cluster: Plugin objects (read, status written) and pull Secrets.
    pub plugin_objects: bool,
    /// With `plugin_objects`: what `rekon run --webhook-service` (or
    /// `--webhook-url-base`) needs to manage the Plugin objects' webhook
    /// configurations.
    pub managed_webhooks: bool,
    /// Include what `rekon run --metrics-secure` needs in the primary
    /// cluster (token and access reviews) and the metrics-reader ClusterRole.
    pub metrics_auth: bool,
    /// Secrets of the host's namespace holding signature keys
    /// (`spec.verification.keys[].secretRef`): `get` on these names only.
    pub key_secrets: Vec<String>,
    /// ConfigMaps of the host's namespace holding signature keys
    /// (`spec.verification.keys[].configMapRef`): `get` on these names
    /// only; none named: `get` on the namespace's ConfigMaps (see
    /// [`rbac_objects`]).
    pub key_config_maps: Vec<String>,
}

impl Default for RbacOptions {
    fn default() -> Self {
        Self {
            name: "rekon".into(),
            namespace: "rekon-system".into(),
            service_account: "rekon".into(),
            cluster: "main".into(),
            primary: true,
            secret_provider: true,
            plugin_objects: true,
            managed_webhooks: true,
            metrics_auth: true,
            key_secrets: Vec::new(),
            key_config_maps: Vec::new(),
        }
    }
}

impl RbacOptions {
    fn covers(&self, set: &ClusterSet) -> bool {
        match set {
            ClusterSet::Primary => self.primary,
            ClusterSet::Others => !self.primary,
            ClusterSet::All => true,
            ClusterSet::Named(names) => names.contains(&self.cluster),
        }
    }
}

const VERB_ORDER: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

fn verb_rank(v: &str) -> usize {
    VERB_ORDER
        .iter()
        .position(|o| *o == v)
        .unwrap_or(VERB_ORDER.len())
}

/// (apiGroup, resource) -> verbs.
#[derive(Default)]
struct RuleSet(BTreeMap<(String, String), BTreeSet<String>>);

impl RuleSet {
    fn add<'a>(&mut self, group: &str, resource: &str, verbs: impl IntoIterator<Item = &'a str>) {
        let entry = self
            .0
            .entry((group.to_owned(), resource.to_owned()))
            .or_default();
        entry.extend(verbs.into_iter().map(str::to_owned));
    }

    /// One rule per (group, verb set), resources sorted: compact and stable.
    fn into_rules(self) -> Vec<PolicyRule> {
        let mut grouped: BTreeMap<(String, Vec<String>), Vec<String>> = BTreeMap::new();
        for ((group, resource), verbs) in self.0 {
            let mut verbs: Vec<String> = verbs.into_iter().collect();
            verbs.sort_by_key(|v| (verb_rank(v), v.clone()));
            grouped.entry((group, verbs)).or_default().push(resource);
        }
        grouped
            .into_iter()
            .map(|((group, verbs), resources)| PolicyRule {
                api_groups: Some(vec![group]),
                resources: Some(resources),
                verbs,
                ..PolicyRule::default()
            })
            .collect()
    }
}

/// Plural of `resource`: from a CRD the plugins ship, else kube's
/// pluralization of the kind (correct for every built-in kind). Never the
/// plural a plugin declared: RBAC is generated for the type a kind names,
/// as the writer resolves it, so a plugin declaring a made-up kind with a
/// real plural gets no rule on that plural (security issue #40).
fn plural(resource: &Resource, crds: &[CrdInfo]) -> String {
    if let Some(crd) = crds
        .iter()
        .find(|c| c.group == resource.group && c.kind == resource.kind)
    {
        return crd.plural.clone();
    }
    ApiResource::from_gvk(&GroupVersionKind::gvk(
        &resource.group,
        &resource.version,
        &resource.kind,
    ))
    .plural
}

struct CrdInfo {
    plugin: String,
    name: String,
    group: String,
    kind: String,
    plural: String,
    value: serde_json::Value,
}

fn parse_crds(registrations: &[Registration]) -> Result<Vec<CrdInfo>> {
    let mut out = Vec::new();
    for reg in registrations {
        for text in &reg.crds {
            let invalid = |reason: String| Error::InvalidCrd {
                plugin: reg.name.clone(),
                reason,
            };
            let value: serde_json::Value =
                serde_json::from_str(text).map_err(|e| invalid(format!("not JSON: {e}")))?;
            let field = |ptr: &str| {
                value
                    .pointer(ptr)
                    .and_then(serde_json::Value::as_str)
                    .map(str::to_owned)
                    .ok_or_else(|| invalid(format!("missing {ptr}")))
            };
            if field("/kind")? != "CustomResourceDefinition" {
                return Err(invalid("kind is not CustomResourceDefinition".into()));
            }
            out.push(CrdInfo {
                plugin: reg.name.clone(),
                name: field("/metadata/name")?,
                group: field("/spec/group")?,
                kind: field("/spec/names/kind")?,
                plural: field("/spec/names/plural")?,
                value,
            });
        }
    }
    Ok(out)
}

/// The RBAC objects (ClusterRole, ClusterRoleBinding and, for the primary
/// cluster, Role and RoleBinding) the host and `registrations` need.
///
/// # Errors
/// When a CRD manifest is invalid (its plurals are needed).
pub fn rbac_objects(
    registrations: &[Registration],
    opts: &RbacOptions,
) -> Result<Vec<serde_json::Value>> {
    let crds = parse_crds(registrations)?;
    let mut cluster = RuleSet::default();
    for reg in registrations {
        if opts.covers(&reg.primary_clusters) {
            let p = plural(&reg.primary, &crds);
            cluster.add(&reg.primary.group, &p, ["get", "list", "watch"]);
            if reg.finalizer.is_some() {
                cluster.add(&reg.primary.group, &p, ["patch", "update"]);
            }
        }
        for w in &reg.watches {
            if opts.covers(&w.clusters) {
                cluster.add(
                    &w.resource.group,
                    &plural(&w.resource, &crds),
                    ["get", "list", "watch"],
                );
            }
        }
        for perm in &reg.permissions {
            if !opts.covers(&perm.clusters) {
                continue;
            }
            let p = plural(&perm.resource, &crds);
            let verbs: Vec<&str> = perm.verbs.iter().map(String::as_str).collect();
            cluster.add(&perm.resource.group, &p, verbs.iter().copied());
            if perm.status {
                let status_verbs = verbs
                    .iter()
                    .copied()
                    .filter(|v| matches!(*v, "get" | "update" | "patch"));
                cluster.add(&perm.resource.group, &format!("{p}/status"), status_verbs);
            }
        }
    }
    // Events the plugins (and the host about them) record on any object.
    cluster.add("events.k8s.io", "events", ["create", "patch"]);
    if opts.primary && opts.plugin_objects {
        // --plugin-objects: follow the Plugin objects, report their status.
        cluster.add("rekon.dev", "plugins", ["get", "list", "watch"]);
        cluster.add("rekon.dev", "plugins/status", ["patch"]);
        if opts.managed_webhooks {
            // --webhook-service: the webhook configurations of the Plugin
            // objects that admit (read, applied, deleted, listed for those
            // of deleted objects, and watched to repair a change someone
            // else makes; these two kinds only).
            let verbs = ["get", "list", "watch", "create", "patch", "delete"];
            let group = "admissionregistration.k8s.io";
            cluster.add(group, "mutatingwebhookconfigurations", verbs);
            cluster.add(group, "validatingwebhookconfigurations", verbs);
            // And the conversion of the CRDs they convert: read, listed by
            // label (those of deleted objects), `spec.conversion` patched
            // (source/managed_conversion.rs). Never created: the CRDs come
            // from deploy/ or --install-crds.
            cluster.add(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                ["get", "list", "patch"],
            );
        }
    }
    let metrics_auth = opts.primary && opts.metrics_auth;
    if metrics_auth {
        // --metrics-secure: every scrape's token and right are reviewed.
        cluster.add("authentication.k8s.io", "tokenreviews", ["create"]);
        cluster.add("authorization.k8s.io", "subjectaccessreviews", ["create"]);
    }

    let meta = |namespace: Option<&str>| ObjectMeta {
        name: Some(opts.name.clone()),
        namespace: namespace.map(str::to_owned),
        labels: Some(BTreeMap::from([(
            "app.kubernetes.io/name".to_owned(),
            "rekon".to_owned(),
        )])),
        ..ObjectMeta::default()
    };
    let subject = Subject {
        kind: "ServiceAccount".into(),
        name: opts.service_account.clone(),
        namespace: Some(opts.namespace.clone()),
        ..Subject::default()
    };
    let mut objects = vec![
        to_value(&ClusterRole {
            metadata: meta(None),
            rules: Some(cluster.into_rules()),
            ..ClusterRole::default()
        }),
        to_value(&ClusterRoleBinding {
            metadata: meta(None),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: opts.name.clone(),
            },
            subjects: Some(vec![subject.clone()]),
        }),
    ];
    if opts.primary {
        // What the host itself needs in its namespace; each rule is held to
        // account by tests/e2e/tests/least_privilege.rs (removing it makes
        // the named operation fail with a 403).
        let mut own = RuleSet::default();
        // Leader election (--leader-elect): read, take and renew the Lease.
        own.add("coordination.k8s.io", "leases", ["get", "create", "update"]);
        // The host reads its own Pod once so its Events carry the Pod's uid.
        own.add("", "pods", ["get"]);
        if opts.secret_provider {
            // Kubeconfig Secrets (--cluster-secrets-namespace), watched.
            own.add("", "secrets", ["get", "list", "watch"]);
        }
        if opts.plugin_objects {
            // Pull Secrets (kubernetes.io/dockerconfigjson) Plugin objects name.
            own.add("", "secrets", ["get"]);
        }
        let mut rules = own.into_rules();
        if opts.plugin_objects {
            rules.extend(key_rules(opts));
        }
        objects.push(to_value(&Role {
            metadata: meta(Some(&opts.namespace)),
            rules: Some(rules),
        }));
        objects.push(to_value(&RoleBinding {
            metadata: meta(Some(&opts.namespace)),
            role_ref: RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: opts.name.clone(),
            },
            subjects: Some(vec![subject]),
        }));
    }
    if metrics_auth {
        // Bound by the operator to whoever scrapes (Prometheus' ServiceAccount).
        let mut reader = meta(None);
        reader.name = Some(format!("{}-metrics-reader", opts.name));
        objects.push(to_value(&ClusterRole {
            metadata: reader,
            rules: Some(vec![PolicyRule {
                non_resource_urls: Some(vec!["/metrics".into()]),
                verbs: vec!["get".into()],
                ..PolicyRule::default()
            }]),
            ..ClusterRole::default()
        }));
    }
    Ok(objects)
}

/// `get` on the Secrets and ConfigMaps holding signature keys
/// (`spec.verification`), in the host's namespace only (keys are looked up
/// there). Named (`rekon rbac --key-secret/--key-configmap`): those names
/// only (`resourceNames`). Not named, because Plugin objects may name any
/// key object and `rekon rbac` reads plugins, not Plugin objects:
/// Secrets need no rule of their own, the pull-Secret rule above already
/// grants `get` on the namespace's Secrets (which pull Secrets, named by
/// any Plugin, need); ConfigMaps get `get` on the namespace's ConfigMaps,
/// never `list` or `watch` (a key is read by name on each pass).
fn key_rules(opts: &RbacOptions) -> Vec<PolicyRule> {
    let rule = |resource: &str, names: &[String]| PolicyRule {
        api_groups: Some(vec![String::new()]),
        resources: Some(vec![resource.to_owned()]),
        resource_names: (!names.is_empty()).then(|| names.to_vec()),
        verbs: vec!["get".to_owned()],
        ..PolicyRule::default()
    };
    let mut rules = Vec::new();
    if !opts.key_secrets.is_empty() {
        rules.push(rule("secrets", &opts.key_secrets));
    }
    rules.push(rule("configmaps", &opts.key_config_maps));
    rules
}

fn to_value<K: k8s_openapi::Resource + serde::Serialize>(obj: &K) -> serde_json::Value {
    let mut v = serde_json::to_value(obj).unwrap_or(serde_json::Value::Null);
    // k8s-openapi serializes apiVersion/kind itself; make sure they lead.
    if let Some(map) = v.as_object_mut() {
        let mut ordered = serde_json::Map::new();
        ordered.insert("apiVersion".into(), K::API_VERSION.into());
        ordered.insert("kind".into(), K::KIND.into());
        for (k, val) in std::mem::take(map) {
            if k != "apiVersion" && k != "kind" {
                ordered.insert(k, val);
            }
        }
        *map = ordered;
    }
    v
}

/// `rekon rbac`'s output: a multi-document YAML of [`rbac_objects`].
///
/// # Errors
/// As [`rbac_objects`].
pub fn rbac_yaml(registrations: &[Registration], opts: &RbacOptions) -> Result<String> {
    let objects = rbac_objects(registrations, opts)?;
    let mut out =
        String::from("# Generated by `rekon rbac` from the plugins' registrations. Do not edit.\n");
    for (i, obj) in objects.iter().enumerate() {
        if i > 0 {
            out.push_str("---\n");
        }
        out.push_str(&yaml(obj, "RBAC")?);
    }
    Ok(out)
}

/// The CRDs of all plugins as `(crd name, YAML document)`, sorted by name;
/// identical CRDs declared by several plugins appear once.
///
/// # Errors
/// When a CRD is invalid or two plugins declare different CRDs of one name.
pub fn crd_documents(registrations: &[Registration]) -> Result<Vec<(String, String)>> {
    // The host's own resource first: `rekon crds` prints it with or without
    // plugins.
    let plugin_crd =
        serde_yaml::to_string(&crate::source::plugin_crd::Plugin::crd()).map_err(|source| {
            Error::Yaml {
                what: "plugins.rekon.dev".to_owned(),
                source,
            }
        })?;
    let host = (
        "plugins.rekon.dev".to_owned(),
        format!(
            "# Generated by `rekon crds`: the host's Plugin resource. Do not edit.\n{plugin_crd}"
        ),
    );
    let mut by_name: BTreeMap<String, CrdInfo> = BTreeMap::new();
    for crd in parse_crds(registrations)? {
        if let Some(existing) = by_name.get(&crd.name) {
            if existing.value != crd.value {
                return Err(Error::ConflictingCrd {
                    name: crd.name,
                    first: existing.plugin.clone(),
                    second: crd.plugin,
                });
            }
            continue;
        }
        by_name.insert(crd.name.clone(), crd);
    }
    std::iter::once(Ok(host))
        .chain(by_name.into_values().map(|crd| {
            let doc = format!(
                "# Generated by `rekon crds` from plugin {}. Do not edit.\n{}",
                crd.plugin,
                yaml(&crd.value, &crd.name)?
            );
            Ok((crd.name, doc))
        }))
        .collect()
}

/// `rekon crds`'s output: every CRD document, `---`-separated.
///
/// # Errors
/// As [`crd_documents`].
pub fn crds_yaml(registrations: &[Registration]) -> Result<String> {
    Ok(crd_documents(registrations)?
        .into_iter()
        .map(|(_, doc)| doc)
        .collect::<Vec<_>>()
        .join("---\n"))
}

/// The `kustomization.yaml` listing `<crd name>.yaml` for each CRD (what
/// `rekon crds --out-dir` writes beside them).
///
/// # Errors
/// As [`crd_documents`].
pub fn crds_kustomization(registrations: &[Registration]) -> Result<String> {
    let mut out = String::from(
        "# Generated by `rekon crds --out-dir` from the plugins' registrations. Do not edit.\napiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n",
    );
    let docs = crd_documents(registrations)?;
    if docs.is_empty() {
        out.push_str("resources: []\n");
    } else {
        out.push_str("resources:\n");
        for (name, _) in docs {
            out.push_str(&format!("- {name}.yaml\n"));
        }
    }
    Ok(out)
}

/// Write `<crd name>.yaml` per CRD and `kustomization.yaml` into `out`
/// (created if missing), removing generated CRD files of CRDs no plugin
/// declares any more. Files without the generated header are left alone.
///
/// # Errors
/// As [`crd_documents`], or when a file cannot be written.
pub fn write_crds(registrations: &[Registration], out: &Path) -> Result<()> {
    let write_err = |path: &Path| {
        let path = path.to_owned();
        move |source| Error::Write { path, source }
    };
    std::fs::create_dir_all(out).map_err(write_err(out))?;
    let docs = crd_documents(registrations)?;
    let keep: BTreeSet<String> = docs.iter().map(|(n, _)| format!("{n}.yaml")).collect();
    if let Ok(entries) = std::fs::read_dir(out) {
        for entry in entries.flatten() {
            let path = entry.path();
            let file = entry.file_name().to_string_lossy().into_owned();
            let generated = std::fs::read_to_string(&path)
                .is_ok_and(|t| t.starts_with("# Generated by `rekon crds`"));
            if file.ends_with(".yaml")
                && file != "kustomization.yaml"
                && generated
                && !keep.contains(&file)
            {
                std::fs::remove_file(&path).map_err(write_err(&path))?;
            }
        }
    }
    for (name, doc) in &docs {
        let path = out.join(format!("{name}.yaml"));
        std::fs::write(&path, doc).map_err(write_err(&path))?;
    }
    let path = out.join("kustomization.yaml");
    std::fs::write(&path, crds_kustomization(registrations)?).map_err(write_err(&path))?;
    Ok(())
}

fn yaml(value: &serde_json::Value, what: &str) -> Result<String> {
    serde_yaml::to_string(value).map_err(|source| Error::Yaml {
        what: what.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Mapping, Permission, Scope, Watch};
    use serde_json::json;

    fn res(group: &str, kind: &str, scope: Scope) -> Resource {
        Resource {
            group: group.into(),
            version: "v1".into(),
            kind: kind.into(),
            plural: String::new(),
            scope,
        }
    }

    fn crd_json() -> String {
        serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "nodepools.nodes.lailin.xyz"},
            "spec": {
                "group": "nodes.lailin.xyz",
                "names": {"kind": "NodePool", "plural": "nodepools", "singular": "nodepool", "listKind": "NodePoolList"},
                "scope": "Cluster",
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                    "subresources": {"status": {}}}]
            }
        })
        .to_string()
    }

    fn nodepool() -> Registration {
        Registration {
            name: "nodepool".into(),
            version: "0.1.0".into(),
            primary: res("nodes.lailin.xyz", "NodePool", Scope::Cluster),
            primary_clusters: ClusterSet::Primary,
            primary_selector: None,
            clusters: ClusterSet::Primary,
            watches: vec![Watch {
                resource: res("", "Node", Scope::Cluster),
                clusters: ClusterSet::Primary,
                mapping: Mapping::AllPrimaries,
                label_selector: None,
            }],
            finalizer: Some("nodes.lailin.xyz/finalizer".into()),
            permissions: vec![
                Permission {
                    resource: res("", "Node", Scope::Cluster),
                    verbs: vec!["patch".into(), "get".into()],
                    status: false,
                    clusters: ClusterSet::Primary,
                },
                Permission {
                    resource: res("nodes.lailin.xyz", "NodePool", Scope::Cluster),
                    verbs: vec!["patch".into()],
                    status: true,
                    clusters: ClusterSet::Primary,
                },
                Permission {
                    resource: res("node.k8s.io", "RuntimeClass", Scope::Cluster),
                    verbs: vec!["patch".into(), "create".into(), "delete".into()],
                    status: false,
                    clusters: ClusterSet::Named(vec!["edge".into()]),
                },
            ],
            crds: vec![crd_json()],
            max_concurrent_reconciles: None,
        }
    }

    fn rules_of(
        objects: &[serde_json::Value],
        kind: &str,
    ) -> Vec<(String, Vec<String>, Vec<String>)> {
        let obj = objects.iter().find(|o| o["kind"] == kind).expect(kind);
        obj["rules"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| {
                let strs = |k: &str| {
                    r[k].as_array()
                        .unwrap()
                        .iter()
                        .map(|v| v.as_str().unwrap().to_owned())
                        .collect::<Vec<_>>()
                };
                (
                    strs("apiGroups")[0].clone(),
                    strs("resources"),
                    strs("verbs"),
                )
            })
            .collect()
    }

    #[test]
    fn cluster_role_unions_declared_permissions_watches_and_finalizer() {
        let objects = rbac_objects(&[nodepool()], &RbacOptions::default()).unwrap();
        let rules = rules_of(&objects, "ClusterRole");
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(rules.contains(&(
            String::new(),
            s(&["nodes"]),
            s(&["get", "list", "watch", "patch"])
        )));
        assert!(rules.contains(&(
            "nodes.lailin.xyz".into(),
            s(&["nodepools"]),
            s(&["get", "list", "watch", "update", "patch"])
        )));
        assert!(rules.contains(&(
            "nodes.lailin.xyz".into(),
            s(&["nodepools/status"]),
            s(&["patch"])
        )));
        assert!(rules.contains(&(
            "events.k8s.io".into(),
            s(&["events"]),
            s(&["create", "patch"])
        )));
        // Only in the cluster named "edge".
        assert!(!rules.iter().any(|r| r.0 == "node.k8s.io"));
        // No wildcard anywhere.
        assert!(
            !rules
                .iter()
                .any(|r| r.1.contains(&"*".to_owned()) || r.2.contains(&"*".to_owned()))
        );
    }

    #[test]
    fn signature_keys_are_readable_by_name_only() {
        let key_rules = |opts: &RbacOptions| -> Vec<serde_json::Value> {
            let objects = rbac_objects(&[nodepool()], opts).unwrap();
            let role = objects.iter().find(|o| o["kind"] == "Role").unwrap();
            role["rules"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| {
                    r.get("resourceNames").is_some() || r["resources"] == json!(["configmaps"])
                })
                .cloned()
                .collect()
        };
        let named = RbacOptions {
            key_secrets: vec!["plugin-signing".into()],
            key_config_maps: vec!["team-keys".into()],
            ..RbacOptions::default()
        };
        let rules = key_rules(&named);
        assert!(
            rules.contains(&json!({"apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["plugin-signing"], "verbs": ["get"]})),
            "{rules:?}"
        );
        assert!(
            rules.contains(&json!({"apiGroups": [""], "resources": ["configmaps"],
            "resourceNames": ["team-keys"], "verbs": ["get"]})),
            "{rules:?}"
        );
        // Not named: ConfigMaps of the host's namespace, get only.
        let rules = key_rules(&RbacOptions::default());
        assert_eq!(
            rules,
            [json!({"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]})]
        );
        // Nothing of it without Plugin objects.
        let none = RbacOptions {
            plugin_objects: false,
            ..named
        };
        assert!(key_rules(&none).is_empty());
    }

    #[test]
    fn host_needs_are_namespaced_and_primary_only() {
        let objects = rbac_objects(&[nodepool()], &RbacOptions::default()).unwrap();
        let role = rules_of(&objects, "Role");
        let s = |v: &[&str]| v.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        assert!(role.contains(&(
            "coordination.k8s.io".into(),
            s(&["leases"]),
            s(&["get", "create", "update"])
        )));
        assert!(role.contains(&(String::new(), s(&["secrets"]), s(&["get", "list", "watch"]))));
        let rb = objects.iter().find(|o| o["kind"] == "RoleBinding").unwrap();
        assert_eq!(rb["metadata"]["namespace"], "rekon-system");
        assert_eq!(rb["subjects"][0]["name"], "rekon");

        let edge = RbacOptions {
            cluster: "edge".into(),
            primary: false,
            ..RbacOptions::default()
        };
        let objects = rbac_objects(&[nodepool()], &edge).unwrap();
        assert!(!objects.iter().any(|o| o["kind"] == "Role"));
        let rules = rules_of(&objects, "ClusterRole");
        assert!(
            rules
                .iter()
                .any(|r| r.0 == "node.k8s.io" && r.1 == ["runtimeclasses"])
        );
        assert!(!rules.iter().any(|r| r.1.contains(&"nodes".to_owned())));
    }

    #[test]
    fn secured_metrics_review_scrapes_and_ship_a_reader_role() {
        let objects = rbac_objects(&[nodepool()], &RbacOptions::default()).unwrap();
        let rules = rules_of(&objects, "ClusterRole");
        let create = vec!["create".to_owned()];
        assert!(rules.contains(&(
            "authentication.k8s.io".into(),
            vec!["tokenreviews".into()],
            create.clone()
        )));
        assert!(rules.contains(&(
            "authorization.k8s.io".into(),
            vec!["subjectaccessreviews".into()],
            create
        )));
        let reader = objects
            .iter()
            .find(|o| o["metadata"]["name"] == "rekon-metrics-reader")
            .expect("a metrics-reader ClusterRole");
        assert_eq!(
            reader["rules"],
            serde_json::json!([{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}])
        );
        let off = RbacOptions {
            metrics_auth: false,
            ..RbacOptions::default()
        };
        let objects = rbac_objects(&[nodepool()], &off).unwrap();
        assert!(
            !rules_of(&objects, "ClusterRole")
                .iter()
                .any(|r| r.1 == ["tokenreviews"])
        );
        assert_eq!(
            objects
                .iter()
                .filter(|o| o["kind"] == "ClusterRole")
                .count(),
            1
        );
    }

    #[test]
    fn rbac_yaml_is_stable_and_parses() {
        let a = rbac_yaml(&[nodepool()], &RbacOptions::default()).unwrap();
        let b = rbac_yaml(&[nodepool()], &RbacOptions::default()).unwrap();
        assert_eq!(a, b);
        let docs: Vec<serde_yaml::Value> = a
            .split("\n---\n")
            .map(|d| serde_yaml::from_str(d).unwrap())
            .collect();
        // ClusterRole, ClusterRoleBinding, Role, RoleBinding, metrics-reader.
        assert_eq!(docs.len(), 5);
        assert_eq!(docs[0]["apiVersion"], "rbac.authorization.k8s.io/v1");
    }

    #[test]
    fn crds_are_deduplicated_and_conflicts_refused() {
        let a = nodepool();
        let mut b = nodepool();
        b.name = "other".into();
        let docs = crd_documents(&[a.clone(), b.clone()]).unwrap();
        // The host's own Plugin CRD first, then the plugins' (once each).
        assert_eq!(docs.len(), 2);
        assert_eq!(docs[0].0, "plugins.rekon.dev");
        assert_eq!(docs[1].0, "nodepools.nodes.lailin.xyz");
        let parsed: serde_json::Value = serde_yaml::from_str(&docs[1].1).unwrap();
        assert_eq!(parsed["spec"]["names"]["plural"], "nodepools");
        b.crds = vec![crd_json().replace("nodepool\"", "pool\"")];
        assert!(matches!(
            crd_documents(&[a, b]),
            Err(Error::ConflictingCrd { .. })
        ));
    }

    #[test]
    fn invalid_crds_are_refused() {
        let mut r = nodepool();
        r.crds = vec!["{\"kind\":\"ConfigMap\"}".into()];
        assert!(matches!(crd_documents(&[r]), Err(Error::InvalidCrd { .. })));
    }
}
