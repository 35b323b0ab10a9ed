//! # `refused-write` — a write the host refuses on every reconcile
//!
//! **Class:** a silent failure. The Widget gets a settings ConfigMap
//! (`<widget>-settings`). **Buggy:** the child is built without
//! `metadata.namespace`, so the host's writer refuses the create of a
//! namespaced kind (an invalid action) on every reconcile, forever;
//! nothing crashes, the Widget just never gets its ConfigMap. **In
//! production:** the same, or a 403 when the installed RBAC lacks the
//! verb, or a 422 for an invalid object: a controller that retries with
//! backoff and never gets anywhere.
//!
//! **Found by:** the reference itself: the refusal persists at the end, a
//! `fixed-point` finding naming the writer's reason, the action and the
//! object. (The explorer once counted only failed plugin calls and said
//! "no finding": every faulted run agreed with a reference that never
//! synced.)
//!
//! **Fix:** the namespace on the child.

use rekon_sdk::prelude::*;

use crate::{Widget, child};

/// The child's name: `<widget>-settings`.
#[must_use]
pub fn child_name(req: &Request) -> String {
    format!("{}-settings", req.name)
}

/// One reconcile of a Widget.
///
/// # Errors
/// Never (the refusal is the host's).
pub fn reconcile(
    _ctx: &Context,
    req: &Request,
    _widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let mut object = child(req, &child_name(req), &[("made-by", "zoo")]);
    if !fixed {
        object.metadata.namespace = None;
    }
    let mut outcome = Outcome::done();
    outcome.push(Action::create(&req.cluster, &object));
    Ok(outcome)
}
