//! Plugin settings through the real runtime: the seed nodepool (built by
//! `make plugins`) validating its settings in `register`, declaring its
//! schema, reading them in every call; a plugin built for contract 0.3.0
//! (a committed fixture) still loading, and refusing settings it cannot
//! read; a module running as an instance under another name; directory
//! settings files swapping the plugin live.

mod plugin_support;

use std::path::PathBuf;
use std::time::Duration;

use plugin_support::*;
use rekon::plugin::{LoadError, LoadOptions, PluginRegistry, RegistryEvent};
use serde_json::json;

fn nodepool() -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../dist/plugins/nodepool.wasm");
    assert!(
        path.is_file(),
        "run `make plugins` first: {} is missing",
        path.display()
    );
    path
}

/// chaos as built for contract 0.3.0 (before settings), kept as a fixture
/// so that compatibility with already-built plugins stays tested.
fn chaos_0_3_0() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/chaos-contract-0.3.0.wasm")
}

fn load(
    file: &std::path::Path,
    options: &LoadOptions,
) -> Result<rekon::plugin::LoadedPlugin, LoadError> {
    let bytes = std::fs::read(file).unwrap();
    runtime(None).load_bytes_with(&bytes, &file.display().to_string(), options)
}

#[test]
fn a_plugin_validates_its_settings_and_declares_their_schema() {
    let plugin = load(&nodepool(), &LoadOptions::default()).expect("loads without settings");
    assert_eq!(plugin.settings(), None);
    let schema = plugin.settings_schema().expect("schema declared");
    assert!(
        schema["properties"]["defaultHandler"].is_object(),
        "{schema}"
    );

    let given = json!({"defaultHandler": "kata", "poolSelector": "tier=gpu"});
    let plugin = load(
        &nodepool(),
        &LoadOptions::default().with_settings(Some(&given)),
    )
    .expect("valid settings load");
    assert_eq!(
        serde_json::from_str::<serde_json::Value>(plugin.settings().unwrap()).unwrap(),
        given
    );
    // `register` read them: the selector shapes the registration.
    assert_eq!(
        plugin.registration().primary_selector.as_deref(),
        Some("tier=gpu")
    );

    for (bad, reason) in [
        (
            json!({"defaultHandler": "Not A Label"}),
            "is not a DNS label",
        ),
        (
            json!({"defaultHandlr": "x"}),
            "unknown field `defaultHandlr`",
        ),
    ] {
        let err = load(
            &nodepool(),
            &LoadOptions::default().with_settings(Some(&bad)),
        )
        .expect_err("refused");
        assert_eq!(err.reason(), "InvalidSettings", "{err}");
        let LoadError::InvalidSettings { reason: got, .. } = &err else {
            panic!("{err}");
        };
        assert!(got.contains(reason), "{bad}: {got}");
    }
}

#[tokio::test]
async fn a_plugin_built_for_0_3_0_loads_runs_and_refuses_settings() {
    let plugin = load(&chaos_0_3_0(), &LoadOptions::default()).expect("0.3.0 plugin loads");
    assert_eq!(plugin.name(), "chaos");
    assert_eq!(plugin.settings_schema(), None);
    let outcome = plugin
        .reconcile(
            request("ok"),
            rekon::action::Phase::Live,
            FakeCache::new(),
            std::time::SystemTime::now(),
        )
        .await
        .expect("reconciles");
    assert_eq!(outcome.actions.len(), 1);

    let err = load(
        &chaos_0_3_0(),
        &LoadOptions::default().with_settings(Some(&json!({"a": 1}))),
    )
    .expect_err("settings it cannot read are refused");
    assert!(
        matches!(&err, LoadError::InvalidSettings { reason, .. } if reason.contains("cannot read settings")),
        "{err}"
    );
}

#[test]
fn a_module_runs_as_an_instance_under_another_name() {
    let options = LoadOptions::default()
        .with_settings(Some(&json!({"poolSelector": "tier=gpu"})))
        .with_instance(Some("gpu-pools"));
    let plugin = load(&nodepool(), &options).expect("loads as an instance");
    assert_eq!(plugin.name(), "gpu-pools");
    assert_eq!(plugin.registered_as(), "nodepool");
    let reg = plugin.registration();
    assert_eq!(reg.name, "gpu-pools");
    // Two instances never release each other's finalizer.
    assert_eq!(
        reg.finalizer.as_deref(),
        Some("nodes.lailin.xyz/cleanup.gpu-pools")
    );
    let same = load(
        &nodepool(),
        &LoadOptions::default().with_instance(Some("nodepool")),
    )
    .unwrap();
    assert_eq!(
        same.registration().finalizer.as_deref(),
        Some("nodes.lailin.xyz/cleanup")
    );
}

#[tokio::test]
async fn a_settings_file_beside_a_plugin_file_is_a_live_swap() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(nodepool(), dir.path().join("nodepool.wasm")).unwrap();
    let registry = PluginRegistry::with_debounce(runtime(None), Duration::from_millis(100));
    let mut events = registry.subscribe();
    registry.load_dir(dir.path()).unwrap();
    assert!(registry.get("nodepool").unwrap().settings().is_none());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = {
        let registry = registry.clone();
        let dir = dir.path().to_path_buf();
        tokio::spawn(async move {
            registry
                .watch_dir(dir, async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    let next = |events: &mut tokio::sync::broadcast::Receiver<RegistryEvent>| {
        let mut events = events.resubscribe();
        async move {
            tokio::time::timeout(Duration::from_secs(60), async {
                loop {
                    match events.recv().await.unwrap() {
                        RegistryEvent::Loaded(_) => {}
                        other => return other,
                    }
                }
            })
            .await
            .expect("a registry event")
        }
    };
    let wait = next(&mut events);
    std::fs::write(
        dir.path().join("nodepool.settings.json"),
        r#"{"defaultHandler": "kata"}"#,
    )
    .unwrap();
    match wait.await {
        RegistryEvent::Replaced { new, .. } => {
            assert_eq!(new.settings(), Some(r#"{"defaultHandler":"kata"}"#));
        }
        other => panic!("expected a swap, got {other:?}"),
    }
    // Invalid settings: refused, the serving version (with kata) stays.
    let wait = next(&mut events);
    std::fs::write(
        dir.path().join("nodepool.settings.json"),
        r#"{"defaultHandler": "KATA"}"#,
    )
    .unwrap();
    match wait.await {
        RegistryEvent::Failed { error, .. } => {
            assert!(error.contains("is not a DNS label"), "{error}")
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    assert_eq!(
        registry.get("nodepool").unwrap().settings(),
        Some(r#"{"defaultHandler":"kata"}"#)
    );
    let status = registry.status();
    assert!(
        status[0]
            .error
            .as_deref()
            .unwrap()
            .contains("refused its settings"),
        "{status:?}"
    );
    let _ = stop.send(());
    watcher.await.unwrap().unwrap();
}
