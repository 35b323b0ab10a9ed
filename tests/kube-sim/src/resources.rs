//! The resource registry: built-in kinds, custom resources registered from
//! CRDs, and the legacy discovery documents built from them.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};

use serde_json::{Value, json};

use crate::patch::TypeInfo;

/// How an object of one resource is stored and served.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// API group, empty for core.
    pub group: String,
    /// Version served at this endpoint.
    pub version: String,
    /// Version objects are stored in (apiVersion of stored objects).
    pub storage_version: String,
    /// Plural resource name (URL segment).
    pub plural: String,
    /// Singular name.
    pub singular: String,
    /// Kind.
    pub kind: String,
    /// List kind.
    pub list_kind: String,
    /// Namespaced or cluster-scoped.
    pub namespaced: bool,
    /// Short names for discovery.
    pub short_names: Vec<String>,
    /// Categories for discovery.
    pub categories: Vec<String>,
    /// Has a `/status` subresource.
    pub status_subresource: bool,
    /// Built-in kind (strategic merge patch allowed).
    pub builtin: bool,
    /// Whether and when `metadata.generation` is maintained.
    pub generation: Generation,
    /// `.status` is dropped on create (the strategy's PrepareForCreate
    /// resets it; defaulting may then fill it in again).
    pub drop_status_on_create: bool,
    /// A DELETE that removes the object answers with the object rather
    /// than a `Status` (the registry's `ReturnDeletedObject`; the OpenAPI
    /// spec's delete operation names the kind as its 200 response).
    pub delete_returns_object: bool,
    /// Structural schema of a custom resource version.
    pub schema: Option<Arc<Value>>,
    /// Representation conversion needed between stored and served objects.
    pub conversion: Conversion,
    /// A CRD's `spec.conversion.webhook` when its strategy is `Webhook`
    /// (`clientConfig`, `conversionReviewVersions`): objects of another
    /// version than the storage version are converted by calling it
    /// (`admission::webhook::conversion`).
    pub conversion_webhook: Option<Arc<Value>>,
    /// A CRD version's `additionalPrinterColumns`.
    pub printer_columns: Option<Arc<Value>>,
    /// The `/scale` subresource (autoscaling/v1 Scale), if served.
    pub scale: Option<Arc<ScalePaths>>,
    /// List semantics for patches and apply, built on first use.
    type_info: Arc<OnceLock<TypeInfo>>,
    /// A built-in's OpenAPI schema (a `$ref`), looked up on first use.
    pub(crate) builtin_schema: Arc<OnceLock<Option<&'static Value>>>,
    /// A custom resource version's `x-kubernetes-validations`, compiled on
    /// first use.
    crd_rules: Arc<OnceLock<Option<crate::admission::crd_rules::Rules>>>,
}

/// Where a resource keeps what its `/scale` subresource shows: JSON paths
/// in the `.spec.replicas` form of a CRD's `subresources.scale`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScalePaths {
    /// `specReplicasPath`.
    pub spec_replicas: String,
    /// `statusReplicasPath`.
    pub status_replicas: String,
    /// `labelSelectorPath`: a string field for CRDs; for built-ins the
    /// `.spec.selector` LabelSelector (or RC map) formatted as a string.
    pub label_selector: Option<String>,
}

impl ScalePaths {
    /// The built-in workloads' paths.
    fn builtin() -> Self {
        Self {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".spec.selector".into()),
        }
    }
}

/// How a resource maintains `metadata.generation`: set to 1 on create and
/// bumped by an update that changes the desired state, as the REST
/// strategies' `PrepareForCreate` / `PrepareForUpdate` do
/// (`pkg/registry/<group>/<kind>/strategy.go`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generation {
    /// Not maintained: the object has no `metadata.generation`.
    None,
    /// Bumped when anything but `metadata` changes (and `status`, where
    /// a status subresource serves it): `!DeepEqual(old.Spec, new.Spec)`.
    Spec,
    /// [`Generation::Spec`], and bumped by an annotation change too
    /// (Deployment: its annotations are copied to its ReplicaSets).
    SpecOrAnnotations,
}

impl Generation {
    /// Whether `metadata.generation` is maintained at all.
    pub fn maintained(self) -> bool {
        self != Self::None
    }
}

