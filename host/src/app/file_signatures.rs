//! Signed plugin files (`rekon run --plugins DIR` with
//! `--require-signatures` or `--signature-key`): the [`FileCheck`] the
//! plugin registry runs on every file before compiling it, verifying the
//! cosign blob signature beside it (`NAME.wasm.sig`,
//! [`crate::source::signature::blob`]) with the configured keys. A refusal
//! is a load failure like any other (the previous version keeps serving;
//! logged, counted, an Event on the host's Pod) and is counted in
//! `rekon_plugin_verification_total{outcome}` too.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::info;

use crate::plugin::FileCheck;
use crate::source::signature::{KeyError, Policy, PublicKey, verify_blob};
use crate::telemetry::metrics::Metrics;

/// What plugin files must carry.
#[derive(Clone, Debug, Default)]
pub struct FileSignatures {
    /// Trusted public keys (`--signature-key FILE`), named by their file.
    pub keys: Vec<(String, PublicKey)>,
    /// Every file must verify (`--require-signatures`), even with no key
    /// given (then every file is refused).
    pub required: bool,
}

/// Why a key file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    /// Unreadable.
    #[error("failed to read signature key {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// Not a public key rekon verifies with.
    #[error("signature key {path}: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KeyError,
    },
}

impl FileSignatures {
    /// Keys read from `paths` (PEM `PUBLIC KEY`, as `cosign.pub`).
    ///
    /// # Errors
    /// The first file that is unreadable or holds no usable key.
    pub fn from_key_files(paths: &[PathBuf], required: bool) -> Result<Self, KeyFileError> {
        let mut keys = Vec::with_capacity(paths.len());
        for path in paths {
            let text = std::fs::read_to_string(path).map_err(|source| KeyFileError::Read {
                path: path.clone(),
                source,
            })?;
            let key = PublicKey::from_pem(&text).map_err(|source| KeyFileError::Key {
                path: path.clone(),
                source,
            })?;
            keys.push((path.display().to_string(), key));
        }
        Ok(Self { keys, required })
    }

    /// The check files must pass; `None` when nothing asks for signatures.
    #[must_use]
    pub fn check(&self, metrics: Metrics) -> Option<FileCheck> {
        if !self.required && self.keys.is_empty() {
            return None;
        }
        let policy = Policy::keys(self.keys.clone());
        Some(Arc::new(
            move |path: &Path, bytes: &[u8], signature: Option<&[u8]>| {
                if policy.trust.is_empty() {
                    metrics.plugin_verified("key_unavailable");
                    return Err(
                    "KeyUnavailable: signatures are required (--require-signatures) and no --signature-key was given"
                        .to_owned(),
                );
                }
                match verify_blob(bytes, signature, &policy) {
                    Ok(verified) => {
                        metrics.plugin_verified("verified");
                        info!(
                            path = %path.display(),
                            digest = %verified.digest,
                            signers = %verified.signers.join(", "),
                            "plugin file signature verified"
                        );
                        Ok(())
                    }
                    Err(e) => {
                        metrics.plugin_verified(e.outcome());
                        Err(format!(
                            "{}: {e} (signature file {})",
                            e.reason(),
                            crate::plugin::signature_file(path).display()
                        ))
                    }
                }
            },
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::signature::{KeyAlgorithm, SigningKey};

    #[test]
    fn nothing_asked_no_check_and_a_refusal_names_its_reason_and_counts() {
        let metrics = Metrics::new();
        assert!(FileSignatures::default().check(metrics.clone()).is_none());
        let required = FileSignatures {
            required: true,
            ..FileSignatures::default()
        };
        let check = required.check(metrics.clone()).expect("a check");
        let err = check(Path::new("a.wasm"), b"x", None).unwrap_err();
        assert!(err.starts_with("KeyUnavailable"), "{err}");
        let key = SigningKey::generate(KeyAlgorithm::EcdsaP256).unwrap();
        let keyed = FileSignatures {
            keys: vec![("k.pub".into(), key.public_key())],
            required: false,
        };
        let check = keyed.check(metrics.clone()).expect("a check");
        let err = check(Path::new("/p/a.wasm"), b"x", None).unwrap_err();
        assert!(err.starts_with("SignatureMissing"), "{err}");
        assert!(err.contains("/p/a.wasm.sig"), "{err}");
        let text = metrics.encode();
        assert!(text.contains("rekon_plugin_verification_total{outcome=\"signature_missing\"} 1"));
        assert!(text.contains("rekon_plugin_verification_total{outcome=\"key_unavailable\"} 1"));
    }
}
