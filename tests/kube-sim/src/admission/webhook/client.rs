//! The HTTPS call to a webhook: `clientConfig.url`, or `clientConfig.service`
//! resolved through [`Services`] (kube-sim runs no Service proxy),
//! verified against `caBundle` with rustls, bounded by `timeoutSeconds`.
//! Transport errors are worded as Go's HTTP client words them, because the
//! server puts them in its messages.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use http_body_util::{BodyExt, Full};
use hyper::body::Bytes;
use parking_lot::Mutex;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use serde_json::Value;

use crate::server::ClusterState;

/// Where webhook Services are: `name.namespace:port` → `host:port`.
///
/// Seeded from `KUBE_SIM_WEBHOOK_SERVICES` (comma-separated
/// `name.namespace[:port]=host:port`, port 443 by default); changed with
/// `SimCluster::map_webhook_service` or `POST /_sim/webhook-service`.
/// The TLS server name is still `name.namespace.svc`, as the API server
/// checks it.
///
/// It also keeps the idle connections to webhooks (per address, TLS name
/// and caBundle), as the API server's client keeps them alive.
#[derive(Default)]
pub struct Services {
    map: Mutex<HashMap<String, String>>,
    idle: Mutex<HashMap<PoolKey, Vec<Sender>>>,
}

type PoolKey = (String, String, String);

impl std::fmt::Debug for Services {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Services")
            .field("map", &self.map)
            .finish_non_exhaustive()
    }
}

impl Services {
    /// The mappings of `KUBE_SIM_WEBHOOK_SERVICES`.
    pub fn from_env() -> Self {
        Self::parse(&std::env::var("KUBE_SIM_WEBHOOK_SERVICES").unwrap_or_default())
    }

    /// Mappings written as `KUBE_SIM_WEBHOOK_SERVICES` takes them.
    pub fn parse(list: &str) -> Self {
        let s = Self::default();
        for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            if let Some((svc, addr)) = entry.split_once('=') {
                s.map(svc.trim(), addr.trim());
            }
        }
        s
    }

    /// Maps `name.namespace[:port]` (port 443 when absent) to `host:port`.
    pub fn map(&self, service: &str, address: &str) {
        let key = if service.contains(':') {
            service.to_string()
        } else {
            format!("{service}:443")
        };
        self.map.lock().insert(key, address.to_string());
    }

    fn get(&self, name: &str, namespace: &str, port: u64) -> Option<String> {
        self.map
            .lock()
            .get(&format!("{name}.{namespace}:{port}"))
            .cloned()
    }

    /// An idle connection still open, if any.
    fn idle(&self, key: &PoolKey) -> Option<Sender> {
        let mut idle = self.idle.lock();
        let list = idle.get_mut(key)?;
        while let Some(s) = list.pop() {
            if !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    /// Keeps a connection for the next call (a few per webhook).
    fn keep(&self, key: PoolKey, send: Sender) {
        if send.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        let list = idle.entry(key).or_default();
        if list.len() < 8 {
            list.push(send);
        }
    }
}

/// POSTs an AdmissionReview (or any review) and parses the answer; the
/// error is `ErrCallingWebhook`'s reason, as Go's client words it.
pub(super) async fn post(
    cs: &ClusterState,
    client_config: &Value,
    review: &impl serde::Serialize,
    timeout_secs: u64,
) -> Result<Value, String> {
    let (url, connect, server_name) = target(cs, client_config)?;
    let sep = if url.contains('?') { '&' } else { '?' };
    let url = format!("{url}{sep}timeout={timeout_secs}s");
    let fail = |e: String| format!("Post \"{url}\": {e}");
    let connect = connect.map_err(fail)?;
    let ca = client_config
        .get("caBundle")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let key = (connect.clone(), server_name.clone(), ca.to_string());
    // Serialized once, also for a second attempt on a new connection.
    let body = Bytes::from(serde_json::to_vec(review).map_err(|e| e.to_string())?);
    let call = async {
        let uri: hyper::Uri = url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| e.to_string())?;
        let path = uri.path_and_query().map_or("/", |p| p.as_str()).to_string();
        let host = uri.authority().map(|a| a.to_string()).unwrap_or_default();
        let request = || {
            hyper::Request::post(path.as_str())
                .header("host", host.as_str())
                .header("content-type", "application/json")
                .header("accept", "application/json, */*")
                .body(Full::new(body.clone()))
                .map_err(|e| e.to_string())
        };
        // A kept-alive connection first (the server's client reuses them);
        // if it was closed under us, a new one.
        let mut sent = None;
        if let Some(mut send) = cs.webhook_services.idle(&key)
            && let Ok(resp) = send.send_request(request()?).await
        {
            sent = Some((send, resp));
        }
        let (send, resp) = match sent {
            Some(x) => x,
            None => {
                let mut send = connect_to(&connect, &server_name, ca).await?;
                let resp = send
                    .send_request(request()?)
                    .await
                    .map_err(|e| e.to_string())?;
                (send, resp)
            }
        };
        let status = resp.status();
        let body = resp
            .into_body()
            .collect()
            .await
            .map_err(|e| e.to_string())?
            .to_bytes();
        cs.webhook_services.keep(key.clone(), send);
        if !status.is_success() {
            // rest.Result.Error for a body that is not a Status.
            return Err(format!(
                "an error on the server (\"{}\") has prevented the request from succeeding",
                String::from_utf8_lossy(&body).trim()
            ));
        }
        serde_json::from_slice::<Value>(&body).map_err(|e| e.to_string())
    };
    match tokio::time::timeout(Duration::from_secs(timeout_secs.max(1)), call).await {
        Ok(r) => r.map_err(fail),
        Err(_) => Err(fail("context deadline exceeded".into())),
    }
}

