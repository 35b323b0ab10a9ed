use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{ConfigMap, Node, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use k8s_openapi::jiff::Timestamp;
use kube::core::DynamicObject;
use serde_json::json;

use super::*;
use crate::prelude::*;

const FINALIZER: &str = "labeler.rekon.dev/cleanup";
const POOL_LABEL: &str = "example.com/pool";

fn node(name: &str, labels: &[(&str, &str)]) -> Node {
    let mut n = Node::default();
    n.metadata.name = Some(name.into());
    n.metadata.labels = Some(
        labels
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    n
}

fn config_map(ns: &str, name: &str, data: &[(&str, &str)]) -> ConfigMap {
    let mut cm = ConfigMap::default();
    cm.metadata.name = Some(name.into());
    cm.metadata.namespace = Some(ns.into());
    cm.data = Some(
        data.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    );
    cm
}

/// A realistic plugin: a ConfigMap names a node selector in `data.selector`;
/// every selected node gets label `example.com/pool=<configmap name>` by
/// server-side apply. On deletion the labels are withdrawn.
struct Labeler;

impl Plugin for Labeler {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("labeler", "0.1.0")
            .watch::<Node>(ClusterSet::Primary, Mapping::AllPrimaries)
            .finalizer(FINALIZER)
            .permission::<Node>(
                &[Verb::Get, Verb::List, Verb::Watch, Verb::Patch],
                ClusterSet::Primary,
            )
            .permission::<ConfigMap>(Verb::READ, ClusterSet::Primary))
    }

    fn reconcile(ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let cm = event.into_primary();
        let deleting = cm.metadata.deletion_timestamp.is_some();
        let selector = cm
            .data
            .unwrap_or_default()
            .get("selector")
            .cloned()
            .unwrap_or_default();
        let mut outcome = Outcome::done();
        for n in ctx.list::<Node>(&req.cluster, None, Some(&selector))? {
            let mut applied = Node::default();
            applied.metadata.name = n.metadata.name.clone();
            if !deleting {
                applied.metadata.labels =
                    Some(BTreeMap::from([(POOL_LABEL.to_owned(), req.name.clone())]));
            }
            outcome.push(Action::apply(&req.cluster, &applied));
        }
        crate::info!(ctx, "labelled nodes"; selector = selector, deleting = deleting);
        Ok(outcome)
    }
}

fn labeler_world() -> World {
    let mut world = World::new().primary("main").cluster("sub");
    world.insert(
        "main",
        &node("n1", &[("role", "gpu"), ("kubernetes.io/hostname", "n1")]),
    );
    world.insert("main", &node("n2", &[("role", "gpu")]));
    world.insert("main", &node("n3", &[("role", "cpu")]));
    world.insert(
        "main",
        &config_map("default", "pool-a", &[("selector", "role=gpu")]),
    );
    world
}

fn labels(world: &World, name: &str) -> BTreeMap<String, String> {
    world
        .get::<Node>("main", None, name)
        .and_then(|n| n.metadata.labels)
        .unwrap_or_default()
}

#[test]
fn reconcile_reads_typed_objects_and_returns_applies() {
    let mut world = labeler_world();
    let req = Request::namespaced("main", "default", "pool-a");
    let outcome = world.reconcile::<Labeler>(&req).unwrap();
    let nodes: Vec<Node> = outcome.applied().unwrap();
    let names: Vec<_> = nodes
        .iter()
        .map(|n| n.metadata.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["n1", "n2"]);
    let n1 = outcome.find_apply::<Node>("main", "n1").unwrap();
    assert_eq!(n1.object["apiVersion"], "v1");
    assert_eq!(n1.object["kind"], "Node");
    assert!(outcome.find_apply::<Node>("main", "n3").is_none());
    // The host-side finalizer was added before the reconcile.
    let cm: ConfigMap = world.get("main", Some("default"), "pool-a").unwrap();
    assert_eq!(cm.metadata.finalizers.unwrap(), [FINALIZER]);
    // Logs are captured with their fields.
    let log = world.logs().pop().unwrap();
    assert_eq!(log.level, LogLevel::Info);
    assert!(log.fields.contains(&("selector".into(), "role=gpu".into())));
}

