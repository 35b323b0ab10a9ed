//! What must be true of a module's signatures before it is compiled: a
//! [`Policy`] of trusted keys, how many of them must have signed
//! (`minimumMatches`), and the annotations the signed payload must carry;
//! [`Policy::check`] decides over the signatures read from the registry,
//! without I/O.
//!
//! Only the configured keys are trusted. Key material a signature brings
//! along (cosign's `dev.sigstore.cosign/certificate`, `…/chain`, `…/bundle`
//! annotations) is never used to verify it: trusting it is the bypass of
//! cosign's GHSA-fx35-mq7g-6g98.
//!
//! Keyless verification (a Fulcio certificate chaining to a trusted root
//! loaded from a file, its identity matched by issuer and subject, a Rekor
//! inclusion proof) is not built. It fits as another [`Trust`] variant
//! (`Keyless { root, identity }`) counted towards `minimum_matches` like a
//! key; the signatures already carry their certificate to it
//! ([`SignatureEntry::key_material`]).

use std::collections::BTreeMap;

use super::key::PublicKey;
use super::payload::claims;

/// One signature read from the registry: the payload, the signature over
/// it, and whether it came with key material of its own (ignored).
#[derive(Debug, Clone)]
pub struct SignatureEntry {
    /// The simple-signing payload (its digest already checked).
    pub payload: Vec<u8>,
    /// The raw signature (base64-decoded), or `None` when undecodable.
    pub signature: Option<Vec<u8>>,
    /// Certificate, chain or bundle annotations on the signature layer.
    pub key_material: bool,
}

/// Something a signature can be verified against.
#[derive(Debug, Clone)]
pub enum Trust {
    /// A public key, named for messages (`secret/keys`, `inline[0]`).
    Key {
        /// Where it came from.
        name: String,
        /// The key.
        key: PublicKey,
    },
}

impl Trust {
    fn name(&self) -> &str {
        match self {
            Self::Key { name, .. } => name,
        }
    }

    fn verifies(&self, entry: &SignatureEntry) -> bool {
        match self {
            Self::Key { key, .. } => entry
                .signature
                .as_deref()
                .is_some_and(|sig| key.verify(&entry.payload, sig)),
        }
    }
}

/// What a module's signatures must satisfy.
#[derive(Debug, Clone)]
pub struct Policy {
    /// Who is trusted.
    pub trust: Vec<Trust>,
    /// How many distinct [`Trust`]s must have signed (at least 1).
    pub minimum_matches: usize,
    /// Annotations the signed payload must carry, with these values.
    pub annotations: BTreeMap<String, String>,
}

/// A module whose signatures satisfy the policy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verified {
    /// The manifest digest verified.
    pub digest: String,
    /// The trusted keys that signed it.
    pub signers: Vec<String>,
}

/// Why a module's signatures do not satisfy a policy; [`Self::reason`] is
/// the `Verified` condition's reason.
#[derive(Debug, thiserror::Error)]
pub enum VerifyError {
    /// No signature for this digest.
    #[error("no signature for {digest}")]
    SignatureMissing {
        /// The manifest digest.
        digest: String,
    },
    /// A trusted key signed, but not this: another digest, missing
    /// annotations, a malformed payload.
    #[error("signature for {digest} does not hold: {detail}")]
    SignatureInvalid {
        /// The manifest digest.
        digest: String,
        /// What does not hold.
        detail: String,
    },
    /// Not signed (or not often enough) by the configured keys.
    #[error("{digest} is not signed by the configured keys: {detail}")]
    UntrustedKey {
        /// The manifest digest.
        digest: String,
        /// What was found.
        detail: String,
    },
    /// A configured key could not be read (a deleted Secret, bad PEM).
    #[error("verification key unavailable: {detail}")]
    KeyUnavailable {
        /// Which key and why.
        detail: String,
    },
    /// The signatures could not be read from the registry.
    #[error("failed to read the signatures of {digest}: {source}")]
    Registry {
        /// The manifest digest.
        digest: String,
        /// The registry's failure.
        #[source]
        source: crate::source::oci::FetchError,
    },
}

