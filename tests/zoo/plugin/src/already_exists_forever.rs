//! # `already-exists-forever` — a create path that fails forever once its object exists
//!
//! **Class:** intermediate state / non-idempotent step. **Buggy:** the
//! Widget's own `status.created` decides whether the child is still to be
//! created; on that path the plugin looks the child up and fails ("already
//! exists") when it finds it, expecting to be the only one who ever creates
//! it. The reconcile that creates it returns `[create, status created=true]`.
//! **In production:** a crash (or a lost answer) between the create and the
//! status write leaves the child without the status; every reconcile after
//! that fails, with backoff, forever — the object is stuck and alerts fire.
//!
//! **Found by:** `crash` after action 1 (or `transient` on the status
//! write), then `fixed-point` (the reconciles never succeed again) and
//! `end-state` (`status.created` missing).
//!
//! **Fix:** adopt the existing child — seeing it is what the status was
//! meant to record, so write `created=true` and go on.

use rekon_sdk::prelude::*;
use serde_json::json;

pub use crate::child_name;
use crate::{Widget, child, exists, status_of, status_patch};

/// One reconcile of a Widget.
///
/// # Errors
/// A failed cache read; (buggy) the child exists while the status says it
/// was never created.
pub fn reconcile(
    ctx: &Context,
    req: &Request,
    widget: &Widget,
    fixed: bool,
) -> Result<Outcome, Error> {
    if status_of(widget).created == Some(true) {
        return Ok(Outcome::done());
    }
    let name = child_name(req);
    let created = status_patch(req, json!({"created": true}));
    if exists(ctx, req, &name)? {
        if !fixed {
            return Err(Error::retry(format!(
                "failed to create child {name}: it already exists"
            )));
        }
        return Ok(Outcome::done().with(created));
    }
    Ok(Outcome::done()
        .with(Action::create(
            &req.cluster,
            &child(req, &name, &[("made-by", "zoo")]),
        ))
        .with(created))
}
