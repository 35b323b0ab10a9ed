//! The `Plugin` custom resource (`plugins.rekon.dev/v1alpha1`,
//! cluster-scoped): which plugin runs, from which OCI artifact, with which
//! settings and which granted permissions, and (optionally) which candidate
//! version runs beside it as a shadow.
//!
//! ```yaml
//! apiVersion: rekon.dev/v1alpha1
//! kind: Plugin
//! metadata:
//!   name: nodepool
//! spec:
//!   module: registry.example.com/rekon/nodepool:1.2.0
//!   digest: sha256:4f1c…            # optional: refuse anything else
//!   pullPolicy: IfNotPresent
//!   pullSecret: registry-credentials  # kubernetes.io/dockerconfigjson, host namespace
//!   permissions:                     # the grant: what `rekon plugin inspect` prints
//!     - resource: {apiVersion: v1, kind: Node, scope: Cluster}
//!       verbs: [get, list, watch, patch]
//!       clusters: Primary
//!   shadow:
//!     module: registry.example.com/rekon/nodepool:1.3.0-rc.1
//!   verification:                    # signatures checked before anything is compiled
//!     keys:
//!       - secretRef: {name: plugin-signing}   # host namespace, data key cosign.pub
//! ```
//!
//! Field names fixed by the issue that introduced the resource (users'
//! manifests and tools rely on them): `spec.module`, `spec.settings`,
//! `spec.shadow.module`, `status.shadow.divergences`, a `Ready` condition.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::action::{ClusterSet, Permission, Resource, Scope};

/// The API group of the `Plugin` resource.
pub const GROUP: &str = "rekon.dev";
/// Condition: the module (and shadow) were fetched and verified.
pub const FETCHED: &str = "Fetched";
/// Condition: the module serves (loaded, registered, within its grant).
pub const READY: &str = "Ready";
/// Condition: something is wrong while an older version may keep serving.
pub const DEGRADED: &str = "Degraded";
/// Condition: every live replica (and so every shard) serves the desired
/// digest (and shadow digest); `False` names the replicas that lag and why.
pub const CONSISTENT: &str = "Consistent";
/// Condition: the desired module's signatures satisfy `spec.verification`
/// (`False`: why not; absent when nothing asks for signatures).
pub const VERIFIED: &str = "Verified";

/// Which plugin runs, from where, with what settings and permissions.
#[derive(CustomResource, Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[kube(
    group = "rekon.dev",
    version = "v1alpha1",
    kind = "Plugin",
    plural = "plugins",
    status = "PluginObjectStatus",
    printcolumn = r#"{"name":"Module","type":"string","jsonPath":".spec.module"}"#,
    printcolumn = r#"{"name":"Digest","type":"string","jsonPath":".status.digest"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Consistent","type":"string","jsonPath":".status.conditions[?(@.type==\"Consistent\")].status","priority":1}"#,
    printcolumn = r#"{"name":"Divergences","type":"integer","jsonPath":".status.shadow.divergences"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct PluginSpec {
    /// OCI reference of the module: `registry/repository:tag` or
    /// `registry/repository@sha256:…` (a CNCF wasm artifact).
    pub module: String,
    /// Expected manifest digest (`sha256:…`): anything else is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// `IfNotPresent` (default: a digest already in the host's cache is not
    /// pulled again) or `Always` (tags are resolved on every change).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_policy: Option<PullPolicy>,
    /// A `kubernetes.io/dockerconfigjson` Secret in the host's namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull_secret: Option<String>,
    /// Free-form settings handed to the plugin (its `settings()` import):
    /// validated by the plugin when it loads (`InvalidSettings` with its
    /// own message keeps the serving version), read in every reconcile.
    /// Changing them is a live swap that requeues every primary.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub settings: Option<Value>,
    /// The permissions the operator grants (the shape `rekon plugin
    /// inspect` prints). A module that declares more is refused.
    #[serde(default)]
    pub permissions: Vec<GrantedPermission>,
    /// A candidate version that runs beside the serving one and writes
    /// nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowSpec>,
    /// Stop reconciling without unloading (finalizers stay).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
    /// Signatures the module (and the shadow) must carry before anything
    /// of it is compiled. Required by `rekon run --require-signatures`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verification: Option<VerificationSpec>,
    /// Bounds this plugin runs within, narrower than the host's (a wider
    /// value is the host's: `rekon run --plugin-call-timeout`,
    /// `--plugin-memory-budget`). Also for the shadow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits: Option<LimitsSpec>,
}

