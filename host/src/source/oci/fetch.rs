//! [`Fetcher::fetch`]: reference → manifest → one verified wasm layer,
//! through the disk cache, with retries while the registry is unreachable.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{Stream, StreamExt};
use oci_client::client::{ClientConfig, ClientProtocol};
use oci_client::errors::{DigestError, OciDistributionError};
use oci_client::manifest::{
    IMAGE_MANIFEST_MEDIA_TYPE, OCI_IMAGE_INDEX_MEDIA_TYPE, OCI_IMAGE_MEDIA_TYPE,
};
use oci_client::{Client, Reference};

use super::auth::RegistryAuth;
use super::cache::{ModuleCache, VerificationRecord};
use super::error::{FetchError, classify, error_chain};
use super::reference::{
    is_loopback, parse_reference, pinned_digest, pinned_reference, precompiled_layer,
    sha256_digest, wasm_layer,
};
use crate::plugin::{Code, Precompiled};
use crate::queue::Backoff;
use crate::telemetry::metrics::Metrics;

/// The longest wait between two attempts of one fetch.
const MAX_RETRY_DELAY: Duration = Duration::from_secs(30);

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
    /// Download a manifest's precompiled layer when it was compiled for
    /// this engine key (the runtime's
    /// [`crate::plugin::PluginRuntime::engine_key`]) from the manifest's
    /// wasm layer; `None`: never. What was downloaded is only used once
    /// covered by a verified signature (the caller's decision).
    pub precompiled_engine: Option<String>,
    /// The largest precompiled layer accepted (a larger one is not
    /// downloaded; the host compiles).
    pub max_precompiled_bytes: u64,
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
            precompiled_engine: None,
            max_precompiled_bytes: 256 * 1024 * 1024,
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
    /// The manifest's precompiled layer, downloaded and checked against
    /// its digest, when it was made for [`OciConfig::precompiled_engine`]
    /// from this module. Trusted code only once the manifest's signatures
    /// verified: nothing here says they did.
    pub precompiled: Option<Precompiled>,
}

/// Fetches plugin modules from OCI registries and publishes them. Cheap to
/// share behind an `Arc`. Fetches and signature reads share one registry
/// client per registry and credentials ([`Fetcher::shared_client`]), so
/// credentials (one Plugin's pull Secret) never serve a call made with
/// others.
///
/// A registry on a loopback address (`127.0.0.0/8`, `::1`, `localhost`) is
/// spoken to over plain HTTP, as Docker and containerd do; any other over
/// TLS (rustls with ring, the system's roots) unless named in
/// [`OciConfig::insecure_registries`]. Every attempt is bounded by
/// [`OciConfig::timeout`]; an unreachable registry is retried with
/// exponential backoff ([`OciConfig::retries`]); every other failure is
/// final and named by a [`FetchError`] whose [`FetchError::reason`] a
/// Plugin's status condition can carry. With [`Fetcher::with_metrics`] each
/// fetch is counted by outcome (`rekon_plugin_fetch_total`) and timed.
///
/// ```no_run
/// # async fn f() -> Result<(), rekon::source::oci::FetchError> {
/// use rekon::source::oci::{Fetcher, OciConfig, PullPolicy, RegistryAuth};
///
/// let fetcher = Fetcher::new(OciConfig {
///     cache_dir: Some("/var/cache/rekon".into()),
///     ..OciConfig::default()
/// });
/// let fetched = fetcher
///     .fetch("ghcr.io/acme/nodepool:1.2.0", None, PullPolicy::IfNotPresent, &RegistryAuth::Anonymous)
///     .await?;
/// println!("{} is {}", fetched.reference, fetched.manifest_digest);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Fetcher {
    pub(super) config: OciConfig,
    cache: ModuleCache,
    metrics: Option<Metrics>,
    /// Registry clients by registry and credentials (see
    /// [`Fetcher::shared_client`]).
    clients: Clients,
}

