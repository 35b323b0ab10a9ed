//! Strategic merge patch (`application/strategic-merge-patch+json`).
//!
//! Hand-written: there is no Rust port of apimachinery's `strategicpatch`.
//! Follows its `mergeMap`/`mergeSlice` for the directives kubectl sends;
//! merge keys and strategies come from [`TypeInfo`] instead of Go struct tags.

use serde_json::{Map, Value};

use super::schema::{ListKind, Schema};
use super::{PatchError, TypeInfo};

const PATCH: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// Applies a strategic merge patch and returns the patched object.
///
/// Maps merge recursively and `null` deletes a key. Lists with a merge key
/// in `info` merge item by item (an item `{"<key>": .., "$patch": "delete"}`
/// deletes), lists of scalars with merge strategy (`metadata.finalizers`)
/// are unions, other lists are replaced. Directives: `$patch`
/// (`replace`/`merge`/`delete`, on maps and as a list item), `$retainKeys`,
/// `$deleteFromPrimitiveList/<field>`, `$setElementOrder/<field>`.
///
/// # Errors
/// [`PatchError::Malformed`] when the patch is not an object or a directive
/// has the wrong shape; [`PatchError::Invalid`] when it cannot apply (e.g. a
/// list item lacks its merge key, fields outside `$retainKeys`).
pub fn strategic_merge_patch(
    target: &Value,
    patch: &Value,
    info: &TypeInfo,
) -> Result<Value, PatchError> {
    let Value::Object(patch) = patch else {
        return Err(PatchError::Malformed(
            "strategic merge patch must be a JSON object".into(),
        ));
    };
    let mut out = match target {
        Value::Object(m) => m.clone(),
        _ => Map::new(),
    };
    match merge_map(&mut out, patch, &info.root)? {
        MapOutcome::Keep => Ok(Value::Object(out)),
        MapOutcome::Delete => Ok(Value::Object(Map::new())),
    }
}

enum MapOutcome {
    Keep,
    /// `$patch: delete`: the parent removes this map.
    Delete,
}

fn merge_map(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    schema: &Schema,
) -> Result<MapOutcome, PatchError> {
    match patch.get(PATCH) {
        None => {}
        Some(Value::String(s)) if s == "merge" => {}
        Some(Value::String(s)) if s == "delete" => return Ok(MapOutcome::Delete),
        Some(Value::String(s)) if s == "replace" => {
            let mut fresh = Map::new();
            let mut rest = patch.clone();
            rest.shift_remove(PATCH);
            merge_map(&mut fresh, &rest, schema)?;
            *original = fresh;
            return Ok(MapOutcome::Keep);
        }
        Some(other) => {
            return Err(PatchError::Malformed(format!(
                "unknown patch type {other} in map"
            )));
        }
    }

    if let Some(retain) = patch.get(RETAIN_KEYS) {
        apply_retain_keys(original, patch, retain)?;
    }

    // $deleteFromPrimitiveList/<f>: drop those values from original[f].
    for (k, v) in patch {
        let Some(field) = k.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) else {
            continue;
        };
        let Value::Array(remove) = v else {
            return Err(PatchError::Malformed(format!(
                "{k} must be a list of primitives"
            )));
        };
        if let Some(Value::Array(list)) = original.get_mut(field) {
            list.retain(|item| !remove.contains(item));
        }
    }

    // The server order for $setElementOrder is the list before this patch.
    let server_orders: Vec<(&str, Vec<Value>)> = patch
        .keys()
        .filter_map(|k| k.strip_prefix(SET_ELEMENT_ORDER))
        .map(|field| {
            let key = merge_key(schema, field);
            let ids = match original.get(field) {
                Some(Value::Array(list)) => list.iter().map(|i| identity(i, key)).collect(),
                _ => Vec::new(),
            };
            (field, ids)
        })
        .collect();

    for (k, pv) in patch {
        if k.starts_with('$') {
            if k != PATCH
                && k != RETAIN_KEYS
                && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
                && !k.starts_with(SET_ELEMENT_ORDER)
            {
                return Err(PatchError::Malformed(format!("unknown directive {k:?}")));
            }
            continue;
        }
        if pv.is_null() {
            original.shift_remove(k);
            continue;
        }
        let child_schema = schema.field(k).0;
        let merged = match original.get_mut(k) {
            Some(ov) => merge_value(ov, pv, child_schema)?,
            None => {
                let mut fresh = empty_like(pv);
                merge_value(&mut fresh, pv, child_schema)?
            }
        };
        match merged {
            Some(v) => {
                if let Some(ov) = original.get_mut(k) {
                    *ov = v;
                } else {
                    original.insert(k.clone(), v);
                }
            }
            None => {
                original.shift_remove(k);
            }
        }
    }

    // $setElementOrder/<f>: reorder the (merged) list.
    for (k, order) in patch {
        let Some(field) = k.strip_prefix(SET_ELEMENT_ORDER) else {
            continue;
        };
        let Value::Array(order) = order else {
            return Err(PatchError::Malformed(format!("{k} must be a list")));
        };
        let key = merge_key(schema, field);
        let server = server_orders
            .iter()
            .find(|(f, _)| *f == field)
            .map_or(&[][..], |(_, ids)| ids.as_slice());
        if let Some(Value::Array(list)) = original.get_mut(field) {
            set_element_order(list, order, server, key)?;
        }
    }
    Ok(MapOutcome::Keep)
}

