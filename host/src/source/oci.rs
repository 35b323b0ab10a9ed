//! Plugin components in OCI registries.
//!
//! A plugin is published as a [CNCF wasm OCI artifact]: an OCI image
//! manifest whose config has media type [`WASM_CONFIG_MEDIA_TYPE`] and
//! whose one layer, media type [`WASM_LAYER_MEDIA_TYPE`], is the component.
//! [`Fetcher::push`] publishes a component in that layout;
//! [`Fetcher::fetch`] brings one back:
//!
//! 1. The reference is parsed (`registry/repository:tag` or `@sha256:…`).
//!    With [`PullPolicy::IfNotPresent`] and a digest (in the reference or
//!    expected by the caller) whose manifest and module are in the disk
//!    cache, nothing is fetched: a restart neither pulls nor (the runtime
//!    caches compiled code by the component's sha256) recompiles.
//! 2. The manifest is fetched and hashed; a digest the caller expects that
//!    differs from the one the registry served is refused, naming both.
//! 3. The manifest must be a wasm artifact (config and layer media types),
//!    and its layer no larger than [`OciConfig::max_module_bytes`].
//! 4. The layer is downloaded (the limit enforced while reading, whatever
//!    the manifest claimed) and its sha256 compared with the layer digest
//!    before anything else sees the bytes. A layer already in the cache is
//!    not downloaded again.
//! 5. Manifest and module are written to the cache atomically (temporary
//!    file, then rename); entries are content-addressed and verified again
//!    when read, so a damaged cache file is refetched, never loaded.
//!
//! A registry on a loopback address (`127.0.0.0/8`, `::1`, `localhost`) is
//! spoken to over plain HTTP, as Docker and containerd do; any other over
//! TLS (rustls with ring, the system's roots) unless named in
//! [`OciConfig::insecure_registries`]. Every attempt is bounded by
//! [`OciConfig::timeout`]; an unreachable registry is retried with
//! exponential backoff ([`OciConfig::retries`]); every other failure is
//! final and named by a [`FetchError`] whose [`FetchError::reason`] a
//! Plugin's status condition can carry. With [`Fetcher::with_metrics`] each
//! fetch is counted by outcome (`rekon_plugin_fetch_total`) and timed.
//!
//! Credentials: [`RegistryAuth`], read from a `kubernetes.io/dockerconfigjson`
//! Secret's `.dockerconfigjson` with [`RegistryAuth::from_docker_config_json`]
//! (anonymous when the Secret has no entry for the registry).
//!
//! ```no_run
//! # async fn f() -> Result<(), rekon::source::oci::FetchError> {
//! use rekon::source::oci::{Fetcher, OciConfig, PullPolicy, RegistryAuth};
//!
//! let fetcher = Fetcher::new(OciConfig {
//!     cache_dir: Some("/var/cache/rekon".into()),
//!     ..OciConfig::default()
//! });
//! let fetched = fetcher
//!     .fetch("ghcr.io/acme/nodepool:1.2.0", None, PullPolicy::IfNotPresent, &RegistryAuth::Anonymous)
//!     .await?;
//! println!("{} is {}", fetched.reference, fetched.manifest_digest);
//! # Ok(()) }
//! ```
//!
//! Built on `oci-client` (the registry protocol, auth, manifests, blob
//! streams). Not on `oci-wasm`, the Bytecode Alliance's thin wrapper for
//! this layout: its pull goes through `oci_client::Client::pull`, which
//! reads every layer whole into memory, so the size limit while reading
//! (step 4) could not be kept, and its releases track an older
//! `oci-client` (0.4: ^0.16) than the one here. What it would add is the
//! config record, written below in a few lines.
//!
//! [CNCF wasm OCI artifact]: https://tag-runtime.cncf.io/wgs/wasm/deliverables/wasm-oci-artifact/

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use futures::{Stream, StreamExt};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError, OciErrorCode};
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE, OciDescriptor,
    OciImageManifest,
};
use oci_client::{Client, Reference};
use sha2::{Digest, Sha256};

use crate::telemetry::metrics::Metrics;

/// Media type of the wasm artifact's config (CNCF wasm OCI artifact layout).
pub const WASM_CONFIG_MEDIA_TYPE: &str = "application/vnd.wasm.config.v0+json";
/// Media type of the wasm artifact's one layer: the component itself.
pub const WASM_LAYER_MEDIA_TYPE: &str = "application/wasm";

