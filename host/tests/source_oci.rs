//! Plugins from OCI registries, against a real registry: Docker
//! Distribution 2.8 (`docker-registry serve CONFIG`, the Debian package) on
//! a free loopback port, with a temporary storage directory and deletes
//! enabled. The pushed artifact is checked with an independent tool,
//! `skopeo inspect --raw`. Both are installed by `.ci/run`; a test fails
//! (never skips) when either is missing.
//!
//! The plugin is `dist/test-plugins/chaos-v1.wasm` (`make test-plugins`).

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use anyhow::{Context, bail, ensure};
use rekon::source::oci::{
    FetchError, Fetcher, OciConfig, PullPolicy, RegistryAuth, WASM_CONFIG_MEDIA_TYPE,
    WASM_LAYER_MEDIA_TYPE,
};
use rekon::telemetry::metrics::Metrics;
use sha2::{Digest, Sha256};

const TEST_TIMEOUT: Duration = Duration::from_secs(120);
const REGISTRY_BIN: &str = "docker-registry";

/// A `docker-registry` process on a loopback port; killed on drop.
struct Registry {
    child: Option<Child>,
    port: u16,
    storage: PathBuf,
    _dir: tempfile::TempDir,
}

impl Registry {
    fn start() -> anyhow::Result<Self> {
        let dir = tempfile::tempdir()?;
        let storage = dir.path().join("storage");
        let port = free_port()?;
        let config = dir.path().join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\n\
                 log:\n  level: warn\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                storage.display()
            ),
        )?;
        let child = Command::new(REGISTRY_BIN)
            .arg("serve")
            .arg(&config)
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("registry.log"))?)
            .spawn()
            .with_context(|| {
                format!(
                    "failed to start `{REGISTRY_BIN}` (Docker Distribution 2.8): install it \
                     with `apt-get install docker-registry` (.ci/run does)"
                )
            })?;
        let mut registry = Self {
            child: Some(child),
            port,
            storage,
            _dir: dir,
        };
        registry.wait_ready()?;
        Ok(registry)
    }

    /// Polls `GET /v2/` until it answers 200.
    fn wait_ready(&mut self) -> anyhow::Result<()> {
        use std::io::{Read, Write};
        for _ in 0..100 {
            if let Some(child) = self.child.as_mut()
                && let Some(status) = child.try_wait()?
            {
                bail!("{REGISTRY_BIN} exited at start-up: {status}");
            }
            if let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", self.port)) {
                s.set_read_timeout(Some(Duration::from_secs(2)))?;
                write!(
                    s,
                    "GET /v2/ HTTP/1.0\r\nHost: 127.0.0.1:{}\r\n\r\n",
                    self.port
                )?;
                let mut answer = String::new();
                let _ = s.read_to_string(&mut answer);
                if answer.starts_with("HTTP/1.0 200") || answer.starts_with("HTTP/1.1 200") {
                    return Ok(());
                }
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        bail!("{REGISTRY_BIN} did not become ready on port {}", self.port)
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn reference(&self, repo_tag: &str) -> String {
        format!("{}/{repo_tag}", self.host())
    }

    /// Stops the registry (the port then refuses connections).
    fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// The registry's file for blob `digest` (filesystem driver layout).
    fn blob_file(&self, digest: &str) -> PathBuf {
        let hex = digest.trim_start_matches("sha256:");
        self.storage
            .join("docker/registry/v2/blobs/sha256")
            .join(&hex[..2])
            .join(hex)
            .join("data")
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.stop();
    }
}

fn free_port() -> anyhow::Result<u16> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("bind a free port")?;
    Ok(listener.local_addr()?.port())
}

fn chaos() -> Vec<u8> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/test-plugins/chaos-v1.wasm");
    std::fs::read(&path).unwrap_or_else(|e| {
        panic!(
            "test plugin {} is missing ({e}): run `make test-plugins` first",
            path.display()
        )
    })
}

fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(bytes)))
}

