//! # `generate-name-lag` — create-if-absent with `generateName` under cache lag
//!
//! **Class:** stale state (Sieve). The Widget wants exactly one child.
//! **Buggy:** it lists its children and, when it sees none, creates one
//! named by `generateName` (`<widget>-` and five random characters). **In
//! production:** the informer lags behind the create (or a watch reconnects
//! and replays an older list); the next reconcile sees no child and creates
//! a second one under another random name. create-if-absent is only
//! idempotent when the name is.
//!
//! It records the number of children it sees in `status.children` (0 in
//! the reconcile that creates the first).
//!
//! **Found by:** `stale` on the reconcile that records 1 (its list served
//! as it was before the create), then `counts` (two creates of `<widget>-…`
//! instead of one) and `end-state` (an extra child).
//!
//! **Fix:** a deterministic name (`<widget>-child`): the second create is an
//! AlreadyExists, which create-if-absent takes as done.
//!
//! The buggy variant leaves the name to the API server
//! (`metadata.generateName` and no name): the server draws the suffix,
//! read-your-writes shows the child under the name it was given.

use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, children, status_of, status_patch};

/// The fixed twin's child name (`<widget>-child`).
pub use crate::child_name as fixed_name;

/// The buggy variant's `generateName` prefix.
#[must_use]
pub fn prefix(req: &Request) -> String {
    format!("{}-", req.name)
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
    let kids = children(ctx, req, &req.cluster)?;
    let mut outcome = Outcome::done();
    if kids.is_empty() {
        let object = if fixed {
            child(req, &fixed_name(req), &[("made-by", "zoo")])
        } else {
            // Named by the server: every create makes another child.
            let mut object = child(req, "", &[("made-by", "zoo")]);
            object.metadata.name = None;
            object.metadata.generate_name = Some(prefix(req));
            object
        };
        outcome.push(Action::create(&req.cluster, &object));
    }
    // The children seen, recorded when it changed (0 beside the create).
    let count = u32::try_from(kids.len()).unwrap_or(u32::MAX);
    if status_of(widget).children != Some(count) {
        outcome.push(status_patch(req, json!({"children": count})));
    }
    Ok(outcome)
}
