//! NodePool benchmark: N Nodes spread over P NodePools (one pool per node,
//! by its `node-role.kubernetes.io/<pool>` label). Measures the time until
//! every node carries its pool's labels (create), then until a change of
//! every pool's labels reached every node (update), for
//! - `rekon-wasm`: the engine with the seed plugin `dist/plugins/nodepool.wasm`
//!   (`make plugins`; skipped when missing),
//! - `kube-rs-expert`: the native controller an expert writes, with the
//!   seed's logic: reflector stores (managedFields stripped) for NodePools,
//!   Nodes and RuntimeClasses fed by the streams that trigger reconciles,
//!   every read from the stores, a write only when something differs. The
//!   ratio columns are to this one.
//! - `kube-rs-list`: a native kube-rs `Controller` with the seed's logic (the
//!   same pure `nodepool::plan_node`): per pool it lists the pool's nodes by
//!   label selector from the API (members and former members), patches them
//!   with resourceVersion-guarded JSON patches, applies the RuntimeClass,
//!   writes the status, holds a finalizer; `watches` Nodes mapped to the
//!   pools their role and marker labels name; `owns` RuntimeClasses.
//!
//! Columns: converge time (create / update), writes (Events excluded), node
//! patches per node per change (1.00 = no redundant or conflicting node
//! write), CPU seconds, and RSS of the engine's process: `base` (connected,
//! plugin loaded from the compiled-plugin cache the orchestrator filled, as a
//! restarted `rekon run` finds it; nothing cached), `peak` (VmHWM) and `steady`
//! (converged and idle for 3 s); the ratios of time and peak RSS to the
//! expert-native controller, and the ratio to
//! the write floor: one patch per node per change at kube-sim's measured
//! write rate over HTTP (`floor` row).
//!
//! Each engine runs in its own process against kube-sim in another one.
//!
//! ```text
//! make plugins
//! cargo bench -p rekon-host --bench nodepool
//! REKON_BENCH_SCALES=1000/100,3000/300 cargo bench -p rekon-host --bench nodepool
//! REKON_BENCH_ENGINES=kube-rs-expert,rekon-wasm cargo bench -p rekon-host --bench nodepool
//! # heap profile (dhat): live heap at steady state per engine, and a
//! # dhat-heap-<engine>-<nodes>.json per scenario for dhat's viewer
//! REKON_BENCH_SCALES=1000/100 cargo bench -p rekon-host --bench nodepool --features dhat-heap
//! ```

mod support;

use std::collections::BTreeSet;
use std::io::{BufRead, Write};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::FutureExt;
use futures::StreamExt;
use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::node::v1::RuntimeClass;
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::controller::{
    Action as KubeAction, Config as ControllerRuntimeConfig, Controller, applier, trigger_self,
    trigger_with,
};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::ObjectRef as KubeObjectRef;
use kube::runtime::watcher::{self, watcher};
use kube::runtime::{WatchStreamExt, reflector};
use kube::{CustomResourceExt, ResourceExt};
use nodepool::{
    APPLIED_PREFIX, FINALIZER, NodePool, OtherPool, ROLE_PREFIX, applied_annotation, plan_node,
    role_label, runtime_class_for, runtime_class_name,
};
use rekon::cluster::{Source, connect};
use rekon::controller::Reconciler;
use serde_json::{Value, json};
use support::{SimProcess, cpu_seconds, peak_rss_mib, rss_mib};

#[cfg(feature = "dhat-heap")]
#[global_allocator]
static ALLOC: dhat::Alloc = dhat::Alloc;

const CONCURRENCY: usize = 4;
/// A label every pool declares, with the generation as value: converged
/// when every node carries `gen=<generation>`.
const GEN_LABEL: &str = "bench.rekon.dev/gen";

fn main() -> anyhow::Result<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    match std::env::var("REKON_BENCH_ROLE").as_deref() {
        Ok("sim") => sim_main(),
        Ok("scenario") => scenario_main(),
        Ok("floor") => floor_main(),
        _ => orchestrate(),
    }
}

fn scales() -> Vec<(usize, usize)> {
    std::env::var("REKON_BENCH_SCALES")
        .ok()
        .map(|s| {
            s.split(',')
                .filter_map(|p| {
                    let (n, p) = p.split_once('/')?;
                    Some((n.trim().parse().ok()?, p.trim().parse().ok()?))
                })
                .collect()
        })
        .unwrap_or_else(|| vec![(1000, 100), (3000, 300), (5000, 50), (10_000, 1000)])
}

