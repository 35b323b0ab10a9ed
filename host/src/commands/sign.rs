//! `rekon plugin keygen`, `rekon plugin sign REF --key KEY`, `rekon plugin
//! verify REF --key PUB` and the signing half of `rekon plugin push --sign`:
//! cosign-compatible signatures (`source::signature`) from the command line,
//! with the credentials and transport options of `push`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::push::{RegistryCommandError, RegistryOptions};
use crate::source::signature::{
    self, KeyAlgorithm, KeyError, Policy, PublicKey, SignError, Signed, SigningKey, Verified,
    VerifyError,
};

/// Errors of the signing commands.
#[derive(Debug, thiserror::Error)]
pub enum SignCommandError {
    /// A key file could not be read or written.
    #[error("failed to {action} key file {path}: {source}")]
    KeyFile {
        /// `read` or `write`.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A key file holds no usable key.
    #[error("key file {path}: {source}")]
    Key {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: KeyError,
    },
    /// The key files exist already.
    #[error("{0} exists: not overwriting a key")]
    Exists(PathBuf),
    /// Credentials or transport.
    #[error(transparent)]
    Registry(#[from] RegistryCommandError),
    /// Signing failed.
    #[error(transparent)]
    Sign(Box<SignError>),
    /// Verification failed.
    #[error("verification failed ({}): {}", .0.reason(), .0)]
    Verify(Box<VerifyError>),
}

impl From<SignError> for SignCommandError {
    fn from(e: SignError) -> Self {
        Self::Sign(Box::new(e))
    }
}

impl From<VerifyError> for SignCommandError {
    fn from(e: VerifyError) -> Self {
        Self::Verify(Box::new(e))
    }
}

/// Writes a new key pair: `<prefix>.key` (PKCS#8 PEM, mode 0600) and
/// `<prefix>.pub` (SubjectPublicKeyInfo PEM, what cosign and a Plugin's
/// `verification.keys` read). Returns the two paths.
///
/// # Errors
/// When a file exists or cannot be written.
pub fn keygen(
    prefix: &Path,
    algorithm: KeyAlgorithm,
) -> Result<(PathBuf, PathBuf), SignCommandError> {
    let private = prefix.with_extension("key");
    let public = prefix.with_extension("pub");
    for path in [&private, &public] {
        if path.exists() {
            return Err(SignCommandError::Exists(path.clone()));
        }
    }
    let key = SigningKey::generate(algorithm).map_err(|source| SignCommandError::Key {
        path: private.clone(),
        source,
    })?;
    let write = |path: &Path, text: &str, mode: u32| {
        use std::io::Write as _;
        #[cfg(unix)]
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut options = std::fs::OpenOptions::new();
        options.write(true).create_new(true);
        #[cfg(unix)]
        options.mode(mode);
        options
            .open(path)
            .and_then(|mut f| f.write_all(text.as_bytes()))
            .map_err(|source| SignCommandError::KeyFile {
                action: "write",
                path: path.to_path_buf(),
                source,
            })
    };
    write(&private, &key.to_pem(), 0o600)?;
    write(&public, &key.public_key_pem(), 0o644)?;
    Ok((private, public))
}

fn read(path: &Path) -> Result<String, SignCommandError> {
    std::fs::read_to_string(path).map_err(|source| SignCommandError::KeyFile {
        action: "read",
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a signing key file (unencrypted PKCS#8 PEM).
///
/// # Errors
/// When it cannot be read or is not an accepted key.
pub fn signing_key(path: &Path) -> Result<SigningKey, SignCommandError> {
    SigningKey::from_pem(&read(path)?).map_err(|source| SignCommandError::Key {
        path: path.to_path_buf(),
        source,
    })
}

/// Reads a public key file (SubjectPublicKeyInfo PEM, `cosign.pub`).
///
/// # Errors
/// When it cannot be read or is not an accepted key.
pub fn public_key(path: &Path) -> Result<PublicKey, SignCommandError> {
    PublicKey::from_pem(&read(path)?).map_err(|source| SignCommandError::Key {
        path: path.to_path_buf(),
        source,
    })
}

/// Signs the module `reference` names with the key in `key`, the payload
/// carrying `annotations`.
///
/// # Errors
/// See [`SignCommandError`].
pub async fn sign(
    reference: &str,
    key: &Path,
    annotations: &BTreeMap<String, String>,
    options: &RegistryOptions,
) -> Result<Signed, SignCommandError> {
    let key = signing_key(key)?;
    let auth = options.auth(reference)?;
    Ok(signature::sign(&options.fetcher(), reference, &key, annotations, &auth).await?)
}

/// Verifies the module `reference` names: signed by at least
/// `minimum_matches` of `keys`, the payload carrying `annotations`.
///
/// # Errors
/// See [`SignCommandError`]; [`SignCommandError::Verify`] when it does not verify.
pub async fn verify(
    reference: &str,
    keys: &[PathBuf],
    minimum_matches: usize,
    annotations: BTreeMap<String, String>,
    options: &RegistryOptions,
) -> Result<Verified, SignCommandError> {
    let mut trusted = Vec::new();
    for path in keys {
        trusted.push((path.display().to_string(), public_key(path)?));
    }
    let policy = Policy {
        minimum_matches,
        annotations,
        ..Policy::keys(trusted)
    };
    let auth = options.auth(reference)?;
    Ok(signature::verify(&options.fetcher(), reference, None, &policy, &auth).await?)
}