/// Field conversion between storage and a served version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Conversion {
    /// Only `apiVersion` differs (if at all).
    None,
    /// events.k8s.io/v1 Event served from core v1 Event storage.
    EventsV1,
    /// autoscaling/v1 HorizontalPodAutoscaler served from autoscaling/v2
    /// storage (`targetCPUUtilizationPercentage` ↔ a cpu Resource metric).
    HpaV1,
}

impl ResourceInfo {
    /// `group/version` or `version` for core.
    pub fn api_version(&self) -> String {
        gv_string(&self.group, &self.version)
    }

    /// apiVersion of stored objects.
    pub fn storage_api_version(&self) -> String {
        if self.conversion == Conversion::EventsV1 {
            return "v1".into();
        }
        gv_string(&self.group, &self.storage_version)
    }

    /// Key of the object table shared by all versions of this resource.
    pub fn storage_key(&self) -> StorageKey {
        storage_key_of(&self.group, &self.plural)
    }

    /// How lists of this resource merge (strategic merge patch, apply).
    pub fn type_info(&self) -> &TypeInfo {
        self.type_info.get_or_init(|| {
            if self.builtin {
                TypeInfo::builtin(&self.api_version(), &self.kind)
                    .unwrap_or_else(TypeInfo::metadata_only)
            } else {
                match &self.schema {
                    Some(s) => TypeInfo::from_openapi_v3_schema(s),
                    None => TypeInfo::metadata_only(),
                }
            }
        })
    }

    /// The compiled `x-kubernetes-validations` of a custom resource
    /// version, if its schema has any.
    pub(crate) fn crd_rules(&self) -> Option<&crate::admission::crd_rules::Rules> {
        if self.builtin {
            return None;
        }
        self.crd_rules
            .get_or_init(|| {
                self.schema
                    .as_deref()
                    .and_then(crate::admission::crd_rules::Rules::compile)
            })
            .as_ref()
    }

    /// Whether objects served at this endpoint need rewriting from storage.
    pub fn needs_conversion(&self) -> bool {
        self.version != self.storage_version || self.conversion != Conversion::None
    }

    /// Whether objects at this version are converted to and from the
    /// storage version by the CRD's conversion webhook.
    pub fn webhook_converted(&self) -> bool {
        self.conversion_webhook.is_some() && self.version != self.storage_version
    }

    /// The apiVersion a write at this version carries until it is stored:
    /// the storage version's, unless a conversion webhook converts it
    /// (then the request's, until the conversion before storing).
    pub fn write_api_version(&self) -> String {
        if self.webhook_converted() {
            self.api_version()
        } else {
            self.storage_api_version()
        }
    }
}

/// Identifies the object table of a resource: `group/plural`.
pub type StorageKey = Arc<str>;

/// Builds a storage key.
pub fn storage_key_of(group: &str, plural: &str) -> StorageKey {
    // core v1 and events.k8s.io/v1 events share one table, as in Kubernetes.
    if plural == "events" && (group.is_empty() || group == "events.k8s.io") {
        return Arc::from("/events");
    }
    Arc::from(format!("{group}/{plural}"))
}

/// `group/version`, or `version` for the core group.
pub fn gv_string(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    }
}

/// Splits an apiVersion into (group, version).
pub fn split_api_version(av: &str) -> (&str, &str) {
    match av.split_once('/') {
        Some((g, v)) => (g, v),
        None => ("", av),
    }
}

struct Builtin {
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
    all: bool,
    status: bool,
    generation: Generation,
    drop_status: bool,
    scale: bool,
    deleted_object: bool,
}

const fn b(
    group: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
    short: &'static [&'static str],
) -> Builtin {
    Builtin {
        group,
        version: "v1",
        plural,
        kind,
        namespaced,
        short,
        all: false,
        status: false,
        generation: Generation::None,
        drop_status: false,
        scale: false,
        deleted_object: false,
    }
}

/// A workload: in `all`, a status subresource, status reset on create,
/// generation bumped by spec changes.
const fn workload(mut x: Builtin) -> Builtin {
    x.all = true;
    x.status = true;
    x.generation = Generation::Spec;
    x.drop_status = true;
    x
}

/// A status subresource whose status a create keeps (Node: "Nodes allow
/// *all* fields, including status, to be set on create").
const fn with_status(mut x: Builtin) -> Builtin {
    x.status = true;
    x
}

/// A status subresource whose status the strategy's PrepareForCreate
/// resets (`obj.Status = XStatus{}`), leaving what defaulting fills in.
const fn with_reset_status(mut x: Builtin) -> Builtin {
    x.status = true;
    x.drop_status = true;
    x
}

