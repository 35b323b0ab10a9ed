//! The metrics server's serving certificate: `tls.crt` and `tls.key` from
//! a directory (a mounted `kubernetes.io/tls` Secret, as controller-runtime's
//! `--metrics-cert-path`), re-read when either file changes, or a
//! self-signed certificate made at start when no directory is given.
//!
//! The files are checked at most once per [`RECHECK`], on a TLS handshake:
//! a Secret update (the kubelet swaps a symlink) is served from the next
//! handshake after it, without a restart and without a watcher task. A
//! changed pair that does not load (half-written, mismatched) is logged and
//! the previous certificate keeps serving.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::crypto::ring::sign::any_supported_type;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

/// How often the certificate files are looked at (on a handshake).
pub const RECHECK: Duration = Duration::from_secs(1);

/// File name of the certificate chain in the directory (a TLS Secret's key).
pub const CERT_FILE: &str = "tls.crt";
/// File name of the private key in the directory (a TLS Secret's key).
pub const KEY_FILE: &str = "tls.key";

/// Why a serving certificate could not be loaded or made.
#[derive(Debug, thiserror::Error)]
pub enum CertError {
    /// A file could not be read.
    #[error("failed to read {path}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// A file could not be written.
    #[error("failed to write {path}")]
    Write {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The PEM in a file could not be parsed, or holds nothing usable.
    #[error("failed to parse {path}: {detail}")]
    Parse {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        detail: String,
    },
    /// The key is of a kind rustls cannot sign with.
    #[error("unsupported private key in {path}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Cause.
        #[source]
        source: rustls::Error,
    },
    /// The self-signed certificate could not be made.
    #[error("failed to make a self-signed serving certificate")]
    SelfSigned(#[source] rcgen::Error),
}

impl CertError {
    /// A machine-readable reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::Read { .. } => "CertificateUnreadable",
            Self::Write { .. } => "CertificateUnwritable",
            Self::Parse { .. } => "CertificateInvalid",
            Self::Key { .. } => "KeyUnsupported",
            Self::SelfSigned(_) => "SelfSignedFailed",
        }
    }
}

/// Size and modification time of both files: what "changed" means.
type Stamp = [(u64, Option<SystemTime>); 2];

#[derive(Debug)]
struct Current {
    key: Arc<CertifiedKey>,
    stamp: Option<Stamp>,
    checked: Instant,
}

/// A rustls certificate resolver over files or a self-signed certificate;
/// see the [module docs](self).
#[derive(Debug)]
pub struct ServingCert {
    dir: Option<PathBuf>,
    current: Mutex<Current>,
}

impl ServingCert {
    /// `tls.crt` and `tls.key` from `dir`, re-read when they change.
    ///
    /// # Errors
    /// When the files cannot be read or parsed now.
    pub fn from_dir(dir: impl Into<PathBuf>) -> Result<Self, CertError> {
        let dir = dir.into();
        let stamp = stamp(&dir);
        let key = load(&dir)?;
        Ok(Self {
            dir: Some(dir),
            current: Mutex::new(Current {
                key,
                stamp,
                checked: Instant::now(),
            }),
        })
    }

    /// A certificate signed by its own key for `names` (DNS names or IP
    /// addresses), as controller-runtime serves when given no certificate:
    /// scrapers must skip verification (`insecureSkipVerify`) or pin it.
    ///
    /// # Errors
    /// When a name is invalid or the key cannot be made.
    pub fn self_signed(names: Vec<String>) -> Result<Self, CertError> {
        let made = rcgen::generate_simple_self_signed(names).map_err(CertError::SelfSigned)?;
        let key = PrivateKeyDer::Pkcs8(made.signing_key.serialize_der().into());
        let signer = any_supported_type(&key).map_err(|source| CertError::Key {
            path: PathBuf::from("<self-signed>"),
            source,
        })?;
        Ok(Self {
            dir: None,
            current: Mutex::new(Current {
                key: Arc::new(CertifiedKey::new(vec![made.cert.der().clone()], signer)),
                stamp: None,
                checked: Instant::now(),
            }),
        })
    }

