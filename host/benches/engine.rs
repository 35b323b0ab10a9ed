//! Engine benchmark: fan out N primaries (ConfigMaps in the primary
//! cluster) to one Secret per primary in every cluster, by server-side
//! apply, starting from a pre-seeded primary cluster (the initial-list
//! case). Prints time to converge, writes/s, the engine's CPU seconds and
//! peak RSS, for 1 and 3 clusters, for
//! - `rekon-wasm`: the engine with the logic in a WASM plugin
//!   (tests/plugins/bench-fanout, built for wasm32-wasip2; skipped when the
//!   file is missing),
//! - `rekon`: the engine with the same logic as a native reconciler (queue,
//!   caches, mapping and writer without the sandbox),
//! - `kube-rs`: a native kube-rs `Controller` doing the same thing,
//! - `wasm+rec`: `rekon-wasm` recording every reconcile as a case file
//!   (`rekon run --record`; `REKON_BENCH_RECORD_SAMPLE=0.1` records one in
//!   ten; the average case size is printed below the table),
//! - `wasm+shadow`: `rekon-wasm` with a shadow version (the same logic, another
//!   digest) run beside it on every reconcile (its time per call and the
//!   shadow runs dropped under load are printed below the table).
//!
//! Each scenario runs in its own process (so peak RSS and CPU are that
//! engine's alone) and talks to kube-sim running in yet another process,
//! which seeds the primaries and reports convergence from its own store.
//! The orchestrator compiles the plugins into a compiled-plugin cache first
//! (`REKON_BENCH_CACHE_DIR`, default `rekon-bench-cache` in the temp
//! directory), and every measured process loads them from it, as a restarted
//! `rekon run` does: the compile is a first start's cost, not a controller's.
//!
//! ```text
//! cargo build -p rekon-bench-fanout --target wasm32-wasip2 --profile wasm
//! cargo bench -p rekon-host --bench engine            # 10,000 objects
//! REKON_BENCH_OBJECTS=2000 cargo bench -p rekon-host --bench engine
//! ```
//! Figures depend on the machine (2 cores here) and kube-sim's speed; both
//! engines share the same simulator and the same concurrency (4).
//!
//! A second table runs `rekon-wasm` on 3 clusters as 1, 2 and 3 sharded
//! replicas (`--shards 6`: each replica a process of its own holding its
//! share of the shard Leases before the clock starts). All replicas and the
//! simulator share this machine's cores, so the table shows the cost of
//! sharding here, not the speed-up on separate machines.
//! `REKON_BENCH_SUITE=fanout|replicas` runs one table only.
//!
//! `REKON_BENCH_SUITE=fleet` (not part of the default run: it takes
//! minutes) runs the seed plugin test-fanout (`dist/plugins/test_fanout.wasm`,
//! or `REKON_BENCH_FANOUT`) on a fleet: `REKON_BENCH_FLEET=100x1000`
//! clusters × Tests served by one kube-sim process, as one replica, as
//! three replicas with `--shard-by=cluster` and as three with
//! `--shard-by=key` (6 shards); converged when every Test's status lists
//! every cluster with its Job. Prints converge time, CPU, peak and steady
//! RSS per replica, and the shard moves each replica saw during the run
//! (each re-lists its share); `REKON_BENCH_FLEET_MODES=1,cluster,key` picks
//! rows.

use std::io::{BufRead, Write};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures::future::BoxFuture;
use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, Secret};
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{
    Action as KubeAction, Config as ControllerRuntimeConfig, Controller,
};
use kube::runtime::reflector::ObjectRef as KubeObjectRef;
use kube::runtime::watcher;
use rekon::action::{
    Action, ApplyAction, ClusterSet, Mapping, Outcome, OwnerLabels, Phase, Registration, Request,
    Resource, Scope, Watch,
};
use rekon::cluster::{Source, connect};
use rekon::controller::Reconciler;
use rekon::plugin::{CallError, HostReads};
use serde_json::{Value, json};

mod support;
use support::{SimProcess, cpu_seconds, peak_rss_mib};

const CONCURRENCY: usize = 4;
const CLUSTER_NAMES: [&str; 3] = ["main", "sub", "edge"];

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        // `cargo test --benches` lists benchmarks; there is nothing to list.
        return Ok(());
    }
    match std::env::var("REKON_BENCH_ROLE").as_deref() {
        Ok("sim") => sim_main(),
        Ok("scenario") => scenario_main(),
        Ok("replica") => replica_main(),
        Ok("fleet-sim") => fleet_sim_main(),
        Ok("fleet-replica") => fleet_replica_main(),
        _ => orchestrate(),
    }
}

/// The bench-fanout plugin component.
fn plugin_path() -> std::path::PathBuf {
    std::env::var_os("REKON_BENCH_PLUGIN").map_or_else(
        || {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../target/wasm32-wasip2/wasm/rekon_bench_fanout.wasm")
        },
        std::path::PathBuf::from,
    )
}

