//! Step 7, admission configurations: the status writer makes the webhook
//! configurations of each Plugin object say the admission rules of its
//! serving version ([`crate::source::managed_webhooks`]): after each pass (the
//! serving version may have changed: a promotion's rules are applied as
//! soon as it serves, and its route answers with it from the moment it
//! serves), at each status refresh (a new status writer, a rotated
//! certificate) and when the object goes. What was written is in
//! `status.webhooks`. The same for the conversion of the CRDs the serving
//! version converts ([`crate::source::managed_conversion`]).

use std::collections::BTreeSet;
use std::sync::Arc;

use kube::ResourceExt;

use super::context::{Context, origin};
use super::status::write_status;
use crate::plugin::AdmissionRule;
use crate::source::managed_conversion::converted_crds;
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
    let (rules, crds): (Vec<AdmissionRule>, BTreeSet<String>) = if known {
        // Nothing serves (yet: a first fetch failed): the configurations
        // stay as they are, failing as their failure policy says, rather
        // than be removed and admit everything.
        let Some(serving) = ctx.registry.serving(&origin(name)) else {
            return false;
        };
        (
            serving.admission_rules().to_vec(),
            converted_crds(serving.conversion_rules(), &serving.registration().crds),
        )
    } else {
        Default::default()
    };
    let key = managed.key(&rules, &crds);
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
    let status = managed.sync(name, &rules, &crds).await;
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::Duration;

    use futures::future::BoxFuture;
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
    };
    use kube::api::{Api, PostParams};
    use parking_lot::Mutex;

    use super::*;
    use crate::lease::reports::ReportBoard;
    use crate::plugin::{LoadOptions, PluginRegistry, PluginRuntime, RuntimeConfig};
    use crate::queue::WorkQueue;
    use crate::source::managed_webhooks::{ManagedWebhooks, WebhookCa, WebhookTarget};
    use crate::source::plugin_objects::context::{Entry, PluginObjectsConfig};
    use crate::source::plugin_objects::module_source::{
        FetchFailure, FetchRequest, Module, ModuleSource, VerifyRequest,
    };
    use crate::source::signature::{Verified, VerifyError};
    use crate::source::webhook_configs::Client;
    use crate::telemetry::metrics::Metrics;
    use crate::telemetry::serving_cert::ServingCert;

    /// Fetches nothing: the modules here are loaded directly.
    struct NoSource;

    impl ModuleSource for NoSource {
        fn fetch(&self, request: FetchRequest) -> BoxFuture<'static, Result<Module, FetchFailure>> {
            Box::pin(async move {
                Err(FetchFailure {
                    reason: "RegistryUnreachable",
                    message: format!("{} is not fetched here", request.reference),
                    transient: true,
                })
            })
        }

        fn cached(&self, _: &str) -> BoxFuture<'static, Option<Module>> {
            Box::pin(async { None })
        }

        fn verify(&self, _: VerifyRequest) -> BoxFuture<'static, Result<Verified, VerifyError>> {
            unreachable!("nothing is verified here")
        }
    }

    async fn context(sim: &kube_sim::Sim) -> Context {
        let client = crate::cluster::connect(
            "main",
            &crate::cluster::Source::Context {
                kubeconfig: Some(sim.kubeconfig_path().to_path_buf()),
                context: Some("main".to_owned()),
            },
            &crate::cluster::default_user_agent(),
        )
        .await
        .expect("a client of the sim");
        let runtime = PluginRuntime::new(RuntimeConfig {
            memory_limit_bytes: 64 << 20,
            call_timeout: Duration::from_secs(5),
            max_concurrent_instances: 4,
            ..RuntimeConfig::default()
        })
        .expect("runtime starts");
        let config = PluginObjectsConfig::new("rekon-system");
        let cert = ServingCert::self_signed(vec!["localhost".into()]).expect("a certificate");
        let target = WebhookTarget {
            client: Client::Url("https://localhost:9443".into()),
            ca: WebhookCa::new(None, Arc::new(cert)),
        };
        Context {
            api: Api::all(client.clone()),
            secrets: Api::namespaced(client.clone(), &config.namespace),
            config_maps: Api::namespaced(client.clone(), &config.namespace),
            events: super::super::context::recorder(client.clone()),
            registry: PluginRegistry::new(runtime),
            source: Arc::new(NoSource),
            status_gate: None,
            queue: Mutex::new(WorkQueue::with_backoff(config.backoff())),
            metrics: Metrics::new(),
            entries: Mutex::new(HashMap::new()),
            status_writes: tokio::sync::Mutex::new(()),
            reports: ReportBoard::local("replica-a"),
            shards: None,
            webhooks: Some(ManagedWebhooks::new(client, target, &config.field_manager)),
            orphan_sweep: Default::default(),
            config,
        }
    }

    /// The configurations follow the version serving: kept while nothing
    /// serves (a first fetch failing must not admit everything), applied
    /// once it serves, not rewritten for the same rules, removed when the
    /// object goes; an orphan is swept once the objects were listed.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn configurations_follow_the_serving_version_and_stay_while_nothing_serves() {
        tokio::time::timeout(Duration::from_secs(60), async {
            let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
            let ctx = context(&sim).await;
            let client = ctx.api.clone().into_client();
            let validating: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let mutating: Api<MutatingWebhookConfiguration> = Api::all(client);
            ctx.entries
                .lock()
                .insert("widgets".into(), Entry::default());

            // An earlier writer's configuration; nothing serves here yet.
            let earlier: ValidatingWebhookConfiguration =
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "rekon-widgets", "labels": {
                        "app.kubernetes.io/managed-by": "rekon", "rekon.dev/plugin": "widgets",
                        "rekon.dev/source": "plugin-object"}},
                    "webhooks": []
                }))
                .unwrap();
            validating
                .create(&PostParams::default(), &earlier)
                .await
                .unwrap();
            assert!(!sync_webhooks(&ctx, "widgets").await);
            let kept = validating.get("rekon-widgets").await.expect("kept");
            assert!(kept.webhooks.unwrap_or_default().is_empty());

            // It serves: its rules are applied and named in the status.
            let bytes = std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("../dist/test-plugins/widgets.wasm"),
            )
            .expect("widgets.wasm: run `make test-plugins` first");
            ctx.registry
                .apply_module(
                    &origin("widgets"),
                    &bytes,
                    &LoadOptions::default().with_instance(Some("widgets")),
                    |_| Ok(()),
                )
                .expect("widgets loads");
            assert!(sync_webhooks(&ctx, "widgets").await);
            let status = ctx
                .entries
                .lock()
                .get("widgets")
                .and_then(|e| e.webhooks.clone())
                .map(|(_, s)| s)
                .expect("a status");
            assert_eq!(status.validating.as_deref(), Some("rekon-widgets"));
            assert_eq!(status.mutating.as_deref(), Some("rekon-widgets"));
            let applied = validating.get("rekon-widgets").await.unwrap();
            assert_eq!(
                applied.webhooks.unwrap_or_default()[0].name,
                "size.widgets.rekon.dev"
            );
            // The same rules and CA: nothing to write.
            assert!(!sync_webhooks(&ctx, "widgets").await);

            // The object goes.
            ctx.entries.lock().remove("widgets");
            remove_webhooks(&ctx, "widgets").await;
            assert!(validating.get_opt("rekon-widgets").await.unwrap().is_none());
            assert!(mutating.get_opt("rekon-widgets").await.unwrap().is_none());

            // An orphan (its object deleted while no host ran) is swept
            // once the objects were listed, not before.
            let mut orphan = ValidatingWebhookConfiguration {
                metadata: kube::api::ObjectMeta {
                    name: Some("rekon-gone".into()),
                    ..earlier.metadata.clone()
                },
                webhooks: None,
            };
            orphan
                .metadata
                .labels
                .get_or_insert_default()
                .insert("rekon.dev/plugin".into(), "gone".into());
            validating
                .create(&PostParams::default(), &orphan)
                .await
                .unwrap();
            refresh_webhooks(&ctx).await;
            assert!(validating.get_opt("rekon-gone").await.unwrap().is_some());
            ctx.orphan_sweep
                .listed
                .store(true, std::sync::atomic::Ordering::Release);
            refresh_webhooks(&ctx).await;
            assert!(validating.get_opt("rekon-gone").await.unwrap().is_none());
        })
        .await
        .expect("the test timed out, likely deadlocked");
    }
}
