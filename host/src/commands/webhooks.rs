//! `rekon webhooks DIR`: the ValidatingWebhookConfiguration and
//! MutatingWebhookConfiguration of every plugin in a directory that admits
//! (declares admission rules), pointing at the host's webhook server
//! (`rekon run --webhook-addr`) through a Service or a URL, with the
//! certificate it serves as `caBundle`.
//!
//! One configuration of each kind per plugin, named `<prefix>-<plugin>` and
//! labelled `app.kubernetes.io/managed-by: rekon` and `rekon.dev/plugin`,
//! one webhook per rule (`<rule>.<plugin>.rekon.dev`): `rules` (one per
//! resource), `failurePolicy`, `timeoutSeconds`, `matchConditions`,
//! `sideEffects: None` (admission calls never write) and
//! `admissionReviewVersions: [v1]`.
//!
//! For every CRD a plugin converts (`wit/conversion.wit`), the CRD of its
//! registration with its `spec.conversion` stanza: strategy `Webhook`,
//! the same client config on `/convert/<plugin>` with the `caBundle`, and
//! `conversionReviewVersions: [v1]` (kube-sim and the API server speak v1).
//!
//! Last, the ValidatingAdmissionPolicies and bindings of the plugins that
//! declare CEL policies (`super::policies`, also `rekon policies DIR` on
//! its own: a policy needs no webhook client).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::plugin::{AdmissionRule, ConversionRule};
use crate::source::webhook_configs::conversion_stanza;
pub use crate::source::webhook_configs::{Client, WebhookOptions, mutating, validating};