/// Registry clients by `registry\ncredentials` (oci-client's `Client` is
/// not `Debug`).
#[derive(Clone, Default)]
struct Clients(Arc<parking_lot::Mutex<std::collections::HashMap<String, Client>>>);

impl std::fmt::Debug for Clients {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Clients({})", self.0.lock().len())
    }
}

impl Fetcher {
    /// A fetcher with `config`; installs rustls' ring provider as the
    /// process default when none is (the registry client's TLS uses it).
    #[must_use]
    pub fn new(config: OciConfig) -> Self {
        // Err means a provider is already installed: fine either way.
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            cache: ModuleCache::new(config.cache_dir.clone()),
            config,
            metrics: None,
            clients: Clients::default(),
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

    /// Fetches the component `reference` names. `expected_digest`
    /// (`sha256:…`) pins the manifest digest (a Plugin's `spec.digest`):
    /// anything else is refused. The steps:
    ///
    /// 1. The reference is parsed (`registry/repository:tag` or `@sha256:…`).
    ///    With [`PullPolicy::IfNotPresent`] and a digest (in the reference or
    ///    expected by the caller) whose manifest and module are in the disk
    ///    cache, nothing is fetched: a restart neither pulls nor (the runtime
    ///    caches compiled code by the component's sha256) recompiles.
    /// 2. The manifest is fetched and hashed; a digest the caller expects that
    ///    differs from the one the registry served is refused, naming both.
    /// 3. The manifest must be a wasm artifact (config and layer media types),
    ///    and its layer no larger than [`OciConfig::max_module_bytes`].
    /// 4. The layer is downloaded (the limit enforced while reading, whatever
    ///    the manifest claimed) and its sha256 compared with the layer digest
    ///    before anything else sees the bytes. A layer already in the cache is
    ///    not downloaded again.
    /// 5. Manifest and module are written to the cache atomically (temporary
    ///    file, then rename); entries are content-addressed and verified again
    ///    when read, so a damaged cache file is refetched, never loaded.
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

    /// The record of manifest `digest` verified under the policy with
    /// fingerprint `policy`, from the disk cache (`None` without a cache
    /// directory, or when that policy never verified it).
    pub async fn verification(&self, digest: &str, policy: &str) -> Option<VerificationRecord> {
        self.cache.verification(digest, policy).await
    }

    /// Remembers in the disk cache that manifest `digest` verified.
    pub async fn remember_verification(&self, digest: &str, record: VerificationRecord) {
        self.cache.remember_verification(digest, record).await;
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
                precompiled: None,
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
                    let delay =
                        Backoff::new(self.config.backoff, MAX_RETRY_DELAY).delay(attempt + 1);
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
        let client = self.shared_client(parsed, auth).map_err(classify)?;
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
                    .map_err(|e| e.into_fetch_error(reference, limit, &layer.digest))?;
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
        let precompiled = self
            .pull_precompiled(reference, parsed, &client, &manifest_bytes, &layer.digest)
            .await;
        Ok(Fetched {
            reference: reference.to_string(),
            pinned: pinned_reference(parsed, &manifest_digest),
            manifest_digest,
            layer_digest: layer.digest,
            bytes,
            from_cache,
            precompiled,
        })
    }

    /// The manifest's precompiled layer when there is one for this engine
    /// ([`OciConfig::precompiled_engine`]) compiled from `source` (the wasm
    /// layer's digest). Never fails the fetch: anything wrong is logged
    /// (and counted), and the host compiles.
    async fn pull_precompiled(
        &self,
        reference: &str,
        parsed: &Reference,
        client: &Client,
        manifest: &[u8],
        source: &str,
    ) -> Option<Precompiled> {
        let host = self.config.precompiled_engine.as_deref()?;
        let (layer, engine, from) = precompiled_layer(manifest)?;
        let refused = |outcome: &str, why: String| {
            if let Some(metrics) = &self.metrics {
                metrics.plugin_precompiled_refused(outcome);
            }
            tracing::warn!(reference, reason = %why, "not using the module's precompiled layer; the host compiles it");
        };
        if engine != host {
            refused(
                "engine_mismatch",
                format!(
                    "it was compiled for engine {engine}, this host's engine is {host} (another rekon/wasmtime version, engine configuration or CPU); not downloaded"
                ),
            );
            return None;
        }
        if from != source {
            refused(
                "source_mismatch",
                format!(
                    "it was compiled from {from}, not from the module's layer {source}; not downloaded"
                ),
            );
            return None;
        }
        let limit = self.config.max_precompiled_bytes;
        let declared = u64::try_from(layer.size).unwrap_or(u64::MAX);
        if declared > limit {
            refused(
                "too_large",
                format!("it is {declared} bytes, more than the {limit} accepted"),
            );
            return None;
        }
        let code = match self.cache.precompiled_path(&layer.digest) {
            Some(path) => match self.cache.precompiled(&layer.digest).await {
                Some(cached) => Ok(Code::File(cached)),
                None => match client.pull_blob_stream(parsed, &layer).await {
                    Ok(stream) => download_to_file(stream, limit, &layer.digest, &path)
                        .await
                        .map(|()| Code::File(path)),
                    Err(e) => Err(ReadError::Io(std::io::Error::other(e))),
                },
            },
            // Without a cache directory, in memory.
            None => match client.pull_blob_stream(parsed, &layer).await {
                Ok(stream) => match read_limited(stream, limit).await {
                    Ok(bytes) if sha256_digest(&bytes) == layer.digest => {
                        Ok(Code::Bytes(bytes.into()))
                    }
                    Ok(bytes) => Err(ReadError::Digest(sha256_digest(&bytes))),
                    Err(e) => Err(e),
                },
                Err(e) => Err(ReadError::Io(std::io::Error::other(e))),
            },
        };
        let code = match code {
            Ok(code) => code,
            Err(ReadError::Digest(found)) => {
                refused(
                    "digest_mismatch",
                    format!("its bytes ({found}) do not match {}", layer.digest),
                );
                return None;
            }
            Err(ReadError::TooLarge(size)) => {
                refused(
                    "too_large",
                    format!("more than {limit} bytes arrived ({size})"),
                );
                return None;
            }
            Err(ReadError::Io(e)) => {
                refused(
                    "download_failed",
                    format!("failed to download it: {}", error_chain(&e)),
                );
                return None;
            }
        };
        Some(Precompiled {
            engine,
            source: from,
            code,
        })
    }

    /// The client of the reference's registry for `auth`, set up once and
    /// shared by the fetches and signature reads of this fetcher with the
    /// same credentials (connections and tokens kept): a module's fetch and
    /// the verification of its signatures make one set-up, not two. Other
    /// credentials (another Plugin's pull Secret) get a client of their
    /// own, so a token never serves credentials it was not issued for.
    pub(crate) fn shared_client(
        &self,
        reference: &Reference,
        auth: &RegistryAuth,
    ) -> Result<Client, OciDistributionError> {
        use sha2::Digest as _;
        let credentials = match auth {
            RegistryAuth::Anonymous => "anonymous".to_owned(),
            RegistryAuth::Basic { username, password } => hex::encode(sha2::Sha256::digest(
                format!("{username}\0{password}").as_bytes(),
            )),
        };
        let key = format!("{}\n{credentials}", reference.resolve_registry());
        if let Some(client) = self.clients.0.lock().get(&key) {
            return Ok(client.clone());
        }
        let client = self.client(reference)?;
        self.clients.0.lock().insert(key, client.clone());
        Ok(client)
    }

    /// A client for the reference's registry: plain HTTP for loopback and
    /// the configured insecure registries, TLS otherwise.
    pub(crate) fn client(&self, reference: &Reference) -> Result<Client, OciDistributionError> {
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

/// Why [`read_limited`] or [`download_to_file`] stopped.
#[derive(Debug)]
enum ReadError {
    /// More than the limit arrived; how much was read when it stopped.
    TooLarge(u64),
    /// The stream (or the file written) failed.
    Io(std::io::Error),
    /// Everything arrived, with this digest rather than the one expected.
    Digest(String),
}

impl ReadError {
    fn into_fetch_error(self, reference: &str, limit: u64, expected: &str) -> FetchError {
        match self {
            Self::TooLarge(size) => FetchError::TooLarge {
                reference: reference.to_string(),
                size,
                limit,
            },
            Self::Digest(found) => FetchError::DigestMismatch {
                reference: reference.to_string(),
                what: "layer",
                expected: expected.to_owned(),
                found,
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

/// Streams `stream` into the file `path`, never holding it whole in
/// memory (a precompiled layer is tens of MiB): written to a temporary
/// file beside it and hashed as it arrives, stopped as soon as more than
/// `limit` bytes arrived, fsynced, and renamed to `path` only when its
/// sha256 is `digest`; the temporary file is removed otherwise.
async fn download_to_file<S>(
    mut stream: S,
    limit: u64,
    digest: &str,
    path: &std::path::Path,
) -> Result<(), ReadError>
where
    S: Stream<Item = Result<bytes::Bytes, std::io::Error>> + Unpin,
{
    use sha2::Digest as _;
    use tokio::io::AsyncWriteExt as _;
    let dir = path.parent().unwrap_or(std::path::Path::new("."));
    tokio::fs::create_dir_all(dir)
        .await
        .map_err(ReadError::Io)?;
    let tmp = crate::files::temporary_beside(path, dir);
    let written = async {
        let mut file = tokio::fs::File::create(&tmp).await.map_err(ReadError::Io)?;
        let mut hasher = sha2::Sha256::new();
        let mut size = 0_u64;
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(ReadError::Io)?;
            size += chunk.len() as u64;
            if size > limit {
                return Err(ReadError::TooLarge(size));
            }
            hasher.update(&chunk);
            file.write_all(&chunk).await.map_err(ReadError::Io)?;
        }
        let found = format!("sha256:{}", hex::encode(hasher.finalize()));
        if found != digest {
            return Err(ReadError::Digest(found));
        }
        file.sync_all().await.map_err(ReadError::Io)?;
        tokio::fs::rename(&tmp, path).await.map_err(ReadError::Io)
    }
    .await;
    if written.is_err() {
        let _ = tokio::fs::remove_file(&tmp).await;
    }
    written
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn download_to_file_keeps_only_whole_files_of_the_digest() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("precompiled/sha256/x");
        let chunks = |n: usize| {
            futures::stream::iter(
                (0..n).map(|_| Ok::<_, std::io::Error>(bytes::Bytes::from_static(&[7; 100]))),
            )
        };
        let digest = sha256_digest(&[7; 300]);
        download_to_file(chunks(3), 300, &digest, &path)
            .await
            .expect("downloaded");
        assert_eq!(std::fs::read(&path).expect("read"), vec![7; 300]);
        std::fs::remove_file(&path).expect("rm");
        let wrong = download_to_file(chunks(2), 300, &digest, &path).await;
        assert!(matches!(wrong, Err(ReadError::Digest(_))), "{wrong:?}");
        let large = download_to_file(chunks(1_000), 250, &digest, &path).await;
        assert!(matches!(large, Err(ReadError::TooLarge(300))), "{large:?}");
        let left: Vec<_> = std::fs::read_dir(path.parent().expect("dir"))
            .expect("list")
            .collect();
        assert!(
            left.is_empty(),
            "nothing kept of a refused download: {left:?}"
        );
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
    fn retries_back_off_doubling_up_to_30s() {
        let backoff = Backoff::new(Duration::from_millis(500), MAX_RETRY_DELAY);
        assert_eq!(backoff.delay(1), Duration::from_millis(500));
        assert_eq!(backoff.delay(3), Duration::from_secs(2));
        assert_eq!(backoff.delay(41), Duration::from_secs(30));
    }
}
