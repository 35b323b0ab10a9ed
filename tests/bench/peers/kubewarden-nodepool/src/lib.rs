//! The NodePool validation as a Kubewarden policy, written with Kubewarden's
//! Rust SDK as its policy template writes one: the rules rekon's nodepool
//! plugin checks without its cache (`plugins/nodepool`, `validate`):
//!
//! - each taint's effect is `NoSchedule`, `PreferNoSchedule` or `NoExecute`;
//! - each label key and taint key is a qualified name, each label value a
//!   valid label value (Kubernetes' `IsQualifiedName`, `IsValidLabelValue`);
//! - each taint value is a valid label value;
//! - a pool's labels carry no role label (`node-role.kubernetes.io/<x>`):
//!   another pool's would make its nodes join that pool, and its own is set
//!   by whoever assigns a node to the pool.
//!
//! Denied with HTTP 422 and every problem in one message, as the plugin
//! does. Only for `tests/bench/admission_peers.py`, which serves it with
//! Kubewarden's policy-server beside rekon serving the nodepool plugin and
//! kopf serving `tests/bench/peers/nodepool_kopf_validate.py`, and sends
//! all three the same AdmissionReviews.

use kubewarden_policy_sdk::request::ValidationRequest;
use kubewarden_policy_sdk::settings::Validatable;
use kubewarden_policy_sdk::wapc_guest::prelude::*;
use kubewarden_policy_sdk::{
    accept_request, protocol_version_guest, reject_request, validate_settings,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

const TAINT_EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
const ROLE_PREFIX: &str = "node-role.kubernetes.io/";

/// No settings.
#[derive(Serialize, Deserialize, Default, Debug)]
#[serde(default)]
pub struct Settings {}

impl Validatable for Settings {
    fn validate(&self) -> Result<(), String> {
        Ok(())
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn wapc_init() {
    register_function("validate", validate);
    register_function("validate_settings", validate_settings::<Settings>);
    register_function("protocol_version", protocol_version_guest);
}

fn name_ok(name: &str) -> bool {
    let alnum = |b: Option<u8>| b.is_some_and(|b| b.is_ascii_alphanumeric());
    !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && alnum(name.bytes().next())
        && alnum(name.bytes().last())
}

fn dns_subdomain(s: &str) -> bool {
    let label = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    !s.is_empty() && s.len() <= 253 && s.split('.').all(label)
}

fn qualified_name(key: &str) -> bool {
    match key.split_once('/') {
        Some((prefix, name)) => dns_subdomain(prefix) && name_ok(name),
        None => name_ok(key),
    }
}

fn label_value(value: &str) -> bool {
    value.is_empty() || name_ok(value)
}

fn problems(pool: &str, spec: &Value) -> Vec<String> {
    let mut problems = Vec::new();
    if let Some(labels) = spec.get("labels").and_then(Value::as_object) {
        for (key, value) in labels {
            if !qualified_name(key) {
                problems.push(format!("spec.labels[{key}]: Invalid value: {key:?}: not a qualified name"));
            }
            if !label_value(value.as_str().unwrap_or_default()) {
                problems.push(format!("spec.labels[{key}]: Invalid value: {value}: not a valid label value"));
            }
            if let Some(role) = key.strip_prefix(ROLE_PREFIX).filter(|r| !r.is_empty()) {
                problems.push(if role == pool {
                    format!("spec.labels[{key}]: Forbidden: the pool's own role label is set by whoever assigns a node to the pool")
                } else {
                    format!("spec.labels[{key}]: Forbidden: may not claim pool {role:?}'s role label")
                });
            }
        }
    }
    if let Some(taints) = spec.get("taints").and_then(Value::as_array) {
        for (i, taint) in taints.iter().enumerate() {
            let key = taint.get("key").and_then(Value::as_str).unwrap_or_default();
            if !qualified_name(key) {
                problems.push(format!("spec.taints[{i}].key: Invalid value: {key:?}: not a qualified name"));
            }
            let value = taint.get("value").and_then(Value::as_str).unwrap_or_default();
            if !label_value(value) {
                problems.push(format!("spec.taints[{i}].value: Invalid value: {value:?}: not a valid label value"));
            }
            let effect = taint.get("effect").and_then(Value::as_str).unwrap_or_default();
            if effect.is_empty() {
                problems.push(format!("spec.taints[{i}].effect: Required value"));
            } else if !TAINT_EFFECTS.contains(&effect) {
                problems.push(format!(
                    "spec.taints[{i}].effect: Unsupported value: {effect:?}: supported values: \"NoSchedule\", \"PreferNoSchedule\", \"NoExecute\""
                ));
            }
        }
    }
    problems
}

fn validate(payload: &[u8]) -> CallResult {
    let request: ValidationRequest<Settings> = ValidationRequest::new(payload)?;
    let object = &request.request.object;
    let pool = object
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let problems = problems(pool, object.get("spec").unwrap_or(&Value::Null));
    if problems.is_empty() {
        return accept_request();
    }
    reject_request(Some(problems.join(", ")), Some(422), None, None)
}
