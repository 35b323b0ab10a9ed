//! The finalizer protocol around a plugin's primaries.
//!
//! Which step an object gets is the shared rule [`rekon_rules::step`] (the
//! SDK's test kit applies the same function): a primary without the
//! plugin's finalizer gets it first; a primary is reconciled `live`; an
//! object being deleted, or leaving the primary scope, that carries the
//! finalizer is reconciled in phase `deleting` / `leaving` until the plugin
//! says it is finalized, and only once every action of that outcome
//! succeeded is the finalizer removed. Everything else is never touched.
//!
//! The patches here are JSON patches guarded by `test` operations, like
//! kube-runtime's finalizer helper, so a decision made on stale state fails
//! instead of clobbering the list.

use serde_json::{Value, json};

use crate::action::{Action, ObjectRef, PatchAction, PatchType};

/// JSON patch adding `finalizer`, guarded by the resourceVersion the decision
/// was made on (kube-runtime's finalizer helper guards with the list itself).
pub(crate) fn add_patch(
    current: &[String],
    resource_version: Option<&str>,
    finalizer: &str,
) -> Value {
    let mut ops = Vec::new();
    if let Some(rv) = resource_version {
        ops.push(json!({"op": "test", "path": "/metadata/resourceVersion", "value": rv}));
    }
    if current.is_empty() {
        ops.push(json!({"op": "add", "path": "/metadata/finalizers", "value": [finalizer]}));
    } else {
        ops.push(json!({"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}));
    }
    Value::Array(ops)
}

/// JSON patch removing the finalizer at `index`, guarded by a `test` that it is still there.
pub(crate) fn remove_patch(index: usize, finalizer: &str) -> Value {
    let path = format!("/metadata/finalizers/{index}");
    json!([
        {"op": "test", "path": path, "value": finalizer},
        {"op": "remove", "path": path},
    ])
}

/// The patch action the host performs on a primary for its own protocol.
pub(crate) fn patch_action(target: ObjectRef, ops: &Value) -> Action {
    Action::Patch(PatchAction {
        target,
        patch_type: PatchType::Json,
        patch: ops.to_string(),
        resource_version: None,
        status: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finalizer_patches() {
        assert_eq!(
            add_patch(&[], Some("5"), "rekon.io/x"),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "5"},
                {"op": "add", "path": "/metadata/finalizers", "value": ["rekon.io/x"]}
            ])
        );
        assert_eq!(
            add_patch(&["other".into()], Some("6"), "rekon.io/x"),
            json!([
                {"op": "test", "path": "/metadata/resourceVersion", "value": "6"},
                {"op": "add", "path": "/metadata/finalizers/-", "value": "rekon.io/x"}
            ])
        );
        assert_eq!(
            remove_patch(1, "rekon.io/x"),
            json!([
                {"op": "test", "path": "/metadata/finalizers/1", "value": "rekon.io/x"},
                {"op": "remove", "path": "/metadata/finalizers/1"}
            ])
        );
    }
}