/// How a [`Fetcher`] talks to registries and where it caches.
#[derive(Debug, Clone)]
pub struct OciConfig {
    /// Cache of fetched manifests and modules, by digest
    /// (`<dir>/manifests/sha256/<hex>`, `<dir>/modules/sha256/<hex>`).
    /// `None`: nothing is cached and every fetch pulls.
    pub cache_dir: Option<PathBuf>,
    /// Registries (`host[:port]`, as written in references) spoken to over
    /// plain HTTP although they are not on a loopback address.
    pub insecure_registries: Vec<String>,
    /// The longest one attempt (manifest and layer) may take; also the
    /// connect and read timeouts of each request.
    pub timeout: Duration,
    /// Retries of an attempt that found the registry unreachable (timeout,
    /// refused connection, 5xx), with exponential backoff from
    /// [`OciConfig::backoff`].
    pub retries: u32,
    /// The first retry's delay; each next one doubles it (at most 30 s).
    pub backoff: Duration,
    /// The largest module accepted, checked against the manifest before the
    /// download and enforced while downloading.
    pub max_module_bytes: u64,
}

impl Default for OciConfig {
    fn default() -> Self {
        Self {
            cache_dir: None,
            insecure_registries: Vec::new(),
            timeout: Duration::from_secs(30),
            retries: 3,
            backoff: Duration::from_millis(500),
            max_module_bytes: 64 * 1024 * 1024,
        }
    }
}

/// When a fetch may be answered from the disk cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PullPolicy {
    /// A digest-pinned reference (or an expected digest) whose manifest and
    /// module are cached is not fetched at all; a tag is always resolved
    /// (one manifest request), its module downloaded only when not cached.
    #[default]
    IfNotPresent,
    /// The manifest is always fetched (a digest-pinned one too, so a
    /// vanished artifact is noticed); the module is downloaded only when not
    /// cached (it is content-addressed and verified).
    Always,
}

/// Credentials for one registry.
#[derive(Clone, Default, PartialEq, Eq)]
pub enum RegistryAuth {
    /// No credentials (public repositories).
    #[default]
    Anonymous,
    /// User name and password (or token used as a password).
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
}

impl std::fmt::Debug for RegistryAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Anonymous => f.write_str("Anonymous"),
            Self::Basic { username, .. } => f
                .debug_struct("Basic")
                .field("username", username)
                .field("password", &"<redacted>")
                .finish(),
        }
    }
}

/// A `.dockerconfigjson` that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// Not the JSON of a docker config.
    #[error("invalid docker config json: {0}")]
    Json(#[from] serde_json::Error),
    /// The entry for the registry has an `auth` field that is not base64 of
    /// `user:password`.
    #[error("invalid `auth` of registry `{registry}` in docker config json: {detail}")]
    Auth {
        /// The registry's key in `auths`.
        registry: String,
        /// What is wrong.
        detail: String,
    },
}

#[derive(serde::Deserialize)]
struct DockerConfig {
    #[serde(default)]
    auths: BTreeMap<String, DockerAuthEntry>,
}

#[derive(serde::Deserialize)]
struct DockerAuthEntry {
    #[serde(default)]
    auth: Option<String>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    password: Option<String>,
}

/// `https://index.docker.io/v1/` → `docker.io`; `ghcr.io/` → `ghcr.io`.
fn registry_key(key: &str) -> String {
    let host = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    let host = host.split('/').next().unwrap_or(host).to_ascii_lowercase();
    match host.as_str() {
        "index.docker.io" | "registry-1.docker.io" => "docker.io".to_string(),
        _ => host,
    }
}

