//! # `finalizer-child` — a correct controller with a finalizer (no bug)
//!
//! **A correct plugin that must stay clean.** It is written the way most
//! controllers are: the Widget gets one child ConfigMap (`<widget>-child`,
//! created if absent, with the owner labels); the host manages the
//! finalizer ([`crate::FINALIZER`]); and whether the Widget is being
//! deleted is decided from its own `metadata.deletionTimestamp`, not from
//! the phase the host passes. Being deleted, it deletes the child by name
//! and, once the cache shows it gone, lets the finalizer go.
//!
//! Each scenario under `tests/zoo/correct/` drives it into one place where
//! the explorer once reported a correct controller:
//!
//! - `deletion-timestamp`: a `stale` plan served the primary as an earlier
//!   reconcile saw it, without its `deletionTimestamp`, in a reconcile the
//!   host had decided was `deleting` — a state no cache can produce;
//! - `recreate` (delete, then apply the same name again): a `transient`
//!   fault aimed at the plugin's writes hit the host's finalizer patch of
//!   the recreated Widget on every retry; an `unobserved` plan held the
//!   plugin across the delete and the re-apply, which then landed on the
//!   still-terminating Widget.
//!
//! `pod-token` is its sibling [`crate::pod_token`].

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, child_name, exists, namespace, status_of, status_patch};

/// One reconcile of a Widget, live or being deleted.
///
/// # Errors
/// A failed cache read.
pub fn reconcile(ctx: &Context, req: &Request, widget: &Widget) -> Result<Outcome, Error> {
    let name = child_name(req);
    let present = exists(ctx, req, &name)?;
    if widget.metadata.deletion_timestamp.is_some() {
        if present {
            let delete = Action::delete(ObjectRef::new::<ConfigMap>(
                &req.cluster,
                Some(namespace(req)?),
                &name,
            ));
            // Keep the finalizer until the cache shows the child gone.
            let mut outcome = Outcome::done();
            outcome.push(delete);
            return Ok(outcome.keep_finalizer());
        }
        return Ok(Outcome::done());
    }
    let mut outcome = Outcome::done();
    if !present {
        outcome.push(Action::create(
            &req.cluster,
            &child(req, &name, &[("made-by", "zoo")]),
        ));
    }
    if status_of(widget).children != Some(1) {
        outcome.push(status_patch(req, json!({"children": 1})));
    }
    Ok(outcome)
}