#[test]
fn converge_then_delete_withdraws_labels_and_releases_the_finalizer() {
    let mut world = labeler_world();
    let req = Request::namespaced("main", "default", "pool-a");
    let rounds = world.converge::<Labeler>(&req, 5).unwrap();
    assert_eq!(
        rounds.len(),
        2,
        "one round writes, the second changes nothing"
    );
    assert_eq!(labels(&world, "n1")[POOL_LABEL], "pool-a");
    assert_eq!(
        labels(&world, "n1")["kubernetes.io/hostname"],
        "n1",
        "foreign labels are kept"
    );
    assert!(!labels(&world, "n3").contains_key(POOL_LABEL));
    world.assert_stable::<Labeler>(&req);

    // Deleting the ConfigMap: the finalizer holds it.
    let cm_ref = ObjectRef::for_request::<ConfigMap>(&req);
    assert!(world.delete(&cm_ref));
    let cm: ConfigMap = world.get("main", Some("default"), "pool-a").unwrap();
    assert!(cm.metadata.deletion_timestamp.is_some());

    // The cleanup apply omits the label: server-side apply removes it, and
    // the finalized outcome lets the ConfigMap go.
    let outcome = world.reconcile::<Labeler>(&req).unwrap();
    assert!(outcome.finalized);
    assert!(world.apply::<Labeler>(&req, &outcome).unwrap());
    assert!(!labels(&world, "n1").contains_key(POOL_LABEL));
    assert_eq!(labels(&world, "n1")["role"], "gpu");
    assert!(!world.contains(&cm_ref));
}

#[test]
fn selector_change_moves_labels() {
    let mut world = labeler_world();
    let req = Request::namespaced("main", "default", "pool-a");
    world.converge::<Labeler>(&req, 5).unwrap();
    let cm_ref = ObjectRef::for_request::<ConfigMap>(&req);
    assert!(world.modify(&cm_ref, |cm| cm["data"]["selector"] =
        json!("role in (cpu)")));
    world.converge::<Labeler>(&req, 5).unwrap();
    assert!(labels(&world, "n3").contains_key(POOL_LABEL));
    // n1 is no longer applied at all; its label stays (no apply of n1 was
    // made that omits it), exactly like the API server.
    assert!(labels(&world, "n1").contains_key(POOL_LABEL));
}

/// Reads a Secret it never declared.
struct Snoop;
impl Plugin for Snoop {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("snoop", "0.1.0"))
    }
    fn reconcile(ctx: &Context, req: &Request, _event: Event<ConfigMap>) -> Result<Outcome, Error> {
        ctx.get::<Secret>(&req.cluster, req.namespace.as_deref(), "token")?;
        Ok(Outcome::done())
    }
}

#[test]
fn undeclared_reads_fail_like_on_the_host() {
    let mut world = World::new().primary("main");
    world.insert("main", &config_map("default", "x", &[]));
    let err = world
        .reconcile::<Snoop>(&Request::namespaced("main", "default", "x"))
        .unwrap_err();
    let TestkitError::Reconcile { error, .. } = err else {
        panic!("unexpected {err}")
    };
    assert!(error.is_retryable());
    assert!(error.message().contains("not watched"), "{error}");
    // The unrestricted context is for helper tests.
    assert_eq!(
        world
            .context()
            .get::<Secret>("main", Some("default"), "token"),
        Ok(None)
    );
}

#[test]
fn reads_know_clusters_namespaces_and_selectors() {
    let mut world = World::new().primary("main").cluster("sub");
    world.insert("main", &config_map("a", "one", &[]));
    world.insert("main", &config_map("b", "two", &[]));
    world.insert("sub", &config_map("a", "three", &[]));
    world.insert_json("main", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "labels": {"zone": "x", "gpu": "true"}}}));
    world.insert_json("main", json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n2", "labels": {"zone": "y"}}}));
    let ctx = world.context();
    let all: Vec<ConfigMap> = ctx.list("main", None, None).unwrap();
    assert_eq!(all.len(), 2);
    let in_a: Vec<ConfigMap> = ctx.list("main", Some("a"), None).unwrap();
    assert_eq!(in_a[0].metadata.name.as_deref(), Some("one"));
    assert!(
        ctx.get::<ConfigMap>("sub", Some("a"), "three")
            .unwrap()
            .is_some()
    );
    assert!(
        ctx.get::<ConfigMap>("sub", Some("b"), "three")
            .unwrap()
            .is_none()
    );
    assert_eq!(
        ctx.get::<ConfigMap>("gone", Some("a"), "x"),
        Err(ReadError::UnknownCluster("gone".into()))
    );
    let names = |sel: &str| -> Vec<String> {
        ctx.list::<Node>("main", None, Some(sel))
            .unwrap()
            .into_iter()
            .map(|n| n.metadata.name.unwrap())
            .collect()
    };
    assert_eq!(names("zone=x"), ["n1"]);
    assert_eq!(names("zone==y"), ["n2"]);
    assert_eq!(names("zone!=x"), ["n2"]);
    assert_eq!(names("gpu"), ["n1"]);
    assert_eq!(names("!gpu"), ["n2"]);
    assert_eq!(names("zone in (x, y),!gpu"), ["n2"]);
    assert_eq!(names("zone notin (x)"), ["n2"]);
    assert_eq!(names(""), ["n1", "n2"]);
    assert!(matches!(
        ctx.list::<Node>("main", None, Some("zone in (x")),
        Err(ReadError::InvalidSelector(_))
    ));
    assert!(matches!(
        ctx.list::<Node>("main", None, Some("a=b c")),
        Err(ReadError::InvalidSelector(_))
    ));
    // Untyped reads see the same objects.
    let raw = ctx
        .get_json("main", &ResourceType::of::<Node>(), None, "n1")
        .unwrap()
        .unwrap();
    assert_eq!(raw["metadata"]["labels"]["zone"], "x");
    let dynamic = ctx
        .list_dynamic("main", &ResourceType::of::<Node>(), None, Some("zone=y"))
        .unwrap();
    assert_eq!(dynamic[0].metadata.name.as_deref(), Some("n2"));
}

