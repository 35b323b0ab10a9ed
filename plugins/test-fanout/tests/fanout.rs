//! test-fanout through the SDK's native test kit: every behaviour of
//! `docs/design.md` ("test-fanout") against a fake world of clusters.

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Namespace;
use rekon_sdk::prelude::*;
use rekon_sdk::testkit::World;
use serde_json::{Value, json};
use test_fanout::{
    FINALIZER, JobState, Phase, SPEC_IMMUTABLE_MESSAGE, SPEC_IMMUTABLE_RULE, Test, TestFanout,
    TestSpec, TestStatus,
};

const NS: &str = "team-a";
const NAME: &str = "t1";

fn req() -> Request {
    Request::namespaced("main", NS, NAME)
}

fn test_ref() -> ObjectRef {
    ObjectRef::for_request::<Test>(&req())
}

fn job_ref(cluster: &str) -> ObjectRef {
    ObjectRef::new::<Job>(cluster, Some(NS), NAME)
}

/// Clusters `main` (primary) and `sub`, a Test `team-a/t1` in main.
fn world() -> World {
    let mut world = World::new().primary("main").cluster("sub");
    world.insert_json(
        "main",
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}),
    );
    let mut test = Test::new(
        NAME,
        TestSpec {
            image: "busybox:1.36".into(),
            clusters: None,
        },
    );
    test.metadata.namespace = Some(NS.into());
    world.insert("main", &test);
    world
}

fn converge(world: &mut World) {
    world
        .converge::<TestFanout>(&req(), 10)
        .expect("test-fanout should converge");
}

fn status(world: &World) -> TestStatus {
    world
        .get::<Test>("main", Some(NS), NAME)
        .expect("test exists")
        .status
        .expect("status written")
}

fn state_of(status: &TestStatus, cluster: &str) -> JobState {
    status
        .clusters
        .iter()
        .find(|l| l.cluster == cluster)
        .unwrap_or_else(|| panic!("no status line for cluster {cluster}: {status:?}"))
        .state
}

fn set_job_status(world: &mut World, cluster: &str, status: Value) {
    assert!(
        world.modify(&job_ref(cluster), |job| job["status"] = status),
        "job in {cluster} exists"
    );
}

fn complete() -> Value {
    json!({"succeeded": 1, "completionTime": "2025-01-01T00:05:00Z",
           "conditions": [{"type": "Complete", "status": "True"}]})
}

fn event_reasons(world: &World) -> Vec<String> {
    world.events().into_iter().map(|e| e.reason).collect()
}

#[test]
fn registration_declares_crd_watches_and_finalizer() {
    let reg = World::register::<TestFanout>().unwrap();
    assert_eq!(reg.name, "test-fanout");
    assert_eq!(reg.clusters, ClusterSet::All);
    assert_eq!(reg.primary_clusters, ClusterSet::Primary);
    assert_eq!(reg.finalizer.as_deref(), Some(FINALIZER));
    let jobs = reg
        .watches
        .iter()
        .find(|w| w.resource.kind == "Job")
        .expect("jobs watched");
    assert_eq!(jobs.clusters, ClusterSet::All);
    assert_eq!(
        jobs.mapping,
        Mapping::OwnerLabels(OwnerLabels::new(
            "owner.cluster",
            "owner.namespace",
            "owner.name"
        ))
    );

    let crd = &reg.crds[0];
    assert_eq!(crd["metadata"]["name"], "tests.job.lailin.xyz");
    assert_eq!(crd["spec"]["scope"], "Namespaced");
    assert_eq!(crd["spec"]["names"]["kind"], "Test");
    let v1 = &crd["spec"]["versions"][0];
    assert_eq!(v1["name"], "v1");
    assert!(
        v1["subresources"]["status"].is_object(),
        "status subresource"
    );
    let columns: Vec<&str> = v1["additionalPrinterColumns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(
        columns.contains(&"Phase") && columns.contains(&"Age"),
        "{columns:?}"
    );
    let image = &v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["image"];
    assert_eq!(image["type"], "string");
    // A Test is one run: the API server refuses an edit of its spec.
    let rules = &v1["schema"]["openAPIV3Schema"]["properties"]["spec"]["x-kubernetes-validations"];
    assert_eq!(
        *rules,
        serde_json::json!([{"rule": SPEC_IMMUTABLE_RULE, "message": SPEC_IMMUTABLE_MESSAGE}])
    );
    assert_eq!(serde_json::to_value(Test::crd()).unwrap(), *crd);
    // The TypeScript port registers the same CRD (its copy, crd.json).
    let port: serde_json::Value =
        serde_json::from_str(include_str!("../../test-fanout-ts/crd.json"))
            .expect("plugins/test-fanout-ts/crd.json");
    assert_eq!(
        port, *crd,
        "plugins/test-fanout-ts/crd.json is not the seed's CRD: refresh it"
    );
}

