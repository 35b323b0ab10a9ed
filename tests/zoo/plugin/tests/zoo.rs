//! The zoo through the SDK's native test kit. For every bug: with no fault,
//! the buggy and the fixed variant end in the same state (what makes it a
//! fault bug: a fault-free test cannot tell them apart); with the fault
//! its module's doc names, played by hand on the test kit's world, the
//! buggy variant goes wrong and the fixed one does not.

use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use rekon_sdk::prelude::*;
use rekon_sdk::serde_json::{self, Value, json};
use rekon_sdk::testkit::World;
use rekon_test_zoo::{
    Bug, FINALIZER, Widget, Zoo, ZooSettings, already_exists_forever, delete_after_recreate,
    finalizer_by_index, full_object_write, generate_name_lag, intermediate_status, list_order,
    orphaned_child, owner_labels, resize_restart, transient_cleanup,
};

const NS: &str = "default";
const OTHER_FINALIZER: &str = "other.example.com/keep";

fn req() -> Request {
    Request::namespaced("main", NS, "w")
}

fn widget_ref() -> ObjectRef {
    ObjectRef::for_request::<Widget>(&req())
}

fn cm_ref(cluster: &str, name: &str) -> ObjectRef {
    ObjectRef::new::<ConfigMap>(cluster, Some(NS), name)
}

fn world(bug: Bug, fixed: bool) -> World {
    let settings = serde_json::to_value(ZooSettings::of(bug, fixed)).unwrap();
    let world = World::new().primary("main").with_settings(settings);
    if matches!(
        bug,
        Bug::FinalizerUnreachable | Bug::FullObjectWrite | Bug::CleanupLag
    ) {
        world.cluster("edge")
    } else {
        world
    }
}

fn insert_widget(world: &mut World, spec: Value, finalizers: &[&str]) {
    let mut metadata = json!({"name": "w", "namespace": NS});
    if !finalizers.is_empty() {
        metadata["finalizers"] = json!(finalizers);
    }
    world.insert_json(
        "main",
        json!({"apiVersion": "zoo.rekon.dev/v1", "kind": "Widget", "metadata": metadata, "spec": spec}),
    );
}

/// A ConfigMap someone else made for the Widget (owner labels naming it).
fn insert_member(world: &mut World, name: &str, labels: &[(&str, &str)], data: Value) {
    let mut all = serde_json::to_value(owner_labels().labels_for(&req())).unwrap();
    for (k, v) in labels {
        all[*k] = json!(v);
    }
    world.insert_json(
        "main",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": name, "namespace": NS, "labels": all}, "data": data}),
    );
}

/// The ConfigMap the other writer owns in `full-object-write` (no owner
/// labels: its changes wake nobody).
fn insert_shared(world: &mut World, other: &str) {
    world.insert_json(
        "main",
        json!({"apiVersion": "v1", "kind": "ConfigMap",
               "metadata": {"name": "w-shared", "namespace": NS}, "data": {"other": other}}),
    );
}

fn set_spec(world: &mut World, spec: Value) {
    assert!(world.modify(&widget_ref(), |w| w["spec"] = spec));
}

fn converge(world: &mut World) {
    world.converge_all::<Zoo>(20).unwrap();
}

/// What the explorer's end-state oracle compares, in short: per cluster,
/// the ConfigMaps (a `generateName` child by its prefix) with their data,
/// and the Widget's finalizers and status.
fn end_state(world: &World) -> Value {
    let mut state = serde_json::Map::new();
    for cluster in ["main", "edge"] {
        let mut cms: Vec<Value> = world
            .list::<ConfigMap>(cluster, Some(NS))
            .into_iter()
            .map(|cm| {
                let name = match &cm.metadata.generate_name {
                    Some(prefix) => format!("{prefix}*"),
                    None => cm.metadata.name.clone().unwrap_or_default(),
                };
                json!({"name": name, "data": cm.data, "owned": cm.metadata.owner_references.is_some()})
            })
            .collect();
        cms.sort_by_key(Value::to_string);
        state.insert(format!("{cluster}/configmaps"), Value::Array(cms));
    }
    let widget = world.get_ref(&widget_ref());
    state.insert(
        "widget".into(),
        widget.map_or(
            Value::Null,
            |w| json!({"finalizers": w["metadata"]["finalizers"], "status": w["status"]}),
        ),
    );
    Value::Object(state)
}

