//! The operations HTTP server: `/metrics`, `/healthz`, `/readyz`.
//!
//! - `/healthz` answers 200 as long as the process serves HTTP (liveness: a
//!   wedged runtime stops answering and the kubelet restarts the container).
//! - `/readyz` answers 200 when every readiness check passes, else 503 with
//!   one `[-]name failed: reason` line per failing check (the apiserver's
//!   format; `?verbose` lists passing checks as `[+]name ok` too). Checks are
//!   closures or watch channels, so this module knows nothing of the engine.
//! - `/metrics` is [`Metrics::encode`] (OpenMetrics text).
//!
//! Metrics and probes share one listener when their addresses are equal
//! (the default, `0.0.0.0:8080`), else each gets its own.
//!
//! Secured ([`OpsServer::bind_secure`], `rekon run --metrics-secure`), as
//! controller-runtime serves metrics since 0.16: `/metrics` alone on its
//! listener, over TLS with a [`ServingCert`], each scrape's bearer token
//! reviewed by [`ScrapeAuth`] (401 without a token or with one that
//! authenticates nobody, 403 for a user without `get` on `/metrics`); the
//! probes stay plain HTTP on their own listener, for the kubelet.
//!
//! ```no_run
//! # async fn demo() -> Result<(), rekon::telemetry::server::Error> {
//! use rekon::telemetry::{metrics::Metrics, server::{OpsServer, Readiness}};
//!
//! let (synced_tx, synced_rx) = tokio::sync::watch::channel(false);
//! let readiness = Readiness::new().watch("primary-caches", synced_rx, "caches of the primary cluster not synced");
//! let addr = "0.0.0.0:8080".parse().ok();
//! let server = OpsServer::bind(addr, addr, Metrics::new(), readiness).await?;
//! tokio::spawn(server.run(std::future::pending()));
//! synced_tx.send_replace(true);
//! # Ok(())
//! # }
//! ```

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Query, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{debug, info};

use super::metrics::{CONTENT_TYPE, Metrics};
use super::scrape_auth::{Decision, ScrapeAuth};
use super::serving_cert::ServingCert;

/// Errors of the operations server.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The listening socket could not be opened.
    #[error("failed to bind the {what} server to {addr}")]
    Bind {
        /// `metrics` or `probe`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Secured metrics need a listener of their own: the probes stay plain.
    #[error(
        "secured metrics need their own address: --metrics-addr and --probe-addr are both {addr}"
    )]
    SharedSecureAddr {
        /// The address.
        addr: SocketAddr,
    },
    /// Serving failed.
    #[error("failed to serve {what} on {addr}")]
    Serve {
        /// `metrics` or `probe`.
        what: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
}

/// Result with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

type Check = Arc<dyn Fn() -> Result<(), String> + Send + Sync>;
type Detail = Arc<dyn Fn() -> Vec<String> + Send + Sync>;

/// The named checks behind `/readyz`. Cheap to clone.
#[derive(Clone, Default)]
pub struct Readiness {
    checks: Vec<(String, Check)>,
    details: Vec<(String, Detail)>,
}

impl std::fmt::Debug for Readiness {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list()
            .entries(self.checks.iter().map(|(n, _)| n))
            .finish()
    }
}

impl Readiness {
    /// No checks: always ready.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a check: `Ok(())` when ready, `Err(reason)` otherwise.
    #[must_use]
    pub fn check(
        mut self,
        name: impl Into<String>,
        check: impl Fn() -> Result<(), String> + Send + Sync + 'static,
    ) -> Self {
        self.checks.push((name.into(), Arc::new(check)));
        self
    }

    /// Add a check that passes while `rx` holds `true`.
    #[must_use]
    pub fn watch(
        self,
        name: impl Into<String>,
        rx: watch::Receiver<bool>,
        reason: impl Into<String>,
    ) -> Self {
        let reason = reason.into();
        self.check(name, move || {
            if *rx.borrow() {
                Ok(())
            } else {
                Err(reason.clone())
            }
        })
    }

