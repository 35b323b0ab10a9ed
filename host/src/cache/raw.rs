//! Watched objects decoded straight to the text the caches keep: a
//! [`RawObject`] parses only its `metadata` (the engine's keys, labels,
//! owners, finalizers) and keeps every other top-level field as the JSON text
//! the server sent, instead of a `serde_json::Value` tree per object that the
//! cache would serialise back (ARCHITECTURE.md, "Measurements behind the
//! code"). The writer's requests use it too: a write's answer goes into the
//! cache the same way (read-your-writes), and a create sends the plugin's
//! object text.

use std::borrow::Cow;
use std::fmt::Write as _;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::core::{DynamicResourceScope, TypeMeta};
use kube::discovery::ApiResource;
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};
use serde_json::value::RawValue;

/// An object of a dynamic resource: `metadata` parsed, the other top-level
/// fields kept as JSON text in the order the server sent them
/// ([`serde_json::value::RawValue`]: validated, not parsed into a tree);
/// [`RawObject::into_json`] writes the cached text from those pieces.
///
/// One caveat of `RawValue`: it can only be read straight from serde_json's
/// own deserializer. kube decodes list responses and watch lines directly
/// (`serde_json::from_str::<ObjectList<K>>`, `…::<WatchEvent<K>>`), and a
/// watch line names its `type` before its `object` (Go's `watch.Event`
/// field order, which every API server and kube-sim keep), so serde's
/// adjacently tagged `WatchEvent` hands the object to this type directly.
/// A line with `object` first would be buffered by serde and refused here
/// (the watcher reports the decode error and re-watches).
#[derive(Clone, Debug, Default)]
pub struct RawObject {
    /// `metadata`.
    pub metadata: ObjectMeta,
    /// Every other top-level field (`apiVersion`, `kind`, `spec`, `status`,
    /// `data`, …) with its JSON text.
    fields: Vec<(String, Box<RawValue>)>,
}

impl RawObject {
    /// The JSON text of the whole object, as the caches keep it: `apiVersion`
    /// and `kind` first (from `types` where the object lacks them: list
    /// responses omit them on items), `metadata` without `managedFields`,
    /// then the other fields as sent.
    ///
    /// # Errors
    /// When the metadata cannot be serialised (it always can: the error is
    /// serde_json's signature).
    pub fn into_json(
        mut self,
        types: &TypeMeta,
    ) -> Result<(ObjectMeta, String), serde_json::Error> {
        self.metadata.managed_fields = None;
        let metadata = serde_json::to_string(&self.metadata)?;
        let field = |name: &str| {
            self.fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.get())
        };
        let api_version = match field("apiVersion") {
            Some(v) => Cow::Borrowed(v),
            None => Cow::Owned(serde_json::to_string(&types.api_version)?),
        };
        let kind = match field("kind") {
            Some(v) => Cow::Borrowed(v),
            None => Cow::Owned(serde_json::to_string(&types.kind)?),
        };
        let rest = self
            .fields
            .iter()
            .filter(|(k, _)| k != "apiVersion" && k != "kind");
        let len = api_version.len()
            + kind.len()
            + metadata.len()
            + rest
                .clone()
                .map(|(k, v)| k.len() + v.get().len() + 8)
                .sum::<usize>()
            + 40;
        let mut out = String::with_capacity(len);
        let _ = write!(
            out,
            r#"{{"apiVersion":{api_version},"kind":{kind},"metadata":{metadata}"#
        );
        for (key, value) in rest {
            out.push(',');
            // Keys are JSON strings: written the way serde_json escapes them.
            out.push_str(&serde_json::to_string(key)?);
            out.push(':');
            out.push_str(value.get());
        }
        out.push('}');
        Ok((self.metadata, out))
    }
}

impl<'de> Deserialize<'de> for RawObject {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = RawObject;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<RawObject, A::Error> {
                let mut object = RawObject::default();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "metadata" {
                        object.metadata = map.next_value()?;
                    } else {
                        let value: Box<RawValue> = map.next_value()?;
                        object.fields.push((key, value));
                    }
                }
                Ok(object)
            }
        }
        deserializer.deserialize_map(Fields)
    }
}

/// The object as JSON: `apiVersion` and `kind` (where present), `metadata`,
/// then the other fields as they came (a create sends the plugin's object
/// this way).
impl Serialize for RawObject {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(self.fields.len() + 1))?;
        let is_type = |k: &str| k == "apiVersion" || k == "kind";
        for (key, value) in self.fields.iter().filter(|(k, _)| is_type(k)) {
            map.serialize_entry(key, value)?;
        }
        map.serialize_entry("metadata", &self.metadata)?;
        for (key, value) in self.fields.iter().filter(|(k, _)| !is_type(k)) {
            map.serialize_entry(key, value)?;
        }
        map.end()
    }
}

/// Resource of a dynamic type, as kube's `DynamicObject` is.
impl kube::Resource for RawObject {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

#[cfg(test)]
mod tests {
    use kube::api::{DynamicObject, ObjectList, WatchEvent};
    use serde_json::{Value, json};

    use super::*;

    fn types() -> TypeMeta {
        TypeMeta {
            api_version: "v1".into(),
            kind: "Node".into(),
        }
    }

