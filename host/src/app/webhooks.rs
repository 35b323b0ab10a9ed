//! `rekon run --webhook-addr`: the admission webhook server wired to the
//! engine (plugins from the registry, reads from their controllers' caches).

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use crate::admission::{Admitters, WebhookConfig, WebhookServer, server, webhook_cert};
use crate::controller::Manager;
use crate::plugin::{HostReads, LoadedPlugin, NoReads, PluginRegistry};
use crate::source::managed_webhooks::{WebhookCa, WebhookTarget};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::serving_cert::CertError;

/// The webhook server's options.
#[derive(Debug, Clone)]
pub struct WebhookOptions {
    /// Where to listen (HTTPS).
    pub addr: SocketAddr,
    /// `tls.crt` and `tls.key`, re-read on change; when both are absent a
    /// self-signed certificate is made and written there. `None`: a
    /// self-signed certificate in memory (no caBundle to give the API
    /// server: for tests only).
    pub cert_dir: Option<PathBuf>,
    /// DNS names and IP addresses of a self-signed certificate.
    pub cert_names: Vec<String>,
    /// Where the webhook configurations the host manages for Plugin
    /// objects point (`--webhook-service`, `--webhook-url-base`); `None`:
    /// it manages none.
    pub managed: Option<crate::source::webhook_configs::Client>,
}

/// Why the webhook server did not start.
#[derive(Debug, thiserror::Error)]
pub enum WebhookError {
    /// Its certificate.
    #[error("failed to set up the webhook serving certificate")]
    Cert(#[from] CertError),
    /// Its listener.
    #[error(transparent)]
    Server(#[from] server::Error),
}

/// Plugins from the registry; reads from their controllers.
struct EngineAdmitters {
    registry: PluginRegistry,
    manager: Manager,
}

impl Admitters for EngineAdmitters {
    fn plugin(&self, name: &str) -> Option<LoadedPlugin> {
        self.registry.get(name)
    }

    fn reads(&self, plugin: &LoadedPlugin) -> Arc<dyn HostReads> {
        // A plugin loaded but without a controller yet reads nothing.
        self.manager
            .reads(plugin.name())
            .unwrap_or_else(|| Arc::new(NoReads))
    }

    fn shadow(&self, name: &str) -> Option<LoadedPlugin> {
        self.registry.shadow(name)
    }
}

/// Binds the webhook server of `options`; with it, where the managed
/// configurations point ([`WebhookOptions::managed`]).
///
/// # Errors
/// When the certificate or the listener cannot be set up.
pub async fn bind(
    options: &WebhookOptions,
    cluster: &str,
    registry: PluginRegistry,
    manager: Manager,
    metrics: Metrics,
) -> Result<(WebhookServer, Option<WebhookTarget>), WebhookError> {
    let cert = Arc::new(webhook_cert(
        options.cert_dir.as_deref(),
        options.cert_names.clone(),
    )?);
    let target = options.managed.clone().map(|client| WebhookTarget {
        client,
        ca: WebhookCa::new(options.cert_dir.clone(), Arc::clone(&cert)),
    });
    let server = WebhookServer::bind(
        WebhookConfig {
            addr: options.addr,
            cluster: cluster.to_owned(),
        },
        cert,
        Arc::new(EngineAdmitters { registry, manager }),
        metrics,
    )
    .await?;
    Ok((server, target))
}
