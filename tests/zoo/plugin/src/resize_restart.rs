//! # `resize-restart` — an intermediate state only an immediate crash exposes
//!
//! **Class:** intermediate state (Sieve; rabbitmq-cluster-operator's
//! volume expansion). The Widget owns a "workload" (`<widget>-child`, like
//! a StatefulSet) and a "volume" (`<widget>-volume`, like its PVC), both
//! carrying `spec.size`. A resize cannot be done in place: the workload is
//! deleted, the volume expanded, and the workload recreated at the new
//! size by the next reconcile. **Buggy:** one reconcile returns
//! `[delete the workload, patch the volume]`; the recreate path (no
//! workload) creates the volume only when absent and never compares its
//! size. **In production:** the operator is killed right after the delete
//! (an OOM, a node drain); the new process lists a world without the
//! workload, takes the recreate path, and the volume keeps its old size
//! forever — a workload at size 2 on a volume of size 1.
//!
//! A controller that keeps running after the delete heals it: its next
//! reconcile, from a cache that still shows the old workload, deletes it
//! again and patches the volume. Only a crash that stops the controller
//! at once — nothing runs between the fault and the restart's fresh list —
//! exposes it.
//!
//! **Found by:** `crash` after action 1 of the resizing reconcile, then
//! the `end-state` oracle (the volume's size differs from the reference's).
//!
//! **Fix:** derive every object from the spec on every path: the volume's
//! size is compared and patched whether the workload exists or not.

use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, child_name, namespace};
use k8s_openapi::api::core::v1::ConfigMap;

/// The volume's name: `<widget>-volume`.
#[must_use]
pub fn volume_name(req: &Request) -> String {
    format!("{}-volume", req.name)
}

fn size_of(cm: &ConfigMap) -> Option<&str> {
    cm.data.as_ref()?.get("size").map(String::as_str)
}

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
    let ns = namespace(req)?;
    let size = widget.spec.size.unwrap_or(1).to_string();
    let workload_name = child_name(req);
    let volume_name = volume_name(req);
    let workload = ctx.get::<ConfigMap>(&req.cluster, Some(ns), &workload_name)?;
    let volume = ctx.get::<ConfigMap>(&req.cluster, Some(ns), &volume_name)?;
    let patch_volume = Action::merge_patch(
        ObjectRef::new::<ConfigMap>(&req.cluster, Some(ns), &volume_name),
        json!({"data": {"size": size}}),
    );
    let mut outcome = Outcome::done();
    match &volume {
        None => outcome.push(Action::create(
            &req.cluster,
            &child(req, &volume_name, &[("size", &size)]),
        )),
        // Fixed: the volume follows the spec on every path.
        Some(v) if fixed && size_of(v) != Some(size.as_str()) => outcome.push(patch_volume.clone()),
        Some(_) => {}
    }
    match workload {
        None => outcome.push(Action::create(
            &req.cluster,
            &child(req, &workload_name, &[("size", &size)]),
        )),
        Some(w) if size_of(&w) != Some(size.as_str()) => {
            // The resize: the workload goes first (it holds the volume),
            // then the volume grows; the next reconcile recreates it.
            outcome.push(Action::delete(ObjectRef::new::<ConfigMap>(
                &req.cluster,
                Some(ns),
                &workload_name,
            )));
            if !fixed {
                outcome.push(patch_volume);
            }
        }
        Some(_) => {}
    }
    Ok(outcome)
}
