//! The conversion the host manages for Plugin objects (`rekon run
//! --webhook-service` or `--webhook-url-base`, as the webhook
//! configurations of [`super::managed_webhooks`]): for each CRD the serving
//! version converts (`wit/conversion.wit`) and its registration declares,
//! the CRD's `spec.conversion` is made to say strategy `Webhook` on
//! `/convert/<plugin>` with the `caBundle` of the webhook server
//! ([`super::webhook_configs::conversion_stanza`], what `rekon crds
//! --webhook-service` writes). The CRD itself is not installed here (that
//! is `deploy/` or `rekon run --install-crds`): one that is not there yet is
//! an error in the Plugin's `status.webhooks`, tried again at each refresh.
//!
//! Written by server-side apply of `spec.conversion` alone, under the field
//! manager [`FIELD_MANAGER`] with force (the operator's copy of the CRD, or
//! `--install-crds`, may have said `None`), and labelled
//! [`CONVERSION_LABEL`]`: <plugin>`, so that the host finds the CRDs it
//! pointed at a plugin when that plugin stops converting them or goes.
//!
//! # When a plugin stops converting a CRD, or its Plugin object goes
//!
//! Strategy `None` is restored (and the label removed) only when the CRD
//! serves one version at most: then nothing needs converting. While the CRD
//! still serves several versions, `None` would make the API server hand
//! out an object stored at one version as another by rewriting its
//! `apiVersion` alone, and prune the fields the other version's schema does
//! not know: a v1alpha1 client would read a Widget without its `amount`
//! and, writing it back, store it without its `size`. Silent loss, so the
//! host leaves the `Webhook` stanza (and its label) in place and warns:
//! a read or write at a version other than the one stored fails loudly
//! (the route of a plugin that does not convert answers with an error)
//! until a version of the plugin that converts serves again, or the
//! operator removes the extra versions (after migrating what is stored at
//! them, `status.storedVersions`) or sets a conversion of their own.
//! Reads, lists and watches at the stored version need no conversion and
//! keep working.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::webhook_configs::{PREFIX, WebhookOptions, WebhookTarget, conversion_stanza};
use crate::plugin::ConversionRule;

/// The field manager owning `spec.conversion` of the CRDs it points at a
/// plugin.
pub const FIELD_MANAGER: &str = "rekon.dev/conversion";
/// The label naming the plugin a CRD's conversion points at.
pub const CONVERSION_LABEL: &str = "rekon.dev/conversion-plugin";

/// What [`ManagedConversions::sync`] did for one plugin.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct ConversionSync {
    /// The CRDs whose conversion points at the plugin now.
    pub converting: Vec<String>,
    /// CRDs the plugin no longer converts that still serve several
    /// versions: their `Webhook` stanza was left (see the module docs).
    pub kept: Vec<String>,
    /// Why a write failed (retried at the next refresh).
    pub error: Option<String>,
}

/// Writes the conversion stanzas; see the [module docs](self).
#[derive(Clone)]
pub struct ManagedConversions {
    client: kube::Client,
    target: WebhookTarget,
}

impl std::fmt::Debug for ManagedConversions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ManagedConversions")
            .field("target", &self.target)
            .finish_non_exhaustive()
    }
}

/// The names of the CRDs `rules` convert that `declared` (the
/// registration's CRD manifests) holds.
#[must_use]
pub fn converted_crds(rules: &[ConversionRule], declared: &[String]) -> BTreeSet<String> {
    let declared: BTreeSet<String> = declared
        .iter()
        .filter_map(|text| serde_json::from_str::<serde_json::Value>(text).ok())
        .filter_map(|crd| crd.pointer("/metadata/name")?.as_str().map(str::to_owned))
        .collect();
    rules
        .iter()
        .map(ConversionRule::crd_name)
        .filter(|name| declared.contains(name))
        .collect()
}

impl ManagedConversions {
    /// Writing through `client` (the primary cluster's).
    #[must_use]
    pub fn new(client: kube::Client, target: WebhookTarget) -> Self {
        Self { client, target }
    }

    /// What identifies the writes [`Self::sync`] would make for `crds` now
    /// (the CRDs and the CA): equal keys, equal writes.
    #[must_use]
    pub fn key(&self, crds: &BTreeSet<String>) -> String {
        format!("{crds:?} {:?}", self.target.ca.pem())
    }

    fn api(&self) -> Api<CustomResourceDefinition> {
        Api::all(self.client.clone())
    }

