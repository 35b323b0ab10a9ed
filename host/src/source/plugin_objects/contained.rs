//! Containment on the Plugin object: `status.contained` (counts per
//! reason, the latest's reason, message and time, the backoff while
//! backed off) from the plugin runtime's record of this replica, written
//! every `status_period` (other status writes carry the last one); and a Warning
//! Event whose reason names the bound, at most one per object per period
//! and only when there were new containments.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Resource as _;
use kube::ResourceExt;
use kube::runtime::events::{Event, EventType};

use super::context::Context;
use super::status::write_status;
use super::verify::truncated;
use crate::source::plugin_crd::{ContainedStatus, Plugin, PluginObjectStatus};

/// What the runtime recorded of `name` (the plugin runs under its object's
/// name), as the status shows it; `None`: never contained.
pub(super) fn contained_status(ctx: &Context, name: &str) -> Option<ContainedStatus> {
    let runtime = ctx.registry.runtime();
    let record = runtime.contained(name)?;
    let backoff = runtime.backoff(name);
    Some(ContainedStatus {
        counts: record.counts,
        last_reason: Some(record.last_reason),
        last_message: Some(truncated(record.last_message)),
        last_time: record.last_time.and_then(|t| {
            k8s_openapi::jiff::Timestamp::try_from(t)
                .ok()
                .map(|t| Time(t.round(k8s_openapi::jiff::Unit::Second).unwrap_or(t)))
        }),
        backoff_seconds: (!backoff.is_zero()).then(|| backoff.as_secs_f64().ceil() as u64),
    })
}

/// Writes `status.contained` of every object whose plugin's containments
/// changed since its status was written, and an Event for those contained
/// again since the last one (the refresh's period is the Events' rate).
pub(super) async fn refresh_contained(ctx: &Context) {
    if !ctx.writes_status() {
        return;
    }
    let _writing = ctx.status_writes.lock().await;
    let objects: Vec<(Arc<Plugin>, PluginObjectStatus, u64)> = ctx
        .entries
        .lock()
        .values()
        .filter_map(|e| {
            let obj = e.latest.clone()?;
            let status = e.written.clone().or_else(|| obj.status.clone())?;
            Some((obj, status, e.contained_evented))
        })
        .collect();
    for (obj, status, evented) in objects {
        let name = obj.name_any();
        if ctx.queue.lock().is_running(&name) {
            continue;
        }
        let now = contained_status(ctx, &name);
        let total: u64 = now.iter().flat_map(|c| c.counts.values()).sum();
        if let Some(now) = now.as_ref().filter(|_| total > evented) {
            publish(ctx, &obj, now, total - evented).await;
            if let Some(e) = ctx.entries.lock().get_mut(&name) {
                e.contained_evented = total;
            }
        }
        // Another process's counts (before a restart) are not this one's.
        if status.contained != now {
            let status = PluginObjectStatus {
                contained: now,
                ..status
            };
            write_status(ctx, &obj, status).await;
        }
    }
}

/// A Warning Event on `obj`: reason the latest bound, the counts in the note.
async fn publish(ctx: &Context, obj: &Plugin, now: &ContainedStatus, new: u64) {
    let reason = now
        .last_reason
        .clone()
        .unwrap_or_else(|| "Contained".into());
    let counts: Vec<String> = now
        .counts
        .iter()
        .map(|(r, n)| format!("{r}: {n}"))
        .collect();
    let backoff = now
        .backoff_seconds
        .map(|s| format!("; backed off: one call per {s}s"))
        .unwrap_or_default();
    let note = format!(
        "{new} call(s) stopped at a bound since the last report ({}){backoff}; latest: {}",
        counts.join(", "),
        now.last_message.as_deref().unwrap_or_default()
    );
    let event = Event {
        type_: EventType::Warning,
        reason,
        note: Some(truncated(note)),
        action: "Contain".to_owned(),
        secondary: None,
    };
    if let Err(err) = ctx.events.publish(&event, &obj.object_ref(&())).await {
        tracing::debug!(plugin = %obj.name_any(), error = %err, "failed to record the containment Event");
    }
}