    /// Add a detail: lines shown on `/readyz` as `[!]name: line` that do not
    /// fail readiness (a plugin degraded in one cluster leaves the host, and
    /// every other plugin, serving).
    #[must_use]
    pub fn detail(
        mut self,
        name: impl Into<String>,
        detail: impl Fn() -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        self.details.push((name.into(), Arc::new(detail)));
        self
    }

    /// Every detail line, `(name, line)`.
    #[must_use]
    pub fn details(&self) -> Vec<(String, String)> {
        self.details
            .iter()
            .flat_map(|(name, d)| d().into_iter().map(move |l| (name.clone(), l)))
            .collect()
    }

    /// Run every check; `(name, result)` in the order they were added.
    #[must_use]
    pub fn evaluate(&self) -> Vec<(String, Result<(), String>)> {
        self.checks
            .iter()
            .map(|(name, check)| (name.clone(), check()))
            .collect()
    }

    /// Whether every check passes.
    #[must_use]
    pub fn is_ready(&self) -> bool {
        self.checks.iter().all(|(_, check)| check().is_ok())
    }
}

#[derive(Clone)]
struct AppState {
    metrics: Metrics,
    readiness: Readiness,
    auth: Option<ScrapeAuth>,
}

/// How `/metrics` is secured: the certificate it serves and who reviews
/// each scrape.
#[derive(Debug, Clone)]
pub struct SecureMetrics {
    /// The serving certificate (files reloaded on change, or self-signed).
    pub cert: Arc<ServingCert>,
    /// Reviews each scrape's token.
    pub auth: ScrapeAuth,
}

/// Bound listeners, ready to serve; see the [module docs](self).
pub struct OpsServer {
    listeners: Vec<(&'static str, TcpListener, Router)>,
    secure: Option<(TcpListener, Router, tokio_rustls::TlsAcceptor)>,
}

impl std::fmt::Debug for OpsServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpsServer")
            .field("addrs", &self.local_addrs())
            .field("secure", &self.secure.is_some())
            .finish()
    }
}

