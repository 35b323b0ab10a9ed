//! Keys: ECDSA P-256 (cosign's default) and Ed25519, read from PEM.
//!
//! - A signing key is unencrypted PKCS#8 PEM (`-----BEGIN PRIVATE KEY-----`,
//!   what `openssl genpkey` and `rekon plugin keygen` write). cosign's own
//!   `cosign.key` is encrypted (scrypt + secretbox, `ENCRYPTED SIGSTORE
//!   PRIVATE KEY`) and refused with a message saying so: sign with cosign
//!   itself, or import a PKCS#8 key into cosign (`cosign import-key-pair`)
//!   so both tools share one key.
//! - A public key is SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`),
//!   exactly cosign's `cosign.pub`.
//!
//! Parsing and key generation are rcgen's (already used for serving
//! certificates; its PKCS#8 and SPKI parsing sit on ring and x509-parser),
//! signing and verification ring's (the crypto provider rustls and kube
//! already use): no second crypto stack in the binary.

use rcgen::{PublicKeyData as _, SigningKey as _};
use ring::signature::{ECDSA_P256_SHA256_ASN1, ED25519, UnparsedPublicKey};
use sha2::{Digest, Sha256};

/// The signature schemes accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyAlgorithm {
    /// ECDSA over P-256 with SHA-256, signatures ASN.1 DER (cosign's default).
    EcdsaP256,
    /// Ed25519 (pure: the payload itself is signed).
    Ed25519,
}

impl KeyAlgorithm {
    fn of(alg: &'static rcgen::SignatureAlgorithm) -> Option<Self> {
        if alg == &rcgen::PKCS_ECDSA_P256_SHA256 {
            Some(Self::EcdsaP256)
        } else if alg == &rcgen::PKCS_ED25519 {
            Some(Self::Ed25519)
        } else {
            None
        }
    }

    fn rcgen(self) -> &'static rcgen::SignatureAlgorithm {
        match self {
            Self::EcdsaP256 => &rcgen::PKCS_ECDSA_P256_SHA256,
            Self::Ed25519 => &rcgen::PKCS_ED25519,
        }
    }

    /// `ecdsa-p256` or `ed25519`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Self::EcdsaP256 => "ecdsa-p256",
            Self::Ed25519 => "ed25519",
        }
    }
}

impl std::str::FromStr for KeyAlgorithm {
    type Err = KeyError;

    fn from_str(s: &str) -> Result<Self, KeyError> {
        match s {
            "ecdsa-p256" | "ecdsa" | "p256" => Ok(Self::EcdsaP256),
            "ed25519" => Ok(Self::Ed25519),
            other => Err(KeyError::Unsupported(format!(
                "algorithm {other:?} (use ecdsa-p256 or ed25519)"
            ))),
        }
    }
}

/// Why a key could not be read, made or used.
#[derive(Debug, thiserror::Error)]
pub enum KeyError {
    /// cosign's encrypted private key format.
    #[error(
        "encrypted keys (cosign's `ENCRYPTED SIGSTORE PRIVATE KEY`) are not read: use an unencrypted PKCS#8 key (`rekon plugin keygen`, or `openssl genpkey -algorithm ed25519`) and `cosign import-key-pair --key` it if cosign should sign with it too"
    )]
    Encrypted,
    /// Not a PEM key of the expected kind.
    #[error("failed to parse the {what}: {detail}")]
    Parse {
        /// `private key` or `public key`.
        what: &'static str,
        /// The parser's words.
        detail: String,
    },
    /// A key of another algorithm (RSA, P-384, ...).
    #[error("unsupported key: {0}")]
    Unsupported(String),
    /// Signing failed (the random number generator).
    #[error("failed to sign: {0}")]
    Sign(String),
}

/// A private key that signs payloads.
pub struct SigningKey {
    pair: rcgen::KeyPair,
    algorithm: KeyAlgorithm,
}

impl std::fmt::Debug for SigningKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SigningKey")
            .field("algorithm", &self.algorithm)
            .field("public", &self.public_key().fingerprint())
            .finish_non_exhaustive()
    }
}

impl SigningKey {
    /// A new random key.
    ///
    /// # Errors
    /// When the random number generator fails.
    pub fn generate(algorithm: KeyAlgorithm) -> Result<Self, KeyError> {
        let pair = rcgen::KeyPair::generate_for(algorithm.rcgen())
            .map_err(|e| KeyError::Sign(e.to_string()))?;
        Ok(Self { pair, algorithm })
    }

