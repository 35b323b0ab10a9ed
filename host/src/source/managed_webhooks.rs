//! The webhook configurations the host manages for Plugin objects (`rekon
//! run --webhook-service` or `--webhook-url-base`): per plugin whose
//! serving version declares admission rules, the MutatingWebhookConfiguration
//! and ValidatingWebhookConfiguration `rekon webhooks` would print
//! ([`super::webhook_configs`])
//! (`rekon-<plugin>`, labelled `app.kubernetes.io/managed-by: rekon` and
//! `rekon.dev/plugin: <plugin>`, `caBundle` the certificate the webhook
//! server serves), written by server-side apply under the host's field
//! manager; removed when the plugin goes or its serving version has no
//! rules of that kind. A configuration of that name without both labels is
//! someone else's: it is never written nor deleted, and is reported.
//!
//! The conversion of the CRDs the serving version converts is kept the same
//! way, beside them ([`super::managed_conversion`]).
//!
//! Those written here also carry `rekon.dev/source: plugin-object`, so that
//! the ones of a Plugin object deleted while no host ran are found and
//! removed ([`ManagedWebhooks::remove_orphans`]) without touching what
//! `rekon webhooks` printed for plugin files.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingWebhookConfiguration, ValidatingWebhookConfiguration,
};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::managed_conversion::{CONVERSION_LABEL, ManagedConversions};
use super::plugin_crd::WebhooksStatus;
pub use super::webhook_configs::{CA_FILE, PREFIX, WebhookCa, WebhookTarget};
use super::webhook_configs::{WebhookOptions, mutating, validating};
use crate::plugin::AdmissionRule;

/// The label every managed configuration carries, and its value.
pub const MANAGED_BY: (&str, &str) = ("app.kubernetes.io/managed-by", "rekon");
/// The label naming the plugin of a managed configuration.
pub const PLUGIN_LABEL: &str = "rekon.dev/plugin";
/// The label marking the configurations written for Plugin objects.
pub const SOURCE_LABEL: (&str, &str) = ("rekon.dev/source", "plugin-object");
/// Writes the managed configurations; see the [module docs](self).
#[derive(Clone)]
pub struct ManagedWebhooks {
    client: kube::Client,
    target: WebhookTarget,
    field_manager: String,
    conversions: ManagedConversions,
    /// The resourceVersion of each configuration as the host last wrote
    /// it (`Kind/name`): a watch event at that version is the host's own
    /// write, any other one a change to repair ([`Self::is_own_write`]).
    written: Arc<parking_lot::Mutex<std::collections::HashMap<String, String>>>,
}

impl std::fmt::Debug for ManagedWebhooks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedWebhooks")
            .field("target", &self.target)
            .field("field_manager", &self.field_manager)
            .finish_non_exhaustive()
    }
}

/// What [`ManagedWebhooks::written`] holds for a configuration the host
/// deleted.
const DELETED: &str = "-";

/// What happened to one configuration.
enum Outcome {
    /// Applied (named).
    Applied(String),
    /// None of ours (none wanted, none there or deleted).
    Absent,
    /// Someone else's of that name, left alone (`Kind/name`).
    Foreign(String),
}

impl ManagedWebhooks {
    /// Writing through `client` (the primary cluster's) as `field_manager`.
    #[must_use]
    pub fn new(client: kube::Client, target: WebhookTarget, field_manager: &str) -> Self {
        Self {
            conversions: ManagedConversions::new(client.clone(), target.clone()),
            client,
            target,
            field_manager: field_manager.to_owned(),
            written: Arc::default(),
        }
    }

    /// Whether a watch event of `kind`/`name` (at `resource_version`, or
    /// its deletion) is the host's own last write, not a change by
    /// someone else.
    #[must_use]
    pub fn is_own_write(
        &self,
        kind: &str,
        name: &str,
        resource_version: Option<&str>,
        deleted: bool,
    ) -> bool {
        let written = self.written.lock();
        let last = written.get(&format!("{kind}/{name}")).map(String::as_str);
        if deleted {
            last == Some(DELETED)
        } else {
            resource_version.is_some_and(|rv| last == Some(rv))
        }
    }

    /// The name of `plugin`'s configurations.
    #[must_use]
    pub fn name(plugin: &str) -> String {
        format!("{PREFIX}-{plugin}")
    }

