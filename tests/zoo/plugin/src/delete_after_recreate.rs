//! # `delete-after-recreate` — delete by name, no UID precondition, after a recreate
//!
//! **Class:** stale state, Sieve's "time travel". The Widget's children
//! are ConfigMaps someone else creates (owner labels naming the Widget);
//! the plugin deletes those labelled [`EXPIRED`]`=true` and records the
//! others in `status.live`. **Buggy:** the delete names the object only.
//! **In production:** a child expires and is deleted, then recreated under
//! the same name (a new UID, not expired); a replica whose cache still
//! holds the old, expired object (a lagging informer, a new leader on an
//! old list) deletes it by name — and the API server deletes the new one.
//!
//! **Found by:** `stale` on the reconcile after the recreate (its list
//! served at the old-UID version), then `end-state` (the recreated child is
//! gone) and `counts` (an extra delete).
//!
//! **Fix:** `Action::delete(..).uid(uid)`: a UID precondition, which the
//! API server refuses (409) when the name now holds another object; the
//! host takes that as "already gone".

use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, children, status_of, status_patch};

/// The label marking a child for deletion.
pub const EXPIRED: &str = "zoo.rekon.dev/expired";

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
    let mut outcome = Outcome::done();
    let mut live = Vec::new();
    for kid in children(ctx, req, &req.cluster)? {
        let name = kid.metadata.name.clone().unwrap_or_default();
        let expired = kid
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(EXPIRED))
            .is_some_and(|v| v == "true");
        if !expired {
            live.push(name);
            continue;
        }
        let mut delete = Action::delete(ObjectRef::of(&req.cluster, &kid));
        if fixed && let Some(uid) = &kid.metadata.uid {
            delete = delete.uid(uid);
        }
        outcome.push(delete);
    }
    live.sort();
    if status_of(widget).live.as_ref() != Some(&live) {
        outcome.push(status_patch(req, json!({"live": live})));
    }
    Ok(outcome)
}