impl VerifyError {
    /// The `Verified` condition's reason.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::SignatureMissing { .. } => "SignatureMissing",
            Self::SignatureInvalid { .. } => "SignatureInvalid",
            Self::UntrustedKey { .. } => "UntrustedKey",
            Self::KeyUnavailable { .. } => "KeyUnavailable",
            Self::Registry { source, .. } => source.reason(),
        }
    }

    /// The `outcome` label of `rekon_plugin_verification_total`.
    #[must_use]
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::SignatureMissing { .. } => "signature_missing",
            Self::SignatureInvalid { .. } => "signature_invalid",
            Self::UntrustedKey { .. } => "untrusted_key",
            Self::KeyUnavailable { .. } => "key_unavailable",
            Self::Registry { .. } => "registry_error",
        }
    }

    /// Worth retrying later: the registry did not answer.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Registry { source, .. } if source.is_transient())
    }
}

impl Policy {
    /// Trust `keys`, one signature needed, no annotations required.
    #[must_use]
    pub fn keys(keys: impl IntoIterator<Item = (String, PublicKey)>) -> Self {
        Self {
            trust: keys
                .into_iter()
                .map(|(name, key)| Trust::Key { name, key })
                .collect(),
            minimum_matches: 1,
            annotations: BTreeMap::new(),
        }
    }

    /// The fingerprints of the trusted keys, sorted.
    #[must_use]
    pub fn key_fingerprints(&self) -> Vec<String> {
        let mut keys: Vec<String> = self
            .trust
            .iter()
            .map(|t| match t {
                Trust::Key { key, .. } => key.fingerprint(),
            })
            .collect();
        keys.sort();
        keys.dedup();
        keys
    }

    /// A digest of what the policy demands (the keys' fingerprints, the
    /// minimum, the annotations): a module verified under one policy is
    /// not taken as verified under another.
    #[must_use]
    pub fn fingerprint(&self) -> String {
        use sha2::{Digest as _, Sha256};
        let keys = self.key_fingerprints();
        let text = format!(
            "keys={};min={};annotations={:?}",
            keys.join(","),
            self.minimum_matches.max(1),
            self.annotations
        );
        format!("sha256:{}", hex::encode(Sha256::digest(text.as_bytes())))
    }

    /// Whether `entries` (the signatures stored for `digest`) satisfy the
    /// policy; see the [module docs](self).
    ///
    /// # Errors
    /// The first that applies: [`VerifyError::SignatureMissing`] (no
    /// entries), [`VerifyError::SignatureInvalid`] (a trusted signature
    /// whose payload does not hold for `digest`),
    /// [`VerifyError::UntrustedKey`] (too few trusted signers).
    pub fn check(&self, digest: &str, entries: &[SignatureEntry]) -> Result<Verified, VerifyError> {
        if entries.is_empty() {
            return Err(VerifyError::SignatureMissing {
                digest: digest.to_owned(),
            });
        }
        let needed = self.minimum_matches.max(1);
        let mut signers: Vec<String> = Vec::new();
        let mut invalid: Vec<String> = Vec::new();
        for trust in &self.trust {
            for entry in entries.iter().filter(|e| trust.verifies(e)) {
                match self.holds(digest, &entry.payload) {
                    Ok(()) => {
                        if !signers.iter().any(|s| s == trust.name()) {
                            signers.push(trust.name().to_owned());
                        }
                    }
                    Err(why) => invalid.push(format!("signed by {}: {why}", trust.name())),
                }
            }
        }
        if signers.len() >= needed {
            return Ok(Verified {
                digest: digest.to_owned(),
                signers,
            });
        }
        if signers.is_empty() && !invalid.is_empty() {
            return Err(VerifyError::SignatureInvalid {
                digest: digest.to_owned(),
                detail: invalid.join("; "),
            });
        }
        let carried = entries.iter().filter(|e| e.key_material).count();
        let mut detail = format!(
            "{} of {} signatures verify under the {} configured keys ({} required)",
            signers.len(),
            entries.len(),
            self.trust.len(),
            needed
        );
        if !signers.is_empty() {
            detail.push_str(&format!(", signed by {}", signers.join(", ")));
        }
        if carried > 0 {
            detail.push_str(&format!(
                "; key material carried by {carried} signature(s) is never trusted"
            ));
        }
        Err(VerifyError::UntrustedKey {
            digest: digest.to_owned(),
            detail,
        })
    }