fn objects() -> usize {
    std::env::var("REKON_BENCH_OBJECTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000)
}

// ---------------------------------------------------------------- orchestrator

fn orchestrate() -> anyhow::Result<()> {
    let suite = std::env::var("REKON_BENCH_SUITE").unwrap_or_default();
    support::warm_cache(&[plugin_path(), fanout_path()])?;
    if suite.is_empty() || suite == "fanout" {
        orchestrate_fanout()?;
    }
    if suite.is_empty() || suite == "replicas" {
        orchestrate_replicas()?;
    }
    if suite == "fleet" {
        orchestrate_fleet()?;
    }
    Ok(())
}

fn orchestrate_fanout() -> anyhow::Result<()> {
    let n = objects();
    println!(
        "engine benchmark: {n} primaries fanned out to every cluster (concurrency {CONCURRENCY})"
    );
    println!(
        "{:<11} {:>8} {:>12} {:>10} {:>12} {:>12} {:>14}",
        "engine", "clusters", "converge s", "writes", "writes/s", "cpu s", "peak RSS MiB"
    );
    let mut notes = Vec::new();
    for clusters in [1_usize, 3] {
        for engine in ["rekon-wasm", "wasm+rec", "wasm+shadow", "rekon", "kube-rs"] {
            if is_wasm(engine) && !plugin_path().is_file() {
                println!(
                    "{engine:<10} {clusters:>8} skipped: {} not built",
                    plugin_path().display()
                );
                continue;
            }
            let out = Command::new(std::env::current_exe()?)
                .env("REKON_BENCH_ROLE", "scenario")
                .env("REKON_BENCH_ENGINE", engine)
                .env("REKON_BENCH_CLUSTERS", clusters.to_string())
                .env("REKON_BENCH_OBJECTS", n.to_string())
                .stderr(Stdio::inherit())
                .output()?;
            let stdout = String::from_utf8_lossy(&out.stdout);
            let Some(line) = stdout.lines().find_map(|l| l.strip_prefix("RESULT ")) else {
                println!("{engine:<10} {clusters:>8} failed: {stdout}");
                continue;
            };
            let r: Value = serde_json::from_str(line)?;
            let secs = r["seconds"].as_f64().unwrap_or_default();
            let writes = r["writes"].as_u64().unwrap_or_default();
            if let Some(note) = r["note"].as_str() {
                notes.push(format!("{engine} x{clusters}: {note}"));
            }
            println!(
                "{:<11} {:>8} {:>12.2} {:>10} {:>12.0} {:>12.2} {:>14.1}",
                engine,
                clusters,
                secs,
                writes,
                writes as f64 / secs.max(1e-9),
                r["cpu_seconds"].as_f64().unwrap_or_default(),
                r["peak_rss_mib"].as_f64().unwrap_or_default(),
            );
        }
    }
    for note in notes {
        println!("{note}");
    }
    Ok(())
}

fn is_wasm(engine: &str) -> bool {
    engine == "rekon-wasm" || engine.starts_with("wasm+")
}

// ---------------------------------------------------------------- simulator

/// Start the clusters, seed the primaries, print `ready <kubeconfig>`; on
/// `start` from stdin, report `converged <seconds>` once every cluster holds
/// one Secret per primary; exit when stdin closes.
fn sim_main() -> anyhow::Result<()> {
    let n = objects();
    let clusters: usize = std::env::var("REKON_BENCH_CLUSTERS")?.parse()?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let configs = CLUSTER_NAMES[..clusters]
            .iter()
            .map(|c| kube_sim::SimConfig::new(*c).history_limit(4 * n + 1000))
            .collect();
        let sim = kube_sim::Sim::start_with(configs).await?;
        let main = sim.cluster("main");
        for i in 0..n {
            main.create(
                "v1",
                "configmaps",
                Some("default"),
                json!({"apiVersion": "v1", "kind": "ConfigMap",
                       "metadata": {"name": format!("p{i}"), "namespace": "default"},
                       "data": {"value": "v1"}}),
            )?;
        }
        let baseline: Vec<usize> = sim
            .clusters()
            .iter()
            .map(kube_sim::SimCluster::object_count)
            .collect();
        serve_sim(sim, Duration::from_millis(20), |sim| {
            Ok(sim
                .clusters()
                .iter()
                .zip(&baseline)
                .all(|(c, base)| c.object_count() >= base + n))
        })
        .await
    })
}