    /// Points the conversion of each CRD of `crds` at `plugin`, and
    /// releases the CRDs pointed at it that are not in `crds` (none:
    /// releases them all, the plugin went).
    pub async fn sync(&self, plugin: &str, crds: &BTreeSet<String>) -> ConversionSync {
        let options = WebhookOptions {
            prefix: PREFIX.to_owned(),
            client: self.target.client.clone(),
            ca_bundle: self.target.ca.pem(),
        };
        let stanza = conversion_stanza(plugin, &options);
        let mut out = ConversionSync::default();
        let mut errors = Vec::new();
        let api = self.api();
        for name in crds {
            match api.get_opt(name).await {
                Ok(Some(_)) => {}
                Ok(None) => {
                    errors.push(format!(
                        "CRD {name} is not installed; its conversion is set once it is"
                    ));
                    continue;
                }
                Err(e) => {
                    errors.push(format!("CRD {name}: {e}"));
                    continue;
                }
            }
            let body = json!({
                "apiVersion": "apiextensions.k8s.io/v1",
                "kind": "CustomResourceDefinition",
                "metadata": {"name": name, "labels": {CONVERSION_LABEL: plugin}},
                "spec": {"conversion": stanza},
            });
            match api
                .patch(
                    name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(body),
                )
                .await
            {
                Ok(_) => out.converting.push(name.clone()),
                Err(e) => errors.push(format!("CRD {name}: {e}")),
            }
        }
        match self.pointed_at(plugin).await {
            Ok(pointed) => {
                for crd in pointed.into_values() {
                    let name = crd.name_any();
                    if crds.contains(&name) {
                        continue;
                    }
                    match self.release(plugin, &crd).await {
                        Ok(true) => {}
                        Ok(false) => out.kept.push(name),
                        Err(e) => errors.push(format!("CRD {name}: {e}")),
                    }
                }
            }
            Err(e) => errors.push(format!("listing the CRDs converted by {plugin}: {e}")),
        }
        if !out.kept.is_empty() {
            tracing::warn!(plugin, kept = ?out.kept, "these CRDs serve several versions and the plugin no longer converts them: their conversion webhook is left in place (a read at another version than the stored one fails until a version that converts serves, rather than lose fields)");
        }
        if !errors.is_empty() {
            let error = errors.join("; ");
            tracing::warn!(plugin, %error, "failed to write the conversion of a Plugin object's CRDs");
            out.error = Some(error);
        }
        out
    }

    /// The CRDs whose conversion the host pointed at `plugin`, by name.
    async fn pointed_at(
        &self,
        plugin: &str,
    ) -> Result<BTreeMap<String, CustomResourceDefinition>, kube::Error> {
        let selector = format!("{CONVERSION_LABEL}={plugin}");
        Ok(self
            .api()
            .list(&ListParams::default().labels(&selector))
            .await?
            .into_iter()
            .map(|crd| (crd.name_any(), crd))
            .collect())
    }

