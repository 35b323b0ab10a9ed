//! # `finalizer-by-index` — a finalizer removed by list index
//!
//! **Class:** stale state. Each entry of `spec.holds` keeps a finalizer
//! `zoo.rekon.dev/hold-<name>` of the plugin's own on the Widget (not the
//! host's finalizer protocol: these are managed by JSON patch, put at the
//! front of the list). When holds go away the plugin releases one per
//! reconcile, the last one first. **Buggy:** the release is
//! `remove /metadata/finalizers/<i>`, `i` taken from the list it read.
//! **In production:** the read is stale (its own previous release not yet
//! in the cache); the index now points at the next finalizer — another
//! controller's — which is removed instead. That controller's cleanup
//! never runs (and a deleting object can be freed too early).
//!
//! **Found by:** `stale` on the second release (the Widget served as it
//! was before the first), then `end-state` (the other controller's
//! finalizer, `other.example.com/keep` in the scenario, is gone).
//!
//! **Fix:** guard the index: `test /metadata/finalizers/<i>` equals the
//! finalizer, then `remove` (what the host does for its own finalizer); a
//! stale index fails the patch (422), the reconcile is retried on fresh
//! state. (An apply or merge that names the finalizer works too.)

use rekon_sdk::prelude::*;
use serde_json::{Value, json};

use crate::Widget;

/// The prefix of the plugin's hold finalizers.
pub const HOLD_PREFIX: &str = "zoo.rekon.dev/hold-";

/// One reconcile of a Widget.
///
/// # Errors
/// None; the signature matches the other bugs.
pub fn reconcile(
    _ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let target = ObjectRef::for_request::<Widget>(req);
    let current = widget.metadata.finalizers.clone().unwrap_or_default();
    // A Widget being deleted holds nothing: its holds end with it (else
    // its own finalizers would keep it terminating forever).
    let deleting = widget.metadata.deletion_timestamp.is_some();
    let wanted: Vec<String> = widget
        .spec
        .holds
        .iter()
        .flatten()
        .filter(|_| !deleting)
        .map(|h| format!("{HOLD_PREFIX}{h}"))
        .collect();
    let missing: Vec<&String> = wanted.iter().filter(|f| !current.contains(f)).collect();
    if !missing.is_empty() {
        let ops: Vec<Value> = if current.is_empty() {
            vec![json!({"op": "add", "path": "/metadata/finalizers", "value": missing})]
        } else {
            missing
                .iter()
                .rev()
                .map(|f| json!({"op": "add", "path": "/metadata/finalizers/0", "value": f}))
                .collect()
        };
        return Ok(Outcome::done().with(Action::json_patch(target, Value::Array(ops))));
    }
    // One release per reconcile, the last one first.
    let Some((index, finalizer)) = current
        .iter()
        .enumerate()
        .rev()
        .find(|(_, f)| f.starts_with(HOLD_PREFIX) && !wanted.contains(f))
    else {
        return Ok(Outcome::done());
    };
    let path = format!("/metadata/finalizers/{index}");
    let mut ops = Vec::new();
    if fixed {
        ops.push(json!({"op": "test", "path": path, "value": finalizer}));
    }
    ops.push(json!({"op": "remove", "path": path}));
    Ok(Outcome::done().with(Action::json_patch(target, Value::Array(ops))))
}