    /// What identifies the configurations [`Self::sync`] would write for
    /// `rules` and `crds` now (the rules, the CRDs and the CA): equal keys,
    /// equal writes.
    #[must_use]
    pub fn key(&self, rules: &[AdmissionRule], crds: &BTreeSet<String>) -> String {
        format!("{rules:?} {}", self.conversions.key(crds))
    }

    /// Makes `plugin`'s configurations say `rules` (none: removes ours),
    /// and the conversion of `crds` point at it (the CRDs it converted
    /// before and not now released: [`super::managed_conversion`]).
    /// Never touches a configuration of that name that is not ours.
    #[must_use]
    pub async fn sync(
        &self,
        plugin: &str,
        rules: &[AdmissionRule],
        crds: &BTreeSet<String>,
    ) -> WebhooksStatus {
        let options = WebhookOptions {
            prefix: PREFIX.to_owned(),
            client: self.target.client.clone(),
            ca_bundle: self.target.ca.pem(),
        };
        let mut status = WebhooksStatus::default();
        let mut errors = Vec::new();
        // A foreign configuration is reported only where the plugin wants
        // one of that kind.
        let wanted = mutating(plugin, rules, &options);
        let wants = wanted.is_some();
        match self.one(plugin, wanted).await {
            Ok(Outcome::Applied(name)) => status.mutating = Some(name),
            Ok(Outcome::Foreign(what)) if wants => status.foreign.push(what),
            Ok(_) => {}
            Err(e) => errors.push(format!("MutatingWebhookConfiguration: {e}")),
        }
        let wanted = validating(plugin, rules, &options);
        let wants = wanted.is_some();
        match self.one(plugin, wanted).await {
            Ok(Outcome::Applied(name)) => status.validating = Some(name),
            Ok(Outcome::Foreign(what)) if wants => status.foreign.push(what),
            Ok(_) => {}
            Err(e) => errors.push(format!("ValidatingWebhookConfiguration: {e}")),
        }
        let conversion = self.conversions.sync(plugin, crds).await;
        status.conversion = conversion.converting;
        status.conversion_kept = conversion.kept;
        errors.extend(conversion.error);
        if !status.foreign.is_empty() {
            tracing::warn!(plugin, foreign = ?status.foreign, "a webhook configuration of this plugin's name was not made by rekon: left alone, the plugin's admission is not configured there");
        }
        if !errors.is_empty() {
            let error = errors.join("; ");
            tracing::warn!(plugin, %error, "failed to write the webhook configurations of a Plugin object");
            status.error = Some(error);
        }
        status
    }

    /// Removes `plugin`'s configurations (when ours), and releases the
    /// CRDs whose conversion points at it ([`super::managed_conversion`]).
    ///
    /// # Errors
    /// When the API server does not answer as expected; the foreign
    /// configurations left alone otherwise.
    pub async fn remove(&self, plugin: &str) -> Result<Vec<String>, kube::Error> {
        let released = self.conversions.sync(plugin, &BTreeSet::new()).await;
        if let Some(error) = released.error {
            tracing::warn!(plugin, %error, "failed to release the conversion of a deleted Plugin object's CRDs");
        }
        let mut foreign = Vec::new();
        for outcome in [
            self.one::<MutatingWebhookConfiguration>(plugin, None)
                .await?,
            self.one::<ValidatingWebhookConfiguration>(plugin, None)
                .await?,
        ] {
            if let Outcome::Foreign(what) = outcome {
                foreign.push(what);
            }
        }
        Ok(foreign)
    }

    /// Removes the configurations written for Plugin objects whose plugin
    /// is not in `plugins` (the Plugin objects that exist): those of an
    /// object deleted while no host ran. The names removed.
    ///
    /// # Errors
    /// Per kind, when listing or deleting fails (the other kind is still
    /// collected).
    pub async fn remove_orphans(
        &self,
        plugins: &BTreeSet<String>,
    ) -> (Vec<String>, Vec<kube::Error>) {
        let mut removed = Vec::new();
        let mut errors = Vec::new();
        for result in [
            self.orphans::<MutatingWebhookConfiguration>(plugins).await,
            self.orphans::<ValidatingWebhookConfiguration>(plugins)
                .await,
        ] {
            match result {
                Ok(names) => removed.extend(names),
                Err(e) => errors.push(e),
            }
        }
        match self.conversion_orphans(plugins).await {
            Ok(names) => removed.extend(names),
            Err(e) => errors.push(e),
        }
        (removed, errors)
    }

