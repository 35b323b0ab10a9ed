//! Plugin swap and removal; queue guarantees under load.

mod engine_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use engine_support::*;
use rekon::action::{ClusterSet, Mapping, Watch};
use rekon::controller::ControllerConfig;
use serde_json::json;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_swap_requeues_every_primary_and_follows_the_new_watches() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let names = ["a", "b", "c"];
        for n in names {
            create_cm(engine.cluster("main"), n, "v");
        }
        let v1 = Arc::new(FanOut::new("fanout", "1.0.0", None));
        engine.manager.upsert(v1);
        for n in names {
            eventually("v1 fan-out", WAIT, || async { all_equal(&child_values(&engine, &clusters, n), "v") }).await?;
        }
        assert!(!engine.caches.active().iter().any(|(_, r)| r.ends_with("ServiceAccount")));

        // v2: different output, and one more watch (any ServiceAccount
        // change in main wakes every primary).
        let mut v2 = FanOut::new("fanout", "2.0.0", None);
        v2.suffix = "-v2".into();
        v2.registration.watches.push(Watch {
            resource: resource("", "v1", "ServiceAccount", "", true),
            clusters: ClusterSet::Primary,
            mapping: Mapping::AllPrimaries,
            label_selector: None,
        });
        let v2 = Arc::new(v2);
        let observed = Arc::clone(&v2.observed);
        engine.manager.upsert(v2);
        for n in names {
            eventually("every primary reconciled by v2", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, n), "v-v2")
            })
            .await?;
        }
        assert_eq!(observed.names_seen_by("2.0.0").len(), 3);
        eventually("the new watch runs", WAIT, || async {
            engine.caches.active().iter().any(|(c, r)| c == "main" && r.ends_with("ServiceAccount"))
        })
        .await?;
        eventually("children cached", WAIT, || async {
            clusters
                .iter()
                .all(|c| names.iter().all(|n| engine.cached(c, &secrets(), n).is_some()))
        })
        .await?;
        settle(&engine, "fanout", &observed).await?;
        let before: Vec<usize> = names.iter().map(|n| observed.count_for("2.0.0", n)).collect();
        engine.cluster("main").create(
            "v1",
            "serviceaccounts",
            Some("default"),
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "sa", "namespace": "default"}}),
        )?;
        eventually("all-primaries mapping wakes every primary", WAIT, || async {
            names.iter().zip(&before).all(|(n, b)| observed.count_for("2.0.0", n) > *b)
        })
        .await?;

        // Removal stops the controller and releases every watch.
        engine.manager.remove("fanout").await;
        assert!(engine.manager.plugins().is_empty());
        eventually("watches released", WAIT, || async { engine.caches.active().is_empty() }).await?;
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bounded_concurrency_and_no_concurrent_reconciles_of_one_key() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let engine = Engine::start_with(
            &["main"],
            &["main"],
            ControllerConfig {
                max_concurrent_reconciles: 8,
                sync_timeout: Duration::from_secs(3),
                resync_period: None,
                shards: None,
            },
        )
        .await?;
        let mut plugin = FanOut::new("fanout", "1.0.0", None);
        plugin.delay = Duration::from_millis(60);
        plugin.registration.max_concurrent_reconciles = Some(3);
        let plugin = Arc::new(plugin);
        let observed = Arc::clone(&plugin.observed);
        engine.manager.upsert(plugin);
        for i in 0..12 {
            create_cm(engine.cluster("main"), &format!("k{i}"), "0");
        }
        // Keep changing the same keys while their reconciles run.
        for round in 1..=5 {
            for i in 0..12 {
                set_cm(engine.cluster("main"), &format!("k{i}"), &round.to_string());
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
        }
        for i in 0..12 {
            let name = format!("k{i}");
            eventually("last value wins", WAIT, || async {
                all_equal(&child_values(&engine, &["main"], &name), "5")
            })
            .await?;
        }
        let max = observed.max_in_flight.load(Ordering::SeqCst);
        assert!(max <= 3, "registration bound exceeded: {max}");
        assert!(max >= 2, "work should run concurrently: {max}");
        assert!(
            !observed.overlap.load(Ordering::SeqCst),
            "one key was reconciled twice at once"
        );
        // Deduplication: far fewer reconciles than events (12 creates + 60 updates + children).
        let total = observed.requests.lock().len();
        assert!(total < 12 * 6 * 2, "no deduplication: {total} reconciles");
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_resync_requeues_every_primary_without_events() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let engine = Engine::start_with(
            &["main"],
            &["main"],
            ControllerConfig {
                max_concurrent_reconciles: 4,
                sync_timeout: Duration::from_secs(3),
                resync_period: Some(Duration::from_millis(500)),
                shards: None,
            },
        )
        .await?;
        let plugin = Arc::new(FanOut::new("fanout", "1.0.0", None));
        let observed = Arc::clone(&plugin.observed);
        engine.manager.upsert(plugin);
        for n in ["a", "b"] {
            create_cm(engine.cluster("main"), n, "v");
        }
        for n in ["a", "b"] {
            eventually("fan-out", WAIT, || async {
                all_equal(&child_values(&engine, &["main"], n), "v")
            })
            .await?;
        }
        let before = (
            observed.count_for("1.0.0", "a"),
            observed.count_for("1.0.0", "b"),
        );
        eventually(
            "both primaries reconciled again by the resync",
            WAIT,
            || async {
                observed.count_for("1.0.0", "a") >= before.0 + 2
                    && observed.count_for("1.0.0", "b") >= before.1 + 2
            },
        )
        .await?;
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_finishes_in_flight_reconciles() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let engine = Engine::start(&["main", "sub"], &["main", "sub"]).await?;
        let mut plugin = FanOut::new("fanout", "1.0.0", None);
        plugin.delay = Duration::from_millis(700);
        let plugin = Arc::new(plugin);
        let observed = Arc::clone(&plugin.observed);
        engine.manager.upsert(plugin);
        create_cm(engine.cluster("main"), "slow", "v1");
        eventually("a reconcile is in flight", WAIT, || async {
            observed.in_flight.load(Ordering::SeqCst) == 1
        })
        .await?;
        assert_eq!(child_value(engine.cluster("sub"), "slow"), None);
        // Shutdown waits for the running reconcile and its writes.
        engine.manager.shutdown().await;
        assert_eq!(observed.in_flight.load(Ordering::SeqCst), 0);
        assert!(all_equal(
            &child_values(&engine, &["main", "sub"], "slow"),
            "v1"
        ));
        assert!(engine.manager.plugins().is_empty());
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
