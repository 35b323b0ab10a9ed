//! Shared harness of the engine tests: kube-sim clusters, an engine wired
//! to them (clusters, caches, writer, controller manager), and a native
//! fan-out reconciler with the semantics of the `test-fanout` seed plugin,
//! so engine behaviour is tested independently of the WASM runtime.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime};

use futures::FutureExt;
use futures::future::BoxFuture;
use parking_lot::Mutex;
use rekon::action::{
    Action, ApplyAction, ClusterSet, DeleteAction, EventAction, EventType, Mapping, ObjectRef,
    Outcome, OwnerLabels, Phase, Registration, Request, Resource, Scope, Watch,
};
use rekon::cache::{CacheManager, Resolver};
use rekon::cluster::{ClusterRegistry, Source, connect};
use rekon::controller::{ControllerConfig, Manager, Reconciler};
use rekon::plugin::{CallError, HostReads};
use rekon::writer::{Writer, WriterConfig};
use serde_json::{Value, json};

/// Every async test body runs under this bound.
pub const TEST_TIMEOUT: Duration = Duration::from_secs(90);

pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| {
                tracing_subscriber::EnvFilter::new("rekon=debug,kube_sim=warn")
            }),
        )
        .with_test_writer()
        .try_init();
}

/// kube-sim clusters plus an engine connected to some of them.
pub struct Engine {
    pub sim: kube_sim::Sim,
    pub clusters: ClusterRegistry,
    pub caches: CacheManager,
    pub writer: Writer,
    pub manager: Manager,
    probes: tokio::task::JoinHandle<()>,
}

impl Engine {
    /// Start sim clusters `all` and engage `engaged` (the first is primary).
    pub async fn start(all: &[&str], engaged: &[&str]) -> anyhow::Result<Self> {
        Self::start_with(
            all,
            engaged,
            ControllerConfig {
                max_concurrent_reconciles: 4,
                sync_timeout: Duration::from_secs(3),
                // Tests must show that watches alone converge.
                resync_period: None,
                shards: None,
            },
        )
        .await
    }

    pub async fn start_with(
        all: &[&str],
        engaged: &[&str],
        config: ControllerConfig,
    ) -> anyhow::Result<Self> {
        init_tracing();
        let sim = kube_sim::Sim::start(all).await?;
        let primary = engaged[0];
        let clusters = ClusterRegistry::new(primary, client(&sim, primary).await?);
        for name in &engaged[1..] {
            clusters.add(*name, client(&sim, name).await?)?;
        }
        let (caches, writer, manager, probes) = assemble(&clusters, config);
        Ok(Self {
            sim,
            clusters,
            caches,
            writer,
            manager,
            probes,
        })
    }

    /// Whether the engine's cache of `resource` in `cluster` holds `name`
    /// (in namespace `default`) with annotation/data `value` (any when None).
    pub fn cached(&self, cluster: &str, resource: &Resource, name: &str) -> Option<Value> {
        let cache = self
            .caches
            .acquire(cluster, &rekon::writer::resource_id(resource))
            .ok()?;
        let obj = cache.get(Some("default"), name)?;
        serde_json::from_str(&obj.json).ok()
    }

    pub fn cluster(&self, name: &str) -> &kube_sim::SimCluster {
        self.sim.cluster(name)
    }

    pub async fn stop(self) {
        self.manager.shutdown().await;
        self.probes.abort();
        self.sim.shutdown().await;
    }
}

/// A client for sim cluster `name` through the sim's kubeconfig.
pub async fn client(sim: &kube_sim::Sim, name: &str) -> anyhow::Result<kube::Client> {
    Ok(connect(
        name,
        &Source::Context {
            kubeconfig: Some(sim.kubeconfig_path().to_path_buf()),
            context: Some(name.to_owned()),
        },
        &rekon::cluster::default_user_agent(),
    )
    .await?)
}