/// The simulator's side of the protocol: prints `ready KUBECONFIG`, waits
/// for `start` on stdin, polls `done` every `poll` and prints `converged
/// SECONDS` once it holds, then serves until stdin closes and shuts down.
async fn serve_sim(
    sim: kube_sim::Sim,
    poll: Duration,
    mut done: impl FnMut(&kube_sim::Sim) -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    println!("ready {}", sim.kubeconfig_path().display());
    std::io::stdout().flush()?;
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
    std::thread::spawn(move || {
        for line in std::io::stdin().lock().lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    while let Some(line) = rx.recv().await {
        if line == "start" {
            break;
        }
    }
    let t0 = Instant::now();
    while !done(&sim)? {
        tokio::time::sleep(poll).await;
    }
    println!("converged {}", t0.elapsed().as_secs_f64());
    std::io::stdout().flush()?;
    // Until the orchestrator closes our stdin.
    while rx.recv().await.is_some() {}
    sim.shutdown().await;
    Ok(())
}

// ---------------------------------------------------------------- scenario

fn scenario_main() -> anyhow::Result<()> {
    let n = objects();
    let clusters: usize = std::env::var("REKON_BENCH_CLUSTERS")?.parse()?;
    let engine = std::env::var("REKON_BENCH_ENGINE")?;
    let mut sim = SimProcess::spawn(&[
        ("REKON_BENCH_CLUSTERS", clusters.to_string()),
        ("REKON_BENCH_OBJECTS", n.to_string()),
    ])?;
    let rt = tokio::runtime::Runtime::new()?;
    let names: Vec<String> = CLUSTER_NAMES[..clusters]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    let clients = connect_all(
        &rt,
        &sim.kubeconfig,
        &names,
        &rekon::cluster::default_user_agent(),
    )?;
    // Compiling the component is a one-time cost (cached on disk by digest
    // in production): done before the measurement starts.
    let runtime = rekon::plugin::PluginRuntime::new(support::runtime_config())?;
    let plugin: Option<Arc<dyn Reconciler>> = if is_wasm(&engine) {
        Some(Arc::new(runtime.load_file(plugin_path())?))
    } else {
        None
    };
    let work = tempfile::tempdir()?;
    let tap = {
        let _in_runtime = rt.enter();
        bench_tap(&engine, runtime, work.path())?
    };
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    sim.send("start")?;
    let stop = match engine.as_str() {
        "rekon" | "rekon-wasm" | "wasm+rec" | "wasm+shadow" => {
            rt.block_on(start_rekon(&names, &clients, plugin, tap))?
        }
        "kube-rs" => rt.block_on(start_kube_rs(&names, &clients)),
        other => anyhow::bail!("unknown engine {other}"),
    };
    let _sim_seconds = sim.converged()?;
    let seconds = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let rss = peak_rss_mib();
    let note = bench_note(&engine, work.path());
    println!(
        "RESULT {}",
        json!({"seconds": seconds, "writes": n * clusters, "cpu_seconds": cpu, "peak_rss_mib": rss, "note": note})
    );
    rt.block_on(stop);
    sim.stop();
    Ok(())
}

/// A client per cluster `names`, from the sim's kubeconfig contexts.
fn connect_all(
    rt: &tokio::runtime::Runtime,
    kubeconfig: &std::path::Path,
    names: &[String],
    user_agent: &str,
) -> anyhow::Result<Vec<kube::Client>> {
    names
        .iter()
        .map(|name| {
            let source = Source::Context {
                kubeconfig: Some(kubeconfig.to_path_buf()),
                context: Some(name.clone()),
            };
            Ok(rt.block_on(connect(name, &source, user_agent))?)
        })
        .collect()
}

// ---------------------------------------------------------------- rekon

fn resource(kind: &str, plural: &str) -> Resource {
    Resource {
        group: String::new(),
        version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
        scope: Scope::Namespaced,
    }
}

struct FanOut(Registration);

impl Reconciler for FanOut {
    fn registration(&self) -> &Registration {
        &self.0
    }

    fn reconcile(
        &self,
        req: Request,
        _phase: Phase,
        reads: Arc<dyn HostReads>,
        _time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let primary = reads.get(
            &req.cluster,
            &resource("ConfigMap", "configmaps"),
            req.namespace.as_deref(),
            &req.name,
        );
        let clusters = reads.clusters();
        async move {
            let Ok(Some(primary)) = primary else {
                return Ok(Outcome {
                    actions: vec![],
                    requeue_after_ms: None,
                    finalized: false,
                });
            };
            let primary: Value = serde_json::from_str(&primary).unwrap_or_default();
            let ns = req.namespace.clone().unwrap_or_default();
            let actions = clusters
                .iter()
                .map(|c| {
                    Action::Apply(ApplyAction {
                        cluster: c.name.clone(),
                        object: secret(&req.cluster, &ns, &req.name, &primary["data"]["value"])
                            .to_string(),
                        status: false,
                        force: true,
                    })
                })
                .collect();
            Ok(Outcome {
                actions,
                requeue_after_ms: None,
                finalized: false,
            })
        }
        .boxed()
    }
}

fn secret(cluster: &str, ns: &str, name: &str, value: &Value) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {
            "name": name,
            "namespace": ns,
            "labels": {"owner.cluster": cluster, "owner.namespace": ns, "owner.name": name},
            "annotations": {"bench/value": value},
        },
    })
}