/// `Generation = 1` on create, bumped by spec changes.
const fn with_generation(mut x: Builtin) -> Builtin {
    x.generation = Generation::Spec;
    x
}

/// A DELETE answers with the deleted object (`ReturnDeletedObject: true`).
const fn returns_deleted(mut x: Builtin) -> Builtin {
    x.deleted_object = true;
    x
}

const fn with_scale(mut x: Builtin) -> Builtin {
    x.scale = true;
    x
}

const fn version(mut x: Builtin, v: &'static str) -> Builtin {
    x.version = v;
    x
}

const BUILTINS: &[Builtin] = &[
    // PrepareForCreate: `Status{Phase: Active}`; SetDefaults_NamespaceStatus
    // fills the phase in again after the reset.
    with_reset_status(b("", "namespaces", "Namespace", false, &["ns"])),
    with_status(b("", "nodes", "Node", false, &["no"])),
    b("", "configmaps", "ConfigMap", true, &["cm"]),
    b("", "secrets", "Secret", true, &[]),
    // PrepareForCreate: `Status{Phase: Pending, QOSClass: GetPodQOS(pod)}`,
    // `Generation = 1`; updatePodGeneration bumps on spec changes.
    returns_deleted(workload(b("", "pods", "Pod", true, &["po"]))),
    {
        let mut s = returns_deleted(with_reset_status(b(
            "",
            "services",
            "Service",
            true,
            &["svc"],
        )));
        s.all = true;
        s
    },
    returns_deleted(b("", "serviceaccounts", "ServiceAccount", true, &["sa"])),
    b("", "events", "Event", true, &["ev"]),
    b("", "endpoints", "Endpoints", true, &["ep"]),
    returns_deleted(with_reset_status(b(
        "",
        "persistentvolumeclaims",
        "PersistentVolumeClaim",
        true,
        &["pvc"],
    ))),
    b("events.k8s.io", "events", "Event", true, &["ev"]),
    b("coordination.k8s.io", "leases", "Lease", true, &[]),
    {
        let mut d = with_scale(workload(b(
            "apps",
            "deployments",
            "Deployment",
            true,
            &["deploy"],
        )));
        d.generation = Generation::SpecOrAnnotations;
        d
    },
    with_scale(workload(b(
        "apps",
        "replicasets",
        "ReplicaSet",
        true,
        &["rs"],
    ))),
    with_scale(workload(b(
        "apps",
        "statefulsets",
        "StatefulSet",
        true,
        &["sts"],
    ))),
    workload(b("apps", "daemonsets", "DaemonSet", true, &["ds"])),
    workload(b("batch", "jobs", "Job", true, &[])),
    workload(b("batch", "cronjobs", "CronJob", true, &["cj"])),
    b("node.k8s.io", "runtimeclasses", "RuntimeClass", false, &[]),
    {
        let mut c = with_status(b(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            "CustomResourceDefinition",
            false,
            &["crd", "crds"],
        ));
        c.generation = Generation::Spec;
        c
    },
    with_scale(workload(b(
        "",
        "replicationcontrollers",
        "ReplicationController",
        true,
        &["rc"],
    ))),
    // PrepareForCreate: `Status = PersistentVolumeStatus{}`, then
    // `Phase: Pending` and `LastPhaseTransitionTime: now`.
    returns_deleted(with_reset_status(b(
        "",
        "persistentvolumes",
        "PersistentVolume",
        false,
        &["pv"],
    ))),
    returns_deleted(b("", "podtemplates", "PodTemplate", true, &[])),
    b("", "limitranges", "LimitRange", true, &["limits"]),
    // PrepareForCreate: `Status = ResourceQuotaStatus{}`.
    returns_deleted(with_reset_status(b(
        "",
        "resourcequotas",
        "ResourceQuota",
        true,
        &["quota"],
    ))),
    b(
        "discovery.k8s.io",
        "endpointslices",
        "EndpointSlice",
        true,
        &[],
    ),
    with_generation(with_reset_status(b(
        "networking.k8s.io",
        "ingresses",
        "Ingress",
        true,
        &["ing"],
    ))),
    b(
        "networking.k8s.io",
        "networkpolicies",
        "NetworkPolicy",
        true,
        &["netpol"],
    ),
    b(
        "networking.k8s.io",
        "ingressclasses",
        "IngressClass",
        false,
        &[],
    ),
    with_generation(with_reset_status(b(
        "policy",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
        &["pdb"],
    ))),
    {
        let mut h = workload(version(
            b(
                "autoscaling",
                "horizontalpodautoscalers",
                "HorizontalPodAutoscaler",
                true,
                &["hpa"],
            ),
            "v2",
        ));
        // The HPAGeneration feature gate (off by default) would set it.
        h.generation = Generation::None;
        h
    },
    {
        let mut h = workload(b(
            "autoscaling",
            "horizontalpodautoscalers",
            "HorizontalPodAutoscaler",
            true,
            &["hpa"],
        ));
        // The HPAGeneration feature gate (off by default) would set it.
        h.generation = Generation::None;
        h
    },
    with_status(b(
        "apiregistration.k8s.io",
        "apiservices",
        "APIService",
        false,
        &[],
    )),
    b(
        "scheduling.k8s.io",
        "priorityclasses",
        "PriorityClass",
        false,
        &["pc"],
    ),
    returns_deleted(b(
        "storage.k8s.io",
        "storageclasses",
        "StorageClass",
        false,
        &["sc"],
    )),
    // PrepareForCreate resets the status (`Status = ...Status{}`) and sets
    // `Generation = 1`; spec changes bump it.
    with_generation(with_reset_status(b(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicies",
        "ValidatingAdmissionPolicy",
        false,
        &[],
    ))),
    with_generation(b(
        "admissionregistration.k8s.io",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
        false,
        &[],
    )),
    // Webhook configurations: the admission chain reads them
    // (src/admission/webhook). Their strategies set `Generation = 1` and
    // bump it when `webhooks` change.
    with_generation(b(
        "admissionregistration.k8s.io",
        "mutatingwebhookconfigurations",
        "MutatingWebhookConfiguration",
        false,
        &[],
    )),
    with_generation(b(
        "admissionregistration.k8s.io",
        "validatingwebhookconfigurations",
        "ValidatingWebhookConfiguration",
        false,
        &[],
    )),
    b("rbac.authorization.k8s.io", "roles", "Role", true, &[]),
    b(
        "rbac.authorization.k8s.io",
        "rolebindings",
        "RoleBinding",
        true,
        &[],
    ),
    b(
        "rbac.authorization.k8s.io",
        "clusterroles",
        "ClusterRole",
        false,
        &[],
    ),
    b(
        "rbac.authorization.k8s.io",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
        &[],
    ),
];

