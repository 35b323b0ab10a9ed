//! The controller core under stress: one reconcile per key across swaps
//! (primary kind included) and cluster churn; per-watch failure isolation
//! (CRD missing, 403 on one resource); bounded inboxes under an event
//! storm with a slow custom mapping; a stalled cluster degrading only its
//! own writes; Events best-effort.

mod engine_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use engine_support::*;
use futures::FutureExt;
use futures::future::BoxFuture;
use kube_sim::FaultRule;
use rekon::action::{
    Action, ApplyAction, ClusterSet, Mapping, Outcome, Phase, Registration, Request, Resource,
    Watch,
};
use rekon::cluster::Health;
use rekon::controller::{ControllerConfig, Reconciler};
use rekon::plugin::{CallError, HostReads};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(40);

fn create_labelled_cm(sim: &kube_sim::SimCluster, name: &str, labels: Value) {
    sim.create(
        "v1",
        "configmaps",
        Some("default"),
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default", "labels": labels}, "data": {"value": "v"}}),
    )
    .expect("create configmap");
}

/// Swaps (some of them changing the primary kind) and a cluster leaving and
/// coming back, over and over, while every reconcile is slow: no key is
/// ever reconciled twice at once, and when the churn stops every primary is
/// reconciled by the last version.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_key_runs_twice_at_once_under_swaps_and_cluster_churn() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let names: Vec<String> = (0..12).map(|i| format!("cm{i}")).collect();
        for c in clusters {
            for n in &names {
                create_cm(engine.cluster(c), n, "v");
            }
        }
        let observed = Arc::new(Observed::default());
        let version = |i: usize, kind_change: bool| {
            let mut v = FanOut::new("churn", &format!("1.0.{i}"), None);
            v.registration.primary_clusters = ClusterSet::All;
            v.delay = Duration::from_millis(40);
            v.suffix = format!("-{i}");
            v.observed = Arc::clone(&observed);
            if kind_change {
                // Same names, another primary kind: keys of the old kind
                // that are running must still not overlap the new ones.
                v.registration.primary = secrets();
            }
            Arc::new(v)
        };
        engine.manager.upsert(version(0, false));
        let sub_client = client(&engine.sim, "sub").await?;
        let mut swaps = 0;
        let mut churns = 0;
        for i in 1..=16 {
            tokio::time::sleep(Duration::from_millis(60)).await;
            engine.manager.upsert(version(i, i % 5 == 0));
            swaps += 1;
            if i % 3 == 0 {
                engine.clusters.remove("sub")?;
                tokio::time::sleep(Duration::from_millis(30)).await;
                engine.clusters.add("sub", sub_client.clone())?;
                churns += 1;
            }
        }
        let last = version(99, false);
        engine.manager.upsert(last);
        for c in clusters {
            for n in &names {
                eventually("the last version reconciled every primary", WAIT, || async {
                    observed
                        .requests
                        .lock()
                        .iter()
                        .any(|(v, r)| v == "1.0.99" && r.cluster == c && &r.name == n)
                })
                .await?;
            }
        }
        let total = observed.requests.lock().len();
        println!(
            "churn: {swaps} swaps, {churns} disengage/re-engage cycles, {total} reconciles, max in flight {}, overlaps {}",
            observed.max_in_flight.load(Ordering::SeqCst),
            u8::from(observed.overlap.load(Ordering::SeqCst))
        );
        assert!(
            !observed.overlap.load(Ordering::SeqCst),
            "a key was reconciled twice at once"
        );
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

/// A plugin that only watches: what `degraded()` and the healthy plugins see.
struct Watching {
    registration: Registration,
    reconciles: Arc<AtomicUsize>,
}

impl Watching {
    fn new(name: &str, watch: Resource) -> Self {
        let mut registration = FanOut::new(name, "1.0.0", None).registration;
        registration.primary_selector = Some("watching=yes".into());
        registration.watches = vec![Watch {
            resource: watch,
            clusters: ClusterSet::Primary,
            mapping: Mapping::AllPrimaries,
            label_selector: None,
        }];
        Self {
            registration,
            reconciles: Arc::default(),
        }
    }
}