    fn node() -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": "n1",
                "uid": "u1",
                "resourceVersion": "7",
                "labels": {"a": "1", "node-role.kubernetes.io/gpu": ""},
                "finalizers": ["f/x"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "ou", "controller": true}],
                "managedFields": [{"manager": "kubectl", "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {}}}]
            },
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}], "podCIDR": "10.0.0.0/24"},
            "status": {"capacity": {"cpu": "4"}, "images": [{"names": ["a", "b"], "sizeBytes": 12_345_678_901_u64}], "ratio": 0.5, "escaped": "q\"\\\u{e9}\n"}
        })
    }

    /// What the caches kept before: a `DynamicObject` with the types set and
    /// managedFields dropped, serialised.
    fn via_dynamic(text: &str) -> Value {
        let mut obj: DynamicObject = serde_json::from_str(text).unwrap();
        obj.types = Some(types());
        obj.metadata.managed_fields = None;
        serde_json::to_value(&obj).unwrap()
    }

    #[test]
    fn the_cached_text_is_the_object_without_managed_fields_as_the_tree_path_wrote_it() {
        let text = node().to_string();
        let raw: RawObject = serde_json::from_str(&text).unwrap();
        let (meta, json) = raw.into_json(&types()).unwrap();
        assert_eq!(meta.name.as_deref(), Some("n1"));
        assert!(meta.managed_fields.is_none());
        let cached: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(cached, via_dynamic(&text));
        assert!(cached["metadata"].get("managedFields").is_none());
        assert_eq!(cached["status"]["escaped"], "q\"\\\u{e9}\n");
        assert_eq!(
            cached["status"]["images"][0]["sizeBytes"],
            12_345_678_901_u64
        );
        // Field order as sent, apiVersion and kind first.
        let keys: Vec<&String> = cached.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["apiVersion", "kind", "metadata", "spec", "status"]);
    }

    #[test]
    fn list_items_get_api_version_and_kind_from_the_resource() {
        let mut item = node();
        let item_map = item.as_object_mut().unwrap();
        item_map.remove("apiVersion");
        item_map.remove("kind");
        let list = json!({"apiVersion": "v1", "kind": "NodeList", "metadata": {"resourceVersion": "9"}, "items": [item]});
        let list: ObjectList<RawObject> = serde_json::from_str(&list.to_string()).unwrap();
        let raw = list.items.into_iter().next().unwrap();
        let (_, json) = raw.into_json(&types()).unwrap();
        let cached: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(cached["apiVersion"], "v1");
        assert_eq!(cached["kind"], "Node");
        assert_eq!(cached, via_dynamic(&node().to_string()));
    }

    #[test]
    fn a_watch_line_decodes_straight_to_text() {
        for kind in ["ADDED", "MODIFIED", "DELETED"] {
            let line = json!({"type": kind, "object": node()}).to_string();
            let event: WatchEvent<RawObject> = serde_json::from_str(&line).unwrap();
            let (WatchEvent::Added(raw) | WatchEvent::Modified(raw) | WatchEvent::Deleted(raw)) =
                event
            else {
                panic!("{kind} decoded as another event");
            };
            assert_eq!(raw.metadata.resource_version.as_deref(), Some("7"));
            let (_, json) = raw.into_json(&types()).unwrap();
            assert_eq!(
                serde_json::from_str::<Value>(&json).unwrap(),
                via_dynamic(&node().to_string())
            );
        }
        let bookmark = json!({"type": "BOOKMARK", "object": {"kind": "Node", "apiVersion": "v1", "metadata": {"resourceVersion": "12"}}});
        let event: WatchEvent<RawObject> = serde_json::from_str(&bookmark.to_string()).unwrap();
        assert!(matches!(event, WatchEvent::Bookmark(b) if b.metadata.resource_version == "12"));
    }

    #[test]
    fn keys_needing_escapes_are_written_escaped() {
        let text = r#"{"metadata":{"name":"x"},"data":{"k":"v"},"we\"ird":1}"#;
        let raw: RawObject = serde_json::from_str(text).unwrap();
        let (_, json) = raw.into_json(&types()).unwrap();
        let cached: Value = serde_json::from_str(&json).unwrap();
        assert_eq!(cached["we\"ird"], 1);
        assert_eq!(cached["data"]["k"], "v");
    }

    #[test]
    fn an_object_serialises_as_it_came_metadata_included() {
        let text = node().to_string();
        let raw: RawObject = serde_json::from_str(&text).unwrap();
        let sent: Value = serde_json::to_value(&raw).unwrap();
        let mut expected = node();
        // ObjectMeta's own serialisation of the same metadata.
        let meta: ObjectMeta = serde_json::from_value(expected["metadata"].clone()).unwrap();
        expected["metadata"] = serde_json::to_value(meta).unwrap();
        assert_eq!(sent, expected);
        assert!(
            sent["metadata"].get("managedFields").is_some(),
            "a create sends what the plugin wrote"
        );
    }

    #[test]
    fn not_an_object_is_a_decode_error() {
        assert!(serde_json::from_str::<RawObject>("[1,2]").is_err());
        assert!(serde_json::from_str::<RawObject>(r#"{"metadata":{"name":5}}"#).is_err());
        assert!(serde_json::from_str::<RawObject>(r#"{"spec":{"a":}}"#).is_err());
    }
}