type Sender = hyper::client::conn::http1::SendRequest<Full<Bytes>>;

/// A new HTTPS connection, its certificate verified against `ca`.
async fn connect_to(connect: &str, server_name: &str, ca: &str) -> Result<Sender, String> {
    let tls = tls_config(ca)?;
    let tcp = tokio::net::TcpStream::connect(connect)
        .await
        .map_err(|e| dial_error(connect, &e))?;
    let _ = tcp.set_nodelay(true);
    let name = ServerName::try_from(server_name.to_string()).map_err(|e| e.to_string())?;
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .map_err(|e| tls_error(&e))?;
    let (send, conn) = hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(conn);
    Ok(send)
}

/// The URL as the server prints it, where to connect, and the TLS name.
fn target(
    cs: &ClusterState,
    cc: &Value,
) -> Result<(String, Result<String, String>, String), String> {
    if let Some(url) = cc.get("url").and_then(Value::as_str) {
        let uri: hyper::Uri = url.parse().map_err(|e| format!("parse \"{url}\": {e}"))?;
        let host = uri
            .host()
            .unwrap_or_default()
            .trim_matches(['[', ']'])
            .to_string();
        let port = uri.port_u16().unwrap_or(443);
        let connect = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        return Ok((url.to_string(), Ok(connect), host));
    }
    let Some(svc) = cc.get("service") else {
        return Err("webhook clientConfig has neither url nor service".into());
    };
    let name = svc.get("name").and_then(Value::as_str).unwrap_or_default();
    let ns = svc
        .get("namespace")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let port = svc.get("port").and_then(Value::as_u64).unwrap_or(443);
    let path = svc.get("path").and_then(Value::as_str).unwrap_or_default();
    let host = format!("{name}.{ns}.svc");
    let url = format!("https://{host}:{port}{path}");
    let connect = cs
        .webhook_services
        .get(name, ns, port)
        .ok_or_else(|| format!("service \"{name}\" not found"));
    Ok((url, connect, host))
}

fn tls_config(ca_bundle_b64: &str) -> Result<rustls::ClientConfig, String> {
    use base64::Engine as _;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut roots = rustls::RootCertStore::empty();
    if !ca_bundle_b64.is_empty() {
        let pem = base64::engine::general_purpose::STANDARD
            .decode(ca_bundle_b64)
            .map_err(|e| format!("illegal base64 data in caBundle: {e}"))?;
        for c in CertificateDer::pem_slice_iter(&pem).flatten() {
            let _ = roots.add(c);
        }
    }
    let mut cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(cfg)
}

/// Go's `net.Dial` error text.
fn dial_error(addr: &str, e: &std::io::Error) -> String {
    let what = match e.kind() {
        std::io::ErrorKind::ConnectionRefused => "connect: connection refused".to_string(),
        _ => e.to_string(),
    };
    format!("dial tcp {addr}: {what}")
}

/// Go's `crypto/tls` error text for the failures a webhook setup has.
fn tls_error(e: &std::io::Error) -> String {
    let inner = e.get_ref().and_then(|i| i.downcast_ref::<rustls::Error>());
    match inner {
        Some(rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer)) => {
            "tls: failed to verify certificate: x509: certificate signed by unknown authority"
                .into()
        }
        Some(rustls::Error::InvalidCertificate(
            rustls::CertificateError::NotValidForName
            | rustls::CertificateError::NotValidForNameContext { .. },
        )) => "tls: failed to verify certificate: x509: certificate is not valid for the requested name".into(),
        _ => format!("tls: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn services_map_with_port_443_by_default() {
        let s = Services::parse(" hook.default=127.0.0.1:9443, other.ns:8443=127.0.0.1:9444,bad");
        assert_eq!(
            s.get("hook", "default", 443).as_deref(),
            Some("127.0.0.1:9443")
        );
        assert_eq!(
            s.get("other", "ns", 8443).as_deref(),
            Some("127.0.0.1:9444")
        );
        assert_eq!(s.get("other", "ns", 443), None);
        assert_eq!(s.get("bad", "", 443), None);
    }
}