/// Poll `check` until it returns true or `within` elapses.
pub async fn eventually<F, Fut>(what: &str, within: Duration, mut check: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if check().await {
            return Ok(());
        }
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("timed out after {within:?} waiting for: {what}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Wait until `plugin` is quiet: no reconcile for 400 ms and nothing ready
/// or running in its queue.
pub async fn settle(engine: &Engine, plugin: &str, observed: &Observed) -> anyhow::Result<()> {
    let mut last = usize::MAX;
    let mut quiet_since = tokio::time::Instant::now();
    let deadline = quiet_since + Duration::from_secs(20);
    loop {
        let n = observed.requests.lock().len();
        let idle = engine
            .manager
            .queue_stats(plugin)
            .is_some_and(|q| q.ready == 0 && q.running == 0);
        let now = tokio::time::Instant::now();
        if n != last || !idle {
            last = n;
            quiet_since = now;
        } else if now - quiet_since >= Duration::from_millis(400) {
            return Ok(());
        }
        if now > deadline {
            anyhow::bail!("plugin {plugin} never settled");
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

pub fn resource(
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
    namespaced: bool,
) -> Resource {
    Resource {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        scope: if namespaced {
            Scope::Namespaced
        } else {
            Scope::Cluster
        },
    }
}

pub fn configmaps() -> Resource {
    resource("", "v1", "ConfigMap", "configmaps", true)
}

/// Children have no plural: the engine resolves it through discovery.
pub fn secrets() -> Resource {
    resource("", "v1", "Secret", "", true)
}

pub fn create_cm(sim: &kube_sim::SimCluster, name: &str, value: &str) {
    sim.create(
        "v1",
        "configmaps",
        Some("default"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"}, "data": {"value": value}}),
    )
    .expect("create configmap");
}

pub fn set_cm(sim: &kube_sim::SimCluster, name: &str, value: &str) {
    sim.merge_patch(
        "v1",
        "configmaps",
        Some("default"),
        name,
        &json!({"data": {"value": value}}),
        false,
    )
    .expect("patch configmap");
}

/// The `rekon.test/value` annotation of Secret `name` in `sim`, if it exists.
pub fn child_value(sim: &kube_sim::SimCluster, name: &str) -> Option<String> {
    sim.get("v1", "secrets", Some("default"), name)
        .ok()
        .map(|s| {
            s.pointer("/metadata/annotations/rekon.test~1value")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned()
        })
}

/// What the fan-out reconciler observed.
#[derive(Default)]
pub struct Observed {
    /// Every request, in order, with the plugin version that served it.
    pub requests: Mutex<Vec<(String, Request)>>,
    pub in_flight: AtomicUsize,
    pub max_in_flight: AtomicUsize,
    /// A key reconciled twice at once (must never happen).
    pub overlap: AtomicBool,
    running: Mutex<BTreeSet<(String, Option<String>, String)>>,
}

impl Observed {
    pub fn count_for(&self, version: &str, name: &str) -> usize {
        self.requests
            .lock()
            .iter()
            .filter(|(v, r)| v == version && r.name == name)
            .count()
    }

    pub fn names_seen_by(&self, version: &str) -> BTreeSet<String> {
        self.requests
            .lock()
            .iter()
            .filter(|(v, _)| v == version)
            .map(|(_, r)| r.name.clone())
            .collect()
    }
}

/// The fan-out logic of the `test-fanout` seed, over ConfigMaps (primary,
/// in the primary cluster) and Secrets (children in every cluster, owner
/// labels): each Secret carries the ConfigMap's `data.value` as an annotation.
pub struct FanOut {
    pub registration: Registration,
    pub observed: Arc<Observed>,
    /// Artificial duration of a reconcile.
    pub delay: Duration,
    /// Appended to the value written to children (tells versions apart).
    pub suffix: String,
}

impl FanOut {
    pub fn new(name: &str, version: &str, finalizer: Option<&str>) -> Self {
        Self {
            registration: Registration {
                name: name.into(),
                version: version.into(),
                primary: configmaps(),
                primary_clusters: ClusterSet::Primary,
                primary_selector: None,
                clusters: ClusterSet::All,
                watches: vec![Watch {
                    resource: secrets(),
                    clusters: ClusterSet::All,
                    mapping: Mapping::OwnerLabels(OwnerLabels {
                        cluster: "owner.cluster".into(),
                        namespace: "owner.namespace".into(),
                        name: "owner.name".into(),
                    }),
                    label_selector: Some("owner.name".into()),
                }],
                finalizer: finalizer.map(Into::into),
                permissions: vec![],
                crds: vec![],
                max_concurrent_reconciles: None,
            },
            observed: Arc::default(),
            delay: Duration::ZERO,
            suffix: String::new(),
        }
    }

    fn decide(&self, req: &Request, reads: &dyn HostReads) -> Result<Outcome, CallError> {
        let fail = |message: String| CallError::Plugin {
            plugin: self.registration.name.clone(),
            message,
            retryable: true,
        };
        let Some(primary) = reads
            .get(
                &req.cluster,
                &configmaps(),
                req.namespace.as_deref(),
                &req.name,
            )
            .map_err(|e| fail(format!("{e:?}")))?
        else {
            return Ok(Outcome {
                actions: vec![],
                requeue_after_ms: None,
                finalized: false,
            });
        };
        let primary: Value = serde_json::from_str(&primary).map_err(|e| fail(e.to_string()))?;
        let ns = req.namespace.clone().unwrap_or_default();
        let clusters = reads.clusters();
        let deleting = primary.pointer("/metadata/deletionTimestamp").is_some();
        if deleting {
            let mut actions = Vec::new();
            for c in &clusters {
                let child = reads
                    .get(&c.name, &secrets(), Some(&ns), &req.name)
                    .map_err(|e| fail(format!("{e:?}")))?;
                if child.is_some() {
                    actions.push(Action::Delete(DeleteAction {
                        target: ObjectRef {
                            cluster: c.name.clone(),
                            resource: secrets(),
                            namespace: Some(ns.clone()),
                            name: req.name.clone(),
                        },
                        uid: None,
                        propagation: None,
                    }));
                }
            }
            return Ok(Outcome {
                actions,
                requeue_after_ms: None,
                // Deletes issued now are part of this outcome: the host removes
                // the finalizer only if every one of them succeeded.
                finalized: true,
            });
        }
        let value = format!(
            "{}{}",
            primary
                .pointer("/data/value")
                .and_then(Value::as_str)
                .unwrap_or_default(),
            self.suffix
        );
        let mut actions: Vec<Action> = clusters
            .iter()
            .map(|c| {
                Action::Apply(ApplyAction {
                    cluster: c.name.clone(),
                    object: json!({
                        "apiVersion": "v1",
                        "kind": "Secret",
                        "metadata": {
                            "name": req.name,
                            "namespace": ns,
                            "labels": {
                                "owner.cluster": req.cluster,
                                "owner.namespace": ns,
                                "owner.name": req.name,
                            },
                            "annotations": {"rekon.test/value": value},
                        },
                    })
                    .to_string(),
                    status: false,
                    force: true,
                })
            })
            .collect();
        actions.push(Action::Event(EventAction {
            regarding: ObjectRef {
                cluster: req.cluster.clone(),
                resource: configmaps(),
                namespace: req.namespace.clone(),
                name: req.name.clone(),
            },
            event_type: EventType::Normal,
            reason: "FannedOut".into(),
            action: "Apply".into(),
            note: format!("applied to {} clusters", clusters.len()),
        }));
        Ok(Outcome {
            actions,
            requeue_after_ms: None,
            finalized: false,
        })
    }
}

impl Reconciler for FanOut {
    fn registration(&self) -> &Registration {
        &self.registration
    }

    fn reconcile(
        &self,
        req: Request,
        _phase: Phase,
        reads: Arc<dyn HostReads>,
        _time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        let observed = Arc::clone(&self.observed);
        let version = self.registration.version.clone();
        let key = (req.cluster.clone(), req.namespace.clone(), req.name.clone());
        if !observed.running.lock().insert(key.clone()) {
            observed.overlap.store(true, Ordering::SeqCst);
        }
        let n = observed.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        observed.max_in_flight.fetch_max(n, Ordering::SeqCst);
        observed.requests.lock().push((version, req.clone()));
        let result = self.decide(&req, reads.as_ref());
        let delay = self.delay;
        async move {
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
            observed.in_flight.fetch_sub(1, Ordering::SeqCst);
            observed.running.lock().remove(&key);
            result
        }
        .boxed()
    }
}

/// Values of the child Secret `name` per cluster (None = absent).
pub fn child_values(
    engine: &Engine,
    clusters: &[&str],
    name: &str,
) -> BTreeMap<String, Option<String>> {
    clusters
        .iter()
        .map(|c| ((*c).to_owned(), child_value(engine.cluster(c), name)))
        .collect()
}

pub fn all_equal(values: &BTreeMap<String, Option<String>>, want: &str) -> bool {
    values.values().all(|v| v.as_deref() == Some(want))
}

/// The engine over `clusters` as the tests run it: caches, a writer with
/// short timeouts and few attempts, a manager with `config`, and cluster
/// health probes every 200 ms (a task).
pub fn assemble(
    clusters: &ClusterRegistry,
    config: ControllerConfig,
) -> (CacheManager, Writer, Manager, tokio::task::JoinHandle<()>) {
    let resolver = Resolver::default();
    let caches = CacheManager::new(clusters.clone(), resolver.clone());
    let writer = Writer::new(
        clusters.clone(),
        resolver,
        WriterConfig {
            request_timeout: Duration::from_secs(1),
            max_attempts: 4,
            max_retry_wait: Duration::from_secs(2),
        },
    );
    let manager = Manager::new(caches.clone(), writer.clone(), config);
    let probes = tokio::spawn(clusters.clone().run_probes(
        Duration::from_millis(200),
        Duration::from_millis(500),
        std::future::pending(),
    ));
    (caches, writer, manager, probes)
}
