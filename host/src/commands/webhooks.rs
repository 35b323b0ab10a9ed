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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::plugin::AdmissionRule;
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
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The plugins of `dir` that admit, with their rules, by plugin name.
///
/// # Errors
/// When the directory cannot be read or a plugin does not load.
pub fn load_admitting(dir: &Path) -> Result<BTreeMap<String, Vec<AdmissionRule>>> {
    Ok(super::manifests::load_plugins(dir, None)?
        .iter()
        .filter(|p| !p.admission_rules().is_empty())
        .map(|p| (p.name().to_owned(), p.admission_rules().to_vec()))
        .collect())
}

/// Every configuration of `plugins`, as one YAML stream (mutating first,
/// as the API server calls them).
///
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
fn typed<K: k8s_openapi::Resource + serde::Serialize>(object: K) -> Result<String> {
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
}
