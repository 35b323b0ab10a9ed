//! # `finalizer-unreachable` — finalizer released while a cluster is unreachable
//!
//! **Class:** multi-cluster cleanup. The Widget gets a child ConfigMap of
//! its name in every engaged cluster; its finalizer ([`crate::FINALIZER`])
//! is there to delete them. **Buggy:** the cleanup deletes the children in
//! the clusters it can reach, skips the others ("cannot reach it, nothing
//! to do") and returns `Ok`, which releases the finalizer. **In
//! production:** a member cluster is partitioned during the deletion; the
//! Widget is gone for good and its child in that cluster is orphaned, with
//! nothing left that would ever delete it.
//!
//! **Found by:** `cluster-down` of `edge` during the settle after the
//! delete step, then the `end-state` oracle (the child in `edge`, deleted in
//! the reference, is still there) and `counts` (one delete fewer).
//!
//! **Fix:** keep the finalizer ([`Outcome::keep_finalizer`] with a requeue)
//! until every cluster is ready; then the deletes go out with the release
//! (the host releases only once every delete succeeded). The deletes name
//! the child whatever the cache shows: a cache behind the plugin's own
//! create would show none, and releasing on that would orphan it too.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;

use crate::{Widget, child, namespace};

/// How soon to look again while a cluster is not ready (the host also
/// requeues every Widget when a cluster's health changes).
pub const RETRY: Duration = Duration::from_secs(30);

/// One reconcile of a Widget (live or being deleted).
///
/// # Errors
/// A failed cache read of a ready cluster.
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
    // A cluster that is not ready.
    let mut unreachable = false;
    for cluster in &clusters {
        if !cluster.is_ready() {
            unreachable = true;
            continue;
        }
        if event.is_cleanup() {
            // By name, whatever the cache shows (a cache behind may not
            // show the child yet; an absent one is a success).
            outcome.push(Action::delete(ObjectRef::new::<ConfigMap>(
                &cluster.name,
                Some(ns),
                &req.name,
            )));
        } else if ctx
            .get::<ConfigMap>(&cluster.name, Some(ns), &req.name)?
            .is_none()
        {
            outcome.push(Action::create(
                &cluster.name,
                &child(req, &req.name, &[("cluster", &cluster.name)]),
            ));
        }
    }
    if event.is_cleanup() {
        // Buggy: whatever could not be reached is forgotten, the `Ok`
        // releases the finalizer (once the deletes succeeded).
        if fixed && unreachable {
            return Ok(outcome.keep_finalizer().requeue_after(RETRY));
        }
        return Ok(outcome);
    }
    if clusters.iter().any(|c| !c.is_ready()) {
        outcome = outcome.requeue_after(RETRY);
    }
    Ok(outcome)
}