fn plugin_path() -> std::path::PathBuf {
    std::env::var_os("REKON_BENCH_NODEPOOL").map_or_else(
        || {
            std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .join("../dist/plugins/nodepool.wasm")
        },
        std::path::PathBuf::from,
    )
}

fn env_usize(name: &str) -> anyhow::Result<usize> {
    Ok(std::env::var(name)?.parse()?)
}

// ---------------------------------------------------------------- orchestrator

fn run_role(role: &str, envs: &[(&str, String)]) -> anyhow::Result<Option<Value>> {
    let mut cmd = Command::new(std::env::current_exe()?);
    cmd.env("REKON_BENCH_ROLE", role).stderr(Stdio::inherit());
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let out = cmd.output()?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    Ok(stdout
        .lines()
        .find_map(|l| l.strip_prefix("RESULT "))
        .and_then(|l| serde_json::from_str(l).ok()))
}

fn orchestrate() -> anyhow::Result<()> {
    support::warm_cache(&[plugin_path()])?;
    let floor = run_role("floor", &[])?.context("floor measurement failed")?;
    let rate = floor["writes_per_second"].as_f64().unwrap_or(1.0).max(1.0);
    println!(
        "nodepool benchmark (concurrency {CONCURRENCY}); write floor: kube-sim takes {rate:.0} node patches/s over HTTP"
    );
    println!(
        "{:<12} {:>14} {:>9} {:>9} {:>8} {:>13} {:>7} {:>9} {:>9} {:>10} {:>9} {:>9} {:>8}",
        "nodes/pools",
        "engine",
        "create s",
        "update s",
        "writes",
        "node patch/Δ",
        "cpu s",
        "base MiB",
        "peak MiB",
        "steady MiB",
        "÷ native",
        "RSS ÷ nat",
        "÷ floor"
    );
    let engines: Vec<String> = std::env::var("REKON_BENCH_ENGINES").map_or_else(
        |_| {
            ["kube-rs-list", "kube-rs-expert", "rekon-wasm"]
                .map(str::to_owned)
                .to_vec()
        },
        |v| v.split(',').map(|e| e.trim().to_owned()).collect(),
    );
    for (nodes, pools) in scales() {
        let floor_s = nodes as f64 / rate;
        // Ratios are to the expert-native controller (reflector stores).
        let mut native: Option<(f64, f64)> = None;
        let mut rows = Vec::new();
        for engine in &engines {
            if engine == "rekon-wasm" && !plugin_path().is_file() {
                println!(
                    "{nodes}/{pools} {engine}: skipped, {} not built (make plugins)",
                    plugin_path().display()
                );
                continue;
            }
            let r = run_role(
                "scenario",
                &[
                    ("REKON_BENCH_ENGINE", engine.clone()),
                    ("REKON_BENCH_NODES", nodes.to_string()),
                    ("REKON_BENCH_POOLS", pools.to_string()),
                ],
            )?;
            let Some(r) = r else {
                println!("{nodes}/{pools} {engine}: failed");
                continue;
            };
            let total = r["create_s"].as_f64().unwrap_or_default()
                + r["update_s"].as_f64().unwrap_or_default();
            if engine == "kube-rs-expert" {
                native = Some((total, r["peak_rss_mib"].as_f64().unwrap_or_default()));
            }
            rows.push((engine, r, total));
        }
        for (engine, r, total) in rows {
            let writes = r["writes"].as_u64().unwrap_or_default();
            let node_writes = r["node_writes"].as_u64().unwrap_or_default();
            let peak = r["peak_rss_mib"].as_f64().unwrap_or_default();
            let ratio = |of: Option<f64>, x: f64| {
                of.map_or_else(|| "-".to_owned(), |n| format!("{:.2}×", x / n.max(1e-9)))
            };
            println!(
                "{:<12} {:>14} {:>9.2} {:>9.2} {:>8} {:>13.2} {:>7.2} {:>9.1} {:>9.1} {:>10.1} {:>9} {:>9} {:>8.1}",
                format!("{nodes}/{pools}"),
                engine,
                r["create_s"].as_f64().unwrap_or_default(),
                r["update_s"].as_f64().unwrap_or_default(),
                writes,
                node_writes as f64 / (2.0 * nodes as f64),
                r["cpu_seconds"].as_f64().unwrap_or_default(),
                r["base_rss_mib"].as_f64().unwrap_or_default(),
                peak,
                r["steady_rss_mib"].as_f64().unwrap_or_default(),
                ratio(native.map(|n| n.0), total),
                ratio(native.map(|n| n.1), peak),
                total / (2.0 * floor_s).max(1e-9),
            );
            if engine == "rekon-wasm" {
                let mib = |k: &str| r[k].as_f64().unwrap_or_default();
                println!(
                    "{:<12} {:>14} baseline: connected {:.1}, + runtime {:.1}, + plugin loaded (cached code) {:.1} MiB; caches and queues at steady state {:.1} MiB ({:.2} KiB per node)",
                    "",
                    engine,
                    mib("connected_rss_mib"),
                    mib("runtime_rss_mib") - mib("connected_rss_mib"),
                    mib("base_rss_mib") - mib("runtime_rss_mib"),
                    mib("steady_rss_mib") - mib("base_rss_mib"),
                    (mib("steady_rss_mib") - mib("base_rss_mib")) * 1024.0 / nodes as f64,
                );
            }
            let by = &r["steady_by_mapping"];
            println!(
                "{:<12} {:>14} resident at steady state: anonymous (heap, stacks, instance pool) {:.1}, compiled plugin {:.1}, binary and libraries {:.1} MiB",
                "",
                engine,
                by["anon"].as_f64().unwrap_or_default(),
                by["plugins"].as_f64().unwrap_or_default(),
                by["files"].as_f64().unwrap_or_default(),
            );
            if let Some(heap) = r.get("heap").filter(|h| !h.is_null()) {
                println!("{:<12} {:>14} heap (dhat): {heap}", "", engine);
            }
        }
    }
    Ok(())
}

