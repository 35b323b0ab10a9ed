//! The webhook configurations of a plugin that admits: one
//! MutatingWebhookConfiguration and one ValidatingWebhookConfiguration,
//! named `<prefix>-<plugin>` and labelled `app.kubernetes.io/managed-by:
//! rekon` and `rekon.dev/plugin`, one webhook per rule
//! (`<rule>.<plugin>.rekon.dev`): `rules` (one per resource),
//! `failurePolicy`, `timeoutSeconds`, `matchConditions`, `sideEffects: None`
//! (admission calls never write) and `admissionReviewVersions: [v1]`,
//! pointing at the host's webhook server through a Service or a URL. What
//! `rekon webhooks` prints for plugin files (`commands/webhooks.rs`) and
//! what the host applies for Plugin objects ([`super::managed_webhooks`]);
//! and the `spec.conversion` stanza of a CRD a plugin converts
//! ([`conversion_stanza`]: `rekon crds --webhook-*`, `rekon webhooks`, and
//! the host for Plugin objects, [`super::managed_conversion`]).

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::ByteString;
use k8s_openapi::api::admissionregistration::v1::{
    MatchCondition, MutatingWebhook, MutatingWebhookConfiguration, RuleWithOperations,
    ServiceReference, ValidatingWebhook, ValidatingWebhookConfiguration, WebhookClientConfig,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::action::Scope;
use crate::plugin::{AdmissionKind, AdmissionRule, FailurePolicy, Operation};
use crate::telemetry::serving_cert::ServingCert;

/// How the API server reaches the webhook server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Client {
    /// A Service in front of the host's pods.
    Service {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
        /// Its port.
        port: u16,
    },
    /// A base URL (`https://host:port`); the route is appended.
    Url(String),
}

/// What the configurations say besides the plugins' rules.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// Configuration names are `<prefix>-<plugin>`.
    pub prefix: String,
    /// How the API server reaches the host.
    pub client: Client,
    /// PEM of the CA that signed the serving certificate (the served
    /// `tls.crt` for a self-signed one); `None`: no `caBundle` (the API
    /// server then trusts its own roots only).
    pub ca_bundle: Option<Vec<u8>>,
}

/// The service or URL of `path` on the webhook server.
pub(crate) fn endpoint(
    path: String,
    options: &WebhookOptions,
) -> (Option<ServiceReference>, Option<String>) {
    match &options.client {
        Client::Service {
            namespace,
            name,
            port,
        } => (
            Some(ServiceReference {
                namespace: namespace.clone(),
                name: name.clone(),
                path: Some(path),
                port: Some(i32::from(*port)),
            }),
            None,
        ),
        Client::Url(base) => (None, Some(format!("{}{path}", base.trim_end_matches('/')))),
    }
}

fn client_config(plugin: &str, mutating: bool, options: &WebhookOptions) -> WebhookClientConfig {
    let (service, url) = endpoint(
        rekon_rules::admission::webhook_path(plugin, mutating),
        options,
    );
    WebhookClientConfig {
        ca_bundle: options.ca_bundle.clone().map(ByteString),
        service,
        url,
    }
}

fn operation(o: Operation) -> String {
    match o {
        Operation::Create => "CREATE",
        Operation::Update => "UPDATE",
        Operation::Delete => "DELETE",
        Operation::Connect => "CONNECT",
    }
    .to_owned()
}

fn rules(rule: &AdmissionRule) -> Vec<RuleWithOperations> {
    rule.resources
        .iter()
        .map(|r| RuleWithOperations {
            api_groups: Some(vec![r.group.clone()]),
            api_versions: Some(vec![r.version.clone()]),
            operations: Some(rule.operations.iter().copied().map(operation).collect()),
            resources: Some(vec![r.plural.clone()]),
            scope: Some(
                match r.scope {
                    Scope::Namespaced => "Namespaced",
                    Scope::Cluster => "Cluster",
                }
                .to_owned(),
            ),
        })
        .collect()
}

fn conditions(rule: &AdmissionRule) -> Option<Vec<MatchCondition>> {
    (!rule.match_conditions.is_empty()).then(|| {
        rule.match_conditions
            .iter()
            .map(|c| MatchCondition {
                name: c.name.clone(),
                expression: c.expression.clone(),
            })
            .collect()
    })
}

