//! [`TypeInfo`]: how the lists (and maps) of one kind merge.
//!
//! A much reduced structured-merge-diff schema: only what changes merging
//! is described (associative lists, sets, atomic maps, which object keys
//! are declared fields). Everything else is "deduced": objects merge key by
//! key, lists are atomic, scalars are leaves.

use std::collections::HashMap;

use serde_json::Value;

/// How the fields of one kind merge, for strategic merge patch and
/// server-side apply. Paths not described are "deduced": objects merge
/// key by key, lists are atomic (replaced whole), scalars are leaves.
#[derive(Debug, Clone)]
pub struct TypeInfo {
    pub(crate) root: Schema,
}

impl TypeInfo {
    /// A field path of `obj` in structured-merge-diff's notation: `.a.b`,
    /// list items by their keys (`[name="c"]`, `[containerPort=80,protocol="TCP"]`)
    /// or, in atomic lists, by index (`[0]`). `segments` are field names
    /// and list indexes.
    pub fn smd_path(&self, obj: &Value, segments: &[PathSegment]) -> String {
        let mut out = String::new();
        let mut schema = &self.root;
        let mut cur = Some(obj);
        for seg in segments {
            match seg {
                PathSegment::Field(f) => {
                    out.push('.');
                    out.push_str(f);
                    schema = schema.field(f).0;
                    cur = cur.and_then(|c| c.get(f));
                }
                PathSegment::Index(i) => {
                    let (kind, items) = schema.list();
                    let item = cur.and_then(|c| c.get(*i));
                    match (kind, item) {
                        (ListKind::Map(keys), Some(item)) => {
                            let parts: Vec<String> = keys
                                .iter()
                                .filter_map(|k| item.get(k).map(|v| format!("{k}={v}")))
                                .collect();
                            out.push_str(&format!("[{}]", parts.join(",")));
                        }
                        _ => out.push_str(&format!("[{i}]")),
                    }
                    schema = items;
                    cur = item;
                }
            }
        }
        out
    }
}

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathSegment {
    /// An object field.
    Field(String),
    /// A list index.
    Index(usize),
}

impl Default for TypeInfo {
    /// Same as [`TypeInfo::metadata_only`].
    fn default() -> Self {
        Self::metadata_only()
    }
}

/// How a list merges.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ListKind {
    /// Replaced whole (no merge key).
    Atomic,
    /// Scalars merged as a set (`x-kubernetes-list-type: set`; SMP
    /// `patchStrategy: merge` on a list of scalars).
    Set,
    /// Objects merged by these key fields. Strategic merge patch uses the
    /// first key as its `patchMergeKey`.
    Map(Vec<String>),
}

#[derive(Debug, Clone)]
pub(crate) enum Schema {
    /// Anything: objects merge key by key (keys count as declared fields),
    /// lists are atomic, scalars are leaves.
    Deduced,
    /// A leaf.
    Scalar,
    /// An object with declared `fields`; other keys follow `elements`
    /// (a `map[string]T`: its keys are not declared fields), or are
    /// deduced when `elements` is `None`. An atomic map is one leaf.
    Map {
        fields: HashMap<String, Schema>,
        elements: Option<Box<Schema>>,
        atomic: bool,
    },
    /// A list.
    List { kind: ListKind, items: Box<Schema> },
}

static DEDUCED: Schema = Schema::Deduced;

impl Schema {
    /// The schema of object key `key` and whether it is a declared field
    /// (structured-merge-diff owns undeclared keys, i.e. elements of a
    /// `map[string]T`, as members even when they have children).
    pub(crate) fn field(&self, key: &str) -> (&Schema, bool) {
        match self {
            Schema::Map {
                fields, elements, ..
            } => match (fields.get(key), elements) {
                (Some(s), _) => (s, true),
                (None, Some(e)) => (e, false),
                (None, None) => (&DEDUCED, true),
            },
            _ => (&DEDUCED, true),
        }
    }