fn names(world: &World, cluster: &str) -> Vec<String> {
    world
        .list::<ConfigMap>(cluster, Some(NS))
        .into_iter()
        .filter_map(|cm| cm.metadata.name)
        .collect()
}

fn status(world: &World) -> Value {
    world.get_ref(&widget_ref()).unwrap()["status"].clone()
}

/// Runs only the first `k` actions of the next reconcile of the Widget, as
/// a crash after action `k` leaves it.
fn crash_after(world: &mut World, k: usize) {
    let outcome = world.reconcile::<Zoo>(&req()).unwrap();
    assert!(outcome.actions.len() > k, "{outcome:#?}");
    let partial = Outcome::with_actions(outcome.actions[..k].to_vec());
    world.apply::<Zoo>(&req(), &partial).unwrap();
}

/// The fault-free run of `bug` (the same steps as its scenario), buggy and
/// fixed: both converge to the same end state, which is returned.
fn fault_free(bug: Bug) -> Value {
    let run = |fixed: bool| {
        let mut w = world(bug, fixed);
        play(bug, &mut w);
        let mut end = end_state(&w);
        if bug == Bug::GenerateNameLag {
            // The fix is the name itself: one child either way.
            for cm in end["main/configmaps"].as_array_mut().unwrap() {
                cm["name"] = json!("w-*");
            }
        }
        end
    };
    let buggy = run(false);
    assert_eq!(buggy, run(true), "{} differs with no fault", bug.name());
    buggy
}

/// The steps of `bug`'s scenario on the test kit's world, converging after
/// each (a settle).
fn play(bug: Bug, w: &mut World) {
    match bug {
        Bug::IntermediateStatus
        | Bug::RefusedWrite
        | Bug::GenerateNameLag
        | Bug::AlreadyExistsForever
        | Bug::StatusEveryReconcile => {
            insert_widget(w, json!({}), &[]);
            converge(w);
        }
        Bug::FinalizerUnreachable
        | Bug::OrphanedChild
        | Bug::FinalizerChild
        | Bug::PodToken
        | Bug::CleanupLag => {
            insert_widget(w, json!({}), &[]);
            converge(w);
            w.delete(&widget_ref());
            converge(w);
        }
        Bug::DeleteAfterRecreate => {
            insert_widget(w, json!({}), &[]);
            converge(w);
            insert_member(
                w,
                "job-1",
                &[(delete_after_recreate::EXPIRED, "true")],
                json!({}),
            );
            converge(w);
            insert_member(w, "job-1", &[], json!({}));
            converge(w);
        }
        Bug::TransientCleanup => {
            insert_widget(w, json!({"replicas": 3}), &[]);
            converge(w);
            set_spec(w, json!({"replicas": 2}));
            converge(w);
            set_spec(w, json!({"replicas": 1}));
            converge(w);
        }
        Bug::FinalizerByIndex => {
            insert_widget(w, json!({"holds": ["a", "b"]}), &[OTHER_FINALIZER]);
            converge(w);
            set_spec(w, json!({"holds": []}));
            converge(w);
        }
        Bug::FullObjectWrite => {
            insert_shared(w, "1");
            insert_widget(w, json!({}), &[]);
            converge(w);
            assert!(
                w.modify(&cm_ref("main", "w-shared"), |c| c["data"]["other"] =
                    json!("2"))
            );
            converge(w);
            w.set_health("edge", ClusterHealth::Unreachable);
            converge(w);
            w.set_health("edge", ClusterHealth::Ready);
            converge(w);
        }
        Bug::ResizeRestart => {
            insert_widget(w, json!({"size": 1}), &[]);
            converge(w);
            set_spec(w, json!({"size": 2}));
            converge(w);
        }
        // Input bugs: the buggy and the fixed variant differ with no
        // fault (see their tests).
        Bug::RollbackSkipped => {
            insert_widget(w, json!({"replicas": 1}), &[]);
            converge(w);
            set_spec(w, json!({"replicas": 4}));
            converge(w);
            set_spec(w, json!({"replicas": 1}));
            converge(w);
        }
        Bug::StatusNotApplied => {
            insert_widget(w, json!({"replicas": 1}), &[]);
            converge(w);
            set_spec(w, json!({"replicas": 3}));
            converge(w);
        }
        Bug::OwnWriteDenied => {
            insert_widget(w, json!({"replicas": 2}), &[]);
            converge(w);
            set_spec(w, json!({"replicas": 8}));
            converge(w);
        }
        Bug::ListOrder => {
            for m in ["m-c", "m-a", "m-e", "m-b", "m-d"] {
                insert_member(w, m, &[], json!({}));
            }
            insert_widget(w, json!({}), &[]);
            converge(w);
        }
    }
}