impl RegistryAuth {
    /// The credentials for `registry_host` (`host[:port]` as written in a
    /// reference) in a docker config JSON: the `.dockerconfigjson` of a
    /// `kubernetes.io/dockerconfigjson` Secret, `~/.docker/config.json`, or
    /// a containers `auth.json`. Keys may carry a scheme and path
    /// (`https://index.docker.io/v1/`). No entry for the registry:
    /// [`RegistryAuth::Anonymous`]. Credential helpers (`credsStore`,
    /// `credHelpers`) are not consulted.
    ///
    /// ```
    /// use rekon::source::oci::RegistryAuth;
    /// let json = br#"{"auths":{"ghcr.io":{"auth":"Ym90OnNlY3JldA=="}}}"#;
    /// let auth = RegistryAuth::from_docker_config_json(json, "ghcr.io").unwrap();
    /// assert_eq!(auth, RegistryAuth::Basic { username: "bot".into(), password: "secret".into() });
    /// ```
    pub fn from_docker_config_json(bytes: &[u8], registry_host: &str) -> Result<Self, AuthError> {
        let config: DockerConfig = serde_json::from_slice(bytes)?;
        let wanted = registry_key(registry_host);
        let Some((key, entry)) = config
            .auths
            .iter()
            .find(|(key, _)| registry_key(key) == wanted)
        else {
            return Ok(Self::Anonymous);
        };
        if let (Some(username), Some(password)) = (&entry.username, &entry.password) {
            return Ok(Self::Basic {
                username: username.clone(),
                password: password.clone(),
            });
        }
        let Some(auth) = entry.auth.as_deref().filter(|a| !a.is_empty()) else {
            return Ok(Self::Anonymous);
        };
        let invalid = |detail: String| AuthError::Auth {
            registry: key.clone(),
            detail,
        };
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .map_err(|e| invalid(format!("not base64: {e}")))?;
        let decoded = String::from_utf8(decoded).map_err(|_| invalid("not UTF-8".into()))?;
        let (username, password) = decoded
            .split_once(':')
            .ok_or_else(|| invalid("no `:` between user and password".into()))?;
        Ok(Self::Basic {
            username: username.to_string(),
            password: password.to_string(),
        })
    }

    fn to_oci(&self) -> oci_client::secrets::RegistryAuth {
        match self {
            Self::Anonymous => oci_client::secrets::RegistryAuth::Anonymous,
            Self::Basic { username, password } => {
                oci_client::secrets::RegistryAuth::Basic(username.clone(), password.clone())
            }
        }
    }
}

/// A verified plugin module.
#[derive(Debug, Clone)]
pub struct Fetched {
    /// The reference as given.
    pub reference: String,
    /// The same artifact pinned: `registry/repository@sha256:…`.
    pub pinned: String,
    /// `sha256:…` of the manifest: what a Plugin's status records.
    pub manifest_digest: String,
    /// `sha256:…` of the layer, the component's bytes.
    pub layer_digest: String,
    /// The component, verified against `layer_digest`.
    pub bytes: Arc<[u8]>,
    /// The module came from the disk cache (nothing was downloaded; with
    /// [`PullPolicy::Always`] the manifest was still fetched).
    pub from_cache: bool,
}

/// Why a fetch failed. Each variant names the reference; [`Self::reason`]
/// is a condition reason, [`Self::outcome`] the metric label.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    /// Not a reference, or a malformed digest.
    #[error("invalid reference `{reference}`: {detail}")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// The registry did not answer (refused, timed out, 5xx) after retries.
    #[error("registry of `{reference}` unreachable: {detail}")]
    Unreachable {
        /// The reference.
        reference: String,
        /// The last attempt's failure.
        detail: String,
    },
    /// The repository or the tag/digest does not exist (a tag that vanished).
    #[error("`{reference}` not found: {detail}")]
    NotFound {
        /// The reference.
        reference: String,
        /// The registry's words.
        detail: String,
    },
    /// The registry refused the credentials (or their absence).
    #[error("not authorized to pull `{reference}`: {detail}")]
    Unauthorized {
        /// The reference.
        reference: String,
        /// The registry's words.
        detail: String,
    },
    /// Content did not hash to the digest it should have.
    #[error("digest mismatch for the {what} of `{reference}`: expected {expected}, found {found}")]
    DigestMismatch {
        /// The reference.
        reference: String,
        /// `manifest` or `layer`.
        what: &'static str,
        /// The digest expected (pinned, or the manifest's layer digest).
        expected: String,
        /// The digest of what was served.
        found: String,
    },
    /// The module is larger than the limit.
    #[error("module of `{reference}` too large: {size} bytes, the limit is {limit}")]
    TooLarge {
        /// The reference.
        reference: String,
        /// Its size (as declared, or as read so far).
        size: u64,
        /// [`OciConfig::max_module_bytes`].
        limit: u64,
    },
    /// Not a wasm artifact (media types, layer count).
    #[error("`{reference}` is not a wasm artifact: {detail}")]
    NotAWasmArtifact {
        /// The reference.
        reference: String,
        /// What it is instead.
        detail: String,
    },
    /// Any other refusal by the registry (or a failure to set up the client).
    #[error("registry error for `{reference}`: {detail}")]
    Registry {
        /// The reference.
        reference: String,
        /// The registry's words.
        detail: String,
    },
}

