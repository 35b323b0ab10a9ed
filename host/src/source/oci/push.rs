//! [`Fetcher::push`]: a component published in the CNCF wasm artifact
//! layout.

use std::collections::BTreeMap;

use oci_client::errors::OciDistributionError;
use oci_client::manifest::{OCI_IMAGE_MEDIA_TYPE, OciDescriptor, OciImageManifest};

use super::auth::RegistryAuth;
use super::error::{FetchError, PushError, classify};
use super::fetch::Fetcher;
use super::reference::{
    PRECOMPILED_ENGINE_ANNOTATION, PRECOMPILED_LAYER_MEDIA_TYPE, PRECOMPILED_SOURCE_ANNOTATION,
    WASM_CONFIG_MEDIA_TYPE, WASM_LAYER_MEDIA_TYPE, parse_reference, sha256_digest,
};
use crate::plugin::Precompiled;

impl Fetcher {
    /// Publishes `component` at `reference` in the CNCF wasm artifact
    /// layout (config [`WASM_CONFIG_MEDIA_TYPE`]: architecture `wasm`, os
    /// `wasip2`, the layer digests and the component's top-level imports and
    /// exports; one layer [`WASM_LAYER_MEDIA_TYPE`]), with `annotations` on
    /// the manifest. Returns the manifest digest (`sha256:…`). The config's
    /// `created` is `SOURCE_DATE_EPOCH` when set: the same build and
    /// annotations then always push to the same digest.
    pub async fn push(
        &self,
        component: &[u8],
        reference: &str,
        auth: &RegistryAuth,
        annotations: BTreeMap<String, String>,
    ) -> Result<String, PushError> {
        self.push_with(component, None, reference, auth, annotations)
            .await
    }

    /// [`Self::push`], with `precompiled` as a second layer
    /// ([`PRECOMPILED_LAYER_MEDIA_TYPE`], its engine key and source digest
    /// in the layer's annotations): a signature over the manifest covers
    /// it, and a host of that engine maps it instead of compiling.
    pub async fn push_with(
        &self,
        component: &[u8],
        precompiled: Option<&Precompiled>,
        reference: &str,
        auth: &RegistryAuth,
        annotations: BTreeMap<String, String>,
    ) -> Result<String, PushError> {
        let parsed = parse_reference(reference).map_err(|detail| PushError::InvalidReference {
            reference: reference.to_string(),
            detail,
        })?;
        let world = component_world(component).map_err(|detail| PushError::NotAComponent {
            reference: reference.to_string(),
            detail,
        })?;
        let layer_digest = sha256_digest(component);
        let mut layers = vec![descriptor(WASM_LAYER_MEDIA_TYPE, component)];
        let precompiled = match precompiled {
            Some(precompiled) => {
                let bytes =
                    precompiled
                        .code
                        .bytes()
                        .map_err(|source| PushError::ReadPrecompiled {
                            reference: reference.to_string(),
                            source,
                        })?;
                Some((precompiled, bytes))
            }
            None => None,
        };
        if let Some((precompiled, bytes)) = &precompiled {
            let mut layer = descriptor(PRECOMPILED_LAYER_MEDIA_TYPE, bytes);
            layer.annotations = Some(
                [
                    (PRECOMPILED_ENGINE_ANNOTATION, precompiled.engine.clone()),
                    (PRECOMPILED_SOURCE_ANNOTATION, precompiled.source.clone()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_owned(), v))
                .collect(),
            );
            layers.push(layer);
        }
        let config = WasmConfig {
            created: created_time(),
            architecture: "wasm",
            os: "wasip2",
            layer_digests: layers.iter().map(|l| l.digest.clone()).collect(),
            component: world,
        };
        // Serializing a struct of strings cannot fail.
        let config_bytes = serde_json::to_vec(&config).unwrap_or_default();
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
            config: descriptor(WASM_CONFIG_MEDIA_TYPE, &config_bytes),
            layers: layers.clone(),
            subject: None,
            artifact_type: None,
            annotations: (!annotations.is_empty()).then_some(annotations),
        };
        let manifest_bytes = serde_json::to_vec(&manifest).unwrap_or_default();
        let manifest_digest = sha256_digest(&manifest_bytes);