#[test]
fn clusters_health_and_time_are_visible() {
    let mut world = World::new().primary("main").cluster("sub");
    world.set_health("sub", ClusterHealth::Unreachable);
    world.advance(Duration::from_secs(90));
    let ctx = world.context();
    assert_eq!(ctx.primary_cluster().as_deref(), Some("main"));
    assert_eq!(
        ctx.cluster("sub").unwrap().health,
        ClusterHealth::Unreachable
    );
    assert_eq!(ctx.now().0.as_second(), DEFAULT_TIME_SECONDS + 90);
    world.remove_cluster("sub");
    assert!(world.context().cluster("sub").is_none());
}

/// Writes whatever `data.action` says, to exercise the world's semantics.
struct Writer;
impl Plugin for Writer {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("writer", "0.1.0")
            .finalizer("writer.rekon.dev/f")
            .status_permission::<ConfigMap>(
                &[Verb::Get, Verb::Create, Verb::Patch, Verb::Delete],
                ClusterSet::Primary,
            ))
    }
    fn reconcile(_ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let cm = event.into_primary();
        let data = cm.data.clone().unwrap_or_default();
        let me = ObjectRef::for_request::<ConfigMap>(req);
        let rv = cm.metadata.resource_version.clone().unwrap_or_default();
        let action: Action = match data.get("action").map(String::as_str) {
            Some("merge") => Action::merge_patch(
                me,
                json!({"data": {"merged": "yes"}, "status": {"ignored": true}}),
            )
            .resource_version(rv)
            .into(),
            Some("stale") => Action::merge_patch(me, json!({"data": {"x": "y"}}))
                .resource_version("1")
                .into(),
            Some("json") => Action::json_patch(
                me,
                json!([{"op": "add", "path": "/data/jsoned", "value": "yes"}]),
            )
            .into(),
            Some("bad-json") => {
                Action::json_patch(me, json!([{"op": "remove", "path": "/data/absent"}])).into()
            }
            Some("status") => Action::merge_patch(
                me,
                json!({"status": {"seen": true}, "data": {"ignored": "yes"}}),
            )
            .status()
            .into(),
            Some("create") => {
                Action::create("main", &config_map("default", "child", &[("v", "1")])).into()
            }
            Some("delete") => Action::delete(me).into(),
            Some("wrong-uid") => Action::delete(me).uid("nope").into(),
            Some("secret") => {
                Action::delete(ObjectRef::new::<Secret>("main", Some("default"), "s")).into()
            }
            Some("sub") => Action::merge_patch(
                ObjectRef::new::<ConfigMap>("sub", Some("default"), "x"),
                json!({}),
            )
            .into(),
            _ => return Ok(Outcome::done()),
        };
        Ok(Outcome::done().with(action))
    }
}

fn run_writer(action: &str) -> (World, Result<bool, TestkitError>) {
    let mut world = World::new().primary("main").cluster("sub");
    world.insert("main", &config_map("default", "w", &[("action", action)]));
    world.insert("main", &config_map("default", "child", &[("v", "0")]));
    let req = Request::namespaced("main", "default", "w");
    let outcome = world.reconcile::<Writer>(&req).unwrap();
    let result = world.apply::<Writer>(&req, &outcome);
    (world, result)
}

fn writer_cm(world: &World) -> Option<serde_json::Value> {
    world.get_ref(&ObjectRef::new::<ConfigMap>("main", Some("default"), "w"))
}