#[test]
fn unknown_or_missing_bug_refuses_the_load() {
    let w = World::new().primary("main");
    let err = w.register_plugin::<Zoo>().unwrap_err().to_string();
    assert!(err.contains("bug is required"), "{err}");
    let w = World::new()
        .primary("main")
        .with_settings(json!({"bug": "no-such-bug"}));
    assert!(w.register_plugin::<Zoo>().is_err());
}

#[test]
fn every_correct_plugin_has_its_folders_and_cleans_up() {
    let zoo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../correct");
    let mut seen = Vec::new();
    for entry in std::fs::read_dir(&zoo).unwrap() {
        let dir = entry.unwrap().path();
        assert!(dir.join("scenario.yaml").is_file(), "{}", dir.display());
        let text = std::fs::read_to_string(dir.join("settings.json")).unwrap();
        let settings: ZooSettings = serde_json::from_str(&text).unwrap();
        let bug = settings.bug.expect("a correct folder names its plugin");
        assert!(Bug::CORRECT.contains(&bug), "{}", dir.display());
        seen.push(bug);
    }
    for bug in Bug::CORRECT {
        assert!(
            seen.contains(&bug),
            "{} has no folder under correct/",
            bug.name()
        );
        let mut w = world(bug, true);
        insert_widget(&mut w, json!({}), &[]);
        converge(&mut w);
        assert_eq!(status(&w)["children"], json!(1), "{}", bug.name());
    }
}

#[test]
fn every_bug_has_its_folder_and_settings() {
    let zoo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for bug in Bug::ALL {
        let dir = zoo.join(bug.name());
        assert!(dir.join("scenario.yaml").is_file(), "{}", dir.display());
        for (file, fixed) in [("buggy.json", false), ("fixed.json", true)] {
            let text = std::fs::read_to_string(dir.join(file)).unwrap();
            let settings: ZooSettings = serde_json::from_str(&text).unwrap();
            assert_eq!(
                settings,
                ZooSettings::of(bug, fixed),
                "{}/{file}",
                bug.name()
            );
        }
    }
}

#[test]
fn intermediate_status() {
    let end = fault_free(Bug::IntermediateStatus);
    assert_eq!(end["widget"]["status"]["phase"], "Ready");
    let child = intermediate_status::child_name(&req());
    for fixed in [false, true] {
        let mut w = world(Bug::IntermediateStatus, fixed);
        insert_widget(&mut w, json!({}), &[]);
        crash_after(&mut w, 1);
        converge(&mut w);
        assert_eq!(status(&w)["phase"], "Ready");
        // Buggy: Ready, and no child behind it.
        assert_eq!(w.contains(&cm_ref("main", &child)), fixed, "fixed={fixed}");
    }
}

#[test]
fn finalizer_unreachable() {
    let end = fault_free(Bug::FinalizerUnreachable);
    assert_eq!(end["widget"], Value::Null);
    assert_eq!(end["edge/configmaps"], json!([]));
    for fixed in [false, true] {
        let mut w = world(Bug::FinalizerUnreachable, fixed);
        insert_widget(&mut w, json!({}), &[]);
        converge(&mut w);
        assert_eq!(names(&w, "edge"), ["w"]);
        let widget: Widget = w.get("main", Some(NS), "w").unwrap();
        assert_eq!(widget.metadata.finalizers.unwrap(), [FINALIZER]);
        w.delete(&widget_ref());
        w.set_health("edge", ClusterHealth::Unreachable);
        converge(&mut w);
        // Buggy: released with edge out of reach.
        assert_eq!(w.contains(&widget_ref()), fixed, "fixed={fixed}");
        w.set_health("edge", ClusterHealth::Ready);
        converge(&mut w);
        assert!(!w.contains(&widget_ref()));
        // Buggy: the child in edge is orphaned.
        assert_eq!(names(&w, "edge").is_empty(), fixed, "fixed={fixed}");
    }
}

