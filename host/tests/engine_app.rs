//! `rekon run` as a library (Config → App::build → App::run(shutdown)) with
//! a real WASM plugin (tests/plugins/chaos, built by `make plugins` into
//! dist/test-plugins/): reconciles through the component, a hot swap of the
//! file requeues every primary on the new version, and shutdown is graceful.

mod engine_support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use engine_support::{TEST_TIMEOUT, eventually, init_tracing};
use rekon::app::{App, Config};
use rekon::writer::WriterConfig;
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(30);
const ANNOTATION: &str = "chaos.rekon.dev~1version";

fn test_plugin(name: &str) -> PathBuf {
    let dir = std::env::var_os("REKON_TEST_PLUGINS").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/test-plugins"),
        PathBuf::from,
    );
    let path = dir.join(name);
    assert!(
        path.is_file(),
        "test plugin {} is missing: run `make plugins` first",
        path.display()
    );
    path
}

fn replace_atomically(path: &Path, bytes: &[u8]) {
    let tmp = path.with_extension("wasm.part");
    std::fs::write(&tmp, bytes).expect("write plugin");
    std::fs::rename(&tmp, path).expect("rename plugin");
}

fn mark(sim: &kube_sim::SimCluster, name: &str) -> Option<String> {
    sim.get("v1", "configmaps", Some("default"), name)
        .ok()?
        .pointer(&format!("/metadata/annotations/{ANNOTATION}"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rekon_run_reconciles_through_wasm_and_hot_swaps_the_plugin() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        init_tracing();
        let sim = kube_sim::Sim::start(&["main", "sub"]).await?;
        let plugins = tempfile::tempdir()?;
        let file = plugins.path().join("chaos.wasm");
        std::fs::copy(test_plugin("chaos-v1.wasm"), &file)?;
        let config = Config {
            kubeconfig: Some(sim.kubeconfig_path().to_path_buf()),
            context: Some("main".into()),
            clusters: vec![("sub".into(), "sub".into())],
            sync_timeout: Duration::from_secs(3),
            probe_interval: Duration::from_millis(200),
            writer: WriterConfig {
                request_timeout: Duration::from_secs(2),
                ..WriterConfig::default()
            },
            ..Config::new(plugins.path())
        };
        let app = App::build(config).await?;
        assert_eq!(app.clusters().names(), vec!["main".to_owned(), "sub".to_owned()]);
        let manager = app.manager().clone();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let running = tokio::spawn(app.run(async move {
            let _ = stopped.await;
        }));

        let main = sim.cluster("main");
        for name in ["a", "b"] {
            main.create(
                "v1",
                "configmaps",
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"mode": "ok"}}),
            )?;
        }
        eventually("v1 reconciles every primary", WAIT, || async {
            mark(main, "a").as_deref() == Some("v1") && mark(main, "b").as_deref() == Some("v1")
        })
        .await?;
        assert_eq!(manager.plugins(), vec!["chaos".to_owned()]);

        // Hot swap: nothing about the objects changes, yet every primary is
        // reconciled again, by the new version.
        replace_atomically(&file, &std::fs::read(test_plugin("chaos-v2.wasm"))?);
        eventually("v2 reconciles every primary after the swap", WAIT, || async {
            mark(main, "a").as_deref() == Some("v2") && mark(main, "b").as_deref() == Some("v2")
        })
        .await?;

        // Removing the file stops the controller.
        std::fs::remove_file(&file)?;
        eventually("controller stopped", WAIT, || async { manager.plugins().is_empty() }).await?;

        let _ = stop.send(());
        running.await??;
        sim.shutdown().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test]
async fn a_config_without_a_plugin_source_is_refused_before_connecting() {
    // No cluster either: the check comes first, naming both sources.
    let built = tokio::time::timeout(TEST_TIMEOUT, App::build(Config::default()))
        .await
        .expect("test timed out: likely deadlocked");
    let error = built.expect_err("nothing to serve");
    assert!(
        matches!(error, rekon::app::AppError::NoPluginSource),
        "{error}"
    );
    let message = error.to_string();
    assert!(
        message.contains("--plugins DIR") && message.contains("--plugin-objects"),
        "{message}"
    );
}