/// A Plugin's own bounds (docs/plugins/limits.md).
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct LimitsSpec {
    /// Deadline of one `reconcile` or `map` call, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub call_timeout_millis: Option<u64>,
    /// Linear memory all its live instances may hold together, MiB (at
    /// least one instance's cap).
    #[serde(
        default,
        rename = "memoryBudgetMiB",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(range(min = 1))]
    pub memory_budget_mib: Option<u64>,
}

impl LimitsSpec {
    /// As the runtime takes them.
    #[must_use]
    pub fn to_limits(&self) -> crate::plugin::PluginLimits {
        crate::plugin::PluginLimits {
            call_timeout: self
                .call_timeout_millis
                .map(std::time::Duration::from_millis),
            memory_budget_bytes: self
                .memory_budget_mib
                .map(|m| usize::try_from(m << 20).unwrap_or(usize::MAX)),
        }
    }
}

/// Who must have signed a module (cosign's format, key-based), verified
/// against the manifest digest that will be served.
///
/// ```yaml
/// verification:
///   keys:
///     - secretRef: {name: plugin-signing}          # data key cosign.pub
///     - configMapRef: {name: team-keys, key: web.pub}
///     - pem: |
///         -----BEGIN PUBLIC KEY-----
///         ...
///   minimumMatches: 1
///   annotations: {team: platform}
/// ```
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationSpec {
    /// Trusted public keys (ECDSA P-256 or Ed25519, PEM `PUBLIC KEY`, as
    /// `cosign.pub`). A key carried inside a signature is never trusted.
    pub keys: Vec<VerificationKey>,
    /// How many distinct keys of `keys` must have signed (default 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub minimum_matches: Option<u32>,
    /// Annotations the signed payload must carry, with these values
    /// (`cosign sign -a KEY=VALUE`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub annotations: std::collections::BTreeMap<String, String>,
}

/// One trusted key: exactly one of `secretRef`, `configMapRef`, `pem`.
/// Keyless identities (a Fulcio root and an issuer/subject) would be a
/// fourth field; not supported.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct VerificationKey {
    /// A Secret in the host's namespace holding the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_ref: Option<KeyReference>,
    /// A ConfigMap in the host's namespace holding the key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub config_map_ref: Option<KeyReference>,
    /// The key itself, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pem: Option<String>,
}

/// A key in a Secret or ConfigMap of the host's namespace.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KeyReference {
    /// The object's name.
    pub name: String,
    /// The data key holding the PEM (default `cosign.pub`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
}

/// The data key of a key Secret or ConfigMap when `key` is not given.
pub const DEFAULT_KEY_FIELD: &str = "cosign.pub";

impl KeyReference {
    /// The data key holding the PEM.
    #[must_use]
    pub fn field(&self) -> &str {
        self.key.as_deref().unwrap_or(DEFAULT_KEY_FIELD)
    }
}

/// When a module is pulled.
#[derive(Deserialize, Serialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum PullPolicy {
    /// Pull unless the digest is in the cache (default).
    #[default]
    IfNotPresent,
    /// Resolve the reference on every change of the Plugin.
    Always,
}

/// A shadow (candidate) version.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowSpec {
    /// OCI reference of the candidate module.
    pub module: String,
    /// Expected manifest digest of the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The candidate's settings (the serving version's when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "free_form")]
    pub settings: Option<Value>,
}

/// A granted permission, as `rekon plugin inspect` prints one.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantedPermission {
    /// The resource type.
    pub resource: GrantedResource,
    /// RBAC verbs (`*`: any).
    pub verbs: Vec<String>,
    /// `[status]` to extend the verbs to the status subresource.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subresources: Vec<String>,
    /// `Primary`, `All`, `Others`, or a list of cluster names.
    #[schemars(schema_with = "free_form")]
    pub clusters: Value,
}

/// A resource type of a grant.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantedResource {
    /// `group/version` or `version` (the version is not compared).
    pub api_version: String,
    /// Kind.
    pub kind: String,
    /// Plural (optional).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub plural: String,
    /// `Namespaced` or `Cluster` (informational).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<String>,
}

