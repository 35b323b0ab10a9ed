//! OpenAPI documents (`/openapi/v2` as JSON, `/openapi/v3` and
//! `/openapi/v3/{api/v1|apis/g/v}`) and the schema lookups that strict
//! field validation uses.
//!
//! Built-in schemas come from k8s-openapi's `JsonSchema` implementations
//! (generated from the upstream OpenAPI spec, definition names such as
//! `io.k8s.api.apps.v1.Deployment`), rendered once per process. Custom
//! resources use their CRD's `openAPIV3Schema`. Each top-level schema
//! carries `x-kubernetes-group-version-kind`, which `kubectl explain` looks
//! up, and each resource gets paths whose operations list the query
//! parameters kubectl's query-parameter verifier checks for
//! (`fieldValidation`, `dryRun`, `fieldManager`), so kubectl leaves
//! validation to the server.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::OnceLock;

use k8s_openapi::api;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as apiext;
use k8s_openapi::kube_aggregator::pkg::apis::apiregistration::v1 as apireg;
use schemars::SchemaGenerator;
use serde_json::{Map, Value, json};

use crate::resources::{Registry, ResourceInfo};

/// Built-in definitions by name, and the root definition of each kind.
pub struct Builtins {
    /// `io.k8s...` name → schema (with `$ref`s to `#/components/schemas/`).
    pub defs: Map<String, Value>,
    /// (group, version, kind) → definition name.
    pub roots: BTreeMap<(String, String, String), String>,
    /// (group, version, kind) → `{"$ref": ...}` to the root definition.
    pub refs: BTreeMap<(String, String, String), Value>,
}

macro_rules! kinds {
    ($gen:ident, $roots:ident; $( ($g:literal, $v:literal, $k:literal, $t:ty) ),* $(,)?) => {
        $(
            let r = $gen.subschema_for::<$t>();
            if let Some(name) = r
                .get("$ref")
                .and_then(Value::as_str)
                .and_then(|s| s.rsplit('/').next())
            {
                $roots.insert(($g.to_string(), $v.to_string(), $k.to_string()), name.to_string());
            }
        )*
    };
}

/// The built-in schemas, rendered on first use.
pub fn builtins() -> &'static Builtins {
    static B: OnceLock<Builtins> = OnceLock::new();
    B.get_or_init(|| {
        let mut generator: SchemaGenerator =
            schemars::generate::SchemaSettings::openapi3().into_generator();
        let mut roots = BTreeMap::new();
        kinds!(generator, roots;
            ("", "v1", "Namespace", api::core::v1::Namespace),
            ("", "v1", "Node", api::core::v1::Node),
            ("", "v1", "ConfigMap", api::core::v1::ConfigMap),
            ("", "v1", "Secret", api::core::v1::Secret),
            ("", "v1", "Pod", api::core::v1::Pod),
            ("", "v1", "Service", api::core::v1::Service),
            ("", "v1", "ServiceAccount", api::core::v1::ServiceAccount),
            ("", "v1", "Event", api::core::v1::Event),
            ("", "v1", "Endpoints", api::core::v1::Endpoints),
            ("", "v1", "PersistentVolumeClaim", api::core::v1::PersistentVolumeClaim),
            ("", "v1", "PersistentVolume", api::core::v1::PersistentVolume),
            ("", "v1", "ReplicationController", api::core::v1::ReplicationController),
            ("", "v1", "PodTemplate", api::core::v1::PodTemplate),
            ("", "v1", "LimitRange", api::core::v1::LimitRange),
            ("", "v1", "ResourceQuota", api::core::v1::ResourceQuota),
            ("events.k8s.io", "v1", "Event", api::events::v1::Event),
            ("coordination.k8s.io", "v1", "Lease", api::coordination::v1::Lease),
            ("apps", "v1", "Deployment", api::apps::v1::Deployment),
            ("apps", "v1", "ReplicaSet", api::apps::v1::ReplicaSet),
            ("apps", "v1", "StatefulSet", api::apps::v1::StatefulSet),
            ("apps", "v1", "DaemonSet", api::apps::v1::DaemonSet),
            ("batch", "v1", "Job", api::batch::v1::Job),
            ("batch", "v1", "CronJob", api::batch::v1::CronJob),
            ("node.k8s.io", "v1", "RuntimeClass", api::node::v1::RuntimeClass),
            ("apiextensions.k8s.io", "v1", "CustomResourceDefinition", apiext::CustomResourceDefinition),
            ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicy", api::admissionregistration::v1::ValidatingAdmissionPolicy),
            ("admissionregistration.k8s.io", "v1", "ValidatingAdmissionPolicyBinding", api::admissionregistration::v1::ValidatingAdmissionPolicyBinding),
            ("admissionregistration.k8s.io", "v1", "MutatingWebhookConfiguration", api::admissionregistration::v1::MutatingWebhookConfiguration),
            ("admissionregistration.k8s.io", "v1", "ValidatingWebhookConfiguration", api::admissionregistration::v1::ValidatingWebhookConfiguration),
            ("rbac.authorization.k8s.io", "v1", "Role", api::rbac::v1::Role),
            ("rbac.authorization.k8s.io", "v1", "RoleBinding", api::rbac::v1::RoleBinding),
            ("rbac.authorization.k8s.io", "v1", "ClusterRole", api::rbac::v1::ClusterRole),
            ("rbac.authorization.k8s.io", "v1", "ClusterRoleBinding", api::rbac::v1::ClusterRoleBinding),
            ("discovery.k8s.io", "v1", "EndpointSlice", api::discovery::v1::EndpointSlice),
            ("networking.k8s.io", "v1", "Ingress", api::networking::v1::Ingress),
            ("networking.k8s.io", "v1", "NetworkPolicy", api::networking::v1::NetworkPolicy),
            ("networking.k8s.io", "v1", "IngressClass", api::networking::v1::IngressClass),
            ("policy", "v1", "PodDisruptionBudget", api::policy::v1::PodDisruptionBudget),
            ("autoscaling", "v2", "HorizontalPodAutoscaler", api::autoscaling::v2::HorizontalPodAutoscaler),
            ("autoscaling", "v1", "HorizontalPodAutoscaler", api::autoscaling::v1::HorizontalPodAutoscaler),
            ("autoscaling", "v1", "Scale", api::autoscaling::v1::Scale),
            ("apiregistration.k8s.io", "v1", "APIService", apireg::APIService),
            ("scheduling.k8s.io", "v1", "PriorityClass", api::scheduling::v1::PriorityClass),
            ("storage.k8s.io", "v1", "StorageClass", api::storage::v1::StorageClass),
        );
        let mut defs = generator.take_definitions(true);
        for ((g, v, k), name) in &roots {
            if let Some(o) = defs.get_mut(name).and_then(Value::as_object_mut) {
                o.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": g, "version": v, "kind": k}]),
                );
            }
        }
        let refs = roots
            .iter()
            .map(|(k, n)| (k.clone(), json!({"$ref": format!("#/components/schemas/{n}")})))
            .collect();
        Builtins { defs, roots, refs }
    })
}

