//! Shared helpers of the plugin runtime tests: locating the test plugin
//! files (built by `make plugins`), a fake cache, small WAT components.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rekon::action::{ClusterHealth, ClusterInfo, Request, Resource};
use rekon::plugin::{HostReads, PluginRuntime, ReadError, RuntimeConfig};

/// `dist/test-plugins/<name>` (or `$REKON_TEST_PLUGINS/<name>`), built by
/// `make plugins`. Panics with instructions when missing: tests never build
/// plugins themselves.
pub fn test_plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("REKON_TEST_PLUGINS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/test-plugins"),
        PathBuf::from,
    );
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "test plugin {} is missing: run `make plugins` first \
         (it builds tests/plugins/chaos for wasm32-wasip2 into dist/test-plugins/)",
        path.display()
    );
    path.canonicalize().expect("test plugin path resolves")
}

/// chaos built without features (version 1.0.0, annotation `v1`).
pub fn chaos_v1() -> PathBuf {
    test_plugin("chaos-v1.wasm")
}

/// chaos built with `--features v2` (version 2.0.0, annotation `v2`).
pub fn chaos_v2() -> PathBuf {
    test_plugin("chaos-v2.wasm")
}

/// chaos built with `--features broken-register`.
pub fn chaos_broken_register() -> PathBuf {
    test_plugin("chaos-broken-register.wasm")
}

/// What chaos's `register` fails with under `broken-register`.
pub const REGISTER_FAILURE: &str = "chaos plugin refusing to register on purpose";
/// Chaos's panic message.
pub const PANIC_MESSAGE: &str = "chaos plugin panicking on purpose";
/// The annotation chaos's `ok` mode patches.
pub const ANNOTATION: &str = "chaos.rekon.dev/version";

/// A runtime for tests: short call timeout, small memory cap, no pool (tests
/// run in parallel processes) unless asked.
pub fn runtime(cache_dir: Option<PathBuf>) -> PluginRuntime {
    PluginRuntime::new(RuntimeConfig {
        cache_dir,
        memory_limit_bytes: 32 << 20,
        call_timeout: Duration::from_millis(500),
        max_concurrent_instances: 8,
        ..RuntimeConfig::default()
    })
    .expect("runtime starts")
}

/// A cache holding ConfigMaps, in clusters `main` (primary) and `sub`.
#[derive(Default)]
pub struct FakeCache {
    pub objects: HashMap<(String, String, String), String>,
}

impl FakeCache {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// With ConfigMap `namespace/name` in `cluster` carrying `data`.
    pub fn with_config_map(cluster: &str, namespace: &str, name: &str, mode: &str) -> Arc<Self> {
        let mut cache = Self::default();
        let object = serde_json::json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": namespace, "resourceVersion": "1"},
            "data": {"mode": mode},
        });
        cache.objects.insert(
            (cluster.to_string(), namespace.to_string(), name.to_string()),
            object.to_string(),
        );
        Arc::new(cache)
    }
}

impl HostReads for FakeCache {
    fn get(
        &self,
        cluster: &str,
        resource: &Resource,
        namespace: Option<&str>,
        name: &str,
    ) -> Result<Option<String>, ReadError> {
        if resource.kind != "ConfigMap" {
            return Err(ReadError::NotWatched(format!(
                "{} is not watched",
                resource.kind
            )));
        }
        if cluster != "main" && cluster != "sub" {
            return Err(ReadError::UnknownCluster(cluster.to_string()));
        }
        Ok(self
            .objects
            .get(&(
                cluster.to_string(),
                namespace.unwrap_or_default().to_string(),
                name.to_string(),
            ))
            .cloned())
    }

    fn list(
        &self,
        _cluster: &str,
        resource: &Resource,
        _namespace: Option<&str>,
        _label_selector: Option<&str>,
    ) -> Result<Vec<String>, ReadError> {
        Err(ReadError::NotWatched(format!(
            "{} is not listed",
            resource.kind
        )))
    }

    fn clusters(&self) -> Vec<ClusterInfo> {
        vec![
            ClusterInfo {
                name: "main".into(),
                primary: true,
                health: ClusterHealth::Ready,
            },
            ClusterInfo {
                name: "sub".into(),
                primary: false,
                health: ClusterHealth::Ready,
            },
        ]
    }
}

/// A request for ConfigMap `default/<name>` in cluster `main`.
pub fn request(name: &str) -> Request {
    Request {
        cluster: "main".into(),
        namespace: Some("default".into()),
        name: name.into(),
    }
}

/// A component that exports `rekon:plugin/guest@<version>` as an empty
/// instance (right name, nothing in it).
pub fn component_exporting_guest(version: &str) -> Vec<u8> {
    wat::parse_str(format!(
        r#"(component
             (instance $guest)
             (export "rekon:plugin/guest@{version}" (instance $guest)))"#
    ))
    .expect("valid WAT")
}

/// A component of another world: exports a function `run`.
pub fn component_of_other_world() -> Vec<u8> {
    wat::parse_str(
        r#"(component
             (core module $m (func (export "run")))
             (core instance $i (instantiate $m))
             (func $run (canon lift (core func $i "run")))
             (export "run" (func $run)))"#,
    )
    .expect("valid WAT")
}

/// A core module (not a component).
pub fn core_module() -> Vec<u8> {
    wat::parse_str(r#"(module (func (export "register")))"#).expect("valid WAT")
}

/// The host's webhook server on a free local port, serving `registry`'s
/// plugins with `cert`, run until the returned sender is dropped or used.
pub async fn serve_webhooks(
    cert: rekon::telemetry::serving_cert::ServingCert,
    registry: &rekon::plugin::PluginRegistry,
    metrics: &rekon::telemetry::metrics::Metrics,
) -> (std::net::SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let server = rekon::admission::WebhookServer::bind(
        rekon::admission::WebhookConfig {
            addr: "127.0.0.1:0".parse().unwrap(),
            cluster: "main".into(),
        },
        Arc::new(cert),
        Arc::new(registry.clone()),
        metrics.clone(),
    )
    .await
    .expect("server binds");
    let addr = server.local_addr();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(server.run(async move {
        let _ = stopped.await;
    }));
    (addr, stop)
}