    /// The list kind and item schema when this is a list schema; deduced
    /// lists are atomic.
    pub(crate) fn list(&self) -> (&ListKind, &Schema) {
        static ATOMIC: ListKind = ListKind::Atomic;
        match self {
            Schema::List { kind, items } => (kind, items),
            _ => (&ATOMIC, &DEDUCED),
        }
    }

    /// True when a value of this schema is owned and replaced as a whole.
    pub(crate) fn is_atomic_map(&self) -> bool {
        matches!(self, Schema::Map { atomic: true, .. } | Schema::Scalar)
    }
}

fn map(fields: Vec<(&str, Schema)>) -> Schema {
    Schema::Map {
        fields: fields
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect(),
        elements: None,
        atomic: false,
    }
}

fn string_map() -> Schema {
    Schema::Map {
        fields: HashMap::new(),
        elements: Some(Box::new(Schema::Scalar)),
        atomic: false,
    }
}

fn keyed(key: &str, items: Schema) -> Schema {
    Schema::List {
        kind: ListKind::Map(vec![key.to_string()]),
        items: Box::new(items),
    }
}

fn set() -> Schema {
    Schema::List {
        kind: ListKind::Set,
        items: Box::new(Schema::Scalar),
    }
}

fn atomic_list() -> Schema {
    Schema::List {
        kind: ListKind::Atomic,
        items: Box::new(Schema::Deduced),
    }
}

fn object_meta() -> Schema {
    map(vec![
        ("labels", string_map()),
        ("annotations", string_map()),
        ("ownerReferences", keyed("uid", Schema::Deduced)),
        ("finalizers", set()),
        ("managedFields", atomic_list()),
    ])
}

fn container() -> Schema {
    map(vec![
        ("env", keyed("name", Schema::Deduced)),
        ("ports", keyed("containerPort", Schema::Deduced)),
        ("volumeMounts", keyed("mountPath", Schema::Deduced)),
        (
            "resources",
            map(vec![("limits", string_map()), ("requests", string_map())]),
        ),
    ])
}

fn pod_spec() -> Schema {
    map(vec![
        ("containers", keyed("name", container())),
        ("initContainers", keyed("name", container())),
        ("ephemeralContainers", keyed("name", container())),
        ("volumes", keyed("name", Schema::Deduced)),
        ("imagePullSecrets", keyed("name", Schema::Deduced)),
        ("hostAliases", keyed("ip", Schema::Deduced)),
        ("nodeSelector", string_map()),
        // No merge key in the Kubernetes types: replaced whole.
        ("tolerations", atomic_list()),
    ])
}

fn pod_template() -> Schema {
    map(vec![("metadata", object_meta()), ("spec", pod_spec())])
}

fn status_with_conditions() -> Schema {
    map(vec![("conditions", keyed("type", Schema::Deduced))])
}

fn label_selector() -> Schema {
    map(vec![("matchLabels", string_map())])
}

/// A kind's root: `metadata`, `spec`, `status`, plus `extra` top-level fields.
fn kind(spec: Option<Schema>, extra: Vec<(&str, Schema)>) -> Schema {
    let mut fields = vec![
        ("metadata", object_meta()),
        ("status", status_with_conditions()),
    ];
    if let Some(spec) = spec {
        fields.push(("spec", spec));
    }
    fields.extend(extra);
    map(fields)
}

fn workload_spec() -> Schema {
    map(vec![
        ("template", pod_template()),
        ("selector", label_selector()),
    ])
}

