//! # `status-every-reconcile` — a status write on every reconcile that never settles
//!
//! **Class:** no fixed point. **Buggy:** every reconcile writes the status
//! with a reconcile counter (`status.reconciles + 1`) — or, as often seen,
//! the time of the reconcile. The write is an event on the Widget, which
//! is a reconcile, which is a write. **In production:** a hot loop: the API
//! server, the watch caches and the controller's queue busy with one
//! object forever, and every other object waits behind it.
//!
//! **Found by:** the reference run itself: the `fixed-point` oracle (a
//! settle that never quiesces).
//!
//! **Fix:** write the status only when it changes
//! (`status.observedGeneration`, compared before writing;
//! [`rekon_sdk::status_changed`] for computed statuses).

use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, status_of, status_patch};

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
    let status = status_of(widget);
    let generation = widget.metadata.generation.unwrap_or(0);
    if fixed {
        if status.observed_generation == Some(generation) {
            return Ok(Outcome::done());
        }
        return Ok(
            Outcome::done().with(status_patch(req, json!({"observedGeneration": generation})))
        );
    }
    let reconciles = status.reconciles.unwrap_or(0) + 1;
    Ok(Outcome::done().with(status_patch(
        req,
        json!({"observedGeneration": generation, "reconciles": reconciles}),
    )))
}
