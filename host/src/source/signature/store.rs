//! Signatures in the registry, in cosign's tag format: the signatures of
//! manifest `sha256:<hex>` are an OCI image manifest tagged
//! `sha256-<hex>.sig` in the module's repository, one layer per signature
//! (media type `application/vnd.dev.cosign.simplesigning.v1+json`, the
//! payload as the blob, the base64 signature in the layer annotation
//! `dev.cosignproject.cosign/signature`). `cosign verify --key` reads what
//! [`sign`] writes, and [`read`] reads what `cosign sign --key` writes.
//!
//! Why the tag format and not (also) cosign 3's default, a Sigstore bundle
//! v0.3 attached through the OCI referrers API: every registry holds tags,
//! including the one these tests run (Debian's docker-registry 2.8, which
//! has no referrers API), cosign 3 still reads tag signatures, and a
//! key-based bundle adds nothing a key-based tag signature lacks offline
//! (its value is the transparency-log proof keyless needs). Reading bundles
//! belongs with keyless verification (see `policy.rs`).

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use oci_client::Reference;
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use sha2::{Digest, Sha256};

use super::key::{KeyError, SigningKey};
use super::payload::payload;
use super::policy::{Policy, SignatureEntry, Verified, VerifyError};
use crate::source::oci::{FetchError, Fetcher, RegistryAuth, classify};