/// Recording (`wasm+rec`) or a shadow version (`wasm+shadow`: the bench
/// plugin with a custom section appended, so another digest with the same
/// behaviour) for the engine under test.
fn bench_tap(
    engine: &str,
    runtime: rekon::plugin::PluginRuntime,
    work: &std::path::Path,
) -> anyhow::Result<rekon::change::shadow::Tap> {
    Ok(match engine {
        "wasm+rec" => {
            // REKON_BENCH_RECORD_SAMPLE: the fraction recorded (default all).
            let sample = std::env::var("REKON_BENCH_RECORD_SAMPLE")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(1.0);
            let recorder =
                rekon::change::record::Recorder::start(rekon::change::record::RecordConfig {
                    sample,
                    metrics: support::metrics().clone(),
                    ..rekon::change::record::RecordConfig::new(work.join("cases"))
                })?;
            rekon::change::shadow::Tap::new(Some(recorder), None)?
        }
        "wasm+shadow" => {
            let dir = work.join("plugins");
            std::fs::create_dir_all(&dir)?;
            let mut bytes = std::fs::read(plugin_path())?;
            wasm_encoder::ComponentSection::append_to_component(
                &wasm_encoder::CustomSection {
                    name: "shadow".into(),
                    data: [1u8][..].into(),
                },
                &mut bytes,
            );
            std::fs::write(dir.join("bench.shadow.wasm"), bytes)?;
            let registry = rekon::plugin::PluginRegistry::new(runtime);
            registry.load_dir(&dir)?;
            anyhow::ensure!(
                registry.shadows().len() == 1,
                "shadow did not load: {:?}",
                registry.status()
            );
            rekon::change::shadow::Tap::new(
                None,
                Some((
                    registry,
                    rekon::change::shadow::ShadowConfig {
                        metrics: support::metrics().clone(),
                        ..rekon::change::shadow::ShadowConfig::new(work.join("shadow-cases"))
                    },
                )),
            )?
        }
        _ => rekon::change::shadow::Tap::default(),
    })
}

/// What the table does not show: case sizes, shadow call time and drops.
fn bench_note(engine: &str, work: &std::path::Path) -> Option<String> {
    let metrics = support::metrics().encode();
    let value = |prefix: &str| -> f64 {
        metrics
            .lines()
            .filter(|l| l.starts_with(prefix))
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .fold(0.0, |a, b| a + b)
    };
    match engine {
        "wasm+rec" => {
            let files: Vec<u64> = std::fs::read_dir(work.join("cases/bench-fanout"))
                .ok()?
                .filter_map(Result::ok)
                .filter_map(|e| e.metadata().ok().map(|m| m.len()))
                .collect();
            let total: u64 = files.iter().sum();
            Some(format!(
                "{} cases written at convergence, {:.0} bytes per case, {} dropped",
                files.len(),
                total as f64 / files.len().max(1) as f64,
                value("rekon_record_dropped_total"),
            ))
        }
        "wasm+shadow" => {
            let count = value("rekon_shadow_call_duration_seconds_count");
            let sum = value("rekon_shadow_call_duration_seconds_sum");
            Some(format!(
                "{count} shadow reconciles at convergence ({} identical), {:.3} ms per shadow reconcile, {} dropped (queue full)",
                value(r#"rekon_shadow_reconciles_total{plugin="bench-fanout",kind="identical"}"#),
                sum * 1000.0 / count.max(1.0),
                value("rekon_shadow_dropped_total"),
            ))
        }
        _ => None,
    }
}

async fn start_rekon(
    names: &[String],
    clients: &[kube::Client],
    plugin: Option<Arc<dyn Reconciler>>,
    tap: rekon::change::shadow::Tap,
) -> anyhow::Result<BoxFuture<'static, ()>> {
    let manager = support::rekon_manager(names, clients, CONCURRENCY)?;
    if tap.is_active() {
        manager.set_layer(Arc::new(tap));
    }
    if let Some(plugin) = plugin {
        manager.upsert(plugin);
        return Ok(async move { manager.shutdown().await }.boxed());
    }
    manager.upsert(Arc::new(FanOut(Registration {
        name: "fanout".into(),
        version: "1.0.0".into(),
        primary: resource("ConfigMap", "configmaps"),
        primary_clusters: ClusterSet::Primary,
        primary_selector: None,
        clusters: ClusterSet::All,
        watches: vec![Watch {
            resource: resource("Secret", "secrets"),
            clusters: ClusterSet::All,
            mapping: Mapping::OwnerLabels(OwnerLabels {
                cluster: "owner.cluster".into(),
                namespace: "owner.namespace".into(),
                name: "owner.name".into(),
            }),
            label_selector: Some("owner.name".into()),
        }],
        finalizer: None,
        permissions: vec![],
        crds: vec![],
        max_concurrent_reconciles: None,
    })));
    Ok(async move { manager.shutdown().await }.boxed())
}

// ---------------------------------------------------------------- kube-rs

struct Ctx {
    clusters: Vec<(String, kube::Client)>,
    primary: String,
}

