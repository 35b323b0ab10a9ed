//! Multi-cluster fan-out: writes land in every cluster, events in a
//! non-primary cluster reach the right primary, clusters engaged and
//! disengaged at runtime.

mod engine_support;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use engine_support::*;

const WAIT: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fanout_writes_land_in_every_cluster() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub", "edge"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let plugin = Arc::new(FanOut::new("fanout", "1.0.0", None));
        let observed = Arc::clone(&plugin.observed);
        engine.manager.upsert(plugin);

        create_cm(engine.cluster("main"), "t1", "v1");
        create_cm(engine.cluster("main"), "t2", "v1");
        for name in ["t1", "t2"] {
            eventually("children in all three clusters", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, name), "v1")
            })
            .await?;
        }
        // A change of the primary is applied everywhere (server-side apply).
        set_cm(engine.cluster("main"), "t1", "v2");
        eventually("updated children in all three clusters", WAIT, || async {
            all_equal(&child_values(&engine, &clusters, "t1"), "v2")
        })
        .await?;
        // Requests name the primary's cluster; never a child's.
        assert!(
            observed
                .requests
                .lock()
                .iter()
                .all(|(_, r)| r.cluster == "main")
        );
        assert!(
            !observed.overlap.load(Ordering::SeqCst),
            "a key was reconciled twice at once"
        );
        // An Event was recorded on the primary by rekon.fanout.
        let events =
            engine
                .cluster("main")
                .list("events.k8s.io/v1", "events", Some("default"), "")?;
        assert!(
            events
                .iter()
                .any(|e| e["reportingController"] == "rekon.fanout" && e["reason"] == "FannedOut"),
            "no FannedOut event: {events:?}"
        );
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn event_in_a_non_primary_cluster_reaches_its_primary() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let clusters = ["main", "sub", "edge"];
        let engine = Engine::start(&clusters, &clusters).await?;
        let plugin = Arc::new(FanOut::new("fanout", "1.0.0", None));
        let observed = Arc::clone(&plugin.observed);
        engine.manager.upsert(plugin);
        create_cm(engine.cluster("main"), "t1", "v1");
        create_cm(engine.cluster("main"), "other", "v1");
        for name in ["t1", "other"] {
            eventually("children everywhere", WAIT, || async {
                all_equal(&child_values(&engine, &clusters, name), "v1")
            })
            .await?;
        }
        // The engine's caches have seen every child (a watch may still be
        // re-listing after an early 410 from the simulator).
        eventually("children cached", WAIT, || async {
            clusters.iter().all(|c| {
                engine.cached(c, &secrets(), "t1").is_some()
                    && engine.cached(c, &secrets(), "other").is_some()
            })
        })
        .await?;
        settle(&engine, "fanout", &observed).await?;
        let before_t1 = observed.count_for("1.0.0", "t1");
        let before_other = observed.count_for("1.0.0", "other");

        // Someone deletes the child in edge: the owner labels map the
        // deletion to main/default/t1, whose reconcile recreates it.
        engine
            .cluster("edge")
            .delete("v1", "secrets", Some("default"), "t1")?;
        eventually("the child in edge is recreated", WAIT, || async {
            child_value(engine.cluster("edge"), "t1").as_deref() == Some("v1")
        })
        .await?;
        assert!(observed.count_for("1.0.0", "t1") > before_t1);
        // Someone tampers with the child in sub: reverted.
        engine.cluster("sub").merge_patch(
            "v1",
            "secrets",
            Some("default"),
            "t1",
            &serde_json::json!({"metadata": {"annotations": {"rekon.test/value": "tampered"}}}),
            false,
        )?;
        eventually("the child in sub is reverted", WAIT, || async {
            child_value(engine.cluster("sub"), "t1").as_deref() == Some("v1")
        })
        .await?;
        // Only the primary the event concerned was reconciled again.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(observed.count_for("1.0.0", "other"), before_other);
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clusters_engaged_and_disengaged_at_runtime() {
    tokio::time::timeout(TEST_TIMEOUT, async {
        let engine = Engine::start(&["main", "sub", "late"], &["main", "sub"]).await?;
        let plugin = Arc::new(FanOut::new("fanout", "1.0.0", None));
        engine.manager.upsert(plugin);
        create_cm(engine.cluster("main"), "t1", "v1");
        eventually("children in main and sub", WAIT, || async {
            all_equal(&child_values(&engine, &["main", "sub"], "t1"), "v1")
        })
        .await?;
        assert_eq!(child_value(engine.cluster("late"), "t1"), None);

        // Engage "late": its watches start and every primary is requeued.
        engine
            .clusters
            .add("late", client(&engine.sim, "late").await?)?;
        eventually("the child in the engaged cluster", WAIT, || async {
            child_value(engine.cluster("late"), "t1").as_deref() == Some("v1")
        })
        .await?;
        assert!(engine.caches.active().iter().any(|(c, _)| c == "late"));

        // Disengage it: its caches stop and it gets no more writes.
        assert!(engine.clusters.remove("late")?);
        eventually("caches of the removed cluster stop", WAIT, || async {
            !engine.caches.active().iter().any(|(c, _)| c == "late")
        })
        .await?;
        set_cm(engine.cluster("main"), "t1", "v2");
        eventually("main and sub updated", WAIT, || async {
            all_equal(&child_values(&engine, &["main", "sub"], "t1"), "v2")
        })
        .await?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(
            child_value(engine.cluster("late"), "t1").as_deref(),
            Some("v1")
        );
        assert!(
            engine.clusters.remove("main").is_err(),
            "the primary cannot be removed"
        );
        engine.stop().await;
        anyhow::Ok(())
    })
    .await
    .expect("test timed out: likely deadlocked")
    .unwrap();
}