impl TypeInfo {
    /// The list semantics of a kind kube-sim serves built in (core v1,
    /// apps/v1, batch/v1, events, leases, ...), or `None` for other kinds
    /// (custom resources: strategic merge patch answers 415 for them).
    ///
    /// Merge keys: containers/initContainers/ephemeralContainers `name`,
    /// env `name`, volumes `name`, volumeMounts `mountPath`, container ports
    /// `containerPort`, Service ports `port`, imagePullSecrets `name`,
    /// `status.conditions` `type`, hostAliases `ip`; `metadata` lists as in
    /// [`TypeInfo::metadata_only`]. Node `spec.taints` and Pod
    /// `spec.tolerations` are atomic.
    #[must_use]
    pub fn builtin(api_version: &str, kind_name: &str) -> Option<TypeInfo> {
        let data = || vec![("data", string_map()), ("binaryData", string_map())];
        let root = match (api_version, kind_name) {
            ("v1", "Pod") => kind(Some(pod_spec()), vec![]),
            ("v1", "PodTemplate") => kind(None, vec![("template", pod_template())]),
            ("v1", "ReplicationController") => kind(
                Some(map(vec![
                    ("template", pod_template()),
                    ("selector", string_map()),
                ])),
                vec![],
            ),
            ("apps/v1", "Deployment" | "ReplicaSet" | "StatefulSet" | "DaemonSet") => {
                kind(Some(workload_spec()), vec![])
            }
            ("batch/v1", "Job") => kind(Some(workload_spec()), vec![]),
            ("batch/v1", "CronJob") => kind(
                Some(map(vec![(
                    "jobTemplate",
                    map(vec![("metadata", object_meta()), ("spec", workload_spec())]),
                )])),
                vec![],
            ),
            ("v1", "Service") => kind(
                Some(map(vec![
                    ("ports", keyed("port", Schema::Deduced)),
                    ("selector", string_map()),
                ])),
                vec![],
            ),
            // spec.taints has no merge key: atomic (deduced).
            ("v1", "Node") => kind(Some(map(vec![("taints", atomic_list())])), vec![]),
            ("v1", "ConfigMap") => kind(None, data()),
            ("v1", "Secret") => {
                let mut extra = data();
                extra.push(("stringData", string_map()));
                kind(None, extra)
            }
            ("v1", "ServiceAccount") => kind(
                None,
                vec![
                    ("secrets", keyed("name", Schema::Deduced)),
                    ("imagePullSecrets", keyed("name", Schema::Deduced)),
                ],
            ),
            ("v1", "Namespace" | "Event" | "Endpoints")
            | ("events.k8s.io/v1", "Event")
            | ("coordination.k8s.io/v1", "Lease")
            | ("node.k8s.io/v1", "RuntimeClass")
            | ("apiextensions.k8s.io/v1", "CustomResourceDefinition") => kind(None, vec![]),
            _ => return None,
        };
        Some(TypeInfo { root })
    }

    /// From a CRD version's `schema.openAPIV3Schema`, honouring
    /// `x-kubernetes-list-type` (`map` with `x-kubernetes-list-map-keys`,
    /// `set`, `atomic`), `x-kubernetes-map-type: atomic`, `properties` and
    /// `additionalProperties`; plus the `metadata` lists of every kind.
    #[must_use]
    pub fn from_openapi_v3_schema(schema: &Value) -> TypeInfo {
        let mut root = convert(schema);
        if let Schema::Map { fields, .. } = &mut root {
            fields.insert("metadata".into(), object_meta());
        } else {
            root = kind(None, vec![]);
        }
        TypeInfo { root }
    }

    /// Only the `metadata` lists every kind shares: `ownerReferences`
    /// (map keyed by `uid`), `finalizers` (set), `managedFields` (atomic).
    #[must_use]
    pub fn metadata_only() -> TypeInfo {
        TypeInfo {
            root: map(vec![("metadata", object_meta())]),
        }
    }
}

