//! Step 6, write status: what this replica serves goes into its report
//! ([`crate::lease::reports`]); the status writer (the leader, with
//! `--shards` the holder of shard 0) sets `Consistent` and
//! `status.replicas` from every live replica's report and writes the
//! status. Also the periodic refreshes of `Consistent` and shadow counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use kube::ResourceExt;
use kube::api::{Patch, PatchParams};
use serde_json::json;
use tracing::warn;

use super::conditions::set;
use super::context::{Context, origin, shadow_origin};
use super::shadow::shadow_counts;
use crate::lease::shard::Shards;
use crate::source::plugin_crd::{
    CONSISTENT, DEGRADED, Plugin, PluginObjectStatus, ReplicaStatus, ShadowStatus,
};

/// What a pass changed of what this replica serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Served {
    /// The digest of the module the pass made serve.
    pub(super) digest: Option<String>,
    /// The shadow the pass made run (`Some(None)`: none any more).
    pub(super) shadow: Option<Option<String>>,
}

/// After a pass over `name`: remembers what serves here and why the
/// desired version does not (from `status`, `None` when the pass had
/// nothing to do), publishes the report, and writes `status`. Nothing for
/// an object deleted meanwhile.
pub(super) async fn record(
    ctx: &Context,
    name: &str,
    status: Option<PluginObjectStatus>,
    served: &Served,
) {
    let _writing = ctx.status_writes.lock().await;
    let latest = {
        let mut entries = ctx.entries.lock();
        let Some(entry) = entries.get_mut(name) else {
            return;
        };
        if let Some(status) = &status {
            let here = &mut entry.here;
            here.generation = status.observed_generation;
            if let Some(d) = &served.digest {
                here.digest = Some(d.clone());
            }
            if let Some(d) = &served.shadow {
                here.shadow_digest.clone_from(d);
            }
            here.problem = status
                .conditions
                .iter()
                .find(|c| c.type_ == DEGRADED && c.status == "True")
                .map(|c| (c.reason.clone(), c.message.clone()));
        }
        if ctx.registry.serving(&origin(name)).is_none() {
            entry.here.digest = None;
        }
        if ctx.registry.serving(&shadow_origin(name)).is_none() {
            entry.here.shadow_digest = None;
        }
        entry.latest.clone()
    };
    publish_report(ctx);
    if let (Some(obj), Some(status)) = (latest, status) {
        write_status(ctx, &obj, status).await;
    }
}

/// What this replica serves of each Plugin object, as its report.
pub(super) fn report(ctx: &Context) -> serde_json::Value {
    let shards = ctx.shards.as_ref().map(Shards::held);
    let identity = ctx.reports.identity().to_owned();
    let plugins: BTreeMap<String, ReplicaStatus> = ctx
        .entries
        .lock()
        .iter()
        .map(|(name, e)| {
            let here = &e.here;
            let status = ReplicaStatus {
                identity: identity.clone(),
                digest: here.digest.clone(),
                shadow_digest: here.shadow_digest.clone(),
                observed_generation: here.generation,
                suspended: e.latest.as_ref().is_some_and(|o| o.spec.suspend),
                shards: shards.clone(),
                reason: here.problem.as_ref().map(|p| p.0.clone()),
                message: here.problem.as_ref().map(|p| p.1.clone()),
            };
            (name.clone(), status)
        })
        .collect();
    json!({ "plugins": plugins })
}

/// Publishes [`report`] as this replica's.
pub(super) fn publish_report(ctx: &Context) {
    ctx.reports.set_own(report(ctx));
}

/// `status` with `Consistent` and `status.replicas` from the live
/// reports: every live replica must serve the digest (and shadow digest)
/// this replica serves for the current generation.
fn with_consistency(
    ctx: &Context,
    name: &str,
    mut status: PluginObjectStatus,
) -> PluginObjectStatus {
    let here = ctx
        .entries
        .lock()
        .get(name)
        .map(|e| e.here.clone())
        .unwrap_or_default();
    let replicas: Vec<ReplicaStatus> = ctx
        .reports
        .live()
        .into_iter()
        .map(|r| {
            r.report
                .get("plugins")
                .and_then(|p| p.get(name))
                .and_then(|v| serde_json::from_value::<ReplicaStatus>(v.clone()).ok())
                .map_or_else(
                    || ReplicaStatus {
                        identity: r.identity.clone(),
                        reason: Some("NotLoaded".to_owned()),
                        message: Some("has not taken up this Plugin yet".to_owned()),
                        ..ReplicaStatus::default()
                    },
                    |s| ReplicaStatus {
                        identity: r.identity.clone(),
                        ..s
                    },
                )
        })
        .collect();
    let generation = status.observed_generation;
    let identity = ctx.reports.identity();
    let (value, reason, message) = match (&here.digest, &here.problem) {
        (_, Some((why, what))) if here.generation == generation => (
            false,
            "DesiredUnresolved",
            format!(
                "the desired version does not serve on the replica writing this status ({identity}): {why}: {what}"
            ),
        ),
        (None, _) => (
            false,
            "DesiredUnresolved",
            format!("nothing serves on the replica writing this status ({identity})"),
        ),
        (Some(desired), _) => {
            let lagging: Vec<String> = replicas
                .iter()
                .filter(|r| {
                    r.digest.as_ref() != Some(desired) || r.shadow_digest != here.shadow_digest
                })
                .map(describe_lag)
                .collect();
            let shadow = here
                .shadow_digest
                .as_ref()
                .map(|s| format!(" (shadow {s})"))
                .unwrap_or_default();
            if lagging.is_empty() {
                (
                    true,
                    "AllReplicasServing",
                    format!(
                        "all {} live replicas serve {desired}{shadow}",
                        replicas.len()
                    ),
                )
            } else {
                (
                    false,
                    "ReplicasLag",
                    format!(
                        "{} of {} live replicas do not serve {desired}{shadow}: {}",
                        lagging.len(),
                        replicas.len(),
                        lagging.join("; ")
                    ),
                )
            }
        }
    };
    status.replicas = replicas;
    set(&mut status, CONSISTENT, value, reason, &message);
    status
}

