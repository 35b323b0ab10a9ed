//! What the webhook tests share: a CA with a serving certificate for
//! webhook servers, and kubectl with a standard input.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use kube_sim::Sim;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::io::AsyncWriteExt;

/// A CA and a serving certificate for 127.0.0.1 and `hook.default.svc`.
pub struct Certs {
    pub ca_pem: String,
    pub server: rustls::ServerConfig,
    /// The serving certificate and its key (PEM), for other servers.
    pub cert_pem: String,
    pub key_pem: String,
}

pub fn certs() -> Certs {
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    // Each CA its own name, as two clusters' CAs have.
    let mut dn = rcgen::DistinguishedName::new();
    dn.push(
        rcgen::DnType::CommonName,
        format!("webhook-ca-{}", uuid::Uuid::new_v4()),
    );
    ca.distinguished_name = dn;
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca.self_signed(&ca_key).unwrap();
    let leaf = CertificateParams::new(vec![
        "127.0.0.1".to_string(),
        "hook.default.svc".to_string(),
    ])
    .unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf_cert = leaf
        .signed_by(&leaf_key, &Issuer::from_params(&ca, &ca_key))
        .unwrap();
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
    let server = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(vec![CertificateDer::from(leaf_cert.der().to_vec())], key)
    .unwrap();
    Certs {
        ca_pem: ca_cert.pem(),
        server,
        cert_pem: leaf_cert.pem(),
        key_pem: leaf_key.serialize_pem(),
    }
}

/// A caBundle: the PEM, base64.
pub fn ca_b64(pem: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(pem)
}

/// Runs kubectl against the sim's kubeconfig with a fresh cache; returns
/// (success, stdout, stderr).
pub async fn kubectl(sim: &Sim, args: &[&str], stdin: Option<&str>) -> (bool, String, String) {
    let cache = tempfile::tempdir().unwrap();
    let mut child = tokio::process::Command::new("kubectl")
        .arg("--kubeconfig")
        .arg(sim.kubeconfig_path())
        .arg("--cache-dir")
        .arg(cache.path())
        .arg("--request-timeout=20s")
        .args(args)
        .env_remove("KUBECONFIG")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("kubectl is installed");
    let mut input = child.stdin.take().unwrap();
    if let Some(s) = stdin {
        input.write_all(s.as_bytes()).await.unwrap();
    }
    drop(input);
    let out = tokio::time::timeout(Duration::from_secs(40), child.wait_with_output())
        .await
        .expect("kubectl finishes")
        .unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}
