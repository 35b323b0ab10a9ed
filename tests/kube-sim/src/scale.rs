//! The `/scale` subresource: an autoscaling/v1 `Scale` view of a
//! workload's replica count (`kubectl scale`, HorizontalPodAutoscalers).
//!
//! The paths come from [`ScalePaths`]: `.spec.replicas`, `.status.replicas`
//! and `.spec.selector` for the built-in workloads, a CRD's
//! `subresources.scale` for custom resources.

use serde_json::{Map, Value, json};

use crate::error::{ApiError, ApiResult};
use crate::resources::ScalePaths;

/// `.spec.replicas` → `/spec/replicas`.
fn pointer(path: &str) -> String {
    path.split('.')
        .filter(|s| !s.is_empty())
        .map(|s| format!("/{s}"))
        .collect()
}

/// `metav1.FormatLabelSelector`: `a=b,c in (d,e)`; a map (ReplicationController) as `a=b`.
pub(crate) fn format_selector(sel: &Value) -> Option<String> {
    match sel {
        Value::String(s) => Some(s.clone()),
        Value::Object(m) if m.contains_key("matchLabels") || m.contains_key("matchExpressions") => {
            let mut parts = Vec::new();
            if let Some(ml) = m.get("matchLabels").and_then(Value::as_object) {
                for (k, v) in ml {
                    parts.push(format!("{k}={}", v.as_str().unwrap_or_default()));
                }
            }
            if let Some(me) = m.get("matchExpressions").and_then(Value::as_array) {
                for e in me {
                    let key = e.get("key").and_then(Value::as_str).unwrap_or_default();
                    let values: Vec<&str> = e
                        .get("values")
                        .and_then(Value::as_array)
                        .map(|a| a.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    match e.get("operator").and_then(Value::as_str) {
                        Some("In") => parts.push(format!("{key} in ({})", values.join(","))),
                        Some("NotIn") => parts.push(format!("{key} notin ({})", values.join(","))),
                        Some("Exists") => parts.push(key.to_string()),
                        Some("DoesNotExist") => parts.push(format!("!{key}")),
                        _ => {}
                    }
                }
            }
            Some(parts.join(","))
        }
        Value::Object(m) => Some(
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(","),
        ),
        _ => None,
    }
}

/// The autoscaling/v1 Scale of `obj`.
pub fn to_scale(paths: &ScalePaths, obj: &Value) -> Value {
    let m = obj.get("metadata").cloned().unwrap_or_else(|| json!({}));
    let mut meta = Map::new();
    for k in [
        "name",
        "namespace",
        "uid",
        "resourceVersion",
        "creationTimestamp",
    ] {
        if let Some(v) = m.get(k) {
            meta.insert(k.into(), v.clone());
        }
    }
    let spec_replicas = obj
        .pointer(&pointer(&paths.spec_replicas))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let status_replicas = obj
        .pointer(&pointer(&paths.status_replicas))
        .and_then(Value::as_i64)
        .unwrap_or(0);
    let mut spec = Map::new();
    // ScaleSpec.replicas is omitempty.
    if spec_replicas != 0 {
        spec.insert("replicas".into(), json!(spec_replicas));
    }
    let mut status = Map::new();
    status.insert("replicas".into(), json!(status_replicas));
    if let Some(sel) = paths
        .label_selector
        .as_deref()
        .and_then(|p| obj.pointer(&pointer(p)))
        .and_then(format_selector)
        .filter(|s| !s.is_empty())
    {
        status.insert("selector".into(), json!(sel));
    }
    json!({"kind": "Scale", "apiVersion": "autoscaling/v1", "metadata": meta,
           "spec": spec, "status": status})
}

/// Validates a Scale written by a client and returns its `spec.replicas`.
pub fn replicas(name: &str, scale: &Value) -> ApiResult<i64> {
    let r = match scale.pointer("/spec/replicas") {
        None | Some(Value::Null) => 0,
        Some(v) => v.as_i64().ok_or_else(|| {
            ApiError::bad_request(format!(
                "Scale in version \"v1\" cannot be handled as a Scale: json: cannot unmarshal {} into Go struct field ScaleSpec.spec.replicas of type int32",
                type_word(v)
            ))
        })?,
    };
    if r < 0 {
        return Err(ApiError::invalid(
            "Scale",
            "autoscaling",
            name,
            &[(
                "FieldValueInvalid",
                "spec.replicas".into(),
                format!("Invalid value: {r}: must be greater than or equal to 0"),
            )],
        ));
    }
    Ok(r)
}

fn type_word(v: &Value) -> &'static str {
    match v {
        Value::String(_) => "string",
        Value::Bool(_) => "bool",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
        _ => "number",
    }
}

/// Sets the replica count of `obj` at the spec path.
pub fn set_replicas(paths: &ScalePaths, obj: &mut Value, replicas: i64) {
    let ptr = pointer(&paths.spec_replicas);
    let mut cur = obj;
    let segs: Vec<&str> = ptr.split('/').filter(|s| !s.is_empty()).collect();
    for (i, seg) in segs.iter().enumerate() {
        if !cur.is_object() {
            *cur = Value::Object(Map::new());
        }
        let Some(m) = cur.as_object_mut() else {
            return;
        };
        if i + 1 == segs.len() {
            m.insert((*seg).to_string(), json!(replicas));
            return;
        }
        cur = m
            .entry((*seg).to_string())
            .or_insert_with(|| Value::Object(Map::new()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scale_view_of_a_deployment() {
        let paths = ScalePaths {
            spec_replicas: ".spec.replicas".into(),
            status_replicas: ".status.replicas".into(),
            label_selector: Some(".spec.selector".into()),
        };
        let mut d = json!({"metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "7", "labels": {"x": "y"}},
            "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"},
                "matchExpressions": [{"key": "tier", "operator": "In", "values": ["a", "b"]}]}},
            "status": {"replicas": 1}});
        assert_eq!(
            to_scale(&paths, &d),
            json!({"kind": "Scale", "apiVersion": "autoscaling/v1",
                "metadata": {"name": "web", "namespace": "default", "uid": "u", "resourceVersion": "7"},
                "spec": {"replicas": 2}, "status": {"replicas": 1, "selector": "app=web,tier in (a,b)"}})
        );
        set_replicas(&paths, &mut d, 5);
        assert_eq!(d["spec"]["replicas"], 5);
        assert_eq!(
            replicas("web", &json!({"spec": {"replicas": 3}})).unwrap(),
            3
        );
        let e = replicas("web", &json!({"spec": {"replicas": -1}})).unwrap_err();
        assert_eq!(e.code, 422);
        assert!(
            e.message
                .contains("spec.replicas: Invalid value: -1: must be greater than or equal to 0"),
            "{}",
            e.message
        );
    }
}