#[test]
fn fans_a_job_out_to_every_cluster() {
    let mut world = world();
    converge(&mut world);

    for cluster in ["main", "sub"] {
        let job: Job = world
            .get(cluster, Some(NS), NAME)
            .unwrap_or_else(|| panic!("job in {cluster}"));
        let labels = job.metadata.labels.clone().unwrap();
        assert_eq!(labels["owner.cluster"], "main");
        assert_eq!(labels["owner.namespace"], NS);
        assert_eq!(labels["owner.name"], NAME);
        let pod = job.spec.unwrap().template.spec.unwrap();
        assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
        assert_eq!(pod.containers.len(), 1);
        assert_eq!(pod.containers[0].name, NAME);
        assert_eq!(pod.containers[0].image.as_deref(), Some("busybox:1.36"));
        let owners = job.metadata.owner_references.unwrap_or_default();
        if cluster == "main" {
            let test: Test = world.get("main", Some(NS), NAME).unwrap();
            assert_eq!(owners.len(), 1);
            assert_eq!(owners[0].kind, "Test");
            assert_eq!(owners[0].api_version, "job.lailin.xyz/v1");
            assert_eq!(Some(&owners[0].uid), test.metadata.uid.as_ref());
            assert_eq!(owners[0].controller, Some(true));
        } else {
            assert!(owners.is_empty(), "owner references cannot cross clusters");
        }
    }
    assert!(
        world.get::<Namespace>("sub", None, NS).is_some(),
        "namespace created in sub"
    );

    let status = status(&world);
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(state_of(&status, "main"), JobState::Pending);
    assert_eq!(state_of(&status, "sub"), JobState::Pending);
    assert!(event_reasons(&world).contains(&"CreatingJobs".to_owned()));
    let test: Test = world.get("main", Some(NS), NAME).unwrap();
    assert!(
        test.metadata
            .finalizers
            .unwrap_or_default()
            .contains(&FINALIZER.to_owned())
    );
}

#[test]
fn converged_world_writes_nothing() {
    let mut world = world();
    converge(&mut world);
    world.assert_no_writes::<TestFanout>(&req());

    set_job_status(&mut world, "sub", json!({"active": 1}));
    converge(&mut world);
    assert_eq!(state_of(&status(&world), "sub"), JobState::Running);
    world.assert_no_writes::<TestFanout>(&req());
    // Events are not repeated either once converged.
    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(outcome.actions.is_empty(), "{outcome:?}");
}

#[test]
fn an_existing_job_is_not_an_error_and_is_left_alone() {
    let mut world = world();
    // A Job of this Test from an earlier run, with an older image.
    world.insert_json(
        "sub",
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": NAME, "namespace": NS,
                            "labels": {"owner.cluster": "main", "owner.namespace": NS, "owner.name": NAME}},
               "spec": {"template": {"spec": {"restartPolicy": "Never",
                        "containers": [{"name": NAME, "image": "busybox:old"}]}}}}),
    );
    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    let creates: Vec<String> = outcome
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Create(c) => Some(format!(
                "{}:{}",
                c.cluster,
                c.object["kind"].as_str().unwrap_or_default()
            )),
            _ => None,
        })
        .collect();
    assert_eq!(creates, ["main:Job"], "only the missing Job is created");
    converge(&mut world);
    let job: Job = world.get("sub", Some(NS), NAME).unwrap();
    assert_eq!(
        job.spec.unwrap().template.spec.unwrap().containers[0]
            .image
            .as_deref(),
        Some("busybox:old")
    );
    // Applying a create of an existing Job again is a no-op, not an error.
    let again = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(!world.apply::<TestFanout>(&req(), &again).unwrap());
}