impl FetchError {
    /// A condition reason (CamelCase) for a Plugin's status.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            Self::InvalidReference { .. } => "InvalidReference",
            Self::Unreachable { .. } => "RegistryUnreachable",
            Self::NotFound { .. } => "ArtifactNotFound",
            Self::Unauthorized { .. } => "RegistryUnauthorized",
            Self::DigestMismatch { .. } => "DigestMismatch",
            Self::TooLarge { .. } => "ModuleTooLarge",
            Self::NotAWasmArtifact { .. } => "NotAWasmArtifact",
            Self::Registry { .. } => "RegistryError",
        }
    }

    /// The `outcome` label of `rekon_plugin_fetch_total` (snake_case).
    #[must_use]
    pub fn outcome(&self) -> &'static str {
        match self {
            Self::InvalidReference { .. } => "invalid_reference",
            Self::Unreachable { .. } => "registry_unreachable",
            Self::NotFound { .. } => "not_found",
            Self::Unauthorized { .. } => "unauthorized",
            Self::DigestMismatch { .. } => "digest_mismatch",
            Self::TooLarge { .. } => "too_large",
            Self::NotAWasmArtifact { .. } => "not_a_wasm_artifact",
            Self::Registry { .. } => "registry_error",
        }
    }

    /// Worth retrying later: the registry did not answer.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Unreachable { .. })
    }
}

/// Why a push failed.
#[derive(Debug, thiserror::Error)]
pub enum PushError {
    /// Not a reference.
    #[error("invalid reference `{reference}`: {detail}")]
    InvalidReference {
        /// The reference.
        reference: String,
        /// What is wrong.
        detail: String,
    },
    /// The bytes are not a WebAssembly component.
    #[error("cannot push to `{reference}`: not a WebAssembly component: {detail}")]
    NotAComponent {
        /// The reference.
        reference: String,
        /// What the parser said.
        detail: String,
    },
    /// The registry refused or did not answer.
    #[error("failed to push the {stage} of `{reference}`: {source}")]
    Registry {
        /// The reference.
        reference: String,
        /// `layer`, `config` or `manifest`.
        stage: &'static str,
        /// The failure, classified as for fetches.
        #[source]
        source: Box<FetchError>,
    },
}

/// Fetches plugin modules from OCI registries and publishes them. Cheap to
/// share behind an `Arc`; every call builds its own registry client, so
/// credentials (one Plugin's pull Secret) never leak into another call.
#[derive(Debug, Clone)]
pub struct Fetcher {
    config: OciConfig,
    cache: ModuleCache,
    metrics: Option<Metrics>,
}