fn failure_policy(rule: &AdmissionRule) -> Option<String> {
    Some(
        match rule.failure_policy {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
        .to_owned(),
    )
}

fn timeout(rule: &AdmissionRule) -> Option<i32> {
    i32::try_from(rule.timeout().as_secs()).ok()
}

fn metadata(plugin: &str, options: &WebhookOptions) -> ObjectMeta {
    ObjectMeta {
        name: Some(format!("{}-{plugin}", options.prefix)),
        labels: Some(
            [
                ("app.kubernetes.io/managed-by", "rekon"),
                ("rekon.dev/plugin", plugin),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect(),
        ),
        ..ObjectMeta::default()
    }
}

/// The ValidatingWebhookConfiguration of `plugin`, when it has validating rules.
#[must_use]
pub fn validating(
    plugin: &str,
    admission: &[AdmissionRule],
    options: &WebhookOptions,
) -> Option<ValidatingWebhookConfiguration> {
    let webhooks: Vec<ValidatingWebhook> = admission
        .iter()
        .filter(|r| r.kind == AdmissionKind::Validate)
        .map(|r| ValidatingWebhook {
            name: rekon_rules::admission::webhook_name(&r.name, plugin),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: client_config(plugin, false, options),
            failure_policy: failure_policy(r),
            match_conditions: conditions(r),
            rules: Some(rules(r)),
            side_effects: "None".to_owned(),
            timeout_seconds: timeout(r),
            ..ValidatingWebhook::default()
        })
        .collect();
    (!webhooks.is_empty()).then(|| ValidatingWebhookConfiguration {
        metadata: metadata(plugin, options),
        webhooks: Some(webhooks),
    })
}

/// The MutatingWebhookConfiguration of `plugin`, when it has mutating rules.
#[must_use]
pub fn mutating(
    plugin: &str,
    admission: &[AdmissionRule],
    options: &WebhookOptions,
) -> Option<MutatingWebhookConfiguration> {
    let webhooks: Vec<MutatingWebhook> = admission
        .iter()
        .filter(|r| r.kind == AdmissionKind::Mutate)
        .map(|r| MutatingWebhook {
            name: rekon_rules::admission::webhook_name(&r.name, plugin),
            admission_review_versions: vec!["v1".to_owned()],
            client_config: client_config(plugin, true, options),
            failure_policy: failure_policy(r),
            match_conditions: conditions(r),
            rules: Some(rules(r)),
            side_effects: "None".to_owned(),
            timeout_seconds: timeout(r),
            ..MutatingWebhook::default()
        })
        .collect();
    (!webhooks.is_empty()).then(|| MutatingWebhookConfiguration {
        metadata: metadata(plugin, options),
        webhooks: Some(webhooks),
    })
}

/// The `spec.conversion` of a CRD `plugin` converts: strategy `Webhook`, the
/// client config of `/convert/<plugin>` with the `caBundle`, and
/// `conversionReviewVersions: [v1]` (kube-sim and the API server speak v1).
#[must_use]
pub fn conversion_stanza(
    plugin: &str,
    options: &WebhookOptions,
) -> k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceConversion {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1 as ext;
    let (service, url) = endpoint(rekon_rules::conversion::conversion_path(plugin), options);
    ext::CustomResourceConversion {
        strategy: "Webhook".to_owned(),
        webhook: Some(ext::WebhookConversion {
            client_config: Some(ext::WebhookClientConfig {
                ca_bundle: options.ca_bundle.clone().map(ByteString),
                service: service.map(|s| ext::ServiceReference {
                    name: s.name,
                    namespace: s.namespace,
                    path: s.path,
                    port: s.port,
                }),
                url,
            }),
            conversion_review_versions: vec!["v1".to_owned()],
        }),
    }
}

/// The prefix of configuration names (`rekon-<plugin>`).
pub const PREFIX: &str = "rekon";
/// A CA certificate beside `tls.crt` (cert-manager's `ca.crt`), preferred
/// as the `caBundle` when present.
pub const CA_FILE: &str = "ca.crt";

/// The certificate the API server is told to trust: `ca.crt` of the
/// certificate directory when there is one, else the last certificate of
/// the chain served (the certificate itself when self-signed). Read at
/// each use, so a rotated certificate reaches the configurations.
#[derive(Clone, Debug)]
pub struct WebhookCa {
    dir: Option<PathBuf>,
    cert: Arc<ServingCert>,
}

impl WebhookCa {
    /// The CA of `cert`, served from `dir` (`--webhook-cert-dir`).
    #[must_use]
    pub fn new(dir: Option<PathBuf>, cert: Arc<ServingCert>) -> Self {
        Self { dir, cert }
    }

    /// The PEM to put in `caBundle`.
    #[must_use]
    pub fn pem(&self) -> Option<Vec<u8>> {
        if let Some(dir) = &self.dir
            && let Ok(ca) = std::fs::read(dir.join(CA_FILE))
        {
            return Some(ca);
        }
        let chain = self.cert.chain();
        let root = chain.last()?;
        Some(pem::encode(&pem::Pem::new("CERTIFICATE", root.to_vec())).into_bytes())
    }
}

/// What the managed configurations point at: how the API server reaches
/// the webhook server, and the CA it trusts.
#[derive(Clone, Debug)]
pub struct WebhookTarget {
    /// A Service or a base URL.
    pub client: Client,
    /// The `caBundle`.
    pub ca: WebhookCa,
}