impl Reconciler for Watching {
    fn registration(&self) -> &Registration {
        &self.registration
    }

    fn reconcile(
        &self,
        _req: Request,
        _phase: Phase,
        _reads: Arc<dyn HostReads>,
        _time: SystemTime,
    ) -> BoxFuture<'static, Result<Outcome, CallError>> {
        self.reconciles.fetch_add(1, Ordering::SeqCst);
        async {
            Ok(Outcome {
                actions: vec![],
                requeue_after_ms: None,
                finalized: false,
            })
        }
        .boxed()
    }
}

fn widgets() -> Resource {
    resource("example.com", "v1", "Widget", "", true)
}

const WIDGET_CRD: &str = r#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"CustomResourceDefinition","metadata":{"name":"widgets.example.com"},"spec":{"group":"example.com","names":{"kind":"Widget","plural":"widgets","singular":"widget","listKind":"WidgetList"},"scope":"Namespaced","versions":[{"name":"v1","served":true,"storage":true,"schema":{"openAPIV3Schema":{"type":"object","x-kubernetes-preserve-unknown-fields":true}}}]}}"#;

/// A CRD that is not installed, and a resource the API answers 403 for,
/// degrade only the plugins that watch them, in that cluster: named with
/// the API's reason, the cluster stays Ready, other plugins converge; both
/// recover without a restart when the cause goes away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_watch_degrades_only_the_plugins_that_need_it() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let main = engine.cluster("main");
        create_labelled_cm(main, "w", json!({"watching": "yes"}));
        create_cm(main, "a", "v");

        // A healthy plugin and one that needs a CRD nobody installed.
        engine
            .manager
            .upsert(Arc::new(FanOut::new("healthy", "1.0.0", None)));
        let crd_plugin = Watching::new("needs-crd", widgets());
        let crd_reconciles = Arc::clone(&crd_plugin.reconciles);
        engine.manager.upsert(Arc::new(crd_plugin));
        let started = Instant::now();
        eventually("needs-crd degraded in main", WAIT, || async {
            engine.manager.degraded().iter().any(|d| {
                d.plugin == "needs-crd" && d.cluster == "main" && d.resource.contains("Widget")
            })
        })
        .await?;
        println!("CRD missing reported after {:?}", started.elapsed());
        let degraded = engine.manager.degraded();
        assert_eq!(degraded.len(), 1, "{degraded:?}");
        assert!(
            degraded[0].to_string().contains("CRD not installed"),
            "{}",
            degraded[0]
        );
        eventually("healthy converges meanwhile", WAIT, || async {
            all_equal(&child_values(&engine, &clusters, "a"), "v")
        })
        .await?;
        for c in clusters {
            let health = engine.clusters.get(c).unwrap().health();
            assert_eq!(health, Health::Ready, "cluster {c} is {health:?}");
        }
        // The degraded plugin still reconciles with what it has (after the
        // settle bound), it is not stalled.
        eventually("needs-crd still reconciles", WAIT, || async {
            crd_reconciles.load(Ordering::SeqCst) > 0
        })
        .await?;

        // Installing the CRD heals it, no restart.
        main.create(
            "apiextensions.k8s.io/v1",
            "customresourcedefinitions",
            None,
            serde_json::from_str(WIDGET_CRD)?,
        )?;
        eventually("needs-crd recovers once the CRD exists", WAIT, || async {
            engine.manager.degraded().is_empty()
        })
        .await?;

        // RBAC-style 403 on one resource: only the plugin watching it.
        main.fail_next(
            FaultRule::new(403, u32::MAX)
                .path("/serviceaccounts")
                .verb("list"),
        );
        engine.manager.upsert(Arc::new(Watching::new(
            "needs-sa",
            resource("", "v1", "ServiceAccount", "serviceaccounts", true),
        )));
        eventually("needs-sa degraded with 403", WAIT, || async {
            engine
                .manager
                .degraded()
                .iter()
                .any(|d| d.plugin == "needs-sa" && d.failure.code == Some(403))
        })
        .await?;
        assert_eq!(engine.manager.degraded().len(), 1);
        set_cm(main, "a", "w");
        eventually("healthy still converges", WAIT, || async {
            all_equal(&child_values(&engine, &clusters, "a"), "w")
        })
        .await?;
        assert_eq!(engine.clusters.get("main").unwrap().health(), Health::Ready);
        // RBAC granted: the watch recovers by itself.
        main.clear_faults();
        eventually(
            "needs-sa recovers once allowed",
            Duration::from_secs(60),
            || async { engine.manager.degraded().is_empty() },
        )
        .await?;
        let metrics = engine.clusters.metrics().encode();
        assert!(metrics.contains("rekon_watch_failed"), "metric missing");
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

