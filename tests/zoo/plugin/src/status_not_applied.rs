//! # `status-not-applied` — a status that reports a spec its children never got
//!
//! **Class:** inconsistency between the spec, the status and the system
//! (Acto's consistency oracle). **Buggy:** the child `<widget>-child` is
//! created once with `data.replicas` from `spec.replicas` (1 when absent)
//! and never updated (create-if-absent); `status.replicas` reports the
//! spec's value on every change. **In production:** a scale from 1 to 4
//! says `replicas: 4` in the status while the workload still runs 1 — the
//! status lies, nothing fails, no fault is needed.
//!
//! **Found by:** `consistency` (the inputs as the scenario left them,
//! applied at once to fresh clusters, give a child with the spec's value)
//! and `differential`, in scenario-free mode (its generated steps change
//! `spec.replicas`) or on its scenario.
//!
//! **Fix:** bring the child to the spec on every reconcile, and report in
//! the status what the child holds.

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, child_name, namespace, status_of, status_patch};

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
    let replicas = widget.spec.replicas.unwrap_or(1);
    let want = replicas.to_string();
    let name = child_name(req);
    let current = ctx.get::<ConfigMap>(&req.cluster, Some(namespace(req)?), &name)?;
    let held = current
        .as_ref()
        .and_then(|c| c.data.as_ref().and_then(|d| d.get("replicas").cloned()));
    let mut outcome = Outcome::done();
    let desired = child(req, &name, &[("replicas", want.as_str())]);
    match (&current, fixed) {
        (None, _) => outcome.push(Action::create(&req.cluster, &desired)),
        (Some(_), true) if held.as_deref() != Some(want.as_str()) => {
            outcome.push(Action::apply(&req.cluster, &desired).force());
        }
        _ => {}
    }
    if status_of(widget).replicas != Some(replicas) {
        outcome.push(status_patch(req, json!({ "replicas": replicas })));
    }
    Ok(outcome)
}