#[test]
fn patches_follow_api_semantics() {
    let (world, r) = run_writer("merge");
    assert_eq!(r, Ok(true));
    let cm = writer_cm(&world).unwrap();
    assert_eq!(cm["data"]["merged"], "yes");
    assert!(
        cm.get("status").is_none(),
        "a main-resource patch ignores status"
    );

    let (world, r) = run_writer("json");
    assert_eq!(r, Ok(true));
    assert_eq!(writer_cm(&world).unwrap()["data"]["jsoned"], "yes");

    let (_, r) = run_writer("bad-json");
    assert!(matches!(r, Err(TestkitError::Invalid { .. })), "{r:?}");

    let (_, r) = run_writer("stale");
    assert!(matches!(r, Err(TestkitError::Conflict { .. })), "{r:?}");

    let (world, r) = run_writer("status");
    assert_eq!(r, Ok(true));
    let cm = writer_cm(&world).unwrap();
    assert_eq!(cm["status"]["seen"], true);
    assert!(
        cm["data"].get("ignored").is_none(),
        "a status patch ignores the rest"
    );
}

#[test]
fn create_if_absent_and_deletes() {
    let (world, r) = run_writer("create");
    assert_eq!(r, Ok(false), "the child exists: create leaves it alone");
    let child: ConfigMap = world.get("main", Some("default"), "child").unwrap();
    assert_eq!(child.data.unwrap()["v"], "0");

    let (world, r) = run_writer("delete");
    assert_eq!(r, Ok(true));
    let cm = writer_cm(&world).unwrap();
    assert!(
        cm["metadata"]["deletionTimestamp"].is_string(),
        "the finalizer holds it"
    );

    let (_, r) = run_writer("wrong-uid");
    assert!(matches!(r, Err(TestkitError::Conflict { .. })), "{r:?}");
}

#[test]
fn writes_outside_permissions_are_refused() {
    let (world, r) = run_writer("secret");
    assert!(
        matches!(&r, Err(TestkitError::Forbidden { verb, .. }) if verb == "delete"),
        "{r:?}"
    );
    assert!(r.unwrap_err().to_string().contains("Secret main/default/s"));
    assert!(writer_cm(&world).is_some());
    let (_, r) = run_writer("sub");
    assert!(matches!(r, Err(TestkitError::Forbidden { .. })), "{r:?}");
}

#[test]
fn deletion_cascades_to_owned_objects_unless_orphaned() {
    for orphan in [false, true] {
        let mut world = World::new().primary("main");
        let owner_ref = world.insert("main", &config_map("default", "owner", &[]));
        let owner: ConfigMap = world.get("main", Some("default"), "owner").unwrap();
        let mut child = config_map("default", "child", &[]);
        child.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            name: "owner".into(),
            uid: owner.metadata.uid.clone().unwrap(),
            controller: Some(true),
            ..OwnerReference::default()
        }]);
        let child_ref = world.insert("main", &child);
        let delete = Action::delete(owner_ref.clone());
        let delete = if orphan {
            delete.propagation(Propagation::Orphan)
        } else {
            delete
        };
        world
            .state
            .borrow_mut()
            .perform("test", &delete.into())
            .unwrap();
        assert!(!world.contains(&owner_ref));
        assert_eq!(world.contains(&child_ref), orphan);
        if orphan {
            let child: ConfigMap = world.get("main", Some("default"), "child").unwrap();
            assert_eq!(child.metadata.owner_references, Some(vec![]));
        }
    }
}

fn rv_of(cm: &ConfigMap) -> u64 {
    cm.metadata
        .resource_version
        .clone()
        .unwrap()
        .parse()
        .unwrap()
}

#[test]
fn resource_versions_and_identity_are_stamped() {
    let mut world = World::new().primary("main");
    let r = world.insert("main", &config_map("default", "a", &[]));
    let before: ConfigMap = world.get("main", Some("default"), "a").unwrap();
    assert!(before.metadata.uid.is_some());
    assert!(before.metadata.creation_timestamp.is_some());
    world.modify(&r, |v| v["data"] = json!({"k": "v"}));
    let middle: ConfigMap = world.get("main", Some("default"), "a").unwrap();
    assert!(
        world.update::<ConfigMap>("main", Some("default"), "a", |cm| {
            cm.data
                .get_or_insert_default()
                .insert("typed".into(), "yes".into());
        })
    );
    assert!(!world.update::<ConfigMap>("main", Some("default"), "absent", |_| {}));
    let after: ConfigMap = world.get("main", Some("default"), "a").unwrap();
    assert_eq!(after.data.clone().unwrap()["k"], "v");
    assert_eq!(after.data.clone().unwrap()["typed"], "yes");
    assert!(rv_of(&after) > rv_of(&middle));
    let rv = |cm: &ConfigMap| {
        cm.metadata
            .resource_version
            .clone()
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    assert!(rv(&after) > rv(&before));
    assert_eq!(after.metadata.uid, before.metadata.uid);
}

/// Never settles: bumps a counter annotation on every reconcile.
struct Restless;
impl Plugin for Restless {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("restless", "0.1.0")
            .permission::<ConfigMap>(&[Verb::Patch], ClusterSet::Primary))
    }
    fn reconcile(_ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let cm = event.into_primary();
        let n: u64 = cm
            .annotations()
            .get("n")
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        let patch = json!({"metadata": {"annotations": {"n": (n + 1).to_string()}}});
        Ok(Outcome::done().with(Action::merge_patch(
            ObjectRef::for_request::<ConfigMap>(req),
            patch,
        )))
    }
}