#[test]
fn generate_name_lag() {
    let end = fault_free(Bug::GenerateNameLag);
    assert_eq!(end["widget"]["status"]["children"], 1);
    for fixed in [false, true] {
        let mut w = world(Bug::GenerateNameLag, fixed);
        insert_widget(&mut w, json!({}), &[]);
        let create = w.reconcile::<Zoo>(&req()).unwrap();
        w.apply::<Zoo>(&req(), &create).unwrap();
        let made = names(&w, "main");
        assert_eq!(made.len(), 1);
        if fixed {
            assert_eq!(made[0], generate_name_lag::fixed_name(&req()));
        } else {
            assert!(made[0].starts_with(&generate_name_lag::prefix(&req())));
        }
        // The next reconcile, later, on a cache that does not show the
        // child yet.
        w.advance(Duration::from_millis(3));
        let target = cm_ref("main", &made[0]);
        let hidden = w.remove(&target).unwrap();
        let stale = w.reconcile::<Zoo>(&req()).unwrap();
        w.insert_json("main", hidden);
        w.apply::<Zoo>(&req(), &stale).unwrap();
        converge(&mut w);
        // Buggy: a second child under another generated name.
        let expected = if fixed { 1 } else { 2 };
        assert_eq!(names(&w, "main").len(), expected, "fixed={fixed}");
        assert_eq!(status(&w)["children"], expected);
    }
}

#[test]
fn already_exists_forever() {
    let end = fault_free(Bug::AlreadyExistsForever);
    assert_eq!(end["widget"]["status"]["created"], true);
    for fixed in [false, true] {
        let mut w = world(Bug::AlreadyExistsForever, fixed);
        insert_widget(&mut w, json!({}), &[]);
        crash_after(&mut w, 1);
        let child = already_exists_forever::child_name(&req());
        assert!(w.contains(&cm_ref("main", &child)));
        let result = w.converge_all::<Zoo>(5);
        if fixed {
            result.unwrap();
            assert_eq!(status(&w)["created"], true);
        } else {
            // Every reconcile fails, for ever.
            let err = result.unwrap_err().to_string();
            assert!(err.contains("already exists"), "{err}");
            assert!(w.reconcile::<Zoo>(&req()).is_err());
        }
    }
}

#[test]
fn delete_after_recreate() {
    let end = fault_free(Bug::DeleteAfterRecreate);
    assert_eq!(end["widget"]["status"]["live"], json!(["job-1"]));
    for fixed in [false, true] {
        let mut w = world(Bug::DeleteAfterRecreate, fixed);
        insert_widget(&mut w, json!({}), &[]);
        insert_member(
            &mut w,
            "job-1",
            &[(delete_after_recreate::EXPIRED, "true")],
            json!({}),
        );
        // Decided on the expired object ...
        let stale = w.reconcile::<Zoo>(&req()).unwrap();
        assert!(stale.find_delete::<ConfigMap>("main", "job-1").is_some());
        // ... performed after it was deleted and recreated (a new uid).
        w.remove(&cm_ref("main", "job-1"));
        insert_member(&mut w, "job-1", &[], json!({"generation": "2"}));
        let performed = w.apply::<Zoo>(&req(), &stale);
        // Fixed: the uid precondition refuses (the host takes that 409 as
        // "already gone"); buggy: the new object is deleted.
        assert_eq!(performed.is_err(), fixed, "fixed={fixed}: {performed:?}");
        assert_eq!(w.contains(&cm_ref("main", "job-1")), fixed, "fixed={fixed}");
    }
}