    /// Releases the CRDs whose conversion points at a plugin without a
    /// Plugin object (`CustomResourceDefinition/<name>`, those released).
    async fn conversion_orphans(
        &self,
        plugins: &BTreeSet<String>,
    ) -> Result<Vec<String>, kube::Error> {
        use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
        let api: Api<CustomResourceDefinition> = Api::all(self.client.clone());
        let list = api
            .list(&kube::api::ListParams::default().labels(CONVERSION_LABEL))
            .await?;
        let mut released = Vec::new();
        let gone: BTreeSet<String> = list
            .iter()
            .filter_map(|crd| crd.labels().get(CONVERSION_LABEL).cloned())
            .filter(|plugin| !plugins.contains(plugin))
            .collect();
        for plugin in gone {
            let out = self.conversions.sync(&plugin, &BTreeSet::new()).await;
            released.extend(
                list.iter()
                    .filter(|crd| crd.labels().get(CONVERSION_LABEL) == Some(&plugin))
                    .map(|crd| crd.name_any())
                    .filter(|name| !out.kept.contains(name))
                    .map(|name| format!("CustomResourceDefinition/{name}")),
            );
            if let Some(error) = out.error {
                tracing::warn!(plugin, %error, "failed to release the conversion of a deleted Plugin object's CRDs");
            }
        }
        Ok(released)
    }

