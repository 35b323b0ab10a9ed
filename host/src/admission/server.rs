//! The webhook server: HTTPS with a [`ServingCert`] (the operator's files,
//! re-read on change, or a self-signed certificate written to the
//! certificate directory so that `rekon webhooks` can put it in the
//! configurations' `caBundle`), routes per plugin and kind, and
//! controller-runtime's webhook metrics.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use tokio::net::TcpListener;

use super::admitters::Admitters;
use super::review;
use crate::plugin::{AdmissionKind, AdmitError};
use crate::telemetry::metrics::Metrics;
use crate::telemetry::server::TlsListener;
use crate::telemetry::serving_cert::{CERT_FILE, CertError, KEY_FILE, ServingCert};

/// The largest review body read: two objects of the API server's 3 MiB
/// request limit, and the review around them.
const MAX_BODY_BYTES: usize = 8 * 1024 * 1024;

/// Errors of the webhook server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be opened.
    #[error("failed to bind the webhook server to {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The TLS configuration could not be made.
    #[error("failed to configure TLS for the webhook server")]
    Tls(#[source] rustls::Error),
    /// Serving failed.
    #[error("failed to serve webhooks on {addr}")]
    Serve {
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// What the webhook server is given.
#[derive(Debug, Clone)]
pub struct WebhookConfig {
    /// Where to listen.
    pub addr: SocketAddr,
    /// The cluster admission requests come from (the primary).
    pub cluster: String,
}

#[derive(Clone)]
struct AppState {
    admitters: Arc<dyn Admitters>,
    metrics: Metrics,
    cluster: Arc<str>,
    shadows: super::shadow::ShadowReviews,
}

/// A bound webhook server; see the [module docs](self).
pub struct WebhookServer {
    listener: TcpListener,
    acceptor: tokio_rustls::TlsAcceptor,
    router: Router,
    addr: SocketAddr,
}

impl std::fmt::Debug for WebhookServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WebhookServer")
            .field("addr", &self.addr)
            .finish_non_exhaustive()
    }
}

impl WebhookServer {
    /// Binds `config.addr`, serving `cert`.
    ///
    /// # Errors
    /// When the address cannot be bound or TLS not configured.
    pub async fn bind(
        config: WebhookConfig,
        cert: Arc<ServingCert>,
        admitters: Arc<dyn Admitters>,
        metrics: Metrics,
    ) -> Result<Self, Error> {
        let listener = TcpListener::bind(config.addr)
            .await
            .map_err(|source| Error::Bind {
                addr: config.addr,
                source,
            })?;
        let addr = listener.local_addr().map_err(|source| Error::Bind {
            addr: config.addr,
            source,
        })?;
        let mut tls = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_cert_resolver(cert);
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let state = AppState {
            admitters,
            shadows: super::shadow::ShadowReviews::new(metrics.clone()),
            metrics,
            cluster: Arc::from(config.cluster.as_str()),
        };
        let router = Router::new()
            .route("/validate/{plugin}", post(validate))
            .route("/mutate/{plugin}", post(mutate))
            .route("/convert/{plugin}", post(convert))
            .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
            .with_state(state);
        Ok(Self {
            listener,
            acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(tls)),
            router,
            addr,
        })
    }

    /// The bound address.
    #[must_use]
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Serves until `shutdown` resolves.
    ///
    /// # Errors
    /// When serving fails.
    pub async fn run(
        self,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        let addr = self.addr;
        tracing::info!(%addr, "webhook server listening (https)");
        axum::serve(
            TlsListener::new(self.listener, self.acceptor, addr),
            self.router,
        )
        .with_graceful_shutdown(shutdown)
        .await
        .map_err(|source| Error::Serve { addr, source })
    }
}

async fn validate(state: State<AppState>, plugin: UrlPath<String>, body: Bytes) -> Response {
    answer(state, plugin, body, AdmissionKind::Validate).await
}

async fn mutate(state: State<AppState>, plugin: UrlPath<String>, body: Bytes) -> Response {
    answer(state, plugin, body, AdmissionKind::Mutate).await
}