#[test]
fn transient_cleanup() {
    let end = fault_free(Bug::TransientCleanup);
    assert_eq!(end["main/configmaps"].as_array().unwrap().len(), 1);
    for fixed in [false, true] {
        let mut w = world(Bug::TransientCleanup, fixed);
        insert_widget(&mut w, json!({"replicas": 3}), &[]);
        converge(&mut w);
        // 3 → 2 → 1 with the 2 never seen.
        set_spec(&mut w, json!({"replicas": 2}));
        set_spec(&mut w, json!({"replicas": 1}));
        converge(&mut w);
        let expected: Vec<String> = if fixed {
            vec![transient_cleanup::child_name(&req(), 0)]
        } else {
            vec![
                transient_cleanup::child_name(&req(), 0),
                transient_cleanup::child_name(&req(), 2),
            ]
        };
        assert_eq!(names(&w, "main"), expected, "fixed={fixed}");
    }
}

#[test]
fn status_every_reconcile() {
    // Not a fault bug: the buggy variant never settles even with no fault.
    let mut w = world(Bug::StatusEveryReconcile, false);
    insert_widget(&mut w, json!({}), &[]);
    assert!(w.converge_all::<Zoo>(20).is_err());
    let mut w = world(Bug::StatusEveryReconcile, true);
    insert_widget(&mut w, json!({}), &[]);
    converge(&mut w);
    w.assert_no_writes::<Zoo>(&req());
}

#[test]
fn finalizer_by_index() {
    let end = fault_free(Bug::FinalizerByIndex);
    assert_eq!(end["widget"]["finalizers"], json!([OTHER_FINALIZER]));
    let hold = |h: &str| format!("{}{h}", finalizer_by_index::HOLD_PREFIX);
    for fixed in [false, true] {
        let mut w = world(Bug::FinalizerByIndex, fixed);
        insert_widget(&mut w, json!({"holds": ["a", "b"]}), &[OTHER_FINALIZER]);
        converge(&mut w);
        let finalizers =
            |w: &World| w.get_ref(&widget_ref()).unwrap()["metadata"]["finalizers"].clone();
        assert_eq!(
            finalizers(&w),
            json!([hold("a"), hold("b"), OTHER_FINALIZER])
        );
        set_spec(&mut w, json!({"holds": []}));
        let before = finalizers(&w);
        let first = w.reconcile::<Zoo>(&req()).unwrap();
        w.apply::<Zoo>(&req(), &first).unwrap();
        assert_eq!(finalizers(&w), json!([hold("a"), OTHER_FINALIZER]));
        // The second release decided on the Widget as it was before the
        // first (its own write not in the cache yet).
        let now = finalizers(&w);
        w.modify(&widget_ref(), |o| o["metadata"]["finalizers"] = before);
        let stale = w.reconcile::<Zoo>(&req()).unwrap();
        w.modify(&widget_ref(), |o| o["metadata"]["finalizers"] = now);
        let performed = w.apply::<Zoo>(&req(), &stale);
        // Fixed: the `test` fails the patch; buggy: the other controller's
        // finalizer is removed.
        assert_eq!(performed.is_err(), fixed, "fixed={fixed}: {performed:?}");
        converge(&mut w);
        let expected = if fixed {
            json!([OTHER_FINALIZER])
        } else {
            json!([])
        };
        assert_eq!(finalizers(&w), expected, "fixed={fixed}");
    }
}

#[test]
fn full_object_write() {
    let end = fault_free(Bug::FullObjectWrite);
    assert_eq!(
        end["main/configmaps"][0]["data"],
        json!({"clusters": "edge,main", "other": "2"})
    );
    assert_eq!(end["widget"]["status"]["readyClusters"], 2);
    let shared = cm_ref("main", &full_object_write::shared_name(&req()));
    let set_other =
        |w: &mut World, v: &str| assert!(w.modify(&shared, |c| c["data"]["other"] = json!(v)));
    for fixed in [false, true] {
        let mut w = world(Bug::FullObjectWrite, fixed);
        insert_shared(&mut w, "1");
        insert_widget(&mut w, json!({}), &[]);
        converge(&mut w);
        set_other(&mut w, "2");
        w.set_health("edge", ClusterHealth::Unreachable);
        // Decided on the shared ConfigMap as it was before the other
        // writer's update.
        set_other(&mut w, "1");
        let stale = w.reconcile::<Zoo>(&req()).unwrap();
        set_other(&mut w, "2");
        w.apply::<Zoo>(&req(), &stale).unwrap();
        w.set_health("edge", ClusterHealth::Ready);
        converge(&mut w);
        let data = w.get_ref(&shared).unwrap()["data"].clone();
        assert_eq!(data["clusters"], "edge,main");
        // Buggy: the other writer's field reverted.
        let other = if fixed { "2" } else { "1" };
        assert_eq!(data["other"], other, "fixed={fixed}");
    }
}

