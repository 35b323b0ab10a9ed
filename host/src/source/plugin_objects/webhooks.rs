//! Step 7, admission configurations: the status writer makes the webhook
//! configurations of each Plugin object say the admission rules of its
//! serving version ([`crate::source::managed_webhooks`]): after each pass (the
//! serving version may have changed: a promotion's rules are applied as
//! soon as it serves, and its route answers with it from the moment it
//! serves), at each status refresh (a new status writer, a rotated
//! certificate) and when the object goes. What was written is in
//! `status.webhooks`.

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;

use super::context::{Context, origin};
use super::status::write_status;
use crate::plugin::AdmissionRule;
use crate::source::plugin_crd::Plugin;

/// Brings `name`'s configurations up to date when this replica writes
/// statuses and they were written from other rules (or a CA) than the
/// serving version's now; `true` when what its status says of them
/// changed. A deleted object's configurations are removed.
pub(super) async fn sync_webhooks(ctx: &Context, name: &str) -> bool {
    let Some(managed) = &ctx.webhooks else {
        return false;
    };
    if !ctx.writes_status() {
        return false;
    }
    let known = ctx.entries.lock().contains_key(name);
    let rules: Vec<AdmissionRule> = if known {
        // Nothing serves (yet: a first fetch failed): the configurations
        // stay as they are, failing as their failure policy says, rather
        // than be removed and admit everything.
        let Some(serving) = ctx.registry.serving(&origin(name)) else {
            return false;
        };
        serving.admission_rules().to_vec()
    } else {
        Vec::new()
    };
    let key = managed.key(&rules);
    let before = ctx
        .entries
        .lock()
        .get(name)
        .and_then(|e| e.webhooks.clone());
    if before
        .as_ref()
        .is_some_and(|(k, s)| *k == key && s.error.is_none())
    {
        return false;
    }
    let status = managed.sync(name, &rules).await;
    let mut entries = ctx.entries.lock();
    let Some(entry) = entries.get_mut(name) else {
        return false;
    };
    let changed = before.as_ref().map(|(_, s)| s) != Some(&status);
    entry.webhooks = Some((key, status));
    changed
}

/// The configurations of every object brought up to date; statuses whose
/// `webhooks` changed written (objects no pass is working on).
pub(super) async fn refresh_webhooks(ctx: &Context) {
    if ctx.webhooks.is_none() || !ctx.writes_status() {
        return;
    }
    remove_orphans(ctx).await;
    let names: Vec<String> = ctx.entries.lock().keys().cloned().collect();
    for name in names {
        if ctx.queue.lock().is_running(&name) || !sync_webhooks(ctx, &name).await {
            continue;
        }
        let _writing = ctx.status_writes.lock().await;
        let current: Option<(Arc<Plugin>, _)> = ctx.entries.lock().get(&name).and_then(|e| {
            let obj = e.latest.clone()?;
            let status = e.written.clone().or_else(|| obj.status.clone())?;
            Some((obj, status))
        });
        if let Some((obj, status)) = current {
            write_status(ctx, &obj, status).await;
        }
    }
}

/// Once the Plugin objects were listed: removes the configurations
/// written for Plugin objects that do not exist (deleted while no host
/// ran); once per process, tried again at each refresh until it succeeds.
async fn remove_orphans(ctx: &Context) {
    use std::sync::atomic::Ordering;
    let Some(managed) = &ctx.webhooks else {
        return;
    };
    let sweep = &ctx.orphan_sweep;
    if !sweep.listed.load(Ordering::Acquire) || sweep.done.load(Ordering::Acquire) {
        return;
    }
    let plugins: BTreeSet<String> = ctx.entries.lock().keys().cloned().collect();
    let (removed, errors) = managed.remove_orphans(&plugins).await;
    if !removed.is_empty() {
        tracing::info!(
            ?removed,
            "removed the webhook configurations of Plugin objects that no longer exist"
        );
    }
    for e in &errors {
        tracing::warn!(error = %e, "failed to look for the webhook configurations of deleted Plugin objects");
    }
    sweep.done.store(errors.is_empty(), Ordering::Release);
}

/// Removes `name`'s configurations (the status writer only): the Plugin
/// object went, or serves a version without rules.
pub(super) async fn remove_webhooks(ctx: &Context, name: &str) {
    let Some(managed) = &ctx.webhooks else {
        return;
    };
    if !ctx.writes_status() {
        return;
    }
    match managed.remove(name).await {
        Ok(foreign) if !foreign.is_empty() => {
            tracing::warn!(plugin = %name, ?foreign, "webhook configurations of this name not made by rekon are left alone");
        }
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(plugin = %name, error = %e, "failed to remove the webhook configurations of a Plugin object");
        }
    }
}

/// The `status.webhooks` of `obj` as this replica last wrote them.
pub(super) fn webhooks_status(
    ctx: &Context,
    obj: &Plugin,
) -> Option<crate::source::plugin_crd::WebhooksStatus> {
    ctx.entries
        .lock()
        .get(&obj.name_any())
        .and_then(|e| e.webhooks.as_ref().map(|(_, s)| s.clone()))
        .filter(|s| *s != Default::default())
}