/// The schema of a stored object of `res` (for a built-in, a `$ref` to its
/// definition) and the definitions `$ref`s point into (`None` for a custom
/// resource: its schema has no refs).
pub fn schema_of(res: &ResourceInfo) -> Option<(&Value, Option<&'static Map<String, Value>>)> {
    if !res.builtin {
        return res.schema.as_deref().map(|s| (s, None));
    }
    let b = builtins();
    let schema = res.builtin_schema.get_or_init(|| {
        let storage = res.storage_api_version();
        let (group, version) = crate::resources::split_api_version(&storage);
        b.refs
            .get(&(group.to_string(), version.to_string(), res.kind.clone()))
    });
    schema.map(|r| (r, Some(&b.defs)))
}

/// Follows a `#/components/schemas/X` reference, also in the
/// `{"allOf": [{"$ref": ...}], "description": ...}` form OpenAPI v3 uses.
pub fn resolve<'a>(s: &'a Value, defs: Option<&'a Map<String, Value>>) -> &'a Value {
    resolve_named(s, defs).0
}

/// [`resolve`], also naming the definition reached (if any).
pub fn resolve_named<'a>(
    s: &'a Value,
    defs: Option<&'a Map<String, Value>>,
) -> (&'a Value, Option<&'a str>) {
    let mut cur = s;
    let mut name = None;
    for _ in 0..8 {
        // Only the `{allOf: [{$ref}]}` wrapper: a CRD schema's own `allOf`
        // (value validations beside `properties`) is not a reference.
        if let Some([one]) = cur
            .get("allOf")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            && one.get("$ref").is_some()
        {
            cur = one;
        }
        match (cur.get("$ref").and_then(Value::as_str), defs) {
            (Some(r), Some(d)) => match r.rsplit('/').next().and_then(|n| d.get_key_value(n)) {
                Some((n, next)) => {
                    cur = next;
                    name = Some(n.as_str());
                }
                None => return (cur, name),
            },
            _ => return (cur, name),
        }
    }
    (cur, name)
}

fn collect_refs(v: &Value, out: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            if let Some(r) = m.get("$ref").and_then(Value::as_str)
                && let Some(n) = r.rsplit('/').next()
            {
                out.insert(n.to_string());
            }
            for x in m.values() {
                collect_refs(x, out);
            }
        }
        Value::Array(a) => a.iter().for_each(|x| collect_refs(x, out)),
        _ => {}
    }
}

/// The definitions reachable from `names`.
fn closure(defs: &Map<String, Value>, names: &[String]) -> Map<String, Value> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut todo: Vec<String> = names.to_vec();
    while let Some(n) = todo.pop() {
        if !seen.insert(n.clone()) {
            continue;
        }
        if let Some(d) = defs.get(&n) {
            let mut refs = BTreeSet::new();
            collect_refs(d, &mut refs);
            todo.extend(refs.into_iter().filter(|r| !seen.contains(r)));
        }
    }
    seen.into_iter()
        .filter_map(|n| defs.get(&n).map(|d| (n, d.clone())))
        .collect()
}