/// Errors of `rekon webhooks`.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The plugins could not be loaded (as for `rekon rbac`).
    #[error(transparent)]
    Plugins(#[from] super::manifests::Error),
    /// The CA file could not be read.
    #[error("failed to read the webhook CA file {path}")]
    ReadCa {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A configuration did not serialize.
    #[error("failed to serialize a webhook configuration")]
    Json(#[source] serde_json::Error),
    /// YAML could not be written.
    #[error("failed to write YAML")]
    Yaml(#[source] serde_yaml::Error),
    /// A CRD the plugin converts is not among its registration's CRDs (the
    /// host refuses such a load; a plugin loaded here was checked).
    #[error("plugin {plugin} converts CRD {crd}, which its registration does not declare")]
    NoCrd {
        /// The plugin.
        plugin: String,
        /// The CRD's name.
        crd: String,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The plugins of `dir` that admit, with their rules, by plugin name.
///
/// # Errors
/// When the directory cannot be read or a plugin does not load.
pub fn load_admitting(dir: &Path) -> Result<BTreeMap<String, Vec<AdmissionRule>>> {
    Ok(load_api_side(dir)?.admitting)
}

/// What the plugins of a directory serve on the webhook server.
#[derive(Debug, Clone, Default)]
pub struct ApiSide {
    /// The plugins that admit, with their rules, by plugin name.
    pub admitting: BTreeMap<String, Vec<AdmissionRule>>,
    /// The plugins that convert, by plugin name.
    pub converting: BTreeMap<String, Converting>,
    /// The plugins that declare CEL policies, with them, by plugin name
    /// (`rekon policies`; `rekon webhooks` prints them too).
    pub policies: BTreeMap<String, Vec<crate::plugin::CelPolicy>>,
}

/// What a plugin converts: its conversion rules and its registration's
/// CRD manifests (JSON) they name.
#[derive(Debug, Clone)]
pub struct Converting {
    /// The CRDs it converts.
    pub rules: Vec<ConversionRule>,
    /// Its registration's CRDs.
    pub crds: Vec<String>,
}

/// The plugins of `dir` that admit or convert, loaded once.
///
/// # Errors
/// When the directory cannot be read or a plugin does not load.
pub fn load_api_side(dir: &Path) -> Result<ApiSide> {
    let mut side = ApiSide::default();
    for p in super::manifests::load_plugins(dir, None)? {
        if !p.admission_rules().is_empty() {
            side.admitting
                .insert(p.name().to_owned(), p.admission_rules().to_vec());
        }
        if !p.policies().is_empty() {
            side.policies
                .insert(p.name().to_owned(), p.policies().to_vec());
        }
        if !p.conversion_rules().is_empty() {
            side.converting.insert(
                p.name().to_owned(),
                Converting {
                    rules: p.conversion_rules().to_vec(),
                    crds: p.registration().crds.clone(),
                },
            );
        }
    }
    Ok(side)
}

/// The CRDs `plugin` converts, each its registration's manifest with the
/// `spec.conversion` stanza pointing at `/convert/<plugin>`.
///
/// # Errors
/// A rule naming a CRD the registration does not declare.
pub fn conversion_crds(
    plugin: &str,
    converting: &Converting,
    options: &WebhookOptions,
) -> Result<Vec<serde_json::Value>> {
    let conversion = conversion_stanza(plugin, options);
    let stanza = serde_json::to_value(conversion).map_err(Error::Json)?;
    converting
        .rules
        .iter()
        .map(|rule| {
            let name = rule.crd_name();
            let mut crd = converting
                .crds
                .iter()
                .filter_map(|text| serde_json::from_str::<serde_json::Value>(text).ok())
                .find(|crd| crd.pointer("/metadata/name").and_then(|n| n.as_str()) == Some(&name))
                .ok_or_else(|| Error::NoCrd {
                    plugin: plugin.to_owned(),
                    crd: name.clone(),
                })?;
            if let Some(spec) = crd.get_mut("spec").and_then(|s| s.as_object_mut()) {
                spec.insert("conversion".to_owned(), stanza.clone());
            }
            Ok(crd)
        })
        .collect()
}

/// `registrations` with the CRDs their plugins convert carrying their
/// conversion stanzas (what `rekon crds --webhook-url|--webhook-service`
/// writes).
///
/// # Errors
/// As [`conversion_crds`], or a CRD that does not serialize.
pub fn with_conversion_stanzas(
    registrations: &mut [crate::action::Registration],
    converting: &BTreeMap<String, Converting>,
    options: &WebhookOptions,
) -> Result<()> {
    for registration in registrations {
        let Some(c) = converting.get(&registration.name) else {
            continue;
        };
        for crd in conversion_crds(&registration.name, c, options)? {
            let name = crd.pointer("/metadata/name").cloned();
            let text = serde_json::to_string(&crd).map_err(Error::Json)?;
            for existing in &mut registration.crds {
                let same = serde_json::from_str::<serde_json::Value>(existing)
                    .ok()
                    .is_some_and(|e| e.pointer("/metadata/name").cloned() == name);
                if same {
                    existing.clone_from(&text);
                }
            }
        }
    }
    Ok(())
}

/// The CRDs every converting plugin converts, with their conversion
/// stanzas, as one YAML stream.
///
/// # Errors
/// As [`conversion_crds`], or when YAML cannot be written.
pub fn conversion_yaml(
    plugins: &BTreeMap<String, Converting>,
    options: &WebhookOptions,
) -> Result<String> {
    let mut out = String::new();
    for (plugin, converting) in plugins {
        for crd in conversion_crds(plugin, converting, options)? {
            out.push_str("---\n");
            out.push_str(&serde_yaml::to_string(&crd).map_err(Error::Yaml)?);
        }
    }
    Ok(out)
}
/// # Errors
/// When YAML cannot be written.
pub fn webhooks_yaml(
    plugins: &BTreeMap<String, Vec<AdmissionRule>>,
    options: &WebhookOptions,
) -> Result<String> {
    let mut docs = Vec::new();
    for (plugin, admission) in plugins {
        if let Some(m) = mutating(plugin, admission, options) {
            docs.push(typed(m)?);
        }
        if let Some(v) = validating(plugin, admission, options) {
            docs.push(typed(v)?);
        }
    }
    Ok(docs
        .into_iter()
        .map(|d| format!("---\n{d}"))
        .collect::<String>())
}

/// The object with its `apiVersion` and `kind`, as YAML.
pub(crate) fn typed<K: k8s_openapi::Resource + serde::Serialize>(object: K) -> Result<String> {
    let mut value = serde_json::to_value(&object).map_err(Error::Json)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), K::API_VERSION.into());
        map.insert("kind".into(), K::KIND.into());
    }
    serde_yaml::to_string(&value).map_err(Error::Yaml)
}

/// The PEM of `path` (`--webhook-ca-file`).
///
/// # Errors
/// When it cannot be read.
pub fn read_ca(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|source| Error::ReadCa {
        path: path.to_owned(),
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::{Resource, Scope};
    use crate::plugin::{AdmissionKind, FailurePolicy, MatchCondition as Condition, Operation};

    fn rule(name: &str, kind: AdmissionKind) -> AdmissionRule {
        AdmissionRule {
            name: name.into(),
            kind,
            resources: vec![Resource {
                group: "widgets.rekon.dev".into(),
                version: "v1".into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
                scope: Scope::Namespaced,
            }],
            operations: vec![Operation::Create, Operation::Update],
            failure_policy: FailurePolicy::Fail,
            timeout_seconds: None,
            match_conditions: vec![Condition {
                name: "not-system".into(),
                expression: "object.metadata.namespace != 'kube-system'".into(),
            }],
        }
    }

    #[test]
    fn a_plugins_rules_become_its_configurations() {
        let options = WebhookOptions {
            prefix: "rekon".into(),
            client: Client::Service {
                namespace: "rekon-system".into(),
                name: "rekon-webhooks".into(),
                port: 443,
            },
            ca_bundle: Some(b"PEM".to_vec()),
        };
        let admission = [
            rule("size", AdmissionKind::Validate),
            rule("tier", AdmissionKind::Mutate),
        ];
        let v = validating("widgets", &admission, &options).unwrap();
        assert_eq!(v.metadata.name.as_deref(), Some("rekon-widgets"));
        let hook = &v.webhooks.as_ref().unwrap()[0];
        assert_eq!(hook.name, "size.widgets.rekon.dev");
        assert_eq!(hook.side_effects, "None");
        assert_eq!(hook.admission_review_versions, ["v1"]);
        assert_eq!(hook.failure_policy.as_deref(), Some("Fail"));
        assert_eq!(hook.timeout_seconds, Some(10));
        let service = hook.client_config.service.as_ref().unwrap();
        assert_eq!(service.path.as_deref(), Some("/validate/widgets"));
        assert_eq!(service.port, Some(443));
        assert_eq!(hook.client_config.ca_bundle.as_ref().unwrap().0, b"PEM");
        let r = &hook.rules.as_ref().unwrap()[0];
        assert_eq!(r.resources.as_deref(), Some(&["widgets".to_owned()][..]));
        assert_eq!(
            r.operations.as_deref(),
            Some(&["CREATE".to_owned(), "UPDATE".to_owned()][..])
        );
        assert_eq!(r.scope.as_deref(), Some("Namespaced"));
        assert_eq!(
            hook.match_conditions.as_ref().unwrap()[0].name,
            "not-system"
        );
        let m = mutating("widgets", &admission, &options).unwrap();
        assert_eq!(
            m.webhooks.as_ref().unwrap()[0].name,
            "tier.widgets.rekon.dev"
        );
        assert_eq!(
            m.webhooks.as_ref().unwrap()[0]
                .client_config
                .service
                .as_ref()
                .unwrap()
                .path
                .as_deref(),
            Some("/mutate/widgets")
        );
        let url = WebhookOptions {
            client: Client::Url("https://127.0.0.1:9443/".into()),
            ..options
        };
        let v = validating("widgets", &admission, &url).unwrap();
        assert_eq!(
            v.webhooks.unwrap()[0].client_config.url.as_deref(),
            Some("https://127.0.0.1:9443/validate/widgets")
        );
        assert!(validating("widgets", &admission[1..], &url).is_none());
        let yaml =
            webhooks_yaml(&[("widgets".to_owned(), admission.to_vec())].into(), &url).unwrap();
        assert!(
            yaml.contains("kind: MutatingWebhookConfiguration"),
            "{yaml}"
        );
        assert!(
            yaml.contains("kind: ValidatingWebhookConfiguration"),
            "{yaml}"
        );
        assert!(
            yaml.contains("apiVersion: admissionregistration.k8s.io/v1"),
            "{yaml}"
        );
    }

    #[test]
    fn a_converted_crd_gets_its_conversion_stanza() {
        let crd = serde_json::json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.widgets.rekon.dev"},
            "spec": {"group": "widgets.rekon.dev", "names": {"kind": "Widget", "plural": "widgets"},
                     "versions": [{"name": "v1alpha1"}, {"name": "v1"}]}
        });
        let converting = Converting {
            rules: vec![ConversionRule {
                group: "widgets.rekon.dev".into(),
                kind: "Widget".into(),
                plural: "widgets".into(),
                versions: vec!["v1alpha1".into(), "v1".into()],
            }],
            crds: vec![crd.to_string()],
        };
        let options = WebhookOptions {
            prefix: "rekon".into(),
            client: Client::Service {
                namespace: "rekon-system".into(),
                name: "rekon-webhooks".into(),
                port: 443,
            },
            ca_bundle: Some(b"PEM".to_vec()),
        };
        let crds = conversion_crds("widgets", &converting, &options).unwrap();
        let conversion = &crds[0]["spec"]["conversion"];
        assert_eq!(conversion["strategy"], "Webhook");
        assert_eq!(
            conversion["webhook"]["conversionReviewVersions"],
            serde_json::json!(["v1"])
        );
        let client = &conversion["webhook"]["clientConfig"];
        assert_eq!(client["service"]["path"], "/convert/widgets");
        assert_eq!(client["service"]["port"], 443);
        assert_eq!(client["caBundle"], "UEVN", "base64 of the PEM");
        assert_eq!(crds[0]["spec"]["versions"][1]["name"], "v1");
        let url = WebhookOptions {
            client: Client::Url("https://127.0.0.1:9443".into()),
            ..options
        };
        let yaml =
            conversion_yaml(&[("widgets".to_owned(), converting.clone())].into(), &url).unwrap();
        assert!(yaml.starts_with("---\n"), "{yaml}");
        assert!(
            yaml.contains("url: https://127.0.0.1:9443/convert/widgets"),
            "{yaml}"
        );
        let missing = Converting {
            crds: Vec::new(),
            ..converting
        };
        assert!(matches!(
            conversion_crds("widgets", &missing, &url),
            Err(Error::NoCrd { .. })
        ));
    }
}