/// What the host reports about a Plugin.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginObjectStatus {
    /// The generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Manifest digest of the module serving now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// The plugin version serving (its registration's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    /// The shadow's digest and counts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow: Option<ShadowStatus>,
    /// Every live replica of the host and what it serves of this plugin
    /// (the `Consistent` condition sums it up).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub replicas: Vec<ReplicaStatus>,
    /// The calls the host stopped at a bound (deadline, memory, instance
    /// slots, outcome bounds) on the replica writing this status, since
    /// it started; absent while there were none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub contained: Option<ContainedStatus>,
    /// The webhook configurations the host manages for this plugin's
    /// admission (`rekon run --webhook-service` or `--webhook-url-base`);
    /// absent while it manages none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub webhooks: Option<WebhooksStatus>,
    /// `Fetched`, `Ready`, `Degraded`, `Consistent`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// The webhook configurations the host manages for a Plugin's admission.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct WebhooksStatus {
    /// The ValidatingWebhookConfiguration it applied (the serving version
    /// has validating rules).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validating: Option<String>,
    /// The MutatingWebhookConfiguration it applied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mutating: Option<String>,
    /// Configurations of the same name it did not make (not labelled
    /// `app.kubernetes.io/managed-by: rekon` and `rekon.dev/plugin: NAME`),
    /// left alone: `Kind/name`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub foreign: Vec<String>,
    /// The CRDs whose `spec.conversion` the host points at the plugin's
    /// `/convert` route (the serving version converts them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversion: Vec<String>,
    /// CRDs the serving version no longer converts that still serve
    /// several versions: their conversion webhook is left in place rather
    /// than set to `None` (which would lose fields); see
    /// docs/plugins/admission.md.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conversion_kept: Vec<String>,
    /// Why the last write of a configuration failed (retried).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The containments of a plugin (`rekon_plugin_contained_total` of the
/// replica writing the status), the latest named.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ContainedStatus {
    /// Calls stopped per reason (`Timeout`, `OutOfMemory`, `InstanceSlots`,
    /// `TooManyActions`, `ObjectTooLarge`, `OutcomeTooLarge`, `TooDeep`,
    /// `InvalidJson`, `Forbidden`).
    #[serde(default)]
    pub counts: std::collections::BTreeMap<String, u64>,
    /// The reason of the latest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reason: Option<String>,
    /// What the latest said (the bound and how far it was broken).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_message: Option<String>,
    /// When the latest happened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_time: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
    /// While the plugin is backed off for hitting its bounds again and
    /// again: the seconds between two of its admitted calls.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backoff_seconds: Option<u64>,
}

/// What one live replica serves of a Plugin, as it reported it.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicaStatus {
    /// The replica's identity (`POD_NAME_<random>` in a Pod).
    pub identity: String,
    /// Manifest digest of the module it serves (none: nothing serves there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Manifest digest of the shadow it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shadow_digest: Option<String>,
    /// The Plugin's generation it last worked on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Loaded but not reconciling (`spec.suspend`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspended: bool,
    /// The shards it holds (with `--shards`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shards: Option<Vec<u32>>,
    /// Why the desired version does not serve there (a condition reason).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// For humans.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// The shadow version's standing.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ShadowStatus {
    /// Manifest digest of the candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Reconciles this candidate ran beside the serving version (since it
    /// was loaded: another digest or other settings start from zero).
    #[serde(default)]
    pub reconciles: u64,
    /// Of those, how many decided exactly as the serving version did.
    #[serde(default)]
    pub identical: u64,
    /// Of those, how many decided differently (or failed, timed out, ran
    /// out of memory).
    #[serde(default)]
    pub divergences: u64,
    /// The last few divergences (this replica's), each with its diff.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<crate::telemetry::metrics::Divergence>,
    /// The candidate's admission verdicts beside the serving version's
    /// (never enforced); absent when the candidate admits nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<AdmissionShadowStatus>,
}