#[test]
fn a_job_completing_only_in_sub_finishes_the_test_for_good() {
    let mut world = world();
    converge(&mut world);
    set_job_status(&mut world, "main", json!({"active": 1}));
    set_job_status(&mut world, "sub", complete());
    converge(&mut world);

    let status = status(&world);
    assert_eq!(status.phase, Phase::Finished);
    assert_eq!(status.finished_cluster.as_deref(), Some("sub"));
    assert!(status.finished_at.is_some());
    assert_eq!(state_of(&status, "main"), JobState::Running);
    assert_eq!(state_of(&status, "sub"), JobState::Complete);
    assert_eq!(
        event_reasons(&world)
            .iter()
            .filter(|r| *r == "Finished")
            .count(),
        1
    );
    world.assert_no_writes::<TestFanout>(&req());

    // The completed Job disappears (TTL, a person): still finished, and
    // no Job is re-created.
    assert!(world.remove(&job_ref("sub")).is_some());
    converge(&mut world);
    let after = self::status(&world);
    assert_eq!(after.phase, Phase::Finished);
    assert_eq!(after.finished_cluster.as_deref(), Some("sub"));
    assert_eq!(after.finished_at, status.finished_at);
    assert_eq!(state_of(&after, "sub"), JobState::Skipped);
    assert!(!world.contains(&job_ref("sub")));
    assert_eq!(
        event_reasons(&world)
            .iter()
            .filter(|r| *r == "Finished")
            .count(),
        1
    );
}

#[test]
fn completion_time_alone_counts_as_completed() {
    let mut world = world();
    converge(&mut world);
    set_job_status(
        &mut world,
        "main",
        json!({"completionTime": "2025-01-01T00:01:00Z"}),
    );
    converge(&mut world);
    assert_eq!(status(&world).phase, Phase::Finished);
    assert_eq!(status(&world).finished_cluster.as_deref(), Some("main"));
}

#[test]
fn a_failed_job_does_not_finish_the_test() {
    let mut world = world();
    converge(&mut world);
    set_job_status(
        &mut world,
        "sub",
        json!({"failed": 1, "conditions": [{"type": "Failed", "status": "True"}]}),
    );
    converge(&mut world);
    let status = status(&world);
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(state_of(&status, "sub"), JobState::Failed);
}

#[test]
fn a_cluster_engaged_later_gets_its_job_unless_finished() {
    let mut world = world();
    converge(&mut world);
    world.add_cluster("edge", false);
    converge(&mut world);
    assert!(world.contains(&job_ref("edge")), "late cluster gets a Job");
    assert!(world.get::<Namespace>("edge", None, NS).is_some());
    assert_eq!(state_of(&status(&world), "edge"), JobState::Pending);

    set_job_status(&mut world, "edge", complete());
    converge(&mut world);
    assert_eq!(status(&world).phase, Phase::Finished);
    world.add_cluster("late", false);
    converge(&mut world);
    assert!(
        !world.contains(&job_ref("late")),
        "no Job once the Test finished"
    );
    assert_eq!(state_of(&status(&world), "late"), JobState::Skipped);

    // A disengaged cluster leaves the status.
    world.remove_cluster("late");
    converge(&mut world);
    assert!(status(&world).clusters.iter().all(|l| l.cluster != "late"));
}

#[test]
fn an_unreachable_cluster_is_reported_and_retried() {
    let mut world = world();
    converge(&mut world);
    set_job_status(&mut world, "sub", json!({"active": 1}));
    converge(&mut world);
    world.set_health("sub", ClusterHealth::Unreachable);
    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(
        outcome.requeue_after.is_some(),
        "retried while a cluster is down"
    );
    world.apply::<TestFanout>(&req(), &outcome).unwrap();
    let status = status(&world);
    let line = status.clusters.iter().find(|l| l.cluster == "sub").unwrap();
    assert_eq!(line.state, JobState::Unreachable);
    assert_eq!(line.message.as_deref(), Some("last seen: Running"));
    assert!(event_reasons(&world).contains(&"ClusterUnreachable".to_owned()));
    converge(&mut world);
    world.assert_no_writes::<TestFanout>(&req());
    assert_eq!(
        event_reasons(&world)
            .iter()
            .filter(|r| *r == "ClusterUnreachable")
            .count(),
        1
    );

    world.set_health("sub", ClusterHealth::Ready);
    converge(&mut world);
    assert_eq!(state_of(&self::status(&world), "sub"), JobState::Running);
}