/// Resources a cluster serves, keyed by (group, version, plural).
#[derive(Debug, Clone, Default)]
pub struct Registry {
    by_gvr: BTreeMap<(String, String, String), Arc<ResourceInfo>>,
    /// CRD name -> the (group, version, plural) keys it registered.
    crds: BTreeMap<String, Vec<(String, String, String)>>,
}

impl Registry {
    /// The built-in resources.
    pub fn builtin() -> Self {
        let mut r = Self::default();
        for x in BUILTINS {
            let info = ResourceInfo {
                group: x.group.into(),
                version: x.version.into(),
                storage_version: if x.kind == "HorizontalPodAutoscaler" {
                    "v2".into()
                } else {
                    x.version.into()
                },
                plural: x.plural.into(),
                singular: x.kind.to_lowercase(),
                kind: x.kind.into(),
                list_kind: format!("{}List", x.kind),
                namespaced: x.namespaced,
                short_names: x.short.iter().map(|s| s.to_string()).collect(),
                categories: if x.all { vec!["all".into()] } else { vec![] },
                status_subresource: x.status,
                builtin: true,
                generation: x.generation,
                drop_status_on_create: x.drop_status,
                delete_returns_object: x.deleted_object,
                schema: None,
                conversion: match (x.group, x.version, x.kind) {
                    ("events.k8s.io", _, _) => Conversion::EventsV1,
                    ("autoscaling", "v1", "HorizontalPodAutoscaler") => Conversion::HpaV1,
                    _ => Conversion::None,
                },
                conversion_webhook: None,
                type_info: Arc::default(),
                builtin_schema: Arc::default(),
                crd_rules: Arc::default(),
                printer_columns: None,
                scale: x.scale.then(|| Arc::new(ScalePaths::builtin())),
            };
            r.insert(info);
        }
        r
    }

    fn insert(&mut self, info: ResourceInfo) {
        let key = (
            info.group.clone(),
            info.version.clone(),
            info.plural.clone(),
        );
        self.by_gvr.insert(key, Arc::new(info));
    }