/// `skopeo` with `args`; fails the test when skopeo is missing or fails.
fn skopeo(args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let out = Command::new("skopeo").args(args).output().with_context(
        || "failed to run `skopeo`: install it with `apt-get install skopeo` (.ci/run does)",
    )?;
    ensure!(
        out.status.success(),
        "skopeo {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out.stdout)
}

fn config(cache: Option<&Path>) -> OciConfig {
    OciConfig {
        cache_dir: cache.map(Path::to_path_buf),
        timeout: Duration::from_secs(10),
        retries: 1,
        backoff: Duration::from_millis(50),
        ..OciConfig::default()
    }
}

async fn push(fetcher: &Fetcher, bytes: &[u8], reference: &str) -> anyhow::Result<String> {
    Ok(fetcher
        .push(
            bytes,
            reference,
            &RegistryAuth::Anonymous,
            Default::default(),
        )
        .await?)
}

const ANON: &RegistryAuth = &RegistryAuth::Anonymous;

async fn within<F: std::future::Future<Output = anyhow::Result<()>>>(f: F) -> anyhow::Result<()> {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .context("test timed out (likely deadlocked)")?
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn push_is_a_wasm_artifact_skopeo_reads_and_fetch_by_tag_and_digest_verifies_it()
-> anyhow::Result<()> {
    within(async {
        let registry = Registry::start()?;
        let cache = tempfile::tempdir()?;
        let metrics = Metrics::new();
        let fetcher = Fetcher::new(config(Some(cache.path()))).with_metrics(metrics.clone());
        let bytes = chaos();
        let reference = registry.reference("rekon/chaos:v1");
        let digest = push(&fetcher, &bytes, &reference).await?;

        // An independent client sees the CNCF wasm layout, and the manifest
        // it reads hashes to the digest push returned.
        let docker = format!("docker://{reference}");
        let raw = skopeo(&["inspect", "--raw", "--tls-verify=false", &docker])?;
        assert_eq!(sha256(&raw), digest, "manifest digest as skopeo reads it");
        let manifest: serde_json::Value = serde_json::from_slice(&raw)?;
        assert_eq!(manifest["config"]["mediaType"], WASM_CONFIG_MEDIA_TYPE);
        assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
        assert_eq!(manifest["layers"][0]["mediaType"], WASM_LAYER_MEDIA_TYPE);
        assert_eq!(manifest["layers"][0]["digest"], sha256(&bytes).as_str());
        assert_eq!(manifest["layers"][0]["size"], bytes.len());
        let config_raw = skopeo(&[
            "inspect",
            "--raw",
            "--config",
            "--tls-verify=false",
            &docker,
        ])?;
        let wasm_config: serde_json::Value = serde_json::from_slice(&config_raw)?;
        assert_eq!(wasm_config["architecture"], "wasm");
        assert_eq!(wasm_config["os"], "wasip2");
        assert_eq!(wasm_config["layerDigests"][0], sha256(&bytes).as_str());
        let exports = wasm_config["component"]["exports"].to_string();
        assert!(exports.contains("rekon:plugin/guest@"), "{exports}");

        // By tag: pulled, verified, the same bytes; the component loads.
        let by_tag = fetcher
            .fetch(&reference, None, PullPolicy::IfNotPresent, ANON)
            .await?;
        assert_eq!(by_tag.manifest_digest, digest);
        assert_eq!(by_tag.layer_digest, sha256(&bytes));
        assert_eq!(&*by_tag.bytes, bytes.as_slice());
        assert!(!by_tag.from_cache);
        assert_eq!(
            by_tag.pinned,
            format!("{}/rekon/chaos@{digest}", registry.host())
        );
        let runtime = rekon::plugin::PluginRuntime::new(rekon::plugin::RuntimeConfig {
            pooling: false,
            ..Default::default()
        })?;
        let plugin = runtime.load_bytes(&by_tag.bytes, &by_tag.pinned)?;
        assert_eq!(plugin.registration().name, "chaos");

        // By digest, and by tag with the digest expected: both agree.
        let by_digest = fetcher
            .fetch(&by_tag.pinned, None, PullPolicy::Always, ANON)
            .await?;
        assert_eq!(by_digest.manifest_digest, digest);
        assert_eq!(&*by_digest.bytes, bytes.as_slice());
        let expected = fetcher
            .fetch(&reference, Some(&digest), PullPolicy::Always, ANON)
            .await?;
        assert_eq!(expected.manifest_digest, digest);

        // Pinned and cached: answered from disk.
        let cached = fetcher
            .fetch(&by_tag.pinned, None, PullPolicy::IfNotPresent, ANON)
            .await?;
        assert!(cached.from_cache);
        assert_eq!(&*cached.bytes, bytes.as_slice());
        let text = metrics.encode();
        assert!(
            text.contains("rekon_plugin_fetch_total{outcome=\"pulled\"} 1\n"),
            "{text}"
        );
        assert!(
            text.contains("rekon_plugin_fetch_total{outcome=\"cached\"} 3\n"),
            "{text}"
        );
        assert!(
            text.contains("rekon_plugin_fetch_duration_seconds_count 4\n"),
            "{text}"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_expected_digest_is_refused_naming_both() -> anyhow::Result<()> {
    within(async {
        let registry = Registry::start()?;
        let cache = tempfile::tempdir()?;
        let fetcher = Fetcher::new(config(Some(cache.path())));
        let reference = registry.reference("rekon/chaos:v1");
        let digest = push(&fetcher, &chaos(), &reference).await?;
        let wrong = sha256(b"another build");
        let err = fetcher
            .fetch(&reference, Some(&wrong), PullPolicy::IfNotPresent, ANON)
            .await
            .expect_err("a digest other than the expected one");
        assert_eq!(err.reason(), "DigestMismatch", "{err}");
        let message = err.to_string();
        assert!(
            message.contains(&wrong) && message.contains(&digest),
            "{message}"
        );
        assert!(message.contains(&reference), "{message}");
        // Nothing of the refused artifact was cached under the wrong digest.
        let again = fetcher
            .fetch(&reference, Some(&wrong), PullPolicy::IfNotPresent, ANON)
            .await;
        assert!(matches!(again, Err(FetchError::DigestMismatch { .. })));
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_registry_is_unreachable_but_a_pinned_cached_plugin_still_loads()
-> anyhow::Result<()> {
    within(async {
        let mut registry = Registry::start()?;
        let cache = tempfile::tempdir()?;
        let metrics = Metrics::new();
        let fetcher = Fetcher::new(config(Some(cache.path()))).with_metrics(metrics.clone());
        let reference = registry.reference("rekon/chaos:v1");
        push(&fetcher, &chaos(), &reference).await?;
        let pulled = fetcher
            .fetch(&reference, None, PullPolicy::IfNotPresent, ANON)
            .await?;
        registry.stop();

        // A restart (a new fetcher on the same cache) with the registry
        // down: the digest-pinned plugin comes from disk.
        let restarted = Fetcher::new(config(Some(cache.path())));
        let cached = restarted
            .fetch(&pulled.pinned, None, PullPolicy::IfNotPresent, ANON)
            .await?;
        assert!(cached.from_cache);
        assert_eq!(cached.bytes, pulled.bytes);
        let cached = restarted
            .fetch(
                &reference,
                Some(&pulled.manifest_digest),
                PullPolicy::IfNotPresent,
                ANON,
            )
            .await?;
        assert!(cached.from_cache, "a tag with an expected digest is pinned");

        // A tag must be resolved, and Always asks the registry: unreachable.
        for (r, policy) in [
            (&reference, PullPolicy::IfNotPresent),
            (&pulled.pinned, PullPolicy::Always),
        ] {
            let err = fetcher
                .fetch(r, None, policy, ANON)
                .await
                .expect_err("registry is down");
            assert_eq!(err.reason(), "RegistryUnreachable", "{err}");
            assert!(err.is_transient());
            assert!(err.to_string().contains(r.as_str()), "{err}");
        }
        let text = metrics.encode();
        assert!(
            text.contains("rekon_plugin_fetch_total{outcome=\"registry_unreachable\"} 2\n"),
            "{text}"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vanished_tag_and_a_missing_repository_are_not_found() -> anyhow::Result<()> {
    within(async {
        let registry = Registry::start()?;
        let fetcher = Fetcher::new(config(None));
        let reference = registry.reference("rekon/chaos:v1");
        push(&fetcher, &chaos(), &reference).await?;
        fetcher
            .fetch(&reference, None, PullPolicy::Always, ANON)
            .await?;
        // skopeo resolves the tag and deletes the manifest.
        skopeo(&[
            "delete",
            "--tls-verify=false",
            &format!("docker://{reference}"),
        ])?;
        let err = fetcher
            .fetch(&reference, None, PullPolicy::Always, ANON)
            .await
            .expect_err("the tag vanished");
        assert_eq!(err.reason(), "ArtifactNotFound", "{err}");
        assert!(!err.is_transient());
        let missing = registry.reference("rekon/nothing-here:v1");
        let err = fetcher
            .fetch(&missing, None, PullPolicy::Always, ANON)
            .await
            .expect_err("never pushed");
        assert_eq!(err.reason(), "ArtifactNotFound", "{err}");
        assert!(err.to_string().contains(&missing), "{err}");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_that_is_not_wasm_is_refused() -> anyhow::Result<()> {
    within(async {
        use oci_client::client::{Config, ImageLayer};
        let registry = Registry::start()?;
        let fetcher = Fetcher::new(config(None));
        // A container-image-shaped artifact, pushed with the OCI client.
        let reference = registry.reference("rekon/not-wasm:v1");
        let client = oci_client::Client::new(oci_client::client::ClientConfig {
            protocol: oci_client::client::ClientProtocol::Http,
            ..Default::default()
        });
        let layer = ImageLayer::oci_v1(b"not a tarball".to_vec(), None);
        let image_config =
            Config::oci_v1(br#"{"architecture":"amd64","os":"linux"}"#.to_vec(), None);
        client
            .push(
                &reference.parse()?,
                &[layer],
                image_config,
                &oci_client::secrets::RegistryAuth::Anonymous,
                None,
            )
            .await?;
        let err = fetcher
            .fetch(&reference, None, PullPolicy::Always, ANON)
            .await
            .expect_err("not a wasm artifact");
        assert_eq!(err.reason(), "NotAWasmArtifact", "{err}");
        let message = err.to_string();
        assert!(
            message.contains("application/vnd.oci.image.config.v1+json"),
            "{message}"
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_module_over_the_size_limit_is_refused_before_download() -> anyhow::Result<()> {
    within(async {
        let registry = Registry::start()?;
        let reference = registry.reference("rekon/chaos:v1");
        let bytes = chaos();
        push(&Fetcher::new(config(None)), &bytes, &reference).await?;
        let small = Fetcher::new(OciConfig {
            max_module_bytes: 100_000,
            ..config(None)
        });
        let err = small
            .fetch(&reference, None, PullPolicy::Always, ANON)
            .await
            .expect_err("over the limit");
        match &err {
            FetchError::TooLarge { size, limit, .. } => {
                assert_eq!(*size, bytes.len() as u64);
                assert_eq!(*limit, 100_000);
            }
            other => bail!("expected TooLarge, got {other}"),
        }
        assert_eq!(err.reason(), "ModuleTooLarge");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layer_damaged_in_the_registry_and_a_damaged_cache_entry_are_never_served()
-> anyhow::Result<()> {
    within(async {
        let registry = Registry::start()?;
        let cache = tempfile::tempdir()?;
        let fetcher = Fetcher::new(config(Some(cache.path())));
        let reference = registry.reference("rekon/chaos:v1");
        let bytes = chaos();
        push(&fetcher, &bytes, &reference).await?;
        let pulled = fetcher
            .fetch(&reference, None, PullPolicy::Always, ANON)
            .await?;

        // The cached module is damaged: it is not served but pulled again.
        let cached = cache
            .path()
            .join("modules/sha256")
            .join(pulled.layer_digest.trim_start_matches("sha256:"));
        let mut damaged = bytes.clone();
        damaged[1000] ^= 0xff;
        std::fs::write(&cached, &damaged)?;
        let again = fetcher
            .fetch(&pulled.pinned, None, PullPolicy::IfNotPresent, ANON)
            .await?;
        assert!(!again.from_cache, "a damaged cache entry is refetched");
        assert_eq!(&*again.bytes, bytes.as_slice());
        assert_eq!(
            std::fs::read(&cached)?,
            bytes,
            "the cache entry is repaired"
        );

        // The registry's own copy is damaged (same size): the layer digest
        // check refuses it.
        std::fs::remove_file(&cached)?;
        let blob = registry.blob_file(&pulled.layer_digest);
        ensure!(blob.is_file(), "registry blob {} not found", blob.display());
        std::fs::write(&blob, &damaged)?;
        let err = fetcher
            .fetch(&reference, None, PullPolicy::Always, ANON)
            .await
            .expect_err("damaged layer");
        match &err {
            FetchError::DigestMismatch {
                what,
                expected,
                found,
                ..
            } => {
                assert_eq!(*what, "layer");
                assert_eq!(expected, &pulled.layer_digest);
                assert_eq!(found, &sha256(&damaged));
            }
            other => bail!("expected DigestMismatch, got {other}"),
        }
        assert!(!cached.exists(), "nothing damaged was cached");
        Ok(())
    })
    .await
}

/// The CLI: `rekon plugin push FILE REF` prints the digest skopeo sees;
/// `rekon plugin inspect REF` fetches and describes the plugin.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekon_plugin_push_and_inspect_a_reference() -> anyhow::Result<()> {
    within(async {
        let registry = Registry::start()?;
        let reference = registry.reference("rekon/chaos:cli");
        let file =
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/test-plugins/chaos-v1.wasm");
        chaos();
        let rekon = env!("CARGO_BIN_EXE_rekon");
        let run = move |args: &[&str]| -> anyhow::Result<String> {
            let out = Command::new(rekon)
                .args(args)
                .env_remove("REGISTRY_AUTH_FILE")
                .env_remove("DOCKER_CONFIG")
                .env("HOME", "/nonexistent")
                .output()?;
            ensure!(
                out.status.success(),
                "rekon {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            Ok(String::from_utf8(out.stdout)?)
        };
        let file_arg = file.display().to_string();
        let printed = tokio::task::spawn_blocking({
            let reference = reference.clone();
            move || run(&["plugin", "push", &file_arg, &reference])
        })
        .await??;
        let digest = printed.trim().to_string();
        let raw = skopeo(&[
            "inspect",
            "--raw",
            "--tls-verify=false",
            &format!("docker://{reference}"),
        ])?;
        assert_eq!(sha256(&raw), digest);
        let manifest: serde_json::Value = serde_json::from_slice(&raw)?;
        assert_eq!(
            manifest["annotations"]["org.opencontainers.image.title"],
            "chaos"
        );

        let inspected = tokio::task::spawn_blocking({
            let reference = reference.clone();
            move || run(&["plugin", "inspect", &reference, "-o", "json"])
        })
        .await??;
        let report: serde_json::Value = serde_json::from_str(&inspected)?;
        assert_eq!(report["name"], "chaos");
        // inspect reports the component's sha256 as bare hex.
        assert_eq!(
            report["digest"],
            sha256(&chaos()).trim_start_matches("sha256:")
        );
        // The same report as for the file.
        let file_arg = file.display().to_string();
        let from_file = tokio::task::spawn_blocking(move || {
            run(&["plugin", "inspect", &file_arg, "-o", "json"])
        })
        .await??;
        assert_eq!(inspected, from_file);

        // With SOURCE_DATE_EPOCH, pushing the same build again (another
        // tag) gives the same digest.
        let pinned_push = |tag: String| {
            let file_arg = file.display().to_string();
            move || -> anyhow::Result<String> {
                let out = Command::new(rekon)
                    .args(["plugin", "push", &file_arg, &tag])
                    .env("SOURCE_DATE_EPOCH", "1700000000")
                    .env("HOME", "/nonexistent")
                    .output()?;
                ensure!(
                    out.status.success(),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                Ok(String::from_utf8(out.stdout)?.trim().to_string())
            }
        };
        let first =
            tokio::task::spawn_blocking(pinned_push(registry.reference("rekon/chaos:a"))).await??;
        let second =
            tokio::task::spawn_blocking(pinned_push(registry.reference("rekon/chaos:b"))).await??;
        assert_eq!(first, second, "reproducible pushes");

        // A file that is not a plugin is not pushed.
        let bogus = tempfile::NamedTempFile::new()?;
        std::fs::write(bogus.path(), b"not wasm")?;
        let out = Command::new(rekon)
            .args(["plugin", "push"])
            .arg(bogus.path())
            .arg(registry.reference("rekon/bogus:v1"))
            .output()?;
        assert!(!out.status.success());
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("not pushing"), "{stderr}");
        Ok(())
    })
    .await
}