    /// The certificate chain served now (leaf first), DER.
    #[must_use]
    pub fn chain(&self) -> Vec<CertificateDer<'static>> {
        self.current_key().cert.clone()
    }

    /// The certificate to serve, re-read first when the files changed.
    fn current_key(&self) -> Arc<CertifiedKey> {
        let mut current = self.current.lock();
        if let Some(dir) = &self.dir
            && current.checked.elapsed() >= RECHECK
        {
            current.checked = Instant::now();
            let now = stamp(dir);
            if now != current.stamp {
                match load(dir) {
                    Ok(key) => {
                        tracing::info!(dir = %dir.display(), "serving certificate reloaded");
                        current.key = key;
                        current.stamp = now;
                    }
                    Err(e) => tracing::warn!(
                        dir = %dir.display(),
                        error = %e,
                        reason = e.reason(),
                        "changed serving certificate does not load; the previous one keeps serving"
                    ),
                }
            }
        }
        current.key.clone()
    }
}

impl ResolvesServerCert for ServingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current_key())
    }
}

fn stamp(dir: &Path) -> Option<Stamp> {
    let one = |name: &str| {
        std::fs::metadata(dir.join(name))
            .ok()
            .map(|m| (m.len(), m.modified().ok()))
    };
    Some([one(CERT_FILE)?, one(KEY_FILE)?])
}

fn load(dir: &Path) -> Result<Arc<CertifiedKey>, CertError> {
    let read = |name: &str| {
        let path = dir.join(name);
        std::fs::read(&path)
            .map(|bytes| (path.clone(), bytes))
            .map_err(|source| CertError::Read { path, source })
    };
    let (cert_path, cert_pem) = read(CERT_FILE)?;
    let (key_path, key_pem) = read(KEY_FILE)?;
    let chain = CertificateDer::pem_slice_iter(&cert_pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| CertError::Parse {
            path: cert_path.clone(),
            detail: e.to_string(),
        })?;
    if chain.is_empty() {
        return Err(CertError::Parse {
            path: cert_path,
            detail: "no CERTIFICATE block".into(),
        });
    }
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| CertError::Parse {
        path: key_path.clone(),
        detail: e.to_string(),
    })?;
    let signer = any_supported_type(&key).map_err(|source| CertError::Key {
        path: key_path.clone(),
        source,
    })?;
    let certified = CertifiedKey::new(chain, signer);
    certified.keys_match().map_err(|source| CertError::Key {
        path: key_path,
        source,
    })?;
    Ok(Arc::new(certified))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write_pair(dir: &Path, name: &str) -> Vec<u8> {
        let made = rcgen::generate_simple_self_signed(vec![name.to_owned()]).unwrap();
        std::fs::write(dir.join(CERT_FILE), made.cert.pem()).unwrap();
        std::fs::write(dir.join(KEY_FILE), made.signing_key.serialize_pem()).unwrap();
        made.cert.der().to_vec()
    }

    #[test]
    fn a_changed_pair_is_served_and_a_broken_one_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_pair(dir.path(), "one.example");
        let cert = ServingCert::from_dir(dir.path()).unwrap();
        assert_eq!(cert.chain()[0].as_ref(), first.as_slice());

        let second = write_pair(dir.path(), "two.example");
        cert.current.lock().checked -= RECHECK;
        assert_eq!(cert.chain()[0].as_ref(), second.as_slice(), "reloaded");

        std::fs::write(dir.path().join(KEY_FILE), "not a key").unwrap();
        cert.current.lock().checked -= RECHECK;
        assert_eq!(
            cert.chain()[0].as_ref(),
            second.as_slice(),
            "a broken pair keeps the previous certificate"
        );
    }

    #[test]
    fn a_missing_directory_is_an_error_naming_the_file() {
        let err = ServingCert::from_dir("/nonexistent/rekon-certs").unwrap_err();
        assert_eq!(err.reason(), "CertificateUnreadable");
        assert!(err.to_string().contains("tls.crt"), "{err}");
    }

    #[test]
    fn self_signed_serves_a_certificate() {
        let cert = ServingCert::self_signed(vec!["localhost".into()]).unwrap();
        assert_eq!(cert.chain().len(), 1);
    }
}
