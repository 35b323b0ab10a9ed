//! Finalizers: added before the first reconcile, removed only once the
//! plugin reports cleanup done and every cleanup action succeeded.

mod engine_support;

use std::sync::Arc;
use std::time::Duration;

use engine_support::*;
use kube_sim::FaultRule;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(30);
const FINALIZER: &str = "rekon.test/cleanup";

fn finalizers(sim: &kube_sim::SimCluster, name: &str) -> Option<Vec<String>> {
    sim.get("v1", "configmaps", Some("default"), name)
        .ok()
        .map(|cm| {
            cm.pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .map(|a| {
                    a.iter()
                        .filter_map(|f| f.as_str().map(str::to_owned))
                        .collect()
                })
                .unwrap_or_default()
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_finalizer_stays_while_a_cleanup_action_keeps_failing() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub", "edge"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let plugin = Arc::new(FanOut::new("fanout", "1.0.0", Some(FINALIZER)));
        let observed = Arc::clone(&plugin.observed);
        engine.manager.upsert(plugin);
        create_cm(engine.cluster("main"), "t1", "v1");
        eventually("finalizer added and children created", WAIT, || async {
            finalizers(engine.cluster("main"), "t1")
                .is_some_and(|f| f.iter().any(|x| x == FINALIZER))
                && all_equal(&child_values(&engine, &clusters, "t1"), "v1")
        })
        .await?;
        // The first reconcile saw the finalizer already in place: the host
        // adds it and reconciles on the resulting change.
        assert!(observed.count_for("1.0.0", "t1") >= 1);

        // Cleanup in edge keeps failing.
        engine
            .cluster("edge")
            .fail_next(FaultRule::new(500, 100_000).verb("delete").path("secrets"));
        engine
            .cluster("main")
            .delete("v1", "configmaps", Some("default"), "t1")?;
        eventually("children deleted where deletes succeed", WAIT, || async {
            child_value(engine.cluster("main"), "t1").is_none()
                && child_value(engine.cluster("sub"), "t1").is_none()
        })
        .await?;
        let seen = observed.count_for("1.0.0", "t1");
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert!(
            observed.count_for("1.0.0", "t1") > seen,
            "the failing cleanup is retried"
        );
        assert_eq!(
            finalizers(engine.cluster("main"), "t1"),
            Some(vec![FINALIZER.to_owned()]),
            "the finalizer must stay while a cleanup action fails"
        );
        assert!(child_value(engine.cluster("edge"), "t1").is_some());

        // The cluster heals: cleanup completes and the primary goes away.
        engine.cluster("edge").clear_faults();
        eventually(
            "cleanup completes and the primary is gone",
            WAIT,
            || async {
                finalizers(engine.cluster("main"), "t1").is_none()
                    && child_value(engine.cluster("edge"), "t1").is_none()
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