/// A shadow candidate's admission verdicts compared with the serving
/// version's, on the reviews this replica answered since the candidate
/// was loaded.
#[derive(Deserialize, Serialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AdmissionShadowStatus {
    /// Reviews the candidate answered beside the serving version.
    #[serde(default)]
    pub reviews: u64,
    /// Of those, answered exactly as the serving version did.
    #[serde(default)]
    pub identical: u64,
    /// The candidate would have denied what the serving version admitted.
    #[serde(default)]
    pub would_deny: u64,
    /// The candidate would have admitted what the serving version denied.
    #[serde(default)]
    pub would_allow: u64,
    /// Both admitted or both denied, with other messages, warnings or
    /// defaults.
    #[serde(default)]
    pub differs: u64,
    /// The candidate's call failed (trap, timeout, memory).
    #[serde(default)]
    pub failed: u64,
    /// Reviews not shadowed: too many shadow calls in flight.
    #[serde(default)]
    pub dropped: u64,
    /// The last few differences (this replica's).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent: Vec<crate::telemetry::metrics::AdmissionDivergence>,
}

fn free_form(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

/// Why a granted permission is not one.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// A name in a list of clusters is not a string.
    #[error("cluster name {0} is not a string")]
    ClusterName(String),
    /// `clusters` is neither a keyword nor a list of names.
    #[error("clusters must be Primary, All, Others or a list of names, not {0}")]
    Clusters(String),
}

impl GrantedPermission {
    /// The grant as a permission of the vocabulary.
    ///
    /// # Errors
    /// A cluster set that is neither a keyword nor a list of names.
    pub fn to_permission(&self) -> Result<Permission, GrantError> {
        let (group, version) = match self.resource.api_version.split_once('/') {
            Some((g, v)) => (g.to_owned(), v.to_owned()),
            None => (String::new(), self.resource.api_version.clone()),
        };
        let clusters = match &self.clusters {
            Value::String(s) if s == "Primary" => ClusterSet::Primary,
            Value::String(s) if s == "All" => ClusterSet::All,
            Value::String(s) if s == "Others" => ClusterSet::Others,
            Value::Array(names) => ClusterSet::Named(
                names
                    .iter()
                    .map(|n| {
                        n.as_str()
                            .map(str::to_owned)
                            .ok_or_else(|| GrantError::ClusterName(n.to_string()))
                    })
                    .collect::<Result<_, _>>()?,
            ),
            other => {
                return Err(GrantError::Clusters(other.to_string()));
            }
        };
        Ok(Permission {
            resource: Resource {
                group,
                version,
                kind: self.resource.kind.clone(),
                plural: self.resource.plural.clone(),
                scope: match self.resource.scope.as_deref() {
                    Some("Cluster") => Scope::Cluster,
                    _ => Scope::Namespaced,
                },
            },
            verbs: self.verbs.clone(),
            status: self.subresources.iter().any(|s| s == "status"),
            clusters,
        })
    }
}

/// What of `declared` the grant does not cover, one line each (empty: all
/// covered). A declared verb is covered by a granted permission on the same
/// resource type (group and kind) with that verb (or `*`), the status
/// subresource when declared, and a cluster set that contains the declared
/// one.
#[must_use]
pub fn exceeding(declared: &[Permission], grant: &[Permission]) -> Vec<String> {
    let mut out = Vec::new();
    for p in declared {
        for verb in &p.verbs {
            let covered = grant.iter().any(|g| {
                crate::action::resource::same_resource(&g.resource, &p.resource)
                    && g.verbs.iter().any(|v| v == verb || v == "*")
                    && (!p.status || g.status)
                    && set_contains(&g.clusters, &p.clusters)
            });
            if !covered {
                let status = if p.status { " (and its status)" } else { "" };
                out.push(format!(
                    "{verb} on {}{status} in {}",
                    crate::action::describe_resource(&p.resource),
                    describe_set(&p.clusters)
                ));
            }
        }
    }
    out
}

/// Whether every cluster `inner` can name is in `outer`, whatever clusters
/// are engaged.
fn set_contains(outer: &ClusterSet, inner: &ClusterSet) -> bool {
    match (outer, inner) {
        (ClusterSet::All, _) => true,
        (ClusterSet::Primary, ClusterSet::Primary) | (ClusterSet::Others, ClusterSet::Others) => {
            true
        }
        (ClusterSet::Named(o), ClusterSet::Named(i)) => i.iter().all(|n| o.contains(n)),
        _ => false,
    }
}

fn describe_set(set: &ClusterSet) -> String {
    match set {
        ClusterSet::Primary => "the primary cluster".to_owned(),
        ClusterSet::All => "every cluster".to_owned(),
        ClusterSet::Others => "every cluster but the primary".to_owned(),
        ClusterSet::Named(n) => format!("clusters {}", n.join(", ")),
    }
}