    /// Whether a verified payload vouches for `digest` with the annotations.
    fn holds(&self, digest: &str, payload: &[u8]) -> Result<(), String> {
        let claims = claims(payload)?;
        if claims.digest != digest {
            return Err(format!("the payload names {}", claims.digest));
        }
        for (key, want) in &self.annotations {
            match claims.annotations.get(key) {
                Some(serde_json::Value::String(v)) if v == want => {}
                Some(other) => return Err(format!("annotation {key} is {other}, not {want:?}")),
                None => return Err(format!("annotation {key} missing")),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::signature::key::{KeyAlgorithm, SigningKey};
    use crate::source::signature::payload::payload;

    const DIGEST: &str = "sha256:1111";

    fn entry(key: &SigningKey, digest: &str, annotations: &[(&str, &str)]) -> SignatureEntry {
        let annotations = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        let payload = payload("localhost:5000/p", digest, &annotations);
        SignatureEntry {
            signature: Some(key.sign(&payload).unwrap()),
            payload,
            key_material: false,
        }
    }

    fn keys() -> (SigningKey, SigningKey) {
        (
            SigningKey::generate(KeyAlgorithm::EcdsaP256).unwrap(),
            SigningKey::generate(KeyAlgorithm::Ed25519).unwrap(),
        )
    }

    #[test]
    fn a_trusted_signature_for_the_digest_verifies() {
        let (a, b) = keys();
        let policy = Policy::keys([("a".into(), a.public_key()), ("b".into(), b.public_key())]);
        let verified = policy.check(DIGEST, &[entry(&b, DIGEST, &[])]).unwrap();
        assert_eq!(verified.signers, ["b"]);
    }

    #[test]
    fn each_failure_has_its_reason() {
        let (a, b) = keys();
        let policy = Policy::keys([("a".into(), a.public_key())]);
        let reason =
            |entries: &[SignatureEntry]| policy.check(DIGEST, entries).unwrap_err().reason();
        assert_eq!(reason(&[]), "SignatureMissing");
        assert_eq!(
            reason(&[entry(&b, DIGEST, &[])]),
            "UntrustedKey",
            "wrong key"
        );
        assert_eq!(
            reason(&[entry(&a, "sha256:2222", &[])]),
            "SignatureInvalid",
            "another digest"
        );
        let mut edited = entry(&a, DIGEST, &[]);
        edited.payload = payload(
            "localhost:5000/p",
            DIGEST,
            &BTreeMap::from([("x".to_owned(), "y".to_owned())]),
        );
        assert_eq!(
            reason(&[edited]),
            "UntrustedKey",
            "an edited payload verifies under no key"
        );
        let mut garbled = entry(&a, DIGEST, &[]);
        garbled.signature = None;
        assert_eq!(reason(&[garbled]), "UntrustedKey");
        // A signature bringing its own key: never trusted.
        let mut carried = entry(&b, DIGEST, &[]);
        carried.key_material = true;
        let err = policy.check(DIGEST, &[carried]).unwrap_err();
        assert_eq!(err.reason(), "UntrustedKey");
        assert!(err.to_string().contains("never trusted"), "{err}");
    }

    #[test]
    fn minimum_matches_counts_distinct_keys_and_annotations_must_match() {
        let (a, b) = keys();
        let mut policy = Policy::keys([("a".into(), a.public_key()), ("b".into(), b.public_key())]);
        policy.minimum_matches = 2;
        let twice_a = [entry(&a, DIGEST, &[]), entry(&a, DIGEST, &[])];
        assert_eq!(
            policy.check(DIGEST, &twice_a).unwrap_err().reason(),
            "UntrustedKey"
        );
        let both = [entry(&a, DIGEST, &[]), entry(&b, DIGEST, &[])];
        assert_eq!(policy.check(DIGEST, &both).unwrap().signers.len(), 2);

        let mut policy = Policy::keys([("a".into(), a.public_key())]);
        policy.annotations.insert("team".into(), "platform".into());
        let err = policy.check(DIGEST, &[entry(&a, DIGEST, &[])]).unwrap_err();
        assert_eq!(err.reason(), "SignatureInvalid");
        assert!(err.to_string().contains("annotation team missing"), "{err}");
        let ok = policy.check(DIGEST, &[entry(&a, DIGEST, &[("team", "platform")])]);
        assert!(ok.is_ok());
        let other = policy.check(DIGEST, &[entry(&a, DIGEST, &[("team", "web")])]);
        assert_eq!(other.unwrap_err().reason(), "SignatureInvalid");
    }
}
