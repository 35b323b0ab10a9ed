//! Secured metrics (`rekon run --metrics-secure`) against kube-sim with
//! authentication and RBAC on: `/metrics` over TLS with the mounted
//! certificate, a reader's token answered 200, a stranger's 403, no token
//! or a forged one 401, and the probes plain HTTP on their own port.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use kube_sim::{SimCluster, SimConfig};
use rekon::telemetry::metrics::Metrics;
use rekon::telemetry::scrape_auth::ScrapeAuth;
use rekon::telemetry::server::{OpsServer, Readiness, SecureMetrics};
use rekon::telemetry::serving_cert::{CERT_FILE, KEY_FILE, ServingCert};
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::oneshot;
use tokio::time::timeout;

async fn client(sim: &SimCluster) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_yaml())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

fn status_of(raw: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow::anyhow!("no header end in {text:?}"))?;
    let status = head
        .split_whitespace()
        .nth(1)
        .ok_or_else(|| anyhow::anyhow!("no status"))?
        .parse()?;
    Ok((status, body.to_owned()))
}

fn request(addr: SocketAddr, path: &str, token: Option<&str>) -> String {
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n")
}

/// GET over TLS, trusting only `anchor` (the served certificate).
async fn get_tls(
    addr: SocketAddr,
    anchor: &rustls::pki_types::CertificateDer<'static>,
    path: &str,
    token: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(anchor.clone())?;
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost")?;
    let mut tls = connector.connect(name, tcp).await?;
    tls.write_all(request(addr, path, token).as_bytes()).await?;
    let mut raw = Vec::new();
    // A TLS peer closing without close_notify is fine for these answers.
    let _ = tls.read_to_end(&mut raw).await;
    status_of(&raw)
}

async fn get_plain(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut tcp = tokio::net::TcpStream::connect(addr).await?;
    tcp.write_all(request(addr, path, None).as_bytes()).await?;
    let mut raw = Vec::new();
    tcp.read_to_end(&mut raw).await?;
    status_of(&raw)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_reviewed_reader_scrapes_over_tls_and_probes_stay_plain() -> anyhow::Result<()> {
    timeout(Duration::from_secs(60), async {
        let sim = SimCluster::start_with(SimConfig::new("main").auth(true)).await?;
        sim.create(
            "rbac.authorization.k8s.io/v1",
            "clusterroles",
            None,
            json!({"metadata": {"name": "rekon-metrics-reader"},
                   "rules": [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]}),
        )?;
        sim.create(
            "rbac.authorization.k8s.io/v1",
            "clusterrolebindings",
            None,
            json!({"metadata": {"name": "reader"},
                   "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "rekon-metrics-reader"},
                   "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "reader"}]}),
        )?;
        let reader = sim.add_token_user("reader", &[]);
        let stranger = sim.add_token_user("stranger", &[]);

        let certs = tempfile::tempdir()?;
        let made = rcgen::generate_simple_self_signed(vec!["localhost".to_owned()])?;
        std::fs::write(certs.path().join(CERT_FILE), made.cert.pem())?;
        std::fs::write(certs.path().join(KEY_FILE), made.signing_key.serialize_pem())?;
        let anchor = made.cert.der().clone();

        let metrics = Metrics::new();
        let any: SocketAddr = "127.0.0.1:0".parse()?;
        let server = OpsServer::bind_secure(
            Some(any),
            Some(any),
            metrics,
            Readiness::new(),
            SecureMetrics {
                cert: Arc::new(ServingCert::from_dir(certs.path())?),
                auth: ScrapeAuth::new(client(&sim).await?),
            },
        )
        .await?;
        let addrs = server.local_addrs();
        let (secure, probes) = (addrs[0], addrs[1]);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(server.run(async {
            let _ = stopped.await;
        }));

        let (status, body) = get_tls(secure, &anchor, "/metrics", Some(&reader)).await?;
        assert_eq!(status, 200, "{body}");
        assert!(body.contains("# EOF"), "OpenMetrics text: {body}");
        // Again, from the cache: the same answer.
        assert_eq!(get_tls(secure, &anchor, "/metrics", Some(&reader)).await?.0, 200);
        let (status, body) = get_tls(secure, &anchor, "/metrics", Some(&stranger)).await?;
        assert_eq!(status, 403, "{body}");
        assert!(body.contains("stranger"), "{body}");
        assert_eq!(get_tls(secure, &anchor, "/metrics", Some("forged")).await?.0, 401);
        assert_eq!(get_tls(secure, &anchor, "/metrics", None).await?.0, 401);
        // Plain HTTP on the secure port is no answer at all.
        assert!(get_plain(secure, "/metrics").await.is_err());

        assert_eq!(get_plain(probes, "/healthz").await?.0, 200);
        assert_eq!(get_plain(probes, "/readyz").await?.0, 200);
        assert_eq!(get_plain(probes, "/metrics").await?.0, 404, "metrics only on the secure port");

        let _ = stop.send(());
        task.await??;
        anyhow::Ok(())
    })
    .await
    .expect("timed out: likely deadlocked")
}

#[tokio::test]
async fn secured_metrics_refuse_the_probe_address() -> anyhow::Result<()> {
    timeout(Duration::from_secs(30), async {
        let sim = SimCluster::start_with(SimConfig::new("main").auth(true)).await?;
        let addr: SocketAddr = "127.0.0.1:18443".parse()?;
        let err = OpsServer::bind_secure(
            Some(addr),
            Some(addr),
            Metrics::new(),
            Readiness::new(),
            SecureMetrics {
                cert: Arc::new(ServingCert::self_signed(vec!["localhost".into()])?),
                auth: ScrapeAuth::new(client(&sim).await?),
            },
        )
        .await
        .unwrap_err();
        assert!(err.to_string().contains("their own address"), "{err}");
        anyhow::Ok(())
    })
    .await
    .expect("timed out: likely deadlocked")
}