#[test]
fn converge_reports_plugins_that_never_settle() {
    let mut world = World::new().primary("main");
    world.insert("main", &config_map("default", "a", &[]));
    let req = Request::namespaced("main", "default", "a");
    let err = world.converge::<Restless>(&req, 4).unwrap_err();
    assert!(
        matches!(err, TestkitError::NotConverged { rounds: 4, .. }),
        "{err}"
    );
    let cm: ConfigMap = world.get("main", Some("default"), "a").unwrap();
    assert_eq!(cm.annotations()["n"], "4");
    // An absent object is not reconciled at all, as on the host (the
    // plugin would fail on it): converged at once, nothing written.
    let missing = Request::namespaced("main", "default", "missing");
    let outcomes = world.converge::<Restless>(&missing, 4).unwrap();
    assert_eq!(outcomes.len(), 1);
    assert!(!outcomes[0].has_writes());
}

#[test]
#[should_panic(expected = "expected no writes")]
fn assert_no_writes_fails_on_writes() {
    let mut world = World::new().primary("main");
    world.insert("main", &config_map("default", "a", &[]));
    world.assert_no_writes::<Restless>(&Request::namespaced("main", "default", "a"));
}

#[test]
#[should_panic(expected = "to be stable")]
fn assert_stable_fails_on_changes() {
    let mut world = World::new().primary("main");
    world.insert("main", &config_map("default", "a", &[]));
    world.assert_stable::<Restless>(&Request::namespaced("main", "default", "a"));
}

#[test]
fn converge_all_reconciles_every_primary() {
    let mut world = labeler_world();
    world.insert(
        "main",
        &config_map("default", "pool-b", &[("selector", "role=cpu")]),
    );
    world.insert(
        "sub",
        &config_map("default", "elsewhere", &[("selector", "role=cpu")]),
    );
    let rounds = world.converge_all::<Labeler>(5).unwrap();
    assert_eq!(rounds, 2);
    assert_eq!(labels(&world, "n3")[POOL_LABEL], "pool-b");
    assert_eq!(labels(&world, "n2")[POOL_LABEL], "pool-a");
    // Primaries in clusters outside `primary_clusters` are not reconciled.
    let elsewhere: ConfigMap = world.get("sub", Some("default"), "elsewhere").unwrap();
    assert!(elsewhere.metadata.finalizers.is_none());
}

/// Maps a Secret to the ConfigMap named in its `owner` label.
struct Mapper;
impl Plugin for Mapper {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("mapper", "0.1.0")
            .watch::<Secret>(ClusterSet::All, Mapping::Custom))
    }
    fn reconcile(_: &Context, _: &Request, _event: Event<ConfigMap>) -> Result<Outcome, Error> {
        Ok(Outcome::done())
    }
    fn map(
        ctx: &Context,
        _cluster: &str,
        _resource: &ResourceType,
        object: &DynamicObject,
    ) -> Vec<Request> {
        let primary = ctx.primary_cluster().unwrap_or_default();
        object
            .labels()
            .get("owner")
            .map(|o| vec![Request::namespaced(&primary, "default", o)])
            .unwrap_or_default()
    }
}

#[test]
fn map_runs_natively() {
    let mut world = World::new().primary("main").cluster("sub");
    let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "x", "labels": {"owner": "cm1"}}});
    let reqs = world
        .map::<Mapper>("sub", &ResourceType::of::<Secret>(), &secret)
        .unwrap();
    assert_eq!(reqs, [Request::namespaced("main", "default", "cm1")]);
    let unlabelled =
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "t", "namespace": "x"}});
    assert!(
        world
            .map::<Mapper>("sub", &ResourceType::of::<Secret>(), &unlabelled)
            .unwrap()
            .is_empty()
    );
}

struct BadRegistration;
impl Plugin for BadRegistration {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("Not A Label", "1"))
    }
    fn reconcile(_: &Context, _: &Request, _event: Event<ConfigMap>) -> Result<Outcome, Error> {
        Ok(Outcome::done())
    }
}

#[test]
fn invalid_registrations_are_refused() {
    let mut world = World::new().primary("main");
    let err = world
        .reconcile::<BadRegistration>(&Request::namespaced("main", "d", "n"))
        .unwrap_err();
    assert!(matches!(err, TestkitError::Register(_)));
    assert!(err.to_string().contains("not a DNS label"), "{err}");
}