fn convert(s: &Value) -> Schema {
    let ty = s.get("type").and_then(Value::as_str);
    let is_true = |k: &str| s.get(k).and_then(Value::as_bool) == Some(true);
    if is_true("x-kubernetes-int-or-string") {
        return Schema::Scalar;
    }
    let props = s.get("properties").and_then(Value::as_object);
    let additional = s.get("additionalProperties").filter(|a| a.is_object());
    match ty {
        Some("array") => {
            let items = s.get("items").map_or(Schema::Deduced, convert);
            let kind = match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
                Some("set") => ListKind::Set,
                Some("map") => {
                    let keys: Vec<String> = s
                        .get("x-kubernetes-list-map-keys")
                        .and_then(Value::as_array)
                        .map(|ks| {
                            ks.iter()
                                .filter_map(Value::as_str)
                                .map(str::to_string)
                                .collect()
                        })
                        .unwrap_or_default();
                    if keys.is_empty() {
                        ListKind::Atomic
                    } else {
                        ListKind::Map(keys)
                    }
                }
                _ => ListKind::Atomic,
            };
            Schema::List {
                kind,
                items: Box::new(items),
            }
        }
        Some("object") | None if props.is_some() || additional.is_some() => Schema::Map {
            fields: props
                .map(|p| p.iter().map(|(k, v)| (k.clone(), convert(v))).collect())
                .unwrap_or_default(),
            elements: additional.map(|a| Box::new(convert(a))),
            atomic: s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic"),
        },
        Some("object")
            if s.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic") =>
        {
            Schema::Scalar
        }
        Some("object") | None => Schema::Deduced,
        Some(_) => Schema::Scalar,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn at<'a>(s: &'a Schema, path: &[&str]) -> &'a Schema {
        path.iter()
            .fold(s, |s, k| if *k == "[]" { s.list().1 } else { s.field(k).0 })
    }

    #[test]
    fn builtin_merge_keys() {
        let d = TypeInfo::builtin("apps/v1", "Deployment").unwrap();
        let containers = at(&d.root, &["spec", "template", "spec", "containers"]);
        assert_eq!(containers.list().0, &ListKind::Map(vec!["name".into()]));
        let ports = at(containers, &["[]", "ports"]);
        assert_eq!(ports.list().0, &ListKind::Map(vec!["containerPort".into()]));
        let n = TypeInfo::builtin("v1", "Node").unwrap();
        assert_eq!(at(&n.root, &["spec", "taints"]).list().0, &ListKind::Atomic);
        let p = TypeInfo::builtin("v1", "Pod").unwrap();
        assert_eq!(
            at(&p.root, &["spec", "tolerations"]).list().0,
            &ListKind::Atomic
        );
        assert_eq!(
            at(&p.root, &["metadata", "finalizers"]).list().0,
            &ListKind::Set
        );
        assert!(TypeInfo::builtin("example.com/v1", "Widget").is_none());
        assert!(TypeInfo::builtin("v1", "Widget").is_none());
    }

    #[test]
    fn crd_schema_list_types() {
        let s = json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "items": {"type": "array", "x-kubernetes-list-type": "map",
                              "x-kubernetes-list-map-keys": ["name", "proto"],
                              "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "sel": {"type": "object", "x-kubernetes-map-type": "atomic",
                            "properties": {"a": {"type": "string"}}},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}}
                }}
            }
        });
        let t = TypeInfo::from_openapi_v3_schema(&s);
        assert_eq!(
            at(&t.root, &["spec", "items"]).list().0,
            &ListKind::Map(vec!["name".into(), "proto".into()])
        );
        assert_eq!(at(&t.root, &["spec", "tags"]).list().0, &ListKind::Set);
        assert_eq!(at(&t.root, &["spec", "args"]).list().0, &ListKind::Atomic);
        assert!(at(&t.root, &["spec", "sel"]).is_atomic_map());
        assert!(!t.root.field("spec").0.field("labels").0.field("x").1);
        assert!(t.root.field("spec").0.field("tags").1);
        assert_eq!(
            at(&t.root, &["metadata", "ownerReferences"]).list().0,
            &ListKind::Map(vec!["uid".into()])
        );
    }
}