/// The strategic merge key of list field `field`, if it is an associative list.
fn merge_key<'s>(schema: &'s Schema, field: &str) -> Option<&'s str> {
    match schema.field(field).0.list().0 {
        ListKind::Map(keys) => keys.first().map(String::as_str),
        _ => None,
    }
}

fn apply_retain_keys(
    original: &mut Map<String, Value>,
    patch: &Map<String, Value>,
    retain: &Value,
) -> Result<(), PatchError> {
    let Value::Array(retain) = retain else {
        return Err(PatchError::Malformed(
            "$retainKeys must be a list of field names".into(),
        ));
    };
    let keep: Vec<&str> = retain.iter().filter_map(Value::as_str).collect();
    if keep.len() != retain.len() {
        return Err(PatchError::Malformed(
            "$retainKeys must be a list of field names".into(),
        ));
    }
    for (k, v) in patch {
        if v.is_null() || k.starts_with('$') {
            continue;
        }
        if !keep.contains(&k.as_str()) {
            return Err(PatchError::Invalid(format!(
                "patch field {k:?} is not in $retainKeys"
            )));
        }
    }
    original.retain(|k, _| keep.contains(&k.as_str()));
    Ok(())
}

fn empty_like(v: &Value) -> Value {
    match v {
        Value::Object(_) => Value::Object(Map::new()),
        Value::Array(_) => Value::Array(Vec::new()),
        _ => Value::Null,
    }
}

/// Merges `patch` into `original`; `None` means "remove the field".
fn merge_value(
    original: &mut Value,
    patch: &Value,
    schema: &Schema,
) -> Result<Option<Value>, PatchError> {
    match (original, patch) {
        (Value::Object(o), Value::Object(p)) if !schema.is_atomic_map() => {
            match merge_map(o, p, schema)? {
                MapOutcome::Keep => Ok(Some(Value::Object(std::mem::take(o)))),
                MapOutcome::Delete => Ok(None),
            }
        }
        (Value::Array(o), Value::Array(p)) => {
            merge_list(o, p, schema)?;
            Ok(Some(Value::Array(std::mem::take(o))))
        }
        (_, Value::Object(p)) => {
            // Replacing a non-object (or an atomic map): still honour the
            // directives and nulls inside the patch.
            let mut fresh = Map::new();
            match merge_map(&mut fresh, p, schema)? {
                MapOutcome::Keep => Ok(Some(Value::Object(fresh))),
                MapOutcome::Delete => Ok(None),
            }
        }
        (_, Value::Array(p)) => {
            let mut fresh = Vec::new();
            merge_list(&mut fresh, p, schema)?;
            Ok(Some(Value::Array(fresh)))
        }
        (_, p) => Ok(Some(p.clone())),
    }
}

/// The value an item is identified by: its merge key's value, or itself.
fn identity(item: &Value, key: Option<&str>) -> Value {
    match key {
        Some(k) => item.get(k).cloned().unwrap_or(Value::Null),
        None => item.clone(),
    }
}

fn is_directive_item(item: &Value) -> Option<&str> {
    item.as_object()
        .filter(|m| m.len() == 1)
        .and_then(|m| m.get(PATCH))
        .and_then(Value::as_str)
}

