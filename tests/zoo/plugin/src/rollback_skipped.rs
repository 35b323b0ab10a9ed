//! # `rollback-skipped` — "already done" remembered by spec value
//!
//! **Class:** history-dependent state (Acto's rollback bugs). The Widget's
//! `spec.replicas` (1 when absent) is rolled out to its child
//! `<widget>-child` (`data.replicas`). **Buggy:** to save work the plugin
//! remembers every value it already rolled out in an annotation on the
//! Widget (`zoo.rekon.dev/rolled-out: "1,4"`) and skips a value it finds
//! there. **In production:** a rollback to an earlier spec (`kubectl
//! rollout undo`, a revert in git) finds its value "already done" and
//! changes nothing: the child keeps the newer value forever. No fault is
//! needed, and no hand-written scenario that only goes forward finds it.
//!
//! **Found by:** scenario-free mode (its generated steps go back to earlier
//! values), then `differential` (the sequence ending in `replicas: 1`
//! against `replicas: 1` applied alone).
//!
//! **Fix:** level-based: compare the child with the spec every time; keep
//! no history.

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, child_name, namespace};

/// The annotation of values rolled out (buggy only).
pub const ROLLED_OUT: &str = "zoo.rekon.dev/rolled-out";

/// One reconcile of a Widget.
///
/// # Errors
/// A failed cache read.
pub fn reconcile(
    ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let want = widget.spec.replicas.unwrap_or(1).to_string();
    let name = child_name(req);
    let current = ctx
        .get::<ConfigMap>(&req.cluster, Some(namespace(req)?), &name)?
        .and_then(|c| c.data.and_then(|d| d.get("replicas").cloned()));
    let apply = Action::apply(
        &req.cluster,
        &child(req, &name, &[("replicas", want.as_str())]),
    )
    .force();
    if fixed {
        if current.as_deref() == Some(want.as_str()) {
            return Ok(Outcome::done());
        }
        return Ok(Outcome::done().with(apply));
    }
    let done: Vec<String> = widget
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ROLLED_OUT))
        .map(|v| v.split(',').map(str::to_owned).collect())
        .unwrap_or_default();
    if done.contains(&want) {
        return Ok(Outcome::done());
    }
    let mut rolled = done;
    rolled.push(want);
    Ok(Outcome::done().with(apply).with(Action::merge_patch(
        ObjectRef::for_request::<Widget>(req),
        json!({"metadata": {"annotations": {ROLLED_OUT: rolled.join(",")}}}),
    )))
}