#[test]
fn server_side_apply_of_status_touches_only_status() {
    let mut world = World::new().primary("main");
    let r = world.insert("main", &config_map("default", "a", &[("k", "v")]));
    let mut state = world.state.borrow_mut();
    let applied = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "namespace": "default"}, "data": {"k": "changed"}, "status": {"ok": true}});
    let status = Action::apply_json("main", applied.clone()).status().into();
    assert_eq!(state.perform("p", &status), Ok(true));
    drop(state);
    let v = world.get_ref(&r).unwrap();
    assert_eq!(v["status"]["ok"], true);
    assert_eq!(v["data"]["k"], "v");
    // Status apply of an absent object fails like the API server's 404.
    let missing = Action::apply_json("main", json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "zz", "namespace": "default"}, "status": {}}))
        .status()
        .into();
    assert!(matches!(
        world.state.borrow_mut().perform("p", &missing),
        Err(TestkitError::NotFound { .. })
    ));
}

/// Copies a ConfigMap to `copy-a` and `copy-b` in main and `copy` in sub,
/// then records an event; on deletion deletes the copies and says finalized.
struct Spreader;

const SPREADER_FINALIZER: &str = "spreader.rekon.dev/cleanup";

impl Plugin for Spreader {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("spreader", "0.1.0")
            .clusters(ClusterSet::All)
            .finalizer(SPREADER_FINALIZER)
            .permission::<ConfigMap>(
                &[
                    Verb::Get,
                    Verb::List,
                    Verb::Watch,
                    Verb::Patch,
                    Verb::Delete,
                ],
                ClusterSet::All,
            ))
    }

    fn reconcile(_ctx: &Context, req: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let cm = event.into_primary();
        let copies = [("main", "copy-a"), ("sub", "copy"), ("main", "copy-b")];
        if cm.metadata.deletion_timestamp.is_some() {
            return Ok(Outcome::with_actions(copies.iter().map(|(c, n)| {
                Action::delete(ObjectRef::new::<ConfigMap>(c, Some("default"), n))
            })));
        }
        let mut outcome = Outcome::done();
        for (cluster, name) in copies {
            outcome.push(Action::apply(
                cluster,
                &config_map("default", name, &[("from", req.name.as_str())]),
            ));
        }
        outcome.push(Action::normal_event(
            ObjectRef::for_request::<ConfigMap>(req),
            "Spread",
            "Apply",
            "copied",
        ));
        Ok(outcome)
    }
}

fn spreader_world() -> (World, Request) {
    let mut world = World::new().primary("main").cluster("sub");
    world.insert("main", &config_map("default", "src", &[]));
    (world, Request::namespaced("main", "default", "src"))
}

fn copy_ref(cluster: &str, name: &str) -> ObjectRef {
    ObjectRef::new::<ConfigMap>(cluster, Some("default"), name)
}

#[test]
fn a_failing_cluster_stops_only_its_own_actions() {
    let (mut world, req) = spreader_world();
    world.fail_writes("sub");
    let outcome = world.reconcile::<Spreader>(&req).unwrap();
    let err = world.apply::<Spreader>(&req, &outcome).unwrap_err();
    assert!(
        matches!(&err, TestkitError::WriteFailed { target, .. } if target.contains("sub/default/copy")),
        "{err:?}"
    );
    // main's actions all went out, before and after sub's in the outcome.
    assert!(world.contains(&copy_ref("main", "copy-a")));
    assert!(world.contains(&copy_ref("main", "copy-b")));
    assert!(!world.contains(&copy_ref("sub", "copy")));
    assert_eq!(world.events().len(), 1, "the event is main's");
    // converge reports it too, and keeps failing until healed.
    assert!(matches!(
        world.converge::<Spreader>(&req, 5),
        Err(TestkitError::WriteFailed { .. })
    ));
    world.heal("sub");
    world.converge::<Spreader>(&req, 5).unwrap();
    assert!(world.contains(&copy_ref("sub", "copy")));
}

#[test]
fn a_failing_object_stops_the_rest_of_its_cluster() {
    let (mut world, req) = spreader_world();
    world.fail_writes_to(&copy_ref("main", "copy-a"));
    let outcome = world.reconcile::<Spreader>(&req).unwrap();
    let err = world.apply::<Spreader>(&req, &outcome).unwrap_err();
    assert!(
        err.to_string().contains("ConfigMap main/default/copy-a"),
        "{err}"
    );
    assert!(!world.contains(&copy_ref("main", "copy-a")));
    assert!(
        !world.contains(&copy_ref("main", "copy-b")),
        "later actions of main are not performed"
    );
    assert!(world.events().is_empty(), "nor is main's event");
    assert!(
        world.contains(&copy_ref("sub", "copy")),
        "sub is independent"
    );
    // Healing another cluster changes nothing; healing main does.
    world.heal("sub");
    assert!(world.apply::<Spreader>(&req, &outcome).is_err());
    world.heal("main");
    world.converge::<Spreader>(&req, 5).unwrap();
    assert!(world.contains(&copy_ref("main", "copy-b")));
}