/// `com.example.v1.Widget` for a CRD kind in group `example.com`.
fn crd_def_name(res: &ResourceInfo) -> String {
    let rev: Vec<&str> = res.group.split('.').rev().collect();
    format!("{}.{}.{}", rev.join("."), res.version, res.kind)
}

fn params() -> Value {
    json!([
        {"name": "dryRun", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldManager", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
        {"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}},
    ])
}

fn gv_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// `/openapi/v3`: the group-versions served, each with its document's URL.
pub fn v3_index(reg: &Registry) -> Value {
    let mut paths = Map::new();
    let mut gvs: BTreeSet<(String, String)> = BTreeSet::new();
    for r in reg.all() {
        gvs.insert((r.group.clone(), r.version.clone()));
    }
    for (g, v) in gvs {
        let p = gv_path(&g, &v);
        paths.insert(
            p.clone(),
            json!({"serverRelativeURL": format!("/openapi/v3/{p}?hash={}", reg.generation_hash())}),
        );
    }
    json!({"paths": paths})
}

/// `/openapi/v3/{api/v1|apis/g/v}`, or `None` for a group-version not served.
pub fn v3_document(reg: &Registry, group: &str, version: &str) -> Option<Value> {
    let resources: Vec<_> = reg
        .all()
        .into_iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if resources.is_empty() {
        return None;
    }
    let b = builtins();
    let mut roots = Vec::new();
    let mut extra = Map::new();
    let mut paths = Map::new();
    for r in &resources {
        let name = if r.builtin {
            match b
                .roots
                .get(&(r.group.clone(), r.version.clone(), r.kind.clone()))
            {
                Some(n) => n.clone(),
                None => continue,
            }
        } else {
            let n = crd_def_name(r);
            let mut s = r.schema.as_deref().cloned().unwrap_or_else(
                || json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            );
            if let Some(o) = s.as_object_mut() {
                let props = o
                    .entry("properties")
                    .or_insert_with(|| json!({}))
                    .as_object_mut();
                if let Some(p) = props {
                    p.insert(
                        "metadata".into(),
                        json!({"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta",
                               "description": "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata"}),
                    );
                    p.entry("apiVersion").or_insert_with(|| json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object."}));
                    p.entry("kind").or_insert_with(|| json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents."}));
                }
                o.insert(
                    "x-kubernetes-group-version-kind".into(),
                    json!([{"group": r.group, "version": r.version, "kind": r.kind}]),
                );
            }
            roots.push("io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta".to_string());
            extra.insert(n.clone(), s);
            n
        };
        roots.push(name.clone());
        let gvk = json!({"group": r.group, "version": r.version, "kind": r.kind});
        let base = if r.namespaced {
            format!(
                "/{}/namespaces/{{namespace}}/{}",
                gv_path(group, version),
                r.plural
            )
        } else {
            format!("/{}/{}", gv_path(group, version), r.plural)
        };
        let reference = json!({"$ref": format!("#/components/schemas/{name}")});
        let ok = json!({"200": {"description": "OK", "content": {"application/json": {"schema": reference}}}});
        let op = |verb: &str, action: &str, params: Value| {
            json!({
                "operationId": format!("{verb}{}", r.kind),
                "parameters": params,
                "responses": ok,
                "x-kubernetes-action": action,
                "x-kubernetes-group-version-kind": gvk,
            })
        };
        paths.insert(
            base.clone(),
            json!({"get": op("list", "list", json!([])), "post": op("create", "post", params())}),
        );
        paths.insert(
            format!("{base}/{{name}}"),
            json!({
                "get": op("read", "get", json!([])),
                "put": op("replace", "put", params()),
                "patch": op("patch", "patch", params()),
                "delete": op("delete", "delete", json!([])),
            }),
        );
    }
    let mut schemas = closure(&b.defs, &roots);
    schemas.extend(extra);
    Some(json!({
        "openapi": "3.0.0",
        "info": {"title": "Kubernetes", "version": "v1.32.0"},
        "paths": paths,
        "components": {"schemas": schemas},
    }))
}

/// `/openapi/v2` as JSON (Swagger 2.0): every built-in definition, with
/// `#/definitions/` references.
pub fn v2_document() -> &'static [u8] {
    static DOC: OnceLock<Vec<u8>> = OnceLock::new();
    DOC.get_or_init(|| {
        let b = builtins();
        let text = serde_json::to_string(&b.defs)
            .unwrap_or_default()
            .replace("#/components/schemas/", "#/definitions/");
        let defs: Value = serde_json::from_str(&text).unwrap_or_default();
        serde_json::to_vec(&json!({
            "swagger": "2.0",
            "info": {"title": "Kubernetes", "version": "v1.32.0"},
            "paths": {},
            "definitions": defs,
        }))
        .unwrap_or_default()
    })
}
