//! # `cleanup-lag` — a cleanup that trusts a member cluster's lagging cache
//!
//! **Class:** multi-cluster stale state. The Widget gets a copy (a
//! ConfigMap of its name) in every cluster, and a finalizer to remove them.
//! Once `status.created` says the copies were made, live reconciles read
//! nothing more. **Buggy:** the cleanup lists the copies each cluster's
//! cache shows, deletes those, and releases the finalizer. **In
//! production:** the Widget is deleted while a member cluster's informer
//! is behind (its watch reconnected to an API server serving an older list):
//! main's informer shows the Widget deleting, edge's does not show the copy
//! made earlier; the cleanup deletes nothing there, releases, and the copy
//! is orphaned with nothing left that would ever delete it.
//!
//! **Found by:** `stale` on the cleanup reconcile (each copy informer as
//! the first reconcile saw it, the primary's current), then the
//! `end-state` oracle (the copies the reference deletes are left).
//!
//! **Fix:** delete every copy by its name whatever a cache shows (an absent
//! one is a success); the host releases only once the deletes succeeded.

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, child, children, namespace, status_of, status_patch};

/// One reconcile of a Widget (live or being deleted).
///
/// # Errors
/// A failed cache read.
pub fn reconcile(
    ctx: &Context,
    req: &Request,
    event: &Event<Widget>,
    fixed: bool,
) -> Result<Outcome, Error> {
    let ns = namespace(req)?;
    let mut clusters = ctx.clusters();
    clusters.sort_by(|a, b| a.name.cmp(&b.name));
    let mut outcome = Outcome::done();
    if event.is_cleanup() {
        for cluster in &clusters {
            if fixed {
                outcome.push(Action::delete(ObjectRef::new::<ConfigMap>(
                    &cluster.name,
                    Some(ns),
                    &req.name,
                )));
                continue;
            }
            // Buggy: what the cache shows is all there is.
            for copy in children(ctx, req, &cluster.name)? {
                if let Some(name) = copy.metadata.name.as_deref() {
                    outcome.push(Action::delete(ObjectRef::new::<ConfigMap>(
                        &cluster.name,
                        Some(ns),
                        name,
                    )));
                }
            }
        }
        return Ok(outcome);
    }
    if status_of(event.primary()).created == Some(true) {
        return Ok(outcome);
    }
    for cluster in &clusters {
        // Its copy, by name among what the owner labels select (others may
        // carry them too); a cache behind that misses it makes the create
        // an AlreadyExists, which create-if-absent takes as done.
        let copies = children(ctx, req, &cluster.name)?;
        if !copies
            .iter()
            .any(|c| c.metadata.name.as_deref() == Some(req.name.as_str()))
        {
            outcome.push(Action::create(
                &cluster.name,
                &child(req, &req.name, &[("cluster", &cluster.name)]),
            ));
        }
    }
    // Last: the status says what the actions above made.
    outcome.push(status_patch(req, json!({"created": true})));
    Ok(outcome)
}