/// Media type of a signature layer (the payload).
pub const SIGNATURE_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer annotation holding the base64 signature.
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Layer annotations carrying key material of their own (never trusted).
const KEY_MATERIAL_ANNOTATIONS: [&str; 3] = [
    "dev.sigstore.cosign/certificate",
    "dev.sigstore.cosign/chain",
    "dev.sigstore.cosign/bundle",
];
/// Media type of the signature manifest's config.
const CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The largest payload read (cosign's are a few hundred bytes).
const MAX_PAYLOAD_BYTES: i64 = 64 * 1024;

/// Why signing failed.
#[derive(Debug, thiserror::Error)]
pub enum SignError {
    /// Not a reference.
    #[error("invalid reference `{reference}`: {detail}")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// The registry refused or did not answer.
    #[error("failed to {stage} for `{reference}`: {source}")]
    Registry {
        /// The reference.
        reference: String,
        /// What was being done.
        stage: &'static str,
        /// The failure, classified as for fetches.
        #[source]
        source: FetchError,
    },
    /// The reference names another digest than its manifest has.
    #[error("`{reference}` names {expected} but its manifest is {found}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// Its digest.
        expected: String,
        /// The manifest's.
        found: String,
    },
    /// The key could not sign.
    #[error(transparent)]
    Key(#[from] KeyError),
}

/// What [`sign`] wrote.
#[derive(Debug, Clone)]
pub struct Signed {
    /// The manifest digest signed.
    pub digest: String,
    /// Where the signature is: `registry/repository:sha256-<hex>.sig`.
    pub signature_reference: String,
    /// Whether an identical signature was already there (nothing pushed).
    pub already_signed: bool,
}

/// `sha256-<hex>.sig` for `sha256:<hex>`.
#[must_use]
pub fn signature_tag(digest: &str) -> String {
    format!("{}.sig", digest.replacen(':', "-", 1))
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

fn parse(reference: &str) -> Result<Reference, String> {
    reference.parse::<Reference>().map_err(|e| e.to_string())
}

fn signature_ref(module: &Reference, digest: &str) -> Reference {
    Reference::with_tag(
        module.registry().to_owned(),
        module.repository().to_owned(),
        signature_tag(digest),
    )
}

/// Resolves `reference` to its manifest digest (the manifest is read and
/// hashed, as a fetch does).
///
/// # Errors
/// When the registry does not serve the manifest.
pub async fn resolve(
    fetcher: &Fetcher,
    reference: &str,
    auth: &RegistryAuth,
) -> Result<String, FetchError> {
    let parsed = parse(reference).map_err(|detail| FetchError::InvalidReference {
        reference: reference.to_owned(),
        detail,
    })?;
    let client = fetcher
        .client(&parsed)
        .map_err(|e| classify(reference, e))?;
    let (bytes, _) = tokio::time::timeout(
        fetcher.config().timeout,
        client.pull_manifest_raw(
            &parsed,
            &auth.to_oci(),
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        ),
    )
    .await
    .map_err(|_| FetchError::Unreachable {
        reference: reference.to_owned(),
        detail: format!("timed out after {:?}", fetcher.config().timeout),
    })?
    .map_err(|e| classify(reference, e))?;
    let digest = sha256(&bytes);
    if let Some(named) = parsed.digest()
        && named != digest
    {
        return Err(FetchError::DigestMismatch {
            reference: reference.to_owned(),
            what: "manifest",
            expected: named.to_owned(),
            found: digest,
        });
    }
    Ok(digest)
}

/// The signature manifest stored for `digest`, if any.
async fn signature_manifest(
    fetcher: &Fetcher,
    client: &oci_client::Client,
    sig: &Reference,
    auth: &RegistryAuth,
) -> Result<Option<OciImageManifest>, FetchError> {
    let name = sig.whole();
    let pulled = tokio::time::timeout(
        fetcher.config().timeout,
        client.pull_manifest_raw(
            sig,
            &auth.to_oci(),
            &[OCI_IMAGE_MEDIA_TYPE, IMAGE_MANIFEST_MEDIA_TYPE],
        ),
    )
    .await
    .map_err(|_| FetchError::Unreachable {
        reference: name.clone(),
        detail: format!("timed out after {:?}", fetcher.config().timeout),
    })?;
    match pulled.map_err(|e| classify(&name, e)) {
        Ok((bytes, _)) => {
            serde_json::from_slice(&bytes)
                .map(Some)
                .map_err(|e| FetchError::Registry {
                    reference: name,
                    detail: format!("not an OCI image manifest: {e}"),
                })
        }
        Err(FetchError::NotFound { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// The signatures stored for `digest` in the repository of `reference`
/// (none when there is no signature tag). Each payload is checked against
/// its layer digest; nothing is verified yet.
///
/// # Errors
/// When the registry cannot be read.
pub async fn read(
    fetcher: &Fetcher,
    reference: &str,
    digest: &str,
    auth: &RegistryAuth,
) -> Result<Vec<SignatureEntry>, VerifyError> {
    let failed = |source| VerifyError::Registry {
        digest: digest.to_owned(),
        source,
    };
    let parsed = parse(reference).map_err(|detail| {
        failed(FetchError::InvalidReference {
            reference: reference.to_owned(),
            detail,
        })
    })?;
    let sig = signature_ref(&parsed, digest);
    let client = fetcher
        .shared_client(&parsed, auth)
        .map_err(|e| failed(classify(reference, e)))?;
    let Some(manifest) = signature_manifest(fetcher, &client, &sig, auth)
        .await
        .map_err(failed)?
    else {
        return Ok(Vec::new());
    };
    let mut entries = Vec::new();
    for layer in manifest
        .layers
        .iter()
        .filter(|l| l.media_type == SIGNATURE_MEDIA_TYPE)
    {
        if layer.size > MAX_PAYLOAD_BYTES {
            continue;
        }
        let mut payload = Vec::new();
        tokio::time::timeout(
            fetcher.config().timeout,
            client.pull_blob(&sig, layer, &mut payload),
        )
        .await
        .map_err(|_| {
            failed(FetchError::Unreachable {
                reference: sig.whole(),
                detail: format!("timed out after {:?}", fetcher.config().timeout),
            })
        })?
        .map_err(|e| failed(classify(&sig.whole(), e)))?;
        if sha256(&payload) != layer.digest {
            continue;
        }
        let annotations = layer.annotations.clone().unwrap_or_default();
        entries.push(SignatureEntry {
            signature: annotations
                .get(SIGNATURE_ANNOTATION)
                .and_then(|s| STANDARD.decode(s.trim()).ok()),
            key_material: KEY_MATERIAL_ANNOTATIONS
                .iter()
                .any(|a| annotations.contains_key(*a)),
            payload,
        });
    }
    Ok(entries)
}

/// Verifies the module `reference` names, at manifest `digest` (the one
/// that will be served; resolved from `reference` when `None`), under
/// `policy`.
///
/// # Errors
/// See [`VerifyError`].
pub async fn verify(
    fetcher: &Fetcher,
    reference: &str,
    digest: Option<&str>,
    policy: &Policy,
    auth: &RegistryAuth,
) -> Result<Verified, VerifyError> {
    let digest = match digest {
        Some(d) => d.to_owned(),
        None => {
            resolve(fetcher, reference, auth)
                .await
                .map_err(|source| VerifyError::Registry {
                    digest: reference.to_owned(),
                    source,
                })?
        }
    };
    let entries = read(fetcher, reference, &digest, auth).await?;
    policy.check(&digest, &entries)
}

/// Signs the module `reference` names with `key`: the payload for its
/// manifest digest (with `annotations`) becomes one more layer of its
/// signature manifest, as `cosign sign` appends.
///
/// # Errors
/// See [`SignError`].
pub async fn sign(
    fetcher: &Fetcher,
    reference: &str,
    key: &SigningKey,
    annotations: &BTreeMap<String, String>,
    auth: &RegistryAuth,
) -> Result<Signed, SignError> {
    let parsed = parse(reference).map_err(|detail| SignError::InvalidReference {
        reference: reference.to_owned(),
        detail,
    })?;
    let registry = |stage| {
        move |source| SignError::Registry {
            reference: reference.to_owned(),
            stage,
            source,
        }
    };
    let digest = match resolve(fetcher, reference, auth).await {
        Err(FetchError::DigestMismatch {
            expected, found, ..
        }) => {
            return Err(SignError::DigestMismatch {
                reference: reference.to_owned(),
                expected,
                found,
            });
        }
        other => other.map_err(registry("resolve the manifest"))?,
    };
    let payload = payload(
        &format!("{}/{}", parsed.registry(), parsed.repository()),
        &digest,
        annotations,
    );
    let signature = STANDARD.encode(key.sign(&payload)?);
    let payload_digest = sha256(&payload);

    let sig = signature_ref(&parsed, &digest);
    let client = fetcher
        .client(&parsed)
        .map_err(|e| registry("set up the client")(classify(reference, e)))?;
    client
        .store_auth_if_needed(parsed.resolve_registry(), &auth.to_oci())
        .await;
    let existing = signature_manifest(fetcher, &client, &sig, auth)
        .await
        .map_err(registry("read the signatures"))?;
    let mut layers = existing.map(|m| m.layers).unwrap_or_default();
    let signed = |l: &OciDescriptor| {
        l.digest == payload_digest
            && l.annotations
                .as_ref()
                .and_then(|a| a.get(SIGNATURE_ANNOTATION))
                .is_some_and(|s| *s == signature)
    };
    if layers.iter().any(signed) {
        return Ok(Signed {
            digest,
            signature_reference: sig.whole(),
            already_signed: true,
        });
    }
    let limit = fetcher.config().timeout;
    let timed_out = |stage: &'static str| SignError::Registry {
        reference: reference.to_owned(),
        stage,
        source: FetchError::Unreachable {
            reference: reference.to_owned(),
            detail: format!("timed out after {:?}", fetcher.config().timeout),
        },
    };
    tokio::time::timeout(
        limit,
        client.push_blob(&sig, payload.clone(), &payload_digest),
    )
    .await
    .map_err(|_| timed_out("push the payload"))?
    .map_err(|e| registry("push the payload")(classify(reference, e)))?;
    layers.push(OciDescriptor {
        media_type: SIGNATURE_MEDIA_TYPE.to_owned(),
        digest: payload_digest,
        size: i64::try_from(payload.len()).unwrap_or(i64::MAX),
        urls: None,
        artifact_type: None,
        annotations: Some(BTreeMap::from([(
            SIGNATURE_ANNOTATION.to_owned(),
            signature,
        )])),
    });
    // The config cosign writes: an image config whose layers are the payloads.
    let config = serde_json::json!({
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| l.digest.clone()).collect::<Vec<_>>()},
        "config": {},
    });
    let config = serde_json::to_vec(&config).unwrap_or_default();
    let config_digest = sha256(&config);
    tokio::time::timeout(
        limit,
        client.push_blob(&sig, config.clone(), &config_digest),
    )
    .await
    .map_err(|_| timed_out("push the signature config"))?
    .map_err(|e| registry("push the signature config")(classify(reference, e)))?;
    let manifest = OciImageManifest {
        schema_version: 2,
        media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_owned()),
        config: OciDescriptor {
            media_type: CONFIG_MEDIA_TYPE.to_owned(),
            digest: config_digest,
            size: i64::try_from(config.len()).unwrap_or(i64::MAX),
            urls: None,
            artifact_type: None,
            annotations: None,
        },
        layers,
        subject: None,
        artifact_type: None,
        annotations: None,
    };
    let manifest = serde_json::to_vec(&manifest).unwrap_or_default();
    let content_type = http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE);
    tokio::time::timeout(
        limit,
        client.push_manifest_raw(&sig, manifest, content_type),
    )
    .await
    .map_err(|_| timed_out("push the signature manifest"))?
    .map_err(|e| registry("push the signature manifest")(classify(reference, e)))?;
    Ok(Signed {
        digest,
        signature_reference: sig.whole(),
        already_signed: false,
    })
}