impl OpsServer {
    /// Bind the metrics and probe addresses (one listener when they are
    /// equal; `None` serves that part nowhere).
    ///
    /// # Errors
    /// When an address cannot be bound.
    pub async fn bind(
        metrics_addr: Option<SocketAddr>,
        probe_addr: Option<SocketAddr>,
        metrics: Metrics,
        readiness: Readiness,
    ) -> Result<Self> {
        let state = AppState {
            metrics,
            readiness,
            auth: None,
        };
        let metrics_routes = Router::new().route("/metrics", get(serve_metrics));
        let probe_routes = Router::new()
            .route("/healthz", get(healthz))
            .route("/livez", get(healthz))
            .route("/readyz", get(readyz));
        let bind = |what: &'static str, addr: SocketAddr| async move {
            TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind { what, addr, source })
        };
        let mut listeners = Vec::new();
        match (metrics_addr, probe_addr) {
            (Some(m), Some(p)) if m == p => {
                let router = metrics_routes.merge(probe_routes).with_state(state);
                listeners.push((
                    "metrics and probe",
                    bind("metrics and probe", m).await?,
                    router,
                ));
            }
            (m, p) => {
                if let Some(m) = m {
                    listeners.push((
                        "metrics",
                        bind("metrics", m).await?,
                        metrics_routes.with_state(state.clone()),
                    ));
                }
                if let Some(p) = p {
                    listeners.push((
                        "probe",
                        bind("probe", p).await?,
                        probe_routes.with_state(state),
                    ));
                }
            }
        }
        Ok(Self {
            listeners,
            secure: None,
        })
    }

    /// Like [`OpsServer::bind`] with `/metrics` secured by `secure` on
    /// `metrics_addr` (which must differ from `probe_addr`); see the
    /// [module docs](self).
    ///
    /// # Errors
    /// When an address cannot be bound, or both addresses are equal.
    pub async fn bind_secure(
        metrics_addr: Option<SocketAddr>,
        probe_addr: Option<SocketAddr>,
        metrics: Metrics,
        readiness: Readiness,
        secure: SecureMetrics,
    ) -> Result<Self> {
        // Port 0 picks a free port for each: two listeners.
        if let (Some(m), Some(p)) = (metrics_addr, probe_addr)
            && m == p
            && m.port() != 0
        {
            return Err(Error::SharedSecureAddr { addr: m });
        }
        let mut server = Self::bind(None, probe_addr, metrics.clone(), readiness.clone()).await?;
        if let Some(addr) = metrics_addr {
            let listener = TcpListener::bind(addr)
                .await
                .map_err(|source| Error::Bind {
                    what: "secure metrics",
                    addr,
                    source,
                })?;
            let router = Router::new()
                .route("/metrics", get(serve_secure_metrics))
                .with_state(AppState {
                    metrics,
                    readiness,
                    auth: Some(secure.auth),
                });
            let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
                rustls::crypto::ring::default_provider(),
            ))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Bind {
                what: "secure metrics",
                addr,
                source: std::io::Error::other(e),
            })?
            .with_no_client_auth()
            .with_cert_resolver(secure.cert);
            config.alpn_protocols = vec![b"http/1.1".to_vec()];
            server.secure = Some((
                listener,
                router,
                tokio_rustls::TlsAcceptor::from(Arc::new(config)),
            ));
        }
        Ok(server)
    }

    /// The bound addresses: `[shared]` or `[metrics, probe]` (secured:
    /// `[metrics, probe]` too).
    #[must_use]
    pub fn local_addrs(&self) -> Vec<SocketAddr> {
        self.secure
            .iter()
            .map(|(l, _, _)| l)
            .chain(self.listeners.iter().map(|(_, l, _)| l))
            .filter_map(|l| l.local_addr().ok())
            .collect()
    }

    /// Serve until `shutdown` resolves.
    ///
    /// # Errors
    /// When accepting connections fails.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + 'static) -> Result<()> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let mut servers = tokio::task::JoinSet::new();
        for (what, listener, router) in self.listeners {
            let addr = listener.local_addr().map_err(|source| Error::Serve {
                what,
                addr: ([0, 0, 0, 0], 0).into(),
                source,
            })?;
            info!(%addr, serving = what, "ops server listening");
            let mut stop = stop_rx.clone();
            servers.spawn(async move {
                axum::serve(listener, router)
                    .with_graceful_shutdown(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await
                    .map_err(|source| Error::Serve { what, addr, source })
            });
        }
        if let Some((listener, router, acceptor)) = self.secure {
            let addr = listener.local_addr().map_err(|source| Error::Serve {
                what: "secure metrics",
                addr: ([0, 0, 0, 0], 0).into(),
                source,
            })?;
            info!(%addr, serving = "metrics (https, token reviewed)", "ops server listening");
            let mut stop = stop_rx.clone();
            servers.spawn(async move {
                axum::serve(TlsListener::new(listener, acceptor, addr), router)
                    .with_graceful_shutdown(async move {
                        let _ = stop.wait_for(|s| *s).await;
                    })
                    .await
                    .map_err(|source| Error::Serve {
                        what: "secure metrics",
                        addr,
                        source,
                    })
            });
        }
        tokio::spawn(async move {
            shutdown.await;
            stop_tx.send_replace(true);
        });
        while let Some(done) = servers.join_next().await {
            match done {
                Ok(result) => result?,
                Err(e) => debug!(error = %e, "ops server task ended abnormally"),
            }
        }
        Ok(())
    }
}

async fn serve_metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, CONTENT_TYPE)],
        state.metrics.encode(),
    )
}

