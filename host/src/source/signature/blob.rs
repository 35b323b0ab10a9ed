//! Signatures of plugin files (`rekon run --plugins DIR`) in cosign's blob
//! format: `NAME.wasm.sig` beside `NAME.wasm` holds the base64 signature
//! over the file's bytes, exactly what `cosign sign-blob --key cosign.key
//! --output-signature NAME.wasm.sig NAME.wasm` writes and `cosign
//! verify-blob --key cosign.pub --signature NAME.wasm.sig NAME.wasm`
//! checks (ECDSA P-256 over the SHA-256 of the bytes, ASN.1 DER; Ed25519
//! over the bytes). Several signatures (one base64 line each) count like
//! several signers of a registry module.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use sha2::{Digest as _, Sha256};

use super::policy::{Policy, Trust, Verified, VerifyError};

/// Whether `signature_file` (the content of `NAME.wasm.sig`, `None` when
/// there is none) signs `bytes` under `policy`'s keys and minimum (a file
/// has no payload, so `policy.annotations` cannot hold and must be empty).
///
/// # Errors
/// [`VerifyError::SignatureMissing`] (no file or an empty one),
/// [`VerifyError::SignatureInvalid`] (not base64, or annotations asked
/// for), [`VerifyError::UntrustedKey`] (too few configured keys signed).
pub fn verify_blob(
    bytes: &[u8],
    signature_file: Option<&[u8]>,
    policy: &Policy,
) -> Result<Verified, VerifyError> {
    let digest = format!("sha256:{}", hex::encode(Sha256::digest(bytes)));
    let text = signature_file
        .map(String::from_utf8_lossy)
        .unwrap_or_default();
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    if lines.is_empty() {
        return Err(VerifyError::SignatureMissing { digest });
    }
    if !policy.annotations.is_empty() {
        return Err(VerifyError::SignatureInvalid {
            digest,
            detail: "a blob signature carries no annotations".to_owned(),
        });
    }
    let mut signatures = Vec::with_capacity(lines.len());
    for (i, line) in lines.iter().enumerate() {
        let sig = STANDARD
            .decode(line)
            .map_err(|e| VerifyError::SignatureInvalid {
                digest: digest.clone(),
                detail: format!("signature {} is not base64: {e}", i + 1),
            })?;
        signatures.push(sig);
    }
    let mut signers: Vec<String> = Vec::new();
    for trust in &policy.trust {
        let Trust::Key { name, key } = trust;
        if signatures.iter().any(|s| key.verify(bytes, s)) && !signers.contains(name) {
            signers.push(name.clone());
        }
    }
    let needed = policy.minimum_matches.max(1);
    if signers.len() >= needed {
        return Ok(Verified { digest, signers });
    }
    Err(VerifyError::UntrustedKey {
        digest,
        detail: format!(
            "{} of {} configured keys signed the file ({needed} required)",
            signers.len(),
            policy.trust.len()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::signature::{KeyAlgorithm, SigningKey};

    fn sig_file(key: &SigningKey, bytes: &[u8]) -> Vec<u8> {
        STANDARD.encode(key.sign(bytes).unwrap()).into_bytes()
    }

    #[test]
    fn a_file_signed_by_a_configured_key_verifies_and_anything_else_has_its_reason() {
        let bytes = b"\0asm module";
        for alg in [KeyAlgorithm::EcdsaP256, KeyAlgorithm::Ed25519] {
            let key = SigningKey::generate(alg).unwrap();
            let other = SigningKey::generate(alg).unwrap();
            let policy = Policy::keys([("signer".into(), key.public_key())]);
            let good = sig_file(&key, bytes);
            let v = verify_blob(bytes, Some(&good), &policy).unwrap();
            assert_eq!(v.signers, ["signer"]);
            let reason = |sig: Option<&[u8]>, bytes: &[u8]| {
                verify_blob(bytes, sig, &policy).unwrap_err().reason()
            };
            assert_eq!(reason(None, bytes), "SignatureMissing");
            assert_eq!(reason(Some(b"\n"), bytes), "SignatureMissing");
            assert_eq!(reason(Some(b"!!"), bytes), "SignatureInvalid");
            assert_eq!(reason(Some(&good), b"\0asm edited"), "UntrustedKey");
            assert_eq!(
                reason(Some(&sig_file(&other, bytes)), bytes),
                "UntrustedKey"
            );
        }
    }
}