#[derive(Debug, thiserror::Error)]
#[error("failed to apply: {0}")]
struct ApplyError(#[from] kube::Error);

async fn reconcile(cm: Arc<ConfigMap>, ctx: Arc<Ctx>) -> Result<KubeAction, ApplyError> {
    let name = cm.metadata.name.clone().unwrap_or_default();
    let ns = cm.metadata.namespace.clone().unwrap_or_default();
    let value = cm
        .data
        .as_ref()
        .and_then(|d| d.get("value"))
        .map_or(Value::Null, |v| Value::String(v.clone()));
    let body = secret(&ctx.primary, &ns, &name, &value);
    let params = PatchParams::apply("bench").force();
    let applies = ctx.clusters.iter().map(|(_, client)| {
        let api: Api<Secret> = Api::namespaced(client.clone(), &ns);
        let (params, body, name) = (&params, &body, &name);
        async move { api.patch(name, params, &Patch::Apply(body)).await }
    });
    for r in futures::future::join_all(applies).await {
        r?;
    }
    Ok(KubeAction::await_change())
}

fn error_policy(_cm: Arc<ConfigMap>, _e: &ApplyError, _ctx: Arc<Ctx>) -> KubeAction {
    KubeAction::requeue(Duration::from_millis(100))
}

async fn start_kube_rs(names: &[String], clients: &[kube::Client]) -> BoxFuture<'static, ()> {
    let cms: Api<ConfigMap> = Api::namespaced(clients[0].clone(), "default");
    let mut controller = Controller::new(cms, watcher::Config::default()).with_config(
        ControllerRuntimeConfig::default().concurrency(u16::try_from(CONCURRENCY).unwrap_or(4)),
    );
    for client in clients {
        let secrets: Api<Secret> = Api::namespaced(client.clone(), "default");
        controller = controller.watches(
            secrets,
            watcher::Config::default().labels("owner.name"),
            |s: Secret| {
                let labels = s.metadata.labels.unwrap_or_default();
                labels.get("owner.name").map(|n| {
                    KubeObjectRef::new(n).within(
                        labels
                            .get("owner.namespace")
                            .map_or("default", String::as_str),
                    )
                })
            },
        );
    }
    let ctx = Arc::new(Ctx {
        clusters: names.iter().cloned().zip(clients.iter().cloned()).collect(),
        primary: names[0].clone(),
    });
    support::stoppable(move |stop| {
        controller
            .graceful_shutdown_on(async move {
                let _ = stop.await;
            })
            .run(reconcile, error_policy, ctx)
            .for_each(|_| futures::future::ready(()))
    })
}

// ---------------------------------------------------------------- replicas

const SHARDS: u32 = 6;

/// 1, 2 and 3 sharded replicas of rekon-wasm on 3 clusters.
fn orchestrate_replicas() -> anyhow::Result<()> {
    let n = objects();
    if !plugin_path().is_file() {
        println!(
            "sharded replicas skipped: {} not built",
            plugin_path().display()
        );
        return Ok(());
    }
    println!();
    println!(
        "sharded replicas: rekon-wasm, {n} primaries fanned out to 3 clusters, {SHARDS} shards, concurrency {CONCURRENCY} per replica"
    );
    println!(
        "{:<9} {:>12} {:>12} {:>16} {:>22}",
        "replicas", "converge s", "writes/s", "cpu s (all)", "peak RSS MiB (each)"
    );
    for replicas in 1..=3_usize {
        let mut sim = SimProcess::spawn(&[
            ("REKON_BENCH_CLUSTERS", "3".to_owned()),
            ("REKON_BENCH_OBJECTS", n.to_string()),
        ])?;
        let (seconds, results) = run_replicas(&mut sim, "replica", replicas, &[])?;
        let cpu: f64 = results
            .iter()
            .map(|r| r["cpu_seconds"].as_f64().unwrap_or_default())
            .sum();
        let rss: Vec<String> = results
            .iter()
            .map(|r| format!("{:.0}", r["peak_rss_mib"].as_f64().unwrap_or_default()))
            .collect();
        sim.stop();
        println!(
            "{:<9} {:>12.2} {:>12.0} {:>16.2} {:>22}",
            replicas,
            seconds,
            (n * 3) as f64 / seconds.max(1e-9),
            cpu,
            rss.join("/"),
        );
    }
    Ok(())
}

