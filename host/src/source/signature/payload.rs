//! cosign's signed payload: the "simple signing" JSON document that names
//! the manifest digest it vouches for (`critical.image.docker-manifest-digest`)
//! and carries the signer's annotations (`optional`).
//!
//! ```json
//! {"critical":{"identity":{"docker-reference":"registry/repo"},
//!              "image":{"docker-manifest-digest":"sha256:…"},
//!              "type":"cosign container image signature"},
//!  "optional":{"team":"platform"}}
//! ```
//!
//! Written with the fields in the order cosign's Go structs marshal them.
//! On reading, the digest and the type are checked and the annotations
//! compared; `docker-reference` is not (cosign does not either: a module
//! copied to another repository keeps its signature).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// `critical.type` of every cosign image signature.
pub const SIGNATURE_TYPE: &str = "cosign container image signature";

#[derive(Debug, Serialize, Deserialize)]
struct SimpleSigning {
    critical: Critical,
    optional: Option<BTreeMap<String, serde_json::Value>>,
}

#[derive(Debug, Serialize, Deserialize)]
struct Critical {
    identity: Identity,
    image: Image,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Identity {
    #[serde(rename = "docker-reference")]
    docker_reference: String,
}

#[derive(Debug, Serialize, Deserialize)]
struct Image {
    #[serde(rename = "docker-manifest-digest")]
    docker_manifest_digest: String,
}

/// What a payload claims.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claims {
    /// The repository it was signed in (`registry/repository`).
    pub repository: String,
    /// The manifest digest it vouches for.
    pub digest: String,
    /// The signer's annotations (`optional`).
    pub annotations: BTreeMap<String, serde_json::Value>,
}

/// The payload for `digest` in `repository` with `annotations`.
#[must_use]
pub fn payload(repository: &str, digest: &str, annotations: &BTreeMap<String, String>) -> Vec<u8> {
    let doc = SimpleSigning {
        critical: Critical {
            identity: Identity {
                docker_reference: repository.to_owned(),
            },
            image: Image {
                docker_manifest_digest: digest.to_owned(),
            },
            kind: SIGNATURE_TYPE.to_owned(),
        },
        optional: (!annotations.is_empty()).then(|| {
            annotations
                .iter()
                .map(|(k, v)| (k.clone(), serde_json::Value::String(v.clone())))
                .collect()
        }),
    };
    // A struct of strings always serializes.
    serde_json::to_vec(&doc).unwrap_or_default()
}

/// Reads a payload's claims.
///
/// # Errors
/// Not JSON of the simple-signing shape, or another signature type.
pub fn claims(bytes: &[u8]) -> Result<Claims, String> {
    let doc: SimpleSigning =
        serde_json::from_slice(bytes).map_err(|e| format!("not a cosign payload: {e}"))?;
    if doc.critical.kind != SIGNATURE_TYPE {
        return Err(format!(
            "payload type {:?}, expected {SIGNATURE_TYPE:?}",
            doc.critical.kind
        ));
    }
    Ok(Claims {
        repository: doc.critical.identity.docker_reference,
        digest: doc.critical.image.docker_manifest_digest,
        annotations: doc.optional.unwrap_or_default(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_cosign_writes_it_and_read_back() {
        let annotations = BTreeMap::from([("team".to_owned(), "platform".to_owned())]);
        let bytes = payload("localhost:5000/plugins/x", "sha256:ab", &annotations);
        assert_eq!(
            String::from_utf8(bytes.clone()).unwrap(),
            r#"{"critical":{"identity":{"docker-reference":"localhost:5000/plugins/x"},"image":{"docker-manifest-digest":"sha256:ab"},"type":"cosign container image signature"},"optional":{"team":"platform"}}"#
        );
        let c = claims(&bytes).unwrap();
        assert_eq!(c.digest, "sha256:ab");
        assert_eq!(c.annotations["team"], "platform");
        let none = payload("r/x", "sha256:ab", &BTreeMap::new());
        assert!(
            String::from_utf8(none)
                .unwrap()
                .ends_with(r#""optional":null}"#)
        );
    }

    #[test]
    fn other_documents_are_not_claims() {
        assert!(claims(b"{}").is_err());
        let other = br#"{"critical":{"identity":{"docker-reference":"r"},"image":{"docker-manifest-digest":"sha256:ab"},"type":"atomic container signature"},"optional":null}"#;
        assert!(claims(other).unwrap_err().contains("payload type"));
    }
}
