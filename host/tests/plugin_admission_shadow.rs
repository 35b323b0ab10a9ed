//! A shadow version's admission (issue 38) over the real webhook server:
//! the widgets test plugin serves (sizes up to 10) and its strict build
//! (`widgets-strict.wasm`, sizes up to 5; `make test-plugins`) is loaded as
//! its shadow (`widgets.shadow.wasm`). The API server gets the serving
//! version's answer only; the shadow's is compared and counted per result
//! (`rekon_admission_shadow_verdicts_total`), with the latest differences
//! kept for the Plugin object's status.

mod plugin_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use plugin_support::*;
use rekon::admission::webhook_cert;
use rekon::plugin::{PluginRegistry, PluginRuntime, RuntimeConfig};
use rekon::telemetry::metrics::{Metrics, ShadowVerdictCounts};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;

/// Far beyond any answer below: a request still open then is stuck.
const STUCK: Duration = Duration::from_secs(60);

struct Served {
    addr: SocketAddr,
    metrics: Metrics,
    registry: PluginRegistry,
    _plugins: tempfile::TempDir,
    _stop: tokio::sync::oneshot::Sender<()>,
}

async fn serve() -> Served {
    serve_with(true).await
}

/// widgets served, with its strict build as shadow when `shadow`.
async fn serve_with(shadow: bool) -> Served {
    let metrics = Metrics::new();
    let runtime = PluginRuntime::new(RuntimeConfig {
        memory_limit_bytes: 64 << 20,
        call_timeout: Duration::from_secs(5),
        max_concurrent_instances: 8,
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let plugins = tempfile::tempdir().unwrap();
    std::fs::copy(
        test_plugin("widgets.wasm"),
        plugins.path().join("widgets.wasm"),
    )
    .unwrap();
    if shadow {
        std::fs::copy(
            test_plugin("widgets-strict.wasm"),
            plugins.path().join("widgets.shadow.wasm"),
        )
        .unwrap();
    }
    let registry = PluginRegistry::new(runtime);
    registry.load_dir(plugins.path()).expect("plugins load");
    assert_eq!(registry.shadow("widgets").is_some(), shadow);
    let cert = webhook_cert(None, vec!["localhost".into()]).expect("cert made");
    let (addr, stop) = serve_webhooks(cert, &registry, &metrics).await;
    Served {
        addr,
        metrics,
        registry,
        _plugins: plugins,
        _stop: stop,
    }
}

/// The certificate is self-signed in memory: this client trusts anything
/// (what is tested here is what the server answers, not its certificate).
#[derive(Debug)]
struct AnyCert;

impl rustls::client::danger::ServerCertVerifier for AnyCert {
    fn verify_server_cert(
        &self,
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &[rustls::pki_types::CertificateDer<'_>],
        _: &rustls::pki_types::ServerName<'_>,
        _: &[u8],
        _: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _: &[u8],
        _: &rustls::pki_types::CertificateDer<'_>,
        _: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        Ok(rustls::client::danger::HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The review response of POST `path` with `object` created.
async fn answer(served: &Served, path: &str, object: &Value) -> Value {
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .dangerous()
    .with_custom_certificate_verifier(Arc::new(AnyCert))
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(served.addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.unwrap();
    let body = json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "uid-1",
            "kind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
            "resource": {"group": "widgets.rekon.dev", "version": "v1", "resource": "widgets"},
            "name": object["metadata"]["name"], "namespace": "default",
            "operation": "CREATE",
            "userInfo": {"username": "alice", "uid": "a-1", "groups": ["dev"]},
            "object": object, "oldObject": null, "dryRun": false
        }
    })
    .to_string();
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    let _ = timeout(STUCK, tls.read_to_end(&mut raw))
        .await
        .expect("the answer came; likely deadlocked");
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").expect("a header end");
    assert!(head.starts_with("HTTP/1.1 200"), "{head}\n{body}");
    let json: Value = serde_json::from_str(body).unwrap();
    json["response"].clone()
}

fn widget(name: &str, size: i64) -> Value {
    json!({
        "apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": "default", "labels": {"widgets.rekon.dev/tier": "standard"}},
        "spec": {"size": size}
    })
}

/// Waits (bounded) until the shadow of widgets has answered `reviews`.
async fn counted(served: &Served, reviews: u64) -> ShadowVerdictCounts {
    timeout(STUCK, async {
        loop {
            let counts = served.metrics.admission_shadow_counts("widgets");
            if counts.reviews() >= reviews {
                return counts;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the shadow answered; likely deadlocked")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shadows_verdicts_are_compared_and_counted_never_enforced() {
    let served = serve().await;
    assert_ne!(
        served
            .registry
            .get("widgets")
            .map(|p| p.digest().to_owned()),
        served
            .registry
            .shadow("widgets")
            .map(|p| p.digest().to_owned()),
        "two builds"
    );
    // Both admit a small widget.
    let response = answer(&served, "/validate/widgets", &widget("small", 1)).await;
    assert_eq!(response["allowed"], true, "{response}");
    let counts = counted(&served, 1).await;
    assert_eq!(counts.identical, 1, "{counts:?}");

    // The shadow (at most 5) would deny what the serving version (at most
    // 10) admits: the API server is told `allowed`.
    let response = answer(&served, "/validate/widgets", &widget("seven", 7)).await;
    assert_eq!(
        response["allowed"], true,
        "the shadow is not enforced: {response}"
    );
    let counts = counted(&served, 2).await;
    assert_eq!((counts.identical, counts.would_deny), (1, 1), "{counts:?}");

    // Both deny a huge one, with other messages (at most 10 / at most 5).
    let response = answer(&served, "/validate/widgets", &widget("huge", 11)).await;
    assert_eq!(response["allowed"], false, "{response}");
    let counts = counted(&served, 3).await;
    assert_eq!(counts.differs, 1, "{counts:?}");
    assert_eq!((counts.would_allow, counts.failed), (0, 0), "{counts:?}");

    // Mutate: the strict build warns from size 3, the serving one from 6.
    let response = answer(&served, "/mutate/widgets", &widget("four", 4)).await;
    assert_eq!(response["allowed"], true, "{response}");
    assert!(
        response.get("warnings").is_none(),
        "serving: no warning: {response}"
    );
    let counts = counted(&served, 4).await;
    assert_eq!(counts.differs, 2, "{counts:?}");

    let recent = served.metrics.recent_admission_divergences("widgets");
    assert_eq!(recent.len(), 3, "{recent:?}");
    assert_eq!(recent[0].result, "wouldDeny");
    assert_eq!(recent[0].object, "Widget default/seven");
    assert_eq!(recent[0].operation, "CREATE");
    assert!(recent[0].message.contains("at most 5"), "{recent:?}");
    let text = served.metrics.encode();
    for line in [
        "rekon_admission_shadow_verdicts_total{plugin=\"widgets\",kind=\"validate\",result=\"would_deny\"} 1",
        "rekon_admission_shadow_verdicts_total{plugin=\"widgets\",kind=\"validate\",result=\"identical\"} 1",
        "rekon_admission_shadow_verdicts_total{plugin=\"widgets\",kind=\"mutate\",result=\"differs\"} 1",
    ] {
        assert!(text.contains(line), "{line} in\n{text}");
    }
}

/// What a shadow costs the answer, printed (not asserted: timings vary):
/// the same 200 validating reviews one at a time, each on a new TLS
/// connection, without and with the shadow. Asserted: with the shadow,
/// every review was shadowed (identical) or, past the bound, dropped.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_does_not_wait_for_the_shadow_printout() {
    const REVIEWS: u64 = 200;
    let mut rows = Vec::new();
    for shadow in [false, true] {
        let served = serve_with(shadow).await;
        // Warm up (the first instances).
        answer(&served, "/validate/widgets", &widget("warm", 1)).await;
        let mut took = Vec::new();
        for i in 0..REVIEWS {
            let started = std::time::Instant::now();
            let response = answer(&served, "/validate/widgets", &widget(&format!("w{i}"), 1)).await;
            took.push(started.elapsed());
            assert_eq!(response["allowed"], true, "{response}");
        }
        took.sort();
        let at = |q: f64| took[((took.len() as f64 - 1.0) * q) as usize].as_secs_f64() * 1e3;
        rows.push(format!(
            "shadow {shadow:>5}: p50 {:.2} ms, p99 {:.2} ms",
            at(0.5),
            at(0.99)
        ));
        if shadow {
            let counts = timeout(STUCK, async {
                loop {
                    let c = served.metrics.admission_shadow_counts("widgets");
                    if c.identical + c.dropped > REVIEWS {
                        return c;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .await
            .expect("every review shadowed or dropped; likely deadlocked");
            assert_eq!(counts.identical + counts.dropped, REVIEWS + 1, "{counts:?}");
            assert_eq!(counts.reviews(), counts.identical, "{counts:?}");
            rows.push(format!(
                "  shadowed {}, dropped {}",
                counts.identical, counts.dropped
            ));
        }
    }
    println!(
        "validating reviews through HTTPS, one at a time, debug build:\n{}",
        rows.join("\n")
    );
}