impl Fetcher {
    /// A fetcher with `config`; installs rustls' ring provider as the
    /// process default when none is (the registry client's TLS uses it).
    #[must_use]
    pub fn new(config: OciConfig) -> Self {
        // Err means a provider is already installed: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            cache: ModuleCache {
                dir: config.cache_dir.clone(),
            },
            config,
            metrics: None,
        }
    }

    /// Counts every fetch in `metrics` (`rekon_plugin_fetch_total{outcome}`,
    /// `rekon_plugin_fetch_duration_seconds`).
    #[must_use]
    pub fn with_metrics(mut self, metrics: Metrics) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The configuration.
    #[must_use]
    pub fn config(&self) -> &OciConfig {
        &self.config
    }

    /// Fetches the component `reference` names; see the [module docs](self)
    /// for the steps. `expected_digest` (`sha256:…`) pins the manifest
    /// digest (a Plugin's `spec.digest`): anything else is refused.
    pub async fn fetch(
        &self,
        reference: &str,
        expected_digest: Option<&str>,
        policy: PullPolicy,
        auth: &RegistryAuth,
    ) -> Result<Fetched, FetchError> {
        let started = Instant::now();
        let result = self
            .fetch_unmetered(reference, expected_digest, policy, auth)
            .await;
        if let Some(metrics) = &self.metrics {
            let outcome = match &result {
                Ok(f) if f.from_cache => "cached",
                Ok(_) => "pulled",
                Err(e) => e.outcome(),
            };
            metrics.plugin_fetched(outcome, started.elapsed());
        }
        match &result {
            Ok(f) => tracing::debug!(
                reference,
                digest = %f.manifest_digest,
                from_cache = f.from_cache,
                "fetched plugin"
            ),
            Err(e) => tracing::warn!(reference, error = %e, "failed to fetch plugin"),
        }
        result
    }

    /// The module of the artifact with manifest digest `digest` from the
    /// disk cache alone (verified as on every cache read; no registry is
    /// asked): the layer digest and the component's bytes.
    pub async fn cached(&self, digest: &str) -> Option<(String, Arc<[u8]>)> {
        self.cache.artifact(digest).await
    }

    async fn fetch_unmetered(
        &self,
        reference: &str,
        expected_digest: Option<&str>,
        policy: PullPolicy,
        auth: &RegistryAuth,
    ) -> Result<Fetched, FetchError> {
        let parsed = parse_reference(reference).map_err(|detail| FetchError::InvalidReference {
            reference: reference.to_string(),
            detail,
        })?;
        let pinned = pinned_digest(reference, parsed.digest(), expected_digest)?;
        if policy == PullPolicy::IfNotPresent
            && let Some(digest) = &pinned
            && let Some((layer_digest, bytes)) = self.cache.artifact(digest).await
        {
            return Ok(Fetched {
                reference: reference.to_string(),
                pinned: pinned_reference(&parsed, digest),
                manifest_digest: digest.clone(),
                layer_digest,
                bytes,
                from_cache: true,
            });
        }
        let mut attempt = 0;
        loop {
            let result = tokio::time::timeout(
                self.config.timeout,
                self.pull(reference, &parsed, pinned.as_deref(), auth),
            )
            .await
            .unwrap_or_else(|_| {
                Err(FetchError::Unreachable {
                    reference: reference.to_string(),
                    detail: format!("timed out after {:?}", self.config.timeout),
                })
            });
            match result {
                Err(e) if e.is_transient() && attempt < self.config.retries => {
                    let delay = backoff(self.config.backoff, attempt);
                    tracing::debug!(reference, error = %e, ?delay, "registry unreachable; retrying");
                    tokio::time::sleep(delay).await;
                    attempt += 1;
                }
                result => return result,
            }
        }
    }

    /// One attempt: manifest, checks, layer (or the cached module), cache.
    async fn pull(
        &self,
        reference: &str,
        parsed: &Reference,
        pinned: Option<&str>,
        auth: &RegistryAuth,
    ) -> Result<Fetched, FetchError> {
        let classify = |e| classify(reference, e);
        let client = self.client(parsed).map_err(classify)?;
        let (manifest_bytes, _) = client
            .pull_manifest_raw(
                parsed,
                &auth.to_oci(),
                &[
                    OCI_IMAGE_MEDIA_TYPE,
                    IMAGE_MANIFEST_MEDIA_TYPE,
                    OCI_IMAGE_INDEX_MEDIA_TYPE,
                ],
            )
            .await
            .map_err(classify)?;
        let manifest_digest = sha256_digest(&manifest_bytes);
        if let Some(expected) = pinned
            && expected != manifest_digest
        {
            return Err(FetchError::DigestMismatch {
                reference: reference.to_string(),
                what: "manifest",
                expected: expected.to_string(),
                found: manifest_digest,
            });
        }
        let layer = wasm_layer(&manifest_bytes).map_err(|detail| FetchError::NotAWasmArtifact {
            reference: reference.to_string(),
            detail,
        })?;
        let limit = self.config.max_module_bytes;
        let declared = u64::try_from(layer.size).unwrap_or(u64::MAX);
        if declared > limit {
            return Err(FetchError::TooLarge {
                reference: reference.to_string(),
                size: declared,
                limit,
            });
        }
        let (bytes, from_cache) = match self.cache.module(&layer.digest).await {
            Some(bytes) => (bytes, true),
            None => {
                let stream = client
                    .pull_blob_stream(parsed, &layer)
                    .await
                    .map_err(classify)?;
                let bytes = read_limited(stream, limit)
                    .await
                    .map_err(|e| e.into_fetch_error(reference, limit))?;
                let found = sha256_digest(&bytes);
                if found != layer.digest {
                    return Err(FetchError::DigestMismatch {
                        reference: reference.to_string(),
                        what: "layer",
                        expected: layer.digest,
                        found,
                    });
                }
                (Arc::<[u8]>::from(bytes), false)
            }
        };
        self.cache
            .store(&manifest_digest, &manifest_bytes, &layer.digest, &bytes)
            .await;
        Ok(Fetched {
            reference: reference.to_string(),
            pinned: pinned_reference(parsed, &manifest_digest),
            manifest_digest,
            layer_digest: layer.digest,
            bytes,
            from_cache,
        })
    }

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
        let parsed = parse_reference(reference).map_err(|detail| PushError::InvalidReference {
            reference: reference.to_string(),
            detail,
        })?;
        let world = component_world(component).map_err(|detail| PushError::NotAComponent {
            reference: reference.to_string(),
            detail,
        })?;
        let layer_digest = sha256_digest(component);
        let config = WasmConfig {
            created: created_time(),
            architecture: "wasm",
            os: "wasip2",
            layer_digests: vec![layer_digest.clone()],
            component: world,
        };
        // Serializing a struct of strings cannot fail.
        let config_bytes = serde_json::to_vec(&config).unwrap_or_default();
        let manifest = OciImageManifest {
            schema_version: 2,
            media_type: Some(OCI_IMAGE_MEDIA_TYPE.to_string()),
            config: descriptor(WASM_CONFIG_MEDIA_TYPE, &config_bytes),
            layers: vec![descriptor(WASM_LAYER_MEDIA_TYPE, component)],
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

    /// A client for the reference's registry: plain HTTP for loopback and
    /// the configured insecure registries, TLS otherwise.
    fn client(&self, reference: &Reference) -> Result<Client, OciDistributionError> {
        let registry = reference.resolve_registry();
        let plain = is_loopback(registry)
            || self
                .config
                .insecure_registries
                .iter()
                .any(|r| r.eq_ignore_ascii_case(registry) || r == reference.registry());
        Client::try_from(ClientConfig {
            protocol: if plain {
                ClientProtocol::Http
            } else {
                ClientProtocol::Https
            },
            connect_timeout: Some(self.config.timeout),
            read_timeout: Some(self.config.timeout),
            platform_resolver: None,
            ..ClientConfig::default()
        })
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

/// `base · 2^attempt`, at most 30 s.
fn backoff(base: Duration, attempt: u32) -> Duration {
    base.saturating_mul(1 << attempt.min(16))
        .min(Duration::from_secs(30))
}

fn parse_reference(reference: &str) -> Result<Reference, String> {
    reference.parse::<Reference>().map_err(|e| e.to_string())
}

/// `registry/repository@digest`.
fn pinned_reference(reference: &Reference, digest: &str) -> String {
    format!(
        "{}/{}@{digest}",
        reference.registry(),
        reference.repository()
    )
}

/// The manifest digest a fetch must find: the reference's, the caller's,
/// or both when they agree.
fn pinned_digest(
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
fn hex_of(digest: &str) -> Option<&str> {
    let hex = digest.strip_prefix("sha256:")?;
    (hex.len() == 64
        && hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)))
    .then_some(hex)
}

fn sha256_digest(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
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

/// Is `registry` (`host[:port]`, `[v6]:port`) on a loopback address?
fn is_loopback(registry: &str) -> bool {
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
fn wasm_layer(manifest: &[u8]) -> Result<OciDescriptor, String> {
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
    match manifest.layers.as_slice() {
        [layer] if layer.media_type == WASM_LAYER_MEDIA_TYPE => {
            if hex_of(&layer.digest).is_none() {
                return Err(format!("layer digest `{}` is not sha256", layer.digest));
            }
            Ok(layer.clone())
        }
        _ => Err(format!(
            "expected one `{WASM_LAYER_MEDIA_TYPE}` layer, found [{}]",
            types.join(", ")
        )),
    }
}

/// Why [`read_limited`] stopped.
#[derive(Debug)]
enum ReadError {
    /// More than the limit arrived; how much was read when it stopped.
    TooLarge(u64),
    /// The stream failed.
    Io(std::io::Error),
}

impl ReadError {
    fn into_fetch_error(self, reference: &str, limit: u64) -> FetchError {
        match self {
            Self::TooLarge(size) => FetchError::TooLarge {
                reference: reference.to_string(),
                size,
                limit,
            },
            Self::Io(e) => {
                // oci-client's verifying stream reports a digest mismatch
                // as an I/O error wrapping its `DigestError`.
                if let Some(DigestError::VerificationError { expected, actual }) =
                    e.get_ref().and_then(|inner| inner.downcast_ref())
                {
                    return FetchError::DigestMismatch {
                        reference: reference.to_string(),
                        what: "layer",
                        expected: expected.clone(),
                        found: actual.clone(),
                    };
                }
                FetchError::Unreachable {
                    reference: reference.to_string(),
                    detail: format!("download interrupted: {}", error_chain(&e)),
                }
            }
        }
    }
}

/// Reads `stream` into memory, stopping as soon as more than `limit` bytes
/// arrived (a registry may send more than the manifest declared).
async fn read_limited<S>(mut stream: S, limit: u64) -> Result<Vec<u8>, ReadError>
where
    S: Stream<Item = Result<bytes::Bytes, std::io::Error>> + Unpin,
{
    let mut out = Vec::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(ReadError::Io)?;
        let size = (out.len() + chunk.len()) as u64;
        if size > limit {
            return Err(ReadError::TooLarge(size));
        }
        out.extend_from_slice(&chunk);
    }
    Ok(out)
}

/// An error and its sources, `: `-separated.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

/// Sorts the registry client's errors into [`FetchError`]s.
fn classify(reference: &str, e: OciDistributionError) -> FetchError {
    let reference = reference.to_string();
    let detail = error_chain(&e);
    match e {
        OciDistributionError::RequestError(_) | OciDistributionError::IoError(_) => {
            FetchError::Unreachable { reference, detail }
        }
        OciDistributionError::UnauthorizedError { .. }
        | OciDistributionError::AuthenticationFailure(_) => {
            FetchError::Unauthorized { reference, detail }
        }
        OciDistributionError::DigestError(DigestError::VerificationError { expected, actual }) => {
            FetchError::DigestMismatch {
                reference,
                what: "manifest",
                expected,
                found: actual,
            }
        }
        OciDistributionError::ImageManifestNotFoundError(_) => {
            FetchError::NotFound { reference, detail }
        }
        OciDistributionError::RegistryError { envelope, .. } => {
            let code = envelope.errors.first().map(|e| &e.code);
            match code {
                Some(
                    OciErrorCode::ManifestUnknown
                    | OciErrorCode::NameUnknown
                    | OciErrorCode::NotFound
                    | OciErrorCode::BlobUnknown,
                ) => FetchError::NotFound { reference, detail },
                Some(OciErrorCode::Unauthorized | OciErrorCode::Denied) => {
                    FetchError::Unauthorized { reference, detail }
                }
                Some(OciErrorCode::Toomanyrequests) => {
                    FetchError::Unreachable { reference, detail }
                }
                _ => FetchError::Registry { reference, detail },
            }
        }
        OciDistributionError::ServerError { code, .. } => match code {
            404 => FetchError::NotFound { reference, detail },
            401 | 403 => FetchError::Unauthorized { reference, detail },
            429 | 500..=599 => FetchError::Unreachable { reference, detail },
            _ => FetchError::Registry { reference, detail },
        },
        OciDistributionError::ManifestParsingError(_)
        | OciDistributionError::UnsupportedMediaTypeError(_)
        | OciDistributionError::ImageIndexParsingNoPlatformResolverError
        | OciDistributionError::IncompatibleLayerMediaTypeError(_) => {
            FetchError::NotAWasmArtifact { reference, detail }
        }
        _ => FetchError::Registry { reference, detail },
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

/// Manifests and modules on disk, by digest. Every read is verified
/// against its digest (a damaged file is removed and refetched); every
/// write goes to a temporary file renamed into place. Write failures are
/// logged, not returned: a fetch that could not be cached still succeeded.
#[derive(Debug, Clone)]
struct ModuleCache {
    dir: Option<PathBuf>,
}

impl ModuleCache {
    fn path(&self, kind: &str, digest: &str) -> Option<PathBuf> {
        let hex = hex_of(digest)?;
        Some(self.dir.as_ref()?.join(kind).join("sha256").join(hex))
    }

    /// The content of `kind/digest`, when present and intact.
    async fn read(&self, kind: &str, digest: &str) -> Option<Vec<u8>> {
        let path = self.path(kind, digest)?;
        let bytes = tokio::fs::read(&path).await.ok()?;
        if sha256_digest(&bytes) == digest {
            return Some(bytes);
        }
        tracing::warn!(path = %path.display(), "damaged cache entry; removing it");
        let _ = tokio::fs::remove_file(&path).await;
        None
    }

    /// The cached module with `layer_digest`.
    async fn module(&self, layer_digest: &str) -> Option<Arc<[u8]>> {
        self.read("modules", layer_digest).await.map(Arc::from)
    }

    /// The cached artifact with manifest `digest`: its layer digest and
    /// module, when both are cached.
    async fn artifact(&self, digest: &str) -> Option<(String, Arc<[u8]>)> {
        let manifest = self.read("manifests", digest).await?;
        let layer = wasm_layer(&manifest).ok()?;
        let module = self.module(&layer.digest).await?;
        Some((layer.digest, module))
    }

    async fn store(
        &self,
        manifest_digest: &str,
        manifest: &[u8],
        layer_digest: &str,
        module: &[u8],
    ) {
        for (kind, digest, bytes) in [
            ("modules", layer_digest, module),
            ("manifests", manifest_digest, manifest),
        ] {
            let Some(path) = self.path(kind, digest) else {
                continue;
            };
            if tokio::fs::try_exists(&path).await.unwrap_or(false) {
                continue;
            }
            if let Err(e) = write_atomically(&path, bytes).await {
                tracing::warn!(path = %path.display(), error = %e, "failed to cache a plugin artifact");
            }
        }
    }
}

async fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("cache path has no parent"))?;
    tokio::fs::create_dir_all(dir).await?;
    let tmp = dir.join(format!(
        ".tmp-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    tokio::fs::write(&tmp, bytes).await?;
    if let Err(e) = tokio::fs::rename(&tmp, path).await {
        let _ = tokio::fs::remove_file(&tmp).await;
        return Err(e);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn docker_config_json() {
        let json = br#"{"auths":{
            "https://index.docker.io/v1/":{"auth":"dXNlcjpwYTpzcw=="},
            "registry.example.com:5000":{"username":"u","password":"p"},
            "broken.example.com":{"auth":"!!!"}
        }}"#;
        let basic = |u: &str, p: &str| RegistryAuth::Basic {
            username: u.into(),
            password: p.into(),
        };
        // The password may contain `:`; docker.io's legacy key matches.
        assert_eq!(
            RegistryAuth::from_docker_config_json(json, "docker.io").unwrap(),
            basic("user", "pa:ss")
        );
        assert_eq!(
            RegistryAuth::from_docker_config_json(json, "registry.example.com:5000").unwrap(),
            basic("u", "p")
        );
        assert_eq!(
            RegistryAuth::from_docker_config_json(json, "ghcr.io").unwrap(),
            RegistryAuth::Anonymous
        );
        let err = RegistryAuth::from_docker_config_json(json, "broken.example.com").unwrap_err();
        assert!(err.to_string().contains("broken.example.com"), "{err}");
        for broken in [&b"not json"[..], br#"{"auths": 1}"#] {
            assert!(RegistryAuth::from_docker_config_json(broken, "ghcr.io").is_err());
        }
        // Debug never shows the password.
        assert!(!format!("{:?}", basic("u", "hunter2")).contains("hunter2"));
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
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_IMAGE_INDEX_MEDIA_TYPE, "manifests": []
        }))
        .unwrap();
        assert!(wasm_layer(&index).unwrap_err().contains("index"));
    }

    #[tokio::test]
    async fn read_limited_stops_at_the_limit() {
        let chunks = |n: usize| {
            futures::stream::iter(
                (0..n).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from_static(&[7; 100]))),
            )
        };
        let read = tokio::time::timeout(Duration::from_secs(5), read_limited(chunks(3), 300))
            .await
            .expect("likely deadlocked");
        assert_eq!(read.unwrap().len(), 300);
        // A registry sending more than declared is cut off at the chunk
        // that crosses the limit, not after the whole body.
        let read = read_limited(chunks(1_000), 250).await;
        assert!(matches!(read, Err(ReadError::TooLarge(300))), "{read:?}");
    }

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

    #[test]
    fn backoff_doubles_up_to_a_cap() {
        let base = Duration::from_millis(500);
        assert_eq!(backoff(base, 0), base);
        assert_eq!(backoff(base, 2), Duration::from_secs(2));
        assert_eq!(backoff(base, 40), Duration::from_secs(30));
    }
}