#[test]
fn list_order() {
    let end = fault_free(Bug::ListOrder);
    assert_eq!(end["widget"]["status"]["leader"], "m-a");
    // The test kit lists in name order; the explorer's shuffle does not.
    let listed: Vec<String> = ["m-c", "m-a", "m-b"].map(String::from).to_vec();
    assert_eq!(
        list_order::elect(listed.clone(), false).as_deref(),
        Some("m-c")
    );
    assert_eq!(list_order::elect(listed, true).as_deref(), Some("m-a"));
}

#[test]
fn orphaned_child() {
    let end = fault_free(Bug::OrphanedChild);
    assert_eq!(end["main/configmaps"], json!([]));
    let child = cm_ref("main", &orphaned_child::child_name(&req()));
    for fixed in [false, true] {
        let mut w = world(Bug::OrphanedChild, fixed);
        insert_widget(&mut w, json!({}), &[]);
        // Fixed: one action, nothing to crash between.
        if fixed {
            converge(&mut w);
        } else {
            crash_after(&mut w, 1);
            converge(&mut w);
        }
        assert!(w.contains(&child));
        w.delete(&widget_ref());
        converge(&mut w);
        // Buggy: the child outlives its Widget.
        assert_eq!(!w.contains(&child), fixed, "fixed={fixed}");
    }
}

#[test]
fn resize_restart() {
    let end = fault_free(Bug::ResizeRestart);
    let sizes = json!([
        {"name": "w-child", "data": {"size": "2"}, "owned": false},
        {"name": "w-volume", "data": {"size": "2"}, "owned": false},
    ]);
    assert_eq!(end["main/configmaps"], sizes);
    let volume = cm_ref("main", &resize_restart::volume_name(&req()));
    for fixed in [false, true] {
        let mut w = world(Bug::ResizeRestart, fixed);
        insert_widget(&mut w, json!({"size": 1}), &[]);
        converge(&mut w);
        set_spec(&mut w, json!({"size": 2}));
        // Killed right after the workload's delete.
        crash_after(&mut w, 1);
        converge(&mut w);
        let size = w.get_ref(&volume).unwrap()["data"]["size"].clone();
        // Buggy: the recreated workload sits on the old volume.
        assert_eq!(size == json!("2"), fixed, "fixed={fixed}: {size}");
    }
}

#[test]
fn cleanup_lag() {
    let end = fault_free(Bug::CleanupLag);
    assert_eq!(end["widget"], Value::Null);
    assert_eq!(end["edge/configmaps"], json!([]));
    for fixed in [false, true] {
        let mut w = world(Bug::CleanupLag, fixed);
        insert_widget(&mut w, json!({}), &[]);
        converge(&mut w);
        assert_eq!(names(&w, "edge"), ["w"]);
        assert_eq!(status(&w)["created"], true);
        // The cleanup reconcile, with edge's cache not showing the copy.
        w.delete(&widget_ref());
        let hidden = w.get_ref(&cm_ref("edge", "w")).unwrap();
        w.delete(&cm_ref("edge", "w"));
        let outcome = w.reconcile::<Zoo>(&req()).unwrap();
        w.insert_json("edge", hidden);
        w.apply::<Zoo>(&req(), &outcome).unwrap();
        converge(&mut w);
        assert!(!w.contains(&widget_ref()));
        // Buggy: released on what the lagging cache showed; the copy is
        // orphaned.
        assert_eq!(names(&w, "edge").is_empty(), fixed, "fixed={fixed}");
    }
}

