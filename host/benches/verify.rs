//! Verification bench: what checking a module's signatures adds to a cold
//! pull and to a cached start of a Plugin object's module, unverified and
//! verified side by side. Each sample goes through the OCI fetcher as the
//! Plugin-object source uses it (`ModuleSource::fetch`, then
//! `ModuleSource::verify` with a one-key policy, as
//! `source/plugin_objects/reconcile.rs` does):
//! - cold pull: an empty cache, the module by tag (manifest + layer), then
//!   the signatures read from the registry (signature manifest + payload);
//! - cold pull of a pinned digest (`spec.digest`): the signatures read
//!   while the module downloads;
//! - cached start: a new fetcher on a warm cache (as after a restart), the
//!   module by digest, then the verification record read from the cache.
//!
//! Needs Debian's `docker-registry` (`$REKON_DOCKER_REGISTRY`) and `make
//! test-plugins` (the chaos plugin); fails, never skips, without them.
//!
//! ```text
//! cargo bench -p rekon-host --bench verify
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rekon::source::oci::{Fetcher, OciConfig, RegistryAuth};
use rekon::source::plugin_objects::{FetchRequest, ModuleSource, VerifyRequest};
use rekon::source::signature::{self, KeyAlgorithm, Policy, SigningKey};

const SAMPLES: usize = 25;

/// A docker-registry on a free loopback port; killed on drop.
struct Registry {
    child: Child,
    host: String,
    _dir: tempfile::TempDir,
}

impl Drop for Registry {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn registry() -> anyhow::Result<Registry> {
    let dir = tempfile::tempdir()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let host = format!("127.0.0.1:{port}");
    let config = dir.path().join("config.yml");
    std::fs::write(
        &config,
        format!(
            "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\nhttp:\n  addr: {host}\n",
            dir.path().join("storage").display()
        ),
    )?;
    let binary = std::env::var_os("REKON_DOCKER_REGISTRY")
        .map_or_else(|| PathBuf::from("docker-registry"), PathBuf::from);
    let child = Command::new(&binary)
        .arg("serve")
        .arg(&config)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| {
            format!(
                "failed to start {} (apt-get install docker-registry)",
                binary.display()
            )
        })?;
    let registry = Registry {
        child,
        host,
        _dir: dir,
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(&registry.host).is_err() {
        if Instant::now() > deadline {
            bail!(
                "docker-registry did not listen on {} within 20 s",
                registry.host
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(registry)
}

fn fetcher(cache: &Path) -> Fetcher {
    Fetcher::new(OciConfig {
        cache_dir: Some(cache.to_path_buf()),
        retries: 0,
        ..OciConfig::default()
    })
}

/// One Plugin-object fetch (and verification under `policy`); its time.
/// With a pinned `digest` and `parallel`, the signatures are read while
/// the module downloads, as `reconcile.rs` does for a pinned spec.
async fn sample(
    cache: &Path,
    reference: &str,
    digest: Option<&str>,
    policy: Option<&Arc<Policy>>,
    parallel: bool,
) -> anyhow::Result<Duration> {
    let source = fetcher(cache);
    let started = Instant::now();
    let fetch = ModuleSource::fetch(
        &source,
        FetchRequest {
            reference: reference.to_owned(),
            digest: digest.map(str::to_owned),
            always: false,
            docker_config: None,
        },
    );
    let verify = |digest: String, policy: &Arc<Policy>| {
        source.verify(VerifyRequest {
            reference: reference.to_owned(),
            digest,
            policy: Arc::clone(policy),
            docker_config: None,
            always: false,
        })
    };
    match (policy, digest) {
        (Some(policy), Some(digest)) if parallel => {
            let (module, verified) = tokio::join!(fetch, verify(digest.to_owned(), policy));
            module?;
            verified?;
        }
        (Some(policy), _) => {
            let module = fetch.await?;
            verify(module.digest, policy).await?;
        }
        (None, _) => {
            fetch.await?;
        }
    }
    Ok(started.elapsed())
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.2}", d.as_secs_f64() * 1000.0)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> anyhow::Result<()> {
    let module =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/test-plugins/chaos-v1.wasm");
    let bytes = std::fs::read(&module)
        .with_context(|| format!("{} is missing: run `make test-plugins`", module.display()))?;
    let registry = registry()?;
    let reference = format!("{}/bench/chaos:1", registry.host);
    let publisher = fetcher(tempfile::tempdir()?.path());
    let digest = publisher
        .push(
            &bytes,
            &reference,
            &RegistryAuth::Anonymous,
            BTreeMap::new(),
        )
        .await?;
    let key = SigningKey::generate(KeyAlgorithm::EcdsaP256)?;
    signature::sign(
        &publisher,
        &reference,
        &key,
        &BTreeMap::new(),
        &RegistryAuth::Anonymous,
    )
    .await?;
    let policy = Arc::new(Policy::keys([("bench".to_owned(), key.public_key())]));

    let mut rows = Vec::new();
    let cases = [
        ("cold pull (by tag)", false, false, false),
        ("cold pull (pinned digest)", false, true, true),
        ("cached start (by digest)", true, true, false),
    ];
    for (what, warm, by_digest, parallel) in cases {
        let mut times = [Vec::new(), Vec::new()];
        let warm_dir = tempfile::tempdir()?;
        if warm {
            // Pulled and verified once, as before a restart.
            sample(warm_dir.path(), &reference, None, Some(&policy), false).await?;
        }
        for i in 0..SAMPLES * 2 {
            let verified = i % 2 == 1;
            let cold = tempfile::tempdir()?;
            let cache = if warm { warm_dir.path() } else { cold.path() };
            let pinned = by_digest.then_some(digest.as_str());
            let policy = verified.then_some(&policy);
            let took = sample(cache, &reference, pinned, policy, parallel).await?;
            times[usize::from(verified)].push(took);
        }
        let [plain, checked] = times.map(median);
        rows.push(format!(
            "| {what:<26} | {:>10} | {:>8} | {:>9} |",
            ms(plain),
            ms(checked),
            ms(checked.saturating_sub(plain))
        ));
    }
    println!(
        "verification cost, median of {SAMPLES} samples each, ms (module {} KiB, ECDSA P-256, docker-registry on loopback)",
        bytes.len() / 1024
    );
    println!(
        "| {:<26} | {:>10} | {:>8} | {:>9} |",
        "", "unverified", "verified", "added"
    );
    println!(
        "|{}|{}|{}|{}|",
        "-".repeat(28),
        "-".repeat(12),
        "-".repeat(10),
        "-".repeat(11)
    );
    for row in rows {
        println!("{row}");
    }
    Ok(())
}
