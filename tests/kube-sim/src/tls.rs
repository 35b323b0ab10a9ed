//! TLS: a per-cluster certificate authority, the serving certificate,
//! client certificates, and the listener that terminates TLS.
//!
//! Like a kubeadm cluster, each cluster has its own CA. It signs the
//! serving certificate (SANs `127.0.0.1`, `localhost`, `kubernetes`,
//! `kubernetes.default`, `kubernetes.default.svc`) and the client
//! certificates tests ask for. A client certificate signed by the CA
//! authenticates as its subject: CN is the user name and each O a group,
//! as the apiserver's x509 authenticator reads them (see [`crate::auth`]).
//!
//! Handshakes run on their own tasks so a client that never finishes one
//! delays nobody; finished connections are handed to axum through
//! [`TlsListener`], and the verified client certificate travels with the
//! connection as [`Peer`].

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::connect_info::Connected;
use axum::serve::{IncomingStream, Listener};
use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, ExtendedKeyUsagePurpose, IsCa,
    Issuer, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::server::TlsStream;

/// Errors of creating certificates or the TLS configuration.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// Generating a key or certificate failed.
    #[error("failed to generate a certificate")]
    Generate(#[from] rcgen::Error),
    /// Building the rustls configuration failed.
    #[error("failed to build the TLS configuration")]
    Config(#[from] rustls::Error),
    /// Building the client certificate verifier failed.
    #[error("failed to build the client certificate verifier")]
    Verifier(#[from] rustls::server::VerifierBuilderError),
    /// A client certificate can carry at most two groups.
    #[error("failed to issue a client certificate for {0}: at most two groups")]
    TooManyGroups(String),
    /// The cluster serves plain HTTP.
    #[error("failed to issue a client certificate: the cluster serves plain HTTP")]
    NoTls,
}

/// A cluster's certificate authority and serving certificate.
pub struct Pki {
    ca_params: CertificateParams,
    ca_key: KeyPair,
    ca_pem: String,
    ca_der: CertificateDer<'static>,
    serving_der: CertificateDer<'static>,
    serving_key: Vec<u8>,
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").finish_non_exhaustive()
    }
}

/// A certificate and its private key, PEM encoded.
#[derive(Debug, Clone)]
pub struct CertifiedKey {
    /// `-----BEGIN CERTIFICATE-----` ...
    pub cert_pem: String,
    /// `-----BEGIN PRIVATE KEY-----` (PKCS#8) ...
    pub key_pem: String,
}

impl Pki {
    /// A new CA named after the cluster and a serving certificate for
    /// 127.0.0.1.
    pub fn generate(cluster: &str) -> Result<Self, TlsError> {
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, format!("kube-sim-ca-{cluster}"));
        ca_params.distinguished_name = dn;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_key = KeyPair::generate()?;
        let ca_cert = ca_params.self_signed(&ca_key)?;
        let mut serving = CertificateParams::new(vec![
            "127.0.0.1".to_string(),
            "localhost".to_string(),
            "kubernetes".to_string(),
            "kubernetes.default".to_string(),
            "kubernetes.default.svc".to_string(),
        ])?;
        let mut dn = DistinguishedName::new();
        dn.push(DnType::CommonName, "kube-apiserver");
        serving.distinguished_name = dn;
        serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        serving.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let serving_key = KeyPair::generate()?;
        let serving_cert = {
            let issuer = Issuer::from_params(&ca_params, &ca_key);
            serving.signed_by(&serving_key, &issuer)?
        };
        Ok(Self {
            ca_pem: ca_cert.pem(),
            ca_der: ca_cert.der().clone(),
            ca_params,
            ca_key,
            serving_der: serving_cert.der().clone(),
            serving_key: serving_key.serialize_der(),
        })
    }

    /// The CA certificate (PEM), as kubeconfigs carry it in
    /// `certificate-authority-data` and Pods find it in `ca.crt`.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client certificate for `user` with `groups` (CN and O).
    ///
    /// At most two groups: the certificate generator keeps one value per
    /// attribute type, and the second group is written under the same
    /// organizationName OID as a custom attribute type.
    pub fn client_cert(&self, user: &str, groups: &[&str]) -> Result<CertifiedKey, TlsError> {
        let mut params = CertificateParams::new(Vec::<String>::new())?;
        let mut dn = DistinguishedName::new();
        let mut groups = groups.iter();
        if let Some(g) = groups.next() {
            dn.push(DnType::OrganizationName, *g);
        }
        if let Some(g) = groups.next() {
            dn.push(DnType::CustomDnType(vec![2, 5, 4, 10]), *g);
        }
        if groups.next().is_some() {
            return Err(TlsError::TooManyGroups(user.to_string()));
        }
        dn.push(DnType::CommonName, user);
        params.distinguished_name = dn;
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        let key = KeyPair::generate()?;
        let issuer = Issuer::from_params(&self.ca_params, &self.ca_key);
        let cert = params.signed_by(&key, &issuer)?;
        Ok(CertifiedKey {
            cert_pem: cert.pem(),
            key_pem: key.serialize_pem(),
        })
    }

    /// The server configuration: the serving certificate, and client
    /// certificates verified against the CA when a client offers one.
    pub fn server_config(&self) -> Result<rustls::ServerConfig, TlsError> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.ca_der.clone())?;
        let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
            Arc::new(roots),
            provider.clone(),
        )
        .allow_unauthenticated()
        .build()?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.serving_key.clone()));
        let mut cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_client_cert_verifier(verifier)
            .with_single_cert(vec![self.serving_der.clone()], key)?;
        // HTTP/1.1 only: kube-sim serves HTTP/1.1 (contract section 1).
        cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(cfg)
    }
}