fn merge_list(
    original: &mut Vec<Value>,
    patch: &[Value],
    schema: &Schema,
) -> Result<(), PatchError> {
    let (kind, items) = schema.list();
    // `[{"$patch": "replace"}, ...]`: replace the list with the other items.
    if patch
        .iter()
        .any(|i| is_directive_item(i) == Some("replace"))
    {
        original.clear();
        let rest: Vec<Value> = patch
            .iter()
            .filter(|i| is_directive_item(i) != Some("replace"))
            .cloned()
            .collect();
        return merge_list(original, &rest, schema);
    }
    match kind {
        ListKind::Atomic => {
            *original = patch.iter().map(strip_directives).collect();
            Ok(())
        }
        ListKind::Set => {
            for item in patch {
                if item.is_object() || item.is_array() {
                    return Err(PatchError::Invalid(
                        "cannot merge a non-primitive item into a list of primitives".into(),
                    ));
                }
                if !original.contains(item) {
                    original.push(item.clone());
                }
            }
            Ok(())
        }
        ListKind::Map(keys) => {
            let key = keys.first().map_or("name", String::as_str);
            for item in patch {
                let Value::Object(p) = item else {
                    return Err(PatchError::Invalid(format!(
                        "list item {item} must be an object with merge key {key:?}"
                    )));
                };
                let Some(id) = p.get(key) else {
                    return Err(PatchError::Invalid(format!(
                        "map: {item} does not contain declared merge key: {key}"
                    )));
                };
                let pos = original.iter().position(|o| o.get(key) == Some(id));
                let delete = p.get(PATCH).and_then(Value::as_str) == Some("delete");
                match (pos, delete) {
                    (Some(_), true) => original.retain(|o| o.get(key) != Some(id)),
                    (None, true) => {}
                    (Some(i), false) => {
                        if let Some(merged) = merge_value(&mut original[i], item, items)? {
                            original[i] = merged;
                        } else {
                            original.remove(i);
                        }
                    }
                    (None, false) => {
                        let mut fresh = Value::Object(Map::new());
                        if let Some(v) = merge_value(&mut fresh, item, items)? {
                            original.push(v);
                        }
                    }
                }
            }
            Ok(())
        }
    }
}

/// A patch value taken verbatim into an atomic list: drop `$` keys and nulls
/// of objects inside it, as merging it into nothing would.
fn strip_directives(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(k, v)| !k.starts_with('$') && !v.is_null())
                .map(|(k, v)| (k.clone(), strip_directives(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(strip_directives).collect()),
        other => other.clone(),
    }
}