#[test]
fn failures_in_several_clusters_are_all_reported() {
    let (mut world, req) = spreader_world();
    world.fail_writes("sub");
    world.fail_writes_to(&copy_ref("main", "copy-b"));
    let outcome = world.reconcile::<Spreader>(&req).unwrap();
    let err = world.apply::<Spreader>(&req, &outcome).unwrap_err();
    let TestkitError::Writes(errors) = &err else {
        panic!("two failures: {err:?}")
    };
    assert_eq!(errors.len(), 2);
    assert!(world.contains(&copy_ref("main", "copy-a")));
}

#[test]
fn the_finalizer_stays_while_a_cleanup_write_fails() {
    let (mut world, req) = spreader_world();
    world.converge::<Spreader>(&req, 5).unwrap();
    let src = copy_ref("main", "src");
    world.delete(&src);
    world.fail_writes("sub");
    for _ in 0..3 {
        let outcome = world.reconcile::<Spreader>(&req).unwrap();
        assert!(outcome.finalized);
        assert!(world.apply::<Spreader>(&req, &outcome).is_err());
        assert!(world.contains(&src), "finalizer kept while sub fails");
    }
    assert!(!world.contains(&copy_ref("main", "copy-a")));
    assert!(world.contains(&copy_ref("sub", "copy")));
    world.heal("sub");
    world.converge::<Spreader>(&req, 5).unwrap();
    assert!(
        !world.contains(&src),
        "released once every delete succeeded"
    );
    assert!(!world.contains(&copy_ref("sub", "copy")));
}

#[test]
fn now_seconds_is_what_a_stored_time_reads_back_as() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    let round_trip =
        |t: &Time| -> Time { serde_json::from_value(serde_json::to_value(t).unwrap()).unwrap() };
    let mut world = World::new().primary("main");
    for (second, nanos) in [
        (DEFAULT_TIME_SECONDS, 0),
        (DEFAULT_TIME_SECONDS, 999_999_999),
        (DEFAULT_TIME_SECONDS, 1),
        (-1, -500_000_000), // before 1970: floors like the serialization
    ] {
        world.set_time(Timestamp::new(second, nanos).unwrap());
        let ctx = world.context();
        assert_eq!(
            ctx.now_seconds(),
            round_trip(&ctx.now()),
            "{second}.{nanos}"
        );
        assert_eq!(ctx.now_seconds().0.subsec_nanosecond(), 0);
        assert!(!crate::status_changed(
            Some(&round_trip(&ctx.now())),
            &ctx.now()
        ));
    }
    let ctx = world.context();
    assert!(crate::status_changed(
        Some(&ctx.now_seconds()),
        &Time(Timestamp::UNIX_EPOCH)
    ));
}

/// Cleans up by waiting: keeps the finalizer while the ConfigMap says so.
struct Patient;
impl Plugin for Patient {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        Ok(Registration::new::<ConfigMap>("patient", "0.1.0")
            .finalizer("patient.example.com/cleanup")
            .permission::<ConfigMap>(&[Verb::Patch], ClusterSet::Primary))
    }
    fn reconcile(_: &Context, _: &Request, event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let wait = event
            .primary()
            .data
            .as_ref()
            .is_some_and(|d| d.contains_key("wait"));
        Ok(match event {
            Event::Cleanup(_) if wait => Outcome::done()
                .keep_finalizer()
                .requeue_after(Duration::from_secs(1)),
            Event::Apply(_) | Event::Cleanup(_) => Outcome::done(),
        })
    }
}

#[test]
fn cleanup_is_finalized_unless_the_plugin_keeps_the_finalizer() {
    let mut world = World::new().primary("main");
    world.insert("main", &config_map("default", "x", &[("wait", "1")]));
    let req = Request::namespaced("main", "default", "x");
    let live = world.reconcile::<Patient>(&req).unwrap();
    assert!(!live.finalized, "an Apply never finalizes");
    let target = ObjectRef::for_request::<ConfigMap>(&req);
    assert!(world.delete(&target));
    let waiting = world.reconcile::<Patient>(&req).unwrap();
    assert!(!waiting.finalized);
    world.apply::<Patient>(&req, &waiting).unwrap();
    assert!(world.contains(&target), "the finalizer holds the object");
    world.modify(&target, |cm| cm["data"] = json!({}));
    let done = world.reconcile::<Patient>(&req).unwrap();
    assert!(done.finalized, "an Ok cleanup finalizes without a flag");
    world.apply::<Patient>(&req, &done).unwrap();
    assert!(!world.contains(&target));
}