/// Starts `replicas` replica processes (this bench in role `role`, with
/// `env`), waits until each printed `ready`, starts the clock and the
/// simulator's workload, tells each `go`, waits for convergence; then
/// tells each `stop` and collects every `RESULT` line before closing any
/// stdin (a replica shutting down releases its shards, and another one
/// still measuring would take them over and count that too). Returns the
/// seconds to converge and the results in replica order.
fn run_replicas(
    sim: &mut SimProcess,
    role: &str,
    replicas: usize,
    env: &[(&str, &str)],
) -> anyhow::Result<(f64, Vec<Value>)> {
    let mut children = Vec::new();
    for i in 0..replicas {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .env("REKON_BENCH_ROLE", role)
            .env("REKON_BENCH_REPLICA", i.to_string())
            .env("REKON_BENCH_REPLICAS", replicas.to_string())
            .env("REKON_BENCH_KUBECONFIG", &sim.kubeconfig);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut child = command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()?;
        let lines = std::io::BufReader::new(child.stdout.take().expect("piped")).lines();
        children.push((child, lines));
    }
    // Every replica holds its share before the clock starts.
    for (_, lines) in &mut children {
        loop {
            let line = lines
                .next()
                .ok_or_else(|| anyhow::anyhow!("replica exited early"))??;
            if line == "ready" {
                break;
            }
        }
    }
    let t0 = Instant::now();
    sim.send("start")?;
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().expect("piped");
        writeln!(stdin, "go")?;
        stdin.flush()?;
    }
    sim.converged()?;
    let seconds = t0.elapsed().as_secs_f64();
    for (child, _) in &mut children {
        let stdin = child.stdin.as_mut().expect("piped");
        writeln!(stdin, "stop")?;
        stdin.flush()?;
    }
    let mut results = Vec::new();
    for (_, lines) in &mut children {
        let r: Value = loop {
            let line = lines
                .next()
                .ok_or_else(|| anyhow::anyhow!("replica exited without a result"))??;
            if let Some(json) = line.strip_prefix("RESULT ") {
                break serde_json::from_str(json)?;
            }
        };
        results.push(r);
    }
    for (mut child, _) in children {
        drop(child.stdin.take());
        let _ = child.wait();
    }
    Ok((seconds, results))
}

/// A replica's shard membership: starts the shard runner with `config` on
/// `client` and waits until it has held its fair share (`SHARDS /
/// replicas`) for 2 s. Returns the shards, the runner's stop signal and
/// its task.
fn join_shards(
    rt: &tokio::runtime::Runtime,
    client: &kube::Client,
    config: rekon::lease::shard::ShardingConfig,
    replicas: u32,
) -> anyhow::Result<(
    rekon::lease::shard::Shards,
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<()>,
)> {
    let (shards, runner) =
        rekon::lease::shard::ShardRunner::new(client, config, support::metrics().clone())?;
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let runner = rt.spawn(runner.run(async {
        let _ = stop_rx.await;
    }));
    let share = (SHARDS / replicas) as usize;
    rt.block_on(async {
        let mut stable_since = None;
        loop {
            if shards.held().len() == share {
                let since = *stable_since.get_or_insert_with(Instant::now);
                if since.elapsed() > Duration::from_secs(2) {
                    break;
                }
            } else {
                stable_since = None;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    });
    Ok((shards, stop_tx, runner))
}

/// Until the orchestrator says `stop` (the world converged) or closes stdin.
fn wait_for_stop(stdin: &mut std::io::Lines<std::io::StdinLock<'static>>) {
    for line in stdin.by_ref() {
        if line.map_or(true, |l| l == "stop") {
            return;
        }
    }
}

/// A replica's side of the protocol: prints `ready`, waits for `go` on
/// stdin; then `stop` ([`wait_for_stop`]), then stdin closing.
fn ready_then_go() -> anyhow::Result<std::io::Lines<std::io::StdinLock<'static>>> {
    println!("ready");
    std::io::stdout().flush()?;
    let mut stdin = std::io::stdin().lock().lines();
    for line in stdin.by_ref() {
        if line? == "go" {
            break;
        }
    }
    Ok(stdin)
}

/// One sharded replica: join the group, wait for a fair share of the
/// shards, print `ready`; on `go` load the plugin; on `stop` print
/// `RESULT` (CPU seconds, peak RSS); on stdin closing shut down.
fn replica_main() -> anyhow::Result<()> {
    let index: usize = std::env::var("REKON_BENCH_REPLICA")?.parse()?;
    let replicas: u32 = std::env::var("REKON_BENCH_REPLICAS")?.parse()?;
    let kubeconfig = std::path::PathBuf::from(std::env::var("REKON_BENCH_KUBECONFIG")?);
    let rt = tokio::runtime::Runtime::new()?;
    let _runtime = rt.enter();
    let names: Vec<String> = CLUSTER_NAMES.iter().map(|s| (*s).to_owned()).collect();
    let clients = connect_all(
        &rt,
        &kubeconfig,
        &names,
        &rekon::cluster::user_agent_for(&format!("bench-replica-{index}")),
    )?;
    let runtime = rekon::plugin::PluginRuntime::new(support::runtime_config())?;
    let plugin: Arc<dyn Reconciler> = Arc::new(runtime.load_file(plugin_path())?);
    let config = rekon::lease::shard::ShardingConfig {
        identity: format!("bench-replica-{index}"),
        lease_duration: Duration::from_secs(4),
        renew_deadline: Duration::from_secs(3),
        retry_period: Duration::from_millis(300),
        ..rekon::lease::shard::ShardingConfig::new(SHARDS, "bench", "default")
    };
    let (shards, stop_tx, runner) = join_shards(&rt, &clients[0], config, replicas)?;
    let mut stdin = ready_then_go()?;
    let cpu0 = cpu_seconds();
    let manager = rt.block_on(async {
        support::rekon_sharded_manager(&names, &clients, CONCURRENCY, Some(shards.clone()))
    })?;
    manager.upsert(plugin);
    wait_for_stop(&mut stdin);
    let cpu = cpu_seconds() - cpu0;
    let rss = peak_rss_mib();
    println!(
        "RESULT {}",
        json!({"cpu_seconds": cpu, "peak_rss_mib": rss, "shards": shards.held()})
    );
    std::io::stdout().flush()?;
    for _ in stdin.by_ref() {}
    rt.block_on(manager.shutdown());
    let _ = stop_tx.send(());
    let _ = rt.block_on(runner);
    Ok(())
}

// ---------------------------------------------------------------- fleet

/// The test-fanout seed plugin component.
fn fanout_path() -> std::path::PathBuf {
    std::env::var_os("REKON_BENCH_FANOUT").map_or_else(
        || {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../dist/plugins/test_fanout.wasm")
        },
        std::path::PathBuf::from,
    )
}

/// `(clusters, tests)` of the fleet suite.
fn fleet_shape() -> (usize, usize) {
    std::env::var("REKON_BENCH_FLEET")
        .ok()
        .and_then(|v| {
            let (c, t) = v.split_once('x')?;
            Some((c.trim().parse().ok()?, t.trim().parse().ok()?))
        })
        .unwrap_or((100, 1000))
}

/// Cluster names of the fleet: the primary `main`, then `m1`, `m2`, ...
fn fleet_names(clusters: usize) -> Vec<String> {
    (0..clusters)
        .map(|i| {
            if i == 0 {
                "main".to_owned()
            } else {
                format!("m{i}")
            }
        })
        .collect()
}

/// The fleet's clusters in one kube-sim process; the Test CRD and the
/// Tests in `main`. On `start`: `converged <s>` once every Test's status
/// lists every cluster and none is still `Creating`.
fn fleet_sim_main() -> anyhow::Result<()> {
    let (clusters, tests) = fleet_shape();
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let configs = fleet_names(clusters)
            .iter()
            .map(|c| kube_sim::SimConfig::new(c.as_str()).history_limit(4 * tests + 1000))
            .collect();
        let sim = kube_sim::Sim::start_with(configs).await?;
        let main = sim.cluster("main");
        main.create(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            serde_json::to_value(<test_fanout::Test as kube::CustomResourceExt>::crd())?,
        )?;
        for i in 0..tests {
            main.create(
                "job.lailin.xyz/v1",
                "tests",
                Some("default"),
                json!({"apiVersion": "job.lailin.xyz/v1", "kind": "Test",
                       "metadata": {"name": format!("t{i}"), "namespace": "default"},
                       "spec": {"image": "busybox"}}),
            )?;
        }
        serve_sim(sim, Duration::from_millis(250), |sim| {
            let listed =
                sim.cluster("main")
                    .list("job.lailin.xyz/v1", "tests", Some("default"), "")?;
            Ok(listed.len() >= tests
                && listed.iter().all(|t| {
                    t.pointer("/status/clusters")
                        .and_then(Value::as_array)
                        .is_some_and(|cs| {
                            cs.len() == clusters
                                && cs
                                    .iter()
                                    .all(|c| c["state"] != "Creating" && c["state"] != "Syncing")
                        })
                }))
        })
        .await
    })
}