    /// Looks a resource up by its URL parts.
    pub fn get(&self, group: &str, version: &str, plural: &str) -> Option<Arc<ResourceInfo>> {
        self.by_gvr
            .get(&(group.to_string(), version.to_string(), plural.to_string()))
            .cloned()
    }

    /// The resource serving `apiVersion`/`kind`, if any.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<Arc<ResourceInfo>> {
        let (g, v) = split_api_version(api_version);
        self.by_gvr
            .values()
            .find(|r| r.group == g && r.version == v && r.kind == kind)
            .cloned()
    }

    /// Every served resource.
    pub fn all(&self) -> Vec<Arc<ResourceInfo>> {
        self.by_gvr.values().cloned().collect()
    }

    /// Changes whenever the set of served resources changes (OpenAPI
    /// document URLs carry it, so clients' caches refresh).
    pub fn generation_hash(&self) -> String {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for (k, r) in &self.by_gvr {
            k.hash(&mut h);
            r.schema.as_deref().map(Value::to_string).hash(&mut h);
        }
        format!("{:016X}", h.finish())
    }

    /// Whether any resource is served at `group/version`.
    pub fn has_group_version(&self, group: &str, version: &str) -> bool {
        self.by_gvr
            .keys()
            .any(|(g, v, _)| g == group && v == version)
    }

    /// All resources with the given storage key (every served version).
    pub fn storage_versions(&self, sk: &StorageKey) -> Vec<Arc<ResourceInfo>> {
        self.by_gvr
            .values()
            .filter(|r| &r.storage_key() == sk)
            .cloned()
            .collect()
    }

    /// The resource to use when working on stored objects of a storage key
    /// (its storage version).
    pub fn storage_info(&self, sk: &StorageKey) -> Option<Arc<ResourceInfo>> {
        let all = self.storage_versions(sk);
        all.iter()
            .find(|r| r.version == r.storage_version && r.conversion == Conversion::None)
            .or(all.first())
            .cloned()
    }

    /// Whether the CRD `name` is registered.
    pub fn has_crd(&self, name: &str) -> bool {
        self.crds.contains_key(name)
    }

    /// Registers (or re-registers) the resources of a CRD object. Returns
    /// the storage key, or a validation message.
    pub fn register_crd(&mut self, crd: &Value) -> Result<StorageKey, String> {
        let infos = crd_resources(crd)?;
        let name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        self.unregister_crd(&name);
        let sk = infos[0].storage_key();
        let keys = infos
            .iter()
            .map(|i| (i.group.clone(), i.version.clone(), i.plural.clone()))
            .collect();
        for i in infos {
            self.insert(i);
        }
        self.crds.insert(name, keys);
        Ok(sk)
    }

    /// The storage key of a registered CRD's objects.
    pub fn get_crd_storage_key(&self, name: &str) -> Option<StorageKey> {
        self.crds
            .get(name)
            .and_then(|keys| keys.first())
            .map(|(g, _, p)| storage_key_of(g, p))
    }

    /// Removes the endpoints of a CRD.
    pub fn unregister_crd(&mut self, name: &str) {
        if let Some(keys) = self.crds.remove(name) {
            for k in keys {
                self.by_gvr.remove(&k);
            }
        }
    }

    /// Groups in discovery order: (group, versions in preference order).
    pub fn groups(&self) -> Vec<(String, Vec<String>)> {
        let mut out: Vec<(String, Vec<String>)> = Vec::new();
        for (g, v, _) in self.by_gvr.keys() {
            if g.is_empty() {
                continue;
            }
            match out.iter_mut().find(|(gg, _)| gg == g) {
                Some((_, vs)) => {
                    if !vs.contains(v) {
                        vs.push(v.clone());
                    }
                }
                None => out.push((g.clone(), vec![v.clone()])),
            }
        }
        for (_, vs) in &mut out {
            vs.sort_by_key(|v| std::cmp::Reverse(version_priority(v)));
        }
        // Built-in groups first, as the apiserver lists them.
        out.sort_by_key(|(g, _)| (!BUILTINS.iter().any(|b| b.group == g), g.clone()));
        out
    }

    /// `/apis` APIGroupList.
    pub fn api_group_list(&self) -> Value {
        let groups: Vec<Value> = self
            .groups()
            .into_iter()
            .map(|(g, vs)| group_json(&g, &vs))
            .collect();
        json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
    }

    /// `/apis/{group}` APIGroup.
    pub fn api_group(&self, group: &str) -> Option<Value> {
        self.groups()
            .into_iter()
            .find(|(g, _)| g == group)
            .map(|(g, vs)| {
                let mut v = group_json(&g, &vs);
                if let Some(o) = v.as_object_mut() {
                    o.insert("kind".into(), "APIGroup".into());
                    o.insert("apiVersion".into(), "v1".into());
                }
                v
            })
    }

    /// `/api/v1` or `/apis/g/v` APIResourceList.
    pub fn api_resource_list(&self, group: &str, version: &str) -> Option<Value> {
        if !self.has_group_version(group, version) {
            return None;
        }
        let verbs = json!([
            "create",
            "delete",
            "deletecollection",
            "get",
            "list",
            "patch",
            "update",
            "watch"
        ]);
        let mut resources = Vec::new();
        for r in self
            .by_gvr
            .values()
            .filter(|r| r.group == group && r.version == version)
        {
            let mut o = serde_json::Map::new();
            o.insert("name".into(), r.plural.clone().into());
            o.insert("singularName".into(), r.singular.clone().into());
            o.insert("namespaced".into(), r.namespaced.into());
            o.insert("kind".into(), r.kind.clone().into());
            o.insert("verbs".into(), verbs.clone());
            if !r.short_names.is_empty() {
                o.insert("shortNames".into(), json!(r.short_names));
            }
            if !r.categories.is_empty() {
                o.insert("categories".into(), json!(r.categories));
            }
            resources.push(Value::Object(o));
            if r.status_subresource {
                resources.push(json!({
                    "name": format!("{}/status", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "kind": r.kind,
                    "verbs": ["get", "patch", "update"],
                }));
            }
            if r.scale.is_some() {
                resources.push(json!({
                    "name": format!("{}/scale", r.plural),
                    "singularName": "",
                    "namespaced": r.namespaced,
                    "group": "autoscaling",
                    "version": "v1",
                    "kind": "Scale",
                    "verbs": ["get", "patch", "update"],
                }));
            }
        }
        Some(json!({
            "kind": "APIResourceList",
            "apiVersion": "v1",
            "groupVersion": gv_string(group, version),
            "resources": resources,
        }))
    }
}

