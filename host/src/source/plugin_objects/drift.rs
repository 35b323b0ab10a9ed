//! Step 7's repair: the webhook configurations the host manages are
//! watched (the two kinds, selected by the labels every one of them
//! carries: `app.kubernetes.io/managed-by: rekon`, `rekon.dev/source:
//! plugin-object`), and a change that is not the host's own last write (an
//! edit, a deletion) queues a pass of the Plugin object named by its
//! `rekon.dev/plugin` label with what was written forgotten, so the pass
//! writes the configurations again ([`super::webhooks::sync_webhooks`]).
//!
//! This is controller-runtime's way for objects a controller makes
//! (`Owns`/`Watches` with a handler that maps the object to its owner's
//! request): a repair within a watch event's latency, no period to choose,
//! and no write while nothing changed. A periodic re-apply would instead
//! leave a deleted configuration missing (every write admitted, or none)
//! for up to a period and write every configuration at every period. The
//! host's own writes are told apart by the resourceVersion it got back
//! (`ManagedWebhooks::is_own_write`), so they never loop. A configuration
//! whose labels someone removed leaves the selection: it is then someone
//! else's, left alone and reported in `status.webhooks.foreign` by the
//! next sync.

use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, watcher};
use kube::{Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tracing::{info, warn};

use super::context::Context;
use crate::source::managed_webhooks::{MANAGED_BY, PLUGIN_LABEL, SOURCE_LABEL};

/// A managed configuration seen changed or deleted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Drift {
    /// Its plugin (`rekon.dev/plugin`).
    pub(super) plugin: String,
    /// `ValidatingWebhookConfiguration` or `MutatingWebhookConfiguration`.
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) resource_version: Option<String>,
    pub(super) deleted: bool,
}

/// The changes to the configurations the host manages (none without
/// managed configurations).
pub(super) fn drift_events(ctx: &Context) -> BoxStream<'static, Drift> {
    if ctx.webhooks.is_none() {
        return futures::stream::pending().boxed();
    }
    let client = ctx.api.clone().into_client();
    let selector = format!(
        "{}={},{}={}",
        MANAGED_BY.0, MANAGED_BY.1, SOURCE_LABEL.0, SOURCE_LABEL.1
    );
    futures::stream::select(
        watch::<ValidatingWebhookConfiguration>(client.clone(), &selector),
        watch::<MutatingWebhookConfiguration>(client, &selector),
    )
    .boxed()
}

fn watch<K>(client: kube::Client, selector: &str) -> impl Stream<Item = Drift> + Send + 'static
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
        + k8s_openapi::Resource
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<K> = Api::all(client);
    watcher(api, watcher::Config::default().labels(selector))
        .default_backoff()
        .filter_map(|event| async move {
            match event {
                Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                    drift(&obj, false)
                }
                Ok(watcher::Event::Delete(obj)) => drift(&obj, true),
                Ok(_) => None,
                Err(e) => {
                    warn!(kind = <K as k8s_openapi::Resource>::KIND, error = %e, "watch of the managed webhook configurations failed; retrying");
                    None
                }
            }
        })
}

fn drift<K: Resource + k8s_openapi::Resource>(obj: &K, deleted: bool) -> Option<Drift> {
    Some(Drift {
        plugin: obj.labels().get(PLUGIN_LABEL)?.clone(),
        kind: <K as k8s_openapi::Resource>::KIND,
        name: obj.name_any(),
        resource_version: obj.resource_version(),
        deleted,
    })
}

/// Queues a repair of `drift`'s Plugin object when this replica writes
/// statuses, the object exists and the change is not the host's own write;
/// whether it did.
pub(super) fn on_drift(ctx: &Context, drift: Drift) -> bool {
    let Some(managed) = &ctx.webhooks else {
        return false;
    };
    if !ctx.writes_status()
        || managed.is_own_write(
            drift.kind,
            &drift.name,
            drift.resource_version.as_deref(),
            drift.deleted,
        )
    {
        return false;
    }
    {
        let mut entries = ctx.entries.lock();
        let Some(entry) = entries.get_mut(&drift.plugin) else {
            return false;
        };
        // Forgotten: the pass's sync writes them again.
        entry.webhooks = None;
    }
    info!(plugin = %drift.plugin, kind = drift.kind, name = %drift.name, deleted = drift.deleted,
        "a webhook configuration the host manages was changed or deleted by someone else: writing it again");
    ctx.queue
        .lock()
        .add(drift.plugin, "webhook configuration changed");
    true
}