/// Secret `s<i>` (labelled `flood=<i>`) maps to ConfigMap `p<i>` through a
/// deliberately slow custom `map`; the reconcile of `p<i>` copies the
/// Secret's value into ConfigMap `out<i>` (not a primary: the primary
/// selector is `role=primary`).
struct SlowMapper {
    registration: Registration,
    maps: Arc<AtomicUsize>,
}

impl Reconciler for SlowMapper {
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
        let i = req.name.trim_start_matches('p').to_owned();
        let value = reads
            .get(&req.cluster, &secrets(), Some("default"), &format!("s{i}"))
            .ok()
            .flatten()
            .and_then(|s| serde_json::from_str::<Value>(&s).ok())
            .and_then(|s| s.pointer("/metadata/annotations/v").cloned())
            .unwrap_or(Value::Null);
        let apply = Action::Apply(ApplyAction {
            cluster: req.cluster.clone(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": format!("out{i}"), "namespace": "default"}, "data": {"value": value}}).to_string(),
            status: false,
            force: true,
        });
        async move {
            Ok(Outcome {
                actions: vec![apply],
                requeue_after_ms: None,
                finalized: false,
            })
        }
        .boxed()
    }

    fn map(
        &self,
        cluster: &str,
        _resource: &Resource,
        object: String,
        _reads: Arc<dyn HostReads>,
    ) -> BoxFuture<'static, Result<Vec<Request>, CallError>> {
        self.maps.fetch_add(1, Ordering::SeqCst);
        let cluster = cluster.to_owned();
        async move {
            // Slower than the flood: a channel without bounds would grow.
            tokio::time::sleep(Duration::from_millis(3)).await;
            let obj: Value = serde_json::from_str(&object).unwrap_or_default();
            let i = obj
                .pointer("/metadata/labels/flood")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            Ok(vec![Request {
                cluster,
                namespace: Some("default".into()),
                name: format!("p{i}"),
            }])
        }
        .boxed()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_storm_stays_bounded_and_every_primary_converges() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let engine = Engine::start(&["main"], &["main"]).await?;
        let main = engine.cluster("main");
        const N: usize = 40;
        const UPDATES: usize = 150;
        for i in 0..N {
            create_labelled_cm(main, &format!("p{i}"), json!({"role": "primary"}));
            main.create(
                "v1",
                "secrets",
                Some("default"),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": format!("s{i}"), "namespace": "default", "labels": {"flood": i.to_string()}, "annotations": {"v": "0"}}}),
            )?;
        }
        let mut registration = FanOut::new("storm", "1.0.0", None).registration;
        registration.primary_selector = Some("role=primary".into());
        registration.watches = vec![Watch {
            resource: secrets(),
            clusters: ClusterSet::Primary,
            mapping: Mapping::Custom,
            label_selector: Some("flood".into()),
        }];
        let maps = Arc::new(AtomicUsize::new(0));
        engine.manager.upsert(Arc::new(SlowMapper {
            registration,
            maps: Arc::clone(&maps),
        }));
        // Flood: every Secret updated UPDATES times, as fast as the server takes it.
        let sampler = {
            let manager = engine.manager.clone();
            tokio::spawn(async move {
                let mut max = 0;
                for _ in 0..400 {
                    max = max.max(manager.pending_events("storm").unwrap_or(0));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
                max
            })
        };
        let flood_started = Instant::now();
        for round in 1..=UPDATES {
            for i in 0..N {
                main.merge_patch(
                    "v1",
                    "secrets",
                    Some("default"),
                    &format!("s{i}"),
                    &json!({"metadata": {"annotations": {"v": round.to_string()}}}),
                    false,
                )?;
            }
            if round % 25 == 0 {
                tokio::task::yield_now().await;
            }
        }
        let flood = flood_started.elapsed();
        let last = UPDATES.to_string();
        for i in 0..N {
            eventually("every primary converges after the storm", WAIT, || async {
                main.get("v1", "configmaps", Some("default"), &format!("out{i}"))
                    .ok()
                    .and_then(|o| o.pointer("/data/value").and_then(Value::as_str).map(str::to_owned))
                    .as_deref()
                    == Some(last.as_str())
            })
            .await?;
        }
        let max_pending = sampler.await?;
        let events = N * UPDATES;
        println!(
            "storm: {events} updates in {flood:?}; map calls {}; max pending objects in the inboxes {max_pending} (bound: 2 per watched object, {} objects)",
            maps.load(Ordering::SeqCst),
            3 * N
        );
        // Coalesced: never more than the watched objects (Secrets, the
        // primaries and their outputs), whatever the event count.
        assert!(max_pending <= 3 * N, "inbox grew to {max_pending}");
        assert!(
            maps.load(Ordering::SeqCst) < events,
            "every event reached the slow map: nothing was coalesced"
        );
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

/// A stalled cluster: its health turns Unreachable within about two probe
/// periods, the other cluster's keys keep converging with the workers the
/// stalled writes would have held, and Events that fail never fail a
/// reconcile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cluster_degrades_only_itself_and_events_are_best_effort() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub"];
        let engine = Engine::start_with(
            &clusters,
            &clusters,
            ControllerConfig {
                max_concurrent_reconciles: 2,
                sync_timeout: Duration::from_secs(3),
                resync_period: None,
                shards: None,
            },
        )
        .await?;
        let main = engine.cluster("main");
        let names: Vec<String> = (0..20).map(|i| format!("t{i}")).collect();
        for n in &names {
            create_cm(main, n, "v1");
        }
        // Every Event fails (403): the fan-out must converge regardless.
        main.fail_next(FaultRule::new(403, u32::MAX).path("/events"));
        let plugin = FanOut::new("fanout", "1.0.0", None);
        engine.manager.upsert(Arc::new(plugin));
        for n in &names {
            eventually("converged although every Event fails", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, n), "v1")
            })
            .await?;
        }
        main.clear_faults();

        // Stall sub, then change every primary.
        engine.cluster("sub").stall();
        let stalled_at = Instant::now();
        for n in &names {
            set_cm(main, n, "v2");
        }
        eventually("sub reported unreachable", WAIT, || async {
            engine.clusters.get("sub").unwrap().health() == Health::Unreachable
        })
        .await?;
        let detected = stalled_at.elapsed();
        eventually("main converges while sub is stalled", WAIT, || async {
            names
                .iter()
                .all(|n| child_value(main, n).as_deref() == Some("v2"))
        })
        .await?;
        let main_done = stalled_at.elapsed();
        engine.cluster("sub").resume();
        let resumed = Instant::now();
        for n in &names {
            eventually("sub catches up after the stall", WAIT, || async {
                child_value(engine.cluster("sub"), n).as_deref() == Some("v2")
            })
            .await?;
        }
        println!(
            "stall: sub unreachable after {detected:?}; 20 primaries converged in main after {:?} with 2 workers; sub caught up {:?} after resume",
            main_done,
            resumed.elapsed()
        );
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