#[test]
fn a_primary_that_does_not_decode_fails_terminally_and_gone_ones_are_skipped() {
    let mut world = World::new().primary("main");
    world.insert_json(
        "main",
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "bad", "namespace": "default"}, "data": {"n": 5}}),
    );
    let err = world
        .reconcile::<Patient>(&Request::namespaced("main", "default", "bad"))
        .unwrap_err();
    let TestkitError::Reconcile { error, .. } = err else {
        panic!("unexpected {err}")
    };
    assert!(!error.is_retryable(), "{error}");
    assert!(error.message().contains("does not decode"), "{error}");
    let gone = world
        .reconcile::<Patient>(&Request::namespaced("main", "default", "gone"))
        .unwrap();
    assert_eq!(gone, Outcome::done());
}

#[test]
fn a_plugin_without_a_settings_type_refuses_settings() {
    // Labeler declares no settings: none is fine, any is refused (a typo'd
    // Plugin object must not run with its settings silently ignored).
    assert!(labeler_world().register_plugin::<Labeler>().is_ok());
    let err = labeler_world()
        .with_settings(json!({"pool": "x"}))
        .register_plugin::<Labeler>()
        .unwrap_err();
    assert!(
        err.to_string()
            .contains("invalid settings: this plugin takes no settings"),
        "{err}"
    );
    // A JSON null is no settings.
    assert!(
        labeler_world()
            .with_settings(serde_json::Value::Null)
            .register_plugin::<Labeler>()
            .is_ok()
    );
}

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct LabelSettings {
    label: String,
}

impl Default for LabelSettings {
    fn default() -> Self {
        Self {
            label: POOL_LABEL.to_owned(),
        }
    }
}

impl crate::Settings for LabelSettings {
    fn validate(&self) -> Result<(), String> {
        if self.label.contains('/') {
            Ok(())
        } else {
            Err(format!("label {:?} has no prefix", self.label))
        }
    }
}

/// Labeler with the label taken from its settings, read both in `register`
/// (logged) and in `reconcile`.
struct SetLabeler;

impl Plugin for SetLabeler {
    type Primary = ConfigMap;

    fn register() -> Result<Registration, Error> {
        let settings: LabelSettings = crate::settings()?;
        Ok(Labeler::register()?
            .settings::<LabelSettings>()
            .primary_selector(&format!("!{}", settings.label)))
    }

    fn reconcile(ctx: &Context, req: &Request, _event: Event<ConfigMap>) -> Result<Outcome, Error> {
        let settings: LabelSettings = ctx.settings()?;
        let mut outcome = Outcome::done();
        for n in ctx.list::<Node>(&req.cluster, None, Some("role=gpu"))? {
            let mut applied = Node::default();
            applied.metadata.name = n.metadata.name.clone();
            applied.metadata.labels =
                Some(BTreeMap::from([(settings.label.clone(), req.name.clone())]));
            outcome.push(Action::apply(&req.cluster, &applied));
        }
        Ok(outcome)
    }
}

#[test]
fn settings_are_validated_at_register_and_read_in_register_and_reconcile() {
    let mut world = labeler_world().with_settings(json!({"label": "example.com/team"}));
    let reg = world.register_plugin::<SetLabeler>().unwrap();
    assert_eq!(reg.primary_selector.as_deref(), Some("!example.com/team"));
    assert_eq!(
        world.settings_schema().unwrap()["properties"]["label"]["type"],
        "string"
    );
    world.converge_all::<SetLabeler>(5).unwrap();
    assert_eq!(labels(&world, "n1")["example.com/team"], "pool-a");

    // Defaults when none are given.
    let mut world = labeler_world();
    world.converge_all::<SetLabeler>(5).unwrap();
    assert_eq!(labels(&world, "n1")[POOL_LABEL], "pool-a");

    for (settings, reason) in [
        (json!({"label": "plain"}), "label \"plain\" has no prefix"),
        (json!({"lable": "a/b"}), "unknown field `lable`"),
        (json!("a/b"), "invalid type: string"),
    ] {
        let err = labeler_world()
            .with_settings(settings.clone())
            .register_plugin::<SetLabeler>()
            .unwrap_err();
        assert!(
            err.to_string().contains("invalid settings: ") && err.to_string().contains(reason),
            "{settings}: {err}"
        );
    }
}
