//! Admission benchmark: one validating review of the widgets test plugin
//! (`make test-plugins`), at concurrency 1 and 16, measured two ways:
//! - `call`: `LoadedPlugin::review` in process (a fresh instance from the
//!   pooling allocator, the JSON in and out, the verdict): the plugin's cost;
//!   also for the same plugin written in TypeScript and Python
//!   (`make sdk-plugins`: rows `call-ts`, `call-py`), side by side;
//! - `https`: the webhook server over TLS, one connection per review (a
//!   TLS handshake each: an upper bound; the API server keeps connections
//!   alive).
//!
//! - `convert`: `LoadedPlugin::convert` in process, one Widget from
//!   v1alpha1 to v1 (a ConversionReview of one object, as the API server
//!   sends for a GET): the widgets' conversion builds (`widgets-conversion.wasm`,
//!   `widgets_ts_conversion.wasm`, `widgets_py_conversion.wasm`; rows
//!   `convert`, `convert-ts`, `convert-py`), beside the validating rows.
//!
//! - `fanout`, `fanout-ts`: the seed test-fanout's validating webhook on a
//!   Test create (its image parsed as an image reference: oci-spec's
//!   regex, built again in each fresh instance), Rust and the TypeScript
//!   port (`make plugins`, `make sdk-plugins`), beside widgets' `call`.
//!
//! Prints reviews per second and p50/p99 latency per row.
//!
//! ```text
//! cargo bench -p rekon-host --bench admission
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rekon::admission::{WebhookConfig, WebhookServer, review};
use rekon::plugin::{AdmissionKind, NoReads, PluginRegistry, PluginRuntime, RuntimeConfig};
use rekon::telemetry::metrics::Metrics;
use rekon::telemetry::serving_cert::ServingCert;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const REVIEWS: usize = 2_000;

/// The component at `dist/<file>`, built by `make <target>`.
fn widgets(file: &str, target: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../dist")
        .join(file);
    assert!(
        path.is_file(),
        "{} is missing: run `make {target}`",
        path.display()
    );
    path
}

/// A registry with the widgets component `file` loaded (from the directory
/// returned with it).
fn load(runtime: &PluginRuntime, file: &str, target: &str) -> (tempfile::TempDir, PluginRegistry) {
    load_as(runtime, file, target, "widgets.wasm")
}

/// [`load`] with the component copied in as `name`.
fn load_as(
    runtime: &PluginRuntime,
    file: &str,
    target: &str,
    name: &str,
) -> (tempfile::TempDir, PluginRegistry) {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::copy(widgets(file, target), dir.path().join(name)).expect("copy");
    let registry = PluginRegistry::new(runtime.clone());
    registry.load_dir(dir.path()).expect("the plugin loads");
    (dir, registry)
}

/// A review of a Test's create (an untagged image, no clusters named: the
/// parse alone, no read).
fn test_body() -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "job.lailin.xyz", "version": "v1", "kind": "Test"},
            "resource": {"group": "job.lailin.xyz", "version": "v1", "resource": "tests"},
            "name": "t", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": {"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                       "metadata": {"name": "t", "namespace": "default"},
                       "spec": {"image": "registry.example.com/team/app:v1"}},
            "dryRun": false
        }
    })
}

fn body(size: i64) -> Value {
    json!({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "widgets.rekon.dev", "version": "v1", "kind": "Widget"},
            "resource": {"group": "widgets.rekon.dev", "version": "v1", "resource": "widgets"},
            "name": "w", "namespace": "default", "operation": "CREATE",
            "userInfo": {"username": "bench"},
            "object": {"apiVersion": "widgets.rekon.dev/v1", "kind": "Widget",
                       "metadata": {"name": "w", "namespace": "default"}, "spec": {"size": size}},
            "dryRun": false
        }
    })
}

fn row(name: &str, concurrency: usize, elapsed: Duration, mut latencies: Vec<Duration>) {
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() as f64 * q) as usize).min(latencies.len() - 1)];
    println!(
        "| {name:<10} | {concurrency:>2} | {:>8.0} | {:>8.2} | {:>8.2} |",
        latencies.len() as f64 / elapsed.as_secs_f64(),
        at(0.50).as_secs_f64() * 1e3,
        at(0.99).as_secs_f64() * 1e3,
    );
}

async fn post(addr: SocketAddr, connector: &tokio_rustls::TlsConnector, body: &str) {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    let name = rustls::pki_types::ServerName::try_from("localhost").expect("name");
    let mut tls = connector.connect(name, tcp).await.expect("handshake");
    let request = format!(
        "POST /validate/widgets HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    tls.write_all(request.as_bytes()).await.expect("write");
    let mut raw = Vec::new();
    let _ = tls.read_to_end(&mut raw).await;
    assert!(
        raw.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&raw)
    );
}

/// Rows of `name` at concurrency 1 and 16: `REVIEWS` calls of `call`.
async fn measure<F, Fut>(name: &str, call: F)
where
    F: Fn() -> Fut + Clone + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    for concurrency in [1, 16] {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let call = call.clone();
            tasks.spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..REVIEWS / concurrency {
                    let t = Instant::now();
                    call().await;
                    latencies.push(t.elapsed());
                }
                latencies
            });
        }
        let latencies = tasks.join_all().await.concat();
        row(name, concurrency, started.elapsed(), latencies);
    }
}