/// apimachinery's `normalizeElementOrder` + `mergeSortedSlice`: items named
/// in `order` come in that order; the others ("server only") keep their
/// relative order and are interleaved by their position in `server`.
fn set_element_order(
    list: &mut Vec<Value>,
    order: &[Value],
    server: &[Value],
    key: Option<&str>,
) -> Result<(), PatchError> {
    let order_ids: Vec<Value> = order
        .iter()
        .map(|o| match key {
            Some(k) => o.get(k).cloned().ok_or_else(|| {
                PatchError::Malformed(format!("$setElementOrder item {o} lacks merge key {k:?}"))
            }),
            None => Ok(o.clone()),
        })
        .collect::<Result<_, _>>()?;
    let items = std::mem::take(list);
    let (mut ordered, server_only): (Vec<Value>, Vec<Value>) = items
        .into_iter()
        .partition(|i| order_ids.contains(&identity(i, key)));
    ordered.sort_by_key(|i| {
        let id = identity(i, key);
        order_ids.iter().position(|o| *o == id)
    });
    let index = |v: &Value| {
        let id = identity(v, key);
        server.iter().position(|s| *s == id)
    };
    let (mut left, mut right) = (
        server_only.into_iter().peekable(),
        ordered.into_iter().peekable(),
    );
    while left.peek().is_some() || right.peek().is_some() {
        let take_left = match (left.peek(), right.peek()) {
            (Some(_), None) => true,
            (None, _) => false,
            (Some(l), Some(r)) => matches!((index(l), index(r)), (Some(li), Some(ri)) if li < ri),
        };
        let next = if take_left { left.next() } else { right.next() };
        list.extend(next);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deployment() -> Value {
        json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "finalizers": ["a"], "labels": {"app": "web"}},
            "spec": {"replicas": 1, "template": {"spec": {"containers": [
                {"name": "app", "image": "app:1",
                 "env": [{"name": "A", "value": "1"}, {"name": "B", "value": "2"}],
                 "ports": [{"containerPort": 80, "name": "http"}]},
                {"name": "sidecar", "image": "side:1"}
            ]}}}
        })
    }

    fn smp(target: &Value, patch: Value, api: &str, kind: &str) -> Value {
        let info = TypeInfo::builtin(api, kind).unwrap();
        strategic_merge_patch(target, &patch, &info).unwrap_or_else(|e| panic!("{patch}: {e}"))
    }

    #[test]
    fn containers_merge_by_name_env_and_ports_by_key() {
        let out = smp(
            &deployment(),
            json!({"spec": {"template": {"spec": {"containers": [
                {"name": "app", "image": "app:2",
                 "env": [{"name": "B", "value": "3"}, {"name": "C", "value": "4"}],
                 "ports": [{"containerPort": 80, "protocol": "TCP"}, {"containerPort": 443}]}
            ]}}}}),
            "apps/v1",
            "Deployment",
        );
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c.as_array().unwrap().len(), 2, "sidecar kept");
        assert_eq!(c[0]["image"], "app:2");
        assert_eq!(
            c[0]["env"],
            json!([{"name":"A","value":"1"},{"name":"B","value":"3"},{"name":"C","value":"4"}])
        );
        assert_eq!(
            c[0]["ports"],
            json!([{"containerPort":80,"name":"http","protocol":"TCP"},{"containerPort":443}])
        );
        assert_eq!(c[1], json!({"name": "sidecar", "image": "side:1"}));
        assert_eq!(out["spec"]["replicas"], 1);
    }

    #[test]
    fn delete_item_and_null_field() {
        let out = smp(
            &deployment(),
            json!({"metadata": {"labels": {"app": null}}, "spec": {"replicas": null,
                "template": {"spec": {"containers": [{"name": "sidecar", "$patch": "delete"},
                    {"name": "app", "env": [{"name": "A", "$patch": "delete"}]}]}}}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(out["metadata"]["labels"], json!({}));
        assert!(out["spec"].get("replicas").is_none());
        let c = out["spec"]["template"]["spec"]["containers"]
            .as_array()
            .unwrap();
        assert_eq!(c.len(), 1);
        assert_eq!(c[0]["env"], json!([{"name": "B", "value": "2"}]));
    }

    #[test]
    fn node_taints_and_pod_tolerations_are_replaced_whole() {
        let node = json!({"spec": {"taints": [
            {"key": "a", "effect": "NoSchedule"}, {"key": "b", "effect": "NoSchedule"}]}});
        let out = smp(
            &node,
            json!({"spec": {"taints": [{"key": "c", "effect": "NoExecute"}]}}),
            "v1",
            "Node",
        );
        assert_eq!(
            out["spec"]["taints"],
            json!([{"key": "c", "effect": "NoExecute"}])
        );
        let pod = json!({"spec": {"tolerations": [{"key": "a"}], "containers": []}});
        let out = smp(
            &pod,
            json!({"spec": {"tolerations": [{"key": "b"}]}}),
            "v1",
            "Pod",
        );
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "b"}]));
    }

    #[test]
    fn finalizers_union_and_delete_from_primitive_list() {
        let out = smp(
            &deployment(),
            json!({"metadata": {"finalizers": ["b", "a"]}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["a", "b"]));
        let out = smp(
            &out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["b"]));
    }

    /// What kubectl apply sends when it reorders and adds containers.
    #[test]
    fn set_element_order_reorders_and_interleaves_server_only_items() {
        let target = json!({"spec": {"containers": [
            {"name": "a"}, {"name": "s1"}, {"name": "b"}, {"name": "s2"}]}});
        let out = smp(
            &target,
            json!({"spec": {
                "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
                "containers": [{"name": "c", "image": "c:1"}]}}),
            "v1",
            "Pod",
        );
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        // s1 (server index 1) sorts before b (server index 2); s2 after.
        assert_eq!(names, ["s1", "b", "c", "a", "s2"]);
        // primitive lists too
        let obj = json!({"metadata": {"finalizers": ["x", "y"]}});
        let out = smp(
            &obj,
            json!({"metadata": {"$setElementOrder/finalizers": ["y", "x"]}}),
            "v1",
            "ConfigMap",
        );
        assert_eq!(out["metadata"]["finalizers"], json!(["y", "x"]));
    }

    /// The shape `kubectl apply` (client-side) sends for a Deployment.
    #[test]
    fn kubectl_apply_shaped_patch() {
        let patch = json!({
            "metadata": {"annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}"}},
            "spec": {"template": {"spec": {
                "$setElementOrder/containers": [{"name": "sidecar"}, {"name": "app"}],
                "containers": [{
                    "$setElementOrder/env": [{"name": "B"}, {"name": "C"}],
                    "env": [{"name": "C", "value": "3"}, {"$patch": "delete", "name": "A"}],
                    "name": "app"
                }]
            }}}
        });
        let out = smp(&deployment(), patch, "apps/v1", "Deployment");
        let c = &out["spec"]["template"]["spec"]["containers"];
        assert_eq!(c[0]["name"], "sidecar");
        assert_eq!(c[1]["name"], "app");
        assert_eq!(
            c[1]["env"],
            json!([{"name": "B", "value": "2"}, {"name": "C", "value": "3"}])
        );
        assert_eq!(
            out["metadata"]["annotations"],
            json!({"kubectl.kubernetes.io/last-applied-configuration": "{}"})
        );
        assert_eq!(
            c[1]["ports"],
            json!([{"containerPort": 80, "name": "http"}])
        );
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let obj = json!({"metadata": {"ownerReferences": [{"uid": "1", "name": "a"}]}});
        let out = smp(
            &obj,
            json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}, {"uid": "1", "$patch": "delete"}]}}),
            "v1",
            "ConfigMap",
        );
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "2", "name": "b"}])
        );
    }

    #[test]
    fn retain_keys_clears_other_fields() {
        let d = json!({"spec": {"strategy": {"type": "RollingUpdate",
            "rollingUpdate": {"maxSurge": 1}}}});
        let out = smp(
            &d,
            json!({"spec": {"strategy": {"$retainKeys": ["type"], "type": "Recreate"}}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(out["spec"]["strategy"], json!({"type": "Recreate"}));
        let info = TypeInfo::builtin("apps/v1", "Deployment").unwrap();
        let bad = json!({"spec": {"strategy": {"$retainKeys": ["type"], "rollingUpdate": {}}}});
        assert!(matches!(
            strategic_merge_patch(&d, &bad, &info),
            Err(PatchError::Invalid(_))
        ));
    }

    #[test]
    fn patch_replace_and_delete_directives() {
        let d = deployment();
        let out = smp(
            &d,
            json!({"metadata": {"labels": {"$patch": "replace", "tier": "fe"}}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(out["metadata"]["labels"], json!({"tier": "fe"}));
        let out = smp(
            &d,
            json!({"metadata": {"labels": {"$patch": "delete"}}}),
            "apps/v1",
            "Deployment",
        );
        assert!(out["metadata"].get("labels").is_none());
        let out = smp(
            &d,
            json!({"spec": {"template": {"spec": {"containers": [
                {"$patch": "replace"}, {"name": "only", "image": "o:1"}]}}}}),
            "apps/v1",
            "Deployment",
        );
        assert_eq!(
            out["spec"]["template"]["spec"]["containers"],
            json!([{"name": "only", "image": "o:1"}])
        );
    }

    #[test]
    fn errors() {
        let info = TypeInfo::builtin("v1", "Pod").unwrap();
        let pod = json!({"spec": {"containers": [{"name": "a"}]}});
        let no_key = json!({"spec": {"containers": [{"image": "x"}]}});
        assert!(matches!(
            strategic_merge_patch(&pod, &no_key, &info),
            Err(PatchError::Invalid(_))
        ));
        assert!(matches!(
            strategic_merge_patch(&pod, &json!([1]), &info),
            Err(PatchError::Malformed(_))
        ));
        assert!(matches!(
            strategic_merge_patch(&pod, &json!({"$patch": "explode"}), &info),
            Err(PatchError::Malformed(_))
        ));
    }

    #[test]
    fn new_fields_are_cleaned_of_directives() {
        let out = smp(
            &json!({"metadata": {"name": "p"}}),
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "X", "$patch": "delete"}]}],
                "nodeSelector": {"a": "1", "b": null}}}),
            "v1",
            "Pod",
        );
        assert_eq!(
            out["spec"],
            json!({"containers": [{"name": "a", "env": []}], "nodeSelector": {"a": "1"}})
        );
    }
}