    /// Reads an unencrypted PKCS#8 PEM key (ECDSA P-256 or Ed25519).
    ///
    /// # Errors
    /// An encrypted key, another format or algorithm.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        if text.contains("ENCRYPTED") {
            return Err(KeyError::Encrypted);
        }
        if !text.contains("-----BEGIN PRIVATE KEY-----") {
            return Err(KeyError::Parse {
                what: "private key",
                detail: "expected a PKCS#8 PEM block `-----BEGIN PRIVATE KEY-----`".into(),
            });
        }
        let pair = rcgen::KeyPair::from_pem(text).map_err(|e| KeyError::Parse {
            what: "private key",
            detail: e.to_string(),
        })?;
        let algorithm = KeyAlgorithm::of(pair.algorithm()).ok_or_else(|| {
            KeyError::Unsupported("only ECDSA P-256 and Ed25519 keys are accepted".into())
        })?;
        Ok(Self { pair, algorithm })
    }

    /// The key as PKCS#8 PEM.
    #[must_use]
    pub fn to_pem(&self) -> String {
        self.pair.serialize_pem()
    }

    /// Its algorithm.
    #[must_use]
    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// The public half.
    #[must_use]
    pub fn public_key(&self) -> PublicKey {
        PublicKey {
            algorithm: self.algorithm,
            raw: self.pair.der_bytes().to_vec(),
            spki: self.pair.subject_public_key_info(),
        }
    }

    /// The public half as SubjectPublicKeyInfo PEM (`cosign.pub`'s format).
    #[must_use]
    pub fn public_key_pem(&self) -> String {
        self.pair.public_key_pem()
    }

    /// Signs `payload`: ECDSA P-256 over its SHA-256, ASN.1 DER; Ed25519
    /// over the payload itself (as cosign does for each).
    ///
    /// # Errors
    /// When the random number generator fails (ECDSA).
    pub fn sign(&self, payload: &[u8]) -> Result<Vec<u8>, KeyError> {
        self.pair
            .sign(payload)
            .map_err(|e| KeyError::Sign(e.to_string()))
    }
}

/// A public key that verifies signatures.
#[derive(Clone, PartialEq, Eq)]
pub struct PublicKey {
    algorithm: KeyAlgorithm,
    /// The key itself (an uncompressed point, or 32 bytes).
    raw: Vec<u8>,
    /// SubjectPublicKeyInfo DER (the fingerprint's input).
    spki: Vec<u8>,
}

impl std::fmt::Debug for PublicKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "PublicKey({} {})",
            self.algorithm.name(),
            self.fingerprint()
        )
    }
}

impl PublicKey {
    /// Reads SubjectPublicKeyInfo PEM (`-----BEGIN PUBLIC KEY-----`).
    ///
    /// # Errors
    /// Another format, or an algorithm other than ECDSA P-256 and Ed25519.
    pub fn from_pem(text: &str) -> Result<Self, KeyError> {
        if !text.contains("-----BEGIN PUBLIC KEY-----") {
            return Err(KeyError::Parse {
                what: "public key",
                detail: "expected a PEM block `-----BEGIN PUBLIC KEY-----`".into(),
            });
        }
        let spki = rcgen::SubjectPublicKeyInfo::from_pem(text).map_err(|e| match e {
            rcgen::Error::UnsupportedSignatureAlgorithm => {
                KeyError::Unsupported("only ECDSA P-256 and Ed25519 keys are accepted".into())
            }
            e => KeyError::Parse {
                what: "public key",
                detail: e.to_string(),
            },
        })?;
        let algorithm = KeyAlgorithm::of(spki.algorithm()).ok_or_else(|| {
            KeyError::Unsupported("only ECDSA P-256 and Ed25519 keys are accepted".into())
        })?;
        Ok(Self {
            algorithm,
            raw: spki.der_bytes().to_vec(),
            spki: spki.subject_public_key_info(),
        })
    }

    /// Its algorithm.
    #[must_use]
    pub fn algorithm(&self) -> KeyAlgorithm {
        self.algorithm
    }

    /// `sha256:` and the first 16 hex digits of the SHA-256 of its
    /// SubjectPublicKeyInfo: how messages name a key.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        let hex = hex::encode(Sha256::digest(&self.spki));
        format!("sha256:{}", &hex[..16])
    }

    /// Whether `signature` is this key's over `payload`.
    #[must_use]
    pub fn verify(&self, payload: &[u8], signature: &[u8]) -> bool {
        let alg: &dyn ring::signature::VerificationAlgorithm = match self.algorithm {
            KeyAlgorithm::EcdsaP256 => &ECDSA_P256_SHA256_ASN1,
            KeyAlgorithm::Ed25519 => &ED25519,
        };
        UnparsedPublicKey::new(alg, &self.raw)
            .verify(payload, signature)
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_algorithms_round_trip_through_pem_and_verify() {
        for alg in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::Ed25519] {
            let key = SigningKey::generate(alg).unwrap();
            let again = SigningKey::from_pem(&key.to_pem()).unwrap();
            assert_eq!(again.algorithm(), alg);
            let public = PublicKey::from_pem(&key.public_key_pem()).unwrap();
            assert_eq!(public, key.public_key());
            let sig = again.sign(b"payload").unwrap();
            assert!(public.verify(b"payload", &sig), "{alg:?}");
            assert!(
                !public.verify(b"payload!", &sig),
                "{alg:?}: another payload"
            );
            let other = SigningKey::generate(alg).unwrap().public_key();
            assert!(!other.verify(b"payload", &sig), "{alg:?}: another key");
        }
    }

    #[test]
    fn encrypted_and_foreign_keys_are_refused_saying_why() {
        let cosign = "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\nabc\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n";
        assert!(matches!(
            SigningKey::from_pem(cosign),
            Err(KeyError::Encrypted)
        ));
        let p384 = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
        assert!(matches!(
            SigningKey::from_pem(&p384.serialize_pem()),
            Err(KeyError::Unsupported(_))
        ));
        assert!(matches!(
            PublicKey::from_pem(&p384.public_key_pem()),
            Err(KeyError::Unsupported(_))
        ));
        assert!(matches!(
            PublicKey::from_pem("not a key"),
            Err(KeyError::Parse { .. })
        ));
    }
}
