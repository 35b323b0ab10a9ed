//! # `full-object-write` — a full-object write that overwrites another writer's field
//!
//! **Class:** stale state / lost update. The ConfigMap `<widget>-shared`
//! belongs to someone else (its `data.other`, written by the scenario); the
//! plugin owns one key of it, `data.clusters`: the names of the ready
//! clusters (it is told of every health change, and records their number
//! in `status.readyClusters`). **Buggy:** it copies the whole `data` map it
//! read from the cache, sets `clusters`, and merge-patches the whole map
//! back. **In production:** the cache is behind the other writer's last
//! update; the patch writes the old value of `other` back over the new one
//! — a silent revert of someone else's change.
//!
//! **Found by:** `stale` on the reconcile after `edge` goes down (the shared
//! ConfigMap served as it was before the other writer's update), then
//! `end-state` (`data.other` reverted).
//!
//! **Fix:** server-side apply of only its own field (`data.clusters`, field
//! manager `rekon.zoo`): what it does not name, it does not write.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use rekon_sdk::prelude::*;
use serde_json::json;

use crate::{Widget, namespace, status_of, status_patch};

/// The key the plugin owns.
pub const KEY: &str = "clusters";

/// The shared ConfigMap's name.
#[must_use]
pub fn shared_name(req: &Request) -> String {
    format!("{}-shared", req.name)
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
    let mut ready: Vec<String> = ctx
        .clusters()
        .into_iter()
        .filter(ClusterInfo::is_ready)
        .map(|c| c.name)
        .collect();
    ready.sort();
    let mut outcome = Outcome::done();
    let count = u32::try_from(ready.len()).unwrap_or(u32::MAX);
    if status_of(widget).ready_clusters != Some(count) {
        outcome.push(status_patch(req, json!({"readyClusters": count})));
    }
    let ns = namespace(req)?;
    let name = shared_name(req);
    // The other writer creates it; until then there is nothing to write to.
    let Some(shared) = ctx.get::<ConfigMap>(&req.cluster, Some(ns), &name)? else {
        return Ok(outcome);
    };
    let value = ready.join(",");
    let mut data = shared.data.clone().unwrap_or_default();
    if data.get(KEY) == Some(&value) {
        return Ok(outcome);
    }
    if fixed {
        let mine = ConfigMap {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(ns.to_owned()),
                ..ObjectMeta::default()
            },
            data: Some(BTreeMap::from([(KEY.to_owned(), value)])),
            ..ConfigMap::default()
        };
        return Ok(outcome.with(Action::apply(&req.cluster, &mine).force()));
    }
    data.insert(KEY.to_owned(), value);
    Ok(outcome.with(Action::merge_patch(
        ObjectRef::of(&req.cluster, &shared),
        json!({"data": data}),
    )))
}
