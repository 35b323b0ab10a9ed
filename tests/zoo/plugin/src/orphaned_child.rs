//! # `orphaned-child` — a child with no owner, orphaned
//!
//! **Class:** intermediate state. **Buggy:** the child is created without
//! an owner, and its owner reference is added by a second action of the
//! same reconcile; a child that exists counts as done. **In production:** a
//! crash between the two writes leaves a child no owner reference points
//! from; when the Widget is deleted, garbage collection has nothing to
//! follow and the child stays forever.
//!
//! **Found by:** `crash` after action 1, then (after the delete step)
//! `end-state` (the child the reference's garbage collection removed is
//! still there) and `counts`.
//!
//! **Fix:** the owner reference on the create itself: one write, nothing in
//! between.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use rekon_sdk::prelude::*;
use serde_json::json;

pub use crate::child_name;
use crate::{Widget, child, exists};

/// The Widget's controller owner reference (no `blockOwnerDeletion`, which
/// would need `update` on widgets/finalizers in a real cluster).
fn owner_reference(widget: &Widget) -> Result<OwnerReference, Error> {
    let mut reference = widget
        .controller_owner_ref(&())
        .ok_or_else(|| Error::retry("the widget has no uid yet"))?;
    reference.block_owner_deletion = None;
    Ok(reference)
}

/// One reconcile of a Widget.
///
/// # Errors
/// A failed cache read; a Widget without a uid.
pub fn reconcile(
    ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    let name = child_name(req);
    if exists(ctx, req, &name)? {
        return Ok(Outcome::done());
    }
    let owner = owner_reference(widget)?;
    let mut kid = child(req, &name, &[("made-by", "zoo")]);
    if fixed {
        kid.metadata.owner_references = Some(vec![owner]);
        return Ok(Outcome::done().with(Action::create(&req.cluster, &kid)));
    }
    let target = ObjectRef::of(&req.cluster, &kid);
    Ok(Outcome::done()
        .with(Action::create(&req.cluster, &kid))
        .with(Action::merge_patch(
            target,
            json!({"metadata": {"ownerReferences": [owner]}}),
        )))
}
