//! Reliability: stalled clusters, dropped watches, 410 Gone, and bursts of
//! 409/429/500 answers.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube_sim::FaultRule;
use rekon::cluster::Health;

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_cluster_does_not_stop_the_others_and_recovers() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub", "edge"];
        let engine = Engine::start(&clusters, &clusters).await?;
        engine
            .manager
            .upsert(Arc::new(FanOut::new("fanout", "1.0.0", None)));
        create_cm(engine.cluster("main"), "before", "v1");
        eventually("initial fan-out", WAIT, || async {
            all_equal(&child_values(&engine, &clusters, "before"), "v1")
        })
        .await?;

        engine.cluster("edge").stall();
        eventually("edge is seen as unreachable", WAIT, || async {
            engine
                .clusters
                .get("edge")
                .is_some_and(|c| c.health() == Health::Unreachable)
        })
        .await?;
        // New primaries and changes keep flowing to the healthy clusters.
        for i in 0..5 {
            create_cm(engine.cluster("main"), &format!("during{i}"), "v1");
        }
        set_cm(engine.cluster("main"), "before", "v2");
        for i in 0..5 {
            let name = format!("during{i}");
            eventually(
                "fan-out to main and sub while edge stalls",
                WAIT,
                || async { all_equal(&child_values(&engine, &["main", "sub"], &name), "v1") },
            )
            .await?;
        }
        eventually("update reaches main and sub", WAIT, || async {
            all_equal(&child_values(&engine, &["main", "sub"], "before"), "v2")
        })
        .await?;
        assert_eq!(
            engine.clusters.get("main").map(|c| c.health()),
            Some(Health::Ready)
        );

        engine.cluster("edge").resume();
        eventually("edge catches up after resume", WAIT, || async {
            (0..5).all(|i| {
                child_value(engine.cluster("edge"), &format!("during{i}")).as_deref() == Some("v1")
            }) && child_value(engine.cluster("edge"), "before").as_deref() == Some("v2")
        })
        .await?;
        eventually("edge is ready again", WAIT, || async {
            engine
                .clusters
                .get("edge")
                .is_some_and(|c| c.health() == Health::Ready)
        })
        .await?;
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_watches_and_410_relist_without_missing_a_change() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub"];
        let engine = Engine::start(&clusters, &clusters).await?;
        engine
            .manager
            .upsert(Arc::new(FanOut::new("fanout", "1.0.0", None)));
        create_cm(engine.cluster("main"), "t1", "v1");
        create_cm(engine.cluster("main"), "t2", "v1");
        eventually("initial fan-out", WAIT, || async {
            all_equal(&child_values(&engine, &clusters, "t1"), "v1")
                && all_equal(&child_values(&engine, &clusters, "t2"), "v1")
        })
        .await?;

        // What the engine's caches must have seen before a disconnect: an
        // object created and deleted entirely inside a watch gap is invisible
        // to any informer (only a periodic resync repairs that).
        let caches_current = |value: &str| {
            let (value, engine) = (value.to_owned(), &engine);
            async move {
                engine.cached("sub", &secrets(), "t2").is_some()
                    && engine
                        .cached("main", &configmaps(), "t1")
                        .is_some_and(|cm| cm["data"]["value"] == value.as_str())
            }
        };
        eventually("caches current", WAIT, || caches_current("v1")).await?;

        // Dropped watches: changes made right after the disconnect are seen
        // when the watcher resumes from its last resourceVersion.
        for round in 0..3 {
            let value = format!("dropped{round}");
            engine.cluster("main").close_watches();
            engine.cluster("sub").close_watches();
            set_cm(engine.cluster("main"), "t1", &value);
            engine
                .cluster("sub")
                .delete("v1", "secrets", Some("default"), "t2")?;
            eventually("change after a dropped watch", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, "t1"), &value)
                    && child_value(engine.cluster("sub"), "t2").is_some()
            })
            .await?;
            eventually("caches current", WAIT, || caches_current(&value)).await?;
        }

        // 410 Gone: history compacted and watches closed, then changes: the
        // watcher must re-list, and the re-list diff must report the change
        // and the deletion it missed.
        for round in 0..3 {
            let value = format!("expired{round}");
            set_cm(engine.cluster("main"), "t1", &value);
            engine
                .cluster("sub")
                .delete("v1", "secrets", Some("default"), "t2")?;
            engine.cluster("main").compact();
            engine.cluster("sub").compact();
            engine.cluster("main").close_watches();
            engine.cluster("sub").close_watches();
            eventually("change across a 410 re-list", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, "t1"), &value)
                    && child_value(engine.cluster("sub"), "t2").is_some()
            })
            .await?;
            eventually("caches current", WAIT, || caches_current(&value)).await?;
        }
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conflicts_and_error_bursts_are_retried_until_converged() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub", "edge"];
        let engine = Engine::start(&clusters, &clusters).await?;
        engine
            .manager
            .upsert(Arc::new(FanOut::new("fanout", "1.0.0", None)));
        create_cm(engine.cluster("main"), "warm", "v1");
        eventually("initial fan-out", WAIT, || async {
            all_equal(&child_values(&engine, &clusters, "warm"), "v1")
        })
        .await?;

        // Bursts longer than the writer's own retries: the reconcile fails,
        // backs off and is re-run until the world converges.
        engine
            .cluster("sub")
            .fail_next(FaultRule::new(409, 6).verb("patch").path("secrets"));
        engine.cluster("edge").fail_next(
            FaultRule::new(429, 6)
                .verb("patch")
                .path("secrets")
                .retry_after(1),
        );
        engine
            .cluster("main")
            .fail_next(FaultRule::new(500, 10).verb("patch").path("secrets"));
        for i in 0..5 {
            create_cm(engine.cluster("main"), &format!("c{i}"), "v1");
        }
        for i in 0..5 {
            let name = format!("c{i}");
            eventually("convergence despite 409/429/500", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, &name), "v1")
            })
            .await?;
        }
        // Each burst is longer than the number of objects, so convergence
        // implies every fault was hit and retried past.
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