/// One ConversionReview (`/convert/<plugin>`): every object converted by
/// the plugin's current load; a failure is answered as the review's
/// `result` (the API server shows its message), a body that is no review
/// with 400.
async fn convert(
    State(state): State<AppState>,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Response {
    let timer = state
        .metrics
        .webhook_started(&rekon_rules::conversion::conversion_path(&name));
    let request = match super::conversion::parse(&body) {
        Ok(r) => r,
        Err(e) => {
            timer.finish(StatusCode::BAD_REQUEST.as_u16());
            return (StatusCode::BAD_REQUEST, format!("{e}\n")).into_response();
        }
    };
    let uid = request.uid.clone();
    let plugin = state.admitters.plugin(&name);
    let span = tracing::debug_span!("converting", plugin = %name, uid = %uid);
    let (json, outcome) = tracing::Instrument::instrument(
        super::conversion::answer(request, &name, plugin.as_ref(), |p| {
            state.admitters.reads(p)
        }),
        span,
    )
    .await;
    if outcome != super::conversion::Outcome::Converted {
        tracing::warn!(plugin = %name, uid = %uid, message = %json["response"]["result"]["message"], "conversion failed; the API server fails the request");
    }
    state
        .metrics
        .admission_verdict(&name, "convert", outcome.label());
    timer.finish(StatusCode::OK.as_u16());
    (
        [(header::CONTENT_TYPE, "application/json")],
        json.to_string(),
    )
        .into_response()
}

/// One review: parse, find the plugin, call it, respond; every answer is
/// counted with its HTTP code on the path served.
async fn answer(
    State(state): State<AppState>,
    UrlPath(plugin): UrlPath<String>,
    body: Bytes,
    kind: AdmissionKind,
) -> Response {
    let path = rekon_rules::admission::webhook_path(&plugin, kind == AdmissionKind::Mutate);
    let timer = state.metrics.webhook_started(&path);
    let (code, response) = respond(&state, &plugin, &body, kind).await;
    timer.finish(code.as_u16());
    response
}

async fn respond(
    state: &AppState,
    name: &str,
    body: &[u8],
    kind: AdmissionKind,
) -> (StatusCode, Response) {
    let label = match kind {
        AdmissionKind::Validate => "validate",
        AdmissionKind::Mutate => "mutate",
    };
    let text =
        |code: StatusCode, message: String| (code, (code, format!("{message}\n")).into_response());
    let request = match review::parse(body) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, e.to_string()),
    };
    let Some(plugin) = state.admitters.plugin(name) else {
        return text(StatusCode::NOT_FOUND, format!("no plugin {name} is loaded"));
    };
    let reads = state.admitters.reads(&plugin);
    let review = review::to_review(&request, &state.cluster);
    let shadow = state
        .admitters
        .shadow(name)
        .map(|s| (s, review.clone(), Arc::clone(&reads)));
    let span = tracing::debug_span!("admitting", plugin = %name, kind = label, uid = %request.uid);
    let answer = tracing::Instrument::instrument(plugin.review(kind, review, reads), span).await;
    let answer = match answer {
        Ok(a) => a,
        Err(e @ AdmitError::NoWebhook { .. }) => {
            return text(StatusCode::NOT_FOUND, e.to_string());
        }
        Err(e) => {
            state.metrics.admission_verdict(name, label, "failed");
            tracing::warn!(plugin = %name, kind = label, uid = %request.uid, error = %e, "admission call failed; the API server applies the webhook's failure policy");
            return text(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("admission by plugin {name} failed: {e}"),
            );
        }
    };
    if let Some((plugin, review, reads)) = shadow {
        // After the answer is made, on a task of its own: never enforced,
        // never waited for.
        state.shadows.spawn(plugin, kind, review, reads, &answer);
    }
    let verdict = review::verdict_label(&answer);
    match review::respond(&request, name, answer) {
        Ok(json) => {
            state.metrics.admission_verdict(name, label, verdict);
            (
                StatusCode::OK,
                (
                    [(header::CONTENT_TYPE, "application/json")],
                    json.to_string(),
                )
                    .into_response(),
            )
        }
        Err(e) => {
            state.metrics.admission_verdict(name, label, "failed");
            text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
        }
    }
}

/// The webhook server's certificate: `tls.crt` and `tls.key` from `dir`
/// when both are there (re-read on change); else a self-signed certificate
/// for `names`, written to `dir` when one is given (so that `rekon
/// manifests --webhook-ca-file DIR/tls.crt` can put it in the caBundle, and
/// a restart serves the same one).
///
/// # Errors
/// When the files do not load, or the certificate cannot be made or written.
pub fn webhook_cert(dir: Option<&Path>, names: Vec<String>) -> Result<ServingCert, CertError> {
    let Some(dir) = dir else {
        return ServingCert::self_signed(names);
    };
    let (cert, key) = (dir.join(CERT_FILE), dir.join(KEY_FILE));
    if !cert.exists() && !key.exists() {
        let made = rcgen::generate_simple_self_signed(names).map_err(CertError::SelfSigned)?;
        let write = |path: &PathBuf, text: String| {
            crate::files::write_atomically(path, text.as_bytes()).map_err(|source| {
                CertError::Write {
                    path: path.clone(),
                    source,
                }
            })
        };
        write(&key, made.signing_key.serialize_pem())?;
        write(&cert, made.cert.pem())?;
        tracing::info!(dir = %dir.display(), "made a self-signed webhook serving certificate");
    }
    ServingCert::from_dir(dir)
}
