//! # `intermediate-status` — status written before the work it reports
//!
//! **Class:** intermediate state (Sieve). **Buggy:** one reconcile returns
//! `[status phase=Ready, create the child]` and every later reconcile trusts
//! `status.phase == Ready` and does nothing. **In production:** the
//! controller crashes (OOM, node drain, leader change) after the status
//! write and before the create; the new leader reads `Ready` and never
//! creates the child — a Widget that says Ready and has nothing behind it.
//!
//! **Found by:** `crash` after action 1 of the first reconcile, then the
//! `end-state` oracle (the child the reference has is missing).
//!
//! **Fix:** derive the status from what is observed — create the child
//! while it is absent, and write `Ready` only once the child is seen
//! (`Creating` until then), as the last action.

use rekon_sdk::prelude::*;
use serde_json::json;

pub use crate::child_name;
use crate::{Widget, child, exists, status_of, status_patch};

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
    let name = child_name(req);
    let phase = status_of(widget).phase;
    let create = Action::create(&req.cluster, &child(req, &name, &[("made-by", "zoo")]));
    if !fixed {
        // Trusts its own status: Ready means the work was done.
        if phase.as_deref() == Some("Ready") {
            return Ok(Outcome::done());
        }
        return Ok(Outcome::done()
            .with(status_patch(req, json!({"phase": "Ready"})))
            .with(create));
    }
    let seen = exists(ctx, req, &name)?;
    let mut outcome = Outcome::done();
    if !seen {
        outcome.push(create);
    }
    let observed = if seen { "Ready" } else { "Creating" };
    if phase.as_deref() != Some(observed) {
        outcome.push(status_patch(req, json!({"phase": observed})));
    }
    Ok(outcome)
}