/// The scenarios install `tests/zoo/crds/widgets.zoo.rekon.dev.yaml`; it is
/// the CRD the plugin registers (`ZOO_WRITE_CRD=1` rewrites it).
#[test]
fn the_scenarios_crd_is_the_registered_one() {
    use rekon_sdk::kube::CustomResourceExt as _;
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../crds/widgets.zoo.rekon.dev.yaml");
    let generated = serde_yaml::to_string(&Widget::crd()).unwrap();
    if std::env::var_os("ZOO_WRITE_CRD").is_some() {
        let text = format!(
            "# Generated from rekon_test_zoo::Widget (the CRD the zoo registers); \
             regenerate with ZOO_WRITE_CRD=1 cargo test -p rekon-test-zoo.\n{generated}"
        );
        std::fs::write(&path, text).unwrap();
    }
    let file = std::fs::read_to_string(&path).unwrap_or_default();
    let checked_in: Value = serde_yaml::from_str(&file).unwrap_or(Value::Null);
    assert_eq!(
        checked_in,
        serde_json::to_value(Widget::crd()).unwrap(),
        "{} differs from the registered CRD; regenerate with ZOO_WRITE_CRD=1 cargo test -p rekon-test-zoo\n{generated}",
        path.display()
    );
}

#[test]
fn refused_write() {
    for fixed in [false, true] {
        let w = world(Bug::RefusedWrite, fixed);
        let mut w = w;
        insert_widget(&mut w, json!({}), &[]);
        let outcome = w.reconcile::<Zoo>(&req()).unwrap();
        let create = outcome.creates().next().expect("a create");
        // Buggy: the child of a namespaced kind has no namespace.
        assert_eq!(
            create.object["metadata"]["namespace"].as_str().is_some(),
            fixed,
            "fixed={fixed}"
        );
    }
}

fn child_replicas(w: &World) -> Value {
    let cm = w.get_ref(&cm_ref("main", "w-child")).expect("w-child");
    cm["data"]["replicas"].clone()
}

#[test]
fn rollback_skipped() {
    // No fault: a rollback to a value rolled out before is skipped by the
    // buggy variant; the child keeps the newer value.
    for fixed in [false, true] {
        let mut w = world(Bug::RollbackSkipped, fixed);
        play(Bug::RollbackSkipped, &mut w);
        let expected = if fixed { "1" } else { "4" };
        assert_eq!(child_replicas(&w), json!(expected), "fixed={fixed}");
        // The same spec applied alone: the child says 1 either way.
        let mut fresh = world(Bug::RollbackSkipped, fixed);
        insert_widget(&mut fresh, json!({"replicas": 1}), &[]);
        converge(&mut fresh);
        assert_eq!(child_replicas(&fresh), json!("1"));
        w.assert_no_writes::<Zoo>(&req());
    }
}

#[test]
fn status_not_applied() {
    // No fault: the buggy status says 3 while the child still holds 1.
    for fixed in [false, true] {
        let mut w = world(Bug::StatusNotApplied, fixed);
        play(Bug::StatusNotApplied, &mut w);
        assert_eq!(status(&w)["replicas"], json!(3));
        let expected = if fixed { "3" } else { "1" };
        assert_eq!(child_replicas(&w), json!(expected), "fixed={fixed}");
        w.assert_no_writes::<Zoo>(&req());
    }
}

#[test]
fn own_write_denied() {
    // No fault: both variants settle; the buggy child carries what the
    // plugin's own validation denies, the fixed one what it admits.
    for (fixed, replicas, allowed) in [(false, "8", false), (true, "5", true)] {
        let mut w = world(Bug::OwnWriteDenied, fixed);
        play(Bug::OwnWriteDenied, &mut w);
        let child = w
            .list::<ConfigMap>("main", Some(NS))
            .into_iter()
            .find(|c| c.metadata.name.as_deref() == Some("w-child"))
            .expect("the child");
        assert_eq!(child.data.as_ref().unwrap()["replicas"], replicas);
        let verdict = w.validate::<Zoo>(&AdmissionRequest::create("main", &child));
        assert_eq!(verdict.is_allowed(), allowed, "fixed: {fixed}: {verdict:?}");
    }
}