fn group_json(g: &str, vs: &[String]) -> Value {
    let versions: Vec<Value> = vs
        .iter()
        .map(|v| json!({"groupVersion": gv_string(g, v), "version": v}))
        .collect();
    let preferred = versions.first().cloned().unwrap_or(Value::Null);
    json!({"name": g, "versions": versions, "preferredVersion": preferred})
}

/// Kubernetes version priority: GA > beta > alpha > others, higher numbers first.
pub fn version_priority(v: &str) -> (u8, u64, u64) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u64>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    if tail.is_empty() {
        return (3, major, 0);
    }
    let (level, num) = if let Some(n) = tail.strip_prefix("beta") {
        (2, n)
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n)
    } else {
        return (0, 0, 0);
    };
    match num.parse::<u64>() {
        Ok(n) => (level, major, n),
        Err(_) => (0, 0, 0),
    }
}

/// Builds one [`ResourceInfo`] per served version of a CRD object.
pub fn crd_resources(crd: &Value) -> Result<Vec<ResourceInfo>, String> {
    let spec = crd.get("spec").ok_or("spec: Required value")?;
    let group = spec
        .get("group")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("spec.group: Required value")?;
    let names = spec.get("names").ok_or("spec.names: Required value")?;
    let plural = names
        .get("plural")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("spec.names.plural: Required value")?;
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .filter(|s| !s.is_empty())
        .ok_or("spec.names.kind: Required value")?;
    let singular = names
        .get("singular")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| kind.to_lowercase());
    let list_kind = names
        .get("listKind")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("{kind}List"));
    let strs = crate::store::strings;
    let name = crd
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    if name != format!("{plural}.{group}") {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be spec.names.plural+\".\"+spec.group"
        ));
    }
    let namespaced = match spec.get("scope").and_then(Value::as_str) {
        Some("Namespaced") => true,
        Some("Cluster") => false,
        _ => return Err("spec.scope: Unsupported value: must be Cluster or Namespaced".into()),
    };
    let versions = spec
        .get("versions")
        .and_then(Value::as_array)
        .filter(|v| !v.is_empty())
        .ok_or(
            "spec.versions: Invalid value: must have exactly one version marked as storage version",
        )?;
    let storage: Vec<&str> = versions
        .iter()
        .filter(|v| v.get("storage").and_then(Value::as_bool) == Some(true))
        .filter_map(|v| v.get("name").and_then(Value::as_str))
        .collect();
    if storage.len() != 1 {
        return Err(
            "spec.versions: Invalid value: must have exactly one version marked as storage version"
                .into(),
        );
    }
    let storage_version = storage[0].to_string();
    let conversion_webhook = crate::admission::webhook::conversion::crd_webhook(spec)?;
    let mut out = Vec::new();
    for v in versions {
        let Some(vname) = v.get("name").and_then(Value::as_str) else {
            return Err("spec.versions[].name: Required value".into());
        };
        if v.get("served").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let status = v.pointer("/subresources/status").is_some()
            || spec.pointer("/subresources/status").is_some();
        let schema = v
            .pointer("/schema/openAPIV3Schema")
            .or_else(|| spec.pointer("/validation/openAPIV3Schema"))
            .cloned()
            .map(Arc::new);
        out.push(ResourceInfo {
            group: group.into(),
            version: vname.into(),
            storage_version: storage_version.clone(),
            plural: plural.into(),
            singular: singular.clone(),
            kind: kind.into(),
            list_kind: list_kind.clone(),
            namespaced,
            short_names: strs(names.get("shortNames")),
            categories: strs(names.get("categories")),
            status_subresource: status,
            builtin: false,
            generation: Generation::Spec,
            drop_status_on_create: status,
            delete_returns_object: false,
            schema,
            conversion: Conversion::None,
            conversion_webhook: conversion_webhook.clone(),
            type_info: Arc::default(),
            builtin_schema: Arc::default(),
            crd_rules: Arc::default(),
            printer_columns: v.get("additionalPrinterColumns").cloned().map(Arc::new),
            scale: v
                .pointer("/subresources/scale")
                .or_else(|| spec.pointer("/subresources/scale"))
                .map(|sc| {
                    let path = |k: &str| sc.get(k).and_then(Value::as_str).map(str::to_string);
                    Arc::new(ScalePaths {
                        spec_replicas: path("specReplicasPath").unwrap_or_default(),
                        status_replicas: path("statusReplicasPath").unwrap_or_default(),
                        label_selector: path("labelSelectorPath"),
                    })
                }),
        });
    }
    if out.is_empty() {
        return Err("spec.versions: Invalid value: at least one version must be served".into());
    }
    Ok(out)
}