    /// Restores strategy `None` on `crd` when it serves one version at
    /// most (`true`); leaves it otherwise (`false`): see the module docs.
    async fn release(
        &self,
        plugin: &str,
        crd: &CustomResourceDefinition,
    ) -> Result<bool, kube::Error> {
        let served = crd.spec.versions.iter().filter(|v| v.served).count();
        if served > 1 {
            return Ok(false);
        }
        let name = crd.name_any();
        // A merge patch, not an apply without them: the stanza and the label
        // go whoever wrote them last (`rekon crds --webhook-*` may have).
        let body = json!({
            "metadata": {"labels": {CONVERSION_LABEL: null}},
            "spec": {"conversion": {"strategy": "None", "webhook": null}},
        });
        self.api()
            .patch(&name, &PatchParams::default(), &Patch::Merge(body))
            .await?;
        tracing::info!(plugin, crd = %name, "restored conversion strategy None on a CRD serving one version");
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use kube::api::PostParams;

    use super::*;
    use crate::source::webhook_configs::Client;
    use crate::source::webhook_configs::WebhookCa;
    use crate::telemetry::serving_cert::ServingCert;

    /// A CRD of `plural`.widgets.rekon.dev serving `versions` (the first
    /// stored), with no conversion.
    fn crd(plural: &str, versions: &[&str]) -> CustomResourceDefinition {
        let schema = json!({"openAPIV3Schema": {"type": "object",
            "x-kubernetes-preserve-unknown-fields": true}});
        serde_json::from_value(json!({
            "metadata": {"name": format!("{plural}.widgets.rekon.dev")},
            "spec": {
                "group": "widgets.rekon.dev",
                "names": {"kind": plural.trim_end_matches('s'), "plural": plural},
                "scope": "Namespaced",
                "versions": versions.iter().enumerate().map(|(i, v)| json!({
                    "name": v, "served": true, "storage": i == 0, "schema": schema,
                })).collect::<Vec<_>>(),
            }
        }))
        .expect("a CRD")
    }

    fn rule(plural: &str) -> ConversionRule {
        ConversionRule {
            group: "widgets.rekon.dev".into(),
            kind: "Widget".into(),
            plural: plural.into(),
            versions: vec!["v1".into(), "v1alpha1".into()],
        }
    }

    /// Only the declared CRDs a rule names are converted.
    #[test]
    fn only_the_declared_crds_are_converted() {
        let declared = vec![
            serde_json::to_string(&crd("widgets", &["v1", "v1alpha1"])).unwrap(),
            "not JSON".to_owned(),
        ];
        let crds = converted_crds(&[rule("widgets"), rule("gadgets")], &declared);
        assert_eq!(
            crds,
            BTreeSet::from(["widgets.widgets.rekon.dev".to_owned()])
        );
    }

    /// Pointed at the plugin's route with the served CA and labelled; a CRD
    /// not installed is an error; released: `None` restored where one
    /// version is served, the stanza kept where several are.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_conversion_follows_the_plugin_and_is_released_only_where_safe() {
        tokio::time::timeout(std::time::Duration::from_secs(60), async {
            let sim = kube_sim::Sim::start(&["main"]).await.expect("sim");
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
            let cert = ServingCert::self_signed(vec!["localhost".into()]).expect("a certificate");
            let ca = WebhookCa::new(None, Arc::new(cert));
            let managed = ManagedConversions::new(
                client.clone(),
                WebhookTarget {
                    client: Client::Url("https://localhost:9443".into()),
                    ca: ca.clone(),
                },
            );
            let api: Api<CustomResourceDefinition> = Api::all(client);
            for c in [crd("widgets", &["v1", "v1alpha1"]), crd("gadgets", &["v1"])] {
                api.create(&PostParams::default(), &c)
                    .await
                    .expect("created");
            }
            let both: BTreeSet<String> = [
                "widgets.widgets.rekon.dev".to_owned(),
                "gadgets.widgets.rekon.dev".to_owned(),
            ]
            .into();
            let mut missing = both.clone();
            missing.insert("absent.widgets.rekon.dev".to_owned());

            let out = managed.sync("widgets", &missing).await;
            assert_eq!(out.converting.len(), 2, "{out:?}");
            assert!(
                out.error
                    .as_deref()
                    .is_some_and(|e| e.contains("CRD absent.widgets.rekon.dev is not installed")),
                "{out:?}"
            );
            for name in &both {
                let stored = api.get(name).await.unwrap();
                assert_eq!(
                    stored.labels().get(CONVERSION_LABEL).map(String::as_str),
                    Some("widgets")
                );
                let conversion = stored.spec.conversion.expect("a conversion");
                assert_eq!(conversion.strategy, "Webhook");
                let config = conversion.webhook.unwrap().client_config.unwrap();
                assert_eq!(
                    config.url.as_deref(),
                    Some("https://localhost:9443/convert/widgets")
                );
                assert_eq!(config.ca_bundle.map(|b| b.0), ca.pem());
                // The rest of the CRD is the creator's, untouched.
                assert_eq!(stored.spec.group, "widgets.rekon.dev");
            }

            // The plugin converts neither any more (or went).
            let out = managed.sync("widgets", &BTreeSet::new()).await;
            assert_eq!(out.kept, ["widgets.widgets.rekon.dev"], "{out:?}");
            assert!(out.converting.is_empty() && out.error.is_none(), "{out:?}");
            let gadgets = api.get("gadgets.widgets.rekon.dev").await.unwrap();
            let conversion = gadgets.spec.conversion.clone().expect("a conversion");
            assert_eq!(conversion.strategy, "None", "one version: None restored");
            assert!(conversion.webhook.is_none(), "{conversion:?}");
            assert!(gadgets.labels().get(CONVERSION_LABEL).is_none());
            let widgets = api.get("widgets.widgets.rekon.dev").await.unwrap();
            assert_eq!(
                widgets.spec.conversion.expect("kept").strategy,
                "Webhook",
                "two versions served: the webhook is kept, not None"
            );
        })
        .await
        .expect("the test timed out, likely deadlocked");
    }
}