/// The fleet suite: one replica, then three with `--shard-by=cluster`, then
/// three with `--shard-by=key`. Every Test lives in `main`, so by cluster
/// one replica holds all of them (and needs their Jobs everywhere); by key
/// each replica holds a share of the Tests and caches only their Jobs.
fn orchestrate_fleet() -> anyhow::Result<()> {
    let (clusters, tests) = fleet_shape();
    if !fanout_path().is_file() {
        println!("fleet skipped: {} not built", fanout_path().display());
        return Ok(());
    }
    println!();
    println!(
        "fleet: test-fanout, {tests} Tests fanned out to {clusters} clusters (one kube-sim process), {SHARDS} shards, concurrency {CONCURRENCY} per replica"
    );
    println!(
        "{:<22} {:>12} {:>16} {:>26} {:>26} {:>30}",
        "replicas",
        "converge s",
        "cpu s (all)",
        "peak RSS MiB (each)",
        "steady RSS MiB (each)",
        "shard moves/most held (each)"
    );
    // `REKON_BENCH_FLEET_MODES=1,cluster,key` (the default) picks rows.
    let modes = std::env::var("REKON_BENCH_FLEET_MODES").unwrap_or_else(|_| "1,cluster,key".into());
    for (replicas, by) in [(1_usize, "-"), (3, "cluster"), (3, "key")] {
        let mode = if replicas == 1 { "1" } else { by };
        if !modes.split(',').any(|m| m.trim() == mode) {
            continue;
        }
        let mut sim = SimProcess::spawn(&[
            ("REKON_BENCH_ROLE", "fleet-sim".to_owned()),
            ("REKON_BENCH_FLEET", format!("{clusters}x{tests}")),
        ])?;
        let fleet = format!("{clusters}x{tests}");
        let (seconds, results) = run_replicas(
            &mut sim,
            "fleet-replica",
            replicas,
            &[
                ("REKON_BENCH_FLEET", fleet.as_str()),
                ("REKON_BENCH_SHARD_BY", by),
            ],
        )?;
        let cpu: f64 = results
            .iter()
            .map(|r| r["cpu_seconds"].as_f64().unwrap_or_default())
            .sum();
        let mib = |key: &str| -> Vec<String> {
            results
                .iter()
                .map(|r| format!("{:.0}", r[key].as_f64().unwrap_or_default()))
                .collect()
        };
        let (peak, steady) = (mib("peak_rss_mib"), mib("steady_rss_mib"));
        let moves: Vec<String> = results
            .iter()
            .map(|r| format!("{}/{}", r["shard_moves"], r["most_held"]))
            .collect();
        sim.stop();
        let label = if replicas == 1 {
            "1".to_owned()
        } else {
            format!("{replicas}, --shard-by={by}")
        };
        println!(
            "{:<22} {:>12.2} {:>16.2} {:>26} {:>26} {:>30}",
            label,
            seconds,
            cpu,
            peak.join("/"),
            steady.join("/"),
            if replicas == 1 {
                "-".to_owned()
            } else {
                moves.join(" ")
            },
        );
    }
    Ok(())
}