    async fn orphans<K>(&self, plugins: &BTreeSet<String>) -> Result<Vec<String>, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + k8s_openapi::Resource
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let selector = format!(
            "{}={},{}={}",
            MANAGED_BY.0, MANAGED_BY.1, SOURCE_LABEL.0, SOURCE_LABEL.1
        );
        let list = api
            .list(&kube::api::ListParams::default().labels(&selector))
            .await?;
        let mut removed = Vec::new();
        for obj in list {
            let Some(plugin) = obj.labels().get(PLUGIN_LABEL).cloned() else {
                continue;
            };
            if plugins.contains(&plugin) {
                continue;
            }
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: obj.uid(),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            match api.delete(&obj.name_any(), &params).await {
                Ok(_) => removed.push(format!(
                    "{}/{}",
                    <K as k8s_openapi::Resource>::KIND,
                    obj.name_any()
                )),
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                Err(e) => return Err(e),
            }
        }
        Ok(removed)
    }

    /// Applies `wanted` (or deletes ours of that kind when `None`).
    async fn one<K>(&self, plugin: &str, wanted: Option<K>) -> Result<Outcome, kube::Error>
    where
        K: Resource<DynamicType = (), Scope = k8s_openapi::ClusterResourceScope>
            + k8s_openapi::Resource
            + Clone
            + DeserializeOwned
            + Serialize
            + std::fmt::Debug,
    {
        let api: Api<K> = Api::all(self.client.clone());
        let name = Self::name(plugin);
        let existing = api.get_opt(&name).await?;
        if let Some(obj) = &existing
            && !ours(obj.labels(), plugin)
        {
            return Ok(Outcome::Foreign(format!(
                "{}/{name}",
                <K as k8s_openapi::Resource>::KIND
            )));
        }
        match (wanted, existing) {
            (Some(obj), _) => {
                let mut body = serde_json::to_value(&obj).map_err(kube::Error::SerdeError)?;
                if let Some(map) = body.as_object_mut() {
                    map.insert(
                        "apiVersion".into(),
                        <K as k8s_openapi::Resource>::API_VERSION.into(),
                    );
                    map.insert("kind".into(), <K as k8s_openapi::Resource>::KIND.into());
                }
                if let Some(labels) = body
                    .pointer_mut("/metadata/labels")
                    .and_then(serde_json::Value::as_object_mut)
                {
                    labels.insert(SOURCE_LABEL.0.into(), SOURCE_LABEL.1.into());
                }
                let params = PatchParams::apply(&self.field_manager).force();
                let applied = api.patch(&name, &params, &Patch::Apply(body)).await?;
                let key = format!("{}/{name}", <K as k8s_openapi::Resource>::KIND);
                match applied.resource_version() {
                    Some(rv) => self.written.lock().insert(key, rv),
                    None => self.written.lock().remove(&key),
                };
                Ok(Outcome::Applied(name))
            }
            (None, Some(obj)) => {
                // Only the object read as ours: one replaced meanwhile
                // (another uid) is not deleted.
                let params = DeleteParams {
                    preconditions: Some(Preconditions {
                        uid: obj.uid(),
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                };
                let key = format!("{}/{name}", <K as k8s_openapi::Resource>::KIND);
                self.written.lock().insert(key, DELETED.to_owned());
                match api.delete(&name, &params).await {
                    Ok(_) => Ok(Outcome::Absent),
                    Err(kube::Error::Api(e)) if e.code == 404 => Ok(Outcome::Absent),
                    Err(e) => Err(e),
                }
            }
            (None, None) => Ok(Outcome::Absent),
        }
    }
}

/// Whether labels say the configuration is the host's for `plugin`.
fn ours(labels: &std::collections::BTreeMap<String, String>, plugin: &str) -> bool {
    labels.get(MANAGED_BY.0).map(String::as_str) == Some(MANAGED_BY.1)
        && labels.get(PLUGIN_LABEL).map(String::as_str) == Some(plugin)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Resource as Type, Scope};
    use crate::plugin::{AdmissionKind, FailurePolicy, Operation};
    use crate::source::webhook_configs::Client;
    use crate::telemetry::serving_cert::ServingCert;
    use kube::api::PostParams;

    fn rule(name: &str, kind: AdmissionKind) -> AdmissionRule {
        AdmissionRule {
            name: name.into(),
            kind,
            resources: vec![Type {
                group: "widgets.rekon.dev".into(),
                version: "v1".into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
                scope: Scope::Namespaced,
            }],
            operations: vec![Operation::Create],
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: None,
            match_conditions: vec![],
        }
    }

    async fn client(sim: &kube_sim::Sim) -> kube::Client {
        crate::cluster::connect(
            "main",
            &crate::cluster::Source::Context {
                kubeconfig: Some(sim.kubeconfig_path().to_path_buf()),
                context: Some("main".to_owned()),
            },
            &crate::cluster::default_user_agent(),
        )
        .await
        .expect("a client of the sim")
    }

    fn managed(client: kube::Client) -> ManagedWebhooks {
        let cert = ServingCert::self_signed(vec!["localhost".into()]).expect("a certificate");
        ManagedWebhooks::new(
            client,
            WebhookTarget {
                client: Client::Url("https://localhost:9443".into()),
                ca: WebhookCa::new(None, Arc::new(cert)),
            },
            "rekon.dev/host",
        )
    }

    /// Applied with the labels, the route and the served certificate as
    /// caBundle; a kind without rules removed; all removed at the end; a
    /// foreign configuration of the same name never touched, and reported.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_host_applies_updates_and_removes_only_its_own_configurations() {
        tokio::time::timeout(std::time::Duration::from_secs(60), async {
            let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
            let client = client(&sim).await;
            let managed = managed(client.clone());
            let validating_api: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
            let mutating_api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());

            let both = [
                rule("size", AdmissionKind::Validate),
                rule("tier", AdmissionKind::Mutate),
            ];
            let status = managed.sync("widgets", &both, &BTreeSet::new()).await;
            assert_eq!(status.validating.as_deref(), Some("rekon-widgets"));
            assert_eq!(status.mutating.as_deref(), Some("rekon-widgets"));
            assert!(
                status.foreign.is_empty() && status.error.is_none(),
                "{status:?}"
            );
            let stored = validating_api.get("rekon-widgets").await.expect("applied");
            assert!(
                ours(stored.labels(), "widgets"),
                "{:?}",
                stored.metadata.labels
            );
            let hook = &stored.webhooks.as_ref().expect("webhooks")[0];
            assert_eq!(hook.name, "size.widgets.rekon.dev");
            assert_eq!(
                hook.client_config.url.as_deref(),
                Some("https://localhost:9443/validate/widgets")
            );
            let bundle = hook.client_config.ca_bundle.as_ref().expect("caBundle");
            assert_eq!(Some(bundle.0.clone()), managed.target.ca.pem());
            assert!(
                String::from_utf8_lossy(&bundle.0).starts_with("-----BEGIN CERTIFICATE-----"),
                "{bundle:?}"
            );
            // Its own write is told from someone else's change.
            let kind = "ValidatingWebhookConfiguration";
            let rv = stored.resource_version();
            assert!(managed.is_own_write(kind, "rekon-widgets", rv.as_deref(), false));
            let edited = validating_api
                .patch(
                    "rekon-widgets",
                    &PatchParams::default(),
                    &Patch::Merge(serde_json::json!({"metadata": {"annotations": {"x": "y"}}})),
                )
                .await
                .expect("someone else's edit");
            assert!(!managed.is_own_write(
                kind,
                "rekon-widgets",
                edited.resource_version().as_deref(),
                false
            ));
            assert!(!managed.is_own_write(kind, "rekon-widgets", None, true));
            let owners: Vec<_> = stored
                .metadata
                .managed_fields
                .unwrap_or_default()
                .into_iter()
                .filter_map(|m| m.manager)
                .collect();
            assert!(owners.contains(&"rekon.dev/host".to_owned()), "{owners:?}");

            // The serving version has only the validating rule now.
            let status = managed.sync("widgets", &both[..1], &BTreeSet::new()).await;
            assert_eq!(status.mutating, None);
            assert!(
                mutating_api
                    .get_opt("rekon-widgets")
                    .await
                    .unwrap()
                    .is_none()
            );
            assert!(
                validating_api
                    .get_opt("rekon-widgets")
                    .await
                    .unwrap()
                    .is_some()
            );

            // Someone else's configuration named as the host would name
            // the plugin's: left alone and reported, the other kind applied.
            let foreign: MutatingWebhookConfiguration = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "rekon-gadgets", "labels": {"team": "platform"}},
                "webhooks": []
            }))
            .unwrap();
            mutating_api
                .create(&PostParams::default(), &foreign)
                .await
                .expect("a foreign configuration");
            let status = managed.sync("gadgets", &both, &BTreeSet::new()).await;
            assert_eq!(
                status.foreign,
                ["MutatingWebhookConfiguration/rekon-gadgets"]
            );
            assert_eq!(status.mutating, None);
            assert_eq!(status.validating.as_deref(), Some("rekon-gadgets"));
            let kept = mutating_api.get("rekon-gadgets").await.expect("kept");
            assert_eq!(
                kept.labels().get("team").map(String::as_str),
                Some("platform")
            );
            assert_eq!(kept.webhooks.unwrap_or_default().len(), 0, "untouched");

            // Orphans: written for a Plugin object that no longer exists.
            let status = managed.sync("orphan", &both, &BTreeSet::new()).await;
            assert_eq!(status.validating.as_deref(), Some("rekon-orphan"));
            let orphan = validating_api.get("rekon-orphan").await.unwrap();
            assert_eq!(
                orphan.labels().get(SOURCE_LABEL.0).map(String::as_str),
                Some(SOURCE_LABEL.1)
            );
            // What `rekon webhooks` printed for a plugin file (no source
            // label) is not an orphan of a Plugin object.
            let printed: ValidatingWebhookConfiguration =
                serde_json::from_value(serde_json::json!({
                    "metadata": {"name": "rekon-file", "labels": {
                        "app.kubernetes.io/managed-by": "rekon", "rekon.dev/plugin": "file"}},
                    "webhooks": []
                }))
                .unwrap();
            validating_api
                .create(&PostParams::default(), &printed)
                .await
                .unwrap();
            let existing: std::collections::BTreeSet<String> =
                ["widgets".to_owned(), "gadgets".to_owned()].into();
            let (mut removed, errors) = managed.remove_orphans(&existing).await;
            removed.sort();
            assert!(errors.is_empty(), "{errors:?}");
            assert_eq!(
                removed,
                [
                    "MutatingWebhookConfiguration/rekon-orphan",
                    "ValidatingWebhookConfiguration/rekon-orphan"
                ]
            );
            assert!(
                validating_api
                    .get_opt("rekon-file")
                    .await
                    .unwrap()
                    .is_some()
            );
            assert!(
                validating_api
                    .get_opt("rekon-widgets")
                    .await
                    .unwrap()
                    .is_some()
            );

            // The plugins go: theirs go, the foreign one stays.
            assert!(managed.remove("widgets").await.unwrap().is_empty());
            assert!(
                managed.is_own_write(kind, "rekon-widgets", None, true),
                "its own delete"
            );
            assert!(
                validating_api
                    .get_opt("rekon-widgets")
                    .await
                    .unwrap()
                    .is_none()
            );
            assert_eq!(
                managed.remove("gadgets").await.unwrap(),
                ["MutatingWebhookConfiguration/rekon-gadgets"]
            );
            assert!(
                validating_api
                    .get_opt("rekon-gadgets")
                    .await
                    .unwrap()
                    .is_none()
            );
            assert!(
                mutating_api
                    .get_opt("rekon-gadgets")
                    .await
                    .unwrap()
                    .is_some()
            );
        })
        .await
        .expect("the test timed out, likely deadlocked");
    }
}
