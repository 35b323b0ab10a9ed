//! Two `rekon run` replicas (Config → App::build → App::run) with leader
//! election on one Lease: only the leader reconciles and writes; the
//! follower, running a different plugin version, writes nothing until the
//! leader shuts down and releases the lease, then takes over at once. Both
//! serve `/healthz`, `/readyz` and `/metrics`.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use rekon::app::ops::OpsConfig;
use rekon::app::{App, Config};
use rekon::lease::LeaderElectionConfig;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{Instant, timeout};

const ANNOTATION: &str = "chaos.rekon.dev~1version";

fn test_plugin(name: &str) -> PathBuf {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../dist/test-plugins")
        .join(name);
    assert!(
        path.is_file(),
        "test plugin {} is missing: run `make test-plugins` first",
        path.display()
    );
    path
}

fn mark(sim: &kube_sim::SimCluster, name: &str) -> Option<String> {
    sim.get("v1", "configmaps", Some("default"), name)
        .ok()?
        .pointer(&format!("/metadata/annotations/{ANNOTATION}"))
        .and_then(Value::as_str)
        .map(str::to_owned)
}

fn free_addr() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr")
}

async fn get(addr: SocketAddr, path: &str) -> anyhow::Result<(u16, String)> {
    let mut stream = tokio::net::TcpStream::connect(addr).await?;
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await?;
    let mut raw = String::new();
    stream.read_to_string(&mut raw).await?;
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head.split_whitespace().nth(1).unwrap_or("0").parse()?;
    Ok((status, body.to_owned()))
}

async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + within;
    while !check().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

struct Replica {
    addr: SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<Result<(), rekon::app::AppError>>,
    _plugins: tempfile::TempDir,
}

async fn replica(sim: &kube_sim::Sim, identity: &str, plugin: &str) -> anyhow::Result<Replica> {
    let plugins = tempfile::tempdir()?;
    std::fs::copy(test_plugin(plugin), plugins.path().join("chaos.wasm"))?;
    let addr = free_addr();
    let config = Config {
        kubeconfig: Some(sim.kubeconfig_path().to_path_buf()),
        context: Some("main".into()),
        sync_timeout: Duration::from_secs(3),
        probe_interval: Duration::from_millis(200),
        ops: OpsConfig {
            metrics_addr: Some(addr),
            probe_addr: Some(addr),
            leader_election: Some(LeaderElectionConfig {
                identity: identity.to_owned(),
                lease_duration: Duration::from_secs(3),
                renew_deadline: Duration::from_secs(2),
                retry_period: Duration::from_millis(400),
                ..LeaderElectionConfig::new("rekon-ha", "default")
            }),
            ..OpsConfig::default()
        },
        ..Config::new(plugins.path())
    };
    let app = App::build(config).await?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(app.run(async move {
        let _ = stopped.await;
    }));
    Ok(Replica {
        addr,
        stop,
        task,
        _plugins: plugins,
    })
}

fn lease_holder(sim: &kube_sim::SimCluster) -> Option<String> {
    sim.get(
        "coordination.k8s.io/v1",
        "leases",
        Some("default"),
        "rekon-ha",
    )
    .ok()?
    .pointer("/spec/holderIdentity")
    .and_then(Value::as_str)
    .map(str::to_owned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_leader_writes_and_the_follower_takes_over_on_shutdown() {
    timeout(Duration::from_secs(120), async {
        let sim = kube_sim::Sim::start(&["main"]).await?;
        let main = sim.cluster("main");
        let configmap = |name: &str| {
            json!({"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "default"}, "data": {"mode": "ok"}})
        };
        main.create("v1", "configmaps", Some("default"), configmap("a"))?;

        let a = replica(&sim, "replica-a", "chaos-v1.wasm").await?;
        eventually("replica a leads", Duration::from_secs(20), || async {
            lease_holder(main).as_deref() == Some("replica-a")
        })
        .await;
        eventually("the leader reconciles", Duration::from_secs(30), || async {
            mark(main, "a").as_deref() == Some("v1")
        })
        .await;

        // The follower runs v2 of the plugin: anything it wrote would say so.
        let b = replica(&sim, "replica-b", "chaos-v2.wasm").await?;
        eventually("both replicas ready", Duration::from_secs(30), || async {
            matches!(get(a.addr, "/readyz").await, Ok((200, _))) && matches!(get(b.addr, "/readyz").await, Ok((200, _)))
        })
        .await;
        main.create("v1", "configmaps", Some("default"), configmap("b"))?;
        eventually("the leader reconciles the new object", Duration::from_secs(30), || async {
            mark(main, "b").as_deref() == Some("v1")
        })
        .await;
        // Several lease durations: the follower never writes.
        let until = Instant::now() + Duration::from_secs(4);
        while Instant::now() < until {
            assert_eq!(mark(main, "a").as_deref(), Some("v1"), "the follower wrote");
            assert_eq!(mark(main, "b").as_deref(), Some("v1"), "the follower wrote");
            assert_eq!(lease_holder(main).as_deref(), Some("replica-a"));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }

        let (status, body) = get(a.addr, "/metrics").await?;
        assert_eq!(status, 200);
        assert!(
            body.lines().any(|l| l.starts_with("controller_runtime_reconcile_total{controller=\"chaos\",cluster=\"main\",result=\"success\"}")),
            "{body}"
        );
        assert!(body.contains("# TYPE leader_election_master_status gauge"), "{body}");
        assert_eq!(get(b.addr, "/healthz").await?.0, 200);

        // The leader shuts down cleanly: it finishes, releases the lease, and
        // the follower takes over well within the lease duration.
        a.stop.send(()).ok();
        a.task.await??;
        let released = Instant::now();
        eventually("replica b leads", Duration::from_secs(10), || async {
            lease_holder(main).as_deref() == Some("replica-b")
        })
        .await;
        assert!(released.elapsed() < Duration::from_secs(3), "takeover took {:?}", released.elapsed());
        // Its queued requests now run: every primary is reconciled by v2.
        eventually("the new leader reconciles", Duration::from_secs(30), || async {
            mark(main, "a").as_deref() == Some("v2") && mark(main, "b").as_deref() == Some("v2")
        })
        .await;

        b.stop.send(()).ok();
        b.task.await??;
        // Released on shutdown: no holder left.
        assert_eq!(lease_holder(main), None);
        sim.shutdown().await;
        anyhow::Ok(())
    })
    .await
    .expect("HA test timed out: likely deadlocked")
    .unwrap();
}
