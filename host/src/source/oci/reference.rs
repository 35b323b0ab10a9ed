//! References, digests and the wasm artifact layout: what a reference
//! pins, which registries are spoken to over plain HTTP, and the one wasm
//! layer of a manifest.

use std::net::IpAddr;

use oci_client::Reference;
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest,
};
use sha2::{Digest, Sha256};

use super::error::FetchError;

/// Media type of the wasm artifact's config (CNCF wasm OCI artifact layout).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the wasm artifact's one layer: the component itself.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";
/// Media type of the optional second layer: the component precompiled for
/// one engine (`rekon plugin push --precompile`; see
/// [`crate::plugin::Precompiled`]). Hosts of another engine, and clients
/// that know only the wasm layer, ignore it.
pub const PRECOMPILED_LAYER_MEDIA_TYPE: &str = "application/vnd.rekon.plugin.precompiled.v1";
/// Annotation of the precompiled layer: the engine key it was compiled for
/// ([`crate::plugin::PluginRuntime::engine_key`]).
pub const PRECOMPILED_ENGINE_ANNOTATION: &str = "dev.rekon.precompiled.engine";
/// Annotation of the precompiled layer: the digest of the wasm layer it
/// was compiled from.
pub const PRECOMPILED_SOURCE_ANNOTATION: &str = "dev.rekon.precompiled.source";

pub(super) fn parse_reference(reference: &str) -> Result<Reference, String> {
    reference.parse::<Reference>().map_err(|e| e.to_string())
}

/// `registry/repository@digest`.
pub(super) fn pinned_reference(reference: &Reference, digest: &str) -> String {
    format!(
        "{}/{}@{digest}",
        reference.registry(),
        reference.repository()
    )
}

/// The manifest digest a fetch must find: the reference's, the caller's,
/// or both when they agree.
pub(super) fn pinned_digest(
    reference: &str,
    in_reference: Option<&str>,
    expected: Option<&str>,
) -> Result<Option<String>, FetchError> {
    for digest in in_reference.into_iter().chain(expected) {
        if hex_of(digest).is_none() {
            return Err(FetchError::InvalidReference {
                reference: reference.to_string(),
                detail: format!("digest `{digest}` is not `sha256:` and 64 lowercase hex digits"),
            });
        }
    }
    match (in_reference, expected) {
        (Some(pinned), Some(expected)) if pinned != expected => Err(FetchError::DigestMismatch {
            reference: reference.to_string(),
            what: "manifest",
            expected: expected.to_string(),
            found: pinned.to_string(),
        }),
        (pinned, expected) => Ok(pinned.or(expected).map(str::to_string)),
    }
}

/// `sha256:<hex>` → `<hex>`, when it is exactly 64 lowercase hex digits.
pub(super) fn hex_of(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(hex)
}

pub(super) fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// Is `registry` (`host[:port]`, `[v6]:port`) on a loopback address?
pub(super) fn is_loopback(registry: &str) -> bool {
    let host = if let Some(rest) = registry.strip_prefix('[') {
        rest.split(']').next().unwrap_or(rest)
    } else if registry.matches(':').count() > 1 {
        registry // a bare IPv6 address
    } else {
        registry.split(':').next().unwrap_or(registry)
    };
    host.eq_ignore_ascii_case("localhost")
        || host.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback())
}

/// The manifest's one wasm layer, or what the manifest is instead.
pub(super) fn wasm_layer(manifest: &[u8]) -> Result<OciDescriptor, String> {
    #[derive(serde::Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        #[serde(default)]
        media_type: Option<String>,
    }
    let probe: Probe =
        serde_json::from_slice(manifest).map_err(|e| format!("unreadable manifest: {e}"))?;
    if let Some(media_type) = probe
        .media_type
        .as_deref()
        .filter(|m| *m != OCI_IMAGE_MEDIA_TYPE)
        && media_type != IMAGE_MANIFEST_MEDIA_TYPE
    {
        return Err(format!("manifest media type is `{media_type}`"));
    }
    let manifest: OciImageManifest =
        serde_json::from_slice(manifest).map_err(|e| format!("unreadable manifest: {e}"))?;
    if manifest.config.media_type != WASM_CONFIG_MEDIA_TYPE {
        return Err(format!(
            "config media type is `{}`, not `{WASM_CONFIG_MEDIA_TYPE}`",
            manifest.config.media_type
        ));
    }
    let types: Vec<&str> = manifest
        .layers
        .iter()
        .map(|l| l.media_type.as_str())
        .collect();
    // One wasm layer, and at most one precompiled layer beside it.
    let wasm: Vec<&OciDescriptor> = manifest
        .layers
        .iter()
        .filter(|l| l.media_type == WASM_LAYER_MEDIA_TYPE)
        .collect();
    let precompiled = types
        .iter()
        .filter(|t| **t == PRECOMPILED_LAYER_MEDIA_TYPE)
        .count();
    let others = types.len() - wasm.len() - precompiled;
    match wasm.as_slice() {
        [layer] if others == 0 && precompiled <= 1 => {
            if hex_of(&layer.digest).is_none() {
                return Err(format!("layer digest `{}` is not sha256", layer.digest));
            }
            Ok((*layer).clone())
        }
        _ => Err(format!(
            "expected one `{WASM_LAYER_MEDIA_TYPE}` layer (and at most one `{PRECOMPILED_LAYER_MEDIA_TYPE}`), found [{}]",
            types.join(", ")
        )),
    }
}