/// `/metrics` for a reviewed bearer token only.
async fn serve_secure_metrics(
    State(state): State<AppState>,
    headers: header::HeaderMap,
) -> axum::response::Response {
    let token = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
        .filter(|t| !t.is_empty());
    let (Some(token), Some(auth)) = (token, &state.auth) else {
        return (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
    };
    match auth.decide(token).await {
        Ok(Decision::Allowed { .. }) => serve_metrics(State(state)).await.into_response(),
        Ok(Decision::Unauthenticated { reason }) => {
            debug!(%reason, "metrics scrape refused: token authenticates nobody");
            (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response()
        }
        Ok(Decision::Forbidden { user, reason }) => {
            debug!(%user, %reason, "metrics scrape refused: not allowed to get /metrics");
            (
                StatusCode::FORBIDDEN,
                format!("Forbidden: user {user:?} may not get /metrics\n"),
            )
                .into_response()
        }
        Err(e) => {
            tracing::warn!(error = %e, reason = e.reason(), "metrics scrape not reviewed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                "the scrape could not be reviewed\n",
            )
                .into_response()
        }
    }
}

/// TLS connections for `axum::serve`: accepted and handshaken by a task
/// of their own (a slow client never holds up the next), handed over
/// through a bounded channel. Also the admission webhook server's.
pub(crate) struct TlsListener {
    ready: tokio::sync::mpsc::Receiver<(
        tokio_rustls::server::TlsStream<tokio::net::TcpStream>,
        SocketAddr,
    )>,
    addr: SocketAddr,
    accepting: tokio::task::JoinHandle<()>,
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

impl TlsListener {
    pub(crate) fn new(
        listener: TcpListener,
        acceptor: tokio_rustls::TlsAcceptor,
        addr: SocketAddr,
    ) -> Self {
        let (tx, ready) = tokio::sync::mpsc::channel(64);
        let accepting = tokio::spawn(async move {
            loop {
                let (tcp, peer) = match listener.accept().await {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        debug!(error = %e, "tls listener: accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let (acceptor, tx) = (acceptor.clone(), tx.clone());
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(tls)) => {
                            let _ = tx.send((tls, peer)).await;
                        }
                        Ok(Err(e)) => {
                            debug!(%peer, error = %e, "tls listener: TLS handshake failed")
                        }
                        Err(_) => debug!(%peer, "tls listener: TLS handshake timed out"),
                    }
                });
            }
        });
        Self {
            ready,
            addr,
            accepting,
        }
    }
}

impl Drop for TlsListener {
    fn drop(&mut self) {
        self.accepting.abort();
    }
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<tokio::net::TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(accepted) => accepted,
            // The accepting task ended (only when aborted): nothing more
            // will come.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.addr)
    }
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(
    State(state): State<AppState>,
    Query(query): Query<std::collections::HashMap<String, String>>,
) -> impl IntoResponse {
    let verbose = query.contains_key("verbose");
    let results = state.readiness.evaluate();
    let ready = results.iter().all(|(_, r)| r.is_ok());
    let mut body = String::new();
    for (name, result) in &results {
        match result {
            Ok(()) if verbose => body.push_str(&format!("[+]{name} ok\n")),
            Ok(()) => {}
            Err(reason) => body.push_str(&format!("[-]{name} failed: {reason}\n")),
        }
    }
    for (name, line) in state.readiness.details() {
        body.push_str(&format!("[!]{name}: {line}\n"));
    }
    if ready {
        body.push_str(if verbose {
            "readyz check passed\n"
        } else {
            "ok"
        });
        (StatusCode::OK, body)
    } else {
        body.push_str("readyz check failed\n");
        (StatusCode::SERVICE_UNAVAILABLE, body)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn readiness_reports_each_failing_check() {
        let (tx, rx) = watch::channel(false);
        let r = Readiness::new()
            .watch("caches", rx, "primary caches not synced")
            .check("plugins", || Ok(()));
        assert!(!r.is_ready());
        let results = r.evaluate();
        assert_eq!(results[0].1, Err("primary caches not synced".to_owned()));
        assert_eq!(results[1].1, Ok(()));
        tx.send_replace(true);
        assert!(r.is_ready());
    }
}