/// `IDENTITY serves DIGEST (shadow S): REASON: MESSAGE`.
fn describe_lag(r: &ReplicaStatus) -> String {
    let serves = match (&r.digest, &r.shadow_digest) {
        (None, _) => "serves nothing".to_owned(),
        (Some(d), None) => format!("serves {d}"),
        (Some(d), Some(s)) => format!("serves {d} (shadow {s})"),
    };
    match (&r.reason, &r.message) {
        (Some(why), Some(what)) => format!("{} {serves}: {why}: {what}", r.identity),
        (Some(why), None) => format!("{} {serves}: {why}", r.identity),
        _ => format!("{} {serves}", r.identity),
    }
}

/// The status writer brings `Consistent` up to date with the reports
/// (objects whose current generation this replica has worked on and that
/// no pass is working on).
pub(super) async fn refresh_consistency(ctx: &Context) {
    if !ctx.writes_status() {
        return;
    }
    let _writing = ctx.status_writes.lock().await;
    let objects: Vec<(Arc<Plugin>, PluginObjectStatus)> = ctx
        .entries
        .lock()
        .values()
        .filter_map(|e| {
            let obj = e.latest.clone()?;
            let status = e.written.clone().or_else(|| obj.status.clone())?;
            (e.here.generation.is_some()
                && e.here.generation == obj.metadata.generation
                && status.observed_generation == obj.metadata.generation)
                .then_some((obj, status))
        })
        .collect();
    for (obj, status) in objects {
        if !ctx.queue.lock().is_running(&obj.name_any()) {
            write_status(ctx, &obj, status).await;
        }
    }
}

/// Writes the shadow counts of every object with a serving shadow that no
/// pass is working on.
pub(super) async fn refresh_shadow_counts(ctx: &Context) {
    let _writing = ctx.status_writes.lock().await;
    let objects: Vec<Arc<Plugin>> = ctx
        .entries
        .lock()
        .values()
        .filter_map(|e| e.latest.clone())
        .filter(|o| o.spec.shadow.is_some())
        .collect();
    for obj in objects {
        let name = obj.name_any();
        if ctx.queue.lock().is_running(&name) {
            continue;
        }
        let Some(mut status) = ctx
            .entries
            .lock()
            .get(&name)
            .and_then(|e| e.written.clone().or_else(|| obj.status.clone()))
        else {
            continue;
        };
        let Some(shadow) = status.shadow.as_mut() else {
            continue;
        };
        let now = ShadowStatus {
            digest: shadow.digest.clone(),
            ..shadow_counts(ctx, &name)
        };
        if *shadow == now {
            continue;
        }
        *shadow = now;
        write_status(ctx, &obj, status).await;
    }
}

/// Writes `status` (with `Consistent` from the reports) unless this
/// replica does not write statuses or it says nothing new. Callers hold
/// [`Context::status_writes`].
pub(super) async fn write_status(ctx: &Context, obj: &Plugin, status: PluginObjectStatus) {
    let name = obj.name_any();
    if !ctx.writes_status() {
        return;
    }
    let mut status = with_consistency(ctx, &name, status);
    status.webhooks = super::webhooks::webhooks_status(ctx, obj);
    let unchanged = ctx
        .entries
        .lock()
        .get(&name)
        .and_then(|e| e.written.as_ref())
        .is_some_and(|w| *w == status);
    if unchanged || obj.status.as_ref() == Some(&status) {
        return;
    }
    // A merge patch leaves out what is absent: clear what is gone.
    let mut body = serde_json::to_value(&status).unwrap_or_else(|_| json!({}));
    if let Some(map) = body.as_object_mut() {
        for key in [
            "digest",
            "version",
            "shadow",
            "replicas",
            "contained",
            "webhooks",
        ] {
            map.entry(key).or_insert(serde_json::Value::Null);
        }
        if let Some(shadow) = map.get_mut("shadow").and_then(|s| s.as_object_mut()) {
            for key in ["digest", "recent", "admission"] {
                shadow.entry(key).or_insert(serde_json::Value::Null);
            }
        }
    }
    let patch = Patch::Merge(json!({ "status": body }));
    let params = PatchParams::default();
    match ctx.api.patch_status(&name, &params, &patch).await {
        Ok(_) => {
            if let Some(e) = ctx.entries.lock().get_mut(&name) {
                e.written = Some(status);
            }
        }
        Err(e) => {
            warn!(plugin = %name, error = %e, "failed to write the status of a Plugin object");
        }
    }
}