/// What the server knows about a connection: the remote address and the
/// client certificate the handshake verified, if the client sent one.
#[derive(Debug, Clone)]
pub struct Peer {
    /// Remote address.
    pub addr: SocketAddr,
    /// The verified leaf certificate (DER).
    pub client_cert: Option<Arc<Vec<u8>>>,
}

/// A TLS listener for axum: accepts TCP, completes handshakes on their own
/// tasks, and yields finished connections.
pub struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, Peer)>,
}

/// How long a client may take to finish its handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

impl TlsListener {
    /// Wraps a bound listener. The accept task ends when the returned
    /// listener is dropped.
    pub fn new(tcp: TcpListener, config: rustls::ServerConfig) -> std::io::Result<Self> {
        let local = tcp.local_addr()?;
        let acceptor = TlsAcceptor::from(Arc::new(config));
        let (tx, ready) = mpsc::channel(64);
        tokio::spawn(async move {
            loop {
                let (stream, addr) = tokio::select! {
                    r = tcp.accept() => match r {
                        Ok(x) => x,
                        Err(e) => {
                            tracing::debug!(error = %e, "failed to accept a connection");
                            tokio::time::sleep(Duration::from_millis(10)).await;
                            continue;
                        }
                    },
                    () = tx.closed() => return,
                };
                // Small request/response pairs: Nagle would add 40 ms stalls.
                let _ = stream.set_nodelay(true);
                let acceptor = acceptor.clone();
                let tx = tx.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            let client_cert = tls
                                .get_ref()
                                .1
                                .peer_certificates()
                                .and_then(|c| c.first())
                                .map(|c| Arc::new(c.to_vec()));
                            let _ = tx.send((tls, Peer { addr, client_cert })).await;
                        }
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %addr, error = %e, "TLS handshake failed");
                        }
                        Err(_) => tracing::debug!(peer = %addr, "TLS handshake timed out"),
                    }
                });
            }
        });
        Ok(Self { local, ready })
    }
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = Peer;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(x) => x,
            // The accept task only ends when this listener is dropped.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(Peer {
            addr: self.local,
            client_cert: None,
        })
    }
}

impl Connected<IncomingStream<'_, TlsListener>> for Peer {
    fn connect_info(stream: IncomingStream<'_, TlsListener>) -> Self {
        stream.remote_addr().clone()
    }
}

/// The subject of a DER certificate as `(common name, organizations)`,
/// read the way the apiserver's x509 authenticator reads it.
pub fn subject(cert_der: &[u8]) -> Option<(String, Vec<String>)> {
    // Certificate ::= SEQUENCE { tbsCertificate SEQUENCE { [0] version OPTIONAL,
    //   serialNumber, signature, issuer, validity, subject, ... } ... }
    let (_, cert, _) = der_tlv(cert_der)?;
    let (_, mut tbs, _) = der_tlv(cert)?;
    let mut fields = Vec::new();
    while !tbs.is_empty() {
        let (tag, value, rest) = der_tlv(tbs)?;
        fields.push((tag, value));
        tbs = rest;
    }
    let skip = usize::from(fields.first()?.0 == 0xa0);
    let (tag, mut name) = *fields.get(skip + 4)?;
    if tag != 0x30 {
        return None;
    }
    let mut cn = String::new();
    let mut orgs = Vec::new();
    // Name ::= SEQUENCE OF SET OF SEQUENCE { type OID, value ANY }
    while !name.is_empty() {
        let (_, mut set, rest) = der_tlv(name)?;
        name = rest;
        while !set.is_empty() {
            let (_, atv, rest) = der_tlv(set)?;
            set = rest;
            let (_, oid, value) = der_tlv(atv)?;
            let (_, text, _) = der_tlv(value)?;
            let text = String::from_utf8_lossy(text).into_owned();
            match oid {
                [0x55, 0x04, 0x03] => cn = text,
                [0x55, 0x04, 0x0a] => orgs.push(text),
                _ => {}
            }
        }
    }
    Some((cn, orgs))
}

/// One DER TLV: (tag, value, rest).
fn der_tlv(b: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let tag = *b.first()?;
    let first = *b.get(1)?;
    let (len, header) = if first < 0x80 {
        (usize::from(first), 2)
    } else {
        let n = usize::from(first & 0x7f);
        if n == 0 || n > 4 {
            return None;
        }
        let mut len = 0usize;
        for i in 0..n {
            len = (len << 8) | usize::from(*b.get(2 + i)?);
        }
        (len, 2 + n)
    };
    let end = header.checked_add(len)?;
    let value = b.get(header..end)?;
    Some((tag, value, &b[end..]))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_certificates_carry_user_and_groups() {
        let pki = Pki::generate("t").unwrap();
        let ck = pki.client_cert("alice", &["dev", "ops"]).unwrap();
        let der = rustls::pki_types::pem::PemObject::from_pem_slice(ck.cert_pem.as_bytes())
            .map(|c: CertificateDer<'_>| c.to_vec())
            .unwrap();
        let (cn, orgs) = subject(&der).unwrap();
        assert_eq!(cn, "alice");
        assert_eq!(orgs, ["dev", "ops"]);
        assert!(pki.client_cert("bob", &["a", "b", "c"]).is_err());
    }
}