/// The manifest's precompiled layer, with the engine key and the source
/// digest it names, when there is one (the manifest passed [`wasm_layer`]).
pub(super) fn precompiled_layer(manifest: &[u8]) -> Option<(OciDescriptor, String, String)> {
    let manifest: OciImageManifest = serde_json::from_slice(manifest).ok()?;
    let layer = manifest
        .layers
        .into_iter()
        .find(|l| l.media_type == PRECOMPILED_LAYER_MEDIA_TYPE)?;
    hex_of(&layer.digest)?;
    let annotations = layer.annotations.as_ref()?;
    let engine = annotations.get(PRECOMPILED_ENGINE_ANNOTATION)?.clone();
    let source = annotations.get(PRECOMPILED_SOURCE_ANNOTATION)?.clone();
    Some((layer, engine, source))
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_client::manifest::OCI_IMAGE_INDEX_MEDIA_TYPE;

    #[test]
    fn loopback_registries() {
        for r in [
            "127.0.0.1:5000",
            "127.1.2.3",
            "localhost:5000",
            "LOCALHOST",
            "[::1]:5000",
            "::1",
        ] {
            assert!(is_loopback(r), "{r} is loopback");
        }
        for r in [
            "ghcr.io",
            "10.0.0.1:5000",
            "localhost.example.com",
            "[::2]:80",
        ] {
            assert!(!is_loopback(r), "{r} is not loopback");
        }
    }

    #[test]
    fn pinned_digests() {
        let a = format!("sha256:{}", "a".repeat(64));
        let b = format!("sha256:{}", "b".repeat(64));
        assert_eq!(pinned_digest("r", None, None).unwrap(), None);
        assert_eq!(pinned_digest("r", Some(&a), None).unwrap(), Some(a.clone()));
        assert_eq!(pinned_digest("r", None, Some(&a)).unwrap(), Some(a.clone()));
        assert_eq!(
            pinned_digest("r", Some(&a), Some(&a)).unwrap(),
            Some(a.clone())
        );
        let err = pinned_digest("r", Some(&a), Some(&b)).unwrap_err();
        assert_eq!(err.reason(), "DigestMismatch");
        assert!(err.to_string().contains(&a) && err.to_string().contains(&b));
        let err = pinned_digest("r", None, Some("sha256:ABC")).unwrap_err();
        assert_eq!(err.reason(), "InvalidReference");
    }

    #[test]
    fn media_types_are_checked() {
        let layer = format!("sha256:{}", "c".repeat(64));
        let manifest = |config: &str, layers: &[&str]| {
            serde_json::to_vec(&serde_json::json!({
                "schemaVersion": 2,
                "mediaType": OCI_IMAGE_MEDIA_TYPE,
                "config": {"mediaType": config, "digest": layer, "size": 2},
                "layers": layers.iter().map(|t| serde_json::json!({
                    "mediaType": t, "digest": layer, "size": 10
                })).collect::<Vec<_>>(),
            }))
            .unwrap()
        };
        let ok = wasm_layer(&manifest(WASM_CONFIG_MEDIA_TYPE, &[WASM_LAYER_MEDIA_TYPE])).unwrap();
        assert_eq!(ok.digest, layer);
        let err = wasm_layer(&manifest(
            "application/vnd.oci.image.config.v1+json",
            &[WASM_LAYER_MEDIA_TYPE],
        ))
        .unwrap_err();
        assert!(err.contains("config media type"), "{err}");
        let err = wasm_layer(&manifest(
            WASM_CONFIG_MEDIA_TYPE,
            &[WASM_LAYER_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE],
        ))
        .unwrap_err();
        assert!(err.contains("expected one"), "{err}");
        // A precompiled layer beside the wasm one is fine; two are not, nor
        // is anything else.
        let ok = wasm_layer(&manifest(
            WASM_CONFIG_MEDIA_TYPE,
            &[PRECOMPILED_LAYER_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE],
        ))
        .unwrap();
        assert_eq!(ok.media_type, WASM_LAYER_MEDIA_TYPE);
        for layers in [
            &[
                WASM_LAYER_MEDIA_TYPE,
                PRECOMPILED_LAYER_MEDIA_TYPE,
                PRECOMPILED_LAYER_MEDIA_TYPE,
            ][..],
            &[WASM_LAYER_MEDIA_TYPE, "application/octet-stream"][..],
            &[PRECOMPILED_LAYER_MEDIA_TYPE][..],
        ] {
            let err = wasm_layer(&manifest(WASM_CONFIG_MEDIA_TYPE, layers)).unwrap_err();
            assert!(err.contains("expected one"), "{layers:?}: {err}");
        }
        // Without its annotations a precompiled layer is not one.
        let bare = manifest(
            WASM_CONFIG_MEDIA_TYPE,
            &[WASM_LAYER_MEDIA_TYPE, PRECOMPILED_LAYER_MEDIA_TYPE],
        );
        assert!(precompiled_layer(&bare).is_none());
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": []
        }))
        .unwrap();
        assert!(wasm_layer(&index).unwrap_err().contains("index"));
    }
}