async fn run() {
    let metrics = Metrics::new();
    let runtime = PluginRuntime::new(RuntimeConfig {
        metrics: metrics.clone(),
        ..RuntimeConfig::default()
    })
    .expect("runtime starts");
    let request = review::parse(body(3).to_string().as_bytes()).expect("review");
    let reviewed = review::to_review(&request, "main");

    println!("| path       |  c | reviews/s | p50 ms | p99 ms |");
    println!("|---|---|---|---|---|");
    let rows = [
        ("call", "test-plugins/widgets.wasm", "test-plugins"),
        ("call-ts", "sdk-plugins/widgets_ts.wasm", "sdk-plugins"),
        ("call-py", "sdk-plugins/widgets_py.wasm", "sdk-plugins"),
    ];
    let mut registry = None;
    for (name, file, target) in rows {
        let (dir, loaded) = load(&runtime, file, target);
        let plugin = loaded.get("widgets").expect("widgets");
        registry.get_or_insert((dir, loaded));
        let reviewed = reviewed.clone();
        measure(name, move || {
            let (plugin, reviewed) = (plugin.clone(), reviewed.clone());
            async move {
                plugin
                    .review(AdmissionKind::Validate, reviewed, Arc::new(NoReads))
                    .await
                    .expect("reviewed");
            }
        })
        .await;
    }
    let test_review = review::to_review(
        &review::parse(test_body().to_string().as_bytes()).expect("review"),
        "main",
    );
    for (name, file, target) in [
        ("fanout", "plugins/test_fanout.wasm", "plugins"),
        (
            "fanout-ts",
            "sdk-plugins/test_fanout_ts.wasm",
            "sdk-plugins",
        ),
    ] {
        let (_dir, loaded) = load_as(&runtime, file, target, "test_fanout.wasm");
        let plugin = loaded.get("test-fanout").expect("test-fanout");
        // The path measured is the one that admits (the whole parse).
        match plugin
            .review(
                AdmissionKind::Validate,
                test_review.clone(),
                Arc::new(NoReads),
            )
            .await
            .expect("reviewed")
        {
            rekon::plugin::Answer::Validated(v) => assert!(v.denied.is_none(), "{name}: {v:?}"),
            other => panic!("{name}: {other:?}"),
        }
        let reviewed = test_review.clone();
        measure(name, move || {
            let (plugin, reviewed) = (plugin.clone(), reviewed.clone());
            async move {
                plugin
                    .review(AdmissionKind::Validate, reviewed, Arc::new(NoReads))
                    .await
                    .expect("reviewed");
            }
        })
        .await;
    }
    let old = json!({"apiVersion": "widgets.rekon.dev/v1alpha1", "kind": "Widget",
                     "metadata": {"name": "w", "namespace": "default", "uid": "u-1"},
                     "spec": {"amount": 3}})
    .to_string();
    let conversions = [
        (
            "convert",
            "test-plugins/widgets-conversion.wasm",
            "test-plugins",
        ),
        (
            "convert-ts",
            "sdk-plugins/widgets_ts_conversion.wasm",
            "sdk-plugins",
        ),
        (
            "convert-py",
            "sdk-plugins/widgets_py_conversion.wasm",
            "sdk-plugins",
        ),
    ];
    for (name, file, target) in conversions {
        let (_dir, loaded) = load(&runtime, file, target);
        let plugin = loaded.get("widgets").expect("widgets");
        let old = old.clone();
        measure(name, move || {
            let (plugin, old) = (plugin.clone(), old.clone());
            async move {
                let converted = plugin
                    .convert(old, "widgets.rekon.dev/v1".into(), Arc::new(NoReads))
                    .await
                    .expect("called");
                assert!(converted.is_ok(), "{converted:?}");
            }
        })
        .await;
    }
    let (_dir, registry) = registry.expect("the Rust build loaded");

    let cert = ServingCert::self_signed(vec!["localhost".into()]).expect("cert");
    let anchor = cert.chain()[0].clone();
    let server = WebhookServer::bind(
        WebhookConfig {
            addr: "127.0.0.1:0".parse().expect("addr"),
            cluster: "main".into(),
        },
        Arc::new(cert),
        Arc::new(registry.clone()),
        metrics,
    )
    .await
    .expect("binds");
    let addr = server.local_addr();
    tokio::spawn(server.run(std::future::pending()));
    let mut roots = rustls::RootCertStore::empty();
    roots.add(anchor).expect("anchor");
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .expect("tls")
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let text = Arc::new(body(3).to_string());
    for concurrency in [1, 16] {
        let started = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..concurrency {
            let (connector, text) = (connector.clone(), text.clone());
            tasks.spawn(async move {
                let mut latencies = Vec::new();
                for _ in 0..REVIEWS / concurrency {
                    let t = Instant::now();
                    post(addr, &connector, &text).await;
                    latencies.push(t.elapsed());
                }
                latencies
            });
        }
        let latencies = tasks.join_all().await.concat();
        row("https", concurrency, started.elapsed(), latencies);
    }
}

fn main() {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("runtime")
        .block_on(run());
}