/// One fleet replica: with more than one, a member of a shard group (by
/// `REKON_BENCH_SHARD_BY`) holding its share before `ready`; on `go` loads
/// test-fanout; on `stop` waits [`support::SETTLE`] and prints `RESULT`; on
/// stdin closing shuts down.
fn fleet_replica_main() -> anyhow::Result<()> {
    let index: usize = std::env::var("REKON_BENCH_REPLICA")?.parse()?;
    let replicas: u32 = std::env::var("REKON_BENCH_REPLICAS")?.parse()?;
    let (clusters, _) = fleet_shape();
    let kubeconfig = std::path::PathBuf::from(std::env::var("REKON_BENCH_KUBECONFIG")?);
    let rt = tokio::runtime::Runtime::new()?;
    let _runtime = rt.enter();
    let names = fleet_names(clusters);
    let clients = connect_all(
        &rt,
        &kubeconfig,
        &names,
        &rekon::cluster::user_agent_for(&format!("bench-fleet-{index}")),
    )?;
    let runtime = rekon::plugin::PluginRuntime::new(support::runtime_config())?;
    let plugin: Arc<dyn Reconciler> = Arc::new(runtime.load_file(fanout_path())?);
    let mut sharding = None;
    if replicas > 1 {
        let by = match std::env::var("REKON_BENCH_SHARD_BY").as_deref() {
            Ok("key") => rekon::lease::shard::ShardBy::Key,
            _ => rekon::lease::shard::ShardBy::Cluster,
        };
        // The defaults (client-go's 15 s / 10 s / 2 s), as `rekon run` has
        // them: with 4 s / 3 s three replicas and a 100-cluster kube-sim on
        // two cores missed renewals, shards moved during the run and every
        // move re-listed a replica's share of the Jobs in all clusters.
        let config = rekon::lease::shard::ShardingConfig {
            by,
            identity: format!("bench-fleet-{index}"),
            ..rekon::lease::shard::ShardingConfig::new(SHARDS, "fleet", "default")
        };
        sharding = Some(join_shards(&rt, &clients[0], config, replicas)?);
    }
    let mut stdin = ready_then_go()?;
    let cpu0 = cpu_seconds();
    // Shard moves during the run: each re-lists this replica's share.
    let moves = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let most_held = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    if let Some((shards, _, _)) = &sharding {
        let (shards, moves, most_held) = (shards.clone(), moves.clone(), most_held.clone());
        most_held.fetch_max(shards.held().len(), std::sync::atomic::Ordering::Relaxed);
        let mut changes = shards.changes();
        rt.spawn(async move {
            while changes.changed().await.is_ok() {
                moves.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                most_held.fetch_max(shards.held().len(), std::sync::atomic::Ordering::Relaxed);
            }
        });
    }
    let manager = rt.block_on(async {
        support::rekon_sharded_manager(
            &names,
            &clients,
            CONCURRENCY,
            sharding.as_ref().map(|(s, _, _)| s.clone()),
        )
    })?;
    manager.upsert(plugin);
    wait_for_stop(&mut stdin);
    let cpu = cpu_seconds() - cpu0;
    std::thread::sleep(support::SETTLE);
    let steady = support::rss_mib();
    let rss = peak_rss_mib();
    println!(
        "RESULT {}",
        json!({"cpu_seconds": cpu, "peak_rss_mib": rss, "steady_rss_mib": steady,
               "shard_moves": moves.load(std::sync::atomic::Ordering::Relaxed),
               "most_held": most_held.load(std::sync::atomic::Ordering::Relaxed)})
    );
    std::io::stdout().flush()?;
    for _ in stdin.by_ref() {}
    rt.block_on(manager.shutdown());
    if let Some((_, stop_tx, runner)) = sharding {
        let _ = stop_tx.send(());
        let _ = rt.block_on(runner);
    }
    Ok(())
}