        let failed = |stage: &'static str| {
            move |e: OciDistributionError| PushError::Registry {
                reference: reference.to_string(),
                stage,
                source: Box::new(classify(reference, e)),
            }
        };
        let timeout = |stage: &'static str| PushError::Registry {
            reference: reference.to_string(),
            stage,
            source: Box::new(FetchError::Unreachable {
                reference: reference.to_string(),
                detail: format!("timed out after {:?}", self.config.timeout),
            }),
        };
        let client = self.client(&parsed).map_err(failed("layer"))?;
        client
            .store_auth_if_needed(parsed.resolve_registry(), &auth.to_oci())
            .await;
        let bounded = |f| tokio::time::timeout(self.config.timeout, f);
        bounded(client.push_blob(&parsed, component.to_vec(), &layer_digest))
            .await
            .map_err(|_| timeout("layer"))?
            .map_err(failed("layer"))?;
        if let (Some((_, bytes)), Some(layer)) = (precompiled, layers.get(1)) {
            bounded(client.push_blob(&parsed, bytes.to_vec(), &layer.digest))
                .await
                .map_err(|_| timeout("precompiled layer"))?
                .map_err(failed("precompiled layer"))?;
        }
        bounded(client.push_blob(&parsed, config_bytes, &manifest.config.digest))
            .await
            .map_err(|_| timeout("config"))?
            .map_err(failed("config"))?;
        let content_type = http::HeaderValue::from_static(OCI_IMAGE_MEDIA_TYPE);
        tokio::time::timeout(
            self.config.timeout,
            client.push_manifest_raw(&parsed, manifest_bytes, content_type),
        )
        .await
        .map_err(|_| timeout("manifest"))?
        .map_err(failed("manifest"))?;
        Ok(manifest_digest)
    }
}

/// The config's `created`: `SOURCE_DATE_EPOCH` when set (so pushing the
/// same build twice gives the same digest), else now.
fn created_time() -> String {
    let epoch = std::env::var("SOURCE_DATE_EPOCH")
        .ok()
        .and_then(|s| s.trim().parse::<i64>().ok())
        .and_then(|secs| chrono::DateTime::from_timestamp(secs, 0));
    epoch
        .unwrap_or_else(chrono::Utc::now)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

fn descriptor(media_type: &str, bytes: &[u8]) -> OciDescriptor {
    OciDescriptor {
        media_type: media_type.to_string(),
        digest: sha256_digest(bytes),
        size: i64::try_from(bytes.len()).unwrap_or(i64::MAX),
        urls: None,
        annotations: None,
        artifact_type: None,
    }
}

/// The config of a wasm artifact (CNCF layout, `os: wasip2`).
#[derive(serde::Serialize)]
#[serde(rename_all = "camelCase")]
struct WasmConfig {
    created: String,
    architecture: &'static str,
    os: &'static str,
    layer_digests: Vec<String>,
    component: ComponentWorld,
}

/// A component's top-level imports and exports.
#[derive(Debug, Default, PartialEq, Eq, serde::Serialize)]
struct ComponentWorld {
    exports: Vec<String>,
    imports: Vec<String>,
}

/// The top-level imports and exports of a component (nested modules and
/// components skipped); an error for anything that is not a component.
fn component_world(bytes: &[u8]) -> Result<ComponentWorld, String> {
    use wasmparser::{Encoding, Parser, Payload};
    let mut world = ComponentWorld::default();
    let mut depth = 0usize;
    for payload in Parser::new(0).parse_all(bytes) {
        match payload.map_err(|e| e.to_string())? {
            Payload::Version { encoding, .. } => {
                if depth == 0 && encoding != Encoding::Component {
                    return Err("a core module, not a component".to_string());
                }
                depth += 1;
            }
            Payload::End(_) => depth = depth.saturating_sub(1),
            Payload::ComponentImportSection(section) if depth == 1 => {
                for import in section {
                    let import = import.map_err(|e| e.to_string())?;
                    world.imports.push(import.name.name.to_string());
                }
            }
            Payload::ComponentExportSection(section) if depth == 1 => {
                for export in section {
                    let export = export.map_err(|e| e.to_string())?;
                    world.exports.push(export.name.name.to_string());
                }
            }
            _ => {}
        }
    }
    Ok(world)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn component_world_reads_top_level_names() {
        let component = wat::parse_str(
            r#"(component
                (import "rekon:plugin/host@0.3.0" (instance $h))
                (core module $m)
                (component $inner (import "nested" (func)))
                (export "rekon:plugin/guest@0.3.0" (instance $h))
            )"#,
        )
        .unwrap();
        let world = component_world(&component).unwrap();
        assert_eq!(world.imports, ["rekon:plugin/host@0.3.0"]);
        assert_eq!(world.exports, ["rekon:plugin/guest@0.3.0"]);
        let module = wat::parse_str("(module)").unwrap();
        assert!(
            component_world(&module)
                .unwrap_err()
                .contains("core module")
        );
        assert!(component_world(b"not wasm").is_err());
    }
}