/// The conditions of a status, by type.
#[must_use]
pub fn condition<'a>(status: &'a PluginObjectStatus, kind: &str) -> Option<&'a Condition> {
    status.conditions.iter().find(|c| c.type_ == kind)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::CustomResourceExt;

    fn perm(kind: &str, verbs: &[&str], status: bool, clusters: ClusterSet) -> Permission {
        Permission {
            resource: Resource {
                group: String::new(),
                version: "v1".into(),
                kind: kind.into(),
                plural: String::new(),
                scope: Scope::Cluster,
            },
            verbs: verbs.iter().map(|v| (*v).to_owned()).collect(),
            status,
            clusters,
        }
    }

    #[test]
    fn the_crd_has_the_fixed_names() {
        let crd = serde_json::to_value(Plugin::crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "plugins.rekon.dev");
        assert_eq!(crd["spec"]["scope"], "Cluster");
        let version = &crd["spec"]["versions"][0];
        assert_eq!(version["name"], "v1alpha1");
        let spec = &version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
        for field in [
            "module",
            "settings",
            "shadow",
            "permissions",
            "suspend",
            "verification",
        ] {
            assert!(spec.get(field).is_some(), "spec.{field} missing: {spec}");
        }
        let verification = &spec["verification"]["properties"];
        for field in ["keys", "minimumMatches", "annotations"] {
            assert!(
                verification.get(field).is_some(),
                "spec.verification.{field} missing: {verification}"
            );
        }
        let key = &verification["keys"]["items"]["properties"];
        for field in ["secretRef", "configMapRef", "pem"] {
            assert!(key.get(field).is_some(), "a key's {field} missing: {key}");
        }
        assert!(spec["shadow"]["properties"].get("module").is_some());
        let status = &version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"];
        assert!(status["shadow"]["properties"].get("divergences").is_some());
        assert_eq!(version["subresources"]["status"], serde_json::json!({}));
        let columns: Vec<&str> = version["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                "Module",
                "Digest",
                "Ready",
                "Consistent",
                "Divergences",
                "Age"
            ]
        );
    }

    #[test]
    fn grants_parse_from_the_inspect_shape() {
        let g: GrantedPermission = serde_json::from_value(serde_json::json!({
            "resource": {"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass", "scope": "Cluster"},
            "verbs": ["get", "patch"],
            "subresources": ["status"],
            "clusters": ["main", "edge"],
        }))
        .unwrap();
        let p = g.to_permission().unwrap();
        assert_eq!(p.resource.group, "node.k8s.io");
        assert!(p.status);
        assert_eq!(
            p.clusters,
            ClusterSet::Named(vec!["main".into(), "edge".into()])
        );
        let bad = GrantedPermission {
            clusters: serde_json::json!(3),
            ..g
        };
        assert!(bad.to_permission().is_err());
    }

    #[test]
    fn a_grant_covers_only_what_it_names() {
        let grant = vec![
            perm(
                "Node",
                &["get", "list", "watch", "patch"],
                false,
                ClusterSet::Primary,
            ),
            perm("ConfigMap", &["*"], true, ClusterSet::All),
        ];
        assert!(
            exceeding(
                &[perm("Node", &["patch"], false, ClusterSet::Primary)],
                &grant
            )
            .is_empty()
        );
        assert!(
            exceeding(
                &[perm("ConfigMap", &["delete"], true, ClusterSet::Others)],
                &grant
            )
            .is_empty()
        );
        assert_eq!(
            exceeding(
                &[perm(
                    "Node",
                    &["patch", "delete"],
                    false,
                    ClusterSet::Primary
                )],
                &grant
            ),
            ["delete on Node in the primary cluster"]
        );
        assert_eq!(
            exceeding(
                &[perm("Node", &["patch"], true, ClusterSet::Primary)],
                &grant
            ),
            ["patch on Node (and its status) in the primary cluster"]
        );
        assert_eq!(
            exceeding(&[perm("Node", &["get"], false, ClusterSet::All)], &grant),
            ["get on Node in every cluster"]
        );
        assert_eq!(
            exceeding(
                &[perm("Secret", &["get"], false, ClusterSet::Primary)],
                &grant
            ),
            ["get on Secret in the primary cluster"]
        );
    }
}