// ---------------------------------------------------------------- simulator

fn pool_name(p: usize) -> String {
    format!("pool-{p}")
}

fn pool_object(p: usize, generation: &str) -> Value {
    json!({"apiVersion": "nodes.lailin.xyz/v1", "kind": "NodePool",
           "metadata": {"name": pool_name(p)},
           "spec": {"labels": {GEN_LABEL: generation, format!("bench.rekon.dev/{}", pool_name(p)): "true"},
                    "handler": "runc"}})
}

/// Start one cluster with the NodePool CRD, N nodes and P pools; print
/// `ready <kubeconfig>`. `start` → `converged <s>` once every node carries
/// `gen=v1`; `update` → bump every pool to `v2`, `converged <s>` once every
/// node carries it. Exits when stdin closes.
fn sim_main() -> anyhow::Result<()> {
    let nodes = env_usize("REKON_BENCH_NODES")?;
    let pools = env_usize("REKON_BENCH_POOLS")?;
    let rt = tokio::runtime::Runtime::new()?;
    rt.block_on(async {
        let sim = kube_sim::Sim::start_with(vec![
            kube_sim::SimConfig::new("main").history_limit(8 * nodes + 10_000),
        ])
        .await?;
        let main = sim.cluster("main");
        main.create(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            serde_json::to_value(NodePool::crd())?,
        )?;
        for i in 0..nodes {
            main.create(
                "v1",
                "nodes",
                None,
                json!({"apiVersion": "v1", "kind": "Node",
                       "metadata": {"name": format!("n{i}"),
                                    "labels": {role_label(&pool_name(i % pools)): "", "kubernetes.io/hostname": format!("n{i}")}},
                       "status": {"conditions": [{"type": "Ready", "status": "True"}]}}),
            )?;
        }
        for p in 0..pools {
            main.create("nodes.lailin.xyz/v1", "nodepools", None, pool_object(p, "v1"))?;
        }
        println!("ready {}", sim.kubeconfig_path().display());
        std::io::stdout().flush()?;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<String>();
        std::thread::spawn(move || {
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        while let Some(line) = rx.recv().await {
            let generation = match line.as_str() {
                "start" => "v1",
                "update" => {
                    for p in 0..pools {
                        main.merge_patch(
                            "nodes.lailin.xyz/v1",
                            "nodepools",
                            None,
                            &pool_name(p),
                            &json!({"spec": {"labels": {GEN_LABEL: "v2"}}}),
                            false,
                        )?;
                    }
                    "v2"
                }
                _ => continue,
            };
            let t0 = Instant::now();
            let selector = format!("{GEN_LABEL}={generation}");
            loop {
                if main.list("v1", "nodes", None, &selector)?.len() >= nodes {
                    println!("converged {}", t0.elapsed().as_secs_f64());
                    std::io::stdout().flush()?;
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        sim.shutdown().await;
        anyhow::Ok(())
    })
}

// ---------------------------------------------------------------- write floor

/// kube-sim's rate for node label patches over HTTP with the benchmark's
/// concurrency: the floor any engine pays for one patch per node.
fn floor_main() -> anyhow::Result<()> {
    let nodes = 2000;
    let sim = SimProcess::spawn(&[
        ("REKON_BENCH_NODES", nodes.to_string()),
        ("REKON_BENCH_POOLS", "1".to_owned()),
    ])?;
    let rt = tokio::runtime::Runtime::new()?;
    let rate = rt.block_on(async {
        let client = connect(
            "main",
            &Source::Context {
                kubeconfig: Some(sim.kubeconfig.clone()),
                context: Some("main".into()),
            },
            &rekon::cluster::default_user_agent(),
        )
        .await?;
        let api: Api<Node> = Api::all(client);
        let t0 = Instant::now();
        futures::stream::iter(0..nodes)
            .map(|i| {
                let api = api.clone();
                async move {
                    api.patch(
                        &format!("n{i}"),
                        &PatchParams::default(),
                        &Patch::Merge(json!({"metadata": {"labels": {"floor": "x"}}})),
                    )
                    .await
                }
            })
            .buffer_unordered(CONCURRENCY)
            .for_each(|r| {
                if let Err(e) = r {
                    eprintln!("floor patch failed: {e}");
                }
                futures::future::ready(())
            })
            .await;
        anyhow::Ok(nodes as f64 / t0.elapsed().as_secs_f64())
    })?;
    println!("RESULT {}", json!({"writes_per_second": rate}));
    sim.stop();
    Ok(())
}

// ---------------------------------------------------------------- scenario

fn scenario_main() -> anyhow::Result<()> {
    let nodes = env_usize("REKON_BENCH_NODES")?;
    let pools = env_usize("REKON_BENCH_POOLS")?;
    let engine = std::env::var("REKON_BENCH_ENGINE")?;
    let mut sim = SimProcess::spawn(&[
        ("REKON_BENCH_NODES", nodes.to_string()),
        ("REKON_BENCH_POOLS", pools.to_string()),
    ])?;
    let rt = tokio::runtime::Runtime::new()?;
    let client = rt.block_on(connect(
        "main",
        &Source::Context {
            kubeconfig: Some(sim.kubeconfig.clone()),
            context: Some("main".into()),
        },
        &rekon::cluster::default_user_agent(),
    ))?;
    // Compiling the component is a one-time cost (cached on disk by digest,
    // as `rekon run` does by default): the orchestrator compiled it into the
    // bench cache, and this process maps it from there.
    // The breakdown of rekon's baseline: connected (client, tokio), the
    // plugin runtime created (engine, pooling allocator), the plugin
    // compiled and loaded.
    let connected_rss = rss_mib();
    let mut runtime_rss = connected_rss;
    let plugin: Option<Arc<dyn Reconciler>> = if engine == "rekon-wasm" {
        let runtime = rekon::plugin::PluginRuntime::new(support::runtime_config())?;
        runtime_rss = rss_mib();
        Some(Arc::new(runtime.load_file(plugin_path())?))
    } else {
        None
    };
    #[cfg(feature = "dhat-heap")]
    let profiler = dhat::Profiler::builder()
        .file_name(format!("dhat-heap-{engine}-{nodes}.json"))
        .build();
    let writes = Arc::new(AtomicU64::new(0));
    let node_writes = Arc::new(AtomicU64::new(0));
    // Baseline: connected, plugin loaded, nothing cached.
    let base_rss = rss_mib();
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    sim.send("start")?;
    let stop = match (engine.as_str(), plugin) {
        ("rekon-wasm", Some(plugin)) => rt.block_on(start_rekon(client, plugin))?,
        ("kube-rs-expert", _) => rt.block_on(start_kube_rs_expert(
            client,
            Arc::clone(&writes),
            Arc::clone(&node_writes),
        )),
        ("kube-rs-list", _) => rt.block_on(start_kube_rs(
            client,
            Arc::clone(&writes),
            Arc::clone(&node_writes),
        )),
        (other, _) => anyhow::bail!("unknown engine {other}"),
    };
    sim.converged()?;
    let create_s = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    sim.send("update")?;
    sim.converged()?;
    let update_s = t1.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    // Steady state: converged, idle for a while.
    std::thread::sleep(support::SETTLE);
    let steady_rss = rss_mib();
    let steady_by_mapping = support::rss_by_mapping();
    let rss = peak_rss_mib();
    #[cfg(feature = "dhat-heap")]
    let heap = {
        let stats = dhat::HeapStats::get();
        Some(
            json!({"steady_bytes": stats.curr_bytes, "steady_blocks": stats.curr_blocks, "peak_bytes": stats.max_bytes, "total_bytes": stats.total_bytes}),
        )
    };
    #[cfg(not(feature = "dhat-heap"))]
    let heap: Option<Value> = None;
    let (total_writes, node_patches) = if engine.starts_with("kube-rs") {
        (
            writes.load(Ordering::SeqCst),
            node_writes.load(Ordering::SeqCst),
        )
    } else {
        (rekon_writes(None), node_patches_of_rekon(pools))
    };
    println!(
        "RESULT {}",
        json!({"create_s": create_s, "update_s": update_s, "writes": total_writes, "node_writes": node_patches, "cpu_seconds": cpu, "base_rss_mib": base_rss, "peak_rss_mib": rss, "steady_rss_mib": steady_rss, "steady_by_mapping": steady_by_mapping, "connected_rss_mib": connected_rss, "runtime_rss_mib": runtime_rss, "heap": heap})
    );
    rt.block_on(stop);
    #[cfg(feature = "dhat-heap")]
    drop(profiler);
    sim.stop();
    Ok(())
}

/// rekon's node patches: nodepool's JSON patches (`action="patch"`) less
/// the one finalizer patch per pool (its other writes are status patches,
/// applies and Events).
fn node_patches_of_rekon(pools: usize) -> u64 {
    rekon_writes(Some("action=\"patch\"")).saturating_sub(pools as u64)
}

/// rekon's writes so far (Events excluded; only lines with `only` if
/// given), from its own metrics.
fn rekon_writes(only: Option<&str>) -> u64 {
    support::metrics()
        .encode()
        .lines()
        .filter(|l| l.starts_with("rekon_writer_actions_total{") && !l.contains("action=\"event\""))
        .filter(|l| only.is_none_or(|o| l.contains(o)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
        .sum()
}

async fn start_rekon(
    client: kube::Client,
    plugin: Arc<dyn Reconciler>,
) -> anyhow::Result<BoxFuture<'static, ()>> {
    let manager = support::rekon_manager(&["main".to_owned()], &[client], CONCURRENCY)?;
    manager.upsert(plugin);
    Ok(async move { manager.shutdown().await }.boxed())
}

// ---------------------------------------------------------------- kube-rs

struct NpCtx {
    client: kube::Client,
    writes: Arc<AtomicU64>,
    node_writes: Arc<AtomicU64>,
}

#[derive(Debug, thiserror::Error)]
enum NpError {
    #[error("api: {0}")]
    Api(#[from] kube::Error),
    #[error("patch: {0}")]
    Json(#[from] serde_json::Error),
}

async fn np_apply(pool: Arc<NodePool>, ctx: &NpCtx) -> Result<KubeAction, NpError> {
    let name = pool.name_any();
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    let pools_api: Api<NodePool> = Api::all(ctx.client.clone());
    let mut nodes = nodes_api
        .list(&ListParams::default().labels(&role_label(&name)))
        .await?
        .items;
    for node in nodes_api
        .list(&ListParams::default().labels(&applied_annotation(&name)))
        .await?
        .items
    {
        if !nodes.iter().any(|n| n.metadata.name == node.metadata.name) {
            nodes.push(node);
        }
    }
    let mut other_pools = Vec::new();
    for other in &other_pool_names(&name, &nodes) {
        if let Some(p) = pools_api.get_opt(other).await? {
            other_pools.push(p);
        }
    }
    let rc_api: Api<RuntimeClass> = Api::all(ctx.client.clone());
    let existing = rc_api.get_opt(&runtime_class_name(&name)).await?;
    np_write(&pool, &nodes, &other_pools, existing.as_ref(), ctx).await?;
    Ok(KubeAction::await_change())
}

/// The other pools whose role labels `nodes` carry.
fn other_pool_names<N: std::borrow::Borrow<Node>>(name: &str, nodes: &[N]) -> BTreeSet<String> {
    let mut other_names = BTreeSet::new();
    for node in nodes.iter().map(std::borrow::Borrow::borrow) {
        for key in node.labels().keys() {
            if let Some(other) = key
                .strip_prefix(ROLE_PREFIX)
                .filter(|o| *o != name && !o.is_empty())
            {
                other_names.insert(other.to_owned());
            }
        }
    }
    other_names
}

/// What both native controllers do once they know a pool's nodes (members
/// and former members), the other pools those nodes name and the pool's
/// RuntimeClass: patch the nodes whose plan is not empty (guarded by their
/// resourceVersion), apply the RuntimeClass and write the status, each
/// only when it differs.
async fn np_write<N: std::borrow::Borrow<Node>, P: std::borrow::Borrow<NodePool>>(
    pool: &NodePool,
    nodes: &[N],
    other_pools: &[P],
    existing_rc: Option<&RuntimeClass>,
    ctx: &NpCtx,
) -> Result<(), NpError> {
    let name = pool.name_any();
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    let pools_api: Api<NodePool> = Api::all(ctx.client.clone());
    let others: Vec<OtherPool<'_>> = other_pools
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| OtherPool {
            name: p.metadata.name.as_deref().unwrap_or_default(),
            spec: &p.spec,
        })
        .collect();
    for node in nodes.iter().map(std::borrow::Borrow::borrow) {
        let plan = plan_node(&name, Some(&pool.spec), node, &others);
        if plan.ops.is_empty() {
            continue;
        }
        let mut ops = vec![
            json!({"op": "test", "path": "/metadata/resourceVersion", "value": node.resource_version()}),
        ];
        ops.extend(plan.ops);
        let patch: kube_json_patch::Patch = serde_json::from_value(Value::Array(ops))?;
        ctx.writes.fetch_add(1, Ordering::Relaxed);
        ctx.node_writes.fetch_add(1, Ordering::Relaxed);
        nodes_api
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await?;
    }
    let rc_api: Api<RuntimeClass> = Api::all(ctx.client.clone());
    let want = runtime_class_for(pool);
    let same = existing_rc.is_some_and(|e| {
        e.handler == want.handler
            && serde_json::to_value(&e.scheduling).ok()
                == serde_json::to_value(&want.scheduling).ok()
    });
    if !same {
        ctx.writes.fetch_add(1, Ordering::Relaxed);
        rc_api
            .patch(
                &runtime_class_name(&name),
                &PatchParams::apply("bench-nodepool").force(),
                &Patch::Apply(&want),
            )
            .await?;
    }
    let members = nodes
        .iter()
        .map(std::borrow::Borrow::borrow)
        .filter(|n| n.labels().contains_key(&role_label(&name)))
        .count();
    let count = i32::try_from(members).unwrap_or(i32::MAX);
    if pool.status.as_ref().is_none_or(|s| s.node_count != count) {
        ctx.writes.fetch_add(1, Ordering::Relaxed);
        pools_api
            .patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": {"nodeCount": count}})),
            )
            .await?;
    }
    Ok(())
}

async fn np_cleanup(pool: Arc<NodePool>, ctx: &NpCtx) -> Result<KubeAction, NpError> {
    let name = pool.name_any();
    let nodes_api: Api<Node> = Api::all(ctx.client.clone());
    for node in nodes_api
        .list(&ListParams::default().labels(&applied_annotation(&name)))
        .await?
        .items
    {
        let plan = plan_node(&name, None, &node, &[]);
        if plan.ops.is_empty() {
            continue;
        }
        let patch: kube_json_patch::Patch = serde_json::from_value(Value::Array(plan.ops))?;
        ctx.writes.fetch_add(1, Ordering::Relaxed);
        nodes_api
            .patch(
                &node.name_any(),
                &PatchParams::default(),
                &Patch::Json::<()>(patch),
            )
            .await?;
    }
    Ok(KubeAction::await_change())
}

async fn np_reconcile(
    pool: Arc<NodePool>,
    ctx: Arc<NpCtx>,
) -> Result<KubeAction, kube::runtime::finalizer::Error<NpError>> {
    let api: Api<NodePool> = Api::all(ctx.client.clone());
    if !pool.finalizers().iter().any(|f| f == FINALIZER) {
        ctx.writes.fetch_add(1, Ordering::Relaxed);
    }
    finalizer(&api, FINALIZER, pool, |event| async {
        match event {
            FinalizerEvent::Apply(p) => np_apply(p, &ctx).await,
            FinalizerEvent::Cleanup(p) => np_cleanup(p, &ctx).await,
        }
    })
    .await
}

/// Both native controllers retry a failed pool after 50 ms.
fn np_error_policy<C>(
    _pool: Arc<NodePool>,
    _e: &kube::runtime::finalizer::Error<NpError>,
    _ctx: Arc<C>,
) -> KubeAction {
    KubeAction::requeue(Duration::from_millis(50))
}

async fn start_kube_rs(
    client: kube::Client,
    writes: Arc<AtomicU64>,
    node_writes: Arc<AtomicU64>,
) -> BoxFuture<'static, ()> {
    let pools: Api<NodePool> = Api::all(client.clone());
    let controller = Controller::new(pools, watcher::Config::default())
        .with_config(
            ControllerRuntimeConfig::default().concurrency(u16::try_from(CONCURRENCY).unwrap_or(4)),
        )
        .owns(
            Api::<RuntimeClass>::all(client.clone()),
            watcher::Config::default(),
        )
        .watches(
            Api::<Node>::all(client.clone()),
            watcher::Config::default(),
            |node: Node| {
                node.labels()
                    .keys()
                    .filter_map(|k| {
                        k.strip_prefix(ROLE_PREFIX)
                            .or_else(|| k.strip_prefix(APPLIED_PREFIX))
                    })
                    .filter(|p| !p.is_empty())
                    .map(KubeObjectRef::<NodePool>::new)
                    .collect::<Vec<_>>()
            },
        );
    let ctx = Arc::new(NpCtx {
        client,
        writes,
        node_writes,
    });
    support::stoppable(move |stop| {
        controller
            .graceful_shutdown_on(async move {
                let _ = stop.await;
            })
            .run(np_reconcile, np_error_policy, ctx)
            .for_each(|_| futures::future::ready(()))
    })
}

// ---------------------------------------------------------------- kube-rs, as an expert writes it

/// The reflector stores the expert controller reads instead of the API.
struct Stores {
    pools: reflector::Store<NodePool>,
    nodes: reflector::Store<Node>,
    runtime_classes: reflector::Store<RuntimeClass>,
}

struct ExpertCtx {
    np: NpCtx,
    stores: Stores,
}

/// Drop `managedFields` before an object enters a store: kube-rs users do
/// this with a store modifier (the controller never reads them).
fn strip_managed_fields<K: kube::Resource>(obj: &mut K) {
    obj.managed_fields_mut().clear();
}

async fn expert_apply(pool: Arc<NodePool>, ctx: &ExpertCtx) -> Result<KubeAction, NpError> {
    // No reconcile on a cold cache: the secondary stores are filled by the
    // same streams that trigger reconciles, so wait for their first list.
    let (nodes_ready, rcs_ready) = futures::join!(
        ctx.stores.nodes.wait_until_ready(),
        ctx.stores.runtime_classes.wait_until_ready()
    );
    if nodes_ready.is_err() || rcs_ready.is_err() {
        return Ok(KubeAction::requeue(Duration::from_millis(50)));
    }
    let name = pool.name_any();
    let role = role_label(&name);
    let applied = applied_annotation(&name);
    // Members and former members (the marker label), from the store: a
    // kube-rs store has no label index, so this is a scan of the nodes.
    let nodes: Vec<Arc<Node>> = ctx
        .stores
        .nodes
        .state()
        .into_iter()
        .filter(|n| {
            let labels = n.labels();
            labels.contains_key(&role) || labels.contains_key(&applied)
        })
        .collect();
    let other_pools: Vec<Arc<NodePool>> = other_pool_names(&name, &nodes)
        .iter()
        .filter_map(|o| ctx.stores.pools.get(&KubeObjectRef::new(o)))
        .collect();
    let existing = ctx
        .stores
        .runtime_classes
        .get(&KubeObjectRef::new(&runtime_class_name(&name)));
    np_write(&pool, &nodes, &other_pools, existing.as_deref(), &ctx.np).await?;
    Ok(KubeAction::await_change())
}

async fn expert_reconcile(
    pool: Arc<NodePool>,
    ctx: Arc<ExpertCtx>,
) -> Result<KubeAction, kube::runtime::finalizer::Error<NpError>> {
    let api: Api<NodePool> = Api::all(ctx.np.client.clone());
    if !pool.finalizers().iter().any(|f| f == FINALIZER) {
        ctx.np.writes.fetch_add(1, Ordering::Relaxed);
    }
    finalizer(&api, FINALIZER, pool, |event| async {
        match event {
            FinalizerEvent::Apply(p) => expert_apply(p, &ctx).await,
            FinalizerEvent::Cleanup(p) => np_cleanup(p, &ctx.np).await,
        }
    })
    .await
}

/// The objects of `api` as they change, each first written to the store
/// behind `writer` with `managedFields` stripped (kube-rs' store modifier).
fn stored_events<K>(
    writer: reflector::store::Writer<K>,
    api: Api<K>,
) -> impl futures::Stream<Item = Result<K, watcher::Error>> + Send + 'static
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(strip_managed_fields),
    )
    .touched_objects()
}

/// The native controller an expert writes: reflector stores (managedFields
/// stripped) for NodePools, Nodes and RuntimeClasses, fed by the watch
/// streams that also trigger reconciles (Nodes mapped to the pools their
/// role and marker labels name, RuntimeClasses to their pool by name), all
/// reads from the stores, a write only when something differs. Built on
/// kube-runtime's public `applier` and triggers, which is what `Controller`
/// does inside, because `Controller::watches_stream`/`owns_stream` (a store
/// behind a secondary watch) are behind kube's unstable features.
async fn start_kube_rs_expert(
    client: kube::Client,
    writes: Arc<AtomicU64>,
    node_writes: Arc<AtomicU64>,
) -> BoxFuture<'static, ()> {
    let (pools, pools_writer) = reflector::store::<NodePool>();
    let (nodes, nodes_writer) = reflector::store::<Node>();
    let (runtime_classes, rcs_writer) = reflector::store::<RuntimeClass>();
    let pool_events = stored_events(pools_writer, Api::<NodePool>::all(client.clone()));
    let node_events = stored_events(nodes_writer, Api::<Node>::all(client.clone()));
    let rc_events = stored_events(rcs_writer, Api::<RuntimeClass>::all(client.clone()));
    let queue = futures::stream::select_all([
        trigger_self(pool_events, ()).boxed(),
        trigger_with(node_events, |node: Node| {
            node.labels()
                .keys()
                .filter_map(|k| {
                    k.strip_prefix(ROLE_PREFIX)
                        .or_else(|| k.strip_prefix(APPLIED_PREFIX))
                })
                .filter(|p| !p.is_empty())
                .map(KubeObjectRef::<NodePool>::new)
                .collect::<Vec<_>>()
        })
        .boxed(),
        trigger_with(rc_events, |rc: RuntimeClass| {
            rc.name_any()
                .strip_prefix(nodepool::RUNTIME_CLASS_PREFIX)
                .map(KubeObjectRef::<NodePool>::new)
        })
        .boxed(),
    ]);
    let ctx = Arc::new(ExpertCtx {
        np: NpCtx {
            client,
            writes,
            node_writes,
        },
        stores: Stores {
            pools: pools.clone(),
            nodes,
            runtime_classes,
        },
    });
    support::stoppable(move |stop| {
        applier(
            |pool, ctx| Box::pin(expert_reconcile(pool, ctx)),
            np_error_policy,
            ctx,
            pools,
            queue,
            ControllerRuntimeConfig::default().concurrency(u16::try_from(CONCURRENCY).unwrap_or(4)),
        )
        .take_until(stop)
        .for_each(|_| futures::future::ready(()))
    })
}
