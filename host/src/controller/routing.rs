//! The event pump: cache events become requests.
//!
//! [`run_events`] drains the controller's [`Inbox`] (coalesced per object,
//! so bounded), maps each event natively ([`super::mapping`]) along the
//! routes of [`super::scope`] and queues the keys; events with the `custom`
//! mapping go to a second inbox drained by a few workers that call the
//! plugin's `map`, so a slow `map` never holds up the pump.

use std::sync::Arc;

use rekon_rules::Step;
use tokio::task::JoinSet;
use tracing::warn;

use super::mapping::{Mapped, map_event};
use super::runner::Shared;
use super::scope::Route;
use crate::action::Mapping;
use crate::cache::{CacheEvent, Change, Inbox};
use crate::queue::ReqKey;

/// Concurrent `map` calls per controller.
const CUSTOM_MAP_WORKERS: usize = 2;

/// Route cache events through the mappings into the queue until the inbox
/// closes. `custom` mappings go to `custom` (drained by
/// [`CUSTOM_MAP_WORKERS`] workers), never called inline.
pub(crate) async fn run_events(shared: Arc<Shared>, inbox: Arc<Inbox>, custom: Arc<Inbox>) {
    let mut workers = JoinSet::new();
    for _ in 0..CUSTOM_MAP_WORKERS {
        workers.spawn(run_custom_maps(Arc::clone(&shared), Arc::clone(&custom)));
    }
    while let Some((tag, events)) = inbox.take().await {
        let Some(route) = shared.route(tag) else {
            continue;
        };
        for event in events {
            route_event(&shared, &route, tag, &event, &custom);
        }
    }
    custom.close();
    while workers.join_next().await.is_some() {}
}

fn reason(event: &CacheEvent) -> String {
    let change = match event.change {
        Change::Applied => "changed",
        Change::Deleted => "deleted",
    };
    let obj = &event.object.key;
    match obj.namespace() {
        Some(ns) => format!(
            "{} {ns}/{} {change} in {}",
            event.resource.kind, obj.name, event.cluster
        ),
        None => format!(
            "{} {} {change} in {}",
            event.resource.kind, obj.name, event.cluster
        ),
    }
}

fn route_event(shared: &Shared, route: &Route, tag: u64, event: &Arc<CacheEvent>, custom: &Inbox) {
    let scope = shared.scope();
    for m in &route.mappings {
        if m.selector
            .as_ref()
            .is_some_and(|s| !s.matches(&event.object.labels))
        {
            continue;
        }
        match map_event(&m.mapping, event, &scope.resource) {
            Mapped::Keys(keys) => {
                // The primary itself: only what the scope says is ours
                // (a primary, or an object still carrying our finalizer).
                if matches!(m.mapping, Mapping::Itself)
                    && event.change == Change::Applied
                    && scope.step(&event.cluster, &event.object) == Step::Ignore
                {
                    continue;
                }
                for key in keys {
                    shared.enqueue(key, &reason(event));
                }
            }
            Mapped::AllPrimaries => shared.requeue_all(&reason(event)),
            Mapped::Custom => custom.push(tag, Arc::clone(event)),
        }
    }
}

async fn run_custom_maps(shared: Arc<Shared>, custom: Arc<Inbox>) {
    while let Some((tag, events)) = custom.take().await {
        let Some(route) = shared.route(tag) else {
            continue;
        };
        for event in events {
            let plugin = shared.plugin();
            let result = plugin
                .map(
                    &event.cluster,
                    &route.resource,
                    event.object.json.to_string(),
                    shared.reads(),
                )
                .await;
            match result {
                Ok(requests) => {
                    for r in requests {
                        shared.enqueue(
                            ReqKey {
                                cluster: r.cluster,
                                namespace: r.namespace,
                                name: r.name,
                            },
                            &reason(&event),
                        );
                    }
                }
                Err(e) => {
                    warn!(plugin = %shared.name, cluster = %event.cluster, object = %event.object.key.name, error = %e, "custom mapping failed; event dropped");
                }
            }
        }
    }
}
