//! Plugin status as Kubernetes Events on the host's own Pod (and metrics).

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ListParams, PostParams};
use kube_sim::SimCluster;
use rekon::app::reporting::report_plugin_status;
use rekon::plugin::{PluginRegistry, PluginRuntime, RuntimeConfig};
use rekon::telemetry::events::HostEvents;
use rekon::telemetry::metrics::Metrics;
use tokio::sync::oneshot;
use tokio::time::timeout;

async fn client(sim: &SimCluster) -> anyhow::Result<kube::Client> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&sim.kubeconfig_yaml())?;
    let config = kube::Config::from_custom_kubeconfig(
        kubeconfig,
        &kube::config::KubeConfigOptions::default(),
    )
    .await?;
    Ok(kube::Client::try_from(config)?)
}

async fn events_about(client: &kube::Client, pod: &str) -> anyhow::Result<Vec<Event>> {
    let api: Api<Event> = Api::namespaced(client.clone(), "default");
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(pod))
        .collect())
}

fn test_plugin(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../dist/test-plugins")
        .join(name)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plugin_loads_and_failures_become_events_on_the_host_pod() -> anyhow::Result<()> {
    let sim = SimCluster::start("main").await?;
    let client = client(&sim).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), "default");
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "rekon-7d9f-abcde"},
        "spec": {"containers": [{"name": "rekon", "image": "rekon"}]}
    }))?;
    let uid = pods
        .create(&PostParams::default(), &pod)
        .await?
        .metadata
        .uid;
    let host_events =
        HostEvents::for_pod(client.clone(), "default", "rekon-7d9f-abcde", uid.clone());

    let runtime = PluginRuntime::new(RuntimeConfig {
        pooling: false,
        ..RuntimeConfig::default()
    })?;
    let registry = PluginRegistry::new(runtime);
    let metrics = Metrics::new();
    let (stop, stopped) = oneshot::channel::<()>();
    let reporter = tokio::spawn(report_plugin_status(
        registry.subscribe(),
        metrics.clone(),
        host_events,
        async {
            let _ = stopped.await;
        },
    ));

    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("broken.wasm"), b"\0asm not really")?;
    let good = test_plugin("chaos-v1.wasm");
    let have_good = good.exists();
    if have_good {
        std::fs::copy(&good, dir.path().join("chaos.wasm"))?;
    }
    let scan = registry.clone();
    let path = dir.path().to_owned();
    tokio::task::spawn_blocking(move || scan.load_dir(&path)).await??;

    let want = if have_good { 2 } else { 1 };
    let events = timeout(Duration::from_secs(20), async {
        loop {
            let events = events_about(&client, "rekon-7d9f-abcde").await?;
            if events.len() >= want {
                return anyhow::Ok(events);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .expect("events were not recorded: likely deadlocked")?;

    let failed = events
        .iter()
        .find(|e| e.reason.as_deref() == Some("PluginLoadFailed"))
        .expect("a PluginLoadFailed event");
    assert_eq!(failed.type_.as_deref(), Some("Warning"));
    assert!(
        failed
            .note
            .as_deref()
            .unwrap_or_default()
            .contains("broken.wasm")
    );
    let regarding = failed.regarding.as_ref().expect("regarding");
    assert_eq!(regarding.kind.as_deref(), Some("Pod"));
    assert_eq!(regarding.uid, uid);
    assert_eq!(
        failed.reporting_controller.as_deref(),
        Some("rekon.dev/host")
    );
    let text = metrics.encode();
    assert!(
        text.contains("rekon_plugin_load_failures_total{plugin=\"broken\"} 1\n"),
        "{text}"
    );

    if have_good {
        let loaded = events
            .iter()
            .find(|e| e.reason.as_deref() == Some("PluginLoaded"))
            .expect("a PluginLoaded event");
        let plugin = registry.plugins().into_iter().next().expect("chaos loaded");
        let note = loaded.note.clone().unwrap_or_default();
        assert!(
            note.contains(plugin.name()) && note.contains(plugin.version()),
            "{note}"
        );
        assert!(text.contains(&format!(
            "rekon_plugin_info{{plugin=\"{}\",version=\"{}\"}} 1\n",
            plugin.name(),
            plugin.version()
        )));
    } else {
        eprintln!(
            "dist/test-plugins/chaos-v1.wasm missing (run `make test-plugins`): only the failure path was checked"
        );
    }

    stop.send(()).ok();
    timeout(Duration::from_secs(10), reporter)
        .await
        .expect("reporter did not stop")?;
    sim.shutdown().await;
    Ok(())
}
