//! Dynamic clusters against kube-sim: a kubeconfig dropped into the cluster
//! directory, or a labelled Secret in the primary cluster, engages a cluster
//! in the engine's registry; removing it disengages the cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, DeleteParams, PostParams};
use kube_sim::SimCluster;
use rekon::cluster::provider::{DirProvider, NameFrom, SecretProvider};
use rekon::cluster::{ClusterEvent, ClusterRegistry};
use tokio::sync::{broadcast, oneshot};
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

async fn next_event(events: &mut broadcast::Receiver<ClusterEvent>) -> ClusterEvent {
    timeout(Duration::from_secs(15), events.recv())
        .await
        .expect("no cluster event: likely deadlocked or the provider missed a change")
        .expect("registry gone")
}

/// The engaged cluster's client reaches that cluster: a ConfigMap created
/// there through the registry's client is visible in the sim.
async fn assert_reaches(
    registry: &ClusterRegistry,
    name: &str,
    sim: &SimCluster,
) -> anyhow::Result<()> {
    let cluster = registry.get(name).expect("cluster engaged");
    let api: Api<ConfigMap> = Api::namespaced(cluster.client(), "default");
    let cm = ConfigMap {
        metadata: ObjectMeta {
            name: Some(format!("probe-{name}")),
            ..ObjectMeta::default()
        },
        ..ConfigMap::default()
    };
    api.create(&PostParams::default(), &cm).await?;
    let direct: Api<ConfigMap> = Api::namespaced(client(sim).await?, "default");
    assert!(direct.get_opt(&format!("probe-{name}")).await?.is_some());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_file_engages_and_its_removal_disengages() -> anyhow::Result<()> {
    let main = SimCluster::start("main").await?;
    let edge = SimCluster::start("edge").await?;
    let far = SimCluster::start("far").await?;
    let registry = ClusterRegistry::new("main", client(&main).await?);
    let mut events = registry.subscribe();
    let dir = tempfile::tempdir()?;
    // Present before start: engaged by the initial scan.
    std::fs::write(dir.path().join("edge.yaml"), edge.kubeconfig_yaml())?;
    // Hidden files are ignored (volume machinery such as `..data`).
    std::fs::write(dir.path().join(".hidden.yaml"), far.kubeconfig_yaml())?;

    let provider = DirProvider::new(dir.path()).debounce(Duration::from_millis(50));
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(provider.run(registry.clone(), async {
        let _ = stopped.await;
    }));

    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Added("edge".into())
    );
    assert_reaches(&registry, "edge", &edge).await?;

    // Dropped in while running: engaged.
    std::fs::write(dir.path().join("far.kubeconfig"), far.kubeconfig_yaml())?;
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Added("far".into())
    );
    assert_reaches(&registry, "far", &far).await?;

    // Pointed at another cluster: re-engaged with the new client.
    std::fs::write(dir.path().join("far.kubeconfig"), main.kubeconfig_yaml())?;
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Removed("far".into())
    );
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Added("far".into())
    );
    assert_reaches(&registry, "far", &main).await?;

    // A broken file does not disengage what it served.
    std::fs::write(dir.path().join("far.kubeconfig"), "clusters: [")?;
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert!(registry.get("far").is_some());

    // Removed: disengaged.
    std::fs::remove_file(dir.path().join("edge.yaml"))?;
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Removed("edge".into())
    );
    assert!(registry.get("edge").is_none());
    assert_eq!(registry.names(), ["far", "main"]);

    stop.send(()).ok();
    timeout(Duration::from_secs(10), task)
        .await
        .expect("provider did not stop: likely deadlocked")??;
    for sim in [main, edge, far] {
        sim.shutdown().await;
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_current_context_can_name_the_cluster() -> anyhow::Result<()> {
    let main = SimCluster::start("main").await?;
    let edge = SimCluster::start("edge").await?;
    let registry = ClusterRegistry::new("main", client(&main).await?);
    let mut events = registry.subscribe();
    let dir = tempfile::tempdir()?;
    std::fs::write(dir.path().join("whatever.yaml"), edge.kubeconfig_yaml())?;
    let current = kube::config::Kubeconfig::from_yaml(&edge.kubeconfig_yaml())?
        .current_context
        .expect("kube-sim kubeconfigs name a current context");
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(
        DirProvider::new(dir.path())
            .naming(NameFrom::CurrentContext)
            .run(registry.clone(), async {
                let _ = stopped.await;
            }),
    );
    assert_eq!(next_event(&mut events).await, ClusterEvent::Added(current));
    stop.send(()).ok();
    timeout(Duration::from_secs(10), task)
        .await
        .expect("provider did not stop")??;
    main.shutdown().await;
    edge.shutdown().await;
    Ok(())
}

fn kubeconfig_secret(
    name: &str,
    kubeconfig: &str,
    labelled: bool,
    cluster_name: Option<&str>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: labelled
                .then(|| BTreeMap::from([("rekon.dev/kubeconfig".to_owned(), "true".to_owned())])),
            annotations: cluster_name
                .map(|n| BTreeMap::from([("rekon.dev/cluster-name".to_owned(), n.to_owned())])),
            ..ObjectMeta::default()
        },
        data: Some(BTreeMap::from([(
            "kubeconfig".to_owned(),
            ByteString(kubeconfig.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_labelled_secret_engages_and_its_deletion_disengages() -> anyhow::Result<()> {
    let main = SimCluster::start("main").await?;
    let edge = SimCluster::start("edge").await?;
    let far = SimCluster::start("far").await?;
    let main_client = client(&main).await?;
    let registry = ClusterRegistry::new("main", main_client.clone());
    let mut events = registry.subscribe();
    let secrets: Api<Secret> = Api::namespaced(main_client.clone(), "default");

    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(SecretProvider::new(main_client.clone(), "default").run(
        registry.clone(),
        async {
            let _ = stopped.await;
        },
    ));

    // Unlabelled: ignored. Labelled: engaged under the Secret's name.
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("ignored", &far.kubeconfig_yaml(), false, None),
        )
        .await?;
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("edge", &edge.kubeconfig_yaml(), true, None),
        )
        .await?;
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Added("edge".into())
    );
    assert_reaches(&registry, "edge", &edge).await?;

    // The annotation names the cluster.
    secrets
        .create(
            &PostParams::default(),
            &kubeconfig_secret("far-credentials", &far.kubeconfig_yaml(), true, Some("far")),
        )
        .await?;
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Added("far".into())
    );
    assert_reaches(&registry, "far", &far).await?;

    // Deleted: disengaged.
    secrets.delete("edge", &DeleteParams::default()).await?;
    assert_eq!(
        next_event(&mut events).await,
        ClusterEvent::Removed("edge".into())
    );
    assert_eq!(registry.names(), ["far", "main"]);

    stop.send(()).ok();
    timeout(Duration::from_secs(10), task)
        .await
        .expect("provider did not stop: likely deadlocked")??;
    for sim in [main, edge, far] {
        sim.shutdown().await;
    }
    Ok(())
}