#[test]
fn no_job_is_created_in_an_unreachable_cluster() {
    let mut world = world();
    world.set_health("sub", ClusterHealth::Unreachable);
    converge(&mut world);
    assert!(world.contains(&job_ref("main")));
    assert!(!world.contains(&job_ref("sub")));
    assert_eq!(state_of(&status(&world), "sub"), JobState::Unreachable);
    world.set_health("sub", ClusterHealth::Ready);
    converge(&mut world);
    assert!(
        world.contains(&job_ref("sub")),
        "created once the cluster is back"
    );
}

#[test]
fn a_foreign_job_with_the_same_name_is_a_conflict_not_a_completion() {
    let mut world = world();
    world.insert_json(
        "sub",
        json!({"apiVersion": "batch/v1", "kind": "Job",
               "metadata": {"name": NAME, "namespace": NS, "labels": {"app": "other"}},
               "status": {"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}}),
    );
    converge(&mut world);
    let status = status(&world);
    assert_eq!(status.phase, Phase::Running);
    assert_eq!(state_of(&status, "sub"), JobState::Conflict);

    world.delete(&test_ref());
    converge(&mut world);
    assert!(!world.contains(&test_ref()));
    assert!(
        world.contains(&job_ref("sub")),
        "someone else's Job is not deleted"
    );
}

#[test]
fn deleting_the_test_deletes_its_jobs_everywhere() {
    let mut world = world();
    world.add_cluster("edge", false);
    converge(&mut world);
    world.delete(&test_ref());
    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(outcome.finalized);
    let mut deleted: Vec<&str> = outcome
        .actions
        .iter()
        .filter_map(|a| match a {
            Action::Delete(d) => {
                assert_eq!(d.propagation, Some(Propagation::Background));
                assert_eq!(d.target.name, NAME);
                Some(d.target.cluster.as_str())
            }
            _ => None,
        })
        .collect();
    deleted.sort_unstable();
    assert_eq!(deleted, ["edge", "main", "sub"]);
    converge(&mut world);
    assert!(!world.contains(&test_ref()), "finalizer released");
    for cluster in ["main", "sub", "edge"] {
        assert!(
            !world.contains(&job_ref(cluster)),
            "job in {cluster} deleted"
        );
    }
}

#[test]
fn deletion_with_a_cluster_unreachable_does_not_finalize_until_it_returns() {
    let mut world = world();
    converge(&mut world);
    world.set_health("sub", ClusterHealth::Unreachable);
    world.delete(&test_ref());

    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(
        !outcome.finalized,
        "cleanup is not done while sub is unreachable"
    );
    assert!(outcome.requeue_after.is_some());
    // Reachable clusters first, so a failing delete in sub cannot block them.
    let order: Vec<&str> = outcome.writes().map(Action::cluster).collect();
    assert_eq!(order, ["main", "sub"]);
    world.apply::<TestFanout>(&req(), &outcome).unwrap();
    // Even after the deletes went out, the Test stays while sub is down.
    let again = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(!again.finalized);
    world.apply::<TestFanout>(&req(), &again).unwrap();
    assert!(world.contains(&test_ref()));

    world.set_health("sub", ClusterHealth::Ready);
    converge(&mut world);
    assert!(!world.contains(&test_ref()));
    assert!(!world.contains(&job_ref("sub")));
}

#[test]
fn deletion_does_not_finalize_while_a_cleanup_delete_keeps_failing() {
    let mut world = world();
    converge(&mut world);
    world.fail_writes_to(&job_ref("sub"));
    world.delete(&test_ref());
    for round in 0..3 {
        let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
        assert!(outcome.finalized, "every cluster is ready: cleanup is due");
        let err = world.apply::<TestFanout>(&req(), &outcome).unwrap_err();
        assert!(
            err.to_string().contains("sub/team-a/t1"),
            "round {round}: {err}"
        );
        assert!(
            world.contains(&test_ref()),
            "round {round}: the finalizer stays while sub's delete fails"
        );
        assert!(!world.contains(&job_ref("main")), "main's delete went out");
        assert!(world.contains(&job_ref("sub")));
    }
    world.heal("sub");
    converge(&mut world);
    assert!(!world.contains(&test_ref()));
    assert!(!world.contains(&job_ref("sub")));
}

#[test]
fn deletion_waits_for_a_syncing_cluster() {
    let mut world = world();
    converge(&mut world);
    world.set_health("sub", ClusterHealth::Syncing);
    world.delete(&test_ref());
    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(!outcome.finalized);
    world.set_health("sub", ClusterHealth::Ready);
    converge(&mut world);
    assert!(!world.contains(&test_ref()));
}

#[test]
fn a_vanished_test_is_nothing_to_do() {
    let mut world = World::new().primary("main");
    let outcome = world.reconcile::<TestFanout>(&req()).unwrap();
    assert!(outcome.actions.is_empty());
}

#[test]
fn a_running_test_is_looked_at_again_a_finished_one_is_not() {
    let mut world = world();
    converge(&mut world);
    let running = world.reconcile::<TestFanout>(&req()).unwrap();
    assert_eq!(
        running.requeue_after,
        Some(test_fanout::RESYNC),
        "health changes reach the status"
    );
    set_job_status(&mut world, "main", complete());
    converge(&mut world);
    let finished = world.reconcile::<TestFanout>(&req()).unwrap();
    assert_eq!(finished.requeue_after, None);
}

// --- settings --------------------------------------------------------------

#[test]
fn job_defaults_from_the_settings_reach_every_job() {
    let mut world = world().with_settings(json!({
        "job": {"backoffLimit": 2, "activeDeadlineSeconds": 600, "ttlSecondsAfterFinished": 3600}
    }));
    converge(&mut world);
    for cluster in ["main", "sub"] {
        let job: Job = world.get(cluster, Some(NS), NAME).expect("job");
        let spec = job.spec.unwrap();
        assert_eq!(
            (
                spec.backoff_limit,
                spec.active_deadline_seconds,
                spec.ttl_seconds_after_finished
            ),
            (Some(2), Some(600), Some(3600)),
            "{cluster}"
        );
    }
}

#[test]
fn named_clusters_narrow_the_fan_out_and_the_registration() {
    let mut world = world()
        .cluster("other")
        .with_settings(json!({"clusters": ["main", "sub"]}));
    let reg = world.register_plugin::<TestFanout>().unwrap();
    let named = ClusterSet::Named(vec!["main".into(), "sub".into()]);
    assert_eq!(reg.clusters, named);
    assert!(
        reg.permissions
            .iter()
            .all(|p| p.resource.kind != "Job" || p.clusters == named)
    );
    converge(&mut world);
    assert!(world.contains(&job_ref("main")) && world.contains(&job_ref("sub")));
    assert!(!world.contains(&job_ref("other")));
    let clusters: Vec<String> = status(&world)
        .clusters
        .into_iter()
        .map(|c| c.cluster)
        .collect();
    assert_eq!(clusters, ["main", "sub"]);

    // Without settings: every cluster, as before.
    world.set_settings(None);
    converge(&mut world);
    assert!(world.contains(&job_ref("other")));
}

#[test]
fn invalid_fanout_settings_are_refused() {
    for (settings, reason) in [
        (
            json!({"job": {"backoffLimit": -1}}),
            "backoffLimit must not be negative",
        ),
        (json!({"clusters": [""]}), "is not a cluster name"),
        (json!({"cluster": ["a"]}), "unknown field `cluster`"),
    ] {
        let err = world()
            .with_settings(settings.clone())
            .register_plugin::<TestFanout>()
            .expect_err("refused");
        assert!(
            err.to_string().contains("invalid settings: ") && err.to_string().contains(reason),
            "{settings}: {err}"
        );
    }
}