/// Renames between core v1 Event fields and events.k8s.io/v1 Event fields.
const EVENT_RENAMES: &[(&str, &str)] = &[
    ("involvedObject", "regarding"),
    ("message", "note"),
    ("reportingComponent", "reportingController"),
    ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"),
    ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"),
];

/// Converts a stored object to the representation served by `res`.
pub fn to_served(res: &ResourceInfo, obj: &Value) -> Value {
    let mut out = obj.clone();
    if res.conversion == Conversion::HpaV1 {
        hpa_v2_to_v1(&mut out);
        // v1's `currentReplicas` has no `omitempty`; v2's has.
        crate::defaults::encode_status(&res.group, &res.version, &res.kind, &mut out);
    }
    if let Some(o) = out.as_object_mut() {
        o.insert("apiVersion".into(), res.api_version().into());
        if res.conversion == Conversion::EventsV1 {
            for (core, v1) in EVENT_RENAMES {
                if let Some(x) = o.remove(*core) {
                    o.insert((*v1).to_string(), x);
                }
            }
        }
    }
    out
}

/// Converts an object written at `res` into its stored representation
/// (a webhook-converted version keeps its own until the conversion point
/// before storing).
pub fn to_storage(res: &ResourceInfo, obj: &mut Value) {
    if res.conversion == Conversion::HpaV1 {
        hpa_v1_to_v2(obj);
    }
    if let Some(o) = obj.as_object_mut() {
        o.insert("apiVersion".into(), res.write_api_version().into());
        if res.conversion == Conversion::EventsV1 {
            for (core, v1) in EVENT_RENAMES {
                if let Some(x) = o.remove(*v1) {
                    o.insert((*core).to_string(), x);
                }
            }
        }
    }
}

/// The cpu Resource metric that stands for v1's CPU utilization fields.
fn is_cpu_metric(m: &Value) -> bool {
    m["type"] == "Resource" && m.pointer("/resource/name") == Some(&json!("cpu"))
}

