//! # `list-order` — a decision that depends on list order
//!
//! **Class:** nondeterminism hidden in the API. The Widget's members are
//! ConfigMaps with its owner labels; the plugin elects one as leader and
//! keeps it in `status.leader` for as long as it exists (a sticky choice:
//! re-electing would disturb the members). **Buggy:** the leader is the
//! first member the list returns. **In production:** list order is not
//! part of the API contract; it differs between a watch cache and etcd,
//! between API server versions, after a restart — two replicas (or one
//! replica before and after a restart) elect different leaders.
//!
//! **Found by:** `shuffle` (list reads in a seeded random order), then
//! `end-state` (another leader than the reference's).
//!
//! **Fix:** sort by name before choosing.

use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, children, status_of, status_patch};

/// The leader among `members` (names in list order): buggy, the first
/// listed; fixed, the first by name.
#[must_use]
pub fn elect(mut members: Vec<String>, fixed: bool) -> Option<String> {
    if fixed {
        members.sort();
    }
    members.into_iter().next()
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
    let members: Vec<String> = children(ctx, req, &req.cluster)?
        .into_iter()
        .filter_map(|m| m.metadata.name)
        .collect();
    let current = status_of(widget).leader;
    if current.as_ref().is_some_and(|l| members.contains(l)) {
        return Ok(Outcome::done());
    }
    let leader = elect(members, fixed);
    if leader == current {
        return Ok(Outcome::done());
    }
    Ok(Outcome::done().with(status_patch(req, json!({"leader": leader}))))
}