/// autoscaling/v1 → v2: `targetCPUUtilizationPercentage` becomes a cpu
/// Resource metric, `currentCPUUtilizationPercentage` a current metric.
fn hpa_v1_to_v2(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut)
        && let Some(t) = spec.remove("targetCPUUtilizationPercentage")
        && !t.is_null()
    {
        spec.insert(
            "metrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": t}}}]),
        );
    }
    if let Some(st) = obj.get_mut("status").and_then(Value::as_object_mut)
        && let Some(c) = st.remove("currentCPUUtilizationPercentage")
        && !c.is_null()
    {
        st.insert(
            "currentMetrics".into(),
            json!([{"type": "Resource", "resource": {"name": "cpu",
                "current": {"averageUtilization": c}}}]),
        );
    }
}

/// autoscaling/v2 → v1: the inverse of [`hpa_v1_to_v2`]; what v1 cannot
/// express (other metrics, behavior, conditions) is not shown.
fn hpa_v2_to_v1(obj: &mut Value) {
    if let Some(spec) = obj.get_mut("spec").and_then(Value::as_object_mut) {
        let cpu = spec
            .remove("metrics")
            .and_then(|m| {
                m.as_array()
                    .and_then(|a| a.iter().find(|m| is_cpu_metric(m)).cloned())
            })
            .and_then(|m| m.pointer("/resource/target/averageUtilization").cloned());
        spec.remove("behavior");
        if let Some(c) = cpu {
            spec.insert("targetCPUUtilizationPercentage".into(), c);
        }
    }
    if let Some(st) = obj.get_mut("status").and_then(Value::as_object_mut) {
        let cpu = st
            .remove("currentMetrics")
            .and_then(|m| {
                m.as_array()
                    .and_then(|a| a.iter().find(|m| is_cpu_metric(m)).cloned())
            })
            .and_then(|m| m.pointer("/resource/current/averageUtilization").cloned());
        st.remove("conditions");
        if let Some(c) = cpu {
            st.insert("currentCPUUtilizationPercentage".into(), c);
        }
    }
}

/// Drops fields a structural schema does not declare, unless
/// `x-kubernetes-preserve-unknown-fields` says otherwise. `apiVersion`,
/// `kind` and `metadata` at the root are kept.
pub fn prune(obj: &mut Value, schema: &Value) {
    prune_at(obj, schema, true);
}

fn prune_at(v: &mut Value, schema: &Value, root: bool) {
    let preserve = schema
        .get("x-kubernetes-preserve-unknown-fields")
        .and_then(Value::as_bool)
        == Some(true);
    let embedded = schema
        .get("x-kubernetes-embedded-resource")
        .and_then(Value::as_bool)
        == Some(true);
    match v {
        Value::Object(map) => {
            let props = schema.get("properties").and_then(Value::as_object);
            let additional = schema.get("additionalProperties");
            let keys: Vec<String> = map.keys().cloned().collect();
            for k in keys {
                if (root || embedded) && (k == "apiVersion" || k == "kind" || k == "metadata") {
                    continue;
                }
                if let Some(sub) = props.and_then(|p| p.get(&k)) {
                    if let Some(x) = map.get_mut(&k) {
                        prune_at(x, sub, false);
                    }
                } else if let Some(add) = additional {
                    match add {
                        Value::Bool(false) if !preserve => {
                            map.remove(&k);
                        }
                        Value::Object(_) => {
                            if let Some(x) = map.get_mut(&k) {
                                prune_at(x, add, false);
                            }
                        }
                        _ => {}
                    }
                } else if !preserve {
                    map.remove(&k);
                }
            }
        }
        Value::Array(items) => {
            if let Some(item_schema) = schema.get("items") {
                for x in items {
                    prune_at(x, item_schema, false);
                }
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_priority_orders_like_kubernetes() {
        let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "foo"];
        v.sort_by_key(|x| std::cmp::Reverse(version_priority(x)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }

    #[test]
    fn event_conversion_round_trips() {
        let reg = Registry::builtin();
        let ev1 = reg.get("events.k8s.io", "v1", "events").unwrap();
        let mut obj = json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "note": "hi", "regarding": {"name": "x"}});
        to_storage(&ev1, &mut obj);
        assert_eq!(obj["message"], "hi");
        assert_eq!(obj["apiVersion"], "v1");
        let back = to_served(&ev1, &obj);
        assert_eq!(back["note"], "hi");
        assert_eq!(back["regarding"]["name"], "x");
    }
}
